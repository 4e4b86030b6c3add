// The public C++ API of the runtime (usable without Python):
//   auto model = cyb::Model::load("x.model", {});
//   auto conv = model->new_conversation(4096);
//   conv->forward(ids, n, /*all_logits=*/false, logits);   // logits: [vocab] floats
#pragma once
#include <deque>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/host_array.h"
#include "core/exec_context.h"
#include "core/thread_pool.h"
#include "dispatch/backend.h"
#include "dispatch/dispatcher.h"
#include "format/model_file.h"

namespace cyb {

struct LoadOptions {
  std::string backend;  // "" (platform default), "cpu", "wgpu+rs", "nox"
  bool precise = false; // f32 activations and f32 KV cache
  int threads = 0;      // 0: physical cores; clamped to ThreadPool::max_threads(); < 0: InvalidConfig
  // Execution path: "" (curated family when model_type has one, else the graph
  // section), "curated", or "graph" (the graph section; for a curated family
  // without one, its emitted decoder graph). nox always takes the graph path.
  std::string exec_path;
  bool fuse = true;     // graph path: run the fusion pass at load
  // Memory budget in bytes for what load and new_conversation allocate (weights
  // mapped or read, RoPE tables, KV caches, frame pools): 0 = the available
  // physical memory at each check (no check where unknown), -1 = no check.
  // Over budget: OutOfMemory naming what and requested_bytes.
  int64_t max_memory = 0;
  // A file of several graph stages (model_type "graph-stages", docs/graph.md "Stages"): the
  // stage to run, its graph in section `graph_<stage>`. "" = the file's `graph` section.
  std::string stage;
};

// Called by Model::forward after each chunk but the last of a long forward
// (done = tokens of this forward already in the KV cache, total = n). It may
// throw to stop the forward: the conversation is then at a chunk boundary.
struct ForwardProgress {
  void (*fn)(void* user, int64_t done, int64_t total) = nullptr;
  void* user = nullptr;
};

class Conversation;

// Encoders (families/encoder.h): one batch of B sequences padded to T tokens,
// all arrays row-major [B, T]; mask 1 = a real token, 0 = padding; token_types
// may be null (all 0).
struct EncoderBatch {
  const int32_t* ids = nullptr;
  const int32_t* mask = nullptr;
  const int32_t* token_types = nullptr;
  int64_t batch = 0, len = 0;
};
// What Model::encode writes: the final hidden states [B, T, hidden], the
// pooled (and optionally L2-normalized) embeddings [B, hidden], the sequence
// classification logits [B, num_labels] or the token classification logits
// [B, T, num_labels].
enum class EncoderOutput { Hidden, Pooled, SequenceLogits, TokenLogits };
struct EncoderRequest {
  EncoderOutput what = EncoderOutput::Hidden;
  int pool_mode = 0;  // Pooled: 0 cls, 1 mean, 2 max (the masked_pool op)
  bool normalize = false;
};

class Model {
 public:
  // Load phase (docs/runtime.md "Load"): open + validate the file, pick the
  // curated family by model_type, build position caches, map the weights.
  // Defined by the runtime (runtime/model.cc), the layer that knows the families.
  static std::shared_ptr<Model> load(const std::string& path, const LoadOptions& opts);
  static std::shared_ptr<Model> load(std::shared_ptr<ModelFile> file, const LoadOptions& opts);
 private:
  static std::shared_ptr<Model> load_checked(std::shared_ptr<ModelFile> file, const LoadOptions& opts);
 public:
  virtual ~Model() = default;

