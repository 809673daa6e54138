#!/usr/bin/env python3
"""launch_shape_test.py - the shapes in which the CUDA target's kernels reach the GPU, from the
emulator's trace (NNC_EMU_TRACE) of one training step and the generated source (--emit cuda).

    launch_shape_test.py NNC MODEL.nn[:BATCH]...

For each model (at BATCH, else its train section's batch), in its train step:
  - no reduction or row-wise kernel over more than 64K elements runs as a single block, and a
    reduction to one value over n elements takes min(1024, ceil(n / 2048)) blocks
    (codegen/cuda/render_cuda.c: a fixed count, so every GPU adds in the same order);
  - every elementwise kernel whose operands are contiguous (its one-by-one loop reads them at i,
    0 or i % m with 4 dividing m) also moves them 16 bytes at a time (float4);
  - an elementwise kernel over n elements takes ceil(n / 2048) blocks (8 elements a thread),
    whatever n: no cap at 65535 (tests/cuda/launch_dims.c checks sizes no emulator can hold);
  - every copy is asynchronous and from or to pinned memory (on which stream: the pipelined
    calls put the inputs' on a copy stream, which tests/cuda/pipeline_test.py checks).
A model whose data set is not installed is skipped; all of them skipped is a skip (77)."""
import os
import re
import subprocess
import sys
import tempfile

MAX_ONE_BLOCK = 64 * 1024
KERNEL = re.compile(r'/\* (\w+) launch (\d+): ([\w-]+) \(.*?\*/\nextern "C" __global__ void __launch_bounds__\(\d+\) '
                    r'(\w+)\((.*?)\n}\n', re.S)
LAUNCH = re.compile(r'^launch (\S+) grid=(\d+),(\d+),(\d+) block=(\d+),(\d+),(\d+) shared=\d+ stream=(\d+)$')


def value(expr, batch):
    """An element count as the kernel writes it ("(B * 1000LL)"), at the batch."""
    e = expr.replace("LL", "").replace("B", str(batch))
    if not re.fullmatch(r"[0-9*+/() ]+", e):
        raise ValueError("unexpected size expression: " + expr)
    return int(eval(e, {"__builtins__": {}}))   # digits and arithmetic only (checked above)


def kernels(source, batch):
    """name -> (kind, elements, body) for every kernel of the train step."""
    out = {}
    for entry, _, kind, name, body in KERNEL.findall(source):
        if entry != "train_step":
            continue
        if kind == "elementwise":
            n = value(re.search(r"const int64_t n = ([^,;]+)[,;]", body).group(1), batch)
        elif kind == "reduction":
            m = re.search(r"const int64_t nout = ([^,]+), nred = ([^;]+);", body)
            n = value(m.group(1), batch) * value(m.group(2), batch)
        else:
            n = value(re.search(r"const int64_t C = [^,]+, rows = (.+) / C;", body).group(1), batch)
        out[name] = (kind, n, body)
    return out


def contiguous(body):
    """Whether the one-by-one loop reads every operand at i, 0 or i % m with 4 | m (the split
    into per-axis indices marks a broadcast or transposed operand)."""
    if re.search(r"\bint64_t q = i;", body):
        return False
    return all(int(m) % 4 == 0 for m in re.findall(r"\[i % \((\d+)LL\)\]", body))


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s%s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr[-3000:]))
    return p.stdout


def check_model(nnc, model, batch, tmp):
    extra = ["--batch", str(batch)] if batch else []
    text = open(model).read()
    if "fashion-mnist" in text and not os.path.isdir("/usr/share/datasets/fashion-mnist"):
        print("SKIP %s: Debian's dataset-fashion-mnist is not installed" % model)
        return None
    if not batch:
        batch = int(re.search(r"^\s*batch = (\d+)", text, re.M).group(1))
    ks = kernels(run([nnc, model, "--target", "cuda", "--emit", "cuda"] + extra), batch)
    trace = os.path.join(tmp, os.path.basename(model) + ".trace")
    env = dict(os.environ, NNC_EMU_TRACE=trace)
    run([nnc, model, "--target", "cuda", "--bench", "1", "--quiet"] + extra, env)
    launches, fails = {}, []
    lines = open(trace).read().splitlines()
    for line in lines:
        m = LAUNCH.match(line)
        if m:
            launches.setdefault(m.group(1), tuple(int(g) for g in m.groups()[1:7]))   # the first: direct
    seen = 0
    for name, (kind, n, body) in sorted(ks.items()):
        if name not in launches:
            continue
        seen += 1
        gx, gy, gz, bx, by, bz = launches[name]
        blocks = gx * gy * gz
        shape = "%s (%s over %d elements): grid %d,%d,%d block %d" % (name, kind, n, gx, gy, gz, bx * by * bz)
        if kind != "elementwise" and n > MAX_ONE_BLOCK and blocks == 1:
            fails.append(shape + ": more than 64K elements in one block")
        if kind == "reduction" and re.search(r"const int64_t nout = 1LL,", body):
            want = min(1024, -(-n // 2048))
            if blocks != want:
                fails.append(shape + ": a full reduction should take %d blocks" % want)
        if kind == "elementwise":
            if "float4" not in body and contiguous(body):
                fails.append(shape + ": contiguous operands, but no 16-byte accesses")
            if blocks != max(1, -(-n // 2048)):
                fails.append(shape + ": %d blocks, want ceil(n / 2048) = %d" % (blocks, -(-n // 2048)))
        print("  %s" % shape)
    if not seen:
        fails.append("no kernel of the train step in the trace")
    for line in lines:
        if line.startswith("copy "):
            f = dict(w.split("=", 1) for w in line.split() if "=" in w)
            if " async" not in line or ("host" in f and f["host"] != "pinned"):
                fails.append("copy not async from pinned memory: " + line)
    for f in fails:
        print("  FAIL %s: %s" % (model, f))
    return not fails


def main():
    nnc = sys.argv[1]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for arg in sys.argv[2:]:
            model, _, batch = arg.partition(":")
            print(model)
            results.append(check_model(nnc, model, int(batch) if batch else 0, tmp))
    ran = [r for r in results if r is not None]
    if not ran:
        return 77
    print("%d models, %d failed, %d skipped" % (len(ran), ran.count(False), len(results) - len(ran)))
    return 0 if all(ran) else 1


if __name__ == "__main__":
    sys.exit(main())
