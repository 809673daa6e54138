"""cross_entropy's ignore_index and label_smoothing against torch.nn.functional.cross_entropy:
the loss and the gradient of the weight that makes the logits, fused (cross_entropy and its
gradient in one row pass) and unfused, in float64 and float32.

Each case is a tiny .nn model with inputs x: f32[B, 4] and y: i32[B] (labels, some of them the
ignore_index) and a parameter W: f32[4, 5]; its loss is one or two cross_entropy calls over
x @ W.  It runs through tests/numeric/run_model (NNC_ENTRY_EVAL for `loss`, NNC_ENTRY_GRAD for
grad.W), and every value is compared with torch.autograd in float64:
|nnc - torch| <= RTOL * |torch| + ATOL * max(1, max|torch|), 1e-10 in float64, 1e-5 in float32;
a NaN must be a NaN in both (every label ignored: torch's mean over no rows).

The wide cases have rows longer than a warp takes (1024 classes), which the CUDA target gives a
block each and reads in two passes (the maximum and exp-sum together, then the gradient), 16
bytes at a time where the row's length allows (1032 classes) and one element at a time where it
does not (1030).  Their x is the identity, so the logits are W's rows and grad.W is the logits'
gradient itself, element by element; they also run with --precision bf16, where the row kernel
reads bf16 logits and writes the bf16 gradient (passes/fold_rows.c): that against torch's
float64 gradient of W rounded to bfloat16, rounded to bfloat16, within one unit of bf16's last
place (a product near a rounding tie may round either way), the loss within 1e-5.  They run on
CUDA only (--cuda: on the emulator in CI): the CPU's row loop does not change with the width.
It does with the rows: past 32768 elements its rows run on the pool in blocks of 256, each
block's total apart (sequence_blocks, 7000 rows), and a last check (blocks) wants the loss and
gradient bit for bit the same on one thread and two, and a bad label named by its first row.

    test_ce_torch.py --run-model PATH [--cuda] [-k SUBSTRING]

--cuda runs the float32 models, fused and unfused, on the CUDA target; exit 77 (skipped) where there is none.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

TOL = {"f64": (1e-10, 1e-10), "f32": (1e-5, 1e-5), "bf16": (2.0 ** -7, 1e-30)}
BATCH, C = 7, 5
rng = np.random.default_rng(27)

# name, the loss as nnc writes it, the same in torch (logits, labels), the labels
CASES = [
    ("plain", "cross_entropy(x @ W, y)", lambda l, y: F.cross_entropy(l, y), [0, 1, 2, 3, 4, 1, 0]),
    ("ignore_default", "cross_entropy(x @ W, y)", lambda l, y: F.cross_entropy(l, y),
     [0, -100, 2, 3, -100, 1, 4]),
    ("ignore_nanogpt", "cross_entropy(x @ W, y, ignore_index = -1)",
     lambda l, y: F.cross_entropy(l, y, ignore_index=-1), [-1, 1, -1, 3, 4, -1, 0]),
    ("ignore_a_class", "cross_entropy(x @ W, y, ignore_index = 2)",
     lambda l, y: F.cross_entropy(l, y, ignore_index=2), [2, 1, 2, 3, 4, 0, 2]),
    ("smoothing", "cross_entropy(x @ W, y, label_smoothing = 0.1)",
     lambda l, y: F.cross_entropy(l, y, label_smoothing=0.1), [0, 1, 2, 3, 4, 1, 0]),
    ("smoothing_ignore", "cross_entropy(x @ W, y, -1, 0.25)",
     lambda l, y: F.cross_entropy(l, y, ignore_index=-1, label_smoothing=0.25), [4, -1, 2, -1, 0, 1, 3]),
    ("smoothing_full", "cross_entropy(x @ W, y, label_smoothing = 1)",
     lambda l, y: F.cross_entropy(l, y, label_smoothing=1.0), [0, 1, 2, 3, 4, 1, 0]),
    ("smoothing_large_logits", "cross_entropy(x @ W * 300, y, label_smoothing = 0.3)",
     lambda l, y: F.cross_entropy(l * 300, y, label_smoothing=0.3), [3, 1, -100, 3, 4, 1, 2]),
    ("all_ignored", "cross_entropy(x @ W, y, label_smoothing = 0.1)",
     lambda l, y: F.cross_entropy(l, y, label_smoothing=0.1), [-100] * 7),
    # two losses over the same logits and labels with other settings: each its own row pass
    ("two_settings", "cross_entropy(x @ W, y) + cross_entropy(x @ W, y, ignore_index = 0, label_smoothing = 0.3)",
     lambda l, y: F.cross_entropy(l, y) + F.cross_entropy(l, y, ignore_index=0, label_smoothing=0.3),
     [0, 1, 2, 3, 4, 0, 3]),
    # over a sequence, as nanoGPT writes it: x f32[B, T, 4], y i32[B, T], the batch axis merged
    ("sequence", "cross_entropy(reshape(x @ W, -1, %d), reshape(y, -1))" % C,
     lambda l, y: F.cross_entropy(l.reshape(-1, C), y.reshape(-1)), [0, 1, 2, 3, 4, 1, 0] * 3, 3),
    ("sequence_ignore_smoothing", "cross_entropy(reshape(x @ W, -1, %d), reshape(y, -1), -1, 0.1)" % C,
     lambda l, y: F.cross_entropy(l.reshape(-1, C), y.reshape(-1), ignore_index=-1, label_smoothing=0.1),
     [4, -1, 2, 3, -1, 1, 0, 2, 2, 3, 1, -1, 0, 4], 2),
    # 7000 rows: past the 32768 elements at which the CPU's row kernel runs on the pool, in blocks
    # of 256 rows (the last one short), each block's total apart, summed in block order
    ("sequence_blocks", "cross_entropy(reshape(x @ W, -1, %d), reshape(y, -1), -1, 0.1)" % C,
     lambda l, y: F.cross_entropy(l.reshape(-1, C), y.reshape(-1), ignore_index=-1, label_smoothing=0.1),
     [int(v) for v in np.random.default_rng(3).integers(-1, C, BATCH * 1000)], 1000),
]


# rows of more than 1024 classes: name, classes, the loss, torch's, the labels (BATCH of them),
# the logits W's rows (x the identity), scaled by 3 so that a row's maximum moves
WIDE = [
    ("wide_vec", 1032, "cross_entropy(x @ W, y)", lambda l, y: F.cross_entropy(l, y), [1031, 0, 513, 7, 8, 1024, 1030]),
    ("wide_vec_ignore_smoothing", 1032, "cross_entropy(x @ W, y, ignore_index = 7, label_smoothing = 0.2)",
     lambda l, y: F.cross_entropy(l, y, ignore_index=7, label_smoothing=0.2), [1031, 7, 513, 7, 8, 1024, 3]),
    ("wide_scalar", 1030, "cross_entropy(x @ W, y, -1, 0.1)",
     lambda l, y: F.cross_entropy(l, y, ignore_index=-1, label_smoothing=0.1), [1029, 0, -1, 515, 8, 1024, 2]),
]
CASES += [(name, loss, fn, labels, 0, C) for name, C, loss, fn, labels in WIDE]


def special(edit):
    """Wide rows of logits (x, the input, plus W: f32[1032] of zeros) with NaN or infinities
    where `edit` puts them: a thread's maximum starts at -inf, never grows, or a NaN is no
    maximum, on the CUDA target's two passes; each case its own run, a NaN spoiling the mean."""
    def x():
        v = np.random.default_rng(5).standard_normal((BATCH, 1032)) * 3
        edit(v)
        return v
    return x


