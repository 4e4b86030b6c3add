// Shared helpers: packed-u32 byte access to quantized blocks (docs/quant.md layouts).
// W is the weight buffer as array<u32>; every offset is in bytes.
fn b8(o: u32) -> u32 { return (W[o >> 2u] >> ((o & 3u) * 8u)) & 0xffu; }
fn i8v(o: u32) -> i32 { return bitcast<i32>(b8(o) << 24u) >> 24u; }
// f16 at an even byte offset.
fn h16(o: u32) -> f32 { return unpack2x16float((W[o >> 2u] >> ((o & 2u) * 8u)) & 0xffffu).x; }
fn nib(v: u32, i: u32) -> f32 { return f32((v >> (8u * i)) & 15u); }
// Four-value helpers of the decoders (dequant.wgsl, mvdot.wgsl).
const SH4 = vec4<u32>(0u, 8u, 16u, 24u);
fn hsum(v: vec4<f32>) -> f32 { return (v.x + v.y) + (v.z + v.w); }
// The four low (s = 0) or high (s = 4) nibbles of the bytes of v.
fn nib4(v: u32, s: u32) -> vec4<f32> { return vec4<f32>(((vec4<u32>(v) >> (SH4 + s)) & vec4<u32>(15u))); }
// The four signed bytes of v.
fn sb4(v: u32) -> vec4<f32> { return vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(v) << (vec4<u32>(24u) - SH4)) >> vec4<u32>(24u)); }
// The fifth bits of values l .. l + 3 (bit l of qh is value l's), as 0 or 16.
fn hb4(qh: u32, l: u32) -> vec4<f32> {
  return vec4<f32>(((vec4<u32>(qh) >> (vec4<u32>(0u, 1u, 2u, 3u) + l)) & vec4<u32>(1u)) << vec4<u32>(4u));
}
// The four bytes of v.
fn bytes4(v: u32) -> vec4<f32> { return vec4<f32>((vec4<u32>(v) >> SH4) & vec4<u32>(255u)); }
