"""Matrix products whose contraction runs over the batch axis, or whose result carries the batch
axis last, against PyTorch: the forward value, the loss and every parameter's gradient.

`transpose(h) @ h` (a Gram matrix over the batch), `transpose(h) @ z` and `transpose(z) @ h`
(cross products), `U @ transpose(h)` (the batch axis last), and these inside larger graphs
(a softmax over a Gram matrix applied back to the batch, a product of a batch-last result with
a batch-first one). Their gradients are products with the batch axis in the contraction or in
the last axis: nnc once refused its own gradient graph for the first of them ("IR invalid after
autograd: node %13 (matmul): matmul shapes").  Batched products (a Gram matrix per sample over
a sequence axis, a shared weight after it) sit beside them.

Each case is a tiny .nn model with inputs x: f32[B, 4] and s: f32[B, 3] and parameters W, V, U,
P; it runs through tests/numeric/run_model (NNC_ENTRY_EVAL for `out` and `loss`, NNC_ENTRY_GRAD
for grad.W ...), fused and unfused in float64 and fused in float32, and every value is compared
with torch.autograd in float64: |nnc - torch| <= RTOL * |torch| + ATOL * max(1, max|torch|),
1e-10 in float64 and 1e-5 in float32.  (The float64 finite-difference checks of the same
family are in tests/numeric/gradcheck.c, cases "batch_contract_*".)

    test_matmul_torch.py --run-model PATH [--cuda] [-k SUBSTRING]

--cuda runs the float32 models on the CUDA target; exit 77 (skipped) where there is none.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch

TOL = {"f64": (1e-10, 1e-10), "f32": (1e-5, 1e-5)}
BATCH = 5
rng = np.random.default_rng(11)

# name, the model's lines after the declarations (defining `out` and using it in `loss`), and
# the same in torch: (loss, out) from a dict of tensors.  h and z are batch-first;
# transpose(h) is [4, B].
def gram(t):
    h = t["x"] @ t["W"]
    out = h.T @ h
    return (out * out).sum(), out


def cross(t):
    out = (t["x"] @ t["W"]).T @ torch.tanh(t["x"] @ t["V"])
    return (torch.tanh(out) * t["P"]).sum(), out


def cross_swapped(t):
    out = torch.tanh(t["x"] @ t["V"]).T @ (t["x"] @ t["W"])
    return (torch.tanh(out) * t["P"].T).sum(), out


def batch_last(t):
    out = t["U"] @ (t["x"] @ t["W"]).T
    return (torch.tanh(out) * t["s"].T).sum(), out


def batch_last_contract(t):
    h = torch.tanh(t["x"] @ t["W"])
    r = t["U"] @ h.T
    out = r @ (h + t["x"])
    return (torch.tanh(out) * t["P"].T).sum() + (r * r).sum(), out


def gram_transposed(t):
    h, z = t["x"] @ t["W"], torch.tanh(t["x"] @ t["V"])
    out = (h.T @ z).T @ (h @ t["W"]).T
    return (torch.tanh(out) * t["s"].T).sum(), out


def gram_attention(t):
    h = t["x"] @ t["W"]
    out = (torch.softmax(h.T @ h * 0.25, dim=1) @ h.T).T
    return (torch.tanh(out) * h).sum() + (out @ t["V"] * t["s"]).sum(), out


def gram_chain(t):
    h = t["x"] @ t["W"]
    g = h.T @ h
    out = torch.tanh(h @ g) @ t["V"]
    return (out * t["s"]).sum() + (g * g).sum() * 0.01, out


def batched_middle(t):
    h = (t["x"] @ t["W"]).reshape(2, BATCH, 2)
    out = h.transpose(1, 2) @ h
    return (torch.tanh(out) * t["P"][:2, :2]).sum() + (h @ out).sum(), out


CASES = [
    ("gram", "h = x @ W\noutput out = transpose(h) @ h\nloss = sum(out * out)", gram),
    ("cross", "h = x @ W\nz = tanh(x @ V)\noutput out = transpose(h) @ z\nloss = sum(tanh(out) * P)", cross),
    ("cross_swapped", "h = x @ W\nz = tanh(x @ V)\noutput out = transpose(z) @ h\n"
     "loss = sum(tanh(out) * transpose(P))", cross_swapped),
    ("batch_last", "h = x @ W\noutput out = U @ transpose(h)\nloss = sum(tanh(out) * transpose(s))", batch_last),
    ("batch_last_contract", "h = tanh(x @ W)\nr = U @ transpose(h)\noutput out = r @ (h + x)\n"
     "loss = sum(tanh(out) * transpose(P)) + sum(r * r)", batch_last_contract),
    ("gram_transposed", "h = x @ W\nz = tanh(x @ V)\noutput out = transpose(transpose(h) @ z) @ transpose(h @ W)\n"
     "loss = sum(tanh(out) * transpose(s))", gram_transposed),
    ("gram_attention", "h = x @ W\na = softmax(transpose(h) @ h * 0.25, axis = 1)\n"
     "output out = transpose(a @ transpose(h))\nloss = sum(tanh(out) * (x @ W)) + sum(out @ V * s)", gram_attention),
    ("gram_chain", "h = x @ W\ng = transpose(h) @ h\noutput out = tanh(h @ g) @ V\n"
     "loss = sum(out * s) + sum(g * g) * 0.01", gram_chain),
    # batched: the batch axis in the middle (a reshape puts it there), contracted per matrix
    ("batched_middle", "h = reshape(x @ W, 2, B, 2)\noutput out = transpose(h) @ h\n"
     "loss = sum(tanh(out) * narrow(narrow(P, 0, 0, 2), 1, 0, 2)) + sum(h @ out)", batched_middle),
]


SHAPES = {"W": (4, 4), "V": (4, 3), "U": (3, 4), "P": (4, 3)}


def used(body):
    """The parameters a case's body uses (nnc refuses an unused one), in declaration order."""
    return [n for n in SHAPES if re.search(r"\b%s\b" % n, body)]


