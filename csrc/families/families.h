// The curated families: one registry row per model_type, data (a FamilySpec)
// plus a small adjust hook for what a family reads beyond the shared decoder
// keys. Every curated family runs the one decoder plan (families/decoder_plan.h),
// consumed by the curated forward and the graph builder alike.
#pragma once
#include <string>

#include "families/decoder.h"
#include "format/toml.h"

namespace cyb {

struct FamilyInfo {
  const char* model_type;
  FamilySpec spec;
  // Family-specific config on top of parse_decoder_config (may be null).
  void (*adjust)(const toml::Value& arch, DecoderConfig& cfg);
};

// nullptr when model_type has no curated family.
const FamilyInfo* find_family(const std::string& model_type);
// Comma-separated list of the curated model types (for error messages).
std::string curated_model_types();

}  // namespace cyb
