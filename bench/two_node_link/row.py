#!/usr/bin/env python3
"""row.py ONE.json TWO.json RATE GBIT SCRIPTS_DIR CONFIG EFFS.json TWINS CONF.json: one markdown
row of bench/two_node_link/run.sh.

ONE is the one-node baseline's mnist_cnn report, TWO a two-node run's (the pair of median
efficiency), TWINS.a and TWINS.b the same pair's twins (a one-node run on each core at once), EFFS
every pair's efficiencies (pairs.py), CONF the same pair's one-node run of the row's config. The
model's efficiency is scripts/step_model.py's for two nodes at GBIT Gbit/s from CONF (its
compute, its exchange, PowerSGD's CPU time included, its wire bytes) against ONE's step: what a
user could predict from one node before the run. It models no overlap but that of overlapped local SGD averages.
"""
import json
import sys

from pairs import against_twins, efficiency, ips


def config_name(config):
    """run.sh's config ("none", "powersgd:R", "acp:R", "overlap:MB" or "local:H[:bf16][:overlap]")
    as the tables name it."""
    kind, _, value = config.partition(":")
    if kind == "local":
        h, *how = value.split(":")
        return (f"local SGD, averaged every {h} steps" + (", in bfloat16" if "bf16" in how else "")
                + (", overlapped" if "overlap" in how else ""))
    return {"none": "plain allreduce", "powersgd": f"PowerSGD rank {value}",
            "acp": f"alternating PowerSGD (ACP-SGD) rank {value}",
            "overlap": f"overlapped, {value} MB buckets"}[kind]


def span(effs):
    """The lowest and highest of a row's pairs' efficiencies, as "lo-hi%"."""
    return f"{100 * min(effs):.0f}-{100 * max(effs):.0f}%"


def main():
    one_path, two_path, rate, gbit, scripts, config, effs_path, twins, conf_path = sys.argv[1:10]
    sys.path.insert(0, scripts)
    import step_model

    one, two, conf = (json.load(open(p)) for p in (one_path, two_path, conf_path))
    eff = efficiency(one["images_per_second"], two["images_per_second"])
    effs = json.load(open(effs_path))
    twin_ips = [ips(f"{twins}.{node}") for node in "ab"]
    eff_twins = against_twins(two["images_per_second"], *twin_ips)
    step = two["compute_seconds_per_step"] + two["exchange_seconds_per_step"]
    share = two["exchange_seconds_per_step"] / step if step > 0 else 0.0
    # An unshaped veth (GBIT 0) has no rate for the model to use.
    pred = step_model.predict(conf, 2, float(gbit), 0.0, 1, hierarchical=False, baseline=one) \
        if float(gbit) > 0 else None
    model = f"{100 * pred['efficiency']:.0f}%" if pred else "n/a"
    print(f"| {rate} | {config_name(config)} | {two['exchange_bytes_per_step'] / 1e6:.2f} | "
          f"{one['images_per_second']:.0f} | {two['images_per_second']:.0f} | {100 * eff:.0f}% | "
          f"{span(effs['alone'])} | {sum(twin_ips):.0f} | {100 * eff_twins:.0f}% | "
          f"{span(effs['twins'])} | "
          f"{100 * share:.0f}% | {1e3 * two['exchange_seconds_per_step']:.1f} | "
          f"{model} | {100 * one['test_accuracy']:.2f}% | "
          f"{100 * two['test_accuracy']:.2f}% |")


if __name__ == "__main__":
    main()
