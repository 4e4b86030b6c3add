#include "families/whisper.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/config_check.h"
#include "core/errors.h"
#include "core/weight_cache.h"
#include "dispatch/op.h"
#include "families/decoder.h"  // config_arch, config_int, config_*_or, RowSegment
#include "families/emit.h"
#include "model/model_base.h"

namespace cyb {

bool is_whisper_model_type(const std::string& model_type) { return model_type == "whisper"; }

namespace {

struct Plan {
  int64_t d = 0, n_mels = 0, S = 0, text_ctx = 0, vocab = 0;
  int64_t enc_layers = 0, enc_heads = 0, enc_ffn = 0, dec_layers = 0, dec_heads = 0, dec_ffn = 0;
  OpKind act = OpKind::Gelu;
  double embed_scale = 1.0;
  float eps = 1e-5f;  // torch.nn.LayerNorm's default (the config has no key for it)
};

Plan parse_config(const toml::Value& config) {
  const toml::Value& a = config_arch(config);
  Plan p;
  p.d = config_int(a, "d_model");
  p.n_mels = config_int_or(a, "num_mel_bins", 80);
  p.S = config_int_or(a, "max_source_positions", 1500);
  p.text_ctx = config_int_or(a, "max_target_positions", 448);
  p.vocab = config_int(a, "vocab_size");
  p.enc_layers = config_int(a, "encoder_layers");
  p.enc_heads = config_int(a, "encoder_attention_heads");
  p.enc_ffn = config_int(a, "encoder_ffn_dim");
  p.dec_layers = config_int(a, "decoder_layers");
  p.dec_heads = config_int(a, "decoder_attention_heads");
  p.dec_ffn = config_int(a, "decoder_ffn_dim");
  check_int_range(p.d, 1, 1 << 16, "architecture.d_model");
  check_int_range(p.n_mels, 1, 1 << 12, "architecture.num_mel_bins");
  check_int_range(p.S, 1, 1 << 16, "architecture.max_source_positions");
  check_int_range(p.text_ctx, 1, 1 << 16, "architecture.max_target_positions");
  check_int_range(p.vocab, 1, 1 << 24, "architecture.vocab_size");
  check_int_range(p.enc_layers, 1, 1 << 10, "architecture.encoder_layers");
  check_int_range(p.dec_layers, 1, 1 << 10, "architecture.decoder_layers");
  check_int_range(p.enc_heads, 1, 1 << 10, "architecture.encoder_attention_heads");
  check_int_range(p.dec_heads, 1, 1 << 10, "architecture.decoder_attention_heads");
  check_int_range(p.enc_ffn, 1, 1 << 20, "architecture.encoder_ffn_dim");
  check_int_range(p.dec_ffn, 1, 1 << 20, "architecture.decoder_ffn_dim");
  if (p.d % p.enc_heads || p.d % p.dec_heads)
    throw_invalid_config("architecture.encoder_attention_heads",
                         "d_model " + std::to_string(p.d) + " is not a multiple of the attention heads");
  std::string act = "gelu";
  if (const toml::Value* v = a.find("activation_function"); v && v->is_string()) act = v->as_string();
  if (act == "gelu") p.act = OpKind::Gelu;
  else if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") p.act = OpKind::GeluTanh;
  else if (act == "relu") p.act = OpKind::Relu;
  else throw_invalid_config("architecture.activation_function", "'" + act + "' is not supported (gelu, gelu_new, relu)");
  if (config_bool_or(a, "scale_embedding", false)) p.embed_scale = std::sqrt(static_cast<double>(p.d));
  return p;
}

struct Attn {
  Tensor q, bq, k, v, bv, o, bo, ln, lnb;
  std::string lq, lk, lv, lo, la, lln;
};
struct Block {
  Attn self, cross;  // cross: decoder only
  Tensor fc1, bfc1, fc2, bfc2, ln, lnb;
  std::string lkv, lfc1, lfc2, lact, lln, ladd;
};

// One window's cross-attention K/V per decoder layer (immutable once computed; shared by clones).
struct CrossKV {
  Backend* be = nullptr;
  std::vector<Tensor> k, v;    // [S, d]: the encoder_attention op's layout (forwards of several tokens)
  std::vector<Tensor> kh, vh;  // [H, S, hd]: a cache's layout, for the attention op on one-token steps
  std::vector<int32_t> mask;   // [1, S] ones
  ~CrossKV() {
    for (Tensor& t : k) be->release(t);
    for (Tensor& t : v) be->release(t);
    for (Tensor& t : kh) be->release(t);
    for (Tensor& t : vh) be->release(t);
  }
};

// What cross_attention() asks forward_chunk to record: for heads[i] = (layer, head), the
// softmax rows of position p (relative to pos0) into out[(i * T + p) * n_frames ...].
struct AttnCapture {
  const std::vector<std::pair<int64_t, int64_t>>* heads = nullptr;
  int64_t n_frames = 0, T = 0, pos0 = 0;
  float* out = nullptr;
};

// One layer's activation frames (encoder and decoder blocks alike): rows x d, and rows x I
// for the MLP's up projection, taken once for all layers (dispatch/backend.h: ops run in order).
struct LayerFrames {
  Tensor hn, q, k, v, att, o, xs, up, f;
  template <class Frame>
  void take(Frame&& frame, int64_t rows, int64_t d, int64_t I) {
    for (Tensor* t : {&hn, &q, &k, &v, &att, &o, &xs, &f}) *t = frame(Shape{rows, d});
    up = frame(Shape{rows, I});
  }
};

class WhisperConversation : public Conversation {
 public:
  WhisperConversation(ThreadPool* pool, bool precise, int64_t max_ctx) : Conversation(pool, precise, max_ctx) {}
  ~WhisperConversation() override {
    for (Tensor& t : caches) backend->release(t);
  }
  int64_t kv_cache_bytes() const override {
    int64_t n = 0;
    for (const Tensor& t : caches) n += static_cast<int64_t>(t.nbytes());
    return n;
  }
  Backend* backend = nullptr;
  std::vector<Tensor> caches;  // k0, v0, k1, v1, ...
  std::shared_ptr<CrossKV> cross;
  const AttnCapture* capture = nullptr;  // set only during cross_attention()
};

class Whisper : public WhisperModel {
 public:
  explicit Whisper(Plan p) : plan_(p) {}

