#!/usr/bin/env bash
# scripts/gpu-base.sh COMMIT - puts COMMIT's tree into tmp/gpucarry/base.tgz (with a file BASE
# naming it), which `NNC_RUN=attn bash scripts/gpu-run.sh` builds beside the working tree on the
# GPU machine, to time GPT-2's step against it in the same call.  Run after prepare.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
c=$(git rev-parse --short "${1:?usage: scripts/gpu-base.sh COMMIT}")
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
git archive "$c" | tar -x -C "$d"
echo "$c" > "$d/BASE"
mkdir -p tmp/gpucarry
tar -czf tmp/gpucarry/base.tgz -C "$d" $(ls -A "$d")
echo "tmp/gpucarry/base.tgz: $c ($(du -h tmp/gpucarry/base.tgz | cut -f1))"
