// Qwen2 / Qwen2.5: the llama layout plus biases on the q, k, v projections.
#include "families/decoder.h"
#include "families/families.h"

namespace cyb {

void describe_qwen2(const toml::Value& config, FamilySpec& spec_out, DecoderConfig& cfg_out) {
  FamilySpec spec{"qwen2"};
  spec.qkv_bias = true;
  DecoderConfig cfg = parse_decoder_config(config);
  // Qwen2 configs carry sliding_window but use_sliding_window is false in every released model.
  const toml::Value& arch = config_arch(config);
  if (!config_bool_or(arch, "use_sliding_window", false)) cfg.sliding_window = 0;
  spec_out = spec;
  cfg_out = std::move(cfg);
}

std::shared_ptr<Model> make_qwen2(std::shared_ptr<ModelFile> f, const LoadOptions& o) {
  FamilySpec spec{""};
  DecoderConfig cfg;
  describe_qwen2(f->config(), spec, cfg);
  return make_decoder(std::move(f), o, spec, std::move(cfg));
}

}  // namespace cyb
