// Matrix products y[t, row0 + r] = sum_k x[t, k] * W[r, k] (+ bias) for the rows of one weight
// chunk, any weight encoding (DEQ, DQV). Two kernels share the parameters and bindings: the row
// kernel (few tokens) and, with the define TILED, the tiled GEMM (many tokens).
// Variant SWIGLU: two weights (gate, up), y = silu(x Wg) * (x Wu). Epilogues (fused_matmul_gelu,
// fused_matmul_add): GELU / GELU_TANH y = gelu(x W + b), ADD y = x W + b + R (R laid out as y).
// Split K (TILED SPLITK, for grids of few tiles): grid z = p.ksplit parts of K, each tile's raw
// sums into part z of Y (laid out [z][t][row]; SWIGLU: the up projection's parts after the
// gate's, [p.ksplit + z][t][row]); then the SPLITK_SUM kernel adds the parts (X bound to them)
// in order, the bias and the epilogue (SWIGLU: silu(gate) * up), into y.
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
//#if SWIGLU
  var uu = 0.0;  // the up projection's parts follow the gate's
//#endif
  for (var z = 0u; z < p.ksplit; z++) {
    o += X[(z * p.T + t) * p.nrows + r];
//#if SWIGLU
    uu += X[((p.ksplit + z) * p.T + t) * p.nrows + r];
//#endif
  }
//#if BIAS
  o += B[p.row0 + r];
//#endif
  o = epi(o, t, p.row0 + r);
//#if SWIGLU
  o = silu(o) * uu;
//#endif
  Y[p.y_off + t * p.ldy + p.row0 + r] = o;
}
//#else
//#if TILED
//#if H16
// The tiled GEMM in f16 (H16: fast mode, block-quantized weights, an adapter with shader-f16;
// wgpu_backend.cc). 64-token x 64-row tiles over stages of 64 values of K (two chunks), 256
// threads. Staged k-contiguous: activations [token][k], weights [row][k] (rows of 64 values
// padded by 4 against bank conflicts), so that a warp's global reads are 4 tokens' or 8 rows'
// consecutive values. Weights: decoded in f32 (DQV), rounded to f16. Activations: each token's
// 64 values of a stage scaled by a power of two that puts their largest magnitude in [1, 2)
// (exact; f16's range would not hold a model's activations), then rounded to f16. A thread's
// outputs: tokens ty + 16 i, rows tx + 16 j; products along k in pairs, as vec4<f16> FMAs (two
// packed pairs: twice the f32 rate): s<i>a holds rows tx, tx + 16 and s<i>b rows tx + 32,
// tx + 48 of token i, each as two f16 sums (the even and the odd values of k); after each chunk
// of 32 the sums are added in f32 and unscaled into acc<i>, so no f16 sum runs over more than
// 16 products.
const TM = 64u;
const TN = 64u;
const SC = 2u;
const RS = 17u;  // vec4<f16> per staged row: 64 values and one more
var<workgroup> xh: array<vec4<f16>, 1088>;  // [token][k / 4]
var<workgroup> xmx: array<atomic<u32>, 64>;  // per token: the bits of the stage's largest |x|
var<workgroup> xun: array<f32, 64>;          // per token: the stage's unscaling factor
var<workgroup> wh: array<vec4<f16>, 1088>;  // [row][k / 4]
//#if SWIGLU
var<workgroup> wh2: array<vec4<f16>, 1088>;
//#endif

// Activations x[t, k .. k + 3] (0 past kend or past the tokens).
fn ld4(t: u32, k: u32, kend: u32) -> vec4<f32> {
  var v = vec4<f32>(0.0);
  if (t < p.T) {
    let b = p.x_off + t * p.K + k;
    if (k < kend) { v.x = X[b]; }
    if (k + 1u < kend) { v.y = X[b + 1u]; }
    if (k + 2u < kend) { v.z = X[b + 2u]; }
    if (k + 3u < kend) { v.w = X[b + 3u]; }
  }
  return v;
}
fn vmax(a: vec4<f32>, b: vec4<f32>) -> u32 {
  let m = max(abs(a), abs(b));
  return bitcast<u32>(max(max(m.x, m.y), max(m.z, m.w)));
}
// The biased f32 exponent of the largest |x| (its bits m), kept where 2^(127 - e) is a normal f32.
fn xexp(m: u32) -> u32 { return clamp((m >> 23u) & 0xffu, 1u, 253u); }

