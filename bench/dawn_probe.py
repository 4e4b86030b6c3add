"""Tensor cores through Dawn: a probe of WGSL subgroup matrices on the GPU's Vulkan driver.

Uses only the `wgpudawn` package (the wgpu-py API on Google's Dawn, a cffi module) and numpy; no
build of cyb_llm. In one process, each step printing its exact error and going on when it fails:

1. the instance with Dawn's `allow_unsafe_apis` toggle (experimental features such as
   `chromium-experimental-subgroup-matrix` are offered only with it) and `vulkan_enable_f16_on_nvidia`
   (Dawn keeps shader-f16 off on NVIDIA's Vulkan driver unless asked); every adapter's info, the
   chosen adapter's features, limits, toggles, subgroup sizes and subgroup matrix configurations
   (`WGPUAdapterPropertiesSubgroupMatrixConfigs`, through wgpudawn's extras or directly through
   `wgpuAdapterGetInfo` with the chained struct);
2. a device with `chromium-experimental-subgroup-matrix`, `shader-f16` and `subgroups`;
3. one subgroup-matrix product per floating-point configuration (e.g. 16x16x16 f16 in, f32 sums:
   subgroupMatrixLoad / subgroupMatrixMultiplyAccumulate / subgroupMatrixStore), against numpy, with
   the right matrix read row-major and column-major;
4. tiled GEMMs C[M,N] = A[M,K] . W[N,K]^T (f16 inputs, f32 sums and output, W laid out as a weight
   matrix) on the prompt shapes of qwen15 and llama7b, checked against numpy on every shape (output
   poisoned with NaN first) and timed (TFLOP/s): subgroup-matrix kernels with the operands read
   straight from the storage buffers (`sm-direct`: one subgroup a workgroup) or staged in workgroup
   memory (`sm-staged`: several subgroups a workgroup), and the plain f32 FMA tiled kernel (`fma`)
   for comparison.

    python bench/dawn_probe.py [--out DIR] [--quick] [--only sm-direct,fma] [--device-toggles ...]

Run on the device machine as docs/gpu-bench.md "Tensor cores through Dawn: the probe" says. `--impl
wgpu` runs the same script on wgpu-native (the `wgpu` package) instead, for checking the FMA path on a
machine without Dawn's adapters (lavapipe).
"""
import argparse
import json
import os
import sys
import time
import traceback

import numpy as np

SHAPES = [  # (model, M tokens, K, N)
    ("qwen15", 512, 1536, 1536),
    ("qwen15", 512, 1536, 8960),
    ("qwen15", 512, 8960, 1536),
    ("llama7b", 512, 4096, 4096),
    ("llama7b", 512, 4096, 11008),
    ("llama7b", 512, 11008, 4096),
]
QUICK_SHAPES = [("small", 128, 256, 256), ("small", 64, 512, 128)]

WANTED_FEATURES = ("shader-f16", "subgroups", "chromium-experimental-subgroup-matrix", "timestamp-query")
SM_FEATURE = "chromium-experimental-subgroup-matrix"
DEFAULT_TOGGLES = "allow_unsafe_apis,vulkan_enable_f16_on_nvidia"

RESULT = {"steps": {}}


def log(*args):
    print(*args, flush=True)


def step(name):
    """Decorator-free helper: run fn(), print and record its exception, return (ok, value)."""

    def run(fn, *args, **kwargs):
        log(f"\n=== {name}")
        try:
            value = fn(*args, **kwargs)
            RESULT["steps"][name] = "ok"
            return True, value
        except Exception as e:  # the probe records every failure and goes on
            msg = f"{type(e).__name__}: {e}"
            log(f"FAILED: {msg}")
            log("".join(traceback.format_exception(e)[-6:]).rstrip())
            RESULT["steps"][name] = "failed: " + msg
            return False, msg

    return run


def to_jsonable(x):
    if isinstance(x, dict):
        return {str(k): to_jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set)):
        return [to_jsonable(v) for v in x]
    if isinstance(x, bytes):
        return x.hex()
    if isinstance(x, (int, float, str, bool)) or x is None:
        return x
    return str(x)


# ----------------------------------------------------------------------------------------------
# WGSL generators


