#include "families/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/config_check.h"
#include "core/errors.h"
#include "dispatch/op.h"
#include "families/decoder_plan.h"
#include "families/emit.h"
#include "model/model_base.h"

namespace cyb {

// ---------------------------------------------------------------- config ---

const toml::Value& config_arch(const toml::Value& config) {
  const toml::Value* arch = config.find("architecture");
  if (!arch || !arch->is_table()) throw_invalid_config("architecture", "missing [architecture] table");
  return *arch;
}

int64_t config_int(const toml::Value& arch, const char* key) {
  const toml::Value* v = arch.find(key);
  if (!v) throw_invalid_config(std::string("architecture.") + key, "required key is missing");
  if (!v->is_int()) throw_invalid_config(std::string("architecture.") + key, "must be an integer");
  return v->as_int();
}

int64_t config_int_or(const toml::Value& arch, const char* key, int64_t dflt) {
  const toml::Value* v = arch.find(key);
  if (!v || v->is_null()) return dflt;
  if (!v->is_int()) throw_invalid_config(std::string("architecture.") + key, "must be an integer");
  return v->as_int();
}

double config_float_or(const toml::Value& arch, const char* key, double dflt) {
  const toml::Value* v = arch.find(key);
  if (!v || v->is_null()) return dflt;
  if (!v->is_number()) throw_invalid_config(std::string("architecture.") + key, "must be a number");
  return v->as_float();
}

bool config_bool_or(const toml::Value& arch, const char* key, bool dflt) {
  const toml::Value* v = arch.find(key);
  if (!v || v->is_null()) return dflt;
  if (!v->is_bool()) throw_invalid_config(std::string("architecture.") + key, "must be a boolean");
  return v->as_bool();
}

DecoderConfig parse_decoder_config(const toml::Value& config) {
  const toml::Value& a = config_arch(config);
  DecoderConfig c;
  c.hidden = config_int(a, "hidden_size");
  c.n_heads = config_int(a, "num_attention_heads");
  c.n_kv_heads = config_int_or(a, "num_key_value_heads", c.n_heads);
  c.n_layers = config_int(a, "num_hidden_layers");
  c.intermediate = config_int(a, "intermediate_size");
  c.vocab = config_int(a, "vocab_size");
  c.max_position = config_int_or(a, "max_position_embeddings", 4096);
  check_positive_int(c.hidden, 1 << 20, "architecture.hidden_size");
  check_positive_int(c.n_heads, 1 << 12, "architecture.num_attention_heads");
  check_positive_int(c.n_kv_heads, 1 << 12, "architecture.num_key_value_heads");
  check_positive_int(c.n_layers, 1 << 12, "architecture.num_hidden_layers");
  check_positive_int(c.intermediate, 1 << 22, "architecture.intermediate_size");
  check_positive_int(c.vocab, 1 << 24, "architecture.vocab_size");
  check_positive_int(c.max_position, int64_t(1) << 24, "architecture.max_position_embeddings");
  c.head_dim = config_int_or(a, "head_dim", c.hidden / c.n_heads);
  check_positive_int(c.head_dim, 1 << 12, "architecture.head_dim");
  if (c.n_heads % c.n_kv_heads != 0)
    throw_invalid_config("architecture.num_key_value_heads",
                         "num_attention_heads must be a multiple of num_key_value_heads");
  c.rope_theta = config_float_or(a, "rope_theta", 10000.0);
  c.partial_rotary = config_float_or(a, "partial_rotary_factor", 1.0);
  if (!(c.partial_rotary > 0.0 && c.partial_rotary <= 1.0))
    throw_invalid_config("architecture.partial_rotary_factor", "must be in (0, 1]");
  if (const toml::Value* rs = a.find("rope_style")) {
    if (!rs->is_string() || (rs->as_string() != "neox" && rs->as_string() != "normal"))
      throw_invalid_config("architecture.rope_style", "must be \"neox\" or \"normal\"");
    c.rope_neox = rs->as_string() == "neox";
  }
  if (const toml::Value* sc = a.find("rope_scaling"); sc && !sc->is_null() && !sc->is_table())
    throw_invalid_config("architecture.rope_scaling", "must be a table (type = ..., factor = ...)");
  if (const toml::Value* sc = a.find("rope_scaling"); sc && sc->is_table()) {
    const toml::Value* t = sc->find("rope_type");
    if (!t) t = sc->find("type");
    if (!t || !t->is_string()) throw_invalid_config("architecture.rope_scaling.type", "missing");
    std::string type = t->as_string();
    c.rope_scaling.type = type == "none" ? "default" : type;
    c.rope_scaling.factor = config_float_or(*sc, "factor", 1.0);
    c.rope_scaling.low_freq_factor = config_float_or(*sc, "low_freq_factor", 1.0);
    c.rope_scaling.high_freq_factor = config_float_or(*sc, "high_freq_factor", 4.0);
    c.rope_scaling.original_max_position_embeddings =
        config_int_or(*sc, "original_max_position_embeddings", 0);
    c.rope_scaling.beta_fast = config_float_or(*sc, "beta_fast", 32.0);
    c.rope_scaling.beta_slow = config_float_or(*sc, "beta_slow", 1.0);
    c.rope_scaling.attention_factor = config_float_or(*sc, "attention_factor", 0.0);
    c.rope_scaling.mscale = config_float_or(*sc, "mscale", 0.0);
    c.rope_scaling.mscale_all_dim = config_float_or(*sc, "mscale_all_dim", 0.0);
    c.rope_scaling.truncate = config_bool_or(*sc, "truncate", true);
    if (!(c.rope_scaling.factor > 0.0))
      throw_invalid_config("architecture.rope_scaling.factor", "must be positive");
  }
  c.eps = config_float_or(a, "rms_norm_eps", 1e-6);
  c.tie_embeddings = config_bool_or(a, "tie_word_embeddings", false);
  c.attention_bias = config_bool_or(a, "attention_bias", false);
  c.sliding_window = config_int_or(a, "sliding_window", 0);
  c.attn_softcap = static_cast<float>(config_float_or(a, "attn_logit_softcapping", 0.0));
  c.final_softcap = static_cast<float>(config_float_or(a, "final_logit_softcapping", 0.0));
  c.layer_sliding.assign(static_cast<size_t>(c.n_layers), 0);
  if (const toml::Value* lt = a.find("layer_types"); lt && !lt->is_null() && !lt->is_array())
    throw_invalid_config("architecture.layer_types", "must be an array of strings, one per layer");
  if (const toml::Value* lt = a.find("layer_types"); lt && lt->is_array()) {
    if (static_cast<int64_t>(lt->as_array().size()) != c.n_layers)
      throw_invalid_config("architecture.layer_types", "must have one entry per layer");
    for (size_t i = 0; i < lt->as_array().size(); ++i) {
      const toml::Value& v = lt->as_array()[i];
      if (!v.is_string()) throw_invalid_config("architecture.layer_types", "entries must be strings");
      c.layer_sliding[i] = v.as_string() == "sliding_attention" ? 1 : 0;
    }
  }
  return c;
}

void validate_decoder_config(const DecoderConfig& c) {
  check_rope_domain(c.rope_theta, c.rope_scaling, "architecture.rope_theta", "architecture.rope_scaling");
  if (c.rope_local_theta != 0.0)
    check_domain(c.rope_local_theta, Domain::Positive, "architecture.rope_local_base_freq");
  check_domain(c.eps, Domain::Positive, "architecture.rms_norm_eps");
  if (c.attn_scale != 0.0)  // set by the family from query_pre_attn_scalar (gemma2/3)
    check_domain(c.attn_scale, Domain::Positive, "architecture.query_pre_attn_scalar");
  check_domain(c.attn_softcap, Domain::NonNegative, "architecture.attn_logit_softcapping");
  check_domain(c.final_softcap, Domain::NonNegative, "architecture.final_logit_softcapping");
  if (c.sliding_window < 0)
    throw_invalid_config("architecture.sliding_window", "must be >= 0 (0: none), got " + std::to_string(c.sliding_window));
}

// --------------------------------------------------------------- decoder ---

namespace {

struct LayerWeights {
  Tensor attn_norm, post_attn_norm, ffn_norm, post_ffn_norm, q_norm, k_norm;
  Tensor q, k, v, o, bq, bk, bv;
  Tensor gate, up, down;
  size_t rope = 0;  // index of the plan's rope spec (tables: Decoder::rope_)
  int64_t window = 0;
  std::string label[12];
};

enum Label { kAttnNorm, kQ, kK, kV, kQkNorm, kRope, kKv, kAttn, kO, kFfnNorm, kFfn, kDown };
const char* kLabelNames[12] = {"attn_norm", "q_proj", "k_proj",    "v_proj",  "qk_norm", "rope",
                               "kv_write",  "attention", "o_proj", "ffn_norm", "mlp", "down_proj"};

class DecoderConversation : public Conversation {
 public:
  DecoderConversation(ThreadPool* pool, bool precise, int64_t max_ctx)
      : Conversation(pool, precise, max_ctx) {}
  ~DecoderConversation() override {
    for (Tensor& t : caches) backend->release(t);
  }
  int64_t kv_cache_bytes() const override {
    int64_t n = 0;
    for (const Tensor& t : caches) n += static_cast<int64_t>(t.nbytes());
    return n;
  }
  Backend* backend = nullptr;
  std::vector<Tensor> caches;  // k0, v0, k1, v1, ...
};

class Decoder : public Model {
 public:
  explicit Decoder(DecoderPlan plan) : plan_(std::move(plan)), spec_(plan_.spec) {}

