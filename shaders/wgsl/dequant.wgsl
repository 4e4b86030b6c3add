// Decoders of one 32-element chunk `c` of the row starting at byte `rb`, into w.
// K is the row length (only float rows may end inside a chunk; the tail is 0).
fn deq_f32(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  for (var i = 0u; i < 32u; i++) {
    let k = c * 32u + i;
    (*w)[i] = select(0.0, bitcast<f32>(W[(rb >> 2u) + k]), k < K);
  }
}
fn deq_f16(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  for (var i = 0u; i < 32u; i++) {
    let k = c * 32u + i;
    (*w)[i] = select(0.0, h16(rb + 2u * k), k < K);
  }
}
fn deq_bf16(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  for (var i = 0u; i < 32u; i++) {
    let k = c * 32u + i;
    let o = rb + 2u * k;
    let bits = ((W[o >> 2u] >> ((o & 2u) * 8u)) & 0xffffu) << 16u;
    (*w)[i] = select(0.0, bitcast<f32>(bits), k < K);
  }
}
fn deq_q4_0(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  let o = rb + c * 18u;
  let d = h16(o);
  for (var j = 0u; j < 4u; j++) {
    let v = u32at(o + 2u + 4u * j);
    for (var b = 0u; b < 4u; b++) {
      let q = (v >> (8u * b)) & 0xffu;
      (*w)[4u * j + b] = d * (f32(q & 15u) - 8.0);
      (*w)[4u * j + b + 16u] = d * (f32(q >> 4u) - 8.0);
    }
  }
}
fn deq_q4_1(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  let o = rb + c * 20u;
  let d = h16(o);
  let m = h16(o + 2u);
  for (var j = 0u; j < 4u; j++) {
    let v = u32at(o + 4u + 4u * j);
    for (var b = 0u; b < 4u; b++) {
      let q = (v >> (8u * b)) & 0xffu;
      (*w)[4u * j + b] = d * f32(q & 15u) + m;
      (*w)[4u * j + b + 16u] = d * f32(q >> 4u) + m;
    }
  }
}
fn deq_q5_0(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  let o = rb + c * 22u;
  let d = h16(o);
  let qh = u32at(o + 2u);
  for (var j = 0u; j < 4u; j++) {
    let v = u32at(o + 6u + 4u * j);
    for (var b = 0u; b < 4u; b++) {
      let l = 4u * j + b;
      let q = (v >> (8u * b)) & 0xffu;
      (*w)[l] = d * (f32((q & 15u) | (((qh >> l) & 1u) << 4u)) - 16.0);
      (*w)[l + 16u] = d * (f32((q >> 4u) | (((qh >> (l + 16u)) & 1u) << 4u)) - 16.0);
    }
  }
}
fn deq_q5_1(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  let o = rb + c * 24u;
  let d = h16(o);
  let m = h16(o + 2u);
  let qh = u32at(o + 4u);
  for (var j = 0u; j < 4u; j++) {
    let v = u32at(o + 8u + 4u * j);
    for (var b = 0u; b < 4u; b++) {
      let l = 4u * j + b;
      let q = (v >> (8u * b)) & 0xffu;
      (*w)[l] = d * f32((q & 15u) | (((qh >> l) & 1u) << 4u)) + m;
      (*w)[l + 16u] = d * f32((q >> 4u) | (((qh >> (l + 16u)) & 1u) << 4u)) + m;
    }
  }
}
fn deq_q8_0(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  let o = rb + c * 34u;
  let d = h16(o);
  for (var j = 0u; j < 8u; j++) {
    let v = u32at(o + 2u + 4u * j);
    for (var b = 0u; b < 4u; b++) {
      (*w)[4u * j + b] = d * f32(bitcast<i32>(v << (24u - 8u * b)) >> 24u);
    }
  }
}
const IQ4NL = array<f32, 16>(-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
                             1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);
