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
#include "runtime/pipelines.h"

namespace py = pybind11;
using namespace cyb;

void attach_webgpu_dawn();  // bind_ops.cc: Dawn's procedures handed over for backend="webgpu:dawn"

namespace {

// A Python integer argument as int64: TypeError for anything that is not an
// integer (operator.index: bool, int, numpy integers), InvalidConfig(field) when it
// does not fit in 64 bits.
int64_t int64_arg(const py::handle& v, const char* field) {
  if (!PyIndex_Check(v.ptr()))
    throw py::type_error(std::string(field) + " must be an integer, not " + std::string(Py_TYPE(v.ptr())->tp_name));
  py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()));
  if (!i) throw py::error_already_set();
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (overflow != 0 || (x == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    throw_invalid_config(field, "must fit in a signed 64-bit integer (got " + std::string(py::str(i)) + ")");
  }
  return static_cast<int64_t>(x);
}

// Test hook (tests/test_hardening_runtime.py): called with (done, total), holding
// the GIL, after each chunk but the last of a long forward, before the signal check.
// Never destroyed (a py::object must not outlive the interpreter's finalization).
py::object& chunk_hook() {
  static auto* hook = new py::object();
  return *hook;
}

// Between the chunks of a long forward: take the GIL back briefly, run the test
// hook and the Python signal handlers (Ctrl-C raises KeyboardInterrupt there,
// leaving the conversation at the chunk boundary).
void between_chunks(void*, int64_t done, int64_t total) {
  py::gil_scoped_acquire gil;
  if (chunk_hook() && !chunk_hook().is_none()) chunk_hook()(done, total);
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

py::array_t<float> run_forward(Model& m, Conversation& c,
                               py::array_t<int32_t, py::array::c_style | py::array::forcecast> ids,
                               bool all_logits) {
  if (ids.ndim() != 1) throw_shape_mismatch("forward (ids)", {-1}, {static_cast<int64_t>(ids.ndim())});
  const int64_t n = ids.shape(0);
  if (n == 0) throw_shape_mismatch("forward (ids)", {1}, {0});
  py::array_t<float> out(all_logits ? std::vector<py::ssize_t>{n, m.vocab_size()}
                                    : std::vector<py::ssize_t>{m.vocab_size()});
  const int32_t* p = ids.data();
  float* o = out.mutable_data();
  ForwardProgress progress;
  progress.fn = &between_chunks;
  {
    py::gil_scoped_release release;
    m.forward(c, p, n, all_logits, o, &progress);
  }
  return out;
}

py::array_t<float> run_forward_batch(Model& m, const std::vector<Conversation*>& convs,
                                     py::array_t<int32_t, py::array::c_style | py::array::forcecast> ids) {
  if (ids.ndim() != 1) throw_shape_mismatch("forward_batch (ids)", {-1}, {static_cast<int64_t>(ids.ndim())});
  const int64_t n = ids.shape(0);
  if (n != static_cast<int64_t>(convs.size()))
    throw_shape_mismatch("forward_batch (one id per conversation)", {static_cast<int64_t>(convs.size())}, {n});
  py::array_t<float> out(std::vector<py::ssize_t>{n, m.vocab_size()});
  const int32_t* p = ids.data();
  float* o = out.mutable_data();
  {
    py::gil_scoped_release release;
    m.forward_batch(convs.data(), p, n, o);
  }
  return out;
}

}  // namespace

