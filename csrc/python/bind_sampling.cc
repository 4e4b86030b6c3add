// cyb_llm._core.Sampler and top_logprobs: the native half of cyb_llm.sampling.
// Logits come in as float32 numpy arrays without a copy (other dtypes or
// strided views are converted once by pybind11).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "core/errors.h"
#include "sampling/sampler.h"

namespace py = pybind11;

namespace {

using F32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;

const float* row(const F32Array& a, int64_t* n) {
  if (a.ndim() != 1) cyb::throw_shape_mismatch("sample", {-1}, std::vector<int64_t>(a.shape(), a.shape() + a.ndim()));
  *n = a.shape(0);
  return a.data();
}

}  // namespace

void bind_sampling(py::module_& m) {
  py::class_<cyb::Sampler>(m, "Sampler", R"doc(
Native token sampler: penalties -> temperature -> top-k -> top-p -> min-p -> draw.
Owns its penalty history and a seeded RNG (same seed, same logits -> same tokens).
)doc")
      .def(py::init([](float temperature, int32_t top_k, float top_p, float min_p, float repetition_penalty,
                       float presence_penalty, float frequency_penalty, int32_t penalty_last_n, uint64_t seed) {
             cyb::SamplingConfig c;
             c.temperature = temperature;
             c.top_k = top_k;
             c.top_p = top_p;
             c.min_p = min_p;
             c.repetition_penalty = repetition_penalty;
             c.presence_penalty = presence_penalty;
             c.frequency_penalty = frequency_penalty;
             c.penalty_last_n = penalty_last_n;
             c.seed = seed;
             return new cyb::Sampler(c);
           }),
           py::kw_only(), py::arg("temperature") = 1.0f, py::arg("top_k") = 0, py::arg("top_p") = 1.0f,
           py::arg("min_p") = 0.0f, py::arg("repetition_penalty") = 1.0f, py::arg("presence_penalty") = 0.0f,
           py::arg("frequency_penalty") = 0.0f, py::arg("penalty_last_n") = 64, py::arg("seed") = 0)
      .def(
          "sample",
          [](cyb::Sampler& s, const F32Array& logits, bool accept) {
            int64_t n;
            const float* p = row(logits, &n);
            int32_t tok;
            {
              py::gil_scoped_release nogil;
              tok = s.sample(p, n);
              if (accept) s.accept(tok);
            }
            return tok;
          },
          py::arg("logits"), py::arg("accept") = true,
          "Draw one token id from a [vocab] float32 row; appends it to the history unless accept=False.")
      .def(
          "accept", [](cyb::Sampler& s, int32_t tok) { s.accept(tok); }, py::arg("token"))
      .def(
          "accept_many",
          [](cyb::Sampler& s, const std::vector<int32_t>& ids) { s.accept(ids.data(), ids.size()); },
          py::arg("ids"), "Append token ids (e.g. the prompt) to the penalty history.")
      .def(
          "reset", [](cyb::Sampler& s, uint64_t seed) { s.reset(seed); }, py::arg("seed"),
          "Clear the history and restart the RNG from seed.")
      .def_property_readonly("history", [](const cyb::Sampler& s) { return s.history(); })
      .def_property_readonly("seed", [](const cyb::Sampler& s) { return s.config().seed; })
      .def(
          "process",
          [](cyb::Sampler& s, const F32Array& logits) {
            int64_t n;
            const float* p = row(logits, &n);
            F32Array out(n);
            s.process(p, n, out.mutable_data());
            return out;
          },
          py::arg("logits"), "Processed logits after every stage (removed tokens at -inf); draws nothing.")
      .def(
          "probs",
          [](cyb::Sampler& s, const F32Array& logits) {
            int64_t n;
            const float* p = row(logits, &n);
            F32Array out(n);
            s.probs(p, n, out.mutable_data());
            return out;
          },
          py::arg("logits"), "The distribution the draw uses (softmax of process()).");

  m.def(
      "top_logprobs",
      [](const F32Array& logits, int32_t token, int32_t k) {
        int64_t n;
        const float* p = row(logits, &n);
        float lp = 0;
        py::array_t<int32_t> ids(k < 0 ? 0 : k);
        F32Array lps(k < 0 ? 0 : k);
        cyb::top_logprobs(p, n, token, k, &lp, ids.mutable_data(), lps.mutable_data());
        return py::make_tuple(lp, ids, lps);
      },
      py::arg("logits"), py::arg("token"), py::arg("k") = 0,
      "log-softmax of a [vocab] row: (logprob of token, top-k ids, their logprobs), descending.");
}
