#include "model/model_base.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/nox/nox_backend.h"
#include "backends/wgpu/wgpu_backend.h"
#include "core/errors.h"
#include "core/memory_budget.h"
#include "core/quant.h"

namespace cyb {

std::vector<Backend*> select_backends(const LoadOptions& opts, std::vector<std::unique_ptr<Backend>>* owned) {
  const std::string& b = opts.backend;
  if (b == "cpu") return {&cpu_backend()};
  const bool dawn = b == "webgpu:dawn";  // the same backend on Dawn (docs/webgpu-dawn.md)
  const bool asked = b == "wgpu+rs" || b == "wgpu" || dawn;
  // The platform default takes wgpu+rs only on a hardware adapter; asking for it
  // by name also accepts a software adapter (lavapipe in CI).
  if (asked || (b.empty() && wgpu_hardware_available())) {
    const WgpuImpl impl = dawn ? WgpuImpl::Dawn : asked ? WgpuImpl::Native : WgpuImpl::Any;
    owned->push_back(make_wgpu_backend(/*allow_software=*/asked, impl));
    return {owned->back().get(), &cpu_backend()};
  }
  if (b.empty()) return {&cpu_backend()};
  if (b == "honeycrisp") throw_backend_init("honeycrisp", "honeycrisp runs only on macOS with Apple Silicon");
  if (b == "nox") return {&nox_backend()};  // graph-only (Model::load checks), no fallback
  throw_backend_init(b, "unknown backend (known: cpu, wgpu+rs, webgpu:dawn, honeycrisp, nox)");
}

void init_model_runtime(const LoadOptions& opts, int threads, std::unique_ptr<ThreadPool>* pool,
                        std::unique_ptr<Dispatcher>* dispatcher) {
  *pool = std::make_unique<ThreadPool>(threads);
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> chain = select_backends(opts, &owned);
  *dispatcher = std::make_unique<Dispatcher>(chain);
  for (auto& b : owned) (*dispatcher)->adopt(std::move(b));
}

void check_max_context(int64_t max_context, int64_t max_position) {
  if (max_context <= 0 || max_context > max_position)
    throw_invalid_config("max_context", "must be in [1, " + std::to_string(max_position) + "] (got " +
                                            std::to_string(max_context) + ")");
}

void check_forward_args(const Conversation& conv, const int32_t* ids, int64_t T, int64_t vocab) {
  const int64_t pos0 = conv.position();
  if (T <= 0) throw_shape_mismatch("forward", {1}, {T});
  if (pos0 + T > conv.max_context()) throw_shape_mismatch("forward (context)", {conv.max_context()}, {pos0 + T});
  for (int64_t t = 0; t < T; ++t)
    if (ids[t] < 0 || ids[t] >= vocab)
      throw_invalid_config("input_ids", "token id " + std::to_string(ids[t]) + " is outside [0, " +
                                            std::to_string(vocab) + ")");
}

Conversation::Use::Use(Conversation& c) : c_(c) {
  bool expected = false;
  if (!c.busy_.compare_exchange_strong(expected, true, std::memory_order_acquire))
    throw_invalid_config("conversation",
                         "in use by another thread: a conversation has one owner at a time (forward it from one "
                         "thread, or give each thread its own conversation)");
}

namespace {

// Device backends (wgpu+rs) keep per-device state (queue, last command stream,
// error scope) that two threads must not drive at once: their forwards and
// conversation set-ups are serialized, process-wide. Host backends run
// conversations concurrently (each has its own frames; the thread pool takes
// one job at a time).
std::mutex& device_mutex() {
  static std::mutex mu;
  return mu;
}

// True when every value is finite (integer test of the exponent bits: no
// branch per value, vectorized by the compiler; well under 1% of a decode step).
bool all_finite(const float* p, int64_t n) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, p + i, 4);
    bad |= static_cast<uint32_t>((b & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

}  // namespace

int64_t Model::forward_chunk_tokens() const {
  return dispatcher_->chain().front()->host_memory() ? kForwardChunk : kDeviceForwardChunk;
}

std::unique_lock<std::mutex> device_lock(const Dispatcher& d) {
  if (d.chain().front()->host_memory()) return std::unique_lock<std::mutex>();
  return std::unique_lock<std::mutex>(device_mutex());
}

void Model::forward(Conversation& conv, const int32_t* ids, int64_t n, bool all_logits, float* logits,
                    const ForwardProgress* progress) {
  Conversation::Use use(conv);
  file_->check_unchanged();
  // Every argument up front, so that a forward split in chunks fails before the first.
  check_forward_args(conv, ids, n, input_vocab());
  conv.set_device_token(-1);
  const int64_t V = vocab_size();
  const int64_t chunk = forward_chunk_tokens();
  for (int64_t off = 0; off < n;) {
    const int64_t len = std::min(chunk, n - off);
    const int64_t pos = conv.position();
    float* out = all_logits ? logits + off * V : logits;
    {
      auto dev = device_lock(*dispatcher_);
      forward_chunk(conv, ids + off, len, all_logits, out);
    }
    if (!all_finite(out, (all_logits ? len : 1) * V)) nonfinite_logits(conv, pos, len);
    off += len;
    if (off < n && progress && progress->fn) progress->fn(progress->user, off, n);
  }
}

void Model::nonfinite_logits(Conversation& conv, int64_t pos, int64_t len) {
  conv.truncate(pos);  // the KV entries of this chunk are not to be trusted
  file_->check_unchanged();
  throw_format("weights", "",
               "the forward produced non-finite logits (NaN or Inf) at positions [" + std::to_string(pos) + ", " +
                   std::to_string(pos + len) + ") of a conversation: the weights of '" + file_->path() +
                   "' hold non-finite values (overwritten or corrupted since load?)");
}

namespace {
[[noreturn]] void no_device_sampling() {
  throw_invalid_config("backend", "this model does not sample on its device (docs/generation.md, \"Sampling on "
                                  "the GPU\"): sample its logits on the host");
}
}  // namespace

void Model::forward_chunk_sample(Conversation&, const int32_t*, int64_t, const DeviceSampling&) {
  no_device_sampling();
}

DeviceDraw Model::forward_sample(Conversation& conv, const int32_t* ids, int64_t n, const DeviceSampling& s) {
  if (!conv.pending.empty())
    throw_invalid_config("conversation", "a device draw of this conversation is pending: take it "
                                         "(forward_sample_take) before a forward_sample");
  forward_sample_submit(conv, ids, n, s);
  return forward_sample_take(conv);
}

int64_t Model::pending_draws(const Conversation& conv) { return static_cast<int64_t>(conv.pending.size()); }

namespace {
// The draws of dropped steps (Conversation::stale_draws), read from the device and discarded.
void discard_stale(Backend& be, Conversation& conv) {
  for (; conv.stale_draws > 0; --conv.stale_draws) {
    DeviceDraw ignored;
    be.take_draws(conv.ctx(), &ignored, 1);
  }
}
}  // namespace

DeviceDraw Model::forward_sample_take(Conversation& conv) {
  if (!device_sampling()) no_device_sampling();
  Conversation::Use use(conv);
  Backend& be = *dispatcher_->chain().front();
  DeviceDraw d;
  // Without the device lock (Backend::take_draws): other conversations record and submit
  // their steps while this one waits for its own.
  discard_stale(be, conv);
  if (conv.pending.empty())
    throw_invalid_config("conversation", "no device draw of this conversation is pending (forward_sample_submit)");
  be.take_draws(conv.ctx(), &d, 1);
  const auto [pos, len] = conv.pending.front();
  conv.pending.pop_front();
  if (d.first_nonfinite >= 0) nonfinite_logits(conv, pos, len);  // drops a later pending step too
  if (conv.pending.empty()) conv.set_device_token(d.token);
  return d;
}

void Model::forward_sample_submit(Conversation& conv, const int32_t* ids, int64_t n, DeviceSampling s) {
  if (!device_sampling()) no_device_sampling();
  Conversation::Use use(conv);
  file_->check_unchanged();
  if (conv.pending.size() > 1)
    throw_invalid_config("conversation", "two device draws of this conversation are pending: take one "
                                         "(forward_sample_take) before submitting another step");
  // The token the embedding will read: drawn by the last step (pending or taken).
  int32_t held = conv.pending.empty() ? conv.device_token() : 0;
  if (!ids) {
    if (n != 1) throw_shape_mismatch("forward_sample (the device token)", {1}, {n});
    if (held < 0)
      throw_invalid_config("ids", "no token of this conversation is on the device: the last forward on it was not "
                                  "forward_sample (or it was truncated or reset since)");
  }
  check_forward_args(conv, ids ? ids : &held, n, input_vocab());
  s.chain = !conv.pending.empty();
  conv.set_device_token(-1);
  const int64_t V = vocab_size();
  std::vector<float> scratch;
  int64_t off = 0;
  const int64_t chunk = forward_chunk_tokens();
  while (n - off > chunk) {  // a long prompt: every chunk but the last as forward runs it
    scratch.resize(static_cast<size_t>(V));
    const int64_t pos = conv.position();
    {
      auto dev = device_lock(*dispatcher_);
      forward_chunk(conv, ids + off, chunk, false, scratch.data());
    }
    if (!all_finite(scratch.data(), V)) nonfinite_logits(conv, pos, chunk);
    off += chunk;
  }
  const int64_t pos = conv.position();
  {
    auto dev = device_lock(*dispatcher_);
    discard_stale(*dispatcher_->chain().front(), conv);
    forward_chunk_sample(conv, ids ? ids + off : nullptr, n - off, s);
  }
  conv.pending.emplace_back(pos, n - off);
}

void Model::batch_step(Conversation* const* convs, const int32_t* ids, int64_t n, const std::function<bool()>& step) {
  if (n <= 0) throw_shape_mismatch("forward_batch", {1}, {n});
  for (int64_t i = 0; i < n; ++i) {
    if (!convs[i]) throw_invalid_config("conversations", "conversation " + std::to_string(i) + " is None");
    for (int64_t j = 0; j < i; ++j)
      if (convs[j] == convs[i])
        throw_invalid_config("conversations", "conversation " + std::to_string(i) + " is also conversation " +
                                                  std::to_string(j) + ": a batch holds each conversation once");
  }
  std::vector<std::unique_ptr<Conversation::Use>> held;
  held.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) held.push_back(std::make_unique<Conversation::Use>(*convs[i]));
  file_->check_unchanged();
  for (int64_t i = 0; i < n; ++i) check_forward_args(*convs[i], ids + i, 1, input_vocab());
  for (int64_t i = 0; i < n; ++i) convs[i]->set_device_token(-1);
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = convs[i]->position();
  bool finite;
  {
    auto dev = device_lock(*dispatcher_);
    finite = step();
  }
  if (!finite) {
    for (int64_t i = 0; i < n; ++i) convs[i]->truncate(pos[static_cast<size_t>(i)]);
    file_->check_unchanged();
    throw_format("weights", "",
                 "the forward produced non-finite logits (NaN or Inf) in a batched step of " + std::to_string(n) +
                     " conversations: the weights of '" + file_->path() +
                     "' hold non-finite values (overwritten or corrupted since load?)");
  }
}

void Model::forward_batch(Conversation* const* convs, const int32_t* ids, int64_t n, float* logits) {
  batch_step(convs, ids, n, [&] {
    forward_batch_step(convs, ids, n, logits);
    return all_finite(logits, n * vocab_size());
  });
}

void Model::forward_batch_sample(Conversation* const* convs, const int32_t* ids, int64_t n, const DeviceSampling* s,
                                 DeviceDraw* draws) {
  if (!device_sampling()) no_device_sampling();
  batch_step(convs, ids, n, [&] {
    forward_batch_step_sample(convs, ids, n, s, draws);
    for (int64_t i = 0; i < n; ++i)
      if (draws[i].first_nonfinite >= 0) return false;
    return true;
  });
}

void Model::forward_batch_step_sample(Conversation* const*, const int32_t*, int64_t, const DeviceSampling*,
                                      DeviceDraw*) {
  no_device_sampling();
}

void Model::forward_batch_beam(Conversation* const* convs, const int32_t* ids, int64_t n, const BeamRow* p,
                               const BeamSpec& spec, float* score, int32_t* token) {
  if (!device_beams())
    throw_invalid_config("backend", "this model does not take beam candidates on its device (docs/whisper.md, "
                                    "\"Decoding on the device\"): take them from forward_batch's logits");
  check_beam_spec(spec, vocab_size());
  std::vector<int64_t> nonfinite(static_cast<size_t>(std::max<int64_t>(n, 0)), -1);
  batch_step(convs, ids, n, [&] {
    forward_batch_step_beam(convs, ids, n, p, spec, score, token, nonfinite.data());
    for (int64_t f : nonfinite)
      if (f >= 0) return false;
    return true;
  });
}

void Model::forward_batch_step_beam(Conversation* const*, const int32_t*, int64_t, const BeamRow*, const BeamSpec&,
                                    float*, int32_t*, int64_t*) {
  throw_invalid_config("backend", "this model does not take beam candidates on its device");
}

void Model::forward_batch_step(Conversation* const* convs, const int32_t* ids, int64_t n, float* logits) {
  for (int64_t i = 0; i < n; ++i) forward_chunk(*convs[i], ids + i, 1, false, logits + i * vocab_size());
}

void Model::encode(const EncoderBatch& batch, const EncoderRequest& req, float* out) {
  if (!is_encoder()) encode_batch(batch, req, out);  // the decoder's error
  file_->check_unchanged();
  auto dev = device_lock(*dispatcher_);
  encode_batch(batch, req, out);
}

void Model::encode_batch(const EncoderBatch&, const EncoderRequest&, float*) {
  throw_invalid_config("architecture.model_type",
                       "'" + family() + "' is a decoder; embeddings need an encoder (bert, roberta, xlm-roberta, "
                       "distilbert, modernbert)");
}

NamedArrays Model::run(const NamedArrays& inputs, const RunOptions& options) {
  file_->check_unchanged();
  auto dev = device_lock(*dispatcher_);
  return run_arrays(inputs, options);
}

NamedArrays Model::run_arrays(const NamedArrays&, const RunOptions&) {
  throw_invalid_config("architecture.model_type", "'" + family() +
                                                      "' has no named-array entry point (run): it runs through "
                                                      "its own pipeline's API");
}

std::string Model::memory_plan_json(const std::map<std::string, int64_t>&) {
  throw_invalid_config("architecture.model_type", "'" + family() + "' has no version-2 graph: no memory plan");
}
std::string Model::shapes_json() const {
  throw_invalid_config("architecture.model_type", "'" + family() + "' has no version-2 graph: no inferred shapes");
}
std::string Model::last_run_memory_json() const {
  throw_invalid_config("architecture.model_type", "'" + family() + "' has no version-2 graph: no run memory");
}

std::unique_ptr<Conversation> Model::new_conversation(int64_t max_context) {
  check_max_context(max_context, max_position());
  const int64_t bytes = conversation_bytes(max_context);
  reserve_memory(bytes, "new_conversation(max_context=" + std::to_string(max_context) +
                            "): KV cache and frame pool");
  std::unique_ptr<Conversation> c;
  try {
    auto dev = device_lock(*dispatcher_);
    c = make_conversation(max_context);
  } catch (...) {
    ledger_->fetch_sub(bytes);
    throw;
  }
  c->set_charge(ledger_, bytes);
  return c;
}

void check_memory_budget(int64_t budget, int64_t in_use, int64_t bytes, const std::string& what) {
  if (budget < 0 || bytes <= 0) return;
  if (budget > 0) {
    if (bytes > budget - in_use)
      throw_oom("memory budget: " + what + " needs " + std::to_string(bytes) + " bytes; max_memory=" +
                    std::to_string(budget) + " bytes, " + std::to_string(in_use) + " already in use",
                static_cast<uint64_t>(bytes));
    return;
  }
  const int64_t avail = available_memory_bytes();
  if (avail >= 0 && bytes > avail)
    throw_oom("memory budget: " + what + " needs " + std::to_string(bytes) + " bytes; " + std::to_string(avail) +
                  " bytes of physical memory available",
              static_cast<uint64_t>(bytes));
}

void Model::reserve_memory(int64_t bytes, const std::string& what) {
  if (bytes <= 0) return;
  const int64_t before = ledger_->fetch_add(bytes);
  try {
    check_memory_budget(opts_.max_memory, before, bytes, what);
  } catch (...) {
    ledger_->fetch_sub(bytes);
    throw;
  }
}

Tensor WeightBinder::weight(const std::string& name, const std::string& context, const std::vector<int64_t>* shape,
                            bool required) const {
  const TensorEntry* e = file_->find(name);
  if (!e) {
    if (required) throw_missing_tensor(name, context);
    return Tensor{};
  }
  if (shape && e->shape != *shape) throw_shape_mismatch(name, *shape, e->shape);
  if (is_int_dtype(e->dtype))
    throw_weight_format(name, dtype_name(e->dtype), e->size, "integer encoding cannot be a weight");
  return file_->tensor(*e);
}

Tensor WeightBinder::vector_f32(const std::string& name, int64_t n, const std::string& context, bool required) {
  const std::vector<int64_t> shape = {n};
  Tensor src = weight(name, context, &shape, required);
  if (!src.data) return src;
  return to_f32(src);
}

Tensor WeightBinder::to_f32(const Tensor& src) {
  const int64_t n = src.shape.numel();
  auto buf = std::make_unique<std::vector<float>>(static_cast<size_t>(n));
  const uint8_t* p = static_cast<const uint8_t*>(src.data);
  float* v = buf->data();
  switch (src.dtype) {
    case DType::F32: std::memcpy(v, p, static_cast<size_t>(n) * sizeof(float)); break;
    case DType::F16:
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        v[i] = src.dtype == DType::F16 ? fp16_to_f32(h) : bf16_to_f32(h);
      }
      break;
    default:
      throw_weight_format(src.name ? src.name : "?", dtype_name(src.dtype), static_cast<uint64_t>(src.nbytes()),
                          "1-D weights must be f32, f16 or bf16");
  }
  Tensor t = src;
  t.dtype = DType::F32;
  t.data = v;
  owned_.push_back(std::move(buf));
  return t;
}

}  // namespace cyb
