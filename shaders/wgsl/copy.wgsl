// Copy with a conversion (Copy): y[i] = x[i] for n elements, each tensor f32, f16 or bf16
// (IN_F16 / IN_BF16 name a 16-bit input, OUT16 a 16-bit output, bf16 with OUT_BF16; f32
// otherwise), read and written
// as words: 16-bit tensors hold two elements a word (their element offsets are even). An
// invocation converts the pair 2g, 2g + 1; an odd last element goes alone and keeps the other
// half of its word. The conversions: half.wgsl.
struct P { n: u32, in_off: u32, out_off: u32, nx: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> Y: array<u32>;
@group(0) @binding(2) var<storage, read> X: array<u32>;

//#include half

fn load(j: u32) -> f32 {
//#if IN_F16
  return f16_to_f32((X[(p.in_off + j) >> 1u] >> (16u * ((p.in_off + j) & 1u))) & 0xffffu);
//#else
//#if IN_BF16
  return bitcast<f32>(((X[(p.in_off + j) >> 1u] >> (16u * ((p.in_off + j) & 1u))) & 0xffffu) << 16u);
//#else
  return bitcast<f32>(X[p.in_off + j]);
//#endif
//#endif
}

fn to16(v: f32) -> u32 {
//#if OUT_BF16
  return f32_to_bf16(v);
//#else
  return f32_to_f16(v);
//#endif
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let g = gid.x + gid.y * p.nx * 256u;
  let j = 2u * g;
  if (j >= p.n) { return; }
  let two = j + 1u < p.n;
//#if OUT16
  let w = (p.out_off + j) >> 1u;
  var hi = Y[w] >> 16u;
  if (two) { hi = to16(load(j + 1u)); }
  Y[w] = to16(load(j)) | (hi << 16u);
//#else
  Y[p.out_off + j] = bitcast<u32>(load(j));
  if (two) { Y[p.out_off + j + 1u] = bitcast<u32>(load(j + 1u)); }
//#endif
}
