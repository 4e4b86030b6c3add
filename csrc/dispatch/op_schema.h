// The op schema: one row per op (dispatch/op_schema.cc) with its name, stable
// tag, arity, attributes, input/output dtypes and shapes, and ONE output-shape
// rule. Read by the graph parser (arity, attributes, symbolic shapes), by
// validate_op (which the dispatcher runs once per op, before any backend), by
// infer_output_shapes, by op_name/parse_op_name and by the Python bindings
// (attribute parsing, _core.op_names()). Backends only say what they can run.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "dispatch/op.h"

namespace cyb {

enum class AttrType : uint8_t { Float, Int, Bool, IntArray, Table, Enum };

// One attribute. `field` names where the value lands in OpAttrs; graph-only
// attributes (rope's theta, reshape's shape, ...) have none (Field::None).
struct AttrSpec {
  enum class Field : uint8_t {
    None, Eps, PlusOne, Scale, Softcap, GeluErf, NHeads, NKvHeads, HeadDim, Window, PoolMode, Stride, Padding,
    ChannelsFirst, Axis, Mode, Value, Ints, Fn, To, Group, Ints2, KeepDims, Alpha, Beta, AllowZero,
    BatchDims, Exclusive, Reverse, SelectLast, Fill, Seed,
    // conv / pool parts of ints2 (op.h): [0..2) strides, [2..4) dilations, [4..6) output_padding / kernel_shape
    Strides, Dilations, Ints2Tail, CountIncludePad, CeilMode, CoordMode, NearestMode, Activation
  };
  const char* key;
  AttrType type;
  bool required;
  Field field;
  const char* choices = nullptr;  // Enum: "a|b|c", stored as the index
  int64_t min = 0, max = 0;       // Int: accepted range when max > min
};

// Element types an input/output accepts (bit set).
enum : uint16_t {
  kDtF32 = 1, kDtF16 = 2, kDtBF16 = 4, kDtI32 = 8,
  kDtWeight = 16,  // any weight encoding (float or block-quantized), 2-D, rows whole blocks
  kDtI64 = 32, kDtBool = 64, kDtU8 = 128, kDtI8 = 256,
  kDtFloat = kDtF32 | kDtF16 | kDtBF16,
  kDtInt = kDtI32 | kDtI64 | kDtU8 | kDtI8,           // integer arrays (indices, shapes)
  kDtArray = kDtF32 | kDtF16 | kDtInt | kDtBool,      // any array element type (graph v2)
};

// The element type of an op's outputs (graph v2 ops carry integers and booleans).
enum class OutDType : uint8_t {
  F32,    // float32 (every op of the token-stream graphs)
  Like0,  // the dtype of input 0
  Like1,  // the dtype of input 1 (where: x)
  Bool,   // comparisons, logic
  I64,    // indices, shapes
  Attr,   // attribute `to` (cast)
  BinaryFn,  // binary: bool for the comparisons, else input 0's dtype
  UnaryFn,   // unary: bool for isnan / isinf, else input 0's dtype
};

// The `fn` choices of the array ops (the enum attribute's index is OpAttrs::fn) and cast's `to`.
extern const char* const kUnaryFns;
extern const char* const kBinaryFns;
extern const char* const kReduceFns;
extern const char* const kCastTypes;
// conv's `activation` choices (OpAttrs::activation), applied to bias + sum: relu, x sigmoid(x), leaky_relu (slope alpha).
extern const char* const kConvActivations;
enum ConvActivation : int { kActNone, kActRelu, kActSilu, kActLeakyRelu };
// conv's fused epilogue (attr activation, op_schema.h ConvActivation): relu, silu = v sigmoid(v),
// leaky_relu (slope alpha); `ex` is the exponential of the caller's math (the policy's, or std::exp).
template <class T, class Exp>
inline T conv_activation(int act, T alpha, T v, Exp ex) {
  switch (act) {
    case kActRelu: return v > T(0) ? v : T(0);
    case kActSilu: return v / (T(1) + ex(-v));
    case kActLeakyRelu: return v >= T(0) ? v : v * alpha;
    default: return v;
  }
}
enum UnaryFn : int {
  kUNeg, kUAbs, kUExp, kULog, kUErf, kUSin, kUCos, kUCeil, kUFloor, kURound, kUSign, kUReciprocal, kUSoftplus,
  kULeakyRelu, kUNot, kUClip, kUIsNan, kUIsInf
};
enum BinaryFn : int {
  kBAdd, kBSub, kBMul, kBDiv, kBPow, kBMin, kBMax, kBMod, kBEqual, kBLess, kBLessEqual, kBGreater, kBGreaterEqual,
  kBAnd, kBOr, kBXor
};
enum ReduceFn : int { kRSum, kRMean, kRMax, kRMin, kRProd };
// The steps of elementwise's program (op.h) other than the pushes of inputs (i >= 0).
enum ElementwiseStep : int { kEwAdd = -1, kEwSub = -2, kEwMul = -3, kEwDiv = -4, kEwLeakyRelu = -5 };
// The most inputs elementwise takes (its program fits OpAttrs::ints: 16 steps, at most 8 pushes).
constexpr int kElementwiseMaxInputs = 8;
// One step on f32 values: a the lower of the two top values, b the top (leaky_relu reads b alone).
// The same rounding as binary / unary on f32 (one rounding of the exact result).
inline float elementwise_step(int step, float a, float b, float alpha) {
  switch (step) {
    case kEwAdd: return a + b;
    case kEwSub: return a - b;
    case kEwMul: return a * b;
    case kEwDiv: return a / b;
    default: return b >= 0.f ? b : alpha * b;
  }
}
// The `reduction` choices of scatter_nd / scatter_elements (OpAttrs::mode).
extern const char* const kScatterReductions;
enum ScatterReduction : int { kScatterNone, kScatterAdd };
// The most elements an output of the index ops may have (outputs sized by input values).
constexpr int64_t kMaxIndexOpElems = int64_t{1} << 31;
// Cast's `to` (index into kCastTypes) as a DType.
DType cast_dtype(int to);
// The index into kCastTypes of a DType (-1: not a cast target).
int cast_index(DType t);

// The shape an input must have, relative to input 0 (or input `arg`).
enum class InShape : uint8_t {
  Any,         // checked by the op's own check (or unconstrained)
  Like0,       // numel(in0)
  Like0OrRow,  // numel(in0), or one row broadcast (numel == cols(in0))
  Cols0,       // a vector of cols(in0) values
  RowsOf,      // a vector of rows(in[arg]) values (a bias)
  Rows0,       // numel == rows(in0) (one value per row: a mask)
  WeightK0,    // a weight [N, cols(in0)]
  WeightSelf,  // a weight [N, K] (any K)
  WeightLike,  // a weight shaped like in[arg]
  MatmulOut,   // numel == rows(in0) * rows(d[0]) of the weight in[arg] (a matmul's output: a residual)
};

struct InputSpec {
  const char* name;
  uint16_t dtypes;
  InShape shape = InShape::Any;
  int arg = 0;
};

// The output-shape rule, shared by the concrete (Shape) and the symbolic
// (graph SymShape) inference: apply_shape_rule below.
enum class ShapeRule : uint8_t {
  Like,        // every output = in[0]
  ColsRowsOf,  // out = in[0] with its last dim = rows (d[0]) of in[arg]
  AppendCols,  // out = in[0] + [cols of in[arg]]  (embedding)
  DropRow,     // out = in[0] without its second-to-last dim  ([.., S, D] -> [.., D])
  Given,       // the caller passes the output (kv_write writes the cache)
  View,        // graph-only views (reshape, last_rows): the executor resolves them
  Computed,    // per-op shapes from the attributes (transpose, slice, pad, lstm): computed_output_shapes
};

using OpCheck = void (*)(const Op& op, const Tensor* in, int n_in, const Tensor* out, int n_out);

struct OpSchema {
  OpKind kind;
  const char* name;
  // Graph arity; `positions`: the graph's last input is the positions input,
  // which the executor turns into attrs.pos0 (at run time there is one input less).
  int min_in, max_in, n_out;
  bool positions;
  std::vector<AttrSpec> attrs;
  std::vector<InputSpec> inputs;   // run-time inputs, in order (optional ones last)
  std::vector<InputSpec> outputs;  // dtypes and names; shapes from `rule`
  ShapeRule rule;
  int rule_arg = 0;
  OpCheck check = nullptr;  // extra semantic checks (heads, caches, positions, ...)
  OutDType out_dtype = OutDType::F32;

