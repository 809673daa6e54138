#!/usr/bin/env python3
"""multi_tensor_test.py NNC MODEL.nn - the optimizer step of a model with many parameters in a few
launches on the CUDA target (passes/horizontal.c's runs, render_cuda.c's grouped kernels), from the
emulator's trace (NNC_EMU_TRACE) of a training step and the generated source (--emit cuda).

MODEL sets `n_layer = K`; the test builds it with two values of K (n_layer 2 and 8) and requires:
  - the update's launches in one train step (the kernels whose head comment names the optimizer's
    line) are as many with 8 layers as with 2, and at most 6 (the sums of squares, their total,
    the clip coefficient, the updates with and without weight decay): O(1), not O(parameters);
  - every launch of a run of the train step (--dump-after=horizontal) is the segment of exactly
    one grouped kernel of that run, and every grouped kernel runs;
  - a grouped kernel's grid is its segments' blocks, one after another (each row's first block
    the blocks before it), a block of 256 threads; a segment takes the blocks its launch would
    alone: ceil(n / 2048) elementwise, min(1024, ceil(n / 2048)) for a sum over n elements;
  - an elementwise grouped kernel moves its operands 16 bytes at a time (float4);
  - the grouped sum of squares has a segment per parameter tensor.
Correctness of the grouped kernels is emu_train_many's (the training against the CPU's)."""
import os
import re
import subprocess
import sys
import tempfile

GROUP = re.compile(r'/\* train_step: (\d+) launches of the run #(\d+)\.\.#(\d+) as one kernel: ([\w-]+) \(([^)\n]*)\)\n'
                   r'(.*?)\*/\n__device__ const int64_t (\w+)_segs\[\d+\] = \{\n(.*?)\n\};\n'
                   r'extern "C" __global__ void __launch_bounds__\((\d+)\) (\w+)\((.*?)\n}\n', re.S)
SINGLE = re.compile(r'/\* train_step launch (\d+): ([\w-]+) \(([^)\n]*)\)\n(.*?)\*/\n'
                    r'extern "C" __global__ void __launch_bounds__\([^)]*\) (\w+)\(', re.S)
LAUNCH = re.compile(r'^launch (\S+) grid=(\d+),(\d+),(\d+) block=(\d+),(\d+),(\d+) shared=\d+ stream=\d+$')
fails = 0


def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("FAIL:", what)


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s%s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr[-3000:]))
    return p.stdout


def grouped(source):
    """name -> (kind, body, rows [(launch, first, blocks, size)], launches listed)"""
    out = {}
    for m in GROUP.finditer(source):
        nseg, kind, head, name, table, body = int(m.group(1)), m.group(4), m.group(6), m.group(10), m.group(8), m.group(11)
        cols = re.search(r"blocks, then ([^.]*)\.", head.replace("\n *", "")).group(1).split(", ")
        size = re.search(r"const int64_t (?:n|nout = 1LL, nred) = (arg\d+)", body).group(1)
        rows = []
        for line in table.splitlines():
            vals = [int(v) for v in re.findall(r"-?\d+", line.split("/*")[0])]
            rows.append((int(re.search(r"/\* #(\d+) \*/", line).group(1)), vals[0], vals[1], vals[2 + cols.index(size)]))
        check(len(rows) == nseg, "%s: %d rows for %d launches" % (name, len(rows), nseg))
        out[name] = (kind, body, rows, head)
    return out


def step_launches(trace):
    """The (name, grid, block) of every kernel launch of the first train step (run directly)."""
    lines = open(trace).read().splitlines()
    first = next(i for i, l in enumerate(lines) if l.startswith("launch nnc_step_inc "))
    out = []
    for l in lines[first + 1:]:
        if l.startswith("capture_begin") or l.startswith("launch nnc_step_inc "):
            break
        m = LAUNCH.match(l)
        if m:
            out.append((m.group(1), tuple(int(g) for g in m.groups()[1:4]), tuple(int(g) for g in m.groups()[4:7])))
    return out


def check_layers(nnc, text, layers, tmp):
    path = os.path.join(tmp, "m%d.nn" % layers)
    src, n = re.subn(r"^n_layer = \d+$", "n_layer = %d" % layers, text, flags=re.M)
    check(n == 1, "the model sets n_layer")
    with open(path, "w") as f:
        f.write(src)
    source = run([nnc, path, "--target", "cuda", "--emit", "cuda"])
    groups = grouped(source)
    updates = set(groups)   # every grouped kernel here is the optimizer's (the model is f32)
    for m in SINGLE.finditer(source):
        if "optimizer = " in m.group(4):
            updates.add(m.group(5))
    runs = {}
    for line in run([nnc, path, "--target", "cuda", "--dump-after=horizontal"]).split("; ---- entry grad")[0].splitlines():
        m = re.search(r"^ +#(\d+) .*; one of #(\d+)\.\.#(\d+)$", line)
        if m:
            runs[int(m.group(1))] = (int(m.group(2)), int(m.group(3)))
    trace = os.path.join(tmp, "m%d.trace" % layers)
    run([nnc, path, "--target", "cuda", "--bench", "1", "--quiet"], dict(os.environ, NNC_EMU_TRACE=trace))
    step = step_launches(trace)
    upd = [l for l in step if l[0] in updates]
    tensors = len(re.findall(r"= param ", run([nnc, path, "--dump-after=parse"])))
    print("n_layer %d: %d parameter tensors, %d kernel launches a step, %d of them the update's: %s" %
          (layers, tensors, len(step), len(upd), ", ".join("%s grid %d" % (n, g[0]) for n, g, _ in upd)))
    check(len(upd) <= 6, "n_layer %d: %d update launches, want at most 6" % (layers, len(upd)))
    covered = {}
    for name, (kind, body, rows, head) in groups.items():
        got = [l for l in step if l[0] == name]
        check(len(got) == 1, "%s: launched %d times in a step, want once" % (name, len(got)))
        first = 0
        for k, f, b, n in rows:
            check(f == first, "%s: #%d's first block %d, want %d" % (name, k, f, first))
            want = max(1, -(-n // 2048))
            if kind == "reduction":
                want = min(1024, want)
            check(b == want, "%s: #%d over %d elements takes %d blocks, want %d" % (name, k, n, b, want))
            check(k not in covered, "#%d in %s and %s" % (k, covered.get(k), name))
            covered[k] = name
            first += b
        for _, grid, block in got:
            check(grid == (first, 1, 1) and block == (256, 1, 1),
                  "%s: grid %s block %s, want (%d, 1, 1) and 256 threads" % (name, grid, block, first))
        if kind == "elementwise":
            check("float4" in body, "%s: no 16-byte accesses" % name)
        if kind == "reduction":
            check(len(rows) == tensors, "%s: %d segments, want one per parameter tensor (%d)" % (name, len(rows), tensors))
    check(sorted(covered) == sorted(runs), "the grouped kernels' segments %s are the runs' launches %s" %
          (sorted(covered), sorted(runs)))
    return len(upd)


def main():
    nnc, model = sys.argv[1], sys.argv[2]
    text = open(model).read()
    with tempfile.TemporaryDirectory() as tmp:
        counts = [check_layers(nnc, text, layers, tmp) for layers in (2, 8)]
    check(counts[0] == counts[1], "the update's launches grow with the parameters: %s" % counts)
    print("multi_tensor_test:", "FAILED (%d)" % fails if fails else "passed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
