// Shapes and the memory plan of a version-2 graph (docs/graph.md "Shapes and the memory plan"):
// a dry run of the graph's shape rules (the schema's, through infer_output_shapes / view_shape: one
// definition) over shapes only, computing on the host the small values shapes are made of (shape,
// gather, concat of dims, ...); at load with probe sizes for the symbolic dims (symbolic shapes), and
// before each run with the caller's sizes (the memory plan the run allocates from).
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "core/errors.h"
#include "dispatch/op_schema.h"
#include "model/array_graph_run.h"

namespace cyb {

using array_graph_detail::add_bytes;
using array_graph_detail::json_text;
using array_graph_detail::value_bytes;

struct ArrayGraphRun::DryVal {
  bool known = false;  // the shape is known
  DType dtype = DType::F32;
  Shape shape;
  const void* data = nullptr;  // the values, when known here (fixed values, small computed ones)
  std::shared_ptr<std::vector<uint8_t>> own;
};

namespace {

constexpr int64_t kMaxEvalElems = 64;        // values computed at plan time: shapes and the like
constexpr int64_t kMaxPlanned = int64_t{1} << 50;  // larger values are refused by the budget check anyway

bool is_view(const graph2::Node& n) { return n.kind == OpKind::Reshape || op_schema(n.kind).rule == ShapeRule::View; }

// The inputs whose values (not only shapes) an op's output shape depends on.
std::vector<int> value_inputs(OpKind k) {
  switch (k) {
    case OpKind::ReshapeTo:
    case OpKind::Expand:
    case OpKind::Tile:
    case OpKind::PadDyn: return {1};
    case OpKind::SliceDyn: return {1, 2, 3, 4};
    case OpKind::NonZero:
    case OpKind::ConstantOfShape: return {0};
    case OpKind::Range: return {0, 1, 2};
    default: return {};
  }
}

// The rank of a data-dependent output (its dims are sizes known at run time); -1: not known.
int fresh_rank(const graph2::Node& n, const std::vector<Tensor>& in) {
  const auto len = [&](size_t i) { return i < in.size() && in[i].shape.ndim == 1 ? in[i].shape.d[0] : -1; };
  switch (n.kind) {
    case OpKind::NonZero: return 2;
    case OpKind::Range: return 1;
    case OpKind::ConstantOfShape:
    case OpKind::ReshapeTo: return static_cast<int>(len(n.kind == OpKind::ReshapeTo ? 1 : 0));
    case OpKind::Expand: return len(1) < 0 ? -1 : static_cast<int>(std::max<int64_t>(in[0].shape.ndim, len(1)));
    case OpKind::Tile:
    case OpKind::SliceDyn:
    case OpKind::PadDyn: return in[0].shape.ndim;
    default: return -1;
  }
}

std::string json_shape(const Shape& s) {
  std::string o = "[";
  for (int i = 0; i < s.ndim; ++i) o += (i ? ", " : "") + std::to_string(s.d[i]);
  return o + "]";
}

std::vector<int64_t> primes_from(int64_t lo, size_t count) {
  std::vector<int64_t> p;
  for (int64_t v = lo; p.size() < count; ++v) {
    bool prime = v > 1;
    for (int64_t f = 2; prime && f * f <= v; ++f) prime = v % f != 0;
    if (prime) p.push_back(v);
  }
  return p;
}

}  // namespace

std::string array_graph_detail::json_text(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += std::string("\\") + c;
    else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else o += c;
  }
  return o + "\"";
}

