#!/usr/bin/env bash
# Local SGD end to end (--local-sgd H, runtime/src/cpu/cpu_backend.cc): mnist_cnn on 2 ranks
# under gpurun on the MNIST digits.
# - Averaged every step (H = 1, no momentum) it is the plain allreduce's SGD: (w - lr g0 +
#   w - lr g1) / 2 = w - lr (g0 + g1) / 2, so after 30 steps the parameters agree with
#   --exchange allreduce's to rounding (1e-3; they move by 0.1 when averaged every 8 steps,
#   which is checked to differ), with either exchange inside the rank; with momentum 0.9 too
#   (rank 0's losses step by step).
# - The ranks end with the same weights: every rank's checksum is rank 0's (the report's
#   params_agree), and a finished 2-rank run's test loss (each rank evaluates its half of the
#   test set with its own weights) is the test loss of rank 0's checkpoint evaluated alone; with
#   the averages in bfloat16, momentum, micro-batches, and 2 threads a rank.
# - 4 epochs averaged every 16 steps reach the plain run's test accuracy within 1.5 points, in
#   float and in bfloat16; the report and the lines say local-sgd and what a step sends (the
#   weights' bytes / 16, half that in bfloat16).
# - A stop signal that reaches one rank only stops both at the same sync (a multiple of H in the
#   epoch, or its end), with a checkpoint the run resumes from; overlapped too.
# - Overlapped (--local-sgd-overlap): the ranks still end with the same weights and the
#   accuracy holds (both checked as above), and the weights differ from those of the averages at once.
# - Overlapped with no checkpoint, each epoch's end but the last overlaps too, its line printed
#   at the next average: every epoch's line, in order; the first epoch's training loss and test
#   loss those of a 1-epoch run, which settles there (the same bfloat16 sums); accuracy holds;
#   with checkpoints, every epoch's end settles.
# - Bad values and what does not go with it are refused by name.
#   local_sgd_e2e_test.sh MNIST_CNN GPURUN CHECKPOINT_DIFF DATA_DIR
set -euo pipefail
mnist=$1 gpurun=$2 ckdiff=$3 data=$4
work=$(mktemp -d "${TMPDIR:-/tmp}/gpurun-local-sgd.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
run() {  # run NAME ARGS...: 2 ranks, seed 5, checkpoint in $work/NAME (none if $bare is set),
  local name=$1 ck; shift  # report $work/NAME.json
  ck=(--checkpoint "$work/$name")
  [ -z "${bare:-}" ] || ck=()
  "$gpurun" -q -n 2 -- "$mnist" --device cpu --data "$data" --threads "${threads:-1}" --seed 5 \
    "${ck[@]}" --report "$work/$name.json" "$@" > "$work/$name.log" 2>&1 ||
    { cat "$work/$name.log"; fail "the $name run failed"; }
}

# H = 1 is the plain allreduce's SGD, to rounding.
run plain --exchange allreduce --max-steps 30
for inner in allreduce auto; do
  run "every1-$inner" --exchange $inner --local-sgd 1 --max-steps 30
  "$ckdiff" "$work/plain/checkpoint.bin" "$work/every1-$inner/checkpoint.bin" 1e-3 1e-5 ||
    fail "averaged every step ($inner inside the rank): not the plain allreduce's parameters"
done
# ... with momentum too (each rank's velocity its own: their mean is the plain run's velocity, so
# the weights are the same), step by step in rank 0's losses. (The learning rate a tenth, as
# momentum 0.9 multiplies the step by ten: at 0.2 the losses jump and a rounding difference of
# 1e-7 grows to 3% in 30 steps.)
momentum=(--max-steps 30 --momentum 0.9 --lr 0.02 --record-losses 30)
run plain-momentum --exchange allreduce "${momentum[@]}"
run every1-momentum --local-sgd 1 "${momentum[@]}"
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
a, b = (json.load(open(f"{w}/{n}.json"))["step_losses"] for n in ("plain-momentum", "every1-momentum"))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"momentum 0.9, averaged every step: rank 0's 30 losses within {worst:.2g} of the plain run's")
assert len(a) == len(b) == 30 and worst < 1e-4, (len(a), len(b), worst)
PY
run every8 --local-sgd 8 --max-steps 30
if "$ckdiff" "$work/plain/checkpoint.bin" "$work/every8/checkpoint.bin" 1e-3 > "$work/diff8"; then
  fail "averaged every 8 steps, the same parameters as every step: $(cat "$work/diff8")"
fi

