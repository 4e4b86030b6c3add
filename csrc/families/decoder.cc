#include "families/decoder.h"

#include <cmath>
#include <cstring>

#include "core/errors.h"
#include "runtime/backends.h"

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

static void require_positive(int64_t v, const char* key, int64_t limit = int64_t(1) << 40) {
  if (v <= 0 || v > limit)
    throw_invalid_config(std::string("architecture.") + key,
                         "must be a positive integer (got " + std::to_string(v) + ")");
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
  require_positive(c.hidden, "hidden_size", 1 << 20);
  require_positive(c.n_heads, "num_attention_heads", 1 << 12);
  require_positive(c.n_kv_heads, "num_key_value_heads", 1 << 12);
  require_positive(c.n_layers, "num_hidden_layers", 1 << 12);
  require_positive(c.intermediate, "intermediate_size", 1 << 22);
  require_positive(c.vocab, "vocab_size", 1 << 24);
  require_positive(c.max_position, "max_position_embeddings", int64_t(1) << 24);
  c.head_dim = config_int_or(a, "head_dim", c.hidden / c.n_heads);
  require_positive(c.head_dim, "head_dim", 1 << 12);
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

// --------------------------------------------------------------- decoder ---

namespace {

struct LayerWeights {
  Tensor attn_norm, post_attn_norm, ffn_norm, post_ffn_norm, q_norm, k_norm;
  Tensor q, k, v, o, bq, bk, bv;
  Tensor gate, up, down;
  bool sliding = false;
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
  Decoder(const FamilySpec& spec, DecoderConfig cfg) : spec_(spec), cfg_(std::move(cfg)) {}

  void bind(std::shared_ptr<ModelFile> file, const LoadOptions& opts, std::unique_ptr<ThreadPool> pool,
            std::unique_ptr<Dispatcher> dispatcher) {
    file_ = std::move(file);
    opts_ = opts;
    pool_ = std::move(pool);
    dispatcher_ = std::move(dispatcher);
    family_ = spec_.name;
    bind_weights();
    build_rope();
  }

  const std::string& family() const override { return family_; }
  int64_t vocab_size() const override { return cfg_.vocab; }
  int64_t max_position() const override { return cfg_.max_position; }

  std::unique_ptr<Conversation> new_conversation(int64_t max_context) override {
    if (max_context <= 0 || max_context > cfg_.max_position)
      throw_invalid_config("max_context", "must be in [1, " + std::to_string(cfg_.max_position) +
                                              "] (got " + std::to_string(max_context) + ")");
    auto conv = std::make_unique<DecoderConversation>(pool_.get(), opts_.precise, max_context);
    Backend* be = dispatcher_->chain().front();
    conv->backend = be;
    const DType cache_dtype = opts_.precise ? DType::F32 : DType::F16;
    for (int64_t l = 0; l < cfg_.n_layers; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        Tensor t = be->alloc(Shape{cfg_.n_kv_heads, max_context, cfg_.head_dim}, cache_dtype);
        conv->caches.push_back(t);
      }
    }
    return conv;
  }

  void forward(Conversation& base, const int32_t* ids, int64_t T, bool all_logits,
               float* logits) override;

 private:
  Tensor weight(const std::string& name, std::vector<int64_t> shape, bool required = true);
  Tensor vector_f32(const std::string& name, int64_t n, bool required = true);
  void bind_weights();
  void build_rope();

  FamilySpec spec_;
  DecoderConfig cfg_;
  std::string family_;
  Tensor embed_, final_norm_, lm_head_;
  std::vector<LayerWeights> layers_;
  std::vector<std::vector<float>> owned_;  // f32 copies of 1-D weights (norms, biases)
  std::vector<float> rope_cos_, rope_sin_, rope_local_cos_, rope_local_sin_;
  RopeTable rope_, rope_local_;
};

Tensor Decoder::weight(const std::string& name, std::vector<int64_t> shape, bool required) {
  const TensorEntry* e = file_->find(name);
  if (!e) {
    if (required) throw_missing_tensor(name, std::string(spec_.name) + " family");
    return Tensor{};
  }
  if (e->shape != shape) throw_shape_mismatch(name, shape, e->shape);
  Tensor t;
  t.dtype = e->dtype;
  t.shape = Shape{};
  for (int64_t d : e->shape) t.shape.d[t.shape.ndim++] = d;
  t.data = const_cast<uint8_t*>(file_->tensor_data(*e));
  t.name = e->name.c_str();
  if (e->dtype == DType::I32 || e->dtype == DType::I64 || e->dtype == DType::U8)
    throw_weight_format(name, dtype_name(e->dtype), e->size, "integer encoding cannot be a weight");
  return t;
}

static float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      int e = -1;
      do { ++e; mant <<= 1; } while (!(mant & 0x400u));
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 112) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// 1-D weights (norms, biases) are tiny: keep an f32 copy whatever the file encodes.
Tensor Decoder::vector_f32(const std::string& name, int64_t n, bool required) {
  Tensor src = weight(name, {n}, required);
  if (!src.data) return src;
  std::vector<float> v(static_cast<size_t>(n));
  const uint8_t* p = static_cast<const uint8_t*>(src.data);
  for (int64_t i = 0; i < n; ++i) {
    switch (src.dtype) {
      case DType::F32: std::memcpy(&v[i], p + 4 * i, 4); break;
      case DType::F16: {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        v[i] = half_to_float(h);
        break;
      }
      case DType::BF16: {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        uint32_t bits = static_cast<uint32_t>(h) << 16;
        std::memcpy(&v[i], &bits, 4);
        break;
      }
      default:
        throw_weight_format(name, dtype_name(src.dtype), static_cast<uint64_t>(src.nbytes()),
                            "1-D weights must be f32, f16 or bf16");
    }
  }
  owned_.push_back(std::move(v));
  Tensor t = src;
  t.dtype = DType::F32;
  t.data = owned_.back().data();
  return t;
}