  virtual const std::string& family() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_position() const = 0;
  // A conversation with its own KV cache of max_context positions (in [1,
  // max_position], else InvalidConfig); OutOfMemory when what it allocates does
  // not fit the memory budget (LoadOptions::max_memory).
  std::unique_ptr<Conversation> new_conversation(int64_t max_context);
  // Runs ids[0..n) at the conversation's position; writes [vocab] logits of the
  // last position, or [n, vocab] when all_logits. A conversation has one owner
  // at a time: a forward while another thread runs one on the same conversation
  // is InvalidConfig(field="conversation"); different conversations may run
  // concurrently. FormatError when the file changed on disk since load, or when
  // the logits come out non-finite (weights overwritten). Forwards longer than
  // kForwardChunk tokens run in chunks of that many (the same boundaries from
  // the forward's first token), calling `progress` between chunks.
  void forward(Conversation& conv, const int32_t* ids, int64_t n, bool all_logits, float* logits,
               const ForwardProgress* progress = nullptr);
  static constexpr int64_t kForwardChunk = 256;
  // Tokens a forward chunk holds on this model's primary backend: kForwardChunk on the host
  // (cpu, nox), kDeviceForwardChunk on a GPU (wgpu+rs: twice the GEMM tiles a chunk of 256 gives,
  // half the submits and read-backs of a long prompt; on the H200 a 512-token qwen15-shaped
  // prompt ran 27% faster as one chunk than as two, docs/gpu-bench.md).
  static constexpr int64_t kDeviceForwardChunk = 512;
  int64_t forward_chunk_tokens() const;
  // One decode step of n different conversations at once: ids[i] is the next token
  // of convs[i] (at its own position); writes [n, vocab] logits, row i for convs[i].
  // Families that batch (the curated decoders) run the matrix products once for all
  // n rows (weights read once per step) and attention per conversation over its own
  // cache; the others run the conversations one after another. Every conversation
  // is held for the step (InvalidConfig when one is in use or appears twice); the
  // arguments, the file and the logits are checked as forward checks them, and a
  // non-finite row rolls every conversation of the step back.
  void forward_batch(Conversation* const* convs, const int32_t* ids, int64_t n, float* logits);
  // Sampling on the device (docs/generation.md, "Sampling on the GPU"): true when
  // the model's primary backend samples (wgpu+rs) and the family runs it (the
  // curated decoders). forward_sample runs ids[0..n) as forward does, then draws
  // the next token from the last position's logits on the device with `s`; the
  // logits never come back, only the draw. ids == nullptr (n = 1): the input is
  // the token the previous forward_sample of this conversation drew, read by the
  // embedding from the device buffer it was drawn into (InvalidConfig("ids") when
  // another forward, a truncate or a reset came in between).
  virtual bool device_sampling() const { return false; }
  DeviceDraw forward_sample(Conversation& conv, const int32_t* ids, int64_t n, const DeviceSampling& s);
  // forward_sample in two halves, so that the host records and submits the next step
  // while the device runs this one: submit runs the forward and leaves its draw pending
  // (nothing waits), take reads the oldest pending draw (waiting for that step only).
  // At most one draw may be pending when submit is called (InvalidConfig otherwise); with
  // one pending, the new draw is chained (s.chain: backend.h, DeviceSampling). A truncate
  // or reset drops the pending draws (read and discarded at the next call); a step whose
  // logits were not finite raises at its take, rolling the conversation back to it.
  void forward_sample_submit(Conversation& conv, const int32_t* ids, int64_t n, DeviceSampling s);
  DeviceDraw forward_sample_take(Conversation& conv);
  // Pending draws of a conversation (submitted, not taken).
  static int64_t pending_draws(const Conversation& conv);
  // forward_batch with the draws on the device: s[i] samples convs[i]'s row into
  // draws[i] (the server's batched decode step); the logits never come back. Same
  // checks and roll-back as forward_batch; InvalidConfig when !device_sampling().
  void forward_batch_sample(Conversation* const* convs, const int32_t* ids, int64_t n, const DeviceSampling* s,
                            DeviceDraw* draws);
  // Beam candidates on the device (docs/whisper.md, "Decoding on the device"): true when the
  // model's primary backend takes them (Backend::can_beam) and the family runs it (whisper).
  // forward_batch_beam is forward_batch with the candidates of each row (sampling/beam.h; p[i]
  // is convs[i]'s row) taken on the device: score and token hold n * spec.k entries as
  // Backend::beam_rows writes them; the logits never come back. Same checks and roll-back as
  // forward_batch; InvalidConfig when !device_beams().
  virtual bool device_beams() const { return false; }
  void forward_batch_beam(Conversation* const* convs, const int32_t* ids, int64_t n, const BeamRow* p,
                          const BeamSpec& spec, float* score, int32_t* token);
  // Threads of the model's pool (after the clamp rule of ThreadPool::resolve_threads).
  int threads() const { return pool_ ? pool_->size() : 1; }
  // Bytes charged against the memory budget: the load's plus live conversations'.
  int64_t charged_bytes() const { return ledger_ ? ledger_->load() : 0; }

