#!/usr/bin/env bash
# scripts/gpu-run.sh - nnc on a GPU machine that has no flex/bison/OpenBLAS, maybe no make, zlib
# headers or cuBLAS headers, and no network: correctness first, then the benchmark against PyTorch.
#   on the CPU machine first: bash ../shared/gpu/prepare.sh (fills tmp/gpucarry, which travels
#   with the working tree as an ignored path: the device tool's `carry`), then on the GPU machine,
#   from the project root: bash scripts/gpu-run.sh
#   (NNC_DEADLINE seconds in all, default 500; every step gets a timeout inside what is left;
#   NNC_RUN=convnet: a second, shorter call; NNC_RUN=attn, about 300 s: the kernels changed since
#   the last GPU run against torch and the CPU, GPT-2 small's step against a baseline nnc built
#   from tmp/gpucarry/base.tgz (scripts/gpu-base.sh COMMIT) and with the attention's variants
#   (NNC_ATTN_MINB, NNC_ATTN_SPLIT, NNC_ATTN_TILE, NNC_ATTN_MMA), its profile, against
#   torch.compile, the products' cuBLASLt epilogues against NNC_NO_CUBLASLT=1 (mlp.nn,
#   mlp_1024), and compute-sanitizer on the tensor-core attention; NNC_TORCH=0 leaves
#   torch.compile out, NNC_REPS sets the rounds of baseline and tree, NNC_CE=1 profiles
#   cross_entropy's NNC_CE_LOADS variants, NNC_NCU=1 runs ncu on one launch each of the
#   attention kernels and cross_entropy's; NNC_RUN=update, about 200 s: the optimizer's grouped
#   kernels against the CPU and the baseline's bytes, GPT-2 small's step and its update's rows
#   against the baseline, memcheck)
# Carried in tmp/gpucarry (tmp/ is ignored by .gitignore):
#   debs/*.deb        flex bison m4 libopenblas0-pthread libgfortran5 libquadmath0 zlib1g-dev (Debian 12)
#   cuda-include.tgz  the 24 CUDA 13.0 headers nnc compiles against (used only if the image lacks them)
#   fmnist/*.gz       Fashion-MNIST (accuracy; copied to /usr/share/datasets/fashion-mnist when root)
#   bin/              optional: nnc, gpu_vs_cpu, nvrtc_compile built on the CPU machine against
#                     /tmp/nncprefix (used if the build here fails, or with NNC_PREBUILT=1)
# Everything is unpacked under /tmp/nncprefix, never into /.  Logs go to $OUT, and all of them
# into $OUT/logs.tgz at the end.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
C=$PWD/tmp/gpucarry
P=/tmp/nncprefix
OUT=${OUT:-/tmp/nnc-out}
DEADLINE=${NNC_DEADLINE:-500}
mkdir -p "$OUT/logs" "$P"
L=$OUT/logs
exec > >(tee "$L/run.log") 2>&1
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(date +%s) + T0 )); }
step() { echo; echo "== $* ($(el) s)"; }
finish() { step "done"; tar -C "$OUT" -czf "$OUT/logs.tgz" logs 2>/dev/null; ls -la "$OUT"; exit "${1:-0}"; }

step "machine"
uname -srm; grep PRETTY /etc/os-release; nproc
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader || echo "no nvidia-smi"
for t in cc gcc make ninja cmake dpkg python3 nvcc compute-sanitizer ncu; do
    printf '  %-18s %s\n' "$t" "$($t --version >/dev/null 2>&1 && command -v $t || echo MISSING)"; done

