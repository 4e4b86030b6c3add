// Dot products of one 32-value chunk `c` of the weight row starting at byte `rb` (blocks in
// the device layout of dequant.wgsl) with
// 32 activations, for the matrix-vector kernel (matvec.wgsl). `xb` is the token's first
// vec4 in XV, read through matvec.wgsl's xv (NORM: times the norm weight). The weights are decoded in registers, four values at a time, and never
// stored; each value is formed as the dequantizer forms it (d * (q - z) or d * q + m, as
// dequant.wgsl), never as d * sum(q x) - m * sum(x): that difference of two large sums
// loses the low bits the precise mode keeps (measured on a qwen05-shaped model). Only encodings whose
// chunk decodes in whole words are here; the others take the row kernel (matmul.wgsl).
// Every loop over a chunk is marked `//#unroll`: the shader preprocessor writes it out as
// straight-line code (wgpu_backend.cc, preprocess), so that the GPU compiler can issue a
// chunk's loads together (measured faster on the H200: SwiGLU q4_k 38.8 -> 28.3 us).
// The helpers (hsum, nib4, sb4, hb4, SH4) live in common.wgsl, copied and renamed with these
// decoders for a second and third weight.
fn deq_mv_f32(rb: u32, c: u32, xb: u32) -> f32 {
  let w0 = (rb >> 2u) + c * 32u;
  let x0 = xb + c * 8u;
  var s = vec4<f32>(0.0);
  //#unroll
  for (var i = 0u; i < 8u; i++) {
    let w = vec4<f32>(bitcast<f32>(W[w0 + 4u * i]), bitcast<f32>(W[w0 + 4u * i + 1u]),
                      bitcast<f32>(W[w0 + 4u * i + 2u]), bitcast<f32>(W[w0 + 4u * i + 3u]));
    s = fma(w, xv(x0 + i), s);
  }
  return hsum(s);
}
fn deq_mv_f16(rb: u32, c: u32, xb: u32) -> f32 {
  let w0 = (rb >> 2u) + c * 16u;
  let x0 = xb + c * 8u;
  var s = vec4<f32>(0.0);
  //#unroll
  for (var i = 0u; i < 8u; i++) {
    let w = vec4<f32>(unpack2x16float(W[w0 + 2u * i]), unpack2x16float(W[w0 + 2u * i + 1u]));
    s = fma(w, xv(x0 + i), s);
  }
  return hsum(s);
}
fn deq_mv_bf16(rb: u32, c: u32, xb: u32) -> f32 {
  let w0 = (rb >> 2u) + c * 16u;
  let x0 = xb + c * 8u;
  var s = vec4<f32>(0.0);
  //#unroll
  for (var i = 0u; i < 8u; i++) {
    let a = W[w0 + 2u * i];
    let b = W[w0 + 2u * i + 1u];
    let w = bitcast<vec4<f32>>(vec4<u32>(a << 16u, a & 0xffff0000u, b << 16u, b & 0xffff0000u));
    s = fma(w, xv(x0 + i), s);
  }
  return hsum(s);
}
fn deq_mv_q8_0(rb: u32, c: u32, xb: u32) -> f32 {
  let o = rb + c * 36u;
  let x0 = xb + c * 8u;
  var s = vec4<f32>(0.0);
  //#unroll
  for (var j = 0u; j < 8u; j++) {
    s = fma(sb4(W[(o >> 2u) + j]), xv(x0 + j), s);
  }
  return h16(o + 32u) * hsum(s);
}
// 32-value blocks of 4-bit codes: byte i holds values i (low nibble) and i + 16 (high).
fn deq_mv_q4_0(rb: u32, c: u32, xb: u32) -> f32 {
  let o = rb + c * 20u;
  let x0 = xb + c * 8u;
  let d = h16(o + 16u);
  var s = vec4<f32>(0.0);
  //#unroll
  for (var j = 0u; j < 4u; j++) {
    let v = W[(o >> 2u) + j];
    s = fma(d * (nib4(v, 0u) - 8.0), xv(x0 + j), fma(d * (nib4(v, 4u) - 8.0), xv(x0 + 4u + j), s));
  }
  return hsum(s);
}
fn deq_mv_q4_1(rb: u32, c: u32, xb: u32) -> f32 {
  let o = rb + c * 20u;
  let x0 = xb + c * 8u;
  let d = h16(o);
  let m = h16(o + 2u);
  var s = vec4<f32>(0.0);
  //#unroll
  for (var j = 0u; j < 4u; j++) {
    let v = W[(o >> 2u) + 1u + j];
    s = fma(d * nib4(v, 0u) + m, xv(x0 + j), fma(d * nib4(v, 4u) + m, xv(x0 + 4u + j), s));
  }
  return hsum(s);
}
fn deq_mv_q5_0(rb: u32, c: u32, xb: u32) -> f32 {
  let o = rb + c * 24u;
  let x0 = xb + c * 8u;
  let qh = W[o >> 2u];
  let d = h16(o + 20u);
  var s = vec4<f32>(0.0);
  //#unroll
  for (var j = 0u; j < 4u; j++) {
    let v = W[(o >> 2u) + 1u + j];
    s = fma(d * (nib4(v, 0u) + hb4(qh, 4u * j) - 16.0), xv(x0 + j),
            fma(d * (nib4(v, 4u) + hb4(qh, 16u + 4u * j) - 16.0), xv(x0 + 4u + j), s));
  }
  return hsum(s);
}
fn deq_mv_q5_1(rb: u32, c: u32, xb: u32) -> f32 {
  let o = rb + c * 24u;
  let x0 = xb + c * 8u;
  let qh = W[(o >> 2u) + 1u];
  let d = h16(o);
  let m = h16(o + 2u);
  var s = vec4<f32>(0.0);
  //#unroll
  for (var j = 0u; j < 4u; j++) {
    let v = W[(o >> 2u) + 2u + j];
    s = fma(d * (nib4(v, 0u) + hb4(qh, 4u * j)) + m, xv(x0 + j),
            fma(d * (nib4(v, 4u) + hb4(qh, 16u + 4u * j)) + m, xv(x0 + 4u + j), s));
  }
  return hsum(s);
}
// K-quants: chunk c is sub-block c % 8 of super-block c / 8 (docs/quant.md layouts).
fn deq_mv_q4_k(rb: u32, c: u32, xb: u32) -> f32 {
  let o = rb + (c / 8u) * 144u;
  let j = c % 8u;
  let sm = scale_min_k4(o + 4u, j);
  let qw = ((o + 16u) >> 2u) + 8u * (j / 2u);
  let sh = 4u * (j & 1u);
  let x0 = xb + c * 8u;
  let d = h16(o) * sm.x;
  let m = h16(o + 2u) * sm.y;
  var s = vec4<f32>(0.0);
  //#unroll
  for (var l = 0u; l < 8u; l++) {
    s = fma(d * nib4(W[qw + l], sh) - m, xv(x0 + l), s);
  }
  return hsum(s);
}
fn deq_mv_q5_k(rb: u32, c: u32, xb: u32) -> f32 {
  let o = rb + (c / 8u) * 176u;
  let j = c % 8u;
  let sm = scale_min_k4(o + 4u, j);
  let qw = ((o + 48u) >> 2u) + 8u * (j / 2u);
  let hw = (o + 16u) >> 2u;
  let sh = 4u * (j & 1u);
  let x0 = xb + c * 8u;
  let d = h16(o) * sm.x;
  let m = h16(o + 2u) * sm.y;
  var s = vec4<f32>(0.0);
  //#unroll
  for (var l = 0u; l < 8u; l++) {
    let hi = vec4<f32>(((vec4<u32>(W[hw + l]) >> (SH4 + j)) & vec4<u32>(1u)) << vec4<u32>(4u));
    s = fma(d * (nib4(W[qw + l], sh) + hi) - m, xv(x0 + l), s);
  }
  return hsum(s);
}
fn deq_mv_q6_k(rb: u32, c: u32, xb: u32) -> f32 {
  let o = rb + (c / 8u) * 212u;
  let j = c % 8u;
  let h = j / 4u;
  let r = j % 4u;
  let lo = o + 64u * h + 32u * (r & 1u);
  let hi = o + 128u + 32u * h;
  let x0 = xb + c * 8u;
  let d = h16(o + 208u);
  // scale a for the first 16 values, b for the last 16
  let a = d * f32(i8v(o + 192u + 8u * h + 2u * r));
  let b = d * f32(i8v(o + 193u + 8u * h + 2u * r));
  var s = vec4<f32>(0.0);
  //#unroll
  for (var l4 = 0u; l4 < 8u; l4++) {
    let q = vec4<f32>(((vec4<u32>(W[(lo + 4u * l4) >> 2u]) >> (SH4 + 4u * (r >> 1u))) & vec4<u32>(15u)) |
                 (((vec4<u32>(W[(hi + 4u * l4) >> 2u]) >> (SH4 + 2u * r)) & vec4<u32>(3u)) << vec4<u32>(4u)));
    s = fma(select(b, a, l4 < 4u) * (q - 32.0), xv(x0 + l4), s);
  }
  return hsum(s);
}


