// f16 / bf16 <-> f32 by bit arithmetic (no implementation-defined rounding or flushing):
// f16 -> f32 exact, subnormals included; f32 -> f16 / bf16 round as csrc/core/quant.cc's
// f32_to_fp16 / f32_to_bf16 do (nearest even, f16 overflow to inf, NaN stays NaN).
fn f16_to_f32(h: u32) -> f32 {
  let s = (h & 0x8000u) << 16u;
  let e = (h >> 10u) & 0x1fu;
  let m = h & 0x3ffu;
  if (e == 0u) {  // zero or subnormal: m * 2^-24, exact in f32
    let v = f32(m) * 5.9604644775390625e-8;
    return select(v, -v, s != 0u);
  }
  if (e == 31u) { return bitcast<f32>(s | 0x7f800000u | (m << 13u)); }
  return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}

fn f32_to_f16(f: f32) -> u32 {
  let u = bitcast<u32>(f);
  let sign = (u >> 16u) & 0x8000u;
  let a = u & 0x7fffffffu;
  if (a > 0x7f800000u) { return sign | 0x7e00u | ((a >> 13u) & 0x3ffu); }  // NaN
  if (a >= 0x477ff000u) { return sign | 0x7c00u; }  // rounds to >= 65520: inf
  if (a < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    if (a < 0x33000000u) { return sign; }
    let man = (a & 0x7fffffu) | 0x800000u;
    let sh = 126u - (a >> 23u);
    var q = man >> sh;
    let rem = man & ((1u << sh) - 1u);
    let half = 1u << (sh - 1u);
    if (rem > half || (rem == half && (q & 1u) == 1u)) { q += 1u; }
    return sign | q;
  }
  var v = a - (112u << 23u);
  let rem = v & 0x1fffu;
  v = v >> 13u;
  if (rem > 0x1000u || (rem == 0x1000u && (v & 1u) == 1u)) { v += 1u; }
  return sign | v;
}

fn f32_to_bf16(f: f32) -> u32 {
  let u = bitcast<u32>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) { return (u >> 16u) | 0x40u; }
  return (u + 0x7fffu + ((u >> 16u) & 1u)) >> 16u;
}