  void bind(std::shared_ptr<ModelFile> file, const LoadOptions& opts) {
    file_ = std::move(file);
    opts_ = opts;
    init_model_runtime(opts, opts.threads, &pool_, &dispatcher_);
    binder_.reset(file_.get());
    bind_weights();
  }

  const std::string& family() const override { return family_; }
  int64_t vocab_size() const override { return plan_.vocab; }
  int64_t max_position() const override { return plan_.text_ctx; }
  int64_t hidden_size() const override { return plan_.d; }
  int64_t n_mels() const override { return plan_.n_mels; }
  int64_t n_audio_ctx() const override { return plan_.S; }
  int64_t d_model() const override { return plan_.d; }

  void encode_audio(const float* mel, int64_t batch, int64_t n_mels, int64_t frames, float* out) override;
  void start(Conversation& conv, const float* enc, int64_t rows, int64_t cols) override;
  std::unique_ptr<Conversation> clone(Conversation& conv) override;
  void copy_state(Conversation& dst, Conversation& src) override;
  void reset(Conversation& conv) override {
    Conversation::Use use(conv);
    auto& c = static_cast<WhisperConversation&>(conv);
    c.reset_kv_cache();
    c.cross.reset();
  }
  bool started(Conversation& conv) const override { return static_cast<WhisperConversation&>(conv).cross != nullptr; }
  void cross_attention(Conversation& conv, const int32_t* ids, int64_t T,
                       const std::vector<std::pair<int64_t, int64_t>>& heads, int64_t n_frames, float* logits,
                       float* attn) override;

 protected:
  std::unique_ptr<Conversation> make_conversation(int64_t max_context) override {
    check_max_context(max_context, plan_.text_ctx);
    auto conv = std::make_unique<WhisperConversation>(pool_.get(), opts_.precise, max_context);
    Backend* be = dispatcher_->chain().front();
    conv->backend = be;
    const int64_t H = plan_.dec_heads, hd = plan_.d / H;
    for (int64_t l = 0; l < 2 * plan_.dec_layers; ++l)
      conv->caches.push_back(be->alloc(Shape{H, max_context, hd}, opts_.precise ? DType::F32 : DType::F16));
    return conv;
  }
  int64_t conversation_bytes(int64_t max_context) const override {
    const int64_t kv = 2 * plan_.dec_layers * plan_.d * max_context * (opts_.precise ? 4 : 2);
    const int64_t cross = 2 * 2 * plan_.dec_layers * plan_.S * plan_.d * 4;  // [S, d] and head-major copies
    const int64_t T = std::min(max_context, kForwardChunk);
    const int64_t act = T * (8 * plan_.d + plan_.dec_ffn + plan_.vocab) * 4 + plan_.S * plan_.d * 4;
    return kv + cross + act;
  }
  void forward_chunk(Conversation& conv, const int32_t* ids, int64_t T, bool all_logits, float* logits) override;
  // A beam-search step: one token for each of n sessions in one pass (the matmuls and the
  // lm_head read their weights once for all n rows; each runs of sessions sharing one
  // window's cross K/V — a beam's clones — takes one encoder_attention call for its rows).
  void forward_batch_step(Conversation* const* convs, const int32_t* ids, int64_t n, float* logits) override;
  bool device_beams() const override { return dispatcher_->chain().front()->can_beam(); }
  // The same step with the beam candidates taken on the device (Backend::beam_rows).
  void forward_batch_step_beam(Conversation* const* convs, const int32_t* ids, int64_t n, const BeamRow* p,
                               const BeamSpec& spec, float* score, int32_t* token, int64_t* first_nonfinite) override;

