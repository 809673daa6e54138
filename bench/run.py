#!/usr/bin/env python3
"""run.py - nnc against PyTorch (and NumPy) on the same machine, in the same run.

    bench/run.py [--nnc build/nnc] [--threads N] [--rounds 5] [--quick] [--torch2 PYTHON] [--precision-only]
                 [--startup-only] [--steps-only] [--gpt-only]

Every case runs nnc and the reference alternately (A B A B ...) for --rounds rounds, each
round many steps after a warm-up; the table gives the median over rounds of each round's
median, the min-max spread, and the nnc/reference time ratio (below 1: nnc is faster).  It
also measures the machine's ceilings (sgemm GFLOP/s, copy GB/s) in the same run, and writes
bench/out/results.csv, bench/out/results.md and bench/out/chart.png (if matplotlib is there).

Both sides run as a user runs them: no tuning variable is set (OMP_*, GOMP_*, OPENBLAS_*, MKL_*,
... are removed from the environment of nnc and of the references alike), and each uses its own
default thread count unless --threads N is given (nnc's --threads N, torch.set_num_threads(N)).
Each step case also prints its time over the sgemm-ceiling time: the step's floating-point
operations (its products and convolutions) at the sgemm rate measured in the same run (OpenBLAS,
2048^3, every core): 1.0 would be a step that runs at the BLAS's best speed from end to end.

PyTorch 2.x from PyPI (MKL, oneDNN, Inductor) is what a new user installs: every step case and the
convnet are also measured against its eager mode and torch.compile.  --torch2 names a Python that
has it; without one, run.py makes bench/out/torch2-venv (python3 -m venv, pip install torch numpy:
about 5 GB from PyPI) and uses it, or says why not and goes on without (--no-torch2: do not try).
"""
import argparse, json, os, re, subprocess, sys, tempfile, time

import startup_ab

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = "/usr/bin/python3"


