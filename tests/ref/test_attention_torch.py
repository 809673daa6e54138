"""scaled_dot_product_attention against PyTorch: the fused kernel forward and backward, the
composed fallback, and dropout's mask against tests/ref/philox.py.

Each case is a tiny .nn model: q = x @ Wq + Pq, k = z @ Wk, v = tanh(z @ Wv) from inputs x
[B, H, Tq, C] and z [B, H, Tk, C] (or without H: 3-d), then out = scaled_dot_product_attention(q,
k, v, ...) and loss = sum(tanh(out) * c).  It runs through tests/numeric/run_model
(NNC_ENTRY_EVAL for `out`, NNC_ENTRY_GRAD for the loss and grad.Wq, grad.Wk, grad.Wv, grad.Pq,
grad.c), fused in float64 and float32 (and unfused, for the first three), and every value is
compared with torch.autograd in float64 on softmax(q k^T scale + mask) @ v, the definition torch's
documentation gives (the Debian torch predates F.scaled_dot_product_attention):
|nnc - torch| <= TOL * |torch| + TOL * max(1, max|torch|), 1e-10 in float64 and 1e-5 in float32.
The sizes cross the kernels' tiles (the CPU's 32 queries by 64 keys, CUDA's 64 by 32 and 32 by
32), with Tq != Tk, a causal mask over rectangles (top-left aligned, as torch), a given scale,
v's head size other than q's, and a head size of 64.

The composed fallback (attention given an attn_mask: the ops matmul, softmax, matmul) with the
causal mask as data must agree with the fused kernel in float64 to 1e-10 (the first three).  A
head size above 128 is composed too (is_causal as a masked_fill), against torch as the others.

Dropout (dropout_p > 0, training entries only): with q = 0 and v the identity, grad.c of
sum(out * c) at batch 1 is the weights times the mask, so the mask is read off and compared bit
for bit with (u >= p) / (1 - p), u = philox.uniform(seed, FNV-1a(key, step), (bh Tq + i) Tk + j)
and the key the attention's `key=` in --emit ir (with accumulate = 2, an accumulate call's mask
from that stream mixed with its micro-batch's number, as dropout's); then a random model's
gradients against torch with that mask, and the evaluation entry without dropout.

Heads side by side (ROWS): nanoGPT's split / view / transpose around the call, which nnc
compiles (fused, on either target) as attention reading the projection's rows in place (passes/attn_layout.c; the IR must
say heads=H, and packed where the three are one projection's pieces): a packed projection split
in two orders, separate projections with Tq != Tk and v's head size other than q's, and dropout,
against torch in f64 (the first also in f32, and unfused, where the permutes run as written).

Half precision (precision = bf16 | f16, as torch.autocast): q, k, v, y and the gradients rounded
to half, the weights and dS rounded to half where they enter their products (as FlashAttention's
kernels), the kernel computing in f32: within one unit in the last place of half of the same in
f64 on the same half values, but for roundings the f32 values may take either way.

    test_attention_torch.py --run-model PATH --nnc PATH [--cuda] [-k SUBSTRING]

--cuda runs the float32 cases on the CUDA target; exit 77 (skipped) where there is none.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import philox  # noqa: E402

TOL = {"f64": 1e-10, "f32": 1e-5}
M64 = (1 << 64) - 1
rng = np.random.default_rng(27)

# name: B, H (0: 3-d tensors), Tq, Tk, C, D, Dv, the call's options, causal, scale (None: 1/sqrt(D));
# every case runs fused in f64 and f32, those of FULL also unfused and composed (CI time)
FULL = ("causal", "cross_scale", "causal_3d")
CASES = [
    ("causal", 3, 2, 37, 37, 8, 16, 16, "is_causal = true", True, None),
    ("causal_long", 1, 2, 70, 70, 6, 8, 8, "is_causal = true", True, None),
    ("cross_scale", 2, 3, 9, 13, 6, 8, 5, "scale = 0.3", False, 0.3),
    ("causal_3d", 4, 0, 20, 20, 5, 12, 12, "is_causal = true, scale = 0.2", True, 0.2),
    ("causal_tall", 2, 2, 12, 7, 5, 4, 6, "is_causal = true", True, None),
    ("causal_wide", 2, 2, 5, 9, 5, 4, 4, "dropout_p = 0, is_causal = true", True, None),
    ("head64", 2, 2, 33, 33, 16, 64, 64, "is_causal = true", True, None),
    # whole 16-query tiles and heads of whole 16-float blocks: the CPU's transposes by blocks
    # (codegen/attention.c, nnc_attn_tr16) in the forward and the backward
    ("whole_tiles", 2, 2, 32, 32, 8, 16, 32, "is_causal = true", True, None),
    # ... past NNC_ATTN_DIRECT's 256 keys: laid out by rows first, then transposed by blocks
    ("long_tiles", 1, 1, 272, 272, 4, 16, 16, "is_causal = true", True, None),
    # above ATTENTION_MAX_HEAD: composed of matmul, softmax and matmul, the causal mask a masked_fill
    ("causal_head136", 2, 2, 6, 6, 4, 136, 130, "is_causal = true", True, None),
]


def lead(B, H):
    return (B, H) if H else (B,)


def plead(H):
    return (H,) if H else ()


def dims(t):
    return "[" + ", ".join(str(d) for d in t) + "]"


def model(case, opts, mask=False):
    _, B, H, Tq, Tk, C, D, Dv = case[:8]
    h = "%d, " % H if H else ""
    lines = ["input x: f32[B, %s%d, %d]" % (h, Tq, C), "input z: f32[B, %s%d, %d]" % (h, Tk, C)]
    if mask:
        lines.append("input m: f32[B, %s%d, %d]" % ("1, " if H else "", Tq, Tk))
    lines += ["param Wq: f32[%d, %d] = zeros()" % (C, D), "param Wk: f32[%d, %d] = zeros()" % (C, D),
              "param Wv: f32[%d, %d] = zeros()" % (C, Dv), "param Pq: f32%s = zeros()" % dims(plead(H) + (Tq, D)),
              "param c: f32%s = zeros()" % dims(plead(H) + (Tq, Dv)),
              "q = x @ Wq + Pq", "k = z @ Wk", "v = tanh(z @ Wv)",
              "output out = scaled_dot_product_attention(q, k, v, %s)" % (opts + (", attn_mask = m" if mask else "")),
              "loss = sum(tanh(out) * c)",
              "train {\n    data x = npy(\"x.npy\")\n    data z = npy(\"z.npy\")\n%s    batch = %d\n    minimize loss\n}"
              % ("    data m = npy(\"m.npy\")\n" if mask else "", B)]
    return "\n".join(lines) + "\n"


def sdpa(q, k, v, causal, scale, keep=None):
    """torch's definition; keep: the dropout factors of the weights."""
    s = (q @ k.transpose(-2, -1)) * (scale if scale is not None else 1 / np.sqrt(q.shape[-1]))
    if causal:
        s = s.masked_fill(~torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(), float("-inf"))
    w = torch.softmax(s, -1)
    return (w * keep if keep is not None else w) @ v


