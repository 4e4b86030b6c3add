// Native checks of the core pieces: thread pool, frame allocator, dispatcher
// (fallback chain and per-label records). Exit status 0 = all passed.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/exec_context.h"
#include "core/frame_allocator.h"
#include "core/thread_pool.h"
#include "dispatch/dispatcher.h"
#include "tests/check.h"

using namespace cyb;


// A backend that supports only Add (and counts its runs): everything else falls back.
class AddOnly : public Backend {
 public:
  int runs = 0;
  const char* name() const override { return "add-only"; }
  bool supports(const Op& op, const Tensor*, int) const override { return op.kind == OpKind::Add; }
  void execute(const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out, ExecContext& ctx) override {
    ++runs;
    cpu_backend().execute(op, in, n_in, out, n_out, ctx);
  }
  Tensor alloc(const Shape& s, DType d) override { return cpu_backend().alloc(s, d); }
  Tensor upload(const void* p, const Shape& s, DType d) override { return cpu_backend().upload(p, s, d); }
  void download_f32(const Tensor& t, float* o) override { cpu_backend().download_f32(t, o); }
  void release(Tensor& t) override { cpu_backend().release(t); }
};

int main() {
  CHECK(ThreadPool::physical_cores() >= 1);
  for (int nt : {1, 2, 3, 5}) {
    ThreadPool pool(nt);
    CHECK(pool.size() == nt);
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}}) {
      std::vector<std::atomic<int>> hit(static_cast<size_t>(n));
      for (int rep = 0; rep < 50; ++rep)
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hit[static_cast<size_t>(i)].fetch_add(1);
        });
      for (auto& h : hit) CHECK(h.load() == 50);
    }
    std::atomic<int> mask{0};
    pool.run([&](int i, int n) {
      CHECK(n == nt);
      mask.fetch_or(1 << i);
      pool.parallel_for(10, [&](int64_t, int64_t) {});  // nested: runs inline, no deadlock
    });
    CHECK(mask.load() == (1 << nt) - 1);
  }

  {
    FrameAllocator fa;
    void* a = fa.alloc(100);
    void* b = fa.alloc(100);
    void* c = fa.alloc(200);
    CHECK(a != b && reinterpret_cast<uintptr_t>(a) % 64 == 0);
    const size_t pool_bytes = fa.pool_bytes();
    fa.reset();
    void* a2 = fa.alloc(100);
    void* b2 = fa.alloc(100);
    void* c2 = fa.alloc(200);
    CHECK((a2 == a || a2 == b) && (b2 == a || b2 == b) && a2 != b2 && c2 == c);
    CHECK(fa.pool_bytes() == pool_bytes && fa.buffer_count() == 3);
    fa.alloc(100);  // a third buffer of that size grows the pool
    CHECK(fa.buffer_count() == 4);
  }

  {
    AddOnly pref;
    Dispatcher d({&pref, &cpu_backend()});
    ExecContext ctx(nullptr, true);
    std::vector<float> a(8, 1.f), b(8, 2.f), y(8, 0.f);
    Tensor ta, tb, ty;
    ta.shape = tb.shape = ty.shape = Shape{1, 8};
    ta.data = a.data();
    tb.data = b.data();
    ty.data = y.data();
    Op add{};
    add.kind = OpKind::Add;
    add.label = "layers.0.residual";
    Op silu{};
    silu.kind = OpKind::Silu;
    d.set_profiling(true);
    for (int i = 0; i < 3; ++i) {
      d.run(add, {ta, tb}, {&ty}, ctx);
      d.run(silu, {ty}, {&ty}, ctx);
    }
    CHECK(pref.runs == 3);
    CHECK(y[0] > 0.f);
    auto recs = d.records();
    CHECK(recs.size() == 2);
    for (const auto& r : recs) {
      if (r.op == std::string("add")) {
        CHECK(r.label == "layers.0.residual" && r.backend == "add-only" && !r.fallback && r.count == 3);
      } else {
        CHECK(r.op == std::string("silu") && r.label == "silu" && r.backend == "cpu" && r.fallback && r.count == 3);
      }
      CHECK(r.total_ms >= 0.0);
    }
    d.clear_records();
    for (const auto& r : d.records()) CHECK(r.count == 0);
  }
  std::printf(g_fail ? "FAIL\n" : "OK\n");
  return g_fail;
}
