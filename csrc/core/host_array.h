// A host array with a dtype and a shape: what a model's named-array entry point
// (Model::run) takes and returns, the way onnxruntime's sessions take named
// arrays. The bindings convert numpy arrays to and from it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace cyb {

struct HostArray {
  DType dtype = DType::F32;  // an unquantized dtype: F32, F16, BF16, I32, I64, U8
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // row-major, numel() * element size bytes

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// Options of one named-array run. seed: when set, the graph's random ops draw from it (node k of
// the graph's random ops uses seed_for_node(seed, k), core/counter_rng.h) instead of the seeds the graph holds.
struct RunOptions {
  bool has_seed = false;
  uint64_t seed = 0;
};

// Named arrays in a fixed order (inputs as the caller gave them, outputs as the model declares them).
using NamedArrays = std::vector<std::pair<std::string, HostArray>>;

}  // namespace cyb
