#!/usr/bin/env python3
"""step_model.py: will more nodes help? Predicts mnist_cnn's step time on N nodes from one report.

    scripts/step_model.py REPORT.json --gbit 10 [--gbit 1] [--latency-us 50] [--nodes 1,2,4,8]
                          [--ranks-per-node K] [--baseline BASE.json]

REPORT.json is `mnist_cnn --report` of a run on one node, with the exchange and compression the
nodes would use. It records, per step, the compute time (compute_seconds_per_step), the time the
ranks of that node spent combining gradients (exchange_seconds_per_step) and what each rank would
hand to an allreduce across nodes (wire_bytes_per_step: the whole gradient, or with
--grad-compression powersgd:R or acp:R the thin matrices, or with --local-sgd H an average's
bytes / H; older reports: gradient_bytes). Across N
nodes, the model adds a ring allreduce of those bytes over a link of G Gbit/s with a one-way
latency L (the alpha-beta model of Thakur, Rabenseifner and Gropp 2005), in S sums one after
another (S = 1; PowerSGD sums P, then Q: S = 2; acp:R one of the two: S = 1; local SGD two
every H steps: S = 2 / H):

    ring(N) = 2 (N - 1) / N * bytes / bandwidth + S * 2 (N - 1) * L

    flat:          every rank in one ring over the N nodes (it replaces the node exchange); gpurun
                   places a node's K ranks next to each other, so one edge of the ring leaves each
                   node: its link carries 2 (P - 1) / P * bytes, P = N K, and each of the 2 (P - 1)
                   steps waits for it (an MPI that picks another algorithm, such as recursive
                   halving, sends more across: the model does not follow it)
    hierarchical:  the ranks of a node combine in the node first (the measured exchange), then one
                   rank per node runs ring(N), then shares the result in the node

    step(1) = compute + node exchange (both measured)
    step(N) = compute + max(node exchange, flat ring), or compute + node exchange + ring(N)
              (no overlap of compute and exchange)

With compression the node exchange is mostly the compression's own CPU time (on one rank it is
nothing else), which the ring cannot hide: step(N) = compute + node exchange + ring, flat too;
so with local SGD, whose average waits for the steps before it. Overlapped local SGD
(--local-sgd-overlap, the report's local_sgd_overlap) sends each average while the next H steps
compute, so only what the ring takes beyond them is added: ring(N) / H becomes
max(0, ring(N) / H - compute): a best case, as the averages move only at one MPI_Test a step.
The model leaves out the averages that are not overlapped: the run's last, and each epoch's
end where a checkpoint is written.

Weak scaling keeps the images per rank, so the efficiency against one node is step(1) / step(N);
with --baseline, against BASE.json's step instead (compute + exchange): the one-node run you
would otherwise make, e.g. mnist_cnn's fastest, without compression, when REPORT.json compresses.
The two should run with the same threads per rank (a warning says when they did not): on a
machine with more cores than one, the baseline's default threads make its step faster for a
reason that is not the compression.
The model ignores what a real link adds (TCP's ramp-up, contention, the MPI library's choice of
algorithm): it is a floor on the step time, a bound on the efficiency. Compare it with a measured
table before trusting it.
"""
import argparse
import json
import math
import sys

REQUIRED = ("compute_seconds_per_step", "exchange_seconds_per_step", "gradient_bytes",
            "batch_per_rank", "world_size")


def ring_seconds(nbytes, ring_size, link_bytes_per_s, latency_s, sums=1):
    """A ring allreduce of nbytes in `sums` sums one after another over ring_size members, one
    edge of the ring on the link."""
    if ring_size <= 1:
        return 0.0
    volume = 2.0 * (ring_size - 1) / ring_size * nbytes
    return volume / link_bytes_per_s + sums * 2.0 * (ring_size - 1) * latency_s


