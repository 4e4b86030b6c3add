#if defined(CYB_HAVE_WGPU)

#include "backends/wgpu/wgpu_backend_impl.h"

#include <algorithm>

#include "backends/wgpu/wgpu_settings.h"
#include "core/errors.h"

namespace cyb {
namespace wgpu {
namespace {

// Encodings with a slot decoder for the one-token matrix-vector kernel (mvdot.wgsl deq_ks_*).
bool ks_encoding(DType t) { return t == DType::Q4_K || t == DType::Q6_K; }
// The binding of weight i (0, 1, 2) of a matvec dispatch: the vec4<u32> view (WV, WV2, WV3)
// where the KS decoder reads 16-byte words (Q4_K), else W, W2, W3.
uint32_t mv_weight_binding(int i, DType t, bool ks) {
  if (ks && t == DType::Q4_K) return 12u + static_cast<uint32_t>(i);
  return i == 0 ? 1u : i == 1 ? 5u : 6u;
}

// Encodings with a register decoder for the matrix-vector kernel (shaders/wgsl/mvdot.wgsl).
bool mv_encoding(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q8_0: case DType::Q4_0:
    case DType::Q4_1: case DType::Q5_0: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K:
    case DType::Q6_K:
      return true;
    default:
      return false;
  }
}
// Block-quantized encodings the shaders decode (the f16 GEMM's weights: gemm_f16_setting).
bool block_encoding(DType t) {
  return enc_fn(t) != nullptr && t != DType::F32 && t != DType::F16 && t != DType::BF16;
}

}  // namespace

// The matrix-vector kernel's variant for rows of K values and T (< 32) tokens: lanes per
// row, tokens per workgroup, subgroup shuffles, the slot kernel (KS, one token, Q4_K / Q6_K
// weights: ks_ok), two rows a lane group (R2, slot kernel), two chunks a step (U2, chunk kernel).
void WgpuBackend::matvec_variant(int64_t K, int64_t T, int64_t rows, bool ks_ok, std::vector<std::string>& defs,
                                 int64_t* rows_per_wg, int64_t* tokens_per_wg) const {
  const MatvecTuning& tune = matvec_tuning();
  const bool ks = (T == 1 || tune.ks_tokens) && ks_ok && tune.ks;
  const bool qkv = std::find(defs.begin(), defs.end(), "QKV") != defs.end();
  // Chunk kernel: 32 lanes a row: on the H200 (docs/gpu-bench.md, tuning sweep of 2026-12-02)
  // faster than 16 or 8 lanes chosen by row length, also for rows of 18 and 48 chunks.
  // Slot kernel: 32 lanes halved while a lane would sum fewer than 3 slots (16 for the
  // qwen15-shaped 1536-value rows, 32 for llama7b's 4096), then filled (H200, 2026-12-03:
  // docs/gpu-bench.md).
  uint32_t tpr = tune.tpr ? tune.tpr : 32;
  if (ks && !tune.tpr)
    while (tpr > 8 && K / 32 / tpr < 3) tpr /= 2;
  if (tune.fill || (ks && !tune.tpr))
    while (tpr < 128 && rows * tpr < kMatvecFillLanes && 2 * tpr <= K / 32) tpr *= 2;
  *tokens_per_wg = T >= 3 ? 4 : T;
  *rows_per_wg = 128 / tpr;
  if (ks) {
    defs.push_back("KS");
    if (tune.r2 && !qkv && T == 1) {
      defs.push_back("R2");
      *rows_per_wg *= 2;
    }
  } else if (T == 1 && tune.unroll2) {
    defs.push_back("U2");
  }
  defs.push_back("TPR" + std::to_string(tpr));
  defs.push_back("NT" + std::to_string(*tokens_per_wg));
  if (g_.info.subgroups) defs.push_back("SG");  // shuffles where the subgroup size allows (matvec.wgsl)
}

// fused_qkv: one matvec dispatch over the three weights (matvec.wgsl QKV) for few tokens,
// whole 32-value chunks and register-decoded encodings, each weight in one buffer; three
// matmuls otherwise.
void WgpuBackend::qkv(State& st, const Tensor* in, int n_in, Tensor* out, const RowNorm* norm) {
  const uint64_t W = WGPU_WHOLE_SIZE;
  const Tensor& x = in[0];
  const bool bias = n_in == 7;
  const int64_t K = in[1].shape.d[1], T = x.shape.numel() / K;
  DevBuf* w[3] = {weight(in[1]), weight(in[2]), weight(in[3])};
  bool fused = T < kTiledMinTokens && K % 32 == 0 && x.offset % 16 == 0;
  for (int i = 0; i < 3; ++i) fused = fused && mv_encoding(in[1 + i].dtype) && w[i]->bufs.size() == 1;
  if (!fused) {
    const Tensor xn = norm ? normed_rows(st, x, *norm) : x;
    for (int i = 0; i < 3; ++i) matmul(st, xn, in[1 + i], bias ? &in[4 + i] : nullptr, nullptr, out[i]);
    return;
  }
  std::vector<std::string> defs = {"QKV"};
  if (bias) defs.push_back("BIAS");
  if (norm) defs.push_back("NORM");
  int64_t rows_per_wg = 0, tokens_per_wg = 0;
  const int64_t nq = in[1].shape.d[0], nk = in[2].shape.d[0], nv = in[3].shape.d[0];
  bool ks_ok = true;
  for (int i = 0; i < 3; ++i) ks_ok = ks_ok && ks_encoding(in[1 + i].dtype);
  matvec_variant(K, T, nq + nk + nv, ks_ok, defs, &rows_per_wg, &tokens_per_wg);
  const bool ks = std::find(defs.begin(), defs.end(), "KS") != defs.end();
  uint32_t wb[3];
  for (int i = 0; i < 3; ++i) wb[i] = mv_weight_binding(i, in[1 + i].dtype, ks);
  Pipeline& pl = pipeline(g_, "matvec", defs, in[1].dtype, in[2].dtype, in[3].dtype);
  const uint32_t wgs = u((nq + nk + nv + rows_per_wg - 1) / rows_per_wg);
  const uint32_t nx = std::min<uint32_t>(wgs, 65535), ny = (wgs + nx - 1) / nx;
  // matvec.wgsl's P: 20 words (r_off at 16, unused here; NORM's eps and plus_one at 17 and 18)
  uint32_t p[20] = {u(K), u(T), u(dev_row_bytes(in[1].dtype, K)), u(x.offset / 4), u(out[0].offset / 4), 0, 0,
                    u(nq + nk + nv), nx, bias ? 1u : 0u, u(dev_row_bytes(in[2].dtype, K)), u(nq),
                    u(nk), u(dev_row_bytes(in[3].dtype, K)), u(out[1].offset / 4), u(out[2].offset / 4),
                    0, norm ? f2u(norm->op->a.eps) : 0u, norm && norm->op->a.norm_plus_one ? 1u : 0u, 0};
  const uint32_t nz = u((T + tokens_per_wg - 1) / tokens_per_wg);
  WGPUBuffer xb = act(st, x);
  WGPUBuffer y[3] = {dev(out[0])->bufs[0], dev(out[1])->bufs[0], dev(out[2])->bufs[0]};
  Bind b[11] = {{wb[0], w[0]->bufs[0], 0, W}, {2, xb, 0, W}, {3, y[0], 0, W}, {wb[1], w[1]->bufs[0], 0, W},
                {wb[2], w[2]->bufs[0], 0, W}, {7, y[1], 0, W}, {8, y[2], 0, W}};
  size_t n = 7;
  if (bias) {
    b[n++] = {4, weight(in[4])->bufs[0], 0, W};
    b[n++] = {9, weight(in[5])->bufs[0], 0, W};
    b[n++] = {10, weight(in[6])->bufs[0], 0, W};
  }
  if (norm) b[n++] = {15, weight(*norm->w)->bufs[0], 0, W};
  st.dispatch(pl, p, sizeof(p), b, n, nx, ny, nz);
}

namespace {

// The device runs matmul_sm.wgsl: subgroup matrices with 16 x 16 x 16 f16 x f16 -> f32, subgroups
// of exactly 32 lanes (the kernel's 4 subgroups are its 128 invocations in fours of 32), f16.
bool sm_gemm_ok(const Gpu& g) {
  if (!g.subgroup_matrix || !g.info.shader_f16 || g.info.subgroup_min != 32 || g.info.subgroup_max != 32 ||
      sm_setting() == SmMode::Off)
    return false;
  for (const DawnSubgroupMatrixConfig& c : g.sm_configs)
    if (c.componentType == kDawnSubgroupMatrixF16 && c.resultComponentType == kDawnSubgroupMatrixF32 && c.M == 16 &&
        c.N == 16 && c.K == 16)
      return true;
  return false;
}

}  // namespace

void WgpuBackend::matmul(State& st, const Tensor& x, const Tensor& W, const Tensor* bias, const Tensor* W2,
                         Tensor& y, const char* epilogue, const Tensor* residual, const RowNorm* norm) {
  const int64_t K = W.shape.d[1], N = W.shape.d[0];
  const int64_t T = x.shape.numel() / K;
  DevBuf* w = weight(W);
  DevBuf* w2 = W2 ? weight(*W2) : nullptr;
  if (w2 && w2->bufs.size() != w->bufs.size()) throw_unsupported_op("fused_swiglu (split)", "wgpu+rs", "-");
  WGPUBuffer xb = act(st, x), yb = dev(y)->bufs[0];
  WGPUBuffer bb = bias ? weight(*bias)->bufs[0] : nullptr;
  WGPUBuffer rb = residual ? act(st, *residual) : nullptr;
  std::vector<std::string> defs;
  if (bias) defs.push_back("BIAS");
  if (w2) defs.push_back("SWIGLU");
  if (epilogue) defs.push_back(epilogue);  // GELU, GELU_TANH, ADD (shaders/wgsl/epilogue.wgsl)
  // Many tokens: 64-row x 64- or 128-token output tiles over staged chunks (matmul.wgsl, TILED;
  // gemm_tile_tokens); few:
  // rows split over lanes, up to 8 tokens a workgroup (matmul.wgsl).
  const bool tiled = T >= kTiledMinTokens && N <= int64_t{65535} * 64 && T <= int64_t{65535} * 64;
  // Fewer tokens, whole 32-value chunks and an encoding decoded in registers: the
  // matrix-vector kernel (matvec.wgsl), TPR lanes a row, up to 4 tokens a workgroup.
  const bool mv = !tiled && K % 32 == 0 && x.offset % 16 == 0 && mv_encoding(W.dtype) &&
                  (!W2 || mv_encoding(W2->dtype));
  if (norm && !mv) return matmul(st, normed_rows(st, x, *norm), W, bias, W2, y, epilogue, residual);
  if (norm) defs.push_back("NORM");
  int64_t rows_per_wg = 2, tokens_per_wg = 8;
  // Split K: a tiled GEMM of few tiles (one buffer a weight) over parts of K, then a dispatch
  // adding the parts, the bias and the epilogue, or SwiGLU's silu(gate) * up (matmul.wgsl
  // SPLITK, SPLITK_SUM).
  // The sum dispatch's grid has a row of workgroups per token; the parts fit one binding.
  // webgpu:dawn with subgroup matrices, fast mode: the tiled GEMM on the tensor cores (matmul_sm.wgsl:
  // the same grid, parts of K and outputs; wgpu_settings.h sm_setting).
  // Its activations are prepared first (SM_PREP: per-token scaling, hi and lo f16 planes of sm_s
  // halves a row, sm_tp rows: whole 128-token tiles; CYB_WGPU_SM=f16: the hi plane alone). Past
  // 65535 tokens K is not split (splittable below), so every grid stays within 65535.
  const int64_t sm_s = (K + 31) / 32 * 32, sm_tp = (T + 127) / 128 * 128;
  const bool sm_f16 = sm_setting() == SmMode::F16;  // one f16 plane, one product a pair
  const uint64_t sm_bytes = uint64_t((sm_f16 ? 2 : 4) * sm_tp * sm_s);
  const bool sm = tiled && !st.precise && T >= kSmMinTokens && sm_bytes <= g_.limits.maxStorageBufferBindingSize &&
                  sm_gemm_ok(g_);
  const bool h16 = tiled && !sm && gemm_f16_setting() && !st.precise && g_.info.shader_f16 &&
                   block_encoding(W.dtype) && (!W2 || block_encoding(W2->dtype));
  int64_t splits = 1, tm = 64;  // parts of K; tokens a tile
  const int64_t nw = w2 ? 2 : 1;  // weights whose parts the split writes
  const Pipeline* pl_t128 = nullptr;
  if (tiled) {
    const bool splittable = w->bufs.size() == 1 && T <= 65535;
    const int64_t fit = static_cast<int64_t>(g_.limits.maxStorageBufferBindingSize / 8) / (nw * T * N);
    const int64_t smax = std::max<int64_t>(1, std::min<int64_t>((K + 31) / 32 / kSplitKMinChunks, fit));
    // matmul_sm.wgsl's SwiGLU keeps 64-token tiles: 128 would hold 16 result matrices a subgroup
    // beside the hi and lo inputs, past the registers of a thread.
    tm = gemm_tile_tokens(N, T, smax, splittable, !h16 && !(sm && w2), &splits);
    if (tm == 128 && !sm) {  // where the device allows its workgroup memory (SwiGLU: 34304 bytes)
      std::vector<std::string> d128 = splits > 1 ? std::vector<std::string>{"SPLITK"} : defs;
      if (splits > 1 && w2) d128.push_back("SWIGLU");
      d128.push_back("TILED");
      d128.push_back("T128");
      pl_t128 = pipeline_if_fits(g_, "matmul", d128, W.dtype, w2 ? W2->dtype : DType::COUNT);
      if (!pl_t128) tm = gemm_tile_tokens(N, T, smax, splittable, false, &splits);
    }
  }
  if (tiled) {
    if (splits > 1) {  // bias, epilogue and SwiGLU's product: in the sum dispatch
      defs = {"SPLITK"};
      if (w2) defs.push_back("SWIGLU");
    }
    defs.push_back("TILED");
    if (h16) defs.push_back("H16");
    if (tm == 128) defs.push_back("T128");
    rows_per_wg = 64;
    tokens_per_wg = tm;
  } else if (mv) {
    matvec_variant(K, T, N, ks_encoding(W.dtype) && (!W2 || ks_encoding(W2->dtype)), defs, &rows_per_wg,
                   &tokens_per_wg);
  }
  if (sm) {  // matmul_sm.wgsl: TILED's defines but its own tile size switch
    defs.erase(std::remove(defs.begin(), defs.end(), std::string("TILED")), defs.end());
    defs.erase(std::remove(defs.begin(), defs.end(), std::string("T128")), defs.end());
    if (tm == 128) defs.push_back("SM_T128");
    if (sm_f16) defs.push_back("SM_F16");
  }
  const bool ks = std::find(defs.begin(), defs.end(), "KS") != defs.end();
  Pipeline& pl = pipeline(g_, sm ? "matmul_sm" : mv ? "matvec" : "matmul", defs, W.dtype,
                          w2 ? W2->dtype : DType::COUNT);
  const uint32_t r_off = residual ? u(residual->offset / 4) : 0u;
  WGPUBuffer sm_x = nullptr, sm_u = nullptr;  // SM_PREP's planes and factors
  if (sm) {
    sm_x = st.scratch(State::kSmActs, sm_bytes)->bufs[0];
    sm_u = st.scratch(State::kSmScale, uint64_t(4 * sm_tp))->bufs[0];
    uint32_t pp[16] = {u(K), u(T), 0, u(x.offset / 4), 0, 0, 0, 0, 0, 0, 0, 0, 0, u(sm_s), u(sm_tp * sm_s), 0};
    Bind bp[] = {{2, xb, 0, WGPU_WHOLE_SIZE}, {3, sm_x, 0, WGPU_WHOLE_SIZE}, {7, sm_u, 0, WGPU_WHOLE_SIZE}};
    const uint32_t gx = u(std::min<int64_t>(sm_tp, 65535)), gy = u((sm_tp + 65534) / 65535);
    std::vector<std::string> pdefs = {"SM_PREP"};
    if (sm_f16) pdefs.push_back("SM_F16");
    st.dispatch(pipeline(g_, "matmul_sm", pdefs), pp, sizeof(pp), bp, 3, gx, gy, 1);
    xb = sm_x;  // the GEMM's binding 2
  }
  for (size_t c = 0; c < w->bufs.size(); ++c) {
    const int64_t r0 = w->row0[c];
    const int64_t nr = (c + 1 < w->bufs.size() ? w->row0[c + 1] : N) - r0;
    const uint32_t wgs = u((nr + rows_per_wg - 1) / rows_per_wg);
    const uint32_t nx = std::min<uint32_t>(wgs, 65535), ny = tiled ? u((T + tm - 1) / tm) : (wgs + nx - 1) / nx;
    // matmul.wgsl's P (16 words: r_off at 11, ksplit at 12) or matvec.wgsl's (20 words, r_off at 16)
    uint32_t p[20] = {u(K), u(T), u(dev_row_bytes(W.dtype, K)), u(x.offset / 4), u(y.offset / 4), u(N),
                      u(r0), u(nr), nx, bias ? 1u : 0u,
                      w2 ? u(dev_row_bytes(W2->dtype, K)) : 0u, mv ? 0u : r_off};
    if (mv) {
      p[16] = r_off;
      if (norm) {
        p[17] = f2u(norm->op->a.eps);
        p[18] = norm->op->a.norm_plus_one ? 1u : 0u;
      }
    } else {
      p[12] = u(splits);
    }
    if (sm) {
      p[13] = u(sm_s);
      p[14] = u(sm_tp * sm_s);
    }
    if (splits > 1) {
      WGPUBuffer parts = st.scratch(State::kSplitKParts, uint64_t(nw * splits * T * N) * 4)->bufs[0];
      Bind b1[5] = {{1, w->bufs[c], 0, WGPU_WHOLE_SIZE}, {2, xb, 0, WGPU_WHOLE_SIZE}, {3, parts, 0, WGPU_WHOLE_SIZE}};
      size_t n1 = 3;
      if (w2) b1[n1++] = {5, w2->bufs[c], 0, WGPU_WHOLE_SIZE};
      if (sm) b1[n1++] = {7, sm_u, 0, WGPU_WHOLE_SIZE};
      st.dispatch(pl, p, 16 * sizeof(uint32_t), b1, n1, nx, ny, u(splits));
      std::vector<std::string> sdefs = {"SPLITK_SUM"};
      if (bias) sdefs.push_back("BIAS");
      if (w2) sdefs.push_back("SWIGLU");
      if (epilogue) sdefs.push_back(epilogue);
      Bind b2[4];
      size_t n2 = 0;
      b2[n2++] = {2, parts, 0, WGPU_WHOLE_SIZE};
      b2[n2++] = {3, yb, 0, WGPU_WHOLE_SIZE};
      if (bias) b2[n2++] = {4, bb, 0, WGPU_WHOLE_SIZE};
      if (residual) b2[n2++] = {6, rb, 0, WGPU_WHOLE_SIZE};
      st.dispatch(pipeline(g_, "matmul", sdefs), p, 16 * sizeof(uint32_t), b2, n2, u((N + 255) / 256), u(T), 1);
      continue;
    }
    const uint32_t nz = tiled ? 1u : u((T + tokens_per_wg - 1) / tokens_per_wg);
    Bind b[8];
    size_t n = 0;
    b[n++] = {mv_weight_binding(0, W.dtype, ks), w->bufs[c], 0, WGPU_WHOLE_SIZE};
    b[n++] = {2, xb, 0, WGPU_WHOLE_SIZE};
    b[n++] = {3, yb, 0, WGPU_WHOLE_SIZE};
    if (bias) b[n++] = {4, bb, 0, WGPU_WHOLE_SIZE};
    if (w2) b[n++] = {mv_weight_binding(1, W2->dtype, ks), w2->bufs[c], 0, WGPU_WHOLE_SIZE};
    if (residual) b[n++] = {mv ? 11u : 6u, rb, 0, WGPU_WHOLE_SIZE};
    if (sm) b[n++] = {7, sm_u, 0, WGPU_WHOLE_SIZE};
    if (norm) b[n++] = {15, weight(*norm->w)->bufs[0], 0, WGPU_WHOLE_SIZE};
    st.dispatch(pl, p, mv ? sizeof(p) : 16 * sizeof(uint32_t), b, n, nx, ny, nz);
  }
}

// rms_norm(x) into the context's scratch (the fused_norm_* ops off the matrix-vector path: a dispatch
// of its own before the product).
Tensor WgpuBackend::normed_rows(State& st, const Tensor& x, const RowNorm& rn) {
  Op norm_op = *rn.op;
  norm_op.kind = OpKind::RmsNorm;
  Tensor xn;
  xn.dtype = DType::F32;
  xn.shape = x.shape;
  xn.device = Device::Wgpu;
  xn.data = st.scratch(State::kNormedRows, xn.nbytes());
  const Tensor in[2] = {x, *rn.w};
  norm(st, norm_op, in, &xn);  // execute's RmsNorm case (supports() held for x and the weight)
  return xn;
}

// shaders/wgsl/conv1d.wgsl: the weights as [O, C k] rows; one workgroup row per output row (b, t).
void WgpuBackend::conv1d(State& st, const Op& op, const Tensor* in, int n_in, Tensor* out) {
  const uint64_t W = WGPU_WHOLE_SIZE;
  const Shape& xs = in[0].shape;
  const bool cf = op.a.channels_first;
  const int64_t B = xs.ndim == 3 ? xs.d[0] : 1;
  const int64_t C = cf ? xs.d[xs.ndim - 2] : xs.d[xs.ndim - 1], L = cf ? xs.d[xs.ndim - 1] : xs.d[xs.ndim - 2];
  const int64_t O = in[1].shape.d[0], k = in[1].shape.d[2];
  const int64_t L_out = (L + 2 * op.a.padding - k) / op.a.stride + 1, R = B * L_out;
  Tensor w2 = in[1];
  w2.shape = Shape{O, C * k};
  const bool bias = n_in > 2;
  std::vector<std::string> defs;
  if (bias) defs.push_back("BIAS");
  if (in[1].dtype == DType::F16) defs.push_back("F16");
  Pipeline& pl = pipeline(g_, "conv1d", defs);
  uint32_t p[12] = {u(C), u(L), u(O), u(k), u(op.a.stride), u(op.a.padding), u(L_out), cf ? 1u : 0u,
                    u(R), bias ? 1u : 0u, 0, 0};
  WGPUBuffer xb = act(st, in[0]), wb = weight(w2)->bufs[0], yb = dev(out[0])->bufs[0];
  if (bias) {
    Bind b[] = {{1, xb, 0, W}, {2, wb, 0, W}, {3, weight(in[2])->bufs[0], 0, W}, {4, yb, 0, W}};
    st.dispatch(pl, p, sizeof(p), b, u((O + 63) / 64), u(R), 1);
  } else {
    Bind b[] = {{1, xb, 0, W}, {2, wb, 0, W}, {4, yb, 0, W}};
    st.dispatch(pl, p, sizeof(p), b, u((O + 63) / 64), u(R), 1);
  }
}

}  // namespace wgpu
}  // namespace cyb

#endif  // CYB_HAVE_WGPU
