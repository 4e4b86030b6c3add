// y[t, row0 + r] = sum_k x[t, k] * W[r, k] (+ bias) for many tokens (prompt
// processing, encoders): a workgroup computes a 64-token x 64-row tile. Per
// 32-element chunk of K, 64 threads decode one weight row chunk each (DEQ, any
// encoding) into workgroup memory while all threads stage the 64 x 32 activations;
// then each thread accumulates 4 tokens x 4 rows in registers (f32: an FMA chain
// per output over the chunk, added to the output's running sum, as matmul.wgsl). Variant SWIGLU: two weights (gate, up),
// y = silu(x Wg) * (x Wu). Same parameters as matmul.wgsl.
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
  var acc: array<f32, 16>;
//#if SWIGLU
  var acc2: array<f32, 16>;
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
    // this chunk's sums, added to acc after it (two-level summation); initialized
    // explicitly: declarations inside a loop are not re-zeroed by every compiler
    var s = array<f32, 16>();
//#if SWIGLU
    var s2 = array<f32, 16>();
//#endif
    for (var k = 0u; k < 32u; k++) {
      var a: array<f32, 4>;
      var b: array<f32, 4>;
//#if SWIGLU
      var b2: array<f32, 4>;
//#endif
      for (var i = 0u; i < 4u; i++) {
        a[i] = xs[(ty + 16u * i) * LD + k];
        b[i] = ws[(tx + 16u * i) * LD + k];
//#if SWIGLU
        b2[i] = ws2[(tx + 16u * i) * LD + k];
//#endif
      }
      for (var i = 0u; i < 4u; i++) {
        for (var j = 0u; j < 4u; j++) {
          s[i * 4u + j] = fma(a[i], b[j], s[i * 4u + j]);
//#if SWIGLU
          s2[i * 4u + j] = fma(a[i], b2[j], s2[i * 4u + j]);
//#endif
        }
      }
    }
    for (var i = 0u; i < 16u; i++) {
      acc[i] += s[i];
//#if SWIGLU
      acc2[i] += s2[i];
//#endif
    }
    workgroupBarrier();
  }
  for (var i = 0u; i < 4u; i++) {
    let t = t0 + ty + 16u * i;
    for (var j = 0u; j < 4u; j++) {
      let r = r0 + tx + 16u * j;
      if (t < p.T && r < p.nrows) {
        var v = acc[i * 4u + j];
//#if BIAS
        v += B[p.row0 + r];
//#endif
//#if SWIGLU
        let u = acc2[i * 4u + j];
        v = v / (1.0 + exp(-v)) * u;
//#endif
        Y[p.y_off + t * p.ldy + p.row0 + r] = v;
      }
    }
  }
}
