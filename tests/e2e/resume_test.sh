#!/usr/bin/env bash
# A run killed with SIGKILL at random moments and resumed each time from its last checkpoint
# ends bit-identical to an uninterrupted run from the same seed (parameters, optimizer state,
# step, data order).  Also: SIGINT saves and stops with status 130, and --resume continues.
set -u
nnc=$1; dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
model=$(dirname "$0")/resume.nn
pass=0; fail=0
check() { if "$@"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $*"; fi; }

# killed MODEL SAVE EVERY [ARGS]: runs MODEL with --resume, killing it with SIGKILL at random
# moments until a run finishes; prints how many kills landed.  The window follows how long a
# whole run takes here (80 ms on a quiet machine with the compile cache warm, seconds under the
# sanitizers): a fixed window let a fast run finish before the first kill, proving nothing
killed() {
  local model=$1 save=$2 every=$3; shift 3
  local t0 run_ms n=0 round attempt pid ms st
  t0=$(date +%s%N)
  "$nnc" "$model" --quiet --save "$dir/timing.st" >/dev/null 2>&1
  run_ms=$(( ($(date +%s%N) - t0) / 1000000 + 1 ))
  for round in 1 2 3 4 5; do
    rm -f "$save" "$@"
    for attempt in $(seq 1 200); do
      "$nnc" "$model" --quiet --save "$save" --save-every "$every" --resume \
        ${1:+--metrics "$1"} >/dev/null &
      pid=$!
      # a random moment within a whole run's time; the window widens each attempt so a run
      # killed before its first checkpoint each time still progresses
      ms=$((RANDOM % (run_ms * (3 + attempt) / 4 + 1) + 2))
      sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
      if kill -9 "$pid" 2>/dev/null; then n=$((n+1)); fi
      wait "$pid" 2>/dev/null; st=$?
      [ "$st" = 0 ] && break
    done
    # finished before any kill landed: start again from nothing rather than pass untested
    [ "$n" -gt 0 ] && break
  done
  echo "$n"
}

"$nnc" "$model" --quiet --save "$dir/ref.st" --metrics "$dir/ref.jsonl" || { echo "FAIL: uninterrupted run"; exit 1; }
kills=$(killed "$model" "$dir/run.st" 7 "$dir/run.jsonl")
echo "killed $kills times with SIGKILL, then finished"
check test "$kills" -gt 0
check cmp "$dir/ref.st" "$dir/run.st"
# --metrics with --resume keeps what the killed runs wrote up to their checkpoints and drops what
# was computed again (and a line a kill cut short): the file reads as the uninterrupted run's,
# but for the epochs' seconds
strip() { sed 's/,"seconds":[0-9.e+-]*//' "$1"; }
check cmp <(strip "$dir/ref.jsonl") <(strip "$dir/run.jsonl")

# Killed just after the final save, before anything else (kill_after_save.c, LD_PRELOAD): the
# records went out before the checkpoint, so resuming the finished run leaves the metrics file
# whole.  The save came first, and such a kill lost every record still buffered (all of them in
# a run this short: metrics go out every half second)
if [ -n "${2:-}" ]; then
  "$nnc" "$model" --quiet --epochs 1 --batch 64 --save "$dir/fin0.st" --metrics "$dir/fin0.jsonl"
  LD_PRELOAD=$2 NNC_KILL_AFTER_RENAME=fin.st "$nnc" "$model" --quiet --epochs 1 --batch 64 --save "$dir/fin.st" \
    --metrics "$dir/fin.jsonl" 2>/dev/null; st=$?
  check test "$st" = 137
  check cmp "$dir/fin0.st" "$dir/fin.st"
  "$nnc" "$model" --quiet --epochs 1 --batch 64 --save "$dir/fin.st" --resume --metrics "$dir/fin.jsonl"
  check test "$(wc -l < "$dir/fin0.jsonl")" -gt 10
  check cmp <(strip "$dir/fin0.jsonl") <(strip "$dir/fin.jsonl")
fi

# Gradient accumulation and a per-step schedule: a run stops and saves between optimizer steps
# (never inside a group of micro-batches, whose partial sum checkpoints do not keep), and the
# step counter carries the schedule, so killed and resumed it still ends bit-identical
sed -e 's/batch = 16/batch = 16\n    accumulate = 3/' \
    -e 's/lr_schedule = step_lr(step_size = 1, gamma = 0.5)/lr_schedule = warmup_cosine(warmup = 10)/' \
    "$model" > "$dir/acc.nn"
check grep -q "accumulate = 3" "$dir/acc.nn"
"$nnc" "$dir/acc.nn" --quiet --save "$dir/accref.st" || { echo "FAIL: uninterrupted accumulate run"; exit 1; }
akills=$(killed "$dir/acc.nn" "$dir/acc.st" 4)
echo "accumulate: killed $akills times with SIGKILL, then finished"
check test "$akills" -gt 0
check cmp "$dir/accref.st" "$dir/acc.st"
# a kill after the last save: resumed from the finished run's checkpoint, nothing is left to
# train and the checkpoint is saved again unchanged (its last epoch's loss sum included)
cp "$dir/accref.st" "$dir/again.st"
"$nnc" "$dir/acc.nn" --quiet --save "$dir/again.st" --resume || { echo "FAIL: resuming a finished run"; fail=$((fail+1)); }
check cmp "$dir/accref.st" "$dir/again.st"

# SIGINT: stops at the end of a step, saves, exits 130; --resume finishes bit-identical
rm -f "$dir/int.st"
"$nnc" "$model" --quiet --save "$dir/int.st" --metrics "$dir/int.jsonl" &
pid=$!
# SIGINT once training has started (the handler is installed then), not while loading
for i in $(seq 1 500); do [ -s "$dir/int.jsonl" ] && break; sleep 0.01; done
kill -INT "$pid"; wait "$pid"; st=$?
if [ "$st" = 130 ]; then
  check test -s "$dir/int.st"
  "$nnc" "$model" --quiet --save "$dir/int.st" --resume
  check cmp "$dir/ref.st" "$dir/int.st"
else
  echo "note: the run finished before SIGINT arrived (status $st)"; check test "$st" = 0
fi
# SIGINT at a known step (NNC_TEST_SIGINT_STEP raises it as that step is recorded): mid-epoch it
# stops after the step; at an epoch's last step (128 of 128) after the epoch's records, which the
# resumed run, starting at the next epoch, would not write (the epoch's line and record were lost
# until this was fixed: a flake of emu_pipeline); resumed, both end as the uninterrupted run
for s in 128 200; do
  rm -f "$dir/sig.st" "$dir/sig.jsonl"
  NNC_TEST_SIGINT_STEP=$s "$nnc" "$model" --quiet --save "$dir/sig.st" --metrics "$dir/sig.jsonl" 2>"$dir/err"
  check test "$?" = 130
  check grep -q "^nnc: interrupted at epoch [12], step $s; saving" "$dir/err"
  "$nnc" "$model" --quiet --save "$dir/sig.st" --resume --metrics "$dir/sig.jsonl"
  check cmp "$dir/ref.st" "$dir/sig.st"
  check cmp <(strip "$dir/ref.jsonl") <(strip "$dir/sig.jsonl")
done
# A file without optimizer state (a --save-dtype export, a PyTorch file) is refused by --resume,
# which went on with zero moments as if nothing were missing; --resume-fresh-optimizer takes its
# parameters and position, and starts the optimizer fresh at step 0, saying so
"$nnc" "$model" --quiet --epochs 1 --save "$dir/exp.st" --save-dtype bf16
cp "$dir/exp.st" "$dir/exp0.st"
"$nnc" "$model" --quiet --save "$dir/exp.st" --resume 2>"$dir/err"; st=$?
check test "$st" = 1
check grep -q "exp.st: cannot resume the optimizer: 4 of its 4 state tensors are missing (the first: 'optimizer.w1.exp_avg')" "$dir/err"
check cmp "$dir/exp.st" "$dir/exp0.st"
"$nnc" "$model" --save "$dir/exp.st" --resume --resume-fresh-optimizer --metrics "$dir/fresh.jsonl" >"$dir/out" 2>"$dir/err"
check test "$?" = 0
check grep -q "the optimizer starts fresh at step 0 (.*exp.st's optimizer state: it holds none)" "$dir/err"
check grep -q "^resuming from .*exp.st: epoch 2, sample 0" "$dir/out"
check grep -q '^{"type":"step","epoch":2,"step":1,' "$dir/fresh.jsonl"
echo "resume: $pass passed, $fail failed"
[ "$fail" = 0 ]