  void bind(std::shared_ptr<ModelFile> file, const LoadOptions& opts) {
    file_ = std::move(file);
    opts_ = opts;
    init_model_runtime(opts, opts.threads, &pool_, &dispatcher_);
    binder_.reset(file_.get());
    family_ = plan_.family;
    std::vector<RopeCache::Spec> ropes;
    for (const RopePlan& r : plan_.ropes) ropes.push_back({r.rot_dims, r.theta, r.scaling, r.neox});
    rope_.init(std::move(ropes), plan_.max_position);
    bind_weights();
    for (const LayerWeights& w : layers_) key_bias_ = key_bias_ || w.bk.data;
  }

  // The KV cache is f32 in precise mode, and in fast mode too where the keys carry a bias
  // (Qwen2's attention bias: outliers up to ~70 that f16's 11 bits round to 4e-2 steps, the
  // bulk of qwen05's fast error; docs/runtime.md, "Tolerances"); f16 otherwise.
  bool f32_cache() const { return opts_.precise || key_bias_; }
  // An op of the norm-folded layer (fused_norm_qkv, fused_norm_swiglu) with the model's RMSNorm.
  Op norm_op(OpKind k, const char* label) const {
    Op op = make_op(k, label);
    op.a.eps = static_cast<float>(plan_.eps);
    op.a.norm_plus_one = spec_.norm_plus_one;
    return op;
  }
  // fused_rope_attention of a layer's row at pos0 (attend), the model's RMSNorm for the q / k norms.
  Op rope_attention_op(const AttnHeads& heads, const LayerWeights& w, int64_t pos0) const {
    Op op = attention_op(OpKind::FusedRopeAttention, heads, w.label[kAttn].c_str());
    op.a.pos0 = pos0;
    op.a.rope = rope_.table(w.rope);
    op.a.eps = static_cast<float>(plan_.eps);
    op.a.norm_plus_one = spec_.norm_plus_one;
    return op;
  }
  // RMSNorm over each head of q and k (rows of them: views [rows*H, hd], [rows*KV, hd]), in place.
  void head_norms(const Emitter& e, const LayerWeights& w, const Tensor& q, const Tensor& k) const {
    Tensor qv = q, kv = k;
    qv.shape = Shape{q.shape.numel() / plan_.head_dim, plan_.head_dim};
    kv.shape = Shape{k.shape.numel() / plan_.head_dim, plan_.head_dim};
    const float eps = static_cast<float>(plan_.eps);
    e.rms_norm(qv, w.q_norm, eps, spec_.norm_plus_one, &qv, w.label[kQkNorm].c_str());
    e.rms_norm(kv, w.k_norm, eps, spec_.norm_plus_one, &kv, w.label[kQkNorm].c_str());
  }
  // Whether the backend takes every layer's norm-folded ops for T rows like x (forward_rows).
  bool fold_norms(Backend& be, const Tensor& x, int64_t T) const {
    if (spec_.sandwich_norm || spec_.gelu_tanh) return false;
    Tensor att = x, act = x;
    att.shape = Shape{T, plan_.n_heads * plan_.head_dim};
    act.shape = Shape{T, plan_.intermediate};
    const Op nq = norm_op(OpKind::FusedNormQkv, ""), ns = norm_op(OpKind::FusedNormSwiGlu, "");
    const Op ma = make_op(OpKind::FusedMatmulAdd, "");
    for (const LayerWeights& w : layers_) {
      const bool biases = w.bq.data && w.bk.data && w.bv.data;
      if (!biases && (w.bq.data || w.bk.data || w.bv.data)) return false;
      const Tensor qi[8] = {x, w.attn_norm, w.q, w.k, w.v, w.bq, w.bk, w.bv};
      const Tensor si[4] = {x, w.ffn_norm, w.gate, w.up};
      const Tensor oi[3] = {att, w.o, x}, di[3] = {act, w.down, x};
      if (!be.supports(nq, qi, biases ? 8 : 5) || !be.supports(ns, si, 4) || !be.supports(ma, oi, 3) ||
          !be.supports(ma, di, 3))
        return false;
    }
    return true;
  }

