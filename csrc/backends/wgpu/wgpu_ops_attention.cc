#if defined(CYB_HAVE_WGPU)

#include "backends/wgpu/wgpu_backend_impl.h"

#include <algorithm>

#include "backends/wgpu/wgpu_settings.h"
#include "core/errors.h"

namespace cyb {
namespace wgpu {

namespace {

// Keys a query of the op's last token sees (its sliding window, or every position up to it).
int64_t keys_seen(const Op& op, int64_t T) {
  return op.a.window > 0 ? std::min<int64_t>(op.a.pos0 + T, op.a.window) : op.a.pos0 + T;
}

// Whether attention.wgsl's one-dispatch decode kernel (DEC) takes T tokens of the op's heads.
bool dec_takes(const Op& op, int64_t T) {
  const int nh = op.a.n_heads, hd = op.a.head_dim;
  return attention_kernel() == AttentionKernel::Dec && nh * T < kSplitAttentionMaxRows &&
         keys_seen(op, T) <= kDecAttentionMaxKeys && hd % 8 == 0 && hd <= 256 && 256 % (hd / 8) == 0;
}

}  // namespace

// Attention over the device KV cache (shaders/wgsl/attention.wgsl): DEC (few rows; an f16 cache, or
// an f32 one with DEC_F32),
// one workgroup per (head, token) or FLASH blocks of 16 tokens, or SPLIT over key tiles + COMBINE.
void WgpuBackend::attention(State& st, const Op& op, const Tensor* in, Tensor* out) {
  const uint64_t W = WGPU_WHOLE_SIZE;
  const int nh = op.a.n_heads, nkv = op.a.n_kv_heads, hd = op.a.head_dim;
  const int64_t T = in[0].shape.numel() / (static_cast<int64_t>(nh) * hd);
  const int64_t max_ctx = in[1].shape.d[1];
  if (in[1].shape.ndim != 3 || in[1].shape.d[0] != nkv || in[1].shape.d[2] != hd || op.a.pos0 < 0 ||
      op.a.pos0 + T > max_ctx)
    throw_invalid_config("position", "positions exceed the KV cache");
  const bool f16 = in[1].dtype == DType::F16;
  std::vector<std::string> defs;
  if (f16) defs.push_back("F16");
  // Keys per token at most; few (head, token) workgroups over more than one tile of 64
  // keys: the tiles run in parallel (SPLIT) and a second dispatch combines them.
  const int64_t nsplit = (keys_seen(op, T) + 63) / 64;
  if (dec_takes(op, T)) {
    uint32_t p[12] = {u(T), u(nh), u(nkv), u(hd), u(max_ctx), u(op.a.pos0), u(op.a.window),
                      u(in[0].offset / 4), f2u(op.a.scale), f2u(op.a.softcap), u(out[0].offset / 4), 0u};
    Bind b[] = {{1, act(st, in[0]), 0, W}, {2, dev(in[1])->bufs[0], 0, W}, {3, dev(in[2])->bufs[0], 0, W},
                {4, dev(out[0])->bufs[0], 0, W}};
    st.dispatch(pipeline(g_, "attention", f16 ? std::vector<std::string>{"DEC"}
                                              : std::vector<std::string>{"DEC", "DEC_F32"}),
                p, sizeof(p), b, u(nh), u(T), 1);
    return;
  }
  const bool split = nh * T < kSplitAttentionMaxRows && nsplit > 1;
  uint32_t p[12] = {u(T), u(nh), u(nkv), u(hd), u(max_ctx), u(op.a.pos0), u(op.a.window),
                    u(in[0].offset / 4), f2u(op.a.scale), f2u(op.a.softcap), u(out[0].offset / 4),
                    split ? u(nsplit) : 0u};
  WGPUBuffer qb = act(st, in[0]), kb = dev(in[1])->bufs[0], vb = dev(in[2])->bufs[0], ob = dev(out[0])->bufs[0];
  if (!split) {
    Bind b[] = {{1, qb, 0, W}, {2, kb, 0, W}, {3, vb, 0, W}, {4, ob, 0, W}};
    // Many tokens: blocks of 16 tokens over key tiles staged once for the block (FLASH).
    if (flash_setting() && T >= kFlashMinTokens && hd % 32 == 0 && hd <= 128) {
      defs.push_back("FLASH");
      st.dispatch(pipeline(g_, "attention", defs), p, sizeof(p), b, u(nh), u((T + 15) / 16), 1);
      return;
    }
    st.dispatch(pipeline(g_, "attention", defs), p, sizeof(p), b, u(nh), u(T), 1);
    return;
  }
  // tile partials sized for the whole cache, so that the buffer is the same every step
  const int64_t max_split = (std::min<int64_t>(max_ctx, op.a.window > 0 ? op.a.window : max_ctx) + 63) / 64;
  WGPUBuffer part = st.alloc(uint64_t(T * nh * std::max(max_split, nsplit)) * (hd + 2) * 4)->bufs[0];
  std::vector<std::string> sdefs = defs;
  sdefs.push_back("SPLIT");
  Bind b1[] = {{1, qb, 0, W}, {2, kb, 0, W}, {3, vb, 0, W}, {5, part, 0, W}};
  st.dispatch(pipeline(g_, "attention", sdefs), p, sizeof(p), b1, u(nh), u(T), u(nsplit));
  Bind b2[] = {{4, ob, 0, W}, {5, part, 0, W}};
  st.dispatch(pipeline(g_, "attention", {"COMBINE"}), p, sizeof(p), b2, u(nh), u(T), 1);
}

// shaders/wgsl/encoder_attention.wgsl: one workgroup per (head, query row), the mask applied.
void WgpuBackend::encoder_attention(State& st, const Op& op, const Tensor* in, Tensor* out) {
  const uint64_t W = WGPU_WHOLE_SIZE;
  const int nh = op.a.n_heads, nkv = op.a.n_kv_heads, hd = op.a.head_dim;
  const int64_t B = in[3].shape.d[0], S = in[3].shape.d[1];
  const int64_t T = in[0].shape.numel() / (B * nh * hd);
  uint32_t p[12] = {u(T), u(S), u(nh), u(nkv), u(hd), in[3].dtype == DType::F32 ? 1u : 0u, u(op.a.window), 0,
                    f2u(op.a.scale), 0, 0, 0};
  Bind b[] = {{1, act(st, in[0]), 0, W}, {2, act(st, in[1]), 0, W}, {3, act(st, in[2]), 0, W},
              {4, act(st, in[3]), 0, W}, {5, dev(out[0])->bufs[0], 0, W}};
  // head_dim 32 or 64 (MiniLM, BERT-base): encoder_attention_tiled.wgsl, 64 queries of one
  // sequence a workgroup sharing tiles of keys and values, four invocations a query; else one
  // workgroup per query row.
  const int64_t qblocks = (T + 63) / 64;
  if ((hd == 32 || hd == 64) && qblocks <= 65535 && B <= 65535) {
    Pipeline& pl = pipeline(g_, "encoder_attention_tiled", {hd == 64 ? "HD64" : "HD32"});
    st.dispatch(pl, p, sizeof(p), b, 5, u(nh), u(qblocks), u(B));
    return;
  }
  Pipeline& pl = pipeline(g_, "encoder_attention", {});
  st.dispatch(pl, p, sizeof(p), b, 5, u(nh), u(B * T), 1);
}

// shaders/wgsl/encoder_attention.wgsl's ND layout: attention_nd (op.h), one workgroup an output row
// (b, h, t); batch and head strides 0 where q, k, v or the mask broadcast.
void WgpuBackend::attention_nd(State& st, const Op& op, const Tensor* in, int n_in, Tensor* out) {
  const uint64_t W = WGPU_WHOLE_SIZE;
  const Shape &qs = in[0].shape, &ks = in[1].shape, &vs = in[2].shape, &os = out[0].shape;
  const int64_t H = os.d[1], T = os.d[2], Dv = os.d[3], D = qs.d[3], S = ks.d[2];
  auto bstride = [](const Shape& s, int64_t block) { return s.d[0] == 1 ? 0 : s.d[1] * block; };
  auto hstride = [](const Shape& s, int64_t block) { return s.d[1] == 1 ? 0 : block; };
  int64_t mst[4] = {0, 0, 0, 0};  // the mask's strides over [B, H, T, S] (0 along a broadcast dim)
  const bool has_mask = n_in > 3;
  if (has_mask) {
    const Shape& ms = in[3].shape;
    int64_t e = 1;
    for (int i = ms.ndim - 1; i >= 0; --i) {
      mst[i + 4 - ms.ndim] = ms.d[i] == 1 ? 0 : e;
      e *= ms.d[i];
    }
  }
  const int64_t rows = os.numel() / std::max<int64_t>(1, Dv);
  const uint32_t nx = u(std::min<int64_t>(rows, 65535)), ny = u((rows + 65534) / 65535);
  uint32_t p[20] = {u(T), u(S), u(H), u(D), u(Dv), has_mask ? 1u : 0u, nx, u(rows),
                    u(bstride(qs, T * D)), u(hstride(qs, T * D)), u(bstride(ks, S * D)), u(hstride(ks, S * D)),
                    u(bstride(vs, S * Dv)), u(hstride(vs, S * Dv)), u(mst[0]), u(mst[1]),
                    u(mst[2]), u(mst[3]), f2u(op.a.scale), 0};
  WGPUBuffer qb = act(st, in[0]);
  Bind b[] = {{1, qb, 0, W}, {2, act(st, in[1]), 0, W}, {3, act(st, in[2]), 0, W},
              {4, has_mask ? act(st, in[3]) : qb, 0, W}, {5, dev(out[0])->bufs[0], 0, W}};
  st.dispatch(pipeline(g_, "encoder_attention", {"ND"}), p, sizeof(p), b, 5, nx, ny, 1);
}

// shaders/wgsl/kv_write.wgsl: rows into the cache at pos0 (an f16 cache as packed pairs).
void WgpuBackend::kv_write(State& st, const Op& op, const Tensor* in, Tensor* out) {
  const uint64_t W = WGPU_WHOLE_SIZE;
  const int nkv = op.a.n_kv_heads, hd = op.a.head_dim;
  const int64_t T = in[0].shape.numel() / (static_cast<int64_t>(nkv) * hd);
  const Tensor& c = out[0];
  if (c.shape.ndim != 3 || c.shape.d[0] != nkv || c.shape.d[2] != hd || op.a.pos0 < 0 ||
      op.a.pos0 + T > c.shape.d[1])
    throw_invalid_config("position", "positions exceed the KV cache");
  const bool f16 = c.dtype == DType::F16;
  if (f16 && hd % 2) throw_unsupported_op("kv_write (odd head_dim, f16)", "wgpu+rs", "F16");
  Pipeline& pl = pipeline(g_, "kv_write", f16 ? std::vector<std::string>{"F16"} : std::vector<std::string>{});
  uint32_t p[8] = {u(T), u(nkv), u(hd), u(c.shape.d[1]), u(op.a.pos0), u(in[0].offset / 4), 0, 0};
  Bind b[] = {{1, act(st, in[0]), 0, W}, {2, dev(c)->bufs[0], 0, W}};
  st.dispatch(pl, p, sizeof(p), b, u(((f16 ? hd / 2 : hd) + 63) / 64), u(T * nkv), 1);
}

std::pair<WGPUBuffer, WGPUBuffer> WgpuBackend::rope_tables(const RopeTable& rt) {
  Tensor ct, stt;
  ct.dtype = stt.dtype = DType::F32;
  ct.shape = stt.shape = Shape{rt.max_pos, rt.rot_dims / 2};
  ct.data = const_cast<float*>(rt.cos);
  stt.data = const_cast<float*>(rt.sin);
  return {weight(ct)->bufs[0], weight(stt)->bufs[0]};
}

// shaders/wgsl/rope.wgsl: one workgroup row per (token, head), in place or into out.
void WgpuBackend::rope(State& st, const Op& op, const Tensor* in, Tensor* out) {
  const uint64_t W = WGPU_WHOLE_SIZE;
  const RopeTable& rt = *op.a.rope;
  const int hd = op.a.head_dim, nh = op.a.n_heads, half = rt.rot_dims / 2;
  const int64_t T = in[0].shape.numel() / (static_cast<int64_t>(nh) * hd);
  if (op.a.pos0 < 0 || op.a.pos0 + T > rt.max_pos)
    throw_invalid_config("position", "positions exceed the RoPE table");
  const auto [cb, sb] = rope_tables(rt);
  WGPUBuffer xb = act(st, in[0]), yb = dev(out[0])->bufs[0];
  const bool inplace = xb == yb;  // a row view rotated in place (x and y: the same view)
  if (inplace && in[0].offset != out[0].offset)
    throw_unsupported_op("rope (overlapping views of one buffer)", "wgpu+rs", "-");
  Pipeline& pl = pipeline(g_, "rope", inplace ? std::vector<std::string>{"INPLACE"} : std::vector<std::string>{});
  uint32_t p[8] = {u(T), u(nh), u(hd), u(half), u(op.a.pos0), rt.neox ? 1u : 0u, u(in[0].offset / 4),
                   u(out[0].offset / 4)};
  const uint32_t gx = u((hd + 63) / 64), gy = u(T * nh);
  if (inplace) {
    Bind b[] = {{1, cb, 0, W}, {2, sb, 0, W}, {3, yb, 0, W}};
    st.dispatch(pl, p, sizeof(p), b, gx, gy, 1);
  } else {
    Bind b[] = {{1, cb, 0, W}, {2, sb, 0, W}, {3, yb, 0, W}, {4, xb, 0, W}};
    st.dispatch(pl, p, sizeof(p), b, gx, gy, 1);
  }
}

// rope.wgsl KV: q and k rotated, k and v written to the caches in one dispatch. Positions and shapes:
// validate_op (check_fused_rope_kv).
void WgpuBackend::fused_rope_kv(State& st, const Op& op, const Tensor* in, Tensor* out) {
  const uint64_t W = WGPU_WHOLE_SIZE;
  const RopeTable& rt = *op.a.rope;
  const int nh = op.a.n_heads, nkv = op.a.n_kv_heads, hd = op.a.head_dim, half = rt.rot_dims / 2;
  const int64_t T = in[0].shape.numel() / (static_cast<int64_t>(nh) * hd);
  const Tensor &kc = out[2], &vc = out[3];
  if (kc.dtype != vc.dtype) throw_unsupported_op("fused_rope_kv (k and v caches of two dtypes)", "wgpu+rs", "-");
  const auto [cb, sb] = rope_tables(rt);
  WGPUBuffer qb = act(st, in[0]), kb = act(st, in[1]), vb = act(st, in[2]);
  WGPUBuffer qo = dev(out[0])->bufs[0], ko = dev(out[1])->bufs[0];
  const bool qin = qb == qo, kin = kb == ko;  // rotated in place (the family's use)
  if ((qin && in[0].offset != out[0].offset) || (kin && in[1].offset != out[1].offset))
    throw_unsupported_op("fused_rope_kv (overlapping views of one buffer)", "wgpu+rs", "-");
  std::vector<std::string> defs = {"KV"};
  if (kc.dtype == DType::F16) defs.push_back("F16");
  if (qin) defs.push_back("QIN");
  if (kin) defs.push_back("KIN");
  Pipeline& pl = pipeline(g_, "rope", defs);
  uint32_t p[16] = {u(T), u(nh), u(nkv), u(hd), u(half), u(op.a.pos0), rt.neox ? 1u : 0u, u(kc.shape.d[1]),
                    u(in[0].offset / 4), u(in[1].offset / 4), u(in[2].offset / 4), u(out[0].offset / 4),
                    u(out[1].offset / 4), 0, 0, 0};
  const int64_t rows = T * (nh + 2 * nkv);
  const uint32_t gx = u(std::min<int64_t>(rows, 65535)), gy = u((rows + 65534) / 65535);
  const WGPUBuffer kcb = dev(kc)->bufs[0], vcb = dev(vc)->bufs[0];
  if (qin && kin) {
    Bind b[] = {{1, cb, 0, W}, {2, sb, 0, W}, {3, qb, 0, W}, {4, kb, 0, W}, {5, vb, 0, W}, {6, kcb, 0, W},
                {7, vcb, 0, W}};
    st.dispatch(pl, p, sizeof(p), b, gx, gy, 1);
  } else if (qin) {
    Bind b[] = {{1, cb, 0, W}, {2, sb, 0, W}, {3, qb, 0, W}, {4, kb, 0, W}, {5, vb, 0, W}, {6, kcb, 0, W},
                {7, vcb, 0, W}, {9, ko, 0, W}};
    st.dispatch(pl, p, sizeof(p), b, gx, gy, 1);
  } else if (kin) {
    Bind b[] = {{1, cb, 0, W}, {2, sb, 0, W}, {3, qb, 0, W}, {4, kb, 0, W}, {5, vb, 0, W}, {6, kcb, 0, W},
                {7, vcb, 0, W}, {8, qo, 0, W}};
    st.dispatch(pl, p, sizeof(p), b, gx, gy, 1);
  } else {
    Bind b[] = {{1, cb, 0, W}, {2, sb, 0, W}, {3, qb, 0, W}, {4, kb, 0, W}, {5, vb, 0, W}, {6, kcb, 0, W},
                {7, vcb, 0, W}, {8, qo, 0, W}, {9, ko, 0, W}};
    st.dispatch(pl, p, sizeof(p), b, gx, gy, 1);
  }
}

// fused_rope_attention: one token (a decode step's row of one conversation) where DEC takes it:
// attention.wgsl DEC + ROPE, q and the new key rotated in the workgroup, the new key and value
// (rounded as the cache stores them) used for the token's own position and written to the caches
// by the first query head of each group; else fused_rope_kv into frames, then attention.
void WgpuBackend::fused_rope_attention(State& st, const Op& op, const Tensor* in, int n_in, Tensor* out) {
  const uint64_t W = WGPU_WHOLE_SIZE;
  const RopeTable& rt = *op.a.rope;
  const int nh = op.a.n_heads, nkv = op.a.n_kv_heads, hd = op.a.head_dim;
  const int64_t T = in[0].shape.numel() / (static_cast<int64_t>(nh) * hd);
  const Tensor &kc = out[1], &vc = out[2];
  const bool norms = n_in == 5;  // q and k heads through RMSNorm first
  if (kc.dtype != vc.dtype)
    throw_unsupported_op("fused_rope_attention (k and v caches of two dtypes)", "wgpu+rs", "-");
  if (T != 1 || !dec_takes(op, T)) {
    Tensor rope_out[4] = {in[0], in[1], kc, vc};
    Tensor rope_in[3] = {in[0], in[1], in[2]};
    for (int i = 0; i < 2; ++i) {
      rope_out[i].device = Device::Wgpu;
      rope_out[i].offset = 0;
      rope_out[i].data = st.alloc(in[i].nbytes());
      if (!norms) continue;
      Op rn = op;  // norm.wgsl over each head, into the copy; the rotation then in place
      rn.kind = OpKind::RmsNorm;
      Tensor x = in[i], y = rope_out[i];
      x.shape = y.shape = Shape{in[i].shape.numel() / hd, hd};
      const Tensor norm_in[2] = {x, in[3 + i]};
      norm(st, rn, norm_in, &y);
      rope_in[i] = rope_out[i];
    }
    fused_rope_kv(st, op, rope_in, rope_out);
    const Tensor att_in[3] = {rope_out[0], kc, vc};
    return attention(st, op, att_in, out);
  }
  const bool f16 = kc.dtype == DType::F16;
  const auto [cb, sb] = rope_tables(rt);
  uint32_t p[20] = {u(T), u(nh), u(nkv), u(hd), u(kc.shape.d[1]), u(op.a.pos0), u(op.a.window),
                    u(in[0].offset / 4), f2u(op.a.scale), f2u(op.a.softcap), u(out[0].offset / 4), 0u,
                    u(in[1].offset / 4), u(in[2].offset / 4), u(rt.rot_dims / 2), rt.neox ? 1u : 0u,
                    f2u(op.a.eps), op.a.norm_plus_one ? 1u : 0u, 0u, 0u};
  std::vector<std::string> defs = {"DEC", "ROPE"};
  if (!f16) defs.push_back("DEC_F32");
  if (norms) defs.push_back("QKNORM");
  Pipeline& pl = pipeline(g_, "attention", defs);
  const WGPUBuffer q = act(st, in[0]), k = act(st, in[1]), v = act(st, in[2]);
  const WGPUBuffer kcb = dev(kc)->bufs[0], vcb = dev(vc)->bufs[0], ob = dev(out[0])->bufs[0];
  if (norms) {
    Bind b[] = {{1, q, 0, W},  {2, kcb, 0, W}, {3, vcb, 0, W}, {4, ob, 0, W},
                {5, k, 0, W},  {6, v, 0, W},   {7, cb, 0, W},  {8, sb, 0, W},
                {9, weight(in[3])->bufs[0], 0, W}, {10, weight(in[4])->bufs[0], 0, W}};
    st.dispatch(pl, p, sizeof(p), b, u(nh), 1, 1);
  } else {
    Bind b[] = {{1, q, 0, W}, {2, kcb, 0, W}, {3, vcb, 0, W}, {4, ob, 0, W},
                {5, k, 0, W}, {6, v, 0, W},   {7, cb, 0, W},  {8, sb, 0, W}};
    st.dispatch(pl, p, 16 * sizeof(uint32_t), b, u(nh), 1, 1);
  }
}

}  // namespace wgpu
}  // namespace cyb

#endif  // CYB_HAVE_WGPU