fn dsum(a: vec4<f16>, b: vec4<f16>) -> vec4<f32> {
  let fa = vec4<f32>(a);
  let fb = vec4<f32>(b);
  return vec4<f32>(fa.x + fa.y, fa.z + fa.w, fb.x + fb.y, fb.z + fb.w);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let r0 = wid.x * TN;
  let t0 = wid.y * TM;
  let tx = li % 16u;
  let ty = li / 16u;
  let dq = li % 4u;   // decoding: four-value groups 2 dq, 2 dq + 1 of each chunk of row dr
  let dr = li / 4u;
  let wrow = r0 + dr;
  // acc<i>: token ty + 16 i, rows tx, tx + 16, tx + 32, tx + 48
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
  // staging activations: values 8 xp .. 8 xp + 7 of the stage of tokens xt and xt + 32
  let xt = li / 8u;
  let xp = li % 8u;
  if (li < 64u) { atomicStore(&xmx[li], 0u); }
  workgroupBarrier();
  for (var c = c_begin; c < c_end; c += SC) {
    let kend = min(p.K, c_end * 32u);
    let kx = c * 32u + 8u * xp;
    let xa0 = ld4(t0 + xt, kx, kend);
    let xa1 = ld4(t0 + xt, kx + 4u, kend);
    let xb0 = ld4(t0 + xt + 32u, kx, kend);
    let xb1 = ld4(t0 + xt + 32u, kx + 4u, kend);
    atomicMax(&xmx[xt], vmax(xa0, xa1));
    atomicMax(&xmx[xt + 32u], vmax(xb0, xb1));
    //#unroll
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
      let at = dr * RS + cc * 8u + 2u * dq;
      wh[at] = vec4<f16>(wa);
      wh[at + 1u] = vec4<f16>(wb);
//#if SWIGLU
      wh2[at] = vec4<f16>(ua);
      wh2[at + 1u] = vec4<f16>(ub);
//#endif
    }
    workgroupBarrier();
    let ea = xexp(atomicLoad(&xmx[xt]));
    let eb = xexp(atomicLoad(&xmx[xt + 32u]));
    let sa = bitcast<f32>((254u - ea) << 23u);  // 2^(127 - e): the largest |x| to [1, 2)
    let sb = bitcast<f32>((254u - eb) << 23u);
    xh[xt * RS + 2u * xp] = vec4<f16>(xa0 * sa);
    xh[xt * RS + 2u * xp + 1u] = vec4<f16>(xa1 * sa);
    xh[(xt + 32u) * RS + 2u * xp] = vec4<f16>(xb0 * sb);
    xh[(xt + 32u) * RS + 2u * xp + 1u] = vec4<f16>(xb1 * sb);
    if (xp == 0u) {
      xun[xt] = bitcast<f32>(ea << 23u);  // 2^(e - 127)
      xun[xt + 32u] = bitcast<f32>(eb << 23u);
    }
    workgroupBarrier();
    if (li < 64u) { atomicStore(&xmx[li], 0u); }  // for the next stage (read above, before the barrier)
    //#unroll
    for (var cc = 0u; cc < SC; cc++) {
      var s0a = vec4<f16>();
      var s0b = vec4<f16>();
      var s1a = vec4<f16>();
      var s1b = vec4<f16>();
      var s2a = vec4<f16>();
      var s2b = vec4<f16>();
      var s3a = vec4<f16>();
      var s3b = vec4<f16>();
//#if SWIGLU
      var u0a = vec4<f16>();
      var u0b = vec4<f16>();
      var u1a = vec4<f16>();
      var u1b = vec4<f16>();
      var u2a = vec4<f16>();
      var u2b = vec4<f16>();
      var u3a = vec4<f16>();
      var u3b = vec4<f16>();
//#endif
      //#unroll
      for (var kk = 0u; kk < 8u; kk++) {
        let kq = cc * 8u + kk;
        let b0 = wh[tx * RS + kq];
        let b1 = wh[(tx + 16u) * RS + kq];
        let b2 = wh[(tx + 32u) * RS + kq];
        let b3 = wh[(tx + 48u) * RS + kq];
        let a0 = xh[ty * RS + kq];
        let a1 = xh[(ty + 16u) * RS + kq];
        let a2 = xh[(ty + 32u) * RS + kq];
        let a3 = xh[(ty + 48u) * RS + kq];
        let bl = vec4<f16>(b0.xy, b1.xy);
        let bh = vec4<f16>(b0.zw, b1.zw);
        let cl = vec4<f16>(b2.xy, b3.xy);
        let ch = vec4<f16>(b2.zw, b3.zw);
        s0a = fma(a0.xyxy, bl, s0a);
        s0a = fma(a0.zwzw, bh, s0a);
        s0b = fma(a0.xyxy, cl, s0b);
        s0b = fma(a0.zwzw, ch, s0b);
        s1a = fma(a1.xyxy, bl, s1a);
        s1a = fma(a1.zwzw, bh, s1a);
        s1b = fma(a1.xyxy, cl, s1b);
        s1b = fma(a1.zwzw, ch, s1b);
        s2a = fma(a2.xyxy, bl, s2a);
        s2a = fma(a2.zwzw, bh, s2a);
        s2b = fma(a2.xyxy, cl, s2b);
        s2b = fma(a2.zwzw, ch, s2b);
        s3a = fma(a3.xyxy, bl, s3a);
        s3a = fma(a3.zwzw, bh, s3a);
        s3b = fma(a3.xyxy, cl, s3b);
        s3b = fma(a3.zwzw, ch, s3b);
//#if SWIGLU
        let v0 = wh2[tx * RS + kq];
        let v1 = wh2[(tx + 16u) * RS + kq];
        let v2 = wh2[(tx + 32u) * RS + kq];
        let v3 = wh2[(tx + 48u) * RS + kq];
        let vl = vec4<f16>(v0.xy, v1.xy);
        let vh = vec4<f16>(v0.zw, v1.zw);
        let wl = vec4<f16>(v2.xy, v3.xy);
        let wq = vec4<f16>(v2.zw, v3.zw);
        u0a = fma(a0.xyxy, vl, u0a);
        u0a = fma(a0.zwzw, vh, u0a);
        u0b = fma(a0.xyxy, wl, u0b);
        u0b = fma(a0.zwzw, wq, u0b);
        u1a = fma(a1.xyxy, vl, u1a);
        u1a = fma(a1.zwzw, vh, u1a);
        u1b = fma(a1.xyxy, wl, u1b);
        u1b = fma(a1.zwzw, wq, u1b);
        u2a = fma(a2.xyxy, vl, u2a);
        u2a = fma(a2.zwzw, vh, u2a);
        u2b = fma(a2.xyxy, wl, u2b);
        u2b = fma(a2.zwzw, wq, u2b);
        u3a = fma(a3.xyxy, vl, u3a);
        u3a = fma(a3.zwzw, vh, u3a);
        u3b = fma(a3.xyxy, wl, u3b);
        u3b = fma(a3.zwzw, wq, u3b);
//#endif
      }
      let x0 = vec4<f32>(xun[ty]);
      let x1 = vec4<f32>(xun[ty + 16u]);
      let x2 = vec4<f32>(xun[ty + 32u]);
      let x3 = vec4<f32>(xun[ty + 48u]);
      acc0 = fma(dsum(s0a, s0b), x0, acc0);
      acc1 = fma(dsum(s1a, s1b), x1, acc1);
      acc2 = fma(dsum(s2a, s2b), x2, acc2);
      acc3 = fma(dsum(s3a, s3b), x3, acc3);
//#if SWIGLU
      accu0 = fma(dsum(u0a, u0b), x0, accu0);
      accu1 = fma(dsum(u1a, u1b), x1, accu1);
      accu2 = fma(dsum(u2a, u2b), x2, accu2);
      accu3 = fma(dsum(u3a, u3b), x3, accu3);
//#endif
    }
    workgroupBarrier();
  }
  for (var j = 0u; j < 4u; j++) {
    let r = r0 + tx + 16u * j;
    store_one(t0 + ty, r, acc0[j]
//#if SWIGLU
              , accu0[j]
//#endif
    );
    store_one(t0 + ty + 16u, r, acc1[j]
//#if SWIGLU
              , accu1[j]
//#endif
    );
    store_one(t0 + ty + 32u, r, acc2[j]
//#if SWIGLU
              , accu2[j]
//#endif
    );
    store_one(t0 + ty + 48u, r, acc3[j]
//#if SWIGLU
              , accu3[j]
//#endif
    );
  }
}
//#else
// Tiled GEMM (prompt processing, encoders): a workgroup computes a 64-token x 64-row tile over
// chunks of 32 values of K. Per chunk four threads share a weight row, each decoding two groups
// of four values in registers (DQV), and all threads stage activations, into workgroup memory
// laid out k-major; the global reads are arranged so that a warp's read touches few sectors (a
// warp decodes 8 rows, and reads 8 consecutive values of 4 tokens): on the H200 that made the
// prompt 17-43% faster than lanes = rows / tokens (docs/gpu-bench.md). Then each thread reads its
// 4 tokens and its 4 rows as one vec4 each per k and accumulates 4 x 4 outputs (f32: an FMA chain
// per output over the chunk, added to the output's running sum, as the row kernel does). 4 tokens
// a thread, 256 threads. Variant T128: 128-token tiles, 8 tokens a thread (tokens 4 ty .. 4 ty + 3
// and 64 + 4 ty .. 64 + 4 ty + 3), each staged weight value used by twice the tokens; every output
// summed exactly as in a 64-token tile (wgpu_backend.cc gemm_tile_tokens says where it runs). The
// next chunk's activations are read into registers before this chunk's products. Measured on the
// H200 and not kept: 8 tokens a thread with 128 threads, 8 x 8 outputs a thread (before the product
// loop was written out), two chunks a stage, the next chunk's Q4_K weight words read ahead the same
// way, and a double-buffered stage (docs/gpu-bench.md).
//#if T128
const TM = 128u;  // tokens per tile (T128: 8 a thread)
const XS = 33u;   // vec4 a staged value of K for the tokens: 32 and one against bank conflicts
var<workgroup> xs: array<vec4<f32>, 1056>;  // [k][token / 4], 32 x 33
//#else
const TM = 64u;  // tokens per tile
const XS = 17u;  // vec4 a staged value of K for the tokens: 16 and one against bank conflicts
var<workgroup> xs: array<vec4<f32>, 544>;  // [k][token / 4], 32 x 17
//#endif
const TN = 64u;  // weight rows per tile
const WS = 17u;  // vec4 a staged value of K for the rows
var<workgroup> ws: array<vec4<f32>, 544>;  // [k][row / 4]
//#if SWIGLU
var<workgroup> ws2: array<vec4<f32>, 544>;
//#endif