void Decoder::bind_weights() {
  const int64_t D = cfg_.hidden, hd = cfg_.head_dim, H = cfg_.n_heads, KV = cfg_.n_kv_heads;
  const int64_t I = cfg_.intermediate, V = cfg_.vocab;
  owned_.reserve(static_cast<size_t>(cfg_.n_layers) * 12 + 4);
  embed_ = weight("model.embed_tokens.weight", {V, D});
  final_norm_ = vector_f32("model.norm.weight", D);
  if (file_->find("lm_head.weight")) {
    lm_head_ = weight("lm_head.weight", {V, D});
  } else if (cfg_.tie_embeddings) {
    lm_head_ = embed_;
  } else {
    throw_missing_tensor("lm_head.weight",
                         std::string(spec_.name) + " family (tie_word_embeddings is false)");
  }
  layers_.resize(static_cast<size_t>(cfg_.n_layers));
  for (int64_t l = 0; l < cfg_.n_layers; ++l) {
    LayerWeights& w = layers_[static_cast<size_t>(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    w.attn_norm = vector_f32(p + "input_layernorm.weight", D);
    if (spec_.sandwich_norm) {
      w.post_attn_norm = vector_f32(p + "post_attention_layernorm.weight", D);
      w.ffn_norm = vector_f32(p + "pre_feedforward_layernorm.weight", D);
      w.post_ffn_norm = vector_f32(p + "post_feedforward_layernorm.weight", D);
    } else {
      w.ffn_norm = vector_f32(p + "post_attention_layernorm.weight", D);
    }
    if (spec_.fused_qkv) {
      Tensor qkv = weight(p + "self_attn.qkv_proj.weight", {(H + 2 * KV) * hd, D});
      w.q = qkv.rows(0, H * hd);
      w.k = qkv.rows(H * hd, KV * hd);
      w.v = qkv.rows((H + KV) * hd, KV * hd);
    } else {
      w.q = weight(p + "self_attn.q_proj.weight", {H * hd, D});
      w.k = weight(p + "self_attn.k_proj.weight", {KV * hd, D});
      w.v = weight(p + "self_attn.v_proj.weight", {KV * hd, D});
    }
    const bool bias = spec_.qkv_bias || cfg_.attention_bias;
    if (bias) {
      w.bq = vector_f32(p + "self_attn.q_proj.bias", H * hd, spec_.qkv_bias);
      w.bk = vector_f32(p + "self_attn.k_proj.bias", KV * hd, spec_.qkv_bias);
      w.bv = vector_f32(p + "self_attn.v_proj.bias", KV * hd, spec_.qkv_bias);
    }
    w.o = weight(p + "self_attn.o_proj.weight", {D, H * hd});
    if (spec_.qk_norm) {
      w.q_norm = vector_f32(p + "self_attn.q_norm.weight", hd);
      w.k_norm = vector_f32(p + "self_attn.k_norm.weight", hd);
    }
    if (spec_.fused_gate_up) {
      Tensor gu = weight(p + "mlp.gate_up_proj.weight", {2 * I, D});
      w.gate = gu.rows(0, I);
      w.up = gu.rows(I, I);
    } else {
      w.gate = weight(p + "mlp.gate_proj.weight", {I, D});
      w.up = weight(p + "mlp.up_proj.weight", {I, D});
    }
    w.down = weight(p + "mlp.down_proj.weight", {D, I});
    w.sliding = cfg_.layer_sliding[static_cast<size_t>(l)] != 0 && cfg_.sliding_window > 0;
    for (int i = 0; i < 12; ++i) w.label[i] = "layers." + std::to_string(l) + "." + kLabelNames[i];
  }
}

void Decoder::build_rope() {
  int rot = static_cast<int>(static_cast<double>(cfg_.head_dim) * cfg_.partial_rotary);
  rot -= rot % 2;
  build_rope_table(rot, cfg_.max_position, cfg_.rope_theta, cfg_.rope_scaling, rope_cos_, rope_sin_);
  rope_ = RopeTable{rope_cos_.data(), rope_sin_.data(), rot, cfg_.max_position, cfg_.rope_neox};
  if (cfg_.rope_local_theta > 0.0) {
    build_rope_table(rot, cfg_.max_position, cfg_.rope_local_theta, RopeScaling{},
                     rope_local_cos_, rope_local_sin_);
    rope_local_ = RopeTable{rope_local_cos_.data(), rope_local_sin_.data(), rot, cfg_.max_position,
                            cfg_.rope_neox};
  } else {
    rope_local_ = rope_;
  }
}

Op make_op(OpKind k, const char* label) {
  Op op{k, OpAttrs{}, label};
  return op;
}

void Decoder::forward(Conversation& base, const int32_t* ids, int64_t T, bool all_logits,
                      float* logits) {
  auto& conv = static_cast<DecoderConversation&>(base);
  const int64_t pos0 = conv.position();
  if (T <= 0) throw_shape_mismatch("forward", {1}, {T});
  if (pos0 + T > conv.max_context())
    throw_shape_mismatch("forward (context)", {conv.max_context()}, {pos0 + T});
  for (int64_t t = 0; t < T; ++t)
    if (ids[t] < 0 || ids[t] >= cfg_.vocab)
      throw_invalid_config("input_ids", "token id " + std::to_string(ids[t]) + " is outside [0, " +
                                            std::to_string(cfg_.vocab) + ")");

  ExecContext& ctx = conv.ctx();
  Dispatcher& d = *dispatcher_;
  // Activations live where the primary backend computes (host memory for cpu).
  Backend& be = *d.chain().front();
  be.begin_forward(ctx);
  auto frame = [&](const Shape& s) { return be.alloc_frame(ctx, s); };
  const int64_t D = cfg_.hidden, hd = cfg_.head_dim, H = cfg_.n_heads, KV = cfg_.n_kv_heads;
  const int64_t I = cfg_.intermediate;
  const float eps = static_cast<float>(cfg_.eps);

  auto norm_op = [&](const char* label) {
    Op op = make_op(OpKind::RmsNorm, label);
    op.a.eps = eps;
    op.a.norm_plus_one = spec_.norm_plus_one;
    return op;
  };
  auto skip_norm_op = [&](const char* label) {
    Op op = norm_op(label);
    op.kind = OpKind::FusedSkipNorm;
    return op;
  };

  Tensor ids_t;
  ids_t.dtype = DType::I32;
  ids_t.shape = Shape{T};
  ids_t.data = const_cast<int32_t*>(ids);

  // x = embed(ids) [* sqrt(d)]
  Tensor x = frame(Shape{T, D});
  {
    Op op = make_op(OpKind::Embedding, "embed_tokens");
    // Gemma multiplies by sqrt(hidden) rounded to the activation dtype (f32 here).
    op.a.scale = spec_.embed_scale ? static_cast<float>(std::sqrt(static_cast<double>(D))) : 1.f;
    d.run(op, {ids_t, embed_}, {&x}, ctx);
  }
  // h = input_layernorm(x) of layer 0
  Tensor h = frame(Shape{T, D});
  d.run(norm_op(layers_[0].label[kAttnNorm].c_str()), {x, layers_[0].attn_norm}, {&h}, ctx);

  const float attn_scale = static_cast<float>(
      cfg_.attn_scale > 0.0 ? cfg_.attn_scale : 1.0 / std::sqrt(static_cast<double>(hd)));

  // Per-layer activations. On a host-memory backend every op runs to completion
  // before the next starts, so one set serves all layers (a layer's values are
  // dead once the next layer begins): a long prefill holds one layer's worth of
  // intermediates, not n_layers of them. Device backends get fresh frames per
  // layer (their work is recorded and runs later).
  const bool reuse = be.host_memory();
  Tensor q, k, v, att, o, xa, xb, act, g, u, f;
  auto layer_frames = [&] {
    q = frame(Shape{T, H * hd});
    k = frame(Shape{T, KV * hd});
    v = frame(Shape{T, KV * hd});
    att = frame(Shape{T, H * hd});
    o = frame(Shape{T, D});
    xa = frame(Shape{T, D});
    xb = frame(Shape{T, D});
    act = frame(Shape{T, I});
    if (spec_.gelu_tanh) {
      g = frame(Shape{T, I});
      u = frame(Shape{T, I});
    }
    f = frame(Shape{T, D});
  };
  if (reuse) layer_frames();
  // the residual stream alternates between xa and xb (an op never writes its input)
  auto next_x = [&](const Tensor& cur) { return cur.data == xa.data ? xb : xa; };

  for (int64_t l = 0; l < cfg_.n_layers; ++l) {
    const LayerWeights& w = layers_[static_cast<size_t>(l)];
    if (!reuse) layer_frames();
    auto matmul = [&](const Tensor& in, const Tensor& W, const Tensor& b, Tensor* out, int label) {
      Op op = make_op(OpKind::Matmul, w.label[label].c_str());
      if (b.data) d.run(op, {in, W, b}, {out}, ctx);
      else d.run(op, {in, W}, {out}, ctx);
    };
    matmul(h, w.q, w.bq, &q, kQ);
    matmul(h, w.k, w.bk, &k, kK);
    matmul(h, w.v, w.bv, &v, kV);
    if (spec_.qk_norm) {
      // RMSNorm over each head: view q as [T*H, hd], k as [T*KV, hd].
      Tensor qv = q, kv = k;
      qv.shape = Shape{T * H, hd};
      kv.shape = Shape{T * KV, hd};
      d.run(norm_op(w.label[kQkNorm].c_str()), {qv, w.q_norm}, {&qv}, ctx);
      d.run(norm_op(w.label[kQkNorm].c_str()), {kv, w.k_norm}, {&kv}, ctx);
    }
    const RopeTable* rope = w.sliding ? &rope_local_ : &rope_;
    {
      Op op = make_op(OpKind::Rope, w.label[kRope].c_str());
      op.a.pos0 = pos0;
      op.a.head_dim = static_cast<int>(hd);
      op.a.rope = rope;
      op.a.n_heads = static_cast<int>(H);
      d.run(op, {q}, {&q}, ctx);
      op.a.n_heads = static_cast<int>(KV);
      d.run(op, {k}, {&k}, ctx);
    }
    Tensor& kc = conv.caches[static_cast<size_t>(2 * l)];
    Tensor& vc = conv.caches[static_cast<size_t>(2 * l + 1)];
    {
      Op op = make_op(OpKind::KvWrite, w.label[kKv].c_str());
      op.a.pos0 = pos0;
      op.a.n_kv_heads = static_cast<int>(KV);
      op.a.head_dim = static_cast<int>(hd);
      d.run(op, {k}, {&kc}, ctx);
      d.run(op, {v}, {&vc}, ctx);
    }
    {
      Op op = make_op(OpKind::Attention, w.label[kAttn].c_str());
      op.a.pos0 = pos0;
      op.a.n_heads = static_cast<int>(H);
      op.a.n_kv_heads = static_cast<int>(KV);
      op.a.head_dim = static_cast<int>(hd);
      op.a.scale = attn_scale;
      op.a.softcap = cfg_.attn_softcap;
      op.a.window = w.sliding ? cfg_.sliding_window : 0;
      d.run(op, {q, kc, vc}, {&att}, ctx);
    }
    matmul(att, w.o, Tensor{}, &o, kO);
    if (spec_.sandwich_norm) d.run(norm_op(w.label[kO].c_str()), {o, w.post_attn_norm}, {&o}, ctx);
    // x = x + o; h = ffn_norm(x)
    Tensor x2 = next_x(x);
    d.run(skip_norm_op(w.label[kFfnNorm].c_str()), {o, x, w.ffn_norm}, {&h, &x2}, ctx);
    x = x2;
    if (spec_.gelu_tanh) {
      matmul(h, w.gate, Tensor{}, &g, kFfn);
      matmul(h, w.up, Tensor{}, &u, kFfn);
      d.run(make_op(OpKind::GeGlu, w.label[kFfn].c_str()), {g, u}, {&act}, ctx);
    } else {
      d.run(make_op(OpKind::FusedSwiGlu, w.label[kFfn].c_str()), {h, w.gate, w.up}, {&act}, ctx);
    }
    matmul(act, w.down, Tensor{}, &f, kDown);
    if (spec_.sandwich_norm)
      d.run(norm_op(w.label[kDown].c_str()), {f, w.post_ffn_norm}, {&f}, ctx);
    // x = x + f; h = next layer's input norm (or the final norm)
    const bool last = l + 1 == cfg_.n_layers;
    const Tensor& next_norm = last ? final_norm_ : layers_[static_cast<size_t>(l + 1)].attn_norm;
    const char* next_label = last ? "final_norm" : layers_[static_cast<size_t>(l + 1)].label[kAttnNorm].c_str();
    Tensor x3 = next_x(x);
    d.run(skip_norm_op(next_label), {f, x, next_norm}, {&h, &x3}, ctx);
    x = x3;
  }

  // logits = h W_lm (only the last row unless all_logits)
  const int64_t rows = all_logits ? T : 1;
  Tensor hin = all_logits ? h : h.rows(T - 1, 1);
  Tensor out;
  if (be.host_memory()) {  // the cpu path writes the caller's buffer directly
    out.dtype = DType::F32;
    out.shape = Shape{rows, cfg_.vocab};
    out.data = logits;
  } else {
    out = frame(Shape{rows, cfg_.vocab});
  }
  d.run(make_op(OpKind::Matmul, "lm_head"), {hin, lm_head_}, {&out}, ctx);
  if (cfg_.final_softcap > 0.f) {
    Op op = make_op(OpKind::Softcap, "final_softcap");
    op.a.softcap = cfg_.final_softcap;
    d.run(op, {out}, {&out}, ctx);
  }
  if (!be.host_memory()) be.download_f32(out, logits);  // the forward's one read-back
  be.end_forward(ctx);
  conv.advance(T);
}

}  // namespace

std::shared_ptr<Model> make_decoder(std::shared_ptr<ModelFile> file, const LoadOptions& opts,
                                    const FamilySpec& spec, DecoderConfig cfg) {
  auto m = std::make_shared<Decoder>(spec, std::move(cfg));
  auto pool = std::make_unique<ThreadPool>(opts.threads);
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> chain = select_backends(opts, &owned);
  auto dispatcher = std::make_unique<Dispatcher>(chain);
  for (auto& b : owned) dispatcher->adopt(std::move(b));
  m->bind(std::move(file), opts, std::move(pool), std::move(dispatcher));
  return m;
}

}  // namespace cyb
