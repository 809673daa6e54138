#!/usr/bin/env python3
"""gpu_vs_torch.py - issue 26's table: nnc's training step against PyTorch's on the same GPU, in one run.

    python3 bench/gpu_vs_torch.py [--nnc build-gpu/nnc] [--deadline 480] [--cases mlp,convnet,...]
                                  [--device cuda|cpu] [--profile mlp_4096,convnet] [--json out.json]
                                  [--keep DIR] [--dry-run]

Every case is one row: nnc's `--bench` (the loop: the batch comes from host memory, the loss is
read back every step; median wall time per step; `--data-on-device false`), nnc's `--bench` with
the training set kept on the GPU (`--data-on-device true`: a step sends its rows' positions and
gathers the batch there; compared with PyTorch's graph on data already on the GPU) and PyTorch's
step on the same model (the
same layers and sizes, loss and optimizer; initialisation does not matter for speed), each
timed the same way, per step, median after a warm-up:
  eager        the batch copied from pageable host memory, the step, loss.item()
  compile      the same with the model under torch.compile(mode="reduce-overhead")
  graph        the whole step (forward, backward, optimizer) captured once as a CUDA graph
               (torch.cuda.graph), the batch copied from pinned memory into its inputs, replay,
               loss.item()
  graph_gpu    the same graph with the data already on the GPU: replay and synchronize only
The markdown table gives each time and nnc's time over it (below 1: nnc is faster), the last
column nnc over PyTorch's best loop (the fastest of eager, compile and graph), headed by the
GPU's name, the date, torch's version and nnc's commit.

Cases (models/*.nn with their data replaced by random batches and labels, so no data set is
needed; the torch models are built to match them):
  mlp            models/mlp.nn: 784-128-10, batch 64, SGD lr 0.01
  mlp_large      models/mlp_large.nn: 784-1024-1024-10, batch 256, SGD lr 0.01
  mlp_4096       models/mlp_large.nn widened to 784-4096-4096-10, batch 4096 (492 GFLOP per step)
  mlp_4096_tf32  the same, nnc --tf32 against torch's allow_tf32
  mlp_4096_bf16  the same, nnc --precision bf16 against torch.autocast(bfloat16)
  convnet        models/convnet.nn: two 5x5 convolutions, pooling, 1024 units, dropout, batch 64, Adam
  matmul_1000    a 1000x1000 weight times a batch of 1000, loss mean(y*y), SGD lr 0.01 (issue 26's
                 last row, as defined here)
  tiny           784-16-10, batch 8: the smoke test's (not run unless named)
  gpt            models/gpt.nn: 4 layers, 128 wide, T 64, vocabulary 96, batch 32, AdamW, clipping
  gpt2_bf16      models/gpt2_small.nn: GPT-2 small (124M parameters, T 1024), batch 12, --precision
                 bf16 against nanoGPT's model (bench/torch_gpt.py) under autocast(bfloat16) with
                 fused AdamW; the table's footer gives tokens per second.  Both GPT cases are not
                 in the default list (name them) and take random tokens; PyTorch's graph modes are
                 not captured for them (its loop is eager or torch.compile, as nanoGPT runs)

Time: the whole run, nnc's build included (when --nnc is not given: a Release build with
-DNNC_CUDA=ON into build-gpu), keeps to --deadline seconds (default 480: 8 minutes); every nnc
run and every torch process has its own timeout within what is left, and a case that would not
fit is skipped with a note in the table's footer, as is a mode that fails (a capture PyTorch
refuses, torch.compile missing in an old torch).  --device cpu runs both sides on the CPU (graph
modes skipped): the plumbing, on a machine without a GPU.  --profile CASES then runs
`nnc --profile` on those cases (after the table, within the deadline) and prints its tables.
"""
import argparse, json, os, re, shutil, signal, subprocess, sys, tempfile, threading, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from run import last_json, median  # noqa: E402  (bench/run.py's helpers)
from startup_ab import user_env  # noqa: E402  (nnc as a user runs it: no thread or nnc variables)

MODES = ("eager", "compile", "graph", "graph_gpu")
MODE_HEAD = {"eager": "PyTorch eager", "compile": "torch.compile reduce-overhead", "graph": "PyTorch graph, pinned",
             "graph_gpu": "graph, data on GPU"}


