// Token sampling on the device (docs/generation.md, "Sampling on the GPU"): one
// workgroup per row of logits runs the stages of csrc/sampling/sampler.cc in its
// order and with its tie rules: allowed-token mask -> temperature -> top-k ->
// top-p -> min-p -> draw. Logit bias and penalties are not here (the host
// sampler runs those requests). The uniform draw u in [0, 1) comes from the host
// sampler's RNG stream; OUT says whether it was used (the CPU sampler takes one
// only when more than one candidate is left), so the host stream stays in step.
//
// Order: "descending by logit, ties by lower id" is the 64-bit key
// (ordered bits of the logit, ~id), larger first. Every "which token" question
// (k-th value, top-p cut, the draw's crossing) is a bit-by-bit search for the
// largest key whose prefix sum satisfies a predicate: 32 or 64 reductions over
// the row, no sort. Sums are f32 in another order than the CPU's (double), so
// the two can differ only where the draw falls within rounding of a boundary.
struct P { rows: u32, stride: u32, off: u32, pad: u32 }
// Per row: n, top_k, flags (bit 0: a mask; bit 1: chained, the row's previous draw was
// not read back yet), mask offset (words), temperature, top_p, min_p, u, and u_if_used:
// the uniform after u in the host stream, taken instead of u when the previous draw of a
// chained row used its uniform (OUT of that draw, still in place when this one starts).
struct Row { n: u32, top_k: u32, flags: u32, mask_off: u32, temperature: f32, top_p: f32, min_p: f32, u: f32,
             u_if_used: f32, pad0: u32, pad1: u32, pad2: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> L: array<f32>;
@group(0) @binding(2) var<storage, read> R: array<Row>;
@group(0) @binding(3) var<storage, read> M: array<u32>;
@group(0) @binding(4) var<storage, read_write> S: array<f32>;   // [rows, 2n]: processed logits, then masses
@group(0) @binding(5) var<storage, read_write> OUT: array<i32>;  // [rows, 4]: token, used u, first NaN, first non-finite
@group(0) @binding(6) var<storage, read_write> IX: array<u32>;   // [rows, n]: the ids of top-k's candidates

// Threads per row: 256, or 64 for short rows (WG64: fewer idle threads per barrier).
//#if WG64
const WG: u32 = 64u;
//#else
const WG: u32 = 256u;
//#endif
const NONE: u32 = 0xFFFFFFFFu;
var<workgroup> red_f: array<f32, 256>;
var<workgroup> red_g: array<f32, 256>;
var<workgroup> red_u: array<u32, 256>;
var<workgroup> res_f: f32;
var<workgroup> res_g: f32;
var<workgroup> res_u: u32;
var<workgroup> prm: array<u32, 8>;
var<workgroup> hist: array<atomic<u32>, 256>;
var<workgroup> listed: atomic<u32>;

var<private> lid: u32;
// The row (set once, before any reduction): its length, the S offsets of its
// processed logits and of its masses (-1: not a candidate).
var<private> n: u32;
var<private> wb: u32;
var<private> eb: u32;
// The candidates after top-k: ids IX[xb .. xb + cn) (listed), else all n ids.
var<private> xb: u32;
var<private> cn: u32;
var<private> listed_ids: bool;

fn cand_id(j: u32) -> u32 { return select(j, IX[xb + j], listed_ids); }

fn neg_inf() -> f32 { return bitcast<f32>(0xFF800000u); }

// Order-preserving bits of a float (no NaN here; -0 counts as +0, as == does).
fn okey(v: f32) -> u32 {
  let b = bitcast<u32>(select(v, 0.0, v == 0.0));
  return select(b ^ 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}
fn ofloat(k: u32) -> f32 { return bitcast<f32>(select(~k, k ^ 0x80000000u, (k & 0x80000000u) != 0u)); }

fn key(i: u32, sorted: bool) -> vec2<u32> {
  return vec2<u32>(select(0u, okey(S[wb + i]), sorted), ~i);  // unsorted: id order
}
fn key_gt(a: vec2<u32>, b: vec2<u32>) -> bool { return a.x > b.x || (a.x == b.x && a.y > b.y); }

fn sum2(a: f32, b: f32) -> vec2<f32> {
  red_f[lid] = a;
  red_g[lid] = b;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lid < s) {
      red_f[lid] += red_f[lid + s];
      red_g[lid] += red_g[lid + s];
    }
    workgroupBarrier();
  }
  if (lid == 0u) {
    res_f = red_f[0];
    res_g = red_g[0];
  }
  return vec2<f32>(workgroupUniformLoad(&res_f), workgroupUniformLoad(&res_g));
}
fn max_f(a: f32) -> f32 {
  red_f[lid] = a;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lid < s) { red_f[lid] = max(red_f[lid], red_f[lid + s]); }
    workgroupBarrier();
  }
  if (lid == 0u) { res_f = red_f[0]; }
  return workgroupUniformLoad(&res_f);
}
fn min_u(a: u32) -> u32 {
  red_u[lid] = a;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lid < s) { red_u[lid] = min(red_u[lid], red_u[lid + s]); }
    workgroupBarrier();
  }
  if (lid == 0u) { res_u = red_u[0]; }
  return workgroupUniformLoad(&res_u);
}

