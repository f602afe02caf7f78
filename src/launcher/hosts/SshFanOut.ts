/**
 * The ssh fan-out's commands: one session per remote host carries the host's
 * agent (SshSession). Push is sugar for a self-deployed agent: the session
 * runs `bun run agent` there, and the agent dials back in and joins like any
 * other.
 *
 * - ssh's arguments: a tunnel's forward and `ExitOnForwardFailure=yes` first
 *   (OpenSSH takes the first value of an option, so no user option can turn
 *   off the check that the forward is up), then the user's `ssh.options`
 *   (already ssh's words: see ClusterConfig), so they win over cohort's
 *   defaults, then port, user and key, then the target.
 * - The agent's spec (the salt in it) goes down the session's stdin; the
 *   remote shell reads it into a shell variable it does not export and hands
 *   it to the agent on file descriptor 3 (`COHORT_AGENT_SPEC=fd:3`): never
 *   in argv, and never in an environment, which the ranks (the same user)
 *   could read in /proc/<pid>/environ.
 * - The remote shell starts the agent in the background and passes SIGHUP,
 *   SIGTERM and SIGINT on as TERM, then KILL after the grace period (in whole
 *   seconds: `Shutdown.margins`); when the launcher (and so the session) goes,
 *   sshd hangs the shell up.
 */
import type * as Duration from "effect/Duration"
import type { Worker } from "../../config/ClusterConfig.ts"
import { margins } from "../../kernel/Shutdown.ts"

export const sshDefaults = ["-T", "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new"]

/** Single-quoted for a POSIX shell: every interpolated value goes through this. */
export const shellQuote = (value: string): string => `'${value.replaceAll("'", `'\\''`)}'`

/**
 * The user set BatchMode to something other than `yes` (either spelling: `-o BatchMode=no`, `-oBatchMode=no`;
 * any case, spaces around `=`): ssh may then stop to ask for a password nobody will type.
 */
export const batchModeOverridden = (worker: Worker): boolean => batchModeSetting(worker) !== undefined

/** The BatchMode setting that turns it off, as the user wrote it (trimmed); undefined when none does. */
const batchModeSetting = (worker: Worker): string | undefined => {
  const options = worker.ssh?.options ?? []
  return options.flatMap((option, index) => {
    const setting = option.startsWith("-o") && option.length > 2 ? option.slice(2) : options[index - 1] === "-o" ? option : undefined
    const match = setting === undefined ? null : /^\s*batchmode\s*(?:=|\s)\s*(.*?)\s*$/i.exec(setting)
    return match !== null && match[1]!.toLowerCase() !== "yes" ? [setting!.trim()] : []
  })[0]
}

/** The warning a launch and `--dry-run` print for a host whose ssh.options turn BatchMode off; undefined when they do not. */
export const batchModeWarning = (worker: Worker): string | undefined => {
  const setting = batchModeSetting(worker)
  return setting === undefined
    ? undefined
    : `${worker.host}: ssh.options set ${setting}: cohort's ssh is not interactive, so ssh may wait for a password or host key answer nobody types; remove it unless this host needs it`
}

/** The agent half of the remote shell's script: read the spec, enter the checkout, find bun, run the agent, pass signals on. */
export const remoteAgentScript = (worker: Worker, tag: string, grace: Duration.Duration, netTimeoutScale: number, logLevel?: string): string => {
  const path = shellQuote(worker.path)
  const host = shellQuote(worker.host)
  const graceSeconds = margins(grace).remoteShellSeconds
  return [
    "IFS= read -r spec || exit 2",
    `cd ${path} || { echo "cohort: "${path}" is not a directory on "${host}"; give workers[].path as the checkout's path there" >&2; exit 2; }`,
    `BUN=./node_modules/.bin/bun; [ -x "$BUN" ] || BUN=$(command -v bun) || { echo "cohort: no bun in "${path}"/node_modules/.bin or on PATH on "${host}"; run npx --yes bun@1.4.4 install --frozen-lockfile there" >&2; exit 2; }`,
    `[ -f src/cli/agent.ts ] || { echo "cohort: "${path}" on "${host}" is not a cohort checkout (no src/cli/agent.ts)" >&2; exit 2; }`,
    // The tag marks this run's agent on this host for cleanup (RemoteCleanup).
    // The launcher's knobs: an ssh session carries none of its environment.
    `COHORT_AGENT_SPEC=fd:3 COHORT_NET_TIMEOUT_SCALE=${shellQuote(String(netTimeoutScale))}${logLevel === undefined || logLevel.trim() === "" ? "" : ` COHORT_LOG_LEVEL=${shellQuote(logLevel.trim())}`} "$BUN" src/cli/agent.ts --tag ${shellQuote(tag)} 3<<<"$spec" &`,
    "agent=$!",
    `trap 'kill -TERM $agent 2>/dev/null; (sleep ${graceSeconds}; kill -KILL $agent 2>/dev/null) & wait $agent; exit 143' HUP TERM INT`,
    // bash says an agent killed by a signal "Killed" after its wait: that notice would be the session's last
    // words, in place of the agent's own. The status says it (128 + the signal), so it is kept.
    "{ wait $agent; status=$?; } 2>/dev/null",
    "exit $status"
  ].join("\n")
}

/**
 * ssh's argv for one host. With `tunnelPort`, the session also carries the
 * launcher's port to the host's loopback (`-R`), and fails rather than run
 * without it.
 */
export const sshCommand = (worker: Worker, script: string, tunnelPort?: number): Array<string> => {
  const ssh = worker.ssh
  return [
    "ssh",
    // Before the user's options: a tunnel session without its forward is no tunnel, whatever they say.
    ...(tunnelPort === undefined ? [] : ["-R", `127.0.0.1:${tunnelPort}:127.0.0.1:${tunnelPort}`, "-o", "ExitOnForwardFailure=yes"]),
    ...(ssh?.options ?? []),
    ...sshDefaults,
    ...(ssh?.port === undefined ? [] : ["-p", String(ssh.port)]),
    ...(ssh?.user === undefined ? [] : ["-l", ssh.user]),
    ...(ssh?.identityFile === undefined ? [] : ["-i", ssh.identityFile]),
    ssh?.target ?? worker.host,
    // The login shell sshd starts has read the user's rc already, and its environment reaches this bash;
    // reading it again costs what its `conda`/`pyenv init` costs (0.15 s on these machines).
    `bash --norc --noprofile -c ${shellQuote(script)}`
  ]
}
