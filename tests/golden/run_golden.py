#!/usr/bin/env python3
"""run_golden.py - run one golden case of nnc and diff its output against the expected file.

    run_golden.py NNC CASE.nn|CASE.args        (UPDATE=1 in the environment rewrites the expected file)

The directory a case lives in says what is expected:
  errors/NAME.nn  `nnc NAME.nn --stats` fails; stderr must equal NAME.err
  data/NAME.nn    `nnc NAME.nn --quiet --no-cache` (trains, so it reaches the data loaders) fails;
                  stderr must equal NAME.err
  cli/NAME.args   nnc with the arguments in NAME.args (one per line) fails; stderr == NAME.err
  ok/NAME.nn      `nnc NAME.nn --emit ir` succeeds with empty stderr; stdout must equal NAME.ir
  dot/NAME.nn     `nnc NAME.nn --emit dot` likewise, stdout == NAME.dot; and Graphviz's `dot`
                  (when installed) must accept it
Every case runs in its own directory with a relative path, so messages name `NAME.nn` as the
user typed it.  A crash (a signal, or exit status >= 128) always fails."""
import difflib
import os
import shutil
import subprocess
import sys


def main():
    nnc, case = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    where, base = os.path.split(case)
    name, ext = os.path.splitext(base)
    kind = os.path.basename(where)
    if kind == "cli":
        with open(case) as f:
            args = [line.rstrip("\n") for line in f if line.strip()]
    elif kind == "errors":
        args = [base, "--stats"]
    elif kind == "data":
        args = [base, "--quiet", "--no-cache"]
    elif kind == "ok":
        args = [base, "--emit", "ir"]
    elif kind == "dot":
        args = [base, "--emit", "dot"]
    else:
        sys.exit(f"{case}: unknown golden directory '{kind}'")
    want_ok = kind in ("ok", "dot")
    expected = os.path.join(where, name + (".err" if not want_ok else ".ir" if kind == "ok" else ".dot"))
    env = dict(os.environ, HOME=os.environ.get("TMPDIR", "/tmp"))
    r = subprocess.run([nnc] + args, cwd=where, capture_output=True, text=True, timeout=240, env=env)
    got = r.stdout if want_ok else r.stderr
    failures = []
    if r.returncode < 0 or r.returncode >= 128:
        failures.append(f"nnc crashed: exit status {r.returncode}")
    if want_ok and r.returncode != 0:
        failures.append(f"expected exit status 0, found {r.returncode}; stderr:\n{r.stderr}")
    if want_ok and r.stderr:
        failures.append(f"expected empty stderr, found:\n{r.stderr}")
    if not want_ok and r.returncode == 0:
        failures.append("expected a non-zero exit status, found 0")
    if kind == "dot" and shutil.which("dot") and r.returncode == 0:
        g = subprocess.run(["dot", "-Tsvg"], input=r.stdout, capture_output=True, text=True, timeout=60)
        if g.returncode != 0:
            failures.append(f"Graphviz refused the output: {g.stderr}")
    if os.environ.get("UPDATE") == "1" and not failures:
        with open(expected, "w") as f:
            f.write(got)
        print(f"updated {os.path.relpath(expected)}")
        return 0
    try:
        with open(expected) as f:
            want = f.read()
    except FileNotFoundError:
        want = None
        failures.append(f"no expected file {expected} (run with UPDATE=1 to create it)")
    if want is not None and got != want:
        diff = difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                    f"expected {os.path.basename(expected)}", "found", n=2)
        failures.append("output differs from the expected file:\n" + "".join(diff))
    print(f"$ cd {where} && nnc {' '.join(args)}")
    if failures:
        for f in failures:
            print("FAIL:", f)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
