// Rotary embedding at positions pos0 + t (neox: pairs (i, i + half); normal: (2i, 2i + 1)).
// Dims >= rot_dims are left as they are. Variant INPLACE: y aliases x. x_off / y_off: the
// views' offsets in floats (row views of a batch, one sequence at a time).
// Variant KV (fused_rope_kv): one workgroup per head row of q, k or v: q and k rotated in
// place, then k's and v's rows written into their caches ([n_kv, max_ctx, head_dim], F16
// caches as packed pairs), as rope and kv_write (kv_write.wgsl) do.

//#include rotary

//#if !KV
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
  let ii = rot_pair(i, p.half, p.neox);
  let r = rotate(xin(base + ii.x), xin(base + ii.y), COS[(p.pos0 + t) * p.half + i], SIN[(p.pos0 + t) * p.half + i]);
  Y[p.y_off + base + ii.x] = r.x;
  Y[p.y_off + base + ii.y] = r.y;
}
//#else
struct P {
  T: u32, nh: u32, nkv: u32, hd: u32,
  half: u32, pos0: u32, neox: u32, max_ctx: u32,
  q_off: u32, k_off: u32, v_off: u32, qo_off: u32,
  ko_off: u32, pad0: u32, pad1: u32, pad2: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> COS: array<f32>;
@group(0) @binding(2) var<storage, read> SIN: array<f32>;
// QIN / KIN: q' / k' are q / k (rotated in place); otherwise they are QO / KO.
//#if QIN
@group(0) @binding(3) var<storage, read_write> Q: array<f32>;
fn qset(i: u32, v: f32) { Q[p.q_off + i] = v; }
//#else
@group(0) @binding(3) var<storage, read> Q: array<f32>;
@group(0) @binding(8) var<storage, read_write> QO: array<f32>;
fn qset(i: u32, v: f32) { QO[p.qo_off + i] = v; }
//#endif
//#if KIN
@group(0) @binding(4) var<storage, read_write> K: array<f32>;
fn kset(i: u32, v: f32) { K[p.k_off + i] = v; }
fn kout(i: u32) -> f32 { return K[p.k_off + i]; }
//#else
@group(0) @binding(4) var<storage, read> K: array<f32>;
@group(0) @binding(9) var<storage, read_write> KO: array<f32>;
fn kset(i: u32, v: f32) { KO[p.ko_off + i] = v; }
fn kout(i: u32) -> f32 { return KO[p.ko_off + i]; }
//#endif
@group(0) @binding(5) var<storage, read> V: array<f32>;
//#if F16
@group(0) @binding(6) var<storage, read_write> KC: array<u32>;
@group(0) @binding(7) var<storage, read_write> VC: array<u32>;
//#else
@group(0) @binding(6) var<storage, read_write> KC: array<f32>;
@group(0) @binding(7) var<storage, read_write> VC: array<f32>;
//#endif

// Rows: T * nh of q, then T * nkv of k, then T * nkv of v (all uniform per workgroup).
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let row = wid.x + wid.y * 65535u;
  let nq = p.T * p.nh;
  let nk = p.T * p.nkv;
  if (row >= nq + 2u * nk) { return; }
  if (row < nq) {
    let t = row / p.nh;
    let base = row * p.hd;
    for (var i = li; i < p.half; i += 64u) {
      let ii = rot_pair(i, p.half, p.neox);
      let r = rotate(Q[p.q_off + base + ii.x], Q[p.q_off + base + ii.y], COS[(p.pos0 + t) * p.half + i],
                     SIN[(p.pos0 + t) * p.half + i]);
      qset(base + ii.x, r.x);
      qset(base + ii.y, r.y);
    }
//#if !QIN
    for (var i = 2u * p.half + li; i < p.hd; i += 64u) { qset(base + i, Q[p.q_off + base + i]); }
//#endif
    return;
  }
  let is_k = row < nq + nk;
  var th = row - nq;  // t * nkv + h
  if (!is_k) { th = th - nk; }
  let t = th / p.nkv;
  let h = th % p.nkv;
  let base = th * p.hd;
  if (is_k) {
    for (var i = li; i < p.half; i += 64u) {
      let ii = rot_pair(i, p.half, p.neox);
      let r = rotate(K[p.k_off + base + ii.x], K[p.k_off + base + ii.y], COS[(p.pos0 + t) * p.half + i],
                     SIN[(p.pos0 + t) * p.half + i]);
      kset(base + ii.x, r.x);
      kset(base + ii.y, r.y);
    }
//#if !KIN
    for (var i = 2u * p.half + li; i < p.hd; i += 64u) { kset(base + i, K[p.k_off + base + i]); }
//#endif
    storageBarrier();  // the rotated row is read back whole below
    workgroupBarrier();
  }
  let vb = p.v_off + base;
  let dst = (h * p.max_ctx + p.pos0 + t) * p.hd;
//#if F16
  for (var i = 2u * li; i < p.hd; i += 128u) {
    if (is_k) {
      KC[(dst + i) / 2u] = pack2x16float(vec2<f32>(kout(base + i), kout(base + i + 1u)));
    } else {
      VC[(dst + i) / 2u] = pack2x16float(vec2<f32>(V[vb + i], V[vb + i + 1u]));
    }
  }
//#else
  for (var i = li; i < p.hd; i += 64u) {
    if (is_k) { KC[dst + i] = kout(base + i); } else { VC[dst + i] = V[vb + i]; }
  }
//#endif
}
//#endif
