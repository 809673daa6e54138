#!/bin/sh
# aot_test.sh NNC AOT_INPROC MODEL CC - the ahead-of-time path end to end:
#   nnc MODEL --target cpu -o DIR writes DIR/mlp.c, mlp.h, libmlp.a;
#   aot_app.c built against them trains STEPS steps; its losses must go down and match the
#   in-process build of the same model (AOT_INPROC: aot_app.c with -DAOT_INPROC) to 1e-5;
#   libmlp.a must not reference any nnc symbol it does not define itself;
#   aot_api.c checks the API's outputs per entry and its NULL handling.
set -eu
NNC=$1 INPROC=$2 MODEL=$3 CC=${4:-cc}
SRC=$(cd "$(dirname "$0")" && pwd)
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
fail=0

"$NNC" "$MODEL" --target cpu -o "$DIR/out" >/dev/null
for f in mlp.c mlp.h libmlp.a; do
    [ -f "$DIR/out/$f" ] || { echo "FAIL nnc -o did not write $f"; exit 1; }
done
echo "ok   nnc -o wrote mlp.c, mlp.h, libmlp.a"
# the header says what a program meets: the compiled batch bounds n, accuracy is a count
if grep -q "n is the batch size, 1 to 64: the batch nnc compiled this library for" "$DIR/out/mlp.h" &&
   grep -q '_output(m, "accuracy") after _eval is a count' "$DIR/out/mlp.h"; then
    echo "ok   mlp.h states the batch bound and that accuracy is a count"
else
    echo "FAIL mlp.h does not state the batch bound, or that accuracy is a count"; fail=1
fi

"$CC" -std=c11 -O2 -I"$DIR/out" "$SRC/aot_app.c" "$DIR/out/libmlp.a" -lopenblas -lm -o "$DIR/app"
"$DIR/app" > "$DIR/aot.txt"
"$INPROC" "$MODEL" > "$DIR/inproc.txt"

# The API as an application uses it: outputs of the last call, NULL arguments (aot_api.c).
"$CC" -std=c11 -O2 -Wall -Wextra -Werror -I"$DIR/out" "$SRC/aot_api.c" "$DIR/out/libmlp.a" -lopenblas -lm -o "$DIR/api"
if "$DIR/api" > "$DIR/api.txt" 2>&1; then
    echo "ok   aot_api.c: $(tail -n 1 "$DIR/api.txt")"
else
    sed 's/^/    /' "$DIR/api.txt"; echo "FAIL aot_api.c (exit $?)"; fail=1
fi

# Undefined symbols of the archive: libc, libm and cblas only; nothing from nnc's runtime.
bad=$(nm -u "$DIR/out/libmlp.a" | awk 'NF >= 2 {print $NF}' | grep -i 'nnc' || true)
defined_nnc=$(nm --defined-only "$DIR/out/libmlp.a" | awk 'NF==3 && $2 ~ /[A-Z]/ {print $3}' | grep -v '^mlp_' | grep -i 'nnc' || true)
if [ -n "$bad" ] || [ -n "$defined_nnc" ]; then
    echo "FAIL libmlp.a references nnc symbols: $bad $defined_nnc"; fail=1
else
    echo "ok   libmlp.a: undefined symbols are $(nm -u "$DIR/out/libmlp.a" | awk 'NF >= 2 {print $NF}' | sort -u | tr '\n' ' ')"
fi

paste "$DIR/aot.txt" "$DIR/inproc.txt" | awk '
    { a[NR] = $1; b[NR] = $2; d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > m) m = r
      printf "  step %d  aot %s  in-process %s\n", NR, $1, $2 }
    END {
      if (NR < 2) { print "FAIL no losses"; exit 1 }
      ok = m <= 1e-5
      printf "%s aot vs in-process losses over %d steps: max rel %.3g (tol 1e-5)\n", ok ? "ok  " : "FAIL", NR, m
      down = a[NR] < a[1]
      printf "%s loss goes down: %s -> %s\n", down ? "ok  " : "FAIL", a[1], a[NR]
      exit !(ok && down) }' || fail=1
[ $fail -eq 0 ] && echo "5 passed, 0 failed" || echo "some checks failed"
exit $fail
