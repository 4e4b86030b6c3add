// The WebGPU C interface the wgpu+rs backend calls: ONE table of procedure pointers (Api, the
// global A), every call of the backend goes through it (A.wgpuDeviceCreateBuffer(...)). The
// backend never links a WebGPU implementation: the table is filled at run time by name through
// a ProcResolver (fill_api), once a process, from one of two implementations (Impl):
// libwgpu_native, opened from the `wgpu` wheel and resolved with dlsym / GetProcAddress
// (wgpu_loader.h), or Google's Dawn, whose `wgpuGetProcAddress` the `wgpudawn` Python package
// hands over (webgpu:dawn). Both implement the same webgpu.h (the struct layouts and enum values
// the backend uses are identical in the two headers: docs/webgpu-dawn.md); what differs, the
// procedures only one of them has and how they are used, lies behind wgpu_impl.h.
// Private to csrc/backends/wgpu/ (compiled only with CYB_HAVE_WGPU).
#pragma once

#include <webgpu.h>
#include <wgpu.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cyb {
namespace wgpu {

// The procedures of the table both implementations have (webgpu.h's standard ones).
#define CYB_WGPU_FUNCS(X)                                                                          \
  X(wgpuCreateInstance) X(wgpuInstanceRelease)                                                     \
  X(wgpuInstanceProcessEvents) X(wgpuAdapterGetInfo) X(wgpuAdapterInfoFreeMembers)                 \
  X(wgpuAdapterGetLimits) X(wgpuAdapterHasFeature) X(wgpuAdapterRequestDevice) X(wgpuAdapterRelease) \
  X(wgpuDeviceGetQueue) X(wgpuDeviceCreateBuffer) X(wgpuBufferRelease) X(wgpuBufferDestroy)        \
  X(wgpuBufferGetSize)                                                                             \
  X(wgpuDeviceCreateShaderModule) X(wgpuShaderModuleRelease) X(wgpuDeviceCreateComputePipeline)    \
  X(wgpuComputePipelineGetBindGroupLayout) X(wgpuComputePipelineRelease)                           \
  X(wgpuBindGroupLayoutRelease) X(wgpuDeviceCreateBindGroup) X(wgpuBindGroupRelease)               \
  X(wgpuDeviceCreateCommandEncoder) X(wgpuCommandEncoderBeginComputePass)                          \
  X(wgpuComputePassEncoderSetPipeline) X(wgpuComputePassEncoderSetBindGroup)                       \
  X(wgpuComputePassEncoderDispatchWorkgroups) X(wgpuComputePassEncoderEnd)                         \
  X(wgpuComputePassEncoderRelease) X(wgpuCommandEncoderCopyBufferToBuffer)                         \
  X(wgpuCommandEncoderFinish) X(wgpuCommandEncoderRelease) X(wgpuCommandBufferRelease)             \
  X(wgpuQueueWriteBuffer) X(wgpuBufferMapAsync) X(wgpuBufferGetConstMappedRange)                   \
  X(wgpuBufferUnmap) X(wgpuDeviceCreateQuerySet) X(wgpuQuerySetRelease)                            \
  X(wgpuCommandEncoderResolveQuerySet)

// wgpu-native's extensions (wgpu.h) the backend calls on libwgpu_native only.
#define CYB_WGPU_NATIVE_FUNCS(X)                                                                   \
  X(wgpuInstanceEnumerateAdapters) X(wgpuDeviceCreateShaderModuleTrusted)                          \
  X(wgpuQueueSubmitForIndex) X(wgpuDevicePoll) X(wgpuGenerateReport) X(wgpuGetVersion)             \
  X(wgpuQueueGetTimestampPeriod)

// Standard procedures the backend calls on Dawn only, in place of those extensions
// (wgpu_impl.cc says which replaces which).
#define CYB_WGPU_DAWN_FUNCS(X)                                                                     \
  X(wgpuInstanceRequestAdapter) X(wgpuQueueSubmit) X(wgpuInstanceWaitAny) X(wgpuDeviceHasFeature)
// ... and Dawn's own (not in the wgpu-native header: typed by the declarations below).
#define CYB_WGPU_DAWN_OWN_FUNCS(X) X(wgpuAdapterPropertiesSubgroupMatrixConfigsFreeMembers)

// The implementations that can fill the table.
enum class Impl { WgpuNative, Dawn };

// Dawn-only declarations the backend needs, written from Dawn's webgpu.h (the wgpu-native header
// the backend compiles against lacks them); the Python side checks each value and layout against
// the wgpudawn module it hands over (python/cyb_llm/webgpu_dawn.py, _core.wgpu_abi()).
constexpr uint32_t kDawnSTypeTogglesDescriptor = 0x0005000A;                 // WGPUSType_DawnTogglesDescriptor
constexpr uint32_t kDawnSTypeSubgroupMatrixConfigs = 0x0005003B;             // WGPUSType_AdapterPropertiesSubgroupMatrixConfigs
constexpr uint32_t kDawnFeatureSubgroupMatrix = 0x00050034;                  // WGPUFeatureName_ChromiumExperimentalSubgroupMatrix
constexpr uint32_t kDawnSubgroupMatrixF32 = 1, kDawnSubgroupMatrixF16 = 2;   // WGPUSubgroupMatrixComponentType
struct DawnTogglesDescriptor {  // WGPUDawnTogglesDescriptor
  WGPUChainedStruct chain;
  size_t enabledToggleCount;
  const char* const* enabledToggles;
  size_t disabledToggleCount;
  const char* const* disabledToggles;
};
struct DawnSubgroupMatrixConfig {  // WGPUSubgroupMatrixConfig
  uint32_t componentType, resultComponentType;
  uint32_t M, N, K;
  uint32_t minSubgroupSize, maxSubgroupSize;
};
struct DawnAdapterPropertiesSubgroupMatrixConfigs {  // WGPUAdapterPropertiesSubgroupMatrixConfigs
  WGPUChainedStruct chain;
  size_t configCount;
  const DawnSubgroupMatrixConfig* configs;
};
using DawnConfigsFreeMembers = void (*)(DawnAdapterPropertiesSubgroupMatrixConfigs);

struct Api {
#define CYB_DECL(n) decltype(&::n) n = nullptr;
  CYB_WGPU_FUNCS(CYB_DECL)
  CYB_WGPU_NATIVE_FUNCS(CYB_DECL)
  CYB_WGPU_DAWN_FUNCS(CYB_DECL)
  DawnConfigsFreeMembers wgpuAdapterPropertiesSubgroupMatrixConfigsFreeMembers = nullptr;
#undef CYB_DECL
};

// The process's table (filled once, by the first device probe: wgpu_device.cc).
extern Api A;

// The address of procedure `name` in one implementation, or null where it has none.
using ProcResolver = void* (*)(void* ctx, const char* name);

// Fills the entries of `api` that implementation `impl` needs (the common ones and its own list)
// through resolve(ctx, name); the other implementation's entries are set to null. Returns the
// names of the procedures the implementation lacks (their entries null), empty when every one
// resolved.
std::vector<std::string> fill_api(Api& api, Impl impl, ProcResolver resolve, void* ctx);

// The names fill_api resolves for `impl`, in table order.
std::vector<std::string> api_names(Impl impl);

inline std::string sv(WGPUStringView s) {
  if (!s.data) return {};
  return s.length == WGPU_STRLEN ? std::string(s.data) : std::string(s.data, s.length);
}
inline WGPUStringView sv(const char* s) { return WGPUStringView{s, WGPU_STRLEN}; }

}  // namespace wgpu
}  // namespace cyb
