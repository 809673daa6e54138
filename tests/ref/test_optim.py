"""nnc's optimizers (and gradient clipping) against a NumPy transcription of torch.optim's
update rules and against torch.optim itself (torch 1.13, float64).

The model is a linear regression whose gradient NumPy computes in closed form:
    loss = mse_loss(X @ W + b, y),  dP = 2 (P - y) / numel,  dW = X^T dP,  db = sum(dP, 0)
trained full-batch (one step per epoch, no shuffle) for STEPS steps by the nnc CLI from the
parameters it saves with --epochs 0.  Compared: the final parameters and optimizer state
(--save), and every step's loss (--metrics).  In float64 (--f64) nnc must agree with both
references to RTOL64; in float32 to RTOL32 (relative to the tensor's largest element).

    test_optim.py --nnc PATH [-k SUBSTRING] [--precision f64|f32]   (default: both)
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nnc_ref  # noqa: E402

STEPS = 8
N, D, K = 16, 4, 3
RTOL64 = 1e-10
RTOL32 = 1e-5
LOSS_PRINT_RTOL = 5e-9

CONFIGS = [
    ("sgd", "sgd(lr = 0.1)", dict(kind="sgd", lr=0.1)),
    ("sgd_momentum", "sgd(lr = 0.05, momentum = 0.9)", dict(kind="sgd", lr=0.05, momentum=0.9)),
    ("sgd_dampening", "sgd(lr = 0.05, momentum = 0.9, dampening = 0.3)", dict(kind="sgd", lr=0.05, momentum=0.9, dampening=0.3)),
    ("sgd_nesterov", "sgd(lr = 0.05, momentum = 0.8, nesterov = 1)", dict(kind="sgd", lr=0.05, momentum=0.8, nesterov=True)),
    ("sgd_weight_decay", "sgd(lr = 0.05, momentum = 0.9, weight_decay = 0.1)", dict(kind="sgd", lr=0.05, momentum=0.9, weight_decay=0.1)),
    ("sgd_wd_nesterov", "sgd(lr = 0.05, momentum = 0.5, weight_decay = 0.01, nesterov = 1)",
     dict(kind="sgd", lr=0.05, momentum=0.5, weight_decay=0.01, nesterov=True)),
    ("adam", "adam(lr = 0.01)", dict(kind="adam", lr=0.01)),
    ("adam_betas", "adam(lr = 0.03, beta1 = 0.8, beta2 = 0.99, eps = 1e-6)", dict(kind="adam", lr=0.03, betas=(0.8, 0.99), eps=1e-6)),
    ("adam_betas_pair", "adam(lr = 0.03, betas = (0.8, 0.99), eps = 1e-6)", dict(kind="adam", lr=0.03, betas=(0.8, 0.99), eps=1e-6)),
    ("adamw_betas_pair", "adamw(lr = 0.02, betas = (0.9, 0.95), weight_decay = 0.1)",
     dict(kind="adamw", lr=0.02, betas=(0.9, 0.95), weight_decay=0.1)),
    ("adam_weight_decay", "adam(lr = 0.01, weight_decay = 0.1)", dict(kind="adam", lr=0.01, weight_decay=0.1)),
    ("adamw", "adamw(lr = 0.01)", dict(kind="adamw", lr=0.01, weight_decay=1e-2)),
    ("adamw_weight_decay", "adamw(lr = 0.02, weight_decay = 0.3)", dict(kind="adamw", lr=0.02, weight_decay=0.3)),
    # learning-rate schedules (one step per epoch here, so each epoch's rate is one step's)
    ("sgd_step_lr", "sgd(lr = 0.1, momentum = 0.9)\n    lr_schedule = step_lr(step_size = 3, gamma = 0.5)",
     dict(kind="sgd", lr=0.1, momentum=0.9, sched=("step", dict(step_size=3, gamma=0.5)))),
    ("adam_exponential_lr", "adam(lr = 0.05)\n    lr_schedule = exponential_lr(gamma = 0.8)",
     dict(kind="adam", lr=0.05, sched=("exponential", dict(gamma=0.8)))),
    ("adamw_cosine_lr", "adamw(lr = 0.05, weight_decay = 0.2)\n    lr_schedule = cosine_lr(eta_min = 0.001)",
     dict(kind="adamw", lr=0.05, weight_decay=0.2, sched=("cosine", dict(T_max=STEPS, eta_min=0.001)))),
    ("sgd_linear_lr", "sgd(lr = 0.2, weight_decay = 0.01)\n    lr_schedule = linear_lr(start_factor = 0.25, total_iters = 4)",
     dict(kind="sgd", lr=0.2, weight_decay=0.01, sched=("linear", dict(start_factor=0.25, end_factor=1.0, total_iters=4)))),
    # gradient clipping before the update (torch.nn.utils.clip_grad_norm_ / clip_grad_value_); the
    # NumPy reference counts the steps it clipped, and a config that never clips fails
    ("sgd_clip_norm", "sgd(lr = 0.1, momentum = 0.9)\n    clip_grad_norm = 0.5",
     dict(kind="sgd", lr=0.1, momentum=0.9, clip_norm=0.5)),
    ("adamw_clip_norm", "adamw(lr = 0.05, weight_decay = 0.1)\n    clip_grad_norm = 1.5",
     dict(kind="adamw", lr=0.05, weight_decay=0.1, clip_norm=1.5)),
    ("adam_clip_value", "adam(lr = 0.05)\n    clip_grad_value = 0.1", dict(kind="adam", lr=0.05, clip_value=0.1)),
]

MODEL = """input X: f32[N, %d]
input y: f32[N, %d]
param W: f32[%d, %d] = normal(0, 1)
param b: f32[%d] = normal(0, 1)
loss = mse_loss(X @ W + b, y)
train {
    data X = npy("X.npy")
    data y = npy("y.npy")
    batch = %d
    shuffle = false
    epochs = %d
    optimizer = %s
    minimize loss
    seed = 5
}
"""


def grads(X, y, W, b):
    P = X @ W + b
    dP = 2 * (P - y) / P.size
    return ((P - y) ** 2).mean(), X.T @ dP, dP.sum(0)


def sched_lr(cfg, e):
    """The rate of 0-based epoch e: torch.optim.lr_scheduler's closed forms (_get_closed_form_lr)."""
    lr = cfg["lr"]
    if "sched" not in cfg:
        return lr
    kind, a = cfg["sched"]
    if kind == "step":
        return lr * a["gamma"] ** (e // a["step_size"])
    if kind == "exponential":
        return lr * a["gamma"] ** e
    if kind == "cosine":
        return a["eta_min"] + (lr - a["eta_min"]) * (1 + np.cos(np.pi * e / a["T_max"])) / 2
    f = min(e, a["total_iters"]) / a["total_iters"]
    return lr * (a["start_factor"] + (a["end_factor"] - a["start_factor"]) * f)


def torch_scheduler(cfg, opt):
    import torch
    if "sched" not in cfg:
        return None
    kind, a = cfg["sched"]
    S = torch.optim.lr_scheduler
    cls = {"step": S.StepLR, "exponential": S.ExponentialLR, "cosine": S.CosineAnnealingLR, "linear": S.LinearLR}[kind]
    return cls(opt, **a)


def numpy_optim(cfg, X, y, params):
    """torch.optim's single-tensor update rules (torch/optim/sgd.py, adam.py, adamw.py, 1.13)."""
    wd = cfg.get("weight_decay", 0.0)
    mom, damp, nest = cfg.get("momentum", 0.0), cfg.get("dampening", 0.0), cfg.get("nesterov", False)
    b1, b2 = cfg.get("betas", (0.9, 0.999))
    eps = cfg.get("eps", 1e-8)
    p = {k: v.copy() for k, v in params.items()}
    state = {k: {} for k in p}
    losses = []
    clipped, norms = 0, []
    for t in range(1, STEPS + 1):
        lr = sched_lr(cfg, t - 1)
        loss, gW, gb = grads(X, y, p["W"], p["b"])
        losses.append(loss)
        if "clip_value" in cfg:   # clip_grad_value_: clamp(-v, v)
            v = cfg["clip_value"]
            clipped += bool((np.abs(gW) > v).any() or (np.abs(gb) > v).any())
            gW, gb = np.clip(gW, -v, v), np.clip(gb, -v, v)
        if "clip_norm" in cfg:    # clip_grad_norm_: times min(max_norm / (total + 1e-6), 1)
            norms.append(np.sqrt((gW * gW).sum() + (gb * gb).sum()))
            coef = min(cfg["clip_norm"] / (norms[-1] + 1e-6), 1.0)
            clipped += coef < 1
            gW, gb = gW * coef, gb * coef
        for k, g in (("W", gW), ("b", gb)):
            s = state[k]
            if cfg["kind"] == "sgd":
                d = g + wd * p[k] if wd else g
                if mom:
                    s["momentum_buffer"] = d.copy() if t == 1 else mom * s["momentum_buffer"] + (1 - damp) * d
                    d = d + mom * s["momentum_buffer"] if nest else s["momentum_buffer"]
                p[k] = p[k] - lr * d
            else:
                if cfg["kind"] == "adamw":
                    p[k] = p[k] * (1 - lr * wd)
                elif wd:
                    g = g + wd * p[k]
                s["exp_avg"] = b1 * s.get("exp_avg", 0) + (1 - b1) * g
                s["exp_avg_sq"] = b2 * s.get("exp_avg_sq", 0) + (1 - b2) * g * g
                bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
                denom = np.sqrt(s["exp_avg_sq"]) / np.sqrt(bc2) + eps
                p[k] = p[k] - (lr / bc1) * s["exp_avg"] / denom
    if ("clip_norm" in cfg or "clip_value" in cfg) and not clipped:
        raise RuntimeError("the config never clips: the test would not see clipping ignored")
    return p, state, losses, [sched_lr(cfg, e) for e in range(STEPS)], norms


def torch_optim(cfg, X, y, params):
    import torch
    Xt, yt = torch.tensor(X, dtype=torch.float64), torch.tensor(y, dtype=torch.float64)
    W = torch.tensor(params["W"], dtype=torch.float64, requires_grad=True)
    b = torch.tensor(params["b"], dtype=torch.float64, requires_grad=True)
    kw = {"lr": cfg["lr"], "weight_decay": cfg.get("weight_decay", 0.0)}
    if cfg["kind"] == "sgd":
        opt = torch.optim.SGD([W, b], momentum=cfg.get("momentum", 0.0), dampening=cfg.get("dampening", 0.0),
                              nesterov=cfg.get("nesterov", False), **kw)
    else:
        cls = torch.optim.Adam if cfg["kind"] == "adam" else torch.optim.AdamW
        opt = cls([W, b], betas=cfg.get("betas", (0.9, 0.999)), eps=cfg.get("eps", 1e-8), **kw)
    sched = torch_scheduler(cfg, opt)
    losses, rates, norms = [], [], []
    for _ in range(STEPS):
        rates.append(opt.param_groups[0]["lr"])
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(Xt @ W + b, yt)
        loss.backward()
        if "clip_norm" in cfg:
            norms.append(torch.nn.utils.clip_grad_norm_([W, b], cfg["clip_norm"]).item())
        if "clip_value" in cfg:
            torch.nn.utils.clip_grad_value_([W, b], cfg["clip_value"])
        opt.step()
        if sched:
            sched.step()
        losses.append(loss.item())
    state = {}
    for k, t in (("W", W), ("b", b)):
        state[k] = {n: v.detach().numpy().copy() for n, v in opt.state[t].items() if n != "step" and v is not None}
    return {"W": W.detach().numpy().copy(), "b": b.detach().numpy().copy()}, state, losses, rates, norms


def read_steps(path):
    with open(path) as f:
        return [r for r in map(json.loads, f) if r["type"] == "step"]


def relerr(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def run_config(nnc, tmp, name, spec, cfg, f64, have_torch):
    d = os.path.join(tmp, name + ("_f64" if f64 else "_f32"))
    os.makedirs(d)
    rng = np.random.default_rng(99)
    X = rng.standard_normal((N, D)).astype(np.float32)
    y = rng.standard_normal((N, K)).astype(np.float32)
    np.save(os.path.join(d, "X.npy"), X)
    np.save(os.path.join(d, "y.npy"), y)
    with open(os.path.join(d, "m.nn"), "w") as f:
        f.write(MODEL % (D, K, D, K, K, N, STEPS, spec))
    extra = ["--f64"] if f64 else []
    nnc_ref.run_nnc(nnc, ["m.nn", "--epochs", "0", "--save", "init.safetensors"] + extra, d)
    nnc_ref.run_nnc(nnc, ["m.nn", "--save", "final.safetensors", "--metrics", "m.jsonl"] + extra, d)
    init, _ = nnc_ref.load_safetensors(os.path.join(d, "init.safetensors"))
    final, meta = nnc_ref.load_safetensors(os.path.join(d, "final.safetensors"))
    losses, epochs = nnc_ref.read_metrics(os.path.join(d, "m.jsonl"))
    params = {"W": init["W"], "b": init["b"]}
    X64, y64 = X.astype(np.float64), y.astype(np.float64)
    refs = [("numpy", numpy_optim(cfg, X64, y64, params))]
    if have_torch:
        refs.append(("torch", torch_optim(cfg, X64, y64, params)))
    tol = RTOL64 if f64 else RTOL32
    ok = True
    mode = "f64" if f64 else "f32"
    if len(losses) != STEPS:
        print("FAIL %-20s %s: %d step losses in --metrics, want %d" % (name, mode, len(losses), STEPS))
        return False
    steps = read_steps(os.path.join(d, "m.jsonl"))
    for rname, (p, state, rl, rates, norms) in refs:
        errs = {"W": relerr(final["W"], p["W"]), "b": relerr(final["b"], p["b"]), "loss": relerr(losses, rl)}
        if "clip_norm" in cfg:   # each step's total norm before clipping, as clip_grad_norm_ returns it
            got = [r.get("grad_norm", float("nan")) for r in steps]
            errs["grad_norm"] = relerr(got, norms) if len(got) == STEPS else float("inf")
        if "sched" in cfg:   # each epoch's rate as --metrics reports it, and the one the checkpoint keeps
            got = [r.get("lr", float("nan")) for r in epochs]
            errs["lr"] = relerr(got, rates) if len(got) == STEPS else float("inf")
            errs["optimizer.lr"] = relerr(final.get("optimizer.lr", np.nan), rates[-1])
        for k in ("W", "b"):
            for sname, v in state[k].items():
                key = "optimizer.%s.%s" % (k, sname)
                if key not in final:
                    print("  %s: no %s in the checkpoint (has %s)" % (name, key, sorted(final)))
                    ok = False
                    continue
                errs[key] = relerr(final[key], v)
        # --metrics prints losses with %.9g: they carry 9 significant digits, whatever the precision
        bad = {k: v for k, v in errs.items()
               if not v <= (max(tol, LOSS_PRINT_RTOL) if k in ("loss", "lr", "grad_norm") else tol)}
        worst = max(errs.values())
        print("%s %-20s %s vs %-5s %d steps  max rel %.3g  (%s)" % ("ok  " if not bad else "FAIL", name, mode, rname, STEPS,
                                                                  worst, ", ".join("%s %.2g" % kv for kv in errs.items())))
        ok &= not bad
    if ok and meta.get("nnc_step") not in (None, str(STEPS)):
        print("FAIL %s: checkpoint nnc_step %s, want %d" % (name, meta.get("nnc_step"), STEPS))
        ok = False
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nnc", required=True)
    ap.add_argument("-k", default="")
    ap.add_argument("--precision", choices=("f64", "f32"), help="only this precision (CTest runs each as a test)")
    a = ap.parse_args()
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
        print("torch is not installed: comparing with the NumPy transcription only")
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec, cfg in CONFIGS:
            if a.k not in name:
                continue
            for f64 in (True, False):
                if a.precision and a.precision != ("f64" if f64 else "f32"):
                    continue
                try:
                    ok = run_config(os.path.abspath(a.nnc), tmp, name, spec, cfg, f64, have_torch)
                except RuntimeError as e:
                    print("FAIL %s: %s" % (name, e))
                    ok = False
                passed += ok
                failed += not ok
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
