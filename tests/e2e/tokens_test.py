"""tokens(): a token stream made here from a licence text under /usr/share/common-licenses
(byte-level tokens), fed to nnc as llm.c's .bin, as nanoGPT's raw uint16 and as the text
itself (dtype = "uint8"), and the windows nnc reads checked against a Python transcription
(tests/ref/nnc_ref.py token_windows over the Philox helpers).

The windows are observed through the loss: the model's only parameter is an embedding table E
(column 0 a value per token), trained with lr = 0, and its loss is a mean over the batch's x
and y windows of E's values, so each step's loss says which windows the step read.  Checked:
- every step's loss of two shuffled epochs against the windows drawn in Python (random starts
  per epoch, the short last batch), and the test loss over val.bin's windows in file order;
- the three file forms give the same losses;
- shuffle = false: the windows in file order;
- a run stopped by SIGINT and resumed goes on with the same windows (its metrics file equals
  the uninterrupted run's);
- a bigram model on the text learns: its loss over windows of 8 tokens (the sequence's logits and
  labels merged with reshape, as nanoGPT writes it) falls well below ln(128) in two epochs.

    tokens_test.py NNC
"""
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import nnc_ref  # noqa: E402

T, B, SEED = 8, 16, 11
fails = 0


def check(ok, what):
    global fails
    fails += not ok
    print("%s %s" % ("ok  " if ok else "FAIL", what))


def licence_text():
    for name in ("GPL-3", "GPL-2", "Apache-2.0", "Artistic"):
        p = os.path.join("/usr/share/common-licenses", name)
        if os.path.exists(p):
            with open(p, "rb") as f:
                return p, f.read()
    print("SKIP: no licence text under /usr/share/common-licenses")
    sys.exit(77)


def llmc_bin(path, tokens):
    """llm.c's write_datafile: 256 int32 (magic 20240520, version 1, count), then uint16 tokens."""
    header = np.zeros(256, dtype=np.int32)
    header[:3] = (20240520, 1, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())


MODEL = """input x: i32[B, %d]
input y: i32[B, %d]
param E: f32[128, 2] = uniform(0, 1)
e = embedding(x, E)
f = embedding(y, E)
loss = mean(narrow(e, 2, 0, 1)) + mean(narrow(f, 2, 1, 1) * narrow(f, 2, 1, 1))
train {
    data x, y = %s
    test x, y = %s
    batch = %d
    epochs = %d
    seed = %d
    shuffle = %s
    optimizer = sgd(lr = 0)
    minimize loss
}
"""


def model(d, name, source, test, epochs=2, shuffle=True):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(MODEL % (T, T, source, test, B, epochs, SEED, "true" if shuffle else "false"))
    return path


def run(nnc, path, d, tag, extra=()):
    m, ck = os.path.join(d, tag + ".jsonl"), os.path.join(d, tag + ".st")
    nnc_ref.run_nnc(nnc, [path, "--metrics", m, "--save", ck] + list(extra), d)
    steps, epochs = nnc_ref.read_metrics(m)
    return np.array(steps), epochs, nnc_ref.load_safetensors(ck)[0].get("E")


def window_loss(E, tok, starts):
    """The model's loss over windows starting at `starts`, in float64."""
    x = np.stack([tok[s:s + T] for s in starts])
    y = np.stack([tok[s + 1:s + 1 + T] for s in starts])
    return E[x, 0].mean() + (E[y, 1] ** 2).mean()


def want_steps(E, tok, epochs, shuffle):
    n = (len(tok) - 1) // T
    out = []
    for e in range(1, epochs + 1):
        starts = nnc_ref.token_windows(len(tok), T, SEED, e) if shuffle else np.arange(n) * T
        out += [window_loss(E, tok, starts[i:i + B]) for i in range(0, n, B)]
    return np.array(out)


def close(got, want, what):
    ok = got.shape == want.shape and np.allclose(got, want, rtol=2e-6, atol=0)
    if not ok and got.shape == want.shape:
        i = int(np.argmax(np.abs(got - want)))
        what += ": step %d nnc %r python %r" % (i + 1, got[i], want[i])
    elif not ok:
        what += ": %d steps, want %d" % (len(got), len(want))
    check(ok, what)


