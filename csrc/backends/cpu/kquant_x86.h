// The K-quant (Q2_K / Q3_K / Q4_K / Q5_K / Q6_K) fast-mode matmul pieces shared by the avx2
// (kquant_avx2.cc) and avx512 (kquant_avx512.cc, also used at the amx level)
// kernels: the super-block header decoding, the expanded weight block and the
// prefill driver that expands each block of rows once and runs every token tile
// against it. The SIMD work is the level's "Kern" class:
//   Kern::kTileT                              tokens per tile (<= 8)
//   Kern::kRows                               rows per expanded dot (1 or 2)
//   Kern::Act, Kern::kActTokens               the prefill activation block (one super-block of
//                                             kActTokens tokens) and Kern::quantize_prefill(x, T,
//                                             K, Act* out), which writes ceil(T / kActTokens) x
//                                             K / 256 of them (token group-major)
//   Kern::expand_row<E>(w, nsb, ExpSB* out)   nsb super-blocks of a row, expanded
//   Kern::dot_expanded<E, NT>(w, ws, x, nsb, xs, out)
//                                             out[r * kTileT + t] = row_r . x_t, r < kRows, t < NT,
//                                             on expanded weights (row r at w + r * ws; ws may be 0)
//                                             and Act blocks (token group g's at x + g * xs)
//   Kern::dot_row<E, NT>(w, x, nsb, xs, out)  the same on the row's bytes (decode: NT = 1,
//                                             with kq_decode_prefetch per super-block)
//   Kern::decode_dot(E)                       a decode dot of its own (RowDotFn on the level's
//                                             split activations, kq_decode), or null
//   Kern::decode_dot2(E)                      a two-row decode dot (RowPairFn, kq_decode_rows) on
//                                             the activations of E's one-row decode dot, or null
// Activations are BlockQ16K (simd_common.h) in the order of the level's expanded
// weights (each level's quantize_row_q16k), so an expanded super-block dot is a
// plain 256-element int16 dot product.
//
// Everything here has internal linkage: each including translation unit (compiled
// with its own ISA flags) gets its own copy, so the linker can never hand the avx2
// level a function compiled with the AVX-512 flags.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd_common.h"
#include "core/dtype.h"
#include "core/exec_context.h"
#include "core/tensor.h"

#if defined(__GNUC__)
#define KQ_UNROLL _Pragma("GCC unroll 8")
#else
#define KQ_UNROLL
#endif

