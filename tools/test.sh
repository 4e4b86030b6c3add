#!/usr/bin/env bash
# The test command of the README. Installs what the tests need (test oracles;
# system packages when run as root), then runs the tiers:
#   1. native: the core and its test programs under ASan + UBSan (+ LeakSanitizer),
#      and load -> generate -> drop of real models at every CPU level there;
#      concurrent conversations under ThreadSanitizer; a release build of the
#      test programs (no-allocation test, the C++ example); bounded fuzzing
#      (libFuzzer: .model reader, TOML parser, sampler; atheris: GGUF importer,
#      chat path); the hostile-input corpus, each case in a child process;
#   2. pytest: the op matrix on every CPU level, the full golden sets on the
#      default path, the tokenizers against llama.cpp, then short golden checks
#      (2 prompts, 8 tokens) on every other CPU level and on wgpu+rs
#      (lavapipe), and the fast path against llama.cpp on a short set;
#   3. the NEON level: the arm64 build's native tests under qemu-aarch64;
#   4. the table of CPU levels (run / not run and why), then seconds per tier.
# The peers (llama-cpp-python) are required: CYB_REQUIRE_PEERS=1 turns their
# skips into failures. Tiers and budgets: docs/testing.md.
# The slow tier (tests/slow: the full llama.cpp fidelity set, arm64 NEON,
# larger models, live transformers comparisons; 10-minute fuzzing; more hostile
# seeds; the mutation check; the manylinux wheel, installed and run without a compiler)
# runs with `bash tools/test.sh --slow`.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
export CYB_REQUIRE_PEERS=1
SLOW=0
[ "${1:-}" = "--slow" ] && SLOW=1
JOBS=${JOBS:-2}
# What the tiers leave for the CPU-level table (tests/test_cpu_levels.py).
RESULTS=$PWD/build/test-results
rm -rf "$RESULTS" && mkdir -p "$RESULTS"
TIER_NAMES=() TIER_SECS=() tier_name="" tier_t0=0 run_t0=$(date +%s)
tier_close() {
  [ -n "$tier_name" ] && { TIER_NAMES+=("$tier_name"); TIER_SECS+=($(( $(date +%s) - tier_t0 ))); }
  tier_name=""
}
# the running tier's name, in a file: .ci/run names it when its time limit stops the run
tier() {
  tier_close; tier_name="$*" tier_t0=$(date +%s); echo "$*" > "$RESULTS/tier"; echo; echo "=== $* ($(date +%T))"
}
tier_table() {
  local rc=$? i
  tier_close
  echo; echo "=== seconds per tier$([ $rc = 0 ] || echo " (stopped by a failure, exit $rc)")"
  for i in "${!TIER_NAMES[@]}"; do printf '%6d  %s\n' "${TIER_SECS[$i]}" "${TIER_NAMES[$i]}"; done
  printf '%6d  total\n' $(( $(date +%s) - run_t0 ))
}
trap tier_table EXIT
trap 'exit 143' TERM  # a time limit's SIGTERM still prints the table

tier "test dependencies"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  pkgs="clang libclang-rt-14-dev mesa-vulkan-drivers ccache g++-aarch64-linux-gnu qemu-user espeak-ng"
  dpkg -s $pkgs >/dev/null 2>&1 || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $pkgs >/dev/null; }
fi
python -m pip install -q torch==2.13.0
# the slow tier also needs the ray extra (tests/slow/test_serve_ray.py)
extras=test; [ "$SLOW" = 1 ] && extras=test,ray
# The extras' requirements alone, then the project only where the installed one is not this
# checkout unchanged (README step 1 just built it: a second build cost minutes on 2 cores).
python tools/install_state.py requirements "$extras" > "$RESULTS/requirements.txt"
python -m pip install -q -r "$RESULTS/requirements.txt"
if ! python tools/install_state.py current; then
  python -m pip install -q --no-deps .
  python tools/install_state.py current
