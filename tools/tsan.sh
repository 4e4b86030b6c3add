#!/usr/bin/env bash
# The concurrency checks under ThreadSanitizer: configures build/tsan (CYB_TSAN=ON,
# no Python module), builds the core and csrc/tests/test_concurrency.cc, and runs
# it on the models of CYB_CONCURRENCY_MODELS (':'-separated .model paths; default:
# smollm2, fetched into the cache). Any data race TSan sees fails the run
# (halt_on_error=1, exit status 66).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/tsan}
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCYB_TSAN=ON \
    -DCYB_BUILD_PYTHON=OFF -DCYB_BUILD_TESTS=ON >/dev/null
fi
ninja -C "$BUILD" -j "${JOBS:-2}" test_concurrency
if [ -z "${CYB_CONCURRENCY_MODELS:-}" ]; then
  # a failed fetch fails the run (a plain assignment under set -e), it does not skip the model
  m=$(PYTHONPATH=python python3 -c "from cyb_llm import hub; print(hub.fetch('smollm2', progress=False))")
  export CYB_CONCURRENCY_MODELS="$m"
fi
TSAN_OPTIONS="halt_on_error=1 exitcode=66 ${TSAN_OPTIONS:-}" \
  "$BUILD/test_concurrency"
