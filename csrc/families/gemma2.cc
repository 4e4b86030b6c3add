// Gemma 2: Gemma plus sandwich norms (post-attention, pre/post feed-forward),
// attention and final logit softcapping, sliding window on even layers,
// attention scale query_pre_attn_scalar^-0.5.
#include <cmath>

#include "families/decoder.h"
#include "families/families.h"

namespace cyb {

void describe_gemma2(const toml::Value& config, FamilySpec& spec_out, DecoderConfig& cfg_out) {
  FamilySpec spec{"gemma2"};
  spec.norm_plus_one = true;
  spec.embed_scale = true;
  spec.gelu_tanh = true;
  spec.sandwich_norm = true;
  DecoderConfig cfg = parse_decoder_config(config);
  cfg.tie_embeddings = true;
  const toml::Value& arch = config_arch(config);
  if (!arch.find("layer_types"))
    for (int64_t l = 0; l < cfg.n_layers; ++l) cfg.layer_sliding[static_cast<size_t>(l)] = l % 2 == 0;
  cfg.attn_scale = 1.0 / std::sqrt(config_float_or(arch, "query_pre_attn_scalar",
                                                   static_cast<double>(cfg.head_dim)));
  spec_out = spec;
  cfg_out = std::move(cfg);
}

std::shared_ptr<Model> make_gemma2(std::shared_ptr<ModelFile> f, const LoadOptions& o) {
  FamilySpec spec{""};
  DecoderConfig cfg;
  describe_gemma2(f->config(), spec, cfg);
  return make_decoder(std::move(f), o, spec, std::move(cfg));
}

}  // namespace cyb
