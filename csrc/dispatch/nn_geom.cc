// Geometry of the graph-v2 nn ops (dispatch/nn_geom.h).
#include "dispatch/nn_geom.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/errors.h"
#include "dispatch/op_schema.h"

namespace cyb {

namespace {

std::string who(const Op& op) { return op.label ? op.label : op_name(op.kind); }

[[noreturn]] void bad(const Op& op, const std::vector<int64_t>& want, const Shape& got, const char* what) {
  throw_shape_mismatch(who(op) + " (" + what + ")", want, got.vec());
}

[[noreturn]] void bad_attr(const Op& op, const char* key, const std::string& why) {
  throw_invalid_config(who(op) + ".attrs." + key, why);
}

void need_channels(const Op& op, const Tensor& t, int64_t C, const char* what) {
  if (t.shape.numel() != C) bad(op, {C}, t.shape, what);
}

}  // namespace

int nn_axis(const Op& op, int nd) {
  const int ax = op.a.axis < 0 ? op.a.axis + nd : op.a.axis;
  if (ax < 0 || ax >= nd)
    bad_attr(op, "axis", std::to_string(op.a.axis) + " is not an axis of an input of " + std::to_string(nd) + " dims");
  return ax;
}

ConvGeom conv_geom(const Op& op, const Tensor* in, int n_in) {
  ConvGeom g;
  const Shape& xs = in[0].shape;
  if (xs.ndim != 3 && xs.ndim != 4) bad(op, {-1, -1, -1}, xs, "x must be [N, C, L] or [N, C, H, W]");
  const int sd = xs.ndim - 2;
  g.sd = sd;
  g.N = xs.d[0];
  g.C = xs.d[1];
  for (int i = 0; i < sd; ++i) g.in[i] = xs.d[2 + i];
  if (op.a.group < 1) bad_attr(op, "group", "must be >= 1, got " + std::to_string(op.a.group));
  g.group = op.a.group;
  const bool pool = op.kind == OpKind::Pool, tr = op.kind == OpKind::ConvTranspose;
  if (pool) {
    g.O = g.C;
    g.group = 1;
    if (op.a.n_part[2] != sd) bad_attr(op, "kernel_shape", "needs " + std::to_string(sd) + " entries (one per spatial dim)");
    for (int i = 0; i < sd; ++i) {
      g.k[i] = op.a.ints2[4 + i];
      if (g.k[i] < 1) bad_attr(op, "kernel_shape", "entries must be >= 1");
    }
  } else {
    const Shape& ws = in[1].shape;
    std::vector<int64_t> want(static_cast<size_t>(sd + 2), -1);
    if (ws.ndim != sd + 2) bad(op, want, ws, "weight rank");
    for (int i = 0; i < sd; ++i) {
      g.k[i] = ws.d[2 + i];
      if (g.k[i] < 1) bad(op, want, ws, "weight (empty kernel)");
    }
    if (tr) {
      want[0] = g.C;
      if (ws.d[0] != g.C) bad(op, want, ws, "weight [C, O/group, k..]");
      if (g.C % g.group != 0) bad_attr(op, "group", "C = " + std::to_string(g.C) + " is not a multiple of group " + std::to_string(g.group));
      g.O = ws.d[1] * g.group;
    } else {
      g.O = ws.d[0];
      want[1] = g.C / g.group;
      if (g.C % g.group != 0) bad_attr(op, "group", "C = " + std::to_string(g.C) + " is not a multiple of group " + std::to_string(g.group));
      if (ws.d[1] * g.group != g.C) bad(op, want, ws, "weight [O, C/group, k..]");
      if (g.O % g.group != 0) bad_attr(op, "group", "O = " + std::to_string(g.O) + " is not a multiple of group " + std::to_string(g.group));
    }
    if (n_in > 2) need_channels(op, in[2], g.O, "bias");
  }
  const char* keys[3] = {"strides", "dilations", pool ? "kernel_shape" : "output_padding"};
  for (int p = 0; p < 2; ++p) {
    const int n = op.a.n_part[p];
    if (n != 0 && n != sd) bad_attr(op, keys[p], "needs " + std::to_string(sd) + " entries, got " + std::to_string(n));
    for (int i = 0; i < sd; ++i) {
      const int64_t v = n ? op.a.ints2[2 * p + i] : 1;
      if (v < 1) bad_attr(op, keys[p], "entries must be >= 1, got " + std::to_string(v));
      (p == 0 ? g.stride : g.dil)[i] = v;
    }
  }
  if (pool && op.a.mode == 0 && op.a.n_part[1] && (g.dil[0] != 1 || (sd > 1 && g.dil[1] != 1)))
    bad_attr(op, "dilations", "average pooling takes no dilations");
  if (tr) {
    const int n = op.a.n_part[2];
    if (n != 0 && n != sd) bad_attr(op, keys[2], "needs " + std::to_string(sd) + " entries, got " + std::to_string(n));
    for (int i = 0; i < sd; ++i) {
      g.opad[i] = n ? op.a.ints2[4 + i] : 0;
      if (g.opad[i] < 0 || (g.opad[i] >= g.stride[i] && g.opad[i] >= g.dil[i]))
        bad_attr(op, keys[2], "entries must be >= 0 and smaller than the stride or the dilation");
    }
  }
  if (op.a.n_ints != 0 && op.a.n_ints != 2 * sd)
    bad_attr(op, "pads", "needs " + std::to_string(2 * sd) + " entries ([begin.., end..]), got " + std::to_string(op.a.n_ints));
  for (int i = 0; i < sd; ++i) {
    g.pb[i] = op.a.n_ints ? op.a.ints[i] : 0;
    g.pe[i] = op.a.n_ints ? op.a.ints[sd + i] : 0;
    if (g.pb[i] < 0 || g.pe[i] < 0) bad_attr(op, "pads", "negative pads are not supported");
  }
  g.out_shape.ndim = xs.ndim;
  g.out_shape.d[0] = g.N;
  g.out_shape.d[1] = g.O;
  for (int i = 0; i < sd; ++i) {
    const int64_t eff = (g.k[i] - 1) * g.dil[i] + 1;
    if (tr) {
      g.out[i] = g.stride[i] * (g.in[i] - 1) + g.opad[i] + eff - g.pb[i] - g.pe[i];
      if (g.in[i] < 1 || g.out[i] < 0) bad(op, {g.N, g.C, -1}, xs, "x (output would be empty or negative)");
    } else {
      if (pool && (g.pb[i] >= eff || g.pe[i] >= eff)) bad_attr(op, "pads", "must be smaller than the kernel extent");
      const int64_t span = g.in[i] + g.pb[i] + g.pe[i] - eff;
      // ceil_mode: ceil(span / stride) + 1 windows, one where the kernel is larger than the padded input
      // by less than a stride (EfficientNet's pooler: a kernel of the feature map's nominal size)
      const bool ceil = pool && op.a.ceil_mode;
      if (span < 0 && !(ceil && span > -g.stride[i])) {
        Shape want = xs;  // each spatial dim at least the least size a window fits in
        for (int j = 0; j < sd; ++j)
          want.d[2 + j] = std::max(xs.d[2 + j], (g.k[j] - 1) * g.dil[j] + 1 - g.pb[j] - g.pe[j] - (ceil ? g.stride[j] - 1 : 0));
        bad(op, want.vec(), xs, "x (smaller than the kernel)");
      }
      g.out[i] = span < 0 ? 1 : span / g.stride[i] + 1;
      if (ceil && span >= 0) {
        g.out[i] = (span + g.stride[i] - 1) / g.stride[i] + 1;
        if ((g.out[i] - 1) * g.stride[i] >= g.in[i] + g.pb[i]) --g.out[i];  // no window starting in the end pad
      }
    }
    g.out_shape.d[2 + i] = g.out[i];
  }
  return g;
}

MatmulGeom matmul_geom(const Op& op, const Shape& a, const Shape& b) {
  MatmulGeom g;
  if (a.ndim < 1) bad(op, {-1, -1}, a, "a (a scalar)");
  if (b.ndim < 1) bad(op, {-1, -1}, b, "b (a scalar)");
  g.M = a.ndim >= 2 ? a.d[a.ndim - 2] : 1;
  g.K = a.d[a.ndim - 1];
  const int64_t kb = b.ndim >= 2 ? b.d[b.ndim - 2] : b.d[0];
  g.N = b.ndim >= 2 ? b.d[b.ndim - 1] : 1;
  if (kb != g.K) bad(op, {g.K, g.N}, b, "b (inner dims differ)");
  Shape ab, bb;
  ab.ndim = a.ndim > 2 ? a.ndim - 2 : 0;
  bb.ndim = b.ndim > 2 ? b.ndim - 2 : 0;
  for (int i = 0; i < ab.ndim; ++i) ab.d[i] = a.d[i];
  for (int i = 0; i < bb.ndim; ++i) bb.d[i] = b.d[i];
  if (!broadcast_shapes(ab, bb, &g.batch_shape)) bad(op, ab.vec(), b, "b (batch dims do not broadcast)");
  g.batch = g.batch_shape.numel();
  const Shape& os = g.batch_shape;
  auto strides = [&](const Shape& s, int64_t* st) {
    int64_t acc = 1;
    for (int i = os.ndim - 1; i >= 0; --i) {
      const int j = i - (os.ndim - s.ndim);
      st[i] = j < 0 || s.d[j] == 1 ? 0 : acc;
      if (j >= 0) acc *= s.d[j];
    }
  };
  strides(ab, g.a_bstride);
  strides(bb, g.b_bstride);
  g.out_shape = g.batch_shape;
  if (a.ndim >= 2) g.out_shape.d[g.out_shape.ndim++] = g.M;
  if (b.ndim >= 2) g.out_shape.d[g.out_shape.ndim++] = g.N;
  return g;
}

std::vector<Shape> nn_output_shapes(const Op& op, const Tensor* in, int n_in) {
  const Shape& xs = in[0].shape;
  switch (op.kind) {
    case OpKind::Conv:
    case OpKind::ConvTranspose:
    case OpKind::Pool: return {conv_geom(op, in, n_in).out_shape};
    case OpKind::MatmulNd: return {matmul_geom(op, xs, in[1].shape).out_shape};
    case OpKind::InstanceNorm:
    case OpKind::GroupNorm: {
      if (xs.ndim < 2) bad(op, {-1, -1, -1}, xs, "x must be [N, C, ..]");
      const int64_t C = xs.d[1];
      if (op.kind == OpKind::GroupNorm && (op.a.group < 1 || C % op.a.group != 0))
        bad_attr(op, "num_groups", std::to_string(op.a.group) + " does not divide C = " + std::to_string(C));
      need_channels(op, in[1], C, "scale");
      need_channels(op, in[2], C, "bias");
      return {xs};
    }
    case OpKind::Resize: {
      if (op.a.n_ints != xs.ndim)
        bad_attr(op, "sizes", "needs " + std::to_string(xs.ndim) + " entries (every dim), got " + std::to_string(op.a.n_ints));
      Shape o = xs;
      for (int i = 0; i < xs.ndim; ++i) {
        o.d[i] = op.a.ints[i] == -1 ? xs.d[i] : op.a.ints[i];  // -1: the input's size (a run-time batch dim)
        if (o.d[i] < 0) bad_attr(op, "sizes", "negative size");
        if (xs.d[i] == 0 && o.d[i] > 0) bad(op, o.vec(), xs, "x (resizing an empty dim)");
      }
      return {o};
    }
    case OpKind::Concat: {
      const int ax = nn_axis(op, xs.ndim);
      Shape o = xs;
      for (int i = 1; i < n_in; ++i) {
        const Shape& s = in[i].shape;
        if (in[i].dtype != in[0].dtype)
          throw_invalid_config(who(op) + ".inputs", "input " + std::to_string(i) + " is " + dtype_name(in[i].dtype) +
                                                        ", input 0 is " + dtype_name(in[0].dtype) + " (one dtype)");
        Shape want = xs;
        want.d[ax] = -1;
        bool ok = s.ndim == xs.ndim;
        for (int d = 0; ok && d < xs.ndim; ++d) ok = d == ax || s.d[d] == xs.d[d];
        if (!ok) bad(op, want.vec(), s, "an input's dims differ off the axis");
        o.d[ax] += s.d[ax];
      }
      return {o};
    }
    case OpKind::SoftmaxAxis:
      nn_axis(op, xs.ndim);
      return {xs};
    default: break;
  }
  bad(op, {-1}, xs, "x");
}

// Resize: the source coordinate of output index `o` along a dim of `in` -> `out` values.
static double resize_coord(int mode, int64_t o, int64_t in, int64_t out) {
  const double scale = static_cast<double>(out) / static_cast<double>(in);
  switch (mode) {
    case 1: return o / scale;  // asymmetric
    case 2: return out > 1 ? o * static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;  // align_corners
    case 3: return out > 1 ? (o + 0.5) / scale - 0.5 : 0.0;  // pytorch_half_pixel
    default: return (o + 0.5) / scale - 0.5;  // half_pixel
  }
}

static int64_t resize_nearest(int mode, double c, int64_t in) {
  double r;
  switch (mode) {
    case 1: r = (c == std::floor(c) + 0.5) ? std::ceil(c) : std::round(c); break;  // round_prefer_ceil
    case 2: r = std::floor(c); break;
    case 3: r = std::ceil(c); break;
    default: r = (c == std::floor(c) + 0.5) ? std::floor(c) : std::round(c); break;  // round_prefer_floor
  }
  return std::min<int64_t>(std::max<int64_t>(static_cast<int64_t>(r), 0), in - 1);
}

int resize_taps(const Op& op, int64_t o, int64_t n_in, int64_t n_out, int64_t idx[4], double w[4]) {
  if (op.a.mode != 2 || n_in == n_out) {
    int64_t a = o, b = o;
    double f = 0.0;
    resize_source(op, o, n_in, n_out, &a, &b, &f);
    idx[0] = a;
    w[0] = 1.0 - f;
    if (f == 0.0) return 1;
    idx[1] = b;
    w[1] = f;
    return 2;
  }
  const double c = resize_coord(op.a.coord_mode, o, n_in, n_out), A = op.a.alpha;
  const double fl = std::floor(c), t = c - fl;
  // Keys' cubic convolution weights at distances 1 + t, t, 1 - t, 2 - t
  const double d[4] = {1.0 + t, t, 1.0 - t, 2.0 - t};
  double sum = 0.0;
  int n = 0;
  for (int k = 0; k < 4; ++k) {
    const double x = d[k];
    const double wk = x <= 1.0 ? ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0 : ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A;
    const int64_t i = static_cast<int64_t>(fl) - 1 + k;
    if (op.a.exclusive && (i < 0 || i >= n_in)) continue;
    idx[n] = std::min<int64_t>(std::max<int64_t>(i, 0), n_in - 1);
    w[n++] = wk;
    sum += wk;
  }
  if (op.a.exclusive)
    for (int k = 0; k < n; ++k) w[k] /= sum;
  return n;
}

void resize_source(const Op& op, int64_t o, int64_t n_in, int64_t n_out, int64_t* a, int64_t* b, double* f) {
  *a = *b = o;
  *f = 0.0;
  if (n_in == n_out) return;
  const double c = resize_coord(op.a.coord_mode, o, n_in, n_out);
  if (op.a.mode == 0) {
    *a = *b = resize_nearest(op.a.nearest_mode, c, n_in);
    return;
  }
  const double cc = std::min(std::max(c, 0.0), static_cast<double>(n_in - 1));
  *a = static_cast<int64_t>(std::floor(cc));
  *b = std::min<int64_t>(*a + 1, n_in - 1);
  *f = cc - static_cast<double>(*a);
}

}  // namespace cyb