 private:
  using Segment = RowSegment<WhisperConversation>;
  // Beam candidates instead of logits (forward_batch_step_beam).
  struct BeamOut {
    const BeamRow* p;
    const BeamSpec* spec;
    float* score;
    int32_t* token;
    int64_t* first_nonfinite;
  };
  // The forward of T rows in segments (one session's chunk, or one row per session of a
  // batched step); logits of every row when all_logits, else of the last one; with `beam`,
  // the candidates of every row instead (logits unused).
  void forward_rows(const Segment* segs, size_t nseg, const int32_t* ids, int64_t T, bool all_logits, float* logits,
                    const BeamOut* beam = nullptr);
  // One row per session of a batched step, each started on its encoder output.
  std::vector<Segment> step_segments(Conversation* const* convs, int64_t n) const;
  // Layer l's self-attention of each segment's rows (KV cache write, then attention over it).
  void self_attend(const Emitter& e, const Segment* segs, size_t nseg, size_t l, const Tensor& q, const Tensor& k,
                   const Tensor& v, const Tensor& att) const;
  // Layer l's cross-attention of q over each run's window K/V (runs: consecutive segments of one
  // window, cmasks their masks) into att.
  void cross_attend(const Emitter& e, const Segment* segs, const std::vector<std::pair<size_t, size_t>>& runs,
                    const std::vector<Tensor>& cmasks, size_t l, const Tensor& q, const Tensor& att) const;
  // y = x + fc2(act(fc1(final_layer_norm(x)))): a block's MLP with its residual, in fr's frames.
  void mlp(const Emitter& e, const Block& b, const Tensor& x, LayerFrames& fr, Tensor* y) const;
  void bind_weights();
  void capture_cross(WhisperConversation& conv, size_t layer, const Tensor& q, int64_t T, int64_t pos0);
  Tensor w(const std::string& name, std::vector<int64_t> shape) {
    return binder_.weight(prefix_ + name, "whisper family", &shape);
  }
  Tensor vec(const std::string& name, int64_t n) { return binder_.vector_f32(prefix_ + name, n, "whisper family"); }
  Tensor f32(const std::string& name, std::vector<int64_t> shape) { return binder_.to_f32(w(name, shape)); }
  void bind_attn(Attn& a, const std::string& base, const std::string& ln, int64_t d) {
    a.q = w(base + ".q_proj.weight", {d, d});
    a.bq = vec(base + ".q_proj.bias", d);
    a.k = w(base + ".k_proj.weight", {d, d});
    a.v = w(base + ".v_proj.weight", {d, d});
    a.bv = vec(base + ".v_proj.bias", d);
    a.o = w(base + ".out_proj.weight", {d, d});
    a.bo = vec(base + ".out_proj.bias", d);
    a.ln = vec(ln + ".weight", d);
    a.lnb = vec(ln + ".bias", d);
    a.lq = base + ".q_proj";
    a.lk = base + ".k_proj";
    a.lv = base + ".v_proj";
    a.lo = base + ".out_proj";
    a.la = base + ".attention";
    a.lln = ln;
  }
  void bind_block(Block& b, const std::string& base, int64_t ffn) {
    const int64_t d = plan_.d;
    b.fc1 = w(base + ".fc1.weight", {ffn, d});
    b.bfc1 = vec(base + ".fc1.bias", ffn);
    b.fc2 = w(base + ".fc2.weight", {d, ffn});
    b.bfc2 = vec(base + ".fc2.bias", d);
    b.ln = vec(base + ".final_layer_norm.weight", d);
    b.lnb = vec(base + ".final_layer_norm.bias", d);
    b.lkv = base + ".self_attn.kv_write";
    b.lfc1 = base + ".fc1";
    b.lfc2 = base + ".fc2";
    b.lact = base + ".act";
    b.lln = base + ".final_layer_norm";
    b.ladd = base + ".residual";
  }

  Plan plan_;
  std::string family_ = "whisper";
  std::string prefix_;
  WeightBinder binder_;
  WeightCache wcache_;  // packed float panels of the encoder's matmuls (core/weight_cache.h)
  Tensor conv1_, conv1b_, conv2_, conv2b_, enc_pos_, enc_ln_, enc_lnb_;
  Tensor tok_, dec_pos_, dec_ln_, dec_lnb_, lm_head_;
  std::vector<Block> enc_, dec_;
};

void Whisper::bind_weights() {
  prefix_ = file_->find("model.encoder.conv1.weight") ? "model." : "";
  const int64_t d = plan_.d;
  // conv weights and the encoder positions as f32 copies (small; every backend takes f32)
  conv1_ = f32("encoder.conv1.weight", {d, plan_.n_mels, 3});
  conv1b_ = vec("encoder.conv1.bias", d);
  conv2_ = f32("encoder.conv2.weight", {d, d, 3});
  conv2b_ = vec("encoder.conv2.bias", d);
  enc_pos_ = f32("encoder.embed_positions.weight", {plan_.S, d});
  enc_ln_ = vec("encoder.layer_norm.weight", d);
  enc_lnb_ = vec("encoder.layer_norm.bias", d);
  enc_.resize(static_cast<size_t>(plan_.enc_layers));
  for (int64_t l = 0; l < plan_.enc_layers; ++l) {
    const std::string base = "encoder.layers." + std::to_string(l);
    Block& b = enc_[static_cast<size_t>(l)];
    bind_attn(b.self, base + ".self_attn", base + ".self_attn_layer_norm", d);
    bind_block(b, base, plan_.enc_ffn);
  }
  tok_ = w("decoder.embed_tokens.weight", {plan_.vocab, d});
  dec_pos_ = w("decoder.embed_positions.weight", {plan_.text_ctx, d});
  dec_ln_ = vec("decoder.layer_norm.weight", d);
  dec_lnb_ = vec("decoder.layer_norm.bias", d);
  const std::vector<int64_t> head_shape{plan_.vocab, d};
  lm_head_ = file_->find("proj_out.weight") ? binder_.weight("proj_out.weight", "whisper family", &head_shape) : tok_;
  dec_.resize(static_cast<size_t>(plan_.dec_layers));
  for (int64_t l = 0; l < plan_.dec_layers; ++l) {
    const std::string base = "decoder.layers." + std::to_string(l);
    Block& b = dec_[static_cast<size_t>(l)];
    bind_attn(b.self, base + ".self_attn", base + ".self_attn_layer_norm", d);
    bind_attn(b.cross, base + ".encoder_attn", base + ".encoder_attn_layer_norm", d);
    bind_block(b, base, plan_.dec_ffn);
  }
}

void check_finite(const float* p, int64_t n, const ModelFile& f, const char* what) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(p[i])) {
      f.check_unchanged();
      throw_format("weights", "", std::string("the whisper ") + what + " produced non-finite values (NaN or Inf " +
                                      "in the input, or weights of '" + f.path() + "' corrupted since load)");
    }
}

