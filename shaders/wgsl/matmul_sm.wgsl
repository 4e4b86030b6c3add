// Subgroup-matrix GEMM: the tiled GEMM of matmul.wgsl (TILED) with its products on the tensor cores,
// for webgpu:dawn where the device has chromium-experimental-subgroup-matrix with 16 x 16 x 16
// f16 x f16 -> f32 matrices and subgroups of 32 lanes (wgpu_ops_matmul.cc says when it runs: fast
// mode, tiled token counts; off unless CYB_WGPU_SM=1 or f16). The module starts with `enable f16;
// enable chromium_experimental_subgroup_matrix;` (wgpu_pipeline.cc). Same parameters, bindings,
// grid (64 rows x TM tokens a workgroup, grid z = parts of K) and outputs as TILED: bias, the
// epilogues (GELU, GELU_TANH, ADD), SWIGLU's silu(gate) * up, SPLITK's raw parts.
// Precision: every input as two f16 values, hi + lo (22 significant bits of the f32 value), and
// each product as hi * hi + hi * lo + lo * hi, summed in f32 by the tensor cores: the results of
// the f32 tiled GEMM within a few units of f32 rounding (op-f32), not f16's 11 bits. Activations
// first pass through SM_PREP (a dispatch of its own, one workgroup a token): each token's row
// scaled by the power of two that puts its largest |x| in [1, 2) (exact; f16's range would not
// hold a model's activations), split into hi and lo planes of f16 rows of S values (zeros past K
// and past the tokens, to a whole number of 128-token tiles), and the unscaling factor XU[t],
// applied to each output. Weights are decoded (DQV) and split while staging.
// SM_F16 (CYB_WGPU_SM=f16): plain f16 operands instead, one product a pair (hi alone, rounded to
// nearest; no lo planes): f16 inputs, f32 sums, as a tensor-core GEMM of f16 data computes them
// (the activations still scaled per token, so f16's range and subnormals do not cost precision),
// and the activations staged through workgroup memory (As) like the weights, as the probe's
// sm-staged kernels do, instead of loaded straight from the plane.
// A workgroup is 4 subgroups of 32 lanes, 2 x 2 over the tile; each computes TM / 2 tokens x 32 rows
// as (TM / 32) x 2 result matrices of 16 x 16, f32 sums. Per chunk of 32 values of K, all 128
// threads stage the tile's decoded weights (hi and lo) in workgroup memory, rows of LDS halves,
// the next chunk's weights read and decoded into registers while this chunk's products run;
// each subgroup loads its left matrices (activations, row-major) straight from the SM_PREP planes
// (storage: no staging, no conversion in this kernel; read one step of 16 ahead) and its right matrices (a weight row is a
// column of W^T: column-major) from workgroup memory, two steps of 16. The tile design is the
// probe's sm-staged-128x64-4sg kernel (bench/dawn_probe.py, docs/gpu-bench.md). Results pass
// through a 16 x 16 f32 scratch a subgroup to the per-output epilogue.
struct P {
  K: u32, T: u32, rb: u32, x_off: u32,
  y_off: u32, ldy: u32, row0: u32, nrows: u32,
  nx: u32, has_bias: u32, rb2: u32, r_off: u32,
  ksplit: u32, xs: u32, xlo: u32, pad2: u32,  // xs: S, halves a prepared row; xlo: the lo plane's start
}
@group(0) @binding(0) var<uniform> p: P;
//#if SM_PREP
// One workgroup a prepared row t (grid x, rows of 65535 workgroups in y): X's row t (p.x_off) to
// XH[t S ..] (hi) and XH[xlo + t S ..] (lo), XU[t] = 2^(e - 127) where 2^(127 - e) scaled it.
@group(0) @binding(2) var<storage, read> X: array<f32>;
@group(0) @binding(3) var<storage, read_write> XH: array<f16>;
@group(0) @binding(7) var<storage, read_write> XU: array<f32>;
var<workgroup> red: array<f32, 256>;

