#if defined(CYB_HAVE_WGPU)

#include "backends/wgpu/wgpu_device.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/errors.h"

#if !defined(_WIN32)
#include <fcntl.h>
#include <unistd.h>
#endif

namespace cyb {
namespace wgpu {

Gpu& gpu() {
  static Gpu* g = new Gpu;  // process lifetime (drivers dislike teardown at exit)
  return *g;
}

namespace {

const char* adapter_type_name(WGPUAdapterType t) {
  switch (t) {
    case WGPUAdapterType_DiscreteGPU: return "discrete";
    case WGPUAdapterType_IntegratedGPU: return "integrated";
    case WGPUAdapterType_CPU: return "cpu";
    default: return "unknown";
  }
}
const char* backend_type_name(WGPUBackendType t) {
  switch (t) {
    case WGPUBackendType_Vulkan: return "vulkan";
    case WGPUBackendType_Metal: return "metal";
    case WGPUBackendType_D3D12: return "dx12";
    case WGPUBackendType_OpenGL: return "gl";
    case WGPUBackendType_OpenGLES: return "gles";
    case WGPUBackendType_Null: return "null";
    default: return "other";
  }
}

void on_device_error(WGPUDevice const*, WGPUErrorType, WGPUStringView msg, void* u1, void*) {
  Gpu& g = *static_cast<Gpu*>(u1);
  std::lock_guard<std::mutex> lk(g.err_mu);
  if (g.device_error.empty()) g.device_error = sv(msg);
}

// Picks the best adapter (discrete > integrated > unknown > cpu) and creates the device.
// Software adapters are kept too; the caller decides whether one is acceptable.
// While the device is probed, the process's stderr (fd 2) goes to /dev/null:
// Vulkan drivers and their window-system layers print diagnostics there that
// say nothing about compute (e.g. four "error: XDG_RUNTIME_DIR is invalid or
// not set in the environment." lines from Mesa without a session). A probe
// that fails is reported through BackendInit with its own reason. POSIX only.
class QuietStderr {
 public:
  QuietStderr() {
#if !defined(_WIN32)
    std::fflush(stderr);
    const int null_fd = ::open("/dev/null", O_WRONLY);
    if (null_fd < 0) return;
    saved_ = ::dup(2);
    if (saved_ >= 0 && ::dup2(null_fd, 2) < 0) {
      ::close(saved_);
      saved_ = -1;
    }
    ::close(null_fd);
#endif
  }
  ~QuietStderr() {
#if !defined(_WIN32)
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
#endif
  }
  QuietStderr(const QuietStderr&) = delete;
  QuietStderr& operator=(const QuietStderr&) = delete;

