"""models/llama.nn against a LLaMA written in PyTorch, step by step.

The torch module below is llama2.c's model.py with the rotary embedding of Hugging Face's LLaMA
(the halves of each head rotated, rotate_half, where llama2.c rotates neighbouring pairs):
RMSNorm, attention with wq, wk, wv, wo and no biases, rotary embeddings on q and k, a causal
softmax, a SwiGLU feed-forward w2(silu(w1 x) * w3 x), a final RMSNorm and an output head (lm_head:
llama2.c's `output`, a keyword in nnc's language).  Checked as tests/ref/test_gpt_torch.py checks
gpt.nn: nnc's initial parameters (--epochs 0 --save) load by name with load_state_dict(strict);
from them, on the same token windows, STEPS AdamW steps (weight decay for the matrices only,
as llama2.c's configure_optimizers and no_decay = [norm] give it; a warm-up then a cosine;
clip_grad_norm_) give every step's loss, rate and gradient norm, and the test loss after the
epoch, to 1e-5 relative in f32 and 1e-8 with --f64.

    test_llama_torch.py --nnc PATH [--f64] [--target cpu|cuda] [--tiny] [--batch N]

--tiny shrinks the model (2 layers, dim 32, 16 positions), for the emulator.  The tokens are
models/gpt_prepare.py's, from the licence texts under /usr/share/common-licenses (skipped, 77,
without them).
"""
import argparse
import json
import math
import os
import re
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nnc_ref  # noqa: E402
import test_gpt_torch as gt  # noqa: E402

ROOT = gt.ROOT
STEPS = gt.STEPS


