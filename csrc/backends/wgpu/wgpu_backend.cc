#include "backends/wgpu/wgpu_backend.h"

#include "core/env_setting.h"
#include "core/errors.h"
#include "core/quant.h"

#if !defined(CYB_HAVE_WGPU)

namespace cyb {
bool wgpu_compiled() { return false; }
bool wgpu_hardware_available() { return false; }
WgpuInfo wgpu_info(bool) {
  throw_backend_init("wgpu+rs", "this build has no wgpu+rs backend (the `wgpu` package was not "
                                "found when the native core was configured)");
}
std::unique_ptr<Backend> make_wgpu_backend(bool allow_software) {
  wgpu_info(allow_software);
  return nullptr;
}
std::map<std::string, uint64_t> wgpu_report() { return {}; }
std::map<std::string, double> wgpu_take_host_times() { return {}; }
std::map<std::string, uint64_t> wgpu_memory(bool) { return {}; }
bool wgpu_set_gpu_profiling(bool) { return false; }
std::vector<WgpuShaderTime> wgpu_take_gpu_profile(uint64_t* untimed) {
  if (untimed) *untimed = 0;
  return {};
}
}  // namespace cyb

#else

#include <webgpu.h>
#include <wgpu.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <deque>
#include <atomic>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>


#if defined(_WIN32)
#define NOMINMAX
#include <windows.h>
#else
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>
#endif
#include <cstdio>

namespace cyb {

const char* wgsl_source(const char* name);  // generated from shaders/wgsl

namespace {

// ------------------------------------------------------------ the C API table

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

Api A;

std::string sv(WGPUStringView s) {
  if (!s.data) return {};
  return s.length == WGPU_STRLEN ? std::string(s.data) : std::string(s.data, s.length);
}
WGPUStringView sv(const char* s) { return WGPUStringView{s, WGPU_STRLEN}; }

#if defined(_WIN32)
const char* kLibName = "wgpu_native-release.dll";
#elif defined(__APPLE__)
const char* kLibName = "libwgpu_native-release.dylib";
#else
const char* kLibName = "libwgpu_native-release.so";
#endif

void* open_lib(const std::string& path) {
#if defined(_WIN32)
  return reinterpret_cast<void*>(LoadLibraryA(path.c_str()));
#else
  return dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
}
void* lib_sym(void* lib, const char* name) {
#if defined(_WIN32)
  return reinterpret_cast<void*>(GetProcAddress(reinterpret_cast<HMODULE>(lib), name));
#else
  return dlsym(lib, name);
#endif
}

// Where libwgpu_native may be: $CYB_WGPU_LIB, a `wgpu` package installed next to this module
// (site-packages/wgpu/resources), the `wgpu` package found at configure time while that folder
// still exists (a development build; pip's build environment is gone once the wheel is built, so
// an installed module neither searches nor names it), then the loader's own search by file name.
std::vector<std::string> lib_candidates() {
  std::vector<std::string> c;
  if (const char* e = std::getenv("CYB_WGPU_LIB")) c.push_back(e);
#if !defined(_WIN32)
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&lib_candidates), &info) && info.dli_fname) {
    std::string p = info.dli_fname;
    size_t s = p.rfind('/');
    if (s != std::string::npos) {
      p = p.substr(0, s);  // .../site-packages/cyb_llm
      size_t s2 = p.rfind('/');
      if (s2 != std::string::npos) c.push_back(p.substr(0, s2) + "/wgpu/resources/" + kLibName);
    }
  }
#endif
#if defined(_WIN32)
  const DWORD attrs = GetFileAttributesA(CYB_WGPU_BUILD_DIR);
  if (attrs != INVALID_FILE_ATTRIBUTES && (attrs & FILE_ATTRIBUTE_DIRECTORY))
#else
  if (::access(CYB_WGPU_BUILD_DIR, F_OK) == 0)
#endif
    c.push_back(std::string(CYB_WGPU_BUILD_DIR) + "/" + kLibName);
  c.push_back(kLibName);
  return c;
}

// ------------------------------------------------------------ the device

struct Pipeline {
  WGPUComputePipeline pipe = nullptr;
  WGPUBindGroupLayout layout = nullptr;
  std::string name;  // the cache key: shader, defines, encodings (GPU profile rows)
};

// GPU time per pipeline (wgpu_set_gpu_profiling).
// Host time of the forwards (always on: three clock reads per forward): recording from
// begin_forward to the submit, finishing + submitting, waiting for read-backs.
struct HostTimes {
  std::atomic<uint64_t> forwards{0}, record_ns{0}, submit_ns{0}, wait_ns{0};
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
  void* lib = nullptr;
  std::string lib_path;
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
};

Gpu& gpu() {
  static Gpu* g = new Gpu;  // process lifetime (drivers dislike teardown at exit)
  return *g;
}

// wgpuGetVersion's encoding: one byte each of major, minor, patch, build.
std::string version_string(uint32_t v) {
  return std::to_string(v >> 24) + "." + std::to_string((v >> 16) & 0xFF) + "." + std::to_string((v >> 8) & 0xFF) +
         "." + std::to_string(v & 0xFF);
}

