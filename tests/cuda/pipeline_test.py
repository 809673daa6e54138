#!/usr/bin/env python3
"""pipeline_test.py - the trainer's pipelined calls on the CUDA target, run on the emulator.

    pipeline_test.py NNC

Training queues each batch before it waits for the step before it (train/train.c, the ABI's
submit and finish).  Checked here, from the emulator's trace (NNC_EMU_TRACE) of whole runs:
  - the next batch's copy to the device is queued on a stream other than the step's, before the
    host waits for the current step, at every step but an epoch's last;
  - no synchronous and no pageable copy during the steps, and no host synchronization per step
    but the wait for the step before (the syncs of a run with twice the steps differ only by
    one event_sync per step);
and that what the user sees is what the unpipelined trainer (NNC_NO_PIPELINE=1) shows, byte for
byte: per-step and per-epoch records, the printed lines, checkpoints (with --save-every, gradient
accumulation, a per-step schedule and grad_norm), the stop on a non-finite loss mid-epoch (its
message, its records, the checkpoint saved just before), SIGINT's stop, save and --resume, and
--bench's JSON line.  The numbers against the CPU target are emu_train.py's.

The training set kept in the GPU's memory (data_on_device, the default where it fits): the same
records and checkpoints, byte for byte, as with each batch sent from the host, for 8-bit images
scaled to floats (rows of 12 and 7 values: the 16-byte and the one-value gathers), labels, a token
stream's shuffled windows (x and y from one copy), and --f64; the set goes up once, and a step
sends only its rows' starts (8 bytes a row and input) and gathers on the copy stream."""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

NNC = os.path.abspath(sys.argv[1])
FAILS = []


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        FAILS.append(what)


def run(args, env=None, **kw):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([NNC] + args, capture_output=True, text=True, env=e, **kw)


def strip_seconds(text):
    """Without what the clock decides: seconds, rates and ETAs."""
    return re.sub(r'(,"seconds":[0-9.e+-]*|  [0-9.]+s$|  [0-9.]+[kM]? step/s  ETA [0-9:]+$)', "", text, flags=re.M)


def read(path):
    with open(path) as f:
        return f.read()


CLS = """
input x: f32[B, 6]
input t: i32[B]
param w: f32[6, 5] = normal(0, 1)
param b: f32[5] = zeros()
logits = x @ w + b
loss = cross_entropy(logits, t)
train {
    data x = randn(%d, 6)
    data t = csv("t%d.csv")
    batch = 8
    epochs = 2
    optimizer = sgd(lr = 0.1, momentum = 0.9)
    minimize loss
}
"""


def parse_trace(path):
    """[(kind, {key: value, word: True}, stream)] of each line, as 'copy H2D bytes=N async
    host=pinned stream=2' gives ('copy H2D', {'bytes': 'N', 'async': True, ...}, '2')."""
    out = []
    for line in read(path).splitlines():
        words = line.split()
        if not words or "capture" in words[1:]:
            continue   # a captured op runs as part of its graph_launch
        kind = words[0] + ("" if words[0] != "copy" else " " + words[1])
        kv = dict(w.split("=", 1) if "=" in w else (w, True) for w in words[1 + (words[0] == "copy"):])
        out.append((kind, kv, kv.get("stream")))
    return out


def trace_run(d, n):
    """Trains the classifier over n samples (n / 8 steps an epoch, 2 epochs) with the trace on."""
    model = os.path.join(d, "cls%d.nn" % n)
    with open(model, "w") as f:
        f.write(CLS % (n, n))
    trace = os.path.join(d, "trace%d" % n)
    p = run([model, "--target", "cuda", "--quiet"], env={"NNC_EMU_TRACE": trace})
    check(p.returncode == 0, "cls over %d samples trains (%s)" % (n, p.stderr.strip()))
    if not os.path.exists(trace):
        check(False, "the emulator wrote a trace (NNC_EMU_TRACE)")
        return None
    return parse_trace(trace)


