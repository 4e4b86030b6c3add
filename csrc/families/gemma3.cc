// Gemma 3 (text): Gemma 2's layout with QK-norm instead of attention
// softcapping, sliding/global layers (layer_types, default every 6th global),
// and a separate rope base for the sliding layers (rope_local_base_freq).
#include <cmath>

#include "families/decoder.h"
#include "families/families.h"

namespace cyb {

void describe_gemma3(const toml::Value& config, FamilySpec& spec_out, DecoderConfig& cfg_out) {
  FamilySpec spec{"gemma3"};
  spec.norm_plus_one = true;
  spec.embed_scale = true;
  spec.gelu_tanh = true;
  spec.sandwich_norm = true;
  spec.qk_norm = true;
  DecoderConfig cfg = parse_decoder_config(config);
  cfg.tie_embeddings = true;
  const toml::Value& arch = config_arch(config);
  if (!arch.find("layer_types")) {
    const int64_t pattern = config_int_or(arch, "sliding_window_pattern", 6);
    for (int64_t l = 0; l < cfg.n_layers; ++l)
      cfg.layer_sliding[static_cast<size_t>(l)] = (l + 1) % pattern != 0;
  }
  cfg.rope_local_theta = config_float_or(arch, "rope_local_base_freq", 10000.0);
  cfg.attn_scale = 1.0 / std::sqrt(config_float_or(arch, "query_pre_attn_scalar",
                                                   static_cast<double>(cfg.head_dim)));
  spec_out = spec;
  cfg_out = std::move(cfg);
}

std::shared_ptr<Model> make_gemma3(std::shared_ptr<ModelFile> f, const LoadOptions& o) {
  FamilySpec spec{""};
  DecoderConfig cfg;
  describe_gemma3(f->config(), spec, cfg);
  return make_decoder(std::move(f), o, spec, std::move(cfg));
}

}  // namespace cyb
