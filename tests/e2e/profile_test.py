#!/usr/bin/env python3
"""profile_test.py NNC [--cuda] - `nnc --profile`: the table's structure, never its speed.

On a small classifier (random data, so no data set is needed) with --target cpu, or --target cuda
(on the CUDA emulator in CI, whose times mean nothing):
  - the table lists every launch of the training step exactly once, with its kind (the launches
    --dump-after=schedule lists), sorted by time, with a total and the step's line;
  - the first layer's product and its bias + ReLU kernel move and compute the bytes and FLOPs
    worked out by hand, and name the model line and column they were written at;
  - the CUDA table has the batch's copies to the GPU (no memory percentage: they cross the bus);
  - a product over the batch axis merged with another counts its B*k rows;
  - a run of launches (passes/horizontal.c: Adam's updates, clip_grad_norm's sums) is one row,
    its launches' costs added, named "update of 4 parameters" or "run of 4 launches";
  - bad values of the flag, and flags it cannot go with, are errors that say why."""
import os, re, subprocess, sys, tempfile

MODEL = """\
input x: f32[B, 20]
input y: i32[B]
param w1: f32[16, 20] = normal(0, 0.1)
param b1: f32[16] = zeros()
param w2: f32[4, 16] = normal(0, 0.1)
h = relu(x @ transpose(w1) + b1)
logits = h @ transpose(w2)
loss = cross_entropy(logits, y)
train {
    data x = randn(32, 20)
    data y = csv("y.csv")
    batch = 8
    optimizer = sgd(lr = 0.1)
    minimize loss
}
"""

# The row's columns, as driver/profile.c prints them: "%10.2f %6.1f%% %4d  %-11s %-8s %10s %8s %5s %10s %9s %5s
# %-34s  %s" (time, share, #, kind, phase, bytes, GB/s, %mem, FLOPs, GFLOP/s, %peak, ops, model line)
COLS = {"time": (0, 10), "share": (11, 18), "k": (19, 23), "kind": (25, 36), "phase": (37, 45), "bytes": (46, 56),
        "gbs": (57, 65), "mem": (66, 71), "flops": (72, 82), "gflops": (83, 92), "peak": (93, 98), "ops": (100, 134),
        "at": (136, None)}
fails = 0


def check(cond, what, out=""):
    global fails
    if not cond:
        fails += 1
        print("FAIL:", what)
        if out:
            print(out)


def run(args, cwd):
    p = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def schedule(nnc, d, target):
    """The train step's launches as --dump-after=schedule lists them: {index: kind}."""
    rc, out, err = run([nnc, "m.nn", "--target", target, "--dump-after=schedule"], d)
    check(rc == 0, f"--dump-after=schedule for {target}", err)
    step = out.split("; ---- entry grad")[0]
    names = {"kernel": "elementwise", "reduce": "reduction", "rowwise": "row-wise"}
    return {int(k): names.get(kind, kind) for k, kind in re.findall(r"^ +#(\d+) +(\w+) ", step, re.M)}


def table(out):
    """The launch rows, each a dict of its columns (stripped)."""
    rows = []
    for line in out.splitlines():
        if not re.match(r"^ *\d+\.\d\d +\d+\.\d% +\d+  ", line):
            continue
        r = {k: line[a:b].strip() for k, (a, b) in COLS.items()}
        r["time"], r["k"] = float(r["time"]), int(r["k"])
        rows.append(r)
    return rows


