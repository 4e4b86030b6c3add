#include "families/encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "core/config_check.h"
#include "core/rope.h"
#include "core/errors.h"
#include "dispatch/op.h"
#include "families/decoder.h"  // config_arch, config_int, config_*_or
#include "families/emit.h"
#include "model/model_base.h"

namespace cyb {

namespace {

// ------------------------------------------------------------------ plan ---

enum class EncKind { Bert, Roberta, DistilBert, ModernBert };
// ModernSeq / ModernToken: ModernBERT's prediction head (dense, act, norm) then the classifier.
enum class Head { None, BertSeq, RobertaSeq, DistilSeq, Token, ModernSeq, ModernToken };

struct EncoderTypeInfo {
  const char* model_type;
  EncKind kind;
};
const EncoderTypeInfo kEncoderTypes[] = {
    {"bert", EncKind::Bert}, {"roberta", EncKind::Roberta}, {"xlm-roberta", EncKind::Roberta},
    {"distilbert", EncKind::DistilBert}, {"modernbert", EncKind::ModernBert}};

const EncoderTypeInfo* find_encoder_type(const std::string& t) {
  for (const EncoderTypeInfo& e : kEncoderTypes)
    if (t == e.model_type) return &e;
  return nullptr;
}

struct EncLayer {
  // bert family: ln1 after attention, ln2 after the ffn (post-norm). ModernBERT (pre-norm):
  // ln1 = attn_norm (absent on layer 0), ln2 = mlp_norm, up = Wi's input half, gate = its gate half.
  Tensor q, bq, k, bk, v, bv, o, bo, ln1, ln1b, up, bup, gate, bgate, down, bdown, ln2, ln2b;
  bool global = true;  // ModernBERT: full attention (else the local window and the local rope)
  std::string label[8];
};
enum Label { kQ, kK, kV, kAttn, kO, kLn1, kFfn, kLn2 };
enum RopeIndex : size_t { kGlobalRope = 0, kLocalRope = 1 };  // ModernBERT's tables in Encoder::rope_
const char* kLabelNames[8] = {"query", "key", "value", "attention", "attention_out", "attention_norm", "ffn",
                              "output_norm"};

struct EncoderPlan {
  std::string type;
  EncKind kind = EncKind::Bert;
  int64_t hidden = 0, n_heads = 0, head_dim = 0, n_layers = 0, intermediate = 0, vocab = 0, max_position = 0;
  int64_t type_vocab = 0;
  int64_t pad_id = 0;
  int64_t pos_offset = 0;  // roberta: padding_idx + 1
  double eps = 1e-12;
  OpKind act = OpKind::Gelu;
  Head head = Head::None;
  int64_t num_labels = 0;
  // ModernBERT
  std::vector<uint8_t> layer_global;
  int64_t window = 0;  // local layers: |t - s| <= window (local_attention / 2)
  double theta_global = 160000.0, theta_local = 10000.0;
  OpKind head_act = OpKind::Gelu;
  int pool_mode = 0;   // classifier_pooling: cls 0, mean 1
};

const char* act_words = "gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu, silu, swish";

OpKind parse_act(const std::string& a) {
  if (a == "gelu") return OpKind::Gelu;
  if (a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_fast") return OpKind::GeluTanh;
  if (a == "relu") return OpKind::Relu;
  if (a == "silu" || a == "swish") return OpKind::Silu;
  throw_invalid_config("architecture.hidden_act", "'" + a + "' is not supported (" + act_words + ")");
}

std::string arch_string_or(const toml::Value& arch, const char* key, const std::string& dflt) {
  const toml::Value* v = arch.find(key);
  if (!v || v->is_null()) return dflt;
  if (!v->is_string()) throw_invalid_config(std::string("architecture.") + key, "must be a string");
  return v->as_string();
}

EncoderPlan parse_encoder_config(const std::string& type, const toml::Value& config) {
  const EncoderTypeInfo* info = find_encoder_type(type);
  if (!info) throw_invalid_config("model_type", "'" + type + "' is not an encoder (" + encoder_model_types() + ")");
  const toml::Value& a = config_arch(config);
  EncoderPlan p;
  p.type = type;
  p.kind = info->kind;
  p.hidden = config_int(a, "hidden_size");
  p.n_heads = config_int(a, "num_attention_heads");
  p.n_layers = config_int(a, "num_hidden_layers");
  p.intermediate = config_int(a, "intermediate_size");
  p.vocab = config_int(a, "vocab_size");
  p.max_position = config_int(a, "max_position_embeddings");
  check_int_range(p.hidden, 1, 1 << 20, "architecture.hidden_size");
  check_int_range(p.n_heads, 1, 1 << 12, "architecture.num_attention_heads");
  check_int_range(p.n_layers, 1, 1 << 12, "architecture.num_hidden_layers");
  check_int_range(p.intermediate, 1, 1 << 22, "architecture.intermediate_size");
  check_int_range(p.vocab, 1, 1 << 24, "architecture.vocab_size");
  check_int_range(p.max_position, 1, 1 << 24, "architecture.max_position_embeddings");
  if (p.hidden % p.n_heads != 0)
    throw_invalid_config("architecture.num_attention_heads", "hidden_size " + std::to_string(p.hidden) +
                                                                 " is not a multiple of num_attention_heads " +
                                                                 std::to_string(p.n_heads));
  p.head_dim = p.hidden / p.n_heads;
  if (p.kind == EncKind::ModernBert) {
    p.eps = config_float_or(a, "norm_eps", 1e-5);
    check_domain(p.eps, Domain::Positive, "architecture.norm_eps");
    const std::string act = arch_string_or(a, "hidden_activation", "gelu");
    if (act != "gelu" && act != "gelu_pytorch_tanh" && act != "gelu_new")
      throw_invalid_config("architecture.hidden_activation", "'" + act + "' is not supported (gelu, gelu_pytorch_tanh)");
    p.act = act == "gelu" ? OpKind::Gelu : OpKind::GeluTanh;
    p.head_act = parse_act(arch_string_or(a, "classifier_activation", "gelu"));
    const std::string pool = arch_string_or(a, "classifier_pooling", "cls");
    if (pool != "cls" && pool != "mean")
      throw_invalid_config("architecture.classifier_pooling", "must be \"cls\" or \"mean\", got '" + pool + "'");
    p.pool_mode = pool == "cls" ? 0 : 1;
    p.theta_global = config_float_or(a, "global_rope_theta", config_float_or(a, "rope_theta", 160000.0));
    p.theta_local = config_float_or(a, "local_rope_theta", config_float_or(a, "rope_local_base_freq", 10000.0));
    check_domain(p.theta_global, Domain::Positive, "architecture.global_rope_theta");
    check_domain(p.theta_local, Domain::Positive, "architecture.local_rope_theta");
    if (p.head_dim % 2) throw_invalid_config("architecture.num_attention_heads", "head_dim must be even (RoPE)");
    const int64_t local = config_int_or(a, "local_attention", 128);
    p.window = config_int_or(a, "sliding_window", local / 2);
    if (p.window <= 0) throw_invalid_config("architecture.local_attention", "must be a positive integer");
    p.layer_global.assign(static_cast<size_t>(p.n_layers), 1);
    if (const toml::Value* lt = a.find("layer_types"); lt && lt->is_array()) {
      if (static_cast<int64_t>(lt->as_array().size()) != p.n_layers)
        throw_invalid_config("architecture.layer_types", "must have one entry per layer");
      for (size_t i = 0; i < lt->as_array().size(); ++i) {
        const toml::Value& v = lt->as_array()[i];
        if (!v.is_string() || (v.as_string() != "full_attention" && v.as_string() != "sliding_attention"))
          throw_invalid_config("architecture.layer_types", "entries must be \"full_attention\" or \"sliding_attention\"");
        p.layer_global[i] = v.as_string() == "full_attention";
      }
    } else {
      const int64_t every = config_int_or(a, "global_attn_every_n_layers", 3);
      check_int_range(every, 1, 1 << 12, "architecture.global_attn_every_n_layers");
      for (int64_t l = 0; l < p.n_layers; ++l) p.layer_global[static_cast<size_t>(l)] = l % every == 0;
    }
    p.pad_id = config_int_or(a, "pad_token_id", 0);
    return p;
  }
  const std::string pos_type = arch_string_or(a, "position_embedding_type", "absolute");
  if (pos_type != "absolute")
    throw_invalid_config("architecture.position_embedding_type",
                         "'" + pos_type + "' is not supported (absolute position embeddings only)");
  p.type_vocab = p.kind == EncKind::DistilBert ? 0 : config_int_or(a, "type_vocab_size", 2);
  check_int_range(p.type_vocab, 0, 1 << 16, "architecture.type_vocab_size");
  p.pad_id = config_int_or(a, "pad_token_id", p.kind == EncKind::Roberta ? 1 : 0);
  if (p.kind == EncKind::Roberta) {
    check_int_range(p.pad_id, 0, p.vocab - 1, "architecture.pad_token_id");
    p.pos_offset = p.pad_id + 1;
    if (p.pos_offset >= p.max_position)
      throw_invalid_config("architecture.max_position_embeddings",
                           "must exceed pad_token_id + 1 = " + std::to_string(p.pos_offset) + " (roberta positions)");
  }
  // DistilBERT's LayerNorm eps is fixed at 1e-12 in transformers.
  p.eps = p.kind == EncKind::DistilBert ? 1e-12 : config_float_or(a, "layer_norm_eps", 1e-12);
  check_domain(p.eps, Domain::Positive, "architecture.layer_norm_eps");
  p.act = parse_act(arch_string_or(a, "hidden_act", arch_string_or(a, "activation", "gelu")));
  return p;
}

// The file's tensor names: with or without the base model's prefix.
class Names {
 public:
  Names(const ModelFile& f, EncKind kind) : f_(f) {
    const char* cands[] = {"", "bert.", "roberta.", "distilbert.", "model."};
    const std::string probe = kind == EncKind::ModernBert ? "embeddings.tok_embeddings.weight"
                                                          : "embeddings.word_embeddings.weight";
    for (const char* c : cands)
      if (f_.find(std::string(c) + probe)) {
        prefix_ = c;
        return;
      }
    prefix_ = kind == EncKind::Bert         ? "bert."
              : kind == EncKind::Roberta    ? "roberta."
              : kind == EncKind::DistilBert ? "distilbert."
                                            : "model.";
  }
  // The base model's tensor `n` (prefixed when the file prefixes them).
  std::string base(const std::string& n) const { return prefix_ + n; }
  bool has(const std::string& n) const { return f_.find(n) != nullptr; }
  // A head tensor: as written (classifier.*), or under the prefix.
  std::string head(const std::string& n) const { return has(n) || !has(prefix_ + n) ? n : prefix_ + n; }

 private:
  const ModelFile& f_;
  std::string prefix_;
};

// ----------------------------------------------------------------- model ---

struct EncoderInputs;
// One layer's attention frames, reused by every layer: q..att in the padded [B*T] layout, qr..attr
// the rows [N] (the same tensors when the rows are not packed).
struct LayerFrames {
  Tensor q, k, v, att, qr, kr, vr, attr;
};

class Encoder : public Model {
 public:
  explicit Encoder(EncoderPlan plan) : plan_(std::move(plan)) {}

  void bind(std::shared_ptr<ModelFile> file, const LoadOptions& opts) {
    file_ = std::move(file);
    opts_ = opts;
    binder_.reset(file_.get());
    bind_weights();
    init_model_runtime(opts, opts.threads, &pool_, &dispatcher_);
    reserve_weight_cache();
  }

  const std::string& family() const override { return plan_.type; }
  int64_t vocab_size() const override { return plan_.vocab; }
  int64_t max_position() const override { return plan_.max_position - plan_.pos_offset; }
  bool is_encoder() const override { return true; }
  int64_t hidden_size() const override { return plan_.hidden; }
  int64_t num_labels() const override { return plan_.num_labels; }

 protected:
  void forward_chunk(Conversation&, const int32_t*, int64_t, bool, float*) override { no_conversations(); }
  std::unique_ptr<Conversation> make_conversation(int64_t) override { no_conversations(); }
  void encode_batch(const EncoderBatch& b, const EncoderRequest& req, float* out) override;

 private:
  [[noreturn]] void no_conversations() const {
    throw_invalid_config("architecture.model_type",
                         "'" + plan_.type + "' is an encoder: it has no conversations or logits over a vocabulary "
                         "(use encode / embed / classify)");
  }
  Tensor w(const std::string& name, std::vector<int64_t> shape) {
    return binder_.weight(name, plan_.type + " encoder", &shape);
  }
  Tensor vec(const std::string& name, int64_t n) { return binder_.vector_f32(name, n, plan_.type + " encoder"); }
  Tensor vec_opt(const std::string& name, int64_t n) {
    return binder_.vector_f32(name, n, plan_.type + " encoder", /*required=*/false);
  }
  void bind_weights();
  void bind_modernbert();
  // What the primary backend keeps in wcache_ (its own layout of the matmul weights, e.g. the
  // cpu amx level's bf16 panels, the other x86 levels' f32 panels: Backend::weight_cache_bytes), charged
  // to the budget here.
  void reserve_weight_cache();
  void check_batch(const EncoderBatch& b) const;
  // encode_batch's parts: the host inputs, the embeddings (and their norm), the layers (x in
  // place), the requested output (n_out values).
  void prepare_inputs(const EncoderBatch& b, const EncoderRequest& req, EncoderInputs& in) const;
  Tensor embed(const Emitter& e, const EncoderInputs& in) const;
  void run_layers(const Emitter& e, const EncoderInputs& in, Tensor& x) const;
  // f.attr = attention(h Wq, h Wk, h Wv) of layer L (RoPE first for ModernBERT)
  void attend(const Emitter& e, const EncoderInputs& in, const EncLayer& L, const Tensor& h, LayerFrames& f) const;
  Tensor outputs(const Emitter& e, const EncoderInputs& in, const EncoderRequest& req, const Tensor& x,
                 int64_t* n_out) const;

  EncoderPlan plan_;
  WeightBinder binder_;
  Tensor word_, pos_, types_, emb_ln_, emb_lnb_;
  std::vector<EncLayer> layers_;
  Tensor head_dense_, head_dense_b_, head_out_, head_out_b_;
  Tensor final_norm_, final_norm_b_, head_norm_, head_norm_b_;  // ModernBERT
  // ModernBERT's RoPE tables (kGlobalRope, kLocalRope: global and local theta),
  // max_position_embeddings rows, built at load.
  RopeCache rope_;
  WeightCache wcache_;
  // A device backend's context (its frame buffers, bind groups, uniform arenas and read-back
  // buffers), kept from one encode call to the next of the same shape (batch, length, rows) so
  // that repeated calls record into the buffers of the last one; a call of another shape replaces
  // it (one shape's buffers held at a time), a call while another runs takes a fresh one. Host
  // backends get a fresh context per call.
  std::mutex ctx_mu_;
  std::unique_ptr<ExecContext> ctx_;
  int64_t ctx_shape_[3] = {-1, -1, -1};
};

void Encoder::reserve_weight_cache() {
  const Backend& be = *dispatcher_->chain().front();
  int64_t bytes = 0;
  auto add = [&](const Tensor& t) { bytes += be.weight_cache_bytes(t, opts_.precise); };
  for (const EncLayer& L : layers_)
    for (const Tensor* t : {&L.q, &L.k, &L.v, &L.o, &L.up, &L.gate, &L.down}) add(*t);
  add(head_dense_);
  add(head_out_);
  if (bytes > 0)
    reserve_memory(bytes, std::string("the weight cache of the ") + be.name() + " backend (its layout of the matmul weights)");
}

void Encoder::bind_modernbert() {
  const EncoderPlan& p = plan_;
  const Names n(*file_, p.kind);
  const int64_t H = p.hidden, I = p.intermediate;
  word_ = w(n.base("embeddings.tok_embeddings.weight"), {p.vocab, H});
  emb_ln_ = vec(n.base("embeddings.norm.weight"), H);
  emb_lnb_ = vec_opt(n.base("embeddings.norm.bias"), H);
  final_norm_ = vec(n.base("final_norm.weight"), H);
  final_norm_b_ = vec_opt(n.base("final_norm.bias"), H);
  layers_.resize(static_cast<size_t>(p.n_layers));
  for (int64_t l = 0; l < p.n_layers; ++l) {
    EncLayer& L = layers_[static_cast<size_t>(l)];
    const std::string s = std::to_string(l), b = n.base("layers." + s + ".");
    const Tensor qkv = w(b + "attn.Wqkv.weight", {3 * H, H});
    L.q = qkv.rows(0, H);
    L.k = qkv.rows(H, H);
    L.v = qkv.rows(2 * H, H);
    if (n.has(b + "attn.Wqkv.bias")) {
      const Tensor bqkv = vec(b + "attn.Wqkv.bias", 3 * H);
      for (Tensor* t : {&L.bq, &L.bk, &L.bv}) {
        *t = bqkv;
        t->shape = Shape{H};
      }
      L.bk.data = bqkv.f32() + H;
      L.bv.data = bqkv.f32() + 2 * H;
    }
    L.o = w(b + "attn.Wo.weight", {H, H});
    L.bo = vec_opt(b + "attn.Wo.bias", H);
    if (l > 0) {  // layer 0 has no attn_norm (nn.Identity)
      L.ln1 = vec(b + "attn_norm.weight", H);
      L.ln1b = vec_opt(b + "attn_norm.bias", H);
    }
    L.ln2 = vec(b + "mlp_norm.weight", H);
    L.ln2b = vec_opt(b + "mlp_norm.bias", H);
    const Tensor wi = w(b + "mlp.Wi.weight", {2 * I, H});
    L.up = wi.rows(0, I);
    L.gate = wi.rows(I, I);
    if (n.has(b + "mlp.Wi.bias")) {
      const Tensor bi = vec(b + "mlp.Wi.bias", 2 * I);
      L.bup = bi;
      L.bup.shape = Shape{I};
      L.bgate = L.bup;
      L.bgate.data = bi.f32() + I;
    }
    L.down = w(b + "mlp.Wo.weight", {H, I});
    L.bdown = vec_opt(b + "mlp.Wo.bias", H);
    L.global = p.layer_global[static_cast<size_t>(l)] != 0;
    for (int i = 0; i < 8; ++i) L.label[i] = "layers." + s + "." + kLabelNames[i];
  }
  std::string arch_name;
  if (const toml::Value* a = config_arch(file_->config()).find("architectures"); a && a->is_array() &&
      !a->as_array().empty() && a->as_array()[0].is_string())
    arch_name = a->as_array()[0].as_string();
  if (n.has(n.head("head.dense.weight")) && n.has(n.head("classifier.weight"))) {
    plan_.head = arch_name.find("ForTokenClassification") != std::string::npos ? Head::ModernToken : Head::ModernSeq;
    head_dense_ = w(n.head("head.dense.weight"), {H, H});
    head_dense_b_ = vec_opt(n.head("head.dense.bias"), H);
    head_norm_ = vec(n.head("head.norm.weight"), H);
    head_norm_b_ = vec_opt(n.head("head.norm.bias"), H);
    const std::string cls = n.head("classifier.weight");
    const TensorEntry* e = file_->find(cls);
    plan_.num_labels = e && e->shape.size() == 2 ? e->shape[0] : 0;
    if (plan_.num_labels <= 0) throw_shape_mismatch(cls, {-1, H}, {});
    head_out_ = w(cls, {plan_.num_labels, H});
    head_out_b_ = vec_opt(n.head("classifier.bias"), plan_.num_labels);
  }
  const int rot = static_cast<int>(p.head_dim);
  rope_.init({{rot, p.theta_global, RopeScaling{}, true}, {rot, p.theta_local, RopeScaling{}, true}}, p.max_position);
  rope_.ensure(p.max_position);
}

void Encoder::bind_weights() {
  if (plan_.kind == EncKind::ModernBert) return bind_modernbert();
  const EncoderPlan& p = plan_;
  const Names n(*file_, p.kind);
  const int64_t H = p.hidden, I = p.intermediate;
  word_ = w(n.base("embeddings.word_embeddings.weight"), {p.vocab, H});
  pos_ = w(n.base("embeddings.position_embeddings.weight"), {p.max_position, H});
  if (p.type_vocab > 0) types_ = w(n.base("embeddings.token_type_embeddings.weight"), {p.type_vocab, H});
  emb_ln_ = vec(n.base("embeddings.LayerNorm.weight"), H);
  emb_lnb_ = vec(n.base("embeddings.LayerNorm.bias"), H);
  layers_.resize(static_cast<size_t>(p.n_layers));
  for (int64_t l = 0; l < p.n_layers; ++l) {
    EncLayer& L = layers_[static_cast<size_t>(l)];
    const std::string s = std::to_string(l);
    // The layer's tensor names (HF spelling): BERT/RoBERTa, then DistilBERT.
    struct LayerNames {
      const char *prefix, *q, *k, *v, *o, *ln1, *up, *down, *ln2;
    };
    static const LayerNames kBert{"encoder.layer.", "attention.self.query", "attention.self.key",
                                  "attention.self.value", "attention.output.dense",
                                  "attention.output.LayerNorm", "intermediate.dense", "output.dense",
                                  "output.LayerNorm"};
    static const LayerNames kDistil{"transformer.layer.", "attention.q_lin", "attention.k_lin",
                                    "attention.v_lin", "attention.out_lin", "sa_layer_norm", "ffn.lin1",
                                    "ffn.lin2", "output_layer_norm"};
    const LayerNames& nm = p.kind == EncKind::DistilBert ? kDistil : kBert;
    const std::string b = n.base(nm.prefix + s + ".");
    auto mat = [&](const char* t, int64_t rows, int64_t cols, Tensor& wt, Tensor& bias) {
      wt = w(b + t + ".weight", {rows, cols});
      bias = vec(b + t + ".bias", rows);
    };
    mat(nm.q, H, H, L.q, L.bq);
    mat(nm.k, H, H, L.k, L.bk);
    mat(nm.v, H, H, L.v, L.bv);
    mat(nm.o, H, H, L.o, L.bo);
    L.ln1 = vec(b + nm.ln1 + ".weight", H);
    L.ln1b = vec(b + nm.ln1 + ".bias", H);
    mat(nm.up, I, H, L.up, L.bup);
    mat(nm.down, H, I, L.down, L.bdown);
    L.ln2 = vec(b + nm.ln2 + ".weight", H);
    L.ln2b = vec(b + nm.ln2 + ".bias", H);
    for (int i = 0; i < 8; ++i) L.label[i] = "layers." + s + "." + kLabelNames[i];
  }
  // The head, from the architecture's name when the file keeps it, else from the tensors.
  std::string arch_name;
  if (const toml::Value* a = config_arch(file_->config()).find("architectures"); a && a->is_array() &&
      !a->as_array().empty() && a->as_array()[0].is_string())
    arch_name = a->as_array()[0].as_string();
  const bool token = arch_name.find("ForTokenClassification") != std::string::npos;
  const bool seq = arch_name.find("ForSequenceClassification") != std::string::npos;
  auto rows_of = [&](const std::string& t) {
    const TensorEntry* e = file_->find(t);
    return e && e->shape.size() == 2 ? e->shape[0] : int64_t(0);
  };
  const std::string cls = n.head("classifier.weight"), out_proj = n.head("classifier.out_proj.weight"),
                    pre = n.head("pre_classifier.weight"), pooler = n.base("pooler.dense.weight");
  Head h = Head::None;
  if (n.has(out_proj) && !token) h = Head::RobertaSeq;
  else if (n.has(pre) && !token) h = Head::DistilSeq;
  else if (n.has(cls)) {
    if (token) h = Head::Token;
    else if (seq || (p.kind == EncKind::Bert && n.has(pooler))) h = p.kind == EncKind::Bert ? Head::BertSeq : Head::Token;
    else h = Head::Token;
  }
  plan_.head = h;
  const std::string ctx = plan_.type + " classification head";
  auto bind_out = [&](const std::string& wname) {
    plan_.num_labels = rows_of(wname);
    if (plan_.num_labels <= 0) throw_shape_mismatch(wname, {-1, H}, {});
    head_out_ = w(wname, {plan_.num_labels, H});
    const std::string bname = wname.substr(0, wname.size() - 6) + "bias";
    head_out_b_ = vec(bname, plan_.num_labels);
  };
  switch (h) {
    case Head::None: break;
    case Head::BertSeq:
      head_dense_ = w(pooler, {H, H});
      head_dense_b_ = vec(n.base("pooler.dense.bias"), H);
      bind_out(cls);
      break;
    case Head::RobertaSeq:
      head_dense_ = w(n.head("classifier.dense.weight"), {H, H});
      head_dense_b_ = vec(n.head("classifier.dense.bias"), H);
      bind_out(out_proj);
      break;
    case Head::DistilSeq:
      head_dense_ = w(pre, {H, H});
      head_dense_b_ = vec(n.head("pre_classifier.bias"), H);
      bind_out(cls);
      break;
    case Head::Token: bind_out(cls); break;
    case Head::ModernSeq:
    case Head::ModernToken: break;  // bind_modernbert
  }
}

void Encoder::check_batch(const EncoderBatch& b) const {
  const int64_t B = b.batch, T = b.len;
  if (B <= 0 || T <= 0) throw_shape_mismatch("encode (ids)", {-1, -1}, {B, T});
  const int64_t max_t = plan_.max_position - plan_.pos_offset;
  if (T > max_t)
    throw_shape_mismatch("encode (sequence length)", {max_t}, {T});
  for (int64_t i = 0; i < B * T; ++i) {
    if (b.ids[i] < 0 || b.ids[i] >= plan_.vocab)
      throw_invalid_config("input_ids", "token id " + std::to_string(b.ids[i]) + " at [" + std::to_string(i / T) +
                                            ", " + std::to_string(i % T) + "] is outside [0, " +
                                            std::to_string(plan_.vocab) + ")");
    if (b.token_types && (b.token_types[i] < 0 || b.token_types[i] >= std::max<int64_t>(plan_.type_vocab, 1)))
      throw_invalid_config("token_type_ids",
                           "token type " + std::to_string(b.token_types[i]) + " is outside [0, " +
                               std::to_string(std::max<int64_t>(plan_.type_vocab, 1)) + ")" +
                               (plan_.type_vocab == 0 ? " ('" + plan_.type + "' has no token types)" : ""));
  }
}

// The host inputs of one encode call (ids, positions, token types, masks) as op inputs. Packed
// rows: for pooled and sequence outputs the padding positions take no part in any matmul, norm or
// activation: the N real tokens are the rows, and attention gathers its q / k / v into the padded
// [B, T] layout of encoder_attention and its output back (embedding ops on the activations).
// Hidden and token outputs keep every position, as the reference computes padding positions too.
struct EncoderInputs {
  int64_t B = 0, T = 0, BT = 0, N = 0;  // N: the rows (BT, or the real tokens when packed)
  bool packed = false;
  // to_row: padded position -> row; to_pos: row -> padded position
  std::vector<int32_t> pos, zeros, to_row, to_pos, ids_p, pos_p, types_p;
  std::vector<float> maskf;
  const int32_t *ids_rows = nullptr, *pos_rows = nullptr, *types = nullptr;  // per row
  Tensor ids_t, to_row_t, to_pos_t, mask_t, maskf_t;
};

void Encoder::prepare_inputs(const EncoderBatch& b, const EncoderRequest& req, EncoderInputs& in) const {
  const int64_t B = b.batch, T = b.len, BT = B * T;
  in.B = B;
  in.T = T;
  in.BT = BT;
  if (plan_.kind != EncKind::ModernBert) {
    in.pos.resize(static_cast<size_t>(BT));
    for (int64_t r = 0; r < B; ++r) {
      if (plan_.kind == EncKind::Roberta) {  // transformers' create_position_ids_from_input_ids
        int32_t c = 0;
        for (int64_t t = 0; t < T; ++t) {
          const bool real = b.ids[r * T + t] != plan_.pad_id;
          c += real ? 1 : 0;
          in.pos[static_cast<size_t>(r * T + t)] = static_cast<int32_t>(real ? c + plan_.pad_id : plan_.pad_id);
        }
      } else {
        for (int64_t t = 0; t < T; ++t) in.pos[static_cast<size_t>(r * T + t)] = static_cast<int32_t>(t);
      }
    }
  }
  const int32_t* types = plan_.type_vocab > 0 ? b.token_types : nullptr;
  if (!types && plan_.type_vocab > 0) {
    in.zeros.assign(static_cast<size_t>(BT), 0);
    types = in.zeros.data();
  }
  in.to_row.resize(static_cast<size_t>(BT));
  for (int64_t i = 0; i < BT; ++i)
    if (b.mask[i] != 0) {
      in.to_row[static_cast<size_t>(i)] = static_cast<int32_t>(in.to_pos.size());
      in.to_pos.push_back(static_cast<int32_t>(i));
    }
  in.packed = (req.what == EncoderOutput::Pooled || req.what == EncoderOutput::SequenceLogits) &&
              !in.to_pos.empty() && static_cast<int64_t>(in.to_pos.size()) < BT;
  const int64_t N = in.packed ? static_cast<int64_t>(in.to_pos.size()) : BT;
  in.N = N;
  auto rows_of = [&](const int32_t* a, std::vector<int32_t>& dst) -> const int32_t* {
    if (!in.packed || !a) return a;
    dst.resize(static_cast<size_t>(N));
    for (int64_t r = 0; r < N; ++r) dst[static_cast<size_t>(r)] = a[in.to_pos[static_cast<size_t>(r)]];
    return dst.data();
  };
  in.ids_rows = rows_of(b.ids, in.ids_p);
  in.pos_rows = rows_of(in.pos.empty() ? nullptr : in.pos.data(), in.pos_p);
  in.types = rows_of(types, in.types_p);
  in.ids_t = host_i32(in.ids_rows, Shape{N});
  in.to_row_t = host_i32(in.to_row.data(), Shape{BT});
  in.to_pos_t = host_i32(in.to_pos.data(), Shape{N});
  in.mask_t = host_i32(b.mask, Shape{B, T});
  in.maskf.resize(static_cast<size_t>(BT));
  for (int64_t i = 0; i < BT; ++i) in.maskf[static_cast<size_t>(i)] = b.mask[i] != 0 ? 1.f : 0.f;
  in.maskf_t = host_f32(in.maskf.data(), Shape{B, T});
}

Tensor Encoder::embed(const Emitter& e, const EncoderInputs& in) const {
  const int64_t N = in.N, H = plan_.hidden;
  const float eps = static_cast<float>(plan_.eps);
  Tensor x = e.frame(Shape{N, H}), em = e.frame(Shape{N, H});
  if (plan_.kind == EncKind::ModernBert) {
    e.run(make_op(OpKind::Embedding, "embeddings.word"), {in.ids_t, word_}, {&em});
  } else {
    Tensor e2 = e.frame(Shape{N, H});
    e.run(make_op(OpKind::Embedding, "embeddings.word"), {in.ids_t, word_}, {&em});
    e.run(make_op(OpKind::Embedding, "embeddings.position"), {host_i32(in.pos_rows, Shape{N}), pos_}, {&e2});
    e.run(make_op(OpKind::Add, "embeddings.add"), {em, e2}, {&x});
    if (in.types) {
      e.run(make_op(OpKind::Embedding, "embeddings.token_type"), {host_i32(in.types, Shape{N}), types_}, {&e2});
      e.run(make_op(OpKind::Add, "embeddings.add"), {x, e2}, {&em});
    } else {
      std::swap(x, em);
    }
  }
  e.layer_norm(em, emb_ln_, emb_lnb_, eps, &x, "embeddings.norm");
  return x;
}

void Encoder::attend(const Emitter& e, const EncoderInputs& in, const EncLayer& L, const Tensor& h,
                     LayerFrames& f) const {
  const bool modern = plan_.kind == EncKind::ModernBert;
  e.matmul(h, L.q, L.bq, &f.qr, L.label[kQ].c_str());
  e.matmul(h, L.k, L.bk, &f.kr, L.label[kK].c_str());
  e.matmul(h, L.v, L.bv, &f.vr, L.label[kV].c_str());
  if (in.packed) {  // rows picked by to_row: an embedding op over the activations
    e.run(make_op(OpKind::Embedding, L.label[kQ].c_str()), {in.to_row_t, f.qr}, {&f.q});
    e.run(make_op(OpKind::Embedding, L.label[kK].c_str()), {in.to_row_t, f.kr}, {&f.k});
    e.run(make_op(OpKind::Embedding, L.label[kV].c_str()), {in.to_row_t, f.vr}, {&f.v});
  }
  const int nh = static_cast<int>(plan_.n_heads), hd = static_cast<int>(plan_.head_dim);
  if (modern) {  // RoPE per sequence (positions 0..T-1 in each)
    const RopeTable* table = rope_.table(L.global ? kGlobalRope : kLocalRope);
    for (int64_t r = 0; r < in.B; ++r)
      for (Tensor* t : {&f.q, &f.k}) {
        Tensor rows = t->rows(r * in.T, in.T);
        e.rope(rows, table, 0, nh, hd, L.label[kQ].c_str());
      }
  }
  AttnHeads heads;
  heads.n_heads = heads.n_kv_heads = nh;
  heads.head_dim = hd;
  heads.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  heads.window = modern && !L.global ? plan_.window : 0;
  e.encoder_attention(f.q, f.k, f.v, in.mask_t, heads, &f.att, L.label[kAttn].c_str());
  if (in.packed) e.run(make_op(OpKind::Embedding, L.label[kAttn].c_str()), {in.to_pos_t, f.att}, {&f.attr});
}

void Encoder::run_layers(const Emitter& e, const EncoderInputs& in, Tensor& x) const {
  const bool modern = plan_.kind == EncKind::ModernBert;
  const int64_t N = in.N, BT = in.BT, H = plan_.hidden, I = plan_.intermediate;
  const float eps = static_cast<float>(plan_.eps);
  // one layer's frames for all layers (every backend runs a forward's ops in the order issued:
  // dispatch/backend.h)
  LayerFrames f;
  f.q = e.frame(Shape{BT, H});
  f.k = e.frame(Shape{BT, H});
  f.v = e.frame(Shape{BT, H});
  f.att = e.frame(Shape{BT, H});
  if (in.packed) {
    f.qr = e.frame(Shape{N, H});
    f.kr = e.frame(Shape{N, H});
    f.vr = e.frame(Shape{N, H});
    f.attr = e.frame(Shape{N, H});
  } else {
    f.qr = f.q, f.kr = f.k, f.vr = f.v, f.attr = f.att;
  }
  Tensor s = e.frame(Shape{N, H}), x1 = e.frame(Shape{N, H}), up = e.frame(Shape{N, I}), gt, act;
  if (modern) {
    gt = e.frame(Shape{N, I});
    act = e.frame(Shape{N, I});
  }
  for (const EncLayer& L : layers_) {
    Tensor xn = x;  // the layer's output, in place of x
    if (modern) {  // pre-norm: x += attn(attn_norm(x)); x += Wo(act(h Wi_in) * (h Wi_gate)), h = mlp_norm(x)
      if (L.ln1.data) e.layer_norm(x, L.ln1, L.ln1b, eps, &x1, L.label[kLn1].c_str());
      attend(e, in, L, L.ln1.data ? x1 : x, f);
      e.matmul_add(f.attr, L.o, L.bo, x, &s, L.label[kO].c_str());
      e.layer_norm(s, L.ln2, L.ln2b, eps, &x1, L.label[kLn2].c_str());
      e.matmul(x1, L.up, L.bup, &up, L.label[kFfn].c_str());
      e.matmul(x1, L.gate, L.bgate, &gt, L.label[kFfn].c_str());
      Op g = make_op(OpKind::GeGlu, L.label[kFfn].c_str());
      g.a.gelu_erf = plan_.act == OpKind::Gelu;
      e.run(g, {up, gt}, {&act});
      e.matmul_add(act, L.down, L.bdown, s, &xn, L.label[kFfn].c_str());
    } else {  // post-norm: x = ln1(x + attn(x)); x = ln2(x + ffn(x))
      attend(e, in, L, x, f);
      e.matmul_add(f.attr, L.o, L.bo, x, &s, L.label[kO].c_str());
      e.layer_norm(s, L.ln1, L.ln1b, eps, &x1, L.label[kLn1].c_str());
      e.matmul_act(x1, L.up, L.bup, plan_.act, &up, L.label[kFfn].c_str());
      e.matmul_add(up, L.down, L.bdown, x1, &s, L.label[kFfn].c_str());
      e.layer_norm(s, L.ln2, L.ln2b, eps, &xn, L.label[kLn2].c_str());
    }
    x = xn;
  }
  if (modern) {
    Tensor xf = e.frame(Shape{N, H});
    e.layer_norm(x, final_norm_, final_norm_b_, eps, &xf, "final_norm");
    x = xf;
  }
  if (in.packed) {  // back to the padded layout for pooling (padding positions: a copy of row 0, masked out)
    Tensor xp = e.frame(Shape{BT, H});
    e.run(make_op(OpKind::Embedding, "pooling"), {in.to_row_t, x}, {&xp});
    x = xp;
  }
}

Tensor Encoder::outputs(const Emitter& e, const EncoderInputs& in, const EncoderRequest& req, const Tensor& x,
                        int64_t* n_out) const {
  const int64_t B = in.B, T = in.T, BT = in.BT, H = plan_.hidden;
  const Head hk = plan_.head;
  const float eps = static_cast<float>(plan_.eps);
  Tensor x3 = x;
  x3.shape = Shape{B, T, H};
  auto pool = [&](int mode, const char* label) {
    Tensor c = e.frame(Shape{B, H});
    Op op = make_op(OpKind::MaskedPool, label);
    op.a.pool_mode = mode;
    e.run(op, {x3, in.maskf_t}, {&c});
    return c;
  };
  // ModernBERT's prediction head: norm(act(dense(h)))
  auto modern_head = [&](const Tensor& h, int64_t rows) {
    Tensor h1 = e.frame(Shape{rows, H}), h2 = e.frame(Shape{rows, H});
    e.matmul(h, head_dense_, head_dense_b_, &h1, "head.dense");
    e.run(make_op(plan_.head_act, "head.act"), {h1}, {&h1});
    e.layer_norm(h1, head_norm_, head_norm_b_, eps, &h2, "head.norm");
    return h2;
  };
  Tensor result;
  switch (req.what) {
    case EncoderOutput::Hidden:
      *n_out = BT * H;
      return x;
    case EncoderOutput::Pooled: {
      result = pool(req.pool_mode, "pooling");
      if (req.normalize) {
        Tensor y = e.frame(Shape{B, H});
        Op op = make_op(OpKind::L2Normalize, "normalize");
        op.a.eps = 1e-12f;
        e.run(op, {result}, {&y});
        result = y;
      }
      *n_out = B * H;
      return result;
    }
    case EncoderOutput::SequenceLogits: {
      Tensor h1;
      if (hk == Head::ModernSeq) {
        h1 = modern_head(pool(plan_.pool_mode, "head.pool"), B);
      } else {
        const Tensor c = pool(0, "head.cls");
        h1 = e.frame(Shape{B, H});
        e.matmul(c, head_dense_, head_dense_b_, &h1, "head.dense");
        if (hk == Head::DistilSeq) {
          e.run(make_op(OpKind::Relu, "head.act"), {h1}, {&h1});
        } else {
          Op op = make_op(OpKind::Softcap, "head.act");  // 1 * tanh(x / 1): tanh
          op.a.softcap = 1.f;
          e.run(op, {h1}, {&h1});
        }
      }
      result = e.frame(Shape{B, plan_.num_labels});
      e.matmul(h1, head_out_, head_out_b_, &result, "head.out");
      *n_out = B * plan_.num_labels;
      return result;
    }
    case EncoderOutput::TokenLogits:
      result = e.frame(Shape{BT, plan_.num_labels});
      e.matmul(hk == Head::ModernToken ? modern_head(x, BT) : x, head_out_, head_out_b_, &result, "head.out");
      *n_out = BT * plan_.num_labels;
      return result;
  }
  *n_out = 0;
  return result;
}

void Encoder::encode_batch(const EncoderBatch& b, const EncoderRequest& req, float* out) {
  check_batch(b);
  const Head hk = plan_.head;
  const bool seq_head = hk == Head::BertSeq || hk == Head::RobertaSeq || hk == Head::DistilSeq || hk == Head::ModernSeq;
  const bool tok_head = hk == Head::Token || hk == Head::ModernToken;
  if ((req.what == EncoderOutput::SequenceLogits || req.what == EncoderOutput::TokenLogits) && hk == Head::None)
    throw_invalid_config("architecture.architectures", "'" + plan_.type + "' model has no classification head");
  if (req.what == EncoderOutput::SequenceLogits && !seq_head)
    throw_invalid_config("architecture.architectures",
                         "the model has a token classification head: use classify_tokens");
  if (req.what == EncoderOutput::TokenLogits && !tok_head)
    throw_invalid_config("architecture.architectures",
                         "the model has a sequence classification head: use classify");
  if (req.what == EncoderOutput::Pooled && (req.pool_mode < 0 || req.pool_mode > 2))
    throw_invalid_config("pooling", "must be cls, mean or max");
  const int64_t B = b.batch, T = b.len, BT = B * T, H = plan_.hidden, I = plan_.intermediate;
  {  // what this call allocates (activations of one layer, reused by every layer; host inputs)
    const int64_t bytes = 4 * (BT * (5 * H + 8 * H + 3 * I) + 3 * BT) +
                          4 * std::max<int64_t>(plan_.num_labels, 1) * BT;
    check_memory_budget(opts_.max_memory, charged_bytes(), bytes,
                        "encode(batch=" + std::to_string(B) + ", length=" + std::to_string(T) + "): activations");
  }
  EncoderInputs in;  // host inputs of the ops, sized per call
  prepare_inputs(b, req, in);

  std::unique_lock<std::mutex> lk(ctx_mu_, std::defer_lock);
  std::unique_ptr<ExecContext> own;
  ExecContext* ctxp = nullptr;
  if (!dispatcher_->chain().front()->host_memory() && lk.try_lock()) {
    const int64_t shape[3] = {in.B, in.T, in.N};
    if (!ctx_ || !std::equal(shape, shape + 3, ctx_shape_)) {
      ctx_.reset();  // the last shape's buffers go first
      ctx_ = std::make_unique<ExecContext>(pool_.get(), opts_.precise);
      std::copy(shape, shape + 3, ctx_shape_);
    }
    ctxp = ctx_.get();
  } else {
    own = std::make_unique<ExecContext>(pool_.get(), opts_.precise);
    ctxp = own.get();
  }
  ExecContext& ctx = *ctxp;
  ctx.set_weight_cache(&wcache_);
  const Emitter e(*dispatcher_, ctx);
  Backend& be = e.backend();
  be.begin_forward(ctx);
  Tensor x = embed(e, in);
  run_layers(e, in, x);
  int64_t n_out = 0;
  const Tensor result = outputs(e, in, req, x, &n_out);
  if (be.host_memory()) std::memcpy(out, result.data, static_cast<size_t>(n_out) * sizeof(float));
  else be.download_f32(result, out);
  be.end_forward(ctx);
  bool finite = true;
  for (int64_t i = 0; i < n_out; ++i) finite = finite && std::isfinite(out[i]);
  if (!finite) {
    file_->check_unchanged();
    throw_format("weights", "", "the encoder produced non-finite values: the weights of '" + file_->path() +
                                    "' hold non-finite values (overwritten or corrupted since load?)");
  }
}

}  // namespace

bool is_encoder_model_type(const std::string& model_type) { return find_encoder_type(model_type) != nullptr; }

std::string encoder_model_types() {
  std::string s;
  for (const EncoderTypeInfo& e : kEncoderTypes) s += (s.empty() ? "" : ", ") + std::string(e.model_type);
  return s;
}

std::shared_ptr<Model> make_encoder(std::shared_ptr<ModelFile> file, const LoadOptions& opts) {
  const toml::Value* mt = file->config().find("model_type");
  const std::string type = mt && mt->is_string() ? mt->as_string() : "";
  if (opts.backend == "nox")
    throw_backend_init("nox", "'" + type + "' encoders are not supported [nox] (graph-only; the graph has no encoder)");
  if (!opts.exec_path.empty() && opts.exec_path != "curated")
    throw_invalid_config("exec_path", "'" + type + "' encoders run only the curated path (got '" + opts.exec_path + "')");
  auto m = std::make_shared<Encoder>(parse_encoder_config(type, file->config()));
  m->bind(std::move(file), opts);
  return m;
}

}  // namespace cyb
