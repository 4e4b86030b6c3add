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
// exp to about 1 ulp (the hardware's may be several: lavapipe's reaches 9): x = k ln2 + r with
// ln2 in two parts (k ln2_hi exact), exp(r) by its Taylor series to r^7 on |r| <= ln2 / 2
// (truncation under 0.1 ulp), scaled by 2^k. Used by the array kernels of graph v2, whose
// results are held to op-f32 against a cpu computing in double.
fn exp_p(x: f32) -> f32 {
  // +inf through a let: Tint (Dawn) refuses an infinite constant expression
  let inf_bits = 0x7f800000u;
  if (x > 88.72283) { return bitcast<f32>(inf_bits); }
  if (x < -103.97208) { return 0.0; }
  let k = round(x * 1.4426950408889634);
  let r = (x - k * 0.693145751953125) - k * 1.428606765330187e-6;
  let q = r * r * (0.16666666666666666 + r * (0.041666666666666664 + r * (0.008333333333333333 +
          r * (0.001388888888888889 + r * 0.0001984126984126984))));
  return ldexp(1.0 + (r + r * (r * 0.5 + q)), i32(k));
}
fn sigmoid_p(x: f32) -> f32 { return 1.0 / (1.0 + exp_p(-x)); }
// tanh with exp_p: the odd series near 0, (1 - e) / (1 + e) with e = exp(-2|x|) elsewhere.
fn tanh_p(x: f32) -> f32 {
  let a = abs(x);
  if (a < 0.3) { return tanh_s(x); }
  let e = exp_p(-2.0 * min(a, 15.0));
  return sign(x) * (1.0 - e) / (1.0 + e);
}