class Config:
    def __init__(self, src):
        def const(name):
            m = re.search(r"^%s = ([0-9.e-]+)" % name, src, re.M)
            if not m:
                raise SystemExit("FAIL: llama.nn has no line '%s = ...'" % name)
            return float(m.group(1))
        self.dim, self.n_layers, self.n_heads = int(const("dim")), int(const("n_layers")), int(const("n_heads"))
        self.vocab_size, self.block_size = int(const("vocab_size")), int(const("max_seq_len"))
        self.hidden_dim, self.norm_eps, self.theta = int(const("hidden_dim")), const("norm_eps"), const("rope_theta")


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wq = nn.Linear(c.dim, c.dim, bias=False)
        self.wk = nn.Linear(c.dim, c.dim, bias=False)
        self.wv = nn.Linear(c.dim, c.dim, bias=False)
        self.wo = nn.Linear(c.dim, c.dim, bias=False)
        self.n_heads = c.n_heads

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        hd = C // self.n_heads
        q = self.wq(x).view(B, T, self.n_heads, hd).transpose(1, 2)
        k = self.wk(x).view(B, T, self.n_heads, hd).transpose(1, 2)
        v = self.wv(x).view(B, T, self.n_heads, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(torch.ones(T, T).tril() == 0, float("-inf"))
        y = torch.softmax(att, dim=-1) @ v
        return self.wo(y.transpose(1, 2).contiguous().view(B, T, C))


class FeedForward(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.w1 = nn.Linear(c.dim, c.hidden_dim, bias=False)
        self.w2 = nn.Linear(c.hidden_dim, c.dim, bias=False)
        self.w3 = nn.Linear(c.dim, c.hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention = Attention(c)
        self.feed_forward = FeedForward(c)
        self.attention_norm = RMSNorm(c.dim, c.norm_eps)
        self.ffn_norm = RMSNorm(c.dim, c.norm_eps)

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.tok_embeddings = nn.Embedding(c.vocab_size, c.dim)
        self.layers = nn.ModuleList([TransformerBlock(c) for _ in range(c.n_layers)])
        self.norm = RMSNorm(c.dim, c.norm_eps)
        self.lm_head = nn.Linear(c.dim, c.vocab_size, bias=False)
        self.c = c

    def forward(self, idx, targets):
        c, dt = self.c, self.lm_head.weight.dtype
        hd = c.dim // c.n_heads
        freqs = 1 / (c.theta ** (torch.arange(0, hd, 2, dtype=dt) / hd))
        ang = torch.outer(torch.arange(idx.size(1), dtype=dt), freqs)
        cos, sin = torch.cat((ang.cos(), ang.cos()), -1), torch.cat((ang.sin(), ang.sin()), -1)
        h = self.tok_embeddings(idx)
        for layer in self.layers:
            h = layer(h, cos, sin)
        logits = self.lm_head(self.norm(h))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def model_text(a):
    with open(os.path.join(ROOT, "models", "llama.nn")) as f:
        src = f.read()
    subs = [(r'tokens\("gpt_data/train\.bin"', 'tokens("train.bin"'),
            (r'tokens\("gpt_data/val\.bin"', 'tokens("val.bin"'),
            (r"epochs = \d+", "epochs = 1"), (r"warmup = \d+", "warmup = %d" % gt.WARMUP)]
    if a.tiny:
        subs += [(r"^n_layers = \d+", "n_layers = 2"), (r"^dim = \d+", "dim = 32"), (r"^hidden_dim = \d+", "hidden_dim = 96"),
                 (r"^max_seq_len = \d+", "max_seq_len = 16"), (r"block_size = 64\)", "block_size = 16)")]
    for pat, rep in subs:
        src, n = re.subn(pat, rep, src, flags=re.M)
        if n == 0:
            raise SystemExit("FAIL: llama.nn has no '%s' to replace" % pat)
    return src


def torch_optimizer(model, meta):
    """AdamW with weight decay for the matrices only (llama2.c's configure_optimizers; llama.nn's
    no_decay = [norm] spares its only 1-d parameters, the norms' weights) and warmup_cosine."""
    sched = re.fullmatch(r"warmup_cosine\(warmup=([^,]+), max_steps=([^,]+), min_lr=([^)]+)\)",
                         meta.get("nnc_lr_schedule", ""))
    if meta.get("nnc_optimizer") != "adamw" or meta.get("nnc_no_decay") != '["norm"]' or not sched:
        raise SystemExit("FAIL: llama.nn trains with %s, no_decay %s, schedule %s" % (
            meta.get("nnc_optimizer"), meta.get("nnc_no_decay"), meta.get("nnc_lr_schedule")))
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": float(meta["nnc_weight_decay"])},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    betas = tuple(float(b) for b in meta["nnc_betas"].strip("()").split(","))
    lr = float(meta["nnc_lr"])
    opt = torch.optim.AdamW(groups, lr=lr, betas=betas, eps=float(meta["nnc_eps"]))
    warmup, max_steps, min_lr = float(sched.group(1)), float(sched.group(2)), float(sched.group(3))
    rate = lambda it: gt.get_lr(it, lr, warmup, max_steps if max_steps > 0 else STEPS, min_lr)   # noqa: E731
    return opt, rate, float(meta["nnc_clip_grad_norm"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nnc", required=True)
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--f64", action="store_true", help="nnc --f64 against torch in float64")
    a = ap.parse_args()
    prec = "f64" if a.f64 else "f32"
    rtol = gt.RTOL[prec]
    if not os.path.isdir("/usr/share/common-licenses"):
        print("SKIP: no /usr/share/common-licenses")
        return 77
    torch.manual_seed(0)
    src = model_text(a)
    c = Config(src)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "m.nn"), "w") as f:
            f.write(src)
        train, val = gt.write_tokens(d, c, a.batch)
        flags = ["--batch", str(a.batch), "--target", a.target] + (["--f64"] if a.f64 else [])
        nnc_ref.run_nnc(a.nnc, ["m.nn", "--epochs", "0", "--save", "init.st"] + flags, d)
        nnc_ref.run_nnc(a.nnc, ["m.nn", "--metrics", "m.jsonl"] + flags, d)
        init, meta = nnc_ref.load_safetensors(os.path.join(d, "init.st"))
        losses, epochs = nnc_ref.read_metrics(os.path.join(d, "m.jsonl"))
        with open(os.path.join(d, "m.jsonl")) as f:
            records = [json.loads(line) for line in f]
    norms = [r["grad_norm"] for r in records if r["type"] == "step"]
    rates = [r["lr"] for r in records if r["type"] == "step"]
    dtype = torch.float64 if a.f64 else torch.float32
    model = Llama(c).to(dtype)
    sd = {k: torch.tensor(v, dtype=dtype) for k, v in init.items() if not k.startswith("optimizer.")}
    missing, unexpected = sorted(set(model.state_dict()) - set(sd)), sorted(set(sd) - set(model.state_dict()))
    ok = not missing and not unexpected
    print("%s nnc's %d parameter names load into the torch LLaMA (load_state_dict strict)%s" % (
        "ok  " if ok else "FAIL", len(sd), "".join("\n    torch has, nnc not: " + k for k in missing) +
        "".join("\n    nnc has, torch not: " + k for k in unexpected)))
    if not ok:
        return 1
    model.load_state_dict(sd, strict=True)
    gt.torch_optimizer = torch_optimizer   # gt.torch_run builds its optimizer through this name
    want, want_norms, want_rates, want_test = gt.torch_run(model, c, a.batch, meta, train, val)
    errs = []
    worst = gt.compare("loss", losses, want, rtol, STEPS, errs)
    gt.compare("lr", rates, want_rates, rtol, STEPS, errs)
    worst_norm = gt.compare("grad_norm", norms, want_norms, rtol, STEPS, errs)
    test = epochs[-1].get("test_loss") if epochs else None
    if test is None or not abs(test - want_test) <= rtol * abs(want_test):
        errs.append("test loss: nnc %r torch %.9g" % (test, want_test))
    nparams = sum(p.numel() for p in model.parameters())
    print("%s llama.nn (%d parameters%s, batch %d, %s, %s) against torch %s: %d AdamW steps, losses within %.2g "
          "(max rel diff %.2g), the largest grad norm difference %.2g; test loss %.9g vs %.9g%s" % (
              "FAIL" if errs else "ok  ", nparams, ", tiny" if a.tiny else "", a.batch, a.target, prec,
              torch.__version__, STEPS, rtol, worst, worst_norm, test if test is not None else float("nan"),
              want_test, "".join("\n    " + e for e in errs[:8])))
    print("    losses: %s ... %s" % (" ".join("%.5f" % x for x in want[:3]), " ".join("%.5f" % x for x in want[-3:])))
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
