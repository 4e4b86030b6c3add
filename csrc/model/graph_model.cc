#include "model/graph_model.h"

#include <mutex>

#include "backends/nox/nox_backend.h"
#include "core/errors.h"
#include "graph/executor.h"
#include "model/model_base.h"
#include "model/nox_tracer.h"

namespace cyb {

namespace {

graph::WeightLookup weight_lookup(const ModelFile& f) {
  return [&f](const std::string& name, graph::WeightInfo* info) {
    const TensorEntry* e = f.find(name);
    if (!e) return false;
    info->dtype = e->dtype;
    info->shape = e->shape;
    return true;
  };
}

// Whether the keys any attention reads carry a bias: from each attention's key cache back
// through its kv_write and the rope / reshape / norm before it to the projection, which has
// a bias input (Qwen2's attention bias). Such graphs get an f32 KV cache in fast mode too, as
// the curated decoder does (docs/runtime.md, "Tolerances").
bool keys_have_bias(const graph::Graph& g) {
  for (const graph::Node& a : g.nodes) {
    if (a.kind != OpKind::Attention || a.inputs.size() < 2) continue;
    const int kc = a.inputs[1];
    for (const graph::Node& w : g.nodes) {
      if (w.kind != OpKind::KvWrite || w.outputs.empty() || w.outputs[0] != kc || w.inputs.empty()) continue;
      int v = w.inputs[0];
      for (int hops = 0; hops < 16 && v >= 0; ++hops) {
        const int p = g.values[static_cast<size_t>(v)].producer;
        if (g.values[static_cast<size_t>(v)].kind != graph::ValueKind::Node || p < 0) break;
        const graph::Node& n = g.nodes[static_cast<size_t>(p)];
        if (n.kind == OpKind::Matmul) {
          if (n.inputs.size() >= 3) return true;
          break;
        }
        if (n.kind == OpKind::FusedNormMatmul) {
          if (n.inputs.size() >= 4) return true;
          break;
        }
        if (n.kind == OpKind::FusedQkv) {
          if (n.inputs.size() >= 6) return true;
          break;
        }
        if (n.kind != OpKind::Rope && n.kind != OpKind::Reshape && n.kind != OpKind::RmsNorm &&
            n.kind != OpKind::Copy)
          break;
        v = n.inputs.empty() ? -1 : n.inputs[0];
      }
    }
  }
  return false;
}

class GraphConversation : public Conversation {
 public:
  GraphConversation(ThreadPool* pool, bool precise, int64_t max_ctx, NoxWeightDigests* wd)
      : Conversation(pool, precise, max_ctx), tracer(wd) {}
  std::unique_ptr<graph::ExecState> st;
  NoxTracer tracer;
};

class GraphModel : public Model {
 public:
  const std::string& family() const override { return family_; }
  int64_t vocab_size() const override { return exec_->vocab(); }
  int64_t max_position() const override { return max_pos_; }
  std::string execution_path() const override { return "graph"; }
  std::string fusion_report() const override { return exec_->fusion_report().text(); }
  std::vector<std::pair<std::string, std::string>> fusion_entries() const override {
    std::vector<std::pair<std::string, std::string>> r;
    for (const auto& e : exec_->fusion_report().fused) r.push_back({e.pattern, e.node});
    return r;
  }
  std::string last_digest() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return digest_;
  }
  std::string graph_origin() const override { return origin_; }

  // The memory budget (docs/errors.md): the KV caches the graph declares, the RoPE table
  // growth, and the frame pool's intermediates (estimated as for the curated path: a few rows
  // of the widest state per token of a forward chunk).
  int64_t conversation_bytes(int64_t max_context) const override {
    const DType cache = (opts_.precise || nox_ || key_bias_) ? DType::F32 : DType::F16;
    const int64_t T = std::min(max_context, forward_chunk_tokens());
    return exec_->state_bytes(max_context, cache) + exec_->rope_growth_bytes(max_context) +
           T * exec_->vocab() * 4;
  }

  std::unique_ptr<Conversation> make_conversation(int64_t max_context) override {
    check_max_context(max_context, max_pos_);
    auto c = std::make_unique<GraphConversation>(pool_.get(), opts_.precise || nox_, max_context, &wdig_);
    const DType cache = (opts_.precise || nox_ || key_bias_) ? DType::F32 : DType::F16;
    c->st = exec_->new_state(*dispatcher_->chain().front(), max_context, cache);
    return c;
  }

