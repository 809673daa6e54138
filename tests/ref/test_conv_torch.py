"""conv2d, max_pool2d, avg_pool2d and adaptive_avg_pool2d against PyTorch (torch.nn.functional),
forward and backward, in float64 and float32.

Each case is a tiny .nn model whose input image x is a parameter (so that nnc computes the
input gradient, conv2d's col2im path, as well as the weight's), and whose loss is
sum(tanh(out) * k) with a random k: every output element gets its own incoming gradient.  The
model runs through tests/numeric/run_model (NNC_ENTRY_EVAL for `out`, NNC_ENTRY_GRAD for
grad.x, grad.w, grad.b), fused and unfused in float64 (the im2col path) and fused in float32
(oneDNN on the CPU where nnc has it; CUDA's helpers with --cuda), and every value is compared
with torch in float64:
|nnc - torch| <= RTOL * |torch| + ATOL * max(1, max|torch|), RTOL/ATOL 1e-10 in float64 and
1e-5 in float32.  The "chunked" cases lower the column buffers' budget (NNC_TEST_CONV_SCRATCH,
passes/plan.c) so that the convolution runs in several chunks of the batch, the last one short
(on the CPU in f64: oneDNN takes f32 convolutions where nnc has it).

    test_conv_torch.py --run-model PATH [--cuda] [-k SUBSTRING]

--cuda runs the float32 models on the CUDA target; exit 77 (skipped) where there is none.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

F = torch.nn.functional
TOL = {"f64": (1e-10, 1e-10), "f32": (1e-5, 1e-5)}
rng = np.random.default_rng(2024)


def conv(name, x, w, bias, args, torch_args, pool=None, torch_pool=None):
    """x, w: shapes; args: the conv2d keyword text; pool: a pooling call on h (or None)."""
    return dict(name=name, x=x, w=w, bias=bias, args=args, targs=torch_args, pool=pool, tpool=torch_pool)


def pool(name, x, call, fn):
    return dict(name=name, x=x, w=None, bias=False, args=None, targs=None, pool=call, tpool=fn)


CASES = [
    conv("conv_pad1_bias", (2, 3, 7, 6), (4, 3, 3, 3), True, "padding = 1", dict(padding=1)),
    conv("conv_stride2_rect", (2, 3, 9, 8), (5, 3, 3, 2), False, "stride = 2, padding = (1, 2)",
         dict(stride=2, padding=(1, 2))),
    conv("conv_stride_pair", (2, 2, 9, 10), (3, 2, 2, 3), True, "stride = (2, 3)", dict(stride=(2, 3))),
    conv("conv_dilation", (2, 2, 9, 9), (3, 2, 3, 3), True, "padding = 2, dilation = 2", dict(padding=2, dilation=2)),
    conv("conv_groups", (2, 4, 6, 6), (6, 2, 3, 3), True, "padding = 1, groups = 2", dict(padding=1, groups=2)),
    conv("conv_depthwise", (2, 4, 6, 5), (8, 1, 3, 3), True, "padding = 1, groups = 4", dict(padding=1, groups=4)),
    conv("conv_same_5x5", (2, 2, 8, 8), (3, 2, 5, 5), True, "padding = \"same\"", dict(padding="same")),
    conv("conv_valid_1x1", (2, 3, 4, 5), (2, 3, 1, 1), True, "padding = \"valid\"", dict(padding="valid")),
    conv("conv_maxpool", (2, 2, 8, 8), (3, 2, 3, 3), True, "padding = 1", dict(padding=1),
         "max_pool2d(h, 2)", lambda h: F.max_pool2d(h, 2)),
    conv("conv_maxpool_overlap", (2, 2, 9, 9), (3, 2, 3, 3), True, "padding = 1", dict(padding=1),
         "max_pool2d(h, 3, stride = 2, padding = 1)", lambda h: F.max_pool2d(h, 3, stride=2, padding=1)),
    conv("conv_avgpool", (2, 2, 8, 8), (3, 2, 3, 3), False, "padding = 1", dict(padding=1),
         "avg_pool2d(h, 2)", lambda h: F.avg_pool2d(h, 2)),
    # several chunks: (2 * 9 + 3) * 6 * 7 = 882 column elements a sample, and the budget lowered
    # to 2000 (NNC_TEST_CONV_SCRATCH): chunks of 2 samples, the last one short
    conv("conv_chunked", (5, 2, 6, 7), (3, 2, 3, 3), True, "padding = 1", dict(padding=1)),
    conv("conv_chunked_groups", (5, 4, 6, 7), (6, 2, 3, 3), True, "stride = (2, 1), padding = 1, groups = 2",
         dict(stride=(2, 1), padding=1, groups=2)),
    pool("maxpool_dilation", (2, 3, 9, 9), "max_pool2d(x, (2, 3), stride = 1, dilation = 2)",
         lambda x: F.max_pool2d(x, (2, 3), stride=1, dilation=2)),
    pool("maxpool_pad", (2, 3, 7, 7), "max_pool2d(x, 2, padding = 1)", lambda x: F.max_pool2d(x, 2, padding=1)),
    pool("avgpool_pad", (2, 3, 9, 9), "avg_pool2d(x, 3, stride = 2, padding = 1)",
         lambda x: F.avg_pool2d(x, 3, stride=2, padding=1)),
    pool("avgpool_rect", (2, 3, 6, 9), "avg_pool2d(x, (2, 3))", lambda x: F.avg_pool2d(x, (2, 3))),
    pool("global_avg", (2, 3, 5, 4), "adaptive_avg_pool2d(x, 1)", lambda x: F.adaptive_avg_pool2d(x, 1)),
]


def out_shape(c):
    x = torch.zeros(c["x"], dtype=torch.float64)
    return torch_forward(c, x, torch.zeros(c["w"], dtype=torch.float64) if c["w"] else None,
                         torch.zeros(c["w"][0], dtype=torch.float64) if c["bias"] else None).shape


def torch_forward(c, x, w, b):
    h = F.conv2d(x, w, b, **c["targs"]) if c["w"] else x
    return c["tpool"](h) if c["tpool"] else h


def dims(s):
    return ", ".join(str(d) for d in s)


def model(c, oshape):
    lines = ["input u: f32[B, 1]", "param x: f32[%s] = zeros()" % dims(c["x"])]
    params = ["x"]
    if c["w"]:
        lines.append("param w: f32[%s] = zeros()" % dims(c["w"]))
        params.append("w")
        if c["bias"]:
            lines.append("param b: f32[%d] = zeros()" % c["w"][0])
            params.append("b")
        lines.append("h = conv2d(x, w%s, %s)" % (", b" if c["bias"] else "", c["args"]))
    lines.append("param k: f32[%s] = zeros()" % dims(oshape))
    params.append("k")
    lines.append("output out = %s" % (c["pool"] if c["pool"] else "h"))
    lines.append("loss = sum(tanh(out) * k) + mean(u)")
    lines.append("train {\n    data u = npy(\"u.npy\")\n    batch = 2\n    minimize loss\n}")
    return "\n".join(lines) + "\n", params


def run_case(a, tmp, c, precision, fused):
    oshape = out_shape(c)
    src, params = model(c, oshape)
    d = os.path.join(tmp, "%s_%s_%s" % (c["name"], precision, "fused" if fused else "unfused"))
    os.makedirs(d)
    with open(os.path.join(d, "m.nn"), "w") as f:
        f.write(src)
    dt = np.float64 if precision == "f64" else np.float32
    vals = {"x": rng.standard_normal(c["x"]), "k": rng.uniform(-1.5, 1.5, tuple(oshape))}
    if c["w"]:
        vals["w"] = rng.standard_normal(c["w"]) * 0.5
        if c["bias"]:
            vals["b"] = rng.standard_normal(c["w"][0])
    vals = {n: v.astype(dt).astype(np.float64) for n, v in vals.items()}   # what nnc holds
    for n in params:
        np.save(os.path.join(d, n + ".npy"), vals[n].astype(dt))
    np.save(os.path.join(d, "u.npy"), np.zeros((2, 1), dt))
    cmd = [a.run_model, os.path.join(d, "m.nn"), d, "--entry", "eval,grad", "--load-params",
           ",".join(os.path.join(d, n + ".npy") for n in params)]
    if precision == "f64":
        cmd.append("--f64")
    if not fused:
        cmd.append("--no-fuse")
    if a.cuda:
        cmd.append("--cuda")
    env = dict(os.environ, NNC_TEST_CONV_SCRATCH="2000") if "chunked" in c["name"] else None
    r = subprocess.run(cmd + [os.path.join(d, "u.npy")], capture_output=True, text=True, cwd=d, env=env)
    if r.returncode == 77:
        print("SKIP: no CUDA target or device:\n" + r.stderr)
        sys.exit(77)
    if r.returncode != 0:
        return ["run_model failed:\n" + r.stderr]
    got = {n: np.load(os.path.join(d, n + ".npy")).astype(np.float64) for n in r.stdout.split()}
    t = {n: torch.tensor(v, dtype=torch.float64, requires_grad=n != "k") for n, v in vals.items()}
    out = torch_forward(c, t["x"], t.get("w"), t.get("b"))
    loss = (torch.tanh(out) * t["k"]).sum()
    loss.backward()
    want = {"out": out.detach().numpy()}
    for n in ("x", "w", "b"):
        if n in t:
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
        bad = np.abs(g - w) > rtol * np.abs(w) + atol * max(1.0, float(np.abs(w).max()))
        if bad.any():
            i = tuple(np.argwhere(bad)[0])
            errs.append("%s at %s: nnc %r torch %r (%d of %d differ)" % (n, i, g[i], w[i], int(bad.sum()), bad.size))
    return errs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-model", required=True, type=os.path.abspath)   # the tests run it from temporary folders
    ap.add_argument("--cuda", action="store_true")
    ap.add_argument("-k", default="")
    a = ap.parse_args()
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for c in CASES:
            if a.k not in c["name"]:
                continue
            for precision in ("f32",) if a.cuda else ("f64", "f32"):
                # fusion only regroups the elementwise ops around the helpers: both modes in
                # f64 on the CPU, fused elsewhere (the suite's time)
                for fused in (True, False) if precision == "f64" else (True,):
                    errs = run_case(a, tmp, c, precision, fused)
                    print("%s %-22s %s %-7s%s" % ("FAIL" if errs else "ok  ", c["name"], precision,
                                                  "fused" if fused else "unfused", "".join("\n    " + e for e in errs)))
                    passed += not errs
                    failed += bool(errs)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
