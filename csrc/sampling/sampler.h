// Token sampling over one row of logits (docs/generation.md):
//   logit bias -> allowed-token mask -> penalties -> temperature -> top-k ->
//   top-p -> min-p -> draw.
// The logit bias (sparse: token id -> additive bias, set once per sampler)
// and the allowed-token mask (a bitset given per step, bit i of word i / 32
// set = token i may be drawn; structured output, docs/generation.md) come
// before every other stage, so greedy and sampled decoding both respect them.
// The math of each stage matches the HF logits processors of the same name
// (RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper,
// TopPLogitsWarper, MinPLogitsWarper); presence/frequency penalties follow the
// OpenAI definition (logit -= count * frequency + (count > 0) * presence).
//
// A Sampler owns its token history (for the penalties) and its RNG, so the
// same seed and the same logits give the same tokens on every platform: the
// RNG is mt19937_64 and the uniform draw is built from its bits by hand (the
// standard distributions are implementation-defined).
//
// Cost per token is O(vocab) passes plus a partial sort of the candidates:
// top-k keeps a heap of k entries, top-p without top-k sorts a growing prefix
// (256, 1024, ...) until it holds the requested mass, never the whole vocab.
#pragma once
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace cyb {

struct SamplingConfig {
  float temperature = 1.0f;         // 0 = greedy (argmax after the penalties)
  int32_t top_k = 0;                // 0 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off; > 1 discourages repeats
  float presence_penalty = 0.0f;    // 0 = off
  float frequency_penalty = 0.0f;   // 0 = off
  int32_t penalty_last_n = 64;      // history window for penalties: -1 = all, 0 = none
  uint64_t seed = 0;
};

// Checks ranges and throws InvalidConfig naming the field.
void validate(const SamplingConfig& c);

class Sampler {
 public:
  explicit Sampler(const SamplingConfig& config);

  const SamplingConfig& config() const { return config_; }
  const std::vector<int32_t>& history() const { return history_; }

  // Appends tokens to the penalty history (the prompt, then each drawn token).
  void accept(int32_t token) { history_.push_back(token); }
  void accept(const int32_t* tokens, size_t n) { history_.insert(history_.end(), tokens, tokens + n); }
  // Clears the history and restarts the RNG from `seed`.
  void reset(uint64_t seed);

  // Additive logit biases (token id, bias), applied before every other stage
  // of each later draw. Biases must be finite (InvalidConfig "logit_bias");
  // an id outside the vocab of a row is InvalidConfig when that row is drawn.
  // A repeated id adds up. Replaces any earlier biases.
  void set_logit_bias(const int32_t* ids, const float* bias, size_t count);
  const std::vector<std::pair<int32_t, float>>& logit_bias() const { return bias_; }

  // Draws one token id from logits[0..n). Does not modify `logits`.
  // `allowed`: nullptr, or mask_words(n) words; only tokens whose bit is set
  // can be drawn (bits past n are ignored). A mask that allows no token is
  // InvalidConfig("allowed").
  int32_t sample(const float* logits, int64_t n, const uint32_t* allowed = nullptr);

  // The logits after every stage, as the HF processors would return them:
  // kept tokens carry their penalized, temperature-scaled logit, removed ones
  // -inf. Greedy keeps only the argmax. `out` has n entries.
  void process(const float* logits, int64_t n, float* out, const uint32_t* allowed = nullptr);
  // The distribution the draw uses (softmax of process()), `out` has n entries.
  void probs(const float* logits, int64_t n, float* out, const uint32_t* allowed = nullptr);

  // 32-bit words of an allowed-token mask over a vocab of n.
  static int64_t mask_words(int64_t n) { return (n + 31) / 32; }
  // InvalidConfig("allowed") when the mask allows no token of a vocab of n (the
  // device sampler's check, with the message sample() gives).
  static void check_mask(const uint32_t* allowed, int64_t n);

  // Device sampling (docs/generation.md, "Sampling on the GPU"): a device kernel
  // runs the mask, temperature, top-k, top-p, min-p and the draw, with the uniform
  // this sampler would draw next. device_ok(): no logit bias and no penalty
  // (those stay on the host sampler). peek_uniform() is that next uniform
  // without taking it; take_uniform() takes it (the kernel used it), so the
  // stream stays the one sample() would have drawn from.
  bool device_ok() const;
  // peek_uniform(1): the uniform after that one (a chained device draw's, backend.h).
  double peek_uniform(int ahead = 0);
  void take_uniform();

 private:
  // Runs every stage; leaves the kept token ids in cand_ (largest first
  // when sorted_ is true) and their processed logits in work_.
  void run_stages(const float* logits, int64_t n, const uint32_t* allowed);
  void apply_bias(int64_t n);
  void apply_mask(int64_t n, const uint32_t* allowed);
  void apply_penalties(int64_t n);
  int32_t fallback_token(int64_t n) const;
  void keep_top_k(int64_t n);
  void keep_top_p();
  void keep_min_p();
  double uniform();  // in [0, 1), 53 random bits
  float candidates_max() const;

  SamplingConfig config_;
  std::vector<int32_t> history_;
  std::mt19937_64 rng_;
  std::vector<float> work_;        // [n] processed logits
  std::vector<int32_t> cand_;      // kept token ids
  std::vector<int32_t> window_;    // scratch: sorted penalty window
  std::vector<float> heap_;        // scratch: top-k heap
  std::vector<std::pair<int32_t, float>> bias_;  // logit bias (id, additive)
  int32_t first_allowed_ = -1;     // lowest id the mask of this draw allows (-1: no mask)
  double pending_u_[2] = {0, 0};   // peek_uniform's draws, not taken yet (oldest first)
  int pending_ = 0;
  bool sorted_ = false;            // cand_ is in descending logit order
};

// The indices of the k largest of v[0..n) (k <= n), best first: ties by lower index, NaN below
// every number. One pass with a k-entry heap (beam search's candidates over beams x vocab values,
// logprobs' top ids).
void top_indices(const float* v, int64_t n, int32_t k, int32_t* out);

// log-softmax of one row: the log-probability of `token` and the k most
// likely tokens with theirs (descending; ties by lower id). For logprobs.
void top_logprobs(const float* logits, int64_t n, int32_t token, int32_t k, float* token_logprob,
                  int32_t* top_ids, float* top_lp);

}  // namespace cyb
