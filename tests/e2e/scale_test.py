#!/usr/bin/env python3
"""scale_test.py - the compiler's time grows about linearly with the model, not quadratically.

    scale_test.py NNC [--sanitized]

A model of 8,000 statements (a chain of matmul + relu, trained: about 50,000 IR nodes with
the backward pass), and one of 40,000 scalar definitions, each compiled through every pass
(--stats) and rendered (--emit c), all four runs within LIMIT_S of CPU time together (here:
1.7 s, 35 s under ASan, 25 s with --sanitized; before: over two minutes).  CPU time, not wall time: on a machine
busy with other work (a CI runner's neighbours) the wall time of the same runs tripled.  Quadratic steps (name lookup
scanning every binding, scheduling picking from every launch, filling each launch by scanning
the graph, fusion scanning below each root, the memory planner sorting per allocation,
quoting source lines by rescanning the file, asking per product whether the model uses
oneDNN, a scan of the graph: 5.7 s of --emit c's 6.3) made the first take minutes.

--sanitized (the sanitizer stage, where the chain's two runs were 40 s): the chain only through
--emit c, which runs every pass --stats runs and then renders; --stats's own report is the golden
tests' (tests/golden/cli/stats_*), and the normal build runs all four."""
import os
import resource
import subprocess
import sys
import tempfile
import time

LIMIT_S = 120


def chain(n):
    s = "input x: f32[B, 8]\nparam W: f32[8, 8] = normal(0, 0.1)\nh0 = x\n"
    s += "".join(f"h{i} = relu(h{i - 1} @ W)\n" for i in range(1, n))
    return s + f"loss = mean(h{n - 1})\ntrain {{\n    data x = randn(4, 8)\n    minimize loss\n}}\n"


def scalars(n):
    s = "input x: f32[B, 2]\n" + "".join(f"c{i} = {i} * 0.5\n" for i in range(n))
    return s + f"output y = x * c{n - 1}\n"


def main():
    nnc = sys.argv[1]
    sanitized = "--sanitized" in sys.argv[2:]
    failures = []
    def cpu():   # the CPU seconds of every child waited for so far
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime
    start = cpu()
    with tempfile.TemporaryDirectory() as d:
        for name, text in [("chain", chain(8000)), ("scalars", scalars(40000))]:
            path = os.path.join(d, name + ".nn")
            with open(path, "w") as f:
                f.write(text)
            for flags in (["--stats"], ["--emit", "c"]):
                if sanitized and name == "chain" and flags == ["--stats"]:
                    continue
                t, w = cpu(), time.monotonic()
                try:   # the wall-clock bound only stops a hang
                    r = subprocess.run([nnc, path, *flags], capture_output=True, text=True, timeout=2 * LIMIT_S)
                except subprocess.TimeoutExpired:
                    failures.append(f"{name} {' '.join(flags)}: over {2 * LIMIT_S} s of wall time")
                    continue
                print(f"{name} {' '.join(flags)}: {cpu() - t:.2f} s CPU ({time.monotonic() - w:.2f} s wall), "
                      f"exit {r.returncode}")
                if r.returncode != 0:
                    failures.append(f"{name} {' '.join(flags)}: exit {r.returncode}: {r.stderr[:500]}")
    total = cpu() - start
    if total > LIMIT_S:
        failures.append(f"all runs together took {total:.1f} s of CPU time, over {LIMIT_S} s")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
