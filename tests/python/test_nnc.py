"""The Python module (`import nnc`, python/nnc) against the nnc command: same seed, same losses bit
for bit.  Run by tests/python/run.sh, which installs the module with `pip install .` into a fresh
venv; NNC_BIN is the command built beside it.  Small models only: the whole file takes seconds.
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import nnc
from nnc import _lib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
NNC = os.environ.get("NNC_BIN", os.path.join(ROOT, "build", "nnc"))
RESUME = os.path.join(ROOT, "tests", "e2e", "resume.nn")       # adam, dropout, step_lr, shuffled
PROGRESS = os.path.join(ROOT, "tests", "e2e", "progress.nn")   # sgd, a test set and a metric


def cli(*args, cwd=None):
    p = subprocess.run([NNC] + [str(a) for a in args], capture_output=True, text=True, cwd=cwd)
    assert p.returncode == 0, p.stderr
    return p.stdout


def records(path, drop=("seconds",)):
    with open(path) as f:
        return [{k: v for k, v in json.loads(line).items() if k not in drop} for line in f]


def test_installed_module_is_used():
    """The module under test is the one pip installed (with its libnnc.so), not the checkout's."""
    if os.environ.get("NNC_EXPECT_INSTALLED") != "1":
        pytest.skip("not run from tests/python/run.sh")
    assert os.path.dirname(nnc.__file__).startswith(sys.prefix), nnc.__file__
    assert os.path.exists(os.path.join(os.path.dirname(nnc.__file__), "libnnc.so"))
    assert nnc.__version__ == "0.1.0"


@pytest.mark.parametrize("model", [RESUME, PROGRESS])
def test_fit_matches_the_command(tmp_path, capfd, model):
    """m.fit() is `nnc MODEL.nn`: every step's loss, every epoch's numbers, the checkpoint."""
    out = cli(model, "--metrics", tmp_path / "cli.jsonl", "--save", tmp_path / "cli.st")
    m = nnc.compile(model)
    history = m.fit(metrics=tmp_path / "py.jsonl", save=tmp_path / "py.st")
    printed = capfd.readouterr().out
    assert records(tmp_path / "py.jsonl") == records(tmp_path / "cli.jsonl")
    assert [r for r in records(tmp_path / "cli.jsonl") if r["type"] == "epoch"] == \
        [{k: v for k, v in r.items() if k != "seconds"} for r in history]
    strip = lambda s: re.sub(r"  [0-9.]+s$", "", s, flags=re.M)   # noqa: E731 (the times differ)
    assert strip(printed) == strip(out)
    a, b = nnc.load(tmp_path / "cli.st"), nnc.load(tmp_path / "py.st")
    assert list(a) == list(b) and all(np.array_equal(a[k], b[k]) for k in a)
    assert a.metadata == b.metadata
    assert m.step == int(a.metadata["nnc_step"])


def test_fit_with_flags(tmp_path, capfd):
    """epochs, log_every, tensorboard and quiet are the command's flags."""
    out = cli(PROGRESS, "--epochs", 3, "--log-every", 100, "--metrics", tmp_path / "cli.jsonl")
    m = nnc.compile(PROGRESS)
    m.fit(epochs=3, log_every=100, metrics=tmp_path / "py.jsonl", tensorboard=tmp_path / "tb")
    printed = capfd.readouterr().out
    assert records(tmp_path / "py.jsonl") == records(tmp_path / "cli.jsonl")
    norm = lambda s: re.sub(r"  ([0-9.]+[kM]? step/s|[0-9.]+s)", "", s)   # noqa: E731
    assert norm(printed) == norm(out) and len(printed.splitlines()) == 9
    assert [f for f in os.listdir(tmp_path / "tb") if f.startswith("events.out.tfevents.")]
    m.fit(epochs=1, quiet=True)
    assert capfd.readouterr().out == "" and m.step == 1200


def test_compile_options_are_the_flags(tmp_path):
    """seed, lr, epochs and batch replace the train section's as --seed, --lr, --epochs, --batch."""
    cli(PROGRESS, "--seed", 5, "--lr", 0.05, "--epochs", 1, "--batch", 30, "--metrics", tmp_path / "cli.jsonl")
    m = nnc.compile(PROGRESS, seed=5, lr=0.05, epochs=1, batch=30)
    assert m.seed == 5 and m.batch_max == 30
    m.fit(metrics=tmp_path / "py.jsonl", quiet=True)
    assert records(tmp_path / "py.jsonl") == records(tmp_path / "cli.jsonl")


def write_data(tmp_path, n=60):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], dtype=np.float32) > 0).astype(np.int64) + (x[:, 0] > 1)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    return x, y


