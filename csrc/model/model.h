// The public C++ API of the runtime (usable without Python):
//   auto model = cyb::Model::load("x.model", {});
//   auto conv = model->new_conversation(4096);
//   conv->forward(ids, n, /*all_logits=*/false, logits);   // logits: [vocab] floats
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/exec_context.h"
#include "core/thread_pool.h"
#include "dispatch/backend.h"
#include "dispatch/dispatcher.h"
#include "format/model_file.h"

namespace cyb {

struct LoadOptions {
  std::string backend;  // "" (platform default), "cpu", "wgpu+rs", "nox"
  bool precise = false; // f32 activations and f32 KV cache
  int threads = 0;      // 0: physical cores
  // Execution path: "" (curated family when model_type has one, else the graph
  // section), "curated", or "graph" (the graph section; for a curated family
  // without one, its emitted decoder graph). nox always takes the graph path.
  std::string exec_path;
  bool fuse = true;     // graph path: run the fusion pass at load
};

class Conversation;

class Model {
 public:
  // Load phase (docs/runtime.md "Load"): open + validate the file, pick the
  // curated family by model_type, build position caches, map the weights.
  // Defined by the runtime (runtime/model.cc), the layer that knows the families.
  static std::shared_ptr<Model> load(const std::string& path, const LoadOptions& opts);
  static std::shared_ptr<Model> load(std::shared_ptr<ModelFile> file, const LoadOptions& opts);
  virtual ~Model() = default;

  virtual const std::string& family() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_position() const = 0;
  // A conversation with its own KV cache of max_context positions.
  virtual std::unique_ptr<Conversation> new_conversation(int64_t max_context) = 0;
  // Runs ids[0..n) at the conversation's position; writes [vocab] logits of the
  // last position, or [n, vocab] when all_logits.
  virtual void forward(Conversation& conv, const int32_t* ids, int64_t n, bool all_logits,
                       float* logits) = 0;

  // "curated" or "graph"; the graph path's fusion report and, on nox, the
  // SHA-256 digest chain of the last forward (hex; "" elsewhere).
  virtual std::string execution_path() const { return "curated"; }
  virtual std::string fusion_report() const { return ""; }
  virtual std::vector<std::pair<std::string, std::string>> fusion_entries() const { return {}; }
  virtual std::string last_digest() const { return ""; }
  virtual std::string graph_origin() const { return ""; }

  Dispatcher& dispatcher() { return *dispatcher_; }
  const LoadOptions& options() const { return opts_; }
  const ModelFile& file() const { return *file_; }
  double load_ms() const { return load_ms_; }

 protected:
  std::shared_ptr<ModelFile> file_;
  LoadOptions opts_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Dispatcher> dispatcher_;
  double load_ms_ = 0.0;
  friend class ModelLoader;
};

// Per-conversation state: KV cache, position, frame allocator.
class Conversation {
 public:
  Conversation(ThreadPool* pool, bool precise, int64_t max_context)
      : ctx_(pool, precise), max_context_(max_context) {}
  virtual ~Conversation() = default;
  int64_t position() const { return position_; }
  int64_t max_context() const { return max_context_; }
  void reset_kv_cache() { position_ = 0; }
  ExecContext& ctx() { return ctx_; }
  void advance(int64_t n) { position_ += n; }
  // Bytes of this conversation's KV cache (what new_conversation allocated).
  virtual int64_t kv_cache_bytes() const { return 0; }

 private:
  ExecContext ctx_;
  int64_t max_context_;
  int64_t position_ = 0;
};

}  // namespace cyb
