#!/usr/bin/env python3
"""launch_shape_test.py - the shapes in which the CUDA target's kernels reach the GPU, from the
emulator's trace (NNC_EMU_TRACE) of one training step and the generated source (--emit cuda).

    launch_shape_test.py NNC MODEL.nn[:BATCH]... [ce:CLASSES:PRECISION]...

ce:CLASSES:PRECISION is a model the test writes: cross_entropy over rows of CLASSES logits
(f32, or bf16 under `precision = bf16`), fed 16 samples from .npy files.

For each model (at BATCH, else its train section's batch), in its train step:
  - no reduction or row-wise kernel over more than 64K elements runs as a single block, and a
    reduction to one value over n elements takes min(1024, ceil(n / 2048)) blocks
    (codegen/cuda/render_cuda.c: a fixed count, so every GPU adds in the same order);
  - every elementwise kernel whose operands are contiguous (its one-by-one loop reads them at i,
    0 or i % m with 4 dividing m) also moves them 4 at a time (float4, ushort4 for bf16 words);
  - an elementwise kernel over n elements takes ceil(n / 2048) blocks (8 elements a thread),
    whatever n: no cap at 65535 (tests/cuda/launch_dims.c checks sizes no emulator can hold);
  - every copy is asynchronous and from or to pinned memory (on which stream: the pipelined
    calls put the inputs' on a copy stream, which tests/cuda/pipeline_test.py checks);
  - a column reduction (RED_COLS: sums over the rows of [R, C], bias gradients) loads a round of
    rows a thread into arrays before it adds them (float4, or ushort4 for bf16), as many rows
    (up to 16) as fit 128 bytes a thread or the rows need, under __launch_bounds__(256, 2), on a
    grid of at most 256 blocks (two an SM) that gives no block more rounds than that cap needs,
    with at most 4 partial rows a thread for the strip's last block to add (grid.y at most
    4 x 256 / cw);
  - cross_entropy over rows of more than 1024 logits runs blocks of 1024 threads, reads a row
    twice (one nnc_block_max_sum per row: the maximum and exp-sum in one pass), and moves its
    logits and gradient 16 bytes at a time (uint4: 8 bf16, float4: 4 f32) where the row's
    length is a multiple of that, one element at a time where it is not;
  - a reduction of short rows over their trailing axes (RED_WARP) gives each output a group of as
    many lanes as its row has loads (a power of two from 4 to 32: 64 floats by 4 take 16, so a
    warp reduces two rows), on ceil(outputs / (256 / lanes)) blocks of 256;
  - the row kernels of layer norm, softmax and log_softmax and their gradients over rows of at
    most 1024 floats that are a multiple of 4 read each operand's row once, 16 bytes at a time
    (float4, into registers; layer norm's weight's vectors beside dy's), and write 16 bytes at a
    time; rows of another length are read a float at a time, with no vectors;
  - every product whose plan adds a bias (and ReLU) in its epilogue runs as one cublasLtMatmul
    with the BIAS (RELU_BIAS) epilogue: no kernel of its own for them.
A model whose data set is not installed is skipped; all of them skipped is a skip (77)."""
import os
import re
import subprocess
import sys
import tempfile

MAX_ONE_BLOCK = 64 * 1024
KERNEL = re.compile(r'/\* (\w+) launch (\d+): ([\w-]+) \(([^)\n]*)\).*?\*/\n'
                    r'extern "C" __global__ void (__launch_bounds__\(\d+(?:, \d+)?\)) (\w+)\((.*?)\n}\n', re.S)
COLS_BLOCKS, COLS_FINISH, COLS_BYTES = 256, 4, 128   # render_cuda.c
VEC_BYTES = {"float4": 16, "double2": 16, "int4": 16, "ushort4": 8}
CE_THREADS = 1024   # render_cuda.c's CE_ROW_THREADS
LAUNCH = re.compile(r'^launch (\S+) grid=(\d+),(\d+),(\d+) block=(\d+),(\d+),(\d+) shared=\d+ stream=(\d+)$')


