#if defined(CYB_HAVE_WGPU)

#include "backends/wgpu/wgpu_api.h"

namespace cyb {
namespace wgpu {

Api A;

std::vector<std::string> fill_api(Api& api, Impl impl, ProcResolver resolve, void* ctx) {
  std::vector<std::string> missing;
#define CYB_FILL(n)                                            \
  api.n = reinterpret_cast<decltype(api.n)>(resolve(ctx, #n)); \
  if (!api.n) missing.push_back(#n);
#define CYB_CLEAR(n) api.n = nullptr;
  CYB_WGPU_FUNCS(CYB_FILL)
  if (impl == Impl::WgpuNative) {
    CYB_WGPU_NATIVE_FUNCS(CYB_FILL)
    CYB_WGPU_DAWN_FUNCS(CYB_CLEAR)
    CYB_WGPU_DAWN_OWN_FUNCS(CYB_CLEAR)
  } else {
    CYB_WGPU_NATIVE_FUNCS(CYB_CLEAR)
    CYB_WGPU_DAWN_FUNCS(CYB_FILL)
    CYB_WGPU_DAWN_OWN_FUNCS(CYB_FILL)
  }
#undef CYB_CLEAR
#undef CYB_FILL
  return missing;
}

std::vector<std::string> api_names(Impl impl) {
  std::vector<std::string> v;
#define CYB_NAME(n) v.push_back(#n);
  CYB_WGPU_FUNCS(CYB_NAME)
  if (impl == Impl::WgpuNative) {
    CYB_WGPU_NATIVE_FUNCS(CYB_NAME)
  } else {
    CYB_WGPU_DAWN_FUNCS(CYB_NAME)
    CYB_WGPU_DAWN_OWN_FUNCS(CYB_NAME)
  }
#undef CYB_NAME
  return v;
}

}  // namespace wgpu
}  // namespace cyb

#endif  // CYB_HAVE_WGPU
