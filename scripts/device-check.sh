#!/usr/bin/env bash
# device-check.sh: issue 10's whole GPU checklist as ONE command on a lent GPU machine (one H100 or
# H200, no network, nothing installable, 10 minutes a command). Everything it measures goes to
# $OUT (at most 8 files come back): summary.md (per step: ok / FAILED with the key lines / no GPU /
# not run and why), results.json (the same, machine-readable), gpu_mnist.md + gpu_mnist.json (the
# benchmark), logs.tar.gz (every log, report and raw file). The short table is printed last.
#
#   HERE:   scripts/device-bundle.sh                    (build, pack .devbundle/bundle.tar.xz)
#   THERE:  scripts/device-check.sh                     (the device `run` tool; the exact call is
#                                                        in bench/gpu_mnist/README.md)
#   options: --only STEP,...  --skip STEP,...  --budget SECONDS (default 560)
#            --build DIR      use a build tree and this machine's Open MPI instead of the bundle
#
# Steps, in order (steps go on after a failure; each has a time cap inside the budget):
#   machine        nvidia-smi -L, driver, GPU, CPU, python3/torch, the bundle's commit
#   bundle         unpack; every program and plugin resolves its libraries (ldd), and from where
#   probe          cuda_probe: 0 = a usable device, 77 = none (then the GPU steps say "no GPU")
#   versions       what mnist_cnn loaded: driver CUDA, runtime, cuDNN, cuBLAS, NCCL
#   kernels_cpu    kernels_test (the CPU kernels against their references)
#   gpurun_ranks   gpurun info --json; gpurun -n 2 -- rank_info (relocated mpirun underneath)
#   gpurun_gpu     gpurun -n 1 -- rank_info names a GPU that nvidia-smi lists (index or UUID)
#   mpirun_cpu     mpirun -n 2 mnist_cnn --device cpu --max-steps 20 (the relocated Open MPI)
#   gpuq_cpu       gpuq daemon --gpus 0 + a CPU job: gpurun -n 2 -- mnist_cnn --device cpu
#   gpu_tests      every program of `ctest -L gpu` (gpu_test:NAME); exit 77 there is a FAILURE
#   mpi_equal      2 ranks on the one GPU (host-staged MPI allreduce) vs 1 rank at the doubled
#                  batch: per-step running mean loss and parameters within the stated tolerances
#                  (without a GPU: the same comparison on the CPU, as a dry run of the harness)
#   gpuq_gpu       gpuq daemon finds the GPU through nvidia-smi; a --gres=gpu:1 job runs
#                  gpurun -- mnist_cnn --device cuda to completion
#   sampler        HOOK (issue 12): when gpuq has --sample-interval, real utilisation read by
#                  the daemon during gpuq_gpu's job (gpuq stats --csv); else "not built"
#   bench          bench/gpu_mnist/run.sh: 8 epochs at batch 64/256/1024, FP32 and TF32, against
#                  PyTorch eager (and torch.compile at 256) on the same GPU, ratios printed
# Exit status: 1 if a step FAILED or was not run, else 77 if steps lacked a GPU, else 0.
#
# Dry-run here (no GPU, 2 cores): finishes in about a minute with exit 77, every GPU step "no
# GPU", every CPU step ok. Validated in a Debian 12 minbase chroot without this project's
# dependencies (scripts/device/chroot-check.sh; what it proves is in bench/gpu_mnist/README.md).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
helper=$here/device/checklist.py
only="" skip="" budget=560 build=""
while [ $# -gt 0 ]; do
  case $1 in
    --only) only=",$2,"; shift 2 ;;
    --skip) skip=",$2,"; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --build) build=$(cd "$2" && pwd) || exit 2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "device-check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
