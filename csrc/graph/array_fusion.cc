// The fusion pass of version-2 graphs (docs/graph.md, "Fusion of version-2 graphs"): run once at
// load by model/array_graph_model.cc, it rewrites sub-DAGs that ONNX exports write as several
// nodes into one op, where the primary backend's supports() accepts that op. Structural: every
// intermediate is read only inside the pattern (and is no graph output), every constant has the
// value the pattern needs, and every constant of a pattern is f32 (ONNX operands of an
// element-wise node share one dtype, so the pattern's data is f32: what the fused ops take).
// Patterns, in this order:
//   conv -> relu | unary leaky_relu | sigmoid + mul (SiLU)       => conv with attr activation
//   the mean / variance decomposition over the last axis, * w + b => layer_norm
//   reshape [N, G, L] -> instance_norm (scale 1, bias 0) or the decomposition -> reshape
//     [N, C, ..] -> mul w [C, 1..] -> add b [C, 1..]               => group_norm (instance_norm if G = C)
//   x * 0.5 * (1 + erf(x / sqrt 2)) (div or mul by 1/sqrt 2; the 0.5 first or last) => gelu
//   matmul_nd(q^T, k) (* c) -> softmax -> matmul_nd(., v^T) over [B*H, D, T] => encoder_attention
//     of one head (see attention() below)
//   the same over [B, H, T, D] (q, k scaled), with where(mask, 0, -inf) added and the isnan guard
//     => attention_nd (see attention_heads() below)
//   matmul (a weight, no bias) read only by an add of an f32 constant of its output size N => the
//     matmul with that bias (see matmul_bias() below)
//   a tree of element-wise f32 nodes (add / sub / mul / div, leaky_relu) holding an f32 constant
//     => elementwise (see elementwise() below)
// Each rewrite keeps the pattern's last output name; the fused node sits where the pattern's last
// node was, so every reader of that output still comes after it.
#include <algorithm>
#include <cmath>
#include <map>

#include "dispatch/op_schema.h"
#include "graph/array_graph.h"

namespace cyb {
namespace graph2 {

namespace {

constexpr const char* kPatterns[] = {"conv_activation", "layer_norm", "group_norm", "instance_norm", "gelu",
                                     "attention", "attention_heads", "matmul_bias", "elementwise"};

class Fuser {
 public:
  Fuser(Graph& g, const Backend& b, const ConstantFn& c) : g_(g), backend_(b), constant_(c) {
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      for (const std::string& in : g_.nodes[i].inputs) ++reads_[in];
      for (const std::string& o : g_.nodes[i].outputs) producer_[o] = i;
    }
    for (const IoSpec& o : g_.outputs) ++reads_[o.name];  // an output is read by the caller
    dead_.assign(g_.nodes.size(), 0);
    at_.resize(g_.nodes.size());
  }

  graph::FusionReport run() {
    for (size_t i = 0; i < g_.nodes.size(); ++i) conv_activation(i);
    for (size_t i = 0; i < g_.nodes.size(); ++i) layer_norm(i);
    for (size_t i = 0; i < g_.nodes.size(); ++i) group_norm(i);
    for (size_t i = 0; i < g_.nodes.size(); ++i) gelu(i);
    for (size_t i = 0; i < g_.nodes.size(); ++i) attention(i);
    for (size_t i = 0; i < g_.nodes.size(); ++i) attention_heads(i);
    for (size_t i = 0; i < g_.nodes.size(); ++i) matmul_bias(i);
    for (size_t i = 0; i < g_.nodes.size(); ++i) elementwise(i);
    for (const auto& [pattern, nodes] : rejected_)
      rep_.not_fused.push_back({pattern, std::string("backend '") + backend_.name() + "' does not support it (" +
                                             std::to_string(nodes) + " matches left as they are)"});
    std::vector<Node> out;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (!dead_[i]) out.push_back(std::move(g_.nodes[i]));
      for (Node& f : at_[i]) out.push_back(std::move(f));
    }
    g_.nodes = std::move(out);
    return rep_;
  }

