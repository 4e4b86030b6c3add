// out[t, :] = table[ids[t], :] * scale for the ids that fall in this chunk of rows.
struct P { D: u32, T: u32, rb: u32, row0: u32, nrows: u32, scale: f32, pad0: u32, pad1: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> W: array<u32>;
@group(0) @binding(2) var<storage, read> IDS: array<i32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let nch = (p.D + 31u) / 32u;
  let c = gid.x;
  let t = gid.y + gid.z * 65535u;  // tokens over y and z (65535 workgroups a dimension)
  if (c >= nch || t >= p.T) { return; }
  let id = u32(IDS[t]);
  if (id < p.row0 || id >= p.row0 + p.nrows) { return; }
  var w: array<f32, 32>;
  DEQ((id - p.row0) * p.rb, c, p.D, &w);
  let lim = min(32u, p.D - c * 32u);
  for (var i = 0u; i < lim; i++) { Y[t * p.D + c * 32u + i] = w[i] * p.scale; }
}
