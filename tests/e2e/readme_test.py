#!/usr/bin/env python3
"""readme_test.py NNC - the README's examples are what nnc prints.

Every fenced block whose lines start with `$ nnc ...` is run, command after command, in a
scratch directory where `models/` is the repository's; the other lines of the block must be
their output (stdout and stderr together), exactly but for the seconds at the end of an epoch
line.  A `bad.nn` is made as the README says: models/mlp.nn with the line its error block
quotes.  The output `setup.sh` is said to end with is checked by training models/mlp.nn the
same way (seed 42, 2 threads, a fresh cache, OpenBLAS's and oneDNN's AVX2 kernels as the README says),
where the data set is installed and the processor has AVX2; the step where the -O3 build
takes over varies too.  Lines of the `--emit ir` and `--emit c` excerpts must appear, in
order, in what those print for models/mlp.nn.  And what the README relies on around nnc:
setup.sh installs Graphviz, which it pipes --emit dot into, and it shows mpirun as root."""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NNC = os.path.abspath(sys.argv[1])
FASHION = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
failures, checked, skipped = [], [], []


def blocks(text):
    """(line number, the text before it, its lines) for each fenced block."""
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        if lines[i].startswith("```"):
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            out.append((i + 1, "\n".join(lines[max(0, i - 4):i]), lines[i + 1:j]))
            i = j
        i += 1
    return out


def mask(line):
    """An epoch line's seconds and the -O3 build's step vary from run to run."""
    line = re.sub(r"  [0-9]+\.[0-9]+s$", "  <seconds>", line)
    return re.sub(r"takes over after step [0-9]+ ", "takes over after step <N> ", line)


def run(args, cwd, env):
    r = subprocess.run(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=240)
    return r.stdout.splitlines()


def make_bad(block, cwd):
    """bad.nn: models/mlp.nn with the line the error block quotes ("   17 | h = ...")."""
    for line in block:
        m = re.match(r"^ +([0-9]+) \| (.*)$", line)
        if m:
            src = open(os.path.join(ROOT, "models", "mlp.nn")).read().split("\n")
            src[int(m.group(1)) - 1] = m.group(2)
            open(os.path.join(cwd, "bad.nn"), "w").write("\n".join(src))
            return
    failures.append("the bad.nn block quotes no source line")


def check_commands(at, lines, cwd, env):
    cmds = [l[2:] for l in lines if l.startswith("$ ")]
    want = [l for l in lines if not l.startswith("$ ")]
    if not os.path.exists(FASHION) and any("mlp.nn" in c and "--epochs" in c for c in cmds):
        skipped.append(at)
        print(f"skip README line {at}: it trains on Fashion-MNIST, which is not installed")
        return
    if any("bad.nn" in c for c in cmds):
        make_bad(want, cwd)
    got = []
    for c in cmds:
        words = c.split()
        assert words[0] == "nnc", c
        got += run([NNC] + words[1:], cwd, env)
    if "--target auto" in " ".join(cmds) and got and not got[0].startswith(want[0][:40]):
        print(f"skip README line {at}: this machine says {got[0]!r}")   # a GPU, or another reason
        skipped.append(at)
        return
    checked.append(f"line {at}: {' && '.join(cmds)}")
    if [mask(l) for l in got] != [mask(l) for l in want]:
        failures.append(f"README line {at}: {' && '.join(cmds)}\n  README:\n    " + "\n    ".join(want) +
                        "\n  nnc printed:\n    " + "\n    ".join(got))


