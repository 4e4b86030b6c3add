// Shows that a steady decode allocates nothing after warm-up: every heap entry
// point (operator new, malloc, calloc, realloc, posix_memalign, aligned_alloc)
// is hooked and counted while a sequence of ops shaped like a decoder layer
// runs through the dispatcher, the CPU backend and a frame allocator, at every
// CPU level, in precise and fast mode. Exit status 0 = no allocation.
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/quant.h"
#include "core/rope.h"
#include "core/exec_context.h"
#include "core/thread_pool.h"
#include "dispatch/dispatcher.h"

// ---------------------------------------------------------------- allocation hooks

static std::atomic<bool> g_counting{false};
static std::atomic<long> g_allocs{0};

static inline void note_alloc() {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
}

#if defined(__GLIBC__)
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void* malloc(size_t n) {
  note_alloc();
  return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) {
  note_alloc();
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  note_alloc();
  return __libc_realloc(p, n);
}
int posix_memalign(void** out, size_t align, size_t n) {
  note_alloc();
  void* p = __libc_memalign(align, n);
  if (!p) return 12;  // ENOMEM
  *out = p;
  return 0;
}
void* aligned_alloc(size_t align, size_t n) {
  note_alloc();
  return __libc_memalign(align, n);
}
}
#define CYB_HOOKS_MALLOC 1
#else
#define CYB_HOOKS_MALLOC 0
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"  // new is malloc-backed here
#endif

