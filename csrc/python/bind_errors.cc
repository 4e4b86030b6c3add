// Native exceptions -> cyb_llm.errors classes.
//
// cyb::Error becomes the class of its variant (fields as attributes, built by
// cyb_llm.errors._from_native). Allocation failures become OutOfMemory; any
// other std::exception from native code becomes the base cyb_llm.errors.Error,
// so no bare RuntimeError escapes. pybind11's own exceptions (casts,
// StopIteration, IndexError, ...) and Python errors pass through untouched.
//
// The variant table and the message formats are native (core/errors.h);
// cyb_llm.errors reads them through error_variants() and error_message().
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <csignal>
#include <map>
#include <new>
#include <stdexcept>
#include <string>

#include "core/errors.h"

namespace py = pybind11;

namespace {

// Messages may quote bytes of a bad file: never fail on invalid UTF-8.
py::str safe_str(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

void raise_structured(const char* kind, const std::string& message, const py::dict& fields) {
  try {
    py::object errors = py::module_::import("cyb_llm.errors");
    py::object exc = errors.attr("_from_native")(kind, safe_str(message), fields);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  } catch (py::error_already_set&) {
    // cyb_llm.errors itself failed to import: keep the original message.
    PyErr_SetString(PyExc_RuntimeError, cyb::escape_nul(std::string(kind) + ": " + message).c_str());
  }
}

// Chains `cause` (an owned exception instance, may be null) as the __context__
// of the exception currently set.
void set_context_of_current(PyObject* cause) {
  if (!cause) return;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (value) PyException_SetContext(value, cause);  // steals cause
  else Py_DECREF(cause);
  PyErr_Restore(type, value, tb);
}

void translate_native(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const cyb::Error& e) {
    py::dict fields;
    for (const auto& kv : e.fields()) fields[safe_str(kv.first)] = safe_str(kv.second);
    raise_structured(cyb::error_kind_name(e.kind()), e.what(), fields);
  } catch (const std::bad_alloc&) {
    py::dict fields;
    fields["backend"] = "cpu";
    fields["requested_bytes"] = "0";
    raise_structured("OutOfMemory", "backend 'cpu' is out of memory (a native allocation failed)", fields);
  } catch (const std::length_error& e) {
    py::dict fields;
    fields["backend"] = "cpu";
    fields["requested_bytes"] = "0";
    raise_structured("OutOfMemory",
                     std::string("backend 'cpu' is out of memory (allocation too large: ") + e.what() + ")",
                     fields);
  } catch (const py::builtin_exception&) {
    throw;
  } catch (const py::error_already_set&) {
    throw;
  } catch (const std::exception& e) {
    raise_structured("Error", std::string("internal error in native code: ") + e.what(), py::dict());
  }
}

// A signal (Ctrl-C) that arrived during the native call may be what made it
// fail (an interrupted open() or read()). The Python signal handlers run
// first, so that their exception (KeyboardInterrupt) is what propagates, with
// the translated native error as its __context__.
void translate(std::exception_ptr p) {
  if (PyErr_CheckSignals() == 0) {
    translate_native(p);  // rethrows pybind11's own exceptions untouched
    return;
  }
  PyObject *stype, *svalue, *stb;
  PyErr_Fetch(&stype, &svalue, &stb);
  PyObject* native = nullptr;
  try {
    translate_native(p);
    PyObject *type, *tb;
    PyErr_Fetch(&type, &native, &tb);
    PyErr_NormalizeException(&type, &native, &tb);
    if (native && tb) PyException_SetTraceback(native, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
  } catch (...) {  // pybind11's own exception: the signal's exception replaces it
    PyErr_Clear();
  }
  PyErr_Restore(stype, svalue, stb);
  set_context_of_current(native);
}

}  // namespace

void bind_errors(py::module_& m) {
  py::register_local_exception_translator(translate);
  m.def(
      "error_variants",
      []() {
        py::list out;
        for (const cyb::ErrorVariant& v : cyb::error_variants()) {
          py::tuple fields(v.fields.size()), ints(v.int_fields.size());
          for (size_t i = 0; i < v.fields.size(); ++i) fields[i] = py::str(v.fields[i]);
          for (size_t i = 0; i < v.int_fields.size(); ++i) ints[i] = py::str(v.int_fields[i]);
          out.append(py::make_tuple(v.name, fields, ints));
        }
        return out;
      },
      "[(variant name, field names in positional order, integer fields)] of the native errors.");
  m.def(
      "error_message",
      [](const std::string& kind, const std::map<std::string, std::string>& fields) {
        for (const cyb::ErrorVariant& v : cyb::error_variants()) {
          if (kind != v.name) continue;
          cyb::Error::Fields f(fields.begin(), fields.end());
          return cyb::error_message(v.kind, f);
        }
        throw py::value_error("unknown error variant '" + kind + "'");
      },
      py::arg("kind"), py::arg("fields"), "The native message of an error variant built from its fields (str values).");
  // Test hook: raises each native variant so the translation can be checked.
  m.def("_raise_native_error", [](const std::string& kind) {
    if (kind == "FormatError") cyb::throw_format("config", "architecture.hidden_size", "expected an integer");
    if (kind == "UnsupportedOp") cyb::throw_unsupported_op("rope", "wgpu", "q4_k");
    if (kind == "ShapeMismatch") cyb::throw_shape_mismatch("matmul", {2, 3}, {3, 2});
    if (kind == "MissingTensor") cyb::throw_missing_tensor("lm_head.weight", "llama");
    if (kind == "WeightFormatMismatch") cyb::throw_weight_format("w", "q4_0 [2, 32]", 35, "expected 36 bytes");
    if (kind == "OutOfMemory") cyb::throw_oom("cpu", 1ull << 40);
    if (kind == "BackendInit") cyb::throw_backend_init("wgpu", "no adapter");
    if (kind == "InvalidConfig") cyb::throw_invalid_config("head_dim", "must be positive");
    if (kind == "Tokenizer") cyb::throw_tokenizer("unknown token type");
    if (kind == "bad_alloc") throw std::bad_alloc();
    if (kind == "length_error") throw std::length_error("vector");
    if (kind == "runtime_error") throw std::runtime_error("boom");
    if (kind == "pending_sigint") {
      // A Ctrl-C that arrives during a native call which then fails.
      std::raise(SIGINT);
      cyb::throw_format("", "", "cannot open: Interrupted system call");
    }
    throw py::value_error("unknown kind " + kind);
  });
}
