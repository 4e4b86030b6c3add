// Per-context state of the wgpu+rs backend (the BackendState of an ExecContext): the frame
// pools, the uniform arena, the bind-group cache, the open command encoder and compute pass,
// submits and read-backs, staged device draws and GPU timestamps. Private to
// csrc/backends/wgpu/.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/wgpu/wgpu_buffers.h"
#include "backends/wgpu/wgpu_device.h"
#include "dispatch/backend.h"

namespace cyb {
namespace wgpu {

struct Bind {
  uint32_t binding;
  WGPUBuffer buf;
  uint64_t offset, size;
};

struct State : BackendState {
  Gpu* g = nullptr;
  // STORAGE frame pool keyed by exact size.
  std::unordered_map<uint64_t, std::vector<DevBuf*>> free_;
  std::vector<DevBuf*> in_use_;
  std::vector<DevBuf*> all_;
  // UNIFORM arena: 64 KiB buffers of 256-byte slots, rewritten each forward.
  std::vector<WGPUBuffer> arenas_;
  std::vector<std::vector<uint8_t>> arena_host_;
  size_t slot_ = 0, flushed_slot_ = 0;
  uint32_t slot_bytes_ = 256;
  static constexpr uint32_t kArenaBytes = 65536;
  // Bind groups, keyed by pipeline and bound ranges (frame buffers repeat each forward).
  std::unordered_map<std::string, WGPUBindGroup> groups_;
  // Read-back staging buffers keyed by size.
  std::unordered_map<uint64_t, WGPUBuffer> staging_;
  WGPUCommandEncoder enc_ = nullptr;
  WGPUComputePassEncoder pass_ = nullptr;
  WGPUSubmissionIndex last_sub_ = 0;  // the index of the last submit (waits are for a submit)
  // Device draws submitted and not yet read back (sample_rows with out == nullptr), oldest
  // first: the staging buffer their results were copied into, and the submit that copies.
  struct PendingDraws {
    WGPUBuffer staging;
    uint64_t bytes;
    WGPUSubmissionIndex sub;
    int64_t rows;
  };
  std::deque<PendingDraws> pending_draws_;
  std::unordered_map<uint64_t, std::vector<WGPUBuffer>> draw_staging_;  // free ones, by size
  uint64_t dispatches_ = 0, submits_ = 0;
  bool precise = true;  // the recording context's mode (ExecContext::precise), set by state()
  std::chrono::steady_clock::time_point begun_{};  // begin_forward of the open forward
  bool open_ = false;
  // Early submits of the open forward (submit_first_setting): dispatches recorded since the
  // last submit, the count that submits the next chunk and its cap, the host time of its early
  // submits.
  int64_t since_ = 0, chunk_at_ = 0, chunk_max_ = 0;
  uint64_t chunk_ns_ = 0;
  // GPU profiling: a timestamp pair per dispatch of the pending submit.
  static constexpr uint32_t kQueryPairs = 2048;
  WGPUQuerySet qs_ = nullptr;
  WGPUBuffer q_resolve_ = nullptr, q_staging_ = nullptr;
  std::vector<const std::string*> q_names_;  // pipeline names (pipelines live as long as the device)
  uint64_t q_untimed_ = 0;

  ~State() override;

  // Ends and drops whatever is recorded and not submitted.
  void discard();

