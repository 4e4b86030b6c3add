// Block decoding of every weight encoding of docs/quant.md (byte-identical to GGML),
// plus the f16 / bf16 conversions. Decoding is per block: kernels never
// materialize a whole dequantized weight.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace cyb {

float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);  // round to nearest even; overflow -> inf; NaN stays NaN
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t f32_to_bf16(float f);  // round to nearest even; NaN stays NaN

// The 16-entry non-linear table of IQ4_NL.
extern const int8_t kIq4nlTable[16];

// Decodes one block (block_bytes(t) bytes at `blk`) into block_size(t) floats.
// F32/F16/BF16 have a block of one element.
void dequant_block(DType t, const void* blk, float* out);
// Decodes `n` elements (a multiple of the block size) starting at `row`.
void dequant_row(DType t, const void* row, float* out, int64_t n);

// Largest block of any encoding (elements), for stack buffers.
constexpr int kMaxBlock = 256;

}  // namespace cyb
