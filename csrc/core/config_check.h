// Domain checks of numeric config values (docs/errors.md, "Input validation").
//
// Defined once and used by every path that reads model constants: the curated
// decoder config (families/decoder.cc, validate_decoder_config) and the graph
// section's op attributes (graph/graph.cc). A value outside its domain raises
// InvalidConfig(field, "must be ..., got <value>") at load, before any table
// or forward is computed with it.
#pragma once
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

// rope_theta (> 0) and every parameter of a rope scaling (factor > 0,
// llama3 low_freq_factor < high_freq_factor, yarn betas > 0, ...).
// `theta_field` and `scaling_field` are the names errors give.
void check_rope_domain(double theta, const RopeScaling& sc, const std::string& theta_field,
                       const std::string& scaling_field);

}  // namespace cyb