// v truncated to 11 significant bits (f16's), by its bits: exact in f16 where f16 is normal, and
// v - hi11(v) exact in f32. (Not f32(f16(v)): the driver may fold that round trip to v, and lo to 0.)
fn hi11(v: f32) -> f32 { return bitcast<f32>(bitcast<u32>(v) & 0xffffe000u); }

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let t = wid.x + wid.y * 65535u;
  if (t * p.xs >= p.xlo) { return; }  // past the prepared rows (the grid's last row of workgroups)
  let live = t < p.T;
  var m = 0.0;
  if (live) {
    for (var k = li; k < p.K; k += 256u) { m = max(m, abs(X[p.x_off + t * p.K + k])); }
  }
  red[li] = m;
  workgroupBarrier();
  for (var w = 128u; w > 0u; w = w / 2u) {
    if (li < w) { red[li] = max(red[li], red[li + w]); }
    workgroupBarrier();
  }
  // the biased exponent of the largest |x|, kept where 2^(127 - e) is a normal f32 (as matmul.wgsl H16)
  let e = clamp((bitcast<u32>(red[0]) >> 23u) & 0xffu, 1u, 253u);
  let sc = bitcast<f32>((254u - e) << 23u);
  for (var k = li; k < p.xs; k += 256u) {
    var v = 0.0;
    if (live && k < p.K) { v = X[p.x_off + t * p.K + k] * sc; }
//#if SM_F16
    XH[t * p.xs + k] = f16(v);
//#else
    let vh = hi11(v);
    XH[t * p.xs + k] = f16(vh);
    XH[p.xlo + t * p.xs + k] = f16(v - vh);
//#endif
  }
  if (li == 0u) { XU[t] = bitcast<f32>(e << 23u); }
}
//#else
@group(0) @binding(1) var<storage, read> W: array<u32>;
//#if SM_F16
@group(0) @binding(2) var<storage, read> XQ: array<vec4<u32>>;  // SM_PREP's plane, 8 halves a word
//#else
@group(0) @binding(2) var<storage, read> XH: array<f16>;  // SM_PREP's planes
//#endif
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
@group(0) @binding(7) var<storage, read> XU: array<f32>;  // SM_PREP's unscaling factors
//#include epilogue

const LDS = 40u;  // halves a staged row: 32 values of K and 8 against bank conflicts
const TN = 64u;   // weight rows a tile
//#if SM_T128
const TM = 128u;  // tokens a tile
const ASZ = 5120u;  // SM_F16's staged activations: TM rows of LDS halves
//#else
const TM = 64u;
const ASZ = 2560u;
//#endif
//#if SM_F16
var<workgroup> As: array<f16, ASZ>;
// the next chunk's activations in registers: TM rows x 4 words of 8 halves, over 128 threads
var<private> pa: array<vec4<u32>, 4>;

fn fetch_a(c: u32, t0: u32, li: u32) {
  for (var i = 0u; i < TM / 32u; i++) {
    let e = li + 128u * i;
    pa[i] = XQ[((t0 + e / 4u) * p.xs + c * 32u) / 8u + e % 4u];
  }
}

fn put_a(li: u32) {
  for (var i = 0u; i < TM / 32u; i++) {
    let e = li + 128u * i;
    let o = (e / 4u) * LDS + (e % 4u) * 8u;
    let q = pa[i];
    for (var j = 0u; j < 4u; j++) {
      let h = bitcast<vec2<f16>>(q[j]);
      As[o + 2u * j] = h.x;
      As[o + 2u * j + 1u] = h.y;
    }
  }
}
//#endif
var<workgroup> Ws: array<f16, 2560>;  // [row][LDS]: hi
//#if !SM_F16
var<workgroup> Wl: array<f16, 2560>;  // lo
//#endif
var<workgroup> Cs: array<f32, 1024>;  // [subgroup][16 x 16]: a result matrix on its way out
//#if SWIGLU
var<workgroup> Ws2: array<f16, 2560>;
//#if !SM_F16
var<workgroup> Wl2: array<f16, 2560>;
//#endif
var<workgroup> Cs2: array<f32, 1024>;
//#endif
//#if SPLITK
var<private> zsplit: u32;
//#endif

