"""The tensor ops a transformer is written with, against PyTorch: each forward value, the loss and
every parameter's gradient.

Each case is one .nn model holding several ops (few compiles: CI runs this on 2 cores), with
its inputs, parameters, `output NAME = expr` lines and a loss, and the same computation in
torch.  It runs through tests/numeric/run_model (NNC_ENTRY_EVAL for the outputs and the loss,
NNC_ENTRY_GRAD for grad.P), fused and unfused in float64 and fused in float32, and every value
is compared with torch.autograd in float64: |nnc - torch| <= RTOL * |torch| + ATOL * max(1,
max|torch|), 1e-10 in float64 and 1e-5 in float32.  (The float64 finite differences of the
same ops are tests/numeric/gradcheck.c's cases.)

    test_tensor_ops_torch.py --run-model PATH [--cuda] [-k SUBSTRING]

--cuda runs the float32 models on the CUDA target; exit 77 (skipped) where there is none.
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
import warnings

warnings.filterwarnings("ignore", message="reduction: .mean. divides")

TOL = {"f64": (1e-10, 1e-10), "f32": (1e-5, 1e-5)}
BATCH = 3
rng = np.random.default_rng(27)


class Case:
    """inputs: name -> (dtype, per-sample shape[, classes for i32]); params: name -> shape, in the
    order the model declares them; body: the model's lines after the declarations; torch: a
    function of a dict of float64 tensors (inputs and params) giving (loss, {output: value})."""

    def __init__(self, name, inputs, params, body, torch_fn):
        self.name, self.inputs, self.params, self.body, self.torch = name, inputs, params, body, torch_fn

    def model(self):
        lines = []
        for n, (dt, shape, *_) in self.inputs.items():
            lines.append("input %s: %s[%s]" % (n, dt, ", ".join(["B"] + [str(d) for d in shape])))
        for n, shape in self.params.items():
            lines.append("param %s: f32[%s] = zeros()" % (n, ", ".join(str(d) for d in shape)))
        data = "".join('    data %s = npy("%s.npy")\n' % (n, n) for n in self.inputs)
        return "\n".join(lines) + "\n" + self.body + "\ntrain {\n" + data + \
            "    batch = %d\n    minimize loss\n}\n" % BATCH


def merge_batch(t):
    h = torch.tanh(t["x"] @ t["W"])                    # [B, 3, 5]
    m = h.reshape(-1, 5)                               # [B*3, 5]
    z = m @ t["V"]
    back = torch.softmax(z, -1).reshape(BATCH, 3, 5)
    r = back.sum(1)
    f = torch.flatten(h, 0, 1)
    g = m.T @ m                                        # the contraction runs over B*3
    wide = h.reshape(3, -1)                            # [3, B*5]: the batch axis last, merged
    loss = (F.cross_entropy(z, t["y"].reshape(-1).long()) + (r * r).sum() + (f * m).mean()
            + (torch.log_softmax(h.reshape(BATCH * 3, 5), -1) * 0.1).sum() + (g * t["V"]).sum() * 0.1
            + (torch.tanh(wide) * wide).sum() + (m.mean(0) * t["c"]).sum()
            + (F.layer_norm(m, (5,)) * t["c"]).sum())
    return loss, {"z": z, "r": r, "g": g, "wide": wide, "col": m.mean(0)}


def permute(t):
    h = t["x"] @ t["W"]                                # [B, 4, 3, 2]
    q = h.permute(0, 2, 1, 3)                          # [B, 3, 4, 2]: heads first, as attention
    k = t["x"].permute(0, 2, 1, 3)
    att = q @ k.transpose(-2, -1)                      # [B, 3, 4, 4]
    y = torch.tanh(att).transpose(1, 2)                # [B, 4, 3, 4]
    s = torch.swapaxes(att, 1, 3) * t["c"].reshape(4, 1, 1)
    z = h.permute(1, 0, 3, 2)                          # the batch axis second
    m = h.reshape(-1, 3, 2).permute(2, 1, 0)           # [2, 3, B*4]: a merged batch axis last
    w = t["W"].transpose(0, 1) @ t["W"].permute(1, 0)
    loss = ((y * y).sum() + (torch.tanh(s) * s).sum() + (torch.tanh(z) * z).sum() + (m * m).sum() * 0.5
            + (w * w).sum() + (q * t["x"].transpose(1, 2)).sum())
    return loss, {"y": y, "z": z, "m": m, "s": s}


def split(t):
    qkv = t["x"] @ t["W"]                              # [B, 4, 9]
    q, k, v = qkv.split(3, dim=2)
    a, b = torch.split(torch.tanh(qkv), (4, 5), dim=-1)
    c1, c2, c3 = torch.chunk(qkv.reshape(-1, 9), 3, 1)   # on the merged batch axis
    p0, p1, p2 = torch.split(qkv, 4, 2)                # the last piece shorter
    e1, e2 = torch.chunk(t["W"], 2, 0)                 # 3 + 3 rows of a parameter
    g0, g1 = (qkv * 2)[:, :, 0:2], (qkv * 2)[:, :, 5:7]   # two slices with gaps around them
    o0, o1 = qkv[:, :, 0:5], qkv[:, :, 3:9]            # two that overlap
    loss = ((torch.tanh(q) * k * v).sum() + (a * a).sum() + b.sum() * 0.5 + (c1 * c2 - c3).sum()
            + (p0 * p1).sum() + (p2 * p2).sum() + (e1 * e2).sum() + (g0 * g1).sum() + (o0[..., :1] * o1[..., :1]).sum())
    return loss, {"q": q, "b": b, "c3": c3, "p2": p2}


def masks(t):
    x, W = t["x"], t["W"]                              # x [B, 2, 4, 4]
    att = x @ W
    causal = torch.tril(torch.ones(4, 4))
    a = att.masked_fill(causal == 0, float("-inf"))
    p = torch.softmax(a, -1)                           # rows with -inf: exp(-inf) = 0
    r = torch.arange(4.0)
    m2 = (r <= r.reshape(4, 1)).double()
    w = torch.where(m2 > 0, att, torch.full((4, 4), 0.5, dtype=torch.float64))
    wb = torch.where(att > 0.1, att * 2, W)            # broadcast, both sides differentiable
    y = t["y"]
    lbl = (y == 1).double() + (y != 2).double() * 2 + (y >= 2).double() * 4 + (y < 1).double() * 8
    cmp = ((att > W).double() + (0.2 < att).double() * 2 + torch.le(att, 0.3).double() * 4
           + torch.ge(W, att).double() * 8 + (att == att).double() * 16)
    tri = torch.triu(att, 1) + torch.tril(att, -1) * 2 + torch.triu(torch.tanh(att), -2) * 3
    ar = torch.arange(1, 2, 0.25) + torch.arange(5.0, 1.0, -1.5).sum()
    allinf = torch.softmax(att.masked_fill(torch.ones(4, 4) > 0, float("-inf")), -1)   # NaN, as torch
    loss = ((p * att).sum() + (torch.tanh(w) * w).sum() + (wb * wb).sum() + (tri * tri).sum()
            + torch.where(m2 > 0, torch.tanh(att), -att).sum() + (torch.zeros(3, 4) + W[:3]).sum()
            + (torch.ones((4,)) * W).sum())
    return loss, {"p": p, "lbl": lbl, "cmp": cmp, "tri": tri, "ar": ar, "allinf": allinf, "m2": m2}


def attention(t):
    B, T, C, H = BATCH, 4, 8, 2
    q, k, v = (t["x"] @ t["Wqkv"]).split(C, dim=2)
    q = q.view(B, T, H, C // H).transpose(1, 2)
    k = k.view(B, T, H, C // H).transpose(1, 2)
    v = v.view(B, T, H, C // H).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / (C // H) ** 0.5)
    att = att.masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf"))
    att = torch.softmax(att, dim=-1)
    y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
    logits = y @ t["Wo"]
    loss = F.cross_entropy(logits.view(-1, C), t["y"].view(-1).long())
    return loss, {"att": att, "logits": logits}


def sdpa_def(q, k, v, is_causal=False, scale=None):
    """F.scaled_dot_product_attention as torch's documentation defines it (Debian's torch predates it)."""
    s = q @ k.transpose(-2, -1) * (1 / q.shape[-1] ** 0.5 if scale is None else scale)
    if is_causal:
        s = s.masked_fill(torch.ones(q.shape[-2], k.shape[-2]).tril() == 0, float("-inf"))
    return torch.softmax(s, -1) @ v


sdpa = getattr(F, "scaled_dot_product_attention", sdpa_def)


def attention_fused(t):
    B, T, C, H = BATCH, 5, 8, 2
    q, k, v = (t["x"] @ t["Wqkv"]).split(C, dim=2)
    u = sdpa(q, k, v, is_causal=True)                  # one head of C, straight from the split
    q = q.view(B, T, H, C // H).transpose(1, 2)
    k = k.view(B, T, H, C // H).transpose(1, 2)
    v = v.view(B, T, H, C // H).transpose(1, 2)
    o = sdpa(q, k, v, is_causal=True)
    h = o.transpose(1, 2).contiguous().view(B, T, C)
    logits = h @ t["Wo"]
    # the heads merged with the batch ([B*H, T, D]) and the batch axis second ([H, B, T, D])
    m = sdpa(q.reshape(-1, T, C // H), k.reshape(B * H, T, C // H), torch.tanh(v).reshape(B * H, T, C // H),
             is_causal=True).view(B, H, T, C // H)
    s = sdpa(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), scale=0.3)
    loss = (F.cross_entropy(logits.view(-1, C), t["y"].view(-1).long()) + (torch.tanh(m) * q).sum()
            + (s * s).sum() * 0.5 + (torch.tanh(u) * u).sum())
    return loss, {"o": o, "logits": logits, "m": m, "s": s, "u": u}


def torch_functions(t):
    x, y, W, V, g = t["x"], t["y"], t["W"], t["V"], t["g"]
    h = x @ W                                          # [B, 4, 6]
    u = h.unsqueeze(1)                                 # [B, 1, 4, 6]
    sq = u.squeeze(1) + u.squeeze() * 0.5
    st = torch.stack((h, torch.tanh(h)), dim=1)        # [B, 2, 4, 6]
    st2 = torch.stack([h[:, 0], h[:, 1]], -1)          # [B, 6, 2]
    rms = F.rms_norm(h, (6,), g, 1e-6) if hasattr(F, "rms_norm") else \
        h * torch.rsqrt((h * h).mean(-1, keepdim=True) + 1e-6) * g
    rms0 = h * torch.rsqrt((h * h).mean(-1, keepdim=True) + torch.finfo(torch.float32).eps)
    vr = h.var(-1)
    vr2 = h.var((1, 2), correction=0)
    std = h.std(2, keepdim=True)
    mx = h.amax(-1) + torch.amin(h, dim=(0, 2)).sum()
    swiglu = F.silu(h) * (h @ V)                       # a LLaMA feed-forward's gate
    ang = h * 0.7
    rope = h * torch.cos(ang) + torch.flip(h, [-1]) * 0 + torch.sin(ang) * 0.3
    z = h.reshape(-1, 6)
    nll = F.nll_loss(torch.log_softmax(z, -1), y.reshape(-1).long())
    tgt = torch.sigmoid(h.detach() * 0.5)
    loss = ((sq * sq).sum() + (st * st).mean() + st2.sum() * 0.1 + (rms * rms).sum() + (rms0 * h).sum()
            + vr.sum() + (vr2 * vr2).sum() * 2 + std.sum() + mx.sum() + (swiglu * swiglu).sum() * 0.1 + rope.sum()
            + nll + F.l1_loss(h, torch.tanh(h)) + F.l1_loss(h, sq, reduction="sum") * 0.1
            + F.mse_loss(h, torch.tanh(h), reduction="sum") * 0.1
            + F.binary_cross_entropy_with_logits(h, tgt) + F.binary_cross_entropy_with_logits(h * 2, tgt, reduction="sum") * 0.1
            + (F.l1_loss(h, sq, reduction="none") * h).sum() * 0.1)
    return loss, {"st": st, "rms": rms, "vr": vr, "vr2": vr2, "sd": std, "mx": mx, "swiglu": swiglu}


def torch_functions2(t):
    x, W, b, V = t["x"], t["W"], t["b"], t["V"]
    h = F.linear(x, W, b)                              # [B, 4, 6]
    h2 = F.linear(x, W)
    z = torch.zeros_like(h) + torch.ones_like(h) * 2 + torch.full_like(h, 0.5) * h2
    m = V.t() @ torch.mm(V, V.t())                     # [6, 6] @ [6, 6]
    g = torch.bmm(h, h.transpose(1, 2))                # [B, 4, 4]
    o = torch.outer(b, b[:5])
    e = b.reshape(6, 1).expand(6, 4).t() + b.expand(4, 6) * 0.5
    e3 = h.sum(dim=1, keepdim=True).expand(-1, 4, -1)
    loss = ((z * z).sum() + (m * m).sum() * 0.01 + torch.tanh(g).sum() + o.sum() + (e * h).sum()
            + (e3 * h).sum() * 0.1 + h.clone().mean())
    v = h.reshape(h.size(0), -1) * h.ndim + h.size(-1)     # B, T, C = h.size(), and the like
    loss = loss + (v * v).mean()
    return loss, {"z": z, "m": m, "g": g, "o": o, "e": e, "e3": e3, "v": v}


def torch_norms(t):
    x, W, g, b = t["x"], t["W"], t["g"], t["b"]
    h = torch.tanh(x @ W)                              # [B, 4, 6]
    z = h * (torch.arange(6.0) >= 2).double()          # columns 0 and 1 zero: a zero norm over dim 0 of a row
    n2 = h.norm(dim=-1) + torch.norm(h, p=1, dim=(1, 2)).sum() * 0.1 + h.norm()
    nz = torch.norm(z[:, :, :2], dim=-1)               # all zero: the gradient 0, as torch masks it
    u = F.normalize(h, dim=-1) + F.normalize(z, p=1, dim=2, eps=1e-6) + F.normalize(h.transpose(1, 2)).transpose(1, 2)
    gn = F.group_norm(h.reshape(BATCH, 6, 2, 2), 3, g, b) + F.group_norm(h.reshape(BATCH, 6, 4), 2, eps=1e-3).reshape(BATCH, 6, 2, 2)
    gn2 = F.group_norm(h.reshape(BATCH * 4, 6), 2, g)
    ln = F.layer_norm(h, (6,), g, b) + F.layer_norm(h, (4, 6)) + h * torch.rsqrt((h * h).mean(-1, keepdim=True) + 1e-5) * g
    loss = ((ln * ln).sum() + (n2 * n2).sum() + (nz * nz).sum() + nz.sum() + (u * u * h).sum() + (gn * torch.tanh(gn)).sum()
            + (gn2 * h.reshape(BATCH * 4, 6)).sum())
    return loss, {"n2": n2, "nz": nz, "u": u, "gn": gn, "gn2": gn2, "ln": ln}


def torch_moves(t):
    x, W = t["x"], t["W"]
    h = torch.tanh(x @ W)                              # [B, 4, 6]
    p = F.pad(h, (1, 2)) + F.pad(h, (0, 3), value=0.5) # [B, 4, 9]
    p2 = F.pad(h, (2, 0, 1, 1))                        # [B, 6, 8]
    r = h.repeat(1, 2, 1) * 0.5 + torch.tile(h, (2, 1))   # [B, 8, 6]
    r2 = h[:, 0].repeat(2, 1, 3)                       # [2, B, 18]: a new axis in front
    o = torch.roll(h, 2, -1) + torch.roll(h, shifts=(-1, 7), dims=(1, 2))
    f = torch.flip(h, (-1,)) + torch.flip(h, [1, 2]) * 0.5 + torch.flip(h[:, :, ::2], (2,)).repeat(1, 1, 2)
    ix = h[:, -1, :] + h[..., 1:3].sum(-1)[:, :1] * h[:, 1:-1, 2].mean(-1, keepdim=True) + h[:, ::3][:, 1] * W[1, :6]
    ix2 = h[..., -1] * W[-1, 2] + W[1:3, ::2].sum()
    loss = ((p * p).sum() + (p2 * torch.tanh(p2)).sum() + (r * r).sum() + r2.sum() * 0.1 + (o * h).sum()
            + (f * torch.tanh(h)).sum() + (ix * ix).sum() + torch.tanh(ix2).sum())
    return loss, {"p": p, "p2": p2, "r": r, "r2": r2, "o": o, "f": f, "ix": ix, "ix2": ix2}


def torch_argmax(t):
    x, W, y = t["x"], t["W"], t["y"]
    h = torch.tanh(x @ W)                              # [B, 4, 6]
    g = torch.round(h * 2) / 2                         # ties: the first maximum, as torch's
    p = torch.argmax(g, dim=-1).double()
    q = g.argmax(1, keepdim=True).double()
    hits = (torch.argmax(h, -1) == y).double().mean()
    loss = (h * h).sum() + hits * 0
    return loss, {"p": p, "q": q, "hits": hits}


def torch_losses2(t):
    x, W, y = t["x"], t["W"], t["y"]
    h = torch.tanh(x @ W) * 2                          # [B, 4, 6]
    g = torch.round(h * 2) / 2
    am = torch.argmin(g, dim=-1).double()
    am2 = g.argmin(1, keepdim=True).double()
    oh = F.one_hot(y.long(), 6).double()               # [B, 4, 6]
    s1 = F.smooth_l1_loss(h, oh) + F.smooth_l1_loss(h, oh, beta=0.5, reduction="sum") * 0.1
    hu = F.huber_loss(h, oh, delta=2.0) + (F.huber_loss(h, oh, reduction="none") * oh).sum()
    ga = h.gather(2, y.unsqueeze(-1)) + torch.take_along_dim(h, y.unsqueeze(-1), 2) * 2 \
        + torch.index_select(h, 2, W.argmax(0))[..., :1]
    gb = torch.gather(h[..., :3], 1, torch.argmax(h.reshape(-1, 4, 2, 3), 1))
    nl = F.nll_loss(h.transpose(1, 2), y) + F.nll_loss(F.log_softmax(h, -1).reshape(-1, 6), y.reshape(-1), reduction="sum") \
        * 0.1 + F.nll_loss(h.reshape(-1, 6), y.view(-1), ignore_index=2)
    nn_ = F.nll_loss(h.transpose(1, 2), y, reduction="none", ignore_index=3)
    loss = s1 + hu + (oh * h).sum() + (ga * ga).sum() + (gb * torch.tanh(gb)).sum() + nl + (nn_ * nn_).sum()
    return loss, {"nl": nl, "nn": nn_, "am": am, "am2": am2, "oh": oh, "s1": s1, "hu": hu, "ga": ga, "gb": gb}


def torch_divmod(t):
    x, W, V = t["x"], t["W"], t["V"]
    h = torch.tanh(x @ W) * 5                          # [B, 4, 6]
    d = V.abs() + 0.5                                  # a divisor with a gradient
    fl = lambda a, b: torch.div(a, b, rounding_mode="floor")   # `//` (floor_divide), whose gradient is this: 0
    fd = fl(h, 0.7) + fl(h, -1.3) + fl(-h, d)
    assert torch.equal(fd, h // 0.7 + torch.floor_divide(h, -1.3) + (-h) // d)
    r = h % 0.7 + torch.remainder(h, -1.3) + h % d + (-h) % d * 2
    fm = torch.fmod(h, 0.6) + torch.fmod(-h, d) + torch.fmod(h, -d) * 0.5
    c = h * (7 // 2) + (-7 % 3) + (-7.5 // 2) * (7.5 % -2)
    loss = (r * r).sum() + (fm * h).sum() + (fd * h).sum() + c.sum()
    return loss, {"fd": fd, "r": r, "fm": fm, "c": c}


def torch_maxdim(t):
    x, W = t["x"], t["W"]
    h = torch.tanh(x @ W)                              # [B, 4, 6]
    g = torch.round(h * 2) / 2 + h * 0                 # ties, with a gradient: the first maximum's
    v, i = g.max(dim=2)
    c = g.min(1)[0]
    d = torch.max(g, 1, keepdim=True).indices.double()
    e = torch.max(h, h * 0.5) + torch.min(h, -h)
    f = h.max(-1).values + h.amax(-1)
    nw = h[:, None, :, 1:3] + h[:, :2, None, ::3] + W[None, :2, None, 4:] + h[:, None, :, 0, None]
    sm = torch.softmax(h * 3, dim=1) + F.log_softmax(h.reshape(-1, 2, 2, 6), dim=2).reshape(-1, 4, 6) * 0.5
    cs = F.cosine_similarity(h, h * 0.5 + W[0], dim=-1) + F.cosine_similarity(h[:, 0], h[:, 1])[:, None]
    pd = F.pairwise_distance(h[:, 0], h[:, 1]) + F.pairwise_distance(h[:, 2], h[:, 3], p=1, keepdim=True)[:, 0]
    tl = F.triplet_margin_loss(h[:, 0], h[:, 1], h[:, 2]) \
        + F.triplet_margin_loss(h[:, 0], h[:, 1], h[:, 2], margin=0.5, p=1, swap=True, reduction="sum") \
        + F.margin_ranking_loss(h[:, 0], h[:, 1], torch.sign(h[:, 2]), margin=0.1)
    inn = F.instance_norm(h, weight=W[0, :4], bias=W[1, :4]) + F.instance_norm(h.reshape(-1, 4, 2, 3)).reshape(-1, 4, 6)
    la = torch.logaddexp(h, h * 2 - 0.5)
    loss = (v * v).sum() + (c * torch.tanh(c)).sum() + (e * e).sum() + (f * f).sum() + (nw * torch.tanh(nw)).sum() \
        + (sm * h).sum() + (cs * cs).sum() + (pd * pd).sum() + tl + (inn * h).sum() + (la * h).sum()
    return loss, {"cs": cs, "pd": pd, "tl": tl, "inn": inn, "la": la, "v": v, "i": i.double(), "c": c, "d": d, "e": e, "f": f, "nw": nw, "sm": sm}


def torch_arith(t):
    x, W, V = t["x"], t["W"], t["V"]
    h = torch.tanh(x @ W)                              # [B, 4, 6]
    d = V.abs() + 0.5
    ar = h.add(V, alpha=2) + torch.sub(h, 1, alpha=0.5) + torch.rsub(h, 2) + h.mul(V) + torch.div(h, d) \
        + h.div(d, rounding_mode="trunc") + torch.divide(h * 3, d, rounding_mode="floor") + torch.true_divide(h, 2) \
        + torch.clip(h, -0.5, 0.5) + torch.multiply(h, h) + torch.subtract(h, V)
    vs = h.view_as(h.transpose(1, 2)) + h.transpose(1, 2).reshape_as(h.transpose(1, 2)) * 0.5 \
        + h.type_as(x).transpose(1, 2)
    ve = V.expand_as(W) * W
    sm = F.softmin(h, dim=1) + F.glu(h, dim=-1).repeat(1, 1, 2) + F.prelu(h, V[:4]) + F.prelu(h, V[:1])
    lp = torch.lerp(h, h * 2, 0.3) + torch.lerp(h, -h, 0.7) + torch.lerp(h, V, torch.sigmoid(h))
    ac = torch.addcmul(h, h, V, value=0.5) + torch.addcdiv(h, V, d, value=2)
    mf = torch.log1p(h.abs()) + torch.expm1(h) + torch.log2(h.abs() + 0.1) + torch.log10(h.abs() + 0.1) + torch.exp2(h)
    p = torch.softmax(h * 2, dim=-1) * (torch.arange(6) >= 1)    # exact zeros: xlogy's 0
    kl = F.kl_div(F.log_softmax(h, dim=-1), p, reduction="batchmean") + F.kl_div(h, p, reduction="sum") * 0.1 \
        + F.kl_div(F.log_softmax(h, -1), h * 0.5, reduction="mean", log_target=True)
    bce = F.binary_cross_entropy(torch.sigmoid(h), torch.sigmoid(h * 2)) \
        + F.binary_cross_entropy(torch.sigmoid(h * 3), (h > 0).double(), weight=(torch.arange(6) + 1) * 0.25, reduction="sum") * 0.1
    pf = torch.tanh(h) * math.pi + F.relu(h) + F.silu(h) + F.gelu(h) + torch.cat((h, h), dim=2)[..., :6] * int("2") \
        + h.masked_fill(h > 0.5, float("-inf")).clamp(min=-1) + h * math.sqrt(2)   # h.to(torch.float32): the real type
    cv = F.conv1d(x, t["K"], t["kb"], padding=1) + F.conv1d(x, t["K"], stride=(2,), dilation=1, padding=1) \
        .repeat(1, 1, 2)[..., :6] + F.conv1d(x.repeat(1, 2, 1), t["K"].repeat(2, 1, 1), groups=2, padding=1)[:, :3]
    pl = F.max_pool1d(x, 2, padding=1) + F.avg_pool1d(x, 3, stride=2, padding=1) + F.max_pool1d(x, 2, stride=2, dilation=2, padding=1)
    xi = x.reshape(-1, 2, 2, 5)
    ip = F.interpolate(xi, scale_factor=2) + F.interpolate(xi, size=(4, 10), mode="bilinear") \
        + F.interpolate(xi, scale_factor=(2, 2), mode="bilinear", align_corners=True) \
        + F.interpolate(xi, size=(4, 10), mode="nearest").flip(-1) * 0.5
    il = F.interpolate(x, size=3, mode="linear") + F.interpolate(x, scale_factor=0.5, mode="nearest").repeat(1, 1, 2)[..., :3] \
        + F.interpolate(x, size=8, mode="linear", align_corners=True)[..., ::3] \
        + F.interpolate(x, size=6, mode="linear")[..., 1:4] + x.repeat_interleave(2, dim=2)[..., 2:5] \
        + torch.repeat_interleave(x, 3, dim=1)[:, 1:5, :3]
    loss = (ar * h).sum() + (vs * torch.tanh(vs)).sum() + (sm * h).sum() + (lp * lp).sum() + (ac * h).sum() \
        + (mf * h).sum() + kl + bce + (ve * ve).sum() + (pf * h).sum() + (cv * torch.tanh(cv)).sum() \
        + (pl * pl).sum() + (ip * ip).sum() + (il * torch.tanh(il)).sum()
    return loss, {"ip": ip, "il": il, "cv": cv, "pl": pl, "pf": pf, "ar": ar, "vs": vs, "ve": ve, "sm": sm, "lp": lp, "ac": ac, "mf": mf, "kl": kl, "bce": bce}


def torch_einsum(t):
    x, W, V = t["x"], t["W"], t["V"]
    h = torch.tanh(torch.einsum("bij,jk->bik", x, W))                    # [B, 4, 6]
    q = h.view(-1, 4, 2, 3).transpose(1, 2)                               # [B, 2, 4, 3]
    att = torch.einsum("bhqd,bhkd->bhqk", q, q)
    o1 = torch.einsum("bij->bji", h) + torch.einsum("bij", h).transpose(1, 2)
    o2 = torch.einsum("bij,j->bi", h, V) + torch.einsum("bij->b", h)[:, None]
    o3 = torch.einsum("bij,bkj->bik", h, h * 0.5)
    o4 = torch.einsum("i,j->ij", V, V) + torch.einsum("i,j", V, V * 2)
    o5 = torch.einsum("ij,bjk,k->bi", W, h.transpose(1, 2), W[0, :4])
    o6 = torch.einsum("bhqk,bhkd->bqhd", torch.softmax(att, -1), q).reshape(-1, 4, 6)
    o7 = torch.einsum("...d,...d->...", h, h * 0.5)[..., None] + torch.einsum("...ij,jk->...ik", h, W.T)[..., :1] \
        + torch.einsum("...d,d", h, V)[..., None] + torch.einsum("b...d,b...d->b...", h, h[:, :1])[..., None]
    o8 = torch.einsum("bi...,bi...", h, h)[None, None, :] + torch.einsum("...qd,...kd->...qk", q, q)[:, 0, :, :1]
    cs = torch.cumsum(h, dim=-1) + h.cumsum(1) * 0.5
    ci = torch.cumsum(h.masked_fill(h > 0.5, float("inf")).masked_fill(h < -0.5, -float("inf")), 2)   # not in the loss
    qkv = torch.cat((h, h * 0.5, -h), dim=-1).reshape(-1, 4, 3, 2, 3).permute(2, 0, 3, 1, 4)   # timm's [3, B, H, N, D]
    tq, tk, tv = qkv.unbind(0)
    tm = (torch.softmax(tq @ tk.transpose(-2, -1) * 0.5, dim=-1) @ tv).transpose(1, 2).reshape(-1, 4, 6)
    t5 = h[:, :, None, :, None].expand(-1, 4, 2, 6, 3).reshape(-1, 4, 36)[..., ::5]    # llama2.c's repeat_kv, rank 5
    u0, u1, u2 = h[:, :3].unbind(1)
    ub = u0 * 2 + u1 + torch.stack(torch.unbind(q, dim=-1), dim=1).sum(1).reshape(-1, 8)[:, :6] * u2
    loss = (att * att).sum() + (o1 * o1).sum() + (o2 * o2).sum() + (o3 * o3).sum() + (o4 * o4).sum() \
        + (o5 * o5).sum() + (o6 * h).sum() + (ub * ub).sum() + (cs * h).sum() + (tm * h).sum() + (t5 * t5).sum() \
        + (o7 * o7).sum() + (o8 * o8).sum()
    return loss, {"tm": tm, "t5": t5, "ub": ub, "cs": cs, "ci": ci, "att": att, "o1": o1, "o2": o2, "o3": o3, "o4": o4, "o5": o5, "o6": o6, "o7": o7, "o8": o8}


def torch_sort(t):
    x, W, Wg, We = t["x"], t["W"], t["Wg"], t["We"]
    h = torch.tanh(x @ W)                              # [B, 4, 6]
    g = torch.round(h * 2) / 2 + h * 0                 # ties, with a gradient: kept in their order
    v, i = torch.topk(h, 3)
    v2, i2 = h.topk(2, dim=1, largest=False)
    s, j = torch.sort(g, dim=-1, descending=True, stable=True)
    s2, j2 = g.sort(dim=1, stable=True)
    a = torch.argsort(g, dim=-1, stable=True).double()
    a2 = g.argsort(dim=1, descending=True, stable=True)[:, 1:3].double()
    sl, jl = torch.sort(g.reshape(-1, 24) + h.reshape(-1, 24) * 0, dim=1, descending=True, stable=True)   # rows of 24: by a heap
    tl, ul = torch.sort(h.reshape(-1, 24), dim=-1, stable=True)
    tl, ul = tl[:, :20], ul[:, :20]                    # topk(20, largest=False): torch's own orders ties as it likes
    oh = torch.zeros_like(h).scatter(2, i, 1.0)        # a k-hot mask
    # nnc's reads the leading part of a larger src, as torch's does (whose gradient then fails in 1.13)
    sc = h.scatter(2, i[..., :2], v2.transpose(1, 2)[:, :4]) + torch.scatter(h, 1, i2, h[:, :2] * 3)
    dup = torch.cat((i[..., :1], i), -1)               # one place named twice: the last source wins, or both add
    sd = h.scatter(2, dup, h[..., :4] * 2)             # the gradient goes to both sources, as torch's
    sa = torch.scatter_add(h, 2, dup, h[..., 2:] * 0.5)
    ix = W[:4].argmax(0)                               # [6] places along an axis of 4, some twice
    ia = h.index_add(1, ix, h.repeat(1, 2, 1)[:, :6] * 0.5, alpha=2) + torch.index_fill(h, 2, ix[:2], -1.5) \
        + h.index_copy(1, ix[:1], h[:, 3:] * 2)
    lg = h @ Wg                                        # Mixtral's sparse mixture: top-2 of 4 experts
    tw, te = torch.topk(torch.softmax(lg, dim=-1), 2)
    tw = tw / tw.sum(dim=-1, keepdim=True)
    gates = torch.zeros_like(lg).scatter(-1, te, tw)
    moe = (gates.unsqueeze(-1) * torch.einsum("btd,edf->btef", h, We)).sum(2)
    loss = (v * v).sum() + (v2 * h[:, :2]).sum() + (s * h).sum() + (s2 * torch.tanh(s2)).sum() + (oh * h).sum() \
        + (sc * sc).sum() + (sl * h.reshape(-1, 24)).sum() + (tl * tl).sum() + (sa * torch.tanh(sa)).sum() + (sd * sd).sum() + (ia * ia).sum() + (moe * moe).sum()
    return loss, {"v": v, "i": i.double(), "v2": v2, "i2": i2.double(), "s": s, "j": j.double(), "s2": s2,
                  "j2": j2.double(), "a": a, "a2": a2, "sl": sl, "jl": jl.double(), "tl": tl, "ul": ul.double(), "oh": oh, "sc": sc, "sd": sd, "sa": sa, "ia": ia, "moe": moe}


def moe_mixtral(t):
    x, W, Wg, W1, W2, W3 = t["x"], t["W"], t["Wg"], t["W1"], t["W2"], t["W3"]
    h = torch.tanh(x @ W)                              # [B, 4, 6]
    router_logits = h @ Wg                             # [B, 4, 4]: 4 experts
    routing_weights = F.softmax(router_logits, dim=-1)
    routing_weights, selected = torch.topk(routing_weights, 2, dim=-1)
    routing_weights = routing_weights / routing_weights.sum(dim=-1, keepdim=True)
    gates = torch.zeros_like(router_logits).scatter(-1, selected, routing_weights)
    out = 0
    for i, w1, w3, w2 in zip(range(4), W1.unbind(0), W3.unbind(0), W2.unbind(0)):
        out = out + gates[..., i:i + 1] * ((F.silu(h @ w1) * (h @ w3)) @ w2)
    s = 0
    for k, w in enumerate(W2.unbind(0), start=1):
        s = s + (w * w).sum() * k
    loss = (out * out).sum() + s * 0.1 + F.cross_entropy(router_logits.reshape(-1, 4), t["y"].reshape(-1))
    return loss, {"out": out, "gates": gates}


def torch_short(t):
    x, W, V, y = t["x"], t["W"], t["V"], t["y"]
    h = torch.tanh(x @ W)                              # [B, 4, 6]
    m = torch.triu(torch.ones(4, 4), diagonal=1).bool()
    att = (h @ h.transpose(1, 2)).masked_fill(m, float("-inf")).softmax(-1)
    nz = h.new_zeros(4, 6) + h.new_ones(6) * 0.5 + h.new_full((4, 6), 2.0)
    uf = h.unflatten(2, (2, 3)).sum(-1) + h.unflatten(1, (-1, 2))[:, :, 0].sum(1, keepdim=True)[..., :2]
    cl = torch.clamp_min(h, -0.2) + h.clamp_max(0.3)
    ad = torch.addmm(V[:4], h[:, 0], W.T[:, :4], beta=0.5, alpha=2) + torch.baddbmm(h[..., :4], h, h.transpose(1, 2) * 0.5)[:, 0]
    df = torch.diff(h, dim=-1) + torch.diff(h, n=2, dim=1).sum(1, keepdim=True)[..., :5]
    vm, mm = torch.var_mean(h, dim=-1)
    sm_, mn = torch.std_mean(h, dim=1, keepdim=True)
    sh = F.hardshrink(h * 2) + F.softshrink(h * 2, 0.3) + F.tanhshrink(h) + F.threshold(h, 0.1, -1.0)
    mv = torch.movedim(h, 1, 2) + h.moveaxis(-1, 1) * 0.5 + h.select(1, 2)[:, :, None] + torch.select(h, 2, -1)[:, None, :4]
    aa = (h > 0).all(-1).double() + (h > 0.5).any(dim=1).sum(-1, keepdim=True).double() + torch.count_nonzero(torch.relu(h), dim=-1)
    tc = h * torch.tensor([1.0, -2.0, 0.5, 3.0, 0.0, 1.5]) + torch.tensor([[1.0, 2.0], [3.0, 4.0]]).sum() \
        + torch.special.expit(h) + torch.absolute(h) + torch.linalg.norm(h, dim=-1, keepdim=True)
    yf = y.float()[:, :, None] * h + y.long().float()[:, :, None]
    ce = F.cross_entropy(h.transpose(1, 2), y) + F.cross_entropy(h.transpose(1, 2) * 2, y, ignore_index=1, label_smoothing=0.1) \
        + F.cross_entropy(h.reshape(-1, 2, 2, 6).permute(0, 3, 1, 2), y.reshape(-1, 2, 2))
    cn = F.cross_entropy(h.transpose(1, 2), y, reduction="none") \
        + F.cross_entropy(h.transpose(1, 2), y, reduction="sum", label_smoothing=0.2, ignore_index=2) \
        + F.cross_entropy(h[:, 0], y[:, 0], reduction="none", label_smoothing=0.1)[:, None] \
        + F.cross_entropy(h[:, 1], y[:, 1], reduction="mean")
    tr = torch.tan(h * 0.3) + torch.asin(h * 0.9) + torch.arccos(h * 0.9) + torch.atan(h * 3) + torch.sinh(h) \
        + torch.cosh(h) + torch.asinh(h * 2) + torch.acosh(h * h + 1.5) + torch.arctanh(h * 0.9)
    loss = (att * h[..., :4]).sum() + (nz * h).sum() + (uf * uf).sum() + (cl * h).sum() + (ad * ad).sum() + (df * df).sum() \
        + (vm * mm).sum() + (sm_ * mn).sum() + (sh * h).sum() + (mv * mv).sum() + (aa * h.sum(-1)).sum() + (tc * tc).sum() \
        + (yf * h).sum() + (tr * tr).sum() + ce + (cn * cn).sum()
    return loss, {"cn": cn, "ce": ce, "tr": tr, "att": att, "nz": nz, "uf": uf, "cl": cl, "ad": ad, "df": df, "vm": vm, "mm": mm, "sm": sm_, "mn": mn,
                  "sh": sh, "mv": mv, "aa": aa, "tc": tc, "yf": yf}


def vit_timm(t):
    x, y, B = t["x"], t["y"], t["x"].shape[0]
    h = F.conv2d(x, t["Wp"], t["bp"], stride=4)                          # [B, 8, 2, 2]: the patches
    h = h.flatten(2).transpose(1, 2)                                     # [B, 4, 8]
    h = torch.cat((t["cls"].expand(B, -1, -1), h), dim=1) + t["pos"]    # [B, 5, 8]
    _, N, C = h.shape
    a = F.layer_norm(h, (C,), t["g1"], t["b1"])
    qkv = F.linear(a, t["Wqkv"], t["bqkv"]).reshape(B, N, 3, 2, C // 2).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)
    att = ((q @ k.transpose(-2, -1)) * (C // 2) ** -0.5).softmax(dim=-1)
    h = h + F.linear((att @ v).transpose(1, 2).reshape(B, N, C), t["Wo"], t["bo"])
    m = F.layer_norm(h, (C,), t["g2"], t["b2"])
    h = h + F.linear(F.gelu(F.linear(m, t["W1"], t["c1"])), t["W2"], t["c2"])
    logits = F.linear(F.layer_norm(h, (C,), t["gf"], t["bf"])[:, 0], t["Wh"], t["bh"])
    return F.cross_entropy(logits, y), {"logits": logits}


CASES = [
    # a Vision Transformer block as timm writes it: patches by a strided conv2d, flatten and
    # transpose, a class token expanded over the batch and concatenated, x.shape unpacked, qkv
    # reshaped to five axes and permuted, unbind, C // heads, softmax(dim = -1), x[:, 0]
    Case("vit_timm", {"x": ("f32", (1, 8, 8)), "y": ("i32", (), 3)},
         {"Wp": (8, 1, 4, 4), "bp": (8,), "cls": (1, 1, 8), "pos": (1, 5, 8), "g1": (8,), "b1": (8,), "Wqkv": (24, 8),
          "bqkv": (24,), "Wo": (8, 8), "bo": (8,), "g2": (8,), "b2": (8,), "W1": (16, 8), "c1": (16,), "W2": (8, 16),
          "c2": (8,), "gf": (8,), "bf": (8,), "Wh": (3, 8), "bh": (3,)},
         "h = F.conv2d(x, Wp, bp, stride = 4)\nh = h.flatten(2).transpose(1, 2)\n"
         "h = torch.cat((cls.expand(B, -1, -1), h), dim = 1) + pos\n_, N, C = h.shape\n"
         "a = F.layer_norm(h, (C,), g1, b1)\n"
         "qkv = F.linear(a, Wqkv, bqkv).reshape(B, N, 3, 2, C // 2).permute(2, 0, 3, 1, 4)\n"
         "q, k, v = qkv.unbind(0)\natt = ((q @ k.transpose(-2, -1)) * (C // 2) ** -0.5).softmax(dim = -1)\n"
         "h = h + F.linear((att @ v).transpose(1, 2).reshape(B, N, C), Wo, bo)\n"
         "m = F.layer_norm(h, (C,), g2, b2)\nh = h + F.linear(F.gelu(F.linear(m, W1, c1)), W2, c2)\n"
         "output logits = F.linear(F.layer_norm(h, (C,), gf, bf)[:, 0], Wh, bh)\n"
         "loss = F.cross_entropy(logits, y)", vit_timm),
    # torch's shorter functions: .bool(), new_zeros/new_ones/new_full, unflatten, clamp_min/max,
    # addmm, baddbmm, diff, var_mean, std_mean, the shrinks, threshold, movedim, select, all, any,
    # count_nonzero, torch.tensor, torch.special and torch.linalg paths, .float() and .long() of labels
    Case("torch_short", {"x": ("f32", (4, 5)), "y": ("i32", (4,), 3)}, {"W": (5, 6), "V": (6,)},
         "h = tanh(x @ W)\nm = torch.triu(torch.ones(4, 4), diagonal = 1).bool()\n"
         "output att = (h @ h.transpose(1, 2)).masked_fill(m, float(\"-inf\")).softmax(-1)\n"
         "output nz = h.new_zeros(4, 6) + h.new_ones(6) * 0.5 + h.new_full((4, 6), 2.0)\n"
         "output uf = h.unflatten(2, (2, 3)).sum(-1) + h.unflatten(1, (-1, 2))[:, :, 0].sum(1, keepdim = True)[..., :2]\n"
         "output cl = torch.clamp_min(h, -0.2) + h.clamp_max(0.3)\n"
         "output ad = torch.addmm(V[:4], h[:, 0], W.T[:, :4], beta = 0.5, alpha = 2)"
         " + torch.baddbmm(h[..., :4], h, h.transpose(1, 2) * 0.5)[:, 0]\n"
         "output df = torch.diff(h, dim = -1) + torch.diff(h, n = 2, dim = 1).sum(1, keepdim = True)[..., :5]\n"
         "vm, mm = torch.var_mean(h, dim = -1)\nsm, mn = torch.std_mean(h, dim = 1, keepdim = True)\n"
         "output vm = vm\noutput mm = mm\noutput sm = sm\noutput mn = mn\n"
         "output sh = F.hardshrink(h * 2) + F.softshrink(h * 2, 0.3) + F.tanhshrink(h) + F.threshold(h, 0.1, -1.0)\n"
         "output mv = torch.movedim(h, 1, 2) + h.moveaxis(-1, 1) * 0.5 + h.select(1, 2)[:, :, None]"
         " + torch.select(h, 2, -1)[:, None, :4]\n"
         "output aa = (h > 0).all(-1) + (h > 0.5).any(dim = 1).sum(-1, keepdim = True) + torch.count_nonzero(torch.relu(h), dim = -1)\n"
         "output tc = h * torch.tensor([1.0, -2.0, 0.5, 3.0, 0.0, 1.5]) + torch.tensor([[1.0, 2.0], [3.0, 4.0]]).sum()"
         " + torch.special.expit(h) + torch.absolute(h) + torch.linalg.norm(h, dim = -1, keepdim = True)\n"
         "output yf = y.float()[:, :, None] * h + y.long().float()[:, :, None]\n"
         "output ce = F.cross_entropy(h.transpose(1, 2), y) + F.cross_entropy(h.transpose(1, 2) * 2, y, ignore_index = 1,"
         " label_smoothing = 0.1) + F.cross_entropy(h.reshape(B, 2, 2, 6).permute(0, 3, 1, 2), y.reshape(B, 2, 2))\n"
         "output cn = F.cross_entropy(h.transpose(1, 2), y, reduction = \"none\")"
         " + F.cross_entropy(h.transpose(1, 2), y, reduction = \"sum\", label_smoothing = 0.2, ignore_index = 2)"
         " + F.cross_entropy(h[:, 0], y[:, 0], reduction = \"none\", label_smoothing = 0.1)[:, None]"
         " + F.cross_entropy(h[:, 1], y[:, 1], reduction = \"mean\")\n"
         "output tr = torch.tan(h * 0.3) + torch.asin(h * 0.9) + torch.arccos(h * 0.9) + torch.atan(h * 3) + torch.sinh(h)"
         " + torch.cosh(h) + torch.asinh(h * 2) + torch.acosh(h * h + 1.5) + torch.arctanh(h * 0.9)\n"
         "loss = sum(att * h[..., :4]) + sum(nz * h) + sum(uf * uf) + sum(cl * h) + sum(ad * ad) + sum(df * df)"
         " + sum(vm * mm) + sum(sm * mn) + sum(sh * h) + sum(mv * mv) + sum(aa * h.sum(-1)) + sum(tc * tc) + sum(yf * h)"
         " + sum(tr * tr) + ce + sum(cn * cn)", torch_short),
    # Mixtral's sparse mixture of experts as its code writes it: softmax, topk, renormalised, the
    # gates by scatter, each expert's SwiGLU weighted by its gate, walked with zip and enumerate
    Case("moe_mixtral", {"x": ("f32", (4, 5)), "y": ("i32", (4,), 4)},
         {"W": (5, 6), "Wg": (6, 4), "W1": (4, 6, 8), "W2": (4, 8, 6), "W3": (4, 6, 8)},
         "h = tanh(x @ W)\nrouter_logits = h @ Wg\nrouting_weights = F.softmax(router_logits, dim = -1)\n"
         "routing_weights, selected = torch.topk(routing_weights, 2, dim = -1)\n"
         "routing_weights = routing_weights / routing_weights.sum(dim = -1, keepdim = True)\n"
         "output gates = torch.zeros_like(router_logits).scatter(-1, selected, routing_weights)\n"
         "out = 0\nfor i, w1, w3, w2 in zip(range(4), W1.unbind(0), W3.unbind(0), W2.unbind(0)) {\n"
         "    out = out + gates[..., i:i + 1] * ((F.silu(h @ w1) * (h @ w3)) @ w2)\n}\noutput out = out\n"
         "s = 0\nfor k, w in enumerate(W2.unbind(0), start = 1) {\n    s = s + (w * w).sum() * k\n}\n"
         "loss = sum(out * out) + s * 0.1 + cross_entropy(router_logits.reshape(-1, 4), y.reshape(-1))", moe_mixtral),
    # topk (both ends, another axis), sort and argsort (ties in their order, as stable=True), scatter
    # of a tensor and of a number, one place named twice (scatter: the last, the gradient to each source
    # naming it, as torch's; scatter_add: the sum),
    # index_add, index_fill, index_copy, and Mixtral's top-2 of 4 experts as gates by scatter
    Case("torch_sort", {"x": ("f32", (4, 5))}, {"W": (5, 6), "Wg": (6, 4), "We": (4, 6, 6)},
         "h = tanh(x @ W)\ng = round(h * 2) / 2 + h * 0\nv, i = topk(h, 3)\nv2, i2 = h.topk(2, dim = 1, largest = False)\n"
         "s, j = torch.sort(g, dim = -1, descending = True, stable = True)\ns2, j2 = g.sort(dim = 1, stable = True)\n"
         "output v = v\noutput i = i\noutput v2 = v2\noutput i2 = i2\noutput s = s\noutput j = j\noutput s2 = s2\n"
         "output j2 = j2\noutput a = argsort(g, dim = -1, stable = True)\noutput a2 = g.argsort(dim = 1, descending = True, stable = True)[:, 1:3]\n"
         "sl, jl = sort(g.reshape(B, 24) + h.reshape(B, 24) * 0, dim = 1, descending = True)\noutput sl = sl\noutput jl = jl\n"
         "tl, ul = h.reshape(B, 24).topk(20, largest = False)\noutput tl = tl\noutput ul = ul\n"
         "output oh = zeros_like(h).scatter(2, i, 1.0)\n"
         "output sc = h.scatter(2, i[..., :2], v2.transpose(1, 2)) + scatter(h, 1, i2, h[:, :2] * 3)\n"
         "dup = cat((i[..., :1], i), -1)\n"
         "output sd = h.scatter(2, dup, h[..., :4] * 2)\noutput sa = scatter_add(h, 2, dup, h[..., 2:] * 0.5)\n"
         "ix = argmax(W[:4], 0)\n"
         "output ia = h.index_add(1, ix, h.repeat(1, 2, 1)[:, :6] * 0.5, alpha = 2) + index_fill(h, 2, ix[:2], -1.5)"
         " + h.index_copy(1, ix[:1], h[:, 3:] * 2)\n"
         "lg = h @ Wg\ntw, te = topk(softmax(lg, dim = -1), 2)\ntw = tw / tw.sum(dim = -1, keepdim = True)\n"
         "gates = zeros_like(lg).scatter(-1, te, tw)\n"
         "output moe = (gates.unsqueeze(-1) * einsum(\"btd,edf->btef\", h, We)).sum(2)\n"
         "loss = sum(v * v) + sum(v2 * h[:, :2]) + sum(s * h) + sum(s2 * tanh(s2)) + sum(oh * h) + sum(sc * sc)"
         " + sum(sl * h.reshape(B, 24)) + sum(tl * tl) + sum(sa * tanh(sa)) + sum(sd * sd) + sum(ia * ia) + sum(moe * moe)", torch_sort),
    # einsum: a matrix product, attention's scores and values (batch letters), a transpose, sums, an
    # outer product, the implicit output, three operands; unbind; cumsum (an infinity: then NaN and
    # infinities, as torch's); tensors of 5 axes inside the model (timm's qkv, llama2.c's repeat_kv)
    Case("torch_einsum", {"x": ("f32", (4, 5))}, {"W": (5, 6), "V": (6,)},
         "h = tanh(einsum(\"bij,jk->bik\", x, W))\nq = h.view(B, 4, 2, 3).transpose(1, 2)\n"
         "output att = einsum(\"bhqd,bhkd->bhqk\", q, q)\n"
         "output o1 = einsum(\"bij->bji\", h) + einsum(\"bij\", h).transpose(1, 2)\n"
         "output o2 = einsum(\"bij,j->bi\", h, V) + einsum(\"bij->b\", h)[:, None]\n"
         "output o3 = einsum(\"bij,bkj->bik\", h, h * 0.5)\n"
         "output o4 = einsum(\"i,j->ij\", V, V) + einsum(\"i,j\", V, V * 2)\n"
         "output o5 = einsum(\"ij,bjk,k->bi\", W, h.transpose(1, 2), W[0, :4])\n"
         "output o6 = torch.einsum('bhqk,bhkd->bqhd', softmax(att, -1), q).reshape(B, 4, 6)\n"
         "output o7 = einsum(\"...d,...d->...\", h, h * 0.5)[..., None] + einsum(\"...ij,jk->...ik\", h, W.T)[..., :1]"
         " + einsum(\"...d,d\", h, V)[..., None] + einsum(\"b...d,b...d->b...\", h, h[:, :1])[..., None]\n"
         "output o8 = einsum(\"bi...,bi...\", h, h)[None, None, :] + einsum(\"...qd,...kd->...qk\", q, q)[:, 0, :, :1]\n"
         "output cs = cumsum(h, dim = -1) + h.cumsum(1) * 0.5\n"
         "output ci = cumsum(h.masked_fill(h > 0.5, float(\"inf\")).masked_fill(h < -0.5, -inf), 2)\n"
         "qkv = cat((h, h * 0.5, -h), dim = -1).reshape(B, 4, 3, 2, 3).permute(2, 0, 3, 1, 4)\n"
         "tq, tk, tv = qkv.unbind(0)\n"
         "output tm = (softmax(tq @ tk.transpose(-2, -1) * 0.5, dim = -1) @ tv).transpose(1, 2).reshape(B, 4, 6)\n"
         "output t5 = h[:, :, None, :, None].expand(-1, 4, 2, 6, 3).reshape(B, 4, 36)[..., ::5]\n"
         "u0, u1, u2 = h[:, :3].unbind(1)\n"
         "output ub = u0 * 2 + u1 + torch.stack(torch.unbind(q, dim = -1), dim = 1).sum(1).reshape(B, 8)[:, :6] * u2\n"
         "loss = sum(att * att) + sum(o1 * o1) + sum(o2 * o2) + sum(o3 * o3) + sum(o4 * o4) + sum(o5 * o5) + sum(o6 * h)"
         " + sum(ub * ub) + sum(cs * h) + sum(tm * h) + sum(t5 * t5) + sum(o7 * o7) + sum(o8 * o8)",
         torch_einsum),
    # torch's arithmetic by name (add with alpha, rsub, div's rounding modes, clip), view_as,
    # reshape_as, expand_as, type_as, softmin, glu, prelu, lerp, addcmul, addcdiv, log1p, expm1,
    # log2, log10, exp2, kl_div (batchmean, log_target, zeros in the target), binary_cross_entropy;
    # module paths (torch.tanh, F.relu, nn.functional.silu, math.pi), float('-inf'), int("2");
    # conv1d (stride, dilation, groups), max_pool1d, avg_pool1d; interpolate (nearest, linear,
    # bilinear, align_corners, up and down), repeat_interleave
    Case("torch_arith", {"x": ("f32", (4, 5))}, {"W": (5, 6), "V": (6,), "K": (3, 4, 2), "kb": (3,)},
         "h = tanh(x @ W)\nd = abs(V) + 0.5\n"
         "output ar = h.add(V, alpha = 2) + sub(h, 1, alpha = 0.5) + rsub(h, 2) + h.mul(V) + div(h, d)"
         " + h.div(d, rounding_mode = \"trunc\") + divide(h * 3, d, rounding_mode = \"floor\") + true_divide(h, 2)"
         " + clip(h, -0.5, 0.5) + multiply(h, h) + subtract(h, V)\n"
         "output vs = h.view_as(h.transpose(1, 2)) + h.transpose(1, 2).reshape_as(h.transpose(1, 2)) * 0.5"
         " + h.type_as(x).transpose(1, 2)\noutput ve = V.expand_as(W) * W\n"
         "output sm = softmin(h, dim = 1) + glu(h, dim = -1).repeat(1, 1, 2) + prelu(h, V[:4]) + prelu(h, V[:1])\n"
         "output lp = lerp(h, h * 2, 0.3) + lerp(h, -h, 0.7) + lerp(h, V, sigmoid(h))\n"
         "output ac = addcmul(h, h, V, value = 0.5) + addcdiv(h, V, d, value = 2)\n"
         "output mf = log1p(abs(h)) + expm1(h) + log2(abs(h) + 0.1) + log10(abs(h) + 0.1) + exp2(h)\n"
         "p = softmax(h * 2, dim = -1) * (arange(6) >= 1)\n"
         "output pf = torch.tanh(h) * math.pi + F.relu(h) + nn.functional.silu(h) + torch.nn.functional.gelu(h)"
         " + torch.cat((h, h), dim = 2)[..., :6] * int(\"2\") + h.masked_fill(h > 0.5, float('-inf')).clamp(min = -1)"
         " + h.to(torch.float32) * math.sqrt(2)\n"
         "output cv = conv1d(x, K, kb, padding = 1) + F.conv1d(x, K, stride = (2,), dilation = 1, padding = 1)"
         ".repeat(1, 1, 2)[..., :6] + conv1d(x.repeat(1, 2, 1), K.repeat(2, 1, 1), groups = 2, padding = 1)[:, :3]\n"
         "output pl = max_pool1d(x, 2, padding = 1) + avg_pool1d(x, 3, stride = 2, padding = 1)"
         " + max_pool1d(x, 2, stride = 2, dilation = 2, padding = 1)\n"
         "xi = x.reshape(B, 2, 2, 5)\n"
         "output ip = interpolate(xi, scale_factor = 2) + interpolate(xi, size = (4, 10), mode = \"bilinear\")"
         " + interpolate(xi, scale_factor = (2, 2), mode = \"bilinear\", align_corners = True)"
         " + interpolate(xi, size = (4, 10), mode = \"nearest\").flip(-1) * 0.5\n"
         "output il = interpolate(x, size = 3, mode = \"linear\") + interpolate(x, scale_factor = 0.5, mode = \"nearest\")"
         ".repeat(1, 1, 2)[..., :3] + interpolate(x, size = 8, mode = \"linear\", align_corners = True)[..., ::3]"
         " + interpolate(x, size = 6, mode = \"linear\")[..., 1:4] + x.repeat_interleave(2, dim = 2)[..., 2:5]"
         " + repeat_interleave(x, 3, dim = 1)[:, 1:5, :3]\n"
         "output kl = kl_div(log_softmax(h, dim = -1), p, reduction = \"batchmean\") + kl_div(h, p, reduction = \"sum\") * 0.1"
         " + kl_div(log_softmax(h, -1), h * 0.5, reduction = \"mean\", log_target = True)\n"
         "output bce = binary_cross_entropy(sigmoid(h), sigmoid(h * 2))"
         " + binary_cross_entropy(sigmoid(h * 3), h > 0, weight = (arange(6) + 1) * 0.25, reduction = \"sum\") * 0.1\n"
         "loss = sum(ar * h) + sum(vs * tanh(vs)) + sum(sm * h) + sum(lp * lp) + sum(ac * h) + sum(mf * h) + kl + bce + sum(ve * ve) + sum(pf * h)"
         " + sum(cv * tanh(cv)) + sum(pl * pl) + sum(ip * ip) + sum(il * tanh(il))",
         torch_arith),
    # torch.max and torch.min with a dim: (values, indices), unpacked, indexed, .values and
    # .indices, ties (the gradient to the first maximum alone); of two tensors: maximum, minimum;
    # None in [] (a new axis); softmax and log_softmax over an axis other than the last;
    # cosine_similarity, pairwise_distance, triplet_margin_loss, margin_ranking_loss, instance_norm,
    # logaddexp
    Case("torch_maxdim", {"x": ("f32", (4, 5))}, {"W": (5, 6)},
         "h = tanh(x @ W)\ng = round(h * 2) / 2 + h * 0\nv, i = g.max(dim = 2)\noutput v = v\noutput i = i\n"
         "output c = g.min(1)[0]\noutput d = max(g, 1, keepdim = True).indices\n"
         "output e = max(h, h * 0.5) + min(h, -h)\noutput f = h.max(-1).values + h.amax(-1)\n"
         "output nw = h[:, None, :, 1:3] + h[:, :2, None, ::3] + W[None, :2, None, 4:] + h[:, None, :, 0, None]\n"
         "output sm = softmax(h * 3, dim = 1) + log_softmax(h.reshape(B, 2, 2, 6), dim = 2).reshape(B, 4, 6) * 0.5\n"
         "output cs = cosine_similarity(h, h * 0.5 + W[0], dim = -1) + cosine_similarity(h[:, 0], h[:, 1])[:, None]\n"
         "output pd = pairwise_distance(h[:, 0], h[:, 1]) + pairwise_distance(h[:, 2], h[:, 3], p = 1, keepdim = True)[:, 0]\n"
         "output tl = triplet_margin_loss(h[:, 0], h[:, 1], h[:, 2])"
         " + triplet_margin_loss(h[:, 0], h[:, 1], h[:, 2], margin = 0.5, p = 1, swap = True, reduction = \"sum\")"
         " + margin_ranking_loss(h[:, 0], h[:, 1], sign(h[:, 2]), margin = 0.1)\n"
         "output inn = instance_norm(h, weight = W[0, :4], bias = W[1, :4]) + instance_norm(h.reshape(B, 4, 2, 3)).reshape(B, 4, 6)\n"
         "output la = logaddexp(h, h * 2 - 0.5)\n"
         "loss = sum(v * v) + sum(c * tanh(c)) + sum(e * e) + sum(f * f) + sum(nw * tanh(nw)) + sum(sm * h)"
         " + sum(cs * cs) + sum(pd * pd) + tl + sum(inn * h) + sum(la * h)", torch_maxdim),
    # Python's // and % on tensors (torch.floor_divide, torch.remainder) and on numbers, torch.fmod;
    # a divisor with a gradient
    Case("torch_divmod", {"x": ("f32", (4, 5))}, {"W": (5, 6), "V": (6,)},
         "h = tanh(x @ W) * 5\nd = abs(V) + 0.5\n"
         "output fd = h // 0.7 + floor_divide(h, -1.3) + (-h) // d\n"
         "output r = h % 0.7 + remainder(h, -1.3) + h % d + (-h) % d * 2\n"
         "output fm = fmod(h, 0.6) + fmod(-h, d) + fmod(h, -d) * 0.5\n"
         "output c = h * (7 // 2) + (-7 % 3) + (-7.5 // 2) * (7.5 % -2)\n"
         "loss = sum(r * r) + sum(fm * h) + sum(fd * h) + sum(c)", torch_divmod),
    # argmin (the first of ties), one_hot, smooth_l1_loss and huber_loss with beta, delta and reductions;
    # gather, take_along_dim and index_select by labels and by argmax's indices; nll_loss of any
    # log-probabilities ([N, C, d1] too), its reductions and ignore_index
    Case("torch_losses2", {"x": ("f32", (4, 5)), "y": ("i32", (4,), 6)}, {"W": (5, 6)},
         "h = tanh(x @ W) * 2\ng = round(h * 2) / 2\noutput am = argmin(g, dim = -1)\noutput am2 = g.argmin(1, keepdim = True)\n"
         "output oh = one_hot(y, 6)\n"
         "output s1 = smooth_l1_loss(h, oh) + smooth_l1_loss(h, oh, beta = 0.5, reduction = \"sum\") * 0.1\n"
         "output hu = huber_loss(h, oh, delta = 2) + sum(huber_loss(h, oh, reduction = \"none\") * oh)\n"
         "output ga = h.gather(2, y.unsqueeze(-1)) + take_along_dim(h, y.unsqueeze(-1), 2) * 2"
         " + index_select(h, 2, argmax(W, 0))[..., :1]\n"
         "output gb = gather(h[..., :3], 1, argmax(h.reshape(B, 4, 2, 3), 1))\n"
         "output nl = nll_loss(h.transpose(1, 2), y) + nll_loss(log_softmax(h, -1).reshape(B * 4, 6), y.reshape(-1),"
         " reduction = \"sum\") * 0.1 + nll_loss(h.reshape(-1, 6), y.view(-1), ignore_index = 2)\n"
         "output nn = nll_loss(h.transpose(1, 2), y, reduction = \"none\", ignore_index = 3)\n"
         "loss = s1 + hu + sum(oh * h) + sum(ga * ga) + sum(gb * tanh(gb)) + nl + sum(nn * nn)", torch_losses2),
    # argmax (the first of ties) along the last axis and another, compared with labels
    Case("torch_argmax", {"x": ("f32", (4, 5)), "y": ("i32", (4,), 6)}, {"W": (5, 6)},
         "h = tanh(x @ W)\ng = round(h * 2) / 2\noutput p = argmax(g, dim = -1)\noutput q = g.argmax(1, keepdim = True)\n"
         "output hits = mean(argmax(h, -1) == y)\nloss = sum(h * h) + hits * 0", torch_argmax),
    # pad (constant), repeat and tile, roll, flip: slices (flip's stepping back) and concats; Python's
    # indices and slices in [] (x[:, -1, :], x[..., 1:3], x[:, ::3][:, 1], W[1, :6])
    Case("torch_moves", {"x": ("f32", (4, 5))}, {"W": (5, 6)},
         "h = tanh(x @ W)\noutput p = pad(h, (1, 2)) + pad(h, (0, 3), value = 0.5)\noutput p2 = pad(h, (2, 0, 1, 1))\n"
         "output r = h.repeat(1, 2, 1) * 0.5 + tile(h, (2, 1))\noutput r2 = narrow(h, 1, 0, 1).squeeze(1).repeat(2, 1, 3)\n"
         "output o = roll(h, 2, -1) + roll(h, shifts = (-1, 7), dims = (1, 2))\n"
         "output f = flip(h, (-1,)) + flip(h, [1, 2]) * 0.5 + flip(slice(h, 2, 0, 6, 2), (2,)).repeat(1, 1, 2)\n"
         "output ix = h[:, -1, :] + h[..., 1:3].sum(-1)[:, :1] * h[:, 1:-1, 2].mean(-1, keepdim = True)"
         " + h[:, ::3][:, 1] * W[1, :6]\noutput ix2 = h[..., -1] * W[-1, 2] + sum(W[1:3, ::2])\n"
         "loss = sum(p * p) + sum(p2 * tanh(p2)) + sum(r * r) + sum(r2) * 0.1 + sum(o * h) + sum(f * tanh(h))"
         " + sum(ix * ix) + sum(tanh(ix2))", torch_moves),
    # norm (2, "fro", 1), normalize, group_norm, and a zero norm's gradient (0, as torch's); layer_norm
    # and rms_norm by torch's signature (normalized_shape second)
    Case("torch_norms", {"x": ("f32", (4, 5))}, {"W": (5, 6), "g": (6,), "b": (6,)},
         "h = tanh(x @ W)\nz = h * (arange(6) >= 2)\n"
         "output n2 = h.norm(dim = -1) + sum(norm(h, p = 1, dim = (1, 2))) * 0.1 + norm(h)\n"
         "output nz = norm(narrow(z, 2, 0, 2), dim = -1)\n"
         "output u = normalize(h, dim = -1) + normalize(z, p = 1, dim = 2, eps = 1e-6) + normalize(h.transpose(1, 2)).transpose(1, 2)\n"
         "output gn = group_norm(h.reshape(B, 6, 2, 2), 3, g, b) + group_norm(h.reshape(B, 6, 4), 2, eps = 1e-3).reshape(B, 6, 2, 2)\n"
         "output gn2 = group_norm(h.reshape(B * 4, 6), 2, g)\n"
         "output ln = layer_norm(h, (6,), g, b) + layer_norm(h, normalized_shape = (4, 6)) + rms_norm(h, [6], g, 1e-5)\n"
         "loss = sum(ln * ln) + sum(n2 * n2) + sum(nz * nz) + sum(nz) + sum(u * u * h) + sum(gn * tanh(gn)) + sum(gn2 * h.reshape(B * 4, 6))",
         torch_norms),
    # F.linear, zeros_like / ones_like / full_like, t, mm, bmm, outer, expand, clone; torch's
    # `dim` keyword and Python's True
    Case("torch_functions2", {"x": ("f32", (4, 5))}, {"W": (6, 5), "b": (6,), "V": (6, 6)},
         "h = linear(x, W, b)\nh2 = linear(x, W)\noutput z = zeros_like(h) + ones_like(h) * 2 + full_like(h, 0.5) * h2\n"
         "output m = V.t() @ mm(V, t(V))\noutput g = bmm(h, h.transpose(1, 2))\noutput o = outer(b, narrow(b, 0, 0, 5))\n"
         "output e = t(expand(reshape(b, 6, 1), 6, 4)) + b.expand(4, 6) * 0.5\n"
         "output e3 = h.sum(dim = 1, keepdim = True).expand(-1, 4, -1)\n"
         "b1, t1, c1 = h.size()\n_, t2, c2 = h.shape\noutput v = h.view(b1, t1 * c2) * h.ndim + h.size(-1) + t2 - t1\n"
         "loss = sum(z * z) + sum(m * m) * 0.01 + sum(tanh(g)) + sum(o) + sum(e * h) + sum(e3 * h) * 0.1 + mean(h.clone())"
         " + mean(v * v)",
         torch_functions2),
    # torch functions composed of ops: unsqueeze, squeeze, stack, rms_norm, var, std, amax, amin,
    # and the losses l1, mse and binary_cross_entropy_with_logits with their reductions, nll_loss of
    # log_softmax; SwiGLU's silu gate, a rotary embedding's sin and cos
    Case("torch_functions", {"x": ("f32", (4, 5)), "y": ("i32", (4,), 6)}, {"W": (5, 6), "V": (6, 6), "g": (6,)},
         "h = x @ W\nu = h.unsqueeze(1)\nsq = squeeze(u, 1) + u.squeeze() * 0.5\n"
         "output st = stack((h, tanh(h)), dim = 1)\nst2 = stack((narrow(h, 1, 0, 1).squeeze(1), narrow(h, 1, 1, 1).squeeze(1)), -1)\n"
         "output rms = rms_norm(h, g, eps = 1e-6)\nrms0 = rms_norm(h)\n"
         "output vr = h.var(-1)\noutput vr2 = var(h, (1, 2), correction = 0)\noutput sd = h.std(2, keepdim = 1)\n"
         "output mx = h.amax(-1) + sum(amin(h, dim = (0, 2)))\noutput swiglu = silu(h) * (h @ V)\n"
         "ang = h * 0.7\nrope = h * cos(ang) + sin(ang) * 0.3\nz = reshape(h, -1, 6)\n"
         "nll = nll_loss(log_softmax(z), reshape(y, -1))\ntgt = sigmoid(detach(h) * 0.5)\n"
         "loss = sum(sq * sq) + mean(st * st) + sum(st2) * 0.1 + sum(rms * rms) + sum(rms0 * h) + sum(vr) + sum(vr2 * vr2) * 2 + sum(sd)"
         " + sum(mx) + sum(swiglu * swiglu) * 0.1 + sum(rope) + nll + l1_loss(h, tanh(h))"
         " + l1_loss(h, sq, reduction = \"sum\") * 0.1 + mse_loss(h, tanh(h), reduction = \"sum\") * 0.1"
         " + binary_cross_entropy_with_logits(h, tgt) + binary_cross_entropy_with_logits(h * 2, tgt, reduction = \"sum\") * 0.1"
         " + sum(l1_loss(h, sq, reduction = \"none\") * h) * 0.1", torch_functions),
    # the batch axis merged with others (reshape's -1, B * T, flatten) and split back; products,
    # row-wise ops, reductions and losses over the merged rows
    Case("merge_batch", {"x": ("f32", (3, 4)), "y": ("i32", (3,), 5)}, {"W": (4, 5), "V": (5, 5), "c": (5,)},
         "h = tanh(x @ W)\nm = reshape(h, -1, 5)\noutput z = m @ V\n"
         "back = reshape(softmax(z), B, 3, 5)\noutput r = sum(back, axis = 1)\nf = flatten(h, 0, 1)\n"
         "output g = transpose(m) @ m\noutput wide = reshape(h, 3, -1)\noutput col = mean(m, axis = 0)\n"
         "loss = cross_entropy(z, reshape(y, -1)) + sum(r * r) + mean(f * m)"
         " + sum(log_softmax(reshape(h, B * 3, 5)) * 0.1) + sum(g * V) * 0.1 + sum(tanh(wide) * wide)"
         " + sum(col * c) + sum(layer_norm(m) * c)", merge_batch),
    # permute and transpose(x, d0, d1) / swapaxes in every direction, the batch axis moving (to the
    # second place, merged and last), folded into products as a transpose of the last two
    Case("permute", {"x": ("f32", (4, 3, 2))}, {"W": (2, 2), "c": (4,)},
         "h = x @ W\nq = permute(h, 0, 2, 1, 3)\nk = x.permute((0, 2, 1, 3))\natt = q @ transpose(k, -2, -1)\n"
         "output y = tanh(att).transpose(1, 2)\noutput s = swapaxes(att, 1, 3) * reshape(c, 4, 1, 1)\n"
         "output z = permute(h, 1, 0, 3, 2)\noutput m = reshape(h, -1, 3, 2).permute(2, 1, 0)\n"
         "w = transpose(W, 0, 1) @ permute(W, 1, 0) + transpose(W, 1, 1) * 0\n"
         "loss = sum(y * y) + sum(tanh(s) * s) + sum(tanh(z) * z) + sum(m * m) * 0.5 + sum(w * w)"
         " + sum(q * swapdims(x, 1, 2))", permute),
    # split and chunk unpacked into names: even and uneven pieces, sections, a merged batch axis, a
    # parameter's rows; their gradients joined back (one concat), with gaps and overlaps
    Case("split", {"x": ("f32", (4, 6))}, {"W": (6, 9)},
         "block Attn(n) {\n    forward(h) {\n        q, k, v = h.split(n, dim = 2)\n"
         "        return sum(tanh(q) * k * v)\n    }\n}\nattn = Attn(3)\nqkv = x @ W\n"
         "a, b = split(tanh(qkv), (4, 5), dim = -1)\nc1, c2, c3 = chunk(reshape(qkv, -1, 9), 3, 1)\n"
         "p0, p1, p2 = split(qkv, 4, 2)\ne1, e2 = W.chunk(2)\n"
         "q2 = qkv * 2\ng0 = narrow(q2, 2, 0, 2)\ng1 = narrow(q2, 2, 5, 2)\no0 = narrow(qkv, 2, 0, 5)\no1 = narrow(qkv, 2, 3, 6)\n"
         "output q = narrow(qkv, 2, 0, 3)\noutput b = b\noutput c3 = c3\noutput p2 = p2\n"
         "loss = attn(qkv) + sum(a * a) + sum(b) * 0.5 + sum(c1 * c2 - c3) + sum(p0 * p1) + sum(p2 * p2)"
         " + sum(e1 * e2) + sum(g0 * g1) + sum(narrow(o0, 2, 0, 1) * narrow(o1, 2, 0, 1))", split),
    # comparisons (operators and functions, i32 labels too), where (both sides, broadcast, numbers),
    # masked_fill with -inf before a softmax (a row all -inf is NaN, as torch), tril and triu with
    # diagonals, arange, full, ones, zeros: unbatched constants computed in the kernels that use them
    Case("masks", {"x": ("f32", (2, 4, 4)), "y": ("i32", (), 4)}, {"W": (4, 4)},
         "att = x @ W\ncausal = tril(ones(4, 4))\na = att.masked_fill(causal == 0, -inf)\noutput p = softmax(a)\n"
         "r = arange(4)\noutput m2 = r <= reshape(r, 4, 1)\nw = where(m2 > 0, att, full((4, 4), 0.5))\n"
         "wb = where(att > 0.1, att * 2, W)\n"
         "output lbl = (y == 1) + (y != 2) * 2 + (y >= 2) * 4 + (y < 1) * 8\n"
         "output cmp = (att > W) + (0.2 < att) * 2 + le(att, 0.3) * 4 + ge(W, att) * 8 + eq(att, att) * 16\n"
         "output tri = triu(att, 1) + tril(att, diagonal = -1) * 2 + tanh(att).triu(-2) * 3\n"
         "output ar = arange(1, 2, 0.25) + sum(arange(5, 1, -1.5))\n"
         "output allinf = softmax(masked_fill(att, ones(4, 4) > 0, -inf))\n"
         "loss = sum(p * att) + sum(tanh(w) * w) + sum(wb * wb) + sum(tri * tri)"
         " + sum(where(m2 > 0, tanh(att), -att)) + sum(zeros(3, 4) + narrow(W, 0, 0, 3)) + sum(ones((4)) * W)", masks),
    # causal self-attention as nanoGPT writes it: every op above together
    Case("attention", {"x": ("f32", (4, 8)), "y": ("i32", (4,), 8)}, {"Wqkv": (8, 24), "Wo": (8, 8)},
         "q, k, v = (x @ Wqkv).split(8, dim = 2)\nq = q.view(B, 4, 2, 4).transpose(1, 2)\n"
         "k = k.view(B, 4, 2, 4).transpose(1, 2)\nv = v.view(B, 4, 2, 4).transpose(1, 2)\n"
         "att = (q @ k.transpose(-2, -1)) * (1 / sqrt(4))\natt = att.masked_fill(tril(ones(4, 4)) == 0, -inf)\n"
         "output att = softmax(att, axis = -1)\nh = (att @ v).transpose(1, 2).contiguous().view(B, 4, 8)\n"
         "output logits = h @ Wo\nloss = cross_entropy(logits.view(-1, 8), y.view(-1))", attention),
    # the same with the fused scaled_dot_product_attention, and over q, k and v straight from the
    # split, with the batch axis merged with the heads (view(-1, T, D): [B*H, T, D]) or moved
    # second (transpose(0, 1): [H, B, T, D])
    Case("attention_fused", {"x": ("f32", (5, 8)), "y": ("i32", (5,), 8)}, {"Wqkv": (8, 24), "Wo": (8, 8)},
         "q, k, v = (x @ Wqkv).split(8, dim = 2)\noutput u = scaled_dot_product_attention(q, k, v, is_causal = true)\n"
         "q = q.view(B, 5, 2, 4).transpose(1, 2)\nk = k.view(B, 5, 2, 4).transpose(1, 2)\nv = v.view(B, 5, 2, 4).transpose(1, 2)\n"
         "output o = scaled_dot_product_attention(q, k, v, is_causal = true)\n"
         "h = o.transpose(1, 2).contiguous().view(B, 5, 8)\noutput logits = h @ Wo\n"
         "output m = scaled_dot_product_attention(q.reshape(-1, 5, 4), k.reshape(B * 2, 5, 4),"
         " tanh(v).reshape(B * 2, 5, 4), is_causal = true).view(B, 2, 5, 4)\n"
         "output s = scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), scale = 0.3)\n"
         "loss = cross_entropy(logits.view(-1, 8), y.view(-1)) + sum(tanh(m) * q) + sum(s * s) * 0.5 + sum(tanh(u) * u)",
         attention_fused),
]


def run_case(a, tmp, case, precision, fused):
    d = os.path.join(tmp, "%s_%s_%s" % (case.name, precision, "fused" if fused else "unfused"))
    os.makedirs(d)
    with open(os.path.join(d, "m.nn"), "w") as f:
        f.write(case.model())
    dt = np.float64 if precision == "f64" else np.float32
    vals = {}
    for n, (kind, shape, *classes) in case.inputs.items():
        if kind == "i32":
            vals[n] = rng.integers(0, classes[0], (BATCH,) + shape).astype(np.int32)
        else:
            vals[n] = rng.standard_normal((BATCH,) + shape).astype(dt).astype(np.float64)
    for n, shape in case.params.items():
        vals[n] = (rng.standard_normal(shape) * 0.5).astype(dt).astype(np.float64)   # what nnc holds
    for n, v in vals.items():
        np.save(os.path.join(d, n + ".npy"), v if v.dtype == np.int32 else v.astype(dt))
    cmd = [a.run_model, os.path.join(d, "m.nn"), d, "--entry", "eval,grad", "--load-params",
           ",".join(os.path.join(d, n + ".npy") for n in case.params)]
    if precision == "f64":
        cmd.append("--f64")
    if not fused:
        cmd.append("--no-fuse")
    if a.cuda:
        cmd.append("--cuda")
    r = subprocess.run(cmd + [os.path.join(d, n + ".npy") for n in case.inputs], capture_output=True, text=True,
                       cwd=d)
    if r.returncode == 77:
        print("SKIP: no CUDA target or device:\n" + r.stderr)
        sys.exit(77)
    if r.returncode != 0:
        return ["run_model failed:\n" + r.stderr]
    got = {n: np.load(os.path.join(d, n + ".npy")).astype(np.float64) for n in r.stdout.split()}
    t = {n: torch.tensor(v, dtype=torch.int64 if v.dtype == np.int32 else torch.float64,
                         requires_grad=n in case.params) for n, v in vals.items()}
    loss, outs = case.torch(t)
    if not torch.isfinite(loss):   # NaN gradients everywhere would compare equal: a case that checks nothing
        return ["torch's loss is %r: the case's gradients would check nothing" % loss.item()]
    loss.backward()
    want = {n: v.detach().numpy() for n, v in outs.items()}
    want["loss"] = np.array(loss.item())
    for n in case.params:
        want["grad." + n] = t[n].grad.numpy()
    rtol, atol = TOL[precision]
    errs = []
    for n, w in want.items():
        if n not in got:
            errs.append("%s: not written by run_model" % n)
            continue
        g = got[n]
        if g.shape != w.shape:
            errs.append("%s: shape %s, want %s" % (n, g.shape, w.shape))
            continue
        with np.errstate(invalid="ignore"):   # inf - inf where both are the same infinity: kept below
            bad = ~(np.abs(g - w) <= rtol * np.abs(w) + atol * max(1.0, float(np.abs(w).max(initial=0))))
        bad &= ~(np.isnan(g) & np.isnan(w)) & ~(np.isinf(w) & (g == w))
        if bad.any():
            i = tuple(np.argwhere(bad)[0])
            errs.append("%s at %s: nnc %r torch %r (%d of %d differ)" % (n, i, g[i], w[i], int(bad.sum()), bad.size))
    return errs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-model", required=True)
    ap.add_argument("--cuda", action="store_true")
    ap.add_argument("-k", default="")
    ap.add_argument("--variants", default="f64-fused,f64-unfused,f32-fused",
                    help="which of the CPU's runs (the sanitizers' build: f64-unfused,f32-fused)")
    a = ap.parse_args()
    variants = a.variants.split(",")
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            if a.k not in case.name:
                continue
            for precision in ("f32",) if a.cuda else ("f64", "f32"):
                for fused in (True, False) if precision == "f64" else (True,):
                    if not a.cuda and "%s-%s" % (precision, "fused" if fused else "unfused") not in variants:
                        continue
                    errs = run_case(a, tmp, case, precision, fused)
                    print("%s %-22s %s %-7s%s" % ("FAIL" if errs else "ok  ", case.name, precision,
                                                  "fused" if fused else "unfused", "".join("\n    " + e for e in errs)))
                    passed += not errs
                    failed += bool(errs)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
