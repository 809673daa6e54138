#!/usr/bin/env bash
# setup.sh - from a fresh Debian 12 machine to a trained model: installs what is missing,
# builds nnc into build/, and trains models/mlp.nn on Fashion-MNIST for 3 epochs on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh build
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target nnc
echo "built build/nnc; training models/mlp.nn:"
build/nnc models/mlp.nn