def value(expr, batch):
    """An element count as the kernel writes it ("(B * 1000LL)"), at the batch."""
    e = expr.replace("LL", "").replace("B", str(batch))
    if not re.fullmatch(r"[0-9*+/() ]+", e):
        raise ValueError("unexpected size expression: " + expr)
    return int(eval(e, {"__builtins__": {}}))   # digits and arithmetic only (checked above)


def kernels(source, batch):
    """name -> (kind, elements, body, ops) for every kernel of the train step."""
    out = {}
    for entry, _, kind, ops, bounds, name, body in KERNEL.findall(source):
        if entry != "train_step":
            continue
        body = bounds + "\n" + body
        if kind == "elementwise":
            n = value(re.search(r"const int64_t n = ([^,;]+)[,;]", body).group(1), batch)
        elif kind == "reduction":
            m = re.search(r"const int64_t nout = ([^,]+), nred = ([^;]+);", body)
            n = value(m.group(1), batch) * value(m.group(2), batch)
        else:
            n = value(re.search(r"const int64_t C = [^,]+, rows = (.+) / C;", body).group(1), batch)
        out[name] = (kind, n, body, ops)
    return out


def check_ce(shape, body, block):
    """A cross_entropy row kernel's shape (above); [] where its rows take a warp each."""
    C = int(re.search(r"const int64_t C = (\d+),", body).group(1))
    if C <= 1024:
        return []
    fails = []
    if block != CE_THREADS:
        fails.append("a block of %d threads per row, not %d" % (CE_THREADS, block))
    if body.count("nnc_block_max_sum(") != 1 or "nnc_block_max(" in body:
        fails.append("not two passes over a row (one nnc_block_max_sum)")
    half = "const unsigned short *X" in body
    lanes, vec = (8, "uint4") if half else (4, "float4")
    # a thread's vectors v0, v1, ... of a round, loaded before the first is used (CE_LOADS, 2)
    loads = re.findall(r"\(\(const %s \*\)x\)\[(v0|\(v\d < nv \? v\d : vb\))\]" % vec, body)
    if C % lanes == 0 and len(loads) < 4:
        fails.append("C = %d: not two 16-byte loads of the logits (%s) a round in each pass, found %d"
                     % (C, vec, len(loads)))
    if C % lanes == 0 and "cross_entropy_grad" in shape and "((%s *)g)[v] = " % vec not in body:
        fails.append("C = %d: no 16-byte stores of the gradient (%s)" % (C, vec))
    if C % lanes and re.search(r"\b(uint4|float4|ushort4)\b", body):
        fails.append("C = %d, not a multiple of %d: vectors where rows are not aligned" % (C, lanes))
    return [shape + ": " + f for f in fails]


# the row kernels a warp holds in registers where C allows: the row pointers each reads and the
# one it writes
REG_ROWS = {"layer_norm_rows": (["x"], "y"), "layer_norm_rows_grad": (["dy", "x", "Wv", "rr"], "dx"),
            "softmax": (["x"], "y"), "log_softmax": (["x"], "y"),
            "softmax_grad": (["dy", "y"], "dx"), "log_softmax_grad": (["dy", "y"], "dx")}


def check_rows(shape, op, body):
    """A layer-norm or softmax row kernel's accesses (above)."""
    C = int(re.search(r"const int64_t C = (\d+),", body).group(1))
    if C > 1024:
        return []
    if C % 4:
        return [shape + ": C = %d, not a multiple of 4: vectors" % C] if "float4" in body else []
    fails = []
    ins, out = REG_ROWS[op]
    for p in ins:
        if p == "Wv" and "const real *Wv" not in body or p == "rr" and "const real *Rv" not in body:
            continue
        got = len(re.findall(r"\(\(const float4 \*\)%s\)\[rv\]" % p, body))
        if got != 1:
            fails.append("%d 16-byte reads of %s's row, want 1" % (got, p))
    if re.search(r"\b(x|dy|Wv|rr|y|XL)[\[(]c[\])]", re.sub(r"^#define .*$", "", body, flags=re.M)):   # not XL's
        fails.append("a row read a float at a time")
    if len(re.findall(r"\(\(float4 \*\)%s\)\[rv\] = " % out, body)) != 1 or re.search(r"\b%s\[c\] = " % out, body):
        fails.append("%s not written once, 16 bytes at a time" % out)
    return [shape + ": C = %d: " % C + f for f in fails]


