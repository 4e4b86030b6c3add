// The decoder graph of a curated family, emitted from the same FamilySpec and
// DecoderConfig the curated factory builds (families/*.cc describe_*), with the
// same ops and constants as families/decoder.cc but unfused: plain rms_norm,
// matmul, add, silu + mul (or geglu), so the fusion pass has work to do.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/errors.h"
#include "families/decoder.h"
#include "families/families.h"
#include "graph/graph.h"

namespace cyb {
namespace graph {

namespace {

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

struct Emitter {
  std::ostringstream weights, state, nodes;
  void weight(const std::string& name, const std::string& tensor = "", int64_t row0 = -1, int64_t n = 0) {
    weights << "[[weights]]\nname = " << quote(name) << "\n";
    if (!tensor.empty()) weights << "tensor = " << quote(tensor) << "\n";
    if (row0 >= 0) weights << "rows = [" << row0 << ", " << n << "]\n";
    weights << "\n";
  }
  void node(const std::string& name, OpKind op, const std::vector<std::string>& in,
            const std::vector<std::string>& out, const std::string& attrs = "") {
    nodes << "[[nodes]]\nname = " << quote(name) << "\nop = " << quote(op_name(op))
          << "\ntag = " << static_cast<int>(op) << "\ninputs = [";
    for (size_t i = 0; i < in.size(); ++i) nodes << (i ? ", " : "") << quote(in[i]);
    nodes << "]\noutputs = [";
    for (size_t i = 0; i < out.size(); ++i) nodes << (i ? ", " : "") << quote(out[i]);
    nodes << "]\n";
    if (!attrs.empty()) nodes << "attrs = { " << attrs << " }\n";
    nodes << "\n";
  }
};

std::string rope_attrs(int n_heads, int64_t hd, int rot, double theta, bool neox, int64_t max_pos,
                       const RopeScaling& sc) {
  std::string a = "n_heads = " + std::to_string(n_heads) + ", head_dim = " + std::to_string(hd) +
                  ", rot_dims = " + std::to_string(rot) + ", theta = " + num(theta) +
                  ", neox = " + (neox ? "true" : "false") + ", max_position = " + std::to_string(max_pos);
  if (!(sc.type == "default" || sc.type.empty() || sc.type == "none")) {
    a += ", scaling = { type = " + quote(sc.type) + ", factor = " + num(sc.factor) +
         ", low_freq_factor = " + num(sc.low_freq_factor) + ", high_freq_factor = " + num(sc.high_freq_factor) +
         ", original_max_position_embeddings = " + std::to_string(sc.original_max_position_embeddings) +
         ", beta_fast = " + num(sc.beta_fast) + ", beta_slow = " + num(sc.beta_slow) +
         ", attention_factor = " + num(sc.attention_factor) + " }";
  }
  return a;
}

}  // namespace

std::string emit_decoder_graph(const std::string& model_type, const toml::Value& config,
                               const std::function<bool(const std::string&)>& has_tensor) {
  FamilyDescriber describe = find_family_describer(model_type);
  if (!describe)
    throw_invalid_config("model_type", "'" + model_type + "' has no curated family to emit a graph from (known: " +
                                           curated_model_types() + ")");
  FamilySpec spec{""};
  DecoderConfig cfg;
  describe(config, spec, cfg);
  const int64_t D = cfg.hidden, hd = cfg.head_dim, H = cfg.n_heads, KV = cfg.n_kv_heads, I = cfg.intermediate;
  const std::string family = spec.name;
  auto need = [&](const std::string& t) {
    if (!has_tensor(t)) throw_missing_tensor(t, family + " family (graph emission)");
    return t;
  };

  Emitter e;
  const std::string plus_one = spec.norm_plus_one ? "true" : "false";
  const std::string norm_attrs = "eps = " + num(cfg.eps) + ", plus_one = " + plus_one;
  int rot = static_cast<int>(static_cast<double>(hd) * cfg.partial_rotary);
  rot -= rot % 2;
  const double attn_scale = cfg.attn_scale > 0.0 ? cfg.attn_scale : 1.0 / std::sqrt(static_cast<double>(hd));

  const std::string embed = need("model.embed_tokens.weight");
  e.weight(embed);
  e.node("embed_tokens", OpKind::Embedding, {"ids", embed}, {"embed_tokens"},
         "scale = " + num(spec.embed_scale ? std::sqrt(static_cast<double>(D)) : 1.0));
  std::string x = "embed_tokens";

  for (int64_t l = 0; l < cfg.n_layers; ++l) {
    const std::string L = "layers." + std::to_string(l) + ".";
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto w = [&](const std::string& t) {
      e.weight(need(p + t));
      return p + t;
    };
    const std::string attn_norm = w("input_layernorm.weight");
    std::string post_attn_norm, ffn_norm, post_ffn_norm;
    if (spec.sandwich_norm) {
      post_attn_norm = w("post_attention_layernorm.weight");
      ffn_norm = w("pre_feedforward_layernorm.weight");
      post_ffn_norm = w("post_feedforward_layernorm.weight");
    } else {
      ffn_norm = w("post_attention_layernorm.weight");
    }
    std::string wq, wk, wv, wg, wu;
    if (spec.fused_qkv) {
      const std::string t = need(p + "self_attn.qkv_proj.weight");
      wq = p + "self_attn.q_proj.weight";
      wk = p + "self_attn.k_proj.weight";
      wv = p + "self_attn.v_proj.weight";
      e.weight(wq, t, 0, H * hd);
      e.weight(wk, t, H * hd, KV * hd);
      e.weight(wv, t, (H + KV) * hd, KV * hd);
    } else {
      wq = w("self_attn.q_proj.weight");
      wk = w("self_attn.k_proj.weight");
      wv = w("self_attn.v_proj.weight");
    }
    std::string bq, bk, bv;
    if (spec.qkv_bias || cfg.attention_bias) {
      for (auto* pr : {&bq, &bk, &bv}) {
        const char c = pr == &bq ? 'q' : pr == &bk ? 'k' : 'v';
        const std::string t = p + "self_attn." + c + "_proj.bias";
        if (has_tensor(t)) *pr = w(std::string("self_attn.") + c + "_proj.bias");
        else if (spec.qkv_bias) need(t);
      }
    }
    const std::string wo = w("self_attn.o_proj.weight");
    std::string qn, kn;
    if (spec.qk_norm) {
      qn = w("self_attn.q_norm.weight");
      kn = w("self_attn.k_norm.weight");
    }
    if (spec.fused_gate_up) {
      const std::string t = need(p + "mlp.gate_up_proj.weight");
      wg = p + "mlp.gate_proj.weight";
      wu = p + "mlp.up_proj.weight";
      e.weight(wg, t, 0, I);
      e.weight(wu, t, I, I);
    } else {
      wg = w("mlp.gate_proj.weight");
      wu = w("mlp.up_proj.weight");
    }
    const std::string wd = w("mlp.down_proj.weight");
    const bool sliding = cfg.layer_sliding[static_cast<size_t>(l)] != 0 && cfg.sliding_window > 0;
    const std::string kc = L + "k_cache", vc = L + "v_cache";
    e.state << "[[state]]\nname = " << quote(kc) << "\nkind = \"kv_cache\"\nn_kv_heads = " << KV
            << "\nhead_dim = " << hd << "\n\n[[state]]\nname = " << quote(vc)
            << "\nkind = \"kv_cache\"\nn_kv_heads = " << KV << "\nhead_dim = " << hd << "\n\n";

    e.node(L + "attn_norm", OpKind::RmsNorm, {x, attn_norm}, {L + "attn_norm"}, norm_attrs);
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
      const std::string qa = "shape = [-1, " + std::to_string(hd) + "]";
      e.node(L + "q_heads", OpKind::Reshape, {q}, {L + "q_heads"}, qa);
      e.node(L + "q_norm", OpKind::RmsNorm, {L + "q_heads", qn}, {L + "q_norm"}, norm_attrs);
      e.node(L + "q_normed", OpKind::Reshape, {L + "q_norm"}, {L + "q_normed"},
             "shape = [-1, " + std::to_string(H * hd) + "]");
      e.node(L + "k_heads", OpKind::Reshape, {k}, {L + "k_heads"}, qa);
      e.node(L + "k_norm", OpKind::RmsNorm, {L + "k_heads", kn}, {L + "k_norm"}, norm_attrs);
      e.node(L + "k_normed", OpKind::Reshape, {L + "k_norm"}, {L + "k_normed"},
             "shape = [-1, " + std::to_string(KV * hd) + "]");
      q = L + "q_normed";
      k = L + "k_normed";
    }
    const bool local = sliding && cfg.rope_local_theta > 0.0;
    const double theta = local ? cfg.rope_local_theta : cfg.rope_theta;
    const RopeScaling sc = local ? RopeScaling{} : cfg.rope_scaling;
    e.node(L + "rope_q", OpKind::Rope, {q, "pos"}, {L + "rope_q"},
           rope_attrs(static_cast<int>(H), hd, rot, theta, cfg.rope_neox, cfg.max_position, sc));
    e.node(L + "rope_k", OpKind::Rope, {k, "pos"}, {L + "rope_k"},
           rope_attrs(static_cast<int>(KV), hd, rot, theta, cfg.rope_neox, cfg.max_position, sc));
    const std::string kva = "n_kv_heads = " + std::to_string(KV) + ", head_dim = " + std::to_string(hd);
    e.node(L + "kv_write_k", OpKind::KvWrite, {L + "rope_k", "pos"}, {kc}, kva);
    e.node(L + "kv_write_v", OpKind::KvWrite, {v, "pos"}, {vc}, kva);
    e.node(L + "attention", OpKind::Attention, {L + "rope_q", kc, vc, "pos"}, {L + "attention"},
           "n_heads = " + std::to_string(H) + ", n_kv_heads = " + std::to_string(KV) + ", head_dim = " +
               std::to_string(hd) + ", scale = " + num(static_cast<double>(static_cast<float>(attn_scale))) +
               ", softcap = " + num(cfg.attn_softcap) + ", window = " +
               std::to_string(sliding ? cfg.sliding_window : 0));
    std::string o = mm("o_proj", L + "attention", wo, "");
    if (spec.sandwich_norm) {
      e.node(L + "post_attn_norm", OpKind::RmsNorm, {o, post_attn_norm}, {L + "post_attn_norm"}, norm_attrs);
      o = L + "post_attn_norm";
    }
    e.node(L + "attn_residual", OpKind::Add, {o, x}, {L + "attn_residual"});
    x = L + "attn_residual";
    e.node(L + "ffn_norm", OpKind::RmsNorm, {x, ffn_norm}, {L + "ffn_norm"}, norm_attrs);
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
      e.node(L + "post_ffn_norm", OpKind::RmsNorm, {f, post_ffn_norm}, {L + "post_ffn_norm"}, norm_attrs);
      f = L + "post_ffn_norm";
    }
    e.node(L + "ffn_residual", OpKind::Add, {f, x}, {L + "ffn_residual"});
    x = L + "ffn_residual";
  }