# The ranks agree at the end: every rank's parameter checksum is rank 0's (params_agree), and
# rank 0's weights, evaluated alone, give the 2-rank run's test loss; with the averages in
# bfloat16 too, with momentum, with micro-batches, and with two threads a rank.
agree() {  # agree NAME ARGS...
  local name=$1; shift
  run "$name" --local-sgd 8 --epochs 2 "$@"
  "$mnist" --device cpu --data "$data" --threads 1 --seed 5 --epochs 2 \
    --checkpoint "$work/$name" --resume --report "$work/$name-alone.json" > "$work/alone.log" 2>&1 ||
    { cat "$work/alone.log"; fail "evaluating rank 0's checkpoint of $name alone failed"; }
  grep -q "nothing left to train" "$work/alone.log" || fail "the one-rank run trained: $(cat "$work/alone.log")"
  python3 - "$work" "$name" <<'PY'
import json, sys
w, name = sys.argv[1:]
two, one = (json.load(open(f"{w}/{n}.json")) for n in (name, f"{name}-alone"))
print(f"{name}: test loss 2 ranks {two['test_loss']:.9f}, rank 0's weights alone {one['test_loss']:.9f}")
assert two["test_accuracy"] > 0.85, two["test_accuracy"]
assert abs(two["test_loss"] - one["test_loss"]) <= 1e-6 * one["test_loss"], (two["test_loss"], one["test_loss"])
assert two["params_agree"] is True, "the ranks' parameters differ"
PY
}
agree agree
agree agree-bf16 --local-sgd-bf16
agree agree-momentum --momentum 0.9 --lr 0.02
agree agree-micro --micro-batch 32
agree agree-overlap --local-sgd-overlap
agree agree-overlap-bf16 --local-sgd-bf16 --local-sgd-overlap
# Overlapped, stopped by max_steps between two syncs (after the loop's settling sync) and at
# one (29 and 24 steps, every 8): the ranks still agree.
for m in 29 24; do
  run "overlap-max$m" --local-sgd 8 --local-sgd-bf16 --local-sgd-overlap --max-steps $m
  python3 -c "import json, sys; r = json.load(open(sys.argv[1])); \
    sys.exit(0 if r['params_agree'] is True and r['steps_run'] == $m else 1)" \
    "$work/overlap-max$m.json" || fail "overlapped, max_steps $m: $(cat "$work/overlap-max$m.log")"
done
# ... and with no checkpoint, stopped by max_steps in epoch 2 before its first average (62
# steps an epoch, every 16): epoch 1's end, in flight, lands at the stop's settling sync.
bare=1 run overlap-max70 --local-sgd 16 --local-sgd-bf16 --local-sgd-overlap --epochs 4 --max-steps 70
python3 -c "import json, sys; r = json.load(open(sys.argv[1])); \
  sys.exit(0 if r['params_agree'] is True and r['steps_run'] == 70 and \
  r['epoch_ends_overlapped'] == 1 and len(r['test_loss_per_epoch']) == 1 else 1)" \
  "$work/overlap-max70.json" && grep -q "^epoch 1/4 " "$work/overlap-max70.log" ||
  fail "overlapped, max_steps 70: $(cat "$work/overlap-max70.log")"
# Overlapped, the averages arrive a sync later: other parameters than at once.
if "$ckdiff" "$work/agree-bf16/checkpoint.bin" "$work/agree-overlap-bf16/checkpoint.bin" 1e-3 \
  > "$work/diff-overlap"; then
  fail "overlapped averages, the same parameters as at once: $(cat "$work/diff-overlap")"
fi
threads=2 agree agree-threads
grep -q "shared-memory exchange, 1 Dense layer split" "$work/agree-threads.log" ||
  fail "two threads a rank: not the shared exchange between them: $(cat "$work/agree-threads.log")"

# Accuracy and what the run says of itself.
run sync4 --exchange allreduce --epochs 4
run local4 --local-sgd 16 --epochs 4
run local4-bf16 --local-sgd 16 --local-sgd-bf16 --epochs 4
run local4-overlap --local-sgd 16 --local-sgd-bf16 --local-sgd-overlap --epochs 4
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
plain = json.load(open(f"{w}/sync4.json"))
for name, size, compression in (("local4", 4, "none"), ("local4-bf16", 2, "bf16"),
                                ("local4-overlap", 2, "bf16")):
    local = json.load(open(f"{w}/{name}.json"))
    assert local["local_sgd_overlap"] == (name == "local4-overlap"), local["local_sgd_overlap"]
    gap = 100 * (plain["test_accuracy"] - local["test_accuracy"])
    print(f"4 epochs: test accuracy {100 * plain['test_accuracy']:.2f}% plain, "
          f"{100 * local['test_accuracy']:.2f}% averaged every 16 steps ({name}: {compression})")
    assert local["exchange"] == "local-sgd" and local["local_sgd"] == 16, (local["exchange"], local["local_sgd"])
    assert local["grad_compression"] == compression, local["grad_compression"]
    assert local["test_accuracy"] > 0.9 and abs(gap) <= 1.5, (local["test_accuracy"], gap)
    sent = size * local["param_count"] / 16  # (and a few padding floats, 3 doubles of statistics)
    assert abs(local["exchange_bytes_per_step"] - sent) < 16, (local["exchange_bytes_per_step"], sent)
    assert local["wire_bytes_per_step"] == local["exchange_bytes_per_step"], local["wire_bytes_per_step"]
    epochs = [l for l in open(f"{w}/{name}.log") if l.startswith("epoch ")]
    assert len(epochs) == 4 and all(" local-sgd " in l for l in epochs), epochs
