#!/usr/bin/env python3
"""accuracy.py WORK SEEDS CONFIGS: bench/two_node_link/run.sh's test-accuracy table.

WORK holds mnist_cnn's reports acc-one.S (one node) and acc-CONFIG.S (two nodes) for seeds
S = 1..SEEDS; CONFIGS is run.sh's comma-separated list. For each config: the mean test accuracy
of one node and of two nodes, and the gap (one node minus two nodes) seed by seed: its mean, the
standard error of that mean, and the largest. A seed fixes the initial weights, so the gap of
one seed compares two runs from the same start.
"""
import json
import statistics
import sys

from row import config_name


def accuracy(path):
    return 100 * json.load(open(path))["test_accuracy"]


def main():
    work, seeds, configs = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
    one = [accuracy(f"{work}/acc-one.{s}") for s in range(1, seeds + 1)]
    print(f"Test accuracy over seeds 1-{seeds} (the gap: one node minus two nodes, seed by seed; "
          f"± its standard error):")
    print()
    print("| exchange | 1 node mean | 2 nodes mean | gap, mean | ± | largest gap |")
    print("|---|---:|---:|---:|---:|---:|")
    for config in configs:
        two = [accuracy(f"{work}/acc-{config}.{s}") for s in range(1, seeds + 1)]
        gaps = [a - b for a, b in zip(one, two)]
        se = statistics.stdev(gaps) / len(gaps) ** 0.5 if len(gaps) > 1 else float("nan")
        print(f"| {config_name(config)} | {statistics.mean(one):.2f}% "
              f"| {statistics.mean(two):.2f}% | {statistics.mean(gaps):+.2f} | {se:.2f} "
              f"| {max(gaps):+.2f} |")


if __name__ == "__main__":
    main()
