// The schema table (one row per op) and what is derived from it: names and
// tags, the op validator and the concrete output shapes.
#include "dispatch/op_schema.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/errors.h"
#include "core/quant.h"
#include "dispatch/op_schema_index.h"
#include "dispatch/nn_geom.h"

namespace cyb {

namespace {

using F = AttrSpec::Field;
using IS = InShape;

// ------------------------------------------------------------- checks

[[noreturn]] void bad_shape(const Op& op, const std::vector<int64_t>& expected, const Shape& got,
                            const char* what) {
  std::string name = std::string(op.label ? op.label : op_name(op.kind)) + " (" + what + ")";
  throw_shape_mismatch(name, expected, got.vec());
}

std::string dtype_words(uint16_t m) {
  std::string s;
  auto add = [&](uint16_t bit, const char* w) {
    if (m & bit) s += (s.empty() ? "" : "|") + std::string(w);
  };
  add(kDtF32, "f32");
  add(kDtF16, "f16");
  add(kDtBF16, "bf16");
  add(kDtI32, "i32");
  add(kDtI64, "i64");
  add(kDtU8, "u8");
  add(kDtI8, "i8");
  add(kDtBool, "bool");
  add(kDtWeight, "weight encodings");
  return s;
}

bool dtype_ok(DType d, uint16_t m) {
  if ((m & kDtF32) && d == DType::F32) return true;
  if ((m & kDtF16) && d == DType::F16) return true;
  if ((m & kDtBF16) && d == DType::BF16) return true;
  if ((m & kDtI32) && d == DType::I32) return true;
  if ((m & kDtI64) && d == DType::I64) return true;
  if ((m & kDtU8) && d == DType::U8) return true;
  if ((m & kDtI8) && d == DType::I8) return true;
  if ((m & kDtBool) && d == DType::BOOL) return true;
  if ((m & kDtWeight) && !is_int_dtype(d) && d != DType::COUNT) return true;
  return false;
}

uint16_t dtype_bit(DType d) {
  switch (d) {
    case DType::F32: return kDtF32;
    case DType::F16: return kDtF16;
    case DType::BF16: return kDtBF16;
    case DType::I32: return kDtI32;
    case DType::I64: return kDtI64;
    case DType::U8: return kDtU8;
    case DType::I8: return kDtI8;
    case DType::BOOL: return kDtBool;
    default: return kDtWeight;
  }
}

void need_dtype(const Op& op, const Tensor& t, uint16_t ok, const char* what) {
  if (dtype_ok(t.dtype, ok)) return;
  std::string dt = dtype_name(t.dtype);
  if (t.name) dt += std::string(" (tensor '") + t.name + "')";
  throw_unsupported_op(std::string(op_name(op.kind)) + " " + what + " (takes " + dtype_words(ok) + ")",
                       "dispatch", dt);
}

void need_data(const Op& op, const Tensor& t, const char* what) {
  if (!t.data) bad_shape(op, t.shape.vec(), t.shape, what);
}

void need_numel(const Op& op, const Tensor& t, int64_t n, const char* what) {
  if (t.shape.numel() != n) bad_shape(op, {n}, t.shape, what);
}

void need_weight(const Op& op, const Tensor& w, int64_t K, const char* what) {
  if (w.shape.ndim != 2 || w.shape.d[1] != K || w.shape.d[0] <= 0)
    bad_shape(op, {w.shape.ndim == 2 ? w.shape.d[0] : -1, K}, w.shape, what);
  if (K % block_size(w.dtype) != 0) {
    std::string nm = w.name ? w.name : what;
    throw_weight_format(nm, dtype_name(w.dtype), row_bytes(w.dtype, K),
                        "row length " + std::to_string(K) + " is not a multiple of the block size " +
                            std::to_string(block_size(w.dtype)));
  }
}

int64_t heads_rows(const Op& op, const Tensor& x, int heads, const char* what) {
  const int64_t w = static_cast<int64_t>(heads) * op.a.head_dim;
  if (heads <= 0 || op.a.head_dim <= 0 || x.shape.numel() % w != 0 || x.shape.numel() == 0)
    bad_shape(op, {-1, w}, x.shape, what);
  return x.shape.numel() / w;
}

void check_cache(const Op& op, const Tensor& c, int64_t T, const char* what) {
  const Shape& s = c.shape;
  if (s.ndim != 3 || s.d[0] != op.a.n_kv_heads || s.d[2] != op.a.head_dim)
    bad_shape(op, {op.a.n_kv_heads, -1, op.a.head_dim}, s, what);
  if (op.a.pos0 < 0 || op.a.pos0 + T > s.d[1])
    throw_invalid_config("position", "positions up to " + std::to_string(op.a.pos0 + T - 1) +
                                         " exceed the KV cache (" + std::to_string(s.d[1]) + " positions)");
}

void check_embedding(const Op& op, const Tensor* in, int, const Tensor*, int) {
  if (in[0].device != Device::Host) return;  // device ids: the backend's concern
  const int64_t T = in[0].shape.numel(), V = in[1].shape.d[0];
  const int32_t* ids = static_cast<const int32_t*>(in[0].data);
  for (int64_t t = 0; t < T; ++t)
    if (ids[t] < 0 || ids[t] >= V)
      throw_invalid_config("token id", "id " + std::to_string(ids[t]) + " at position " + std::to_string(t) +
                                           " is outside the vocabulary [0, " + std::to_string(V) + ")");
}

void check_rope(const Op& op, const Tensor* in, int, const Tensor*, int) {
  const RopeTable* rt = op.a.rope;
  if (!rt || !rt->cos || !rt->sin) throw_invalid_config("rope", "rope op without a RopeTable");
  if (rt->rot_dims <= 0 || rt->rot_dims % 2 || rt->rot_dims > op.a.head_dim)
    throw_invalid_config("rope.rot_dims", "rot_dims " + std::to_string(rt->rot_dims) +
                                              " must be even and <= head_dim " + std::to_string(op.a.head_dim));
  const int64_t T = heads_rows(op, in[0], op.a.n_heads, "x");
  if (op.a.pos0 < 0 || op.a.pos0 + T > rt->max_pos)
    throw_invalid_config("position", "positions " + std::to_string(op.a.pos0) + ".." +
                                         std::to_string(op.a.pos0 + T - 1) + " exceed the RoPE table (" +
                                         std::to_string(rt->max_pos) + " positions)");
}

void check_attention(const Op& op, const Tensor* in, int, const Tensor*, int) {
  if (op.a.n_kv_heads <= 0 || op.a.n_heads % op.a.n_kv_heads != 0)
    throw_invalid_config("n_kv_heads", "n_heads " + std::to_string(op.a.n_heads) +
                                           " is not a multiple of n_kv_heads " + std::to_string(op.a.n_kv_heads));
  const int64_t T = heads_rows(op, in[0], op.a.n_heads, "q");
  check_cache(op, in[1], T, "k cache");
  check_cache(op, in[2], T, "v cache");
  if (!(in[1].shape == in[2].shape)) bad_shape(op, in[1].shape.vec(), in[2].shape, "v cache");
}

void check_kv_write(const Op& op, const Tensor* in, int, const Tensor* out, int) {
  const int64_t T = heads_rows(op, in[0], op.a.n_kv_heads, "k");
  check_cache(op, out[0], T, "cache");
}

void check_fused_rope_kv(const Op& op, const Tensor* in, int, const Tensor* out, int) {
  check_rope(op, in, 1, nullptr, 0);  // q: n_heads, positions within the table
  const int64_t T = heads_rows(op, in[0], op.a.n_heads, "q");
  if (heads_rows(op, in[1], op.a.n_kv_heads, "k") != T)
    bad_shape(op, {T, static_cast<int64_t>(op.a.n_kv_heads) * op.a.head_dim}, in[1].shape, "k");
  if (in[2].shape.numel() != in[1].shape.numel()) bad_shape(op, in[1].shape.vec(), in[2].shape, "v");
  if (out[0].shape.numel() != in[0].shape.numel()) bad_shape(op, in[0].shape.vec(), out[0].shape, "q out");
  if (out[1].shape.numel() != in[1].shape.numel()) bad_shape(op, in[1].shape.vec(), out[1].shape, "k out");
  check_cache(op, out[2], T, "k cache");
  check_cache(op, out[3], T, "v cache");
}

// fused_rope_attention: fused_rope_kv's rule on q, k, v and the caches, attention's on the heads, y like q.
void check_fused_rope_attention(const Op& op, const Tensor* in, int n_in, const Tensor* out, int) {
  if (n_in != 3 && n_in != 5)
    throw_invalid_config("q norm", "fused_rope_attention takes the q and k norms both or none");
  for (int i = 3; i < n_in; ++i)
    if (in[i].shape.numel() != op.a.head_dim)
      bad_shape(op, {op.a.head_dim}, in[i].shape, i == 3 ? "q norm" : "k norm");
  const Tensor rope_out[4] = {in[0], in[1], out[1], out[2]};
  check_fused_rope_kv(op, in, 3, rope_out, 4);
  const Tensor att_in[3] = {in[0], out[1], out[2]};
  check_attention(op, att_in, 3, nullptr, 0);
  if (out[0].shape.numel() != in[0].shape.numel()) bad_shape(op, in[0].shape.vec(), out[0].shape, "out");
}

void check_fused_qkv(const Op& op, const Tensor* in, int n_in, const Tensor* out, int) {
  if (n_in != 4 && n_in != 7)
    throw_invalid_config("bias", "fused_qkv takes all three biases or none, got " + std::to_string(n_in - 4));
  const int64_t K = in[1].shape.d[1], T = in[0].shape.numel() / K;
  const char* names[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i)
    if (out[i].shape.numel() != T * in[1 + i].shape.d[0]) bad_shape(op, {T, in[1 + i].shape.d[0]}, out[i].shape, names[i]);
}

// fused_norm_qkv: fused_qkv's rule on the inputs after the norm weight.
void check_fused_norm_qkv(const Op& op, const Tensor* in, int n_in, const Tensor* out, int n_out) {
  if (n_in != 5 && n_in != 8)
    throw_invalid_config("bias", "fused_norm_qkv takes all three biases or none, got " + std::to_string(n_in - 5));
  Tensor rest[7];
  check_fused_qkv(op, rest, without_norm_weight(in, n_in, rest), out, n_out);
}

void check_softcap(const Op& op, const Tensor*, int, const Tensor*, int) {
  if (!(op.a.softcap > 0.f)) throw_invalid_config("softcap", "softcap must be positive");
}

void check_masked_pool(const Op& op, const Tensor* in, int, const Tensor*, int) {
  if (in[0].shape.ndim < 2) bad_shape(op, {-1, -1, -1}, in[0].shape, "x");
  if (op.a.pool_mode < 0 || op.a.pool_mode > 2) throw_invalid_config("mode", "must be cls, mean or max");
}

// B and S from key_mask [B, S]; q holds B*T rows of n_heads heads, k/v B*S rows of n_kv_heads.
void check_encoder_attention(const Op& op, const Tensor* in, int, const Tensor*, int) {
  if (op.a.n_kv_heads <= 0 || op.a.n_heads % op.a.n_kv_heads != 0)
    throw_invalid_config("n_kv_heads", "n_heads " + std::to_string(op.a.n_heads) +
                                           " is not a multiple of n_kv_heads " + std::to_string(op.a.n_kv_heads));
  const Shape& ms = in[3].shape;
  if (ms.ndim != 2 || ms.d[0] <= 0 || ms.d[1] <= 0) bad_shape(op, {-1, -1}, ms, "key_mask");
  const int64_t B = ms.d[0], S = ms.d[1];
  const int64_t rows_q = heads_rows(op, in[0], op.a.n_heads, "q");
  if (rows_q % B != 0) bad_shape(op, {B, -1, op.a.n_heads, op.a.head_dim}, in[0].shape, "q");
  const int64_t rows_k = heads_rows(op, in[1], op.a.n_kv_heads, "k");
  if (rows_k != B * S) bad_shape(op, {B, S, op.a.n_kv_heads, op.a.head_dim}, in[1].shape, "k");
  if (in[2].shape.numel() != in[1].shape.numel()) bad_shape(op, in[1].shape.vec(), in[2].shape, "v");
  if (op.a.window < 0) throw_invalid_config("window", "must be >= 0 (0: none), got " + std::to_string(op.a.window));
}

// x [B?, C_in, L] or [B?, L, C_in], weight [C_out, C_in, k]; the output holds B * L_out * C_out values.
void check_conv1d(const Op& op, const Tensor* in, int, const Tensor* out, int) {
  const Shape& xs = in[0].shape;
  const Shape& ws = in[1].shape;
  if (xs.ndim != 2 && xs.ndim != 3) bad_shape(op, {-1, -1}, xs, "x");
  const int64_t B = xs.ndim == 3 ? xs.d[0] : 1;
  const int64_t a = xs.d[xs.ndim - 2], b = xs.d[xs.ndim - 1];
  const int64_t C = op.a.channels_first ? a : b, L = op.a.channels_first ? b : a;
  if (ws.ndim != 3 || ws.d[1] != C || ws.d[0] <= 0 || ws.d[2] <= 0) bad_shape(op, {-1, C, -1}, ws, "weight");
  if (op.a.stride < 1) throw_invalid_config("stride", "must be >= 1, got " + std::to_string(op.a.stride));
  if (op.a.padding < 0) throw_invalid_config("padding", "must be >= 0, got " + std::to_string(op.a.padding));
  const int64_t k = ws.d[2], span = L + 2 * static_cast<int64_t>(op.a.padding) - k;
  if (B <= 0 || L <= 0 || span < 0) bad_shape(op, {-1, C, k}, xs, "x (shorter than the kernel)");
  const int64_t L_out = span / op.a.stride + 1;
  if (out[0].shape.numel() != B * L_out * ws.d[0]) bad_shape(op, {B, L_out, ws.d[0]}, out[0].shape, "out");
}


// ---- graph v2 ops (docs/graph.md "version 2"): shapes from the attributes.

void check_unary(const Op& op, const Tensor* in, int, const Tensor*, int) {
  const DType d = in[0].dtype;
  const bool is_bool = d == DType::BOOL, is_float = d == DType::F32 || d == DType::F16;
  switch (op.a.fn) {
    case kUNot:
      if (!is_bool) need_dtype(op, in[0], kDtBool, "x (not)");
      break;
    case kUNeg: case kUAbs: case kUSign: case kUClip:
      if (is_bool) need_dtype(op, in[0], kDtF32 | kDtF16 | kDtInt, "x");
      break;
    default:
      if (!is_float) need_dtype(op, in[0], kDtF32 | kDtF16, "x");
  }
}

void check_binary(const Op& op, const Tensor* in, int, const Tensor*, int) {
  if (in[0].dtype != in[1].dtype)
    throw_invalid_config(std::string(op.label ? op.label : "binary") + ".inputs",
                         std::string("a is ") + dtype_name(in[0].dtype) + ", b is " + dtype_name(in[1].dtype) +
                             " (both inputs must have one dtype)");
  if (op.a.fn >= kBAnd) need_dtype(op, in[0], kDtBool, "a (logic)");
  else if (in[0].dtype == DType::BOOL && op.a.fn != kBEqual) need_dtype(op, in[0], kDtF32 | kDtF16 | kDtInt, "a");
}

void check_where(const Op& op, const Tensor* in, int, const Tensor*, int) {
  if (in[1].dtype != in[2].dtype)
    throw_invalid_config(std::string(op.label ? op.label : "where") + ".inputs",
                         std::string("x is ") + dtype_name(in[1].dtype) + ", y is " + dtype_name(in[2].dtype) +
                             " (x and y must have one dtype)");
}

}  // namespace

void shape_of_bounds(const Op& op, int nd, int64_t* start, int64_t* end) {
  auto norm = [nd](int64_t v) {
    if (v < 0) v += nd;
    return v < 0 ? int64_t{0} : (v > nd ? int64_t{nd} : v);
  };
  const int64_t st = op.a.n_ints > 0 ? norm(op.a.ints[0]) : 0, en = op.a.n_ints > 1 ? norm(op.a.ints[1]) : nd;
  *start = st;
  *end = en > st ? en : st;
}

namespace {

Shape broadcast_or_throw(const Op& op, const Shape& a, const Shape& b, const char* what) {
  Shape o;
  if (!broadcast_shapes(a, b, &o)) bad_shape(op, a.vec(), b, what);
  return o;
}

std::string attr_field(const Op& op, const char* key) {
  return std::string(op.label ? op.label : op_name(op.kind)) + ".attrs." + key;
}

// elementwise's program (op.h): every push names an input, every step finds its operands, one value
// is left.
void check_elementwise(const Op& op, const Tensor*, int n_in, const Tensor*, int) {
  const std::string field = attr_field(op, "program");
  if (op.a.n_ints == 0) throw_invalid_config(field, "is empty");
  int depth = 0;
  for (int t = 0; t < op.a.n_ints; ++t) {
    const int64_t v = op.a.ints[t];
    const std::string at = "step " + std::to_string(t) + " (" + std::to_string(v) + ")";
    if (v >= 0) {
      if (v >= n_in) throw_invalid_config(field, at + " pushes input " + std::to_string(v) + " of " + std::to_string(n_in));
      ++depth;
    } else if (v >= kEwDiv) {
      if (depth < 2) throw_invalid_config(field, at + " needs two values, the stack holds " + std::to_string(depth));
      --depth;
    } else if (v == kEwLeakyRelu) {
      if (depth < 1) throw_invalid_config(field, at + " needs a value, the stack is empty");
    } else {
      throw_invalid_config(field, at + " is no step (i >= 0 push input i, -1 add, -2 sub, -3 mul, -4 div, "
                                       "-5 leaky_relu)");
    }
  }
  if (depth != 1) throw_invalid_config(field, "leaves " + std::to_string(depth) + " values (one expected)");
}

std::vector<Shape> shapes_of(const Op& op, const Tensor* in, int n_in) {
  const Shape& xs = in[0].shape;
  const int nd = xs.ndim;
  switch (op.kind) {
    case OpKind::Transpose: {
      if (op.a.n_ints != nd) throw_invalid_config(attr_field(op, "perm"), "has " + std::to_string(op.a.n_ints) +
                                                              " entries for an input of " + std::to_string(nd) + " dims");
      Shape o;
      o.ndim = nd;
      bool seen[Shape::kMaxDims] = {};
      for (int i = 0; i < nd; ++i) {
        const int64_t p = op.a.ints[i];
        if (p < 0 || p >= nd || seen[p]) throw_invalid_config(attr_field(op, "perm"), "is not a permutation of 0.." + std::to_string(nd - 1));
        seen[p] = true;
        o.d[i] = xs.d[p];
      }
      return {o};
    }
    case OpKind::Slice: {
      int ax = 0;
      int64_t start = 0, count = 0;
      slice_bounds(op, xs, &ax, &start, &count);
      Shape o = xs;
      o.d[ax] = count;
      return {o};
    }
    case OpKind::Pad: {
      if (op.a.n_ints != 2 * nd) throw_invalid_config(attr_field(op, "pads"), "needs " + std::to_string(2 * nd) + " entries (before, after per dim)");
      Shape o = xs;
      for (int i = 0; i < nd; ++i) {
        const int64_t b = op.a.ints[i], e = op.a.ints[nd + i];
        if (b < 0 || e < 0) throw_invalid_config(attr_field(op, "pads"), "negative pads are not supported");
        if (op.a.mode == 1 && (b >= xs.d[i] || e >= xs.d[i]))
          throw_invalid_config(attr_field(op, "pads"), "reflect pads must be smaller than the dim (" + std::to_string(xs.d[i]) + ")");
        if (op.a.mode == 2 && xs.d[i] == 0 && (b || e)) throw_invalid_config(attr_field(op, "pads"), "edge pads of an empty dim");
        o.d[i] = xs.d[i] + b + e;
      }
      return {o};
    }
    case OpKind::Lstm: {
      if (nd != 3) bad_shape(op, {-1, -1, -1}, xs, "x");
      const int64_t S = xs.d[0], B = xs.d[1], I = xs.d[2];
      const Shape& ws = in[1].shape;
      if (ws.ndim != 2 || ws.d[0] % 4 != 0 || ws.d[0] == 0 || ws.d[1] != I) bad_shape(op, {-1, I}, ws, "W");
      const int64_t H = ws.d[0] / 4;
      if (!(in[2].shape == Shape{4 * H, H})) bad_shape(op, {4 * H, H}, in[2].shape, "R");
      if (in[3].shape.numel() != 8 * H) bad_shape(op, {8 * H}, in[3].shape, "bias");
      if (n_in > 4 && in[4].shape.numel() != B * H) bad_shape(op, {B, H}, in[4].shape, "h0");
      if (n_in > 5 && in[5].shape.numel() != B * H) bad_shape(op, {B, H}, in[5].shape, "c0");
      return {Shape{S, B, H}, Shape{B, H}, Shape{B, H}};
    }
    case OpKind::Binary: return {broadcast_or_throw(op, xs, in[1].shape, "b (does not broadcast with a)")};
    case OpKind::Elementwise: {
      Shape o = xs;
      for (int i = 1; i < n_in; ++i) o = broadcast_or_throw(op, o, in[i].shape, "an input (does not broadcast with the others)");
      return {o};
    }
    case OpKind::ShapeOf: {
      int64_t st = 0, en = nd;
      shape_of_bounds(op, nd, &st, &en);
      Shape o;
      o.ndim = 1;
      o.d[0] = en - st;
      return {o};
    }
    case OpKind::Where: {
      const Shape xy = broadcast_or_throw(op, in[1].shape, in[2].shape, "y (does not broadcast with x)");
      return {broadcast_or_throw(op, xs, xy, "cond (does not broadcast with x, y)")};
    }
    case OpKind::Reduce: {
      bool red[Shape::kMaxDims] = {};
      for (int i = 0; i < op.a.n_ints; ++i) {
        const int64_t a = op.a.ints[i] < 0 ? op.a.ints[i] + nd : op.a.ints[i];
        if (a < 0 || a >= nd)
          throw_invalid_config(attr_field(op, "axes"), std::to_string(op.a.ints[i]) + " is not an axis of an input of " +
                                                           std::to_string(nd) + " dims");
        red[a] = true;
      }
      Shape o;
      for (int i = 0; i < nd; ++i) {
        const bool r = op.a.n_ints == 0 || red[i];
        if (r && xs.d[i] == 0 && (op.a.fn == kRMax || op.a.fn == kRMin))
          bad_shape(op, {-1}, xs, "x (max / min over an empty dim)");
        if (!r) o.d[o.ndim++] = xs.d[i];
        else if (op.a.keepdims) o.d[o.ndim++] = 1;
      }
      return {o};
    }
    case OpKind::AttentionNd: {
      // q [B, H, T, D], k [B, H, S, D], v [B, H, S, Dv] (B, H: 1 or one size), mask? broadcast to [B, H, T, S]
      const Shape &ks = in[1].shape, &vs = in[2].shape;
      if (nd != 4) bad_shape(op, {-1, -1, -1, -1}, xs, "q [B, H, T, D]");
      if (ks.ndim != 4 || ks.d[3] != xs.d[3]) bad_shape(op, {-1, -1, -1, xs.d[3]}, ks, "k [B, H, S, D]");
      if (vs.ndim != 4 || vs.d[2] != ks.d[2]) bad_shape(op, {-1, -1, ks.d[2], -1}, vs, "v [B, H, S, Dv]");
      Shape o{1, 1, xs.d[2], vs.d[3]};
      for (int i = 0; i < 2; ++i)
        for (const Shape* s : {&xs, &ks, &vs}) {
          if (s->d[i] != 1 && o.d[i] != 1 && s->d[i] != o.d[i])
            bad_shape(op, xs.vec(), *s, "k, v (batch and head dims do not broadcast with q's)");
          if (s->d[i] != 1) o.d[i] = s->d[i];
        }
      if (n_in > 3) {
        const Shape& ms = in[3].shape;
        const Shape full{o.d[0], o.d[1], xs.d[2], ks.d[2]};
        if (ms.ndim > 4) bad_shape(op, full.vec(), ms, "mask (at most [B, H, T, S])");
        for (int i = 0; i < ms.ndim; ++i) {
          const int j = i + 4 - ms.ndim;
          const int64_t m = ms.d[i];
          if (m == 1 || m == full.d[j]) continue;
          if (j >= 2 || full.d[j] != 1) bad_shape(op, full.vec(), ms, "mask (does not broadcast to [B, H, T, S])");
          o.d[j] = m;  // a batch or head dim of the mask alone
        }
      }
      return {o};
    }
    default:
      if (is_index_op(op.kind)) return index_op_shapes(op, in, n_in);
      return nn_output_shapes(op, in, n_in);  // conv, pool, resize, concat, ... (dispatch/nn_geom.cc)
  }
}

// ------------------------------------------------------------- the table

AttrSpec A(const char* key, AttrType t, bool req, F f = F::None) { return AttrSpec{key, t, req, f}; }
AttrSpec Ai(const char* key, bool req, F f, int64_t lo, int64_t hi) {
  AttrSpec s{key, AttrType::Int, req, f};
  s.min = lo;
  s.max = hi;
  return s;
}
AttrSpec Ae(const char* key, bool req, F f, const char* choices) {
  AttrSpec s{key, AttrType::Enum, req, f};
  s.choices = choices;
  return s;
}

std::vector<OpSchema> build_table() {
  const AttrType Fl = AttrType::Float, Bo = AttrType::Bool;
  const auto eps = A("eps", Fl, true, F::Eps);
  const auto plus_one = A("plus_one", Bo, false, F::PlusOne);
  const auto n_heads = Ai("n_heads", true, F::NHeads, 1, 1 << 12);
  const auto n_kv_heads = Ai("n_kv_heads", true, F::NKvHeads, 1, 1 << 12);
  const auto head_dim = Ai("head_dim", true, F::HeadDim, 1, 1 << 12);
  const InputSpec x{"x", kDtF32};
  const InputSpec out{"out", kDtF32};
  const InputSpec w_vec{"weight", kDtF32, IS::Cols0};
  const InputSpec ax{"x", kDtArray};
  const InputSpec aout{"out", kDtArray};
  const InputSpec idx{"indices", kDtI32 | kDtI64};
  const std::vector<AttrSpec> conv_attrs = {
      A("strides", AttrType::IntArray, false, F::Strides), A("dilations", AttrType::IntArray, false, F::Dilations),
      A("pads", AttrType::IntArray, false, F::Ints), Ai("group", false, F::Group, 1, 1 << 20)};
  std::vector<AttrSpec> conv_t_attrs = conv_attrs;
  conv_t_attrs.push_back(A("output_padding", AttrType::IntArray, false, F::Ints2Tail));
  // conv's fused epilogue (the version-2 fusion pass writes it; docs/graph.md "Fusion of version-2 graphs")
  std::vector<AttrSpec> conv_act_attrs = conv_attrs;
  conv_act_attrs.push_back(Ae("activation", false, F::Activation, kConvActivations));
  conv_act_attrs.push_back(A("alpha", Fl, false, F::Alpha));
  const int kConcatMax = 64;
  std::vector<InputSpec> concat_inputs(kConcatMax, InputSpec{"x", kDtArray});
  std::vector<InputSpec> ew_inputs(kElementwiseMaxInputs, InputSpec{"x", kDtF32});
  // clang-format off
  std::vector<OpSchema> t = {
    {OpKind::Embedding, "embedding", 2, 2, 1, false, {A("scale", Fl, false, F::Scale)},
     {{"ids", kDtI32}, {"table", kDtWeight, IS::WeightSelf}}, {out}, ShapeRule::AppendCols, 1, check_embedding},
    {OpKind::Matmul, "matmul", 2, 3, 1, false, {},
     {x, {"weight", kDtWeight, IS::WeightK0}, {"bias", kDtF32, IS::RowsOf, 1}}, {out}, ShapeRule::ColsRowsOf, 1},
    {OpKind::RmsNorm, "rms_norm", 2, 2, 1, false, {eps, plus_one},
     {x, w_vec}, {out}, ShapeRule::Like},
    {OpKind::LayerNorm, "layer_norm", 2, 3, 1, false, {eps},
     {x, w_vec, {"bias", kDtF32, IS::Cols0}}, {out}, ShapeRule::Like},
    {OpKind::Rope, "rope", 2, 2, 1, true,
     {n_heads, head_dim, Ai("rot_dims", true, F::None, 1, 1 << 12), A("theta", Fl, true), A("neox", Bo, false),
      Ai("max_position", true, F::None, 1, 1 << 24), A("scaling", AttrType::Table, false)},
     {x}, {out}, ShapeRule::Like, 0, check_rope},
    {OpKind::Attention, "attention", 4, 4, 1, true,
     {n_heads, n_kv_heads, head_dim, A("scale", Fl, true, F::Scale), A("softcap", Fl, false, F::Softcap),
      A("window", AttrType::Int, false, F::Window)},
     {{"q", kDtF32}, {"k cache", kDtF32 | kDtF16}, {"v cache", kDtF32 | kDtF16}}, {out}, ShapeRule::Like, 0,
     check_attention},
    {OpKind::Softmax, "softmax", 1, 1, 1, false, {}, {x}, {out}, ShapeRule::Like},
    {OpKind::Add, "add", 2, 2, 1, false, {}, {{"a", kDtF32}, {"b", kDtF32, IS::Like0OrRow}}, {out}, ShapeRule::Like},
    {OpKind::Mul, "mul", 2, 2, 1, false, {}, {{"a", kDtF32}, {"b", kDtF32, IS::Like0OrRow}}, {out}, ShapeRule::Like},
    {OpKind::Scale, "scale", 1, 1, 1, false, {A("scale", Fl, true, F::Scale)}, {x}, {out}, ShapeRule::Like},
    {OpKind::Silu, "silu", 1, 1, 1, false, {}, {x}, {out}, ShapeRule::Like},
    {OpKind::Gelu, "gelu", 1, 1, 1, false, {}, {x}, {out}, ShapeRule::Like},
    {OpKind::GeluTanh, "gelu_tanh", 1, 1, 1, false, {}, {x}, {out}, ShapeRule::Like},
    {OpKind::SwiGlu, "swiglu", 2, 2, 1, false, {}, {{"a", kDtF32}, {"b", kDtF32, IS::Like0}}, {out}, ShapeRule::Like},
    {OpKind::GeGlu, "geglu", 2, 2, 1, false, {A("gelu_erf", Bo, false, F::GeluErf)},
     {{"a", kDtF32}, {"b", kDtF32, IS::Like0}}, {out}, ShapeRule::Like},
    {OpKind::Softcap, "softcap", 1, 1, 1, false, {A("softcap", Fl, true, F::Softcap)}, {x}, {out}, ShapeRule::Like, 0,
     check_softcap},
    {OpKind::FusedSkipNorm, "fused_skip_norm", 3, 3, 2, false, {eps, plus_one},
     {x, {"residual", kDtF32, IS::Like0}, w_vec}, {out, {"sum", kDtF32}}, ShapeRule::Like},
    {OpKind::FusedNormMatmul, "fused_norm_matmul", 3, 4, 1, false, {eps, plus_one},
     {x, {"norm weight", kDtF32, IS::Cols0}, {"weight", kDtWeight, IS::WeightK0}, {"bias", kDtF32, IS::RowsOf, 2}},
     {out}, ShapeRule::ColsRowsOf, 2},
    {OpKind::FusedSwiGlu, "fused_swiglu", 3, 3, 1, false, {},
     {x, {"gate weight", kDtWeight, IS::WeightK0}, {"up weight", kDtWeight, IS::WeightLike, 1}}, {out},
     ShapeRule::ColsRowsOf, 1},
    {OpKind::KvWrite, "kv_write", 2, 2, 1, true, {n_kv_heads, head_dim},
     {{"k", kDtF32}}, {{"cache", kDtF32 | kDtF16}}, ShapeRule::Given, 0, check_kv_write},
    {OpKind::Copy, "copy", 1, 1, 1, false, {}, {{"x", kDtFloat}}, {{"out", kDtFloat}}, ShapeRule::Like},
    {OpKind::Reshape, "reshape", 1, 1, 1, false, {A("shape", AttrType::IntArray, true)},
     {{"x", kDtF32}}, {out}, ShapeRule::View},
    {OpKind::LastRows, "last_rows", 2, 2, 1, false, {}, {{"x", kDtF32}, {"rows", kDtI32}}, {out}, ShapeRule::View},
    {OpKind::L2Normalize, "l2_normalize", 1, 1, 1, false, {eps}, {x}, {out}, ShapeRule::Like},
    {OpKind::MaskedPool, "masked_pool", 2, 2, 1, false, {Ae("mode", true, F::PoolMode, "cls|mean|max")},
     {x, {"mask", kDtF32, IS::Rows0}}, {out}, ShapeRule::DropRow, 0, check_masked_pool},
    {OpKind::EncoderAttention, "encoder_attention", 4, 4, 1, false,
     {n_heads, n_kv_heads, head_dim, A("scale", Fl, true, F::Scale), A("window", AttrType::Int, false, F::Window)},
     {{"q", kDtF32}, {"k", kDtF32}, {"v", kDtF32}, {"key_mask", kDtF32 | kDtI32}}, {out}, ShapeRule::Like, 0,
     check_encoder_attention},
    {OpKind::Relu, "relu", 1, 1, 1, false, {}, {x}, {out}, ShapeRule::Like},
    {OpKind::Conv1d, "conv1d", 2, 3, 1, false,
     {Ai("stride", true, F::Stride, 1, 1 << 12), Ai("padding", false, F::Padding, 0, 1 << 12),
      A("channels_first", Bo, false, F::ChannelsFirst)},
     {x, {"weight", kDtFloat}, {"bias", kDtF32, IS::RowsOf, 1}}, {out}, ShapeRule::Given, 0, check_conv1d},
    {OpKind::FusedMatmulGelu, "fused_matmul_gelu", 2, 3, 1, false, {A("gelu_erf", Bo, false, F::GeluErf)},
     {x, {"weight", kDtWeight, IS::WeightK0}, {"bias", kDtF32, IS::RowsOf, 1}}, {out}, ShapeRule::ColsRowsOf, 1},
    {OpKind::FusedMatmulAdd, "fused_matmul_add", 3, 4, 1, false, {},
     {x, {"weight", kDtWeight, IS::WeightK0}, {"residual", kDtF32, IS::MatmulOut, 1}, {"bias", kDtF32, IS::RowsOf, 1}},
     {out}, ShapeRule::ColsRowsOf, 1},
    {OpKind::FusedRopeKv, "fused_rope_kv", 4, 4, 4, true,
     {n_heads, n_kv_heads, head_dim, Ai("rot_dims", true, F::None, 1, 1 << 12), A("theta", Fl, true),
      A("neox", Bo, false), Ai("max_position", true, F::None, 1, 1 << 24), A("scaling", AttrType::Table, false)},
     {{"q", kDtF32}, {"k", kDtF32}, {"v", kDtF32}},
     {{"q out", kDtF32}, {"k out", kDtF32}, {"k cache", kDtF32 | kDtF16}, {"v cache", kDtF32 | kDtF16}},
     ShapeRule::Given, 0, check_fused_rope_kv},
    {OpKind::FusedQkv, "fused_qkv", 4, 7, 3, false, {},
     {x, {"q weight", kDtWeight, IS::WeightK0}, {"k weight", kDtWeight, IS::WeightK0},
      {"v weight", kDtWeight, IS::WeightK0}, {"q bias", kDtF32, IS::RowsOf, 1}, {"k bias", kDtF32, IS::RowsOf, 2},
      {"v bias", kDtF32, IS::RowsOf, 3}},
     {{"q", kDtF32}, {"k", kDtF32}, {"v", kDtF32}}, ShapeRule::Given, 0, check_fused_qkv},
    {OpKind::FusedNormQkv, "fused_norm_qkv", 5, 8, 3, false, {eps, plus_one},
     {x, {"norm weight", kDtF32, IS::Cols0}, {"q weight", kDtWeight, IS::WeightK0},
      {"k weight", kDtWeight, IS::WeightK0}, {"v weight", kDtWeight, IS::WeightK0}, {"q bias", kDtF32, IS::RowsOf, 2},
      {"k bias", kDtF32, IS::RowsOf, 3}, {"v bias", kDtF32, IS::RowsOf, 4}},
     {{"q", kDtF32}, {"k", kDtF32}, {"v", kDtF32}}, ShapeRule::Given, 0, check_fused_norm_qkv},
    {OpKind::FusedNormSwiGlu, "fused_norm_swiglu", 4, 4, 1, false, {eps, plus_one},
     {x, {"norm weight", kDtF32, IS::Cols0}, {"gate weight", kDtWeight, IS::WeightK0},
      {"up weight", kDtWeight, IS::WeightLike, 2}},
     {out}, ShapeRule::ColsRowsOf, 2},
    {OpKind::FusedRopeAttention, "fused_rope_attention", 4, 6, 3, true,
     {n_heads, n_kv_heads, head_dim, Ai("rot_dims", true, F::None, 1, 1 << 12), A("theta", Fl, true),
      A("neox", Bo, false), Ai("max_position", true, F::None, 1, 1 << 24), A("scaling", AttrType::Table, false),
      A("scale", Fl, true, F::Scale), A("softcap", Fl, false, F::Softcap),
      A("window", AttrType::Int, false, F::Window), A("eps", Fl, false, F::Eps), plus_one},
     {{"q", kDtF32}, {"k", kDtF32}, {"v", kDtF32}, {"q norm", kDtF32}, {"k norm", kDtF32}},
     {out, {"k cache", kDtF32 | kDtF16}, {"v cache", kDtF32 | kDtF16}}, ShapeRule::Given, 0,
     check_fused_rope_attention},
    {OpKind::Sigmoid, "sigmoid", 1, 1, 1, false, {}, {x}, {out}, ShapeRule::Like},
    {OpKind::Tanh, "tanh", 1, 1, 1, false, {}, {x}, {out}, ShapeRule::Like},
    {OpKind::Sqrt, "sqrt", 1, 1, 1, false, {}, {x}, {out}, ShapeRule::Like},
    {OpKind::Transpose, "transpose", 1, 1, 1, false, {A("perm", AttrType::IntArray, true, F::Ints)},
     {ax}, {aout}, ShapeRule::Computed, 0, nullptr, OutDType::Like0},
    {OpKind::Slice, "slice", 1, 1, 1, false,
     {Ai("axis", true, F::Axis, -8, 7), A("range", AttrType::IntArray, true, F::Ints)}, {ax}, {aout},
     ShapeRule::Computed, 0, nullptr, OutDType::Like0},
    {OpKind::Pad, "pad", 1, 1, 1, false,
     {A("pads", AttrType::IntArray, true, F::Ints), Ae("mode", false, F::Mode, "constant|reflect|edge"),
      A("value", Fl, false, F::Value)},
     {ax}, {aout}, ShapeRule::Computed, 0, nullptr, OutDType::Like0},
    {OpKind::Lstm, "lstm", 4, 6, 3, false, {},
     {x, {"W", kDtF32}, {"R", kDtF32}, {"bias", kDtF32}, {"h0", kDtF32}, {"c0", kDtF32}},
     {{"Y", kDtF32}, {"h", kDtF32}, {"c", kDtF32}}, ShapeRule::Computed},
    // ---- array ops (graph v2)
    {OpKind::Unary, "unary", 1, 1, 1, false,
     {Ae("fn", true, F::Fn, kUnaryFns), A("alpha", Fl, false, F::Alpha), A("beta", Fl, false, F::Beta)},
     {ax}, {aout}, ShapeRule::Like, 0, check_unary, OutDType::UnaryFn},
    {OpKind::Binary, "binary", 2, 2, 1, false, {Ae("fn", true, F::Fn, kBinaryFns)},
     {ax, {"b", kDtArray}}, {aout}, ShapeRule::Computed, 0, check_binary, OutDType::BinaryFn},
    {OpKind::Where, "where", 3, 3, 1, false, {},
     {{"cond", kDtBool}, {"x", kDtArray}, {"y", kDtArray}}, {aout}, ShapeRule::Computed, 0, check_where, OutDType::Like1},
    {OpKind::Cast, "cast", 1, 1, 1, false, {Ae("to", true, F::To, kCastTypes)},
     {ax}, {aout}, ShapeRule::Like, 0, nullptr, OutDType::Attr},
    {OpKind::ReshapeTo, "reshape_to", 2, 2, 1, false, {A("allowzero", Bo, false, F::AllowZero)},
     {ax, {"shape", kDtI64}}, {aout}, ShapeRule::View, 0, nullptr, OutDType::Like0},
    {OpKind::Squeeze, "squeeze", 1, 1, 1, false, {A("axes", AttrType::IntArray, false, F::Ints)},
     {ax}, {aout}, ShapeRule::View, 0, nullptr, OutDType::Like0},
    {OpKind::Unsqueeze, "unsqueeze", 1, 1, 1, false, {A("axes", AttrType::IntArray, true, F::Ints)},
     {ax}, {aout}, ShapeRule::View, 0, nullptr, OutDType::Like0},
    {OpKind::Flatten, "flatten", 1, 1, 1, false, {Ai("axis", false, F::Axis, -8, 8)},
     {ax}, {aout}, ShapeRule::View, 0, nullptr, OutDType::Like0},
    {OpKind::ShapeOf, "shape", 1, 1, 1, false, {A("range", AttrType::IntArray, false, F::Ints)},
     {ax}, {{"out", kDtI64}}, ShapeRule::Computed, 0, nullptr, OutDType::I64},
    {OpKind::Reduce, "reduce", 1, 1, 1, false,
     {Ae("fn", true, F::Fn, kReduceFns), A("axes", AttrType::IntArray, false, F::Ints),
      A("keepdims", Bo, false, F::KeepDims)},
     {{"x", kDtF32 | kDtF16 | kDtInt}}, {aout}, ShapeRule::Computed, 0, nullptr, OutDType::Like0},
    // ---- index and data-dependent-shape ops (tags 60-79; dispatch/op_schema_index.cc)
    {OpKind::Gather, "gather", 2, 2, 1, false, {Ai("axis", false, F::Axis, -8, 7)},
     {{"data", kDtArray}, idx}, {aout}, ShapeRule::Computed, 0, check_gather, OutDType::Like0},
    {OpKind::GatherElements, "gather_elements", 2, 2, 1, false, {Ai("axis", false, F::Axis, -8, 7)},
     {{"data", kDtArray}, idx}, {aout}, ShapeRule::Computed, 0, check_gather_elements, OutDType::Like0},
    {OpKind::GatherNd, "gather_nd", 2, 2, 1, false, {Ai("batch_dims", false, F::BatchDims, 0, 7)},
     {{"data", kDtArray}, idx}, {aout}, ShapeRule::Computed, 0, check_gather_nd, OutDType::Like0},
    {OpKind::ScatterNd, "scatter_nd", 3, 3, 1, false, {Ae("reduction", false, F::Mode, kScatterReductions)},
     {{"data", kDtArray}, idx, {"updates", kDtArray}}, {aout}, ShapeRule::Computed, 0, check_scatter_nd,
     OutDType::Like0},
    {OpKind::ScatterElements, "scatter_elements", 3, 3, 1, false,
     {Ai("axis", false, F::Axis, -8, 7), Ae("reduction", false, F::Mode, kScatterReductions)},
     {{"data", kDtArray}, idx, {"updates", kDtArray}}, {aout}, ShapeRule::Computed, 0, check_gather_elements,
     OutDType::Like0},
    {OpKind::NonZero, "nonzero", 1, 1, 1, false, {}, {ax}, {{"out", kDtI64}}, ShapeRule::Computed, 0, nullptr,
     OutDType::I64},
    {OpKind::Range, "range", 3, 3, 1, false, {},
     {{"start", kDtF32 | kDtI32 | kDtI64}, {"limit", kDtF32 | kDtI32 | kDtI64}, {"delta", kDtF32 | kDtI32 | kDtI64}},
     {aout}, ShapeRule::Computed, 0, check_range_dtypes, OutDType::Like0},
    {OpKind::CumSum, "cumsum", 1, 1, 1, false,
     {Ai("axis", true, F::Axis, -8, 7), A("exclusive", Bo, false, F::Exclusive), A("reverse", Bo, false, F::Reverse)},
     {{"x", kDtF32 | kDtF16 | kDtI32 | kDtI64}}, {aout}, ShapeRule::Computed, 0, nullptr, OutDType::Like0},
    {OpKind::ConstantOfShape, "constant_of_shape", 1, 1, 1, false,
     {A("value", Fl, false, F::Fill), Ae("to", false, F::To, kCastTypes)},
     {{"shape", kDtI64}}, {aout}, ShapeRule::Computed, 0, nullptr, OutDType::Attr},
    {OpKind::Expand, "expand", 2, 2, 1, false, {}, {ax, {"shape", kDtI64}}, {aout}, ShapeRule::Computed, 0, nullptr,
     OutDType::Like0},
    {OpKind::Tile, "tile", 2, 2, 1, false, {}, {ax, {"repeats", kDtI64}}, {aout}, ShapeRule::Computed, 0, nullptr,
     OutDType::Like0},
    {OpKind::RandomNormalLike, "random_normal_like", 1, 1, 1, false,
     {A("mean", Fl, false, F::Alpha), A("scale", Fl, false, F::Scale), A("seed", AttrType::Int, false, F::Seed)},
     {{"x", kDtF32 | kDtF16}}, {aout}, ShapeRule::Computed, 0, nullptr, OutDType::Like0},
    {OpKind::ArgMax, "argmax", 1, 1, 1, false,
     {Ai("axis", false, F::Axis, -8, 7), A("keepdims", Bo, false, F::KeepDims),
      A("select_last_index", Bo, false, F::SelectLast)},
     {{"x", kDtF32 | kDtF16 | kDtInt}}, {{"out", kDtI64}}, ShapeRule::Computed, 0, nullptr, OutDType::I64},
    {OpKind::SliceDyn, "slice_dyn", 3, 5, 1, false, {},
     {{"data", kDtArray}, {"starts", kDtI32 | kDtI64}, {"ends", kDtI32 | kDtI64}, {"axes", kDtI32 | kDtI64},
      {"steps", kDtI32 | kDtI64}},
     {aout}, ShapeRule::Computed, 0, nullptr, OutDType::Like0},
    {OpKind::PadDyn, "pad_dyn", 2, 2, 1, false,
     {Ae("mode", false, F::Mode, "constant|reflect|edge"), A("value", Fl, false, F::Fill),
      A("axes", AttrType::IntArray, false, F::Ints)},
     {ax, {"pads", kDtI32 | kDtI64}}, {aout}, ShapeRule::Computed, 0, nullptr, OutDType::Like0},
    // ---- nn ops (graph v2, f32; geometry in dispatch/nn_geom.cc). conv / conv_transpose weights
    // f32 or f16 (an f16 pipeline's, kept f16 in the file; every backend widens them exactly)
    {OpKind::Conv, "conv", 2, 3, 1, false, conv_act_attrs,
     {x, {"weight", kDtF32 | kDtF16}, {"bias", kDtF32}}, {out}, ShapeRule::Computed},
    {OpKind::ConvTranspose, "conv_transpose", 2, 3, 1, false, conv_t_attrs,
     {x, {"weight", kDtF32 | kDtF16}, {"bias", kDtF32}}, {out}, ShapeRule::Computed},
    {OpKind::MatmulNd, "matmul_nd", 2, 2, 1, false, {}, {{"a", kDtF32}, {"b", kDtF32}}, {out}, ShapeRule::Computed},
    {OpKind::InstanceNorm, "instance_norm", 3, 3, 1, false, {eps},
     {x, {"scale", kDtF32}, {"bias", kDtF32}}, {out}, ShapeRule::Computed},
    {OpKind::GroupNorm, "group_norm", 3, 3, 1, false, {eps, Ai("num_groups", true, F::Group, 1, 1 << 20)},
     {x, {"scale", kDtF32}, {"bias", kDtF32}}, {out}, ShapeRule::Computed},
    {OpKind::Resize, "resize", 1, 1, 1, false,
     {A("sizes", AttrType::IntArray, true, F::Ints), Ae("mode", false, F::Mode, "nearest|linear|cubic"),
      Ae("coordinate_transformation_mode", false, F::CoordMode, "half_pixel|asymmetric|align_corners|pytorch_half_pixel"),
      Ae("nearest_mode", false, F::NearestMode, "round_prefer_floor|round_prefer_ceil|floor|ceil"),
      A("cubic_coeff_a", Fl, false, F::Alpha), A("exclude_outside", Bo, false, F::Exclusive)},
     {x}, {out}, ShapeRule::Computed},
    {OpKind::Concat, "concat", 1, kConcatMax, 1, false, {Ai("axis", true, F::Axis, -8, 7)},
     concat_inputs, {aout}, ShapeRule::Computed, 0, nullptr, OutDType::Like0},
    {OpKind::Pool, "pool", 1, 1, 1, false,
     {Ae("mode", true, F::Mode, "avg|max"), A("kernel_shape", AttrType::IntArray, true, F::Ints2Tail),
      A("strides", AttrType::IntArray, false, F::Strides), A("pads", AttrType::IntArray, false, F::Ints),
      A("dilations", AttrType::IntArray, false, F::Dilations),
      A("count_include_pad", Bo, false, F::CountIncludePad), A("ceil_mode", Bo, false, F::CeilMode)},
     {x}, {out}, ShapeRule::Computed},
    {OpKind::SoftmaxAxis, "softmax_axis", 1, 1, 1, false, {Ai("axis", true, F::Axis, -8, 7)},
     {x}, {out}, ShapeRule::Computed},
    {OpKind::AttentionNd, "attention_nd", 3, 4, 1, false, {A("scale", Fl, true, F::Scale)},
     {{"q", kDtF32}, {"k", kDtF32}, {"v", kDtF32}, {"mask", kDtBool}}, {out}, ShapeRule::Computed, 0, nullptr,
     OutDType::Like0},  // (q's dtype: f32; an array op, so that a bool mask is taken as it is)
    {OpKind::Elementwise, "elementwise", 1, kElementwiseMaxInputs, 1, false,
     {A("program", AttrType::IntArray, true, F::Ints), A("alpha", Fl, false, F::Alpha)}, ew_inputs, {out},
     ShapeRule::Computed, 0, check_elementwise, OutDType::Like0},
  };
  // clang-format on
  return t;
}

struct Table {
  std::vector<OpSchema> rows;
  std::vector<const OpSchema*> by_tag;  // index = tag
  std::vector<const OpSchema*> list;
  Table() : rows(build_table()) {
    by_tag.assign(static_cast<size_t>(OpKind::COUNT_PLUS_ONE), nullptr);
    for (const OpSchema& s : rows) {
      const size_t i = static_cast<size_t>(s.kind);
      if (i == 0 || i >= by_tag.size() || by_tag[i]) std::abort();  // one row per op, tags in range
      // every run-time input and output described; rule arguments name an input
      if (static_cast<int>(s.inputs.size()) != s.run_max_in() || static_cast<int>(s.outputs.size()) != s.n_out ||
          s.run_min_in() < 1 || s.rule_arg >= s.run_min_in())
        std::abort();
      by_tag[i] = &s;
    }
    for (size_t i = 1; i < by_tag.size(); ++i)
      if (by_tag[i]) list.push_back(by_tag[i]);  // unassigned tags (reserved ranges) have no row
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

const AttrSpec* OpSchema::attr(const char* key) const {
  for (const AttrSpec& a : attrs)
    if (std::strcmp(a.key, key) == 0) return &a;
  return nullptr;
}

const OpSchema& op_schema(OpKind k) {
  const size_t i = static_cast<size_t>(k);
  const Table& t = table();
  if (i == 0 || i >= t.by_tag.size() || !t.by_tag[i])
    throw_unsupported_op("op tag " + std::to_string(i), "dispatch", "-");
  if (i == 0 || i >= t.by_tag.size() || !t.by_tag[i]) throw_unsupported_op("op tag " + std::to_string(i), "dispatch", "-");
  return *t.by_tag[i];
}

const std::vector<const OpSchema*>& op_schemas() { return table().list; }

const char* op_name(OpKind k) {
  const size_t i = static_cast<size_t>(k);
  const Table& t = table();
  return i == 0 || i >= t.by_tag.size() || !t.by_tag[i] ? "unknown" : t.by_tag[i]->name;
}

bool parse_op_name(const char* s, OpKind* out) {
  if (!s) return false;
  for (const OpSchema* r : table().list)
    if (std::strcmp(r->name, s) == 0) {
      *out = r->kind;
      return true;
    }
  return false;
}

const char* attr_type_word(AttrType t) {
  switch (t) {
    case AttrType::Float: return "a number";
    case AttrType::Int: return "an integer";
    case AttrType::Bool: return "a boolean";
    case AttrType::IntArray: return "an array of integers";
    case AttrType::Table: return "a table";
    case AttrType::Enum: return "a string";
  }
  return "?";
}

void set_attr(OpAttrs& a, const AttrSpec& s, double num, int64_t integer, bool flag) {
  switch (s.field) {
    case F::None: break;
    case F::Eps: a.eps = static_cast<float>(num); break;
    case F::PlusOne: a.norm_plus_one = flag; break;
    case F::Scale: a.scale = static_cast<float>(num); break;
    case F::Softcap: a.softcap = static_cast<float>(num); break;
    case F::GeluErf: a.gelu_erf = flag; break;
    case F::NHeads: a.n_heads = static_cast<int>(integer); break;
    case F::NKvHeads: a.n_kv_heads = static_cast<int>(integer); break;
    case F::HeadDim: a.head_dim = static_cast<int>(integer); break;
    case F::Window: a.window = integer; break;
    case F::PoolMode: a.pool_mode = static_cast<int>(integer); break;
    case F::Stride: a.stride = static_cast<int>(integer); break;
    case F::Padding: a.padding = static_cast<int>(integer); break;
    case F::ChannelsFirst: a.channels_first = flag; break;
    case F::Axis: a.axis = static_cast<int>(integer); break;
    case F::Mode: a.mode = static_cast<int>(integer); break;
    case F::Value: a.value = static_cast<float>(num); break;
    case F::Fn: a.fn = static_cast<int>(integer); break;
    case F::To: a.to = static_cast<int>(integer); break;
    case F::Group: a.group = static_cast<int>(integer); break;
    case F::KeepDims: a.keepdims = flag; break;
    case F::AllowZero: a.allowzero = flag; break;
    case F::Alpha: a.alpha = static_cast<float>(num); break;
    case F::Beta: a.beta = static_cast<float>(num); break;
    case F::BatchDims: a.batch_dims = static_cast<int>(integer); break;
    case F::Exclusive: a.exclusive = flag; break;
    case F::Reverse: a.reverse = flag; break;
    case F::SelectLast: a.select_last = flag; break;
    case F::Fill: a.fill = num; break;
    case F::Seed: a.seed = integer; break;
    case F::CountIncludePad: a.count_include_pad = flag; break;
    case F::CeilMode: a.ceil_mode = flag; break;
    case F::CoordMode: a.coord_mode = static_cast<int>(integer); break;
    case F::NearestMode: a.nearest_mode = static_cast<int>(integer); break;
    case F::Activation: a.activation = static_cast<int>(integer); break;
    case F::Ints:
    case F::Ints2:
    case F::Strides:
    case F::Dilations:
    case F::Ints2Tail: break;  // set_attr_ints
  }
}

void set_attr_ints(OpAttrs& a, const AttrSpec& s, const std::vector<int64_t>& v, const std::string& field) {
  if (s.field == F::Strides || s.field == F::Dilations || s.field == F::Ints2Tail) {
    const int part = s.field == F::Strides ? 0 : (s.field == F::Dilations ? 1 : 2);
    if (v.size() > 2) throw_invalid_config(field, "at most 2 integers (1-D and 2-D ops), got " + std::to_string(v.size()));
    for (size_t i = 0; i < v.size(); ++i) a.ints2[2 * part + static_cast<int>(i)] = v[i];
    a.n_part[part] = static_cast<int>(v.size());
    if (a.n_ints2 < 6) a.n_ints2 = 6;
    return;
  }
  if (s.field != F::Ints && s.field != F::Ints2) return;
  const size_t cap = s.field == F::Ints ? 16 : 8;
  if (v.size() > cap) throw_invalid_config(field, "at most " + std::to_string(cap) + " integers, got " + std::to_string(v.size()));
  int64_t* dst = s.field == F::Ints ? a.ints : a.ints2;
  (s.field == F::Ints ? a.n_ints : a.n_ints2) = static_cast<int>(v.size());
  for (size_t i = 0; i < v.size(); ++i) dst[i] = v[i];
}

int attr_choice(const AttrSpec& s, const char* value) {
  if (!s.choices || !value) return -1;
  const size_t n = std::strlen(value);
  int idx = 0;
  for (const char* p = s.choices;; ++idx) {
    const char* e = std::strchr(p, '|');
    const size_t len = e ? static_cast<size_t>(e - p) : std::strlen(p);
    if (len == n && std::strncmp(p, value, n) == 0) return idx;
    if (!e) return -1;
    p = e + 1;
  }
}

// ------------------------------------------------------------- validation

void validate_op(const Op& op, const Tensor* in, int n_in, const Tensor* out, int n_out) {
  const size_t tag = static_cast<size_t>(op.kind);
  if (tag == 0 || tag >= static_cast<size_t>(OpKind::COUNT_PLUS_ONE))
    throw_unsupported_op("op tag " + std::to_string(tag), "dispatch", n_in > 0 ? dtype_name(in[0].dtype) : "none");
  const OpSchema& s = op_schema(op.kind);
  if (s.rule == ShapeRule::View)  // views: the graph executor resolves them
    throw_unsupported_op(std::string(s.name) + " (a graph view, no kernel)", "dispatch",
                         n_in > 0 ? dtype_name(in[0].dtype) : "none");
  if (n_in < s.run_min_in() || n_in > s.run_max_in() || n_out != s.n_out) {
    Shape got;
    got.ndim = 2;
    got.d[0] = n_in;
    got.d[1] = n_out;
    bad_shape(op, {s.run_max_in(), s.n_out}, got, "number of inputs, outputs");
  }
  const Shape& s0 = in[0].shape;
  for (int i = 0; i < n_in; ++i) {
    const InputSpec& is = s.inputs[static_cast<size_t>(i)];
    const Tensor& t = in[i];
    need_dtype(op, t, is.dtypes, is.name);
    need_data(op, t, is.name);
    switch (is.shape) {
      case IS::Any: break;
      case IS::Like0:
        if (t.shape.numel() != s0.numel()) bad_shape(op, s0.vec(), t.shape, is.name);
        break;
      case IS::Like0OrRow:
        if (t.shape.numel() != s0.numel() && t.shape.numel() != s0.cols()) bad_shape(op, s0.vec(), t.shape, is.name);
        break;
      case IS::Cols0: need_numel(op, t, s0.cols(), is.name); break;
      case IS::RowsOf: need_numel(op, t, in[is.arg].shape.d[0], is.name); break;
      case IS::Rows0: need_numel(op, t, s0.rows(), is.name); break;
      case IS::MatmulOut: need_numel(op, t, s0.rows() * in[is.arg].shape.d[0], is.name); break;
      case IS::WeightK0: {
        const int64_t K = t.shape.ndim == 2 ? t.shape.d[1] : -1;
        if (s0.cols() != K) bad_shape(op, {-1, K}, s0, s.inputs[0].name);
        need_weight(op, t, K, is.name);
        break;
      }
      case IS::WeightSelf:
        if (t.shape.ndim != 2) bad_shape(op, {-1, -1}, t.shape, is.name);
        need_weight(op, t, t.shape.d[1], is.name);
        break;
      case IS::WeightLike:
        need_weight(op, t, s0.cols(), is.name);
        if (!(t.shape == in[is.arg].shape)) bad_shape(op, in[is.arg].shape.vec(), t.shape, is.name);
        break;
    }
  }
  Shape want;
  Shape ins[8];
  const int nin = n_in < 8 ? n_in : 8;
  for (int i = 0; i < nin; ++i) ins[i] = in[i].shape;
  const bool has_shape = apply_shape_rule(s.rule, s.rule_arg, ins, nin, &want);
  if (!has_shape && s.rule != ShapeRule::Given && s.rule != ShapeRule::Computed) bad_shape(op, {-1}, s0, "x");
  std::vector<Shape> computed;
  if (s.rule == ShapeRule::Computed) computed = shapes_of(op, in, n_in);
  for (int i = 0; i < n_out; ++i) {
    const InputSpec& os = s.outputs[static_cast<size_t>(i)];
    need_dtype(op, out[i], os.dtypes, os.name);
    if (s.out_dtype != OutDType::F32 && out[i].dtype != output_dtype(op, in, n_in, i))
      need_dtype(op, out[i], dtype_bit(output_dtype(op, in, n_in, i)), os.name);
    need_data(op, out[i], os.name);
    if (has_shape && out[i].shape.numel() != want.numel()) bad_shape(op, want.vec(), out[i].shape, os.name);
    if (!computed.empty() && !(out[i].shape == computed[static_cast<size_t>(i)]))
      bad_shape(op, computed[static_cast<size_t>(i)].vec(), out[i].shape, os.name);
  }
  if (s.check) s.check(op, in, n_in, out, n_out);
}

std::vector<Shape> infer_output_shapes(const Op& op, const Tensor* in, int n_in) {
  const OpSchema& s = op_schema(op.kind);
  if (n_in < s.run_min_in() || n_in > s.run_max_in()) {  // before any rule reads an input that is not there
    Shape got;
    got.ndim = 1;
    got.d[0] = n_in;
    bad_shape(op, {s.run_max_in()}, got, "number of inputs");
  }
  Shape ins[8];
  const int nin = n_in < 8 ? n_in : 8;
  for (int i = 0; i < nin; ++i) ins[i] = in[i].shape;
  Shape o;
  if (s.rule == ShapeRule::Given) return {};
  if (s.rule == ShapeRule::Computed) return shapes_of(op, in, n_in);
  if (!apply_shape_rule(s.rule, s.rule_arg, ins, nin, &o))
    throw_shape_mismatch(op_name(op.kind), {-1}, nin > 0 ? ins[0].vec() : std::vector<int64_t>{});
  return std::vector<Shape>(static_cast<size_t>(s.n_out), o);
}

void slice_bounds(const Op& op, const Shape& x, int* axis, int64_t* start, int64_t* count) {
  const int nd = x.ndim;
  int ax = op.a.axis < 0 ? op.a.axis + nd : op.a.axis;
  if (ax < 0 || ax >= nd)
    throw_invalid_config(attr_field(op, "axis"), std::to_string(op.a.axis) + " is not an axis of an input of " +
                                                     std::to_string(nd) + " dims");
  if (op.a.n_ints != 3) throw_invalid_config(attr_field(op, "range"), "must be [start, end, step]");
  const int64_t dim = x.d[ax], step = op.a.ints[2];
  if (step < 1) throw_invalid_config(attr_field(op, "range"), "step must be >= 1, got " + std::to_string(step));
  auto norm = [dim](int64_t v) {
    if (v < 0) v += dim;
    return v < 0 ? int64_t{0} : (v > dim ? dim : v);
  };
  const int64_t st = norm(op.a.ints[0]), en = norm(op.a.ints[1]);
  *axis = ax;
  *start = st;
  *count = en > st ? (en - st + step - 1) / step : 0;
}

const char* const kUnaryFns =
    "neg|abs|exp|log|erf|sin|cos|ceil|floor|round|sign|reciprocal|softplus|leaky_relu|not|clip|isnan|isinf";
const char* const kConvActivations = "none|relu|silu|leaky_relu";
const char* const kBinaryFns =
    "add|sub|mul|div|pow|min|max|mod|equal|less|less_equal|greater|greater_equal|and|or|xor";
const char* const kReduceFns = "sum|mean|max|min|prod";
const char* const kScatterReductions = "none|add";
const char* const kCastTypes = "f32|f16|i32|i64|u8|i8|bool";

namespace {
const DType kCastDTypes[] = {DType::F32, DType::F16, DType::I32, DType::I64, DType::U8, DType::I8, DType::BOOL};
}

DType cast_dtype(int to) {
  return to >= 0 && to < static_cast<int>(sizeof(kCastDTypes) / sizeof(kCastDTypes[0])) ? kCastDTypes[to] : DType::F32;
}

int cast_index(DType t) {
  for (size_t i = 0; i < sizeof(kCastDTypes) / sizeof(kCastDTypes[0]); ++i)
    if (kCastDTypes[i] == t) return static_cast<int>(i);
  return -1;
}

size_t elem_bytes(DType t) {
  const DTypeInfo& i = dtype_info(t);
  return i.quantized ? 0 : i.block_bytes;
}

bool broadcast_shapes(const Shape& a, const Shape& b, Shape* out) {
  Shape o;
  o.ndim = a.ndim > b.ndim ? a.ndim : b.ndim;
  for (int i = 0; i < o.ndim; ++i) {
    const int ia = i - (o.ndim - a.ndim), ib = i - (o.ndim - b.ndim);
    const int64_t da = ia >= 0 ? a.d[ia] : 1, db = ib >= 0 ? b.d[ib] : 1;
    if (da != db && da != 1 && db != 1) return false;
    o.d[i] = da == 1 ? db : da;
  }
  *out = o;
  return true;
}

DType output_dtype(const Op& op, const Tensor* in, int n_in, int i) {
  (void)i;
  switch (op_schema(op.kind).out_dtype) {
    case OutDType::F32: return DType::F32;
    case OutDType::Like0: return n_in > 0 ? in[0].dtype : DType::F32;
    case OutDType::Like1: return n_in > 1 ? in[1].dtype : DType::F32;
    case OutDType::Bool: return DType::BOOL;
    case OutDType::I64: return DType::I64;
    case OutDType::Attr: return cast_dtype(op.a.to);
    case OutDType::UnaryFn:
      return op.a.fn >= kUIsNan ? DType::BOOL : (n_in > 0 ? in[0].dtype : DType::F32);
    case OutDType::BinaryFn:
      return op.a.fn >= kBEqual ? DType::BOOL : (n_in > 0 ? in[0].dtype : DType::F32);
  }
  return DType::F32;
}

Shape view_shape(const Op& op, const Shape& x, const Tensor* shape_in) {
  std::vector<int64_t> d;
  switch (op.kind) {
    case OpKind::ReshapeTo: {
      if (!shape_in || shape_in->dtype != DType::I64 || shape_in->shape.ndim != 1 || !shape_in->data)
        bad_shape(op, {-1}, shape_in ? shape_in->shape : Shape{}, "shape (an i64 vector)");
      const auto* p = static_cast<const int64_t*>(shape_in->data);
      d.assign(p, p + shape_in->shape.d[0]);
      int64_t known = 1;
      int minus = -1;
      for (size_t i = 0; i < d.size(); ++i) {
        if (d[i] == 0 && !op.a.allowzero) {
          if (static_cast<int>(i) >= x.ndim) bad_shape(op, d, x, "x (a 0 past its dims)");
          d[i] = x.d[i];
        }
        if (d[i] == -1) {
          if (minus >= 0) bad_shape(op, d, x, "shape (two -1)");
          minus = static_cast<int>(i);
        } else if (d[i] < 0) {
          bad_shape(op, d, x, "shape (a negative size)");
        } else {
          if (d[i] > 0 && known > (int64_t{1} << 62) / d[i]) bad_shape(op, d, x, "shape (too large)");
          known *= d[i];
        }
      }
      if (minus >= 0) {
        if (known == 0 || x.numel() % known != 0) bad_shape(op, d, x, "x (does not fill the shape)");
        d[static_cast<size_t>(minus)] = x.numel() / known;
      }
      break;
    }
    case OpKind::Squeeze: {
      bool drop[Shape::kMaxDims] = {};
      for (int i = 0; i < op.a.n_ints; ++i) {
        const int64_t a = op.a.ints[i] < 0 ? op.a.ints[i] + x.ndim : op.a.ints[i];
        if (a < 0 || a >= x.ndim || x.d[a] != 1) bad_shape(op, {-1}, x, "x (squeezed axis not of size 1)");
        drop[a] = true;
      }
      for (int i = 0; i < x.ndim; ++i)
        if (!(op.a.n_ints ? drop[i] : x.d[i] == 1)) d.push_back(x.d[i]);
      break;
    }
    case OpKind::Unsqueeze: {
      const int nd = x.ndim + op.a.n_ints;
      if (nd > Shape::kMaxDims) bad_shape(op, {-1}, x, "x (more than 8 dims)");
      bool ins[Shape::kMaxDims] = {};
      for (int i = 0; i < op.a.n_ints; ++i) {
        const int64_t a = op.a.ints[i] < 0 ? op.a.ints[i] + nd : op.a.ints[i];
        if (a < 0 || a >= nd || ins[a]) throw_invalid_config(attr_field(op, "axes"), "axes out of range or repeated");
        ins[a] = true;
      }
      for (int i = 0, j = 0; i < nd; ++i) d.push_back(ins[i] ? 1 : x.d[j++]);
      break;
    }
    case OpKind::Flatten: {
      const int ax = op.a.axis < 0 ? op.a.axis + x.ndim : op.a.axis;
      if (ax < 0 || ax > x.ndim) throw_invalid_config(attr_field(op, "axis"), "not in [-rank, rank]");
      int64_t a = 1, b = 1;
      for (int i = 0; i < x.ndim; ++i) (i < ax ? a : b) *= x.d[i];
      d = {a, b};
      break;
    }
    default: bad_shape(op, {-1}, x, "x (not a view op)");
  }
  if (d.size() > static_cast<size_t>(Shape::kMaxDims)) bad_shape(op, d, x, "shape (more than 8 dims)");
  Shape o;
  for (int64_t v : d) o.d[o.ndim++] = v;
  if (o.numel() != x.numel()) bad_shape(op, d, x, "x (element count differs)");
  return o;
}

std::vector<Shape> computed_output_shapes(const Op& op, const Tensor* in, int n_in) {
  if (n_in < 1) throw_shape_mismatch(op_name(op.kind), {-1}, {});
  return shapes_of(op, in, n_in);
}

}  // namespace cyb
