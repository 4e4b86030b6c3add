// Gemma (1): RMSNorm as x * (1 + w), embeddings scaled by sqrt(hidden),
// GeGLU with the tanh GELU, tied embeddings.
#include "families/decoder.h"
#include "families/families.h"

namespace cyb {

void describe_gemma(const toml::Value& config, FamilySpec& spec_out, DecoderConfig& cfg_out) {
  FamilySpec spec{"gemma"};
  spec.norm_plus_one = true;
  spec.embed_scale = true;
  spec.gelu_tanh = true;
  DecoderConfig cfg = parse_decoder_config(config);
  cfg.tie_embeddings = true;
  spec_out = spec;
  cfg_out = std::move(cfg);
}

std::shared_ptr<Model> make_gemma(std::shared_ptr<ModelFile> f, const LoadOptions& o) {
  FamilySpec spec{""};
  DecoderConfig cfg;
  describe_gemma(f->config(), spec, cfg);
  return make_decoder(std::move(f), o, spec, std::move(cfg));
}

}  // namespace cyb
