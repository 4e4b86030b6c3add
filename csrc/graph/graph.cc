// Parsing, validation and shape inference of the graph section (docs/graph.md).
#include "graph/graph.h"

#include <algorithm>
#include <functional>
#include <set>

#include "core/config_check.h"
#include "core/errors.h"
#include "dispatch/op_schema.h"

namespace cyb {
namespace graph {

const toml::Value::Array& table_array(const toml::Value& doc, const char* key) {
  static const toml::Value::Array empty;
  const toml::Value* v = doc.find(key);
  if (!v) return empty;
  if (!v->is_array()) throw_format("graph", key, std::string("'") + key + "' must be an array of tables");
  for (const toml::Value& e : v->as_array())
    if (!e.is_table()) throw_format("graph", key, std::string("'") + key + "' must be an array of tables");
  return v->as_array();
}

std::string sym_shape_str(const SymShape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    const char* n = s[i].sym == Sym::T ? "T" : s[i].sym == Sym::R ? "R" : s[i].sym == Sym::C ? "C" : "";
    if (*n) r += (s[i].c == 1 ? std::string() : std::to_string(s[i].c) + "*") + n;
    else r += std::to_string(s[i].c);
  }
  return r + "]";
}

bool RopeSpec::same(const RopeSpec& o) const {
  const RopeScaling &a = scaling, &b = o.scaling;
  return rot_dims == o.rot_dims && max_pos == o.max_pos && theta == o.theta && neox == o.neox &&
         a.type == b.type && a.factor == b.factor && a.low_freq_factor == b.low_freq_factor &&
         a.high_freq_factor == b.high_freq_factor &&
         a.original_max_position_embeddings == b.original_max_position_embeddings &&
         a.beta_fast == b.beta_fast && a.beta_slow == b.beta_slow &&
         a.attention_factor == b.attention_factor && a.mscale == b.mscale &&
         a.mscale_all_dim == b.mscale_all_dim && a.truncate == b.truncate;
}

int Graph::add_value(Value v) {
  if (v.name.empty()) throw_format("graph", "name", "a value has an empty name");
  if (index.count(v.name)) throw_format("graph", v.name, "'" + v.name + "' is defined twice");
  const int id = static_cast<int>(values.size());
  index[v.name] = id;
  values.push_back(std::move(v));
  return id;
}

namespace {

// ------------------------------------------------------------ shape checks

std::vector<int64_t> shape_vec(const SymShape& s) {
  // For error messages: symbolic dims are shown as -c (T), -1000c (R), ...
  std::vector<int64_t> v;
  for (const Dim& d : s) v.push_back(d.sym == Sym::None ? d.c : -d.c);
  return v;
}

[[noreturn]] void mismatch(const Node& n, const std::string& what, const SymShape& expected,
                           const SymShape& got) {
  throw_shape_mismatch(n.name + " (" + what + ": expected " + sym_shape_str(expected) + ", got " +
                           sym_shape_str(got) + ")",
                       shape_vec(expected), shape_vec(got));
}

struct Numel {  // c * T^t * R^r * C^k
  int64_t c = 1;
  int t = 0, r = 0, k = 0;
  bool operator==(const Numel& o) const { return c == o.c && t == o.t && r == o.r && k == o.k; }
};
Numel numel(const SymShape& s) {
  Numel n;
  for (const Dim& d : s) {
    n.c *= d.c;
    if (d.sym == Sym::T) ++n.t;
    if (d.sym == Sym::R) ++n.r;
    if (d.sym == Sym::C) ++n.k;
  }
  return n;
}

Dim cols(const SymShape& s) { return s.empty() ? Dim{1, Sym::None} : s.back(); }
SymShape with_cols(SymShape s, Dim c) {
  if (s.empty()) s.push_back(c);
  else s.back() = c;
  return s;
}
Dim cst(int64_t c) { return Dim{c, Sym::None}; }

}  // namespace

// The schema's shape rule (dispatch/op_schema.h apply_shape_rule) on symbolic shapes.
int sh_ndim(const SymShape& s) { return static_cast<int>(s.size()); }
Dim sh_dim(const SymShape& s, int i) { return s[static_cast<size_t>(i)]; }
void sh_set_last(SymShape& s, Dim v) { s = with_cols(std::move(s), v); }
bool sh_push(SymShape& s, Dim v) {
  if (s.size() >= 4) return false;
  s.push_back(v);
  return true;
}
void sh_erase(SymShape& s, int i) { s.erase(s.begin() + i); }

void infer_shapes(Graph& g) {
  for (Node& n : g.nodes) {
    auto in = [&](size_t i) -> Value& { return g.values[static_cast<size_t>(n.inputs[i])]; };
    auto out_shape = [&](size_t i, SymShape s) {
      Value& o = g.values[static_cast<size_t>(n.outputs[i])];
      o.shape = std::move(s);
      o.dtype = DType::F32;
    };
    auto need_f32_act = [&](size_t i, const char* what) {
      const Value& v = in(i);
      if (v.kind == ValueKind::Weight || v.kind == ValueKind::State || v.dtype != DType::F32)
        throw_unsupported_op(n.name + " (" + what + ": '" + v.name + "' must be an f32 activation)",
                             "graph", dtype_name(v.dtype));
    };
    auto need_matrix = [&](size_t i, Dim K, const char* what) {
      const Value& w = in(i);
      if (w.kind != ValueKind::Weight || w.shape.size() != 2)
        mismatch(n, what, {cst(-1), K}, w.shape);
      if (w.shape[1] != K) mismatch(n, what, {w.shape[0], K}, w.shape);
      if (is_int_dtype(w.dtype))
        throw_unsupported_op(n.name + " (" + what + ")", "graph", dtype_name(w.dtype));
      return w.shape[0];
    };
    auto need_vec = [&](size_t i, Dim len, const char* what) {
      const Value& w = in(i);
      if (w.shape.size() != 1 || w.shape[0] != len) mismatch(n, what, {len}, w.shape);
      if (w.kind == ValueKind::Weight && w.dtype != DType::F32 && w.dtype != DType::F16 &&
          w.dtype != DType::BF16)
        throw_unsupported_op(n.name + " (" + what + ": 1-D weights are f32, f16 or bf16)", "graph",
                             dtype_name(w.dtype));
    };
    auto need_same = [&](size_t i, const SymShape& like, const char* what) {
      if (in(i).shape != like) mismatch(n, what, like, in(i).shape);
    };
    auto need_heads = [&](size_t i, int heads, const char* what) {
      const Dim want = cst(static_cast<int64_t>(heads) * n.attrs.head_dim);
      if (heads <= 0 || n.attrs.head_dim <= 0 || in(i).shape.size() != 2 || cols(in(i).shape) != want)
        mismatch(n, what, {Dim{1, Sym::T}, want}, in(i).shape);
    };
    auto need_state = [&](size_t i, const char* what) {
      const Value& s = in(i);
      const SymShape want = {cst(n.attrs.n_kv_heads), Dim{1, Sym::C}, cst(n.attrs.head_dim)};
      if (s.kind != ValueKind::State) mismatch(n, what, want, s.shape);
      if (s.shape != want) mismatch(n, what, want, s.shape);
    };

    switch (n.kind) {
      case OpKind::Embedding: {
        const Value& ids = in(0);
        if (ids.dtype != DType::I32)
          throw_unsupported_op(n.name + " (ids must be i32)", "graph", dtype_name(ids.dtype));
        const Value& t = in(1);
        if (t.kind != ValueKind::Weight || t.shape.size() != 2) mismatch(n, "table", {cst(-1), cst(-1)}, t.shape);
        break;
      }
      case OpKind::Rope: {
        need_f32_act(0, "x");
        need_heads(0, n.attrs.n_heads, "x");
        const RopeSpec& r = g.ropes[static_cast<size_t>(n.rope)];
        if (r.rot_dims <= 0 || r.rot_dims % 2 || r.rot_dims > n.attrs.head_dim)
          throw_invalid_config("graph.nodes." + n.name + ".attrs.rot_dims",
                               "must be even, positive and <= head_dim");
        break;
      }
      case OpKind::Attention: {
        need_f32_act(0, "q");
        if (n.attrs.n_kv_heads <= 0 || n.attrs.n_heads % n.attrs.n_kv_heads != 0)
          throw_invalid_config("graph.nodes." + n.name + ".attrs.n_kv_heads",
                               "n_heads must be a multiple of n_kv_heads");
        need_heads(0, n.attrs.n_heads, "q");
        need_state(1, "k cache");
        need_state(2, "v cache");
        break;
      }
      case OpKind::KvWrite: {
        need_f32_act(0, "x");
        need_heads(0, n.attrs.n_kv_heads, "x");
        const Value& s = g.values[static_cast<size_t>(n.outputs[0])];
        const SymShape want = {cst(n.attrs.n_kv_heads), Dim{1, Sym::C}, cst(n.attrs.head_dim)};
        if (s.kind != ValueKind::State) throw_format("graph", n.name, "kv_write must write a [[state]] value");
        if (s.shape != want) mismatch(n, "cache", want, s.shape);
        break;
      }
      case OpKind::Reshape: {
        const Numel total = numel(in(0).shape);
        SymShape s;
        int infer = -1;
        int64_t known = 1;
        for (size_t i = 0; i < n.reshape.size(); ++i) {
          if (n.reshape[i] == -1) {
            if (infer >= 0) throw_invalid_config("graph.nodes." + n.name + ".attrs.shape", "at most one -1");
            infer = static_cast<int>(i);
            s.push_back(cst(-1));
          } else if (n.reshape[i] <= 0) {
            throw_invalid_config("graph.nodes." + n.name + ".attrs.shape", "dims must be positive or -1");
          } else {
            known *= n.reshape[i];
            s.push_back(cst(n.reshape[i]));
          }
        }
        if (s.empty() || s.size() > 4)
          throw_invalid_config("graph.nodes." + n.name + ".attrs.shape", "1 to 4 dims");
        const int nsym = total.t + total.r + total.k;
        if (infer < 0) {
          if (nsym != 0 || known != total.c) mismatch(n, "shape", s, in(0).shape);
        } else {
          if (nsym > 1 || total.c % known != 0) mismatch(n, "shape", s, in(0).shape);
          const Sym sym = total.t ? Sym::T : total.r ? Sym::R : total.k ? Sym::C : Sym::None;
          s[static_cast<size_t>(infer)] = Dim{total.c / known, sym};
        }
        out_shape(0, s);
        break;
      }
      case OpKind::LastRows: {
        need_f32_act(0, "x");
        if (in(0).shape.size() != 2) mismatch(n, "x", {Dim{1, Sym::T}, cst(-1)}, in(0).shape);
        out_shape(0, {Dim{1, Sym::R}, in(0).shape[1]});
        break;
      }
      default: {
        // Every other op: its schema's inputs, symbolically (f32 activations, per-row
        // vectors, weights whose rows match the activations, same-shaped operands).
        const OpSchema& sc = op_schema(n.kind);
        const size_t nin = n.inputs.size() - (sc.positions ? 1 : 0);
        for (size_t i = 0; i < nin && i < sc.inputs.size(); ++i) {
          const InputSpec& is = sc.inputs[i];
          const Dim K = cols(in(0).shape);
          switch (is.shape) {
            case InShape::Any:
            case InShape::Rows0:  // activations (graph activations are f32)
              if ((is.dtypes & kDtF32) && !(is.dtypes & kDtWeight)) need_f32_act(i, is.name);
              break;
            case InShape::Like0:
              need_f32_act(i, is.name);
              need_same(i, in(0).shape, is.name);
              break;
            case InShape::Like0OrRow: {
              const Value& b = in(i);
              if (!(b.shape.size() == 1 && b.shape[0] == K)) {
                need_f32_act(i, is.name);
                need_same(i, in(0).shape, is.name);
              }
              break;
            }
            case InShape::Cols0: need_vec(i, K, is.name); break;
            case InShape::RowsOf: need_vec(i, in(static_cast<size_t>(is.arg)).shape[0], is.name); break;
            case InShape::WeightK0:
            case InShape::WeightSelf:
              need_matrix(i, is.shape == InShape::WeightK0 ? K : cols(in(i).shape), is.name);
              break;
            case InShape::MatmulOut: {  // the matmul's output shape: in0 with its last dim = the weight's rows
              need_f32_act(i, is.name);
              SymShape want = in(0).shape;
              want.back() = in(static_cast<size_t>(is.arg)).shape[0];
              need_same(i, want, is.name);
              break;
            }
            case InShape::WeightLike: {
              const Dim N = need_matrix(i, K, is.name);
              const Dim N0 = in(static_cast<size_t>(is.arg)).shape[0];
              if (N != N0) mismatch(n, is.name, {N0, K}, in(i).shape);
              break;
            }
          }
        }
        break;
      }
    }
    // Output shapes: the schema's rule, shared with the concrete inference.
    const OpSchema& sc = op_schema(n.kind);
    if (sc.rule != ShapeRule::Given && sc.rule != ShapeRule::View) {
      std::vector<SymShape> ins;
      for (size_t i = 0; i < n.inputs.size() - (sc.positions ? 1 : 0); ++i) ins.push_back(in(i).shape);
      SymShape o;
      if (!apply_shape_rule(sc.rule, sc.rule_arg, ins.data(), static_cast<int>(ins.size()), &o))
        mismatch(n, "x", {Dim{1, Sym::T}, cst(-1)}, in(0).shape);
      for (size_t i = 0; i < n.outputs.size(); ++i) out_shape(i, o);
    }
  }
}

// ------------------------------------------------------------------ parsing

namespace {

bool type_ok(const toml::Value& v, AttrType t) {
  switch (t) {
    case AttrType::Float: return v.is_number();
    case AttrType::Int: return v.is_int();
    case AttrType::Bool: return v.is_bool();
    case AttrType::Table: return v.is_table();
    case AttrType::Enum: return v.is_string();
    case AttrType::IntArray:
      if (!v.is_array()) return false;
      for (const toml::Value& e : v.as_array())
        if (!e.is_int()) return false;
      return true;
  }
  return false;
}

const std::string& need_string(const toml::Value& t, const char* key, const std::string& where) {
  const toml::Value* v = t.find(key);
  if (!v || !v->is_string() || v->as_string().empty())
    throw_format("graph", where + "." + key, std::string("'") + key + "' must be a non-empty string");
  return v->as_string();
}

std::vector<std::string> string_list(const toml::Value& t, const char* key, const std::string& where) {
  const toml::Value* v = t.find(key);
  if (!v || !v->is_array())
    throw_format("graph", where + "." + key, std::string("'") + key + "' must be an array of strings");
  std::vector<std::string> r;
  for (const toml::Value& e : v->as_array()) {
    if (!e.is_string()) throw_format("graph", where + "." + key, "entries must be strings");
    r.push_back(e.as_string());
  }
  return r;
}

RopeScaling parse_scaling(const toml::Value& t, const std::string& field) {
  RopeScaling s;
  for (const auto& kv : t.as_table()) {
    const std::string f = field + "." + kv.first;
    const toml::Value& v = kv.second;
    auto num = [&]() {
      if (!v.is_number()) throw_invalid_config(f, "must be a number");
      return v.as_float();
    };
    if (kv.first == "type") {
      if (!v.is_string()) throw_invalid_config(f, "must be a string");
      s.type = v.as_string();
    } else if (kv.first == "factor") s.factor = num();
    else if (kv.first == "low_freq_factor") s.low_freq_factor = num();
    else if (kv.first == "high_freq_factor") s.high_freq_factor = num();
    else if (kv.first == "original_max_position_embeddings") {
      if (!v.is_int()) throw_invalid_config(f, "must be an integer");
      s.original_max_position_embeddings = v.as_int();
    } else if (kv.first == "beta_fast") s.beta_fast = num();
    else if (kv.first == "beta_slow") s.beta_slow = num();
    else if (kv.first == "attention_factor") s.attention_factor = num();
    else if (kv.first == "mscale") s.mscale = num();
    else if (kv.first == "mscale_all_dim") s.mscale_all_dim = num();
    else if (kv.first == "truncate") {
      if (!v.is_bool()) throw_invalid_config(f, "must be a boolean");
      s.truncate = v.as_bool();
    } else throw_invalid_config(f, "unknown rope scaling key");
  }
  return s;
}

int positive_int(const toml::Value& v, const std::string& field, int64_t limit) {
  if (v.as_int() <= 0 || v.as_int() > limit)
    throw_invalid_config(field, "must be in [1, " + std::to_string(limit) + "]");
  return static_cast<int>(v.as_int());
}

}  // namespace

Graph parse_graph(const toml::Value& doc, const WeightLookup& lookup) {
  if (!doc.is_table()) throw_format("graph", "", "the graph section must be a TOML table");
  Graph g;
  if (const toml::Value* v = doc.find("version")) {
    if (!v->is_int() || v->as_int() != 1)
      throw_format("graph", "version", "unsupported graph version (this reader knows version 1)");
  }
  for (const auto& kv : doc.as_table()) {
    static const std::set<std::string> known = {"version", "inputs", "weights", "state", "nodes", "outputs"};
    if (!known.count(kv.first)) throw_format("graph", kv.first, "unknown key '" + kv.first + "'");
  }

  // [[inputs]]
  for (const toml::Value& t : table_array(doc, "inputs")) {
    Value v;
    v.name = need_string(t, "name", "inputs");
    const std::string& kind = need_string(t, "kind", "inputs." + v.name);
    v.dtype = DType::I32;
    int* slot = nullptr;
    if (kind == "token_ids") {
      v.kind = ValueKind::TokenIds;
      v.shape = {Dim{1, Sym::T}};
      slot = &g.ids;
    } else if (kind == "positions") {
      v.kind = ValueKind::Positions;
      v.shape = {Dim{1, Sym::None}};
      slot = &g.positions;
    } else if (kind == "output_rows") {
      v.kind = ValueKind::OutputRows;
      v.shape = {Dim{1, Sym::None}};
      slot = &g.rows;
    } else {
      throw_format("graph", "inputs." + v.name + ".kind",
                   "unknown input kind '" + kind + "' (token_ids, positions, output_rows)");
    }
    if (*slot >= 0) throw_format("graph", "inputs." + v.name, "a second '" + kind + "' input");
    *slot = g.add_value(std::move(v));
  }
  if (g.ids < 0) throw_format("graph", "inputs", "a 'token_ids' input is required");
  if (g.positions < 0) throw_format("graph", "inputs", "a 'positions' input is required");

  // [[weights]]
  for (const toml::Value& t : table_array(doc, "weights")) {
    Value v;
    v.kind = ValueKind::Weight;
    v.name = need_string(t, "name", "weights");
    v.tensor = t.find("tensor") ? need_string(t, "tensor", "weights." + v.name) : v.name;
    WeightInfo info;
    if (!lookup(v.tensor, &info)) throw_missing_tensor(v.tensor, "graph weight '" + v.name + "'");
    v.dtype = info.dtype;
    for (int64_t d : info.shape) v.shape.push_back(cst(d));
    if (const toml::Value* r = t.find("rows")) {
      if (!type_ok(*r, AttrType::IntArray) || r->as_array().size() != 2)
        throw_invalid_config("graph.weights." + v.name + ".rows", "must be [first_row, row_count]");
      v.row0 = r->as_array()[0].as_int();
      v.nrows = r->as_array()[1].as_int();
      if (v.shape.size() != 2 || v.row0 < 0 || v.nrows <= 0 || v.row0 + v.nrows > v.shape[0].c)
        throw_shape_mismatch("graph weight '" + v.name + "' (rows view of " + v.tensor + ")",
                             {v.row0, v.nrows}, shape_vec(v.shape));
      v.shape[0] = cst(v.nrows);
    }
    g.add_value(std::move(v));
  }

  // [[state]]
  for (const toml::Value& t : table_array(doc, "state")) {
    Value v;
    v.kind = ValueKind::State;
    v.name = need_string(t, "name", "state");
    const std::string& kind = need_string(t, "kind", "state." + v.name);
    if (kind != "kv_cache")
      throw_format("graph", "state." + v.name + ".kind", "unknown state kind '" + kind + "' (kv_cache)");
    int64_t dims[2] = {0, 0};
    const char* keys[2] = {"n_kv_heads", "head_dim"};
    for (int i = 0; i < 2; ++i) {
      const toml::Value* x = t.find(keys[i]);
      const std::string f = "graph.state." + v.name + "." + keys[i];
      if (!x) throw_invalid_config(f, "required key is missing");
      if (!x->is_int()) throw_invalid_config(f, "must be an integer");
      dims[i] = positive_int(*x, f, 1 << 12);
    }
    v.shape = {cst(dims[0]), Dim{1, Sym::C}, cst(dims[1])};
    g.add_value(std::move(v));
  }

  // [[nodes]]: first pass declares every output (to tell a cycle from an undefined name)
  const toml::Value::Array& nodes = table_array(doc, "nodes");
  std::unordered_map<std::string, size_t> defined_by;  // value name -> node position
  std::vector<std::string> node_names;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const toml::Value& t = nodes[i];
    const std::string name = need_string(t, "name", "nodes[" + std::to_string(i) + "]");
    node_names.push_back(name);
    if (const toml::Value* o = t.find("outputs"); o && o->is_array())
      for (const toml::Value& e : o->as_array())
        if (e.is_string() && !defined_by.count(e.as_string())) defined_by[e.as_string()] = i;
  }
  {
    std::set<std::string> seen;
    for (const std::string& n : node_names)
      if (!seen.insert(n).second) throw_format("graph", "nodes." + n, "two nodes are named '" + n + "'");
  }

