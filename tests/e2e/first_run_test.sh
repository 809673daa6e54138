#!/usr/bin/env bash
# first_run_test.sh NNC - what a newcomer's first runs meet (issue 28): --target auto and
# device = auto say in one line which device they chose.
set -u
nnc=$(realpath "$1"); here=$(cd "$(dirname "$0")" && pwd); models=$here/../../models
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
pass=0; fail=0
ok()    { if "$@" >"$dir/out" 2>&1; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL (status): $*"; cat "$dir/out"; fi; }
bad()   { if "$@" >"$dir/out" 2>&1; then fail=$((fail+1)); echo "FAIL (succeeded): $*"; cat "$dir/out"; else pass=$((pass+1)); fi; }
has()   { if grep -q -- "$1" "$dir/out"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: no '$1' in:"; cat "$dir/out"; fi; }
hasnt() { if grep -q -- "$1" "$dir/out"; then fail=$((fail+1)); echo "FAIL: '$1' in:"; cat "$dir/out"; else pass=$((pass+1)); fi; }
lines() { local n; n=$(grep -c -- "$1" "$dir/out"); if [ "$n" = "$2" ]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: '$1' $n times, not $2:"; cat "$dir/out"; fi; }

# ---- --target auto / device = auto: one line on stderr says which device, then it trains
chosen="^nnc: \(using cuda:0 (.*)\|no CUDA device (.*), using the CPU\)$"
ok "$nnc" "$models/linreg.nn" --target auto --epochs 2
has "$chosen"; lines "^nnc: " 1; has "epoch 2/2"
# without a GPU (this machine, CI) the reason is named: no driver, no device, no cuBLAS, ...
if [ ! -e /dev/nvidiactl ]; then has "^nnc: no CUDA device (.*), using the CPU$"; fi
ok "$nnc" "$models/linreg.nn" --target auto --epochs 2 --quiet;  hasnt "^nnc: "
sed 's/^    seed = 0$/&\n    device = auto/' "$models/linreg.nn" > "$dir/auto.nn"
ok "$nnc" "$dir/auto.nn" --epochs 2;            has "$chosen"; has "epoch 2/2"
ok "$nnc" "$dir/auto.nn" --epochs 2 --target cpu; hasnt "^nnc: "
ok "$nnc" "$models/linreg.nn" --epochs 2;        hasnt "^nnc: "
sed 's/device = auto/device = tpu/' "$dir/auto.nn" > "$dir/tpu.nn"
bad "$nnc" "$dir/tpu.nn";                       has "device is cpu, cuda, cuda(k) or auto"
bad "$nnc" "$models/linreg.nn" --target tpu;    has "--target takes cpu, cuda or auto, not 'tpu'"

echo "first run: $pass passed, $fail failed"
[ "$fail" = 0 ]
