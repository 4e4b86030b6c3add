"""What a WGSL kernel reaches on this GPU through wgpu: the FMA rate, and the inner loop of a tiled GEMM.

Answers how far the f32 tiled GEMM (shaders/wgsl/matmul.wgsl TILED) is from what WGSL compute can do
here, independent of weights, global reads and dequantization:

- `fma-f32` / `fma-f16`: independent vec4 FMA chains in registers (f16: vec4<f16>, where the adapter
  offers shader-f16), TFLOP/s = 2 x FMAs / s.
- `tile-RxC-sums|flat`: the product loop of a tiled GEMM on tiles held in workgroup memory: 256
  threads, R tokens x C rows a thread (TM = 16 R tokens x TN = 16 C rows a tile), chunks of 32 values
  of K; per chunk each thread stages its share of both tiles (TM + TN rows x 32 values, written from
  registers, no global reads), a barrier, the 32 k steps (each thread reads R / 4 + C / 4 vec4 and
  does R x C FMAs), a barrier. `sums`: each output's 32 products summed apart and added to its running
  sum (two registers an output, as TILED does); `flat`: one FMA chain per output (one register).

Each kernel runs for tens of milliseconds (one submit, `reps` dispatches); the figure is the best of
three after a warm-up. Run on the device (docs/gpu-bench.md, "WGSL roof"):

    python bench/wgpu_gemm_roof.py
"""
import argparse
import time

import numpy as np
import wgpu

U = wgpu.BufferUsage


def fma_kernel(f16):
    t = "f16" if f16 else "f32"
    return f"""
{"enable f16;" if f16 else ""}
struct P {{ n: u32, pad0: u32, pad1: u32, pad2: u32 }};
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {{
  let x = {t}(g.x % 7u) * {t}(0.001);
  var a0 = vec4<{t}>(x); var a1 = a0 + {t}(1); var a2 = a0 + {t}(2); var a3 = a0 + {t}(3);
  var a4 = a0 + {t}(4); var a5 = a0 + {t}(5); var a6 = a0 + {t}(6); var a7 = a0 + {t}(7);
  let m = vec4<{t}>({t}(0.999));
  let c = vec4<{t}>({t}(0.0001));
  for (var i = 0u; i < p.n; i++) {{
    a0 = fma(a0, m, c); a1 = fma(a1, m, c); a2 = fma(a2, m, c); a3 = fma(a3, m, c);
    a4 = fma(a4, m, c); a5 = fma(a5, m, c); a6 = fma(a6, m, c); a7 = fma(a7, m, c);
  }}
  let s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
  Y[g.x] = f32(s.x + s.y + s.z + s.w);
}}
"""


