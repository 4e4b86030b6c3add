#if defined(CYB_HAVE_WGPU)

#include "backends/wgpu/wgpu_api.h"

namespace cyb {
namespace wgpu {

Api A;

const char* fill_api(Api& api, ProcResolver resolve, void* ctx) {
#define CYB_FILL(n)                                                 \
  api.n = reinterpret_cast<decltype(api.n)>(resolve(ctx, #n));      \
  if (!api.n) return #n;
  CYB_WGPU_FUNCS(CYB_FILL)
#undef CYB_FILL
  return nullptr;
}

}  // namespace wgpu
}  // namespace cyb

#endif  // CYB_HAVE_WGPU
