// The pybind11 module cyb_llm._core. Each area binds itself in its own file.
#include <pybind11/pybind11.h>

namespace py = pybind11;

void bind_errors(py::module_& m);
void bind_format(py::module_& m);
void bind_ops(py::module_& m);
void bind_model(py::module_& m);
void bind_sampling(py::module_& m);
void bind_graph(py::module_& m);
void bind_encoder(py::module_& m);
void bind_audio(py::module_& m);
void bind_whisper(py::module_& m);
void bind_arrays(py::module_& m);

PYBIND11_MODULE(_core, m) {
  m.doc() = "cyb_llm native core";
  bind_errors(m);
  bind_format(m);
  bind_ops(m);
  bind_model(m);
  bind_encoder(m);  // methods of Model: after bind_model
  bind_whisper(m);
  bind_arrays(m);  // methods of Model: after bind_model
  bind_sampling(m);
  bind_graph(m);
  bind_audio(m);
}
