// Per-conversation execution state: the frame allocator for activations, the
// shared thread pool, the precision mode.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/frame_allocator.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "core/weight_cache.h"

namespace cyb {

// Per-context state a device backend keeps (its frame pools, its open command
// encoder); created by that backend on first use, destroyed with the context.
struct BackendState {
  virtual ~BackendState() = default;
};

class ExecContext {
 public:
  ExecContext(ThreadPool* pool, bool precise) : pool_(pool), precise_(precise) {}
  FrameAllocator& frame() { return frame_; }
  ThreadPool* pool() const { return pool_; }
  bool precise() const { return precise_; }
  // An f32 host tensor from the frame allocator (valid until the next reset()).
  Tensor alloc_f32(const Shape& s) {
    Tensor t;
    t.dtype = DType::F32;
    t.shape = s;
    t.data = frame_.alloc(static_cast<size_t>(s.numel()) * sizeof(float));
    return t;
  }
  std::unique_ptr<BackendState>& backend_state() { return backend_state_; }
  // Where kernels may keep weights in their own layout (owned by the model; null:
  // nowhere, the kernel repacks per call).
  WeightCache* weight_cache() const { return weight_cache_; }
  void set_weight_cache(WeightCache* c) { weight_cache_ = c; }

 private:
  FrameAllocator frame_;
  std::unique_ptr<BackendState> backend_state_;
  ThreadPool* pool_;
  WeightCache* weight_cache_ = nullptr;
  bool precise_;
};

}  // namespace cyb