  // "curated" or "graph"; the graph path's fusion report and, on nox, the
  // SHA-256 digest chain of the last forward (hex; "" elsewhere).
  virtual std::string execution_path() const { return "curated"; }
  virtual std::string fusion_report() const { return ""; }
  virtual std::vector<std::pair<std::string, std::string>> fusion_entries() const { return {}; }
  virtual std::string last_digest() const { return ""; }
  virtual std::string graph_origin() const { return ""; }
  // Version-2 graphs (docs/graph.md "Shapes and the memory plan"), as JSON text: the memory plan of
  // a run with these input dims, the shapes inferred at load, what the last run held. Other
  // models: InvalidConfig.
  virtual std::string memory_plan_json(const std::map<std::string, int64_t>& dims);
  virtual std::string shapes_json() const;
  virtual std::string last_run_memory_json() const;
  // Frees what a model keeps between runs only to run faster: a version-2 graph's pooled node
  // buffers and the calling thread's kernel scratch (both made again by the next run); packed
  // weights stay. weights: also the resident pages of its weights in a mapped file (or their
  // huge-page copy), which fault in again from the file at the next run (ModelFile::release_pages);
  // returns those bytes. A pipeline calls it when it moves on to another stage. Others: nothing, 0.
  virtual int64_t release_memory(bool /*weights*/) { return 0; }

  // Encoders (families/encoder.h). A decoder answers false / 0 and its encode
  // is InvalidConfig(field="architecture.model_type"). encode checks that the
  // file is unchanged, serializes device backends like forward, and writes the
  // request's output (EncoderRequest) to `out`; the checks of the batch are the
  // encoder's (ShapeMismatch, InvalidConfig).
  virtual bool is_encoder() const { return false; }
  virtual int64_t hidden_size() const { return 0; }
  virtual int64_t num_labels() const { return 0; }
  void encode(const EncoderBatch& batch, const EncoderRequest& req, float* out);

  // The named-array entry point of pipelines that are not token streams (one
  // call: named inputs in, named outputs out). run checks that the file is
  // unchanged and serializes device backends like forward; the default
  // run_arrays is InvalidConfig naming the family.
  NamedArrays run(const NamedArrays& inputs, const RunOptions& options = {});

  Dispatcher& dispatcher() { return *dispatcher_; }
  const LoadOptions& options() const { return opts_; }
  const ModelFile& file() const { return *file_; }
  double load_ms() const { return load_ms_; }

