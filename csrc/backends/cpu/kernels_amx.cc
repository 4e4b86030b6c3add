// The amx level: the AVX-512 kernels, with fast-mode Q4_K / Q6_K matmuls of 8 or
// more tokens on AMX-INT8 tiles (kquant_amx.cc). Chosen at run time only where
// the CPU has AMX and the OS grants the tile state.
#define CYB_VNNI 1
#define CYB_AMX 1
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

namespace cyb_amx {
#include "backends/cpu/kernels_x86_matmul.inc"
#include "backends/cpu/kernels_x86_ops.inc"
}  // namespace cyb_amx

namespace cyb {
namespace cpu {
void fill_amx_kernels(KernelTable& t) { cyb_amx::fill_table(t); }
}  // namespace cpu
}  // namespace cyb
