/**
 * The source a connection is counted and logged under: not its address but
 * the block of addresses one party is likely to hold.
 *
 * Anyone on a machine can dial from any address of 127.0.0.0/8 (16 million
 * of them, no configuration needed), and an IPv6 host is routinely handed a
 * whole /64. Counted by address, a flood from one machine is millions of
 * sources, each under any per-source cap, and a log line each. So loopback
 * is one source (127.0.0.0/8: this machine), other IPv4 addresses count by
 * their /24, IPv6 by its /64 (an IPv4-mapped one, `::ffff:a.b.c.d`, as its
 * IPv4 address). Anything else (an address Bun did not give) is its own.
 */

/** "127.0.0.0/8", "10.1.2.0/24", "2001:db8:0:1::/64": the source `address` belongs to. */
export const sourcePrefix = (address: string): string => {
  // The usual case first, without splitting: a flood asks this once per connection.
  if (address.startsWith("127.") && ipv4(address) !== undefined) return "127.0.0.0/8"
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)
  const v4 = ipv4(mapped === null ? address : mapped[1]!)
  if (v4 !== undefined) return v4[0] === 127 ? "127.0.0.0/8" : `${v4[0]}.${v4[1]}.${v4[2]}.0/24`
  const v6 = ipv6(address)
  if (v6 !== undefined) {
    // Its first four groups, trailing zero groups left to the "::" ("fe80::/64", "2001:db8:0:1::/64", "::/64").
    const groups = v6.slice(0, 4).map((group) => group.toString(16))
    while (groups.length > 0 && groups.at(-1) === "0") groups.pop()
    return `${groups.join(":")}::/64`
  }
  return address
}

const ipv4 = (text: string): ReadonlyArray<number> | undefined => {
  const parts = text.split(".")
  if (parts.length !== 4 || !parts.every((part) => /^\d{1,3}$/.test(part) && Number(part) <= 255)) return undefined
  return parts.map(Number)
}

/** The eight 16-bit groups of an IPv6 address (a zone, `%eth0`, is dropped; an embedded IPv4 tail is two groups). */
const ipv6 = (text: string): ReadonlyArray<number> | undefined => {
  const bare = text.replace(/%.*$/, "").replace(/^\[|\]$/g, "")
  if (!bare.includes(":")) return undefined
  const halves = bare.split("::")
  if (halves.length > 2) return undefined
  const groups = (half: string): Array<number> | undefined => {
    if (half === "") return []
    const out: Array<number> = []
    const parts = half.split(":")
    for (const [index, part] of parts.entries()) {
      const tail = index === parts.length - 1 ? ipv4(part) : undefined
      if (tail !== undefined) out.push((tail[0]! << 8) | tail[1]!, (tail[2]! << 8) | tail[3]!)
      else if (/^[0-9a-f]{1,4}$/i.test(part)) out.push(Number.parseInt(part, 16))
      else return undefined
    }
    return out
  }
  const head = groups(halves[0]!)
  const tail = halves.length === 2 ? groups(halves[1]!) : []
  if (head === undefined || tail === undefined) return undefined
  const missing = 8 - head.length - tail.length
  if (halves.length === 1 ? missing !== 0 : missing < 1) return undefined
  return [...head, ...Array.from({ length: halves.length === 1 ? 0 : missing }, () => 0), ...tail]
}
