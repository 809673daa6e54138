#!/usr/bin/env bash
# deps.sh - installs, on Debian 12, whatever nnc needs that is missing.  Used by setup.sh and
# test.sh; safe to run again (installs nothing when everything is there).
#   scripts/deps.sh build   compiler, cmake, flex, bison, zlib, OpenBLAS, oneDNN (CPU
#                           convolutions), Fashion-MNIST, Open MPI (mpirun: data parallel),
#                           graphviz (the README pipes --emit dot to dot)
#   scripts/deps.sh test    the above plus clang (fuzzers, sanitizers), clang-format (the style
#                           check), NumPy and PyTorch, venv and pytest (the Python module is
#                           installed into a venv and tested), g++ (the CUDA emulator compiles
#                           kernels as C++), and from PyPI safetensors and tensorboard (their
#                           readers check nnc's files)
set -euo pipefail
want=(gcc make cmake flex bison zlib1g-dev libopenblas-dev libdnnl-dev dataset-fashion-mnist libopenmpi-dev openmpi-bin
      graphviz)
if [ "${1:-build}" = test ]; then
  want+=(clang clang-format libclang-rt-14-dev python3-numpy python3-torch g++ python3-pip python3-venv
         python3-pytest)
fi
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# TensorBoard's event-file reader, to check --tensorboard's files with it (PyPI)
if [ "${1:-build}" = test ] && ! /usr/bin/python3 -c "import tensorboard" 2>/dev/null; then
  $SUDO /usr/bin/python3 -m pip install -q --break-system-packages tensorboard ||
    echo "note: could not install tensorboard from PyPI; its checks will be skipped"
fi
# Hugging Face's safetensors reader, to check that nnc's checkpoints load with it (PyPI)
if [ "${1:-build}" = test ] && ! /usr/bin/python3 -c "import safetensors" 2>/dev/null; then
  $SUDO /usr/bin/python3 -m pip install -q --break-system-packages safetensors ||
    echo "note: could not install safetensors from PyPI; its checks will be skipped"
fi
