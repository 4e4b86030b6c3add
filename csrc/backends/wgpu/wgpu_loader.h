// libwgpu_native, found and opened at run time (no link-time dependency): the source that
// fills the procedure table of wgpu_api.h today. Private to csrc/backends/wgpu/.
#pragma once

#include <string>

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

}  // namespace wgpu
}  // namespace cyb
