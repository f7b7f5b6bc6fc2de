#!/usr/bin/env python3
"""pairs.py TO N: the median pair of bench/two_node_link/run.sh's N pairs of one row.

Pair i is TO.one.i (one node alone), TO.twins.i.a and TO.twins.i.b (a one-node run on each core
at once), TO.conf.i (the row's config on one node, the step model's input) and TO.two.i (two
nodes), mnist_cnn's reports. The pair of median efficiency (two nodes' images/s over twice one
node's) is copied to TO.one, TO.twins.a, TO.twins.b, TO.conf and TO.two; TO.effs
gets every pair's efficiency and, under "twins", every pair's efficiency against its twins (two
nodes' images/s over the sum of the twins').
"""
import json
import shutil
import sys


def ips(path):
    return json.load(open(path))["images_per_second"]


def efficiency(one_ips, two_ips):
    """Weak scaling: two nodes' images/s over twice one node's."""
    return two_ips / (2 * one_ips)


def against_twins(two_ips, twin_a_ips, twin_b_ips):
    """Two nodes' images/s over the sum of the twins'."""
    return two_ips / (twin_a_ips + twin_b_ips)


def main():
    to, n = sys.argv[1], int(sys.argv[2])
    alone = {i: efficiency(ips(f"{to}.one.{i}"), ips(f"{to}.two.{i}")) for i in range(1, n + 1)}
    twins = {i: against_twins(ips(f"{to}.two.{i}"), ips(f"{to}.twins.{i}.a"),
                              ips(f"{to}.twins.{i}.b")) for i in range(1, n + 1)}
    order = sorted(alone, key=alone.get)
    m = order[len(order) // 2]
    for kind in ("one", "conf", "two"):
        shutil.copy(f"{to}.{kind}.{m}", f"{to}.{kind}")
    for node in "ab":
        shutil.copy(f"{to}.twins.{m}.{node}", f"{to}.twins.{node}")
    json.dump({"alone": [alone[i] for i in order], "twins": [twins[i] for i in order]},
              open(f"{to}.effs", "w"))


if __name__ == "__main__":
    main()
