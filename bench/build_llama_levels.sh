#!/usr/bin/env bash
# Builds llama.cpp's shared libraries (libllama + libggml*) once per x86 CPU level from the
# llama.cpp source inside the llama-cpp-python sdist that the tests pin (tests/oracles.py
# LLAMA_CPP_VERSION), so that `bench/bench_cpu.py --level avx512|avx2` can run llama.cpp built
# for the same level as cyb_llm's CYB_CPU_LEVEL (llama-cpp-python loads them through
# LLAMA_CPP_LIB_PATH). Not -march=native (GGML_NATIVE=OFF); AMX off at both levels.
#
# Usage: bash bench/build_llama_levels.sh [avx512] [avx2]     (default: both)
# Output: $CYB_LLM_CACHE/llama-levels/<version>/<level>/ (default ~/.cache/cyb_llm/...); a level
# whose directory already holds libllama.so is skipped. JOBS (default 2) sets the parallelism.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(python -c "import sys; sys.path.insert(0, 'tests'); import oracles; print(oracles.LLAMA_CPP_VERSION)")
cache=${CYB_LLM_CACHE:-$HOME/.cache/cyb_llm}/llama-levels/$version
jobs=${JOBS:-2}
levels=("$@"); [ ${#levels[@]} = 0 ] && levels=(avx512 avx2)
mkdir -p "$cache"

src=$cache/src/llama_cpp_python-$version/vendor/llama.cpp
if [ ! -f "$src/CMakeLists.txt" ]; then
  mkdir -p "$cache/src"
  python -m pip download -q --no-binary :all: --no-deps --no-build-isolation -d "$cache/src" \
    "llama-cpp-python==$version"
  tar xzf "$cache/src/llama_cpp_python-$version.tar.gz" -C "$cache/src"
fi

noamx="-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
for level in "${levels[@]}"; do
  case $level in
    avx512) flags="-DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
            cflags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" ;;
    # no AVX-512 at all: the compiler must not use it on its own either
    avx2)   flags="-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF"
            cflags="-mno-avx512f -mno-amx-tile -mno-amx-int8 -mno-amx-bf16" ;;
    *) echo "unknown level $level (avx512 or avx2)" >&2; exit 2 ;;
  esac
  out=$cache/$level
  if [ -f "$out/libllama.so" ]; then echo "$level: $out (already built)"; continue; fi
  b=$cache/build-$level
  launcher=(); command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # shellcheck disable=SC2086
  cmake -S "$src" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=OFF \
    $flags $noamx -DCMAKE_C_FLAGS="$cflags" -DCMAKE_CXX_FLAGS="$cflags" "${launcher[@]}" \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_COMMON=OFF >"$b.cmake.log" 2>&1 || { tail -30 "$b.cmake.log"; exit 1; }
  ninja -C "$b" -j "$jobs" llama
  mkdir -p "$out.tmp"
  find "$b" -name 'lib*.so*' -exec cp -P {} "$out.tmp/" \;
  echo "$flags $noamx CFLAGS=$cflags" >"$out.tmp/FLAGS"
  rm -rf "$out"; mv "$out.tmp" "$out"
  echo "$level: $out"
done
