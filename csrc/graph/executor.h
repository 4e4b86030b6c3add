// The native graph executor: walks a validated (and possibly fused) graph in
// order, binds inputs / weights / KV-cache state, allocates each intermediate
// from the conversation's frame memory and recycles it after its last use,
// and dispatches every node through the model's Dispatcher (labels = node names).
// Reshape and last_rows are views: resolved here, no kernel runs.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dispatch/dispatcher.h"
#include "graph/graph.h"

namespace cyb {
namespace graph {

// Called after every node (views included) with its concrete tensors; used by
// the nox backend to chain its digest. `visible` is the number of valid cache
// positions (pos0 + T) for state tensors.
class NodeObserver {
 public:
  virtual ~NodeObserver() = default;
  virtual void begin(int64_t pos0, int64_t T) = 0;
  virtual void on_node(const Node& n, const Tensor* in, int n_in, const Tensor* out, int n_out,
                       const char* in_is_state, const char* out_is_state,
                       int64_t visible) = 0;
};

// Per-conversation state of the executor (KV caches and reusable scratch).
struct ExecState {
  std::vector<Tensor> states;   // by position in Executor::state_ids()
  std::vector<Tensor> vals;     // by value id, valid during a forward
  std::vector<Tensor> free;     // recycled intermediates of the current forward
  Backend* owner = nullptr;     // backend that allocated `states`
  int32_t pos_scalar = 0, rows_scalar = 0;
  ~ExecState() {
    if (owner)
      for (Tensor& t : states) owner->release(t);
  }
};

class Executor {
 public:
  // `weight(value)` returns the tensor bound to a weight value (mapped memory);
  // `rope_tables(spec, cos, sin)` builds a RoPE table (the nox backend brings its own).
  using WeightFn = std::function<Tensor(const Value&)>;
  using RopeFn = std::function<void(const RopeSpec&, std::vector<float>&, std::vector<float>&)>;
  Executor(Graph g, FusionReport report, const WeightFn& weight, const RopeFn& rope);

  const Graph& graph() const { return g_; }
  const FusionReport& fusion_report() const { return report_; }
  int64_t vocab() const { return vocab_; }
  int64_t max_position() const { return max_pos_; }

  // KV caches for max_context positions, allocated on `b` (dtype f32 or f16); the RoPE
  // tables grow to max_context positions if they are shorter.
  std::unique_ptr<ExecState> new_state(Backend& b, int64_t max_context, DType cache_dtype) const;
  // Bytes new_state allocates for its KV caches (the memory budget, docs/errors.md).
  int64_t state_bytes(int64_t max_context, DType cache_dtype) const;
  // Bytes one more RoPE table growth to `positions` would allocate (0 when they suffice).
  int64_t rope_growth_bytes(int64_t positions) const;
  // Runs ids[0..T) at position pos0; writes [vocab] (last row) or [T, vocab] floats.
  void forward(ExecState& st, ExecContext& ctx, Dispatcher& d, const int32_t* ids, int64_t T, int64_t pos0,
               int64_t max_context, bool all_logits, float* logits, NodeObserver* obs) const;

 private:
  Graph g_;
  FusionReport report_;
  std::vector<Tensor> weights_;  // by value id
  // RoPE tables, one per graph rope spec, grown to the largest max_context asked so far
  // (core/rope.h RopeCache; built by rope_fn_).
  RopeFn rope_fn_;
  mutable RopeCache rope_;
  std::vector<Op> ops_;                        // per node, label = node name
  std::vector<int> root_;                      // view -> the value owning the memory
  std::vector<std::vector<int>> free_after_;   // per node: roots dead after it
  std::vector<int> state_ids_;                 // value ids of the states
  std::vector<int> state_slot_;                // value id -> index into states (or -1)
  int64_t vocab_ = 0, max_pos_ = 0;
};

}  // namespace graph
}  // namespace cyb
