#include "families/decoder_graph.h"

#include <cstdio>
#include <sstream>

#include "core/errors.h"
#include "dispatch/op.h"
#include "families/families.h"

namespace cyb {

namespace {

using toml::Value;

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string quote(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    r += c;
  }
  return r + "\"";
}

std::string scalar(const Value& v) {
  switch (v.type()) {
    case Value::Type::Bool: return v.as_bool() ? "true" : "false";
    case Value::Type::Int: return std::to_string(v.as_int());
    case Value::Type::Float: return num(v.as_float());
    case Value::Type::String: return quote(v.as_string());
    case Value::Type::Array: {
      std::string s = "[";
      for (size_t i = 0; i < v.as_array().size(); ++i) s += (i ? ", " : "") + scalar(v.as_array()[i]);
      return s + "]";
    }
    case Value::Type::Table: {
      std::string s = "{ ";
      for (size_t i = 0; i < v.as_table().size(); ++i)
        s += (i ? ", " : "") + v.as_table()[i].first + " = " + scalar(v.as_table()[i].second);
      return s + " }";
    }
    default: return "\"\"";
  }
}

bool is_table_array(const Value& v) {
  if (!v.is_array() || v.as_array().empty()) return false;
  for (const Value& e : v.as_array())
    if (!e.is_table()) return false;
  return true;
}

// A table under construction (insertion order is the written order).
struct T {
  Value v = Value::table();
  T& set(const char* k, Value x) {
    v.as_table().emplace_back(k, std::move(x));
    return *this;
  }
  T& s(const char* k, const std::string& x) { return set(k, Value::string(x)); }
  T& i(const char* k, int64_t x) { return set(k, Value::integer(x)); }
  T& f(const char* k, double x) { return set(k, Value::floating(x)); }
  T& b(const char* k, bool x) { return set(k, Value::boolean(x)); }
  T& list(const char* k, const std::vector<std::string>& xs) {
    Value a = Value::array();
    for (const std::string& x : xs) a.as_array().push_back(Value::string(x));
    return set(k, std::move(a));
  }
  bool empty() const { return v.as_table().empty(); }
};

struct GraphDoc {
  Value inputs = Value::array(), weights = Value::array(), state = Value::array(), nodes = Value::array();
  std::string family;
  const std::function<bool(const std::string&)>* has_tensor;

  void need(const std::string& t) const {
    if (!(*has_tensor)(t)) throw_missing_tensor(t, family + " family (graph emission)");
  }
  // Declares a plan weight; returns its graph name ("" when absent).
  std::string weight(const WeightRef& r) {
    if (!r.present()) return "";
    need(r.tensor);
    T w;
    w.s("name", r.name);
    if (r.tensor != r.name) w.s("tensor", r.tensor);
    if (r.nrows > 0) {
      Value rows = Value::array();
      rows.as_array().push_back(Value::integer(r.row0));
      rows.as_array().push_back(Value::integer(r.nrows));
      w.set("rows", std::move(rows));
    }
    weights.as_array().push_back(std::move(w.v));
    return r.name;
  }
  void node(const std::string& name, OpKind op, const std::vector<std::string>& in, const std::vector<std::string>& out,
            T attrs = T()) {
    T n;
    n.s("name", name).s("op", op_name(op)).i("tag", static_cast<int>(op)).list("inputs", in).list("outputs", out);
    if (!attrs.empty()) n.set("attrs", std::move(attrs.v));
    nodes.as_array().push_back(std::move(n.v));
  }
};

T rope_attrs(int n_heads, const DecoderPlan& p, const RopePlan& r) {
  T a;
  a.i("n_heads", n_heads).i("head_dim", p.head_dim).i("rot_dims", r.rot_dims).f("theta", r.theta).b("neox", r.neox);
  a.i("max_position", r.max_pos);
  const RopeScaling& sc = r.scaling;
  if (!(sc.type == "default" || sc.type.empty() || sc.type == "none")) {
    T s;
    s.s("type", sc.type).f("factor", sc.factor).f("low_freq_factor", sc.low_freq_factor);
    s.f("high_freq_factor", sc.high_freq_factor).i("original_max_position_embeddings", sc.original_max_position_embeddings);
    s.f("beta_fast", sc.beta_fast).f("beta_slow", sc.beta_slow).f("attention_factor", sc.attention_factor);
    s.f("mscale", sc.mscale).f("mscale_all_dim", sc.mscale_all_dim).b("truncate", sc.truncate);
    a.set("scaling", std::move(s.v));
  }
  return a;
}

}  // namespace

