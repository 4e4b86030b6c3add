// Graph-v2 conv (group 1, not transposed) as a tiled implicit GEMM: y[n, o, q0, q1] is entry
// (o, col) of the product W X, W the weights as an [O, K] matrix (K = C k0 k1, row-major as stored),
// X the [K, N out0 out1] matrix of input patches (col = (n out0 + q0) out1 + q1; entry k = (c k0 +
// j0) k1 + j1 is x[n, c, q0 s0 + j0 d0 - pb0, q1 s1 + j1 d1 - pb1], 0 in the padding), gathered as
// it is staged; a 1-D conv is one row (wgpu_ops_array.cc routes the shapes; the direct kernel of
// array_nn.wgsl CONV keeps groups, transposes and small shapes). A workgroup computes a 64-row x
// 64-column tile of y over chunks of 32 values of K, 256 threads: per chunk 32 threads decode its
// values of K (channel, window row and column) into a table, then every thread reads 8 weights (a
// warp: 8 consecutive values of K of 4 rows) and 8 patch values (a warp: 32 consecutive columns of
// one k) into registers, one chunk ahead of the products, and stages them k-major in
// workgroup memory (rows of 64 values padded by 4 against bank conflicts). Thread (tx, ty) sums
// rows 4 ty .. 4 ty + 3 x columns 4 tx .. 4 tx + 3: an f32 FMA chain per output over each chunk,
// the chunks' sums added with Kahan compensation (array_nn's sums are compensated too); then the
// bias on store. Split K (SPLITK, for grids of few tiles): grid z = u[15] parts of u[16] chunks
// each, each tile's sums (no bias) into part z of Y (parts laid out as y, one after another); then
// the SPLITK_SUM kernel (one invocation an output) adds the parts in order and the bias into y.
// Parameters: array_params (p.n the number of columns, SPLITK_SUM: of outputs; p.u the CONV
// geometry of array_nn). F16: the weights are f16 (read as pairs of halves, widened exactly).
//#include array_params
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<storage, read> A: array<f32>;  // x (SPLITK_SUM: the parts)
//#if !SPLITK_SUM
//#if F16
// f16 weights (F16): two values a word, converted exactly (half.wgsl)
@group(0) @binding(3) var<storage, read> B: array<u32>;
//#include half
fn bw(i: u32) -> f32 { return f16_to_f32((B[i >> 1u] >> (16u * (i & 1u))) & 0xffffu); }
//#else
@group(0) @binding(3) var<storage, read> B: array<f32>;
fn bw(i: u32) -> f32 { return B[i]; }
//#endif
//#endif
//#if BIAS
@group(0) @binding(4) var<storage, read> C: array<f32>;
//#endif
//#if SPLITK_SUM
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x + gid.y * p.nx * 256u;
  if (i >= p.n) { return; }
  var s = 0.0;
  for (var z = 0u; z < uu(15u); z++) { s += A[z * p.n + i]; }
//#if BIAS
  s += C[(i / (uu(4u) * uu(5u))) % uu(1u)];
//#endif
  Y[i] = s;
}
//#else

const TS = 17u;  // vec4 a staged value of K: 16 and one against bank conflicts
var<workgroup> ws: array<vec4<f32>, 544>;  // [k][row / 4], 32 x 17
var<workgroup> xs: array<vec4<f32>, 544>;  // [k][col / 4]
// per value k of the chunk being read: the offset of its channel in an image, and its window
// offsets j0 d0, j1 d1 (k = (c k0 + j0) k1 + j1)
var<workgroup> kt: array<vec3<i32>, 32>;

// Weight i (0..7) of this thread for chunk c, 0 outside W: entry e = li + 256 i is value
// 8 (e / 512) + e % 8 of the chunk for row (e / 8) % 64.
fn wload(c: u32, o0: u32, li: u32, i: u32, O: u32, K: u32) -> f32 {
  let e = li + 256u * i;
  let r = o0 + (e / 8u) % 64u;
  let k = c * 32u + 8u * (e / 512u) + e % 8u;
  if (r < O && k < K) { return bw(r * K + k); }
  return 0.0;
}
fn wstore(li: u32, i: u32, v: f32) {
  let e = li + 256u * i;
  let r = (e / 8u) % 64u;
  ws[(8u * (e / 512u) + e % 8u) * TS + r / 4u][r % 4u] = v;
}