bool load_api(Gpu& g) {
  std::string tried;
  for (const std::string& p : lib_candidates()) {
    g.lib = open_lib(p);
    if (g.lib) {
      g.lib_path = p;
      break;
    }
    tried += " " + p;
  }
  if (!g.lib) {
    g.error = std::string("libwgpu_native ") + CYB_WGPU_NATIVE_VERSION +
              " not found: install the GPU extra, pip install 'cyb_llm[gpu]' (or set CYB_WGPU_LIB); tried:" + tried +
              " (the last by file name, through the loader's search path)";
    return false;
  }
  // The C interface changes between releases: only the one these headers describe is used.
  using GetVersion = uint32_t (*)();
  auto get_version = reinterpret_cast<GetVersion>(lib_sym(g.lib, "wgpuGetVersion"));
  const std::string got = get_version ? version_string(get_version()) : std::string("(no wgpuGetVersion)");
  if (got != CYB_WGPU_NATIVE_VERSION) {
    g.error = "libwgpu_native at " + g.lib_path + " is version " + got + ", this build needs " +
              CYB_WGPU_NATIVE_VERSION + " (pip install 'cyb_llm[gpu]' installs the matching wgpu package)";
    return false;
  }
#define CYB_LOAD(n)                                                           \
  A.n = reinterpret_cast<decltype(A.n)>(lib_sym(g.lib, #n));                  \
  if (!A.n) {                                                                 \
    g.error = std::string("libwgpu_native at ") + g.lib_path + " lacks " #n; \
    return false;                                                             \
  }
  CYB_WGPU_FUNCS(CYB_LOAD)
#undef CYB_LOAD
  return true;
}

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

void init_device_probe(Gpu& g);

void init_device(Gpu& g) {
  QuietStderr quiet;
  init_device_probe(g);
}

void init_device_probe(Gpu& g) {
  g.tried = true;
  if (!load_api(g)) return;
  WGPUInstanceExtras extras = {};
  extras.chain.sType = static_cast<WGPUSType>(WGPUSType_InstanceExtras);
  extras.backends = WGPUInstanceBackend_Primary;
  WGPUInstanceDescriptor idesc = {};
  idesc.nextInChain = &extras.chain;
  g.instance = A.wgpuCreateInstance(&idesc);
  if (!g.instance) {
    g.error = "wgpuCreateInstance failed";
    return;
  }
  WGPUInstanceEnumerateAdapterOptions eo = {};
  eo.backends = WGPUInstanceBackend_Primary;
  const size_t n = A.wgpuInstanceEnumerateAdapters(g.instance, &eo, nullptr);
  std::vector<WGPUAdapter> ads(n);
  if (n) A.wgpuInstanceEnumerateAdapters(g.instance, &eo, ads.data());
  auto rank = [](WGPUAdapterType t) {
    return t == WGPUAdapterType_DiscreteGPU ? 0 : t == WGPUAdapterType_IntegratedGPU ? 1
                                                : t == WGPUAdapterType_CPU ? 3 : 2;
  };
  int best = -1, best_rank = 99;
  for (size_t i = 0; i < n; ++i) {
    WGPUAdapterInfo ai = {};
    if (A.wgpuAdapterGetInfo(ads[i], &ai) != WGPUStatus_Success) continue;
    const int r = rank(ai.adapterType);
    if (r < best_rank) {
      best_rank = r;
      best = static_cast<int>(i);
    }
    A.wgpuAdapterInfoFreeMembers(ai);
  }
  for (size_t i = 0; i < n; ++i)
    if (static_cast<int>(i) != best) A.wgpuAdapterRelease(ads[i]);
  if (best < 0) {
    g.error = "no Vulkan/Metal/DX12 adapter found (on Linux CI: apt-get install mesa-vulkan-drivers)";
    return;
  }
  g.adapter = ads[static_cast<size_t>(best)];
  WGPUAdapterInfo ai = {};
  A.wgpuAdapterGetInfo(g.adapter, &ai);
  g.info.adapter = sv(ai.device);
  g.info.vendor = sv(ai.vendor);
  g.info.architecture = sv(ai.architecture);
  g.info.description = sv(ai.description);
  g.info.backend_type = backend_type_name(ai.backendType);
  g.info.adapter_type = adapter_type_name(ai.adapterType);
  g.info.software = ai.adapterType == WGPUAdapterType_CPU;
  g.info.subgroup_min = ai.subgroupMinSize;
  g.info.subgroup_max = ai.subgroupMaxSize;
  A.wgpuAdapterInfoFreeMembers(ai);
  g.info.library = g.lib_path;

  WGPULimits lim = WGPU_LIMITS_INIT;
  A.wgpuAdapterGetLimits(g.adapter, &lim);
  lim.nextInChain = nullptr;
  std::vector<WGPUFeatureName> feats;
  if (A.wgpuAdapterHasFeature(g.adapter, WGPUFeatureName_ShaderF16)) {
    feats.push_back(WGPUFeatureName_ShaderF16);
    g.info.shader_f16 = true;
  }
  const WGPUFeatureName sub = static_cast<WGPUFeatureName>(WGPUNativeFeature_Subgroup);
  if (A.wgpuAdapterHasFeature(g.adapter, sub)) {
    feats.push_back(sub);
    g.info.subgroups = true;
  }
  if (A.wgpuAdapterHasFeature(g.adapter, WGPUFeatureName_TimestampQuery)) {
    feats.push_back(WGPUFeatureName_TimestampQuery);
    g.timestamps = true;
  }
  WGPUDeviceDescriptor dd = {};
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
  if (g.timestamps) g.ts_period = A.wgpuQueueGetTimestampPeriod(g.queue);
  g.limits = lim;
  g.info.max_storage_binding = lim.maxStorageBufferBindingSize;
  g.info.max_buffer = lim.maxBufferSize;
  g.info.max_workgroup_storage = lim.maxComputeWorkgroupStorageSize;
}

Gpu& device_or_throw(bool allow_software) {
  Gpu& g = gpu();
  std::lock_guard<std::mutex> lk(g.mu);
  if (!g.tried) init_device(g);
  if (!g.device) throw_backend_init("wgpu+rs", g.error);
  if (g.info.software && !allow_software)
    throw_backend_init("wgpu+rs", "only a software adapter ('" + g.info.adapter +
                                      "', type cpu) exists; it is not a platform default");
  return g;
}

void check_device_error(Gpu& g, const char* what) {
  std::string e;
  {
    std::lock_guard<std::mutex> lk(g.err_mu);
    e.swap(g.device_error);
  }
  if (!e.empty()) throw_backend_init("wgpu+rs", std::string(what) + ": " + e);
}

// ------------------------------------------------------------ shaders

// `//#if NAME`, `//#if !NAME`, `//#else`, `//#endif` (nestable) on whole lines.
std::string preprocess(const std::string& src, const std::vector<std::string>& defs) {
  std::string out;
  std::vector<std::pair<bool, bool>> stack;  // (active, parent active)
  bool active = true;
  size_t pos = 0;
  while (pos < src.size()) {
    size_t e = src.find('\n', pos);
    if (e == std::string::npos) e = src.size();
    std::string line = src.substr(pos, e - pos);
    pos = e + 1;
    size_t f = line.find_first_not_of(" \t");
    std::string t = f == std::string::npos ? "" : line.substr(f);
    if (t.rfind("//#if ", 0) == 0) {
      std::string name = t.substr(6);
      bool neg = !name.empty() && name[0] == '!';
      if (neg) name = name.substr(1);
      bool def = std::find(defs.begin(), defs.end(), name) != defs.end();
      stack.push_back({active, active});
      active = active && (def != neg);
      continue;
    }
    if (t.rfind("//#else", 0) == 0) {
      active = stack.back().second && !active;
      continue;
    }
    if (t.rfind("//#endif", 0) == 0) {
      active = stack.back().first;
      stack.pop_back();
      continue;
    }
    if (active) {
      out += line;
      out += '\n';
    }
  }
  return out;
}

// `//#unroll` on the line before `for (var V = 0u; V < N; V++) {` (N a literal `16u` or the
// name of a module constant `const NAME = 16u;`): the loop written out N times, each body in
// its own block with V replaced by the literal `Ku` (straight-line code whose loads a GPU
// compiler can issue together; shaders/wgsl/mvdot.wgsl). The H200's compiler does not unroll
// such loops itself: a tiled GEMM's product loop on staged tiles ran 38-45% faster written out
// (bench/wgpu_gemm_roof.py, docs/gpu-bench.md). Marked loops inside a marked loop are written
// out first. Plain string
// parsing, no std::regex: the module links libstdc++ statically, whose locale machinery
// (iostreams) crashes on the H200 image (docs/gpu-bench.md), and a build using std::regex
// here segfaulted there on its first model load.
// The line of src starting at pos (without its newline); *end: where it ends.
std::string line_at(const std::string& src, size_t pos, size_t* end) {
  size_t e = src.find('\n', pos);
  if (e == std::string::npos) e = src.size();
  *end = e;
  return src.substr(pos, e - pos);
}

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// `body` with every whole-word `name` replaced by `value`.
std::string replace_word(const std::string& body, const std::string& name, const std::string& value) {
  std::string out;
  for (size_t i = 0; i < body.size();) {
    if (body.compare(i, name.size(), name) == 0 && (i == 0 || !ident_char(body[i - 1])) &&
        (i + name.size() >= body.size() || !ident_char(body[i + name.size()]))) {
      out += value;
      i += name.size();
    } else {
      out += body[i++];
    }
  }
  return out;
}

// The digits of `const NAME = <digits>u;` in src ("" when there is no such line).
std::string const_u32(const std::string& src, const std::string& name) {
  const std::string decl = "const " + name + " = ";
  for (size_t at = src.find(decl); at != std::string::npos; at = src.find(decl, at + 1)) {
    if (at > 0 && ident_char(src[at - 1])) continue;
    size_t q = at + decl.size(), d0 = q;
    while (q < src.size() && std::isdigit(static_cast<unsigned char>(src[q]))) ++q;
    if (q > d0 && src.compare(q, 2, "u;") == 0) return src.substr(d0, q - d0);
  }
  return "";
}

// module: where the loops' constants are declared (src itself at the top level).
std::string unroll(const std::string& src, const std::string* module = nullptr) {
  const std::string& mod = module ? *module : src;
  std::string out;
  size_t pos = 0;
  while (pos < src.size()) {
    size_t e;
    const std::string line = line_at(src, pos, &e);
    const size_t f = line.find_first_not_of(" \t");
    if (f == std::string::npos || line.compare(f, std::string::npos, "//#unroll") != 0) {
      out += line + "\n";
      pos = e + 1;
      continue;
    }
    const size_t fe = std::min(src.find('\n', e + 1), src.size());
    const std::string for_line = src.substr(e + 1, fe - e - 1);
    const auto bad = [&] {
      throw_backend_init("wgpu+rs", "shader: //#unroll is not followed by a counted loop: '" + for_line + "'");
    };
    const size_t ind = for_line.find_first_not_of(" \t");
    const std::string head = "for (var ";
    if (ind == std::string::npos || for_line.compare(ind, head.size(), head) != 0) bad();
    size_t q = ind + head.size(), v0 = q;
    while (q < for_line.size() && ident_char(for_line[q])) ++q;
    const std::string var = for_line.substr(v0, q - v0);
    const std::string mid = " = 0u; " + var + " < ";
    if (var.empty() || for_line.compare(q, mid.size(), mid) != 0) bad();
    q += mid.size();
    size_t n0 = q;
    while (q < for_line.size() && ident_char(for_line[q])) ++q;
    std::string bound = for_line.substr(n0, q - n0);  // `16u` or a module constant's name
    if (!bound.empty() && std::isdigit(static_cast<unsigned char>(bound[0]))) {
      if (bound.back() != 'u') bad();
      bound.pop_back();
    } else if (!bound.empty()) {
      bound = const_u32(mod, bound);
    }
    const std::string tail = "; " + var + "++) {";
    if (bound.empty() || bound.find_first_not_of("0123456789") != std::string::npos ||
        for_line.compare(q, std::string::npos, tail) != 0)
      bad();
    const int n = std::stoi(bound);
    const std::string indent = for_line.substr(0, ind);
    size_t i = fe + 1;
    for (int depth = 1; i < src.size() && depth > 0; ++i) depth += src[i] == '{' ? 1 : src[i] == '}' ? -1 : 0;
    std::string body = src.substr(fe + 1, i - 1 - (fe + 1));
    body.erase(body.find_last_not_of(" \t") + 1);  // the closing brace's indentation
    body = unroll(body, &mod);                       // loops marked inside it
    for (int k = 0; k < n; ++k) out += indent + "{\n" + replace_word(body, var, std::to_string(k) + "u") + indent + "}\n";
    const size_t nl = src.find('\n', i);
    pos = nl == std::string::npos ? src.size() : nl + 1;
  }
  return out;
}

// `//#include NAME` lines replaced by shaders/wgsl/NAME.wgsl (itself expanded), each file once.
std::string include(const std::string& src, std::vector<std::string>* seen) {
  std::string out;
  size_t pos = 0;
  while (pos < src.size()) {
    size_t e;
    const std::string line = line_at(src, pos, &e);
    pos = e + 1;
    const size_t f = line.find_first_not_of(" \t");
    const std::string tag = "//#include ";
    if (f == std::string::npos || line.compare(f, tag.size(), tag) != 0) {
      out += line + "\n";
      continue;
    }
    const std::string name = line.substr(f + tag.size());
    if (std::find(seen->begin(), seen->end(), name) != seen->end()) continue;
    seen->push_back(name);
    out += include(wgsl_source(name.c_str()), seen);
  }
  return out;
}

void replace_all(std::string& s, const std::string& a, const std::string& b) {
  for (size_t p = s.find(a); p != std::string::npos; p = s.find(a, p + b.size())) s.replace(p, a.size(), b);
}

const char* enc_fn(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::Q4_0: return "q4_0";
    case DType::Q4_1: return "q4_1";
    case DType::Q5_0: return "q5_0";
    case DType::Q5_1: return "q5_1";
    case DType::Q8_0: return "q8_0";
    case DType::IQ4_NL: return "iq4_nl";
    case DType::Q2_K: return "q2_k";
    case DType::Q3_K: return "q3_k";
    case DType::Q4_K: return "q4_k";
    case DType::Q5_K: return "q5_k";
    case DType::Q6_K: return "q6_k";
    default: return nullptr;
  }
}

// Whether shaders are compiled with wgpu's runtime checks (every array index clamped to the
// array, every loop given an iteration bound): CYB_WGPU_SHADER_CHECKS=on|off, read once; off
// by default: the shaders are compiled as written (wgpuDeviceCreateShaderModuleTrusted), since
// every index the kernels form is bounded by the shapes the backend validated before
// dispatching (the op matrix and CYB_WGPU_SHADER_CHECKS=on runs of it check that on lavapipe).
// On the H200 the checks cost 11% of a qwen15-shaped
// decode step and 17-20% of its prompt time (docs/gpu-bench.md).
bool shader_checks() {
  static const bool on = env_switch("CYB_WGPU_SHADER_CHECKS", "on", "off", false);
  return on;
}

// The bytes of workgroup memory a module declares: its `var<workgroup>` variables, each a scalar,
// vector or atomic of 4-byte (f16: 2-byte) components, or an array of them whose length is a
// literal or a module constant (`const NAME = 64u;`), the forms shaders/wgsl uses. wgpu-native
// does not check a pipeline's workgroup memory against the device's limit (a 64 KiB array ran on
// lavapipe, whose limit is 32 KiB, and a kernel over the H200's 48 KiB hung it:
// docs/gpu-bench.md), so pipeline() checks it. Any other form is an error naming it.
[[noreturn]] void wg_unsized(const std::string& key, const std::string& what) {
  throw_backend_init("wgpu+rs", "shader '" + key + "': cannot size the workgroup variable type '" + what + "'");
}
std::string wg_trim(const std::string& t) {
  const size_t a = t.find_first_not_of(" \t"), b = t.find_last_not_of(" \t");
  return a == std::string::npos ? std::string() : t.substr(a, b - a + 1);
}
uint64_t wg_constant(const std::string& src, const std::string& key, const std::string& n) {
  for (size_t p = src.find("const " + n); p != std::string::npos; p = src.find("const " + n, p + 1)) {
    size_t q = p + 6 + n.size();
    while (q < src.size() && src[q] == ' ') ++q;
    if (q >= src.size() || src[q] != '=') continue;
    const uint64_t v = std::strtoull(src.c_str() + q + 1, nullptr, 10);
    if (v > 0) return v;
  }
  wg_unsized(key, n);
}
uint64_t wg_type_bytes(const std::string& t, const std::string& src, const std::string& key) {
  if (t == "f32" || t == "u32" || t == "i32" || t == "atomic<u32>" || t == "atomic<i32>") return 4;
  if (t == "f16") return 2;
  if (t.size() > 6 && t.compare(0, 3, "vec") == 0 && t[4] == '<' && t.back() == '>' && t[3] >= '2' && t[3] <= '4')
    return uint64_t(t[3] == '3' ? 4 : t[3] - '0') * wg_type_bytes(t.substr(5, t.size() - 6), src, key);
  if (t.compare(0, 6, "array<") == 0 && t.back() == '>') {
    const size_t c = t.rfind(',');
    if (c == std::string::npos) wg_unsized(key, t);
    std::string n = wg_trim(t.substr(c + 1, t.size() - c - 2));
    if (!n.empty() && n.back() == 'u') n.pop_back();
    const uint64_t len = !n.empty() && std::isdigit(static_cast<unsigned char>(n[0]))
                             ? std::strtoull(n.c_str(), nullptr, 10)
                             : wg_constant(src, key, n);
    return len * wg_type_bytes(wg_trim(t.substr(6, c - 6)), src, key);
  }
  wg_unsized(key, t);
}
uint64_t workgroup_bytes(const std::string& src, const std::string& key) {
  uint64_t total = 0;
  const std::string tag = "var<workgroup>";
  for (size_t p = src.find(tag); p != std::string::npos; p = src.find(tag, p + tag.size())) {
    const size_t colon = src.find(':', p), semi = src.find(';', p);
    if (colon == std::string::npos || semi == std::string::npos || colon > semi) wg_unsized(key, src.substr(p, 40));
    total += wg_type_bytes(wg_trim(src.substr(colon + 1, semi - colon - 1)), src, key);
  }
  return total;
}

// The workgroup memory the checks allow: the device's, or less with CYB_WGPU_WORKGROUP_LIMIT=N
// (bytes, read once; for tests and for an adapter that reports more than it runs).
uint64_t workgroup_limit(const Gpu& g) {
  static const int64_t cap =
      env_int("CYB_WGPU_WORKGROUP_LIMIT", 1, std::numeric_limits<int64_t>::max(), -1, "a byte count (> 0)");
  const uint64_t dev = g.limits.maxComputeWorkgroupStorageSize;
  return cap < 0 ? dev : std::min<uint64_t>(dev, uint64_t(cap));
}

// The pipeline for shader `name` with these defines; `deq`/`deq2` pick the weight decoders.
// A kernel over the workgroup memory limit is a BackendInit error, or with `soft` a null result
// (remembered: the source is not built again).
Pipeline* pipeline_impl(Gpu& g, const char* name, const std::vector<std::string>& defs, DType deq, DType deq2,
                        DType deq3, bool soft) {
  std::string key = name;
  for (const auto& d : defs) key += "+" + d;
  for (DType t : {deq, deq2, deq3})
    if (t != DType::COUNT) key += std::string(":") + enc_fn(t);
  std::lock_guard<std::mutex> lk(g.mu);
  auto it = g.pipelines.find(key);
  if (it != g.pipelines.end()) return &it->second;
  if (soft && g.over_limit.count(key)) return nullptr;
  std::string src;
  if (deq != DType::COUNT) {
    src = std::string(wgsl_source("common")) + wgsl_source("dequant");
    if (std::strcmp(name, "matvec") == 0) src += unroll(wgsl_source("mvdot"));
    // The second and third weights' decoders: the same functions renamed (deq2_*, h16_2, W2, ...).
    const std::string base = src;
    const DType more[2] = {deq2, deq3};
    for (int w = 0; w < 2; ++w) {
      if (more[w] == DType::COUNT) continue;
      const std::string n = std::to_string(w + 2);
      std::string s2 = base;
      for (const char* fn : {"deq_", "b8(", "i8v(", "h16(", "nib(", "scale_min_k4(", "scale_q3_k(",
                             "hsum(", "nib4(", "bytes4(", "sb4(", "hb4("}) {
        std::string f = fn;
        std::string r = f.back() == '(' ? f.substr(0, f.size() - 1) + "_" + n + "(" : "deq" + n + "_";
        replace_all(s2, f, r);
      }
      replace_all(s2, "W[", "W" + n + "[");
      replace_all(s2, "WV[", "WV" + n + "[");
      replace_all(s2, "IQ4NL", "IQ4NL_" + n);
      replace_all(s2, "SH4", "SH4_" + n);
      src += s2;
    }
  }
  // f16 arithmetic (matmul.wgsl H16): the directive leads the module.
  if (std::find(defs.begin(), defs.end(), "H16") != defs.end()) src = "enable f16;\n" + src;
  std::vector<std::string> seen;
  std::string body = unroll(preprocess(include(wgsl_source(name), &seen), defs));
  const DType all[3] = {deq3, deq2, deq};  // DEQ3 / MV3 -> the third weight's decoders, ...
  for (int w = 0; w < 3; ++w) {
    if (all[w] == DType::COUNT) continue;
    const std::string n = w == 2 ? "" : std::to_string(3 - w);
    replace_all(body, "DEQ" + n + "(", "deq" + n + "_" + enc_fn(all[w]) + "(");
    replace_all(body, "DQV" + n + "(", "deq" + n + "_v4_" + enc_fn(all[w]) + "(");
    replace_all(body, "MV" + n + "(", "deq" + n + "_mv_" + enc_fn(all[w]) + "(");
    replace_all(body, "KS" + n + "(", "deq" + n + "_ks_" + enc_fn(all[w]) + "(");
  }
  src += body;
  const uint64_t wg_bytes = workgroup_bytes(src, key), wg_limit = workgroup_limit(g);
  if (wg_bytes > wg_limit && soft) {
    g.over_limit.insert(key);
    return nullptr;
  }
  if (wg_bytes > wg_limit)
    throw_backend_init("wgpu+rs", "shader '" + key + "' declares " + std::to_string(wg_bytes) +
                                      " bytes of workgroup memory; the device allows " + std::to_string(wg_limit) +
                                      " (maxComputeWorkgroupStorageSize)");
  WGPUShaderSourceWGSL wgsl = {};
  wgsl.chain.sType = WGPUSType_ShaderSourceWGSL;
  wgsl.code = WGPUStringView{src.data(), src.size()};
  WGPUShaderModuleDescriptor md = {};
  md.nextInChain = &wgsl.chain;
  md.label = sv(name);
  WGPUShaderModule mod = shader_checks() ? A.wgpuDeviceCreateShaderModule(g.device, &md)
                                          : A.wgpuDeviceCreateShaderModuleTrusted(g.device, &md, WGPUShaderRuntimeChecks_None);
  WGPUComputePipelineDescriptor pd = {};
  pd.label = sv(name);
  pd.compute.module = mod;
  pd.compute.entryPoint = sv("main");
  Pipeline p;
  p.name = key;
  p.pipe = A.wgpuDeviceCreateComputePipeline(g.device, &pd);
  A.wgpuShaderModuleRelease(mod);
  {
    std::string e;
    {
      std::lock_guard<std::mutex> lk2(g.err_mu);
      e.swap(g.device_error);
    }
    if (!e.empty() || !p.pipe) throw_backend_init("wgpu+rs", "shader '" + key + "' failed: " + e);
  }
  p.layout = A.wgpuComputePipelineGetBindGroupLayout(p.pipe, 0);
  return &g.pipelines.emplace(key, p).first->second;
}
Pipeline& pipeline(Gpu& g, const char* name, const std::vector<std::string>& defs, DType deq = DType::COUNT,
                   DType deq2 = DType::COUNT, DType deq3 = DType::COUNT) {
  return *pipeline_impl(g, name, defs, deq, deq2, deq3, false);
}
// The pipeline, or null where the kernel declares more workgroup memory than the device allows.
Pipeline* pipeline_if_fits(Gpu& g, const char* name, const std::vector<std::string>& defs, DType deq = DType::COUNT,
                           DType deq2 = DType::COUNT) {
  return pipeline_impl(g, name, defs, deq, deq2, DType::COUNT, true);
}

// ------------------------------------------------------------ buffers

constexpr uint32_t kMagic = 0x67707562;  // "bupg"

// A device tensor's storage. Activations and caches have one buffer; a weight
// larger than the max storage binding is split into row chunks.
struct DevBuf {
  uint32_t magic = kMagic;
  std::vector<WGPUBuffer> bufs;
  std::vector<int64_t> row0;  // first row of each chunk
  int64_t rows = 0;
  uint64_t bytes = 0;         // requested size
  struct State* owner = nullptr;  // frame buffers: the context that records into it
};

// Sizes in whole 16-byte words and one more, so that a weight also binds as vec4<u32>
// (matvec.wgsl WV) with its last bytes inside the array.
uint64_t padded(uint64_t n) { return ((n + 15) & ~uint64_t(15)) + 16; }

WGPUBuffer create_buffer(Gpu& g, uint64_t bytes, WGPUBufferUsage usage) {
  WGPUBufferDescriptor bd = {};
  bd.usage = usage;
  bd.size = padded(bytes);
  WGPUBuffer b = A.wgpuDeviceCreateBuffer(g.device, &bd);
  if (!b) throw_oom("wgpu+rs", bd.size);
  check_device_error(g, "creating a buffer");
  const uint64_t live = g.live_bytes += bd.size;
  uint64_t peak = g.peak_bytes.load();
  while (live > peak && !g.peak_bytes.compare_exchange_weak(peak, live)) {
  }
  return b;
}

// Destroys and releases a buffer made by create_buffer.
void destroy_buffer(WGPUBuffer b) {
  gpu().live_bytes -= A.wgpuBufferGetSize(b);
  A.wgpuBufferDestroy(b);
  A.wgpuBufferRelease(b);
}

const WGPUBufferUsage kStorage = WGPUBufferUsage_Storage | WGPUBufferUsage_CopyDst | WGPUBufferUsage_CopySrc;

// The device layout of a block encoding (docs/quant.md gives the file layout): each block
// padded to whole 4-byte words (Q4_0 18 -> 20, Q5_0 22 -> 24, Q8_0 34 -> 36, IQ4_NL 18 -> 20,
// Q3_K 110 -> 112, Q6_K 210 -> 212 bytes: the sizes shaders/wgsl/dequant.wgsl and mvdot.wgsl
// step by), and in the 32-value encodings whose f16 scale d leads the block (Q4_0, Q5_0, Q8_0,
// IQ4_NL) d moved behind the rest, so that every word of codes loads aligned (one load; a
// word straddling two costs two loads and shifts).
uint32_t dev_block_bytes(DType t) {
  const uint32_t b = block_bytes(t);
  return is_quantized(t) ? (b + 3) & ~3u : b;
}
uint64_t dev_row_bytes(DType t, int64_t n) { return static_cast<uint64_t>(n / block_size(t)) * dev_block_bytes(t); }
bool dev_padded(DType t) { return dev_block_bytes(t) != block_bytes(t); }
bool dev_d_last(DType t) { return t == DType::Q4_0 || t == DType::Q5_0 || t == DType::Q8_0 || t == DType::IQ4_NL; }

// n_blocks blocks from the file layout into the device layout (pad) or back (unpad).
void pad_blocks(DType t, const uint8_t* src, uint8_t* dst, uint64_t n_blocks) {
  const uint32_t b = block_bytes(t), db = dev_block_bytes(t);
  const uint32_t r = dev_d_last(t) ? 2 : 0;  // leading bytes moved behind the rest
  for (uint64_t i = 0; i < n_blocks; ++i) {
    const uint8_t* s = src + i * b;
    uint8_t* d = dst + i * db;
    std::memcpy(d, s + r, b - r);
    std::memcpy(d + b - r, s, r);
    std::memset(d + b, 0, db - b);
  }
}
void unpad_blocks(DType t, const uint8_t* src, uint8_t* dst, uint64_t n_blocks) {
  const uint32_t b = block_bytes(t), db = dev_block_bytes(t);
  const uint32_t r = dev_d_last(t) ? 2 : 0;
  for (uint64_t i = 0; i < n_blocks; ++i) {
    std::memcpy(dst + i * b + r, src + i * db, b - r);
    std::memcpy(dst + i * b, src + i * db + b - r, r);
  }
}

// A device copy of host bytes (block encodings in the padded device layout, dev_block_bytes);
// 2-D tensors above the binding limit are split by rows.
DevBuf* upload_new(Gpu& g, const void* data, const Shape& shape, DType dtype) {
  auto* d = new DevBuf;
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  d->bytes = t.nbytes() / block_bytes(dtype) * dev_block_bytes(dtype);
  d->rows = shape.ndim >= 2 ? shape.rows() : 1;
  const uint64_t rb = shape.ndim >= 2 ? dev_row_bytes(dtype, shape.cols()) : d->bytes;
  std::vector<uint8_t> padded_copy;
  if (data && dev_padded(dtype)) {
    padded_copy.resize(d->bytes);
    pad_blocks(dtype, static_cast<const uint8_t*>(data), padded_copy.data(), t.nbytes() / block_bytes(dtype));
    data = padded_copy.data();
  }
  const uint64_t limit = std::min<uint64_t>(g.limits.maxStorageBufferBindingSize, g.limits.maxBufferSize) - 8;
  int64_t per = d->rows;
  if (d->bytes > limit) {
    if (shape.ndim < 2 || rb > limit) {
      const uint64_t bytes = d->bytes;
      delete d;
      throw_oom("wgpu+rs", bytes);
    }
    per = static_cast<int64_t>(limit / rb);
  }
  for (int64_t r = 0; r < d->rows; r += per) {
    const int64_t n = std::min(per, d->rows - r);
    const uint64_t nb = static_cast<uint64_t>(n) * rb;
    WGPUBuffer b = create_buffer(g, std::max<uint64_t>(nb, 4), kStorage);
    if (data) {
      const uint8_t* src = static_cast<const uint8_t*>(data) + static_cast<uint64_t>(r) * rb;
      const uint64_t full = nb & ~uint64_t(3);
      if (full) A.wgpuQueueWriteBuffer(g.queue, b, 0, src, full);
      if (nb > full) {
        uint8_t tail[4] = {0, 0, 0, 0};
        std::memcpy(tail, src + full, nb - full);
        A.wgpuQueueWriteBuffer(g.queue, b, full, tail, 4);
      }
    }
    d->bufs.push_back(b);
    d->row0.push_back(r);
  }
  return d;
}

void free_devbuf(DevBuf* d) {
  if (!d) return;
  for (WGPUBuffer b : d->bufs) {
    destroy_buffer(b);
  }
  delete d;
}

DevBuf* dev(const Tensor& t) {
  auto* d = static_cast<DevBuf*>(t.data);
  if (t.device != Device::Wgpu || !d || d->magic != kMagic)
    throw_backend_init("wgpu+rs", "tensor is not a wgpu+rs device tensor");
  return d;
}

// ------------------------------------------------------------ per-context state

struct Bind {
  uint32_t binding;
  WGPUBuffer buf;
  uint64_t offset, size;
};

// CYB_WGPU_REPEAT=<text>:<n> (read once; tuning runs, docs/gpu-bench.md): every dispatch whose
// pipeline name contains <text> is recorded n times (1 .. 64), so that a step's time grows by
// n - 1 times that kernel's cost inside the stream. Only for kernels that do not read what they
// write: a pipeline that rotates in place (rope), draws tokens (sample) or normalizes in place
// (INPLACE) is refused when it matches.
struct RepeatTuning {
  std::string text;
  uint32_t n = 1;
};
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

struct State : BackendState {
  Gpu* g = nullptr;
  // STORAGE frame pool keyed by exact size.
  std::unordered_map<uint64_t, std::vector<DevBuf*>> free_;
  std::vector<DevBuf*> in_use_;
  std::vector<DevBuf*> all_;
  // UNIFORM arena: 64 KiB buffers of 256-byte slots, rewritten each forward.
  std::vector<WGPUBuffer> arenas_;
  std::vector<std::vector<uint8_t>> arena_host_;
  size_t slot_ = 0, flushed_slot_ = 0;
  uint32_t slot_bytes_ = 256;
  static constexpr uint32_t kArenaBytes = 65536;
  // Bind groups, keyed by pipeline and bound ranges (frame buffers repeat each forward).
  std::unordered_map<std::string, WGPUBindGroup> groups_;
  // Read-back staging buffers keyed by size.
  std::unordered_map<uint64_t, WGPUBuffer> staging_;
  WGPUCommandEncoder enc_ = nullptr;
  WGPUComputePassEncoder pass_ = nullptr;
  WGPUSubmissionIndex last_sub_ = 0;  // the index of the last submit (waits are for a submit)
  // Device draws submitted and not yet read back (sample_rows with out == nullptr), oldest
  // first: the staging buffer their results were copied into, and the submit that copies.
  struct PendingDraws {
    WGPUBuffer staging;
    uint64_t bytes;
    WGPUSubmissionIndex sub;
    int64_t rows;
  };
  std::deque<PendingDraws> pending_draws_;
  std::unordered_map<uint64_t, std::vector<WGPUBuffer>> draw_staging_;  // free ones, by size
  uint64_t dispatches_ = 0, submits_ = 0;
  bool precise = true;  // the recording context's mode (ExecContext::precise), set by state()
  std::chrono::steady_clock::time_point begun_{};  // begin_forward of the open forward
  bool open_ = false;
  // GPU profiling: a timestamp pair per dispatch of the pending submit.
  static constexpr uint32_t kQueryPairs = 2048;
  WGPUQuerySet qs_ = nullptr;
  WGPUBuffer q_resolve_ = nullptr, q_staging_ = nullptr;
  std::vector<const std::string*> q_names_;  // pipeline names (pipelines live as long as the device)
  uint64_t q_untimed_ = 0;

  ~State() override {
    discard();
    if (qs_) {
      A.wgpuQuerySetRelease(qs_);  // (wgpuQuerySetDestroy before it removes the set twice)
      for (WGPUBuffer b : {q_resolve_, q_staging_}) {
        destroy_buffer(b);
      }
    }
    for (auto& kv : groups_) A.wgpuBindGroupRelease(kv.second);
    for (DevBuf* d : all_) free_devbuf(d);
    for (WGPUBuffer b : arenas_) {
      destroy_buffer(b);
    }
    for (auto& kv : staging_) {
      destroy_buffer(kv.second);
    }
    for (const PendingDraws& p : pending_draws_) draw_staging_[p.bytes].push_back(p.staging);
    for (auto& kv : draw_staging_)
      for (WGPUBuffer b : kv.second) destroy_buffer(b);
  }

  void discard() {
    q_names_.clear();
    if (pass_) {
      A.wgpuComputePassEncoderEnd(pass_);
      A.wgpuComputePassEncoderRelease(pass_);
      pass_ = nullptr;
    }
    if (enc_) {
      A.wgpuCommandEncoderRelease(enc_);
      enc_ = nullptr;
    }
  }

  // Device sampling's buffers (row parameters, masks, scratch, results): kept for the
  // context's life (the result holds the token the next forward embeds); a larger
  // request gets new ones, the old stay in all_ until the context goes.
  DevBuf* persist_[5] = {};
  // Scratch of one op's dispatches, one buffer a use for the context, taken by every op of
  // that use in turn (an op's later dispatch reads it before the next op's writes it): the
  // split-K GEMM's partial sums (matmul.wgsl SPLITK), fused_norm_matmul's normalized rows.
  // A larger request gets a new one; the old stays in all_ until the context goes.
  enum Scratch { kSplitKParts, kNormedRows, kScratchUses };
  DevBuf* scratch_[kScratchUses] = {};
  DevBuf* scratch(Scratch use, uint64_t bytes) {
    DevBuf*& d = scratch_[use];
    if (d && d->bytes >= bytes) return d;
    return d = new_buf(bytes);
  }
  DevBuf* persistent(int i, uint64_t bytes) {
    DevBuf*& d = persist_[i];
    if (d && d->bytes >= bytes) return d;
    return d = new_buf(bytes);
  }
  // A new storage buffer of this context (freed with it).
  DevBuf* new_buf(uint64_t bytes) {
    DevBuf* d = new DevBuf;
    d->bytes = bytes;
    d->rows = 1;
    d->bufs.push_back(create_buffer(*g, std::max<uint64_t>(bytes, 4), kStorage));
    d->row0.push_back(0);
    d->owner = this;
    all_.push_back(d);
    return d;
  }

  static uint64_t ns_since(std::chrono::steady_clock::time_point t) {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t).count());
  }

  void reset() {
    begun_ = std::chrono::steady_clock::now();
    open_ = true;
    discard();
    // Reverse order: the next forward gets the same buffers in the same order, so its
    // bind groups are the cached ones.
    for (auto it = in_use_.rbegin(); it != in_use_.rend(); ++it) free_[(*it)->bytes].push_back(*it);
    in_use_.clear();
    slot_ = flushed_slot_ = 0;
  }

  DevBuf* alloc(uint64_t bytes) {
    auto& v = free_[bytes];
    DevBuf* d;
    if (!v.empty()) {
      d = v.back();
      v.pop_back();
    } else {
      d = new_buf(bytes);
    }
    in_use_.push_back(d);
    return d;
  }

  // Copies a uniform struct into the next arena slot; returns (buffer, offset).
  std::pair<WGPUBuffer, uint64_t> params(const void* p, size_t n) {
    const size_t per = kArenaBytes / slot_bytes_;
    const size_t a = slot_ / per, s = slot_ % per;
    if (a >= arenas_.size()) {
      arenas_.push_back(create_buffer(*g, kArenaBytes, WGPUBufferUsage_Uniform | WGPUBufferUsage_CopyDst));
      arena_host_.emplace_back(kArenaBytes, 0);
    }
    std::memcpy(arena_host_[a].data() + s * slot_bytes_, p, n);
    ++slot_;
    return {arenas_[a], s * slot_bytes_};
  }

  void flush_params() {
    const size_t per = kArenaBytes / slot_bytes_;
    for (size_t s = flushed_slot_; s < slot_;) {
      const size_t a = s / per, e = std::min(slot_, (a + 1) * per);
      const size_t o = (s % per) * slot_bytes_, n = (e - s) * slot_bytes_;
      A.wgpuQueueWriteBuffer(g->queue, arenas_[a], o, arena_host_[a].data() + o, n);
      s = e;
    }
    flushed_slot_ = slot_;
  }

  WGPUComputePassEncoder pass() {
    if (!enc_) {
      WGPUCommandEncoderDescriptor ed = {};
      enc_ = A.wgpuDeviceCreateCommandEncoder(g->device, &ed);
    }
    if (!pass_) {
      WGPUComputePassDescriptor pd = {};
      pass_ = A.wgpuCommandEncoderBeginComputePass(enc_, &pd);
    }
    return pass_;
  }

  template <size_t N>
  void dispatch(Pipeline& pl, const void* prm, size_t prm_bytes, const Bind (&binds)[N], uint32_t x,
                uint32_t y, uint32_t z) {
    dispatch(pl, prm, prm_bytes, binds, N, x, y, z);
  }
  void dispatch(Pipeline& pl, const void* prm, size_t prm_bytes, const Bind* binds, size_t N, uint32_t x,
                uint32_t y, uint32_t z) {
    auto [ub, uo] = params(prm, prm_bytes);
    std::string key(reinterpret_cast<const char*>(&pl.pipe), sizeof(void*));
    key.append(reinterpret_cast<const char*>(&ub), sizeof(ub));
    key.append(reinterpret_cast<const char*>(&uo), sizeof(uo));
    for (size_t i = 0; i < N; ++i) key.append(reinterpret_cast<const char*>(&binds[i]), sizeof(Bind));
    WGPUBindGroup bg;
    auto it = groups_.find(key);
    if (it != groups_.end()) {
      bg = it->second;
    } else {
      std::vector<WGPUBindGroupEntry> e(N + 1, WGPUBindGroupEntry{});
      e[0].binding = 0;
      e[0].buffer = ub;
      e[0].offset = uo;
      e[0].size = 128;  // a parameter struct is at most 128 bytes (params: slots of 256)
      for (size_t i = 0; i < N; ++i) {
        e[i + 1].binding = binds[i].binding;
        e[i + 1].buffer = binds[i].buf;
        e[i + 1].offset = binds[i].offset;
        e[i + 1].size = binds[i].size;
      }
      WGPUBindGroupDescriptor bd = {};
      bd.layout = pl.layout;
      bd.entryCount = N + 1;
      bd.entries = e.data();
      bg = A.wgpuDeviceCreateBindGroup(g->device, &bd);
      check_device_error(*g, "creating a bind group");
      groups_.emplace(key, bg);
    }
    const bool timed = g->timestamps && g->prof.on.load(std::memory_order_relaxed);
    if (timed && q_names_.size() >= kQueryPairs) ++q_untimed_;
    WGPUComputePassEncoder p = timed && q_names_.size() < kQueryPairs ? timed_pass(pl) : pass();
    A.wgpuComputePassEncoderSetPipeline(p, pl.pipe);
    A.wgpuComputePassEncoderSetBindGroup(p, 0, bg, 0, nullptr);
    A.wgpuComputePassEncoderDispatchWorkgroups(p, x, y, z);
    const RepeatTuning& rep = repeat_tuning();
    if (rep.n > 1 && pl.name.find(rep.text) != std::string::npos) {
      if (pl.name.rfind("rope", 0) == 0 || pl.name.rfind("sample", 0) == 0 ||
          pl.name.find("INPLACE") != std::string::npos)
        throw_invalid_config("CYB_WGPU_REPEAT", "'" + pl.name + "' reads what it writes: repeating it changes results");
      for (uint32_t i = 1; i < rep.n; ++i) A.wgpuComputePassEncoderDispatchWorkgroups(p, x, y, z);
    }
    if (p != pass_) {  // a timed pass holds this one dispatch
      A.wgpuComputePassEncoderEnd(p);
      A.wgpuComputePassEncoderRelease(p);
    }
    ++dispatches_;
  }

  // A compute pass of its own for one dispatch, writing timestamps at its start and end.
  WGPUComputePassEncoder timed_pass(const Pipeline& pl) {
    if (!qs_) {
      WGPUQuerySetDescriptor qd = {};
      qd.type = WGPUQueryType_Timestamp;
      qd.count = 2 * kQueryPairs;
      qs_ = A.wgpuDeviceCreateQuerySet(g->device, &qd);
      q_resolve_ = create_buffer(*g, 16 * kQueryPairs, WGPUBufferUsage_QueryResolve | WGPUBufferUsage_CopySrc);
      q_staging_ = create_buffer(*g, 16 * kQueryPairs, WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst);
      check_device_error(*g, "creating the timestamp query set");
    }
    if (pass_) {
      A.wgpuComputePassEncoderEnd(pass_);
      A.wgpuComputePassEncoderRelease(pass_);
      pass_ = nullptr;
    }
    if (!enc_) {
      WGPUCommandEncoderDescriptor ed = {};
      enc_ = A.wgpuDeviceCreateCommandEncoder(g->device, &ed);
    }
    const uint32_t i = static_cast<uint32_t>(q_names_.size());
    WGPUPassTimestampWrites tw = {};
    tw.querySet = qs_;
    tw.beginningOfPassWriteIndex = 2 * i;
    tw.endOfPassWriteIndex = 2 * i + 1;
    WGPUComputePassDescriptor pd = {};
    pd.timestampWrites = &tw;
    q_names_.push_back(&pl.name);
    return A.wgpuCommandEncoderBeginComputePass(enc_, &pd);
  }

  // After a submit with timed dispatches: waits for their timestamps and adds them up.
  void collect_timestamps(uint32_t n) {
    std::vector<uint64_t> ts(2 * n);
    map_copy(q_staging_, ts.data(), 16 * n, last_sub_);
    std::lock_guard<std::mutex> lk(g->prof.mu);
    for (uint32_t i = 0; i < n; ++i) {
      auto& row = g->prof.rows[*q_names_[i]];
      row.first += 1;
      if (ts[2 * i + 1] > ts[2 * i]) row.second += static_cast<double>(ts[2 * i + 1] - ts[2 * i]) * g->ts_period;
    }
    g->prof.untimed += q_untimed_;
    q_untimed_ = 0;
    q_names_.clear();
  }

  // Ends the pass, optionally appends a copy, and submits everything recorded.
  void submit(WGPUBuffer copy_src = nullptr, uint64_t src_off = 0, WGPUBuffer copy_dst = nullptr,
              uint64_t n = 0) {
    if (pass_) {
      A.wgpuComputePassEncoderEnd(pass_);
      A.wgpuComputePassEncoderRelease(pass_);
      pass_ = nullptr;
    }
    if (open_) {  // the forward's recording ends here
      g->host.record_ns += ns_since(begun_);
      g->host.forwards += 1;
      open_ = false;
    }
    if (!enc_ && !copy_src) {
      flush_params();
      return;
    }
    const auto sub0 = std::chrono::steady_clock::now();
    if (!enc_) {
      WGPUCommandEncoderDescriptor ed = {};
      enc_ = A.wgpuDeviceCreateCommandEncoder(g->device, &ed);
    }
    if (copy_src) A.wgpuCommandEncoderCopyBufferToBuffer(enc_, copy_src, src_off, copy_dst, 0, n);
    const uint32_t timed = static_cast<uint32_t>(q_names_.size());
    if (timed) {
      A.wgpuCommandEncoderResolveQuerySet(enc_, qs_, 0, 2 * timed, q_resolve_, 0);
      A.wgpuCommandEncoderCopyBufferToBuffer(enc_, q_resolve_, 0, q_staging_, 0, 16 * uint64_t{timed});
    }
    WGPUCommandBufferDescriptor cd = {};
    WGPUCommandBuffer cb = A.wgpuCommandEncoderFinish(enc_, &cd);
    A.wgpuCommandEncoderRelease(enc_);
    enc_ = nullptr;
    flush_params();
    last_sub_ = A.wgpuQueueSubmitForIndex(g->queue, 1, &cb);
    A.wgpuCommandBufferRelease(cb);
    g->host.submit_ns += ns_since(sub0);
    ++submits_;
    check_device_error(*g, "submitting the forward");
    if (timed) collect_timestamps(timed);
  }

  // Submits pending work and reads n bytes of buffer b at offset off (4-aligned).
  void read(WGPUBuffer b, uint64_t off, void* dst, uint64_t n) {
    const uint64_t n4 = (n + 3) & ~uint64_t(3);
    WGPUBuffer& st = staging_[n4];
    if (!st) st = create_buffer(*g, n4, WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst);
    submit(b, off, st, n4);
    map_copy(st, dst, n, last_sub_);
  }

  // Copies n bytes of b (4-aligned) into a staging buffer with a submit, without waiting:
  // the draws of sample_rows(out == nullptr), read by take_draws.
  void stage_draws(WGPUBuffer b, uint64_t n, int64_t rows) {
    const uint64_t n4 = (n + 3) & ~uint64_t(3);
    auto& free = draw_staging_[n4];
    WGPUBuffer st;
    if (free.empty()) {
      st = create_buffer(*g, n4, WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst);
    } else {
      st = free.back();
      free.pop_back();
    }
    submit(b, 0, st, n4);
    pending_draws_.push_back({st, n4, last_sub_, rows});
  }

  // The oldest (or the newest) staged draws' n bytes; waits for the submit that staged them only.
  void take_staged(void* dst, uint64_t n, int64_t rows, bool newest) {
    if (pending_draws_.empty() || (newest ? pending_draws_.back() : pending_draws_.front()).rows != rows)
      throw_invalid_config("ids", "no device draw of " + std::to_string(rows) + " rows is pending");
    const PendingDraws p = newest ? pending_draws_.back() : pending_draws_.front();
    if (newest) pending_draws_.pop_back();
    else pending_draws_.pop_front();
    draw_staging_[p.bytes].push_back(p.staging);
    map_copy(p.staging, dst, n, p.sub);
  }

  // Maps buffer st (filled by submit `sub`), copies its first n bytes to dst, unmaps.
  void map_copy(WGPUBuffer st, void* dst, uint64_t n, WGPUSubmissionIndex sub) {
    const uint64_t n4 = (n + 3) & ~uint64_t(3);
    struct Done {
      bool done = false;
      WGPUMapAsyncStatus status = WGPUMapAsyncStatus_Success;
      std::string msg;
    } done;
    WGPUBufferMapCallbackInfo ci = {};
    ci.mode = WGPUCallbackMode_AllowSpontaneous;
    ci.callback = [](WGPUMapAsyncStatus s, WGPUStringView m, void* u1, void*) {
      Done& d = *static_cast<Done*>(u1);
      d.status = s;
      d.msg = sv(m);
      d.done = true;
    };
    ci.userdata1 = &done;
    const auto w0 = std::chrono::steady_clock::now();
    A.wgpuBufferMapAsync(st, WGPUMapMode_Read, 0, n4, ci);
    while (!done.done) {
      A.wgpuDevicePoll(g->device, 1, &sub);
      if (!done.done) A.wgpuInstanceProcessEvents(g->instance);
    }
    g->host.wait_ns += ns_since(w0);
    if (done.status != WGPUMapAsyncStatus_Success)
      throw_backend_init("wgpu+rs", "reading back a buffer failed: " + done.msg);
    const void* p = A.wgpuBufferGetConstMappedRange(st, 0, n4);
    std::memcpy(dst, p, n);
    A.wgpuBufferUnmap(st);
    check_device_error(*g, "reading back");
  }
};