def sigint_resume(nnc, path, d, ref_steps):
    """SIGINT once training has started saves and stops (130); --resume finishes the run."""
    m, ck = os.path.join(d, "int.jsonl"), os.path.join(d, "int.st")
    p = subprocess.Popen([nnc, path, "--quiet", "--save", ck, "--metrics", m], cwd=d, stderr=subprocess.PIPE,
                         text=True)
    for _ in range(500):
        if os.path.exists(m) and os.path.getsize(m) > 0:
            break
        time.sleep(0.01)
    p.send_signal(signal.SIGINT)
    err = p.communicate()[1]
    st = p.returncode
    if st != 130:
        print("note: the run finished before SIGINT arrived (status %d)" % st)
        check(st == 0, "an uninterrupted run")
        return
    nnc_ref.run_nnc(nnc, [path, "--save", ck, "--resume", "--metrics", m], d)
    steps, _ = nnc_ref.read_metrics(m)
    where = err.strip().splitlines()[0] if err.strip() else "?"
    check(np.array_equal(np.array(steps), ref_steps), "%s, then resumed: the same windows, loss for loss (%d steps)"
          % (where, len(steps)))


def bigram(nnc, d, text_path):
    path = os.path.join(d, "bigram.nn")
    with open(path, "w") as f:
        f.write("""input x: i32[B, 8]
input y: i32[B, 8]
param W: f32[128, 128] = normal(0, 0.02)
loss = cross_entropy(reshape(embedding(x, W), -1, 128), reshape(y, -1))
train {
    data x, y = tokens("%s", dtype = "uint8")
    batch = 32
    epochs = 2
    optimizer = adam(lr = 0.05)
    minimize loss
}
""" % text_path)
    steps, epochs, _ = run(nnc, path, d, "bigram")
    check(steps[0] > 4.5 and epochs[-1]["loss"] < 2.8,
          "a bigram model learns the text: loss %.3f at step 1 (ln 128 = %.3f), epoch 2's %.3f"
          % (steps[0], math.log(128), epochs[-1]["loss"]))


def main():
    nnc = os.path.abspath(sys.argv[1])
    src, text = licence_text()
    tok = np.frombuffer(text, dtype=np.uint8).astype(np.int64)
    check(tok.max() < 128, "%s is ASCII: %d byte tokens below 128" % (src, len(tok)))
    cut = len(tok) * 9 // 10
    with tempfile.TemporaryDirectory() as d:
        llmc_bin(os.path.join(d, "train.bin"), tok[:cut])
        llmc_bin(os.path.join(d, "val.bin"), tok[cut:])
        tok[:cut].astype(np.uint16).tofile(os.path.join(d, "train.u16"))
        with open(os.path.join(d, "train.txt"), "wb") as f:
            f.write(text[:cut])
        train, val = tok[:cut], tok[cut:]

        path = model(d, "m.nn", 'tokens("train.bin", block_size = %d)' % T, 'tokens("val.bin")')
        steps, epochs, E = run(nnc, path, d, "ref")
        close(steps, want_steps(E, train, 2, True), "two shuffled epochs: every step's windows as drawn in Python")
        nv = (len(val) - 1) // T
        check(abs(epochs[-1]["test_loss"] - window_loss(E, val, np.arange(nv) * T)) < 2e-6,
              "the test loss: val.bin's %d windows in file order" % nv)
        e1 = nnc_ref.token_windows(len(train), T, SEED, 1)
        check(not np.array_equal(e1, nnc_ref.token_windows(len(train), T, SEED, 2)), "each epoch draws anew")

        for name, source in (("train.u16", 'tokens("train.u16")'),
                             ("train.txt", 'tokens("train.txt", dtype = "uint8")')):
            p = model(d, "m_%s.nn" % name.split(".")[1], source, 'tokens("val.bin")')
            s2, _, _ = run(nnc, p, d, name)
            check(np.array_equal(s2, steps), "%s (%s) reads the same tokens: the same losses" % (name, source))

        p = model(d, "ordered.nn", 'tokens("train.bin")', 'tokens("val.bin")', epochs=1, shuffle=False)
        s3, _, E3 = run(nnc, p, d, "ordered")
        close(s3, want_steps(E3, train, 1, False), "shuffle = false: the windows in file order")

        p = model(d, "long.nn", 'tokens("train.bin")', 'tokens("val.bin")', epochs=40)
        ref_long, _, _ = run(nnc, p, d, "long")
        sigint_resume(nnc, p, d, ref_long)
        bigram(nnc, d, "train.txt")
    print("tokens: %d failed" % fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
