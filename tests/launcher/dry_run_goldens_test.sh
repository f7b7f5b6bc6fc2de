#!/usr/bin/env bash
# --dry-run goldens for the scheduler fixtures: the exact engine command and every rank's
# environment. GPURUN_UPDATE_GOLDENS=1 rewrites them (review the diff before committing).
set -euo pipefail
gpurun=$1; here=$2
self=$(realpath "$gpurun")
data=$here/data; golden=$here/golden
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
sed "s#/var/spool/pbs/aux/4242.pbs01#$data/pbspro.nodefile#" "$data/pbspro.env" > "$tmp/pbspro.env"
sed "s#/home/alice/.lsbatch/1767225600.314159.hostfile#$data/lsf.djob_hostfile#" "$data/lsf.env" > "$tmp/lsf.env"
sed "s#@DATA@#$data#" "$data/torque.env" > "$tmp/torque.env"
cp "$data/slurm.env" "$data/slurm_batch.env" "$data/summit.env" "$data/gpuq.env" "$tmp/"
# srun --gpus-per-task=1: the task sees only its own GPU (it failed: "nodes differ in GPU count").
sed 's/^CUDA_VISIBLE_DEVICES=.*/CUDA_VISIBLE_DEVICES=1/' "$data/slurm.env" > "$tmp/slurm_gpt.env"
# mpirun -x names only variables that are set (it warns of the others): LD_LIBRARY_PATH set here,
# PATH and LD_LIBRARY_PATH unset in the PBS and LSF cases.
{ cat "$data/slurm_batch.env"; echo LD_LIBRARY_PATH=/opt/site/lib; } > "$tmp/slurm_batch_ld.env"
# --container cases: a fixed working folder, and (auto) a PATH with stand-in runtimes, which are
# only looked up, never run.
mkdir "$tmp/bin"; printf '#!/bin/sh\nexit 1\n' > "$tmp/bin/podman"; chmod +x "$tmp/bin/podman"
for e in gpuq slurm slurm_batch; do
  { cat "$tmp/$e.env"; echo PWD=/home/alice/proj; echo "PATH=$tmp/bin"; } > "$tmp/${e}_ctr.env"
done
cases=(
  "slurm|slurm.env|"
  "slurm_batch|slurm_batch.env|"
  "slurm_gpus_per_task|slurm_gpt.env|"
  "slurm_batch_mpirun|slurm_batch_ld.env|--launcher mpirun --launcher-args '--mca btl self,tcp'"
  "slurm_batch_n4|slurm_batch.env|-n 4 --nproc-per-node 2"
  "pbspro|pbspro.env|"
  "torque|torque.env|--gpus-per-rank 1"
  "lsf|lsf.env|"
  "summit|summit.env|--nproc-per-node 6"
  "gpuq|gpuq.env|"
  "container_auto_podman|gpuq_ctr.env|-n 1 --gpus-per-rank 2 --container localhost/gpurun:test"
  "container_apptainer|slurm_batch_ctr.env|--container /images/train.sif --container-runtime apptainer"
  "container_podman_step|slurm_ctr.env|--container localhost/gpurun:test --container-runtime podman"
  "container_pyxis|slurm_batch_ctr.env|--container nvcr.io#nvidia/pytorch:24.01-py3 --container-runtime pyxis"
)
fail=0
for c in "${cases[@]}"; do
  IFS='|' read -r name env args <<<"$c"
  eval "extra=($args)"
  # This run's folder (PATH=$tmp/bin in the --container cases) is written @TMP@, the absolute
  # path of the gpurun under test (what the command runs) @GPURUN@.
  "$gpurun" --dry-run --env-file "$tmp/$env" "${extra[@]}" -- python3 train.py --epochs 8 |
    sed -e "s#$tmp#@TMP@#g" -e "s#$self#@GPURUN@#g" > "$tmp/$name.out"
  if [[ ${GPURUN_UPDATE_GOLDENS:-0} == 1 ]]; then
    cp "$tmp/$name.out" "$golden/$name.txt"; echo "updated $name"
  elif ! diff -u "$golden/$name.txt" "$tmp/$name.out"; then
    echo "FAIL: $name differs from golden/$name.txt"; fail=1
  else
    echo "ok: $name"
  fi
done
exit $fail