toml::Value decoder_graph_doc(const DecoderPlan& p, const std::function<bool(const std::string&)>& has_tensor) {
  GraphDoc e;
  e.family = p.family;
  e.has_tensor = &has_tensor;
  const int64_t H = p.n_heads, KV = p.n_kv_heads, hd = p.head_dim;
  const FamilySpec& spec = p.spec;
  auto norm_attrs = [&] {
    T a;
    a.f("eps", p.eps).b("plus_one", spec.norm_plus_one);
    return a;
  };
  e.inputs.as_array().push_back(T().s("name", "ids").s("kind", "token_ids").v);
  e.inputs.as_array().push_back(T().s("name", "pos").s("kind", "positions").v);
  e.inputs.as_array().push_back(T().s("name", "rows").s("kind", "output_rows").v);

  const std::string embed = e.weight(p.embed);
  e.node("embed_tokens", OpKind::Embedding, {"ids", embed}, {"embed_tokens"}, T().f("scale", p.embed_scale));
  std::string x = "embed_tokens";

  for (int64_t l = 0; l < p.n_layers; ++l) {
    const LayerPlan& w = p.layers[static_cast<size_t>(l)];
    const std::string L = "layers." + std::to_string(l) + ".";
    const std::string attn_norm = e.weight(w.attn_norm);
    const std::string post_attn_norm = e.weight(w.post_attn_norm);
    const std::string ffn_norm = e.weight(w.ffn_norm);
    const std::string post_ffn_norm = e.weight(w.post_ffn_norm);
    const std::string wq = e.weight(w.q), wk = e.weight(w.k), wv = e.weight(w.v);
    const std::string bq = e.weight(w.bq), bk = e.weight(w.bk), bv = e.weight(w.bv);
    const std::string wo = e.weight(w.o);
    const std::string qn = e.weight(w.q_norm), kn = e.weight(w.k_norm);
    const std::string wg = e.weight(w.gate), wu = e.weight(w.up);
    const std::string wd = e.weight(w.down);
    const std::string kc = L + "k_cache", vc = L + "v_cache";
    e.state.as_array().push_back(T().s("name", kc).s("kind", "kv_cache").i("n_kv_heads", KV).i("head_dim", hd).v);
    e.state.as_array().push_back(T().s("name", vc).s("kind", "kv_cache").i("n_kv_heads", KV).i("head_dim", hd).v);

    e.node(L + "attn_norm", OpKind::RmsNorm, {x, attn_norm}, {L + "attn_norm"}, norm_attrs());
    auto mm = [&](const std::string& name, const std::string& in, const std::string& W, const std::string& b) {
      std::vector<std::string> ins = {in, W};
      if (!b.empty()) ins.push_back(b);
      e.node(L + name, OpKind::Matmul, ins, {L + name});
      return L + name;
    };
    std::string q = mm("q_proj", L + "attn_norm", wq, bq);
    std::string k = mm("k_proj", L + "attn_norm", wk, bk);
    std::string v = mm("v_proj", L + "attn_norm", wv, bv);
    if (spec.qk_norm) {
      auto shape = [](int64_t cols) {
        Value a = Value::array();
        a.as_array().push_back(Value::integer(-1));
        a.as_array().push_back(Value::integer(cols));
        return T().set("shape", std::move(a));
      };
      e.node(L + "q_heads", OpKind::Reshape, {q}, {L + "q_heads"}, shape(hd));
      e.node(L + "q_norm", OpKind::RmsNorm, {L + "q_heads", qn}, {L + "q_norm"}, norm_attrs());
      e.node(L + "q_normed", OpKind::Reshape, {L + "q_norm"}, {L + "q_normed"}, shape(H * hd));
      e.node(L + "k_heads", OpKind::Reshape, {k}, {L + "k_heads"}, shape(hd));
      e.node(L + "k_norm", OpKind::RmsNorm, {L + "k_heads", kn}, {L + "k_norm"}, norm_attrs());
      e.node(L + "k_normed", OpKind::Reshape, {L + "k_norm"}, {L + "k_normed"}, shape(KV * hd));
      q = L + "q_normed";
      k = L + "k_normed";
    }
    const RopePlan& rope = p.ropes[static_cast<size_t>(w.rope)];
    e.node(L + "rope_q", OpKind::Rope, {q, "pos"}, {L + "rope_q"}, rope_attrs(static_cast<int>(H), p, rope));
    e.node(L + "rope_k", OpKind::Rope, {k, "pos"}, {L + "rope_k"}, rope_attrs(static_cast<int>(KV), p, rope));
    auto kva = [&] { return T().i("n_kv_heads", KV).i("head_dim", hd); };
    e.node(L + "kv_write_k", OpKind::KvWrite, {L + "rope_k", "pos"}, {kc}, kva());
    e.node(L + "kv_write_v", OpKind::KvWrite, {v, "pos"}, {vc}, kva());
    e.node(L + "attention", OpKind::Attention, {L + "rope_q", kc, vc, "pos"}, {L + "attention"},
           T().i("n_heads", H).i("n_kv_heads", KV).i("head_dim", hd).f("scale", p.attn_scale)
               .f("softcap", p.attn_softcap).i("window", w.window));
    std::string o = mm("o_proj", L + "attention", wo, "");
    if (spec.sandwich_norm) {
      e.node(L + "post_attn_norm", OpKind::RmsNorm, {o, post_attn_norm}, {L + "post_attn_norm"}, norm_attrs());
      o = L + "post_attn_norm";
    }
    e.node(L + "attn_residual", OpKind::Add, {o, x}, {L + "attn_residual"});
    x = L + "attn_residual";
    e.node(L + "ffn_norm", OpKind::RmsNorm, {x, ffn_norm}, {L + "ffn_norm"}, norm_attrs());
    const std::string g = mm("gate_proj", L + "ffn_norm", wg, "");
    const std::string u = mm("up_proj", L + "ffn_norm", wu, "");
    if (spec.gelu_tanh) {
      e.node(L + "mlp", OpKind::GeGlu, {g, u}, {L + "mlp"});
    } else {
      e.node(L + "act", OpKind::Silu, {g}, {L + "act"});
      e.node(L + "mlp", OpKind::Mul, {L + "act", u}, {L + "mlp"});
    }
    std::string f = mm("down_proj", L + "mlp", wd, "");
    if (spec.sandwich_norm) {
      e.node(L + "post_ffn_norm", OpKind::RmsNorm, {f, post_ffn_norm}, {L + "post_ffn_norm"}, norm_attrs());
      f = L + "post_ffn_norm";
    }
    e.node(L + "ffn_residual", OpKind::Add, {f, x}, {L + "ffn_residual"});
    x = L + "ffn_residual";
  }

  const std::string final_norm = e.weight(p.final_norm);
  const std::string lm_head = p.tied ? embed : e.weight(p.lm_head);
  e.node("final_norm", OpKind::RmsNorm, {x, final_norm}, {"final_norm"}, norm_attrs());
  e.node("last_rows", OpKind::LastRows, {"final_norm", "rows"}, {"last_rows"});
  std::string out = "lm_head";
  e.node("lm_head", OpKind::Matmul, {"last_rows", lm_head}, {"lm_head"});
  if (p.final_softcap > 0.f) {
    e.node("final_softcap", OpKind::Softcap, {"lm_head"}, {"final_softcap"}, T().f("softcap", p.final_softcap));
    out = "final_softcap";
  }

  T doc;
  doc.i("version", 1).list("outputs", {out});
  doc.set("inputs", std::move(e.inputs)).set("weights", std::move(e.weights));
  doc.set("state", std::move(e.state)).set("nodes", std::move(e.nodes));
  return std::move(doc.v);
}

