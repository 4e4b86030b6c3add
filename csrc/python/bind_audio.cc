// Python face of the audio frontend (audio/mel.h): _core.log_mel and
// _core.mel_filters. Samples are a 1-D float32 array (TypeError for another
// dtype: nothing is converted here; cyb_llm.audio converts), ShapeMismatch for
// another rank; the transform runs with the GIL released.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "audio/mel.h"
#include "core/errors.h"

namespace py = pybind11;
using namespace cyb;

namespace {

py::array_t<float> run_log_mel(const py::object& samples, int n_mels, bool pad_to_30s, int64_t threads,
                               int64_t padding) {
  py::array a = py::array::ensure(samples);
  if (!a) throw py::type_error("samples must be a float32 numpy array");
  if (a.dtype().kind() != 'f' || a.dtype().itemsize() != 4)
    throw py::type_error("samples must be a float32 array, not dtype " + std::string(py::str(a.dtype())));
  if (a.ndim() != 1) {
    std::vector<int64_t> got;
    for (py::ssize_t i = 0; i < a.ndim(); ++i) got.push_back(static_cast<int64_t>(a.shape(i)));
    throw_shape_mismatch("log_mel (samples: 1-D mono)", {-1}, got);
  }
  auto c = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);  // contiguous view or copy
  if (!c) throw py::error_already_set();
  audio::MelOptions o;
  o.n_mels = n_mels;
  o.pad_to_30s = pad_to_30s;
  o.pad_zeros = padding;
  if (threads < 0 || threads > (int64_t(1) << 30))
    throw_invalid_config("threads", "must be 0 (auto: physical cores) or a positive thread count (got " +
                                        std::to_string(threads) + ")");
  o.threads = static_cast<int>(threads);
  const int64_t n = static_cast<int64_t>(c.size());
  if (n_mels < 1 || n_mels > audio::kMaxMels || padding < 0) audio::log_mel(nullptr, 0, o, nullptr);  // its error
  const int64_t frames = audio::mel_frames(n, o);
  py::array_t<float> out({static_cast<py::ssize_t>(n_mels), static_cast<py::ssize_t>(frames)});
  const float* x = c.data();
  float* y = out.mutable_data();
  {
    py::gil_scoped_release release;
    audio::log_mel(x, n, o, y);
  }
  return out;
}

}  // namespace

void bind_audio(py::module_& m) {
  m.def("log_mel", &run_log_mel, py::arg("samples"), py::arg("n_mels") = 80, py::arg("pad_to_30s") = true,
        py::arg("threads") = 0, py::arg("padding") = 0,
        "Whisper's log-mel spectrogram float32[n_mels, frames] of 16 kHz mono float32 samples "
        "(docs/whisper.md, \"Audio frontend\"): `padding` zero samples are appended, then with "
        "pad_to_30s the signal is padded/trimmed to 480000 samples (3000 frames); otherwise "
        "frames = (len + padding) // 160. threads: 0 = physical cores.");
  m.def(
      "mel_filters",
      [](int n_mels) {
        std::vector<double> f = audio::mel_filters(n_mels);
        py::array_t<double> out({static_cast<py::ssize_t>(n_mels), static_cast<py::ssize_t>(audio::kNBins)});
        std::copy(f.begin(), f.end(), out.mutable_data());
        return out;
      },
      py::arg("n_mels"),
      "The Slaney mel filterbank float64[n_mels, 201] log_mel uses (sr 16000, n_fft 400, fmin 0, fmax 8000).");
}
