// RoPE cos/sin tables, computed at load with the inverse frequencies exactly as
// HF transformers computes them (f32 arithmetic, same order of operations).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace cyb {

struct RopeScaling {
  std::string type = "default";  // default | linear | llama3 | yarn
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;  // llama3, yarn (0: use max_pos)
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double attention_factor = 0.0;  // 0: derived from factor (and mscale / mscale_all_dim)
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  bool truncate = true;
};

// Inverse frequencies (rot_dims / 2 of them) and the factor the tables are multiplied by
// (yarn's attention_factor; 1 otherwise).
void rope_inv_freq(int rot_dims, double theta, const RopeScaling& sc, std::vector<float>& inv_freq,
                   float* attention_factor);

// cos[p * (rot_dims/2) + i] = cos(p * inv_freq[i]) * attention_factor, p < max_pos; sin likewise.
// Throws InvalidConfig for an unknown or unsupported scaling type.
void build_rope_table(int rot_dims, int64_t max_pos, double theta, const RopeScaling& sc,
                      std::vector<float>& cos, std::vector<float>& sin);

}  // namespace cyb
