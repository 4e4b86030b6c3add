// The seam between the two WebGPU implementations the backend runs on: wgpu-native (wgpu+rs) and
// Dawn (webgpu:dawn). The kernels, the host code and the procedure table (wgpu_api.h) are shared;
// everything that differs is here: a small table of capabilities (ImplCaps, read by the host code
// as data) and the few steps whose calls differ (loading the table, the instance, picking the
// adapter, what the device is asked for, submitting, waiting for a read-back, shader modules,
// timestamps, the live-object report, the WGSL dialect). One implementation a process: the first
// device probe fixes it (wgpu_device.cc). Private to csrc/backends/wgpu/.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backends/wgpu/wgpu_api.h"

namespace cyb {
namespace wgpu {

struct Gpu;

struct ImplCaps {
  Impl impl;
  const char* name;     // "wgpu-native", "dawn" (wgpu_info()["impl"])
  const char* backend;  // the backend's name in dispatch records: "wgpu+rs", "webgpu:dawn"
  // The feature that grants subgroup operations: wgpu-native's WGPUNativeFeature_Subgroup, the
  // standard WGPUFeatureName_Subgroups on Dawn.
  WGPUFeatureName subgroup_feature;
  // Every adapter enumerated and the best ranked (wgpu-native's wgpuInstanceEnumerateAdapters), or
  // one requested with a high-performance preference (Dawn: no enumeration in the C interface).
  bool enumerate_adapters;
  // Submits return an index that wgpuDevicePoll waits for (wgpu-native); else a read-back waits
  // for its own map future (wgpuInstanceWaitAny: a map completes after every earlier submit).
  bool submission_index;
  // Shader modules without runtime checks, per module (wgpuDeviceCreateShaderModuleTrusted); on
  // Dawn the same is the device toggle disable_robustness (bounds checks; Tint adds no loop bounds).
  bool trusted_modules;
  // Timestamps in ticks of wgpuQueueGetTimestampPeriod ns (wgpu-native); Dawn's are in ns.
  bool timestamp_period;
  // wgpuGenerateReport (wgpu-native's live-object counts; Dawn has none: wgpu_report() is empty).
  bool report;
  // Tint (Dawn's WGSL compiler) wants `enable subgroups;` before a module uses subgroup builtins
  // and proves subgroup operations uniform (the diagnostic subgroup_uniformity, an error by
  // default); naga (wgpu-native) asks neither: wgsl_dialect().
  bool wgsl_enable_subgroups;
  // chromium-experimental-subgroup-matrix may be offered (Dawn with allow_unsafe_apis).
  bool subgroup_matrix;
};

const ImplCaps& caps_of(Impl impl);

// Fills the table A from the process's implementation (g.impl): libwgpu_native (g.lib) or Dawn
// (g.dawn_gpa). False with *error.
bool impl_load(Gpu& g, std::string* error);

// The instance: wgpu-native's primary backends (WGPUInstanceExtras); on Dawn the instance toggle
// allow_unsafe_apis (experimental features such as subgroup matrices are offered only with it)
// and the TimedWaitAny feature (read-backs block in wgpuInstanceWaitAny). Null on failure.
WGPUInstance impl_create_instance(Gpu& g);

// The adapter (released adapters not chosen). wgpu-native: every adapter of the primary backends,
// discrete > integrated > unknown > cpu. Dawn: one adapter requested (high performance; adapter
// toggle vulkan_enable_f16_on_nvidia, without which Dawn keeps shader-f16 off on NVIDIA's Vulkan
// driver); CYB_WEBGPU_DAWN_BACKEND=vulkan|null|... (read once) names Dawn's backend, `null` being
// Dawn's Null backend (validation and shader compilation without execution: tests only; its
// results are not computed). Null with *error when there is none.
WGPUAdapter impl_pick_adapter(Gpu& g, std::string* error);

// What the device is asked for beyond the common features (shader-f16, subgroups, timestamps):
// Dawn's subgroup matrices where offered, and Dawn's device toggles (enable_immediate_error_handling
// so that errors reach check_device_error at the call; timestamp_quantization off; disable_robustness
// where shaders are compiled without checks, wgpu_settings.h shader_checks()).
struct DeviceRequest {
  std::vector<WGPUFeatureName> features;
  std::vector<const char*> toggles_on, toggles_off;
  DawnTogglesDescriptor toggles{};
  WGPUChainedStruct* chain = nullptr;  // WGPUDeviceDescriptor::nextInChain
};
void impl_device_request(Gpu& g, DeviceRequest* r);

// After the device: what it was granted (subgroup matrices), its timestamp period.
void impl_device_ready(Gpu& g);

// Submits one command buffer; the index a read-back of its results waits for.
WGPUSubmissionIndex impl_submit(Gpu& g, WGPUCommandBuffer cb);

// Maps the first n bytes of buffer b for reading and waits until they are mapped (after the
// submit `sub`, which wrote them). False with *error when mapping failed.
bool impl_map_read(Gpu& g, WGPUBuffer b, uint64_t n, WGPUSubmissionIndex sub, std::string* error);

// A shader module (with or without runtime checks: trusted_modules).
WGPUShaderModule impl_shader_module(Gpu& g, const WGPUShaderModuleDescriptor& md, bool checks);

// The WGSL a module is compiled from, in the implementation's dialect: for Tint, `enable
// subgroups;` and `diagnostic(off, subgroup_uniformity);` ahead of a module that uses subgroup
// builtins (the kernels' shuffles run where the lanes agree by construction: matvec.wgsl SG).
std::string wgsl_dialect(const ImplCaps& c, const std::string& src);

// wgpuGenerateReport where the implementation has it; false otherwise.
bool impl_report(Gpu& g, WGPUGlobalReport* report);

// The struct sizes, field offsets and enum values this build passes across the table, keyed
// "sizeof S", "offsetof S.F" and by constant name (Dawn's own under Dawn's names): the Python side
// compares them with the wgpudawn module's before handing its procedures over.
std::vector<std::pair<std::string, uint64_t>> abi_table();

}  // namespace wgpu
}  // namespace cyb
