/**
 * When an agent dials the launcher again after the launcher closed its dial
 * before answering it.
 *
 * A launcher closes a dial it does not take (a key it does not know, a
 * channel it does not serve, another wire protocol), and, under a flood of
 * connections it has not authenticated, one its door let go to make room
 * before it had read the dial's first bytes (`Door`). The first kind fails
 * every time; the second is over in a moment. So the agent dials again a few
 * times, soon and then less often, saying each time that the launcher may be
 * busy or refusing strangers, and then gives up as a transient failure
 * (exit 1; `--persist` keeps dialling, more slowly). Each delay is stretched
 * by up to a quarter at random, so that a world's agents turned away at once
 * do not all come back at once.
 */

/** The delays before each new dial, in order (ms): seven dials over about 16 s. */
export const HANDSHAKE_RETRY_DELAYS_MS: ReadonlyArray<number> = [250, 500, 1_000, 2_000, 4_000, 8_000]

/** Dials in all, the first included. */
export const HANDSHAKE_DIALS = HANDSHAKE_RETRY_DELAYS_MS.length + 1

/**
 * The wait before dial number `next` (2 for the first retry) after a closed handshake, with `jitter` in [0, 1)
 * stretching it by up to a quarter; undefined once every dial has been made.
 */
export const retryDelayMs = (next: number, jitter: number): number | undefined => {
  const base = HANDSHAKE_RETRY_DELAYS_MS[next - 2]
  return base === undefined ? undefined : Math.round(base * (1 + Math.min(Math.max(jitter, 0), 1) / 4))
}