step "unpack the carried packages into $P"
for f in "$C"/debs/*.deb; do
    if command -v dpkg >/dev/null; then dpkg -x "$f" "$P" || exit 1
    else (d=$(mktemp -d) && cd "$d" && ar x "$f" && tar -xf data.tar.* -C "$P") || exit 1; fi
done
export PATH=$P/usr/bin:$PATH M4=$P/usr/bin/m4 BISON_PKGDATADIR=$P/usr/share/bison
LDP=$P/usr/lib/x86_64-linux-gnu/openblas-pthread:$P/usr/lib/x86_64-linux-gnu
cc --version >/dev/null 2>&1 || export CC=gcc   # the CPU target compiles generated C with $CC or cc
if [ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && mkdir -p /usr/share/datasets/fashion-mnist 2>/dev/null; then
    cp "$C"/fmnist/*.gz /usr/share/datasets/fashion-mnist/ && echo "  Fashion-MNIST copied to /usr/share/datasets/fashion-mnist"
fi

step "CUDA libraries (nnc dlopens libcuda.so.1, libnvrtc.so.13|12, libcublas.so.13|12, libcudnn.so.9)"
# NVRTC dlopens libnvrtc-builtins by soname, so its directory must be on the loader path even
# when nnc finds libnvrtc itself in /usr/local/cuda/lib64: put every directory holding them there.
SP=$(python3 -c 'import nvidia, os; print(*[os.path.join(p, s, "lib") for p in nvidia.__path__ for s in ("cu13", "cudnn")])' 2>/dev/null)
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib $SP; do
    for l in libnvrtc.so.13 libcublas.so.13 libcudnn.so.9; do
        if [ -e "$d/$l" ]; then echo "  $d/$l"; case ":$LDP:" in *":$d:"*) ;; *) LDP=$LDP:$d ;; esac; fi
    done
done
export LD_LIBRARY_PATH=$LDP${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

BUILT=0
if [ -z "${NNC_PREBUILT:-}" ]; then
    step "configure and build nnc, gpu_vs_cpu, run_model"
    G=""; ninja --version >/dev/null 2>&1 && G="-G Ninja"
    INC=""
    for h in nvrtc.h cuda.h cublas_v2.h; do [ -e /usr/local/cuda/include/$h ] || INC=carried; done
    if [ -n "$INC" ]; then
        mkdir -p /tmp/nnc-cudainc && tar -xzf "$C/cuda-include.tgz" -C /tmp/nnc-cudainc || exit 1
        INC=-DCUDAToolkit_ROOT=/tmp/nnc-cudainc; echo "  using the carried CUDA headers"
    fi
    rm -rf build-gpu   # a fresh machine has none; a stale one may hold another generator
    if cmake -S . -B build-gpu $G -DCMAKE_BUILD_TYPE=Release -DNNC_CUDA=ON $INC \
           -DNNC_OPENBLAS=$P/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 \
           -DZLIB_INCLUDE_DIR=$P/usr/include -DZLIB_LIBRARY=$P/usr/lib/x86_64-linux-gnu/libz.a \
           >"$L/cmake.log" 2>&1 && grep "nnc:" "$L/cmake.log" &&
       timeout 150 cmake --build build-gpu -j"$(nproc)" --target nnc gpu_vs_cpu run_model >"$L/build.log" 2>&1; then BUILT=1
    else tail -30 "$L/cmake.log" "$L/build.log" 2>/dev/null; echo "BUILD FAILED: falling back to $C/bin"; fi
fi
if [ $BUILT = 0 ]; then
    [ -x "$C/bin/nnc" ] || { echo "no carried binaries either"; finish 1; }
    mkdir -p build-gpu && cp "$C"/bin/* build-gpu/
fi
build-gpu/nnc --version
export XDG_CACHE_HOME=$PWD/build-gpu/cache
NNC=$PWD/build-gpu/nnc
BASE=""
if { [ "${NNC_RUN:-full}" = attn ] || [ "${NNC_RUN:-full}" = update ]; } && [ -e "$C/base.tgz" ] && [ $BUILT = 1 ]; then
    step "the baseline: $(tar -xOzf "$C/base.tgz" BASE 2>/dev/null) built beside it"
    rm -rf /tmp/nnc-base && mkdir -p /tmp/nnc-base && tar -xzf "$C/base.tgz" -C /tmp/nnc-base &&
    cmake -S /tmp/nnc-base -B /tmp/nnc-base/build $G -DCMAKE_BUILD_TYPE=Release -DNNC_CUDA=ON $INC \
        -DNNC_OPENBLAS=$P/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 \
        -DZLIB_INCLUDE_DIR=$P/usr/include -DZLIB_LIBRARY=$P/usr/lib/x86_64-linux-gnu/libz.a >"$L/cmake_base.log" 2>&1 &&
    timeout 120 cmake --build /tmp/nnc-base/build -j"$(nproc)" --target nnc >"$L/build_base.log" 2>&1 &&
        BASE=/tmp/nnc-base/build/nnc || tail -5 "$L/build_base.log"
fi

if [ "${NNC_RUN:-full}" = attn ]; then   # the kernels changed since the last GPU run: correct, then how fast
    step "attention and cross-entropy against torch on the GPU, the GPU against the CPU"
    R=$PWD/build-gpu/tests/numeric/run_model
    ( for k in half dropout; do
          timeout 100 python3 tests/ref/test_attention_torch.py --run-model $R --nnc $NNC --cuda -k $k \
              >"$L/attention_torch_$k.log" 2>&1; echo "attention_torch -k $k rc=$?"
      done
      timeout 100 python3 tests/ref/test_ce_torch.py --run-model $R --cuda >"$L/ce_torch.log" 2>&1; echo "ce_torch rc=$?" ) &
    P1=$!
    ( timeout 100 python3 tests/cuda/emu_train.py $NNC tests/cuda/half/attention_bf16.nn 2>&1 | tail -2
      timeout 100 python3 tests/cuda/emu_train.py $NNC tests/cuda/half/cols_bf16.nn 2>&1 | tail -1
      OPS="sdpa reduce_cols warp_rows ce_wide rowwise reduce_large layer_norm attention"
      timeout 110 build-gpu/gpu_vs_cpu $(for o in $OPS; do echo tests/cuda/ops/$o.nn; done) >"$L/gpu_vs_cpu.log" 2>&1
      echo "gpu_vs_cpu ($OPS) rc=$?"; grep -E "FAIL|failed|compared" "$L/gpu_vs_cpu.log" | tail -3 ) >"$L/train_vs_cpu.log" 2>&1 &
    P2=$!
    ( for m in tests/cuda/many_params.nn tests/cuda/clip.nn; do   # the optimizer's grouped kernels
          timeout 60 python3 tests/cuda/emu_train.py $NNC $m 2>&1 | tail -1
      done >"$L/update_vs_cpu.log" 2>&1 ) &
    P3=$!
    wait $P1 $P2 $P3
    cat "$L/train_vs_cpu.log" "$L/update_vs_cpu.log"; grep -h "FAIL\|passed" "$L"/attention_torch_*.log "$L/ce_torch.log"
    python3 bench/gpu_vs_torch.py --cases gpt2_bf16 --keep /tmp/nnc-gptcases --dry-run >/dev/null 2>&1
    if [ -e /tmp/nnc-gptcases/gpt2_bf16.nn ]; then
        step "GPT-2 small bf16's step, --bench 10: the baseline, this tree, and its attention's variants ($(left) s left)"
        bench() { (cd /tmp/nnc-gptcases && env "$@" gpt2_bf16.nn --target cuda --precision bf16 --bench 10 2>&1 | tail -1); }
        for r in $(seq "${NNC_REPS:-2}"); do
            [ -n "$BASE" ] && printf '  %-44s %s\n' "baseline $(tar -xOzf "$C/base.tgz" BASE)" "$(bench timeout 60 $BASE)"
            printf '  %-44s %s\n' "this tree" "$(bench timeout 60 $NNC)"
        done
        for v in NNC_ATTN_MINB=3 NNC_ATTN_SPLIT=1 NNC_ATTN_TILE=32 NNC_ATTN_MMA=0; do
            [ "$(left)" -gt 120 ] && printf '  %-44s %s\n' "$v" "$(bench $v timeout 60 $NNC)"
        done
        (cd /tmp/nnc-gptcases && timeout 60 $NNC gpt2_bf16.nn --target cuda --precision bf16 --profile 10 >"$L/profile_gpt2.txt" 2>&1)
        grep "step:" "$L/profile_gpt2.txt"
        if [ "${NNC_CE:-0}" = 1 ] && [ "$(left)" -gt 100 ]; then   # cross_entropy's loads in flight (NNC_CE_LOADS)
            step "cross_entropy's kernel with NNC_CE_LOADS=1 and 4 against the tree's 2 (GPT-2's profile) ($(left) s left)"
            grep -m1 "cross_entropy" "$L/profile_gpt2.txt" | cut -c1-120 | sed "s/^/  2: /"
            for l in 1 4; do
                (cd /tmp/nnc-gptcases && NNC_CE_LOADS=$l timeout 50 $NNC gpt2_bf16.nn --target cuda --precision bf16 --profile 5 2>&1 |
                    grep -m1 "cross_entropy" | cut -c1-120 | sed "s/^/  $l: /")
            done
        fi
        if [ "${NNC_NCU:-0}" = 1 ] && command -v ncu >/dev/null && [ "$(left)" -gt 70 ]; then
            step "ncu on one launch each of the attention kernels and cross_entropy's ($(left) s left)"
            (cd /tmp/nnc-gptcases && $NNC gpt2_bf16.nn --target cuda --precision bf16 --emit cuda >gpt2.cu 2>/dev/null)
            ks=$(grep -E "^/\* train_step launch [0-9]+: (attention \(|row-wise \(cross_entropy)" /tmp/nnc-gptcases/gpt2.cu |
                 sed -E 's/.*launch ([0-9]+):.*/\1/' | sort -un | head -3 | paste -sd'|')
            echo "  kernels: gpt2_bf16_train_step_($ks)"
            (cd /tmp/nnc-gptcases && NNC_CUDA_NO_GRAPHS=1 timeout $(( $(left) - 15 )) ncu --kernel-name "regex:gpt2_bf16_train_step_($ks)\$" \
                --launch-count 3 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
                --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
                $NNC gpt2_bf16.nn --target cuda --precision bf16 --bench 1 >"$L/ncu.txt" 2>&1)
            echo "  ncu rc=$?"
            grep -E "gpt2_bf16_train_step_|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|No Eligible|Compute \(SM\) Throughput|Memory Throughput|Executed Ipc A|L1/TEX Hit|L2 Hit|ERR" "$L/ncu.txt" | head -48
        fi
    fi
    if [ "${NNC_TORCH:-1}" != 0 ]; then   # NNC_TORCH=0: no torch.compile (a shorter call, ~50 s less)
        step "GPT-2 small bf16 against torch.compile ($(left) s left)"
        D1=$(( $(left) - 30 )); [ $D1 -gt 150 ] && D1=150
        PYTHONUNBUFFERED=1 timeout $(( D1 + 10 )) python3 bench/gpu_vs_torch.py --nnc $NNC --deadline $D1 --cases gpt2_bf16 \
            --torch-modes compile --json "$L/gpu_vs_torch_gpt.json" --keep /tmp/nnc-gptcases \
            >"$L/gpu_vs_torch_gpt.md" 2>"$L/gpu_vs_torch_gpt.err"
        grep -v "^\s*$" "$L/gpu_vs_torch_gpt.md" | sed -n '/^## nnc against/,/^### nnc --profile/p' | head -8
        tail -2 "$L/gpu_vs_torch_gpt.err"
    fi
    if [ "$(left)" -gt 70 ]; then   # passes/fuse.c's GEMM epilogues: where they ran, and what they save
        step "a product's bias and ReLU in cuBLASLt's epilogue against a kernel after it (NNC_NO_CUBLASLT=1) ($(left) s left)"
        timeout 30 $NNC models/mlp.nn --target cuda --bench 2 --verbose 2>&1 | grep "product, its bias" | head -2
        for r in 1 2; do for v in 0 1; do
            printf '  NNC_NO_CUBLASLT=%s mlp.nn b64     %s\n' $v "$(NNC_NO_CUBLASLT=$v timeout 20 $NNC models/mlp.nn \
                --target cuda --bench 500 2>&1 | tail -1)"
            printf '  NNC_NO_CUBLASLT=%s mlp_1024 b256  %s\n' $v "$(NNC_NO_CUBLASLT=$v timeout 20 $NNC \
                tests/cuda/shapes/mlp_1024.nn --target cuda --bench 300 2>&1 | tail -1)"
        done; done
        timeout 30 build-gpu/gpu_vs_cpu tests/cuda/ops/epilogue.nn tests/cuda/ops/classifier.nn 2>&1 | tail -1
    fi
    if command -v compute-sanitizer >/dev/null && [ "$(left)" -gt 20 ]; then
        step "compute-sanitizer on sdpa_bf16.nn (tensor-core attention, cp.async double buffers) ($(left) s left)"
        for t in racecheck memcheck synccheck; do
            printf '  %-10s %s\n' $t "$(NNC_CUDA_NO_GRAPHS=1 timeout 40 compute-sanitizer --tool $t $NNC tests/cuda/half/sdpa_bf16.nn \
                --target cuda --epochs 1 2>&1 | grep -E "SUMMARY" | tail -1)"
        done
        [ "$(left)" -gt 20 ] && printf '  %-10s %s\n' "memcheck, many_params.nn (grouped kernels)" "$(timeout 30 compute-sanitizer \
            --tool memcheck $NNC tests/cuda/many_params.nn --target cuda --bench 1 --quiet 2>&1 | grep -E "SUMMARY" | tail -1)"
    fi
    nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
    finish 0
