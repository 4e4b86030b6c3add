// Log-mel spectrogram (mel.h): a mixed-radix FFT, the Slaney filterbank, the
// log/clamp/scale of Whisper's frontend.
#include "audio/mel.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/errors.h"
#include "core/thread_pool.h"

namespace cyb {
namespace audio {

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr int kHalf = kNFft / 2;  // 200: the complex FFT length of the real-input split

struct Cx {
  double r, i;
};
inline Cx operator+(Cx a, Cx b) { return {a.r + b.r, a.i + b.i}; }
inline Cx operator-(Cx a, Cx b) { return {a.r - b.r, a.i - b.i}; }
inline Cx operator*(Cx a, Cx b) { return {a.r * b.r - a.i * b.i, a.r * b.i + a.i * b.r}; }

// Forward complex FFT of length kHalf by recursive decimation in time over the
// factors 4, 2, 5, 5 (radix-2, -4 and -5 butterflies written out; any other
// factor would take the generic p-point DFT), plus the split into the real-input
// spectrum of kNFft samples. All tables are built once.
struct Fft {
  int factors[8][2];  // (radix p, remaining length m) per stage
  int n_stages = 0;
  Cx tw[kHalf];        // exp(-2 pi i k / kHalf)
  Cx split[kHalf + 1]; // exp(-2 pi i k / kNFft)
  double window[kNFft];  // periodic Hann

  Fft() {
    int n = kHalf, p = 4;
    while (n > 1) {
      while (n % p) {
        p = p == 4 ? 2 : p == 2 ? 3 : p + 2;
        if (p * p > n) p = n;
      }
      n /= p;
      factors[n_stages][0] = p;
      factors[n_stages][1] = n;
      ++n_stages;
    }
    for (int k = 0; k < kHalf; ++k) {
      const double a = -2.0 * kPi * k / kHalf;
      tw[k] = {std::cos(a), std::sin(a)};
    }
    for (int k = 0; k <= kHalf; ++k) {
      const double a = -2.0 * kPi * k / kNFft;
      split[k] = {std::cos(a), std::sin(a)};
    }
    for (int k = 0; k < kNFft; ++k) window[k] = 0.5 - 0.5 * std::cos(2.0 * kPi * k / kNFft);
  }

  void bfly2(Cx* out, int fstride, int m) const {
    for (int k = 0; k < m; ++k) {
      const Cx t = out[k + m] * tw[k * fstride];
      out[k + m] = out[k] - t;
      out[k] = out[k] + t;
    }
  }

  void bfly4(Cx* out, int fstride, int m) const {
    for (int k = 0; k < m; ++k) {
      const Cx s0 = out[k + m] * tw[k * fstride];
      const Cx s1 = out[k + 2 * m] * tw[2 * k * fstride];
      const Cx s2 = out[k + 3 * m] * tw[3 * k * fstride];
      const Cx s5 = out[k] - s1;
      const Cx a = out[k] + s1;
      const Cx s3 = s0 + s2, s4 = s0 - s2;
      out[k + 2 * m] = a - s3;
      out[k] = a + s3;
      out[k + m] = {s5.r + s4.i, s5.i - s4.r};
      out[k + 3 * m] = {s5.r - s4.i, s5.i + s4.r};
    }
  }

