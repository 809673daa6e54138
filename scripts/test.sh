#!/usr/bin/env bash
# test.sh - the whole test suite, as CI runs it: installs what is missing, then
#   1. the style of the changed lines (check-format.sh), a normal build (gcc, -Wall -Wextra
#      -Werror) and every test;
#   2. the tests that run nnc's C code under AddressSanitizer + UndefinedBehaviorSanitizer
#      (clang), the generated code included (NNC_CFLAGS), with LeakSanitizer on: the unit,
#      golden, ir, numeric, e2e and cuda labels, less the comparisons with torch whose C code the
#      others run (below);
#   3. the libFuzzer targets for a bounded time (NNC_FUZZ_SECONDS, default 20 each, two at a
#      time on two cores).
# Set NNC_TEST_QUICK=1 to run step 1 only.  Each step prints its wall time when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
jobs=$(nproc)
export CTEST_OUTPUT_ON_FAILURE=1
# a private kernel cache, so the run does not depend on (or pollute) the user's
export XDG_CACHE_HOME="$PWD/build-test/cache"

# stage_done NAME: prints how long the stage that began at $stage_start took
stage_done() { echo "== $1: $((SECONDS - stage_start)) s =="; }

echo "== 1/3 build and test (gcc) =="
stage_start=$SECONDS
scripts/check-format.sh
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS=-Werror >/dev/null
cmake --build build-test -j"$jobs"
ctest --test-dir build-test -j"$jobs" --timeout 600 -E '^fuzz_'
stage_done "1/3 gcc"
[ "${NNC_TEST_QUICK:-0}" = 1 ] && exit 0

echo "== 2/3 the same under ASan + UBSan (clang) =="
stage_start=$SECONDS
export XDG_CACHE_HOME="$PWD/build-asan/cache"
cmake -S . -B build-asan -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DNNC_SANITIZE=ON \
      -DCMAKE_C_FLAGS=-Werror >/dev/null
cmake --build build-asan -j"$jobs"
# Generated code is compiled with the same sanitizers and loaded into the sanitized process.
# At -O0 (the last -O wins over the backend's -O3): clang's -O3 with ASan+UBSan made the C
# compiler most of this stage's time, and unoptimised code keeps every access it checks.
export NNC_CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -O0"
# Multi-threaded like stage 1: the LeakSanitizer tracer crash that once forced one thread
# ("Tracer caught signal 11") is fixed in the sanitized build (cmake/asan_default_options.c).
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export CC=clang
# Left to stage 1, which runs them all: the comparisons with torch whose C code the tests here
# already run.  gpt_torch_f32 and _f64 train gpt.nn (compile, AdamW's groups, the schedule,
# clipping, --metrics, --save) as e2e_gpt does here, their torch model being Python;
# gpt_torch_composed_f64's attention written out (q @ k.T, masked_fill with tril, softmax, @ v)
# is tensor_ops_torch's nanoGPT attention and attention_torch's composed fallback, here too;
# mlp_numpy and mlp_torch train models/mlp.nn (--epochs 0 --save, then an epoch with --metrics)
# as e2e_readme and e2e_mpi do here; optim_torch_f64 and train_settings_torch_f64 are their _f32
# twins' models and runs in double.
ctest --test-dir build-asan -j"$jobs" --timeout 900 -L 'unit|golden|ir|numeric|e2e|cuda' \
      -E '^(gpt_torch_f(32|64)|gpt_torch_composed_f64|mlp_numpy|mlp_torch|optim_torch_f64|train_settings_torch_f64)$'
unset NNC_CFLAGS CC
stage_done "2/3 ASan + UBSan"

echo "== 3/3 fuzz targets (${NNC_FUZZ_SECONDS:-20} s each) =="
stage_start=$SECONDS
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DNNC_FUZZ=ON -DNNC_FUZZ_SECONDS="${NNC_FUZZ_SECONDS:-20}" >/dev/null
cmake --build build-fuzz -j"$jobs" --target fuzz_all
ctest --test-dir build-fuzz -L fuzz -j"$jobs" --timeout 600
stage_done "3/3 fuzz"
