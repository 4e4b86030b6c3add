// The Backend interface of the execution contract, in C++.
// Outputs are allocated by the caller (from the execution context's frame
// allocator) and passed to execute(); a backend writes into them.
#pragma once
#include <cstddef>

#include "core/tensor.h"
#include "dispatch/op.h"

namespace cyb {

class ExecContext;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // True if this backend implements `op` for these inputs (dtypes/shapes).
  virtual bool supports(const Op& op, const Tensor* inputs, int n_inputs) const = 0;
  virtual void execute(const Op& op, const Tensor* inputs, int n_inputs, Tensor* outputs,
                       int n_outputs, ExecContext& ctx) = 0;
  virtual Tensor alloc(const Shape& shape, DType dtype) = 0;
  virtual Tensor upload(const void* data, const Shape& shape, DType dtype) = 0;
  virtual void download_f32(const Tensor& t, float* out) = 0;
  virtual void release(Tensor& t) = 0;
};

}  // namespace cyb
