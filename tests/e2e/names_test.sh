#!/usr/bin/env bash
# Names never become broken C: model files called like C keywords or standard types, inputs
# named n, m, in and int, blocks and parameters named like keywords, and a file name with
# characters that would break a comment, a string or a format ('"', '%', '*', '\').  Each one
# trains (the generated C compiles, --check-numerics quotes the file name in a string) and
# builds ahead of time; an application includes the header and calls the typed API.
set -u
nnc=$1; here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
pass=0; fail=0
check() { if "$@" >"$dir/out" 2>&1; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $*"; cat "$dir/out"; fi; }
cp "$here/names_labels.csv" "$dir/"; cd "$dir"
i=0
for name in auto int32 nnc_model 'we"ird%s*\x'; do
    i=$((i+1))
    cp "$here/names.nn" "$dir/$name.nn"
    check "$nnc" "$dir/$name.nn" --quiet --no-cache --check-numerics
    check "$nnc" "$dir/$name.nn" --target cpu -o "$dir/aot$i"
    mn=$(sed -n 's|^wrote .*/\(.*\)\.c, .*|\1|p' "$dir/out")
    [ -n "$mn" ] || { fail=$((fail+1)); echo "FAIL: no model name for $name"; continue; }
    cat > "$dir/app$i.c" <<APP
#include "$mn.h"
int run(const float *x, const int32_t *y) {
    ${mn}_t *m = ${mn}_create();
    ${mn}_init(m, 1);
    int rc = ${mn}_train_step(m, x, x, x, y, 4);
    ${mn}_free(m);
    return rc;
}
APP
    check cc -std=c11 -Wall -Wextra -Werror -c -I "$dir/aot$i" "$dir/app$i.c" -o "$dir/app$i.o"
done
echo "names: $pass passed, $fail failed"
[ "$fail" = 0 ]
