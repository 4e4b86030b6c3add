// The f32 reductions, matmul and convolutions of graph v2 (op.h tags 44, 50-53, 59), one thread an
// output element or row (256 a workgroup, the grid folded into x and y). Sums in f32, compensated
// (Kahan) where a thread adds a run of values; each partial sum is multiplied by p.one (1.0, a
// run-time value) so that a compiler allowed to reassociate (lavapipe's does) cannot fold the
// compensation (t - s) - y to zero. Variants:
//   REDUCE   y[i] = fn over the reduced coordinates (code 0 sum, 1 mean, 2 max, 3 min): kept dims
//            in shape / sa (the input's strides), reduced dims in sb (sizes) / sc (strides)
//   SOFTMAX  exp(x - max) / sum along an axis of length u[0] with inner stride u[1]
//   POOL     average / max pooling (the CONV geometry in u; u[15] max, u[16] count_include_pad,
//            u[17], u[18] pads at the end)
//   RESIZE   y = sum over the 2^ndim corners of the source coordinates of B (per dim d at sb[d]:
//            a source index pair and the upper one's weight per output index, from the host)
//   MATMUL   y[b, m, n] = sum_k A[b, m, k] B[b, k, n]: u = M, K, N; batch dims in shape / sa / sb
//   CONV     direct convolution (1-D as 2-D with one row) and, with TRANSPOSE, its adjoint (F16: f16
//            weights, read as pairs of halves)
//#include array_params
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<storage, read> A: array<f32>;
//#if MATMUL
@group(0) @binding(3) var<storage, read> B: array<f32>;
//#endif
//#if RESIZE
@group(0) @binding(3) var<storage, read> B: array<f32>;
//#endif
//#if CONV
//#if F16
// f16 weights (F16): two values a word, converted exactly (half.wgsl)
@group(0) @binding(3) var<storage, read> B: array<u32>;
//#include half
fn bw(i: i32) -> f32 { let j = u32(i); return f16_to_f32((B[j >> 1u] >> (16u * (j & 1u))) & 0xffffu); }
//#else
@group(0) @binding(3) var<storage, read> B: array<f32>;
fn bw(i: i32) -> f32 { return B[i]; }
//#endif
//#if BIAS
@group(0) @binding(4) var<storage, read> C: array<f32>;
//#endif
//#endif


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
      let t = (s + yk) * p.one;
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
    let t = (s + yk) * p.one;
    comp = (t - s) - yk;
    s = t;
  }
  let inv = 1.0 / s;
  for (var d = 0u; d < D; d++) { Y[b + d * inner] = exp(A[b + d * inner] - m) * inv; }
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
    let t = (s + yk) * p.one;
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
        let yk = A[xc + i0 * in1 + i1] * bw(wc + j0 * k1 + j1) - comp;
        let t = (s + yk) * p.one;
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
        let yk = A[(nb * C_ + ci) * in0 * in1 + i0 * in1 + i1] * bw((ci * Og + ol) * k0 * k1 + j0 * k1 + j1) - comp;
        let t = (s + yk) * p.one;
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
//#if POOL
  let out0 = ui(4u);
  let out1 = ui(5u);
  let in0 = ui(2u);
  let in1 = ui(3u);
  let ii = i32(i);
  let q1 = ii % out1;
  let q0 = (ii / out1) % out0;
  let nc = ii / (out1 * out0);
  let xc = nc * in0 * in1;
  let mx = uu(15u) == 1u;
  var s = select(0.0, bitcast<f32>(0xff800000u), mx);
  var comp = 0.0;
  var cnt = 0;
  for (var j0 = 0; j0 < ui(6u); j0++) {
    let i0 = q0 * ui(8u) + j0 * ui(10u) - ui(12u);
    if (i0 < 0 || i0 >= in0) { continue; }
    for (var j1 = 0; j1 < ui(7u); j1++) {
      let i1 = q1 * ui(9u) + j1 * ui(11u) - ui(13u);
      if (i1 < 0 || i1 >= in1) { continue; }
      let v = A[xc + i0 * in1 + i1];
      if (mx) {
        if (v > s || v != v) { s = v; }
      } else {
        let yk = v - comp;
        let t = (s + yk) * p.one;
        comp = (t - s) - yk;
        s = t;
      }
      cnt++;
    }
  }
  if (!mx) {
    if (uu(16u) == 1u) {  // the window clipped to the padded input
      let b0 = q0 * ui(8u) - ui(12u);
      cnt = min(b0 + ui(6u), in0 + ui(17u)) - b0;
      if (uu(19u) == 2u) {
        let b1 = q1 * ui(9u) - ui(13u);
        cnt = cnt * (min(b1 + ui(7u), in1 + ui(18u)) - b1);
      }
    }
    s = select(0.0, s / f32(cnt), cnt != 0);
  }
  Y[i] = s;
//#endif
//#if RESIZE
  var idx: array<u32, 8>;
  var rem = i;
  for (var d = i32(p.ndim) - 1; d >= 0; d--) {
    let n = shp(u32(d));
    idx[d] = rem % n;
    rem = rem / n;
  }
  var s = 0.0;
  let corners = 1u << p.ndim;
  for (var m = 0u; m < corners; m++) {
    var wt = 1.0;
    var off = 0u;
    for (var d = 0u; d < p.ndim; d++) {
      let e = s_b(d) + 3u * idx[d];
      let f = B[e + 2u];
      let hi = ((m >> d) & 1u) == 1u;
      if (hi && f == 0.0) { wt = 0.0; break; }
      wt = wt * select(1.0 - f, f, hi);
      off = off + bitcast<u32>(B[select(e, e + 1u, hi)]) * s_a(d);
    }
    if (wt != 0.0) { s = s + wt * A[off]; }
  }
  Y[i] = s;
//#endif
}
