// Matrix products y[t, row0 + r] = sum_k x[t, k] * W[r, k] (+ bias) for the rows of one weight
// chunk, any weight encoding (DEQ, DQV). Two kernels share the parameters and bindings: the row
// kernel (few tokens) and, with the define TILED, the tiled GEMM (many tokens).
// Variant SWIGLU: two weights (gate, up), y = silu(x Wg) * (x Wu). Epilogues (fused_matmul_gelu,
// fused_matmul_add): GELU / GELU_TANH y = gelu(x W + b), ADD y = x W + b + R (R laid out as y).
// Split K (TILED SPLITK, for grids of few tiles): grid z = p.ksplit parts of K, each tile's raw
// sums into part z of Y (laid out [z][t][row]); then the SPLITK_SUM kernel adds the parts (X
// bound to them) in order, the bias and the epilogue, into y.
struct P {
  K: u32, T: u32, rb: u32, x_off: u32,
  y_off: u32, ldy: u32, row0: u32, nrows: u32,
  nx: u32, has_bias: u32, rb2: u32, r_off: u32,
  ksplit: u32, pad0: u32, pad1: u32, pad2: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> W: array<u32>;
@group(0) @binding(2) var<storage, read> X: array<f32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;
//#if BIAS
@group(0) @binding(4) var<storage, read> B: array<f32>;
//#endif
//#if SWIGLU
@group(0) @binding(5) var<storage, read> W2: array<u32>;
//#endif
//#if ADD
@group(0) @binding(6) var<storage, read> R: array<f32>;
//#endif
//#include epilogue
//#if SPLITK_SUM
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let r = wid.x * 256u + li;
  let t = wid.y;
  if (r >= p.nrows) { return; }
  var o = 0.0;
  for (var z = 0u; z < p.ksplit; z++) {
    o += X[(z * p.T + t) * p.nrows + r];
  }
//#if BIAS
  o += B[p.row0 + r];
//#endif
  Y[p.y_off + t * p.ldy + p.row0 + r] = epi(o, t, p.row0 + r);
}
//#else
//#if TILED
//#if H16
// The tiled GEMM in f16 (H16: fast mode, block-quantized weights, an adapter with shader-f16;
// wgpu_backend.cc gemm_f16): the tiles, the thread layout and the decoding of the f32 kernel
// below, with the weights (decoded in f32, then rounded) and the activations staged as f16,
// two chunks a stage (64 values of K between barriers). Each thread's 4 tokens x 4 rows are f16
// FMAs on vec4<f16> (two packed pairs: twice the f32 rate); a chunk's 32 products are summed
// in f16 (s<i>), then added to f32 sums (acc<i>), so that no f16 sum runs over more than 32
// products. T8: tiles of 128 tokens, each thread also tokens 64 + 4 ty .. 64 + 4 ty + 3 (acc4..7):
// the weights decoded once for twice the tokens.
//#if T8
const TM = 128u;  // tokens per tile
//#else
const TM = 64u;
//#endif
const TN = 64u;  // weight rows per tile
const SC = 2u;   // chunks a stage
//#if T8
var<workgroup> xh: array<vec4<f16>, 2048>;  // [k][token / 4], 64 x TM / 4
//#else
var<workgroup> xh: array<vec4<f16>, 1024>;
//#endif
var<workgroup> wh: array<vec4<f16>, 1024>;  // [k][row / 4]
//#if SWIGLU
var<workgroup> wh2: array<vec4<f16>, 1024>;
//#endif

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let r0 = wid.x * TN;
  let t0 = wid.y * TM;
  let tx = li % 16u;  // rows 4 tx .. 4 tx + 3 of the tile
  let ty = li / 16u;  // tokens 4 ty .. 4 ty + 3
  let dr = li % TN;   // decoding: row dr, four-value groups 2 dq and 2 dq + 1 of each chunk
  let dq = li / TN;
  let wrow = r0 + dr;
  var acc0 = vec4<f32>(0.0);
  var acc1 = vec4<f32>(0.0);
  var acc2 = vec4<f32>(0.0);
  var acc3 = vec4<f32>(0.0);
//#if T8
  var acc4 = vec4<f32>(0.0);
  var acc5 = vec4<f32>(0.0);
  var acc6 = vec4<f32>(0.0);
  var acc7 = vec4<f32>(0.0);
