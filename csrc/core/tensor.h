// A tensor as the dispatcher and the backends see it: a typed, shaped view of
// memory owned elsewhere (the mapped weights, a frame allocator, a KV cache).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace cyb {

enum class Device : uint8_t { Host = 0, Wgpu = 1 };

// Up to 4 dimensions, outermost first, row-major (docs/format.md: Linear weight = [out, in]).
struct Shape {
  int ndim = 0;
  static constexpr int kMaxDims = 8;  // ONNX graphs reach 5-6 dims
  int64_t d[kMaxDims] = {0, 0, 0, 0, 0, 0, 0, 0};
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {
    for (int64_t v : dims) d[ndim++] = v;
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= d[i];
    return n;
  }
  int64_t rows() const {  // the product of all dims but the last (an empty last dim included)
    int64_t n = 1;
    for (int i = 0; i + 1 < ndim; ++i) n *= d[i];
    return n;
  }
  int64_t cols() const { return ndim == 0 ? 1 : d[ndim - 1]; }
  std::vector<int64_t> vec() const { return std::vector<int64_t>(d, d + ndim); }
  bool operator==(const Shape& o) const {
    if (ndim != o.ndim) return false;
    for (int i = 0; i < ndim; ++i)
      if (d[i] != o.d[i]) return false;
    return true;
  }
};

struct Tensor {
  DType dtype = DType::F32;
  Shape shape;
  void* data = nullptr;  // host pointer (Device::Host) or a backend handle
  Device device = Device::Host;
  const char* name = nullptr;  // weight name, for error messages (may be null)
  size_t offset = 0;           // byte offset into a device buffer (Device::Wgpu views); 0 on the host

  size_t nbytes() const { return row_bytes(dtype, shape.cols()) * static_cast<size_t>(shape.rows()); }
  float* f32() const { return static_cast<float*>(data); }
  // A view of rows [r0, r0 + n) of a 2-D tensor (quantized rows are whole blocks).
  Tensor rows(int64_t r0, int64_t n) const {
    Tensor t = *this;
    t.shape.d[0] = n;
    const size_t off = static_cast<size_t>(r0) * row_bytes(dtype, shape.cols());
    if (device == Device::Host) t.data = static_cast<uint8_t*>(data) + off;
    else t.offset += off;
    return t;
  }
};

}  // namespace cyb
