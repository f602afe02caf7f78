#!/usr/bin/env bash
# The native library's GPU check, for a lent GPU machine (one H200, 16 cores,
# no network, the repo copied there with ignored paths carried explicitly).
#
# CARRY: pass exactly this as the device tool's `carry`:
#
#   ["node_modules/.cohort-gpu-carry.tar.xz", "src/native/target/release/libcohort_native.so"]
#
# and run it as:  bash scripts/gpu-check.sh        (timeout_s 540; it ends within 8 minutes)
#
# node_modules itself cannot travel: `du -sh node_modules` is 219M, over the
# 64 MiB limit, and Bun's binary alone is 107 MB (node_modules/bun/bin/bun.exe,
# hard-linked again as bunx.exe). So prepare the carry here first, once:
#
#   bash scripts/gpu-check.sh --prepare
#
# which builds the native library if it is missing and packs what the GPU
# check needs (Bun's binary and the .bin/bun link; effect's package.json,
# dist/esm and its own node_modules; @standard-schema; fast-check; pure-rand;
# and for the shrink check's launcher, agent and ranks: yaml, cbor-x and what
# it loads, a few MiB more)
# into node_modules/.cohort-gpu-carry.tar.xz, xz-compressed: 39 MiB (42 MiB
# travelling in all with the 0.5 MiB library and the 2 MiB working tree).
# node_modules/ is ignored by git, so it travels only as carried. It prints
# what will travel in all (tracked and untracked files plus the carry) and
# refuses if that is over 64 MiB.
#
# On the device machine the script: unpacks the carry; prints nvidia-smi -L;
# rebuilds the native library with cargo only if it is missing and cargo
# exists; finds libcudart and NCCL (the torch venv's wheel) when the library's
# own search does not; runs the native tests (GPU, kernels, errors); runs
# bench/nccl-allreduce.ts; and, with 2 or more GPUs and NCCL 2.27 or later, a
# `backend: nccl` job on every GPU whose rank 1 dies: the survivors must say
# they shrank their communicator (ncclCommShrink) rather than build a new one
# (skipped, saying why, with one GPU or an older NCCL).
# Then, where python3 has a torch with CUDA and NCCL, scripts/gpu-torch-rank.py as a `backend: nccl` job on
# every GPU, under ctx.watch and ctx.ddp: it must complete with its gradients reduced on the GPU over NCCL
# (skipped, saying so, without such a torch).
# Everything goes to stdout and to $OUT/gpu-check.txt.
# A failing step is recorded and the next one runs; the exit status is 1 when
# any step failed. Every step has a time limit inside an overall budget.
set -u

cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
CARRY=node_modules/.cohort-gpu-carry.tar.xz
LIB=src/native/target/release/libcohort_native.so
BUN=node_modules/.bin/bun
LIMIT_MIB=64