PY

# Overlapped with no checkpoint: the epochs' ends overlap too (all but the last), and their
# figures are those of the average each carried.
bare=1 run ends4 --local-sgd 16 --local-sgd-bf16 --local-sgd-overlap --epochs 4
bare=1 run ends1 --local-sgd 16 --local-sgd-bf16 --local-sgd-overlap --epochs 1
bare=1 run ends2-float --local-sgd 16 --local-sgd-overlap --epochs 2
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
plain, four, one, flt, ck = (json.load(open(f"{w}/{n}.json"))
                             for n in ("sync4", "ends4", "ends1", "ends2-float", "local4-overlap"))
print(f"epochs' ends overlapped: {four['epoch_ends_overlapped']} of 4, {flt['epoch_ends_overlapped']} "
      f"of 2 in float, {one['epoch_ends_overlapped']} of 1, {ck['epoch_ends_overlapped']} of 4 with checkpoints")
assert (four["epoch_ends_overlapped"], flt["epoch_ends_overlapped"], one["epoch_ends_overlapped"],
        ck["epoch_ends_overlapped"]) == (3, 1, 0, 0)
assert four["params_agree"] is True and flt["params_agree"] is True
lines = [l.split()[1] for l in open(f"{w}/ends4.log") if l.startswith("epoch ")]
assert lines == ["1/4", "2/4", "3/4", "4/4"], lines
for key in ("seconds_per_epoch", "loss_per_epoch", "test_loss_per_epoch", "test_accuracy_per_epoch"):
    assert len(four[key]) == 4 and len(flt[key]) == 2, key
# Epoch 1's figures, landed in epoch 2: the statistics its last average carried, and its
# average evaluated (not either rank's weights after epoch 2's first steps).
print(f"epoch 1: training loss {four['loss_per_epoch'][0]:.9f} (1-epoch run "
      f"{one['loss_per_epoch'][0]:.9f}), test loss {four['test_loss_per_epoch'][0]:.9f} "
      f"(1-epoch run {one['test_loss']:.9f})")
assert abs(four["loss_per_epoch"][0] - one["loss_per_epoch"][0]) <= 1e-9 * one["loss_per_epoch"][0]
assert abs(four["test_loss_per_epoch"][0] - one["test_loss"]) <= 1e-9 * one["test_loss"]
assert four["test_accuracy_per_epoch"][0] == one["test_accuracy"]
assert four["test_loss_per_epoch"][3] == four["test_loss"], "the last epoch: the final weights"
gap = 100 * (plain["test_accuracy"] - four["test_accuracy"])
print(f"4 epochs, every end overlapped: test accuracy {100 * four['test_accuracy']:.2f}%, "
      f"plain {100 * plain['test_accuracy']:.2f}%")
assert four["test_accuracy"] > 0.9 and abs(gap) <= 1.5, (four["test_accuracy"], gap)
PY

grep -q "local SGD: each rank steps alone (shared-memory exchange), the ranks' parameters averaged every 16 steps" \
  "$work/local4.log" || fail "no local SGD summary: $(cat "$work/local4.log")"
grep -q "averaged every 16 steps, their changes sent as bfloat16, each average overlapping the steps after it" \
  "$work/local4-overlap.log" || fail "no overlap in the summary: $(cat "$work/local4-overlap.log")"

