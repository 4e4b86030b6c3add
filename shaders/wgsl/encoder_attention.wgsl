// Non-causal attention over a batch with a key padding mask (the encoder_attention op):
// q [B*T, nh, hd], k/v [B*S, nkv, hd], key mask [B, S] (i32, or f32 when mask_f32 = 1;
// nonzero = a real key). One workgroup per (head, query row b*T + t): the real keys of
// sequence b in tiles of 64 with a running max (online softmax); each lane owns output
// dims li, li + 64, ... (head_dim <= 256). window > 0: only keys with |t - j| <= window.
// A row with no visible key writes 0.
struct P {
  T: u32, S: u32, nh: u32, nkv: u32,
  hd: u32, mask_f32: u32, window: u32, pad1: u32,
  scale: f32, pad2: u32, pad3: u32, pad4: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> Q: array<f32>;
@group(0) @binding(2) var<storage, read> K: array<f32>;
@group(0) @binding(3) var<storage, read> V: array<f32>;
@group(0) @binding(4) var<storage, read> M: array<u32>;
@group(0) @binding(5) var<storage, read_write> O: array<f32>;

fn real(i: u32) -> bool {
  let v = M[i];
  if (p.mask_f32 != 0u) { return bitcast<f32>(v) != 0.0; }
  return v != 0u;
}

var<workgroup> qs: array<f32, 256>;
var<workgroup> sp: array<f32, 64>;
var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let h = wid.x;
  let bt = wid.y;
  let b = bt / p.T;
  let kh = h / (p.nh / p.nkv);
  let qb = (bt * p.nh + h) * p.hd;
  for (var i = li; i < p.hd; i += 64u) { qs[i] = Q[qb + i]; }
  workgroupBarrier();
  let rs = p.nkv * p.hd;             // one key row
  let kb0 = b * p.S * rs + kh * p.hd;  // key 0 of sequence b, head kh
  var m = -3.0e38;
  var lsum = 0.0;
  var acc: array<f32, 4>;
  let ntiles = (p.S + 63u) / 64u;
  for (var tile = 0u; tile < ntiles; tile++) {
    let j = tile * 64u + li;
    var ok = false;
    var s = -3.0e38;
    if (j < p.S) {
      let t = bt % p.T;
      ok = real(b * p.S + j) && (p.window == 0u || (max(t, j) - min(t, j)) <= p.window);
      if (ok) {
        var d = 0.0;
        let kb = kb0 + j * rs;
        for (var i = 0u; i < p.hd; i++) { d = fma(qs[i], K[kb + i], d); }
        s = d * p.scale;
      }
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
    if (ok) { e = exp(s - mn); }
    sp[li] = e;
    lsum = lsum * corr + e;
    m = mn;
    workgroupBarrier();
    let nj = min(64u, p.S - tile * 64u);
    for (var k = 0u; k < 4u; k++) {
      let dd = li + 64u * k;
      if (dd < p.hd) {
        var a = acc[k] * corr;
        for (var jj = 0u; jj < nj; jj++) {
          a = fma(sp[jj], V[kb0 + (tile * 64u + jj) * rs + dd], a);
        }
        acc[k] = a;
      }
    }
    workgroupBarrier();
  }
  red[li] = lsum;
  workgroupBarrier();
  for (var st = 32u; st > 0u; st >>= 1u) {
    if (li < st) { red[li] += red[li + st]; }
    workgroupBarrier();
  }
  var inv = 0.0;
  if (red[0] > 0.0) { inv = 1.0 / red[0]; }
  for (var k = 0u; k < 4u; k++) {
    let dd = li + 64u * k;
    if (dd < p.hd) { O[qb + dd] = acc[k] * inv; }
  }
}