  int64_t input_vocab() const override { return graph_vocab_in_; }
  void forward_chunk(Conversation& base, const int32_t* ids, int64_t T, bool all_logits, float* logits) override {
    auto& conv = static_cast<GraphConversation&>(base);
    const int64_t pos0 = conv.position();
    check_forward_args(conv, ids, T, graph_vocab_in_);
    exec_->forward(*conv.st, conv.ctx(), *dispatcher_, ids, T, pos0, conv.max_context(), all_logits, logits,
                   nox_ ? &conv.tracer : nullptr);
    conv.advance(T);
    if (nox_) {
      std::lock_guard<std::mutex> lk(mu_);
      digest_ = conv.tracer.hex();
    }
  }

  void build(std::shared_ptr<ModelFile> file, const LoadOptions& opts, graph::Graph* built, const std::string* text,
             const std::string& origin) {
    file_ = std::move(file);
    opts_ = opts;
    origin_ = origin;
    nox_ = opts.backend == "nox";
    const toml::Value* mt = file_->config().find("model_type");
    family_ = mt && mt->is_string() ? mt->as_string() : "graph";
    init_model_runtime(opts, nox_ ? 1 : opts.threads, &pool_, &dispatcher_);
    binder_.reset(file_.get());

    graph::Graph g = built ? std::move(*built) : graph::parse_graph_text(*text, weight_lookup(*file_));
    // the vocabulary the embedding reads (token ids are checked against it)
    graph_vocab_in_ = 0;
    for (const graph::Node& n : g.nodes)
      if (n.kind == OpKind::Embedding) graph_vocab_in_ = g.values[static_cast<size_t>(n.inputs[1])].shape[0].c;
    if (graph_vocab_in_ == 0) graph_vocab_in_ = int64_t(1) << 31;

    key_bias_ = keys_have_bias(g);  // before fusion: the projections as written
    Backend& primary = *dispatcher_->chain().front();
    graph::FusionReport rep;
    if (opts.fuse) {
      rep = graph::fuse(g, primary);
    } else {
      rep.enabled = false;
    }
    if (nox_)
      for (const graph::Node& n : g.nodes)
        if (n.kind != OpKind::Reshape && n.kind != OpKind::LastRows && !nox_supports(n.kind))
          throw_unsupported_op(std::string(op_name(n.kind)) + " (graph node '" + n.name + "')", "nox", "f32");

    auto weight = [this](const graph::Value& v) { return bind_weight(v); };
    auto rope = [this](const graph::RopeSpec& r, std::vector<float>& c, std::vector<float>& s) {
      if (nox_) nox_build_rope_table(r.rot_dims, r.max_pos, r.theta, r.scaling, c, s);
      else build_rope_table(r.rot_dims, r.max_pos, r.theta, r.scaling, c, s);
    };
    exec_ = std::make_unique<graph::Executor>(std::move(g), std::move(rep), weight, rope);
    max_pos_ = exec_->max_position();
    if (const toml::Value* arch = file_->config().find("architecture"))
      if (const toml::Value* mp = arch->find("max_position_embeddings"); mp && mp->is_int() && mp->as_int() > 0)
        max_pos_ = std::min<int64_t>(max_pos_, mp->as_int());
  }

 private:
  static bool nox_supports(OpKind k) {  // nox's own capability list (no fused ops)
    Op op{};
    op.kind = k;
    return nox_backend().supports(op, nullptr, 0);
  }

  Tensor bind_weight(const graph::Value& v) {
    Tensor t = binder_.weight(v.tensor, "graph weight '" + v.name + "'");
    if (v.nrows > 0) t = t.rows(v.row0, v.nrows);
    if (t.shape.ndim == 1) t = binder_.to_f32(t);  // 1-D weights (norms, biases): an f32 copy
    return t;
  }

  std::string family_, origin_;
  bool nox_ = false;
  bool key_bias_ = false;  // keys_have_bias: f32 KV cache in fast mode too
  int64_t max_pos_ = 0, graph_vocab_in_ = 0;
  std::unique_ptr<graph::Executor> exec_;
  WeightBinder binder_;
  NoxWeightDigests wdig_;
  mutable std::mutex mu_;
  std::string digest_;
};

}  // namespace

std::shared_ptr<Model> load_graph_model(std::shared_ptr<ModelFile> file, const LoadOptions& opts,
                                        const std::string& graph_text, const std::string& origin) {
  auto m = std::make_shared<GraphModel>();
  m->build(std::move(file), opts, nullptr, &graph_text, origin);
  return m;
}

std::shared_ptr<Model> load_graph_model(std::shared_ptr<ModelFile> file, const LoadOptions& opts, graph::Graph g,
                                        const std::string& origin) {
  auto m = std::make_shared<GraphModel>();
  m->build(std::move(file), opts, &g, nullptr, origin);
  return m;
}

}  // namespace cyb
