// Device buffers of the wgpu+rs backend: a device tensor's storage (DevBuf, one buffer or row
// chunks of a large weight), buffer creation with the device's memory totals, and the device
// layout of block encodings (uploads pad each block to whole words). Private to
// csrc/backends/wgpu/.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/wgpu/wgpu_device.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace cyb {
namespace wgpu {

struct State;

constexpr uint32_t kMagic = 0x67707562;  // "bupg"

// A device tensor's storage. Activations and caches have one buffer; a weight
// larger than the max storage binding is split into row chunks.
struct DevBuf {
  uint32_t magic = kMagic;
  std::vector<WGPUBuffer> bufs;
  std::vector<int64_t> row0;  // first row of each chunk
  int64_t rows = 0;
  uint64_t bytes = 0;         // requested size
  State* owner = nullptr;     // frame buffers: the context that records into it
  bool recycled = false;      // frame buffers: given back and taken again in this forward (State::give)
};

// A buffer of at least `bytes` bytes (sizes padded: see wgpu_buffers.cc), counted in the
// device's live and peak bytes; OutOfMemory when the device refuses it.
WGPUBuffer create_buffer(Gpu& g, uint64_t bytes, WGPUBufferUsage usage);
// Destroys and releases a buffer made by create_buffer.
void destroy_buffer(WGPUBuffer b);

const WGPUBufferUsage kStorage = WGPUBufferUsage_Storage | WGPUBufferUsage_CopyDst | WGPUBufferUsage_CopySrc;

// The device layout of a block encoding (docs/quant.md gives the file layout): each block
// padded to whole 4-byte words (Q4_0 18 -> 20, Q5_0 22 -> 24, Q8_0 34 -> 36, IQ4_NL 18 -> 20,
// Q3_K 110 -> 112, Q6_K 210 -> 212 bytes: the sizes shaders/wgsl/dequant.wgsl and mvdot.wgsl
// step by), and in the 32-value encodings whose f16 scale d leads the block (Q4_0, Q5_0, Q8_0,
// IQ4_NL) d moved behind the rest, so that every word of codes loads aligned (one load; a
// word straddling two costs two loads and shifts).
inline uint32_t dev_block_bytes(DType t) {
  const uint32_t b = block_bytes(t);
  return is_quantized(t) ? (b + 3) & ~3u : b;
}
inline uint64_t dev_row_bytes(DType t, int64_t n) {
  return static_cast<uint64_t>(n / block_size(t)) * dev_block_bytes(t);
}
inline bool dev_padded(DType t) { return dev_block_bytes(t) != block_bytes(t); }
inline bool dev_d_last(DType t) {
  return t == DType::Q4_0 || t == DType::Q5_0 || t == DType::Q8_0 || t == DType::IQ4_NL;
}

// n_blocks blocks from the file layout into the device layout (pad) or back (unpad).
void pad_blocks(DType t, const uint8_t* src, uint8_t* dst, uint64_t n_blocks);
void unpad_blocks(DType t, const uint8_t* src, uint8_t* dst, uint64_t n_blocks);

// A device copy of host bytes (block encodings in the padded device layout, dev_block_bytes);
// 2-D tensors above the binding limit are split by rows. data null: the buffers only.
DevBuf* upload_new(Gpu& g, const void* data, const Shape& shape, DType dtype);
// Destroys a DevBuf's buffers and deletes it (null: nothing).
void free_devbuf(DevBuf* d);
// The DevBuf of a wgpu+rs device tensor; BackendInit for any other tensor.
DevBuf* dev(const Tensor& t);

}  // namespace wgpu
}  // namespace cyb
