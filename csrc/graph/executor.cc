#include "graph/executor.h"

#include <algorithm>
#include <cstring>

#include "core/errors.h"

namespace cyb {
namespace graph {

namespace {

Shape concrete(const SymShape& s, int64_t T, int64_t R, int64_t C) {
  Shape r;
  r.ndim = static_cast<int>(s.size());
  for (size_t i = 0; i < s.size() && i < 4; ++i) r.d[i] = s[i].eval(T, R, C);
  return r;
}

}  // namespace

Executor::Executor(Graph g, FusionReport report, const WeightFn& weight, const RopeFn& rope)
    : g_(std::move(g)), report_(std::move(report)), rope_fn_(rope) {
  const size_t V = g_.values.size(), N = g_.nodes.size();
  weights_.resize(V);
  for (size_t v = 0; v < V; ++v)
    if (g_.values[v].kind == ValueKind::Weight) weights_[v] = weight(g_.values[v]);

  // RoPE tables: one per distinct spec, built when a conversation needs them (new_state).
  max_pos_ = 0;
  std::vector<RopeCache::Spec> specs;
  for (const RopeSpec& r : g_.ropes) {
    max_pos_ = max_pos_ == 0 ? r.max_pos : std::min(max_pos_, r.max_pos);
    specs.push_back({r.rot_dims, r.theta, r.scaling, r.neox});
  }
  if (max_pos_ == 0) max_pos_ = int64_t(1) << 24;
  rope_.init(std::move(specs), max_pos_,
             [this](size_t i, int64_t n, std::vector<float>& cos, std::vector<float>& sin) {
               RopeSpec r = g_.ropes[i];
               r.max_pos = n;
               rope_fn_(r, cos, sin);
             });

  ops_.resize(N);
  for (size_t i = 0; i < N; ++i) {
    const Node& n = g_.nodes[i];
    ops_[i] = Op{n.kind, n.attrs, n.name.c_str()};  // a.rope: the current table, set per forward
  }

  // Lifetimes: views share their source's memory (root); a root is recycled
  // after the last node reading it or any of its views. Graph outputs live on.
  root_.resize(V);
  for (size_t v = 0; v < V; ++v) root_[v] = static_cast<int>(v);
  std::vector<int> last(V, -1);
  for (size_t i = 0; i < N; ++i) {
    const Node& n = g_.nodes[i];
    if (n.kind == OpKind::Reshape || n.kind == OpKind::LastRows)
      root_[static_cast<size_t>(n.outputs[0])] = root_[static_cast<size_t>(n.inputs[0])];
    for (int in : n.inputs) last[static_cast<size_t>(root_[static_cast<size_t>(in)])] = static_cast<int>(i);
    for (int o : n.outputs) {
      const size_t r = static_cast<size_t>(root_[static_cast<size_t>(o)]);
      last[r] = std::max(last[r], static_cast<int>(i));  // unused outputs die where they are born
    }
  }
  for (int o : g_.outputs) last[static_cast<size_t>(root_[static_cast<size_t>(o)])] = static_cast<int>(N);
  free_after_.resize(N);
  for (size_t v = 0; v < V; ++v)
    if (g_.values[v].kind == ValueKind::Node && root_[v] == static_cast<int>(v) && last[v] >= 0 &&
        last[v] < static_cast<int>(N))
      free_after_[static_cast<size_t>(last[v])].push_back(static_cast<int>(v));

  state_slot_.assign(V, -1);
  for (size_t v = 0; v < V; ++v)
    if (g_.values[v].kind == ValueKind::State) {
      state_slot_[v] = static_cast<int>(state_ids_.size());
      state_ids_.push_back(static_cast<int>(v));
    }
  const Value& out = g_.values[static_cast<size_t>(g_.outputs[0])];
  vocab_ = out.shape[1].c;
}

int64_t Executor::rope_growth_bytes(int64_t positions) const { return rope_.growth_bytes(positions); }

int64_t Executor::state_bytes(int64_t max_context, DType cache_dtype) const {
  int64_t bytes = 0;
  for (int id : state_ids_) {
    const Shape s = concrete(g_.values[static_cast<size_t>(id)].shape, 1, 1, max_context);
    bytes += static_cast<int64_t>(row_bytes(cache_dtype, s.cols()) * static_cast<size_t>(s.rows()));
  }
  return bytes;
}

std::unique_ptr<ExecState> Executor::new_state(Backend& b, int64_t max_context, DType cache_dtype) const {
  rope_.ensure(max_context);
  auto st = std::make_unique<ExecState>();
  st->owner = &b;
  for (int id : state_ids_)
    st->states.push_back(b.alloc(concrete(g_.values[static_cast<size_t>(id)].shape, 1, 1, max_context), cache_dtype));
  st->vals.resize(g_.values.size());
  return st;
}

void Executor::forward(ExecState& st, ExecContext& ctx, Dispatcher& d, const int32_t* ids, int64_t T,
                       int64_t pos0, int64_t max_context, bool all_logits, float* logits,
                       NodeObserver* obs) const {
  Backend& be = *d.chain().front();
  be.begin_forward(ctx);
  const int64_t R = all_logits ? T : 1, C = max_context;
  st.free.clear();
  std::vector<Tensor>& vals = st.vals;
  vals.assign(g_.values.size(), Tensor{});
  st.pos_scalar = static_cast<int32_t>(pos0);
  st.rows_scalar = static_cast<int32_t>(R);
  auto scalar = [](int32_t* p) {
    Tensor t;
    t.dtype = DType::I32;
    t.shape = Shape{1};
    t.data = p;
    return t;
  };
  {
    Tensor t;
    t.dtype = DType::I32;
    t.shape = Shape{T};
    t.data = const_cast<int32_t*>(ids);
    vals[static_cast<size_t>(g_.ids)] = t;
  }
  vals[static_cast<size_t>(g_.positions)] = scalar(&st.pos_scalar);
  if (g_.rows >= 0) vals[static_cast<size_t>(g_.rows)] = scalar(&st.rows_scalar);
  for (size_t v = 0; v < g_.values.size(); ++v) {
    if (g_.values[v].kind == ValueKind::Weight) vals[v] = weights_[v];
    else if (state_slot_[v] >= 0) vals[v] = st.states[static_cast<size_t>(state_slot_[v])];
  }
  if (obs) obs->begin(pos0, T);

  auto alloc = [&](const Shape& s) {
    const int64_t n = s.numel();
    for (size_t k = 0; k < st.free.size(); ++k) {
      if (st.free[k].shape.numel() == n) {
        Tensor t = st.free[k];
        st.free[k] = st.free.back();
        st.free.pop_back();
        t.shape = s;
        return t;
      }
    }
    return be.alloc_frame(ctx, s);
  };

  Tensor all[8], in[8], out[4];
  char in_state[8] = {0}, out_state[4] = {0};  // no allocation in a steady decode
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    const Node& n = g_.nodes[i];
    const bool takes_pos = n.kind == OpKind::Rope || n.kind == OpKind::Attention || n.kind == OpKind::KvWrite;
    int na = 0, ni = 0;
    for (int id : n.inputs) {
      const Value& v = g_.values[static_cast<size_t>(id)];
      in_state[na] = v.kind == ValueKind::State;
      all[na++] = vals[static_cast<size_t>(id)];
      if (!(takes_pos && v.kind == ValueKind::Positions)) in[ni++] = vals[static_cast<size_t>(id)];
    }
    int no = 0;
    for (int k = 0; k < 4; ++k) out_state[k] = 0;
    if (n.kind == OpKind::Reshape) {
      Tensor t = in[0];
      t.shape = concrete(g_.values[static_cast<size_t>(n.outputs[0])].shape, T, R, C);
      if (t.shape.numel() != in[0].shape.numel())
        throw_shape_mismatch(n.name, in[0].shape.vec(), t.shape.vec());
      out[no++] = t;
    } else if (n.kind == OpKind::LastRows) {
      const int64_t rows = in[0].shape.d[0];
      const int64_t want = std::min<int64_t>(R, rows);
      out[no++] = in[0].rows(rows - want, want);
    } else {
      for (int id : n.outputs) {
        const Value& v = g_.values[static_cast<size_t>(id)];
        out_state[no] = v.kind == ValueKind::State;
        out[no++] = v.kind == ValueKind::State ? vals[static_cast<size_t>(id)]
                                               : alloc(concrete(v.shape, T, R, C));
      }
      Op op = ops_[i];
      op.a.pos0 = pos0;
      if (n.rope >= 0) op.a.rope = rope_.table(static_cast<size_t>(n.rope));
      d.run(op, in, ni, out, no, ctx);
    }
    for (int k = 0; k < no; ++k) vals[static_cast<size_t>(n.outputs[static_cast<size_t>(k)])] = out[k];
    if (obs) obs->on_node(n, all, na, out, no, in_state, out_state, pos0 + T);
    for (int r : free_after_[i]) st.free.push_back(vals[static_cast<size_t>(r)]);
  }

  const Tensor& res = vals[static_cast<size_t>(g_.outputs[0])];
  if (res.shape.numel() != R * vocab_) throw_shape_mismatch("graph output", {R, vocab_}, res.shape.vec());
  if (res.device == Device::Host && res.dtype == DType::F32)
    std::memcpy(logits, res.data, static_cast<size_t>(R * vocab_) * sizeof(float));
  else
    be.download_f32(res, logits);
  be.end_forward(ctx);
}

}  // namespace graph
}  // namespace cyb
