#include "core/weight_cache.h"

#include <new>

#include "core/frame_allocator.h"

namespace cyb {

namespace {
void* aligned64(size_t bytes) {
  void* p = aligned_alloc_bytes(bytes, 64);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

WeightCache::~WeightCache() {
  for (auto& e : entries_) aligned_free_bytes(e.second.first);
}

const void* WeightCache::get(const void* key, int tag, size_t bytes, const std::function<void(void*)>& fill,
                             size_t source_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find({key, tag});
  if (it != entries_.end() && it->second.second == bytes) return it->second.first;
  void* p = aligned64(bytes);
  try {
    fill(p);
  } catch (...) {
    aligned_free_bytes(p);
    throw;
  }
  if (it != entries_.end()) {
    bytes_ -= it->second.second;
    aligned_free_bytes(it->second.first);
    it->second = {p, bytes};
  } else {
    entries_[{key, tag}] = {p, bytes};
  }
  bytes_ += bytes;
  if (release_ && source_bytes > 0) {
    const size_t r = release_(key, source_bytes);
    size_t& was = released_[key];
    if (r > was) {
      released_bytes_ += r - was;
      was = r;
    }
  }
  return p;
}

size_t WeightCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t WeightCache::released_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return released_bytes_;
}

}  // namespace cyb