void bind_model(py::module_& m) {
  m.def(
      "pipeline_of", [](const std::string& model_type) { return std::string(pipeline_of(model_type).kind); },
      py::arg("model_type"),
      "The kind of the pipeline that runs `model_type` (runtime/pipelines.h): 'text', 'encoder', 'speech'.");
  m.def(
      "pipelines",
      []() {
        std::vector<std::pair<std::string, std::string>> out;
        for (const Pipeline& p : pipelines()) out.emplace_back(p.kind, p.summary);
        return out;
      },
      "The native pipeline registry's rows, in the order they are asked: [(kind, summary)].");
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
      .def("reset_kv_cache", [](Conversation& c) {
        Conversation::Use use(c);  // not while a forward runs on it
        c.reset_kv_cache();
      })
      .def("truncate", [](Conversation& c, py::object position) {
        const int64_t pos = int64_arg(position, "position");
        if (pos < 0 || pos > c.position())
          throw_invalid_config("position", "must lie in [0, " + std::to_string(c.position()) + "] (the cached "
                                           "positions), got " + std::to_string(pos));
        Conversation::Use use(c);
        c.truncate(pos);
      }, py::arg("position"), "Drops the cached positions from `position` on (the prefix before it stays).")
      .def_property_readonly("kv_cache_bytes", &Conversation::kv_cache_bytes)
      .def("frame_pool_bytes", [](Conversation& c) { return c.ctx().frame().pool_bytes(); });

  py::class_<Model, std::shared_ptr<Model>>(m, "Model")
      .def_property_readonly("family", &Model::family)
      .def_property_readonly("vocab_size", &Model::vocab_size)
      .def_property_readonly("max_position", &Model::max_position)
      .def_property_readonly("load_ms", &Model::load_ms)
      .def_property_readonly("forward_chunk_tokens", &Model::forward_chunk_tokens,
                             "Tokens per chunk of this model's long forwards (its primary backend's: "
                             "256 on the host, 512 on wgpu+rs).")
      .def_property_readonly("threads", [](Model& mm) { return mm.threads(); },
                             "Threads of the model's pool (0 = auto and the clamp resolved).")
      .def_property_readonly("charged_bytes", &Model::charged_bytes,
                             "Bytes charged against the memory budget (load and live conversations).")
      // Arguments as objects, checked here (TypeError / InvalidConfig): a failed
      // pybind11 conversion must never reach keep_alive's post-call step.
      .def(
          "new_conversation",
          [](py::object self, py::object max_context) {
            if (!py::isinstance<Model>(self)) throw py::type_error("new_conversation: self must be a Model");
            Model& mm = self.cast<Model&>();
            const int64_t n = int64_arg(max_context, "max_context");
            std::unique_ptr<Conversation> c;
            {
              py::gil_scoped_release release;
              c = mm.new_conversation(n);
            }
            py::object r = py::cast(std::move(c));
            py::detail::keep_alive_impl(r, self);  // the conversation keeps its model alive
            return r;
          },
          py::arg("max_context"))
      .def("forward", &run_forward, py::arg("conversation"), py::arg("ids"),
           py::arg("all_logits") = false)
      .def("forward_batch", &run_forward_batch, py::arg("conversations"), py::arg("ids"),
           "One decode step of several conversations: ids[i] for conversations[i]; [n, vocab] logits.")
      .def("device_beams", &Model::device_beams,
           "True when forward_batch_beam takes the beam candidates on the device (wgpu+rs whisper).")
      .def("backends", [](Model& mm) {
        std::vector<std::string> names;
        for (Backend* b : mm.dispatcher().chain()) names.push_back(b->name());
        return names;
      })
      .def_property_readonly("device_sampling", &Model::device_sampling,
                             "True when forward_sample draws tokens on the device (wgpu+rs, curated decoders).")
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
          d["host_shape"] = r.host_shape;
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
      .def("graph_origin", &Model::graph_origin)
      // Version-2 graphs (docs/graph.md "Shapes and the memory plan"): JSON text.
      .def(
          "memory_plan_json",
          [](Model& mm, const std::map<std::string, int64_t>& dims) {
            py::gil_scoped_release release;
            return mm.memory_plan_json(dims);
          },
          py::arg("dims"), "The memory plan of a run with these input dims (JSON text).")
      .def("shapes_json", &Model::shapes_json, "The shapes inferred at load (JSON text).")
      .def("last_run_memory_json", &Model::last_run_memory_json, "What the last run held (JSON text).")
      .def("release_memory", &Model::release_memory, py::arg("weights") = false,
           py::call_guard<py::gil_scoped_release>(),
           "Frees the pooled node buffers and the calling thread's kernel scratch (graph models); weights: "
           "also hands back the resident pages of the file's weights (the bytes returned).");

  // After the classes, so that signatures name cyb_llm._core.Model.
  m.def(
      "load",
      [](std::shared_ptr<ModelFile> file, const std::string& backend, bool precise, py::object threads,
         const std::string& exec_path, bool fuse, py::object max_memory, const std::string& stage) {
        if (!file) throw py::type_error("load: model_file must be a cyb_llm._core.ModelFile");
        LoadOptions o;
        o.backend = backend;
        o.precise = precise;
        o.threads = ThreadPool::resolve_threads(int64_arg(threads, "threads"));
        o.exec_path = exec_path;
        o.fuse = fuse;
        o.stage = stage;
        o.max_memory = max_memory.is_none() ? 0 : int64_arg(max_memory, "max_memory");
        if (!max_memory.is_none() && o.max_memory <= 0)
          throw_invalid_config("max_memory", "must be a positive byte count or None (available memory), got " +
                                                 std::to_string(o.max_memory));
        if (backend == "webgpu:dawn") attach_webgpu_dawn();  // bind_ops.cc
        py::gil_scoped_release release;
        return Model::load(std::move(file), o);
      },
      py::arg("model_file"), py::arg("backend") = "", py::arg("precise") = false, py::arg("threads") = 0,
      py::arg("exec_path") = "", py::arg("fuse") = true, py::arg("max_memory") = py::none(), py::arg("stage") = "",
      "Builds the runtime model over an open ModelFile; exec_path is '', 'curated' or 'graph' (docs/graph.md), "
      "stage names the graph of a 'graph-stages' file (section graph_<stage>), "
      "fuse runs the graph path's fusion pass; threads: 0 = physical cores, larger than "
      "ThreadPool::max_threads() clamped, negative InvalidConfig; max_memory: budget in bytes "
      "(None: the available physical memory).");
  m.def("forward_chunk_tokens", []() { return Model::kForwardChunk; },
        "Tokens per chunk of a long forward on the host backends (cpu, nox; Model.forward_chunk_tokens "
        "gives a loaded model's: 512 on wgpu+rs); interrupts and the progress hook act between chunks.");
  m.def(
      "_set_forward_chunk_hook", [](py::object hook) { chunk_hook() = std::move(hook); }, py::arg("hook"),
      "Test hook: hook(done, total) runs (with the GIL) after each chunk but the last of a long forward; "
      "None removes it.");
  m.def("max_threads", &ThreadPool::max_threads, "The most threads a model's pool takes: min(256, 4 x hardware threads).");
}
