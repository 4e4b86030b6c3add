#include "backends/cpu/cpu_backend.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/quant.h"
#include "core/env_setting.h"
#include "core/errors.h"
#include "core/frame_allocator.h"
#include "backends/cpu/simd_common.h"

#if defined(CYB_X86)
#if defined(_MSC_VER)
#include <intrin.h>
#else
#include <cpuid.h>
#endif
#endif

namespace cyb {

// ---------------------------------------------------------------- CPU levels

namespace {

#if defined(CYB_X86)
struct X86Features {
  bool avx2 = false, avx512 = false, amx = false;
  bool amd = false;  // vendor "AuthenticAMD"
  bool gfni = false;
};

void cpuid(unsigned leaf, unsigned sub, unsigned r[4]) {
#if defined(_MSC_VER)
  int v[4];
  __cpuidex(v, static_cast<int>(leaf), static_cast<int>(sub));
  for (int i = 0; i < 4; ++i) r[i] = static_cast<unsigned>(v[i]);
#else
  __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
#endif
}

uint64_t xgetbv0() {
#if defined(_MSC_VER)
  return _xgetbv(0);
#else
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
#endif
}

X86Features detect_x86() {
  X86Features f;
  unsigned r[4];
  cpuid(0, 0, r);
  const unsigned max_leaf = r[0];
  f.amd = r[1] == 0x68747541u && r[3] == 0x69746e65u && r[2] == 0x444d4163u;  // "Auth" "enti" "cAMD"
  if (max_leaf < 7) return f;
  cpuid(1, 0, r);
  const bool osxsave = (r[2] >> 27) & 1, fma = (r[2] >> 12) & 1, f16c = (r[2] >> 29) & 1;
  const bool avx = (r[2] >> 28) & 1;
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = xgetbv0();
  const bool ymm_os = (xcr0 & 0x6) == 0x6;
  const bool zmm_os = (xcr0 & 0xe6) == 0xe6;
  cpuid(7, 0, r);
  const bool avx2 = (r[1] >> 5) & 1;
  const bool avx512f = (r[1] >> 16) & 1, avx512dq = (r[1] >> 17) & 1;
  const bool avx512bw = (r[1] >> 30) & 1, avx512vl = (r[1] >> 31) & 1;
  const bool vnni = (r[2] >> 11) & 1;
  f.gfni = (r[2] >> 8) & 1;
  f.avx2 = ymm_os && avx2 && fma && f16c;
  f.avx512 = f.avx2 && zmm_os && avx512f && avx512dq && avx512bw && avx512vl && vnni;
  const bool amx_bf16 = (r[3] >> 22) & 1, amx_tile = (r[3] >> 24) & 1, amx_int8 = (r[3] >> 25) & 1;
  const bool tile_os = ((xcr0 >> 17) & 3) == 3;  // XTILECFG and XTILEDATA enabled by the OS
  f.amx = f.avx512 && amx_tile && amx_int8 && amx_bf16 && tile_os;
  return f;
}
#endif

const struct Tables& tables();

// A fused matmul epilogue where a level has no kernel of its own: that level's
// matmul, then its GELU or add over the output (the reference table's is the
// definition: each step rounded to f32 as the unfused ops are).
template <int L>
void composed_matmul_epilogue(const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out, ExecContext& ctx);
template <int L>
void composed_rope_kv(const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out, ExecContext& ctx);
template <int L>
void composed_qkv(const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out, ExecContext& ctx);
template <int L>
void composed_norm_then(const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out, ExecContext& ctx);
template <int L>
void composed_rope_attention(const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out, ExecContext& ctx);

struct Tables {
  cpu::KernelTable t[5];
  bool ok[5] = {true, false, false, false, false};
  Tables() {
    for (auto& k : t) cpu::fill_reference_kernels(k);
#if defined(CYB_X86)
    const X86Features f = detect_x86();
    if (f.avx2) {
      cpu::fill_avx2_kernels(t[1]);
      ok[1] = true;
    }
    if (f.avx512) {
      cpu::fill_avx2_kernels(t[2]);
      cpu::fill_avx512_kernels(t[2]);
      ok[2] = true;
    }
    if (f.amx && cpu::amx_available()) {  // the tile state must also be granted by the OS
      cpu::fill_avx2_kernels(t[4]);
      cpu::fill_amx_kernels(t[4]);
      ok[4] = true;
    }
#endif
#if defined(CYB_ARM64)
    cpu::fill_neon_kernels(t[3]);
    ok[3] = true;
#endif
    const cpu::Kernel composed[5] = {composed_matmul_epilogue<0>, composed_matmul_epilogue<1>,
                                     composed_matmul_epilogue<2>, composed_matmul_epilogue<3>,
                                     composed_matmul_epilogue<4>};
    for (int i = 0; i < 5; ++i)
      for (OpKind k : {OpKind::FusedMatmulGelu, OpKind::FusedMatmulAdd})
        if (!t[i][k]) t[i][k] = composed[i];
    const cpu::Kernel rope_kv[5] = {composed_rope_kv<0>, composed_rope_kv<1>, composed_rope_kv<2>,
                                    composed_rope_kv<3>, composed_rope_kv<4>};
    const cpu::Kernel qkv[5] = {composed_qkv<0>, composed_qkv<1>, composed_qkv<2>, composed_qkv<3>,
                                composed_qkv<4>};
    const cpu::Kernel norm_then[5] = {composed_norm_then<0>, composed_norm_then<1>, composed_norm_then<2>,
                                      composed_norm_then<3>, composed_norm_then<4>};
    const cpu::Kernel rope_attention[5] = {composed_rope_attention<0>, composed_rope_attention<1>,
                                           composed_rope_attention<2>, composed_rope_attention<3>,
                                           composed_rope_attention<4>};
    for (int i = 0; i < 5; ++i) {
      if (!t[i][OpKind::FusedRopeKv]) t[i][OpKind::FusedRopeKv] = rope_kv[i];
      if (!t[i][OpKind::FusedRopeAttention]) t[i][OpKind::FusedRopeAttention] = rope_attention[i];
      if (!t[i][OpKind::FusedQkv]) t[i][OpKind::FusedQkv] = qkv[i];
      for (OpKind k : {OpKind::FusedNormQkv, OpKind::FusedNormSwiGlu})
        if (!t[i][k]) t[i][k] = norm_then[i];
    }
  }
};

template <int L>
void composed_matmul_epilogue(const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out, ExecContext& ctx) {
  const cpu::KernelTable& t = tables().t[L];
  const bool add = op.kind == OpKind::FusedMatmulAdd;
  const int bias_at = add ? 3 : 2;
  const Tensor mm[3] = {in[0], in[1], n_in > bias_at ? in[bias_at] : Tensor{}};
  Op step = op;
  step.kind = OpKind::Matmul;
  t[OpKind::Matmul](step, mm, n_in > bias_at ? 3 : 2, out, n_out, ctx);
  if (add) {
    const Tensor ab[2] = {out[0], in[2]};
    step.kind = OpKind::Add;
    t[OpKind::Add](step, ab, 2, out, n_out, ctx);
  } else {
    step.kind = op.a.gelu_erf ? OpKind::Gelu : OpKind::GeluTanh;
    t[step.kind](step, out, 1, out, n_out, ctx);
  }
}

// fused_rope_kv as its definition: the level's rope, rope, kv_write, kv_write kernels.
template <int L>
void composed_rope_kv(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext& ctx) {
  const cpu::KernelTable& t = tables().t[L];
  Op step = op;
  step.kind = OpKind::Rope;
  t[OpKind::Rope](step, &in[0], 1, &out[0], 1, ctx);
  step.a.n_heads = op.a.n_kv_heads;
  t[OpKind::Rope](step, &in[1], 1, &out[1], 1, ctx);
  step.kind = OpKind::KvWrite;
  t[OpKind::KvWrite](step, &out[1], 1, &out[2], 1, ctx);
  t[OpKind::KvWrite](step, &in[2], 1, &out[3], 1, ctx);
}

// fused_qkv as its definition: the level's matmul kernel three times (the x86 levels have their
// own, kernels_x86_ops.inc k_fused_qkv: one token on K-quant weights shares one parallel region).
template <int L>
void composed_qkv(const Op& op, const Tensor* in, int n_in, Tensor* out, int, ExecContext& ctx) {
  const cpu::KernelTable& t = tables().t[L];
  Op step = op;
  step.kind = OpKind::Matmul;
  for (int i = 0; i < 3; ++i) {
    const Tensor mm[3] = {in[0], in[1 + i], n_in == 7 ? in[4 + i] : Tensor{}};
    t[OpKind::Matmul](step, mm, n_in == 7 ? 3 : 2, &out[i], 1, ctx);
  }
}

// fused_norm_qkv / fused_norm_swiglu as their definition: the level's rms_norm into the norm scratch
// (which the matmul kernels leave alone), then its fused_qkv / fused_swiglu on those rows.
template <int L>
void composed_norm_then(const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out, ExecContext& ctx) {
  const cpu::KernelTable& t = tables().t[L];
  const int64_t K = in[0].shape.cols(), T = in[0].shape.numel() / K;
  Tensor xn = in[0];
  xn.data = cpu::scratch<float>(cpu::kScratchNorm, static_cast<size_t>(T * K));
  Op step = op;
  step.kind = OpKind::RmsNorm;
  t[OpKind::RmsNorm](step, in, 2, &xn, 1, ctx);
  Tensor rest[7];
  const int n_rest = without_norm_weight(in, n_in, rest);
  rest[0] = xn;
  step.kind = op.kind == OpKind::FusedNormQkv ? OpKind::FusedQkv : OpKind::FusedSwiGlu;
  t[step.kind](step, rest, n_rest, out, n_out, ctx);
}

// fused_rope_attention as its definition: the level's rms_norm of each head of q and k when the op
// has the norms, and its fused_rope_kv, into copies of q and k (the op leaves q and k as they are),
// then its attention over the caches. The decoder on the cpu keeps the separate ops, so this runs
// only where the op is asked for by name (the op matrix).
template <int L>
void composed_rope_attention(const Op& op, const Tensor* in, int n_in, Tensor* out, int, ExecContext& ctx) {
  const cpu::KernelTable& t = tables().t[L];
  std::vector<float> qr(static_cast<size_t>(in[0].shape.numel())), kr(static_cast<size_t>(in[1].shape.numel()));
  Tensor rope_out[4] = {in[0], in[1], out[1], out[2]};
  rope_out[0].data = qr.data();
  rope_out[1].data = kr.data();
  Op step = op;
  Tensor rope_in[3] = {in[0], in[1], in[2]};
  if (n_in == 5) {  // each head of q and k through the level's rms_norm, into the copies
    step.kind = OpKind::RmsNorm;
    for (int i = 0; i < 2; ++i) {
      Tensor x = in[i], y = rope_out[i];
      x.shape = y.shape = Shape{in[i].shape.numel() / op.a.head_dim, op.a.head_dim};
      const Tensor norm_in[2] = {x, in[3 + i]};
      t[OpKind::RmsNorm](step, norm_in, 2, &y, 1, ctx);
      rope_in[i] = rope_out[i];
    }
  }
  step.kind = OpKind::FusedRopeKv;
  t[OpKind::FusedRopeKv](step, rope_in, 3, rope_out, 4, ctx);
  const Tensor att_in[3] = {rope_out[0], out[1], out[2]};
  step.kind = OpKind::Attention;
  t[OpKind::Attention](step, att_in, 3, &out[0], 1, ctx);
}

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const char* cpu_level_name(CpuLevel l) {
  switch (l) {
    case CpuLevel::Scalar: return "scalar";
    case CpuLevel::Avx2: return "avx2";
    case CpuLevel::Avx512: return "avx512";
    case CpuLevel::Neon: return "neon";
    case CpuLevel::Amx: return "amx";
  }
  return "scalar";
}

std::vector<CpuLevel> cpu_levels_compiled() {
  // The same macros that decide which fill_*_kernels calls Tables() compiles.
  std::vector<CpuLevel> v{CpuLevel::Scalar};
#if defined(CYB_X86)
  v.insert(v.end(), {CpuLevel::Avx2, CpuLevel::Avx512, CpuLevel::Amx});
#endif
#if defined(CYB_ARM64)
  v.push_back(CpuLevel::Neon);
#endif
  return v;
}

std::vector<CpuLevel> cpu_levels_available() {
  std::vector<CpuLevel> v;
  for (int i = 0; i < 5; ++i)
    if (tables().ok[i]) v.push_back(static_cast<CpuLevel>(i));
  return v;
}

CpuLevel cpu_level_best() { return cpu_levels_available().back(); }

CpuLevel parse_cpu_level(const std::string& name) {
  if (name.empty() || name == "auto") return cpu_level_best();
  for (int i = 0; i < 5; ++i) {
    const CpuLevel l = static_cast<CpuLevel>(i);
    if (name == cpu_level_name(l)) {
      if (!tables().ok[i])
        throw_invalid_config("cpu_level", "level '" + name + "' is not available on this machine");
      return l;
    }
  }
  throw_invalid_config("cpu_level", "unknown CPU level '" + name + "' (scalar, avx2, avx512, amx, neon, auto)");
}

// ---------------------------------------------------------------- the backend

CpuBackend::CpuBackend(CpuLevel level) : level_(level) { set_level(level); }

void CpuBackend::set_level(CpuLevel l) {
  const int i = static_cast<int>(l);
  if (i < 0 || i > 4 || !tables().ok[i])
    throw_invalid_config("cpu_level", std::string("level '") + cpu_level_name(l) + "' is not available");
  level_.store(l);
}

bool CpuBackend::supports(const Op& op, const Tensor*, int) const {
  // Every op with a kernel (the reference table is complete); graph views have none.
  return op.kind != OpKind::COUNT_PLUS_ONE && tables().t[0][op.kind] != nullptr;
}

int64_t CpuBackend::weight_cache_bytes(const Tensor& w, bool precise) const {
  // The panels of a forward of many tokens (fewer take no panels): 16-column panels of
  // 32-value blocks, bf16 hi and lo halves of F32 / F16 weights, the bf16 values of BF16 ones.
  if (!w.data || w.shape.ndim != 2) return 0;
  if (!precise && cpu_level_bf16_split(level(), w.dtype, int64_t(1) << 20)) {
    const int64_t n = (w.shape.d[0] + 15) / 16 * 16, k = (w.shape.d[1] + 31) / 32 * 32;
    return n * k * (w.dtype == DType::BF16 ? 2 : 4);
  }
  // F32 weights: the packed f32 GEMM's panels of 2 x (the level's lanes) columns
  const CpuLevel l = level();
  if (w.dtype != DType::F32 || !(l == CpuLevel::Avx2 || l == CpuLevel::Avx512 || l == CpuLevel::Amx)) return 0;
  const int64_t nr = l == CpuLevel::Avx2 ? 16 : 32;
  return (w.shape.d[0] + nr - 1) / nr * nr * w.shape.d[1] * 4;
}

void CpuBackend::execute(const Op& op, const Tensor* inputs, int n_inputs, Tensor* outputs,
                         int n_outputs, ExecContext& ctx) {
  // Validated once by the dispatcher (validate_op, dispatch/op_schema.h).
  const cpu::KernelTable& t = tables().t[static_cast<int>(level_.load())];
  t[op.kind](op, inputs, n_inputs, outputs, n_outputs, ctx);
}

void CpuBackend::release_scratch() { cpu::release_scratch(); }

void CpuBackend::download_f32(const Tensor& t, float* out) {
  const int64_t n = t.shape.numel();
  if (t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16) {
    for (int64_t i = 0; i < n; ++i) out[i] = cpu::load_elem(t, i);
  } else if (t.dtype == DType::I32) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<const int32_t*>(t.data)[i]);
  } else if (is_quantized(t.dtype)) {
    dequant_row(t.dtype, t.data, out, n);
  } else {
    throw_unsupported_op("download_f32", "cpu", dtype_name(t.dtype));
  }
}

