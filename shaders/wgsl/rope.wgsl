// Rotary embedding at positions pos0 + t (neox: pairs (i, i + half); normal: (2i, 2i + 1)).
// Dims >= rot_dims are left as they are. Variant INPLACE: y aliases x. x_off / y_off: the
// views' offsets in floats (row views of a batch, one sequence at a time).
struct P { T: u32, nh: u32, hd: u32, half: u32, pos0: u32, neox: u32, x_off: u32, y_off: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> COS: array<f32>;
@group(0) @binding(2) var<storage, read> SIN: array<f32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;
//#if !INPLACE
@group(0) @binding(4) var<storage, read> X: array<f32>;
//#endif

fn xin(i: u32) -> f32 {
//#if INPLACE
  return Y[p.y_off + i];
//#else
  return X[p.x_off + i];
//#endif
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let th = gid.y;  // t * nh + h
  if (th >= p.T * p.nh) { return; }
  let t = th / p.nh;
  let base = th * p.hd;
  let i = gid.x;
//#if !INPLACE
  // Copy the unrotated tail (one element per invocation; the grid covers head_dim).
  if (2u * p.half + i < p.hd) { Y[p.y_off + base + 2u * p.half + i] = X[p.x_off + base + 2u * p.half + i]; }
//#endif
  if (i >= p.half) { return; }
  var i0 = 2u * i;
  var i1 = 2u * i + 1u;
  if (p.neox != 0u) { i0 = i; i1 = i + p.half; }
  let c = COS[(p.pos0 + t) * p.half + i];
  let s = SIN[(p.pos0 + t) * p.half + i];
  let x0 = xin(base + i0);
  let x1 = xin(base + i1);
  Y[p.y_off + base + i0] = x0 * c - x1 * s;
  Y[p.y_off + base + i1] = x1 * c + x0 * s;
}
