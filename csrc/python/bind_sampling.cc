// cyb_llm._core.Sampler and top_logprobs: the native half of cyb_llm.sampling.
// Logits come in as float32 numpy arrays without a copy (other dtypes or
// strided views are converted once by pybind11).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/wgpu/wgpu_backend.h"
#include "core/errors.h"
#include "model/model.h"
#include "sampling/beam.h"
#include "sampling/sampler.h"

namespace py = pybind11;

namespace {

using F32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;

const float* row(const F32Array& a, int64_t* n) {
  if (a.ndim() != 1) cyb::throw_shape_mismatch("sample", {-1}, std::vector<int64_t>(a.shape(), a.shape() + a.ndim()));
  *n = a.shape(0);
  return a.data();
}

// The allowed-token mask of one draw: None, or a 1-D C-contiguous uint32 (or
// int32, as llguidance's numpy helpers allocate) array of ceil(n / 32) words.
// `keep` holds the array while the GIL is released.
const uint32_t* mask_of(const py::object& allowed, int64_t n, py::array* keep) {
  if (allowed.is_none()) return nullptr;
  if (!py::isinstance<py::array>(allowed))
    cyb::throw_invalid_config("allowed", "must be a numpy uint32 array of ceil(vocab / 32) words or None, got " +
                                             std::string(py::str(py::type::of(allowed).attr("__name__"))));
  *keep = py::reinterpret_borrow<py::array>(allowed);
  const py::dtype dt = keep->dtype();
  if (dt.itemsize() != 4 || (dt.kind() != 'u' && dt.kind() != 'i'))
    cyb::throw_invalid_config("allowed", "must be a uint32 (or int32) bitset, got dtype " +
                                             std::string(py::str(py::object(dt))));
  const int64_t words = cyb::Sampler::mask_words(n);
  if (keep->ndim() != 1 || keep->shape(0) != words)
    cyb::throw_shape_mismatch("allowed (ceil(vocab / 32) words)", {words},
                              std::vector<int64_t>(keep->shape(), keep->shape() + keep->ndim()));
  if (!(keep->flags() & py::array::c_style))
    cyb::throw_invalid_config("allowed", "must be a contiguous array");
  return static_cast<const uint32_t*>(keep->data());
}

// The beam rows of forward_batch_beam / wgpu_beam_rows: masks None or uint32 [rows, ceil(n / 32)];
// one check flag and one cumulative log-probability a row.
std::vector<cyb::BeamRow> beam_rows_of(const py::object& masks, const std::vector<bool>& checks,
                                       const std::vector<float>& cums, int64_t rows, int64_t n, py::array* keep) {
  if (static_cast<int64_t>(checks.size()) != rows)
    cyb::throw_shape_mismatch("beam (one check flag a row)", {rows}, {static_cast<int64_t>(checks.size())});
  if (static_cast<int64_t>(cums.size()) != rows)
    cyb::throw_shape_mismatch("beam (one cumulative log-probability a row)", {rows},
                              {static_cast<int64_t>(cums.size())});
  const int64_t words = cyb::Sampler::mask_words(n);
  const uint32_t* mk = nullptr;
  if (!masks.is_none()) {
    *keep = py::array_t<uint32_t, py::array::c_style | py::array::forcecast>::ensure(masks);
    if (!*keep || keep->ndim() != 2 || keep->shape(0) != rows || keep->shape(1) != words)
      cyb::throw_shape_mismatch("beam (masks: uint32 [rows, ceil(vocab / 32)])", {rows, words},
                                *keep ? std::vector<int64_t>(keep->shape(), keep->shape() + keep->ndim())
                                      : std::vector<int64_t>{});
    mk = static_cast<const uint32_t*>(keep->data());
  }
  std::vector<cyb::BeamRow> rs(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    if (!std::isfinite(cums[static_cast<size_t>(r)]))
      cyb::throw_invalid_config("cums", "row " + std::to_string(r) + ": not finite");
    rs[static_cast<size_t>(r)] = {mk ? mk + r * words : nullptr, cums[static_cast<size_t>(r)], static_cast<bool>(checks[static_cast<size_t>(r)])};
  }
  return rs;
}

// The merged candidates as (rows, tokens, scores) arrays, best first.
py::tuple beam_picks(const std::vector<cyb::BeamPick>& picks) {
  const auto n = static_cast<py::ssize_t>(picks.size());
  py::array_t<int32_t> rows(n), tokens(n);
  py::array_t<float> scores(n);
  for (py::ssize_t i = 0; i < n; ++i) {
    rows.mutable_data()[i] = picks[static_cast<size_t>(i)].row;
    tokens.mutable_data()[i] = picks[static_cast<size_t>(i)].token;
    scores.mutable_data()[i] = picks[static_cast<size_t>(i)].score;
  }
  return py::make_tuple(rows, tokens, scores);
}

// The result of the rows' candidates: InvalidConfig("logits") for a row with a
// non-finite logit, else the merged picks.
py::tuple beam_result(const std::vector<float>& score, const std::vector<int32_t>& token,
                      const std::vector<int64_t>& nonfinite, int32_t k) {
  for (size_t r = 0; r < nonfinite.size(); ++r)
    if (nonfinite[r] >= 0)
      cyb::throw_invalid_config("logits", "row " + std::to_string(r) + ": NaN or Inf at token " +
                                              std::to_string(nonfinite[r]));
  return beam_picks(cyb::merge_beam_rows(score.data(), token.data(), static_cast<int64_t>(nonfinite.size()), k));
}

// The kernel tests' wgpu+rs backend (one for the process, one caller at a time): run(backend, t,
// ctx) on float32 [rows, n] logits uploaded as t, inside a forward of its own.
template <class F>
void on_test_wgpu(const float* logits, int64_t rows, int64_t n, F&& run) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lk(mu);
  static std::unique_ptr<cyb::Backend> be = cyb::make_wgpu_backend(true);
  cyb::ExecContext ctx(nullptr, true);
  be->begin_forward(ctx);
  cyb::Tensor t = be->upload(logits, cyb::Shape{rows, n}, cyb::DType::F32);
  try {
    run(*be, t, ctx);
  } catch (...) {
    be->release(t);
    throw;
  }
  be->end_forward(ctx);
  be->release(t);
}