def values(case, dt):
    _, B, H, Tq, Tk, C, D, Dv = case[:8]
    v = {"x": rng.standard_normal(lead(B, H) + (Tq, C)), "z": rng.standard_normal(lead(B, H) + (Tk, C)),
         "Wq": rng.standard_normal((C, D)) * 0.6, "Wk": rng.standard_normal((C, D)) * 0.6,
         "Wv": rng.standard_normal((C, Dv)) * 0.6, "Pq": rng.standard_normal(plead(H) + (Tq, D)) * 0.5,
         "c": rng.standard_normal(plead(H) + (Tq, Dv))}
    return {n: a.astype(dt).astype(np.float64) for n, a in v.items()}   # what nnc holds


PARAMS = ["Wq", "Wk", "Wv", "Pq", "c"]


def run(a, d, src, vals, dt, extra, inputs):
    """run_model on src: its outputs, or an error string."""
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "m.nn"), "w") as f:
        f.write(src)
    for n, v in vals.items():
        np.save(os.path.join(d, n + ".npy"), v.astype(dt))
    cmd = [a.run_model, os.path.join(d, "m.nn"), d, "--entry", "eval,grad", "--load-params",
           ",".join(os.path.join(d, n + ".npy") for n in PARAMS)] + extra
    if a.cuda:
        cmd.append("--cuda")
    r = subprocess.run(cmd + [os.path.join(d, n + ".npy") for n in inputs], capture_output=True, text=True, cwd=d)
    if r.returncode == 77:
        print("SKIP: no CUDA target or device:\n" + r.stderr)
        sys.exit(77)
    if r.returncode != 0:
        return "run_model failed:\n" + r.stderr
    return {n: np.load(os.path.join(d, n + ".npy")).astype(np.float64) for n in r.stdout.split()}


def compare(got, want, tol):
    errs = []
    for n, w in want.items():
        if n not in got:
            errs.append("%s: not written by run_model" % n)
            continue
        g = got[n].reshape(w.shape)
        bad = ~(np.abs(g - w) <= tol * np.abs(w) + tol * max(1.0, float(np.abs(w).max())))
        if bad.any():
            i = tuple(np.argwhere(bad)[0])
            errs.append("%s at %s: nnc %r want %r (%d of %d differ)" % (n, i, g[i], w[i], int(bad.sum()), bad.size))
    return errs


