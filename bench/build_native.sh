#!/usr/bin/env bash
# Builds bench/matvec_native.cc against the core library (the dev build's, or a
# Python-free one configured here) into build/bench/matvec_native.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/dev}
if [ ! -f "$BUILD/libcyb_core.a" ]; then
  BUILD=build/core
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCYB_BUILD_PYTHON=OFF -DCYB_BUILD_TESTS=OFF >/dev/null
  ninja -C "$BUILD" -j "${JOBS:-8}" cyb_core >/dev/null
fi
case "$(uname -m)" in
  x86_64|amd64) ARCH=-DCYB_X86=1 ;;
  aarch64|arm64) ARCH=-DCYB_ARM64=1 ;;
  *) ARCH= ;;
esac
mkdir -p build/bench
"${CXX:-g++}" -O2 -std=c++17 -Icsrc $ARCH bench/matvec_native.cc "$BUILD/libcyb_core.a" -pthread \
  -o build/bench/matvec_native
echo build/bench/matvec_native
