// AVX-512 VNNI kernels: the AVX2 kernels with the u8 x s8 block dot as one
// vpdpbusd (compiled with the AVX-512 flags only; chosen at run time).
#define CYB_VNNI 1
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/quant.h"
#include "backends/cpu/simd_common.h"

namespace cyb_avx512 {
#include "backends/cpu/kernels_x86.inc"
}  // namespace cyb_avx512

namespace cyb {
namespace cpu {
void fill_avx512_kernels(KernelTable& t) { cyb_avx512::fill_table(t); }
}  // namespace cpu
}  // namespace cyb
