// Dot products of one 32-value chunk `c` of the weight row starting at byte `rb` (blocks in
// the device layout of dequant.wgsl) with
// 32 activations, for the matrix-vector kernel (matvec.wgsl). `xb` is the token's first
// vec4 in XV. The weights are decoded in registers, four values at a time, and never
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
    s = fma(w, XV[x0 + i], s);
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
    s = fma(w, XV[x0 + i], s);
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
    s = fma(w, XV[x0 + i], s);
  }
  return hsum(s);
}
fn deq_mv_q8_0(rb: u32, c: u32, xb: u32) -> f32 {
  let o = rb + c * 36u;
  let x0 = xb + c * 8u;
  var s = vec4<f32>(0.0);
  //#unroll
  for (var j = 0u; j < 8u; j++) {
    s = fma(sb4(W[(o >> 2u) + j]), XV[x0 + j], s);
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
    s = fma(d * (nib4(v, 0u) - 8.0), XV[x0 + j], fma(d * (nib4(v, 4u) - 8.0), XV[x0 + 4u + j], s));
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
    s = fma(d * nib4(v, 0u) + m, XV[x0 + j], fma(d * nib4(v, 4u) + m, XV[x0 + 4u + j], s));
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
    s = fma(d * (nib4(v, 0u) + hb4(qh, 4u * j) - 16.0), XV[x0 + j],
            fma(d * (nib4(v, 4u) + hb4(qh, 16u + 4u * j) - 16.0), XV[x0 + 4u + j], s));
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
    s = fma(d * (nib4(v, 0u) + hb4(qh, 4u * j)) + m, XV[x0 + j],
            fma(d * (nib4(v, 4u) + hb4(qh, 16u + 4u * j)) + m, XV[x0 + 4u + j], s));
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
    s = fma(d * nib4(W[qw + l], sh) - m, XV[x0 + l], s);
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
    s = fma(d * (nib4(W[qw + l], sh) + hi) - m, XV[x0 + l], s);
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
    s = fma(select(b, a, l4 < 4u) * (q - 32.0), XV[x0 + l4], s);
  }
  return hsum(s);
}

