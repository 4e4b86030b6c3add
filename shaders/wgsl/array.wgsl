// The f32 array ops of graph v2 (op.h tags 33-59), one thread an output element (256 a workgroup,
// the grid folded into x and y). Index arithmetic over up to 8 dims: an element's coordinates
// in p.shape (row-major), each input's offset the dot product with its strides (0 along a
// broadcast dim). Variants:
//   UNARY   y[i] = f(A[i])                 (code: the unary fn of kUnaryFns; 32+ sigmoid, tanh, sqrt)
//   BINARY  y[i] = g(A[oa(i)], B[ob(i)])   (code: add sub mul div pow min max mod)
//   WHERE   y[i] = C[oc(i)] != 0 ? A[oa(i)] : B[ob(i)]   (C: bool bytes)
//   GATHER  y[i] = A[base + oa(i)]         (transpose, slice: strides of the input, permuted / stepped)
//   SCATTER Y[base + oa(i)] = A[i]         (concat: one input into its part of the output)
//   PAD     y[i] = A[base + clamped or mirrored coords], or the value (code: 0 constant, 1 reflect,
//           2 edge; base: pad_dyn's first kept element)
//#include array_params
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<storage, read> A: array<f32>;
//#if BINARY
@group(0) @binding(3) var<storage, read> B: array<f32>;
//#endif
//#if WHERE
@group(0) @binding(3) var<storage, read> B: array<f32>;
@group(0) @binding(4) var<storage, read> C: array<u32>;
//#endif

//#include act


// sin / cos with the argument reduced by pi/2 in three parts (Cody-Waite), then minimax
// polynomials on [-pi/4, pi/4]: a few ulp for |x| up to about 1e5.
fn sincos_q(x: f32, cosine: bool) -> f32 {
  let q = round(x * 0.6366197723675814);
  var r = x - q * 1.5703125;
  r = r - q * 4.837512969970703125e-4;
  r = r - q * 7.54978995489188216e-8;
  var k = i32(q) + select(0, 1, cosine);
  let r2 = r * r;
  let s = r + r * r2 * (-0.16666666641626524 + r2 * (0.008333329385889463 + r2 * (-0.00019839334836096632 +
          r2 * 2.718311493989822e-6)));
  let c = 1.0 - 0.5 * r2 + r2 * r2 * (0.041666666666666664 + r2 * (-0.001388888888887411 +
          r2 * (2.480158728947673e-5 + r2 * -2.7557314351390663e-7)));
  k = k & 3;
  if (k == 0) { return s; }
  if (k == 1) { return c; }
  if (k == 2) { return -s; }
  return -c;
}

fn unary(code: u32, x: f32) -> f32 {
  switch code {
    case 0u: { return -x; }
    case 1u: { return abs(x); }
    case 2u: { return exp_p(x); }
    case 3u: { return log(x); }
    case 4u: { return erf_(x); }
    case 5u: { return sincos_q(x, false); }
    case 6u: { return sincos_q(x, true); }
    case 7u: { return ceil(x); }
    case 8u: { return floor(x); }
    case 9u: { return round(x); }  // half to even, as ONNX Round
    case 10u: { return sign(x); }
    case 11u: { return 1.0 / x; }
    case 12u: { return select(log(1.0 + exp_p(x)), x + log(1.0 + exp_p(-x)), x > 0.0); }
    case 13u: { return select(p.f0 * x, x, x >= 0.0); }
    case 15u: { return select(select(x, p.f1, x > p.f1), p.f0, x < p.f0); }
    case 32u: { return sigmoid_p(x); }
    case 33u: { return tanh_p(x); }
    case 34u: { return sqrt(x); }
    default: { return x; }
  }
}

fn binary(code: u32, a: f32, b: f32) -> f32 {
  switch code {
    case 0u: { return a + b; }
    case 1u: { return a - b; }
    case 2u: { return a * b; }
    case 3u: { return a / b; }
    case 4u: {  // pow: a negative base only with an integer exponent (its sign from the exponent's parity)
      if (b == 0.0) { return 1.0; }
      let m = pow(abs(a), b);
      if (a >= 0.0) { return m; }
      if (b != floor(b)) { return bitcast<f32>(0x7fc00000u); }
      return select(m, -m, (abs(b) % 2.0) == 1.0);
    }
    case 5u: { return min(a, b); }
    case 6u: { return max(a, b); }
    case 7u: {  // numpy's mod: the sign of b
      let r = a - b * trunc(a / b);
      return select(r, r + b, r != 0.0 && ((r < 0.0) != (b < 0.0)));
    }
    default: { return a; }
  }
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x + gid.y * p.nx * 256u;
  if (i >= p.n) { return; }
//#if UNARY
  Y[i] = unary(p.code, A[i]);
//#else
  var rem = i;
  var oa = 0u;
  var ob = 0u;
  var oc = 0u;
  var inside = true;
  for (var d = i32(p.ndim) - 1; d >= 0; d--) {
    let du = u32(d);
    let n = shp(du);
    let c = rem % n;
    rem = rem / n;
//#if PAD
    // sa: the input's strides, sb: pads before, sc: the input's dims
    let len = i32(s_c(du));
    var s = i32(c) - i32(s_b(du));
    if (p.code == 1u) {
      if (len == 1) { s = 0; }
      else {
        let per = 2 * (len - 1);
        s = s % per;
        if (s < 0) { s = s + per; }
        if (s >= len) { s = per - s; }
      }
    } else if (p.code == 2u) {
      s = clamp(s, 0, len - 1);
    } else if (s < 0 || s >= len) {
      inside = false;
    }
    oa = oa + u32(max(s, 0)) * s_a(du);
//#else
    oa = oa + c * s_a(du);
    ob = ob + c * s_b(du);
    oc = oc + c * s_c(du);
//#endif
  }
//#if BINARY
  Y[i] = binary(p.code, A[oa], B[ob]);
//#endif
//#if WHERE
  let cb = (C[oc >> 2u] >> ((oc & 3u) * 8u)) & 0xffu;
  Y[i] = select(B[ob], A[oa], cb != 0u);
//#endif
//#if GATHER
  Y[i] = A[p.base + oa];
//#endif
//#if SCATTER
  Y[p.base + oa] = A[i];
//#endif
//#if PAD
  Y[i] = select(p.f0, A[p.base + oa], inside);
//#endif
//#endif
}
