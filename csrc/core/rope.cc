#include "core/rope.h"

namespace cyb {

void rope_inv_freq(int rot_dims, double theta, const RopeScaling& sc, std::vector<float>& inv_freq,
                   float* attention_factor) {
  rope_inv_freq_with<StdRopeMath>(rot_dims, theta, sc, inv_freq, attention_factor);
}

void build_rope_table(int rot_dims, int64_t max_pos, double theta, const RopeScaling& sc,
                      std::vector<float>& cos, std::vector<float>& sin) {
  build_rope_table_with<StdRopeMath>(rot_dims, max_pos, theta, sc, cos, sin);
}

}  // namespace cyb
