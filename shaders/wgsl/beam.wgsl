// Beam candidates on the device (csrc/sampling/beam.h, the host reference; docs/whisper.md,
// "Decoding on the device"): one workgroup of 256 invocations per row of logits runs the
// allowed-token mask, the timestamp check, the log-softmax plus the row's cumulative
// log-probability and the row's k best (score desc, token asc); only those k pairs and the
// row's first non-finite logit are written. The sums are f32 over the workgroup (the host
// reference sums in double), so scores agree within f32 rounding of the log-sum.
struct P { rows: u32, n: u32, off: u32, k: u32, ts_begin: u32, ts_end: u32, pad0: u32, pad1: u32 }
// Per row: flags (bit 0: a mask at word mask_off of RM; bit 1: the timestamp check), the mask's
// offset, the cumulative log-probability (f32 bits), unused.
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> L: array<f32>;
@group(0) @binding(2) var<storage, read> RM: array<u32>;                // [rows, 4] row words, then the masks
@group(0) @binding(3) var<storage, read_write> OUT: array<u32>;         // [rows, 2k + 1]: scores, tokens, first non-finite

//#include wgreduce
const WG: u32 = 256u;
const NONE: u32 = 0xFFFFFFFFu;
var<workgroup> red_f: array<f32, 256>;
var<workgroup> red_u: array<u32, 256>;
var<workgroup> res_f: f32;
var<workgroup> res_u: u32;

var<private> lid: u32;
var<private> base: u32;    // the row's first logit in L
var<private> masked: bool;
var<private> moff: u32;    // the row's mask in RM
var<private> drop_text: bool;

fn neg_inf() -> f32 { return bitcast<f32>(0xFF800000u); }
fn pos_inf() -> f32 { return bitcast<f32>(0x7F800000u); }
fn finite(v: f32) -> bool { return (bitcast<u32>(v) & 0x7F800000u) != 0x7F800000u; }

// The row's logit of token t after the mask (and the dropped text tokens): -inf where not allowed.
fn x_at(t: u32) -> f32 {
  if (masked && ((RM[moff + (t >> 5u)] >> (t & 31u)) & 1u) == 0u) { return neg_inf(); }
  if (drop_text && t < p.ts_begin) { return neg_inf(); }
  return L[base + t];
}

// wg_reduce's result as a uniform value (it is the same in every lane, but a workgroup read is
// not uniform to WGSL's analysis, and the branches on it below hold barriers).
fn uniform_f(v: f32) -> f32 {
  if (lid == 0u) { res_f = v; }
  return workgroupUniformLoad(&res_f);
}
// (score, token) better than (bs, bt): a higher score, or the same with a lower token; any
// candidate beats NONE.
fn better(s: f32, t: u32, bs: f32, bt: u32) -> bool {
  return bt == NONE || s > bs || (s == bs && t < bt);
}
// The workgroup's best (score, token) pair; every lane gets it.
fn wg_best(s: f32, t: u32) -> vec2<u32> {
  red_f[lid] = s;
  red_u[lid] = t;
  workgroupBarrier();
  for (var w = WG / 2u; w > 0u; w >>= 1u) {
    if (lid < w && better(red_f[lid + w], red_u[lid + w], red_f[lid], red_u[lid])) {
      red_f[lid] = red_f[lid + w];
      red_u[lid] = red_u[lid + w];
    }
    workgroupBarrier();
  }
  if (lid == 0u) {
    res_f = red_f[0];
    res_u = red_u[0];
  }
  let bs = workgroupUniformLoad(&res_f);
  let bt = workgroupUniformLoad(&res_u);
  return vec2<u32>(bitcast<u32>(bs), bt);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) li: vec3<u32>, @builtin(workgroup_id) wg: vec3<u32>) {
  lid = li.x;
  let row = wg.x;
  let n = p.n;
  base = p.off + row * n;
  let flags = RM[row * 4u];
  masked = (flags & 1u) != 0u;
  moff = RM[row * 4u + 1u];
  let cum = bitcast<f32>(RM[row * 4u + 2u]);
  drop_text = false;
  let check = (flags & 2u) != 0u && p.ts_begin < p.ts_end;
  // the maxima of the text tokens, the timestamps and the rest; the first non-finite logit
  var tmax = neg_inf();
  var smax = neg_inf();
  var rmax = neg_inf();
  var nf = NONE;
  for (var t = lid; t < n; t += WG) {
    if (!finite(L[base + t])) { nf = min(nf, t); }
    let v = x_at(t);
    if (t < p.ts_begin) { tmax = max(tmax, v); } else if (t < p.ts_end) { smax = max(smax, v); } else { rmax = max(rmax, v); }
  }
  tmax = uniform_f(wg_reduce(tmax, lid, true));
  smax = uniform_f(wg_reduce(smax, lid, true));
  rmax = uniform_f(wg_reduce(rmax, lid, true));
  nf = wg_min_u32(nf, lid);
  let ob = row * (2u * p.k + 1u);
  if (lid == 0u) { OUT[ob + 2u * p.k] = nf; }
  if (check && smax > neg_inf()) {  // a timestamp more likely than every text token drops the text
    var s = 0.0;
    for (var t = p.ts_begin + lid; t < p.ts_end; t += WG) {
      let v = x_at(t);
      if (v > neg_inf()) { s += exp(v - smax); }
    }
    s = uniform_f(wg_reduce(s, lid, false));
    drop_text = smax + log(s) > tmax;
  }
  let m = max(select(tmax, neg_inf(), drop_text), max(smax, rmax));
  if (m == neg_inf()) {  // nothing allowed: every score -inf, the lowest tokens (as the host)
    for (var j = lid; j < p.k; j += WG) {
      OUT[ob + j] = bitcast<u32>(neg_inf());
      OUT[ob + p.k + j] = j;
    }
    return;
  }
  var z = 0.0;
  for (var t = lid; t < n; t += WG) {
    let v = x_at(t);
    if (v > neg_inf()) { z += exp(v - m); }
  }
  let lz = log(wg_reduce(z, lid, false));
  // k rounds: the best pair after the previous pick in the order (score desc, token asc)
  var ps = pos_inf();
  var pt = NONE;
  for (var j = 0u; j < p.k; j++) {
    var bs = neg_inf();
    var bt = NONE;
    for (var t = lid; t < n; t += WG) {
      let v = x_at(t);
      var sc = neg_inf();
      if (v > neg_inf()) { sc = (v - m) - lz + cum; }
      let after = pt == NONE || sc < ps || (sc == ps && t > pt);
      if (after && better(sc, t, bs, bt)) {
        bs = sc;
        bt = t;
      }
    }
    let b = wg_best(bs, bt);
    ps = bitcast<f32>(b.x);
    pt = b.y;
    if (lid == 0u) {
      OUT[ob + j] = b.x;
      OUT[ob + p.k + j] = pt;
    }
  }
}
