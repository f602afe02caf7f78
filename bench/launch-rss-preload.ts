/**
 * Preloaded into the cohort launcher by bench/launch-latency.ts for its memory
 * runs (`bun --preload bench/launch-rss-preload.ts src/cli/launch.ts …`): when
 * the launcher exits, it writes its own peak RSS to $LAUNCH_RSS_FILE, in KiB.
 * That is VmHWM from /proc/self/status: this process's own high-water mark.
 * Not getrusage's ru_maxrss, which keeps the high-water mark of whoever
 * spawned the process (Linux carries it across exec) and so would report the
 * benchmark's own size.
 */
import { readFileSync, writeFileSync } from "node:fs"

const file = process.env.LAUNCH_RSS_FILE
if (file !== undefined) {
  process.on("exit", () => writeFileSync(file, /VmHWM:\s*(\d+)/.exec(readFileSync("/proc/self/status", "utf8"))?.[1] ?? ""))
}
