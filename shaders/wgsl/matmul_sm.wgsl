// Subgroup-matrix GEMM: the tiled GEMM of matmul.wgsl (TILED) with its products on the tensor cores,
// for webgpu:dawn where the device has chromium-experimental-subgroup-matrix with 16 x 16 x 16
// f16 x f16 -> f32 matrices and subgroups of 32 lanes (wgpu_ops_matmul.cc says when it runs: fast
// mode, tiled token counts; CYB_WGPU_SM=0 turns it off). The module starts with `enable f16;
// enable chromium_experimental_subgroup_matrix;` (wgpu_pipeline.cc). Same parameters, bindings,
// grid (64 rows x TM tokens a workgroup, grid z = parts of K) and outputs as TILED: bias, the
// epilogues (GELU, GELU_TANH, ADD), SWIGLU's silu(gate) * up, SPLITK's raw parts.
// A workgroup is 4 subgroups of 32 lanes, 2 x 2 over the tile; each computes TM / 2 tokens x 32 rows
// as (TM / 32) x 2 result matrices of 16 x 16, f32 sums. Per chunk of 32 values of K, all 128
// threads stage the tile's activations (f32 rounded to f16, clamped to the f16 range: the
// precision of fast mode's f16 GEMM, matmul.wgsl H16, without its per-token scaling) and its
// decoded weights (DQV, rounded to f16) in workgroup memory, rows of LDS halves; each subgroup
// then loads its left matrices (activations, row-major) and right matrices (a weight row is a
// column of W^T: column-major) from there, two steps of 16. This is the probe's
// sm-staged-128x64-4sg kernel (bench/dawn_probe.py, docs/gpu-bench.md) with the weights decoded
// while staging. Results pass through a 16 x 16 f32 scratch a subgroup to the per-output epilogue.
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

const LDS = 40u;  // halves a staged row: 32 values of K and 8 against bank conflicts
const TN = 64u;   // weight rows a tile
//#if SM_T128
const TM = 128u;  // tokens a tile
var<workgroup> As: array<f16, 5120>;  // [token][LDS]
//#else
const TM = 64u;
var<workgroup> As: array<f16, 2560>;
//#endif
var<workgroup> Ws: array<f16, 2560>;  // [row][LDS]
var<workgroup> Cs: array<f32, 1024>;  // [subgroup][16 x 16]: a result matrix on its way out
//#if SWIGLU
var<workgroup> Ws2: array<f16, 2560>;
var<workgroup> Cs2: array<f32, 1024>;
//#endif
//#if SPLITK
var<private> zsplit: u32;
//#endif

fn h(v: f32) -> f16 { return f16(clamp(v, -65504.0, 65504.0)); }

// Stages chunk c: activations (token e / 32, value e % 32: a subgroup reads 32 consecutive values of
// one token) and the weight rows (two threads a row, 16 values each).
fn stage(c: u32, t0: u32, r0: u32, li: u32) {
  for (var i = 0u; i < TM / 4u; i++) {
    let e = li + 128u * i;
    let tt = e / 32u;
    let k = c * 32u + e % 32u;
    var v = 0.0;
    if (t0 + tt < p.T && k < p.K) { v = X[p.x_off + (t0 + tt) * p.K + k]; }
    As[tt * LDS + e % 32u] = h(v);
  }
  let dr = li / 2u;
  let q0 = (li % 2u) * 4u;
  let wrow = r0 + dr;
  for (var q = q0; q < q0 + 4u; q++) {
    var w = vec4<f32>(0.0);
//#if SWIGLU
    var w2 = vec4<f32>(0.0);
//#endif
    if (wrow < p.nrows) {
      w = DQV(wrow * p.rb, c, p.K, q);
//#if SWIGLU
      w2 = DQV2(wrow * p.rb2, c, p.K, q);
//#endif
    }
    let o = dr * LDS + 4u * q;
    Ws[o] = h(w.x);
    Ws[o + 1u] = h(w.y);
    Ws[o + 2u] = h(w.z);
    Ws[o + 3u] = h(w.w);
//#if SWIGLU
    Ws2[o] = h(w2.x);
    Ws2[o + 1u] = h(w2.y);
    Ws2[o + 2u] = h(w2.z);
    Ws2[o + 3u] = h(w2.w);
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

// Token t's output for row rj of the chunk (gate sum v, up sum u), as matmul.wgsl stores it.
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

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let r0 = wid.x * TN;
  let t0 = wid.y * TM;
  let sgi = li / 32u;  // the subgroup (lanes of a subgroup are consecutive invocations)
  let lane = li % 32u;
  let am = (sgi / 2u) * (TM / 2u);  // its tokens in the tile
  let bn = (sgi % 2u) * 32u;        // its rows in the tile
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
  for (var c = c_begin; c < c_end; c++) {
    workgroupBarrier();
    stage(c, t0, r0, li);
    workgroupBarrier();
    for (var kk = 0u; kk < 32u; kk += 16u) {
      let a0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&As, am * LDS + kk, LDS);
      let a1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&As, (am + 16u) * LDS + kk, LDS);
      let b0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&Ws, bn * LDS + kk, LDS);
      let b1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&Ws, (bn + 16u) * LDS + kk, LDS);
      c00 = subgroupMatrixMultiplyAccumulate(a0, b0, c00);
      c01 = subgroupMatrixMultiplyAccumulate(a0, b1, c01);
      c10 = subgroupMatrixMultiplyAccumulate(a1, b0, c10);
      c11 = subgroupMatrixMultiplyAccumulate(a1, b1, c11);
//#if SM_T128
      let a2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&As, (am + 32u) * LDS + kk, LDS);
      let a3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&As, (am + 48u) * LDS + kk, LDS);
      c20 = subgroupMatrixMultiplyAccumulate(a2, b0, c20);
      c21 = subgroupMatrixMultiplyAccumulate(a2, b1, c21);
      c30 = subgroupMatrixMultiplyAccumulate(a3, b0, c30);
      c31 = subgroupMatrixMultiplyAccumulate(a3, b1, c31);
//#endif
//#if SWIGLU
      let d0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&Ws2, bn * LDS + kk, LDS);
      let d1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&Ws2, (bn + 16u) * LDS + kk, LDS);
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
