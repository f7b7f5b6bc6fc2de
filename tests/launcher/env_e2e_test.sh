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

# Torque without CUDA_VISIBLE_DEVICES: the ranks get the GPUs PBS_GPUFILE names for their node
# (2 and 3 here), not the node's first devices (another job's); through mpirun and the fork.
h=$(hostname)
printf '%s\n%s\n' "$h" "$h" >"$out/nodefile"
printf '%s-gpu2\n%s-gpu3\n' "$h" "$h" >"$out/gpufile"
for engine in mpirun local; do
  got=$(env -u CUDA_VISIBLE_DEVICES PBS_JOBID=9.pbs PBS_NODEFILE="$out/nodefile" \
    PBS_GPUFILE="$out/gpufile" PBS_NUM_PPN=2 "$gpurun" -q --launcher $engine -- \
    sh -c 'echo "$RANK:$CUDA_VISIBLE_DEVICES"' 2>/dev/null | sort | tr '\n' ' ')
  [[ $got == "0:2 1:3 " ]] || { echo "FAIL($engine): PBS_GPUFILE gave '$got', want '0:2 1:3 '"; exit 1; }
done
echo "ok: PBS_GPUFILE's GPUs reach the ranks without CUDA_VISIBLE_DEVICES (mpirun and fork)"

# Issue 25, item 1: with a Python venv active, every rank runs the venv's python with the user's
# PATH first, through mpirun (run by its full path it acts as --prefix /usr and put /usr/bin
# before the venv: every rank printed /usr) and through the fork.
python3 -m venv --without-pip "$out/venv"
for engine in mpirun local; do
  got=$(
    # shellcheck disable=SC1091
    source "$out/venv/bin/activate"
    "$gpurun" -q --scheduler local --launcher $engine -n 2 -- \
      python3 -c 'import os, sys; print(sys.prefix, os.environ["PATH"].split(":")[0], os.environ.get("LD_LIBRARY_PATH", "-"))'
  )
  want="$out/venv $out/venv/bin -"
  [[ $got == "$want"$'\n'"$want" ]] || { echo "FAIL($engine): with the venv active the ranks said:"; echo "$got"; echo "(want twice: $want)"; exit 1; }
done
echo "ok: a venv's python and PATH reach both ranks (mpirun and fork)"
# The engines that cannot run here hand the user's PATH to each rank's wrapper on its command.
printf 'h1\nh1\nh2\nh2\n' >"$out/lsfhosts"
mkdir "$out/fakebin"  # stand-ins, only looked up
for t in blaunch jsrun pbsdsh; do printf '#!/bin/sh\nexit 1\n' >"$out/fakebin/$t"; chmod +x "$out/fakebin/$t"; done
for case in "LSB_JOBID=5 LSB_DJOB_HOSTFILE=$out/lsfhosts|blaunch" \
            "LSB_JOBID=5 LSB_DJOB_HOSTFILE=$out/lsfhosts|jsrun" "PBS_JOBID=9.pbs PBS_NODEFILE=$out/nodefile|pbsdsh"; do
  IFS='|' read -r vars engine <<<"$case"
  # shellcheck disable=SC2086
  cmd=$(env -u CUDA_VISIBLE_DEVICES $vars PATH="$out/venv/bin:$out/fakebin:$PATH" "$gpurun" --dry-run --launcher $engine -- python3 x.py | sed -n 's/.* _rank //p')
  grep -qF -- "--path $out/venv/bin:" <<<"$cmd" || { echo "FAIL($engine): the wrapper gets no --path: $cmd"; exit 1; }
done
echo "ok: blaunch, jsrun and pbsdsh hand the user's PATH to every rank (dry run)"

# Issue 25, item 2: --dry-run lists every variable a rank gets (those added at the start too:
# GPURUN_HEARTBEAT, GPURUN_RESTART_COUNT, PYTHONUNBUFFERED, NCCL/GLOO_SOCKET_IFNAME, PYTHONPATH,
# GPURUN_PYSTACK_DIR), and its command runs as printed.
for engine in mpirun local; do
  rm -f "$out"/env.*
  args=(--scheduler local --launcher $engine -n 2 --hang-timeout 600)
  env -u PYTHONUNBUFFERED -u NCCL_SOCKET_IFNAME -u GLOO_SOCKET_IFNAME "$gpurun" --dry-run "${args[@]}" -- true >"$out/dry"
  OUT=$out env -u PYTHONUNBUFFERED -u NCCL_SOCKET_IFNAME -u GLOO_SOCKET_IFNAME -u PYTHONPATH \
    "$gpurun" -q "${args[@]}" -- sh -c 'env >"$OUT/env.$RANK"'
  env -u PYTHONUNBUFFERED -u PYTHONPATH | cut -d= -f1 | sort >"$out/ours"
  for r in 0 1; do
    # What gpurun added to the rank (engines add their own: OMPI_*, PMIX_*, ...).
    cut -d= -f1 "$out/env.$r" | grep -Ev '^(OMPI_|PMIX_|OPAL_|ORTE_|HFI_|IPATH_|PSM2?_|OUT$|SHLVL$|PWD$|_$|LD_LIBRARY_PATH$)' |
      sort | comm -23 - "$out/ours" >"$out/added"
    awk -v r="$r" '/^# rank / { on = ($3 == r) } on && /^[A-Z_]+=/' "$out/dry" | cut -d= -f1 | sort >"$out/listed"
    missing=$(comm -23 "$out/added" "$out/listed")
    [[ -z $missing ]] || { echo "FAIL($engine): rank $r got variables --dry-run does not list: $missing"; exit 1; }
    for v in GPURUN_HEARTBEAT GPURUN_RESTART_COUNT PYTHONUNBUFFERED NCCL_SOCKET_IFNAME PYTHONPATH GPURUN_PYSTACK_DIR; do
      grep -qx "$v" "$out/listed" || { echo "FAIL($engine): --dry-run does not list $v"; exit 1; }
    done
  done
  ! grep -q '<set-at-launch>' "$out/dry" || { echo "FAIL($engine): a placeholder in the command"; exit 1; }
  # shellcheck disable=SC2016
  cmd=$("$gpurun" --dry-run "${args[@]}" -- sh -c 'echo rank $RANK' | sed -n '/^# runnable as printed/{n;p}')
  # gpurun by its absolute path, so the command runs where gpurun is not on PATH (it named
  # 'gpurun'); run here with none on PATH.
  grep -qF " $(realpath "$gpurun") _rank " <<<"$cmd" || { echo "FAIL($engine): the command does not name gpurun by its path: $cmd"; exit 1; }
  got=$(cd "$out" && PATH=$(tr ':' '\n' <<<"$PATH" | grep -vxF "$(dirname "$(realpath "$gpurun")")" | paste -sd:) &&
    ! command -v gpurun >/dev/null && eval "$cmd" | sort | tr '\n' ' ')
  [[ $got == "rank 0 rank 1 " ]] || { echo "FAIL($engine): the printed command ran as '$got'"; echo "$cmd"; exit 1; }
done
echo "ok: --dry-run lists every variable the ranks got, and its command runs as printed (mpirun and fork)"
