#!/usr/bin/env bash
# Overlapped allreduce (issue 31 item 2), CPU: --bucket-mb sums the gradient in buckets started
# (MPI_Iallreduce) as backward produces them. Against the one-allreduce path, 30 steps from the
# same seed: bit for bit on 2 ranks (each element is a + b either way), within 1e-5 on 4 ranks
# (Open MPI may associate a 4-rank sum differently by message size), with buckets of a layer each
# (0.01 MB) and of 1 MB. What cannot overlap is refused by name.
#   overlap_e2e_test.sh MNIST_CNN GPURUN CHECKPOINT_DIFF DATA_DIR
set -euo pipefail
mnist=$1 gpurun=$2 ckdiff=$3 data=$4
work=$(mktemp -d "${TMPDIR:-/tmp}/gpurun-overlap.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
run() {  # run RANKS BUCKET_MB NAME
  "$gpurun" -q -n "$1" -- "$mnist" --device cpu --data "$data" --epochs 1 --max-steps 30 \
    --threads 1 --exchange allreduce --seed 5 --bucket-mb "$2" --checkpoint "$work/$3" \
    > "$work/$3.log" 2>&1 || { cat "$work/$3.log"; fail "the $3 run failed"; }
}
for ranks in 2 4; do
  run "$ranks" 0 "plain$ranks"
  for mb in 0.01 1; do
    run "$ranks" "$mb" "overlap$ranks-$mb"
    grep -q "overlapped with backward in buckets of" "$work/overlap$ranks-$mb.log" ||
      fail "no overlap in: $(cat "$work/overlap$ranks-$mb.log")"
    tol=$([ "$ranks" = 2 ] && echo 0 || echo 1e-5)
    "$ckdiff" "$work/plain$ranks/checkpoint.bin" "$work/overlap$ranks-$mb/checkpoint.bin" "$tol" ||
      fail "$ranks ranks, $mb MB buckets: parameters differ from the one-allreduce run by more than $tol"
  done
done
refused() {  # refused WHAT ARGS...: mnist_cnn with ARGS must fail saying WHAT
  local what=$1; shift
  if "$gpurun" -q -n 2 -- "$mnist" --device cpu --data "$data" --max-steps 2 "$@" > "$work/r" 2>&1; then
    fail "accepted: $*"
  fi
  grep -q -- "$what" "$work/r" || fail "$*: $(cat "$work/r")"
}
refused "with --threads T > 1" --bucket-mb 1 --threads 2 --exchange allreduce
refused "the shared exchange sends none" --bucket-mb 1 --exchange shared
refused "PowerSGD compresses whole matrices" --bucket-mb 1 --grad-compression powersgd:4
refused "--bucket-mb must be from 0 to 10000" --bucket-mb -1
echo PASS