// (mass, count) of the candidates with key > k (or >= k when ge).
fn above(k: vec2<u32>, ge: bool, sorted: bool) -> vec2<f32> {
  var m = 0.0;
  var c = 0.0;
  for (var j = lid; j < cn; j += WG) {
    let i = cand_id(j);
    let e = S[eb + i];
    let ki = key(i, sorted);
    if (e >= 0.0 && (key_gt(ki, k) || (ge && all(ki == k)))) {
      m += e;
      c += 1.0;
    }
  }
  return sum2(m, c);
}

fn pred(mode: u32, r: vec2<f32>, a: f32, t: f32) -> bool {
  if (mode == 1u) { return r.y >= t; }
  if (mode == 2u) { return a - r.x <= t; }
  return r.x > t;
}

// The largest key k for which pred(above(k, ge)) holds (the answer is 0 when it
// holds nowhere). mode 1: count >= t (the last of t candidates); 2: a - mass <= t
// (top-p: just below the last kept key); 3: mass > t (the draw's crossing). In
// logit order the logit half of the key goes first, and the id half only when
// several candidates share the logit found (a tie); in id order only the id half.
fn search(mode: u32, a: f32, t: f32, sorted: bool) -> vec2<u32> {
  var k = vec2<u32>(0u, 0u);
  let ge = mode != 2u;
  if (sorted) {
    for (var b = 0u; b < 32u; b++) {
      var c = k;
      c.x = k.x | (1u << (31u - b));
      k = select(k, c, pred(mode, above(c, ge, sorted), a, t));
    }
    var cnt = 0.0;
    var first = NONE;
    for (var j = lid; j < cn; j += WG) {
      let i = cand_id(j);
      if (S[eb + i] >= 0.0 && okey(S[wb + i]) == k.x) {
        cnt += 1.0;
        first = min(first, i);
      }
    }
    let tie = sum2(cnt, 0.0).x;
    let id = min_u(first);
    if (tie <= 1.0) {
      // One candidate there: its key (mode 2: just below it). None: no candidate
      // has this logit, and any id half gives the same answer.
      if (tie == 1.0) { k.y = select(~id, ~id - 1u, mode == 2u); }
      return k;
    }
  }
  for (var b = 0u; b < 32u; b++) {
    var c = k;
    c.y = k.y | (1u << (31u - b));
    k = select(k, c, pred(mode, above(c, ge, sorted), a, t));
  }
  return k;
}

