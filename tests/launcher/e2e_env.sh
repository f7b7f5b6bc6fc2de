#!/usr/bin/env bash
# End to end: `gpurun -n 4 -- <program>` on this host, through mpirun and through gpurun's own
# fork, gives 4 distinct ranks with the torchrun env:// contract in each.
set -euo pipefail
gpurun=$1
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
prog='printf "%s %s %s %s %s %s %s %s %s\n" "$RANK" "$WORLD_SIZE" "$LOCAL_RANK" "$LOCAL_WORLD_SIZE" "$NODE_RANK" "$MASTER_ADDR" "$MASTER_PORT" "$CUDA_DEVICE_ORDER" "$GPURUN_SCHEDULER" > "$OUT/rank.$RANK"'
for engine in mpirun local; do
  rm -f "$out"/rank.*
  OUT=$out "$gpurun" --scheduler local --launcher $engine -n 4 -- bash -c "$prog"
  n=$(ls "$out" | wc -l)
  [[ $n == 4 ]] || { echo "FAIL($engine): expected 4 rank files, got $n"; ls "$out"; exit 1; }
  ports=$(cut -d' ' -f7 "$out"/rank.* | sort -u | wc -l)
  [[ $ports == 1 ]] || { echo "FAIL($engine): ranks disagree on MASTER_PORT"; cat "$out"/rank.*; exit 1; }
  for r in 0 1 2 3; do
    read -r rank ws lr lws nr ma mp order sched < "$out/rank.$r"
    want="$r 4 $r 4 0 127.0.0.1 PCI_BUS_ID local"
    got="$rank $ws $lr $lws $nr $ma $order $sched"
    [[ $got == "$want" ]] || { echo "FAIL($engine) rank $r: got '$got', want '$want'"; exit 1; }
    [[ $mp =~ ^[0-9]+$ && $mp -ge 1024 ]] || { echo "FAIL($engine): MASTER_PORT '$mp'"; exit 1; }
  done
  echo "ok: $engine gave 4 ranks with the right environment"
done