def npy_model(tmp_path):
    """A classifier on .npy files, in file order (shuffle = false): the batches are known."""
    return """
input x: f32[B, 4]
input y: i32[B]
param w: f32[3, 4] = normal(0, 0.5)
param b: f32[3] = zeros()
logits = x @ transpose(w) + b
loss = cross_entropy(logits, y)
train {
    data x = npy("%s")
    data y = npy("%s")
    batch = 16
    shuffle = false
    epochs = 2
    optimizer = sgd(lr = 0.1, momentum = 0.9)
    minimize loss
    metric accuracy = accuracy(logits, y)
    seed = 3
}
""" % (tmp_path / "x.npy", tmp_path / "y.npy")


def test_train_step_matches_the_command(tmp_path):
    """A Python loop of train_step over the same batches gives the command's losses, bit for bit,
    from NumPy arrays (int64 labels converted) and from torch tensors alike."""
    torch = pytest.importorskip("torch")
    x, y = write_data(tmp_path)
    (tmp_path / "m.nn").write_text(npy_model(tmp_path))
    cli(tmp_path / "m.nn", "--quiet", "--metrics", tmp_path / "cli.jsonl")
    want = [r["loss"] for r in records(tmp_path / "cli.jsonl") if r["type"] == "step"]
    for to in [lambda a: a, torch.from_numpy]:
        m = nnc.compile(tmp_path / "m.nn")
        got = [m.train_step(x=to(x[i:i + 16]), y=to(y[i:i + 16])) for _ in range(2) for i in range(0, 60, 16)]
        assert got == [np.float32(v) for v in want] and m.step == 8


def test_set_lr_matches_the_command(tmp_path):
    """set_lr, as a schedule's scheduler.step() sets param_group["lr"]: a loop that sets each
    epoch's rate gives the command's losses; a model with its rate compiled in refuses it."""
    x, y = write_data(tmp_path)
    text = npy_model(tmp_path).replace("minimize loss", "lr_schedule = step_lr(step_size = 1, gamma = 0.5)\n"
                                       "    minimize loss")
    (tmp_path / "m.nn").write_text(text)
    cli(tmp_path / "m.nn", "--quiet", "--metrics", tmp_path / "cli.jsonl")
    want = [r["loss"] for r in records(tmp_path / "cli.jsonl") if r["type"] == "step"]
    m = nnc.compile(tmp_path / "m.nn")
    got = []
    for epoch in range(2):
        m.set_lr(0.1 * 0.5 ** epoch)
        got += [m.train_step(x=x[i:i + 16], y=y[i:i + 16]) for i in range(0, 60, 16)]
    assert got == [np.float32(v) for v in want]
    with pytest.raises(nnc.Error, match="not a finite number"):
        m.set_lr(float("nan"))
    (tmp_path / "c.nn").write_text(npy_model(tmp_path))
    with pytest.raises(nnc.Error, match="lr_schedule"):
        nnc.compile(tmp_path / "c.nn").set_lr(0.1)


def test_abi_tables(tmp_path):
    """The ctypes mirror of nnc_model_abi reads its last fields right: the batch's name, each input's
    rule (the labels index cross_entropy's 3 classes, -100 skipped), the eval outputs' roles."""
    write_data(tmp_path)
    (tmp_path / "m.nn").write_text(npy_model(tmp_path))
    a = nnc.compile(tmp_path / "m.nn")._abi
    assert a.batch_name == b"B" and a.ninputs == 2
    x, y = a.input_rules[0], a.input_rules[1]
    assert x.bound == 0 and not x.reader
    assert (y.bound, y.has_ignore, y.ignore, y.reader) == (3, 1, -100, b"cross_entropy")
    assert y.at.endswith(b"m.nn:7:8")
    roles = [a.outputs[_lib.ENTRY_EVAL][k].role for k in range(a.noutputs[_lib.ENTRY_EVAL])]
    assert roles == [1, 3]   # the loss, accuracy's count


def test_accumulate_matches_the_command(tmp_path):
    """accumulate = 2: a loop of accumulate on a group's first micro-batch and train_step on its
    last gives the command's step losses (each the mean of its group's); the epoch's last group
    (60 rows in batches of 16: 4 batches, then 2 groups) is whole here.  A model built without
    accumulation has no such entry."""
    x, y = write_data(tmp_path)
    (tmp_path / "m.nn").write_text(npy_model(tmp_path).replace("minimize loss", "accumulate = 2\n    minimize loss"))
    cli(tmp_path / "m.nn", "--quiet", "--metrics", tmp_path / "cli.jsonl")
    want = [r["loss"] for r in records(tmp_path / "cli.jsonl") if r["type"] == "step"]
    m = nnc.compile(tmp_path / "m.nn")
    got = []
    for _ in range(2):
        for g in (0, 32):
            a = m.accumulate(x=x[g:g + 16], y=y[g:g + 16])
            rows = min(g + 32, 60) - (g + 16)
            b = m.train_step(x=x[g + 16:g + 16 + rows], y=y[g + 16:g + 16 + rows])
            got.append((a * 16 + b * rows) / (16 + rows))
    assert len(want) == 4 and m.step == 4
    assert np.allclose(got, want, rtol=1e-6, atol=0)
    (tmp_path / "c.nn").write_text(npy_model(tmp_path))
    with pytest.raises(nnc.Error, match="no such entry"):
        nnc.compile(tmp_path / "c.nn").accumulate(x=x[:16], y=y[:16])


