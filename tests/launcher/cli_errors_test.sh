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
expect_fail "--contract 'torch,mpi': unknown contract 'mpi'; expected a comma-separated list of torch, tf and jax" "$gpurun" --contract torch,mpi -- true
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
# Issue 28, item 2: each wrapper takes gpurun's finished rank table; a table of another format is
# refused naming both versions, and a malformed one is an error that says what is wrong (a bad %XX
# escape in the old text format stopped the wrapper with a bare "stoi").
expect_fail "the rank table is format 1 from an older gpurun, but this rank wrapper is gpurun" \
  env GPURUN_RANK=0 "$gpurun" _rank --plan 'v1;s=local;j=-;a=h;p=1;c=1;g=-;n=h*1*0' --control none -- true
expect_fail "is format 7 from gpurun 0.0.1, but this rank wrapper is gpurun" \
  env GPURUN_RANK=0 "$gpurun" _rank --plan '{"gpurun_rank_table":7,"gpurun":"0.0.1"}' --control none -- true
expect_fail "the table has no \"master_addr\"" \
  env GPURUN_RANK=0 "$gpurun" _rank --plan '{"gpurun_rank_table":3,"scheduler":"local","job_id":"%ZZ"}' --control none -- true
table=$("$gpurun" --scheduler local -n 2 --dry-run -- true | sed -n "s/.* --plan '\([^']*\)'.*/\1/p")
[[ $table == '{"gpurun_rank_table":3,'* ]] || { echo "FAIL: --dry-run's rank table: $table"; exit 1; }
expect_fail "GPURUN_RANK=2 but the plan has 2 ranks" env GPURUN_RANK=2 "$gpurun" _rank --plan "$table" --control none -- true
# Issue 26, item 5: hostile allocations get an error naming the input, status 2, in under 2 s,
# with bounded memory (they crashed gpurun with SIGSEGV, grew it to 22 GB, or were taken as hosts).
expect_refused() {  # expect_refused WANT_TEXT CMD...: status 2 within 2 s, WANT_TEXT said
  local want=$1; shift
  local out rc=0 t0 secs
  t0=$(date +%s.%N)
  out=$("$@" 2>&1) || rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  [[ $rc == 2 ]] || { echo "FAIL: '$*' exited $rc, want 2:"; echo "$out"; exit 1; }
  grep -qF -- "$want" <<<"$out" || { echo "FAIL: '$*' said:"; echo "$out"; echo "(wanted: $want)"; exit 1; }
  awk -v s="$secs" 'BEGIN { exit !(s < 2) }' || { echo "FAIL: '$*' took $secs s"; exit 1; }
  echo "ok: $* -> 2 in $secs s"
}
for form in "info" "--dry-run -- true" "-- true"; do
  # shellcheck disable=SC2086
  expect_refused "SLURM_TASKS_PER_NODE=0: node n1 has 0 task slots" \
    env SLURM_JOB_ID=1 SLURM_JOB_NODELIST=n1 SLURM_TASKS_PER_NODE=0 "$gpurun" $form
  # shellcheck disable=SC2086
  expect_refused "SLURM_TASKS_PER_NODE=0(x2): node n1 has 0 task slots" \
    env SLURM_JOB_ID=1 SLURM_JOB_NODELIST='n[1-2]' SLURM_TASKS_PER_NODE='0(x2)' "$gpurun" $form
  # shellcheck disable=SC2086
  expect_refused "LSB_MCPU_HOSTS: node h1 has 0 task slots" env LSB_JOBID=1 LSB_MCPU_HOSTS='h1 0' "$gpurun" $form
done
expect_refused "LSB_DJOB_HOSTFILE=/dev/zero: is a device" \
  bash -c 'ulimit -v 2000000; LSB_JOBID=1 LSB_DJOB_HOSTFILE=/dev/zero exec "$0" info' "$gpurun"
# An endless pipe of zeros: read up to the 64 MiB bound, under the same memory limit.
expect_refused "holds more than 64 MiB" \
  bash -c 'ulimit -v 2000000; LSB_JOBID=1 LSB_DJOB_HOSTFILE=<(cat /dev/zero 2>/dev/null) exec "$0" info' "$gpurun"