  const std::string& family() const override { return family_; }
  int64_t vocab_size() const override { return plan_.vocab; }
  int64_t hidden_size() const override { return plan_.hidden; }
  int64_t max_position() const override { return plan_.max_position; }

  std::unique_ptr<Conversation> make_conversation(int64_t max_context) override {
    check_max_context(max_context, plan_.max_position);
    rope_.ensure(max_context);
    auto conv = std::make_unique<DecoderConversation>(pool_.get(), opts_.precise, max_context);
    Backend* be = dispatcher_->chain().front();
    conv->backend = be;
    const DType cache_dtype = f32_cache() ? DType::F32 : DType::F16;
    for (int64_t l = 0; l < plan_.n_layers; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        Tensor t = be->alloc(Shape{plan_.n_kv_heads, max_context, plan_.head_dim}, cache_dtype);
        conv->caches.push_back(t);
      }
    }
    return conv;
  }

  // The KV cache, plus an estimate of the frame pool of the largest forward
  // chunk (its activations and one attention score row per thread).
  int64_t conversation_bytes(int64_t max_context) const override {
    const int64_t elt = f32_cache() ? 4 : 2;
    const int64_t kv = plan_.n_layers * 2 * plan_.n_kv_heads * max_context * plan_.head_dim * elt;
    const int64_t T = std::min(max_context, forward_chunk_tokens());
    const int64_t D = plan_.hidden, I = plan_.intermediate, H = plan_.n_heads, hd = plan_.head_dim;
    const int64_t act = T * (5 * D + 2 * H * hd + 2 * plan_.n_kv_heads * hd + (spec_.gelu_tanh ? 3 : 1) * I) * 4;
    const int64_t scores = static_cast<int64_t>(threads()) * max_context * 4;
    const int64_t rope = rope_.growth_bytes(max_context);  // the RoPE tables still to grow to max_context
    return kv + act + scores + rope;
  }

