#!/usr/bin/env bash
# Builds the libFuzzer targets (csrc/fuzz/*.cc: the .model reader, the TOML
# parser, the sampler's arguments; clang, ASan + UBSan) into build/fuzz and runs
# each for a bounded time from its seed corpus in tests/data/fuzz/<target>/;
# prints the number of executions per target.
#   tools/fuzz.sh [SECONDS] [TARGET ...]   (SECONDS per target: default 60, or FUZZ_SECONDS;
#                                           targets: default all of csrc/fuzz)
# Exit status: 0 when no target found a crash, a leak, a sanitizer report or a
# hang (an input running over 10 s). Failing inputs land in build/fuzz/<target>-crash-*.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-${FUZZ_SECONDS:-60}}
shift || true
BUILD=${FUZZ_BUILD:-build/fuzz}
CXX_FUZZ=${CXX_FUZZ:-clang++}
if [ "$#" -gt 0 ]; then
  TARGETS=("$@")
else
  TARGETS=()
  for f in csrc/fuzz/*.cc; do TARGETS+=("$(basename "$f" .cc)"); done
fi
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$CXX_FUZZ" \
    -DCYB_FUZZ=ON -DCYB_BUILD_PYTHON=OFF -DCYB_BUILD_TESTS=OFF >/dev/null
fi
ninja -C "$BUILD" -j "${JOBS:-2}" "${TARGETS[@]}"
failed=0
for t in "${TARGETS[@]}"; do
  seeds=tests/data/fuzz/$t
  if [ ! -d "$seeds" ]; then
    echo "$t: no seed corpus in $seeds (tools/fuzz_corpus.py --all tests/data/fuzz writes it)"
    exit 2
  fi
  mkdir -p "$BUILD/corpus/$t"
  set +e
  "$BUILD/$t" "$BUILD/corpus/$t" "$seeds" -max_total_time="$SECS" -max_len=65536 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$BUILD/$t-" >"$BUILD/$t.log" 2>&1
  rc=$?
  set -e
  execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$BUILD/$t.log")
  if [ "$rc" -ne 0 ]; then
    tail -n 60 "$BUILD/$t.log"
    echo "$t: FAILED (exit $rc) after ${execs:-?} executions; the input is in $BUILD/$t-*"
    failed=1
    continue
  fi
  cov=$(grep -Eo "cov: [0-9]+" "$BUILD/$t.log" | tail -n 1 || true)
  echo "$t: ${execs:-?} executions in ${SECS}s, ${cov:-cov: ?}, no crash"
done
exit "$failed"
