// Rotary embedding's pairs and turn (`//#include rotary`: rope.wgsl, the decode attention of
// attention.wgsl with ROPE), one definition so that both rotate the same way.

// The pair of dims that rotation i turns (neox: (i, i + half); normal: (2i, 2i + 1)).
fn rot_pair(i: u32, half: u32, neox: u32) -> vec2<u32> {
  if (neox != 0u) { return vec2<u32>(i, i + half); }
  return vec2<u32>(2u * i, 2u * i + 1u);
}
// (x0, x1) turned by the angle of cosine c and sine s.
fn rotate(x0: f32, x1: f32, c: f32, s: f32) -> vec2<f32> { return vec2<f32>(x0 * c - x1 * s, x1 * c + x0 * s); }