 protected:
  void forward_chunk(Conversation& base, const int32_t* ids, int64_t T, bool all_logits,
                     float* logits) override;
  void forward_batch_step(Conversation* const* convs, const int32_t* ids, int64_t n, float* logits) override;
  void forward_batch_step_sample(Conversation* const* convs, const int32_t* ids, int64_t n, const DeviceSampling* s,
                                 DeviceDraw* draws) override;
  void forward_chunk_sample(Conversation& base, const int32_t* ids, int64_t T,
                                  const DeviceSampling& s) override;

 public:
  bool device_sampling() const override { return dispatcher_->chain().front()->can_sample(); }

 private:
  using Segment = RowSegment<DecoderConversation>;
  // The forward of T rows split in segments (one conversation's chunk, or one row per
  // conversation of a batched step); logits of every row when all_rows, else of the last.
  // With `sample`, those rows' logits stay on the device and are sampled there, row r
  // with sample[r] into draw[r]; ids == nullptr: the one input is the backend's sampled token.
  void forward_rows(const Segment* segs, size_t nseg, const int32_t* ids, int64_t T, bool all_rows, float* logits,
                    const DeviceSampling* sample = nullptr, DeviceDraw* draw = nullptr);
  // Layer l's position-dependent work for each segment's rows of q, k, v: RoPE, the KV cache
  // write (one fused op where the backend has it), attention into att.
  void attend(const Emitter& e, const Segment* segs, size_t nseg, int64_t l, const Tensor& q, const Tensor& k,
              const Tensor& v, const Tensor& att, bool qk_norms);