  // A use before definition: find whether it closes a cycle (names it) or is just out of order.
  auto order_error = [&](size_t user, const std::string& value) {
    // dependency edges among nodes: node j depends on the producers of its inputs
    std::vector<std::vector<size_t>> deps(nodes.size());
    for (size_t j = 0; j < nodes.size(); ++j) {
      if (const toml::Value* ins = nodes[j].find("inputs"); ins && ins->is_array())
        for (const toml::Value& e : ins->as_array())
          if (e.is_string()) {
            auto it = defined_by.find(e.as_string());
            if (it != defined_by.end()) deps[j].push_back(it->second);
          }
    }
    // DFS from the producer of `value` looking for `user`
    std::vector<int> state(nodes.size(), 0);
    std::vector<size_t> path;
    std::function<bool(size_t)> dfs = [&](size_t u) -> bool {
      if (u == user) return true;
      if (state[u]) return false;
      state[u] = 1;
      path.push_back(u);
      for (size_t d : deps[u])
        if (dfs(d)) return true;
      path.pop_back();
      return false;
    };
    const size_t prod = defined_by[value];
    if (prod == user || dfs(prod)) {
      std::string cyc = node_names[user];
      for (size_t p : path) cyc += " -> " + node_names[p];
      cyc += " -> " + node_names[user];
      throw_format("graph", "nodes." + node_names[user],
                   "cycle: " + cyc + " (node '" + node_names[user] + "' uses '" + value +
                       "', which depends on its own output)");
    }
    throw_format("graph", "nodes." + node_names[user],
                 "nodes are not in topological order: '" + node_names[user] + "' uses '" + value +
                     "' before node '" + node_names[prod] + "' defines it");
  };

