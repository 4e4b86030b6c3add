#if defined(CYB_HAVE_WGPU)

#include "backends/wgpu/wgpu_pipeline.h"

#include <algorithm>
#include <cstring>

#include "backends/wgpu/wgpu_settings.h"
#include "backends/wgpu/wgsl_preprocess.h"
#include "core/errors.h"

namespace cyb {

const char* wgsl_source(const char* name);  // generated from shaders/wgsl

namespace wgpu {

const char* enc_fn(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::Q4_0: return "q4_0";
    case DType::Q4_1: return "q4_1";
    case DType::Q5_0: return "q5_0";
    case DType::Q5_1: return "q5_1";
    case DType::Q8_0: return "q8_0";
    case DType::IQ4_NL: return "iq4_nl";
    case DType::Q2_K: return "q2_k";
    case DType::Q3_K: return "q3_k";
    case DType::Q4_K: return "q4_k";
    case DType::Q5_K: return "q5_k";
    case DType::Q6_K: return "q6_k";
    default: return nullptr;
  }
}

namespace {

// The pipeline for shader `name` with these defines; `deq`/`deq2` pick the weight decoders.
// A kernel over the workgroup memory limit is a BackendInit error, or with `soft` a null result
// (remembered: the source is not built again).
Pipeline* pipeline_impl(Gpu& g, const char* name, const std::vector<std::string>& defs, DType deq, DType deq2,
                        DType deq3, bool soft) {
  std::string key = name;
  for (const auto& d : defs) key += "+" + d;
  for (DType t : {deq, deq2, deq3})
    if (t != DType::COUNT) key += std::string(":") + enc_fn(t);
  std::lock_guard<std::mutex> lk(g.mu);
  auto it = g.pipelines.find(key);
  if (it != g.pipelines.end()) return &it->second;
  if (soft && g.over_limit.count(key)) return nullptr;
  std::string src;
  if (deq != DType::COUNT) {
    src = std::string(wgsl_source("common")) + wgsl_source("dequant");
    if (std::strcmp(name, "matvec") == 0) src += unroll(wgsl_source("mvdot"));
    // The second and third weights' decoders: the same functions renamed (deq2_*, h16_2, W2, ...).
    const std::string base = src;
    const DType more[2] = {deq2, deq3};
    for (int w = 0; w < 2; ++w) {
      if (more[w] == DType::COUNT) continue;
      const std::string n = std::to_string(w + 2);
      std::string s2 = base;
      for (const char* fn : {"deq_", "b8(", "i8v(", "h16(", "nib(", "scale_min_k4(", "scale_q3_k(",
                             "hsum(", "nib4(", "bytes4(", "sb4(", "hb4("}) {
        std::string f = fn;
        std::string r = f.back() == '(' ? f.substr(0, f.size() - 1) + "_" + n + "(" : "deq" + n + "_";
        replace_all(s2, f, r);
      }
      replace_all(s2, "W[", "W" + n + "[");
      replace_all(s2, "WV[", "WV" + n + "[");
      replace_all(s2, "IQ4NL", "IQ4NL_" + n);
      replace_all(s2, "SH4", "SH4_" + n);
      src += s2;
    }
  }
  // f16 arithmetic (matmul.wgsl H16): the directive leads the module.
  if (std::find(defs.begin(), defs.end(), "H16") != defs.end()) src = "enable f16;\n" + src;
  // The subgroup-matrix GEMM (webgpu:dawn): its extensions lead the module too, and Tint's rule
  // that subgroup matrix offsets be uniform is off (each subgroup's offsets come from its index in
  // the workgroup, uniform within the subgroup, which the analysis cannot see; an error otherwise).
  if (std::strcmp(name, "matmul_sm") == 0)
    src = "enable f16;\nenable chromium_experimental_subgroup_matrix;\n"
          "diagnostic(off, chromium.subgroup_matrix_uniformity);\n" + src;
  std::vector<std::string> seen;
  std::string body = unroll(preprocess(include(wgsl_source(name), &seen), defs));
  const DType all[3] = {deq3, deq2, deq};  // DEQ3 / MV3 -> the third weight's decoders, ...
  for (int w = 0; w < 3; ++w) {
    if (all[w] == DType::COUNT) continue;
    const std::string n = w == 2 ? "" : std::to_string(3 - w);
    replace_all(body, "DEQ" + n + "(", "deq" + n + "_" + enc_fn(all[w]) + "(");
    replace_all(body, "DQV" + n + "(", "deq" + n + "_v4_" + enc_fn(all[w]) + "(");
    replace_all(body, "MV" + n + "(", "deq" + n + "_mv_" + enc_fn(all[w]) + "(");
    replace_all(body, "KS" + n + "(", "deq" + n + "_ks_" + enc_fn(all[w]) + "(");
  }
  src += body;
  const uint64_t wg_bytes = workgroup_bytes(src, key), wg_limit = workgroup_limit(g);
  if (wg_bytes > wg_limit && soft) {
    g.over_limit.insert(key);
    return nullptr;
  }
  if (wg_bytes > wg_limit)
    throw_backend_init(g.impl->backend, "shader '" + key + "' declares " + std::to_string(wg_bytes) +
                                      " bytes of workgroup memory; the device allows " + std::to_string(wg_limit) +
                                      " (maxComputeWorkgroupStorageSize)");
  src = wgsl_dialect(*g.impl, src);  // Tint's directives on Dawn (wgpu_impl.h)
  WGPUShaderSourceWGSL wgsl = {};
  wgsl.chain.sType = WGPUSType_ShaderSourceWGSL;
  wgsl.code = WGPUStringView{src.data(), src.size()};
  WGPUShaderModuleDescriptor md = {};
  md.nextInChain = &wgsl.chain;
  md.label = sv(name);
  WGPUShaderModule mod = impl_shader_module(g, md, shader_checks());
  WGPUComputePipelineDescriptor pd = {};
  pd.label = sv(name);
  pd.compute.module = mod;
  pd.compute.entryPoint = sv("main");
  Pipeline p;
  p.name = key;
  p.pipe = A.wgpuDeviceCreateComputePipeline(g.device, &pd);
  A.wgpuShaderModuleRelease(mod);
  {
    std::string e;
    {
      std::lock_guard<std::mutex> lk2(g.err_mu);
      e.swap(g.device_error);
    }
    if (!e.empty() || !p.pipe) throw_backend_init(g.impl->backend, "shader '" + key + "' failed: " + e);
  }
  p.layout = A.wgpuComputePipelineGetBindGroupLayout(p.pipe, 0);
  return &g.pipelines.emplace(key, p).first->second;
}

}  // namespace

Pipeline& pipeline(Gpu& g, const char* name, const std::vector<std::string>& defs, DType deq,
                   DType deq2, DType deq3) {
  return *pipeline_impl(g, name, defs, deq, deq2, deq3, false);
}
Pipeline* pipeline_if_fits(Gpu& g, const char* name, const std::vector<std::string>& defs, DType deq,
                           DType deq2) {
  return pipeline_impl(g, name, defs, deq, deq2, DType::COUNT, true);
}

}  // namespace wgpu
}  // namespace cyb

#endif  // CYB_HAVE_WGPU