void ArrayGraphRun::dry_run(const std::map<std::string, int64_t>& dims, bool probe, Backend& eval, ExecContext& ctx,
                            std::unordered_map<std::string, DryVal>* vals, std::vector<std::exception_ptr>* errors,
                            const FreshSize& fresh) const {
  static const uint64_t kNoBytes[8] = {};
  auto& V = *vals;
  errors->assign(g_.nodes.size(), nullptr);
  for (const graph2::IoSpec& s : g_.inputs) {
    DryVal v;
    v.known = true;
    v.dtype = s.dtype;
    for (const graph2::Dim& d : s.shape) v.shape.d[v.shape.ndim++] = d.known() ? d.size : dims.at(d.sym);
    V[s.name] = v;
  }
  auto get = [&](const std::string& name) {
    auto it = V.find(name);
    if (it != V.end()) return it->second;
    const Val& f = fixed_.at(name);
    DryVal v;
    v.known = true;
    v.dtype = f.dtype;
    v.shape = f.shape;
    v.data = f.data;
    return v;
  };
  for (size_t ni = 0; ni < g_.nodes.size(); ++ni) {
    const graph2::Node& n = g_.nodes[ni];
    std::vector<DryVal> iv;
    std::vector<Tensor> in;
    bool all_known = true, all_data = true;
    for (const std::string& name : n.inputs) {
      iv.push_back(get(name));
      Tensor t;
      t.dtype = iv.back().dtype;
      t.shape = iv.back().shape;
      t.data = const_cast<void*>(iv.back().data);
      t.name = name.c_str();
      in.push_back(t);
      all_known = all_known && iv.back().known;
      all_data = all_data && iv.back().data;
    }
    const size_t n_out = n.outputs.size();
    std::vector<DryVal> out(n_out);
    for (size_t i = 0; i < n_out; ++i) {
      try {
        out[i].dtype = is_view(n) ? in[0].dtype
                                  : output_dtype(n.op, in.data(), static_cast<int>(in.size()), static_cast<int>(i));
      } catch (...) {
        out[i].dtype = in.empty() ? DType::F32 : in[0].dtype;
      }
    }
    auto finish = [&]() {
      for (size_t i = 0; i < n_out; ++i) V[n.outputs[i]] = out[i];
    };
    if (!all_known) {
      finish();
      continue;
    }
    bool have_values = true;
    for (int k : value_inputs(n.kind))
      if (k < static_cast<int>(in.size()) && !in[static_cast<size_t>(k)].data) have_values = false;
    if (!have_values) {
      // a shape the data decides: sizes known only at run time (probes: fresh sizes named after the node)
      const int r = fresh_rank(n, in);
      if (probe && fresh && r >= 0 && r <= Shape::kMaxDims && n_out == 1) {
        out[0].known = true;
        out[0].shape.ndim = r;
        for (int k = 0; k < r; ++k)
          out[0].shape.d[k] = n.kind == OpKind::NonZero && k == 0 ? in[0].shape.ndim
                                                                  : fresh(n.name + ":" + std::to_string(k));
      }
      finish();
      continue;
    }
    std::vector<Shape> shapes;
    try {
      if (n.kind == OpKind::Reshape) shapes = {reshaped(n, in[0].shape)};
      else if (is_view(n)) shapes = {view_shape(n.op, in[0].shape, in.size() > 1 ? &in[1] : nullptr)};
      else shapes = output_shapes(n, in);
      if (shapes.size() != n_out) throw std::logic_error("output count");
    } catch (...) {
      (*errors)[ni] = std::current_exception();
      finish();
      continue;
    }
    bool small = true;
    for (size_t i = 0; i < n_out; ++i) {
      out[i].known = true;
      out[i].shape = shapes[i];
      small = small && shapes[i].numel() <= kMaxEvalElems && !is_quantized(out[i].dtype);
    }
    if (is_view(n)) {
      out[0].data = iv[0].data;
      out[0].own = iv[0].own;
    } else if (small && n.kind != OpKind::RandomNormalLike && (all_data || n.kind == OpKind::ShapeOf)) {
      // a small value of known inputs: computed here (the shapes further on may read it)
      std::vector<Tensor> ot(n_out);
      for (size_t i = 0; i < n_out; ++i) {
        out[i].own = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(value_bytes(shapes[i], out[i].dtype)));
        ot[i].dtype = out[i].dtype;
        ot[i].shape = shapes[i];
        ot[i].data = out[i].own->data();
      }
      if (n.kind == OpKind::ShapeOf && !in[0].data) in[0].data = const_cast<uint64_t*>(kNoBytes);
      try {
        validate_op(n.op, in.data(), static_cast<int>(in.size()), ot.data(), static_cast<int>(n_out));
        eval.execute(n.op, in.data(), static_cast<int>(in.size()), ot.data(), static_cast<int>(n_out), ctx);
        for (size_t i = 0; i < n_out; ++i) out[i].data = out[i].own->data();
      } catch (...) {  // not computed here: the shapes that need it are known at run time
        for (size_t i = 0; i < n_out; ++i) out[i].own.reset();
      }
    }
    finish();
  }
}

