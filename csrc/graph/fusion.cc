// The structural fusion pass of the graph path (docs/runtime.md, "Fused op
// policy"): run once at load, rewrites matching sub-DAGs into fused ops where
// the primary backend's supports() accepts the fused op. Patterns, in order:
//   add -> rms_norm (the sum also used elsewhere)      => fused_skip_norm
//   matmul(h,Wg) -> silu, matmul(h,Wu), mul             => fused_swiglu
//   rms_norm -> matmul (every consumer a matmul)        => fused_norm_matmul
#include <algorithm>

#include "core/errors.h"
#include "graph/graph.h"

namespace cyb {
namespace graph {

namespace {

struct Use {
  int node;
  int slot;
};

Tensor dummy(const Value& v) {
  Tensor t;
  t.dtype = v.kind == ValueKind::State ? DType::F32 : v.dtype;
  t.name = v.kind == ValueKind::Weight ? v.tensor.c_str() : nullptr;
  t.shape.ndim = static_cast<int>(std::min<size_t>(v.shape.size(), 4));
  for (int i = 0; i < t.shape.ndim; ++i) t.shape.d[i] = v.shape[static_cast<size_t>(i)].eval(1, 1, 1);
  return t;
}

bool backend_accepts(const Graph& g, const Backend& b, const Node& n) {
  Tensor in[8];
  int k = 0;
  for (int id : n.inputs) in[k++] = dummy(g.values[static_cast<size_t>(id)]);
  Op op{n.kind, n.attrs, n.name.c_str()};
  return b.supports(op, in, k);
}

}  // namespace

FusionReport fuse(Graph& g, const Backend& primary) {
  FusionReport rep;
  const size_t N = g.nodes.size();
  std::vector<std::vector<Use>> uses(g.values.size());
  auto rebuild_uses = [&]() {
    for (auto& u : uses) u.clear();
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (size_t s = 0; s < g.nodes[i].inputs.size(); ++s)
        uses[static_cast<size_t>(g.nodes[i].inputs[s])].push_back(Use{static_cast<int>(i), static_cast<int>(s)});
  };
  rebuild_uses();
  auto is_output = [&](int v) { return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end(); };
  auto producer = [&](int v) -> Node* {
    const Value& val = g.values[static_cast<size_t>(v)];
    return val.kind == ValueKind::Node ? &g.nodes[static_cast<size_t>(val.producer)] : nullptr;
  };
  auto is_activation = [&](int v) { return g.values[static_cast<size_t>(v)].kind == ValueKind::Node; };

  std::vector<char> dead(N, 0);
  std::vector<std::vector<Node>> at(N);  // fused nodes emitted at position i (before node i)
  bool rejected[3] = {false, false, false};

  // 1. add -> rms_norm, sum used elsewhere too
  for (size_t i = 0; i < N; ++i) {
    const Node& a = g.nodes[i];
    if (dead[i] || a.kind != OpKind::Add) continue;
    if (!is_activation(a.inputs[0]) || !is_activation(a.inputs[1])) continue;
    if (g.values[static_cast<size_t>(a.inputs[0])].shape != g.values[static_cast<size_t>(a.inputs[1])].shape) continue;
    const int s = a.outputs[0];
    int norm = -1, others = 0;
    for (const Use& u : uses[static_cast<size_t>(s)]) {
      const Node& c = g.nodes[static_cast<size_t>(u.node)];
      if (norm < 0 && c.kind == OpKind::RmsNorm && u.slot == 0 && !dead[static_cast<size_t>(u.node)]) norm = u.node;
      else ++others;
    }
    if (norm < 0 || (others == 0 && !is_output(s))) continue;
    const Node& r = g.nodes[static_cast<size_t>(norm)];
    Node f;
    f.name = r.name;
    f.kind = OpKind::FusedSkipNorm;
    f.attrs = r.attrs;
    f.inputs = {a.inputs[0], a.inputs[1], r.inputs[1]};
    f.outputs = {r.outputs[0], s};
    if (!backend_accepts(g, primary, f)) {
      rejected[0] = true;
      continue;
    }
    dead[i] = dead[static_cast<size_t>(norm)] = 1;
    rep.fused.push_back({"fused_skip_norm", f.name, {a.name, r.name}});
    at[i].push_back(std::move(f));
  }

  // 2. silu(matmul(h, Wg)) * matmul(h, Wu)
  auto single_use = [&](int v) { return uses[static_cast<size_t>(v)].size() == 1 && !is_output(v); };
  for (size_t i = 0; i < N; ++i) {
    const Node& m = g.nodes[i];
    if (dead[i] || m.kind != OpKind::Mul) continue;
    for (int side = 0; side < 2; ++side) {
      const int sv = m.inputs[static_cast<size_t>(side)], uv = m.inputs[static_cast<size_t>(1 - side)];
      Node* s = producer(sv);
      Node* mu = producer(uv);
      if (!s || !mu || s->kind != OpKind::Silu || mu->kind != OpKind::Matmul || mu->inputs.size() != 2) continue;
      Node* mg = producer(s->inputs[0]);
      if (!mg || mg->kind != OpKind::Matmul || mg->inputs.size() != 2 || mg->inputs[0] != mu->inputs[0]) continue;
      if (!single_use(sv) || !single_use(uv) || !single_use(s->inputs[0])) continue;
      const size_t is = static_cast<size_t>(g.values[static_cast<size_t>(sv)].producer);
      const size_t iu = static_cast<size_t>(g.values[static_cast<size_t>(uv)].producer);
      const size_t ig = static_cast<size_t>(g.values[static_cast<size_t>(s->inputs[0])].producer);
      if (dead[is] || dead[iu] || dead[ig]) continue;
      Node f;
      f.name = m.name;
      f.kind = OpKind::FusedSwiGlu;
      f.inputs = {mg->inputs[0], mg->inputs[1], mu->inputs[1]};
      f.outputs = {m.outputs[0]};
      if (!backend_accepts(g, primary, f)) {
        rejected[1] = true;
        break;
      }
      dead[i] = dead[is] = dead[iu] = dead[ig] = 1;
      rep.fused.push_back({"fused_swiglu", f.name, {mg->name, s->name, mu->name, m.name}});
      at[i].push_back(std::move(f));
      break;
    }
  }

  // 3. rms_norm whose every consumer is a matmul reading it as x
  for (size_t i = 0; i < N; ++i) {
    const Node& r = g.nodes[i];
    if (dead[i] || r.kind != OpKind::RmsNorm || is_output(r.outputs[0])) continue;
    const auto& us = uses[static_cast<size_t>(r.outputs[0])];
    bool ok = !us.empty();
    for (const Use& u : us) {
      const Node& c = g.nodes[static_cast<size_t>(u.node)];
      ok = ok && !dead[static_cast<size_t>(u.node)] && c.kind == OpKind::Matmul && u.slot == 0;
    }
    if (!ok) continue;
    std::vector<Node> fs;
    for (const Use& u : us) {
      const Node& mm = g.nodes[static_cast<size_t>(u.node)];
      Node f;
      f.name = mm.name;
      f.kind = OpKind::FusedNormMatmul;
      f.attrs = r.attrs;
      f.inputs = {r.inputs[0], r.inputs[1], mm.inputs[1]};
      if (mm.inputs.size() == 3) f.inputs.push_back(mm.inputs[2]);
      f.outputs = mm.outputs;
      if (!backend_accepts(g, primary, f)) {
        ok = false;
        break;
      }
      fs.push_back(std::move(f));
    }
    if (!ok) {
      rejected[2] = true;
      continue;
    }
    dead[i] = 1;
    for (size_t k = 0; k < us.size(); ++k) {
      const size_t j = static_cast<size_t>(us[k].node);
      dead[j] = 1;
      rep.fused.push_back({"fused_norm_matmul", fs[k].name, {r.name, g.nodes[j].name}});
      at[j].push_back(std::move(fs[k]));
    }
  }

  const char* names[3] = {"fused_skip_norm", "fused_swiglu", "fused_norm_matmul"};
  for (int k = 0; k < 3; ++k)
    if (rejected[k])
      rep.not_fused.push_back({names[k], std::string("backend '") + primary.name() + "' does not support it"});
  size_t n_attn = 0;
  for (const Node& n : g.nodes) n_attn += n.kind == OpKind::Attention;
  if (n_attn)
    rep.not_fused.push_back({"attention -> flash_attention",
                             "no backend supports it (no flash_attention op in this build)"});

  std::vector<Node> out;
  out.reserve(N);
  for (size_t i = 0; i < N; ++i) {
    for (Node& f : at[i]) out.push_back(std::move(f));
    if (!dead[i]) out.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(out);
  for (Value& v : g.values)
    if (v.kind == ValueKind::Node) v.producer = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int o : g.nodes[i].outputs)
      if (g.values[static_cast<size_t>(o)].kind == ValueKind::Node)
        g.values[static_cast<size_t>(o)].producer = static_cast<int>(i);
  infer_shapes(g);
  return rep;
}

}  // namespace graph
}  // namespace cyb