//#if SWIGLU
  var accu4 = vec4<f32>(0.0);
  var accu5 = vec4<f32>(0.0);
  var accu6 = vec4<f32>(0.0);
  var accu7 = vec4<f32>(0.0);
//#endif
//#endif
//#if SWIGLU
  var accu0 = vec4<f32>(0.0);
  var accu1 = vec4<f32>(0.0);
  var accu2 = vec4<f32>(0.0);
  var accu3 = vec4<f32>(0.0);
//#endif
  let nch = (p.K + 31u) / 32u;
//#if SPLITK
  let cps = (nch + p.ksplit - 1u) / p.ksplit;
  let c_begin = wid.z * cps;
  let c_end = min(nch, c_begin + cps);
  zsplit = wid.z;
//#else
  let c_begin = 0u;
  let c_end = nch;
//#endif
  for (var c = c_begin; c < c_end; c += SC) {
    for (var cc = 0u; cc < SC; cc++) {
      var wa = vec4<f32>(0.0);
      var wb = vec4<f32>(0.0);
//#if SWIGLU
      var ua = vec4<f32>(0.0);
      var ub = vec4<f32>(0.0);
//#endif
      if (wrow < p.nrows && c + cc < c_end) {
        wa = DQV(wrow * p.rb, c + cc, p.K, 2u * dq);
        wb = DQV(wrow * p.rb, c + cc, p.K, 2u * dq + 1u);
//#if SWIGLU
        ua = DQV2(wrow * p.rb2, c + cc, p.K, 2u * dq);
        ub = DQV2(wrow * p.rb2, c + cc, p.K, 2u * dq + 1u);
//#endif
      }
      let ha = vec4<f16>(wa);
      let hb = vec4<f16>(wb);
//#if SWIGLU
      let hua = vec4<f16>(ua);
      let hub = vec4<f16>(ub);
//#endif
      let k8 = cc * 32u + 8u * dq;
      for (var i = 0u; i < 4u; i++) {
        wh[(k8 + i) * 16u + dr / 4u][dr % 4u] = ha[i];
        wh[(k8 + 4u + i) * 16u + dr / 4u][dr % 4u] = hb[i];
//#if SWIGLU
        wh2[(k8 + i) * 16u + dr / 4u][dr % 4u] = hua[i];
        wh2[(k8 + 4u + i) * 16u + dr / 4u][dr % 4u] = hub[i];
//#endif
      }
    }
    // activations: token e % TM, value e / TM of the stage (0 past this part's chunks)
    let kend = min(p.K, c_end * 32u);
    for (var e = li; e < TM * 32u * SC; e += 256u) {
      let tt = e % TM;
      let k = c * 32u + e / TM;
      var v = 0.0;
      if (t0 + tt < p.T && k < kend) {
        v = X[p.x_off + (t0 + tt) * p.K + k];
      }
      xh[(e / TM) * (TM / 4u) + tt / 4u][tt % 4u] = f16(v);
    }
    workgroupBarrier();
    for (var cc = 0u; cc < SC; cc++) {
      var s0 = vec4<f16>();
      var s1 = vec4<f16>();
      var s2 = vec4<f16>();
      var s3 = vec4<f16>();
//#if T8
      var s4 = vec4<f16>();
      var s5 = vec4<f16>();
      var s6 = vec4<f16>();
      var s7 = vec4<f16>();
//#if SWIGLU
      var su4 = vec4<f16>();
      var su5 = vec4<f16>();
      var su6 = vec4<f16>();
      var su7 = vec4<f16>();
//#endif
//#endif
//#if SWIGLU
      var su0 = vec4<f16>();
      var su1 = vec4<f16>();
      var su2 = vec4<f16>();
      var su3 = vec4<f16>();
//#endif
      for (var k = cc * 32u; k < cc * 32u + 32u; k++) {
        let b = wh[k * 16u + tx];
//#if SWIGLU
        let bu = wh2[k * 16u + tx];
//#endif
        let a = xh[k * (TM / 4u) + ty];
        s0 = fma(vec4<f16>(a.x), b, s0);
        s1 = fma(vec4<f16>(a.y), b, s1);
        s2 = fma(vec4<f16>(a.z), b, s2);
        s3 = fma(vec4<f16>(a.w), b, s3);
//#if SWIGLU
        su0 = fma(vec4<f16>(a.x), bu, su0);
        su1 = fma(vec4<f16>(a.y), bu, su1);
        su2 = fma(vec4<f16>(a.z), bu, su2);
        su3 = fma(vec4<f16>(a.w), bu, su3);
//#endif
//#if T8
        let a2 = xh[k * (TM / 4u) + 16u + ty];
        s4 = fma(vec4<f16>(a2.x), b, s4);
        s5 = fma(vec4<f16>(a2.y), b, s5);
        s6 = fma(vec4<f16>(a2.z), b, s6);
        s7 = fma(vec4<f16>(a2.w), b, s7);
//#if SWIGLU
        su4 = fma(vec4<f16>(a2.x), bu, su4);
        su5 = fma(vec4<f16>(a2.y), bu, su5);
        su6 = fma(vec4<f16>(a2.z), bu, su6);
        su7 = fma(vec4<f16>(a2.w), bu, su7);
//#endif
//#endif
      }
      acc0 += vec4<f32>(s0);
      acc1 += vec4<f32>(s1);
      acc2 += vec4<f32>(s2);
      acc3 += vec4<f32>(s3);
//#if SWIGLU
      accu0 += vec4<f32>(su0);
      accu1 += vec4<f32>(su1);
      accu2 += vec4<f32>(su2);
      accu3 += vec4<f32>(su3);
//#endif
//#if T8
      acc4 += vec4<f32>(s4);
      acc5 += vec4<f32>(s5);
      acc6 += vec4<f32>(s6);
      acc7 += vec4<f32>(s7);
//#if SWIGLU
      accu4 += vec4<f32>(su4);
      accu5 += vec4<f32>(su5);
      accu6 += vec4<f32>(su6);
      accu7 += vec4<f32>(su7);
//#endif
//#endif
    }
    workgroupBarrier();
  }
