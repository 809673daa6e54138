"""Data-parallel training under mpirun (train/comm.c, passes/allreduce.c) changes nothing but
the speed: with the same global batch, 2 and 3 processes give one process's per-step losses,
final parameters, optimizer state and test metrics (to 1e-5); a checkpoint written by 2
processes resumes in 1 and the reverse; Fashion-MNIST's accuracy is the same; processes that
start from different parameters, or one that fails alone, end the job with an error instead of
hanging.

With --cuda (run with the CUDA emulator's environment, tests/cuda/tests.cmake): the cuda
target in 2 processes (gradients staged through the host) against the cpu target in one.

usage: mpi_test.py NNC [--cuda] [--sanitized]   (exit 77, skipped, when this nnc has no MPI or mpirun is missing)

--sanitized (the sanitizer stage): the run stopped by SIGINT and resumed is 2 epochs of mlp.nn,
not 5 (its one-process reference too): the stop, the save and the resume, in the middle of the
first epoch, and an epoch's end after them are the same code; the normal build runs 5."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
from nnc_ref import load_safetensors, read_metrics  # noqa: E402

NNC = os.path.abspath(sys.argv[1])
HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "ddp.nn")
MNIST = os.path.join(HERE, "..", "..", "models", "mlp.nn")
TOL = 1e-5
TIMEOUT = 120   # a hang is a failure, not a stuck CI job
INT_EPOCHS = "2" if "--sanitized" in sys.argv else "5"   # the SIGINT run's (docstring)

failures = []
# Under the sanitizers (scripts/test.sh stage 2), LeakSanitizer reports Open MPI's own
# allocations, made by components it unloads before exit; the processes under mpirun run with
# leak detection off (every other check stays on; the one-process runs keep it too).
MPI_ENV = dict(os.environ)
if "ASAN_OPTIONS" in MPI_ENV:
    MPI_ENV["ASAN_OPTIONS"] += ":detect_leaks=0"


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def mpirun(n, args, cwd, expect_ok=True, shell=None):
    cmd = ["mpirun", "-np", str(n), "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += ["sh", "-c", shell] if shell else [NNC] + list(args) + ["--quiet"]
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, env=MPI_ENV)
    if expect_ok and r.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s%s" % (" ".join(cmd), r.returncode, r.stdout, r.stderr))
    return r


def single(args, cwd):
    r = subprocess.run([NNC] + list(args) + ["--quiet"], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)
    if r.returncode != 0:
        raise RuntimeError("nnc %s failed (%d):\n%s%s" % (" ".join(args), r.returncode, r.stdout, r.stderr))
    return r


def rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(1e-12, float(np.max(np.abs(b)))))


def same_checkpoint(path, ref, what):
    got, _ = load_safetensors(path)
    want, _ = load_safetensors(ref)
    check(sorted(got) == sorted(want), what + ": the same tensors")
    worst = max(rel_err(got[k], want[k]) for k in want)
    check(worst <= TOL, "%s: parameters and optimizer state within %g (worst %.2e)" % (what, TOL, worst))


def same_run(metrics, ref, what):
    got, gep = read_metrics(metrics)
    want, wep = read_metrics(ref)
    check(len(got) == len(want), "%s: %d steps (one process: %d)" % (what, len(got), len(want)))
    if len(got) == len(want):
        check(rel_err(got, want) <= TOL, "%s: per-step losses within %g of one process's (worst %.2e)"
              % (what, TOL, rel_err(got, want)))
    for key in ("test_loss", "mae", "accuracy"):
        if key in wep[-1]:
            a, b = gep[-1][key], wep[-1][key]
            check(abs(a - b) <= TOL * max(1, abs(b)), "%s: final %s %.6f (one process: %.6f)" % (what, key, a, b))


def main():
    version = subprocess.run([NNC, "--version"], capture_output=True, text=True).stdout
    if "parallel: none" in version or not shutil.which("mpirun"):
        print("skipped: this nnc was built without MPI, or mpirun is missing")
        return 77
    d = tempfile.mkdtemp()
    try:
        single([MODEL, "--metrics", "one.jsonl", "--save", "one.st", "--target", "cpu"], d)
        # gradient accumulation: one allreduce per optimizer step, of the group's sum; batch 40
        # splits alike over 2 processes, and 25 batches make groups of 4 and a last one of 1
        acc = os.path.join(d, "acc.nn")
        with open(MODEL) as f, open(acc, "w") as g:
            g.write(f.read().replace("batch = 37", "batch = 40\n    accumulate = 4"))
        single([acc, "--metrics", "acc1.jsonl", "--save", "acc1.st", "--target", "cpu"], d)
        if "--cuda" in sys.argv:
            mpirun(2, [acc, "--target", "cuda", "--metrics", "acc2.jsonl", "--save", "acc2.st"], d)
        else:
            mpirun(2, [acc, "--metrics", "acc2.jsonl", "--save", "acc2.st"], d)
        same_run(os.path.join(d, "acc2.jsonl"), os.path.join(d, "acc1.jsonl"), "accumulate = 4, 2 processes")
        same_checkpoint(os.path.join(d, "acc2.st"), os.path.join(d, "acc1.st"), "accumulate = 4, 2 processes")
        check(len(read_metrics(os.path.join(d, "acc1.jsonl"))[0]) == 3 * 7, "accumulate = 4: 7 steps an epoch")
        if "--cuda" in sys.argv:   # NCCL (the emulator's, over MPI), then through host memory
            for backend, says in (("nccl", "by NCCL on the GPUs"), ("mpi", "through host memory by MPI")):
                args = [MODEL, "--target", "cuda", "--dist-backend", backend, "--metrics", backend + ".jsonl",
                        "--save", backend + ".st"]
                r = mpirun(2, args, d)
                check(says in r.stderr, "cuda, --dist-backend %s: gradients summed %s" % (backend, says))
                same_run(os.path.join(d, backend + ".jsonl"), os.path.join(d, "one.jsonl"), "cuda, " + backend)
                same_checkpoint(os.path.join(d, backend + ".st"), os.path.join(d, "one.st"), "cuda, " + backend)
            print("mpi (cuda): %d failures" % len(failures))
            return 1 if failures else 0
        single([MODEL, "--data-parallel", "--metrics", "solo.jsonl", "--save", "solo.st"], d)   # no mpirun
        same_run(os.path.join(d, "solo.jsonl"), os.path.join(d, "one.jsonl"), "--data-parallel, 1 process")
        same_checkpoint(os.path.join(d, "solo.st"), os.path.join(d, "one.st"), "--data-parallel, 1 process")
        for n in (2, 3):
            mpirun(n, [MODEL, "--metrics", "p%d.jsonl" % n, "--save", "p%d.st" % n], d)
            same_run(os.path.join(d, "p%d.jsonl" % n), os.path.join(d, "one.jsonl"), "%d processes" % n)
            same_checkpoint(os.path.join(d, "p%d.st" % n), os.path.join(d, "one.st"), "%d processes" % n)
            _, meta = load_safetensors(os.path.join(d, "p%d.st" % n))
            check(meta.get("nnc_batch") == "37", "%d processes: the checkpoint records the global batch, 37 (%s)"
                  % (n, meta.get("nnc_batch")))

        # batch 37 over 3 processes, accumulate = 4: the epoch's last batch (1 row) ends a group of
        # 4 and splits otherwise than the others: said before training
        with open(MODEL) as f, open(os.path.join(d, "acc37.nn"), "w") as g:
            g.write(f.read().replace("batch = 37", "batch = 37\n    accumulate = 4"))
        r = mpirun(3, [os.path.join(d, "acc37.nn"), "--epochs", "1"], d)
        check("each epoch's last batch (1 row) splits unevenly" in r.stderr,
              "accumulate with an uneven last batch: a note (%s)" % r.stderr.strip()[-300:])

        # clip_grad_norm: the norm of the averaged gradients (as DDP then clip_grad_norm_), the
        # same in every process; SGD, which (unlike Adam) a uniform scale of the gradients moves
        clipped = os.path.join(d, "clip.nn")
        with open(MODEL) as f, open(clipped, "w") as g:
            g.write(f.read().replace("optimizer = adam(lr = 0.01)",
                                     "optimizer = sgd(lr = 0.05, momentum = 0.9)\n    clip_grad_norm = 0.05"))
        single([clipped, "--metrics", "clip1.jsonl"], d)
        mpirun(2, [clipped, "--metrics", "clip2.jsonl"], d)
        same_run(os.path.join(d, "clip2.jsonl"), os.path.join(d, "clip1.jsonl"), "clip_grad_norm, 2 processes")
        with open(MODEL) as f, open(os.path.join(d, "noclip.nn"), "w") as g:
            g.write(f.read().replace("optimizer = adam(lr = 0.01)", "optimizer = sgd(lr = 0.05, momentum = 0.9)"))
        single([os.path.join(d, "noclip.nn"), "--metrics", "noclip.jsonl"], d)
        check(rel_err(read_metrics(os.path.join(d, "noclip.jsonl"))[0], read_metrics(os.path.join(d, "clip1.jsonl"))[0]) > 1e-3,
              "clip_grad_norm = 0.05 changes the run (it clips)")

        # checkpoints move between process counts: 2 -> 1 and 1 -> 2, at an epoch's end
        mpirun(2, [MODEL, "--epochs", "1", "--save", "a.st"], d)
        r = single([MODEL, "--save", "a.st", "--resume"], d)
        same_checkpoint(os.path.join(d, "a.st"), os.path.join(d, "one.st"), "2 processes, resumed in 1")
        check("warning" not in r.stderr, "2 processes, resumed in 1: the same hyperparameters (%s)" % r.stderr.strip())
        single([MODEL, "--epochs", "1", "--save", "b.st"], d)
        mpirun(2, [MODEL, "--save", "b.st", "--resume"], d)
        same_checkpoint(os.path.join(d, "b.st"), os.path.join(d, "one.st"), "1 process, resumed in 2")

        # ... and in the middle of an epoch: mpirun passes SIGINT on (as SIGTERM), every process
        # stops at the same step, process 0 saves; one process resumes it from the next step to
        # the same last step.  (Over thousands of steps a different summation order -- two
        # processes, or another thread count -- drifts the parameters by 1e-3, so the end is
        # compared by accuracy; the exact hand-over is checked at epoch ends above.)
        single([MNIST, "--epochs", INT_EPOCHS, "--metrics", "ref5.jsonl"], d)
        cmd = ["mpirun", "-np", "2", "--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
        p = subprocess.Popen(cmd + [NNC, MNIST, "--epochs", INT_EPOCHS, "--save", "int.st", "--metrics", "int.jsonl",
                                    "--quiet"], cwd=d, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=MPI_ENV)
        for _ in range(3000):   # once training has started
            if os.path.exists(os.path.join(d, "int.jsonl")) and os.path.getsize(os.path.join(d, "int.jsonl")) > 0:
                break
            time.sleep(0.01)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=TIMEOUT)
        if "saved int.st" in err:
            stopped = int(err.split(", step ")[1].split(";")[0])
            single([MNIST, "--epochs", INT_EPOCHS, "--save", "int.st", "--resume", "--metrics", "res.jsonl"], d)
            with open(os.path.join(d, "res.jsonl")) as f:
                first = json.loads(f.readline())
            _, rep = read_metrics(os.path.join(d, "res.jsonl"))
            _, ref = read_metrics(os.path.join(d, "ref5.jsonl"))
            check(first["step"] == stopped + 1 and rep[-1]["step"] == ref[-1]["step"],
                  "stopped at step %d in 2 processes, resumed in 1 from step %d to %d (one process: %d)"
                  % (stopped, first["step"], rep[-1]["step"], ref[-1]["step"]))
            check(abs(rep[-1]["accuracy"] - ref[-1]["accuracy"]) < 0.01, "... accuracy %.4f (one process: %.4f)"
                  % (rep[-1]["accuracy"], ref[-1]["accuracy"]))
        else:
            print("note: the run ended before SIGINT arrived (%d): %s" % (p.returncode, err.strip()[-200:]))

        # the whole Fashion-MNIST epoch, batch 61 (983 batches and one of 37)
        single([MNIST, "--epochs", "1", "--batch", "61", "--metrics", "m1.jsonl"], d)
        mpirun(2, [MNIST, "--epochs", "1", "--batch", "61", "--metrics", "m2.jsonl"], d)
        same_run(os.path.join(d, "m2.jsonl"), os.path.join(d, "m1.jsonl"), "Fashion-MNIST, 2 processes")

        # --eval under mpirun: sharded over the processes; with --eval-out every process computes
        # all of it (each must decide alike, or one would wait for the others forever) and
        # process 0 writes the file
        for extra in ([], ["--eval-out", "ev2.st"]):
            mpirun(2, [MODEL, "--load", "one.st", "--eval", "--metrics", "ev2.jsonl"] + extra, d)
            single([MODEL, "--load", "one.st", "--eval", "--metrics", "ev1.jsonl"] + (["--eval-out", "ev1.st"] if extra else []), d)
            _, e2 = read_metrics(os.path.join(d, "ev2.jsonl"))
            _, e1 = read_metrics(os.path.join(d, "ev1.jsonl"))
            check(abs(e2[-1]["loss"] - e1[-1]["loss"]) <= TOL * abs(e1[-1]["loss"]) and
                  abs(e2[-1]["mae"] - e1[-1]["mae"]) <= TOL * abs(e1[-1]["mae"]),
                  "--eval %sin 2 processes: loss %.7f mae %.7f (one process: %.7f %.7f)" %
                  ("--eval-out " if extra else "", e2[-1]["loss"], e2[-1]["mae"], e1[-1]["loss"], e1[-1]["mae"]))
        _, m2 = load_safetensors(os.path.join(d, "ev2.st"))
        _, m1 = load_safetensors(os.path.join(d, "ev1.st"))
        check(abs(float(m2["loss"]) - float(m1["loss"])) <= TOL * abs(float(m1["loss"])),
              "--eval-out in 2 processes: process 0 wrote the set's loss %s (one process: %s)" % (m2["loss"], m1["loss"]))

        # processes that disagree, or one that fails alone: an error, never a hang
        r = mpirun(2, [], d, expect_ok=False, shell='exec "%s" "%s" --quiet --seed "$OMPI_COMM_WORLD_RANK"' % (NNC, MODEL))
        check(r.returncode != 0 and "start from different parameters" in r.stderr,
              "different seeds: stopped before the first step (%d)" % r.returncode)
        r = mpirun(2, [], d, expect_ok=False,
                   shell='if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then exec "%s" "%s" --quiet --load missing.st; '
                         'else exec "%s" "%s" --quiet; fi' % (NNC, MODEL, NNC, MODEL))
        check(r.returncode != 0 and "missing.st" in r.stderr, "one process fails: the job ends (%d)" % r.returncode)
        r = mpirun(2, [MODEL, "--emit", "ir"], d)
        section = r.stdout.split("; ---- after allreduce ----")[-1].split("; ---- after optimizer")[0]
        check(r.stdout.count("; ---- after allreduce ----") == 1 and section.count("allreduce_start") == 3 and
              section.count("allreduce_wait") == 3, "--emit ir: a start and a wait per parameter, printed once")
        train = r.stdout.split("entry train_step")[1].split("; ---- entry")[0]
        check(train.count("allreduce_start") == 3, "the train step's schedule has them")
    finally:
        shutil.rmtree(d)
    print("mpi: %d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
