// The pipeline registry's rows (runtime/pipelines.h). A new pipeline adds its
// row here: its kind, the model types its family accepts, and its loader.
#include "runtime/pipelines.h"

#include "core/errors.h"
#include "families/decoder.h"
#include "families/decoder_graph.h"
#include "families/decoder_plan.h"
#include "families/encoder.h"
#include "families/families.h"
#include "families/whisper.h"
#include "model/array_graph_model.h"
#include "model/graph_model.h"

namespace cyb {

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
      {"graph", "named arrays in, named arrays out (graphs imported from ONNX, graph section version 2)",
       &is_array_graph_model_type, &load_array_graph_model},
      {"text", "text generation (decoder families, or a graph section)", nullptr, &load_text},
  };
  return rows;
}

const Pipeline& pipeline_of(const std::string& model_type) {
  for (const Pipeline& p : pipelines())
    if (!p.accepts || p.accepts(model_type)) return p;
  return pipelines().back();  // not reached: the last row accepts everything
}

}  // namespace cyb
