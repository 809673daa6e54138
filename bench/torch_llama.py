#!/usr/bin/env python3
"""torch_llama.py - the reference step of models/llama.nn in PyTorch, for bench/run.py.

    torch_llama.py MODEL.nn BATCH THREADS STEPS eager|compile

THREADS 0 leaves PyTorch's own default (what a user gets); N calls torch.set_num_threads(N).

The model is tests/ref/test_llama_torch.py's (llama2.c's model.py with Hugging Face's
rotate_half) at llama.nn's sizes, its attention F.scaled_dot_product_attention (is_causal) as
llama2.c's flash path.  One training step is what nnc's --bench times: the learning rate set,
forward, cross-entropy, backward, clip_grad_norm_(1.0), AdamW (decay on the matrices only); on
one batch, after a warm-up (for `compile`, torch.compile of the module, compiled before timing).
Prints JSON: median_us, min_us and the torch version."""
import json
import math
import os
import re
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ref"))
import test_llama_torch as tl  # noqa: E402


def flash_forward(self, x, cos, sin):
    B, T, C = x.shape
    hd = C // self.n_heads
    q = self.wq(x).view(B, T, self.n_heads, hd).transpose(1, 2)
    k = self.wk(x).view(B, T, self.n_heads, hd).transpose(1, 2)
    v = self.wv(x).view(B, T, self.n_heads, hd).transpose(1, 2)
    q = q * cos + tl.rotate_half(q) * sin
    k = k * cos + tl.rotate_half(k) * sin
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return self.wo(y.transpose(1, 2).contiguous().view(B, T, C))


def main():
    path, batch, threads, steps, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    if threads > 0:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    c = tl.Config(open(path).read())
    if hasattr(F, "scaled_dot_product_attention"):
        tl.Attention.forward = flash_forward
    net = tl.Llama(c)
    model = torch.compile(net) if mode == "compile" else net
    params = list(net.parameters())
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95))
    x = torch.randint(0, c.vocab_size, (batch, c.block_size))
    y = torch.randint(0, c.vocab_size, (batch, c.block_size))
    it = [0]

    def step():
        for g in opt.param_groups:
            g["lr"] = 1e-4 + 0.5 * (1 + math.cos(math.pi * min(it[0], 1000) / 1000)) * (1e-3 - 1e-4)
        it[0] += 1
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
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