void ArrayGraphRun::infer_shapes(Backend& eval, ExecContext& ctx) {
  // The input dims' names, then the fresh sizes of data-dependent outputs, each with three probe
  // sizes (distinct primes): a dim equal in all three probes is a size; one that factors as
  // c * (probe sizes) in all three is that product ("4*batch"); one that is a*s + b for one name s
  // in all three is that ("seq_len+2"); any other is named after its value ("<value>[k]"). A
  // data-dependent size is a fresh name "<node>:<k>", probed the same way.
  std::vector<std::string> names;
  for (const graph2::IoSpec& s : g_.inputs)
    for (const graph2::Dim& d : s.shape)
      if (!d.known() && std::find(names.begin(), names.end(), d.sym) == names.end()) names.push_back(d.sym);
  std::vector<std::unordered_map<std::string, DryVal>> vals(3);
  std::vector<std::vector<std::exception_ptr>> errors(3);
  std::vector<int64_t> primes;
  auto prime = [&](size_t j, int p) {
    if (primes.size() < 3 * (j + 1)) primes = primes_from(101, 3 * (j + 1) + 96);
    return primes[3 * j + static_cast<size_t>(p)];
  };
  auto probe_dims = [&](int p) {
    std::map<std::string, int64_t> d;
    for (size_t j = 0; j < names.size(); ++j) d[names[j]] = prime(j, p);
    return d;
  };
  const size_t n_input_dims = names.size();
  for (int p = 0; p < 3; ++p) {
    const FreshSize fresh = [&](const std::string& name) {
      auto it = std::find(names.begin(), names.end(), name);
      if (it == names.end()) it = names.insert(names.end(), name);
      return prime(static_cast<size_t>(it - names.begin()), p);
    };
    std::map<std::string, int64_t> d;
    for (size_t j = 0; j < n_input_dims; ++j) d[names[j]] = prime(j, p);
    dry_run(d, true, eval, ctx, &vals[static_cast<size_t>(p)], &errors[static_cast<size_t>(p)], fresh);
  }
  // A shape error where the node's inputs are the same in every probe (their shapes, and their
  // values where known: an Expand's target, a Reshape's shape; no input dim reaches it) and every
  // probe fails is the graph's: thrown at load, naming the node. (An Expand to [batch, seq] of a
  // [1, 64] slice of a 64-row table fails at every probe's seq, but is the model's own limit on seq:
  // the run of a seq <= 64 works, a longer one is refused then.)
  auto same_values = [](const DryVal& x, const DryVal& y) {
    if (!x.data && !y.data) return true;
    if (!x.data || !y.data) return false;
    return std::memcmp(x.data, y.data, static_cast<size_t>(value_bytes(x.shape, x.dtype))) == 0;
  };
  for (size_t ni = 0; ni < g_.nodes.size(); ++ni) {
    if (!errors[0][ni] || !errors[1][ni] || !errors[2][ni]) continue;
    bool fixed_inputs = true;
    for (const std::string& in : g_.nodes[ni].inputs) {
      auto a = vals[0].find(in), b = vals[1].find(in), c = vals[2].find(in);
      if (a == vals[0].end()) continue;  // a fixed value
      fixed_inputs = fixed_inputs && a->second.known && b->second.known && c->second.known &&
                     a->second.shape == b->second.shape && b->second.shape == c->second.shape &&
                     same_values(a->second, b->second) && same_values(b->second, c->second);
    }
    if (fixed_inputs) std::rethrow_exception(errors[0][ni]);
  }
  std::vector<std::array<int64_t, 3>> pr(names.size());
  for (int p = 0; p < 3; ++p) {
    const auto d = probe_dims(p);
    for (size_t j = 0; j < names.size(); ++j) pr[j][static_cast<size_t>(p)] = d.at(names[j]);
  }
  auto fit = [&](const std::array<int64_t, 3>& v) -> std::string {
    if (v[0] == v[1] && v[1] == v[2]) return std::to_string(v[0]);
    if (v[0] > 0) {  // c * product of names
      int64_t c = v[0];
      std::vector<int> e(names.size(), 0);
      for (size_t j = 0; j < names.size(); ++j)
        while (c % pr[j][0] == 0) c /= pr[j][0], ++e[j];
      bool ok = true;
      for (int p = 1; p < 3 && ok; ++p) {
        long double x = static_cast<long double>(c);
        for (size_t j = 0; j < names.size(); ++j)
          for (int k = 0; k < e[j]; ++k) x *= static_cast<long double>(pr[j][static_cast<size_t>(p)]);
        ok = x == static_cast<long double>(v[static_cast<size_t>(p)]);
      }
      if (ok) {
        std::string s = c == 1 ? "" : std::to_string(c);
        for (size_t j = 0; j < names.size(); ++j)
          for (int k = 0; k < e[j]; ++k) s += (s.empty() ? "" : "*") + names[j];
        return s;
      }
    }
    for (size_t j = 0; j < names.size(); ++j) {  // a * name + b
      const int64_t dp = pr[j][1] - pr[j][0];
      if ((v[1] - v[0]) % dp != 0) continue;
      const int64_t a = (v[1] - v[0]) / dp, b = v[0] - a * pr[j][0];
      if (a == 0 || a * pr[j][2] + b != v[2]) continue;
      std::string s = (a == 1 ? "" : a == -1 ? "-" : std::to_string(a) + "*") + names[j];
      if (b) s += (b > 0 ? "+" : "-") + std::to_string(b > 0 ? b : -b);
      return s;
    }
    return "";
  };
  sym_.clear();
  for (const graph2::Node& n : g_.nodes)
    for (const std::string& o : n.outputs) {
      const DryVal& a = vals[0].at(o);
      const DryVal& b = vals[1].at(o);
      const DryVal& c = vals[2].at(o);
      SymValue s;
      s.dtype = a.dtype;
      s.rank_known = a.known && b.known && c.known && a.shape.ndim == b.shape.ndim && b.shape.ndim == c.shape.ndim;
      if (s.rank_known)
        for (int k = 0; k < a.shape.ndim; ++k) {
          std::string t = fit({a.shape.d[k], b.shape.d[k], c.shape.d[k]});
          s.dims.push_back(t.empty() ? o + "[" + std::to_string(k) + "]" : t);
        }
      sym_[o] = s;
    }
}

