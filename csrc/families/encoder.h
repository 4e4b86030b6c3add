// The curated encoders (BERT family): one plan resolved once from
// (model_type, config, the file's tensor names), one forward over the shared
// ops, for every encoder model type:
//
//   x = LayerNorm(word[ids] + position[pos] + token_type[types])
//         pos: 0..T-1 (bert, distilbert); roberta / xlm-roberta: padding_idx+1
//         onwards over the non-padding ids, padding_idx on padding
//   for each layer (post-LayerNorm):
//     a = encoder_attention(x Wq + bq, x Wk + bk, x Wv + bv, key_mask) Wo + bo
//     x = LayerNorm(x + a)
//     x = LayerNorm(x + act(x Wi + bi) Wo2 + bo2)      act: hidden_act
//   outputs: x (last_hidden_state); masked_pool(x) [l2_normalize]; the heads:
//     bert        classifier(tanh(pooler(x[:, 0])))
//     roberta     out_proj(tanh(dense(x[:, 0])))
//     distilbert  classifier(relu(pre_classifier(x[:, 0])))
//     token       classifier(x)
//
// ModernBERT (pre-norm, no position embeddings, no biases unless configured):
//   x = LayerNorm(tok[ids])
//   for each layer:
//     h = attn_norm(x) (layer 0: x); q, k, v = rows of h Wqkv; rope(q), rope(k) per sequence
//         (global_rope_theta on global layers, local_rope_theta on local ones)
//     x = x + encoder_attention(q, k, v, key_mask, window: local layers |t - s| <= local_attention/2) Wo
//     h = mlp_norm(x); x = x + (gelu(h Wi_in) * (h Wi_gate)) Wo
//   x = final_norm(x); heads: classifier(norm(act(dense(pool or x)))), pool: classifier_pooling
#pragma once
#include <memory>
#include <string>

#include "model/model.h"

namespace cyb {

// True for the encoder model types (bert, roberta, xlm-roberta, distilbert, modernbert).
bool is_encoder_model_type(const std::string& model_type);
// Comma-separated list of them (for error messages).
std::string encoder_model_types();
// The encoder model of a file: InvalidConfig for a bad config, MissingTensor /
// ShapeMismatch for its weights, BackendInit on nox (graph-only).
std::shared_ptr<Model> make_encoder(std::shared_ptr<ModelFile> file, const LoadOptions& opts);

}  // namespace cyb
