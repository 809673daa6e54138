#!/usr/bin/env bash
# Run-time robustness of training: what happens to the data, the checkpoints and the exit
# status when something goes wrong (diverged parameters, a full disk, a signal, a bad
# checkpoint, an unwritable --save destination).  Every case names the behaviour it checks.
set -u
nnc=$1; py=${2:-python3}
dir=$(mktemp -d); trap 'chmod -R u+w "$dir"; rm -rf "$dir"' EXIT
cd "$dir" || exit 1
pass=0; fail=0
ok()   { if "$@" >out 2>&1; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL (status $?): $*"; cat out; fi; }
bad()  { if "$@" >out 2>&1; then fail=$((fail+1)); echo "FAIL (succeeded): $*"; cat out; else pass=$((pass+1)); fi; }
has()  { if grep -q -- "$1" out; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: no '$1' in:"; cat out; fi; }
check() { if "$@"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $*"; fi; }

# A small classifier on CSV data; column 3 of x is 0, so a NaN row 3 of w1 reaches every
# hidden unit as NaN, which the ReLU can turn into a finite loss.
"$py" - <<'EOF'
import random
random.seed(1)
with open("d.csv", "w") as f:
    for i in range(64):
        x = [round(random.gauss(0, 1), 4) for _ in range(8)]
        x[3] = 0
        f.write(",".join(map(str, x)) + ",%d\n" % random.randrange(3))
EOF
cat > m.nn <<'EOF'
input x: f32[B, 8]
input y: i32[B]
param w1: f32[8, 16] = normal(0, 0.3)
param w2: f32[16, 3] = normal(0, 0.3)
logits = relu(x @ w1) @ w2
loss = cross_entropy(logits, y)
train {
    data x = csv("d.csv", first = 0, count = 8)
    data y = csv("d.csv", first = 8, count = 1)
    batch = 8
    epochs = 2
    optimizer = sgd(lr = 0.1)
    minimize loss
    metric accuracy = accuracy(logits, y)
}
EOF
# nan.st: the model's parameters with row 3 of w1 NaN (written by hand: safetensors is an
# 8-byte header length, a JSON header and little-endian data)
"$py" - <<'EOF'
import json, math, random, struct
random.seed(2)
w1 = [math.nan if i // 16 == 3 else random.gauss(0, 0.3) for i in range(8 * 16)]
w2 = [random.gauss(0, 0.3) for _ in range(16 * 3)]
data = struct.pack("<%df" % len(w1), *w1) + struct.pack("<%df" % len(w2), *w2)
hdr = {"w1": {"dtype": "F32", "shape": [8, 16], "data_offsets": [0, 512]},
       "w2": {"dtype": "F32", "shape": [16, 3], "data_offsets": [512, 704]}}
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open("nan.st", "wb").write(struct.pack("<Q", len(h)) + h + data)
EOF

# NaN parameters are never saved as the result of a "successful" run
bad "$nnc" m.nn --quiet --load nan.st --save out.st;  has "parameter 'w1' element 48 is NaN"
check test ! -e out.st
ok "$nnc" m.nn --quiet --save good.st
cp good.st keep.st
bad "$nnc" m.nn --quiet --load nan.st --save good.st
check cmp good.st keep.st        # the previous checkpoint is left as it was

# --metrics: a write error (full disk) is an error, not a JSON file cut mid-line and exit 0
bad "$nnc" m.nn --quiet --metrics /dev/full;          has "/dev/full: cannot write metrics: No space left on device"

# SIGTERM (a scheduler's stop) saves at the end of the step like SIGINT, and exits 143
rm -f term.st term.jsonl
"$nnc" m.nn --quiet --epochs 1000000 --save term.st --metrics term.jsonl &
pid=$!
for i in $(seq 1 1000); do [ -s term.jsonl ] && break; sleep 0.01; done
kill -TERM "$pid"; wait "$pid"; st=$?
check test "$st" = 143
check test -s term.st

echo "data: $pass passed, $fail failed"
[ "$fail" = 0 ]
