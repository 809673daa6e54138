#!/usr/bin/env python3
"""--tensorboard DIR: the event files nnc writes, read back by the `tensorboard` package's own
readers (EventAccumulator, as TensorBoard's server loads a run, and its record reader, which
checks every record's CRC32C), against the --metrics file of the same run.

  tensorboard_test.py NNC

Exits 77 (skipped) when the tensorboard package is not importable; scripts/deps.sh installs it.
The last line is "N passed, M failed".
"""

import glob
import json
import os
import re
import resource
import signal
import socket
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "..", "models")

try:
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.backend.event_processing import event_file_loader
except ImportError as e:
    print("SKIP: the tensorboard package is not importable (%s): pip install tensorboard" % e)
    sys.exit(77)

passed = failed = 0


def check(ok, what):
    global passed, failed
    print(("ok   - " if ok else "FAIL - ") + what, flush=True)
    if ok:
        passed += 1
    else:
        failed += 1
    return ok


def run(args, limit_bytes=None):
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    p = subprocess.run([NNC] + args, capture_output=True, text=True, preexec_fn=limit if limit_bytes else None)
    return p.returncode, p.stdout, p.stderr


def scalars(logdir):
    acc = ea.EventAccumulator(logdir, size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def event_files(logdir):
    return sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*")))


def test_run(tmp):
    """A run with a test set and a metric: every number of --metrics is in the events."""
    logdir = os.path.join(tmp, "runs", "a")   # made with its parents, as SummaryWriter does
    rc, out, err = run([os.path.join(HERE, "progress.nn"), "--tensorboard", logdir,
                        "--metrics", os.path.join(tmp, "a.jsonl")])
    if not check(rc == 0, "nnc --tensorboard ran (%s)" % err.strip()):
        return
    files = event_files(logdir)
    check(len(files) == 1, "one event file: %s" % [os.path.basename(f) for f in files])
    name = r"events\.out\.tfevents\.[0-9]+\.%s\.[0-9]+" % re.escape(socket.gethostname())
    check(re.fullmatch(name, os.path.basename(files[0])) is not None,
          "the file is named events.out.tfevents.<time>.<host>.<pid>")
    # the first record: file_version, as TensorBoard expects of every event file
    events = list(event_file_loader.EventFileLoader(files[0]).Load())
    check(events[0].file_version == "brain.Event:2", "first event: file_version %r" % events[0].file_version)
    s = scalars(logdir)
    m = metrics(os.path.join(tmp, "a.jsonl"))
    steps = [r for r in m if r["type"] == "step"]
    epochs = [r for r in m if r["type"] == "epoch"]
    want = {"train/loss", "train/lr", "train/step_ms", "epoch/loss", "epoch/test_loss", "epoch/mse", "epoch/lr",
            "epoch/seconds"}
    check(set(s) == want, "tags %s" % sorted(s))
    check(s.get("train/loss") == [(r["step"], f32(r["loss"])) for r in steps],
          "train/loss: %d steps, each the --metrics value" % len(s.get("train/loss", [])))
    check(all(v == f32(0.01) for _, v in s.get("train/lr", [])) and len(s.get("train/lr", [])) == 600,
          "train/lr: 0.01 at each of 600 steps")
    ms = [v for _, v in s.get("train/step_ms", [])]
    check(len(ms) == 600 and all(0 < v < 1000 for v in ms), "train/step_ms: 600 times in (0, 1000) ms")
    for key in ["loss", "test_loss", "mse"]:
        check(s.get("epoch/" + key) == [(r["epoch"], f32(r[key])) for r in epochs],
              "epoch/%s at epochs 1, 2: %s" % (key, s.get("epoch/" + key)))
    check([st for st, _ in s.get("epoch/seconds", [])] == [1, 2], "epoch/seconds at each epoch")


def test_schedule_scale_clip(tmp):
    """A learning-rate schedule, f16 loss scaling and gradient clipping each add their scalars."""
    logdir = os.path.join(tmp, "b")
    rc, out, err = run([os.path.join(HERE, "resume.nn"), "--epochs", "2", "--tensorboard", logdir,
                        "--metrics", os.path.join(tmp, "b.jsonl")])
    if check(rc == 0, "resume.nn (step_lr) ran (%s)" % err.strip()):
        s = scalars(logdir)
        check(s.get("epoch/lr") == [(1, f32(0.001)), (2, f32(0.0005))], "epoch/lr halves: %s" % s.get("epoch/lr"))
        lr = dict(s.get("train/lr", []))
        check(lr.get(1) == f32(0.001) and lr.get(129) == f32(0.0005), "train/lr follows the schedule per step")
    logdir = os.path.join(tmp, "c")
    rc, out, err = run([os.path.join(MODELS, "linreg.nn"), "--epochs", "20", "--precision", "f16",
                        "--clip-grad-norm", "1", "--tensorboard", logdir, "--metrics", os.path.join(tmp, "c.jsonl")])
    if check(rc == 0, "linreg --precision f16 --clip-grad-norm 1 ran (%s)" % err.strip()):
        s = scalars(logdir)
        steps = [r for r in metrics(os.path.join(tmp, "c.jsonl")) if r["type"] == "step"]
        check(s.get("train/loss_scale") == [(r["step"], f32(r["loss_scale"])) for r in steps],
              "train/loss_scale: the scaler's scale at each step")
        check(s.get("train/grad_norm") == [(r["step"], f32(r["grad_norm"])) for r in steps],
              "train/grad_norm: clip_grad_norm's norm at each step")
        check(len(s.get("epoch/loss_scale", [])) == 20, "epoch/loss_scale at each epoch")


def test_eval(tmp):
    logdir = os.path.join(tmp, "d")
    ck = os.path.join(tmp, "d.st")
    rc, _, err = run([os.path.join(HERE, "progress.nn"), "--quiet", "--save", ck])
    rc2, out, err2 = run([os.path.join(HERE, "progress.nn"), "--load", ck, "--eval", "--tensorboard", logdir])
    if check(rc == 0 and rc2 == 0, "--eval --tensorboard ran (%s%s)" % (err.strip(), err2.strip())):
        s = scalars(logdir)
        loss = float(out.split("loss ")[1].split()[0])
        # --load without --resume takes the parameters, not the step: the model's step is 0
        check(sorted(s) == ["eval/loss", "eval/mse"] and s["eval/loss"][0][0] == 0
              and abs(s["eval/loss"][0][1] - loss) < 1e-6, "eval/loss and eval/mse at the model's step: %s" % s)


def test_crc_checked(tmp):
    """The reader checks each record's CRC32C: a flipped byte is refused, so a clean read above
    means nnc's checksums are right."""
    logdir = os.path.join(tmp, "e")
    rc, _, err = run([os.path.join(MODELS, "linreg.nn"), "--epochs", "3", "--quiet", "--tensorboard", logdir])
    if not check(rc == 0 and event_files(logdir), "linreg --tensorboard ran (%s)" % err.strip()):
        return
    f = event_files(logdir)[0]
    data = bytearray(open(f, "rb").read())
    data[len(data) - 10] ^= 0x40   # inside the last record's data
    bad = os.path.join(tmp, "bad")
    os.mkdir(bad)
    with open(os.path.join(bad, os.path.basename(f)), "wb") as g:
        g.write(data)
    try:
        n = len(list(event_file_loader.RawEventFileLoader(os.path.join(bad, os.path.basename(f))).Load()))
        full = len(list(event_file_loader.RawEventFileLoader(f).Load()))
        check(n == full - 1, "a corrupted last record is dropped by the reader (%d of %d read)" % (n, full))
    except Exception as e:   # noqa: BLE001 (a DataLossError is a refusal too)
        check("crc" in str(e).lower(), "a corrupted record is refused: %s" % e)


def test_errors(tmp):
    afile = os.path.join(tmp, "afile")
    open(afile, "w").close()
    rc, out, err = run([os.path.join(MODELS, "linreg.nn"), "--tensorboard", afile])
    check(rc == 1 and "--tensorboard %s: not a directory" % afile in err and "epoch" not in out,
          "a file as DIR: refused before training (%s)" % err.strip())
    rc, out, err = run([os.path.join(MODELS, "linreg.nn"), "--tensorboard", os.path.join(afile, "sub")])
    check(rc == 1 and "cannot create directory" in err, "a DIR below a file: refused (%s)" % err.strip())
    rc, out, err = run([os.path.join(MODELS, "linreg.nn"), "--tensorboard"])
    check(rc == 1 and "--tensorboard needs a value" in err, "--tensorboard without DIR (%s)" % err.strip())
    # a write that fails mid-run (here: the file size limit) costs the events, never the model
    m = os.path.join(HERE, "progress.nn")
    run([m, "--quiet", "--epochs", "1"])   # the compiled model is cached before the limit applies
    logdir = os.path.join(tmp, "f")
    rc, out, err = run([m, "--tensorboard", logdir], limit_bytes=16384)
    check(rc == 1 and "cannot write" in err and "training goes on without it (step" in err
          and "incomplete: writing events failed at step" in err and "epoch 2/2  step 600" in out,
          "a failed write: a warning, training to the end, exit status 1 (%s)" % err.strip())


def main():
    global NNC
    NNC = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        for t in [test_run, test_schedule_scale_clip, test_eval, test_crc_checked, test_errors]:
            t(tmp)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