def torch_want(case, vals, keep=None, eval_out=True):
    """out (evaluation: no dropout), the loss and the gradients (training: with `keep`)."""
    causal, scale = case[9], case[10]
    t = {n: torch.tensor(v, dtype=torch.float64, requires_grad=n in PARAMS) for n, v in vals.items()}
    q, k, v = t["x"] @ t["Wq"] + t["Pq"], t["z"] @ t["Wk"], torch.tanh(t["z"] @ t["Wv"])
    out = sdpa(q, k, v, causal, scale, keep)
    loss = (torch.tanh(out) * t["c"]).sum()
    loss.backward()
    want = {"loss": np.array(loss.item())}
    if eval_out:
        want["out"] = sdpa(q, k, v, causal, scale).detach().numpy()
    for n in PARAMS:
        want["grad." + n] = t[n].grad.numpy()
    return want


def composed_note(a, path):
    ir = subprocess.run([a.nnc, path, "--emit", "ir"], capture_output=True, text=True).stdout
    if " attention " in ir or "composed of matmul, softmax and matmul" not in ir:
        return ["composed: the IR should hold matmul and softmax, and a note saying why"]
    return []


def check_case(a, tmp, case, precision, fused):
    dt = np.float64 if precision == "f64" else np.float32
    vals = values(case, dt)
    extra = (["--f64"] if precision == "f64" else []) + ([] if fused else ["--no-fuse"])
    d = os.path.join(tmp, "%s_%s_%d" % (case[0], precision, fused))
    got = run(a, d, model(case, case[8]), vals, dt, extra, ["x", "z"])
    if isinstance(got, str):
        return [got]
    errs = compare(got, torch_want(case, vals), TOL[precision])
    if max(case[6], case[7]) > 128 and not a.cuda:
        errs += composed_note(a, os.path.join(d, "m.nn"))
    if precision == "f64" and fused and not a.cuda and case[0] in FULL:   # the composed fallback, the mask as data
        _, B, H, Tq, Tk = case[:5]
        tri = np.tril(np.ones((Tq, Tk), bool)) if case[9] else np.ones((Tq, Tk), bool)
        vals["m"] = np.broadcast_to(np.where(tri, 0.0, -np.inf), ((B, 1) if H else (B,)) + (Tq, Tk)).copy()
        opts = re.sub(r"is_causal = true(, )?", "", case[8]).strip(", ") or "dropout_p = 0"
        src = model(case, opts, mask=True)
        comp = run(a, d + "_composed", src, vals, dt, extra, ["x", "z", "m"])
        if isinstance(comp, str):
            return errs + ["composed: " + comp]
        errs += composed_note(a, os.path.join(d + "_composed", "m.nn"))
        errs += ["composed vs fused: " + e for e in compare(comp, got, TOL["f64"])]
    return errs


def stream(key, step):
    s = ((philox.FNV_OFFSET ^ key) * philox.FNV_PRIME) & M64
    return ((s ^ step) * philox.FNV_PRIME) & M64


def attention_key(nnc, path, dtype="f32"):
    """The key of the one attention with dropout: under mixed precision the IR shows it before
    autocast too (f32, another node number); the bf16 one runs."""
    ir = subprocess.run([nnc, path, "--emit", "ir"], capture_output=True, text=True).stdout
    keys = sorted(set(re.findall(r"= attention .*dropout=\S+ key=(\d+)\s*: %s\[" % dtype, ir)))
    return int(keys[0]) if len(keys) == 1 else None


def philox_keep(seed, key, p, n, micro=None):
    st = stream(key, 0)   # the grad entry runs at step 0 after init
    if micro is not None:   # an accumulate call: its micro-batch's number mixed in, as dropout's
        st = ((st ^ micro) * philox.FNV_PRIME) & M64
    u = np.array([philox.uniform(seed, st, i) for i in range(n)])
    return np.where(u >= p, 1.0 / (1.0 - p), 0.0)


