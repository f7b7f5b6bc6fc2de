#!/usr/bin/env bash
# slurm_mnist_ckpt_test.sh: checkpoint on a signal to the Slurm job, then resume to the same weights
# (CTest: slurm_mnist_ckpt, labels slurm;e2e).
#
#   tests/integration/slurm_mnist_ckpt_test.sh GPURUN MNIST_CNN [DATA_DIR] [--keep]
#
# On the local two-node cluster (scripts/slurm/local-cluster.sh, started and stopped here), with
# scripts/slurm/mnist_cnn.sbatch on 2 nodes x 2 tasks:
#   A. an uninterrupted run of E epochs (REQUEUE=0);
#   B. the same run, sent `scancel --signal=USR1 --batch` once epoch 1 is done: the batch shell
#      passes USR1 to gpurun, gpurun to the ranks, which write a checkpoint and exit cleanly; the
#      ranks exit 0 and `gpurun --requeue` requeues the job (`scontrol requeue`);
#      the rerun (same job id, SLURM_RESTART_COUNT 1) resumes from the checkpoint with --resume.
#      It must end COMPLETED with the same weights as A (param_checksum in the report JSON) and
#      the same test accuracy.
# Exit 77 (skipped) without data.
set -euo pipefail

source "$(dirname "$0")/slurm_test_lib.sh"
slurm_test_setup slurm_mnist_ckpt "$@"
epochs=3
out=""

# submit TAG CKPT_DIR REQUEUE: submits the user's sbatch script; sets jobid and out.
submit() {
  out=$work/$1.out
  jobid=$(cd "$root" && REQUEUE=$3 GPURUN=$gpurun MNIST_CNN=$mnist DATA=$data EPOCHS=$epochs DEVICE=cpu \
    CKPT_DIR=$2 REPORT=$work/$1.json MNIST_ARGS="--threads 1 --lr 0.05" \
    sbatch --parsable --open-mode=append --nodes=2 --ntasks-per-node=2 --cpus-per-task=2 --gres=gpu:2 --time=10 \
    --job-name="gpurun-ckpt-$1" -o "$out" scripts/slurm/mnist_cnn.sbatch) || fail "sbatch ($1)"
  [[ $jobid =~ ^[0-9]+$ ]] || fail "sbatch ($1) printed '$jobid'"
  echo "$name: run $1: job $jobid"
}
checksum() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["param_checksum"], j["test_accuracy"])' "$1"; }

"$cluster" start >/dev/null || fail "local-cluster.sh start"

# A: uninterrupted.
submit A "$work/ckA" 0
st=$(wait_final 400)
[[ $st == COMPLETED ]] || fail "run A ended $st"
[[ -s $work/A.json ]] || fail "run A wrote no report"

# B: interrupted by USR1 to the batch shell once epoch 1 is done; requeues itself and resumes.
submit B "$work/ckB" 1
deadline=$((SECONDS + 300))
until grep -Eq "epoch 1/$epochs " "$out" 2>/dev/null; do
  st=$(job_state)
  ! is_final "$st" || fail "run B ended $st before epoch 1 was done"
  ((SECONDS < deadline)) || fail "run B: no 'epoch 1/$epochs' line after 300 s"
  sleep 0.2
done
scancel --signal=USR1 --batch "$jobid" || fail "scancel --signal=USR1 --batch $jobid"
# Bounded wait for the requeue: the restart count goes to 1.
deadline=$((SECONDS + 120))
until scontrol show job "$jobid" 2>/dev/null | grep -q 'Restarts=1'; do
  st=$(job_state)
  ! is_final "$st" || fail "run B ended $st after the checkpoint signal instead of requeueing itself"
  ((SECONDS < deadline)) || fail "run B: not requeued 120 s after the checkpoint signal (state $st)"
  sleep 0.5
done
echo "$name: run B: job $jobid checkpointed and requeued itself"
# Slurm holds a requeued job for about 2 minutes (EligibleTime); a test need not wait that long, but
# a restart in the same second as the requeue fails ("Job credential revoked"): give it 5 s.
scontrol update JobId="$jobid" StartTime=now+5 >/dev/null 2>&1 || true
st=$(wait_final 400)
[[ $st == COMPLETED ]] || fail "run B ended $st after its requeue"
[[ -n $(ls -A "$work/ckB" 2>/dev/null) ]] || fail "run B: checkpoint directory $work/ckB is empty"
# --open-mode=append keeps both runs in the output: the checkpoint, gpurun's requeue, the resume.
grep -Eq 'received (SIGUSR1|signal): stopped at a step boundary' "$out" ||
  fail "run B: the ranks did not stop at a step boundary after SIGUSR1"
grep -q 'checkpoint written' "$out" || fail "run B: no 'checkpoint written' line"
grep -q 'gpurun: all ranks exited 0 after SIGUSR1 (checkpointed): requeueing job' "$out" ||
  fail "run B: gpurun did not say it requeued the job"
grep -q 'resumed from' "$out" || fail "run B: the requeued run did not resume"
[[ -s $work/B.json ]] || fail "run B wrote no report"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j.get("resumed") else 1)' "$work/B.json" ||
  fail "run B: the final report does not say resumed"
a=$(checksum "$work/A.json")
b=$(checksum "$work/B.json")
[[ $a == "$b" ]] || fail "weights differ: uninterrupted run A has (checksum, test accuracy) $a, interrupted+requeued run B has $b"
echo "$name: PASS (A and the interrupted, requeued B end with the same weights and test accuracy: $a)"
