// Matrix products y[t, row0 + r] = sum_k x[t, k] * W[r, k] (+ bias) for the rows of one weight
// chunk, any weight encoding (DEQ). Two kernels share the parameters and bindings: the row
// kernel (few tokens) and, with the define TILED, the tiled GEMM (many tokens).
// Variant SWIGLU: two weights (gate, up), y = silu(x Wg) * (x Wu). Epilogues (fused_matmul_gelu,
// fused_matmul_add): GELU / GELU_TANH y = gelu(x W + b), ADD y = x W + b + R (R laid out as y).
struct P {
  K: u32, T: u32, rb: u32, x_off: u32,
  y_off: u32, ldy: u32, row0: u32, nrows: u32,
  nx: u32, has_bias: u32, rb2: u32, r_off: u32,
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
//#if TILED
// Tiled GEMM (prompt processing, encoders): a workgroup computes a 64-token x 64-row
// tile. Per 32-element chunk of K, 64 threads decode one weight row chunk each (DEQ)
// into workgroup memory while all threads stage the 64 x 32 activations; then each
// thread accumulates 4 tokens x 4 rows in registers (f32: an FMA chain per output over
// the chunk, added to the output's running sum, as the row kernel does).

const TM = 64u;  // tokens per tile
const TN = 64u;  // weight rows per tile
const LD = 33u;  // padded stride of the staged chunks
var<workgroup> xs: array<f32, 2112>;  // TM * LD
var<workgroup> ws: array<f32, 2112>;  // TN * LD
//#if SWIGLU
var<workgroup> ws2: array<f32, 2112>;
//#endif

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let r0 = wid.x * TN;
  let t0 = wid.y * TM;
  let tx = li % 16u;  // rows tx, tx + 16, tx + 32, tx + 48 of the tile
  let ty = li / 16u;  // tokens ty, ty + 16, ...
  // acc[i] (and s[i]): token ty + 16 i, rows tx + 16 j in lane j. Named vec4s, no
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
  for (var c = 0u; c < nch; c++) {
    if (li < TN) {
      var w = array<f32, 32>();
      let r = r0 + li;
      if (r < p.nrows) {
        DEQ(r * p.rb, c, p.K, &w);
      }
      for (var i = 0u; i < 32u; i++) {
        ws[li * LD + i] = w[i];
      }
    }
//#if SWIGLU
    if (li >= TN && li < 2u * TN) {
      var w2 = array<f32, 32>();
      let r = r0 + li - TN;
      if (r < p.nrows) {
        DEQ2(r * p.rb2, c, p.K, &w2);
      }
      for (var i = 0u; i < 32u; i++) {
        ws2[(li - TN) * LD + i] = w2[i];
      }
    }
//#endif
    for (var e = li; e < TM * 32u; e += 256u) {
      let tt = e / 32u;
      let k = c * 32u + e % 32u;
      var v = 0.0;
      if (t0 + tt < p.T && k < p.K) {
        v = X[p.x_off + (t0 + tt) * p.K + k];
      }
      xs[tt * LD + e % 32u] = v;
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
      let b = vec4<f32>(ws[tx * LD + k], ws[(tx + 16u) * LD + k], ws[(tx + 32u) * LD + k], ws[(tx + 48u) * LD + k]);
      let a0 = xs[ty * LD + k];
      let a1 = xs[(ty + 16u) * LD + k];
      let a2 = xs[(ty + 32u) * LD + k];
      let a3 = xs[(ty + 48u) * LD + k];
      s0 = fma(vec4<f32>(a0), b, s0);
      s1 = fma(vec4<f32>(a1), b, s1);
      s2 = fma(vec4<f32>(a2), b, s2);
      s3 = fma(vec4<f32>(a3), b, s3);
//#if SWIGLU
      let bu = vec4<f32>(ws2[tx * LD + k], ws2[(tx + 16u) * LD + k], ws2[(tx + 32u) * LD + k],
                         ws2[(tx + 48u) * LD + k]);
      su0 = fma(vec4<f32>(a0), bu, su0);
      su1 = fma(vec4<f32>(a1), bu, su1);
      su2 = fma(vec4<f32>(a2), bu, su2);
      su3 = fma(vec4<f32>(a3), bu, su3);
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
  store_row(t0 + ty, r0 + tx, acc0
//#if SWIGLU
            , accu0
//#endif
  );
  store_row(t0 + ty + 16u, r0 + tx, acc1
//#if SWIGLU
            , accu1
//#endif
  );
  store_row(t0 + ty + 32u, r0 + tx, acc2
//#if SWIGLU
            , accu2
//#endif
  );
  store_row(t0 + ty + 48u, r0 + tx, acc3
//#if SWIGLU
            , accu3
//#endif
  );
}

// Token t's outputs for rows r, r + 16, r + 32, r + 48.
fn store_row(t: u32, r: u32, v: vec4<f32>
//#if SWIGLU
             , u: vec4<f32>
//#endif
) {
  for (var j = 0u; j < 4u; j++) {
    let rj = r + 16u * j;
    if (t < p.T && rj < p.nrows) {
      var o = v[j];
//#if BIAS
      o += B[p.row0 + rj];
//#endif
      o = epi(o, t, p.row0 + rj);
//#if SWIGLU
      o = o / (1.0 + exp(-o)) * u[j];
//#endif
      Y[p.y_off + t * p.ldy + p.row0 + rj] = o;
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