# A stop signal on one rank: both stop at the same sync, checkpointed; the run resumes.
# Overlapped, the stop travels with an average and takes effect at the sync after it, which
# then settles (every 10 steps: at a multiple of 10 in the epoch, or at its end). The signal
# goes where the epoch has room for that (read from the rank's heartbeat: its global step), so
# a stop lost on the way, which would wait for the epoch's end, is seen: the ranks must stop
# within BOUND steps of the signal (H + 2 at once, 2H + 2 overlapped), counted from the step
# the heartbeat shows just after the signal (on a loaded machine the rank may have gone on
# between the reading before it and the signal).
stop_and_resume() {  # stop_and_resume NAME H BOUND ARGS...
  local name=$1 h=$2 bound=$3 gp rank hb spe at after step; shift 3
  "$gpurun" -q -n 2 -- "$mnist" --device cpu --data "$data" --threads 1 --seed 5 --epochs 40 \
    --local-sgd "$h" "$@" --checkpoint "$work/$name" > "$work/$name.log" 2>&1 &
  gp=$!
  for _ in $(seq 300); do grep -q "^epoch 2/40" "$work/$name.log" && break; sleep 0.1; done
  grep -q "^epoch 2/40" "$work/$name.log" ||
    { kill -TERM $gp; fail "no second epoch: $(cat "$work/$name.log")"; }
  rank=$(pgrep -n -f -- "--checkpoint $work/$name") || fail "no rank to signal"
  hb=$(tr '\0' '\n' < "/proc/$rank/environ" | sed -n 's/^GPURUN_HEARTBEAT=//p')
  [ -f "$hb" ] || fail "no heartbeat file for rank $rank"
  spe=$(sed -n 's/^training: .* images, \([0-9]*\) steps\/epoch.*/\1/p' "$work/$name.log")
  for _ in $(seq 1000); do  # at most 10 s: an epoch takes under 2
    at=$(cat "$hb")
    [[ $at =~ ^[0-9]+$ ]] && at=$((10#$at)) || { at=0; continue; }
    (( at % spe >= 1 && at % spe < spe - bound - 1 )) && break
    sleep 0.01
  done
  kill -USR1 "$rank"
  for _ in $(seq 100); do after=$(cat "$hb"); [[ $after =~ ^[0-9]+$ ]] && break; sleep 0.01; done
  [[ $after =~ ^[0-9]+$ ]] || fail "no heartbeat after the signal"
  after=$((10#$after))
  timeout 60 tail --pid=$gp -f /dev/null ||
    { kill -TERM $gp; sleep 5; kill -KILL $gp 2>/dev/null; fail "the ranks did not stop together"; }
  wait $gp || true
  step=$(sed -n 's/.*stopped at a step boundary (global step \([0-9]*\)).*/\1/p' "$work/$name.log")
  [ -n "$step" ] || fail "no stop at a step boundary: $(cat "$work/$name.log")"
  (( step % spe % h == 0 )) || fail "stopped at step $step: not a sync of every $h in $spe-step epochs"
  (( step > at && step - after <= bound )) ||
    fail "signalled at step $at (heartbeat $after just after), stopped at $step: not within $bound steps"
  echo "$name: signalled at global step $at ($after just after), stopped at $step"
  mv "$work/$name" "$work/$name-resumed"  # (run's checkpoint folder)
  run "$name-resumed" --epochs 40 --local-sgd "$h" "$@" --resume --max-steps $((step + 20))
  grep -q "resumed from" "$work/$name-resumed.log" ||
    fail "not resumed: $(cat "$work/$name-resumed.log")"
  python3 -c "import json, sys; r = json.load(open(sys.argv[1])); \
    sys.exit(0 if r['steps_run'] == 20 and r['global_steps'] == $step + 20 and \
    r['test_accuracy'] > 0.8 and r['params_agree'] is True else 1)" "$work/$name-resumed.json" ||
    fail "the resumed run: $(cat "$work/$name-resumed.log")"
}
stop_and_resume stop 40 42
stop_and_resume stop-overlap 10 22 --local-sgd-overlap

refused() {  # refused WHAT ARGS...: mnist_cnn with ARGS must fail saying WHAT
  local what=$1; shift
  if "$gpurun" -q -n 2 -- "$mnist" --data "$data" --max-steps 2 "$@" > "$work/r" 2>&1; then
    fail "accepted: $*"
  fi
  grep -q -- "$what" "$work/r" || fail "$*: $(cat "$work/r")"
}
for bad in 0 -3 100001; do
  refused "--local-sgd must be from 1 to 100000" --device cpu --local-sgd $bad
done
refused "the argument ('x') for option '--local-sgd' is invalid" --device cpu --local-sgd x
refused "does not go with --grad-compression" --device cpu --local-sgd 8 --grad-compression acp:2
refused "does not go with --bucket-mb" --device cpu --local-sgd 8 --exchange allreduce --bucket-mb 1
refused "does not go with --exchange hierarchical" --device cpu --local-sgd 8 --exchange hierarchical
refused "--local-sgd is the CPU path's" --device cuda --local-sgd 8
refused "give --local-sgd H too" --device cpu --local-sgd-bf16
refused "give --local-sgd H too" --device cpu --local-sgd-overlap
echo PASS