def _neginf(v):
    v[0, :600] = -inf          # most of a row, whole vectors of it
    v[1, :] = -inf             # all of a row but its label's logit
    v[1, 1000] = 2.0
    v[2, 8:16] = -inf          # one vector


def _set(r, c, value):
    def edit(v):
        v[r, c] = value
    return edit


inf = float("inf")
SPECIAL = [
    ("wide_neginf", _neginf, [1031, 1000, 3, 4, 5, 6, 7]),
    ("wide_neginf_row", _set(3, slice(None), -inf), [1031, 1000, 3, 4, 5, 6, 7]),
    ("wide_nan", _set(2, 500, float("nan")), [1031, 1000, 3, 4, 5, 6, 7]),
    ("wide_posinf", _set(4, 900, inf), [1031, 1000, 3, 4, 5, 6, 7]),
]
CASES += [(name, "cross_entropy(x + W, y)", lambda l, y: F.cross_entropy(l, y), labels, 0, 1032, special(edit))
          for name, edit, labels in SPECIAL]


# (precision, fused) on the CPU, and on CUDA (its row kernels: the fused pass is one block, the
# gradient alone a warp per row over a grid)
MODES = {False: [("f64", True), ("f64", False), ("f32", True)], True: [("f32", True), ("f32", False)]}
WIDE_MODES = [("bf16", True), ("bf16", False)]   # the wide cases, on either target


