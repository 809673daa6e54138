"""batch_norm (BatchNorm2d after a convolution, BatchNorm1d after a linear layer) against
PyTorch (float64), training and evaluation.

The nnc CLI trains the model full-batch (one step per epoch, no shuffle) for STEPS steps with
SGD and momentum, from the parameters it saves with --epochs 0; torch.nn does the same from
the same parameters and buffers.  Compared: every step's loss (--metrics, training mode: the
batch's statistics), the final parameters and the running statistics (--save, under torch's
state_dict names, running_var with the unbiased variance), and the outputs of --eval
(evaluation mode: the running statistics) against model.eval().  In float64 (--f64) to
RTOL64, in float32 to RTOL32 relative to each tensor's largest element.

    test_batchnorm_torch.py --nnc PATH [--precision f64|f32] [--cuda]
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nnc_ref  # noqa: E402

STEPS = 6
N = 12
RTOL64, RTOL32 = 1e-9, 2e-5
LOSS_PRINT_RTOL = 5e-9

MODEL = """
block BatchNorm(c) {
    param weight: f32[c] = ones()
    param bias: f32[c] = zeros()
    buffer running_mean: f32[c] = zeros()
    buffer running_var: f32[c] = ones()
    forward(x) = batch_norm(x, running_mean, running_var, weight, bias, momentum = 0.2)
}
input x: f32[B, 2, 6, 6]
input y: i32[B]
param conv.weight: f32[3, 2, 3, 3] = normal(0, 0.5)
bn1 = BatchNorm(3)
param fc.weight: f32[5, 27] = normal(0, 0.3)
bn2 = BatchNorm(5)
h = avg_pool2d(relu(bn1(conv2d(x, conv.weight, padding = 1))), 2)
logits = bn2(flatten(h, 1) @ transpose(fc.weight))
loss = cross_entropy(logits, y)
output logits = logits
train {
    data x = npy("x.npy")
    data y = npy("y.npy")
    test x = npy("x.npy")
    test y = npy("y.npy")
    batch = %d
    epochs = %d
    shuffle = false
    optimizer = sgd(lr = 0.1, momentum = 0.9)
    minimize loss
}
""" % (N, STEPS)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(3, momentum=0.2)
        self.fc = nn.Linear(27, 5, bias=False)
        self.bn2 = nn.BatchNorm1d(5, momentum=0.2)

    def forward(self, x):
        h = F.avg_pool2d(F.relu(self.bn1(self.conv(x))), 2)
        return self.bn2(self.fc(h.flatten(1)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nnc", required=True)
    ap.add_argument("--precision", default="both")
    a = ap.parse_args()
    rng = np.random.default_rng(11)
    x = rng.standard_normal((N, 2, 6, 6)).astype(np.float32) * 2 + 0.5
    y = rng.integers(0, 5, N).astype(np.int32)
    failed = 0
    for prec in (("f64", "f32") if a.precision == "both" else (a.precision,)):
        f64 = prec == "f64"
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "m.nn"), "w") as f:
                f.write(MODEL.replace("conv.weight", "conv_weight").replace("fc.weight", "fc_weight"))
            np.save(os.path.join(d, "x.npy"), x)
            np.save(os.path.join(d, "y.npy"), y)
            extra = ["--f64"] if f64 else []
            nnc_ref.run_nnc(a.nnc, ["m.nn", "--epochs", "0", "--save", "init.st"] + extra, d)
            nnc_ref.run_nnc(a.nnc, ["m.nn", "--save", "final.st", "--metrics", "m.jsonl"] + extra, d)
            nnc_ref.run_nnc(a.nnc, ["m.nn", "--load", "final.st", "--eval", "--eval-out", "eval.st"] + extra, d)
            init, _ = nnc_ref.load_safetensors(os.path.join(d, "init.st"))
            final, _ = nnc_ref.load_safetensors(os.path.join(d, "final.st"))
            losses, _ = nnc_ref.read_metrics(os.path.join(d, "m.jsonl"))
            ev = os.path.join(d, "eval.st")
            got_eval = nnc_ref.load_safetensors(ev)[0].get("logits") if os.path.exists(ev) else None

        torch.set_default_dtype(torch.float64)
        net = Net()
        sd = {k.replace("conv_weight", "conv.weight").replace("fc_weight", "fc.weight"): torch.tensor(v)
              for k, v in init.items() if "momentum_buffer" not in k}
        missing = net.load_state_dict(sd, strict=False)
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        xt, yt = torch.tensor(x.astype(np.float64)), torch.tensor(y.astype(np.int64))
        want_losses = []
        net.train()
        for _ in range(STEPS):
            opt.zero_grad()
            loss = F.cross_entropy(net(xt), yt)
            loss.backward()
            opt.step()
            want_losses.append(loss.item())
        net.eval()
        with torch.no_grad():
            want_eval = net(xt).numpy()
        want = {k.replace("conv.weight", "conv_weight").replace("fc.weight", "fc_weight"): v.numpy()
                for k, v in net.state_dict().items() if "num_batches" not in k}
        errs = []
        if missing.missing_keys:
            errs.append("torch keys not in nnc's checkpoint: %s" % missing.missing_keys)
        rtol = RTOL64 if f64 else RTOL32
        for k, w in want.items():
            g = final.get(k)
            if g is None:
                errs.append("%s: not in nnc's checkpoint" % k)
                continue
            err = np.abs(g - w).max() / max(1e-12, np.abs(w).max())
            if err > rtol:
                errs.append("%s: max rel diff %.3g" % (k, err))
        lt = LOSS_PRINT_RTOL if f64 else RTOL32
        for i, (g, w) in enumerate(zip(losses, want_losses)):
            if abs(g - w) > lt * abs(w):
                errs.append("step %d loss: nnc %.9g torch %.9g" % (i + 1, g, w))
        if len(losses) != STEPS:
            errs.append("%d losses, want %d" % (len(losses), STEPS))
        if got_eval is None or got_eval.shape != want_eval.shape:
            errs.append("--eval-out: %s, want %s" % (None if got_eval is None else got_eval.shape, want_eval.shape))
        else:
            err = np.abs(got_eval - want_eval).max() / np.abs(want_eval).max()
            if err > rtol:
                errs.append("evaluation outputs: max rel diff %.3g" % err)
        print("%s batchnorm %s%s" % ("FAIL" if errs else "ok  ", prec, "".join("\n    " + e for e in errs)))
        failed += bool(errs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
