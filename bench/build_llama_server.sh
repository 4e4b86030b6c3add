#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` (the peer of bench/bench_serve.py) from the llama.cpp
# source vendored in llama-cpp-python's sdist -- the same llama.cpp the tests compare against
# (tests/oracles.py LLAMA_CPP_VERSION) -- into build/llama-server/bin/llama-server, and prints
# that path. A second run reuses the build.
#
# Flags as tools/test.sh builds llama-cpp-python: not -march=native (GGML_NATIVE=OFF); AVX2
# and AVX-512 + VNNI where this CPU has them; AMX off (llama.cpp's AMX build faults on the
# development VMs, docs/cpu-bench.md). About 10 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$PWD/build/llama-server
BIN=$OUT/bin/llama-server
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
version=$(python -c "import sys; sys.path.insert(0, 'tests'); import oracles; print(oracles.LLAMA_CPP_VERSION)")
mkdir -p "$OUT"
sdist=$(ls "$OUT"/llama_cpp_python-"$version".tar.gz 2>/dev/null || true)
if [ -z "$sdist" ]; then
  # --no-build-isolation: reading the sdist's metadata would otherwise build its build requirements (cmake) from source
  python -m pip download -q --no-binary :all: --no-deps --no-build-isolation -d "$OUT" "llama-cpp-python==$version" >&2
  sdist=$(ls "$OUT"/llama_cpp_python-"$version".tar.gz)
fi
src=$OUT/src
if [ ! -f "$src/vendor/llama.cpp/CMakeLists.txt" ]; then
  rm -rf "$src" && mkdir -p "$src"
  tar -xzf "$sdist" -C "$src" --strip-components=1
fi
args=(-DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
      -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF)
if [ "$(uname -m)" = x86_64 ]; then
  has() { grep -qw "$1" /proc/cpuinfo; }
  noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  args+=(-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF "-DCMAKE_C_FLAGS=$noamx" "-DCMAKE_CXX_FLAGS=$noamx")
  has avx2 && has fma && has f16c && args+=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON)
  has avx512f && has avx512bw && has avx512vl && has avx512dq && has avx512_vnni \
    && args+=(-DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON)
fi
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S "$src/vendor/llama.cpp" -B "$OUT/cmake" "${gen[@]}" "${args[@]}" >&2
cmake --build "$OUT/cmake" --target llama-server -j "${JOBS:-2}" >&2
mkdir -p "$OUT/bin"
cp "$OUT/cmake/bin/llama-server" "$BIN"
echo "$BIN"
