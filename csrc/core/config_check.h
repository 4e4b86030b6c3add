// Domain checks of numeric config values (docs/errors.md, "Input validation").
//
// Defined once and used by every path that reads model constants: the curated
// decoder, encoder and whisper configs (families/decoder.cc, validate_decoder_config;
// families/encoder.cc, families/whisper.cc) and the graph section's op attributes
// (graph/graph.cc). A value outside its domain raises InvalidConfig(field,
// "must be ...") at load, before any table or forward is computed with it.
#pragma once
#include <cstdint>
#include <string>

#include "core/rope.h"

namespace cyb {

enum class Domain {
  Finite,       // any finite number
  Positive,     // finite and > 0
  NonNegative,  // finite and >= 0
};

// The ops and the rope tables take these constants rounded to f32, so the
// value is checked after that rounding: 1e39 is infinite, 1e-50 is zero.
// Returns v.
double check_domain(double v, Domain d, const std::string& field);

// An integer config value (a size, a count, an id) in [lo, hi]: InvalidConfig(field,
// "must be in [lo, hi] (got <v>)") outside. Returns v.
int64_t check_int_range(int64_t v, int64_t lo, int64_t hi, const std::string& field);
// A size or count in [1, hi]: InvalidConfig(field, "must be a positive integer (got <v>)")
// outside (the decoder's message). Returns v.
int64_t check_positive_int(int64_t v, int64_t hi, const std::string& field);

// rope_theta (> 0) and every parameter of a rope scaling (factor > 0,
// llama3 low_freq_factor < high_freq_factor, yarn betas > 0, ...).
// `theta_field` and `scaling_field` are the names errors give.
void check_rope_domain(double theta, const RopeScaling& sc, const std::string& theta_field,
                       const std::string& scaling_field);

}  // namespace cyb