fi
python -c "import torch, sys; sys.exit(torch.version.cuda is not None and 'a later install replaced torch 2.13.0 (CPU) with a CUDA build: ' + torch.__version__)"
tier "peer: llama-cpp-python (the pinned version if it imports, else a cached wheel, else its committed record)"
# PyPI has no wheel: it builds from the sdist (~6 min on 2 cores), once into a wheel under a cache
# folder outside the checkout (CYB_PEER_WHEELS, default ~/.cache/cyb_llm/peer-wheels, a subfolder
# per build configuration), which later runs install. Without that wheel the default tiers do not
# build it: the llama.cpp checks compare with its committed record, made with the pinned version
# (CYB_LLAMACPP_FIXTURES=1, tests/llamacpp_reference.py); the slow tier builds the wheel and
# compares the record with llama.cpp live (tests/slow/test_llamacpp_record.py).
# Not -march=native (GGML_NATIVE=OFF): AVX2 and AVX-512 + VNNI where this CPU has them, AMX off,
# because llama.cpp's AMX build faults on the development VMs (docs/cpu-bench.md).
llama_version=$(python -c "import sys; sys.path.insert(0, 'tests'); import oracles; print(oracles.LLAMA_CPP_VERSION)")
llama_args="-DGGML_NATIVE=OFF"
if [ "$(uname -m)" = x86_64 ]; then
  has() { grep -qw "$1" /proc/cpuinfo; }
  noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  llama_args="$llama_args -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  llama_args="$llama_args -DCMAKE_C_FLAGS='$noamx' -DCMAKE_CXX_FLAGS='$noamx'"
  has avx2 && has fma && has f16c && llama_args="$llama_args -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
  has avx512f && has avx512bw && has avx512vl && has avx512dq && has avx512_vnni \
    && llama_args="$llama_args -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON"
fi
llama_key=$(printf '%s %s %s' "$llama_version" "$(uname -m)" "$llama_args" | sha256sum | cut -c1-12)
llama_wheels=${CYB_PEER_WHEELS:-$HOME/.cache/cyb_llm/peer-wheels}/llama-$llama_key
llama_wheel() {  # the cached wheel's path, or nothing (never a failing status: it is read by assignments)
  local w
  for w in "$llama_wheels"/llama_cpp_python-"$llama_version"-*.whl; do [ -f "$w" ] && echo "$w" && break; done
  return 0
}
if python -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$llama_version')" 2>/dev/null; then
  echo "llama-cpp-python $llama_version already imports"
else
  if [ -z "$(llama_wheel)" ] && { [ "$SLOW" = 1 ] || [ "${CYB_BUILD_PEERS:-0}" = 1 ]; }; then
    echo "building llama-cpp-python $llama_version into $llama_wheels (CMAKE_ARGS=$llama_args)"
    mkdir -p "$llama_wheels"
    CMAKE_ARGS="$llama_args" CMAKE_BUILD_PARALLEL_LEVEL=$JOBS \
      python -m pip wheel -q --no-deps --no-cache-dir --no-binary llama-cpp-python -w "$llama_wheels" \
      "llama-cpp-python==$llama_version"
  fi
  wheel=$(llama_wheel)
  if [ -n "$wheel" ]; then
    python -m pip install -q "$wheel"
    echo "llama-cpp-python $llama_version installed from $wheel"
  else
    export CYB_LLAMACPP_FIXTURES=1
    echo "no llama-cpp-python $llama_version wheel in $llama_wheels: the llama.cpp checks compare with"
    echo "its committed record (tests/data/llamacpp/reference.json.xz); CYB_BUILD_PEERS=1 or --slow builds it"
  fi
fi

tier "native core and test programs under AddressSanitizer + UBSan"
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCYB_SANITIZE=ON -DCYB_BUILD_PYTHON=OFF \
  -DCYB_BUILD_TESTS=ON >/dev/null
