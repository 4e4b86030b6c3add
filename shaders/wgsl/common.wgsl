// Shared helpers: packed-u32 byte access to quantized blocks (docs/quant.md layouts).
// W is the weight buffer as array<u32>; every offset is in bytes.
fn b8(o: u32) -> u32 { return (W[o >> 2u] >> ((o & 3u) * 8u)) & 0xffu; }
fn i8v(o: u32) -> i32 { return bitcast<i32>(b8(o) << 24u) >> 24u; }
// f16 at an even byte offset.
fn h16(o: u32) -> f32 { return unpack2x16float((W[o >> 2u] >> ((o & 2u) * 8u)) & 0xffffu).x; }
// Four bytes at any byte offset (buffers carry 4 bytes of padding).
fn u32at(o: u32) -> u32 {
  let s = (o & 3u) * 8u;
  let a = W[o >> 2u];
  if (s == 0u) { return a; }
  return (a >> s) | (W[(o >> 2u) + 1u] << (32u - s));
}
fn nib(v: u32, i: u32) -> f32 { return f32((v >> (8u * i)) & 15u); }
