// cache[h, pos0 + t, :] = k[t, h, :]; F16 variant packs pairs into u32.
struct P { T: u32, nkv: u32, hd: u32, max_ctx: u32, pos0: u32, x_off: u32, pad1: u32, pad2: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> X: array<f32>;
//#if F16
@group(0) @binding(2) var<storage, read_write> C: array<u32>;
//#else
@group(0) @binding(2) var<storage, read_write> C: array<f32>;
//#endif

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let th = gid.y;  // t * nkv + h
  if (th >= p.T * p.nkv) { return; }
  let t = th / p.nkv;
  let h = th % p.nkv;
  let dst = (h * p.max_ctx + p.pos0 + t) * p.hd;
//#if F16
  let i = 2u * gid.x;
  if (i >= p.hd) { return; }
  C[(dst + i) / 2u] = pack2x16float(vec2<f32>(X[p.x_off + th * p.hd + i], X[p.x_off + th * p.hd + i + 1u]));
//#else
  let i = gid.x;
  if (i >= p.hd) { return; }
  C[dst + i] = X[p.x_off + th * p.hd + i];
//#endif
}