prepare() {
  set -o pipefail
  if [ ! -f "$LIB" ]; then
    echo "building the native library ($LIB is missing)"
    "$BUN" run build:native || return 1
  fi
  local parts=(
    node_modules/bun/bin/bun.exe node_modules/bun/package.json node_modules/.bin/bun
    node_modules/effect/package.json node_modules/effect/dist/esm node_modules/effect/node_modules
    node_modules/@standard-schema node_modules/fast-check node_modules/pure-rand
    node_modules/yaml node_modules/cbor-x node_modules/cbor-extract node_modules/@cbor-extract
    node_modules/detect-libc node_modules/node-gyp-build-optional-packages
  )
  local part
  for part in "${parts[@]}"; do
    [ -e "$part" ] || [ -L "$part" ] || { echo "missing $part: run bun install first"; return 1; }
  done
  if [ -f "$CARRY" ] && [ -z "$(find "${parts[@]}" -newer "$CARRY" -print -quit)" ]; then
    echo "$CARRY is up to date"
  else
    echo "packing ${parts[*]} into $CARRY (xz, a minute or two)"
    rm -f "$CARRY"
    XZ_OPT="-6 -T0" tar --owner=0 --group=0 -cJf "$CARRY" "${parts[@]}" || return 1
  fi
  local tree carry total
  tree=$(git ls-files -z -co --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  carry=$(du -cbL "$CARRY" "$LIB" | tail -1 | cut -f1)
  total=$((tree + carry))
  printf 'carry: %s %s MiB, %s %s MiB; working tree %s MiB; travelling in all %s MiB (limit %s MiB)\n' \
    "$CARRY" "$(( $(stat -c %s "$CARRY") >> 20 ))" "$LIB" "$(( $(stat -c %s "$LIB") >> 20 ))" \
    "$(( tree >> 20 ))" "$(( total >> 20 ))" "$LIMIT_MIB"
  if [ "$total" -gt $((LIMIT_MIB << 20)) ]; then
    echo "too big to travel: carry less"
    return 1
  fi
  echo "carry: [\"$CARRY\", \"$LIB\"]"
}

if [ "${1:-}" = "--prepare" ]; then
  prepare
  exit
fi

# ---- on the device machine ----

OUT=${OUT:-$ROOT/.scratch/gpu-check}
mkdir -p "$OUT"
LOG=$OUT/gpu-check.txt
BUDGET_S=${GPU_CHECK_BUDGET_S:-520}
RESULTS=()
FAILED=0

# step NAME LIMIT_S COMMAND...: run it within its limit and what is left of the budget; record how it went.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((BUDGET_S - SECONDS))
  if [ "$left" -lt 5 ]; then
    RESULTS+=("SKIP  $name (the ${BUDGET_S}s budget is spent)")
    FAILED=1
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo
  echo "=== $name (limit ${limit}s, at ${SECONDS}s) ==="
  local start=$SECONDS rc
  if declare -F "$1" >/dev/null; then
    "$@"
  else
    timeout -k 5 "$limit" "$@"
  fi
  rc=$?
  local took=$((SECONDS - start))
  if [ "$rc" -eq 0 ]; then
    RESULTS+=("ok    $name (${took}s)")
  else
    [ "$rc" -eq 124 ] && RESULTS+=("FAIL  $name: timed out after ${limit}s") || RESULTS+=("FAIL  $name: exit $rc (${took}s)")
    FAILED=1
  fi
  return "$rc"
}

unpack() {
  if [ -x "$BUN" ] && "$BUN" --version >/dev/null 2>&1; then
    echo "node_modules already holds a working bun"
  elif [ -f "$CARRY" ]; then
    ls -la "$CARRY"
    if ! timeout 120 tar -xJf "$CARRY"; then
      echo "tar -xJf failed; unpacking with Python's lzma"
      timeout 120 python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(".")' "$CARRY" || return 1
    fi
  else
    echo "no $CARRY and no $BUN: carry [\"$CARRY\", \"$LIB\"] (made by: bash scripts/gpu-check.sh --prepare)"
    return 1
  fi
  echo "bun $("$BUN" --version)"
}

native_library() {
  if [ -f "$LIB" ]; then
    ls -la "$LIB"
    return 0
  fi
  if ! command -v cargo >/dev/null; then
    echo "$LIB is missing and cargo is not here: carry it"
    return 1
  fi
  echo "$LIB is missing: building it with cargo"
  CARGO_NET_OFFLINE=true timeout 240 cargo build --release --quiet --manifest-path src/native/Cargo.toml && ls -la "$LIB"
}

