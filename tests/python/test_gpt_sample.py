"""models/gpt_sample.py (text from a trained gpt.nn) against nanoGPT's model in PyTorch.

gpt.nn is trained briefly by the nnc command on a slice of the licence texts, then:
- the next-token logits gpt_sample.py reads (the eval entry at batch 1, the context at positions
  0 .. n-1 of the window and zeros after it) equal nanoGPT's model(idx_cond)[:, -1, :] on the
  unpadded context, with the same weights, for contexts shorter than, as long as and longer than
  block_size (cropped to its last block_size tokens);
- greedy decoding (top-k 1) gives the same tokens as nanoGPT's generate loop with top_k = 1;
- the command draws the same text for the same --seed, and continues --start.
"""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import nnc

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
NNC = os.environ.get("NNC_BIN", os.path.join(ROOT, "build", "nnc"))
SAMPLE = os.path.join(ROOT, "models", "gpt_sample.py")
sys.path.insert(0, os.path.join(ROOT, "models"))
sys.path.insert(0, os.path.join(ROOT, "tests", "ref"))

torch = pytest.importorskip("torch")
import gpt_sample  # noqa: E402
import test_gpt_torch as ref  # noqa: E402  (nanoGPT's GPT, written out again)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(model file, checkpoint, validation tokens) of gpt.nn trained for an epoch on a slice."""
    if not os.path.isdir("/usr/share/common-licenses"):
        pytest.skip("no /usr/share/common-licenses")
    d = tmp_path_factory.mktemp("gpt")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "models", "gpt_prepare.py"), "--out", str(d),
                        "--max-chars", "60000"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with open(os.path.join(ROOT, "models", "gpt.nn")) as f:
        src = f.read()
    src, n = re.subn(r'tokens\("gpt_data/', 'tokens("', src)
    assert n == 2
    src, n = re.subn(r"warmup = \d+", "warmup = 10", src)   # the run is shorter than gpt.nn's warm-up
    assert n == 1
    with open(d / "gpt.nn", "w") as f:
        f.write(src)
    r = subprocess.run([NNC, "gpt.nn", "--epochs", "1", "--batch", "16", "--quiet", "--save", "gpt.st"],
                       capture_output=True, text=True, cwd=d)
    assert r.returncode == 0, r.stderr
    val = np.fromfile(d / "val.bin", dtype="<u2").astype(np.int64)
    return d / "gpt.nn", d / "gpt.st", val


def torch_model(model_file, ckpt):
    with open(model_file) as f:
        c = ref.Config(f.read())
    model, missing, unexpected, _ = ref.load_into_torch(c, dict(nnc.load(ckpt)), torch.float32)
    assert not missing and not unexpected, (missing, unexpected)
    return model.eval(), c


def torch_logits(model, ctx, block_size):
    """nanoGPT's model(idx_cond)[:, -1, :] (its forward without targets), in float64."""
    idx = torch.tensor([list(ctx)[-block_size:]])
    with torch.no_grad():
        t = idx.size(1)
        x = model.transformer.wte(idx) + model.transformer.wpe(torch.arange(t))
        for block in model.transformer.h:
            x = block(x)
        return model.lm_head(model.transformer.ln_f(x))[0, -1].double().numpy()


def nnc_model(model_file, ckpt):
    m = nnc.compile(str(model_file), batch=1)
    m.load_state_dict({k: v for k, v in nnc.load(ckpt).items() if not k.startswith("optimizer.")})
    return m


def test_next_logits_match_nanogpt(trained):
    model_file, ckpt, val = trained
    model, c = torch_model(model_file, ckpt)
    m = nnc_model(model_file, ckpt)
    T = m.input_shape("idx")[1]
    assert T == c.block_size
    for n in (1, 2, 17, T - 1, T, T + 9):
        ctx = val[100:100 + n]
        got, want = gpt_sample.next_logits(m, ctx, T), torch_logits(model, ctx, T)
        err = np.max(np.abs(got - want)) / np.max(np.abs(want))
        assert err < 1e-5, "context of %d tokens: logits differ by %.3g (relative to the largest)" % (n, err)


def test_greedy_matches_nanogpt(trained):
    model_file, ckpt, val = trained
    model, c = torch_model(model_file, ckpt)
    m = nnc_model(model_file, ckpt)
    start = list(val[:5])
    got = gpt_sample.generate(m, start, 70, top_k=1)   # past block_size: the window slides
    want = list(start)
    gaps = []
    for _ in range(70):
        z = torch_logits(model, want, c.block_size)
        top2 = np.sort(z)[-2:]
        gaps.append(top2[1] - top2[0])
        want.append(int(np.argmax(z)))
    assert got == want, "greedy tokens differ from nanoGPT's:\n  nnc   %r\n  torch %r\n  (smallest top-2 gap %.3g)" % (
        gpt_sample.decode(got), gpt_sample.decode(want), min(gaps))


def test_command_repeats_for_a_seed(trained):
    model_file, ckpt, _ = trained

    def run(*extra):
        r = subprocess.run([sys.executable, SAMPLE, "--model", str(model_file), "--load", str(ckpt), "--start", "The ",
                            "--max-new-tokens", "40"] + list(extra), capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return r.stdout

    a, b, other = run("--seed", "7"), run("--seed", "7"), run("--seed", "8", "--num-samples", "2")
    assert a == b
    assert a.startswith("The ") and len(a) == len("The ") + 40 + 1
    assert other.count("---------------") == 2 and other != a
    r = subprocess.run([sys.executable, SAMPLE, "--model", str(model_file), "--temperature", "0"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "--temperature must be above 0" in r.stderr
