// Python face of the graph IR: the decoder-graph emitter (cyb-llm import
// --graph). Loading and the Model methods of the graph path are in
// bind_model.cc.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "core/errors.h"
#include "format/toml.h"
#include "families/decoder_graph.h"

namespace py = pybind11;
using namespace cyb;

void bind_graph(py::module_& m) {
  m.def(
      "emit_decoder_graph",
      [](const std::string& model_type, const std::string& config_toml, const std::vector<std::string>& tensors) {
        const toml::Value cfg = toml::parse(config_toml, "config");
        std::unordered_map<std::string, int> have;
        for (const std::string& t : tensors) have[t] = 1;
        return graph::emit_decoder_graph(model_type, cfg, [&have](const std::string& n) { return have.count(n) > 0; });
      },
      py::arg("model_type"), py::arg("config_toml"), py::arg("tensor_names"),
      "The unfused graph section (TOML text) of a curated decoder family.");
}
