// Qwen3: the llama layout with RMSNorm over each head of q and k (QK-norm)
// before RoPE, explicit head_dim, no qkv bias.
#include "families/decoder.h"
#include "families/families.h"

namespace cyb {

void describe_qwen3(const toml::Value& config, FamilySpec& spec_out, DecoderConfig& cfg_out) {
  FamilySpec spec{"qwen3"};
  spec.qk_norm = true;
  DecoderConfig cfg = parse_decoder_config(config);
  const toml::Value& arch = config_arch(config);
  if (!config_bool_or(arch, "use_sliding_window", false)) cfg.sliding_window = 0;
  spec_out = spec;
  cfg_out = std::move(cfg);
}

std::shared_ptr<Model> make_qwen3(std::shared_ptr<ModelFile> f, const LoadOptions& o) {
  FamilySpec spec{""};
  DecoderConfig cfg;
  describe_qwen3(f->config(), spec, cfg);
  return make_decoder(std::move(f), o, spec, std::move(cfg));
}

}  // namespace cyb
