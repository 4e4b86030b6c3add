// AVX2 + FMA + F16C kernels (compiled with those flags only; chosen at run time).
#define CYB_VNNI 0
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

namespace cyb_avx2 {
#include "backends/cpu/kernels_x86_matmul.inc"
#include "backends/cpu/kernels_x86_ops.inc"
}  // namespace cyb_avx2

namespace cyb {
namespace cpu {
void fill_avx2_kernels(KernelTable& t) { cyb_avx2::fill_table(t); }
bool x86_q16_encoding(DType t) { return cyb_avx2::q16_dots(t) != nullptr; }
}  // namespace cpu
}  // namespace cyb
