#!/usr/bin/env bash
# Issue 22's last item on the H200 (no network): every kernel of kernels-community that
# has cells, built natively there by kernel-matrix for sm_90, checked, loaded, and its
# own suite run. benchmarks/community_sweep.py --device-results reads the summary.
#
#   benchmarks/h200_sweep.sh start CARRY WORK END   # set up, then run everything in the background
#                                                   # (END: seconds the driver may run, builds stop 90 s earlier)
#   benchmarks/h200_sweep.sh dsl PART WORK          # the rest of nvidia-cutlass-dsl-libs-cu13 (too big for one call)
#   benchmarks/h200_sweep.sh wait WORK OUT SECS     # wait for it (at most SECS), copy the results to OUT
#   benchmarks/h200_sweep.sh save WORK OUT          # stop the driver (its process group, by the PID `start`
#                                                   # kept) and put the builds' object caches in OUT as
#                                                   # objects.tar.xz.aa, .ab, ... (15 MiB parts)
#   benchmarks/h200_sweep.sh snap WORK OUT          # the same parts, the driver left running
#   benchmarks/h200_sweep.sh go CARRY WORK END OUT SECS  # one call: `start` unless the last call's
#                                                   # sweep is still there (running or done), `wait`, `snap`
#                                                   # (`save` with SWEEP_GO_SAVE=1; SWEEP_WAIT_FOR="TEST k":
#                                                   # `wait` ends too once the summary has that line)
#
# A build longer than one call (flash-attn2: 77 objects, ~16 minutes of the 16 cores) goes on in the
# next call, of this session or the next: `save` brings its compiled objects back, and `start` with
# those parts in CARRY/objects/ restores them, so only the rest compiles (the object cache's hits).
# A machine is given back 30 s after a call ends: a call may meet the last one's machine, WORK and all.
# `start` keeps WORK/builds then (its object caches) and clears the rest. One call's budget: start
# (~50 s with a restore) + wait + save (~30 s) + the transfers must stay inside the 600 s of a call.
# End every call with `save`, even after DONE: a build that its END stopped has objects worth
# keeping, and a machine given back takes them along. And give END the whole call (e.g. 600) when
# the build may finish in it: builds stop at END - 90, and one flash-attn2 compile takes up to 463 s.
#
# `start` takes its settings from the environment (kept in WORK/env for the driver):
#   SWEEP_ORDER="k1 k2 ..."  the kernels, in the order their builds start (default: ORDER below)
#   SWEEP_BUILDS_AT_ONCE, SWEEP_SUITES_AT_ONCE, SWEEP_JOBS, SWEEP_HEAVY_JOBS (-j of HEAVY kernels)
#   SWEEP_SUITE_SECONDS (each suite's limit), SWEEP_SUITE_SECONDS_OF="kernel=seconds ..."
#   SWEEP_CAPS="kernel=8.0,9.0 ..."  --cuda-capabilities of a kernel (beside CAPS below)
#   SWEEP_JOBS_OF="kernel=12 ..."    -j of one kernel's build (beside SWEEP_JOBS / SWEEP_HEAVY_JOBS)
#   SWEEP_PYTEST_ARGS_OF="kernel=-n,8,--continue-on-collection-errors ..."  pytest arguments of one
#                            suite, comma-separated (causal-conv1d gets -n,8 unless named here)
#   SWEEP_KM_TREE=1          run the device's working tree's kernel_matrix (from the repository's root),
#                            not CARRY/km: what every run before the tenth did without meaning to; only
#                            to reuse object parts saved so (their compiles name /work/main/kernel_matrix).
#                            `start` and `go` first make that tree's kernel_matrix/ CARRY/km's, file for
#                            file (each call's working tree is this checkout's, with whatever is uncommitted
#                            in it): the keys hit only with the compile commands of the commit that saved them
#   SWEEP_LOW_PRIORITY="k1 ..."  builds that only take the CPU the others leave: a cgroup v2 child of
#                            cpu.weight 1 (nice cannot do it: kernel-matrix starts each compiler in a
#                            session of its own, so with autogroup every compiler is its own group)
#                            and oom_score_adj 1000; where no cgroup can be made, the build waits until
#                            the others have ended. So a second heavy build fills the cores that the
#                            first one's last, slowest compiles leave idle, and slows it by ~nothing.
# A suite still running at its limit gets SIGINT (pytest then prints its summary of what ran so
# far; TEST rc 124 with that line), and a hard stop 60 s later.
#
# CARRY (made on the development machine, carried to the device; benchmarks/h200_carry.py makes one
# for the kernels named, all but the DSL parts):
#   CARRY/km/                a snapshot of kernel-matrix (git archive HEAD kernel_matrix pyproject.toml),
#                            run as PYTHONPATH=WORK/km python3 -m kernel_matrix
#   CARRY/whl/               wheels the device's python3 lacks, all installed: kernels 0.17.2 and its
#                            dependencies, kernel-matrix's (pydantic, tomli-w, docker, kernel-abi-check),
#                            apache-tvm-ffi where a kernel of the sweep needs it
#   CARRY/whl-dsl/           nvidia-cutlass-dsl 4.8.1 with libs-base and libs-core (installed --no-deps)
#   CARRY/dsl-a.part         the first bytes of a tar.xz of the nvidia-cutlass-dsl-libs-cu13 4.8.1 wheel's
#                            files (the rest comes with `dsl`; CARRY/dsl.sha256 is the whole's)
#   CARRY/kc.tgz             huggingface/kernels-community at CARRY/kc-commit, unchanged
#   CARRY/cutlass-deps.tgz   the pinned CUTLASS trees, fetched by kernel-matrix's own resolver
#   CARRY/objects/           optional: objects.tar.xz.* from an earlier call's `save`
# WORK/summary.tsv gets one tab-separated line per build, ABI check, load and suite;
# WORK/logs/ the full logs.
set -uo pipefail
self=$(realpath "$0")
mode=${1:?start, dsl, wait, save, run, one or suite}
# The driver's settings (SWEEP_* as `start` was given them), for the modes it runs itself.
if [ "$mode" != start ] && [ -f "${2:-}/env" ]; then . "$2/env"; fi