def case_table():
    """name -> what nnc runs and what torch builds.  model: a models/ file and its edits."""
    w4096 = {"Linear(784, 1024)": "Linear(784, 4096)", "Linear(1024, 1024)": "Linear(4096, 4096)",
             "Linear(1024, 10)": "Linear(4096, 10)"}
    big = dict(model="mlp_large.nn", edits=w4096, batch=4096, sizes=[784, 4096, 4096, 10], steps=30)
    return {
        "mlp": dict(title="mlp.nn 784-128-10, batch 64", model="mlp.nn", batch=64, sizes=[784, 128, 10], steps=200),
        "mlp_large": dict(title="784-1024-1024-10, batch 256", model="mlp_large.nn", batch=256,
                          sizes=[784, 1024, 1024, 10], steps=200),
        "mlp_4096": dict(big, title="784-4096-4096-10, batch 4096 (492 GFLOP)"),
        "mlp_4096_tf32": dict(big, title="same, --tf32 (PyTorch: allow_tf32)", nnc_flags=["--tf32"], tf32=True),
        "mlp_4096_bf16": dict(big, title="same, bf16 autocast", nnc_flags=["--precision", "bf16"], bf16=True),
        "convnet": dict(title="convnet.nn, batch 64, Adam", model="convnet.nn", batch=64, convnet=True, steps=100),
        "matmul_1000": dict(title="1000x1000 product + loss mean(y*y), batch 1000", text=MATMUL_1000, batch=1000,
                            matmul=1000, steps=100),
        "tiny": dict(title="784-16-10, batch 8 (smoke test)", text=TINY, batch=8, sizes=[784, 16, 10], steps=20),
        "gpt": dict(title="gpt.nn (4 layers, 128 wide, T 64), batch 32, AdamW", model="gpt.nn", batch=32, gpt=True,
                    steps=100),
        "gpt2_bf16": dict(title="GPT-2 small (124M, T 1024), batch 12, bf16 autocast", model="gpt2_small.nn",
                          batch=12, gpt=True, nnc_flags=["--precision", "bf16"], bf16=True, steps=10),
    }


MATMUL_1000 = """\
# gpu_vs_torch.py's 1000x1000 case: one product and a loss that sums a million squares
input x: f32[B, 1000]
param w: f32[1000, 1000] = normal(0, 0.01)
y = x @ w
loss = mean(y * y)
train {
    batch = 1000
    optimizer = sgd(lr = 0.01)
    minimize loss
}
"""

TINY = """\
block Linear(n_in, n_out) {
    param weight: f32[n_out, n_in] = kaiming_uniform(a = sqrt(5))
    param bias:   f32[n_out]       = uniform(-1 / sqrt(n_in), 1 / sqrt(n_in))
    forward(x) = x @ transpose(weight) + bias
}
input x: f32[B, 784]
input y: i32[B]
fc1 = Linear(784, 16)
fc2 = Linear(16, 10)
loss = cross_entropy(fc2(relu(fc1(x))), y)
train {
    batch = 8
    optimizer = sgd(lr = 0.01)
    minimize loss
}
"""

DEFAULT_CASES = "mlp,mlp_large,mlp_4096,mlp_4096_tf32,mlp_4096_bf16,convnet,matmul_1000"
MIN_CASE = 15   # seconds: the least a case is started with (nnc, and torch's import and eager step)


# ---- the nnc side ---------------------------------------------------------------------------------

