// Dot products of one 32-value chunk `c` of the weight row starting at byte `rb` with
// 32 activations, for the matrix-vector kernel (matvec.wgsl). `xb` is the token's first
// vec4 in XV. The weights are decoded in registers, four values at a time, and never
// stored; each value is formed as the dequantizer forms it (d * (q - z) or d * q + m, as
// dequant.wgsl), never as d * sum(q x) - m * sum(x): that difference of two large sums
// loses the low bits the precise mode keeps (measured on a qwen05-shaped model). Only encodings whose
// chunk decodes in whole words are here; the others take the row kernel (matmul.wgsl).
// The steps over a chunk are written out (no loops): straight-line code lets the GPU
// compiler issue all of a chunk's loads before the first product (a loop of eight steps
// waited for each step's loads in turn).
// The helpers (hsum, nib4, sb4, hb4, SH4) live in matvec.wgsl: this file is copied for
// a second weight (W2) and they must exist once.
fn deq_mv_f32(rb: u32, c: u32, xb: u32) -> f32 {
  let w0 = (rb >> 2u) + c * 32u;
  let x0 = xb + c * 8u;
  var s = vec4<f32>(0.0);
  {  // i = 0
    let w = vec4<f32>(bitcast<f32>(W[w0 + 4u * 0u]), bitcast<f32>(W[w0 + 4u * 0u + 1u]),
                      bitcast<f32>(W[w0 + 4u * 0u + 2u]), bitcast<f32>(W[w0 + 4u * 0u + 3u]));
    s = fma(w, XV[x0 + 0u], s);
  }
  {  // i = 1
    let w = vec4<f32>(bitcast<f32>(W[w0 + 4u * 1u]), bitcast<f32>(W[w0 + 4u * 1u + 1u]),
                      bitcast<f32>(W[w0 + 4u * 1u + 2u]), bitcast<f32>(W[w0 + 4u * 1u + 3u]));
    s = fma(w, XV[x0 + 1u], s);
  }
  {  // i = 2
    let w = vec4<f32>(bitcast<f32>(W[w0 + 4u * 2u]), bitcast<f32>(W[w0 + 4u * 2u + 1u]),
                      bitcast<f32>(W[w0 + 4u * 2u + 2u]), bitcast<f32>(W[w0 + 4u * 2u + 3u]));
    s = fma(w, XV[x0 + 2u], s);
  }
  {  // i = 3
    let w = vec4<f32>(bitcast<f32>(W[w0 + 4u * 3u]), bitcast<f32>(W[w0 + 4u * 3u + 1u]),
                      bitcast<f32>(W[w0 + 4u * 3u + 2u]), bitcast<f32>(W[w0 + 4u * 3u + 3u]));
    s = fma(w, XV[x0 + 3u], s);
  }
  {  // i = 4
    let w = vec4<f32>(bitcast<f32>(W[w0 + 4u * 4u]), bitcast<f32>(W[w0 + 4u * 4u + 1u]),
                      bitcast<f32>(W[w0 + 4u * 4u + 2u]), bitcast<f32>(W[w0 + 4u * 4u + 3u]));
    s = fma(w, XV[x0 + 4u], s);
  }
  {  // i = 5
    let w = vec4<f32>(bitcast<f32>(W[w0 + 4u * 5u]), bitcast<f32>(W[w0 + 4u * 5u + 1u]),
                      bitcast<f32>(W[w0 + 4u * 5u + 2u]), bitcast<f32>(W[w0 + 4u * 5u + 3u]));
    s = fma(w, XV[x0 + 5u], s);
  }
  {  // i = 6
    let w = vec4<f32>(bitcast<f32>(W[w0 + 4u * 6u]), bitcast<f32>(W[w0 + 4u * 6u + 1u]),
                      bitcast<f32>(W[w0 + 4u * 6u + 2u]), bitcast<f32>(W[w0 + 4u * 6u + 3u]));
    s = fma(w, XV[x0 + 6u], s);
  }
  {  // i = 7
    let w = vec4<f32>(bitcast<f32>(W[w0 + 4u * 7u]), bitcast<f32>(W[w0 + 4u * 7u + 1u]),
                      bitcast<f32>(W[w0 + 4u * 7u + 2u]), bitcast<f32>(W[w0 + 4u * 7u + 3u]));
    s = fma(w, XV[x0 + 7u], s);
  }
  return hsum(s);
}
fn deq_mv_f16(rb: u32, c: u32, xb: u32) -> f32 {
  let w0 = (rb >> 2u) + c * 16u;
  let x0 = xb + c * 8u;
  var s = vec4<f32>(0.0);
  {  // i = 0
    let w = vec4<f32>(unpack2x16float(W[w0 + 2u * 0u]), unpack2x16float(W[w0 + 2u * 0u + 1u]));
    s = fma(w, XV[x0 + 0u], s);
  }
  {  // i = 1
    let w = vec4<f32>(unpack2x16float(W[w0 + 2u * 1u]), unpack2x16float(W[w0 + 2u * 1u + 1u]));
    s = fma(w, XV[x0 + 1u], s);
  }
  {  // i = 2
    let w = vec4<f32>(unpack2x16float(W[w0 + 2u * 2u]), unpack2x16float(W[w0 + 2u * 2u + 1u]));
    s = fma(w, XV[x0 + 2u], s);
  }
  {  // i = 3
    let w = vec4<f32>(unpack2x16float(W[w0 + 2u * 3u]), unpack2x16float(W[w0 + 2u * 3u + 1u]));
    s = fma(w, XV[x0 + 3u], s);
  }
  {  // i = 4
    let w = vec4<f32>(unpack2x16float(W[w0 + 2u * 4u]), unpack2x16float(W[w0 + 2u * 4u + 1u]));
    s = fma(w, XV[x0 + 4u], s);
  }
  {  // i = 5
    let w = vec4<f32>(unpack2x16float(W[w0 + 2u * 5u]), unpack2x16float(W[w0 + 2u * 5u + 1u]));
    s = fma(w, XV[x0 + 5u], s);
  }
  {  // i = 6
    let w = vec4<f32>(unpack2x16float(W[w0 + 2u * 6u]), unpack2x16float(W[w0 + 2u * 6u + 1u]));
    s = fma(w, XV[x0 + 6u], s);
  }
  {  // i = 7
    let w = vec4<f32>(unpack2x16float(W[w0 + 2u * 7u]), unpack2x16float(W[w0 + 2u * 7u + 1u]));
    s = fma(w, XV[x0 + 7u], s);
  }
  return hsum(s);
}
fn deq_mv_bf16(rb: u32, c: u32, xb: u32) -> f32 {
  let w0 = (rb >> 2u) + c * 16u;
  let x0 = xb + c * 8u;
  var s = vec4<f32>(0.0);
  {  // i = 0
    let a = W[w0 + 2u * 0u];
    let b = W[w0 + 2u * 0u + 1u];
    let w = bitcast<vec4<f32>>(vec4<u32>(a << 16u, a & 0xffff0000u, b << 16u, b & 0xffff0000u));
    s = fma(w, XV[x0 + 0u], s);
  }
  {  // i = 1
    let a = W[w0 + 2u * 1u];
    let b = W[w0 + 2u * 1u + 1u];
    let w = bitcast<vec4<f32>>(vec4<u32>(a << 16u, a & 0xffff0000u, b << 16u, b & 0xffff0000u));
    s = fma(w, XV[x0 + 1u], s);
  }
  {  // i = 2
    let a = W[w0 + 2u * 2u];
    let b = W[w0 + 2u * 2u + 1u];
    let w = bitcast<vec4<f32>>(vec4<u32>(a << 16u, a & 0xffff0000u, b << 16u, b & 0xffff0000u));
    s = fma(w, XV[x0 + 2u], s);
  }
  {  // i = 3
    let a = W[w0 + 2u * 3u];
    let b = W[w0 + 2u * 3u + 1u];
    let w = bitcast<vec4<f32>>(vec4<u32>(a << 16u, a & 0xffff0000u, b << 16u, b & 0xffff0000u));
    s = fma(w, XV[x0 + 3u], s);
  }
  {  // i = 4
    let a = W[w0 + 2u * 4u];
    let b = W[w0 + 2u * 4u + 1u];
    let w = bitcast<vec4<f32>>(vec4<u32>(a << 16u, a & 0xffff0000u, b << 16u, b & 0xffff0000u));
    s = fma(w, XV[x0 + 4u], s);
  }
  {  // i = 5
    let a = W[w0 + 2u * 5u];
    let b = W[w0 + 2u * 5u + 1u];
    let w = bitcast<vec4<f32>>(vec4<u32>(a << 16u, a & 0xffff0000u, b << 16u, b & 0xffff0000u));
    s = fma(w, XV[x0 + 5u], s);
  }
  {  // i = 6
    let a = W[w0 + 2u * 6u];
    let b = W[w0 + 2u * 6u + 1u];
    let w = bitcast<vec4<f32>>(vec4<u32>(a << 16u, a & 0xffff0000u, b << 16u, b & 0xffff0000u));
    s = fma(w, XV[x0 + 6u], s);
  }
  {  // i = 7
    let a = W[w0 + 2u * 7u];
    let b = W[w0 + 2u * 7u + 1u];
    let w = bitcast<vec4<f32>>(vec4<u32>(a << 16u, a & 0xffff0000u, b << 16u, b & 0xffff0000u));
    s = fma(w, XV[x0 + 7u], s);
  }
  return hsum(s);
}
fn deq_mv_q8_0(rb: u32, c: u32, xb: u32) -> f32 {
  let o = rb + c * 34u;
  let x0 = xb + c * 8u;
  var s = vec4<f32>(0.0);
  {  // j = 0
    s = fma(sb4(u32at(o + 2u + 4u * 0u)), XV[x0 + 0u], s);
  }
  {  // j = 1
    s = fma(sb4(u32at(o + 2u + 4u * 1u)), XV[x0 + 1u], s);
  }
  {  // j = 2
    s = fma(sb4(u32at(o + 2u + 4u * 2u)), XV[x0 + 2u], s);
  }
  {  // j = 3
    s = fma(sb4(u32at(o + 2u + 4u * 3u)), XV[x0 + 3u], s);
  }
  {  // j = 4
    s = fma(sb4(u32at(o + 2u + 4u * 4u)), XV[x0 + 4u], s);
  }
  {  // j = 5
    s = fma(sb4(u32at(o + 2u + 4u * 5u)), XV[x0 + 5u], s);
  }
  {  // j = 6
    s = fma(sb4(u32at(o + 2u + 4u * 6u)), XV[x0 + 6u], s);
  }
  {  // j = 7
    s = fma(sb4(u32at(o + 2u + 4u * 7u)), XV[x0 + 7u], s);
  }
  return h16(o) * hsum(s);
}
// 32-value blocks of 4-bit codes: byte i holds values i (low nibble) and i + 16 (high).
fn deq_mv_q4_0(rb: u32, c: u32, xb: u32) -> f32 {
  let o = rb + c * 18u;
  let x0 = xb + c * 8u;
  let d = h16(o);
  var s = vec4<f32>(0.0);
  {  // j = 0
    let v = u32at(o + 2u + 4u * 0u);
    s = fma(d * (nib4(v, 0u) - 8.0), XV[x0 + 0u], fma(d * (nib4(v, 4u) - 8.0), XV[x0 + 4u + 0u], s));
  }
  {  // j = 1
    let v = u32at(o + 2u + 4u * 1u);
    s = fma(d * (nib4(v, 0u) - 8.0), XV[x0 + 1u], fma(d * (nib4(v, 4u) - 8.0), XV[x0 + 4u + 1u], s));
  }
  {  // j = 2
    let v = u32at(o + 2u + 4u * 2u);
    s = fma(d * (nib4(v, 0u) - 8.0), XV[x0 + 2u], fma(d * (nib4(v, 4u) - 8.0), XV[x0 + 4u + 2u], s));
  }
  {  // j = 3
    let v = u32at(o + 2u + 4u * 3u);
    s = fma(d * (nib4(v, 0u) - 8.0), XV[x0 + 3u], fma(d * (nib4(v, 4u) - 8.0), XV[x0 + 4u + 3u], s));
  }
  return hsum(s);
}
fn deq_mv_q4_1(rb: u32, c: u32, xb: u32) -> f32 {
  let o = rb + c * 20u;
  let x0 = xb + c * 8u;
  let d = h16(o);
  let m = h16(o + 2u);
  var s = vec4<f32>(0.0);
  {  // j = 0
    let v = W[(o >> 2u) + 1u + 0u];
    s = fma(d * nib4(v, 0u) + m, XV[x0 + 0u], fma(d * nib4(v, 4u) + m, XV[x0 + 4u + 0u], s));
  }
  {  // j = 1
    let v = W[(o >> 2u) + 1u + 1u];
    s = fma(d * nib4(v, 0u) + m, XV[x0 + 1u], fma(d * nib4(v, 4u) + m, XV[x0 + 4u + 1u], s));
  }
  {  // j = 2
    let v = W[(o >> 2u) + 1u + 2u];
    s = fma(d * nib4(v, 0u) + m, XV[x0 + 2u], fma(d * nib4(v, 4u) + m, XV[x0 + 4u + 2u], s));
  }
  {  // j = 3
    let v = W[(o >> 2u) + 1u + 3u];
    s = fma(d * nib4(v, 0u) + m, XV[x0 + 3u], fma(d * nib4(v, 4u) + m, XV[x0 + 4u + 3u], s));
  }
  return hsum(s);
}
fn deq_mv_q5_0(rb: u32, c: u32, xb: u32) -> f32 {
  let o = rb + c * 22u;
  let x0 = xb + c * 8u;
  let qh = u32at(o + 2u);
  let d = h16(o);
  var s = vec4<f32>(0.0);
  {  // j = 0
    let v = u32at(o + 6u + 4u * 0u);
    s = fma(d * (nib4(v, 0u) + hb4(qh, 4u * 0u) - 16.0), XV[x0 + 0u],
            fma(d * (nib4(v, 4u) + hb4(qh, 16u + 4u * 0u) - 16.0), XV[x0 + 4u + 0u], s));
  }
  {  // j = 1
    let v = u32at(o + 6u + 4u * 1u);
    s = fma(d * (nib4(v, 0u) + hb4(qh, 4u * 1u) - 16.0), XV[x0 + 1u],
            fma(d * (nib4(v, 4u) + hb4(qh, 16u + 4u * 1u) - 16.0), XV[x0 + 4u + 1u], s));
  }
  {  // j = 2
    let v = u32at(o + 6u + 4u * 2u);
    s = fma(d * (nib4(v, 0u) + hb4(qh, 4u * 2u) - 16.0), XV[x0 + 2u],
            fma(d * (nib4(v, 4u) + hb4(qh, 16u + 4u * 2u) - 16.0), XV[x0 + 4u + 2u], s));
  }
  {  // j = 3
    let v = u32at(o + 6u + 4u * 3u);
    s = fma(d * (nib4(v, 0u) + hb4(qh, 4u * 3u) - 16.0), XV[x0 + 3u],
            fma(d * (nib4(v, 4u) + hb4(qh, 16u + 4u * 3u) - 16.0), XV[x0 + 4u + 3u], s));
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
  {  // j = 0
    let v = W[(o >> 2u) + 2u + 0u];
    s = fma(d * (nib4(v, 0u) + hb4(qh, 4u * 0u)) + m, XV[x0 + 0u],
            fma(d * (nib4(v, 4u) + hb4(qh, 16u + 4u * 0u)) + m, XV[x0 + 4u + 0u], s));
  }
  {  // j = 1
    let v = W[(o >> 2u) + 2u + 1u];
    s = fma(d * (nib4(v, 0u) + hb4(qh, 4u * 1u)) + m, XV[x0 + 1u],
            fma(d * (nib4(v, 4u) + hb4(qh, 16u + 4u * 1u)) + m, XV[x0 + 4u + 1u], s));
  }
  {  // j = 2
    let v = W[(o >> 2u) + 2u + 2u];
    s = fma(d * (nib4(v, 0u) + hb4(qh, 4u * 2u)) + m, XV[x0 + 2u],
            fma(d * (nib4(v, 4u) + hb4(qh, 16u + 4u * 2u)) + m, XV[x0 + 4u + 2u], s));
  }
  {  // j = 3
    let v = W[(o >> 2u) + 2u + 3u];
    s = fma(d * (nib4(v, 0u) + hb4(qh, 4u * 3u)) + m, XV[x0 + 3u],
            fma(d * (nib4(v, 4u) + hb4(qh, 16u + 4u * 3u)) + m, XV[x0 + 4u + 3u], s));
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
  {  // l = 0
    s = fma(d * nib4(W[qw + 0u], sh) - m, XV[x0 + 0u], s);
  }
  {  // l = 1
    s = fma(d * nib4(W[qw + 1u], sh) - m, XV[x0 + 1u], s);
  }
  {  // l = 2
    s = fma(d * nib4(W[qw + 2u], sh) - m, XV[x0 + 2u], s);
  }
  {  // l = 3
    s = fma(d * nib4(W[qw + 3u], sh) - m, XV[x0 + 3u], s);
  }
  {  // l = 4
    s = fma(d * nib4(W[qw + 4u], sh) - m, XV[x0 + 4u], s);
  }
  {  // l = 5
    s = fma(d * nib4(W[qw + 5u], sh) - m, XV[x0 + 5u], s);
  }
  {  // l = 6
    s = fma(d * nib4(W[qw + 6u], sh) - m, XV[x0 + 6u], s);
  }
  {  // l = 7
    s = fma(d * nib4(W[qw + 7u], sh) - m, XV[x0 + 7u], s);
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
  {  // l = 0
    let hi = vec4<f32>(((vec4<u32>(W[hw + 0u]) >> (SH4 + j)) & vec4<u32>(1u)) << vec4<u32>(4u));
    s = fma(d * (nib4(W[qw + 0u], sh) + hi) - m, XV[x0 + 0u], s);
  }
  {  // l = 1
    let hi = vec4<f32>(((vec4<u32>(W[hw + 1u]) >> (SH4 + j)) & vec4<u32>(1u)) << vec4<u32>(4u));
    s = fma(d * (nib4(W[qw + 1u], sh) + hi) - m, XV[x0 + 1u], s);
  }
  {  // l = 2
    let hi = vec4<f32>(((vec4<u32>(W[hw + 2u]) >> (SH4 + j)) & vec4<u32>(1u)) << vec4<u32>(4u));
    s = fma(d * (nib4(W[qw + 2u], sh) + hi) - m, XV[x0 + 2u], s);
  }
  {  // l = 3
    let hi = vec4<f32>(((vec4<u32>(W[hw + 3u]) >> (SH4 + j)) & vec4<u32>(1u)) << vec4<u32>(4u));
    s = fma(d * (nib4(W[qw + 3u], sh) + hi) - m, XV[x0 + 3u], s);
  }
  {  // l = 4
    let hi = vec4<f32>(((vec4<u32>(W[hw + 4u]) >> (SH4 + j)) & vec4<u32>(1u)) << vec4<u32>(4u));
    s = fma(d * (nib4(W[qw + 4u], sh) + hi) - m, XV[x0 + 4u], s);
  }
  {  // l = 5
    let hi = vec4<f32>(((vec4<u32>(W[hw + 5u]) >> (SH4 + j)) & vec4<u32>(1u)) << vec4<u32>(4u));
    s = fma(d * (nib4(W[qw + 5u], sh) + hi) - m, XV[x0 + 5u], s);
  }
  {  // l = 6
    let hi = vec4<f32>(((vec4<u32>(W[hw + 6u]) >> (SH4 + j)) & vec4<u32>(1u)) << vec4<u32>(4u));
    s = fma(d * (nib4(W[qw + 6u], sh) + hi) - m, XV[x0 + 6u], s);
  }
  {  // l = 7
    let hi = vec4<f32>(((vec4<u32>(W[hw + 7u]) >> (SH4 + j)) & vec4<u32>(1u)) << vec4<u32>(4u));
    s = fma(d * (nib4(W[qw + 7u], sh) + hi) - m, XV[x0 + 7u], s);
  }
  return hsum(s);
}
fn deq_mv_q6_k(rb: u32, c: u32, xb: u32) -> f32 {
  let o = rb + (c / 8u) * 210u;
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
  {  // l4 = 0
    let q = vec4<f32>(((vec4<u32>(u32at(lo + 4u * 0u)) >> (SH4 + 4u * (r >> 1u))) & vec4<u32>(15u)) |
                      (((vec4<u32>(u32at(hi + 4u * 0u)) >> (SH4 + 2u * r)) & vec4<u32>(3u)) << vec4<u32>(4u)));
    s = fma(select(b, a, 0u < 4u) * (q - 32.0), XV[x0 + 0u], s);
  }
  {  // l4 = 1
    let q = vec4<f32>(((vec4<u32>(u32at(lo + 4u * 1u)) >> (SH4 + 4u * (r >> 1u))) & vec4<u32>(15u)) |
                      (((vec4<u32>(u32at(hi + 4u * 1u)) >> (SH4 + 2u * r)) & vec4<u32>(3u)) << vec4<u32>(4u)));
    s = fma(select(b, a, 1u < 4u) * (q - 32.0), XV[x0 + 1u], s);
  }
  {  // l4 = 2
    let q = vec4<f32>(((vec4<u32>(u32at(lo + 4u * 2u)) >> (SH4 + 4u * (r >> 1u))) & vec4<u32>(15u)) |
                      (((vec4<u32>(u32at(hi + 4u * 2u)) >> (SH4 + 2u * r)) & vec4<u32>(3u)) << vec4<u32>(4u)));
    s = fma(select(b, a, 2u < 4u) * (q - 32.0), XV[x0 + 2u], s);
  }
  {  // l4 = 3
    let q = vec4<f32>(((vec4<u32>(u32at(lo + 4u * 3u)) >> (SH4 + 4u * (r >> 1u))) & vec4<u32>(15u)) |
                      (((vec4<u32>(u32at(hi + 4u * 3u)) >> (SH4 + 2u * r)) & vec4<u32>(3u)) << vec4<u32>(4u)));
    s = fma(select(b, a, 3u < 4u) * (q - 32.0), XV[x0 + 3u], s);
  }
  {  // l4 = 4
    let q = vec4<f32>(((vec4<u32>(u32at(lo + 4u * 4u)) >> (SH4 + 4u * (r >> 1u))) & vec4<u32>(15u)) |
                      (((vec4<u32>(u32at(hi + 4u * 4u)) >> (SH4 + 2u * r)) & vec4<u32>(3u)) << vec4<u32>(4u)));
    s = fma(select(b, a, 4u < 4u) * (q - 32.0), XV[x0 + 4u], s);
  }
  {  // l4 = 5
    let q = vec4<f32>(((vec4<u32>(u32at(lo + 4u * 5u)) >> (SH4 + 4u * (r >> 1u))) & vec4<u32>(15u)) |
                      (((vec4<u32>(u32at(hi + 4u * 5u)) >> (SH4 + 2u * r)) & vec4<u32>(3u)) << vec4<u32>(4u)));
    s = fma(select(b, a, 5u < 4u) * (q - 32.0), XV[x0 + 5u], s);
  }
  {  // l4 = 6
    let q = vec4<f32>(((vec4<u32>(u32at(lo + 4u * 6u)) >> (SH4 + 4u * (r >> 1u))) & vec4<u32>(15u)) |
                      (((vec4<u32>(u32at(hi + 4u * 6u)) >> (SH4 + 2u * r)) & vec4<u32>(3u)) << vec4<u32>(4u)));
    s = fma(select(b, a, 6u < 4u) * (q - 32.0), XV[x0 + 6u], s);
  }
  {  // l4 = 7
    let q = vec4<f32>(((vec4<u32>(u32at(lo + 4u * 7u)) >> (SH4 + 4u * (r >> 1u))) & vec4<u32>(15u)) |
                      (((vec4<u32>(u32at(hi + 4u * 7u)) >> (SH4 + 2u * r)) & vec4<u32>(3u)) << vec4<u32>(4u)));
    s = fma(select(b, a, 7u < 4u) * (q - 32.0), XV[x0 + 7u], s);
  }
  return hsum(s);
}
