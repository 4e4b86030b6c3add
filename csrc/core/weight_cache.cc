#include "core/weight_cache.h"

#include <cstdlib>
#include <new>

namespace cyb {

namespace {
void* aligned64(size_t bytes) {
  const size_t n = (bytes + 63) / 64 * 64;
#if defined(_MSC_VER)
  void* p = _aligned_malloc(n, 64);
#else
  void* p = std::aligned_alloc(64, n == 0 ? 64 : n);
#endif
  if (!p) throw std::bad_alloc();
  return p;
}
void free64(void* p) {
#if defined(_MSC_VER)
  _aligned_free(p);
#else
  std::free(p);
#endif
}
}  // namespace

WeightCache::~WeightCache() {
  for (auto& e : entries_) free64(e.second.first);
}

const void* WeightCache::get(const void* key, int tag, size_t bytes, const std::function<void(void*)>& fill) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find({key, tag});
  if (it != entries_.end() && it->second.second == bytes) return it->second.first;
  void* p = aligned64(bytes);
  try {
    fill(p);
  } catch (...) {
    free64(p);
    throw;
  }
  if (it != entries_.end()) {
    bytes_ -= it->second.second;
    free64(it->second.first);
    it->second = {p, bytes};
  } else {
    entries_[{key, tag}] = {p, bytes};
  }
  bytes_ += bytes;
  return p;
}

size_t WeightCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace cyb
