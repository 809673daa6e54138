"""Forward ops of a float32 nnc model against NumPy in float64.

For each op a tiny .nn model with `output NAME = expr` statements is written to a temporary
directory and run through tests/numeric/run_model (NNC_ENTRY_EVAL), fused and unfused; every
output is compared with NumPy in float64:  |nnc - ref| <= RTOL * |ref| + ATOL * max(1, max|ref|).
Numerically nasty inputs (logits of +-1000, sigmoid/tanh/exp at +-80) check that softmax,
log_softmax, cross_entropy and friends are computed stably.

    test_ops_numpy.py --run-model PATH [-k SUBSTRING] [-v] [--mode fused|unfused]   (default: both)
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

RTOL = 1e-5
ATOL = 1e-6

rng = np.random.default_rng(1234)


def randn(*shape):
    return rng.standard_normal(shape)


def softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def log_softmax(z):
    m = z.max(-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))


def cross_entropy(z, y):
    return -log_softmax(z)[np.arange(len(y)), y].mean()


def lse(z, axis, keepdims=False):
    m = z.max(axis, keepdims=True)
    r = np.log(np.exp(z - m).sum(axis, keepdims=True)) + m
    return r if keepdims else r.squeeze(axis)


def sigmoid(z):
    return 0.5 * (1 + np.tanh(0.5 * z))


B = 6
X = randn(B, 5)
BIG = np.array([[1000.0, -1000.0, 0.0, 999.0, -999.0],
                [-1000.0, -1000.0, -1000.0, -1000.0, -999.0],
                [1000.0, 1000.0, 1000.0, 1000.0, 1000.0],
                [88.0, -88.0, 80.0, -80.0, 0.5],
                [-1000.0, 1000.0, 3.0, -3.0, 0.0],
                [0.0, 1e-3, -1e-3, 2.0, -2.0]])
LABELS = np.array([0, 4, 2, 1, 1, 3], dtype=np.int32)
POS = np.abs(randn(B, 5)) + 0.1
W = randn(5, 3)
V34 = randn(3, 4)
V5 = randn(5)
C1 = randn(B, 1)

X3 = randn(B, 4, 5)
Z3 = randn(B, 8, 16)
V24 = randn(2, 4)
P1624 = randn(16, 24)

# (name, declarations + output statements, inputs in declaration order, params, expected outputs)
TOK = np.array([[0, 6, 2], [5, 5, 1], [3, 0, 0], [6, 4, 2], [1, 1, 1], [2, 3, 4]], dtype=np.int32)
EMB = randn(7, 4)
CASES = [
    ("embedding", "input t: i32[B, 3]\ninput y: i32[B]\nparam E: f32[7, 4] = zeros()\n"
     "output a = embedding(t, E)\noutput b = embedding(y, E) * 2\noutput c = sum(embedding(t, E), axis = 1)",
     [TOK, LABELS], [EMB], lambda: {"a": EMB[TOK], "b": 2 * EMB[LABELS], "c": EMB[TOK].sum(1)}),
    ("concat_slice", "input x: f32[B, 5]\nparam W: f32[5, 3] = zeros()\n"
     "output a = concat((x, x @ W), axis = 1)\noutput b = slice(x, 1, 1, 5, 2)\noutput c = narrow(x, 1, 2, 3)\n"
     "output d = cat((x, x * 2, x, x + 1, x, x), axis = -1)\noutput e = slice(x, -1, -3)\n"
     "output f = concat((reshape(x, B, 5, 1), reshape(x * 3, B, 5, 1)), axis = 1)",
     [X], [W], lambda: {"a": np.concatenate([X, X @ W], 1), "b": X[:, 1:5:2], "c": X[:, 2:5],
                        "d": np.concatenate([X, X * 2, X, X + 1, X, X], -1), "e": X[:, -3:],
                        "f": np.concatenate([X[:, :, None], 3 * X[:, :, None]], 1)}),
    # a transformer's tensor ops: the batch axis merged, permutes, a split, masks and constants
    ("tensor_ops", "input x: f32[B, 4, 5]\nparam W: f32[5, 3] = zeros()\n"
     "output a = reshape(x, -1, 5) @ W\noutput b = permute(x, 2, 0, 1)\noutput c = transpose(x, 0, 1)\n"
     "p, q = split(x, (2, 3), 2)\noutput d = p * 2\noutput e = q + 1\noutput k = flatten(x, 0, 1)\n"
     "output f = softmax(masked_fill(x, tril(ones(4, 5), 1) == 0, -inf))\noutput g = tril(x, -1) + triu(x, 2) * 3\n"
     "output h = where(x < 0, arange(5), masked_fill(x, x > 0.5, -7))\noutput l = (x >= 0) + (x != x) + (x == x) * 2",
     [X3], [W], lambda: {"a": X3.reshape(-1, 5) @ W, "b": X3.transpose(2, 0, 1), "c": X3.transpose(1, 0, 2),
                         "d": X3[..., :2] * 2, "e": X3[..., 2:] + 1, "k": X3.reshape(-1, 5),
                         "f": softmax(np.where(np.tril(np.ones((4, 5)), 1) == 0, -np.inf, X3)),
                         "g": np.tril(X3, -1) + np.triu(X3, 2) * 3,
                         "h": np.where(X3 < 0, np.arange(5.0), np.where(X3 > 0.5, -7.0, X3)),
                         "l": (X3 >= 0) + 2.0}),
    ("matmul", "input x: f32[B, 5]\nparam W: f32[5, 3] = zeros()\noutput y = x @ W\noutput z = matmul(x, W)",
     [X], [W], lambda: {"y": X @ W, "z": X @ W}),
    ("matmul_transpose", "input x: f32[B, 5]\nparam W: f32[5, 3] = zeros()\nparam V: f32[3, 4] = zeros()\n"
     "output y = transpose(x @ W) @ (x @ W)\noutput z = x @ transpose(transpose(W))\noutput t = transpose(x)\n"
     "output u = transpose(V) @ transpose(W)\noutput v = (x @ W) @ V",
     [X], [W, V34], None),
    # batched products as torch.matmul: a shared weight, a shared left operand, both batched
    # (with transposes, folded or not), rank 4; X3 is large enough for BLAS
    ("matmul_batched", "input x: f32[B, 4, 5]\ninput z: f32[B, 8, 16]\nparam W: f32[5, 3] = zeros()\n"
     "param V: f32[2, 4] = zeros()\nparam P: f32[16, 24] = zeros()\n"
     "output a = x @ W\noutput b = V @ x\noutput c = x @ transpose(x)\noutput d = transpose(x) @ x\n"
     "output e = reshape(x, B, 2, 2, 5) @ transpose(reshape(x, B, 2, 2, 5))\noutput f = z @ P\n"
     "output g = (z @ P).mT @ (z @ P)\noutput h = transpose(z @ P)",
     [X3, Z3], [W, V24, P1624], None),
    ("add_sub_bcast", "input x: f32[B, 5]\ninput c: f32[B, 1]\nparam v: f32[5] = zeros()\n"
     "output a = x + v\noutput b = v - x\noutput d = x - c\noutput e = c + x\noutput f = x + 2.5\noutput g = 1 - x\noutput h = x + x",
     [X, C1], [V5], lambda: {"a": X + V5, "b": V5 - X, "d": X - C1, "e": C1 + X, "f": X + 2.5, "g": 1 - X, "h": 2 * X}),
    ("mul_div_bcast", "input x: f32[B, 5]\ninput c: f32[B, 1]\nparam v: f32[5] = zeros()\n"
     "output a = x * v\noutput b = v / (x * x + 1)\noutput d = x / c\noutput e = c * x\noutput f = x * 3\noutput g = 2 / (x * x + 0.5)\noutput h = x / 4",
     [X, C1], [V5], lambda: {"a": X * V5, "b": V5 / (X * X + 1), "d": X / C1, "e": C1 * X, "f": 3 * X,
                             "g": 2 / (X * X + 0.5), "h": X / 4}),
    ("neg", "input x: f32[B, 5]\noutput a = -x\noutput b = neg(x)\noutput c = -(-x)", [X], [], lambda: {"a": -X, "b": -X, "c": X}),
    ("relu", "input x: f32[B, 5]\noutput a = relu(x)\noutput b = relu(-x)", [X], [], lambda: {"a": np.maximum(X, 0), "b": np.maximum(-X, 0)}),
    ("abs", "input x: f32[B, 5]\noutput a = abs(x)\noutput b = abs(-x * 3)", [X], [], lambda: {"a": np.abs(X), "b": np.abs(-3 * X)}),
    ("leaky_relu", "input x: f32[B, 5]\noutput a = leaky_relu(x)\noutput b = leaky_relu(x, negative_slope = 0.2)\n"
     "output c = leaky_relu(-x, 1.5)", [X], [],
     lambda: {"a": np.where(X > 0, X, X * np.float32(0.01)), "b": np.where(X > 0, X, X * np.float32(0.2)),
              "c": np.where(-X > 0, -X, -X * np.float32(1.5))}),
    ("sigmoid", "input x: f32[B, 5]\ninput z: f32[B, 5]\noutput a = sigmoid(x)\noutput b = sigmoid(z)", [X, BIG], [],
     lambda: {"a": sigmoid(X), "b": sigmoid(BIG)}),
    ("tanh", "input x: f32[B, 5]\ninput z: f32[B, 5]\noutput a = tanh(x)\noutput b = tanh(z)", [X, BIG], [],
     lambda: {"a": np.tanh(X), "b": np.tanh(BIG)}),
    ("exp", "input x: f32[B, 5]\noutput a = exp(x)\noutput b = exp(x * 10)", [X], [], lambda: {"a": np.exp(X), "b": np.exp(10 * X)}),
    ("log", "input x: f32[B, 5]\noutput a = log(x)\noutput b = log(x * 1000)", [POS], [], lambda: {"a": np.log(POS), "b": np.log(1000 * POS)}),
    ("sqrt", "input x: f32[B, 5]\noutput a = sqrt(x)", [POS], [], lambda: {"a": np.sqrt(POS)}),
    ("pow", "input x: f32[B, 5]\ninput p: f32[B, 5]\noutput a = x ** 2\noutput b = x ** 3\noutput c = p ** 0.5\noutput d = pow(p, 1.5)\noutput e = 2 ** 3 + x",
     [X, POS], [], lambda: {"a": X ** 2, "b": X ** 3, "c": POS ** 0.5, "d": POS ** 1.5, "e": X + 8}),
    ("sum", "input x: f32[B, 5]\noutput a = sum(x)\noutput b = sum(x, axis = 0)\noutput c = sum(x, axis = 1)\n"
     "output d = sum(x, axis = -1, keepdim = 1)\noutput e = sum(x, axis = 0, keepdim = 1)\noutput f = sum(x * x)",
     [X], [], lambda: {"a": X.sum(), "b": X.sum(0), "c": X.sum(1), "d": X.sum(1, keepdims=True), "e": X.sum(0, keepdims=True),
                       "f": (X * X).sum()}),
    ("mean", "input x: f32[B, 5]\noutput a = mean(x)\noutput b = mean(x, axis = 0)\noutput c = mean(x, axis = 1)\n"
     "output d = mean(x, axis = 1, keepdim = 1)\noutput e = x - mean(x, axis = 0, keepdim = 1)",
     [X], [], lambda: {"a": X.mean(), "b": X.mean(0), "c": X.mean(1), "d": X.mean(1, keepdims=True), "e": X - X.mean(0, keepdims=True)}),
    ("max", "input x: f32[B, 5]\ninput z: f32[B, 5]\noutput a = max(x)\noutput b = max(x, axis = 0)\noutput c = max(x, axis = 1)\n"
     "output d = max(z, axis = 1, keepdim = 1)\noutput e = -max(-z)\noutput f = x - max(x, axis = 0, keepdim = 1)",
     [X, BIG], [], lambda: {"a": X.max(), "b": X.max(0), "c": X.max(1), "d": BIG.max(1, keepdims=True), "e": BIG.min(),
                            "f": X - X.max(0, keepdims=True)}),
    ("reduce_3d", "input x: f32[B, 6]\noutput r = reshape(x, B, 2, 3)\noutput a = sum(reshape(x, B, 2, 3), axis = 1)\n"
     "output b = max(reshape(x, B, 2, 3), axis = 2)\noutput c = mean(reshape(x, B, 2, 3), axis = 0)\n"
     "output d = sum(reshape(x, B, 2, 3), axis = 1, keepdim = 1)\noutput e = reshape(reshape(x, B, 3, 2), B, 6)",
     [randn(B, 6)], [], None),
    ("clamp_square", "input x: f32[B, 5]\noutput a = clamp(x, -0.5, 0.75)\noutput b = clamp(x, min = 0)\n"
     "output c = clamp(x, max = -0.25)\noutput d = square(x)\noutput e = x.clamp(0.5, -0.5)", [X], [],
     lambda: {"a": np.clip(X, -0.5, 0.75), "b": np.maximum(X, 0), "c": np.minimum(X, -0.25), "d": X * X,
              "e": np.full_like(X, -0.5)}),
    ("maximum_minimum_pow", "input x: f32[B, 5]\ninput c: f32[B, 1]\ninput p: f32[B, 5]\n"
     "output a = maximum(x, c)\noutput b = minimum(c, x)\noutput d = p ** x\noutput e = p ** c",
     [X, C1, POS], [], lambda: {"a": np.maximum(X, C1), "b": np.minimum(C1, X), "d": POS ** X, "e": POS ** C1}),
    ("logsumexp_min", "input x: f32[B, 5]\ninput z: f32[B, 5]\noutput a = logsumexp(x, axis = 1)\n"
     "output b = logsumexp(z, axis = 1, keepdim = 1)\noutput c = logsumexp(x)\noutput d = min(x, axis = 0)\n"
     "output e = x.min()\noutput f = sum(x, axis = (0, 1))\noutput g = x.mean(axis = [1, 0])", [X, BIG], [],
     lambda: {"a": lse(X, 1), "b": lse(BIG, 1, True), "c": lse(X.reshape(-1), 0), "d": X.min(0), "e": X.min(),
              "f": X.sum(), "g": X.mean()}),
    ("layer_norm", "input x: f32[B, 5]\nparam w: f32[5] = zeros()\nparam b: f32[5] = zeros()\n"
     "output a = layer_norm(x)\noutput c = layer_norm(x, w, b, eps = 0.01)\noutput d = x.layer_norm(w)",
     [X], [V5, randn(5)], None),
    ("views_methods", "input x: f32[B, 6]\nparam w: f32[2, 3] = zeros()\noutput a = reshape(x, B, 3, -1)\n"
     "output b = flatten(reshape(x, B, 2, 3), 1)\noutput c = x.view(B, 2, 3).sum(axis = 2)\noutput d = w.T\n"
     "output e = x.relu().sum(1)\noutput f = reshape(w, (-1,))", [randn(B, 6)], [randn(2, 3)], None),
    ("softmax", "input x: f32[B, 5]\ninput z: f32[B, 5]\noutput a = softmax(x)\noutput b = softmax(z)\noutput c = softmax(z, axis = -1)",
     [X, BIG], [], lambda: {"a": softmax(X), "b": softmax(BIG), "c": softmax(BIG)}),
    ("log_softmax", "input x: f32[B, 5]\ninput z: f32[B, 5]\noutput a = log_softmax(x)\noutput b = log_softmax(z)\noutput c = exp(log_softmax(z, axis = 1))",
     [X, BIG], [], lambda: {"a": log_softmax(X), "b": log_softmax(BIG), "c": softmax(BIG)}),
    ("cross_entropy", "input x: f32[B, 5]\ninput z: f32[B, 5]\ninput y: i32[B]\noutput a = cross_entropy(x, y)\noutput b = cross_entropy(z, y)\n"
     "output c = cross_entropy(z * 0.001, y)",
     [X, BIG, LABELS], [], lambda: {"a": cross_entropy(X, LABELS), "b": cross_entropy(BIG, LABELS), "c": cross_entropy(BIG * 0.001, LABELS)}),
    ("accuracy", "input z: f32[B, 5]\ninput y: i32[B]\noutput a = accuracy(z + 0, y)",
     [X, LABELS], [], lambda: {"a": float((X.argmax(1) == LABELS).sum())}),
    ("mse_loss", "input x: f32[B, 5]\ninput t: f32[B, 5]\noutput a = mse_loss(x, t)\noutput b = mse_loss(x * 1000, t)",
     [X, POS], [], lambda: {"a": ((X - POS) ** 2).mean(), "b": ((1000 * X - POS) ** 2).mean()}),
    ("reshape_transpose", "input x: f32[B, 6]\nparam W: f32[5, 3] = zeros()\noutput a = reshape(W, 3, 5)\noutput b = transpose(reshape(W, 3, 5))\n"
     "output c = reshape(x, B, 3, 2)\noutput d = reshape(transpose(W), 15)",
     [randn(B, 6)], [W], None),
    ("mlp_forward", "input x: f32[B, 5]\ninput y: i32[B]\nparam W1: f32[4, 5] = zeros()\nparam b1: f32[4] = zeros()\n"
     "param W2: f32[5, 4] = zeros()\nparam b2: f32[5] = zeros()\n"
     "output logits = relu(x @ transpose(W1) + b1) @ transpose(W2) + b2\noutput loss = cross_entropy(logits, y)\n"
     "output p = softmax(logits)",
     [X, LABELS], [randn(4, 5), randn(4), randn(5, 4), randn(5)], None),
]


def expected(name, inputs, params):
    """References for the cases whose expectation needs the inputs by name."""
    if name == "reduce_3d":
        x = inputs[0]
        r = x.reshape(B, 2, 3)
        return {"r": r, "a": r.sum(1), "b": r.max(2), "c": r.mean(0), "d": r.sum(1, keepdims=True), "e": x}
    if name == "layer_norm":
        x, (w, b) = inputs[0], params

        def ln(z, eps=1e-5):
            m = z.mean(-1, keepdims=True)
            return (z - m) / np.sqrt(((z - m) ** 2).mean(-1, keepdims=True) + eps)
        return {"a": ln(x), "c": ln(x, 0.01) * w + b, "d": ln(x) * w}
    if name == "views_methods":
        x, w = inputs[0], params[0]
        return {"a": x.reshape(B, 3, 2), "b": x, "c": x.reshape(B, 2, 3).sum(2), "d": w.T,
                "e": np.maximum(x, 0).sum(1), "f": w.reshape(6)}
    if name == "reshape_transpose":
        w = params[0]
        return {"a": w.reshape(3, 5), "b": w.reshape(3, 5).T, "c": inputs[0].reshape(B, 3, 2), "d": w.T.reshape(15)}
    if name == "matmul_transpose":
        x = inputs[0]
        w, v = params
        return {"y": (x @ w).T @ (x @ w), "z": x @ w, "t": x.T, "u": v.T @ w.T, "v": x @ w @ v}
    if name == "matmul_batched":
        x, z = inputs
        w, v, p = params
        r = x.reshape(B, 2, 2, 5)
        return {"a": x @ w, "b": v @ x, "c": x @ x.transpose(0, 2, 1), "d": x.transpose(0, 2, 1) @ x,
                "e": r @ r.transpose(0, 1, 3, 2), "f": z @ p, "g": (z @ p).transpose(0, 2, 1) @ (z @ p),
                "h": (z @ p).transpose(0, 2, 1)}
    if name == "mlp_forward":
        x, y = inputs
        w1, b1, w2, b2 = params
        logits = np.maximum(x @ w1.T + b1, 0) @ w2.T + b2
        return {"logits": logits, "loss": cross_entropy(logits, y), "p": softmax(logits)}
    raise KeyError(name)


def run_case(run_model, tmp, name, src, inputs, params, fused):
    d = os.path.join(tmp, name + ("_fused" if fused else "_unfused"))
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, name + ".nn")
    with open(path, "w") as f:
        f.write(src + "\n")
    files = []
    for i, a in enumerate(inputs):
        p = os.path.join(d, "in%d.npy" % i)
        np.save(p, a.astype(np.int32 if a.dtype.kind == "i" else np.float32))
        files.append(p)
    cmd = [run_model, path, d]
    if params:
        pf = []
        for i, a in enumerate(params):
            p = os.path.join(d, "param%d.npy" % i)
            np.save(p, a.astype(np.float32))
            pf.append(p)
        cmd += ["--load-params", ",".join(pf)]
    if not fused:
        cmd.append("--no-fuse")
    r = subprocess.run(cmd + files, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr
    return {n: np.load(os.path.join(d, n + ".npy")) for n in r.stdout.split()}, ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-model", required=True)
    ap.add_argument("-k", default="")
    ap.add_argument("-v", action="store_true")
    ap.add_argument("--mode", choices=("fused", "unfused"), help="only this mode (CTest runs each as a test)")
    a = ap.parse_args()
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, src, inputs, params, ref in CASES:
            if a.k not in name:
                continue
            # NumPy sees exactly the float32 values nnc sees, in float64.
            inputs = [x if x.dtype.kind == "i" else x.astype(np.float32).astype(np.float64) for x in inputs]
            params = [p.astype(np.float32).astype(np.float64) for p in params]
            if ref is None:
                want = expected(name, inputs, params)
            else:
                want = ref()
            for fused in (True, False):
                mode = "fused" if fused else "unfused"
                if a.mode and a.mode != mode:
                    continue
                got, err = run_case(a.run_model, tmp, name, src, inputs, params, fused)
                if got is None:
                    print("FAIL %-18s %-7s run_model failed:\n%s" % (name, mode, err))
                    failed += 1
                    continue
                ok = True
                worst = 0.0
                for k, w in want.items():
                    w = np.asarray(w, dtype=np.float64)
                    g = got.get(k)
                    if g is None or g.shape != w.shape:
                        print("FAIL %-18s %-7s output %s: shape %s, want %s" % (name, mode, k, None if g is None else g.shape, w.shape))
                        ok = False
                        continue
                    g = g.astype(np.float64)
                    diff = np.abs(g - w)
                    tol = RTOL * np.abs(w) + ATOL * max(1.0, float(np.abs(w).max()) if w.size else 1.0)
                    bad = ~(diff <= tol)
                    md = float(diff.max()) if diff.size else 0.0
                    rel = float((diff / np.maximum(np.abs(w), 1e-30)).max()) if diff.size else 0.0
                    worst = max(worst, md)
                    if a.v or bad.any():
                        print("  %s.%s maxdiff %.3g max rel %.3g" % (name, k, md, rel))
                    if bad.any():
                        i = np.argwhere(bad)[0]
                        print("    first bad at %s: nnc %r numpy %r" % (tuple(i), g[tuple(i)], w[tuple(i)]))
                        ok = False
                print("%s %-18s %-7s %d outputs  maxdiff %.3g" % ("ok  " if ok else "FAIL", name, mode, len(want), worst))
                passed += ok
                failed += not ok
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
