#include "model/array_graph_run.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>

#include "backends/nox/nox_backend.h"
#include "core/array_elems.h"
#include "core/env_setting.h"
#include "core/errors.h"
#include "core/counter_rng.h"
#include "dispatch/op_schema.h"

namespace cyb {

namespace {

using Val = ArrayGraphRun::Val;

Shape to_shape(const std::vector<int64_t>& v, const std::string& what) {
  if (v.size() > static_cast<size_t>(Shape::kMaxDims)) throw_shape_mismatch(what + " (at most 8 dims)", {-1}, v);
  Shape s;
  for (int64_t d : v) s.d[s.ndim++] = d;
  return s;
}

std::string dims_text(const std::vector<graph2::Dim>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i)
    s += (i ? ", " : "") + (dims[i].known() ? std::to_string(dims[i].size) : dims[i].sym);
  return s + "]";
}

}  // namespace

// The buffers of the node outputs, kept for the next value of the same byte size (a run's values
// repeat their sizes run after run): no page faults and no zero fill per node once warm (every cpu
// kernel writes its whole output). A buffer goes back when its last view lets go (the deleter holds
// the pool, so one outliving the run is still freed). At most kMaxFree bytes wait in the pool
// (calls of ever new shapes do not grow it without bound); past that, buffers are freed.
class ArrayGraphRun::BufferPool : public std::enable_shared_from_this<ArrayGraphRun::BufferPool> {
 public:
  ~BufferPool() {
    for (auto& kv : free_)
      for (void* p : kv.second) ::operator delete(p, std::align_val_t(64));
  }
  std::shared_ptr<void> take(size_t bytes, const std::shared_ptr<int64_t>& live) {
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        free_bytes_ -= bytes;
      }
    }
    if (!p) p = ::operator new(bytes, std::align_val_t(64));
    *live += static_cast<int64_t>(bytes);
    std::shared_ptr<BufferPool> self = shared_from_this();
    return std::shared_ptr<void>(p, [self, live, bytes](void* q) {
      *live -= static_cast<int64_t>(bytes);
      self->give(bytes, q);
    });
  }

  // Frees the buffers waiting for a next run; their bytes.
  size_t release() {
    std::unordered_map<size_t, std::vector<void*>> f;
    {
      std::lock_guard<std::mutex> lk(mu_);
      f.swap(free_);
      free_bytes_ = 0;
    }
    size_t n = 0;
    for (auto& kv : f)
      for (void* p : kv.second) {
        ::operator delete(p, std::align_val_t(64));
        n += kv.first;
      }
    return n;
  }
  size_t free_bytes() const {
    std::lock_guard<std::mutex> lk(mu_);
    return free_bytes_;
  }

 private:
  static constexpr size_t kMaxFree = size_t{512} << 20;
  void give(size_t bytes, void* p) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (free_bytes_ + bytes <= kMaxFree) {
        free_[bytes].push_back(p);
        free_bytes_ += bytes;
        return;
      }
    }
    ::operator delete(p, std::align_val_t(64));
  }
  mutable std::mutex mu_;
  size_t free_bytes_ = 0;
  std::unordered_map<size_t, std::vector<void*>> free_;
};

size_t ArrayGraphRun::pooled_bytes() const { return pool_ ? pool_->free_bytes() : 0; }
void ArrayGraphRun::release_buffers() {
  if (pool_) pool_->release();
}

size_t ArrayGraphRun::release_weight_pages(ModelFile& file) const {
  size_t n = 0;
  for (const auto& kv : fixed_)
    if (kv.second.data) n += file.release_pages(kv.second.data, row_bytes(kv.second.dtype, kv.second.shape.numel()));
  return n;
}

