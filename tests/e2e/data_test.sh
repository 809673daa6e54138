#!/usr/bin/env bash
# Run-time robustness of training: what happens to the data, the checkpoints and the exit
# status when something goes wrong (diverged parameters, a full disk, a signal, a bad
# checkpoint, an unwritable --save destination).  Every case names the behaviour it checks.
set -u
nnc=$1; py=${2:-python3}
dir=$(mktemp -d); trap 'chmod -R u+w "$dir"; rm -rf "$dir"' EXIT
cd "$dir" || exit 1
pass=0; fail=0
ok()   { if "$@" >out 2>&1; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL (status $?): $*"; cat out; fi; }
bad()  { if "$@" >out 2>&1; then fail=$((fail+1)); echo "FAIL (succeeded): $*"; cat out; else pass=$((pass+1)); fi; }
has()  { if grep -q -- "$1" out; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: no '$1' in:"; cat out; fi; }
check() { if "$@"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $*"; fi; }

# A small classifier on CSV data; column 3 of x is 0, so a NaN row 3 of w1 reaches every
# hidden unit as NaN, which the ReLU can turn into a finite loss.
"$py" - <<'EOF'
import random
random.seed(1)
with open("d.csv", "w") as f:
    for i in range(64):
        x = [round(random.gauss(0, 1), 4) for _ in range(8)]
        x[3] = 0
        f.write(",".join(map(str, x)) + ",%d\n" % random.randrange(3))
EOF
cat > m.nn <<'EOF'
input x: f32[B, 8]
input y: i32[B]
param w1: f32[8, 16] = normal(0, 0.3)
param w2: f32[16, 3] = normal(0, 0.3)
logits = relu(x @ w1) @ w2
loss = cross_entropy(logits, y)
train {
    data x = csv("d.csv", first = 0, count = 8)
    data y = csv("d.csv", first = 8, count = 1)
    batch = 8
    epochs = 2
    optimizer = sgd(lr = 0.1)
    minimize loss
    metric accuracy = accuracy(logits, y)
}
EOF
# nan.st: the model's parameters with row 3 of w1 NaN (written by hand: safetensors is an
# 8-byte header length, a JSON header and little-endian data)
"$py" - <<'EOF'
import json, math, random, struct
random.seed(2)
w1 = [math.nan if i // 16 == 3 else random.gauss(0, 0.3) for i in range(8 * 16)]
w2 = [random.gauss(0, 0.3) for _ in range(16 * 3)]
data = struct.pack("<%df" % len(w1), *w1) + struct.pack("<%df" % len(w2), *w2)
hdr = {"w1": {"dtype": "F32", "shape": [8, 16], "data_offsets": [0, 512]},
       "w2": {"dtype": "F32", "shape": [16, 3], "data_offsets": [512, 704]}}
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open("nan.st", "wb").write(struct.pack("<Q", len(h)) + h + data)
EOF

# NaN parameters are never loaded (evaluated: "loss nan", exit 0; or trained on), nor saved as
# the result of a "successful" run (the parameter check after each epoch and in checkpoint_save,
# for NaNs the loss does not see)
bad "$nnc" m.nn --quiet --load nan.st --eval;         has "nan.st: parameter 'w1' element 48 is NaN: the checkpoint of a diverged model is not loaded"
bad "$nnc" m.nn --quiet --load nan.st --save out.st;  has "nan.st: parameter 'w1' element 48 is NaN"
check test ! -e out.st
ok "$nnc" m.nn --quiet --save good.st
cp good.st keep.st
bad "$nnc" m.nn --quiet --load nan.st --save good.st
check cmp good.st keep.st        # the previous checkpoint is left as it was
# a checkpoint for another shape of the model is refused naming both shapes
sed 's/16/32/g' m.nn > wide.nn
bad "$nnc" wide.nn --quiet --load good.st --eval;    has "good.st: tensor 'w1' has shape \[8,16\], the model's is \[8,32\]"

# --metrics: a write error (a full disk) costs the metrics, never the model: a warning, and
# training goes on (300 epochs: the failure comes mid-run) to the checkpoint a run without
# metrics saves; the status is still non-zero, so a file cut mid-line never passes for whole
bad "$nnc" m.nn --quiet --epochs 300 --metrics /dev/full --save full.st
has "/dev/full: cannot write metrics: No space left on device; training goes on without them (step "
has "/dev/full: incomplete: writing metrics failed at step"
ok "$nnc" m.nn --quiet --epochs 300 --save nofull.st
check cmp full.st nofull.st

# SIGTERM (a scheduler's stop) saves at the end of the step like SIGINT, and exits 143
rm -f term.st term.jsonl
"$nnc" m.nn --quiet --epochs 1000000 --save term.st --metrics term.jsonl 2>/dev/null &
pid=$!
for i in $(seq 1 1000); do [ -s term.jsonl ] && break; sleep 0.01; done
kill -TERM "$pid"; wait "$pid"; st=$?
check test "$st" = 143
check test -s term.st

# Checkpoint metadata.  meta_edit IN OUT KEY=VALUE... rewrites metadata fields the way a
# careless (or hostile) tool would: without nnc_meta_crc32, which checks nnc's own writes.
meta_edit() {
  "$py" - "$@" <<'EOF'
import json, struct, sys
src, dst, edits = sys.argv[1], sys.argv[2], sys.argv[3:]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
hdr = json.loads(b[8:8 + n])
meta = hdr["__metadata__"]
for e in edits:
    if "=" in e:
        k, v = e.split("=", 1)
        meta[k] = v
if "--strip-nnc" in edits:   # as another program would write it
    meta = hdr["__metadata__"] = {k: v for k, v in meta.items() if not k.startswith("nnc_")}
if "--keep-crc" not in edits:
    meta.pop("nnc_meta_crc32", None)
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open(dst, "wb").write(struct.pack("<Q", len(h)) + h + b[8 + n:])
EOF
}
ok "$nnc" m.nn --quiet --epochs 1 --save e1.st
meta_edit e1.st crc.st nnc_epoch=7 --keep-crc
bad "$nnc" m.nn --quiet --save crc.st --resume;       has "crc.st: metadata checksum mismatch"
meta_edit e1.st neg.st nnc_epoch_samples=-5
bad "$nnc" m.nn --quiet --save neg.st --resume;       has "neg.st: metadata nnc_epoch_samples is '-5', expected an integer in \\[0, "
meta_edit e1.st huge.st nnc_epoch=99999999999
bad "$nnc" m.nn --quiet --save huge.st --resume;      has "huge.st: metadata nnc_epoch is '99999999999', expected an integer in \\[0, 1000000000\\]"
meta_edit e1.st past.st nnc_epoch=1 nnc_epoch_samples=65
bad "$nnc" m.nn --quiet --save past.st --resume;      has "past.st: metadata nnc_epoch_samples is 65, expected an integer in \\[0, 64\\] (the training set has 64 samples)"
meta_edit e1.st step.st nnc_step=1x
bad "$nnc" m.nn --quiet --save step.st --resume;      has "step.st: metadata nnc_step is '1x'"
# the position is kept in samples: 24 samples into epoch 1 with --batch 16 leaves 40 samples,
# 3 steps (16 + 16 + 8), then 4 steps for epoch 2
meta_edit e1.st mid.st nnc_epoch=1 nnc_epoch_samples=24 nnc_step=3
ok "$nnc" m.nn --save mid.st --resume --batch 16 --metrics mid.jsonl; has "resuming from mid.st: epoch 1, sample 24"
check test "$(grep -c '"type":"step","epoch":1,' mid.jsonl)" = 3
check test "$(grep -c '"type":"step","epoch":2,' mid.jsonl)" = 4
check grep -q '"type":"epoch","epoch":2,"step":10,' mid.jsonl

# Checkpoints record the hyperparameters: resuming with others names each, old and new value, on
# a line of its own (the run goes on with the new ones); a file that records none gets a note
cp e1.st hp.st; ok "$nnc" m.nn --quiet --save hp.st --resume;   hasnt "warning"; hasnt "note"
cp e1.st hp.st; ok "$nnc" m.nn --quiet --save hp.st --resume --lr 0.05 --batch 16 --clip-grad-norm 1
has "^nnc: warning: resuming hp.st: lr was 0.1, now 0.05$"
has "^nnc: warning: resuming hp.st: batch was 8, now 16$"
has "^nnc: warning: resuming hp.st: clip_grad_norm was none, now 1$"
check test "$(grep -c warning out)" = 3
meta_edit e1.st other.st --strip-nnc
ok "$nnc" m.nn --quiet --save other.st --resume;    has "note: other.st records no hyperparameters"

# --save: an unusable destination is found before training, not after it
bad "$nnc" m.nn --quiet --save nodir/x.st;           has "save nodir/x.st: cannot create a file in directory 'nodir': No such file or directory (checked before training)"
mkdir -p sub; bad "$nnc" m.nn --quiet --save sub;    has "save sub: is a directory"
# ... nor a FIFO or a device, which a save would replace (as root, /dev/null itself); --load of
# a FIFO is refused at once instead of waiting for a writer
mkfifo fifo.st
bad timeout 60 "$nnc" m.nn --quiet --save fifo.st;   has "save fifo.st: is a FIFO, not a regular file; not replaced (checked before training)"
check test -p fifo.st
bad timeout 60 "$nnc" m.nn --load fifo.st --eval;    has "fifo.st: cannot read: not a regular file"
if mknod null.st c 1 3 2>/dev/null; then dev=null.st; else dev=/dev/null; fi   # /dev/null: only when not root
bad "$nnc" m.nn --quiet --save "$dev";               has "is a character device, not a regular file; not replaced"
check test -c "$dev"
# ... and when the save fails anyway (here the directory vanishes during the run), the model
# goes to a rescue file in $TMPDIR, named on stderr, private (0600, whatever the umask), and
# the status is non-zero
mkdir -p gone resc; rm -f gone.jsonl
(umask 022; TMPDIR=$PWD/resc exec "$nnc" m.nn --quiet --epochs 1000000 --save gone/x.st --metrics gone.jsonl 2>gone.err) &
pid=$!
for i in $(seq 1 1000); do [ -s gone.jsonl ] && break; sleep 0.01; done
rm -rf gone; kill -TERM "$pid"; wait "$pid"; st=$?
check test "$st" != 0
cp gone.err out; has "the trained model was saved to $PWD/resc/nnc-rescue-$pid.safetensors instead"
ok "$nnc" m.nn --quiet --load "resc/nnc-rescue-$pid.safetensors" --eval
check test "$(stat -c %a "resc/nnc-rescue-$pid.safetensors")" = 600
check grep -q "^nnc: terminated at epoch [0-9]*, step [0-9]*; saving$" gone.err   # the save's errors
check grep -q "^nnc: error: gone/x.st: cannot create temporary file" gone.err     # on lines of their own
# --save through a symbolic link writes the link's target
mkdir -p real; ln -sf real/t.st link.st
ok "$nnc" m.nn --quiet --epochs 1 --save link.st
check test -L link.st
check test -s real/t.st
# a temporary file of a killed save (a dead PID, our pattern) is removed by the next save
sh -c 'exit 0' & dead=$!; wait $dead
echo junk > "real/t.st.tmp.$dead"; echo keep > real/t.st.tmp.notapid
ok "$nnc" m.nn --quiet --epochs 1 --save link.st
check test ! -e "real/t.st.tmp.$dead"
check test -e real/t.st.tmp.notapid

# The decompressed-data cache (.gz IDX files), in a cache of this test's own
saved_xdg=${XDG_CACHE_HOME-}; export XDG_CACHE_HOME=$PWD/cache
mkidx() {  # mkidx FILE ROWS COLS FILL: a u8 IDX file, gzip-stored (the size depends only on the shape)
  "$py" -c 'import gzip, struct, sys
f, r, c, v = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
b = bytes([0, 0, 8, 2]) + struct.pack(">II", r, c) + bytes([v]) * (r * c)
open(f, "wb").write(gzip.compress(b, compresslevel=0, mtime=0))' "$@"
}
cat > c.nn <<'EOF'
input x: f32[N, 3]
param W: f32[3, 1] = normal(0, 1)
loss = mean(x @ W)
train {
    data x = idx("c.idx.gz")
    batch = 2
    epochs = 1
    minimize loss
}
EOF
ncache() { find cache/nnc -maxdepth 1 -name '*-data.idx' 2>/dev/null | wc -l; }
mkidx c.idx.gz 4 3 1
ok "$nnc" c.nn --quiet
check test "$(ncache)" = 1
check test "$(stat -c %a cache/nnc)" = 700
# a hit (the entry mapped, not read) gives the data the .gz gives; a corrupted entry is not used
ok "$nnc" c.nn --eval; hit=$(grep -o 'loss [0-9.e+-]*' out); check test -n "$hit"
ok "$nnc" c.nn --eval --no-cache; check test "$(grep -o 'loss [0-9.e+-]*' out)" = "$hit"
f=$(find cache/nnc -maxdepth 1 -name '*-data.idx'); printf '\x07' | dd of="$f" bs=1 seek=20 conv=notrunc 2>/dev/null
ok "$nnc" c.nn --eval; check test "$(grep -o 'loss [0-9.e+-]*' out)" = "$hit"
# a source has one entry: a new version of it (here only touched, as a download script might
# every day) replaces the entry of the old one, named the same or not (./c.idx.gz); another
# source keeps its own.  An entry named before names had a source part is removed too.
first=$(find cache/nnc -maxdepth 1 -name '*-data.idx')
cp "$first" cache/nnc/0123456789abcdef-data.idx; cp "$first.sum" cache/nnc/0123456789abcdef-data.idx.sum
for day in 1 2 3; do
  touch -d "2001-01-0$day" c.idx.gz
  sed 's|"c.idx.gz"|"./c.idx.gz"|' c.nn > c2.nn; [ $day = 2 ] && cp c2.nn cday.nn || cp c.nn cday.nn
  ok "$nnc" cday.nn --eval; check test "$(grep -o 'loss [0-9.e+-]*' out)" = "$hit"
done
check test "$(ncache)" = 1
check test ! -e "$first" -a ! -e "$first.sum" -a ! -e cache/nnc/0123456789abcdef-data.idx.sum
mkidx e.idx.gz 4 3 2; sed 's/c.idx.gz/e.idx.gz/' c.nn > e.nn
ok "$nnc" e.nn --eval
check test "$(ncache)" = 2
# replaced in place by a file of the same size, its mtime put back: the cache must not serve
# the old data (shape [3, 4] no longer fits x: f32[N, 3])
touch -r c.idx.gz ref; mkidx new.idx.gz 3 4 2; cp new.idx.gz c.idx.gz; touch -r ref c.idx.gz
check test "$(stat -c %s new.idx.gz)" = "$(stat -c %s c.idx.gz)"
bad "$nnc" c.nn --quiet;                              has "each sample has 4 elements"
# a failed run caches nothing
rm -rf cache; mkidx c.idx.gz 4 3 1
sed 's/loss = mean(x @ W)/input y: i32[N]\nloss = mean(x @ W)/; s/data x = idx("c.idx.gz")/&\n    data y = csv("frac_label.csv", first = 2, count = 1)/' c.nn > cf.nn
printf '0,0,0\n0,0,1.5\n0,0,1\n0,0,1\n' > frac_label.csv
bad "$nnc" cf.nn --quiet;                             has "input 'y': element 1 (sample 1, element 0) is 1.5"
check test "$(ncache)" = 0
# the cache is bounded: NNC_DATA_CACHE_MAX bytes, least recently used evicted first, and data
# larger than the bound is not cached
rm -rf cache; mkidx c.idx.gz 4 3 1
NNC_DATA_CACHE_MAX=30 "$nnc" c.nn --quiet >/dev/null 2>&1
sed 's/c.idx.gz/d.idx.gz/' c.nn > d.nn; mkidx d.idx.gz 4 3 3
ok env NNC_DATA_CACHE_MAX=30 "$nnc" d.nn --quiet
check test "$(ncache)" = 1
rm -rf cache
ok env NNC_DATA_CACHE_MAX=10 "$nnc" d.nn --quiet
check test "$(ncache)" = 0
export XDG_CACHE_HOME=$saved_xdg

# csv(): a header of numbers is data unless header = true; header = false reads a text line
# as data (and so fails on it)
printf '0,1,2\n1,2,3\n4,5,6\n' > nh.csv
for h in "" ", header = true" ", header = false"; do
  sed "s|data x = idx(\"c.idx.gz\")|data x = csv(\"nh.csv\"$h)|" c.nn > h.nn
  ok "$nnc" h.nn --eval
  if [ "$h" = ", header = true" ]; then has "training data (2 samples)"; else has "training data (3 samples)"; fi
done
printf 'a,b,c\n1,2,3\n' > th.csv
sed 's|data x = idx("c.idx.gz")|data x = csv("th.csv", header = false)|' c.nn > h.nn
bad "$nnc" h.nn --quiet;                              has "th.csv:1:1: expected a number in column 1, got 'a'"
# a message quotes at most 8 escaped characters of a data file, and nothing of one that others
# cannot read: a model may name any file (csv("/etc/shadow") printed a whole line of it)
printf 'root:$6$salt$hash:19618:0:99999:7:::\n' > secret.csv; chmod 600 secret.csv
sed 's|data x = idx("c.idx.gz")|data x = csv("secret.csv", header = false)|' c.nn > s.nn
bad "$nnc" s.nn --quiet;                              has "secret.csv:1:1: expected a number in column 1, got 36 bytes (not shown: others cannot read the file)"
check sh -c "! grep -q 'root\|salt\|hash' out"
chmod 644 secret.csv
bad "$nnc" s.nn --quiet;                              has "secret.csv:1:1: expected a number in column 1, got 'root:\$6\$'... (36 bytes)"
check sh -c "! grep -q 'salt\$hash' out"

# empty data sets are errors, for training and for --eval on the test set
printf '\0\0\x0d\x02\0\0\0\0\0\0\0\x03' > empty.idx
mkidx c.idx.gz 4 3 1
sed 's|data x = idx("c.idx.gz")|&\n    test x = idx("empty.idx")|' c.nn > et.nn
bad "$nnc" et.nn --eval;                              has "empty.idx: input 'x' has no samples (the test set is empty)"
bad "$nnc" et.nn --quiet --save et.st;                has "the test set is empty"
check test ! -e et.st
# the test set loads in a thread beside the training set: with both bad, the training set's
# error is the one reported, every time
sed 's|data x = idx("c.idx.gz")|data x = idx("missing.idx.gz")\n    test x = idx("empty.idx")|' c.nn > bt.nn
bad "$nnc" bt.nn --quiet;                             has "missing.idx.gz: cannot open"
check sh -c "! grep -q empty.idx out"

# A gzip bomb: a .npy.gz declaring 4x3 floats, then 1 GiB of zeros (in 1 MB) is refused at the
# first byte past the declared data, naming it, in megabytes of memory (reading it all took
# 1 GiB).  peak CMD...: runs CMD (output in out) and prints the peak memory, in MiB, of it and
# the compilers it ran.
"$py" - <<'EOF'
import gzip, struct
h = b"{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), }"
h += b" " * (117 - len(h)) + b"\n"
with open("bomb.npy.gz", "wb") as f:
    f.write(gzip.compress(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + bytes(48), mtime=0))
    f.write(gzip.compress(bytes(1 << 20), compresslevel=9, mtime=0) * 1024)
EOF
peak() { "$py" -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=open("out", "w"), stderr=subprocess.STDOUT)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
sys.exit(r.returncode)' "$@"; }
sed 's|data x = idx("c.idx.gz")|data x = npy("bomb.npy.gz")|' c.nn > bomb.nn
mib=$(peak "$nnc" bomb.nn --quiet) && { fail=$((fail+1)); echo "FAIL: the bomb loaded"; }
has "bomb.npy.gz: offset 176: expected the end of the file after shape \\[4, 3\\] of '<f4' (48 data bytes at offset 128), found more"
check test "$mib" -lt 512
# ... and what the model needs is checked against a header before its data is read: an IDX .gz
# declaring [16384, 65536] bytes (1 GiB of zeros) for x: f32[N, 3], and a .npy.gz of 2^28
# labels for y beside x's 4 samples, are refused after their headers
"$py" - <<'EOF'
import gzip, struct
zeros = gzip.compress(bytes(1 << 20), compresslevel=9, mtime=0)
with open("wide.idx.gz", "wb") as f:
    f.write(gzip.compress(bytes([0, 0, 8, 2]) + struct.pack(">II", 16384, 65536), mtime=0) + zeros * 1024)
h = b"{'descr': '|u1', 'fortran_order': False, 'shape': (268435456,), }"
h += b" " * (117 - len(h)) + b"\n"
with open("many.npy.gz", "wb") as f:
    f.write(gzip.compress(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h, mtime=0) + zeros * 256)
EOF
sed 's|c.idx.gz|wide.idx.gz|' c.nn > wide.nn
mib=$(peak "$nnc" wide.nn --quiet) && { fail=$((fail+1)); echo "FAIL: wide.idx.gz loaded"; }
has "wide.idx.gz: each sample has 65536 elements, but input 'x' is f32\\[N,3\\] (3 per sample)"
check test "$mib" -lt 512
sed 's/loss = mean(x @ W)/input y: i32[N]\nloss = mean(x @ W)/; s/data x = idx("c.idx.gz")/&\n    data y = npy("many.npy.gz")/' c.nn > many.nn
mib=$(peak "$nnc" many.nn --quiet) && { fail=$((fail+1)); echo "FAIL: many.npy.gz loaded"; }
has "input 'y' has 268435456 samples but 'x' has 4"
check test "$mib" -lt 512

echo "data: $pass passed, $fail failed"
[ "$fail" = 0 ]