// Activation i (0..7) of this thread for chunk c, 0 outside X: entry e = li + 256 i is value
// 8 (e / 512) + e % 8 of the chunk for token (e / 8) % 64, so a warp reads 8 consecutive values of
// 4 tokens (the stores, with XS, hit 32 different banks).
fn xload(c: u32, t0: u32, li: u32, i: u32) -> f32 {
  let e = li + 256u * i;
  let tt = (e / 8u) % TM;
  let k = c * 32u + 8u * (e / (8u * TM)) + e % 8u;
  if (t0 + tt < p.T && k < p.K) { return X[p.x_off + (t0 + tt) * p.K + k]; }
  return 0.0;
}
fn xstore(li: u32, i: u32, v: f32) {
  let e = li + 256u * i;
  let tt = (e / 8u) % TM;
  xs[(8u * (e / (8u * TM)) + e % 8u) * XS + tt / 4u][tt % 4u] = v;
}
// Activations i0 .. i0 + 3 of this thread for chunk c (xload), and their stores.
fn xload4(c: u32, t0: u32, li: u32, i0: u32) -> vec4<f32> {
  return vec4<f32>(xload(c, t0, li, i0), xload(c, t0, li, i0 + 1u), xload(c, t0, li, i0 + 2u),
                   xload(c, t0, li, i0 + 3u));
}
fn xstore4(li: u32, i0: u32, v: vec4<f32>) {
  //#unroll
  for (var j = 0u; j < 4u; j++) {
    xstore(li, i0 + j, v[j]);
  }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let r0 = wid.x * TN;
  let t0 = wid.y * TM;
  let tx = li % 16u;  // rows 4 tx .. 4 tx + 3 of the tile
  let ty = li / 16u;  // tokens 4 ty .. 4 ty + 3 (T128: and 64 + 4 ty .. 64 + 4 ty + 3)
  // decoding: row dr of the tile, four-value groups dq and dq + 4 of each chunk (four threads a
  // row: a warp's weight reads touch 8 rows, not 32)
  let dr = li / 4u;
  let dq = li % 4u;
  let wrow = r0 + dr;
  // acc<i> (and s<i>): token 4 ty + i (T128: acc<4 + i> token 64 + 4 ty + i), rows 4 tx ..
  // 4 tx + 3 in its lanes. Named vec4s, no indexed arrays: a GPU compiler keeps these in registers.
  var acc0 = vec4<f32>(0.0);
  var acc1 = vec4<f32>(0.0);
  var acc2 = vec4<f32>(0.0);
  var acc3 = vec4<f32>(0.0);
//#if T128
  var acc4 = vec4<f32>(0.0);
  var acc5 = vec4<f32>(0.0);
  var acc6 = vec4<f32>(0.0);
  var acc7 = vec4<f32>(0.0);
//#endif
//#if SWIGLU
  var accu0 = vec4<f32>(0.0);
  var accu1 = vec4<f32>(0.0);
  var accu2 = vec4<f32>(0.0);
  var accu3 = vec4<f32>(0.0);
//#if T128
  var accu4 = vec4<f32>(0.0);
  var accu5 = vec4<f32>(0.0);
  var accu6 = vec4<f32>(0.0);
  var accu7 = vec4<f32>(0.0);
//#endif
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
  // this thread's 8 activations of chunk c, read one chunk ahead: those of c + 1 are read from X
  // while chunk c's products run (xload gives 0 past K, so a part without chunks reads nothing)
  var xa = xload4(c_begin, t0, li, 0u);
  var xb = xload4(c_begin, t0, li, 4u);
//#if T128
  var xc = xload4(c_begin, t0, li, 8u);
  var xd = xload4(c_begin, t0, li, 12u);
//#endif
  for (var c = c_begin; c < c_end; c++) {
    var wa = vec4<f32>(0.0);
    var wb = vec4<f32>(0.0);
//#if SWIGLU
    var ua = vec4<f32>(0.0);
    var ub = vec4<f32>(0.0);
//#endif
    if (wrow < p.nrows) {
      wa = DQV(wrow * p.rb, c, p.K, dq);
      wb = DQV(wrow * p.rb, c, p.K, dq + 4u);
//#if SWIGLU
      ua = DQV2(wrow * p.rb2, c, p.K, dq);
      ub = DQV2(wrow * p.rb2, c, p.K, dq + 4u);
//#endif
    }
    let k4 = 4u * dq;
    //#unroll
    for (var i = 0u; i < 4u; i++) {
      ws[(k4 + i) * WS + dr / 4u][dr % 4u] = wa[i];
      ws[(k4 + 16u + i) * WS + dr / 4u][dr % 4u] = wb[i];
//#if SWIGLU
      ws2[(k4 + i) * WS + dr / 4u][dr % 4u] = ua[i];
      ws2[(k4 + 16u + i) * WS + dr / 4u][dr % 4u] = ub[i];
//#endif
    }
    xstore4(li, 0u, xa);
    xstore4(li, 4u, xb);
//#if T128
    xstore4(li, 8u, xc);
    xstore4(li, 12u, xd);
//#endif
    workgroupBarrier();
    // the next chunk's activations, read before this chunk's products (on the H200 the prompt
    // 7-10% faster than reading them when staging; the weights' reads the same way gained nothing more)
    if (c + 1u < c_end) {
      xa = xload4(c + 1u, t0, li, 0u);
      xb = xload4(c + 1u, t0, li, 4u);
//#if T128
      xc = xload4(c + 1u, t0, li, 8u);
      xd = xload4(c + 1u, t0, li, 12u);
//#endif
    }
    // this chunk's sums, added to acc after it (two-level summation)
    var s0 = vec4<f32>(0.0);
    var s1 = vec4<f32>(0.0);
    var s2 = vec4<f32>(0.0);
    var s3 = vec4<f32>(0.0);
//#if T128
    var s4 = vec4<f32>(0.0);
    var s5 = vec4<f32>(0.0);
    var s6 = vec4<f32>(0.0);
    var s7 = vec4<f32>(0.0);
//#endif
//#if SWIGLU
    var su0 = vec4<f32>(0.0);
    var su1 = vec4<f32>(0.0);
    var su2 = vec4<f32>(0.0);
    var su3 = vec4<f32>(0.0);
//#if T128
    var su4 = vec4<f32>(0.0);
    var su5 = vec4<f32>(0.0);
    var su6 = vec4<f32>(0.0);
    var su7 = vec4<f32>(0.0);
//#endif
//#endif
    // written out by the shader preprocessor (//#unroll; the H200 does not unroll it itself)
    //#unroll
    for (var k = 0u; k < 32u; k++) {
      let b = ws[k * WS + tx];
//#if SWIGLU
      let bu = ws2[k * WS + tx];
//#endif
      let a = xs[k * XS + ty];
      s0 = fma(vec4<f32>(a.x), b, s0);
      s1 = fma(vec4<f32>(a.y), b, s1);
      s2 = fma(vec4<f32>(a.z), b, s2);
      s3 = fma(vec4<f32>(a.w), b, s3);
//#if T128
      let a2 = xs[k * XS + ty + 16u];
      s4 = fma(vec4<f32>(a2.x), b, s4);
      s5 = fma(vec4<f32>(a2.y), b, s5);
      s6 = fma(vec4<f32>(a2.z), b, s6);
      s7 = fma(vec4<f32>(a2.w), b, s7);
//#endif
//#if SWIGLU
      su0 = fma(vec4<f32>(a.x), bu, su0);
      su1 = fma(vec4<f32>(a.y), bu, su1);
      su2 = fma(vec4<f32>(a.z), bu, su2);
      su3 = fma(vec4<f32>(a.w), bu, su3);
//#if T128
      su4 = fma(vec4<f32>(a2.x), bu, su4);
      su5 = fma(vec4<f32>(a2.y), bu, su5);
      su6 = fma(vec4<f32>(a2.z), bu, su6);
      su7 = fma(vec4<f32>(a2.w), bu, su7);
//#endif
//#endif
    }
    acc0 += s0;
    acc1 += s1;
    acc2 += s2;
    acc3 += s3;
//#if T128
    acc4 += s4;
    acc5 += s5;
    acc6 += s6;
    acc7 += s7;
//#endif
//#if SWIGLU
    accu0 += su0;
    accu1 += su1;
    accu2 += su2;
    accu3 += su3;
//#if T128
    accu4 += su4;
    accu5 += su5;
    accu6 += su6;
    accu7 += su7;
//#endif
//#endif
    workgroupBarrier();
  }
  let tb = t0 + 4u * ty;
  store_tokens4(tb, r0 + 4u * tx, acc0, acc1, acc2, acc3
//#if SWIGLU
                , accu0, accu1, accu2, accu3
//#endif
  );
//#if T128
  store_tokens4(tb + 64u, r0 + 4u * tx, acc4, acc5, acc6, acc7
//#if SWIGLU
                , accu4, accu5, accu6, accu7
//#endif
  );
//#endif
}