 protected:

 private:
  Tensor bind(const WeightRef& r);
  void bind_weights();

  DecoderPlan plan_;
  FamilySpec spec_;
  std::string family_;
  WeightBinder binder_;  // keeps the f32 copies of 1-D weights (norms, biases)
  Tensor embed_, final_norm_, lm_head_;
  std::vector<LayerWeights> layers_;
  bool key_bias_ = false;  // some layer's keys carry a bias: f32 KV cache (f32_cache)
  // RoPE tables, one per plan rope spec, built for the largest max_context asked so far
  // (core/rope.h RopeCache).
  RopeCache rope_;
};

Tensor Decoder::bind(const WeightRef& r) {
  if (!r.present()) return Tensor{};
  Tensor t = binder_.weight(r.tensor, plan_.family + " family", &r.shape, r.required);
  if (!t.data) return t;
  if (r.nrows > 0) t = t.rows(r.row0, r.nrows);
  if (r.vector) t = binder_.to_f32(t);
  return t;
}

void Decoder::bind_weights() {
  embed_ = bind(plan_.embed);
  final_norm_ = bind(plan_.final_norm);
  lm_head_ = plan_.tied ? embed_ : bind(plan_.lm_head);
  layers_.resize(static_cast<size_t>(plan_.n_layers));
  for (int64_t l = 0; l < plan_.n_layers; ++l) {
    const LayerPlan& p = plan_.layers[static_cast<size_t>(l)];
    LayerWeights& w = layers_[static_cast<size_t>(l)];
    w.attn_norm = bind(p.attn_norm);
    w.post_attn_norm = bind(p.post_attn_norm);
    w.ffn_norm = bind(p.ffn_norm);
    w.post_ffn_norm = bind(p.post_ffn_norm);
    w.q = bind(p.q);
    w.k = bind(p.k);
    w.v = bind(p.v);
    w.bq = bind(p.bq);
    w.bk = bind(p.bk);
    w.bv = bind(p.bv);
    w.o = bind(p.o);
    w.q_norm = bind(p.q_norm);
    w.k_norm = bind(p.k_norm);
    w.gate = bind(p.gate);
    w.up = bind(p.up);
    w.down = bind(p.down);
    w.rope = static_cast<size_t>(p.rope);
    w.window = p.window;
    for (int i = 0; i < 12; ++i) w.label[i] = "layers." + std::to_string(l) + "." + kLabelNames[i];
  }
}

void Decoder::forward_chunk(Conversation& base, const int32_t* ids, int64_t T, bool all_logits,
                            float* logits) {
  auto& conv = static_cast<DecoderConversation&>(base);
  check_forward_args(conv, ids, T, plan_.vocab);
  const Segment seg{&conv, 0, T};
  forward_rows(&seg, 1, ids, T, all_logits, logits);
}

void Decoder::forward_chunk_sample(Conversation& base, const int32_t* ids, int64_t T, const DeviceSampling& s) {
  auto& conv = static_cast<DecoderConversation&>(base);
  if (ids) check_forward_args(conv, ids, T, plan_.vocab);
  const Segment seg{&conv, 0, T};
  forward_rows(&seg, 1, ids, T, false, nullptr, &s, nullptr);  // the draw stays pending
}

void Decoder::forward_batch_step(Conversation* const* convs, const int32_t* ids, int64_t n, float* logits) {
  const std::vector<Segment> segs = one_row_segments<DecoderConversation>(convs, n);
  forward_rows(segs.data(), segs.size(), ids, n, true, logits);
}

void Decoder::forward_batch_step_sample(Conversation* const* convs, const int32_t* ids, int64_t n,
                                        const DeviceSampling* s, DeviceDraw* draws) {
  std::vector<Segment> segs;
  segs.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) segs.push_back({static_cast<DecoderConversation*>(convs[i]), i, 1});
  forward_rows(segs.data(), segs.size(), ids, n, true, nullptr, s, draws);  // one row a conversation
}