steps="probe versions kernels_cpu gpurun_ranks gpurun_gpu mpirun_cpu gpuq_cpu gpu_tests mpi_equal gpuq_gpu bench"
for s in ${only//,/ } ${skip//,/ }; do
  [[ " $steps " == *" $s "* ]] || { echo "device-check.sh: no step '$s' (steps: $steps)" >&2; exit 2; }
done
out=${OUT:-$root/device-out}
mkdir -p "$out" || exit 2
work=$(mktemp -d "${TMPDIR:-/tmp}/gpurun-devcheck.XXXXXX") || exit 2
logs=$work/logs
mkdir -p "$logs"
results=$work/results.tsv
: >"$results"
fashion=$root/data/fashion mnist=$root/data/mnist
have_gpu=0 nvsmi_gpus=0
machine_ld_path=${LD_LIBRARY_PATH-}  # PyTorch runs with the machine's libraries, not the bundle's
export PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# mpirun's session folders in the check's own: two mpiruns starting at once (another test's, in
# a parallel ctest) raced on /tmp/ompi.HOST.UID ("mkdir ... File exists", orte_init failed).
mkdir -p "$work/ompi" && export OMPI_MCA_orte_tmpdir_base=$work/ompi

# --- bookkeeping ----------------------------------------------------------------------------------
left() { echo $((budget - SECONDS)); }
record() {  # record STEP STATUS SECONDS DETAIL
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$(echo "$4" | tr '\t\n' '  ' | cut -c1-400)" >>"$results"
  printf '[%4ds] %-14s %-9s %s\n' "$SECONDS" "$1" "$2" "$(echo "$4" | tr '\n' ' ' | cut -c1-160)"
}
wanted() { [[ -z $only || $only == *",$1,"* ]] && [[ $skip != *",$1,"* ]]; }
# run_capped STEP CAP CMD...: the command with a time limit of min(CAP, what the budget has left),
# output to $logs/STEP.log; sets rc (124 = timed out) and took (seconds).
run_capped() {
  local step=$1 cap=$2 t0=$SECONDS; shift 2
  local limit=$(($(left) - 10))
  ((limit > cap)) && limit=$cap
  if ((limit < 5)); then rc=125 took=0; return; fi
  { echo "\$ $*"; timeout -k 5 "$limit" "$@"; } >>"$logs/$step.log" 2>&1
  rc=$? took=$((SECONDS - t0))
}
keylines() { grep -E "${2:-FAIL|rror|what\(\)|not found|refus|Abort|abort}" "$logs/$1.log" | tail -n 3 | tr '\n' ' '; }
verdict() {  # verdict STEP OK_DETAIL: ok when rc is 0, else FAILED with the log's key lines
  if ((rc == 0)); then record "$1" ok "$took" "$2"
  elif ((rc == 125)); then record "$1" "not run" 0 "out of time ($(left) s of the budget left)"
  elif ((rc == 124)); then record "$1" FAILED "$took" "timed out: $(keylines "$1")"
  else record "$1" FAILED "$took" "exit $rc: $(keylines "$1")"; fi
}
needs_gpu() {  # true when the step may run; else records why not
  ((have_gpu)) && return 0
  record "$1" "no GPU" 0 "${2:-cuda_probe found no usable CUDA device}"
  return 1
}
json_get() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
for k in sys.argv[2:]: d=d[int(k)] if isinstance(d,list) else d[k]
print(d)' "$@" 2>/dev/null; }

# --- environment: the bundle (or a build tree) ---------------------------------------------------
cuda_lib_path() {  # the device's CUDA libraries: the toolkit's, then PyTorch's nvidia-* wheels
  local p="" d l
  for d in /usr/local/cuda/lib64 /usr/local/nvidia/lib64; do [ -d "$d" ] && p=$p:$d; done
  for d in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    for l in "$d"/nvidia/*/lib; do [ -d "$l" ] && p=$p:$l; done  # cudnn/, nccl/, cu13/, ...
  done
  echo "${p#:}"
}
unpack_bundle() {
  local tarball=$root/.devbundle/bundle.tar.xz b=$work/bundle
  [ -f "$tarball" ] || { echo "no $tarball: run scripts/device-bundle.sh here first and carry .devbundle"; return 1; }
  mkdir -p "$b"
  if command -v xz >/dev/null; then tar -C "$b" -xJf "$tarball"
  else  # no xz on the device image: python3's lzma
    python3 -c 'import sys, tarfile
kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
tarfile.open(sys.argv[1]).extractall(sys.argv[2], **kw)' "$tarball" "$b"
  fi
}
setup_env() {
  if [ -n "$build" ]; then
    bin=$work/bin mpiexec=$(command -v mpiexec || echo mpiexec)
    mkdir -p "$bin"
    python3 "$helper" gpu-tests "$build" "$root" >"$work/gpu-tests.json" || return 1
    local f  # every program of the build tree, by name
    find "$build" -type f -perm -u+x -not -path '*/CMakeFiles/*' |
      while read -r f; do ln -sf "$f" "$bin/${f##*/}"; done
    tests=$work/gpu-tests.json
    export PATH=$bin:$PATH
    return 0
  fi
  unpack_bundle || return 1
  local b=$work/bundle
  bin=$b/bin mpiexec=$b/bin/mpirun tests=$b/gpu-tests.json
  # The digits travel in the bundle; the tests look for them in data/mnist.
  [ -e "$mnist" ] || { mkdir -p "$root/data" && ln -s "$b/data/mnist" "$mnist"; }
  # Open MPI 4.1 and PMIx find their plugins (lib/openmpi3, lib/pmix), help texts and defaults
  # from these; Open MPI insists that each PMIX_ twin equals its OPAL_ value. The empty rsh agent
  # lets mpirun start on a machine without ssh (it only ever launches on this node).
  export OPAL_PREFIX=$b OPAL_LIBDIR=$b/lib OPAL_SYSCONFDIR=$b/etc
  export PMIX_INSTALL_PREFIX=$b PMIX_LIBDIR=$b/lib PMIX_SYSCONFDIR=$b/etc OMPI_MCA_plm_rsh_agent=
  export PATH=$b/bin:/usr/local/cuda/bin:$PATH
  local cuda; cuda=$(cuda_lib_path)
  export LD_LIBRARY_PATH=$b/lib:$cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

# --- steps ------------------------------------------------------------------------------------------
step_machine() {
  local m=$work/machine.txt gpus
  {
    echo "date=$(date -u +%FT%TZ)"
    echo "host=$(hostname)"; echo "kernel=$(uname -r)"; echo "cpus=$(nproc)"
    if gpus=$(nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader 2>/dev/null) &&
      [ -n "$gpus" ]; then
      echo "gpu=$(echo "$gpus" | head -1 | cut -d, -f2 | sed 's/^ //')"
      echo "driver=$(echo "$gpus" | head -1 | cut -d, -f4 | sed 's/^ //')"
      echo "gpus=$(echo "$gpus" | wc -l)"
    else
      echo "gpu=none ($(command -v nvidia-smi >/dev/null && nvidia-smi -L 2>&1 | head -n 1 || echo "no nvidia-smi"))"
    fi
    python3 -c 'import sys; print("python=%s %s" % (sys.executable, sys.version.split()[0]))
try:
    import torch
    print("torch=%s CUDA %s" % (torch.__version__, torch.version.cuda))
except Exception as e:
    print("torch=none (%s)" % e)' 2>&1
    echo "nvcc=$( (nvcc --version || /usr/local/cuda/bin/nvcc --version) 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  } >"$m"
  { cat "$m"; echo; nvidia-smi -L; echo; nvidia-smi; } >"$logs/machine.log" 2>&1
  nvsmi_gpus=$(sed -n 's/^gpus=//p' "$m"); nvsmi_gpus=${nvsmi_gpus:-0}
  if ((nvsmi_gpus > 0)); then record machine ok 0 "$(grep -E '^(gpu|driver|torch)=' "$m" | tr '\n' ' ')"
  else record machine "no GPU" 0 "$(sed -n 's/^gpu=//p' "$m")"; fi
}

step_bundle() {
  local t0=$SECONDS where
  if ! setup_env >"$logs/bundle.log" 2>&1; then
    record bundle FAILED $((SECONDS - t0)) "$(tail -n 2 "$logs/bundle.log")"
    return 1
  fi
  if [ -n "$build" ]; then  # the build tree's programs, this machine's libraries
    echo "build=$build" >>"$work/machine.txt"
    record bundle ok $((SECONDS - t0)) "build tree $build: $(ls "$bin" | wc -l) programs"
    return 0
  fi
  echo "bundle=$(cat "$work/bundle/COMMIT")" >>"$work/machine.txt"
  local missing outside d=$work/ldd
  local files=("$bin"/* "$work"/bundle/lib/*.so* "$work"/bundle/lib/openmpi3/*.so "$work"/bundle/lib/pmix/*.so)
  mkdir -p "$d"
  printf '%s\n' "${files[@]}" |
    xargs -P "$(nproc)" -I{} sh -c 'ldd "$1" >"$2/${1##*/}.ldd" 2>&1' sh {} "$d"
  for f in "$d"/*.ldd; do echo "== ${f##*/}"; cat "$f"; done >>"$logs/bundle.log"
  missing=$(grep -H 'not found' "$d"/*.ldd | sed 's|.*/||; s|\.ldd:[[:space:]]*| needs |; s| =>.*||' | tr '\n' ';')
  # What the bundle leaves to the machine (glibc, libstdc++, CUDA) is in its machine-libs.regex.
  outside=$(awk -v b="$work/bundle/" '$2 == "=>" && $3 ~ /^\// && index($3, b) != 1 {print $1}' "$d"/*.ldd |
    grep -Evf "$work/bundle/machine-libs.regex" | sort -u | tr '\n' ' ')
  [ -n "$outside" ] && missing="$missing resolved outside the bundle (device-bundle.sh did not pack them): $outside"
  # Where the CUDA libraries came from (the toolkit, PyTorch's wheels), for the record.
  where=$(ldd "$bin/mnist_cnn" 2>/dev/null | awk '/cudart|cublas\.|cudnn\.|nccl/{print $1 "=" $3}' | tr '\n' ' ')
  echo "cuda_libs=$where" >>"$work/machine.txt"
  if [ -n "$missing" ]; then record bundle FAILED $((SECONDS - t0)) "unresolved:$missing"
  else record bundle ok $((SECONDS - t0)) "${#files[@]} files resolve; $where"; fi
}

step_probe() {
  run_capped probe 30 "$bin/cuda_probe"
  if ((rc == 0)); then have_gpu=1; record probe ok "$took" "$(tail -n 1 "$logs/probe.log")"
  elif ((rc == 77 && nvsmi_gpus > 0)); then
    record probe FAILED "$took" "nvidia-smi lists $nvsmi_gpus GPU(s) but CUDA cannot use one: $(tail -n 1 "$logs/probe.log") (libcuda.so.1 on LD_LIBRARY_PATH?)"
  elif ((rc == 77)); then record probe "no GPU" "$took" "$(tail -n 1 "$logs/probe.log")"
  else verdict probe ""; fi
}

step_versions() {
  needs_gpu versions || return
  run_capped versions 60 "$bin/mnist_cnn" --device cuda --data "$fashion" --epochs 1 --max-steps 1
  local v; v=$(sed -n 's/.*versions: //p' "$logs/versions.log" | head -1)
  [ -n "$v" ] && echo "loaded=$v" >>"$work/machine.txt"
  ((rc == 0)) && [ -z "$v" ] && rc=1
  verdict versions "$v"
}

step_kernels_cpu() {
  run_capped kernels_cpu 150 "$bin/kernels_test"
  verdict kernels_cpu "$(grep -E '^\[  PASSED  \]' "$logs/kernels_cpu.log" | tail -n 1)"
}

step_gpurun_ranks() {
  run_capped gpurun_ranks 60 gpurun info --json
  local info=$rc
  run_capped gpurun_ranks 60 gpurun -n 2 -- rank_info
  local n; n=$(grep -c '^rank [01] of 2' "$logs/gpurun_ranks.log")
  ((rc == 0 && info == 0 && n != 2)) && rc=1
  ((rc == 0)) && rc=$info
  verdict gpurun_ranks "$(grep '^rank 0 of 2' "$logs/gpurun_ranks.log")"
}

step_gpurun_gpu() {
  needs_gpu gpurun_gpu || return
  run_capped gpurun_gpu 60 gpurun -n 1 -- rank_info
  local ids line seen
  ids=$(nvidia-smi --query-gpu=index,uuid --format=csv,noheader 2>/dev/null | tr -d ' ' | tr ',' '\n')
  line=$(grep '^rank 0 of 1' "$logs/gpurun_gpu.log")
  seen=$(echo "$line" | sed -n 's/.*GPUs \[\([^]]*\)\].*/\1/p')
  echo "nvidia-smi ids: $ids" >>"$logs/gpurun_gpu.log"
  if ((rc == 0)) && ! grep -qx -- "$seen" <<<"$ids"; then
    rc=1; echo "FAIL: rank 0 got GPUs [$seen], which nvidia-smi does not list" >>"$logs/gpurun_gpu.log"
  fi
  verdict gpurun_gpu "rank 0 sees GPU [$seen] (nvidia-smi: $(echo "$ids" | tr '\n' ' '))"
}

step_mpirun_cpu() {
  local r=$work/mpirun_cpu.json
  run_capped mpirun_cpu 90 "$mpiexec" --allow-run-as-root --oversubscribe --bind-to none -n 2 \
    "$bin/mnist_cnn" --device cpu --data "$mnist" --threads 1 --max-steps 20 --report "$r"
  ((rc == 0)) && [ "$(json_get "$r" world_size)" != 2 ] && rc=1
  verdict mpirun_cpu "2 ranks, exchange $(json_get "$r" exchange), loss $(json_get "$r" final_loss)"
}

# gpuq_job STEP GPUS_OPTION GRES COMMAND...: a private gpuq daemon (its own socket and state) and
# one job; sets rc, took and job (the id). The daemon stays up for the sampler hook, and
# gpuq_stop ends it.
gpuq_job() {
  local step=$1 gpus=$2 gres=$3 t0=$SECONDS i state=""; shift 3
  local d=$work/$step
  mkdir -p "$d"
  export GPUQ_SOCKET=$d/gpuq.sock
  local sample=()  # the sampler hook (issue 12): sample every second when the daemon can
  gpuq daemon --help 2>/dev/null | grep -- --sample-interval >/dev/null && sample=(--sample-interval 1)
  # shellcheck disable=SC2086
  gpuq daemon $gpus --state-dir "$d/state" --socket "$GPUQ_SOCKET" --kill-wait 5 "${sample[@]}" \
    >"$logs/$step-daemon.log" 2>&1 &
  daemon_pid=$!
  for ((i = 0; i < 100; i++)); do
    gpuq queue >/dev/null 2>&1 && break
    kill -0 "$daemon_pid" 2>/dev/null || break
    sleep 0.2
  done
  { printf '#!/bin/bash\n#SBATCH --job-name=devcheck\n#SBATCH --time=5\n%s\n' "$gres"
    printf '#SBATCH --output=%s/job-%%j.out\n' "$d"
    echo 'echo "job $GPUQ_JOB_ID: CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES GPUQ_GPUS=$GPUQ_GPUS"'
    printf 'exec'; printf ' %q' "$@"; echo; } >"$d/job.sh"
  job=$(cd "$d" && gpuq submit --parsable job.sh 2>>"$logs/$step.log")
  if [ -z "$job" ]; then
    rc=1 took=$((SECONDS - t0))
    echo "FAIL: no job (daemon: $(tail -n 2 "$logs/$step-daemon.log"))" >>"$logs/$step.log"
    return
  fi
  local limit=$(($(left) - 15)); ((limit > 240)) && limit=240
  while ((SECONDS - t0 < limit)); do
    gpuq show --json "$job" >"$d/show.json" 2>/dev/null
    state=$(json_get "$d/show.json" 0 state)
    [[ -n $state && $state != PENDING && $state != RUNNING ]] && break
    sleep 0.5
  done
  took=$((SECONDS - t0))
  { gpuq show "$job"; gpuq history; cat "$d"/job-*.out; } >>"$logs/$step.log" 2>&1
  case $state in
    COMPLETED) rc=0 ;;
    PENDING | RUNNING | "")  # cancelled, so that nothing of it runs on during the benchmark
      rc=124; echo "FAIL: job $job still '${state:-?}' after $took s: cancelled" >>"$logs/$step.log"
      gpuq cancel "$job" >>"$logs/$step.log" 2>&1
      for ((i = 0; i < 40; i++)); do
        gpuq show --json "$job" >"$d/show.json" 2>/dev/null
        [[ $(json_get "$d/show.json" 0 state) == CANCELLED ]] && break
        sleep 0.25
      done ;;
    *) rc=1; echo "FAIL: job $job ended $state" >>"$logs/$step.log" ;;
  esac
}
gpuq_stop() {
  [ -n "${daemon_pid:-}" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  daemon_pid=""
}

step_gpuq_cpu() {
  gpuq_job gpuq_cpu "--gpus 0" "" gpurun -n 2 -- "$bin/mnist_cnn" --device cpu --data "$mnist" \
    --threads 1 --max-steps 20
  gpuq_stop
  verdict gpuq_cpu "job $job COMPLETED: $(grep -m1 'epoch\|loss' "$work"/gpuq_cpu/job-*.out 2>/dev/null)"
}

step_gpuq_gpu() {
  if ! needs_gpu gpuq_gpu; then
    sampler_built && needs_gpu sampler
    return
  fi
  local r=$work/gpuq_gpu/job.json
  mkdir -p "$work/gpuq_gpu"
  gpuq_job gpuq_gpu "" "#SBATCH --gres=gpu:1" gpurun -- "$bin/mnist_cnn" --device cuda \
    --data "$fashion" --epochs 2 --report "$r"
  local gpus found want
  gpus=$(json_get "$work/gpuq_gpu/show.json" 0 gpus | tr -d '[] ')
  found=$(sed -n 's/^gpuq daemon: [0-9]* GPUs \[\([^]]*\)\].*/\1/p' "$logs/gpuq_gpu-daemon.log" | head -n 1)
  want=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | tr -d ' ' | paste -sd,)
  if ((rc == 0)) && [ "$found" != "$want" ]; then
    rc=1; echo "FAIL: the daemon found GPUs [$found], nvidia-smi lists [$want]" >>"$logs/gpuq_gpu.log"
  fi
  if ((rc == 0)) && [[ $(json_get "$r" device) != cuda:* ]]; then
    rc=1; echo "FAIL: the job's report names device '$(json_get "$r" device)'" >>"$logs/gpuq_gpu.log"
  fi
  verdict gpuq_gpu "daemon found GPUs [$found] (nvidia-smi: [$want]); job $job on GPU $gpus: $(json_get "$r" device), test accuracy $(json_get "$r" test_accuracy)"
  step_sampler
  gpuq_stop
}