fn deq_iq4_nl(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  let o = rb + c * 18u;
  let d = h16(o);
  for (var j = 0u; j < 4u; j++) {
    let v = u32at(o + 2u + 4u * j);
    for (var b = 0u; b < 4u; b++) {
      let q = (v >> (8u * b)) & 0xffu;
      (*w)[4u * j + b] = d * IQ4NL[q & 15u];
      (*w)[4u * j + b + 16u] = d * IQ4NL[q >> 4u];
    }
  }
}
// K-quants: chunk c is sub-block c % 8 of super-block c / 8.
fn scale_min_k4(sc: u32, j: u32) -> vec2<f32> {
  if (j < 4u) { return vec2<f32>(f32(b8(sc + j) & 63u), f32(b8(sc + j + 4u) & 63u)); }
  let s = (b8(sc + j + 4u) & 15u) | ((b8(sc + j - 4u) >> 6u) << 4u);
  let m = (b8(sc + j + 4u) >> 4u) | ((b8(sc + j) >> 6u) << 4u);
  return vec2<f32>(f32(s), f32(m));
}
fn deq_q4_k(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  let o = rb + (c / 8u) * 144u;
  let j = c % 8u;
  let sm = scale_min_k4(o + 4u, j);
  let d = h16(o) * sm.x;
  let m = h16(o + 2u) * sm.y;
  let qs = o + 16u + 32u * (j / 2u);
  let sh = 4u * (j & 1u);
  for (var l = 0u; l < 8u; l++) {
    let v = W[(qs >> 2u) + l];
    for (var b = 0u; b < 4u; b++) {
      (*w)[4u * l + b] = d * f32((v >> (8u * b + sh)) & 15u) - m;
    }
  }
}
fn deq_q5_k(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  let o = rb + (c / 8u) * 176u;
  let j = c % 8u;
  let sm = scale_min_k4(o + 4u, j);
  let d = h16(o) * sm.x;
  let m = h16(o + 2u) * sm.y;
  let qs = o + 48u + 32u * (j / 2u);
  let sh = 4u * (j & 1u);
  for (var l = 0u; l < 8u; l++) {
    let v = W[(qs >> 2u) + l];
    let hv = W[((o + 16u) >> 2u) + l];
    for (var b = 0u; b < 4u; b++) {
      let q = ((v >> (8u * b + sh)) & 15u) | (((hv >> (8u * b + j)) & 1u) << 4u);
      (*w)[4u * l + b] = d * f32(q) - m;
    }
  }
}
fn deq_q6_k(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  let o = rb + (c / 8u) * 210u;
  let j = c % 8u;
  let h = j / 4u;
  let r = j % 4u;
  let d = h16(o + 208u);
  let lo = o + 64u * h + 32u * (r & 1u);
  let hi = o + 128u + 32u * h;
  let s0 = d * f32(i8v(o + 192u + 8u * h + 2u * r));
  let s1 = d * f32(i8v(o + 192u + 8u * h + 2u * r + 1u));
  for (var l4 = 0u; l4 < 8u; l4++) {
    let lv = u32at(lo + 4u * l4);
    let hv = u32at(hi + 4u * l4);
    for (var b = 0u; b < 4u; b++) {
      let l = 4u * l4 + b;
      let ql = (lv >> (8u * b + 4u * (r >> 1u))) & 15u;
      let qh = (hv >> (8u * b + 2u * r)) & 3u;
      let s = select(s0, s1, l >= 16u);
      (*w)[l] = s * (f32(ql | (qh << 4u)) - 32.0);
    }
  }
}
fn scale_q3_k(sc: u32, i: u32) -> f32 {
  var lo4 = 0u;
  if (i < 8u) { lo4 = b8(sc + i) & 15u; } else { lo4 = b8(sc + i - 8u) >> 4u; }
  let hi2 = (b8(sc + 8u + i % 4u) >> (2u * (i / 4u))) & 3u;
  return f32(i32(lo4 | (hi2 << 4u)) - 32);
}
fn deq_q3_k(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  let o = rb + (c / 8u) * 110u;
  let j = c % 8u;
  let h = j / 4u;
  let jj = j % 4u;
  let d = h16(o + 108u);
  let s0 = d * scale_q3_k(o + 96u, 8u * h + 2u * jj);
  let s1 = d * scale_q3_k(o + 96u, 8u * h + 2u * jj + 1u);
  for (var l4 = 0u; l4 < 8u; l4++) {
    let qv = u32at(o + 32u + 32u * h + 4u * l4);
    let hm = u32at(o + 4u * l4);
    for (var b = 0u; b < 4u; b++) {
      let l = 4u * l4 + b;
      let q = (qv >> (8u * b + 2u * jj)) & 3u;
      let hb = (hm >> (8u * b + 4u * h + jj)) & 1u;
      let s = select(s0, s1, l >= 16u);
      (*w)[l] = s * (f32(q) - select(4.0, 0.0, hb == 1u));
    }
  }
}
fn deq_q2_k(rb: u32, c: u32, K: u32, w: ptr<function, array<f32, 32>>) {
  let o = rb + (c / 8u) * 84u;
  let j = c % 8u;
  let h = j / 4u;
  let jj = j % 4u;
  let d = h16(o + 80u);
  let dm = h16(o + 82u);
  let sc0 = b8(o + 8u * h + 2u * jj);
  let sc1 = b8(o + 8u * h + 2u * jj + 1u);
  for (var l4 = 0u; l4 < 8u; l4++) {
    let qv = u32at(o + 16u + 32u * h + 4u * l4);
    for (var b = 0u; b < 4u; b++) {
      let l = 4u * l4 + b;
      let sc = select(sc0, sc1, l >= 16u);
      let q = (qv >> (8u * b + 2u * jj)) & 3u;
      (*w)[l] = d * f32(sc & 15u) * f32(q) - dm * f32(sc >> 4u);
    }
  }
}
