// cyb_llm._core.ModelFile: the native container reader seen from Python.
// python/cyb_llm/format.py wraps it into cyb_llm.ModelFile, and reads the
// encoding table (encodings(), encoding_aliases()) from here.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/errors.h"
#include "format/model_file.h"
#include "format/toml.h"

namespace py = pybind11;

namespace {

using cyb::ModelFile;
using cyb::TensorEntry;

// TOML value -> new Python reference (nullptr with a Python error set).
// The raw C API keeps the conversion of a 262k-token vocabulary fast.
PyObject* to_py_raw(const cyb::toml::Value& v) {
  using T = cyb::toml::Value::Type;
  switch (v.type()) {
    case T::Null: Py_RETURN_NONE;
    case T::Bool: return PyBool_FromLong(v.as_bool());
    case T::Int: return PyLong_FromLongLong(v.as_int());
    case T::Float: return PyFloat_FromDouble(v.as_float());
    case T::String:
      return PyUnicode_DecodeUTF8(v.as_string().data(), static_cast<Py_ssize_t>(v.as_string().size()), nullptr);
    case T::Array: {
      PyObject* out = PyList_New(static_cast<Py_ssize_t>(v.as_array().size()));
      if (!out) return nullptr;
      Py_ssize_t i = 0;
      for (const auto& x : v.as_array()) {
        PyObject* item = to_py_raw(x);
        if (!item) {
          Py_DECREF(out);
          return nullptr;
        }
        PyList_SET_ITEM(out, i++, item);  // steals
      }
      return out;
    }
    case T::Table: {
      PyObject* out = PyDict_New();
      if (!out) return nullptr;
      for (const auto& kv : v.as_table()) {
        PyObject* key = PyUnicode_DecodeUTF8(kv.first.data(), static_cast<Py_ssize_t>(kv.first.size()), nullptr);
        PyObject* item = key ? to_py_raw(kv.second) : nullptr;
        int rc = item ? PyDict_SetItem(out, key, item) : -1;
        Py_XDECREF(key);
        Py_XDECREF(item);
        if (rc != 0) {
          Py_DECREF(out);
          return nullptr;
        }
      }
      return out;
    }
  }
  Py_RETURN_NONE;
}

py::object to_py(const cyb::toml::Value& v) {
  PyObject* o = to_py_raw(v);
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(o);
}

const TensorEntry& entry(const ModelFile& mf, const std::string& name) {
  const TensorEntry* e = mf.find(name);
  if (!e) cyb::throw_missing_tensor(name, "ModelFile.tensor");
  return *e;
}

// A read-only numpy array of the tensor. Over bytes the process owns (a file read at open, or
// weights copied into huge pages) it is a view whose base owns a reference to the ModelFile, so
// the bytes live as long as any view of them. Over a mapped file it is a private copy read from
// the descriptor (ModelFile::read_tensor): a truncation of the file cannot reach it (a view of
// the mapping would fault, SIGBUS, when read after one; docs/errors.md).
py::array view(const std::shared_ptr<ModelFile>& mf, const TensorEntry& e, bool raw) {
  py::dtype dt = py::dtype::of<uint8_t>();
  std::vector<py::ssize_t> shape;
  if (raw) {
    shape = {static_cast<py::ssize_t>(e.size)};
  } else if (e.dtype == cyb::DType::F32 || e.dtype == cyb::DType::F16 || cyb::is_int_dtype(e.dtype)) {
    switch (e.dtype) {
      case cyb::DType::F32: dt = py::dtype::of<float>(); break;
      case cyb::DType::F16: dt = py::dtype("float16"); break;
      case cyb::DType::I32: dt = py::dtype::of<int32_t>(); break;
      case cyb::DType::I64: dt = py::dtype::of<int64_t>(); break;
      case cyb::DType::I8: dt = py::dtype::of<int8_t>(); break;
      case cyb::DType::BOOL: dt = py::dtype("bool"); break;
      default: break;
    }
    for (int64_t d : e.shape) shape.push_back(static_cast<py::ssize_t>(d));
  } else {
    // bf16 and block-quantized encodings: raw bytes, one row per innermost row.
    uint64_t row = e.shape.empty() ? e.size : cyb::row_bytes(e.dtype, e.shape.back());
    uint64_t rows = 1;
    for (size_t i = 0; i + 1 < e.shape.size(); ++i) rows *= static_cast<uint64_t>(e.shape[i]);
    shape = {static_cast<py::ssize_t>(rows), static_cast<py::ssize_t>(row)};
  }
  if (mf->weights_in_mapping()) {
    py::array arr(dt, shape);
    {
      py::gil_scoped_release release;
      mf->read_tensor(e, static_cast<uint8_t*>(arr.mutable_data()));
    }
    arr.attr("setflags")(py::arg("write") = false);
    return arr;
  }
  auto* holder = new std::shared_ptr<ModelFile>(mf);
  py::capsule base(holder, [](void* p) { delete static_cast<std::shared_ptr<ModelFile>*>(p); });
  py::array arr(dt, shape, std::vector<py::ssize_t>{}, mf->tensor_data(e), base);
  arr.attr("setflags")(py::arg("write") = false);
  return arr;
}

}  // namespace