def model(loss, T, classes=C, features=4, wshape=None):
    seq = ", %d" % T if T else ""
    return ("input x: f32[B%s, %d]\ninput y: i32[B%s]\nparam W: f32[%s] = zeros()\nloss = %s\n"
            "train {\n    data x = npy(\"x.npy\")\n    data y = npy(\"y.npy\")\n    batch = %d\n    minimize loss\n}\n"
            % (seq, features, seq, wshape or "%d, %d" % (features, classes), loss, BATCH))


def bf16(a):
    """float64 values rounded to bfloat16 (to nearest even), back as float64."""
    return torch.tensor(a, dtype=torch.float64).to(torch.bfloat16).to(torch.float64).numpy()


def close(g, w, rtol, atol):
    nan = np.isnan(w)
    scale = max(1.0, float(np.abs(w[~nan]).max(initial=0.0)))
    return (np.isnan(g) != nan) | (~nan & (np.abs(g - w) > rtol * np.abs(w) + atol * scale))


def run_case(a, tmp, case, precision, fused):
    name, loss, fn, labels = case[:4]
    T = case[4] if len(case) > 4 else 0   # a sequence of T labels per sample
    classes = case[5] if len(case) > 5 else C   # a wide case's, whose x is the identity
    d = os.path.join(tmp, "%s_%s_%s" % (name, precision, "fused" if fused else "unfused"))
    os.makedirs(d)
    xfun = case[6] if len(case) > 6 else None   # a special case's logits, W a row of zeros
    features = classes if xfun else BATCH if classes != C else 4
    with open(os.path.join(d, "m.nn"), "w") as f:
        f.write(model(loss, T, classes, features, "%d" % classes if xfun else None))
    dt = np.float64 if precision == "f64" else np.float32
    if xfun:
        x = xfun().astype(dt)
        W = np.zeros(classes, dt)
    elif classes != C:
        x = np.eye(BATCH, dtype=dt)
        W = (rng.standard_normal((BATCH, classes)) * 3).astype(dt)
    else:
        x = rng.standard_normal((BATCH, T, 4) if T else (BATCH, 4)).astype(dt)
        W = (rng.standard_normal((4, C)) * 0.7).astype(dt)
    y = np.array(labels, dtype=np.int32).reshape((BATCH, T) if T else (BATCH,))
    np.save(os.path.join(d, "x.npy"), x)
    np.save(os.path.join(d, "y.npy"), y)
    np.save(os.path.join(d, "W.npy"), W)
    cmd = [a.run_model, os.path.join(d, "m.nn"), d, "--entry", "eval,grad", "--load-params",
           os.path.join(d, "W.npy")]
    if precision == "f64":
        cmd.append("--f64")
    if precision == "bf16":
        cmd += ["--precision", "bf16"]
    if not fused:
        cmd.append("--no-fuse")
    if a.cuda:
        cmd.append("--cuda")
    r = subprocess.run(cmd + [os.path.join(d, "x.npy"), os.path.join(d, "y.npy")], capture_output=True, text=True,
                       cwd=d)
    if r.returncode == 77:
        print("SKIP: no CUDA target or device:\n" + r.stderr)
        sys.exit(77)
    if r.returncode != 0:
        return ["run_model failed:\n" + r.stderr]
    got = {n: np.load(os.path.join(d, n + ".npy")).astype(np.float64) for n in r.stdout.split()}
    W64 = bf16(W) if precision == "bf16" else W.astype(np.float64)   # the bf16 product's operand
    tW = torch.tensor(W64, requires_grad=True)
    tx = torch.tensor(x.astype(np.float64))
    tl = fn(tx + tW if xfun else tx @ tW, torch.tensor(y, dtype=torch.long))
    tl.backward()
    want = {"loss": np.array(tl.item()), "grad.W": tW.grad.numpy()}
    rtol, atol = TOL[precision]
    if precision == "bf16":   # the gradient rounded to bf16 as the row kernel stores it; the loss in float
        want["grad.W"] = bf16(want["grad.W"])
        rtol = {"loss": TOL["f32"][0], "grad.W": rtol}
    errs = []
    for n, w in want.items():
        if n not in got:
            errs.append("%s: not written by run_model" % n)
            continue
        g = got[n].reshape(w.shape)
        bad = close(g, w, rtol[n] if isinstance(rtol, dict) else rtol, atol)
        if bad.any():
            i = tuple(np.argwhere(bad)[0])
            errs.append("%s at %s: nnc %r torch %r (%d of %d differ)" % (n, i, g[i], w[i], int(bad.sum()), bad.size))
    return errs


