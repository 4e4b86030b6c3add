// Causal attention of q[t, h, :] over the cache (GQA), one workgroup per (head, token):
// keys lo..pos in tiles of 64 with a running max (online softmax), scores scaled,
// softcapped when softcap > 0; each lane owns output dims li, li + 64, ... (head_dim <= 256).
// Few tokens over many keys (decode): SPLIT, one workgroup per (head, token, 64 keys)
// writes its tile's max, sum of exponentials and weighted values to PART, and COMBINE
// (one workgroup per (head, token)) rescales and adds the nsplit tiles.
struct P {
  T: u32, nh: u32, nkv: u32, hd: u32,
  max_ctx: u32, pos0: u32, window: u32, q_off: u32,
  scale: f32, softcap: f32, o_off: u32, nsplit: u32,
}
@group(0) @binding(0) var<uniform> p: P;
//#if !COMBINE
@group(0) @binding(1) var<storage, read> Q: array<f32>;
//#if F16
@group(0) @binding(2) var<storage, read> KC: array<u32>;
@group(0) @binding(3) var<storage, read> VC: array<u32>;
fn kval(i: u32) -> f32 { return unpack2x16float(KC[i >> 1u])[i & 1u]; }
fn vval(i: u32) -> f32 { return unpack2x16float(VC[i >> 1u])[i & 1u]; }
// values i, i + 1 (i even: one word)
fn kw(i: u32) -> vec2<f32> { return unpack2x16float(KC[i >> 1u]); }
fn vw(i: u32) -> vec2<f32> { return unpack2x16float(VC[i >> 1u]); }
//#else
@group(0) @binding(2) var<storage, read> KC: array<f32>;
@group(0) @binding(3) var<storage, read> VC: array<f32>;
fn kval(i: u32) -> f32 { return KC[i]; }
fn vval(i: u32) -> f32 { return VC[i]; }
fn kw(i: u32) -> vec2<f32> { return vec2<f32>(KC[i], KC[i + 1u]); }
fn vw(i: u32) -> vec2<f32> { return vec2<f32>(VC[i], VC[i + 1u]); }
//#endif
//#endif
//#if !SPLIT
@group(0) @binding(4) var<storage, read_write> O: array<f32>;
//#endif
// SPLIT and COMBINE: per (token, head, tile) the max, the sum of exponentials, hd weighted value sums
//#if SPLIT
@group(0) @binding(5) var<storage, read_write> PART: array<f32>;
//#endif
//#if COMBINE
@group(0) @binding(5) var<storage, read_write> PART: array<f32>;
//#endif

//#include act

//#if !COMBINE
var<workgroup> qs: array<f32, 256>;
var<workgroup> sp: array<f32, 64>;
var<workgroup> red: array<f32, 64>;

// The first key a query at pos sees (a sliding window of p.window keys, 0: all).
fn first_key(pos: u32) -> u32 {
  if (p.window > 0u && pos + 1u > p.window) { return pos + 1u - p.window; }
  return 0u;
}

// The scaled (and softcapped) score of key j of the cache at cb, or -3e38 past pos.
fn score(cb: u32, j: u32, pos: u32) -> f32 {
  if (j > pos) { return -3.0e38; }
  let d = kdot(cb + j * p.hd) * p.scale;
  if (p.softcap > 0.0) { return p.softcap * tanh_s(d / p.softcap); }
  return d;
}

// The largest of the 64 lanes' v (every lane gets it; red is free again on return).
fn wg_max(v: f32, li: u32) -> f32 {
  red[li] = v;
  workgroupBarrier();
  for (var st = 32u; st > 0u; st >>= 1u) {
    if (li < st) { red[li] = max(red[li], red[li + st]); }
    workgroupBarrier();
  }
  let r = red[0];
  workgroupBarrier();
  return r;
}

