#!/usr/bin/env python3
"""torch_gpt.py - the reference step of models/gpt.nn in PyTorch (nanoGPT's model), for bench/run.py.

    torch_gpt.py MODEL.nn BATCH THREADS STEPS eager|compile

THREADS 0 leaves PyTorch's own default (what a user gets); N calls torch.set_num_threads(N).

The model is nanoGPT's model.py at gpt.nn's sizes (read from MODEL.nn's constants): token and
position embeddings, pre-LayerNorm blocks whose attention is its flash path
(F.scaled_dot_product_attention, is_causal=True; its manual path where PyTorch 1.x lacks it), a GELU MLP, the head tied to the token
embedding. One training step is what nnc's --bench times and nanoGPT's train.py does: the
learning rate set, forward, cross-entropy over the sequence, backward, clip_grad_norm_(1.0),
AdamW with nanoGPT's two parameter groups (decay on the matrices, none on biases and norms); on
one batch, after a warm-up (for `compile`, torch.compile of the module, compiled before timing).
Prints JSON: median_us, min_us and the torch version."""
import json
import math
import re
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"])
        self.c_proj = nn.Linear(c["n_embd"], c["n_embd"])
        self.n_head, self.n_embd = c["n_head"], c["n_embd"]

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if hasattr(F, "scaled_dot_product_attention"):   # nanoGPT's flash path (PyTorch 2)
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=True)
        else:   # its manual path (PyTorch 1.x)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).tril().logical_not(), float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        C = c["n_embd"]
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(C), Attention(c), nn.LayerNorm(C)
        self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(), nn.Linear(4 * C, C))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        C = c["n_embd"]
        self.wte, self.wpe = nn.Embedding(c["vocab_size"], C), nn.Embedding(c["block_size"], C)
        self.h = nn.ModuleList([Block(c) for _ in range(c["n_layer"])])
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, c["vocab_size"], bias=False)
        self.wte.weight = self.lm_head.weight   # weight tying

    def forward(self, idx, targets):
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def config(path):
    src = open(path).read()
    return {k: int(re.search(r"^%s = (\d+)" % k, src, re.M).group(1))
            for k in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")}


def main():
    path, batch, threads, steps, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    if threads > 0:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    c = config(path)
    net = GPT(c)
    model = torch.compile(net) if mode == "compile" else net
    params = [p for p in net.parameters() if p.requires_grad]
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.99))
    x = torch.randint(0, c["vocab_size"], (batch, c["block_size"]))
    y = torch.randint(0, c["vocab_size"], (batch, c["block_size"]))
    it = [0]

    def step():
        for g in opt.param_groups:   # nanoGPT's get_lr: a cosine after the warm-up
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
