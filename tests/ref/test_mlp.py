"""models/mlp.nn trained by nnc against references started from the same parameters
(`nnc models/mlp.nn --epochs 0 --save init.safetensors`) on the same batches (the training
loop's Philox shuffle, reproduced by nnc_ref.batch_order).

  --check numpy: the first STEPS_NUMPY step losses against forward, backward and SGD written
                 in NumPy float64; relative error < 1e-4 at every step.
  --check torch: one epoch against torch 1.13 (float32, nn.Linear + F.cross_entropy +
                 torch.optim.SGD): the first STEPS_TORCH step losses agree to 1e-3 relative
                 and the test accuracy after the epoch to 0.3 percentage points.

    test_mlp.py --nnc PATH --check numpy|torch [--model models/mlp.nn]
"""
import argparse
import os
import re
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nnc_ref  # noqa: E402

STEPS_NUMPY = 20
STEPS_TORCH = 300
RTOL_NUMPY = 1e-4
RTOL_TORCH = 1e-3
ACC_PP = 0.3


def settings(model_src):
    def num(key, default):
        m = re.search(r"^\s*%s\s*=\s*([0-9.eE+-]+)" % key, model_src, re.M)
        return float(m.group(1)) if m else default
    lr = float(re.search(r"sgd\(lr\s*=\s*([0-9.eE+-]+)", model_src).group(1))
    return int(num("batch", 1)), int(num("seed", 0)), lr


def numpy_steps(params, x, y, order, batch, lr, steps):
    """Linear(784,128) -> ReLU -> Linear(128,10), mean cross-entropy, plain SGD, float64."""
    W1, b1, W2, b2 = (params[k].copy() for k in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"))
    losses = []
    for s in range(steps):
        idx = order[s * batch:(s + 1) * batch]
        xb, yb = x[idx], y[idx]
        n = len(idx)
        h = xb @ W1.T + b1
        a = np.maximum(h, 0)
        z = a @ W2.T + b2
        m = z.max(1, keepdims=True)
        lse = m + np.log(np.exp(z - m).sum(1, keepdims=True))
        losses.append(float((lse[:, 0] - z[np.arange(n), yb]).mean()))
        dz = np.exp(z - lse)
        dz[np.arange(n), yb] -= 1
        dz /= n
        dW2, db2 = dz.T @ a, dz.sum(0)
        dh = (dz @ W2) * (h > 0)
        dW1, db1 = dh.T @ xb, dh.sum(0)
        W1 -= lr * dW1
        b1 -= lr * db1
        W2 -= lr * dW2
        b2 -= lr * db2
    return losses


def torch_epoch(params, x, y, xt, yt, order, batch, lr, threads):
    import torch
    torch.set_num_threads(threads)
    net = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    with torch.no_grad():
        for (name, p) in zip(("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"), net.parameters()):
            p.copy_(torch.tensor(params[name], dtype=torch.float32))
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0)
    X, Y = torch.tensor(x, dtype=torch.float32), torch.tensor(y)
    losses = []
    for s in range((len(order) + batch - 1) // batch):
        idx = torch.tensor(order[s * batch:(s + 1) * batch])
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(X[idx]), Y[idx])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with torch.no_grad():
        pred = net(torch.tensor(xt, dtype=torch.float32)).argmax(1).numpy()
    return losses, float((pred == yt).mean())


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return np.abs(a - b) / np.maximum(np.abs(b), 1e-30)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--nnc", required=True)
    ap.add_argument("--check", choices=("numpy", "torch"), required=True)
    ap.add_argument("--model", default=os.path.join(here, "..", "..", "models", "mlp.nn"))
    ap.add_argument("--threads", type=int, default=1)   # Debian's torch is ~50x slower with 2 threads on small GEMMs
    a = ap.parse_args()
    model = os.path.abspath(a.model)
    with open(model) as f:
        batch, seed, lr = settings(f.read())
    passed = failed = 0

    def report(ok, what):
        nonlocal passed, failed
        print("%s %s" % ("ok  " if ok else "FAIL", what))
        passed += ok
        failed += not ok

    with tempfile.TemporaryDirectory() as tmp:
        nnc = os.path.abspath(a.nnc)
        nnc_ref.run_nnc(nnc, [model, "--epochs", "0", "--save", "init.safetensors"], tmp)
        params, _ = nnc_ref.load_safetensors(os.path.join(tmp, "init.safetensors"))
        x, y = nnc_ref.fashion_mnist(train=True)
        order = nnc_ref.batch_order(len(x), seed, 1)
        if a.check == "numpy":
            nnc_ref.run_nnc(nnc, [model, "--epochs", "1", "--metrics", "m.jsonl"], tmp)
            got, _ = nnc_ref.read_metrics(os.path.join(tmp, "m.jsonl"))
            want = numpy_steps(params, x, y, order, batch, lr, STEPS_NUMPY)
            r = rel(got[:STEPS_NUMPY], want)
            for s in range(STEPS_NUMPY):
                print("  step %2d  nnc %.9f  numpy %.9f  rel %.2e" % (s + 1, got[s], want[s], r[s]))
            report(bool((r <= RTOL_NUMPY).all()), "mlp first %d step losses vs NumPy float64: max rel %.3g (tol %g)"
                   % (STEPS_NUMPY, r.max(), RTOL_NUMPY))
        else:
            nnc_ref.run_nnc(nnc, [model, "--epochs", "1", "--metrics", "m.jsonl"], tmp)
            got, epochs = nnc_ref.read_metrics(os.path.join(tmp, "m.jsonl"))
            xt, yt = nnc_ref.fashion_mnist(train=False)
            want, acc = torch_epoch(params, x, y, xt, yt, order, batch, lr, a.threads)
            r = rel(got[:STEPS_TORCH], want[:STEPS_TORCH])
            for s in (0, 1, 9, 99, STEPS_TORCH - 1):
                print("  step %3d  nnc %.7f  torch %.7f  rel %.2e" % (s + 1, got[s], want[s], r[s]))
            report(len(got) == len(want), "one epoch is %d steps in nnc and %d in torch" % (len(got), len(want)))
            report(bool((r <= RTOL_TORCH).all()), "mlp first %d step losses vs torch: max rel %.3g (tol %g)"
                   % (STEPS_TORCH, r.max(), RTOL_TORCH))
            nacc = epochs[-1]["accuracy"]
            report(abs(nacc - acc) * 100 <= ACC_PP, "test accuracy after 1 epoch: nnc %.2f%%  torch %.2f%%  diff %.2f pp (tol %g)"
                   % (100 * nacc, 100 * acc, 100 * abs(nacc - acc), ACC_PP))
            full = rel(got, want) if len(got) == len(want) else np.array([np.inf])
            print("  (whole epoch, not checked: max rel %.3g, final loss nnc %.6f torch %.6f)" % (full.max(), got[-1], want[-1]))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