def overlap(ops, steps, epochs, n):
    """Each step's end event on the compute stream is waited for (event_sync) once; before that
    wait, the next step's inputs go up on another stream, except after each epoch's last."""
    compute = {s for k, _, s in ops if k == "graph_launch"}
    check(len(compute) == 1, "cls%d: the steps' graphs run on one stream (%s)" % (n, compute))
    compute = compute.pop() if compute else None
    recorded, waits, ahead, inputs_elsewhere = {}, 0, 0, True
    for i, (k, kv, s) in enumerate(ops):
        if k == "event_record" and s == compute:
            recorded[kv["event"]] = i
        if k == "copy H2D" and s == compute and recorded:
            inputs_elsewhere = False   # after the first step: every copy up is on the copy stream
        if k != "event_sync" or kv["event"] not in recorded:
            continue
        waits += 1
        r = recorded.pop(kv["event"])
        ahead += any(k2 == "copy H2D" and s2 != compute for k2, _, s2 in ops[r:i])
    check(waits == steps, "cls%d: the host waits for each of the %d steps once (%d)" % (n, steps, waits))
    check(ahead == steps - epochs, "cls%d: the next batch is queued on the copy stream before the host waits, "
          "at %d of the %d steps (all but each epoch's last)" % (n, ahead, steps))
    check(inputs_elsewhere, "cls%d: the inputs never go up on the compute stream" % n)


def syncs(ops):
    """Host synchronizations that are not an event's, and synchronous or pageable copies."""
    return sum(1 for k, kv, _ in ops if k in ("stream_sync", "ctx_sync") or
               (k.startswith("copy") and ("sync" in kv or kv.get("host") == "pageable")))


def test_trace(d):
    for n in (40, 80):
        with open(os.path.join(d, "t%d.csv" % n), "w") as f:
            f.write("".join("%d\n" % ((i * 7) % 5) for i in range(n)))
    a, b = trace_run(d, 40), trace_run(d, 80)
    if a is None or b is None:
        return
    overlap(a, 10, 2, 40)
    overlap(b, 20, 2, 80)
    pageable = [(k, kv) for k, kv, _ in a + b if kv.get("host") == "pageable" or k.startswith("copy") and "sync" in kv]
    check(not pageable, "no synchronous or pageable copy to the device (%s)" % pageable[:2])
    sa, sb = syncs(a), syncs(b)
    ea = sum(k == "event_sync" for k, _, _ in a)
    eb = sum(k == "event_sync" for k, _, _ in b)
    check(sa == sb, "twice the steps, the same host synchronizations besides the steps' waits (%d, %d)" % (sa, sb))
    check(eb - ea == 10, "one event_sync more per step (%d, %d)" % (ea, eb))


def both(args, d, tag, **kw):
    """The same run pipelined and with NNC_NO_PIPELINE=1, each in its own files."""
    out = []
    for pipe in (True, False):
        sub = os.path.join(d, "%s-%s" % (tag, "pipe" if pipe else "plain"))
        os.makedirs(sub, exist_ok=True)
        full = [a.replace("@", sub + "/") for a in args]
        env = {} if pipe else {"NNC_NO_PIPELINE": "1"}
        out.append((run(full, env=env, **kw), sub))
    return out


def same_files(pair, names, what):
    (p, a), (q, b) = pair
    check(p.returncode == q.returncode, "%s: the same exit status (%d, %d)" % (what, p.returncode, q.returncode))
    same = strip_seconds(p.stdout) == strip_seconds(q.stdout) and p.stderr == q.stderr
    check(same, "%s: the same output" % what)
    if not same:
        print("%s%s--- NNC_NO_PIPELINE=1:\n%s%s" % (p.stdout, p.stderr, q.stdout, q.stderr))
    for name in names:
        fa, fb = os.path.join(a, name), os.path.join(b, name)
        if not os.path.exists(fb):
            check(not os.path.exists(fa), "%s: %s not written either" % (what, name))
            continue
        same = os.path.exists(fa) and (strip_seconds(read(fa)) == strip_seconds(read(fb)) if name.endswith("jsonl")
                                       else open(fa, "rb").read() == open(fb, "rb").read())
        check(same, "%s: %s byte for byte" % (what, name))


def test_records(d, resume):
    # Adam, dropout and a per-epoch schedule; then gradient accumulation with a per-step
    # schedule and clip_grad_norm (a grad_norm per step), saving every 5 steps
    with open(resume) as f:
        base = f.read().replace("randn(2048", "randn(512")
    acc = (base.replace("batch = 16", "batch = 16\n    accumulate = 3\n    clip_grad_norm = 1.0")
           .replace("lr_schedule = step_lr(step_size = 1, gamma = 0.5)", "lr_schedule = warmup_cosine(warmup = 10)"))
    for name, text in (("adam.nn", base), ("acc.nn", acc)):
        model = os.path.join(d, name)
        with open(model, "w") as f:
            f.write(text)
        pair = both([model, "--target", "cuda", "--metrics", "@m.jsonl", "--save", "@c.st", "--save-every", "5",
                     "--log-every", "7"], d, name)
        same_files(pair, ["m.jsonl", "c.st"], name)
        if name == "acc.nn":
            check('"grad_norm"' in read(os.path.join(pair[0][1], "m.jsonl")), "acc.nn records grad_norm")


