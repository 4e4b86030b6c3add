// The run of a version-2 graph (docs/graph.md "Version 2"): the graph's values (initializers of the
// file, constants, inputs, node outputs) as typed host buffers, views resolved here, every other
// node dispatched through a Dispatcher; on nox also the digest chain of version 2 (docs/graph.md
// "The digest chain"). Used by the model (array_graph_model.cc) and by tools/nox_golden2.cc.
#pragma once
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
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

// Helpers the run and its plan share (array_graph_run.cc).
namespace array_graph_detail {
// Bytes of a value of `s` elements of `dt` plus 64 bytes of padding (vector loads); INT64_MAX when
// that does not fit an int64 (the budget check then refuses it).
int64_t value_bytes(const Shape& s, DType dt);
int64_t add_bytes(int64_t a, int64_t b);  // saturating at INT64_MAX
// "node 'x' (op y): its output f32 [2, 3]" (the budget check's words for a node's outputs)
std::string node_outputs_text(const graph2::Node& n, const std::vector<Shape>& shapes, const std::vector<DType>& dts);
std::string json_text(const std::string& s);  // a JSON string literal of s
}  // namespace array_graph_detail

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

  // ---- shapes and the memory plan (array_graph_plan.cc; docs/graph.md "Shapes and the memory plan")
  // A dim of the load-time inference: a size, an expression of the input dims' names ("seq_len",
  // "4*batch", "seq_len+2"), a fresh name for a size known only at run time ("<node>:<k>": a
  // data-dependent shape, or an expression the inference does not write), and `rank_known` false
  // when not even the rank is known.
  struct SymValue {
    DType dtype = DType::F32;
    bool rank_known = false;
    std::vector<std::string> dims;  // decimal sizes or expressions
  };
  // The load-time inference over every node (the schema's shape rules, one definition): called once
  // after fuse(); a shape error at a node whose input shapes depend on no input dim is thrown here
  // (naming the node). `eval`: the backend that computes small shape-valued tensors (shape, gather,
  // concat of dims...) on the host; `ctx` its context.
  void infer_shapes(Backend& eval, ExecContext& ctx);
  const std::map<std::string, SymValue>& symbolic_shapes() const { return sym_; }

  // The memory plan of a run whose input dims are `dims` (every symbolic dim of the inputs): each
  // node output's shape and bytes (unknown where the shape depends on data), its lifetime (the
  // node that writes it to the last node that reads it or a view of it; graph outputs live to the
  // end), and an offset in one arena where values whose lifetimes overlap never share bytes.
  struct PlanValue {
    std::string name, node, buffer;  // buffer: the value whose bytes a view shares ("" own / none)
    int first = 0, last = 0;         // node indices (last = node count: kept to the end)
    DType dtype = DType::F32;
    bool known = false;
    Shape shape;
    int64_t bytes = 0;    // value_bytes (64 bytes of padding included); 0 for views
    int64_t offset = -1;  // in the arena; -1: a view, or a size known only at run time
  };
  struct MemoryPlan {
    std::map<std::string, int64_t> dims;
    std::vector<PlanValue> values;  // node outputs, in node order
    std::vector<size_t> first_value;  // per node: the index of its first output in `values`
    int64_t peak_bytes = 0;      // the arena: every value of known size
    int64_t sum_bytes = 0;       // those values each in its own buffer
    int64_t live_max_bytes = 0;  // the most bytes alive at one node (no plan needs less)
    int64_t reused = 0;          // values placed on bytes an earlier, dead value had
    int64_t largest = -1;        // index into values of the largest value of known size
    std::vector<std::string> unknown;  // values whose size depends on data (allocated as they come)
    std::string json() const;
  };
  std::shared_ptr<const MemoryPlan> memory_plan(const std::map<std::string, int64_t>& dims, Backend& eval,
                                                ExecContext& ctx) const;
  // What the last run held: the arena it planned and the high-water mark of the bytes it held
  // (the arena plus the buffers of values sized at run time).
  struct RunMemory {
    int64_t planned_peak = 0, measured_peak = 0, dynamic_peak = 0;
    int64_t unknown_values = 0;
    int64_t unplanned = 0;  // values of known size the run did not find as planned (0 unless the plan is wrong)
  };
  RunMemory last_run_memory() const {
    std::lock_guard<std::mutex> lk(stats_mu_);
    return last_mem_;
  }
  // The node outputs' buffers kept for the next run (the pool): their bytes, and freeing them.
  size_t pooled_bytes() const;
  void release_buffers();
  // Hands back the resident pages of the graph's initializers that lie in `file`
  // (ModelFile::release_pages: they fault in again from the file at the next use); their bytes.
  size_t release_weight_pages(ModelFile& file) const;

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
  void index_nodes();  // node labels, each value's last reader, the lifetimes of the plan
  // The shapes of every value for these input dims (the caller's sizes, or probes); a value whose
  // shape the data decides is unknown, or (probe) gets sizes fresh(name) named after its node.
  struct DryVal;
  using FreshSize = std::function<int64_t(const std::string& name)>;
  void dry_run(const std::map<std::string, int64_t>& dims, bool probe, Backend& eval, ExecContext& ctx,
               std::unordered_map<std::string, DryVal>* vals, std::vector<std::exception_ptr>* errors,
               const FreshSize& fresh) const;
  // Checks a plan against the graph (every read inside its value's lifetime, no two values alive
  // together on the same bytes); std::logic_error otherwise.
  void verify_plan(const MemoryPlan& p) const;
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
  // Per node: every input after the first is fixed (an initializer or constant, or absent), so a
  // kernel may keep its weights in the context's weight cache by address (it is hidden otherwise).
  std::vector<char> rest_fixed_;
  std::shared_ptr<BufferPool> pool_;  // the node outputs' buffers (not on nox: zeroed buffers there)
  std::vector<int> lifetime_last_;    // per node output (plan order): the last node that needs its bytes
  std::map<std::string, SymValue> sym_;
  mutable std::mutex stats_mu_;
  mutable RunMemory last_mem_;
  mutable std::map<std::map<std::string, int64_t>, std::shared_ptr<const MemoryPlan>> plans_;  // a few recent dims
};

}  // namespace cyb
