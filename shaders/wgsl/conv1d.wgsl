// 1-D convolution (the conv1d op): x [B, C, L] (cf = 1) or [B, L, C], weight [O, C, k] (f32, or
// f16 with F16: two values a word, converted exactly),
// bias [O] (has_bias = 1). One invocation per output (row r = b * L_out + t, channel o):
// y[r, o] = bias[o] + sum_{c, j} W[o, c, j] * x[c, t * stride + j - pad] (0 outside [0, L)).
// Output rows are time-major: Y [B * L_out, O].
struct P {
  C: u32, L: u32, O: u32, k: u32,
  stride: u32, pad: u32, L_out: u32, cf: u32,
  R: u32, has_bias: u32, pad1: u32, pad2: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> X: array<f32>;
//#if F16
@group(0) @binding(2) var<storage, read> Wt: array<u32>;
//#include half
fn wv(i: u32) -> f32 { return f16_to_f32((Wt[i >> 1u] >> (16u * (i & 1u))) & 0xffffu); }
//#else
@group(0) @binding(2) var<storage, read> Wt: array<f32>;
fn wv(i: u32) -> f32 { return Wt[i]; }
//#endif
//#if BIAS
@group(0) @binding(3) var<storage, read> Bs: array<f32>;
//#endif
@group(0) @binding(4) var<storage, read_write> Y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  let o = gid.x;
  let r = wid.y;
  if (o >= p.O || r >= p.R) { return; }
  let b = r / p.L_out;
  let t = r % p.L_out;
  let xb = b * p.C * p.L;
  var acc = 0.0;
//#if BIAS
  acc = Bs[o];
//#endif
  for (var j = 0u; j < p.k; j += 1u) {
    let s = i32(t * p.stride + j) - i32(p.pad);
    if (s < 0 || s >= i32(p.L)) { continue; }
    let su = u32(s);
    for (var c = 0u; c < p.C; c += 1u) {
      var xv: f32;
      if (p.cf != 0u) { xv = X[xb + c * p.L + su]; } else { xv = X[xb + su * p.C + c]; }
      acc += xv * wv((o * p.C + c) * p.k + j);
    }
  }
  Y[r * p.O + o] = acc;
}
