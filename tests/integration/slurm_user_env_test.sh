#!/usr/bin/env bash
# slurm_user_env_test.sh: the user's venv reaches every rank on both nodes of a Slurm job, through
# srun and through mpirun (CTest: slurm_user_env; issue 25, item 1).
#
#   tests/integration/slurm_user_env_test.sh GPURUN ANY_DIR [--keep]
#
# On the local two-node cluster (scripts/slurm/local-cluster.sh, started and stopped here), a batch
# script on 2 nodes x 2 tasks activates a Python venv (python3 -m venv) made in a folder both
# nodes see, then runs `gpurun -- python3 -c ...` through srun, and through mpirun inside the
# allocation (--launcher mpirun; Open MPI run by its full path put /usr/bin first on every rank:
# they all ran /usr/bin/python3). All 4 ranks must print the venv's sys.prefix, 2 on each node.
# (slurm_test_lib.sh takes a program and a data folder after GPURUN; this test needs neither and
# passes /bin/true and ANY_DIR.) Exit 77 (skipped) without root, slurm-wlm or munge.
set -euo pipefail

source "$(dirname "$0")/slurm_test_lib.sh"
gpurun_arg=$1
shift
slurm_test_setup slurm_user_env "$gpurun_arg" /bin/true "$@"

python3 -m venv --without-pip "$work/venv" || fail "python3 -m venv (python3-venv)"
"$cluster" start >/dev/null || fail "local-cluster.sh start"
cat >"$work/env.sbatch" <<SCRIPT
#!/bin/bash
set -euo pipefail
source "$work/venv/bin/activate"
prog='import os, socket, sys; print("rank", os.environ["RANK"], os.environ["SLURMD_NODENAME"], sys.prefix)'
echo "== srun"
"$gpurun" -q -- python3 -c "\$prog"
echo "== mpirun"
"$gpurun" -q --launcher mpirun --launcher-args '--mca btl self,tcp' -- python3 -c "\$prog"
SCRIPT
jobid=$(cd "$work" && sbatch --parsable --nodes=2 --ntasks-per-node=2 --cpus-per-task=1 --time=5 \
  --job-name=gpurun-env -o "$out" "$work/env.sbatch") || fail "sbatch"
st=$(wait_final 180)
[[ $st == COMPLETED ]] || fail "job $jobid ended $st"
for engine in srun mpirun; do
  got=$(awk -v e="== $engine" '/^== / { on = ($0 == e); next } on && /^rank /' "$out" | sort)
  want=$(printf 'rank 0 node1 %s\nrank 1 node1 %s\nrank 2 node2 %s\nrank 3 node2 %s' \
    "$work/venv" "$work/venv" "$work/venv" "$work/venv")
  [[ $got == "$want" ]] || fail "$engine: the ranks said:
$got
(want the venv's prefix on all 4 ranks, 2 a node)"
  echo "$name: $engine: all 4 ranks on node[1-2] ran the venv's python"
done
echo "$name: PASS"
