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

"$cluster" start >/dev/null || fail "local-cluster.sh start"

# Uneven tasks per node through srun.
in_salloc "$work/uneven.log" -N2 -n3 -- '"$gpurun" -q -- python3 ranks.py'
got=$(ranks "$work/uneven.log" | cut -d' ' -f1-3)
want=$(printf 'rank 0 node1\nrank 1 node1\nrank 2 node2')
[[ $got == "$want" ]] || fail "salloc -N2 -n3: the ranks said:
$got
(want ranks 0 and 1 on node1, rank 2 on node2)"
echo "$name: salloc -N2 -n3: ranks 0,1 on node1 and 2 on node2 through srun"

echo "$name: PASS"