 private:
  // ---- structure
  // The live producer of value `v` (-1: an input, initializer, constant or a fused-away node).
  int prod(const std::string& v) const {
    auto it = producer_.find(v);
    return it == producer_.end() || dead_[it->second] ? -1 : static_cast<int>(it->second);
  }
  const Node* node_of(const std::string& v) const {
    const int i = prod(v);
    return i < 0 ? nullptr : &g_.nodes[static_cast<size_t>(i)];
  }
  int reads(const std::string& v) const {
    auto it = reads_.find(v);
    return it == reads_.end() ? 0 : it->second;
  }
  // The live node reading `v` once, when `v` has exactly one reader (and is no graph output).
  const Node* sole_reader(const std::string& v) const {
    if (reads(v) != 1) return nullptr;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (dead_[i]) continue;
      for (const std::string& in : g_.nodes[i].inputs)
        if (in == v) return &g_.nodes[i];
    }
    return nullptr;
  }
  std::vector<const Node*> readers(const std::string& v) const {
    std::vector<const Node*> r;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (dead_[i]) continue;
      if (std::find(g_.nodes[i].inputs.begin(), g_.nodes[i].inputs.end(), v) != g_.nodes[i].inputs.end())
        r.push_back(&g_.nodes[i]);
    }
    return r;
  }
  size_t index(const Node* n) const { return static_cast<size_t>(n - g_.nodes.data()); }
  static bool is_bin(const Node& n, int fn) { return n.kind == OpKind::Binary && n.op.a.fn == fn; }
  static bool is_mul(const Node& n) { return n.kind == OpKind::Mul || is_bin(n, kBMul); }
  static bool is_add(const Node& n) { return n.kind == OpKind::Add || is_bin(n, kBAdd); }
  // The operand of a two-input node other than `v` ("" when neither or both are `v`).
  static std::string other(const Node& n, const std::string& v) {
    if (n.inputs.size() != 2 || n.inputs[0] == n.inputs[1]) return "";
    if (n.inputs[0] == v) return n.inputs[1];
    if (n.inputs[1] == v) return n.inputs[0];
    return "";
  }

  // ---- constants
  bool f32_const(const std::string& name, ConstantData* c) const {
    return !name.empty() && constant_(name, c) && c->dtype == DType::F32;
  }
  // A f32 constant of one element and rank 0 or 1 (a higher rank would broadcast x's rank up,
  // which the fused op does not): its value.
  bool scalar(const std::string& name, double* v) const {
    ConstantData c;
    if (!f32_const(name, &c) || c.values.size() != 1 || c.shape.size() > 1) return false;
    *v = c.values[0];
    return true;
  }
  bool scalar_is(const std::string& name, double want, double tol = 0.0) const {
    double v = 0.0;
    return scalar(name, &v) && std::fabs(v - want) <= tol;
  }
  bool all_equal(const std::string& name, double want) const {
    ConstantData c;
    if (!f32_const(name, &c) || c.values.empty()) return false;
    for (double v : c.values)
      if (v != want) return false;
    return true;
  }

  // ---- rewriting
  bool accepts(const Node& f) const {
    std::vector<Tensor> dummy(f.inputs.size());
    for (Tensor& t : dummy) t.dtype = DType::F32;
    try {  // supports() is a capability question; a backend that cannot answer it without shapes declines
      return backend_.supports(f.op, dummy.data(), static_cast<int>(dummy.size()));
    } catch (const Error&) {
      return false;
    }
  }
  // Replaces `nodes` (the pattern, its last output `fused.back().outputs`) by `fused`, placed where
  // the last of them was. False (and counted as rejected) when the backend declines a fused op.
  bool replace(const char* pattern, const std::vector<const Node*>& nodes, std::vector<Node> fused,
               const std::string& report_name = "") {
    for (Node& f : fused) f.op.kind = f.kind;
    for (const Node& f : fused)
      if (f.kind != OpKind::Reshape && !accepts(f)) {
        ++rejected_[pattern];
        return false;
      }
    size_t last = 0;
    graph::FusionEntry e{pattern, report_name.empty() ? fused.back().name : report_name, {}};
    for (const Node* n : nodes) {
      last = std::max(last, index(n));
      e.replaced.push_back(n->name);
    }
    for (const Node* n : nodes) dead_[index(n)] = 1;
    for (Node& f : fused) at_[last].push_back(std::move(f));
    rep_.fused.push_back(std::move(e));
    return true;
  }

  // conv (no activation yet) whose output is read only by relu / leaky_relu / silu (the importer's
  // form of x * sigmoid(x)), or by sigmoid s and mul(conv, s) with s read only by that mul.
  void conv_activation(size_t i) {
    const Node& c = g_.nodes[i];
    if (dead_[i] || c.kind != OpKind::Conv || c.op.a.activation != kActNone) return;
    const std::string& y = c.outputs[0];
    Node f = c;
    std::vector<const Node*> nodes{&c};
    if (const Node* r = sole_reader(y)) {
      if (r->kind == OpKind::Relu) {
        f.op.a.activation = kActRelu;
      } else if (r->kind == OpKind::Silu) {
        f.op.a.activation = kActSilu;
      } else if (r->kind == OpKind::Unary && r->op.a.fn == kULeakyRelu) {
        f.op.a.activation = kActLeakyRelu;
        f.op.a.alpha = r->op.a.alpha;
      } else {
        return;
      }
      nodes.push_back(r);
    } else {
      const std::vector<const Node*> rs = readers(y);
      if (reads(y) != 2 || rs.size() != 2) return;
      const Node* s = rs[0]->kind == OpKind::Sigmoid ? rs[0] : rs[1];
      const Node* m = s == rs[0] ? rs[1] : rs[0];
      if (s->kind != OpKind::Sigmoid || !is_mul(*m) || other(*m, y) != s->outputs[0] || sole_reader(s->outputs[0]) != m)
        return;
      f.op.a.activation = kActSilu;
      nodes.push_back(s);
      nodes.push_back(m);
    }
    f.outputs = nodes.back()->outputs;
    replace("conv_activation", nodes, {std::move(f)});
  }

  // The normalization core over the last axis, ending at `div`: d = x - reduce_mean(x, [-1]);
  // div = d / sqrt(reduce_mean(d * d | d ^ 2, [-1]) + eps), d read only by the pattern.
  struct Core {
    std::string x;
    float eps = 0.f;
    std::vector<const Node*> nodes;
  };
  static bool mean_last(const Node& n) {
    return n.kind == OpKind::Reduce && n.op.a.fn == kRMean && n.op.a.keepdims && n.op.a.n_ints == 1 &&
           n.op.a.ints[0] == -1;
  }
  bool core(const Node& div, Core* c) const {
    if (!is_bin(div, kBDiv) || div.inputs.size() != 2) return false;
    const std::string& d = div.inputs[0];
    const Node* sq = node_of(div.inputs[1]);
    if (!sq || sq->kind != OpKind::Sqrt || sole_reader(sq->outputs[0]) != &div) return false;
    const Node* ae = node_of(sq->inputs[0]);
    if (!ae || !is_add(*ae) || sole_reader(ae->outputs[0]) != sq) return false;
    const std::string var = node_of(ae->inputs[0]) ? ae->inputs[0] : ae->inputs[1];  // the run-time operand
    double eps = 0.0;
    if (!scalar(other(*ae, var), &eps) || eps < 0) return false;
    const Node* r2 = node_of(var);
    if (!r2 || !mean_last(*r2) || sole_reader(var) != ae) return false;
    const Node* p = node_of(r2->inputs[0]);
    if (!p || sole_reader(p->outputs[0]) != r2) return false;
    const bool square = (is_mul(*p) && p->inputs.size() == 2 && p->inputs[0] == d && p->inputs[1] == d) ||
                        (is_bin(*p, kBPow) && p->inputs[0] == d && scalar_is(p->inputs[1], 2.0));
    if (!square) return false;
    const Node* sub = node_of(d);
    if (!sub || !is_bin(*sub, kBSub) || reads(d) != (p->inputs[1] == d ? 3 : 2)) return false;
    const Node* r1 = node_of(sub->inputs[1]);
    if (!r1 || !mean_last(*r1) || r1->inputs[0] != sub->inputs[0] || sole_reader(r1->outputs[0]) != sub) return false;
    c->x = sub->inputs[0];
    c->eps = static_cast<float>(eps);
    c->nodes = {r1, sub, p, r2, ae, sq, &div};
    return true;
  }

  // The core followed by mul w [D] (read only there) and optionally add b [D] => layer_norm.
  void layer_norm(size_t i) {
    const Node& div = g_.nodes[i];
    Core c;
    if (dead_[i] || !core(div, &c)) return;
    const Node* m = sole_reader(div.outputs[0]);
    if (!m || !is_mul(*m)) return;
    const std::string w = other(*m, div.outputs[0]);
    if (!vector_const(w)) return;
    Node f;
    f.name = m->name;
    f.kind = OpKind::LayerNorm;
    f.inputs = {c.x, w};
    f.op.a.eps = c.eps;
    c.nodes.push_back(m);
    const Node* a = sole_reader(m->outputs[0]);
    if (a && is_add(*a) && vector_const(other(*a, m->outputs[0])) &&
        const_shape(other(*a, m->outputs[0])) == const_shape(w)) {
      f.inputs.push_back(other(*a, m->outputs[0]));
      f.name = a->name;
      c.nodes.push_back(a);
    }
    f.outputs = c.nodes.back()->outputs;
    replace("layer_norm", c.nodes, {std::move(f)});
  }
  std::vector<int64_t> const_shape(const std::string& name) const {
    ConstantData c;
    return f32_const(name, &c) ? c.shape : std::vector<int64_t>{};
  }
  // A f32 constant of rank 1 and more than one element (a per-feature weight of the last axis: a
  // single element would broadcast where layer_norm's weight must match the axis).
  bool vector_const(const std::string& name) const {
    ConstantData c;
    return f32_const(name, &c) && c.shape.size() == 1 && c.shape[0] > 1;
  }

  // reshape [0, G, L] -> (instance_norm scale 1 bias 0 | the core) -> reshape [0, C, s..] ->
  // mul w -> add b (w, b [C, 1..] or [1, C, 1..]) => reshape x [0, C, s..] (a view) + group_norm.
  void group_norm(size_t i) {
    const Node& r1 = g_.nodes[i];
    if (dead_[i] || r1.kind != OpKind::Reshape || r1.reshape.size() != 3 || r1.reshape[0] < 0 || r1.reshape[1] < 1)
      return;
    const int64_t G = r1.reshape[1];
    std::vector<const Node*> nodes{&r1};
    const std::vector<const Node*> rs = readers(r1.outputs[0]);
    if (rs.empty()) return;
    const Node* n = rs[0];
    float eps = 0.f;
    std::string normed;
    if (rs.size() == 1 && reads(r1.outputs[0]) == 1 && n->kind == OpKind::InstanceNorm &&
        n->inputs[0] == r1.outputs[0]) {
      ConstantData sc;
      if (!all_equal(n->inputs[1], 1.0) || !all_equal(n->inputs[2], 0.0) || !f32_const(n->inputs[1], &sc) ||
          static_cast<int64_t>(sc.values.size()) != G)
        return;
      eps = n->op.a.eps;
      normed = n->outputs[0];
      nodes.push_back(n);
    } else if (rs.size() == 2) {
      // the core: find its div through the sub (core() checks the rest)
      const Node* sub = nullptr;
      for (const Node* r : rs) sub = is_bin(*r, kBSub) ? r : sub;
      if (!sub) return;
      const Node* div = nullptr;
      for (const Node* r : readers(sub->outputs[0])) div = is_bin(*r, kBDiv) ? r : div;
      Core c;
      if (!div || !core(*div, &c) || c.x != r1.outputs[0] || reads(r1.outputs[0]) != 2) return;
      eps = c.eps;
      normed = div->outputs[0];
      nodes.insert(nodes.end(), c.nodes.begin(), c.nodes.end());
    } else {
      return;
    }
    const Node* r2 = sole_reader(normed);
    // the same batch dim both ways (0 = x's, or one size), so the groups are runs of C / G channels
    if (!r2 || r2->kind != OpKind::Reshape || r2->reshape.size() < 3 || r2->reshape[0] != r1.reshape[0]) return;
    for (size_t k = 1; k < r2->reshape.size(); ++k)
      if (r2->reshape[k] < 1) return;
    const int64_t C = r2->reshape[1];
    if (C % G != 0) return;
    const Node* m = sole_reader(r2->outputs[0]);
    if (!m || !is_mul(*m)) return;
    const std::string w = other(*m, r2->outputs[0]);
    const Node* a = sole_reader(m->outputs[0]);
    if (!a || !is_add(*a)) return;
    const std::string b = other(*a, m->outputs[0]);
    const size_t rank = r2->reshape.size();
    if (!channel_const(w, C, rank) || !channel_const(b, C, rank)) return;
    nodes.insert(nodes.end(), {r2, m, a});
    Node view;
    view.name = a->name + ".view";
    view.kind = OpKind::Reshape;
    view.reshape = r2->reshape;
    view.inputs = {r1.inputs[0]};
    view.outputs = {a->name + ".view"};
    Node f;
    f.name = a->name;
    f.kind = G == C ? OpKind::InstanceNorm : OpKind::GroupNorm;
    f.op.a.eps = eps;
    f.op.a.group = static_cast<int>(G);
    f.inputs = {view.outputs[0], w, b};
    f.outputs = a->outputs;
    if (producer_.count(view.outputs[0]) || reads(view.outputs[0])) return;  // the name is taken
    replace(G == C ? "instance_norm" : "group_norm", nodes, {std::move(view), std::move(f)});
  }
  // A f32 constant of C values broadcasting per channel against [N, C, s..] of `rank` dims.
  bool channel_const(const std::string& name, int64_t C, size_t rank) const {
    ConstantData c;
    if (!f32_const(name, &c) || static_cast<int64_t>(c.values.size()) != C) return false;
    std::vector<int64_t> s = c.shape;
    if (s.size() == rank) {
      if (s[0] != 1) return false;
      s.erase(s.begin());
    }
    if (s.size() != rank - 1 || s[0] != C) return false;
    for (size_t k = 1; k < s.size(); ++k)
      if (s[k] != 1) return false;
    return true;
  }

  // erf(x / sqrt 2 | x * (1 / sqrt 2)) + 1, times x then 0.5, or times (x * 0.5) => gelu(x).
  void gelu(size_t i) {
    const Node& e = g_.nodes[i];
    if (dead_[i] || e.kind != OpKind::Unary || e.op.a.fn != kUErf) return;
    const Node* d = node_of(e.inputs[0]);
    if (!d || sole_reader(d->outputs[0]) != &e || d->inputs.size() != 2) return;
    const double r2 = std::sqrt(2.0), tol = 1e-6;
    std::string x;
    if (is_bin(*d, kBDiv) && scalar_is(d->inputs[1], r2, tol)) x = d->inputs[0];
    else if (is_mul(*d) && scalar_is(d->inputs[1], 1 / r2, tol)) x = d->inputs[0];
    else if (is_mul(*d) && scalar_is(d->inputs[0], 1 / r2, tol)) x = d->inputs[1];
    if (x.empty()) return;
    const Node* a = sole_reader(e.outputs[0]);
    if (!a || !is_add(*a) || !scalar_is(other(*a, e.outputs[0]), 1.0)) return;
    const Node* m = sole_reader(a->outputs[0]);
    if (!m || !is_mul(*m)) return;
    const std::string p = other(*m, a->outputs[0]);
    std::vector<const Node*> nodes{d, &e, a};
    const Node* last = m;
    if (p == x) {  // (x * (1 + erf)) * 0.5
      const Node* h = sole_reader(m->outputs[0]);
      if (!h || !is_mul(*h) || !scalar_is(other(*h, m->outputs[0]), 0.5)) return;
      nodes.insert(nodes.end(), {m, h});
      last = h;
    } else {  // (x * 0.5) * (1 + erf)
      const Node* h = node_of(p);
      if (!h || !is_mul(*h) || sole_reader(p) != m || !scalar_is(other(*h, x), 0.5)) return;
      nodes.insert(nodes.end(), {h, m});
    }
    Node f;
    f.name = last->name;
    f.kind = OpKind::Gelu;
    f.inputs = {x};
    f.outputs = last->outputs;
    replace("gelu", nodes, {std::move(f)});
  }

  // Rank-3 attention over heads in the batch dim, as the einsums of the UNet's attention blocks
  // come out: q3, k3, v3 = reshape [.., D, T | S] (D >= 1 known); s = matmul_nd(transpose(q3, [0, 2, 1]), k3),
  // optionally * c or / c (a one-element constant), softmax over the last axis, o = matmul_nd(p,
  // transpose(v3, [0, 2, 1])) => encoder_attention over B' = B*H sequences of one head of D:
  // q = the transpose viewed [B', T, 1, D], k = transpose(k3, [0, 2, 1]) viewed [B', S, 1, D], v likewise,
  // key_mask = ones [B', S] (constant_of_shape of k3's dims 0 and 2), the output viewed [B', T, D].
  const Node* reshape3(const std::string& v, int64_t* D) const {
    const Node* r = node_of(v);
    if (!r || r->kind != OpKind::Reshape || r->reshape.size() != 3 || r->reshape[1] < 1) return nullptr;
    *D = r->reshape[1];
    return r;
  }
  const Node* transpose021(const std::string& v) const {
    const Node* t = node_of(v);
    if (!t || t->kind != OpKind::Transpose || t->op.a.n_ints != 3 || t->op.a.ints[0] != 0 || t->op.a.ints[1] != 2 ||
        t->op.a.ints[2] != 1)
      return nullptr;
    return t;
  }
  void attention(size_t i) {
    const Node& mm2 = g_.nodes[i];
    if (dead_[i] || mm2.kind != OpKind::MatmulNd) return;
    const Node* sm = node_of(mm2.inputs[0]);
    const bool last_axis = sm && (sm->kind == OpKind::Softmax || (sm->kind == OpKind::SoftmaxAxis && sm->op.a.axis == -1));
    if (!last_axis || sole_reader(sm->outputs[0]) != &mm2) return;
    std::vector<const Node*> nodes;
    float scale = 1.f;
    const Node* mm1 = node_of(sm->inputs[0]);
    if (mm1 && (is_mul(*mm1) || is_bin(*mm1, kBDiv)) && sole_reader(mm1->outputs[0]) == sm) {
      const Node* sc = mm1;
      double c = 0.0;
      const bool div = is_bin(*sc, kBDiv);
      std::string s;
      if (sc->inputs.size() == 2 && scalar(sc->inputs[1], &c)) s = sc->inputs[0];
      else if (!div && sc->inputs.size() == 2 && scalar(sc->inputs[0], &c)) s = sc->inputs[1];
      if (s.empty() || (div && c == 0.0)) return;
      scale = static_cast<float>(div ? 1.0 / c : c);
      nodes.push_back(sc);
      mm1 = node_of(s);
    }
    if (!mm1 || mm1->kind != OpKind::MatmulNd || sole_reader(mm1->outputs[0]) != (nodes.empty() ? sm : nodes[0])) return;
    const Node* qt = transpose021(mm1->inputs[0]);
    const Node* vt = transpose021(mm2.inputs[1]);
    int64_t D = 0, Dk = 0, Dv = 0;
    if (!qt || !vt || !reshape3(qt->inputs[0], &D) || !reshape3(mm1->inputs[1], &Dk) || !reshape3(vt->inputs[0], &Dv) ||
        Dk != D || Dv != D || D > (1 << 12))
      return;
    nodes.insert(nodes.begin(), mm1);
    nodes.insert(nodes.end(), {sm, &mm2});
    const std::string p = mm2.name + ".";
    for (const char* s : {"q", "k_t", "k", "v", "rows", "keys", "mask_shape", "mask", "attn", "out"})
      if (producer_.count(p + s) || reads(p + s)) return;  // the names are taken
    auto make = [&](const char* suffix, OpKind k, std::vector<std::string> in) {
      Node n;
      n.name = p + suffix;
      n.kind = k;
      n.inputs = std::move(in);
      n.outputs = {p + suffix};
      return n;
    };
    auto view = [&](const char* suffix, const std::string& x, std::vector<int64_t> shape) {
      Node n = make(suffix, OpKind::Reshape, {x});
      n.reshape = std::move(shape);
      return n;
    };
    std::vector<Node> f;
    f.push_back(view("q", qt->outputs[0], {0, 0, 1, -1}));
    f.push_back(make("k_t", OpKind::Transpose, {mm1->inputs[1]}));
    f.back().op.a.n_ints = 3;
    f.back().op.a.ints[0] = 0;
    f.back().op.a.ints[1] = 2;
    f.back().op.a.ints[2] = 1;
    f.push_back(view("k", p + "k_t", {0, 0, 1, -1}));
    f.push_back(view("v", vt->outputs[0], {0, 0, 1, -1}));
    for (const char* s : {"rows", "keys"}) {  // k3's dims 0 (B') and 2 (S)
      f.push_back(make(s, OpKind::ShapeOf, {mm1->inputs[1]}));
      f.back().op.a.n_ints = 2;
      f.back().op.a.ints[0] = s[0] == 'r' ? 0 : 2;
      f.back().op.a.ints[1] = s[0] == 'r' ? 1 : 3;
    }
    f.push_back(make("mask_shape", OpKind::Concat, {p + "rows", p + "keys"}));
    f.back().op.a.axis = 0;
    f.push_back(make("mask", OpKind::ConstantOfShape, {p + "mask_shape"}));
    f.back().op.a.fill = 1.0;
    f.back().op.a.to = cast_index(DType::F32);
    Node a = make("attn", OpKind::EncoderAttention, {p + "q", p + "k", p + "v", p + "mask"});
    a.name = mm2.name;
    a.op.a.n_heads = a.op.a.n_kv_heads = 1;
    a.op.a.head_dim = static_cast<int>(D);
    a.op.a.scale = scale;
    f.push_back(std::move(a));
    f.push_back(view("out", p + "attn", {0, 0, -1}));
    f.back().outputs = mm2.outputs;
    replace("attention", nodes, std::move(f), mm2.name);
  }

  // ---- attention with heads as a dim ([B, H, T, D], torch's scaled dot-product attention as the
  // TorchScript exporter writes it, BERT / MiniLM):
  //   q' = transpose4(q) (* c1), k' = transpose(k [B, S, H, D], [0, 2, 3, 1]) or
  //   transpose(k [B, H, S, D], [0, 1, 3, 2]) (* c2), s = matmul_nd(q', k') (* c3 | / c3),
  //   optionally s + where(mask, 0, -inf) then where(isnan(softmax), 0, softmax) (the guard makes a
  //   row with no key attended 0, as attention_nd does; -inf and the guard are required together),
  //   softmax (last axis), matmul_nd(p, v) with v from a transpose of 4 entries
  //   => attention_nd(q, k, v, mask?) with scale c1 * c2 * c3 (or / c3).
  // A value times a one-element constant read only by `reader` (either operand), or the value itself.
  std::string unscaled(const std::string& v, const Node* reader, double* c, const Node** mul) const {
    *c = 1.0;
    *mul = nullptr;
    const Node* n = node_of(v);
    if (!n || !is_mul(*n) || n->inputs.size() != 2 || sole_reader(n->outputs[0]) != reader) return v;
    double x = 0.0;
    if (scalar(n->inputs[1], &x)) {
      *c = x;
      *mul = n;
      return n->inputs[0];
    }
    if (scalar(n->inputs[0], &x)) {
      *c = x;
      *mul = n;
      return n->inputs[1];
    }
    return v;
  }
  const Node* transpose4(const std::string& v, std::initializer_list<int64_t> perm = {}) const {
    const Node* t = node_of(v);
    if (!t || t->kind != OpKind::Transpose || t->op.a.n_ints != 4) return nullptr;
    int i = 0;
    for (int64_t p : perm)
      if (t->op.a.ints[i++] != p) return nullptr;
    return t;
  }
  void attention_heads(size_t i) {
    const Node& mm2 = g_.nodes[i];
    if (dead_[i] || mm2.kind != OpKind::MatmulNd || !transpose4(mm2.inputs[1])) return;
    std::vector<const Node*> nodes;
    const Node* p = node_of(mm2.inputs[0]);
    const Node* guard = nullptr;
    const Node* sm = p;
    if (p && p->kind == OpKind::Where) {  // where(isnan(softmax), 0, softmax)
      const Node* nan = node_of(p->inputs[0]);
      sm = node_of(p->inputs[2]);
      if (!nan || nan->kind != OpKind::Unary || nan->op.a.fn != kUIsNan || !sm || nan->inputs[0] != sm->outputs[0] ||
          !scalar_is(p->inputs[1], 0.0) || sole_reader(nan->outputs[0]) != p || sole_reader(p->outputs[0]) != &mm2 ||
          reads(sm->outputs[0]) != 2)
        return;
      guard = p;
      nodes = {nan, guard};
    } else if (!p || sole_reader(p->outputs[0]) != &mm2) {
      return;
    }
    if (!sm || !(sm->kind == OpKind::Softmax || (sm->kind == OpKind::SoftmaxAxis && sm->op.a.axis == -1))) return;
    nodes.insert(nodes.begin(), sm);
    const Node* next = sm;  // the node reading the logits so far
    std::string s = sm->inputs[0], mask;
    if (const Node* a = node_of(s); a && is_add(*a) && a->inputs.size() == 2 && sole_reader(a->outputs[0]) == sm) {
      for (int side = 0; side < 2 && mask.empty(); ++side) {
        const Node* w = node_of(a->inputs[static_cast<size_t>(side)]);
        double fill = 0.0;
        if (w && w->kind == OpKind::Where && sole_reader(w->outputs[0]) == a && scalar_is(w->inputs[1], 0.0) &&
            scalar(w->inputs[2], &fill) && std::isinf(fill) && fill < 0) {
          mask = w->inputs[0];
          s = a->inputs[static_cast<size_t>(1 - side)];
          nodes.insert(nodes.begin(), {w, a});
        }
      }
      if (mask.empty() || !guard) return;  // another addend; or -inf without the guard (NaN rows)
      next = a;
    } else if (guard) {
      return;
    }
    double scale = 1.0;
    if (const Node* sc = node_of(s); sc && (is_mul(*sc) || is_bin(*sc, kBDiv)) && sole_reader(sc->outputs[0]) == next) {
      double c = 0.0;
      const bool div = is_bin(*sc, kBDiv);
      std::string x;
      if (sc->inputs.size() == 2 && scalar(sc->inputs[1], &c)) x = sc->inputs[0];
      else if (!div && sc->inputs.size() == 2 && scalar(sc->inputs[0], &c)) x = sc->inputs[1];
      if (x.empty() || (div && c == 0.0)) return;
      scale = div ? 1.0 / c : c;
      nodes.insert(nodes.begin(), sc);
      next = sc;
      s = x;
    }
    const Node* mm1 = node_of(s);
    if (!mm1 || mm1->kind != OpKind::MatmulNd || sole_reader(mm1->outputs[0]) != next) return;
    double c1 = 1.0, c2 = 1.0;
    const Node *qm = nullptr, *km = nullptr;
    const std::string q = unscaled(mm1->inputs[0], mm1, &c1, &qm);
    const std::string kt = unscaled(mm1->inputs[1], mm1, &c2, &km);
    const Node* kn = transpose4(kt);
    const bool bshd = kn && transpose4(kt, {0, 2, 3, 1}), bhsd = kn && transpose4(kt, {0, 1, 3, 2});
    if (!transpose4(q) || !(bshd || bhsd)) return;
    const std::string pre = mm2.name + ".";
    if (producer_.count(pre + "k") || reads(pre + "k")) return;  // the name is taken
    nodes.insert(nodes.begin(), mm1);
    for (const Node* n : {km, qm})
      if (n) nodes.insert(nodes.begin(), n);
    const bool k_dead = sole_reader(kt) == (km ? km : mm1);  // the k^T transpose, read only here
    if (k_dead) nodes.insert(nodes.begin(), kn);
    nodes.push_back(&mm2);
    std::vector<Node> f;
    std::string k = kn->inputs[0];
    if (bshd) {  // [B, S, H, D] -> [B, H, S, D]
      Node t;
      t.name = pre + "k";
      t.kind = OpKind::Transpose;
      t.inputs = {k};
      t.outputs = {pre + "k"};
      t.op.a.n_ints = 4;
      t.op.a.ints[0] = 0;
      t.op.a.ints[1] = 2;
      t.op.a.ints[2] = 1;
      t.op.a.ints[3] = 3;
      f.push_back(std::move(t));
      k = pre + "k";
    }
    Node a;
    a.name = mm2.name;
    a.kind = OpKind::AttentionNd;
    a.inputs = {q, k, mm2.inputs[1]};
    if (!mask.empty()) a.inputs.push_back(mask);
    a.outputs = mm2.outputs;
    a.op.a.scale = static_cast<float>(scale * c1 * c2);
    f.push_back(std::move(a));
    replace("attention_heads", nodes, std::move(f), mm2.name);
  }

  // ---- matmul_bias
  // add(matmul(x, W), b) or add(b, matmul(x, W)) with W [N, K] and b an f32 constant of shape [N], the
  // matmul's output read only by the add: matmul(x, W, b). The SIMD kernels add b to each finished
  // f32 sum as the add did (the same bits); the scalar reference adds it to its double sum before
  // its one rounding (within op-f32).
  void matmul_bias(size_t i) {
    const Node& a = g_.nodes[i];
    if (dead_[i] || !is_add(a) || a.inputs.size() != 2) return;
    for (size_t side = 0; side < 2; ++side) {
      const Node* m = node_of(a.inputs[side]);
      if (!m || m->kind != OpKind::Matmul || m->inputs.size() != 2 || sole_reader(m->outputs[0]) != &a) continue;
      ConstantData b, w;
      w.want_values = false;  // its shape is enough
      if (!f32_const(a.inputs[1 - side], &b) || b.shape.size() != 1 || !constant_(m->inputs[1], &w) ||
          w.shape.size() != 2 || b.shape[0] != w.shape[0])
        continue;
      Node f = *m;
      f.name = a.name;
      f.inputs.push_back(a.inputs[1 - side]);
      f.outputs = a.outputs;
      replace("matmul_bias", {m, &a}, {std::move(f)});
      return;
    }
  }

  // ---- elementwise
  // A node elementwise's program has a step for: binary (or Add / Mul) add, sub, mul, div of two
  // inputs, unary leaky_relu; its step (ElementwiseStep).
  static int ew_step(const Node& n) {
    if (n.kind == OpKind::Unary && n.op.a.fn == kULeakyRelu && n.inputs.size() == 1) return kEwLeakyRelu;
    if (n.inputs.size() != 2) return 0;
    if (is_add(n)) return kEwAdd;
    if (is_mul(n)) return kEwMul;
    if (is_bin(n, kBSub)) return kEwSub;
    if (is_bin(n, kBDiv)) return kEwDiv;
    return 0;
  }
  struct EwTree {
    std::vector<int64_t> prog;
    std::vector<std::string> leaves;
    std::vector<const Node*> nodes;
    float alpha = 0.f;
    bool has_alpha = false;
  };
  // Appends node n's program to t: each input produced by an element-wise node that only n reads (and
  // whose leaky_relu, if any, has t's slope) as that node's program, any other input as a leaf (one
  // input of the fused op per distinct value). An input whose program would pass the op's limits
  // (16 steps, kElementwiseMaxInputs inputs) as far as its parent sees stays a leaf; a tree still
  // over them is left unfused (elementwise()).
  void ew_collect(const Node& n, EwTree& t) const {
    const int step = ew_step(n);
    if (step == kEwLeakyRelu) {
      t.alpha = n.op.a.alpha;
      t.has_alpha = true;
    }
    for (const std::string& v : n.inputs) {
      const Node* p = node_of(v);
      if (p && ew_step(*p) && sole_reader(v) == &n &&
          !(ew_step(*p) == kEwLeakyRelu && t.has_alpha && p->op.a.alpha != t.alpha)) {
        EwTree sub = t;
        ew_collect(*p, sub);
        if (sub.prog.size() + (n.inputs.size() == 2 && &v == &n.inputs[0] ? 2 : 1) <= 16 &&
            sub.leaves.size() <= static_cast<size_t>(kElementwiseMaxInputs)) {
          t = std::move(sub);
          continue;
        }
      }
      auto it = std::find(t.leaves.begin(), t.leaves.end(), v);
      if (it == t.leaves.end() && t.leaves.size() == static_cast<size_t>(kElementwiseMaxInputs)) {
        t.prog.push_back(1 << 20);  // over the limit: the caller gives the tree up
        continue;
      }
      t.prog.push_back(it - t.leaves.begin());
      if (it == t.leaves.end()) t.leaves.push_back(v);
    }
    t.prog.push_back(step);
    t.nodes.push_back(&n);
  }
  // The root of a tree of two or more element-wise nodes (its output not read by just one other
  // element-wise node, which would take it into its own tree) => elementwise over the tree's leaves.
  // Only where a leaf is an f32 constant: ONNX's element-wise operands share one dtype, so the tree's
  // values are f32, what the fused op takes (HiFi-GAN: the three resblocks' outputs summed, divided
  // by the constant 3, then leaky_relu).
  void elementwise(size_t i) {
    const Node& r = g_.nodes[i];
    if (dead_[i] || !ew_step(r) || r.outputs.size() != 1) return;
    if (const Node* up = sole_reader(r.outputs[0]); up && ew_step(*up)) return;
    EwTree t;
    ew_collect(r, t);
    if (t.nodes.size() < 2 || t.prog.size() > 16) return;
    for (int64_t s : t.prog)
      if (s >= kElementwiseMaxInputs) return;
    ConstantData c;
    if (std::none_of(t.leaves.begin(), t.leaves.end(), [&](const std::string& v) { return f32_const(v, &c); })) return;
    std::sort(t.nodes.begin(), t.nodes.end(), [&](const Node* a, const Node* b) { return index(a) < index(b); });
    Node f;
    f.name = r.name;
    f.kind = OpKind::Elementwise;
    f.inputs = t.leaves;
    f.outputs = r.outputs;
    f.op.a.n_ints = static_cast<int>(t.prog.size());
    std::copy(t.prog.begin(), t.prog.end(), f.op.a.ints);
    f.op.a.alpha = t.alpha;
    replace("elementwise", t.nodes, {std::move(f)});
  }

  Graph& g_;
  const Backend& backend_;
  const ConstantFn& constant_;
  std::map<std::string, int> reads_;
  std::map<std::string, size_t> producer_;
  std::vector<char> dead_;
  std::vector<std::vector<Node>> at_;
  std::map<std::string, int> rejected_;
  graph::FusionReport rep_;
};

}  // namespace

graph::FusionReport fuse(Graph& g, const Backend& primary, const ConstantFn& constant) {
  graph::FusionReport rep = Fuser(g, primary, constant).run();
  rep.patterns.assign(std::begin(kPatterns), std::end(kPatterns));
  rep.not_fused.push_back({"attention with a float mask added to the logits",
                           "not written: attention_nd takes a 0/1 mask (where(mask, 0, -inf) with the isnan "
                           "guard is fused); a finite fill (finfo.min) averages a row with no key kept, which "
                           "attention_nd does not; docs/graph.md"});
  return rep;
}

}  // namespace graph2
}  // namespace cyb
