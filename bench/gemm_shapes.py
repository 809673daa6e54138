#!/usr/bin/env python3
"""gemm_shapes.py - cuBLAS's own rate, through torch, on the products of GPT-2 small's step.

    python3 bench/gemm_shapes.py [--batch 12] [--reps 20]

nnc's `--profile` of GPT-2 small in bf16 (H200, 2026-11-27) gave its layers' products 600-760
TFLOP/s and lm_head's three 95-151 TFLOP/s.  This times each product of the step with
torch.matmul on bf16 operands, in the layouts nnc asks cuBLAS for (x @ W^T forward, dy @ W for
the input's gradient, dy^T @ x for the weight's), f32 accumulation: if cuBLAS is as slow on
lm_head's shapes, the layout or the library is the lever; if not, nnc's call.  Prints one line
per product: shape, median milliseconds over `reps` after a warm-up, TFLOP/s.
"""
import argparse
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("gemm_shapes.py: no CUDA device")
        return 77
    R = a.batch * 1024   # rows: batch times the context
    # (name, rows, in, out): x [R, in] @ W^T with W [out, in]
    layers = [("c_attn", R, 768, 2304), ("attn.c_proj", R, 768, 768), ("c_fc", R, 768, 3072),
              ("mlp.c_proj", R, 3072, 768), ("lm_head", R, 768, 50304)]
    print("%s, torch %s, bf16 operands, f32 accumulation" % (torch.cuda.get_device_name(), torch.__version__))
    for name, r, k, n in layers:
        x = torch.randn(r, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn(r, n, device="cuda", dtype=torch.bfloat16)
        for what, fn in (("x @ W^T", lambda: x @ w.t()), ("dy @ W", lambda: dy @ w), ("dy^T @ x", lambda: dy.t() @ x)):
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            times = []
            for _ in range(a.reps):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn()
                e.record()
                e.synchronize()
                times.append(s.elapsed_time(e))
            ms = sorted(times)[len(times) // 2]
            print("  %-11s %-9s rows %d, in %d, out %d  %8.3f ms  %6.1f TFLOP/s" %
                  (name, what, r, k, n, ms, 2.0 * r * k * n / ms / 1e9))
    return 0


if __name__ == "__main__":
    sys.exit(main())
