// The op emitter of the curated families (decoder, encoders, whisper): the matmul with its bias,
// residual-add or activation epilogue, the norms, RoPE, the KV write and attention, each one
// helper that every family calls, so a layer issues the same ops with the same attributes and
// labels whichever family builds it. Fused forms (matmul + add, matmul + GELU) are taken where the
// primary backend supports them; otherwise their parts run one after another.
#pragma once
#include <initializer_list>

#include "core/exec_context.h"
#include "dispatch/backend.h"
#include "dispatch/dispatcher.h"
#include "dispatch/op.h"

namespace cyb {

// An op of kind k with default attributes.
inline Op make_op(OpKind k, const char* label) { return Op{k, OpAttrs{}, label}; }

// Host arrays (ids, positions, masks, the caller's buffers) as op inputs and outputs: views, the
// memory stays the caller's.
inline Tensor host_tensor(const void* p, DType dtype, Shape s) {
  Tensor t;
  t.dtype = dtype;
  t.shape = s;
  t.data = const_cast<void*>(p);
  return t;
}
inline Tensor host_f32(const float* p, Shape s) { return host_tensor(p, DType::F32, s); }
inline Tensor host_i32(const int32_t* p, Shape s) { return host_tensor(p, DType::I32, s); }

// The head layout of an attention op.
struct AttnHeads {
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 1.f;
  float softcap = 0.f;  // Attention only (0: none)
  int64_t window = 0;   // sliding window (0: none)
};
// An op of kind k (attention, encoder_attention, fused_rope_attention) with the heads' attrs set.
Op attention_op(OpKind k, const AttnHeads& a, const char* label);

// One forward's emitter: the model's dispatcher, the forward's context and its primary backend
// (where the activations live: frames come from it).
class Emitter {
 public:
  Emitter(Dispatcher& d, ExecContext& ctx) : d_(d), ctx_(ctx), be_(*d.chain().front()) {}
  Backend& backend() const { return be_; }
  ExecContext& ctx() const { return ctx_; }
  Tensor frame(const Shape& s) const { return be_.alloc_frame(ctx_, s); }
  void run(const Op& op, std::initializer_list<Tensor> in, std::initializer_list<Tensor*> out) const {
    d_.run(op, in, out, ctx_);
  }
  void run(const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out) const {
    d_.run(op, in, n_in, out, n_out, ctx_);
  }

  // y = x W^T (+ bias where bias.data).
  void matmul(const Tensor& x, const Tensor& W, const Tensor& bias, Tensor* y, const char* label) const;
  // y = x W^T (+ bias) + residual: one fused op where the backend has it (the cpu: the add runs on
  // each block of y while it is in cache), else the matmul into a frame, then the add.
  void matmul_add(const Tensor& x, const Tensor& W, const Tensor& bias, const Tensor& residual, Tensor* y,
                  const char* label) const;
  // y = act(x W^T (+ bias)): fused for the GELUs where the backend has it, else the matmul, then
  // the activation in place.
  void matmul_act(const Tensor& x, const Tensor& W, const Tensor& bias, OpKind act, Tensor* y,
                  const char* label) const;
  // y = LayerNorm(x) * g (+ b where b.data).
  void layer_norm(const Tensor& x, const Tensor& g, const Tensor& b, float eps, Tensor* y, const char* label) const;
  // y = RMSNorm(x) * w (Gemma: * (1 + w)); norm_plus_one as the family's spec says.
  void rms_norm(const Tensor& x, const Tensor& w, float eps, bool plus_one, Tensor* y, const char* label) const;
  // x2 = x + o, h = RMSNorm(x2) * w in one op (FusedSkipNorm).
  void skip_norm(const Tensor& o, const Tensor& x, const Tensor& w, float eps, bool plus_one, Tensor* h, Tensor* x2,
                 const char* label) const;
  // RoPE in place over x's heads from position pos0.
  void rope(Tensor& x, const RopeTable* table, int64_t pos0, int n_heads, int head_dim, const char* label) const;
  // k (rows from position pos0) into a KV cache of n_kv_heads heads.
  void kv_write(const Tensor& k, Tensor* cache, int64_t pos0, int n_kv_heads, int head_dim, const char* label) const;
  // y = attention of the queries q (from position pos0) over the caches kc / vc (causal, grouped heads).
  void attention(const Tensor& q, const Tensor& kc, const Tensor& vc, int64_t pos0, const AttnHeads& a, Tensor* y,
                 const char* label) const;
  // y = attention of q over k / v of the same sequences ([B, T] mask of the real keys), no causal mask.
  void encoder_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const AttnHeads& a,
                         Tensor* y, const char* label) const;

 private:
  Dispatcher& d_;
  ExecContext& ctx_;
  Backend& be_;
};

}  // namespace cyb
