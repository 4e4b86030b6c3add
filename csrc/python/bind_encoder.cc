// Python face of the encoders (families/encoder.h) on _core.Model: is_encoder,
// hidden_size, num_labels, encode, embed, classify, classify_tokens. Arrays are
// [B, T] integer arrays (ids, attention_mask 1/0, token_type_ids or None),
// checked here (TypeError for a non-integer array, ShapeMismatch for shapes);
// the native work runs with the GIL released.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "core/errors.h"
#include "dispatch/op_schema.h"
#include "runtime/model.h"

namespace py = pybind11;
using namespace cyb;

namespace {

// One [B, T] integer input as int32 (copied; values outside int32 are InvalidConfig).
struct IntArg {
  std::vector<int32_t> v;
  int64_t rows = 0, cols = 0;
};

IntArg int_arg(const py::handle& h, const char* what, bool allow_bool) {
  py::array a = py::array::ensure(h);
  if (!a) throw py::type_error(std::string(what) + " must be an array of integers");
  const char kind = a.dtype().kind();
  if (!(kind == 'i' || kind == 'u' || (allow_bool && kind == 'b')))
    throw py::type_error(std::string(what) + " must be an array of integers, not dtype " +
                         std::string(py::str(a.dtype())));
  IntArg r;
  if (a.ndim() != 2) {
    std::vector<int64_t> got;
    for (py::ssize_t i = 0; i < a.ndim(); ++i) got.push_back(static_cast<int64_t>(a.shape(i)));
    throw_shape_mismatch(std::string("encode (") + what + ")", {-1, -1}, got);
  }
  r.rows = a.shape(0);
  r.cols = a.shape(1);
  auto a64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
  if (!a64) throw py::error_already_set();
  const int64_t n = r.rows * r.cols;
  r.v.resize(static_cast<size_t>(n));
  const int64_t* p = a64.data();
  for (int64_t i = 0; i < n; ++i) {
    if (p[i] < INT32_MIN || p[i] > INT32_MAX)
      throw_invalid_config(what, "value " + std::to_string(p[i]) + " does not fit in 32 bits");
    r.v[static_cast<size_t>(i)] = static_cast<int32_t>(p[i]);
  }
  return r;
}

py::array_t<float> run_encode(Model& m, const py::object& ids, const py::object& mask, const py::object& types,
                              EncoderRequest req) {
  if (!m.is_encoder()) {  // the decoder's InvalidConfig, before any argument
    m.encode(EncoderBatch{}, req, nullptr);
  }
  IntArg id = int_arg(ids, "input_ids", false);
  IntArg mk = int_arg(mask, "attention_mask", true);
  if (mk.rows != id.rows || mk.cols != id.cols)
    throw_shape_mismatch("encode (attention_mask)", {id.rows, id.cols}, {mk.rows, mk.cols});
  IntArg ty;
  if (!types.is_none()) {
    ty = int_arg(types, "token_type_ids", false);
    if (ty.rows != id.rows || ty.cols != id.cols)
      throw_shape_mismatch("encode (token_type_ids)", {id.rows, id.cols}, {ty.rows, ty.cols});
  }
  const int64_t B = id.rows, T = id.cols, H = m.hidden_size(), L = m.num_labels();
  std::vector<py::ssize_t> shape;
  switch (req.what) {
    case EncoderOutput::Hidden: shape = {B, T, H}; break;
    case EncoderOutput::Pooled: shape = {B, H}; break;
    case EncoderOutput::SequenceLogits: shape = {B, L}; break;
    case EncoderOutput::TokenLogits: shape = {B, T, L}; break;
  }
  py::array_t<float> out(shape);
  EncoderBatch b;
  b.ids = id.v.data();
  b.mask = mk.v.data();
  b.token_types = types.is_none() ? nullptr : ty.v.data();
  b.batch = B;
  b.len = T;
  float* o = out.mutable_data();
  {
    py::gil_scoped_release release;
    m.encode(b, req, o);
  }
  return out;
}

EncoderRequest request(EncoderOutput what) {
  EncoderRequest r;
  r.what = what;
  return r;
}

}  // namespace

void bind_encoder(py::module_& m) {
  auto cls = py::reinterpret_borrow<py::class_<Model, std::shared_ptr<Model>>>(m.attr("Model"));
  cls.def_property_readonly("is_encoder", &Model::is_encoder, "True for an encoder (bert, roberta, ...).")
      .def_property_readonly("hidden_size", &Model::hidden_size, "Width of the hidden states (0 when unknown).")
      .def_property_readonly("num_labels", &Model::num_labels,
                             "Labels of the encoder's classification head (0 without one).")
      .def(
          "encode",
          [](Model& mm, py::object ids, py::object attention_mask, py::object token_type_ids) {
            return run_encode(mm, ids, attention_mask, token_type_ids, request(EncoderOutput::Hidden));
          },
          py::arg("ids"), py::arg("attention_mask"), py::arg("token_type_ids") = py::none(),
          "Final hidden states float32[B, T, hidden] of int ids[B, T] (attention_mask: 1 token, 0 padding).")
      .def(
          "embed",
          [](Model& mm, py::object ids, py::object attention_mask, py::object token_type_ids,
             const std::string& pooling, bool normalize) {
            EncoderRequest r = request(EncoderOutput::Pooled);
            // the masked_pool op's own mode names (its schema row is their one definition)
            r.pool_mode = attr_choice(*op_schema(OpKind::MaskedPool).attr("mode"), pooling.c_str());
            if (r.pool_mode < 0) throw_invalid_config("pooling", "'" + pooling + "' is not a pooling mode (cls, mean, max)");
            r.normalize = normalize;
            return run_encode(mm, ids, attention_mask, token_type_ids, r);
          },
          py::arg("ids"), py::arg("attention_mask"), py::arg("token_type_ids") = py::none(),
          py::arg("pooling") = "mean", py::arg("normalize") = false,
          "Pooled (masked_pool) and optionally L2-normalized embeddings float32[B, hidden].")
      .def(
          "classify",
          [](Model& mm, py::object ids, py::object attention_mask, py::object token_type_ids) {
            return run_encode(mm, ids, attention_mask, token_type_ids, request(EncoderOutput::SequenceLogits));
          },
          py::arg("ids"), py::arg("attention_mask"), py::arg("token_type_ids") = py::none(),
          "Sequence classification logits float32[B, num_labels].")
      .def(
          "classify_tokens",
          [](Model& mm, py::object ids, py::object attention_mask, py::object token_type_ids) {
            return run_encode(mm, ids, attention_mask, token_type_ids, request(EncoderOutput::TokenLogits));
          },
          py::arg("ids"), py::arg("attention_mask"), py::arg("token_type_ids") = py::none(),
          "Token classification logits float32[B, T, num_labels].");
}
