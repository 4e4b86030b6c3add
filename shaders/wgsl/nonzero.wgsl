// nonzero (op.h NonZero): the coordinates of the nonzero elements of A in row-major order, as i64
// [ndim, count] (two u32 words a value, low first). One workgroup of 256 invocations: invocation t
// owns the elements [t * chunk, (t + 1) * chunk); it counts its nonzeros (the count pass), the
// counts are scanned into each invocation's first output column, then each writes its elements'
// coordinates (the write pass). p.n: A's elements; shape / ndim: A's dims; u[0]: A's element type
// (0 f32: -0.0 is zero, NaN is not, as the cpu compares; 1 i32; 2 i64; 3 bool, one byte);
// u[1]: the count (the output's columns: the shape rule's, from the host's value of A).
//#include array_params
@group(0) @binding(1) var<storage, read_write> Y: array<u32>;
@group(0) @binding(2) var<storage, read> A: array<u32>;

var<workgroup> first: array<u32, 256>;

fn nonzero_at(t: u32, j: u32) -> bool {
  if (t == 3u) { return ((A[j >> 2u] >> ((j & 3u) * 8u)) & 0xffu) != 0u; }
  if (t == 2u) { return A[2u * j] != 0u || A[2u * j + 1u] != 0u; }
  if (t == 1u) { return A[j] != 0u; }
  return (A[j] & 0x7fffffffu) != 0u;  // f32: all but +-0 (NaN too, with no float compare)
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>) {
  let t = lid.x;
  let n = p.n;
  let ty = uu(0u);
  let chunk = (n + 255u) / 256u;
  let lo = min(t * chunk, n);
  let hi = min(lo + chunk, n);
  var c = 0u;
  for (var j = lo; j < hi; j++) {
    if (nonzero_at(ty, j)) { c++; }
  }
  first[t] = c;
  workgroupBarrier();
  if (t == 0u) {  // exclusive scan of the 256 counts
    var s = 0u;
    for (var q = 0u; q < 256u; q++) {
      let v = first[q];
      first[q] = s;
      s = s + v;
    }
  }
  workgroupBarrier();
  var k = first[t];
  let total = uu(1u);
  for (var j = lo; j < hi; j++) {
    if (nonzero_at(ty, j)) {
      var rem = j;
      for (var d = i32(p.ndim) - 1; d >= 0; d--) {
        let dn = shp(u32(d));
        let o = 2u * (u32(d) * total + k);
        Y[o] = rem % dn;
        Y[o + 1u] = 0u;
        rem = rem / dn;
      }
      k++;
    }
  }
}
