#if defined(CYB_HAVE_WGPU)

#include "backends/wgpu/wgpu_settings.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "backends/wgpu/wgpu_device.h"
#include "core/env_setting.h"
#include "core/errors.h"

namespace cyb {
namespace wgpu {

bool shader_checks() {
  static const bool on = env_switch("CYB_WGPU_SHADER_CHECKS", "on", "off", false);
  return on;
}

SmMode sm_setting() {
  static const SmMode m = [] {
    const std::string v = env_one_of("CYB_WGPU_SM", {"0", "1", "f16"});
    return v == "1" ? SmMode::Split : v == "f16" ? SmMode::F16 : SmMode::Off;
  }();
  return m;
}

uint64_t workgroup_limit(const Gpu& g) {
  static const int64_t cap =
      env_int("CYB_WGPU_WORKGROUP_LIMIT", 1, std::numeric_limits<int64_t>::max(), -1, "a byte count (> 0)");
  const uint64_t dev = g.limits.maxComputeWorkgroupStorageSize;
  return cap < 0 ? dev : std::min<uint64_t>(dev, uint64_t(cap));
}

const RepeatTuning& repeat_tuning() {
  static const RepeatTuning t = [] {
    RepeatTuning r;
    const char* e = std::getenv("CYB_WGPU_REPEAT");
    if (!e) return r;
    const std::string s = e;
    const size_t c = s.rfind(':');
    char* end = nullptr;
    const long n = c == std::string::npos ? 0 : std::strtol(s.c_str() + c + 1, &end, 10);
    if (c == std::string::npos || c == 0 || end == s.c_str() + c + 1 || *end || n < 1 || n > 64)
      throw_invalid_config("CYB_WGPU_REPEAT", "'" + s + "' is not <pipeline name text>:<1 .. 64>");
    r.text = s.substr(0, c);
    r.n = static_cast<uint32_t>(n);
    return r;
  }();
  return t;
}

const MatvecTuning& matvec_tuning() {
  static const MatvecTuning t = [] {
    MatvecTuning r;
    const char* e = std::getenv("CYB_WGPU_MATVEC");
    if (!e) return r;
    const std::string s = e;
    for (size_t pos = 0; pos < s.size();) {
      size_t end = s.find(',', pos);
      if (end == std::string::npos) end = s.size();
      const std::string kv = s.substr(pos, end - pos);
      if (kv == "tpr=8" || kv == "tpr=16" || kv == "tpr=32" || kv == "tpr=64" || kv == "tpr=128")
        r.tpr = static_cast<uint32_t>(std::stoul(kv.substr(4)));
      else if (kv == "tpr=fill") r.fill = true;
      else if (kv == "unroll=1") r.unroll2 = true;
      else if (kv == "ks=0" || kv == "ks=1" || kv == "ks=all") {
        r.ks = kv != "ks=0";
        r.ks_tokens = kv == "ks=all";
      }
      else if (kv == "rows=1" || kv == "rows=2") r.r2 = kv == "rows=2";
      else if (kv != "unroll=0" && !kv.empty())
        throw_invalid_config("CYB_WGPU_MATVEC", "'" + kv + "' is not tpr=8|16|32|64|128|fill, unroll=0|1, ks=0|1|all or rows=1|2");
      pos = end + 1;
    }
    return r;
  }();
  return t;
}

AttentionKernel attention_kernel() {
  return env_one_of("CYB_WGPU_ATTN", {"dec", "split"}) == "split" ? AttentionKernel::Split : AttentionKernel::Dec;
}

int64_t splitk_workgroups() {
  static const int64_t n =
      env_int("CYB_WGPU_SPLITK", 0, 1000000, kSplitKWorkgroups, "a workgroup count (0 .. 1000000)");
  return n;
}

int64_t splitk_parts(int64_t tiles, int64_t smax, double* waves) {
  const int64_t W = splitk_workgroups();
  const int64_t Wt = W == 0 ? kSplitKWorkgroups : W;  // the time measure when splitting is off
  int64_t best = 1;
  double best_t = double((tiles + Wt - 1) / Wt);
  if (W != 0 && tiles < 2 * W) {
    for (int64_t s = 2; s <= std::min<int64_t>(smax, 8); ++s) {
      const double t = double((tiles * s + W - 1) / W) / double(s);
      if (t < best_t * 0.999) best = s, best_t = t;
    }
  }
  if (waves) *waves = best_t;
  return best;
}

int64_t submit_first_setting() {
  static const int64_t n = env_int("CYB_WGPU_SUBMIT", 0, 1000000, kSubmitFirst, "a dispatch count (0 .. 1000000)");
  return n;
}

int64_t submit_max_setting() {
  static const int64_t n = env_int("CYB_WGPU_SUBMIT_MAX", 1, int64_t{1} << 30, kSubmitMax, "a dispatch count (1 .. 2^30)");
  return n;
}

int64_t tile_setting() {
  static const int64_t v = [] {
    const int64_t t = env_int("CYB_WGPU_TILE", 0, 128, 0, "0, 64 or 128");
    if (t != 0 && t != 64 && t != 128) throw_invalid_config("CYB_WGPU_TILE", "'" + std::to_string(t) + "' is not 0, 64 or 128");
    return t;
  }();
  return v;
}
int64_t gemm_tile_tokens(int64_t N, int64_t T, int64_t smax, bool splittable, bool allow128, int64_t* parts) {
  const int64_t rt = (N + 63) / 64;
  double w64 = 0, w128 = 0;
  const int64_t s64 = splittable ? splitk_parts(rt * ((T + 63) / 64), smax, &w64) : 1;
  const int64_t s128 = splittable ? splitk_parts(rt * ((T + 127) / 128), smax, &w128) : 1;
  const int64_t forced = tile_setting();
  const bool t128 = allow128 && (forced == 128 || (forced == 0 && T >= 128 && splittable && s128 <= s64 &&
                                                   2.0 * kT128Cost * w128 < w64));
  *parts = t128 ? s128 : s64;
  return t128 ? 128 : 64;
}

bool gemm_f16_setting() {
  static const bool on = env_switch("CYB_WGPU_GEMM", "h16=1", "h16=0", false);
  return on;
}

bool conv_gemm_setting() {
  static const bool on = env_switch("CYB_WGPU_CONV", "gemm", "direct", true);
  return on;
}

bool flash_setting() {
  static const bool on = env_switch("CYB_WGPU_FLASH", "1", "0", true);
  return on;
}

}  // namespace wgpu
}  // namespace cyb

#endif  // CYB_HAVE_WGPU
