// Python face of the whisper family (families/whisper.h) on _core.Model: is_whisper,
// whisper_dims, encode_audio, and the decoder session calls on a Conversation of the
// model (whisper_start, whisper_clone, whisper_copy, whisper_reset, whisper_started);
// the decoder forward is Model.forward. Native work runs with the GIL released.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "families/whisper.h"
#include "runtime/model.h"

namespace py = pybind11;
using namespace cyb;

namespace {

WhisperModel& whisper(Model& m) {
  auto* w = dynamic_cast<WhisperModel*>(&m);
  if (!w)
    throw_invalid_config("architecture.model_type", "'" + m.family() + "' is not a whisper model (speech calls "
                                                    "need model_type whisper)");
  return *w;
}

using F32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;

std::vector<int64_t> shape_of(const py::array& a) {
  std::vector<int64_t> s;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s.push_back(static_cast<int64_t>(a.shape(i)));
  return s;
}

F32Array float_array(const py::handle& h, const char* what) {
  py::array a = py::array::ensure(h);
  if (!a) throw py::type_error(std::string(what) + " must be a float array");
  const char kind = a.dtype().kind();
  if (kind != 'f' && kind != 'i' && kind != 'u')
    throw py::type_error(std::string(what) + " must be a float array, not dtype " + std::string(py::str(a.dtype())));
  return F32Array::ensure(a);
}

py::array_t<float> encode_audio(Model& m, const py::object& mel_obj) {
  WhisperModel& w = whisper(m);
  F32Array mel = float_array(mel_obj, "mel");
  if (mel.ndim() != 2 && mel.ndim() != 3)
    throw_shape_mismatch("encode (mel)", {w.n_mels(), 2 * w.n_audio_ctx()}, shape_of(mel));
  const bool batched = mel.ndim() == 3;
  const int64_t B = batched ? mel.shape(0) : 1;
  const int64_t nm = mel.shape(mel.ndim() - 2), fr = mel.shape(mel.ndim() - 1);
  std::vector<py::ssize_t> shape = batched ? std::vector<py::ssize_t>{B, w.n_audio_ctx(), w.d_model()}
                                           : std::vector<py::ssize_t>{w.n_audio_ctx(), w.d_model()};
  if (nm != w.n_mels() || fr != 2 * w.n_audio_ctx() || B < 1)
    throw_shape_mismatch("encode (mel)", {w.n_mels(), 2 * w.n_audio_ctx()}, shape_of(mel));
  py::array_t<float> out(shape);
  const float* p = mel.data();
  float* o = out.mutable_data();
  {
    py::gil_scoped_release release;
    w.encode_audio(p, B, nm, fr, o);
  }
  return out;
}

py::tuple cross_attention(Model& m, Conversation& c,
                          py::array_t<int32_t, py::array::c_style | py::array::forcecast> ids,
                          const std::vector<std::pair<int64_t, int64_t>>& heads, int64_t n_frames) {
  WhisperModel& w = whisper(m);
  if (ids.ndim() != 1) throw_shape_mismatch("cross_attention (ids)", {-1}, {static_cast<int64_t>(ids.ndim())});
  const int64_t n = ids.shape(0);
  if (n == 0) throw_shape_mismatch("cross_attention (ids)", {1}, {0});
  if (heads.empty()) throw_invalid_config("alignment_heads", "no (layer, head) pair listed");
  if (n_frames < 1 || n_frames > w.n_audio_ctx())
    throw_invalid_config("n_frames", "must be in [1, " + std::to_string(w.n_audio_ctx()) + "] (got " +
                                         std::to_string(n_frames) + ")");
  py::array_t<float> logits(std::vector<py::ssize_t>{n, w.vocab_size()});
  py::array_t<float> attn(std::vector<py::ssize_t>{static_cast<py::ssize_t>(heads.size()), n, n_frames});
  const int32_t* p = ids.data();
  float* lo = logits.mutable_data();
  float* ao = attn.mutable_data();
  {
    py::gil_scoped_release release;
    w.cross_attention(c, p, n, heads, n_frames, lo, ao);
  }
  return py::make_tuple(logits, attn);
}

}  // namespace

void bind_whisper(py::module_& m) {
  auto cls = py::reinterpret_borrow<py::class_<Model, std::shared_ptr<Model>>>(m.attr("Model"));
  cls.def_property_readonly("is_whisper", [](Model& mm) { return dynamic_cast<WhisperModel*>(&mm) != nullptr; },
                            "True for a whisper (speech recognition) model.")
      .def("whisper_dims", [](Model& mm) {
        WhisperModel& w = whisper(mm);
        py::dict d;
        d["n_mels"] = w.n_mels();
        d["n_audio_ctx"] = w.n_audio_ctx();
        d["d_model"] = w.d_model();
        d["n_text_ctx"] = w.max_position();
        d["n_vocab"] = w.vocab_size();
        return d;
      }, "n_mels, n_audio_ctx, d_model, n_text_ctx, n_vocab of a whisper model.")
      .def("encode_audio", &encode_audio, py::arg("mel"),
           "Encoder output float32[n_audio_ctx, d_model] of a log-mel float32[n_mels, 2 * n_audio_ctx] "
           "(or [B, ...] -> [B, n_audio_ctx, d_model]).")
      .def("whisper_start", [](Model& mm, Conversation& c, const py::object& enc_obj) {
        WhisperModel& w = whisper(mm);
        F32Array enc = float_array(enc_obj, "encoder_output");
        if (enc.ndim() != 2) throw_shape_mismatch("start (encoder output)", {w.n_audio_ctx(), w.d_model()}, shape_of(enc));
        const float* p = enc.data();
        const int64_t r = enc.shape(0), cc = enc.shape(1);
        py::gil_scoped_release release;
        w.start(c, p, r, cc);
      }, py::arg("conversation"), py::arg("encoder_output"),
         "Computes and stores the cross-attention K/V of one window's encoder output; position back to 0.")
      .def("whisper_clone", [](py::object self, Conversation& c) {
        WhisperModel& w = whisper(self.cast<Model&>());
        std::unique_ptr<Conversation> n;
        {
          py::gil_scoped_release release;
          n = w.clone(c);
        }
        py::object r = py::cast(std::move(n));
        py::detail::keep_alive_impl(r, self);
        return r;
      }, py::arg("conversation"), "A new session with a copy of the self-attention cache; cross K/V shared.")
      .def("whisper_copy", [](Model& mm, Conversation& dst, Conversation& src) {
        WhisperModel& w = whisper(mm);
        py::gil_scoped_release release;
        w.copy_state(dst, src);
      }, py::arg("dst"), py::arg("src"), "dst takes src's state (self cache copied, cross K/V shared, position).")
      .def("whisper_cross_attention", &cross_attention, py::arg("conversation"), py::arg("ids"), py::arg("heads"),
           py::arg("n_frames"),
           "Runs the decoder on ids (as forward, appending to the self cache): (logits float32[n, vocab], "
           "attn float32[len(heads), n, n_frames]), attn[i] the cross-attention probabilities of heads[i] = "
           "(layer, head): softmax over the first n_frames encoder positions.")
      .def("whisper_reset", [](Model& mm, Conversation& c) { whisper(mm).reset(c); }, py::arg("conversation"))
      .def("whisper_started", [](Model& mm, Conversation& c) { return whisper(mm).started(c); },
           py::arg("conversation"));
}
