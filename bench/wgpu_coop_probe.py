"""Probe whether this GPU and the installed wgpu give WGSL cooperative matrices (tensor cores).

Prints the adapter's features, asks for a device with `cooperative-matrix` (and `shader-f16`), then
tries an 8 x 8 f32 and a 16 x 16 f16 (f32 sums) cooperative product against numpy, which load
spelling (coopLoad / coopLoadT) gives which layout, and a 64 x 64-tile f16 GEMM's correctness and
TFLOP/s on a few prompt shapes. Every failure is printed and the probe goes on.

    python bench/wgpu_coop_probe.py

On the lent H200 with wgpu 0.32 (docs/gpu-bench.md, 2026-12-03 fourth session) it stops at the
device: wgpu-native refuses EXPERIMENTAL_COOPERATIVE_MATRIX without experimental features enabled,
which its C API cannot do. Run it again when the pinned wgpu changes.
"""
import sys, time
import numpy as np
import wgpu

a = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
print("adapter", a.info["device"], a.info.get("backend_type"))
feats = sorted(a.features)
print("features", feats)
want = [f for f in ("cooperative-matrix", "shader-f16", "subgroup") if f in feats]
try:
    dev = a.request_device_sync(required_features=want)
    print("device ok with", want)
except Exception as e:
    print("request_device failed:", e)
    sys.exit(0)

U = wgpu.BufferUsage


def buf(arr):
    return dev.create_buffer_with_data(data=np.ascontiguousarray(arr).tobytes(), usage=U.STORAGE | U.COPY_SRC | U.COPY_DST)


def out(nbytes):
    return dev.create_buffer(size=nbytes, usage=U.STORAGE | U.COPY_SRC)


def run(code, bufs, grid, reps=1, label=""):
    m = dev.create_shader_module(code=code)
    p = dev.create_compute_pipeline(layout="auto", compute={"module": m, "entry_point": "main"})
    bg = dev.create_bind_group(layout=p.get_bind_group_layout(0),
                               entries=[{"binding": i, "resource": {"buffer": b}} for i, b in enumerate(bufs)])
    enc = dev.create_command_encoder()
    cp = enc.begin_compute_pass()
    cp.set_pipeline(p)
    cp.set_bind_group(0, bg)
    for _ in range(reps):
        cp.dispatch_workgroups(*grid)
    cp.end()
    t = time.perf_counter()
    dev.queue.submit([enc.finish()])
    dev.queue.read_buffer(bufs[-1], 0, 4)
    return time.perf_counter() - t


def tryit(name, fn):
    try:
        fn()
    except Exception as e:
        print(f"[{name}] FAILED: {type(e).__name__}: {str(e)[:600]}")


# 1. one n x n product of input type T with f32 sums, four ways: coopLoad A and B, coopLoadT A, coopLoadT B,
# and the first result stored with coopStoreT (8 x 8 f32 is what wgpu documents; 16 x 16 f16 is the tensor
# cores' shape).
def k1(n, T):
    m = f"coop_mat{n}x{n}"
    return f"""
{"enable f16;" if T == "f16" else ""}
enable wgpu_cooperative_matrix;
@group(0) @binding(0) var<storage, read> A: array<{T}>;
@group(0) @binding(1) var<storage, read> B: array<{T}>;
@group(0) @binding(2) var<storage, read_write> C: array<f32>;
@compute @workgroup_size(32)
fn main() {{
  let a = coopLoad<{m}<{T},A>>(&A[0], {n}u);
  let b = coopLoad<{m}<{T},B>>(&B[0], {n}u);
  let c = coopMultiplyAdd(a, b, {m}<f32,C>());
  coopStore(c, &C[0], {n}u);
  let at = coopLoadT<{m}<{T},A>>(&A[0], {n}u);
  coopStore(coopMultiplyAdd(at, b, {m}<f32,C>()), &C[{n * n}], {n}u);
  let bt = coopLoadT<{m}<{T},B>>(&B[0], {n}u);
  coopStore(coopMultiplyAdd(a, bt, {m}<f32,C>()), &C[{2 * n * n}], {n}u);
  coopStoreT(c, &C[{3 * n * n}], {n}u);
}}
"""


def small(n, code, dt, name):
    rng = np.random.default_rng(1)
    A = rng.integers(-4, 5, (n, n)).astype(dt)
    B = rng.integers(-4, 5, (n, n)).astype(dt)
    C = out(4 * n * n * 4)
    run(code, [buf(A), buf(B), C], (1, 1, 1))
    r = np.frombuffer(dev.queue.read_buffer(C), np.float32).reshape(4, n, n)
    A32, B32 = A.astype(np.float64), B.astype(np.float64)
    cands = {"A@B": A32 @ B32, "(A@B).T": (A32 @ B32).T, "A.T@B": A32.T @ B32, "A@B.T": A32 @ B32.T,
             "B@A": B32 @ A32, "(B@A).T": (B32 @ A32).T, "A.T@B.T": A32.T @ B32.T, "B.T@A.T": B32.T @ A32.T}
    for i, what in enumerate(["coopLoad a, coopLoad b", "coopLoadT a, coopLoad b", "coopLoad a, coopLoadT b",
                              "coopStoreT of the first"]):
        hit = [k for k, v in cands.items() if np.array_equal(r[i], v)]
        print(f"[{name}] {what}: {hit or 'no match'}")


tryit("8x8 f32", lambda: small(8, k1(8, "f32"), np.float32, "8x8 f32"))
tryit("16x16 f16", lambda: small(16, k1(16, "f16"), np.float16, "16x16 f16"))

