#!/usr/bin/env bash
# Shows that the sanitizer tier's real-use command fails when the program has a bug:
# runs tools/asan_real_use.sh (the command the tier runs) on three copies of the
# example program built under CYB_SANITIZE, each with one planted bug (a leak, a heap
# overflow, a signed overflow: csrc/tests/example_generate.cc, CYB_PLANT), and requires
# a non-zero exit with the matching sanitizer report for each. Exit 0 only then.
#   tools/sanitizer_selftest.sh LEVEL MODEL.model   (BUILD: default build/asan)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/asan}
[ "$#" -eq 2 ] || { echo "usage: $0 LEVEL MODEL" >&2; exit 2; }
level=$1 model=$2
ninja -C "$BUILD" plant_leak plant_overflow plant_ubsan >/dev/null
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for plant in leak overflow ubsan; do
  case $plant in
    leak) report="ERROR: LeakSanitizer: detected memory leaks" ;;
    overflow) report="ERROR: AddressSanitizer: heap-buffer-overflow" ;;
    ubsan) report="runtime error: signed integer overflow" ;;
  esac
  rc=0
  EXAMPLE=$BUILD/plant_$plant bash tools/asan_real_use.sh "$level" "$model" >"$log" 2>&1 || rc=$?
  if [ "$rc" = 0 ]; then
    cat "$log"; echo "sanitizer self-test: the planted $plant passed the real-use command (exit 0)"; exit 1
  fi
  if ! grep -q "$report" "$log"; then
    tail -n 30 "$log"
    echo "sanitizer self-test: the planted $plant failed (exit $rc) but without \"$report\""; exit 1
  fi
  echo "planted $plant: the real-use command exits $rc with \"$report\""
done
echo "sanitizer self-test: each planted bug fails the tier's command"
