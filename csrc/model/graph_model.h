// A Model that runs a graph section through the graph executor.
#pragma once
#include <memory>
#include <string>

#include "graph/graph.h"
#include "model/model.h"

namespace cyb {

// Builds the graph-path model: parse + validate the graph text, fuse (unless
// opts.fuse is false or the backend is nox), bind the weights, build RoPE tables.
// `origin` says where the graph came from ("section" or "emitted").
std::shared_ptr<Model> load_graph_model(std::shared_ptr<ModelFile> file, const LoadOptions& opts,
                                        const std::string& graph_text, const std::string& origin);
// The same from a graph already built in memory (validated as parse_graph does:
// weights present, shapes consistent).
std::shared_ptr<Model> load_graph_model(std::shared_ptr<ModelFile> file, const LoadOptions& opts, graph::Graph g,
                                        const std::string& origin);

}  // namespace cyb
