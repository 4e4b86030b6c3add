// RMSNorm over rows of D: y = x / sqrt(mean(x^2) + eps) * (plus_one ? 1 + w : w).
// Variant SKIP (FusedSkipNorm): s = x + res; S = s; y = norm(s).
// Variant L2 (L2Normalize): y = x / max(||x||_2, eps), no weight.
// Variant SOFTMAX (Softmax): y = exp(x - max x) / sum exp(x - max x), no weight (with L2's bindings).
// Variant INPLACE: y aliases x.
struct P { D: u32, R: u32, eps: f32, plus_one: u32 }
@group(0) @binding(0) var<uniform> p: P;
//#if !L2
@group(0) @binding(1) var<storage, read> NW: array<f32>;
//#endif
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
//#if !INPLACE
@group(0) @binding(3) var<storage, read> X: array<f32>;
//#endif
//#if SKIP
@group(0) @binding(4) var<storage, read> RES: array<f32>;
@group(0) @binding(5) var<storage, read_write> S: array<f32>;
//#endif

//#include wgreduce

fn xin(i: u32) -> f32 {
//#if INPLACE
  return Y[i];
//#else
//#if SKIP
  return X[i] + RES[i];
//#else
  return X[i];
//#endif
//#endif
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let row = wid.x + wid.y * 65535u;
  if (row >= p.R) { return; }
  let base = row * p.D;
//#if SOFTMAX
  var mx = bitcast<f32>(0xff7fffffu);  // the lowest finite f32 (masks fill with it: -3.4e38 is above it)
  for (var i = li; i < p.D; i += 256u) { mx = max(mx, xin(base + i)); }
  mx = wg_reduce(mx, li, true);
  var es = 0.0;
  for (var i = li; i < p.D; i += 256u) { es += exp(xin(base + i) - mx); }
  let inv = 1.0 / wg_reduce(es, li, false);
  for (var i = li; i < p.D; i += 256u) { Y[base + i] = exp(xin(base + i) - mx) * inv; }
//#else
  var ss = 0.0;
  for (var i = li; i < p.D; i += 256u) {
    let v = xin(base + i);
    ss = fma(v, v, ss);
  }
  ss = wg_reduce(ss, li, false);
//#if L2
  let n = max(sqrt(ss), p.eps);
  for (var i = li; i < p.D; i += 256u) {
    Y[base + i] = xin(base + i) / n;
  }
//#else
  let r = 1.0 / sqrt(ss / f32(p.D) + p.eps);
  for (var i = li; i < p.D; i += 256u) {
    let v = xin(base + i);
//#if SKIP
    S[base + i] = v;
//#endif
    var w = NW[i];
    if (p.plus_one != 0u) { w = 1.0 + w; }
    Y[base + i] = v * r * w;
  }
//#endif
//#endif
}
