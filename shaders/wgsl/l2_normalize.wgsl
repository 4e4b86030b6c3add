// L2 normalization over rows of D: y = x / max(||x||_2, eps). Variant INPLACE: y aliases x.
struct P { D: u32, R: u32, eps: f32, pad: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
//#if !INPLACE
@group(0) @binding(2) var<storage, read> X: array<f32>;
//#endif

var<workgroup> red: array<f32, 256>;

fn xin(i: u32) -> f32 {
//#if INPLACE
  return Y[i];
//#else
  return X[i];
//#endif
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let row = wid.x + wid.y * 65535u;
  if (row >= p.R) { return; }
  let base = row * p.D;
  var ss = 0.0;
  for (var i = li; i < p.D; i += 256u) {
    let v = xin(base + i);
    ss = fma(v, v, ss);
  }
  red[li] = ss;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s >>= 1u) {
    if (li < s) { red[li] += red[li + s]; }
    workgroupBarrier();
  }
  let n = max(sqrt(red[0]), p.eps);
  for (var i = li; i < p.D; i += 256u) {
    Y[base + i] = xin(base + i) / n;
  }
}