fi

if [ "${NNC_RUN:-full}" = update ]; then   # the optimizer's grouped kernels (passes/horizontal.c, render_cuda.c)
    step "many parameters, AdamW and clip_grad_norm: the GPU against the CPU, and the same bytes as the baseline"
    for m in tests/cuda/many_params.nn tests/cuda/clip.nn; do
        timeout 60 python3 tests/cuda/emu_train.py $NNC $m 2>&1 | tail -1
        for b in $NNC $NNC $BASE; do
            [ -n "$b" ] && timeout 60 $b $m --target cuda --quiet --save /tmp/nnc-upd.st && md5sum </tmp/nnc-upd.st
        done | uniq -c | sed "s|^|  $m: saved bytes (this tree twice, the baseline): |"
    done
    python3 bench/gpu_vs_torch.py --cases gpt2_bf16 --keep /tmp/nnc-gptcases --dry-run >/dev/null 2>&1
    step "GPT-2 small bf16: --bench 10 against the baseline, twice; the update's rows of --profile 10 ($(left) s left)"
    for r in 1 2; do for b in $BASE $NNC; do
        printf '  %-40s %s\n' "$b" "$(cd /tmp/nnc-gptcases && timeout 90 $b gpt2_bf16.nn --target cuda --precision bf16 --bench 10 2>&1 | tail -1)"
    done; done
    for b in $BASE $NNC; do
        (cd /tmp/nnc-gptcases && timeout 90 $b gpt2_bf16.nn --target cuda --precision bf16 --profile 10 >"$L/profile_upd.txt" 2>&1)
        head -1 "$L/profile_upd.txt"; grep "^step:" "$L/profile_upd.txt"
        awk '$5 == "update" { t += $1; n++ } END { printf "  the update phase: %d rows, %.1f us\n", n, t }' "$L/profile_upd.txt"
        cp "$L/profile_upd.txt" "$L/profile_upd_$(basename $(dirname $(dirname $b))).txt"
    done
    if command -v compute-sanitizer >/dev/null && [ "$(left)" -gt 40 ]; then
        step "compute-sanitizer memcheck on many_params.nn's step ($(left) s left)"
        timeout $(( $(left) - 10 )) compute-sanitizer --tool memcheck $NNC tests/cuda/many_params.nn --target cuda \
            --bench 1 --quiet 2>&1 | grep -E "SUMMARY" | tail -1
    fi
    finish 0