// Heads of d / H dims each, one query head per key head, scaled by 1 / sqrt(head_dim).
AttnHeads heads_of(int64_t d, int64_t H) {
  AttnHeads a;
  a.n_heads = a.n_kv_heads = static_cast<int>(H);
  a.head_dim = static_cast<int>(d / H);
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d / H)));
  return a;
}

void Whisper::mlp(const Emitter& e, const Block& b, const Tensor& x, LayerFrames& fr, Tensor* y) const {
  e.layer_norm(x, b.ln, b.lnb, plan_.eps, &fr.hn, b.lln.c_str());
  e.matmul(fr.hn, b.fc1, b.bfc1, &fr.up, b.lfc1.c_str());
  e.run(make_op(plan_.act, b.lact.c_str()), {fr.up}, {&fr.up});
  e.matmul(fr.up, b.fc2, b.bfc2, &fr.f, b.lfc2.c_str());
  e.run(make_op(OpKind::Add, b.ladd.c_str()), {x, fr.f}, {y});
}

void Whisper::encode_audio(const float* mel, int64_t B, int64_t n_mels, int64_t frames, float* out) {
  if (B < 1) throw_shape_mismatch("encode (mel batch)", {1}, {B});
  if (n_mels != plan_.n_mels || frames != 2 * plan_.S)
    throw_shape_mismatch("encode (mel)", {plan_.n_mels, 2 * plan_.S}, {n_mels, frames});
  file_->check_unchanged();
  const int64_t d = plan_.d, S = plan_.S, L = 2 * S, BS = B * S, H = plan_.enc_heads, I = plan_.enc_ffn;
  check_memory_budget(opts_.max_memory, charged_bytes(), 4 * (B * L * d + BS * (10 * d + I)) + 4 * BS * d,
                      "encode(mel batch=" + std::to_string(B) + "): activations");
  auto lock = device_lock(*dispatcher_);
  ExecContext ctx(pool_.get(), opts_.precise);
  ctx.set_weight_cache(&wcache_);
  const Emitter e(*dispatcher_, ctx);
  Backend& be = e.backend();
  be.begin_forward(ctx);
  const float eps = plan_.eps;
  // stem
  Tensor h1 = e.frame(Shape{B, L, d});
  {
    Op op = make_op(OpKind::Conv1d, "encoder.conv1");
    op.a.stride = 1;
    op.a.padding = 1;
    op.a.channels_first = true;
    e.run(op, {host_f32(mel, Shape{B, n_mels, L}), conv1_, conv1b_}, {&h1});
    e.run(make_op(OpKind::Gelu, "encoder.conv1.act"), {h1}, {&h1});
  }
  Tensor h2 = e.frame(Shape{B, S, d});
  {
    Op op = make_op(OpKind::Conv1d, "encoder.conv2");
    op.a.stride = 2;
    op.a.padding = 1;
    op.a.channels_first = false;
    e.run(op, {h1, conv2_, conv2b_}, {&h2});
    e.run(make_op(OpKind::Gelu, "encoder.conv2.act"), {h2}, {&h2});
  }
  h2.shape = Shape{BS, d};
  Tensor x = e.frame(Shape{BS, d});
  std::vector<float> tiled;  // positions repeated per window (add broadcasts one row only)
  Tensor pos = enc_pos_;
  if (B > 1) {
    tiled.resize(static_cast<size_t>(BS * d));
    for (int64_t b = 0; b < B; ++b)
      std::memcpy(tiled.data() + b * S * d, enc_pos_.data, static_cast<size_t>(S * d) * sizeof(float));
    pos = host_f32(tiled.data(), Shape{BS, d});
  }
  e.run(make_op(OpKind::Add, "encoder.embed_positions"), {h2, pos}, {&x});
  std::vector<int32_t> mask(static_cast<size_t>(BS), 1);
  const Tensor mask_t = host_i32(mask.data(), Shape{B, S});
  LayerFrames fr;
  Tensor &hn = fr.hn, &q = fr.q, &k = fr.k, &v = fr.v, &att = fr.att, &o = fr.o, &xs = fr.xs;
  fr.take([&](const Shape& sh) { return e.frame(sh); }, BS, d, I);
  const AttnHeads heads = heads_of(d, H);
  for (const Block& L_ : enc_) {
    const Attn& A = L_.self;
    e.layer_norm(x, A.ln, A.lnb, eps, &hn, A.lln.c_str());
    e.matmul(hn, A.q, A.bq, &q, A.lq.c_str());
    e.matmul(hn, A.k, Tensor{}, &k, A.lk.c_str());
    e.matmul(hn, A.v, A.bv, &v, A.lv.c_str());
    e.encoder_attention(q, k, v, mask_t, heads, &att, A.la.c_str());
    e.matmul(att, A.o, A.bo, &o, A.lo.c_str());
    e.run(make_op(OpKind::Add, L_.ladd.c_str()), {x, o}, {&xs});
    mlp(e, L_, xs, fr, &x);
  }
  Tensor y = e.frame(Shape{BS, d});
  e.layer_norm(x, enc_ln_, enc_lnb_, eps, &y, "encoder.layer_norm");
  if (be.host_memory()) std::memcpy(out, y.data, static_cast<size_t>(BS * d) * sizeof(float));
  else be.download_f32(y, out);
  be.end_forward(ctx);
  check_finite(out, BS * d, *file_, "encoder");
}

