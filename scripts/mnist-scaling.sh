#!/usr/bin/env bash
# mnist-scaling.sh: the MNIST scaling benchmark: mnist_cnn at several rank counts, launched by gpurun
# (inside the current Slurm/PBS/LSF allocation, or on this machine), summarized as a table and a plot.
#
#   scripts/mnist-scaling.sh [--ranks 1,2,4,8] [--data DIR] [--epochs N] [--mode weak|strong]
#                            [--out DIR] [--batch B] [--build DIR] [--gpurun PATH] [--mnist-cnn PATH]
#                            [--gpurun-args "ARGS"] [--launch "CMD {n}"] [--note TEXT]
#                            [--link GBIT[,GBIT...]] [--latency-us US]
#                            [-- MNIST_CNN_ARGS...]
#
#   --ranks     rank counts to run (default 1,2,4,8)
#   --data      MNIST-format directory (default data/mnist; scripts/fetch-data.sh prepares it)
#   --epochs    epochs per run (default 2)
#   --mode      weak: B images per rank (default 64) and linear LR scaling with warm-up, as in the
#               published table; strong: a fixed global batch B (default 256), B/ranks per rank,
#               no LR scaling
#   --out       output directory (default bench/results/scaling-MODE); writes scaling.md,
#               scaling.csv, scaling.png and runs/ranks-N.{log,json}
#   --build     build directory holding the binaries (default $BUILD_DIR, else build)
#   --gpurun    gpurun binary (default BUILD/launcher/gpurun); --gpurun-args adds options to it
#   --mnist-cnn mnist_cnn binary (default BUILD/examples/mnist_cnn/mnist_cnn)
#   --launch    launch command instead of gpurun, {n} replaced by the rank count, e.g.
#               --launch "mpirun -n {n} --oversubscribe" (for comparisons)
#   --replot    run nothing: redraw scaling.png from the scaling.dat already in --out
#   --note      a sentence for scaling.md (what else ran on the machine, ...)
#   --link      also predict, beside the measured table, the step time and efficiency on 1 to 16
#               nodes over links of these rates (Gbit/s), from the smallest run's report
#               (scripts/step_model.py: compute, node exchange and wire bytes per step, PowerSGD's
#               when the runs pass --grad-compression, a ring allreduce across nodes; a floor on
#               the step, not a measurement)
#   --latency-us the links' one-way latency for --link (default 50)
#   after --     extra mnist_cnn options (--threads 1, --max-steps 200, --seed 7, ...)
#
# Speedup is throughput relative to the smallest rank count run (images/s ratio; with a fixed
# number of epochs every run trains on the same images, so this is also the time ratio);
# efficiency = speedup / (ranks / smallest ranks). Needs python3 (reads the report JSON) and
# gnuplot (the plot; without it scaling.png is skipped with a warning).
set -euo pipefail

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "mnist-scaling: error: $*" >&2; exit 1; }

root=$(cd "$(dirname "$0")/.." && pwd)
ranks_list=1,2,4,8
data=$root/data/mnist
epochs=2
mode=weak
out=""
batch=""
build=${BUILD_DIR:-$root/build}
gpurun=""
mnist=""
gpurun_args=""
launch=""
note=""
replot=0
links=""
latency_us=50
extra=()

while (($#)); do
  case $1 in
    --ranks) ranks_list=${2:?--ranks needs a list}; shift 2 ;;
    --data) data=${2:?--data needs a directory}; shift 2 ;;
    --epochs) epochs=${2:?--epochs needs a number}; shift 2 ;;
    --mode) mode=${2:?--mode needs weak or strong}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --batch) batch=${2:?--batch needs a number}; shift 2 ;;
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --gpurun) gpurun=${2:?--gpurun needs a path}; shift 2 ;;
    --mnist-cnn) mnist=${2:?--mnist-cnn needs a path}; shift 2 ;;
    --gpurun-args) gpurun_args=${2?--gpurun-args needs a string}; shift 2 ;;
    --replot) replot=1; shift ;;
    --note) note=${2?--note needs a text}; shift 2 ;;
    --launch) launch=${2:?--launch needs a command}; shift 2 ;;
    --link) links=${2:?--link needs rates in Gbit/s}; shift 2 ;;
    --latency-us) latency_us=${2:?--latency-us needs a number}; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown option '$1'" ;;
  esac