namespace cyb {
namespace cpu {
namespace {  // NOLINT(build/namespaces): internal linkage on purpose (above)

// An empty asm on a vector register: the compiler must keep v there, so it can neither fold the
// load that made v into each of its uses as a memory operand (AVX-512: two loads where one does,
// and on AMD Zen 4 a slower dot) nor reassociate the chain of adds v belongs to (AVX2: GCC turned
// the super-block's vpaddd chain into a tree, keeping every vpmaddwd result alive and spilling).
template <class V>
inline void in_register(V& v) {
#if defined(__GNUC__)
  __asm__("" : "+v"(v));
#else
  (void)v;
#endif
}

inline float f16v(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// The 8 scales and 8 mins (6 bits each) of a Q4_K / Q5_K super-block (the 12 bytes at
// offset 4), as bytes [s0..s7, m0..m7] of an xmm: built as two 64-bit words and moved into the
// vector register as such (AMD Zen 4: the Q4_K decode dots 1-2 cycles a super-block faster
// than with four 32-bit inserts).
inline __m128i k_scales_mins(const uint8_t* p) {
  uint64_t ab;
  uint32_t c;
  std::memcpy(&ab, p, 8);
  std::memcpy(&c, p + 8, 4);
  const uint64_t a = ab & 0xffffffffu, b = ab >> 32;
  const uint64_t s = (a & 0x3f3f3f3fu) | (((c & 0x0f0f0f0fu) | (((a >> 6) & 0x03030303u) << 4)) << 32);
  const uint64_t m = (b & 0x3f3f3f3fu) | ((((c >> 4) & 0x0f0f0f0fu) | (((b >> 6) & 0x03030303u) << 4)) << 32);
  return _mm_set_epi64x(static_cast<int64_t>(m), static_cast<int64_t>(s));
}

template <DType E>
constexpr int64_t kq_bytes() {
  return E == DType::Q2_K ? 84 : E == DType::Q3_K ? 110 : E == DType::Q4_K ? 144 : E == DType::Q5_K ? 176 : 210;
}
// Encodings whose values carry a min term (d * sc * q - dmin * m): per 32 values for Q4_K /
// Q5_K, per 16 for Q2_K (kq_half_mins). Q3_K and Q6_K are symmetric (an offset folded into the
// expanded weights).
template <DType E>
constexpr bool kq_mins() {
  return E == DType::Q2_K || E == DType::Q4_K || E == DType::Q5_K;
}
template <DType E>
constexpr bool kq_half_mins() {
  return E == DType::Q2_K;
}

// One expanded super-block: 256 int16 weight x sub-block scale in the level's
// activation order, d, and dmin * m[j] (Q4_K / Q5_K; Q2_K: dmin * m[2j + 1], with dmin and
// dm[j] = m[2j] - m[2j + 1] for the first halves, q2k_header).
struct alignas(64) ExpSB {
  int16_t w[256];
  float d;
  float dmin;
  int8_t dm[8];
  float pad[4];
  float mins[8];
};
static_assert(sizeof(ExpSB) == 576, "ExpSB layout");

// 16 per-sub-block values v[i] (signed bytes, |v[2j] - v[2j + 1]| < 128) split as odd[j] = v[2j + 1]
// (low 8 bytes of the first) and diff[j] = v[2j] - v[2j + 1] (low 8 of the second): sum_i v[i] S_i
// over per-16 sums S is odd . s + diff . s2 on BlockQ16K's s (per 32) and s2 (first 16 of each 32).
struct OddDiff {
  __m128i odd, diff;
};
inline OddDiff kq_odd_diff(__m128i v) {
  const __m128i eo = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
  const __m128i odd = _mm_srli_si128(eo, 8);
  return {odd, _mm_sub_epi8(eo, odd)};
}
// f * the low 8 signed bytes of b, as floats.
inline __m256 kq_scaled_bytes(__m128i b, float f) {
  return _mm256_mul_ps(_mm256_set1_ps(f), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)));
}

// A Q2_K super-block's d, dmin and min term: 16 sub-block mins m[i] (the high nibbles of
// its 16 scale bytes) split as mins[j] = dmin * m[2j + 1] over each 32-value group and
// dm[j] = m[2j] - m[2j + 1] over the group's first 16 values, so that the term is
// mins . s + dmin * (dm . s2) on the activations' sums (BlockQ16K s, s2).
inline void q2k_header(const uint8_t* blk, float* d, float* dmin, float* mins, int8_t* dm) {
  *d = f16v(blk + 80);
  *dmin = f16v(blk + 82);
  const auto od = kq_odd_diff(_mm_and_si128(
      _mm_srli_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)), 4), _mm_set1_epi8(0x0f)));
  _mm256_storeu_ps(mins, kq_scaled_bytes(od.odd, *dmin));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dm), od.diff);
}

// dmin * dm[j] as 8 floats (q2k_header).
inline __m256 q2k_half_mins(float dmin, const int8_t* dm) {
  return kq_scaled_bytes(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(dm)), dmin);
}

// The 16 sub-block scales of a Q3_K super-block (12 bytes at offset 96: low 4 bits of scale i
// in byte i % 8 (low nibble for i < 8, high nibble after), high 2 bits in byte 8 + i % 4 at bit
// 2 (i / 4)) as signed bytes, minus 32.
inline __m128i q3k_scales(const uint8_t* p) {
  uint32_t a, b, c;
  std::memcpy(&a, p, 4);
  std::memcpy(&b, p + 4, 4);
  std::memcpy(&c, p + 8, 4);
  const uint32_t s0 = (a & 0x0f0f0f0fu) | ((c & 0x03030303u) << 4);
  const uint32_t s1 = (b & 0x0f0f0f0fu) | (((c >> 2) & 0x03030303u) << 4);
  const uint32_t s2 = ((a >> 4) & 0x0f0f0f0fu) | (((c >> 4) & 0x03030303u) << 4);
  const uint32_t s3 = ((b >> 4) & 0x0f0f0f0fu) | (((c >> 6) & 0x03030303u) << 4);
  return _mm_sub_epi8(_mm_set_epi32(static_cast<int>(s3), static_cast<int>(s2), static_cast<int>(s1),
                                    static_cast<int>(s0)),
                      _mm_set1_epi8(32));
}

