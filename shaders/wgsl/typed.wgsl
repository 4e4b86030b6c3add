// The element-wise ops of graph v2 with integer or bool inputs or results (op.h binary, unary,
// cast): comparisons and logic (-> bool), integer arithmetic, not / neg / abs, cast. Element types
// (codes in u[0] a, u[1] b, u[2] y): 0 f32, 1 i32, 2 i64 (two u32 words, low first, as in host
// memory), 3 bool (one byte). Integers are computed as exact 64-bit two's complement pairs (lo, hi)
// (add, sub, mul: the low 64 bits, as the cpu's wrapping int64 arithmetic; comparisons, min, max,
// neg, abs), so i32 and i64 results equal the cpu's bit for bit; f32 inputs are compared as f32.
// One invocation an output element, or for bool outputs an output word (4 elements, packed); the
// grid folded into x and y. Broadcasting by strides (sa, sb: 0 along broadcast dims) over shape.
// u[3]: the output's element count; code: the binary fn (op.h kBinaryFns: 0 add, 1 sub, 2 mul,
// 5 min, 6 max, 8 equal, 9 less, 10 less_equal, 11 greater, 12 greater_equal, 13 and, 14 or,
// 15 xor), or 64 + the unary fn (0 neg, 1 abs, 14 not, 16 isnan, 17 isinf: f32 -> bool), or 128: cast.
// Variants besides BINARY / ONE (an output element an invocation, the same pairs):
//   REDUCE  reduce of i32 / i64 (code 0 sum: wrapping, as the cpu's int64 sum; 2 max; 3 min): the
//           kept dims in shape / sa (the input's strides), the reduced ones in sb (sizes) / sc
//           (strides), as array_nn.wgsl REDUCE; u[4]: reduced dims, u[5]: reduced elements
//   RANGE   range: i32 / i64 y[i] = start + i * delta (start in u[4], u[5], delta in u[6], u[7]);
//           f32 as the cpu's (onnxruntime's) loop v = start, v += delta in f32, run by invocation 0
//           alone (each value needs every add before it; f0 start, f1 delta)
//#include array_params
@group(0) @binding(1) var<storage, read_write> Y: array<u32>;
@group(0) @binding(2) var<storage, read> A: array<u32>;
//#if BINARY
@group(0) @binding(3) var<storage, read> B: array<u32>;
//#endif


fn sext(lo: u32) -> vec2<u32> { return vec2<u32>(lo, select(0u, 0xffffffffu, (lo & 0x80000000u) != 0u)); }

// element j of A (t: its type) as an integer pair (f32: its bits in x)
fn load_a(t: u32, j: u32) -> vec2<u32> {
  if (t == 2u) { return vec2<u32>(A[2u * j], A[2u * j + 1u]); }
  if (t == 3u) { return vec2<u32>((A[j >> 2u] >> ((j & 3u) * 8u)) & 0xffu, 0u); }
  if (t == 1u) { return sext(A[j]); }
  return vec2<u32>(A[j], 0u);
}
//#if BINARY
fn load_b(t: u32, j: u32) -> vec2<u32> {
  if (t == 2u) { return vec2<u32>(B[2u * j], B[2u * j + 1u]); }
  if (t == 3u) { return vec2<u32>((B[j >> 2u] >> ((j & 3u) * 8u)) & 0xffu, 0u); }
  if (t == 1u) { return sext(B[j]); }
  return vec2<u32>(B[j], 0u);
}
//#endif

fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let lo = a.x + b.x;
  return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}
fn neg64(a: vec2<u32>) -> vec2<u32> { return add64(vec2<u32>(~a.x, ~a.y), vec2<u32>(1u, 0u)); }
fn less64(a: vec2<u32>, b: vec2<u32>) -> bool {
  return bitcast<i32>(a.y) < bitcast<i32>(b.y) || (a.y == b.y && a.x < b.x);
}
// the low 64 bits of a * b (32 x 32 -> 64 in 16-bit halves, then the cross terms)
fn mul64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let a0 = a.x & 0xffffu;
  let a1 = a.x >> 16u;
  let b0 = b.x & 0xffffu;
  let b1 = b.x >> 16u;
  let p00 = a0 * b0;
  let p01 = a0 * b1;
  let p10 = a1 * b0;
  let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
  let lo = (p00 & 0xffffu) | (mid << 16u);
  let hi = a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u) + a.y * b.x + a.x * b.y;
  return vec2<u32>(lo, hi);
}

// f32 -> integer pair, truncated toward zero
fn f2i64(x: f32) -> vec2<u32> {
  let t = trunc(x);
  if (abs(t) < 2147483648.0) { return sext(bitcast<u32>(i32(t))); }
  let hi = floor(t / 4294967296.0);
  let lo = t - hi * 4294967296.0;
  return vec2<u32>(u32(lo), bitcast<u32>(i32(hi)));
}

