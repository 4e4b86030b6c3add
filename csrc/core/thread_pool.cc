// Fixed thread pool: n-1 worker threads created once; the caller is thread 0.
// Workers spin briefly on a generation counter (a decode step issues hundreds of
// short jobs), then sleep on a condition variable.
#include "core/thread_pool.h"

#include "core/errors.h"

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
#include <cstdio>
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

// The job word packs [generation:24][total:20][next:20]: a thread claims work item
// `next` of generation g with one compare-and-swap, so a thread that wakes late can
// never take an item of a job that has already finished (or of a newer one).
struct ThreadPool::Impl {
  std::vector<std::thread> threads;
  std::mutex submit_mu;  // one job at a time (several conversations may share the pool)
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<uint64_t> job{0};
  std::atomic<uint32_t> generation{0};  // wakes the workers
  std::atomic<int> done{0};
  std::atomic<int> sleeping{0};
  std::atomic<bool> stop{false};
  const std::function<void(int, int)>* fn = nullptr;

  static uint32_t gen_of(uint64_t v) { return static_cast<uint32_t>(v >> 40); }
  static int total_of(uint64_t v) { return static_cast<int>((v >> 20) & 0xfffff); }
  static int next_of(uint64_t v) { return static_cast<int>(v & 0xfffff); }

  void work(uint32_t gen) {
    uint64_t v = job.load(std::memory_order_acquire);
    for (;;) {
      if (gen_of(v) != gen || next_of(v) >= total_of(v)) return;
      if (job.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        (*fn)(next_of(v), total_of(v));
        done.fetch_add(1, std::memory_order_acq_rel);
        v = job.load(std::memory_order_acquire);
      }
    }
  }

  void worker() {
    t_in_pool = true;
    uint32_t seen = 0;
    for (;;) {
      uint32_t g = generation.load(std::memory_order_acquire);
      for (int i = 0; g == seen && i < kSpinIters; ++i) {
        CYB_PAUSE();
        g = generation.load(std::memory_order_acquire);
      }
      if (g == seen) {
        std::unique_lock<std::mutex> lk(mu);
        sleeping.fetch_add(1);
        cv.wait(lk, [&] { return generation.load(std::memory_order_acquire) != seen || stop.load(); });
        sleeping.fetch_sub(1);
        g = generation.load(std::memory_order_acquire);
      }
      if (stop.load()) return;
      seen = g;
      work(g & 0xffffff);
    }
  }
};

ThreadPool::ThreadPool(int n_threads) : impl_(new Impl) {
  n_ = resolve_threads(n_threads > 0 ? n_threads : 0);
  impl_->threads.reserve(static_cast<size_t>(n_ - 1));
  for (int i = 1; i < n_; ++i) impl_->threads.emplace_back([this] { impl_->worker(); });
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

void ThreadPool::run(const std::function<void(int, int)>& fn) { run_chunks(n_, fn); }

void ThreadPool::run_chunks(int n_chunks, const std::function<void(int, int)>& fn) {
  if (n_chunks <= 0) return;
  if (n_ == 1 || t_in_pool || n_chunks == 1) {  // single thread, nested call, or one item
    for (int i = 0; i < n_chunks; ++i) fn(i, n_chunks);
    return;
  }
  if (n_chunks > 0xfffff) n_chunks = 0xfffff;
  std::lock_guard<std::mutex> submit(impl_->submit_mu);
  impl_->fn = &fn;
  impl_->done.store(0, std::memory_order_relaxed);
  const uint32_t gen = (Impl::gen_of(impl_->job.load()) + 1) & 0xffffff;
  impl_->job.store(static_cast<uint64_t>(gen) << 40 | static_cast<uint64_t>(n_chunks) << 20,
                   std::memory_order_release);
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->generation.store(gen, std::memory_order_release);
  }
  if (impl_->sleeping.load() > 0) impl_->cv.notify_all();
  t_in_pool = true;
  impl_->work(gen);
  t_in_pool = false;
  for (int i = 0; impl_->done.load(std::memory_order_acquire) != n_chunks; ++i) {
    if (i < kSpinIters) CYB_PAUSE();
    else std::this_thread::yield();
  }
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
  const int chunks = static_cast<int>(std::min<int64_t>(n, 4 * static_cast<int64_t>(n_)));
  run_chunks(chunks, [j](int i, int nc) {
    const int64_t b = j->n * i / nc, e = j->n * (i + 1) / nc;
    if (b < e) (*j->fn)(b, e);
  });
}

int ThreadPool::max_threads() {
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, std::min(256, 4 * std::max(1, hw)));
}

int ThreadPool::resolve_threads(int64_t requested, const char* field) {
  if (requested < 0)
    throw_invalid_config(field, "must be 0 (auto: physical cores) or a positive thread count (got " +
                                    std::to_string(requested) + ")");
  const int64_t cap = max_threads();
  if (requested == 0) return static_cast<int>(std::min<int64_t>(physical_cores(), cap));
  return static_cast<int>(std::min<int64_t>(requested, cap));
}

int ThreadPool::physical_cores() {
  int n = 0;
#if defined(__linux__)
  std::set<std::pair<int, int>> cores;
  for (int cpu = 0; cpu < 4096; ++cpu) {
    const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    // stdio, not iostreams: a libstdc++ linked statically into the module (seen on
    // the H200 device image, GCC 13) crashed in stream number parsing.
    std::FILE* fc = std::fopen((base + "core_id").c_str(), "r");
    if (!fc) break;
    int c = 0, p = 0;
    if (std::fscanf(fc, "%d", &c) != 1) c = cpu;
    std::fclose(fc);
    if (std::FILE* fp = std::fopen((base + "physical_package_id").c_str(), "r")) {
      if (std::fscanf(fp, "%d", &p) != 1) p = 0;
      std::fclose(fp);
    }
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
