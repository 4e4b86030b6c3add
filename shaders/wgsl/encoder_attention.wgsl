// Non-causal attention with a mask, one workgroup a query row: the real keys in tiles of 64 with a
// running max (online softmax); each lane owns output dims li, li + 64, ... (head dims <= 256). A
// row with no visible key writes 0. Two layouts share the body through the accessors below:
//   (default) the encoder_attention op: q [B*T, nh, hd], k/v [B*S, nkv, hd], key mask [B, S] (i32,
//             or f32 when mask_f32 = 1; nonzero = a real key); one workgroup per (head, query row
//             b*T + t); window > 0: only keys with |t - j| <= window.
//   ND        the attention_nd op (op.h): q [B, H, T, D], k [B, H, S, D], v [B, H, S, Dv] (batch and
//             head strides 0 where broadcast), mask? bool (bytes) broadcast to [B, H, T, S] by its
//             strides (true = attended), out [B, H, T, Dv]; one workgroup per output row r = (b, h,
//             t), r = x + y * nx of the grid.
//#if ND
struct P {
  T: u32, S: u32, H: u32, D: u32,
  Dv: u32, has_mask: u32, nx: u32, rows: u32,
  qsb: u32, qsh: u32, ksb: u32, ksh: u32,
  vsb: u32, vsh: u32, msb: u32, msh: u32,
  mst: u32, msj: u32, scale: f32, pad: u32,
}
//#else
struct P {
  T: u32, S: u32, nh: u32, nkv: u32,
  hd: u32, mask_f32: u32, window: u32, pad1: u32,
  scale: f32, pad2: u32, pad3: u32, pad4: u32,
}
//#endif
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> Q: array<f32>;
@group(0) @binding(2) var<storage, read> K: array<f32>;
@group(0) @binding(3) var<storage, read> V: array<f32>;
@group(0) @binding(4) var<storage, read> M: array<u32>;
@group(0) @binding(5) var<storage, read_write> O: array<f32>;

var<private> qb: u32;   // the query row's first element
var<private> kb: u32;   // key 0's first element
var<private> vb: u32;   // value 0's first element
var<private> ob: u32;   // the output row's first element
var<private> mb: u32;   // (ND) the row's mask element of key 0; (default) the sequence b
var<private> t: u32;    // the query's position

//#if ND
// The row of workgroup wid; false: past the last row (a whole workgroup returns).
fn begin(wid: vec3<u32>) -> bool {
  let r = wid.x + wid.y * p.nx;
  if (r >= p.rows) { return false; }
  t = r % p.T;
  let h = (r / p.T) % p.H;
  let b = r / (p.T * p.H);
  qb = b * p.qsb + h * p.qsh + t * p.D;
  kb = b * p.ksb + h * p.ksh;
  vb = b * p.vsb + h * p.vsh;
  ob = r * p.Dv;
  mb = b * p.msb + h * p.msh + t * p.mst;
  return true;
}
fn dq() -> u32 { return p.D; }
fn dv() -> u32 { return p.Dv; }
fn k_at(j: u32, i: u32) -> f32 { return K[kb + j * p.D + i]; }
fn v_at(j: u32, d: u32) -> f32 { return V[vb + j * p.Dv + d]; }
fn keep(j: u32) -> bool {
  if (p.has_mask == 0u) { return true; }
  let e = mb + j * p.msj;
  return ((M[e >> 2u] >> ((e & 3u) * 8u)) & 0xffu) != 0u;
}
//#else
fn begin(wid: vec3<u32>) -> bool {
  let h = wid.x;
  let bt = wid.y;
  mb = bt / p.T;
  t = bt % p.T;
  let kh = h / (p.nh / p.nkv);
  qb = (bt * p.nh + h) * p.hd;
  ob = qb;
  kb = mb * p.S * p.nkv * p.hd + kh * p.hd;
  vb = kb;
  return true;
}
fn dq() -> u32 { return p.hd; }
fn dv() -> u32 { return p.hd; }
fn k_at(j: u32, i: u32) -> f32 { return K[kb + j * p.nkv * p.hd + i]; }
fn v_at(j: u32, d: u32) -> f32 { return V[vb + j * p.nkv * p.hd + d]; }
fn keep(j: u32) -> bool {
  let v = M[mb * p.S + j];
  let real = select(v != 0u, bitcast<f32>(v) != 0.0, p.mask_f32 != 0u);
  return real && (p.window == 0u || (max(t, j) - min(t, j)) <= p.window);
}
//#endif

var<workgroup> qs: array<f32, 256>;
var<workgroup> sp: array<f32, 64>;
var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  if (!begin(wid)) { return; }
  let D = dq();
  let Dv = dv();
  for (var i = li; i < D; i += 64u) { qs[i] = Q[qb + i]; }
  workgroupBarrier();
  var m = -3.0e38;
  var lsum = 0.0;
  var acc: array<f32, 4>;
  let ntiles = (p.S + 63u) / 64u;
  for (var tile = 0u; tile < ntiles; tile++) {
    let j = tile * 64u + li;
    var ok = false;
    var s = -3.0e38;
    if (j < p.S) {
      ok = keep(j);
      if (ok) {
        var d = 0.0;
        for (var i = 0u; i < D; i++) { d = fma(qs[i], k_at(j, i), d); }
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
      if (dd < Dv) {
        var a = acc[k] * corr;
        for (var jj = 0u; jj < nj; jj++) {
          a = fma(sp[jj], v_at(tile * 64u + jj, dd), a);
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
    if (dd < Dv) { O[ob + dd] = acc[k] * inv; }
  }
}
