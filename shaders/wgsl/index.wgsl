// The index ops of graph v2 on any element of 4 or 8 bytes (f32, i32, i64: op.h tags 60-79) and the
// strided copies of the layout ops on those types, one invocation an output element (256 a
// workgroup, the grid folded into x and y). Elements move as whole u32 words (E = u[19] words an
// element: an i64 is its two words, low first, as in host memory), so every value is copied
// bit-exactly. Index inputs I are i32 or i64 (IW = u[18] words an index); an index is read from its
// low word as an i32 (exact for the indices of arrays under 2^31 elements), a negative one counts
// from the end of its dim, and one outside [-dim, dim) is clamped into the dim (the cpu refuses it
// with an error where the indices are host values). The parameter block is wgpu_ops_array.cc's
// ArrayParams. Variants:
//   STRIDED    y[i] = A[base + sum_d c_d sa[d]]  (c: i's coordinates in shape; transpose, slice,
//              slice_dyn, expand: strides of the input, permuted / stepped / 0 along broadcast dims)
//   GATHER_AX  gather along an axis: u = outer, n_idx, dim, inner (with BYTES: bool data, an output
//              word of four elements an invocation as STRIDED_BYTES, u[17]: the element count)
//   GATHER_EL  gather_elements: shape = out's (= indices'), sa = data's strides, u = axis, dim
//   GATHER_ND  gather_nd: u = m, slice, tuples, batch_stride; sa / sb = data's strides / dims of
//              the m indexed dims
//   SCATTER_ND scatter_nd after a copy of data into y (COPY): u = m, slice, tuples, reduction
//              (1: add, f32); sa / sb as GATHER_ND. A repeated index keeps the last update (none)
//              or adds every update in index order to data (add), as the cpu does: each invocation
//              checks the other tuples for its target (tuples^2 index reads in all)
//   STRIDED_BYTES  STRIDED on bool (one-byte) elements: invocation i writes output word i (elements
//              4i .. 4i + 3, packed; u[17]: the element count), each byte read from its source word
//   COPY       y[i] = A[i] (E words)
//   CUMSUM     f32 running sum along an axis: u = outer, len, inner, exclusive, reverse; one
//              invocation a line, compensated (the cpu sums in double)
//#include array_params
@group(0) @binding(1) var<storage, read_write> Y: array<u32>;
@group(0) @binding(2) var<storage, read> A: array<u32>;
//#if GATHER_AX
@group(0) @binding(3) var<storage, read> I: array<u32>;
//#endif
//#if GATHER_EL
@group(0) @binding(3) var<storage, read> I: array<u32>;
//#endif
//#if GATHER_ND
@group(0) @binding(3) var<storage, read> I: array<u32>;
//#endif
//#if SCATTER_ND
@group(0) @binding(3) var<storage, read> I: array<u32>;
//#endif


// y element i = A element j (E words)
fn put(i: u32, j: u32) {
  let E = uu(19u);
  for (var w = 0u; w < E; w++) { Y[i * E + w] = A[j * E + w]; }
}

//#if GATHER_AX
fn index_at(k: u32, dim: u32) -> u32 {
  let v = bitcast<i32>(I[k * uu(18u)]);
  return u32(clamp(select(v, v + i32(dim), v < 0), 0, i32(dim) - 1));
}
// the data element output element i reads
fn gather_src(i: u32) -> u32 {
  let n_idx = uu(1u);
  let dim = uu(2u);
  let inner = uu(3u);
  let e = i % inner;
  let j = (i / inner) % n_idx;
  let o = i / (inner * n_idx);
  return (o * dim + index_at(j, dim)) * inner + e;
}
//#endif
//#if GATHER_EL
fn index_at(k: u32, dim: u32) -> u32 {
  let v = bitcast<i32>(I[k * uu(18u)]);
  return u32(clamp(select(v, v + i32(dim), v < 0), 0, i32(dim) - 1));
}
//#endif
//#if GATHER_ND
fn index_at(k: u32, dim: u32) -> u32 {
  let v = bitcast<i32>(I[k * uu(18u)]);
  return u32(clamp(select(v, v + i32(dim), v < 0), 0, i32(dim) - 1));
}
// the data offset of index tuple t
fn tuple_off(t: u32) -> u32 {
  let m = uu(0u);
  var off = 0u;
  for (var k = 0u; k < m; k++) { off = off + index_at(t * m + k, s_b(k)) * s_a(k); }
  return off;
}
//#endif
//#if SCATTER_ND
fn index_at(k: u32, dim: u32) -> u32 {
  let v = bitcast<i32>(I[k * uu(18u)]);
  return u32(clamp(select(v, v + i32(dim), v < 0), 0, i32(dim) - 1));
}
fn tuple_off(t: u32) -> u32 {
  let m = uu(0u);
  var off = 0u;
  for (var k = 0u; k < m; k++) { off = off + index_at(t * m + k, s_b(k)) * s_a(k); }
  return off;
}
@group(0) @binding(4) var<storage, read> U: array<u32>;
//#endif

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x + gid.y * p.nx * 256u;
  if (i >= p.n) { return; }
