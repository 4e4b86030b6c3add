// Element access for the arrays of graph v2 (docs/graph.md "Version 2"; the reference kernels of the
// array ops, the executor's constants): element access by dtype (floats read as double, integers as int64), row-major strides, numpy broadcasting
// of inputs against an output, and byte-level gathers that work for every element type.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/quant.h"
#include "core/tensor.h"

namespace cyb {

inline bool is_float_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

inline double get_f(const Tensor& t, int64_t i) {
  const void* p = t.data;
  switch (t.dtype) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F16: return fp16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::I32: return static_cast<const int32_t*>(p)[i];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::U8:
    case DType::BOOL: return static_cast<const uint8_t*>(p)[i];
    case DType::I8: return static_cast<const int8_t*>(p)[i];
    default: return 0.0;
  }
}

// The values of a float tensor as f32, widened at most once (exactly: f16 and bf16 values are f32
// values): an f32 tensor's own data; an f16 / bf16 one's values in a buffer the view owns, made at
// the first get() (a kernel calls it inside its weight cache's fill, so a cached weight is widened
// once per model). The graph-v2 conv / conv_transpose read their weights through it (f32 or f16).
class F32View {
 public:
  explicit F32View(const Tensor& t) : t_(t) {}
  const float* get() {
    if (p_) return p_;
    if (t_.dtype == DType::F32) return p_ = t_.f32();
    const int64_t n = t_.shape.numel();
    buf_.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) buf_[static_cast<size_t>(i)] = static_cast<float>(get_f(t_, i));
    return p_ = buf_.data();
  }
  const void* key() const { return t_.data; }           // the weight cache's key: the tensor's own bytes
  size_t source_bytes() const { return t_.nbytes(); }   // their size (the pages a packed copy hands back)

 private:
  const Tensor& t_;
  std::vector<float> buf_;
  const float* p_ = nullptr;
};

inline int64_t get_i(const Tensor& t, int64_t i) {
  const void* p = t.data;
  switch (t.dtype) {
    case DType::I32: return static_cast<const int32_t*>(p)[i];
    case DType::I64: return static_cast<const int64_t*>(p)[i];
    case DType::U8:
    case DType::BOOL: return static_cast<const uint8_t*>(p)[i];
    case DType::I8: return static_cast<const int8_t*>(p)[i];
    default: return static_cast<int64_t>(get_f(t, i));  // floats truncate toward zero (ONNX Cast)
  }
}

// Stores v rounded once to the output's type (integers: truncated toward zero; bool: v != 0).
inline void put_f(const Tensor& t, int64_t i, double v) {
  void* p = t.data;
  switch (t.dtype) {
    case DType::F32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::F16: static_cast<uint16_t*>(p)[i] = f32_to_fp16(static_cast<float>(v)); break;
    case DType::BF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(static_cast<float>(v)); break;
    case DType::I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::I64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DType::U8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(static_cast<int64_t>(v)); break;
    case DType::I8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(static_cast<int64_t>(v)); break;
    case DType::BOOL: static_cast<uint8_t*>(p)[i] = v != 0.0; break;
    default: break;
  }
}

inline void put_i(const Tensor& t, int64_t i, int64_t v) {
  void* p = t.data;
  switch (t.dtype) {
    case DType::I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::I64: static_cast<int64_t*>(p)[i] = v; break;
    case DType::U8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DType::I8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case DType::BOOL: static_cast<uint8_t*>(p)[i] = v != 0; break;
    default: put_f(t, i, static_cast<double>(v)); break;
  }
}

// Row-major strides of a shape (elements).
inline void strides_of(const Shape& s, int64_t* st) {
  int64_t acc = 1;
  for (int i = s.ndim - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s.d[i];
  }
}

// Strides of `in` seen through an output shape it broadcasts to (0 along broadcast dims; `in` is
// aligned to the output's last dims, numpy style).
inline void broadcast_strides(const Shape& in, const Shape& out, int64_t* st) {
  int64_t own[Shape::kMaxDims];
  strides_of(in, own);
  for (int i = 0; i < out.ndim; ++i) {
    const int j = i - (out.ndim - in.ndim);
    st[i] = j < 0 || in.d[j] == 1 ? 0 : own[j];
  }
}

// Walks every index of `shape` in row-major order, calling f(linear, idx).
template <class F>
void for_each_index(const Shape& shape, F&& f) {
  const int64_t n = shape.numel();
  int64_t idx[Shape::kMaxDims] = {};
  for (int64_t i = 0; i < n; ++i) {
    f(i, static_cast<const int64_t*>(idx));
    for (int d = shape.ndim - 1; d >= 0; --d) {
      if (++idx[d] < shape.d[d]) break;
      idx[d] = 0;
    }
  }
}

// y[i] = x[src(idx)] for every output index (element size `es` bytes, any dtype); src < 0 writes
// `fill` (es bytes, or zeros when null).
template <class F>
void gather_bytes(const Shape& os, void* y, F src, const void* x, size_t es, const void* fill) {
  auto* yb = static_cast<uint8_t*>(y);
  const auto* xb = static_cast<const uint8_t*>(x);
  for_each_index(os, [&](int64_t i, const int64_t* idx) {
    const int64_t o = src(idx);
    if (o >= 0) std::memcpy(yb + i * es, xb + o * es, es);
    else if (fill) std::memcpy(yb + i * es, fill, es);
    else std::memset(yb + i * es, 0, es);
  });
}

}  // namespace cyb
