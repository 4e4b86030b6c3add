// libFuzzer target of the sampler's arguments (csrc/sampling/sampler.h;
// tools/fuzz.sh builds and runs it). The input is read as a SamplingConfig
// (raw float bits: NaN, inf, negative and huge values included), a vocab size,
// a penalty history (ids outside the vocab included) and a row of logits
// (NaN and inf included). A config validate() accepts must sample without a
// crash, a sanitizer report or a hang, and every drawn id must lie in the vocab;
// a config it rejects must be rejected with a cyb::Error.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/errors.h"
#include "sampling/sampler.h"

namespace {

class Reader {
 public:
  Reader(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  template <typename T>
  T take() {
    T v{};
    const size_t k = n_ - p_ < sizeof(T) ? n_ - p_ : sizeof(T);
    std::memcpy(&v, d_ + p_, k);
    p_ += k;
    return v;
  }
  size_t left() const { return n_ - p_; }

 private:
  const uint8_t* d_;
  size_t n_;
  size_t p_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader r(data, size);
  cyb::SamplingConfig c;
  c.temperature = r.take<float>();
  c.top_k = r.take<int32_t>();
  c.top_p = r.take<float>();
  c.min_p = r.take<float>();
  c.repetition_penalty = r.take<float>();
  c.presence_penalty = r.take<float>();
  c.frequency_penalty = r.take<float>();
  c.penalty_last_n = r.take<int32_t>();
  c.seed = r.take<uint64_t>();
  const int64_t n = 1 + static_cast<int64_t>(r.take<uint16_t>() % 4096);
  const size_t n_hist = r.take<uint8_t>();
  std::vector<int32_t> hist(n_hist);
  for (auto& t : hist) t = r.take<int32_t>();
  std::vector<float> logits(static_cast<size_t>(n));
  // The rest of the input fills the logits, repeated as needed.
  std::vector<float> tail;
  while (r.left() >= sizeof(float)) tail.push_back(r.take<float>());
  for (size_t i = 0; i < logits.size(); ++i)
    logits[i] = tail.empty() ? 0.0f : tail[i % tail.size()] + (tail.size() < logits.size() ? 1e-3f * i : 0.0f);

  try {
    cyb::validate(c);
  } catch (const cyb::Error&) {
    try {
      cyb::Sampler rejected(c);  // the constructor validates too
      std::abort();              // validate() threw but the constructor accepted
    } catch (const cyb::Error&) {
    }
    return 0;
  }
  try {
    cyb::Sampler s(c);
    s.accept(hist.data(), hist.size());
    for (int step = 0; step < 3; ++step) {
      const int32_t t = s.sample(logits.data(), n);
      if (t < 0 || t >= n) std::abort();
      s.accept(t);
    }
    std::vector<float> out(static_cast<size_t>(n));
    s.process(logits.data(), n, out.data());
    s.probs(logits.data(), n, out.data());
    for (float p : out)
      if (p < 0.0f || p > 1.0f + 1e-5f) std::abort();  // NaN passes both tests: NaN logits may give NaN
    const int32_t k = static_cast<int32_t>(c.seed % 21);
    std::vector<int32_t> ids(static_cast<size_t>(k));
    std::vector<float> lp(static_cast<size_t>(k));
    float tok_lp = 0.0f;
    cyb::top_logprobs(logits.data(), n, hist.empty() ? 0 : hist[0], k, &tok_lp, ids.data(), lp.data());
    for (int32_t id : ids)
      if (id < 0 || id >= n) std::abort();
  } catch (const cyb::Error&) {
  }
  return 0;
}