// ------------------------------------------------------------ the backend

template <class T>
uint32_t u(T v) {
  return static_cast<uint32_t>(v);
}

bool float_act(const Tensor& t) { return t.dtype == DType::F32; }

class WgpuBackend : public Backend {
 public:
  explicit WgpuBackend(Gpu& g) : g_(g) {}
  ~WgpuBackend() override {
    for (auto& kv : weights_) free_devbuf(kv.second);
  }
  const char* name() const override { return "wgpu+rs"; }
  bool host_memory() const override { return false; }

  State& state(ExecContext& ctx) {
    auto& s = ctx.backend_state();
    if (!s) {
      auto* st = new State;
      st->g = &g_;
      st->slot_bytes_ = std::max<uint32_t>(256, g_.limits.minUniformBufferOffsetAlignment);
      s.reset(st);
    }
    last_ = static_cast<State*>(s.get());
    last_->precise = ctx.precise();
    return *last_;
  }

  void begin_forward(ExecContext& ctx) override {
    ctx.frame().reset();
    state(ctx).reset();
  }
  Tensor alloc_frame(ExecContext& ctx, const Shape& shape) override {
    Tensor t;
    t.dtype = DType::F32;
    t.shape = shape;
    t.device = Device::Wgpu;
    t.data = state(ctx).alloc(t.nbytes());
    return t;
  }
  void end_forward(ExecContext& ctx) override { state(ctx).submit(); }