# HOOK (issue 12, the GPU sampler): when gpuq's daemon samples (--sample-interval), the job of
# gpuq_gpu above was sampled every second through NVML; its readings must hold a real
# utilisation. Until that lands this says "not built" and does not fail the checklist.
sampler_built() {
  gpuq daemon --help 2>/dev/null | grep -- --sample-interval >/dev/null && return 0
  record sampler "not built" 0 "gpuq daemon has no --sample-interval (issue 12 not merged)"
  return 1
}
step_sampler() {
  sampler_built || return
  local t0=$SECONDS csv=$work/gpuq_gpu/samples.csv
  { gpuq stats "$job"; } >"$logs/sampler.log" 2>&1
  gpuq stats "$job" --csv >"$csv" 2>>"$logs/sampler.log"
  cp "$csv" "$logs/sampler-samples.csv" 2>/dev/null
  python3 "$helper" util "$csv" >>"$logs/sampler.log" 2>&1
  rc=$? took=$((SECONDS - t0))
  verdict sampler "$(tail -n 1 "$logs/sampler.log")"
}

step_gpu_tests() {
  local t0=$SECONDS cap=240 before
  ((cap > $(left) - 20)) && cap=$(($(left) - 20))
  if ((cap < 10)); then record gpu_tests "not run" 0 "out of time"; return; fi
  before=$(wc -l <"$results")
  python3 "$helper" run-tests "$tests" "$bin" "$root" "$mpiexec" "$logs" "$results" "$have_gpu" "$cap"
  tail -n +$((before + 1)) "$results" | awk -F'\t' '{printf "[%4ds] %-14s %-9s %s\n", '"$SECONDS"', $1, $2, substr($4, 1, 120)}'
  local n ok; n=$(tail -n +$((before + 1)) "$results" | wc -l)
  ok=$(tail -n +$((before + 1)) "$results" | awk -F'\t' '$2 == "ok"' | wc -l)
  echo "gpu_tests: $ok of $n ok ($((SECONDS - t0)) s)"
}

