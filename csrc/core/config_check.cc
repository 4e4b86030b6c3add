#include "core/config_check.h"

#include <cmath>
#include <cstdio>

#include "core/errors.h"

namespace cyb {

namespace {

std::string number_str(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

double check_domain(double v, Domain d, const std::string& field) {
  const float f = static_cast<float>(v);
  const char* want = d == Domain::Positive ? "a finite number > 0"
                     : d == Domain::NonNegative ? "a finite number >= 0"
                                                : "a finite number";
  bool ok = std::isfinite(v) && std::isfinite(f);
  if (ok && d == Domain::Positive) ok = f > 0.0f;
  if (ok && d == Domain::NonNegative) ok = f >= 0.0f;
  if (!ok) {
    std::string got = number_str(v);
    if (std::isfinite(v) && !std::isfinite(f)) got += " (beyond the f32 range)";
    if (std::isfinite(v) && v != 0.0 && f == 0.0f && d == Domain::Positive) got += " (zero in f32)";
    throw_invalid_config(field, std::string("must be ") + want + ", got " + got);
  }
  return v;
}

int64_t check_int_range(int64_t v, int64_t lo, int64_t hi, const std::string& field) {
  if (v < lo || v > hi)
    throw_invalid_config(field, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "] (got " +
                                    std::to_string(v) + ")");
  return v;
}

int64_t check_positive_int(int64_t v, int64_t hi, const std::string& field) {
  if (v <= 0 || v > hi) throw_invalid_config(field, "must be a positive integer (got " + std::to_string(v) + ")");
  return v;
}

void check_rope_domain(double theta, const RopeScaling& sc, const std::string& theta_field,
                       const std::string& scaling_field) {
  check_domain(theta, Domain::Positive, theta_field);
  const std::string p = scaling_field + ".";
  check_domain(sc.factor, Domain::Positive, p + "factor");
  check_domain(sc.low_freq_factor, Domain::Positive, p + "low_freq_factor");
  check_domain(sc.high_freq_factor, Domain::Positive, p + "high_freq_factor");
  if (sc.type == "llama3" && !(sc.high_freq_factor > sc.low_freq_factor))
    throw_invalid_config(p + "high_freq_factor", "must be greater than low_freq_factor (" +
                                                     number_str(sc.low_freq_factor) + "), got " +
                                                     number_str(sc.high_freq_factor));
  if (sc.original_max_position_embeddings < 0)
    throw_invalid_config(p + "original_max_position_embeddings",
                         "must be >= 0, got " + std::to_string(sc.original_max_position_embeddings));
  check_domain(sc.beta_fast, Domain::Positive, p + "beta_fast");
  check_domain(sc.beta_slow, Domain::Positive, p + "beta_slow");
  check_domain(sc.attention_factor, Domain::NonNegative, p + "attention_factor");
  check_domain(sc.mscale, Domain::NonNegative, p + "mscale");
  check_domain(sc.mscale_all_dim, Domain::NonNegative, p + "mscale_all_dim");
}

}  // namespace cyb