head -c 4096 "$gpurun" >"$tmp/binary.nodefile"
expect_refused "PBS_NODEFILE=$tmp/binary.nodefile:1: '\x7fELF" env PBS_JOBID=1 PBS_NODEFILE="$tmp/binary.nodefile" "$gpurun" info
# A 300 MB host name, streamed, and a 1000-byte one in a file.
expect_refused "holds more than 64 MiB" \
  bash -c 'PBS_JOBID=1 PBS_NODEFILE=<(head -c 300000000 /dev/zero 2>/dev/null | tr "\0" a 2>/dev/null) exec "$0" info' "$gpurun"
{ echo n1; head -c 1000 /dev/zero | tr '\0' a; echo; } >"$tmp/long.nodefile"
expect_refused "PBS_NODEFILE=$tmp/long.nodefile:2: 'aaaa" env PBS_JOBID=1 PBS_NODEFILE="$tmp/long.nodefile" "$gpurun" info
expect_refused "--env-file $tmp: is a folder, not a file" "$gpurun" info --env-file "$tmp"
expect_refused "--env-file /dev/zero: is a device" "$gpurun" --dry-run --env-file /dev/zero -- true
# ...and an env dump through a pipe still works.
"$gpurun" info --env-file <(printf 'SLURM_JOB_ID=5\nSLURM_JOB_NODELIST=n[1-2]\nSLURM_TASKS_PER_NODE=2(x2)\n') |
  grep -q 'job 5' || { echo "FAIL: --env-file through a pipe"; exit 1; }

# Issue 26, item 6: control characters from the environment reach the terminal escaped.
out=$(env SLURM_JOB_ID=$'7\e[2K\rforged' SLURM_JOB_NODELIST='n[1-2]' SLURM_TASKS_PER_NODE='1(x2)' \
  "$gpurun" info 2>&1)
grep -qF 'job 7\e[2K\rforged' <<<"$out" || { echo "FAIL: job id not escaped in info:"; echo "$out" | od -c | head; exit 1; }
out=$(env SLURM_JOB_ID=7 SLURM_JOB_NODELIST=n1 SLURMD_NODENAME=n1 SLURM_TASKS_PER_NODE=1 \
  CUDA_VISIBLE_DEVICES=$'0\e[2J' "$gpurun" --dry-run -- prog $'\e]0;x\a' 2>&1)
grep -qF "CUDA_VISIBLE_DEVICES=\$'0\\e[2J'" <<<"$out" && ! grep -q $'\e' <<<"$out" &&
  grep -qF "\$'\\e]0;x\\x07'" <<<"$out" ||
  { echo "FAIL: --dry-run printed a control character:"; echo "$out" | od -c | head -40; exit 1; }
out=$(env LSB_JOBID=1 LSB_HOSTS=$'h1 h\e[31m2' "$gpurun" info 2>&1 || true)
grep -qF "LSB_HOSTS: 'h\e[31m2' is not a host name" <<<"$out" || { echo "FAIL: LSB_HOSTS host not refused/escaped: $out"; exit 1; }
out=$("$gpurun" hostlist expand $'a\eMb' 2>&1)
[[ $out == 'a\eMb' ]] || { echo "FAIL: hostlist expand printed '$out'"; exit 1; }
echo "ok: control characters from the environment are escaped"

rc=0; "$gpurun" -q --scheduler local -n 1 -- '' 2>/dev/null || rc=$?
[[ $rc == 127 ]] || { echo "FAIL: an empty program name exited $rc, want 127"; exit 1; }
# A program that cannot start is reported with its exit status 127.
rc=0; "$gpurun" -q --scheduler local -n 2 -- no-such-program-xyz 2>/dev/null || rc=$?
[[ $rc == 127 ]] || { echo "FAIL: missing program exited $rc, want 127"; exit 1; }
"$gpurun" hostlist compress n1 n2 n3 | grep -qx 'n\[1-3\]'
"$gpurun" info --json | python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["scheduler"] in ("local","slurm","pbs","lsf","gpuq"), j'
echo ok
