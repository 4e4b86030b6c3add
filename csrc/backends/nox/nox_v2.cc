// The graph-v2 kernels of the nox backend: the shared reference kernels (dispatch/ref/) under
// nox's math policy (NoxMath: nox_math.h), instantiated here so that they are compiled as every nox
// file is (-ffp-contract=off): single thread, sums in double in index order, rounded once.
#include "backends/nox/nox_backend.h"
#include "backends/nox/nox_math.h"
#include "dispatch/ref/v2_kernel_table.h"

namespace cyb {

namespace {

struct NoxV2Table {
  NoxV2Kernel k[static_cast<int>(OpKind::COUNT_PLUS_ONE)] = {};
  NoxV2Kernel& operator[](OpKind o) { return k[static_cast<int>(o)]; }
};

const NoxV2Table& table() {
  static const NoxV2Table t = [] {
    NoxV2Table r;
    fill_v2_kernels<NoxMath>(r);
    return r;
  }();
  return t;
}

}  // namespace

NoxV2Kernel nox_v2_kernel(OpKind kind) {
  const int i = static_cast<int>(kind);
  if (i <= 0 || i >= static_cast<int>(OpKind::COUNT_PLUS_ONE)) return nullptr;
  return table().k[i];
}

}  // namespace cyb
