#if defined(CYB_HAVE_WGPU)

#include "backends/wgpu/wgpu_loader.h"

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "backends/wgpu/wgpu_api.h"

#if defined(_WIN32)
#define NOMINMAX
#include <windows.h>
#else
#include <dlfcn.h>
#include <unistd.h>
#endif

namespace cyb {
namespace wgpu {
namespace {

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

// wgpuGetVersion's encoding: one byte each of major, minor, patch, build.
std::string version_string(uint32_t v) {
  return std::to_string(v >> 24) + "." + std::to_string((v >> 16) & 0xFF) + "." + std::to_string((v >> 8) & 0xFF) +
         "." + std::to_string(v & 0xFF);
}

// The table's resolver over an opened library (ctx: its handle).
void* resolve_in_lib(void* lib, const char* name) { return lib_sym(lib, name); }

}  // namespace

bool load_wgpu_native(NativeLib* lib, std::string* error) {
  std::string tried;
  for (const std::string& p : lib_candidates()) {
    lib->handle = open_lib(p);
    if (lib->handle) {
      lib->path = p;
      break;
    }
    tried += " " + p;
  }
  if (!lib->handle) {
    *error = std::string("libwgpu_native ") + CYB_WGPU_NATIVE_VERSION +
             " not found: install the GPU extra, pip install 'cyb_llm[gpu]' (or set CYB_WGPU_LIB); tried:" + tried +
             " (the last by file name, through the loader's search path)";
    return false;
  }
  // The C interface changes between releases: only the one these headers describe is used.
  using GetVersion = uint32_t (*)();
  auto get_version = reinterpret_cast<GetVersion>(lib_sym(lib->handle, "wgpuGetVersion"));
  const std::string got = get_version ? version_string(get_version()) : std::string("(no wgpuGetVersion)");
  if (got != CYB_WGPU_NATIVE_VERSION) {
    *error = "libwgpu_native at " + lib->path + " is version " + got + ", this build needs " +
             CYB_WGPU_NATIVE_VERSION + " (pip install 'cyb_llm[gpu]' installs the matching wgpu package)";
    return false;
  }
  const std::vector<std::string> missing = fill_api(A, Impl::WgpuNative, resolve_in_lib, lib->handle);
  if (!missing.empty()) {
    *error = std::string("libwgpu_native at ") + lib->path + " lacks " + join_names(missing);
    return false;
  }
  return true;
}

namespace {

using GetProcAddress = WGPUProc (*)(WGPUStringView);

void* resolve_in_dawn(void* gpa, const char* name) {
  return reinterpret_cast<void*>(reinterpret_cast<GetProcAddress>(gpa)(sv(name)));
}

}  // namespace

bool load_dawn(uintptr_t get_proc_address, std::string* error) {
  if (!get_proc_address) {
    *error = "no wgpuGetProcAddress was handed over";
    return false;
  }
  const std::vector<std::string> missing =
      fill_api(A, Impl::Dawn, resolve_in_dawn, reinterpret_cast<void*>(get_proc_address));
  if (!missing.empty()) {
    *error = "Dawn's wgpuGetProcAddress does not know " + join_names(missing);
    return false;
  }
  return true;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string r;
  for (const std::string& n : names) r += (r.empty() ? "" : ", ") + n;
  return r;
}

}  // namespace wgpu
}  // namespace cyb

#endif  // CYB_HAVE_WGPU
