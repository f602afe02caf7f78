/**
 * A failed rank's signature and its peer-loss signature, read from literal output: Python tracebacks as
 * CPython 3 prints them (chained ones too), torch's gloo and NCCL errors as torch 1.13 and 2.x word them,
 * an entry rank's own report, and programs that print no traceback.
 */
import { describe, expect, test } from "bun:test"
import { errorOf, normalized, peerLossOf, signatureOf } from "../src/kernel/policy/FailureSignature.ts"

const keyErrorTraceback = [
  "epoch 1: 4 rank(s) train it",
  "Traceback (most recent call last):",
  "  File \"/work/train.py\", line 88, in <module>",
  "    sys.exit(main())",
  "  File \"/work/train.py\", line 71, in main",
  "    scale = columns[\"loss_scale\"]",
  "            ~~~~~~~^^^^^^^^^^^^^^",
  "KeyError: 'loss_scale'"
]

const glooTraceback = [
  "Traceback (most recent call last):",
  "  File \"/work/train.py\", line 40, in evaluate",
  "    dist.all_reduce(total)",
  "  File \"/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py\", line 1536, in all_reduce",
  "    work.wait()",
  "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:54221"
]

const ncclTraceback = [
  "Traceback (most recent call last):",
  "  File \"/work/train.py\", line 52, in step",
  "    dist.all_reduce(grad)",
  "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.19.3",
  "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
  "Last error:",
  "socketProgress: Connection closed by remote peer"
]

describe("the error a rank's lines say it died of", () => {
  const table: ReadonlyArray<readonly [string, ReadonlyArray<string>, string | undefined]> = [
    ["a Python traceback: its exception line", keyErrorTraceback, "KeyError: 'loss_scale'"],
    ["a dotted class name", ncclTraceback, "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.19.3"],
    ["an exception with no message", ["Traceback (most recent call last):", "  File \"t.py\", line 1, in <module>", "    raise StopIteration", "StopIteration"], "StopIteration"],
    [
      "chained exceptions: the last one ended the process",
      [
        "Traceback (most recent call last):",
        "  File \"t.py\", line 2, in <module>",
        "ValueError: bad row 12",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        "  File \"t.py\", line 4, in <module>",
        "RuntimeError: could not recover"
      ],
      "RuntimeError: could not recover"
    ],
    ["no traceback: the last line that reads like an error", ["loading shard 3", "fatal: shard 3 is truncated", "cleaning up"], "fatal: shard 3 is truncated"],
    ["no traceback: failure counts as an error word", ["rank 1: simulated failure, exiting 3"], "rank 1: simulated failure, exiting 3"],
    ["words that only contain an error word do not count", ["terror of the errorless", "step 3/4"], undefined],
    ["nothing that reads like an error", ["step 1/4", "step 2/4"], undefined],
    ["no traceback: the last error line, not the first line shaped like an exception", ["loading: shard 3", "fatal: shard 3 is truncated"], "fatal: shard 3 is truncated"],
    ["abort and fail are error words on their own", ["cannot go on, abort"], "cannot go on, abort"],
    ["fail, bare", ["fail: shard 3"], "fail: shard 3"],
    ["an error line is trimmed", ["   fatal: out of disk  "], "fatal: out of disk"],
    ["a traceback's lines ending in a carriage return (output from Windows-minded code)", ["Traceback (most recent call last):\r", "  File \"t.py\", line 1, in <module>\r", "KeyError: 'x'\r"], "KeyError: 'x'"],
    [
      "a line another thread printed between the frames and the exception is not the exception",
      ["Traceback (most recent call last):", "  File \"t.py\", line 3, in <module>", "Exception ignored in: <function Pool.__del__ at 0x7f>", "RuntimeError: x"],
      "RuntimeError: x"
    ],
    ["a traceback quoted inside another line is none: the last error line", ["INFO worker said: Traceback (most recent call last):", "ValueError: x"], "INFO worker said: Traceback (most recent call last):"],
    ["a traceback cut short (its output lost): the last error line, its header", ["step 9", "Traceback (most recent call last):", "  File \"t.py\", line 1, in <module>"], "Traceback (most recent call last):"],
    ["no lines at all", [], undefined]
  ]
  for (const [what, lines, expected] of table) {
    test(what, () => {
      if (expected === undefined) expect(errorOf(lines)).toBeUndefined()
      else expect(errorOf(lines)?.line).toBe(expected)
    })
  }

  test("the block after a traceback's exception line runs to the end (a message over several lines)", () => {
    expect(errorOf(ncclTraceback)?.block).toEqual(ncclTraceback.slice(3))
  })
})

