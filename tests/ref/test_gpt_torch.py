"""models/gpt.nn against nanoGPT's model in PyTorch, step by step.

The torch module below is nanoGPT's GPT (model.py) written out again: nn.ModuleDict
`transformer` of wte, wpe, the blocks in an nn.ModuleList `h` (LayerNorm, causal self-attention
with the mask as a tril buffer and masked_fill, LayerNorm, a GELU MLP), ln_f, and lm_head tied
to wte.  Checked:
- the parameters nnc saves before training (--epochs 0 --save) load into it with
  load_state_dict(strict=True): nnc's names are torch's state_dict keys (transformer.h.0.attn.
  c_attn.weight), lm_head.weight being wte's, as the tie makes it;
- from those weights, on the same token windows (drawn as train/dataset.c draws them, through
  tests/ref/nnc_ref.py), with nanoGPT's optimizer as the checkpoint says gpt.nn's train section
  sets it (AdamW over two parameter groups, weight decay for the matrices only; nanoGPT's get_lr,
  a warm-up of WARMUP steps then a cosine over the run; clip_grad_norm_): every step's loss and
  rate and gradient norm for STEPS steps and the test loss after the epoch, to 1e-5 relative (f32:
  nnc and torch round differently, and the steps carry that on); with --f64, both in double, to
  1e-8 (what --metrics prints: 9 digits).

    test_gpt_torch.py --nnc PATH [--f64] [--target cpu|cuda] [--tiny] [--batch N] [--composed]

--target cuda runs nnc's CUDA target (the tests point it at the emulator); --tiny shrinks the
model (2 layers, n_embd 32), for the emulator.  gpt.nn's attention is nanoGPT's flash path,
y = scaled_dot_product_attention(q, k, v, dropout_p, is_causal = true), nnc's fused kernels,
against the torch model's masked softmax; --composed writes it as nanoGPT's manual path (q @ k.T,
masked_fill with tril, softmax, dropout, @ v, then y.transpose(1, 2).reshape(B, T, C)), nnc's
products and softmax against the same torch model.  The tokens are models/gpt_prepare.py's, from the
licence texts under /usr/share/common-licenses (skipped, 77, without them).
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nnc_ref  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS = 20
RTOL = {"f32": 1e-5, "f64": 1e-8}
VAL_BATCHES = 3
WARMUP = 5   # the schedule's warm-up, shortened to fit the STEPS steps (its cosine runs over them)


class Config:
    def __init__(self, src):
        def const(name):
            m = re.search(r"^%s = ([0-9.]+)" % name, src, re.M)
            if not m:
                raise SystemExit("FAIL: gpt.nn has no line '%s = ...'" % name)
            return float(m.group(1))
        self.n_layer, self.n_head, self.n_embd = int(const("n_layer")), int(const("n_head")), int(const("n_embd"))
        self.block_size, self.vocab_size = int(const("block_size")), int(const("vocab_size"))
        self.dropout = const("p_dropout")


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd)
        self.n_head, self.n_embd = c.n_head, c.n_embd
        # nanoGPT's causal mask (its non-flash path), not saved: nnc computes it in the kernel
        mask = torch.tril(torch.ones(c.block_size, c.block_size)).view(1, 1, c.block_size, c.block_size)
        self.register_buffer("bias", mask, persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.n_embd)
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c.n_embd)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c.vocab_size, c.n_embd),
            wpe=nn.Embedding(c.block_size, c.n_embd),
            h=nn.ModuleList([Block(c) for _ in range(c.n_layer)]),
            ln_f=nn.LayerNorm(c.n_embd),
        ))
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight   # weight tying

    def forward(self, idx, targets):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def model_text(a):
    with open(os.path.join(ROOT, "models", "gpt.nn")) as f:
        src = f.read()
    subs = [(r'tokens\("gpt_data/train\.bin"', 'tokens("train.bin"'),
            (r'tokens\("gpt_data/val\.bin"', 'tokens("val.bin"'),
            (r"epochs = \d+", "epochs = 1"), (r"warmup = \d+", "warmup = %d" % WARMUP)]
    if a.composed:   # nanoGPT's manual path, as gpt.nn's comment writes it
        subs += [(r"^( +)y = scaled_dot_product_attention\(q, k, v, dropout_p = p_dropout, is_causal = true\)$",
                  r"\1att = (q @ k.transpose(-2, -1)) * (1 / sqrt(hs))\n"
                  r"\1att = att.masked_fill(tril(ones(T, T)) == 0, -inf)\n"
                  r"\1att = dropout(softmax(att, axis = -1), p_dropout)\n"
                  r"\1y = att @ v"),
                 (r"y\.transpose\(1, 2\)\.contiguous\(\)\.view\(B, T, n_embd\)", "y.transpose(1, 2).reshape(B, T, n_embd)")]
    if a.tiny:
        subs += [(r"^n_layer = \d+", "n_layer = 2"), (r"^n_embd = \d+", "n_embd = 32"),
                 (r"^block_size = \d+", "block_size = 16"), (r"block_size = 64\)", "block_size = 16)")]
    for pat, rep in subs:
        src, n = re.subn(pat, rep, src, flags=re.M)
        if n == 0:
            raise SystemExit("FAIL: gpt.nn has no '%s' to replace" % pat)
    return src


def write_tokens(d, c, batch):
    """train.bin of exactly STEPS batches of windows, val.bin of VAL_BATCHES, from gpt_prepare.py."""
    full = os.path.join(d, "full")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "models", "gpt_prepare.py"), "--out", full],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("FAIL: gpt_prepare.py: %s" % r.stderr)
    tok = np.fromfile(os.path.join(full, "train.bin"), dtype="<u2").astype(np.int64)
    n_train, n_val = STEPS * batch * c.block_size + 1, VAL_BATCHES * batch * c.block_size + 1
    if len(tok) < n_train + n_val:
        print("SKIP: %d tokens of licence text, %d needed" % (len(tok), n_train + n_val))
        sys.exit(77)
    train, val = tok[:n_train], tok[n_train:n_train + n_val]
    train.astype("<u2").tofile(os.path.join(d, "train.bin"))
    val.astype("<u2").tofile(os.path.join(d, "val.bin"))
    return train, val


def windows(tok, starts, T):
    x = np.stack([tok[s:s + T] for s in starts])
    y = np.stack([tok[s + 1:s + 1 + T] for s in starts])
    return torch.tensor(x), torch.tensor(y)


def load_into_torch(c, init, dtype):
    """The GPT with nnc's initial parameters, loaded by name; the names that did not match."""
    model = GPT(c).to(dtype)
    sd = {k: torch.tensor(v, dtype=dtype) for k, v in init.items() if not k.startswith("optimizer.")}
    sd["lm_head.weight"] = sd.get("transformer.wte.weight")
    missing, unexpected = set(model.state_dict()) - set(sd), set(sd) - set(model.state_dict())
    if not missing and not unexpected:
        model.load_state_dict(sd, strict=True)
    return model, sorted(missing), sorted(unexpected), len(sd)


