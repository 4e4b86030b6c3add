// AVX-512 VNNI kernels: kernels_x86_*.inc with CYB_VNNI, where the int16 x int16
// block dot accumulates with vpdpwssd (not vpdpbusd: activations are 16-bit),
// plus the 512-bit matmul / attention kernels it hands the big cases to
// (compiled with the AVX-512 flags only; chosen at run time).
#define CYB_VNNI 1
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "backends/cpu/kernels.h"
#include "core/quant.h"
#include "backends/cpu/simd_common.h"
#include "core/array_elems.h"
#include "dispatch/nn_geom.h"
#include "dispatch/op_schema_index.h"
#include "core/counter_rng.h"
#include "dispatch/op_schema.h"

namespace cyb_avx512 {
#include "backends/cpu/kernels_x86_matmul.inc"
#include "backends/cpu/kernels_x86_ops.inc"
}  // namespace cyb_avx512

namespace cyb {
namespace cpu {
void fill_avx512_kernels(KernelTable& t) { cyb_avx512::fill_table(t); }
}  // namespace cpu
}  // namespace cyb
