#!/bin/sh
# aot_train_test.sh NNC AOT_TRAIN PYTHON CC - nnc's trainer over the model ABI alone:
#   nnc aot_train.nn -o DIR writes aot_train.c, built here as a shared library with the flags nnc
#   compiles its own code with; aot_train (aot_train.c) dlopens it and runs train/'s train_run
#   with a train section of its own.  Its metrics must be the command's, bit for bit (the same
#   code, seed, shuffle and evaluation), and with a label out of range its error must be the
#   command's: the file, the sample, and what reads the labels where (the ABI's input rules,
#   printed into the library's tables).
set -eu
NNC=$1 AOT_TRAIN=$2 PY=$3 CC=${4:-cc}
SRC=$(cd "$(dirname "$0")" && pwd)
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
fail=0

cp "$SRC/aot_train.nn" "$DIR/aot_train.nn"
"$PY" - "$DIR" <<'PYEOF'
import sys
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(1)
x = rng.standard_normal((100, 4)).astype(np.float32)
y = ((x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0.5)).astype(np.int32)
np.save(d + "/x.npy", x)
np.save(d + "/y.npy", y)
y[37] = 3
np.save(d + "/y_bad.npy", y)
PYEOF

"$NNC" "$DIR/aot_train.nn" --target cpu -o "$DIR/out" >/dev/null
# NNC_CFLAGS: what nnc adds to its own compiles (the sanitizers' stage); -march=native as the
# command's build, so that the library's NNC_FMA rounds as the command's (fused where the machine
# has FMA: a build without it computes the last bits of EXP, TANH and ERF otherwise)
"$CC" -O3 -march=native -std=c11 -ffp-contract=off -fopenmp -fPIC -shared ${NNC_CFLAGS:-} "$DIR/out/aot_train.c" \
    -o "$DIR/libaot_train.so" -lopenblas -lm
echo "ok   nnc -o wrote aot_train.c, built as libaot_train.so"

"$NNC" "$DIR/aot_train.nn" --quiet --metrics "$DIR/cli.jsonl"
if "$AOT_TRAIN" "$DIR/libaot_train.so" aot_train "$DIR/x.npy" "$DIR/y.npy" "$DIR/aot.jsonl"; then
    echo "ok   train_run over libaot_train.so's ABI trained"
else
    echo "FAIL train_run over libaot_train.so's ABI (exit $?)"; exit 1
fi
# every number but the clocks' must be the command's
"$PY" - "$DIR/cli.jsonl" "$DIR/aot.jsonl" <<'PYEOF' || fail=1
import json, sys
def records(path):
    out = []
    for line in open(path):
        r = json.loads(line)
        out.append({k: v for k, v in r.items() if k != "seconds"})
    return out
cli, aot = records(sys.argv[1]), records(sys.argv[2])
steps = [r for r in aot if r.get("type") == "step"]
evals = [r for r in aot if "accuracy" in r]
if cli != aot or len(steps) != 14 or len(evals) != 2:
    print("FAIL the trainer over the ABI: %d records, %d steps, %d with accuracy; the command's %d records"
          % (len(aot), len(steps), len(evals), len(cli)))
    for a, b in zip(cli, aot):
        if a != b:
            print("    command: %s\n    ABI:     %s" % (a, b))
            break
    sys.exit(1)
print("ok   the trainer over the ABI: the command's %d records (%d step losses, test loss and accuracy per epoch)"
      % (len(aot), len(steps)))
PYEOF

# a bad label: the same message from the command and from the trainer over the library
sed 's/data y = npy("y.npy")/data y = npy("y_bad.npy")/' "$DIR/aot_train.nn" > "$DIR/bad.nn"
"$NNC" "$DIR/bad.nn" --quiet 2> "$DIR/cli.err" && { echo "FAIL nnc trained on a bad label"; fail=1; }
"$AOT_TRAIN" "$DIR/libaot_train.so" aot_train "$DIR/x.npy" "$DIR/y_bad.npy" "$DIR/bad.jsonl" 2> "$DIR/aot.err" &&
    { echo "FAIL train_run trained on a bad label"; fail=1; }
want="nnc: error: $DIR/y_bad.npy: input 'y': sample 37: label 3 is outside 0..2 (cross_entropy over 3 classes at $DIR/"
if [ "$(cat "$DIR/aot.err")" = "${want}aot_train.nn:9:8)" ] && [ "$(cat "$DIR/cli.err")" = "${want}bad.nn:9:8)" ]; then
    echo "ok   a bad label: the command's message, from the library's input rules: $(sed "s|$DIR/||g" "$DIR/aot.err")"
else
    echo "FAIL a bad label:"; echo "    want:    ${want}aot_train.nn:9:8)"; echo "    command: $(cat "$DIR/cli.err")"
    echo "    ABI:     $(cat "$DIR/aot.err")"; fail=1
fi
[ $fail -eq 0 ] && echo "4 passed, 0 failed" || echo "some checks failed"
exit $fail
