/**
 * A TCP ping-pong in Bun, the baseline of bench/allreduce-hosts.ts: `server <port>` echoes every read;
 * `client <host> <port> <rounds>` sends 4 bytes, waits for them back, and prints the round trips (ms, JSON).
 */
const [mode, first, second, third] = process.argv.slice(2)
if (mode === "server") {
  Bun.listen({ hostname: "0.0.0.0", port: Number(first), socket: { data: (socket, data) => void socket.write(data) } })
  console.log("ready")
} else {
  const rounds = Number(third)
  const times: Array<number> = []
  let answered = () => {}
  const socket = await Bun.connect({ hostname: first!, port: Number(second), socket: { data: () => answered() } })
  socket.setNoDelay(true)
  const ping = new Uint8Array(4)
  for (let i = 0; i < rounds; i++) {
    const start = performance.now()
    await new Promise<void>((resolve) => {
      answered = resolve
      socket.write(ping)
    })
    times.push(performance.now() - start)
  }
  console.log(JSON.stringify(times))
  socket.end()
}