ArrayGraphRun::ArrayGraphRun(graph2::Graph g, const ModelFile& file, bool nox) : g_(std::move(g)), nox_(nox) {
  if (!nox_) pool_ = std::make_shared<BufferPool>();
  for (const graph2::Initializer& in : g_.initializers) {
    const Tensor t = file.tensor(*file.find(in.tensor));
    Val v;
    v.dtype = t.dtype;
    v.shape = t.shape;
    v.data = t.data;
    fixed_[in.name] = v;
  }
  for (const graph2::Constant& c : g_.constants) {
    Val v;
    v.dtype = c.dtype;
    v.shape = to_shape(c.shape, "constant '" + c.name + "'");
    const int64_t n = v.shape.numel();
    auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(n) * elem_bytes(c.dtype) + 8);
    v.own = buf;
    Tensor t;
    t.dtype = c.dtype;
    t.data = buf->data();
    for (int64_t i = 0; i < n; ++i) {
      if (is_int_dtype(c.dtype)) put_i(t, i, c.ivalues[static_cast<size_t>(i)]);
      else put_f(t, i, c.values[static_cast<size_t>(i)]);
    }
    v.data = buf->data();
    fixed_[c.name] = v;
  }
  index_nodes();
  if (nox_)
    for (const auto& [name, v] : fixed_) fixed_digest_[name] = nox_tensor_digest(tensor_of(v));
}

void ArrayGraphRun::index_nodes() {
  for (graph2::Node& n : g_.nodes) n.op.label = n.name.c_str();  // (g_ is owned: stable names)
  // The last reader of each value (values no later node reads are dropped right after their node).
  last_use_.clear();
  for (size_t i = 0; i < g_.nodes.size(); ++i)
    for (const std::string& in : g_.nodes[i].inputs) last_use_[in] = i;
  for (const graph2::IoSpec& o : g_.outputs) last_use_[o.name] = g_.nodes.size();
  // The memory plan's lifetimes: per node output, the last node that needs its bytes (itself when
  // none reads it; a view's reads count for the value it views; graph outputs: the node count).
  lifetime_last_.clear();
  std::unordered_map<std::string, size_t> owner;  // value -> the plan index of the value owning its bytes
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    const graph2::Node& n = g_.nodes[i];
    const bool view = n.kind == OpKind::Reshape || op_schema(n.kind).rule == ShapeRule::View;
    for (const std::string& in : n.inputs) {
      auto it = owner.find(in);
      if (it != owner.end()) lifetime_last_[it->second] = std::max(lifetime_last_[it->second], static_cast<int>(i));
    }
    for (const std::string& o : n.outputs) {
      auto src = view ? owner.find(n.inputs[0]) : owner.end();
      if (src != owner.end()) owner[o] = src->second;
      else if (!view) owner[o] = lifetime_last_.size();
      lifetime_last_.push_back(static_cast<int>(i));
    }
  }
  for (const graph2::IoSpec& o : g_.outputs) {
    auto it = owner.find(o.name);
    if (it != owner.end()) lifetime_last_[it->second] = static_cast<int>(g_.nodes.size());
  }
  shape_only_.clear();
  for (const auto& kv : fixed_) shape_only_[kv.first] = true;
  for (const graph2::Node& n : g_.nodes) {
    bool known = n.kind == OpKind::ShapeOf;  // reads its input's shape only
    if (!known && n.kind != OpKind::RandomNormalLike) {
      known = true;
      for (const std::string& in : n.inputs) known = known && shape_only_.count(in) != 0;
    }
    if (known)
      for (const std::string& o : n.outputs) shape_only_[o] = true;
  }
  rest_fixed_.assign(g_.nodes.size(), 1);
  for (size_t i = 0; i < g_.nodes.size(); ++i)
    for (size_t k = 1; k < g_.nodes[i].inputs.size(); ++k) {
      const std::string& in = g_.nodes[i].inputs[k];
      if (!in.empty() && !fixed_.count(in)) rest_fixed_[i] = 0;
    }
}

ArrayGraphRun::~ArrayGraphRun() {
  for (auto& kv : fixed_dev_) fixed_dev_backend_->release(kv.second);
}

