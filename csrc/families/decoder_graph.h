// The decoder graph of a curated family, built from the decoder plan
// (families/decoder_plan.h) the curated forward runs: the same ops and constants
// as families/decoder.cc but unfused (plain rms_norm, matmul, add, silu + mul or
// geglu), so the fusion pass has work to do. At load it is built in memory (the
// graph document, validated into the IR by graph::parse_graph; no TOML text);
// `cyb-llm import --graph` serializes the same document (python:
// _core.emit_decoder_graph).
#pragma once
#include <functional>
#include <string>

#include "families/decoder_plan.h"
#include "format/model_file.h"
#include "format/toml.h"
#include "graph/graph.h"

namespace cyb {

// The graph section document (version 1: inputs, weights, state, nodes,
// outputs) of a plan. MissingTensor when a tensor the graph needs is not in `has_tensor`.
toml::Value decoder_graph_doc(const DecoderPlan& plan, const std::function<bool(const std::string&)>& has_tensor);
// The document as graph-section TOML text.
std::string write_graph_toml(const toml::Value& doc, const std::string& header_comment);

// The validated, unfused decoder graph of the file's curated family, in memory.
graph::Graph build_decoder_graph(const ModelFile& file);

namespace graph {
// The unfused decoder graph of a curated family, as graph-section TOML text.
std::string emit_decoder_graph(const std::string& model_type, const toml::Value& config,
                               const std::function<bool(const std::string&)>& has_tensor);
}  // namespace graph

}  // namespace cyb
