// Frame allocator (docs/runtime.md, "Memory"): pools keyed by
// exact byte size and usage; everything handed out during a forward returns
// to the pool at reset(), called at the start of the next forward.
#pragma once
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace cyb {

// Host memory aligned to `align` (a power of two, >= sizeof(void*)); nullptr on failure.
void* aligned_alloc_bytes(size_t bytes, size_t align = 64);
void aligned_free_bytes(void* p);

class FrameAllocator {
 public:
  FrameAllocator() = default;
  ~FrameAllocator();
  FrameAllocator(const FrameAllocator&) = delete;
  FrameAllocator& operator=(const FrameAllocator&) = delete;

  // 64-byte aligned host memory of exactly `bytes` (rounded up to 64 internally).
  void* alloc(size_t bytes, int usage = 0);
  void reset();
  size_t pool_bytes() const { return pool_bytes_; }   // everything ever allocated
  size_t buffer_count() const { return buffer_count_; }

 private:
  struct Key {
    size_t size;
    int usage;
    bool operator==(const Key& o) const { return size == o.size && usage == o.usage; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return k.size * 31u + static_cast<size_t>(k.usage); }
  };
  std::unordered_map<Key, std::vector<void*>, KeyHash> free_;
  std::vector<std::pair<Key, void*>> in_use_;
  size_t pool_bytes_ = 0;
  size_t buffer_count_ = 0;
};

}  // namespace cyb