graph::FusionReport ArrayGraphRun::fuse(const Backend& primary) {
  // A constant or initializer's values for the pass's checks (f32 / f16 / integer values as
  // doubles; a large weight's values are not read: no pattern needs them).
  auto constant = [this](const std::string& name, graph2::ConstantData* c) {
    auto it = fixed_.find(name);
    if (it == fixed_.end()) return false;
    const Val& v = it->second;
    c->dtype = v.dtype;
    c->shape = v.shape.vec();
    const int64_t n = v.shape.numel();
    if (!c->want_values || n > (int64_t{1} << 20)) return true;
    const Tensor t = tensor_of(v);
    c->values.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      c->values[static_cast<size_t>(i)] = is_int_dtype(v.dtype) ? static_cast<double>(get_i(t, i)) : get_f(t, i);
    return true;
  };
  graph::FusionReport r = graph2::fuse(g_, primary, constant);
  index_nodes();
  return r;
}

Tensor ArrayGraphRun::tensor_of(const Val& v) {
  Tensor t;
  t.dtype = v.dtype;
  t.shape = v.shape;
  t.data = const_cast<void*>(v.data);
  return t;
}

std::string ArrayGraphRun::input_names() const {
  std::string s;
  for (const graph2::IoSpec& i : g_.inputs) s += (s.empty() ? "" : ", ") + i.name;
  return s;
}

Shape ArrayGraphRun::reshaped(const graph2::Node& n, const Shape& x) const {
  std::vector<int64_t> d = n.reshape;
  int64_t known = 1;
  int minus = -1;
  for (size_t i = 0; i < d.size(); ++i) {
    if (d[i] == 0) {
      if (static_cast<int>(i) >= x.ndim)
        throw_shape_mismatch(n.name + " (reshape: 0 past the input's dims)", d, x.vec());
      d[i] = x.d[i];
    }
    if (d[i] == -1) minus = static_cast<int>(i);
    else known *= d[i];
  }
  if (minus >= 0) {
    if (known == 0 || x.numel() % known != 0) throw_shape_mismatch(n.name + " (reshape)", d, x.vec());
    d[static_cast<size_t>(minus)] = x.numel() / known;
  }
  if (to_shape(d, n.name).numel() != x.numel()) throw_shape_mismatch(n.name + " (reshape)", d, x.vec());
  return to_shape(d, n.name);
}

std::vector<Shape> ArrayGraphRun::output_shapes(const graph2::Node& n, const std::vector<Tensor>& in) const {
  if (n.kind == OpKind::Conv1d) {
    // [B?, C, L] (channels_first) or [B?, L, C] -> [B?, L_out, C_out]; the dispatcher checks the rest
    const Shape& xs = in[0].shape;
    if ((xs.ndim != 2 && xs.ndim != 3) || in.size() < 2 || in[1].shape.ndim != 3)
      throw_shape_mismatch(n.name + " (conv1d x [B, C, L], weight [O, C, k])", {-1, -1, -1}, xs.vec());
    const int64_t L = n.op.a.channels_first ? xs.d[xs.ndim - 1] : xs.d[xs.ndim - 2];
    const int64_t k = in[1].shape.d[2], span = L + 2 * static_cast<int64_t>(n.op.a.padding) - k;
    const int64_t L_out = span < 0 || n.op.a.stride < 1 ? 0 : span / n.op.a.stride + 1;
    if (xs.ndim == 3) return {Shape{xs.d[0], L_out, in[1].shape.d[0]}};
    return {Shape{L_out, in[1].shape.d[0]}};
  }
  return infer_output_shapes(n.op, in.data(), static_cast<int>(in.size()));
}

namespace array_graph_detail {

constexpr int64_t kPad = 64;  // bytes past the end of every value buffer (vector loads)

int64_t value_bytes(const Shape& s, DType dt) {
  int64_t n = 1;
  for (int i = 0; i < s.ndim; ++i) {
    if (s.d[i] < 0) return INT64_MAX;
    if (s.d[i] && n > INT64_MAX / 16 / s.d[i]) return INT64_MAX;
    n *= s.d[i];
  }
  const int64_t b = static_cast<int64_t>(row_bytes(dt, n));
  return b > INT64_MAX - kPad ? INT64_MAX : b + kPad;
}

int64_t add_bytes(int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; }

namespace {
std::string shapes_text(const std::vector<Shape>& shapes, const std::vector<DType>& dts) {
  std::string s;
  for (size_t i = 0; i < shapes.size(); ++i) {
    s += (i ? ", " : "") + std::string(dtype_name(dts[i])) + " [";
    for (int k = 0; k < shapes[i].ndim; ++k) s += (k ? ", " : "") + std::to_string(shapes[i].d[k]);
    s += "]";
  }
  return s;
}
}  // namespace

std::string node_outputs_text(const graph2::Node& n, const std::vector<Shape>& shapes, const std::vector<DType>& dts) {
  return "node '" + n.name + "' (op " + op_name(n.kind) + "): its output" + (shapes.size() > 1 ? "s " : " ") +
         shapes_text(shapes, dts);
}

}  // namespace array_graph_detail

