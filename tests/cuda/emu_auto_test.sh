#!/usr/bin/env bash
# emu_auto_test.sh NNC - --target auto and device = auto on the CUDA emulator: with a device they
# choose cuda:0 and say so, and train as --target cuda does; with none (NNC_EMU_DEVICES=0) they
# say why and train on the CPU.
set -u
nnc=$1; here=$(cd "$(dirname "$0")" && pwd); models=$here/../../models
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
pass=0; fail=0
ok()  { if "$@" >"$dir/out" 2>&1; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL (status): $*"; cat "$dir/out"; fi; }
has() { if grep -q -- "$1" "$dir/out"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: no '$1' in:"; cat "$dir/out"; fi; }
same() { if diff <(grep '^epoch' "$1" | sed 's/  [0-9.]*s$//') <(grep '^epoch' "$2" | sed 's/  [0-9.]*s$//'); then
           pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1 and $2 differ"; fi; }

ok "$nnc" "$models/linreg.nn" --target auto --epochs 3
has "^nnc: using cuda:0 (nnc CUDA emulator)$"; cp "$dir/out" "$dir/auto"
ok "$nnc" "$models/linreg.nn" --target cuda --epochs 3; cp "$dir/out" "$dir/cuda"
same "$dir/auto" "$dir/cuda"
ok "$nnc" "$models/linreg.nn" --target auto --stats
has "host<->device copies"   # the step compiled for the GPU: the batches cross to it
sed 's/^    seed = 0$/&\n    device = auto/' "$models/linreg.nn" > "$dir/auto.nn"
ok "$nnc" "$dir/auto.nn" --epochs 3;  has "^nnc: using cuda:0 (nnc CUDA emulator)$"

NNC_EMU_DEVICES=0 ok "$nnc" "$models/linreg.nn" --target auto --epochs 3
has "^nnc: no CUDA device (the driver reports 0 devices), using the CPU$"; cp "$dir/out" "$dir/none"
ok "$nnc" "$models/linreg.nn" --target cpu --epochs 3; cp "$dir/out" "$dir/cpu"
same "$dir/none" "$dir/cpu"
NNC_EMU_DEVICES=0 ok "$nnc" "$models/linreg.nn" --target auto --stats
if grep -q "host<->device" "$dir/out"; then fail=$((fail+1)); echo "FAIL: auto without a device compiled for cuda"; else pass=$((pass+1)); fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
