// A Model over a version-2 graph section (graph/array_graph.h): named arrays in, named arrays
// out (Model::run), every node dispatched through the model's Dispatcher on host memory.
#pragma once
#include <memory>

#include "model/model.h"

namespace cyb {

// The model type the importer of ONNX files writes (python/cyb_llm/convert/onnx.py).
constexpr const char* kOnnxGraphModelType = "onnx-graph";
// A file holding several named graphs (the stages of a pipeline: a text encoder, a UNet, a VAE
// decoder), each in its section `graph_<stage>`; which one runs is LoadOptions::stage.
constexpr const char* kGraphStagesModelType = "graph-stages";
bool is_array_graph_model_type(const std::string& model_type);

// Parses the file's graph section (version 2), binds the initializers, checks that the chosen
// backend runs every node (nox: BackendInit naming the first node it has no kernel for).
std::shared_ptr<Model> load_array_graph_model(std::shared_ptr<ModelFile> file, const LoadOptions& opts);

}  // namespace cyb
