// Decoders of one 32-value chunk `c` of the row starting at byte `rb` (docs/quant.md
// layouts, as the device holds them: blocks padded to whole words, the leading f16 scale of
// Q4_0 / Q5_0 / Q8_0 / IQ4_NL moved behind the codes: wgpu_backend.cc dev_block_bytes).
// deq_v4_*(rb, c, K, q): values 4q .. 4q + 3 of the chunk, as a vec4 in registers
// (the tiled GEMM's decoder, matmul.wgsl); deq_*(rb, c, K, w): the whole chunk into w, the
// same values. K is the row length (only float rows may end inside a chunk; the tail is 0).
// Each encoding is defined once, by its deq_v4_; deq_ is the loop over it.
fn deq_v4_f32(rb: u32, c: u32, K: u32, q: u32) -> vec4<f32> {
  let k = c * 32u + 4u * q;
  let i = (rb >> 2u) + k;
  return select(vec4<f32>(0.0), vec4<f32>(bitcast<f32>(W[i]), bitcast<f32>(W[i + 1u]), bitcast<f32>(W[i + 2u]),
                                          bitcast<f32>(W[i + 3u])), vec4<u32>(k) + SH4 / 8u < vec4<u32>(K));
}
fn deq_v4_f16(rb: u32, c: u32, K: u32, q: u32) -> vec4<f32> {
  let k = c * 32u + 4u * q;
  let o = rb + 2u * k;
  return select(vec4<f32>(0.0), vec4<f32>(h16(o), h16(o + 2u), h16(o + 4u), h16(o + 6u)),
                vec4<u32>(k) + SH4 / 8u < vec4<u32>(K));
}
fn deq_v4_bf16(rb: u32, c: u32, K: u32, q: u32) -> vec4<f32> {
  let k = c * 32u + 4u * q;
  let o = vec4<u32>(rb + 2u * k) + SH4 / 4u;
  let bits = vec4<u32>(W[o.x >> 2u], W[o.y >> 2u], W[o.z >> 2u], W[o.w >> 2u]) >> ((o & vec4<u32>(2u)) * 8u);
  return select(vec4<f32>(0.0), bitcast<vec4<f32>>((bits & vec4<u32>(0xffffu)) << vec4<u32>(16u)),
                vec4<u32>(k) + SH4 / 8u < vec4<u32>(K));
}
// 4-bit 32-value blocks: byte i holds values i (low nibble) and i + 16 (high).
fn deq_v4_q4_0(rb: u32, c: u32, K: u32, q: u32) -> vec4<f32> {
  let o = rb + c * 20u;
  return h16(o + 16u) * (nib4(W[(o >> 2u) + q % 4u], 4u * (q / 4u)) - 8.0);
}
fn deq_v4_q4_1(rb: u32, c: u32, K: u32, q: u32) -> vec4<f32> {
  let o = rb + c * 20u;
  return h16(o) * nib4(W[(o >> 2u) + 1u + q % 4u], 4u * (q / 4u)) + h16(o + 2u);
}
fn deq_v4_q5_0(rb: u32, c: u32, K: u32, q: u32) -> vec4<f32> {
  let o = rb + c * 24u;
  return h16(o + 20u) * (nib4(W[(o >> 2u) + 1u + q % 4u], 4u * (q / 4u)) + hb4(W[o >> 2u], 4u * q) - 16.0);
}
fn deq_v4_q5_1(rb: u32, c: u32, K: u32, q: u32) -> vec4<f32> {
  let o = rb + c * 24u;
  return h16(o) * (nib4(W[(o >> 2u) + 2u + q % 4u], 4u * (q / 4u)) + hb4(W[(o >> 2u) + 1u], 4u * q)) + h16(o + 2u);
}
fn deq_v4_q8_0(rb: u32, c: u32, K: u32, q: u32) -> vec4<f32> {
  let o = rb + c * 36u;
  return h16(o + 32u) * sb4(W[(o >> 2u) + q]);
}
const IQ4NL = array<f32, 16>(-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
                             1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);
