#!/usr/bin/env bash
# The command line's contract: help, bad flags named, NaN stops, --check-numerics names the
# op and line, checkpoints refused when corrupt, --eval runs forward only, AOT writes its files.
set -u
nnc=$1; here=$(cd "$(dirname "$0")" && pwd); models=$here/../../models
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
pass=0; fail=0
ok()   { if "$@" >"$dir/out" 2>&1; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL (status): $*"; cat "$dir/out"; fi; }
bad()  { if "$@" >"$dir/out" 2>&1; then fail=$((fail+1)); echo "FAIL (succeeded): $*"; else pass=$((pass+1)); fi; }
hasnt() { if grep -q -- "$1" "$dir/out"; then fail=$((fail+1)); echo "FAIL: '$1' in:"; cat "$dir/out"; else pass=$((pass+1)); fi; }
has()  { if grep -q -- "$1" "$dir/out"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: no '$1' in:"; cat "$dir/out"; fi; }

ok "$nnc" --help;                              has "--emit ir|c|cuda|ptx"
ok "$nnc" --version;                           has "targets: cpu"
bad "$nnc" "$models/linreg.nn" --frobnicate;   has "unknown option '--frobnicate'"
bad "$nnc" "$models/linreg.nn" --epochs abc;   has "--epochs: expects an integer"
bad "$nnc" "$dir/missing.nn";                  has "missing.nn: cannot read"
# A model path that is not a file ends in a message, never a hang (each under a timeout):
# devices and directories are refused before reading, a pipe is read up to 16 MiB, and a FIFO
# nobody writes to reads as empty.  A pipe with a model in it works.
bad timeout 20 "$nnc" /dev/zero;               has "/dev/zero: is a character device, not a model file"
bad timeout 20 "$nnc" /dev/urandom;            has "/dev/urandom: is a character device, not a model file"
bad timeout 20 "$nnc" "$dir";                  has "is a directory, not a model file"
mkfifo "$dir/fifo.nn"
bad timeout 20 "$nnc" "$dir/fifo.nn";          has "fifo.nn: a pipe that gave no text"
bad timeout 20 "$nnc" <(yes);                  has "is more than 16 MiB, larger than any model"
ok timeout 20 "$nnc" <(cat "$models/linreg.nn") --stats; has "train_step"
bad "$nnc" "$here/nan.nn" --quiet;             has "the loss became NaN at epoch 1, step 1"
bad "$nnc" "$here/nan.nn" --quiet --check-numerics; has "NaN at element 0 of log (forward, .*nan.nn:4:"
ok "$nnc" "$models/linreg.nn" --quiet --epochs 5 --save "$dir/lr.st"
ok "$nnc" "$models/linreg.nn" --load "$dir/lr.st" --eval; has "eval on training data (100 samples):  loss"
hasnt "without --load"
ok "$nnc" "$models/linreg.nn" --eval;          has "warning: --eval without --load: evaluating freshly initialised parameters (seed 0)"
cp "$dir/lr.st" "$dir/flip.st"; printf '\x55' | dd of="$dir/flip.st" bs=1 seek=$(( $(stat -c %s "$dir/lr.st") - 3 )) conv=notrunc 2>/dev/null
bad "$nnc" "$models/linreg.nn" --load "$dir/flip.st" --eval; has "flip.st"
head -c 100 "$dir/lr.st" > "$dir/short.st"
bad "$nnc" "$models/linreg.nn" --load "$dir/short.st" --eval; has "short.st"
ok "$nnc" "$models/linreg.nn" --target cpu -o "$dir/aot"; has "libm_linreg.a\|liblinreg.a"
ok test -f "$dir/aot/linreg.h"
ok "$nnc" "$models/mlp.nn" --stats;            has "train_step"
# The products' threads (include/nnc_pool.h) cut each product by its shape and the most threads
# allowed, never by how many take part: a busy machine (fewer threads) gives the same losses.
for n in 1 2; do
    ok env OMP_NUM_THREADS=2 NNC_TEST_POOL_ACTIVE=$n "$nnc" "$models/mlp.nn" --epochs 1 --quiet --metrics "$dir/pool$n.jsonl"
    grep -o '"loss":[^,}]*' "$dir/pool$n.jsonl" > "$dir/pool$n.loss"
done
ok test "$(wc -l < "$dir/pool1.loss")" -gt 900
ok cmp "$dir/pool1.loss" "$dir/pool2.loss"
# Large elementwise kernels run on the pool too, cut over their outer loop (the large MLP keeps no
# OpenMP loop); each point is computed alone, so one piece or three give the same losses.
ok "$nnc" "$models/mlp_large.nn" --emit c;     has "nnc_pool_for(mlp_large_k1_part, &c_, in, B, B"
hasnt "omp parallel for"
for n in 1 3; do
    ok env OMP_NUM_THREADS=$n "$nnc" "$here/pool_ew.nn" --quiet --metrics "$dir/ew$n.jsonl"
    grep -o '"loss":[^,}]*' "$dir/ew$n.jsonl" > "$dir/ew$n.loss"
done
ok test "$(wc -l < "$dir/ew1.loss")" -ge 8
ok cmp "$dir/ew1.loss" "$dir/ew3.loss"
# Fused attention's routines run on the pool as well: a task (a head's query tile, or a head for
# the gradients) writes only its own outputs, so one thread or two give the same losses.
sdpa=$here/../cuda/ops/sdpa.nn
ok "$nnc" "$sdpa" --emit c;                    has "nnc_pool_run(nnc_attn_fwd_chunk_r, &a"
has "nnc_pool_run(nnc_attn_bwd_chunk_r, &a"
for n in 1 2; do
    ok env OMP_NUM_THREADS=2 NNC_TEST_POOL_ACTIVE=$n "$nnc" "$sdpa" --epochs 3 --quiet --metrics "$dir/attn$n.jsonl"
    grep -o '"loss":[^,}]*' "$dir/attn$n.jsonl" > "$dir/attn$n.loss"
done
ok test "$(wc -l < "$dir/attn1.loss")" -ge 6
ok cmp "$dir/attn1.loss" "$dir/attn2.loss"
# A pooled flat loop bound by its arithmetic (GELU's gradient) asks for its inputs' lines ahead,
# in runs (codegen/cpu/dialect_c.c: c_space_open); one bound by memory (Adam's update) does not.
ok "$nnc" "$models/gpt.nn" --emit c;           has "NNC_PREFETCH(i1, p_)"
cp "$dir/out" "$dir/gpt_c"
kernel_of() { awk -v h="$1" 'index($0, "/* train_step launch") == 1 { k = index($0, h) > 0 } k' "$dir/gpt_c"; }
kernel_of "elementwise (gelu_grad)" > "$dir/out"; has "for (int64_t i = b_; i < e_; i++)"
kernel_of "elementwise (mul, mul, sub" > "$dir/out"; has "nnc_pool_for"
hasnt "NNC_PREFETCH"
# A row's sums in lanes run a loop each over the whole vectors (codegen/kernel.c, row_sums): gcc
# left layer norm's gradient scalar while one loop fed both g and gx.
kernel_of "row-wise (layer_norm_rows_grad)" > "$dir/out"
ok test "$(grep -A1 'g_l\[l\] += (dy\[c\] \* Wv\[c\]);' "$dir/out" | sed -n 2p | tr -d ' ')" = "}"
# A convolution's bias gradient sums each channel in 8 lanes along the rows (one chain of double
# additions waited on itself): codegen/cpu/dialect_c.c, reduce_gather.
ok "$nnc" "$models/convnet.nn" --emit c;       has "lane_\[q_\] += l0;"
# So do split's slices and their gradients' concat (row copies), layer norm's and softmax's rows
# and the reductions: no OpenMP team is left among the kernels (one between two pool jobs waited
# for the pool's spinning threads), and the losses do not depend on the threads taking part.
ok "$nnc" "$here/pool_rows.nn" --emit c;       has "nnc_copy_rows(y, Ly"
awk '/train_step launch 0:/ { k = 1 } k' "$dir/out" > "$dir/kernels"; cp "$dir/kernels" "$dir/out"
has "row-wise (softmax)"
has "row-wise (layer_norm_rows)"
has "row-wise (layer_norm_rows_grad)"
hasnt "omp parallel"
for n in 1 2; do
    ok env OMP_NUM_THREADS=2 NNC_TEST_POOL_ACTIVE=$n "$nnc" "$here/pool_rows.nn" --quiet --metrics "$dir/rows$n.jsonl"
    grep -o '"loss":[^,}]*' "$dir/rows$n.jsonl" > "$dir/rows$n.loss"
done
ok test "$(wc -l < "$dir/rows1.loss")" -ge 12
ok cmp "$dir/rows1.loss" "$dir/rows2.loss"
# bf16 products: oneDNN where it is fast (AMX; AMD's AVX512-BF16), the f32 product on widened
# copies on an Intel core without AMX, where oneDNN's AVX512-BF16 product is slower than sgemm
# (ONEDNN_MAX_CPU_ISA hides AMX from oneDNN as such a CPU lacks it; ONEDNN_VERBOSE names each
# product oneDNN runs).  Only where nnc has oneDNN and the CPU has AVX512-BF16.
if "$nnc" "$models/mlp.nn" --precision bf16 --emit c | grep -q nnc_dnnl_matmul && grep -qw avx512_bf16 /proc/cpuinfo; then
    if grep -q GenuineIntel /proc/cpuinfo; then
        ok env ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 ONEDNN_VERBOSE=1 "$nnc" "$models/mlp.nn" --precision bf16 --bench 2 --quiet
        hasnt "exec,cpu,matmul,.*src_bf16"
    fi
    if grep -qw amx_bf16 /proc/cpuinfo || grep -q AuthenticAMD /proc/cpuinfo; then
        ok env ONEDNN_VERBOSE=1 "$nnc" "$models/mlp.nn" --precision bf16 --bench 2 --quiet
        has "exec,cpu,matmul,.*src_bf16"
    fi
fi
ok "$nnc" "$models/mlp.nn" --emit c;           has "cblas_sgemm"
bad "$nnc" "$models/mlp.nn" --save-every 5;    has "need --save FILE"
# --dump-after is an inspection flag: it prints the graph and exits without training
ok "$nnc" "$models/linreg.nn" --dump-after=parse; has "after parse"; hasnt "epoch"
echo "cli: $pass passed, $fail failed"
[ "$fail" = 0 ]