// The 16 sub-block scales of a Q2_K super-block (the low nibbles of its first 16 bytes).
inline __m128i q2k_scales(const uint8_t* p) {
  return _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), _mm_set1_epi8(0x0f));
}

// The sum of the 8 lanes.
inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// d and dmin * m[j] of a Q4_K / Q5_K super-block header (*mins: 8 floats), and its scales/mins bytes.
inline __m128i kq_header(const uint8_t* blk, float* d, __m256* mins) {
  *d = f16v(blk);
  const __m128i sm = k_scales_mins(blk + 4);
  *mins = _mm256_mul_ps(_mm256_set1_ps(f16v(blk + 2)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8))));
  return sm;
}
// The same with the mins stored (8 floats at mins).
inline __m128i kq_header(const uint8_t* blk, float* d, float* mins) {
  __m256 m;
  const __m128i sm = kq_header(blk, d, &m);
  _mm256_storeu_ps(mins, m);
  return sm;
}

// 8 x 6 x 576 B = 27 KiB of expanded weights (L1). Six super-blocks hold all of a 1536-wide row
// (qwen15's hidden size) in one chunk, so y is written once instead of read-modified-written per
// chunk: qwen15 pp128 +3% at avx2, +4% at avx512 over 4 super-blocks (8 was slower again).
constexpr int64_t kExpRows = 8, kExpChunk = 6;
constexpr int64_t kExpGroupT = 256;             // tokens whose activations (256 x 6 x 576 B = 864 KiB) stay in L2 over the rows

template <class Act>
using ExpDotFn = void (*)(const ExpSB*, int64_t, const Act*, int64_t, int64_t, float*);
using RowDotFn = void (*)(const uint8_t*, const BlockQ16K*, int64_t, int64_t, float*);
// Two rows (w and w + rs) for one token: out[0], out[1] (kq_decode_rows).
using RowPairFn = void (*)(const uint8_t*, size_t, const BlockQ16K*, int64_t, float*);

template <class Kern, DType E, size_t... I>
const ExpDotFn<typename Kern::Act>* exp_dots(std::index_sequence<I...>) {
  static const ExpDotFn<typename Kern::Act> f[] = {nullptr, &Kern::template dot_expanded<E, static_cast<int>(I) + 1>...};
  return f;
}
template <class Kern, DType E, size_t... I>
const RowDotFn* row_dots(std::index_sequence<I...>) {
  static const RowDotFn f[] = {nullptr, &Kern::template dot_row<E, static_cast<int>(I) + 1>...};
  return f;
}
// f[nt] (nt = 1..Kern::kTileT) for the encoding, or null.
template <class Kern>
const RowDotFn* kq_row_dots(DType t) {
  using S = std::make_index_sequence<Kern::kTileT>;
  switch (t) {
    case DType::Q2_K: return row_dots<Kern, DType::Q2_K>(S{});
    case DType::Q3_K: return row_dots<Kern, DType::Q3_K>(S{});
    case DType::Q4_K: return row_dots<Kern, DType::Q4_K>(S{});
    case DType::Q5_K: return row_dots<Kern, DType::Q5_K>(S{});
    case DType::Q6_K: return row_dots<Kern, DType::Q6_K>(S{});
    default: return nullptr;
  }
}

