#!/usr/bin/env python3
"""emu_train.py - whole training runs on the CUDA target (through the emulator) against the CPU.

    emu_train.py NNC MODEL.nn [--epochs N] [--tol 1e-5] [extra nnc flags...]

Trains MODEL on --target cpu and on --target cuda from the same seed, each writing --metrics
JSON lines, and requires: the same number of steps, every step's loss equal within `tol`
relative (to max(|cpu loss|, 1e-6)), every step's grad_norm, loss_scale and
skipped_steps where the step reports them, and every epoch's test loss and metrics (accuracy)
equal within the same tolerance.  Prints the largest difference.  The environment decides which
libcuda/libcublas are used (the tests point LD_LIBRARY_PATH at the emulator)."""
import json
import os
import subprocess
import sys
import tempfile


def run(nnc, model, target, extra, out):
    cmd = [nnc, model, "--target", target, "--quiet", "--metrics", out] + extra
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print("FAIL: %s exited %d\n%s%s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
        sys.exit(1)
    with open(out) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    nnc, model = sys.argv[1], sys.argv[2]
    with open(model) as f:
        text = f.read()
    if "fashion-mnist" in text and not os.path.isdir("/usr/share/datasets/fashion-mnist"):
        print("SKIP: Debian's dataset-fashion-mnist is not installed")
        return 77
    rest = sys.argv[3:]
    tol = 1e-5
    if "--tol" in rest:
        i = rest.index("--tol")
        tol = float(rest[i + 1])
        del rest[i:i + 2]
    with tempfile.TemporaryDirectory() as d:
        cpu = run(nnc, model, "cpu", rest, os.path.join(d, "cpu.jsonl"))
        gpu = run(nnc, model, "cuda", rest, os.path.join(d, "cuda.jsonl"))
    cs = [r for r in cpu if r["type"] == "step"]
    gs = [r for r in gpu if r["type"] == "step"]
    if len(cs) != len(gs) or not cs:
        print("FAIL: %d steps on the cpu, %d on cuda" % (len(cs), len(gs)))
        return 1
    worst, where = 0.0, None
    fails = 0
    for c, g in zip(cs, gs):
        rel = abs(c["loss"] - g["loss"]) / max(abs(c["loss"]), 1e-6)
        if rel > worst:
            worst, where = rel, c["step"]
        for k in ("grad_norm", "loss_scale", "skipped_steps"):   # what else a step reports
            if (k in c) != (k in g) or (k in c and abs(c[k] - g[k]) > tol * max(abs(c[k]), 1e-6)):
                print("FAIL: step %s %s: cpu %s cuda %s" % (c["step"], k, c.get(k), g.get(k)))
                fails += 1
    if worst > tol:
        print("FAIL: step %s loss differs by %.3g relative (tolerance %g)" % (where, worst, tol))
        fails += 1
    ce = [r for r in cpu if r["type"] == "epoch"]
    ge = [r for r in gpu if r["type"] == "epoch"]
    for c, g in zip(ce, ge):
        for k, v in c.items():
            if k in ("type", "seconds", "epoch", "step") or not isinstance(v, (int, float)):
                continue
            if k not in g:
                print("FAIL: epoch %d: cuda reports no %s" % (c["epoch"], k))
                fails += 1
            elif abs(v - g[k]) > tol * max(abs(v), 1e-6):
                print("FAIL: epoch %d %s: cpu %.9g cuda %.9g" % (c["epoch"], k, v, g[k]))
                fails += 1
            else:
                print("epoch %d %-12s cpu %.9g cuda %.9g" % (c["epoch"], k, v, g[k]))
    print("%s: %d steps, largest loss difference %.3g relative (step %s)" % (model, len(cs), worst, where))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