def blocks_checks(a, tmp):
    """The CPU's pooled rows (sequence_blocks' size): the loss and gradient the same bits on one
    thread and two, and a label outside the classes named by its first row."""
    if a.cuda:
        return []
    T, errs, out = 1000, [], {}
    d = os.path.join(tmp, "blocks")
    os.makedirs(d)
    with open(os.path.join(d, "m.nn"), "w") as f:
        f.write(model("cross_entropy(reshape(x @ W, -1, %d), reshape(y, -1))" % C, T))
    x = rng.standard_normal((BATCH, T, 4)).astype(np.float32)
    y = np.random.default_rng(4).integers(0, C, (BATCH, T)).astype(np.int32)
    np.save(os.path.join(d, "x.npy"), x)
    np.save(os.path.join(d, "W.npy"), (rng.standard_normal((4, C)) * 0.7).astype(np.float32))
    cmd = [a.run_model, os.path.join(d, "m.nn"), d, "--entry", "eval,grad", "--load-params", os.path.join(d, "W.npy"),
           os.path.join(d, "x.npy"), os.path.join(d, "y.npy")]
    for threads in ("1", "2"):
        np.save(os.path.join(d, "y.npy"), y)
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=d, env=dict(os.environ, OMP_NUM_THREADS=threads))
        if r.returncode != 0:
            return ["run_model failed on %s threads:\n%s" % (threads, r.stderr)]
        out[threads] = {n: np.load(os.path.join(d, n + ".npy")) for n in r.stdout.split()}
    for n in out["1"]:
        if not np.array_equal(out["1"][n], out["2"][n]):
            errs.append("%s differs between one thread and two" % n)
    bad = y.copy()
    bad.reshape(-1)[5000] = C + 2   # in a later block than the first bad row
    bad.reshape(-1)[300] = -5
    np.save(os.path.join(d, "y.npy"), bad)
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=d, env=dict(os.environ, OMP_NUM_THREADS="2"))
    want = "cross_entropy: label -5 at row 300 is outside [0, %d)" % C
    if r.returncode == 0 or want not in r.stderr:
        errs.append("bad labels: want %r, got status %d:\n%s" % (want, r.returncode, r.stderr))
    print("%s blocks: one thread and two, the first bad label%s" % ("FAIL" if errs else "ok  ",
                                                                    "".join("\n    " + e for e in errs)))
    return errs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-model", required=True, type=os.path.abspath)   # the cases run it from temporary folders
    ap.add_argument("--cuda", action="store_true")
    ap.add_argument("-k", default="")
    a = ap.parse_args()
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            if a.k not in case[0]:
                continue
            if len(case) > 5 and not a.cuda:   # wide rows: the CUDA target's kernels (the CPU's row
                continue                       # loop is one at any width, and its cases above cover it)
            for precision, fused in MODES[a.cuda] + (WIDE_MODES if len(case) == 6 else []):
                errs = run_case(a, tmp, case, precision, fused)
                print("%s %-24s %s %-7s%s" % ("FAIL" if errs else "ok  ", case[0], precision,
                                              "fused" if fused else "unfused", "".join("\n    " + e for e in errs)))
                passed += not errs
                failed += bool(errs)
        if a.k in "blocks_checks":   # -k empty, or naming them
            errs = blocks_checks(a, tmp)
            passed += not errs and not a.cuda
            failed += bool(errs)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