def model_text(name, case):
    """The case's .nn text with random data of one batch: x from randn, labels from NAME.csv."""
    text = case.get("text") or open(os.path.join(ROOT, "models", case["model"])).read()
    for old, new in case.get("edits", {}).items():
        if old not in text:
            sys.exit(f"gpu_vs_torch: models/{case['model']} has no '{old}' to widen: update case_table()")
        text = text.replace(old, new)
    if case.get("gpt"):   # the token source kept, reading NAME.bin (random tokens); no test set
        text = re.sub(r'^(\s*data [^=]*= tokens\(")[^"]*(".*)$', lambda m: m.group(1) + name + ".bin" + m.group(2),
                      text, count=1, flags=re.M)
        text = re.sub(r"^\s*test .*\n", "", text, flags=re.M)
        text = re.sub(r"^(\s*)batch = \d+", lambda m: f"{m.group(1)}batch = {case['batch']}", text, flags=re.M)
        return f"# made by bench/gpu_vs_torch.py from models/{case['model']}: {case['title']}; random tokens\n" + text
    text = re.sub(r"^\s*(data|test) .*\n", "", text, flags=re.M)
    text = re.sub(r"^(\s*)batch = \d+", lambda m: f"{m.group(1)}batch = {case['batch']}", text, flags=re.M)
    feats = 1000 if case.get("matmul") else 784
    data = f"    data x = randn({case['batch']}, {feats})\n"
    if "input y:" in text:
        data += f'    data y = csv("{name}.csv")\n'
    text = re.sub(r"^train \{\n", lambda m: m.group(0) + data, text, count=1, flags=re.M)
    made = f"models/{case['model']}" if case.get("model") else "its own text"
    return (f"# made by bench/gpu_vs_torch.py from {made}: {case['title']}; one batch of random data\n" + text)


def gpt_config(case):
    """The GPT's sizes, read off the model's constants as bench/torch_gpt.py reads them (without
    importing torch, which this side of the run may not have)."""
    src = open(os.path.join(ROOT, "models", case["model"])).read()
    return {k: int(re.search(r"^%s = (\d+)" % k, src, re.M).group(1))
            for k in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")}


def write_models(cases, names, d):
    for n in names:
        with open(os.path.join(d, n + ".nn"), "w") as f:
            f.write(model_text(n, cases[n]))
        if cases[n].get("gpt"):   # llm.c's token file: 256 int32 of header, then uint16 tokens
            import random
            import struct
            c, rnd = gpt_config(cases[n]), random.Random(0)
            count = max(1 << 16, 4 * cases[n]["batch"] * (c["block_size"] + 1))
            with open(os.path.join(d, n + ".bin"), "wb") as f:
                f.write(struct.pack("<3i", 20240520, 1, count) + bytes(4 * 253))
                f.write(struct.pack(f"<{count}H", *(rnd.randrange(c["vocab_size"]) for _ in range(count))))
            continue
        with open(os.path.join(d, n + ".csv"), "w") as f:
            f.write("".join(f"{i % 10}\n" for i in range(cases[n]["batch"])))


def run_nnc(a, case, d, name, timeout, kept="false"):
    """nnc --bench's median step (us), or (None, why); run in the models' folder d; `kept`: its
    --data-on-device (false: every batch from the host, the loop's semantics)."""
    cmd = ([a.nnc, name + ".nn", "--target", a.target, "--bench", str(case["steps"]), "--quiet", "--data-on-device",
            kept] + case.get("nnc_flags", []))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=user_env(), cwd=d)
    except subprocess.TimeoutExpired:
        return None, f"nnc timed out after {timeout:.0f} s"
    if p.returncode != 0:
        return None, "nnc failed: " + (p.stderr.strip().splitlines() or ["?"])[-1][:200]
    return last_json(p.stdout)["median_us"], None


# ---- the torch side (a child process per case: a hung compile or capture is killed) -------------

def torch_build(case, torch, dev, capturable=False):
    """(model, optimizer, input features, whether it has labels): the case's model as nnc's; a
    fresh one per mode, so each starts as a user's would (Adam is capturable for graphs only)."""
    nn = torch.nn
    if case.get("gpt"):   # nanoGPT's model, AdamW in its two groups (fused on CUDA, as nanoGPT picks)
        from torch_gpt import GPT   # bench/torch_gpt.py
        net = GPT(gpt_config(case)).to(dev)
        decay = [p for p in net.parameters() if p.dim() >= 2]
        rest = [p for p in net.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                                lr=6e-4, betas=(0.9, 0.95), **({"fused": True} if dev.type == "cuda" else {}))
        return net, opt, None, True
    if case.get("convnet"):
        from torch_convnet import Net   # bench/torch_convnet.py: convnet.nn's network
        model = Net().to(dev)
        return model, torch.optim.Adam(model.parameters(), lr=1e-3, capturable=capturable), 784, True
    if case.get("matmul"):
        class Product(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.w = nn.Parameter(torch.randn(n, n) * 0.01)

            def forward(self, x):
                return x @ self.w
        model = Product(case["matmul"]).to(dev)
        return model, torch.optim.SGD(model.parameters(), lr=0.01), case["matmul"], False
    sizes, layers = case["sizes"], []
    for i, o in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(i, o), nn.ReLU()]
    model = nn.Sequential(*layers[:-1]).to(dev)
    return model, torch.optim.SGD(model.parameters(), lr=0.01), sizes[0], True


