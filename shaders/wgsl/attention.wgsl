// Causal attention of q[t, h, :] over the cache (GQA), one workgroup per (head, token):
// keys lo..pos in tiles of 64 with a running max (online softmax), scores scaled,
// softcapped when softcap > 0; each lane owns output dims li, li + 64, ... (head_dim <= 256).
// Few tokens over many keys (decode): SPLIT, one workgroup per (head, token, 64 keys)
// writes its tile's max, sum of exponentials and weighted values to PART, and COMBINE
// (one workgroup per (head, token)) rescales and adds the nsplit tiles.
// DEC (few tokens, head_dim 8 x a power of two <= 256): one workgroup of 256 per (head, token)
// over the keys in tiles of 256, in one dispatch: each invocation scores one key of the tile
// (the key read 8 values a load: one vec4 of f16 words, or with DEC_F32 two vec4s of an f32
// cache), a workgroup max per tile (online softmax), then each sums the weighted values of 8
// dims over every KL-th key of the tile; the KL partial sums of a dim and the exponentials' sum
// are added at the end.
// DEC with ROPE (fused_rope_attention, one token): q and the token's new key rotated in the
// workgroup from the unrotated rows (K, V at k_off / v_off), the new key and value rounded as
// the cache stores them and used for the token's own position (so no workgroup reads the cache
// row this dispatch writes), and written to the caches by the first query head of each group.
struct P {
  T: u32, nh: u32, nkv: u32, hd: u32,
  max_ctx: u32, pos0: u32, window: u32, q_off: u32,
  scale: f32, softcap: f32, o_off: u32, nsplit: u32,
//#if ROPE
  k_off: u32, v_off: u32, half: u32, neox: u32,
//#endif
//#if QKNORM
  eps: f32, plus_one: u32, pad0: u32, pad1: u32,
//#endif
}
@group(0) @binding(0) var<uniform> p: P;
//#include act

// The first key a query at pos sees (a sliding window of p.window keys, 0: all).
fn first_key(pos: u32) -> u32 {
  if (p.window > 0u && pos + 1u > p.window) { return pos + 1u - p.window; }
  return 0u;
}

//#if DEC
@group(0) @binding(1) var<storage, read> Q: array<f32>;
//#if DEC_F32
//#if ROPE
@group(0) @binding(2) var<storage, read_write> KC4: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> VC4: array<vec4<f32>>;
// As the cache stores a value.
fn cached(x: f32) -> f32 { return x; }
//#else
@group(0) @binding(2) var<storage, read> KC4: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> VC4: array<vec4<f32>>;
//#endif
// Eight cached values (group i of 8 dims) as two vec4s.
fn k8lo(i: u32) -> vec4<f32> { return KC4[2u * i]; }
fn k8hi(i: u32) -> vec4<f32> { return KC4[2u * i + 1u]; }
fn v8lo(i: u32) -> vec4<f32> { return VC4[2u * i]; }
fn v8hi(i: u32) -> vec4<f32> { return VC4[2u * i + 1u]; }
//#else
//#if ROPE
@group(0) @binding(2) var<storage, read_write> KC4: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> VC4: array<vec4<u32>>;
fn cached(x: f32) -> f32 { return unpack2x16float(pack2x16float(vec2<f32>(x, 0.0))).x; }
//#else
@group(0) @binding(2) var<storage, read> KC4: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> VC4: array<vec4<u32>>;
//#endif
fn k8lo(i: u32) -> vec4<f32> { return h8lo(KC4[i]); }
fn k8hi(i: u32) -> vec4<f32> { return h8hi(KC4[i]); }
fn v8lo(i: u32) -> vec4<f32> { return h8lo(VC4[i]); }
fn v8hi(i: u32) -> vec4<f32> { return h8hi(VC4[i]); }
//#endif
@group(0) @binding(4) var<storage, read_write> O: array<f32>;
//#include wgreduce
var<workgroup> qd: array<vec4<f32>, 64>;   // q, head_dim <= 256
var<workgroup> pd: array<f32, 256>;        // the tile's exponentials
var<workgroup> od: array<vec4<f32>, 512>;  // per invocation: its 8 dims' sums

