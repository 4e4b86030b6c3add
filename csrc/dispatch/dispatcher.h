// Per-op dispatch with the fallback chain of docs/runtime.md:
// the first backend of the chain whose supports() says yes runs the op; the
// CPU backend, last in every chain, supports every op. Every decision is
// recorded (aggregated per label, without allocating in steady state).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/exec_context.h"
#include "dispatch/backend.h"

namespace cyb {

struct DispatchRecord {
  std::string label;      // op label ("layers.5.attention") or the op name
  std::string op;         // op name
  std::string backend;    // backend that ran it
  bool fallback = false;  // true when the preferred backend rejected it
  // A shape computation of a version-2 graph on a device backend: a node whose inputs are all
  // known without running the graph's data (constants, shapes), run on the host by design (its
  // values size later nodes); `fallback` is true too (the cpu ran it).
  bool host_shape = false;
  uint64_t count = 0;
  double total_ms = 0.0;  // only when profiling is on
};

class Dispatcher {
 public:
  // chain: preferred backend first, CPU last.
  explicit Dispatcher(std::vector<Backend*> chain);
  void run(const Op& op, const Tensor* inputs, int n_inputs, Tensor* outputs, int n_outputs,
           ExecContext& ctx);
  // The same on the last backend of the chain (the host), recorded as a host shape computation.
  void run_host_shape(const Op& op, const Tensor* inputs, int n_inputs, Tensor* outputs, int n_outputs,
                      ExecContext& ctx);
  void run(const Op& op, std::initializer_list<Tensor> inputs, std::initializer_list<Tensor*> outputs,
           ExecContext& ctx);
  // Records work that is not an op of the schema (device sampling: op "sample") as run by `b`.
  void record(const char* label, const char* op, const Backend* b);
  void set_profiling(bool on) { profiling_.store(on, std::memory_order_relaxed); }
  std::vector<DispatchRecord> records() const;
  void clear_records();  // zeroes the counters (keeps the slots: no allocation afterwards)
  const std::vector<Backend*>& chain() const { return chain_; }
  // Keeps a backend created for this dispatcher's model alive as long as the dispatcher.
  void adopt(std::unique_ptr<Backend> b) { owned_.push_back(std::move(b)); }

 private:
  std::vector<Backend*> chain_;
  std::vector<std::unique_ptr<Backend>> owned_;
  std::atomic<bool> profiling_{false};  // set from any thread while forwards run
  struct Slot;
  std::vector<Slot*> slots_;
  void run_impl(const Op& op, const Tensor* inputs, int n_inputs, Tensor* outputs, int n_outputs,
                ExecContext& ctx, bool host_shape);
  std::vector<DispatchRecord> extra_;  // record(): few entries, under the index's lock
  void* index_ = nullptr;
 public:
  ~Dispatcher();
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;
};

}  // namespace cyb
