// Shared pieces of the fast CPU kernels (all ISAs): the 16-bit activation block,
// per-thread scratch and row-parallel loops. The helpers are defined in
// simd_common.cc, compiled without ISA flags, so the ISA-specific translation
// units do not instantiate library templates (std::vector, std::function) that
// the linker could then share with code running on a CPU without that ISA.
//
// The fast-mode matmul quantizes each activation row to int16 per 32-element
// block with an f32 scale (d = amax / 32767, q = round-half-even(x * (1 / d))),
// then uses 16-bit integer dot products (vpmaddwd, vmlal_s16) against the widened
// weight values. The relative rounding error per element is <= 2^-16 of the
// block's largest value (int8 activations: 2^-8, which measurably broke
// whole-model fidelity). Precise mode never does this.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/exec_context.h"

namespace cyb {
namespace cpu {

struct BlockQ16 {
  float d;  // scale
  float s;  // d * sum(qs): the block's sum, for encodings with a min / offset term
  int16_t qs[32];
};
static_assert(sizeof(BlockQ16) == 72, "BlockQ16 layout");

// 256 activations with one scale (the avx2 / avx512 K-quant paths): d = amax / 32767,
// q = round-half-even(x * (1 / d)); each 64-element group (avx512; 32-element at
// avx2) stores its even elements, then its odd ones; s[j] = d * sum(q) over
// natural 32-block j, s2[j] = d * sum(q) over its first 16 elements (Q2_K's mins
// are per 16 values).
struct alignas(64) BlockQ16K {
  float d;
  float pad[7];
  float s[8];
  float s2[8];
  float pad2[8];
  int16_t qs[256];
};
static_assert(sizeof(BlockQ16K) == 640, "BlockQ16K layout");

// Scratch of the calling thread. Work items that need their own scratch (attention
// scores, unpacked rows) take slices of one kScratchItems buffer owned by the
// caller, so no pool thread ever allocates lazily (a steady decode allocates
// nothing, whichever thread happens to run which item).
enum ScratchSlot { kScratchXq = 0, kScratchNorm, kScratchGateUp, kScratchItems, kScratchKv, kScratchPack, kScratchCount };

// Per-thread, 64-byte aligned scratch; grows during warm-up, then is reused.
// Call it from the calling thread only (not from inside work items).
void* scratch_bytes(int slot, size_t bytes);
// Frees the calling thread's scratch (it grows again at the next use).
void release_scratch();
template <class T>
T* scratch(int slot, size_t n) {
  return static_cast<T*>(scratch_bytes(slot, n * sizeof(T)));
}

// Number of work items run_rows() splits [0, n) into (items are whole grains).
int row_items(ExecContext& ctx, int64_t n, int64_t grain);
// Splits [0, n) over the context's pool: fn(arg, begin, end, item) for item < row_items().
void run_rows(ExecContext& ctx, int64_t n, int64_t grain, void (*fn)(void*, int64_t, int64_t, int), void* arg);

template <class F>
void parallel_rows(ExecContext& ctx, int64_t n, int64_t grain, F&& fn) {  // fn(begin, end, item)
  using Fn = std::remove_reference_t<F>;
  run_rows(ctx, n, grain, [](void* a, int64_t b, int64_t e, int item) { (*static_cast<Fn*>(a))(b, e, item); },
           const_cast<void*>(static_cast<const void*>(&fn)));
}

}  // namespace cpu
}  // namespace cyb