fn deq_v4_iq4_nl(rb: u32, c: u32, K: u32, q: u32) -> vec4<f32> {
  let o = rb + c * 20u;
  let n = (vec4<u32>(W[(o >> 2u) + q % 4u]) >> (SH4 + 4u * (q / 4u))) & vec4<u32>(15u);
  return h16(o + 16u) * vec4<f32>(IQ4NL[n.x], IQ4NL[n.y], IQ4NL[n.z], IQ4NL[n.w]);
}
// K-quants: chunk c is sub-block c % 8 of super-block c / 8.
fn scale_min_k4(sc: u32, j: u32) -> vec2<f32> {
  if (j < 4u) { return vec2<f32>(f32(b8(sc + j) & 63u), f32(b8(sc + j + 4u) & 63u)); }
  let s = (b8(sc + j + 4u) & 15u) | ((b8(sc + j - 4u) >> 6u) << 4u);
  let m = (b8(sc + j + 4u) >> 4u) | ((b8(sc + j) >> 6u) << 4u);
  return vec2<f32>(f32(s), f32(m));
}
fn deq_v4_q4_k(rb: u32, c: u32, K: u32, q: u32) -> vec4<f32> {
  let o = rb + (c / 8u) * 144u;
  let j = c % 8u;
  let sm = scale_min_k4(o + 4u, j);
  let v = W[((o + 16u + 32u * (j / 2u)) >> 2u) + q];
  return h16(o) * sm.x * nib4(v, 4u * (j & 1u)) - h16(o + 2u) * sm.y;
}
fn deq_v4_q5_k(rb: u32, c: u32, K: u32, q: u32) -> vec4<f32> {
  let o = rb + (c / 8u) * 176u;
  let j = c % 8u;
  let sm = scale_min_k4(o + 4u, j);
  let v = W[((o + 48u + 32u * (j / 2u)) >> 2u) + q];
  let hv = W[((o + 16u) >> 2u) + q];
  let hi = vec4<f32>(((vec4<u32>(hv) >> (SH4 + j)) & vec4<u32>(1u)) << vec4<u32>(4u));
  return h16(o) * sm.x * (nib4(v, 4u * (j & 1u)) + hi) - h16(o + 2u) * sm.y;
}
fn deq_v4_q6_k(rb: u32, c: u32, K: u32, q: u32) -> vec4<f32> {
  let o = rb + (c / 8u) * 212u;
  let j = c % 8u;
  let h = j / 4u;
  let r = j % 4u;
  let s = h16(o + 208u) * f32(i8v(o + 192u + 8u * h + 2u * r + select(0u, 1u, q >= 4u)));
  let lv = vec4<u32>(W[(o + 64u * h + 32u * (r & 1u) + 4u * q) >> 2u]);
  let hv = vec4<u32>(W[(o + 128u + 32u * h + 4u * q) >> 2u]);
  let ql = (lv >> (SH4 + 4u * (r >> 1u))) & vec4<u32>(15u);
  let qh = (hv >> (SH4 + 2u * r)) & vec4<u32>(3u);
  return s * (vec4<f32>(ql | (qh << vec4<u32>(4u))) - 32.0);
}
fn scale_q3_k(sc: u32, i: u32) -> f32 {
  var lo4 = 0u;
  if (i < 8u) { lo4 = b8(sc + i) & 15u; } else { lo4 = b8(sc + i - 8u) >> 4u; }
  let hi2 = (b8(sc + 8u + i % 4u) >> (2u * (i / 4u))) & 3u;
  return f32(i32(lo4 | (hi2 << 4u)) - 32);
}
fn deq_v4_q3_k(rb: u32, c: u32, K: u32, q: u32) -> vec4<f32> {
  let o = rb + (c / 8u) * 112u;
  let j = c % 8u;
  let h = j / 4u;
  let jj = j % 4u;
  let s = h16(o + 108u) * scale_q3_k(o + 96u, 8u * h + 2u * jj + select(0u, 1u, q >= 4u));
  let qv = (vec4<u32>(W[(o + 32u + 32u * h + 4u * q) >> 2u]) >> (SH4 + 2u * jj)) & vec4<u32>(3u);
  let hb = (vec4<u32>(W[(o + 4u * q) >> 2u]) >> (SH4 + 4u * h + jj)) & vec4<u32>(1u);
  return s * (vec4<f32>(qv) - select(vec4<f32>(4.0), vec4<f32>(0.0), hb == vec4<u32>(1u)));
}
fn deq_v4_q2_k(rb: u32, c: u32, K: u32, q: u32) -> vec4<f32> {
  let o = rb + (c / 8u) * 84u;
  let j = c % 8u;
  let h = j / 4u;
  let jj = j % 4u;
  let sc = b8(o + 8u * h + 2u * jj + select(0u, 1u, q >= 4u));
  let qv = (vec4<u32>(W[(o + 16u + 32u * h + 4u * q) >> 2u]) >> (SH4 + 2u * jj)) & vec4<u32>(3u);
  return h16(o + 80u) * f32(sc & 15u) * vec4<f32>(qv) - h16(o + 82u) * f32(sc >> 4u);
}
fn deq_f32(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  for (var q = 0u; q < 8u; q++) {
    let v = deq_v4_f32(rb, c, K, q);
    (*w)[4u * q] = v.x;
    (*w)[4u * q + 1u] = v.y;
    (*w)[4u * q + 2u] = v.z;
    (*w)[4u * q + 3u] = v.w;
  }
}
fn deq_f16(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  for (var q = 0u; q < 8u; q++) {
    let v = deq_v4_f16(rb, c, K, q);
    (*w)[4u * q] = v.x;
    (*w)[4u * q + 1u] = v.y;
    (*w)[4u * q + 2u] = v.z;
    (*w)[4u * q + 3u] = v.w;
  }
}
fn deq_bf16(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  for (var q = 0u; q < 8u; q++) {
    let v = deq_v4_bf16(rb, c, K, q);
    (*w)[4u * q] = v.x;
    (*w)[4u * q + 1u] = v.y;
    (*w)[4u * q + 2u] = v.z;
    (*w)[4u * q + 3u] = v.w;
  }
}
fn deq_q4_0(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  for (var q = 0u; q < 8u; q++) {
    let v = deq_v4_q4_0(rb, c, K, q);
    (*w)[4u * q] = v.x;
    (*w)[4u * q + 1u] = v.y;
    (*w)[4u * q + 2u] = v.z;
    (*w)[4u * q + 3u] = v.w;
  }
}
fn deq_q4_1(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  for (var q = 0u; q < 8u; q++) {
    let v = deq_v4_q4_1(rb, c, K, q);
    (*w)[4u * q] = v.x;
    (*w)[4u * q + 1u] = v.y;
    (*w)[4u * q + 2u] = v.z;
    (*w)[4u * q + 3u] = v.w;
  }
}
fn deq_q5_0(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  for (var q = 0u; q < 8u; q++) {
    let v = deq_v4_q5_0(rb, c, K, q);
    (*w)[4u * q] = v.x;
    (*w)[4u * q + 1u] = v.y;
    (*w)[4u * q + 2u] = v.z;
    (*w)[4u * q + 3u] = v.w;
  }
}
fn deq_q5_1(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  for (var q = 0u; q < 8u; q++) {
    let v = deq_v4_q5_1(rb, c, K, q);
    (*w)[4u * q] = v.x;
    (*w)[4u * q + 1u] = v.y;
    (*w)[4u * q + 2u] = v.z;
    (*w)[4u * q + 3u] = v.w;
  }
}
fn deq_q8_0(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  for (var q = 0u; q < 8u; q++) {
    let v = deq_v4_q8_0(rb, c, K, q);
    (*w)[4u * q] = v.x;
    (*w)[4u * q + 1u] = v.y;
    (*w)[4u * q + 2u] = v.z;
    (*w)[4u * q + 3u] = v.w;
  }
}
fn deq_iq4_nl(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  for (var q = 0u; q < 8u; q++) {
    let v = deq_v4_iq4_nl(rb, c, K, q);
    (*w)[4u * q] = v.x;
    (*w)[4u * q + 1u] = v.y;
    (*w)[4u * q + 2u] = v.z;
    (*w)[4u * q + 3u] = v.w;
  }
}
fn deq_q4_k(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  for (var q = 0u; q < 8u; q++) {
    let v = deq_v4_q4_k(rb, c, K, q);
    (*w)[4u * q] = v.x;
    (*w)[4u * q + 1u] = v.y;
    (*w)[4u * q + 2u] = v.z;
    (*w)[4u * q + 3u] = v.w;
  }
}
fn deq_q5_k(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  for (var q = 0u; q < 8u; q++) {
    let v = deq_v4_q5_k(rb, c, K, q);
    (*w)[4u * q] = v.x;
    (*w)[4u * q + 1u] = v.y;
    (*w)[4u * q + 2u] = v.z;
    (*w)[4u * q + 3u] = v.w;
  }
}
fn deq_q6_k(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  for (var q = 0u; q < 8u; q++) {
    let v = deq_v4_q6_k(rb, c, K, q);
    (*w)[4u * q] = v.x;
    (*w)[4u * q + 1u] = v.y;
    (*w)[4u * q + 2u] = v.z;
    (*w)[4u * q + 3u] = v.w;
  }
}
fn deq_q3_k(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  for (var q = 0u; q < 8u; q++) {
    let v = deq_v4_q3_k(rb, c, K, q);
    (*w)[4u * q] = v.x;
    (*w)[4u * q + 1u] = v.y;
    (*w)[4u * q + 2u] = v.z;
    (*w)[4u * q + 3u] = v.w;
  }
}
fn deq_q2_k(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  for (var q = 0u; q < 8u; q++) {
    let v = deq_v4_q2_k(rb, c, K, q);
    (*w)[4u * q] = v.x;
    (*w)[4u * q + 1u] = v.y;
    (*w)[4u * q + 2u] = v.z;
    (*w)[4u * q + 3u] = v.w;
  }
}