ninja -C build/asan -j "$JOBS" >/dev/null
# test_no_alloc also runs the real decoder forward of these files (curated and graph path): in the
# release build (tests/test_native.py) all three at every CPU level; under ASan (an unoptimized
# build) smollm2 at the best level only: qwen05 and gemma3 there took over 6 of this tier's minutes
# (gemma3's K-quant forward runs under ASan below, in example_generate).
# Every value comes from a plain assignment, so that a failing command fails the tier (set -e
# ignores a failure inside `export X=$(...)`, `for x in $(...)` and `echo "$(...)"`).
no_alloc_models=$(python -c "from cyb_llm import hub
print(':'.join(hub.fetch(n, progress=False) for n in ('smollm2', 'qwen05', 'gemma3')))")
export CYB_NO_ALLOC_MODELS=$no_alloc_models
asan_no_alloc=${CYB_NO_ALLOC_MODELS%%:*}
for t in build/asan/test_*; do
  echo "-- $t"; CYB_NO_ALLOC_MODELS=$asan_no_alloc CYB_NO_ALLOC_LEVELS=auto "$t" | tail -n 1
done
# Real use under ASan + UBSan + LeakSanitizer: load -> prefill -> greedy generation -> drop
# (csrc/tests/example_generate.cc), fast and precise, smollm2 (Q4_1/Q8_0) and gemma3 (Q4_K/Q6_K),
# at the best CPU level and scalar (the leak and overflow claims); the other levels run the same
# command on the release build (tier "native test programs").
asan_models=$(python -c "from cyb_llm import hub
print(' '.join(hub.fetch(n, progress=False) for n in ('smollm2', 'gemma3')))")
cpu_levels=$(python -c "import cyb_llm._core as c; print(' '.join(c.cpu_levels()))")
best_level=$(python -c "import cyb_llm._core as c; print(c.cpu_level())")
asan_levels=$best_level; [ "$best_level" = scalar ] || asan_levels="$best_level scalar"
bash tools/asan_real_use.sh "$asan_levels" $asan_models
# The command above must fail on a leak, a heap overflow and a UBSan error: three copies of the
# program with one planted bug each (tools/sanitizer_selftest.sh).
bash tools/sanitizer_selftest.sh "$best_level" "${asan_models%% *}"

tier "native concurrency under ThreadSanitizer (tools/tsan.sh)"
# two threads, two conversations of one real model, compared bit for bit with a sequential run
tsan_model=$(python -c "from cyb_llm import hub; print(hub.fetch('smollm2', progress=False))")
CYB_CONCURRENCY_MODELS=$tsan_model bash tools/tsan.sh

tier "native test programs (release build)"
# In the tree `pip install .` just built (scikit-build-core's build/<wheel tag>, Release): the core
# is compiled there already, so only the test programs compile; build/native where there is none.
native=build/native
wheel_tree=$(ls -td build/cp3*/ 2>/dev/null | head -n 1)
if [ -n "$wheel_tree" ] && [ -f "$wheel_tree/CMakeCache.txt" ] \
    && grep -q "^CMAKE_BUILD_TYPE:STRING=Release$" "$wheel_tree/CMakeCache.txt"; then
  native=${wheel_tree%/}
  # SKBUILD off: the C/C++ package's install rules (tests/test_cpp_package.py installs from here)
  cmake -S . -B "$native" -DCYB_BUILD_PYTHON=OFF -DCYB_BUILD_TESTS=ON -DSKBUILD=OFF >/dev/null
else
  cmake -S . -B "$native" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCYB_BUILD_PYTHON=OFF -DCYB_BUILD_TESTS=ON >/dev/null
fi
ninja -C "$native" -j "$JOBS" >/dev/null
echo "release test programs in $native"
export CYB_NATIVE_BUILD_DIR=$PWD/$native
# the real-use runs of the levels the sanitizer tier leaves out, on the optimized build
release_levels=""
for level in $cpu_levels; do
  case " $asan_levels " in *" $level "*) ;; *) release_levels="$release_levels $level" ;; esac
done
[ -z "$release_levels" ] || EXAMPLE=$native/example_generate bash tools/asan_real_use.sh "$release_levels" $asan_models

tier "fuzzing (bounded): libFuzzer on the .model reader, the TOML parser, the sampler; atheris on the GGUF importer and the chat path"
# Seconds per target; the slow tier runs each for 10 minutes (docs/testing.md, "Hostile inputs and fuzzing").
bash tools/fuzz.sh "${FUZZ_SECONDS:-10}" fuzz_model_file
bash tools/fuzz.sh "${FUZZ_SECONDS:-5}" fuzz_toml fuzz_sampler
python tools/fuzz_py.py chat --seconds "${FUZZ_SECONDS:-8}"
python tools/fuzz_py.py gguf --seconds "${FUZZ_SECONDS:-5}"

tier "nox: gcc and clang at -O0 and -O3 reproduce the committed golden digest"
bash tools/nox_golden.sh

tier "hostile inputs: seeded corpus (.model, GGUF, HF folders, chat templates, API arguments), each case in a child process"
python tools/hostile.py --seed 1

