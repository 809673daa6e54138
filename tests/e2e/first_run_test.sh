#!/usr/bin/env bash
# first_run_test.sh NNC - what a newcomer's first runs meet (issue 28): --target auto and
# device = auto say in one line which device they chose.
set -u
nnc=$(realpath "$1"); here=$(cd "$(dirname "$0")" && pwd); models=$here/../../models
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
pass=0; fail=0
ok()    { if "$@" >"$dir/out" 2>&1; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL (status): $*"; cat "$dir/out"; fi; }
bad()   { if "$@" >"$dir/out" 2>&1; then fail=$((fail+1)); echo "FAIL (succeeded): $*"; cat "$dir/out"; else pass=$((pass+1)); fi; }
has()   { if grep -q -- "$1" "$dir/out"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: no '$1' in:"; cat "$dir/out"; fi; }
hasnt() { if grep -q -- "$1" "$dir/out"; then fail=$((fail+1)); echo "FAIL: '$1' in:"; cat "$dir/out"; else pass=$((pass+1)); fi; }
in_dir() { local d=$1; shift; pushd "$d" >/dev/null || exit 1; "$@"; popd >/dev/null || exit 1; }   # counts stay
lines() { local n; n=$(grep -c -- "$1" "$dir/out"); if [ "$n" = "$2" ]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: '$1' $n times, not $2:"; cat "$dir/out"; fi; }

# ---- --target auto / device = auto: one line on stderr says which device, then it trains
chosen="^nnc: \(using cuda:0 (.*)\|no CUDA device (.*), using the CPU\)$"
ok "$nnc" "$models/linreg.nn" --target auto --epochs 2
has "$chosen"; lines "^nnc: " 1; has "epoch 2/2"
# without a GPU (this machine, CI) the reason is named: no driver, no device, no cuBLAS, ...
if [ ! -e /dev/nvidiactl ]; then has "^nnc: no CUDA device (.*), using the CPU$"; fi
ok "$nnc" "$models/linreg.nn" --target auto --epochs 2 --quiet;  hasnt "^nnc: "
sed 's/^    seed = 0$/&\n    device = auto/' "$models/linreg.nn" > "$dir/auto.nn"
ok "$nnc" "$dir/auto.nn" --epochs 2;            has "$chosen"; has "epoch 2/2"
ok "$nnc" "$dir/auto.nn" --epochs 2 --target cpu; hasnt "^nnc: "
ok "$nnc" "$models/linreg.nn" --epochs 2;        hasnt "^nnc: "
sed 's/device = auto/device = tpu/' "$dir/auto.nn" > "$dir/tpu.nn"
bad "$nnc" "$dir/tpu.nn";                       has "device is cpu, cuda, cuda(k) or auto"
bad "$nnc" "$models/linreg.nn" --target tpu;    has "--target takes cpu, cuda or auto, not 'tpu'"

# ---- a relative data path is read from the model file's folder, from any directory; when it
# cannot be, the error names the path tried and the line that wrote it
mkdir -p "$dir/runs"
printf '1,2\n3,4\n5,6\n7,8\n' > "$dir/runs/d.csv"
cat > "$dir/runs/m.nn" <<'NN'
input x: f32[N, 2]
param W: f32[2, 1] = normal(0, 1)
loss = mean(x @ W)
train {
    data x = csv("d.csv")
    batch = 2
    minimize loss
}
NN
ok "$nnc" "$dir/runs/m.nn" --quiet
in_dir "$dir" ok "$nnc" runs/m.nn --quiet
in_dir / ok "$nnc" "$dir/runs/m.nn" --quiet
in_dir "$dir/runs" ok "$nnc" m.nn --quiet
in_dir "$dir" ok "$nnc" ./runs/../runs//m.nn --quiet
ln -s "$dir/runs/m.nn" "$dir/link.nn"   # the folder of the path as given (a link is not followed)
in_dir "$dir" bad "$nnc" link.nn --quiet; has "^nnc: error: ./d.csv: cannot open\|^nnc: error: d.csv: cannot open"
# a model from a pipe has no folder: the current directory
in_dir "$dir/runs" ok "$nnc" <(cat "$dir/runs/m.nn") --quiet
in_dir "$dir" bad "$nnc" <(cat "$dir/runs/m.nn") --quiet
has "^nnc: error: d.csv: cannot open: No such file or directory (/dev/fd/[0-9]*:5:14 names \"d.csv\": the model came from a pipe, so a relative path is read from the current directory)$"
sed 's/csv("d.csv")/idx("train.gz")/' "$dir/runs/m.nn" > "$dir/runs/missing.nn"
in_dir "$dir" bad "$nnc" runs/missing.nn --quiet
has '^nnc: error: runs/train.gz: cannot open: No such file or directory (runs/missing.nn:5:14 names "train.gz": a relative path is read from the model file.s folder)$'
# an absolute path is read as it is
sed "s|csv(\"d.csv\")|csv(\"$dir/runs/d.csv\")|" "$dir/runs/m.nn" > "$dir/abs.nn"
in_dir / ok "$nnc" "$dir/abs.nn" --quiet

# ---- --eval-out on a model whose outputs are all scalars: a warning that the file will hold no
# tensor (its loss and metrics are still there, as metadata: mpi_test.py reads them)
ok "$nnc" "$models/linreg.nn" --eval --eval-out "$dir/lr.st"
has "^nnc: warning: --eval-out $dir/lr.st: .*linreg.nn declares no per-sample output (output NAME = ..., e.g. output probs = softmax(logits)), so the file will hold no tensor, only the loss and metrics as metadata$"
ok /usr/bin/python3 -c "import json, struct, sys; f = open(sys.argv[1], 'rb'); n = struct.unpack('<Q', f.read(8))[0]
h = json.loads(f.read(n)); assert set(h) == {'__metadata__'} and 'loss' in h['__metadata__'], h" "$dir/lr.st"
ok "$nnc" "$here/eval_out.nn" --eval --eval-out "$dir/eo.st"; has "p f32\[100,1\] -> $dir/eo.st"; hasnt "warning: --eval-out"

# ---- --dump-after: fuse, schedule and plan each print what that pass made; a pass that did not
# run is an error saying what makes it run, never an empty success
ok "$nnc" "$models/mlp.nn" --dump-after=fuse;     cp "$dir/out" "$dir/fuse"
has "^; ---- entry train_step after fuse: 16 groups (schedule orders them), 4 transposes folded into products, 2 updates"
has "^    group  {add %8, relu %9}  ; line 18$"; has "^    folded  update %39 into the GEMM of %22"; hasnt "\[act+"
ok "$nnc" "$models/mlp.nn" --dump-after=schedule; cp "$dir/out" "$dir/schedule"
has "^; ---- entry train_step after schedule: 13 launches in order ----$"
has "^    #1   kernel  {add %8, relu %9}  reads %7 %3  writes %9  ; line 18$"; hasnt "\[act+"
ok "$nnc" "$models/mlp.nn" --dump-after=plan;     cp "$dir/out" "$dir/plan"
has "^    #1   kernel  {add %8, relu %9}  writes %9\[act+0\]  over f32\[B,128\]  ; line 18$"
if cmp -s "$dir/fuse" "$dir/schedule" || cmp -s "$dir/schedule" "$dir/plan"; then
    fail=$((fail+1)); echo "FAIL: --dump-after fuse, schedule and plan print the same"; else pass=$((pass+1)); fi
bad "$nnc" "$models/mlp.nn" --dump-after=autocast
has "^nnc: error: --dump-after=autocast: the autocast pass did not run on this model, .*: it runs only in mixed precision"
ok "$nnc" "$models/mlp.nn" --dump-after=autocast --precision bf16; has "^; ---- after autocast ----$"
bad "$nnc" "$models/mlp.nn" --dump-after=allreduce
has "^nnc: error: --dump-after=allreduce: the allreduce pass did not run .*: under mpirun -np N, or with --data-parallel$"
ok "$nnc" "$models/mlp.nn" --dump-after=allreduce --data-parallel; has "^; ---- after allreduce ----$"
printf 'input x: f32[B, 4]\nparam W: f32[4, 2] = normal(0, 1)\noutput y = x @ W\n' > "$dir/fwd.nn"
bad "$nnc" "$dir/fwd.nn" --dump-after=autograd;  has "the autograd pass did not run .*a loss to minimize"
ok "$nnc" "$dir/fwd.nn" --dump-after=fuse;       has "^; ---- entry eval after fuse: 1 groups"
# ---- -o DIR/ prints DIR/NAME.c, not DIR//NAME.c
ok "$nnc" "$models/linreg.nn" --target cpu -o "$dir/aot//"
has "^wrote $dir/aot/linreg.c, $dir/aot/linreg.h, $dir/aot/liblinreg.a$"; hasnt "//"
ok test -f "$dir/aot/liblinreg.a"

echo "first run: $pass passed, $fail failed"
[ "$fail" = 0 ]
