#!/usr/bin/env bash
# nox reproducibility: builds tools/nox_golden.cc (graph executor + nox backend
# + the container reader, nothing else) with every available compiler among
# g++ / clang++ at -O0 and -O3 (FP flags of CMakeLists.txt: -ffp-contract=off
# for nox), runs each on the golden model and compares with
# tests/data/nox_golden.txt. Exit status 0 only if every build matches.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-$(mktemp -d)}
python3 tests/nox_golden.py write "$WORK/golden.model" >/dev/null
SRCS="tools/nox_golden.cc csrc/backends/nox/nox_backend.cc csrc/backends/nox/nox_math.cc csrc/backends/nox/sha256.cc
      csrc/core/quant.cc csrc/core/rope.cc csrc/model/nox_tracer.cc csrc/graph/graph.cc csrc/graph/fusion.cc csrc/graph/executor.cc
      csrc/format/toml.cc csrc/format/model_file.cc $(ls csrc/dispatch/*.cc)
      csrc/core/errors.cc csrc/core/dtype.cc csrc/core/frame_allocator.cc csrc/core/thread_pool.cc
      csrc/core/config_check.cc csrc/core/memory_budget.cc"
status=0
ran=0
for cxx in ${CXXS:-g++ clang++}; do
  command -v "$cxx" >/dev/null || { echo "skip $cxx (not installed)"; continue; }
  for opt in ${OPTS:--O0 -O3}; do
    exe="$WORK/nox_golden_${cxx//+/p}_${opt#-}"
    "$cxx" -std=c++17 $opt -ffp-contract=off -Icsrc -pthread $SRCS -o "$exe"
    if "$exe" "$WORK/golden.model" | diff -u tests/data/nox_golden.txt - >/dev/null; then
      echo "ok   $cxx $opt"
    else
      echo "FAIL $cxx $opt"; "$exe" "$WORK/golden.model" | diff -u tests/data/nox_golden.txt - || true
      status=1
    fi
    ran=$((ran + 1))
  done
done
[ "$ran" -gt 0 ] || { echo "no compiler found"; exit 1; }
exit $status