//#if ROPE
//#include rotary
@group(0) @binding(5) var<storage, read> KN: array<f32>;
@group(0) @binding(6) var<storage, read> VN: array<f32>;
@group(0) @binding(7) var<storage, read> COS: array<f32>;
@group(0) @binding(8) var<storage, read> SIN: array<f32>;
var<workgroup> raw: array<f32, 256>;      // an unrotated row (q's, then the new key's)
//#if QKNORM
@group(0) @binding(9) var<storage, read> QNW: array<f32>;
@group(0) @binding(10) var<storage, read> KNW: array<f32>;
// raw's row (one head) through RMSNorm with weight w of this invocation's dim, as norm.wgsl computes
// it (each dim's square in its invocation, the same workgroup sum); every invocation calls it.
fn head_norm(li: u32, w: f32) {
  var v = 0.0;
  if (li < p.hd) { v = raw[li]; }
  let r = 1.0 / sqrt(wg_reduce(fma(v, v, 0.0), li, false) / f32(p.hd) + p.eps);
  var wv = w;
  if (p.plus_one != 0u) { wv = 1.0 + w; }
  if (li < p.hd) { raw[li] = v * r * wv; }
  workgroupBarrier();
}
//#endif
var<workgroup> kn: array<vec4<f32>, 64>;  // the new key, rotated, as the cache stores it
var<workgroup> vn: array<vec4<f32>, 64>;  // the new value, as the cache stores it

// Dim d of the row in raw rotated to position pos, as rope.wgsl turns it.
fn roped(d: u32, pos: u32) -> f32 {
  if (d >= 2u * p.half) { return raw[d]; }
  var i = d / 2u;
  var first = (d & 1u) == 0u;
  if (p.neox != 0u) {
    first = d < p.half;
    i = select(d - p.half, d, first);
  }
  let ii = rot_pair(i, p.half, p.neox);
  let r = rotate(raw[ii.x], raw[ii.y], COS[pos * p.half + i], SIN[pos * p.half + i]);
  return select(r.y, r.x, first);
}
//#endif

// Eight f16 values (one vec4 of words) as two vec4s.
fn h8lo(w: vec4<u32>) -> vec4<f32> { return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)); }
fn h8hi(w: vec4<u32>) -> vec4<f32> { return vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w)); }

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let h = wid.x;
  let t = wid.y;
  let kh = h / (p.nh / p.nkv);
  let pos = p.pos0 + t;
  let lo = first_key(pos);
  let qb = p.q_off + (t * p.nh + h) * p.hd;
//#if ROPE
  // one token (t = 0): q rotated, then the new key rotated and the value, both as cached
  if (li < p.hd) { raw[li] = Q[qb + li]; }
  workgroupBarrier();
//#if QKNORM
  head_norm(li, QNW[min(li, p.hd - 1u)]);
//#endif
  var qr = 0.0;
  if (li < p.hd) { qr = roped(li, pos); }
  workgroupBarrier();
  if (li < p.hd) {
    qd[li / 4u][li % 4u] = qr;
    raw[li] = KN[p.k_off + kh * p.hd + li];
  }
  workgroupBarrier();
//#if QKNORM
  head_norm(li, KNW[min(li, p.hd - 1u)]);
//#endif
  if (li < p.hd) {
    kn[li / 4u][li % 4u] = cached(roped(li, pos));
    vn[li / 4u][li % 4u] = cached(VN[p.v_off + kh * p.hd + li]);
  }
  workgroupBarrier();
  if (h % (p.nh / p.nkv) == 0u) {  // the group's first head writes the cache row of pos
    let row = kh * p.max_ctx + pos;
//#if DEC_F32
    if (li < p.hd / 4u) {
      KC4[row * (p.hd / 4u) + li] = kn[li];
      VC4[row * (p.hd / 4u) + li] = vn[li];
    }
//#else
    if (li < p.hd / 8u) {
      let k0 = kn[2u * li];
      let k1 = kn[2u * li + 1u];
      let v0 = vn[2u * li];
      let v1 = vn[2u * li + 1u];
      KC4[row * (p.hd / 8u) + li] = vec4<u32>(pack2x16float(k0.xy), pack2x16float(k0.zw), pack2x16float(k1.xy),
                                              pack2x16float(k1.zw));
      VC4[row * (p.hd / 8u) + li] = vec4<u32>(pack2x16float(v0.xy), pack2x16float(v0.zw), pack2x16float(v1.xy),
                                              pack2x16float(v1.zw));
    }
//#endif
  }
//#else
  if (li < p.hd / 4u) {
    qd[li] = vec4<f32>(Q[qb + 4u * li], Q[qb + 4u * li + 1u], Q[qb + 4u * li + 2u], Q[qb + 4u * li + 3u]);
  }
  workgroupBarrier();
