#include "runtime/model.h"

#include "runtime/pipelines.h"

#include <chrono>

#include "core/errors.h"
#include "families/decoder.h"
#include "families/decoder_graph.h"
#include "families/decoder_plan.h"
#include "families/encoder.h"
#include "families/families.h"
#include "families/whisper.h"
#include "model/graph_model.h"
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

namespace {

// The text pipeline: a curated decoder family, or the graph path (a file's graph
// section, the curated family's plan emitted as a graph, or nox, which runs only graphs).
std::shared_ptr<Model> load_text(std::shared_ptr<ModelFile> file, const LoadOptions& opts) {
  const std::string type = file->config().find("model_type")->as_string();
  const bool nox = opts.backend == "nox";
  const bool has_graph = file->has_section("graph");
  if (nox && opts.exec_path == "curated")
    throw_backend_init("nox", "nox is graph-only: it cannot run the curated path");
  if (nox && !has_graph)
    throw_backend_init("nox", "nox runs only models with a graph section, and '" + file->path() +
                                  "' has none (re-import it with `cyb-llm import SRC -o OUT --graph`)");
  const FamilyInfo* factory = find_family(type);
  const bool want_graph = nox || opts.exec_path == "graph" || (!factory && opts.exec_path != "curated");
  if (want_graph) {
    if (has_graph) return load_graph_model(file, opts, file->section_text("graph"), "section");
    // the curated family's decoder plan as a graph, built in memory
    if (factory) return load_graph_model(file, opts, build_decoder_graph(*file), "emitted");
    throw_invalid_config("model_type", "'" + type + "' has no curated family (known: " + curated_model_types() +
                                           ") and the file has no graph section");
  }
  if (!factory)
    throw_invalid_config("model_type", "'" + type + "' has no curated family (known: " + curated_model_types() +
                                           "); exec_path=curated cannot run it");
  DecoderPlan plan = make_decoder_plan(type, file->config(), [&file](const std::string& n) {
    return file->find(n) != nullptr;
  });
  return make_curated_decoder(std::move(file), opts, std::move(plan));
}

// Pipelines that have only a curated path.
std::shared_ptr<Model> curated_only(const char* what, std::shared_ptr<ModelFile> file, const LoadOptions& opts,
                                    std::shared_ptr<Model> (*make)(std::shared_ptr<ModelFile>, const LoadOptions&)) {
  if (opts.exec_path == "graph")
    throw_invalid_config("exec_path", std::string(what) + " models run only the curated path");
  if (opts.backend == "nox")
    throw_backend_init("nox", std::string("nox runs only graphs; ") + what + " models have only a curated path");
  return make(std::move(file), opts);
}

std::shared_ptr<Model> load_encoder(std::shared_ptr<ModelFile> file, const LoadOptions& opts) {
  return curated_only("encoder", std::move(file), opts, &make_encoder);
}

std::shared_ptr<Model> load_speech(std::shared_ptr<ModelFile> file, const LoadOptions& opts) {
  return curated_only("whisper", std::move(file), opts, &make_whisper);
}

}  // namespace

const std::vector<Pipeline>& pipelines() {
  static const std::vector<Pipeline> rows = {
      {"encoder", "embeddings, classification, rerank (BERT-like encoders)", &is_encoder_model_type, &load_encoder},
      {"speech", "speech recognition (Whisper)", &is_whisper_model_type, &load_speech},
      {"text", "text generation (decoder families, or a graph section)", nullptr, &load_text},
  };
  return rows;
}

const Pipeline& pipeline_of(const std::string& model_type) {
  for (const Pipeline& p : pipelines())
    if (!p.accepts || p.accepts(model_type)) return p;
  return pipelines().back();  // not reached: the last row accepts everything
}

std::shared_ptr<Model> Model::load_checked(std::shared_ptr<ModelFile> file, const LoadOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  const toml::Value* mt = file->config().find("model_type");
  if (!mt || !mt->is_string()) throw_invalid_config("model_type", "required key is missing");
  if (!opts.exec_path.empty() && opts.exec_path != "curated" && opts.exec_path != "graph")
    throw_invalid_config("exec_path", "'" + opts.exec_path + "' is not an execution path (curated, graph)");
  std::shared_ptr<Model> m = pipeline_of(mt->as_string()).load(std::move(file), opts);
  m->load_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

}  // namespace cyb
