// Weights kept in a kernel's own layout, built on first use and freed with their
// owner (a model): the amx level's fast float GEMM keeps its bf16 hi / lo panels
// here for the encoder family (docs/cpu-backend.md, "Precise and fast mode").
#pragma once
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <utility>

namespace cyb {

class WeightCache {
 public:
  WeightCache() = default;
  WeightCache(const WeightCache&) = delete;
  WeightCache& operator=(const WeightCache&) = delete;
  ~WeightCache();
  // The 64-byte aligned buffer of `bytes` bytes kept for (key, tag); on first use
  // fill(buffer) writes it (under the cache's lock: other callers wait).
  const void* get(const void* key, int tag, size_t bytes, const std::function<void(void*)>& fill);
  size_t bytes() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<const void*, int>, std::pair<void*, size_t>> entries_;
  size_t bytes_ = 0;
};

}  // namespace cyb
