// The nox backend (docs/graph.md, the nox section): graph-only and deterministic. Every op
// runs single-threaded, reduces in a fixed sequential order in double and
// rounds once to f32; no FMA contraction (its files are compiled with
// -ffp-contract=off) and no libm (nox_math.h). Its outputs, and the SHA-256
// digest chained over every node (docs/graph.md "nox digest"), are
// bit-identical across runs, thread settings, optimization levels and compilers.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/nox/sha256.h"
#include "core/rope.h"
#include "dispatch/backend.h"

namespace cyb {

class NoxBackend : public Backend {
 public:
  const char* name() const override { return "nox"; }
  // Every unfused op on host f32 activations; fused ops are declined (the graph
  // stays unfused on nox, so the digest chain covers the unfused graph).
  bool supports(const Op& op, const Tensor* inputs, int n_inputs) const override;
  void execute(const Op& op, const Tensor* inputs, int n_inputs, Tensor* outputs, int n_outputs,
               ExecContext& ctx) override;
  void download_f32(const Tensor& t, float* out) override;
};

// The process-wide nox backend (stateless).
NoxBackend& nox_backend();

// The kernel of a graph-v2 op (op.h tags 33..44, 49..72, and conv1d) on nox, or null: the shared
// reference kernels under nox's math (nox_v2.cc).
using NoxV2Kernel = void (*)(const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out, ExecContext& ctx);
NoxV2Kernel nox_v2_kernel(OpKind kind);

// RoPE tables: core/rope.h's algorithm (build_rope_table_with) under nox's
// math policy (its own pow / log / floor / ceil / cos / sin, no FMA contraction).
void nox_build_rope_table(int rot_dims, int64_t max_pos, double theta, const RopeScaling& sc,
                          std::vector<float>& cos, std::vector<float>& sin);

// Digests of immutable weights, computed once per model (keyed by memory).
class NoxWeightDigests {
 public:
  Sha256::Digest get(const Tensor& t);

 private:
  std::mutex mu_;
  std::unordered_map<const void*, Sha256::Digest> cache_;
};

// SHA-256 of one tensor as the digest chain defines it (docs/graph.md);
// `visible` >= 0: a KV cache, only positions [0, visible) of every head.
Sha256::Digest nox_tensor_digest(const Tensor& t, int64_t visible = -1);

// The digest chain over the nodes of a forward is model/nox_tracer.h (nox
// knows no graph types).

}  // namespace cyb
