#!/usr/bin/env bash
# The test command of the README. Installs what the tests need (test oracles,
# system packages when run as root), then runs the tiers:
#   1. native: the core and its test programs under ASan/UBSan, the no-allocation
#      test, a bounded libFuzzer run of the .model reader;
#   2. pytest: the op matrix on every CPU path, the full golden sets on the
#      default path, short golden checks (2 prompts, 8 tokens) on every other path.
# The slow tier (full sets on every path, bigger models) is `bash tools/test.sh --slow`.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
SLOW=0
[ "${1:-}" = "--slow" ] && SLOW=1
tier() { echo; echo "=== $* ($(date +%T))"; }

tier "test dependencies"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  pkgs="clang libclang-rt-14-dev mesa-vulkan-drivers ccache"
  dpkg -s $pkgs >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $pkgs >/dev/null; }
fi
python -m pip install -q torch==2.13.0 2>/dev/null || python -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu
python -m pip install -q ".[test]"

tier "native core under AddressSanitizer + UBSan"
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCYB_SANITIZE=ON -DCYB_BUILD_PYTHON=OFF \
  -DCYB_BUILD_TESTS=ON >/dev/null
ninja -C build/asan -j 2 >/dev/null
for t in build/asan/test_*; do
  [ -x "$t" ] || continue
  echo "-- $t"; "$t"
done

if [ -x tools/fuzz.sh ] && command -v clang++ >/dev/null; then
  tier "libFuzzer on the .model reader (bounded)"
  FUZZ_SECONDS=${FUZZ_SECONDS:-60} bash tools/fuzz.sh
fi

tier "pytest: default path (op matrix on every CPU level, full golden sets)"
python -m pytest tests -q -x --ignore=tests/slow

for level in $(python -c "import cyb_llm._core as c; print(' '.join(l for l in c.cpu_levels() if l != c.cpu_level_default()))"); do
  tier "pytest: short golden checks on CPU level $level"
  CYB_CPU_LEVEL=$level CYB_GOLDEN=short python -m pytest tests/test_golden.py tests/test_families_tiny.py -q -x
done

if [ "$SLOW" = 1 ]; then
  tier "slow tier: tests/slow"
  python -m pytest tests/slow -q
fi
