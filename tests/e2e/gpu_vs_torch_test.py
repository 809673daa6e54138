#!/usr/bin/env python3
"""gpu_vs_torch_test.py NNC - bench/gpu_vs_torch.py's plumbing, on the CPU (CI has no GPU).

  - every case's model compiles, and its PyTorch twin has the same parameters (shapes) and the
    same optimizer;
  - a tiny case runs both sides on the CPU and the markdown table has its row, with nnc's time,
    PyTorch eager's and their ratio;
  - a deadline too short for any case skips them with a note, and an unknown case is an error."""
import os, re, subprocess, sys, tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import gpu_vs_torch as g  # noqa: E402

SCRIPT = os.path.join(ROOT, "bench", "gpu_vs_torch.py")
fails = 0


def check(cond, what, out=""):
    global fails
    if not cond:
        fails += 1
        print("FAIL:", what, out, sep="\n" if out else "")


def models_match(nnc):
    import torch
    cases = g.case_table()
    with tempfile.TemporaryDirectory() as d:
        g.write_models(cases, list(cases), d)
        for name, case in cases.items():
            p = subprocess.run([nnc, name + ".nn", "--target", "cpu", "--dump-after=parse"], cwd=d, capture_output=True,
                               text=True)
            check(p.returncode == 0, f"{name}: the model compiles", p.stdout + p.stderr)
            shapes = sorted(re.findall(r"= param +: f32\[([0-9,]+)\]", p.stdout))
            model, opt, _, _ = g.torch_build(case, torch, torch.device("cpu"))
            tshapes = sorted(",".join(str(n) for n in t.shape) for t in model.parameters())
            check(shapes and shapes == tshapes, f"{name}: nnc's parameters are torch's: {shapes} and {tshapes}")
            text = open(os.path.join(d, name + ".nn")).read()
            want = ("adamw" if isinstance(opt, torch.optim.AdamW) else "adam" if isinstance(opt, torch.optim.Adam)
                    else "sgd")
            check(re.search(rf"optimizer = {want}\(", text) is not None, f"{name}: both use {want}")
            data = f'tokens("{name}.bin"' if case.get("gpt") else f"randn({case['batch']},"
            check(f"batch = {case['batch']}" in text and data in text, f"{name}: its batch and data")


def run(args):
    p = subprocess.run([sys.executable, SCRIPT] + args, capture_output=True, text=True, timeout=240)
    return p.returncode, p.stdout, p.stderr


def main():
    nnc = os.path.abspath(sys.argv[1])
    try:
        import torch  # noqa: F401
    except ImportError:
        print("gpu_vs_torch_test: skipped (no torch for this Python)")
        return 77
    models_match(nnc)
    rc, out, err = run(["--nnc", nnc, "--device", "cpu", "--cases", "tiny", "--steps", "5", "--deadline", "90"])
    row = re.search(r"^\| 784-16-10, batch 8 \(smoke test\) \| (\d+) \| (\d+) \| (\d+) \(([0-9.]+)\) \| (.*) \| "
                    r"([0-9.]+) \|$", out, re.M)
    check(rc == 0 and row, "the tiny case's row: nnc, nnc with its data kept, eager (ratio), ..., nnc / best loop",
          out + err)
    check("## nnc against PyTorch on the CPU (no GPU: the plumbing only)" in out, "the table's title", out)
    check(re.search(r"torch [0-9.]+\S*, nnc \S+, `bench/gpu_vs_torch.py --device cpu`", out) is not None,
          "the torch version and nnc's commit", out)
    rc, out, err = run(["--nnc", nnc, "--device", "cpu", "--cases", "tiny,mlp", "--deadline", "12"])
    check(rc == 0 and "tiny: skipped, out of time" in out and "mlp: skipped, out of time" in out,
          "a deadline too short skips every case, with a note", out + err)
    rc, out, err = run(["--nnc", nnc, "--cases", "nope"])
    check(rc != 0 and "no case nope" in err, "an unknown case is an error", out + err)
    print("gpu_vs_torch_test:", "FAILED" if fails else "passed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