namespace {

using array_graph_detail::add_bytes;
using array_graph_detail::shapes_text;
using array_graph_detail::value_bytes;

// A value buffer of n bytes whose bytes count in *live while it is alive: zeroed (nox), or from the
// pool (cpu).
std::shared_ptr<void> counted_buffer(const std::shared_ptr<int64_t>& live, size_t n,
                                     const std::shared_ptr<ArrayGraphRun::BufferPool>& pool) {
  if (pool) return pool->take(n, live);
  auto* v = new std::vector<uint8_t>(n);
  *live += static_cast<int64_t>(n);
  return std::shared_ptr<void>(v->data(), [live, n, v](void*) {
    *live -= static_cast<int64_t>(n);
    delete v;
  });
}

// The inputs of node kinds whose output shapes come from input values (read on the host by the
// shape rules and by the kernels' plans): on a device backend these inputs are handed over as host
// values.
bool value_input(OpKind k, size_t i) {
  switch (k) {
    case OpKind::Range:
    case OpKind::NonZero:
    case OpKind::ConstantOfShape: return true;
    case OpKind::Expand:
    case OpKind::Tile:
    case OpKind::SliceDyn:
    case OpKind::PadDyn:
    case OpKind::ReshapeTo: return i >= 1;
    default: return false;
  }
}
// CYB_GRAPH_PROFILE=1: each run prints to stderr, per op kind, the nodes run, their wall time and its
// share of the run (docs/graph.md "Profile of a run"); views and reshapes count under their kind.
// CYB_GRAPH_PROFILE=shapes: per op kind and input shapes instead.
struct NodeProfile {
  bool on = false;
  std::map<std::string, std::pair<int64_t, double>> by_kind;  // op name -> (nodes, seconds)
  void add(const char* kind, double s) {
    auto& e = by_kind[kind];
    e.first += 1;
    e.second += s;
  }
  void print(size_t nodes) const {
    std::vector<std::pair<double, std::string>> rows;
    double total = 0;
    for (const auto& [k, e] : by_kind) {
      rows.emplace_back(e.second, k);
      total += e.second;
    }
    std::sort(rows.rbegin(), rows.rend());
    std::fprintf(stderr, "graph profile: %zu nodes, %.3f ms in nodes\n", nodes, total * 1e3);
    for (const auto& [s, k] : rows)
      std::fprintf(stderr, "  %-28s %6lld nodes %10.3f ms %5.1f%%\n", k.c_str(),
                   static_cast<long long>(by_kind.at(k).first), s * 1e3, total > 0 ? 100 * s / total : 0.0);
  }
};

}  // namespace