  for (size_t i = 0; i < nodes.size(); ++i) {
    const toml::Value& t = nodes[i];
    Node n;
    n.name = node_names[i];
    const std::string where = "nodes." + n.name;
    for (const auto& kv : t.as_table()) {
      static const std::set<std::string> known = {"name", "op", "tag", "inputs", "outputs", "attrs"};
      if (!known.count(kv.first)) throw_format("graph", where + "." + kv.first, "unknown node key '" + kv.first + "'");
    }
    const std::string& opname = need_string(t, "op", where);
    if (!parse_op_name(opname.c_str(), &n.kind))
      throw_unsupported_op(opname + " (graph node '" + n.name + "')", "graph", "");
    if (n.kind == OpKind::FusedRopeKv)  // the decoder family's fusions; a graph writes the ops they fuse
      throw_unsupported_op(opname + " (graph node '" + n.name + "': write rope and kv_write nodes)", "graph", "");
    if (n.kind == OpKind::FusedRopeAttention)
      throw_unsupported_op(opname + " (graph node '" + n.name + "': write rope, kv_write and attention nodes)",
                           "graph", "");
    if (n.kind == OpKind::FusedQkv)
      throw_unsupported_op(opname + " (graph node '" + n.name + "': write three matmul nodes)", "graph", "");
    if (n.kind == OpKind::FusedNormQkv || n.kind == OpKind::FusedNormSwiGlu)
      throw_unsupported_op(opname + " (graph node '" + n.name + "': write rms_norm and the product's nodes)", "graph",
                           "");
    if (const toml::Value* tag = t.find("tag")) {
      if (!tag->is_int()) throw_invalid_config("graph." + where + ".tag", "must be an integer");
      if (tag->as_int() != static_cast<int64_t>(n.kind))
        throw_invalid_config("graph." + where + ".tag",
                             "tag " + std::to_string(tag->as_int()) + " does not match op '" + opname +
                                 "' (tag " + std::to_string(static_cast<int>(n.kind)) + ")");
    }
    const OpSchema& spec = op_schema(n.kind);
    const std::vector<std::string> ins = string_list(t, "inputs", where);
    const std::vector<std::string> outs = string_list(t, "outputs", where);
    if (static_cast<int>(ins.size()) < spec.min_in || static_cast<int>(ins.size()) > spec.max_in)
      throw_format("graph", where + ".inputs",
                   "op '" + opname + "' takes " + std::to_string(spec.min_in) +
                       (spec.max_in != spec.min_in ? ".." + std::to_string(spec.max_in) : std::string()) +
                       " inputs, got " + std::to_string(ins.size()));
    if (static_cast<int>(outs.size()) != spec.n_out)
      throw_format("graph", where + ".outputs",
                   "op '" + opname + "' has " + std::to_string(spec.n_out) + " outputs, got " +
                       std::to_string(outs.size()));
    for (const std::string& in : ins) {
      int id = g.find(in);
      if (id < 0) {
        if (defined_by.count(in)) order_error(i, in);
        throw_format("graph", where + ".inputs",
                     "input '" + in + "' of node '" + n.name +
                         "' is not defined (no graph input, weight, state or earlier node output has that name)");
      }
      n.inputs.push_back(id);
    }
    if (spec.positions && g.values[static_cast<size_t>(n.inputs.back())].kind != ValueKind::Positions)
      throw_format("graph", where + ".inputs", "the last input of '" + opname + "' must be the positions input");
    for (size_t k = 0; k + (spec.positions ? 1 : 0) < n.inputs.size(); ++k) {
      const ValueKind vk = g.values[static_cast<size_t>(n.inputs[k])].kind;
      if (vk == ValueKind::Positions || (vk == ValueKind::OutputRows && n.kind != OpKind::LastRows))
        throw_format("graph", where + ".inputs", "input '" + ins[k] + "' cannot feed op '" + opname + "'");
    }
    if (n.kind == OpKind::LastRows && g.values[static_cast<size_t>(n.inputs[1])].kind != ValueKind::OutputRows)
      throw_format("graph", where + ".inputs", "the second input of last_rows must be the output_rows input");

    // attributes
    const toml::Value* attrs = t.find("attrs");
    if (attrs && !attrs->is_table()) throw_invalid_config("graph." + where + ".attrs", "must be a table");
    auto attr = [&](const char* key) -> const toml::Value* { return attrs ? attrs->find(key) : nullptr; };
    if (attrs)
      for (const auto& kv : attrs->as_table()) {
        const AttrSpec* s = nullptr;
        for (const AttrSpec& a : spec.attrs)
          if (kv.first == a.key) s = &a;
        if (!s) throw_invalid_config("graph." + where + ".attrs." + kv.first,
                                     "op '" + opname + "' has no attribute '" + kv.first + "'");
        if (!type_ok(kv.second, s->type))
          throw_invalid_config("graph." + where + ".attrs." + kv.first,
                               std::string("must be ") + attr_type_word(s->type));
      }
    for (const AttrSpec& a : spec.attrs)
      if (a.required && !attr(a.key))
        throw_invalid_config("graph." + where + ".attrs." + a.key, "required attribute is missing");
    const std::string af = "graph." + where + ".attrs.";
    // Values that land in OpAttrs, as the schema says (graph-only ones are read below).
    for (const AttrSpec& a : spec.attrs) {
      const toml::Value* v = attr(a.key);
      if (!v || a.field == AttrSpec::Field::None) continue;
      switch (a.type) {
        case AttrType::Float: {
          // the same domains as the curated config (core/config_check.h)
          const Domain d = a.field == AttrSpec::Field::Eps       ? Domain::Positive
                           : a.field == AttrSpec::Field::Softcap ? Domain::NonNegative
                                                                 : Domain::Finite;
          set_attr(n.attrs, a, check_domain(v->as_float(), d, af + a.key), 0, false);
          break;
        }
        case AttrType::Bool: set_attr(n.attrs, a, 0.0, 0, v->as_bool()); break;
        case AttrType::Int: {
          int64_t x = v->as_int();
          if (a.max > a.min) x = positive_int(*v, af + a.key, a.max);
          else if (x < 0) throw_invalid_config(af + a.key, "must be >= 0");
          set_attr(n.attrs, a, 0.0, x, false);
          break;
        }
        case AttrType::Enum: {
          const int c = attr_choice(a, v->as_string().c_str());
          if (c < 0) throw_invalid_config(af + a.key, std::string("must be one of ") + a.choices);
          set_attr(n.attrs, a, 0.0, c, false);
          break;
        }
        case AttrType::IntArray:
        case AttrType::Table: break;
      }
    }
    if (n.kind == OpKind::Softcap && !(n.attrs.softcap > 0.f))
      throw_invalid_config(af + "softcap", "must be positive");
    if (n.kind == OpKind::Reshape)
      for (const toml::Value& e : attr("shape")->as_array()) n.reshape.push_back(e.as_int());
    if (n.kind == OpKind::Rope) {
      RopeSpec r;
      r.rot_dims = positive_int(*attr("rot_dims"), af + "rot_dims", 1 << 12);
      r.theta = attr("theta")->as_float();
      r.max_pos = positive_int(*attr("max_position"), af + "max_position", 1 << 24);
      if (const toml::Value* v = attr("neox")) r.neox = v->as_bool();
      if (const toml::Value* v = attr("scaling")) r.scaling = parse_scaling(*v, af + "scaling");
      check_rope_domain(r.theta, r.scaling, af + "theta", af + "scaling");
      int found = -1;
      for (size_t k = 0; k < g.ropes.size(); ++k)
        if (g.ropes[k].same(r)) found = static_cast<int>(k);
      if (found < 0) {
        found = static_cast<int>(g.ropes.size());
        g.ropes.push_back(r);
      }
      n.rope = found;
    }

    // outputs: new values, except kv_write which names the state it writes
    const int node_index = static_cast<int>(g.nodes.size());
    for (const std::string& o : outs) {
      if (n.kind == OpKind::KvWrite) {
        const int id = g.find(o);
        if (id < 0 || g.values[static_cast<size_t>(id)].kind != ValueKind::State)
          throw_format("graph", where + ".outputs", "kv_write must write a [[state]] value, '" + o + "' is not one");
        n.outputs.push_back(id);
        continue;
      }
      Value v;
      v.name = o;
      v.kind = ValueKind::Node;
      v.producer = node_index;
      if (g.find(o) >= 0) throw_format("graph", where + ".outputs", "'" + o + "' is defined twice");
      n.outputs.push_back(g.add_value(std::move(v)));
    }
    g.nodes.push_back(std::move(n));
  }
  if (g.nodes.empty()) throw_format("graph", "nodes", "the graph has no nodes");