def check_mask(a, tmp, p, causal, seed, accumulate=False, precision=None, T=16):
    """q = 0 and v = I: out = weights times the mask, read through grad.c at batch 1.  accumulate:
    with accumulate = 2, an accumulate call (micro-batch 0 of the group at step 0) and then grad,
    which gives the group's mean of the two: the two masks' mean, the first from the stream mixed
    with the micro-batch's number, as dropout's.  precision = bf16: q, k and v reach the kernel in
    bf16 (on CUDA, the tensor-core kernel) and out is rounded to bf16, so the kept weights' scale
    holds to bf16's 2^-8."""
    H = 2
    src = ("input qi: f32[B, %d, %d, 4]\ninput ki: f32[B, %d, %d, 4]\ninput vi: f32[B, %d, %d, %d]\n"
           "param c: f32[%d, %d, %d] = normal(0, 1)\n"
           "loss = sum(scaled_dot_product_attention(qi, ki, vi, dropout_p = %s, is_causal = %s) * c)\n"
           "train {\n    data qi = npy(\"qi.npy\")\n    data ki = npy(\"ki.npy\")\n    data vi = npy(\"vi.npy\")\n"
           "    batch = 1\n%s%s    minimize loss\n}\n"
           % (H, T, H, T, H, T, T, H, T, T, p, "true" if causal else "false", "    accumulate = 2\n" if accumulate else "",
              "    precision = %s\n    loss_scale = none\n" % precision if precision else ""))
    scale_tol = 2.0 ** -8 if precision == "bf16" else 1e-5
    d = os.path.join(tmp, "mask_%s_%d%s%s" % (p, causal, "_acc" if accumulate else "", precision or ""))
    os.makedirs(d)
    with open(os.path.join(d, "m.nn"), "w") as f:
        f.write(src)
    ins = {"qi": np.zeros((1, H, T, 4)), "ki": rng.standard_normal((1, H, T, 4)),
           "vi": np.broadcast_to(np.eye(T), (1, H, T, T)).copy()}
    for n, v in ins.items():
        np.save(os.path.join(d, n + ".npy"), v.astype(np.float32))
    cmd = [a.run_model, os.path.join(d, "m.nn"), d, "--entry", "accumulate,grad" if accumulate else "grad",
           "--seed", str(seed)]
    if a.cuda:
        cmd.append("--cuda")
    r = subprocess.run(cmd + [os.path.join(d, n + ".npy") for n in ins], capture_output=True, text=True, cwd=d)
    if r.returncode:
        return ["run_model failed:\n" + r.stderr]
    key = attention_key(a.nnc, os.path.join(d, "m.nn"), precision or "f32")
    if key is None:
        return ["expected one attention with dropout in the IR"]
    got = np.load(os.path.join(d, "grad.c.npy")).astype(np.float64).reshape(H, T, T)
    n = np.arange(1, T + 1)[:, None] if causal else T
    seen = np.tril(np.ones((T, T), bool)) if causal else np.ones((T, T), bool)
    want = philox_keep(seed, key, p, H * T * T).reshape(H, T, T)
    mask = got * n
    errs = []
    if accumulate:
        first = philox_keep(seed, key, p, H * T * T, micro=0).reshape(H, T, T)
        if np.array_equal(first, want):
            errs.append("the reference's two masks are equal: the test cannot tell them apart")
        diff = np.abs(mask - (first + want) / 2)[..., seen].max()
        if diff > 1e-5 * want.max():
            errs.append("grad.c after an accumulate call is not the two masks' mean: max diff %g" % diff)
        return errs
    if not np.array_equal((mask != 0) & seen, (want != 0) & seen):
        errs.append("mask differs from Philox at %d of %d weights" % (int((((mask != 0) != (want != 0)) & seen).sum()),
                                                                      int(seen.sum()) * H))
    elif np.abs(mask - want)[..., seen].max() > scale_tol * want.max():
        errs.append("kept weights not scaled by 1 / (1 - p): max diff %g" % np.abs(mask - want)[..., seen].max())
    elif np.any(got[..., ~seen] != 0):
        errs.append("a masked weight is not zero")
    frac = float((want[..., seen] == 0).mean())
    if abs(float((mask[..., seen] == 0).mean()) - frac) > 0 or abs(frac - p) > 0.08:
        errs.append("dropped %.3f of the weights, p = %s" % (frac, p))
    return errs


def check_dropout_grads(a, tmp, precision):
    case = ("dropout", 2, 2, 11, 11, 5, 6, 6, "dropout_p = 0.25, is_causal = true", True, None)
    dt = np.float64 if precision == "f64" else np.float32
    vals = values(case, dt)
    d = os.path.join(tmp, "dropout_%s" % precision)
    seed = 1234
    got = run(a, d, model(case, case[8]), vals, dt, (["--f64"] if precision == "f64" else []) + ["--seed", str(seed)],
              ["x", "z"])
    if isinstance(got, str):
        return [got]
    key = attention_key(a.nnc, os.path.join(d, "m.nn"))
    if key is None:
        return ["expected one attention with dropout in the IR"]
    keep = torch.tensor(philox_keep(seed, key, 0.25, 2 * 2 * 11 * 11).reshape(2, 2, 11, 11))
    return compare(got, torch_want(case, vals, keep), TOL[precision])


