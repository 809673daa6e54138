#!/usr/bin/env bash
# emu_cli_test.sh NNC - the CUDA target's command-line checks, run on the CUDA emulator:
#   --check-against cpu passes on a correct run and names the first wrong value, its op and its
#   model line, when the emulator plants a wrong result in any GEMM or any kernel of a step
#   (NNC_EMU_FAULT_GEMM, NNC_EMU_FAULT_KERNEL); --check-numerics names the op and line on CUDA as on the
#   CPU; a round trip through the host trains as on the CPU; --strict-devices
#   refuses implicit crossings and accepts to(x, cuda); an embedding index out of range is
#   refused; a convolutional model passes --check-against cpu, and so does gradient accumulation;
#   a fault planted in attention's kernels is named; --verbose says where a product's bias ran.
set -u
nnc=$1; here=$(cd "$(dirname "$0")" && pwd); models=$here/../../models
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
pass=0; fail=0
ok()  { if "$@" >"$dir/out" 2>&1; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL (status): $*"; cat "$dir/out"; fi; }
bad() { if "$@" >"$dir/out" 2>&1; then fail=$((fail+1)); echo "FAIL (succeeded): $*"; cat "$dir/out"; else pass=$((pass+1)); fi; }
has() { if grep -q -- "$1" "$dir/out"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: no '$1' in:"; cat "$dir/out"; fi; }

ok "$nnc" "$models/linreg.nn" --target cuda --epochs 20 --check-against cpu
has "check-against cpu: 20 steps, [0-9]* values compared launch by launch"
# the 4th GEMM is step 2's weight gradient (each linreg step has a forward and a backward GEMM)
NNC_EMU_FAULT_GEMM=4 bad "$nnc" "$models/linreg.nn" --target cuda --epochs 20 --check-against cpu
has "the targets first differ at matmul (backward, .*linreg.nn:10:10, launch [0-9]* of train_step) in step 2: element 0"
NNC_EMU_FAULT_GEMM=1 bad "$nnc" "$models/linreg.nn" --target cuda --epochs 20 --check-against cpu
has "first differ at matmul (forward, .*linreg.nn:10:10, launch [0-9]* of train_step) in step 1"
NNC_EMU_FAULT_GEMM=3 bad "$nnc" "$models/linreg.nn" --target cuda --epochs 20 --check-against cpu
has "first differ at matmul (forward, .*linreg.nn:10:10, launch [0-9]* of train_step) in step 2"
NNC_EMU_FAULT_GEMM=2 bad "$nnc" "$models/linreg.nn" --target cuda --epochs 20 --check-against cpu
has "first differ at matmul (backward, .*linreg.nn:10:10, launch [0-9]* of train_step) in step 1: .*tolerance"
# gradient accumulation: accumulate calls and train steps alike, dropout's masks per micro-batch
ok "$nnc" "$here/accumulate.nn" --target cuda --epochs 2 --check-against cpu
has "check-against cpu: 6 steps, [0-9]* values compared launch by launch"

# A wrong value planted in each kernel of a classifier's step in turn (elementwise ops, their
# gradients, reductions, softmax, log_softmax, cross-entropy and theirs, the update): each
# is named, with its op and model line.  The count ends at the first run with nothing
# planted (past the step's last kernel).
cat >"$dir/cls.nn" <<'NN'
input x: f32[B, 6]
input t: i32[B]
param w: f32[6, 5] = normal(0, 1)
param b: f32[5] = zeros()
logits = x @ w + b
p = softmax(logits)
loss = cross_entropy(logits, t) + mean(p * log_softmax(logits)) + 0.1 * mean(max(logits, axis = 1))
train {
    data x = randn(8, 6)
    data t = csv("t.csv")
    batch = 8
    optimizer = sgd(lr = 0.1, momentum = 0.9)
    minimize loss
}
NN
printf '0\n1\n2\n3\n4\n0\n1\n2\n' >"$dir/t.csv"
caught=0
for n in $(seq 1 80); do
    if (cd "$dir" && NNC_EMU_FAULT_KERNEL=$n "$nnc" cls.nn --target cuda --check-against cpu) >"$dir/out" 2>&1; then
        if grep -q "planted" "$dir/out"; then
            fail=$((fail+1)); echo "FAIL: kernel $n's planted fault passed:"; cat "$dir/out"
        fi
        break
    fi
    named="first differ at [a-z_]* ([a-z]*, cls.nn:[0-9]*:[0-9]*, launch [0-9]* of train_step) in step 1: element"
    if grep -q "$named" "$dir/out"; then
        caught=$((caught+1))
    else
        fail=$((fail+1)); echo "FAIL: kernel $n:"; cat "$dir/out"
    fi
done
if [ "$caught" -ge 30 ]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $caught faults caught (want 30+)"; fi
bad "$nnc" "$models/linreg.nn" --target cpu --check-against cpu
has "add --target cuda"

bad "$nnc" "$here/../e2e/nan.nn" --target cuda --quiet --check-numerics
has "NaN at element 0 of log (forward, .*nan.nn:4:[0-9]*, launch [0-9]* of train_step) at step 1"

cat >"$dir/host.nn" <<'NN'
input x: f32[B, 4]
param W: f32[4, 2] = normal(0, 1)
h = to(x @ W, cpu)
loss = mean(h * h)
train {
    data x = randn(8, 4)
    batch = 8
    minimize loss
}
NN
# a round trip through the host, as x.to("cpu").to("cuda") in PyTorch: two copies, same numbers
ok "$nnc" "$dir/host.nn" --target cuda --epochs 3 --check-against cpu
has "check-against cpu: 3 steps"
ok "$nnc" "$dir/host.nn" --target cuda --emit ir
has "copy .*f32\[B,2\].*cpu"

bad "$nnc" "$models/linreg.nn" --target cuda --strict-devices --epochs 1
has "error: 'X' is on cpu but this matmul runs on cuda; move it explicitly with to(X, cuda)"
ok "$nnc" "$here/explicit.nn" --target cuda --strict-devices --epochs 1
ok "$nnc" "$models/mlp.nn" --target cuda --stats
has "host<->device copies"

# an embedding index outside the table is refused as the data loads, on either target (the
# device's own check, which a program feeding the library meets, is tests/cuda/index_check.c)
golden=$here/../golden/data
(cd "$golden" && bad "$nnc" embedding_index.nn --target cuda)
has "embedding_index.csv: input 't': sample 2, element 1: index 7 is outside 0..4"
# a convolutional model (batch norm, dropout, pooling) checked value by value against the CPU
cat >"$dir/conv.nn" <<'NN'
input x: f32[B, 2, 6, 6]
input t: f32[B, 3]
param w: f32[3, 2, 3, 3] = normal(0, 0.5)
param g: f32[3] = ones()
buffer rm: f32[3] = zeros()
buffer rv: f32[3] = ones()
h = max_pool2d(relu(batch_norm(conv2d(x, w, padding = 1), rm, rv, g)), 2)
loss = mse_loss(dropout(mean(h, axis = (2, 3)), 0.2), t)
train {
    data x = randn(8, 2, 6, 6)
    data t = randn(8, 3)
    batch = 4
    minimize loss
}
NN
ok "$nnc" "$dir/conv.nn" --target cuda --epochs 2 --check-against cpu
has "check-against cpu: 4 steps"
# fused attention (driver/check_bound.c's bound of its kernels): a planted fault in its forward
# kernel and in each of its gradients' (unfused: kernels 1, then 12 to 14) is named
cat >"$dir/att.nn" <<'NN'
input x: f32[B, 2, 9, 4]
param wq: f32[4, 8] = normal(0, 1)
param wk: f32[4, 8] = normal(0, 1)
param wv: f32[4, 8] = normal(0, 1)
param t: f32[2, 9, 8] = normal(0, 1)
y = scaled_dot_product_attention(x @ wq, x @ wk, x @ wv, is_causal = true)
loss = mean(y * t)
train {
    data x = randn(8, 2, 9, 4)
    batch = 8
    minimize loss
}
NN
ok "$nnc" "$dir/att.nn" --target cuda --check-against cpu
for fault in "1 attention (forward" "12 attention_grad_q (backward" "13 attention_grad_k (backward" \
             "14 attention_grad_v (backward"; do
    NNC_EMU_FAULT_KERNEL=${fault%% *}:1e-3 bad "$nnc" "$dir/att.nn" --target cuda --check-against cpu
    has "first differ at ${fault#* }, .*att.nn:6:5, launch [0-9]* of train_step) in step 1"
done

# --verbose says how each product's bias (and ReLU) ran: in cuBLASLt's epilogue, or by a kernel
# after the product where cuBLASLt finds no algorithm or is turned off
cat >"$dir/epi.nn" <<'NN'
input x: f32[B, 6]
param w: f32[6, 5] = normal(0, 1)
param b: f32[5] = zeros()
loss = mean(relu(x @ w + b))
train {
    data x = randn(8, 6)
    batch = 8
    minimize loss
}
NN
ok "$nnc" "$dir/epi.nn" --target cuda --bench 2 --verbose
has "relu (forward, .*epi.nn:4:13, launch [0-9]* of train_step): 8 x 5 x 6 product, its bias and ReLU in cuBLASLt's epilogue"
NNC_EMU_LT_NONE=1 ok "$nnc" "$dir/epi.nn" --target cuda --bench 2 --verbose
has "its bias and ReLU by a kernel after it (cuBLASLt has no algorithm for these operands)"
NNC_NO_CUBLASLT=1 ok "$nnc" "$dir/epi.nn" --target cuda --bench 2 --verbose
has "its bias and ReLU by a kernel after it (NNC_NO_CUBLASLT=1)"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