//#endif
  let g8 = p.hd / 8u;   // groups of 8 dims per cached row
  let nkl = 256u / g8;  // key lanes of the value sums
  let kl = li / g8;
  let dg = li % g8;     // this invocation's dims 8 dg .. 8 dg + 7
  let cb = kh * p.max_ctx * g8;
  var m = -3.0e38;
  var lt = 0.0;  // this invocation's exponentials, rescaled with m
  var a0 = vec4<f32>(0.0);
  var a1 = vec4<f32>(0.0);
  for (var k0 = lo; k0 <= pos; k0 += 256u) {
    let j = k0 + li;
    var s = -3.0e38;
    if (j <= pos) {
      let kb = cb + j * g8;
      var d0 = vec4<f32>(0.0);
      var d1 = vec4<f32>(0.0);
//#if ROPE
      if (j == pos) {  // the new key, not yet in the cache
        for (var i = 0u; i < g8; i++) {
          d0 = fma(qd[2u * i], kn[2u * i], d0);
          d1 = fma(qd[2u * i + 1u], kn[2u * i + 1u], d1);
        }
      } else {
//#endif
      for (var i = 0u; i < g8; i++) {
        d0 = fma(qd[2u * i], k8lo(kb + i), d0);
        d1 = fma(qd[2u * i + 1u], k8hi(kb + i), d1);
      }
//#if ROPE
      }
//#endif
      s = hsum4(d0 + d1) * p.scale;
      if (p.softcap > 0.0) { s = p.softcap * tanh_s(s / p.softcap); }
    }
    let mn = max(m, wg_reduce(s, li, true));
    let corr = exp(m - mn);
    var e = 0.0;
    if (j <= pos) { e = exp(s - mn); }
    pd[li] = e;
    lt = lt * corr + e;
    m = mn;
    workgroupBarrier();
    a0 *= corr;
    a1 *= corr;
    let nj = min(256u, pos + 1u - k0);
    let vb = cb + k0 * g8 + dg;
    for (var jj = kl; jj < nj; jj += nkl) {
      let pj = vec4<f32>(pd[jj]);
//#if ROPE
      if (k0 + jj == pos) {  // the new value
        a0 = fma(pj, vn[2u * dg], a0);
        a1 = fma(pj, vn[2u * dg + 1u], a1);
        continue;
      }
//#endif
      a0 = fma(pj, v8lo(vb + jj * g8), a0);
      a1 = fma(pj, v8hi(vb + jj * g8), a1);
    }
    workgroupBarrier();  // pd is the next tile's
  }
  let inv = 1.0 / wg_reduce(lt, li, false);
  od[2u * li] = a0;
  od[2u * li + 1u] = a1;
  workgroupBarrier();
  // invocation li < hd / 4: output dims 4 li .. 4 li + 3, summed over the key lanes
  if (li < p.hd / 4u) {
    var o = vec4<f32>(0.0);  // od[2 (k g8 + dg) + half] with dg = li / 2, half = li % 2
    for (var k = 0u; k < nkl; k++) { o += od[2u * k * g8 + li]; }
    o *= inv;
    let ob = p.o_off + (t * p.nh + h) * p.hd + 4u * li;
    O[ob] = o.x;
    O[ob + 1u] = o.y;
    O[ob + 2u] = o.z;
    O[ob + 3u] = o.w;
  }
}
fn hsum4(v: vec4<f32>) -> f32 { return (v.x + v.y) + (v.z + v.w); }
//#else
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

//#if !COMBINE
var<workgroup> qs: array<f32, 256>;
var<workgroup> sp: array<f32, 64>;
var<workgroup> red: array<f32, 64>;

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
//#if FLASH
// Many tokens (prompts): one workgroup of 256 per (head, 16 consecutive tokens), over the keys
// those tokens see in tiles of 16, each tile's keys and values staged once in workgroup memory
// (f32) for all 16 queries. 16 invocations per query (its lanes): lane j scores key j of the
// tile (the whole dot product) into fs; each lane then takes the tile's largest score of its
// query (online softmax: the 16 lanes hold the same running max), writes the exponential of its
// own score to fp, and adds the weighted values of its output vec4s (lane, lane + 16) over the
// tile's 16 keys, summing the 16 exponentials as it goes. head_dim a multiple of 32, at most 128
// (wgpu_backend.cc).
const FQ = 16u;  // queries (tokens) per workgroup
const FK = 16u;  // keys per tile
const FS = 33u;  // vec4s per staged key row (32 for head_dim 128, one more against bank conflicts)
const FV = 32u;  // vec4s per staged value row
var<workgroup> fq: array<vec4<f32>, 528>;  // FQ x FS: the queries
var<workgroup> fk: array<vec4<f32>, 528>;  // FK x FS: the tile's keys
var<workgroup> fv: array<vec4<f32>, 512>;  // FK x FV: the tile's values
var<workgroup> fs: array<f32, 256>;        // FQ x FK: scores
var<workgroup> fp: array<f32, 256>;        // FQ x FK: their exponentials

