// y[t, row0 + r] = sum_k x[t, k] * W[r, k] (+ bias), for the rows of one weight chunk.
// Two rows per workgroup, 32 lanes per row, each lane a 32-element chunk at a time;
// up to 8 tokens per workgroup (grid z covers the rest). f32 accumulation.
// Variant SWIGLU: two weights (gate, up), y = silu(x Wg) * (x Wu).
struct P {
  K: u32, T: u32, rb: u32, x_off: u32,
  y_off: u32, ldy: u32, row0: u32, nrows: u32,
  nx: u32, has_bias: u32, rb2: u32, pad1: u32,
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
//#if SWIGLU
    let u = red2[lane * 64u + lr * 32u];
    v = v / (1.0 + exp(-v)) * u;
//#endif
    Y[p.y_off + (t0 + lane) * p.ldy + p.row0 + r] = v;
  }
}
