#if defined(CYB_HAVE_WGPU)

#include "backends/wgpu/wgpu_state.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "backends/wgpu/wgpu_settings.h"
#include "core/errors.h"

namespace cyb {
namespace wgpu {

State::~State() {
  void* self = this;
  if (g) g->last_state.compare_exchange_strong(self, nullptr);
  discard();
  if (qs_) {
    A.wgpuQuerySetRelease(qs_);  // (wgpuQuerySetDestroy before it removes the set twice)
    for (WGPUBuffer b : {q_resolve_, q_staging_}) {
      destroy_buffer(b);
    }
  }
  for (auto& kv : groups_) A.wgpuBindGroupRelease(kv.second);
  for (DevBuf* d : all_) free_devbuf(d);
  for (WGPUBuffer b : arenas_) {
    destroy_buffer(b);
  }
  for (auto& kv : staging_) {
    destroy_buffer(kv.second);
  }
  for (const PendingDraws& p : pending_draws_) draw_staging_[p.bytes].push_back(p.staging);
  for (auto& kv : draw_staging_)
    for (WGPUBuffer b : kv.second) destroy_buffer(b);
}

void State::discard() {
  q_names_.clear();
  if (pass_) {
    A.wgpuComputePassEncoderEnd(pass_);
    A.wgpuComputePassEncoderRelease(pass_);
    pass_ = nullptr;
  }
  if (enc_) {
    A.wgpuCommandEncoderRelease(enc_);
    enc_ = nullptr;
  }
}

DevBuf* State::new_buf(uint64_t bytes) {
  DevBuf* d = new DevBuf;
  d->bytes = bytes;
  d->rows = 1;
  d->bufs.push_back(create_buffer(*g, std::max<uint64_t>(bytes, 4), kStorage));
  d->row0.push_back(0);
  d->owner = this;
  all_.push_back(d);
  return d;
}

void State::reset() {
  begun_ = std::chrono::steady_clock::now();
  open_ = true;
  discard();
  // Reverse order: the next forward gets the same buffers in the same order, so its
  // bind groups are the cached ones.
  for (auto it = in_use_.rbegin(); it != in_use_.rend(); ++it) free_[(*it)->bytes].push_back(*it);
  in_use_.clear();
  for (DevBuf* d : all_) d->recycled = false;
  slot_ = flushed_slot_ = 0;
  since_ = 0;
  chunk_at_ = submit_first_setting();
  chunk_max_ = std::max(submit_max_setting(), chunk_at_);
  chunk_ns_ = 0;
}

void State::give(DevBuf* d) {
  for (size_t i = in_use_.size(); i-- > 0;)
    if (in_use_[i] == d) {
      in_use_.erase(in_use_.begin() + static_cast<std::ptrdiff_t>(i));
      d->recycled = true;
      free_[d->bytes].push_back(d);
      return;
    }
}

DevBuf* State::alloc(uint64_t bytes) {
  auto& v = free_[bytes];
  DevBuf* d;
  if (!v.empty()) {
    d = v.back();
    v.pop_back();
  } else {
    d = new_buf(bytes);
  }
  in_use_.push_back(d);
  return d;
}

std::pair<WGPUBuffer, uint64_t> State::params(const void* p, size_t n) {
  if (n > 256)  // the bound range of every dispatch (dispatch(): 256 bytes)
    throw_shape_mismatch("wgpu+rs parameter block (bytes)", std::vector<int64_t>{256},
                         std::vector<int64_t>{static_cast<int64_t>(n)});
  const size_t per = kArenaBytes / slot_bytes_;
  const size_t a = slot_ / per, s = slot_ % per;
  if (a >= arenas_.size()) {
    arenas_.push_back(create_buffer(*g, kArenaBytes, WGPUBufferUsage_Uniform | WGPUBufferUsage_CopyDst));
    arena_host_.emplace_back(kArenaBytes, 0);
  }
  std::memcpy(arena_host_[a].data() + s * slot_bytes_, p, n);
  ++slot_;
  return {arenas_[a], s * slot_bytes_};
}

void State::flush_params() {
  const size_t per = kArenaBytes / slot_bytes_;
  for (size_t s = flushed_slot_; s < slot_;) {
    const size_t a = s / per, e = std::min(slot_, (a + 1) * per);
    const size_t o = (s % per) * slot_bytes_, n = (e - s) * slot_bytes_;
    A.wgpuQueueWriteBuffer(g->queue, arenas_[a], o, arena_host_[a].data() + o, n);
    s = e;
  }
  flushed_slot_ = slot_;
}

WGPUComputePassEncoder State::pass() {
  if (!enc_) {
    WGPUCommandEncoderDescriptor ed = {};
    enc_ = A.wgpuDeviceCreateCommandEncoder(g->device, &ed);
  }
  if (!pass_) {
    WGPUComputePassDescriptor pd = {};
    pass_ = A.wgpuCommandEncoderBeginComputePass(enc_, &pd);
  }
  return pass_;
}

void State::dispatch(Pipeline& pl, const void* prm, size_t prm_bytes, const Bind* binds, size_t N, uint32_t x,
                     uint32_t y, uint32_t z) {
  auto [ub, uo] = params(prm, prm_bytes);
  std::string key(reinterpret_cast<const char*>(&pl.pipe), sizeof(void*));
  key.append(reinterpret_cast<const char*>(&ub), sizeof(ub));
  key.append(reinterpret_cast<const char*>(&uo), sizeof(uo));
  for (size_t i = 0; i < N; ++i) key.append(reinterpret_cast<const char*>(&binds[i]), sizeof(Bind));
  WGPUBindGroup bg;
  auto it = groups_.find(key);
  if (it != groups_.end()) {
    bg = it->second;
  } else {
    std::vector<WGPUBindGroupEntry> e(N + 1, WGPUBindGroupEntry{});
    e[0].binding = 0;
    e[0].buffer = ub;
    e[0].offset = uo;
    e[0].size = 256;  // a parameter struct is at most 256 bytes (params: slots of 256 or more)
    for (size_t i = 0; i < N; ++i) {
      e[i + 1].binding = binds[i].binding;
      e[i + 1].buffer = binds[i].buf;
      e[i + 1].offset = binds[i].offset;
      e[i + 1].size = binds[i].size;
    }
    WGPUBindGroupDescriptor bd = {};
    bd.layout = pl.layout;
    bd.entryCount = N + 1;
    bd.entries = e.data();
    bg = A.wgpuDeviceCreateBindGroup(g->device, &bd);
    check_device_error(*g, "creating a bind group");
    groups_.emplace(key, bg);
  }
  const bool timed = g->timestamps && g->prof.on.load(std::memory_order_relaxed);
  if (timed && q_names_.size() >= kQueryPairs) ++q_untimed_;
  WGPUComputePassEncoder p = timed && q_names_.size() < kQueryPairs ? timed_pass(pl) : pass();
  A.wgpuComputePassEncoderSetPipeline(p, pl.pipe);
  A.wgpuComputePassEncoderSetBindGroup(p, 0, bg, 0, nullptr);
  A.wgpuComputePassEncoderDispatchWorkgroups(p, x, y, z);
  const RepeatTuning& rep = repeat_tuning();
  if (rep.n > 1 && pl.name.find(rep.text) != std::string::npos) {
    if (pl.name.rfind("rope", 0) == 0 || pl.name.rfind("sample", 0) == 0 ||
        pl.name.find("INPLACE") != std::string::npos)
      throw_invalid_config("CYB_WGPU_REPEAT", "'" + pl.name + "' reads what it writes: repeating it changes results");
    for (uint32_t i = 1; i < rep.n; ++i) A.wgpuComputePassEncoderDispatchWorkgroups(p, x, y, z);
  }
  if (p != pass_) {  // a timed pass holds this one dispatch
    A.wgpuComputePassEncoderEnd(p);
    A.wgpuComputePassEncoderRelease(p);
  }
  ++dispatches_;
  // Profiling keeps one submit a forward (its timestamps are collected at the submit).
  if (open_ && chunk_at_ > 0 && !timed && ++since_ >= chunk_at_) submit_chunk();
}

void State::submit_chunk() {
  const auto t0 = std::chrono::steady_clock::now();
  finish_and_submit(nullptr, 0, nullptr, 0);
  chunk_ns_ += ns_since(t0);
  g->host.chunks += 1;
  chunk_at_ = std::min(2 * chunk_at_, chunk_max_);
  check_device_error(*g, "submitting a chunk of the forward");
}

bool State::finish_and_submit(WGPUBuffer copy_src, uint64_t src_off, WGPUBuffer copy_dst, uint64_t n) {
  if (pass_) {
    A.wgpuComputePassEncoderEnd(pass_);
    A.wgpuComputePassEncoderRelease(pass_);
    pass_ = nullptr;
  }
  since_ = 0;
  if (!enc_ && !copy_src) {
    flush_params();
    return false;
  }
  if (!enc_) {
    WGPUCommandEncoderDescriptor ed = {};
    enc_ = A.wgpuDeviceCreateCommandEncoder(g->device, &ed);
  }
  if (copy_src) A.wgpuCommandEncoderCopyBufferToBuffer(enc_, copy_src, src_off, copy_dst, 0, n);
  const uint32_t timed = static_cast<uint32_t>(q_names_.size());
  if (timed) {
    A.wgpuCommandEncoderResolveQuerySet(enc_, qs_, 0, 2 * timed, q_resolve_, 0);
    A.wgpuCommandEncoderCopyBufferToBuffer(enc_, q_resolve_, 0, q_staging_, 0, 16 * uint64_t{timed});
  }
  WGPUCommandBufferDescriptor cd = {};
  WGPUCommandBuffer cb = A.wgpuCommandEncoderFinish(enc_, &cd);
  A.wgpuCommandEncoderRelease(enc_);
  enc_ = nullptr;
  flush_params();
  last_sub_ = impl_submit(*g, cb);
  A.wgpuCommandBufferRelease(cb);
  g->host.submits += 1;
  ++submits_;
  return true;
}

WGPUComputePassEncoder State::timed_pass(const Pipeline& pl) {
  if (!qs_) {
    WGPUQuerySetDescriptor qd = {};
    qd.type = WGPUQueryType_Timestamp;
    qd.count = 2 * kQueryPairs;
    qs_ = A.wgpuDeviceCreateQuerySet(g->device, &qd);
    q_resolve_ = create_buffer(*g, 16 * kQueryPairs, WGPUBufferUsage_QueryResolve | WGPUBufferUsage_CopySrc);
    q_staging_ = create_buffer(*g, 16 * kQueryPairs, WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst);
    check_device_error(*g, "creating the timestamp query set");
  }
  if (pass_) {
    A.wgpuComputePassEncoderEnd(pass_);
    A.wgpuComputePassEncoderRelease(pass_);
    pass_ = nullptr;
  }
  if (!enc_) {
    WGPUCommandEncoderDescriptor ed = {};
    enc_ = A.wgpuDeviceCreateCommandEncoder(g->device, &ed);
  }
  const uint32_t i = static_cast<uint32_t>(q_names_.size());
  WGPUPassTimestampWrites tw = {};
  tw.querySet = qs_;
  tw.beginningOfPassWriteIndex = 2 * i;
  tw.endOfPassWriteIndex = 2 * i + 1;
  WGPUComputePassDescriptor pd = {};
  pd.timestampWrites = &tw;
  q_names_.push_back(&pl.name);
  return A.wgpuCommandEncoderBeginComputePass(enc_, &pd);
}

void State::collect_timestamps(uint32_t n) {
  std::vector<uint64_t> ts(2 * n);
  map_copy(q_staging_, ts.data(), 16 * n, last_sub_);
  std::lock_guard<std::mutex> lk(g->prof.mu);
  for (uint32_t i = 0; i < n; ++i) {
    auto& row = g->prof.rows[*q_names_[i]];
    row.first += 1;
    if (ts[2 * i + 1] > ts[2 * i]) row.second += static_cast<double>(ts[2 * i + 1] - ts[2 * i]) * g->ts_period;
  }
  g->prof.untimed += q_untimed_;
  q_untimed_ = 0;
  q_names_.clear();
}

void State::submit(WGPUBuffer copy_src, uint64_t src_off, WGPUBuffer copy_dst, uint64_t n) {
  if (open_) {  // the forward's recording ends here (its early submits count as submitting)
    g->host.record_ns += ns_since(begun_) - chunk_ns_;
    g->host.submit_ns += chunk_ns_;
    g->host.forwards += 1;
    open_ = false;
  }
  const auto sub0 = std::chrono::steady_clock::now();
  const uint32_t timed = static_cast<uint32_t>(q_names_.size());
  if (!finish_and_submit(copy_src, src_off, copy_dst, n)) return;
  g->host.submit_ns += ns_since(sub0);
  check_device_error(*g, "submitting the forward");
  if (timed) collect_timestamps(timed);
}

void State::read(WGPUBuffer b, uint64_t off, void* dst, uint64_t n) {
  const uint64_t n4 = (n + 3) & ~uint64_t(3);
  WGPUBuffer& st = staging_[n4];
  if (!st) st = create_buffer(*g, n4, WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst);
  submit(b, off, st, n4);
  map_copy(st, dst, n, last_sub_);
}

void State::stage_draws(WGPUBuffer b, uint64_t n, int64_t rows) {
  const uint64_t n4 = (n + 3) & ~uint64_t(3);
  auto& free = draw_staging_[n4];
  WGPUBuffer st;
  if (free.empty()) {
    st = create_buffer(*g, n4, WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst);
  } else {
    st = free.back();
    free.pop_back();
  }
  submit(b, 0, st, n4);
  pending_draws_.push_back({st, n4, last_sub_, rows});
}

void State::take_staged(void* dst, uint64_t n, int64_t rows, bool newest) {
  if (pending_draws_.empty() || (newest ? pending_draws_.back() : pending_draws_.front()).rows != rows)
    throw_invalid_config("ids", "no device draw of " + std::to_string(rows) + " rows is pending");
  const PendingDraws p = newest ? pending_draws_.back() : pending_draws_.front();
  if (newest) pending_draws_.pop_back();
  else pending_draws_.pop_front();
  draw_staging_[p.bytes].push_back(p.staging);
  map_copy(p.staging, dst, n, p.sub);
}

void State::map_copy(WGPUBuffer st, void* dst, uint64_t n, WGPUSubmissionIndex sub) {
  const uint64_t n4 = (n + 3) & ~uint64_t(3);
  const auto w0 = std::chrono::steady_clock::now();
  std::string err;
  const bool ok = impl_map_read(*g, st, n4, sub, &err);
  g->host.wait_ns += ns_since(w0);
  if (!ok) throw_backend_init(g->impl->backend, "reading back a buffer failed: " + err);
  const void* p = A.wgpuBufferGetConstMappedRange(st, 0, n4);
  std::memcpy(dst, p, n);
  A.wgpuBufferUnmap(st);
  check_device_error(*g, "reading back");
}

}  // namespace wgpu
}  // namespace cyb

#endif  // CYB_HAVE_WGPU