void* operator new(size_t n) {
  note_alloc();
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  return p;
}
void* operator new[](size_t n) { return operator new(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  note_alloc();
  return std::malloc(n ? n : 1);
}
void* operator new[](size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

// ---------------------------------------------------------------- a decoder-shaped step

using namespace cyb;

namespace {

struct Weights {
  std::vector<uint8_t> bytes;
  Tensor t;
};

Weights random_weight(DType dt, int64_t n, int64_t k, std::mt19937& rng) {
  Weights w;
  w.bytes.resize(row_bytes(dt, k) * static_cast<size_t>(n));
  for (auto& b : w.bytes) b = static_cast<uint8_t>(rng());
  const size_t bb = block_bytes(dt);
  const uint16_t d = f32_to_fp16(0.01f);
  for (size_t b = 0; b + bb <= w.bytes.size(); b += bb) {  // Q4_1: finite d and m
    std::memcpy(&w.bytes[b], &d, 2);
    std::memcpy(&w.bytes[b + 2], &d, 2);
  }
  w.t.dtype = dt;
  w.t.shape = Shape{n, k};
  w.t.data = w.bytes.data();
  return w;
}

struct F32Buf {
  std::vector<float> v;
  Tensor t;
  F32Buf(Shape s, float fill) : v(static_cast<size_t>(s.numel()), fill) {
    t.shape = s;
    t.data = v.data();
  }
};

// control: when true, each step asks the frame allocator for a size never seen
// before, which must show up as allocations (the hooks see library allocations).
int run_case(CpuLevel level, bool precise, bool control = false) {
  constexpr int D = 256, NH = 4, NKV = 2, HD = 64, FF = 512, V = 1000, CTX = 96, STEPS = CTX;
  std::mt19937 rng(42);
  CpuBackend backend(level);
  Dispatcher disp({&backend});
  ThreadPool pool(2);
  ExecContext ctx(&pool, precise);

  Weights emb = random_weight(DType::Q8_0, V, D, rng);
  Weights wq = random_weight(DType::Q4_1, NH * HD, D, rng);
  Weights wk = random_weight(DType::Q4_1, NKV * HD, D, rng);
  Weights wv = random_weight(DType::Q4_1, NKV * HD, D, rng);
  Weights wo = random_weight(DType::Q4_1, D, NH * HD, rng);
  Weights wg = random_weight(DType::Q4_1, FF, D, rng);
  Weights wu = random_weight(DType::Q4_1, FF, D, rng);
  Weights wd = random_weight(DType::Q4_1, D, FF, rng);
  Weights head = random_weight(DType::Q8_0, V, D, rng);
  F32Buf norm_w(Shape{D}, 1.0f);
  F32Buf kc(Shape{NKV, CTX, HD}, 0.f), vc(Shape{NKV, CTX, HD}, 0.f);
  std::vector<float> cosv, sinv;
  build_rope_table(HD, CTX, 10000.0, RopeScaling{}, cosv, sinv);
  RopeTable rope;
  rope.cos = cosv.data();
  rope.sin = sinv.data();
  rope.rot_dims = HD;
  rope.max_pos = CTX;
  int32_t token = 1;
  Tensor ids;
  ids.dtype = DType::I32;
  ids.shape = Shape{1};
  ids.data = &token;

  long steady = 0;
  float checksum = 0.f;
  for (int step = 0; step < STEPS; ++step) {
    if (step == 2) {
      g_allocs.store(0);
      g_counting.store(true);
    }
    ctx.frame().reset();
    if (control) ctx.frame().alloc(4096 + 64 * static_cast<size_t>(step));
    Op op{};
    op.a.eps = 1e-5f;
    op.a.n_heads = NH;
    op.a.n_kv_heads = NKV;
    op.a.head_dim = HD;
    op.a.pos0 = step;
    op.a.rope = &rope;
    op.a.scale = 0.125f;
    op.a.window = step % 2 ? 0 : 48;

    Tensor x = ctx.alloc_f32(Shape{1, D});
    op.kind = OpKind::Embedding;
    op.label = "embed";
    disp.run(op, {ids, emb.t}, {&x}, ctx);
    Tensor h = ctx.alloc_f32(Shape{1, D});
    op.kind = OpKind::RmsNorm;
    op.label = "layers.0.attn_norm";
    disp.run(op, {x, norm_w.t}, {&h}, ctx);
    Tensor q = ctx.alloc_f32(Shape{1, NH * HD}), k = ctx.alloc_f32(Shape{1, NKV * HD}),
           v = ctx.alloc_f32(Shape{1, NKV * HD});
    op.kind = OpKind::Matmul;
    op.label = "layers.0.q";
    disp.run(op, {h, wq.t}, {&q}, ctx);
    op.label = "layers.0.k";
    disp.run(op, {h, wk.t}, {&k}, ctx);
    op.label = "layers.0.v";
    disp.run(op, {h, wv.t}, {&v}, ctx);
    op.kind = OpKind::Rope;
    op.label = "layers.0.rope_q";
    disp.run(op, {q}, {&q}, ctx);
    op.a.n_heads = NKV;
    op.label = "layers.0.rope_k";
    disp.run(op, {k}, {&k}, ctx);
    op.a.n_heads = NH;
    op.kind = OpKind::KvWrite;
    op.label = "layers.0.kv_write";
    disp.run(op, {k}, {&kc.t}, ctx);
    disp.run(op, {v}, {&vc.t}, ctx);
    Tensor att = ctx.alloc_f32(Shape{1, NH * HD});
    op.kind = OpKind::Attention;
    op.label = "layers.0.attention";
    disp.run(op, {q, kc.t, vc.t}, {&att}, ctx);
    Tensor o = ctx.alloc_f32(Shape{1, D});
    op.kind = OpKind::Matmul;
    op.label = "layers.0.o";
    disp.run(op, {att, wo.t}, {&o}, ctx);
    Tensor normed = ctx.alloc_f32(Shape{1, D}), sum = ctx.alloc_f32(Shape{1, D});
    op.kind = OpKind::FusedSkipNorm;
    op.label = "layers.0.ffn_norm";
    disp.run(op, {o, x, norm_w.t}, {&normed, &sum}, ctx);
    Tensor ff = ctx.alloc_f32(Shape{1, FF});
    op.kind = OpKind::FusedSwiGlu;
    op.label = "layers.0.ffn_gate_up";
    disp.run(op, {normed, wg.t, wu.t}, {&ff}, ctx);
    Tensor down = ctx.alloc_f32(Shape{1, D});
    op.kind = OpKind::Matmul;
    op.label = "layers.0.ffn_down";
    disp.run(op, {ff, wd.t}, {&down}, ctx);
    Tensor resid = ctx.alloc_f32(Shape{1, D});
    op.kind = OpKind::Add;
    op.label = "layers.0.residual";
    disp.run(op, {down, sum}, {&resid}, ctx);
    Tensor logits = ctx.alloc_f32(Shape{1, V});
    op.kind = OpKind::FusedNormMatmul;
    op.label = "output";
    disp.run(op, {resid, norm_w.t, head.t}, {&logits}, ctx);
    op.kind = OpKind::Softmax;
    op.label = "probs";
    disp.run(op, {logits}, {&logits}, ctx);

    float best = -1.f;
    for (int i = 0; i < V; ++i)
      if (logits.f32()[i] > best) best = logits.f32()[i], token = i;
    checksum += best;
  }
  g_counting.store(false);
  steady = g_allocs.load();
  const bool finite = std::isfinite(checksum);
  if (control) {
    std::printf("control (a new buffer size every step): %ld allocations counted\n", steady);
    return steady >= STEPS - 2 ? 0 : 1;
  }
  std::printf("%-7s %-8s steady-state allocations over %d decode steps: %ld (pool %zu bytes in %zu buffers)%s\n",
              cpu_level_name(level), precise ? "precise" : "fast", STEPS - 2, steady, ctx.frame().pool_bytes(),
              ctx.frame().buffer_count(), finite ? "" : "  NON-FINITE OUTPUT");
  return steady == 0 && finite ? 0 : 1;
}

// The hooks must see allocations at all, or a zero count would prove nothing.
int check_hooks() {
  g_allocs.store(0);
  g_counting.store(true);
  std::vector<int>* v = new std::vector<int>(100);
  void* m = std::malloc(64);
  g_counting.store(false);
  const long seen = g_allocs.load();
  std::free(m);
  delete v;
  const long expected = CYB_HOOKS_MALLOC ? 3 : 2;
  if (seen < expected) {
    std::printf("allocation hooks not active (saw %ld of %ld)\n", seen, expected);
    return 1;
  }
  return 0;
}

}  // namespace

int main() {
  int fail = check_hooks();
  fail |= run_case(CpuLevel::Scalar, true, true);
  for (CpuLevel l : cpu_levels_available())
    for (bool precise : {true, false}) fail |= run_case(l, precise);
  std::printf(fail ? "FAIL\n" : "OK\n");
  return fail;
}
