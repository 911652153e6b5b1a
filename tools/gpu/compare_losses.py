#!/usr/bin/env python3
"""Compares the seed guide's losses (flax_peer_values dot_relu_dot output) of later runs with
the first: every loss must agree at relative 1e-5. Prints each run's worst relative difference;
exits 1 if any run is off.
usage: compare_losses.py REFERENCE.json RUN.json [RUN.json ...]"""
import json
import math
import sys


def main(reference, *runs):
    want = json.load(open(reference))["losses"]
    ok = True
    for run in runs:
        got = json.load(open(run))["losses"]
        finite = all(math.isfinite(v) and v != 0 for v in got + want)
        worst = (max(abs(g - w) / abs(w) for g, w in zip(got, want))
                 if finite and len(got) == len(want) else float("inf"))
        print(f"{run}: {len(got)} losses, worst relative difference {worst:.2e}")
        ok &= worst <= 1e-5
    print("reference", reference, want)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