  // Device sampling's buffers (row parameters, masks, scratch, results), then beam_rows' own
  // (row parameters and masks, candidates): kept for the context's life (sampling's result
  // holds the token the next forward embeds); a larger request gets new ones, the old stay in
  // all_ until the context goes.
  enum Persist { kBeamRows = 5, kBeamOut = 6, kPersistSlots = 7 };
  DevBuf* persist_[kPersistSlots] = {};
  // Scratch of one op's dispatches, one buffer a use for the context, taken by every op of
  // that use in turn (an op's later dispatch reads it before the next op's writes it): the
  // split-K GEMM's partial sums (matmul.wgsl SPLITK), the fused_norm_* ops' normalized rows (off
  // the matrix-vector path), the subgroup-matrix GEMM's prepared activations and their unscaling
  // factors (matmul_sm.wgsl SM_PREP).
  // A larger request gets a new one; the old stays in all_ until the context goes.
  enum Scratch { kSplitKParts, kNormedRows, kSmActs, kSmScale, kScratchUses };
  DevBuf* scratch_[kScratchUses] = {};
  DevBuf* scratch(Scratch use, uint64_t bytes) {
    DevBuf*& d = scratch_[use];
    if (d && d->bytes >= bytes) return d;
    return d = new_buf(bytes);
  }
  DevBuf* persistent(int i, uint64_t bytes) {
    DevBuf*& d = persist_[i];
    if (d && d->bytes >= bytes) return d;
    return d = new_buf(bytes);
  }
  // A new storage buffer of this context (freed with it).
  DevBuf* new_buf(uint64_t bytes);

  static uint64_t ns_since(std::chrono::steady_clock::time_point t) {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t).count());
  }

  // A new forward (begin_forward): recording restarts, the frame buffers are free again.
  void reset();
  // A frame buffer of exactly `bytes` bytes for this forward (from the pool, or new).
  DevBuf* alloc(uint64_t bytes);
  // A frame of this forward back into the pool before the forward ends (its readers are recorded:
  // a later writer of it is recorded, and so runs, after them).
  void give(DevBuf* d);

  // Copies a uniform struct into the next arena slot; returns (buffer, offset).
  std::pair<WGPUBuffer, uint64_t> params(const void* p, size_t n);

  // Writes the arena slots filled since the last flush to their buffers.
  void flush_params();
  // The open compute pass (an encoder and a pass begun where none is open).
  WGPUComputePassEncoder pass();

  // Records one dispatch of pl: its parameters into the arena, its bind group (cached), the
  // workgroup grid x, y, z.
  template <size_t N>
  void dispatch(Pipeline& pl, const void* prm, size_t prm_bytes, const Bind (&binds)[N], uint32_t x,
                uint32_t y, uint32_t z) {
    dispatch(pl, prm, prm_bytes, binds, N, x, y, z);
  }
  void dispatch(Pipeline& pl, const void* prm, size_t prm_bytes, const Bind* binds, size_t N, uint32_t x,
                uint32_t y, uint32_t z);

  // A compute pass of its own for one dispatch, writing timestamps at its start and end.
  WGPUComputePassEncoder timed_pass(const Pipeline& pl);

  // After a submit with timed dispatches: waits for their timestamps and adds them up.
  void collect_timestamps(uint32_t n);

  // Submits the recorded work of the open forward early, as a chunk (submit_first_setting).
  void submit_chunk();
  // Ends the pass, finishes the encoder and submits it after the parameters written since the
  // last flush (the one step of submit and submit_chunk); false when nothing was recorded.
  bool finish_and_submit(WGPUBuffer copy_src, uint64_t src_off, WGPUBuffer copy_dst, uint64_t n);

  // Ends the pass, optionally appends a copy, and submits everything recorded.
  void submit(WGPUBuffer copy_src = nullptr, uint64_t src_off = 0, WGPUBuffer copy_dst = nullptr,
              uint64_t n = 0);

  // Submits pending work and reads n bytes of buffer b at offset off (4-aligned).
  void read(WGPUBuffer b, uint64_t off, void* dst, uint64_t n);

  // Copies n bytes of b (4-aligned) into a staging buffer with a submit, without waiting:
  // the draws of sample_rows(out == nullptr), read by take_draws.
  void stage_draws(WGPUBuffer b, uint64_t n, int64_t rows);

  // The oldest (or the newest) staged draws' n bytes; waits for the submit that staged them only.
  void take_staged(void* dst, uint64_t n, int64_t rows, bool newest);

  // Maps buffer st (filled by submit `sub`), copies its first n bytes to dst, unmaps.
  void map_copy(WGPUBuffer st, void* dst, uint64_t n, WGPUSubmissionIndex sub);
};

}  // namespace wgpu
}  // namespace cyb