void set_bias(cyb::Sampler& s, const std::map<int64_t, double>& bias) {
  std::vector<int32_t> ids;
  std::vector<float> values;
  for (const auto& [tok, b] : bias) {
    if (tok < 0 || tok > std::numeric_limits<int32_t>::max())
      cyb::throw_invalid_config("logit_bias", "token id " + std::to_string(tok) + " is outside [0, 2**31)");
    ids.push_back(static_cast<int32_t>(tok));
    values.push_back(static_cast<float>(b));  // beyond the f32 range: inf, refused by set_logit_bias
  }
  s.set_logit_bias(ids.data(), values.data(), ids.size());
}

// What a device kernel runs for this sampler (docs/generation.md, "Sampling on the
// GPU"): its stages, the uniform it would draw next and the checked mask.
cyb::DeviceSampling device_params(cyb::Sampler& s, const uint32_t* mask, int64_t n) {
  if (!s.device_ok())
    cyb::throw_invalid_config("sampler", "a logit bias or penalties run on the host sampler only: sample the "
                                         "logits with Sampler.sample");
  if (mask) cyb::Sampler::check_mask(mask, n);
  const cyb::SamplingConfig& c = s.config();
  cyb::DeviceSampling d;
  d.temperature = c.temperature;
  d.top_k = c.top_k;
  d.top_p = c.top_p;
  d.min_p = c.min_p;
  d.uniform = static_cast<float>(s.peek_uniform());
  d.allowed = mask;
  return d;
}

// After a device draw: the uniform taken when the kernel used it, the token in the history.
void after_draw(cyb::Sampler& s, const cyb::DeviceDraw& d) {
  if (d.used_uniform) s.take_uniform();
  s.accept(d.token);
}

// forward_sample(_submit)'s arguments: the device sampling parameters (with the uniform after
// the next one, which a chained draw takes when its predecessor used the next: backend.h) and
// the ids (empty: the token drawn last, on the device); `keep` holds the mask's array.
struct SampleArgs {
  py::array keep;
  cyb::DeviceSampling d;
  std::vector<int32_t> ids;
};
SampleArgs sample_args(cyb::Model& model, const py::object& ids, cyb::Sampler& s, const py::object& allowed,
                       const char* what) {
  SampleArgs a;
  const int64_t V = model.vocab_size();
  const uint32_t* mask = mask_of(allowed, V, &a.keep);
  a.d = device_params(s, mask, V);
  a.d.uniform_if_used = static_cast<float>(s.peek_uniform(1));
  if (!ids.is_none()) {
    a.ids = ids.cast<std::vector<int32_t>>();
    if (a.ids.empty()) cyb::throw_shape_mismatch(std::string(what) + " (ids)", {1}, {0});
  }
  return a;
}

}  // namespace

