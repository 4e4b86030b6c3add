// instance_norm and group_norm of graph v2 (op.h InstanceNorm, GroupNorm): one workgroup of 256
// invocations a (batch, group) row of Cg channels of S spatial values each; every invocation sums
// its strided share (compensated), the workgroup adds the 256 partial sums as a tree, for the mean
// and then for the variance about it; y = (x - mean) / sqrt(var + eps) * scale[c] + bias[c].
// (One invocation a row, as before, looped over the whole row: 32 rows of 32768 values gave the
// UNet's decoder 32 busy lanes, and lavapipe stops a loop after 65535 iterations.)
struct P {
  rows: u32, nx: u32, S: u32, C: u32,
  Cg: u32, eps: f32, one: f32, pad0: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<storage, read> A: array<f32>;
@group(0) @binding(3) var<storage, read> B: array<f32>;
@group(0) @binding(4) var<storage, read> C: array<f32>;

var<workgroup> part: array<f32, 256>;

fn wg_sum(t: u32, v: f32) -> f32 {
  part[t] = v;
  workgroupBarrier();
  for (var w = 128u; w > 0u; w = w >> 1u) {
    if (t < w) { part[t] = part[t] + part[t + w]; }
    workgroupBarrier();
  }
  let r = part[0];
  workgroupBarrier();
  return r;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
  let row = wid.x + wid.y * p.nx;
  if (row >= p.rows) { return; }
  let cnt = p.Cg * p.S;
  let b = row * cnt;
  var s = 0.0;
  var comp = 0.0;
  for (var k = t; k < cnt; k += 256u) {
    let yk = A[b + k] - comp;
    let u = (s + yk) * p.one;
    comp = (u - s) - yk;
    s = u;
  }
  let mean = wg_sum(t, s) / f32(cnt);
  s = 0.0;
  comp = 0.0;
  for (var k = t; k < cnt; k += 256u) {
    let dv = A[b + k] - mean;
    let yk = dv * dv - comp;
    let u = (s + yk) * p.one;
    comp = (u - s) - yk;
    s = u;
  }
  let inv = 1.0 / sqrt(wg_sum(t, s) / f32(cnt) + p.eps);
  for (var k = t; k < cnt; k += 256u) {
    let ch = (row * p.Cg + k / p.S) % p.C;
    Y[b + k] = (A[b + k] - mean) * (B[ch] * inv) + C[ch];
  }
}