// Decode (one token) reads each row once, super-block by super-block, with a software
// prefetch kDecodePrefetch bytes ahead, and each thread reads its rows as decode_streams()
// interleaved streams (row i of each of that many equal parts of its range in turn): more
// cache lines in flight than one stream gets where a thread waits on memory. Measured on
// qwen15 shapes over ~1 GB of weights, 2 threads, Intel Xeon (docs/cpu-bench.md, 2026-12-02):
// one stream, 8 KiB ahead ~17 GB/s; 4 streams, 2 KiB ahead ~25 GB/s (numpy's 2-thread read
// 27-28 GB/s in the same runs). On AMD Zen 4, where a decode thread is bound by its
// instructions, one stream is the fastest (qwen15 decode at avx512 and avx2 +10-15% over 4;
// docs/cpu-backend.md), hence decode_streams() (kernels.h).
//
// Where the level has a two-row dot for the encoding (Kern::decode_dot2: a RowPairFn, rows w
// and w + rs, both rows' products on one load of each activation register, each row's sum
// formed exactly as the one-row dot forms it), the parts come in pairs read in lockstep (the
// count rounded up to even: 1 -> 2). The activations are 640 bytes a super-block (BlockQ16K),
// 4.4x the Q4_K weights they multiply: a row of 8960 (qwen15's down_proj) reads 22 KiB of them,
// beside the weight stream in a 32 KiB L1, and the evicted lines' refills slowed the weight
// stream (AMD Zen 4, one thread: 14 GB/s at K = 8960, 10 at 17920, 17-18 at 1536-4608; the
// same rows with the activations aliased into 11 KiB: 16-19). Read for two rows they cost half
// (one thread, the same shapes: 16.3 / 14.8 / 18.7-19.1 GB/s; two: 33.6 / 31.9 / 37-38). The two
// rows are far apart (parts of the range): adjacent rows as the pair, both streams in the same
// pages, ran at 10 GB/s (K = 1536, one thread).
constexpr int64_t kDecodePrefetch = 2048;

template <int64_t kBytes>
inline void kq_decode_prefetch(const uint8_t* blk) {
  _mm_prefetch(reinterpret_cast<const char*>(blk + kDecodePrefetch), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(blk + kDecodePrefetch + 64), _MM_HINT_T0);
  if (kBytes > 128) _mm_prefetch(reinterpret_cast<const char*>(blk + kDecodePrefetch + 128), _MM_HINT_T0);
  if (kBytes > 192) _mm_prefetch(reinterpret_cast<const char*>(blk + kDecodePrefetch + 192), _MM_HINT_T0);
}

// Rows [b, e) of one matrix (row bytes rb from base) for one token, as ns = decode_streams()
// interleaved streams (paired for dot2, when given: above); each stream's first kDecodePrefetch
// bytes are fetched up front (the dots' own prefetch runs that far ahead from there on; without
// it every work item started its streams on demand misses: ~2.5% of a qwen15 decode step at avx2).
inline void kq_decode_rows(RowDotFn dot, RowPairFn dot2, const uint8_t* base, size_t rb, const BlockQ16K* xq,
                           int64_t nsb, float* y, int64_t b, int64_t e, int ns) {
  if (dot2) ns += ns & 1;
  const int64_t len = (e - b + ns - 1) / ns;
  for (int s = 0; s < ns && b + s * len < e; ++s) {
    const uint8_t* p0 = base + (b + s * len) * rb;
    const int64_t nb = std::min<int64_t>(kDecodePrefetch, static_cast<int64_t>((e - b - s * len) * rb));
    for (int64_t o = 0; o < nb; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p0 + o), _MM_HINT_T0);
  }
  for (int64_t i = 0; i < len; ++i)
    for (int s = 0; s < ns; s += dot2 ? 2 : 1) {
      const int64_t n = b + s * len + i;
      if (n >= e) continue;
      if (dot2 && n + len < e) {
        float two[2];
        dot2(base + n * rb, static_cast<size_t>(len) * rb, xq, nsb, two);
        y[n] = two[0];
        y[n + len] = two[1];
      } else {
        dot(base + n * rb, xq, nsb, nsb, y + n);
      }
    }
}

