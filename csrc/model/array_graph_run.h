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
  ~ArrayGraphRun();
  ArrayGraphRun(const ArrayGraphRun&) = delete;  // the nodes' labels point into g_
  ArrayGraphRun& operator=(const ArrayGraphRun&) = delete;
  const graph2::Graph& graph() const { return g_; }
  // The fusion pass of version-2 graphs (graph/array_fusion.cc) over this graph, once, before the
  // first run: rewrites where `primary` supports the fused op; the report says what fused and why not.
  graph::FusionReport fuse(const Backend& primary);
  // One run: the inputs checked against the graph's declarations, every node in order; `digest`
  // (nox only, may be null) receives the hex digest of the chain.
  // options.seed: the random nodes' seed for this run (seed_for_node(seed, k) for the k-th).
  // check (may be empty): called before each allocation of node outputs or output copies with the
  // bytes this run holds and the bytes it is about to allocate; throws (OutOfMemory) to refuse.
  using BudgetCheck = std::function<void(int64_t in_use, int64_t need, const std::string& what)>;
  NamedArrays run(const NamedArrays& inputs, const RunOptions& options, Dispatcher& d, ExecContext& ctx,
                  std::string* digest, const BudgetCheck& check = {}) const;
  // The declared input names, comma separated (error messages).
  std::string input_names() const;

  // A value of a run: a typed, shaped host buffer (owned, or a view of the file / an input / another
  // value) and / or, on a device backend, a device tensor (dev.data non-null; owned by dev_own, a
  // frame of the forward, or one of the fixed values' device copies). Each side is made from the
  // other at its first use (an upload, a read-back) and kept while the value lives.
  struct Val {
    DType dtype = DType::F32;
    Shape shape;
    const void* data = nullptr;
    std::shared_ptr<void> own;
    Tensor dev;
    std::shared_ptr<void> dev_own;
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
  // Values known without the graph's data (constants, initializers, shapes, and what nodes make
  // of only those): on a device backend their nodes run on the host (host shape computations).
  std::unordered_map<std::string, bool> shape_only_;
  // The fixed values' device copies (uploaded at first use, kept across runs) and their backend.
  mutable std::unordered_map<std::string, Tensor> fixed_dev_;
  mutable Backend* fixed_dev_backend_ = nullptr;
  std::unordered_map<std::string, Sha256::Digest> fixed_digest_;  // nox: D(t) of each fixed value
  std::shared_ptr<BufferPool> pool_;  // the node outputs' buffers (not on nox: zeroed buffers there)
};

}  // namespace cyb