  const std::string final_norm = need("model.norm.weight");
  e.weight(final_norm);
  std::string lm_head;
  if (has_tensor("lm_head.weight")) {
    lm_head = "lm_head.weight";
    e.weight(lm_head);
  } else if (cfg.tie_embeddings) {
    lm_head = embed;
  } else {
    throw_missing_tensor("lm_head.weight", family + " family (tie_word_embeddings is false)");
  }
  e.node("final_norm", OpKind::RmsNorm, {x, final_norm}, {"final_norm"}, norm_attrs);
  e.node("last_rows", OpKind::LastRows, {"final_norm", "rows"}, {"last_rows"});
  std::string out = "lm_head";
  e.node("lm_head", OpKind::Matmul, {"last_rows", lm_head}, {"lm_head"});
  if (cfg.final_softcap > 0.f) {
    e.node("final_softcap", OpKind::Softcap, {"lm_head"}, {"final_softcap"},
           "softcap = " + num(cfg.final_softcap));
    out = "final_softcap";
  }

  std::ostringstream doc;
  doc << "# " << family << " decoder graph (unfused), emitted from the curated family; docs/graph.md\n"
      << "version = 1\noutputs = [" << quote(out) << "]\n\n"
      << "[[inputs]]\nname = \"ids\"\nkind = \"token_ids\"\n\n"
      << "[[inputs]]\nname = \"pos\"\nkind = \"positions\"\n\n"
      << "[[inputs]]\nname = \"rows\"\nkind = \"output_rows\"\n\n"
      << e.weights.str() << e.state.str() << e.nodes.str();
  return doc.str();
}

}  // namespace graph
}  // namespace cyb
