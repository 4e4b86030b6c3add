// Shape rules and index checks of the index and data-dependent-shape ops (op.h tags 60-79, ONNX
// semantics). Outputs whose sizes come from input values read those values here (host memory: the
// graph-v2 executor and _core.run_op), and every output is checked against Shape::kMaxDims and
// kMaxIndexOpElems before anything is allocated.
#include "dispatch/op_schema_index.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "core/array_elems.h"
#include "core/errors.h"
#include "dispatch/op_schema.h"

namespace cyb {
namespace {

std::string lab(const Op& op) { return op.label ? op.label : op_name(op.kind); }

[[noreturn]] void bad(const Op& op, const std::string& what, const std::vector<int64_t>& expected, const Shape& got) {
  throw_shape_mismatch(lab(op) + " (" + what + ")", expected, got.vec());
}

// Values that size an output must be readable here.
void need_host(const Op& op, const Tensor& t, const char* what) {
  if (t.device != Device::Host || (!t.data && t.shape.numel() > 0))
    throw_unsupported_op(std::string(op_name(op.kind)) + " " + what + " (its values size the output: host memory only)",
                         "dispatch", dtype_name(t.dtype));
}

// dims -> Shape: at most kMaxDims dims, none negative, at most kMaxIndexOpElems elements (no overflow).
Shape sized(const Op& op, const int64_t* d, int n, const char* what) {
  if (n > Shape::kMaxDims)
    throw_shape_mismatch(lab(op) + " (" + what + ": more than " + std::to_string(Shape::kMaxDims) + " dims)",
                         std::vector<int64_t>(Shape::kMaxDims, -1), std::vector<int64_t>(d, d + n));
  Shape s;
  bool empty = false;
  for (int i = 0; i < n; ++i) {
    if (d[i] < 0)
      throw_invalid_config(lab(op) + "." + what, "dim " + std::to_string(i) + " is negative (" + std::to_string(d[i]) + ")");
    empty = empty || d[i] == 0;
    s.d[s.ndim++] = d[i];
  }
  int64_t total = 1;
  for (int i = 0; i < n && !empty; ++i) {
    if (d[i] > kMaxIndexOpElems || total * d[i] > kMaxIndexOpElems)  // total, d[i] <= 2^31: no overflow
      throw_invalid_config(lab(op) + "." + what, "the output would have more than 2^31 elements (dims " +
                                                     [&] {
                                                       std::string t;
                                                       for (int k = 0; k < n; ++k) t += (k ? ", " : "") + std::to_string(d[k]);
                                                       return t;
                                                     }() + ")");
    total *= d[i];
  }
  return s;
}

// A 1-D i64 input of at most kMaxDims values (a shape, repeats).
std::vector<int64_t> shape_values(const Op& op, const Tensor& t, const char* what) {
  need_host(op, t, what);
  if (t.shape.ndim != 1 || t.shape.d[0] > Shape::kMaxDims) bad(op, std::string(what) + ": a 1-D array of at most 8 values", {-1}, t.shape);
  std::vector<int64_t> v(static_cast<size_t>(t.shape.d[0]));
  for (size_t i = 0; i < v.size(); ++i) v[i] = get_i(t, static_cast<int64_t>(i));
  return v;
}

// The index `v` at `pos` within [-dim, dim).
void check_index(const Op& op, int64_t v, int64_t dim, int64_t pos, int axis) {
  if (v < -dim || v >= dim)
    throw_invalid_config(lab(op) + ".indices", "index " + std::to_string(v) + " at position " + std::to_string(pos) +
                                                   " is outside [-" + std::to_string(dim) + ", " + std::to_string(dim) +
                                                   ") (dim " + std::to_string(axis) + " of data)");
}

void need_rank(const Op& op, const Tensor& t, int lo, const char* what) {
  if (t.shape.ndim < lo) bad(op, std::string(what) + ": at least " + std::to_string(lo) + " dims", {-1}, t.shape);
}

// Indices like data's rank, each dim at most data's but along the axis (gather_elements, scatter_elements).
void need_elements_indices(const Op& op, const Shape& ds, const Shape& is, int axis) {
  bool ok = is.ndim == ds.ndim;
  for (int i = 0; ok && i < ds.ndim; ++i) ok = i == axis || is.d[i] <= ds.d[i];
  if (!ok) bad(op, "indices: data's rank, dims at most data's off the axis", ds.vec(), is);
}

}  // namespace

int index_op_axis(const Op& op, int nd) {
  const int ax = op.a.axis < 0 ? op.a.axis + nd : op.a.axis;
  if (ax < 0 || ax >= nd)
    throw_invalid_config(lab(op) + ".attrs.axis", std::to_string(op.a.axis) + " is not an axis of an input of " +
                                                      std::to_string(nd) + " dims");
  return ax;
}

int64_t range_count(const Op& op, const Tensor* in) {
  for (int i = 0; i < 3; ++i) {
    need_host(op, in[i], i == 0 ? "start" : i == 1 ? "limit" : "delta");
    if (in[i].shape.numel() != 1) bad(op, i == 0 ? "start: a scalar" : i == 1 ? "limit: a scalar" : "delta: a scalar", {}, in[i].shape);
  }
  int64_t n = 0;
  if (is_float_dtype(in[0].dtype)) {
    const float s = static_cast<float>(get_f(in[0], 0)), l = static_cast<float>(get_f(in[1], 0)),
                d = static_cast<float>(get_f(in[2], 0));
    if (!std::isfinite(s) || !std::isfinite(l) || !std::isfinite(d) || d == 0.f)
      throw_invalid_config(lab(op) + ".delta", "start, limit and delta must be finite and delta nonzero (start " +
                                                   std::to_string(s) + ", limit " + std::to_string(l) + ", delta " +
                                                   std::to_string(d) + ")");
    const double c = std::ceil(static_cast<double>(l - s) / d);  // onnxruntime: (limit - start) in the dtype
    if (c > static_cast<double>(kMaxIndexOpElems))
      throw_invalid_config(lab(op) + ".limit", "the range would have more than 2^31 elements");
    n = c > 0 ? static_cast<int64_t>(c) : 0;
  } else {
    const int64_t s = get_i(in[0], 0), l = get_i(in[1], 0), d = get_i(in[2], 0);
    if (d == 0) throw_invalid_config(lab(op) + ".delta", "delta must be nonzero");
    if ((d > 0 && l <= s) || (d < 0 && l >= s)) return 0;
    // |limit - start| and |delta| exactly in uint64 (no signed overflow), n = ceil(span / step)
    const uint64_t span = d > 0 ? static_cast<uint64_t>(l) - static_cast<uint64_t>(s)
                                : static_cast<uint64_t>(s) - static_cast<uint64_t>(l);
    const uint64_t step = d > 0 ? static_cast<uint64_t>(d) : 0 - static_cast<uint64_t>(d);
    const uint64_t c = span / step + (span % step ? 1 : 0);
    if (c > static_cast<uint64_t>(kMaxIndexOpElems))
      throw_invalid_config(lab(op) + ".limit", "the range would have more than 2^31 elements (" + std::to_string(c) + ")");
    n = static_cast<int64_t>(c);
  }
  return n;
}

void check_range_dtypes(const Op& op, const Tensor* in, int, const Tensor*, int) {
  if (in[1].dtype != in[0].dtype || in[2].dtype != in[0].dtype)
    throw_invalid_config(lab(op) + ".inputs", std::string("start is ") + dtype_name(in[0].dtype) + ", limit " +
                                                  dtype_name(in[1].dtype) + ", delta " + dtype_name(in[2].dtype) +
                                                  " (one dtype for all three)");
}

void check_gather(const Op& op, const Tensor* in, int, const Tensor*, int) {
  if (in[1].device != Device::Host) return;
  const int ax = index_op_axis(op, in[0].shape.ndim);
  const int64_t dim = in[0].shape.d[ax], n = in[1].shape.numel();
  for (int64_t i = 0; i < n; ++i) check_index(op, get_i(in[1], i), dim, i, ax);
}

void check_gather_elements(const Op& op, const Tensor* in, int, const Tensor*, int) {
  if (in[1].device != Device::Host) return;
  const int ax = index_op_axis(op, in[0].shape.ndim);
  const int64_t dim = in[0].shape.d[ax], n = in[1].shape.numel();
  for (int64_t i = 0; i < n; ++i) check_index(op, get_i(in[1], i), dim, i, ax);
}

void check_gather_nd(const Op& op, const Tensor* in, int, const Tensor*, int) {
  if (in[1].device != Device::Host) return;
  const Shape& is = in[1].shape;
  const int64_t m = is.d[is.ndim - 1], n = is.numel();
  for (int64_t i = 0; i < n; ++i) {
    const int k = op.a.batch_dims + static_cast<int>(i % m);
    check_index(op, get_i(in[1], i), in[0].shape.d[k], i, k);
  }
}

void check_scatter_nd(const Op& op, const Tensor* in, int, const Tensor*, int) {
  if (in[1].device != Device::Host) return;
  const Shape& is = in[1].shape;
  const int64_t m = is.d[is.ndim - 1], n = is.numel();
  for (int64_t i = 0; i < n; ++i) {
    const int k = static_cast<int>(i % m);
    check_index(op, get_i(in[1], i), in[0].shape.d[k], i, k);
  }
}

namespace {

// A 1-D integer input of `n` values (n < 0: any count up to kMaxDims).
std::vector<int64_t> int_values(const Op& op, const Tensor& t, const char* what, int64_t n) {
  need_host(op, t, what);
  if (t.shape.ndim != 1 || (n >= 0 && t.shape.d[0] != n) || t.shape.d[0] > Shape::kMaxDims)
    bad(op, std::string(what) + ": a 1-D array of " + (n >= 0 ? std::to_string(n) : std::string("at most 8")) + " values",
        {n >= 0 ? n : -1}, t.shape);
  std::vector<int64_t> v(static_cast<size_t>(t.shape.d[0]));
  for (size_t i = 0; i < v.size(); ++i) v[i] = get_i(t, static_cast<int64_t>(i));
  return v;
}

// Axis values (negative from the end) normalized against nd dims, each at most once.
std::vector<int> unique_axes(const Op& op, const std::vector<int64_t>& v, int nd, const std::string& what) {
  std::vector<int> axes;
  bool seen[Shape::kMaxDims] = {};
  for (int64_t a : v) {
    const int64_t ax = a < 0 ? a + nd : a;
    if (ax < 0 || ax >= nd)
      throw_invalid_config(lab(op) + "." + what, std::to_string(a) + " is not an axis of an input of " + std::to_string(nd) + " dims");
    if (seen[ax]) throw_invalid_config(lab(op) + "." + what, "axis " + std::to_string(a) + " appears twice");
    seen[ax] = true;
    axes.push_back(static_cast<int>(ax));
  }
  return axes;
}

}  // namespace

SliceDynPlan slice_dyn_plan(const Op& op, const Tensor* in, int n_in) {
  const Shape& xs = in[0].shape;
  const int nd = xs.ndim;
  const std::vector<int64_t> starts = int_values(op, in[1], "starts", -1);
  const int64_t k = static_cast<int64_t>(starts.size());
  const std::vector<int64_t> ends = int_values(op, in[2], "ends", k);
  std::vector<int64_t> axv(static_cast<size_t>(k)), steps(static_cast<size_t>(k), 1);
  for (int64_t i = 0; i < k; ++i) axv[static_cast<size_t>(i)] = i;
  if (n_in > 3) axv = int_values(op, in[3], "axes", k);
  if (n_in > 4) steps = int_values(op, in[4], "steps", k);
  const std::vector<int> axes = unique_axes(op, axv, nd, "axes");
  SliceDynPlan p;
  p.out = xs;
  for (int i = 0; i < nd; ++i) p.step[i] = 1;
  for (size_t i = 0; i < axes.size(); ++i) {
    const int ax = axes[i];
    const int64_t dim = xs.d[ax], sp = steps[i];
    if (sp == 0) throw_invalid_config(lab(op) + ".steps", "step " + std::to_string(i) + " is 0");
    int64_t b = starts[i], e = ends[i];
    if (b < 0) b += dim;  // no overflow: dim >= 0 is added to negative values only
    if (e < 0) e += dim;
    int64_t count = 0;
    if (sp > 0) {
      b = b < 0 ? 0 : (b > dim ? dim : b);
      e = e < 0 ? 0 : (e > dim ? dim : e);
      count = e > b ? (e - b - 1) / sp + 1 : 0;
    } else if (dim > 0) {
      b = b < 0 ? 0 : (b > dim - 1 ? dim - 1 : b);
      e = e < -1 ? -1 : (e > dim - 1 ? dim - 1 : e);
      // b - e <= dim + 1 and -sp >= 1: no overflow (sp = INT64_MIN gives count 1 when b > e)
      count = b > e ? (sp == INT64_MIN ? 1 : (b - e - 1) / -sp + 1) : 0;
    }
    p.start[ax] = count > 0 ? b : 0;
    p.step[ax] = sp;
    p.out.d[ax] = count;
  }
  return p;
}

PadDynPlan pad_dyn_plan(const Op& op, const Tensor* in) {
  const Shape& xs = in[0].shape;
  const int nd = xs.ndim;
  std::vector<int64_t> av;
  for (int i = 0; i < (op.a.n_ints ? op.a.n_ints : nd); ++i) av.push_back(op.a.n_ints ? op.a.ints[i] : i);
  const std::vector<int> axes = unique_axes(op, av, nd, "attrs.axes");
  const int64_t na = static_cast<int64_t>(axes.size());
  need_host(op, in[1], "pads");
  if (in[1].shape.ndim != 1 || in[1].shape.d[0] != 2 * na)
    bad(op, "pads: a 1-D array of 2 values per padded axis (begins, then ends)", {2 * na}, in[1].shape);
  PadDynPlan p;
  p.out = xs;
  for (int d = 0; d < nd; ++d) p.kept[d] = xs.d[d];
  for (int64_t i = 0; i < na; ++i) {
    const int ax = axes[static_cast<size_t>(i)];
    const int64_t b = get_i(in[1], i), e = get_i(in[1], na + i), dim = xs.d[ax];
    const std::string where = " (axis " + std::to_string(ax) + ", dim " + std::to_string(dim) + ")";
    // |pads| beyond 2^31 cannot leave a valid output (at most 2^31 elements, dims >= 0)
    if (b > kMaxIndexOpElems || e > kMaxIndexOpElems || b < -kMaxIndexOpElems || e < -kMaxIndexOpElems ||
        dim + b + e < 0)
      throw_invalid_config(lab(op) + ".pads", "pads " + std::to_string(b) + ", " + std::to_string(e) +
                                                  " leave no valid dim" + where);
    const int64_t kept = dim - (b < 0 ? -b : 0) - (e < 0 ? -e : 0);  // >= 0: dim + b + e >= 0 and dim >= 0
    if (op.a.mode == 1 && (b >= kept || e >= kept) && (b > 0 || e > 0))
      throw_invalid_config(lab(op) + ".pads", "reflect pads must be smaller than the dim after the crops (" +
                                                  std::to_string(kept) + ")" + where);
    if (op.a.mode == 2 && kept == 0 && (b > 0 || e > 0))
      throw_invalid_config(lab(op) + ".pads", "edge pads of an empty dim" + where);
    p.first[ax] = b < 0 ? -b : 0;
    p.kept[ax] = kept;
    p.before[ax] = b > 0 ? b : 0;
    p.out.d[ax] = dim + b + e;
  }
  (void)sized(op, p.out.d, p.out.ndim, "pads");
  return p;
}

std::vector<Shape> index_op_shapes(const Op& op, const Tensor* in, int n_in) {
  const Shape& xs = in[0].shape;
  const int nd = xs.ndim;
  int64_t d[2 * Shape::kMaxDims + 2] = {};
  int n = 0;
  switch (op.kind) {
    case OpKind::Gather: {
      need_rank(op, in[0], 1, "data");
      const int ax = index_op_axis(op, nd);
      const Shape& is = in[1].shape;
      for (int i = 0; i < ax; ++i) d[n++] = xs.d[i];
      for (int i = 0; i < is.ndim; ++i) d[n++] = is.d[i];
      for (int i = ax + 1; i < nd; ++i) d[n++] = xs.d[i];
      return {sized(op, d, n, "out")};
    }
    case OpKind::GatherElements: {
      need_rank(op, in[0], 1, "data");
      need_elements_indices(op, xs, in[1].shape, index_op_axis(op, nd));
      return {in[1].shape};
    }
    case OpKind::GatherNd: {
      need_rank(op, in[0], 1, "data");
      need_rank(op, in[1], 1, "indices");
      const Shape& is = in[1].shape;
      const int q = is.ndim, b = op.a.batch_dims;
      if (b < 0 || b >= q || b >= nd)
        throw_invalid_config(lab(op) + ".attrs.batch_dims", std::to_string(b) + " must be in [0, min(rank(data), rank(indices)))");
      for (int i = 0; i < b; ++i)
        if (is.d[i] != xs.d[i]) bad(op, "indices: data's batch dims", xs.vec(), is);
      const int64_t m = is.d[q - 1];
      if (m < 1 || m > nd - b) bad(op, "indices: last dim in [1, rank(data) - batch_dims]", {-1, nd - b}, is);
      for (int i = 0; i < q - 1; ++i) d[n++] = is.d[i];
      for (int i = b + static_cast<int>(m); i < nd; ++i) d[n++] = xs.d[i];
      return {sized(op, d, n, "out")};
    }
    case OpKind::ScatterNd: {
      need_rank(op, in[0], 1, "data");
      need_rank(op, in[1], 1, "indices");
      const Shape& is = in[1].shape;
      const int q = is.ndim;
      const int64_t m = is.d[q - 1];
      if (m < 1 || m > nd) bad(op, "indices: last dim in [1, rank(data)]", {-1, nd}, is);
      for (int i = 0; i < q - 1; ++i) d[n++] = is.d[i];
      for (int i = static_cast<int>(m); i < nd; ++i) d[n++] = xs.d[i];
      if (n > Shape::kMaxDims) bad(op, "updates: more than 8 dims", {}, in[2].shape);
      Shape want;
      for (int i = 0; i < n; ++i) want.d[want.ndim++] = d[i];
      if (!(in[2].shape == want)) bad(op, "updates: indices.shape[:-1] + data.shape[m:]", want.vec(), in[2].shape);
      if (in[2].dtype != in[0].dtype)
        throw_invalid_config(lab(op) + ".updates", std::string("is ") + dtype_name(in[2].dtype) + ", data " + dtype_name(in[0].dtype));
      return {xs};
    }
    case OpKind::ScatterElements: {
      need_rank(op, in[0], 1, "data");
      need_elements_indices(op, xs, in[1].shape, index_op_axis(op, nd));
      if (!(in[2].shape == in[1].shape)) bad(op, "updates: like indices", in[1].shape.vec(), in[2].shape);
      if (in[2].dtype != in[0].dtype)
        throw_invalid_config(lab(op) + ".updates", std::string("is ") + dtype_name(in[2].dtype) + ", data " + dtype_name(in[0].dtype));
      return {xs};
    }
    case OpKind::NonZero: {
      need_host(op, in[0], "x");
      const int64_t total = xs.numel();
      int64_t count = 0;
      const bool fl = is_float_dtype(in[0].dtype);
      for (int64_t i = 0; i < total; ++i) count += fl ? get_f(in[0], i) != 0.0 : get_i(in[0], i) != 0;
      d[0] = nd > 0 ? nd : 1;  // a scalar: one coordinate row (index 0), as onnxruntime
      d[1] = count;
      return {sized(op, d, 2, "out")};
    }
    case OpKind::Range:
      d[0] = range_count(op, in);
      return {sized(op, d, 1, "out")};
    case OpKind::CumSum:
      need_rank(op, in[0], 1, "x");
      index_op_axis(op, nd);
      return {xs};
    case OpKind::ConstantOfShape: {
      const std::vector<int64_t> v = shape_values(op, in[0], "shape");
      return {sized(op, v.data(), static_cast<int>(v.size()), "shape")};
    }
    case OpKind::Expand: {
      const std::vector<int64_t> v = shape_values(op, in[1], "shape");
      for (size_t i = 0; i < v.size(); ++i)
        if (v[i] < 0) throw_invalid_config(lab(op) + ".shape", "dim " + std::to_string(i) + " is negative (" + std::to_string(v[i]) + ")");
      Shape s, o;
      for (int64_t x : v) s.d[s.ndim++] = x;
      if (!broadcast_shapes(xs, s, &o)) bad(op, "shape: does not broadcast with x", v, xs);
      return {sized(op, o.d, o.ndim, "shape")};
    }
    case OpKind::Tile: {
      const std::vector<int64_t> v = shape_values(op, in[1], "repeats");
      if (static_cast<int>(v.size()) != nd) bad(op, "repeats: one per dim of x", {nd}, in[1].shape);
      for (int i = 0; i < nd; ++i) {
        if (v[static_cast<size_t>(i)] < 0)
          throw_invalid_config(lab(op) + ".repeats", "repeat " + std::to_string(v[static_cast<size_t>(i)]) + " of dim " + std::to_string(i) + " is negative");
        if (__builtin_mul_overflow(xs.d[i], v[static_cast<size_t>(i)], &d[i]))
          throw_invalid_config(lab(op) + ".repeats", "the output would have more than 2^31 elements");
      }
      return {sized(op, d, nd, "repeats")};
    }
    case OpKind::RandomNormalLike: return {xs};
    case OpKind::SliceDyn: return {slice_dyn_plan(op, in, n_in).out};
    case OpKind::PadDyn: return {pad_dyn_plan(op, in).out};
    case OpKind::ArgMax: {
      need_rank(op, in[0], 1, "x");
      const int ax = index_op_axis(op, nd);
      if (xs.d[ax] == 0) bad(op, "x: argmax over an empty dim", {-1}, xs);
      Shape o;
      for (int i = 0; i < nd; ++i)
        if (i != ax) o.d[o.ndim++] = xs.d[i];
        else if (op.a.keepdims) o.d[o.ndim++] = 1;
      return {o};
    }
    default: break;
  }
  (void)n_in;
  bad(op, "x", {-1}, xs);
}

}  // namespace cyb
