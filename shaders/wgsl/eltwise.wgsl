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

// tanh to about 1 ulp: odd series near 0, (1 - e) / (1 + e) with e = exp(-2|x|) elsewhere.
fn tanh_s(x: f32) -> f32 {
  let a = abs(x);
  if (a < 0.3) {
    let y2 = x * x;
    return x * (1.0 + y2 * (-0.3333333333 + y2 * (0.1333333333 + y2 * (-0.0539682540 +
           y2 * (0.0218694885 + y2 * -0.0088632355)))));
  }
  let e = exp(-2.0 * min(a, 15.0));
  return sign(x) * (1.0 - e) / (1.0 + e);
}
fn gelu_tanh(x: f32) -> f32 { return 0.5 * x * (1.0 + tanh_s(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
// erf with |error| < 1.2e-7 (Numerical Recipes erfc, Chebyshev fit).
fn erf_(x: f32) -> f32 {
  let z = abs(x);
  let t = 1.0 / (1.0 + 0.5 * z);
  let r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
          t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
          t * (-0.82215223 + t * 0.17087277)))))))));
  return select(r - 1.0, 1.0 - r, x >= 0.0);
}
fn gelu_erf(x: f32) -> f32 { return 0.5 * x * (1.0 + erf_(x * 0.7071067811865476)); }
fn silu(x: f32) -> f32 { return x / (1.0 + exp(-x)); }

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
