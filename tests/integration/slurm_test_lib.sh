# slurm_test_lib.sh: what the Slurm end-to-end tests share (sourced by them, not run): their
# arguments, the skip rules (exit 77 without root, slurm-wlm, munge or data), the data lookup, a
# work dir, fail() with the job's output and state, cleanup that stops the local cluster on any
# exit (--keep leaves it up), and job-state polling (job_state, is_final, wait_final).
#
#   source "$(dirname "$0")/slurm_test_lib.sh"
#   slurm_test_setup NAME "$@"   # sets name gpurun mnist keep data root cluster dir work out jobid

slurm_test_setup() {
  name=$1
  shift
  case ${1:-} in
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  esac
  (($# >= 2)) || { echo "usage: $0 GPURUN MNIST_CNN [DATA_DIR] [--keep]" >&2; exit 2; }
  gpurun=$(realpath "$1")
  mnist=$(realpath "$2")
  shift 2
  keep=0 data=""
  local a d
  for a in "$@"; do
    case $a in --keep) keep=1 ;; *) data=$a ;; esac
  done
  if [[ $(id -u) -ne 0 ]] || ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    echo "$name: SKIP: needs root, slurm-wlm and munge (scripts/install-deps.sh)"
    exit 77
  fi
  root=$(cd "$(dirname "$0")/../.." && pwd)
  cluster=$root/scripts/slurm/local-cluster.sh
  dir=${GPURUN_SLURM_DIR:-/tmp/gpurun-slurm}
  export SLURM_CONF=$dir/etc/slurm.conf
  if [[ -z $data ]]; then
    for d in "$root/data/mnist" "$root/data/fashion" /usr/share/datasets/fashion-mnist; do
      if compgen -G "$d/train-images-idx3-ubyte*" >/dev/null; then data=$d; break; fi
    done
  fi
  if [[ -z $data ]]; then echo "$name: SKIP: no MNIST data (run scripts/fetch-data.sh)"; exit 77; fi
  data=$(realpath "$data")
  [[ -x $gpurun ]] || { echo "$name: FAIL: gpurun $gpurun is not executable" >&2; exit 1; }
  [[ -x $mnist ]] || { echo "$name: FAIL: mnist_cnn $mnist is not executable" >&2; exit 1; }
  work=$(mktemp -d "/tmp/gpurun-$name.XXXXXX")
  chmod 755 "$work"
  out=$work/job.out
  jobid=""
  trap slurm_test_cleanup EXIT
}

fail() {
  echo "$name: FAIL: $*" >&2
  if [[ -n ${out:-} && -f $out ]]; then echo "--- job output ($out):" >&2; tail -n 60 "$out" >&2; fi
  if [[ -n ${jobid:-} ]]; then scontrol show job "$jobid" >&2 2>/dev/null || true; fi
  echo "$name: cluster logs in $dir/log" >&2
  if wireup_crash; then
    echo "$name: the job died in Open MPI's TCP wireup (a rank's jump to address 0 in its first" \
      "seconds): exit 75, rerun_on_wireup_crash.sh runs the test once more" >&2
    exit 75
  fi
  exit 1
}

# Whether the job's output shows Open MPI's TCP wireup crash on this one-host cluster (see
# rerun_on_wireup_crash.sh): a rank killed by SIGSEGV, and either Open MPI's own warning that it
# failed to TCP connect to a peer, or, when the crash came before that warning, Open MPI's signal
# handler's report of a jump to address 0 within 10 s of the start: the fault address nil and a
# backtrace that stops at the signal frame ([ 0], no [ 1]: there is no caller to unwind from pc 0).
# A null dereference in a function (a caller in [ 1]) is not this. Any other failure is a failure.
wireup_crash() {
  [[ -n ${out:-} && -f $out ]] || return 1
  grep -Eq 'was killed by signal 11 \(SIGSEGV\)|Signal: Segmentation fault' "$out" || return 1
  grep -q 'Open MPI failed to TCP connect to a peer MPI process' "$out" && return 0
  grep -q 'Failing at address: (nil)' "$out" && ! grep -Eq '\[ *1\] ' "$out" &&
    grep -Eq 'was killed by signal 11 \(SIGSEGV\) after [0-9]\.[0-9] s' "$out"
}

slurm_test_cleanup() {
  local rc=$?
  if ((keep == 0)); then
    "$cluster" stop >/dev/null || echo "$name: cluster stop failed" >&2
    rm -rf "$work"
  else
    echo "$name: kept the cluster and $work"
  fi
  exit $rc
}

job_state() { scontrol show job "$jobid" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 || true; }

is_final() {
  case $1 in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED) return 0 ;; esac
  return 1
}

# wait_final SECONDS: waits for the job to end; prints its final state.
wait_final() {
  local deadline=$((SECONDS + $1)) st
  st=$(job_state)
  until is_final "$st"; do
    ((SECONDS < deadline)) || fail "job $jobid still '$st' after $1 s"
    sleep 0.5
    st=$(job_state)
  done
  echo "$st"
}
