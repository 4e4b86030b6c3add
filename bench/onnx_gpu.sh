#!/usr/bin/env bash
# The ONNX models on the NVIDIA GPU (docs/gpu-bench.md, "ONNX graphs on the GPU"): run on the device
# machine from the root of this tree, with the Vulkan loader's packages in $GL (default ../.gl), the
# wgpu wheel in $WHL (default ../.whl) and the models as .xz files in .models/ (their .onnx files
# compressed with xz; piper-joe.onnx.json beside them, plain). Builds the native core into /tmp/b
# (kept while the machine stays warm: a second run reuses it), unpacks the models into the hub's
# cache layout (CYB_LLM_CACHE=/tmp/cyb_cache: src/<name>.onnx, where hub.fetch_source finds them
# without fetching) and runs bench/bench_onnx.py --device wgpu+rs on each of the models given ($1,
# default silero,terrain,piper) with onnxruntime's CPU provider on $THREADS threads (default 16).
set -o pipefail
GL=${GL:-../.gl}
WHL=${WHL:-../.whl}
for f in "$GL"/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHL"/wgpu-*.whl || exit 1
export PYTHONPATH=$PWD/python:/tmp/site PYTHONUNBUFFERED=1
if ! ls /tmp/b/_core*.so >/dev/null 2>&1; then
  cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCYB_BUILD_TESTS=OFF -DPython_EXECUTABLE="$(command -v python3)" \
    -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" >/tmp/cmake.log && ninja -C /tmp/b -j 16 _core >/tmp/ninja.log ||
    { tail -40 /tmp/cmake.log /tmp/ninja.log; exit 1; }
else
  cp /tmp/b/_core*.so python/cyb_llm/
fi
echo "core built at ${SECONDS}s"
export CYB_LLM_CACHE=/tmp/cyb_cache
mkdir -p $CYB_LLM_CACHE/src
for f in .models/*.xz; do
  python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"), 1 << 22)' \
    "$f" "$CYB_LLM_CACHE/src/$(basename "${f%.xz}")" || exit 1
done
cp .models/*.json $CYB_LLM_CACHE/src/ 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "models unpacked at ${SECONDS}s"
# one bench run a model, so that each result prints as soon as it is measured
for m in $(echo "${1:-silero,terrain,piper}" | tr , ' '); do
  python3 bench/bench_onnx.py --device wgpu+rs --threads "${THREADS:-16}" --reps "${REPS:-5}" --models "$m" \
    --json "${OUT:-/tmp}/bench_onnx_gpu_$m.json"
  echo "$m done at ${SECONDS}s"
done
