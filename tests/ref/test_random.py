#!/usr/bin/env python3
"""test_random.py - randn_like, rand_like, randn, rand and bernoulli inside a model.

A VAE's reparameterisation z = mu + exp(logvar / 2) eps, with eps = randn_like(mu), run through
run_model's eval and grad entries (tests/numeric/run_model.c).  Checked:
  - the draws' statistics over 8192 values each (normal: mean, standard deviation, its fourth
    moment; uniform: within [0, 1), mean and variance; bernoulli: its rate), and that two nodes
    draw different values;
  - z and every gradient against torch computing the same expression with nnc's eps as a
    constant (so eps carries no gradient, and the grad entry drew what the eval entry drew);
  - eps and u bit for bit against tests/ref/philox.py's normal and uniform of the stream that
    codegen/helpers.c documents (dropout's: the FNV-1a of the node and the step), the node being
    the draw's id in `--emit ir`;
  - a second run gives the same bits, and so does one with --no-fuse; another seed gives other
    values;
  - with --cuda, the same run on the CUDA target against the CPU's values (within Box-Muller's
    four ulps for randn, exactly for rand and bernoulli).

    test_random.py --run-model build/tests/numeric/run_model --nnc build/nnc [--cuda]
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

B, D = 128, 64

MODEL = """input x: f32[B, %d]
param W: f32[%d, %d] = zeros()
h = x @ W
mu = h[:, :%d]
logvar = tanh(h[:, %d:])
eps = torch.randn_like(mu)
output eps = eps
u = torch.rand(B, %d)
output u = u
output z = mu + torch.exp(0.5 * logvar) * eps
output e2 = torch.randn(B, %d)
output m = torch.bernoulli(torch.full_like(mu, 0.3))
loss = sum(z * z) + sum(u[:, :%d] * mu)
train {
    data x = npy("x.npy")
    batch = %d
    minimize loss
}
""" % (D, D, D, D // 2, D // 2, D, D, D // 2, B)


def run(a, d, seed, cuda, tag="", *flags):
    out = os.path.join(d, "out_%d_%d%s" % (seed, cuda, tag))
    os.makedirs(out)
    cmd = [a.run_model, os.path.join(d, "m.nn"), out, "--entry", "eval,grad", "--seed", str(seed),
           "--load-params", os.path.join(d, "W.npy"), *flags]
    if cuda:
        cmd.append("--cuda")
    r = subprocess.run(cmd + [os.path.join(d, "x.npy")], capture_output=True, text=True, cwd=d)
    if r.returncode == 77:
        print("SKIP: no CUDA target or device:\n" + r.stderr)
        sys.exit(77)
    if r.returncode != 0:
        raise SystemExit("run_model failed:\n" + r.stderr)
    return {n: np.load(os.path.join(out, n + ".npy")).astype(np.float64) for n in r.stdout.split()}


def check(errs, what, ok):
    if not ok:
        errs.append(what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-model", required=True)
    ap.add_argument("--nnc", required=True)
    ap.add_argument("--cuda", action="store_true")
    a = ap.parse_args()
    rng = np.random.default_rng(5)
    x = rng.standard_normal((B, D)).astype(np.float32)
    W = (rng.standard_normal((D, D)) * 0.1).astype(np.float32)
    errs = []
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "m.nn"), "w") as f:
            f.write(MODEL)
        np.save(os.path.join(d, "x.npy"), x)
        np.save(os.path.join(d, "W.npy"), W)
        got = run(a, d, 1, False)
        eps, u, e2, m = got["eps"], got["u"], got["e2"], got["m"]
        for name, v in (("eps", eps), ("randn", e2)):   # n = 4096 and 8192: the mean's sigma 0.016, 0.011
            check(errs, "%s: mean %.4f" % (name, v.mean()), abs(v.mean()) < 0.08)
            check(errs, "%s: std %.4f" % (name, v.std()), abs(v.std() - 1) < 0.05)
            check(errs, "%s: fourth moment %.3f (3 for a normal)" % (name, (v ** 4).mean()), abs((v ** 4).mean() - 3) < 0.4)
        check(errs, "rand: outside [0, 1)", u.min() >= 0 and u.max() < 1)
        check(errs, "rand: mean %.4f" % u.mean(), abs(u.mean() - 0.5) < 0.02)
        check(errs, "rand: variance %.4f (1/12)" % u.var(), abs(u.var() - 1 / 12) < 0.01)
        check(errs, "bernoulli: values other than 0 and 1", set(np.unique(m)) <= {0.0, 1.0})
        check(errs, "bernoulli: rate %.4f (0.3)" % m.mean(), abs(m.mean() - 0.3) < 0.03)
        check(errs, "two randn nodes drew alike", np.abs(eps - e2[:, :D // 2]).max() > 0.5)
        check(errs, "randn and rand correlate: %.3f" % np.corrcoef(eps.ravel(), u[:, :D // 2].ravel())[0, 1],
              abs(np.corrcoef(eps.ravel(), u[:, :D // 2].ravel())[0, 1]) < 0.1)
        # the same expression in torch, nnc's eps a constant
        Wt = torch.tensor(W, dtype=torch.float64, requires_grad=True)
        h = torch.tensor(x, dtype=torch.float64) @ Wt
        mu, logvar = h[:, :D // 2], torch.tanh(h[:, D // 2:])
        z = mu + torch.exp(0.5 * logvar) * torch.tensor(eps)
        loss = (z * z).sum() + (torch.tensor(u[:, :D // 2]) * mu).sum()
        loss.backward()
        for name, want in (("z", z.detach().numpy()), ("grad.W", Wt.grad.numpy())):
            err = np.abs(got[name] - want).max() / max(1.0, np.abs(want).max())
            check(errs, "%s differs from torch's with nnc's eps by %.2e" % (name, err), err < 1e-4)
        ir = subprocess.run([a.nnc, os.path.join(d, "m.nn"), "--emit", "ir"], capture_output=True, text=True, cwd=d).stdout
        m64, off, prime = (1 << 64) - 1, 0xcbf29ce484222325, 0x100000001b3
        for name, fn in (("eps", philox.normal), ("u", philox.uniform)):
            ids = re.findall(r"%%(\d+)\s+= random .*\"%s\"" % name, ir.split("; ---- after")[1])
            if len(ids) != 1:
                errs.append("%s: expected one random node named so in the IR, found %d" % (name, len(ids)))
                continue
            st = ((((off ^ int(ids[0])) * prime) & m64) ^ 0) * prime & m64   # step 0: the calls after init
            want = np.array([fn(1, st, i) for i in range(got[name].size)], np.float32).reshape(got[name].shape)
            bad = got[name] != want.astype(np.float64)
            check(errs, "%s: %d of %d values differ from philox.py's" % (name, bad.sum(), bad.size), not bad.any())
        again = run(a, d, 1, False, "again")
        check(errs, "a second run drew other values", all(np.array_equal(got[n], again[n]) for n in ("eps", "u", "e2", "m")))
        unfused = run(a, d, 1, False, "unfused", "--no-fuse")
        check(errs, "--no-fuse drew other values", all(np.array_equal(got[n], unfused[n]) for n in ("eps", "u", "e2", "m")))
        other = run(a, d, 2, False)
        check(errs, "another seed drew the same values", not np.array_equal(got["eps"], other["eps"]))
        if a.cuda:
            dev = run(a, d, 1, True)
            for n, ulps in (("eps", 4), ("e2", 4), ("u", 0), ("m", 0)):
                tol = ulps * 2.0 ** -24 * np.abs(got[n]) + (1e-30 if ulps else 0)
                bad = np.abs(dev[n] - got[n]) > tol
                check(errs, "cuda %s: %d of %d values differ from the CPU's" % (n, bad.sum(), bad.size), not bad.any())
    for e in errs:
        print("FAIL " + e)
    print("%s random: %d checks failed" % ("FAIL" if errs else "ok  ", len(errs)))
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