CpuBackend& cpu_backend() {
  static CpuBackend* b = [] {
    const char* env = std::getenv("CYB_CPU_LEVEL");
    return new CpuBackend(parse_cpu_level(env ? env : "auto"));
  }();
  return *b;
}

namespace cpu {
int avx512_width() {
  static const int w = env_one_of("CYB_AVX512_WIDTH", {"256", "512"}) == "256" ? 256 : 512;
  return w;
}

int decode_streams() {
  static const int n = [] {
    const std::string v = env_one_of("CYB_DECODE_STREAMS", {"1", "2", "4", "8"});
    if (!v.empty()) return std::stoi(v);
#if defined(CYB_X86)
    if (detect_x86().amd) return 1;
#endif
    return 4;
  }();
  return n;
}

bool has_gfni() {
  static const bool g = [] {
    const bool on = env_switch("CYB_GFNI", "1", "0", true);
#if defined(CYB_X86)
    return on && detect_x86().gfni;
#else
    (void)on;
    return false;
#endif
  }();
  return g;
}
}  // namespace cpu

int cpu_level_activation_block(CpuLevel l, DType t) {
#if defined(CYB_X86)
  if ((l == CpuLevel::Avx512 || l == CpuLevel::Amx) && cpu::avx512_kquant_encoding(t)) return 256;
  if (l == CpuLevel::Avx2 && cpu::avx2_kquant_encoding(t)) return 256;
  if (l == CpuLevel::Avx2 || l == CpuLevel::Avx512 || l == CpuLevel::Amx) return cpu::x86_q16_encoding(t) ? 32 : 0;
#endif
#if defined(CYB_ARM64)
  if (l == CpuLevel::Neon) return cpu::neon_q16_encoding(t) ? 32 : 0;
#endif
  (void)l;
  (void)t;
  return 0;
}

bool cpu_level_bf16_split(CpuLevel l, DType t, int64_t tokens) {
#if defined(CYB_X86)
  return l == CpuLevel::Amx && cpu::float_weights(t) && tokens >= cpu::kPackedMinTokens;
#else
  (void)l;
  (void)t;
  (void)tokens;
  return false;
#endif
}

void set_cpu_level(const std::string& name) { cpu_backend().set_level(parse_cpu_level(name)); }

}  // namespace cyb
