// The run of a version-2 graph (docs/graph.md "Version 2"): the graph's values (initializers of the
// file, constants, inputs, node outputs) as typed host buffers, views resolved here, every other
// node dispatched through a Dispatcher; on nox also the digest chain of version 2 (docs/graph.md
// "The digest chain"). Used by the model (array_graph_model.cc) and by tools/nox_golden2.cc.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/nox/sha256.h"
#include "core/exec_context.h"
#include "core/host_array.h"
#include "dispatch/dispatcher.h"
#include "format/model_file.h"
#include "graph/array_graph.h"

namespace cyb {

class ArrayGraphRun {
 public:
  // Binds the parsed graph to the file's initializers (the file must outlive this) and to its
  // constants; nox: the digests of those fixed values are computed once here.
  ArrayGraphRun(graph2::Graph g, const ModelFile& file, bool nox);
  ArrayGraphRun(const ArrayGraphRun&) = delete;  // the nodes' labels point into g_
  ArrayGraphRun& operator=(const ArrayGraphRun&) = delete;
  const graph2::Graph& graph() const { return g_; }
  // The fusion pass of version-2 graphs (graph/array_fusion.cc) over this graph, once, before the
  // first run: rewrites where `primary` supports the fused op; the report says what fused and why not.
  graph::FusionReport fuse(const Backend& primary);
  // One run: the inputs checked against the graph's declarations, every node in order; `digest`
  // (nox only, may be null) receives the hex digest of the chain.
  // options.seed: the random nodes' seed for this run (seed_for_node(seed, k) for the k-th).
  // ctx's weight cache (may be null) is offered to the nodes whose inputs after the first are all
  // fixed values of the model, whose addresses stay for its life (conv keeps its packed weights).
  // check (may be empty): called before each allocation of node outputs or output copies with the
  // bytes this run holds and the bytes it is about to allocate; throws (OutOfMemory) to refuse,
  // naming what() (built only then: a run calls it once a node).
  using BudgetCheck =
      std::function<void(int64_t in_use, int64_t need, const std::function<std::string()>& what)>;
  NamedArrays run(const NamedArrays& inputs, const RunOptions& options, Dispatcher& d, ExecContext& ctx,
                  std::string* digest, const BudgetCheck& check = {}) const;
  // The declared input names, comma separated (error messages).
  std::string input_names() const;

  // A value of a run: a typed, shaped host buffer (owned, or a view of the file / an input / another value).
  struct Val {
    DType dtype = DType::F32;
    Shape shape;
    const void* data = nullptr;
    std::shared_ptr<void> own;
  };
  class BufferPool;  // (array_graph_run.cc)

 private:
  static Tensor tensor_of(const Val& v);
  void index_nodes();  // node labels and each value's last reader
  Shape reshaped(const graph2::Node& n, const Shape& x) const;
  std::vector<Shape> output_shapes(const graph2::Node& n, const std::vector<Tensor>& in) const;

  graph2::Graph g_;
  bool nox_ = false;
  std::unordered_map<std::string, Val> fixed_;
  std::unordered_map<std::string, size_t> last_use_;
  std::unordered_map<std::string, Sha256::Digest> fixed_digest_;  // nox: D(t) of each fixed value
  // Per node: every input after the first is fixed (an initializer or constant, or absent), so a
  // kernel may keep its weights in the context's weight cache by address (it is hidden otherwise).
  std::vector<char> rest_fixed_;
  std::shared_ptr<BufferPool> pool_;  // the node outputs' buffers (not on nox: zeroed buffers there)
};

}  // namespace cyb