def check_half(a, tmp, precision, H=2, T=9, D=4, with_grads=True, p=0.0, Tk=None):
    """Under precision = bf16 | f16 (torch.autocast): q, k and v rounded to half, the weights
    computed in f32 and rounded to half for their product with v (FlashAttention's numerics),
    which sums in f32, y rounded to half; dS rounded to half alike for dq and dk; the gradients
    from dy = half(c) computed in f32 and rounded to half before they go back through the casts,
    delta from the
    half y the forward stored (as FlashAttention-2's backward over half outputs; the reference
    reads nnc's, through grad.c).  Against the
    same in f64 on the same half values, then rounded: within one unit in the last place.  Over
    several tiles of keys (T 70, 140) the gradients' f32 sums drift from the f64 reference by
    more than that on either target (a row whose exact dq is 0 comes out 1e-6): there
    (with_grads = "bound") a gradient may also be off by the f32 error of its sums, 2 T 2^-24
    times the sum of its terms' magnitudes.  p > 0: with dropout, the grad entry alone (the
    gradients, through the mask drawn again in the backward), against the same with Philox's mask.
    Tk: keys and values of another length than the queries (causal: row i sees keys j <= i)."""
    half = torch.bfloat16 if precision == "bf16" else torch.float16
    ulp = 2.0 ** (-7 if precision == "bf16" else -10)   # of 1: 7 and 10 stored mantissa bits
    Tk = Tk or T
    src = ("input xq: f32[B, %d, %d, %d]\ninput xk: f32[B, %d, %d, %d]\ninput xv: f32[B, %d, %d, %d]\n" % ((H, T, D) + (H, Tk, D) * 2) +
           "".join("param P%s: f32[%d, %d, %d] = zeros()\n" % (n, H, T if n == "q" else Tk, D) for n in "qkv") +
           "param c: f32[%d, %d, %d] = zeros()\n" % (H, T, D) +
           "output out = scaled_dot_product_attention(xq + Pq, xk + Pk, xv + Pv, is_causal = true%s)\n"
           "loss = sum(out * c)\ntrain {\n    data xq = npy(\"xq.npy\")\n    data xk = npy(\"xk.npy\")\n"
           "    data xv = npy(\"xv.npy\")\n    batch = 1\n    precision = %s\n    loss_scale = none\n"
           "    minimize loss\n}\n" % (", dropout_p = %s" % p if p else "", precision))
    d = os.path.join(tmp, "half_%s_%d_%d_%d_%s_%d" % (precision, H, T, D, p, Tk))
    os.makedirs(d)
    with open(os.path.join(d, "m.nn"), "w") as f:
        f.write(src)
    vals = {n: rng.standard_normal((1, H, T if n == "xq" else Tk, D)).astype(np.float32) for n in ("xq", "xk", "xv")}
    vals.update({n: rng.standard_normal((H, Tk if n in ("Pk", "Pv") else T, D)).astype(np.float32)
                 for n in ("Pq", "Pk", "Pv", "c")})
    for n, v in vals.items():
        np.save(os.path.join(d, n + ".npy"), v)
    seed = 77
    cmd = [a.run_model, os.path.join(d, "m.nn"), d, "--entry", "grad" if p else "eval,grad", "--seed", str(seed),
           "--load-params", ",".join(os.path.join(d, n + ".npy") for n in ("Pq", "Pk", "Pv", "c"))]
    if a.cuda:
        cmd.append("--cuda")
    r = subprocess.run(cmd + [os.path.join(d, n + ".npy") for n in ("xq", "xk", "xv")], capture_output=True,
                       text=True, cwd=d)
    if r.returncode:
        return ["run_model failed:\n" + r.stderr]
    got = {n: np.load(os.path.join(d, n + ".npy")).astype(np.float64) for n in r.stdout.split()}

    def rnd(t):
        return t.to(half).to(torch.float64)
    q, k, v = [rnd(torch.tensor(vals["x" + n] + vals["P" + n]).double()) for n in "qkv"]
    dy = rnd(torch.tensor(vals["c"]).double()).expand(1, H, T, D)
    sc = 1 / np.sqrt(D)
    s = (q @ k.transpose(-2, -1) * sc).masked_fill(~torch.ones(T, Tk, dtype=torch.bool).tril(), float("-inf"))
    P = torch.softmax(s, -1)
    M = torch.ones(1, H, T, Tk, dtype=torch.float64)
    if p:
        key = attention_key(a.nnc, os.path.join(d, "m.nn"), precision)
        if key is None:
            return ["expected one attention with dropout in the IR"]
        M = torch.tensor(philox_keep(seed, key, p, H * T * Tk).reshape(1, H, T, Tk))
    # the weights and dS enter their products rounded to half (as FlashAttention's and torch's
    # kernels do).  The forward rounds exp(s - m) with m its running maximum: a row's maximum
    # where its keys fit one tile of every kernel (Tk <= 32), else some tile's (tiles "bound")
    m = s.max(-1, keepdim=True).values
    E = torch.exp(s - m)
    y = rnd((rnd(E * M) @ v) / E.sum(-1, keepdim=True))   # what the forward stores
    # delta reads the y nnc stored (grad.c, as loss = sum(out * c)): its f32 sums may round some
    # element of y to the other bf16 neighbour of the exact value, and delta = sum(dy * y) then
    # moves by a bf16 ulp of that term, far beyond f32's error, on either target
    ys = torch.tensor(got["grad.c"]).reshape(1, H, T, D) if "grad.c" in got else y
    delta = (dy * ys).sum(-1, keepdim=True)
    dP = dy @ v.transpose(-2, -1)
    dS = rnd(P * (dP * M - delta) * sc)
    W = rnd(P * M)
    grads = {"q": dS @ k, "k": dS.transpose(-2, -1) @ q, "v": W.transpose(-2, -1) @ dy}
    want = {} if p else {"out": y.numpy()}
    if with_grads:
        want.update({"grad.P" + n: rnd(grads[n]).numpy()[0] for n in "qkv"})
    # with_grads = "bound": each gradient also within the error of its f32 sums, T or Tk terms of
    # magnitudes mag (the same products of absolute values): 2 max(T, Tk) 2^-24 mag
    dSa = P * ((dy.abs() @ v.abs().transpose(-2, -1)) * M + delta.abs())
    mag = {"grad.Pq": dSa @ k.abs() * sc, "grad.Pk": dSa.transpose(-2, -1) @ q.abs() * sc,
           "grad.Pv": (P * M).transpose(-2, -1) @ dy.abs()}
    # a weight or dS the kernel computes in f32 within err of the exact value x rounds to either
    # half neighbour when x lies within err of their midpoint: such terms may move their output
    # by the neighbours' spacing times their other factor (amb).  err: f32's sums of D products
    # (2 D 2^-24 their magnitudes), lse's and delta's, exp's few ulp
    u32 = 2.0 ** -24

    def spacing(x):
        sp = torch.ldexp(torch.ones_like(x), torch.frexp(x)[1] - 1) * ulp
        return sp.clamp(min=2.0 ** -24) if precision == "f16" else sp

    def amb(x, err):
        sp = spacing(x)
        return torch.where((sp / 2 - (x - rnd(x)).abs()).abs() <= err, sp, torch.zeros_like(x))
    e_s = 2 * D * u32 * (q.abs() @ k.abs().transpose(-2, -1)) * sc
    e_P = P * (2 * e_s + u32 * (s.masked_fill(P == 0, 0).abs().max(-1, keepdim=True).values + 2 * Tk + 8))
    inner = dP * M - delta
    e_in = 2 * D * u32 * ((dy.abs() @ v.abs().transpose(-2, -1)) * M + (dy.abs() * ys.abs()).sum(-1, keepdim=True)) \
        + 4 * u32 * (dP * M).abs()
    aS, aW = amb(P * inner * sc, (e_P * inner.abs() + P * e_in) * sc + 4 * u32 * (P * inner * sc).abs()), amb(P * M, e_P * M)
    slack_amb = {"grad.Pq": aS @ k.abs(), "grad.Pk": aS.transpose(-2, -1) @ q.abs(), "grad.Pv": aW.transpose(-2, -1) @ dy.abs(),
                 "out": amb(E * M, E * M * (2 * e_s + 8 * u32)) @ v.abs() / E.sum(-1, keepdim=True)}
    if Tk > 32:   # weights rounded against another tile's maximum: up to half a spacing each
        slack_amb["out"] = ulp * (P * M) @ v.abs()
    errs = []
    if "out" in want and not np.array_equal(got["out"], rnd(torch.tensor(got["out"])).numpy()):
        errs.append("out holds values that are not %s: the attention did not give half" % precision)
    for n, w in want.items():
        g = got[n].reshape(w.shape)
        slack = 2 * max(T, Tk) * 2.0 ** -24 * mag[n].numpy()[0] if n in mag and with_grads == "bound" else 0
        slack = slack + slack_amb[n].numpy().reshape(w.shape)
        bad = ~(np.abs(g - w) <= ulp * np.abs(w) + 1e-6 + slack)
        if bad.any():
            i = tuple(np.argwhere(bad)[0])
            errs.append("%s at %s: nnc %r want %r (%d of %d more than one ulp apart)" % (n, i, g[i], w[i], int(bad.sum()),
                                                                                           bad.size))
    return errs