 private:
  int saved_ = -1;
};

void init_device_probe(Gpu& g) {
  g.tried = true;
  g.impl = &caps_of(g.dawn_gpa ? Impl::Dawn : Impl::WgpuNative);
  if (!impl_load(g, &g.error)) return;
  g.instance = impl_create_instance(g);
  if (!g.instance) {
    g.error = "wgpuCreateInstance failed";
    return;
  }
  g.adapter = impl_pick_adapter(g, &g.error);
  if (!g.adapter) return;
  WGPUAdapterInfo ai = {};
  A.wgpuAdapterGetInfo(g.adapter, &ai);
  g.info.adapter = sv(ai.device);
  g.info.vendor = sv(ai.vendor);
  g.info.architecture = sv(ai.architecture);
  g.info.description = sv(ai.description);
  g.info.backend_type = backend_type_name(ai.backendType);
  g.info.adapter_type = adapter_type_name(ai.adapterType);
  // Dawn's Null backend (asked for by name only) computes nothing: never a platform default.
  g.info.software = ai.adapterType == WGPUAdapterType_CPU || ai.backendType == WGPUBackendType_Null;
  g.info.subgroup_min = ai.subgroupMinSize;
  g.info.subgroup_max = ai.subgroupMaxSize;
  A.wgpuAdapterInfoFreeMembers(ai);
  g.info.library = g.impl->impl == Impl::Dawn ? "Dawn (wgpudawn)" : g.lib.path;
  g.info.impl = g.impl->name;

  WGPULimits lim = WGPU_LIMITS_INIT;
  A.wgpuAdapterGetLimits(g.adapter, &lim);
  lim.nextInChain = nullptr;
  std::vector<WGPUFeatureName> feats;
  if (A.wgpuAdapterHasFeature(g.adapter, WGPUFeatureName_ShaderF16)) {
    feats.push_back(WGPUFeatureName_ShaderF16);
    g.info.shader_f16 = true;
  }
  const WGPUFeatureName sub = g.impl->subgroup_feature;
  if (A.wgpuAdapterHasFeature(g.adapter, sub)) {
    feats.push_back(sub);
    g.info.subgroups = true;
  }
  if (A.wgpuAdapterHasFeature(g.adapter, WGPUFeatureName_TimestampQuery)) {
    feats.push_back(WGPUFeatureName_TimestampQuery);
    g.timestamps = true;
  }
  DeviceRequest more;
  impl_device_request(g, &more);
  feats.insert(feats.end(), more.features.begin(), more.features.end());
  WGPUDeviceDescriptor dd = {};
  dd.nextInChain = more.chain;
  dd.label = sv("cyb_llm");
  dd.requiredFeatureCount = feats.size();
  dd.requiredFeatures = feats.data();
  dd.requiredLimits = &lim;
  dd.uncapturedErrorCallbackInfo.callback = on_device_error;
  dd.uncapturedErrorCallbackInfo.userdata1 = &g;
  struct Req {
    WGPUDevice dev = nullptr;
    std::string msg;
    bool done = false;
  } req;
  WGPURequestDeviceCallbackInfo cb = {};
  cb.mode = WGPUCallbackMode_AllowSpontaneous;
  cb.callback = [](WGPURequestDeviceStatus st, WGPUDevice dev, WGPUStringView msg, void* u1, void*) {
    Req& r = *static_cast<Req*>(u1);
    if (st == WGPURequestDeviceStatus_Success) r.dev = dev;
    else r.msg = sv(msg);
    r.done = true;
  };
  cb.userdata1 = &req;
  A.wgpuAdapterRequestDevice(g.adapter, &dd, cb);
  for (int i = 0; i < 1000 && !req.done; ++i) A.wgpuInstanceProcessEvents(g.instance);
  if (!req.dev) {
    g.error = "requesting a device from '" + g.info.adapter + "' failed: " + req.msg;
    return;
  }
  g.device = req.dev;
  g.queue = A.wgpuDeviceGetQueue(g.device);
  impl_device_ready(g);
  for (const DawnSubgroupMatrixConfig& c : g.sm_configs) {
    auto ty = [](uint32_t t) { return t == kDawnSubgroupMatrixF16 ? "f16" : t == kDawnSubgroupMatrixF32 ? "f32" : "int"; };
    g.info.subgroup_matrix_configs.push_back(std::string(ty(c.componentType)) + "->" + ty(c.resultComponentType) + " " +
                                             std::to_string(c.M) + "x" + std::to_string(c.N) + "x" +
                                             std::to_string(c.K));
  }
  g.info.subgroup_matrix = g.subgroup_matrix;
  g.limits = lim;
  g.info.max_storage_binding = lim.maxStorageBufferBindingSize;
  g.info.max_buffer = lim.maxBufferSize;
  g.info.max_workgroup_storage = lim.maxComputeWorkgroupStorageSize;
}

}  // namespace

void init_device(Gpu& g) {
  QuietStderr quiet;
  init_device_probe(g);
}

namespace {

const char* kNoDawn =
    "webgpu:dawn runs on the WebGPU procedures of the wgpudawn Python package, handed over when a model "
    "is loaded from Python (pip install \"cyb_llm[gpu-dawn]\"); C and C++ programs use wgpu+rs (wgpu-native)";

}  // namespace

const char* backend_name() {
  const Gpu& g = gpu();
  return g.impl ? g.impl->backend : "wgpu+rs";
}

Gpu& device_or_throw(bool allow_software, WgpuImpl want) {
  Gpu& g = gpu();
  std::lock_guard<std::mutex> lk(g.mu);
  const char* asked = want == WgpuImpl::Dawn ? "webgpu:dawn" : "wgpu+rs";
  if (!g.tried) {
    if (want == WgpuImpl::Dawn && !g.dawn_gpa) throw_backend_init(asked, kNoDawn);
    if (want == WgpuImpl::Native && g.dawn_gpa)
      throw_backend_init(asked, "this process handed Dawn's procedures over (webgpu:dawn); one WebGPU "
                                "implementation a process: run wgpu+rs (wgpu-native) in another process");
    init_device(g);
  }
  if (want != WgpuImpl::Any && g.impl->impl != (want == WgpuImpl::Dawn ? Impl::Dawn : Impl::WgpuNative))
    throw_backend_init(asked, std::string("this process's WebGPU device runs on ") + g.impl->name + " (" +
                                  g.impl->backend + " was used first); one WebGPU implementation a process: run " +
                                  asked + " in another process");
  if (!g.device) throw_backend_init(g.impl->backend, g.error);
  if (g.info.software && !allow_software)
    throw_backend_init(g.impl->backend, "only a software adapter ('" + g.info.adapter +
                                            "', type cpu) exists; it is not a platform default");
  return g;
}

void check_device_error(Gpu& g, const char* what) {
  std::string e;
  {
    std::lock_guard<std::mutex> lk(g.err_mu);
    e.swap(g.device_error);
  }
  if (!e.empty()) throw_backend_init(g.impl->backend, std::string(what) + ": " + e);
}

}  // namespace wgpu

bool wgpu_compiled() { return true; }

bool wgpu_hardware_available() {
  wgpu::Gpu& g = wgpu::gpu();
  {
    std::lock_guard<std::mutex> lk(g.mu);
    if (!g.tried) wgpu::init_device(g);
    return g.device && !g.info.software;
  }
}

WgpuInfo wgpu_info(bool allow_software) { return wgpu::device_or_throw(allow_software).info; }

void wgpu_use_dawn(uintptr_t get_proc_address) {
  wgpu::Gpu& g = wgpu::gpu();
  std::lock_guard<std::mutex> lk(g.mu);
  if (g.tried && g.impl->impl != wgpu::Impl::Dawn)
    throw_backend_init("webgpu:dawn", "this process's WebGPU device already runs on wgpu-native (wgpu+rs was used "
                                      "first); one WebGPU implementation a process: run webgpu:dawn in another process");
  if (!g.tried) g.dawn_gpa = get_proc_address;
}

bool wgpu_dawn_handed() {
  wgpu::Gpu& g = wgpu::gpu();
  std::lock_guard<std::mutex> lk(g.mu);
  return g.dawn_gpa != 0;
}

std::string wgpu_process_impl() {
  wgpu::Gpu& g = wgpu::gpu();
  std::lock_guard<std::mutex> lk(g.mu);
  return g.impl ? g.impl->name : "";
}

namespace {

wgpu::Impl table_impl(WgpuImpl i) { return i == WgpuImpl::Dawn ? wgpu::Impl::Dawn : wgpu::Impl::WgpuNative; }

}  // namespace

std::vector<std::string> wgpu_proc_names(WgpuImpl impl) { return wgpu::api_names(table_impl(impl)); }

std::vector<std::string> wgpu_fill_check(WgpuImpl impl, const std::vector<std::string>& absent) {
  // A scratch table filled from a resolver that knows every name but `absent` (the process's
  // table is not touched).
  struct Fake {
    const std::vector<std::string>* absent;
    char dummy = 0;
  } fake{&absent};
  wgpu::Api scratch;
  return wgpu::fill_api(scratch, table_impl(impl), [](void* ctx, const char* name) -> void* {
    Fake& f = *static_cast<Fake*>(ctx);
    for (const std::string& a : *f.absent)
      if (a == name) return nullptr;
    return &f.dummy;
  }, &fake);
}

std::vector<std::pair<std::string, uint64_t>> wgpu_abi() { return wgpu::abi_table(); }

bool wgpu_set_gpu_profiling(bool on) {
  wgpu::Gpu& g = wgpu::gpu();
  g.prof.on.store(on && g.timestamps);
  return on && g.timestamps;
}

std::vector<WgpuShaderTime> wgpu_take_gpu_profile(uint64_t* untimed) {
  wgpu::Gpu& g = wgpu::gpu();
  std::vector<WgpuShaderTime> v;
  std::lock_guard<std::mutex> lk(g.prof.mu);
  for (const auto& kv : g.prof.rows) v.push_back({kv.first, kv.second.first, kv.second.second / 1e6});
  std::sort(v.begin(), v.end(), [](const WgpuShaderTime& a, const WgpuShaderTime& b) { return a.gpu_ms > b.gpu_ms; });
  if (untimed) *untimed = g.prof.untimed;
  g.prof.rows.clear();
  g.prof.untimed = 0;
  return v;
}

std::map<std::string, double> wgpu_take_host_times() {
  wgpu::HostTimes& h = wgpu::gpu().host;
  std::map<std::string, double> r;
  r["forwards"] = static_cast<double>(h.forwards.exchange(0));
  r["record_ms"] = static_cast<double>(h.record_ns.exchange(0)) * 1e-6;
  r["submit_ms"] = static_cast<double>(h.submit_ns.exchange(0)) * 1e-6;
  r["wait_ms"] = static_cast<double>(h.wait_ns.exchange(0)) * 1e-6;
  r["submits"] = static_cast<double>(h.submits.exchange(0));
  r["chunks"] = static_cast<double>(h.chunks.exchange(0));
  return r;
}

std::map<std::string, uint64_t> wgpu_report() {
  wgpu::Gpu& g = wgpu::gpu();
  std::map<std::string, uint64_t> r;
  WGPUGlobalReport rep = {};
  if (!wgpu::impl_report(g, &rep)) return r;
  auto add = [&](const char* k, const WGPURegistryReport& x) {
    r[std::string(k) + ".allocated"] = x.numAllocated;
    r[std::string(k) + ".kept"] = x.numKeptFromUser;
    r[std::string(k) + ".released"] = x.numReleasedFromUser;
  };
  add("buffers", rep.hub.buffers);
  add("bind_groups", rep.hub.bindGroups);
  add("compute_pipelines", rep.hub.computePipelines);
  add("shader_modules", rep.hub.shaderModules);
  add("command_buffers", rep.hub.commandBuffers);
  add("devices", rep.hub.devices);
  return r;
}

std::map<std::string, uint64_t> wgpu_memory(bool reset_peak) {
  wgpu::Gpu& g = wgpu::gpu();
  const uint64_t live = g.live_bytes.load();
  std::map<std::string, uint64_t> r{{"live_bytes", live}, {"peak_bytes", std::max(g.peak_bytes.load(), live)}};
  if (reset_peak) g.peak_bytes = live;
  return r;
}

}  // namespace cyb

#endif  // CYB_HAVE_WGPU
