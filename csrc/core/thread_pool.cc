// Fixed thread pool: n-1 worker threads created once; the caller is thread 0.
// Workers spin briefly on a generation counter (a decode step issues hundreds of
// short jobs), then sleep on a condition variable.
#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <fstream>
#elif defined(__APPLE__)
#include <sys/sysctl.h>
#include <sys/types.h>
#elif defined(_WIN32)
#include <windows.h>
#endif

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define CYB_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define CYB_PAUSE() __asm__ __volatile__("yield")
#else
#define CYB_PAUSE() ((void)0)
#endif

namespace cyb {

namespace {
thread_local bool t_in_pool = false;
constexpr int kSpinIters = 1 << 14;
}  // namespace

struct ThreadPool::Impl {
  std::vector<std::thread> threads;
  std::mutex submit_mu;  // one job at a time (several conversations may share the pool)
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<uint64_t> generation{0};
  std::atomic<int> pending{0};
  std::atomic<int> sleeping{0};
  std::atomic<bool> stop{false};
  const std::function<void(int, int)>* fn = nullptr;
  int n = 1;

  void worker(int idx) {
    t_in_pool = true;
    uint64_t seen = 0;
    for (;;) {
      uint64_t g = generation.load(std::memory_order_acquire);
      for (int i = 0; g == seen && i < kSpinIters; ++i) {
        CYB_PAUSE();
        g = generation.load(std::memory_order_acquire);
      }
      if (g == seen) {
        std::unique_lock<std::mutex> lk(mu);
        sleeping.fetch_add(1);
        cv.wait(lk, [&] {
          return generation.load(std::memory_order_acquire) != seen || stop.load();
        });
        sleeping.fetch_sub(1);
        g = generation.load(std::memory_order_acquire);
      }
      if (stop.load()) return;
      seen = g;
      (*fn)(idx, n);
      pending.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
};

ThreadPool::ThreadPool(int n_threads) : impl_(new Impl) {
  n_ = n_threads > 0 ? n_threads : physical_cores();
  if (n_ < 1) n_ = 1;
  impl_->n = n_;
  impl_->threads.reserve(static_cast<size_t>(n_ - 1));
  for (int i = 1; i < n_; ++i) impl_->threads.emplace_back([this, i] { impl_->worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->stop.store(true);
    impl_->generation.fetch_add(1, std::memory_order_acq_rel);
  }
  impl_->cv.notify_all();
  for (auto& t : impl_->threads) t.join();
  delete impl_;
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_ == 1 || t_in_pool) {  // single thread, or a nested call from inside a job
    for (int i = 0; i < n_; ++i) fn(i, n_);
    return;
  }
  std::lock_guard<std::mutex> submit(impl_->submit_mu);
  impl_->fn = &fn;
  impl_->pending.store(n_ - 1, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->generation.fetch_add(1, std::memory_order_acq_rel);
  }
  if (impl_->sleeping.load() > 0) impl_->cv.notify_all();
  t_in_pool = true;
  fn(0, n_);
  t_in_pool = false;
  for (int i = 0; impl_->pending.load(std::memory_order_acquire) != 0; ++i) {
    if (i < kSpinIters) CYB_PAUSE();
    else std::this_thread::yield();
  }
  impl_->fn = nullptr;
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (n_ == 1 || n == 1 || t_in_pool) {
    fn(0, n);
    return;
  }
  struct Job {
    int64_t n;
    const std::function<void(int64_t, int64_t)>* fn;
  } job{n, &fn};
  const Job* j = &job;  // one pointer captured: no allocation in std::function
  run([j](int i, int nt) {
    const int64_t b = j->n * i / nt, e = j->n * (i + 1) / nt;
    if (b < e) (*j->fn)(b, e);
  });
}

int ThreadPool::physical_cores() {
  int n = 0;
#if defined(__linux__)
  std::set<std::pair<int, int>> cores;
  for (int cpu = 0; cpu < 4096; ++cpu) {
    const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::ifstream fc(base + "core_id"), fp(base + "physical_package_id");
    if (!fc) break;
    int c = 0, p = 0;
    fc >> c;
    if (fp) fp >> p;
    cores.insert({p, c});
  }
  n = static_cast<int>(cores.size());
#elif defined(__APPLE__)
  int v = 0;
  size_t len = sizeof(v);
  if (sysctlbyname("hw.physicalcpu", &v, &len, nullptr, 0) == 0) n = v;
#elif defined(_WIN32)
  DWORD len = 0;
  GetLogicalProcessorInformation(nullptr, &len);
  std::vector<SYSTEM_LOGICAL_PROCESSOR_INFORMATION> info(len / sizeof(SYSTEM_LOGICAL_PROCESSOR_INFORMATION));
  if (!info.empty() && GetLogicalProcessorInformation(info.data(), &len)) {
    for (auto& i : info)
      if (i.Relationship == RelationProcessorCore) ++n;
  }
#endif
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, n);
}

}  // namespace cyb