std::shared_ptr<const ArrayGraphRun::MemoryPlan> ArrayGraphRun::memory_plan(const std::map<std::string, int64_t>& dims,
                                                                            Backend& eval, ExecContext& ctx) const {
  {
    std::lock_guard<std::mutex> lk(stats_mu_);
    auto it = plans_.find(dims);
    if (it != plans_.end()) return it->second;
  }
  std::string known_dims;
  for (const graph2::IoSpec& s : g_.inputs)
    for (const graph2::Dim& d : s.shape)
      if (!d.known() && known_dims.find("'" + d.sym + "'") == std::string::npos)
        known_dims += (known_dims.empty() ? "'" : ", '") + d.sym + "'";
  for (const graph2::IoSpec& s : g_.inputs)
    for (const graph2::Dim& d : s.shape)
      if (!d.known() && !dims.count(d.sym))
        throw_invalid_config("dims['" + d.sym + "']", "missing: a plan needs every dim of the inputs (" +
                                                          known_dims + ")");
  for (const auto& [k, v] : dims) {
    if (known_dims.find("'" + k + "'") == std::string::npos)
      throw_invalid_config("dims['" + k + "']", "not a dim of the graph's inputs (" +
                                                    (known_dims.empty() ? std::string("none") : known_dims) + ")");
    if (v < 0) throw_invalid_config("dims['" + k + "']", "a size is >= 0, got " + std::to_string(v));
  }
  std::unordered_map<std::string, DryVal> vals;
  std::vector<std::exception_ptr> errors;
  dry_run(dims, false, eval, ctx, &vals, &errors, FreshSize());

  auto p = std::make_shared<MemoryPlan>();
  p->dims = dims;
  std::unordered_map<std::string, size_t> index;
  for (size_t ni = 0; ni < g_.nodes.size(); ++ni) {
    const graph2::Node& n = g_.nodes[ni];
    p->first_value.push_back(p->values.size());
    for (const std::string& o : n.outputs) {
      PlanValue v;
      v.name = o;
      v.node = n.name;
      v.first = static_cast<int>(ni);
      v.last = lifetime_last_[p->values.size()];
      const DryVal& d = vals.at(o);
      v.dtype = d.dtype;
      v.known = d.known;
      v.shape = d.shape;
      if (is_view(n)) {
        auto r = index.find(n.inputs[0]);
        if (r != index.end()) {
          const PlanValue& src = p->values[r->second];
          v.buffer = src.buffer.empty() ? src.name : src.buffer;
        }
      } else {
        v.bytes = d.known ? value_bytes(d.shape, d.dtype) : 0;
        if (!d.known) p->unknown.push_back(o);
      }
      index[o] = p->values.size();
      p->values.push_back(v);
    }
  }
  // Offsets: largest first, each at the lowest 64-byte boundary where it overlaps no placed value
  // alive at any node it is alive at (lifetimes [first, last], ends included: a node's outputs never
  // share bytes with its inputs).
  std::vector<size_t> order;
  for (size_t i = 0; i < p->values.size(); ++i) {
    const PlanValue& v = p->values[i];
    if (v.buffer.empty() && v.known && !is_view(g_.nodes[static_cast<size_t>(v.first)])) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return p->values[a].bytes > p->values[b].bytes; });
  auto span = [](int64_t b) { return (b + 63) / 64 * 64; };
  std::vector<size_t> placed;
  for (size_t i : order) {
    PlanValue& v = p->values[i];
    p->sum_bytes = add_bytes(p->sum_bytes, v.bytes);
    if (p->largest < 0 || v.bytes > p->values[static_cast<size_t>(p->largest)].bytes)
      p->largest = static_cast<int64_t>(i);
    if (v.bytes >= kMaxPlanned) {
      p->peak_bytes = INT64_MAX;
      continue;
    }
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (size_t j : placed) {
      const PlanValue& u = p->values[j];
      if (u.first <= v.last && v.first <= u.last) busy.push_back({u.offset, u.offset + span(u.bytes)});
    }
    std::sort(busy.begin(), busy.end());
    int64_t off = 0;
    for (const auto& [b, e] : busy) {
      if (off + span(v.bytes) <= b) break;
      off = std::max(off, e);
    }
    v.offset = off;
    placed.push_back(i);
    p->peak_bytes = add_bytes(0, std::max(p->peak_bytes, off + span(v.bytes)));
  }
  for (size_t i : placed) {
    const PlanValue& v = p->values[i];
    for (size_t j : placed) {
      const PlanValue& u = p->values[j];
      if (u.last < v.first && u.offset < v.offset + span(v.bytes) && v.offset < u.offset + span(u.bytes)) {
        ++p->reused;
        break;
      }
    }
  }
  std::vector<int64_t> delta(g_.nodes.size() + 2, 0);
  for (size_t i : placed) {
    delta[static_cast<size_t>(p->values[i].first)] += span(p->values[i].bytes);
    delta[static_cast<size_t>(p->values[i].last) + 1] -= span(p->values[i].bytes);
  }
  for (int64_t k = 0, live = 0; k < static_cast<int64_t>(delta.size()); ++k)
    p->live_max_bytes = std::max(p->live_max_bytes, live += delta[static_cast<size_t>(k)]);
  verify_plan(*p);
  std::lock_guard<std::mutex> lk(stats_mu_);
  if (plans_.size() >= 16) plans_.erase(plans_.begin());
  plans_[dims] = p;
  return p;
}