# Point COHORT_CUDART_LIB and COHORT_NCCL_LIB at the libraries when the library's own search would miss them.
locate_libraries() {
  echo "--- what the library finds by itself:"
  timeout 30 "$BUN" bench/nccl-allreduce.ts --probe
  local prefix
  prefix=$(timeout 20 python3 -c 'import sys; print(sys.prefix)' 2>/dev/null)
  if [ -n "$prefix" ] && [ -z "${VIRTUAL_ENV:-}" ]; then
    echo "--- with VIRTUAL_ENV=$prefix (python3's environment; the search looks for the nvidia-nccl wheel there):"
    VIRTUAL_ENV=$prefix timeout 30 "$BUN" bench/nccl-allreduce.ts --probe
  fi
  if [ -z "${COHORT_CUDART_LIB:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcudart\.so'; then
    local cudart
    cudart=$(timeout 20 find /usr/local /opt /usr/lib -name 'libcudart.so*' -type f 2>/dev/null | sort | head -1)
    [ -n "$cudart" ] && export COHORT_CUDART_LIB=$cudart && echo "COHORT_CUDART_LIB=$cudart (libcudart is not in ld.so.cache)"
  fi
  if [ -z "${COHORT_NCCL_LIB:-}" ]; then
    local nccl
    nccl=$(timeout 20 python3 -c '
import glob, os
try:
    import nvidia.nccl as m
    for d in m.__path__:
        for p in sorted(glob.glob(os.path.join(d, "lib", "libnccl.so*"))):
            print(p)
except Exception:
    pass' 2>/dev/null | head -1)
    [ -z "$nccl" ] && nccl=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')
    [ -z "$nccl" ] && nccl=$(timeout 20 find /opt /usr/local /usr/lib -name 'libnccl.so.2*' 2>/dev/null | sort | head -1)
    if [ -n "$nccl" ]; then
      export COHORT_NCCL_LIB=$nccl
      echo "COHORT_NCCL_LIB=$nccl"
    else
      echo "no libnccl.so.2 found on this machine"
    fi
  fi
  echo "--- with those settings:"
  timeout 30 "$BUN" bench/nccl-allreduce.ts --probe
}

# A death in a `backend: nccl` job on every GPU: the survivors shrink the communicator they hold
# (test/fixtures/nccl-rank-fixture.ts builds one per generation through ctx.rendezvous.communicator()).
nccl_shrink() {
  local gpus version
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if [ "$gpus" -lt 2 ]; then
    echo "SKIP: the shrink check needs 2 or more GPUs (a death must leave a survivor); this machine has $gpus"
    return 0
  fi
  version=$(timeout 30 "$BUN" bench/nccl-allreduce.ts --probe | sed -n 's/^NCCL: \([0-9][0-9]*\) from .*/\1/p')
  if [ -z "$version" ]; then
    echo "the shrink check cannot run: no NCCL found (see the locate step)"
    return 1
  fi
  if [ "$version" -lt 22700 ]; then
    echo "SKIP: NCCL $version is older than 2.27 (22700): it has no ncclCommShrink, and cohort re-forms with ncclCommInitRank"
    return 0
  fi
  local dir=$OUT/nccl-shrink
  mkdir -p "$dir"
  rm -f "$dir/go" "$dir/launch.txt"
  cat >"$dir/cluster.yml" <<YAML
workers:
  - { host: localhost, devices: all, path: $ROOT }
job:
  entry: test/fixtures/nccl-rank-fixture.ts
  backend: nccl
  args: ["communicator", "fail=1", "trigger=$dir/go", "generations=2"]
failure_policy:
  after_formation:
    elastic: { max_failure: $gpus }
  rules: []
  grace: 5s
YAML
  timeout -k 5 150 "$BUN" src/cli/launch.ts "$dir/cluster.yml" >"$dir/launch.txt" 2>&1 &
  local launcher=$! waited=0
  # Every rank holds generation 0's communicator before rank 1 dies.
  until [ "$(grep -c '\] communicator 0: formed by init' "$dir/launch.txt")" -ge "$gpus" ]; do
    if ! kill -0 "$launcher" 2>/dev/null || [ "$waited" -ge 90 ]; then
      echo "generation 0 never formed on $gpus GPUs within ${waited}s:"
      tail -40 "$dir/launch.txt"
      kill "$launcher" 2>/dev/null
      return 1
    fi
    sleep 1
    waited=$((waited + 1))
  done
  touch "$dir/go"
  wait "$launcher"
  local rc=$? shrank formed
  shrank=$(grep -c "generation 1: shrank generation 0's NCCL communicator" "$dir/launch.txt")
  formed=$(grep -c '\] communicator 1: formed by shrink' "$dir/launch.txt")
  grep -E "shrank|cannot shrink|communicator 1:|run completed|run failed" "$dir/launch.txt"
  if [ "$rc" -ne 0 ] || [ "$shrank" -ne $((gpus - 1)) ] || [ "$formed" -ne $((gpus - 1)) ]; then
    echo "expected the launch to complete and $((gpus - 1)) survivor(s) to shrink; exit $rc, $shrank said they shrank, $formed communicator(s) formed by shrink:"
    tail -60 "$dir/launch.txt"
    return 1
  fi
  echo "NCCL $version: the $((gpus - 1)) survivor(s) shrank generation 0's communicator after rank 1 died"
}

# A PyTorch job with `backend: nccl` on every GPU (examples/torch_elastic.py through the Python client): cohort.init()'s
# NCCL check passes and the run completes. Only where python3 has a torch with CUDA and NCCL; it says so otherwise.
torch_nccl() {
  local python probe
  for python in python3 /usr/bin/python3; do
    probe=$(timeout 60 "$python" -c 'import torch, torch.distributed as d; print(torch.__version__, torch.cuda.is_available(), d.is_nccl_available(), torch.cuda.device_count())' 2>&1 | tail -1)
    case "$probe" in
      *" True True "*) break ;;
    esac
  done
  case "$probe" in
    *" True True "*) ;;
    *)
      echo "SKIP: no python3 here has a torch with CUDA and NCCL (last said: $probe): the torch step needs one"
      return 0
      ;;
  esac
  echo "torch on $python: $probe (version, CUDA, NCCL, devices)"
  local dir=$OUT/torch-nccl mode failed=0
  mkdir -p "$dir"
  # The client's rank (scripts/gpu-torch-rank.py) under ctx.watch and under ctx.ddp, each as a backend: nccl job on
  # every GPU; its JSON line says where the gradients were reduced, the evaluation's sums, the reduction's time on
  # NCCL against the client's gloo path, and the abort it used.
  for mode in watch ddp; do
    cat >"$dir/$mode.yml" <<YAML