// q (row qi of fq) . key j of the tile (row j of fk): nq vec4s (even), two sums.
fn fl_score(qi: u32, j: u32, nq: u32) -> f32 {
  var d = vec4<f32>(0.0);
  var e = vec4<f32>(0.0);
  for (var i = 0u; i < nq; i += 2u) {
    d = fma(fq[qi * FS + i], fk[j * FS + i], d);
    e = fma(fq[qi * FS + i + 1u], fk[j * FS + i + 1u], e);
  }
  d += e;
  return (d.x + d.y) + (d.z + d.w);
}

// Four cached values (4 c .. 4 c + 3 of the row at rb) of the keys / values.
fn k4(rb: u32, c: u32) -> vec4<f32> { return vec4<f32>(kw(rb + 4u * c), kw(rb + 4u * c + 2u)); }
fn v4(rb: u32, c: u32) -> vec4<f32> { return vec4<f32>(vw(rb + 4u * c), vw(rb + 4u * c + 2u)); }

// Four output values at O[i..i+3].
fn store_o4(i: u32, v: vec4<f32>) {
  O[i] = v.x;
  O[i + 1u] = v.y;
  O[i + 2u] = v.z;
  O[i + 3u] = v.w;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let h = wid.x;
  let t0 = wid.y * FQ;
  let kh = h / (p.nh / p.nkv);
  let qi = li / 16u;
  let lane = li % 16u;
  let nq = p.hd / 4u;  // vec4s of a row
  let t = t0 + qi;
  let pos = p.pos0 + t;
  let lo = first_key(pos);
  let tlast = min(t0 + FQ, p.T) - 1u;
  let kbeg = first_key(p.pos0 + t0);  // the block's first key: first_key grows with the position
  let kend = p.pos0 + tlast;          // its last
  for (var e = li; e < FQ * nq; e += 256u) {
    let r = e / nq;
    let c = e % nq;
    var v = vec4<f32>(0.0);
    if (t0 + r < p.T) {
      let qb = p.q_off + ((t0 + r) * p.nh + h) * p.hd + 4u * c;
      v = vec4<f32>(Q[qb], Q[qb + 1u], Q[qb + 2u], Q[qb + 3u]);
    }
    fq[r * FS + c] = v;
  }
  let cb = kh * p.max_ctx * p.hd;
  var m = -3.0e38;
  var l = 0.0;
  var o0 = vec4<f32>(0.0);  // output dims 4 lane .. 4 lane + 3
  var o1 = vec4<f32>(0.0);  // and 4 (lane + 16) ..
  for (var k0 = kbeg; k0 <= kend; k0 += FK) {
    for (var e = li; e < FK * nq; e += 256u) {
      let r = e / nq;
      let c = e % nq;
      var kv = vec4<f32>(0.0);
      var vv = vec4<f32>(0.0);
      if (k0 + r <= kend) {
        kv = k4(cb + (k0 + r) * p.hd, c);
        vv = v4(cb + (k0 + r) * p.hd, c);
      }
      fk[r * FS + c] = kv;
      fv[r * FV + c] = vv;
    }
    workgroupBarrier();
    let kj = k0 + lane;
    var s = -3.0e38;
    if (t <= tlast && kj >= lo && kj <= pos) {
      s = fl_score(qi, lane, nq) * p.scale;
      if (p.softcap > 0.0) { s = p.softcap * tanh_s(s / p.softcap); }
    }
    fs[qi * FK + lane] = s;
    workgroupBarrier();
    var mt = m;
    //#unroll
    for (var j = 0u; j < FK; j++) {
      mt = max(mt, fs[qi * FK + j]);
    }
    var e = 0.0;
    if (s > -1.0e38) { e = exp(s - mt); }
    fp[qi * FK + lane] = e;
    let corr = exp(m - mt);
    m = mt;
    workgroupBarrier();
    l *= corr;
    o0 *= corr;
    o1 *= corr;
    //#unroll
    for (var j = 0u; j < FK; j++) {
      let pj = fp[qi * FK + j];
      l += pj;
      let pe = vec4<f32>(pj);
      o0 = fma(pe, fv[j * FV + lane], o0);
      if (nq > 16u) { o1 = fma(pe, fv[j * FV + lane + 16u], o1); }
    }
    workgroupBarrier();  // fk, fv, fs, fp are the next tile's
  }
  if (t <= tlast) {
    let inv = 1.0 / l;
    let ob = p.o_off + (t * p.nh + h) * p.hd;
    if (lane < nq) { store_o4(ob + 4u * lane, o0 * inv); }
    if (lane + 16u < nq) { store_o4(ob + 4u * (lane + 16u), o1 * inv); }
  }
}
//#else
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
//#endif
//#endif