def check_cols(shape, body, n, batch, gx, gy):
    """A column reduction's shape (above), from its source and launch; [] where it is none."""
    m = re.search(r"#define ROW\(g\) \(\(g\) \* (\d+)LL \+ rk \* (\d+) \+ r0\)", body)
    if not m:
        return []
    rnd, down = int(m.group(1)), int(m.group(2))
    rows = rnd // down
    nred = value(re.search(r"nred = ([^;]+);", body).group(1), batch)
    fails = []
    if not body.startswith("__launch_bounds__(256, 2)"):
        fails.append("not __launch_bounds__(256, 2)")
    arrays = re.findall(r"\b(\w+) i\d+_r\[%d\];" % rows, body)
    vectors = re.findall(r"const (?:float4|ushort4|double2|int4) l\d+_v = ([^;]+);", body)
    if vectors:
        if not arrays or any(not re.fullmatch(r"i\d+_r\[rk\]", v) for v in vectors):
            fails.append("vectors not loaded a round at a time (into i<j>_r[rk]) before they are added")
        per_row = sum(VEC_BYTES.get(t, 16) for t in arrays)
        if rows * per_row > COLS_BYTES:
            fails.append("%d rows of %d bytes a thread a round: over %d" % (rows, per_row, COLS_BYTES))
        if rows < 16 and rows * 2 * per_row <= COLS_BYTES and rows * down < nred:
            fails.append("%d rows a thread a round, where %d fit in %d bytes" % (rows, rows * 2, COLS_BYTES))
    elif rows < 2:
        fails.append("one element at a time, %d rows a thread a round" % rows)
    rounds = -(-nred // rnd)
    cap = max(1, min(COLS_BLOCKS // gx, COLS_FINISH * down))
    if gy > 1 and gx * gy > COLS_BLOCKS:
        fails.append("%d blocks: more than %d" % (gx * gy, COLS_BLOCKS))
    if gy > COLS_FINISH * down:
        fails.append("%d row ranges: more than %d partial rows a thread to add" % (gy, COLS_FINISH))
    if rounds and -(-rounds // gy) > -(-rounds // cap):
        fails.append("%d rounds over %d row ranges: a block takes %d, where %d would do" %
                     (rounds, gy, -(-rounds // gy), -(-rounds // cap)))
    if rounds and gy > rounds:
        fails.append("%d row ranges for %d rounds" % (gy, rounds))
    print("    RED_COLS %d rows a thread a round of %d, %d rounds, grid.y %d" % (rows, rnd, rounds, gy))
    return [shape + ": " + f for f in fails]


def check_warp(shape, body, batch, blocks):
    """RED_WARP: the group's lanes as the row's loads need, and the grid that gives."""
    m = re.search(r"const int lane = threadIdx.x & (\d+)u, per = 32 / (\d+);", body)
    if not m:
        return []
    cw = int(m.group(2))
    nout = value(re.search(r"const int64_t nout = ([^,]+), nred", body).group(1), batch)
    nred = value(re.search(r"nred = ([^;]+);", body).group(1), batch)
    lanes = 4 if re.search(r"\b(float4|ushort4)\b", body) else 2 if "double2" in body else 1
    want = 4
    while want < 32 and want * lanes < nred:
        want *= 2
    fails = []
    if cw != want or int(m.group(1)) != cw - 1:
        fails.append(shape + ": rows of %d in loads of %d want groups of %d lanes, not %d" % (nred, lanes, want, cw))
    if blocks != min(2 ** 31 - 1, -(-nout // (256 // cw))):
        fails.append(shape + ": %d outputs in groups of %d lanes want %d blocks" % (nout, cw, -(-nout // (256 // cw))))
    return fails


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
    seen, rows = 0, set()
    for name, (kind, n, body, ops) in sorted(ks.items()):
        if name not in launches:
            continue
        seen += 1
        gx, gy, gz, bx, by, bz = launches[name]
        blocks = gx * gy * gz
        shape = "%s (%s %s over %d elements): grid %d,%d,%d block %d" % (name, kind, ops, n, gx, gy, gz, bx * by * bz)
        if kind == "row-wise" and "cross_entropy" in ops:
            fails += check_ce(shape, body, bx * by * bz)
        if kind == "row-wise" and ops in REG_ROWS:
            fails += check_rows(shape, ops, body)
            rows.add("%s %s" % (ops, re.search(r"const int64_t C = (\d+),", body).group(1)))
        if kind != "elementwise" and n > MAX_ONE_BLOCK and blocks == 1:
            fails.append(shape + ": more than 64K elements in one block")
        if kind == "reduction":
            fails += check_cols(shape, body, n, batch, gx, gy)
            fails += check_warp(shape, body, batch, blocks)
        if kind == "reduction" and re.search(r"const int64_t nout = 1LL,", body):
            want = min(1024, -(-n // 2048))
            if blocks != want:
                fails.append(shape + ": a full reduction should take %d blocks" % want)
        if kind == "elementwise":
            if not re.search(r"\b(float4|ushort4)\b", body) and contiguous(body):
                fails.append(shape + ": contiguous operands, but no vector accesses")
            if blocks != max(1, -(-n // 2048)):
                fails.append(shape + ": %d blocks, want ceil(n / 2048) = %d" % (blocks, -(-n // 2048)))
        print("  %s" % shape)
    if not seen:
        fails.append("no kernel of the train step in the trace")
    if rows:
        print("  row kernels checked for 16-byte rows: %s" % ", ".join(sorted(rows)))
    fails += check_epilogues(nnc, model, extra, lines)
    for line in lines:
        if line.startswith("copy "):
            f = dict(w.split("=", 1) for w in line.split() if "=" in w)
            if " async" not in line or ("host" in f and f["host"] != "pinned"):
                fails.append("copy not async from pinned memory: " + line)
    for f in fails:
        print("  FAIL %s: %s" % (model, f))
    return not fails


def check_epilogues(nnc, model, extra, lines):
    """Every product the train step's plan gives an epilogue (passes/fuse.c: "%N = relu(A @ B + %b)"
    or "%N = A @ B + %b") runs as one cuBLASLt call with it, in the step's first (direct) run."""
    plan = run([nnc, model, "--target", "cuda", "--dump-after=plan"] + extra)
    step = plan.split("; ---- entry train_step", 1)[1].split("; ---- entry", 1)[0]
    want = sorted("relu_bias" if "= relu(" in l else "bias" for l in step.splitlines()
                  if re.match(r"\s*#\d+\s+gemm\s", l) and " + %" in l)
    got = []
    for line in lines:
        if line.endswith(" capture"):
            break
        m = re.match(r"gemm cublasLtMatmul .* epilogue=(\w+) stream=\d+$", line)
        if m:
            got.append(m.group(1))
    if want:
        print("  epilogues in cuBLASLt: %s" % ", ".join(want))
    return [] if sorted(got) == want else ["epilogues planned %s, run through cuBLASLt %s" % (want, sorted(got))]


def ce_model(tmp, classes, precision):
    """The model of a ce:CLASSES:PRECISION argument, written into tmp with its data."""
    import numpy as np
    d = os.path.join(tmp, "ce_%d_%s" % (classes, precision))
    os.makedirs(d)
    rng = np.random.default_rng(classes)
    np.save(os.path.join(d, "x.npy"), rng.standard_normal((16, 8)).astype(np.float32))
    np.save(os.path.join(d, "y.npy"), rng.integers(0, classes, 16).astype(np.int32))
    path = os.path.join(d, "ce.nn")
    with open(path, "w") as f:
        f.write("input x: f32[B, 8]\ninput y: i32[B]\nparam w: f32[8, %d] = normal(0, 1)\n"
                "loss = cross_entropy(x @ w, y)\ntrain {\n    data x = npy(\"%s/x.npy\")\n"
                "    data y = npy(\"%s/y.npy\")\n    batch = 16\n%s    optimizer = sgd(lr = 0.1)\n"
                "    minimize loss\n}\n" % (classes, d, d, "    precision = bf16\n" if precision == "bf16" else ""))
    return path


def main():
    nnc = sys.argv[1]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for arg in sys.argv[2:]:
            if arg.startswith("ce:"):
                _, classes, precision = arg.split(":")
                arg = ce_model(tmp, int(classes), precision)
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