def wgsl_basic(cfg, right_col_major):
    """One subgroup computes one SM x SN result from an SM x SK left matrix and an SK x SN right
    one. A: SM x SK row-major. B: SK x SN row-major, or (right_col_major) Bt: SN x SK row-major, read
    column-major. C: SM x SN row-major."""
    t, rt = cfg["component_type"], cfg["result_component_type"]
    sm, sn, sk, sg = cfg["m"], cfg["n"], cfg["k"], cfg["sg"]
    enables = ["enable chromium_experimental_subgroup_matrix;"]
    if "f16" in (t, rt):
        enables.insert(0, "enable f16;")
    if right_col_major:
        bload = f"subgroupMatrixLoad<subgroup_matrix_right<{t}, {sn}, {sk}>, col_major>(&B, 0u, {sk}u)"
    else:
        bload = f"subgroupMatrixLoad<subgroup_matrix_right<{t}, {sn}, {sk}>, row_major>(&B, 0u, {sn}u)"
    return "\n".join(enables) + f"""
@group(0) @binding(0) var<storage, read> A: array<{t}>;
@group(0) @binding(1) var<storage, read> B: array<{t}>;
@group(0) @binding(2) var<storage, read_write> C: array<{rt}>;
@compute @workgroup_size({sg})
fn main() {{
  let a = subgroupMatrixLoad<subgroup_matrix_left<{t}, {sk}, {sm}>, row_major>(&A, 0u, {sk}u);
  let b = {bload};
  var c = subgroup_matrix_result<{rt}, {sn}, {sm}>();
  c = subgroupMatrixMultiplyAccumulate(a, b, c);
  subgroupMatrixStore<row_major>(&C, 0u, c, {sn}u);
}}
"""


PARAMS = "struct P { M: u32, N: u32, K: u32, pad: u32 };\n@group(0) @binding(0) var<uniform> p: P;\n"


def wgsl_sm_direct(cfg, TM, TN):
    """One subgroup a workgroup; it computes TM x TN result matrices (a (TM SM) x (TN SN) tile of C),
    reading its left and right matrices straight from the storage buffers (A row-major, W as the
    right matrix column-major with stride K). Every offset comes from the workgroup id and the
    uniform parameters, so the calls are in uniform control flow with uniform operands."""
    sm, sn, sk, sg = cfg["m"], cfg["n"], cfg["k"], cfg["sg"]
    t, rt = cfg["component_type"], cfg["result_component_type"]
    L = f"subgroup_matrix_left<{t}, {sk}, {sm}>"
    R = f"subgroup_matrix_right<{t}, {sn}, {sk}>"
    RES = f"subgroup_matrix_result<{rt}, {sn}, {sm}>"
    lines = []
    for i in range(TM):
        for j in range(TN):
            lines.append(f"  var c{i}_{j} = {RES}();")
    body = []
    for i in range(TM):
        body.append(f"    let a{i} = subgroupMatrixLoad<{L}, row_major>(&A, (m0 + {i * sm}u) * p.K + k, p.K);")
    for j in range(TN):
        body.append(f"    let b{j} = subgroupMatrixLoad<{R}, col_major>(&W, (n0 + {j * sn}u) * p.K + k, p.K);")
    for i in range(TM):
        for j in range(TN):
            body.append(f"    c{i}_{j} = subgroupMatrixMultiplyAccumulate(a{i}, b{j}, c{i}_{j});")
    store = []
    for i in range(TM):
        for j in range(TN):
            store.append(f"  subgroupMatrixStore<row_major>(&C, (m0 + {i * sm}u) * p.N + n0 + {j * sn}u, c{i}_{j}, p.N);")
    en = "enable f16;\n" if "f16" in (t, rt) else ""
    return en + "enable chromium_experimental_subgroup_matrix;\n" + PARAMS + f"""
@group(0) @binding(1) var<storage, read> A: array<{t}>;
@group(0) @binding(2) var<storage, read> W: array<{t}>;
@group(0) @binding(3) var<storage, read_write> C: array<{rt}>;
@compute @workgroup_size({sg})
fn main(@builtin(workgroup_id) wg: vec3<u32>) {{
  let m0 = wg.y * {TM * sm}u;
  let n0 = wg.x * {TN * sn}u;
{chr(10).join(lines)}
  for (var k = 0u; k < p.K; k += {sk}u) {{
{chr(10).join(body)}
  }}
{chr(10).join(store)}
}}
"""


