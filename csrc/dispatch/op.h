// The op list of the runtime: one math line per op here; everything else about
// an op (name, stable tag, arity, attributes, dtypes, the output-shape rule) is
// its row of the schema table (dispatch/op_schema.cc), which the graph parser,
// the validator (run once per op by the dispatcher), the Python bindings and
// the backends all read. Every backend implements an op or says it cannot
// (Backend::supports, capability only); the CPU backend implements all of them.
// Numeric tags are stable and never reused (the graph section refers to them).
// Adding an op: the enum value + math line here, one schema row, the reference
// kernel (backends/cpu/ref_kernels.cc).
#pragma once
#include <cstdint>

#include "core/rope.h"
#include "core/tensor.h"

namespace cyb {

enum class OpKind : uint16_t {
  // out[T,D] f32 = table[ids[t], :] * scale.  in: ids I32 [T], table [V,D] any encoding.
  Embedding = 1,
  // y[T,N] = x[T,K] @ W[N,K]^T (+ bias[N]).  in: x F32, W any encoding, optional bias F32.
  Matmul = 2,
  // y = x / sqrt(mean(x^2) + eps) * (plus_one ? 1 + w : w), over the last dim.  in: x [T,D], w F32 [D].
  RmsNorm = 3,
  // y = (x - mean) / sqrt(var + eps) * w + b.  in: x, w F32 [D], b F32 [D] (optional).
  LayerNorm = 4,
  // Rotary embedding of x [T, n_heads*head_dim] at positions pos0..pos0+T-1 (out may alias in).
  Rope = 5,
  // Causal attention of q [T, n_heads*head_dim] over k/v caches [n_kv_heads, max_ctx, head_dim]
  // (F32 or F16): row t sees keys 0..pos0+t (and only the last `window` of them when window > 0);
  // logits = scale * q.k, softcapped when softcap > 0.  out [T, n_heads*head_dim].
  Attention = 6,
  // Softmax over the last dim.
  Softmax = 7,
  Add = 8,    // out = a + b (same shape)
  Mul = 9,    // out = a * b (same shape)
  Scale = 10, // out = x * scale
  Silu = 11,  // out = x * sigmoid(x)
  Gelu = 12,  // out = 0.5 x (1 + erf(x / sqrt 2))
  GeluTanh = 13,  // out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  SwiGlu = 14,    // out = silu(gate) * up.  in: gate, up
  GeGlu = 15,     // out = gelu_tanh(gate) * up (gelu erf when attr gelu_erf).  in: gate, up
  Softcap = 16,   // out = softcap * tanh(x / softcap)
  // in: x, residual, w.  out0 = norm(x + residual) (RmsNorm semantics), out1 = x + residual.
  FusedSkipNorm = 17,
  // in: x, w_norm, W (, bias).  y = RmsNorm(x, w_norm) @ W^T (+ bias).
  FusedNormMatmul = 18,
  // in: x, W_gate, W_up.  y = silu(x @ W_gate^T) * (x @ W_up^T).
  FusedSwiGlu = 19,
  // Writes k [T, n_kv_heads*head_dim] into the cache output [n_kv_heads, max_ctx, head_dim]
  // at positions pos0..pos0+T-1, converting to the cache dtype.
  KvWrite = 20,
  Copy = 21,  // out = in (dtype conversion allowed: F32 <-> F16)
  // Graph-only views, resolved by the graph executor (no kernel, no backend):
  Reshape = 22,   // out = in viewed with attribute `shape` (one dim may be -1)
  LastRows = 23,  // out = the last n rows of x [rows, cols]; n from the I32 input "rows"
  // out = x / max(||x||_2, eps) over the last dim.
  L2Normalize = 24,
  // in: x [.., S, D], mask [.., S] (f32, nonzero = a real token).  out [.., D] per sequence:
  // mode cls: row 0; mean: mean of the masked rows; max: max of the masked rows (0 when none).
  MaskedPool = 25,
  // Bidirectional (non-causal) attention over a batch with a key padding mask:
  // q [B, T, n_heads, head_dim], k/v [B, S, n_kv_heads, head_dim] (S may differ from T:
  // cross-attention), key_mask [B, S] (f32 or i32, nonzero = a real key). Query t of
  // sequence b sees every key s of b whose mask is nonzero (and, when window > 0, only
  // those with |t - s| <= window: ModernBERT's local layers); logits = scale * q.k;
  // a query with no visible key gets 0.  out [B, T, n_heads, head_dim].
  EncoderAttention = 26,
  Relu = 27,  // out = max(x, 0)
  // 1-D convolution (Whisper's encoder stem): x [C_in, L] when channels_first, else [L, C_in]
  // (either with a leading batch dim B); weight [C_out, C_in, k] (f32/f16/bf16); bias [C_out]
  // (optional). out[.., t, o] = bias[o] + sum_{c, j} W[o, c, j] * x[c, t*stride + j - padding]
  // (x = 0 outside [0, L)), t < L_out = (L + 2*padding - k) / stride + 1.  out [.., L_out, C_out]
  // (time-major rows, what matmul takes).
  Conv1d = 28,
  // in: x, W (, bias).  y = gelu_tanh(x @ W^T + bias) (gelu erf when attr gelu_erf).
  FusedMatmulGelu = 29,
  // in: x, W, residual [.., N] (, bias).  y = (x @ W^T + bias) + residual.
  FusedMatmulAdd = 30,
  // in: q [T, n_heads*head_dim], k, v [T, n_kv_heads*head_dim]; out: q', k', k cache, v cache.
  // Exactly rope(q) -> q', rope(k) -> k' (attrs n_heads / n_kv_heads), kv_write(k') -> k cache,
  // kv_write(v) -> v cache, at positions pos0..pos0+T-1 (q' / k' may alias q / k): the
  // decoder family's per-layer position work in one op (one dispatch on a device backend).
  FusedRopeKv = 31,
  // in: x [T, K], Wq, Wk, Wv (, bq, bk, bv: all three or none); out: q, k, v.  Exactly the
  // three matmuls x @ W^T (+ b) (one dispatch on a device backend for few tokens).
  FusedQkv = 32,
  // Element-wise, like x (graph v2, docs/graph.md): 1 / (1 + exp(-x)), tanh(x), sqrt(x).
  Sigmoid = 33,
  Tanh = 34,
  Sqrt = 35,
  // out = x with its dims permuted: out.shape[i] = x.shape[perm[i]] (attr perm, ints[0..ndim)).
  Transpose = 36,
  // out = x[.., start:end:step, ..] along one axis (attr axis, negative from the end; range =
  // [start, end, step] in ints[0..3), ONNX bounds: negative from the end, clamped, step >= 1).
  Slice = 37,
  // out = x padded by ints[i] before and ints[ndim + i] after dim i (attr pads), with `value`
  // (mode constant), the mirror without the edge (reflect) or the edge value (edge).
  Pad = 38,
  // One-directional LSTM (ONNX gate order i, o, f, c): x [S, B, I], W [4H, I], R [4H, H],
  // bias [8H] (Wb then Rb), h0, c0 [B, H]; out: Y [S, B, H], h_S, c_S [B, H].  For each step s:
  // g = x_s W^T + h R^T + Wb + Rb; i, o, f = sigmoid(g_i, g_o, g_f); c = f c + i tanh(g_c);
  // h = o tanh(c) (the reference sums in double; the x86 levels in f32 lanes, within op-f32).
  Lstm = 39,
  // ---- array ops of graph v2 (ONNX semantics; any element type the row accepts; numpy
  // broadcasting where two inputs meet). Tags 40-49: these; 50-59: convolution, pooling, norms,
  // matmul and layout ops; 60-79: index and data-dependent-shape ops.
  // out = fn(x) element-wise, attr fn: neg abs exp log erf sin cos ceil floor round sign reciprocal
  // softplus leaky_relu (slope alpha) not clip (bounds alpha, beta) isnan isinf (-> bool); floats in
  // double, integers exact.
  Unary = 40,
  // out = fn(a, b) with broadcasting, attr fn: add sub mul div pow min max mod (arithmetic, a's
  // dtype; integer div truncates, mod as numpy for fmod=false) equal less less_equal greater
  // greater_equal (bool) and or xor (bool inputs).
  Binary = 41,
  // out = cond ? x : y with broadcasting of all three (cond bool).
  Where = 42,
  // out = x converted to attr `to` (floats to integers truncate toward zero; to bool: x != 0).
  Cast = 43,
  // out = fn over attr axes (empty: all dims), attr keepdims: sum mean max min prod (sums in double).
  Reduce = 44,
  // Views of graph v2, resolved by the executor (no kernel), any dtype: x viewed with the i64 shape
  // input (ONNX Reshape: 0 copies x's dim unless attr allowzero, one -1 inferred) ...
  ReshapeTo = 45,
  Squeeze = 46,    // ... without the size-1 dims of attr axes (empty: every size-1 dim)
  Unsqueeze = 47,  // ... with size-1 dims inserted at attr axes (of the output)
  Flatten = 48,    // ... as 2-D [prod(d[:axis]), prod(d[axis:])]
  // out i64 [k] = x's dims [start, end) (attr range = [start, end], ONNX Shape's bounds; default all).
  ShapeOf = 49,
  // ---- convolution, pooling, norms, matmul and layout ops of graph v2 (ONNX semantics, f32; the
  // reference kernels in dispatch/ref/array_nn_kernels.h). Spatial attrs of conv / conv_transpose /
  // pool: pads in ints ([begin per spatial dim.., end per spatial dim..]), strides in ints2[0..2),
  // dilations in ints2[2..4), output_padding (conv_transpose) / kernel_shape (pool) in ints2[4..6);
  // n_part[0..3) says how many of each were given (0: the defaults 1, 1, 0).
  // y[n, o, p] = bias[o] + sum_{c in o's group, j} W[o, c, j] x[n, c, p*stride + j*dilation - pad_begin]
  // (x = 0 outside), then attr activation (none, relu, silu, leaky_relu with slope alpha) applied to y.
  // x [N, C, L] or [N, C, H, W], W [O, C/group, k..], bias [O]?  out [N, O, ..].
  Conv = 50,
  // The adjoint of conv: y[n, o, i*stride + j*dilation - pad_begin] += x[n, c, i] W[c, o % (O/g), j]
  // (+ bias[o]); W [C, O/group, k..]; out dim = stride (in - 1) + output_padding + dilation (k - 1) + 1 - pads.
  ConvTranspose = 51,
  // numpy matmul of two run-time arrays a [.., M, K] @ b [.., K, N] (batch dims broadcast; a 1-D
  // operand is promoted to a row / a column and that dim removed from the output); sums in double.
  MatmulNd = 52,
  // y = (x - mean) / sqrt(var + eps) * scale[c] + bias[c], mean / var over the spatial dims of each (n, c).
  InstanceNorm = 53,
  // The same over each group of C/num_groups channels (and the spatial dims), then scale[c], bias[c]
  // per channel (ONNX GroupNormalization, opset 21).  attr num_groups (group).
  GroupNorm = 54,
  // ONNX Resize of x to the shape in attr sizes (ints, every dim; scale = out / in per dim): mode
  // nearest (nearest_mode floor / round_prefer_floor / round_prefer_ceil / ceil) or linear (separable
  // over the dims whose size changes), coordinate_transformation_mode half_pixel / asymmetric /
  // align_corners / pytorch_half_pixel.
  Resize = 55,
  // out = the inputs (2..64, one dtype) joined along attr axis (negative from the end).
  Concat = 56,
  // Tag 57 is reserved for split, which the importer writes as one slice per output (docs/graph.md).
  // ONNX AveragePool / MaxPool over the 1 or 2 spatial dims of x [N, C, ..]: attr mode avg|max,
  // kernel_shape, strides, pads, dilations, count_include_pad, ceil_mode.
  Pool = 58,
  // Softmax over attr axis (negative from the end) of x: exp(x - max) / sum (ONNX opset 13), sums in double.
  SoftmaxAxis = 59,
  // ---- index and data-dependent-shape ops (tags 60-79; ONNX semantics; reference kernels in
  // dispatch/ref/array_index_kernels.h). Index inputs are i32 or i64; a negative index counts from
  // the end of its dim; an index outside [-dim, dim) is InvalidConfig naming the op label. Outputs
  // whose size comes from input values (nonzero, range, constant_of_shape, expand, tile) read those
  // host values in the shape rule and may hold at most 2^31 elements (InvalidConfig otherwise,
  // before anything is allocated).
  // out = data indexed along attr axis: out[i.., j.., k..] = data[i.., indices[j..], k..].
  Gather = 60,
  // out[idx] = data[idx with idx[axis] = indices[idx]] (out like indices, same rank as data).
  GatherElements = 61,
  // out[b.., i..] = data[b.., indices[b.., i.., :]..] (attr batch_dims b; the last dim of
  // indices addresses leading dims of data after the batch dims).
  GatherNd = 62,
  // out = data; out[indices[i.., :]] = updates[i..] in index order (attr reduction none | add).
  ScatterNd = 63,
  // out = data; out[idx with idx[axis] = indices[idx]] = updates[idx] (reduction none | add).
  ScatterElements = 64,
  // out i64 [rank(x), n] = the indices of the n nonzero elements of x, row-major order.
  NonZero = 65,
  // out[i] = start + i * delta for i < max(ceil((limit - start) / delta), 0) (f32: accumulated in
  // f32 as onnxruntime does).  in: start, limit, delta: scalars of one dtype (f32, i32, i64).
  Range = 66,
  // out = running sum of x along attr axis (exclusive: without the element itself; reverse: from
  // the end). Floats summed in double, integers exact.
  CumSum = 67,
  // out = attr value everywhere, shape = the values of the i64 input, dtype attr `to`.
  ConstantOfShape = 68,
  // out = x broadcast against the shape given as an i64 input (numpy rules both ways: ONNX Expand).
  Expand = 69,
  // out = x repeated repeats[i] times along dim i (repeats: i64 input, one per dim, >= 0).
  Tile = 70,
  // out like x (shape and float dtype): mean + scale * N(0,1), element i's normal from the
  // counter-based generator of (seed, i) (docs/graph.md "random_normal_like").
  RandomNormalLike = 71,
  // out i64 = index of the max of x along attr axis (keepdims; select_last_index: the last of equal
  // maxima, else the first; NaN counts as the max).
  ArgMax = 72,
  // ONNX Slice with run-time bounds: out = x[start:end:step] on the dims of axes (default 0, 1, ..),
  // in: x, starts, ends, axes?, steps? (1-D, one value per sliced axis, i32 or i64, host memory).
  // Starts / ends count from the end when negative and are clamped to [0, dim] (step > 0) or
  // [-1, dim - 1] (step < 0: the dim read backwards, e.g. end -INT64_MAX reverses it); step != 0.
  SliceDyn = 73,
  // ONNX Pad with run-time pads: in x, pads (1-D i32 / i64, host memory: the begin pads then the end
  // pads of each dim, or of each of attr axes); a negative pad crops.  attr mode constant (attr
  // value) | reflect | edge.
  PadDyn = 74,
  // ---- attention with heads as a dim (tag 85; ONNX exports' scaled dot-product attention, written
  // by the fusion pass, graph/array_fusion.cc): q [B, H, T, D], k [B, H, S, D], v [B, H, S, Dv],
  // mask? (bool, numpy-broadcast to [B, H, T, S]: true = the key is attended) -> [B, H, T, Dv]
  // (B and H broadcast among q, k, v and the mask). Per row: softmax over the attended keys of
  // attr scale * q.k, times v; a row with no key attended is 0.
  AttentionNd = 85,
  // ---- fused element-wise steps (tag 86; written by the fusion pass, graph/array_fusion.cc, for trees
  // of binary add / sub / mul / div and unary leaky_relu on f32: HiFi-GAN's resblock sums): out = attr
  // program run at each element of x0..x7 (f32, numpy-broadcast to one shape), in postfix: i >= 0 pushes
  // x_i, then -1 add, -2 sub, -3 mul, -4 div (of the two top values, the lower one first), -5
  // leaky_relu of the top (slope alpha); every step rounded to f32, so the result is the unfused
  // nodes' bit for bit.
  Elementwise = 86,
  // ---- the decoder's few-token steps with the RMSNorm folded in (tags 87-88; families/decoder.cc
  // emits them on device backends, where each op is a dispatch): exactly rms_norm(x, w_norm) (attrs
  // eps, plus_one) followed by the op named, the normalized rows never stored.
  // in: x [T, K], w_norm [K], Wq, Wk, Wv (, bq, bk, bv: all three or none); out: q, k, v (fused_qkv).
  FusedNormQkv = 87,
  // in: x [T, K], w_norm [K], W_gate, W_up.  y = fused_swiglu(rms_norm(x, w_norm)).
  FusedNormSwiGlu = 88,
  // ---- the decoder's position work and attention of a step in one op (families/decoder.cc, device
  // backends). in: q [T, n_heads*head_dim], k, v [T, n_kv_heads*head_dim] (, q norm, k norm [head_dim]:
  // both or none); out: y [T, n_heads*head_dim], k cache, v cache.  Exactly: with the norms, rms_norm
  // of each head of q and of k (attrs eps, plus_one; Qwen3's and Gemma 3's q/k norms); then
  // fused_rope_kv(q, k, v) -> (q', k', k cache, v cache), then attention(q', k cache, v cache) -> y
  // (attrs of both: rope, pos0, scale, softcap, window); q and k are left as they are (the normed and
  // rotated rows never stored).
  FusedRopeAttention = 89,
  COUNT_PLUS_ONE
};

// From the schema table (dispatch/op_schema.cc).
// fused_norm_qkv / fused_norm_swiglu without their norm weight (in[1]): x, then the product's inputs
// into rest[0..n_in-1) (what fused_qkv / fused_swiglu take); returns n_in - 1.
inline int without_norm_weight(const Tensor* in, int n_in, Tensor* rest) {
  rest[0] = in[0];
  for (int i = 2; i < n_in; ++i) rest[i - 1] = in[i];
  return n_in - 1;
}

const char* op_name(OpKind k);  // "matmul", "rms_norm", ... (snake_case, stable)
bool parse_op_name(const char* s, OpKind* out);  // inverse of op_name

// OpAttrs::rope: a RopeTable (core/rope.h), the cos/sin tables of a model's RopeCache.

struct OpAttrs {
  float eps = 0.f;
  bool norm_plus_one = false;  // Gemma: weight applied as (1 + w)
  float scale = 1.f;           // Embedding, Scale, Attention
  float softcap = 0.f;         // Softcap, Attention (0 = none)
  bool gelu_erf = false;       // GeGlu: erf GELU instead of the tanh approximation
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int64_t pos0 = 0;            // Rope, Attention, KvWrite
  int64_t window = 0;          // Attention sliding window (0 = full causal); EncoderAttention: |t - s| <= window
  int pool_mode = 0;           // MaskedPool: 0 cls, 1 mean, 2 max
  int stride = 1;              // Conv1d
  int padding = 0;             // Conv1d
  bool channels_first = false; // Conv1d: x is [C_in, L] (else [L, C_in])
  int axis = 0;                // Slice (negative: from the end)
  int mode = 0;                // Pad: 0 constant, 1 reflect, 2 edge
  float value = 0.f;           // Pad (mode constant)
  int n_ints = 0;              // Transpose perm, Slice range, Pad pads, Reduce axes, Conv pads, ...
  int64_t ints[16] = {};
  int n_ints2 = 0;             // a second integer list (Conv strides + dilations, ...)
  int64_t ints2[8] = {};
  int fn = 0;                  // Unary / Binary / Reduce: which function (the schema's enum attribute `fn`)
  int to = 0;                  // Cast: the target DType (as its enum value)
  int group = 1;               // Conv: groups
  bool keepdims = true;        // Reduce
  bool allowzero = false;      // ReshapeTo: a 0 in the shape is a size 0 (else x's dim)
  float alpha = 0.f, beta = 0.f;  // LeakyRelu slope, Gemm / Clip bounds, ...
  // Index ops (tags 60-79):
  int batch_dims = 0;          // GatherNd
  bool exclusive = false;      // CumSum
  bool reverse = false;        // CumSum
  bool select_last = false;    // ArgMax: select_last_index
  double fill = 0.0;           // ConstantOfShape: value (integers exact up to 2^53)
  int64_t seed = 0;            // RandomNormalLike (a caller may override it per run)
  int n_part[3] = {};          // Conv / ConvTranspose / Pool: counts of strides, dilations, ints2[4..) given
  bool count_include_pad = false;  // Pool (avg)
  bool ceil_mode = false;          // Pool
  int coord_mode = 0;          // Resize: half_pixel, asymmetric, align_corners, pytorch_half_pixel
  int nearest_mode = 0;        // Resize: round_prefer_floor, round_prefer_ceil, floor, ceil
  int activation = 0;          // Conv: fused epilogue none / relu / silu / leaky_relu (slope alpha): op_schema.h
  const RopeTable* rope = nullptr;
};

struct Op {
  OpKind kind;
  OpAttrs a;
  const char* label = nullptr;  // e.g. "layers.5.attention", for dispatch records and profiles
};

}  // namespace cyb
