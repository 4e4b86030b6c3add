// Settings read from environment variables. Each reader checks the value; anything else is
// InvalidConfig naming the variable, the value and what it may be. An empty value reads as
// unset.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#include "core/errors.h"

namespace cyb {

// The value of `name` if it is one of `allowed` (named in the error as "a, b or c"); "" if unset.
inline std::string env_one_of(const char* name, std::initializer_list<const char*> allowed) {
  const char* e = std::getenv(name);
  if (!e || !*e) return "";
  std::string list;
  size_t i = 0;
  for (const char* a : allowed) {
    if (std::strcmp(e, a) == 0) return e;
    list += (i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ") + std::string(a);
    ++i;
  }
  throw_invalid_config(name, std::string("'") + e + "' is not " + list);
}

// A two-value setting: `on_value` -> true, `off_value` -> false, unset -> `unset`.
inline bool env_switch(const char* name, const char* on_value, const char* off_value, bool unset) {
  const std::string v = env_one_of(name, {off_value, on_value});
  return v.empty() ? unset : v == on_value;
}

// An integer setting: its value in [lo, hi], `unset` when absent; `what` names what it must be.
inline int64_t env_int(const char* name, int64_t lo, int64_t hi, int64_t unset, const char* what) {
  const char* e = std::getenv(name);
  if (!e || !*e) return unset;
  char* end = nullptr;
  const long long v = std::strtoll(e, &end, 10);
  if (end == e || *end || v < lo || v > hi) throw_invalid_config(name, std::string("'") + e + "' is not " + what);
  return int64_t{v};
}

}  // namespace cyb