// One token through n <= kMaxDecodeMats matrices that share its activations xq (gate
// and up, or q, k and v): y[i][N_i] = W[i] . xq, all rows in one parallel region.
constexpr int kMaxDecodeMats = 3;
// xsplit (may be null): the same activations in the form of the level's own decode dots
// (Kern::decode_dot(E): a RowDotFn on xsplit, or null where the encoding has none).
template <class Kern>
void kq_decode(const Tensor* const* W, float* const* y, int n, const BlockQ16K* xq, const BlockQ16K* xsplit, int64_t K,
               ExecContext& ctx) {
  int64_t end[kMaxDecodeMats] = {};
  for (int i = 0; i < n; ++i) end[i] = (i ? end[i - 1] : 0) + W[i]->shape.d[0];
  const int64_t nsb = K / 256;
  const int64_t grain = std::max<int64_t>(4, 32768 / std::max<int64_t>(K, 1));
  const int ns = decode_streams();  // here, not in a work item: an invalid setting throws
  parallel_rows(ctx, end[n - 1], grain, [&](int64_t b, int64_t e, int) {
    for (int i = 0; i < n; ++i) {
      const int64_t r0 = i ? end[i - 1] : 0, lb = std::max(b, r0) - r0, le = std::min(e, end[i]) - r0;
      if (lb >= le) continue;
      const RowDotFn own = xsplit ? Kern::decode_dot(W[i]->dtype) : nullptr;
      kq_decode_rows(own ? own : kq_row_dots<Kern>(W[i]->dtype)[1], Kern::decode_dot2(W[i]->dtype),
                     static_cast<const uint8_t*>(W[i]->data), row_bytes(W[i]->dtype, K), own ? xsplit : xq, nsb,
                     y[i], lb, le, ns);
    }
  });
}

// One token x (K values) through the n matrices W (kq_decode), quantized into the scratch in each
// form the matrices' dots take: BlockQ16K by q16f for the level's row dots, the split form by
// splitf where Kern::decode_dot has a dot for the encoding (a decode's matrices may mix them).
template <class Kern, class Q16, class Split>
void kq_decode_token(const float* x, int64_t K, const Tensor* const* W, float* const* y, int n, ExecContext& ctx,
                     Q16 q16f, Split splitf) {
  const int64_t nsb = K / 256;
  bool split = false, q16 = false;
  for (int i = 0; i < n; ++i) (Kern::decode_dot(W[i]->dtype) ? split : q16) = true;
  BlockQ16K* xq = scratch<BlockQ16K>(kScratchXq, static_cast<size_t>(2 * nsb));
  if (q16) q16f(x, K, xq);
  if (split) splitf(x, K, xq + nsb);
  kq_decode<Kern>(W, y, n, xq, split ? xq + nsb : nullptr, K, ctx);
}

// The next row block's bytes of this K chunk (rows [n0, n1), bytes [0, len) from base + n * rb),
// fetched into L2 while the current block's token tiles run: the rows are rb apart (a stride
// the hardware prefetcher does not follow across pages), and the expansion waited on them.
inline void kq_prefetch_block(const uint8_t* base, size_t rb, int64_t n0, int64_t n1, int64_t len) {
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t o = 0; o < len; o += 64) _mm_prefetch(reinterpret_cast<const char*>(base + n * rb + o), _MM_HINT_T1);
}

// The output lines of tokens [t0, t1) (columns at y, one row block) fetched ahead of the next
// tile: y[T, N] spans megabytes, and its read-modify-write per tile and K chunk otherwise waits
// on each line (qwen15 at avx2, 512 tokens: ~6% of prefill time on the `+=` below).
inline void kq_prefetch_out(const float* y, int64_t N, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) _mm_prefetch(reinterpret_cast<const char*>(y + t * N), _MM_HINT_T0);
}

// A token tile's sums for nr rows from row n (r: kTileT values per row, token-major) into
// y[T, N] at tokens t0 .. t0 + nt: stored by the first K chunk, added by the later ones.
template <int kTileT>
inline void kq_store_tile(float* y, int64_t N, int64_t t0, int64_t n, int nr, int nt, const float* r, bool first) {
  for (int i = 0; i < nr; ++i) {
    float* yt = y + t0 * N + n + i;
    const float* ri = r + i * kTileT;
    if (first)
      for (int t = 0; t < nt; ++t) yt[t * N] = ri[t];
    else
      for (int t = 0; t < nt; ++t) yt[t * N] += ri[t];
  }
}

