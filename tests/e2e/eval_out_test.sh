#!/usr/bin/env bash
# --eval with non-scalar outputs: the loss is averaged over the set as before, a per-sample
# output is reported by its shape (never as one number), and --eval-out FILE writes it for the
# whole set (safetensors, samples in order whatever the batch size), the loss as metadata.
#   eval_out_test.sh NNC PYTHON
set -u
nnc=$1 py=${2:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
pass=0; fail=0
ok()   { if "$@" >"$dir/out" 2>&1; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL (status): $*"; cat "$dir/out"; fi; }
bad()  { if "$@" >"$dir/out" 2>&1; then fail=$((fail+1)); echo "FAIL (succeeded): $*"; else pass=$((pass+1)); fi; }
has()  { if grep -q -- "$1" "$dir/out"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: no '$1' in:"; cat "$dir/out"; fi; }
hasnt() { if grep -q -- "$1" "$dir/out"; then fail=$((fail+1)); echo "FAIL: '$1' in:"; cat "$dir/out"; else pass=$((pass+1)); fi; }
m=$here/eval_out.nn

ok "$nnc" "$m" --quiet --epochs 2 --save "$dir/ck.st"
ok "$nnc" "$m" --load "$dir/ck.st" --eval
has "eval on training data (100 samples):  loss [0-9.]*  p f32\[100,1\] (not a single number: --eval-out FILE writes it)"
has "w2 f32\[10,1\] (not a single number"
hasnt " p [-0-9]"
ok "$nnc" "$m" --load "$dir/ck.st" --eval --eval-out "$dir/b32.st"
has "p f32\[100,1\] -> $dir/b32.st  w2 f32\[10,1\] -> $dir/b32.st  colmean f32\[10\] (not written: it has no batch axis and differs between batches)"
ok "$nnc" "$m" --load "$dir/ck.st" --eval --eval-out "$dir/b100.st" --batch 100
has "colmean f32\[10\] -> $dir/b100.st"
bad "$nnc" "$m" --eval-out "$dir/x.st";                       has "--eval-out writes what --eval computes: add --eval"
bad "$nnc" "$m" --load "$dir/ck.st" --eval --eval-out "$dir/no/such/dir.st"; has "no/such/dir.st"

# The files: p in sample order (4 batches of 32 = one batch of 100), w2 = 2 W, the loss equal
# to the printed one, colmean only where one batch covered the set.
ok "$py" - "$here/../ref" "$dir" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from nnc_ref import load_safetensors
d = sys.argv[2]
a, ma = load_safetensors(d + "/b32.st")
b, mb = load_safetensors(d + "/b100.st")
ck, _ = load_safetensors(d + "/ck.st")
assert sorted(a) == ["p", "w2"], sorted(a)
assert sorted(b) == ["colmean", "p", "w2"], sorted(b)
assert a["p"].shape == (100, 1) and np.array_equal(a["p"], b["p"]), "p differs between batch 32 and 100"
assert np.array_equal(a["w2"], 2 * ck["W"]), "w2 is not 2 W"
assert abs(float(ma["loss"]) - float(mb["loss"])) <= 1e-6 * abs(float(mb["loss"])), (ma, mb)
print("ok", a["p"].shape, ma["loss"])
PY
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
