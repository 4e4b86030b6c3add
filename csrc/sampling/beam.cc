#include "sampling/beam.h"

#include <algorithm>
#include <string>

#include "core/errors.h"

namespace cyb {

void check_beam_spec(const BeamSpec& spec, int64_t n) {
  if (spec.k < 1 || spec.k > kMaxBeamCandidates || spec.k > n)
    throw_invalid_config("k", "candidates a row must be in [1, " + std::to_string(std::min<int64_t>(kMaxBeamCandidates, n)) +
                                  "], got " + std::to_string(spec.k));
  if (spec.ts_begin < 0 || spec.ts_end < spec.ts_begin || spec.ts_end > n)
    throw_invalid_config("timestamp_range", "[" + std::to_string(spec.ts_begin) + ", " + std::to_string(spec.ts_end) +
                                                ") is not a range of the " + std::to_string(n) + " tokens");
}

std::vector<BeamPick> merge_beam_rows(const float* score, const int32_t* token, int64_t rows, int32_t k) {
  std::vector<BeamPick> all;
  all.reserve(static_cast<size_t>(rows * k));
  for (int64_t r = 0; r < rows; ++r)
    for (int32_t j = 0; j < k; ++j) all.push_back({static_cast<int32_t>(r), token[r * k + j], score[r * k + j]});
  const auto better = [](const BeamPick& a, const BeamPick& b) {
    if (a.score != b.score) return a.score > b.score;
    return a.row != b.row ? a.row < b.row : a.token < b.token;
  };
  const size_t keep = std::min(all.size(), static_cast<size_t>(k));
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(keep), all.end(), better);
  all.resize(keep);
  return all;
}

}  // namespace cyb
