#!/usr/bin/env bash
# Bad input gets a clear error naming the input, a non-zero exit, and nothing started.
set -euo pipefail
gpurun=$1
expect_fail() {  # expect_fail WANT_TEXT CMD...
  local want=$1; shift
  local out rc=0
  out=$("$@" 2>&1) || rc=$?
  [[ $rc != 0 ]] || { echo "FAIL: '$*' exited 0"; exit 1; }
  grep -qF -- "$want" <<<"$out" || { echo "FAIL: '$*' said:"; echo "$out"; echo "(wanted: $want)"; exit 1; }
  echo "ok: $* -> $rc"
}
expect_fail "range end 1 is below its start 3" "$gpurun" hostlist expand 'n[3-1]'
expect_fail "      ^" "$gpurun" hostlist expand 'gpu[1-x]'
expect_fail "-n 99 asks for more ranks" env SLURM_JOB_ID=1 SLURM_JOB_NODELIST='n[1-2]' SLURM_TASKS_PER_NODE='2(x2)' "$gpurun" -n 99 --dry-run -- true
expect_fail "SLURM_TASKS_PER_NODE=2(x3) describes 3 nodes" env SLURM_JOB_ID=1 SLURM_JOB_NODELIST='n[1-2]' SLURM_TASKS_PER_NODE='2(x3)' "$gpurun" info
expect_fail "--nproc-per-node 'lots'" "$gpurun" --nproc-per-node lots -- true
expect_fail "no program to launch" "$gpurun" -n 2
expect_fail "cannot run 'no-such-program-xyz'" "$gpurun" --scheduler local -n 1 -- no-such-program-xyz
expect_fail "unrecognised option" "$gpurun" --bogus -- true
expect_fail "--launcher 'ssh'" "$gpurun" --scheduler local --launcher ssh -n 1 -- true
expect_fail "--container-runtime 'docker': expected auto, apptainer, podman or pyxis" "$gpurun" --scheduler local -n 1 --container img --container-runtime docker --dry-run -- true
expect_fail "looked for apptainer and podman on PATH" env PATH=/nonexistent "$gpurun" --scheduler local -n 1 --container img --dry-run -- true
expect_fail "--container-runtime pyxis: the ranks must start through srun" "$gpurun" --scheduler local -n 1 --container img --container-runtime pyxis --dry-run -- true
# In `srun --pty bash` gpurun is one task of a 1-task step: --nproc-per-node gpu cannot be met.
step="SLURM_JOB_ID=1 SLURM_JOB_NODELIST=n1 SLURM_TASKS_PER_NODE=1 SLURM_STEP_ID=0 SLURM_STEP_NODELIST=n1
  SLURM_STEP_NUM_TASKS=1 SLURM_STEP_TASKS_PER_NODE=1 SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NODEID=0
  SLURM_GPUS_ON_NODE=4 CUDA_VISIBLE_DEVICES=0,1,2,3 SLURMD_NODENAME=n1"
# shellcheck disable=SC2086
expect_fail "--nproc-per-node gpu asks for 4 ranks on n1, but gpurun runs as one task of a srun step with 1 task(s)" \
  env $step "$gpurun" --nproc-per-node gpu --dry-run -- true
# pbsdsh numbers ranks by node-file line: a file naming a host's slots apart is refused for it.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf 'gn1\ngn2\ngn1\ngn2\n' >"$tmp/nodefile"
printf 'PBS_JOBID=7.pbs\nPBS_NODEFILE=%s\n' "$tmp/nodefile" >"$tmp/pbs.env"
expect_fail "PBS_NODEFILE names a host's slots apart" "$gpurun" --dry-run --env-file "$tmp/pbs.env" --launcher pbsdsh -- true
# Durations that are no number of seconds; a multi-node plan on --launcher local; an empty name.
expect_fail "--kill-grace -5: expected seconds >= 0" "$gpurun" --scheduler local -n 1 --kill-grace -5 -- true
expect_fail "--start-timeout nan: expected seconds > 0" "$gpurun" --scheduler local -n 1 --start-timeout nan -- true
expect_fail "--launcher local starts every rank on this host, but the plan spreads 4 ranks over 2 nodes" \
  env SLURM_JOB_ID=1 SLURM_JOB_NODELIST='n[1-2]' SLURM_TASKS_PER_NODE='2(x2)' "$gpurun" --launcher local --dry-run -- true
expect_fail "the plan puts 2 ranks on h1 but 4 on h2" \
  env LSB_JOBID=5 LSB_MCPU_HOSTS='h1 2 h2 4' "$gpurun" --launcher jsrun --dry-run -- true
rc=0; "$gpurun" -q --scheduler local -n 1 -- '' 2>/dev/null || rc=$?
[[ $rc == 127 ]] || { echo "FAIL: an empty program name exited $rc, want 127"; exit 1; }
# A program that cannot start is reported with its exit status 127.
rc=0; "$gpurun" -q --scheduler local -n 2 -- no-such-program-xyz 2>/dev/null || rc=$?
[[ $rc == 127 ]] || { echo "FAIL: missing program exited $rc, want 127"; exit 1; }
"$gpurun" hostlist compress n1 n2 n3 | grep -qx 'n\[1-3\]'
"$gpurun" info --json | python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["scheduler"] in ("local","slurm","pbs","lsf","gpuq"), j'
echo ok