 protected:
  // The implementations: one chunk of a forward (the arguments are checked and
  // the conversation is held by the caller), and the conversation itself.
  virtual void forward_chunk(Conversation& conv, const int32_t* ids, int64_t n, bool all_logits,
                             float* logits) = 0;
  // forward_batch's step (checked, conversations held): by default one forward_chunk
  // per conversation.
  virtual void forward_batch_step(Conversation* const* convs, const int32_t* ids, int64_t n, float* logits);
  virtual std::unique_ptr<Conversation> make_conversation(int64_t max_context) = 0;
  // forward_batch_sample's step (checked, held).
  virtual void forward_batch_step_sample(Conversation* const* convs, const int32_t* ids, int64_t n,
                                         const DeviceSampling* s, DeviceDraw* draws);
  // forward_batch_beam's step (checked, held); first_nonfinite[i] as Backend::beam_rows writes it.
  virtual void forward_batch_step_beam(Conversation* const* convs, const int32_t* ids, int64_t n, const BeamRow* p,
                                       const BeamSpec& spec, float* score, int32_t* token, int64_t* first_nonfinite);
  // forward_sample_submit's chunk (checked, held; ids == nullptr: the device token): the
  // forward submitted with its draw left pending on the device (Backend::sample_rows).
  virtual void forward_chunk_sample(Conversation& conv, const int32_t* ids, int64_t n, const DeviceSampling& s);
  // forward_batch's checks, holds and device lock around `step`; when step returns
  // false (non-finite logits) every conversation is rolled back and FormatError raised.
  void batch_step(Conversation* const* convs, const int32_t* ids, int64_t n, const std::function<bool()>& step);
  // FormatError for non-finite logits at positions [pos, pos + len) (the conversation is rolled back).
  [[noreturn]] void nonfinite_logits(Conversation& conv, int64_t pos, int64_t len);
  // What make_conversation(max_context) will allocate, for the budget check
  // (0 when the implementation cannot tell before allocating).
  virtual int64_t conversation_bytes(int64_t max_context) const { return 0; }
  // Token ids must lie in [0, input_vocab()) (the embedding's rows).
  virtual int64_t input_vocab() const { return vocab_size(); }
  // The encoder's work behind encode (the default: a decoder's InvalidConfig).
  virtual void encode_batch(const EncoderBatch& batch, const EncoderRequest& req, float* out);
  // run's work (the default: InvalidConfig(field="architecture.model_type")).
  virtual NamedArrays run_arrays(const NamedArrays& inputs, const RunOptions& options);
  // Checks `bytes` more against the budget (OutOfMemory naming `what`) and charges them.
  void reserve_memory(int64_t bytes, const std::string& what);

  std::shared_ptr<std::atomic<int64_t>> ledger_ = std::make_shared<std::atomic<int64_t>>(0);
  std::shared_ptr<ModelFile> file_;
  LoadOptions opts_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Dispatcher> dispatcher_;
  double load_ms_ = 0.0;
  friend class ModelLoader;
};

// Per-conversation state: KV cache, position, frame allocator.
class Conversation {
 public:
  Conversation(ThreadPool* pool, bool precise, int64_t max_context)
      : ctx_(pool, precise), max_context_(max_context) {}
  virtual ~Conversation() {
    if (ledger_) ledger_->fetch_sub(charge_);
  }
  int64_t position() const { return position_; }
  int64_t max_context() const { return max_context_; }
  // Held by Model::forward for the duration of a forward: a second thread's
  // forward on the same conversation fails instead of corrupting its state.
  class Use {
   public:
    explicit Use(Conversation& c);  // InvalidConfig(field="conversation") when in use
    ~Use() { c_.busy_.store(false, std::memory_order_release); }
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;
   private:
    Conversation& c_;
  };
  // Memory charged to the model's budget, given back when the conversation goes.
  void set_charge(std::shared_ptr<std::atomic<int64_t>> ledger, int64_t bytes) {
    ledger_ = std::move(ledger);
    charge_ = bytes;
  }
  void reset_kv_cache() {
    position_ = 0;
    drop_pending();
  }
  // The token the last forward_sample drew (still on the device), -1 when none.
  int32_t device_token() const { return device_token_; }
  void set_device_token(int32_t t) { device_token_ = t; }
  ExecContext& ctx() { return ctx_; }
  void advance(int64_t n) { position_ += n; }
  // Back to `pos` (<= position): what came after is dropped.
  void truncate(int64_t pos) {
    if (pos >= 0 && pos < position_) position_ = pos;
    drop_pending();
  }
  // Device draws submitted and not read back (Model::forward_sample_submit): each step's
  // first position and length, oldest first; stale: draws of dropped steps, still queued
  // on the device, read and discarded before the next submit or take.
  std::deque<std::pair<int64_t, int64_t>> pending;
  int64_t stale_draws = 0;
  // Bytes of this conversation's KV cache (what new_conversation allocated).
  virtual int64_t kv_cache_bytes() const { return 0; }

 private:
  void drop_pending() {
    stale_draws += static_cast<int64_t>(pending.size());
    pending.clear();
    device_token_ = -1;
  }
  ExecContext ctx_;
  int64_t max_context_;
  int64_t position_ = 0;
  int32_t device_token_ = -1;
  std::atomic<bool> busy_{false};
  std::shared_ptr<std::atomic<int64_t>> ledger_;
  int64_t charge_ = 0;
};

}  // namespace cyb
