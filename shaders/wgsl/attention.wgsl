// Causal attention of q[t, h, :] over the cache (GQA), one workgroup per (head, token):
// keys lo..pos in tiles of 64 with a running max (online softmax), scores scaled,
// softcapped when softcap > 0; each lane owns output dims li, li + 64, ... (head_dim <= 256).
struct P {
  T: u32, nh: u32, nkv: u32, hd: u32,
  max_ctx: u32, pos0: u32, window: u32, q_off: u32,
  scale: f32, softcap: f32, o_off: u32, pad1: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> Q: array<f32>;
//#if F16
@group(0) @binding(2) var<storage, read> KC: array<u32>;
@group(0) @binding(3) var<storage, read> VC: array<u32>;
fn kval(i: u32) -> f32 { return unpack2x16float(KC[i >> 1u])[i & 1u]; }
fn vval(i: u32) -> f32 { return unpack2x16float(VC[i >> 1u])[i & 1u]; }
//#else
@group(0) @binding(2) var<storage, read> KC: array<f32>;
@group(0) @binding(3) var<storage, read> VC: array<f32>;
fn kval(i: u32) -> f32 { return KC[i]; }
fn vval(i: u32) -> f32 { return VC[i]; }
//#endif
@group(0) @binding(4) var<storage, read_write> O: array<f32>;

// tanh to about 1 ulp: odd series near 0, (1 - e) / (1 + e) with e = exp(-2|x|) elsewhere.
fn tanh_s(x: f32) -> f32 {
  let a = abs(x);
  if (a < 0.3) {
    let y2 = x * x;
    return x * (1.0 + y2 * (-0.3333333333 + y2 * (0.1333333333 + y2 * (-0.0539682540 +
           y2 * (0.0218694885 + y2 * -0.0088632355)))));
  }
  let e = exp(-2.0 * min(a, 15.0));
  return sign(x) * (1.0 - e) / (1.0 + e);
}

var<workgroup> qs: array<f32, 256>;
var<workgroup> sp: array<f32, 64>;
var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let h = wid.x;
  let t = wid.y;
  let kh = h / (p.nh / p.nkv);
  let pos = p.pos0 + t;
  var lo = 0u;
  if (p.window > 0u && pos + 1u > p.window) { lo = pos + 1u - p.window; }
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
    var s = -3.0e38;
    if (j <= pos) {
      var d = 0.0;
      let kb = cb + j * p.hd;
      for (var i = 0u; i < p.hd; i++) { d = fma(qs[i], kval(kb + i), d); }
      d *= p.scale;
      if (p.softcap > 0.0) { d = p.softcap * tanh_s(d / p.softcap); }
      s = d;
    }
    red[li] = s;
    workgroupBarrier();
    for (var st = 32u; st > 0u; st >>= 1u) {
      if (li < st) { red[li] = max(red[li], red[li + st]); }
      workgroupBarrier();
    }
    let mn = max(m, red[0]);
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
