#!/usr/bin/env python3
"""overrides_test.py - flags win over the train section, 0 included (--epochs, --lr,
--clip-grad-norm), and a parameter used only by an output or a metric is allowed and left
untouched by training (PyTorch: grad None, skipped).

    overrides_test.py NNC

Each run saves its parameters (safetensors); the test compares them tensor by tensor."""
import json
import os
import struct
import subprocess
import sys
import tempfile


def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in head.items() if k != "__metadata__"}


def main():
    nnc = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    failures = []
    with tempfile.TemporaryDirectory() as d:
        def run(name, *flags):
            out = os.path.join(d, name + ".st")
            r = subprocess.run([nnc, "output_param.nn", "--quiet", "--save", out, *flags], cwd=here,
                               capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                failures.append(f"{name}: exit {r.returncode}: {r.stderr}")
                return None
            return tensors(out)
        init = run("init", "--epochs", "0")        # the file says 2 epochs: 0 must win
        trained = run("trained")
        still = run("lr0", "--lr", "0")            # the file says lr = 0.1: 0 must win
        # --clip-grad-norm: a small norm changes the run and --metrics reports grad_norm; 0 is
        # no clipping, bit for bit the plain run
        clipped = run("clip", "--clip-grad-norm", "0.01", "--metrics", os.path.join(d, "clip.jsonl"))
        unclipped = run("clip0", "--clip-grad-norm", "0")
        if trained and clipped and unclipped:
            if clipped["W"] == trained["W"]:
                failures.append("--clip-grad-norm 0.01 did not change the run")
            if unclipped != trained:
                failures.append("--clip-grad-norm 0 is not the run without clipping")
            with open(os.path.join(d, "clip.jsonl")) as f:
                steps = [json.loads(line) for line in f if '"type":"step"' in line]
            if not steps or not all(r.get("grad_norm", 0) > 0 for r in steps):
                failures.append("--clip-grad-norm: --metrics gave no grad_norm for some step")
        if init and trained and still:
            if trained["V"] != init["V"]:
                failures.append("V (used only by an output and a metric) changed during training")
            if trained["W"] == init["W"]:
                failures.append("W did not train: the test proves nothing")
            if still["W"] != init["W"]:
                failures.append("--lr 0 did not win over the file's lr: W changed")
    for f in failures:
        print("FAIL:", f)
    print(f"overrides: {'ok' if not failures else 'failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