void Whisper::start(Conversation& base, const float* enc, int64_t rows, int64_t cols) {
  if (rows != plan_.S || cols != plan_.d)
    throw_shape_mismatch("start (encoder output)", {plan_.S, plan_.d}, {rows, cols});
  Conversation::Use use(base);
  auto& conv = static_cast<WhisperConversation&>(base);
  file_->check_unchanged();
  for (int64_t i = 0; i < rows * cols; ++i)
    if (!std::isfinite(enc[i]))
      throw_invalid_config("encoder_output", "value " + std::to_string(i) + " is not finite");
  auto lock = device_lock(*dispatcher_);
  const Emitter e(*dispatcher_, conv.ctx());
  Backend& be = e.backend();
  auto cross = std::make_shared<CrossKV>();
  cross->be = &be;
  cross->mask.assign(static_cast<size_t>(plan_.S), 1);
  ExecContext& ctx = e.ctx();
  be.begin_forward(ctx);
  const Tensor x = host_f32(enc, Shape{plan_.S, plan_.d});
  for (const Block& L_ : dec_) {
    Tensor k = be.alloc(Shape{plan_.S, plan_.d}, DType::F32), v = be.alloc(Shape{plan_.S, plan_.d}, DType::F32);
    cross->k.push_back(k);
    cross->v.push_back(v);
    e.matmul(x, L_.cross.k, Tensor{}, &k, L_.cross.lk.c_str());
    e.matmul(x, L_.cross.v, L_.cross.bv, &v, L_.cross.lv.c_str());
    // The same K/V in a cache's head-major layout: a one-token step attends over them with the
    // attention op (contiguous rows per head), where encoder_attention would first gather every
    // key of every head transposed (csrc/backends/cpu/kernels_x86_ops.inc k_encoder_attention), once
    // per call, which dominated beam-search steps.
    const int64_t H = plan_.dec_heads, hd = plan_.d / H;
    Tensor kh = be.alloc(Shape{H, plan_.S, hd}, DType::F32), vh = be.alloc(Shape{H, plan_.S, hd}, DType::F32);
    cross->kh.push_back(kh);
    cross->vh.push_back(vh);
    e.kv_write(k, &kh, 0, static_cast<int>(H), static_cast<int>(hd), L_.lkv.c_str());
    e.kv_write(v, &vh, 0, static_cast<int>(H), static_cast<int>(hd), L_.lkv.c_str());
  }
  be.end_forward(ctx);
  conv.cross = std::move(cross);
  conv.reset_kv_cache();
}

std::unique_ptr<Conversation> Whisper::clone(Conversation& src) {
  std::unique_ptr<Conversation> c = new_conversation(src.max_context());
  copy_state(*c, src);
  return c;
}

void Whisper::copy_state(Conversation& dst_base, Conversation& src_base) {
  if (&dst_base == &src_base) return;
  auto& dst = static_cast<WhisperConversation&>(dst_base);
  auto& src = static_cast<WhisperConversation&>(src_base);
  if (dst.max_context() != src.max_context())
    throw_invalid_config("conversation", "copy between sessions of different max_context (" +
                                             std::to_string(src.max_context()) + " -> " +
                                             std::to_string(dst.max_context()) + ")");
  Conversation::Use u1(dst);
  Conversation::Use u2(src);
  auto lock = device_lock(*dispatcher_);
  Backend& be = *src.backend;
  if (be.host_memory()) {
    for (size_t i = 0; i < src.caches.size(); ++i)
      std::memcpy(dst.caches[i].data, src.caches[i].data, src.caches[i].nbytes());
  } else {
    // on the device: one copy op per cache, recorded and submitted as a forward of dst's context
    // after the work that wrote src (one queue), so a beam's clone or reorder neither waits for the
    // GPU nor passes the caches through the host
    const Emitter e(*dispatcher_, dst.ctx());
    be.begin_forward(e.ctx());
    for (size_t i = 0; i < src.caches.size(); ++i)
      e.run(make_op(OpKind::Copy, "whisper.session_copy"), {src.caches[i]}, {&dst.caches[i]});
    be.end_forward(e.ctx());
  }
  dst.cross = src.cross;
  dst.reset_kv_cache();
  dst.advance(src.position());
}