def model(body):
    decl = ["input x: f32[B, 4]", "input s: f32[B, 3]"]
    decl += ["param %s: f32[%d, %d] = zeros()" % (n, *SHAPES[n]) for n in used(body)]
    train = "train {\n    data x = npy(\"x.npy\")\n    data s = npy(\"s.npy\")\n    batch = %d\n    minimize loss\n}" % BATCH
    return "\n".join(decl) + "\n" + body + "\n" + train + "\n"


def run_case(a, tmp, name, body, fn, precision, fused):
    d = os.path.join(tmp, "%s_%s_%s" % (name, precision, "fused" if fused else "unfused"))
    os.makedirs(d)
    with open(os.path.join(d, "m.nn"), "w") as f:
        f.write(model(body))
    dt = np.float64 if precision == "f64" else np.float32
    vals = {n: rng.standard_normal(sh) * 0.5 for n, sh in SHAPES.items()}
    vals["x"] = rng.standard_normal((BATCH, 4))
    vals["s"] = rng.standard_normal((BATCH, 3))
    vals = {n: v.astype(dt).astype(np.float64) for n, v in vals.items()}   # what nnc holds
    for n, v in vals.items():
        np.save(os.path.join(d, n + ".npy"), v.astype(dt))
    cmd = [a.run_model, os.path.join(d, "m.nn"), d, "--entry", "eval,grad", "--load-params",
           ",".join(os.path.join(d, n + ".npy") for n in used(body))]
    if precision == "f64":
        cmd.append("--f64")
    if not fused:
        cmd.append("--no-fuse")
    if a.cuda:
        cmd.append("--cuda")
    r = subprocess.run(cmd + [os.path.join(d, "x.npy"), os.path.join(d, "s.npy")], capture_output=True, text=True, cwd=d)
    if r.returncode == 77:
        print("SKIP: no CUDA target or device:\n" + r.stderr)
        sys.exit(77)
    if r.returncode != 0:
        return ["run_model failed:\n" + r.stderr]
    got = {n: np.load(os.path.join(d, n + ".npy")).astype(np.float64) for n in r.stdout.split()}
    t = {n: torch.tensor(v, dtype=torch.float64, requires_grad=n in used(body)) for n, v in vals.items()}
    loss, out = fn(t)
    loss.backward()
    want = {"out": out.detach().numpy(), "loss": np.array(loss.item())}
    for n in used(body):
        want["grad." + n] = t[n].grad.numpy()
    rtol, atol = TOL[precision]
    errs = []
    for n, w in want.items():
        if n not in got:
            errs.append("%s: not written by run_model" % n)
            continue
        g = got[n].reshape(w.shape) if got[n].size == w.size else got[n]
        if g.shape != w.shape:
            errs.append("%s: shape %s, want %s" % (n, g.shape, w.shape))
            continue
        bad = np.abs(g - w) > rtol * np.abs(w) + atol * max(1.0, float(np.abs(w).max()))
        if bad.any():
            i = tuple(np.argwhere(bad)[0])
            errs.append("%s at %s: nnc %r torch %r (%d of %d differ)" % (n, i, g[i], w[i], int(bad.sum()), bad.size))
    return errs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-model", required=True)
    ap.add_argument("--cuda", action="store_true")
    ap.add_argument("-k", default="")
    a = ap.parse_args()
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, body, fn in CASES:
            if a.k not in name:
                continue
            for precision in ("f32",) if a.cuda else ("f64", "f32"):
                for fused in (True, False) if precision == "f64" else (True,):
                    errs = run_case(a, tmp, name, body, fn, precision, fused)
                    print("%s %-22s %s %-7s%s" % ("FAIL" if errs else "ok  ", name, precision,
                                                  "fused" if fused else "unfused", "".join("\n    " + e for e in errs)))
                    passed += not errs
                    failed += bool(errs)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
