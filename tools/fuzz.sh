#!/usr/bin/env bash
# Builds the libFuzzer target of the .model reader (clang, ASan + UBSan) into
# build/fuzz and runs it for a bounded time; prints the number of executions.
#   tools/fuzz.sh [SECONDS]     (default 60; or FUZZ_SECONDS)
# Exit status: 0 when no crash was found. Crash inputs land in build/fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-${FUZZ_SECONDS:-60}}
BUILD=${FUZZ_BUILD:-build/fuzz}
CXX_FUZZ=${CXX_FUZZ:-clang++}
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$CXX_FUZZ" \
    -DCYB_FUZZ=ON -DCYB_BUILD_PYTHON=OFF -DCYB_BUILD_TESTS=OFF >/dev/null
fi
ninja -C "$BUILD" -j "${JOBS:-2}" fuzz_model_file
SEEDS=$(mktemp -d)
trap 'rm -rf "$SEEDS"' EXIT
python3 tools/fuzz_corpus.py "$SEEDS"
mkdir -p "$BUILD/corpus"
set +e
"$BUILD/fuzz_model_file" "$BUILD/corpus" "$SEEDS" -max_total_time="$SECS" -max_len=65536 -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$BUILD/" >"$BUILD/fuzz.log" 2>&1
rc=$?
set -e
execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$BUILD/fuzz.log")
if [ "$rc" -ne 0 ]; then
  tail -n 60 "$BUILD/fuzz.log"
  echo "fuzz_model_file: FAILED (exit $rc) after ${execs:-?} executions; crash input in $BUILD/"
  exit "$rc"
fi
grep -E "DONE" "$BUILD/fuzz.log" || true
echo "fuzz_model_file: ${execs:-?} executions in ${SECS}s, no crash"
