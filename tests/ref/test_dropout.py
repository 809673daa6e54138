"""dropout(x, p): the mask bit for bit against tests/ref/philox.py, training against evaluation.

The model's loss is sum(dropout(P, p) * K) for a parameter P, so grad.P (NNC_ENTRY_GRAD, a
training entry) is the scaled mask times K, element by element.  The mask must be exactly
(u >= p) / (1 - p) with u = philox.uniform(seed, stream, i) and stream the FNV-1a of
(node, step) that codegen/helpers.c documents; the node is the mask's id in `--emit ir`.  With
accumulate = 2, an accumulate call's mask comes from that stream mixed with its micro-batch's
number, and the grad call after it returns the sum of both masks' gradients.
In evaluation (NNC_ENTRY_EVAL) dropout is the identity: the output equals P exactly.  The
fraction dropped is checked against p (a sanity check of the whole chain), and p = 0 and
p = 1 give P and 0.

    test_dropout.py --run-model PATH --nnc PATH [--cuda]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import philox  # noqa: E402

M64 = (1 << 64) - 1
FNV_OFF, FNV_PRIME = 0xcbf29ce484222325, 0x100000001b3
R, C = 40, 50


def stream(node, step):
    s = ((FNV_OFF ^ node) * FNV_PRIME) & M64
    return ((s ^ step) * FNV_PRIME) & M64


def model(p, extra=""):
    return ("input u: f32[B, 1]\nparam P: f32[%d, %d] = normal(0, 1)\nparam K: f32[%d, %d] = normal(0, 1)\n"
            "output y = dropout(P, %s)\nloss = sum(y * K) + mean(u)\n"
            "train {\n    data u = npy(\"u.npy\")\n    batch = 2\n%s    minimize loss\n}\n" % (R, C, R, C, p, extra))


def mask(seed, st, p):
    u = np.array([philox.uniform(seed, st, i) for i in range(R * C)]).reshape(R, C)
    return np.where(u >= p, np.float32(1.0 / (1.0 - p)), np.float32(0)).astype(np.float64)


def check_accumulate(a, tmp, P, K, node, p=0.3, seed=11):
    """accumulate = 2: an accumulate call (the group's first micro-batch, micro 0 at step 0) draws
    from the stream of (node, step) mixed with its micro-batch's number, which no train_step or
    grad call draws; grad then returns the group's sum (mask_a + mask_g) * K / 2."""
    src = os.path.join(tmp, "acc.nn")
    with open(src, "w") as f:
        f.write(model(p, "    accumulate = 2\n"))
    d = os.path.join(tmp, "acc")
    os.makedirs(d)
    cmd = [a.run_model, src, d, "--entry", "accumulate,grad", "--seed", str(seed), "--load-params",
           os.path.join(tmp, "P.npy") + "," + os.path.join(tmp, "K.npy")] + (["--cuda"] if a.cuda else [])
    r = subprocess.run(cmd + [os.path.join(tmp, "u.npy")], capture_output=True, text=True, cwd=tmp)
    if r.returncode:
        print("FAIL accumulate: run_model failed:\n%s" % r.stderr)
        return False
    got = np.load(os.path.join(d, "grad.P.npy")).astype(np.float64)
    m_acc = mask(seed, ((stream(node, 0) ^ 0) * FNV_PRIME) & M64, p)
    m_grad = mask(seed, stream(node, 0), p)
    expect = ((m_acc.astype(np.float32) * K) * np.float32(0.5) + (m_grad.astype(np.float32) * K) * np.float32(0.5))
    errs = []
    if np.array_equal(m_acc, m_grad):
        errs.append("the reference's two masks are equal: the test cannot tell them apart")
    if np.abs(got - expect.astype(np.float64)).max() > 1e-6 * np.abs(expect).max():
        errs.append("grad.P after an accumulate call is not (mask_accumulate + mask_grad) * K / 2: max diff %g"
                    % np.abs(got - expect).max())
    print("%s accumulate p=%s seed=%d%s" % ("FAIL" if errs else "ok  ", p, seed, "".join("\n    " + e for e in errs)))
    return not errs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-model", required=True)
    ap.add_argument("--nnc", required=True)
    ap.add_argument("--cuda", action="store_true")
    a = ap.parse_args()
    rng = np.random.default_rng(5)
    P = rng.standard_normal((R, C)).astype(np.float32)
    K = rng.uniform(0.5, 1.5, (R, C)).astype(np.float32)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        np.save(os.path.join(tmp, "u.npy"), np.zeros((2, 1), np.float32))
        np.save(os.path.join(tmp, "P.npy"), P)
        np.save(os.path.join(tmp, "K.npy"), K)
        for p, seed in ((0.3, 7), (0.5, 123456789012345), (0.0, 1), (1.0, 2)):
            src = os.path.join(tmp, "m.nn")
            with open(src, "w") as f:
                f.write(model(p))
            ir = subprocess.run([a.nnc, src, "--emit", "ir"], capture_output=True, text=True, cwd=tmp).stdout
            nodes = sorted(set(re.findall(r"%(\d+)\s+= dropout_mask", ir)))
            out = {}
            for entry in ("eval", "grad"):
                d = os.path.join(tmp, "%s_%s" % (p, entry))
                os.makedirs(d)
                cmd = [a.run_model, src, d, "--entry", entry, "--seed", str(seed), "--load-params",
                       os.path.join(tmp, "P.npy") + "," + os.path.join(tmp, "K.npy")]
                if a.cuda:
                    cmd.append("--cuda")
                r = subprocess.run(cmd + [os.path.join(tmp, "u.npy")], capture_output=True, text=True, cwd=tmp)
                if r.returncode == 77:
                    print("SKIP: no CUDA target or device:\n" + r.stderr)
                    return 77
                if r.returncode:
                    print("FAIL p=%s %s: run_model failed:\n%s" % (p, entry, r.stderr))
                    return 1
                out.update({n: np.load(os.path.join(d, n + ".npy")) for n in r.stdout.split()})
            errs = []
            if not np.array_equal(out["y"], P):
                errs.append("evaluation is not the identity")
            mask = out["grad.P"].astype(np.float64) / K.astype(np.float64)
            if 0 < p < 1:
                if len(nodes) != 1:
                    errs.append("expected one dropout_mask in the IR, found %d" % len(nodes))
                else:
                    st = stream(int(nodes[0]), 0)   # the grad entry runs at step 0 after init
                    u = np.array([philox.uniform(seed, st, i) for i in range(R * C)]).reshape(R, C)
                    want = np.where(u >= p, np.float32(1.0 / (1.0 - p)), np.float32(0)).astype(np.float64)
                    got = out["grad.P"].astype(np.float64)
                    expect = (want.astype(np.float32) * K).astype(np.float64)
                    if not np.array_equal(got == 0, want == 0):
                        errs.append("mask differs from Philox at %d of %d elements" % (int(((got == 0) != (want == 0)).sum()), R * C))
                    elif np.abs(got - expect).max() > 1e-6 * np.abs(expect).max():
                        errs.append("kept elements not scaled by 1 / (1 - p): max diff %g" % np.abs(got - expect).max())
                    frac = float((got == 0).mean())
                    if abs(frac - p) > 0.04:
                        errs.append("dropped %.3f of the elements, p = %s" % (frac, p))
            elif p == 0 and not np.allclose(mask, 1):
                errs.append("p = 0 must keep everything")
            elif p == 1 and np.any(out["grad.P"] != 0):
                errs.append("p = 1 must drop everything")
            print("%s p=%s seed=%d%s" % ("FAIL" if errs else "ok  ", p, seed, "".join("\n    " + e for e in errs)))
            failed += bool(errs)
            if 0 < p < 1 and len(nodes) == 1 and p == 0.3:
                failed += not check_accumulate(a, tmp, P, K, int(nodes[0]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
