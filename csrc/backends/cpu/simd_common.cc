#include "backends/cpu/simd_common.h"

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

void run_rows(ExecContext& ctx, int64_t n, int64_t grain, void (*fn)(void*, int64_t, int64_t), void* arg) {
  ThreadPool* pool = ctx.pool();
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (!pool || pool->size() == 1 || n <= grain) {
    fn(arg, 0, n);
    return;
  }
  // One pointer captured: the std::function stays in its small buffer (no allocation).
  struct Job {
    int64_t n, grain, chunks;
    void (*fn)(void*, int64_t, int64_t);
    void* arg;
  } job{n, grain, (n + grain - 1) / grain, fn, arg};
  const Job* j = &job;
  pool->run([j](int i, int nt) {
    const int64_t c0 = j->chunks * i / nt, c1 = j->chunks * (i + 1) / nt;
    const int64_t b = c0 * j->grain, e = c1 * j->grain < j->n ? c1 * j->grain : j->n;
    if (b < e) j->fn(j->arg, b, e);
  });
}

}  // namespace cpu
}  // namespace cyb
