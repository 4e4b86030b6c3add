#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <string>

#include "core/errors.h"

namespace cyb {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Descending by logit, ties by lower token id: one total order, so every
// partial sort gives the same sequence.
struct ByLogitDesc {
  const float* v;
  bool operator()(int32_t a, int32_t b) const { return v[a] > v[b] || (v[a] == v[b] && a < b); }
};

// Eight independent lanes: no loop-carried dependency on one running max
// (std::max_element reloads its best element every step, ~5x slower).
float max_value(const float* w, int64_t n) {
  float lane[8];
  std::fill(lane, lane + 8, kNegInf);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) lane[j] = w[i + j] > lane[j] ? w[i + j] : lane[j];
  for (; i < n; ++i) lane[0] = w[i] > lane[0] ? w[i] : lane[0];
  return *std::max_element(lane, lane + 8);
}

// First index of the maximum (no NaN in w).
int32_t argmax(const float* w, int64_t n) {
  const float m = max_value(w, n);
  int64_t i = 0;
  while (i < n - 1 && w[i] != m) ++i;
  return static_cast<int32_t>(i);
}

// Copies n logits into dst; true when any is NaN.
bool copy_has_nan(const float* src, int64_t n, float* dst) {
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = src[i];
    bad |= src[i] != src[i];
  }
  return bad != 0;
}

[[noreturn]] void throw_empty_mask(int64_t n) {
  throw_invalid_config("allowed", "the token mask allows no token of the vocab of " + std::to_string(n) +
                                      ": nothing can be drawn");
}

void check_finite_param(const char* field, double v) {
  if (!std::isfinite(v)) throw_invalid_config(field, "must be a finite number");
}

}  // namespace

void validate(const SamplingConfig& c) {
  check_finite_param("temperature", c.temperature);
  check_finite_param("top_p", c.top_p);
  check_finite_param("min_p", c.min_p);
  check_finite_param("repetition_penalty", c.repetition_penalty);
  check_finite_param("presence_penalty", c.presence_penalty);
  check_finite_param("frequency_penalty", c.frequency_penalty);
  if (c.temperature < 0) throw_invalid_config("temperature", "must be >= 0 (0 = greedy)");
  if (c.top_k < 0) throw_invalid_config("top_k", "must be >= 0 (0 = off)");
  if (c.top_p < 0 || c.top_p > 1) throw_invalid_config("top_p", "must be in [0, 1]");
  if (c.min_p < 0 || c.min_p > 1) throw_invalid_config("min_p", "must be in [0, 1]");
  if (c.repetition_penalty <= 0) throw_invalid_config("repetition_penalty", "must be > 0 (1 = off)");
  if (c.penalty_last_n < -1) throw_invalid_config("penalty_last_n", "must be >= -1 (-1 = all history)");
}

Sampler::Sampler(const SamplingConfig& config) : config_(config), rng_(config.seed) { validate(config_); }

void Sampler::reset(uint64_t seed) {
  history_.clear();
  config_.seed = seed;
  rng_.seed(seed);
  pending_ = 0;
}

namespace {
double unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0); }  // 53 bits
}  // namespace

double Sampler::uniform() {
  if (pending_ > 0) {
    const double u = pending_u_[0];
    pending_u_[0] = pending_u_[1];
    --pending_;
    return u;
  }
  return unit(rng_);
}

double Sampler::peek_uniform(int ahead) {
  ahead = ahead > 0 ? 1 : 0;
  while (pending_ <= ahead) pending_u_[pending_++] = unit(rng_);
  return pending_u_[ahead];
}

void Sampler::take_uniform() {
  peek_uniform();
  uniform();
}

bool Sampler::device_ok() const {
  const SamplingConfig& c = config_;
  const bool penalties = c.penalty_last_n != 0 && (c.repetition_penalty != 1.0f || c.presence_penalty != 0.0f ||
                                                   c.frequency_penalty != 0.0f);
  return bias_.empty() && !penalties;
}

void Sampler::check_mask(const uint32_t* allowed, int64_t n) {
  const int64_t words = mask_words(n);
  for (int64_t k = 0; k < words; ++k) {
    const int64_t len = std::min<int64_t>(32, n - k * 32);
    const uint32_t m = len < 32 ? allowed[k] & ((1u << len) - 1u) : allowed[k];
    if (m != 0) return;
  }
  throw_empty_mask(n);
}

void Sampler::set_logit_bias(const int32_t* ids, const float* bias, size_t count) {
  std::vector<std::pair<int32_t, float>> b;
  b.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    if (ids[i] < 0)
      throw_invalid_config("logit_bias", "token id " + std::to_string(ids[i]) + " is negative");
    if (!std::isfinite(bias[i]))
      throw_invalid_config("logit_bias", "the bias of token " + std::to_string(ids[i]) + " must be a finite number");
    b.emplace_back(ids[i], bias[i]);
  }
  bias_ = std::move(b);
}

