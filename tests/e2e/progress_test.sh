#!/usr/bin/env bash
# Progress inside an epoch: on a terminal (a pseudo-terminal from `script`), one line redrawn
# with \r as tqdm draws it (steps, a bar, percent, rate, loss, ETA), at most about 10 times a
# second however short the steps, fitted to the terminal's width, and erased before the epoch's
# line; nothing of it when stderr is not a terminal; --log-every N prints plain lines instead.
set -u
nnc=$1; here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
pass=0; fail=0
ok()    { if "$@" >"$dir/out" 2>"$dir/err"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL (status): $*"; cat "$dir/out" "$dir/err"; fi; }
bad()   { if "$@" >"$dir/out" 2>&1; then fail=$((fail+1)); echo "FAIL (succeeded): $*"; else pass=$((pass+1)); fi; }
check() { if eval "$1"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $2"; cat -v "$dir/out" | head -c 2000; echo; fi; }
m=$here/progress.nn
# tty M [ARGS]: runs nnc under a pseudo-terminal of 80 columns (stdout and stderr both on it)
tty() { script -q -e -c "stty cols ${COLS:-80}; $(printf '%q ' "$nnc" "$m" "$@")" /dev/null; }
cd "$dir"

# a terminal: the bar, then "\r\033[K" (erase) just before each epoch line
ok tty
check "grep -q \$'epoch 1/2  300/300 \\\\[=*\\\\] 100%  .* step/s  loss 0.9771  ETA 0:00:00' out" "the full bar of epoch 1"
check "grep -q \$'\\r\\033\\\\[Kepoch 1/2  step 300  loss 0.977116  test_loss 0.914746' out" "the bar erased before the epoch line"
check "grep -q \$'\\r\\033\\\\[Kepoch 2/2  step 600  loss 0.970331' out" "the bar erased before the second epoch line"
# never drawn per step: 600 steps of microseconds are 2 draws an epoch (its first and last step)
draws=$(grep -o $'\r''epoch [0-9]/2  [0-9]*/300 ' out | wc -l)
check "[ $draws -ge 4 ] && [ $draws -le 8 ]" "drawn $draws times for 600 short steps (expected 4 to 8)"
# a narrow terminal: the bar shrinks, then goes; no line wraps
COLS=60 ok tty
check "grep -q \$'\\repoch 2/2  300/300  100%' out" "no bar on a 60-column terminal"
COLS=40 ok tty
check "! tr '\r' '\n' <out | sed 's/\x1b\[K//g' | grep '/300' | awk 'length > 39' | grep -q ." "a bar longer than 39 columns on a 40-column terminal"
COLS=120 ok tty
check "grep -q \$'\\repoch 2/2  300/300 \\\\[==============================\\\\] 100%' out" "a bar of 30 on a 120-column terminal"
# --quiet on a terminal: nothing at all
ok tty --quiet
check "[ ! -s out ]" "--quiet printed something on a terminal"

# not a terminal: exactly the epoch lines, nothing on stderr
ok "$nnc" "$m"
check "[ ! -s err ] && [ \$(wc -l <out) = 2 ] && ! grep -q \$'\\r' out" "plain output is the two epoch lines"
# --log-every 100: a line at steps 100 and 200 of each epoch (300 and 600 end epochs)
ok "$nnc" "$m" --log-every 100
check "[ \$(wc -l <out) = 6 ]" "--log-every 100: 6 lines"
check "grep -q '^epoch 1/2  step 100  loss 1.001408  100/300  .* step/s  ETA 0:00:00\$' out" "a step line"
check "grep -q '^epoch 2/2  step 500  loss 0.976514  200/300  ' out" "a step line in epoch 2"
check "grep -q '^epoch 2/2  step 600  loss 0.970331  test_loss 0.915823' out" "the epoch line stays"
# --log-every longer than an epoch: only the epochs in which a multiple of N fell, and the last
ok "$nnc" "$m" --log-every 400 --epochs 5
# (steps 400 and 800 fall inside epochs 2 and 3, 1200 ends epoch 4)
check "[ \"\$(awk '{print \$2, \$4}' out | tr '\n' ' ')\" = '2/5 400 2/5 600 3/5 800 3/5 900 4/5 1200 5/5 1500 ' ]" "--log-every 400 over 5 epochs of 300 steps"
ok "$nnc" "$here/../../models/linreg.nn" --log-every 250
check "[ \"\$(cut -d' ' -f2 out | tr '\n' ' ')\" = '250/1000 500/1000 750/1000 1000/1000 ' ]" "linreg --log-every 250: 4 lines"
bad "$nnc" "$m" --log-every 0;  check "grep -q -- '--log-every: expects an integer from 1' out" "--log-every 0 refused"
# on a terminal, the log lines and the bar share it: the bar is erased before each log line
ok tty --log-every 100
check "grep -q \$'\\r\\033\\\\[Kepoch 1/2  step 200  loss 0.984987  200/300' out" "bar erased before a log line"
echo "progress: $pass passed, $fail failed"
[ "$fail" = 0 ]