def compressed(report):
    """Whether the report's run compressed its gradient (--grad-compression)."""
    return report.get("grad_compression", "none") != "none" and not local_sgd(report)


def local_sgd(report):
    """Local SGD's steps between averages (--local-sgd H), 0 for an exchange every step."""
    return int(report.get("local_sgd") or 0)


def sums_per_step(report):
    """The sums one after another a step: PowerSGD sums P, then Q; ACP-SGD (acp:R) one of them;
    local SGD two (the statistics, the weights) every H steps."""
    if local_sgd(report):
        return 2.0 / local_sgd(report)
    return 2 if report.get("grad_compression", "none").startswith("powersgd") else 1


def overlapped(report):
    """Whether local SGD's averages overlap the steps after them (--local-sgd-overlap)."""
    return bool(local_sgd(report) and report.get("local_sgd_overlap"))


def wire_bytes(report):
    """What a rank hands to the allreduce across nodes a step (older reports: the gradient)."""
    return float(report.get("wire_bytes_per_step") or report["gradient_bytes"])


def one_node_step(report):
    return float(report["compute_seconds_per_step"]) + float(report["exchange_seconds_per_step"])


def predict(report, nodes, gbit, latency_s, ranks_per_node, hierarchical, baseline=None):
    """The predicted step on `nodes` nodes: a dict of seconds, shares and images/s; the
    efficiency against `baseline`'s one-node step (default: the report's own)."""
    compute = float(report["compute_seconds_per_step"])
    local = float(report["exchange_seconds_per_step"])
    nbytes = wire_bytes(report)
    sums = sums_per_step(report)
    link = gbit * 1e9 / 8.0
    ranks = nodes * ranks_per_node
    if nodes == 1:
        exchange = local
    elif hierarchical:
        exchange = local + ring_seconds(nbytes, nodes, link, latency_s, sums=sums)
    else:
        ring = ring_seconds(nbytes, ranks, link, latency_s, sums=sums)  # one edge per node
        # The ring is as slow as its slowest hop: the link, or the node's own (measured) exchange;
        # a compression's CPU time, or local SGD's steps alone, come before the ring's.
        if overlapped(report):
            ring = max(0.0, ring - compute)  # (ring is an average's time spread over its H steps)
        exchange = local + ring if compressed(report) or local_sgd(report) else max(local, ring)
    step = compute + exchange
    base = one_node_step(baseline if baseline is not None else report)
    return {"nodes": nodes, "ranks": ranks, "step": step,
            "exchange_share": exchange / step if step > 0 else 0.0,
            "efficiency": base / step if step > 0 else 0.0,
            "images_per_second": ranks * float(report["batch_per_rank"]) / step if step > 0 else 0.0}


def load_report(path):
    try:
        with open(path) as f:
            report = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"step_model: error: cannot read report {path}: {e}")
    missing = [k for k in REQUIRED if k not in report]
    if missing:
        sys.exit(f"step_model: error: report {path} lacks {', '.join(missing)} "
                 f"(written by an older mnist_cnn? rerun it with --report)")
    return report


