"""The training settings of a GPT recipe against PyTorch, step by step: learning-rate schedules
stepped per optimizer step (nanoGPT's get_lr as `warmup_cosine`, and torch's schedulers with
interval = "step"), AdamW parameter groups (`no_decay`), and gradient accumulation over
micro-batches (`accumulate`).

The model is a small MLP with a layer norm (fc1 -> ln -> tanh -> fc2, mse loss), named as
PyTorch names its modules.  nnc trains it from the parameters it saves with --epochs 0, on
batches in file order (shuffle = false), and reports every optimizer step's loss and rate
(--metrics); the reference is a torch.optim loop in float64 over the same batches, written as a
PyTorch user writes it:

    for it, group in enumerate(groups of `accumulate` batches):
        for g in opt.param_groups: g["lr"] = get_lr(it)          # or scheduler.step() after
        opt.zero_grad()
        for x, y in group: (loss(x, y) / accumulate).backward()
        opt.step()

Compared: each step's loss and rate, and the final parameters and optimizer state (--save).  In
float64 (--f64) to RTOL64, in float32 to RTOL32 (relative to the tensor's largest element).

    test_train_settings.py --nnc PATH [-k SUBSTRING] [--precision f64|f32] [--target cpu|cuda]
"""
import argparse
import math
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nnc_ref  # noqa: E402

N, D, H, K = 40, 5, 8, 3   # samples, inputs, hidden, outputs
RTOL64 = 1e-10
RTOL32 = 2e-5
LOSS_PRINT_RTOL = 5e-9     # --metrics prints %.9g

MODEL = """block Linear(n_in, n_out) {
    param weight: f32[n_out, n_in] = normal(0, 0.5)
    param bias:   f32[n_out]       = normal(0, 0.2)
    forward(x) = x @ transpose(weight) + bias
}
block LayerNorm(n) {
    param weight: f32[n] = normal(1, 0.2)
    param bias:   f32[n] = normal(0, 0.2)
    forward(x) = layer_norm(x, weight, bias)
}
input x: f32[B, %(D)d]
input y: f32[B, %(K)d]
fc1 = Linear(%(D)d, %(H)d)
ln = LayerNorm(%(H)d)
fc2 = Linear(%(H)d, %(K)d)
loss = mse_loss(fc2(tanh(ln(fc1(x)))), y)
train {
    data x = npy("x.npy")
    data y = npy("y.npy")
    batch = %(batch)d
    shuffle = false
    epochs = %(epochs)d
    optimizer = %(opt)s
%(extra)s    minimize loss
    seed = 11
}
"""

NAMES = ["fc1.weight", "fc1.bias", "ln.weight", "ln.bias", "fc2.weight", "fc2.bias"]