def run(cmd, env=None):
    """Runs cmd, returns (stdout, seconds, peak RSS in MiB)."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    out, err = p.communicate()
    secs = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(f"benchmark command failed: {' '.join(cmd)}\n{err}")
    return out, secs


def rss_of(cmd, env=None):
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1), os.dup2(devnull, 2)
        os.execvpe(cmd[0], cmd, env or os.environ)
    _, status, ru = os.wait4(pid, 0)
    return ru.ru_maxrss / 1024.0


def last_json(text):
    return json.loads([l for l in text.splitlines() if l.startswith("{")][-1])


def median(xs):   # the middle one (the upper middle one of an even count)
    xs = sorted(xs)
    return xs[len(xs) // 2]


class Suite:
    def __init__(self, a):
        self.a = a
        self.rows = []
        self.gflops = None   # the sgemm ceiling, once measured
        # both sides as a user runs them: none of the thread or BLAS variables set
        self.env = startup_ab.user_env()
        # --coretype: Debian's OpenBLAS misdetects some AVX-512 machines (as Prescott or
        # Haswell); then both sides (PyTorch 1.13 shares the system OpenBLAS) get the same kernels
        if a.coretype:
            self.env["OPENBLAS_CORETYPE"] = a.coretype
        self.tenv = self.env
        self.nenv = self.env
        self.threads = ["--threads", str(a.threads)] if a.threads > 0 else []   # nnc's flag
        self.tthreads = str(max(a.threads, 0))   # the references' argument: 0 is their default

    def add(self, case, nnc, ref, refname, unit, flop=None):
        r = {"case": case, "nnc": median(nnc), "nnc_min": min(nnc), "nnc_max": max(nnc),
             "ref": median(ref) if ref else None, "ref_min": min(ref) if ref else None,
             "ref_max": max(ref) if ref else None, "ref_name": refname, "unit": unit}
        r["ratio"] = r["nnc"] / r["ref"] if ref else None
        # the step's time over its sgemm-ceiling time (flop at the sgemm rate of this run)
        scale = {"us": 1e-6, "ms": 1e-3}.get(unit)
        r["ceiling"] = r["nnc"] * scale / (flop / (self.gflops * 1e9)) if flop and scale and self.gflops else None
        self.rows.append(r)
        print(fmt_row(r), flush=True)

    def nnc(self, *args, env=None):
        out, secs = run([self.a.nnc, *args], env or self.nenv)
        return out, secs

    def mlp(self, model, sizes, batch, steps):
        n, t, e, c = [], [], [], []
        flop = mlp_flop([int(s) for s in sizes.split(",")], batch)
        for _ in range(self.a.rounds):
            out, _ = self.nnc(os.path.join(ROOT, model), "--bench", str(steps), "--batch", str(batch),
                              *self.threads, "--quiet")
            n.append(last_json(out)["median_us"])
            out, _ = run([PY, os.path.join(HERE, "torch_ref.py"), "mlp", sizes, str(batch), self.tthreads,
                          str(steps)], self.tenv)
            t.append(last_json(out)["median_us"])
            for mode, acc in (("mlp", e), ("mlp-compile", c)) if self.a.torch2 else ():
                out, _ = run([self.a.torch2, os.path.join(HERE, "torch_ref.py"), mode, sizes, str(batch),
                              self.tthreads, str(steps)], self.tenv)
                acc.append(last_json(out)["median_us"])
        self.add(f"MLP {sizes.replace(',', '-')} batch {batch} (step)", n, t, "PyTorch 1.13", "us", flop)
        if self.a.torch2:
            self.add(f"MLP {sizes.replace(',', '-')} batch {batch} (step)", n, e, "torch 2 eager", "us", flop)
            self.add(f"MLP {sizes.replace(',', '-')} batch {batch} (step)", n, c, "torch.compile", "us", flop)

    def precision(self, model, sizes, batch, steps):
        """--precision bf16 against f32 (nnc, interleaved) and against torch.autocast bf16."""
        b, f, t = [], [], []
        for _ in range(self.a.rounds):
            for prec, out in (("bf16", b), ("f32", f)):
                o, _ = self.nnc(os.path.join(ROOT, model), "--bench", str(steps), "--batch", str(batch),
                                *self.threads, "--quiet", "--precision", prec)
                out.append(last_json(o)["median_us"])
            o, _ = run([PY, os.path.join(HERE, "torch_ref.py"), "mlp-bf16", sizes, str(batch), self.tthreads,
                        str(steps)], self.tenv)
            t.append(last_json(o)["median_us"])
        flop = mlp_flop([int(s) for s in sizes.split(",")], batch)
        self.add(f"MLP {sizes.replace(',', '-')} batch {batch} step, bf16 vs f32", b, f, "nnc f32", "us", flop)
        self.add(f"MLP {sizes.replace(',', '-')} batch {batch} step, bf16 vs torch.autocast bf16", b, t,
                 "PyTorch autocast", "us")

    def fusion(self, model, batch, steps):
        """Fused against --no-fuse, the same model and batch, interleaved."""
        f, u = [], []
        for _ in range(self.a.rounds):
            for flags, out in (((), f), (("--no-fuse",), u)):
                o, _ = self.nnc(os.path.join(ROOT, model), "--bench", str(steps), "--batch", str(batch),
                                *self.threads, "--quiet", *flags)
                out.append(last_json(o)["median_us"])
        self.add(f"{os.path.basename(model)} batch {batch} step: fused vs --no-fuse", f, u, "nnc --no-fuse", "us",
                 mlp_flop([784, 128, 10], batch))

    def linreg(self):
        n, npy, tor = [], [], []
        for _ in range(self.a.rounds):
            with tempfile.NamedTemporaryFile(suffix=".jsonl") as f:
                self.nnc(os.path.join(ROOT, "models/linreg.nn"), "--quiet", "--threads", "1", "--metrics", f.name)
                lines = [json.loads(l) for l in open(f.name) if '"type":"epoch"' in l]
                # the loop of 1000 epochs, as NumPy's is timed: from the end of epoch 1 to the end
                # of the last, scaled by 1000/999 (the set-up before epoch 1, which NumPy's time
                # leaves out too, is data, parameters and opening the metrics file)
                n.append(1e3 * (lines[-1]["seconds"] - lines[0]["seconds"]) * len(lines) / (len(lines) - 1))
            npy.append(1e3 * last_json(run([PY, os.path.join(HERE, "torch_ref.py"), "linreg-numpy"], self.tenv)[0])["seconds"])
            tor.append(1e3 * last_json(run([PY, os.path.join(HERE, "torch_ref.py"), "linreg-torch"], self.tenv)[0])["seconds"])
        self.add("linreg 1000 epochs vs NumPy", n, npy, "NumPy", "ms")
        self.add("linreg 1000 epochs vs PyTorch", n, tor, "PyTorch", "ms")

    def epochs(self):
        n, t = [], []
        for _ in range(max(3, self.a.rounds // 2 | 1)):
            n.append(self.nnc(os.path.join(ROOT, "models/mlp.nn"), "--quiet", *self.threads)[1])
            t.append(run([PY, os.path.join(HERE, "torch_ref.py"), "epochs", "3", self.tthreads], self.tenv)[1])
        self.add("3 epochs Fashion-MNIST, whole process (warm cache)", n, t, "PyTorch", "s")

    def startup(self):
        """Start to the first step: nothing cached (a fresh XDG_CACHE_HOME: the compiler and the
        decompression of Fashion-MNIST), the data cached but not the code (a model edited, or
        new), and everything cached (startup_ab.starts)."""
        cold, code, warm, imp = [], [], [], []
        mlp = os.path.join(ROOT, "models/mlp.nn")
        for _ in range(self.a.rounds):
            c, d, w = startup_ab.starts(self.a.nnc, mlp, self.nenv)
            cold.append(c)
            code.append(d)
            warm.append(w)
            imp.append(last_json(run([PY, os.path.join(HERE, "torch_ref.py"), "import"], self.tenv)[0])["seconds"])
        self.add("start to first step, cold cache (vs import torch)", cold, imp, "import torch", "s")
        self.add("start to first step, code not cached, data cached (vs import torch)", code, imp, "import torch", "s")
        self.add("start to first step, warm cache (vs import torch)", warm, imp, "import torch", "s")

    def convnet(self, batch, steps):
        """models/convnet.nn's step against PyTorch 2.x eager and torch.compile, interleaved."""
        n, e, c = [], [], []
        for _ in range(self.a.rounds):
            out, _ = self.nnc(os.path.join(ROOT, "models/convnet.nn"), "--bench", str(steps), "--batch", str(batch),
                              *self.threads, "--quiet")
            n.append(last_json(out)["median_us"] / 1e3)
            for mode, acc in (("eager", e), ("compile", c)):
                out, _ = run([self.a.torch2, os.path.join(HERE, "torch_convnet.py"), str(batch), self.tthreads,
                              str(steps), mode], self.tenv)
                acc.append(last_json(out)["median_us"] / 1e3)
        self.add(f"convnet.nn batch {batch} (step)", n, e, "torch 2 eager", "ms", CONVNET_FLOP * batch)
        self.add(f"convnet.nn batch {batch} (step)", n, c, "torch.compile", "ms", CONVNET_FLOP * batch)

    def gpt(self, batch, steps):
        """models/gpt.nn's training step (AdamW, clipping, the schedule) against nanoGPT's model in
        PyTorch 1.13 (the system's) and 2.x eager and torch.compile, interleaved; its tokens from
        models/gpt_prepare.py into bench/out/gpt/gpt_data, beside a copy of the model."""
        d = os.path.join(HERE, "out", "gpt")
        model = os.path.join(d, "gpt.nn")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(ROOT, "models", "gpt.nn")) as src, open(model, "w") as dst:
            dst.write(src.read())
        if not os.path.exists(os.path.join(d, "gpt_data", "train.bin")):
            run([PY, os.path.join(ROOT, "models", "gpt_prepare.py"), "--out", os.path.join(d, "gpt_data")])
        src = open(model).read()
        L, C, T, V = (int(re.search(r"^%s = (\d+)" % k, src, re.M).group(1))
                      for k in ("n_layer", "n_embd", "block_size", "vocab_size"))
        nparams = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
        flop = (6 * nparams + 12 * L * C * T) * batch * T   # nanoGPT's estimate_mfu per step
        refs = [("PyTorch 1.13", PY, "eager", [])] + [
            (name, self.a.torch2, mode, []) for name, mode in (("torch 2 eager", "eager"), ("torch.compile", "compile"))
            if self.a.torch2]
        n = []
        for _ in range(self.a.rounds):
            out, _ = self.nnc(model, "--bench", str(steps), "--batch", str(batch), *self.threads, "--quiet")
            n.append(last_json(out)["median_us"] / 1e3)
            for _, py, mode, acc in refs:
                out, _ = run([py, os.path.join(HERE, "torch_gpt.py"), model, str(batch), self.tthreads, str(steps),
                              mode], self.tenv)
                acc.append(last_json(out)["median_us"] / 1e3)
        for name, _, _, acc in refs:
            self.add(f"gpt.nn batch {batch} (step)", n, acc, name, "ms", flop)

    def llama(self, batch, steps):
        """models/llama.nn's training step (AdamW, clipping, the schedule) against the same LLaMA in
        PyTorch 2.x eager and torch.compile (tests/ref/test_llama_torch.py's model, its attention
        F.scaled_dot_product_attention), interleaved; on gpt.nn's tokens (bench/out/gpt/gpt_data)."""
        d = os.path.join(HERE, "out", "gpt")
        model = os.path.join(d, "llama.nn")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(ROOT, "models", "llama.nn")) as src, open(model, "w") as dst:
            dst.write(src.read())
        if not os.path.exists(os.path.join(d, "gpt_data", "train.bin")):
            run([PY, os.path.join(ROOT, "models", "gpt_prepare.py"), "--out", os.path.join(d, "gpt_data")])
        if not self.a.torch2:
            return
        src = open(model).read()
        C, L, F, V, T = (int(re.search(r"^%s = (\d+)" % k, src, re.M).group(1))
                         for k in ("dim", "n_layers", "hidden_dim", "vocab_size", "max_seq_len"))
        nparams = 2 * V * C + L * (4 * C * C + 3 * C * F + 2 * C) + C
        flop = (6 * nparams + 12 * L * C * T) * batch * T   # as gpt.nn's: nanoGPT's estimate_mfu
        refs = [(name, mode, []) for name, mode in (("torch 2 eager", "eager"), ("torch.compile", "compile"))]
        n = []
        for _ in range(self.a.rounds):
            out, _ = self.nnc(model, "--bench", str(steps), "--batch", str(batch), *self.threads, "--quiet")
            n.append(last_json(out)["median_us"] / 1e3)
            for _, mode, acc in refs:
                out, _ = run([self.a.torch2, os.path.join(HERE, "torch_llama.py"), model, str(batch), self.tthreads,
                              str(steps), mode], self.tenv)
                acc.append(last_json(out)["median_us"] / 1e3)
        for name, _, acc in refs:
            self.add(f"llama.nn batch {batch} (step)", n, acc, name, "ms", flop)

    def memory(self):
        n = [rss_of([self.a.nnc, os.path.join(ROOT, "models/mlp.nn"), "--epochs", "1", "--quiet"], self.nenv)]
        t = [rss_of([PY, os.path.join(HERE, "torch_ref.py"), "epochs", "1", self.tthreads], self.tenv)]
        self.add("peak RSS, 1 epoch Fashion-MNIST", n, t, "PyTorch", "MiB")


