#!/usr/bin/env bash
# shared_kernels.sh NNC SRC - launches that differ only in their buffers share one kernel
# (codegen/cuda/render_cuda.c): gpt.nn's kernel count does not grow with its layers, each
# shared kernel lists the launches it runs as, and the source is a fraction of one kernel per
# launch.  Correctness of the shared kernels is gpt_torch_emu's (a GPT against PyTorch).
set -u
nnc=$1; src=$2; dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
fail=0
kernels() { grep -c '^extern "C" __global__ void __launch_bounds__' "$1"; }
"$nnc" "$src/models/gpt.nn" --target cuda --emit cuda > "$dir/4.cu" || { echo "FAIL: --emit cuda"; exit 1; }
sed 's/^n_layer = 4$/n_layer = 8/' "$src/models/gpt.nn" > "$dir/gpt8.nn"
grep -q '^n_layer = 8$' "$dir/gpt8.nn" || { echo "FAIL: gpt.nn no longer sets n_layer = 4"; exit 1; }
"$nnc" "$dir/gpt8.nn" --target cuda --emit cuda > "$dir/8.cu" || { echo "FAIL: --emit cuda (8 layers)"; exit 1; }
k4=$(kernels "$dir/4.cu"); k8=$(kernels "$dir/8.cu")
# every kernel launch of every entry: the launch a kernel is named after, and those it lists
launches=$(grep -c '^/\* [a-z_]* launch [0-9]*: ' "$dir/4.cu")
shared=$(grep -A3 '^/\* [a-z_]* launch [0-9]*: ' "$dir/4.cu" | grep -o '[0-9][0-9]*[,;]\?' | wc -l)
echo "gpt.nn: $k4 kernels with 4 layers, $k8 with 8; $(wc -c < "$dir/4.cu") bytes of CUDA"
[ "$k4" = "$k8" ] || { echo "FAIL: the kernel count grows with the layers ($k4, $k8)"; fail=1; }
[ "$k4" -le 100 ] || { echo "FAIL: $k4 kernels for gpt.nn (71 when written)"; fail=1; }
grep -q '^ \*   also runs as launches train_step [0-9]*, [0-9]*' "$dir/4.cu" ||
  { echo "FAIL: no kernel lists the train_step launches it also runs as"; fail=1; }
grep -q 'unsigned \*ws, int64_t off0' "$dir/4.cu" || { echo "FAIL: no offset parameters"; fail=1; }
# mixed precision too: its kernels keep half values' bits in locals of their own (h<node>)
"$nnc" "$src/models/gpt.nn" --target cuda --precision bf16 --emit cuda > "$dir/4h.cu" &&
  "$nnc" "$dir/gpt8.nn" --target cuda --precision bf16 --emit cuda > "$dir/8h.cu" ||
  { echo "FAIL: --emit cuda --precision bf16"; exit 1; }
k4h=$(kernels "$dir/4h.cu"); k8h=$(kernels "$dir/8h.cu")
echo "gpt.nn in bf16: $k4h kernels with 4 layers, $k8h with 8"
[ "$k4h" = "$k8h" ] || { echo "FAIL: in bf16 the kernel count grows with the layers ($k4h, $k8h)"; fail=1; }
[ "$launches" -gt 0 ] && [ "$shared" -gt 0 ] || { echo "FAIL: no launches ($launches, $shared)"; fail=1; }
exit $fail