void Whisper::forward_chunk(Conversation& base, const int32_t* ids, int64_t T, bool all_logits, float* logits) {
  auto& conv = static_cast<WhisperConversation&>(base);
  if (!conv.cross)
    throw_invalid_config("conversation", "the whisper session has no encoder output: call start(encoder_output) first");
  check_forward_args(conv, ids, T, plan_.vocab);
  const Segment seg{&conv, 0, T};
  forward_rows(&seg, 1, ids, T, all_logits, logits);
}

std::vector<Whisper::Segment> Whisper::step_segments(Conversation* const* convs, int64_t n) const {
  std::vector<Segment> segs = one_row_segments<WhisperConversation>(convs, n);
  for (int64_t i = 0; i < n; ++i)
    if (!segs[static_cast<size_t>(i)].conv->cross)
      throw_invalid_config("conversations", "whisper session " + std::to_string(i) +
                                                " has no encoder output: call start(encoder_output) first");
  return segs;
}

void Whisper::forward_batch_step(Conversation* const* convs, const int32_t* ids, int64_t n, float* logits) {
  const std::vector<Segment> segs = step_segments(convs, n);
  forward_rows(segs.data(), segs.size(), ids, n, true, logits);
}

void Whisper::forward_batch_step_beam(Conversation* const* convs, const int32_t* ids, int64_t n, const BeamRow* p,
                                      const BeamSpec& spec, float* score, int32_t* token, int64_t* first_nonfinite) {
  const std::vector<Segment> segs = step_segments(convs, n);
  const BeamOut beam{p, &spec, score, token, first_nonfinite};
  forward_rows(segs.data(), segs.size(), ids, n, true, nullptr, &beam);
}

void Whisper::self_attend(const Emitter& e, const Segment* segs, size_t nseg, size_t l, const Tensor& q,
                          const Tensor& k, const Tensor& v, const Tensor& att) const {
  const Block& L_ = dec_[l];
  const AttnHeads heads = heads_of(plan_.d, plan_.dec_heads);
  for (size_t si = 0; si < nseg; ++si) {  // position-dependent work, per session
    const Segment& sg = segs[si];
    const int64_t pos0 = sg.conv->position();
    Tensor& kc = sg.conv->caches[2 * l];
    Tensor& vc = sg.conv->caches[2 * l + 1];
    const Tensor qs = q.rows(sg.row0, sg.n), ks = k.rows(sg.row0, sg.n), vs = v.rows(sg.row0, sg.n);
    Tensor as = att.rows(sg.row0, sg.n);
    e.kv_write(ks, &kc, pos0, heads.n_kv_heads, heads.head_dim, L_.lkv.c_str());
    e.kv_write(vs, &vc, pos0, heads.n_kv_heads, heads.head_dim, L_.lkv.c_str());
    e.attention(qs, kc, vc, pos0, heads, &as, L_.self.la.c_str());
  }
}

void Whisper::cross_attend(const Emitter& e, const Segment* segs, const std::vector<std::pair<size_t, size_t>>& runs,
                           const std::vector<Tensor>& cmasks, size_t l, const Tensor& q, const Tensor& att) const {
  const char* label = dec_[l].cross.la.c_str();
  const int64_t d = plan_.d, H = plan_.dec_heads, hd = d / H;
  const AttnHeads heads = heads_of(d, H);
  for (size_t ri = 0; ri < runs.size(); ++ri) {  // no mask between queries: the rows of a run are one query block
    const Segment &s0 = segs[runs[ri].first], &s1 = segs[runs[ri].second - 1];
    bool one_row = true;
    for (size_t si = runs[ri].first; si < runs[ri].second; ++si) one_row = one_row && segs[si].n == 1;
    const int64_t nr = static_cast<int64_t>(runs[ri].second - runs[ri].first);
    if (one_row && nr > 1 && e.backend().host_memory()) {
      // one-token rows of sessions sharing this K/V (a beam's clones): one attention call with
      // the rows' heads as query heads grouped per K/V head (query head h * nr + i = row i's
      // head h), so each head's keys and values are read once for all rows, not once per row
      const int64_t r0 = s0.row0;
      Tensor qg = e.frame(Shape{1, nr * d}), ag = e.frame(Shape{1, nr * d});
      for (int64_t i = 0; i < nr; ++i)
        for (int64_t h = 0; h < H; ++h)
          std::memcpy(qg.f32() + (h * nr + i) * hd, q.f32() + (r0 + i) * d + h * hd,
                      static_cast<size_t>(hd) * sizeof(float));
      const CrossKV& kv = *s0.conv->cross;
      AttnHeads grouped = heads;
      grouped.n_heads = static_cast<int>(H * nr);
      e.attention(qg, kv.kh[l], kv.vh[l], plan_.S - 1, grouped, &ag, label);
      for (int64_t i = 0; i < nr; ++i)
        for (int64_t h = 0; h < H; ++h)
          std::memcpy(att.f32() + (r0 + i) * d + h * hd, ag.f32() + (h * nr + i) * hd,
                      static_cast<size_t>(hd) * sizeof(float));
      continue;
    }
    if (one_row) {
      // one-token rows: the attention op at position S - 1 sees all S keys of the head-major copy
      for (size_t si = runs[ri].first; si < runs[ri].second; ++si) {
        const CrossKV& kv = *segs[si].conv->cross;
        const Tensor qs = q.rows(segs[si].row0, 1);
        Tensor as = att.rows(segs[si].row0, 1);
        e.attention(qs, kv.kh[l], kv.vh[l], plan_.S - 1, heads, &as, label);
      }
      continue;
    }
    const int64_t r0 = s0.row0, rn = s1.row0 + s1.n - s0.row0;
    const CrossKV& kv = *s0.conv->cross;
    const Tensor qs = q.rows(r0, rn);
    Tensor as = att.rows(r0, rn);
    e.encoder_attention(qs, kv.k[l], kv.v[l], cmasks[ri], heads, &as, label);
  }
}

