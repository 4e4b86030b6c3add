// The CPU backend: implements every op. Each op runs the fastest kernel of the
// selected level (scalar reference, AVX2, AVX-512, NEON); levels fall back to
// the reference for ops they do not speed up. The level comes from
// CYB_CPU_LEVEL (scalar|avx2|avx512|amx|neon|auto) or set_cpu_level().
#pragma once
#include <atomic>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "dispatch/backend.h"
#include "dispatch/op_schema.h"

namespace cyb {

enum class CpuLevel : int { Scalar = 0, Avx2 = 1, Avx512 = 2, Neon = 3, Amx = 4 };

const char* cpu_level_name(CpuLevel l);
// Levels compiled into this build (whatever this CPU supports), scalar first.
std::vector<CpuLevel> cpu_levels_compiled();
// Levels compiled in and supported by this CPU, scalar first, best last.
std::vector<CpuLevel> cpu_levels_available();
CpuLevel cpu_level_best();
// Parses "scalar" | "avx2" | "avx512" | "amx" | "neon" | "auto"; throws InvalidConfig
// (field "cpu_level") for an unknown name or a level this machine cannot run.
CpuLevel parse_cpu_level(const std::string& name);

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(CpuLevel level);
  const char* name() const override { return "cpu"; }
  bool supports(const Op& op, const Tensor* inputs, int n_inputs) const override;
  // The amx level's fast float GEMM keeps bf16 hi / lo panels of F32 / F16 / BF16 weights
  // (fgemm_amx.cc, cpu_level_bf16_split); otherwise the x86 levels' packed f32 GEMM keeps f32
  // panels of F32 weights (fgemm_packed.inc); scalar and neon keep nothing.
  int64_t weight_cache_bytes(const Tensor& w, bool precise) const override;
  void execute(const Op& op, const Tensor* inputs, int n_inputs, Tensor* outputs, int n_outputs,
               ExecContext& ctx) override;
  void download_f32(const Tensor& t, float* out) override;
  void release_scratch() override;  // the calling thread's kernel scratch (simd_common.h)

  CpuLevel level() const { return level_.load(); }
  void set_level(CpuLevel l);

 private:
  std::atomic<CpuLevel> level_;
};

// The process-wide CPU backend (level from CYB_CPU_LEVEL, default auto).
CpuBackend& cpu_backend();
// Sets the level of cpu_backend() ("auto" = best available).
void set_cpu_level(const std::string& name);

// Outside precise mode, a matmul at level `l` with weights of encoding `t`
// quantizes its activations to int16 with one scale per this many values: 32
// (BlockQ16), 256 (BlockQ16K, the avx512 K-quant path), or 0 (f32 activations).
int cpu_level_activation_block(CpuLevel l, DType t);
// True when a fast-mode matmul at this level of `tokens` tokens on weights of this
// encoding runs on AMX-BF16 tiles with each value split into two bf16 numbers
// (fgemm_amx.cc): x . w = xh . wh + xl . wh + xh . wl.
bool cpu_level_bf16_split(CpuLevel l, DType t, int64_t tokens);
inline bool cpu_level_quantizes_activations(CpuLevel l, DType t) { return cpu_level_activation_block(l, t) != 0; }

// infer_output_shapes / validate_op: dispatch/op_schema.h (from the op schema).

}  // namespace cyb
