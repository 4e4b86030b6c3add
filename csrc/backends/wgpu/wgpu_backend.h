// The wgpu+rs backend: WGSL compute shaders (shaders/wgsl, embedded at build
// time) driven through wgpu-native, loaded at run time from the `wgpu` wheel
// (no link-time dependency). The same backend runs on Google's Dawn as
// webgpu:dawn, its procedures handed over from the `wgpudawn` Python package
// (one implementation a process; docs/webgpu-dawn.md). One backend object per model: it owns the model's
// weights on the device (uploaded once, at first use, keyed by host pointer).
// The device itself is process-wide. Per conversation, the ExecContext holds
// the frame pools (STORAGE buffers keyed by exact size, a UNIFORM arena), the
// bind-group cache and the open command encoder: a whole forward is recorded
// into one compute pass and submitted once, at the logits read-back.
#pragma once
#include <cstdint>
#include <map>
#include <vector>
#include <memory>
#include <string>
#include <utility>

#include "dispatch/backend.h"

namespace cyb {

struct WgpuInfo {
  std::string adapter;       // device name
  std::string vendor, architecture, description;
  std::string backend_type;  // "vulkan", "metal", "dx12", ...
  std::string adapter_type;  // "discrete", "integrated", "cpu", "unknown"
  bool software = false;     // adapter type CPU (lavapipe, llvmpipe, WARP)
  bool shader_f16 = false, subgroups = false;
  uint32_t subgroup_min = 0, subgroup_max = 0;
  uint64_t max_storage_binding = 0, max_buffer = 0;
  uint32_t max_workgroup_storage = 0;
  std::string library;       // path of libwgpu_native that was loaded (Dawn: "Dawn (wgpudawn)")
  std::string impl;          // the WebGPU implementation: "wgpu-native" or "dawn"
  // Dawn: the device has chromium-experimental-subgroup-matrix; the adapter's configurations
  // ("f16->f32 16x16x16", ...).
  bool subgroup_matrix = false;
  std::vector<std::string> subgroup_matrix_configs;
};

// Which WebGPU implementation a backend is asked to run on: wgpu-native (wgpu+rs), Dawn
// (webgpu:dawn), or whichever the process already runs (the platform default).
enum class WgpuImpl { Any, Native, Dawn };

// True when this build has the backend compiled in.
bool wgpu_compiled();
// True when a hardware (non-CPU) adapter exists (never throws; the platform default asks this).
bool wgpu_hardware_available();
// Initializes the device if needed (software adapters allowed when asked) and describes it.
// Throws BackendInit when the library or an adapter is missing.
WgpuInfo wgpu_info(bool allow_software);
// A new backend for one model on implementation `impl`. Throws BackendInit as wgpu_info does, and
// when the process runs the other implementation (one procedure table a process).
std::unique_ptr<Backend> make_wgpu_backend(bool allow_software, WgpuImpl impl = WgpuImpl::Native);
// Hands Dawn's procedures over: get_proc_address is the address of Dawn's wgpuGetProcAddress
// (python/cyb_llm/webgpu_dawn.py takes it from the wgpudawn module). The process's device then
// runs on Dawn. BackendInit when it already runs on wgpu-native.
void wgpu_use_dawn(uintptr_t get_proc_address);
// Whether Dawn's procedures were handed over in this process.
bool wgpu_dawn_handed();
// The implementation the process's device runs on: "wgpu-native", "dawn", "" before the first probe.
std::string wgpu_process_impl();
// The procedures the table takes from an implementation (Native or Dawn), in table order.
std::vector<std::string> wgpu_proc_names(WgpuImpl impl);
// Tests: fills a scratch table for `impl` from a resolver that knows every procedure except
// those of `absent`; returns the names the fill reports missing.
std::vector<std::string> wgpu_fill_check(WgpuImpl impl, const std::vector<std::string>& absent);
// The struct sizes, field offsets and enum values this build passes across the procedure table
// ("sizeof S", "offsetof S.F", constant names), for comparison with Dawn's module.
std::vector<std::pair<std::string, uint64_t>> wgpu_abi();
// Host time of the forwards since the last call (then cleared): forwards, record_ms (from
// begin_forward to the submit: the family's ops and their dispatches), submit_ms (finishing
// and submitting the command buffer), wait_ms (waiting for read-backs: the GPU's work).
std::map<std::string, double> wgpu_take_host_times();
// wgpu-native's own resource report (wgpuGenerateReport): live objects per kind (empty on Dawn).
std::map<std::string, uint64_t> wgpu_report();
// Bytes of device buffers this process holds now (weights, KV caches, frames, uniforms,
// staging) and the most held at once since the last reset; reset_peak sets the peak to
// the live bytes after reading it.
std::map<std::string, uint64_t> wgpu_memory(bool reset_peak);

// GPU time per shader, from timestamp queries around every dispatch (each dispatch
// then gets its own compute pass, and every submit waits for its timestamps: a
// profiling run is slower than a normal one). Off by default; false when the
// adapter offers no timestamp queries.
struct WgpuShaderTime {
  std::string shader;      // pipeline: shader name, defines and weight encodings
  uint64_t dispatches = 0;
  double gpu_ms = 0;       // sum of (end of pass - start of pass)
};
bool wgpu_set_gpu_profiling(bool on);
// The totals since the last call (then cleared), largest first; untimed: dispatches
// beyond the per-submit query capacity.
std::vector<WgpuShaderTime> wgpu_take_gpu_profile(uint64_t* untimed = nullptr);

}  // namespace cyb