describe("the signature: the status and the error, numbers taken out", () => {
  test("a traceback's exception, with its status", () => {
    expect(signatureOf({ code: 1, lines: keyErrorTraceback })).toEqual({ text: "KeyError: 'loss_scale'", key: "status 1|KeyError: 'loss_scale'" })
  })

  test("an entry rank's own error wins over its lines", () => {
    expect(signatureOf({ code: 1, error: "TypeError: rank 2: simulated bug", lines: ["fatal: something else"] }))
      .toEqual({ text: "TypeError: rank 2: simulated bug", key: "status 1|TypeError: rank #: simulated bug" })
  })

  test("nothing said: the status alone", () => {
    expect(signatureOf({ code: 3, lines: ["step 1/4"] })).toEqual({ text: "exit status 3", key: "status 3" })
    expect(signatureOf({ code: 3 })).toEqual({ text: "exit status 3", key: "status 3" })
  })

  test("an error that is only blanks says nothing: the status alone; one with blanks around it is trimmed", () => {
    expect(signatureOf({ code: 1, error: "   " })).toEqual({ text: "exit status 1", key: "status 1" })
    expect(signatureOf({ code: 1, error: " TypeError: x " })).toEqual({ text: "TypeError: x", key: "status 1|TypeError: x" })
  })

  test("a crash: its detail", () => {
    expect(signatureOf({ detail: "spawn python3 ENOENT" })).toEqual({ text: "spawn python3 ENOENT", key: "crash|spawn python# ENOENT" })
    expect(signatureOf({})).toEqual({ text: "a crash", key: "crash" })
  })

  test("two ranks meeting one bug on different data share a key; another status or another message does not", () => {
    const one = signatureOf({ code: 1, lines: ["Traceback (most recent call last):", "ValueError: NaN in batch 17 at 0x7f3a2c001e40"] })
    const other = signatureOf({ code: 1, lines: ["Traceback (most recent call last):", "ValueError: NaN in batch 93 at 0x55d1e0"] })
    expect(one.key).toBe("status 1|ValueError: NaN in batch # at 0x#")
    expect(other.key).toBe(one.key)
    expect(one.text).toBe("ValueError: NaN in batch 17 at 0x7f3a2c001e40")
    expect(signatureOf({ code: 2, lines: ["Traceback (most recent call last):", "ValueError: NaN in batch 17"] }).key).toBe("status 2|ValueError: NaN in batch #")
    expect(signatureOf({ code: 1, lines: ["Traceback (most recent call last):", "ValueError: inf in batch 17"] }).key).toBe("status 1|ValueError: inf in batch #")
  })

  test("normalized: addresses, then numbers, then runs of blanks", () => {
    expect(normalized("  at 0xDEADbeef, 12 of  40\tleft ")).toBe("at 0x#, # of # left")
  })
})

describe("the peer-loss signature", () => {
  const table: ReadonlyArray<readonly [string, Parameters<typeof peerLossOf>[0], string | undefined]> = [
    ["gloo's closed connection", { code: 1, lines: glooTraceback }, "gloo: connection closed by peer"],
    ["gloo's reset", { code: 1, lines: ["Traceback (most recent call last):", "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:575] Connection reset by peer"] }, "gloo: connection reset by peer"],
    ["NCCL's remote error, on the line after the exception's", { code: 1, lines: ncclTraceback }, "NCCL: remote error"],
    ["NCCL's words in the exception's line itself", { code: 1, lines: ["Traceback (most recent call last):", "RuntimeError: NCCL communicator was aborted: remote process exited or there was a network error"] }, "NCCL: remote error"],
    ["the cohort client's member-lost error", { code: 1, lines: ["Traceback (most recent call last):", "cohort.MemberLost: rank 2 left the group during all_reduce"] }, "cohort: a member was lost"],
    ["an entry rank's error", { code: 1, error: "Error: Connection reset by peer" }, "gloo: connection reset by peer"],
    ["no traceback: the last error line", { code: 1, lines: ["gloo error: Connection closed by peer [10.0.0.2]:5555"] }, "gloo: connection closed by peer"],
    ["a bug", { code: 1, lines: keyErrorTraceback }, undefined],
    [
      "a warning about a peer printed before a traceback is not what the rank died of",
      { code: 1, lines: ["warning: Connection reset by peer, retrying", ...keyErrorTraceback] },
      undefined
    ],
    ["nothing said", { code: 1 }, undefined]
  ]
  for (const [what, report, expected] of table) {
    test(what, () => {
      expect(peerLossOf(report)).toBe(expected)
    })
  }
})
