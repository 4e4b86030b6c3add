#!/usr/bin/env bash
# Cross-builds the native core for arm64 (Debian's aarch64 cross compiler) and
# runs the native tests under qemu-user: the NEON kernels against the scalar
# reference (test_levels), the core checks and the no-allocation check.
# Needs: apt-get install g++-aarch64-linux-gnu qemu-user
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/arm64}
SYSROOT=${SYSROOT:-/usr/aarch64-linux-gnu}
if [ ! -f "$BUILD/build.ninja" ]; then
  TC="$BUILD/aarch64.cmake"
  mkdir -p "$BUILD"
  cat > "$TC" <<TOOLCHAIN
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
TOOLCHAIN
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$TC" -DCMAKE_BUILD_TYPE=Release \
    -DCYB_BUILD_PYTHON=OFF -DCYB_BUILD_TESTS=ON >/dev/null
fi
ninja -C "$BUILD" -j "${JOBS:-2}" test_levels test_core test_no_alloc
for t in test_levels test_core test_no_alloc; do
  echo "== $t (qemu-aarch64)"
  qemu-aarch64 -L "$SYSROOT" "$BUILD/$t"
done