// Rows [n0, n1) of y[T, N] (T > 1): per K chunk, per block of kExpRows rows: expand,
// then every token tile against the expanded rows, Kern::kRows rows per dot (a last
// odd row goes in as both rows, ws = 0); sums over chunks accumulate in y.
template <class Kern, DType E>
void expanded_prefill_rows(const uint8_t* base, size_t rb, const typename Kern::Act* xq, int64_t T, int64_t nsb,
                           float* y, int64_t N, int64_t n0, int64_t n1) {
  constexpr int kTileT = Kern::kTileT, kRows = Kern::kRows, kA = Kern::kActTokens;
  static_assert(kTileT % kA == 0, "token tiles start at an activation block");
  const ExpDotFn<typename Kern::Act>* f = exp_dots<Kern, E>(std::make_index_sequence<kTileT>{});
  alignas(64) ExpSB buf[kExpRows * kExpChunk];
  float r[kRows * kTileT];
  for (int64_t c0 = 0; c0 < nsb; c0 += kExpChunk) {
    const int64_t nc = std::min(kExpChunk, nsb - c0);
    for (int64_t g0 = 0; g0 < T; g0 += kExpGroupT)
      for (int64_t r0 = n0; r0 < n1; r0 += kExpRows) {
        const int64_t r1 = std::min(n1, r0 + kExpRows);
        for (int64_t n = r0; n < r1; ++n)
          Kern::template expand_row<E>(base + n * rb + c0 * kq_bytes<E>(), nc, buf + (n - r0) * kExpChunk);
        kq_prefetch_block(base + c0 * kq_bytes<E>(), rb, r1, std::min(n1, r1 + kExpRows), nc * kq_bytes<E>());
        const int64_t g1 = std::min(T, g0 + kExpGroupT);
        for (int64_t t0 = g0; t0 < g1; t0 += kTileT) {
          const int nt = static_cast<int>(std::min<int64_t>(kTileT, T - t0));
          kq_prefetch_out(y + r0, N, t0 + kTileT, std::min<int64_t>(g1, t0 + 2 * kTileT));
          for (int64_t n = r0; n < r1; n += kRows) {
            const int nr = static_cast<int>(std::min<int64_t>(kRows, r1 - n));
            f[nt](buf + (n - r0) * kExpChunk, nr > 1 ? kExpChunk : 0, xq + t0 / kA * nsb + c0, nc, nsb, r);
            kq_store_tile<kTileT>(y, N, t0, n, nr, nt, r, c0 == 0);
          }
        }
      }
  }
}

// y[T, N] = x[T, K] @ W^T over the thread pool, T > 1, on expanded weights.
template <class Kern>
void kq_expanded_prefill(const float* x, const Tensor& W, int64_t T, int64_t K, float* y, ExecContext& ctx) {
  const int64_t N = W.shape.d[0], nsb = K / 256;
  using Act = typename Kern::Act;
  Act* xq = scratch<Act>(kScratchXq, static_cast<size_t>((T + Kern::kActTokens - 1) / Kern::kActTokens * nsb));
  Kern::quantize_prefill(x, T, K, xq);
  const size_t rb = row_bytes(W.dtype, K);
  const uint8_t* base = static_cast<const uint8_t*>(W.data);
  using Fn = void (*)(const uint8_t*, size_t, const Act*, int64_t, int64_t, float*, int64_t, int64_t, int64_t);
  const Fn pf = W.dtype == DType::Q2_K   ? expanded_prefill_rows<Kern, DType::Q2_K>
                : W.dtype == DType::Q3_K ? expanded_prefill_rows<Kern, DType::Q3_K>
                : W.dtype == DType::Q4_K ? expanded_prefill_rows<Kern, DType::Q4_K>
                : W.dtype == DType::Q5_K ? expanded_prefill_rows<Kern, DType::Q5_K>
                                         : expanded_prefill_rows<Kern, DType::Q6_K>;
  const int64_t grain = std::max<int64_t>(16, 32768 / std::max<int64_t>(T * K, 1));
  parallel_rows(ctx, N, grain, [&](int64_t b, int64_t e, int) { pf(base, rb, xq, T, nsb, y, N, b, e); });
}

}  // namespace
}  // namespace cpu
}  // namespace cyb
