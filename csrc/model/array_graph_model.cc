#include "model/array_graph_model.h"

#include <mutex>

#include "core/errors.h"
#include "core/memory_budget.h"
#include "dispatch/op_schema.h"
#include "graph/array_graph.h"
#include "model/array_graph_run.h"
#include "model/model_base.h"

namespace cyb {

bool is_array_graph_model_type(const std::string& model_type) {
  return model_type == kOnnxGraphModelType || model_type == kGraphStagesModelType;
}

namespace {

// The names of the file's stage sections (`graph_<stage>`), comma-separated, for messages.
std::string stage_names(const ModelFile& file) {
  std::string names;
  for (const std::string& s : file.section_names())
    if (s.rfind("graph_", 0) == 0) names += (names.empty() ? "" : ", ") + s.substr(6);
  return names.empty() ? "none" : names;
}

// The section holding the graph to run: `graph`, or `graph_<stage>` of a stages file.
std::string graph_section(const ModelFile& file, const std::string& family, const std::string& stage) {
  if (family == kGraphStagesModelType) {
    if (stage.empty())
      throw_invalid_config("stage", "'" + family + "' files hold several graphs: load one stage by name (stages: " +
                                        stage_names(file) + ")");
    if (!file.has_section("graph_" + stage))
      throw_invalid_config("stage", "the file has no stage '" + stage + "' (stages: " + stage_names(file) + ")");
    return "graph_" + stage;
  }
  if (!stage.empty())
    throw_invalid_config("stage", "'" + family + "' files hold one graph: stage '" + stage +
                                      "' names none (stages are for model_type '" + kGraphStagesModelType + "')");
  if (!file.has_section("graph"))
    throw_invalid_config("model_type", "'" + family + "' models run their graph section, and the file has none");
  return "graph";
}

class ArrayGraphModel : public Model {
 public:
  const std::string& family() const override { return family_; }
  int64_t vocab_size() const override { return 0; }
  int64_t max_position() const override { return 1; }
  std::string execution_path() const override { return "graph"; }
  std::string graph_origin() const override { return "section (version 2)"; }
  std::string fusion_report() const override { return report_.text(); }
  std::vector<std::pair<std::string, std::string>> fusion_entries() const override {
    std::vector<std::pair<std::string, std::string>> r;
    for (const auto& e : report_.fused) r.push_back({e.pattern, e.node});
    return r;
  }
  std::string last_digest() const override {
    std::lock_guard<std::mutex> lk(digest_mu_);
    return digest_;
  }

  void init(std::shared_ptr<ModelFile> file, const LoadOptions& opts) {
    file_ = std::move(file);
    opts_ = opts;
    if (opts_.backend.empty()) opts_.backend = "cpu";  // the host path unless a device backend is asked for by name
    const bool device = opts_.backend == "wgpu+rs" || opts_.backend == "wgpu" || opts_.backend == "webgpu:dawn";
    if (opts_.backend != "cpu" && opts_.backend != "nox" && !device)
      throw_backend_init(opts_.backend, "version-2 graphs (named arrays) run on cpu, nox and wgpu+rs (webgpu:dawn); "
                                        "not on this backend (load with backend='cpu')");
    if (opts_.exec_path == "curated")
      throw_invalid_config("exec_path", "a version-2 graph model has only the graph path");
    family_ = file_->config().find("model_type")->as_string();
    const bool nox = opts_.backend == "nox";
    nox_ = nox;
    init_model_runtime(opts_, nox ? 1 : opts_.threads, &pool_, &dispatcher_);
    ctx_ = std::make_unique<ExecContext>(pool_.get(), true);
    if (!nox) ctx_->set_weight_cache(&wcache_);  // conv's packed weights, built on first use
    // a packed weight's original pages leave the resident set (they fault in again from the file
    // if read): resident weights stay at about the file's bytes (docs/diffusion.md, "Memory")
    wcache_.set_release([f = file_.get()](const void* p, size_t n) { return f->release_pages(p, n); });
    const std::string section = graph_section(*file_, family_, opts_.stage);
    const toml::Value doc = file_->section_toml(section);
    graph2::Graph g = graph2::parse(doc, [this](const std::string& n) { return file_->find(n) != nullptr; });
    run_ = std::make_unique<ArrayGraphRun>(std::move(g), *file_, nox);
    if (opts_.fuse) report_ = run_->fuse(*dispatcher_->chain().front());
    else report_.enabled = false;
    if (nox) {
      // nox never falls back: a node it has no kernel for makes the load fail, naming the node.
      Backend* b = dispatcher_->chain().front();
      for (const graph2::Node& n : run_->graph().nodes) {
        if (op_schema(n.kind).rule == ShapeRule::View) continue;
        std::vector<Tensor> dummy(n.inputs.size());
        if (!b->supports(n.op, dummy.data(), static_cast<int>(dummy.size())))
          throw_backend_init("nox", "node '" + n.name + "' (op " + op_name(n.kind) +
                                        ") has no nox kernel; this graph runs on cpu (backend='cpu')");
      }
    }
    // shapes at load (docs/graph.md "Shapes and the memory plan"): small shape values computed on
    // the chain's host backend (cpu; nox on nox)
    run_->infer_shapes(*dispatcher_->chain().back(), *ctx_);
  }