void bind_format(py::module_& m) {
  m.def(
      "encodings",
      []() {
        py::list out;
        for (size_t i = 0; i < static_cast<size_t>(cyb::DType::COUNT); ++i) {
          const cyb::DTypeInfo& d = cyb::dtype_info(static_cast<cyb::DType>(i));
          out.append(py::make_tuple(d.encoding, d.name, d.block, d.block_bytes, d.quantized));
        }
        return out;
      },
      "[(encoding, display name, elements per block, bytes per block, quantized)], canonical names in table order.");
  m.def(
      "encoding_aliases",
      []() {
        py::dict out;
        size_t n = 0;
        const cyb::EncodingAlias* a = cyb::encoding_aliases(&n);
        for (size_t i = 0; i < n; ++i) out[py::str(a[i].name)] = py::str(cyb::dtype_info(a[i].t).encoding);
        return out;
      },
      "{alias: canonical encoding} of the alias spellings the reader accepts.");
  m.def(
      "toml_loads",
      [](const std::string& text, const std::string& section) {
        cyb::toml::Value v;
        {
          py::gil_scoped_release release;
          v = cyb::toml::parse(text, section);
        }
        return to_py(v);
      },
      py::arg("text"), py::arg("section") = "", "Parses TOML with the native parser (docs/toml-subset.md).");
  py::class_<ModelFile, std::shared_ptr<ModelFile>>(m, "ModelFile",
                                                    "Native `.model` reader (use cyb_llm.ModelFile)")
      .def_static("open", &ModelFile::open, py::arg("path"), py::call_guard<py::gil_scoped_release>(),
                  "Maps and validates a .model file.")
      .def_static(
          "from_bytes",
          [](const py::bytes& data) {
            std::string_view s = data;
            return ModelFile::from_memory(s.data(), s.size(), "<bytes>");
          },
          py::arg("data"), "Validates a whole .model image held in memory (copied).")
      .def_property_readonly("path", &ModelFile::path)
      .def_property_readonly("section_names", &ModelFile::section_names)
      .def_property_readonly("weights_offset", &ModelFile::weights_offset)
      .def_property_readonly("weights_size", &ModelFile::weights_size)
      .def_property_readonly("file_size", &ModelFile::file_size)
      .def("has_section", &ModelFile::has_section)
      .def("section_text", [](const ModelFile& mf, const std::string& name) { return py::str(mf.section_text(name)); })
      .def("section_toml",
           [](const ModelFile& mf, const std::string& name) {
             cyb::toml::Value v;
             {
               py::gil_scoped_release release;
               v = mf.section_toml(name);
             }
             return to_py(v);
           })
      .def("frontmatter", [](const ModelFile& mf) { return to_py(mf.frontmatter()); })
      .def("config", [](const ModelFile& mf) { return to_py(mf.config()); })
      .def("tensors",
           [](const ModelFile& mf) {
             py::list out;
             for (const TensorEntry& e : mf.tensors()) {
               py::tuple shape(e.shape.size());
               for (size_t i = 0; i < e.shape.size(); ++i) shape[i] = py::int_(e.shape[i]);
               out.append(py::make_tuple(e.name, shape, cyb::dtype_info(e.dtype).encoding, e.offset, e.size));
             }
             return out;
           },
           "[(name, shape, encoding, offset, size)] in index order; encoding is the canonical name.")
      .def(
          "tensor_array",
          [](const std::shared_ptr<ModelFile>& mf, const std::string& name) { return view(mf, entry(*mf, name), false); },
          "Read-only array, typed for f32/f16/i32/i64/u8, uint8 [rows, row_bytes] otherwise: a zero-copy view "
          "of bytes the process owns, a private copy of a mapped file's.")
      .def(
          "tensor_bytes",
          [](const std::shared_ptr<ModelFile>& mf, const std::string& name) { return view(mf, entry(*mf, name), true); },
          "Read-only uint8 array of the tensor's bytes (a view or a private copy, as tensor_array).");
}
