// Beam candidates of a decode step on the device (Whisper's beam search and greedy decoding,
// docs/whisper.md "Decoding on the device"): the logits rules' mask, the timestamp check, the
// log-softmax, the beam's cumulative log-probability and the best k of each row, in one pass over
// [rows, n] logits, so that only k (score, token) pairs a row leave the device. The statement of
// the step is the host's (python/cyb_llm/speech/search.py `_host_candidates`: LogitRules.apply,
// log_softmax, the best k of the flat [rows * n] scores); the kernel (shaders/wgsl/beam.wgsl)
// runs it per row as follows.
//
// Row r, token t: x[t] = logits[r, t] where bit t of p[r].allowed is set (all tokens when
// allowed is nullptr), else -inf. The timestamp check (p[r].check, with ts_begin < ts_end <= n):
// when logsumexp(x[ts_begin, ts_end)) > max(x[0, ts_begin)), x[0, ts_begin) = -inf. Then
// score[t] = (x[t] - max x) - log(sum exp(x - max x)) + p[r].cum in f32; the row's k best by
// (score desc, token asc); a row whose x are all -inf scores -inf with the lowest tokens.
// first_nonfinite[r]: the first token whose logit is NaN or +-inf (-1: none), the caller's error.
#pragma once
#include <cstdint>
#include <vector>

namespace cyb {

struct BeamRow {
  const uint32_t* allowed = nullptr;  // nullptr, or (n + 31) / 32 words
  float cum = 0.0f;
  bool check = false;
};

struct BeamSpec {
  int64_t ts_begin = 0;  // the timestamp check's range [ts_begin, ts_end); unused when no row checks
  int64_t ts_end = 0;
  int32_t k = 1;         // candidates a row, 1..kMaxBeamCandidates and <= n
};
constexpr int32_t kMaxBeamCandidates = 64;

// Checks k, the timestamp range against n (InvalidConfig naming the field).
void check_beam_spec(const BeamSpec& spec, int64_t n);

// The best k of the rows' candidates (score[r * k + j], token[r * k + j]): by score desc, then
// (row, token) asc (the order of the flat [rows * n] array); entries (row, token, score).
struct BeamPick {
  int32_t row;
  int32_t token;
  float score;
};
std::vector<BeamPick> merge_beam_rows(const float* score, const int32_t* token, int64_t rows, int32_t k);

}  // namespace cyb
