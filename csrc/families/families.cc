#include "families/families.h"

namespace cyb {

namespace {
struct Entry {
  const char* model_type;
  FamilyFactory factory;
  FamilyDescriber describe;
};
const Entry kFamilies[] = {
    {"llama", make_llama, describe_llama},   {"mistral", make_llama, describe_llama}, {"qwen2", make_qwen2, describe_qwen2},
    {"qwen3", make_qwen3, describe_qwen3},   {"gemma", make_gemma, describe_gemma},   {"gemma2", make_gemma2, describe_gemma2},
    {"gemma3", make_gemma3, describe_gemma3}, {"gemma3_text", make_gemma3, describe_gemma3}, {"phi3", make_phi3, describe_phi3},
};
}  // namespace

FamilyFactory find_family(const std::string& model_type) {
  for (const Entry& e : kFamilies)
    if (model_type == e.model_type) return e.factory;
  return nullptr;
}

FamilyDescriber find_family_describer(const std::string& model_type) {
  for (const Entry& e : kFamilies)
    if (model_type == e.model_type) return e.describe;
  return nullptr;
}

std::string curated_model_types() {
  std::string s;
  for (const Entry& e : kFamilies) s += (s.empty() ? "" : ", ") + std::string(e.model_type);
  return s;
}

}  // namespace cyb
