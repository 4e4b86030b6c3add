// libFuzzer target of the `.model` reader (tools/fuzz.sh builds and runs it).
// Any input must end in a valid ModelFile or a cyb::Error: a crash, a
// sanitizer report, a leak or a hang is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/errors.h"
#include "format/model_file.h"
#include "format/toml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto mf = cyb::ModelFile::from_memory(data, size, "<fuzz>");
    for (const std::string& name : mf->section_names()) {
      try {
        (void)mf->section_toml(name);
      } catch (const cyb::Error&) {
      }
    }
    // Touch the first and last byte of every tensor: out-of-range entries
    // that slipped through validation show up as heap overflows.
    volatile uint8_t sink = 0;
    for (const cyb::TensorEntry& e : mf->tensors()) {
      if (e.size == 0) continue;
      const uint8_t* p = mf->tensor_data(e);
      sink = sink ^ p[0] ^ p[e.size - 1];
    }
    (void)sink;
  } catch (const cyb::Error&) {
  }
  try {
    (void)cyb::toml::parse(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const cyb::Error&) {
  }
  return 0;
}
