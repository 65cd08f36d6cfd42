#!/usr/bin/env bash
# On a GPU machine, from the repository root: what issue 15's numbers came from.
#
#   kernel/benchmarks/h200.sh OUT_DIR [STAGE...]
#
# Stages (default: all but cpu): variants (kernel/benchmarks/img2gray_variants.cu:
# launch settings against the copy, bit-exact checks), ncu (Nsight Compute's DRAM
# throughput of each variant at 16384^2), build (this host's CUDA variant, sm_90,
# into /tmp/b), test (the kernel's own tests on it), bench (img2gray_benchmark.py
# --device cuda), cpu (img2gray_benchmark.py --device cpu --quick, a smoke test).
# Python packages the machine lacks (kernels, typer, ...) are installed first from
# .device/wheels when that folder exists. BENCH_ARGS adds options to the cuda bench.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 4
out=${1:?OUT_DIR}
shift
stages=${*:-variants ncu build test bench}
python=${PYTHON:-python3}
# The H200 machine's CXX (/opt/gcc/bin/g++, set in its environment) links
# libstdc++ statically, which kernel-matrix refuses (exit 4); /usr/bin/g++ is
# the same GCC, linking it shared. H200_CXX picks another.
if [ -x "${H200_CXX:-/usr/bin/g++}" ]; then export CXX=${H200_CXX:-/usr/bin/g++}; fi
export PYTHONUNBUFFERED=1
failed=0
want() { [[ " $stages " == *" $1 "* ]]; }
step() { echo; echo "=== $* ($(date +%T))"; }

if [ -d .device/wheels ]; then
  "$python" -m pip install -q --no-index --find-links .device/wheels kernels flaky typer rich pydantic pyyaml packaging \
    2>&1 | tail -2
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader
"$python" -c 'import torch; print("torch", torch.__version__)'

if want variants || want ncu; then
  step "nvcc img2gray_variants.cu"
  nvcc -std=c++17 -O3 -arch=sm_90 -I kernel/csrc -Xcompiler -ffp-contract=off -Xptxas -v \
    kernel/benchmarks/img2gray_variants.cu -o /tmp/img2gray_variants 2>&1 | grep -E 'registers' | sort | uniq -c
fi
if want variants; then
  step "variants"
  /tmp/img2gray_variants "$out/variants.csv" || failed=1
fi
if want ncu; then
  step "ncu (16384x16384, one launch each, clocks as found)"
  ncu --clock-control none --metrics \
    gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum \
    /tmp/img2gray_variants --ncu 2>&1 | grep -vE '^==PROF==|^\s*-+\s*$|Section:' | grep -E 'img2gray|vectorized|gpu__|dram__|sm__|smsp__|Copy|copy|\(' | head -120
fi
if want build; then
  step "build"
  "$python" -m kernel_matrix build --backend cuda --cuda-capabilities 9.0 --build-dir /tmp/b || failed=1
fi
if want test; then
  step "test"
  "$python" -m kernel_matrix test --build-dir /tmp/b --pytest-arg=-q || failed=1
fi
if want bench; then
  step "bench cuda"
  # shellcheck disable=SC2086  # BENCH_ARGS: extra options, e.g. --quick
  "$python" kernel/benchmarks/img2gray_benchmark.py /tmp/b --device cuda --out "$out" ${BENCH_ARGS:-} || failed=1
fi
if want cpu; then
  step "bench cpu (quick)"
  "$python" -m kernel_matrix build --backend cpu --build-dir /tmp/bc >/dev/null || failed=1
  "$python" kernel/benchmarks/img2gray_benchmark.py /tmp/bc --device cpu --quick --out /tmp/cpu-bench | tail -8 || failed=1
fi
step "done, failed=$failed"
exit $failed