//#else
// Tiled GEMM (prompt processing, encoders): a workgroup computes a 64-token x 64-row tile over
// chunks of 32 values of K. Per chunk every thread decodes weights of one row, four at a time
// in registers (DQV), and stages activations, into workgroup memory laid out k-major; then each
// thread reads its 4 tokens and its 4 rows as one vec4 each per k and accumulates 4 x 4 outputs
// (f32: an FMA chain per output over the chunk, added to the output's running sum, as the
// row kernel does). 4 tokens a thread, 256 threads. Measured on the H200 and not kept: 8 tokens
// a thread with 128 threads, and reading the next chunk into registers before this chunk's
// products (docs/gpu-bench.md).
const TM = 64u;  // tokens per tile
const TN = 64u;  // weight rows per tile
var<workgroup> xs: array<vec4<f32>, 512>;  // [k][token / 4], 32 x 16
var<workgroup> ws: array<vec4<f32>, 512>;  // [k][row / 4]
//#if SWIGLU
var<workgroup> ws2: array<vec4<f32>, 512>;
//#endif

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let r0 = wid.x * TN;
  let t0 = wid.y * TM;
  let tx = li % 16u;  // rows 4 tx .. 4 tx + 3 of the tile
  let ty = li / 16u;  // tokens 4 ty .. 4 ty + 3
  // decoding: row dr of the tile, four-value groups 2 dq and 2 dq + 1 of each chunk
  let dr = li % TN;
  let dq = li / TN;
  let wrow = r0 + dr;
  // acc<i> (and s<i>): token 4 ty + i, rows 4 tx .. 4 tx + 3 in its lanes. Named vec4s, no
  // indexed arrays: a GPU compiler keeps these in registers.
  var acc0 = vec4<f32>(0.0);
  var acc1 = vec4<f32>(0.0);
  var acc2 = vec4<f32>(0.0);
  var acc3 = vec4<f32>(0.0);
//#if SWIGLU
  var accu0 = vec4<f32>(0.0);
  var accu1 = vec4<f32>(0.0);
  var accu2 = vec4<f32>(0.0);
  var accu3 = vec4<f32>(0.0);
//#endif
  let nch = (p.K + 31u) / 32u;