void Whisper::forward_rows(const Segment* segs, size_t nseg, const int32_t* ids, int64_t T, bool all_logits,
                           float* logits, const BeamOut* beam) {
  // Frames come from the first session's context (every session of the step is held by the
  // caller); self caches, positions and cross K/V are each segment's own.
  const Emitter e(*dispatcher_, segs[0].conv->ctx());
  Backend& be = e.backend();
  ExecContext& ctx = e.ctx();
  be.begin_forward(ctx);
  const float eps = plan_.eps;
  const int64_t d = plan_.d, I = plan_.dec_ffn;
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (size_t si = 0; si < nseg; ++si)
    for (int64_t t = 0; t < segs[si].n; ++t)
      pos[static_cast<size_t>(segs[si].row0 + t)] = static_cast<int32_t>(segs[si].conv->position() + t);
  // runs of consecutive segments over the same cross K/V: [first segment, end segment)
  std::vector<std::pair<size_t, size_t>> runs;
  for (size_t si = 0; si < nseg; ++si) {
    if (runs.empty() || segs[runs.back().first].conv->cross != segs[si].conv->cross) runs.push_back({si, si + 1});
    else runs.back().second = si + 1;
  }
  std::vector<Tensor> cmasks;
  for (const auto& r : runs) cmasks.push_back(host_i32(segs[r.first].conv->cross->mask.data(), Shape{1, plan_.S}));
  Tensor x = e.frame(Shape{T, d}), e2 = e.frame(Shape{T, d});
  {
    Tensor e1 = e.frame(Shape{T, d});
    Op op = make_op(OpKind::Embedding, "decoder.embed_tokens");
    op.a.scale = static_cast<float>(plan_.embed_scale);
    e.run(op, {host_i32(ids, Shape{T}), tok_}, {&e1});
    e.run(make_op(OpKind::Embedding, "decoder.embed_positions"), {host_i32(pos.data(), Shape{T}), dec_pos_}, {&e2});
    e.run(make_op(OpKind::Add, "decoder.embed"), {e1, e2}, {&x});
  }
  LayerFrames fr;
  Tensor &hn = fr.hn, &q = fr.q, &k = fr.k, &v = fr.v, &att = fr.att, &o = fr.o, &xs = fr.xs;
  fr.take([&](const Shape& sh) { return e.frame(sh); }, T, d, I);
  for (size_t l = 0; l < dec_.size(); ++l) {
    const Block& L_ = dec_[l];
    // masked self-attention over the cache
    const Attn& A = L_.self;
    e.layer_norm(x, A.ln, A.lnb, eps, &hn, A.lln.c_str());
    e.matmul(hn, A.q, A.bq, &q, A.lq.c_str());
    e.matmul(hn, A.k, Tensor{}, &k, A.lk.c_str());
    e.matmul(hn, A.v, A.bv, &v, A.lv.c_str());
    self_attend(e, segs, nseg, l, q, k, v, att);
    e.matmul(att, A.o, A.bo, &o, A.lo.c_str());
    e.run(make_op(OpKind::Add, L_.ladd.c_str()), {x, o}, {&xs});
    // cross-attention over the window's cached K/V
    const Attn& C = L_.cross;
    e.layer_norm(xs, C.ln, C.lnb, eps, &hn, C.lln.c_str());
    e.matmul(hn, C.q, C.bq, &q, C.lq.c_str());
    cross_attend(e, segs, runs, cmasks, l, q, att);
    for (size_t si = 0; si < nseg; ++si)  // cross_attention(): one session, all rows
      if (segs[si].conv->capture)
        capture_cross(*segs[si].conv, l, nseg == 1 ? q : q.rows(segs[si].row0, segs[si].n), segs[si].n,
                      segs[si].conv->position());
    e.matmul(att, C.o, C.bo, &o, C.lo.c_str());
    Tensor xc = e.frame(Shape{T, d});
    e.run(make_op(OpKind::Add, L_.ladd.c_str()), {xs, o}, {&xc});
    Tensor xn = e.frame(Shape{T, d});
    mlp(e, L_, xc, fr, &xn);
    x = xn;
  }
  const int64_t rows = all_logits ? T : 1;
  Tensor hin = e.frame(Shape{T, d});
  e.layer_norm(x, dec_ln_, dec_lnb_, eps, &hin, "decoder.layer_norm");
  if (!all_logits) hin = hin.rows(T - 1, 1);
  Tensor out;
  if (be.host_memory()) {
    out = host_f32(logits, Shape{rows, plan_.vocab});
  } else {
    out = e.frame(Shape{rows, plan_.vocab});
  }
  e.matmul(hin, lm_head_, Tensor{}, &out, "lm_head");
  if (beam) be.beam_rows(out, beam->p, rows, *beam->spec, beam->score, beam->token, beam->first_nonfinite, ctx);
  else if (!be.host_memory()) be.download_f32(out, logits);
  be.end_forward(ctx);
  advance_segments(segs, nseg);
}