def wgsl_sm_staged(cfg, SGM, SGN, TM, TN, KC=32, PAD=8):
    """SGM x SGN subgroups a workgroup, each computing TM x TN result matrices; per chunk of KC
    values of K all threads copy the workgroup's A rows and W rows (16-byte loads) into workgroup
    memory (row stride KC + PAD halves), then each subgroup loads its matrices from there. The
    subgroup index comes from local_invocation_index, which WGSL's uniformity analysis cannot
    prove subgroup-uniform, hence the diagnostic turned off (both spellings; an unknown rule
    name is only a warning)."""
    sm, sn, sk, sg = cfg["m"], cfg["n"], cfg["k"], cfg["sg"]
    t, rt = cfg["component_type"], cfg["result_component_type"]
    assert t == "f16"
    WM, WN = SGM * TM * sm, SGN * TN * sn
    T = SGM * SGN * sg
    LDS = KC + PAD
    assert KC % sk == 0 and KC % 8 == 0
    qa, qw = WM * KC // 8, WN * KC // 8  # 16-byte loads a chunk
    assert qa % T == 0 and qw % T == 0, (qa, qw, T)
    L = f"subgroup_matrix_left<f16, {sk}, {sm}>"
    R = f"subgroup_matrix_right<f16, {sn}, {sk}>"
    RES = f"subgroup_matrix_result<{rt}, {sn}, {sm}>"
    q8 = KC // 8
    stage = []
    for name, src, rows0, nq in (("As", "A4", "m0", qa), ("Ws", "W4", "n0", qw)):
        for s in range(nq // T):
            stage.append("    {")
            stage.append(f"      let e = li + {s * T}u;")
            stage.append(f"      let r = e / {q8}u;")
            stage.append(f"      let q = e % {q8}u;")
            stage.append(f"      let v = {src}[({rows0} + r) * K8 + k0 / 8u + q];")
            stage.append(f"      let o = r * {LDS}u + q * 8u;")
            for c in range(4):
                stage.append(f"      let h{c} = bitcast<vec2<f16>>(v[{c}]);")
                stage.append(f"      {name}[o + {2 * c}u] = h{c}.x;")
                stage.append(f"      {name}[o + {2 * c + 1}u] = h{c}.y;")
            stage.append("    }")
    decl = [f"  var c{i}_{j} = {RES}();" for i in range(TM) for j in range(TN)]
    inner = []
    for kk in range(0, KC, sk):
        inner.append("    {")
        for i in range(TM):
            inner.append(f"      let a{i} = subgroupMatrixLoad<{L}, row_major>(&As, (am + {i * sm}u) * {LDS}u + {kk}u, {LDS}u);")
        for j in range(TN):
            inner.append(f"      let b{j} = subgroupMatrixLoad<{R}, col_major>(&Ws, (bn + {j * sn}u) * {LDS}u + {kk}u, {LDS}u);")
        for i in range(TM):
            for j in range(TN):
                inner.append(f"      c{i}_{j} = subgroupMatrixMultiplyAccumulate(a{i}, b{j}, c{i}_{j});")
        inner.append("    }")
    store = [
        f"  subgroupMatrixStore<row_major>(&C, (m0 + am + {i * sm}u) * p.N + n0 + bn + {j * sn}u, c{i}_{j}, p.N);"
        for i in range(TM)
        for j in range(TN)
    ]
    return (
        "enable f16;\nenable chromium_experimental_subgroup_matrix;\n"
        "diagnostic(off, subgroup_matrix_uniformity);\n"
        "diagnostic(off, chromium.subgroup_matrix_uniformity);\n"
        + PARAMS
        + f"""
@group(0) @binding(1) var<storage, read> A4: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> W4: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> C: array<{rt}>;
var<workgroup> As: array<f16, {WM * LDS}>;
var<workgroup> Ws: array<f16, {WN * LDS}>;
@compute @workgroup_size({T})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {{
  let m0 = wg.y * {WM}u;
  let n0 = wg.x * {WN}u;
  let K8 = p.K / 8u;
  let sgi = li / {sg}u;
  let am = (sgi / {SGN}u) * {TM * sm}u;
  let bn = (sgi % {SGN}u) * {TN * sn}u;
{chr(10).join(decl)}
  for (var k0 = 0u; k0 < p.K; k0 += {KC}u) {{
    workgroupBarrier();
{chr(10).join(stage)}
    workgroupBarrier();
{chr(10).join(inner)}
  }}
{chr(10).join(store)}
}}
"""
    )


def wgsl_fma(R, Cc, KC=32):
    """Plain FMA tiled GEMM: 256 threads as 16 x 16, R tokens x Cc rows of W a thread (multiples
    of 4; tile (16 R) x (16 Cc)), chunks of KC values of K staged as f32 in workgroup memory
    (k-major, so a thread reads 4 tokens or 4 rows as one vec4), f32 sums in named vec4
    registers."""
    TM, TN = 16 * R, 16 * Cc
    ra, cb = R // 4, Cc // 4
    assert (TM * KC // 8) % 256 == 0 and (TN * KC // 8) % 256 == 0
    q8 = KC // 8
    stage = []
    for name, src, rows0, rows, nq in (("As", "A4", "m0", TM, TM * KC // 8), ("Ws", "W4", "n0", TN, TN * KC // 8)):
        for s in range(nq // 256):
            stage.append("    {")
            stage.append(f"      let e = li + {s * 256}u;")
            stage.append(f"      let r = e / {q8}u;")
            stage.append(f"      let q = e % {q8}u;")
            stage.append(f"      let v = {src}[({rows0} + r) * K8 + k0 / 8u + q];")
            for c in range(4):
                stage.append(f"      let h{c} = unpack2x16float(v[{c}]);")
                stage.append(f"      {name}[(q * 8u + {2 * c}u) * {rows // 4}u + r / 4u][r % 4u] = h{c}.x;")
                stage.append(f"      {name}[(q * 8u + {2 * c + 1}u) * {rows // 4}u + r / 4u][r % 4u] = h{c}.y;")
            stage.append("    }")
    decl = [f"  var acc{i}_{j} = vec4<f32>(0.0);" for i in range(R) for j in range(cb)]
    inner = [f"      let a{i} = As[k * {TM // 4}u + ty + {16 * i}u];" for i in range(ra)]
    inner += [f"      let b{j} = Ws[k * {TN // 4}u + tx + {16 * j}u];" for j in range(cb)]
    for i in range(R):
        for j in range(cb):
            inner.append(f"      acc{i}_{j} = fma(vec4<f32>(a{i // 4}.{'xyzw'[i % 4]}), b{j}, acc{i}_{j});")
    store = [
        f"  C4[(m0 + 4u * (ty + {16 * (i // 4)}u) + {i % 4}u) * (p.N / 4u) + n0 / 4u + tx + {16 * j}u] = acc{i}_{j};"
        for i in range(R)
        for j in range(cb)
    ]
    return PARAMS + f"""
@group(0) @binding(1) var<storage, read> A4: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> W4: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> C4: array<vec4<f32>>;
var<workgroup> As: array<vec4<f32>, {KC * TM // 4}>;
var<workgroup> Ws: array<vec4<f32>, {KC * TN // 4}>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {{
  let tx = li % 16u;
  let ty = li / 16u;
  let m0 = wg.y * {TM}u;
  let n0 = wg.x * {TN}u;
  let K8 = p.K / 8u;
{chr(10).join(decl)}
  for (var k0 = 0u; k0 < p.K; k0 += {KC}u) {{
    workgroupBarrier();
{chr(10).join(stage)}
    workgroupBarrier();
    for (var k = 0u; k < {KC}u; k++) {{
{chr(10).join(inner)}
    }}
  }}
{chr(10).join(store)}
}}
"""


# ----------------------------------------------------------------------------------------------


class Probe:
    def __init__(self, args):
        self.args = args
        self.wgpu = None
        self.extras = None
        self.ffi = self.lib = None
        self.adapter = None
        self.device = None
        self.sm_device = False
        self.configs = []
        self.sg_min = self.sg_max = None
        self.sync_buf = None

    # -- setup
    def load(self):
        if self.args.impl == "wgpu":
            import wgpu

            self.wgpu = wgpu
            log(f"wgpu (wgpu-native) {wgpu.__version__}")
            return
        import wgpudawn
        from wgpudawn.backends.dawn import extras
        from wgpudawn.backends.dawn._api import ffi, lib

        self.wgpu, self.extras, self.ffi, self.lib = wgpudawn, extras, ffi, lib
        log(f"wgpudawn {wgpudawn.__version__} from {os.path.dirname(wgpudawn.__file__)}")
        RESULT["wgpudawn"] = wgpudawn.__version__

    def instance(self):
        if self.extras is None:
            log("(wgpu-native: no Dawn toggles)")
            return
        known = self.extras.all_toggles()
        toggles = []
        for name in [t for t in self.args.toggles.split(",") if t]:
            if name in known:
                toggles.append(name)
                log(f"toggle {name} ({known[name]['stage']}): {known[name]['description'][:110]}")
            else:
                log(f"toggle {name}: unknown to this Dawn, left out")
        self.extras.set_instance_extras(enable_toggles=toggles)
        RESULT["instance_toggles"] = toggles

    def adapters(self):
        found = self.wgpu.gpu.enumerate_adapters_sync()
        RESULT["adapters"] = []
        for a in found:
            log(f"adapter: {dict(a.info)}")
            RESULT["adapters"].append(dict(a.info))
        if not found:
            raise RuntimeError("no adapter found (is a Vulkan driver and the loader installed? VK_DRIVER_FILES?)")
        self.adapter = self.wgpu.gpu.request_adapter_sync(power_preference="high-performance")
        if self.adapter is None:
            raise RuntimeError("request_adapter returned None")

    def adapter_details(self):
        a = self.adapter
        info = dict(a.info)
        log(f"chosen adapter info: {info}")
        RESULT["adapter_info"] = info
        feats = sorted(a.features)
        log(f"features ({len(feats)}): {', '.join(feats)}")
        RESULT["adapter_features"] = feats
        keys = [
            "max-storage-buffer-binding-size", "max-buffer-size", "max-compute-workgroup-storage-size",
            "max-compute-invocations-per-workgroup", "max-compute-workgroup-size-x",
            "max-compute-workgroups-per-dimension",
        ]
        lim = {k: a.limits.get(k) for k in keys}
        log(f"limits: {lim}")
        RESULT["adapter_limits"] = lim
        if self.lib is not None:
            c = self.ffi.new("WGPUAdapterInfo *")
            if self.lib.wgpuAdapterGetInfo(a._internal, c) == self.lib.WGPUStatus_Success:
                self.sg_min, self.sg_max = int(c.subgroupMinSize), int(c.subgroupMaxSize)
                self.lib.wgpuAdapterInfoFreeMembers(c[0])
            log(f"subgroup sizes: min {self.sg_min}, max {self.sg_max}")
            RESULT["subgroup_sizes"] = [self.sg_min, self.sg_max]
            for what, fn in (("adapter toggles", lambda: self.extras.get_toggles(a)),
                             ("adapter properties", lambda: self.extras.get_adapter_properties(a))):
                try:
                    v = fn()
                    log(f"{what}: {v}")
                    RESULT[what.replace(' ', '_')] = to_jsonable(v)
                except Exception as e:
                    log(f"{what}: FAILED {type(e).__name__}: {e}")
            try:
                log(f"feature info: {self.extras.feature_info(SM_FEATURE)}")
            except Exception as e:
                log(f"feature info: FAILED {type(e).__name__}: {e}")

    def matrix_configs(self):
        a = self.adapter
        props = RESULT.get("adapter_properties") or {}
        configs = props.get("subgroup_matrix_configs")
        if configs is None:
            log(f"{SM_FEATURE} is {'offered' if SM_FEATURE in a.features else 'NOT offered'} by the adapter; "
                "asking wgpuAdapterGetInfo for WGPUAdapterPropertiesSubgroupMatrixConfigs directly")
            from wgpudawn.backends.dawn._extras_adapter import _get_info

            raw = _get_info(a, "WGPUAdapterPropertiesSubgroupMatrixConfigs",
                            self.lib.WGPUSType_AdapterPropertiesSubgroupMatrixConfigs)
            if raw is None:
                raise RuntimeError("wgpuAdapterGetInfo refused WGPUAdapterPropertiesSubgroupMatrixConfigs")
            names = {1: "f32", 2: "f16", 3: "u32", 4: "i32", 5: "u8", 6: "i8"}
            configs = [
                {"component_type": names.get(c.componentType, c.componentType),
                 "result_component_type": names.get(c.resultComponentType, c.resultComponentType),
                 "m": c.M, "n": c.N, "k": c.K,
                 "min_subgroup_size": c.minSubgroupSize, "max_subgroup_size": c.maxSubgroupSize}
                for c in (raw.configs[i] for i in range(raw.configCount))
            ]
        self.configs = [dict(c) for c in configs]
        log(f"subgroup matrix configs ({len(self.configs)}):")
        for c in self.configs:
            log(f"  {c['component_type']} x {c['component_type']} -> {c['result_component_type']}: "
                f"M={c['m']} N={c['n']} K={c['k']} (subgroup size {c.get('min_subgroup_size')}-{c.get('max_subgroup_size')})")
        RESULT["subgroup_matrix_configs"] = to_jsonable(self.configs)

    def request_device(self):
        a = self.adapter
        feats = set(a.features)
        wanted = [f for f in WANTED_FEATURES if f in feats or f == SM_FEATURE]
        if self.args.impl == "wgpu":
            wanted = [f for f in ("shader-f16", "timestamp-query") if f in feats]
        dev_toggles = [t for t in self.args.device_toggles.split(",") if t]
        log(f"requesting device with features {wanted}, device toggles {dev_toggles}")
        try:
            if self.extras is not None:
                self.device = self.extras.request_device_sync(a, required_features=wanted, enable_toggles=dev_toggles)
            else:
                self.device = a.request_device_sync(required_features=wanted)
        except Exception as e:
            log(f"device WITH {wanted} REFUSED: {type(e).__name__}: {e}")
            RESULT["device_with_subgroup_matrix"] = f"refused: {type(e).__name__}: {e}"
            rest = [f for f in wanted if f != SM_FEATURE]
            log(f"requesting device with {rest} instead")
            if self.extras is not None:
                self.device = self.extras.request_device_sync(a, required_features=rest, enable_toggles=dev_toggles)
            else:
                self.device = a.request_device_sync(required_features=rest)
        dfeats = sorted(self.device.features)
        self.sm_device = SM_FEATURE in dfeats
        if self.sm_device:
            RESULT["device_with_subgroup_matrix"] = "granted"
        log(f"device features: {', '.join(dfeats)}")
        log(f"device has {SM_FEATURE}: {self.sm_device}")
        RESULT["device_features"] = dfeats
        if self.extras is not None:
            try:
                t = self.extras.get_toggles(self.device)
                log(f"device toggles: {t}")
                RESULT["device_toggles"] = t
            except Exception as e:
                log(f"device toggles: FAILED {e}")
        lim = self.device.limits
        log(f"device limits: workgroup storage {lim.get('max-compute-workgroup-storage-size')}, "
            f"storage binding {lim.get('max-storage-buffer-binding-size')}")

    # -- helpers
    def buf(self, data=None, size=None, usage=None):
        U = self.wgpu.BufferUsage
        if usage is None:
            usage = U.STORAGE | U.COPY_SRC | U.COPY_DST
        if data is not None:
            return self.device.create_buffer_with_data(data=np.ascontiguousarray(data), usage=usage)
        return self.device.create_buffer(size=size, usage=usage)

    def pipeline(self, code, label):
        d = self.device
        sm = d.create_shader_module(label=label, code=code)
        try:
            info = sm.get_compilation_info_sync()
            msgs = [f"{m.type}: {m.message} (line {m.line_num})" for m in getattr(info, "messages", info)]
            if msgs:
                log(f"  [{label}] compiler messages: " + " | ".join(msgs)[:1500])
        except Exception:
            pass
        return d.create_compute_pipeline(label=label, layout="auto", compute={"module": sm, "entry_point": "main"})

    def bind(self, pipe, buffers):
        entries = [{"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}} for i, b in buffers]
        return self.device.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=entries)

    def dispatch(self, pipe, bg, groups, reps=1, sync=True):
        enc = self.device.create_command_encoder()
        p = enc.begin_compute_pass()
        p.set_pipeline(pipe)
        p.set_bind_group(0, bg)
        for _ in range(reps):
            p.dispatch_workgroups(*groups)
        p.end()
        self.device.queue.submit([enc.finish()])
        if sync:
            self.sync()

    def sync(self):
        """Wait for the queue: on_submitted_work_done, or (where that fails) a 4-byte read-back,
        which waits for everything submitted before it."""
        if self.sync_buf is None:
            try:
                self.device.queue.on_submitted_work_done_sync()
                return
            except Exception as e:
                log(f"  (on_submitted_work_done failed: {type(e).__name__}: {str(e)[:200]}; syncing by read-back)")
                self.sync_buf = self.buf(size=16)
        self.device.queue.read_buffer(self.sync_buf, 0, 4)

    # -- step 3
    def basic_products(self):
        if not self.sm_device:
            raise RuntimeError(f"no device with {SM_FEATURE}: nothing to run")
        np_t = {"f16": np.float16, "f32": np.float32}
        tested = 0
        RESULT["basic"] = []
        rng = np.random.default_rng(1)
        for cfg in self.configs:
            t, rt = cfg["component_type"], cfg["result_component_type"]
            if t not in np_t or rt not in np_t:
                continue
            cfg = dict(cfg, sg=cfg.get("max_subgroup_size") or self.sg_max or 32)
            sm, sn, sk = cfg["m"], cfg["n"], cfg["k"]
            for col in (False, True):
                name = f"{t}x{t}->{rt} {sm}x{sn}x{sk} right {'col' if col else 'row'}-major"
                try:
                    A = rng.uniform(-1, 1, (sm, sk)).astype(np_t[t])
                    B = rng.uniform(-1, 1, (sk, sn)).astype(np_t[t])
                    ref = A.astype(np.float64) @ B.astype(np.float64)
                    bA = self.buf(A)
                    bB = self.buf(np.ascontiguousarray(B.T) if col else B)
                    bC = self.buf(np.full((sm, sn), np.nan, np_t[rt]))
                    pipe = self.pipeline(wgsl_basic(cfg, col), name)
                    self.dispatch(pipe, self.bind(pipe, [(0, bA), (1, bB), (2, bC)]), (1, 1, 1))
                    out = np.frombuffer(self.device.queue.read_buffer(bC), np_t[rt]).reshape(sm, sn).astype(np.float64)
                    err = float(np.max(np.abs(out - ref)))
                    rel = float(np.linalg.norm(out - ref) / np.linalg.norm(ref))
                    ok = bool(np.isfinite(out).all() and rel < (1e-2 if rt == "f16" else 1e-3))
                    log(f"  {name}: max |gpu - numpy| = {err:.3e}, relative {rel:.3e}, max |ref| "
                        f"{np.max(np.abs(ref)):.2f} -> {'OK' if ok else 'WRONG'}")
                    RESULT["basic"].append({"case": name, "max_abs_err": err, "rel_err": rel, "ok": ok})
                    tested += 1
                except Exception as e:
                    log(f"  {name}: FAILED {type(e).__name__}: {str(e)[:2000]}")
                    RESULT["basic"].append({"case": name, "error": f"{type(e).__name__}: {e}"})
        if not tested:
            raise RuntimeError("no floating-point configuration could be run")

    # -- step 4
    def gemm_kernels(self):
        ks = []
        only = set(self.args.only.split(",")) if self.args.only else None
        cfg = None
        if self.sm_device:
            cands = [c for c in self.configs if c["component_type"] == "f16" and c["result_component_type"] == "f32"]
            cands.sort(key=lambda c: (c["m"] != 16 or c["n"] != 16 or c["k"] != 16, -c["m"] * c["n"] * c["k"]))
            if cands:
                cfg = dict(cands[0], sg=cands[0].get("max_subgroup_size") or self.sg_max or 32)
                log(f"GEMM subgroup matrix config: f16 x f16 -> f32, M={cfg['m']} N={cfg['n']} K={cfg['k']}, subgroup {cfg['sg']}")
            else:
                log("no f16 x f16 -> f32 subgroup matrix config: no subgroup-matrix GEMM")
        if cfg is not None:
            sm, sn = cfg["m"], cfg["n"]
            for TM, TN in ((2, 2), (2, 4), (4, 4)):
                ks.append((f"sm-direct-{TM * sm}x{TN * sn}", "sm-direct",
                           lambda TM=TM, TN=TN: wgsl_sm_direct(cfg, TM, TN), TM * sm, TN * sn))
            for SGM, SGN, TM, TN in ((2, 2, 2, 2), (2, 2, 4, 2), (2, 2, 4, 4), (4, 4, 2, 2)):
                ks.append((f"sm-staged-{SGM * TM * sm}x{SGN * TN * sn}-{SGM * SGN}sg", "sm-staged",
                           lambda SGM=SGM, SGN=SGN, TM=TM, TN=TN: wgsl_sm_staged(cfg, SGM, SGN, TM, TN),
                           SGM * TM * sm, SGN * TN * sn))
        for R, Cc in ((4, 4), (8, 8)):
            ks.append((f"fma-f32-{16 * R}x{16 * Cc}", "fma", lambda R=R, Cc=Cc: wgsl_fma(R, Cc), 16 * R, 16 * Cc))
        if only:
            ks = [k for k in ks if k[1] in only or k[0] in only]
        return ks

    def gemm(self):
        kernels = self.gemm_kernels()
        shapes = QUICK_SHAPES if self.args.quick else SHAPES
        built = {}
        for name, family, gen, tm, tn in kernels:
            try:
                t0 = time.perf_counter()
                built[name] = self.pipeline(gen(), name)
                log(f"  built {name} ({time.perf_counter() - t0:.2f} s)")
            except Exception as e:
                log(f"  {name}: BUILD FAILED {type(e).__name__}: {str(e)[:3000]}")
                RESULT.setdefault("gemm_build_errors", {})[name] = f"{type(e).__name__}: {e}"
        if self.args.dump_wgsl:
            os.makedirs(self.args.dump_wgsl, exist_ok=True)
            for name, family, gen, tm, tn in kernels:
                with open(os.path.join(self.args.dump_wgsl, name + ".wgsl"), "w") as f:
                    f.write(gen())
        U = self.wgpu.BufferUsage
        rng = np.random.default_rng(2)
        rows = []
        warmed = False
        for model, M, K, N in shapes:
            flop = 2.0 * M * N * K
            A = rng.standard_normal((M, K)).astype(np.float16)
            W = (rng.standard_normal((N, K)) / np.sqrt(K)).astype(np.float16)
            t0 = time.perf_counter()
            ref = A.astype(np.float32) @ W.astype(np.float32).T
            log(f"\n  {model} M={M} K={K} N={N} ({flop / 1e9:.1f} GFLOP; numpy reference {time.perf_counter() - t0:.2f} s)")
            bA, bW = self.buf(A), self.buf(W)
            bC = self.buf(size=M * N * 4)
            bP = self.buf(np.array([M, N, K, 0], np.uint32), usage=U.UNIFORM | U.COPY_DST)
            nan = np.full((M, N), np.nan, np.float32)
            for name, family, gen, tm, tn in kernels:
                if name not in built:
                    continue
                row = {"model": model, "M": M, "K": K, "N": N, "kernel": name}
                rows.append(row)
                if M % tm or N % tn:
                    log(f"    {name}: tile {tm}x{tn} does not divide the shape, skipped")
                    row["error"] = "tile does not divide"
                    continue
                try:
                    pipe = built[name]
                    bg = self.bind(pipe, [(0, bP), (1, bA), (2, bW), (3, bC)])
                    groups = (N // tn, M // tm, 1)
                    self.device.queue.write_buffer(bC, 0, nan)
                    self.dispatch(pipe, bg, groups)
                    out = np.frombuffer(self.device.queue.read_buffer(bC), np.float32).reshape(M, N)
                    finite = bool(np.isfinite(out).all())
                    rel = float(np.linalg.norm(out - ref) / np.linalg.norm(ref)) if finite else float("nan")
                    err = float(np.max(np.abs(out - ref))) if finite else float("nan")
                    ok = finite and rel < 1e-3
                    row.update(rel_err=rel, max_abs_err=err, ok=ok)
                    if not warmed:  # a second of work first, so that the clocks are up
                        t0 = time.perf_counter()
                        while time.perf_counter() - t0 < 1.0:
                            self.dispatch(pipe, bg, groups, reps=20)
                        warmed = True
                    t0 = time.perf_counter()
                    self.dispatch(pipe, bg, groups)
                    t1 = time.perf_counter() - t0
                    reps = int(max(3, min(2000, self.args.batch_s / max(t1, 1e-6))))
                    times = []
                    for _ in range(3):
                        t0 = time.perf_counter()
                        self.dispatch(pipe, bg, groups, reps=reps)
                        times.append((time.perf_counter() - t0) / reps)
                    med = sorted(times)[1]
                    tf = flop / med / 1e12
                    row.update(us=med * 1e6, tflops=tf, reps=reps, spread=(max(times) - min(times)) / med)
                    log(f"    {name:28s} {med * 1e6:9.1f} us  {tf:7.2f} TFLOP/s  (x{reps}, spread "
                        f"{100 * row['spread']:.0f}%)  rel err {rel:.1e}  {'OK' if ok else 'WRONG'}")
                except Exception as e:
                    log(f"    {name}: FAILED {type(e).__name__}: {str(e)[:2000]}")
                    row["error"] = f"{type(e).__name__}: {e}"
            for b in (bA, bW, bC, bP):
                b.destroy()
        RESULT["gemm"] = rows
        # summary table: best of each family per shape
        fams = []
        for _, family, _, _, _ in kernels:
            if family not in fams:
                fams.append(family)
        log("\nGEMM summary (TFLOP/s, best kernel of each family; median of 3 batches; checked vs numpy):")
        log("| model | M | K | N | " + " | ".join(fams) + " |")
        log("|---|---|---|---|" + "---|" * len(fams))
        for model, M, K, N in shapes:
            cells = []
            for fam in fams:
                cand = [r for r in rows if r["model"] == model and (r["M"], r["K"], r["N"]) == (M, K, N)
                        and r["kernel"].startswith(fam) and r.get("ok") and "tflops" in r]
                if cand:
                    b = max(cand, key=lambda r: r["tflops"])
                    cells.append(f"{b['tflops']:.1f} ({b['kernel'][len(fam) + 1:]})")
                else:
                    cells.append("-")
            log(f"| {model} | {M} | {K} | {N} | " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="folder for probe.json (and the log, if you tee it there)")
    ap.add_argument("--impl", choices=("dawn", "wgpu"), default="dawn",
                    help="dawn (wgpudawn, the probe) or wgpu (wgpu-native: the FMA path only, for local checks)")
    ap.add_argument("--toggles", default=DEFAULT_TOGGLES, help="Dawn toggles to enable (comma-separated)")
    ap.add_argument("--device-toggles", default="", help="Dawn device toggles, e.g. disable_robustness")
    ap.add_argument("--only", default="", help="kernel families or names: sm-direct,sm-staged,fma")
    ap.add_argument("--quick", action="store_true", help="small shapes (CPU adapters)")
    ap.add_argument("--no-gemm", action="store_true")
    ap.add_argument("--batch-s", type=float, default=0.05, help="seconds of GPU work per timed batch")
    ap.add_argument("--dump-wgsl", help="write the GEMM kernels' WGSL into this folder")
    args = ap.parse_args()

    pr = Probe(args)
    t_start = time.perf_counter()
    ok, _ = step("load the module")(pr.load)
    if not ok:
        return finish(args, 1)
    ok, _ = step("instance with toggles")(pr.instance)
    ok, _ = step("adapters")(pr.adapters)
    if not ok:
        return finish(args, 1)
    step("adapter details")(pr.adapter_details)
    if pr.extras is not None:
        step("subgroup matrix configs")(pr.matrix_configs)
    ok, _ = step("device")(pr.request_device)
    if not ok:
        return finish(args, 1)
    if pr.extras is not None:
        step("one subgroup-matrix product per configuration vs numpy")(pr.basic_products)
    if not args.no_gemm:
        step("GEMM on prompt shapes")(pr.gemm)
    log(f"\nprobe done in {time.perf_counter() - t_start:.1f} s")
    return finish(args, 0)


def finish(args, rc):
    log("\nsteps: " + json.dumps(RESULT["steps"], indent=1))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "probe.json"), "w") as f:
            json.dump(to_jsonable(RESULT), f, indent=1)
    return rc


if __name__ == "__main__":
    sys.exit(main())