void Decoder::attend(const Emitter& e, const Segment* segs, size_t nseg, int64_t l, const Tensor& q, const Tensor& k,
                     const Tensor& v, const Tensor& att, bool qk_norms) {
  const LayerWeights& w = layers_[static_cast<size_t>(l)];
  const int H = static_cast<int>(plan_.n_heads), KV = static_cast<int>(plan_.n_kv_heads);
  const int hd = static_cast<int>(plan_.head_dim);
  const RopeTable* rope = rope_.table(w.rope);
  AttnHeads heads;
  heads.n_heads = H;
  heads.n_kv_heads = KV;
  heads.head_dim = hd;
  heads.scale = static_cast<float>(plan_.attn_scale);
  heads.softcap = plan_.attn_softcap;
  heads.window = w.window;
  for (size_t si = 0; si < nseg; ++si) {  // position-dependent work, per conversation
    const Segment& sg = segs[si];
    const int64_t pos0 = sg.conv->position();
    Tensor qs = q.rows(sg.row0, sg.n), ks = k.rows(sg.row0, sg.n), vs = v.rows(sg.row0, sg.n);
    Tensor as = att.rows(sg.row0, sg.n);
    Tensor& kc = sg.conv->caches[static_cast<size_t>(2 * l)];
    Tensor& vc = sg.conv->caches[static_cast<size_t>(2 * l + 1)];
    // A decode step's row on a device backend, where each op is a dispatch: the position work and
    // the attention as one op (one dispatch on wgpu+rs). Prompts and the cpu keep the two ops below.
    // qk_norms: q's and k's heads still to go through their RMSNorm (Qwen3, Gemma 3), in the op.
    if (sg.n == 1 && !e.backend().host_memory()) {
      Op ra = rope_attention_op(heads, w, pos0);
      const Tensor ra_in[5] = {qs, ks, vs, w.q_norm, w.k_norm};
      if (e.backend().supports(ra, ra_in, qk_norms ? 5 : 3)) {
        if (qk_norms) e.run(ra, {qs, ks, vs, w.q_norm, w.k_norm}, {&as, &kc, &vc});
        else e.run(ra, {qs, ks, vs}, {&as, &kc, &vc});
        continue;
      }
    }
    if (qk_norms) head_norms(e, w, qs, ks);
    Op fused = make_op(OpKind::FusedRopeKv, w.label[kRope].c_str());
    fused.a.pos0 = pos0;
    fused.a.head_dim = hd;
    fused.a.rope = rope;
    fused.a.n_heads = H;
    fused.a.n_kv_heads = KV;
    const Tensor fused_in[3] = {qs, ks, vs};
    if (e.backend().supports(fused, fused_in, 3)) {  // the four ops below in one (one dispatch on wgpu+rs)
      e.run(fused, {qs, ks, vs}, {&qs, &ks, &kc, &vc});
    } else {
      e.rope(qs, rope, pos0, H, hd, w.label[kRope].c_str());
      e.rope(ks, rope, pos0, KV, hd, w.label[kRope].c_str());
      e.kv_write(ks, &kc, pos0, KV, hd, w.label[kKv].c_str());
      e.kv_write(vs, &vc, pos0, KV, hd, w.label[kKv].c_str());
    }
    e.attention(qs, kc, vc, pos0, heads, &as, w.label[kAttn].c_str());
  }
}

