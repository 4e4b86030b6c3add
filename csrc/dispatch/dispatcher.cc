// Per-op dispatch: first backend of the chain whose supports() says yes.
// Records are aggregated per (label, op, backend) in an open-addressing table
// looked up without allocating; a slot is created only the first time a label
// is seen, so a steady decode allocates nothing here.
#include "dispatch/dispatcher.h"

#include <chrono>
#include <cstring>
#include <mutex>

#include "core/errors.h"
#include "core/frame_allocator.h"
#include "dispatch/op_schema.h"

namespace cyb {

struct Dispatcher::Slot {
  DispatchRecord rec;
  uint64_t hash = 0;
  OpKind kind = OpKind::Embedding;
  const Backend* backend = nullptr;
};

namespace {

struct Index {
  std::vector<size_t> table;  // slot index + 1, 0 = empty
  size_t used = 0;
  std::mutex mu;
};

uint64_t hash_key(const char* label, OpKind kind, const Backend* b) {
  uint64_t h = 1469598103934665603ull;
  for (const char* p = label; *p; ++p) h = (h ^ static_cast<uint8_t>(*p)) * 1099511628211ull;
  h = (h ^ static_cast<uint64_t>(kind)) * 1099511628211ull;
  h ^= reinterpret_cast<uintptr_t>(b) >> 4;
  h *= 1099511628211ull;
  return h;
}

}  // namespace

Tensor Backend::alloc(const Shape& shape, DType dtype) {
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  const size_t n = t.nbytes();
  t.data = aligned_alloc_bytes(n, 64);
  if (!t.data) throw_oom(name(), n);
  std::memset(t.data, 0, n);
  return t;
}
Tensor Backend::upload(const void* data, const Shape& shape, DType dtype) {
  Tensor t = alloc(shape, dtype);
  std::memcpy(t.data, data, t.nbytes());
  return t;
}
void Backend::release(Tensor& t) {
  aligned_free_bytes(t.data);
  t.data = nullptr;
}
Tensor Backend::alloc_frame_as(ExecContext& ctx, const Shape& shape, DType dtype) {
  if (dtype != DType::F32) throw_unsupported_op("frame", name(), dtype_name(dtype));
  return alloc_frame(ctx, shape);
}
void Backend::write_bytes(const Tensor& t, const void* src) { std::memcpy(t.data, src, t.nbytes()); }
void Backend::read_bytes(const Tensor& t, void* dst) { std::memcpy(dst, t.data, t.nbytes()); }
void Backend::sample_rows(const Tensor&, const DeviceSampling*, DeviceDraw*, int64_t, ExecContext&) {
  throw_unsupported_op("sample", name(), "-");
}
void Backend::take_draws(ExecContext&, DeviceDraw*, int64_t) { throw_unsupported_op("sample", name(), "-"); }
Tensor Backend::sampled_token(ExecContext&) { throw_unsupported_op("sample", name(), "-"); }
void Backend::beam_rows(const Tensor&, const BeamRow*, int64_t, const BeamSpec&, float*, int32_t*, int64_t*,
                        ExecContext&) {
  throw_unsupported_op("beam", name(), "-");
}

// A host backend runs an op whose tensors live on a device backend: every device
// tensor (inputs and outputs, since outputs may be updated in place, e.g. a KV
// cache) is read into host frame memory, the op runs there, and the outputs are
// written back. Recorded as a fallback like any other.
static void run_with_transfer(Backend* owner, Backend* host, const Op& op, const Tensor* inputs,
                              int n_inputs, Tensor* outputs, int n_outputs, ExecContext& ctx) {
  Tensor in[8], out[4];
  if (n_inputs > 8 || n_outputs > 4)
    throw_shape_mismatch(op_name(op.kind), {8, 4}, {n_inputs, n_outputs});
  auto to_host = [&](const Tensor& t) {
    Tensor h = t;
    if (t.device == Device::Host) return h;
    h.device = Device::Host;
    h.offset = 0;
    h.data = ctx.frame().alloc(t.nbytes() + 64);
    owner->read_bytes(t, h.data);
    return h;
  };
  for (int i = 0; i < n_inputs; ++i) in[i] = to_host(inputs[i]);
  for (int i = 0; i < n_outputs; ++i) out[i] = to_host(outputs[i]);
  host->execute(op, in, n_inputs, out, n_outputs, ctx);
  for (int i = 0; i < n_outputs; ++i)
    if (outputs[i].device != Device::Host) owner->write_bytes(outputs[i], out[i].data);
}

Dispatcher::Dispatcher(std::vector<Backend*> chain) : chain_(std::move(chain)) {
  if (chain_.empty()) throw_backend_init("dispatcher", "empty backend chain");
  for (Backend* b : chain_)
    if (!b) throw_backend_init("dispatcher", "null backend in chain");
  auto* idx = new Index;
  idx->table.assign(256, 0);
  index_ = idx;
}

Dispatcher::~Dispatcher() {
  for (Slot* s : slots_) delete s;
  delete static_cast<Index*>(index_);
}

void Dispatcher::run(const Op& op, std::initializer_list<Tensor> inputs,
                     std::initializer_list<Tensor*> outputs, ExecContext& ctx) {
  Tensor in[8];
  Tensor out[4];
  if (inputs.size() > 8 || outputs.size() > 4)
    throw_shape_mismatch(op_name(op.kind), {8, 4},
                         {static_cast<int64_t>(inputs.size()), static_cast<int64_t>(outputs.size())});
  int ni = 0, no = 0;
  for (const Tensor& t : inputs) in[ni++] = t;
  for (Tensor* t : outputs) out[no++] = *t;
  run(op, in, ni, out, no, ctx);
  no = 0;
  for (Tensor* t : outputs) *t = out[no++];
}

void Dispatcher::run(const Op& op, const Tensor* inputs, int n_inputs, Tensor* outputs,
                     int n_outputs, ExecContext& ctx) {
  run_impl(op, inputs, n_inputs, outputs, n_outputs, ctx, false);
}

void Dispatcher::run_host_shape(const Op& op, const Tensor* inputs, int n_inputs, Tensor* outputs, int n_outputs,
                                ExecContext& ctx) {
  run_impl(op, inputs, n_inputs, outputs, n_outputs, ctx, true);
}

void Dispatcher::run_impl(const Op& op, const Tensor* inputs, int n_inputs, Tensor* outputs, int n_outputs,
                          ExecContext& ctx, bool host_shape) {
  // Validity once, from the op schema, before any backend is asked: supports()
  // only answers capability, and kernels only compute.
  validate_op(op, inputs, n_inputs, outputs, n_outputs);
  Backend* chosen = chain_.back();
  for (Backend* b : chain_) {
    if (host_shape) break;
    if (b->supports(op, inputs, n_inputs)) {
      chosen = b;
      break;
    }
  }
  const bool fallback = chosen != chain_.front();
  Backend* owner = chain_.front();
  // Transfers only where some tensor lives on the device (a device backend handed host tensors,
  // as the version-2 graph executor does, falls back to the cpu on those tensors as they are).
  bool on_device = false;
  for (int i = 0; i < n_inputs; ++i) on_device = on_device || inputs[i].device != Device::Host;
  for (int i = 0; i < n_outputs; ++i) on_device = on_device || outputs[i].device != Device::Host;
  const bool transfer = fallback && chosen->host_memory() && !owner->host_memory() && on_device;
  double ms = 0.0;
  const bool profiling = profiling_.load(std::memory_order_relaxed);
  const auto t0 = profiling ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  if (transfer) run_with_transfer(owner, chosen, op, inputs, n_inputs, outputs, n_outputs, ctx);
  else chosen->execute(op, inputs, n_inputs, outputs, n_outputs, ctx);
  if (profiling)
    ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  const char* label = op.label ? op.label : op_name(op.kind);
  const uint64_t h = hash_key(label, op.kind, chosen);
  Index& idx = *static_cast<Index*>(index_);
  std::lock_guard<std::mutex> lk(idx.mu);
  size_t mask = idx.table.size() - 1;
  size_t pos = h & mask;
  for (;;) {
    size_t v = idx.table[pos];
    if (v == 0) break;
    Slot* s = slots_[v - 1];
    if (s->hash == h && s->kind == op.kind && s->backend == chosen && s->rec.label == label) {
      s->rec.count += 1;
      s->rec.total_ms += ms;
      return;
    }
    pos = (pos + 1) & mask;
  }
  // First time this (label, op, backend) is seen: create its slot.
  Slot* s = new Slot;
  s->hash = h;
  s->kind = op.kind;
  s->backend = chosen;
  s->rec.label = label;
  s->rec.op = op_name(op.kind);
  s->rec.backend = chosen->name();
  s->rec.fallback = fallback;
  s->rec.host_shape = host_shape && fallback;
  s->rec.count = 1;
  s->rec.total_ms = ms;
  slots_.push_back(s);
  idx.table[pos] = slots_.size();
  if (++idx.used * 2 > idx.table.size()) {
    std::vector<size_t> t(idx.table.size() * 2, 0);
    mask = t.size() - 1;
    for (size_t i = 0; i < slots_.size(); ++i) {
      size_t p = slots_[i]->hash & mask;
      while (t[p] != 0) p = (p + 1) & mask;
      t[p] = i + 1;
    }
    idx.table.swap(t);
  }
}

void Dispatcher::record(const char* label, const char* op, const Backend* b) {
  Index& idx = *static_cast<Index*>(index_);
  std::lock_guard<std::mutex> lk(idx.mu);
  for (DispatchRecord& r : extra_)
    if (r.label == label && r.op == op && r.backend == b->name()) {
      r.count += 1;
      return;
    }
  DispatchRecord r;
  r.label = label;
  r.op = op;
  r.backend = b->name();
  r.fallback = b != chain_.front();
  r.count = 1;
  extra_.push_back(r);
}

std::vector<DispatchRecord> Dispatcher::records() const {
  Index& idx = *static_cast<Index*>(index_);
  std::lock_guard<std::mutex> lk(idx.mu);
  std::vector<DispatchRecord> out;
  out.reserve(slots_.size() + extra_.size());
  for (const Slot* s : slots_) out.push_back(s->rec);
  for (const DispatchRecord& r : extra_) out.push_back(r);
  return out;
}

void Dispatcher::clear_records() {
  Index& idx = *static_cast<Index*>(index_);
  std::lock_guard<std::mutex> lk(idx.mu);
  for (Slot* s : slots_) {
    s->rec.count = 0;
    s->rec.total_ms = 0.0;
  }
  for (DispatchRecord& r : extra_) r.count = 0;
}

}  // namespace cyb