# Heads side by side in a projection's rows, as nanoGPT writes attention (passes/attn_layout.c
# reads them there on the CPU): name, B, Tq, Tk, C, H, D, Dv, split order (packed: one projection
# split into the pieces named, else q from x and k, v from z, each its own), the call's options,
# causal, scale, dropout.
ROWS = [
    ("rows_packed", 2, 37, 37, 6, 3, 8, 8, "qkv", "is_causal = true", True, None, 0),
    ("rows_order", 2, 9, 9, 5, 2, 4, 4, "vqk", "scale = 0.3", False, 0.3, 0),
    ("rows_cross", 2, 12, 7, 5, 2, 4, 6, "", "is_causal = true", True, None, 0),
    ("rows_dropout", 1, 11, 11, 5, 2, 6, 6, "kqv", "dropout_p = 0.25, is_causal = true", True, None, 0.25),
    ("rows_tiles", 2, 48, 48, 6, 2, 16, 16, "qkv", "is_causal = true", True, None, 0),
    ("rows_long", 1, 272, 272, 4, 1, 16, 16, "qkv", "is_causal = true", True, None, 0),
]


def rows_model(case):
    _, B, Tq, Tk, C, H, D, Dv, order, opts = case[:10]
    lines = ["input x: f32[B, %d, %d]" % (Tq, C)]
    if order:
        lines += ["param W: f32[%d, %d] = zeros()" % (C, 3 * H * D), "param P: f32[%d] = zeros()" % (3 * H * D),
                  "%s, %s, %s = (x @ W + P).split(%d, dim = 2)" % (tuple(order) + (H * D,))]
    else:
        lines += ["input z: f32[B, %d, %d]" % (Tk, C)]
        lines += ["param W%s: f32[%d, %d] = zeros()" % (n, C, H * w) for n, w in (("q", D), ("k", D), ("v", Dv))]
        lines += ["param P: f32[%d] = zeros()" % (H * D), "q = x @ Wq + P", "k = z @ Wk", "v = tanh(z @ Wv)"]
    for n, T, w in (("q", Tq, D), ("k", Tk, D), ("v", Tk, Dv)):
        lines.append("%s = %s.view(B, %d, %d, %d).transpose(1, 2)" % (n, n, T, H, w))
    lines += ["param c: f32[%d, %d] = zeros()" % (Tq, H * Dv),
              "att = scaled_dot_product_attention(q, k, v, %s)" % opts,
              "output out = att.transpose(1, 2).contiguous().view(B, %d, %d)" % (Tq, H * Dv),
              "loss = sum(tanh(out) * c)",
              "train {\n    data x = npy(\"x.npy\")\n%s    batch = %d\n    minimize loss\n}"
              % ("" if order else "    data z = npy(\"z.npy\")\n", B)]
    return "\n".join(lines) + "\n"


