// Llama family (SmolLM2, Llama 2/3, Mistral): pre-norm, SwiGLU, GQA, RoPE
// (neox layout after import), optional rope scaling (linear, llama3).
#include "families/decoder.h"
#include "families/families.h"

namespace cyb {

void describe_llama(const toml::Value& config, FamilySpec& spec_out, DecoderConfig& cfg_out) {
  FamilySpec spec{"llama"};
  DecoderConfig cfg = parse_decoder_config(config);
  // Mistral-style sliding window applies to every layer when configured.
  if (cfg.sliding_window > 0 && cfg.sliding_window < cfg.max_position)
    cfg.layer_sliding.assign(static_cast<size_t>(cfg.n_layers), 1);
  spec_out = spec;
  cfg_out = std::move(cfg);
}

std::shared_ptr<Model> make_llama(std::shared_ptr<ModelFile> f, const LoadOptions& o) {
  FamilySpec spec{""};
  DecoderConfig cfg;
  describe_llama(f->config(), spec, cfg);
  return make_decoder(std::move(f), o, spec, std::move(cfg));
}

}  // namespace cyb
