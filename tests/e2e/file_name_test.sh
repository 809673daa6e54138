#!/usr/bin/env bash
# A model's file name reaches the generated code (comments, --check-numerics messages, the
# CUDA source header): no name can close a comment or a string and inject code.  Names with
# "*/", quotes, backslashes, '?', '%' and a newline must build, train and report as usual, and
# the marker the name tries to inject must never run.
set -u
nnc=$1; here=$(cd "$(dirname "$0")" && pwd); models=$here/../../models
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
pass=0; fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1"; cat "$dir/out"; fi; }

mkdir -p "$dir/a*"
evil="$dir/a*/x\"*/ int injected = 1; /*\\?%s??/
.nn"
mkdir -p "$(dirname "$evil")"
cp "$models/linreg.nn" "$evil"
"$nnc" "$evil" --emit c >"$dir/gen.c" 2>"$dir/out"
check "--emit c with a hostile file name" '[ -s "$dir/gen.c" ] && ! grep -q "^ int injected" "$dir/gen.c"'
check "the generated C still compiles" 'cc -std=c11 -fsyntax-only -w "$dir/gen.c" >"$dir/out" 2>&1'
check "no injected declaration in the generated C" '! cc -std=c11 -E "$dir/gen.c" 2>/dev/null | grep -q "int injected"'
"$nnc" "$evil" --epochs 1 --quiet --no-cache >"$dir/out" 2>&1
check "trains with a hostile file name" '[ $? -eq 0 ]'
cp "$here/nan.nn" "$evil"
"$nnc" "$evil" --quiet --check-numerics --no-cache >"$dir/out" 2>&1
check "--check-numerics names the op with a hostile file name" 'grep -q "NaN at element 0 of log (forward, .*a\*/x\"\*/ int injected" "$dir/out"'
if "$nnc" --version | grep -q cuda; then
  "$nnc" "$evil" --target cuda --emit cuda >"$dir/gen.cu" 2>"$dir/out"
  check "--emit cuda with a hostile file name" '[ -s "$dir/gen.cu" ] && ! grep -q "^ int injected" "$dir/gen.cu"'
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
