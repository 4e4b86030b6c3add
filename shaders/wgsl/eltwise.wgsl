// Element-wise ops. Unary (op < 16): y = f(a). Binary (op >= 16): y = f(a, b[i % nb]).
// Variant INPLACE (unary only): y aliases a.
struct P { n: u32, nb: u32, op: u32, nx: u32, scale: f32, softcap: f32, pad0: u32, pad1: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
//#if !INPLACE
@group(0) @binding(2) var<storage, read> A: array<f32>;
//#endif
//#if BINARY
@group(0) @binding(3) var<storage, read> B: array<f32>;
//#endif

//#include act

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x + gid.y * p.nx * 256u;
  if (i >= p.n) { return; }
//#if INPLACE
  let a = Y[i];
//#else
  let a = A[i];
//#endif
  var b = 0.0;
//#if BINARY
  b = B[i % p.nb];
//#endif
  var y = a;
  switch p.op {
    case 0u: { y = a * p.scale; }
    case 1u: { y = silu(a); }
    case 2u: { y = gelu_erf(a); }
    case 3u: { y = gelu_tanh(a); }
    case 4u: { y = p.softcap * tanh_s(a / p.softcap); }
    case 5u: { y = max(a, 0.0); }
    case 16u: { y = a + b; }
    case 17u: { y = a * b; }
    case 18u: { y = silu(a) * b; }
    case 19u: { y = gelu_tanh(a) * b; }
    case 20u: { y = gelu_erf(a) * b; }
    default: { y = a; }
  }
  Y[i] = y;
}