  Tensor alloc(const Shape& shape, DType dtype) override {
    Tensor t;
    t.dtype = dtype;
    t.shape = shape;
    t.device = Device::Wgpu;
    t.data = upload_new(g_, nullptr, shape, dtype);
    return t;
  }
  Tensor upload(const void* data, const Shape& shape, DType dtype) override {
    Tensor t;
    t.dtype = dtype;
    t.shape = shape;
    t.device = Device::Wgpu;
    t.data = upload_new(g_, data, shape, dtype);
    return t;
  }
  void release(Tensor& t) override {
    if (t.device == Device::Wgpu && t.data) free_devbuf(dev(t));
    t.data = nullptr;
  }
  // Buffer copies work in whole 4-byte words; a tensor whose bytes start or end inside a
  // word (an odd number of f16 values, a view at an odd element) is moved through the
  // words that cover it (buffers are padded past their last word: create_buffer).
  void read_bytes(const Tensor& t, void* dst) override {
    DevBuf* d = dev(t);
    if (d->bufs.size() != 1) throw_unsupported_op("read (split tensor)", "wgpu+rs", dtype_name(t.dtype));
    if (dev_padded(t.dtype)) {  // whole tensors only: the device layout pads each block
      if (t.offset != 0 || t.nbytes() / block_bytes(t.dtype) * dev_block_bytes(t.dtype) != d->bytes)
        throw_unsupported_op("read (part of a block-encoded tensor)", "wgpu+rs", dtype_name(t.dtype));
      std::vector<uint8_t> raw((d->bytes + 3) & ~uint64_t(3));
      reader(d)->read(d->bufs[0], 0, raw.data(), raw.size());
      unpad_blocks(t.dtype, raw.data(), static_cast<uint8_t*>(dst), t.nbytes() / block_bytes(t.dtype));
      return;
    }
    const uint64_t n = t.nbytes(), a0 = t.offset & ~uint64_t(3);
    if (a0 == t.offset) {
      reader(d)->read(d->bufs[0], t.offset, dst, n);
      return;
    }
    std::vector<uint8_t> words(((t.offset + n + 3) & ~uint64_t(3)) - a0);
    reader(d)->read(d->bufs[0], a0, words.data(), words.size());
    std::memcpy(dst, words.data() + (t.offset - a0), n);
  }
  void write_bytes(const Tensor& t, const void* src) override {
    DevBuf* d = dev(t);
    if (d->bufs.size() != 1) throw_unsupported_op("write (split tensor)", "wgpu+rs", dtype_name(t.dtype));
    if (dev_padded(t.dtype))
      throw_unsupported_op("write (a block-encoded tensor; upload it whole)", "wgpu+rs", dtype_name(t.dtype));
    // A queue write lands before any later submit: the work recorded so far (which may
    // still read this frame's old contents, frames being reused within a forward) goes first.
    if (d->owner && d->owner->enc_) d->owner->submit();
    const uint64_t n = t.nbytes();
    if (t.offset % 4 == 0 && n % 4 == 0) {
      A.wgpuQueueWriteBuffer(g_.queue, d->bufs[0], t.offset, src, n);
      return;
    }
    const uint64_t a0 = t.offset & ~uint64_t(3);
    std::vector<uint8_t> words(((t.offset + n + 3) & ~uint64_t(3)) - a0);
    reader(d)->read(d->bufs[0], a0, words.data(), words.size());  // the neighbours' bytes in the edge words
    std::memcpy(words.data() + (t.offset - a0), src, n);
    A.wgpuQueueWriteBuffer(g_.queue, d->bufs[0], a0, words.data(), words.size());
  }
  void download_f32(const Tensor& t, float* out) override {
    const int64_t n = t.shape.numel();
    if (t.dtype == DType::F32) {
      read_bytes(t, out);
      return;
    }
    std::vector<uint8_t> raw(t.nbytes());
    read_bytes(t, raw.data());
    if (t.dtype == DType::I32) {
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(reinterpret_cast<const int32_t*>(raw.data())[i]);
      return;
    }
    dequant_row(t.dtype, raw.data(), out, n);  // f16 / bf16 / block encodings (core/quant.h)
  }

  bool can_sample() const override { return true; }
  void sample_rows(const Tensor& logits, const DeviceSampling* s, DeviceDraw* out, int64_t rows,
                   ExecContext& ctx) override;
  void take_draws(ExecContext& ctx, DeviceDraw* out, int64_t rows) override;
  Tensor sampled_token(ExecContext& ctx) override {
    DevBuf* res = state(ctx).persist_[3];
    if (!res) throw_invalid_config("ids", "no token was sampled on the device in this conversation");
    Tensor t;
    t.dtype = DType::I32;
    t.shape = Shape{1};
    t.device = Device::Wgpu;
    t.data = res;
    return t;
  }