def test_eval_and_grad(tmp_path):
    x, y = write_data(tmp_path)
    (tmp_path / "m.nn").write_text(npy_model(tmp_path))
    m = nnc.compile(tmp_path / "m.nn", batch=60)
    out = m.eval(x=x, y=y)
    assert sorted(out) == ["accuracy", "loss"] and isinstance(out["loss"], float)
    logits = x @ m.state_dict()["w"].T + m.state_dict()["b"]
    assert out["accuracy"] == np.sum(np.argmax(logits, 1) == y)   # a count of rows, as the op defines it
    g = m.grad(x, y)
    assert sorted(g) == ["grad.b", "grad.w", "loss"] and g["grad.w"].shape == (3, 4) and g["loss"] == out["loss"]
    assert m.step == 0   # eval and grad do not step
    cli(tmp_path / "m.nn", "--quiet", "--save", tmp_path / "c.st")
    cli(tmp_path / "m.nn", "--load", tmp_path / "c.st", "--eval", "--batch", 60, "--metrics", tmp_path / "e.jsonl")
    m.load_state_dict(nnc.load(tmp_path / "c.st"))
    ev = [r for r in records(tmp_path / "e.jsonl") if r["type"] == "eval"][0]
    out = m.eval(x=x, y=y)
    assert np.float32(ev["loss"]) == out["loss"] and round(ev["accuracy"] * 60) == out["accuracy"]


def test_inputs_without_copies(tmp_path):
    """float32/int32 C-contiguous inputs reach the step as they are (no copy); others are converted."""
    torch = pytest.importorskip("torch")
    write_data(tmp_path)
    m = nnc.compile(npy_model(tmp_path))   # the model's text
    x = np.ones((4, 4), np.float32)
    y = np.zeros(4, np.int32)
    _, kept, batch = m._bind((), {"x": x, "y": y})
    assert kept["x"] is x and kept["y"] is y and batch == 4
    t = torch.ones(4, 4)
    _, kept, _ = m._bind((t,), {"y": y})
    assert kept["x"].__array_interface__["data"][0] == t.data_ptr()   # DLPack: the tensor's memory
    _, kept, _ = m._bind((), {"x": x.astype(np.float64), "y": y.astype(np.int64)})
    assert kept["x"].dtype == np.float32 and kept["y"].dtype == np.int32
    _, kept, _ = m._bind((), {"x": np.ones((4, 4), np.float32).T, "y": y})   # not C-contiguous: copied
    assert kept["x"].flags.c_contiguous
    _, kept, _ = m._bind((), {"x": np.ones((4, 2, 2), np.float32), "y": y})   # [B, 2, 2] feeds f32[B, 4]
    assert kept["x"].shape == (4, 4)
    m.load_state_dict({"w": np.zeros((3, 4)), "b": np.zeros(3)})
    assert m.train_step(x, y) == pytest.approx(np.log(3))


def test_bad_inputs_are_named(tmp_path):
    write_data(tmp_path)
    m = nnc.compile(npy_model(tmp_path))
    torch = pytest.importorskip("torch")
    x, y = np.ones((4, 4), np.float32), np.zeros(4, np.int32)
    cases = [
        (dict(x=x, y=y, z=y), "no input named 'z' (this model's inputs: x, y)"),
        (dict(x=np.ones((4, 3)), y=y), "input 'x': expected shape [B, 4], got [4, 3]"),
        (dict(x=x, y=np.zeros(5, np.int32)), "input 'y' has 5 rows, input 'x' 4"),
        (dict(x=np.ones((17, 4)), y=np.zeros(17, np.int32)), "a batch of 17 rows: this model takes 1 to 16"),
        (dict(x=x, y=np.array([0, 1, 0.5, 1])), "input 'y': expected integer labels"),
        (dict(x=x, y=np.array([0, 1, 2 ** 40, 1])), "label 1099511627776 does not fit in int32"),
        (dict(x=np.array([["a"] * 4] * 4), y=y), "input 'x': expected numbers"),
        (dict(x=torch.ones(4, 4, requires_grad=True), y=y), "input 'x': Can't export tensors that require gradient"),
        (dict(x=x), "input 'y' is NULL"),
    ]
    for kwargs, msg in cases:
        with pytest.raises(nnc.Error, match=re.escape(msg)):
            m.train_step(**kwargs)
    assert m.step == 0
    with pytest.raises(nnc.Error, match=re.escape("tiny.nn:2:8: error: unknown function 'foo'")):
        nnc.compile("input x: f32[B, 3]\nloss = foo(x)\n", name="tiny.nn")
    with pytest.raises(nnc.Error, match="precision: expected 'f32', 'bf16' or 'f16', got 'f8'"):
        nnc.compile(PROGRESS, precision="f8")
    with pytest.raises(FileNotFoundError):
        nnc.compile("missing.nn")