  std::string memory_plan_json(const std::map<std::string, int64_t>& dims) override {
    std::lock_guard<std::mutex> lk(mu_);
    return run_->memory_plan(dims, *dispatcher_->chain().back(), *ctx_)->json();
  }
  std::string shapes_json() const override {
    std::string s = "{";
    bool first = true;
    for (const auto& [name, v] : run_->symbolic_shapes()) {
      s += std::string(first ? "" : ", ") + array_graph_detail::json_text(name) + ": {\"dtype\": " + array_graph_detail::json_text(dtype_info(v.dtype).encoding) +
           ", \"shape\": ";
      if (!v.rank_known) {
        s += "null}";
      } else {
        s += "[";
        for (size_t k = 0; k < v.dims.size(); ++k) {
          const std::string& d = v.dims[k];
          const bool num = !d.empty() && d.find_first_not_of("0123456789") == std::string::npos;
          s += (k ? ", " : "") + (num ? d : array_graph_detail::json_text(d));
        }
        s += "]}";
      }
      first = false;
    }
    return s + "}";
  }
  std::string last_run_memory_json() const override {
    const ArrayGraphRun::RunMemory m = run_->last_run_memory();
    return "{\"planned_peak\": " + std::to_string(m.planned_peak) + ", \"measured_peak\": " +
           std::to_string(m.measured_peak) + ", \"dynamic_peak\": " + std::to_string(m.dynamic_peak) +
           ", \"unknown_values\": " + std::to_string(m.unknown_values) + ", \"unplanned\": " +
           std::to_string(m.unplanned) + ", \"weight_cache_bytes\": " + std::to_string(wcache_.bytes()) +
           ", \"released_weight_bytes\": " + std::to_string(wcache_.released_bytes()) +
           ", \"pooled_bytes\": " + std::to_string(run_->pooled_bytes()) + "}";
  }
  int64_t release_memory(bool weights) override {
    std::lock_guard<std::mutex> lk(mu_);
    run_->release_buffers();
    for (Backend* b : dispatcher_->chain()) b->release_scratch();
    return weights ? static_cast<int64_t>(run_->release_weight_pages(*file_)) : 0;
  }

 protected:
  void forward_chunk(Conversation&, const int32_t*, int64_t, bool, float*) override { no_tokens(); }
  std::unique_ptr<Conversation> make_conversation(int64_t) override { no_tokens(); }

  NamedArrays run_arrays(const NamedArrays& inputs, const RunOptions& options) override {
    std::lock_guard<std::mutex> lk(mu_);
    if (nox_) {
      std::lock_guard<std::mutex> dl(digest_mu_);
      digest_.clear();  // a run that fails leaves no digest
    }
    // A device backend (wgpu+rs) runs each node it has a kernel for on device values, which stay
    // on the device between nodes (ArrayGraphRun::run: feeds uploaded at their first use, outputs
    // read back once; a value goes to the host only for a node the device declines, recorded as a
    // fallback, for a host shape computation, or for a shape rule that reads it). One forward a
    // run (Model::run holds the device lock).
    Backend* front = dispatcher_->chain().front();
    front->begin_forward(*ctx_);
    struct EndForward {  // on an error path only (the normal end calls end_forward itself)
      Backend* b;
      ExecContext& ctx;
      bool done = false;
      ~EndForward() {
        if (done) return;
        try {
          b->end_forward(ctx);
        } catch (...) {  // the error in flight is the one to report
        }
      }
    } ender{front, *ctx_};
    std::string digest;
    // Node outputs and output copies are charged against the memory budget next to what the model
    // already holds (LoadOptions::max_memory; 0 = what is available), before each is allocated.
    const int64_t held = charged_bytes() + static_cast<int64_t>(wcache_.bytes());
    const int64_t budget = opts_.max_memory;
    // With no budget given (0: what is available), the available memory as read at most a second
    // ago (available_memory_recent: a read of /proc/meminfo costs ~10-40 us, a tenth of a Silero
    // call; it was read per node, then per run); a node whose outputs would not fit in it, less what
    // this run already holds, is checked again against a fresh reading (check_memory_budget), which
    // refuses it or lets it pass.
    const int64_t avail = budget == 0 ? available_memory_recent() : -1;
    const ArrayGraphRun::BudgetCheck check = [held, budget, avail](int64_t in_use, int64_t need,
                                                                   const std::function<std::string()>& what) {
      if (budget < 0 || need <= 0) return;
      if (budget > 0 ? need > budget - (held + in_use) : (avail < 0 || need > avail - in_use))
        check_memory_budget(budget, held + in_use, need, what());
    };
    NamedArrays out = run_->run(inputs, options, *dispatcher_, *ctx_, nox_ ? &digest : nullptr, check);
    ender.done = true;
    front->end_forward(*ctx_);
    if (nox_) {
      std::lock_guard<std::mutex> dl(digest_mu_);
      digest_ = digest;
    }
    return out;
  }

 private:
  [[noreturn]] void no_tokens() const {
    throw_invalid_config("architecture.model_type", "'" + family_ + "' is a named-array graph: it has no token "
                                                    "stream and no conversations (use run({name: array}))");
  }
  std::string family_;
  std::unique_ptr<ArrayGraphRun> run_;
  graph::FusionReport report_;
  WeightCache wcache_;  // declared before ctx_, which points at it
  std::unique_ptr<ExecContext> ctx_;
  std::mutex mu_;
  bool nox_ = false;
  mutable std::mutex digest_mu_;
  std::string digest_;  // nox: the digest of the last run (hex)
};

}  // namespace

std::shared_ptr<Model> load_array_graph_model(std::shared_ptr<ModelFile> file, const LoadOptions& opts) {
  auto m = std::make_shared<ArrayGraphModel>();
  m->init(std::move(file), opts);
  return m;
}

}  // namespace cyb