def rows_params(case):
    return ["W", "P", "c"] if case[8] else ["Wq", "Wk", "Wv", "P", "c"]


def rows_torch(case, vals, keep=None):
    _, B, Tq, Tk, C, H, D, Dv, order = case[:9]
    t = {n: torch.tensor(v, dtype=torch.float64, requires_grad=n in rows_params(case)) for n, v in vals.items()}
    if order:
        parts = dict(zip(order, (t["x"] @ t["W"] + t["P"]).split(H * D, dim=2)))
        q, k, v = parts["q"], parts["k"], parts["v"]
    else:
        q, k, v = t["x"] @ t["Wq"] + t["P"], t["z"] @ t["Wk"], torch.tanh(t["z"] @ t["Wv"])
    q, k, v = (a.view(B, T, H, w).transpose(1, 2) for a, T, w in ((q, Tq, D), (k, Tk, D), (v, Tk, Dv)))
    want = {}
    for name, kp in (("loss", keep), ("out", None)):
        out = sdpa(q, k, v, case[10], case[11], kp).transpose(1, 2).reshape(B, Tq, H * Dv)
        if name == "out":
            want["out"] = out.detach().numpy()
            continue
        loss = (torch.tanh(out) * t["c"]).sum()
        loss.backward()
        want["loss"] = np.array(loss.item())
    for n in rows_params(case):
        want["grad." + n] = t[n].grad.numpy()
    return want