//#if STRIDED
  var rem = i;
  var oa = 0u;
  for (var d = i32(p.ndim) - 1; d >= 0; d--) {
    let n = shp(u32(d));
    oa = oa + (rem % n) * s_a(u32(d));
    rem = rem / n;
  }
  put(i, p.base + oa);
//#endif
//#if STRIDED_BYTES
  var w = 0u;
  for (var k = 0u; k < 4u; k++) {
    let e = 4u * i + k;
    if (e < uu(17u)) {
      var rem = e;
      var oa = 0u;
      for (var d = i32(p.ndim) - 1; d >= 0; d--) {
        let n = shp(u32(d));
        oa = oa + (rem % n) * s_a(u32(d));
        rem = rem / n;
      }
      let j = p.base + oa;
      w = w | (((A[j >> 2u] >> ((j & 3u) * 8u)) & 0xffu) << (8u * k));
    }
  }
  Y[i] = w;
//#endif
//#if COPY
  put(i, i);
//#endif
//#if GATHER_AX
//#if BYTES
  var w = 0u;
  for (var k = 0u; k < 4u; k++) {
    let e = 4u * i + k;
    if (e < uu(17u)) {
      let j = gather_src(e);
      w = w | (((A[j >> 2u] >> ((j & 3u) * 8u)) & 0xffu) << (8u * k));
    }
  }
  Y[i] = w;
//#else
  put(i, gather_src(i));
//#endif
//#endif
//#if GATHER_EL
  let ax = uu(0u);
  let dim = uu(1u);
  var rem = i;
  var off = 0u;
  for (var d = i32(p.ndim) - 1; d >= 0; d--) {
    let du = u32(d);
    let n = shp(du);
    let c = select(rem % n, index_at(i, dim), du == ax);
    off = off + c * s_a(du);
    rem = rem / n;
  }
  put(i, off);
//#endif
//#if GATHER_ND
  let sl = uu(1u);
  let tuples = uu(2u);
  let e = i % sl;
  let r = i / sl;
  put(i, (r / tuples) * uu(3u) + tuple_off(r) + e);
//#endif
//#if SCATTER_ND
  // i = t * sl + e: update element e of tuple t
  let sl = uu(1u);
  let tuples = uu(2u);
  let t = i / sl;
  let e = i % sl;
  let dst = tuple_off(t);
  let E = uu(19u);
  if (uu(3u) == 0u) {  // none: the last tuple with this dst writes
    for (var t2 = t + 1u; t2 < tuples; t2++) {
      if (tuple_off(t2) == dst) { return; }
    }
    for (var w = 0u; w < E; w++) { Y[(dst + e) * E + w] = U[i * E + w]; }
  } else {  // add (f32): the first tuple with this dst adds them all, in index order
    for (var t0 = 0u; t0 < t; t0++) {
      if (tuple_off(t0) == dst) { return; }
    }
    var acc = bitcast<f32>(Y[dst + e]);
    for (var t2 = t; t2 < tuples; t2++) {
      if (tuple_off(t2) == dst) { acc = acc + bitcast<f32>(U[t2 * sl + e]); }
    }
    Y[dst + e] = bitcast<u32>(acc);
  }
//#endif
//#if CUMSUM
  // i = a line (o, k): its values q (o * len + j) * inner + k
  let len = uu(1u);
  let inner = uu(2u);
  let excl = uu(3u) != 0u;
  let rev = uu(4u) != 0u;
  let k = i % inner;
  let o = i / inner;
  var s = 0.0;
  var comp = 0.0;
  for (var jj = 0u; jj < len; jj++) {
    let j = select(jj, len - 1u - jj, rev);
    let q = (o * len + j) * inner + k;
    let x = bitcast<f32>(A[q]);
    if (excl) { Y[q] = bitcast<u32>(s); }
    let yk = x - comp;
    let t = (s + yk) * p.one;
    comp = (t - s) - yk;
    s = t;
    if (!excl) { Y[q] = bitcast<u32>(s); }
  }
//#endif
}
