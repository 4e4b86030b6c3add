// The WGSL preprocessor of the wgpu+rs backend: the directives the shaders of shaders/wgsl use
// (`//#if`, `//#unroll`, `//#include`) expanded by plain string parsing, and the workgroup memory
// a module declares. No WebGPU calls. Private to csrc/backends/wgpu/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cyb {
namespace wgpu {

// `//#if NAME`, `//#if !NAME`, `//#else`, `//#endif` (nestable) on whole lines.
std::string preprocess(const std::string& src, const std::vector<std::string>& defs);

// `//#unroll` on the line before `for (var V = 0u; V < N; V++) {` (N a literal `16u` or the
// name of a module constant `const NAME = 16u;`): the loop written out N times, each body in
// its own block with V replaced by the literal `Ku` (straight-line code whose loads a GPU
// compiler can issue together; shaders/wgsl/mvdot.wgsl). The H200's compiler does not unroll
// such loops itself: a tiled GEMM's product loop on staged tiles ran 38-45% faster written out
// (bench/wgpu_gemm_roof.py, docs/gpu-bench.md). Marked loops inside a marked loop are written
// out first. Plain string
// parsing, no std::regex: the module links libstdc++ statically, whose locale machinery
// (iostreams) crashes on the H200 image (docs/gpu-bench.md), and a build using std::regex
// here segfaulted there on its first model load.
// module: where the loops' constants are declared (src itself at the top level).
std::string unroll(const std::string& src, const std::string* module = nullptr);

// `//#include NAME` lines replaced by shaders/wgsl/NAME.wgsl (itself expanded), each file once.
std::string include(const std::string& src, std::vector<std::string>* seen);

// Every occurrence of a in s replaced by b.
void replace_all(std::string& s, const std::string& a, const std::string& b);

// The bytes of workgroup memory a module declares: its `var<workgroup>` variables, each a scalar,
// vector or atomic of 4-byte (f16: 2-byte) components, or an array of them whose length is a
// literal or a module constant (`const NAME = 64u;`), the forms shaders/wgsl uses. wgpu-native
// does not check a pipeline's workgroup memory against the device's limit (a 64 KiB array ran on
// lavapipe, whose limit is 32 KiB, and a kernel over the H200's 48 KiB hung it:
// docs/gpu-bench.md), so pipeline() checks it. Any other form is an error naming it.
// key: the pipeline's cache key (named in errors).
uint64_t workgroup_bytes(const std::string& src, const std::string& key);

}  // namespace wgpu
}  // namespace cyb