  int run_min_in() const { return min_in - (positions ? 1 : 0); }
  int run_max_in() const { return max_in - (positions ? 1 : 0); }
  const AttrSpec* attr(const char* key) const;
};

// The schema row of an op (throws UnsupportedOp for COUNT_PLUS_ONE / 0).
const OpSchema& op_schema(OpKind k);
// Every op, in tag order.
const std::vector<const OpSchema*>& op_schemas();
const char* attr_type_word(AttrType t);  // "a number", "an integer", ...

// Stores a parsed attribute value into OpAttrs (no-op for Field::None).
void set_attr(OpAttrs& a, const AttrSpec& s, double num, int64_t integer, bool flag);
// Stores an IntArray attribute (Field::Ints: OpAttrs::ints, at most 8 values; InvalidConfig naming
// `field` when longer).
void set_attr_ints(OpAttrs& a, const AttrSpec& s, const std::vector<int64_t>& v, const std::string& field);
// The output shapes of a ShapeRule::Computed op (ShapeMismatch / InvalidConfig naming the op when the
// attributes do not fit the inputs).
std::vector<Shape> computed_output_shapes(const Op& op, const Tensor* in, int n_in);
// Slice on x: the axis (a negative one counts from the end) and the range [start, end, step] of
// ints[0..3) as ONNX reads them (negative start / end count from the end, then clamped to [0, dim];
// step >= 1): the first index and the count. InvalidConfig naming the op otherwise.
void slice_bounds(const Op& op, const Shape& x, int* axis, int64_t* start, int64_t* count);
// Shape (op shape): the dims [start, end) of an input of nd dims that attr range selects (ONNX bounds).
void shape_of_bounds(const Op& op, int nd, int64_t* start, int64_t* end);
// The shape a graph-v2 view op (reshape_to, squeeze, unsqueeze, flatten) gives x (ShapeMismatch /
// InvalidConfig naming the op when it does not fit); `shape` is reshape_to's i64 input.
Shape view_shape(const Op& op, const Shape& x, const Tensor* shape);
// Enum attributes: index of `value` in s.choices, -1 when it is not one of them.
int attr_choice(const AttrSpec& s, const char* value);

// Checks counts, dtypes and shapes of an op's inputs/outputs against its
// schema row (and the row's own check); throws ShapeMismatch / UnsupportedOp /
// InvalidConfig naming the op. Backend-independent: the dispatcher runs it once
// per op before choosing a backend. Host-memory values (token ids) are checked
// only when they are on the host.
void validate_op(const Op& op, const Tensor* in, int n_in, const Tensor* out, int n_out);

// Output shapes an op produces for these inputs (the schema's rule). Given
// (kv_write) yields no shapes.
std::vector<Shape> infer_output_shapes(const Op& op, const Tensor* in, int n_in);
// The element type of output `i` for these inputs (the schema's out_dtype).
DType output_dtype(const Op& op, const Tensor* in, int n_in, int i);
// Bytes of one element of an unquantized dtype (f32, f16, bf16, integers, bool).
size_t elem_bytes(DType t);

// Numpy broadcasting of two shapes (ONNX multidirectional): false when they do not broadcast.
bool broadcast_shapes(const Shape& a, const Shape& b, Shape* out);

// ------------------------------------------------------------- shape rule
// Generic over the shape type: S is Shape here, graph::SymShape in the graph
// (whose helpers sh_ndim/sh_dim/sh_set_last/sh_push/sh_erase are found by ADL).

inline int sh_ndim(const Shape& s) { return s.ndim; }
inline int64_t sh_dim(const Shape& s, int i) { return s.d[i]; }
inline void sh_set_last(Shape& s, int64_t v) {
  if (s.ndim == 0) s.ndim = 1;
  s.d[s.ndim - 1] = v;
}
inline bool sh_push(Shape& s, int64_t v) {
  if (s.ndim >= Shape::kMaxDims) return false;
  s.d[s.ndim++] = v;
  return true;
}
inline void sh_erase(Shape& s, int i) {
  for (int k = i; k + 1 < s.ndim; ++k) s.d[k] = s.d[k + 1];
  --s.ndim;
}

// Output `o` of the rule; false when the inputs do not allow it (too many dims,
// too few inputs, no shape for Given/View).
template <class S>
bool apply_shape_rule(ShapeRule r, int arg, const S* in, int n_in, S* out) {
  if (n_in < 1) return false;
  switch (r) {
    case ShapeRule::Like:
      *out = in[0];
      return true;
    case ShapeRule::ColsRowsOf:
      if (arg >= n_in || sh_ndim(in[arg]) < 1) return false;
      *out = in[0];
      sh_set_last(*out, sh_dim(in[arg], 0));
      return true;
    case ShapeRule::AppendCols:
      if (arg >= n_in || sh_ndim(in[arg]) < 1) return false;
      *out = in[0];
      return sh_push(*out, sh_dim(in[arg], sh_ndim(in[arg]) - 1));
    case ShapeRule::DropRow:
      if (sh_ndim(in[0]) < 2) return false;
      *out = in[0];
      sh_erase(*out, sh_ndim(in[0]) - 2);
      return true;
    case ShapeRule::Given:
    case ShapeRule::View:
    case ShapeRule::Computed:
      return false;
  }
  return false;
}

}  // namespace cyb
