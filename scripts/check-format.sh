#!/usr/bin/env bash
# check-format.sh - every line of C changed since the house style was written down
# (.clang-format's first commit) is formatted as .clang-format says; older lines are left as they
# are until someone edits them.  Prints the diff that would fix it and exits 1 otherwise.
#   scripts/check-format.sh [BASE]     (BASE: a commit to compare with instead)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v git-clang-format >/dev/null 2>&1 || ! git rev-parse --git-dir >/dev/null 2>&1; then
  echo "check-format: skipped (needs git and clang-format's git-clang-format)"
  exit 0
fi
base=${1:-$(git log --diff-filter=A --format=%H -- .clang-format | tail -n 1)}
if [ -z "$base" ] || ! git cat-file -e "$base^{commit}" 2>/dev/null; then
  echo "check-format: skipped (no history before .clang-format: a shallow clone?)"
  exit 0
fi
out=$(git clang-format --diff --extensions c,h "$base" 2>&1 || true)
case "$out" in
  ""|*"no modified files to format"*|*"did not modify any files"*)
    echo "check-format: lines changed since ${base:0:12} follow .clang-format"
    exit 0 ;;
esac
printf '%s\n' "$out"
echo "check-format: the lines above, changed since ${base:0:12}, are not as .clang-format formats them;"
echo "  fix with: git clang-format $base"
exit 1
