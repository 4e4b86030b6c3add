// The curated decoder: the config every decoder family shares, the FamilySpec
// of what sets a family apart (the registry rows of families/families.cc), and
// the forward the curated path runs over a decoder plan (families/decoder_plan.h):
//
//   x = embed(ids) [* sqrt(d)]
//   for each layer:
//     h = norm(x)                          attn_norm / input_layernorm
//     q, k, v = h Wq, h Wk, h Wv [+ b]     (phi3: row views of one fused Wqkv)
//     q, k = qk_norm(q), qk_norm(k)        (qwen3, gemma3)
//     q, k = rope(q), rope(k); cache <- k, v
//     a = attention(q, cache) Wo           (softcap, sliding window per layer)
//     a = post_attn_norm(a)                (gemma2/3)
//     x = x + a; h = norm(x)               FusedSkipNorm
//     f = (act(h Wg) * (h Wu)) Wd          FusedSwiGlu, or GeGLU for gemma
//     f = post_ffn_norm(f)                 (gemma2/3)
//     x = x + f
//   logits = norm(x) W_lm [softcap]
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/rope.h"
#include "format/toml.h"
#include "model/model.h"

namespace cyb {


struct DecoderConfig {
  int64_t hidden = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, n_layers = 0;
  int64_t intermediate = 0, vocab = 0, max_position = 0;
  double rope_theta = 10000.0;
  double rope_local_theta = 0.0;  // gemma3 sliding layers (0: same as rope_theta)
  double partial_rotary = 1.0;
  bool rope_neox = true;
  RopeScaling rope_scaling;
  double eps = 1e-6;
  bool tie_embeddings = false;
  bool attention_bias = false;
  int64_t sliding_window = 0;
  std::vector<uint8_t> layer_sliding;  // per layer: 1 = sliding window attention
  float attn_softcap = 0.f;
  float final_softcap = 0.f;
  double attn_scale = 0.0;  // 0: head_dim^-0.5
};

struct FamilySpec {
  const char* name;
  bool norm_plus_one = false;  // Gemma RMSNorm: x * (1 + w)
  bool embed_scale = false;    // Gemma: embeddings * sqrt(hidden)
  bool qkv_bias = false;       // Qwen2: biases on q, k, v
  bool qk_norm = false;        // Qwen3, Gemma3: RMSNorm over each head of q and k
  bool sandwich_norm = false;  // Gemma2/3: post-attention and post-feedforward norms
  bool gelu_tanh = false;      // Gemma: GeGLU with the tanh GELU instead of SwiGLU
  bool fused_qkv = false;      // Phi3: one qkv_proj
  bool fused_gate_up = false;  // Phi3: one gate_up_proj
};

// Reads the keys every decoder shares; throws InvalidConfig naming the key.
DecoderConfig parse_decoder_config(const toml::Value& config);
// The domain of every numeric value (core/config_check.h): rope, eps, scales,
// softcaps, window. Run on the config as the family adjusted it.
void validate_decoder_config(const DecoderConfig& c);
// Config lookups that name the missing/invalid key in the error.
const toml::Value& config_arch(const toml::Value& config);
int64_t config_int(const toml::Value& arch, const char* key);
int64_t config_int_or(const toml::Value& arch, const char* key, int64_t dflt);
double config_float_or(const toml::Value& arch, const char* key, double dflt);
bool config_bool_or(const toml::Value& arch, const char* key, bool dflt);

// Rows [row0, row0 + n) of a batched forward belong to one conversation, from its position on
// (the forward_rows of the decoder and whisper families).
template <class Conv>
struct RowSegment {
  Conv* conv;
  int64_t row0, n;
};
// A batched decode step: one row per conversation, in order.
template <class Conv>
std::vector<RowSegment<Conv>> one_row_segments(Conversation* const* convs, int64_t n) {
  std::vector<RowSegment<Conv>> segs;
  segs.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) segs.push_back({static_cast<Conv*>(convs[i]), i, 1});
  return segs;
}
// After the forward: each conversation moves past its rows.
template <class Conv>
void advance_segments(const RowSegment<Conv>* segs, size_t nseg) {
  for (size_t si = 0; si < nseg; ++si) segs[si].conv->advance(segs[si].n);
}

struct DecoderPlan;
// The curated decoder model of a plan (families/decoder_plan.h): binds the plan's
// weights, builds its rope tables, runs the forward above.
std::shared_ptr<Model> make_curated_decoder(std::shared_ptr<ModelFile> file, const LoadOptions& opts,
                                            DecoderPlan plan);

}  // namespace cyb
