// The nox digest chain of one forward (docs/graph.md "nox digest"): a
// graph::NodeObserver that chains the SHA-256 of every node's inputs and
// outputs (nox_tensor_digest). Lives above both the graph executor and the nox
// backend, which know nothing of each other.
#pragma once
#include <cstdint>
#include <string>

#include "backends/nox/nox_backend.h"
#include "graph/executor.h"

namespace cyb {

class NoxTracer : public graph::NodeObserver {
 public:
  explicit NoxTracer(NoxWeightDigests* weights) : weights_(weights) {}
  void begin(int64_t pos0, int64_t T) override;
  void on_node(const graph::Node& n, const Tensor* in, int n_in, const Tensor* out, int n_out,
               const char* in_is_state, const char* out_is_state,
               int64_t visible) override;
  std::string hex() const { return Sha256::hex(chain_); }
  const Sha256::Digest& digest() const { return chain_; }
  uint64_t nodes() const { return nodes_; }

 private:
  NoxWeightDigests* weights_;
  Sha256::Digest chain_{};
  uint64_t nodes_ = 0;
};

}  // namespace cyb