def check_setup_output(at, lines, cwd, env):
    flags = open("/proc/cpuinfo").read()
    if not os.path.exists(FASHION) or " avx2" not in flags or " fma" not in flags:
        print(f"skip README line {at}: needs Fashion-MNIST and a processor with AVX2")
        skipped.append(at)
        return
    env = dict(env, XDG_CACHE_HOME=os.path.join(cwd, "fresh-cache"), OPENBLAS_CORETYPE="Haswell",
               ONEDNN_MAX_CPU_ISA="AVX2")
    got = run([NNC, "models/mlp.nn", "--threads", "2"], cwd, env)
    checked.append(f"line {at}: the output of setup.sh's training")
    # the takeover line comes when the -O3 build is ready: before or after an epoch line; there is
    # none where one build serves the whole run (NNC_CFLAGS with an -O level: the sanitizer stage's)
    # or where the run ends before the -O3 build does (a busy machine: the compiler gets no core)
    want, have = [mask(l) for l in lines], [mask(l) for l in got]
    if not any("takes over" in l for l in have):
        want = [l for l in want if "takes over" not in l]
    if sorted(have) != sorted(want) or [l for l in have if l.startswith("epoch")] != \
            [l for l in want if l.startswith("epoch")]:
        failures.append(f"README line {at}: setup.sh's training\n  README:\n    " + "\n    ".join(lines) +
                        "\n  nnc printed:\n    " + "\n    ".join(got))


def check_excerpt(at, lines, cwd, env, flag):
    out = run([NNC, "models/mlp.nn", "--emit", flag], cwd, env)
    pos = 0
    checked.append(f"line {at}: an excerpt of --emit {flag}")
    for line in lines:
        if line.strip() == "...":
            continue
        while pos < len(out) and out[pos] != line:
            pos += 1
        if pos == len(out):
            failures.append(f"README line {at}: --emit {flag} does not print, in this order: {line!r}")
            return
        pos += 1


def check_setup_installs(text):
    """What the README pipes nnc's output into, setup.sh installs (scripts/deps.sh build)."""
    deps = open(os.path.join(ROOT, "scripts", "deps.sh")).read()
    build = deps[deps.index("want=("):deps.index("if [")]
    checked.append("scripts/deps.sh build installs graphviz, as the README pipes --emit dot to dot")
    if "| dot -T" in text and "graphviz" not in build:
        failures.append("the README pipes --emit dot to dot, and setup.sh (deps.sh build) does not install graphviz")


def check_mpirun_root(text):
    """As root, Open MPI's mpirun refuses to start without --allow-run-as-root: the README says so."""
    if os.geteuid() != 0 or subprocess.run(["sh", "-c", "command -v mpirun"], capture_output=True).returncode:
        print("skip: mpirun as root (not root, or no mpirun)")
        skipped.append("mpirun")
        return
    plain = subprocess.run(["mpirun", "-np", "1", "true"], capture_output=True, timeout=60)
    allowed = subprocess.run(["mpirun", "--allow-run-as-root", "-np", "1", "true"], capture_output=True, timeout=60)
    checked.append("mpirun as root needs --allow-run-as-root, and the README shows it")
    if plain.returncode != 0 and allowed.returncode == 0 and "mpirun --allow-run-as-root -np" not in text:
        failures.append("mpirun refuses root without --allow-run-as-root here, and the README does not show it")


def main():
    text = open(os.path.join(ROOT, "README.md")).read()
    with tempfile.TemporaryDirectory() as cwd:
        os.symlink(os.path.join(ROOT, "models"), os.path.join(cwd, "models"))
        env = dict(os.environ, XDG_CACHE_HOME=os.path.join(cwd, "cache"))
        env.pop("OPENBLAS_CORETYPE", None)
        for at, before, lines in blocks(text):
            if lines and lines[0].startswith("$ nnc"):
                check_commands(at, lines, cwd, env)
            elif "`setup.sh` ends by training" in before:
                check_setup_output(at, lines, cwd, env)
            elif lines and lines[0].startswith("; ---- entry train_step:"):
                check_excerpt(at, lines, cwd, env, "ir")
            elif lines and lines[0].startswith("/* train_step launch"):
                check_excerpt(at, lines, cwd, env, "c")
    check_setup_installs(text)
    check_mpirun_root(text)
    for c in checked:
        print("checked README", c)
    for f in failures:
        print("FAIL", f)
    if len(checked) + len(skipped) < 9:
        print(f"FAIL only {len(checked) + len(skipped)} README examples found: the test no longer finds them")
        return 1
    print(f"readme: {len(checked)} examples checked, {len(failures)} differ")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