//#if SPLITK
  let cps = (nch + p.ksplit - 1u) / p.ksplit;
  let c_begin = wid.z * cps;
  let c_end = min(nch, c_begin + cps);
  zsplit = wid.z;
//#else
  let c_begin = 0u;
  let c_end = nch;
//#endif
  for (var c = c_begin; c < c_end; c++) {
    var wa = vec4<f32>(0.0);
    var wb = vec4<f32>(0.0);
//#if SWIGLU
    var ua = vec4<f32>(0.0);
    var ub = vec4<f32>(0.0);
//#endif
    if (wrow < p.nrows) {
      wa = DQV(wrow * p.rb, c, p.K, 2u * dq);
      wb = DQV(wrow * p.rb, c, p.K, 2u * dq + 1u);
//#if SWIGLU
      ua = DQV2(wrow * p.rb2, c, p.K, 2u * dq);
      ub = DQV2(wrow * p.rb2, c, p.K, 2u * dq + 1u);
//#endif
    }
    let k8 = 8u * dq;
    for (var i = 0u; i < 4u; i++) {
      ws[(k8 + i) * 16u + dr / 4u][dr % 4u] = wa[i];
      ws[(k8 + 4u + i) * 16u + dr / 4u][dr % 4u] = wb[i];
//#if SWIGLU
      ws2[(k8 + i) * 16u + dr / 4u][dr % 4u] = ua[i];
      ws2[(k8 + 4u + i) * 16u + dr / 4u][dr % 4u] = ub[i];
//#endif
    }
    // activations: token e % 64, value e / 64 of the chunk
    for (var e = li; e < TM * 32u; e += 256u) {
      let tt = e % TM;
      let k = c * 32u + e / TM;
      var v = 0.0;
      if (t0 + tt < p.T && k < p.K) {
        v = X[p.x_off + (t0 + tt) * p.K + k];
      }
      xs[(e / TM) * 16u + tt / 4u][tt % 4u] = v;
    }
    workgroupBarrier();
    // this chunk's sums, added to acc after it (two-level summation)
    var s0 = vec4<f32>(0.0);
    var s1 = vec4<f32>(0.0);
    var s2 = vec4<f32>(0.0);
    var s3 = vec4<f32>(0.0);
//#if SWIGLU
    var su0 = vec4<f32>(0.0);
    var su1 = vec4<f32>(0.0);
    var su2 = vec4<f32>(0.0);
    var su3 = vec4<f32>(0.0);
//#endif
    for (var k = 0u; k < 32u; k++) {
      let b = ws[k * 16u + tx];
//#if SWIGLU
      let bu = ws2[k * 16u + tx];
//#endif
      let a = xs[k * 16u + ty];
      s0 = fma(vec4<f32>(a.x), b, s0);
      s1 = fma(vec4<f32>(a.y), b, s1);
      s2 = fma(vec4<f32>(a.z), b, s2);
      s3 = fma(vec4<f32>(a.w), b, s3);
//#if SWIGLU
      su0 = fma(vec4<f32>(a.x), bu, su0);
      su1 = fma(vec4<f32>(a.y), bu, su1);
      su2 = fma(vec4<f32>(a.z), bu, su2);
      su3 = fma(vec4<f32>(a.w), bu, su3);
//#endif
    }
    acc0 += s0;
    acc1 += s1;
    acc2 += s2;
    acc3 += s3;
//#if SWIGLU
    accu0 += su0;
    accu1 += su1;
    accu2 += su2;
    accu3 += su3;
//#endif
    workgroupBarrier();
  }
//#endif
  let tb = t0 + 4u * ty;
  store_row(tb + 0u, r0 + 4u * tx, acc0
//#if SWIGLU
            , accu0
//#endif
  );
  store_row(tb + 1u, r0 + 4u * tx, acc1
//#if SWIGLU
            , accu1
//#endif
  );
  store_row(tb + 2u, r0 + 4u * tx, acc2
//#if SWIGLU
            , accu2
//#endif
  );
  store_row(tb + 3u, r0 + 4u * tx, acc3
//#if SWIGLU
            , accu3
//#endif
  );