DIVERGE = """
input x: f32[B, 4]
input y: f32[B, 1]
param w: f32[4, 1] = normal(0, 1)
loss = mse_loss(x @ w, y)
train {
    data x = randn(256, 4)
    data y = randn(256, 1)
    batch = 8
    epochs = 2
    optimizer = sgd(lr = 2.5)
    minimize loss
    seed = 3
}
"""


def test_nonfinite(d):
    """The loss becomes infinite at step 29 of 32 in the epoch: the same stop, the same records,
    and the checkpoint saved at step 28 holds step 28's parameters (the pipeline queues no step
    past a save that is due)."""
    model = os.path.join(d, "div.nn")
    with open(model, "w") as f:
        f.write(DIVERGE)
    pair = both([model, "--target", "cuda", "--metrics", "@m.jsonl", "--save", "@c.st", "--save-every", "7"], d, "div")
    same_files(pair, ["m.jsonl", "c.st"], "div.nn")
    check("the loss became infinite at epoch 1, step 29; training stopped" in pair[0][0].stderr,
          "div.nn stops at step 29 (%s)" % pair[0][0].stderr.strip())


def test_interrupt(d, resume):
    """SIGINT mid-epoch stops after a step (the queued one), saves, exits 130; --resume ends as
    the uninterrupted run, checkpoint and records."""
    model = os.path.join(d, "int.nn")
    with open(resume) as f:
        # 12 epochs: long enough on a quiet machine for the signal to land mid-run (the records
        # reach the file only at the end, so its size says nothing about progress)
        open(model, "w").write(f.read().replace("randn(2048", "randn(1024").replace("epochs = 3", "epochs = 12"))
    ref = os.path.join(d, "ref")
    p = run([model, "--target", "cuda", "--quiet", "--save", ref + ".st", "--metrics", ref + ".jsonl"])
    check(p.returncode == 0, "int.nn uninterrupted (%s)" % p.stderr.strip())
    st, ms = os.path.join(d, "int.st"), os.path.join(d, "int.jsonl")
    for attempt in range(5):
        for f in (st, ms):
            if os.path.exists(f):
                os.unlink(f)
        q = subprocess.Popen([NNC, model, "--target", "cuda", "--quiet", "--save", st, "--metrics", ms],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(1000):   # the metrics file is opened as training starts
            if os.path.exists(ms):
                break
            time.sleep(0.01)
        time.sleep(0.2 * (attempt + 1))   # then a few steps in: the handler is installed
        q.send_signal(signal.SIGINT)
        out, err = q.communicate()
        if q.returncode == 130:
            break
    check(q.returncode == 130 and re.search(r"interrupted at epoch \d, step \d+; saving", err),
          "SIGINT stops and saves (%d: %s)" % (q.returncode, err.strip()))
    p = run([model, "--target", "cuda", "--quiet", "--save", st, "--resume", "--metrics", ms])
    check(p.returncode == 0, "--resume finishes (%s)" % p.stderr.strip())
    check(open(st, "rb").read() == open(ref + ".st", "rb").read(), "interrupted and resumed: the same checkpoint")
    check(strip_seconds(read(ms)) == strip_seconds(read(ref + ".jsonl")), "interrupted and resumed: the same records")


def test_bench(d, resume):
    p = run([resume, "--target", "cuda", "--bench", "20"])
    try:
        j = json.loads(p.stdout)
        ok = j["steps"] == 20 and j["median_us"] > 0 and j["batch"] == 16
    except (ValueError, KeyError):
        ok = False
    check(p.returncode == 0 and ok, "--bench on the pipelined target prints its line (%s%s)" % (p.stdout, p.stderr))


BYTES = """
input a: f32[B, 12]
input b: f32[B, 7]
input t: i32[B]
param w: f32[12, 5] = normal(0, 1)
param v: f32[7, 5] = normal(0, 1)
loss = cross_entropy(tanh(a @ w) + b @ v, t)
train {
    data a = idx("a.idx", scale = 1/255)
    data b = idx("b.idx", scale = 0.5)
    data t = csv("t45.csv")
    batch = 8
    epochs = 2
    optimizer = adam(lr = 0.01)
    minimize loss
}
"""

TOKENS = """
input x: i32[B, 8]
input y: i32[B, 8]
param W: f32[256, 4] = normal(0, 1)
param V: f32[256, 4] = normal(0, 1)
loss = mean(tanh(embedding(x, W) * embedding(y, V)))
train {
    data x, y = tokens("text.txt", dtype = "uint8")
    batch = 6
    epochs = 2
    optimizer = sgd(lr = 0.5)
    minimize loss
}
"""


def write_idx(path, rows, cols, seed):
    """An IDX file of u8 [rows, cols] (magic 0x0803), values from a small LCG."""
    v, out = seed, bytearray()
    for _ in range(rows * cols):
        v = (v * 1103515245 + 12345) % 2 ** 31
        out.append(v >> 16 & 255)
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 8, 2]) + rows.to_bytes(4, "big") + cols.to_bytes(4, "big") + bytes(out))


