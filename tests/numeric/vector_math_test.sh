#!/bin/sh
# vector_math_test.sh PRELUDE CC [STRIDE] - the CPU target's inline float EXP, TANH and ERF
# (codegen/cpu/dialect_c.c) against libm: vector_math_sweep.c built against the prelude PRELUDE
# prints, with the flags of the generated code at -O3 (vectorised) and at -O1 (a tiered start's
# quick build), each must pass, and both must print the same (a hash of every result's bits).
set -eu
PRELUDE=$1 CC=$2 STRIDE=${3:-997}
SRC=$(cd "$(dirname "$0")" && pwd)
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
"$PRELUDE" > "$DIR/vector_math.h"
for opt in -O3 -O1; do
    $CC $opt -march=native -std=c11 -ffp-contract=off -I"$DIR" "$SRC/vector_math_sweep.c" -lm -o "$DIR/sweep$opt"
    "$DIR/sweep$opt" "$STRIDE" > "$DIR/out$opt" || { cat "$DIR/out$opt"; echo "FAIL at $opt"; exit 1; }
done
cat "$DIR/out-O3"
cmp -s "$DIR/out-O3" "$DIR/out-O1" || { echo "FAIL -O1 measures otherwise:"; cat "$DIR/out-O1"; exit 1; }
echo "ok   -O1 measures the same"
