#!/usr/bin/env python3
"""torch_convnet.py - the reference step of models/convnet.nn in PyTorch, for bench/run.py.

    torch_convnet.py BATCH THREADS STEPS eager|compile
    torch_convnet.py BATCH THREADS epoch eager|compile     one epoch of Fashion-MNIST, as nnc trains it

THREADS 0 leaves PyTorch's own default (what a user gets); N calls torch.set_num_threads(N).

One training step: forward (two 5x5 convolutions with ReLU and 2x2 max pooling, a 1024-unit
layer with dropout 0.4, 10 outputs), cross-entropy, backward, Adam; as nnc's --bench, on one
batch, after a warm-up (for `compile`, torch.compile of the module, compiled before timing).
Prints JSON: median_us, min_us and the torch version."""
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding="same")
        self.conv2 = nn.Conv2d(32, 64, 5, padding="same")
        self.fc1 = nn.Linear(3136, 1024)
        self.fc2 = nn.Linear(1024, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.conv1(x.view(-1, 1, 28, 28))), 2)
        h = F.max_pool2d(F.relu(self.conv2(h)), 2)
        return self.fc2(F.dropout(F.relu(self.fc1(h.flatten(1))), 0.4, self.training))


def epoch(net, model, batch, mode):
    """One shuffled epoch (60,000 images) and the test set's accuracy; the time of both, as nnc's
    epoch line counts them (the data already in memory, as nnc has it after its load)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ref"))
    import nnc_ref
    x, y = nnc_ref.fashion_mnist(True)
    tx, ty = nnc_ref.fashion_mnist(False)
    x, y = torch.tensor(x, dtype=torch.float32), torch.tensor(y)
    tx, ty = torch.tensor(tx, dtype=torch.float32), torch.tensor(ty)
    opt = torch.optim.Adam(net.parameters(), 1e-3)
    t0 = time.perf_counter()
    net.train()
    perm = torch.randperm(len(x))
    for i in range(0, len(x), batch):
        idx = perm[i:i + batch]
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
    net.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(tx), 1000):
            correct += (model(tx[i:i + 1000]).argmax(1) == ty[i:i + 1000]).sum().item()
    secs = time.perf_counter() - t0
    print(json.dumps({"epoch_s": secs, "accuracy": correct / len(tx), "torch": torch.__version__, "mode": mode}))


def main():
    if sys.argv[3] == "epoch":
        if int(sys.argv[2]) > 0:
            torch.set_num_threads(int(sys.argv[2]))
        torch.manual_seed(0)
        net = Net()
        epoch(net, torch.compile(net) if sys.argv[4] == "compile" else net, int(sys.argv[1]), sys.argv[4])
        return
    batch, threads, steps, mode = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    if threads > 0:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    net = Net()
    model = torch.compile(net) if mode == "compile" else net
    opt = torch.optim.Adam(net.parameters(), 1e-3)
    x, y = torch.rand(batch, 784), torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    ts = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t)
    ts.sort()
    print(json.dumps({"median_us": 1e6 * ts[len(ts) // 2], "min_us": 1e6 * ts[0], "torch": torch.__version__}))


if __name__ == "__main__":
    main()
