#!/usr/bin/env bash
# Names never become broken C: model files called like C keywords, standard types, C library
# macros (INFINITY, EOF, INT64_MAX) and POSIX names (timer: timer_create), inputs named n, m,
# in and int, blocks and parameters named like keywords and macros (EOF, errno, NULL, stdin),
# and a file name with characters that would break a comment, a string or a format ('"', '%',
# '*', '\').  Each one trains (the generated C compiles, --check-numerics quotes the file name
# in a string) and builds ahead of time; the generated C compiles after every header below,
# and an application that includes them all, then the header, calls the typed API.  Last, the
# model-name rule against this machine's headers: no identifier they declare is NAME_suffix
# for a suffix of the generated code and a NAME the rule leaves alone.
set -u
nnc=$1; here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
pass=0; fail=0
check() { if "$@" >"$dir/out" 2>&1; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $*"; cat "$dir/out"; fi; }
cp "$here/names_labels.csv" "$dir/"; cd "$dir"

# The C11 headers, and the POSIX ones an application commonly includes (those this system has).
for h in assert.h complex.h ctype.h errno.h fenv.h float.h inttypes.h iso646.h limits.h locale.h math.h \
         setjmp.h signal.h stdalign.h stdarg.h stdatomic.h stdbool.h stddef.h stdint.h stdio.h stdlib.h \
         stdnoreturn.h string.h tgmath.h threads.h time.h uchar.h wchar.h wctype.h pthread.h unistd.h \
         sys/types.h sys/stat.h fcntl.h dirent.h semaphore.h sched.h; do
    printf '#if __has_include(<%s>)\n#include <%s>\n#endif\n' "$h" "$h"
done > "$dir/all.h"

i=0
for name in auto int32 nnc_model 'we"ird%s*\x' INFINITY NAN BUFSIZ RAND_MAX INT64_MAX errno stdin timer size; do
    i=$((i+1))
    cp "$here/names.nn" "$dir/$name.nn"
    check "$nnc" "$dir/$name.nn" --quiet --no-cache --check-numerics
    check "$nnc" "$dir/$name.nn" --target cpu -o "$dir/aot$i"
    mn=$(sed -n 's|^wrote .*/\(.*\)\.c, .*|\1|p' "$dir/out")
    [ -n "$mn" ] || { fail=$((fail+1)); echo "FAIL: no model name for $name"; continue; }
    check cc -std=c11 -fsyntax-only -include "$dir/all.h" "$dir/aot$i/$mn.c"
    cat > "$dir/app$i.c" <<APP
#include "all.h"
#include "$mn.h"
int run(const float *x, const int32_t *y) {
    ${mn}_t *m = ${mn}_create();
    ${mn}_init(m, 1);
    int rc = ${mn}_train_step(m, x, x, x, y, 4);
    ${mn}_free(m);
    return rc;
}
APP
    check cc -std=c11 -Wall -Wextra -Werror -c -I "$dir" -I "$dir/aot$i" "$dir/app$i.c" -o "$dir/app$i.o"
done

# Every identifier of those headers, and every suffix the generated code puts after NAME_.
cc -E -P "$dir/all.h" | grep -oE '[A-Za-z_][A-Za-z0-9_]*' > "$dir/ids.raw"
cc -E -dM "$dir/all.h" | awk '{sub(/\(.*/, "", $2); print $2}' > "$dir/macros"
sort -u "$dir/ids.raw" "$dir/macros" > "$dir/ids"
cp "$here/names.nn" "$dir/probe.nn"
"$nnc" "$dir/probe.nn" --emit c | grep -oE '\bprobe_[A-Za-z0-9_]+' | sed 's/^probe_//' | sort -u > "$dir/suffixes"
check test "$(wc -l < "$dir/suffixes")" -gt 20
# inputs become parameters in_NAME: no macro may start with in_
check test -z "$(grep '^in_' "$dir/macros")"
# each X of an identifier X_suffix, as a model name: the rule must move it (m_X), and nothing
# the headers declare may be the moved name with a suffix either
sed 's/^/_/; s/$/$/' "$dir/suffixes" > "$dir/suffix.re"
grep -E '^[A-Za-z][A-Za-z0-9_]*_[a-z]' "$dir/ids" | grep -f "$dir/suffix.re" > "$dir/hits" || true
collide=0
while read -r id; do
    for s in $(cat "$dir/suffixes"); do
        case "$id" in *"_$s") x=${id%_"$s"} ;; *) continue ;; esac
        cp "$dir/probe.nn" "$dir/$x.nn"
        got=$("$nnc" "$dir/$x.nn" --emit c | sed -n 's/.*\.abi_version = NNC_ABI_VERSION, \.name = "\([^"]*\)".*/\1/p')
        if [ "$got" = "$x" ] || grep -qxF -f <(sed "s/^/${got}_/" "$dir/suffixes") "$dir/ids"; then
            collide=$((collide+1)); echo "FAIL: $x.nn gives the name '$got', and the headers declare $id"
        fi
    done
done < "$dir/hits"
if [ "$collide" = 0 ]; then pass=$((pass+1)); else fail=$((fail+1)); fi
echo "checked $(wc -l < "$dir/hits") header identifiers of the form NAME_suffix ($(wc -l < "$dir/suffixes") suffixes)"
echo "names: $pass passed, $fail failed"
[ "$fail" = 0 ]