// acc += s, compensated (Kahan; times p.one, as array_nn.wgsl, so that the compensation is kept).
fn kahan(acc: ptr<function, vec4<f32>>, cmp: ptr<function, vec4<f32>>, s: vec4<f32>) {
  let y = s - *cmp;
  let t = (*acc + y) * p.one;
  *cmp = (t - *acc) - y;
  *acc = t;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  // u: 0 C, 1 O, 2 in0, 3 in1, 4 out0, 5 out1, 6 k0, 7 k1, 8 stride0, 9 stride1, 10 dil0, 11 dil1,
  // 12 pb0, 13 pb1 (array_nn.wgsl CONV)
  let C_ = uu(0u);
  let O = uu(1u);
  let in0 = ui(2u);
  let in1 = ui(3u);
  let out0 = uu(4u);
  let out1 = uu(5u);
  let kk = uu(6u) * uu(7u);
  let k1 = uu(7u);
  let K = C_ * kk;
  let ncol = p.n;
  let o0 = wid.y * 64u;
  let n0 = wid.x * 64u;
  let tx = li % 16u;  // columns 4 tx .. 4 tx + 3 of the tile
  let ty = li / 16u;  // rows 4 ty .. 4 ty + 3
  // gathering: column gc of the tile, values k = li / 64 + 4 i (i = 0..7) of each chunk
  let gc = li % 64u;
  let gk = li / 64u;
  let col = n0 + gc;
  let ocol = out0 * out1;
  let cin = col < ncol;
  let q = col % ocol;
  let xb = i32((col / ocol) * C_) * in0 * in1;  // the image's first value
  let b0 = i32(q / out1) * ui(8u) - ui(12u);     // the window's first row and column
  let b1 = i32(q % out1) * ui(9u) - ui(13u);
  // acc<i>: row 4 ty + i, columns 4 tx .. 4 tx + 3 in its lanes
  var acc0 = vec4<f32>(0.0);
  var acc1 = vec4<f32>(0.0);
  var acc2 = vec4<f32>(0.0);
  var acc3 = vec4<f32>(0.0);
  var cmp0 = vec4<f32>(0.0);  // their compensations
  var cmp1 = vec4<f32>(0.0);
  var cmp2 = vec4<f32>(0.0);
  var cmp3 = vec4<f32>(0.0);
  let nch = (K + 31u) / 32u;
//#if SPLITK
  let cb = wid.z * uu(16u);  // this part's chunks
  let ce = min(nch, cb + uu(16u));
  let yz = wid.z * ncol * O;  // its place in Y
//#else
  let cb = 0u;
  let ce = nch;
  let yz = 0u;
//#endif
  var wv: array<f32, 8>;
  var xv: array<f32, 8>;
  for (var c = cb; c <= ce; c++) {
    workgroupBarrier();  // the products of chunk c - 2 and the reads of chunk c - 1 are done
    if (c > cb) {  // stage chunk c - 1 (read last iteration)
      //#unroll
      for (var i = 0u; i < 8u; i++) {
        wstore(li, i, wv[i]);
        let k = gk + 4u * i;
        xs[k * TS + gc / 4u][gc % 4u] = xv[i];
      }
    }
    if (c < ce && li < 32u) {  // chunk c's table of K
      let k = c * 32u + li;
      var t = vec3<i32>(0, 1 << 30, 0);  // past K: a row outside every image
      if (k < K) {
        let r = k % kk;
        t = vec3<i32>(i32(k / kk) * in0 * in1, i32(r / k1) * ui(10u), i32(r % k1) * ui(11u));
      }
      kt[li] = t;
    }
    workgroupBarrier();
    if (c < ce) {  // read chunk c into registers (before chunk c - 1's products)
      //#unroll
      for (var i = 0u; i < 8u; i++) {
        wv[i] = wload(c, o0, li, i, O, K);
        let t = kt[gk + 4u * i];
        let i0 = b0 + t.y;
        let i1 = b1 + t.z;
        var v = 0.0;
        if (cin && i0 >= 0 && i0 < in0 && i1 >= 0 && i1 < in1) { v = A[xb + t.x + i0 * in1 + i1]; }
        xv[i] = v;
      }
    }
    if (c > cb) {
      var s0 = vec4<f32>(0.0);
      var s1 = vec4<f32>(0.0);
      var s2 = vec4<f32>(0.0);
      var s3 = vec4<f32>(0.0);
      //#unroll
      for (var k = 0u; k < 32u; k++) {
        let a = ws[k * TS + ty];
        let b = xs[k * TS + tx];
        s0 = fma(vec4<f32>(a.x), b, s0);
        s1 = fma(vec4<f32>(a.y), b, s1);
        s2 = fma(vec4<f32>(a.z), b, s2);
        s3 = fma(vec4<f32>(a.w), b, s3);
      }
      kahan(&acc0, &cmp0, s0);
      kahan(&acc1, &cmp1, s1);
      kahan(&acc2, &cmp2, s2);
      kahan(&acc3, &cmp3, s3);
    }
  }
  //#unroll
  for (var j = 0u; j < 4u; j++) {
    let cj = n0 + 4u * tx + j;
    if (cj < ncol) {
      let yb = yz + (cj / ocol) * O * ocol + cj % ocol;
      //#unroll
      for (var i = 0u; i < 4u; i++) {
        let o = o0 + 4u * ty + i;
        if (o < O) {
          var v = 0.0;
          if (i == 0u) { v = acc0[j]; } else if (i == 1u) { v = acc1[j]; } else if (i == 2u) { v = acc2[j]; } else { v = acc3[j]; }
//#if BIAS
          v += C[o];
//#endif
          Y[yb + o * ocol] = v;
        }
      }
    }
  }
}
//#endif
