// The process-wide device of the wgpu+rs backend: the adapter picked, the device and queue, its
// limits, the pipeline cache, uncaptured errors, host and GPU timing, device memory totals.
// Private to csrc/backends/wgpu/.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "backends/wgpu/wgpu_api.h"
#include "backends/wgpu/wgpu_backend.h"
#include "backends/wgpu/wgpu_impl.h"
#include "backends/wgpu/wgpu_loader.h"

namespace cyb {
namespace wgpu {

struct Pipeline {
  WGPUComputePipeline pipe = nullptr;
  WGPUBindGroupLayout layout = nullptr;
  std::string name;  // the cache key: shader, defines, encodings (GPU profile rows)
};

// GPU time per pipeline (wgpu_set_gpu_profiling).
// Host time of the forwards (always on: three clock reads per forward): recording from
// begin_forward to the submit, finishing + submitting (the early submits of a forward's first
// chunks included), waiting for read-backs; the submits, and of them the early ones (chunks).
struct HostTimes {
  std::atomic<uint64_t> forwards{0}, record_ns{0}, submit_ns{0}, wait_ns{0}, submits{0}, chunks{0};
};

struct GpuProfile {
  std::atomic<bool> on{false};
  std::mutex mu;
  std::map<std::string, std::pair<uint64_t, double>> rows;  // name -> (dispatches, ns)
  uint64_t untimed = 0;
};

struct Gpu {
  std::mutex mu;
  bool tried = false;
  std::string error;  // why there is no device
  // The implementation, fixed by the first probe: Dawn where its wgpuGetProcAddress was handed
  // over before (wgpu_use_dawn), else wgpu-native.
  const ImplCaps* impl = nullptr;
  uintptr_t dawn_gpa = 0;  // Dawn's wgpuGetProcAddress (0: none handed over)
  NativeLib lib;           // wgpu-native: the library the procedure table came from
  bool timed_wait = false;          // Dawn: the instance blocks in wgpuInstanceWaitAny
  WGPUSubmissionIndex submits = 0;  // Dawn: submits so far (its submits return no index)
  // Dawn: the adapter's subgroup matrix configurations; whether the device has the feature.
  std::vector<DawnSubgroupMatrixConfig> sm_configs;
  bool subgroup_matrix = false;
  WGPUInstance instance = nullptr;
  WGPUAdapter adapter = nullptr;
  WGPUDevice device = nullptr;
  WGPUQueue queue = nullptr;
  WgpuInfo info;
  WGPULimits limits = WGPU_LIMITS_INIT;
  std::unordered_map<std::string, Pipeline> pipelines;
  std::unordered_set<std::string> over_limit;  // keys of kernels refused for their workgroup memory
  std::string device_error;  // uncaptured errors since the last check
  std::mutex err_mu;
  bool hw_checked = false, hw = false;
  HostTimes host;
  bool timestamps = false;  // the device was created with timestamp queries
  float ts_period = 1.f;    // ns per timestamp tick
  GpuProfile prof;
  // Bytes of device buffers alive now and the most alive at once since the last reset.
  std::atomic<uint64_t> live_bytes{0}, peak_bytes{0};
  // The context state (wgpu_state.h State) that recorded work last: a read of a tensor no context
  // owns (a weight, a cache) goes through it. Cleared by that state's destructor, so a read after
  // its context is gone uses a fresh state instead of freed memory.
  std::atomic<void*> last_state{nullptr};
};

// The process's device state (never destroyed: drivers dislike teardown at exit).
Gpu& gpu();

// Loads the library, picks the adapter and creates the device (g.mu held; once: g.tried).
// On failure g.device stays null and g.error says why.
void init_device(Gpu& g);

// The device, initialized if needed; BackendInit when there is none, or only a software
// adapter and allow_software is false, or the process runs another implementation than `want`.
Gpu& device_or_throw(bool allow_software, WgpuImpl want = WgpuImpl::Any);

// The name errors give the backend: the process's implementation's (wgpu+rs, webgpu:dawn).
const char* backend_name();

// Throws BackendInit ("<what>: <message>") when the device reported an uncaptured error.
void check_device_error(Gpu& g, const char* what);

}  // namespace wgpu
}  // namespace cyb
