"""models/gpt.nn as a user runs it, on a slice of its text: models/gpt_prepare.py writes the tokens
beside the model (gpt_data/), and `nnc gpt.nn` trains a few steps from there (its warm-up cut to
one step).  Checked:
- the prepared files: raw uint16 tokens below vocab_size, 90% for training, vocab.json's 96
  characters decoding the text back;
- the first step's loss is about ln(vocab_size), as nanoGPT's initialisation gives, and the
  epoch's loss is below it; the test loss is finite;
- the checkpoint names the repeated blocks as PyTorch does: transformer.h.0 ... h.{n_layer-1};
- --eval on the saved checkpoint gives the epoch's test loss back;
- models/gpt2_small.nn (GPT-2 small) compiles without its data, and --stats reports its 124M
  parameters, AdamW's two moments, and the step's activation memory; its attention fused
  (scaled_dot_product_attention), no [B, H, T, T] tensor is in the step's memory plan at all.
(tests/ref/test_gpt_torch.py compares the losses step by step with nanoGPT's model in torch.)

    gpt_test.py NNC
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "ref"))
import nnc_ref  # noqa: E402

CHARS = 9000   # 8100 training tokens: 126 windows of 64, 4 steps of 32
fails = 0


def check(ok, what):
    global fails
    fails += not ok
    print("%s %s" % ("ok  " if ok else "FAIL", what))


def gpt2_stats(nnc):
    path = os.path.join(ROOT, "models", "gpt2_small.nn")
    with open(path) as f:
        src = f.read()
    c = {k: int(re.search(r"^%s = (\d+)" % k, src, re.M).group(1))
         for k in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")}
    L, H, C, T, V = c["n_layer"], c["n_head"], c["n_embd"], c["block_size"], c["vocab_size"]
    B = int(re.search(r"^\s*batch = (\d+)", src, re.M).group(1))
    with tempfile.TemporaryDirectory() as d:   # no gpt2_data/ there: --stats reads no data
        shutil.copy(path, d)
        r = subprocess.run([nnc, os.path.join(d, "gpt2_small.nn"), "--stats"], capture_output=True, text=True)
    out = r.stdout + r.stderr
    check(r.returncode == 0, "gpt2_small.nn --stats without its data%s" % ("" if r.returncode == 0 else ":\n" + out))
    if r.returncode != 0:
        return
    nparams = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
    got = re.search(r"parameters (\d+) B  optimizer state (\d+) B", out)
    # the rate: one scalar buffer, which the plan starts on 256 bytes like any other
    check(got and int(got.group(1)) == 4 * nparams and 0 <= int(got.group(2)) - 8 * nparams <= 256,
          "GPT-2 small: %d parameters (%s), AdamW's state twice that and the schedule's rate" % (
              nparams, got and got.group(0)))
    act = re.search(r"train_step .* activations +(\d+) B planned, +(\d+) B unplanned", out)
    scores = "[B,%d,%d,%d]" % (H, T, T)
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(path, d)
        plan = subprocess.run([nnc, os.path.join(d, "gpt2_small.nn"), "--dump-after=plan"], capture_output=True,
                              text=True)
    held = [l.strip() for l in plan.stdout.splitlines() if scores in l]
    check(plan.returncode == 0 and "over f32[B," in plan.stdout and act and not held,
          "train_step's activations %.2f GiB planned at batch %d, with no f32%s attention scores "
          "(%d MiB each) anywhere in the plan%s" % (
              int(act.group(1)) / 2**30 if act else -1, B, scores, B * H * T * T * 4 >> 20,
              "" if not held else ": " + "\n".join(held[:3])))

def main():
    nnc = os.path.abspath(sys.argv[1])
    if not os.path.isdir("/usr/share/common-licenses"):
        print("SKIP: no /usr/share/common-licenses")
        return 77
    with tempfile.TemporaryDirectory() as d:
        for f in ("gpt.nn", "gpt_prepare.py"):
            shutil.copy(os.path.join(ROOT, "models", f), d)
        r = subprocess.run([sys.executable, os.path.join(d, "gpt_prepare.py"), "--max-chars", str(CHARS)],
                           capture_output=True, text=True)
        check(r.returncode == 0, "gpt_prepare.py: %s" % (r.stdout.strip() or r.stderr.strip()))
        data = os.path.join(d, "gpt_data")
        train = np.fromfile(os.path.join(data, "train.bin"), dtype="<u2")
        val = np.fromfile(os.path.join(data, "val.bin"), dtype="<u2")
        with open(os.path.join(data, "vocab.json")) as f:
            vocab = json.load(f)
        with open(os.path.join(d, "gpt.nn")) as f:
            src = f.read()
        # 4 steps: the warm-up shortened to fit them (warmup_cosine's cosine then runs over the rest)
        src, n = re.subn(r"warmup = \d+", "warmup = 1", src)
        check(n == 1, "gpt.nn has a warm-up to shorten")
        with open(os.path.join(d, "gpt.nn"), "w") as f:
            f.write(src)
        V = int(re.search(r"^vocab_size = (\d+)", src, re.M).group(1))
        n_layer = int(re.search(r"^n_layer = (\d+)", src, re.M).group(1))
        text = ""
        for p in vocab["files"]:
            with open(p) as f:
                text += f.read()
        text = text[:CHARS]
        decoded = "".join(vocab["itos"][t] for t in np.concatenate([train, val]))
        check(len(train) == CHARS * 9 // 10 and len(val) == CHARS - len(train) and
              int(max(train.max(), val.max())) < V and vocab["vocab_size"] == V,
              "%d + %d tokens below vocab_size %d" % (len(train), len(val), V))
        check(decoded == text.replace("\t", " ").replace("\f", "\n"), "vocab.json decodes the tokens to the text")

        m = os.path.join(d, "m.jsonl")
        nnc_ref.run_nnc(nnc, [os.path.join(d, "gpt.nn"), "--metrics", m, "--save", os.path.join(d, "gpt.st"),
                              "--epochs", "1"], "/")
        steps, epochs = nnc_ref.read_metrics(m)
        check(len(steps) == math.ceil(((len(train) - 1) // 64) / 32), "%d steps of batch 32" % len(steps))
        check(abs(steps[0] - math.log(V)) < 0.25,
              "step 1's loss %.4f is about ln(%d) = %.4f" % (steps[0], V, math.log(V)))
        check(epochs[-1]["loss"] < steps[0] and math.isfinite(epochs[-1]["test_loss"]),
              "the epoch's loss %.4f is below step 1's; test loss %.4f" % (epochs[-1]["loss"], epochs[-1]["test_loss"]))
        params, _ = nnc_ref.load_safetensors(os.path.join(d, "gpt.st"))
        blocks = sorted({int(k.split(".")[2]) for k in params if k.startswith("transformer.h.")})
        check(blocks == list(range(n_layer)) and "transformer.h.0.attn.c_attn.weight" in params
              and "lm_head.weight" not in params,
              "the checkpoint names the blocks transformer.h.0 to transformer.h.%d, and lm_head is wte" % (n_layer - 1))
        r = subprocess.run([nnc, os.path.join(d, "gpt.nn"), "--load", os.path.join(d, "gpt.st"), "--eval"],
                           capture_output=True, text=True, cwd="/")
        out = r.stdout + r.stderr
        got = re.search(r"loss ([0-9.]+)", out) if r.returncode == 0 else None
        check(got is not None and abs(float(got.group(1)) - epochs[-1]["test_loss"]) < 1e-4,
              "--eval of the checkpoint: %s (the epoch's test loss %.6f)" % (out.strip(), epochs[-1]["test_loss"]))
    gpt2_stats(nnc)
    print("%d failed" % fails if fails else "all passed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
