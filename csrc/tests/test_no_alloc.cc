// Shows that a steady decode allocates nothing after warm-up.
//
// Counting: in a normal build every heap entry point (operator new, malloc, calloc, realloc,
// posix_memalign, aligned_alloc) is replaced here and counted. Under AddressSanitizer
// (CYB_SANITIZE=ON) that override cannot coexist with ASan's own allocator, so the test counts
// through the sanitizer's hooks instead (__sanitizer_install_malloc_and_free_hooks: called for
// every user allocation, operator new included). check_hooks() proves the counting sees
// allocations either way, and each part has a control that must count some.
//
// Parts:
//   1. a sequence of ops shaped like a decoder layer through the dispatcher, the CPU backend and
//      a frame allocator, at every CPU level, precise and fast;
//   2. the REAL decoder forward: each .model given (argv, or CYB_NO_ALLOC_MODELS, ':'-separated),
//      loaded in fast mode (f16 KV cache) on the curated path and on the graph executor
//      (exec_path "graph"), at every CPU level (or those in CYB_NO_ALLOC_LEVELS): after a prefill and a warm-up of decode
//      forwards of 1..N tokens, further forwards of 1..N tokens and single-token steps allocate
//      nothing. The files themselves say which encodings ran (printed per model).
// Exit status 0 = no allocation.
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
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
#include "model/model.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CYB_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define CYB_ASAN 1
#endif

// ---------------------------------------------------------------- allocation hooks

static std::atomic<bool> g_counting{false};
static std::atomic<long> g_allocs{0};

static inline void note_alloc() {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
}

#if defined(CYB_ASAN)
// From <sanitizer/allocator_interface.h> (declared here: gcc's ASan runtime has the function
// but not every toolchain installs the header).
extern "C" int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void*, size_t),
                                                         void (*free_hook)(const volatile void*));
static void asan_malloc_hook(const volatile void*, size_t) { note_alloc(); }
static void asan_free_hook(const volatile void*) {}
static const bool g_hooks_installed = [] {
  return __sanitizer_install_malloc_and_free_hooks(asan_malloc_hook, asan_free_hook) != 0;
}();
#define CYB_HOOKS_MALLOC 1
static const char* const kCounting = "sanitizer malloc hooks";
#else
static const bool g_hooks_installed = true;
static const char* const kCounting = "replaced malloc/operator new";
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
#endif  // CYB_ASAN

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

// ---------------------------------------------------------------- the real decoder forward

std::vector<std::string> model_paths(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) out.emplace_back(argv[i]);
  if (out.empty()) {
    const char* env = std::getenv("CYB_NO_ALLOC_MODELS");
    std::string list = env ? env : "";
    size_t start = 0;
    while (start < list.size()) {
      size_t end = list.find(':', start);
      if (end == std::string::npos) end = list.size();
      if (end > start) out.push_back(list.substr(start, end - start));
      start = end + 1;
    }
  }
  return out;
}

// The CPU levels of the real-model part: CYB_NO_ALLOC_LEVELS (comma-separated names; "auto" is
// the best level) or every level this machine runs.
std::vector<CpuLevel> model_levels() {
  const char* env = std::getenv("CYB_NO_ALLOC_LEVELS");
  if (!env || !*env) return cpu_levels_available();
  std::vector<CpuLevel> out;
  std::string list = env;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    if (end > start) out.push_back(parse_cpu_level(list.substr(start, end - start)));
    start = end + 1;
  }
  return out;
}

std::string encodings_of(const ModelFile& f) {
  std::map<std::string, int> n;
  for (const auto& t : f.tensors()) n[dtype_name(t.dtype)]++;
  std::string s;
  for (const auto& [name, count] : n) s += (s.empty() ? "" : " ") + name + "x" + std::to_string(count);
  return s;
}

constexpr int kMaxT = 4;        // decode forwards of 1..kMaxT tokens
constexpr int kSteps = 12;      // then single-token steps

// One model, one path, one level. control: each measured step opens a new conversation, whose
// KV cache and frame pool are new allocations, so the count must be > 0.
int run_model(const std::shared_ptr<ModelFile>& file, const std::string& exec_path, CpuLevel level,
              bool control = false) {
  set_cpu_level(cpu_level_name(level));
  LoadOptions opts;
  opts.backend = "cpu";
  opts.precise = false;  // fast mode: f16 KV cache, 16-bit activations
  opts.threads = 2;
  opts.exec_path = exec_path;
  std::shared_ptr<Model> model = Model::load(file, opts);
  const int64_t V = model->vocab_size();
  const int64_t ctx = 96;
  std::unique_ptr<Conversation> conv = model->new_conversation(ctx);
  std::vector<float> logits(static_cast<size_t>(V) * kMaxT);
  std::vector<int32_t> ids = {2, 17, 300, 5, 901, 42, 7, 11};  // a prefill of 8 tokens
  for (auto& id : ids) id = static_cast<int32_t>(id % V);
  auto step = [&](int64_t n, bool all) {
    model->forward(*conv, ids.data(), n, all, logits.data());
    int32_t best = 0;
    for (int64_t i = 1; i < V; ++i)
      if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
    for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((best + 31 * i) % V);
  };
  step(8, false);
  for (int warm = 0; warm < 2; ++warm)
    for (int n = 1; n <= kMaxT; ++n) step(n, false);
  step(1, true);
  step(kMaxT, true);

  g_allocs.store(0);
  g_counting.store(true);
  for (int n = 1; n <= kMaxT; ++n) step(n, false);
  step(kMaxT, true);
  for (int s = 0; s < kSteps; ++s) {
    if (control) conv = model->new_conversation(ctx - s);
    step(1, false);
  }
  g_counting.store(false);
  const long steady = g_allocs.load();
  bool finite = true;
  for (int64_t i = 0; i < V; ++i) finite &= std::isfinite(logits[i]);
  if (control) {
    std::printf("  %s control (a new conversation every step): %ld allocations counted\n", model->family().c_str(),
                steady);
    return steady >= kSteps ? 0 : 1;
  }
  std::printf("  %-7s %-7s position %lld: %ld allocations over %d decode forwards (1..%d tokens, then 1)%s\n",
              cpu_level_name(level), model->execution_path().c_str(), static_cast<long long>(conv->position()),
              steady, kMaxT + 1 + kSteps, kMaxT, finite ? "" : "  NON-FINITE LOGITS");
  return steady == 0 && finite ? 0 : 1;
}

// The hooks must see allocations at all, or a zero count would prove nothing.
int check_hooks() {
  if (!g_hooks_installed) {
    std::printf("could not install the %s\n", kCounting);
    return 1;
  }
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
  std::printf("counting allocations through the %s\n", kCounting);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int fail = check_hooks();
  fail |= run_case(CpuLevel::Scalar, true, true);
  for (CpuLevel l : cpu_levels_available())
    for (bool precise : {true, false}) fail |= run_case(l, precise);
  const std::vector<std::string> paths = model_paths(argc, argv);
  if (paths.empty()) std::printf("real decoder forward: no .model given (argv or CYB_NO_ALLOC_MODELS)\n");
  for (const std::string& path : paths) {
    auto file = ModelFile::open(path);
    std::printf("%s: encodings %s\n", path.c_str(), encodings_of(*file).c_str());
    for (const char* exec_path : {"curated", "graph"}) {
      bool first = true;
      for (CpuLevel l : model_levels()) {
        if (first) fail |= run_model(file, exec_path, l, true);
        first = false;
        fail |= run_model(file, exec_path, l);
      }
    }
  }
  std::printf(fail ? "FAIL\n" : "OK\n");
  return fail;
}
