// Pooling of x [B, S, D] under mask [B, S] (nonzero = a real token) into y [B, D]:
// mode 0 cls (row 0), 1 mean of the masked rows, 2 max of the masked rows (0 when none).
struct P { D: u32, S: u32, B: u32, mode: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<storage, read> X: array<f32>;
@group(0) @binding(3) var<storage, read> M: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x;
  let b = gid.y;
  if (i >= p.D || b >= p.B) { return; }
  let x0 = b * p.S * p.D;
  if (p.mode == 0u) {
    Y[b * p.D + i] = X[x0 + i];
    return;
  }
  var acc = 0.0;
  var n = 0u;
  for (var s = 0u; s < p.S; s++) {
    if (M[b * p.S + s] == 0.0) { continue; }
    let v = X[x0 + s * p.D + i];
    if (p.mode == 1u) { acc += v; } else if (n == 0u || v > acc) { acc = v; }
    n++;
  }
  var y = 0.0;
  if (n > 0u) {
    y = acc;
    if (p.mode == 1u) { y = acc / f32(n); }
  }
  Y[b * p.D + i] = y;
}