// w's 11 leading significant bits (by its bits, as SM_PREP's hi11; clamped to f16's range) and the rest.
fn hi11v(w: vec4<f32>) -> vec4<f32> {
  return clamp(bitcast<vec4<f32>>(bitcast<vec4<u32>>(w) & vec4<u32>(0xffffe000u)), vec4<f32>(-65504.0),
               vec4<f32>(65504.0));
}

// The next chunk's decoded weights, held in registers while this chunk's products run: the two
// threads of a weight row hold 16 values each (quads q0 .. q0 + 3 of the chunk).
var<private> pw: array<vec4<f32>, 4>;
//#if SWIGLU
var<private> pu: array<vec4<f32>, 4>;
//#endif

// Reads and decodes chunk c of this thread's weight row (zeros past the rows).
fn fetch(c: u32, r0: u32, li: u32) {
  let wrow = r0 + li / 2u;
  let q0 = (li % 2u) * 4u;
  for (var i = 0u; i < 4u; i++) {
    var w = vec4<f32>(0.0);
//#if SWIGLU
    var w2 = vec4<f32>(0.0);
//#endif
    if (wrow < p.nrows) {
      w = DQV(wrow * p.rb, c, p.K, q0 + i);
//#if SWIGLU
      w2 = DQV2(wrow * p.rb2, c, p.K, q0 + i);
//#endif
    }
    pw[i] = w;
//#if SWIGLU
    pu[i] = w2;
//#endif
  }
}

fn lo16(w: vec4<f32>, wh: vec4<f32>) -> vec4<f16> {
  return vec4<f16>(clamp(w - wh, vec4<f32>(-65504.0), vec4<f32>(65504.0)));
}

// SM_F16: w rounded to the nearest f16 (clamped to its range).
fn f16r(w: vec4<f32>) -> vec4<f16> { return vec4<f16>(clamp(w, vec4<f32>(-65504.0), vec4<f32>(65504.0))); }

// Stages the fetched chunk: hi and lo of each value, rows of LDS halves.
fn put(li: u32) {
  let base = (li / 2u) * LDS + (li % 2u) * 16u;
  for (var i = 0u; i < 4u; i++) {
    let o = base + 4u * i;
    let w = pw[i];
//#if SM_F16
    let wh = f16r(w);
//#else
    let wf = hi11v(w);
    let wh = vec4<f16>(wf);
    let wl = lo16(w, wf);
    Wl[o] = wl.x;
    Wl[o + 1u] = wl.y;
    Wl[o + 2u] = wl.z;
    Wl[o + 3u] = wl.w;
//#endif
    Ws[o] = wh.x;
    Ws[o + 1u] = wh.y;
    Ws[o + 2u] = wh.z;
    Ws[o + 3u] = wh.w;
//#if SWIGLU
    let w2 = pu[i];
//#if SM_F16
    let uh = f16r(w2);
//#else
    let uf = hi11v(w2);
    let uh = vec4<f16>(uf);
    let ul = lo16(w2, uf);
    Wl2[o] = ul.x;
    Wl2[o + 1u] = ul.y;
    Wl2[o + 2u] = ul.z;
    Wl2[o + 3u] = ul.w;
//#endif
    Ws2[o] = uh.x;
    Ws2[o + 1u] = uh.y;
    Ws2[o + 2u] = uh.z;
    Ws2[o + 3u] = uh.w;
//#endif
  }
}

// The outputs of the result matrix this subgroup (sgi) left in Cs (and Cs2): tokens t .. t + 15,
// rows r .. r + 15 (of the chunk), 8 a lane.
fn emit(sgi: u32, lane: u32, t: u32, r: u32) {
  for (var i = 0u; i < 8u; i++) {
    let e = lane + 32u * i;
    store_one(t + e / 16u, r + e % 16u, Cs[sgi * 256u + e]
//#if SWIGLU
              , Cs2[sgi * 256u + e]
//#endif
    );
  }
}