tier "pytest: default path (op matrix on every CPU level, full golden sets, tokenizers vs llama.cpp)"
# --durations: the slowest tests, for the tier budget (docs/testing.md). One pytest worker per core
# (pytest-xdist; work stealing: the long golden tests do not hold a worker's queue): most tests spend
# much of their time in single-threaded Python (tokenizers, transformers references, imports);
# seconds with and without the workers in docs/testing.md. Tests that fetch the same model wait on
# the cache's lock (cyb_llm.hub).
python -m pytest tests -q --ignore=tests/slow -n "$JOBS" --dist worksteal --durations=25 --junitxml="$RESULTS/default.xml"

default_level=$best_level
echo "$default_level" > "$RESULTS/default_level"
for level in $cpu_levels; do
  [ "$level" = "$default_level" ] && continue
  tier "pytest: short golden checks on CPU level $level"
  # smollm2 (Q4_1) and gemma3 (Q4_K/Q6_K: the K-quant kernels of each level)
  CYB_CPU_LEVEL=$level CYB_GOLDEN=short CYB_GOLDEN_MODELS=smollm2,gemma3 python -m pytest -q \
    tests/test_golden.py tests/test_families_tiny.py tests/test_model.py --junitxml="$RESULTS/golden-$level.xml"
done

tier "pytest: fast path vs llama.cpp, short set (4 prompts; smollm2, gemma3)"
# its two models on the two workers (84 -> 66 s here; a worker's prints do not reach the log, the
# assertions carry the check)
CYB_FIDELITY=short CYB_GOLDEN_MODELS=smollm2,gemma3 python -m pytest -q -n "$JOBS" tests/slow/test_fidelity_vs_llamacpp.py

tier "arm64: the NEON level under qemu-aarch64 (tools/arm64_check.sh)"
if command -v qemu-aarch64 >/dev/null && command -v aarch64-linux-gnu-g++ >/dev/null; then
  # the native programs' own cases; the real-model no-alloc runs (CYB_NO_ALLOC_MODELS) stay on x86,
  # a whole forward under qemu takes many minutes
  env -u CYB_NO_ALLOC_MODELS bash tools/arm64_check.sh 2>&1 | tee "$RESULTS/arm64.log"
else  # not root, or no apt: the CPU-level table says neon was not run and why
  echo "qemu-aarch64 or aarch64-linux-gnu-g++ not installed (apt-get install g++-aarch64-linux-gnu qemu-user)"
fi

tier "pytest: short golden checks on wgpu+rs (lavapipe software Vulkan)"
CYB_GOLDEN_BACKEND=wgpu+rs CYB_GOLDEN=short CYB_GOLDEN_MODELS=smollm2 python -m pytest -q tests/test_golden.py

tier "CPU levels of this build: run or not run"
python tests/test_cpu_levels.py "$RESULTS"

if [ "$SLOW" = 1 ]; then
  tier "slow tier: tests/slow"
  python -c "import llama_cpp" || { echo "the slow tier needs llama-cpp-python (built above)"; exit 1; }
  python -m pytest tests/slow -q
  tier "slow tier: fuzzing, 10 minutes per target; hostile corpus, seeds 2 and 3"
  bash tools/fuzz.sh 600
  python tools/fuzz_py.py gguf --seconds 600
  python tools/fuzz_py.py chat --seconds 600
  python tools/hostile.py --seed 2
  python tools/hostile.py --seed 3
  tier "slow tier: mutation check (tools/mutation_check.py)"
  python tools/mutation_check.py
  tier "slow tier: wheel: manylinux build, installed into a fresh venv with no compiler on PATH, runs the README's first command"
  bash tools/build_wheel.sh
  wheel_venv=$(mktemp -d)
  python -m venv "$wheel_venv/venv"
  t0=$(date +%s)
  PATH="$wheel_venv/venv/bin" "$wheel_venv/venv/bin/python" -m pip install -q dist/cyb_llm-*.whl
  answer=$(PATH="$wheel_venv/venv/bin" CYB_LLM_CACHE="$wheel_venv/cache" \
    "$wheel_venv/venv/bin/cyb-llm" run "What is the capital of France?" -q)
  echo "$answer"
  echo "pip install of the wheel to the first answer (model fetched and imported): $(( $(date +%s) - t0 )) s"
  grep -q Paris <<<"$answer"
  rm -rf "$wheel_venv"
fi
tier_close
echo; echo "=== all tiers passed"
