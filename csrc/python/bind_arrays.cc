// Model.run: the named-array entry point (model/model.h) as a dict of numpy
// arrays in, a dict of numpy arrays out.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "core/errors.h"
#include "core/host_array.h"
#include "runtime/model.h"

namespace py = pybind11;
using namespace cyb;

namespace {

struct NumpyKind {
  DType dtype;
  const char* numpy;  // numpy's name of the element type
  char kind;          // numpy's dtype.kind and dtype.itemsize of it
  int size;
};
// The element types a named-array model exchanges.
const NumpyKind kKinds[] = {{DType::F32, "float32", 'f', 4}, {DType::F16, "float16", 'f', 2},
                            {DType::I32, "int32", 'i', 4},   {DType::I64, "int64", 'i', 8},
                            {DType::U8, "uint8", 'u', 1},    {DType::I8, "int8", 'i', 1},
                            {DType::BOOL, "bool", 'b', 1}};

// The dtype of an element type, from numpy's type numbers (no parse of its name: a call converts
// every output, and Silero's call is ~0.1 ms)
py::dtype dtype_of(DType dt) {
  switch (dt) {
    case DType::F32: return py::dtype::of<float>();
    case DType::I32: return py::dtype::of<int32_t>();
    case DType::I64: return py::dtype::of<int64_t>();
    case DType::U8: return py::dtype::of<uint8_t>();
    case DType::I8: return py::dtype::of<int8_t>();
    case DType::BOOL: return py::dtype::of<bool>();
    default: return py::dtype("float16");
  }
}

HostArray to_host(const std::string& name, const py::handle& value) {
  py::array a = py::array::ensure(value);
  if (!a) throw_invalid_config("inputs['" + name + "']", "must be an array (numpy or a nested list of numbers)");
  const py::dtype dt = a.dtype();
  const char kind = dt.kind();
  const int size = static_cast<int>(dt.itemsize());
  for (const NumpyKind& k : kKinds) {
    if (kind != k.kind || size != k.size) continue;
    // numpy names a byte-swapped array ('>f4' here) like a native one: its values in native order
    // (copied bytes as they are would be other numbers); '=' and '|' are native
    const char order = dt.byteorder();
    if (order != '=' && order != '|' && !dt.attr("isnative").cast<bool>())
      a = py::array(a.attr("astype")(py::dtype(k.numpy)));
    a = py::array::ensure(a, py::array::c_style);
    HostArray h;
    h.dtype = k.dtype;
    h.shape.assign(a.shape(), a.shape() + a.ndim());
    h.data.resize(static_cast<size_t>(a.nbytes()));
    if (a.nbytes()) std::memcpy(h.data.data(), a.data(), h.data.size());
    return h;
  }
  throw_invalid_config("inputs['" + name + "']", "dtype " + std::string(py::str(dt.attr("name"))) +
                                                     " is not accepted (float32, float16, int32, int64, int8, uint8, bool)");
}

py::array to_numpy(const HostArray& h) {
  for (const NumpyKind& k : kKinds) {
    if (h.dtype != k.dtype) continue;
    py::array a(dtype_of(k.dtype), h.shape);
    if (!h.data.empty()) std::memcpy(a.mutable_data(), h.data.data(), h.data.size());
    return a;
  }
  throw_invalid_config("outputs", std::string("the model returned an array of dtype ") + dtype_info(h.dtype).name);
}

}  // namespace

void bind_arrays(py::module_& m) {
  auto cls = py::reinterpret_borrow<py::class_<Model, std::shared_ptr<Model>>>(m.attr("Model"));
  cls.def(
      "run",
      [](Model& mm, const py::dict& feeds, const py::object& seed) {
        RunOptions opts;
        if (!seed.is_none()) {
          if (!py::isinstance<py::int_>(seed) || py::isinstance<py::bool_>(seed))
            throw_invalid_config("seed", "must be an integer or None");
          const py::int_ s = seed.cast<py::int_>();
          if (s < py::int_(0) || s > py::int_(py::module_::import("sys").attr("maxsize")) * py::int_(2) + py::int_(1))
            throw_invalid_config("seed", "must be in [0, 2^64)");
          opts.has_seed = true;
          opts.seed = seed.cast<uint64_t>();
        }
        NamedArrays in;
        for (auto item : feeds) {
          const std::string name = py::str(item.first);
          in.emplace_back(name, to_host(name, item.second));
        }
        NamedArrays out;
        {
          py::gil_scoped_release nogil;
          out = mm.run(in, opts);
        }
        py::dict result;
        for (const auto& [name, h] : out) result[py::str(name)] = to_numpy(h);
        return result;
      },
      py::arg("feeds"), py::arg("seed") = py::none(),
      "The named-array entry point: {name: array} in, {name: array} out (pipelines that are not "
      "token streams); InvalidConfig for a model without one. seed: the random ops' seed for this "
      "run (None: the seeds the graph holds).");
}