fi

if [ "${NNC_RUN:-full}" = convnet ]; then   # a second, shorter call: the convolutions' choices, the GPT's profile
    step "gpu_vs_cpu on every op model, cuDNN on and off, side by side"
    OPS=$(ls tests/cuda/ops/*.nn)
    ( timeout 150 build-gpu/gpu_vs_cpu $OPS >"$L/gpu_vs_cpu.log" 2>&1; echo "gpu_vs_cpu rc=$?" ) &
    P1=$!
    ( NNC_CUDNN=0 NNC_CUDA_NO_GRAPHS=1 timeout 150 build-gpu/gpu_vs_cpu $OPS >"$L/gpu_vs_cpu_im2col.log" 2>&1; echo "gpu_vs_cpu NNC_CUDNN=0, no graphs rc=$?" ) &
    P2=$!
    wait $P1 $P2
    build-gpu/gpu_vs_cpu --self-test | tail -1
    grep -E "^FAIL|FAIL$|failed|compared|from f64" "$L/gpu_vs_cpu.log" "$L/gpu_vs_cpu_im2col.log" | tail -12
    step "convnet.nn's step by which kinds cuDNN runs (NNC_CUDNN), --bench 200 each, twice"
    for r in 1 2; do for v in 1 0 forward,data forward data,filter forward,filter; do
        printf '  NNC_CUDNN=%-14s %s\n' "$v" "$(NNC_CUDNN=$v timeout 40 $NNC models/convnet.nn --target cuda --bench 200 2>&1 | tail -1)"
    done; done
    step "profiles: convnet with NNC_CUDNN=0 and 1 ($(left) s left)"
    for v in 0 1; do NNC_CUDNN=$v timeout 40 $NNC models/convnet.nn --target cuda --profile 20 >"$L/profile_convnet_$v.txt" 2>&1; done
    head -12 "$L/profile_convnet_0.txt"
    step "the benchmark: mlp, convnet, matmul_1000, gpt2_bf16 with its profile ($(left) s left)"
    D1=$(( $(left) - 15 ))
    PYTHONUNBUFFERED=1 timeout $(( D1 + 10 )) python3 bench/gpu_vs_torch.py --nnc $NNC --deadline $D1 \
        --cases mlp,convnet,matmul_1000,gpt2_bf16 --torch-modes eager,graph,graph_gpu --json "$L/gpu_vs_torch.json" \
        --profile gpt2_bf16,matmul_1000,mlp >"$L/gpu_vs_torch.md" 2>"$L/gpu_vs_torch.err"
    grep -v "^\s*$" "$L/gpu_vs_torch.md" | sed -n '/^## nnc against/,/^### nnc --profile/p' | head -16
    finish 0
fi

step "smoke: linreg on cuda (direct launches, then graphs) and cpu"
NNC_CUDA_NO_GRAPHS=1 timeout 60 $NNC models/linreg.nn --target cuda --epochs 3 --no-cache | tail -3
timeout 60 $NNC models/linreg.nn --target cuda --epochs 200 | tail -1
timeout 60 $NNC models/linreg.nn --target cpu --epochs 200 | tail -1

step "correctness, side by side: gpu_vs_cpu with and without graphs, whole runs against the CPU, conv against torch"
OPS=$(ls tests/cuda/ops/*.nn)
( NNC_CUDA_NO_GRAPHS=1 timeout 200 build-gpu/gpu_vs_cpu $OPS >"$L/gpu_vs_cpu_nographs.log" 2>&1; echo "gpu_vs_cpu no graphs rc=$?" ) &
P1=$!
( timeout 200 build-gpu/gpu_vs_cpu $OPS >"$L/gpu_vs_cpu.log" 2>&1; echo "gpu_vs_cpu graphs rc=$?" ) &
P2=$!
( for m in "models/mlp.nn --epochs 1" "tests/cuda/clip.nn" "tests/cuda/half/attention_bf16.nn" "tests/cuda/explicit.nn --strict-devices"; do
      timeout 100 python3 tests/cuda/emu_train.py $NNC $m 2>&1 | tail -2 | sed "s|^|  emu_train $m: |"
  done >"$L/train_vs_cpu.log" 2>&1 ) &
P3=$!
( timeout 150 python3 tests/ref/test_conv_torch.py --run-model build-gpu/tests/numeric/run_model --cuda >"$L/conv_torch.log" 2>&1; echo "conv_torch (cuDNN) rc=$?"
  # bf16 attention on tensor cores (mma.sync): forward, gradients and dropout's mask against torch
  for k in half dropout; do
      timeout 100 python3 tests/ref/test_attention_torch.py --run-model build-gpu/tests/numeric/run_model --nnc $NNC \
          --cuda -k $k >"$L/attention_torch_$k.log" 2>&1; echo "attention_torch -k $k (tensor cores for bf16) rc=$?"
  done ) &
P4=$!
wait $P1 $P2 $P3 $P4
grep -E "FAIL|failed|passed|rc=|compared" "$L/gpu_vs_cpu_nographs.log" | tail -8
grep -E "FAIL|failed|passed|rc=|compared|note" "$L/gpu_vs_cpu.log" | tail -8
cat "$L/train_vs_cpu.log"; tail -4 "$L/conv_torch.log"; grep -h "FAIL\|passed" "$L"/attention_torch_*.log

step "mlp.nn 3 epochs on cuda: test accuracy (the CPU reaches 80.62% from seed 42)"
timeout 60 $NNC models/mlp.nn --target cuda --epochs 3 --seed 42 2>&1 | tail -2

step "the benchmark against PyTorch: the MLPs, convnet, the 1000x1000 product ($(left) s left)"
D1=$(( $(left) - 200 )); [ $D1 -gt 240 ] && D1=240
PYTHONUNBUFFERED=1 timeout $(( D1 + 10 )) python3 bench/gpu_vs_torch.py --nnc $NNC --deadline $D1 \
    --torch-modes eager,graph,graph_gpu --json "$L/gpu_vs_torch.json" --profile mlp_4096,convnet,matmul_1000 \
    >"$L/gpu_vs_torch.md" 2>"$L/gpu_vs_torch.err"
grep -v "^\s*$" "$L/gpu_vs_torch.md" | sed -n '/^## nnc against/,/^### nnc --profile/p' | head -30

step "the GPTs against nanoGPT's model: eager and torch.compile ($(left) s left)"
D2=$(( $(left) - 40 )); [ $D2 -gt 200 ] && D2=200
PYTHONUNBUFFERED=1 timeout $(( D2 + 10 )) python3 bench/gpu_vs_torch.py --nnc $NNC --deadline $D2 --cases gpt,gpt2_bf16 \
    --torch-modes eager,compile --json "$L/gpu_vs_torch_gpt.json" --profile gpt2_bf16 --keep /tmp/nnc-gptcases \
    >"$L/gpu_vs_torch_gpt.md" 2>"$L/gpu_vs_torch_gpt.err"
grep -v "^\s*$" "$L/gpu_vs_torch_gpt.md" | sed -n '/^## nnc against/,/^### nnc --profile/p' | head -12
tail -3 "$L/gpu_vs_torch_gpt.err"
if [ "$(left)" -gt 40 ]; then   # cuBLAS's own rate on GPT-2's products (lm_head's ran at 95-151 TFLOP/s in nnc)
    step "GPT-2 small's products through torch.matmul ($(left) s left)"
    timeout 30 python3 bench/gemm_shapes.py >"$L/gemm_shapes.txt" 2>&1; cat "$L/gemm_shapes.txt"
fi
if [ "$(left)" -gt 120 ]; then   # the attention kernels on tensor cores against the CUDA-core ones (one more compile)
    step "GPT-2 small bf16: attention on CUDA cores (NNC_ATTN_MMA=0) against tensor cores ($(left) s left)"
    for v in 0 1; do   # gpu_vs_torch's GPT-2 model and its random tokens (--keep): the repository has no GPT-2 data
        printf '  NNC_ATTN_MMA=%s %s\n' "$v" "$(cd /tmp/nnc-gptcases && NNC_ATTN_MMA=$v timeout $(( $(left) / 2 - 10 )) \
            $NNC gpt2_bf16.nn --target cuda --precision bf16 --bench 10 2>&1 | tail -1)"
    done
fi

if command -v compute-sanitizer >/dev/null && [ "$(left)" -gt 45 ]; then
    step "compute-sanitizer memcheck on the new kernels (attention, large reductions)"
    NNC_CUDA_LINEINFO=1 timeout $(( $(left) - 15 )) compute-sanitizer --tool memcheck build-gpu/gpu_vs_cpu \
        tests/cuda/ops/sdpa.nn tests/cuda/ops/reduce_large.nn tests/cuda/ops/rowwise.nn >"$L/memcheck.log" 2>&1
    echo "memcheck rc=$?"; tail -4 "$L/memcheck.log"
fi
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
finish 0
