#!/usr/bin/env bash
# slurm_job_shapes_test.sh: gpurun under job shapes users ask Slurm for, each checked on what the
# ranks themselves report (CTest: slurm_job_shapes).
#
#   tests/integration/slurm_job_shapes_test.sh GPURUN ANY_DIR [--keep]
#
# On the local two-node cluster (scripts/slurm/local-cluster.sh, started and stopped here; 2 fake
# GPUs a node), every rank prints "rank RANK SLURMD_NODENAME CUDA_VISIBLE_DEVICES":
#   - uneven tasks per node, `salloc -N2 -n3` (SLURM_TASKS_PER_NODE=2,1): through srun, ranks 0
#     and 1 run on node1 and rank 2 on node2, each once (srun refused gpurun's line, "You asked
#     for 3 tasks but hostlist specified 2 nodes").
#   - `sbatch -N2 --ntasks-per-node=2 --gpus-per-task=1`, `gpurun --tag-output`: srun binds each
#     task to one GPU; every rank runs, each on one GPU of its node, no two on the same (it failed:
#     "rank 1 needs GPU position 1 on node1, but CUDA_VISIBLE_DEVICES there lists only 1 GPU").
#   - `salloc -N2 --ntasks-per-node=2 --gres=gpu:2`: the salloc shell has no GPU variable;
#     `gpurun info` counts the job's 2 GPUs a node (from scontrol) and every rank runs on its own
#     GPU (every rank got CUDA_VISIBLE_DEVICES="").
#   - `--launcher mpirun` on both nodes with LD_LIBRARY_PATH unset: the 4 ranks run, 2 a node, and
#     mpirun prints no 'could not find environment variable "LD_LIBRARY_PATH"' (gpurun passed
#     -x LD_LIBRARY_PATH whether it was set or not).
#   - in that batch shell, a program PATH lacks is refused naming node1, Slurm's name for the
#     node, as the ranks' failures name theirs (it named the machine's host name).
# (slurm_test_lib.sh takes a program and a data folder after GPURUN; this test needs neither and
# passes /bin/true and ANY_DIR.) Exit 77 (skipped) without root, slurm-wlm or munge.
set -euo pipefail

source "$(dirname "$0")/slurm_test_lib.sh"
gpurun_arg=$1
shift
slurm_test_setup slurm_job_shapes "$gpurun_arg" /bin/true "$@"

cat >"$work/ranks.py" <<'PY'
import os
print("rank", os.environ["RANK"], os.environ["SLURMD_NODENAME"],
      os.environ.get("CUDA_VISIBLE_DEVICES", "unset"), flush=True)
PY

# in_salloc LOG SALLOC_OPTIONS... -- SCRIPT: runs the bash SCRIPT in a new allocation (from $work,
# gpurun named $gpurun there), its output and salloc's in LOG; fails when salloc does.
in_salloc() {
  local log=$1
  shift
  local opts=()
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  out=$log
  (cd "$work" && gpurun=$gpurun timeout 120 salloc --time=5 "${opts[@]}" bash -c "$2") >"$log" 2>&1 ||
    fail "salloc ${opts[*]} failed"
}

# ranks LOG: the ranks' lines of LOG ("rank R NODE GPUS"), without --tag-output's "N: ", sorted.
ranks() { sed -n 's/^\([0-9]*: \)\{0,1\}\(rank .*\)$/\2/p' "$1" | sort; }

# own_gpus LOG WHAT: LOG's 4 ranks, 2 on each node, each on one GPU (0 or 1), no two on the
# same GPU of a node.
own_gpus() {
  local got
  got=$(ranks "$1")
  [[ $(wc -l <<<"$got") == 4 && $(cut -d' ' -f2 <<<"$got" | sort -u | wc -l) == 4 ]] &&
    [[ $(cut -d' ' -f3 <<<"$got" | sort | uniq -c | awk '{print $1}' | sort -u) == 2 ]] &&
    [[ $(cut -d' ' -f3- <<<"$got" | sort -u | wc -l) == 4 ]] &&
    ! grep -qv ' [01]$' <<<"$got" || fail "$2: the ranks said:
$got
(want ranks 0-3, 2 a node, each on its own GPU 0 or 1)"
  echo "$name: $2: $(tr '\n' ';' <<<"$got")"
}

"$cluster" start >/dev/null || fail "local-cluster.sh start"

# Uneven tasks per node through srun.
in_salloc "$work/uneven.log" -N2 -n3 -- '"$gpurun" -q -- python3 ranks.py'
got=$(ranks "$work/uneven.log" | cut -d' ' -f1-3)
want=$(printf 'rank 0 node1\nrank 1 node1\nrank 2 node2')
[[ $got == "$want" ]] || fail "salloc -N2 -n3: the ranks said:
$got
(want ranks 0 and 1 on node1, rank 2 on node2)"
echo "$name: salloc -N2 -n3: ranks 0,1 on node1 and 2 on node2 through srun"

# --gpus-per-task=1 in a batch job: srun binds each task to its own GPU.
# First a program PATH lacks: the batch shell's node is named as Slurm names it (node1), as the
# ranks' failures name theirs, not by the machine's host name.
cat >"$work/gpt.sbatch" <<SCRIPT
#!/bin/bash
"$gpurun" -q -- no-such-program-xyz || echo "status \$?"
"$gpurun" -q --tag-output -- python3 ranks.py
SCRIPT
out=$work/gpt.log
jobid=$(cd "$work" && sbatch --parsable -N2 --ntasks-per-node=2 --gpus-per-task=1 --time=5 \
  -o "$out" "$work/gpt.sbatch") || fail "sbatch --gpus-per-task=1"
st=$(wait_final 120)
[[ $st == COMPLETED ]] || fail "sbatch --gpus-per-task=1: job $jobid ended $st"
jobid=""
own_gpus "$out" "sbatch --gpus-per-task=1"
grep -qx "gpurun: cannot run 'no-such-program-xyz' on node1: not found on PATH" "$out" &&
  grep -qx "status 127" "$out" || fail "a missing program in the batch shell: not named on node1"
echo "$name: a missing program in the batch shell is named on node1"

# The salloc shell: the job's GPUs come from scontrol -d show job.
in_salloc "$work/salloc_gpus.log" -N2 --ntasks-per-node=2 --gres=gpu:2 -- \
  '"$gpurun" info; "$gpurun" -q --tag-output -- python3 ranks.py'
own_gpus "$work/salloc_gpus.log" "salloc --gres=gpu:2"
grep -q "scontrol -d show job" "$work/salloc_gpus.log" ||
  fail "salloc --gres=gpu:2: gpurun info names no scontrol source"

# mpirun across the nodes, LD_LIBRARY_PATH unset.
in_salloc "$work/mpirun.log" -N2 --ntasks-per-node=2 -- \
  'env -u LD_LIBRARY_PATH "$gpurun" -q --launcher mpirun --launcher-args "--mca btl self,tcp" -- python3 ranks.py'
got=$(ranks "$work/mpirun.log" | cut -d' ' -f1-3)
want=$(printf 'rank 0 node1\nrank 1 node1\nrank 2 node2\nrank 3 node2')
[[ $got == "$want" ]] || fail "--launcher mpirun: the ranks said:
$got
(want ranks 0 and 1 on node1, 2 and 3 on node2)"
! grep -q "could not find environment variable" "$work/mpirun.log" ||
  fail "--launcher mpirun with LD_LIBRARY_PATH unset: mpirun warned of a -x variable"
echo "$name: --launcher mpirun, LD_LIBRARY_PATH unset: 4 ranks on node[1-2], no -x warning"

echo "$name: PASS"
