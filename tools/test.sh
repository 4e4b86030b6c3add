#!/usr/bin/env bash
# The test command of the README. Installs what the tests need (test oracles;
# system packages when run as root), then runs the tiers:
#   1. native: the core and its test programs under ASan + UBSan; a release
#      build of the test programs (no-allocation test, the C++ example);
#      a bounded libFuzzer run of the .model reader;
#   2. pytest: the op matrix on every CPU level, the full golden sets on the
#      default path, then short golden checks (2 prompts, 8 tokens) on every
#      other CPU level and on wgpu+rs (lavapipe).
# The slow tier (tests/slow: llama.cpp fidelity, arm64 NEON under qemu, larger
# models) runs with `bash tools/test.sh --slow`.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
SLOW=0
[ "${1:-}" = "--slow" ] && SLOW=1
JOBS=${JOBS:-2}
tier() { echo; echo "=== $* ($(date +%T))"; }

tier "test dependencies"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  pkgs="clang libclang-rt-14-dev mesa-vulkan-drivers ccache"
  dpkg -s $pkgs >/dev/null 2>&1 || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $pkgs >/dev/null; }
fi
python -m pip install -q torch==2.13.0
python -m pip install -q ".[test]"

tier "native core and test programs under AddressSanitizer + UBSan"
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCYB_SANITIZE=ON -DCYB_BUILD_PYTHON=OFF \
  -DCYB_BUILD_TESTS=ON >/dev/null
ninja -C build/asan -j "$JOBS" >/dev/null
# test_no_alloc also runs the real decoder forward of these files (curated and graph path; under
# ASan at the best CPU level only, in the release build below at every level)
export CYB_NO_ALLOC_MODELS=$(python -c "from cyb_llm import hub
print(':'.join(hub.fetch(n, progress=False) for n in ('smollm2', 'qwen05', 'gemma3')))")
for t in build/asan/test_*; do
  echo "-- $t"; CYB_NO_ALLOC_LEVELS=auto "$t" | tail -n 1
done

tier "native test programs (release build)"
cmake -S . -B build/native -G Ninja -DCMAKE_BUILD_TYPE=Release -DCYB_BUILD_PYTHON=OFF \
  -DCYB_BUILD_TESTS=ON >/dev/null
ninja -C build/native -j "$JOBS" >/dev/null
export CYB_NATIVE_BUILD_DIR=$PWD/build/native

tier "libFuzzer on the .model reader (bounded)"
bash tools/fuzz.sh "${FUZZ_SECONDS:-60}"

tier "nox: gcc and clang at -O0 and -O3 reproduce the committed golden digest"
bash tools/nox_golden.sh

tier "pytest: default path (op matrix on every CPU level, full golden sets)"
python -m pytest tests -q --ignore=tests/slow

default_level=$(python -c "import cyb_llm._core as c; print(c.cpu_level())")
for level in $(python -c "import cyb_llm._core as c; print(' '.join(c.cpu_levels()))"); do
  [ "$level" = "$default_level" ] && continue
  tier "pytest: short golden checks on CPU level $level"
  # smollm2 (Q4_1) and gemma3 (Q4_K/Q6_K: the K-quant kernels of each level)
  CYB_CPU_LEVEL=$level CYB_GOLDEN=short CYB_GOLDEN_MODELS=smollm2,gemma3 python -m pytest -q \
    tests/test_golden.py tests/test_families_tiny.py tests/test_model.py
done

tier "pytest: short golden checks on wgpu+rs (lavapipe software Vulkan)"
CYB_GOLDEN_BACKEND=wgpu+rs CYB_GOLDEN=short CYB_GOLDEN_MODELS=smollm2 python -m pytest -q tests/test_golden.py

tier "wheel: manylinux build, installed into a fresh venv with no compiler on PATH, runs the README's first command"
bash tools/build_wheel.sh
wheel_venv=$(mktemp -d)
python -m venv "$wheel_venv/venv"
t0=$(date +%s)
PATH="$wheel_venv/venv/bin" "$wheel_venv/venv/bin/python" -m pip install -q dist/cyb_llm-*.whl
answer=$(PATH="$wheel_venv/venv/bin" CYB_LLM_CACHE="$wheel_venv/cache" \
  "$wheel_venv/venv/bin/cyb-llm" run "What is the capital of France?" -q)
echo "$answer"
echo "pip install of the wheel to the first answer (model fetched and imported): $(( $(date +%s) - t0 )) s"
grep -q Paris <<<"$answer"
rm -rf "$wheel_venv"

if [ "$SLOW" = 1 ]; then
  tier "slow tier: tests/slow"
  python -m pytest tests/slow -q
fi
tier "all tiers passed"
