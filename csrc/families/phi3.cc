// Phi-3: the llama layout with one fused qkv_proj and one fused gate_up_proj
// (used through row views, never copied); partial rotary when configured.
#include "families/decoder.h"
#include "families/families.h"

namespace cyb {

void describe_phi3(const toml::Value& config, FamilySpec& spec_out, DecoderConfig& cfg_out) {
  FamilySpec spec{"phi3"};
  spec.fused_qkv = true;
  spec.fused_gate_up = true;
  DecoderConfig cfg = parse_decoder_config(config);
  if (cfg.sliding_window > 0 && cfg.sliding_window < cfg.max_position)
    cfg.layer_sliding.assign(static_cast<size_t>(cfg.n_layers), 1);
  else
    cfg.sliding_window = 0;
  spec_out = spec;
  cfg_out = std::move(cfg);
}

std::shared_ptr<Model> make_phi3(std::shared_ptr<ModelFile> f, const LoadOptions& o) {
  FamilySpec spec{""};
  DecoderConfig cfg;
  describe_phi3(f->config(), spec, cfg);
  return make_decoder(std::move(f), o, spec, std::move(cfg));
}

}  // namespace cyb