def check_rows(a, tmp, case, precision, fused):
    """The model fused (the heads read in place; the IR must say so) and unfused (permutes and
    slices as written), against torch on the same weights."""
    _, B, Tq, Tk, C, H, D, Dv, order = case[:9]
    dt = np.float64 if precision == "f64" else np.float32
    vals = {"x": rng.standard_normal((B, Tq, C)), "c": rng.standard_normal((Tq, H * Dv))}
    if order:
        vals.update(W=rng.standard_normal((C, 3 * H * D)) * 0.6, P=rng.standard_normal(3 * H * D) * 0.5)
    else:
        vals.update(z=rng.standard_normal((B, Tk, C)), Wq=rng.standard_normal((C, H * D)) * 0.6,
                    Wk=rng.standard_normal((C, H * D)) * 0.6, Wv=rng.standard_normal((C, H * Dv)) * 0.6,
                    P=rng.standard_normal(H * D) * 0.5)
    vals = {n: v.astype(dt).astype(np.float64) for n, v in vals.items()}
    seed = 1234
    extra = (["--f64"] if precision == "f64" else []) + ([] if fused else ["--no-fuse"]) + ["--seed", str(seed)]
    d = os.path.join(tmp, "%s_%s_%d" % (case[0], precision, fused))
    src = rows_model(case)
    global PARAMS
    saved, PARAMS = PARAMS, rows_params(case)
    try:
        got = run(a, d, src, vals, dt, extra, ["x"] if order else ["x", "z"])
    finally:
        PARAMS = saved
    if isinstance(got, str):
        return [got]
    errs = []
    ir = subprocess.run([a.nnc, os.path.join(d, "m.nn"), "--emit", "ir"] + ([] if fused else ["--no-fuse"]) +
                        (["--target", "cuda"] if a.cuda else []), capture_output=True, text=True).stdout
    laid = re.search(r"= attention .* heads=%d%s cols" % (H, " packed" if order else ""), ir)
    if bool(laid) != fused:
        errs.append("the IR %s the heads in place:\n%s" % ("does not read" if not laid else "reads",
                                                          "\n".join(l for l in ir.splitlines() if "attention" in l)))
    keep = None
    if case[12]:
        key = attention_key(a.nnc, os.path.join(d, "m.nn"))
        if key is None:
            return errs + ["expected one attention with dropout in the IR"]
        keep = torch.tensor(philox_keep(seed, key, case[12], B * H * Tq * Tk).reshape(B, H, Tq, Tk))
    return errs + compare(got, rows_torch(case, vals, keep), TOL[precision])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-model", required=True, type=os.path.abspath)   # the tests run it from temporary folders
    ap.add_argument("--nnc", required=True, type=os.path.abspath)
    ap.add_argument("--cuda", action="store_true")
    ap.add_argument("-k", default="")
    a = ap.parse_args()
    passed = failed = 0

    def report(name, errs):
        nonlocal passed, failed
        print("%s %s%s" % ("FAIL" if errs else "ok  ", name, "".join("\n    " + e for e in errs)))
        passed += not errs
        failed += bool(errs)

    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            if a.k not in case[0]:
                continue
            for precision in ("f32",) if a.cuda else ("f64", "f32"):
                for fused in (True, False) if precision == "f64" and case[0] in FULL else (True,):
                    report("%-12s %s %s" % (case[0], precision, "fused" if fused else "unfused"),
                           check_case(a, tmp, case, precision, fused))
        for case in ROWS:   # f64 fused each; f32 and unfused (the permutes as written) the first only (CI
            # time), and f32 for rows_tiles and rows_long (the CPU's whole tiles read in place, and
            # past NNC_ATTN_DIRECT keys laid out first, then transposed by blocks: f32's paths)
            if a.k not in case[0] or (a.cuda and case is not ROWS[0] and case[0] != "rows_cross"):
                continue
            both = case is ROWS[0] or case[0] in ("rows_tiles", "rows_long")
            for precision in ("f32",) if a.cuda else ("f64", "f32") if both else ("f64",):
                for fused in (True, False) if precision == "f64" and case is ROWS[0] else (True,):
                    report("%-12s %s %s" % (case[0], precision, "fused" if fused else "unfused"),
                           check_rows(a, tmp, case, precision, fused))
        if a.k in "dropout":
            for p, causal, seed in ((0.3, False, 7), (0.5, True, 123456789012345)):
                report("dropout mask p=%s causal=%d" % (p, causal), check_mask(a, tmp, p, causal, seed))
            report("dropout mask accumulate", check_mask(a, tmp, 0.3, True, 99, accumulate=True))
            if a.cuda:   # the tensor-core kernel's mask over two tiles of keys
                report("dropout mask bf16 T=80", check_mask(a, tmp, 0.3, True, 5, precision="bf16", T=80))
            for precision in ("f32",) if a.cuda else ("f64", "f32"):
                report("dropout gradients %s" % precision, check_dropout_grads(a, tmp, precision))
        if a.k in "half":
            for precision in ("bf16", "f16"):
                report("half %s" % precision, check_half(a, tmp, precision))
            # the tensor-core kernels (CUDA): their tiles of 64 and 32 and their padding, a head
            # size of 128, dropout, queries and keys of other lengths across tiles both ways (the
            # CPU's bf16 routines are its f32 ones, whose tiles the f32 cases cross: CI's time)
            if a.cuda:
                report("half bf16 H=1 T=100 D=128", check_half(a, tmp, "bf16", 1, 100, 128, with_grads="bound"))
                report("half bf16 H=2 T=70 D=24 dropout", check_half(a, tmp, "bf16", 2, 70, 24, with_grads="bound", p=0.2))
                # tiles of 64 by 64 that every pair sees (the kernels skip their masks): T >= 128
                report("half bf16 H=1 T=150 D=16 dropout", check_half(a, tmp, "bf16", 1, 150, 16, with_grads="bound", p=0.1))
                report("half bf16 H=1 T=150 D=16", check_half(a, tmp, "bf16", 1, 150, 16, with_grads="bound"))
                for T, Tk in ((70, 100), (100, 40)):
                    report("half bf16 H=2 T=%d Tk=%d D=16" % (T, Tk), check_half(a, tmp, "bf16", 2, T, 16,
                                                                                  with_grads="bound", Tk=Tk))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
