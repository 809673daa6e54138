#!/usr/bin/env bash
# fuzz.sh [SECONDS] - runs every libFuzzer target (the .nn front end through all passes, and
# the command line with a train section, and the IDX, .npy, CSV and safetensors loaders) for SECONDS each (default 600), in parallel.
# Corpora grow in build-fuzz/; crashing inputs are written there as crash-*; add each one to
# the unit or golden tests once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
secs=${1:-600}
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DNNC_FUZZ=ON -DNNC_FUZZ_SECONDS="$secs" >/dev/null
cmake --build build-fuzz -j"$(nproc)"
ctest --test-dir build-fuzz -L fuzz -j"$(nproc)" --timeout $((secs + 300)) --output-on-failure
find build-fuzz -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' | sed 's/^/found: /'