//#if H16
//#if T8
  store_row(tb + 64u, r0 + 4u * tx, acc4
//#if SWIGLU
            , accu4
//#endif
  );
  store_row(tb + 65u, r0 + 4u * tx, acc5
//#if SWIGLU
            , accu5
//#endif
  );
  store_row(tb + 66u, r0 + 4u * tx, acc6
//#if SWIGLU
            , accu6
//#endif
  );
  store_row(tb + 67u, r0 + 4u * tx, acc7
//#if SWIGLU
            , accu7
//#endif
  );
//#endif
//#endif
}

//#if SPLITK
var<private> zsplit: u32;
//#endif
// Token t's outputs for rows r .. r + 3.
fn store_row(t: u32, r: u32, v: vec4<f32>
//#if SWIGLU
             , u: vec4<f32>
//#endif
) {
  for (var j = 0u; j < 4u; j++) {
    let rj = r + j;
    if (t < p.T && rj < p.nrows) {
      var o = v[j];
//#if SPLITK
      Y[(zsplit * p.T + t) * p.nrows + rj] = o;
//#else
//#if BIAS
      o += B[p.row0 + rj];
//#endif
      o = epi(o, t, p.row0 + rj);
//#if SWIGLU
      o = o / (1.0 + exp(-o)) * u[j];
//#endif
      Y[p.y_off + t * p.ldy + p.row0 + rj] = o;
//#endif
    }
  }
}
//#else
// y[t, row0 + r] = sum_k x[t, k] * W[r, k] (+ bias), for the rows of one weight chunk.
// Two rows per workgroup, 32 lanes per row, each lane a 32-element chunk at a time;
// up to 8 tokens per workgroup (grid z covers the rest). f32 accumulation.

const TT = 8u;
var<workgroup> red: array<f32, 512>;
//#if SWIGLU
var<workgroup> red2: array<f32, 512>;
//#endif

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let wg = wid.x + wid.y * p.nx;
  let lr = li / 32u;
  let lane = li % 32u;
  let r = wg * 2u + lr;
  let t0 = wid.z * TT;
  var acc: array<f32, 8>;
//#if SWIGLU
  var acc2: array<f32, 8>;
//#endif
  if (r < p.nrows) {
    let rb = r * p.rb;
    let nch = (p.K + 31u) / 32u;
    let nt = min(TT, p.T - t0);
    for (var c = lane; c < nch; c += 32u) {
      var w: array<f32, 32>;
      DEQ(rb, c, p.K, &w);
//#if SWIGLU
      var w2: array<f32, 32>;
      DEQ2(r * p.rb2, c, p.K, &w2);
//#endif
      let lim = min(32u, p.K - c * 32u);
      for (var tt = 0u; tt < nt; tt++) {
        let xb = p.x_off + (t0 + tt) * p.K + c * 32u;
        var s = 0.0;
//#if SWIGLU
        var s2 = 0.0;
//#endif
        for (var i = 0u; i < lim; i++) {
          let xv = X[xb + i];
          s = fma(w[i], xv, s);
//#if SWIGLU
          s2 = fma(w2[i], xv, s2);
//#endif
        }
        acc[tt] += s;
//#if SWIGLU
        acc2[tt] += s2;
//#endif
      }
    }
  }
  for (var tt = 0u; tt < TT; tt++) {
    red[tt * 64u + li] = acc[tt];
//#if SWIGLU
    red2[tt * 64u + li] = acc2[tt];
//#endif
  }
  workgroupBarrier();
  for (var s = 16u; s > 0u; s >>= 1u) {
    if (lane < s) {
      for (var tt = 0u; tt < TT; tt++) {
        red[tt * 64u + li] += red[tt * 64u + li + s];
//#if SWIGLU
        red2[tt * 64u + li] += red2[tt * 64u + li + s];
//#endif
      }
    }
    workgroupBarrier();
  }
  if (lane < TT && r < p.nrows && t0 + lane < p.T) {
    var v = red[lane * 64u + lr * 32u];
//#if BIAS
    v += B[p.row0 + r];
//#endif
    v = epi(v, t0 + lane, p.row0 + r);
//#if SWIGLU
    let u = red2[lane * 64u + lr * 32u];
    v = v / (1.0 + exp(-v)) * u;
//#endif
    Y[p.y_off + (t0 + lane) * p.ldy + p.row0 + r] = v;
  }
}
//#endif
//#endif
