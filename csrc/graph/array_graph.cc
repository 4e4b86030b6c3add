#include "graph/array_graph.h"

#include <set>

#include "core/errors.h"
#include "dispatch/op_schema.h"
#include "graph/graph.h"

namespace cyb {
namespace graph2 {

namespace {

std::string need_str(const toml::Value& t, const char* key, const std::string& where, bool allow_empty = false) {
  const toml::Value* v = t.find(key);
  if (!v || !v->is_string() || (!allow_empty && v->as_string().empty()))
    throw_format("graph", where + "." + key, std::string("'") + key + "' must be a non-empty string");
  return v->as_string();
}

void only_keys(const toml::Value& t, std::initializer_list<const char*> keys, const std::string& where) {
  for (const auto& kv : t.as_table()) {
    bool ok = false;
    for (const char* k : keys) ok = ok || kv.first == k;
    if (!ok) throw_format("graph", where + "." + kv.first, "unknown key '" + kv.first + "'");
  }
}

DType need_dtype(const toml::Value& t, const std::string& where) {
  const std::string s = need_str(t, "dtype", where);
  DType d;
  if (!parse_encoding(s, &d) || !(d == DType::F32 || d == DType::F16 || is_int_dtype(d)))
    throw_format("graph", where + ".dtype", "'" + s + "' is not an array dtype (f32, f16, i32, i64, i8, u8, bool)");
  return d;
}

std::vector<Dim> need_dims(const toml::Value& t, const std::string& where) {
  const toml::Value* v = t.find("shape");
  if (!v || !v->is_array()) throw_format("graph", where + ".shape", "'shape' must be an array of sizes and names");
  std::vector<Dim> r;
  for (const toml::Value& e : v->as_array()) {
    Dim d;
    if (e.is_int() && e.as_int() >= 0) d.size = e.as_int();
    else if (e.is_string() && !e.as_string().empty()) d.sym = e.as_string();
    else throw_format("graph", where + ".shape", "dims are sizes >= 0 or non-empty names");
    r.push_back(d);
  }
  if (r.size() > static_cast<size_t>(Shape::kMaxDims)) throw_format("graph", where + ".shape", "at most 8 dims");
  return r;
}

std::vector<int64_t> ints_of(const toml::Value& v, const std::string& field) {
  if (!v.is_array()) throw_invalid_config(field, "must be an array of integers");
  std::vector<int64_t> r;
  for (const toml::Value& e : v.as_array()) {
    if (!e.is_int()) throw_invalid_config(field, "must be an array of integers");
    r.push_back(e.as_int());
  }
  return r;
}

void parse_attrs(Node& n, const toml::Value* attrs, const std::string& where) {
  const OpSchema& s = op_schema(n.kind);
  const std::string af = "graph.nodes." + n.name + ".attrs.";
  std::set<std::string> seen;
  if (attrs) {
    if (!attrs->is_table()) throw_format("graph", where + ".attrs", "'attrs' must be a table");
    for (const auto& kv : attrs->as_table()) {
      const AttrSpec* a = s.attr(kv.first.c_str());
      if (!a)
        throw_invalid_config(af + kv.first, std::string("op '") + s.name + "' has no attribute '" + kv.first + "'");
      const toml::Value& v = kv.second;
      const std::string f = af + kv.first;
      seen.insert(kv.first);
      switch (a->type) {
        case AttrType::Float:
          if (!v.is_number()) throw_invalid_config(f, "must be a number");
          set_attr(n.op.a, *a, v.as_float(), 0, false);
          break;
        case AttrType::Bool:
          if (!v.is_bool()) throw_invalid_config(f, "must be a boolean");
          set_attr(n.op.a, *a, 0.0, 0, v.as_bool());
          break;
        case AttrType::Int:
          if (!v.is_int()) throw_invalid_config(f, "must be an integer");
          if (a->max > a->min && (v.as_int() < a->min || v.as_int() > a->max))
            throw_invalid_config(f, "must be in [" + std::to_string(a->min) + ", " + std::to_string(a->max) + "]");
          set_attr(n.op.a, *a, 0.0, v.as_int(), false);
          break;
        case AttrType::Enum: {
          const int c = v.is_string() ? attr_choice(*a, v.as_string().c_str()) : -1;
          if (c < 0) throw_invalid_config(f, std::string("must be one of ") + a->choices);
          set_attr(n.op.a, *a, 0.0, c, false);
          break;
        }
        case AttrType::IntArray:
          if (n.kind == OpKind::Reshape) n.reshape = ints_of(v, f);
          else set_attr_ints(n.op.a, *a, ints_of(v, f), f);
          break;
        case AttrType::Table:
          throw_invalid_config(f, "table attributes are not part of version 2");
      }
    }
  }
  for (const AttrSpec& a : s.attrs)
    if (a.required && !seen.count(a.key)) throw_invalid_config(af + a.key, "required attribute is missing");
  if (n.kind == OpKind::Reshape) {
    int minus = 0;
    for (int64_t d : n.reshape) {
      if (d < -1) throw_invalid_config(af + "shape", "dims are sizes, 0 (the input's) or one -1");
      minus += d == -1;
    }
    if (minus > 1 || n.reshape.empty() || n.reshape.size() > static_cast<size_t>(Shape::kMaxDims))
      throw_invalid_config(af + "shape", "1 to 8 dims, at most one -1");
  }
}

}  // namespace

bool is_version2(const toml::Value& doc) {
  const toml::Value* v = doc.find("version");
  return v && v->is_int() && v->as_int() == 2;
}

Graph parse(const toml::Value& doc, const std::function<bool(const std::string&)>& has_tensor) {
  if (!is_version2(doc)) throw_format("graph", "version", "expected version = 2");
  only_keys(doc, {"version", "inputs", "outputs", "initializers", "constants", "nodes", "state"}, "graph");
  Graph g;
  std::set<std::string> defined;
  auto define = [&](const std::string& name, const std::string& where) {
    if (!defined.insert(name).second) throw_format("graph", where, "name '" + name + "' is defined twice");
  };
  for (const toml::Value& t : graph::table_array(doc, "inputs")) {
    only_keys(t, {"name", "dtype", "shape"}, "inputs");
    IoSpec io{need_str(t, "name", "inputs"), need_dtype(t, "inputs"), need_dims(t, "inputs")};
    define(io.name, "inputs");
    g.inputs.push_back(io);
  }
  if (g.inputs.empty()) throw_format("graph", "inputs", "a version-2 graph declares at least one input");
  for (const toml::Value& t : graph::table_array(doc, "initializers")) {
    only_keys(t, {"name", "tensor"}, "initializers");
    Initializer in{need_str(t, "name", "initializers"), ""};
    const toml::Value* tv = t.find("tensor");
    in.tensor = tv ? need_str(t, "tensor", "initializers") : in.name;
    if (!has_tensor(in.tensor)) throw_missing_tensor(in.tensor, "graph initializer '" + in.name + "'");
    define(in.name, "initializers");
    g.initializers.push_back(in);
  }
  for (const toml::Value& t : graph::table_array(doc, "constants")) {
    only_keys(t, {"name", "dtype", "shape", "values"}, "constants");
    Constant c;
    c.name = need_str(t, "name", "constants");
    c.dtype = need_dtype(t, "constants." + c.name);
    for (const Dim& d : need_dims(t, "constants." + c.name)) {
      if (!d.known()) throw_format("graph", "constants." + c.name + ".shape", "constant dims are sizes");
      c.shape.push_back(d.size);
    }
    const toml::Value* vs = t.find("values");
    if (!vs || !vs->is_array()) throw_format("graph", "constants." + c.name + ".values", "must be an array of numbers");
    for (const toml::Value& e : vs->as_array()) {
      if (!e.is_number()) throw_format("graph", "constants." + c.name + ".values", "must be an array of numbers");
      if (is_int_dtype(c.dtype)) {
        if (!e.is_int()) throw_format("graph", "constants." + c.name + ".values", "integer constants take integers");
        c.ivalues.push_back(e.as_int());
      } else {
        c.values.push_back(e.as_float());
      }
    }
    const size_t n_values = is_int_dtype(c.dtype) ? c.ivalues.size() : c.values.size();
    int64_t n = 1;
    for (int64_t d : c.shape) n *= d;
    if (n != static_cast<int64_t>(n_values))
      throw_format("graph", "constants." + c.name + ".values",
                   std::to_string(n_values) + " values for " + std::to_string(n) + " elements");
    define(c.name, "constants");
    g.constants.push_back(std::move(c));
  }
  std::set<std::string> node_names;
  for (const toml::Value& t : graph::table_array(doc, "nodes")) {
    only_keys(t, {"name", "op", "inputs", "outputs", "attrs"}, "nodes");
    Node n;
    n.name = need_str(t, "name", "nodes");
    const std::string where = "nodes." + n.name;
    if (!node_names.insert(n.name).second) throw_format("graph", where, "node name defined twice");
    const std::string op = need_str(t, "op", where);
    if (!parse_op_name(op.c_str(), &n.kind))
      throw_unsupported_op(op + " (node '" + n.name + "')", "graph", "none");
    const OpSchema& s = op_schema(n.kind);
    if (s.positions || n.kind == OpKind::LastRows || (s.rule == ShapeRule::Given && n.kind != OpKind::Conv1d))
      throw_unsupported_op(op + " (node '" + n.name + "': token-stream ops are not part of version 2)", "graph",
                           "none");
    n.op.kind = n.kind;
    for (const char* key : {"inputs", "outputs"}) {
      const toml::Value* v = t.find(key);
      if (!v || !v->is_array()) throw_format("graph", where + "." + key, "must be an array of names");
      for (const toml::Value& e : v->as_array()) {
        if (!e.is_string()) throw_format("graph", where + "." + key, "must be an array of names");
        (key[0] == 'i' ? n.inputs : n.outputs).push_back(e.as_string());
      }
    }
    if (static_cast<int>(n.inputs.size()) < s.min_in || static_cast<int>(n.inputs.size()) > s.max_in ||
        static_cast<int>(n.outputs.size()) != s.n_out)
      throw_format("graph", where, "op '" + op + "' takes " + std::to_string(s.min_in) + ".." +
                                       std::to_string(s.max_in) + " inputs and " + std::to_string(s.n_out) +
                                       " outputs, got " + std::to_string(n.inputs.size()) + " and " +
                                       std::to_string(n.outputs.size()));
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const std::string& in = n.inputs[i];
      if (in.empty()) {
        // an absent optional input: only trailing ones past the required count
        bool trailing = true;
        for (size_t j = i; j < n.inputs.size(); ++j) trailing = trailing && n.inputs[j].empty();
        if (static_cast<int>(i) < s.min_in || !trailing)
          throw_format("graph", where + ".inputs", "only trailing optional inputs may be left empty");
        continue;
      }
      if (!defined.count(in))
        throw_format("graph", where + ".inputs",
                     "'" + in + "' is not defined before node '" + n.name + "' (nodes run in file order)");
    }
    while (!n.inputs.empty() && n.inputs.back().empty()) n.inputs.pop_back();
    parse_attrs(n, t.find("attrs"), where);
    for (const std::string& o : n.outputs) {
      if (o.empty()) throw_format("graph", where + ".outputs", "output names are non-empty");
      define(o, where + ".outputs");
    }
    g.nodes.push_back(std::move(n));
  }
  for (const toml::Value& t : graph::table_array(doc, "outputs")) {
    only_keys(t, {"name", "dtype", "shape"}, "outputs");
    IoSpec io{need_str(t, "name", "outputs"), need_dtype(t, "outputs"), need_dims(t, "outputs")};
    if (!defined.count(io.name)) throw_format("graph", "outputs", "output '" + io.name + "' is never produced");
    g.outputs.push_back(io);
  }
  if (g.outputs.empty()) throw_format("graph", "outputs", "a version-2 graph declares at least one output");
  for (const toml::Value& t : graph::table_array(doc, "state")) {
    only_keys(t, {"output", "input"}, "state");
    StatePair p{need_str(t, "output", "state"), need_str(t, "input", "state")};
    const IoSpec* o = nullptr;
    const IoSpec* i = nullptr;
    for (const IoSpec& s : g.outputs) o = s.name == p.output ? &s : o;
    for (const IoSpec& s : g.inputs) i = s.name == p.input ? &s : i;
    if (!o || !i) throw_format("graph", "state", "state pair " + p.output + " -> " + p.input +
                                                     " must name a declared output and a declared input");
    if (o->dtype != i->dtype)
      throw_format("graph", "state", "state pair " + p.output + " -> " + p.input + ": dtypes differ");
    g.state.push_back(p);
  }
  return g;
}

}  // namespace graph2
}  // namespace cyb