def table(report, args, baseline=None):
    ranks_per_node = args.ranks_per_node or int(report["world_size"])
    kinds = [False, True] if ranks_per_node > 1 else [False]
    what = (f"{report['grad_compression']} ({wire_bytes(report) / 1e6:.2f} MB a step per rank, "
            f"in {sums_per_step(report)} sum(s); the node exchange is mostly the compression's "
            f"CPU time)"
            if compressed(report) else f"{wire_bytes(report) / 1e6:.2f} MB of gradient per rank")
    if local_sgd(report):
        what = (f"local SGD, the weights averaged every {local_sgd(report)} steps"
                f"{' in bfloat16' if report.get('grad_compression') == 'bf16' else ''}"
                f"{', each overlapping the next steps' if overlapped(report) else ''} "
                f"({wire_bytes(report) / 1e6:.2f} MB a step per rank, spread over its steps)")
    against = (f" Efficiency against the baseline's one-node step, "
               f"{1e3 * one_node_step(baseline):.2f} ms." if baseline is not None else "")
    lines = [f"Predicted by `scripts/step_model.py` from a one-node run of {report['world_size']} "
             f"rank(s): compute {1e3 * float(report['compute_seconds_per_step']):.2f} ms and "
             f"node exchange {1e3 * float(report['exchange_seconds_per_step']):.2f} ms per step, "
             f"{what}; "
             f"{ranks_per_node} rank(s) per node, link latency {args.latency_us:g} us. "
             f"A ring allreduce across nodes, "
             f"{'overlapping the steps after it' if overlapped(report) else 'no overlap'}: "
             f"a floor on the step, not a measurement.{against}",
             "",
             "| link | exchange | nodes | ranks | step (ms) | exchange share | efficiency | images/s |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for gbit in args.gbit:
        for hier in kinds:
            for n in args.nodes:
                p = predict(report, n, gbit, args.latency_us * 1e-6, ranks_per_node, hier,
                            baseline)
                lines.append(f"| {gbit:g} Gbit/s | {'hierarchical' if hier else 'flat'} | {n} | "
                             f"{p['ranks']} | {1e3 * p['step']:.2f} | "
                             f"{100 * p['exchange_share']:.0f}% | {100 * p['efficiency']:.0f}% | "
                             f"{p['images_per_second']:.0f} |")
    return "\n".join(lines)


def warn_if_unlike(report, baseline, args):
    """One line on stderr when the baseline ran with other threads per rank than the report."""
    if baseline is None:
        return
    mine, base = report.get("threads_per_rank"), baseline.get("threads_per_rank")
    if mine != base:
        print(f"step_model: warning: {args.report} ran with {mine} thread(s) per rank, "
              f"the baseline {args.baseline} with {base}: the efficiency compares unlike runs "
              f"(give both the same --threads)", file=sys.stderr)


def check_numbers(ap, args):
    """Refuses, naming the option and the value, what would make the table meaningless."""
    try:
        args.nodes = [int(n) for n in args.nodes.split(",")]
    except ValueError:
        ap.error(f"--nodes: expected a comma list of node counts, got {args.nodes!r}")
    if any(n < 1 for n in args.nodes):
        ap.error(f"--nodes: node counts must be >= 1, got {args.nodes}")
    for g in args.gbit:
        if not (math.isfinite(g) and g > 0):
            ap.error(f"--gbit: a bandwidth must be a positive number of Gbit/s, got {g:g}")
    if not (math.isfinite(args.latency_us) and args.latency_us >= 0):
        ap.error(f"--latency-us: the latency must be >= 0 microseconds, got {args.latency_us:g}")
    if args.ranks_per_node is not None and args.ranks_per_node < 1:
        ap.error(f"--ranks-per-node: must be >= 1, got {args.ranks_per_node}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report", help="mnist_cnn --report JSON of a one-node run")
    ap.add_argument("--gbit", type=float, action="append", required=True,
                    help="link bandwidth in Gbit/s (repeat for several)")
    ap.add_argument("--latency-us", type=float, default=50.0, help="one-way latency (default 50)")
    ap.add_argument("--nodes", default="1,2,4,8,16", help="node counts (default 1,2,4,8,16)")
    ap.add_argument("--ranks-per-node", type=int,
                    help="ranks per node (default: the report's world size)")
    ap.add_argument("--baseline", metavar="BASE.json",
                    help="a one-node report to measure the efficiency against (default: REPORT's "
                         "own one-node step), e.g. the fastest run without compression")
    args = ap.parse_args()
    check_numbers(ap, args)
    report = load_report(args.report)
    baseline = load_report(args.baseline) if args.baseline else None
    warn_if_unlike(report, baseline, args)
    print(table(report, args, baseline))


if __name__ == "__main__":
    main()
