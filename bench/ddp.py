#!/usr/bin/env python3
"""ddp.py - data parallel on one machine: the training step of the example models as one
process with T threads against P processes (mpirun) with T / P threads each, the same global
batch, in one run; and the allreduce's share of the step (the time a process spends in its
collectives, waiting for the others included).  With --one, also `mpirun -np 1` against a
plain run: the cost of the allreduce nodes themselves.

    bench/ddp.py [--nnc build/nnc] [--steps 300] [--procs 2] [--rounds 3]

Each number is the median step of --bench N (after 10 warm-up steps), the best of --rounds
runs.  No environment variables are set: nnc picks its threads (all cores for one process,
cores / processes under mpirun)."""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = [("mlp.nn", 64), ("mlp.nn", 1024), ("mlp_large.nn", 256), ("mlp_large.nn", 1024), ("convnet.nn", 256)]


def bench(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), r.stderr))
    line = [l for l in r.stdout.splitlines() if l.startswith("{")][-1]
    return json.loads(line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nnc", default=os.path.join(HERE, "..", "build", "nnc"))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    mpirun = ["mpirun", "-np", str(a.procs), "--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    cores = len(os.sched_getaffinity(0))
    print("model           batch   1 proc x %d thr   %d procs x %d thr   ratio   allreduce share" %
          (cores, a.procs, max(1, cores // a.procs)))
    for model, batch in MODELS:
        path = os.path.join(HERE, "..", "models", model)
        args = [path, "--bench", str(a.steps), "--batch", str(batch), "--quiet"]
        one, many, share = [], [], []
        for _ in range(a.rounds):
            one.append(bench([a.nnc] + args)["median_us"])
            r = bench(mpirun + [a.nnc] + args)
            many.append(r["median_us"])
            share.append(r["allreduce_median_us"] / r["median_us"])
        o, m = min(one), min(many)
        s = share[many.index(m)]
        print("%-14s %6d   %12.1f us   %13.1f us   %5.2fx   %5.1f%%" % (model, batch, o, m, o / m, 100 * s))


if __name__ == "__main__":
    main()
