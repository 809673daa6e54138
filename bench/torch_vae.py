#!/usr/bin/env python3
"""torch_vae.py - models/vae.nn's reference: the VAE of PyTorch's examples (vae/main.py), its loop
as written (Adam 1e-3, batch 128, a shuffled epoch, the summed loss backpropagated), on the same
Fashion-MNIST files, printing each epoch's mean loss an image in training and on the test set.

    python3 bench/torch_vae.py [--epochs 10]      # then: nnc models/vae.nn (its losses are a batch's: / 128)
"""
import argparse
import gzip
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist/"


def images(name):
    with gzip.open(DATA + name) as f:
        return torch.tensor(np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784).astype(np.float32) / 255)


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc21, self.fc22 = nn.Linear(784, 400), nn.Linear(400, 20), nn.Linear(400, 20)
        self.fc3, self.fc4 = nn.Linear(20, 400), nn.Linear(400, 784)

    def forward(self, x):
        h1 = F.relu(self.fc1(x))
        mu, logvar = self.fc21(h1), self.fc22(h1)
        z = mu + torch.randn_like(logvar) * torch.exp(0.5 * logvar)
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z)))), mu, logvar


def loss_function(recon, x, mu, logvar):
    return F.binary_cross_entropy(recon, x, reduction="sum") - 0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=10)
    a = ap.parse_args()
    train, test = images("train-images-idx3-ubyte.gz"), images("t10k-images-idx3-ubyte.gz")
    torch.manual_seed(1)
    model = VAE()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    t0 = time.time()
    for epoch in range(1, a.epochs + 1):
        total = 0.0
        for idx in torch.randperm(len(train)).split(128):
            x = train[idx]
            opt.zero_grad()
            recon, mu, logvar = model(x)
            loss = loss_function(recon, x, mu, logvar)
            loss.backward()
            opt.step()
            total += loss.item()
        with torch.no_grad():
            tl = 0.0
            for xb in test.split(128):
                recon, mu, logvar = model(xb)
                tl += loss_function(recon, xb, mu, logvar).item()
        print("epoch %d  train %.2f  test %.2f an image  %.1fs" % (epoch, total / len(train), tl / len(test),
                                                                   time.time() - t0), flush=True)


if __name__ == "__main__":
    main()
