// The log-mel spectrogram of speech models (Whisper's frontend, docs/whisper.md
// "Audio frontend"): 16 kHz mono float samples -> float32 [n_mels][frames].
//
// The recipe: optionally append zeros and pad/trim to a 30 s window; reflect-pad
// n_fft/2 samples at both ends (a centered STFT); frames of n_fft = 400 samples
// every hop = 160 samples under a periodic Hann window; power spectrum |X|^2 of
// the 201 bins; the last frame dropped (3000 frames per 30 s); Slaney-scale,
// Slaney-normalized triangular mel filters (fmin 0, fmax 8 kHz); log10(max(x,
// 1e-10)); clamped below at (global max - 8); then (x + 4) / 4.
//
// The transform is a mixed-radix FFT in double precision (a 200-point complex
// FFT of the even/odd samples, split into the 201 real-input bins); frames are
// spread over a thread pool, each worker with fixed-size scratch on its stack
// (no allocation per frame). Memory: the output plus O(n_fft) per thread.
#pragma once
#include <cstdint>
#include <vector>

namespace cyb {
namespace audio {

constexpr int kSampleRate = 16000;
constexpr int kNFft = 400;
constexpr int kHop = 160;
constexpr int kNBins = kNFft / 2 + 1;                     // 201
constexpr int64_t kChunkSamples = 30 * int64_t(kSampleRate);  // 480000
constexpr int64_t kChunkFrames = kChunkSamples / kHop;      // 3000
constexpr int kMaxMels = 256;

struct MelOptions {
  int n_mels = 80;         // 1..kMaxMels (Whisper: 80, large-v3: 128)
  int64_t pad_zeros = 0;   // zero samples appended to the input first
  bool pad_to_30s = true;  // then pad with zeros / trim to kChunkSamples
  int threads = 0;         // ThreadPool::resolve_threads rule (0 = physical cores)
};

// Samples the transform sees (after pad_zeros and pad_to_30s).
int64_t mel_samples(int64_t n_samples, const MelOptions& o);
// Frames of the output: mel_samples(...) / kHop.
int64_t mel_frames(int64_t n_samples, const MelOptions& o);

// out: n_mels * mel_frames(n, o) floats, row-major [n_mels][frames].
// InvalidConfig for n_mels outside 1..kMaxMels, negative pad_zeros or threads,
// a negative n, and a NaN or infinite sample (field "samples", naming its index).
void log_mel(const float* x, int64_t n, const MelOptions& o, float* out);

// The filterbank, dense [n_mels][kNBins] (librosa.filters.mel(sr=16000,
// n_fft=400, n_mels, htk=False, norm="slaney") in double), for tests.
std::vector<double> mel_filters(int n_mels);

}  // namespace audio
}  // namespace cyb
