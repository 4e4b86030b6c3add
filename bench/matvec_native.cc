// Native matvec benchmark of the CPU kernels, without Python: (1) one matrix per
// encoding that stays in cache (kernel speed), (2) the matmul shapes of one
// SmolLM2-135M decode step (30 layers of Q4_1 q/k/v/o/gate/up/down + the Q8_0
// head, ~97 MB: the weight traffic of a real token), per level and thread count.
// Build: bench/build_native.sh   Run: build/bench/matvec_native [threads...]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/quant.h"
#include "core/exec_context.h"
#include "core/thread_pool.h"

using namespace cyb;

namespace {

struct W {
  std::vector<uint8_t> bytes;
  Tensor t;
};

W make(DType dt, int64_t n, int64_t k, std::mt19937& rng) {
  W w;
  w.bytes.resize(row_bytes(dt, k) * static_cast<size_t>(n) + 64);
  for (auto& b : w.bytes) b = static_cast<uint8_t>(rng());
  const size_t bb = block_bytes(dt);
  std::vector<size_t> f16s;
  if (dt == DType::F32 || dt == DType::F16 || dt == DType::BF16) {
    for (size_t i = 0; i + 4 <= w.bytes.size(); i += 4) {
      const float f = static_cast<float>(rng() % 1000) / 1000.f;
      if (dt == DType::F32) std::memcpy(&w.bytes[i], &f, 4);
      else {
        const uint16_t h = dt == DType::F16 ? f32_to_fp16(f) : f32_to_bf16(f);
        std::memcpy(&w.bytes[i], &h, 2);
        std::memcpy(&w.bytes[i + 2], &h, 2);
      }
    }
  } else {
    if (dt == DType::Q4_1 || dt == DType::Q4_K || dt == DType::Q5_K) f16s = {0, 2};
    else if (dt == DType::Q6_K) f16s = {208};
    else f16s = {0};
    const uint16_t h = f32_to_fp16(0.01f);
    for (size_t b = 0; b + bb <= w.bytes.size(); b += bb)
      for (size_t o : f16s) std::memcpy(&w.bytes[b + o], &h, 2);
  }
  w.t.dtype = dt;
  w.t.shape = Shape{n, k};
  w.t.data = w.bytes.data();
  return w;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads;
  for (int i = 1; i < argc; ++i) threads.push_back(std::atoi(argv[i]));
  if (threads.empty()) threads = {1, 2};
  std::mt19937 rng(1);
  std::vector<float> x(8192, 0.5f), y(1 << 17);
  Op op{};
  op.kind = OpKind::Matmul;

  std::printf("== one matrix, in cache (K=1024, ~0.5 MB)\n%-7s %-6s %-8s %3s %9s\n", "enc", "level", "mode", "thr", "GB/s");
  for (DType dt : {DType::Q4_1, DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K,
                   DType::F16, DType::BF16, DType::F32}) {
    const int64_t K = 1024, N = std::max<int64_t>(64, static_cast<int64_t>(5e5 / row_bytes(dt, K)));
    W w = make(dt, N, K, rng);
    for (CpuLevel l : cpu_levels_available()) {
      if (l == CpuLevel::Scalar) continue;
      CpuBackend be(l);
      for (bool precise : {false, true})
        for (int th : threads) {
          ThreadPool pool(th);
          ExecContext ctx(&pool, precise);
          Tensor in[2];
          in[0].shape = Shape{1, K};
          in[0].data = x.data();
          in[1] = w.t;
          Tensor out;
          out.shape = Shape{1, N};
          out.data = y.data();
          be.execute(op, in, 2, &out, 1, ctx);
          double best = 1e9;
          for (int r = 0; r < 7; ++r) {
            const double t0 = now();
            for (int it = 0; it < 20; ++it) be.execute(op, in, 2, &out, 1, ctx);
            best = std::min(best, (now() - t0) / 20);
          }
          std::printf("%-7s %-6s %-8s %3d %9.2f\n", dtype_name(dt), cpu_level_name(l), precise ? "precise" : "fast", th,
                      static_cast<double>(w.t.nbytes()) / best / 1e9);
        }
    }
  }

  std::printf("== SmolLM2-135M decode-step matmuls (30 layers Q4_1 + Q8_0 head)\n");
  struct M { W w; int64_t k; };
  std::vector<M> ms;
  size_t total = 0;
  for (int l = 0; l < 30; ++l)
    for (auto nk : {std::pair<int64_t, int64_t>{576, 576}, {192, 576}, {192, 576}, {576, 576}, {1536, 576}, {1536, 576}, {576, 1536}}) {
      ms.push_back({make(DType::Q4_1, nk.first, nk.second, rng), nk.second});
      total += ms.back().w.t.nbytes();
    }
  ms.push_back({make(DType::Q8_0, 49152, 576, rng), 576});
  total += ms.back().w.t.nbytes();
  std::printf("weights %.1f MB\n%-6s %-8s %3s %9s %9s %9s\n", total / 1e6, "level", "mode", "thr", "ms/token", "tok/s", "GB/s");
  for (CpuLevel l : cpu_levels_available()) {
    if (l == CpuLevel::Scalar) continue;
    CpuBackend be(l);
    for (bool precise : {false, true})
      for (int th : threads) {
        ThreadPool pool(th);
        ExecContext ctx(&pool, precise);
        auto step = [&] {
          for (auto& m : ms) {
            Tensor in[2];
            in[0].shape = Shape{1, m.k};
            in[0].data = x.data();
            in[1] = m.w.t;
            Tensor out;
            out.shape = Shape{1, m.w.t.shape.d[0]};
            out.data = y.data();
            be.execute(op, in, 2, &out, 1, ctx);
          }
        };
        step();
        std::vector<double> ts;
        for (int r = 0; r < 15; ++r) {
          const double t0 = now();
          step();
          ts.push_back(now() - t0);
        }
        std::sort(ts.begin(), ts.end());
        const double med = ts[ts.size() / 2];
        std::printf("%-6s %-8s %3d %9.2f %9.1f %9.2f\n", cpu_level_name(l), precise ? "precise" : "fast", th, med * 1e3,
                    1.0 / med, total / med / 1e9);
      }
  }
  return 0;
}