// The draw in id order over the whole row (no top-k, no top-p): each thread sums
// a contiguous run of ids, thread 0 finds the run where the running mass passes
// `goal`, and that run's thread walks it. NONE-free: when rounding leaves the
// crossing past the end, the last candidate (the CPU's rule).
fn draw_in_id_order(goal: f32) -> u32 {
  let run = (n + WG - 1u) / WG;
  let lo = min(n, lid * run);
  let hi = min(n, lo + run);
  var part = 0.0;
  var last = NONE;
  for (var i = lo; i < hi; i++) {
    let e = S[eb + i];
    if (e >= 0.0) {
      part += e;
      last = i;
    }
  }
  red_f[lid] = part;
  red_u[lid] = last;
  workgroupBarrier();
  if (lid == 0u) {
    var acc = 0.0;
    var t = NONE;
    var end = NONE;
    for (var q = 0u; q < WG; q++) {
      if (red_u[q] != NONE) { end = red_u[q]; }
      if (t == NONE && acc + red_f[q] > goal) {
        t = q;
        res_f = acc;
      }
      if (t == NONE) { acc += red_f[q]; }
    }
    prm[3] = t;
    prm[4] = end;
  }
  let q = workgroupUniformLoad(&prm);
  if (q[3] == NONE) { return q[4]; }
  if (lid == q[3]) {
    var acc = res_f;
    var pick = last;  // rounding: the run's last candidate
    for (var i = lo; i < hi; i++) {
      let e = S[eb + i];
      if (e >= 0.0) {
        acc += e;
        if (acc > goal) {
          pick = i;
          break;
        }
      }
    }
    prm[5] = pick;
  }
  return workgroupUniformLoad(&prm)[5];
}

// The first candidate in logit order: the largest logit mx, lowest id among equals.
fn first_key(mx: f32) -> vec2<u32> {
  var f = NONE;
  for (var j = lid; j < cn; j += WG) {
    let i = cand_id(j);
    if (S[eb + i] >= 0.0 && S[wb + i] == mx) { f = min(f, i); }
  }
  return vec2<u32>(okey(mx), ~min_u(f));
}