def get_lr(it, lr, warmup, decay_iters, min_lr):
    """nanoGPT's train.py get_lr."""
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it > decay_iters:
        return min_lr
    coeff = 0.5 * (1.0 + math.cos(math.pi * (it - warmup) / (decay_iters - warmup)))
    return min_lr + coeff * (lr - min_lr)


def torch_optimizer(model, meta):
    """nanoGPT's configure_optimizers (decay for parameters of 2 or more dimensions, none for the
    rest) and its get_lr, as the checkpoint says gpt.nn's train section sets them."""
    sched = re.fullmatch(r"warmup_cosine\(warmup=([^,]+), max_steps=([^,]+), min_lr=([^)]+)\)",
                         meta.get("nnc_lr_schedule", ""))
    if meta.get("nnc_optimizer") != "adamw" or meta.get("nnc_no_decay") != '["bias", "norm"]' or not sched:
        raise SystemExit("FAIL: gpt.nn trains with %s, no_decay %s, schedule %s: this test knows nanoGPT's AdamW, "
                         "no_decay = [bias, norm] and warmup_cosine" % (meta.get("nnc_optimizer"),
                                                                         meta.get("nnc_no_decay"),
                                                                         meta.get("nnc_lr_schedule")))
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": float(meta["nnc_weight_decay"])},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    betas = tuple(float(b) for b in meta["nnc_betas"].strip("()").split(","))
    lr = float(meta["nnc_lr"])
    opt = torch.optim.AdamW(groups, lr=lr, betas=betas, eps=float(meta["nnc_eps"]))
    warmup, max_steps, min_lr = float(sched.group(1)), float(sched.group(2)), float(sched.group(3))
    rate = lambda it: get_lr(it, lr, warmup, max_steps if max_steps > 0 else STEPS, min_lr)   # noqa: E731
    clip = float(meta["nnc_clip_grad_norm"]) if meta.get("nnc_clip_grad_norm", "none") != "none" else math.inf
    return opt, rate, clip