void ArrayGraphRun::verify_plan(const MemoryPlan& p) const {
  // Independent of how the lifetimes were computed: every node's inputs are read here, and each
  // must still own its bytes when it is read.
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < p.values.size(); ++i) index[p.values[i].name] = i;
  auto owner = [&](const std::string& name) -> const PlanValue* {
    auto it = index.find(name);
    if (it == index.end()) return nullptr;
    const PlanValue* v = &p.values[it->second];
    if (!v->buffer.empty()) v = &p.values[index.at(v->buffer)];
    return v->offset >= 0 ? v : nullptr;
  };
  auto fail = [](const std::string& what) { throw std::logic_error("memory plan: " + what); };
  for (size_t ni = 0; ni < g_.nodes.size(); ++ni)
    for (const std::string& in : g_.nodes[ni].inputs)
      if (const PlanValue* v = owner(in))
        if (static_cast<int>(ni) < v->first || static_cast<int>(ni) > v->last)
          fail("node '" + g_.nodes[ni].name + "' reads '" + in + "' outside the lifetime of its bytes [" +
               std::to_string(v->first) + ", " + std::to_string(v->last) + "]");
  for (const graph2::IoSpec& o : g_.outputs)
    if (const PlanValue* v = owner(o.name))
      if (v->last != static_cast<int>(g_.nodes.size())) fail("output '" + o.name + "' is not kept to the end");
  std::vector<const PlanValue*> placed;
  for (const PlanValue& v : p.values)
    if (v.offset >= 0) placed.push_back(&v);
  std::sort(placed.begin(), placed.end(), [](const PlanValue* a, const PlanValue* b) { return a->offset < b->offset; });
  for (size_t i = 0; i < placed.size(); ++i)
    for (size_t j = i + 1; j < placed.size() && placed[j]->offset < placed[i]->offset + placed[i]->bytes; ++j)
      if (placed[i]->first <= placed[j]->last && placed[j]->first <= placed[i]->last)
        fail("'" + placed[i]->name + "' and '" + placed[j]->name + "' share bytes while both alive");
}