name: torch-nccl-$mode
controller: { host: 127.0.0.1, port: 0 }
workers:
  - { host: localhost, devices: all, path: $ROOT, env: { OMP_NUM_THREADS: "1", GLOO_SOCKET_IFNAME: lo } }
job:
  command: [$python, scripts/gpu-torch-rank.py$( [ "$mode" = ddp ] && echo ", --ddp")]
  dataset_size: 24000
  epochs: 3
  backend: nccl
  checkpoint: $dir/$mode-checkpoint.json
failure_policy: { after_formation: elastic, grace: 5s }
YAML
    timeout -k 5 150 "$BUN" src/cli/launch.ts "$dir/$mode.yml" >"$dir/$mode.txt" 2>&1
    local rc=$?
    grep -E "GPU-TORCH|run completed|run failed" "$dir/$mode.txt"
    if [ "$rc" -ne 0 ] || ! grep -q "^cohort: run completed" "$dir/$mode.txt"; then
      echo "expected the torch job ($mode) to complete under backend: nccl; exit $rc:"
      tail -60 "$dir/$mode.txt"
      failed=1
      continue
    fi
    # Each rank's gradients reduced on its GPU over NCCL, none of them through gloo (only the small agreement
    # flags and the evaluation go there), and the evaluation's sums equal on both paths.
    if ! grep -h "GPU-TORCH" "$dir/$mode.txt" | sed 's/.*GPU-TORCH //' | "$python" -c '
import json, sys
for line in sys.stdin:
    facts = json.loads(line)
    nccl, gloo = facts["reductions"]["nccl"], facts["reductions"]["gloo"]
    problems = []
    if nccl["devices"] != ["cuda:0"] or nccl["largest"] < 60000:
        problems.append(f"the gradients were not reduced on the GPU over NCCL: {nccl}")
    if gloo["largest"] >= 1000:
        problems.append("a tensor of %d elements went through gloo" % gloo["largest"])
    if facts["dist_all_reduce"] != facts["correct"] * facts["world"] or facts["ctx_all_reduce"] != facts["dist_all_reduce"]:
        problems.append("the evaluation sums differ")
    if facts["accuracy"] < 0.9:
        problems.append("accuracy %s under 0.9" % facts["accuracy"])
    if facts["aborted_by"] is None:
        problems.append("no way to abort an NCCL group")
    if facts.get("mean_is_one") is False:
        problems.append("the gradient mean of the 25M-parameter model is not 1")
    if problems:
        print("; ".join(problems))
        sys.exit(1)
'; then
      failed=1
    fi
  done
  return "$failed"
}

main() {
  # NCCL says why, if it fails.
  export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
  echo "gpu-check: $(date -u +%FT%TZ) on ${HOSTNAME:-?}, $(uname -srm), $(nproc) cores, in $ROOT"
  step "nvidia-smi" 30 nvidia-smi -L
  timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>/dev/null
  step "unpack the carried Bun and packages" 150 unpack
  step "native library" 260 native_library
  step "locate libcudart and NCCL" 150 locate_libraries
  step "bun test (native GPU, kernels, errors)" 240 "$BUN" test test/native.gpu.test.ts test/native-kernels.test.ts test/native-errors.test.ts
  step "NCCL all-reduce benchmark" 180 "$BUN" bench/nccl-allreduce.ts
  step "NCCL shrink after a death (2+ GPUs, NCCL 2.27+)" 170 nccl_shrink
  step "PyTorch jobs under backend: nccl (a CUDA torch)" 330 torch_nccl
  echo
  echo "=== summary (${SECONDS}s) ==="
  printf '%s\n' "${RESULTS[@]}"
  return "$FAILED"
}

main 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
