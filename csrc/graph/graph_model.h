// A Model that runs a graph section through the graph executor.
#pragma once
#include <memory>
#include <string>

#include "runtime/model.h"

namespace cyb {

// Builds the graph-path model: parse + validate the graph text, fuse (unless
// opts.fuse is false or the backend is nox), bind the weights, build RoPE tables.
// `origin` says where the graph came from ("section" or "emitted").
std::shared_ptr<Model> load_graph_model(std::shared_ptr<ModelFile> file, const LoadOptions& opts,
                                        const std::string& graph_text, const std::string& origin);

// The unfused decoder graph of the file's curated family (graph::emit_decoder_graph
// over the file's config and tensor index).
std::string emit_graph_for(const ModelFile& file);

}  // namespace cyb
