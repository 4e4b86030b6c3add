// Python face of the native Model / Conversation (cyb_llm.model wraps these).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "core/errors.h"
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
  py::class_<Conversation>(m, "Conversation")
      .def_property_readonly("position", &Conversation::position)
      .def_property_readonly("max_context", &Conversation::max_context)
      .def("reset_kv_cache", &Conversation::reset_kv_cache)
      .def_property_readonly("kv_cache_bytes", &Conversation::kv_cache_bytes)
      .def("frame_pool_bytes", [](Conversation& c) { return c.ctx().frame().pool_bytes(); });

  py::class_<Model, std::shared_ptr<Model>>(m, "Model")
      .def(py::init([](const std::string& path, const std::string& backend, bool precise, int threads) {
             LoadOptions o;
             o.backend = backend;
             o.precise = precise;
             o.threads = threads;
             py::gil_scoped_release release;
             return Model::load(path, o);
           }),
           py::arg("path"), py::arg("backend") = "", py::arg("precise") = false, py::arg("threads") = 0)
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
      });
}
