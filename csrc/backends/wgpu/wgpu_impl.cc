#if defined(CYB_HAVE_WGPU)

#include "backends/wgpu/wgpu_impl.h"

#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "backends/wgpu/wgpu_device.h"
#include "backends/wgpu/wgpu_loader.h"
#include "backends/wgpu/wgpu_settings.h"

namespace cyb {
namespace wgpu {

const ImplCaps& caps_of(Impl impl) {
  static const ImplCaps native{Impl::WgpuNative,
                               "wgpu-native",
                               "wgpu+rs",
                               static_cast<WGPUFeatureName>(WGPUNativeFeature_Subgroup),
                               /*enumerate_adapters=*/true,
                               /*submission_index=*/true,
                               /*trusted_modules=*/true,
                               /*timestamp_period=*/true,
                               /*report=*/true,
                               /*wgsl_enable_subgroups=*/false,
                               /*subgroup_matrix=*/false};
  static const ImplCaps dawn{Impl::Dawn,
                             "dawn",
                             "webgpu:dawn",
                             WGPUFeatureName_Subgroups,
                             /*enumerate_adapters=*/false,
                             /*submission_index=*/false,
                             /*trusted_modules=*/false,
                             /*timestamp_period=*/false,
                             /*report=*/false,
                             /*wgsl_enable_subgroups=*/true,
                             /*subgroup_matrix=*/true};
  return impl == Impl::Dawn ? dawn : native;
}

bool impl_load(Gpu& g, std::string* error) {
  if (g.impl->impl == Impl::Dawn) return load_dawn(g.dawn_gpa, error);
  return load_wgpu_native(&g.lib, error);
}

namespace {

// A DawnTogglesDescriptor over `on` and `off` (which must outlive its use).
DawnTogglesDescriptor toggles(const std::vector<const char*>& on, const std::vector<const char*>& off) {
  DawnTogglesDescriptor t{};
  t.chain.sType = static_cast<WGPUSType>(kDawnSTypeTogglesDescriptor);
  t.enabledToggleCount = on.size();
  t.enabledToggles = on.data();
  t.disabledToggleCount = off.size();
  t.disabledToggles = off.data();
  return t;
}

int adapter_rank(WGPUAdapterType t) {
  return t == WGPUAdapterType_DiscreteGPU ? 0 : t == WGPUAdapterType_IntegratedGPU ? 1 : t == WGPUAdapterType_CPU ? 3 : 2;
}

WGPUAdapter pick_native(Gpu& g, std::string* error) {
  WGPUInstanceEnumerateAdapterOptions eo = {};
  eo.backends = WGPUInstanceBackend_Primary;
  const size_t n = A.wgpuInstanceEnumerateAdapters(g.instance, &eo, nullptr);
  std::vector<WGPUAdapter> ads(n);
  if (n) A.wgpuInstanceEnumerateAdapters(g.instance, &eo, ads.data());
  int best = -1, best_rank = 99;
  for (size_t i = 0; i < n; ++i) {
    WGPUAdapterInfo ai = {};
    if (A.wgpuAdapterGetInfo(ads[i], &ai) != WGPUStatus_Success) continue;
    const int r = adapter_rank(ai.adapterType);
    if (r < best_rank) {
      best_rank = r;
      best = static_cast<int>(i);
    }
    A.wgpuAdapterInfoFreeMembers(ai);
  }
  for (size_t i = 0; i < n; ++i)
    if (static_cast<int>(i) != best) A.wgpuAdapterRelease(ads[i]);
  if (best < 0) {
    *error = "no Vulkan/Metal/DX12 adapter found (on Linux CI: apt-get install mesa-vulkan-drivers)";
    return nullptr;
  }
  return ads[static_cast<size_t>(best)];
}

// CYB_WEBGPU_DAWN_BACKEND: Dawn's backend type by name, Undefined (Dawn's choice) when unset.
WGPUBackendType dawn_backend_setting(std::string* name) {
  const char* e = std::getenv("CYB_WEBGPU_DAWN_BACKEND");
  *name = e ? e : "";
  const struct {
    const char* n;
    WGPUBackendType t;
  } known[] = {{"vulkan", WGPUBackendType_Vulkan}, {"null", WGPUBackendType_Null},
               {"metal", WGPUBackendType_Metal},   {"d3d12", WGPUBackendType_D3D12},
               {"d3d11", WGPUBackendType_D3D11},   {"opengl", WGPUBackendType_OpenGL},
               {"opengles", WGPUBackendType_OpenGLES}};
  for (const auto& k : known)
    if (*name == k.n) return k.t;
  return WGPUBackendType_Undefined;
}

WGPUAdapter pick_dawn(Gpu& g, std::string* error) {
  std::string asked;
  const WGPUBackendType bt = dawn_backend_setting(&asked);
  if (!asked.empty() && bt == WGPUBackendType_Undefined) {
    *error = "CYB_WEBGPU_DAWN_BACKEND='" + asked + "' is not one of vulkan, null, metal, d3d12, d3d11, opengl, opengles";
    return nullptr;
  }
  const std::vector<const char*> on = {"vulkan_enable_f16_on_nvidia"}, off;
  DawnTogglesDescriptor t = toggles(on, off);
  WGPURequestAdapterOptions o = {};
  o.nextInChain = &t.chain;
  o.featureLevel = WGPUFeatureLevel_Core;
  o.powerPreference = WGPUPowerPreference_HighPerformance;
  o.backendType = bt;
  struct Req {
    WGPUAdapter adapter = nullptr;
    std::string msg;
    bool done = false;
  } req;
  WGPURequestAdapterCallbackInfo cb = {};
  cb.mode = WGPUCallbackMode_AllowProcessEvents;
  cb.callback = [](WGPURequestAdapterStatus st, WGPUAdapter a, WGPUStringView msg, void* u1, void*) {
    Req& r = *static_cast<Req*>(u1);
    if (st == WGPURequestAdapterStatus_Success) r.adapter = a;
    else r.msg = sv(msg);
    r.done = true;
  };
  cb.userdata1 = &req;
  A.wgpuInstanceRequestAdapter(g.instance, &o, cb);
  for (int i = 0; i < 1000 && !req.done; ++i) A.wgpuInstanceProcessEvents(g.instance);
  if (!req.adapter) {
    *error = "Dawn found no adapter" + (req.msg.empty() ? std::string() : ": " + req.msg) +
             " (on Linux: a Vulkan driver and loader; Mesa's lavapipe 22 lacks features Dawn requires)";
    return nullptr;
  }
  WGPUAdapterInfo ai = {};
  if (A.wgpuAdapterGetInfo(req.adapter, &ai) == WGPUStatus_Success) {
    // Dawn answers with its Null backend (no execution) when nothing else exists: only by name.
    const bool null_backend = ai.backendType == WGPUBackendType_Null;
    A.wgpuAdapterInfoFreeMembers(ai);
    if (null_backend && bt != WGPUBackendType_Null) {
      A.wgpuAdapterRelease(req.adapter);
      *error = "Dawn found no adapter but its Null backend (which computes nothing)";
      return nullptr;
    }
  }
  return req.adapter;
}

}  // namespace

WGPUInstance impl_create_instance(Gpu& g) {
  WGPUInstanceDescriptor idesc = {};
  if (g.impl->impl == Impl::WgpuNative) {
    WGPUInstanceExtras extras = {};
    extras.chain.sType = static_cast<WGPUSType>(WGPUSType_InstanceExtras);
    extras.backends = WGPUInstanceBackend_Primary;
    idesc.nextInChain = &extras.chain;
    return A.wgpuCreateInstance(&idesc);
  }
  const std::vector<const char*> on = {"allow_unsafe_apis"}, off;
  DawnTogglesDescriptor t = toggles(on, off);
  idesc.nextInChain = &t.chain;
  const WGPUInstanceFeatureName timed = WGPUInstanceFeatureName_TimedWaitAny;
  idesc.requiredFeatureCount = 1;
  idesc.requiredFeatures = &timed;
  WGPUInstance inst = A.wgpuCreateInstance(&idesc);
  g.timed_wait = inst != nullptr;
  if (!inst) {  // without blocking waits: read-backs poll (impl_map_read)
    idesc.requiredFeatureCount = 0;
    inst = A.wgpuCreateInstance(&idesc);
  }
  return inst;
}

WGPUAdapter impl_pick_adapter(Gpu& g, std::string* error) {
  return g.impl->enumerate_adapters ? pick_native(g, error) : pick_dawn(g, error);
}

void impl_device_request(Gpu& g, DeviceRequest* r) {
  if (!g.impl->subgroup_matrix) return;
  // Dawn's subgroup matrix configurations (chained onto the adapter info).
  DawnAdapterPropertiesSubgroupMatrixConfigs cfg{};
  cfg.chain.sType = static_cast<WGPUSType>(kDawnSTypeSubgroupMatrixConfigs);
  WGPUAdapterInfo ai = {};
  ai.nextInChain = &cfg.chain;
  const WGPUFeatureName smf = static_cast<WGPUFeatureName>(kDawnFeatureSubgroupMatrix);
  if (A.wgpuAdapterHasFeature(g.adapter, smf) && A.wgpuAdapterGetInfo(g.adapter, &ai) == WGPUStatus_Success) {
    g.sm_configs.assign(cfg.configs, cfg.configs + cfg.configCount);
    A.wgpuAdapterPropertiesSubgroupMatrixConfigsFreeMembers(cfg);
    A.wgpuAdapterInfoFreeMembers(ai);
    r->features.push_back(smf);
  }
  r->toggles_on = {"enable_immediate_error_handling"};
  r->toggles_off = {"timestamp_quantization"};
  if (!shader_checks()) r->toggles_on.push_back("disable_robustness");
  r->toggles = toggles(r->toggles_on, r->toggles_off);
  r->chain = &r->toggles.chain;
}

void impl_device_ready(Gpu& g) {
  if (g.timestamps) g.ts_period = g.impl->timestamp_period ? A.wgpuQueueGetTimestampPeriod(g.queue) : 1.f;
  if (g.impl->subgroup_matrix)
    g.subgroup_matrix = A.wgpuDeviceHasFeature(g.device, static_cast<WGPUFeatureName>(kDawnFeatureSubgroupMatrix));
}

WGPUSubmissionIndex impl_submit(Gpu& g, WGPUCommandBuffer cb) {
  if (g.impl->submission_index) return A.wgpuQueueSubmitForIndex(g.queue, 1, &cb);
  A.wgpuQueueSubmit(g.queue, 1, &cb);
  return ++g.submits;
}

bool impl_map_read(Gpu& g, WGPUBuffer b, uint64_t n, WGPUSubmissionIndex sub, std::string* error) {
  struct Done {
    bool done = false;
    WGPUMapAsyncStatus status = WGPUMapAsyncStatus_Success;
    std::string msg;
  } done;
  WGPUBufferMapCallbackInfo ci = {};
  ci.callback = [](WGPUMapAsyncStatus s, WGPUStringView m, void* u1, void*) {
    Done& d = *static_cast<Done*>(u1);
    d.status = s;
    d.msg = sv(m);
    d.done = true;
  };
  ci.userdata1 = &done;
  if (g.impl->submission_index) {
    ci.mode = WGPUCallbackMode_AllowSpontaneous;
    A.wgpuBufferMapAsync(b, WGPUMapMode_Read, 0, n, ci);
    while (!done.done) {
      A.wgpuDevicePoll(g.device, 1, &sub);
      if (!done.done) A.wgpuInstanceProcessEvents(g.instance);
    }
  } else {
    // A map completes after every submit before it that uses the buffer: the future is all
    // there is to wait for (blocking where the instance has TimedWaitAny, else polling).
    ci.mode = WGPUCallbackMode_WaitAnyOnly;
    WGPUFutureWaitInfo w = {};
    w.future = A.wgpuBufferMapAsync(b, WGPUMapMode_Read, 0, n, ci);
    while (!done.done) {
      const WGPUWaitStatus s = A.wgpuInstanceWaitAny(g.instance, 1, &w, g.timed_wait ? UINT64_MAX : 0);
      if (s == WGPUWaitStatus_Error) {
        *error = "wgpuInstanceWaitAny failed";
        return false;
      }
    }
  }
  if (done.status != WGPUMapAsyncStatus_Success) {
    *error = done.msg;
    return false;
  }
  return true;
}

WGPUShaderModule impl_shader_module(Gpu& g, const WGPUShaderModuleDescriptor& md, bool checks) {
  if (checks || !g.impl->trusted_modules) return A.wgpuDeviceCreateShaderModule(g.device, &md);
  return A.wgpuDeviceCreateShaderModuleTrusted(g.device, &md, WGPUShaderRuntimeChecks_None);
}

namespace {

// Whether the module calls a subgroup builtin (outside comments; subgroup matrices are another
// extension, which their kernels enable themselves).
bool uses_subgroups(const std::string& src) {
  size_t at = 0;
  while (at < src.size()) {
    size_t e = src.find('\n', at);
    if (e == std::string::npos) e = src.size();
    std::string line = src.substr(at, e - at);
    const size_t c = line.find("//");
    if (c != std::string::npos) line.resize(c);
    for (size_t p = line.find("subgroup"); p != std::string::npos; p = line.find("subgroup", p + 8))
      if (line.compare(p, 14, "subgroupMatrix") != 0 && line.compare(p, 15, "subgroup_matrix") != 0) return true;
    at = e + 1;
  }
  return false;
}

}  // namespace

std::string wgsl_dialect(const ImplCaps& c, const std::string& src) {
  if (!c.wgsl_enable_subgroups || !uses_subgroups(src)) return src;
  // Directives lead the module: after those already there (enable f16; ...).
  std::string head;
  size_t at = 0;
  for (;;) {
    const size_t s = src.find_first_not_of(" \t\r\n", at);
    if (s == std::string::npos || (src.compare(s, 7, "enable ") != 0 && src.compare(s, 9, "requires ") != 0 &&
                                   src.compare(s, 11, "diagnostic(") != 0))
      break;
    const size_t e = src.find(';', s);
    if (e == std::string::npos) break;
    at = e + 1;
  }
  head = src.substr(0, at);
  std::string extra = "\nenable subgroups;\ndiagnostic(off, subgroup_uniformity);\n";
  if (head.find("enable subgroups") != std::string::npos) extra = "\n";
  return head + extra + src.substr(at);
}

bool impl_report(Gpu& g, WGPUGlobalReport* report) {
  if (!g.impl->report || !g.instance) return false;
  A.wgpuGenerateReport(g.instance, report);
  return true;
}

std::vector<std::pair<std::string, uint64_t>> abi_table() {
  std::vector<std::pair<std::string, uint64_t>> t;
  // The structs the backend passes (sizes and every field's offset).
#define CYB_S(S) t.emplace_back("sizeof " #S, sizeof(S));
#define CYB_F(S, f) t.emplace_back("offsetof " #S "." #f, offsetof(S, f));
  CYB_S(WGPUStringView) CYB_F(WGPUStringView, data) CYB_F(WGPUStringView, length)
  CYB_S(WGPUChainedStruct) CYB_F(WGPUChainedStruct, next) CYB_F(WGPUChainedStruct, sType)
  CYB_S(WGPUInstanceDescriptor) CYB_F(WGPUInstanceDescriptor, nextInChain)
  CYB_F(WGPUInstanceDescriptor, requiredFeatureCount) CYB_F(WGPUInstanceDescriptor, requiredFeatures)
  CYB_F(WGPUInstanceDescriptor, requiredLimits)
  CYB_S(WGPURequestAdapterOptions) CYB_F(WGPURequestAdapterOptions, nextInChain)
  CYB_F(WGPURequestAdapterOptions, featureLevel) CYB_F(WGPURequestAdapterOptions, powerPreference)
  CYB_F(WGPURequestAdapterOptions, forceFallbackAdapter) CYB_F(WGPURequestAdapterOptions, backendType)
  CYB_F(WGPURequestAdapterOptions, compatibleSurface)
  CYB_S(WGPURequestAdapterCallbackInfo) CYB_F(WGPURequestAdapterCallbackInfo, mode)
  CYB_F(WGPURequestAdapterCallbackInfo, callback) CYB_F(WGPURequestAdapterCallbackInfo, userdata1)
  CYB_F(WGPURequestAdapterCallbackInfo, userdata2)
  CYB_S(WGPUAdapterInfo) CYB_F(WGPUAdapterInfo, nextInChain) CYB_F(WGPUAdapterInfo, vendor)
  CYB_F(WGPUAdapterInfo, architecture) CYB_F(WGPUAdapterInfo, device) CYB_F(WGPUAdapterInfo, description)
  CYB_F(WGPUAdapterInfo, backendType) CYB_F(WGPUAdapterInfo, adapterType) CYB_F(WGPUAdapterInfo, vendorID)
  CYB_F(WGPUAdapterInfo, deviceID) CYB_F(WGPUAdapterInfo, subgroupMinSize) CYB_F(WGPUAdapterInfo, subgroupMaxSize)
  CYB_S(WGPULimits) CYB_F(WGPULimits, maxUniformBufferBindingSize) CYB_F(WGPULimits, maxStorageBufferBindingSize)
  CYB_F(WGPULimits, minUniformBufferOffsetAlignment) CYB_F(WGPULimits, minStorageBufferOffsetAlignment)
  CYB_F(WGPULimits, maxBufferSize) CYB_F(WGPULimits, maxComputeWorkgroupStorageSize)
  CYB_F(WGPULimits, maxComputeInvocationsPerWorkgroup) CYB_F(WGPULimits, maxComputeWorkgroupsPerDimension)
  CYB_F(WGPULimits, maxImmediateSize)
  CYB_S(WGPUDeviceDescriptor) CYB_F(WGPUDeviceDescriptor, label) CYB_F(WGPUDeviceDescriptor, requiredFeatureCount)
  CYB_F(WGPUDeviceDescriptor, requiredFeatures) CYB_F(WGPUDeviceDescriptor, requiredLimits)
  CYB_F(WGPUDeviceDescriptor, defaultQueue) CYB_F(WGPUDeviceDescriptor, deviceLostCallbackInfo)
  CYB_F(WGPUDeviceDescriptor, uncapturedErrorCallbackInfo)
  CYB_S(WGPUUncapturedErrorCallbackInfo) CYB_F(WGPUUncapturedErrorCallbackInfo, callback)
  CYB_F(WGPUUncapturedErrorCallbackInfo, userdata1)
  CYB_S(WGPURequestDeviceCallbackInfo) CYB_F(WGPURequestDeviceCallbackInfo, mode)
  CYB_F(WGPURequestDeviceCallbackInfo, callback) CYB_F(WGPURequestDeviceCallbackInfo, userdata1)
  CYB_S(WGPUBufferDescriptor) CYB_F(WGPUBufferDescriptor, usage) CYB_F(WGPUBufferDescriptor, size)
  CYB_F(WGPUBufferDescriptor, mappedAtCreation)
  CYB_S(WGPUShaderSourceWGSL) CYB_F(WGPUShaderSourceWGSL, chain) CYB_F(WGPUShaderSourceWGSL, code)
  CYB_S(WGPUShaderModuleDescriptor) CYB_F(WGPUShaderModuleDescriptor, label)
  CYB_S(WGPUComputePipelineDescriptor) CYB_F(WGPUComputePipelineDescriptor, layout)
  CYB_F(WGPUComputePipelineDescriptor, compute)
  CYB_S(WGPUComputeState) CYB_F(WGPUComputeState, module) CYB_F(WGPUComputeState, entryPoint)
  CYB_F(WGPUComputeState, constantCount)
  CYB_S(WGPUBindGroupEntry) CYB_F(WGPUBindGroupEntry, binding) CYB_F(WGPUBindGroupEntry, buffer)
  CYB_F(WGPUBindGroupEntry, offset) CYB_F(WGPUBindGroupEntry, size) CYB_F(WGPUBindGroupEntry, sampler)
  CYB_F(WGPUBindGroupEntry, textureView)
  CYB_S(WGPUBindGroupDescriptor) CYB_F(WGPUBindGroupDescriptor, layout) CYB_F(WGPUBindGroupDescriptor, entryCount)
  CYB_F(WGPUBindGroupDescriptor, entries)
  CYB_S(WGPUCommandEncoderDescriptor) CYB_S(WGPUCommandBufferDescriptor)
  CYB_S(WGPUComputePassDescriptor) CYB_F(WGPUComputePassDescriptor, timestampWrites)
  CYB_S(WGPUPassTimestampWrites) CYB_F(WGPUPassTimestampWrites, querySet)
  CYB_F(WGPUPassTimestampWrites, beginningOfPassWriteIndex) CYB_F(WGPUPassTimestampWrites, endOfPassWriteIndex)
  CYB_S(WGPUQuerySetDescriptor) CYB_F(WGPUQuerySetDescriptor, type) CYB_F(WGPUQuerySetDescriptor, count)
  CYB_S(WGPUBufferMapCallbackInfo) CYB_F(WGPUBufferMapCallbackInfo, mode) CYB_F(WGPUBufferMapCallbackInfo, callback)
  CYB_F(WGPUBufferMapCallbackInfo, userdata1)
  CYB_S(WGPUFutureWaitInfo) CYB_F(WGPUFutureWaitInfo, future) CYB_F(WGPUFutureWaitInfo, completed)
  CYB_S(WGPUFuture)
#undef CYB_S
#undef CYB_F
  // Dawn's own declarations (wgpu_api.h), under Dawn's names.
  t.emplace_back("sizeof WGPUDawnTogglesDescriptor", sizeof(DawnTogglesDescriptor));
  t.emplace_back("offsetof WGPUDawnTogglesDescriptor.enabledToggleCount", offsetof(DawnTogglesDescriptor, enabledToggleCount));
  t.emplace_back("offsetof WGPUDawnTogglesDescriptor.enabledToggles", offsetof(DawnTogglesDescriptor, enabledToggles));
  t.emplace_back("offsetof WGPUDawnTogglesDescriptor.disabledToggleCount", offsetof(DawnTogglesDescriptor, disabledToggleCount));
  t.emplace_back("offsetof WGPUDawnTogglesDescriptor.disabledToggles", offsetof(DawnTogglesDescriptor, disabledToggles));
  t.emplace_back("sizeof WGPUSubgroupMatrixConfig", sizeof(DawnSubgroupMatrixConfig));
  t.emplace_back("offsetof WGPUSubgroupMatrixConfig.M", offsetof(DawnSubgroupMatrixConfig, M));
  t.emplace_back("offsetof WGPUSubgroupMatrixConfig.maxSubgroupSize", offsetof(DawnSubgroupMatrixConfig, maxSubgroupSize));
  t.emplace_back("sizeof WGPUAdapterPropertiesSubgroupMatrixConfigs", sizeof(DawnAdapterPropertiesSubgroupMatrixConfigs));
  t.emplace_back("offsetof WGPUAdapterPropertiesSubgroupMatrixConfigs.configCount",
                 offsetof(DawnAdapterPropertiesSubgroupMatrixConfigs, configCount));
  t.emplace_back("offsetof WGPUAdapterPropertiesSubgroupMatrixConfigs.configs",
                 offsetof(DawnAdapterPropertiesSubgroupMatrixConfigs, configs));
  t.emplace_back("WGPUSType_DawnTogglesDescriptor", kDawnSTypeTogglesDescriptor);
  t.emplace_back("WGPUSType_AdapterPropertiesSubgroupMatrixConfigs", kDawnSTypeSubgroupMatrixConfigs);
  t.emplace_back("WGPUFeatureName_ChromiumExperimentalSubgroupMatrix", kDawnFeatureSubgroupMatrix);
  t.emplace_back("WGPUSubgroupMatrixComponentType_F32", kDawnSubgroupMatrixF32);
  t.emplace_back("WGPUSubgroupMatrixComponentType_F16", kDawnSubgroupMatrixF16);
  // The enum values and flags the backend passes or compares.
#define CYB_E(n) t.emplace_back(#n, static_cast<uint64_t>(n));
  CYB_E(WGPUSType_ShaderSourceWGSL) CYB_E(WGPUFeatureName_ShaderF16) CYB_E(WGPUFeatureName_TimestampQuery)
  CYB_E(WGPUFeatureName_Subgroups) CYB_E(WGPUCallbackMode_WaitAnyOnly) CYB_E(WGPUCallbackMode_AllowProcessEvents)
  CYB_E(WGPUCallbackMode_AllowSpontaneous) CYB_E(WGPUBufferUsage_MapRead) CYB_E(WGPUBufferUsage_CopySrc)
  CYB_E(WGPUBufferUsage_CopyDst) CYB_E(WGPUBufferUsage_Uniform) CYB_E(WGPUBufferUsage_Storage)
  CYB_E(WGPUBufferUsage_QueryResolve) CYB_E(WGPUMapMode_Read) CYB_E(WGPUQueryType_Timestamp)
  CYB_E(WGPUAdapterType_DiscreteGPU) CYB_E(WGPUAdapterType_IntegratedGPU) CYB_E(WGPUAdapterType_CPU)
  CYB_E(WGPUBackendType_Undefined) CYB_E(WGPUBackendType_Null) CYB_E(WGPUBackendType_Vulkan)
  CYB_E(WGPUBackendType_Metal) CYB_E(WGPUBackendType_D3D12) CYB_E(WGPUBackendType_D3D11)
  CYB_E(WGPUBackendType_OpenGL) CYB_E(WGPUBackendType_OpenGLES) CYB_E(WGPUStatus_Success)
  CYB_E(WGPURequestAdapterStatus_Success) CYB_E(WGPURequestDeviceStatus_Success) CYB_E(WGPUMapAsyncStatus_Success)
  CYB_E(WGPUWaitStatus_Success) CYB_E(WGPUWaitStatus_Error) CYB_E(WGPUPowerPreference_HighPerformance)
  CYB_E(WGPUFeatureLevel_Core) CYB_E(WGPUInstanceFeatureName_TimedWaitAny)
#undef CYB_E
  return t;
}

}  // namespace wgpu
}  // namespace cyb

#endif  // CYB_HAVE_WGPU