void Whisper::capture_cross(WhisperConversation& conv, size_t layer, const Tensor& q, int64_t T, int64_t pos0) {
  const AttnCapture& cap = *conv.capture;
  std::vector<size_t> sel;
  for (size_t i = 0; i < cap.heads->size(); ++i)
    if ((*cap.heads)[i].first == static_cast<int64_t>(layer)) sel.push_back(i);
  if (sel.empty()) return;
  const int64_t d = plan_.d, S = plan_.S, hd = d / plan_.dec_heads, F = cap.n_frames, row0 = pos0 - cap.pos0;
  Backend& be = *dispatcher_->chain().front();
  const Tensor& kt = conv.cross->k[layer];
  std::vector<float> qh, kh;
  const float* qp = static_cast<const float*>(q.data);
  const float* kp = static_cast<const float*>(kt.data);
  if (!be.host_memory()) {  // the device path: q of this chunk and the window's cross K to the host
    qh.resize(static_cast<size_t>(T * d));
    kh.resize(static_cast<size_t>(S * d));
    be.download_f32(q, qh.data());
    be.download_f32(kt, kh.data());
    qp = qh.data();
    kp = kh.data();
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const int64_t rows = static_cast<int64_t>(sel.size()) * T;
  pool_->parallel_for(rows, [&](int64_t begin, int64_t end) {
    std::vector<double> s(static_cast<size_t>(F));
    for (int64_t r = begin; r < end; ++r) {
      const size_t i = sel[static_cast<size_t>(r / T)];
      const int64_t t = r % T, h = (*cap.heads)[i].second;
      const float* qr = qp + t * d + h * hd;
      double mx = -INFINITY;
      for (int64_t f = 0; f < F; ++f) {
        const float* kr = kp + f * d + h * hd;
        double acc = 0.0;
        for (int64_t j = 0; j < hd; ++j) acc += static_cast<double>(qr[j]) * static_cast<double>(kr[j]);
        s[static_cast<size_t>(f)] = acc * scale;
        mx = std::max(mx, acc * scale);
      }
      double sum = 0.0;
      for (int64_t f = 0; f < F; ++f) sum += (s[static_cast<size_t>(f)] = std::exp(s[static_cast<size_t>(f)] - mx));
      float* out = cap.out + (static_cast<int64_t>(i) * cap.T + row0 + t) * F;
      for (int64_t f = 0; f < F; ++f) out[f] = static_cast<float>(s[static_cast<size_t>(f)] / sum);
    }
  });
}

void Whisper::cross_attention(Conversation& base, const int32_t* ids, int64_t T,
                              const std::vector<std::pair<int64_t, int64_t>>& heads, int64_t n_frames, float* logits,
                              float* attn) {
  Conversation::Use use(base);
  auto& conv = static_cast<WhisperConversation&>(base);
  file_->check_unchanged();
  if (!conv.cross)
    throw_invalid_config("conversation", "the whisper session has no encoder output: call start(encoder_output) first");
  check_forward_args(conv, ids, T, plan_.vocab);
  if (n_frames < 1 || n_frames > plan_.S)
    throw_invalid_config("n_frames", "must be in [1, " + std::to_string(plan_.S) + "] (got " +
                                         std::to_string(n_frames) + ")");
  for (const auto& [l, h] : heads)
    if (l < 0 || l >= plan_.dec_layers || h < 0 || h >= plan_.dec_heads)
      throw_invalid_config("alignment_heads", "(" + std::to_string(l) + ", " + std::to_string(h) +
                                                  ") is not a decoder cross-attention head (" +
                                                  std::to_string(plan_.dec_layers) + " layers of " +
                                                  std::to_string(plan_.dec_heads) + " heads)");
  AttnCapture cap;
  cap.heads = &heads;
  cap.n_frames = n_frames;
  cap.T = T;
  cap.pos0 = conv.position();
  cap.out = attn;
  struct Clear {
    WhisperConversation& c;
    ~Clear() { c.capture = nullptr; }
  } clear{conv};
  conv.capture = &cap;
  const int64_t V = plan_.vocab;
  for (int64_t off = 0; off < T;) {
    const int64_t len = std::min(kForwardChunk, T - off);
    const int64_t pos = conv.position();
    {
      auto lock = device_lock(*dispatcher_);
      forward_chunk(conv, ids + off, len, true, logits + off * V);
    }
    for (int64_t i = 0; i < len * V; ++i)
      if (!std::isfinite(logits[off * V + i])) {
        conv.truncate(pos);
        check_finite(logits + off * V, len * V, *file_, "decoder");
      }
    off += len;
  }
}

}  // namespace

std::shared_ptr<Model> make_whisper(std::shared_ptr<ModelFile> file, const LoadOptions& opts) {
  if (opts.backend == "nox") throw_backend_init("nox", "whisper is not supported [nox] (graph-only; no whisper graph)");
  if (!opts.exec_path.empty() && opts.exec_path != "curated")
    throw_invalid_config("exec_path", "whisper runs only the curated path (got '" + opts.exec_path + "')");
  auto m = std::make_shared<Whisper>(parse_config(file->config()));
  m->bind(std::move(file), opts);
  return m;
}

}  // namespace cyb
