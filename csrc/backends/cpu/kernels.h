// Kernel tables of the CPU backend: one function per op and per level. The
// scalar reference table is complete; each SIMD level overrides the entries it
// speeds up and inherits the rest. Inputs reaching a kernel have already been
// validated (validate_op, dispatch/op_schema.h, run by the dispatcher), so
// kernels only compute.
#pragma once
#include "core/exec_context.h"
#include "dispatch/op.h"

namespace cyb {
namespace cpu {

using Kernel = void (*)(const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out,
                        ExecContext& ctx);

struct KernelTable {
  Kernel k[static_cast<int>(OpKind::COUNT_PLUS_ONE)] = {};
  Kernel& operator[](OpKind o) { return k[static_cast<int>(o)]; }
  Kernel operator[](OpKind o) const { return k[static_cast<int>(o)]; }
};

// The scalar reference kernels (accumulate in double, round once): the arbiter.
void fill_reference_kernels(KernelTable& t);
// (The graph-v2 ops' reference kernels are shared with nox: dispatch/ref/v2_kernel_table.h.)
// A level's strided float GEMM C[M, N] (row stride ldc) = A @ B with A(m, k) = a[m * sam + k * sak],
// B(k, n) = b[k * sbk + n * sbn], threaded (the x86 levels' panel GEMM, nn_x86.inc gemm_strided).
using StridedGemm = void (*)(const float* a, int64_t sam, int64_t sak, const float* b, int64_t sbk, int64_t sbn,
                             int64_t M, int64_t N, int64_t K, float* c, int64_t ldc, ExecContext& ctx);
// conv_transpose as that GEMM (x^T @ W per group, both read in place) then a col2im scatter-add
// (ref_array_nn.cc).
void conv_transpose_col2im(const Op& op, const Tensor* in, int n_in, Tensor* out, ExecContext& ctx, StridedGemm gemm);
// resize, mode nearest, as index tables and row copies (ref_array_nn.cc; equal to the reference);
// other modes: the reference. Registered by the x86 levels.
void resize_fast(const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out, ExecContext& ctx);
// pad, pad_dyn and constant_of_shape by rows (memcpy / fill), threaded: the reference's bytes
// (ref_array_nn.cc). Registered by the x86 levels.
void pad_fast(const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out, ExecContext& ctx);
void constant_of_shape_fast(const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out, ExecContext& ctx);
// pool: the reference's planes (ArrayNnKernels::pool_planes, the same values) threaded over (n, c).
void pool_fast(const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out, ExecContext& ctx);

#if defined(CYB_X86)
void fill_avx2_kernels(KernelTable& t);
void fill_avx512_kernels(KernelTable& t);
// Weight encodings whose fast-mode matmul quantizes activations to 16 bits.
bool x86_q16_encoding(DType t);
// Vector width of the avx512 and amx levels' SIMD kernels, 512 or 256 bits: env
// CYB_AVX512_WIDTH=512|256, read once (anything else is an invalid-config error); unset,
// 512 (docs/cpu-backend.md "AVX-512 vector width"). At 256 those levels take their
// 256-bit kernels (kernels_x86_matmul.inc with vpdpwssd, the avx2 K-quant and packed float
// matmuls) instead of the 512-bit ones (kquant_avx512.cc, q32_avx512.cc,
// fgemm_avx512.cc, attention_avx512.cc, the 16-lane GELU); AMX tiles are unaffected.
int avx512_width();
// Interleaved row streams per thread of the K-quant decode (kquant_x86.h kq_decode_rows): env
// CYB_DECODE_STREAMS=1|2|4|8, read once (anything else is an invalid-config error); unset, 1
// on AMD CPUs and 4 elsewhere (docs/cpu-backend.md, "Decode").
int decode_streams();
// Whether the CPU has GFNI (Galois-field byte instructions) and CYB_GFNI is not 0: the avx512 Q6_K
// decode dot assembles its codes with them (kquant_avx512.cc). CYB_GFNI=0|1, read once (anything
// else is an invalid-config error); 0 takes the plain path on any CPU (for tests and A/B).
bool has_gfni();
// avx512 level, fast mode: Q2_K / Q3_K / Q4_K / Q5_K / Q6_K matmuls on BlockQ16K activations
// (kquant_avx512.cc). y[T, N] = x[T, K] @ W^T, threaded over rows.
bool avx512_kquant_encoding(DType t);
void avx512_kquant_matmul(const float* x, int64_t T, int64_t K, const Tensor& W, float* y, ExecContext& ctx);
// avx2 level, fast mode: the same encodings on BlockQ16K activations with 256-bit
// registers (kquant_avx2.cc); threaded over rows.
bool avx2_kquant_encoding(DType t);
void avx2_kquant_matmul(const float* x, int64_t T, int64_t K, const Tensor& W, float* y, ExecContext& ctx);
// One token through n <= 3 matrices of those encodings that share x (gate and up; q, k
// and v): y[i] = W[i] . x with one quantization of x and one parallel region over all
// their rows (kquant_x86.h kq_decode).
void avx512_kquant_decode(const float* x, int64_t K, const Tensor* const* W, float* const* y, int n,
                          ExecContext& ctx);
void avx2_kquant_decode(const float* x, int64_t K, const Tensor* const* W, float* const* y, int n, ExecContext& ctx);
// avx512 level, fast mode, two or more tokens: Q4_0 / Q4_1 / Q5_0 / Q8_0
// (q32_avx512.cc; activations quantized as BlockQ16).
bool avx512_q32_encoding(DType t);
void avx512_q32_matmul(const float* x, int64_t T, int64_t K, const Tensor& W, float* y, ExecContext& ctx);
// avx512 level, both modes: F32 / F16 / BF16 weights and 2..kPackedMinTokens-1
// tokens (fgemm_avx512.cc; 4 x 4 register blocks, f32 products and sums).
void avx512_float_matmul(const float* x, int64_t T, int64_t K, const Tensor& W, float* y, ExecContext& ctx);
// Both modes, F32 / F16 / BF16 weights, T >= kPackedMinTokens tokens: the packed
// GEMM of fgemm_packed.inc at the avx512 (fgemm_avx512.cc) and avx2 (fgemm_avx2.cc)
// levels; y = x @ W^T + bias (bias may be null).
void avx512_packed_matmul(const float* x, int64_t T, int64_t K, const Tensor& W, const float* bias, float* y,
                          ExecContext& ctx);
void avx2_packed_matmul(const float* x, int64_t T, int64_t K, const Tensor& W, const float* bias, float* y,
                        ExecContext& ctx);
// Tokens from which a float-weight matmul repacks the weights (the packing reads
// every weight once more: below this, dot-product kernels on the rows win).
constexpr int64_t kPackedMinTokens = 16;
// avx512 level: attention of >= 8 query tokens over an f32 cache [nkv][cache_ctx][hd]
// (attention_avx512.cc); false when head_dim is not a multiple of 16 or > 128.
bool avx512_attention_tiles(const Op& op, int64_t T, const float* q, const float* k, const float* v, int64_t cache_ctx,
                            float* out, ExecContext& ctx);
// amx level (kquant_amx.cc): the OS grants the tile state (asked once), and a
// fast-mode matmul on AMX-INT8 tiles; false when it does not apply (fewer than
// 8 tokens, or an encoding other than Q4_K / Q6_K).
bool amx_available();
bool amx_matmul(const float* x, int64_t T, int64_t K, const Tensor& W, float* y, ExecContext& ctx);
// amx level, fast mode, F32 / F16 / BF16 weights, T >= kPackedMinTokens: the
// product on AMX-BF16 tiles with each value split into two bf16 numbers
// (fgemm_amx.cc); y = x @ W^T + bias (bias may be null). False when it does not apply.
// `epi`, when given, runs on each finished block of y (rows t0.., columns n0..)
// while it is still in cache: the fused matmul epilogues (GELU, residual add).
struct BlockEpilogue {
  void (*fn)(const void* state, int64_t t0, int64_t rows, int64_t n0, int64_t cols) = nullptr;
  const void* state = nullptr;
  void operator()(int64_t t0, int64_t rows, int64_t n0, int64_t cols) const { fn(state, t0, rows, n0, cols); }
};
bool amx_float_matmul(const float* x, int64_t T, int64_t K, const Tensor& W, const float* bias, float* y,
                      ExecContext& ctx, const BlockEpilogue* epi = nullptr);
void fill_amx_kernels(KernelTable& t);
#endif
#if defined(CYB_ARM64)
void fill_neon_kernels(KernelTable& t);
bool neon_q16_encoding(DType t);
#endif

// Weights the float kernels take as they are (exact in f32): F32, F16, BF16.
inline bool float_weights(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// Reads element i of an F32 / F16 / BF16 tensor.
float load_elem(const Tensor& t, int64_t i);

}  // namespace cpu
}  // namespace cyb