def test_state_dict_round_trip(tmp_path):
    m = nnc.compile(RESUME, epochs=1)
    sd = m.state_dict()
    assert list(sd) == ["w1", "w2"] and sd["w1"].shape == (128, 256) and sd["w1"].dtype == np.float32
    full = m.state_dict(optimizer=True)
    assert "optimizer.w1.exp_avg" in full and "optimizer.w2.exp_avg_sq" in full
    other = nnc.compile(RESUME, seed=99)
    assert not np.array_equal(other.state_dict()["w1"], sd["w1"])
    assert other.load_state_dict(sd) == ([], [])
    assert np.array_equal(other.state_dict()["w1"], sd["w1"])
    with pytest.raises(nnc.Error, match="missing: w2; unexpected: extra"):
        other.load_state_dict({"w1": sd["w1"], "extra": sd["w1"]})
    assert other.load_state_dict({"w1": sd["w1"] * 2}, strict=False) == (["w2"], [])
    with pytest.raises(nnc.Error, match=re.escape("'w2' has shape [3], the model's is [256, 1]")):
        other.load_state_dict({"w1": sd["w1"], "w2": np.zeros(3)})
    torch = pytest.importorskip("torch")
    other.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})   # a torch state_dict
    assert np.array_equal(other.state_dict()["w2"], sd["w2"])
    other.close()
    other.close()   # twice is harmless
    with pytest.raises(nnc.Error, match="the model was closed"):
        other.state_dict()


def test_save_resumes_in_the_command(tmp_path, capfd):
    """m.save() is --save: the command resumes from it and ends where an uninterrupted run ends."""
    cli(RESUME, "--quiet", "--save", tmp_path / "ref.st")
    m = nnc.compile(RESUME)
    m.fit(epochs=1, quiet=True)
    m.save(tmp_path / "half.st")
    out = cli(RESUME, "--save", tmp_path / "half.st", "--resume")
    assert "resuming from %s: epoch 2, sample 0" % (tmp_path / "half.st") in out
    a, b = nnc.load(tmp_path / "ref.st"), nnc.load(tmp_path / "half.st")
    assert all(np.array_equal(a[k], b[k]) for k in a) and a.metadata["nnc_step"] == b.metadata["nnc_step"]
    # and back: a checkpoint of the command, with its optimizer state and step, into a model
    m2 = nnc.compile(RESUME)
    m2.load_state_dict(nnc.load(tmp_path / "ref.st"))
    assert m2.step == 384 and np.array_equal(m2.state_dict(optimizer=True)["optimizer.w1.exp_avg"],
                                             a["optimizer.w1.exp_avg"])
    with pytest.raises(nnc.Error, match="cannot"):
        m.save(tmp_path / "no" / "such" / "dir.st")


def test_fit_failure_raises(tmp_path, capfd):
    (tmp_path / "m.nn").write_text(npy_model(tmp_path))   # its .npy files do not exist
    m = nnc.compile(tmp_path / "m.nn")
    with pytest.raises(nnc.Error, match="training failed"):
        m.fit(quiet=True)
    assert "x.npy" in capfd.readouterr().err
    m = nnc.compile("input x: f32[B, 3]\nparam w: f32[3] = zeros()\noutput y = x * w\n", name="plain.nn")
    with pytest.raises(nnc.Error, match="training failed"):
        m.fit()
    assert "plain.nn has no train section: nothing to fit" in capfd.readouterr().err


def test_readme_example(tmp_path, capfd):
    """The README's Python example, run as it is written (from the checkout's root)."""
    text = open(os.path.join(ROOT, "README.md")).read()
    blocks = re.findall(r"```python\n(# readme-example.*?)```", text, re.S)
    assert len(blocks) == 1, "README.md has one ```python block starting with # readme-example"
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        (tmp_path / "models").symlink_to(os.path.join(ROOT, "models"))
        exec(compile(blocks[0], "README.md", "exec"), {})
    finally:
        os.chdir(cwd)
    assert "loss" in capfd.readouterr().out