  bool supports(const Op& op, const Tensor* in, int n_in) const override;
  void execute(const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out, ExecContext& ctx) override;

 private:
  // Reads staged draws into out (sample_rows, take_draws).
  void read_draws(State& st, DeviceDraw* out, int64_t rows, bool newest);
  // The state whose command stream last wrote `d` (so a read sees its results).
  State* reader(DevBuf* d) {
    State* st = d->owner ? d->owner : last_;
    if (!st) {
      fresh_.g = &g_;
      st = &fresh_;
    }
    return st;
  }
  // A weight (or any long-lived host tensor) on the device, uploaded at first use.
  DevBuf* weight(const Tensor& t) {
    if (t.device == Device::Wgpu) return dev(t);
    std::lock_guard<std::mutex> lk(mu_);
    const std::pair<const void*, uint64_t> key{t.data, t.nbytes()};
    auto it = weights_.find(key);
    if (it != weights_.end()) return it->second;
    DevBuf* d = upload_new(g_, t.data, t.shape.ndim >= 2 ? t.shape : Shape{1, t.shape.numel()}, t.dtype);
    weights_.emplace(key, d);
    return d;
  }
  // An activation buffer: a device tensor, or host data copied into a frame buffer (ids).
  WGPUBuffer act(State& st, const Tensor& t) {
    if (t.device == Device::Wgpu) return dev(t)->bufs[0];
    DevBuf* d = st.alloc(t.nbytes());
    const uint64_t n = (t.nbytes() + 3) & ~uint64_t(3);
    std::vector<uint8_t> tmp(n, 0);
    std::memcpy(tmp.data(), t.data, t.nbytes());
    A.wgpuQueueWriteBuffer(g_.queue, d->bufs[0], 0, tmp.data(), n);
    return d->bufs[0];
  }
  static uint64_t whole(WGPUBuffer) { return WGPU_WHOLE_SIZE; }

  // epilogue: nullptr, "GELU", "GELU_TANH" or "ADD" (residual: the tensor added, laid out as y).
  void matmul(State& st, const Tensor& x, const Tensor& W, const Tensor* bias, const Tensor* W2, Tensor& y,
              const char* epilogue = nullptr, const Tensor* residual = nullptr);
  void qkv(State& st, const Tensor* in, int n_in, Tensor* out);
  // A RopeTable's cos and sin tables on the device (uploaded once, as weights are).
  std::pair<WGPUBuffer, WGPUBuffer> rope_tables(const RopeTable& rt) {
    Tensor ct, stt;
    ct.dtype = stt.dtype = DType::F32;
    ct.shape = stt.shape = Shape{rt.max_pos, rt.rot_dims / 2};
    ct.data = const_cast<float*>(rt.cos);
    stt.data = const_cast<float*>(rt.sin);
    return {weight(ct)->bufs[0], weight(stt)->bufs[0]};
  }
  void matvec_variant(int64_t K, int64_t T, int64_t rows, bool ks_ok, std::vector<std::string>& defs,
                      int64_t* rows_per_wg, int64_t* tokens_per_wg) const;

  Gpu& g_;
  std::mutex mu_;
  struct PairHash {
    size_t operator()(const std::pair<const void*, uint64_t>& k) const {
      return std::hash<const void*>()(k.first) ^ (k.second * 0x9e3779b97f4a7c15ull);
    }
  };
  std::unordered_map<std::pair<const void*, uint64_t>, DevBuf*, PairHash> weights_;
  State* last_ = nullptr;
  State fresh_;
};

bool weight_ok(const Tensor& w) { return enc_fn(w.dtype) != nullptr && w.shape.ndim == 2; }

// Capability only: which dtypes, layouts and sizes the WGSL kernels take. The
// op's validity (arity, shapes, attributes, positions) was checked once by the
// dispatcher (validate_op), before any backend was asked.
bool WgpuBackend::supports(const Op& op, const Tensor* in, int n_in) const {
  auto plain = [](const Tensor& t) { return t.offset == 0 && t.dtype == DType::F32; };
  auto all_plain = [&] {
    for (int i = 0; i < n_in; ++i)
      if (!plain(in[i])) return false;
    return true;
  };
  switch (op.kind) {
    case OpKind::Embedding:
      return weight_ok(in[1]) && in[1].offset == 0;
    case OpKind::Matmul:
      return float_act(in[0]) && in[0].offset % 4 == 0 && weight_ok(in[1]) && in[1].offset == 0 &&
             (n_in == 2 || plain(in[2]));
    case OpKind::FusedSwiGlu:
      return float_act(in[0]) && in[0].offset % 4 == 0 && weight_ok(in[1]) && weight_ok(in[2]) &&
             in[1].offset == 0 && in[2].offset == 0;
    case OpKind::FusedMatmulGelu:  // the matmul with the GELU in its epilogue (epilogue.wgsl)
      return float_act(in[0]) && in[0].offset % 4 == 0 && weight_ok(in[1]) && in[1].offset == 0 &&
             (n_in == 2 || plain(in[2]));
    case OpKind::FusedMatmulAdd:  // the matmul with the residual added in its epilogue
      return float_act(in[0]) && in[0].offset % 4 == 0 && weight_ok(in[1]) && in[1].offset == 0 &&
             float_act(in[2]) && in[2].offset % 4 == 0 && (n_in == 3 || plain(in[3]));
    case OpKind::FusedQkv: {  // as three matmuls (one matvec dispatch for few tokens)
      bool ok = float_act(in[0]) && in[0].offset % 4 == 0;
      for (int i = 1; i < 4; ++i) ok = ok && weight_ok(in[i]) && in[i].offset == 0;
      for (int i = 4; i < n_in; ++i) ok = ok && plain(in[i]);
      return ok;
    }
    case OpKind::RmsNorm:
    case OpKind::FusedSkipNorm:
    case OpKind::LayerNorm:
    case OpKind::L2Normalize:
    case OpKind::Softmax:
    case OpKind::MaskedPool:
    case OpKind::Add:
    case OpKind::Mul:
    case OpKind::SwiGlu:
    case OpKind::GeGlu:
    case OpKind::Scale:
    case OpKind::Silu:
    case OpKind::Gelu:
    case OpKind::GeluTanh:
    case OpKind::Relu:
    case OpKind::Softcap:
      return all_plain();
    case OpKind::Rope: {  // one workgroup row per (token, head), 64 dims per workgroup
      const int64_t T = in[0].shape.numel() / (static_cast<int64_t>(op.a.n_heads) * op.a.head_dim);
      return in[0].dtype == DType::F32 && in[0].offset % 4 == 0 && T * op.a.n_heads <= 65535 &&
             op.a.head_dim <= 65535 * 64;
    }
    case OpKind::Attention:  // device caches; f16 caches are read as packed pairs
      return op.a.head_dim <= 256 && (in[1].dtype == DType::F32 || op.a.head_dim % 2 == 0) &&
             in[1].dtype == in[2].dtype && in[1].device == Device::Wgpu && in[2].device == Device::Wgpu &&
             op.a.n_heads <= 65535;
    case OpKind::EncoderAttention: {  // one workgroup per (head, query row); 64 lanes own <= 4 dims each
      const int64_t rows = in[0].shape.numel() / (static_cast<int64_t>(op.a.n_heads) * op.a.head_dim);
      return plain(in[0]) && plain(in[1]) && plain(in[2]) && in[3].offset == 0 && op.a.head_dim <= 256 &&
             op.a.n_heads <= 65535 && rows <= 65535 && op.a.window <= 0x7fffffff;
    }
    case OpKind::KvWrite:  // an f16 cache is written as packed pairs: even head_dim; rows at any offset
      return in[0].dtype == DType::F32 && in[0].offset % 4 == 0 && op.a.head_dim % 2 == 0;
    case OpKind::FusedRopeKv:  // rope.wgsl KV: as rope and kv_write
      return in[0].dtype == DType::F32 && in[1].dtype == DType::F32 && in[2].dtype == DType::F32 &&
             in[0].offset % 4 == 0 && in[1].offset % 4 == 0 && in[2].offset % 4 == 0 && op.a.head_dim % 2 == 0;
    case OpKind::FusedNormMatmul:  // as rms_norm into a frame, then matmul on it
      return plain(in[0]) && plain(in[1]) && weight_ok(in[2]) && in[2].offset == 0 && (n_in == 3 || plain(in[3]));
    case OpKind::Copy:  // f32 / f16 / bf16 (the schema's float types) each way, whole words (copy.wgsl)
      return in[0].offset % 4 == 0 && in[0].shape.numel() <= int64_t{0xffffffff};
    case OpKind::Conv1d: {  // f32 or f16 weights; one workgroup row per output row (b, t)
      const Shape& xs = in[0].shape;
      const int64_t B = xs.ndim == 3 ? xs.d[0] : 1, L = op.a.channels_first ? xs.d[xs.ndim - 1] : xs.d[xs.ndim - 2];
      const int64_t L_out = (L + 2 * op.a.padding - in[1].shape.d[2]) / op.a.stride + 1;
      return plain(in[0]) && in[1].offset == 0 && (in[1].dtype == DType::F32 || in[1].dtype == DType::F16) &&
             (n_in < 3 || plain(in[2])) && B * L_out <= 65535;
    }
    default:
      return false;
  }
}

// Overrides of the matrix-vector kernel's choices for tuning runs (docs/gpu-bench.md):
// CYB_WGPU_MATVEC="tpr=8|16|32|64|128|fill,unroll=0|1,ks=0|1,rows=1|2", read once.
// ks=0: no slot kernel (below). tpr=N: N lanes a row (no fill unless tpr=fill is given too);
// fill: lanes doubled (up to 128, at most one chunk a lane) while the rows x lanes of a dispatch
// are fewer than kMatvecFillLanes (few-row, long-K products such as the down projection).
// unroll=1: two chunks a step per lane (not in the slot kernel). rows=1: one row a lane group in
// the slot kernel (two by default).
struct MatvecTuning {
  uint32_t tpr = 0;  // 0: the default
  bool fill = false;
  bool unroll2 = false;
  bool ks = true;
  bool r2 = true;  // two rows a lane group in the slot kernel
};
constexpr int64_t kMatvecFillLanes = 131072;
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
      else if (kv == "ks=0" || kv == "ks=1") r.ks = kv == "ks=1";
      else if (kv == "rows=1" || kv == "rows=2") r.r2 = kv == "rows=2";
      else if (kv != "unroll=0" && !kv.empty())
        throw_invalid_config("CYB_WGPU_MATVEC", "'" + kv + "' is not tpr=8|16|32|64|128|fill, unroll=0|1, ks=0|1 or rows=1|2");
      pos = end + 1;
    }
    return r;
  }();
  return t;
}

// Encodings with a slot decoder for the one-token matrix-vector kernel (mvdot.wgsl deq_ks_*).
bool ks_encoding(DType t) { return t == DType::Q4_K || t == DType::Q6_K; }
// The binding of weight i (0, 1, 2) of a matvec dispatch: the vec4<u32> view (WV, WV2, WV3)
// where the KS decoder reads 16-byte words (Q4_K), else W, W2, W3.
uint32_t mv_weight_binding(int i, DType t, bool ks) {
  if (ks && t == DType::Q4_K) return 12u + static_cast<uint32_t>(i);
  return i == 0 ? 1u : i == 1 ? 5u : 6u;
}

