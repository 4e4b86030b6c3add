// Settings and tuning rules of the wgpu+rs backend: the kernel choices' thresholds and the
// CYB_WGPU_* variables that override them for tests and tuning runs (docs/gpu-bench.md), each
// read once unless said otherwise. Private to csrc/backends/wgpu/.
#pragma once

#include <cstdint>
#include <string>

namespace cyb {
namespace wgpu {

struct Gpu;

// Whether shaders are compiled with wgpu's runtime checks (every array index clamped to the
// array, every loop given an iteration bound): CYB_WGPU_SHADER_CHECKS=on|off, read once; off
// by default: the shaders are compiled as written (wgpuDeviceCreateShaderModuleTrusted), since
// every index the kernels form is bounded by the shapes the backend validated before
// dispatching (the op matrix and CYB_WGPU_SHADER_CHECKS=on runs of it check that on lavapipe).
// On the H200 the checks cost 11% of a qwen15-shaped
// decode step and 17-20% of its prompt time (docs/gpu-bench.md).
bool shader_checks();

// The workgroup memory the checks allow: the device's, or less with CYB_WGPU_WORKGROUP_LIMIT=N
// (bytes, read once; for tests and for an adapter that reports more than it runs).
uint64_t workgroup_limit(const Gpu& g);

// CYB_WGPU_REPEAT=<text>:<n> (read once; tuning runs, docs/gpu-bench.md): every dispatch whose
// pipeline name contains <text> is recorded n times (1 .. 64), so that a step's time grows by
// n - 1 times that kernel's cost inside the stream. Only for kernels that do not read what they
// write: a pipeline that rotates in place (rope), draws tokens (sample) or normalizes in place
// (INPLACE) is refused when it matches.
struct RepeatTuning {
  std::string text;
  uint32_t n = 1;
};
const RepeatTuning& repeat_tuning();

// Overrides of the matrix-vector kernel's choices for tuning runs (docs/gpu-bench.md):
// CYB_WGPU_MATVEC="tpr=8|16|32|64|128|fill,unroll=0|1,ks=0|1|all,rows=1|2", read once.
// ks=0: no slot kernel (below); ks=1: the slot kernel for one token only (2-31 tokens, the server's
// batched step, beams and short prompts, then take the chunk kernel); ks=all (the default): for 1-31
// tokens (on an H100 the 4-way batched step of Q4_K / Q6_K weights 1.2-1.7x faster than ks=1,
// docs/gpu-bench.md "Batched decode with the slot kernel for 2-31 tokens").
// tpr=N: N lanes a row (no fill unless tpr=fill is given too);
// fill: lanes doubled (up to 128, at most one chunk a lane) while the rows x lanes of a dispatch
// are fewer than kMatvecFillLanes (few-row, long-K products such as the down projection).
// unroll=1: two chunks a step per lane (not in the slot kernel). rows=1: one row a lane group in
// the slot kernel (two by default).
struct MatvecTuning {
  uint32_t tpr = 0;  // 0: the default
  bool fill = false;
  bool unroll2 = false;
  bool ks = true;
  bool ks_tokens = true;  // ks=all (ks=1: false)
  bool r2 = true;  // two rows a lane group in the slot kernel
};
constexpr int64_t kMatvecFillLanes = 131072;
const MatvecTuning& matvec_tuning();

// Attention with fewer (head, token) rows than this splits the keys over workgroups
// (shaders/wgsl/attention.wgsl SPLIT/COMBINE) once they span more than one tile.
constexpr int64_t kSplitAttentionMaxRows = 256;
// Below that, up to this many keys a token run in one dispatch (attention.wgsl DEC, an f16 or
// f32 cache) unless CYB_WGPU_ATTN=split (read at each call, for tuning runs: docs/gpu-bench.md).
constexpr int64_t kDecAttentionMaxKeys = 1024;
enum class AttentionKernel { Dec, Split };
AttentionKernel attention_kernel();

// The workgroups a GPU runs at once (2 per SM of the H200's 132): a tiled GEMM of fewer than
// twice as many tiles splits K into parts run side by side (matmul.wgsl SPLITK, splitk_parts), each part at least
// kSplitKMinChunks chunks of 32 values. CYB_WGPU_SPLITK=N (read once) sets the workgroup
// count for tuning runs, 0 turns splitting off (docs/gpu-bench.md).
constexpr int64_t kSplitKWorkgroups = 264;
constexpr int64_t kSplitKMinChunks = 4;
int64_t splitk_workgroups();

// Parts of K for a tiled GEMM of `tiles` tiles (at most smax). The GPU runs W =
// splitk_workgroups() workgroups at once, so a grid of g workgroups takes ceil(g / W) waves and
// s parts take ceil(tiles s / W) / s of the unsplit time: the s in 1 .. min(smax, 8) with the
// fewest waves per part (the smallest of equals), for grids of fewer than 2 W tiles. On the H200
// this beat ceil(W / tiles) parts (qwen15-shaped pp128 +5-8%, llama7b pp128 +2-3%); a grid of 2 W
// tiles or more is not split: qwen15's 512-token SwiGLU GEMM (1120 tiles) in 2 parts made its
// prompt 5% slower, the parts' writes and sums costing more than the last wave's idle share
// (docs/gpu-bench.md).
// *waves: the waves per part of the result (in units of the unsplit grid's tile time).
int64_t splitk_parts(int64_t tiles, int64_t smax, double* waves = nullptr);

// Tokens a tile of the f32 tiled GEMM: 64 (4 tokens x 4 rows a thread), or 128 (matmul.wgsl T128:
// 8 x 4, each staged weight value used by twice the tokens; the same sums in the same order) where
// that grid needs no more parts of K (splitk_parts) and its time in waves, a 128-token tile
// counting as two 64-token ones at kT128Cost of their cost, is the shorter. On the H200 T128
// made llama7b's prompt 8% faster at 128 tokens (the SwiGLU GEMM) and 2-6% at 512, and lost
// 5-18% where it needed more parts or left the GPU emptier (one-weight GEMMs of qwen15, smollm2,
// qwen05; docs/gpu-bench.md), which the rule keeps at 64. CYB_WGPU_TILE=64|128 (read once; 0
// or unset: the rule) forces one for tests and tuning runs (128 at any tiled token count).
// allow128 false (the f16 GEMM, or a device without the 128-token kernel's workgroup memory):
// 64. Returns the tile; *parts: its parts of K.
constexpr double kT128Cost = 0.9;
int64_t tile_setting();
int64_t gemm_tile_tokens(int64_t N, int64_t T, int64_t smax, bool splittable, bool allow128, int64_t* parts);

// The f16 tiled GEMM (matmul.wgsl H16): in fast mode, for block-quantized weights (their
// decoded values rounded to f16; float weights keep f32 products in both modes), where the
// adapter offers shader-f16, when CYB_WGPU_GEMM=h16=1 (read once); off by default: its
// whole-forward error on the real smollm2 exceeds that model's fast-vs-precise bound of the
// default fast mode (docs/runtime.md, "Precision modes"), so h16=0, the f32 kernel, is the default.
bool gemm_f16_setting();

// Graph-v2 convs of group 1 with 16+ output channels and K of 32+ run as the tiled implicit GEMM
// (shaders/wgsl/conv_gemm.wgsl; docs/graph.md, "Convolution kernels"); CYB_WGPU_CONV=direct (read
// once; default gemm) keeps them on array_nn.wgsl's direct kernel, for A/B runs.
bool conv_gemm_setting();

// Attention of this many tokens or more (not split over the keys) runs as blocks of 16 tokens
// over staged key tiles (attention.wgsl FLASH) where head_dim allows; CYB_WGPU_FLASH=0 (read
// once) keeps one workgroup per (head, token).
constexpr int64_t kFlashMinTokens = 16;
bool flash_setting();

// The subgroup-matrix GEMM (shaders/wgsl/matmul_sm.wgsl: webgpu:dawn with
// chromium-experimental-subgroup-matrix, 16 x 16 x 16 f16 x f16 -> f32 matrices and subgroups of
// exactly 32 lanes): in fast mode, for tiled GEMMs of kSmMinTokens tokens or more, in place of the
// FMA kernels, activations scaled per token. Off by default (CYB_WGPU_SM, read once: 0, 1 or f16).
// CYB_WGPU_SM=1 (Split): each operand as hi + lo f16 values, near f32; on the H100 it was slower
// than the FMA kernel at every prompt shape measured (0.71-0.91x) and 1.0-1.8x op-f32 on the op
// matrix (docs/webgpu-dawn.md), for A/B runs (bench/dawn_check.py). CYB_WGPU_SM=f16 (F16): plain
// f16 operands, f32 sums (one product a pair, about f16's 11 significant bits per input: the
// precision of a tensor-core f16 GEMM, held by tests/test_ops.py sm_f16_gemm_ref, not op-f32).
constexpr int64_t kSmMinTokens = 64;
enum class SmMode { Off, Split, F16 };
SmMode sm_setting();

// A forward's recording is submitted in chunks as it goes, so the GPU starts on the first ops
// while the host records the rest (the host's recording and submitting otherwise precede all
// of the GPU's work of a one-token decode step): the first chunk after kSubmitFirst dispatches,
// each later one after twice the dispatches of the one before, the rest with the forward's
// read-back. CYB_WGPU_SUBMIT=N (read once) sets the first chunk's dispatches, 0 one submit a
// forward (the order of the work and its results are the same either way).
constexpr int64_t kSubmitFirst = 8;
int64_t submit_first_setting();
// The most dispatches a chunk grows to (CYB_WGPU_SUBMIT_MAX, read once).
constexpr int64_t kSubmitMax = int64_t{1} << 30;
int64_t submit_max_setting();

// Tokens from which a matmul runs as a tiled GEMM (on the H200 it beat the row kernel
// at 128 and 512 prompt tokens on every model shape measured, docs/gpu-bench.md).
constexpr int64_t kTiledMinTokens = 32;

}  // namespace wgpu
}  // namespace cyb
