#!/usr/bin/env bash
# Builds llama-bench and llama-batched-bench with the CUDA backend (sm_90) from the tree slim.sh made; run on the device.
# Idempotent: an existing binary is reused; a build still running (from an earlier call on the
# same machine) is waited for rather than started twice.
# (0c1e570: the llama.cpp commit llama-cpp-python 0.3.36 vendors; the sdist has no .git.)
# Usage: bash bench/llamacpp_cuda/build.sh [SRC (default .llamacpp/src)] [BUILD (default /tmp/llamacpp-cuda)]
# Prints the path of llama-bench on success (llama-batched-bench lies beside it); the build log is BUILD/build.log.
set -uo pipefail
SRC=$(cd "${1:-.llamacpp/src}" && pwd)
B=${2:-/tmp/llamacpp-cuda}
BIN=$B/bin/llama-bench
JOBS=${JOBS:-16}
mkdir -p "$B"
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
exec 9>"$B/.lock"
flock 9  # a second caller waits here for the first one's build
if [ ! -x "$BIN" ] || [ ! -x "$B/bin/llama-batched-bench" ]; then
  gen=; command -v ninja >/dev/null && gen="-G Ninja"
  t0=$(date +%s)
  {
    cmake -S "$SRC" -B "$B" $gen -DCMAKE_BUILD_TYPE=Release \
      -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_NCCL=OFF \
      -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_COMMIT=0c1e570 \
      -DLLAMA_BUILD_NUMBER=0 &&
    cmake --build "$B" --target llama-bench llama-batched-bench -j "$JOBS"
  } > "$B/build.log" 2>&1
  rc=$?
  echo "llama-bench + llama-batched-bench build: rc=$rc in $(( $(date +%s) - t0 )) s" | tee -a "$B/build.log" >&2
  if [ $rc -ne 0 ]; then grep -n -B2 -A10 "error\|Error" "$B/build.log" | head -60 >&2; exit $rc; fi
fi
echo "$BIN"
