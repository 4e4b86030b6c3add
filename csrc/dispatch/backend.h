// The Backend interface (docs/runtime.md, "Dispatch"), in C++.
// Outputs are allocated by the caller (from the execution context's frame
// allocator) and passed to execute(); a backend writes into them.
#pragma once
#include <cstddef>

#include "core/exec_context.h"
#include "core/tensor.h"
#include "dispatch/op.h"
#include "sampling/beam.h"

namespace cyb {

// Sampling on the device (docs/generation.md, "Sampling on the GPU"): the stages
// of Sampler (csrc/sampling/sampler.h) that a device kernel runs, per row.
struct DeviceSampling {
  float temperature = 0.0f;           // 0 = greedy
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float uniform = 0.0f;               // the host sampler's next uniform draw
  // chain: the previous draw of this row's conversation is still pending (its result not yet
  // read back), so the host cannot tell whether it took `uniform`; the kernel then uses
  // `uniform_if_used` (the draw after it in the host stream) when that previous draw did.
  bool chain = false;
  float uniform_if_used = 0.0f;
  const uint32_t* allowed = nullptr;  // nullptr or Sampler::mask_words(n) words (checked non-empty)
};
struct DeviceDraw {
  int32_t token = -1;
  bool used_uniform = false;  // the draw took `uniform` (more than one candidate was left)
  int64_t first_nan = -1;     // the first NaN logit of the row (-1: none); then no token
  int64_t first_nonfinite = -1;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // True if this backend implements `op` for these inputs (dtypes/shapes).
  virtual bool supports(const Op& op, const Tensor* inputs, int n_inputs) const = 0;
  // Bytes this backend keeps, at the most, in a model's weight cache (core/weight_cache.h,
  // ExecContext::set_weight_cache) for the matmul weight `w` in fast mode (precise: false) or
  // in precise mode: its own layout of the weight, built on first use (the cpu's amx level packs
  // float weights into bf16 hi / lo panels). A family charges it to the memory budget at load.
  // 0 (the default): the backend keeps nothing there.
  virtual int64_t weight_cache_bytes(const Tensor& /*w*/, bool /*precise*/) const { return 0; }
  virtual void execute(const Op& op, const Tensor* inputs, int n_inputs, Tensor* outputs,
                       int n_outputs, ExecContext& ctx) = 0;
  // Tensors of this backend. The defaults are host memory (64-byte aligned, zeroed), what
  // the cpu and nox backends use; a device backend overrides all three.
  virtual Tensor alloc(const Shape& shape, DType dtype);
  virtual Tensor upload(const void* data, const Shape& shape, DType dtype);
  virtual void release(Tensor& t);
  virtual void download_f32(const Tensor& t, float* out) = 0;

  // Forward lifecycle and activations. The defaults are the host path (the CPU
  // backend): activations come from the context's host frame allocator, so the
  // CPU path pays nothing for these hooks. A device backend (wgpu+rs) returns
  // false from host_memory(), hands out device tensors, records the forward and
  // submits it at end_forward() or at the first read. On every backend the ops of a
  // forward take effect in the order they are issued (a device backend's recorded
  // dispatches are ordered on its queue, and a host write into a frame waits for the
  // work recorded before it), so a family takes one layer's frames once per forward
  // and every layer reuses them.
  virtual bool host_memory() const { return true; }
  virtual void begin_forward(ExecContext& ctx) { ctx.frame().reset(); }
  virtual Tensor alloc_frame(ExecContext& ctx, const Shape& shape) { return ctx.alloc_f32(shape); }
  // A frame of any unquantized dtype, and its return to the frame pool before the forward ends
  // (the version-2 graph executor keeps its values on a device backend: a value's frame goes back
  // once its last reader is recorded; the device runs the recorded work in order, so a later
  // writer of the same frame comes after every earlier reader). Host backends: F32 frames of the
  // context only, whose release is the forward's end.
  virtual Tensor alloc_frame_as(ExecContext& ctx, const Shape& shape, DType dtype);
  virtual void release_frame(ExecContext& /*ctx*/, const Tensor& /*t*/) {}
  virtual void end_forward(ExecContext&) {}
  // Frees the working memory the backend keeps for the calling thread between forwards (the cpu
  // kernels' scratch); it is made again at the next use.
  virtual void release_scratch() {}
  // Raw bytes (t.nbytes()) between host memory and a tensor of this backend.
  virtual void write_bytes(const Tensor& t, const void* src);
  virtual void read_bytes(const Tensor& t, void* dst);

  // Device sampling: true when sample_rows runs here (wgpu+rs). sample_rows draws
  // one token from each row of `logits` ([rows, n] f32, a tensor of this backend)
  // with s[row], writes out[row] (read back: a few bytes a row, never the logits)
  // and keeps row 0's token on the device as sampled_token(ctx), an I32 [1] tensor
  // that the next forward's embedding reads. out == nullptr: the draws stay pending
  // (the forward is submitted, nothing waits) until take_draws(ctx, out, rows) reads
  // the oldest pending ones, waiting only for the work that made them; a later
  // forward can be recorded and submitted meanwhile (decode overlapped with the GPU).
  // take_draws is called without the device lock (model_base.cc): it may only touch
  // the context's own state and thread-safe device calls.
  virtual bool can_sample() const { return false; }
  virtual void sample_rows(const Tensor& logits, const DeviceSampling* s, DeviceDraw* out, int64_t rows,
                           ExecContext& ctx);
  virtual void take_draws(ExecContext& ctx, DeviceDraw* out, int64_t rows);
  virtual Tensor sampled_token(ExecContext& ctx);
  // Beam candidates on the device (sampling/beam.h): true when beam_rows runs here (wgpu+rs).
  // beam_rows writes each row's best spec.k (score, token) of `logits` ([rows, n] f32, a tensor
  // of this backend) into score / token (host, rows * k each) and first_nonfinite[row], reading
  // back only those (shaders/wgsl/beam.wgsl).
  virtual bool can_beam() const { return false; }
  virtual void beam_rows(const Tensor& logits, const BeamRow* p, int64_t rows, const BeamSpec& spec, float* score,
                         int32_t* token, int64_t* first_nonfinite, ExecContext& ctx);
};

}  // namespace cyb
