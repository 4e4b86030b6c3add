#!/usr/bin/env bash
# Real use under AddressSanitizer + UBSan + LeakSanitizer (the sanitizer tier of
# tools/test.sh): load -> prefill -> greedy generation -> drop, fast and precise,
# for each CPU level and model given; any sanitizer report or error exits non-zero.
#   tools/asan_real_use.sh "LEVEL ..." MODEL.model ...
# EXAMPLE names the program (default build/asan/example_generate; tools/sanitizer_selftest.sh
# passes the copies with a planted bug, tools/test.sh the release build for the other levels).
set -euo pipefail
cd "$(dirname "$0")/.."
EXAMPLE=${EXAMPLE:-build/asan/example_generate}
[ "$#" -ge 2 ] || { echo "usage: $0 \"LEVEL ...\" MODEL ..." >&2; exit 2; }
levels=$1
shift
for level in $levels; do
  for m in "$@"; do
    for mode in "" --precise; do
      # a plain assignment: under set -e the program's failure fails the script
      out=$(CYB_CPU_LEVEL=$level "$EXAMPLE" "$m" $mode -n 3 1 504 3 12)
      echo "-- $(basename "$EXAMPLE") $level $(basename "$m") ${mode:-fast}: $out"
    done
  done
done
