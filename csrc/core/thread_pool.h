// A fixed native thread pool: threads are created once, never per op.
#pragma once
#include <cstdint>
#include <functional>

namespace cyb {

class ThreadPool {
 public:
  // n_threads <= 0: physical cores; more than max_threads() is clamped to it.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  int size() const { return n_; }
  // Calls fn(i, n_threads) once for each i in [0, n_threads) and waits. The calls
  // run concurrently on the pool's threads (the caller takes part); which thread
  // runs which i is not fixed, so `i` is a work index, not a thread identity.
  void run(const std::function<void(int, int)>& fn);
  // Same with `n_chunks` work items fn(i, n_chunks): threads take the next item
  // until none is left, so a descheduled thread never holds up the others.
  void run_chunks(int n_chunks, const std::function<void(int, int)>& fn);
  // Splits [0, n) into contiguous chunks (a few per thread): fn(begin, end).
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

  static int physical_cores();
  // The most threads a pool takes: min(256, 4 x hardware threads). More threads
  // than cores only adds contention (a forward of 1000 threads on 2 cores took
  // minutes), so larger requests are clamped to this.
  static int max_threads();
  // The thread-count rule of every entry point (docs/errors.md "Guarantees"):
  // 0 = auto (physical cores), 1..max_threads() as given, larger values clamped
  // to max_threads(), negative values InvalidConfig(field).
  static int resolve_threads(int64_t requested, const char* field = "threads");

 private:
  struct Impl;
  Impl* impl_;
  int n_;
};

}  // namespace cyb
