#!/usr/bin/env bash
# slurm_sbatch_header_test.sh: the commands in scripts/slurm/mnist_cnn.sbatch's own header run on
# the local cluster (CTest: slurm_sbatch_header; issue 25, item 5).
#
#   tests/integration/slurm_sbatch_header_test.sh GPURUN MNIST_CNN [DATA_DIR] [--keep]
#
# The header's local-cluster line (`sbatch --gres=gpu:0 ... scripts/slurm/mnist_cnn.sbatch`) is
# taken from the script's text and run as it is, from a copy of the repository's layout (build/,
# data/, scripts/ linked to this build, so nothing is written into the source tree), with only the
# overrides the script documents: EPOCHS=1 and MNIST_ARGS="--threads 1". It must end COMPLETED with
# a report of world size 4 (it asked 8 CPUs of a 4-CPU node before and pended forever). Then the
# same line with DATA=/nonexistent, a configuration error every rank sees: the job ends FAILED and
# its output holds the program's error once (rank 0 says the error every rank agreed on) and ends
# with one gpurun line naming a rank's failure (its exit code 1, or the MPI_Abort a rank may still
# call), with no Open MPI MPI_ABORT frame and none of srun's reports of the step it ended (there
# were one frame per rank).
# Exit 77 (skipped) without root, slurm-wlm, munge or data.
set -euo pipefail

source "$(dirname "$0")/slurm_test_lib.sh"
slurm_test_setup slurm_sbatch_header "$@"
script=$root/scripts/slurm/mnist_cnn.sbatch

line=$(grep -E '^#   sbatch .*--gres=gpu:0 .*scripts/slurm/mnist_cnn\.sbatch' "$script" | sed 's/^#   //' |
  sed 's#scripts/slurm/mnist_cnn\.sbatch.*#scripts/slurm/mnist_cnn.sbatch#') ||
  fail "no local-cluster sbatch line in $script's header"
echo "$name: the header says: $line"
read -ra cmd <<<"$line"
[[ ${cmd[0]} == sbatch && ${cmd[-1]} == scripts/slurm/mnist_cnn.sbatch ]] || fail "cannot read '$line'"

# The repository's layout, pointing at this build and data: the script's defaults find them.
mkdir -p "$work/repo/build/launcher" "$work/repo/build/examples/mnist_cnn" "$work/repo/data" \
  "$work/repo/scripts/slurm"
ln -s "$gpurun" "$work/repo/build/launcher/gpurun"
ln -s "$mnist" "$work/repo/build/examples/mnist_cnn/mnist_cnn"
ln -s "$data" "$work/repo/data/mnist"
cp "$script" "$work/repo/scripts/slurm/"

"$cluster" start >/dev/null || fail "local-cluster.sh start"

# run_header [VAR=VALUE...]: submits the header's line from the copy, with --parsable added to
# learn the job id; prints it.
run_header() {
  (cd "$work/repo" && env EPOCHS=1 MNIST_ARGS="--threads 1" "$@" "${cmd[0]}" --parsable "${cmd[@]:1}")
}

jobid=$(run_header) || fail "the header's line did not submit: $line"
out=$work/repo/mnist_cnn-$jobid.out
# The cluster is idle: a job that still pends after 60 s never runs (Reason=PartitionConfig).
deadline=$((SECONDS + 60))
while [[ $(job_state) == PENDING ]]; do
  ((SECONDS < deadline)) || fail "the header's line: job $jobid still pends after 60 s ($(scontrol show job "$jobid" | grep -o 'Reason=[A-Za-z_]*'))"
  sleep 0.5
done
st=$(wait_final 400)
[[ $st == COMPLETED ]] || fail "the header's line: job $jobid ended $st"
report=$work/repo/mnist_cnn-$jobid.json
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j["world_size"] == 4 else 1)' "$report" ||
  fail "the header's line: no report of 4 ranks in $report"
echo "$name: '$line' completed (job $jobid, 4 ranks on 2 nodes)"

jobid=$(run_header DATA=/nonexistent) || fail "the header's line did not submit (bad data)"
out=$work/repo/mnist_cnn-$jobid.out
st=$(wait_final 120)
[[ $st == FAILED ]] || fail "bad data: job $jobid ended $st, want FAILED"
last=$(tail -n 1 "$out")
[[ $last =~ ^gpurun:\ rank\ [0-3]\ on\ node[12]\ (called\ MPI_Abort\ \(errorcode\ 1\)|exited\ with\ code\ 1) ]] ||
  fail "bad data: the output does not end with gpurun's one line naming the failure: '$last'"
[[ $(grep -c '^gpurun: rank' "$out") == 1 ]] || fail "bad data: more than one gpurun line about a rank"
! grep -q 'MPI_ABORT was invoked' "$out" || fail "bad data: an Open MPI MPI_ABORT frame reached the output"
! grep -Eq 'srun: error: node|CANCELLED AT' "$out" || fail "bad data: srun's report of the step reached the output"
[[ $(grep -c 'no such data directory' "$out") == 1 ]] ||
  fail "bad data: the ranks' own error is not in the output exactly once"
echo "$name: PASS (a bad --data ends with: ${last#gpurun: })"