done

[[ -n $gpurun ]] || gpurun=$build/launcher/gpurun
[[ -n $mnist ]] || mnist=$build/examples/mnist_cnn/mnist_cnn
[[ $mode == weak || $mode == strong ]] || die "--mode must be weak or strong, got '$mode'"
[[ $epochs =~ ^[1-9][0-9]*$ ]] || die "--epochs must be a positive integer, got '$epochs'"
IFS=, read -r -a ranks <<<"$ranks_list"
((${#ranks[@]} > 0)) || die "--ranks is empty"
for r in "${ranks[@]}"; do [[ $r =~ ^[1-9][0-9]*$ ]] || die "--ranks: '$r' is not a positive integer"; done
if [[ -z $batch ]]; then
  if [[ $mode == weak ]]; then batch=64; else batch=256; fi
fi
[[ $batch =~ ^[1-9][0-9]*$ ]] || die "--batch must be a positive integer, got '$batch'"
[[ -n $out ]] || out=$root/bench/results/scaling-$mode
if ((replot)); then [[ -s $out/scaling.dat ]] || die "--replot: no $out/scaling.dat"; fi
((replot)) || [[ -x $mnist ]] || die "mnist_cnn not found at $mnist (build it: cmake --build build --target mnist_cnn, or pass --mnist-cnn)"
if [[ -z $launch && $replot -eq 0 ]]; then
  [[ -x $gpurun ]] || die "gpurun not found at $gpurun (build it: cmake --build build --target gpurun, or pass --gpurun / --launch)"
fi
[[ -d $data ]] || die "data directory $data not found (run scripts/fetch-data.sh or pass --data)"
py=$(command -v python3 || true)
[[ -n $py ]] || die "python3 is needed to read the report JSON"

mkdir -p "$out/runs"
echo "mnist-scaling: $mode scaling, ranks ${ranks[*]}, $epochs epoch(s), data $data -> $out"

for r in "${ranks[@]}"; do
  ((replot == 0)) || break
  if [[ $mode == weak ]]; then
    per_rank=$batch
    lr_args=(--lr-scaling linear)
  else
    ((batch % r == 0)) || die "strong mode: global batch $batch is not divisible by $r ranks (use --batch)"
    per_rank=$((batch / r))
    lr_args=(--lr-scaling none)
  fi
  report=$out/runs/ranks-$r.json
  log=$out/runs/ranks-$r.log
  rm -f "$report"
  prog=("$mnist" --data "$data" --epochs "$epochs" --batch-size "$per_rank" "${lr_args[@]}"
    --report "$report" "${extra[@]+"${extra[@]}"}")
  if [[ -n $launch ]]; then
    # shellcheck disable=SC2206
    cmd=(${launch//\{n\}/$r} "${prog[@]}")
  else
    # shellcheck disable=SC2206
    cmd=("$gpurun" -n "$r" $gpurun_args -- "${prog[@]}")
  fi
  echo "mnist-scaling: ranks=$r: ${cmd[*]}"
  echo "# ${cmd[*]}" >"$log"
  start=$(date +%s.%N)
  if ! "${cmd[@]}" >>"$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "the run with $r rank(s) failed (log: $log)"
  fi
  end=$(date +%s.%N)
  [[ -s $report ]] || die "the run with $r rank(s) wrote no report $report (log: $log)"
  tr '\r' '\n' <"$log" | grep -E '^epoch .*(test|acc)' | tail -n 1 | sed 's/^/    /' || true
  echo "$start $end" >"$out/runs/ranks-$r.wall"
done

# Table, CSV and gnuplot data from the reports.
((replot)) || "$py" - "$out" "$mode" "$epochs" "$data" "$note" "${ranks[@]}" <<'EOF'
import json, os, sys, platform, datetime, re
out, mode, epochs, data, note = sys.argv[1:6]
ranks = [int(r) for r in sys.argv[6:]]
rows = []
for r in ranks:
    with open(os.path.join(out, "runs", f"ranks-{r}.json")) as f:
        j = json.load(f)
    if int(j["world_size"]) != r:
        sys.exit(f"mnist-scaling: error: ranks-{r}.json says world_size {j['world_size']}, expected {r}")
    wall = open(os.path.join(out, "runs", f"ranks-{r}.wall")).read().split()
    # gpurun says "gpurun: N ranks on M nodes via ENGINE"; another launcher may not.
    m = re.search(r"gpurun: \d+ ranks? on (\d+) nodes?(?: via (\S+))?",
                  open(os.path.join(out, "runs", f"ranks-{r}.log"), errors="replace").read())
    nodes, engine = (m.group(1), m.group(2) or "") if m else ("", "")
    rows.append(dict(ranks=r, seconds=float(j["seconds_total"]), wall=float(wall[1]) - float(wall[0]),
                     loss=float(j["final_loss"]), train_acc=float(j["train_accuracy"]),
                     test_acc=float(j["test_accuracy"]), ips=float(j["images_per_second"]),
                     allreduce=float(j.get("allreduce_seconds", 0.0)),
                     batch_per_rank=int(j["batch_per_rank"]), global_batch=int(j["global_batch"]),
                     lr=float(j["lr"]), device=j.get("device", "?"), dataset=j.get("dataset", data),
                     epochs=j.get("epochs", epochs), threads=j.get("threads_per_rank", ""),
                     nodes=nodes, engine=engine))
base = min(rows, key=lambda x: x["ranks"])
for x in rows:
    x["speedup"] = x["ips"] / base["ips"] if base["ips"] > 0 else 0.0
    x["efficiency"] = x["speedup"] / (x["ranks"] / base["ranks"])

cols = ["ranks", "seconds", "loss", "train_accuracy", "test_accuracy", "images_per_second",
        "speedup", "efficiency", "allreduce_seconds", "batch_per_rank", "global_batch", "lr",
        "epochs", "device", "mode", "wall_seconds", "nodes", "threads_per_rank", "engine"]
with open(os.path.join(out, "scaling.csv"), "w") as f:
    f.write(",".join(cols) + "\n")
    for x in rows:
        f.write(",".join(str(v) for v in [
            x["ranks"], f"{x['seconds']:.3f}", f"{x['loss']:.4f}", f"{x['train_acc']:.4f}",
            f"{x['test_acc']:.4f}", f"{x['ips']:.1f}", f"{x['speedup']:.3f}", f"{x['efficiency']:.3f}",
            f"{x['allreduce']:.3f}", x["batch_per_rank"], x["global_batch"], f"{x['lr']:.4g}",
            x["epochs"], x["device"], mode, f"{x['wall']:.1f}", x["nodes"], x["threads"],
            x["engine"]]) + "\n")

with open(os.path.join(out, "scaling.dat"), "w") as f:
    f.write("# ranks seconds test_accuracy_percent\n")
    for x in rows:
        f.write(f"{x['ranks']} {x['seconds']:.3f} {100 * x['test_acc']:.2f}\n")

where = "this machine"
for var, name in (("SLURM_JOB_ID", "Slurm job"), ("PBS_JOBID", "PBS job"), ("LSB_JOBID", "LSF job")):
    if os.environ.get(var):
        where = f"{name} {os.environ[var]}"
        if var == "SLURM_JOB_ID" and os.environ.get("SLURM_JOB_NODELIST"):
            where += f" on {os.environ['SLURM_JOB_NODELIST']}"
        break
batch_desc = (f"{base['batch_per_rank']} images per rank, linear LR scaling with warm-up"
              if mode == "weak" else f"global batch {base['global_batch']} split over the ranks, no LR scaling")
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
with open(os.path.join(out, "scaling.md"), "w") as f:
    f.write(f"# MNIST CNN scaling ({mode})\n\n")
    f.write(f"mnist_cnn on `{base['dataset']}`, {base['epochs']} epoch(s), {batch_desc}; device "
            f"{base['device']}; {where}; host {platform.node()} ({os.cpu_count()} CPUs, "
            f"{platform.machine()}); {now}. Written by `scripts/mnist-scaling.sh`.\n\n")
    if note:
        f.write(note + "\n\n")
    with_nodes = any(x["nodes"] for x in rows)
    f.write("| ranks | " + ("nodes | " if with_nodes else "") + "seconds | loss | accuracy (train) | test accuracy | images/s | speedup | efficiency |\n")
    f.write("|---:|" + ("---:|" if with_nodes else "") + "---:|---:|---:|---:|---:|---:|---:|\n")
    for x in rows:
        f.write(f"| {x['ranks']} | " + (f"{x['nodes'] or '?'} | " if with_nodes else "") + f"{x['seconds']:.1f} | {x['loss']:.4f} | {100 * x['train_acc']:.2f}% | "
                f"{100 * x['test_acc']:.2f}% | {x['ips']:.0f} | {x['speedup']:.2f} | "
                f"{100 * x['efficiency']:.0f}% |\n")
    f.write(f"\nseconds: mnist_cnn's `seconds_total`; loss and accuracy (train): the last epoch's; "
            f"speedup: images/s relative to {base['ranks']} rank(s); efficiency: speedup / "
            f"(ranks / {base['ranks']}). Per-run logs and report JSON: `runs/`.\n")
print(open(os.path.join(out, "scaling.md")).read())
EOF

# The step-time model beside the measured table: what more nodes would give at these link rates.
if [[ -n $links && $replot -eq 0 ]]; then
  link_args=()
  IFS=, read -r -a rates <<<"$links"
  smallest=$(printf '%s\n' "${ranks[@]}" | sort -n | head -n 1)
  for g in "${rates[@]}"; do link_args+=(--gbit "$g"); done
  {
    echo
    echo "## Predicted for more nodes"
    echo
    "$py" "$root/scripts/step_model.py" "$out/runs/ranks-$smallest.json" "${link_args[@]}" \
      --latency-us "$latency_us"
  } >"$out/prediction.md" || die "the step-time model failed (scripts/step_model.py)"
  cat "$out/prediction.md" >>"$out/scaling.md"
  cat "$out/prediction.md"
  rm -f "$out/prediction.md"
fi

if command -v gnuplot >/dev/null; then
  term="pngcairo size 800,500"
  gnuplot -e "set terminal pngcairo" >/dev/null 2>&1 || term="png size 800,500"
  if ! gnuplot >"$out/gnuplot.log" 2>&1 <<EOF; then
set terminal $term
set output "$out/scaling.png"
set title "MNIST CNN, $mode scaling ($(basename "$data"), $epochs epochs)"
set xlabel "ranks"
set logscale x 2
set xtics (${ranks_list//,/, })
set ylabel "seconds"
set y2label "test accuracy (%)"
set ytics nomirror
set y2tics
set yrange [0:*]
stats "$out/scaling.dat" using 3 nooutput name "ACC"
set y2range [floor(ACC_min) - 2 : 100]
set grid
set key bottom left
plot "$out/scaling.dat" using 1:2 with linespoints lw 2 pt 7 title "time (s)", \
     "$out/scaling.dat" using 1:3 axes x1y2 with linespoints lw 2 pt 5 title "test accuracy (%)"
EOF
    echo "mnist-scaling: warning: gnuplot failed, no scaling.png (log: $out/gnuplot.log)" >&2
  else
    rm -f "$out/gnuplot.log"
  fi
else
  echo "mnist-scaling: warning: gnuplot not installed, no scaling.png" >&2
fi
echo "mnist-scaling: wrote $out/scaling.md, $out/scaling.csv$([[ -f $out/scaling.png ]] && echo ", $out/scaling.png")"
