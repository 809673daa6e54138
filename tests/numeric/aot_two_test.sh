#!/bin/sh
# aot_two_test.sh NNC MODELS CC - models' ahead-of-time libraries in one program:
#   nnc MODELS/mlp.nn and MODELS/linreg.nn -o DIR each write NAME.c, NAME.h and libNAME.a;
#   every global symbol a library defines starts with its model's name (the runtime it embeds
#   is static), so aot_two.c links both without a clash and runs each model.
set -eu
NNC=$1 MODELS=$2 CC=${3:-cc}
SRC=$(cd "$(dirname "$0")" && pwd)
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
fail=0

for mn in mlp linreg linsched; do
    if [ $mn = linsched ]; then from=$SRC; else from=$MODELS; fi
    "$NNC" "$from/$mn.nn" --target cpu -o "$DIR/out" >/dev/null
    other=$(nm --defined-only "$DIR/out/lib$mn.a" | awk 'NF == 3 && $2 ~ /[A-Z]/ {print $3}' | grep -v "^${mn}_" || true)
    if [ -n "$other" ]; then
        echo "FAIL lib$mn.a defines global symbols outside ${mn}_*: $other"; fail=1
    else
        echo "ok   lib$mn.a: every global symbol is ${mn}_*"
    fi
done

if "$CC" -std=c11 -O2 -Wall -Wextra -Werror -I"$DIR/out" "$SRC/aot_two.c" "$DIR/out/libmlp.a" "$DIR/out/liblinreg.a" \
        "$DIR/out/liblinsched.a" -lopenblas -lm -o "$DIR/two" 2> "$DIR/link.txt"; then
    echo "ok   aot_two.c links libmlp.a, liblinreg.a and liblinsched.a together"
else
    sed 's/^/    /' "$DIR/link.txt"; echo "FAIL aot_two.c does not link the libraries"; exit 1
fi
"$DIR/two" || fail=1
exit $fail
