// Every SIMD level against the scalar reference (the arbiter), natively: the
// part of the op matrix that must also run where Python is not available (an
// arm64 build under qemu-user). Same metric and tolerances as tests/test_ops.py
// (docs/runtime.md): max|a - b| / max|ref| <= 1e-6 for single ops on f32 data; a
// fast-mode matmul on 16-bit activations is judged against the reference run on
// the dequantized activations; fused vs unfused <= 1e-4. Exit status 0 = passed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/quant.h"
#include "core/rope.h"
#include "core/exec_context.h"
#include "core/thread_pool.h"

using namespace cyb;

namespace {

int g_fail = 0, g_checks = 0;
std::mt19937 g_rng(7);

struct Buf {
  std::vector<uint8_t> bytes;
  Tensor t;
  Buf() = default;
  Buf(DType dt, Shape s) {
    t.dtype = dt;
    t.shape = s;
    bytes.assign(t.nbytes() + 64, 0);
    t.data = bytes.data();
  }
  Buf(const Buf& o) : bytes(o.bytes), t(o.t) { t.data = bytes.data(); }
  Buf& operator=(const Buf& o) {
    bytes = o.bytes;
    t = o.t;
    t.data = bytes.data();
    return *this;
  }
  float* f() { return t.f32(); }
};

Buf randn(Shape s, float scale = 1.f) {
  Buf b(DType::F32, s);
  std::normal_distribution<float> nd(0.f, scale);
  for (int64_t i = 0; i < s.numel(); ++i) b.f()[i] = nd(g_rng);
  return b;
}

Buf random_weight(DType dt, int64_t n, int64_t k) {
  Buf b(dt, Shape{n, k});
  const size_t nbytes = b.t.nbytes();
  std::normal_distribution<float> nd(0.f, 1.f);
  if (dt == DType::F32) {
    for (int64_t i = 0; i < n * k; ++i) b.f()[i] = nd(g_rng);
    return b;
  }
  if (dt == DType::F16 || dt == DType::BF16) {
    auto* p = static_cast<uint16_t*>(b.t.data);
    for (int64_t i = 0; i < n * k; ++i) p[i] = dt == DType::F16 ? f32_to_fp16(nd(g_rng)) : f32_to_bf16(nd(g_rng));
    return b;
  }
  for (size_t i = 0; i < nbytes; ++i) b.bytes[i] = static_cast<uint8_t>(g_rng());
  std::vector<size_t> fields;
  switch (dt) {
    case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K: fields = {0, 2}; break;
    case DType::Q2_K: fields = {80, 82}; break;
    case DType::Q3_K: fields = {108}; break;
    case DType::Q6_K: fields = {208}; break;
    default: fields = {0}; break;
  }
  std::uniform_real_distribution<float> ud(0.002f, 0.05f);
  const size_t bb = block_bytes(dt);
  for (size_t blk = 0; blk + bb <= nbytes; blk += bb)
    for (size_t off : fields) {
      const uint16_t h = f32_to_fp16(ud(g_rng) * (g_rng() & 1 ? 1.f : -1.f));
      std::memcpy(&b.bytes[blk + off], &h, 2);
    }
  return b;
}

// The fast path's 16-bit activations, dequantized (same rule as the kernels).
Buf q16_dequant(const Buf& x, int bs) {  // int16 per bs-block, as the fast kernels quantize
  Buf y = x;
  const int64_t n = x.t.shape.numel();
  for (int64_t b = 0; b < n / bs; ++b) {
    const float* xb = x.t.f32() + b * bs;
    float amax = 0.f;
    for (int i = 0; i < bs; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / 32767.0f, id = d != 0.f ? 1.0f / d : 0.f;
    for (int i = 0; i < bs; ++i) y.t.f32()[b * bs + i] = d * std::nearbyint(xb[i] * id);
  }
  return y;
}

double rel_err(const Buf& a, const Buf& ref) {
  double num = 0.0, den = 0.0;
  const int64_t n = ref.t.shape.numel();
  for (int64_t i = 0; i < n; ++i) {
    const double x = cpu::load_elem(a.t, i), r = cpu::load_elem(ref.t, i);
    if (!std::isfinite(x)) return INFINITY;
    num = std::max(num, std::fabs(x - r));
    den = std::max(den, std::fabs(r));
  }
  return den > 0 ? num / den : num;
}

void check(const std::string& what, double err, double tol) {
  ++g_checks;
  if (!(err <= tol)) {
    std::printf("FAILED %s: error %.3g > %.1g\n", what.c_str(), err, tol);
    g_fail = 1;
  }
}

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

std::vector<Buf> run(CpuLevel level, bool precise, const Op& op, std::vector<Buf> in, std::vector<Buf> out) {
  CpuBackend be(level);
  ExecContext ctx(&pool(), precise);
  std::vector<Tensor> ti, to;
  for (auto& b : in) ti.push_back(b.t);
  for (auto& b : out) to.push_back(b.t);
  validate_op(op, ti.data(), static_cast<int>(ti.size()), to.data(), static_cast<int>(to.size()));  // the dispatcher's check
  be.execute(op, ti.data(), static_cast<int>(ti.size()), to.data(), static_cast<int>(to.size()), ctx);
  return out;
}

const DType kAll[] = {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                      DType::Q8_0, DType::IQ4_NL, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};

void test_level(CpuLevel L) {
  const std::string ln = cpu_level_name(L);
  for (DType dt : kAll) {
    // 32-value blocks also at 57 blocks: the avx512 prefill's 8-block groups (a partial last
    // group) across two K chunks of 6 groups
    for (int64_t K : {int64_t{block_size(dt) == 256 ? 512 : block_size(dt) == 32 ? 160 : 100},
                      block_size(dt) == 32 ? int64_t{1824} : int64_t{0}}) {
    if (K == 0) continue;
    const int64_t N = 37;
    Buf w = random_weight(dt, N, K);
    Buf bias = randn(Shape{N});
    for (int64_t T : {1, 3, 6, 9}) {
      Buf x = randn(Shape{T, K});
      for (bool precise : {true, false}) {
        const std::string tag = ln + " matmul " + dtype_name(dt) + " K=" + std::to_string(K) + " T=" + std::to_string(T) +
                                (precise ? " precise" : " fast");
        Op op{};
        op.kind = OpKind::Matmul;
        Buf y = run(L, precise, op, {x, w, bias}, {Buf(DType::F32, Shape{T, N})})[0];
        const int qa = precise ? 0 : cpu_level_activation_block(L, dt);
        Buf xr = qa ? q16_dequant(x, qa) : x;
        Buf ref = run(CpuLevel::Scalar, true, op, {xr, w, bias}, {Buf(DType::F32, Shape{T, N})})[0];
        check(tag, rel_err(y, ref), 1e-6);
        // fused ops vs their unfused chain at the same level
        Op fs{};
        fs.kind = OpKind::FusedSwiGlu;
        Buf fy = run(L, precise, fs, {x, w, w}, {Buf(DType::F32, Shape{T, N})})[0];
        Buf g = run(L, precise, op, {x, w}, {Buf(DType::F32, Shape{T, N})})[0];
        Op sw{};
        sw.kind = OpKind::SwiGlu;
        Buf uy = run(L, precise, sw, {g, g}, {Buf(DType::F32, Shape{T, N})})[0];
        check(tag + " fused_swiglu", rel_err(fy, uy), 1e-4);
        Buf nw = randn(Shape{K});
        Op fn{};
        fn.kind = OpKind::FusedNormMatmul;
        fn.a.eps = 1e-5f;
        Buf fny = run(L, precise, fn, {x, nw, w}, {Buf(DType::F32, Shape{T, N})})[0];
        Op rn{};
        rn.kind = OpKind::RmsNorm;
        rn.a.eps = 1e-5f;
        Buf xn = run(L, precise, rn, {x, nw}, {Buf(DType::F32, Shape{T, K})})[0];
        Buf uny = run(L, precise, op, {xn, w}, {Buf(DType::F32, Shape{T, N})})[0];
        check(tag + " fused_norm_matmul", rel_err(fny, uny), 1e-4);
      }
    }
    }
  }
  // attention (F32 / F16 caches, GQA, window, softcap, offset)
  struct AC { int nh, nkv, hd; int64_t T, pos0, window; float cap; };
  for (const AC& c : {AC{4, 4, 64, 1, 0, 0, 0.f}, AC{6, 2, 64, 1, 17, 0, 0.f}, AC{8, 1, 32, 5, 9, 0, 0.f},
                      AC{4, 2, 80, 6, 11, 4, 0.f}, AC{4, 2, 64, 1, 20, 5, 50.f}, AC{2, 1, 36, 3, 3, 0, 20.f}}) {
    for (DType cd : {DType::F32, DType::F16}) {
      const int64_t ctx = 32;
      Buf q = randn(Shape{c.T, c.nh * c.hd}, 2.f);
      Buf kc(cd, Shape{c.nkv, ctx, c.hd}), vc(cd, Shape{c.nkv, ctx, c.hd});
      Buf ks = randn(Shape{c.nkv * ctx, c.hd}), vs = randn(Shape{c.nkv * ctx, c.hd});
      Op cp{};
      cp.kind = OpKind::Copy;
      kc = run(CpuLevel::Scalar, true, cp, {ks}, {kc})[0];
      vc = run(CpuLevel::Scalar, true, cp, {vs}, {vc})[0];
      Op op{};
      op.kind = OpKind::Attention;
      op.a.n_heads = c.nh;
      op.a.n_kv_heads = c.nkv;
      op.a.head_dim = c.hd;
      op.a.pos0 = c.pos0;
      op.a.window = c.window;
      op.a.softcap = c.cap;
      op.a.scale = 1.f / std::sqrt(static_cast<float>(c.hd)) * (c.cap > 0 ? 8.f : 1.f);
      for (bool precise : {true, false}) {
        Buf y = run(L, precise, op, {q, kc, vc}, {Buf(DType::F32, q.t.shape)})[0];
        Buf ref = run(CpuLevel::Scalar, true, op, {q, kc, vc}, {Buf(DType::F32, q.t.shape)})[0];
        check(ln + " attention " + dtype_name(cd) + " nh=" + std::to_string(c.nh), rel_err(y, ref), 1e-6);
      }
    }
  }
  // elementwise, norms, rope, kv_write
  std::vector<float> cosv, sinv;
  build_rope_table(32, 64, 10000.0, RopeScaling{}, cosv, sinv);
  RopeTable rt;
  rt.cos = cosv.data();
  rt.sin = sinv.data();
  rt.rot_dims = 32;
  rt.max_pos = 64;
  for (int64_t D : {67, 256}) {
    Buf a = randn(Shape{5, D}, 3.f), b = randn(Shape{5, D}), w = randn(Shape{D});
    for (OpKind k : {OpKind::Add, OpKind::Mul, OpKind::SwiGlu, OpKind::GeGlu, OpKind::Silu, OpKind::GeluTanh,
                     OpKind::Gelu, OpKind::Softcap, OpKind::Softmax, OpKind::Scale, OpKind::RmsNorm, OpKind::LayerNorm,
                     OpKind::Relu}) {
      Op op{};
      op.kind = k;
      op.a.softcap = 5.f;
      op.a.scale = 0.37f;
      op.a.eps = 1e-5f;
      op.a.norm_plus_one = D == 67;
      std::vector<Buf> in;
      if (k == OpKind::RmsNorm || k == OpKind::LayerNorm) in = {a, w};
      else if (k == OpKind::Add || k == OpKind::Mul || k == OpKind::SwiGlu || k == OpKind::GeGlu) in = {a, b};
      else in = {a};
      Buf y = run(L, false, op, in, {Buf(DType::F32, a.t.shape)})[0];
      Buf ref = run(CpuLevel::Scalar, true, op, in, {Buf(DType::F32, a.t.shape)})[0];
      check(ln + " " + op_name(k) + " D=" + std::to_string(D), rel_err(y, ref), 1e-6);
    }
    {  // l2_normalize, and masked_pool over 5 rows taken as one sequence (rows 1 and 3 masked out)
      Op op{};
      op.kind = OpKind::L2Normalize;
      op.a.eps = 1e-6f;
      Buf y = run(L, false, op, {a}, {Buf(DType::F32, a.t.shape)})[0];
      Buf ref = run(CpuLevel::Scalar, true, op, {a}, {Buf(DType::F32, a.t.shape)})[0];
      check(ln + " l2_normalize D=" + std::to_string(D), rel_err(y, ref), 1e-6);
      Buf m(DType::F32, Shape{5});
      for (int i = 0; i < 5; ++i) m.f()[i] = (i == 1 || i == 3) ? 0.f : 1.f;
      for (int mode = 0; mode < 3; ++mode) {
        Op mp{};
        mp.kind = OpKind::MaskedPool;
        mp.a.pool_mode = mode;
        Buf py = run(L, false, mp, {a, m}, {Buf(DType::F32, Shape{D})})[0];
        Buf pr = run(CpuLevel::Scalar, true, mp, {a, m}, {Buf(DType::F32, Shape{D})})[0];
        check(ln + " masked_pool mode " + std::to_string(mode), rel_err(py, pr), 1e-6);
      }
    }
    Op sk{};
    sk.kind = OpKind::FusedSkipNorm;
    sk.a.eps = 1e-6f;
    auto y = run(L, false, sk, {a, b, w}, {Buf(DType::F32, a.t.shape), Buf(DType::F32, a.t.shape)});
    auto ref = run(CpuLevel::Scalar, true, sk, {a, b, w}, {Buf(DType::F32, a.t.shape), Buf(DType::F32, a.t.shape)});
    check(ln + " fused_skip_norm", std::max(rel_err(y[0], ref[0]), rel_err(y[1], ref[1])), 1e-6);
  }
  for (int64_t window : {int64_t(0), int64_t(3)}) {  // encoder_attention: 3 sequences (one without keys), GQA
    const int nh = 4, nkv = 2, hd = 36;
    const int64_t B = 3, T = 9, S = 9;
    Buf q = randn(Shape{B, T, nh, hd}, 2.f), k = randn(Shape{B, S, nkv, hd}), v = randn(Shape{B, S, nkv, hd});
    Buf m(DType::I32, Shape{B, S});
    int32_t* mp = static_cast<int32_t*>(m.t.data);
    for (int64_t i = 0; i < B * S; ++i) mp[i] = i < S || (i >= S && i < S + 5) ? 1 : 0;  // lengths 9, 5, 0
    mp[S + 1] = 0;  // a hole
    Op op{};
    op.kind = OpKind::EncoderAttention;
    op.a.n_heads = nh;
    op.a.n_kv_heads = nkv;
    op.a.head_dim = hd;
    op.a.scale = 1.f / 6.f;
    op.a.window = window;
    Buf y = run(L, false, op, {q, k, v, m}, {Buf(DType::F32, q.t.shape)})[0];
    Buf ref = run(CpuLevel::Scalar, true, op, {q, k, v, m}, {Buf(DType::F32, q.t.shape)})[0];
    check(ln + " encoder_attention window=" + std::to_string(window), rel_err(y, ref), 1e-6);
  }
  for (bool neox : {true, false}) {
    rt.neox = neox;
    Op op{};
    op.kind = OpKind::Rope;
    op.a.n_heads = 3;
    op.a.head_dim = 48;
    op.a.pos0 = 7;
    op.a.rope = &rt;
    Buf x = randn(Shape{4, 3 * 48});
    Buf y = run(L, false, op, {x}, {Buf(DType::F32, x.t.shape)})[0];
    Buf ref = run(CpuLevel::Scalar, true, op, {x}, {Buf(DType::F32, x.t.shape)})[0];
    check(ln + " rope", rel_err(y, ref), 1e-6);
  }
  for (DType cd : {DType::F32, DType::F16}) {
    Op op{};
    op.kind = OpKind::KvWrite;
    op.a.n_kv_heads = 2;
    op.a.head_dim = 40;
    op.a.pos0 = 5;
    Buf k = randn(Shape{3, 80});
    Buf y = run(L, false, op, {k}, {Buf(cd, Shape{2, 16, 40})})[0];
    Buf ref = run(CpuLevel::Scalar, true, op, {k}, {Buf(cd, Shape{2, 16, 40})})[0];
    check(ln + " kv_write", y.bytes == ref.bytes ? 0.0 : 1.0, 0.0);
  }
}

}  // namespace

int main() {
  for (CpuLevel l : cpu_levels_available())
    if (l != CpuLevel::Scalar) test_level(l);
  std::printf("%d checks\n%s\n", g_checks, g_fail ? "FAIL" : "OK");
  return g_fail;
}