# The order builds start in: nothing to compile first, then CPU kernels, then CUDA kernels
# by how much they compile (objects, CUTLASS), the four flash-attention kernels and natten last.
ORDER="einops fla esmfold2-trimul finegrained-fp8 flash-attn-ops fp8-fbgemm gpt-oss-triton-kernels
liger-kernels scattermoe trimul-gpumode triton-kernels flash-attn4 sonic-moe aiter-flash-attn aiter-kernels
aiter-rope quantization-gptq quantization-bitsandbytes rmsnorm relu tinygrad-rms activation rotary
deformable-detr mra yoso rwkv cv-utils msa causal-conv1d punica-sgmv paged-attention nvfp4-gemm deep-gemm
megablocks vllm-moe quantization-eetq sage-attention mamba-ssm flash-mla layer-norm flash-attn2 natten
vllm-flash-attn3 sgl-flash-attn3 flash-attn3"
HEAVY=" flash-mla flash-attn2 natten vllm-flash-attn3 sgl-flash-attn3 flash-attn3 "
NEEDS_DSL=" flash-attn4 sonic-moe msa "  # python-depends nvidia-cutlass-dsl: loaded once it is installed
BUILDS_AT_ONCE=${SWEEP_BUILDS_AT_ONCE:-6}
SUITES_AT_ONCE=${SWEEP_SUITES_AT_ONCE:-3}
SUITE_SECONDS=${SWEEP_SUITE_SECONDS:-300}
# Kernels whose [kernel.*] sections name other architectures too: one sm_90 build would leave
# such a section with no capability (refused, as kernel-builder refuses it), so they are built
# for the capabilities that give every section one. SWEEP_CAPS adds or replaces entries.
CAPS="flash-attn3=8.0,9.0 sgl-flash-attn3=8.0,9.0 vllm-flash-attn3=8.0,9.0 flash-mla=9.0,10.0
sage-attention=8.0,8.9,9.0,10.0 natten=8.0,9.0,10.0 ${SWEEP_CAPS:-}"
caps_of() { local c=9.0 entry; for entry in $CAPS; do [ "${entry%%=*}" = "$1" ] && c=${entry#*=}; done; echo "$c"; }

tsv() { local IFS=$'\t'; echo "$*" >>"$work/summary.tsv"; echo "$*"; }
elapsed() { echo $(($(date +%s) - $(cat "$work/t0"))); }
oneline() { grep -v '^\s*$' "$1" | grep -v '^+ ' | tail -1 | tr '\t' ' ' | cut -c1-300; }
km() { python3 -m kernel_matrix "$@"; }

stop_driver() {  # WORK: stop a sweep `start` began there, by the PIDs it kept
  # The driver's group first (it starts no build after that), then each build's timeout group.
  # A build still running would go on compiling beside the next call's (twice the load): wait for them.
  local groups pid
  groups=$(cat "$1/driver.pid" "$1"/build-*.pid 2>/dev/null)
  for pid in $groups; do kill -TERM -- "-$pid" 2>/dev/null; done
  for pid in $groups; do
    for _ in $(seq 30); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 1; done
    kill -0 -- "-$pid" 2>/dev/null && echo "process group $pid still running after 30 s"
  done
}

if [ "$mode" = wait ]; then
  work=${2:?WORK} out=${3:?OUT} secs=${4:-540}
  end=$((SECONDS + secs))
  # SWEEP_WAIT_FOR="TEST flash-attn2": also stop waiting once the summary has that line (its fields
  # by spaces), e.g. a suite's end while a low-priority build goes on
  until_line=${SWEEP_WAIT_FOR:+^${SWEEP_WAIT_FOR// /$'\t'}$'\t'}
  while [ ! -e "$work/DONE" ] && [ $SECONDS -lt $end ]; do
    [ -n "$until_line" ] && grep -q "$until_line" "$work/summary.tsv" 2>/dev/null && break
    sleep 5
  done
  # builds still running: their progress so far ([objects done/total]) from their logs
  : >"$work/running.tsv"
  for log in "$work"/logs/build-*.log; do
    k=${log##*/build-}; k=${k%.log}
    grep -q "^BUILD	$k	" "$work/summary.tsv" 2>/dev/null && continue
    printf 'RUNNING\t%s\t%s\t%s\n' "$k" "$(grep -o '\[[0-9]*/[0-9]*\]' "$log" | tail -1)" "$(elapsed)s" >>"$work/running.tsv"
  done
  cp "$work/summary.tsv" "$work/running.tsv" "$work/driver.log" "$out/" 2>/dev/null
  # the logs, and each build's cache-keys record (what its compiles were looked up by: a miss
  # across machines is diffed from two of them)
  mapfile -t records < <(cd "$work" && compgen -G 'builds/*/logs/*.cache-keys.json')
  tar czf "$out/logs.tgz" -C "$work" logs "${records[@]}" 2>/dev/null
  [ -e "$work/DONE" ] && echo "DONE" || echo "STILL RUNNING after ${SECONDS}s of waiting (driver at $(elapsed)s)"
  cut -c1-200 "$work/summary.tsv"; cat "$work/running.tsv"
  exit 0
fi

if [ "$mode" = save ] || [ "$mode" = snap ]; then  # WORK OUT: bring the object caches back
  # save stops the driver's group first; snap leaves it running (a copy of what is stored so far,
  # for a call whose machine may be given back before the next: the build goes on meanwhile, and
  # the next call on the same machine only waits). The cache stores each entry by rename, so a
  # copy taken while compiles run holds whole entries (the .tmp- files in flight are left out).
  work=${2:?WORK} out=${3:?OUT}
  [ -f "$work/driver.pid" ] || exit 3
  [ "$mode" = save ] && stop_driver "$work"
  cd "$work/builds" || exit 3
  mapfile -t caches < <(find . -maxdepth 3 -path '*/.cache/objects' -type d)
  echo "cached objects: $(find "${caches[@]}" -type f -path '*/objects/*/objects/*' | wc -l), $(du -sch "${caches[@]}" | tail -1)"
  tar cf - --exclude='.tmp-*' "${caches[@]}" | xz -T0 -6 | split -b 15M - "$out/objects.tar.xz."
  du -ch "$out"/objects.tar.xz.* | tail -1
  exit 0
fi

km_tree() {  # CARRY: the working tree's kernel_matrix/ made CARRY/km's (SWEEP_KM_TREE=1 only)
  # Files that differ are replaced and files CARRY/km lacks removed; the same ones are left alone.
  # Each call's copy of the checkout has replaced this folder, with the checkout's uncommitted
  # changes, and a driver still running from it imports and pre-includes from it.
  [ "${SWEEP_KM_TREE:-0}" = 1 ] || return 0
  local src tree f changed=0
  src=$(realpath "$1")/km/kernel_matrix tree=$(dirname "$(dirname "$self")")/kernel_matrix
  [ -d "$src" ] && [ -d "$tree" ] || { echo "km_tree: no $src or $tree"; return 1; }
  while IFS= read -r f; do
    [ -e "$src/$f" ] || { rm -f "$tree/$f"; changed=$((changed + 1)); }
  done < <(cd "$tree" && find . -type f ! -path '*/__pycache__/*')
  while IFS= read -r f; do  # folders left with no source (a package of a later commit)
    [ -d "$tree/$f" ] && [ -z "$(find "$tree/$f" -type f ! -path '*/__pycache__/*' | head -1)" ] && rm -rf "${tree:?}/$f"
  done < <(cd "$tree" && find . -mindepth 1 -type d ! -name __pycache__)
  while IFS= read -r f; do
    cmp -s "$src/$f" "$tree/$f" && continue
    mkdir -p "$(dirname "$tree/$f")" && cp "$src/$f" "$tree/$f" || return 1
    changed=$((changed + 1))
  done < <(cd "$src" && find . -type f)
  diff -rq -x __pycache__ "$src" "$tree" >/dev/null || { echo "km_tree: $tree still differs from $src"; return 1; }
  echo "km_tree: $tree is CARRY/km's ($(cat "$1/km-commit" 2>/dev/null || echo 'no km-commit')), $changed files changed"
}

if [ "$mode" = go ]; then  # CARRY WORK END OUT SECS: one call of a sweep that spans calls
  # A sweep running (or done) in WORK, on the last call's machine still warm: wait for it. Else (a
  # fresh machine, or a driver that ended without DONE) `start` it, with the objects the carry has.
  # Then wait SECS and `snap`. The call that must end the sweep runs `save` instead (or after).
  carry=${2:?CARRY} work=${3:?WORK} end=${4:?END} out=${5:?OUT} secs=${6:?SECS}
  km_tree "$carry" || exit 3
  if [ -e "$work/DONE" ] || { [ -f "$work/driver.pid" ] && kill -0 -- "-$(cat "$work/driver.pid")" 2>/dev/null; }; then
    echo "the sweep in $work is the last call's (started at $(cat "$work/t0" 2>/dev/null), END $(cat "$work/end" 2>/dev/null)): waiting"
  else
    "$self" start "$carry" "$work" "$end" || exit 3
  fi
  "$self" wait "$work" "$out" "$secs"
  # SWEEP_GO_SAVE=1: the sweep's last call, which stops the driver (`save`) instead of `snap`
  if [ "${SWEEP_GO_SAVE:-0}" = 1 ]; then "$self" save "$work" "$out"; else "$self" snap "$work" "$out"; fi
  exit 0
fi

if [ "$mode" = dsl ]; then  # PART WORK: join, check and unpack the cu13 libs into site-packages
  part=${2:?PART} work=${3:?WORK}
  cat "$work/dsl-a.part" "$part" >"$work/dsl.tar.xz" && (cd "$work" && sha256sum -c dsl.sha256 | sed "s|^|dsl: |") || exit 3
  site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  tar xJf "$work/dsl.tar.xz" -C "$site" && rm "$work/dsl.tar.xz" && touch "$work/dsl-ready" || exit 3
  python3 -c 'import cutlass; print("cutlass DSL", cutlass.__version__ if hasattr(cutlass, "__version__") else "imported")' 2>&1 | tail -1
  exit 0
fi

if [ "$mode" = start ]; then
  carry=$(realpath "${2:?CARRY}") work=$(realpath -m "${3:?WORK}") end=${4:?END}
  if [ -d "$work" ]; then  # the last call's machine: keep its builds' object caches, clear the rest
    echo "$work exists: keeping $work/builds"
    stop_driver "$work"  # a sweep whose call ended before its `save`
    find "$work" -mindepth 1 -maxdepth 1 ! -name builds -exec rm -rf {} +
  fi
  mkdir -p "$work/logs" "$work/deps" "$work/builds" "$work/kc" || exit 3
  # every carried wheel; their needs come from the carry or from what the device has already
  python3 -m pip install -q --no-index --find-links "$carry/whl" "$carry"/whl/*.whl \
    >"$work/logs/pip.log" 2>&1 || { tail -5 "$work/logs/pip.log"; exit 3; }
  if [ -d "$carry/whl-dsl" ]; then  # a sweep of the kernels that need nvidia-cutlass-dsl
    python3 -m pip install -q --no-index --no-deps "$carry"/whl-dsl/*.whl >>"$work/logs/pip.log" 2>&1 || exit 3
    cp "$carry/dsl-a.part" "$carry/dsl.sha256" "$work/" || exit 3
    sed -i 's|/tmp/dsl-cu13.tar.xz|dsl.tar.xz|' "$work/dsl.sha256"
  fi
  cp "$carry/kc-commit" "$work/" && cp -r "$carry/km" "$work/km" || exit 3
  tar xzf "$carry/cutlass-deps.tgz" -C "$work/deps" && tar xzf "$carry/kc.tgz" -C "$work/kc" || exit 3
  if compgen -G "$carry/objects/objects.tar.xz.*" >/dev/null; then  # an earlier call's compiled objects
    cat "$carry"/objects/objects.tar.xz.* | xz -d | tar x -C "$work/builds" || exit 3
    echo "restored $(find "$work/builds" -type f -path '*/.cache/objects/*/objects/*' | wc -l) cached objects"
  fi
  cp "$self" "$work/driver.sh"  # the working tree here is replaced at each call: run a copy
  # ... and from WORK: `python3 -m` puts the current folder first on sys.path, before PYTHONPATH, so
  # from the repository's root it imported the working tree's kernel_matrix, not the carried km/
  # (the ninth run's object caches: every compile's inputs held /work/main/kernel_matrix/compat/
  # headers, which each call's new working tree changes, so compiles spanning a call were not stored)
  # SWEEP_KM_TREE=1 keeps the old way (the working tree's kernel_matrix, from its root): only for
  # object caches saved that way (their keys name /work/main/kernel_matrix), the ninth run's parts.
  km_tree "$carry" || exit 3
  [ "${SWEEP_KM_TREE:-0}" = 1 ] || cd "$work" || exit 3
  export PYTHONPATH=$work/km
  km --version || exit 3
  python3 -c 'import torch, kernels; print("torch", torch.__version__, "kernels", kernels.__version__, torch.cuda.get_device_name())'
  nvcc --version | tail -2 | head -1
  date +%s >"$work/t0"
  echo "$end" >"$work/end"
  for var in ${!SWEEP_*}; do  # the driver's settings (not a call's own: `wait` and `go` read WORK/env)
    case $var in SWEEP_WAIT_FOR|SWEEP_GO_SAVE) continue ;; esac
    echo "export $var=${!var@Q}"
  done >"$work/env"
  setsid nohup "$work/driver.sh" run "$work" >"$work/driver.log" 2>&1 </dev/null &
  echo $! >"$work/driver.pid"  # setsid: the driver leads its own process group, which `save` stops
  echo "started"
  exit 0
fi

# The driver's modes, run from WORK/driver.sh.
work=${2:?WORK}
export KERNEL_MATRIX_DEPS_CACHE=$work/deps CXX=/usr/bin/g++ PYTHONUNBUFFERED=1 PYTHONPATH=$work/km
end=$(cat "$work/end")
build_end=$((end - 90))

kind_of() {  # noarch, cuda or cpu: what this kernel is built as here
  python3 - "$1" <<'EOF'
import sys, tomllib
config = tomllib.load(open(sys.argv[1] + "/build.toml", "rb"))
backends = config.get("general", {}).get("backends", [])
print("noarch" if "torch-noarch" in config else "cuda" if "cuda" in backends else "cpu")
EOF
}

low_priority() {  # this shell, and so the build it starts, into a cgroup of the least CPU weight
  local root=${SWEEP_CGROUP_ROOT:-/sys/fs/cgroup}  # another root: the driver's own tests only
  local group=$root/sweep-low
  echo 1000 >/proc/$$/oom_score_adj 2>/dev/null  # first to go if memory runs out
  [ -f $root/cgroup.controllers ] && grep -qw cpu $root/cgroup.controllers || return 1
  grep -qw cpu $root/cgroup.subtree_control || echo +cpu >$root/cgroup.subtree_control 2>/dev/null || return 1
  mkdir -p $group 2>/dev/null && echo 1 >$group/cpu.weight 2>/dev/null && echo $$ >$group/cgroup.procs 2>/dev/null
}

others_building() {  # a kernel of the order, not of low priority, whose build has not ended
  local other
  for other in ${SWEEP_ORDER:-$ORDER}; do
    [[ " ${SWEEP_LOW_PRIORITY:-} " == *" $other "* ]] && continue
    grep -q "^BUILD	$other	" "$work/summary.tsv" 2>/dev/null || return 0
  done
  return 1
}

progress_marks() {  # a pytest log's progress marks (-q), counted: what ran before a hard stop
  python3 - "$1" <<'EOF'
import collections, re, sys
marks = collections.Counter()
for line in open(sys.argv[1], errors="replace"):
    found = re.fullmatch(r"([.FEsxX]+)\s*(\[\s*\d+%\])?\s*", line)
    if found:
        marks.update(found.group(1))
names = {".": "passed", "F": "failed", "E": "errors", "s": "skipped", "x": "xfailed", "X": "xpassed"}
print(", ".join(f"{marks[m]} {name}" for m, name in names.items() if marks[m]) + " (progress marks)" if marks else "")
EOF
}

load() {  # kernel, build dir, backend: kernels.get_local_kernel in a fresh process
  local k=$1 b=$2 backend=$3 log=$work/logs/load-$1.log
  timeout 120 python3 -c '
import sys, pathlib, kernels
module = kernels.get_local_kernel(pathlib.Path(sys.argv[1]), backend=sys.argv[2])
print("loaded", module.__name__, len([n for n in dir(module) if not n.startswith("_")]), "names")' "$b" "$backend" >"$log" 2>&1
  local rc=$?
  tsv LOAD "$k" "$backend" "$rc" "$(oneline "$log")"
}

if [ "$mode" = one ]; then  # build, check the ABI, load
  k=${3:?KERNEL} dir=$work/kc/$3 b=$work/builds/$3 log=$work/logs/build-$3.log
  kind=$(kind_of "$dir")
  left=$((build_end - $(elapsed)))
  if [ $left -lt 30 ]; then tsv BUILD "$k" skipped 0 - - "not started: the sweep's build time was over"; exit 0; fi
  jobs=${SWEEP_JOBS:-4}; [[ $HEAVY == *" $k "* ]] && jobs=${SWEEP_HEAVY_JOBS:-3}
  for entry in ${SWEEP_JOBS_OF:-}; do [ "${entry%%=*}" = "$k" ] && jobs=${entry#*=}; done
  if [[ " ${SWEEP_LOW_PRIORITY:-} " == *" $k "* ]]; then
    if low_priority; then
      echo "$k: low priority ($(cat /proc/$$/cgroup), cpu.weight 1, oom_score_adj 1000)"
    else  # no cgroup: start once the other builds have ended
      echo "$k: no cgroup for a low priority: waiting for the other builds to end"
      while others_building && [ "$(elapsed)" -lt $((build_end - 30)) ]; do sleep 5; done
      left=$((build_end - $(elapsed)))
      if [ $left -lt 30 ]; then tsv BUILD "$k" skipped 0 - - "not started: the sweep's build time was over"; exit 0; fi
    fi
  fi
  case $kind in
    noarch) args=() ;;
    cuda) args=(--backend cuda --cuda-capabilities "$(caps_of "$k")" -j "$jobs") ;;
    cpu) args=(--backend cpu -j "$jobs") ;;
  esac
  echo "+ python3 -m kernel_matrix build --kernel-dir $dir --build-dir $b ${args[*]}" >"$log"
  t0=$(date +%s)
  # timeout leads a process group of its own, which the driver's does not hold: `save` stops it by
  # the PID kept here (kernel-matrix turns the TERM into stopping the compilers it started).
  timeout -k 10 "$left" python3 -m kernel_matrix build --kernel-dir "$dir" --build-dir "$b" "${args[@]}" >>"$log" 2>&1 &
  echo $! >"$work/build-$k.pid"
  wait $!
  rc=$? secs=$(($(date +%s) - t0))
  rm -f "$work/build-$k.pid"
  variants=$(for v in "$b"/*/metadata.json; do [ -e "$v" ] && basename "$(dirname "$v")"; done | tr '\n' ' ')
  progress=$(grep -o '\[[0-9]*/[0-9]*\]' "$log" | tail -1)
  tsv BUILD "$k" "$rc" "$secs" "$kind: ${variants:-none}" "${progress:--}" "$(oneline "$log")"
  [ $rc -eq 0 ] || exit 0
  for v in $variants; do
    compgen -G "$b/$v/*.so" >/dev/null || continue
    km check-abi "$b/$v" >"$work/logs/abi-$k-$v.log" 2>&1
    tsv ABI "$k" "$v" $? "$(oneline "$work/logs/abi-$k-$v.log")"
  done
  # the variant the load and the suite use: this machine's CUDA one, else CPU, else the first
  variant=$(for v in $variants; do echo "$v"; done | grep -m1 -e '-cu[0-9]' -e '^torch-cuda$')
  [ -n "$variant" ] || variant=$(for v in $variants; do echo "$v"; done | grep -m1 -e '-cpu-' -e '^torch-cpu$')
  [ -n "$variant" ] || variant=${variants%% *}
  case $variant in *cu1[0-9]*|torch-cuda) backend=cuda ;; *cpu*) backend=cpu ;; torch-*) backend=${variant#torch-} ;; esac
  echo "$variant $backend" >"$work/variant-$k"
  if [[ $NEEDS_DSL == *" $k "* ]]; then echo "$k" >>"$work/dsl-queue"; exit 0; fi
  load "$k" "$b" "$backend"
  echo "$k" >"$work/suiteq"
  exit 0
fi

if [ "$mode" = suite ]; then  # the kernel's own tests through kernel-matrix test
  k=${3:?KERNEL} dir=$work/kc/$3 b=$work/builds/$3 log=$work/logs/test-$3.log
  read -r variant backend <"$work/variant-$k"
  left=$((end - $(elapsed))); [ $left -gt $SUITE_SECONDS ] && left=$SUITE_SECONDS
  if [ $left -lt 20 ]; then tsv TEST "$k" "$variant" skipped 0 - "not started: the sweep's time was over"; exit 0; fi
  extra=(); [ "$k" = causal-conv1d ] && extra=(--pytest-arg=-n --pytest-arg=8)
  for entry in ${SWEEP_PYTEST_ARGS_OF:-}; do  # kernel=arg,arg,...: this suite's pytest arguments
    if [ "${entry%%=*}" = "$k" ]; then
      extra=(); IFS=, read -ra args <<<"${entry#*=}"
      for arg in "${args[@]}"; do extra+=("--pytest-arg=$arg"); done
    fi
  done
  for entry in ${SWEEP_SUITE_SECONDS_OF:-}; do  # kernel=seconds: a longer limit for one suite
    [ "${entry%%=*}" = "$k" ] && left=$((end - $(elapsed))) && [ $left -gt "${entry#*=}" ] && left=${entry#*=}
  done
  # A CUDA suite that sees no GPU (a confinement hiding the driver: the fourteenth run) fails in one
  # line instead of passing with every case skipped; a carried kernel-matrix before b43445b lacks the flag.
  # (The help read whole, not piped to grep -q: under pipefail its early exit could drop the flag.)
  help=$(python3 -m kernel_matrix test --help 2>/dev/null || true)
  if [ "$backend" = cuda ] && [[ $help == *--require-gpu* ]]; then
    extra=(--require-gpu "${extra[@]}")
  fi
  echo "+ python3 -m kernel_matrix test $b/$variant --kernel-dir $dir --pytest-arg=-q ${extra[*]} (timeout ${left}s)" >"$log"
  t0=$(date +%s)
  # At the limit, SIGINT to pytest (kernel-matrix's child): it stops and prints what ran so far.
  timeout -k 10 $((left + 60)) python3 -m kernel_matrix test "$b/$variant" --kernel-dir "$dir" --pytest-arg=-q "${extra[@]}" >>"$log" 2>&1 &
  tpid=$! stop_at=$((SECONDS + left)) stopped=0
  while kill -0 $tpid 2>/dev/null; do
    if [ $stopped = 0 ] && [ $SECONDS -ge $stop_at ]; then
      stopped=1
      for kmpid in $(pgrep -P $tpid); do for pid in $(pgrep -P "$kmpid"); do kill -INT "$pid"; done; done
      echo "+ stopped at the limit (${left}s): SIGINT to pytest" >>"$log"
    fi
    sleep 2
  done
  wait $tpid
  rc=$?; [ $stopped = 1 ] && rc=124
  pytest_line=$(grep -E '(passed|failed|skipped|error|errors|no tests ran|deselected).* in [0-9.]+s' "$log" | tail -1 | tr '\t' ' ' | cut -c1-200)
  [ -z "$pytest_line" ] && [ $rc = 124 ] && pytest_line=$(progress_marks "$log")
  tsv TEST "$k" "$variant" "$rc" "$(($(date +%s) - t0))" "${pytest_line:--}" "$(oneline "$log")"
  exit 0
fi

[ "$mode" = run ] || { echo "unknown mode $mode"; exit 2; }
: >"$work/summary.tsv"
mkfifo "$work/suiteq"
xargs -r -P "$SUITES_AT_ONCE" -n 1 "$work/driver.sh" suite "$work" <"$work/suiteq" &
suites=$!
exec 3>"$work/suiteq"  # held open until every build is done: the suites' queue ends then
(  # the kernels that need nvidia-cutlass-dsl: loaded and tested once `dsl` has unpacked it
  [ -e "$work/dsl-a.part" ] || exit 0  # not carried: this sweep has none of them
  while [ ! -e "$work/dsl-ready" ] && [ "$(elapsed)" -lt $((end - 60)) ]; do sleep 5; done
  [ -e "$work/dsl-ready" ] || echo "nvidia-cutlass-dsl never arrived: loading without it"
  for k in $NEEDS_DSL; do
    while [ ! -e "$work/variant-$k" ] && ! grep -q "^BUILD	$k	" "$work/summary.tsv" && [ "$(elapsed)" -lt $((end - 60)) ]; do sleep 5; done
    [ -e "$work/variant-$k" ] || continue
    read -r variant backend <"$work/variant-$k"
    load "$k" "$work/builds/$k" "$backend"
    "$work/driver.sh" suite "$work" "$k"
  done
) &
dsl=$!
( while [ ! -e "$work/DONE" ]; do  # memory in use (MiB), every 30 s: what builds side by side took
    echo "$(elapsed) $(free -m | awk '/^Mem:/ {print $3}')" >>"$work/logs/mem.log"; sleep 30
  done ) 3>&- &  # not holding the suites' queue open
echo ${SWEEP_ORDER:-$ORDER} | tr ' ' '\n' | xargs -r -P "$BUILDS_AT_ONCE" -n 1 "$work/driver.sh" one "$work"
echo "builds done at $(elapsed)s"
exec 3>&-
wait $suites $dsl
echo "all done at $(elapsed)s"
touch "$work/DONE"
