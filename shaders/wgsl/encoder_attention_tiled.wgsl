// encoder_attention for head_dim 32 (HD32) or 64 (HD64): the op of encoder_attention.wgsl (q
// [B*T, nh, hd], k/v [B*S, nkv, hd], key mask [B, S], i32 or f32 when mask_f32 = 1; window > 0:
// only keys with |t - j| <= window; a row with no visible key writes 0), one workgroup per
// (head, 64 queries, sequence), 256 invocations: four a query (invocations q, q + 64, q + 128,
// q + 192), each taking every fourth key of a tile with its own running maximum and sums (online softmax), its q and output in named vec4
// registers (indexed private arrays would live in local memory). The keys and values of the
// sequence pass through workgroup memory in tiles of 32, read by all 64 queries. Per tile and
// invocation: its 8 scores (into sc), their maximum, one rescale of the running sums, then the
// weighted values. At the end parts 1..3 of each query are merged into part 0 one at a time
// through workgroup memory (the tiles' space). Arithmetic in f32, sums of products in another
// order than encoder_attention.wgsl.
struct P {
  T: u32, S: u32, nh: u32, nkv: u32,
  hd: u32, mask_f32: u32, window: u32, pad1: u32,
  scale: f32, pad2: u32, pad3: u32, pad4: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> Q: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> K: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> V: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> M: array<u32>;
@group(0) @binding(5) var<storage, read_write> O: array<vec4<f32>>;

const QT = 64u;   // queries a workgroup
const KT = 32u;   // keys a tile
const NS = 4u;     // invocations a query
const NTH = 256u;  // QT * NS
const SCW = 9u;    // an invocation's row of sc: KT / NS scores and one against bank conflicts
//#if HD64
const HD4 = 16u;
const KTHD = 512u;  // KT * HD4
//#else
const HD4 = 8u;
const KTHD = 256u;
//#endif

var<workgroup> ks: array<vec4<f32>, KTHD>;
var<workgroup> vs: array<vec4<f32>, KTHD>;
var<workgroup> kreal: array<u32, KT>;  // the tile's key is a real one
var<workgroup> sc: array<f32, 2304>;  // NTH * SCW

fn real(i: u32) -> bool {
  let v = M[i];
  if (p.mask_f32 != 0u) { return bitcast<f32>(v) != 0.0; }
  return v != 0u;
}

// A query's partial output vector d (of HD4) in the tiles' space: queries 0..31 in ks, 32..63 in vs.
fn part_put(qi: u32, d: u32, v: vec4<f32>) {
  if (qi < 32u) { ks[qi * HD4 + d] = v; } else { vs[(qi - 32u) * HD4 + d] = v; }
}
fn part_get(qi: u32, d: u32) -> vec4<f32> {
  if (qi < 32u) { return ks[qi * HD4 + d]; }
  return vs[(qi - 32u) * HD4 + d];
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let h = wid.x;
  let b = wid.z;
  // query li % QT, keys ks0, ks0 + NS, ... of each tile: the 32 lanes of a warp read the same key
  // and value (a broadcast from workgroup memory)
  let ks0 = li / QT;
  let qi = li % QT;
  let t = wid.y * QT + qi;
  let live = t < p.T;
  let kh = h / (p.nh / p.nkv);
  let qb = ((b * p.T + min(t, p.T - 1u)) * p.nh + h) * HD4;
  let q0 = Q[qb]; let q1 = Q[qb + 1u]; let q2 = Q[qb + 2u]; let q3 = Q[qb + 3u];
  let q4 = Q[qb + 4u]; let q5 = Q[qb + 5u]; let q6 = Q[qb + 6u]; let q7 = Q[qb + 7u];
  var a0 = vec4<f32>(0.0); var a1 = vec4<f32>(0.0); var a2 = vec4<f32>(0.0); var a3 = vec4<f32>(0.0);
  var a4 = vec4<f32>(0.0); var a5 = vec4<f32>(0.0); var a6 = vec4<f32>(0.0); var a7 = vec4<f32>(0.0);
//#if HD64
  let q8 = Q[qb + 8u]; let q9 = Q[qb + 9u]; let q10 = Q[qb + 10u]; let q11 = Q[qb + 11u];
  let q12 = Q[qb + 12u]; let q13 = Q[qb + 13u]; let q14 = Q[qb + 14u]; let q15 = Q[qb + 15u];
  var a8 = vec4<f32>(0.0); var a9 = vec4<f32>(0.0); var a10 = vec4<f32>(0.0); var a11 = vec4<f32>(0.0);
  var a12 = vec4<f32>(0.0); var a13 = vec4<f32>(0.0); var a14 = vec4<f32>(0.0); var a15 = vec4<f32>(0.0);
//#endif
  let rs = p.nkv * HD4;                 // one key row, in vec4s
  let kb0 = b * p.S * rs + kh * HD4;    // key 0 of sequence b, head kh
  var m = -3.0e38;
  var l = 0.0;
  let ntiles = (p.S + KT - 1u) / KT;
  for (var tile = 0u; tile < ntiles; tile++) {
    let j0 = tile * KT;
    for (var i = li; i < KT * HD4; i += NTH) {
      let j = j0 + i / HD4;
      var kv = vec4<f32>(0.0);
      var vv = vec4<f32>(0.0);
      if (j < p.S) {
        let at = kb0 + j * rs + i % HD4;
        kv = K[at];
        vv = V[at];
      }
      ks[i] = kv;
      vs[i] = vv;
    }
    if (li < KT) {
      let j = j0 + li;
      kreal[li] = select(0u, 1u, j < p.S && real(b * p.S + j));
    }
    workgroupBarrier();
    var tm = -3.0e38;
    for (var i = 0u; i < KT / NS; i++) {
      let jj = i * NS + ks0;
      let j = j0 + jj;
      let o = jj * HD4;
      var d = dot(q0, ks[o]) + dot(q1, ks[o + 1u]) + dot(q2, ks[o + 2u]) + dot(q3, ks[o + 3u]) +
              dot(q4, ks[o + 4u]) + dot(q5, ks[o + 5u]) + dot(q6, ks[o + 6u]) + dot(q7, ks[o + 7u]);
//#if HD64
      d += dot(q8, ks[o + 8u]) + dot(q9, ks[o + 9u]) + dot(q10, ks[o + 10u]) + dot(q11, ks[o + 11u]) +
           dot(q12, ks[o + 12u]) + dot(q13, ks[o + 13u]) + dot(q14, ks[o + 14u]) + dot(q15, ks[o + 15u]);
//#endif
      let ok = kreal[jj] != 0u && (p.window == 0u || max(t, j) - min(t, j) <= p.window);
      let s = select(-3.0e38, d * p.scale, ok);
      sc[li * SCW + i] = s;
      tm = max(tm, s);
    }
    let mn = max(m, tm);
    let corr = exp(m - mn);
    l *= corr;
    a0 *= corr; a1 *= corr; a2 *= corr; a3 *= corr; a4 *= corr; a5 *= corr; a6 *= corr; a7 *= corr;
//#if HD64
    a8 *= corr; a9 *= corr; a10 *= corr; a11 *= corr; a12 *= corr; a13 *= corr; a14 *= corr; a15 *= corr;
//#endif
    for (var i = 0u; i < KT / NS; i++) {
      let s = sc[li * SCW + i];
      var e = 0.0;
      if (s > -1.0e38) { e = exp(s - mn); }
      l += e;
      let o = (i * NS + ks0) * HD4;
      let ev = vec4<f32>(e);
      a0 = fma(ev, vs[o], a0); a1 = fma(ev, vs[o + 1u], a1); a2 = fma(ev, vs[o + 2u], a2);
      a3 = fma(ev, vs[o + 3u], a3); a4 = fma(ev, vs[o + 4u], a4); a5 = fma(ev, vs[o + 5u], a5);
      a6 = fma(ev, vs[o + 6u], a6); a7 = fma(ev, vs[o + 7u], a7);
//#if HD64
      a8 = fma(ev, vs[o + 8u], a8); a9 = fma(ev, vs[o + 9u], a9); a10 = fma(ev, vs[o + 10u], a10);
      a11 = fma(ev, vs[o + 11u], a11); a12 = fma(ev, vs[o + 12u], a12); a13 = fma(ev, vs[o + 13u], a13);
      a14 = fma(ev, vs[o + 14u], a14); a15 = fma(ev, vs[o + 15u], a15);
//#endif
    }
    m = mn;
    workgroupBarrier();
  }
  // parts 1..3 of each query into part 0, one at a time (the tiles are free after the last barrier)
  for (var r = 1u; r < NS; r++) {
    if (ks0 == r) {
      sc[2u * qi] = m;
      sc[2u * qi + 1u] = l;
      part_put(qi, 0u, a0); part_put(qi, 1u, a1); part_put(qi, 2u, a2); part_put(qi, 3u, a3);
      part_put(qi, 4u, a4); part_put(qi, 5u, a5); part_put(qi, 6u, a6); part_put(qi, 7u, a7);
//#if HD64
      part_put(qi, 8u, a8); part_put(qi, 9u, a9); part_put(qi, 10u, a10); part_put(qi, 11u, a11);
      part_put(qi, 12u, a12); part_put(qi, 13u, a13); part_put(qi, 14u, a14); part_put(qi, 15u, a15);
//#endif
    }
    workgroupBarrier();
    if (ks0 == 0u) {
      let m2 = sc[2u * qi];
      let mq = max(m, m2);
      let f1 = exp(m - mq);
      let f2 = exp(m2 - mq);
      l = l * f1 + sc[2u * qi + 1u] * f2;
      a0 = a0 * f1 + part_get(qi, 0u) * f2; a1 = a1 * f1 + part_get(qi, 1u) * f2; a2 = a2 * f1 + part_get(qi, 2u) * f2;
      a3 = a3 * f1 + part_get(qi, 3u) * f2; a4 = a4 * f1 + part_get(qi, 4u) * f2; a5 = a5 * f1 + part_get(qi, 5u) * f2;
      a6 = a6 * f1 + part_get(qi, 6u) * f2; a7 = a7 * f1 + part_get(qi, 7u) * f2;
//#if HD64
      a8 = a8 * f1 + part_get(qi, 8u) * f2; a9 = a9 * f1 + part_get(qi, 9u) * f2; a10 = a10 * f1 + part_get(qi, 10u) * f2;
      a11 = a11 * f1 + part_get(qi, 11u) * f2; a12 = a12 * f1 + part_get(qi, 12u) * f2; a13 = a13 * f1 + part_get(qi, 13u) * f2;
      a14 = a14 * f1 + part_get(qi, 14u) * f2; a15 = a15 * f1 + part_get(qi, 15u) * f2;
//#endif
      m = mq;
    }
    workgroupBarrier();
  }
  if (live && ks0 == 0u) {
    var inv = 0.0;
    if (l > 0.0) { inv = 1.0 / l; }
    O[qb] = a0 * inv; O[qb + 1u] = a1 * inv; O[qb + 2u] = a2 * inv; O[qb + 3u] = a3 * inv;
    O[qb + 4u] = a4 * inv; O[qb + 5u] = a5 * inv; O[qb + 6u] = a6 * inv; O[qb + 7u] = a7 * inv;
//#if HD64
    O[qb + 8u] = a8 * inv; O[qb + 9u] = a9 * inv; O[qb + 10u] = a10 * inv; O[qb + 11u] = a11 * inv;
    O[qb + 12u] = a12 * inv; O[qb + 13u] = a13 * inv; O[qb + 14u] = a14 * inv; O[qb + 15u] = a15 * inv;
//#endif
  }
}