// Encodings with a register decoder for the matrix-vector kernel (shaders/wgsl/mvdot.wgsl).
bool mv_encoding(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q8_0: case DType::Q4_0:
    case DType::Q4_1: case DType::Q5_0: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K:
    case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

// Attention with fewer (head, token) rows than this splits the keys over workgroups
// (shaders/wgsl/attention.wgsl SPLIT/COMBINE) once they span more than one tile.
constexpr int64_t kSplitAttentionMaxRows = 256;
// Below that, up to this many keys a token run in one dispatch (attention.wgsl DEC, an f16
// cache) unless CYB_WGPU_ATTN=split (read at each call, for tuning runs: docs/gpu-bench.md).
constexpr int64_t kDecAttentionMaxKeys = 1024;
enum class AttentionKernel { Dec, Split };
AttentionKernel attention_kernel() {
  return env_one_of("CYB_WGPU_ATTN", {"dec", "split"}) == "split" ? AttentionKernel::Split : AttentionKernel::Dec;
}

// The workgroups a GPU runs at once (2 per SM of the H200's 132): a tiled GEMM of fewer than
// twice as many tiles splits K into parts run side by side (matmul.wgsl SPLITK, splitk_parts), each part at least
// kSplitKMinChunks chunks of 32 values. CYB_WGPU_SPLITK=N (read once) sets the workgroup
// count for tuning runs, 0 turns splitting off (docs/gpu-bench.md).
constexpr int64_t kSplitKWorkgroups = 264;
constexpr int64_t kSplitKMinChunks = 4;
int64_t splitk_workgroups() {
  static const int64_t n =
      env_int("CYB_WGPU_SPLITK", 0, 1000000, kSplitKWorkgroups, "a workgroup count (0 .. 1000000)");
  return n;
}

// Parts of K for a tiled GEMM of `tiles` tiles (at most smax). The GPU runs W =
// splitk_workgroups() workgroups at once, so a grid of g workgroups takes ceil(g / W) waves and
// s parts take ceil(tiles s / W) / s of the unsplit time: the s in 1 .. min(smax, 8) with the
// fewest waves per part (the smallest of equals), for grids of fewer than 2 W tiles. On the H200
// this beat ceil(W / tiles) parts (qwen15-shaped pp128 +5-8%, llama7b pp128 +2-3%); a grid of 2 W
// tiles or more is not split: qwen15's 512-token SwiGLU GEMM (1120 tiles) in 2 parts made its
// prompt 5% slower, the parts' writes and sums costing more than the last wave's idle share
// (docs/gpu-bench.md).
// *waves: the waves per part of the result (in units of the unsplit grid's tile time).
int64_t splitk_parts(int64_t tiles, int64_t smax, double* waves = nullptr) {
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

// Tokens a tile of the f32 tiled GEMM: 64 (4 tokens x 4 rows a thread), or 128 (matmul.wgsl T128:
// 8 x 4, each staged weight value used by twice the tokens; the same sums in the same order) where
// that grid needs no more parts of K (splitk_parts) and its time in waves, a 128-token tile
// counting as two 64-token ones at kT128Cost of their cost, is the shorter. On the H200 T128
// made llama7b's prompt 8% faster at 128 tokens (the SwiGLU GEMM) and 2-6% at 512, and lost
// 5-18% where it needed more parts or left the GPU emptier (one-weight GEMMs of qwen15, smollm2,
// qwen05; docs/gpu-bench.md), which the rule keeps at 64. CYB_WGPU_TILE=64|128 (read once; 0
// or unset: the rule) forces one for tests and tuning runs (128 at any tiled token count).
// allow128 false (the f16 GEMM, or a device without the 128-token kernel's workgroup memory):
// 64. Returns the tile; *parts: its parts of K.
constexpr double kT128Cost = 0.9;
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

// The f16 tiled GEMM (matmul.wgsl H16): in fast mode, for block-quantized weights (their
// decoded values rounded to f16; float weights keep f32 products in both modes), where the
// adapter offers shader-f16, when CYB_WGPU_GEMM=h16=1 (read once); off by default: its
// whole-forward error on the real smollm2 exceeds that model's fast-vs-precise bound of the
// default fast mode (docs/runtime.md, "Precision modes"), so h16=0, the f32 kernel, is the default.
bool gemm_f16_setting() {
  static const bool on = env_switch("CYB_WGPU_GEMM", "h16=1", "h16=0", false);
  return on;
}
bool block_encoding(DType t) {
  return enc_fn(t) != nullptr && t != DType::F32 && t != DType::F16 && t != DType::BF16;
}

// Attention of this many tokens or more (not split over the keys) runs as blocks of 16 tokens
// over staged key tiles (attention.wgsl FLASH) where head_dim allows; CYB_WGPU_FLASH=0 (read
// once) keeps one workgroup per (head, token).
constexpr int64_t kFlashMinTokens = 16;
bool flash_setting() {
  static const bool on = env_switch("CYB_WGPU_FLASH", "1", "0", true);
  return on;
}

// Tokens from which a matmul runs as a tiled GEMM (on the H200 it beat the row kernel
// at 128 and 512 prompt tokens on every model shape measured, docs/gpu-bench.md).
constexpr int64_t kTiledMinTokens = 32;

// The matrix-vector kernel's variant for rows of K values and T (< 32) tokens: lanes per
// row, tokens per workgroup, subgroup shuffles, the slot kernel (KS, one token, Q4_K / Q6_K
// weights: ks_ok), two rows a lane group (R2, slot kernel), two chunks a step (U2, chunk kernel).
void WgpuBackend::matvec_variant(int64_t K, int64_t T, int64_t rows, bool ks_ok, std::vector<std::string>& defs,
                                 int64_t* rows_per_wg, int64_t* tokens_per_wg) const {
  const MatvecTuning& tune = matvec_tuning();
  const bool ks = T == 1 && ks_ok && tune.ks;
  const bool qkv = std::find(defs.begin(), defs.end(), "QKV") != defs.end();
  // Chunk kernel: 32 lanes a row: on the H200 (docs/gpu-bench.md, tuning sweep of 2026-12-02)
  // faster than 16 or 8 lanes chosen by row length, also for rows of 18 and 48 chunks.
  // Slot kernel: 32 lanes halved while a lane would sum fewer than 3 slots (16 for the
  // qwen15-shaped 1536-value rows, 32 for llama7b's 4096), then filled (H200, 2026-12-03:
  // docs/gpu-bench.md).
  uint32_t tpr = tune.tpr ? tune.tpr : 32;
  if (ks && !tune.tpr)
    while (tpr > 8 && K / 32 / tpr < 3) tpr /= 2;
  if (tune.fill || (ks && !tune.tpr))
    while (tpr < 128 && rows * tpr < kMatvecFillLanes && 2 * tpr <= K / 32) tpr *= 2;
  *tokens_per_wg = T >= 3 ? 4 : T;
  *rows_per_wg = 128 / tpr;
  if (ks) {
    defs.push_back("KS");
    if (tune.r2 && !qkv) {
      defs.push_back("R2");
      *rows_per_wg *= 2;
    }
  } else if (T == 1 && tune.unroll2) {
    defs.push_back("U2");
  }
  defs.push_back("TPR" + std::to_string(tpr));
  defs.push_back("NT" + std::to_string(*tokens_per_wg));
  if (g_.info.subgroups) defs.push_back("SG");  // shuffles where the subgroup size allows (matvec.wgsl)
}

// fused_qkv: one matvec dispatch over the three weights (matvec.wgsl QKV) for few tokens,
// whole 32-value chunks and register-decoded encodings, each weight in one buffer; three
// matmuls otherwise.
void WgpuBackend::qkv(State& st, const Tensor* in, int n_in, Tensor* out) {
  const uint64_t W = WGPU_WHOLE_SIZE;
  const Tensor& x = in[0];
  const bool bias = n_in == 7;
  const int64_t K = in[1].shape.d[1], T = x.shape.numel() / K;
  DevBuf* w[3] = {weight(in[1]), weight(in[2]), weight(in[3])};
  bool fused = T < kTiledMinTokens && K % 32 == 0 && x.offset % 16 == 0;
  for (int i = 0; i < 3; ++i) fused = fused && mv_encoding(in[1 + i].dtype) && w[i]->bufs.size() == 1;
  if (!fused) {
    for (int i = 0; i < 3; ++i) matmul(st, x, in[1 + i], bias ? &in[4 + i] : nullptr, nullptr, out[i]);
    return;
  }
  std::vector<std::string> defs = {"QKV"};
  if (bias) defs.push_back("BIAS");
  int64_t rows_per_wg = 0, tokens_per_wg = 0;
  const int64_t nq = in[1].shape.d[0], nk = in[2].shape.d[0], nv = in[3].shape.d[0];
  bool ks_ok = true;
  for (int i = 0; i < 3; ++i) ks_ok = ks_ok && ks_encoding(in[1 + i].dtype);
  matvec_variant(K, T, nq + nk + nv, ks_ok, defs, &rows_per_wg, &tokens_per_wg);
  const bool ks = std::find(defs.begin(), defs.end(), "KS") != defs.end();
  uint32_t wb[3];
  for (int i = 0; i < 3; ++i) wb[i] = mv_weight_binding(i, in[1 + i].dtype, ks);
  Pipeline& pl = pipeline(g_, "matvec", defs, in[1].dtype, in[2].dtype, in[3].dtype);
  const uint32_t wgs = u((nq + nk + nv + rows_per_wg - 1) / rows_per_wg);
  const uint32_t nx = std::min<uint32_t>(wgs, 65535), ny = (wgs + nx - 1) / nx;
  uint32_t p[16] = {u(K), u(T), u(dev_row_bytes(in[1].dtype, K)), u(x.offset / 4), u(out[0].offset / 4), 0, 0,
                    u(nq + nk + nv), nx, bias ? 1u : 0u, u(dev_row_bytes(in[2].dtype, K)), u(nq),
                    u(nk), u(dev_row_bytes(in[3].dtype, K)), u(out[1].offset / 4), u(out[2].offset / 4)};
  const uint32_t nz = u((T + tokens_per_wg - 1) / tokens_per_wg);
  WGPUBuffer xb = act(st, x);
  WGPUBuffer y[3] = {dev(out[0])->bufs[0], dev(out[1])->bufs[0], dev(out[2])->bufs[0]};
  if (bias) {
    Bind b[] = {{wb[0], w[0]->bufs[0], 0, W}, {2, xb, 0, W}, {3, y[0], 0, W}, {4, weight(in[4])->bufs[0], 0, W},
                {wb[1], w[1]->bufs[0], 0, W}, {wb[2], w[2]->bufs[0], 0, W}, {7, y[1], 0, W}, {8, y[2], 0, W},
                {9, weight(in[5])->bufs[0], 0, W}, {10, weight(in[6])->bufs[0], 0, W}};
    st.dispatch(pl, p, sizeof(p), b, nx, ny, nz);
  } else {
    Bind b[] = {{wb[0], w[0]->bufs[0], 0, W}, {2, xb, 0, W}, {3, y[0], 0, W}, {wb[1], w[1]->bufs[0], 0, W},
                {wb[2], w[2]->bufs[0], 0, W}, {7, y[1], 0, W}, {8, y[2], 0, W}};
    st.dispatch(pl, p, sizeof(p), b, nx, ny, nz);
  }
}

void WgpuBackend::matmul(State& st, const Tensor& x, const Tensor& W, const Tensor* bias, const Tensor* W2,
                         Tensor& y, const char* epilogue, const Tensor* residual) {
  const int64_t K = W.shape.d[1], N = W.shape.d[0];
  const int64_t T = x.shape.numel() / K;
  DevBuf* w = weight(W);
  DevBuf* w2 = W2 ? weight(*W2) : nullptr;
  if (w2 && w2->bufs.size() != w->bufs.size()) throw_unsupported_op("fused_swiglu (split)", "wgpu+rs", "-");
  WGPUBuffer xb = act(st, x), yb = dev(y)->bufs[0];
  WGPUBuffer bb = bias ? weight(*bias)->bufs[0] : nullptr;
  WGPUBuffer rb = residual ? act(st, *residual) : nullptr;
  std::vector<std::string> defs;
  if (bias) defs.push_back("BIAS");
  if (w2) defs.push_back("SWIGLU");
  if (epilogue) defs.push_back(epilogue);  // GELU, GELU_TANH, ADD (shaders/wgsl/epilogue.wgsl)
  // Many tokens: 64-row x 64- or 128-token output tiles over staged chunks (matmul.wgsl, TILED;
  // gemm_tile_tokens); few:
  // rows split over lanes, up to 8 tokens a workgroup (matmul.wgsl).
  const bool tiled = T >= kTiledMinTokens && N <= int64_t{65535} * 64 && T <= int64_t{65535} * 64;
  // Fewer tokens, whole 32-value chunks and an encoding decoded in registers: the
  // matrix-vector kernel (matvec.wgsl), TPR lanes a row, up to 4 tokens a workgroup.
  const bool mv = !tiled && K % 32 == 0 && x.offset % 16 == 0 && mv_encoding(W.dtype) &&
                  (!W2 || mv_encoding(W2->dtype));
  int64_t rows_per_wg = 2, tokens_per_wg = 8;
  // Split K: a tiled GEMM of few tiles (one buffer a weight) over parts of K, then a dispatch
  // adding the parts, the bias and the epilogue, or SwiGLU's silu(gate) * up (matmul.wgsl
  // SPLITK, SPLITK_SUM).
  // The sum dispatch's grid has a row of workgroups per token; the parts fit one binding.
  const bool h16 = tiled && gemm_f16_setting() && !st.precise && g_.info.shader_f16 &&
                   block_encoding(W.dtype) && (!W2 || block_encoding(W2->dtype));
  int64_t splits = 1, tm = 64;  // parts of K; tokens a tile
  const int64_t nw = w2 ? 2 : 1;  // weights whose parts the split writes
  const Pipeline* pl_t128 = nullptr;
  if (tiled) {
    const bool splittable = w->bufs.size() == 1 && T <= 65535;
    const int64_t fit = static_cast<int64_t>(g_.limits.maxStorageBufferBindingSize / 8) / (nw * T * N);
    const int64_t smax = std::max<int64_t>(1, std::min<int64_t>((K + 31) / 32 / kSplitKMinChunks, fit));
    tm = gemm_tile_tokens(N, T, smax, splittable, !h16, &splits);
    if (tm == 128) {  // where the device allows its workgroup memory (SwiGLU: 34304 bytes)
      std::vector<std::string> d128 = splits > 1 ? std::vector<std::string>{"SPLITK"} : defs;
      if (splits > 1 && w2) d128.push_back("SWIGLU");
      d128.push_back("TILED");
      d128.push_back("T128");
      pl_t128 = pipeline_if_fits(g_, "matmul", d128, W.dtype, w2 ? W2->dtype : DType::COUNT);
      if (!pl_t128) tm = gemm_tile_tokens(N, T, smax, splittable, false, &splits);
    }
  }
  if (tiled) {
    if (splits > 1) {  // bias, epilogue and SwiGLU's product: in the sum dispatch
      defs = {"SPLITK"};
      if (w2) defs.push_back("SWIGLU");
    }
    defs.push_back("TILED");
    if (h16) defs.push_back("H16");
    if (tm == 128) defs.push_back("T128");
    rows_per_wg = 64;
    tokens_per_wg = tm;
  } else if (mv) {
    matvec_variant(K, T, N, ks_encoding(W.dtype) && (!W2 || ks_encoding(W2->dtype)), defs, &rows_per_wg,
                   &tokens_per_wg);
  }
  const bool ks = std::find(defs.begin(), defs.end(), "KS") != defs.end();
  Pipeline& pl = pipeline(g_, mv ? "matvec" : "matmul", defs, W.dtype, w2 ? W2->dtype : DType::COUNT);
  const uint32_t r_off = residual ? u(residual->offset / 4) : 0u;
  for (size_t c = 0; c < w->bufs.size(); ++c) {
    const int64_t r0 = w->row0[c];
    const int64_t nr = (c + 1 < w->bufs.size() ? w->row0[c + 1] : N) - r0;
    const uint32_t wgs = u((nr + rows_per_wg - 1) / rows_per_wg);
    const uint32_t nx = std::min<uint32_t>(wgs, 65535), ny = tiled ? u((T + tm - 1) / tm) : (wgs + nx - 1) / nx;
    // matmul.wgsl's P (16 words: r_off at 11, ksplit at 12) or matvec.wgsl's (20 words, r_off at 16)
    uint32_t p[20] = {u(K), u(T), u(dev_row_bytes(W.dtype, K)), u(x.offset / 4), u(y.offset / 4), u(N),
                      u(r0), u(nr), nx, bias ? 1u : 0u,
                      w2 ? u(dev_row_bytes(W2->dtype, K)) : 0u, mv ? 0u : r_off};
    if (mv) p[16] = r_off;
    else p[12] = u(splits);
    if (splits > 1) {
      WGPUBuffer parts = st.scratch(State::kSplitKParts, uint64_t(nw * splits * T * N) * 4)->bufs[0];
      Bind b1[] = {{1, w->bufs[c], 0, WGPU_WHOLE_SIZE}, {2, xb, 0, WGPU_WHOLE_SIZE}, {3, parts, 0, WGPU_WHOLE_SIZE},
                   {5, w2 ? w2->bufs[c] : nullptr, 0, WGPU_WHOLE_SIZE}};
      st.dispatch(pl, p, 16 * sizeof(uint32_t), b1, w2 ? 4 : 3, nx, ny, u(splits));
      std::vector<std::string> sdefs = {"SPLITK_SUM"};
      if (bias) sdefs.push_back("BIAS");
      if (w2) sdefs.push_back("SWIGLU");
      if (epilogue) sdefs.push_back(epilogue);
      Bind b2[4];
      size_t n2 = 0;
      b2[n2++] = {2, parts, 0, WGPU_WHOLE_SIZE};
      b2[n2++] = {3, yb, 0, WGPU_WHOLE_SIZE};
      if (bias) b2[n2++] = {4, bb, 0, WGPU_WHOLE_SIZE};
      if (residual) b2[n2++] = {6, rb, 0, WGPU_WHOLE_SIZE};
      st.dispatch(pipeline(g_, "matmul", sdefs), p, 16 * sizeof(uint32_t), b2, n2, u((N + 255) / 256), u(T), 1);
      continue;
    }
    const uint32_t nz = tiled ? 1u : u((T + tokens_per_wg - 1) / tokens_per_wg);
    Bind b[6];
    size_t n = 0;
    b[n++] = {mv_weight_binding(0, W.dtype, ks), w->bufs[c], 0, WGPU_WHOLE_SIZE};
    b[n++] = {2, xb, 0, WGPU_WHOLE_SIZE};
    b[n++] = {3, yb, 0, WGPU_WHOLE_SIZE};
    if (bias) b[n++] = {4, bb, 0, WGPU_WHOLE_SIZE};
    if (w2) b[n++] = {mv_weight_binding(1, W2->dtype, ks), w2->bufs[c], 0, WGPU_WHOLE_SIZE};
    if (residual) b[n++] = {mv ? 11u : 6u, rb, 0, WGPU_WHOLE_SIZE};
    st.dispatch(pl, p, mv ? sizeof(p) : 16 * sizeof(uint32_t), b, n, nx, ny, nz);
  }
}

// shaders/wgsl/sample.wgsl: one workgroup per row; a submit and a read-back of 16
// bytes a row.
void WgpuBackend::sample_rows(const Tensor& logits, const DeviceSampling* s, DeviceDraw* out, int64_t rows,
                              ExecContext& ctx) {
  const int64_t n = logits.shape.cols();
  if (logits.dtype != DType::F32 || rows <= 0 || rows > 65535 || n <= 0 || logits.shape.numel() != rows * n ||
      logits.offset % 4 != 0)
    throw_shape_mismatch("sample", {rows, n}, {logits.shape.numel() / std::max<int64_t>(n, 1), n});
  State& st = state(ctx);
  const int64_t words = (n + 31) / 32;
  std::vector<uint32_t> prm(static_cast<size_t>(rows) * 12), masks;
  auto f2u = [](float f) {
    uint32_t v;
    std::memcpy(&v, &f, 4);
    return v;
  };
  for (int64_t r = 0; r < rows; ++r) {
    const DeviceSampling& d = s[r];
    uint32_t* q = prm.data() + r * 12;
    q[0] = u(n);
    q[1] = u(std::max<int32_t>(d.top_k, 0));
    q[2] = (d.allowed ? 1u : 0u) | (d.chain ? 2u : 0u);
    q[3] = u(masks.size());
    q[4] = f2u(d.temperature);
    q[5] = f2u(d.top_p);
    q[6] = f2u(d.min_p);
    q[7] = f2u(d.uniform);
    q[8] = f2u(d.uniform_if_used);
    if (d.allowed) masks.insert(masks.end(), d.allowed, d.allowed + words);
  }
  if (masks.empty()) masks.push_back(0);
  DevBuf* pb = st.persistent(0, prm.size() * 4);
  DevBuf* mb = st.persistent(1, masks.size() * 4);
  DevBuf* sb = st.persistent(2, static_cast<uint64_t>(rows) * 2 * static_cast<uint64_t>(n) * 4);
  DevBuf* rb = st.persistent(3, static_cast<uint64_t>(rows) * 16);
  DevBuf* xb = st.persistent(4, static_cast<uint64_t>(rows) * static_cast<uint64_t>(n) * 4);
  A.wgpuQueueWriteBuffer(g_.queue, pb->bufs[0], 0, prm.data(), prm.size() * 4);
  A.wgpuQueueWriteBuffer(g_.queue, mb->bufs[0], 0, masks.data(), masks.size() * 4);
  Pipeline& pl = pipeline(g_, "sample", n <= 4096 ? std::vector<std::string>{"WG64"} : std::vector<std::string>{});
  uint32_t p[4] = {u(rows), u(n), u(logits.offset / 4), 0};
  const uint64_t W = WGPU_WHOLE_SIZE;
  Bind b[] = {{1, act(st, logits), 0, W}, {2, pb->bufs[0], 0, W}, {3, mb->bufs[0], 0, W},
              {4, sb->bufs[0], 0, W}, {5, rb->bufs[0], 0, W}, {6, xb->bufs[0], 0, W}};
  st.dispatch(pl, p, sizeof(p), b, u(rows), 1, 1);
  st.stage_draws(rb->bufs[0], static_cast<uint64_t>(rows) * 16, rows);
  if (out) read_draws(st, out, rows, true);
}

// Called without the device lock (Model::forward_sample_take): touches only this context's
// state (not last_) and the device's thread-safe poll, so another conversation records and
// submits while this one waits for its step.
void WgpuBackend::take_draws(ExecContext& ctx, DeviceDraw* out, int64_t rows) {
  auto* st = static_cast<State*>(ctx.backend_state().get());
  if (!st) throw_invalid_config("conversation", "no device draw of this conversation is pending");
  read_draws(*st, out, rows, false);
}

void WgpuBackend::read_draws(State& st, DeviceDraw* out, int64_t rows, bool newest) {
  std::vector<int32_t> res(static_cast<size_t>(rows) * 4);
  st.take_staged(res.data(), res.size() * 4, rows, newest);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* q = res.data() + r * 4;
    out[r].token = q[0];
    out[r].used_uniform = q[1] != 0;
    out[r].first_nan = q[2] < 0 ? -1 : q[2];
    out[r].first_nonfinite = q[3] < 0 ? -1 : q[3];
  }
}

void WgpuBackend::execute(const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out, ExecContext& ctx) {
  if (!supports(op, in, n_in))
    throw_unsupported_op(op_name(op.kind), "wgpu+rs", n_in > 0 ? dtype_name(in[0].dtype) : "-");
  State& st = state(ctx);
  const uint64_t W = WGPU_WHOLE_SIZE;
  auto f2u = [](float f) {
    uint32_t v;
    std::memcpy(&v, &f, 4);
    return v;
  };
  for (int i = 0; i < n_out; ++i)
    if (out[i].device != Device::Wgpu)
      throw_unsupported_op(std::string(op_name(op.kind)) + " (host output)", "wgpu+rs", "-");
  switch (op.kind) {
    case OpKind::Matmul:
      matmul(st, in[0], in[1], n_in > 2 ? &in[2] : nullptr, nullptr, out[0]);
      return;
    case OpKind::FusedSwiGlu:
      matmul(st, in[0], in[1], nullptr, &in[2], out[0]);
      return;
    case OpKind::FusedNormMatmul: {  // defined as rms_norm then matmul: the two dispatches
      Op norm = op;
      norm.kind = OpKind::RmsNorm;
      Tensor xn;
      xn.dtype = DType::F32;
      xn.shape = in[0].shape;
      xn.device = Device::Wgpu;
      xn.data = st.scratch(State::kNormedRows, xn.nbytes());
      execute(norm, in, 2, &xn, 1, ctx);
      matmul(st, xn, in[2], n_in > 3 ? &in[3] : nullptr, nullptr, out[0]);
      return;
    }
    case OpKind::FusedMatmulGelu:
      matmul(st, in[0], in[1], n_in > 2 ? &in[2] : nullptr, nullptr, out[0], op.a.gelu_erf ? "GELU" : "GELU_TANH");
      return;
    case OpKind::FusedMatmulAdd:
      matmul(st, in[0], in[1], n_in > 3 ? &in[3] : nullptr, nullptr, out[0], "ADD", &in[2]);
      return;
    case OpKind::FusedQkv:
      qkv(st, in, n_in, out);
      return;
    case OpKind::Embedding: {
      const Tensor& tab = in[1];
      const int64_t T = in[0].shape.numel(), D = tab.shape.d[1];
      DevBuf* w = weight(tab);
      WGPUBuffer ids = act(st, in[0]), yb = dev(out[0])->bufs[0];
      Pipeline& pl = pipeline(g_, "embedding", {}, tab.dtype);
      for (size_t c = 0; c < w->bufs.size(); ++c) {
        const int64_t r0 = w->row0[c];
        const int64_t nr = (c + 1 < w->bufs.size() ? w->row0[c + 1] : tab.shape.d[0]) - r0;
        uint32_t p[8] = {u(D), u(T), u(dev_row_bytes(tab.dtype, D)), u(r0), u(nr), f2u(op.a.scale), 0, 0};
        Bind b[] = {{1, w->bufs[c], 0, W}, {2, ids, 0, W}, {3, yb, 0, W}};
        st.dispatch(pl, p, sizeof(p), b, u(((D + 31) / 32 + 63) / 64), u(T), 1);
      }
      return;
    }
    case OpKind::RmsNorm:
    case OpKind::L2Normalize:
    case OpKind::Softmax:
    case OpKind::FusedSkipNorm: {
      // Softmax: the L2 variant's bindings (no weight), the SOFTMAX body
      const bool skip = op.kind == OpKind::FusedSkipNorm,
                 l2 = op.kind == OpKind::L2Normalize || op.kind == OpKind::Softmax;
      const int64_t D = in[0].shape.cols(), R = in[0].shape.numel() / D;
      WGPUBuffer xb = act(st, in[0]), yb = dev(out[0])->bufs[0];
      const bool inplace = !skip && xb == yb;
      std::vector<std::string> defs;
      if (inplace) defs.push_back("INPLACE");
      if (skip) defs.push_back("SKIP");
      if (l2) defs.push_back("L2");
      if (op.kind == OpKind::Softmax) defs.push_back("SOFTMAX");
      Pipeline& pl = pipeline(g_, "norm", defs);
      uint32_t p[4] = {u(D), u(R), f2u(op.a.eps), op.a.norm_plus_one ? 1u : 0u};
      const uint32_t nx = u(std::min<int64_t>(R, 65535)), ny = u((R + 65534) / 65535);
      if (l2) {  // no weight
        if (inplace) {
          Bind b[] = {{2, yb, 0, W}};
          st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
        } else {
          Bind b[] = {{2, yb, 0, W}, {3, xb, 0, W}};
          st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
        }
        return;
      }
      WGPUBuffer wb = weight(skip ? in[2] : in[1])->bufs[0];
      if (skip) {
        Bind b[] = {{1, wb, 0, W}, {2, yb, 0, W}, {3, xb, 0, W}, {4, act(st, in[1]), 0, W},
                    {5, dev(out[1])->bufs[0], 0, W}};
        st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
      } else if (inplace) {
        Bind b[] = {{1, wb, 0, W}, {2, yb, 0, W}};
        st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
      } else {
        Bind b[] = {{1, wb, 0, W}, {2, yb, 0, W}, {3, xb, 0, W}};
        st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
      }
      return;
    }
    case OpKind::LayerNorm: {
      const int64_t D = in[0].shape.cols(), R = in[0].shape.numel() / D;
      WGPUBuffer xb = act(st, in[0]), yb = dev(out[0])->bufs[0];
      const bool inplace = xb == yb, bias = n_in > 2;
      std::vector<std::string> defs;
      if (inplace) defs.push_back("INPLACE");
      if (bias) defs.push_back("BIAS");
      Pipeline& pl = pipeline(g_, "layer_norm", defs);
      uint32_t p[4] = {u(D), u(R), f2u(op.a.eps), 0};
      const uint32_t nx = u(std::min<int64_t>(R, 65535)), ny = u((R + 65534) / 65535);
      WGPUBuffer wb = weight(in[1])->bufs[0], bb = bias ? weight(in[2])->bufs[0] : nullptr;
      if (inplace && bias) {
        Bind b[] = {{1, wb, 0, W}, {2, yb, 0, W}, {4, bb, 0, W}};
        st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
      } else if (inplace) {
        Bind b[] = {{1, wb, 0, W}, {2, yb, 0, W}};
        st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
      } else if (bias) {
        Bind b[] = {{1, wb, 0, W}, {2, yb, 0, W}, {3, xb, 0, W}, {4, bb, 0, W}};
        st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
      } else {
        Bind b[] = {{1, wb, 0, W}, {2, yb, 0, W}, {3, xb, 0, W}};
        st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
      }
      return;
    }
    case OpKind::MaskedPool: {
      const Shape& xs = in[0].shape;
      const int64_t D = xs.cols(), S = xs.d[xs.ndim - 2], B = xs.numel() / (S * D);
      Pipeline& pl = pipeline(g_, "masked_pool", {});
      uint32_t p[4] = {u(D), u(S), u(B), u(op.a.pool_mode)};
      Bind b[] = {{1, dev(out[0])->bufs[0], 0, W}, {2, act(st, in[0]), 0, W}, {3, act(st, in[1]), 0, W}};
      st.dispatch(pl, p, sizeof(p), b, u((D + 63) / 64), u(B), 1);
      return;
    }
    case OpKind::Rope: {
      const RopeTable& rt = *op.a.rope;
      const int hd = op.a.head_dim, nh = op.a.n_heads, half = rt.rot_dims / 2;
      const int64_t T = in[0].shape.numel() / (static_cast<int64_t>(nh) * hd);
      if (op.a.pos0 < 0 || op.a.pos0 + T > rt.max_pos)
        throw_invalid_config("position", "positions exceed the RoPE table");
      const auto [cb, sb] = rope_tables(rt);
      WGPUBuffer xb = act(st, in[0]), yb = dev(out[0])->bufs[0];
      const bool inplace = xb == yb;  // a row view rotated in place (x and y: the same view)
      if (inplace && in[0].offset != out[0].offset)
        throw_unsupported_op("rope (overlapping views of one buffer)", "wgpu+rs", "-");
      Pipeline& pl = pipeline(g_, "rope", inplace ? std::vector<std::string>{"INPLACE"} : std::vector<std::string>{});
      uint32_t p[8] = {u(T), u(nh), u(hd), u(half), u(op.a.pos0), rt.neox ? 1u : 0u, u(in[0].offset / 4),
                       u(out[0].offset / 4)};
      const uint32_t gx = u((hd + 63) / 64), gy = u(T * nh);
      if (inplace) {
        Bind b[] = {{1, cb, 0, W}, {2, sb, 0, W}, {3, yb, 0, W}};
        st.dispatch(pl, p, sizeof(p), b, gx, gy, 1);
      } else {
        Bind b[] = {{1, cb, 0, W}, {2, sb, 0, W}, {3, yb, 0, W}, {4, xb, 0, W}};
        st.dispatch(pl, p, sizeof(p), b, gx, gy, 1);
      }
      return;
    }
    case OpKind::FusedRopeKv: {  // positions and shapes: validate_op (check_fused_rope_kv)
      const RopeTable& rt = *op.a.rope;
      const int nh = op.a.n_heads, nkv = op.a.n_kv_heads, hd = op.a.head_dim, half = rt.rot_dims / 2;
      const int64_t T = in[0].shape.numel() / (static_cast<int64_t>(nh) * hd);
      const Tensor &kc = out[2], &vc = out[3];
      if (kc.dtype != vc.dtype) throw_unsupported_op("fused_rope_kv (k and v caches of two dtypes)", "wgpu+rs", "-");
      const auto [cb, sb] = rope_tables(rt);
      WGPUBuffer qb = act(st, in[0]), kb = act(st, in[1]), vb = act(st, in[2]);
      WGPUBuffer qo = dev(out[0])->bufs[0], ko = dev(out[1])->bufs[0];
      const bool qin = qb == qo, kin = kb == ko;  // rotated in place (the family's use)
      if ((qin && in[0].offset != out[0].offset) || (kin && in[1].offset != out[1].offset))
        throw_unsupported_op("fused_rope_kv (overlapping views of one buffer)", "wgpu+rs", "-");
      std::vector<std::string> defs = {"KV"};
      if (kc.dtype == DType::F16) defs.push_back("F16");
      if (qin) defs.push_back("QIN");
      if (kin) defs.push_back("KIN");
      Pipeline& pl = pipeline(g_, "rope", defs);
      uint32_t p[16] = {u(T), u(nh), u(nkv), u(hd), u(half), u(op.a.pos0), rt.neox ? 1u : 0u, u(kc.shape.d[1]),
                        u(in[0].offset / 4), u(in[1].offset / 4), u(in[2].offset / 4), u(out[0].offset / 4),
                        u(out[1].offset / 4), 0, 0, 0};
      const int64_t rows = T * (nh + 2 * nkv);
      const uint32_t gx = u(std::min<int64_t>(rows, 65535)), gy = u((rows + 65534) / 65535);
      const WGPUBuffer kcb = dev(kc)->bufs[0], vcb = dev(vc)->bufs[0];
      if (qin && kin) {
        Bind b[] = {{1, cb, 0, W}, {2, sb, 0, W}, {3, qb, 0, W}, {4, kb, 0, W}, {5, vb, 0, W}, {6, kcb, 0, W},
                    {7, vcb, 0, W}};
        st.dispatch(pl, p, sizeof(p), b, gx, gy, 1);
      } else if (qin) {
        Bind b[] = {{1, cb, 0, W}, {2, sb, 0, W}, {3, qb, 0, W}, {4, kb, 0, W}, {5, vb, 0, W}, {6, kcb, 0, W},
                    {7, vcb, 0, W}, {9, ko, 0, W}};
        st.dispatch(pl, p, sizeof(p), b, gx, gy, 1);
      } else if (kin) {
        Bind b[] = {{1, cb, 0, W}, {2, sb, 0, W}, {3, qb, 0, W}, {4, kb, 0, W}, {5, vb, 0, W}, {6, kcb, 0, W},
                    {7, vcb, 0, W}, {8, qo, 0, W}};
        st.dispatch(pl, p, sizeof(p), b, gx, gy, 1);
      } else {
        Bind b[] = {{1, cb, 0, W}, {2, sb, 0, W}, {3, qb, 0, W}, {4, kb, 0, W}, {5, vb, 0, W}, {6, kcb, 0, W},
                    {7, vcb, 0, W}, {8, qo, 0, W}, {9, ko, 0, W}};
        st.dispatch(pl, p, sizeof(p), b, gx, gy, 1);
      }
      return;
    }
    case OpKind::KvWrite: {
      const int nkv = op.a.n_kv_heads, hd = op.a.head_dim;
      const int64_t T = in[0].shape.numel() / (static_cast<int64_t>(nkv) * hd);
      const Tensor& c = out[0];
      if (c.shape.ndim != 3 || c.shape.d[0] != nkv || c.shape.d[2] != hd || op.a.pos0 < 0 ||
          op.a.pos0 + T > c.shape.d[1])
        throw_invalid_config("position", "positions exceed the KV cache");
      const bool f16 = c.dtype == DType::F16;
      if (f16 && hd % 2) throw_unsupported_op("kv_write (odd head_dim, f16)", "wgpu+rs", "F16");
      Pipeline& pl = pipeline(g_, "kv_write", f16 ? std::vector<std::string>{"F16"} : std::vector<std::string>{});
      uint32_t p[8] = {u(T), u(nkv), u(hd), u(c.shape.d[1]), u(op.a.pos0), u(in[0].offset / 4), 0, 0};
      Bind b[] = {{1, act(st, in[0]), 0, W}, {2, dev(c)->bufs[0], 0, W}};
      st.dispatch(pl, p, sizeof(p), b, u(((f16 ? hd / 2 : hd) + 63) / 64), u(T * nkv), 1);
      return;
    }
    case OpKind::Attention: {
      const int nh = op.a.n_heads, nkv = op.a.n_kv_heads, hd = op.a.head_dim;
      const int64_t T = in[0].shape.numel() / (static_cast<int64_t>(nh) * hd);
      const int64_t max_ctx = in[1].shape.d[1];
      if (in[1].shape.ndim != 3 || in[1].shape.d[0] != nkv || in[1].shape.d[2] != hd || op.a.pos0 < 0 ||
          op.a.pos0 + T > max_ctx)
        throw_invalid_config("position", "positions exceed the KV cache");
      const bool f16 = in[1].dtype == DType::F16;
      std::vector<std::string> defs;
      if (f16) defs.push_back("F16");
      // Keys per token at most; few (head, token) workgroups over more than one tile of 64
      // keys: the tiles run in parallel (SPLIT) and a second dispatch combines them.
      const int64_t keys = op.a.window > 0 ? std::min<int64_t>(op.a.pos0 + T, op.a.window) : op.a.pos0 + T;
      const int64_t nsplit = (keys + 63) / 64;
      if (attention_kernel() == AttentionKernel::Dec && f16 && nh * T < kSplitAttentionMaxRows &&
          keys <= kDecAttentionMaxKeys && hd % 8 == 0 && hd <= 256 && 256 % (hd / 8) == 0) {
        uint32_t p[12] = {u(T), u(nh), u(nkv), u(hd), u(max_ctx), u(op.a.pos0), u(op.a.window),
                          u(in[0].offset / 4), f2u(op.a.scale), f2u(op.a.softcap), u(out[0].offset / 4), 0u};
        Bind b[] = {{1, act(st, in[0]), 0, W}, {2, dev(in[1])->bufs[0], 0, W}, {3, dev(in[2])->bufs[0], 0, W},
                    {4, dev(out[0])->bufs[0], 0, W}};
        st.dispatch(pipeline(g_, "attention", {"DEC"}), p, sizeof(p), b, u(nh), u(T), 1);
        return;
      }
      const bool split = nh * T < kSplitAttentionMaxRows && nsplit > 1;
      uint32_t p[12] = {u(T), u(nh), u(nkv), u(hd), u(max_ctx), u(op.a.pos0), u(op.a.window),
                        u(in[0].offset / 4), f2u(op.a.scale), f2u(op.a.softcap), u(out[0].offset / 4),
                        split ? u(nsplit) : 0u};
      WGPUBuffer qb = act(st, in[0]), kb = dev(in[1])->bufs[0], vb = dev(in[2])->bufs[0], ob = dev(out[0])->bufs[0];
      if (!split) {
        Bind b[] = {{1, qb, 0, W}, {2, kb, 0, W}, {3, vb, 0, W}, {4, ob, 0, W}};
        // Many tokens: blocks of 16 tokens over key tiles staged once for the block (FLASH).
        if (flash_setting() && T >= kFlashMinTokens && hd % 32 == 0 && hd <= 128) {
          defs.push_back("FLASH");
          st.dispatch(pipeline(g_, "attention", defs), p, sizeof(p), b, u(nh), u((T + 15) / 16), 1);
          return;
        }
        st.dispatch(pipeline(g_, "attention", defs), p, sizeof(p), b, u(nh), u(T), 1);
        return;
      }
      // tile partials sized for the whole cache, so that the buffer is the same every step
      const int64_t max_split = (std::min<int64_t>(max_ctx, op.a.window > 0 ? op.a.window : max_ctx) + 63) / 64;
      WGPUBuffer part = st.alloc(uint64_t(T * nh * std::max(max_split, nsplit)) * (hd + 2) * 4)->bufs[0];
      std::vector<std::string> sdefs = defs;
      sdefs.push_back("SPLIT");
      Bind b1[] = {{1, qb, 0, W}, {2, kb, 0, W}, {3, vb, 0, W}, {5, part, 0, W}};
      st.dispatch(pipeline(g_, "attention", sdefs), p, sizeof(p), b1, u(nh), u(T), u(nsplit));
      Bind b2[] = {{4, ob, 0, W}, {5, part, 0, W}};
      st.dispatch(pipeline(g_, "attention", {"COMBINE"}), p, sizeof(p), b2, u(nh), u(T), 1);
      return;
    }
    case OpKind::Copy: {
      const int64_t n = in[0].shape.numel();
      if (out[0].offset % 4 != 0)
        throw_unsupported_op("copy (an output at a byte offset not a multiple of 4)", "wgpu+rs", "-");
      std::vector<std::string> defs;
      if (in[0].dtype == DType::F16) defs.push_back("IN_F16");
      if (in[0].dtype == DType::BF16) defs.push_back("IN_BF16");
      if (out[0].dtype != DType::F32) defs.push_back("OUT16");
      if (out[0].dtype == DType::BF16) defs.push_back("OUT_BF16");
      const int64_t wgs = (n + 1) / 2 / 256 + 1;
      const uint32_t nx = u(std::min<int64_t>(wgs, 65535)), ny = u((wgs + 65534) / 65535);
      const uint64_t in_off = in[0].device == Device::Wgpu ? in[0].offset : 0;  // host data: a fresh buffer
      uint32_t p[4] = {u(n), u(in_off / block_bytes(in[0].dtype)), u(out[0].offset / block_bytes(out[0].dtype)), nx};
      Bind b[] = {{1, dev(out[0])->bufs[0], 0, W}, {2, act(st, in[0]), 0, W}};
      st.dispatch(pipeline(g_, "copy", defs), p, sizeof(p), b, nx, ny, 1);
      return;
    }
    case OpKind::EncoderAttention: {
      const int nh = op.a.n_heads, nkv = op.a.n_kv_heads, hd = op.a.head_dim;
      const int64_t B = in[3].shape.d[0], S = in[3].shape.d[1];
      const int64_t T = in[0].shape.numel() / (B * nh * hd);
      Pipeline& pl = pipeline(g_, "encoder_attention", {});
      uint32_t p[12] = {u(T), u(S), u(nh), u(nkv), u(hd), in[3].dtype == DType::F32 ? 1u : 0u, u(op.a.window), 0,
                        f2u(op.a.scale), 0, 0, 0};
      Bind b[] = {{1, act(st, in[0]), 0, W}, {2, act(st, in[1]), 0, W}, {3, act(st, in[2]), 0, W},
                  {4, act(st, in[3]), 0, W}, {5, dev(out[0])->bufs[0], 0, W}};
      st.dispatch(pl, p, sizeof(p), b, u(nh), u(B * T), 1);
      return;
    }
    case OpKind::Conv1d: {
      const Shape& xs = in[0].shape;
      const bool cf = op.a.channels_first;
      const int64_t B = xs.ndim == 3 ? xs.d[0] : 1;
      const int64_t C = cf ? xs.d[xs.ndim - 2] : xs.d[xs.ndim - 1], L = cf ? xs.d[xs.ndim - 1] : xs.d[xs.ndim - 2];
      const int64_t O = in[1].shape.d[0], k = in[1].shape.d[2];
      const int64_t L_out = (L + 2 * op.a.padding - k) / op.a.stride + 1, R = B * L_out;
      Tensor w2 = in[1];
      w2.shape = Shape{O, C * k};
      const bool bias = n_in > 2;
      std::vector<std::string> defs;
      if (bias) defs.push_back("BIAS");
      if (in[1].dtype == DType::F16) defs.push_back("F16");
      Pipeline& pl = pipeline(g_, "conv1d", defs);
      uint32_t p[12] = {u(C), u(L), u(O), u(k), u(op.a.stride), u(op.a.padding), u(L_out), cf ? 1u : 0u,
                        u(R), bias ? 1u : 0u, 0, 0};
      WGPUBuffer xb = act(st, in[0]), wb = weight(w2)->bufs[0], yb = dev(out[0])->bufs[0];
      if (bias) {
        Bind b[] = {{1, xb, 0, W}, {2, wb, 0, W}, {3, weight(in[2])->bufs[0], 0, W}, {4, yb, 0, W}};
        st.dispatch(pl, p, sizeof(p), b, u((O + 63) / 64), u(R), 1);
      } else {
        Bind b[] = {{1, xb, 0, W}, {2, wb, 0, W}, {4, yb, 0, W}};
        st.dispatch(pl, p, sizeof(p), b, u((O + 63) / 64), u(R), 1);
      }
      return;
    }
    default: {
      // Element-wise.
      uint32_t code = 0;
      bool binary = false;
      switch (op.kind) {
        case OpKind::Scale: code = 0; break;
        case OpKind::Silu: code = 1; break;
        case OpKind::Gelu: code = 2; break;
        case OpKind::GeluTanh: code = 3; break;
        case OpKind::Softcap: code = 4; break;
        case OpKind::Relu: code = 5; break;
        case OpKind::Add: code = 16; binary = true; break;
        case OpKind::Mul: code = 17; binary = true; break;
        case OpKind::SwiGlu: code = 18; binary = true; break;
        case OpKind::GeGlu: code = op.a.gelu_erf ? 20 : 19; binary = true; break;
        default: throw_unsupported_op(op_name(op.kind), "wgpu+rs", "-");
      }
      const int64_t n = in[0].shape.numel();
      WGPUBuffer ab = act(st, in[0]), yb = dev(out[0])->bufs[0];
      const bool inplace = !binary && ab == yb;
      std::vector<std::string> defs;
      if (binary) defs.push_back("BINARY");
      if (inplace) defs.push_back("INPLACE");
      Pipeline& pl = pipeline(g_, "eltwise", defs);
      const uint32_t wgs = u((n + 255) / 256), nx = std::min<uint32_t>(wgs, 65535), ny = (wgs + nx - 1) / nx;
      uint32_t p[8] = {u(n), binary ? u(in[1].shape.numel()) : 1u, code, nx, f2u(op.a.scale), f2u(op.a.softcap), 0, 0};
      if (binary) {
        WGPUBuffer bb = act(st, in[1]);
        if (bb == yb || ab == yb) throw_unsupported_op(std::string(op_name(op.kind)) + " (in place)", "wgpu+rs", "-");
        Bind b[] = {{1, yb, 0, W}, {2, ab, 0, W}, {3, bb, 0, W}};
        st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
      } else if (inplace) {
        Bind b[] = {{1, yb, 0, W}};
        st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
      } else {
        Bind b[] = {{1, yb, 0, W}, {2, ab, 0, W}};
        st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
      }
      return;
    }
  }
}

}  // namespace

