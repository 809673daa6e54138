#!/usr/bin/env python3
"""startup_ab.py - two nnc builds' start to the first training step, interleaved in one run.

    bench/startup_ab.py OLD_NNC NEW_NNC [--rounds 9] [--model models/mlp.nn]

For each round and each build (A B A B ...), three starts in a fresh XDG_CACHE_HOME, as
run.py's start-up cases: nothing cached (the C compiler and the decompression of the data),
everything cached, then the code removed from the cache but not the data (starts(), which
run.py's start-up cases use too).  Prints the median and min-max of `--bench 1`'s first_step_s
per case and build, and the new/old ratio.  nnc runs as a user runs it (USER_ENV: no thread,
BLAS or nnc variable set).
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = ("nothing cached", "code not cached, data cached", "everything cached")
DROP = ("OMP_", "GOMP_", "KMP_", "OPENBLAS_", "GOTO_", "MKL_", "NNC_")


def user_env():
    return {k: v for k, v in os.environ.items() if not k.startswith(DROP)}


def first_step(nnc, model, env):
    p = subprocess.run([nnc, model, "--bench", "1"], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{nnc} {model} --bench 1 failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])["first_step_s"]


def starts(nnc, model, base_env):
    """(nothing cached, code not cached, everything cached) first_step_s, in a fresh cache."""
    tmp = tempfile.mkdtemp()
    try:
        env = dict(base_env, XDG_CACHE_HOME=tmp)
        cold = first_step(nnc, model, env)
        warm = first_step(nnc, model, env)
        for f in os.listdir(os.path.join(tmp, "nnc")):
            if ".so" in f:
                os.remove(os.path.join(tmp, "nnc", f))
        code = first_step(nnc, model, env)
    finally:
        shutil.rmtree(tmp)
    return cold, code, warm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--model", default=os.path.join(ROOT, "models/mlp.nn"))
    a = ap.parse_args()
    env = user_env()
    got = [[[], [], []], [[], [], []]]   # old, new (the same path twice is allowed: a noise floor)
    for _ in range(a.rounds):
        for b, nnc in enumerate((a.old, a.new)):
            for k, v in enumerate(starts(nnc, a.model, env)):
                got[b][k].append(v)
    print("| case | old median [min-max] | new median [min-max] | unit | new/old |")
    print("| --- | --- | --- | --- | --- |")
    for k, case in enumerate(CASES):
        o, n = got[0][k], got[1][k]
        mo, mn = statistics.median(o), statistics.median(n)
        print(f"| {case} | {mo:.3f} [{min(o):.3f}-{max(o):.3f}] | {mn:.3f} [{min(n):.3f}-{max(n):.3f}] | s | "
              f"{mn / mo:.3f} |")


if __name__ == "__main__":
    main()
