#include "families/decoder_plan.h"

#include <cmath>

#include "core/errors.h"
#include "families/families.h"

namespace cyb {

DecoderPlan make_decoder_plan(const std::string& model_type, const toml::Value& config,
                              const std::function<bool(const std::string&)>& has_tensor) {
  const FamilyInfo* fam = find_family(model_type);
  if (!fam)
    throw_invalid_config("model_type", "'" + model_type + "' has no curated family (known: " + curated_model_types() + ")");
  DecoderConfig cfg = parse_decoder_config(config);
  if (fam->adjust) fam->adjust(config_arch(config), cfg);
  validate_decoder_config(cfg);
  const FamilySpec& spec = fam->spec;

  DecoderPlan p;
  p.family = spec.name;
  p.spec = spec;
  const int64_t D = cfg.hidden, hd = cfg.head_dim, H = cfg.n_heads, KV = cfg.n_kv_heads, I = cfg.intermediate;
  const int64_t V = cfg.vocab;
  p.hidden = D;
  p.n_heads = H;
  p.n_kv_heads = KV;
  p.head_dim = hd;
  p.n_layers = cfg.n_layers;
  p.intermediate = I;
  p.vocab = V;
  p.max_position = cfg.max_position;
  p.eps = cfg.eps;
  p.embed_scale = spec.embed_scale ? std::sqrt(static_cast<double>(D)) : 1.0;
  p.attn_scale = static_cast<double>(
      static_cast<float>(cfg.attn_scale > 0.0 ? cfg.attn_scale : 1.0 / std::sqrt(static_cast<double>(hd))));
  p.attn_softcap = cfg.attn_softcap;
  p.final_softcap = cfg.final_softcap;

  auto ref = [](const std::string& tensor, std::vector<int64_t> shape) {
    WeightRef r;
    r.name = r.tensor = tensor;
    r.shape = std::move(shape);
    return r;
  };
  auto vec = [&](const std::string& tensor, int64_t n) {
    WeightRef r = ref(tensor, {n});
    r.vector = true;
    return r;
  };
  auto view = [&](const std::string& name, const std::string& tensor, std::vector<int64_t> shape, int64_t row0,
                  int64_t nrows) {
    WeightRef r = ref(tensor, std::move(shape));
    r.name = name;
    r.row0 = row0;
    r.nrows = nrows;
    return r;
  };

  p.embed = ref("model.embed_tokens.weight", {V, D});
  p.final_norm = vec("model.norm.weight", D);
  if (has_tensor("lm_head.weight")) {
    p.lm_head = ref("lm_head.weight", {V, D});
  } else if (cfg.tie_embeddings) {
    p.lm_head = p.embed;
    p.tied = true;
  } else {
    throw_missing_tensor("lm_head.weight", p.family + " family (tie_word_embeddings is false)");
  }

  // RoPE: the global spec, and the sliding layers' own base (gemma3) when set.
  int rot = static_cast<int>(static_cast<double>(hd) * cfg.partial_rotary);
  rot -= rot % 2;
  p.ropes.push_back(RopePlan{rot, cfg.max_position, cfg.rope_theta, cfg.rope_neox, cfg.rope_scaling});
  const bool local_rope = cfg.rope_local_theta > 0.0;
  if (local_rope) p.ropes.push_back(RopePlan{rot, cfg.max_position, cfg.rope_local_theta, cfg.rope_neox, RopeScaling{}});

  p.layers.resize(static_cast<size_t>(cfg.n_layers));
  for (int64_t l = 0; l < cfg.n_layers; ++l) {
    LayerPlan& w = p.layers[static_cast<size_t>(l)];
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    w.attn_norm = vec(pre + "input_layernorm.weight", D);
    if (spec.sandwich_norm) {
      w.post_attn_norm = vec(pre + "post_attention_layernorm.weight", D);
      w.ffn_norm = vec(pre + "pre_feedforward_layernorm.weight", D);
      w.post_ffn_norm = vec(pre + "post_feedforward_layernorm.weight", D);
    } else {
      w.ffn_norm = vec(pre + "post_attention_layernorm.weight", D);
    }
    if (spec.fused_qkv) {
      const std::string t = pre + "self_attn.qkv_proj.weight";
      const std::vector<int64_t> shape = {(H + 2 * KV) * hd, D};
      w.q = view(pre + "self_attn.q_proj.weight", t, shape, 0, H * hd);
      w.k = view(pre + "self_attn.k_proj.weight", t, shape, H * hd, KV * hd);
      w.v = view(pre + "self_attn.v_proj.weight", t, shape, (H + KV) * hd, KV * hd);
    } else {
      w.q = ref(pre + "self_attn.q_proj.weight", {H * hd, D});
      w.k = ref(pre + "self_attn.k_proj.weight", {KV * hd, D});
      w.v = ref(pre + "self_attn.v_proj.weight", {KV * hd, D});
    }
    if (spec.qkv_bias || cfg.attention_bias) {
      // qwen2: required; attention_bias: used where the file has them
      const std::pair<WeightRef*, std::pair<const char*, int64_t>> biases[3] = {
          {&w.bq, {"self_attn.q_proj.bias", H * hd}},
          {&w.bk, {"self_attn.k_proj.bias", KV * hd}},
          {&w.bv, {"self_attn.v_proj.bias", KV * hd}}};
      for (const auto& b : biases) {
        const std::string t = pre + b.second.first;
        if (spec.qkv_bias || has_tensor(t)) *b.first = vec(t, b.second.second);
      }
    }
    w.o = ref(pre + "self_attn.o_proj.weight", {D, H * hd});
    if (spec.qk_norm) {
      w.q_norm = vec(pre + "self_attn.q_norm.weight", hd);
      w.k_norm = vec(pre + "self_attn.k_norm.weight", hd);
    }
    if (spec.fused_gate_up) {
      const std::string t = pre + "mlp.gate_up_proj.weight";
      const std::vector<int64_t> shape = {2 * I, D};
      w.gate = view(pre + "mlp.gate_proj.weight", t, shape, 0, I);
      w.up = view(pre + "mlp.up_proj.weight", t, shape, I, I);
    } else {
      w.gate = ref(pre + "mlp.gate_proj.weight", {I, D});
      w.up = ref(pre + "mlp.up_proj.weight", {I, D});
    }
    w.down = ref(pre + "mlp.down_proj.weight", {D, I});
    const bool sliding = cfg.layer_sliding[static_cast<size_t>(l)] != 0 && cfg.sliding_window > 0;
    w.rope = sliding && local_rope ? 1 : 0;
    w.window = sliding ? cfg.sliding_window : 0;
  }
  return p;
}

}  // namespace cyb
