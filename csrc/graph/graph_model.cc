#include "graph/graph_model.h"

#include <cstring>
#include <mutex>

#include "backends/cpu/quant.h"
#include "backends/nox/nox_backend.h"
#include "core/errors.h"
#include "graph/executor.h"
#include "runtime/backends.h"

namespace cyb {

namespace {

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

  std::unique_ptr<Conversation> new_conversation(int64_t max_context) override {
    if (max_context <= 0 || max_context > max_pos_)
      throw_invalid_config("max_context", "must be in [1, " + std::to_string(max_pos_) + "] (got " +
                                              std::to_string(max_context) + ")");
    auto c = std::make_unique<GraphConversation>(pool_.get(), opts_.precise || nox_, max_context, &wdig_);
    const DType cache = (opts_.precise || nox_) ? DType::F32 : DType::F16;
    c->st = exec_->new_state(*dispatcher_->chain().front(), max_context, cache);
    return c;
  }

  void forward(Conversation& base, const int32_t* ids, int64_t T, bool all_logits, float* logits) override {
    auto& conv = static_cast<GraphConversation&>(base);
    const int64_t pos0 = conv.position();
    if (T <= 0) throw_shape_mismatch("forward", {1}, {T});
    if (pos0 + T > conv.max_context())
      throw_shape_mismatch("forward (context)", {conv.max_context()}, {pos0 + T});
    const int64_t V = graph_vocab_in_;
    for (int64_t t = 0; t < T; ++t)
      if (ids[t] < 0 || ids[t] >= V)
        throw_invalid_config("input_ids", "token id " + std::to_string(ids[t]) + " is outside [0, " +
                                              std::to_string(V) + ")");
    exec_->forward(*conv.st, conv.ctx(), *dispatcher_, ids, T, pos0, conv.max_context(), all_logits, logits,
                   nox_ ? &conv.tracer : nullptr);
    conv.advance(T);
    if (nox_) {
      std::lock_guard<std::mutex> lk(mu_);
      digest_ = conv.tracer.hex();
    }
  }

  void build(std::shared_ptr<ModelFile> file, const LoadOptions& opts, const std::string& text,
             const std::string& origin) {
    file_ = std::move(file);
    opts_ = opts;
    origin_ = origin;
    nox_ = opts.backend == "nox";
    const toml::Value* mt = file_->config().find("model_type");
    family_ = mt && mt->is_string() ? mt->as_string() : "graph";
    pool_ = std::make_unique<ThreadPool>(nox_ ? 1 : opts.threads);
    std::vector<std::unique_ptr<Backend>> owned;
    std::vector<Backend*> chain = select_backends(opts, &owned);
    dispatcher_ = std::make_unique<Dispatcher>(chain);
    for (auto& b : owned) dispatcher_->adopt(std::move(b));

    const ModelFile& f = *file_;
    graph::Graph g = graph::parse_graph_text(text, [&f](const std::string& name, graph::WeightInfo* info) {
      const TensorEntry* e = f.find(name);
      if (!e) return false;
      info->dtype = e->dtype;
      info->shape = e->shape;
      return true;
    });
    // the vocabulary the embedding reads (token ids are checked against it)
    graph_vocab_in_ = 0;
    for (const graph::Node& n : g.nodes)
      if (n.kind == OpKind::Embedding) graph_vocab_in_ = g.values[static_cast<size_t>(n.inputs[1])].shape[0].c;
    if (graph_vocab_in_ == 0) graph_vocab_in_ = int64_t(1) << 31;

    Backend& primary = *chain.front();
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
  static bool nox_supports(OpKind k) {
    return k != OpKind::FusedSkipNorm && k != OpKind::FusedNormMatmul && k != OpKind::FusedSwiGlu;
  }

  Tensor bind_weight(const graph::Value& v) {
    const TensorEntry* e = file_->find(v.tensor);
    if (!e) throw_missing_tensor(v.tensor, "graph weight '" + v.name + "'");
    Tensor t;
    t.dtype = e->dtype;
    for (int64_t d : e->shape) t.shape.d[t.shape.ndim++] = d;
    t.data = const_cast<uint8_t*>(file_->tensor_data(*e));
    t.name = v.tensor.c_str();
    if (v.nrows > 0) t = t.rows(v.row0, v.nrows);
    if (t.shape.ndim == 1 && t.dtype != DType::F32) {  // 1-D weights (norms, biases): an f32 copy
      auto buf = std::make_unique<std::vector<float>>(static_cast<size_t>(t.shape.d[0]));
      const uint8_t* p = static_cast<const uint8_t*>(t.data);
      for (int64_t i = 0; i < t.shape.d[0]; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        (*buf)[static_cast<size_t>(i)] = t.dtype == DType::F16 ? fp16_to_f32(h) : bf16_to_f32(h);
      }
      t.dtype = DType::F32;
      t.data = buf->data();
      owned_.push_back(std::move(buf));
    } else if (t.shape.ndim == 1) {  // f32: an aligned copy too (the curated path does the same)
      auto buf = std::make_unique<std::vector<float>>(static_cast<size_t>(t.shape.d[0]));
      std::memcpy(buf->data(), t.data, buf->size() * sizeof(float));
      t.data = buf->data();
      owned_.push_back(std::move(buf));
    }
    return t;
  }

  std::string family_, origin_;
  bool nox_ = false;
  int64_t max_pos_ = 0, graph_vocab_in_ = 0;
  std::unique_ptr<graph::Executor> exec_;
  std::vector<std::unique_ptr<std::vector<float>>> owned_;
  NoxWeightDigests wdig_;
  mutable std::mutex mu_;
  std::string digest_;
};

}  // namespace

std::shared_ptr<Model> load_graph_model(std::shared_ptr<ModelFile> file, const LoadOptions& opts,
                                        const std::string& graph_text, const std::string& origin) {
  auto m = std::make_shared<GraphModel>();
  m->build(std::move(file), opts, graph_text, origin);
  return m;
}

std::string emit_graph_for(const ModelFile& file) {
  const toml::Value* mt = file.config().find("model_type");
  if (!mt || !mt->is_string()) throw_invalid_config("model_type", "required key is missing");
  return graph::emit_decoder_graph(mt->as_string(), file.config(),
                                   [&file](const std::string& n) { return file.find(n) != nullptr; });
}

}  // namespace cyb
