// The two sources of the procedure table of wgpu_api.h: libwgpu_native, found and opened at run
// time (no link-time dependency), and Dawn, through the wgpuGetProcAddress the `wgpudawn` Python
// package hands over. Private to csrc/backends/wgpu/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cyb {
namespace wgpu {

struct NativeLib {
  void* handle = nullptr;  // dlopen / LoadLibrary handle (kept open for the process)
  std::string path;        // the candidate that opened
};

// Opens the first libwgpu_native of the search (CYB_WGPU_LIB, the `wgpu` package next to this
// module, the configure-time package folder while it exists, the loader's own search by file
// name), checks that it is the release the headers describe (wgpuGetVersion ==
// CYB_WGPU_NATIVE_VERSION) and fills the table A from it. False, with *error saying why, when
// none opens, the version differs or a procedure is missing.
bool load_wgpu_native(NativeLib* lib, std::string* error);

// Fills the table A from Dawn: every procedure through get_proc_address (the address of Dawn's
// `WGPUProc wgpuGetProcAddress(WGPUStringView)`). False, with *error naming every procedure
// Dawn does not know, when one is missing.
bool load_dawn(uintptr_t get_proc_address, std::string* error);

// "a, b, c".
std::string join_names(const std::vector<std::string>& names);

}  // namespace wgpu
}  // namespace cyb
