#!/usr/bin/env python3
"""torch_convnet.py - the reference step of models/convnet.nn in PyTorch, for bench/run.py.

    torch_convnet.py BATCH THREADS STEPS eager|compile

One training step: forward (two 5x5 convolutions with ReLU and 2x2 max pooling, a 1024-unit
layer with dropout 0.4, 10 outputs), cross-entropy, backward, Adam; as nnc's --bench, on one
batch, after a warm-up (for `compile`, torch.compile of the module, compiled before timing).
Prints JSON: median_us, min_us and the torch version."""
import json
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


def main():
    batch, threads, steps, mode = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
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
