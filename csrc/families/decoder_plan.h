// The decoder plan: everything a curated decoder computes with, resolved once
// from (model_type, config, the file's tensor names) through the family
// registry: weight refs (row views of fused tensors included), one rope spec
// per layer, the scales, norms and softcaps, the tying of lm_head. Both the
// curated forward (families/decoder.cc) and the graph builder
// (families/decoder_graph.cc) consume it, so they cannot drift apart.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/rope.h"
#include "families/decoder.h"
#include "format/toml.h"

namespace cyb {

// A weight of the plan: the file tensor `tensor` of shape `shape`, or rows
// [row0, row0 + nrows) of it (nrows > 0: a view, e.g. q of phi3's qkv_proj).
// `name` names the weight in the graph (the tensor name, or the view's own).
struct WeightRef {
  std::string name, tensor;
  std::vector<int64_t> shape;
  int64_t row0 = 0, nrows = 0;
  bool vector = false;    // 1-D (norms, biases): bound as an f32 copy
  bool required = true;   // optional biases (attention_bias) may be absent
  bool present() const { return !tensor.empty(); }
};

struct RopePlan {
  int rot_dims = 0;
  int64_t max_pos = 0;
  double theta = 10000.0;
  bool neox = true;
  RopeScaling scaling;
};

struct LayerPlan {
  WeightRef attn_norm, post_attn_norm, ffn_norm, post_ffn_norm, q_norm, k_norm;
  WeightRef q, k, v, bq, bk, bv, o, gate, up, down;
  int rope = 0;         // index into DecoderPlan::ropes
  int64_t window = 0;   // sliding window (0: full causal)
};

struct DecoderPlan {
  std::string family;   // the family's name ("llama", "gemma3", ...)
  FamilySpec spec;      // structure flags (norm_plus_one, qk_norm, sandwich_norm, gelu_tanh, ...)
  int64_t hidden = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, n_layers = 0, intermediate = 0, vocab = 0;
  int64_t max_position = 0;
  // Constants as the config gives them (the ops take them rounded to f32).
  double eps = 1e-6;
  double embed_scale = 1.0;  // sqrt(hidden) for gemma
  double attn_scale = 0.0;   // head_dim^-0.5 unless the family says otherwise (already rounded to f32)
  float attn_softcap = 0.f, final_softcap = 0.f;
  WeightRef embed, final_norm, lm_head;
  bool tied = false;         // lm_head is the embedding
  std::vector<RopePlan> ropes;
  std::vector<LayerPlan> layers;
};

// The plan of a curated family; InvalidConfig when model_type has none or the
// config is invalid; MissingTensor when lm_head is absent and not tied.
// `has_tensor` says which tensors the file (or the importer's tensor list) has.
DecoderPlan make_decoder_plan(const std::string& model_type, const toml::Value& config,
                              const std::function<bool(const std::string&)>& has_tensor);

}  // namespace cyb