void Sampler::apply_bias(int64_t n) {
  float* w = work_.data();
  for (const auto& [tok, b] : bias_) {
    if (tok >= n)
      throw_invalid_config("logit_bias", "token id " + std::to_string(tok) + " is outside the vocab of " +
                                             std::to_string(n));
    w[tok] += b;
  }
}

void Sampler::apply_mask(int64_t n, const uint32_t* allowed) {
  // Word by word: an all-ones word leaves its 32 logits alone, an all-zero
  // word (most of them for a grammar's mask) fills them with -inf.
  first_allowed_ = -1;
  if (allowed == nullptr) return;
  float* w = work_.data();
  const int64_t words = mask_words(n);
  for (int64_t k = 0; k < words; ++k) {
    const int64_t base = k * 32;
    const int64_t len = std::min<int64_t>(32, n - base);
    uint32_t m = allowed[k];
    if (len < 32) m &= (1u << len) - 1u;  // bits past the vocab
    if (m != 0 && first_allowed_ < 0) {
      int b = 0;
      while (((m >> b) & 1u) == 0) ++b;
      first_allowed_ = static_cast<int32_t>(base + b);
    }
    if (m == 0xFFFFFFFFu) continue;
    float* v = w + base;
    if (m == 0) {
      std::fill(v, v + len, kNegInf);
    } else if (len == 32) {
      for (int j = 0; j < 32; ++j) v[j] = ((m >> j) & 1u) != 0 ? v[j] : kNegInf;  // a select: vectorizes
    } else {
      for (int64_t j = 0; j < len; ++j)
        if (((m >> j) & 1u) == 0) v[j] = kNegInf;
    }
  }
  if (first_allowed_ < 0) throw_empty_mask(n);
}

int32_t Sampler::fallback_token(int64_t n) const {
  // The argmax; when every token is at -inf and a mask is set, the lowest
  // allowed id (the plain argmax would be token 0, which the mask may forbid).
  const int32_t t = argmax(work_.data(), n);
  if (first_allowed_ >= 0 && work_[static_cast<size_t>(t)] == kNegInf) return first_allowed_;
  return t;
}

void Sampler::apply_penalties(int64_t n) {
  const SamplingConfig& c = config_;
  if (c.penalty_last_n == 0 || history_.empty()) return;
  if (c.repetition_penalty == 1.0f && c.presence_penalty == 0.0f && c.frequency_penalty == 0.0f) return;
  size_t len = history_.size();
  if (c.penalty_last_n > 0) len = std::min(len, static_cast<size_t>(c.penalty_last_n));
  window_.assign(history_.end() - static_cast<std::ptrdiff_t>(len), history_.end());
  std::sort(window_.begin(), window_.end());
  float* w = work_.data();
  for (size_t i = 0; i < window_.size();) {
    const int32_t tok = window_[i];
    size_t j = i;
    while (j < window_.size() && window_[j] == tok) ++j;
    const float count = static_cast<float>(j - i);
    i = j;
    if (tok < 0 || tok >= n) continue;  // ids outside the output vocab cannot be drawn
    float v = w[tok];
    if (c.repetition_penalty != 1.0f) v = v < 0 ? v * c.repetition_penalty : v / c.repetition_penalty;
    v -= count * c.frequency_penalty + c.presence_penalty;
    w[tok] = v;
  }
}

void Sampler::keep_top_k(int64_t n) {
  // Min-heap of the k largest values, then every token whose scaled logit is
  // >= the k-th scaled value (ties at the boundary are kept, as HF does).
  // Dividing by the temperature keeps the order (weakly), so the k-th value
  // is found on the unscaled logits and only the candidates are scaled; a
  // token just below the k-th raw value is kept only if scaling rounds it to
  // the same value, so those few are checked exactly.
  float* w = work_.data();
  const auto k = static_cast<size_t>(config_.top_k);
  std::vector<float>& heap = heap_;
  heap.clear();
  const auto greater = std::greater<float>();
  for (int64_t i = 0; i < n; ++i) {
    const float v = w[i];
    if (heap.size() < k) {
      heap.push_back(v);
      std::push_heap(heap.begin(), heap.end(), greater);
    } else if (v > heap.front()) {
      std::pop_heap(heap.begin(), heap.end(), greater);
      heap.back() = v;
      std::push_heap(heap.begin(), heap.end(), greater);
    }
  }
  const float t = config_.temperature;
  const float kth = heap.front();
  const float kth_scaled = kth / t;
  const float near = std::isfinite(kth) ? kth - std::fabs(kth) * 1e-5f : kth;
  cand_.clear();
  // Tokens at -inf (masked) have no probability: left out here rather than at
  // the end, so that a mask allowing fewer than k tokens sorts only those.
  for (int64_t i = 0; i < n; ++i) {
    if (w[i] == kNegInf) continue;
    if (w[i] >= kth || (w[i] >= near && w[i] / t >= kth_scaled)) cand_.push_back(static_cast<int32_t>(i));
  }
  if (t != 1.0f)
    for (int32_t c : cand_) w[c] /= t;
  std::sort(cand_.begin(), cand_.end(), ByLogitDesc{w});
  sorted_ = true;
}