def mlp_flop(sizes, batch):
    """A training step's product flops: every layer forward, its weight gradient, and its input
    gradient except the first layer's (the data needs none)."""
    macs = [a * b for a, b in zip(sizes[:-1], sizes[1:])]
    return 2 * batch * (3 * sum(macs) - macs[0])


# models/convnet.nn per sample: conv1 (1->32, 5x5, 28x28) forward and weight gradient, conv2
# (32->64, 5x5, 14x14) forward and both gradients, fc1 (3136->1024) and fc2 (1024->10) all three
CONVNET_FLOP = 2 * (2 * 32 * 28 * 28 * 25 + 3 * 64 * 14 * 14 * 32 * 25 + 3 * 3136 * 1024 + 3 * 1024 * 10)


def machine_line(ceil, threads):
    info = open("/proc/cpuinfo").read()
    field = lambda k: next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith(k)), "?")
    flags = field("flags").split()
    isa = ", ".join(f for f in ("avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16") if f in flags) or "no AVX-512"
    return (f"machine: {os.cpu_count()} cores of {field('model name')} (family {field('cpu family')}, model "
            f"{field('model')}: {isa}), threads {threads or 'each side its default'}; sgemm "
            f"{ceil['sgemm2048_gflops']} GFLOP/s (2048^3), copy {ceil['copy_gbs']} GB/s; load average "
            f"{' '.join(open('/proc/loadavg').read().split()[:3])}")


