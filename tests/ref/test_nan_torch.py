"""NaN and +-Inf through every op, forward and backward, against PyTorch (torch 1.13, float64).

PyTorch propagates NaN: relu(NaN) is NaN, amax over a row holding a NaN is NaN, argmax picks
the first NaN, relu's gradient at a NaN output passes dy through (threshold_backward keeps dy
unless y <= 0).  nnc must give the same value at every element: the same NaN positions, the
same infinities with the same sign, and the finite values within RTOL/ATOL.

Each case is a tiny .nn model whose parameters p (and q) hold NaN, +-Inf, zeros and finite
values, and whose loss is sum(f(p) * d) with a finite d, so that the gradient of p is
dy = d through f's backward.  The forward outputs come from NNC_ENTRY_EVAL, the gradients
("grad.p", ...) from NNC_ENTRY_GRAD.  Cases go GROUP at a time into one model (each with its
own renamed parameters and outputs, the loss their sum), run through tests/numeric/run_model
fused and unfused: few compiles of small models, fast enough for the sanitizer build.

    test_nan_torch.py --run-model PATH [--cuda] [-k SUBSTRING]

--cuda runs the models on the CUDA target (the same expressions from codegen/expr.c, its own
reduction and row kernels); it exits 77 (skipped) where run_model finds no CUDA target or device.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch

RTOL = 1e-5
GROUP = 20      # cases per model: one compile each is slow (6 a model: 24.8 s; 20: 16.6 s), one huge one slower
ATOL = 1e-6
nan, inf = float("nan"), float("inf")

# Rows: NaN with +Inf, NaN with -Inf, +-Inf without NaN, finite, all -Inf, a NaN alone among
# equal maxima (ties), all finite with a zero.
P = np.array([[nan, 1.5, -2.0, 0.0, inf],
              [-inf, 0.5, nan, -0.5, 3.0],
              [inf, -inf, 2.0, 1.0, -1.0],
              [0.25, -1.0, 2.0, 0.5, -3.0],
              [-inf, -inf, -inf, -inf, -inf],
              [2.0, 2.0, nan, 2.0, -1.0],
              [0.0, -0.0, 4.0, 4.0, 1.0]], dtype=np.float32)
Q = np.array([[1.0, nan, 0.0, inf, inf],
              [2.0, -inf, 1.0, 0.0, -3.0],
              [inf, inf, 0.0, -2.0, 0.5],
              [0.5, 0.0, -1.0, nan, 1.0],
              [1.0, -inf, 2.0, 0.0, 3.0],
              [0.0, 1.0, 2.0, -inf, nan],
              [0.0, 0.0, 2.0, 1.0, -1.0]], dtype=np.float32)
R, C = P.shape
D = (np.random.default_rng(7).uniform(0.5, 1.5, (R, C)) * np.where(np.arange(C) % 2, -1, 1)).astype(np.float32)
LABELS = np.array([0, 2, 1, 3, 4, 2, 2], dtype=np.int32)

TRAIN = "\ntrain {\n    data y = npy(\"y.npy\")\n    batch = %d\n    minimize loss\n}\n" % R


def ew(name, nn, fn):
    """An elementwise case: output r = EXPR(p, q), loss = sum(r * d)."""
    return (name, "output r = %s\nloss = sum(r * d)" % nn, lambda t: {"r": fn(t)}, lambda t, o: (o["r"] * t["d"]).sum())


def red(name, nn, fn):
    """A reduction case: output r = EXPR(p), loss = sum(r * sum(d)) (d broadcast over r's shape)."""
    return (name, "output r = %s\nloss = sum(r * sum(d))" % nn, lambda t: {"r": fn(t)}, lambda t, o: (o["r"] * t["d"].sum()).sum())


F = torch.nn.functional
CASES = [
    ew("relu", "relu(p)", lambda t: torch.relu(t["p"])),
    ew("relu_q", "relu(-q)", lambda t: torch.relu(-t["q"])),
    ew("sigmoid", "sigmoid(p)", lambda t: torch.sigmoid(t["p"])),
    ew("abs", "abs(p)", lambda t: torch.abs(t["p"])),
    ew("leaky_relu", "leaky_relu(p)", lambda t: F.leaky_relu(t["p"])),
    ew("leaky_relu_q", "leaky_relu(q, negative_slope = 0.2)", lambda t: F.leaky_relu(t["q"], 0.2)),
    ew("gelu", "gelu(p)", lambda t: F.gelu(t["p"])),
    ew("gelu_tanh", "gelu(p, approximate = \"tanh\")", lambda t: F.gelu(t["p"], approximate="tanh")),
    ew("softplus", "softplus(p)", lambda t: F.softplus(t["p"])),
    ew("softplus_q", "softplus(q, beta = 2, threshold = 3)", lambda t: F.softplus(t["q"], 2, 3)),
    ew("clamp", "clamp(p, -1, 1.5)", lambda t: torch.clamp(t["p"], -1, 1.5)),
    ew("clamp_min", "clamp(q, min = 0)", lambda t: torch.clamp(t["q"], min=0)),
    ew("square", "square(p)", lambda t: torch.square(t["p"])),
    ew("layer_norm", "layer_norm(p)", lambda t: F.layer_norm(t["p"], (C,))),
    ew("maximum", "maximum(p, q)", lambda t: torch.maximum(t["p"], t["q"])),
    ew("minimum", "minimum(p, q)", lambda t: torch.minimum(t["p"], t["q"])),
    ew("pow_tensor", "p ** q", lambda t: t["p"] ** t["q"]),
    ew("tanh", "tanh(p)", lambda t: torch.tanh(t["p"])),
    ew("silu", "silu(p)", lambda t: F.silu(t["p"])),
    ew("mish", "mish(q)", lambda t: F.mish(t["q"])),
    ew("elu", "elu(p)", lambda t: F.elu(t["p"])),
    ew("elu_q", "elu(q, alpha = 0.5)", lambda t: F.elu(t["q"], 0.5)),
    ew("selu", "selu(p)", lambda t: F.selu(t["p"])),
    ew("celu", "celu(q, alpha = 2)", lambda t: F.celu(t["q"], 2.0)),
    ew("softsign", "softsign(p)", lambda t: F.softsign(t["p"])),
    ew("hardtanh", "hardtanh(p)", lambda t: F.hardtanh(t["p"])),
    ew("hardtanh_q", "hardtanh(q, min_val = 0, max_val = 2)", lambda t: F.hardtanh(t["q"], 0, 2)),
    ew("relu6", "relu6(p * 3)", lambda t: F.relu6(t["p"] * 3)),
    ew("hardsigmoid", "hardsigmoid(p * 2)", lambda t: F.hardsigmoid(t["p"] * 2)),
    ew("hardswish", "hardswish(q * 2)", lambda t: F.hardswish(t["q"] * 2)),
    ew("logsigmoid", "logsigmoid(p)", lambda t: F.logsigmoid(t["p"])),
    ew("rsqrt", "rsqrt(q)", lambda t: torch.rsqrt(t["q"])),
    ew("reciprocal", "reciprocal(p)", lambda t: torch.reciprocal(t["p"])),
    ew("erf", "erf(p)", lambda t: torch.erf(t["p"])),
    ew("sin", "sin(p)", lambda t: torch.sin(t["p"])),
    ew("cos", "cos(q)", lambda t: torch.cos(t["q"])),
    ew("bce_logits", "binary_cross_entropy_with_logits(p, sigmoid(q), reduction = \"none\")",
       lambda t: F.binary_cross_entropy_with_logits(t["p"], torch.sigmoid(t["q"]), reduction="none")),
    ew("sign", "sign(p) + p", lambda t: torch.sign(t["p"]) + t["p"]),
    ew("rounding", "floor(p * 1.5) + ceil(q * 1.5) + round(p * 1.5) + trunc(q * 1.5) + q",
       lambda t: torch.floor(t["p"] * 1.5) + torch.ceil(t["q"] * 1.5) + torch.round(t["p"] * 1.5)
       + torch.trunc(t["q"] * 1.5) + t["q"]),
    ew("log1p_expm1", "log1p(p) + expm1(q)", lambda t: torch.log1p(t["p"]) + torch.expm1(t["q"])),
    ew("log2_log10", "log2(p) + log10(q)", lambda t: torch.log2(t["p"]) + torch.log10(t["q"])),
    ew("exp2", "exp2(p)", lambda t: torch.exp2(t["p"])),
    ew("logaddexp", "logaddexp(p, q)", lambda t: torch.logaddexp(t["p"], t["q"])),
    ew("cumsum", "cumsum(p, 1) + cumsum(q, dim = -1)", lambda t: torch.cumsum(t["p"], 1) + torch.cumsum(t["q"], -1)),
    # NaN first (descending) or last; ties in their order (nnc's topk is always; torch's only its
    # stable sort, the reference for both)
    ("sort", "v, i = sort(p, dim = 1, descending = True, stable = True)\noutput r = v + topk(q, 5, largest = False).values"
     "\noutput i = i\nloss = sum(r * d)",
     lambda t: {"r": torch.sort(t["p"], dim=1, descending=True, stable=True).values + torch.sort(t["q"], dim=1, stable=True).values,
                "i": torch.sort(t["p"], dim=1, descending=True, stable=True).indices.double()},
     lambda t, o: (o["r"] * t["d"]).sum()),
    # rows of 20 (above 16: selected by a heap), NaN, infinities and ties among them
    ("sort_long", "v, i = torch.cat((p, q, p * 2, -q), 1).sort(dim = 1)\noutput r = v[:, ::4] + topk(cat((q, p, q, p), 1), 18).values[:, 1::4]"
     "\noutput i = i\nloss = sum(r * d)",
     lambda t: {"r": torch.sort(torch.cat((t["p"], t["q"], t["p"] * 2, -t["q"]), 1), dim=1, stable=True).values[:, ::4]
                + torch.sort(torch.cat((t["q"], t["p"], t["q"], t["p"]), 1), dim=1, descending=True, stable=True).values[:, :18][:, 1::4],
                "i": torch.sort(torch.cat((t["p"], t["q"], t["p"] * 2, -t["q"]), 1), dim=1, stable=True).indices.double()},
     lambda t, o: (o["r"] * t["d"]).sum()),
    ew("tan_atan", "tan(p) + atan(q) + atan(p)", lambda t: torch.tan(t["p"]) + torch.atan(t["q"]) + torch.atan(t["p"])),
    ew("asin_acos", "asin(p * 0.5) + acos(q * 0.4) + asin(q)", lambda t: torch.asin(t["p"] * 0.5) + torch.acos(t["q"] * 0.4) + torch.asin(t["q"])),
    ew("sinh_cosh", "sinh(p) + cosh(q)", lambda t: torch.sinh(t["p"]) + torch.cosh(t["q"])),
    ew("asinh_acosh", "asinh(p) + acosh(q + 2)", lambda t: torch.asinh(t["p"]) + torch.acosh(t["q"] + 2)),
    ew("atanh", "atanh(p * 0.4) + atanh(q * 0.5)", lambda t: torch.atanh(t["p"] * 0.4) + torch.atanh(t["q"] * 0.5)),
    ew("shrink", "hardshrink(p) + softshrink(q, 0.5) + threshold(p, 0.1, -2) + tanhshrink(q) + clamp_min(p, 0.5)",
       lambda t: F.hardshrink(t["p"]) + F.softshrink(t["q"], 0.5) + F.threshold(t["p"], 0.1, -2.0) + F.tanhshrink(t["q"])
       + torch.clamp_min(t["p"], 0.5)),
    ew("floor_divide", "p // q + q", lambda t: torch.div(t["p"], t["q"], rounding_mode="floor") + t["q"]),
    ew("remainder", "p % q", lambda t: torch.remainder(t["p"], t["q"])),
    ew("fmod", "fmod(p, q)", lambda t: torch.fmod(t["p"], t["q"])),
    ew("exp", "exp(p)", lambda t: torch.exp(t["p"])),
    ew("log", "log(p)", lambda t: torch.log(t["p"])),
    ew("sqrt", "sqrt(p)", lambda t: torch.sqrt(t["p"])),
    ew("neg", "-p", lambda t: -t["p"]),
    ew("pow2", "p ** 2", lambda t: t["p"] ** 2),
    ew("pow3", "p ** 3", lambda t: t["p"] ** 3),
    ew("pow_half", "p ** 0.5", lambda t: t["p"] ** 0.5),
    ew("pow_1_5", "p ** 1.5", lambda t: t["p"] ** 1.5),
    ew("pow0", "p ** 0", lambda t: t["p"] ** 0),
    ew("add", "p + q", lambda t: t["p"] + t["q"]),
    ew("sub", "p - q", lambda t: t["p"] - t["q"]),
    ew("mul", "p * q", lambda t: t["p"] * t["q"]),
    ew("div", "p / q", lambda t: t["p"] / t["q"]),
    ew("chain", "relu(sigmoid(p) * q - 0.5)", lambda t: torch.relu(torch.sigmoid(t["p"]) * t["q"] - 0.5)),
    red("sum_all", "sum(p)", lambda t: t["p"].sum()),
    red("sum_axis1", "sum(p, axis = 1)", lambda t: t["p"].sum(1)),
    red("mean_axis0", "mean(p, axis = 0)", lambda t: t["p"].mean(0)),
    red("max_all", "max(p)", lambda t: torch.amax(t["p"])),
    red("max_axis0", "max(p, axis = 0)", lambda t: torch.amax(t["p"], 0)),
    red("max_axis1", "max(p, axis = 1)", lambda t: torch.amax(t["p"], 1)),
    red("max_keepdim", "max(q, axis = 1, keepdim = 1)", lambda t: torch.amax(t["q"], 1, keepdim=True)),
    red("min_via_max", "-max(-p, axis = 1)", lambda t: -torch.amax(-t["p"], 1)),
    red("min_axis1", "min(p, axis = 1)", lambda t: torch.amin(t["p"], 1)),
    red("sum_axes", "sum(q, axis = (0, 1))", lambda t: t["q"].sum((0, 1))),
    # max pooling's first maximum and NaN rule: 2x2 windows tiling a 6x4 corner of p (the CPU's
    # fast path), and overlapping padded 3x3 windows over all of it (the general loops)
    red("max_pool_2x2", "reshape(max_pool2d(reshape(narrow(narrow(p, 0, 0, 6), 1, 0, 4), 1, 1, 6, 4), 2), 3, 2)",
        lambda t: F.max_pool2d(t["p"][:6, :4].reshape(1, 1, 6, 4), 2).reshape(3, 2)),
    red("max_pool_3x3", "reshape(max_pool2d(reshape(q, 1, 1, 7, 5), 3, stride = 2, padding = 1), 4, 3)",
        lambda t: F.max_pool2d(t["q"].reshape(1, 1, 7, 5), 3, stride=2, padding=1).reshape(4, 3)),
    red("logsumexp", "logsumexp(p, axis = 1)", lambda t: torch.logsumexp(t["p"], 1)),
    red("logsumexp_q", "logsumexp(q, axis = 0, keepdim = 1)", lambda t: torch.logsumexp(t["q"], 0, keepdim=True)),
    ew("max_sub", "p - max(p, axis = 1, keepdim = 1)", lambda t: t["p"] - torch.amax(t["p"], 1, keepdim=True)),
    ew("softmax", "softmax(p)", lambda t: torch.softmax(t["p"], -1)),
    ew("softmax_q", "softmax(q)", lambda t: torch.softmax(t["q"], -1)),
    ew("log_softmax", "log_softmax(p)", lambda t: torch.log_softmax(t["p"], -1)),
    ew("log_softmax_q", "log_softmax(q)", lambda t: torch.log_softmax(t["q"], -1)),
    ("cross_entropy", "output r = cross_entropy(p, y)\nloss = r",
     lambda t: {"r": F.cross_entropy(t["p"], t["y"].long())}, lambda t, o: o["r"]),
    ("cross_entropy_rows", "output r = cross_entropy(q, y) * 2\nloss = r",
     lambda t: {"r": F.cross_entropy(t["q"], t["y"].long()) * 2}, lambda t, o: o["r"]),
    ("cross_entropy_finite", "output r = cross_entropy(d, y)\nloss = r + sum(p * 0)",
     lambda t: {"r": F.cross_entropy(t["d"], t["y"].long())}, lambda t, o: o["r"] + (t["p"] * 0).sum()),
    ("accuracy", "output r = accuracy(p, y)\noutput s = accuracy(q, y)\nloss = sum(p * d) + sum(q * d)",
     lambda t: {"r": (torch.argmax(t["p"], 1) == t["y"].long()).sum().to(t["p"].dtype),
                "s": (torch.argmax(t["q"], 1) == t["y"].long()).sum().to(t["p"].dtype)},
     lambda t, o: (t["p"] * t["d"]).sum() + (t["q"] * t["d"]).sum()),
    ("mse_loss", "output r = mse_loss(p, q)\nloss = r",
     lambda t: {"r": F.mse_loss(t["p"], t["q"])}, lambda t, o: o["r"]),
    ("matmul", "output r = p @ transpose(q)\nloss = sum(r * (d @ transpose(d)))",
     lambda t: {"r": t["p"] @ t["q"].T}, lambda t, o: (o["r"] * (t["d"] @ t["d"].T)).sum()),
    # masks and moves: comparisons (NaN compares false, != true), where and masked_fill (the side
    # not chosen, NaN or not, gives nothing), tril/triu (a masked NaN is 0), a permute, a split
    ("compare", "output r = (p < q) + (p <= q) * 2 + (p == q) * 4 + (p != q) * 8 + (p > 0) * 16 + ge(q, p) * 32\n"
     "loss = sum(p * d) + sum(q * d)",
     lambda t: {"r": sum(m.to(t["p"].dtype) * k for m, k in ((t["p"] < t["q"], 1), (t["p"] <= t["q"], 2),
                                                             (t["p"] == t["q"], 4), (t["p"] != t["q"], 8),
                                                             (t["p"] > 0, 16), (t["q"] >= t["p"], 32)))},
     lambda t, o: (t["p"] * t["d"]).sum() + (t["q"] * t["d"]).sum()),
    ew("where", "where(p > q, p, q)", lambda t: torch.where(t["p"] > t["q"], t["p"], t["q"])),
    ew("masked_fill", "masked_fill(p, q > 0, -inf)", lambda t: t["p"].masked_fill(t["q"] > 0, -inf)),
    ew("tril_triu", "tril(p) + triu(q, 1)", lambda t: torch.tril(t["p"]) + torch.triu(t["q"], 1)),
    ew("permute", "reshape(swapaxes(reshape(p, 7, 5, 1), 0, 2), 5, 7).mT",
       lambda t: t["p"].reshape(7, 5, 1).swapaxes(0, 2).reshape(5, 7).mT),
    ("split", "a, b = split(p, (2, 3), 1)\noutput r = concat((b, a), axis = 1)\nloss = sum(r * d)",
     lambda t: {"r": torch.cat(torch.split(t["p"], (2, 3), 1)[::-1], 1)}, lambda t, o: (o["r"] * t["d"]).sum()),
]


def torch_ref(fwd, loss_fn):
    """Forward outputs and the gradients of p, q, d in float64 from the float32 values."""
    t = {k: torch.tensor(v.astype(np.float64), requires_grad=True) for k, v in (("p", P), ("q", Q), ("d", D))}
    t["y"] = torch.tensor(LABELS)
    out = fwd(t)
    loss = loss_fn(t, out)
    grads = torch.autograd.grad(loss, [t["p"], t["q"], t["d"]], allow_unused=True)
    want = {k: v.detach().numpy() for k, v in out.items()}
    for k, g in zip("pqd", grads):
        want["grad." + k] = np.zeros((R, C)) if g is None else g.numpy()
    return want


def rename(body, i):
    """A case's statement text with its names made its own (p -> p3, r -> r3, loss -> l3; the
    inputs p, q, d, the results r, s, v, i), so
    that every case lives in one model: one compile per mode instead of one per case."""
    body = re.sub(r"\bloss\b", "l%d" % i, body)
    return re.sub(r"\b([pqdrsvi])\b", lambda m: "%s%d" % (m.group(1), i), body)


def used_params(body):
    """The parameters a case mentions (nnc rejects a parameter the loss does not use)."""
    return [n for n in "pqd" if re.search(r"\b%s\b" % n, body)]


def combined_model(cases):
    """The cases' statements, parameters declared in the order --load-params fills them, and a
    loss that sums the cases' losses (each depends on its own parameters only)."""
    decl, body, params = [], [], []
    for i, (_, src, _, _) in enumerate(cases):
        for n in used_params(src):
            decl.append("param %s%d: f32[%d, %d] = zeros()" % (n, i, R, C))
            params.append(n)
        body.append(rename(src, i))
    loss = "loss = " + " + ".join("l%d" % i for i in range(len(cases)))
    src = "\n".join(decl) + "\ninput y: i32[%d]\n" % R + "\n".join(body) + "\n" + loss + TRAIN
    return src, params


def run(run_model, d, fused, params, cuda):
    cmd = [run_model, os.path.join(d, "m.nn"), d, "--entry", "eval,grad", "--load-params",
           ",".join(os.path.join(d, n + ".npy") for n in params)]
    if not fused:
        cmd.append("--no-fuse")
    if cuda:
        cmd.append("--cuda")
    r = subprocess.run(cmd + [os.path.join(d, "y.npy")], capture_output=True, text=True, cwd=d)
    if r.returncode == 77:
        print("SKIP: no CUDA target or device:\n" + r.stderr)
        sys.exit(77)
    if r.returncode != 0:
        return None, r.stderr
    return {n: np.load(os.path.join(d, n + ".npy")).astype(np.float64) for n in r.stdout.split()}, ""


def compare(name, got, want):
    """'' when every element agrees: NaN where torch has NaN, the same infinities, close finites."""
    g = np.asarray(got, dtype=np.float64)
    w = np.asarray(want, dtype=np.float64)
    if g.shape != w.shape:
        return "%s: shape %s, want %s" % (name, g.shape, w.shape)
    fin = np.isfinite(w)
    scale = max(1.0, float(np.abs(w[fin]).max()) if fin.any() else 1.0)
    with np.errstate(invalid="ignore"):
        close = np.abs(g - w) <= RTOL * np.abs(w) + ATOL * scale
    ok = np.where(np.isnan(w), np.isnan(g), np.where(np.isinf(w), g == w, close))
    if ok.all():
        return ""
    i = tuple(np.argwhere(~ok)[0])
    return "%s at %s: nnc %r torch %r (%d of %d elements differ)" % (name, i, g[i], w[i], int((~ok).sum()), ok.size)


def run_group(a, tmp, g, cases):
    """Runs a group of cases as one model, fused and unfused; (passed, failed)."""
    src, params = combined_model(cases)
    passed = failed = 0
    for fused in (True, False):
        mode = "fused" if fused else "unfused"
        d = os.path.join(tmp, "%d_%s" % (g, mode))
        os.makedirs(d)
        with open(os.path.join(d, "m.nn"), "w") as f:
            f.write(src)
        for n, v in (("p", P), ("q", Q), ("d", D), ("y", LABELS)):
            np.save(os.path.join(d, n + ".npy"), v)
        got, err = run(a.run_model, d, fused, params, a.cuda)
        if got is None:
            print("FAIL %s: run_model failed:\n%s" % (", ".join(c[0] for c in cases), err))
            failed += len(cases)
            continue
        for i, (name, _, fwd, loss_fn) in enumerate(cases):
            errs, checked = [], 0
            for k, w in torch_ref(fwd, loss_fn).items():
                k = rename(k, i) if not k.startswith("grad.") else "grad." + rename(k[5:], i)
                if k in got:
                    checked += 1
                    e = compare(k, got[k], w)
                    if e:
                        errs.append(e)
            if not errs and checked < 2:
                errs.append("only %d outputs compared" % checked)
            print("%s %-20s %-7s %d outputs%s" % ("FAIL" if errs else "ok  ", name, mode, checked,
                                                  "".join("\n    " + e for e in errs)))
            passed += not errs
            failed += bool(errs)
    return passed, failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-model", required=True)
    ap.add_argument("--cuda", action="store_true")
    ap.add_argument("-k", default="")
    a = ap.parse_args()
    cases = [c for c in CASES if a.k in c[0]]
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for g in range(0, len(cases), GROUP):
            p, f = run_group(a, tmp, g, cases[g:g + GROUP])
            passed += p
            failed += f
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
