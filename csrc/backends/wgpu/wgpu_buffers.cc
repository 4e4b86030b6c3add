#if defined(CYB_HAVE_WGPU)

#include "backends/wgpu/wgpu_buffers.h"

#include <algorithm>
#include <cstring>

#include "core/errors.h"

namespace cyb {
namespace wgpu {
namespace {

// Sizes in whole 16-byte words and one more, so that a weight also binds as vec4<u32>
// (matvec.wgsl WV) with its last bytes inside the array.
uint64_t padded(uint64_t n) { return ((n + 15) & ~uint64_t(15)) + 16; }

}  // namespace

WGPUBuffer create_buffer(Gpu& g, uint64_t bytes, WGPUBufferUsage usage) {
  WGPUBufferDescriptor bd = {};
  bd.usage = usage;
  bd.size = padded(bytes);
  WGPUBuffer b = A.wgpuDeviceCreateBuffer(g.device, &bd);
  if (!b) throw_oom("wgpu+rs", bd.size);
  check_device_error(g, "creating a buffer");
  const uint64_t live = g.live_bytes += bd.size;
  uint64_t peak = g.peak_bytes.load();
  while (live > peak && !g.peak_bytes.compare_exchange_weak(peak, live)) {
  }
  return b;
}

void destroy_buffer(WGPUBuffer b) {
  gpu().live_bytes -= A.wgpuBufferGetSize(b);
  A.wgpuBufferDestroy(b);
  A.wgpuBufferRelease(b);
}

void pad_blocks(DType t, const uint8_t* src, uint8_t* dst, uint64_t n_blocks) {
  const uint32_t b = block_bytes(t), db = dev_block_bytes(t);
  const uint32_t r = dev_d_last(t) ? 2 : 0;  // leading bytes moved behind the rest
  for (uint64_t i = 0; i < n_blocks; ++i) {
    const uint8_t* s = src + i * b;
    uint8_t* d = dst + i * db;
    std::memcpy(d, s + r, b - r);
    std::memcpy(d + b - r, s, r);
    std::memset(d + b, 0, db - b);
  }
}
void unpad_blocks(DType t, const uint8_t* src, uint8_t* dst, uint64_t n_blocks) {
  const uint32_t b = block_bytes(t), db = dev_block_bytes(t);
  const uint32_t r = dev_d_last(t) ? 2 : 0;
  for (uint64_t i = 0; i < n_blocks; ++i) {
    std::memcpy(dst + i * b + r, src + i * db, b - r);
    std::memcpy(dst + i * b, src + i * db + b - r, r);
  }
}

DevBuf* upload_new(Gpu& g, const void* data, const Shape& shape, DType dtype) {
  auto* d = new DevBuf;
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  d->bytes = t.nbytes() / block_bytes(dtype) * dev_block_bytes(dtype);
  d->rows = shape.ndim >= 2 ? shape.rows() : 1;
  const uint64_t rb = shape.ndim >= 2 ? dev_row_bytes(dtype, shape.cols()) : d->bytes;
  std::vector<uint8_t> padded_copy;
  if (data && dev_padded(dtype)) {
    padded_copy.resize(d->bytes);
    pad_blocks(dtype, static_cast<const uint8_t*>(data), padded_copy.data(), t.nbytes() / block_bytes(dtype));
    data = padded_copy.data();
  }
  const uint64_t limit = std::min<uint64_t>(g.limits.maxStorageBufferBindingSize, g.limits.maxBufferSize) - 8;
  int64_t per = d->rows;
  if (d->bytes > limit) {
    if (shape.ndim < 2 || rb > limit) {
      const uint64_t bytes = d->bytes;
      delete d;
      throw_oom("wgpu+rs", bytes);
    }
    per = static_cast<int64_t>(limit / rb);
  }
  for (int64_t r = 0; r < d->rows; r += per) {
    const int64_t n = std::min(per, d->rows - r);
    const uint64_t nb = static_cast<uint64_t>(n) * rb;
    WGPUBuffer b = create_buffer(g, std::max<uint64_t>(nb, 4), kStorage);
    if (data) {
      const uint8_t* src = static_cast<const uint8_t*>(data) + static_cast<uint64_t>(r) * rb;
      const uint64_t full = nb & ~uint64_t(3);
      if (full) A.wgpuQueueWriteBuffer(g.queue, b, 0, src, full);
      if (nb > full) {
        uint8_t tail[4] = {0, 0, 0, 0};
        std::memcpy(tail, src + full, nb - full);
        A.wgpuQueueWriteBuffer(g.queue, b, full, tail, 4);
      }
    }
    d->bufs.push_back(b);
    d->row0.push_back(r);
  }
  if (d->bufs.empty()) {  // an empty tensor (a dim of 0): one word, so that it binds like any other
    d->bufs.push_back(create_buffer(g, 4, kStorage));
    d->row0.push_back(0);
  }
  return d;
}

void free_devbuf(DevBuf* d) {
  if (!d) return;
  for (WGPUBuffer b : d->bufs) {
    destroy_buffer(b);
  }
  delete d;
}

DevBuf* dev(const Tensor& t) {
  auto* d = static_cast<DevBuf*>(t.data);
  if (t.device != Device::Wgpu || !d || d->magic != kMagic)
    throw_backend_init("wgpu+rs", "tensor is not a wgpu+rs device tensor");
  return d;
}

}  // namespace wgpu
}  // namespace cyb

#endif  // CYB_HAVE_WGPU
