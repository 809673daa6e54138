#!/usr/bin/env bash
# cudnn_test.sh NNC - convolutions through cuDNN on the CUDA target, run on the emulator, whose
# libcudnn.so.9 (tests/cuda/emu/cudnn.c) records each convolution it runs (NNC_EMU_CUDNN_TRACE):
#   - models/convnet.nn and convnet_bn.nn (their layers, 16 random samples) train with every
#     launch checked against the CPU (--check-against cpu); with NNC_CUDNN=forward,data,filter the
#     forward convolutions, the input gradient and the weight gradients all ran in cuDNN, with
#     deterministic GEMM-like algorithms and FP32 math; under precision = bf16 the same with TF32
#     tensor-core math (exact on the half operands); by default the weight gradient is
#     im2col + cuBLAS and the rest cuDNN;
#   - a convolution on each of two GPUs (a handle each);
#   - the fallback to im2col + cuBLAS, which still matches the CPU: NNC_CUDNN=0, a library that
#     does not load, a cudnnCreate that fails, heuristics that fail for one kind of launch only,
#     --f64; a call that fails at run time, and a bad NNC_CUDNN, are errors.
set -u
nnc=$1; here=$(cd "$(dirname "$0")" && pwd); models=$here/../../models
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
pass=0; fail=0
ok()  { if "$@" >"$dir/out" 2>&1; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL (status): $*"; cat "$dir/out"; fi; }
bad() { if "$@" >"$dir/out" 2>&1; then fail=$((fail+1)); echo "FAIL (succeeded): $*"; cat "$dir/out"; else pass=$((pass+1)); fi; }
has() { if grep -q -- "$1" "${2:-$dir/out}"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: no '$1' in:"; cat "${2:-$dir/out}"; fi; }
hasnt() { if grep -q -- "$1" "${2:-$dir/out}"; then fail=$((fail+1)); echo "FAIL: '$1' in:"; cat "${2:-$dir/out}"; else pass=$((pass+1)); fi; }
trace=$dir/trace
export NNC_EMU_CUDNN_TRACE=$trace
# what ran in cuDNN: one line per kind of call (function, algorithm, math)
calls() { if [ -f "$trace" ]; then cut -d' ' -f1-3 "$trace" | sort -u; fi; }
fresh() { rm -f "$trace"; }

# the models' layers, trained on 16 random samples in batches of 8
seq 0 15 | awk '{print $1 % 10}' >"$dir/labels.csv"
for m in convnet convnet_bn; do
    sed '/^train {/,$d' "$models/$m.nn" >"$dir/$m.nn"
    cat >>"$dir/$m.nn" <<'NN'
train {
    data x = randn(16, 784)
    data y = csv("labels.csv")
    batch = 8
    optimizer = adam(lr = 0.001)
    minimize loss
}
NN
done
for m in convnet convnet_bn; do
    fresh
    NNC_CUDNN=forward,data,filter ok "$nnc" "$dir/$m.nn" --target cuda --epochs 1 --check-against cpu --verbose
    has "check-against cpu: 2 steps"
    has "nnc: cuda: convolutions by cuDNN"
    has "conv2d_grad_input (backward, .*$m.nn:[0-9:]*, launch [0-9]* of train_step): cuDNN ALGO_1, FP32 (FMA) math"
    calls >"$dir/calls"
    has "cudnnConvolutionForward algo=IMPLICIT_PRECOMP_GEMM math=fma" "$dir/calls"
    has "cudnnConvolutionBackwardData algo=ALGO_1 math=fma" "$dir/calls"
    has "cudnnConvolutionBackwardFilter algo=ALGO_1 math=fma" "$dir/calls"
    # the heuristics rank these first; they are non-deterministic or not a direct sum
    hasnt "ALGO_0\|ALGO_3\|WINOGRAD\|FFT\|math=tf32" "$dir/calls"
done
# the default: the weight gradient by im2col + cuBLAS, the rest by cuDNN
fresh
ok "$nnc" "$dir/convnet.nn" --target cuda --epochs 1 --check-against cpu --verbose
has "check-against cpu: 2 steps"
has "conv2d_grad_weight (backward, .*convnet.nn:[0-9:]*, launch [0-9]* of train_step): im2col + cuBLAS, faster than cuDNN's deterministic weight gradient"
hasnt "cuDNN refused"
calls >"$dir/calls"
has "cudnnConvolutionForward algo=IMPLICIT_PRECOMP_GEMM math=fma" "$dir/calls"
has "cudnnConvolutionBackwardData algo=ALGO_1 math=fma" "$dir/calls"
hasnt "cudnnConvolutionBackwardFilter" "$dir/calls"
fresh
NNC_CUDNN=forward,data,filter ok "$nnc" "$dir/convnet.nn" --target cuda --epochs 1 --check-against cpu --precision bf16
has "check-against cpu: 2 steps"
calls >"$dir/calls"
has "cudnnConvolutionForward algo=IMPLICIT_PRECOMP_GEMM math=tf32" "$dir/calls"
has "cudnnConvolutionBackwardFilter algo=ALGO_1 math=tf32" "$dir/calls"
hasnt "math=fma" "$dir/calls"

# a small model for the rest
cat >"$dir/conv.nn" <<'NN'
input x: f32[B, 2, 6, 6]
input t: f32[B, 3]
param w: f32[3, 2, 3, 3] = normal(0, 0.5)
param v: f32[3, 3, 3, 3] = normal(0, 0.5)
h = max_pool2d(relu(conv2d(x, w, padding = 1)), 2)
loss = mse_loss(mean(conv2d(h, v, padding = 1), axis = (2, 3)), t)
train {
    data x = randn(8, 2, 6, 6)
    data t = randn(8, 3)
    batch = 4
    minimize loss
}
NN
cat >"$dir/split.nn" <<'NN'
block Conv(c_in, c_out) {
    param weight: f32[c_out, c_in, 3, 3] = normal(0, 0.5)
    forward(x) = conv2d(x, weight, padding = 1)
}
input x: f32[B, 2, 6, 6]
input t: f32[B, 3]
a = Conv(2, 4)
b = Conv(4, 3).to(cuda(1))
loss = mse_loss(mean(b(to(relu(a(x)), cuda(1))), axis = (2, 3)), to(t, cuda(1)))
train {
    data x = randn(8, 2, 6, 6)
    data t = randn(8, 3)
    batch = 4
    minimize loss
}
NN
fresh
NNC_EMU_DEVICES=2 ok "$nnc" "$dir/split.nn" --target cuda --epochs 2 --check-against cpu
has "check-against cpu: 4 steps"
has "cudnnConvolutionBackwardData" "$trace"

# the fallbacks: im2col + cuBLAS, the same numbers as the CPU's
fresh
NNC_CUDNN=0 ok "$nnc" "$dir/conv.nn" --target cuda --epochs 2 --check-against cpu --verbose
has "check-against cpu: 4 steps"
has "nnc: cuda: convolutions by im2col + cuBLAS: NNC_CUDNN=0"
[ -s "$trace" ] && { fail=$((fail+1)); echo "FAIL: NNC_CUDNN=0 ran cuDNN:"; cat "$trace"; } || pass=$((pass+1))
fresh
NNC_CUDNN=$dir/nowhere/libcudnn.so.9 ok "$nnc" "$dir/conv.nn" --target cuda --epochs 2 --check-against cpu --verbose
has "check-against cpu: 4 steps"
has "im2col + cuBLAS: NNC_CUDNN=.*nowhere/libcudnn.so.9 does not load"
[ -s "$trace" ] && { fail=$((fail+1)); echo "FAIL: a missing libcudnn ran:"; cat "$trace"; } || pass=$((pass+1))
fresh
NNC_CUDNN=forward,data,filter NNC_EMU_CUDNN_FAIL=cudnnCreate ok "$nnc" "$dir/conv.nn" --target cuda --epochs 2 --check-against cpu
has "check-against cpu: 4 steps"
has "nnc: note: cuDNN refused 12 of the 12 convolution launches, which run as im2col + cuBLAS instead; the first: conv2d (forward, .*conv.nn:5:.*no cuDNN handle"
[ -s "$trace" ] && { fail=$((fail+1)); echo "FAIL: cuDNN ran without a handle:"; cat "$trace"; } || pass=$((pass+1))
fresh
NNC_CUDNN=forward,data,filter NNC_EMU_CUDNN_FAIL=cudnnGetConvolutionBackwardFilterAlgorithm_v7 ok "$nnc" "$dir/conv.nn" --target cuda --epochs 2 \
    --check-against cpu --verbose
has "check-against cpu: 4 steps"
has "conv2d_grad_weight (backward, .*conv.nn:[0-9:]*, launch [0-9]* of train_step): im2col + cuBLAS, cuDNN refused it"
calls >"$dir/calls"
has "cudnnConvolutionForward" "$dir/calls"
has "cudnnConvolutionBackwardData" "$dir/calls"
hasnt "cudnnConvolutionBackwardFilter" "$dir/calls"
fresh
ok "$nnc" "$dir/conv.nn" --target cuda --epochs 1 --f64 --verbose
has "convolutions by im2col + cuBLAS: --f64"
[ -s "$trace" ] && { fail=$((fail+1)); echo "FAIL: --f64 ran cuDNN:"; cat "$trace"; } || pass=$((pass+1))
# an error of a call at run time is an error of the step, naming the op
NNC_EMU_CUDNN_FAIL=cudnnConvolutionBackwardData bad "$nnc" "$dir/conv.nn" --target cuda --epochs 1
has "error: .*conv2d_grad_input (backward, .*conv.nn:6:[0-9]*, launch [0-9]* of train_step): cuDNN error 3000 (CUDNN_STATUS_NOT_SUPPORTED) in cudnnConvolutionBackwardData (ALGO_1) at batch 4"
NNC_CUDNN=yes bad "$nnc" "$dir/conv.nn" --target cuda --epochs 1
has "NNC_CUDNN=yes: expected 0 (convolutions by im2col + cuBLAS), 1 (by cuDNN where it is found, the default: forward,data), the kinds cuDNN runs (a list of forward, data, filter) or the path"
NNC_CUDNN=forward,filters bad "$nnc" "$dir/conv.nn" --target cuda --epochs 1
has "NNC_CUDNN=forward,filters: expected 0"
# the kinds cuDNN runs, the rest by im2col + cuBLAS: the same numbers as the CPU's
fresh
NNC_CUDNN=forward,data ok "$nnc" "$dir/conv.nn" --target cuda --epochs 2 --check-against cpu --verbose
has "check-against cpu: 4 steps"
has "conv2d_grad_weight (backward, .*conv.nn:[0-9:]*, launch [0-9]* of train_step): im2col + cuBLAS (NNC_CUDNN=forward,data)"
hasnt "cuDNN refused"
calls >"$dir/calls"
has "cudnnConvolutionForward" "$dir/calls"
has "cudnnConvolutionBackwardData" "$dir/calls"
hasnt "cudnnConvolutionBackwardFilter" "$dir/calls"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