// Token t's output for row rj of the chunk (gate sum v, up sum u, in the token's scaled units), as
// matmul.wgsl stores it.
fn store_one(t: u32, rj: u32, vs: f32
//#if SWIGLU
             , us: f32
//#endif
) {
  if (t < p.T && rj < p.nrows) {
    let un = XU[t];
    var o = vs * un;
//#if SWIGLU
    let u = us * un;
//#endif
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

alias AM = subgroup_matrix_left<f16, 16, 16>;
alias BM = subgroup_matrix_right<f16, 16, 16>;

//#if !SM_F16
// Left matrix: tokens t .. t + 15 of the prepared plane at base, values k .. k + 15.
fn lda(base: u32, t: u32, k: u32) -> AM {
  return subgroupMatrixLoad<AM, row_major>(&XH, base + t * p.xs + k, p.xs);
}
//#endif

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let r0 = wid.x * TN;
  let t0 = wid.y * TM;
  let sgi = li / 32u;  // the subgroup (lanes of a subgroup are consecutive invocations)
  let lane = li % 32u;
  let am = (sgi / 2u) * (TM / 2u);  // its tokens in the tile
  let bn = (sgi % 2u) * 32u;        // its rows in the tile
  let ta = t0 + am;
  var c00 = subgroup_matrix_result<f32, 16, 16>();
  var c01 = subgroup_matrix_result<f32, 16, 16>();
  var c10 = subgroup_matrix_result<f32, 16, 16>();
  var c11 = subgroup_matrix_result<f32, 16, 16>();
//#if SM_T128
  var c20 = subgroup_matrix_result<f32, 16, 16>();
  var c21 = subgroup_matrix_result<f32, 16, 16>();
  var c30 = subgroup_matrix_result<f32, 16, 16>();
  var c31 = subgroup_matrix_result<f32, 16, 16>();
//#endif
//#if SWIGLU
  var u00 = subgroup_matrix_result<f32, 16, 16>();
  var u01 = subgroup_matrix_result<f32, 16, 16>();
  var u10 = subgroup_matrix_result<f32, 16, 16>();
  var u11 = subgroup_matrix_result<f32, 16, 16>();
//#if SM_T128
  var u20 = subgroup_matrix_result<f32, 16, 16>();
  var u21 = subgroup_matrix_result<f32, 16, 16>();
  var u30 = subgroup_matrix_result<f32, 16, 16>();
  var u31 = subgroup_matrix_result<f32, 16, 16>();
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
//#if SM_F16
  // Activations staged like the weights: per chunk all 128 threads copy the tile's TM prepared
  // rows (32 halves each, 16-byte loads) into As; the next chunk's read into registers during
  // the products. Every subgroup loads its left matrices from As.
  if (c_begin < c_end) {
    fetch(c_begin, r0, li);
    fetch_a(c_begin, t0, li);
  }
  for (var c = c_begin; c < c_end; c++) {
    workgroupBarrier();  // the last chunk's products have read Ws and As
    put(li);
    put_a(li);
    workgroupBarrier();
    if (c + 1u < c_end) {
      fetch(c + 1u, r0, li);
      fetch_a(c + 1u, t0, li);
    }
    for (var kk = 0u; kk < 32u; kk += 16u) {
      let a0 = subgroupMatrixLoad<AM, row_major>(&As, am * LDS + kk, LDS);
      let a1 = subgroupMatrixLoad<AM, row_major>(&As, (am + 16u) * LDS + kk, LDS);
      let b0 = subgroupMatrixLoad<BM, col_major>(&Ws, bn * LDS + kk, LDS);
      let b1 = subgroupMatrixLoad<BM, col_major>(&Ws, (bn + 16u) * LDS + kk, LDS);
      c00 = subgroupMatrixMultiplyAccumulate(a0, b0, c00);
      c01 = subgroupMatrixMultiplyAccumulate(a0, b1, c01);
      c10 = subgroupMatrixMultiplyAccumulate(a1, b0, c10);
      c11 = subgroupMatrixMultiplyAccumulate(a1, b1, c11);
//#if SM_T128
      let a2 = subgroupMatrixLoad<AM, row_major>(&As, (am + 32u) * LDS + kk, LDS);
      let a3 = subgroupMatrixLoad<AM, row_major>(&As, (am + 48u) * LDS + kk, LDS);
      c20 = subgroupMatrixMultiplyAccumulate(a2, b0, c20);
      c21 = subgroupMatrixMultiplyAccumulate(a2, b1, c21);
      c30 = subgroupMatrixMultiplyAccumulate(a3, b0, c30);
      c31 = subgroupMatrixMultiplyAccumulate(a3, b1, c31);
//#endif
//#if SWIGLU
      let d0 = subgroupMatrixLoad<BM, col_major>(&Ws2, bn * LDS + kk, LDS);
      let d1 = subgroupMatrixLoad<BM, col_major>(&Ws2, (bn + 16u) * LDS + kk, LDS);
      u00 = subgroupMatrixMultiplyAccumulate(a0, d0, u00);
      u01 = subgroupMatrixMultiplyAccumulate(a0, d1, u01);
      u10 = subgroupMatrixMultiplyAccumulate(a1, d0, u10);
      u11 = subgroupMatrixMultiplyAccumulate(a1, d1, u11);
//#if SM_T128
      u20 = subgroupMatrixMultiplyAccumulate(a2, d0, u20);
      u21 = subgroupMatrixMultiplyAccumulate(a2, d1, u21);
      u30 = subgroupMatrixMultiplyAccumulate(a3, d0, u30);
      u31 = subgroupMatrixMultiplyAccumulate(a3, d1, u31);
//#endif
//#endif
    }
  }
//#else
  if (c_begin < c_end) { fetch(c_begin, r0, li); }
  let k0 = min(c_begin * 32u, p.xs - 16u);
  var n0 = lda(0u, ta, k0);
  var n1 = lda(0u, ta + 16u, k0);
  var m0 = lda(p.xlo, ta, k0);
  var m1 = lda(p.xlo, ta + 16u, k0);
//#if SM_T128
  var n2 = lda(0u, ta + 32u, k0);
  var n3 = lda(0u, ta + 48u, k0);
  var m2 = lda(p.xlo, ta + 32u, k0);
  var m3 = lda(p.xlo, ta + 48u, k0);
//#endif
  for (var c = c_begin; c < c_end; c++) {
    workgroupBarrier();  // the last chunk's products have read Ws
    put(li);
    workgroupBarrier();
    if (c + 1u < c_end) { fetch(c + 1u, r0, li); }  // its reads in flight during the products
    for (var kk = 0u; kk < 32u; kk += 16u) {
      // this step's activations (read one step ahead), and the next step's reads issued now
      let kn = min(c * 32u + kk + 16u, p.xs - 16u);
      let a0 = n0;
      let a1 = n1;
      let l0 = m0;
      let l1 = m1;
      n0 = lda(0u, ta, kn);
      n1 = lda(0u, ta + 16u, kn);
      m0 = lda(p.xlo, ta, kn);
      m1 = lda(p.xlo, ta + 16u, kn);
      let b0 = subgroupMatrixLoad<BM, col_major>(&Ws, bn * LDS + kk, LDS);
      let b1 = subgroupMatrixLoad<BM, col_major>(&Ws, (bn + 16u) * LDS + kk, LDS);
      let e0 = subgroupMatrixLoad<BM, col_major>(&Wl, bn * LDS + kk, LDS);
      let e1 = subgroupMatrixLoad<BM, col_major>(&Wl, (bn + 16u) * LDS + kk, LDS);
      // the small terms first: hi * lo and lo * hi, then hi * hi
      c00 = subgroupMatrixMultiplyAccumulate(a0, e0, c00);
      c00 = subgroupMatrixMultiplyAccumulate(l0, b0, c00);
      c00 = subgroupMatrixMultiplyAccumulate(a0, b0, c00);
      c01 = subgroupMatrixMultiplyAccumulate(a0, e1, c01);
      c01 = subgroupMatrixMultiplyAccumulate(l0, b1, c01);
      c01 = subgroupMatrixMultiplyAccumulate(a0, b1, c01);
      c10 = subgroupMatrixMultiplyAccumulate(a1, e0, c10);
      c10 = subgroupMatrixMultiplyAccumulate(l1, b0, c10);
      c10 = subgroupMatrixMultiplyAccumulate(a1, b0, c10);
      c11 = subgroupMatrixMultiplyAccumulate(a1, e1, c11);
      c11 = subgroupMatrixMultiplyAccumulate(l1, b1, c11);
      c11 = subgroupMatrixMultiplyAccumulate(a1, b1, c11);
//#if SM_T128
      let a2 = n2;
      let a3 = n3;
      let l2 = m2;
      let l3 = m3;
      n2 = lda(0u, ta + 32u, kn);
      n3 = lda(0u, ta + 48u, kn);
      m2 = lda(p.xlo, ta + 32u, kn);
      m3 = lda(p.xlo, ta + 48u, kn);
      c20 = subgroupMatrixMultiplyAccumulate(a2, e0, c20);
      c20 = subgroupMatrixMultiplyAccumulate(l2, b0, c20);
      c20 = subgroupMatrixMultiplyAccumulate(a2, b0, c20);
      c21 = subgroupMatrixMultiplyAccumulate(a2, e1, c21);
      c21 = subgroupMatrixMultiplyAccumulate(l2, b1, c21);
      c21 = subgroupMatrixMultiplyAccumulate(a2, b1, c21);
      c30 = subgroupMatrixMultiplyAccumulate(a3, e0, c30);
      c30 = subgroupMatrixMultiplyAccumulate(l3, b0, c30);
      c30 = subgroupMatrixMultiplyAccumulate(a3, b0, c30);
      c31 = subgroupMatrixMultiplyAccumulate(a3, e1, c31);
      c31 = subgroupMatrixMultiplyAccumulate(l3, b1, c31);
      c31 = subgroupMatrixMultiplyAccumulate(a3, b1, c31);
//#endif
//#if SWIGLU
      let d0 = subgroupMatrixLoad<BM, col_major>(&Ws2, bn * LDS + kk, LDS);
      let d1 = subgroupMatrixLoad<BM, col_major>(&Ws2, (bn + 16u) * LDS + kk, LDS);
      let f0 = subgroupMatrixLoad<BM, col_major>(&Wl2, bn * LDS + kk, LDS);
      let f1 = subgroupMatrixLoad<BM, col_major>(&Wl2, (bn + 16u) * LDS + kk, LDS);
      u00 = subgroupMatrixMultiplyAccumulate(a0, f0, u00);
      u00 = subgroupMatrixMultiplyAccumulate(l0, d0, u00);
      u00 = subgroupMatrixMultiplyAccumulate(a0, d0, u00);
      u01 = subgroupMatrixMultiplyAccumulate(a0, f1, u01);
      u01 = subgroupMatrixMultiplyAccumulate(l0, d1, u01);
      u01 = subgroupMatrixMultiplyAccumulate(a0, d1, u01);
      u10 = subgroupMatrixMultiplyAccumulate(a1, f0, u10);
      u10 = subgroupMatrixMultiplyAccumulate(l1, d0, u10);
      u10 = subgroupMatrixMultiplyAccumulate(a1, d0, u10);
      u11 = subgroupMatrixMultiplyAccumulate(a1, f1, u11);
      u11 = subgroupMatrixMultiplyAccumulate(l1, d1, u11);
      u11 = subgroupMatrixMultiplyAccumulate(a1, d1, u11);
//#if SM_T128
      u20 = subgroupMatrixMultiplyAccumulate(a2, f0, u20);
      u20 = subgroupMatrixMultiplyAccumulate(l2, d0, u20);
      u20 = subgroupMatrixMultiplyAccumulate(a2, d0, u20);
      u21 = subgroupMatrixMultiplyAccumulate(a2, f1, u21);
      u21 = subgroupMatrixMultiplyAccumulate(l2, d1, u21);
      u21 = subgroupMatrixMultiplyAccumulate(a2, d1, u21);
      u30 = subgroupMatrixMultiplyAccumulate(a3, f0, u30);
      u30 = subgroupMatrixMultiplyAccumulate(l3, d0, u30);
      u30 = subgroupMatrixMultiplyAccumulate(a3, d0, u30);
      u31 = subgroupMatrixMultiplyAccumulate(a3, f1, u31);
      u31 = subgroupMatrixMultiplyAccumulate(l3, d1, u31);
      u31 = subgroupMatrixMultiplyAccumulate(a3, d1, u31);
//#endif
//#endif
    }
  }
//#endif
  // Each result matrix through Cs (SwiGLU: its up sums through Cs2) to the epilogue.
  let o = sgi * 256u;
  let tb = t0 + am;
  let rb = r0 + bn;
  workgroupBarrier();
  subgroupMatrixStore<row_major>(&Cs, o, c00, 16u);
//#if SWIGLU
  subgroupMatrixStore<row_major>(&Cs2, o, u00, 16u);
//#endif
  workgroupBarrier();
  emit(sgi, lane, tb, rb);
  workgroupBarrier();
  subgroupMatrixStore<row_major>(&Cs, o, c01, 16u);
//#if SWIGLU
  subgroupMatrixStore<row_major>(&Cs2, o, u01, 16u);
//#endif
  workgroupBarrier();
  emit(sgi, lane, tb, rb + 16u);
  workgroupBarrier();
  subgroupMatrixStore<row_major>(&Cs, o, c10, 16u);
//#if SWIGLU
  subgroupMatrixStore<row_major>(&Cs2, o, u10, 16u);
//#endif
  workgroupBarrier();
  emit(sgi, lane, tb + 16u, rb);
  workgroupBarrier();
  subgroupMatrixStore<row_major>(&Cs, o, c11, 16u);
//#if SWIGLU
  subgroupMatrixStore<row_major>(&Cs2, o, u11, 16u);
//#endif
  workgroupBarrier();
  emit(sgi, lane, tb + 16u, rb + 16u);
//#if SM_T128
  workgroupBarrier();
  subgroupMatrixStore<row_major>(&Cs, o, c20, 16u);
//#if SWIGLU
  subgroupMatrixStore<row_major>(&Cs2, o, u20, 16u);
//#endif
  workgroupBarrier();
  emit(sgi, lane, tb + 32u, rb);
  workgroupBarrier();
  subgroupMatrixStore<row_major>(&Cs, o, c21, 16u);
//#if SWIGLU
  subgroupMatrixStore<row_major>(&Cs2, o, u21, 16u);
//#endif
  workgroupBarrier();
  emit(sgi, lane, tb + 32u, rb + 16u);
  workgroupBarrier();
  subgroupMatrixStore<row_major>(&Cs, o, c30, 16u);
//#if SWIGLU
  subgroupMatrixStore<row_major>(&Cs2, o, u30, 16u);
//#endif
  workgroupBarrier();
  emit(sgi, lane, tb + 48u, rb);
  workgroupBarrier();
  subgroupMatrixStore<row_major>(&Cs, o, c31, 16u);
//#if SWIGLU
  subgroupMatrixStore<row_major>(&Cs2, o, u31, 16u);
//#endif
  workgroupBarrier();
  emit(sgi, lane, tb + 48u, rb + 16u);
//#endif
}
//#endif
