#include "core/frame_allocator.h"

#include <cstdlib>

#include "core/errors.h"

#if defined(_WIN32)
#include <malloc.h>
#endif

namespace cyb {

void* aligned_alloc_bytes(size_t bytes, size_t align) {
  if (bytes == 0) bytes = align;
#if defined(_WIN32)
  void* p = _aligned_malloc(bytes, align);
#else
  void* p = nullptr;
  if (posix_memalign(&p, align, bytes) != 0) p = nullptr;
#endif
  return p;
}

void aligned_free_bytes(void* p) {
#if defined(_WIN32)
  _aligned_free(p);
#else
  std::free(p);
#endif
}

FrameAllocator::~FrameAllocator() {
  for (auto& kv : free_)
    for (void* p : kv.second) aligned_free_bytes(p);
  for (auto& e : in_use_) aligned_free_bytes(e.second);
}

void* FrameAllocator::alloc(size_t bytes, int usage) {
  const size_t size = (bytes + 63) / 64 * 64;
  const Key key{size == 0 ? 64 : size, usage};
  auto it = free_.find(key);
  void* p = nullptr;
  if (it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
  } else {
    p = aligned_alloc_bytes(key.size, 64);
    if (!p) throw_oom("cpu", key.size);
    pool_bytes_ += key.size;
    ++buffer_count_;
    // Make sure the free list for this key exists (and can hold every buffer of
    // this size) so reset() never allocates.
    auto& list = free_[key];
    list.reserve(list.size() + in_use_.size() + 1);
  }
  in_use_.emplace_back(key, p);
  return p;
}

void FrameAllocator::reset() {
  for (auto& e : in_use_) free_[e.first].push_back(e.second);
  in_use_.clear();
}

}  // namespace cyb
