"""torch_mlp_step.py - PyTorch eager on the GPU: one training step of the 784-128-10 MLP.

  python3 bench/torch_mlp_step.py [--steps 200] [--batch 64]

The step nnc's `--bench` times (models/mlp.nn): Linear(784,128) -> ReLU -> Linear(128,10),
cross-entropy, SGD lr 0.01 with zero_grad/backward/step, on one fixed batch already on the
device.  Each step is timed with CUDA events after a warm-up; prints one JSON line with the
median in microseconds, like nnc --bench.
"""
import argparse, json, statistics

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=20)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device for PyTorch"}))
        return 1
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False   # nnc uses CUBLAS_DEFAULT_MATH unless --tf32
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.rand(a.batch, 784, device=dev)
    y = torch.randint(0, 10, (a.batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(a.steps):
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        step()
        t1.record()
        t1.synchronize()
        times.append(t0.elapsed_time(t1) * 1000.0)
    times.sort()
    print(json.dumps({"steps": a.steps, "batch": a.batch, "median_us": round(statistics.median(times), 3),
                      "min_us": round(times[0], 3), "max_us": round(times[-1], 3),
                      "device": torch.cuda.get_device_name(0), "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