// Slots (matvec.wgsl KS, one token): slot s of a row is 32 values whose codes lie side by side
// in their super-block, so that the lanes of a subgroup, on consecutive slots, read
// consecutive bytes and each code byte once. The values are formed as in deq_mv_* above.
// Q4_K: slot t = s % 8 of super-block s / 8 is code bytes 16t .. 16t + 15 (one 16-byte load
// from WV, the weights as vec4<u32>; the row starts on 16 bytes: 144-byte blocks): low nibbles
// values 64(t/2) + 16(t%2) + i (sub-block 2(t/2)), high nibbles those + 32 (the next
// sub-block); d, dmin and the 12 scale bytes: the super-block's first 16 bytes, one load.
fn deq_ks_q4_k(rb: u32, s: u32, xb: u32) -> f32 {
  let sb = s / 8u;
  let t = s % 8u;
  let v0 = (rb >> 4u) + sb * 9u;
  let hd = WV[v0];
  let q = WV[v0 + 1u + t];
  let pr = t / 2u;
  let x0 = xb + sb * 64u + 16u * pr + 4u * (t & 1u);
  // scale_min_k4 of sub-blocks 2pr and 2pr + 1 from the scale words hd.y, hd.z, hd.w
  let sh = 16u * (pr & 1u);
  let y = hd.y >> sh;
  let z = hd.z >> sh;
  let w = hd.w >> sh;
  var sc = vec2<u32>(y & 63u, (y >> 8u) & 63u);
  var mn = vec2<u32>(z & 63u, (z >> 8u) & 63u);
  if (pr >= 2u) {
    sc = vec2<u32>((w & 15u) | ((y >> 2u) & 48u), ((w >> 8u) & 15u) | ((y >> 10u) & 48u));
    mn = vec2<u32>(((w >> 4u) & 15u) | ((z >> 2u) & 48u), ((w >> 12u) & 15u) | ((z >> 10u) & 48u));
  }
  let dm = unpack2x16float(hd.x);
  let d = dm.x * vec2<f32>(sc);
  let m = dm.y * vec2<f32>(mn);
  var a = vec4<f32>(0.0);
  a = fma(d.x * nib4(q.x, 0u) - m.x, xv(x0), a);
  a = fma(d.x * nib4(q.y, 0u) - m.x, xv(x0 + 1u), a);
  a = fma(d.x * nib4(q.z, 0u) - m.x, xv(x0 + 2u), a);
  a = fma(d.x * nib4(q.w, 0u) - m.x, xv(x0 + 3u), a);
  a = fma(d.y * nib4(q.x, 4u) - m.y, xv(x0 + 8u), a);
  a = fma(d.y * nib4(q.y, 4u) - m.y, xv(x0 + 9u), a);
  a = fma(d.y * nib4(q.z, 4u) - m.y, xv(x0 + 10u), a);
  a = fma(d.y * nib4(q.w, 4u) - m.y, xv(x0 + 11u), a);
  return hsum(a);
}
// Q6_K (212-byte blocks: words only): slot t = s % 8 of super-block s / 8 is half h = t / 4,
// positions l0 = 8(t%4) .. l0 + 7: ql bytes 64h + l0 + i (values 128h + l0 + i, high
// nibbles + 64) and 64h + 32 + l0 + i (values + 32, high nibbles + 96), qh bytes 32h + l0 + i
// (two bits of each of the four), scales 8h + l0/16 + 2g for the four groups g of 32.
fn deq_ks_q6_k(rb: u32, s: u32, xb: u32) -> f32 {
  let sb = s / 8u;
  let t = s % 8u;
  let h = t / 4u;
  let l0 = 8u * (t % 4u);
  let ob = (rb >> 2u) + sb * 53u;
  let d = unpack2x16float(W[ob + 52u]).x;
  let sw = vec2<u32>(W[ob + 48u + 2u * h], W[ob + 49u + 2u * h]);
  let ib = 8u * ((t % 4u) / 2u);
  // the four scales: bytes is and is + 2 of each scale word, signed
  let sg = d * vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(sw.x, sw.x, sw.y, sw.y) << (vec4<u32>(24u) - (vec4<u32>(ib) + vec4<u32>(0u, 16u, 0u, 16u)))) >> vec4<u32>(24u));
  let x0 = xb + sb * 64u + 32u * h + l0 / 4u;
  var a = vec4<f32>(0.0);
  //#unroll
  for (var k = 0u; k < 2u; k++) {
    let lq = W[ob + 16u * h + l0 / 4u + k];
    let lq2 = W[ob + 16u * h + 8u + l0 / 4u + k];
    let hq = W[ob + 32u + 8u * h + l0 / 4u + k];
    let q0 = (lq & 0x0f0f0f0fu) | ((hq << 4u) & 0x30303030u);
    let q1 = (lq2 & 0x0f0f0f0fu) | ((hq << 2u) & 0x30303030u);
    let q2 = ((lq >> 4u) & 0x0f0f0f0fu) | (hq & 0x30303030u);
    let q3 = ((lq2 >> 4u) & 0x0f0f0f0fu) | ((hq >> 2u) & 0x30303030u);
    a = fma(sg.x * (bytes4(q0) - 32.0), xv(x0 + k), a);
    a = fma(sg.y * (bytes4(q1) - 32.0), xv(x0 + 8u + k), a);
    a = fma(sg.z * (bytes4(q2) - 32.0), xv(x0 + 16u + k), a);
    a = fma(sg.w * (bytes4(q3) - 32.0), xv(x0 + 24u + k), a);
  }
  return hsum(a);
}