# 2. a 64 x 64 tile GEMM, C[m][n] = sum_k X[m][k] W[n][k] (X tokens x K, W rows x K, both f16, K contiguous),
# 4 subgroups a workgroup, each 32 x 32 (2 x 2 accumulators), K staged 32 a step in workgroup memory.
GEMM = """
enable f16;
enable wgpu_cooperative_matrix;
struct P { M: u32, N: u32, K: u32, pad: u32 };
@group(0) @binding(0) var<storage, read> X: array<vec4<f16>>;
@group(0) @binding(1) var<storage, read> W: array<vec4<f16>>;
@group(0) @binding(2) var<uniform> p: P;
@group(0) @binding(3) var<storage, read_write> C: array<f32>;
const S = 40u;  // staged row stride (f16)
var<workgroup> xs: array<f16, 2560>;  // 64 x 40
var<workgroup> ws: array<f16, 2560>;
@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let n0 = wid.x * 64u;
  let m0 = wid.y * 64u;
  let sg = li / 32u;
  let sm = (sg / 2u) * 32u;
  let sn = (sg % 2u) * 32u;
  var c00 = coop_mat16x16<f32,C>();
  var c01 = coop_mat16x16<f32,C>();
  var c10 = coop_mat16x16<f32,C>();
  var c11 = coop_mat16x16<f32,C>();
  let K4 = p.K / 4u;
  for (var k0 = 0u; k0 < p.K; k0 += 32u) {
    // 64 rows x 8 vec4 each for X and W: 512 vec4, 4 a thread
    for (var e = li; e < 512u; e += 128u) {
      let r = e / 8u;
      let q = e % 8u;
      let xv = X[(m0 + r) * K4 + k0 / 4u + q];
      let wv = W[(n0 + r) * K4 + k0 / 4u + q];
      for (var i = 0u; i < 4u; i++) {
        xs[r * S + 4u * q + i] = xv[i];
        ws[r * S + 4u * q + i] = wv[i];
      }
    }
    workgroupBarrier();
    for (var kk = 0u; kk < 32u; kk += 16u) {
      let a0 = LOADA(&xs[(sm) * S + kk], S);
      let a1 = LOADA(&xs[(sm + 16u) * S + kk], S);
      let b0 = LOADB(&ws[(sn) * S + kk], S);
      let b1 = LOADB(&ws[(sn + 16u) * S + kk], S);
      c00 = coopMultiplyAdd(a0, b0, c00);
      c01 = coopMultiplyAdd(a0, b1, c01);
      c10 = coopMultiplyAdd(a1, b0, c10);
      c11 = coopMultiplyAdd(a1, b1, c11);
    }
    workgroupBarrier();
  }
  STORE(c00, &C[(m0 + sm) * p.N + n0 + sn], p.N);
  STORE(c01, &C[(m0 + sm) * p.N + n0 + sn + 16u], p.N);
  STORE(c10, &C[(m0 + sm + 16u) * p.N + n0 + sn], p.N);
  STORE(c11, &C[(m0 + sm + 16u) * p.N + n0 + sn + 16u], p.N);
}
"""


def gemm():
    rng = np.random.default_rng(2)
    L, LT = "coopLoad<coop_mat16x16<f16,%s>>", "coopLoadT<coop_mat16x16<f16,%s>>"
    code = None
    for la in (L, LT):
        for lb in (L, LT):
            for st in ("coopStore", "coopStoreT"):
                c = GEMM.replace("LOADA", la % "A").replace("LOADB", lb % "B").replace("STORE", st)
                M, N, K = 128, 192, 256
                X = (rng.standard_normal((M, K)) * 0.5).astype(np.float16)
                Wt = (rng.standard_normal((N, K)) * 0.5).astype(np.float16)
                C = out(4 * M * N)
                bufs = [buf(X), buf(Wt), dev.create_buffer_with_data(data=np.array([M, N, K, 0], np.uint32).tobytes(), usage=U.UNIFORM), C]
                try:
                    run(c, bufs, (N // 64, M // 64, 1), 1)
                except Exception as e:
                    print("[gemm] compile/run failed:", str(e)[:400]); return
                ref = X.astype(np.float64) @ Wt.astype(np.float64).T
                got = np.frombuffer(dev.queue.read_buffer(C), np.float32).reshape(M, N)
                err = np.abs(got - ref).max() / np.abs(ref).max()
                print(f"[gemm] A {la[:9]} B {lb[:9]} {st}: max rel err {err:.3e}")
                if err < 1e-3 and code is None:
                    code = c
    if code is None:
        print("[gemm] no layout gave the right product"); return
    for (M, N, K, reps) in [(4096, 4096, 4096, 10), (512, 8960, 1536, 20), (512, 4096, 11008, 20), (256, 1536, 8960, 20)]:
        X = (rng.standard_normal((M, K)) * 0.5).astype(np.float16)
        Wt = (rng.standard_normal((N, K)) * 0.5).astype(np.float16)
        C = out(4 * M * N)
        bufs = [buf(X), buf(Wt), dev.create_buffer_with_data(data=np.array([M, N, K, 0], np.uint32).tobytes(), usage=U.UNIFORM), C]
        run(code, bufs, (N // 64, M // 64, 1), 3)
        t = run(code, bufs, (N // 64, M // 64, 1), reps)
        print(f"[gemm {M}x{N}x{K}] {t / reps * 1e6:.1f} us a dispatch, {2 * M * N * K * reps / t / 1e12:.1f} TFLOP/s")


tryit("gemm", gemm)
print("probe done")
