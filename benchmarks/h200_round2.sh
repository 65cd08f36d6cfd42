#!/usr/bin/env bash
# Issue 22's acceptance runs on the H200 (no network), through kernel-matrix itself:
# each round-two corpus kernel built natively there for sm_90, then its own suite.
#
#   benchmarks/h200_round2.sh start CARRY WORK   # set up, then run everything in the background
#   benchmarks/h200_round2.sh wait WORK OUT SECS # wait for it (at most SECS), copy the logs to OUT
#
# CARRY (made on the development machine, carried to the device):
#   CARRY/whl/              wheels of what the device's python3 lacks (kernels 0.17.2 and its
#                           dependencies, kernel-matrix's: pydantic, tomli-w, docker, kernel-abi-check)
#   CARRY/cutlass-deps.tgz  the pinned CUTLASS trees, fetched by kernel-matrix's own resolver
#                           (KERNEL_MATRIX_DEPS_CACHE=... python -c 'dependencies.resolve(...)')
#   CARRY/corpus/<kernel>/  copies of ../shared/corpus's kernels, unchanged
# WORK/summary.txt gets one line per build and suite; WORK/logs/ the full logs.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 4
mode=${1:?start or wait}

if [ "$mode" = wait ]; then
  work=${2:?WORK} out=${3:?OUT} secs=${4:-540}
  end=$((SECONDS + secs))
  while [ ! -e "$work/DONE" ] && [ $SECONDS -lt $end ]; do sleep 5; done
  cp "$work/summary.txt" "$work/driver.log" "$out/" 2>/dev/null
  tar czf "$out/logs.tgz" -C "$work" logs 2>/dev/null
  [ -e "$work/DONE" ] && echo "DONE" || echo "STILL RUNNING after ${secs}s: $(tail -1 "$work/driver.log")"
  cat "$work/summary.txt"
  exit 0
fi

carry=$(realpath "${2:?CARRY}") work=${3:?WORK}
if [ "$mode" = start ]; then
  mkdir -p "$work/logs" "$work/deps" "$work/builds"
  python3 -m pip install -q --no-index --find-links "$carry/whl" "kernels==0.17.2" "pydantic>=2.6" \
    "tomli-w>=1.0" "docker>=7" "huggingface_hub>=1.10" "kernel-abi-check>=0.14" "typer>=0.12" "rich>=13" \
    einops pyyaml packaging >"$work/logs/pip.log" 2>&1 || { tail -5 "$work/logs/pip.log"; exit 3; }
  tar xzf "$carry/cutlass-deps.tgz" -C "$work/deps" || exit 3
  python3 -m kernel_matrix --help >/dev/null || exit 3
  python3 -c 'import torch, kernels; print("torch", torch.__version__, "kernels", kernels.__version__, torch.cuda.get_device_name())'
  setsid nohup "$0" run "$carry" "$work" >"$work/driver.log" 2>&1 </dev/null &
  echo "started"
  exit 0
fi

# mode run: the background driver.
export KERNEL_MATRIX_DEPS_CACHE=$work/deps CXX=/usr/bin/g++ PYTHONUNBUFFERED=1
k=$carry/corpus b=$work/builds
summary=$work/summary.txt
variant=torch211-cxx11-cu130-x86_64-linux
km() { python3 -m kernel_matrix "$@"; }
note() { echo "$*" | tee -a "$summary"; }

build() {  # name, log name, kernel-matrix build args...
  local name=$1 log=$work/logs/build-$2.log
  shift 2
  local t0=$SECONDS
  echo "+ CXX=/usr/bin/g++ python3 -m kernel_matrix build $*" >"$log"
  km build "$@" >>"$log" 2>&1
  local rc=$?
  note "BUILD $name rc=$rc ${SECONDS}s-${t0}s=$((SECONDS - t0))s: $(grep -v '^\s*$' "$log" | tail -1)"
  touch "$work/built-$name.$rc"
}

suite() {  # name, log name, kernel-matrix test args...
  local name=$1 log=$work/logs/test-$2.log
  shift 2
  local t0=$SECONDS
  echo "+ python3 -m kernel_matrix test $*" >"$log"
  km test "$@" >>"$log" 2>&1
  local rc=$?
  note "TEST $name [$*] rc=$rc $((SECONDS - t0))s: $(grep -E '(passed|failed|skipped|error|selected|collected)' "$log" | grep -v '^+' | tail -1) | $(grep -v '^\s*$' "$log" | tail -1)"
}

await() { while ! compgen -G "$work/built-$1.*" >/dev/null; do sleep 3; done; [ -e "$work/built-$1.0" ]; }

# The symbol-conflicts pair: one matrix (CPU kernels), this repository's matrix with both under kernels:.
mkdir -p "$work/sc"
sed "s|^kernel: kernel|kernels:\n  - $k/symbol-conflicts\n  - $k/symbol-conflicts2|" build_matrix.yaml >"$work/sc/build_matrix.yaml"

