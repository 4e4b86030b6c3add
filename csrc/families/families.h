// The curated families: model_type -> factory. One file per family.
#pragma once
#include <memory>
#include <string>

#include "format/toml.h"
#include "runtime/model.h"

namespace cyb {

using FamilyFactory = std::shared_ptr<Model> (*)(std::shared_ptr<ModelFile>, const LoadOptions&);

// nullptr when model_type has no curated family.
FamilyFactory find_family(const std::string& model_type);
// Comma-separated list of the curated model types (for error messages).
std::string curated_model_types();

struct FamilySpec;
struct DecoderConfig;
// The spec and config a curated decoder family runs with (what its factory
// passes to make_decoder); false when model_type has no curated family. Used by
// the graph emitter so a graph expresses exactly the curated computation.
using FamilyDescriber = void (*)(const toml::Value& config, FamilySpec& spec, DecoderConfig& cfg);
FamilyDescriber find_family_describer(const std::string& model_type);
void describe_llama(const toml::Value&, FamilySpec&, DecoderConfig&);
void describe_qwen2(const toml::Value&, FamilySpec&, DecoderConfig&);
void describe_qwen3(const toml::Value&, FamilySpec&, DecoderConfig&);
void describe_gemma(const toml::Value&, FamilySpec&, DecoderConfig&);
void describe_gemma2(const toml::Value&, FamilySpec&, DecoderConfig&);
void describe_gemma3(const toml::Value&, FamilySpec&, DecoderConfig&);
void describe_phi3(const toml::Value&, FamilySpec&, DecoderConfig&);
std::shared_ptr<Model> make_llama(std::shared_ptr<ModelFile> f, const LoadOptions& o);
std::shared_ptr<Model> make_qwen2(std::shared_ptr<ModelFile> f, const LoadOptions& o);
std::shared_ptr<Model> make_qwen3(std::shared_ptr<ModelFile> f, const LoadOptions& o);
std::shared_ptr<Model> make_gemma(std::shared_ptr<ModelFile> f, const LoadOptions& o);
std::shared_ptr<Model> make_gemma2(std::shared_ptr<ModelFile> f, const LoadOptions& o);
std::shared_ptr<Model> make_gemma3(std::shared_ptr<ModelFile> f, const LoadOptions& o);
std::shared_ptr<Model> make_phi3(std::shared_ptr<ModelFile> f, const LoadOptions& o);

}  // namespace cyb
