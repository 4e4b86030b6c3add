#include "backends/cpu/cpu_backend.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "backends/cpu/quant.h"
#include "core/errors.h"
#include "core/frame_allocator.h"

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
  f.avx2 = ymm_os && avx2 && fma && f16c;
  f.avx512 = f.avx2 && zmm_os && avx512f && avx512dq && avx512bw && avx512vl && vnni;
  const bool amx_tile = (r[3] >> 24) & 1, amx_int8 = (r[3] >> 25) & 1;
  const bool tile_os = ((xcr0 >> 17) & 3) == 3;  // XTILECFG and XTILEDATA enabled by the OS
  f.amx = f.avx512 && amx_tile && amx_int8 && tile_os;
  return f;
}
#endif

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
  }
};

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

// ---------------------------------------------------------------- validation

namespace cpu {
namespace {

[[noreturn]] void bad_shape(const Op& op, const std::vector<int64_t>& expected, const Shape& got,
                            const char* what) {
  std::string name = std::string(op.label ? op.label : op_name(op.kind)) + " (" + what + ")";
  throw_shape_mismatch(name, expected, got.vec());
}

void need_count(const Op& op, int n_in, int lo, int hi, int n_out, int n_out_expected) {
  if (n_in < lo || n_in > hi || n_out != n_out_expected) {
    Shape got;
    got.ndim = 2;
    got.d[0] = n_in;
    got.d[1] = n_out;
    bad_shape(op, {hi, n_out_expected}, got, "number of inputs, outputs");
  }
}

void need_dtype(const Op& op, const Tensor& t, std::initializer_list<DType> ok, const char* what) {
  for (DType d : ok)
    if (t.dtype == d) return;
  std::string dt = dtype_name(t.dtype);
  if (t.name) dt += std::string(" (tensor '") + t.name + "')";
  throw_unsupported_op(std::string(op_name(op.kind)) + " " + what, "cpu", dt);
}

void need_data(const Op& op, const Tensor& t, const char* what) {
  if (!t.data || t.device != Device::Host) {
    Shape s = t.shape;
    bad_shape(op, t.shape.vec(), s, what);
  }
}

void need_numel(const Op& op, const Tensor& t, int64_t n, const char* what) {
  if (t.shape.numel() != n) bad_shape(op, {n}, t.shape, what);
}

void need_weight(const Op& op, const Tensor& w, int64_t K, const char* what) {
  if (w.shape.ndim != 2 || w.shape.d[1] != K || w.shape.d[0] <= 0)
    bad_shape(op, {w.shape.ndim == 2 ? w.shape.d[0] : -1, K}, w.shape, what);
  if (w.dtype == DType::I32 || w.dtype == DType::I64 || w.dtype == DType::U8)
    need_dtype(op, w, {DType::F32}, what);
  if (K % block_size(w.dtype) != 0) {
    std::string nm = w.name ? w.name : what;
    throw_weight_format(nm, dtype_name(w.dtype), row_bytes(w.dtype, K),
                        "row length " + std::to_string(K) + " is not a multiple of the block size " +
                            std::to_string(block_size(w.dtype)));
  }
}

const std::initializer_list<DType> kF32 = {DType::F32};

void need_f32_like(const Op& op, const Tensor& t, const Tensor& like, const char* what) {
  need_dtype(op, t, kF32, what);
  need_data(op, t, what);
  if (t.shape.numel() != like.shape.numel()) bad_shape(op, like.shape.vec(), t.shape, what);
}

int64_t heads_rows(const Op& op, const Tensor& x, int heads, const char* what) {
  const int64_t w = static_cast<int64_t>(heads) * op.a.head_dim;
  if (heads <= 0 || op.a.head_dim <= 0 || x.shape.numel() % w != 0 || x.shape.numel() == 0)
    bad_shape(op, {-1, w}, x.shape, what);
  return x.shape.numel() / w;
}

}  // namespace

void validate_op(const Op& op, const Tensor* in, int n_in, const Tensor* out, int n_out) {
  switch (op.kind) {
    case OpKind::Embedding: {
      need_count(op, n_in, 2, 2, n_out, 1);
      need_dtype(op, in[0], {DType::I32}, "ids");
      need_data(op, in[0], "ids");
      need_data(op, in[1], "table");
      if (in[1].shape.ndim != 2) bad_shape(op, {-1, -1}, in[1].shape, "table");
      need_weight(op, in[1], in[1].shape.d[1], "table");
      const int64_t T = in[0].shape.numel(), V = in[1].shape.d[0], D = in[1].shape.d[1];
      const int32_t* ids = static_cast<const int32_t*>(in[0].data);
      for (int64_t t = 0; t < T; ++t)
        if (ids[t] < 0 || ids[t] >= V)
          throw_invalid_config("token id", "id " + std::to_string(ids[t]) + " at position " +
                                               std::to_string(t) + " is outside the vocabulary [0, " +
                                               std::to_string(V) + ")");
      need_dtype(op, out[0], kF32, "out");
      need_data(op, out[0], "out");
      need_numel(op, out[0], T * D, "out");
      return;
    }
    case OpKind::Matmul: {
      need_count(op, n_in, 2, 3, n_out, 1);
      need_dtype(op, in[0], kF32, "x");
      need_data(op, in[0], "x");
      need_data(op, in[1], "weight");
      const int64_t K = in[1].shape.ndim == 2 ? in[1].shape.d[1] : -1;
      if (in[0].shape.cols() != K) bad_shape(op, {-1, K}, in[0].shape, "x");
      need_weight(op, in[1], K, "weight");
      const int64_t T = in[0].shape.numel() / K, N = in[1].shape.d[0];
      if (n_in == 3) {
        need_dtype(op, in[2], kF32, "bias");
        need_data(op, in[2], "bias");
        need_numel(op, in[2], N, "bias");
      }
      need_dtype(op, out[0], kF32, "out");
      need_data(op, out[0], "out");
      need_numel(op, out[0], T * N, "out");
      return;
    }
    case OpKind::RmsNorm:
    case OpKind::LayerNorm: {
      need_count(op, n_in, 2, op.kind == OpKind::LayerNorm ? 3 : 2, n_out, 1);
      need_dtype(op, in[0], kF32, "x");
      need_data(op, in[0], "x");
      const int64_t D = in[0].shape.cols();
      for (int i = 1; i < n_in; ++i) {
        need_dtype(op, in[i], kF32, i == 1 ? "weight" : "bias");
        need_data(op, in[i], i == 1 ? "weight" : "bias");
        need_numel(op, in[i], D, i == 1 ? "weight" : "bias");
      }
      need_f32_like(op, out[0], in[0], "out");
      return;
    }
    case OpKind::Rope: {
      need_count(op, n_in, 1, 1, n_out, 1);
      need_dtype(op, in[0], kF32, "x");
      need_data(op, in[0], "x");
      const RopeTable* rt = op.a.rope;
      if (!rt || !rt->cos || !rt->sin) throw_invalid_config("rope", "rope op without a RopeTable");
      if (rt->rot_dims <= 0 || rt->rot_dims % 2 || rt->rot_dims > op.a.head_dim)
        throw_invalid_config("rope.rot_dims", "rot_dims " + std::to_string(rt->rot_dims) +
                                                  " must be even and <= head_dim " +
                                                  std::to_string(op.a.head_dim));
      const int64_t T = heads_rows(op, in[0], op.a.n_heads, "x");
      if (op.a.pos0 < 0 || op.a.pos0 + T > rt->max_pos)
        throw_invalid_config("position", "positions " + std::to_string(op.a.pos0) + ".." +
                                             std::to_string(op.a.pos0 + T - 1) +
                                             " exceed the RoPE table (" + std::to_string(rt->max_pos) +
                                             " positions)");
      need_f32_like(op, out[0], in[0], "out");
      return;
    }
    case OpKind::Attention: {
      need_count(op, n_in, 3, 3, n_out, 1);
      need_dtype(op, in[0], kF32, "q");
      need_data(op, in[0], "q");
      if (op.a.n_kv_heads <= 0 || op.a.n_heads % op.a.n_kv_heads != 0)
        throw_invalid_config("n_kv_heads", "n_heads " + std::to_string(op.a.n_heads) +
                                               " is not a multiple of n_kv_heads " +
                                               std::to_string(op.a.n_kv_heads));
      const int64_t T = heads_rows(op, in[0], op.a.n_heads, "q");
      for (int i = 1; i < 3; ++i) {
        const char* what = i == 1 ? "k cache" : "v cache";
        need_dtype(op, in[i], {DType::F32, DType::F16}, what);
        need_data(op, in[i], what);
        const Shape& s = in[i].shape;
        if (s.ndim != 3 || s.d[0] != op.a.n_kv_heads || s.d[2] != op.a.head_dim)
          bad_shape(op, {op.a.n_kv_heads, -1, op.a.head_dim}, s, what);
        if (op.a.pos0 < 0 || op.a.pos0 + T > s.d[1])
          throw_invalid_config("position", "positions up to " + std::to_string(op.a.pos0 + T - 1) +
                                               " exceed the KV cache (" + std::to_string(s.d[1]) +
                                               " positions)");
      }
      if (!(in[1].shape == in[2].shape)) bad_shape(op, in[1].shape.vec(), in[2].shape, "v cache");
      need_f32_like(op, out[0], in[0], "out");
      return;
    }
    case OpKind::KvWrite: {
      need_count(op, n_in, 1, 1, n_out, 1);
      need_dtype(op, in[0], kF32, "k");
      need_data(op, in[0], "k");
      const int64_t T = heads_rows(op, in[0], op.a.n_kv_heads, "k");
      need_dtype(op, out[0], {DType::F32, DType::F16}, "cache");
      need_data(op, out[0], "cache");
      const Shape& s = out[0].shape;
      if (s.ndim != 3 || s.d[0] != op.a.n_kv_heads || s.d[2] != op.a.head_dim)
        bad_shape(op, {op.a.n_kv_heads, -1, op.a.head_dim}, s, "cache");
      if (op.a.pos0 < 0 || op.a.pos0 + T > s.d[1])
        throw_invalid_config("position", "positions up to " + std::to_string(op.a.pos0 + T - 1) +
                                             " exceed the KV cache (" + std::to_string(s.d[1]) +
                                             " positions)");
      return;
    }
    case OpKind::Softmax:
    case OpKind::Scale:
    case OpKind::Silu:
    case OpKind::Gelu:
    case OpKind::GeluTanh:
    case OpKind::Softcap: {
      need_count(op, n_in, 1, 1, n_out, 1);
      need_dtype(op, in[0], kF32, "x");
      need_data(op, in[0], "x");
      if (op.kind == OpKind::Softcap && !(op.a.softcap > 0.f))
        throw_invalid_config("softcap", "softcap must be positive");
      need_f32_like(op, out[0], in[0], "out");
      return;
    }
    case OpKind::Add:
    case OpKind::Mul:
    case OpKind::SwiGlu:
    case OpKind::GeGlu: {
      need_count(op, n_in, 2, 2, n_out, 1);
      need_dtype(op, in[0], kF32, "a");
      need_data(op, in[0], "a");
      need_dtype(op, in[1], kF32, "b");
      need_data(op, in[1], "b");
      const int64_t nb = in[1].shape.numel();
      const bool row_bcast = (op.kind == OpKind::Add || op.kind == OpKind::Mul) &&
                             nb == in[0].shape.cols();
      if (nb != in[0].shape.numel() && !row_bcast) bad_shape(op, in[0].shape.vec(), in[1].shape, "b");
      need_f32_like(op, out[0], in[0], "out");
      return;
    }
    case OpKind::FusedSkipNorm: {
      need_count(op, n_in, 3, 3, n_out, 2);
      need_dtype(op, in[0], kF32, "x");
      need_data(op, in[0], "x");
      need_f32_like(op, in[1], in[0], "residual");
      need_dtype(op, in[2], kF32, "weight");
      need_data(op, in[2], "weight");
      need_numel(op, in[2], in[0].shape.cols(), "weight");
      need_f32_like(op, out[0], in[0], "out");
      need_f32_like(op, out[1], in[0], "sum");
      return;
    }
    case OpKind::FusedNormMatmul: {
      need_count(op, n_in, 3, 4, n_out, 1);
      need_dtype(op, in[0], kF32, "x");
      need_data(op, in[0], "x");
      const int64_t K = in[0].shape.cols();
      need_dtype(op, in[1], kF32, "norm weight");
      need_data(op, in[1], "norm weight");
      need_numel(op, in[1], K, "norm weight");
      need_data(op, in[2], "weight");
      need_weight(op, in[2], K, "weight");
      const int64_t N = in[2].shape.d[0];
      if (n_in == 4) {
        need_dtype(op, in[3], kF32, "bias");
        need_data(op, in[3], "bias");
        need_numel(op, in[3], N, "bias");
      }
      need_dtype(op, out[0], kF32, "out");
      need_data(op, out[0], "out");
      need_numel(op, out[0], in[0].shape.numel() / K * N, "out");
      return;
    }
    case OpKind::FusedSwiGlu: {
      need_count(op, n_in, 3, 3, n_out, 1);
      need_dtype(op, in[0], kF32, "x");
      need_data(op, in[0], "x");
      const int64_t K = in[0].shape.cols();
      need_data(op, in[1], "gate weight");
      need_weight(op, in[1], K, "gate weight");
      need_data(op, in[2], "up weight");
      need_weight(op, in[2], K, "up weight");
      if (in[2].shape.d[0] != in[1].shape.d[0]) bad_shape(op, in[1].shape.vec(), in[2].shape, "up weight");
      need_dtype(op, out[0], kF32, "out");
      need_data(op, out[0], "out");
      need_numel(op, out[0], in[0].shape.numel() / K * in[1].shape.d[0], "out");
      return;
    }
    case OpKind::Copy: {
      need_count(op, n_in, 1, 1, n_out, 1);
      need_dtype(op, in[0], {DType::F32, DType::F16, DType::BF16}, "x");
      need_data(op, in[0], "x");
      need_dtype(op, out[0], {DType::F32, DType::F16, DType::BF16}, "out");
      need_data(op, out[0], "out");
      need_numel(op, out[0], in[0].shape.numel(), "out");
      return;
    }
    case OpKind::Reshape:    // views: the graph executor resolves them
    case OpKind::LastRows:
    case OpKind::COUNT_PLUS_ONE: break;
  }
  throw_unsupported_op(op_name(op.kind), "cpu", n_in > 0 ? dtype_name(in[0].dtype) : "none");
}

}  // namespace cpu

