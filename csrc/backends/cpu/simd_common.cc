#include "backends/cpu/simd_common.h"

#include <algorithm>

#include "core/errors.h"
#include "core/frame_allocator.h"
#include "core/thread_pool.h"

namespace cyb {
namespace cpu {

namespace {
struct ThreadScratch {
  void* p[kScratchCount] = {};
  size_t cap[kScratchCount] = {};
  ~ThreadScratch() {
    for (void* q : p) aligned_free_bytes(q);
  }
};
thread_local ThreadScratch t_scratch;
}  // namespace

void* scratch_bytes(int slot, size_t bytes) {
  ThreadScratch& s = t_scratch;
  if (s.cap[slot] < bytes) {
    size_t cap = s.cap[slot] ? s.cap[slot] : 4096;
    while (cap < bytes) cap *= 2;
    void* q = aligned_alloc_bytes(cap, 64);
    if (!q) throw_oom("cpu", cap);
    aligned_free_bytes(s.p[slot]);
    s.p[slot] = q;
    s.cap[slot] = cap;
  }
  return s.p[slot];
}

void release_scratch() {
  ThreadScratch& s = t_scratch;
  for (int i = 0; i < kScratchCount; ++i) {
    aligned_free_bytes(s.p[i]);
    s.p[i] = nullptr;
    s.cap[i] = 0;
  }
}

int row_items(ExecContext& ctx, int64_t n, int64_t grain) {
  ThreadPool* pool = ctx.pool();
  if (grain < 1) grain = 1;
  if (n <= 0) return 0;
  if (!pool || pool->size() == 1 || n <= grain) return 1;
  const int64_t chunks = (n + grain - 1) / grain;
  return static_cast<int>(std::min<int64_t>(chunks, 4 * static_cast<int64_t>(pool->size())));
}

void run_rows(ExecContext& ctx, int64_t n, int64_t grain, void (*fn)(void*, int64_t, int64_t, int), void* arg) {
  if (grain < 1) grain = 1;
  const int items = row_items(ctx, n, grain);
  if (items == 0) return;
  if (items == 1) {
    fn(arg, 0, n, 0);
    return;
  }
  // A few items per thread so that a thread the OS does not schedule right away
  // never holds up the others. One pointer captured: the std::function stays in
  // its small buffer (no allocation).
  struct Job {
    int64_t n, grain, chunks;
    void (*fn)(void*, int64_t, int64_t, int);
    void* arg;
  } job{n, grain, (n + grain - 1) / grain, fn, arg};
  const Job* j = &job;
  ctx.pool()->run_chunks(items, [j](int i, int ni) {
    const int64_t c0 = j->chunks * i / ni, c1 = j->chunks * (i + 1) / ni;
    const int64_t b = c0 * j->grain, e = c1 * j->grain < j->n ? c1 * j->grain : j->n;
    if (b < e) j->fn(j->arg, b, e, i);
  });
}

}  // namespace cpu
}  // namespace cyb
