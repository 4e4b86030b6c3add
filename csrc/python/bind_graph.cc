// Python face of the graph path: loading with a chosen execution path and
// fusion switch, the fusion report, the nox digest, the decoder-graph emitter.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "core/errors.h"
#include "format/toml.h"
#include "graph/graph.h"
#include "graph/graph_model.h"
#include "runtime/model.h"

namespace py = pybind11;
using namespace cyb;

void bind_graph(py::module_& m) {
  m.def(
      "load_model",
      [](const std::string& path, const std::string& backend, bool precise, int threads, const std::string& exec_path,
         bool fuse) {
        LoadOptions o;
        o.backend = backend;
        o.precise = precise;
        o.threads = threads;
        o.path = exec_path;
        o.fuse = fuse;
        py::gil_scoped_release release;
        return Model::load(path, o);
      },
      py::arg("path"), py::arg("backend") = "", py::arg("precise") = false, py::arg("threads") = 0,
      py::arg("exec_path") = "", py::arg("fuse") = true,
      "Loads a .model choosing the execution path ('', 'curated', 'graph') and the fusion pass.");
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

  py::object cls = m.attr("Model");
  auto method = [&](const char* name, py::cpp_function f) { py::setattr(cls, name, f); };
  method("execution_path",
         py::cpp_function([](Model& mm) { return mm.execution_path(); }, py::is_method(cls)));
  method("fusion_report", py::cpp_function([](Model& mm) { return mm.fusion_report(); }, py::is_method(cls)));
  method("fusion_entries", py::cpp_function([](Model& mm) { return mm.fusion_entries(); }, py::is_method(cls)));
  method("last_digest", py::cpp_function([](Model& mm) { return mm.last_digest(); }, py::is_method(cls)));
  method("graph_origin", py::cpp_function([](Model& mm) { return mm.graph_origin(); }, py::is_method(cls)));
}
