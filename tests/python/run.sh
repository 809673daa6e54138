#!/usr/bin/env bash
# The Python module as a user gets it: a fresh venv (with the system's NumPy, PyTorch, pytest),
# `pip install .` from the checkout (setup.py builds libnnc.so with cmake, in WORK/cmake: kept
# between runs, so a rerun rebuilds only what changed), then pytest on tests/python.
#   run.sh WORK NNC      WORK: a scratch directory; NNC: the nnc command the tests compare with
# Offline: --no-build-isolation and --no-index, so pip needs nothing from the network (setuptools
# and NumPy come from Debian; a user's plain `pip install .` fetches setuptools instead).
set -eu
work=$1; nnc=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$work/venv"
mkdir -p "$work"
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
(cd "$src" && NNC_CMAKE_BUILD_DIR="$work/cmake" \
   "$work/venv/bin/pip" install -q --no-cache-dir --no-build-isolation --no-index .)
cd "$work"
NNC_BIN=$nnc NNC_EXPECT_INSTALLED=1 exec "$work/venv/bin/python" -m pytest -q -p no:cacheprovider "$src/tests/python"
