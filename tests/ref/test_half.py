"""precision = bf16 | f16 (passes/autocast.c) against PyTorch and NumPy.

  (a) rounding: x @ I (I the identity) under autocast is x rounded to the format -- the cast of
      the product's operand and the rounding of its result -- and an elementwise chain after it
      rounds every op, as torch's half ops do; bit-exact against torch's bfloat16 and NumPy's
      float16 on ties, subnormals, overflow to infinity and signed zeros (a product's operand
      that overflows makes its row NaN, inf * 0, as in torch; row 3 does that in f16);
  (b) a classifier's and a small convnet's loss and parameter gradients against
      torch.autocast("cpu", bfloat16) within the format's tolerance (4 units of the last place),
      and against float32 within that plus twice the distance of torch's own autocast from
      float32 (a convolution's weight gradient sums many rounded terms); f16, which torch 1.13's
      CPU autocast lacks, against float32;
  (c) models/mlp.nn trained 3 epochs with --precision bf16 and f16 reaches the f32 run's test
      accuracy within 0.5 points (the goal of issue 14), when Fashion-MNIST is installed;
  (d) f16 dynamic loss scaling against a transcription of GradScaler over scripted overflows;
  (e) --save-dtype bf16|f16 exports PyTorch loads, rounded as torch rounds;
  (f) every elementwise op on half operands against the f32 op on the rounded operands;
  (g) to(x, bf16 | f16) written in a model: rounding, half ops, products, promotion.

    test_half.py --run-model PATH --nnc PATH [--cuda] [--parts abcdefg]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ROUND_MODEL = """input x: f32[B, 8]