def kept_trace(ops, batch):
    """(gathers, the largest copy up after the first step, the copies up before it in bytes)."""
    first = next((i for i, (k, _, _) in enumerate(ops) if k == "graph_launch" or k == "launch" and
                  not ops[i][1].get("nnc_rows")), len(ops))
    gathers = [kv for k, kv, _ in ops if k == "launch" and "nnc_rows" in kv]
    later = [int(kv["bytes"]) for k, kv, _ in ops[first:] if k == "copy H2D"]
    return gathers, max(later or [0]), later


def test_kept(d):
    write_idx(os.path.join(d, "a.idx"), 45, 12, 1)
    write_idx(os.path.join(d, "b.idx"), 45, 7, 2)
    with open(os.path.join(d, "t45.csv"), "w") as f:
        f.write("".join("%d\n" % ((i * 3) % 5) for i in range(45)))
    with open(os.path.join(d, "text.txt"), "w") as f:
        f.write("".join(chr(32 + (i * 37 + i // 7) % 90) for i in range(203)))
    for name, text in (("bytes.nn", BYTES), ("tokens.nn", TOKENS)):
        model = os.path.join(d, name)
        with open(model, "w") as f:
            f.write(text)
        for extra in ([], ["--f64"]):
            what = name + (" --f64" if extra else "")
            out = []
            for on in ("true", "false"):
                sub = os.path.join(d, "%s%s-%s" % (name, "-f64" if extra else "", on))
                os.makedirs(sub)
                p = run([model, "--target", "cuda", "--data-on-device", on, "--metrics", sub + "/m.jsonl", "--save",
                         sub + "/c.st"] + extra, env={"NNC_EMU_TRACE": sub + "/trace"}, cwd=d)
                out.append((p, sub))
            same_files(out, ["m.jsonl", "c.st"], what + " kept on the GPU and sent from the host")
            on_ops = parse_trace(os.path.join(out[0][1], "trace"))
            off_ops = parse_trace(os.path.join(out[1][1], "trace"))
            batch, inputs = (8, 3) if name == "bytes.nn" else (6, 2)
            steps = 12 if name == "bytes.nn" else 2 * ((202 // 8 + batch - 1) // batch)
            gathers, largest, _ = kept_trace(on_ops, batch)
            check(len(gathers) == inputs * steps and all(kv.get("stream") != "1" for kv in gathers),
                  "%s: %d gathers on the copy stream, one an input and step (%d)" % (what, inputs * steps, len(gathers)))
            check(0 < largest <= 8 * batch, "%s: a step sends only its rows' starts (largest copy up %d bytes)"
                  % (what, largest))
            check(not kept_trace(off_ops, batch)[0], "%s: --data-on-device false gathers on the host" % what)
    p = run([os.path.join(d, "bytes.nn"), "--target", "cuda", "--verbose", "--epochs", "1"], cwd=d)
    check("nnc: the training set is kept on the GPU (1.0 KB): each batch is gathered there" in p.stderr,
          "--verbose says where the batches are gathered (%s)" % p.stderr.strip())
    p = run([os.path.join(d, "bytes.nn"), "--target", "cuda", "--data-on-device", "true", "--epochs", "1"], cwd=d,
            env={"NNC_NO_PIPELINE": "1"})
    check(p.returncode == 0 and "nnc: note: data_on_device = true: this run's calls are not pipelined, so each batch "
          "goes up from the host" in p.stderr, "data_on_device = true where calls are not pipelined: a note (%s)"
          % p.stderr.strip())


def main():
    resume = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e", "resume.nn")
    with tempfile.TemporaryDirectory() as d:
        test_trace(d)
        test_kept(d)
        test_records(d, resume)
        test_nonfinite(d)
        test_interrupt(d, resume)
        test_bench(d, resume)
    print("pipeline: %d failed" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