std::string write_graph_toml(const toml::Value& doc, const std::string& header_comment) {
  std::ostringstream o;
  if (!header_comment.empty()) o << "# " << header_comment << "\n";
  for (const auto& kv : doc.as_table())
    if (!is_table_array(kv.second)) o << kv.first << " = " << scalar(kv.second) << "\n";
  o << "\n";
  for (const auto& kv : doc.as_table()) {
    if (!is_table_array(kv.second)) continue;
    for (const Value& t : kv.second.as_array()) {
      o << "[[" << kv.first << "]]\n";
      for (const auto& f : t.as_table()) o << f.first << " = " << scalar(f.second) << "\n";
      o << "\n";
    }
  }
  return o.str();
}

graph::Graph build_decoder_graph(const ModelFile& file) {
  const toml::Value* mt = file.config().find("model_type");
  if (!mt || !mt->is_string()) throw_invalid_config("model_type", "required key is missing");
  auto has = [&file](const std::string& n) { return file.find(n) != nullptr; };
  const DecoderPlan plan = make_decoder_plan(mt->as_string(), file.config(), has);
  return graph::parse_graph(decoder_graph_doc(plan, has), [&file](const std::string& name, graph::WeightInfo* info) {
    const TensorEntry* e = file.find(name);
    if (!e) return false;
    info->dtype = e->dtype;
    info->shape = e->shape;
    return true;
  });
}

namespace graph {

std::string emit_decoder_graph(const std::string& model_type, const toml::Value& config,
                               const std::function<bool(const std::string&)>& has_tensor) {
  if (!find_family(model_type))
    throw_invalid_config("model_type", "'" + model_type + "' has no curated family to emit a graph from (known: " +
                                           curated_model_types() + ")");
  const DecoderPlan plan = make_decoder_plan(model_type, config, has_tensor);
  return write_graph_toml(decoder_graph_doc(plan, has_tensor),
                          plan.family + " decoder graph (unfused), emitted from the curated family; docs/graph.md");
}

}  // namespace graph

}  // namespace cyb
