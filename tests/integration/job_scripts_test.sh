#!/usr/bin/env bash
# job_scripts_test.sh: checks that the job scripts users copy parse (CTest: job_scripts, label scripts).
#
#   tests/integration/job_scripts_test.sh [--no-cluster]
#
# For scripts/slurm/mnist_cnn.sbatch, scripts/pbs/mnist_cnn.pbs and scripts/lsf/mnist_cnn.lsf:
#   - `bash -n` accepts the script; every directive comes before the first command (the schedulers
#     stop reading directives there); exactly one `gpurun ... -- .../mnist_cnn ...` line, with
#     --checkpoint and --resume;
#   - each #PBS / #BSUB directive is well formed (option known, value in that option's syntax);
#   - the sbatch script goes through `sbatch --test-only` on the local Slurm cluster
#     (scripts/slurm/local-cluster.sh, started and stopped here; GPU/task counts overridden on the
#     command line to fit its 2 fake GPUs per node). Without root or slurm-wlm, or with --no-cluster,
#     the #SBATCH lines are only checked by pattern.
set -euo pipefail

case ${1:-} in
  -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
use_cluster=1
[[ ${1:-} == --no-cluster ]] && use_cluster=0

root=$(cd "$(dirname "$0")/../.." && pwd)
sbatch_script=$root/scripts/slurm/mnist_cnn.sbatch
pbs_script=$root/scripts/pbs/mnist_cnn.pbs
lsf_script=$root/scripts/lsf/mnist_cnn.lsf
errors=0
err() { echo "job_scripts_test: FAIL: $*" >&2; errors=$((errors + 1)); }

