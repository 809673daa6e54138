#!/usr/bin/env bash
# convnets.sh - the accuracy runs of models/convnet.nn and models/convnet_bn.nn on the whole of
# Fashion-MNIST (60,000 training images, the 10,000 test images after every epoch), with the
# settings in the model files.  Writes bench/out/convnet*.jsonl (--metrics) and prints, per
# model, each epoch's test accuracy and time and the best accuracy.  Fashion-MNIST's own table
# lists its convnet at 91.6% and "2 Conv + pooling + BN" at 93.4%.
#
#   bench/convnets.sh [NNC] [extra nnc flags, e.g. --target cuda]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
nnc=${1:-$here/../build/nnc}
shift || true
mkdir -p "$here/out"
for m in convnet convnet_bn; do
  out="$here/out/$m.jsonl"
  "$nnc" "$here/../models/$m.nn" --quiet --metrics "$out" "$@"
  /usr/bin/python3 - "$out" "$m" <<'PY'
import json, sys
eps = [r for r in map(json.loads, open(sys.argv[1])) if r["type"] == "epoch"]
for r in eps:
    print("%s epoch %2d  test accuracy %.2f%%  test loss %.4f  at %.1f s" % (sys.argv[2], r["epoch"], 100 * r["accuracy"], r["test_loss"], r["seconds"]))
best = max(eps, key=lambda r: r["accuracy"])
print("%s: best %.2f%% at epoch %d; %d epochs in %.1f s" % (sys.argv[2], 100 * best["accuracy"], best["epoch"], len(eps), eps[-1]["seconds"]))
PY
done
