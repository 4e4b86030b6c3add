// Compute pipelines of the wgpu+rs backend: a shader of shaders/wgsl with its defines and weight
// decoders, preprocessed, checked against the device's workgroup memory, compiled once and
// cached on the device (Gpu::pipelines). Private to csrc/backends/wgpu/.
#pragma once

#include <string>
#include <vector>

#include "backends/wgpu/wgpu_device.h"
#include "core/dtype.h"

namespace cyb {
namespace wgpu {

// The name of an encoding's decoders in shaders/wgsl/dequant.wgsl and mvdot.wgsl (deq_<name>,
// ...), or nullptr for an encoding the shaders do not decode.
const char* enc_fn(DType t);

// The pipeline for shader `name` with these defines; `deq`/`deq2`/`deq3` pick the decoders of
// the first, second and third weight (DType::COUNT: none). A kernel over the workgroup memory
// limit is a BackendInit error.
Pipeline& pipeline(Gpu& g, const char* name, const std::vector<std::string>& defs, DType deq = DType::COUNT,
                   DType deq2 = DType::COUNT, DType deq3 = DType::COUNT);
// The pipeline, or null where the kernel declares more workgroup memory than the device allows.
Pipeline* pipeline_if_fits(Gpu& g, const char* name, const std::vector<std::string>& defs, DType deq = DType::COUNT,
                           DType deq2 = DType::COUNT);

}  // namespace wgpu
}  // namespace cyb
