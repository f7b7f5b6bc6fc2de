#!/usr/bin/env bash
# slurm_mnist_e2e_test.sh: mnist_cnn under gpurun under real Slurm, end to end
# (CTest: slurm_mnist_e2e, labels slurm;e2e).
#
#   tests/integration/slurm_mnist_e2e_test.sh GPURUN MNIST_CNN [DATA_DIR] [--keep]
#
# Training uses --lr 0.05 (x4 ranks, linear scaling: 0.2, the 1-rank default), so the scheduler path,
# not the learning rate, decides the outcome; test accuracy must beat chance (> 20%).
#
# Starts the local two-node cluster (scripts/slurm/local-cluster.sh), submits the job script users
# copy, scripts/slurm/mnist_cnn.sbatch, on 2 nodes x 2 tasks (CPU training, fake GPUs allocated),
# waits (bounded) and checks: the job COMPLETED with exit code 0:0 on node[1-2] with 4 tasks; the
# output shows 4 ranks and the per-epoch lines; the report JSON says world_size 4; node2's slurmd
# ran a step of the job; squeue no longer lists it; scontrol and the job completion log show it
# finished (sacct needs slurmdbd, which the local cluster has not). Stops the cluster, also on
# failure (--keep leaves it up). DATA_DIR defaults to data/mnist, else data/fashion, else Debian's
# /usr/share/datasets/fashion-mnist; none of them: exit 77 (skipped).
set -euo pipefail

source "$(dirname "$0")/slurm_test_lib.sh"
slurm_test_setup slurm_mnist_e2e "$@"
epochs=2
report=$work/report.json

"$cluster" start >/dev/null || fail "local-cluster.sh start"

# The nodes have 4 CPUs and 2 fake GPUs each: 2 tasks x 2 CPUs, gpu:2 per node.
jobid=$(cd "$root" && GPURUN=$gpurun MNIST_CNN=$mnist DATA=$data EPOCHS=$epochs DEVICE=cpu \
  CKPT_DIR=$work/ckpt REPORT=$report MNIST_ARGS="--threads 1 --lr 0.05" \
  sbatch --parsable --nodes=2 --ntasks-per-node=2 --cpus-per-task=2 --gres=gpu:2 --time=10 \
  --job-name=gpurun-e2e -o "$out" scripts/slurm/mnist_cnn.sbatch) || fail "sbatch scripts/slurm/mnist_cnn.sbatch"
[[ $jobid =~ ^[0-9]+$ ]] || fail "sbatch printed '$jobid', not a job id"
echo "slurm_mnist_e2e: submitted job $jobid (data $data, $epochs epochs)"

limit=${GPURUN_E2E_TIMEOUT:-400}
deadline=$((SECONDS + limit))
state=""
while :; do
  state=$(scontrol show job "$jobid" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 || true)
  case $state in
    COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED) break ;;
  esac
  ((SECONDS < deadline)) || fail "job $jobid still '$state' after ${limit}s"
  sleep 1
done

info=$(scontrol show job "$jobid")
[[ $state == COMPLETED ]] || fail "job $jobid ended $state"
grep -q 'ExitCode=0:0' <<<"$info" || fail "job $jobid: exit code is not 0:0"
grep -Eq '(^|[[:space:]])NodeList=node\[1-2\]' <<<"$info" || fail "job $jobid did not run on node[1-2]"
grep -q 'NumNodes=2 ' <<<"$info" || fail "job $jobid: NumNodes is not 2"
grep -q 'NumTasks=4 ' <<<"$info" || fail "job $jobid: NumTasks is not 4"
[[ -z $(squeue -h -j "$jobid" -t PD,R,CG,S 2>/dev/null) ]] || fail "squeue still lists job $jobid as active"
grep -q "JobId=$jobid .*JobState=COMPLETED" "$dir/log/jobcomp.txt" || fail "job $jobid is not COMPLETED in $dir/log/jobcomp.txt"

[[ -f $out ]] || fail "no job output $out"
grep -q '4 rank(s)' "$out" || fail "mnist_cnn's output does not show 4 ranks"
grep -Eq '^gpurun: .*4 ranks? on 2 nodes' "$out" || fail "gpurun's output does not show 4 ranks on 2 nodes"
for e in $(seq 1 "$epochs"); do
  grep -Eq "epoch $e/$epochs .*test_acc" "$out" || fail "the output has no line for epoch $e/$epochs"
done
# Ranks ran on both nodes: node2's slurmd started a step (srun tasks or mpirun's orted) of this job.
grep -Eq "\[$jobid\.[0-9]+\]" "$dir/log/slurmd-node2.log" || fail "node2 ran no step of job $jobid"

[[ -s $report ]] || fail "no report JSON $report"
python3 - "$report" "$epochs" <<'EOF' || fail "report $report is wrong"
import json, sys
j = json.load(open(sys.argv[1]))
epochs = int(sys.argv[2])
errs = []
if j.get("world_size") != 4: errs.append(f"world_size {j.get('world_size')}, want 4")
if j.get("epochs") != epochs: errs.append(f"epochs {j.get('epochs')}, want {epochs}")
# Ranks on two nodes cannot share memory: the gradient exchange falls back to the allreduce.
if j.get("exchange") != "allreduce": errs.append(f"exchange {j.get('exchange')}, want allreduce")
if len(j.get("seconds_per_epoch", [])) != epochs: errs.append("seconds_per_epoch has the wrong length")
if not (0.2 < float(j.get("test_accuracy", 0)) <= 1): errs.append(f"test_accuracy {j.get('test_accuracy')}")
for e in errs: print("report:", e, file=sys.stderr)
sys.exit(1 if errs else 0)
EOF
if sacct -j "$jobid" >/dev/null 2>&1; then
  sacct -j "$jobid" -n -o State | grep -q COMPLETED || fail "sacct does not show job $jobid COMPLETED"
fi
echo "slurm_mnist_e2e: PASS (job $jobid: 4 ranks on node[1-2], $epochs epochs, $(grep -o '"test_accuracy": [0-9.]*' "$report"))"