std::string ArrayGraphRun::MemoryPlan::json() const {
  std::string s = "{\"dims\": {";
  bool first = true;
  for (const auto& [k, v] : dims) {
    s += (first ? "" : ", ") + json_text(k) + ": " + std::to_string(v);
    first = false;
  }
  s += "}, \"peak_bytes\": " + std::to_string(peak_bytes) + ", \"complete\": " + (unknown.empty() ? "true" : "false") +
       ", \"sum_bytes\": " + std::to_string(sum_bytes) + ", \"live_max_bytes\": " + std::to_string(live_max_bytes) +
       ", \"reused\": " + std::to_string(reused) + ", \"unknown\": [";
  for (size_t i = 0; i < unknown.size(); ++i) s += (i ? ", " : "") + json_text(unknown[i]);
  s += "], \"values\": [";
  for (size_t i = 0; i < values.size(); ++i) {
    const PlanValue& v = values[i];
    s += std::string(i ? ", " : "") + "{\"name\": " + json_text(v.name) + ", \"node\": " + json_text(v.node) +
         ", \"dtype\": " + json_text(dtype_info(v.dtype).encoding) + ", \"shape\": " + (v.known ? json_shape(v.shape) : "null") +
         ", \"bytes\": " + (v.known || !v.buffer.empty() ? std::to_string(v.bytes) : "null") +
         ", \"offset\": " + (v.offset >= 0 ? std::to_string(v.offset) : "null") + ", \"first\": " +
         std::to_string(v.first) + ", \"last\": " + std::to_string(v.last) + ", \"view_of\": " +
         (v.buffer.empty() ? "null" : json_text(v.buffer)) + "}";
  }
  return s + "]}";
}

}  // namespace cyb
