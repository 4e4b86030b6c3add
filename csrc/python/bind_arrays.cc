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
};
// The element types a named-array model exchanges.
const NumpyKind kKinds[] = {{DType::F32, "float32"}, {DType::F16, "float16"}, {DType::I32, "int32"},
                            {DType::I64, "int64"},   {DType::U8, "uint8"},    {DType::I8, "int8"},
                            {DType::BOOL, "bool"}};

HostArray to_host(const std::string& name, const py::handle& value) {
  py::array a = py::array::ensure(value);
  if (!a) throw_invalid_config("inputs['" + name + "']", "must be an array (numpy or a nested list of numbers)");
  std::string kind = py::str(a.dtype().attr("name"));
  for (const NumpyKind& k : kKinds) {
    if (kind != k.numpy) continue;
    // numpy names a byte-swapped array ('>f4' here) like a native one: its values in native order
    // (copied bytes as they are would be other numbers)
    if (!a.dtype().attr("isnative").cast<bool>()) a = py::array(a.attr("astype")(py::dtype(k.numpy)));
    a = py::array::ensure(a, py::array::c_style);
    HostArray h;
    h.dtype = k.dtype;
    h.shape.assign(a.shape(), a.shape() + a.ndim());
    h.data.resize(static_cast<size_t>(a.nbytes()));
    if (a.nbytes()) std::memcpy(h.data.data(), a.data(), h.data.size());
    return h;
  }
  throw_invalid_config("inputs['" + name + "']",
                       "dtype " + kind + " is not accepted (float32, float16, int32, int64, int8, uint8, bool)");
}

py::array to_numpy(const HostArray& h) {
  for (const NumpyKind& k : kKinds) {
    if (h.dtype != k.dtype) continue;
    py::array a(py::dtype(k.numpy), h.shape);
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
