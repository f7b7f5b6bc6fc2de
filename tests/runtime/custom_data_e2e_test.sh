#!/usr/bin/env bash
# custom_data_e2e_test.sh: examples/custom_data, a program of one's own on the runtime library, run
# as a user runs it.
#   custom_data_e2e_test.sh MODE CUSTOM_DATA GPURUN [MNIST_CNN | CHECKPOINT_WRITER]
#   heartbeat        under gpurun --hang-timeout, with nothing copied into the config by hand,
#                    the rank's GPURUN_HEARTBEAT file advances and the job is not called hung;
#                    alone with GPURUN_HEARTBEAT set, the file ends at the last global step
#   errors           a bad --data, hostile IDX files and an unusable checkpoint directory under
#                    gpurun -n 2 give one line from the program (no MPI_ABORT banner, no
#                    'terminate called'), status 1; the same for mnist_cnn's --data (MNIST_CNN)
#   checkpoint_kill  checkpoint writes killed with SIGKILL leave temp files; the next start
#                    removes them and resumes from the whole checkpoint (CHECKPOINT_WRITER
#                    rewrites a first run's checkpoint until it is killed)
set -euo pipefail
mode=$1 prog=$2 gpurun=$3 extra=${4:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/gpurun-custom-data.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Runs the command into $work/out (stdout and stderr) and sets rc.
run() {
  rc=0
  "$@" >"$work/out" 2>&1 || rc=$?
}

# The program's lines in $work/out: everything but gpurun's own.
program_lines() { grep -v '^gpurun: ' "$work/out" || true; }

# One line from the program, status 1, containing every given text; no engine banner.
expect_one_error_line() {
  local what=$1; shift
  ((rc == 1)) || fail "$what: status $rc, want 1: $(cat "$work/out")"
  local lines; lines=$(program_lines)
  [[ $(printf '%s\n' "$lines" | grep -c .) == 1 ]] ||
    fail "$what: want exactly one line from the program, got:"$'\n'"$(cat "$work/out")"
  local t
  for t in "$@"; do
    grep -qF -- "$t" <<<"$lines" || fail "$what: '$t' missing from: $lines"
  done
  ! grep -Eq 'MPI_ABORT|terminate called|ORTE_ERROR|std::bad_alloc' "$work/out" ||
    fail "$what: an engine banner or a bare exception: $(cat "$work/out")"
  echo "ok: $what: $lines"
}

case $mode in
heartbeat)
  # Alone: 256 images at 32 a step is 8 global steps; the field is 18 digits and a newline
  # (gpurun reads at most 18).
  GPURUN_HEARTBEAT=$work/hb "$prog" --epochs 1 --images 256 >"$work/alone.log"
  [[ $(cat "$work/hb") == 000000000000000008 ]] ||
    fail "GPURUN_HEARTBEAT holds '$(cat "$work/hb" 2>/dev/null)', want step 8"
  # Under gpurun: one silent epoch of 256 steps (3 s on an idle machine, 15 s at a load of 9 on
  # two cores). The rank's folder, and so its heartbeat file, is made under TMPDIR; watch it while
  # the job runs: the file advancing is what the old code failed. --hang-timeout 10, not 4: at
  # that load beats came up to 1.3 s apart and twice no beat for 4 s.
  mkdir "$work/tmp"
  TMPDIR=$work/tmp "$gpurun" -n 1 --hang-timeout 10 --output-dir "$work/ranks" -- \
    "$prog" --epochs 1 --images 8192 >"$work/out" 2>&1 &
  job=$!
  seen=()
  while kill -0 "$job" 2>/dev/null; do
    for f in "$work"/tmp/gpurun-*-rank0-*/heartbeat; do
      v=$(head -c 18 "$f" 2>/dev/null) || continue  # gone: the rank ended
      [[ -n $v ]] || continue
      [[ ${#seen[@]} -gt 0 && ${seen[-1]} == "$v" ]] || seen+=("$v")
    done
    sleep 0.2
  done
  rc=0
  wait "$job" || rc=$?
  ((rc == 0)) || fail "gpurun --hang-timeout 10: status $rc: $(cat "$work/out")"
  ! grep -q 'the job hangs' "$work/out" || fail "called hung: $(cat "$work/out")"
  ((${#seen[@]} >= 3)) || fail "the heartbeat file did not advance (values seen: ${seen[*]:-none})"
  for ((i = 1; i < ${#seen[@]}; i++)); do
    ((10#${seen[i]} > 10#${seen[i - 1]})) || fail "heartbeat went back: ${seen[*]}"
  done
  echo "ok: heartbeat advanced through ${#seen[@]} values ($((10#${seen[0]})) .. $((10#${seen[-1]}))) under gpurun --hang-timeout 10"
  ;;
errors)
  run "$gpurun" -q -n 2 -- "$prog" --data "$work/nowhere"
  expect_one_error_line "custom_data --data missing" "custom_data: error: $work/nowhere"
  if [[ -n $extra ]]; then
    run "$gpurun" -q -n 2 -- "$extra" --device cpu --threads 1 --data "$work/nowhere"
    expect_one_error_line "mnist_cnn --data missing" "mnist_cnn: error: $work/nowhere"
  fi
  # Hostile files: a header whose dimensions' product overflows 64 bits (65536^4), and a gz
  # bomb (10 images, then 64 MiB of zeros).
  mkdir "$work/hostile" "$work/bomb"
  python3 - "$work" <<'EOF'
import gzip, struct, sys
w = sys.argv[1]
def idx(dims, data=b""):
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + data
labels = idx([10], bytes(range(10)))
for d in ("hostile", "bomb"):
    for split in ("train", "t10k"):
        open(f"{w}/{d}/{split}-labels-idx1-ubyte", "wb").write(labels)
        open(f"{w}/{d}/{split}-images-idx3-ubyte", "wb").write(idx([10, 28, 28], bytes(7840)))
open(f"{w}/hostile/train-images-idx3-ubyte", "wb").write(idx([65536, 65536, 65536, 65536]))
with gzip.open(f"{w}/bomb/train-images-idx3-ubyte.gz", "wb", compresslevel=1) as f:
    f.write(idx([10, 28, 28], bytes(7840)))
    for _ in range(64):
        f.write(bytes(1 << 20))
EOF
  rm "$work/bomb/train-images-idx3-ubyte"
  run "$gpurun" -q -n 2 -- "$prog" --data "$work/hostile"
  expect_one_error_line "IDX dimensions that overflow" "$work/hostile/train-images-idx3-ubyte" \
    "65536 x 65536 x 65536 x 65536" "overflows"
  run "$gpurun" -q -n 2 -- "$prog" --data "$work/bomb"
  expect_one_error_line "gz bomb" "$work/bomb/train-images-idx3-ubyte.gz" \
    "bytes after the data the header declares"
  # A checkpoint directory that cannot be made: said before training, once.
  touch "$work/file"
  run "$gpurun" -q -n 2 -- "$prog" --checkpoint "$work/file/ckpt"
  expect_one_error_line "unusable --checkpoint" "$work/file/ckpt"
  ;;
checkpoint_kill)
  # A first epoch writes the checkpoint that the writer then rewrites until it is killed.
  writer=$extra ck=$work/ck
  "$prog" --checkpoint "$ck" --epochs 1 --images 256 >"$work/first.log" 2>&1 ||
    fail "the first run failed: $(cat "$work/first.log")"
  kills=0
  while ((kills < 20)); do
    # A file per writer: the shell truncates a shared one only once the child runs, so the wait
    # below could see the last writer's word and kill this one before it wrote anything.
    out=$work/writer.$kills.out
    "$writer" "$ck" >"$out" 2>&1 &
    pid=$!
    for ((i = 0; i < 600; i++)); do
      grep -q written "$out" 2>/dev/null && break
      sleep 0.05
    done
    grep -q written "$out" || fail "the writer wrote nothing in 30 s: $(cat "$out")"
    sleep "0.$((RANDOM % 3 + 1))"
    kill -KILL "$pid"
    wait "$pid" 2>/dev/null || true
    ((++kills))
    left=$(find "$ck" -name 'checkpoint.bin.tmp.*' | wc -l)
    ((kills >= 5 && left >= 2)) && break
  done
  ((left >= 1)) || fail "$kills kills left no temp file: the test saw no write cut short"
  run "$prog" --checkpoint "$ck" --epochs 2 --images 256
  ((rc == 0)) || fail "the restart failed: $(cat "$work/out")"
  grep -q "removed $left temporary checkpoint file" "$work/out" ||
    fail "no word of the $left temp files removed: $(cat "$work/out")"
  grep -q "resumed from $ck/checkpoint.bin at epoch 2, step 0" "$work/out" ||
    fail "did not resume from the checkpoint the kills left: $(cat "$work/out")"
  rest=$(find "$ck" -name 'checkpoint.bin.tmp.*')
  [[ -z $rest ]] || fail "temp files left after the restart: $rest"
  echo "ok: $kills kills mid-write left $left temp files; the restart removed them and resumed"
  ;;
*)
  fail "unknown mode $mode"
  ;;
esac
