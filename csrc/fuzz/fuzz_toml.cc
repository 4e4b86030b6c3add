// libFuzzer target of the TOML-subset parser (docs/toml-subset.md; tools/fuzz.sh
// builds and runs it). Any input must parse or throw a cyb::Error: a crash, a
// sanitizer report, a leak or a hang (deep nesting, long strings) is a bug.
// A parsed document is walked completely, and every string in it must be
// valid UTF-8 (the parser's promise to the readers of `.model` sections).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/errors.h"
#include "format/toml.h"

namespace {

size_t walk(const cyb::toml::Value& v, int depth) {
  using T = cyb::toml::Value::Type;
  if (depth > 10000) std::abort();  // the parser bounds nesting; a deeper tree is a bug
  size_t n = 1;
  switch (v.type()) {
    case T::String:
      if (cyb::toml::invalid_utf8_offset(v.as_string()) != std::string_view::npos) std::abort();
      break;
    case T::Array:
      for (const auto& e : v.as_array()) n += walk(e, depth + 1);
      break;
    case T::Table:
      for (const auto& kv : v.as_table()) {
        if (cyb::toml::invalid_utf8_offset(kv.first) != std::string_view::npos) std::abort();
        if (v.find(kv.first) == nullptr) std::abort();  // every key is found again by lookup
        n += walk(kv.second, depth + 1);
      }
      break;
    default:
      break;
  }
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)cyb::toml::invalid_utf8_offset(text);
  try {
    const cyb::toml::Value doc = cyb::toml::parse(text, "fuzz");
    (void)walk(doc, 0);
    // Dotted lookups of the first keys, as readers of the config do.
    if (doc.is_table()) {
      for (const auto& kv : doc.as_table()) {
        if (kv.second.is_table() && !kv.second.as_table().empty())
          (void)doc.find_path(kv.first + "." + kv.second.as_table().front().first);
      }
    }
  } catch (const cyb::Error&) {
  }
  return 0;
}
