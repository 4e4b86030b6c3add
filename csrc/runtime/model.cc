#include "runtime/model.h"

#include "runtime/pipelines.h"

#include <chrono>

#include "core/errors.h"
#include "model/model_base.h"

namespace cyb {

std::shared_ptr<Model> Model::load(const std::string& path, const LoadOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<Model> m = load(ModelFile::open(path), opts);
  m->load_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

namespace {

// What a load holds in memory: the weights (mapped or read). The curated path's
// RoPE tables grow with the conversations (charged by new_conversation).
int64_t load_bytes(const ModelFile& file) { return static_cast<int64_t>(file.file_size()); }

}  // namespace

std::shared_ptr<Model> Model::load(std::shared_ptr<ModelFile> file, const LoadOptions& opts) {
  if (!file) throw_invalid_config("model_file", "no file");
  ThreadPool::resolve_threads(opts.threads);  // negative: InvalidConfig (large values are clamped)
  if (opts.max_memory < -1)
    throw_invalid_config("max_memory", "must be a byte count > 0, 0 (available memory) or -1 (no check)");
  const int64_t held = load_bytes(*file);
  check_memory_budget(opts.max_memory, 0, held, "load('" + file->path() + "'): weights and RoPE tables");
  file->use_huge_pages();
  std::shared_ptr<Model> m = load_checked(std::move(file), opts);
  m->ledger_->fetch_add(held);
  return m;
}

std::shared_ptr<Model> Model::load_checked(std::shared_ptr<ModelFile> file, const LoadOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  const toml::Value* mt = file->config().find("model_type");
  if (!mt || !mt->is_string()) throw_invalid_config("model_type", "required key is missing");
  if (!opts.exec_path.empty() && opts.exec_path != "curated" && opts.exec_path != "graph")
    throw_invalid_config("exec_path", "'" + opts.exec_path + "' is not an execution path (curated, graph)");
  const Pipeline& p = pipeline_of(mt->as_string());
  if (!opts.stage.empty() && std::string(p.kind) != "graph")
    throw_invalid_config("stage", "'" + mt->as_string() + "' is not a graph model: it has no stage '" + opts.stage +
                                      "' (stages are for model_type 'graph-stages')");
  std::shared_ptr<Model> m = p.load(std::move(file), opts);
  m->load_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

}  // namespace cyb
