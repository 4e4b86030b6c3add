// The curated families: model_type -> factory. One file per family.
#pragma once
#include <memory>
#include <string>

#include "runtime/model.h"

namespace cyb {

using FamilyFactory = std::shared_ptr<Model> (*)(std::shared_ptr<ModelFile>, const LoadOptions&);

// nullptr when model_type has no curated family.
FamilyFactory find_family(const std::string& model_type);
// Comma-separated list of the curated model types (for error messages).
std::string curated_model_types();

std::shared_ptr<Model> make_llama(std::shared_ptr<ModelFile> f, const LoadOptions& o);
std::shared_ptr<Model> make_qwen2(std::shared_ptr<ModelFile> f, const LoadOptions& o);
std::shared_ptr<Model> make_qwen3(std::shared_ptr<ModelFile> f, const LoadOptions& o);
std::shared_ptr<Model> make_gemma(std::shared_ptr<ModelFile> f, const LoadOptions& o);
std::shared_ptr<Model> make_gemma2(std::shared_ptr<ModelFile> f, const LoadOptions& o);
std::shared_ptr<Model> make_gemma3(std::shared_ptr<ModelFile> f, const LoadOptions& o);
std::shared_ptr<Model> make_phi3(std::shared_ptr<ModelFile> f, const LoadOptions& o);

}  // namespace cyb