# common FILE PREFIX: syntax, directive placement, the one gpurun line.
common() {
  local f=$1 prefix=$2 line n=0 seen_cmd=0 lineno=0
  [[ -f $f ]] || { err "$f is missing"; return; }
  bash -n "$f" || err "$f: bash -n failed"
  while IFS= read -r line; do
    lineno=$((lineno + 1))
    if [[ $line == "$prefix "* ]]; then
      n=$((n + 1))
      ((seen_cmd == 0)) || err "$f:$lineno: '$line' comes after the first command and would be ignored"
    elif [[ $lineno -gt 1 && -n $line && $line != \#* ]]; then
      seen_cmd=1
    fi
  done <"$f"
  ((n > 0)) || err "$f: no '$prefix' directives"
  local g
  g=$(grep -c 'gpurun.* -- .*mnist_cnn' "$f" || true)
  [[ $g -eq 1 ]] || err "$f: expected one 'gpurun ... -- .../mnist_cnn ...' line, found $g"
  grep 'gpurun.* -- .*mnist_cnn' "$f" | grep -q -- '--checkpoint ' || err "$f: mnist_cnn line lacks --checkpoint DIR"
  grep 'gpurun.* -- .*mnist_cnn' "$f" | grep -q -- '--resume' || err "$f: mnist_cnn line lacks --resume"
}

# ---------------------------------------------------------------- Slurm
common "$sbatch_script" "#SBATCH"
grep -q -- '--gres=gpu:4' "$sbatch_script" || err "sbatch script: no --gres=gpu:4 (the GPU request users copy)"
grep -Eq '^#SBATCH --signal=B:USR1@[0-9]+$' "$sbatch_script" || err "sbatch script: no '#SBATCH --signal=B:USR1@N'"
grep -Eq '^#SBATCH --requeue$' "$sbatch_script" || err "sbatch script: no '#SBATCH --requeue'"
while IFS= read -r line; do
  [[ $line =~ ^#SBATCH\ (--[a-z][a-z-]*(=[^[:space:]]+)?|-[A-Za-z]\ [^[:space:]]+)$ ]] ||
    err "sbatch script: malformed directive '$line'"
done < <(grep '^#SBATCH' "$sbatch_script")

cluster=$root/scripts/slurm/local-cluster.sh
if ((use_cluster)) && [[ $(id -u) -eq 0 ]] && command -v sbatch >/dev/null && command -v slurmctld >/dev/null; then
  export SLURM_CONF=${GPURUN_SLURM_DIR:-/tmp/gpurun-slurm}/etc/slurm.conf
  trap '"$cluster" stop >/dev/null || echo "job_scripts_test: cluster stop failed" >&2' EXIT
  "$cluster" start >/dev/null || { err "local-cluster.sh start failed"; exit 1; }
  # Every #SBATCH line is parsed by sbatch; the local nodes have 4 CPUs and 2 fake GPUs each.
  if out=$(cd /tmp && sbatch --test-only --gres=gpu:2 --ntasks-per-node=2 --cpus-per-task=2 "$sbatch_script" 2>&1); then
    grep -q 'to start at' <<<"$out" || err "sbatch --test-only said: $out"
    echo "job_scripts_test: sbatch --test-only: $out"
  else
    err "sbatch --test-only rejected $sbatch_script: $out"
  fi
  # The directives as written (8 tasks, 4 GPUs a node) are rejected only for lack of resources.
  out=$(cd /tmp && sbatch --test-only "$sbatch_script" 2>&1 || true)
  grep -qiE 'configuration is not available|Requested node config|to start at' <<<"$out" ||
    err "sbatch --test-only on the unmodified script said: $out"
else
  echo "job_scripts_test: no local Slurm cluster (needs root and slurm-wlm): #SBATCH lines checked by pattern only"
fi

# ---------------------------------------------------------------- PBS
common "$pbs_script" "#PBS"
grep -q 'select=2:.*ngpus=4:mpiprocs=4' "$pbs_script" || err "pbs script: no select=2:...ngpus=4:mpiprocs=4"
while IFS= read -r line; do
  if [[ ! $line =~ ^#PBS\ -([A-Za-z])\ ([^[:space:]]+)$ ]]; then
    err "pbs script: malformed directive '$line' (want '#PBS -X value')"; continue
  fi
  opt=${BASH_REMATCH[1]} val=${BASH_REMATCH[2]}
  case $opt in
    N) [[ $val =~ ^[A-Za-z][A-Za-z0-9_.-]{0,14}$ ]] || err "pbs: job name '$val' (alphabetic first, <= 15 chars)" ;;
    j) [[ $val =~ ^(oe|eo|n)$ ]] || err "pbs: -j $val (oe, eo or n)" ;;
    o | e) [[ -n $val ]] || err "pbs: -$opt needs a path" ;;
    q | A) ;;
    l)
      if [[ $val == select=* ]]; then
        [[ $val =~ ^select=[0-9]+(:[a-z_]+=[A-Za-z0-9_.]+)+$ ]] || err "pbs: '$val' is not select=N:res=val[:res=val...]"
        for kv in $(tr ':' ' ' <<<"${val#select=*:}"); do
          case ${kv%%=*} in
            ncpus | ngpus | mpiprocs | ompthreads) [[ ${kv#*=} =~ ^[0-9]+$ ]] || err "pbs: $kv is not an integer" ;;
            mem) [[ ${kv#*=} =~ ^[0-9]+[kmgt]?b$ ]] || err "pbs: $kv is not a size" ;;
            host | vnode | model | arch) ;;
            *) err "pbs: unknown chunk resource in '$kv'" ;;
          esac
        done
      elif [[ $val == place=* ]]; then
        [[ $val =~ ^place=(free|pack|scatter|vscatter)(:(excl|shared|exclhost))?$ ]] || err "pbs: bad '$val'"
      elif [[ $val == walltime=* ]]; then
        [[ $val =~ ^walltime=([0-9]+:)?[0-9]{1,2}:[0-9]{2}$ ]] || err "pbs: bad '$val' (HH:MM:SS)"
      else
        err "pbs: unexpected resource '-l $val'"
      fi
      ;;
    *) err "pbs: unexpected option '-$opt' in '$line'" ;;
  esac
done < <(grep '^#PBS' "$pbs_script")

# ---------------------------------------------------------------- LSF
common "$lsf_script" "#BSUB"
grep -q '^#BSUB -gpu "num=4' "$lsf_script" || err "lsf script: no -gpu \"num=4...\""
while IFS= read -r line; do
  if [[ ! $line =~ ^#BSUB\ -([a-zA-Z]+)\ (.+)$ ]]; then
    err "lsf script: malformed directive '$line' (want '#BSUB -opt value')"; continue
  fi
  opt=${BASH_REMATCH[1]} val=${BASH_REMATCH[2]}
  case $opt in
    J) [[ $val =~ ^[A-Za-z0-9_.-]+$ ]] || err "lsf: -J '$val'" ;;
    n) [[ $val =~ ^[0-9]+(,[0-9]+)?$ ]] || err "lsf: -n '$val' is not a slot count" ;;
    R) [[ $val =~ ^\"[a-z]+\[[^]\"]+\](\ [a-z]+\[[^]\"]+\])*\"$ ]] || err "lsf: -R '$val' (want \"span[ptile=N]\" ...)" ;;
    gpu) [[ $val =~ ^\"num=[0-9]+(/task|/host)?(:[a-z_]+=[A-Za-z0-9_]+)*\"$ ]] || err "lsf: -gpu '$val' (want \"num=N[:mode=...]\")" ;;
    W) [[ $val =~ ^([0-9]+:)?[0-9]+$ ]] || err "lsf: -W '$val' ([HH:]MM)" ;;
    wa) [[ $val =~ ^(USR1|USR2|TERM|INT|HUP|URG|\'[A-Z0-9]+\')$ ]] || err "lsf: -wa '$val' (a signal name)" ;;
    wt) [[ $val =~ ^([0-9]+:)?[0-9]+$ ]] || err "lsf: -wt '$val' ([HH:]MM)" ;;
    o | e) [[ $val =~ ^[^[:space:]]+$ ]] || err "lsf: -$opt '$val'" ;;
    q | P) ;;
    *) err "lsf: unexpected option '-$opt' in '$line'" ;;
  esac
done < <(grep '^#BSUB' "$lsf_script")

if ((errors > 0)); then
  echo "job_scripts_test: $errors problem(s)" >&2
  exit 1
fi
echo "job_scripts_test: PASS (sbatch, pbs and lsf scripts)"