std::vector<Shape> infer_output_shapes(const Op& op, const Tensor* in, int n_in) {
  auto with_cols = [](const Shape& s, int64_t c) {
    Shape r = s;
    if (r.ndim == 0) r.ndim = 1;
    r.d[r.ndim - 1] = c;
    return r;
  };
  switch (op.kind) {
    case OpKind::Embedding: {
      Shape s = in[0].shape;
      if (s.ndim >= 4) throw_shape_mismatch(op_name(op.kind), {-1}, s.vec());
      s.d[s.ndim++] = n_in > 1 ? in[1].shape.cols() : 0;
      return {s};
    }
    case OpKind::Matmul:
      return {with_cols(in[0].shape, n_in > 1 ? in[1].shape.d[0] : 0)};
    case OpKind::FusedNormMatmul:
      return {with_cols(in[0].shape, n_in > 2 ? in[2].shape.d[0] : 0)};
    case OpKind::FusedSwiGlu:
      return {with_cols(in[0].shape, n_in > 1 ? in[1].shape.d[0] : 0)};
    case OpKind::FusedSkipNorm: return {in[0].shape, in[0].shape};
    case OpKind::KvWrite: return {};
    default: return {n_in > 0 ? in[0].shape : Shape{}};
  }
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
  return op.kind != OpKind::COUNT_PLUS_ONE && op.kind != OpKind::Reshape &&
         op.kind != OpKind::LastRows;
}

