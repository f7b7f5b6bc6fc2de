#!/usr/bin/env bash
# ab_cpu.sh OLD_MNIST_CNN NEW_MNIST_CNN [ROUNDS] [DATA]: CPU training speed of two mnist_cnn
# builds, interleaved in the same run: 300 steps of 64 images on 1 rank (1 thread) and on 2 ranks
# under mpirun (shared-memory exchange), ROUNDS times each (default 3). Prints images per second
# of the training steps (the report's images / train_seconds) for each run. For a change that must
# not make training slower: build the old commit's mnist_cnn aside, then compare.
set -euo pipefail
old=$1 new=$2 rounds=${3:-3} data=${4:-data/mnist}
report=$(mktemp)
trap 'rm -f "$report"' EXIT
rate() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print('%.0f' % (j['images'] / j['train_seconds']))" "$report"; }
one() {  # BIN LABEL
  "$1" --data "$data" --device cpu --threads 1 --max-steps 300 --epochs 10 --report "$report" >/dev/null
  echo "$2 1 rank   $(rate) img/s"
  mpirun --allow-run-as-root --oversubscribe --bind-to none -n 2 -x OMP_NUM_THREADS=1 "$1" \
    --data "$data" --device cpu --threads 1 --exchange shared --max-steps 300 --epochs 10 \
    --report "$report" >/dev/null
  echo "$2 2 ranks  $(rate) img/s"
}
for _ in $(seq "$rounds"); do one "$old" old; one "$new" new; done
