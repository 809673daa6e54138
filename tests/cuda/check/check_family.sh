#!/usr/bin/env bash
# check_family.sh NNC - models built to provoke false alarms from --check-against cpu, each of
# which must pass it on the CUDA emulator: Adam and AdamW on zero and rounding-noise gradients,
# sums whose exact value is 0 or tiny, a reduction over a million elements that cancels,
# softmax and cross-entropy (with label smoothing and an ignore_index too) on large logits,
# attention on large scores, and the two-GPU model of ../split.nn (whose Adam step was the first report).  Each stopped at
# step 1 under the checker this one replaced, which compared whole steps against a tolerance
# relative to each tensor's largest value.
# tests.cmake runs it with NNC_EMU_FMA=1: kernels contracted into FMAs, as on a GPU.
set -u
nnc=$1
cd "$(dirname "$0")"   # the models read labels.csv from here
pass=0; fail=0
check() {   # check [ENV=VALUE...] -- MODEL FLAGS...
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    local out
    out=$(env "${envs[@]}" "$nnc" "$@" --target cuda --check-against cpu 2>&1)
    if [ $? -eq 0 ] && grep -q "^check-against cpu: [0-9]* steps\?, [0-9]* values compared" <<<"$out"; then
        pass=$((pass+1)); grep "^check-against cpu" <<<"$out"
    else
        fail=$((fail+1)); echo "FAIL: $*"; echo "$out" | tail -5
    fi
}
for m in adam_tiny_grad adamw_tiny_grad tiny_sums long_reduce softmax_large ce_smooth attention_large; do check -- "$m.nn"; done
check NNC_EMU_DEVICES=2 -- ../split.nn --strict-devices --epochs 1
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
