// The WebGPU C interface the wgpu+rs backend calls: ONE table of procedure pointers (Api, the
// global A), every call of the backend goes through it (A.wgpuDeviceCreateBuffer(...)). The
// backend never links a WebGPU implementation: the table is filled at run time by name through
// a ProcResolver (fill_api). Today the one source is libwgpu_native, opened from the `wgpu`
// wheel and resolved with dlsym / GetProcAddress (wgpu_loader.h); another implementation can
// fill the same table from its own lookup function (a `wgpuGetProcAddress`-style pointer
// wrapped as a ProcResolver) without touching the rest of the backend.
// Private to csrc/backends/wgpu/ (compiled only with CYB_HAVE_WGPU).
#pragma once

#include <webgpu.h>
#include <wgpu.h>

#include <string>

namespace cyb {
namespace wgpu {

// Every procedure of the table: webgpu.h's standard ones and wgpu.h's native extensions
// (wgpuDeviceCreateShaderModuleTrusted, wgpuQueueSubmitForIndex, wgpuDevicePoll,
// wgpuGenerateReport, wgpuGetVersion).
#define CYB_WGPU_FUNCS(X)                                                                          \
  X(wgpuCreateInstance) X(wgpuInstanceRelease) X(wgpuInstanceEnumerateAdapters)                    \
  X(wgpuInstanceProcessEvents) X(wgpuAdapterGetInfo) X(wgpuAdapterInfoFreeMembers)                 \
  X(wgpuAdapterGetLimits) X(wgpuAdapterHasFeature) X(wgpuAdapterRequestDevice) X(wgpuAdapterRelease) \
  X(wgpuDeviceGetQueue) X(wgpuDeviceCreateBuffer) X(wgpuBufferRelease) X(wgpuBufferDestroy)        \
  X(wgpuBufferGetSize)                                                                             \
  X(wgpuDeviceCreateShaderModule) X(wgpuDeviceCreateShaderModuleTrusted) X(wgpuShaderModuleRelease) X(wgpuDeviceCreateComputePipeline)    \
  X(wgpuComputePipelineGetBindGroupLayout) X(wgpuComputePipelineRelease)                           \
  X(wgpuBindGroupLayoutRelease) X(wgpuDeviceCreateBindGroup) X(wgpuBindGroupRelease)               \
  X(wgpuDeviceCreateCommandEncoder) X(wgpuCommandEncoderBeginComputePass)                          \
  X(wgpuComputePassEncoderSetPipeline) X(wgpuComputePassEncoderSetBindGroup)                       \
  X(wgpuComputePassEncoderDispatchWorkgroups) X(wgpuComputePassEncoderEnd)                         \
  X(wgpuComputePassEncoderRelease) X(wgpuCommandEncoderCopyBufferToBuffer)                         \
  X(wgpuCommandEncoderFinish) X(wgpuCommandEncoderRelease) X(wgpuCommandBufferRelease)             \
  X(wgpuQueueSubmitForIndex) X(wgpuQueueWriteBuffer) X(wgpuBufferMapAsync) X(wgpuBufferGetConstMappedRange) \
  X(wgpuBufferUnmap) X(wgpuDevicePoll) X(wgpuGenerateReport) X(wgpuGetVersion)                     \
  X(wgpuDeviceCreateQuerySet) X(wgpuQuerySetRelease)                         \
  X(wgpuCommandEncoderResolveQuerySet) X(wgpuQueueGetTimestampPeriod)

struct Api {
#define CYB_DECL(n) decltype(&::n) n = nullptr;
  CYB_WGPU_FUNCS(CYB_DECL)
#undef CYB_DECL
};

// The process's table (filled once, by the first device probe: wgpu_device.cc).
extern Api A;

// The address of procedure `name` in one implementation, or null where it has none.
using ProcResolver = void* (*)(void* ctx, const char* name);

// Fills the entries of `api` in CYB_WGPU_FUNCS order through resolve(ctx, name), stopping at
// the first the implementation lacks. Returns that procedure's name (the entries before it are
// set, the rest left as they were), or nullptr when every entry is set.
const char* fill_api(Api& api, ProcResolver resolve, void* ctx);

inline std::string sv(WGPUStringView s) {
  if (!s.data) return {};
  return s.length == WGPU_STRLEN ? std::string(s.data) : std::string(s.data, s.length);
}
inline WGPUStringView sv(const char* s) { return WGPUStringView{s, WGPU_STRLEN}; }

}  // namespace wgpu
}  // namespace cyb