  // kissfft's radix-5 butterfly (forward): ya, yb = exp(-2 pi i / 5), exp(-4 pi i / 5).
  void bfly5(Cx* out, int fstride, int m) const {
    const Cx ya = tw[fstride * m], yb = tw[fstride * 2 * m];
    Cx* F0 = out;
    Cx* F1 = out + m;
    Cx* F2 = out + 2 * m;
    Cx* F3 = out + 3 * m;
    Cx* F4 = out + 4 * m;
    for (int u = 0; u < m; ++u) {
      const Cx s0 = F0[u];
      const Cx s1 = F1[u] * tw[u * fstride];
      const Cx s2 = F2[u] * tw[2 * u * fstride];
      const Cx s3 = F3[u] * tw[3 * u * fstride];
      const Cx s4 = F4[u] * tw[4 * u * fstride];
      const Cx s7 = s1 + s4, s10 = s1 - s4, s8 = s2 + s3, s9 = s2 - s3;
      F0[u] = s0 + s7 + s8;
      const Cx s5 = {s0.r + s7.r * ya.r + s8.r * yb.r, s0.i + s7.i * ya.r + s8.i * yb.r};
      const Cx s6 = {s10.i * ya.i + s9.i * yb.i, -s10.r * ya.i - s9.r * yb.i};
      F1[u] = s5 - s6;
      F4[u] = s5 + s6;
      const Cx s11 = {s0.r + s7.r * yb.r + s8.r * ya.r, s0.i + s7.i * yb.r + s8.i * ya.r};
      const Cx s12 = {-s10.i * yb.i + s9.i * ya.i, s10.r * yb.i - s9.r * ya.i};
      F2[u] = s11 + s12;
      F3[u] = s11 - s12;
    }
  }

  void bfly_generic(Cx* out, int fstride, int m, int p) const {
    Cx scratch[8];
    for (int u = 0; u < m; ++u) {
      for (int q = 0, k = u; q < p; ++q, k += m) scratch[q] = out[k];
      for (int q1 = 0, k = u; q1 < p; ++q1, k += m) {
        int twidx = 0;
        Cx acc = scratch[0];
        for (int q = 1; q < p; ++q) {
          twidx += fstride * k;
          if (twidx >= kHalf) twidx %= kHalf;
          acc = acc + scratch[q] * tw[twidx];
        }
        out[k] = acc;
      }
    }
  }

  // out[0..p*m) = DFT of in[0], in[fstride], ... (kissfft's recursion).
  void work(Cx* out, const Cx* in, int fstride, int stage) const {
    const int p = factors[stage][0], m = factors[stage][1];
    Cx* const beg = out;
    Cx* const end = out + p * m;
    if (m == 1) {
      for (; out != end; ++out, in += fstride) *out = *in;
    } else {
      for (; out != end; out += m, in += fstride) work(out, in, fstride * p, stage + 1);
    }
    out = beg;
    switch (p) {
      case 2: bfly2(out, fstride, m); break;
      case 4: bfly4(out, fstride, m); break;
      case 5: bfly5(out, fstride, m); break;
      default: bfly_generic(out, fstride, m, p); break;
    }
  }