def get_lr(it, lr, warmup, max_steps, min_lr):
    """nanoGPT's train.py get_lr, transcribed."""
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it > max_steps:
        return min_lr
    ratio = (it - warmup) / (max_steps - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


# name, the optimizer as the train section writes it, more settings, the reference's config
CONFIGS = [
    ("warmup_cosine", "adamw(lr = 0.02, betas = (0.9, 0.95), weight_decay = 0.1)",
     "lr_schedule = warmup_cosine(warmup = 4, max_steps = 14, min_lr = 0.002)",
     dict(opt="adamw", lr=0.02, betas=(0.9, 0.95), wd=0.1, epochs=4, batch=8,
          lr_of=lambda it: get_lr(it, 0.02, 4, 14, 0.002))),
    ("warmup_cosine_run_length", "adam(lr = 0.01)", "lr_schedule = warmup_cosine(warmup = 3)",
     dict(opt="adam", lr=0.01, epochs=3, batch=8, lr_of=lambda it: get_lr(it, 0.01, 3, 15, 0.0))),
    ("step_lr_per_step", "sgd(lr = 0.1, momentum = 0.9)",
     "lr_schedule = step_lr(step_size = 4, gamma = 0.5, interval = step)",
     dict(opt="sgd", lr=0.1, momentum=0.9, epochs=3, batch=8, sched=("step", dict(step_size=4, gamma=0.5)))),
    ("cosine_lr_per_step", "adamw(lr = 0.02)", "lr_schedule = cosine_lr(eta_min = 0.001, interval = \"step\")",
     dict(opt="adamw", lr=0.02, wd=0.01, epochs=2, batch=16, sched=("cosine", dict(T_max=6, eta_min=0.001)))),
    # parameter groups: minGPT's kinds (biases, norm layers) and Hugging Face's name substrings
    ("adamw_no_decay", "adamw(lr = 0.02, weight_decay = 0.3, no_decay = [bias, norm])", "",
     dict(opt="adamw", lr=0.02, wd=0.3, epochs=2, batch=8,
          no_decay_names={"fc1.bias", "ln.weight", "ln.bias", "fc2.bias"})),
    ("adam_no_decay", "adam(lr = 0.01, weight_decay = 0.2, no_decay = \"norm\")", "",
     dict(opt="adam", lr=0.01, wd=0.2, epochs=2, batch=8, no_decay_names={"ln.weight", "ln.bias"})),
    ("sgd_no_decay_names", "sgd(lr = 0.05, momentum = 0.9, weight_decay = 0.05, no_decay = [\"ln.\", \"fc2.bias\"])", "",
     dict(opt="sgd", lr=0.05, momentum=0.9, wd=0.05, epochs=2, batch=8,
          no_decay_names={"ln.weight", "ln.bias", "fc2.bias"})),
    # gradient accumulation: 5 batches an epoch in groups of 3 (the last group 2 batches), of 4
    # (7 batches of 6 rows, the last of 4: groups 4, 3), and nanoGPT's whole recipe
    ("accumulate", "adamw(lr = 0.02, weight_decay = 0.1)", "accumulate = 3",
     dict(opt="adamw", lr=0.02, wd=0.1, epochs=2, batch=8, accumulate=3)),
    ("accumulate_sgd_short_batch", "sgd(lr = 0.05, momentum = 0.9)", "accumulate = 4",
     dict(opt="sgd", lr=0.05, momentum=0.9, epochs=2, batch=6, accumulate=4)),
    ("gpt_recipe", "adamw(lr = 0.02, betas = (0.9, 0.95), weight_decay = 0.1, no_decay = [bias, norm])",
     "lr_schedule = warmup_cosine(warmup = 2, max_steps = 6, min_lr = 0.002)\naccumulate = 2\nclip_grad_norm = 0.5",
     dict(opt="adamw", lr=0.02, betas=(0.9, 0.95), wd=0.1, epochs=2, batch=6, accumulate=2, clip_norm=0.5,
          no_decay_names={"fc1.bias", "ln.weight", "ln.bias", "fc2.bias"},
          lr_of=lambda it: get_lr(it, 0.02, 2, 6, 0.002))),
]


def make_opt(torch, cfg, params):
    """torch.optim over the parameters, in parameter groups when no_decay names some."""
    wd = cfg.get("wd", 0.0)
    plain = [params[n] for n in NAMES if n not in cfg.get("no_decay_names", ())]
    spared = [params[n] for n in NAMES if n in cfg.get("no_decay_names", ())]
    groups = [{"params": plain, "weight_decay": wd}] + ([{"params": spared, "weight_decay": 0.0}] if spared else [])
    if cfg["opt"] == "sgd":
        return torch.optim.SGD(groups, lr=cfg["lr"], momentum=cfg.get("momentum", 0.0))
    cls = torch.optim.AdamW if cfg["opt"] == "adamw" else torch.optim.Adam
    return cls(groups, lr=cfg["lr"], betas=cfg.get("betas", (0.9, 0.999)), eps=1e-8)


def torch_scheduler(torch, cfg, opt):
    if "sched" not in cfg:
        return None
    kind, a = cfg["sched"]
    S = torch.optim.lr_scheduler
    return {"step": S.StepLR, "cosine": S.CosineAnnealingLR}[kind](opt, **a)


def forward(torch, p, x):
    F = torch.nn.functional
    h = F.linear(x, p["fc1.weight"], p["fc1.bias"])
    h = F.layer_norm(h, (H,), p["ln.weight"], p["ln.bias"], eps=1e-5)
    return F.linear(torch.tanh(h), p["fc2.weight"], p["fc2.bias"])


def torch_train(cfg, X, Y, init):
    """The PyTorch loop of the module docstring: (step losses, step rates, params, state)."""
    import torch
    p = {n: torch.tensor(init[n], dtype=torch.float64, requires_grad=True) for n in NAMES}
    opt = make_opt(torch, cfg, p)
    sched = torch_scheduler(torch, cfg, opt)
    k, B = cfg.get("accumulate", 1), cfg["batch"]
    Xt, Yt = torch.tensor(X, dtype=torch.float64), torch.tensor(Y, dtype=torch.float64)
    losses, rates, it, clipped = [], [], 0, 0
    for _ in range(cfg["epochs"]):
        batches = [(Xt[i:i + B], Yt[i:i + B]) for i in range(0, N, B)]
        for g0 in range(0, len(batches), k):
            if "lr_of" in cfg:
                for group in opt.param_groups:
                    group["lr"] = cfg["lr_of"](it)
            rates.append(opt.param_groups[0]["lr"])
            opt.zero_grad()
            total, rows = 0.0, 0
            for x, y in batches[g0:g0 + k]:
                loss = torch.nn.functional.mse_loss(forward(torch, p, x), y)
                (loss / k).backward()
                total += loss.item() * len(x)
                rows += len(x)
            if "clip_norm" in cfg:
                norm = torch.nn.utils.clip_grad_norm_([p[n] for n in NAMES], cfg["clip_norm"]).item()
                clipped += norm > cfg["clip_norm"]
            opt.step()
            if sched:
                sched.step()
            losses.append(total / rows)
            it += 1
    if "clip_norm" in cfg and not clipped:
        raise RuntimeError("the config never clips: the test would not see clipping of the group's sum")
    state = {n: {s: v.detach().numpy().copy() for s, v in opt.state[p[n]].items() if s != "step"} for n in NAMES}
    return losses, rates, {n: p[n].detach().numpy().copy() for n in NAMES}, state


def relerr(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def run_config(nnc, tmp, name, opt, extra, cfg, f64, target):
    d = os.path.join(tmp, "%s_%s_%s" % (name, "f64" if f64 else "f32", target))
    os.makedirs(d)
    rng = np.random.default_rng(7)
    X = rng.standard_normal((N, D)).astype(np.float32)
    Y = rng.standard_normal((N, K)).astype(np.float32)
    np.save(os.path.join(d, "x.npy"), X)
    np.save(os.path.join(d, "y.npy"), Y)
    text = MODEL % dict(D=D, H=H, K=K, batch=cfg["batch"], epochs=cfg["epochs"], opt=opt,
                        extra="".join("    %s\n" % line for line in extra.split("\n") if line))
    with open(os.path.join(d, "m.nn"), "w") as f:
        f.write(text)
    flags = (["--f64"] if f64 else []) + ["--target", target]
    nnc_ref.run_nnc(nnc, ["m.nn", "--epochs", "0", "--save", "init.safetensors"] + flags, d)
    nnc_ref.run_nnc(nnc, ["m.nn", "--save", "final.safetensors", "--metrics", "m.jsonl"] + flags, d)
    init, _ = nnc_ref.load_safetensors(os.path.join(d, "init.safetensors"))
    final, _ = nnc_ref.load_safetensors(os.path.join(d, "final.safetensors"))
    steps = [r for r in map(__import__("json").loads, open(os.path.join(d, "m.jsonl"))) if r["type"] == "step"]
    losses, rates, params, state = torch_train(cfg, X.astype(np.float64), Y.astype(np.float64), init)
    tol = RTOL64 if f64 else RTOL32
    errs = {"steps": 0.0 if len(steps) == len(losses) else float("inf"),
            "loss": relerr([r["loss"] for r in steps], losses)}
    if "lr_of" in cfg or "sched" in cfg:
        errs["lr"] = relerr([r.get("lr", float("nan")) for r in steps], rates)
    for n in NAMES:
        errs[n] = relerr(final[n], params[n])
        for s, v in state[n].items():
            errs["optimizer.%s.%s" % (n, s)] = relerr(final.get("optimizer.%s.%s" % (n, s), np.nan), v)
    bad = {k: v for k, v in errs.items() if not v <= (max(tol, LOSS_PRINT_RTOL) if k in ("loss", "lr") else tol)}
    print("%s %-26s %s %-4s %2d steps  max rel %.3g%s" % (
        "ok  " if not bad else "FAIL", name, "f64" if f64 else "f32", target, len(losses), max(errs.values()),
        "" if not bad else "  (%s)" % ", ".join("%s %.3g" % kv for kv in bad.items())))
    return not bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nnc", required=True)
    ap.add_argument("-k", default="")
    ap.add_argument("--precision", choices=("f64", "f32"))
    ap.add_argument("--target", default="cpu", choices=("cpu", "cuda"))
    a = ap.parse_args()
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, opt, extra, cfg in CONFIGS:
            if a.k not in name:
                continue
            for f64 in (True, False):
                if a.precision and a.precision != ("f64" if f64 else "f32"):
                    continue
                try:
                    ok = run_config(os.path.abspath(a.nnc), tmp, name, opt, extra, cfg, f64, a.target)
                except RuntimeError as e:
                    print("FAIL %s: %s" % (name, e))
                    ok = False
                passed += ok
                failed += not ok
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
