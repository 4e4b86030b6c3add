#!/usr/bin/env bash
# nox reproducibility: builds tools/nox_golden.cc (graph executor + nox backend
# + the container reader, nothing else) and tools/nox_golden2.cc (the version-2
# graph run + nox) with every available compiler among g++ / clang++ at -O0 and
# -O3 (FP flags of CMakeLists.txt: -ffp-contract=off for nox), runs the first on
# the golden model and compares with tests/data/nox_golden.txt, the second on the
# Silero VAD v6 graph (imported from faster_whisper's asset by the Python package: the
# source tree's when it holds a built _core, else the installed one) and compares with tests/data/nox_golden_silero.txt. Without
# faster_whisper / onnx the Silero half is skipped (said so). Exit status 0 only if
# every build matches.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-$(mktemp -d)}
python3 tests/nox_golden.py write "$WORK/golden.model" >/dev/null
SILERO=""
# the source tree's package when a dev build put its _core there, else the installed one (pip install .)
PP=""
if ls python/cyb_llm/_core*.so >/dev/null 2>&1 || ls python/cyb_llm/_core*.pyd >/dev/null 2>&1; then PP=python; fi
if PYTHONPATH=$PP python3 - "$WORK/vad.model" <<'PY' >/dev/null 2>"$WORK/import.log"
import os, sys
import faster_whisper
from cyb_llm.cli import main
src = os.path.join(os.path.dirname(faster_whisper.__file__), "assets", "silero_vad_v6.onnx")
sys.exit(main(["import", src, "-o", sys.argv[1]]))
PY
then SILERO="$WORK/vad.model"
else echo "skip the Silero VAD check (import failed: $(tail -1 "$WORK/import.log"))"
fi
COMMON="csrc/backends/nox/nox_backend.cc csrc/backends/nox/nox_math.cc csrc/backends/nox/sha256.cc csrc/backends/nox/nox_v2.cc
      csrc/core/quant.cc csrc/core/rope.cc csrc/format/toml.cc csrc/format/model_file.cc $(ls csrc/dispatch/*.cc)
      csrc/core/errors.cc csrc/core/dtype.cc csrc/core/frame_allocator.cc csrc/core/thread_pool.cc
      csrc/core/config_check.cc csrc/core/memory_budget.cc"
SRCS="tools/nox_golden.cc csrc/model/nox_tracer.cc csrc/graph/graph.cc csrc/graph/fusion.cc csrc/graph/executor.cc $COMMON"
SRCS2="tools/nox_golden2.cc csrc/model/array_graph_run.cc csrc/model/array_graph_plan.cc csrc/graph/array_graph.cc csrc/graph/array_fusion.cc csrc/graph/graph.cc csrc/graph/fusion.cc $COMMON"
status=0
ran=0
check() {  # name, exe, model, golden file
  if "$2" "$3" | diff -u "$4" - >/dev/null; then
    echo "ok   $1"
  else
    echo "FAIL $1"; "$2" "$3" | diff -u "$4" - || true
    status=1
  fi
}
# the object of source $2 in folder $1 (one per source path)
obj_of() { echo "$1/$(echo "$2" | tr / _).o"; }
export -f obj_of
for cxx in ${CXXS:-g++ clang++}; do
  command -v "$cxx" >/dev/null || { echo "skip $cxx (not installed)"; continue; }
  for opt in ${OPTS:--O0 -O3}; do
    exe="$WORK/nox_golden_${cxx//+/p}_${opt#-}"
    # each source compiled once per build (the two programs share COMMON), on every core
    obj="$exe.o"; mkdir -p "$obj"
    srcs=$SRCS; [ -z "$SILERO" ] || srcs="$SRCS $SRCS2"
    printf '%s\n' $srcs | sort -u | xargs -P "$(nproc)" -I{} bash -c \
      "\"$cxx\" -std=c++17 $opt -ffp-contract=off -Icsrc -pthread -c {} -o \"\$(obj_of '$obj' {})\""
    "$cxx" -pthread $(for f in $SRCS; do obj_of "$obj" "$f"; done) -o "$exe"
    check "$cxx $opt" "$exe" "$WORK/golden.model" tests/data/nox_golden.txt
    if [ -n "$SILERO" ]; then
      "$cxx" -pthread $(for f in $SRCS2; do obj_of "$obj" "$f"; done) -o "$exe.v2"
      check "$cxx $opt silero (graph v2)" "$exe.v2" "$SILERO" tests/data/nox_golden_silero.txt
    fi
    ran=$((ran + 1))
  done
done
[ "$ran" -gt 0 ] || { echo "no compiler found"; exit 1; }
exit $status