void Sampler::keep_top_p() {
  // HF: sort ascending, remove tokens whose cumulative probability from the
  // bottom is <= 1 - top_p. Walking down from the top, token j is kept while
  // the mass at or below it, (Z - mass above j) / Z, is > 1 - top_p.
  if (cand_.empty()) return;  // every token at -inf: run_stages falls back
  const float* w = work_.data();
  const ByLogitDesc cmp{w};
  const float mx = sorted_ ? w[cand_[0]] : max_value(w, static_cast<int64_t>(cand_.size()));
  double z = 0;
  for (int32_t t : cand_) z += std::exp(w[t] - mx);
  const double floor_mass = (1.0 - static_cast<double>(config_.top_p)) * z;
  if (!sorted_) {
    // A token whose own mass is below floor_mass / n only has tokens of
    // smaller mass below it, n of them at most: HF removes it. Dropping those
    // first leaves a short list to sort for a peaked distribution.
    const double tiny = floor_mass / static_cast<double>(cand_.size());
    size_t out = 0;
    for (int32_t t : cand_)
      if (!(std::exp(w[t] - mx) < tiny)) cand_[out++] = t;
    cand_.resize(out);
  }
  const size_t size = cand_.size();
  double above = 0;
  size_t done = sorted_ ? size : 0;  // cand_[0, done) is in final order
  size_t j = 0;
  for (;;) {
    if (j == done) {
      // Sort the next slice of the largest remaining candidates (256, 1024, ...).
      const size_t m = std::min(size, std::max<size_t>(256, done * 4));
      auto first = cand_.begin() + static_cast<std::ptrdiff_t>(done);
      auto mid = cand_.begin() + static_cast<std::ptrdiff_t>(m);
      if (m < size) std::nth_element(first, mid, cand_.end(), cmp);
      std::sort(first, mid, cmp);
      done = m;
    }
    if (j > 0 && !(z - above > floor_mass)) break;
    above += std::exp(w[cand_[j]] - mx);
    if (++j == size) break;
  }
  cand_.resize(j);
  sorted_ = true;
}

void Sampler::keep_min_p() {
  // HF: remove tokens with p < min_p * p_max, i.e. exp(l - l_max) < min_p.
  // Compare in log space and settle the few near the boundary with exp.
  const float* w = work_.data();
  float mx = kNegInf;
  if (sorted_ && !cand_.empty())
    mx = w[cand_[0]];
  else if (cand_.size() == work_.size())  // every token, in id order
    mx = max_value(w, static_cast<int64_t>(cand_.size()));
  else
    for (int32_t t : cand_) mx = std::max(mx, w[t]);
  const double min_p = config_.min_p;
  const double thresh = static_cast<double>(mx) + std::log(min_p);
  size_t out = 0;
  for (size_t i = 0; i < cand_.size(); ++i) {
    const double l = w[cand_[i]];
    bool keep;
    if (l > thresh + 1e-6)
      keep = true;
    else if (l < thresh - 1e-6)
      keep = false;
    else
      keep = !(std::exp(l - mx) < min_p);
    if (keep) cand_[out++] = cand_[i];  // the max itself always stays (exp(0) = 1)
  }
  cand_.resize(out);
}

void Sampler::run_stages(const float* logits, int64_t n, const uint32_t* allowed) {
  if (n <= 0) throw_shape_mismatch("sample", {-1}, {n});
  work_.resize(static_cast<size_t>(n));
  float* w = work_.data();
  if (copy_has_nan(logits, n, w)) {
    const int64_t at = std::find_if(w, w + n, [](float v) { return std::isnan(v); }) - w;
    throw_invalid_config("logits", "NaN at token " + std::to_string(at) +
                                       " (the model produced non-finite output)");
  }
  apply_bias(n);
  apply_mask(n, allowed);
  apply_penalties(n);
  const SamplingConfig& c = config_;
  if (c.temperature == 0.0f) {  // greedy: argmax, lowest id on ties
    cand_.assign(1, fallback_token(n));
    sorted_ = true;
    return;
  }
  if (c.top_k > 0 && c.top_k < n) {
    keep_top_k(n);
  } else {
    if (c.temperature != 1.0f)
      for (int64_t i = 0; i < n; ++i) w[i] /= c.temperature;  // division, as HF does
    cand_.resize(static_cast<size_t>(n));
    std::iota(cand_.begin(), cand_.end(), 0);
    sorted_ = false;
  }
  if (c.top_p < 1.0f) keep_top_p();
  if (c.min_p > 0.0f) keep_min_p();
  // Tokens at -inf (masked by the model) have no probability; keep one token
  // at least so that a fully masked row still yields its argmax.
  size_t out = 0;
  for (int32_t t : cand_)
    if (w[t] != kNegInf) cand_[out++] = t;
  if (out == 0) {
    cand_.assign(1, fallback_token(n));
    return;
  }
  cand_.resize(out);
}

