// The plumbing every Model implementation shares (the curated decoder and the
// graph model), written once: the backend chain, weight binding (shape checks,
// row views, f32 copies of 1-D weights), the max_context check of
// new_conversation and the argument checks of forward.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "dispatch/backend.h"
#include "format/model_file.h"
#include "model/model.h"

namespace cyb {

// Platform default (no name): wgpu+rs on a hardware adapter when built, else cpu.
// A named backend comes first and the cpu backend always ends the chain (nox:
// alone, graph-only). Throws BackendInit when the named backend cannot run here.
// Backends created for this model (wgpu+rs holds the model's device weights) are
// handed to `owned`; the model keeps them alive (Dispatcher::adopt).
std::vector<Backend*> select_backends(const LoadOptions& opts, std::vector<std::unique_ptr<Backend>>* owned);

// The memory budget (LoadOptions::max_memory: > 0 bytes, 0 = available physical
// memory, -1 = none): OutOfMemory naming `what` when `bytes` more do not fit
// next to `in_use` (in auto mode: when they exceed what is available now).
void check_memory_budget(int64_t budget, int64_t in_use, int64_t bytes, const std::string& what);

// new_conversation: max_context in [1, max_position]; InvalidConfig otherwise.
void check_max_context(int64_t max_context, int64_t max_position);
// forward: T > 0, the positions fit the conversation (ShapeMismatch), every id
// in [0, vocab) (InvalidConfig).
void check_forward_args(const Conversation& conv, const int32_t* ids, int64_t T, int64_t vocab);

// Binds the weights of one file. 1-D weights (norms, biases) are tiny: they get
// an f32 copy (aligned, whatever the file encodes), kept alive by the binder.
class WeightBinder {
 public:
  explicit WeightBinder(const ModelFile* file = nullptr) : file_(file) {}
  void reset(const ModelFile* file) { file_ = file; }
  // The tensor `name`; MissingTensor (naming `context`) when absent and required
  // (else an empty Tensor); ShapeMismatch when `shape` is given and differs;
  // WeightFormatMismatch for an integer encoding.
  Tensor weight(const std::string& name, const std::string& context, const std::vector<int64_t>* shape = nullptr,
                bool required = true) const;
  // weight() of a 1-D tensor of n values as f32 (f32, f16 or bf16 in the file).
  Tensor vector_f32(const std::string& name, int64_t n, const std::string& context, bool required = true);
  // An f32 copy of a 1-D tensor view (f32, f16 or bf16).
  Tensor to_f32(const Tensor& t);

 private:
  const ModelFile* file_;
  std::vector<std::unique_ptr<std::vector<float>>> owned_;
};

// Serializes work on a device backend (wgpu+rs keeps per-device state): a lock on the
// process-wide device mutex when the dispatcher's first backend is not host memory, else
// an empty lock. Model::forward / encode / new_conversation take it themselves; a family's
// own entry points (whisper's encode_audio, start, clone) take it through this.
std::unique_lock<std::mutex> device_lock(const Dispatcher& d);

// The pool and the dispatcher (over select_backends) of a model.
void init_model_runtime(const LoadOptions& opts, int threads, std::unique_ptr<ThreadPool>* pool,
                        std::unique_ptr<Dispatcher>* dispatcher);

}  // namespace cyb