void Decoder::forward_rows(const Segment* segs, size_t nseg, const int32_t* ids, int64_t T, bool all_logits,
                           float* logits, const DeviceSampling* sample, DeviceDraw* draw) {
  // Frames come from the first conversation's context (every conversation of the
  // step is held by the caller); caches and positions are each segment's own.
  // Activations live where the primary backend computes (host memory for cpu).
  const Emitter e(*dispatcher_, segs[0].conv->ctx());
  Backend& be = e.backend();
  ExecContext& ctx = e.ctx();
  be.begin_forward(ctx);
  const int64_t D = plan_.hidden, hd = plan_.head_dim, H = plan_.n_heads, KV = plan_.n_kv_heads;
  const int64_t I = plan_.intermediate;
  const float eps = static_cast<float>(plan_.eps);
  const bool plus_one = spec_.norm_plus_one;

  // ids, or the last draw, still on the device
  const Tensor ids_t = ids ? host_i32(ids, Shape{T}) : be.sampled_token(ctx);

  // x = embed(ids) [* sqrt(d)]
  Tensor x = e.frame(Shape{T, D});
  {
    Op op = make_op(OpKind::Embedding, "embed_tokens");
    // Gemma multiplies by sqrt(hidden) rounded to the activation dtype (f32 here).
    op.a.scale = static_cast<float>(plan_.embed_scale);
    e.run(op, {ids_t, embed_}, {&x});
  }
  // A decode step (one row a conversation) on a device backend, where each op is a dispatch: every
  // RMSNorm goes into the product after it where the backend takes the fused ops: q/k/v and
  // gate/up as fused_norm_qkv / fused_norm_swiglu on the residual stream, the residual adds in
  // the o and down products (fused_matmul_add), the final norm into the lm_head (fused_norm_matmul);
  // with fused_rope_attention (attend) five ops a layer instead of eight. Prompts (their products
  // compute-bound, measured 3% slower folded on an H100) and the cpu keep the ops below.
  const bool fold = !be.host_memory() && T == static_cast<int64_t>(nseg) && fold_norms(be, x, T);
  // A decode step on a device backend: the q / k head norms go into fused_rope_attention (attend).
  const bool qk_in_attend = spec_.qk_norm && !be.host_memory() && T == static_cast<int64_t>(nseg);
  // h = input_layernorm(x) of layer 0
  Tensor h = e.frame(Shape{T, D});
  if (!fold) e.rms_norm(x, layers_[0].attn_norm, eps, plus_one, &h, layers_[0].label[kAttnNorm].c_str());

  // Per-layer activations, one set for all layers (a layer's values are dead once
  // the next layer begins, and every backend runs a forward's ops in the order
  // issued: dispatch/backend.h): a long prefill holds one layer's worth of
  // intermediates, not n_layers of them.
  Tensor q, k, v, att, o, xa, xb, act, g, u, f;
  {
    q = e.frame(Shape{T, H * hd});
    k = e.frame(Shape{T, KV * hd});
    v = e.frame(Shape{T, KV * hd});
    att = e.frame(Shape{T, H * hd});
    o = e.frame(Shape{T, D});
    xa = e.frame(Shape{T, D});
    xb = e.frame(Shape{T, D});
    act = e.frame(Shape{T, I});
    if (spec_.gelu_tanh) {
      g = e.frame(Shape{T, I});
      u = e.frame(Shape{T, I});
    }
    f = e.frame(Shape{T, D});
  }
  // the residual stream alternates between xa and xb (an op never writes its input)
  auto next_x = [&](const Tensor& cur) { return cur.data == xa.data ? xb : xa; };

  for (int64_t l = 0; l < plan_.n_layers; ++l) {
    const LayerWeights& w = layers_[static_cast<size_t>(l)];
    // q, k, v: one op where the backend takes it (one dispatch on wgpu+rs for few tokens)
    const bool biases = w.bq.data && w.bk.data && w.bv.data;
    const Op qkv = make_op(OpKind::FusedQkv, w.label[kQ].c_str());
    const Tensor qkv_in[7] = {h, w.q, w.k, w.v, w.bq, w.bk, w.bv};
    if (fold) {
      const Op nq = norm_op(OpKind::FusedNormQkv, w.label[kQ].c_str());
      if (biases) e.run(nq, {x, w.attn_norm, w.q, w.k, w.v, w.bq, w.bk, w.bv}, {&q, &k, &v});
      else e.run(nq, {x, w.attn_norm, w.q, w.k, w.v}, {&q, &k, &v});
    } else if ((biases || (!w.bq.data && !w.bk.data && !w.bv.data)) && be.supports(qkv, qkv_in, biases ? 7 : 4)) {
      if (biases) e.run(qkv, {h, w.q, w.k, w.v, w.bq, w.bk, w.bv}, {&q, &k, &v});
      else e.run(qkv, {h, w.q, w.k, w.v}, {&q, &k, &v});
    } else {
      e.matmul(h, w.q, w.bq, &q, w.label[kQ].c_str());
      e.matmul(h, w.k, w.bk, &k, w.label[kK].c_str());
      e.matmul(h, w.v, w.bv, &v, w.label[kV].c_str());
    }
    if (spec_.qk_norm && !qk_in_attend) head_norms(e, w, q, k);
    attend(e, segs, nseg, l, q, k, v, att, qk_in_attend);
    if (fold) {  // x += att Wo; x += ffn(norm(x)) Wd
      Tensor x2 = next_x(x);
      e.matmul_add(att, w.o, Tensor{}, x, &x2, w.label[kO].c_str());
      x = x2;
      e.run(norm_op(OpKind::FusedNormSwiGlu, w.label[kFfn].c_str()), {x, w.ffn_norm, w.gate, w.up}, {&act});
      Tensor x3 = next_x(x);
      e.matmul_add(act, w.down, Tensor{}, x, &x3, w.label[kDown].c_str());
      x = x3;
      continue;
    }
    e.matmul(att, w.o, Tensor{}, &o, w.label[kO].c_str());
    if (spec_.sandwich_norm) e.rms_norm(o, w.post_attn_norm, eps, plus_one, &o, w.label[kO].c_str());
    // x = x + o; h = ffn_norm(x)
    Tensor x2 = next_x(x);
    e.skip_norm(o, x, w.ffn_norm, eps, plus_one, &h, &x2, w.label[kFfnNorm].c_str());
    x = x2;
    if (spec_.gelu_tanh) {
      e.matmul(h, w.gate, Tensor{}, &g, w.label[kFfn].c_str());
      e.matmul(h, w.up, Tensor{}, &u, w.label[kFfn].c_str());
      e.run(make_op(OpKind::GeGlu, w.label[kFfn].c_str()), {g, u}, {&act});
    } else {
      e.run(make_op(OpKind::FusedSwiGlu, w.label[kFfn].c_str()), {h, w.gate, w.up}, {&act});
    }
    e.matmul(act, w.down, Tensor{}, &f, w.label[kDown].c_str());
    if (spec_.sandwich_norm) e.rms_norm(f, w.post_ffn_norm, eps, plus_one, &f, w.label[kDown].c_str());
    // x = x + f; h = next layer's input norm (or the final norm)
    const bool last = l + 1 == plan_.n_layers;
    const Tensor& next_norm = last ? final_norm_ : layers_[static_cast<size_t>(l + 1)].attn_norm;
    const char* next_label = last ? "final_norm" : layers_[static_cast<size_t>(l + 1)].label[kAttnNorm].c_str();
    Tensor x3 = next_x(x);
    e.skip_norm(f, x, next_norm, eps, plus_one, &h, &x3, next_label);
    x = x3;
  }

  // logits = h W_lm (only the last row unless all_logits)
  const int64_t rows = all_logits ? T : 1;
  Tensor out;
  if (be.host_memory() && !sample) {  // the cpu path writes the caller's buffer directly
    out = host_f32(logits, Shape{rows, plan_.vocab});
  } else {
    out = e.frame(Shape{rows, plan_.vocab});
  }
  // folded: the final norm in the lm_head's product (fused_norm_matmul) where the backend takes it
  const Tensor xin = all_logits ? x : x.rows(T - 1, 1);
  const Op final_fold = norm_op(OpKind::FusedNormMatmul, "lm_head");
  const Tensor ff_in[3] = {xin, final_norm_, lm_head_};
  if (fold && be.supports(final_fold, ff_in, 3)) {
    e.run(final_fold, {xin, final_norm_, lm_head_}, {&out});
  } else {
    if (fold) e.rms_norm(x, final_norm_, eps, plus_one, &h, "final_norm");  // h = final_norm(x)
    e.matmul(all_logits ? h : h.rows(T - 1, 1), lm_head_, Tensor{}, &out, "lm_head");
  }
  if (plan_.final_softcap > 0.f) {
    Op op = make_op(OpKind::Softcap, "final_softcap");
    op.a.softcap = plan_.final_softcap;
    e.run(op, {out}, {&out});
  }
  if (sample) {
    be.sample_rows(out, sample, draw, rows, ctx);  // the forward's one read-back: the draws (later if !draw)
    dispatcher_->record("sample", "sample", &be);
  } else if (!be.host_memory()) {
    be.download_f32(out, logits);  // the forward's one read-back
  }
  be.end_forward(ctx);
  advance_segments(segs, nseg);
}

}  // namespace

std::shared_ptr<Model> make_curated_decoder(std::shared_ptr<ModelFile> file, const LoadOptions& opts,
                                            DecoderPlan plan) {
  auto m = std::make_shared<Decoder>(std::move(plan));
  m->bind(std::move(file), opts);
  return m;
}

}  // namespace cyb
