// The f32 reductions, matmul and convolutions of graph v2 (op.h tags 44, 50-53, 59), one thread an
// output element or row (256 a workgroup, the grid folded into x and y). Sums in f32, compensated
// (Kahan) where a thread adds a run of values. Variants:
//   REDUCE   y[i] = fn over the reduced coordinates (code 0 sum, 1 mean, 2 max, 3 min): kept dims
//            in shape / sa (the input's strides), reduced dims in sb (sizes) / sc (strides)
//   SOFTMAX  exp(x - max) / sum along an axis of length u[0] with inner stride u[1]
//   INORM    (x - mean) / sqrt(var + eps) * scale[c] + bias[c] over the u[0] spatial values of row i
//   MATMUL   y[b, m, n] = sum_k A[b, m, k] B[b, k, n]: u = M, K, N; batch dims in shape / sa / sb
//   CONV     direct convolution (1-D as 2-D with one row) and, with TRANSPOSE, its adjoint
struct P {
  n: u32, nx: u32, code: u32, ndim: u32,
  f0: f32, f1: f32, flags: u32, pad0: u32,
  shape: array<vec4<u32>, 2>,
  sa: array<vec4<u32>, 2>,
  sb: array<vec4<u32>, 2>,
  sc: array<vec4<u32>, 2>,
  u: array<vec4<u32>, 5>,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<storage, read> A: array<f32>;
//#if MATMUL
@group(0) @binding(3) var<storage, read> B: array<f32>;
//#endif
//#if INORM
@group(0) @binding(3) var<storage, read> B: array<f32>;
@group(0) @binding(4) var<storage, read> C: array<f32>;
//#endif
//#if CONV
@group(0) @binding(3) var<storage, read> B: array<f32>;
//#if BIAS
@group(0) @binding(4) var<storage, read> C: array<f32>;
//#endif
//#endif

fn shp(d: u32) -> u32 { return p.shape[d >> 2u][d & 3u]; }
fn s_a(d: u32) -> u32 { return p.sa[d >> 2u][d & 3u]; }
fn s_b(d: u32) -> u32 { return p.sb[d >> 2u][d & 3u]; }
fn s_c(d: u32) -> u32 { return p.sc[d >> 2u][d & 3u]; }
fn uu(k: u32) -> u32 { return p.u[k >> 2u][k & 3u]; }
fn ui(k: u32) -> i32 { return bitcast<i32>(p.u[k >> 2u][k & 3u]); }

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x + gid.y * p.nx * 256u;
  if (i >= p.n) { return; }
//#if REDUCE
  var rem = i;
  var base = 0u;
  for (var d = i32(p.ndim) - 1; d >= 0; d--) {
    let n = shp(u32(d));
    base = base + (rem % n) * s_a(u32(d));
    rem = rem / n;
  }
  let nr = uu(0u);   // reduced dims
  let cnt = uu(1u);  // reduced elements
  var s = 0.0;
  var comp = 0.0;
  var m = 0.0;
  for (var r = 0u; r < cnt; r++) {
    var rr = r;
    var off = base;
    for (var d = i32(nr) - 1; d >= 0; d--) {
      let n = s_b(u32(d));
      off = off + (rr % n) * s_c(u32(d));
      rr = rr / n;
    }
    let v = A[off];
    if (r == 0u) { m = v; }
    if (p.code >= 2u) {
      m = select(min(m, v), max(m, v), p.code == 2u);
      if (v != v) { m = v; }  // NaN propagates
    } else {
      let yk = v - comp;
      let t = s + yk;
      comp = (t - s) - yk;
      s = t;
    }
  }
  if (p.code == 0u) { Y[i] = s; }
  else if (p.code == 1u) { Y[i] = s / f32(cnt); }
  else { Y[i] = m; }
//#endif
//#if SOFTMAX
  let D = uu(0u);
  let inner = uu(1u);
  let b = (i / inner) * D * inner + (i % inner);
  var m = A[b];
  for (var d = 1u; d < D; d++) { m = max(m, A[b + d * inner]); }
  var s = 0.0;
  var comp = 0.0;
  for (var d = 0u; d < D; d++) {
    let yk = exp(A[b + d * inner] - m) - comp;
    let t = s + yk;
    comp = (t - s) - yk;
    s = t;
  }
  let inv = 1.0 / s;
  for (var d = 0u; d < D; d++) { Y[b + d * inner] = exp(A[b + d * inner] - m) * inv; }
//#endif
//#if INORM
  let S = uu(0u);
  let C_ = uu(1u);
  let b = i * S;
  var s = 0.0;
  var comp = 0.0;
  for (var k = 0u; k < S; k++) {
    let yk = A[b + k] - comp;
    let t = s + yk;
    comp = (t - s) - yk;
    s = t;
  }
  let mean = s / f32(S);
  s = 0.0;
  comp = 0.0;
  for (var k = 0u; k < S; k++) {
    let dv = A[b + k] - mean;
    let yk = dv * dv - comp;
    let t = s + yk;
    comp = (t - s) - yk;
    s = t;
  }
  let inv = 1.0 / sqrt(s / f32(S) + p.f0);
  let ch = i % C_;
  let sc = B[ch] * inv;
  for (var k = 0u; k < S; k++) { Y[b + k] = (A[b + k] - mean) * sc + C[ch]; }
//#endif
//#if MATMUL
  let M = uu(0u);
  let K = uu(1u);
  let N = uu(2u);
  let nn = i % N;
  let mm = (i / N) % M;
  var rem = i / (M * N);
  var ao = 0u;
  var bo = 0u;
  for (var d = i32(p.ndim) - 1; d >= 0; d--) {
    let n = shp(u32(d));
    let c = rem % n;
    rem = rem / n;
    ao = ao + c * s_a(u32(d));
    bo = bo + c * s_b(u32(d));
  }
  let a0 = ao * M * K + mm * K;
  let b0 = bo * K * N + nn;
  var s = 0.0;
  var comp = 0.0;
  for (var k = 0u; k < K; k++) {
    let yk = A[a0 + k] * B[b0 + k * N] - comp;
    let t = s + yk;
    comp = (t - s) - yk;
    s = t;
  }
  Y[i] = s;
//#endif
//#if CONV
  // u: 0 C, 1 O, 2 in0, 3 in1, 4 out0, 5 out1, 6 k0, 7 k1, 8 stride0, 9 stride1, 10 dil0, 11 dil1,
  // 12 pb0, 13 pb1, 14 group
  let C_ = ui(0u);
  let O = ui(1u);
  let in0 = ui(2u);
  let in1 = ui(3u);
  let out0 = ui(4u);
  let out1 = ui(5u);
  let k0 = ui(6u);
  let k1 = ui(7u);
  let ii = i32(i);
  let q1 = ii % out1;
  let q0 = (ii / out1) % out0;
  let o = (ii / (out1 * out0)) % O;
  let nb = ii / (out1 * out0 * O);
  let G = ui(14u);
  let Cg = C_ / G;
  let Og = O / G;
  let grp = o / Og;
  var s = 0.0;
  var comp = 0.0;
//#if !TRANSPOSE
  for (var c = 0; c < Cg; c++) {
    let xc = (nb * C_ + grp * Cg + c) * in0 * in1;
    let wc = (o * Cg + c) * k0 * k1;
    for (var j0 = 0; j0 < k0; j0++) {
      let i0 = q0 * ui(8u) + j0 * ui(10u) - ui(12u);
      if (i0 < 0 || i0 >= in0) { continue; }
      for (var j1 = 0; j1 < k1; j1++) {
        let i1 = q1 * ui(9u) + j1 * ui(11u) - ui(13u);
        if (i1 < 0 || i1 >= in1) { continue; }
        let yk = A[xc + i0 * in1 + i1] * B[wc + j0 * k1 + j1] - comp;
        let t = s + yk;
        comp = (t - s) - yk;
        s = t;
      }
    }
  }
//#else
  let ol = o % Og;
  for (var j0 = 0; j0 < k0; j0++) {
    let t0 = q0 + ui(12u) - j0 * ui(10u);
    if (t0 < 0 || t0 % ui(8u) != 0) { continue; }
    let i0 = t0 / ui(8u);
    if (i0 >= in0) { continue; }
    for (var j1 = 0; j1 < k1; j1++) {
      let t1 = q1 + ui(13u) - j1 * ui(11u);
      if (t1 < 0 || t1 % ui(9u) != 0) { continue; }
      let i1 = t1 / ui(9u);
      if (i1 >= in1) { continue; }
      for (var c = 0; c < Cg; c++) {
        let ci = grp * Cg + c;
        let yk = A[(nb * C_ + ci) * in0 * in1 + i0 * in1 + i1] * B[(ci * Og + ol) * k0 * k1 + j0 * k1 + j1] - comp;
        let t = s + yk;
        comp = (t - s) - yk;
        s = t;
      }
    }
  }
//#endif
//#if BIAS
  s = s + C[o];
//#endif
  Y[i] = s;
//#endif
}
