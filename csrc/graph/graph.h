// The graph IR of a `.model` graph section (docs/graph.md): values (inputs,
// weights, KV-cache state, node outputs) with symbolic shapes, nodes in
// topological order, parsed and validated at load; the structural fusion pass.
// (The decoder graph of a curated family is built in families/decoder_graph.h.)
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/rope.h"
#include "dispatch/backend.h"
#include "dispatch/op.h"
#include "format/toml.h"

namespace cyb {
namespace graph {

// The array of tables `key` of a graph section (empty when absent); FormatError naming the key when
// it is not an array of tables. Shared by the version-1 and version-2 parsers.
const toml::Value::Array& table_array(const toml::Value& doc, const char* key);

// A dimension: c, or c * T (sequence length of the forward), c * R (output rows:
// T when all logits are requested, else 1), c * C (max context of the conversation).
enum class Sym : uint8_t { None = 0, T = 1, R = 2, C = 3 };
struct Dim {
  int64_t c = 0;
  Sym sym = Sym::None;
  bool operator==(const Dim& o) const { return c == o.c && sym == o.sym; }
  bool operator!=(const Dim& o) const { return !(*this == o); }
  int64_t eval(int64_t T, int64_t R, int64_t C) const {
    switch (sym) {
      case Sym::T: return c * T;
      case Sym::R: return c * R;
      case Sym::C: return c * C;
      default: return c;
    }
  }
};
using SymShape = std::vector<Dim>;
std::string sym_shape_str(const SymShape& s);

enum class ValueKind : uint8_t { TokenIds, Positions, OutputRows, Weight, State, Node };

struct Value {
  std::string name;
  ValueKind kind = ValueKind::Node;
  DType dtype = DType::F32;
  SymShape shape;
  int producer = -1;  // node index for ValueKind::Node
  // ValueKind::Weight: tensor name and an optional row view [row0, row0 + nrows)
  std::string tensor;
  int64_t row0 = 0, nrows = -1;
};

struct RopeSpec {
  int rot_dims = 0;
  int64_t max_pos = 0;
  double theta = 10000.0;
  bool neox = true;
  RopeScaling scaling;
  bool same(const RopeSpec& o) const;
};

struct Node {
  std::string name;
  OpKind kind = OpKind::Matmul;
  OpAttrs attrs;                 // attrs.rope is bound by the executor (from `rope`)
  std::vector<int> inputs;       // value ids (for rope / attention / kv_write the last is the positions input)
  std::vector<int> outputs;      // value ids (kv_write: the state it writes)
  int rope = -1;                 // index into Graph::ropes (Rope nodes)
  std::vector<int64_t> reshape;  // Reshape: target shape (one -1 allowed)
};

struct FusionEntry {
  std::string pattern;               // "fused_skip_norm", "fused_swiglu", "fused_norm_matmul"
  std::string node;                  // name of the fused node
  std::vector<std::string> replaced; // names of the nodes it replaces
};
struct FusionReport {
  bool enabled = true;
  std::vector<FusionEntry> fused;
  std::vector<std::pair<std::string, std::string>> not_fused;  // (pattern, reason)
  std::vector<std::string> patterns;  // the patterns text() counts (empty: the version-1 pass's)
  int count(const std::string& pattern) const;
  std::string text() const;
};

struct Graph {
  int version = 1;
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<RopeSpec> ropes;
  int ids = -1, positions = -1, rows = -1;  // input value ids (rows optional)
  std::vector<int> outputs;
  std::unordered_map<std::string, int> index;  // value name -> id
  int find(const std::string& name) const {
    auto it = index.find(name);
    return it == index.end() ? -1 : it->second;
  }
  int add_value(Value v);  // throws Format on a duplicate name
};

struct WeightInfo {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
};
// Looks up a tensor of the file; false when absent.
using WeightLookup = std::function<bool(const std::string& name, WeightInfo* out)>;

// Parses and validates the graph section: structure, op names and tags,
// attribute types, topological order (cycles named), every input defined,
// weights present, shapes consistent (symbolic shape inference).
// Errors: Format (section "graph"), UnsupportedOp (unknown op), InvalidConfig
// (attribute of the wrong type), MissingTensor, ShapeMismatch.
Graph parse_graph(const toml::Value& doc, const WeightLookup& lookup);
Graph parse_graph_text(const std::string& text, const WeightLookup& lookup);

// Symbolic shape inference over g.nodes (also run again after fusion).
void infer_shapes(Graph& g);

// The structural fusion pass (once, at load): rewrites g in place where
// `primary.supports()` accepts the fused op.
FusionReport fuse(Graph& g, const Backend& primary);

}  // namespace graph
}  // namespace cyb