def fmt_row(r):
    ref = f"{r['ref']:10.3f} [{r['ref_min']:.3f}-{r['ref_max']:.3f}]" if r["ref"] is not None else ""
    ratio = f"{r['ratio']:6.3f}" if r["ratio"] is not None else ""
    ceiling = f"{r['ceiling']:5.2f}" if r.get("ceiling") else ""
    return (f"| {r['case']:<52} | {r['nnc']:10.3f} [{r['nnc_min']:.3f}-{r['nnc_max']:.3f}] | {r['ref_name']:<12} | "
            f"{ref} | {r['unit']:<3} | {ratio} | {ceiling} |")


def torch2_python():
    """bench/out/torch2-venv's Python with PyTorch 2.x, made on first use; None (said why) if it
    cannot be made (no venv module, no network to PyPI)."""
    venv = os.path.join(HERE, "out", "torch2-venv")
    py = os.path.join(venv, "bin", "python")
    probe = [py, "-c", "import torch, numpy; assert int(torch.__version__.split('.')[0]) >= 2"]
    if os.path.exists(py) and subprocess.run(probe, capture_output=True).returncode == 0:
        return py
    print(f"making {venv} with PyTorch 2.x from PyPI (about 5 GB, a few minutes; --no-torch2 skips it)", flush=True)
    steps = [[sys.executable if os.path.basename(sys.executable).startswith("python3") else PY, "-m", "venv", venv],
             [os.path.join(venv, "bin", "pip"), "install", "-q", "torch", "numpy"]]
    for cmd in steps:
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"no PyTorch 2.x: `{' '.join(cmd)}` failed: {(r.stderr or r.stdout).strip()[-300:]}")
            return None
    return py if subprocess.run(probe, capture_output=True).returncode == 0 else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nnc", default=os.path.join(ROOT, "build", "nnc"))
    ap.add_argument("--threads", type=int, default=0, help="threads for both sides (default: each one's own)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="only the MLP step at batch 64")
    ap.add_argument("--coretype", default="",
                    help="OPENBLAS_CORETYPE for both sides (where Debian's OpenBLAS misdetects the CPU)")
    ap.add_argument("--torch2", help="a Python with PyTorch 2.x (from PyPI); default: bench/out/torch2-venv")
    ap.add_argument("--no-torch2", action="store_true", help="do not measure against PyTorch 2.x")
    ap.add_argument("--convnet-only", action="store_true", help="only the convnet cases (needs --torch2)")
    ap.add_argument("--precision-only", action="store_true", help="only the bf16 cases")
    ap.add_argument("--gpt-only", action="store_true", help="only models/gpt.nn's and models/llama.nn's steps")
    ap.add_argument("--startup-only", action="store_true", help="only linear regression and the start-up cases")
    ap.add_argument("--steps-only", action="store_true",
                    help="only the training steps: the MLPs (f32 and bf16) and the convnet at batch 64")
    a = ap.parse_args()
    if not a.torch2 and not a.no_torch2:
        a.torch2 = torch2_python()
    s = Suite(a)
    os.makedirs(os.path.join(HERE, "out"), exist_ok=True)
    exe = os.path.join(HERE, "out", "ceilings")
    subprocess.run(["cc", "-O2", "-o", exe, os.path.join(HERE, "ceilings.c"), "-lopenblas"], check=True)
    ceil = last_json(run([exe], s.env)[0])
    s.gflops = ceil["sgemm2048_gflops"]
    print(machine_line(ceil, a.threads))
    print("| case | nnc median [min-max] | reference | ref median [min-max] | unit | nnc/ref | nnc/ceiling |")
    if a.steps_only:
        s.mlp("models/mlp.nn", "784,128,10", 64, 300)
        s.mlp("models/mlp.nn", "784,128,10", 256, 200)
        s.mlp("models/mlp_large.nn", "784,1024,1024,10", 256, 20)
        s.precision("models/mlp_large.nn", "784,1024,1024,10", 256, 20)
        if a.torch2:
            s.convnet(64, 20)
        s.gpt(32, 10)
        s.llama(32, 10)
    elif a.gpt_only:
        s.gpt(32, 10)
        s.llama(32, 10)
    elif a.startup_only:
        s.linreg()
        s.startup()
    elif a.precision_only:
        s.precision("models/mlp_large.nn", "784,1024,1024,10", 256, 40)
    elif not a.convnet_only:
        s.mlp("models/mlp.nn", "784,128,10", 64, 300)
        s.fusion("models/mlp.nn", 64, 300)
    if not (a.quick or a.convnet_only or a.precision_only or a.startup_only or a.steps_only or a.gpt_only):
        s.gpt(32, 10)
        s.llama(32, 10)
        s.mlp("models/mlp.nn", "784,128,10", 256, 200)
        s.mlp("models/mlp_large.nn", "784,1024,1024,10", 256, 20)
        s.precision("models/mlp_large.nn", "784,1024,1024,10", 256, 20)
        s.linreg()
        s.epochs()
        s.startup()
        s.memory()
    if a.torch2 and (a.convnet_only or not (a.quick or a.precision_only or a.startup_only or a.steps_only or a.gpt_only)):
        s.convnet(64, 20)
        s.convnet(256, 10)
    print(f"load average at the end: {' '.join(open('/proc/loadavg').read().split()[:3])}")
    large = [r for r in s.rows if "1024" in r["case"]]
    if large:
        gflops = mlp_flop([784, 1024, 1024, 10], 256) / (large[0]["nnc"] * 1e-6) / 1e9
        print(f"large MLP: nnc {gflops:.1f} GFLOP/s over the whole step = {gflops / ceil['sgemm2048_gflops']:.0%} of sgemm")
    with open(os.path.join(HERE, "out", "results.csv"), "w") as f:
        f.write("case,unit,nnc_median,nnc_min,nnc_max,ref_name,ref_median,ref_min,ref_max,ratio,nnc_over_ceiling\n")
        for r in s.rows:
            f.write(f"{r['case']},{r['unit']},{r['nnc']},{r['nnc_min']},{r['nnc_max']},{r['ref_name']},"
                    f"{r['ref']},{r['ref_min']},{r['ref_max']},{r['ratio']},{r['ceiling']}\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        rows = [r for r in s.rows if r["ratio"]]
        fig, ax = plt.subplots(figsize=(9, 0.5 + 0.45 * len(rows)))
        ax.barh([r["case"] for r in rows], [r["ratio"] for r in rows])
        ax.axvline(1.0, color="k", lw=0.8)
        ax.set_xlabel("nnc time / reference time (lower is better)")
        fig.tight_layout()
        fig.savefig(os.path.join(HERE, "out", "chart.png"), dpi=100)
    except ImportError:
        print("(matplotlib missing: no chart; apt-get install python3-matplotlib)")


if __name__ == "__main__":
    main()