// output element e: its value as a pair (bool: 0 / 1 in x; f32: bits in x)
fn value(e: u32) -> vec2<u32> {
  var rem = e;
  var oa = 0u;
  var ob = 0u;
  for (var d = i32(p.ndim) - 1; d >= 0; d--) {
    let du = u32(d);
    let n = shp(du);
    let c = rem % n;
    rem = rem / n;
    oa = oa + c * s_a(du);
    ob = ob + c * s_b(du);
  }
  let ta = uu(0u);
  let ty = uu(2u);
  let a = load_a(ta, oa);
  let code = p.code;
  if (code == 128u) {  // cast
    if (ta == 0u) {
      if (ty == 0u) { return a; }
      let x = bitcast<f32>(a.x);
      if (ty == 3u) { return vec2<u32>(select(0u, 1u, x != 0.0), 0u); }
      return f2i64(x);  // i32: its low word
    }
    if (ty == 0u) { return vec2<u32>(bitcast<u32>(f32(bitcast<i32>(a.x))), 0u); }  // i32 / bool
    if (ty == 3u) { return vec2<u32>(select(0u, 1u, a.x != 0u || a.y != 0u), 0u); }
    return a;  // to i32 (the low word) / i64
  }
  if (code >= 64u) {  // unary
    let f = code - 64u;
    if (f == 14u) { return vec2<u32>(select(1u, 0u, a.x != 0u), 0u); }  // not
    if (f == 16u || f == 17u) {  // isnan, isinf of f32 (from the bits: exponent all ones; integers: never)
      let m = a.x & 0x7fffffffu;
      let hit = select(m == 0x7f800000u, m > 0x7f800000u, f == 16u);
      return vec2<u32>(select(0u, 1u, ta == 0u && hit), 0u);
    }
    if (f == 0u) { return neg64(a); }
    return select(a, neg64(a), bitcast<i32>(a.y) < 0);  // abs
  }
//#if BINARY
  let b = load_b(uu(1u), ob);
  if (code >= 8u && code <= 12u) {  // comparisons
    var lt: bool;
    var gt: bool;
    if (ta == 0u) {
      if (ty == 0u) { return a; }
      let x = bitcast<f32>(a.x);
      let y = bitcast<f32>(b.x);
      lt = x < y;
      gt = x > y;
      if (code == 8u) { return vec2<u32>(select(0u, 1u, x == y), 0u); }
      if (code == 10u) { return vec2<u32>(select(0u, 1u, x <= y), 0u); }
      if (code == 12u) { return vec2<u32>(select(0u, 1u, x >= y), 0u); }
    } else {
      lt = less64(a, b);
      gt = less64(b, a);
      if (code == 8u) { return vec2<u32>(select(0u, 1u, all(a == b)), 0u); }
      if (code == 10u) { return vec2<u32>(select(0u, 1u, !gt), 0u); }
      if (code == 12u) { return vec2<u32>(select(0u, 1u, !lt), 0u); }
    }
    return vec2<u32>(select(0u, 1u, select(gt, lt, code == 9u)), 0u);
  }
  if (code == 13u) { return vec2<u32>(select(0u, 1u, a.x != 0u && b.x != 0u), 0u); }
  if (code == 14u) { return vec2<u32>(select(0u, 1u, a.x != 0u || b.x != 0u), 0u); }
  if (code == 15u) { return vec2<u32>(select(0u, 1u, (a.x != 0u) != (b.x != 0u)), 0u); }
  if (code == 0u) { return add64(a, b); }
  if (code == 1u) { return add64(a, neg64(b)); }
  if (code == 2u) { return mul64(a, b); }
  if (code == 5u) { return select(b, a, less64(a, b)); }
  return select(a, b, less64(a, b));  // max
//#else
  return a;
//#endif
}

//#if REDUCE
fn reduce_int(i: u32) -> vec2<u32> {
  var rem = i;
  var base = 0u;
  for (var d = i32(p.ndim) - 1; d >= 0; d--) {
    let n = shp(u32(d));
    base = base + (rem % n) * s_a(u32(d));
    rem = rem / n;
  }
  let nr = uu(4u);
  let cnt = uu(5u);
  var acc = vec2<u32>(0u, 0u);
  for (var r = 0u; r < cnt; r++) {
    var rr = r;
    var off = base;
    for (var d = i32(nr) - 1; d >= 0; d--) {
      let n = s_b(u32(d));
      off = off + (rr % n) * s_c(u32(d));
      rr = rr / n;
    }
    let v = load_a(uu(0u), off);
    if (p.code == 0u) { acc = add64(acc, v); }
    else if (r == 0u) { acc = v; }
    else if (p.code == 2u) { acc = select(acc, v, less64(acc, v)); }
    else { acc = select(acc, v, less64(v, acc)); }
  }
  return acc;
}
//#endif

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x + gid.y * p.nx * 256u;
  if (i >= p.n) { return; }
  let ty = uu(2u);
//#if RANGE
  if (ty == 0u) {
    if (i == 0u) {
      var v = p.f0;
      for (var k = 0u; k < uu(3u); k++) {
        Y[k] = bitcast<u32>(v);
        v = v + p.f1;
      }
    }
    return;
  }
  let r = add64(vec2<u32>(uu(4u), uu(5u)), mul64(vec2<u32>(i, 0u), vec2<u32>(uu(6u), uu(7u))));
  if (ty == 2u) {
    Y[2u * i] = r.x;
    Y[2u * i + 1u] = r.y;
  } else {
    Y[i] = r.x;
  }
  return;
//#endif
//#if REDUCE
  let a = reduce_int(i);
  if (ty == 2u) {
    Y[2u * i] = a.x;
    Y[2u * i + 1u] = a.y;
  } else {
    Y[i] = a.x;
  }
  return;
//#endif
  if (ty == 3u) {  // bool: word i holds elements 4i .. 4i + 3
    let cnt = uu(3u);
    var w = 0u;
    for (var k = 0u; k < 4u; k++) {
      let e = 4u * i + k;
      if (e < cnt) { w = w | ((value(e).x & 1u) << (8u * k)); }
    }
    Y[i] = w;
    return;
  }
  let v = value(i);
  if (ty == 2u) {
    Y[2u * i] = v.x;
    Y[2u * i + 1u] = v.y;
  } else {
    Y[i] = v.x;
  }
}