  // outputs
  {
    const toml::Value* o = doc.find("outputs");
    if (!o) throw_format("graph", "outputs", "'outputs' is required");
    for (const std::string& name : string_list(doc, "outputs", "outputs")) {
      const int id = g.find(name);
      if (id < 0) throw_format("graph", "outputs", "output '" + name + "' is not defined");
      g.outputs.push_back(id);
    }
    if (g.outputs.size() != 1) throw_format("graph", "outputs", "version 1 graphs have exactly one output (the logits)");
  }

  infer_shapes(g);
  const Value& out = g.values[static_cast<size_t>(g.outputs[0])];
  if (out.kind != ValueKind::Node || out.shape.size() != 2 || out.shape[0] != Dim{1, Sym::R})
    throw_shape_mismatch("graph output '" + out.name + "' (logits must be [R, vocab]: " + sym_shape_str(out.shape) + ")",
                         {-1, -1}, shape_vec(out.shape));
  return g;
}

Graph parse_graph_text(const std::string& text, const WeightLookup& lookup) {
  return parse_graph(toml::parse(text, "graph"), lookup);
}

int FusionReport::count(const std::string& pattern) const {
  int n = 0;
  for (const FusionEntry& e : fused) n += e.pattern == pattern;
  return n;
}

std::string FusionReport::text() const {
  if (!enabled) return "fusion: disabled";
  std::string s;
  const std::vector<std::string> v1 = {"fused_skip_norm", "fused_swiglu", "fused_norm_matmul"};
  for (const std::string& p : patterns.empty() ? v1 : patterns)
    s += std::string(s.empty() ? "" : ", ") + p + " x" + std::to_string(count(p));
  for (const auto& nf : not_fused) s += "; " + nf.first + ": not fused: " + nf.second;
  return "fusion: " + s;
}

}  // namespace graph
}  // namespace cyb
