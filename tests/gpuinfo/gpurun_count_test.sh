#!/usr/bin/env bash
# gpurun's GPU count of a bare machine (no CUDA_VISIBLE_DEVICES) comes from gpuinfo's one count:
# with GPURUN_NVIDIA_SMI naming a fake nvidia-smi of 4 GPUs, --nproc-per-node gpu plans 4 ranks,
# one GPU each, and with one of 8, 8. (gpurun counted through /proc and libcuda only, so here,
# with no NVIDIA driver, it planned no GPU at all.)
set -euo pipefail
gpurun=$1 fixtures=$2
for n in 4 8; do
  out=$(env -u CUDA_VISIBLE_DEVICES GPURUN_NVIDIA_SMI="$fixtures/nvidia-smi-${n}gpu" \
    "$gpurun" --scheduler local --nproc-per-node gpu --dry-run -- true)
  ranks=$(grep -c '^# rank ' <<<"$out")
  [[ $ranks == "$n" ]] || { echo "FAIL: $n fake GPUs gave $ranks ranks:"; echo "$out"; exit 1; }
  last=$(sed -n "/^# rank $((n - 1)) /,/^$/p" <<<"$out" | grep '^CUDA_VISIBLE_DEVICES=')
  [[ $last == "CUDA_VISIBLE_DEVICES=$((n - 1))" ]] || { echo "FAIL: rank $((n - 1)): $last"; exit 1; }
  echo "ok: $n GPUs from GPURUN_NVIDIA_SMI, $n ranks"
done
# A broken nvidia-smi and no driver: no GPU, and gpurun still plans (one CPU rank).
out=$(env -u CUDA_VISIBLE_DEVICES GPURUN_NVIDIA_SMI="$fixtures/nvidia-smi-broken" \
  "$gpurun" --scheduler local -n 1 --dry-run -- true)
grep -q '^CUDA_VISIBLE_DEVICES=$' <<<"$out" || { echo "FAIL: no GPU, yet:"; echo "$out"; exit 1; }
echo "ok: no GPU found, one rank without GPUs"
