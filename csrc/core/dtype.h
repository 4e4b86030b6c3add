// Element encodings of tensors (docs/format.md section 3, docs/quant.md).
// Quantized blocks are byte-identical to GGML's.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cyb {

enum class DType : uint8_t {
  F32 = 0,
  F16,
  BF16,
  Q4_0,
  Q4_1,
  Q5_0,
  Q5_1,
  Q8_0,
  Q2_K,
  Q3_K,
  Q4_K,
  Q5_K,
  Q6_K,
  IQ4_NL,
  I32,
  I64,
  U8,
  I8,
  BOOL,  // one byte, 0 or 1 (ONNX bool)
  COUNT
};

struct DTypeInfo {
  const char* encoding;  // canonical `.model` encoding name ("q4_1", "f32", ...)
  const char* name;      // display name ("Q4_1", "F32", ...)
  uint32_t block;        // elements per block
  uint32_t block_bytes;  // bytes per block
  bool quantized;
};

const DTypeInfo& dtype_info(DType t);

// Parses an encoding name of docs/format.md, aliases included ("u32" == "f32",
// "u16" == "f16", "q4" == "q4_0", "q8" == "q8_0", "q4k" == "q4_k", ...).
// Returns false when the name is unknown.
bool parse_encoding(std::string_view s, DType* out);

// The alias spellings parse_encoding accepts, with what they stand for
// (cyb_llm.format.ENCODING_ALIASES reads this table through _core).
struct EncodingAlias {
  const char* name;
  DType t;
};
const EncodingAlias* encoding_aliases(size_t* count);

inline uint32_t block_size(DType t) { return dtype_info(t).block; }
inline uint32_t block_bytes(DType t) { return dtype_info(t).block_bytes; }
inline bool is_quantized(DType t) { return dtype_info(t).quantized; }
inline const char* dtype_name(DType t) { return dtype_info(t).name; }

// Integer and boolean element types (not floats, not block encodings).
inline bool is_int_dtype(DType t) {
  return t == DType::I32 || t == DType::I64 || t == DType::U8 || t == DType::I8 || t == DType::BOOL;
}

// Bytes of a row of `n` elements; n must be a multiple of the block size.
inline size_t row_bytes(DType t, int64_t n) {
  return static_cast<size_t>(n / block_size(t)) * block_bytes(t);
}

}  // namespace cyb
