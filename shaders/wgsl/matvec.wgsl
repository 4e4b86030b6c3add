// Matrix-vector products for a few tokens (decode): y[t, row0 + r] = sum_k x[t, k] W[r, k]
// (+ bias), for the rows of one weight chunk, K a multiple of 32. TPR lanes share a row
// (TPR8/TPR16/TPR32/TPR64/TPR128), each summing whole 32-value chunks in registers (mvdot.wgsl, MV),
// then the lanes' sums are added by subgroup shuffles (SG, when the dispatch's subgroups hold
// TPR lanes) or through workgroup memory.
// Up to NT tokens (NT1/NT2/NT4) per workgroup, grid z covers the rest; the weights are
// read once for them. U2 (one token, not KS): two chunks a step per lane. Variant SWIGLU: two weights, y = silu(x Wg) * (x Wu).
// Same parameters as matmul.wgsl (r_off at the end here), and its epilogues (GELU, GELU_TANH, ADD).
// QKV (fused_qkv): three weights (W, W2, W3, rows nq, nk, nrows - nq - nk) into three
// outputs (Y, Y2, Y3), each row's weight picked by its index (uniform over a row's lanes).
// KS (Q4_K / Q6_K weights): each lane sums 32-value slots of whole super-blocks
// (mvdot.wgsl deq_ks_*), read as 16-byte words where the encoding allows (WV, WV2, WV3: the
// weights bound as vec4<u32> in place of W, W2, W3), for each of the NT tokens; R2 (KS of one
// token, without QKV): two rows a lane group, the activation loads shared.
// NORM (fused_norm_*): the products take rms_norm(x) = x * r * w (r = 1 / sqrt(mean(x^2) + eps) per
// token, w the norm weight, as 1 + w with plus_one): the workgroup first sums each of its tokens' x^2,
// the dots read x * w (xv), and each row's sum is scaled by its token's r before bias and epilogue.
struct P {
  K: u32, T: u32, rb: u32, x_off: u32,
  y_off: u32, ldy: u32, row0: u32, nrows: u32,
  nx: u32, has_bias: u32, rb2: u32, nq: u32,
  nk: u32, rb3: u32, y2_off: u32, y3_off: u32,
  r_off: u32, eps: f32, plus_one: u32, pad2: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> W: array<u32>;
@group(0) @binding(2) var<storage, read> XV: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;
@group(0) @binding(12) var<storage, read> WV: array<vec4<u32>>;
@group(0) @binding(13) var<storage, read> WV2: array<vec4<u32>>;
@group(0) @binding(14) var<storage, read> WV3: array<vec4<u32>>;
//#if BIAS
@group(0) @binding(4) var<storage, read> B: array<f32>;
//#endif
//#if SWIGLU
@group(0) @binding(5) var<storage, read> W2: array<u32>;
//#endif
//#if ADD
@group(0) @binding(11) var<storage, read> R: array<f32>;
//#endif
//#include epilogue
// The activation vec4 i (mvdot.wgsl reads every activation through this).
//#if NORM
@group(0) @binding(15) var<storage, read> NW: array<vec4<f32>>;
var<private> xg0: u32;  // the first vec4 of the token being summed (the norm weight's index 0)
fn xv(i: u32) -> vec4<f32> {
  var w = NW[i - xg0];
  if (p.plus_one != 0u) { w += vec4<f32>(1.0); }
  return XV[i] * w;
}
fn setx(b: u32) { xg0 = b; }
//#else
fn xv(i: u32) -> vec4<f32> { return XV[i]; }
fn setx(b: u32) {}
//#endif
//#if QKV
@group(0) @binding(5) var<storage, read> W2: array<u32>;
@group(0) @binding(6) var<storage, read> W3: array<u32>;
@group(0) @binding(7) var<storage, read_write> Y2: array<f32>;
@group(0) @binding(8) var<storage, read_write> Y3: array<f32>;
//#if BIAS
@group(0) @binding(9) var<storage, read> B2: array<f32>;
@group(0) @binding(10) var<storage, read> B3: array<f32>;
//#endif
// The row's weight (0: W, 1: W2, 2: W3), set once per invocation.
var<private> which: u32;
fn mvx(rb: u32, c: u32, xb: u32) -> f32 {
  if (which == 0u) { return MV(rb, c, xb); }
  if (which == 1u) { return MV2(rb, c, xb); }
  return MV3(rb, c, xb);
}
//#if KS
fn ksx(rb: u32, s: u32, xb: u32) -> f32 {
  if (which == 0u) { return KS(rb, s, xb); }
  if (which == 1u) { return KS2(rb, s, xb); }
  return KS3(rb, s, xb);
}
//#endif
//#else
fn mvx(rb: u32, c: u32, xb: u32) -> f32 { return MV(rb, c, xb); }
//#if KS
fn ksx(rb: u32, s: u32, xb: u32) -> f32 { return KS(rb, s, xb); }
//#endif
//#endif
// One step of a lane's sum: chunk c (or, KS, slot c) of the row at byte rb against the token at xb;
// dot2 the second weight's (SWIGLU).
//#if KS
fn dot1(rb: u32, c: u32, xb: u32) -> f32 { return ksx(rb, c, xb); }
//#if SWIGLU
fn dot2(rb: u32, c: u32, xb: u32) -> f32 { return KS2(rb, c, xb); }
//#endif
//#else
fn dot1(rb: u32, c: u32, xb: u32) -> f32 { return mvx(rb, c, xb); }
//#if SWIGLU
fn dot2(rb: u32, c: u32, xb: u32) -> f32 { return MV2(rb, c, xb); }
//#endif
//#endif

//#if TPR8
const TPR = 8u;
//#endif
//#if TPR16
const TPR = 16u;
//#endif
//#if TPR32
const TPR = 32u;
//#endif
//#if TPR64
const TPR = 64u;
//#endif
//#if TPR128
const TPR = 128u;
//#endif
//#if NT1
const NT = 1u;
//#endif
//#if NT2
const NT = 2u;
//#endif
//#if NT4
const NT = 4u;
//#endif
const WG = 128u;

var<workgroup> red: array<vec4<f32>, WG>;
//#if SWIGLU
var<workgroup> red2: array<vec4<f32>, WG>;
//#endif

// Token lane i of a holds the sum for token t0 + i (named lanes, not an indexed array: a
// GPU compiler keeps them in registers).
@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32
//#if SG
        , @builtin(subgroup_size) sgs: u32
//#endif
) {
//#if R2
  // KS, not QKV: two rows a lane group, rg and rg + 1 (the second's sums in a.y, u.y), the
  // activation loads shared
  let rg = 2u * ((wid.x + wid.y * p.nx) * (WG / TPR) + li / TPR);
//#else
  let rg = (wid.x + wid.y * p.nx) * (WG / TPR) + li / TPR;
//#endif
  let lane = li % TPR;
  let t0 = wid.z * NT;
  let xs = p.K / 4u;
//#if NORM
  // each of the workgroup's tokens' sum of x^2 (token i in component i), by every invocation
  var ss = vec4<f32>(0.0);
  for (var i = 0u; i < NT; i++) {
    if (t0 + i < p.T) {
      let b = p.x_off / 4u + (t0 + i) * xs;
      var acc = 0.0;
      for (var k = li; k < xs; k += WG) {
        let v = XV[b + k];
        acc = fma(v.x, v.x, fma(v.y, v.y, fma(v.z, v.z, fma(v.w, v.w, acc))));
      }
      ss[i] = acc;
    }
  }
  red[li] = ss;
  workgroupBarrier();
  for (var o = WG / 2u; o > 0u; o >>= 1u) {
    if (li < o) { red[li] += red[li + o]; }
    workgroupBarrier();
  }
  let nr = vec4<f32>(1.0) / sqrt(red[0] / f32(p.K) + vec4<f32>(p.eps));
  workgroupBarrier();  // red holds the rows' sums next
//#endif
  var a = vec4<f32>(0.0);
//#if SWIGLU
  var u = vec4<f32>(0.0);
//#endif
//#if QKV
  // r: the row within its own weight
  var r = rg;
  var rbytes = p.rb;
  which = 0u;
  if (rg >= p.nq + p.nk) {
    which = 2u;
    r = rg - p.nq - p.nk;
    rbytes = p.rb3;
  } else if (rg >= p.nq) {
    which = 1u;
    r = rg - p.nq;
    rbytes = p.rb2;
  }
//#else
  let r = rg;
  let rbytes = p.rb;
//#endif
  if (rg < p.nrows) {
    let rb = r * rbytes;
//#if SWIGLU
    let rb2 = r * p.rb2;
//#endif
    let xb = p.x_off / 4u + t0 * xs;
    let nt = min(NT, p.T - t0);
    let nch = p.K / 32u;
//#if U2
    // one token, two chunks a step (c and c + TPR; a missing second chunk re-reads the last
    // one and counts zero): twice the loads in flight per lane
    setx(xb);
    for (var c = lane; c < nch; c += 2u * TPR) {
      let c2 = min(c + TPR, nch - 1u);
      let k2 = select(0.0, 1.0, c + TPR < nch);
      a.x += mvx(rb, c, xb) + k2 * mvx(rb, c2, xb);
//#if SWIGLU
      u.x += MV2(rb2, c, xb) + k2 * MV2(rb2, c2, xb);
//#endif
    }
//#else
//#if R2
    // the second row, clamped to the last (its sum is then not written)
    let r1 = min(r + 1u, p.nrows - 1u);
//#endif
    // chunks (KS: 32-value slots of whole super-blocks) c, c + TPR, .. of the row, for each token
    for (var c = lane; c < nch; c += TPR) {
      setx(xb);
      a.x += dot1(rb, c, xb);
//#if SWIGLU
      u.x += dot2(rb2, c, xb);
//#endif
      if (NT > 1u && nt > 1u) {
        setx(xb + xs);
        a.y += dot1(rb, c, xb + xs);
//#if SWIGLU
        u.y += dot2(rb2, c, xb + xs);
//#endif
      }
      if (NT > 2u && nt > 2u) {
        setx(xb + 2u * xs);
        a.z += dot1(rb, c, xb + 2u * xs);
//#if SWIGLU
        u.z += dot2(rb2, c, xb + 2u * xs);
//#endif
      }
      if (NT > 3u && nt > 3u) {
        setx(xb + 3u * xs);
        a.w += dot1(rb, c, xb + 3u * xs);
//#if SWIGLU
        u.w += dot2(rb2, c, xb + 3u * xs);
//#endif
      }
//#if R2
      // (one token: the second row's sums in a.y, u.y)
      setx(xb);
      a.y += dot1(r1 * rbytes, c, xb);
//#if SWIGLU
      u.y += dot2(r1 * p.rb2, c, xb);
//#endif
//#endif
    }
//#endif
  }
//#if SG
  // subgroups of at least TPR lanes (the size is the same for the whole dispatch): shuffles
  if (sgs >= TPR) {
    for (var o = TPR / 2u; o > 0u; o >>= 1u) {
      a += subgroupShuffleXor(a, o);
//#if SWIGLU
      u += subgroupShuffleXor(u, o);
//#endif
    }
  } else {
//#endif
  red[li] = a;
//#if SWIGLU
  red2[li] = u;
//#endif
  workgroupBarrier();
  for (var o = TPR / 2u; o > 0u; o >>= 1u) {
    if (lane < o) {
      red[li] += red[li + o];
//#if SWIGLU
      red2[li] += red2[li + o];
//#endif
    }
    workgroupBarrier();
  }
  a = red[li];
//#if SWIGLU
  u = red2[li];
//#endif
//#if SG
  }
//#endif
//#if NORM
  // the sums of x * w times r (R2: both rows are token t0's)
//#if R2
  a *= nr.x;
//#if SWIGLU
  u *= nr.x;
//#endif
//#else
  a *= nr;
//#if SWIGLU
  u *= nr;
//#endif
//#endif
//#endif
//#if R2
  if (lane == 0u) {
    for (var i = 0u; i < 2u; i++) {
      let rr = rg + i;
      if (rr < p.nrows) {
        var v = a[i];
//#if BIAS
        v += B[p.row0 + rr];
//#endif
        v = epi(v, 0u, p.row0 + rr);
//#if SWIGLU
        v = silu(v) * u[i];
//#endif
        Y[p.y_off + p.row0 + rr] = v;
      }
    }
  }
//#else
  if (lane == 0u && rg < p.nrows) {
    for (var i = 0u; i < NT; i++) {
      let t = t0 + i;
      if (t < p.T) {
        var v = a[i];
//#if QKV
        if (which == 0u) {
//#if BIAS
          v += B[r];
//#endif
          Y[p.y_off + t * p.nq + r] = v;
        } else if (which == 1u) {
//#if BIAS
          v += B2[r];
//#endif
          Y2[p.y2_off + t * p.nk + r] = v;
        } else {
//#if BIAS
          v += B3[r];
//#endif
          Y3[p.y3_off + t * (p.nrows - p.nq - p.nk) + r] = v;
        }
//#else
//#if BIAS
        v += B[p.row0 + r];
//#endif
        v = epi(v, t, p.row0 + r);
//#if SWIGLU
        v = silu(v) * u[i];
//#endif
        Y[p.y_off + t * p.ldy + p.row0 + r] = v;
//#endif
      }
    }
  }
//#endif
}