// q (staged in qs) . the cached key at kb (kb even): eight values a step into two sets of
// four partial sums (the loads of a step are independent), then the tail.
fn kdot(kb: u32) -> f32 {
  var d4 = vec4<f32>(0.0);
  var e4 = vec4<f32>(0.0);
  var i = 0u;
  for (; i + 8u <= p.hd; i += 8u) {
    let k0 = kw(kb + i);
    let k1 = kw(kb + i + 2u);
    let k2 = kw(kb + i + 4u);
    let k3 = kw(kb + i + 6u);
    d4 = fma(vec4<f32>(qs[i], qs[i + 1u], qs[i + 2u], qs[i + 3u]), vec4<f32>(k0, k1), d4);
    e4 = fma(vec4<f32>(qs[i + 4u], qs[i + 5u], qs[i + 6u], qs[i + 7u]), vec4<f32>(k2, k3), e4);
  }
  d4 += e4;
  var d = (d4.x + d4.y) + (d4.z + d4.w);
  for (; i < p.hd; i++) { d = fma(qs[i], kval(kb + i), d); }
  return d;
}
//#endif
//#if SPLIT

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let h = wid.x;
  let t = wid.y;
  let kh = h / (p.nh / p.nkv);
  let pos = p.pos0 + t;
  let lo = first_key(pos);
  let k0 = lo + wid.z * 64u;
  let pb = ((t * p.nh + h) * p.nsplit + wid.z) * (p.hd + 2u);
  if (k0 > pos) {  // past this token's last key: an empty tile
    if (li == 0u) {
      PART[pb] = -3.0e38;
      PART[pb + 1u] = 0.0;
    }
    for (var i = li; i < p.hd; i += 64u) { PART[pb + 2u + i] = 0.0; }
    return;
  }
  let qb = p.q_off + (t * p.nh + h) * p.hd;
  for (var i = li; i < p.hd; i += 64u) { qs[i] = Q[qb + i]; }
  workgroupBarrier();
  let cb = kh * p.max_ctx * p.hd;
  let j = k0 + li;
  let s = score(cb, j, pos);
  let mx = wg_max(s, li);
  var e = 0.0;
  if (j <= pos) { e = exp(s - mx); }
  sp[li] = e;
  red[li] = e;
  workgroupBarrier();
  for (var st = 32u; st > 0u; st >>= 1u) {
    if (li < st) { red[li] += red[li + st]; }
    workgroupBarrier();
  }
  let nj = min(64u, pos + 1u - k0);
  let vb = cb + k0 * p.hd;
  // lane li owns dims 2w, 2w + 1 for w = li, li + 64 (one f16 word); four keys a step into
  // four sums, so that a step's loads are independent
  for (var w = li; 2u * w < p.hd; w += 64u) {
    let i = 2u * w;
    var a0 = vec2<f32>(0.0);
    var a1 = vec2<f32>(0.0);
    var a2 = vec2<f32>(0.0);
    var a3 = vec2<f32>(0.0);
    var jj = 0u;
    for (; jj + 4u <= nj; jj += 4u) {
      let o = vb + jj * p.hd + i;
      a0 = fma(vec2<f32>(sp[jj]), vw(o), a0);
      a1 = fma(vec2<f32>(sp[jj + 1u]), vw(o + p.hd), a1);
      a2 = fma(vec2<f32>(sp[jj + 2u]), vw(o + 2u * p.hd), a2);
      a3 = fma(vec2<f32>(sp[jj + 3u]), vw(o + 3u * p.hd), a3);
    }
    for (; jj < nj; jj++) { a0 = fma(vec2<f32>(sp[jj]), vw(vb + jj * p.hd + i), a0); }
    let a = (a0 + a1) + (a2 + a3);
    PART[pb + 2u + i] = a.x;
    if (i + 1u < p.hd) { PART[pb + 3u + i] = a.y; }
  }
  if (li == 0u) {
    PART[pb] = mx;
    PART[pb + 1u] = red[0];
  }
}
//#endif
//#if COMBINE
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let h = wid.x;
  let t = wid.y;
  let base = (t * p.nh + h) * p.nsplit;
  let st = p.hd + 2u;
  var m = -3.0e38;
  for (var s = 0u; s < p.nsplit; s++) { m = max(m, PART[(base + s) * st]); }
  var l = 0.0;
  for (var s = 0u; s < p.nsplit; s++) { l += exp(PART[(base + s) * st] - m) * PART[(base + s) * st + 1u]; }
  let inv = 1.0 / l;
  let ob = p.o_off + (t * p.nh + h) * p.hd;
  for (var i = li; i < p.hd; i += 64u) {
    var a = 0.0;
    for (var s = 0u; s < p.nsplit; s++) { a += exp(PART[(base + s) * st] - m) * PART[(base + s) * st + 2u + i]; }
    O[ob + i] = a * inv;
  }
}
//#endif
//#if !SPLIT
//#if !COMBINE
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let h = wid.x;
  let t = wid.y;
  let kh = h / (p.nh / p.nkv);
  let pos = p.pos0 + t;
  let lo = first_key(pos);
  let qb = p.q_off + (t * p.nh + h) * p.hd;
  for (var i = li; i < p.hd; i += 64u) { qs[i] = Q[qb + i]; }
  workgroupBarrier();
  let cb = kh * p.max_ctx * p.hd;
  var m = -3.0e38;
  var lsum = 0.0;
  // output dims li, li + 64, li + 128, li + 192: a vec4, not an indexed array (which a
  // GPU compiler may place in local memory)
  var acc = vec4<f32>(0.0);
  let ntiles = (pos - lo + 64u) / 64u;
  for (var tile = 0u; tile < ntiles; tile++) {
    let j = lo + tile * 64u + li;
    let s = score(cb, j, pos);
    let mn = max(m, wg_max(s, li));
    let corr = exp(m - mn);
    var e = 0.0;
    if (j <= pos) { e = exp(s - mn); }
    sp[li] = e;
    lsum = lsum * corr + e;
    m = mn;
    workgroupBarrier();
    let nj = min(64u, pos + 1u - (lo + tile * 64u));
    let vb = cb + (lo + tile * 64u) * p.hd + li;
    var n4 = 0u;  // output dims this lane owns
    if (li < p.hd) { n4 = min(4u, (p.hd - li + 63u) / 64u); }
    var a = acc * corr;
    for (var jj = 0u; jj < nj; jj++) {
      let w = sp[jj];
      let o = vb + jj * p.hd;
      if (n4 > 0u) { a.x = fma(w, vval(o), a.x); }
      if (n4 > 1u) { a.y = fma(w, vval(o + 64u), a.y); }
      if (n4 > 2u) { a.z = fma(w, vval(o + 128u), a.z); }
      if (n4 > 3u) { a.w = fma(w, vval(o + 192u), a.w); }
    }
    acc = a;
    workgroupBarrier();
  }
  red[li] = lsum;
  workgroupBarrier();
  for (var st = 32u; st > 0u; st >>= 1u) {
    if (li < st) { red[li] += red[li + st]; }
    workgroupBarrier();
  }
  let inv = 1.0 / red[0];
  let ob = p.o_off + (t * p.nh + h) * p.hd + li;
  if (li < p.hd) { O[ob] = acc.x * inv; }
  if (li + 64u < p.hd) { O[ob + 64u] = acc.y * inv; }
  if (li + 128u < p.hd) { O[ob + 128u] = acc.z * inv; }
  if (li + 192u < p.hd) { O[ob + 192u] = acc.w * inv; }
}
//#endif
//#endif