float Sampler::candidates_max() const {
  const float* w = work_.data();
  if (sorted_) return w[cand_[0]];
  if (cand_.size() == work_.size()) return max_value(w, static_cast<int64_t>(cand_.size()));
  float mx = kNegInf;
  for (int32_t t : cand_) mx = std::max(mx, w[t]);
  return mx;
}

int32_t Sampler::sample(const float* logits, int64_t n, const uint32_t* allowed) {
  run_stages(logits, n, allowed);
  if (cand_.size() == 1) return cand_[0];
  const float* w = work_.data();
  const float mx = candidates_max();
  double z = 0;
  for (int32_t t : cand_) z += std::exp(w[t] - mx);
  const double u = uniform() * z;
  double acc = 0;
  for (int32_t t : cand_) {
    acc += std::exp(w[t] - mx);
    if (acc > u) return t;
  }
  return cand_.back();  // u within rounding of z
}

void Sampler::process(const float* logits, int64_t n, float* out, const uint32_t* allowed) {
  run_stages(logits, n, allowed);
  std::fill(out, out + n, kNegInf);
  for (int32_t t : cand_) out[t] = work_[static_cast<size_t>(t)];
}

void Sampler::probs(const float* logits, int64_t n, float* out, const uint32_t* allowed) {
  run_stages(logits, n, allowed);
  std::fill(out, out + n, 0.0f);
  const float* w = work_.data();
  const float mx = candidates_max();
  double z = 0;
  for (int32_t t : cand_) z += std::exp(static_cast<double>(w[t]) - mx);
  for (int32_t t : cand_) out[t] = static_cast<float>(std::exp(static_cast<double>(w[t]) - mx) / z);
}

void top_logprobs(const float* logits, int64_t n, int32_t token, int32_t k, float* token_logprob,
                  int32_t* top_ids, float* top_lp) {
  if (n <= 0) throw_shape_mismatch("top_logprobs", {-1}, {n});
  if (token < 0 || token >= n)
    throw_invalid_config("token", "id " + std::to_string(token) + " outside the vocab of " +
                                      std::to_string(n));
  if (k < 0 || k > n) throw_invalid_config("top_logprobs", "must be in [0, vocab]");
  const float mx = max_value(logits, n);
  double z = 0;
  for (int64_t i = 0; i < n; ++i) z += std::exp(logits[i] - mx);
  const double log_z = static_cast<double>(mx) + std::log(z);
  *token_logprob = static_cast<float>(logits[token] - log_z);
  if (k == 0) return;
  top_indices(logits, n, k, top_ids);
  for (int32_t i = 0; i < k; ++i) top_lp[i] = static_cast<float>(logits[top_ids[i]] - log_z);
}

void top_indices(const float* v, int64_t n, int32_t k, int32_t* out) {
  if (k < 0 || k > n) throw_invalid_config("k", "must be in [0, " + std::to_string(n) + "], got " + std::to_string(k));
  if (n > std::numeric_limits<int32_t>::max()) throw_shape_mismatch("top_indices", {std::numeric_limits<int32_t>::max()}, {n});
  if (k == 0) return;
  // A heap of the k best numbers so far in the sampler's order (ByLogitDesc), the worst on top;
  // indices arrive in increasing order, so a later value equal to the worst never displaces it.
  // NaN is skipped here and fills what is left, lowest index first.
  const ByLogitDesc before{v};
  std::vector<int32_t> heap;
  heap.reserve(static_cast<size_t>(k));
  for (int32_t i = 0; i < static_cast<int32_t>(n); ++i) {
    if (std::isnan(v[i])) continue;
    if (static_cast<int32_t>(heap.size()) < k) {
      heap.push_back(i);
      std::push_heap(heap.begin(), heap.end(), before);
    } else if (before(i, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), before);
      heap.back() = i;
      std::push_heap(heap.begin(), heap.end(), before);
    }
  }
  std::sort_heap(heap.begin(), heap.end(), before);
  int32_t* end = std::copy(heap.begin(), heap.end(), out);
  for (int32_t i = 0; end < out + k; ++i)
    if (std::isnan(v[i])) *end++ = i;
}

}  // namespace cyb