void CpuBackend::execute(const Op& op, const Tensor* inputs, int n_inputs, Tensor* outputs,
                         int n_outputs, ExecContext& ctx) {
  cpu::validate_op(op, inputs, n_inputs, outputs, n_outputs);
  const cpu::KernelTable& t = tables().t[static_cast<int>(level_.load())];
  t[op.kind](op, inputs, n_inputs, outputs, n_outputs, ctx);
}

Tensor CpuBackend::alloc(const Shape& shape, DType dtype) {
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  const size_t n = t.nbytes();
  t.data = aligned_alloc_bytes(n, 64);
  if (!t.data) throw_oom("cpu", n);
  std::memset(t.data, 0, n);
  return t;
}

Tensor CpuBackend::upload(const void* data, const Shape& shape, DType dtype) {
  Tensor t = alloc(shape, dtype);
  std::memcpy(t.data, data, t.nbytes());
  return t;
}

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

void CpuBackend::release(Tensor& t) {
  aligned_free_bytes(t.data);
  t.data = nullptr;
}

CpuBackend& cpu_backend() {
  static CpuBackend* b = [] {
    const char* env = std::getenv("CYB_CPU_LEVEL");
    return new CpuBackend(parse_cpu_level(env ? env : "auto"));
  }();
  return *b;
}

int cpu_level_activation_block(CpuLevel l, DType t) {
#if defined(CYB_X86)
  if ((l == CpuLevel::Avx512 || l == CpuLevel::Amx) && cpu::avx512_kquant_encoding(t)) return 256;
  if (l == CpuLevel::Avx2 || l == CpuLevel::Avx512 || l == CpuLevel::Amx) return cpu::x86_q16_encoding(t) ? 32 : 0;
#endif
#if defined(CYB_ARM64)
  if (l == CpuLevel::Neon) return cpu::neon_q16_encoding(t) ? 32 : 0;
#endif
  (void)l;
  (void)t;
  return 0;
}

void set_cpu_level(const std::string& name) { cpu_backend().set_level(parse_cpu_level(name)); }

}  // namespace cyb