bool wgpu_compiled() { return true; }

bool wgpu_hardware_available() {
  Gpu& g = gpu();
  {
    std::lock_guard<std::mutex> lk(g.mu);
    if (!g.tried) init_device(g);
    return g.device && !g.info.software;
  }
}

WgpuInfo wgpu_info(bool allow_software) { return device_or_throw(allow_software).info; }

std::unique_ptr<Backend> make_wgpu_backend(bool allow_software) {
  Gpu& g = device_or_throw(allow_software);
  return std::unique_ptr<Backend>(new WgpuBackend(g));
}

bool wgpu_set_gpu_profiling(bool on) {
  Gpu& g = gpu();
  g.prof.on.store(on && g.timestamps);
  return on && g.timestamps;
}

std::vector<WgpuShaderTime> wgpu_take_gpu_profile(uint64_t* untimed) {
  Gpu& g = gpu();
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
  HostTimes& h = gpu().host;
  std::map<std::string, double> r;
  r["forwards"] = static_cast<double>(h.forwards.exchange(0));
  r["record_ms"] = static_cast<double>(h.record_ns.exchange(0)) * 1e-6;
  r["submit_ms"] = static_cast<double>(h.submit_ns.exchange(0)) * 1e-6;
  r["wait_ms"] = static_cast<double>(h.wait_ns.exchange(0)) * 1e-6;
  return r;
}

std::map<std::string, uint64_t> wgpu_report() {
  Gpu& g = gpu();
  std::map<std::string, uint64_t> r;
  if (!g.instance) return r;
  WGPUGlobalReport rep = {};
  A.wgpuGenerateReport(g.instance, &rep);
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
  Gpu& g = gpu();
  const uint64_t live = g.live_bytes.load();
  std::map<std::string, uint64_t> r{{"live_bytes", live}, {"peak_bytes", std::max(g.peak_bytes.load(), live)}};
  if (reset_peak) g.peak_bytes = live;
  return r;
}

}  // namespace cyb

#endif  // CYB_HAVE_WGPU
