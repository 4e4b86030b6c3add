// A fixed native thread pool: threads are created once, never per op.
#pragma once
#include <cstdint>
#include <functional>

namespace cyb {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads <= 0: physical cores
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  int size() const { return n_; }
  // Runs fn(thread_index, n_threads) on every thread (the caller is thread 0) and waits.
  void run(const std::function<void(int, int)>& fn);
  // Splits [0, n) into contiguous chunks, one per thread: fn(begin, end).
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

  static int physical_cores();

 private:
  struct Impl;
  Impl* impl_;
  int n_;
};

}  // namespace cyb