def test_target(nnc, d, target):
    rc, out, err = run([nnc, "m.nn", "--target", target, "--profile", "3"], d)
    check(rc == 0, f"--profile on {target} runs", out + err)
    if rc:
        return
    head = re.search(r"^profile of train_step: m\.nn on (.+), batch 8: (\d+) launches, each the median of 3 steps$",
                     out, re.M)
    check(head is not None, f"{target}: the header line", out)
    rows = table(out)
    n = int(head.group(2)) if head else -1
    idx = [r["k"] for r in rows]
    check(sorted(idx) == list(range(n)), f"{target}: every launch 0..{n - 1} exactly once, found {sorted(idx)}", out)
    sched = schedule(nnc, d, target)
    found = {r["k"]: r["kind"] for r in rows}
    check(found == sched, f"{target}: the table's launches are the schedule's {sched}, found {found}", out)
    times = [r["time"] for r in rows]
    check(times == sorted(times, reverse=True), f"{target}: sorted by time", out)
    total = re.search(r"^ *(\d+\.\d\d) +100\.0% +total ", out, re.M)
    check(total is not None and abs(float(total.group(1)) - sum(times)) <= 0.01 * len(times) + 0.01,
          f"{target}: the total line adds the launches", out)
    check(re.search(r"^step: \d+\.\d\d us, the median of 3 steps as --bench times them", out, re.M) is not None,
          f"{target}: the step line", out)
    check(re.search(r"^ceilings: memory ", out, re.M) is not None, f"{target}: the ceilings line", out)
    # x [8,20] @ w1^T [20,16]: (160 + 320 + 128) floats and 2*8*16*20 FLOPs, at the @ of line 6;
    # relu(h + b1): reads [8,16] and [16], writes [8,16]: 272 floats; an add and a relu per element.
    # On the CPU a product, then a kernel; on CUDA one launch, the bias and ReLU in cuBLASLt's
    # epilogue (passes/fuse.c): the product's bytes less h written and read back, plus the bias
    if target == "cpu":
        prod = [r for r in rows if r["kind"] == "gemm" and r["phase"] == "forward" and r["at"] == "m.nn:6:12"]
        check(len(prod) == 1, f"{target}: one forward product at m.nn:6:12 (x @ transpose(w1))", out)
        for r in prod:
            check((r["bytes"], r["flops"], r["ops"]) == ("2.432 kB", "5.12 k", "matmul"),
                  f"{target}: the product moves 2.432 kB and does 5.12 k FLOPs: {r}")
        ew = [r for r in rows if r["ops"] == "add, relu"]
        check(len(ew) == 1 and ew[0]["at"] == "m.nn:6:5" and ew[0]["kind"] == "elementwise",
              f"{target}: the bias and ReLU kernel is at m.nn:6:5 (relu)", out)
        for r in ew:
            check((r["bytes"], r["flops"]) == ("1.088 kB", "256"), f"{target}: bias + ReLU moves 1.088 kB, 256 FLOPs: {r}")
    else:
        prod = [r for r in rows if r["kind"] == "gemm" and r["phase"] == "forward" and r["ops"] == "matmul, add, relu"]
        check(len(prod) == 1 and prod[0]["at"] == "m.nn:6:5", f"{target}: x @ transpose(w1) + b1 and its ReLU are "
              "one product at m.nn:6:5 (relu)", out)
        for r in prod:
            check((r["bytes"], r["flops"]) == ("2.496 kB", "5.376 k"),
                  f"{target}: the product with its epilogue moves 2.496 kB, 5.376 k FLOPs: {r}")
        check(not [r for r in rows if r["ops"] == "add, relu"], f"{target}: no bias and ReLU kernel", out)
    upd = [r for r in rows if r["phase"] == "update" and r["at"].endswith("(w1)")]
    check(len(upd) == 1 and upd[0]["at"] == "m.nn:13:17 (w1)", f"{target}: w1's update, at the optimizer", out)
    if target == "cuda":
        copies = [r for r in rows if r["kind"] == "copy"]
        check(any(r["ops"] == "copy x to cuda" and r["bytes"] == "640 B" for r in copies),
              "cuda: the batch's copy to the GPU, 8 x 20 floats", out)
        check(copies and all(r["mem"] == "-" for r in copies), "cuda: a copy has no memory share", out)
        check("no CUDA graph" in out, "cuda: says it launches without CUDA graphs", out)


MERGED = """\
input x: f32[B, 4, 20]
input y: i32[B, 4]
param w1: f32[16, 20] = normal(0, 0.1)
h = reshape(x, -1, 20) @ transpose(w1)
loss = cross_entropy(h, reshape(y, -1))
train {
    data x = randn(32, 4, 20)
    data y = csv("y4.csv")
    batch = 8
    optimizer = sgd(lr = 0.1)
    minimize loss
}
"""


def test_merged(nnc, d, target):
    """Products over the batch axis merged with another ([B, 4, 20] as [B*4, 20]): their FLOPs
    count the B*4 rows (they once came out negative)."""
    rc, out, err = run([nnc, "merged.nn", "--target", target, "--profile", "3"], d)
    check(rc == 0, f"{target}: --profile of a product over [B*4, 20] runs", out + err)
    rows = {r["phase"]: r for r in table(out) if r["kind"] == "gemm"}
    # forward: [32, 20] @ [20, 16], 2*32*16*20; w1's update: the gradient [16, 32] @ [32, 20] and
    # the step's scale-and-add of its [16, 20] (2 a weight)
    for phase, flops in (("forward", "20.48 k"), ("update", "21.12 k")):
        r = rows.get(phase)
        check(r is not None and r["flops"] == flops, f"{target}: the {phase} product over B*4 rows does {flops} "
              f"FLOPs: {r}", out)


RUNS = """\
input x: f32[B, 20]
input y: i32[B]
param w1: f32[16, 20] = normal(0, 0.1)
param b1: f32[16] = zeros()
param w2: f32[4, 16] = normal(0, 0.1)
param b2: f32[4] = zeros()
loss = cross_entropy(relu(x @ transpose(w1) + b1) @ transpose(w2) + b2, y)
train {
    data x = randn(32, 20)
    data y = csv("y.csv")
    batch = 8
    optimizer = adam(lr = 0.01)
    clip_grad_norm = 1.0
    minimize loss
}
"""