// Argmax of the processed logits, lowest id on ties; the lowest allowed id when
// that is at -inf under a mask (Sampler::fallback_token).
fn fallback(has_mask: bool, first_allowed: u32) -> u32 {
  var m = neg_inf();
  for (var i = lid; i < n; i += WG) { m = max(m, S[wb + i]); }
  let mx = max_f(m);
  var j = NONE;
  for (var i = lid; i < n; i += WG) {
    if (S[wb + i] == mx) { j = min(j, i); }
  }
  let t = min_u(j);
  if (has_mask && mx == neg_inf()) { return first_allowed; }
  return t;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) li: vec3<u32>) {
  lid = li.x;
  let r = wg.x;
  if (lid == 0u) {
    let row = R[r];
    prm[0] = row.n;
    prm[1] = row.top_k;
    prm[2] = row.flags;
    prm[3] = row.mask_off;
    prm[4] = bitcast<u32>(row.temperature);
    prm[5] = bitcast<u32>(row.top_p);
    prm[6] = bitcast<u32>(row.min_p);
    var u = row.u;
    if ((row.flags & 2u) != 0u && OUT[r * 4u + 1u] != 0) { u = row.u_if_used; }
    prm[7] = bitcast<u32>(u);
  }
  let q = workgroupUniformLoad(&prm);
  n = q[0];
  let top_k = q[1];
  let has_mask = (q[2] & 1u) != 0u;
  let moff = q[3];
  let temp = bitcast<f32>(q[4]);
  let top_p = bitcast<f32>(q[5]);
  let min_p = bitcast<f32>(q[6]);
  let u = bitcast<f32>(q[7]);
  let lb = p.off + r * p.stride;
  wb = r * 2u * n;
  eb = wb + n;
  xb = r * n;
  cn = n;
  listed_ids = false;
  var sorted = false;
  let ninf = neg_inf();

  // The row: NaN / non-finite scan, the mask (before every other stage).
  var nan_at = NONE;
  var nf_at = NONE;
  var allowed_at = NONE;
  for (var i = lid; i < n; i += WG) {
    let v = L[lb + i];
    let b = bitcast<u32>(v);
    if ((b & 0x7F800000u) == 0x7F800000u) {
      nf_at = min(nf_at, i);
      if ((b & 0x007FFFFFu) != 0u) { nan_at = min(nan_at, i); }
    }
    var w = v;
    if (has_mask) {
      if (((M[moff + i / 32u] >> (i % 32u)) & 1u) == 0u) {
        w = ninf;
      } else {
        allowed_at = min(allowed_at, i);
      }
    }
    S[wb + i] = w;
    S[eb + i] = 0.0;
  }
  let first_nan = min_u(nan_at);
  let first_nf = min_u(nf_at);
  let first_allowed = min_u(allowed_at);
  storageBarrier();
  var tok = 0u;
  var used = false;
  if (first_nan != NONE) {
    tok = NONE;
  } else if (temp == 0.0) {
    tok = fallback(has_mask, first_allowed);  // greedy
  } else {
    if (top_k > 0u && top_k < n) {
      // The k-th largest raw value: the largest key with at least k values >= it,
      // 8 bits a pass (a histogram of the next byte among the keys that share the
      // bytes found so far).
      var kk = 0u;
      var above_k = 0u;  // values whose key's found bytes are larger than kk's
      for (var pz = 0u; pz < 4u; pz++) {
        let shift = 24u - 8u * pz;
        atomicStore(&hist[lid], 0u);
        if (WG < 256u) {
          for (var h = lid + WG; h < 256u; h += WG) { atomicStore(&hist[h], 0u); }
        }
        workgroupBarrier();
        for (var i = lid; i < n; i += WG) {
          let key = okey(S[wb + i]);
          if (pz == 0u || (key >> (shift + 8u)) == (kk >> (shift + 8u))) {
            atomicAdd(&hist[(key >> shift) & 255u], 1u);
          }
        }
        workgroupBarrier();
        if (lid == 0u) {
          var cum = above_k;
          var d = 0u;
          for (var b = 255; b >= 0; b--) {
            let h = atomicLoad(&hist[u32(b)]);
            if (cum + h >= top_k) {
              d = u32(b);
              break;
            }
            cum += h;
          }
          prm[0] = kk | (d << shift);
          prm[1] = cum;
        }
        let q2 = workgroupUniformLoad(&prm);
        kk = q2[0];
        above_k = q2[1];
      }
      let kth = ofloat(kk);
      let kth_scaled = kth / temp;
      let fin = (bitcast<u32>(kth) & 0x7F800000u) != 0x7F800000u;
      let near = select(kth, kth - abs(kth) * 1e-5, fin);
      if (lid == 0u) { atomicStore(&listed, 0u); }
      storageBarrier();
      workgroupBarrier();
      for (var i = lid; i < n; i += WG) {
        let w = S[wb + i];
        let keep = w != ninf && (w >= kth || (w >= near && w / temp >= kth_scaled));
        S[eb + i] = select(-1.0, 0.0, keep);
        if (keep) {
          if (temp != 1.0) { S[wb + i] = w / temp; }
          IX[xb + atomicAdd(&listed, 1u)] = i;
        }
      }
      storageBarrier();
      workgroupBarrier();
      if (lid == 0u) { prm[2] = atomicLoad(&listed); }
      cn = workgroupUniformLoad(&prm)[2];
      listed_ids = true;
      sorted = true;
    } else if (temp != 1.0) {
      for (var i = lid; i < n; i += WG) { S[wb + i] = S[wb + i] / temp; }
    }
    storageBarrier();
    // Masses relative to the largest candidate.
    var m = ninf;
    for (var j = lid; j < cn; j += WG) {
      let i = cand_id(j);
      if (S[eb + i] >= 0.0) { m = max(m, S[wb + i]); }
    }
    let mx = max_f(m);
    for (var j = lid; j < cn; j += WG) {
      let i = cand_id(j);
      let w = S[wb + i];
      if (S[eb + i] >= 0.0) { S[eb + i] = select(exp(w - mx), 0.0, w == ninf || mx == ninf); }
    }
    storageBarrier();
    if (top_p < 1.0) {
      // Keep the prefix (in order) while the mass at or below a token exceeds (1 - p) z.
      let z = above(vec2<u32>(0u, 0u), true, false).x;
      let floor_mass = (1.0 - top_p) * z;
      if (!listed_ids) {
        // As the CPU sampler: a token whose mass is below floor_mass / candidates has
        // only smaller ones below it, so top-p removes it; the rest are listed, and the
        // searches scan only them (few for a peaked distribution).
        let tiny = floor_mass / f32(cn);
        if (lid == 0u) { atomicStore(&listed, 0u); }
        workgroupBarrier();
        for (var i = lid; i < n; i += WG) {
          let e = S[eb + i];
          if (e >= 0.0) {
            if (e < tiny) {
              S[eb + i] = -1.0;
            } else {
              IX[xb + atomicAdd(&listed, 1u)] = i;
            }
          }
        }
        storageBarrier();
        workgroupBarrier();
        if (lid == 0u) { prm[2] = atomicLoad(&listed); }
        cn = workgroupUniformLoad(&prm)[2];
        listed_ids = true;
      }
      sorted = true;
      let first = first_key(mx);
      let cut = search(2u, z, floor_mass, sorted);
      for (var j = lid; j < cn; j += WG) {
        let i = cand_id(j);
        let ki = key(i, sorted);
        if (S[eb + i] >= 0.0 && !key_gt(ki, cut) && !all(ki == first)) { S[eb + i] = -1.0; }
      }
      storageBarrier();
    }
    if (min_p > 0.0) {
      let thresh = mx + log(min_p);
      for (var j = lid; j < cn; j += WG) {
        let i = cand_id(j);
        let l = S[wb + i];
        if (S[eb + i] >= 0.0) {
          var keep = false;
          if (l > thresh + 1e-6) {
            keep = true;
          } else if (l < thresh - 1e-6) {
            keep = false;
          } else {
            keep = !(exp(l - mx) < min_p);
          }
          if (!keep) { S[eb + i] = -1.0; }
        }
      }
      storageBarrier();
    }
    // Candidates at -inf have no probability.
    for (var j = lid; j < cn; j += WG) {
      let i = cand_id(j);
      if (S[wb + i] == ninf) { S[eb + i] = -1.0; }
    }
    storageBarrier();
    let tot = above(vec2<u32>(0u, 0u), true, sorted);
    if (tot.y == 0.0) {
      tok = fallback(has_mask, first_allowed);
    } else if (tot.y == 1.0) {
      var f = NONE;
      for (var j = lid; j < cn; j += WG) {
        let i = cand_id(j);
        if (S[eb + i] >= 0.0) { f = min(f, i); }
      }
      tok = min_u(f);
    } else {
      used = true;
      let goal = u * tot.x;
      if (!sorted && !listed_ids) {
        tok = draw_in_id_order(goal);
      } else {
        let k = search(3u, 0.0, goal, sorted);
        if (k.x == 0u && k.y == 0u) {
          tok = ~search(1u, 0.0, tot.y, sorted).y;  // u within rounding of z: the last candidate
        } else {
          tok = ~k.y;
        }
      }
    }
  }
  if (lid == 0u) {
    OUT[r * 4u] = bitcast<i32>(tok);
    OUT[r * 4u + 1u] = select(0, 1, used);
    OUT[r * 4u + 2u] = bitcast<i32>(first_nan);
    OUT[r * 4u + 3u] = bitcast<i32>(first_nf);
  }
}