void bind_sampling(py::module_& m) {
  py::class_<cyb::Sampler>(m, "Sampler", R"doc(
Native token sampler: logit bias -> allowed-token mask -> penalties -> temperature -> top-k ->
top-p -> min-p -> draw. Owns its penalty history and a seeded RNG (same seed, same logits ->
same tokens). `logit_bias`: {token id: additive bias}, applied to every draw. The mask
(`allowed=` of sample/process/probs) is a numpy uint32 bitset of ceil(vocab / 32) words, bit
i % 32 of word i // 32 set when token i may be drawn; a mask allowing nothing is InvalidConfig.
)doc")
      .def(py::init([](float temperature, int32_t top_k, float top_p, float min_p, float repetition_penalty,
                       float presence_penalty, float frequency_penalty, int32_t penalty_last_n, uint64_t seed,
                       const std::optional<std::map<int64_t, double>>& logit_bias) {
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
             auto s = std::make_unique<cyb::Sampler>(c);
             if (logit_bias) set_bias(*s, *logit_bias);
             return s.release();
           }),
           py::kw_only(), py::arg("temperature") = 1.0f, py::arg("top_k") = 0, py::arg("top_p") = 1.0f,
           py::arg("min_p") = 0.0f, py::arg("repetition_penalty") = 1.0f, py::arg("presence_penalty") = 0.0f,
           py::arg("frequency_penalty") = 0.0f, py::arg("penalty_last_n") = 64, py::arg("seed") = 0,
           py::arg("logit_bias") = py::none())
      .def(
          "sample",
          [](cyb::Sampler& s, const F32Array& logits, bool accept, const py::object& allowed) {
            int64_t n;
            const float* p = row(logits, &n);
            py::array keep;
            const uint32_t* mask = mask_of(allowed, n, &keep);
            int32_t tok;
            {
              py::gil_scoped_release nogil;
              tok = s.sample(p, n, mask);
              if (accept) s.accept(tok);
            }
            return tok;
          },
          py::arg("logits"), py::arg("accept") = true, py::arg("allowed") = py::none(),
          "Draw one token id from a [vocab] float32 row; appends it to the history unless accept=False.\n"
          "allowed: None or a uint32 bitset of ceil(vocab / 32) words (only tokens whose bit is set can be drawn).")
      .def(
          "accept", [](cyb::Sampler& s, int32_t tok) { s.accept(tok); }, py::arg("token"))
      .def(
          "accept_many",
          [](cyb::Sampler& s, const std::vector<int32_t>& ids) { s.accept(ids.data(), ids.size()); },
          py::arg("ids"), "Append token ids (e.g. the prompt) to the penalty history.")
      .def(
          "reset", [](cyb::Sampler& s, uint64_t seed) { s.reset(seed); }, py::arg("seed"),
          "Clear the history and restart the RNG from seed.")
      .def("peek_uniform", &cyb::Sampler::peek_uniform,
           "The uniform draw in [0, 1) the next sample would use, without taking it (device sampling, tests).")
      .def_property_readonly("history", [](const cyb::Sampler& s) { return s.history(); })
      .def_property_readonly("seed", [](const cyb::Sampler& s) { return s.config().seed; })
      .def_property(
          "logit_bias",
          [](const cyb::Sampler& s) {
            std::map<int32_t, float> out;
            for (const auto& [tok, b] : s.logit_bias()) out[tok] += b;
            return out;
          },
          [](cyb::Sampler& s, const std::optional<std::map<int64_t, double>>& bias) {
            set_bias(s, bias ? *bias : std::map<int64_t, double>{});
          },
          "{token id: additive bias} applied before every other stage of each draw.")
      .def(
          "process",
          [](cyb::Sampler& s, const F32Array& logits, const py::object& allowed) {
            int64_t n;
            const float* p = row(logits, &n);
            py::array keep;
            const uint32_t* mask = mask_of(allowed, n, &keep);
            F32Array out(n);
            s.process(p, n, out.mutable_data(), mask);
            return out;
          },
          py::arg("logits"), py::arg("allowed") = py::none(), "Processed logits after every stage (removed tokens at -inf); draws nothing.")
      .def(
          "probs",
          [](cyb::Sampler& s, const F32Array& logits, const py::object& allowed) {
            int64_t n;
            const float* p = row(logits, &n);
            py::array keep;
            const uint32_t* mask = mask_of(allowed, n, &keep);
            F32Array out(n);
            s.probs(p, n, out.mutable_data(), mask);
            return out;
          },
          py::arg("logits"), py::arg("allowed") = py::none(), "The distribution the draw uses (softmax of process()).");

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

  m.def(
      "top_indices",
      [](const F32Array& values, int32_t k) {
        if (values.ndim() != 1) cyb::throw_shape_mismatch("top_indices (values)", {-1}, {static_cast<int64_t>(values.ndim())});
        const int64_t n = values.shape(0);
        py::array_t<int32_t> out(k < 0 || k > n ? 0 : k);
        cyb::top_indices(values.data(), n, k, out.mutable_data());
        return out;
      },
      py::arg("values"), py::arg("k"),
      "The indices of the k largest of a float32 [n] array (k <= n), best first; ties by lower index, NaN "
      "below every number.");
  m.def(
      "forward_batch_beam",
      [](cyb::Model& model, const std::vector<cyb::Conversation*>& convs, const std::vector<int32_t>& ids,
         const py::object& masks, const std::vector<bool>& checks, const std::vector<float>& cums, int64_t ts_begin,
         int64_t ts_end, int32_t k) {
        const int64_t n = static_cast<int64_t>(convs.size()), V = model.vocab_size();
        if (static_cast<int64_t>(ids.size()) != n)
          cyb::throw_shape_mismatch("forward_batch_beam (one id per conversation)", {n},
                                    {static_cast<int64_t>(ids.size())});
        py::array keep;
        const std::vector<cyb::BeamRow> rs = beam_rows_of(masks, checks, cums, n, V, &keep);
        const cyb::BeamSpec spec{ts_begin, ts_end, k};
        std::vector<float> score(static_cast<size_t>(std::max<int64_t>(n, 0) * std::max(k, 0)));
        std::vector<int32_t> token(score.size());
        std::vector<cyb::BeamPick> picks;
        {
          py::gil_scoped_release nogil;
          model.forward_batch_beam(convs.data(), ids.data(), n, rs.data(), spec, score.data(), token.data());
          picks = cyb::merge_beam_rows(score.data(), token.data(), n, k);
        }
        return beam_picks(picks);
      },
      py::arg("model"), py::arg("conversations"), py::arg("ids"), py::arg("masks"), py::arg("checks"),
      py::arg("cums"), py::arg("ts_begin"), py::arg("ts_end"), py::arg("k"),
      "One decode step of several conversations (forward_batch) and the beam candidates of their rows taken on\n"
      "the device (model.device_beams(); csrc/sampling/beam.h): row i masked by masks[i] (uint32 [n, ceil(vocab /\n"
      "32)] bitsets, or None), the timestamp check over [ts_begin, ts_end) where checks[i], log-softmax plus\n"
      "cums[i]; the best k of all rows as (rows, tokens, scores), best first (ties: lower row, then lower token);\n"
      "only those come back. Same checks and roll-back as forward_batch.");
  m.def(
      "device_sampling_ok", [](const cyb::Sampler& s) { return s.device_ok(); }, py::arg("sampler"),
      "True when a device kernel can run this sampler's stages (no logit bias, no penalties).");
  m.def(
      "forward_sample",
      [](cyb::Model& model, cyb::Conversation& conv, const py::object& ids, cyb::Sampler& s,
         const py::object& allowed) {
        const SampleArgs a = sample_args(model, ids, s, allowed, "forward_sample");
        cyb::DeviceDraw r;
        {
          py::gil_scoped_release nogil;
          r = model.forward_sample(conv, a.ids.empty() ? nullptr : a.ids.data(),
                                   a.ids.empty() ? 1 : static_cast<int64_t>(a.ids.size()), a.d);
          after_draw(s, r);
        }
        return r.token;
      },
      py::arg("model"), py::arg("conversation"), py::arg("ids"), py::arg("sampler"), py::arg("allowed") = py::none(),
      "Forward ids (None: the token the last forward_sample drew, still on the device), then draw the next token\n"
      "on the device with the sampler's stages, RNG stream and history (docs/generation.md, \"Sampling on the GPU\").\n"
      "InvalidConfig when the model cannot (model.device_sampling) or the sampler has a logit bias or penalties.");
  m.def(
      "forward_sample_submit",
      [](cyb::Model& model, cyb::Conversation& conv, const py::object& ids, cyb::Sampler& s,
         const py::object& allowed) {
        const SampleArgs a = sample_args(model, ids, s, allowed, "forward_sample_submit");
        py::gil_scoped_release nogil;
        model.forward_sample_submit(conv, a.ids.empty() ? nullptr : a.ids.data(),
                                    a.ids.empty() ? 1 : static_cast<int64_t>(a.ids.size()), a.d);
      },
      py::arg("model"), py::arg("conversation"), py::arg("ids"), py::arg("sampler"), py::arg("allowed") = py::none(),
      "forward_sample's first half: the forward and its draw submitted, nothing waits (the host records the next\n"
      "step while the device runs this one). forward_sample_take reads the draw; at most one may be pending when\n"
      "this is called, and a pending draw's successor takes its uniform from the stream as if it had been read\n"
      "(docs/generation.md, \"Sampling on the GPU\").");
  m.def(
      "forward_sample_take",
      [](cyb::Model& model, cyb::Conversation& conv, cyb::Sampler& s) {
        cyb::DeviceDraw r;
        {
          py::gil_scoped_release nogil;
          r = model.forward_sample_take(conv);
          after_draw(s, r);
        }
        return r.token;
      },
      py::arg("model"), py::arg("conversation"), py::arg("sampler"),
      "The oldest pending draw of forward_sample_submit (waits for that step only); the sampler takes its uniform\n"
      "and history as forward_sample's would. FormatError when that step's logits were not finite (the\n"
      "conversation is rolled back to it and a later pending step dropped).");
  m.def(
      "pending_draws", [](const cyb::Conversation& conv) { return cyb::Model::pending_draws(conv); },
      py::arg("conversation"), "Draws of forward_sample_submit not taken yet.");
  m.def(
      "forward_batch_sample",
      [](cyb::Model& model, const std::vector<cyb::Conversation*>& convs, const std::vector<int32_t>& ids,
         const std::vector<cyb::Sampler*>& samplers, const std::vector<py::object>& allowed) {
        const int64_t n = static_cast<int64_t>(convs.size()), V = model.vocab_size();
        if (static_cast<int64_t>(ids.size()) != n)
          cyb::throw_shape_mismatch("forward_batch_sample (one id per conversation)", {n},
                                    {static_cast<int64_t>(ids.size())});
        if (static_cast<int64_t>(samplers.size()) != n)
          cyb::throw_shape_mismatch("forward_batch_sample (one sampler per conversation)", {n},
                                    {static_cast<int64_t>(samplers.size())});
        if (static_cast<int64_t>(allowed.size()) != n)
          cyb::throw_shape_mismatch("forward_batch_sample (one mask or None per conversation)", {n},
                                    {static_cast<int64_t>(allowed.size())});
        std::vector<py::array> keep(static_cast<size_t>(n));
        std::vector<cyb::DeviceSampling> ds;
        for (int64_t i = 0; i < n; ++i) {
          cyb::Sampler* s = samplers[static_cast<size_t>(i)];
          if (!s) cyb::throw_invalid_config("samplers", "sampler " + std::to_string(i) + " is None");
          ds.push_back(device_params(*s, mask_of(allowed[static_cast<size_t>(i)], V, &keep[static_cast<size_t>(i)]), V));
        }
        std::vector<cyb::DeviceDraw> out(static_cast<size_t>(n));
        {
          py::gil_scoped_release nogil;
          model.forward_batch_sample(convs.data(), ids.data(), n, ds.data(), out.data());
          for (int64_t i = 0; i < n; ++i) after_draw(*samplers[static_cast<size_t>(i)], out[static_cast<size_t>(i)]);
        }
        std::vector<int32_t> tokens;
        for (const cyb::DeviceDraw& d : out) tokens.push_back(d.token);
        return tokens;
      },
      py::arg("model"), py::arg("conversations"), py::arg("ids"), py::arg("samplers"), py::arg("allowed"),
      "One decode step of several conversations (forward_batch) with each next token drawn on the device by its\n"
      "sampler (and its allowed-token mask, or None): the logits never come back (docs/generation.md, \"Sampling\n"
      "on the GPU\"). InvalidConfig when the model cannot (model.device_sampling) or a sampler has a logit bias\n"
      "or penalties.");
  m.def(
      "wgpu_sample_rows",
      [](const py::array_t<float, py::array::c_style | py::array::forcecast>& logits,
         const std::vector<cyb::Sampler*>& samplers, const py::object& masks) {
        if (logits.ndim() != 2)
          cyb::throw_shape_mismatch("wgpu_sample_rows", {-1, -1},
                                    std::vector<int64_t>(logits.shape(), logits.shape() + logits.ndim()));
        const int64_t rows = logits.shape(0), n = logits.shape(1);
        if (static_cast<int64_t>(samplers.size()) != rows)
          cyb::throw_shape_mismatch("wgpu_sample_rows (one sampler a row)", {rows},
                                    {static_cast<int64_t>(samplers.size())});
        const int64_t words = cyb::Sampler::mask_words(n);
        py::array keep;
        const uint32_t* mk = nullptr;
        if (!masks.is_none()) {
          keep = py::array_t<uint32_t, py::array::c_style | py::array::forcecast>::ensure(masks);
          if (!keep || keep.ndim() != 2 || keep.shape(0) != rows || keep.shape(1) != words)
            cyb::throw_shape_mismatch("wgpu_sample_rows (masks)", {rows, words}, {});
          mk = static_cast<const uint32_t*>(keep.data());
        }
        std::vector<cyb::DeviceSampling> ds;
        for (int64_t r = 0; r < rows; ++r) {
          if (!samplers[static_cast<size_t>(r)]) cyb::throw_invalid_config("samplers", "None");
          ds.push_back(device_params(*samplers[static_cast<size_t>(r)], mk ? mk + r * words : nullptr, n));
        }
        std::vector<cyb::DeviceDraw> out(static_cast<size_t>(rows));
        {
          py::gil_scoped_release nogil;
          on_test_wgpu(logits.data(), rows, n, [&](cyb::Backend& be, const cyb::Tensor& t, cyb::ExecContext& ctx) {
            be.sample_rows(t, ds.data(), out.data(), rows, ctx);
          });
        }
        std::vector<int32_t> tokens;
        for (int64_t r = 0; r < rows; ++r) {
          const cyb::DeviceDraw& d = out[static_cast<size_t>(r)];
          if (d.first_nan >= 0)  // the host sampler's error
            cyb::throw_invalid_config("logits", "NaN at token " + std::to_string(d.first_nan) +
                                                    " (the model produced non-finite output)");
          after_draw(*samplers[static_cast<size_t>(r)], d);
          tokens.push_back(d.token);
        }
        return tokens;
      },
      py::arg("logits"), py::arg("samplers"), py::arg("masks") = py::none(),
      "The wgpu+rs sampling kernel on rows of logits [rows, n] (tests): row r drawn with samplers[r] (its stages,\n"
      "next uniform and history, as Sampler.sample would), masks None or [rows, ceil(n / 32)] uint32.");
  m.def(
      "wgpu_beam_rows",
      [](const F32Array& logits, const py::object& masks, const std::vector<bool>& checks,
         const std::vector<float>& cums, int64_t ts_begin, int64_t ts_end, int32_t k) {
        if (logits.ndim() != 2 || logits.shape(0) < 1)
          cyb::throw_shape_mismatch("wgpu_beam_rows (logits)", {-1, -1},
                                    std::vector<int64_t>(logits.shape(), logits.shape() + logits.ndim()));
        const int64_t rows = logits.shape(0), n = logits.shape(1);
        py::array keep;
        const std::vector<cyb::BeamRow> rs = beam_rows_of(masks, checks, cums, rows, n, &keep);
        const cyb::BeamSpec spec{ts_begin, ts_end, k};
        cyb::check_beam_spec(spec, n);
        std::vector<float> score(static_cast<size_t>(rows * k));
        std::vector<int32_t> token(score.size());
        std::vector<int64_t> nonfinite(static_cast<size_t>(rows));
        {
          py::gil_scoped_release nogil;
          on_test_wgpu(logits.data(), rows, n, [&](cyb::Backend& be, const cyb::Tensor& t, cyb::ExecContext& ctx) {
            be.beam_rows(t, rs.data(), rows, spec, score.data(), token.data(), nonfinite.data(), ctx);
          });
        }
        return beam_result(score, token, nonfinite, k);
      },
      py::arg("logits"), py::arg("masks"), py::arg("checks"), py::arg("cums"), py::arg("ts_begin"),
      py::arg("ts_end"), py::arg("k"),
      "The wgpu+rs beam kernel (shaders/wgsl/beam.wgsl; tests) on float32 [rows, n] logits uploaded for it:\n"
      "arguments and result as forward_batch_beam's; InvalidConfig('logits') naming a row's first NaN or Inf.");
}
