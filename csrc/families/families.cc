#include "families/families.h"

#include <cmath>

#include "core/errors.h"

namespace cyb {

namespace {

// Mistral-style sliding window: every layer, when configured below max_position.
void adjust_llama(const toml::Value&, DecoderConfig& cfg) {
  if (cfg.sliding_window > 0 && cfg.sliding_window < cfg.max_position)
    cfg.layer_sliding.assign(static_cast<size_t>(cfg.n_layers), 1);
}

// Qwen2 / Qwen3 configs carry sliding_window but use_sliding_window is false in every released model.
void adjust_qwen(const toml::Value& arch, DecoderConfig& cfg) {
  if (!config_bool_or(arch, "use_sliding_window", false)) cfg.sliding_window = 0;
}

void adjust_gemma(const toml::Value&, DecoderConfig& cfg) { cfg.tie_embeddings = true; }

// Gemma 2: sliding window on even layers, attention scale query_pre_attn_scalar^-0.5.
void adjust_gemma2(const toml::Value& arch, DecoderConfig& cfg) {
  cfg.tie_embeddings = true;
  if (!arch.find("layer_types"))
    for (int64_t l = 0; l < cfg.n_layers; ++l) cfg.layer_sliding[static_cast<size_t>(l)] = l % 2 == 0;
  cfg.attn_scale = 1.0 / std::sqrt(config_float_or(arch, "query_pre_attn_scalar", static_cast<double>(cfg.head_dim)));
}

// Gemma 3: sliding/global layers (layer_types, default every 6th global), a
// separate rope base for the sliding layers (rope_local_base_freq).
void adjust_gemma3(const toml::Value& arch, DecoderConfig& cfg) {
  cfg.tie_embeddings = true;
  if (!arch.find("layer_types")) {
    const int64_t pattern = config_int_or(arch, "sliding_window_pattern", 6);
    if (pattern <= 0)
      throw_invalid_config("architecture.sliding_window_pattern", "must be a positive integer, got " + std::to_string(pattern));
    for (int64_t l = 0; l < cfg.n_layers; ++l) cfg.layer_sliding[static_cast<size_t>(l)] = (l + 1) % pattern != 0;
  }
  cfg.rope_local_theta = config_float_or(arch, "rope_local_base_freq", 10000.0);
  cfg.attn_scale = 1.0 / std::sqrt(config_float_or(arch, "query_pre_attn_scalar", static_cast<double>(cfg.head_dim)));
}

// Phi-3: sliding window on every layer when below max_position, else none.
void adjust_phi3(const toml::Value&, DecoderConfig& cfg) {
  if (cfg.sliding_window > 0 && cfg.sliding_window < cfg.max_position)
    cfg.layer_sliding.assign(static_cast<size_t>(cfg.n_layers), 1);
  else
    cfg.sliding_window = 0;
}


// FamilySpec: name, norm_plus_one, embed_scale, qkv_bias, qk_norm, sandwich_norm, gelu_tanh, fused_qkv, fused_gate_up
//   llama    (SmolLM2, Llama 2/3, Mistral): pre-norm, SwiGLU, GQA, RoPE (neox layout after import), rope scaling
//   qwen2    the llama layout plus biases on the q, k, v projections
//   qwen3    the llama layout with RMSNorm over each head of q and k (QK-norm) before RoPE
//   gemma    RMSNorm as x * (1 + w), embeddings scaled by sqrt(hidden), GeGLU (tanh GELU), tied embeddings
//   gemma2   gemma plus sandwich norms, attention and final logit softcapping
//   gemma3   gemma2's layout with QK-norm instead of attention softcapping
//   phi3     the llama layout with one fused qkv_proj and one fused gate_up_proj (row views, never copied)
const FamilySpec kLlama{"llama"};
const FamilySpec kQwen2{"qwen2", false, false, /*qkv_bias=*/true};
const FamilySpec kQwen3{"qwen3", false, false, false, /*qk_norm=*/true};
const FamilySpec kGemma{"gemma", /*norm_plus_one=*/true, /*embed_scale=*/true, false, false, false, /*gelu_tanh=*/true};
const FamilySpec kGemma2{"gemma2", true, true, false, false, /*sandwich_norm=*/true, true};
const FamilySpec kGemma3{"gemma3", true, true, false, /*qk_norm=*/true, /*sandwich_norm=*/true, true};
const FamilySpec kPhi3{"phi3", false, false, false, false, false, false, /*fused_qkv=*/true, /*fused_gate_up=*/true};

const FamilyInfo kFamilies[] = {
    {"llama", kLlama, adjust_llama},   {"mistral", kLlama, adjust_llama},       {"qwen2", kQwen2, adjust_qwen},
    {"qwen3", kQwen3, adjust_qwen},    {"gemma", kGemma, adjust_gemma},         {"gemma2", kGemma2, adjust_gemma2},
    {"gemma3", kGemma3, adjust_gemma3}, {"gemma3_text", kGemma3, adjust_gemma3}, {"phi3", kPhi3, adjust_phi3},
};

}  // namespace

const FamilyInfo* find_family(const std::string& model_type) {
  for (const FamilyInfo& e : kFamilies)
    if (model_type == e.model_type) return &e;
  return nullptr;
}

std::string curated_model_types() {
  std::string s;
  for (const FamilyInfo& e : kFamilies) s += (s.empty() ? "" : ", ") + std::string(e.model_type);
  return s;
}

}  // namespace cyb