def tile_kernel(R, C, sums, unroll=1):
    """R tokens x C rows a thread (R, C multiples of 4), 256 threads as 16 x 16; the k loop written
    out `unroll` steps a pass."""
    TM, TN = 16 * R, 16 * C
    XS, WS = TM // 4 + 1, TN // 4 + 1  # vec4 a staged value of K, one more against bank conflicts
    ra, cb = R // 4, C // 4
    lines = []
    acc = [f"acc{i}_{j}" for i in range(R) for j in range(cb)]
    decl = "\n".join(f"  var {a} = vec4<f32>(0.0);" for a in acc)
    sdecl = "\n".join(f"    var s{a[3:]} = vec4<f32>(0.0);" for a in acc) if sums else ""
    fmas = []
    for u in range(unroll):
        fmas.append("      {")
        fmas += [f"      let a{i} = xs[(k + {u}u) * {XS}u + ty + {16 * i}u];" for i in range(ra)]
        fmas += [f"      let b{j} = ws[(k + {u}u) * {WS}u + tx + {16 * j}u];" for j in range(cb)]
        for i in range(R):
            av = f"a{i // 4}.{'xyzw'[i % 4]}"
            for j in range(cb):
                tgt = f"s{i}_{j}" if sums else f"acc{i}_{j}"
                fmas.append(f"      {tgt} = fma(vec4<f32>({av}), b{j}, {tgt});")
        fmas.append("      }")
    fold = "\n".join(f"    acc{a[3:]} += s{a[3:]};" for a in acc) if sums else ""
    # staging: (TM + TN) rows x 32 values of K, scalars, spread over 256 threads
    nx, nw = TM * 32 // 256, TN * 32 // 256
    stage = []
    for i in range(nx):
        stage.append(f"    {{ let e = li + {256 * i}u; xs[(e % 32u) * {XS}u + (e / 32u) / 4u][(e / 32u) % 4u] = v + f32(e); }}")
    for i in range(nw):
        stage.append(f"    {{ let e = li + {256 * i}u; ws[(e % 32u) * {WS}u + (e / 32u) / 4u][(e / 32u) % 4u] = v - f32(e); }}")
    total = " + ".join(acc)
    return f"""
struct P {{ n: u32, pad0: u32, pad1: u32, pad2: u32 }};
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
var<workgroup> xs: array<vec4<f32>, {32 * XS}>;
var<workgroup> ws: array<vec4<f32>, {32 * WS}>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {{
  let tx = li % 16u;
  let ty = li / 16u;
{decl}
  for (var c = 0u; c < p.n; c++) {{
    let v = f32(c + wid.x) * 1e-6;
{chr(10).join(stage)}
    workgroupBarrier();
{sdecl}
    for (var k = 0u; k < 32u; k += {unroll}u) {{
{chr(10).join(fmas)}
    }}
{fold}
    workgroupBarrier();
  }}
  let s = {total};
  Y[wid.x * 256u + li] = s.x + s.y + s.z + s.w;
}}
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="comma-separated kernel names (default: all)")
    ap.add_argument("--quick", action="store_true", help="a few groups and iterations (a check on a CPU adapter)")
    args = ap.parse_args()
    a = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    print("adapter", a.info["device"], a.info.get("backend_type"))
    f16 = "shader-f16" in a.features
    dev = a.request_device_sync(required_features=["shader-f16"] if f16 else [])

    def run(name, code, groups, n, flops_per_group_iter):
        m = dev.create_shader_module(code=code)
        pl = dev.create_compute_pipeline(layout="auto", compute={"module": m, "entry_point": "main"})
        ub = dev.create_buffer_with_data(data=np.array([n, 0, 0, 0], np.uint32).tobytes(), usage=U.UNIFORM)
        yb = dev.create_buffer(size=4 * 256 * groups, usage=U.STORAGE | U.COPY_SRC)
        bg = dev.create_bind_group(layout=pl.get_bind_group_layout(0),
                                   entries=[{"binding": 0, "resource": {"buffer": ub}},
                                            {"binding": 1, "resource": {"buffer": yb}}])

        def once(reps):
            enc = dev.create_command_encoder()
            cp = enc.begin_compute_pass()
            cp.set_pipeline(pl)
            cp.set_bind_group(0, bg)
            for _ in range(reps):
                cp.dispatch_workgroups(groups, 1, 1)
            cp.end()
            t = time.perf_counter()
            dev.queue.submit([enc.finish()])
            dev.queue.read_buffer(yb, 0, 4)
            return time.perf_counter() - t

        once(1)
        reps = 1
        while once(reps) < 0.05 and reps < 4096:
            reps *= 2
        best = min(once(reps) for _ in range(3)) / reps
        tf = groups * n * flops_per_group_iter / best / 1e12
        y = np.frombuffer(dev.queue.read_buffer(yb), np.float32)
        print(f"{name:24s} groups {groups:5d}  {best * 1e3:8.3f} ms a dispatch  {tf:7.2f} TFLOP/s"
              f"  (finite outputs: {bool(np.isfinite(y).all())})", flush=True)

    q = args.quick
    q2 = 16 if q else 1
    want = set(filter(None, args.only.split(",")))
    sel = lambda n: not want or n in want
    if sel("fma-f32"):
        for g in ((4,) if q else (1056, 4224)):
            run("fma-f32", fma_kernel(False), g, 4096 // q2, 256 * 8 * 4 * 2)
    if f16 and sel("fma-f16"):
        run("fma-f16", fma_kernel(True), 4 if q else 4224, 4096 // q2, 256 * 8 * 4 * 2)
    for R, C in ((4, 4), (8, 4), (4, 8), (8, 8)):
        for sums in (True, False):
            for unroll in (1, 4, 32):
                name = f"tile-{R}x{C}-{'sums' if sums else 'flat'}-u{unroll}"
                if not sel(name):
                    continue
                for g in ((4,) if q else (264,)):
                    run(name, tile_kernel(R, C, sums, unroll), g, 256 // q2, 2 * 32 * 256 * R * C)


if __name__ == "__main__":
    main()
