// One-directional LSTM (op.h Lstm, ONNX gate order i, o, f, c): one workgroup a batch row b, its
// 256 threads owning hidden units t, t + 256, .. (H <= MAXH). The state h lives in workgroup
// memory (every unit's gates read all of it), c in the owning thread; each step's gate sums in
// f32, compensated (Kahan; p.one = 1.0 keeps the compensation from being folded away, as in
// array_nn.wgsl). HN / CN hold h0 / c0 on entry (copied there first; has_h / has_c 0:
// zeros) and h_S / c_S on exit.
const MAXH = 1024u;
struct P { S: u32, B: u32, I: u32, H: u32, has_h: u32, has_c: u32, one: f32, pad1: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<storage, read> X: array<f32>;
@group(0) @binding(3) var<storage, read> W: array<f32>;
@group(0) @binding(4) var<storage, read> R: array<f32>;
@group(0) @binding(5) var<storage, read> Bias: array<f32>;
@group(0) @binding(6) var<storage, read_write> HN: array<f32>;
@group(0) @binding(7) var<storage, read_write> CN: array<f32>;

//#include act

var<workgroup> hs: array<f32, MAXH>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let b = wid.x;
  let H = p.H;
  let I = p.I;
  var cs: array<f32, 4>;
  var hn: array<f32, 4>;
  for (var u = 0u; u < 4u; u++) {
    let j = lid.x + u * 256u;
    if (j < H) {
      hs[j] = select(0.0, HN[b * H + j], p.has_h == 1u);
      cs[u] = select(0.0, CN[b * H + j], p.has_c == 1u);
    }
  }
  workgroupBarrier();
  for (var s = 0u; s < p.S; s++) {
    let xo = (s * p.B + b) * I;
    for (var u = 0u; u < 4u; u++) {
      let j = lid.x + u * 256u;
      if (j < H) {
        var g: array<f32, 4>;
        for (var k = 0u; k < 4u; k++) {
          let r = k * H + j;
          var acc = Bias[r] + Bias[4u * H + r];
          var comp = 0.0;
          for (var q = 0u; q < I; q++) {
            let yk = X[xo + q] * W[r * I + q] - comp;
            let t = (acc + yk) * p.one;
            comp = (t - acc) - yk;
            acc = t;
          }
          for (var q = 0u; q < H; q++) {
            let yk = hs[q] * R[r * H + q] - comp;
            let t = (acc + yk) * p.one;
            comp = (t - acc) - yk;
            acc = t;
          }
          g[k] = acc;
        }
        cs[u] = sigmoid_p(g[2]) * cs[u] + sigmoid_p(g[0]) * tanh_p(g[3]);
        hn[u] = sigmoid_p(g[1]) * tanh_p(cs[u]);
        Y[(s * p.B + b) * H + j] = hn[u];
      }
    }
    workgroupBarrier();
    for (var u = 0u; u < 4u; u++) {
      let j = lid.x + u * 256u;
      if (j < H) { hs[j] = hn[u]; }
    }
    workgroupBarrier();
  }
  for (var u = 0u; u < 4u; u++) {
    let j = lid.x + u * 256u;
    if (j < H) {
      HN[b * H + j] = hs[j];
      CN[b * H + j] = cs[u];
    }
  }
}
