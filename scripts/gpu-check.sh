#!/usr/bin/env bash
# gpu-check.sh - everything about the CUDA target that needs a GPU, in one command (< 8 min).
#
#   scripts/gpu-check.sh [FASHION_MNIST_DIR]
#
# 1. a Release build with -DNNC_CUDA=ON (needs cmake, a C compiler, flex, bison, zlib, OpenBLAS
#    and the CUDA toolkit headers; no internet);
# 2. ctest -L 'gpu|cuda': NVRTC compiles of every model, the op-by-op CPU-vs-CUDA comparison;
# 3. models/mlp.nn for 3 epochs on --target cuda and --target cpu from the same seed: test
#    accuracy of both (they start from identical parameters and see the same batches);
# 4. the training step: `nnc --bench 200` on cuda (and cpu) against PyTorch eager on the same
#    GPU (bench/torch_mlp_step.py, CUDA events, batch 64); models/convnet.nn's step with its
#    convolutions in cuDNN (the algorithms --verbose chose) and in im2col + cuBLAS;
# then a table.  Fashion-MNIST: FASHION_MNIST_DIR, else /usr/share/datasets/fashion-mnist; the
# steps that need it are skipped (and say so) when its four .gz files are missing.
set -uo pipefail   # not -e: every check runs and the table says which failed
cd "$(dirname "$0")/.."
T0=$(date +%s)
BUILD=${NNC_GPU_BUILD:-build-gpu}
DATA=${1:-/usr/share/datasets/fashion-mnist}
export XDG_CACHE_HOME="$PWD/$BUILD/cache"
declare -a ROWS=()
row() { ROWS+=("$(printf '%-44s %s' "$1" "$2")"); }
die() { echo "gpu-check: $*" >&2; exit 1; }

for tool in cmake bison flex; do
    command -v "$tool" >/dev/null || die "'$tool' is missing: nnc's parser is generated with flex and bison at build time (install them, or build elsewhere and copy $BUILD)"
done
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

echo "== 1/4 build (Release, NNC_CUDA=ON) =="
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DNNC_CUDA=ON | grep -i "nnc:" || die "cmake failed"
cmake --build "$BUILD" -j"$(nproc)" >"$BUILD.log" 2>&1 || { tail -30 "$BUILD.log"; die "build failed (log: $BUILD.log)"; }
"$BUILD/nnc" --version | grep -q cuda || die "this build has no cuda target (toolkit headers not found?)"
NNC="$(cd "$BUILD" && pwd)/nnc"

echo "== 2/4 ctest -L 'gpu|cuda' =="
if timeout 300 ctest --test-dir "$BUILD" -L 'gpu|cuda' -j"$(nproc)" --output-on-failure | tee "$BUILD/ctest-gpu.log"; then
    if grep -q "Skipped" "$BUILD/ctest-gpu.log"; then row "ctest -L 'gpu|cuda'" "passed, but gpu_vs_cpu SKIPPED (no device)"
    else row "ctest -L 'gpu|cuda'" "passed"; fi
else row "ctest -L 'gpu|cuda'" "FAILED (see above)"; fi

MODEL=models/mlp.nn
if [ -f "$DATA/train-images-idx3-ubyte.gz" ] && [ -f "$DATA/t10k-labels-idx1-ubyte.gz" ]; then
    MODEL="$BUILD/mlp_data.nn"
    sed "s|/usr/share/datasets/fashion-mnist|$DATA|g" models/mlp.nn > "$MODEL"
    HAVE_DATA=1
else
    HAVE_DATA=0
    echo "gpu-check: no Fashion-MNIST in $DATA: accuracy and step timings are skipped (pass its folder)"
fi

last_accuracy() { python3 -c 'import json,sys; e=[json.loads(l) for l in open(sys.argv[1]) if "\"epoch\"" in l and "\"type\":\"epoch\"" in l]; print(e[-1].get("accuracy","?") if e else "?")' "$1"; }
json_field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1]).get(sys.argv[1], "?"))' "$1"; }

if [ "$HAVE_DATA" = 1 ]; then
    echo "== 3/4 mlp.nn, 3 epochs, seed 42, cuda and cpu =="
    for t in cuda cpu; do
        s=$(date +%s.%N)
        if timeout 150 "$NNC" "$MODEL" --target "$t" --epochs 3 --seed 42 --quiet --metrics "$BUILD/mlp_$t.jsonl"; then
            row "mlp 3 epochs --target $t: test accuracy" "$(last_accuracy "$BUILD/mlp_$t.jsonl")  ($(python3 -c "import time;print(round(time.time()-$s,1))") s)"
        else row "mlp 3 epochs --target $t" "FAILED"; fi
    done
    echo "== 4/4 training step: nnc --bench 200 vs PyTorch eager =="
    for t in cuda cpu; do
        out=$(timeout 120 "$NNC" "$MODEL" --target "$t" --bench 200 2>&1) && row "nnc --target $t step, batch 64 (median)" "$(echo "$out" | json_field median_us) us" \
            || row "nnc --target $t --bench 200" "FAILED: $(echo "$out" | tail -1)"
    done
    echo "== convolutions: models/convnet.nn's step through cuDNN, and through im2col + cuBLAS (NNC_CUDNN=0) =="
    CONV="$BUILD/convnet_data.nn"
    sed "s|/usr/share/datasets/fashion-mnist|$DATA|g" models/convnet.nn > "$CONV"
    timeout 120 "$NNC" "$CONV" --target cuda --bench 1 --verbose 2>&1 | grep "nnc: \(cuda\|note\)"   # the algorithms
    for c in 1 0; do
        out=$(NNC_CUDNN=$c timeout 120 "$NNC" "$CONV" --target cuda --bench 100 2>&1) \
            && row "convnet step batch 64, NNC_CUDNN=$c (median)" "$(echo "$out" | json_field median_us) us" \
            || row "convnet --bench 100 NNC_CUDNN=$c" "FAILED: $(echo "$out" | tail -2 | tr '\n' ' ')"
    done
    echo "== data parallel: NCCL with one process, the step with and without its allreduce nodes =="
    for dp in "" --data-parallel; do
        out=$(timeout 120 "$NNC" models/mlp_large.nn --target cuda --batch 1024 --bench 100 $dp 2>&1) \
            && row "mlp_large batch 1024 step ${dp:-(plain)} (median)" "$(echo "$out" | json_field median_us) us" \
            || row "mlp_large --bench 100 $dp" "FAILED: $(echo "$out" | tail -2 | tr '\n' ' ')"
    done
else
    echo "== 3/4, 4/4: nnc steps skipped (no data) =="
fi
echo "== model parallel: tests/cuda/split.nn (cuda and cuda(1); one GPU serves both when there is one) =="
out=$(timeout 300 python3 tests/cuda/emu_train.py "$NNC" tests/cuda/split.nn --strict-devices 2>&1) \
    && row "split.nn over cuda, cuda(1) vs cpu" "$(echo "$out" | tail -1)" \
    || row "split.nn over cuda, cuda(1)" "FAILED: $(echo "$out" | tail -3 | tr '\n' ' ')"
out=$(timeout 180 python3 bench/torch_mlp_step.py --steps 200 --batch 64 2>&1) && row "PyTorch eager cuda step, batch 64 (median)" "$(echo "$out" | json_field median_us) us" \
    || row "PyTorch eager (bench/torch_mlp_step.py)" "FAILED: $(echo "$out" | tail -1)"

echo
echo "== gpu-check summary ($(( $(date +%s) - T0 )) s) =="
printf '%s\n' "${ROWS[@]}"
