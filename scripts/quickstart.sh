#!/usr/bin/env bash
# Quickstart: installs the dependencies, builds gpurun, shows what it sees on this machine,
# launches a 2-rank demo, fetches MNIST and trains the MNIST CNN for one epoch with 1 and 2 ranks,
# then prints the two runs side by side.
#   ./scripts/quickstart.sh             (EPOCHS=1 by default; DATA=data/mnist)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build}
epochs=${EPOCHS:-1}
data=${DATA:-data/mnist}

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "dependencies (Debian packages)"
./scripts/install-deps.sh

step "build"
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
[[ -f $build/CMakeCache.txt ]] || cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)" --target gpurun rank_info mnist_cnn
gpurun=$build/launcher/gpurun

step "what gpurun sees here: gpurun info"
"$gpurun" info

step "a 2-rank launch: gpurun -n 2 -- rank_info"
"$gpurun" -n 2 -- "$build/examples/rank_info/rank_info"

step "data: $data"
./scripts/fetch-data.sh

mkdir -p out
for n in 1 2; do
  step "MNIST CNN, $epochs epoch(s), $n rank(s): gpurun -n $n -- mnist_cnn --data $data"
  "$gpurun" -n "$n" -- "$build/examples/mnist_cnn/mnist_cnn" --data "$data" --epochs "$epochs" \
    --threads 1 --report "out/quickstart-n$n.json"
done

step "summary"
python3 - out/quickstart-n1.json out/quickstart-n2.json <<'PY'
import json, sys
rows = [json.load(open(p)) for p in sys.argv[1:]]
print(f"{'ranks':>5} {'global batch':>12} {'seconds':>8} {'images/s':>9} {'loss':>7} {'train acc':>9} {'test acc':>8} {'exchange':>9} {'exchange s':>10}")
for r in rows:
    print(f"{r['world_size']:>5} {r['global_batch']:>12} {r['seconds_total']:>8.1f} {r['images_per_second']:>9.0f} "
          f"{r['final_loss']:>7.4f} {100*r['train_accuracy']:>8.2f}% {100*r['test_accuracy']:>7.2f}% {r.get('exchange', 'allreduce'):>9} {r['allreduce_seconds']:>10.2f}")
for r in rows:
    if r.get("lr_last") is not None and r["lr_last"] < r["lr"]:
        print(f"note: {r['world_size']} ranks ended still warming up: learning rate "
              f"{r['lr_last']:.3g} of {r['lr']:.3g} after {r['global_steps']} steps. Its global batch is "
              f"{r['world_size']}x, so an epoch is 1/{r['world_size']} the steps: compare after more "
              f"epochs (EPOCHS=4 ./scripts/quickstart.sh).")
PY
