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
  // Called with a packed weight's source bytes once its copy is built (a model gives
  // ModelFile::release_pages: the file's pages of the original leave the resident set); returns
  // the bytes handed back.
  using Release = std::function<size_t(const void* src, size_t bytes)>;
  void set_release(Release r) { release_ = std::move(r); }

  // The 64-byte aligned buffer of `bytes` bytes kept for (key, tag); on first use
  // fill(buffer) writes it (under the cache's lock: other callers wait). `source_bytes` > 0: the
  // copy is built from the `source_bytes` bytes at `key` alone and the kernel reads only the copy
  // from then on, so they go to the release hook (set_release) once the copy is built.
  const void* get(const void* key, int tag, size_t bytes, const std::function<void(void*)>& fill,
                  size_t source_bytes = 0);
  size_t bytes() const;
  // The source bytes the release hook handed back (each source counted once).
  size_t released_bytes() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<const void*, int>, std::pair<void*, size_t>> entries_;
  size_t bytes_ = 0;
  Release release_;
  std::map<const void*, size_t> released_;  // source -> bytes handed back
  size_t released_bytes_ = 0;
};

}  // namespace cyb