def test_runs(nnc, d, target):
    """Runs of launches (passes/horizontal.c: Adam's four updates, clip_grad_norm's four sums of
    squares) are a row each, which covers its launches: their times and costs added, the model
    line saying how many."""
    rc, out, err = run([nnc, "runs.nn", "--target", target, "--profile", "3"], d)
    check(rc == 0, f"{target}: --profile of runs.nn runs", out + err)
    if rc:
        return
    head = re.search(r"^profile of train_step: runs\.nn on .+, batch 8: (\d+) launches \(2 runs of launches, a row "
                     r"each\), each the median of 3 steps$", out, re.M)
    check(head is not None, f"{target}: the header counts the launches and the 2 runs", out)
    rows = table(out)
    rc, dump, err = run([nnc, "runs.nn", "--target", target, "--dump-after=horizontal"], d)
    step = dump.split("; ---- entry grad")[0]
    runs = {int(a): int(b) - int(a) + 1 for a, b in set(re.findall(r"; one of #(\d+)\.\.#(\d+)$", step, re.M))}
    covered = sorted(k for r in rows for k in range(r["k"], r["k"] + runs.get(r["k"], 1)))
    n = int(head.group(1)) if head else -1
    check(covered == list(range(n)), f"{target}: the rows cover every launch once, found {covered}", out)
    # four updates of n floats: g, the clip scale, p, m and v read, m, v and p written (7 n + 1 floats)
    upd = [r for r in rows if r["at"] == "runs.nn:12:17 (update of 4 parameters)"]
    check(len(upd) == 1 and upd[0]["kind"] == "elementwise" and upd[0]["phase"] == "update" and
          upd[0]["bytes"] == "11.33 kB", f"{target}: one row for Adam's 4 updates, 11.33 kB", out)
    # four sums of squares: n floats read, one written
    sums = [r for r in rows if r["at"] == "runs.nn:12:17 (run of 4 launches)"]
    check(len(sums) == 1 and sums[0]["kind"] == "reduction" and sums[0]["bytes"] == "1.632 kB",
          f"{target}: one row for clip_grad_norm's 4 sums of squares, 1.632 kB", out)


def test_errors(nnc, d):
    bad = [(["--profile=0"], "--profile: expects an integer from 1 to 100000, got '0'"),
           (["--profile", "-3"], "--profile: expects an integer from 1 to 100000, got '-3'"),
           (["--profile=abc"], "--profile: expects an integer from 1 to 100000, got 'abc'"),
           (["--profile", "ten"], "--profile: expects an integer from 1 to 100000, got 'ten'"),
           (["--profile", "5x"], "--profile: expects an integer from 1 to 100000, got '5x'"),
           (["--profile=1e9"], "--profile: expects an integer from 1 to 100000, got '1e9'"),
           (["--profile", "--bench", "5"], "--bench and --profile cannot be used together"),
           (["--profile", "--eval"], "--eval and --profile cannot be used together"),
           (["--profile", "--check-numerics"], "--profile times the step as it normally runs, and --check-numerics"),
           (["--profile", "--save", "x.st"], "--profile and --save cannot be used together"),
           (["--profile", "--data-parallel"], "--profile times the step of one process")]
    for args, msg in bad:
        rc, out, err = run([nnc, "m.nn"] + args, d)
        check(rc != 0 and msg in err, f"{args}: fails with '{msg}'", out + err)
    rc, out, err = run([nnc, "--profile", "m.nn", "--target", "cpu"], d)   # no value: 20 steps, m.nn the model
    check(rc == 0 and "each the median of 20 steps" in out, "--profile without a value: 20 steps", out + err)


def main():
    nnc = os.path.abspath(sys.argv[1])
    cuda = "--cuda" in sys.argv
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "m.nn"), "w") as f:
            f.write(MODEL)
        with open(os.path.join(d, "y.csv"), "w") as f:
            f.write("".join(f"{i % 4}\n" for i in range(32)))
        with open(os.path.join(d, "runs.nn"), "w") as f:
            f.write(RUNS)
        with open(os.path.join(d, "merged.nn"), "w") as f:
            f.write(MERGED)
        with open(os.path.join(d, "y4.csv"), "w") as f:
            f.write("".join(",".join(str((4 * i + j) % 16) for j in range(4)) + "\n" for i in range(32)))
        test_target(nnc, d, "cuda" if cuda else "cpu")
        test_merged(nnc, d, "cuda" if cuda else "cpu")
        test_runs(nnc, d, "cuda" if cuda else "cpu")
        if not cuda:
            test_errors(nnc, d)
    print("profile_test:", "FAILED" if fails else "passed", f"({fails} failures)" if fails else "")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