def torch_child(a):
    """Prints one JSON line per mode as it finishes: {"mode", "median_us"} or {"mode", "skipped"}."""
    import contextlib
    import torch
    case = case_table()[a.torch_case]
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    out = lambda **kw: print(json.dumps(kw), flush=True)  # noqa: E731
    out(info={"torch": torch.__version__,
              "gpu": torch.cuda.get_device_name(0) if cuda else "the CPU (no GPU: the plumbing only)"})
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = bool(case.get("tf32"))
    torch.manual_seed(0)
    if case.get("gpt"):
        return torch_gpt_child(a, torch, case, dev, out)
    feats, labels = case.get("matmul") or 784, not case.get("matmul")
    B = case["batch"]
    x_host, y_host = torch.randn(B, feats), torch.randint(0, 10, (B,))
    autocast = lambda: (torch.autocast(dev.type, dtype=torch.bfloat16, cache_enabled=False)  # noqa: E731
                        if case.get("bf16") else contextlib.nullcontext())

    def loss_of(m, x, y):
        with autocast():
            z = m(x)
        return torch.nn.functional.cross_entropy(z.float(), y) if labels else (z.float() * z.float()).mean()

    def timed(step, steps, warm=10):
        for _ in range(warm):
            step()
        ts = []
        for _ in range(steps):
            t = time.perf_counter()
            step()
            ts.append(time.perf_counter() - t)
        return round(1e6 * median(ts), 1)

    def loop(m, opt):
        def step():
            x, y = x_host.to(dev), y_host.to(dev)
            opt.zero_grad(set_to_none=True)
            loss = loss_of(m, x, y)
            loss.backward()
            opt.step()
            loss.item()
        return step

    t_end, graphs = time.monotonic() + a.budget, {}
    for mode in a.modes.split(","):
        if time.monotonic() > t_end - 5:
            out(mode=mode, skipped="out of time")
            continue
        try:
            if mode == "eager":
                model, opt = torch_build(case, torch, dev)[:2]
                out(mode=mode, median_us=timed(loop(model, opt), case["steps"]))
            elif mode == "compile":
                if not hasattr(torch, "compile"):
                    out(mode=mode, skipped=f"torch {torch.__version__} has no torch.compile")
                    continue
                model, opt = torch_build(case, torch, dev)[:2]
                compiled = torch.compile(model, mode="reduce-overhead")
                out(mode=mode, median_us=timed(loop(compiled, opt), case["steps"]))
            elif not cuda:
                out(mode=mode, skipped="CUDA graphs need --device cuda")
            else:   # graph and graph_gpu time one capture
                if not graphs:
                    model, opt = torch_build(case, torch, dev, capturable=True)[:2]
                    graphs = graph_steps(torch, model, opt, loss_of, x_host, y_host, dev)
                out(mode=mode, median_us=timed(graphs[mode], case["steps"]))
        except Exception as e:  # a capture or compile PyTorch refuses: say which, go on
            out(mode=mode, skipped=f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")
    return 0


def torch_gpt_child(a, torch, case, dev, out):
    """nanoGPT's training step on the case's sizes: its model (bench/torch_gpt.py), AdamW in its two
    groups (fused on CUDA, as nanoGPT's configure_optimizers picks), autocast for bf16, the loss
    read every step; `compile` is torch.compile(model) in its default mode, as nanoGPT's train.py."""
    import contextlib
    c = gpt_config(case)
    B, T = case["batch"], c["block_size"]
    x_host = torch.randint(0, c["vocab_size"], (B, T), dtype=torch.long)
    y_host = torch.randint(0, c["vocab_size"], (B, T), dtype=torch.long)
    autocast = lambda: (torch.autocast(dev.type, dtype=torch.bfloat16)  # noqa: E731
                        if case.get("bf16") else contextlib.nullcontext())
    t_end = time.monotonic() + a.budget
    for mode in a.modes.split(","):
        if mode.startswith("graph"):
            out(mode=mode, skipped="not captured for the GPT cases")
            continue
        if time.monotonic() > t_end - 5:
            out(mode=mode, skipped="out of time")
            continue
        try:
            net, opt = torch_build(case, torch, dev)[:2]
            model = torch.compile(net) if mode == "compile" else net

            def step():
                x, y = x_host.to(dev), y_host.to(dev)
                with autocast():
                    loss = model(x, y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                opt.step()
                loss.item()
            for _ in range(3):
                step()
            ts = []
            for _ in range(case["steps"]):
                t = time.perf_counter()
                step()
                ts.append(time.perf_counter() - t)
            out(mode=mode, median_us=round(1e6 * median(ts), 1))
            del net, model, opt
        except Exception as e:
            out(mode=mode, skipped=f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")
    return 0


def graph_steps(torch, model, opt, loss_of, x_host, y_host, dev):
    """The whole step captured once as a CUDA graph (torch.cuda.graph's whole-network recipe),
    and the two ways to run it: {"graph": fed from pinned memory, "graph_gpu": data in place}."""
    sx, sy = x_host.to(dev), y_host.to(dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            loss_of(model, sx, sy).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_loss = loss_of(model, sx, sy)
        static_loss.backward()
        opt.step()
    xp, yp = x_host.pin_memory(), y_host.pin_memory()

    def pinned():
        sx.copy_(xp, non_blocking=True)
        sy.copy_(yp, non_blocking=True)
        g.replay()
        static_loss.item()

    def on_gpu():
        g.replay()
        torch.cuda.synchronize()

    return {"graph": pinned, "graph_gpu": on_gpu}


def run_torch(a, name, timeout):
    """{mode: us or skip reason}, and the info line, from a child killed at `timeout`."""
    modes = ["eager", "graph", "graph_gpu", "compile"] if a.device == "cuda" else ["eager", "compile"]
    modes = [m for m in modes if m in a.torch_modes.split(",")]
    cmd = [a.python, os.path.abspath(__file__), "--torch-case", name, "--device", a.device,
           "--modes", ",".join(modes), "--budget", str(int(timeout))]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines, err = [], []
    readers = [threading.Thread(target=lambda f, acc: acc.extend(f), args=(p.stdout, lines)),
               threading.Thread(target=lambda f, acc: acc.extend(f), args=(p.stderr, err))]
    for r in readers:
        r.start()
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    for r in readers:
        r.join()
    res, info = {}, {}
    for line in lines:
        if line.startswith("{"):
            d = json.loads(line)
            if "info" in d:
                info = d["info"]
            elif "median_us" in d:
                res[d["mode"]] = d["median_us"]
            else:
                res[d["mode"]] = d["skipped"]
    for m in modes:
        if m not in res:
            res[m] = (f"timed out after {timeout:.0f} s" if p.returncode == -signal.SIGKILL else
                      "torch failed: " + ("".join(err).strip().splitlines() or ["?"])[-1][:160])
    return res, info


# ---- the run ---------------------------------------------------------------------------------------

class Clock:
    def __init__(self, deadline):
        self.t0, self.deadline = time.monotonic(), deadline

    def left(self):
        return self.deadline - (time.monotonic() - self.t0)


def build_nnc(a, clock):
    if a.nnc:
        a.nnc = os.path.abspath(a.nnc)
        return None
    d = os.path.join(ROOT, "build-gpu")
    a.nnc = os.path.join(d, "nnc")
    cmds = [["cmake", "-S", ROOT, "-B", d, "-DCMAKE_BUILD_TYPE=Release", "-DNNC_CUDA=ON"],
            ["cmake", "--build", d, "--target", "nnc", "-j", str(os.cpu_count() or 2)]]
    for c in cmds:
        try:
            p = subprocess.run(c, capture_output=True, text=True, timeout=max(10, min(clock.left() - 60, 300)))
        except subprocess.TimeoutExpired:
            return f"the build ran out of time: {' '.join(c)}"
        if p.returncode != 0:
            return f"the build failed: {' '.join(c)}\n{p.stdout[-2000:]}{p.stderr[-2000:]}"
    return None


def nnc_commit():
    try:
        c = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return c.stdout.strip() + ("-dirty" if dirty else "") if c.returncode == 0 else "unknown"
    except OSError:
        return "unknown"


def cell(nnc, t):
    if not isinstance(t, (int, float)):
        return "-"
    return f"{t:.0f} ({nnc / t:.2f})" if isinstance(nnc, (int, float)) else f"{t:.0f}"


def print_table(a, cases, rows, notes, info):
    gpu = info.get("gpu") or "?"
    print(f"\n## nnc against PyTorch on {gpu}\n")
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, torch {info.get('torch', '?')}, nnc {nnc_commit()}, "
          f"`bench/gpu_vs_torch.py --device {a.device}`. Median microseconds per step; in brackets nnc's time over "
          "that column's (below 1: nnc is faster). A loop takes every batch from host memory and reads the loss "
          "every step; nnc with the data on the GPU keeps the training set there (each batch gathered on the GPU), "
          "and its time is the one compared with PyTorch's graph on data already on the GPU.\n")
    modes = [m for m in MODES if a.device == "cuda" or m in ("eager", "compile")]
    print("| model | nnc | nnc, data on GPU | " + " | ".join(MODE_HEAD[m] for m in modes) + " | nnc / best loop |")
    print("|" + " --- |" * (len(modes) + 4))
    for name, nnc, kept, torch_res in rows:
        loops = [torch_res.get(m) for m in ("eager", "compile", "graph")]
        best = min((t for t in loops if isinstance(t, (int, float))), default=None)
        ratio = f"{nnc / best:.2f}" if isinstance(nnc, (int, float)) and best else "-"
        nnc_cell = f"{nnc:.0f}" if isinstance(nnc, (int, float)) else "-"
        kept_cell = f"{kept:.0f}" if isinstance(kept, (int, float)) else "-"
        # the graph on data already on the GPU against nnc's run on its kept training set
        print(f"| {cases[name]['title']} | {nnc_cell} | {kept_cell} | "
              + " | ".join(cell(kept if m == "graph_gpu" else nnc, torch_res.get(m)) for m in modes) + f" | {ratio} |")
    for name, nnc, _, torch_res in rows:
        if cases[name].get("gpt"):
            c = gpt_config(cases[name])
            tok = cases[name]["batch"] * c["block_size"]
            rate = lambda t: f"{tok / (t * 1e-6):,.0f}" if isinstance(t, (int, float)) else "-"  # noqa: E731
            notes.append(f"{name}: tokens per second ({tok} a step): nnc {rate(nnc)}, "
                         + ", ".join(f"{MODE_HEAD[m]} {rate(torch_res.get(m))}" for m in ("eager", "compile")))
    if notes:
        print("\n" + "\n".join(f"- {n}" for n in notes))
    sys.stdout.flush()


def run_cases(a, cases, names, d, clock):
    """Each case's row.  Time: nnc gets up to its share of what is left, PyTorch all that is left
    but MIN_CASE seconds for each later case (its slow mode, torch.compile, runs last, so a
    timeout costs that mode only); a case with less than MIN_CASE left is skipped."""
    rows, notes, info = [], [], {}
    for i, name in enumerate(names):
        later = len(names) - i - 1
        left = clock.left() - a.reserve
        if left < MIN_CASE:
            notes.append(f"{name}: skipped, out of time ({clock.left():.0f} s left of {a.deadline:.0f})")
            continue
        nnc, why = run_nnc(a, cases[name], d, name, max(10, min(left / (later + 1), 120)))
        if why:
            notes.append(f"{name}: nnc: {why}")
        kept, why = run_nnc(a, cases[name], d, name, max(10, min((clock.left() - a.reserve) / (later + 2), 120)),
                            "true")
        if why:
            notes.append(f"{name}: nnc, data on GPU: {why}")
        t = max(10, min(clock.left() - a.reserve - MIN_CASE * later, 240))
        res, inf = run_torch(a, name, t) if not a.no_torch else ({}, {})
        info = info or inf
        for m, v in res.items():
            if not isinstance(v, (int, float)):
                notes.append(f"{name}: {m}: {v}")
        rows.append((name, nnc, kept, res))
        print(f"gpu_vs_torch: {name}: nnc {nnc} us, data on GPU {kept} us, torch {res} ({clock.left():.0f} s left)",
              file=sys.stderr)
    return rows, notes, info


def run_profiles(a, names, d, clock):
    for name in names:
        if clock.left() < 20:
            print(f"\n(--profile {name}: skipped, out of time)")
            continue
        cmd = [a.nnc, name + ".nn", "--target", a.target, "--profile", "20"] + case_table()[name].get("nnc_flags", [])
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=min(clock.left() - 5, 120), env=user_env(),
                               cwd=d)
            print(f"\n### nnc --profile: {name}\n\n```\n{p.stdout}{p.stderr}```")
        except subprocess.TimeoutExpired:
            print(f"\n(--profile {name}: timed out)")


def dry_run(a, cases, names, d):
    for n in names:
        print(f"== {n}: {cases[n]['title']}\n{open(os.path.join(d, n + '.nn')).read()}"
              f"$ {a.nnc or 'build-gpu/nnc'} {d}/{n}.nn --target {a.target} --bench {cases[n]['steps']} --quiet "
              f"--data-on-device false|true {' '.join(cases[n].get('nnc_flags', []))}\n"
              f"$ {a.python} {__file__} --torch-case {n} "
              f"--device {a.device}\n")


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nnc", help="an nnc built with the CUDA target (default: build one into build-gpu)")
    ap.add_argument("--deadline", type=float, default=480, help="seconds for the whole run, the build included")
    ap.add_argument("--reserve", type=float, default=5, help="seconds kept back for the table")
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--nnc-target", help="nnc's --target (default: the device; cuda with --device cpu runs the "
                                         "CUDA emulator's plumbing when its libraries are on the loader path)")
    ap.add_argument("--python", default=sys.executable, help="the Python with torch (default: this one)")
    ap.add_argument("--profile", default="", help="cases to run nnc --profile on after the table")
    ap.add_argument("--keep", help="write the models into this folder (and keep them)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--steps", type=int, help="steps per case (default: each case's own)")
    ap.add_argument("--no-torch", action="store_true", help="nnc only")
    ap.add_argument("--torch-modes", default=",".join(MODES), help="PyTorch's modes to time (default: all four)")
    ap.add_argument("--dry-run", action="store_true", help="print the models and commands; run nothing")
    ap.add_argument("--torch-case", help=argparse.SUPPRESS)
    ap.add_argument("--modes", help=argparse.SUPPRESS)
    ap.add_argument("--budget", type=float, default=120, help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.target = a.nnc_target or a.device
    return a


def main():
    a = parse()
    if a.torch_case:
        return torch_child(a)
    clock = Clock(a.deadline)
    cases = case_table()
    names = [n for n in a.cases.split(",") if n]
    profiles = [n for n in a.profile.split(",") if n]
    bad = [n for n in names + profiles if n not in cases]
    if bad:
        sys.exit(f"gpu_vs_torch: no case {', '.join(bad)} (cases: {', '.join(cases)})")
    if a.steps:
        for c in cases.values():
            c["steps"] = a.steps
    why = None if a.dry_run else build_nnc(a, clock)
    if why:
        sys.exit("gpu_vs_torch: " + why)
    d = a.keep or tempfile.mkdtemp(prefix="gpu_vs_torch.")
    os.makedirs(d, exist_ok=True)
    try:
        write_models(cases, sorted(set(names + profiles)), d)
        if a.dry_run:
            dry_run(a, cases, names, d)
            return 0
        rows, notes, info = run_cases(a, cases, names, d, clock)
        print_table(a, cases, rows, notes, info)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"info": info, "commit": nnc_commit(), "rows": rows, "notes": notes}, f, indent=1)
        run_profiles(a, profiles, d, clock)
    finally:
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)
    print(f"\ngpu_vs_torch: {a.deadline - clock.left():.0f} s of {a.deadline:.0f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
