// Python face of the native Model / Conversation (cyb_llm.model wraps these):
// the one load entry point (load: an already-open ModelFile, so the file is
// mapped and validated once), every Model method (graph path included), and
// the list of curated model types.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "core/errors.h"
#include "families/families.h"
#include "format/model_file.h"
#include "runtime/model.h"

namespace py = pybind11;
using namespace cyb;

namespace {

py::array_t<float> run_forward(Model& m, Conversation& c,
                               py::array_t<int32_t, py::array::c_style | py::array::forcecast> ids,
                               bool all_logits) {
  if (ids.ndim() != 1) throw_shape_mismatch("forward (ids)", {-1}, {static_cast<int64_t>(ids.ndim())});
  const int64_t n = ids.shape(0);
  if (n == 0) throw_shape_mismatch("forward (ids)", {1}, {0});
  const int64_t rows = all_logits ? n : 1;
  py::array_t<float> out(all_logits ? std::vector<py::ssize_t>{n, m.vocab_size()}
                                    : std::vector<py::ssize_t>{m.vocab_size()});
  (void)rows;
  const int32_t* p = ids.data();
  float* o = out.mutable_data();
  {
    py::gil_scoped_release release;
    m.forward(c, p, n, all_logits, o);
  }
  return out;
}

}  // namespace

void bind_model(py::module_& m) {
  m.def(
      "curated_model_types",
      []() {
        std::vector<std::string> out;
        const std::string all = curated_model_types();
        size_t start = 0;
        while (start < all.size()) {
          size_t end = all.find(',', start);
          if (end == std::string::npos) end = all.size();
          std::string t = all.substr(start, end - start);
          const size_t a = t.find_first_not_of(' ');
          if (a != std::string::npos) out.push_back(t.substr(a));
          start = end + 1;
        }
        return out;
      },
      "The model_type values with a curated family (csrc/families/).");
  py::class_<Conversation>(m, "Conversation")
      .def_property_readonly("position", &Conversation::position)
      .def_property_readonly("max_context", &Conversation::max_context)
      .def("reset_kv_cache", &Conversation::reset_kv_cache)
      .def_property_readonly("kv_cache_bytes", &Conversation::kv_cache_bytes)
      .def("frame_pool_bytes", [](Conversation& c) { return c.ctx().frame().pool_bytes(); });

  py::class_<Model, std::shared_ptr<Model>>(m, "Model")
      .def_property_readonly("family", &Model::family)
      .def_property_readonly("vocab_size", &Model::vocab_size)
      .def_property_readonly("max_position", &Model::max_position)
      .def_property_readonly("load_ms", &Model::load_ms)
      .def_property_readonly("threads", [](Model& mm) { return mm.options().threads; })
      .def("new_conversation", &Model::new_conversation, py::arg("max_context"),
           py::keep_alive<0, 1>())
      .def("forward", &run_forward, py::arg("conversation"), py::arg("ids"),
           py::arg("all_logits") = false)
      .def("backends", [](Model& mm) {
        std::vector<std::string> names;
        for (Backend* b : mm.dispatcher().chain()) names.push_back(b->name());
        return names;
      })
      .def("set_profiling", [](Model& mm, bool on) { mm.dispatcher().set_profiling(on); })
      .def("clear_dispatch_records", [](Model& mm) { mm.dispatcher().clear_records(); })
      .def("dispatch_records", [](Model& mm) {
        py::list out;
        for (const DispatchRecord& r : mm.dispatcher().records()) {
          py::dict d;
          d["label"] = r.label;
          d["op"] = r.op;
          d["backend"] = r.backend;
          d["fallback"] = r.fallback;
          d["count"] = r.count;
          d["total_ms"] = r.total_ms;
          out.append(d);
        }
        return out;
      })
      // Graph path (docs/graph.md): which path runs, what the fusion pass did,
      // where the graph came from; nox: the digest chain of the last forward.
      .def("execution_path", &Model::execution_path)
      .def("fusion_report", &Model::fusion_report)
      .def("fusion_entries", &Model::fusion_entries)
      .def("last_digest", &Model::last_digest)
      .def("graph_origin", &Model::graph_origin);

  // After the classes, so that signatures name cyb_llm._core.Model.
  m.def(
      "load",
      [](std::shared_ptr<ModelFile> file, const std::string& backend, bool precise, int threads,
         const std::string& exec_path, bool fuse) {
        if (!file) throw py::type_error("load: model_file must be a cyb_llm._core.ModelFile");
        LoadOptions o;
        o.backend = backend;
        o.precise = precise;
        o.threads = threads;
        o.exec_path = exec_path;
        o.fuse = fuse;
        py::gil_scoped_release release;
        return Model::load(std::move(file), o);
      },
      py::arg("model_file"), py::arg("backend") = "", py::arg("precise") = false, py::arg("threads") = 0,
      py::arg("exec_path") = "", py::arg("fuse") = true,
      "Builds the runtime model over an open ModelFile; exec_path is '', 'curated' or 'graph' (docs/graph.md), "
      "fuse runs the graph path's fusion pass.");
}
