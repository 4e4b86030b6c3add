// LayerNorm over rows of D: y = (x - mean) / sqrt(var + eps) * w (+ b with BIAS),
// mean and variance in two passes. Variant INPLACE: y aliases x.
struct P { D: u32, R: u32, eps: f32, pad: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> NW: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
//#if !INPLACE
@group(0) @binding(3) var<storage, read> X: array<f32>;
//#endif
//#if BIAS
@group(0) @binding(4) var<storage, read> NB: array<f32>;
//#endif

var<workgroup> red: array<f32, 256>;

fn xin(i: u32) -> f32 {
//#if INPLACE
  return Y[i];
//#else
  return X[i];
//#endif
}

// Sum of v over the workgroup (every invocation gets it).
fn wg_sum(v: f32, li: u32) -> f32 {
  red[li] = v;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s >>= 1u) {
    if (li < s) { red[li] += red[li + s]; }
    workgroupBarrier();
  }
  let r = red[0];
  workgroupBarrier();
  return r;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let row = wid.x + wid.y * 65535u;
  if (row >= p.R) { return; }
  let base = row * p.D;
  var s = 0.0;
  for (var i = li; i < p.D; i += 256u) { s += xin(base + i); }
  let mean = wg_sum(s, li) / f32(p.D);
  var q = 0.0;
  for (var i = li; i < p.D; i += 256u) {
    let d = xin(base + i) - mean;
    q = fma(d, d, q);
  }
  let rs = 1.0 / sqrt(wg_sum(q, li) / f32(p.D) + p.eps);
  for (var i = li; i < p.D; i += 256u) {
    var v = (xin(base + i) - mean) * rs * NW[i];
//#if BIAS
    v += NB[i];
//#endif
    Y[base + i] = v;
  }
}