// Tokens t .. t + 3's outputs for rows r .. r + 3 (a<i>: token t + i; SWIGLU: u<i>, its up sums).
fn store_tokens4(t: u32, r: u32, a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>
//#if SWIGLU
                 , u0: vec4<f32>, u1: vec4<f32>, u2: vec4<f32>, u3: vec4<f32>
//#endif
) {
  store_row(t, r, a0
//#if SWIGLU
            , u0
//#endif
  );
  store_row(t + 1u, r, a1
//#if SWIGLU
            , u1
//#endif
  );
  store_row(t + 2u, r, a2
//#if SWIGLU
            , u2
//#endif
  );
  store_row(t + 3u, r, a3
//#if SWIGLU
            , u3
//#endif
  );
}

//#endif
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
    store_one(t, r + j, v[j]
//#if SWIGLU
              , u[j]
//#endif
    );
  }
}
// Token t's output for row rj (gate sum o, up sum u).
fn store_one(t: u32, rj: u32, v: f32
//#if SWIGLU
             , u: f32
//#endif
) {
  if (t < p.T && rj < p.nrows) {
    var o = v;
//#if SPLITK
    Y[(zsplit * p.T + t) * p.nrows + rj] = o;
//#if SWIGLU
    Y[((p.ksplit + zsplit) * p.T + t) * p.nrows + rj] = u;
//#endif
//#else
//#if BIAS
    o += B[p.row0 + rj];
//#endif
    o = epi(o, t, p.row0 + rj);
//#if SWIGLU
    o = silu(o) * u;
//#endif
    Y[p.y_off + t * p.ldy + p.row0 + rj] = o;
//#endif
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
    v = silu(v) * u;
//#endif
    Y[p.y_off + (t0 + lane) * p.ldy + p.row0 + r] = v;
  }
}
//#endif
//#endif
