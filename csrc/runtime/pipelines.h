// The pipeline registry: one row per kind of model the runtime runs (text
// generation, encoders, speech recognition, ...). Model::load reads the file's
// model_type, asks the registry which pipeline runs it, and calls that row's
// loader; the Python package routes through the same rows (`_core.pipeline_of`,
// python/cyb_llm/pipelines.py). Adding a pipeline: its family (csrc/families/),
// one row in pipelines.cc, and its Python module (docs/architecture.md, "Adding
// a pipeline").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/model.h"

namespace cyb {

struct Pipeline {
  const char* kind;     // the name the Python registry and the CLI use: "text", "encoder", "speech"
  const char* summary;  // one line for `cyb-llm list`/docs
  // The model types it runs; nullptr: every type no other row takes (the text
  // pipeline: curated decoder families or a file's graph section).
  bool (*accepts)(const std::string& model_type);
  // Builds the model (the file is validated, options checked by Model::load).
  std::shared_ptr<Model> (*load)(std::shared_ptr<ModelFile> file, const LoadOptions& opts);
};

// Every row, in the order they are asked (the catch-all row last).
const std::vector<Pipeline>& pipelines();

// The row that runs `model_type` (the catch-all row when no other accepts it).
const Pipeline& pipeline_of(const std::string& model_type);

}  // namespace cyb
