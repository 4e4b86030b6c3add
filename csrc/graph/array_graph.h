// Graph sections of version 2 (docs/graph.md, "Version 2"): named inputs and outputs with
// dtypes and symbolic dims, initializers (tensors of the weights section), constants, nodes
// over the op schema, and state pairs (an output a pipeline feeds back as an input on the next
// call). The IR and its parser; model/array_graph_model.cc runs it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "dispatch/backend.h"
#include "dispatch/op.h"
#include "format/toml.h"
#include "graph/graph.h"

namespace cyb {
namespace graph2 {

// A dim: a known size (sym empty, size >= 0) or a named symbolic size ("seq_len").
struct Dim {
  int64_t size = -1;
  std::string sym;
  bool known() const { return sym.empty(); }
};

struct IoSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<Dim> shape;
};

struct Initializer {
  std::string name;    // the value name the nodes read
  std::string tensor;  // the tensor of the weights section
};

struct Constant {
  std::string name;
  DType dtype = DType::F32;  // any array dtype
  std::vector<int64_t> shape;
  std::vector<double> values;    // float dtypes
  std::vector<int64_t> ivalues;  // integer and bool dtypes (exact: ONNX's INT64_MAX slice ends)
};

struct Node {
  std::string name;
  OpKind kind = OpKind::COUNT_PLUS_ONE;
  Op op;                                // kind + attributes (label = name, set by the model)
  std::vector<int64_t> reshape;         // reshape: the target (0 = the input's dim, one -1)
  std::vector<std::string> inputs;      // "" = an absent optional input
  std::vector<std::string> outputs;
};

struct StatePair {
  std::string output, input;
};

struct Graph {
  std::vector<IoSpec> inputs, outputs;
  std::vector<Initializer> initializers;
  std::vector<Constant> constants;
  std::vector<Node> nodes;
  std::vector<StatePair> state;
};

// Whether a parsed graph section is version 2 (`version = 2`).
bool is_version2(const toml::Value& doc);

// Parses and validates a version-2 section: names defined once, nodes in topological order
// reading only defined names, op names and attributes against the schema (UnsupportedOp for an
// unknown op, InvalidConfig(field="graph.nodes.<node>.attrs.<key>") for attributes), every
// output produced, state pairs naming an output and an input of equal dtype.
// `has_tensor(name)` says whether the weights section holds a tensor (MissingTensor otherwise).
Graph parse(const toml::Value& doc, const std::function<bool(const std::string&)>& has_tensor);

// The values of a constant or initializer (as doubles), for the fusion pass's constant checks.
struct ConstantData {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<double> values;
  bool want_values = true;  // set false by a caller that needs only the dtype and shape
};
// Fills `out` when `name` is a constant or an initializer (false: a run-time value).
using ConstantFn = std::function<bool(const std::string& name, ConstantData* out)>;

// The fusion pass of version-2 graphs (graph/array_fusion.cc; docs/graph.md "Fusion of version-2
// graphs"): rewrites g in place where `primary.supports()` accepts the fused op, and says what it
// fused and what not.
graph::FusionReport fuse(Graph& g, const Backend& primary, const ConstantFn& constant);


}  // namespace graph2
}  // namespace cyb
