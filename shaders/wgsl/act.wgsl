// Activation functions shared by the element-wise, attention (softcap) and matrix kernels
// (`//#include act`; one definition of each, as the cpu backend has in csrc/core).
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
