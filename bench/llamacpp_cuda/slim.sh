#!/usr/bin/env bash
# A small llama.cpp source tree (from llama-cpp-python 0.3.36's sdist) with what llama-bench,
# llama-batched-bench and the CUDA backend need, for building on the device (bench/llamacpp_cuda/build.sh).
# Usage: bash bench/llamacpp_cuda/slim.sh [OUT_DIR (default .llamacpp/src)] [SDIST.tar.gz (default: pip download)]
set -euo pipefail
OUT=${1:-.llamacpp/src}
VER=0.3.36
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sdist=${2:-}
if [ -z "$sdist" ]; then
  # (--no-build-isolation: pip reads the sdist's metadata with the installed scikit-build-core
  # instead of building its build requirements, cmake among them, from source)
  python3 -m pip download -q --no-deps --no-binary :all: --no-build-isolation "llama-cpp-python==$VER" -d "$tmp"
  sdist=$tmp/llama_cpp_python-$VER.tar.gz
fi
tar xzf "$sdist" -C "$tmp" "llama_cpp_python-$VER/vendor/llama.cpp"
src=$tmp/llama_cpp_python-$VER/vendor/llama.cpp
rm -rf "$OUT" && mkdir -p "$OUT"
# top-level build files, the libraries (ggml, llama, common) and the headers they vendor
for d in CMakeLists.txt LICENSE cmake common ggml include licenses src vendor; do cp -r "$src/$d" "$OUT/"; done
# ggml backends: only the CPU one (always built) and CUDA
for b in "$OUT"/ggml/src/ggml-*/; do
  case "$(basename "$b")" in ggml-cpu|ggml-cuda) ;; *) rm -rf "$b" ;; esac
done
# CUDA kernels for quantization types the benchmark models never use (template instances
# generated per type pair) stay: the backend's CMakeLists globs them and the dispatcher
# references every one.
# tools/: llama-bench and llama-batched-bench (several sequences decoded in one batch: the peer of
# the server's batched step)
mkdir -p "$OUT/tools" && cp -r "$src/tools/llama-bench" "$src/tools/batched-bench" "$OUT/tools/"
printf 'find_package(Threads REQUIRED)\nllama_add_compile_flags()\nadd_subdirectory(llama-bench)\nadd_subdirectory(batched-bench)\n' \
  > "$OUT/tools/CMakeLists.txt"
echo "$VER" > "$OUT/LLAMA_CPP_PYTHON_VERSION"
du -sh "$OUT"
