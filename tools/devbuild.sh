#!/usr/bin/env bash
# Development build of the native core into build/dev (ccache, Ninja); the
# Python module is copied next to the sources so `PYTHONPATH=python` works.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/dev}
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} \
    -DCYB_BUILD_TESTS=ON -DPython_EXECUTABLE="$(command -v python3)" \
    -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" "$@" >/dev/null
fi
ninja -C "$BUILD" -j "${JOBS:-2}"