def torch_run(model, c, batch, meta, train, val):
    """Losses, gradient norms, rates and the test loss of STEPS steps."""
    opt, rate, clip = torch_optimizer(model, meta)
    starts = nnc_ref.token_windows(len(train), c.block_size, int(meta.get("nnc_seed", 0)), 1)
    losses, norms, rates = [], [], []
    for s in range(STEPS):
        x, y = windows(train, starts[s * batch:(s + 1) * batch], c.block_size)
        for g in opt.param_groups:
            g["lr"] = rate(s)
        rates.append(rate(s))
        loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip)))
        opt.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        vs = np.arange((len(val) - 1) // c.block_size) * c.block_size
        test = np.mean([model(*windows(val, vs[i:i + batch], c.block_size)).item() for i in range(0, len(vs), batch)])
    return losses, norms, rates, test


def compare(name, got, want, rtol, steps, errs):
    """The largest relative difference; the first `steps` steps must be within rtol."""
    worst = 0.0
    for i, (g, w) in enumerate(zip(got, want)):
        rel = abs(g - w) / abs(w)
        worst = max(worst, rel)
        if not rel <= rtol and i < steps:
            errs.append("step %d %s: nnc %.9g torch %.9g" % (i + 1, name, g, w))
    if len(got) != len(want):
        errs.append("%d %ss from nnc, want %d" % (len(got), name, len(want)))
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nnc", required=True)
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--f64", action="store_true", help="nnc --f64 against torch in float64")
    ap.add_argument("--composed", action="store_true",
                    help="gpt.nn's attention as products, a mask and a softmax, as nanoGPT's manual path")
    a = ap.parse_args()
    prec = "f64" if a.f64 else "f32"
    rtol = RTOL[prec]
    if not os.path.isdir("/usr/share/common-licenses"):
        print("SKIP: no /usr/share/common-licenses")
        return 77
    torch.manual_seed(0)
    src = model_text(a)
    c = Config(src)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "m.nn"), "w") as f:
            f.write(src)
        train, val = write_tokens(d, c, a.batch)
        flags = ["--batch", str(a.batch), "--target", a.target] + (["--f64"] if a.f64 else [])
        nnc_ref.run_nnc(a.nnc, ["m.nn", "--epochs", "0", "--save", "init.st"] + flags, d)
        nnc_ref.run_nnc(a.nnc, ["m.nn", "--metrics", "m.jsonl"] + flags, d)
        init, meta = nnc_ref.load_safetensors(os.path.join(d, "init.st"))
        losses, epochs = nnc_ref.read_metrics(os.path.join(d, "m.jsonl"))
        with open(os.path.join(d, "m.jsonl")) as f:
            records = [json.loads(line) for line in f]
    norms = [r["grad_norm"] for r in records if r["type"] == "step"]
    rates = [r["lr"] for r in records if r["type"] == "step"]
    model, missing, unexpected, nnames = load_into_torch(c, init, torch.float64 if a.f64 else torch.float32)
    ok = not missing and not unexpected
    print("%s nnc's %d parameter names load into nanoGPT's GPT (load_state_dict strict, lm_head.weight tied)%s" % (
        "ok  " if ok else "FAIL", nnames - 1, "".join("\n    torch has, nnc not: " + k for k in missing) +
        "".join("\n    nnc has, torch not: " + k for k in unexpected)))
    if not ok:
        return 1
    nparams = sum(p.numel() for p in model.parameters())
    want, want_norms, want_rates, want_test = torch_run(model, c, a.batch, meta, train, val)
    errs = []
    worst = compare("loss", losses, want, rtol, STEPS, errs)
    compare("lr", rates, want_rates, rtol, STEPS, errs)   # printed to 9 digits
    worst_norm = compare("grad_norm", norms, want_norms, rtol, STEPS, errs)
    test = epochs[-1].get("test_loss") if epochs else None
    if test is None or not abs(test - want_test) <= rtol * abs(want_test):
        errs.append("test loss: nnc %r torch %.9g" % (test, want_test))
    norm1 = abs(norms[0] - want_norms[0]) / want_norms[0] if norms else float("nan")
    print("%s gpt.nn (%d parameters%s, batch %d, %s, %s) against torch %s: %d AdamW steps (no_decay, "
          "warmup_cosine), losses within %.2g (max rel diff %.2g), grad norms: step 1 %.2g, the largest %.2g; "
          "test loss %.9g vs %.9g%s" % (
              "FAIL" if errs else "ok  ", nparams, (", tiny" if a.tiny else "") + (", composed" if a.composed else ""), a.batch, a.target, prec,
              torch.__version__, STEPS, rtol, worst, norm1, worst_norm, test if test is not None else float("nan"),
              want_test, "".join("\n    " + e for e in errs[:8])))
    print("    losses: %s ... %s" % (" ".join("%.5f" % x for x in want[:3]), " ".join("%.5f" % x for x in want[-3:])))
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
