#include "families/emit.h"

namespace cyb {

void Emitter::matmul(const Tensor& x, const Tensor& W, const Tensor& bias, Tensor* y, const char* label) const {
  if (bias.data) run(make_op(OpKind::Matmul, label), {x, W, bias}, {y});
  else run(make_op(OpKind::Matmul, label), {x, W}, {y});
}

void Emitter::matmul_add(const Tensor& x, const Tensor& W, const Tensor& bias, const Tensor& residual, Tensor* y,
                         const char* label) const {
  const Op op = make_op(OpKind::FusedMatmulAdd, label);
  const Tensor in[4] = {x, W, residual, bias};
  const int n = bias.data ? 4 : 3;
  if (be_.supports(op, in, n)) return run(op, in, n, y, 1);
  Tensor t = frame(y->shape);
  matmul(x, W, bias, &t, label);
  run(make_op(OpKind::Add, label), {t, residual}, {y});
}

void Emitter::matmul_act(const Tensor& x, const Tensor& W, const Tensor& bias, OpKind act, Tensor* y,
                         const char* label) const {
  Op op = make_op(OpKind::FusedMatmulGelu, label);
  op.a.gelu_erf = act == OpKind::Gelu;
  const Tensor in[3] = {x, W, bias};
  const int n = bias.data ? 3 : 2;
  if ((act == OpKind::Gelu || act == OpKind::GeluTanh) && be_.supports(op, in, n)) return run(op, in, n, y, 1);
  matmul(x, W, bias, y, label);
  run(make_op(act, label), {*y}, {y});
}

void Emitter::layer_norm(const Tensor& x, const Tensor& g, const Tensor& b, float eps, Tensor* y,
                         const char* label) const {
  Op op = make_op(OpKind::LayerNorm, label);
  op.a.eps = eps;
  if (b.data) run(op, {x, g, b}, {y});
  else run(op, {x, g}, {y});
}

namespace {

Op rms_op(OpKind k, float eps, bool plus_one, const char* label) {
  Op op = make_op(k, label);
  op.a.eps = eps;
  op.a.norm_plus_one = plus_one;
  return op;
}

}  // namespace

void Emitter::rms_norm(const Tensor& x, const Tensor& w, float eps, bool plus_one, Tensor* y,
                       const char* label) const {
  run(rms_op(OpKind::RmsNorm, eps, plus_one, label), {x, w}, {y});
}

void Emitter::skip_norm(const Tensor& o, const Tensor& x, const Tensor& w, float eps, bool plus_one, Tensor* h,
                        Tensor* x2, const char* label) const {
  run(rms_op(OpKind::FusedSkipNorm, eps, plus_one, label), {o, x, w}, {h, x2});
}

void Emitter::rope(Tensor& x, const RopeTable* table, int64_t pos0, int n_heads, int head_dim,
                   const char* label) const {
  Op op = make_op(OpKind::Rope, label);
  op.a.pos0 = pos0;
  op.a.head_dim = head_dim;
  op.a.rope = table;
  op.a.n_heads = n_heads;
  run(op, {x}, {&x});
}

void Emitter::kv_write(const Tensor& k, Tensor* cache, int64_t pos0, int n_kv_heads, int head_dim,
                       const char* label) const {
  Op op = make_op(OpKind::KvWrite, label);
  op.a.pos0 = pos0;
  op.a.n_kv_heads = n_kv_heads;
  op.a.head_dim = head_dim;
  run(op, {k}, {cache});
}

Op attention_op(OpKind k, const AttnHeads& a, const char* label) {
  Op op = make_op(k, label);
  op.a.n_heads = a.n_heads;
  op.a.n_kv_heads = a.n_kv_heads;
  op.a.head_dim = a.head_dim;
  op.a.scale = a.scale;
  op.a.softcap = a.softcap;
  op.a.window = a.window;
  return op;
}

void Emitter::attention(const Tensor& q, const Tensor& kc, const Tensor& vc, int64_t pos0, const AttnHeads& a,
                        Tensor* y, const char* label) const {
  Op op = attention_op(OpKind::Attention, a, label);
  op.a.pos0 = pos0;
  run(op, {q, kc, vc}, {y});
}

void Emitter::encoder_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                const AttnHeads& a, Tensor* y, const char* label) const {
  run(attention_op(OpKind::EncoderAttention, a, label), {q, k, v, mask}, {y});
}

}  // namespace cyb