(  # builds, one after another (each takes every core)
  build symbol-conflicts sc -f "$work/sc/build_matrix.yaml" --backend cpu --build-dir "$b/sc"
  build maxsim maxsim --kernel-dir "$k/maxsim" --build-dir "$k/maxsim/build" --backend cuda --cuda-capabilities 9.0
  build cutlass-gemm cutlass-gemm --kernel-dir "$k/cutlass-gemm" --build-dir "$b/cutlass-gemm" --backend cuda --cuda-capabilities 9.0
  build causal-conv1d causal-conv1d --kernel-dir "$k/causal-conv1d" --build-dir "$b/causal-conv1d" --backend cuda --cuda-capabilities 9.0
  build megablocks megablocks --kernel-dir "$k/megablocks" --build-dir "$b/megablocks" --backend cuda --cuda-capabilities 9.0
  build punica-sgmv punica-sgmv --kernel-dir "$k/punica-sgmv" --build-dir "$b/punica-sgmv" --backend cuda --cuda-capabilities 9.0
) &

# suites, each as soon as its build is done (on the GPU while the next builds on the CPUs)
if await symbol-conflicts; then
  suite symbol-conflicts sc1 -f "$work/sc/build_matrix.yaml" --kernel symbol-conflicts --backend cpu --build-dir "$b/sc" --pytest-arg=-q
  suite symbol-conflicts2 sc2 -f "$work/sc/build_matrix.yaml" --kernel symbol-conflicts2 --backend cpu --build-dir "$b/sc" --pytest-arg=-q
  suite symbol-conflicts2 sc2-all -f "$work/sc/build_matrix.yaml" --kernel symbol-conflicts2 --backend cpu --build-dir "$b/sc" --pytest-arg=-q "--pytest-arg=-m" "--pytest-arg=kernels_ci or not kernels_ci"
fi
if await maxsim; then
  km check-abi "$k/maxsim/build/$variant" >"$work/logs/abi-maxsim.log" 2>&1; note "ABI maxsim rc=$?"
  # As asked: the suite must test the built variant, not its conftest's JIT fallback.
  MAXSIM_REQUIRE_BUILT_VARIANT=1 suite maxsim maxsim-required "$k/maxsim/build/$variant" --kernel-dir "$k/maxsim" --pytest-arg=-q
  # The conftest's other way to a built variant: a PYTHONPATH entry named like nix's output
  # (.../maxsim-torch-ext/torch211-...), which it puts on sys.path (no JIT build then).
  mkdir -p "$work/maxsim-torch-ext" && ln -sfn "$k/maxsim/build/$variant" "$work/maxsim-torch-ext/$variant"
  PYTHONPATH=$work/maxsim-torch-ext/$variant suite maxsim maxsim-pythonpath "$k/maxsim/build/$variant" --kernel-dir "$k/maxsim" --pytest-arg=-q
fi
if await cutlass-gemm; then
  km check-abi "$b/cutlass-gemm/$variant" >"$work/logs/abi-cutlass-gemm.log" 2>&1; note "ABI cutlass-gemm rc=$?"
  suite cutlass-gemm cutlass-gemm "$b/cutlass-gemm/$variant" --kernel-dir "$k/cutlass-gemm" --pytest-arg=-q
  suite cutlass-gemm cutlass-gemm-all "$b/cutlass-gemm/$variant" --kernel-dir "$k/cutlass-gemm" --pytest-arg=-q "--pytest-arg=-m" "--pytest-arg=kernels_ci or not kernels_ci"
fi
if await causal-conv1d; then
  km check-abi "$b/causal-conv1d/$variant" >"$work/logs/abi-causal-conv1d.log" 2>&1; note "ABI causal-conv1d rc=$?"
  # 12682 cases: eight pytest-xdist workers share the GPU.
  suite causal-conv1d causal-conv1d "$b/causal-conv1d/$variant" --kernel-dir "$k/causal-conv1d" --pytest-arg=-q --pytest-arg=-n --pytest-arg=8
fi
if await megablocks; then
  km check-abi "$b/megablocks/$variant" >"$work/logs/abi-megablocks.log" 2>&1; note "ABI megablocks rc=$?"
  suite megablocks megablocks "$b/megablocks/$variant" --kernel-dir "$k/megablocks" --pytest-arg=-q
fi
if await punica-sgmv; then
  km check-abi "$b/punica-sgmv/$variant" >"$work/logs/abi-punica-sgmv.log" 2>&1; note "ABI punica-sgmv rc=$?"
  suite punica-sgmv punica-sgmv "$b/punica-sgmv/$variant" --kernel-dir "$k/punica-sgmv" --pytest-arg=-q
fi
wait
touch "$work/DONE"
echo "all done"
