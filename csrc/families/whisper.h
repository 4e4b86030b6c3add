// The curated whisper family (encoder-decoder speech recognition), docs/whisper.md
// "The whisper family". Tensor names as transformers' WhisperForConditionalGeneration
// ("model." prefix optional); config = the HF config.json keys under [architecture].
//
//   encoder (mel [B, n_mels, 2*S] -> [B, S, d]), S = max_source_positions (1500):
//     x = gelu(conv1d(mel, conv1, stride 1, pad 1))           [2S, d] (time-major)
//     x = gelu(conv1d(x, conv2, stride 2, pad 1)) + embed_positions   [S, d]
//     per layer (pre-LN): x += Wo(encoder_attention(LN(x) Wq + bq, LN(x) Wk, LN(x) Wv + bv))
//                         x += fc2(gelu(fc1(LN(x))))
//     x = LN(x)                                               (encoder.layer_norm)
//   decoder (a WhisperConversation started on one window's encoder output):
//     start:  K_l = enc Wk_cross_l, V_l = enc Wv_cross_l + b    once per window, per layer
//     x = embed_tokens[ids] + embed_positions[pos]
//     per layer: x += Wo(attention(q, self KV cache))         causal, cache as the decoders'
//                x += Wo_c(encoder_attention(LN(x) Wq_c + bq_c, K_l, V_l))
//                x += fc2(gelu(fc1(LN(x))))
//     logits = LN(x) @ embed_tokens^T                        (proj_out when stored untied)
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/model.h"

namespace cyb {

// True for model_type "whisper".
bool is_whisper_model_type(const std::string& model_type);

// The Model of a whisper file; its forward (Model::forward) runs the decoder on a
// conversation that start() gave an encoder output.
class WhisperModel : public Model {
 public:
  virtual int64_t n_mels() const = 0;
  virtual int64_t n_audio_ctx() const = 0;   // encoder positions S (max_source_positions)
  virtual int64_t d_model() const = 0;
  // mel: [batch, n_mels, 2 * n_audio_ctx] floats; out: [batch, n_audio_ctx, d_model].
  // ShapeMismatch for another n_mels or frame count (or batch < 1), FormatError for
  // non-finite output (NaN input or corrupted weights).
  virtual void encode_audio(const float* mel, int64_t batch, int64_t n_mels, int64_t frames, float* out) = 0;
  // Computes the cross-attention K/V of every decoder layer from one window's encoder
  // output enc [rows, cols] (must be [n_audio_ctx, d_model]) and stores them in the
  // conversation (position back to 0). The only place the cross K/V projections run.
  virtual void start(Conversation& conv, const float* enc, int64_t rows, int64_t cols) = 0;
  // A new conversation with conv's state: its self-attention cache copied, the cross K/V
  // shared (immutable after start).
  virtual std::unique_ptr<Conversation> clone(Conversation& conv) = 0;
  // dst takes src's state (same max_context): self cache copied, cross K/V shared,
  // position. For beam search: reorder beams without allocating.
  virtual void copy_state(Conversation& dst, Conversation& src) = 0;
  // Position 0 and no cross K/V (start() needed before the next forward).
  virtual void reset(Conversation& conv) = 0;
  virtual bool started(Conversation& conv) const = 0;
  // Word alignment (docs/whisper.md "Word timestamps"): runs the decoder on ids[0..T) as
  // forward does (appending to the self cache; logits [T, vocab] into `logits`) and writes,
  // for each listed (layer, head) of the cross attention, the probabilities
  // softmax(q_t . k_f * head_dim^-0.5) over the first n_frames encoder positions f:
  // attn [heads.size(), T, n_frames]. n_frames = n_audio_ctx gives the attention weights of
  // the forward itself. The rows are computed on the host (device backends download q and
  // the window's cross K). InvalidConfig for a head outside the decoder or n_frames outside
  // [1, n_audio_ctx], and as forward for the rest.
  virtual void cross_attention(Conversation& conv, const int32_t* ids, int64_t T,
                               const std::vector<std::pair<int64_t, int64_t>>& heads, int64_t n_frames,
                               float* logits, float* attn) = 0;
};

std::shared_ptr<Model> make_whisper(std::shared_ptr<ModelFile> file, const LoadOptions& opts);

}  // namespace cyb