NamedArrays ArrayGraphRun::run(const NamedArrays& inputs, const RunOptions& options, Dispatcher& disp, ExecContext& ctx,
                               std::string* digest, const BudgetCheck& check) const {
  // Bytes of the buffers this run holds now (node outputs); each buffer gives its bytes back when
  // its last view goes. Declared before the values so that it outlives them.
  auto live = std::make_shared<int64_t>(0);
  std::unordered_map<std::string, Val> vals;
  std::map<std::string, int64_t> syms;
  for (const auto& [name, h] : inputs) {
    bool known = false;
    for (const graph2::IoSpec& s : g_.inputs) known = known || s.name == name;
    if (!known) throw_invalid_config("inputs['" + name + "']", "the graph has no input '" + name + "' (its inputs: " +
                                                                   input_names() + ")");
  }
  for (const graph2::IoSpec& s : g_.inputs) {
    const HostArray* h = nullptr;
    for (const auto& [name, a] : inputs) h = name == s.name ? &a : h;
    if (!h) throw_invalid_config("inputs['" + s.name + "']", "missing (the graph's inputs: " + input_names() + ")");
    const std::string f = "inputs['" + s.name + "']";
    if (h->dtype != s.dtype)
      throw_invalid_config(f, std::string("dtype ") + dtype_name(h->dtype) + ", the graph declares " +
                                  dtype_name(s.dtype));
    std::vector<int64_t> want;
    bool ok = h->shape.size() == s.shape.size();
    for (size_t i = 0; i < s.shape.size(); ++i) {
      const graph2::Dim& d = s.shape[i];
      int64_t w = d.size;
      if (!d.known()) {
        auto it = syms.find(d.sym);
        w = it == syms.end() ? -1 : it->second;
        if (ok && w < 0) syms[d.sym] = w = h->shape[i];
      }
      want.push_back(w);
      ok = ok && h->shape[i] == w;
    }
    if (!ok) throw_shape_mismatch("input '" + s.name + "' " + dims_text(s.shape), want, h->shape);
    Val v;
    v.dtype = h->dtype;
    v.shape = to_shape(h->shape, "input '" + s.name + "'");
    // an empty input (a dim of 0) has no bytes: a valid pointer all the same (kernels read none of it,
    // and a null one reads as "no data")
    static const uint64_t kNoBytes[8] = {};
    v.data = h->data.empty() ? static_cast<const void*>(kNoBytes) : h->data.data();
    vals[s.name] = v;
  }
  // The memory plan of these dims (array_graph_plan.cc), checked against the budget before anything
  // is allocated: the largest value alone (naming its node), then the planned peak. Values of known
  // size live in one arena at their planned offsets; the others (sizes the data decides) get their
  // own buffers as they come, each checked before it is allocated.
  const std::shared_ptr<const MemoryPlan> plan = memory_plan(syms, *disp.chain().back(), ctx);
  if (check && plan->largest >= 0) {
    const PlanValue& big = plan->values[static_cast<size_t>(plan->largest)];
    const graph2::Node& bn = g_.nodes[static_cast<size_t>(big.first)];
    std::vector<Shape> shapes;
    std::vector<DType> dts;
    for (size_t i = 0; i < bn.outputs.size(); ++i) {
      shapes.push_back(plan->values[plan->first_value[static_cast<size_t>(big.first)] + i].shape);
      dts.push_back(plan->values[plan->first_value[static_cast<size_t>(big.first)] + i].dtype);
    }
    check(0, big.bytes, [&] { return array_graph_detail::node_outputs_text(bn, shapes, dts); });
  }
  std::string dims_of_run;
  for (const auto& [k, v] : syms) dims_of_run += (dims_of_run.empty() ? "" : ", ") + k + "=" + std::to_string(v);
  if (check)
    check(0, plan->peak_bytes, [&] { return "the memory plan of this run (" + (dims_of_run.empty() ? "no dims" : dims_of_run) +
                                   "): its peak of " + std::to_string(plan->peak_bytes) + " bytes"; });
  RunMemory mem;
  mem.planned_peak = plan->peak_bytes;
  mem.unknown_values = static_cast<int64_t>(plan->unknown.size());
  std::shared_ptr<void> arena;
  if (plan->peak_bytes > 0 && plan->peak_bytes < (int64_t{1} << 50))
    arena = counted_buffer(live, static_cast<size_t>(plan->peak_bytes), pool_);
  const int64_t arena_bytes = arena ? plan->peak_bytes : 0;
  auto held = [&]() {
    mem.measured_peak = std::max(mem.measured_peak, *live);
    mem.dynamic_peak = std::max(mem.dynamic_peak, *live - arena_bytes);
  };
  held();
  auto get = [&](const std::string& name) -> const Val& {
    auto it = vals.find(name);
    if (it != vals.end()) return it->second;
    return fixed_.at(name);
  };
  // A device backend (wgpu+rs) keeps the values of the nodes it runs on the device: the inputs are
  // uploaded at their first use on the device, a node's device outputs stay there for the next
  // nodes, a value goes to the host only where a host node (a shape computation, an op the device
  // declines) or a shape rule reads it, and the outputs are read back at the end.
  Backend* front = disp.chain().front();
  const bool device = !nox_ && !front->host_memory();
  if (device && fixed_dev_backend_ && fixed_dev_backend_ != front)
    throw_backend_init(front->name(), "a version-2 graph run on two device backends");
  auto host_of = [&](const std::string& name) -> const Val& {
    const Val& v = get(name);
    if (v.data || !v.dev.data) return v;
    Val& w = vals.at(name);  // device-only values are the run's own
    const int64_t nb = value_bytes(w.shape, w.dtype);
    if (check) check(*live, nb, [&] { return "the host copy of '" + name + "' " + shapes_text({w.shape}, {w.dtype}); });
    w.own = counted_buffer(live, static_cast<size_t>(nb), pool_);
    front->read_bytes(w.dev, w.own.get());
    w.data = w.own.get();
    return w;
  };
  auto dev_of = [&](const std::string& name) -> Tensor {
    const Val& v = get(name);
    if (v.dev.data) return v.dev;
    auto f = fixed_.find(name);
    if (f != fixed_.end() && !vals.count(name)) {
      auto it = fixed_dev_.find(name);
      if (it == fixed_dev_.end()) {
        fixed_dev_backend_ = front;
        it = fixed_dev_.emplace(name, front->upload(v.data, v.shape, v.dtype)).first;
      }
      return it->second;
    }
    Val& w = vals.at(name);
    Tensor t = front->alloc_frame_as(ctx, w.shape, w.dtype);
    const int64_t nb = value_bytes(w.shape, w.dtype);
    *live += nb;
    w.dev_own = std::shared_ptr<void>(t.data, [live, nb, front, &ctx, t](void* /*frame*/) {
      *live -= nb;
      front->release_frame(ctx, t);
    });
    w.dev = t;
    front->write_bytes(t, w.data);
    return t;
  };
  // nox: the digest chain of version 2 (docs/graph.md "The digest chain"): H_0 over the named
  // inputs in declared order, then one link per node (views included).
  Sha256::Digest chain{};
  if (nox_) {
    Sha256 h;
    const char tag[] = "cyb-nox/2";
    h.update(tag, sizeof tag - 1);
    for (const graph2::IoSpec& s : g_.inputs) {
      const Sha256::Digest di = nox_tensor_digest(tensor_of(vals.at(s.name)));
      h.update(di.data(), di.size());
    }
    chain = h.finish();
  }
  auto link = [&](const graph2::Node& n, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
    Sha256 h;
    h.update(chain.data(), chain.size());
    h.update_u16le(static_cast<uint16_t>(n.kind));
    h.update_u8(static_cast<uint8_t>(in.size()));
    for (size_t i = 0; i < in.size(); ++i) {
      auto f = vals.count(n.inputs[i]) ? fixed_digest_.end() : fixed_digest_.find(n.inputs[i]);
      const Sha256::Digest di = f != fixed_digest_.end() ? f->second : nox_tensor_digest(in[i]);
      h.update(di.data(), di.size());
    }
    h.update_u8(static_cast<uint8_t>(out.size()));
    for (const Tensor& t : out) {
      const Sha256::Digest di = nox_tensor_digest(t);
      h.update(di.data(), di.size());
    }
    chain = h.finish();
  };
  int64_t n_random = 0;  // random nodes met so far (the k of seed_for_node)
  static const std::string kProfile = env_one_of("CYB_GRAPH_PROFILE", {"0", "1", "shapes"});
  NodeProfile prof;
  prof.on = kProfile == "1" || kProfile == "shapes";
  const bool prof_shapes = kProfile == "shapes";
  for (size_t ni = 0; ni < g_.nodes.size(); ++ni) {
    const graph2::Node& n = g_.nodes[ni];
    const bool view = n.kind == OpKind::Reshape || op_schema(n.kind).rule == ShapeRule::View;
    // device: which side runs the node (views: none; their input's sides carry over)
    const bool host_shape = device && !view && shape_only_.count(n.outputs[0]) != 0;
    const auto t0 = prof.on ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    std::vector<Tensor> in;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const std::string& name = n.inputs[i];
      // a device value is read back where a shape rule (or a host shape computation) needs it
      const bool need_host = device && (value_input(n.kind, i) || (host_shape && n.kind != OpKind::ShapeOf));
      const Val& v = need_host ? host_of(name) : get(name);
      Tensor t;
      t.dtype = v.dtype;
      t.shape = v.shape;
      static const uint64_t kShapeOnly[8] = {};  // shape: no values read
      t.data = const_cast<void*>(v.data ? v.data : static_cast<const void*>(kShapeOnly));
      t.name = name.c_str();
      in.push_back(t);
    }
    if (view) {
      Val v = get(n.inputs[0]);
      v.shape = n.kind == OpKind::Reshape ? reshaped(n, v.shape)
                                          : view_shape(n.op, v.shape, in.size() > 1 ? &in[1] : nullptr);
      if (nox_) link(n, in, {tensor_of(v)});
      if (v.dev.data) v.dev.shape = v.shape;
      vals[n.outputs[0]] = v;
    } else {
      std::vector<Shape> shapes = output_shapes(n, in);
      std::vector<Tensor> out(shapes.size());
      std::vector<Val> outv(shapes.size());
      std::vector<DType> dts(shapes.size());
      int64_t need = 0;  // this node's outputs the plan has no bytes for, checked together before any is allocated
      std::vector<const PlanValue*> planned(shapes.size(), nullptr);
      for (size_t i = 0; i < shapes.size(); ++i) {
        dts[i] = output_dtype(n.op, in.data(), static_cast<int>(in.size()), static_cast<int>(i));
        const PlanValue& pv = plan->values[plan->first_value[ni] + i];
        if (arena && pv.offset >= 0 && pv.shape == shapes[i] && pv.dtype == dts[i]) planned[i] = &pv;
        else need = add_bytes(need, value_bytes(shapes[i], dts[i]));
      }
      if (check && need > 0)
        check(*live, need, [&] { return array_graph_detail::node_outputs_text(n, shapes, dts); });
      // device: the node runs there when the device backend takes it; its inputs then go as device
      // tensors (value inputs: as host values), else every input as a host value.
      bool on_dev = device && !host_shape && front->supports(n.op, in.data(), static_cast<int>(in.size()));
      if (on_dev) {
        // The schema's value checks (index ranges: InvalidConfig naming the node) read host values
        // only: run them here on the host copies there are (a feed, a host node's output), before the
        // inputs go to the device, where the dispatcher's validation can no longer read them.
        static const uint64_t kNoData[8] = {};
        std::vector<Tensor> hin = in, hout(shapes.size());
        for (size_t i = 0; i < in.size(); ++i)
          if (!get(n.inputs[i]).data) hin[i].device = Device::Wgpu;  // device-only: not read
        for (size_t i = 0; i < shapes.size(); ++i) {
          hout[i].dtype = dts[i];
          hout[i].shape = shapes[i];
          hout[i].device = Device::Wgpu;
          hout[i].data = const_cast<uint64_t*>(kNoData);
        }
        validate_op(n.op, hin.data(), static_cast<int>(hin.size()), hout.data(), static_cast<int>(hout.size()));
      }
      if (device && !host_shape)
        for (size_t i = 0; i < in.size(); ++i) {
          if (on_dev && !value_input(n.kind, i)) {
            const Tensor d = dev_of(n.inputs[i]);
            in[i].device = d.device;
            in[i].data = d.data;
            in[i].offset = d.offset;
          } else if (!on_dev && !value_input(n.kind, i)) {  // (a value read twice: each input its copy)
            in[i].data = const_cast<void*>(host_of(n.inputs[i]).data);
          }
        }
      for (size_t i = 0; i < shapes.size(); ++i) {
        const DType dt = dts[i];
        outv[i].dtype = dt;
        outv[i].shape = shapes[i];
        if (on_dev) {  // a device frame (the plan's arena is host memory)
          const Tensor t = front->alloc_frame_as(ctx, shapes[i], dt);
          const int64_t nb = value_bytes(shapes[i], dt);
          *live += nb;
          outv[i].dev_own = std::shared_ptr<void>(t.data, [live, nb, front, &ctx, t](void* /*frame*/) {
            *live -= nb;
            front->release_frame(ctx, t);
          });
          outv[i].dev = t;
          out[i] = t;
          continue;
        }
        if (planned[i]) {
          void* at = static_cast<uint8_t*>(arena.get()) + planned[i]->offset;
          if (nox_) std::memset(at, 0, static_cast<size_t>(planned[i]->bytes));  // nox: zeroed, as its own buffer was
          outv[i].own = std::shared_ptr<void>(arena, at);
        } else {
          outv[i].own = counted_buffer(live, static_cast<size_t>(value_bytes(shapes[i], dt)), pool_);
          mem.unplanned += plan->values[plan->first_value[ni] + i].known;
        }
        outv[i].data = outv[i].own.get();
        out[i].dtype = dt;
        out[i].shape = shapes[i];
        out[i].data = outv[i].own.get();
      }
      // the weight cache only where the weights are the model's own (rest_fixed_); restored after
      struct CacheScope {
        ExecContext& ctx;
        WeightCache* wc;
        ~CacheScope() { ctx.set_weight_cache(wc); }
      } scope{ctx, ctx.weight_cache()};
      if (!rest_fixed_[ni]) ctx.set_weight_cache(nullptr);
      Op op = n.op;
      if (options.has_seed && n.kind == OpKind::RandomNormalLike)  // the caller's seed, mixed with the node's
        op.a.seed = static_cast<int64_t>(seed_for_node(options.seed, n_random));  // place among the random nodes
      if (host_shape) disp.run_host_shape(op, in.data(), static_cast<int>(in.size()), out.data(),
                                          static_cast<int>(out.size()), ctx);
      else disp.run(op, in.data(), static_cast<int>(in.size()), out.data(), static_cast<int>(out.size()), ctx);
      held();
      n_random += n.kind == OpKind::RandomNormalLike;
      if (nox_) link(n, in, out);
      for (size_t i = 0; i < shapes.size(); ++i) vals[n.outputs[i]] = outv[i];
    }
    for (const std::string& name : n.inputs) {
      auto it = last_use_.find(name);
      if (it != last_use_.end() && it->second == ni) vals.erase(name);
    }
    if (prof.on) {
      std::string key = op_name(n.kind);
      if (prof_shapes) {
        std::vector<Shape> ss;
        std::vector<DType> ds;
        for (const Tensor& t : in) {
          ss.push_back(t.shape);
          ds.push_back(t.dtype);
        }
        key += " " + shapes_text(ss, ds);
      }
      prof.add(key.c_str(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  if (prof.on) prof.print(g_.nodes.size());
  NamedArrays out;
  int64_t copied = 0;
  for (const graph2::IoSpec& s : g_.outputs) {
    const Val& v = device ? host_of(s.name) : get(s.name);
    if (v.dtype != s.dtype)
      throw_format("graph", "outputs." + s.name + ".dtype", std::string("declared ") + dtype_name(s.dtype) +
                                                            ", the graph computes " + dtype_name(v.dtype));
    HostArray h;
    h.dtype = v.dtype;
    h.shape = v.shape.vec();
    if (h.shape.size() != s.shape.size())
      throw_shape_mismatch("output '" + s.name + "' " + dims_text(s.shape), std::vector<int64_t>(s.shape.size(), -1),
                           h.shape);
    const size_t nb = row_bytes(v.dtype, v.shape.numel());
    if (check)
      check(*live + copied, static_cast<int64_t>(nb),
            [&] { return "the copy of output '" + s.name + "' " + shapes_text({v.shape}, {v.dtype}); });
    copied += static_cast<int64_t>(nb);
    h.data.resize(nb);
    if (nb) std::memcpy(h.data.data(), v.data, nb);
    out.emplace_back(s.name, std::move(h));
  }
  if (nox_ && digest) *digest = Sha256::hex(chain);
  {
    std::lock_guard<std::mutex> lk(stats_mu_);
    last_mem_ = mem;
  }
  return out;
}

}  // namespace cyb
