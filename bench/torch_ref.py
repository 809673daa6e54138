"""torch_ref.py - the PyTorch (and NumPy) side of nnc's benchmarks. One case per call, one
JSON line out, so bench/run.py can interleave it with nnc in the same run.

  torch_ref.py mlp SIZES BATCH THREADS STEPS   e.g. mlp 784,128,10 64 2 300
  torch_ref.py mlp-bf16 SIZES BATCH THREADS STEPS   the same under torch.autocast("cpu", bfloat16)
  torch_ref.py mlp-compile SIZES BATCH THREADS STEPS   the step under torch.compile (PyTorch 2.x):
                                                 forward, backward and optimizer step compiled
  torch_ref.py linreg-numpy | linreg-torch      1000 full-batch epochs, the NumPy example
  torch_ref.py epochs N THREADS                 N epochs of the 784-128-10 MLP on Fashion-MNIST
  torch_ref.py import                           seconds to `import torch`

THREADS 0 leaves PyTorch's own default (what a user gets); N calls torch.set_num_threads(N).
"""
import gzip, json, sys, time

DATA = "/usr/share/datasets/fashion-mnist/"


def mlp_step(sizes, batch, threads, steps, bf16=False, compiled=False):
    import contextlib
    import torch
    if threads > 0:
        torch.set_num_threads(threads)
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.rand(batch, sizes[0])
    y = torch.randint(0, sizes[-1], (batch,))
    def step():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
            logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.float(), y)
        loss.backward()
        opt.step()
        return loss

    run = torch.compile(step) if compiled else step
    times, first = [], None
    for i in range(steps + 10):
        t = time.perf_counter()
        run()
        if i == 0:
            first = time.perf_counter() - t
        if i >= 10:
            times.append(time.perf_counter() - t)
    times.sort()
    return {"median_us": 1e6 * times[len(times) // 2], "min_us": 1e6 * times[0], "max_us": 1e6 * times[-1],
            "first_s": first, "torch": torch.__version__, "threads": torch.get_num_threads()}


def linreg(kind):
    import numpy as np
    rng = np.random.default_rng(0)
    X = rng.standard_normal((100, 10)).astype(np.float32)
    y = rng.standard_normal((100, 1)).astype(np.float32)
    W = rng.standard_normal((10, 1)).astype(np.float32)
    t = time.perf_counter()
    if kind == "numpy":
        for _ in range(1000):
            pred = X @ W
            grad = 2 * X.T @ (pred - y) / 100
            W -= 0.01 * grad
    else:
        import torch
        torch.set_num_threads(1)
        Xt, yt, Wt = torch.from_numpy(X), torch.from_numpy(y), torch.from_numpy(W).requires_grad_()
        opt = torch.optim.SGD([Wt], lr=0.01)
        t = time.perf_counter()
        for _ in range(1000):
            opt.zero_grad()
            loss = ((Xt @ Wt - yt) ** 2).mean()
            loss.backward()
            opt.step()
    return {"seconds": time.perf_counter() - t}


def load_idx(name):
    import numpy as np
    with gzip.open(DATA + name) as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def epochs(n, threads):
    import torch
    if threads > 0:
        torch.set_num_threads(threads)
    torch.manual_seed(42)
    x = torch.from_numpy(load_idx("train-images-idx3-ubyte.gz").reshape(-1, 784).astype("float32") / 255)
    y = torch.from_numpy(load_idx("train-labels-idx1-ubyte.gz").astype("int64"))
    tx = torch.from_numpy(load_idx("t10k-images-idx3-ubyte.gz").reshape(-1, 784).astype("float32") / 255)
    ty = torch.from_numpy(load_idx("t10k-labels-idx1-ubyte.gz").astype("int64"))
    model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=64, shuffle=True)
    for _ in range(n):
        for xb, yb in loader:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
        with torch.no_grad():
            acc = (model(tx).argmax(1) == ty).float().mean().item()
    return {"accuracy": acc}


def main():
    case = sys.argv[1]
    if case in ("mlp", "mlp-bf16", "mlp-compile"):
        out = mlp_step([int(s) for s in sys.argv[2].split(",")], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
                       case == "mlp-bf16", case == "mlp-compile")
    elif case.startswith("linreg-"):
        out = linreg(case[7:])
    elif case == "epochs":
        out = epochs(int(sys.argv[2]), int(sys.argv[3]))
    elif case == "import":
        t = time.perf_counter()
        import torch  # noqa: F401
        out = {"seconds": time.perf_counter() - t}
    else:
        sys.exit("unknown case " + case)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