param I: f32[8, 8] = zeros()
output h = x @ I
output d = (x @ I) * 3 - 1
output r = relu(x @ I) * (x @ I)
"""

CLASSIFIER = """input x: f32[B, 12]
input y: i32[B]
param w1: f32[16, 12] = zeros()
param b1: f32[16] = zeros()
param w2: f32[5, 16] = zeros()
param b2: f32[5] = zeros()
logits = relu(x @ transpose(w1) + b1) @ transpose(w2) + b2
loss = cross_entropy(logits, y)
train {
    data x = randn(32, 12)
    data y = randn(32)
    batch = 32
    loss_scale = none
    minimize loss
}
"""

CONVNET = """input x: f32[B, 2, 8, 8]
input y: i32[B]
param cw: f32[4, 2, 3, 3] = zeros()
param cb: f32[4] = zeros()
param w: f32[5, 64] = zeros()
param b: f32[5] = zeros()
h = max_pool2d(relu(conv2d(x, cw, cb, padding = 1)), 2)
logits = flatten(h, 1) @ transpose(w) + b
loss = cross_entropy(logits, y)
train {
    data x = randn(16, 2, 8, 8)
    data y = randn(16)
    batch = 16
    loss_scale = none
    minimize loss
}
"""

# bf16 eps 2^-8, f16 2^-11: results of a few ops may be a few units of the last place apart
TOL = {"bf16": 1.6e-2, "f16": 2e-3}   # 4 units of the last place


def run_model(exe, tmp, name, src, inputs, params, precision, entry, cuda):
    d = os.path.join(tmp, "%s_%s%s" % (name, precision, "_cuda" if cuda else ""))
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, name + ".nn")
    with open(path, "w") as f:
        f.write(src)
    files = []
    for i, a in enumerate(inputs):
        files.append(os.path.join(d, "in%d.npy" % i))
        np.save(files[-1], a)
    pf = []
    for i, a in enumerate(params):
        pf.append(os.path.join(d, "p%d.npy" % i))
        np.save(pf[-1], a.astype(np.float32))
    cmd = [exe, path, d, "--precision", precision, "--entry", entry, "--load-params", ",".join(pf)]
    if cuda:
        cmd.append("--cuda")
    r = subprocess.run(cmd + files, capture_output=True, text=True)
    if r.returncode == 77:
        return None
    if r.returncode != 0:
        raise RuntimeError("run_model failed (%d): %s" % (r.returncode, r.stderr))
    return {n: np.load(os.path.join(d, n + ".npy")) for n in r.stdout.split()}


def round_inputs():
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((6, 8)) * np.array([1, 10, 1e-3, 1e3, 1e-5, 3e4, 1, 1])).astype(np.float32)
    bits = x.view(np.uint32)
    bits[0, :4] = (bits[0, :4] & 0xFFFF0000) | 0x8000           # bf16 ties, even and odd upper halves
    bits[0, 4:] = (bits[0, 4:] & 0xFFFFE000) | 0x1000           # f16 ties
    # f16: the largest finite value, one that rounds down to it; products (* 3 in `d`) that
    # overflow to infinity or round to 65504; the smallest normal and just below it
    x[1, :] = [65504, 65519, 21840, 21834, -30000, 6.1035156e-5, 6.09e-5, -3e-8]
    # f16 subnormals and ties to 0.  No bf16 subnormal: on a CPU with AVX512-BF16 the product
    # (oneDNN, as PyTorch's CPU autocast) treats subnormal bf16 inputs as zero, as the
    # instruction does; 1e-30 is normal in bf16 and underflows to 0 in f16
    x[2, :] = [5.96e-8, 2.98e-8, 2.9802322e-8, 8.9e-8, -1e-7, 0.0, -0.0, 1e-30]
    x[3, :] = [3.3895314e38, -3.3e38, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -9, 255.5, 256.5, 2e-38, -7.0]
    return x


def to_format(x, precision):
    """x (float32) rounded to the format and back, as torch / NumPy round (nearest even)."""
    if precision == "f16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(np.float32)
    import torch
    return torch.from_numpy(x).to(torch.bfloat16).float().numpy()


def same_bits(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return np.array_equal(a.view(np.uint32), b.view(np.uint32)) or np.array_equal(a, b, equal_nan=True)


def part_a(exe, tmp, cuda):
    ok = True
    x = round_inputs()
    eye = np.eye(8, dtype=np.float32)
    for precision in ("bf16", "f16"):
        out = run_model(exe, tmp, "round", ROUND_MODEL, [x], [eye], precision, "eval", cuda)
        if out is None:
            print("SKIP (a) %s: no CUDA here" % precision)
            continue
        q = lambda v: to_format(np.asarray(v, np.float32), precision)  # noqa: E731
        np.seterr(over="ignore", invalid="ignore")
        h = q(q(x) @ eye)   # the operand cast, the product in f32 (-0 + 0 is +0), its rounding
        want = {"h": h, "d": q(q(h * np.float32(3)) - np.float32(1)), "r": q(q(np.maximum(h, 0)) * h)}
        for k, w in want.items():
            got = out[k].astype(np.float32)
            good = same_bits(got, w)
            bad = np.argwhere(got.view(np.uint32) != w.view(np.uint32))
            detail = "" if good else " first differs at %s: got %r want %r (x %r)" % (
                tuple(bad[0]), got[tuple(bad[0])], w[tuple(bad[0])], x[tuple(bad[0])])
            print("%s (a) %-4s %s: %d values bit-exact%s" % ("ok  " if good else "FAIL", precision, k, got.size, detail))
            ok &= good
    return ok


def torch_classifier(x, y, params, dtype):
    import torch
    import torch.nn.functional as F
    p = [torch.tensor(a, requires_grad=True) for a in params]
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))
    if dtype is None:
        loss = F.cross_entropy(F.linear(F.relu(F.linear(xt, p[0], p[1])), p[2], p[3]), yt)
    else:
        with torch.autocast("cpu", dtype=dtype):
            logits = F.linear(F.relu(F.linear(xt, p[0], p[1])), p[2], p[3])
        loss = F.cross_entropy(logits.float(), yt)
    loss.backward()
    return float(loss), [t.grad.numpy() for t in p]


def torch_convnet(x, y, params, dtype):
    import torch
    import torch.nn.functional as F
    p = [torch.tensor(a, requires_grad=True) for a in params]
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))
    import contextlib
    with torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext():
        h = F.max_pool2d(F.relu(F.conv2d(xt, p[0], p[1], padding=1)), 2)
        logits = F.linear(h.flatten(1), p[2], p[3])
    loss = F.cross_entropy(logits.float(), yt)
    loss.backward()
    return float(loss), [t.grad.numpy() for t in p]


def part_b(exe, tmp, cuda):
    try:
        import torch
    except ImportError:
        print("SKIP (b): torch is not installed")
        return True
    rng = np.random.default_rng(11)
    x = rng.standard_normal((32, 12)).astype(np.float32)
    y = rng.integers(0, 5, 32).astype(np.int32)
    params = [(rng.standard_normal(s) * 0.4).astype(np.float32) for s in ((16, 12), (16,), (5, 16), (5,))]
    names = ["w1", "b1", "w2", "b2"]
    cx = rng.standard_normal((16, 2, 8, 8)).astype(np.float32)
    cy = rng.integers(0, 5, 16).astype(np.int32)
    cparams = [(rng.standard_normal(s) * 0.3).astype(np.float32) for s in ((4, 2, 3, 3), (4,), (5, 64), (5,))]
    models = [("linear", CLASSIFIER, [x, y], params, names, torch_classifier),
              ("conv", CONVNET, [cx, cy], cparams, ["cw", "cb", "w", "b"], torch_convnet)]
    ok = True
    for mname, src, ins, ps, pnames, ref in models:
        ok &= check_model_b(exe, tmp, cuda, mname, src, ins, ps, pnames, ref)
    return ok


def check_model_b(exe, tmp, cuda, mname, src, ins, params, names, ref):
    import torch
    l32, g32 = ref(*ins, params, None)
    ok = True
    for precision in ("bf16", "f16"):
        out = run_model(exe, tmp, mname, src, ins, params, precision, "grad", cuda)
        if out is None:
            print("SKIP (b) %s: no CUDA here" % precision)
            continue
        refs = [("f32", l32, g32)]
        slack = 0.0   # how far torch's own autocast lands from f32: nnc may be as far (and TOL)
        if precision == "bf16":
            lb, gb = ref(*ins, params, torch.bfloat16)
            refs.append(("torch.autocast", lb, gb))
            slack = max([abs(lb - l32) / max(abs(l32), 1e-6)] +
                        [float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-6)) for a, b in zip(gb, g32)])
        for rname, lr, gr in refs:
            errs = {"loss": abs(float(out["loss"]) - lr) / max(abs(lr), 1e-6)}
            for n, g in zip(names, gr):
                errs[n] = float(np.abs(out["grad." + n] - g).max() / max(np.abs(g).max(), 1e-6))
            worst = max(errs.values())
            tol = TOL[precision] + (2 * slack if rname == "f32" else 0)
            good = worst <= tol
            print("%s (b) %-6s %-4s vs %-14s max rel %.3g (tolerance %.3g; %s)" % (
                "ok  " if good else "FAIL", mname, precision, rname, worst, tol,
                ", ".join("%s %.2g" % kv for kv in errs.items())))
            ok &= good
    return ok


def part_c(nnc, tmp, cuda):
    model = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "mlp.nn")
    if not os.path.isdir("/usr/share/datasets/fashion-mnist"):
        print("SKIP (c): Debian's dataset-fashion-mnist is not installed")
        return True
    acc = {}
    for precision in ("f32", "bf16", "f16"):
        m = os.path.join(tmp, "mlp_%s.jsonl" % precision)
        cmd = [nnc, model, "--precision", precision, "--epochs", "3", "--quiet", "--metrics", m]
        if cuda:
            cmd += ["--target", "cuda"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print("FAIL (c) %s: nnc exited %d: %s" % (precision, r.returncode, r.stderr))
            return False
        epochs = [json.loads(line) for line in open(m) if '"epoch"' in line and '"type":"epoch"' in line]
        acc[precision] = 100 * epochs[-1]["accuracy"]
    ok = True
    for precision in ("bf16", "f16"):
        d = acc[precision] - acc["f32"]
        good = abs(d) <= 0.5
        print("%s (c) mlp.nn 3 epochs: %s %.2f%%, f32 %.2f%% (%+.2f points; goal within 0.5)" % (
            "ok  " if good else "FAIL", precision, acc[precision], acc["f32"], d))
        ok &= good
    return ok


SCALER_MODEL = """input x: f32[N, 4]
input y: f32[N, 1]
param W: f32[4, 1] = normal(0, 0.01)
loss = mse_loss(x @ W, y)
train {
    data x = npy("x.npy")
    data y = npy("y.npy")
    batch = 1
    shuffle = false
    epochs = 1
    optimizer = %s
    precision = f16
    loss_scale = dynamic(init_scale = 1024, growth_interval = 3)
    minimize loss
    seed = 1
}
"""


def grad_scaler(overflows, init=1024.0, growth=2.0, backoff=0.5, interval=3):
    """torch.cuda.amp.GradScaler.update (torch._amp_update_scale_) over steps whose gradients
    overflow or not: the scale and the skipped steps after each."""
    scale, tracker, skipped, out = init, 0, 0, []
    for bad in overflows:
        if bad:
            scale, tracker, skipped = scale * backoff, 0, skipped + 1
        else:
            tracker += 1
            if tracker == interval:
                scale, tracker = scale * growth, 0
        out.append((scale, skipped))
    return out


def part_d(nnc, tmp, cuda):
    ok = True
    for opt in ("sgd(lr = 0.01)", "adam(lr = 0.01)", "sgd(lr = 0.01, momentum = 0.9, dampening = 0.5)"):
        ok &= scaler_run(nnc, tmp, cuda, opt)
    return ok


def scaler_run(nnc, tmp, cuda, opt):
    """f16 loss scaling: rows whose error is 1e4 overflow the scaled f16 gradient at any scale
    (the forced overflows), the others never do; the scale and skipped steps after every step
    must follow GradScaler's rule, and a skipped step must leave the weights and the optimizer
    as they were (Adam's step count, SGD's first step): the run ends where a run without the bad
    rows ends."""
    rng = np.random.default_rng(5)
    pattern = [0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]
    good = (rng.standard_normal((len(pattern), 4)) * 0.1).astype(np.float32)
    x = good.copy()
    y = np.full((len(pattern), 1), 0.01, np.float32)
    y[np.array(pattern) == 1] = 1e4
    finals = []
    for name, (xs, ys) in (("forced", (x, y)), ("clean", (x[np.array(pattern) == 0], y[np.array(pattern) == 0]))):
        d = os.path.join(tmp, "scaler_%s_%d%s" % (name, len(os.listdir(tmp)), "_cuda" if cuda else ""))
        os.makedirs(d)
        np.save(os.path.join(d, "x.npy"), xs)
        np.save(os.path.join(d, "y.npy"), ys)
        with open(os.path.join(d, "m.nn"), "w") as f:
            f.write(SCALER_MODEL % opt)
        cmd = [nnc, "m.nn", "--quiet", "--metrics", "m.jsonl", "--save", "w.safetensors"]
        if cuda:
            cmd += ["--target", "cuda"]
        r = subprocess.run(cmd, cwd=d, capture_output=True, text=True)
        if r.returncode != 0:
            print("FAIL (d) %s: nnc exited %d: %s" % (name, r.returncode, r.stderr))
            return False
        steps = [json.loads(line) for line in open(os.path.join(d, "m.jsonl")) if '"type":"step"' in line]
        import nnc_ref
        finals.append(nnc_ref.load_safetensors(os.path.join(d, "w.safetensors"))[0])
        if name == "forced":
            got = [(s["loss_scale"], s["skipped_steps"]) for s in steps]
    want = grad_scaler(pattern)
    ok = got == want
    print("%s (d) %s: f16 loss scale over %d steps with %d forced overflows: %s GradScaler's rule%s" % (
        "ok  " if ok else "FAIL", opt, len(pattern), sum(pattern), "follows" if ok else "breaks",
        "" if ok else " (got %s, want %s)" % (got, want)))
    wf, wc = finals[0]["W"], finals[1]["W"]
    same = np.array_equal(wf, wc)
    print("%s (d) %s: skipped steps leave the weights alone: W after the forced run %s the clean run's (max diff %.3g)" % (
        "ok  " if same else "FAIL", opt, "equals" if same else "differs from", float(np.abs(wf - wc).max())))
    saved = finals[0].get("optimizer.scaler.scale")
    kept = saved is not None and float(saved) == want[-1][0]
    print("%s (d) the checkpoint keeps the scale (optimizer.scaler.scale %s)" % ("ok  " if kept else "FAIL", saved))
    return ok and same and kept


OPS_MODEL = """input x: f32[B, 8]
input z: f32[B, 8]
param I: f32[8, 8] = zeros()
h = x @ I
p = abs(z) @ I + 0.25
output neg = -h
output abs_ = abs(h)
output relu_ = relu(h)
output leaky = leaky_relu(h, 0.2)
output sigmoid_ = sigmoid(h)
output gelu_ = gelu(h)
output gelu_tanh = gelu(h, approximate = "tanh")
output clamp_ = clamp(h, min = -0.5, max = 0.5)
output square_ = square(h)
output tanh_ = tanh(h)
output sqrt_ = sqrt(p)
output add = h + p
output mul = h * p
output div = h / p
output max_ = maximum(h, p)
output exp_ = exp(h)
output log_ = log(p)
output softplus_ = softplus(h)
output pow_ = pow(h, 3)
"""


def part_f(exe, tmp, cuda):
    """Every elementwise op on half operands: the ops autocast keeps in half give the f32 op on
    the rounded operands, rounded (within one unit of the format's last place: the f32 math
    libraries may differ in their last bit, and 1e-6 absolute); exp, log, softplus and pow (autocast's fp32 list)
    give f32, within 1e-5."""
    import math
    rng = np.random.default_rng(13)
    x = (rng.standard_normal((6, 8)) * 2).astype(np.float32)
    z = (rng.standard_normal((6, 8)) * 2).astype(np.float32)
    eye = np.eye(8, dtype=np.float32)
    erf = np.vectorize(math.erf)
    ok = True
    for precision in ("bf16", "f16"):
        out = run_model(exe, tmp, "ops", OPS_MODEL, [x, z], [eye], precision, "eval", cuda)
        if out is None:
            print("SKIP (f) %s: no CUDA here" % precision)
            continue
        q = lambda v: to_format(np.asarray(v, np.float32), precision)  # noqa: E731
        h = q(x)
        pz = q(q(np.abs(z)) + np.float32(0.25))
        f = np.float32
        half = {"neg": -h, "abs_": np.abs(h), "relu_": np.maximum(h, 0), "leaky": np.where(h > 0, h, h * f(0.2)),
                "sigmoid_": 1 / (1 + np.exp(-h)), "gelu_": h * 0.5 * (1 + erf(h / np.sqrt(2))),
                "gelu_tanh": 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3))),
                "clamp_": np.clip(h, -0.5, 0.5), "square_": h * h, "tanh_": np.tanh(h), "sqrt_": np.sqrt(pz),
                "add": h + pz, "mul": h * pz, "div": h / pz, "max_": np.maximum(h, pz)}
        full = {"exp_": np.exp(h), "log_": np.log(pz), "softplus_": np.log1p(np.exp(h)), "pow_": h ** 3}
        ulp = 2.0 ** (-8 if precision == "bf16" else -11)
        bad = []
        for k, w in half.items():
            w = np.asarray(w, np.float64)
            # + 1e-6: gelu's 1 + erf(x / sqrt 2) cancels to 0 in f32 below x = -5.8 (torch's too)
            err = np.abs(out[k] - w) - ulp * np.abs(w) - 1e-6
            if not (err <= 0).all() or not np.array_equal(out[k], q(out[k])):
                bad.append("%s (max err %.3g)" % (k, float(np.max(np.abs(out[k] - w)))))
        for k, w in full.items():
            w = np.asarray(w, np.float64)
            if not (np.abs(out[k] - w) <= 1e-5 * np.abs(w) + 1e-30).all():
                bad.append("%s (f32, max err %.3g)" % (k, float(np.max(np.abs(out[k] - w)))))
        good = not bad
        print("%s (f) %-4s %d half ops within one unit of the last place and rounded to %s, %d f32 ops%s" % (
            "ok  " if good else "FAIL", precision, len(half), precision, len(full),
            "" if good else ": " + ", ".join(bad)))
        ok &= good
    return ok


CAST_MODEL = """input x: f32[B, 8]
param I: f32[8, 8] = zeros()
output b = to(x, bf16) * 3 - 1
output h = to(x, f16) @ to(I, f16)
output m = x.to(bf16) @ I
output r = relu(to(x, f16)) + to(x, bf16)
"""


def part_g(exe, tmp, cuda):
    """to(x, bf16 | f16) in a model without precision: the conversion rounds, ops on half values
    stay half (rounded each), a product of two halves is half, and mixed types promote to f32
    as torch's type promotion does."""
    x = round_inputs()[:2]
    x[1, :] = np.abs(x[1, :]) % 300
    eye = np.eye(8, dtype=np.float32)
    out = run_model(exe, tmp, "casts", CAST_MODEL, [x], [eye], "f32", "eval", cuda)
    if out is None:
        print("SKIP (g): no CUDA here")
        return True
    bf = lambda v: to_format(np.asarray(v, np.float32), "bf16")  # noqa: E731
    hf = lambda v: to_format(np.asarray(v, np.float32), "f16")  # noqa: E731
    want = {"b": bf(bf(bf(x) * np.float32(3)) - np.float32(1)), "h": hf(hf(x) @ hf(eye)), "m": bf(x) @ eye,
            "r": np.maximum(hf(x), 0) + bf(x)}
    ok = True
    for k, w in want.items():
        good = same_bits(out[k], w)
        print("%s (g) to(x, dtype): %s bit-exact" % ("ok  " if good else "FAIL", k))
        ok &= good
    return ok


def part_e(nnc, tmp):
    """--save-dtype bf16|f16: the parameters rounded as torch rounds them, a file PyTorch loads."""
    try:
        import torch
        from safetensors.torch import load_file
    except ImportError:
        print("SKIP (e): torch or safetensors is not installed")
        return True
    d = os.path.join(tmp, "export")
    os.makedirs(d)
    rng = np.random.default_rng(2)
    np.save(os.path.join(d, "x.npy"), rng.standard_normal((16, 4)).astype(np.float32))
    np.save(os.path.join(d, "y.npy"), rng.standard_normal((16, 1)).astype(np.float32))
    with open(os.path.join(d, "m.nn"), "w") as f:
        f.write((SCALER_MODEL % "adam(lr = 0.01)").replace("precision = f16", "precision = f32")
                .replace("    loss_scale = dynamic(init_scale = 1024, growth_interval = 3)\n", ""))
    ok = True
    r = subprocess.run([nnc, "m.nn", "--quiet", "--save", "f32.st"], cwd=d, capture_output=True, text=True)
    ref = load_file(os.path.join(d, "f32.st"))
    for dt, tdt in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        r = subprocess.run([nnc, "m.nn", "--quiet", "--save", dt + ".st", "--save-dtype", dt], cwd=d,
                           capture_output=True, text=True)
        if r.returncode != 0:
            print("FAIL (e) --save-dtype %s: nnc exited %d: %s" % (dt, r.returncode, r.stderr))
            ok = False
            continue
        got = load_file(os.path.join(d, dt + ".st"))
        good = sorted(got) == ["W"] and got["W"].dtype == tdt and torch.equal(got["W"], ref["W"].to(tdt))
        print("%s (e) --save-dtype %s: torch loads %s, equal to the f32 checkpoint's W rounded by torch, no "
              "optimizer state" % ("ok  " if good else "FAIL", dt, {k: str(v.dtype) for k, v in got.items()}))
        ok &= good
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-model", required=True)
    ap.add_argument("--nnc", required=True)
    ap.add_argument("--cuda", action="store_true")
    ap.add_argument("--parts", default="abcdefg", help="which parts, e.g. ab")
    a = ap.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        if "a" in a.parts:
            ok &= part_a(os.path.abspath(a.run_model), tmp, a.cuda)
        if "b" in a.parts:
            ok &= part_b(os.path.abspath(a.run_model), tmp, a.cuda)
        if "c" in a.parts:
            ok &= part_c(os.path.abspath(a.nnc), tmp, a.cuda)
        if "d" in a.parts:
            ok &= part_d(os.path.abspath(a.nnc), tmp, a.cuda)
        if "e" in a.parts and not a.cuda:
            ok &= part_e(os.path.abspath(a.nnc), tmp)
        if "f" in a.parts:
            ok &= part_f(os.path.abspath(a.run_model), tmp, a.cuda)
        if "g" in a.parts:
            ok &= part_g(os.path.abspath(a.run_model), tmp, a.cuda)
    print("passed" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