# Two ranks on one GPU (NCCL refuses that, so the runtime sums the gradients through host memory
# with MPI) against one rank at twice the batch, --lr-scaling none: the same images per step and
# the same learning rate, so mathematically the same training; only the order of float32 sums
# differs (cuDNN/cuBLAS over 128 images vs 2 x 64 plus a host sum). Tolerances, from the same
# comparison on the CPU here (1 x 128 vs 2 x 64 --exchange allreduce, Fashion-MNIST, seed 7;
# bench/gpu_mnist/README.md has the figures):
#  - running mean loss after each of the first 20 steps: |difference| <= 1e-3. The CPU pair
#    agreed to the progress bar's 4 decimals (<= 1e-4) for 20 steps; later, at lr 0.2, rounding
#    differences grow chaotically (6e-3 by step 43), so more steps would test chaos, not the
#    exchange. Faults show within 3 steps: a missing 1/W (lr x 2) 1e-2 by step 3 and 0.40 by
#    step 5, half the images (one rank's gradient only) 2.8e-2 at step 2 and 0.15 by step 5.
#  - parameters after 5 steps: max |difference| <= 1e-5 (CPU pair: 3e-8; the faults: 0.1 and up)
#    and their mean training loss (double precision sums in the checkpoints) <= 1e-4 (CPU pair:
#    7e-8; faults: 0.09 and up). The GPU libraries' reduction orders get 300x the CPU's margin.
step_mpi_equal() {
  local dev=cuda extra=() t0=$SECONDS w=$work/mpi_equal want=mpi-host-staged
  if ((!have_gpu)); then dev=cpu extra=(--exchange allreduce --threads 1) want=allreduce; fi
  mkdir -p "$w"
  local common=(--device "$dev" --data "$fashion" --lr-scaling none --seed 7 --loss-every 1)
  local two=("$mpiexec" --allow-run-as-root --oversubscribe --bind-to none -x GPURUN_STDOUT_TTY=1 -n 2)
  local s r=0
  for s in 20 5; do
    GPURUN_STDOUT_TTY=1 run_capped mpi_equal_one$s 90 "$bin/mnist_cnn" "${common[@]}" \
      "${extra[@]}" --batch-size 128 --max-steps $s --checkpoint "$w/one$s" --report "$w/one$s.json"
    ((rc)) && r=$rc && keylines mpi_equal_one$s >>"$logs/mpi_equal.log"
    run_capped mpi_equal_two$s 90 "${two[@]}" "$bin/mnist_cnn" "${common[@]}" "${extra[@]}" \
      --batch-size 64 --max-steps $s --checkpoint "$w/two$s" --report "$w/two$s.json"
    ((rc)) && r=$rc && keylines mpi_equal_two$s >>"$logs/mpi_equal.log"
  done
  rc=$r
  local ex; ex=$(json_get "$w/two20.json" exchange)
  if ((rc == 0)); then
    { [ "$ex" = "$want" ] || { echo "FAIL: 2 ranks exchanged with '$ex', expected $want"; false; }; } &&
      python3 "$helper" losses "$logs/mpi_equal_one20.log" "$logs/mpi_equal_two20.log" 1e-3 &&
      "$bin/checkpoint_diff" "$w/one5/checkpoint.bin" "$w/two5/checkpoint.bin" 1e-5 1e-4
    rc=$?
  fi >>"$logs/mpi_equal.log" 2>&1
  took=$((SECONDS - t0))
  local detail; detail="$ex; $(grep -E '^(running mean|max \|a-b\|)' "$logs/mpi_equal.log" | tr '\n' ' ')"
  if ((have_gpu)); then verdict mpi_equal "$detail"; return; fi
  if ((rc == 0)); then record mpi_equal "no GPU" "$took" "CPU dry run of the comparison ok: $detail"
  else verdict mpi_equal "$detail"; fi
}