  // power[k] = |X[k]|^2, k = 0..kHalf, of the real frame x[0..kNFft) (windowed already).
  void power(const double* x, double* power_out) const {
    Cx z[kHalf], Z[kHalf];
    for (int n = 0; n < kHalf; ++n) z[n] = {x[2 * n], x[2 * n + 1]};
    work(Z, z, 1, 0);
    for (int k = 0; k <= kHalf; ++k) {
      const Cx a = Z[k == kHalf ? 0 : k];
      const Cx b = Z[k == 0 ? 0 : kHalf - k];
      const Cx bc = {b.r, -b.i};
      const Cx even = {(a.r + bc.r) * 0.5, (a.i + bc.i) * 0.5};
      const Cx d = {(a.r - bc.r) * 0.5, (a.i - bc.i) * 0.5};  // odd * i
      const Cx odd = {d.i, -d.r};                              // d / i
      const Cx X = even + split[k] * odd;
      power_out[k] = X.r * X.r + X.i * X.i;
    }
  }
};

const Fft& fft() {
  static const Fft f;
  return f;
}

// Slaney's mel scale (linear below 1 kHz, logarithmic above), as librosa's
// hz_to_mel / mel_to_hz with htk=False.
constexpr double kFSp = 200.0 / 3.0, kMinLogHz = 1000.0, kMinLogMel = kMinLogHz / kFSp;
double hz_to_mel(double f) {
  static const double logstep = std::log(6.4) / 27.0;
  return f >= kMinLogHz ? kMinLogMel + std::log(f / kMinLogHz) / logstep : f / kFSp;
}
double mel_to_hz(double m) {
  static const double logstep = std::log(6.4) / 27.0;
  return m >= kMinLogMel ? kMinLogHz * std::exp(logstep * (m - kMinLogMel)) : kFSp * m;
}

// One filter as its nonzero run of bins.
struct Filter {
  int first = 0;
  std::vector<double> w;
};
struct Filterbank {
  std::vector<Filter> filters;
  std::vector<double> dense;  // [n_mels][kNBins]
};

Filterbank build_filterbank(int n_mels) {
  Filterbank fb;
  fb.dense.assign(static_cast<size_t>(n_mels) * kNBins, 0.0);
  std::vector<double> mel_f(static_cast<size_t>(n_mels) + 2);
  const double lo = hz_to_mel(0.0), hi = hz_to_mel(kSampleRate / 2.0);
  for (int i = 0; i < n_mels + 2; ++i) mel_f[i] = mel_to_hz(lo + (hi - lo) * i / (n_mels + 1));
  for (int m = 0; m < n_mels; ++m) {
    const double fdiff0 = mel_f[m + 1] - mel_f[m], fdiff1 = mel_f[m + 2] - mel_f[m + 1];
    const double enorm = 2.0 / (mel_f[m + 2] - mel_f[m]);
    Filter f;
    int last = -1;
    for (int k = 0; k < kNBins; ++k) {
      const double freq = static_cast<double>(kSampleRate) / 2.0 * k / (kNBins - 1);
      const double lower = -(mel_f[m] - freq) / fdiff0;
      const double upper = (mel_f[m + 2] - freq) / fdiff1;
      const double w = std::max(0.0, std::min(lower, upper)) * enorm;
      fb.dense[static_cast<size_t>(m) * kNBins + k] = w;
      if (w != 0.0) {
        if (last < 0) f.first = k;
        last = k;
      }
    }
    if (last >= 0)
      f.w.assign(fb.dense.begin() + static_cast<ptrdiff_t>(m) * kNBins + f.first,
                 fb.dense.begin() + static_cast<ptrdiff_t>(m) * kNBins + last + 1);
    fb.filters.push_back(std::move(f));
  }
  return fb;
}

std::shared_ptr<const Filterbank> filterbank(int n_mels) {
  static std::mutex mu;
  static std::map<int, std::shared_ptr<const Filterbank>> cache;
  std::lock_guard<std::mutex> lk(mu);
  auto& slot = cache[n_mels];
  if (!slot) slot = std::make_shared<const Filterbank>(build_filterbank(n_mels));
  return slot;
}

void check(int64_t n, const MelOptions& o) {
  if (o.n_mels < 1 || o.n_mels > kMaxMels)
    throw_invalid_config("n_mels", "must be in 1.." + std::to_string(kMaxMels) + " (got " +
                                       std::to_string(o.n_mels) + ")");
  if (o.pad_zeros < 0)
    throw_invalid_config("padding", "must be >= 0 samples (got " + std::to_string(o.pad_zeros) + ")");
  if (n < 0) throw_invalid_config("samples", "negative sample count");
  if (o.pad_zeros > (int64_t(1) << 40) || n > (int64_t(1) << 40))
    throw_invalid_config("samples", "more than 2^40 samples");
}

}  // namespace

int64_t mel_samples(int64_t n_samples, const MelOptions& o) {
  return o.pad_to_30s ? kChunkSamples : n_samples + o.pad_zeros;
}

int64_t mel_frames(int64_t n_samples, const MelOptions& o) { return mel_samples(n_samples, o) / kHop; }

std::vector<double> mel_filters(int n_mels) {
  MelOptions o;
  o.n_mels = n_mels;
  check(0, o);
  return filterbank(n_mels)->dense;
}

void log_mel(const float* x, int64_t n, const MelOptions& o, float* out) {
  check(n, o);
  const int threads = ThreadPool::resolve_threads(o.threads);
  // One pool for the three passes below (none for a single thread or a short input).
  std::unique_ptr<ThreadPool> pool;
  if (threads > 1 && std::max(n, mel_samples(n, o)) >= 64 * kHop) pool = std::make_unique<ThreadPool>(threads);
  // fn(begin, end, chunk) over [0, items) in contiguous chunks; returns the chunk count.
  auto parallel = [&pool](int64_t items, const std::function<void(int64_t, int64_t, int)>& fn) -> int {
    const int chunks = pool ? static_cast<int>(std::max<int64_t>(
                                  1, std::min<int64_t>(items / 1024, 4 * static_cast<int64_t>(pool->size()))))
                            : 1;
    if (chunks == 1) {
      fn(0, items, 0);
    } else {
      pool->run_chunks(chunks, [&](int c, int nc) { fn(items * c / nc, items * (c + 1) / nc, c); });
    }
    return chunks;
  };

  // The first non-finite sample, if any (each chunk keeps its first).
  {
    std::vector<int64_t> first_bad(static_cast<size_t>(pool ? 4 * pool->size() : 1), -1);
    parallel(n, [&](int64_t b, int64_t e, int c) {
      for (int64_t i = b; i < e; ++i)
        if (!std::isfinite(x[i])) {
          first_bad[static_cast<size_t>(c)] = i;
          return;
        }
    });
    for (int64_t i : first_bad)
      if (i >= 0)
        throw_invalid_config("samples", "sample " + std::to_string(i) + " is " +
                                            (std::isnan(x[i]) ? "NaN" : "infinite") +
                                            " (audio must hold finite values)");
  }
  const int64_t total = mel_samples(n, o);  // the signal: x, then zeros, up to `total`
  const int64_t real = std::min(n, total);  // samples of x inside it
  const int64_t frames = total / kHop;
  const int n_mels = o.n_mels;
  if (frames == 0) return;
  const auto fb = filterbank(n_mels);
  const Fft& F = fft();

  // Sample j of the reflect-padded signal (j in [0, total + kNFft)).
  auto sample = [x, total, real](int64_t j) -> double {
    int64_t i = j - kNFft / 2;
    if (i < 0 || i >= total) {
      const int64_t period = 2 * (total - 1);
      if (period == 0) {
        i = 0;
      } else {
        i %= period;
        if (i < 0) i += period;
        if (i >= total) i = period - i;
      }
    }
    return i < real ? static_cast<double>(x[i]) : 0.0;
  };

  auto frames_range = [&](int64_t f0, int64_t f1, float* maxv) {
    double frame[kNFft], pw[kNBins];
    float local_max = -INFINITY;
    for (int64_t t = f0; t < f1; ++t) {
      const int64_t start = t * kHop;  // in the padded signal
      const int64_t i0 = start - kNFft / 2;
      if (i0 >= 0 && i0 + kNFft <= real) {
        const float* s = x + i0;
        for (int k = 0; k < kNFft; ++k) frame[k] = static_cast<double>(s[k]) * F.window[k];
      } else {
        for (int k = 0; k < kNFft; ++k) frame[k] = sample(start + k) * F.window[k];
      }
      F.power(frame, pw);
      for (int m = 0; m < n_mels; ++m) {
        const Filter& f = fb->filters[m];
        double acc = 0.0;
        const double* p = pw + f.first;
        for (size_t k = 0; k < f.w.size(); ++k) acc += f.w[k] * p[k];
        const float v = static_cast<float>(std::log10(std::max(acc, 1e-10)));
        out[m * frames + t] = v;
        local_max = std::max(local_max, v);
      }
    }
    *maxv = std::max(*maxv, local_max);
  };

  std::vector<float> maxes(static_cast<size_t>(pool ? 4 * pool->size() : 1), -INFINITY);
  parallel(frames * 64, [&](int64_t b, int64_t e, int c) {  // 64 units per frame: chunks of >= 16 frames
    frames_range(b / 64, e / 64, &maxes[static_cast<size_t>(c)]);
  });
  float global_max = -INFINITY;
  for (float v : maxes) global_max = std::max(global_max, v);
  // Clamp at (max - 8), then scale; the floor is computed in f32 as the references do.
  const float floor_v = global_max - 8.0f;
  parallel(static_cast<int64_t>(n_mels) * frames, [out, floor_v](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) out[i] = (std::max(out[i], floor_v) + 4.0f) / 4.0f;
  });
}

}  // namespace audio
}  // namespace cyb
