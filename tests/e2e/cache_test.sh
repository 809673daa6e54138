#!/usr/bin/env bash
# The compile cache as a security boundary (docs/security.md): unsafe cache directories are
# refused with a warning and a private fallback, planted symlinks are replaced and never
# followed, truncated or corrupted objects are rebuilt, long cache paths never load stale
# code, concurrent cold compiles all succeed, --no-cache never touches a shared /tmp path,
# CC / NNC_CFLAGS are split into words, a successful run always exits 0, and a tiered start
# (-O1 first, -O3 after it, beside the training) trains exactly as the -O3 build alone, and
# a directory renamed into place between the check of an object and its load changes nothing;
# --cache-info and --cache-clear count and remove nnc's entries and nothing else, and
# NNC_CACHE_MAX evicts the least recently used compiled code.
#   cache_test.sh NNC CACHE_SWAP_LIB CACHE_PLANTED_LIB   (the last two: cache_swap.c, cache_planted.c)
# CTest runs it with an -O level in NNC_CFLAGS (-O0, as under the sanitizers): one build a cold
# run, where a tiered start made two, -O3's the longer; sections 13 to 18, on the tiers, unset it.
set -u
nnc=$1; swap_lib=$2; planted=$3; here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d); trap 'chmod -R u+w "$dir" 2>/dev/null; rm -rf "$dir"' EXIT
real=$(cd "$dir" && pwd -P)   # as the swapper sees it, /proc/self/fd/N resolved
export TMPDIR=$dir/tmp; mkdir -p "$TMPDIR"
pass=0; fail=0
ok()   { if "$@" >"$dir/out" 2>&1; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL (status $?): $*"; cat "$dir/out"; fi; }
bad()  { if "$@" >"$dir/out" 2>&1; then fail=$((fail+1)); echo "FAIL (succeeded): $*"; cat "$dir/out"; else pass=$((pass+1)); fi; }
has()  { if grep -q -- "$1" "$dir/out"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: no '$1' in:"; cat "$dir/out"; fi; }
check(){ if eval "$1"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $2"; fi; }

# A small model whose generated code depends on one word (the activation), so an edited
# model must give a different loss.
model() {   # model FILE ACTIVATION
    cat > "$1" <<NN
input x: f32[B, 8]
input y: f32[B, 1]
param w: f32[8, 1] = normal(0, 1)
loss = mse_loss($2(x @ w), y)
train {
    data x = randn(64, 8)
    data y = randn(64, 1)
    batch = 16
    epochs = 1
    optimizer = sgd(lr = 0.1)
    minimize loss
    seed = 3
}
NN
}
m=$dir/cachem.nn; model "$m" sigmoid
run() { XDG_CACHE_HOME=$1 "$nnc" "$m" --eval; }
loss() { grep "loss" "$dir/out"; }
entry() { ls "$1/nnc" | grep '\.so$' | head -1; }
# rebuilt FILE PLANTED: FILE is a fresh object in place of PLANTED (what was put there).  Not a
# byte comparison with the first build: under ASan, clang records the private build
# directory's random name in the object, so two builds of one source differ in a few bytes.
rebuilt() { [ ! -L "$1" ] && [ "$(stat -c %s "$1")" = "$(stat -c %s "$dir/good.so")" ] &&
            [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = '177ELF' ] && ! cmp -s "$1" "$2"; }

# 1. A fresh cache: created 0700 even with umask 0, entries 0600, named hash-first.
ok bash -c "umask 0; XDG_CACHE_HOME='$dir/c1' '$nnc' '$m' --quiet --eval"
check '[ "$(stat -c %a "$dir/c1/nnc")" = 700 ]' "cache directory not 0700: $(stat -c %a "$dir/c1/nnc" 2>&1)"
so=$(entry "$dir/c1")
check '[[ "$so" =~ ^[0-9a-f]{16}-cachem\.so$ ]]' "entry name '$so' does not start with the hash"
check '[ "$(stat -c %a "$dir/c1/nnc/$so")" = 600 ]' "entry not 0600"
cp "$dir/c1/nnc/$so" "$dir/good.so"
ok run "$dir/c1"; loss1=$(loss)
check '[ -n "$loss1" ]' "no loss printed"

# 2. A cache directory writable by others is refused; nothing is written into it.
mkdir -p "$dir/c2/nnc"; chmod 777 "$dir/c2/nnc"
ok run "$dir/c2"; has "writable by others"; has "private temporary directory"
check '[ -z "$(ls -A "$dir/c2/nnc")" ]' "files written into a world-writable cache"
# 3. A cache directory owned by someone else is refused.
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
    mkdir -p "$dir/c3/nnc"; chmod 700 "$dir/c3/nnc"; chown nobody "$dir/c3/nnc"
    ok run "$dir/c3"; has "not by you"
    check '[ -z "$(ls -A "$dir/c3/nnc")" ]' "files written into someone else's cache"
else
    echo "skip: a cache directory owned by another user needs root (chown nobody)"
fi
# 4. An unusable cache directory (cannot be created; read-only) falls back, with a warning.
ok run /proc/self/no-such-dir; has "warning: not using the cache directory"
if [ "$(id -u)" != 0 ]; then
    mkdir -p "$dir/c4/nnc"; chmod 500 "$dir/c4/nnc"
    ok run "$dir/c4"; has "not writable"
else
    echo "skip: a read-only cache directory is writable for root"
fi

# 5. A symlink planted in place of the entry and its checksum: the victim stays untouched.
mkdir -p "$dir/c5/nnc"; chmod 700 "$dir/c5/nnc"
echo "precious" > "$dir/victim"; cp "$dir/victim" "$dir/victim.orig"
ln -s "$dir/victim" "$dir/c5/nnc/$so"; ln -s "$dir/victim" "$dir/c5/nnc/$so.sum"
ok run "$dir/c5"
check 'cmp -s "$dir/victim" "$dir/victim.orig"' "the symlink's target was written"
check 'rebuilt "$dir/c5/nnc/$so" "$dir/victim"' "the symlink was not replaced by the object"
# a symlink to a valid object with a valid checksum is not followed either: rebuilt
rm "$dir/c5/nnc/$so"; ln -s "$dir/good.so" "$dir/c5/nnc/$so"
ok run "$dir/c5"
check '[ ! -L "$dir/c5/nnc/$so" ]' "a symlinked entry was used"

# 6. A truncated object is rebuilt (no SIGBUS), and so is a corrupted one.
head -c 4096 "$dir/good.so" > "$dir/c1/nnc/$so"; cp "$dir/c1/nnc/$so" "$dir/planted"
ok run "$dir/c1"; check '[ "$(loss)" = "$loss1" ]' "wrong output after a truncated object"
check 'rebuilt "$dir/c1/nnc/$so" "$dir/planted"' "the truncated object was not rebuilt"
printf 'XXXXXXXXXXXXXXXX' | dd of="$dir/c1/nnc/$so" bs=1 seek=2000 conv=notrunc 2>/dev/null
cp "$dir/c1/nnc/$so" "$dir/planted"
ok run "$dir/c1"; check '[ "$(loss)" = "$loss1" ]' "wrong output after a corrupted object"
check 'rebuilt "$dir/c1/nnc/$so" "$dir/planted"' "the corrupted object was not rebuilt"

# 7. A cache path of about 1 KB (a long directory and a long model name): an edited model
# runs its new code, never the old.
long=$dir; for i in 1 2 3 4; do long=$long/$(printf 'd%.0s' $(seq 200)); done
m7=$dir/$(printf 'm%.0s' $(seq 200)).nn
run7() { XDG_CACHE_HOME=$long "$nnc" "$m7" --eval; }
model "$m7" sigmoid; ok "$nnc" "$m7" --eval --no-cache; loss7a=$(loss)
model "$m7" tanh;    ok "$nnc" "$m7" --eval --no-cache; loss7b=$(loss)
check '[ -n "$loss7a" ] && [ "$loss7a" != "$loss7b" ]' "the edit did not change the loss (test is void)"
model "$m7" sigmoid; ok run7; check '[ "$(loss)" = "$loss7a" ]' "wrong output with a long cache path"
model "$m7" tanh;    ok run7; check '[ "$(loss)" = "$loss7b" ]' "stale code under a long cache path: $(loss) != $loss7b"
check '[ $(find "$long" -name "*.so" | wc -l) = 2 ]' "the long cache path was not used"

# 8. Concurrent cold compiles of one new model all succeed.
pids=()
for i in $(seq 16); do XDG_CACHE_HOME=$dir/c8 "$nnc" "$m" --eval >"$dir/par$i" 2>&1 & pids+=($!); done
nfail=0; for p in "${pids[@]}"; do wait "$p" || nfail=$((nfail+1)); done
check '[ $nfail = 0 ]' "$nfail of 16 concurrent cold compiles failed: $(cat "$dir"/par* | grep -v loss | head -3)"
check '[ $(cat "$dir"/par* | grep -v -- "--eval without --load" | sort -u | wc -l) = 1 ]' "concurrent compiles disagree"
check '[ -z "$(ls -A "$dir/c8/nnc" | grep "^\.tmp")" ]' "temporary files left in the cache"

# 9. --no-cache builds in a private directory: nothing in /tmp/nnc-nocache, nothing left behind.
u=nocache_$$_$RANDOM; cp "$m" "$dir/$u.nn"
mkdir -p /tmp/nnc-nocache 2>/dev/null
ok "$nnc" "$dir/$u.nn" --quiet --eval --no-cache
check '[ -z "$(ls /tmp/nnc-nocache 2>/dev/null | grep "$u")" ]' "--no-cache wrote into /tmp/nnc-nocache"
# whatever name a run left there is what another user would plant a symlink at: the victim
# it points to must survive the next run
echo "precious" > "$dir/victim9"
for f in $(ls /tmp/nnc-nocache 2>/dev/null | grep "$u"); do rm -f "/tmp/nnc-nocache/$f"; ln -s "$dir/victim9" "/tmp/nnc-nocache/$f"; done
ok "$nnc" "$dir/$u.nn" --quiet --eval --no-cache
check '[ "$(cat "$dir/victim9")" = precious ]' "--no-cache wrote through a symlink planted in /tmp/nnc-nocache"
rm -f /tmp/nnc-nocache/*"$u"* 2>/dev/null
check '[ -z "$(ls -A "$TMPDIR")" ]' "--no-cache left its private directory behind: $(ls -A "$TMPDIR")"
# a refused cache's private fallback is removed too
check '[ -z "$(ls -A "$TMPDIR")" ]' "a private fallback directory was left behind"

# 10. CC and NNC_CFLAGS are split into words, with no limit on their number.  The compiler
# stays the suite's own (the sanitizer stage loads clang-ASan objects into a clang-ASan nnc).
cc1=${CC:-cc}
ok env CC="env $cc1" XDG_CACHE_HOME="$dir/c10" "$nnc" "$m" --quiet --eval
ok env CC="env $cc1" "$nnc" "$m" -o "$dir/aot"; check '[ -f "$dir/aot/libcachem.a" ]' "CC=\"env $cc1\" -o built no library"
flags=$(printf -- '-DNNC_UNUSED_%d ' $(seq 30))
bad env NNC_CFLAGS="$flags --no-such-flag-31" XDG_CACHE_HOME="$dir/c10" "$nnc" "$m" --quiet --eval; has "no-such-flag-31"
ok env NNC_CFLAGS="-DNNC_QA='1 + 2' \"-DNNC_QB=x y\" -DNNC_QC=a\\ b" XDG_CACHE_HOME="$dir/c10" "$nnc" "$m" --quiet --eval

# 11. A successful run exits 0: the model object loads libgomp, and its threads outlive
# main(); unmapping it at exit crashed about one run in five.
python3 - "$dir/ae.npy" <<'PY'
import struct, sys, random
rows, cols = 256, 784
hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, cols)
hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
r = random.Random(1)
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
    f.write(struct.pack("<%df" % (rows * cols), *[r.random() for _ in range(rows * cols)]))
PY
cat > "$dir/ae.nn" <<NN
block Linear(n_in, n_out) {
    param weight: f32[n_out, n_in] = kaiming_uniform(a = sqrt(5))
    param bias:   f32[n_out]       = uniform(-1 / sqrt(n_in), 1 / sqrt(n_in))
    forward(x) = x @ transpose(weight) + bias
}
input x: f32[B, 784]
enc = Linear(784, 64)
dec = Linear(64, 784)
loss = mse_loss(sigmoid(dec(relu(enc(x)))), x)
train {
    data x = npy("$dir/ae.npy")
    batch = 32
    epochs = 1
    optimizer = adam(lr = 0.001)
    minimize loss
}
NN
crashes=0
for i in $(seq 30); do
    OPENBLAS_NUM_THREADS=1 XDG_CACHE_HOME=$dir/c11 "$nnc" "$dir/ae.nn" --quiet >/dev/null 2>&1 || crashes=$((crashes+1))
done
check '[ $crashes = 0 ]' "$crashes of 30 successful autoencoder runs exited non-zero"

# 12. The decompressed-data cache follows the same rules: a corrupted entry is not used.
python3 - "$dir/img.gz" <<'PY'
import gzip, struct, sys, random
r = random.Random(2)
with gzip.open(sys.argv[1], "wb") as f:
    f.write(bytes([0, 0, 8, 2]) + struct.pack(">II", 64, 8) + bytes(r.randrange(256) for _ in range(64 * 8)))
PY
sed -e "s|data x = randn(64, 8)|data x = idx(\"$dir/img.gz\", scale = 1 / 255)|" "$m" > "$dir/idxm.nn"
ok env XDG_CACHE_HOME="$dir/c12" "$nnc" "$dir/idxm.nn" --eval; lossd=$(loss)
d=$(ls "$dir/c12/nnc" | grep -- '-data\.idx$')
check '[ -n "$d" ] && [ "$(stat -c %a "$dir/c12/nnc/$d")" = 600 ]' "no 0600 data cache entry: '$d'"
printf '\377\377\377\377\377\377\377\377' | dd of="$dir/c12/nnc/$d" bs=1 seek=40 conv=notrunc 2>/dev/null
ok env XDG_CACHE_HOME="$dir/c12" "$nnc" "$dir/idxm.nn" --eval
check '[ -n "$lossd" ] && [ "$(loss)" = "$lossd" ]' "a corrupted data cache entry was used: $(loss) != $lossd"
ok env XDG_CACHE_HOME="$dir/c2" "$nnc" "$dir/idxm.nn" --eval
check '[ -z "$(ls -A "$dir/c2/nnc")" ]' "data cached in a world-writable cache"

# 13. A tiered start (cache miss): the -O1 build trains while the -O3 one compiles beside it and
# takes over (at step 2 at the latest: that step waits for it; sooner when it is ready sooner)
# with the training so far; both compute alike, so every step's loss equals a run on the -O3
# build throughout.  The -O3 object is in the cache at exit.  (Without NNC_CFLAGS: an -O level
# there, as the sanitizer stage's -O0, would win over both tiers, and nnc then does not tier.)
steps() { grep '"type":"step"' "$1" | cut -d, -f1-4; }
saved_cflags=${NNC_CFLAGS-}; unset NNC_CFLAGS
ok env XDG_CACHE_HOME="$dir/c13" NNC_TIER_WAIT_STEP=2 "$nnc" "$m" --epochs 3 --metrics "$dir/tier.jsonl"
has "takes over after step [012] "
check '[ -n "$(entry "$dir/c13")" ]' "no -O3 object in the cache after a tiered start"
check '[ "$(stat -c %a "$dir/c13/nnc/$(entry "$dir/c13")")" = 600 ]' "the tiered start's -O3 entry not 0600"
ok env XDG_CACHE_HOME="$dir/c13" NNC_TIER_WAIT_STEP=2 "$nnc" "$m" --epochs 3 --metrics "$dir/full.jsonl"
check '! grep -q "takes over" "$dir/out"' "a cache hit started on a quick build"
check '[ "$(steps "$dir/tier.jsonl" | wc -l)" = 12 ] && [ "$(steps "$dir/tier.jsonl")" = "$(steps "$dir/full.jsonl")" ]' \
      "the steps after the -O3 build took over differ from a run on it throughout"
# ... and when the -O3 build fails, training finishes on the -O1 one and nothing is cached.
printf '#!/bin/sh\nfor a; do [ "$a" = -O3 ] && { echo "no -O3 here" >&2; exit 1; }; done\nexec %s "$@"\n' "${CC:-cc}" > "$dir/cc-o1"
chmod +x "$dir/cc-o1"
ok env CC="$dir/cc-o1" XDG_CACHE_HOME="$dir/c14" NNC_TIER_WAIT_STEP=2 "$nnc" "$m" --epochs 3 --metrics "$dir/o1.jsonl"
has "the -O3 build failed, training goes on with the -O1 one"
check '[ -z "$(entry "$dir/c14")" ] && [ "$(steps "$dir/o1.jsonl")" = "$(steps "$dir/full.jsonl")" ]' \
      "a failed -O3 build left an entry, or the -O1 build trained differently"
ok env XDG_CACHE_HOME="$dir/c15" NNC_CFLAGS=-O2 NNC_TIER_WAIT_STEP=2 "$nnc" "$m" --epochs 3
check '! grep -q "takes over" "$dir/out"' "tiered although NNC_CFLAGS sets the -O level"
# 16. The -O3 compiler starts only once the -O1 one has exited (its gate), so that on a small
# machine the quick build and the data have the cores to themselves.
printf '#!/bin/sh\no=\nfor a; do case "$a" in -O1|-O3) o=$a;; esac; done\n[ -n "$o" ] && echo "start $o" >> %s\n%s "$@"; rc=$?\n[ -n "$o" ] && echo "end $o" >> %s\nexit $rc\n' \
       "$dir/order" "${CC:-cc}" "$dir/order" > "$dir/cc-log"
chmod +x "$dir/cc-log"
ok env CC="$dir/cc-log" XDG_CACHE_HOME="$dir/c16" NNC_TIER_WAIT_STEP=2 "$nnc" "$m" --epochs 1
check '[ "$(tr "\n" " " < "$dir/order")" = "start -O1 end -O1 start -O3 end -O3 " ]' \
      "the -O3 compiler did not wait for the -O1 one: $(tr '\n' ' ' < "$dir/order")"
# 17. ... and a compiler that leaves a process behind holding what it inherited (sccache's
# server, ccache's storage helper) does not hold the -O3 build, nor nnc's exit, back.
printf '#!/bin/sh\nsleep 60 </dev/null >/dev/null 2>&1 &\necho $! >> %s\nexec %s "$@"\n' "$dir/daemons" "${CC:-cc}" > "$dir/cc-daemon"
chmod +x "$dir/cc-daemon"
ok timeout 40 env CC="$dir/cc-daemon" XDG_CACHE_HOME="$dir/c17" "$nnc" "$m" --epochs 1
check '[ -n "$(entry "$dir/c17")" ]' "no -O3 object in the cache beside a compiler that left a daemon"
kill $(cat "$dir/daemons") 2>/dev/null

# 18. Whoever controls a parent of the cache directory (or of $TMPDIR) can rename a directory of
# theirs into its place at any moment.  When nnc checked an object and then let dlopen open it
# by its path again, a loop of such renames run beside it got a planted object loaded in 3 runs
# of 20, with exit status 0.  cache_swap (LD_PRELOAD, in nnc only) makes the rename at the worst
# moment, every time: just before dlopen opens the object, it puts a directory of its own, with
# a planted object under the same name, in place of the one holding it; the planted object's
# constructor would leave a marker.  nnc must load the object it checked: no marker, the same
# results.  A cache hit, a --no-cache build (its private directory), both builds of a tiered
# start.  (NNC_CFLAGS stays unset from section 13: the tiers need the backend's -O levels.)
swapped() {   # swapped AT CACHE ARGS...: nnc ARGS, the directory of the AT-th object it loads swapped
    local at=$1 cache=$2; shift 2
    rm -f "$dir/marker" "$dir/swap.log"
    env LD_PRELOAD="$swap_lib" NNC_SWAP_UNDER="$real" NNC_SWAP_AT="$at" NNC_SWAP_PLANT="$planted" \
        NNC_SWAP_LOG="$dir/swap.log" NNC_SWAP_MARKER="$dir/marker" XDG_CACHE_HOME="$cache" NNC_TIER_WAIT_STEP=2 \
        "$nnc" "$@"
}
# swap_checked WHAT DIR: the swap was made at DIR, a pattern (else the test is void), and changed nothing
swap_checked() {
    local swap_at=$2   # check's eval sees this, not $2 (its own arguments)
    check 'grep -q "^swapped $swap_at\$" "$dir/swap.log"' \
          "$1: no swap at $2 (test is void): $(cat "$dir/swap.log" 2>&1)"
    check '[ ! -e "$dir/marker" ]' "$1: the object planted by a directory swap ran in nnc"
}
private="$real/tmp/nnc-[A-Za-z0-9]*"
ok run "$dir/c18"; loss18=$(loss)
ok swapped 1 "$dir/c18" "$m" --eval
swap_checked "cache hit" "$real/c18/nnc"; check '[ "$(loss)" = "$loss18" ]' "cache hit, swapped: $(loss) != $loss18"
check 'grep -q "^dlopen /proc/self/fd/" "$dir/swap.log"' "a cached object was not loaded through its descriptor"
ok swapped 1 "$dir/c18" "$m" --eval --no-cache
swap_checked "--no-cache" "$private"; check '[ "$(loss)" = "$loss18" ]' "--no-cache, swapped: $(loss) != $loss18"
for at in 1 2; do   # 1: the -O1 build, from its private directory; 2: the -O3 one, from the cache
    rm -rf "$dir/c19"
    ok swapped $at "$dir/c19" "$m" --epochs 3 --metrics "$dir/swap.jsonl"
    if [ $at = 1 ]; then swap_checked "tiered, -O1" "$private"; else swap_checked "tiered, -O3" "$real/c19/nnc"; fi
    has "takes over after step"
    check '[ "$(steps "$dir/swap.jsonl")" = "$(steps "$dir/full.jsonl")" ]' \
          "tiered start, load $at swapped: other steps"
done
check '[ -z "$(ls -A "$TMPDIR")" ]' "a swapped run left its private directory behind: $(ls -A "$TMPDIR")"
[ -n "$saved_cflags" ] && export NNC_CFLAGS=$saved_cflags

# 19. Without /proc (an empty one mounted over it, in a mount namespace of its own) a cache hit
# loads a private copy of the bytes it checked, from a fresh directory under $TMPDIR, removed
# after the load.  (Not in the sanitizer stage: LeakSanitizer cannot run without /proc.)
noproc() { unshare -m sh -c 'mount -t tmpfs none /proc && exec "$@"' sh "$@"; }
if ! noproc true 2>/dev/null; then
    echo "skip: no mount namespace to hide /proc in (needs root)"
elif ! noproc "$nnc" --version >/dev/null 2>&1; then
    echo "skip: this nnc does not run without /proc (a sanitizer's runtime reads it)"
else
    rm -f "$dir/swap.log"
    ok noproc env LD_PRELOAD="$swap_lib" NNC_SWAP_UNDER="$real" NNC_SWAP_LOG="$dir/swap.log" XDG_CACHE_HOME="$dir/c18" \
       "$nnc" "$m" --eval
    check '[ "$(loss)" = "$loss18" ]' "without /proc: $(loss) != $loss18"
    check 'grep -q "^dlopen $real/tmp/nnc-[^/]*/[0-9a-f]*-cachem.so " "$dir/swap.log"' \
          "without /proc, not a private copy loaded: $(cat "$dir/swap.log" 2>&1)"
    check '[ -z "$(ls -A "$TMPDIR")" ]' "the private copy was left behind: $(ls -A "$TMPDIR")"
fi

# 20. nnc --cache-info and --cache-clear see the cache as entries: a CPU object, a cubin with its
# source, a data set, each with its checksum.  They count and remove those and nothing else:
# not the user's own file, not a folder, not a symlink named like an entry (nor what it points
# at), not the file a running nnc is writing.  A dead writer's temporary file goes.
c20=$dir/c20/nnc
ok env XDG_CACHE_HOME="$dir/c20" "$nnc" "$dir/idxm.nn" --eval   # a CPU object and a data entry
for f in fedcba9876543210-cachem.cubin fedcba9876543210-cachem.cubin.cu; do
    printf 'x%.0s' $(seq 100) > "$c20/$f"; printf 'sum' > "$c20/$f.sum"
done
mkdir "$c20/sub"; echo mine > "$c20/notes.txt"; echo precious > "$dir/victim20"
ln -s "$dir/victim20" "$c20/0123456789abcdef-cachem.so"; ln -s "$dir/victim20" "$c20/0123456789abcdef-cachem.so.sum"
touch "$c20/.tmp-$$-0-0123456789abcdef-cachem.so"                              # this shell: alive
dead=$(sh -c 'echo $$'); touch "$c20/.tmp-$dead-0-0123456789abcdef-cachem.so"  # gone
ok env XDG_CACHE_HOME="$dir/c20" "$nnc" --cache-info
has "^cache $c20$"; has "^  compiled CPU code      1 entry  "; has "^  CUDA cubins            1 entry        206 B$"
has "^  decompressed data      1 entry  "; has "^  total                  3 entries"
has "^limits: compiled code 1.0 GiB (NNC_CACHE_MAX), data 2.0 GiB (NNC_DATA_CACHE_MAX)"
has "^4 files there are not nnc's: left alone$"; has "^1 file being written by a running nnc: left alone$"
ok env XDG_CACHE_HOME="$dir/c20" NNC_CACHE_MAX=512M NNC_DATA_CACHE_MAX=3G "$nnc" --cache-info
has "^limits: compiled code 512.0 MiB (NNC_CACHE_MAX), data 3.0 GiB (NNC_DATA_CACHE_MAX)"
ok env XDG_CACHE_HOME="$dir/c20" "$nnc" --cache-clear
has "^removed 3 entries ([0-9.]* KiB) from $c20$"; has "^4 files there are not nnc's: left alone$"
check '[ "$(ls -A "$c20" | sort | tr "\n" " ")" = ".tmp-$$-0-0123456789abcdef-cachem.so 0123456789abcdef-cachem.so 0123456789abcdef-cachem.so.sum notes.txt sub " ]' \
      "--cache-clear removed other than nnc's entries, or left one: $(ls -A "$c20" | tr '\n' ' ')"
check '[ "$(cat "$dir/victim20")" = precious ] && [ -L "$c20/0123456789abcdef-cachem.so" ]' "a symlink was followed or removed"
ok env XDG_CACHE_HOME="$dir/c20" "$nnc" --cache-info; has "^  total                  0 entries        0 B$"
ok env XDG_CACHE_HOME="$dir/c20" "$nnc" "$dir/idxm.nn" --eval; check '[ "$(loss)" = "$lossd" ]' "a run after --cache-clear"
ok env XDG_CACHE_HOME="$dir/c20b" "$nnc" --cache-clear; has "^nothing to remove: $dir/c20b/nnc does not exist$"
check '[ ! -e "$dir/c20b" ]' "--cache-clear created the cache directory"
ok env XDG_CACHE_HOME="$dir/c20b" "$nnc" --cache-info; has "(not created yet: nothing cached)"
bad env XDG_CACHE_HOME="$dir/c2" "$nnc" --cache-clear   # world-writable: nnc never used it
has "not clearing a directory nnc does not use as its cache: writable by others"
bad "$nnc" "$m" --cache-clear; has "--cache-clear is a command of its own"

# 21. NNC_CACHE_MAX bounds the compiled code: a new entry that takes it past the limit evicts the
# least recently used (a hit counts as a use), never itself; data entries are not counted.
for a in sigmoid tanh relu; do model "$dir/lru_$a.nn" $a; done
run21() { XDG_CACHE_HOME=$dir/c21 NNC_CACHE_MAX=$2 "$nnc" "$dir/lru_$1.nn" --eval; }
size21() { cat "$dir/c21/nnc/"*"-lru_$1.so" "$dir/c21/nnc/"*"-lru_$1.so.sum" | wc -c; }
has21() { [ -n "$(ls "$dir/c21/nnc" | grep -- "-lru_$1\.so$")" ]; }
for a in sigmoid tanh relu; do ok run21 $a ""; done
sa=$(size21 sigmoid) sb=$(size21 tanh) sc=$(size21 relu)
limit=$((sa + (sb > sc ? sb : sc)))   # room for sigmoid and one other, not for all three
rm -rf "$dir/c21"
ok run21 sigmoid $limit; ok run21 tanh $limit
check 'has21 sigmoid && has21 tanh' "two entries under the limit were not both kept"
ok run21 sigmoid $limit   # a hit: sigmoid is now the most recently used
ok run21 relu $limit      # past the limit: tanh, the least recently used, goes
check 'has21 sigmoid && ! has21 tanh && has21 relu' "not the least recently used evicted: $(ls "$dir/c21/nnc" | tr '\n' ' ')"
check '[ -z "$(ls "$dir/c21/nnc" | grep -- "-lru_tanh")" ]' "the evicted entry's checksum was left"
ok run21 tanh 1K          # a limit below one entry keeps the new one alone
check '! has21 sigmoid && has21 tanh && ! has21 relu' "NNC_CACHE_MAX=1K kept other entries: $(ls "$dir/c21/nnc" | tr '\n' ' ')"
ok run21 relu lots; has "warning: NNC_CACHE_MAX=lots is not a size"
check 'has21 tanh && has21 relu' "an invalid NNC_CACHE_MAX did not fall back to the default"

echo "cache: $pass passed, $fail failed"
[ "$fail" = 0 ]
