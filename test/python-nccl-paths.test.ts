/**
 * The Python client's NCCL and torch-2 paths without a GPU or torch 2 (the suite's torch is Debian's 1.13, and
 * CPU-only): stand-in `dist` modules shaped as each torch is, and what the client does with them. Their runs on
 * a real GPU and torch 2.11 are in bench/README.md ("PyTorch ranks under `backend: nccl`").
 */
import { describe, expect, test } from "bun:test"
import { runPython } from "./support/python-client.ts"

const lines = (code: string) => {
  const ran = runPython(code)
  expect(ran.stderr).toBe("")
  return ran.stdout.trim().split("\n")
}

describe("abort_nccl: the first way to abort an NCCL group this torch has, newest first", () => {
  const harness = (ways: string) => `
import types
from cohort._groups import abort_nccl
said = []
class Backend:
    def abort(self): said.append("backend.abort")
    def _abort(self): said.append("backend._abort")
${ways}
print(abort_nccl(dist, group), said)
`
  test("torch 2.5 and later: distributed_c10d._abort_process_group, on the group", () => {
    expect(lines(harness(`
class Group:
    def abort(self): said.append("group.abort")
group = Group()
dist = types.SimpleNamespace(distributed_c10d=types.SimpleNamespace(_abort_process_group=lambda g: said.append(("c10d", g is group))))`)))
      .toEqual(["distributed_c10d._abort_process_group [('c10d', True)]"])
  })

  test("without it: ProcessGroup.abort; then the NCCL backend's abort; then its _abort; none: None", () => {
    const c10d = "dist = types.SimpleNamespace(distributed_c10d=types.SimpleNamespace())"
    expect(lines(harness(`
class Group:
    def abort(self): said.append("group.abort")
group = Group()
${c10d}`))).toEqual(["ProcessGroup.abort ['group.abort']"])
    // The backend's: _get_backend needs a CUDA device, which a stand-in torch need not have; patched in.
    const backend = (methods: string) => harness(`
import cohort._groups as groups
groups._cuda_device = lambda: "cuda:0"
class Only:
${methods}
class Group:
    def _get_backend(self, device): said.append(device); return Only()
group = Group()
${c10d}`)
    expect(lines(backend("    def abort(self): said.append('backend.abort')"))).toEqual(["ProcessGroupNCCL.abort ['cuda:0', 'backend.abort']"])
    expect(lines(backend("    def _abort(self): said.append('backend._abort')"))).toEqual(["ProcessGroupNCCL._abort ['cuda:0', 'cuda:0', 'backend._abort']"])
    expect(lines(backend("    pass"))).toEqual(["None ['cuda:0', 'cuda:0']"])
  })

  test("an abort that raises (aborted already) still counts as done: the group holds nothing now", () => {
    expect(lines(harness(`
def refuse(group): raise RuntimeError("NCCL communicator was aborted")
group = object()
dist = types.SimpleNamespace(distributed_c10d=types.SimpleNamespace(_abort_process_group=refuse))`)))
      .toEqual(["distributed_c10d._abort_process_group []"])
  })
})

describe("solo_group: ctx.ddp's group of one, which DDP accepts on every torch", () => {
  const harness = (torchTwo: boolean) => `
import types
from cohort._ddp import solo_group
said = []
class ProcessGroup:
    class BackendType:
        GLOO = "gloo-type"
    def __init__(self, store, rank, size): said.append(("ProcessGroup", rank, size))
    def _register_backend(self, device, kind, backend): said.append(("register", device, kind, type(backend).__name__))
    def _set_default_backend(self, kind): said.append(("default", kind))
class ProcessGroupGloo${torchTwo ? "" : "(ProcessGroup)"}:
    def __init__(self, store, rank, size, timeout): said.append(("gloo", rank, size, timeout))
dist = types.SimpleNamespace(HashStore=lambda: "store", ProcessGroup=ProcessGroup, ProcessGroupGloo=ProcessGroupGloo)
torch = types.SimpleNamespace(device=lambda name: "device:" + name)
group = solo_group(torch, dist, 600)
print(type(group).__name__)
for entry in said: print(entry)
`
  test("torch 2: the gloo backend wrapped in a ProcessGroup of one, for CPU and GPU tensors, gloo by default", () => {
    expect(lines(harness(true))).toEqual([
      "ProcessGroup",
      "('gloo', 0, 1, 600)",
      "('ProcessGroup', 0, 1)",
      "('register', 'device:cpu', 'gloo-type', 'ProcessGroupGloo')",
      "('register', 'device:cuda', 'gloo-type', 'ProcessGroupGloo')",
      "('default', 'gloo-type')"
    ])
  })

  test("torch 1: ProcessGroupGloo is a ProcessGroup already, and is used as it is", () => {
    expect(lines(harness(false))).toEqual(["ProcessGroupGloo", "('gloo', 0, 1, 600)"])
  })
})