step_bench() {
  needs_gpu bench || return
  local cap=$(($(left) - 15))
  ((cap > 420)) && cap=420
  PYTHON="env LD_LIBRARY_PATH=$machine_ld_path python3" \
    run_capped bench "$cap" "$root/bench/gpu_mnist/run.sh" --bin "$bin/mnist_cnn" --data "$fashion" \
    --epochs 8 --with-tf32 --torch-epochs 3 --compile-batches 256 --out "$work/bench"
  # A run cut short still leaves its raw reports: tabulate what there is.
  if ((rc)); then
    python3 "$root/bench/gpu_mnist/summarize.py" "$work/bench/raw" "$work/bench" >"$work/bench.sum" 2>&1
    grep -h 'no figure' "$work/bench.sum" | sed 's/^/FAIL: /' >>"$logs/bench.log"
  fi
  verdict bench "$(grep -E '^\| [0-9]+ \|' "$work/bench/gpu_mnist.md" 2>/dev/null | cut -d'|' -f2,3,6,10,12 | tr '\n' ' ')"
}

finish() {
  gpuq_stop
  cp "$work"/bench/gpu_mnist.md "$work"/bench/gpu_mnist.json "$out/" 2>/dev/null
  cp -r "$work/bench/raw" "$logs/bench-raw" 2>/dev/null
  for f in "$work"/mpi_equal/*.json; do [ -f "$f" ] && cp "$f" "$logs/mpi_equal_${f##*/}"; done
  cp "$work/machine.txt" "$logs/" 2>/dev/null
  tar -C "$work" -czf "$out/logs.tar.gz" logs 2>/dev/null
  python3 "$helper" summary "$results" "$out" "$work/machine.txt" ||
    { echo "device-check: summary failed; raw results:"; cat "$results"; }
  [ -f "$out/gpu_mnist.md" ] && { echo; grep '^|' "$out/gpu_mnist.md"; }
  local code=0
  grep -Eq $'\t(FAILED|not run)\t' "$results" && code=1
  ((code == 0)) && grep -q $'\tno GPU\t' "$results" && code=77
  echo "device-check: exit $code; files in $out: $(ls "$out" | tr '\n' ' ')"
  rm -rf "$work"
  exit $code
}

trap 'echo "device-check: interrupted"; finish' INT TERM
daemon_pid=""
step_machine
if ! step_bundle; then finish; fi
for s in $steps; do
  if wanted "$s"; then "step_$s"; fi
done
finish
