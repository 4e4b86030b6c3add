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
#pragma once
#include <memory>
#include <string>

#include "model/model.h"

namespace cyb {

// True for the encoder model types (bert, roberta, xlm-roberta, distilbert).
bool is_encoder_model_type(const std::string& model_type);
// Comma-separated list of them (for error messages).
std::string encoder_model_types();
// The encoder model of a file: InvalidConfig for a bad config, MissingTensor /
// ShapeMismatch for its weights, BackendInit on nox (graph-only).
std::shared_ptr<Model> make_encoder(std::shared_ptr<ModelFile> file, const LoadOptions& opts);

}  // namespace cyb
