#include "backends/wgpu/wgpu_backend.h"

#include "core/env_setting.h"
#include "core/errors.h"
#include "core/quant.h"

#if !defined(CYB_HAVE_WGPU)

namespace cyb {
bool wgpu_compiled() { return false; }
bool wgpu_hardware_available() { return false; }
WgpuInfo wgpu_info(bool) {
  throw_backend_init("wgpu+rs", "this build has no wgpu+rs backend (the `wgpu` package was not "
                                "found when the native core was configured)");
}
std::unique_ptr<Backend> make_wgpu_backend(bool allow_software, WgpuImpl) {
  wgpu_info(allow_software);
  return nullptr;
}
void wgpu_use_dawn(uintptr_t) { wgpu_info(true); }
bool wgpu_dawn_handed() { return false; }
std::string wgpu_process_impl() { return ""; }
std::vector<std::string> wgpu_proc_names(WgpuImpl) { return {}; }
std::vector<std::string> wgpu_fill_check(WgpuImpl, const std::vector<std::string>&) { return {}; }
std::vector<std::pair<std::string, uint64_t>> wgpu_abi() { return {}; }
std::map<std::string, uint64_t> wgpu_report() { return {}; }
std::map<std::string, double> wgpu_take_host_times() { return {}; }
std::map<std::string, uint64_t> wgpu_memory(bool) { return {}; }
bool wgpu_set_gpu_profiling(bool) { return false; }
std::vector<WgpuShaderTime> wgpu_take_gpu_profile(uint64_t* untimed) {
  if (untimed) *untimed = 0;
  return {};
}
}  // namespace cyb

#else

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backends/wgpu/wgpu_backend_impl.h"
#include "dispatch/op_schema.h"

namespace cyb {
namespace wgpu {

WgpuBackend::~WgpuBackend() {
  for (auto& kv : weights_) free_devbuf(kv.second);
}

State& WgpuBackend::state(ExecContext& ctx) {
  auto& s = ctx.backend_state();
  if (!s) {
    auto* st = new State;
    st->g = &g_;
    st->slot_bytes_ = std::max<uint32_t>(256, g_.limits.minUniformBufferOffsetAlignment);
    s.reset(st);
  }
  State* st = static_cast<State*>(s.get());
  g_.last_state.store(st);
  st->precise = ctx.precise();
  return *st;
}

Tensor WgpuBackend::alloc_frame(ExecContext& ctx, const Shape& shape) {
  Tensor t;
  t.dtype = DType::F32;
  t.shape = shape;
  t.device = Device::Wgpu;
  t.data = state(ctx).alloc(t.nbytes());
  return t;
}

Tensor WgpuBackend::alloc_frame_as(ExecContext& ctx, const Shape& shape, DType dtype) {
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  t.device = Device::Wgpu;
  t.data = state(ctx).alloc(t.nbytes());
  return t;
}

void WgpuBackend::release_frame(ExecContext& ctx, const Tensor& t) {
  if (t.device == Device::Wgpu && t.data) state(ctx).give(dev(t));
}

Tensor WgpuBackend::alloc(const Shape& shape, DType dtype) {
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  t.device = Device::Wgpu;
  t.data = upload_new(g_, nullptr, shape, dtype);
  return t;
}

Tensor WgpuBackend::upload(const void* data, const Shape& shape, DType dtype) {
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  t.device = Device::Wgpu;
  t.data = upload_new(g_, data, shape, dtype);
  return t;
}

void WgpuBackend::release(Tensor& t) {
  if (t.device == Device::Wgpu && t.data) free_devbuf(dev(t));
  t.data = nullptr;
}

void WgpuBackend::read_bytes(const Tensor& t, void* dst) {
  DevBuf* d = dev(t);
  if (t.nbytes() == 0) return;
  if (d->bufs.size() != 1) throw_unsupported_op("read (split tensor)", "wgpu+rs", dtype_name(t.dtype));
  if (dev_padded(t.dtype)) {  // whole tensors only: the device layout pads each block
    if (t.offset != 0 || t.nbytes() / block_bytes(t.dtype) * dev_block_bytes(t.dtype) != d->bytes)
      throw_unsupported_op("read (part of a block-encoded tensor)", "wgpu+rs", dtype_name(t.dtype));
    std::vector<uint8_t> raw((d->bytes + 3) & ~uint64_t(3));
    reader(d)->read(d->bufs[0], 0, raw.data(), raw.size());
    unpad_blocks(t.dtype, raw.data(), static_cast<uint8_t*>(dst), t.nbytes() / block_bytes(t.dtype));
    return;
  }
  const uint64_t n = t.nbytes(), a0 = t.offset & ~uint64_t(3);
  if (a0 == t.offset) {
    reader(d)->read(d->bufs[0], t.offset, dst, n);
    return;
  }
  std::vector<uint8_t> words(((t.offset + n + 3) & ~uint64_t(3)) - a0);
  reader(d)->read(d->bufs[0], a0, words.data(), words.size());
  std::memcpy(dst, words.data() + (t.offset - a0), n);
}

void WgpuBackend::write_bytes(const Tensor& t, const void* src) {
  DevBuf* d = dev(t);
  if (t.nbytes() == 0) return;
  if (d->bufs.size() != 1) throw_unsupported_op("write (split tensor)", "wgpu+rs", dtype_name(t.dtype));
  if (dev_padded(t.dtype))
    throw_unsupported_op("write (a block-encoded tensor; upload it whole)", "wgpu+rs", dtype_name(t.dtype));
  // A queue write lands before any later submit: the work recorded so far (which may
  // still read this frame's old contents, frames being reused within a forward) goes first.
  if (d->owner && d->owner->enc_) d->owner->submit();
  const uint64_t n = t.nbytes();
  if (t.offset % 4 == 0 && n % 4 == 0) {
    A.wgpuQueueWriteBuffer(g_.queue, d->bufs[0], t.offset, src, n);
    return;
  }
  const uint64_t a0 = t.offset & ~uint64_t(3);
  std::vector<uint8_t> words(((t.offset + n + 3) & ~uint64_t(3)) - a0);
  reader(d)->read(d->bufs[0], a0, words.data(), words.size());  // the neighbours' bytes in the edge words
  std::memcpy(words.data() + (t.offset - a0), src, n);
  A.wgpuQueueWriteBuffer(g_.queue, d->bufs[0], a0, words.data(), words.size());
}

void WgpuBackend::download_f32(const Tensor& t, float* out) {
  const int64_t n = t.shape.numel();
  if (t.dtype == DType::F32) {
    read_bytes(t, out);
    return;
  }
  std::vector<uint8_t> raw(t.nbytes());
  read_bytes(t, raw.data());
  if (t.dtype == DType::I32) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(reinterpret_cast<const int32_t*>(raw.data())[i]);
    return;
  }
  dequant_row(t.dtype, raw.data(), out, n);  // f16 / bf16 / block encodings (core/quant.h)
}

Tensor WgpuBackend::sampled_token(ExecContext& ctx) {
  DevBuf* res = state(ctx).persist_[3];
  if (!res) throw_invalid_config("ids", "no token was sampled on the device in this conversation");
  Tensor t;
  t.dtype = DType::I32;
  t.shape = Shape{1};
  t.device = Device::Wgpu;
  t.data = res;
  return t;
}

DevBuf* WgpuBackend::weight(const Tensor& t) {
  if (t.device == Device::Wgpu) return dev(t);
  if (uncached_) {  // a host value of the version-2 executor: a frame buffer of this forward
    if (dev_padded(t.dtype))
      throw_unsupported_op("a block-encoded host tensor as a weight (host outputs)", "wgpu+rs", dtype_name(t.dtype));
    DevBuf* d = uncached_->alloc(t.nbytes());
    Tensor dt = t;
    dt.device = Device::Wgpu;
    dt.offset = 0;
    dt.data = d;
    if (t.nbytes()) write_bytes(dt, t.data);
    return d;
  }
  std::lock_guard<std::mutex> lk(mu_);
  const std::pair<const void*, uint64_t> key{t.data, t.nbytes()};
  auto it = weights_.find(key);
  if (it != weights_.end()) return it->second;
  DevBuf* d = upload_new(g_, t.data, t.shape.ndim >= 2 ? t.shape : Shape{1, t.shape.numel()}, t.dtype);
  weights_.emplace(key, d);
  return d;
}

WGPUBuffer WgpuBackend::act(State& st, const Tensor& t) {
  if (t.device == Device::Wgpu) return dev(t)->bufs[0];
  DevBuf* d = st.alloc(t.nbytes());
  // A queue write lands before the work recorded so far, which may still read this frame's old
  // contents where the frame went back to the pool within this forward (release_frame): then that
  // work goes first.
  if (d->recycled && st.enc_) st.submit();
  const uint64_t n = (t.nbytes() + 3) & ~uint64_t(3);
  std::vector<uint8_t> tmp(n, 0);
  std::memcpy(tmp.data(), t.data, t.nbytes());
  A.wgpuQueueWriteBuffer(g_.queue, d->bufs[0], 0, tmp.data(), n);
  return d->bufs[0];
}

// A graph-v2 array op (op.h tags 33-79) whose outputs are all empty: nothing to compute.
static bool empty_outputs(const Op& op, const Tensor* in, int n_in) {
  const int tag = static_cast<int>(op.kind);
  if (tag < static_cast<int>(OpKind::Sigmoid) || tag >= 80) return false;
  try {
    const std::vector<Shape> shapes = infer_output_shapes(op, in, n_in);
    for (const Shape& s : shapes)
      if (s.numel() != 0) return false;
    return !shapes.empty();
  } catch (const Error&) {
    return false;
  }
}

// Capability only: which dtypes, layouts and sizes the WGSL kernels take. The
// op's validity (arity, shapes, attributes, positions) was checked once by the
// dispatcher (validate_op), before any backend was asked.
bool WgpuBackend::supports(const Op& op, const Tensor* in, int n_in) const {
  auto plain = [](const Tensor& t) { return t.offset == 0 && t.dtype == DType::F32; };
  auto all_plain = [&] {
    for (int i = 0; i < n_in; ++i)
      if (!plain(in[i])) return false;
    return true;
  };
  auto conv_inputs = [&] {  // x and bias f32, the weight f32 or f16
    return plain(in[0]) && in[1].offset == 0 && (in[1].dtype == DType::F32 || in[1].dtype == DType::F16) &&
           (n_in < 3 || plain(in[2]));
  };
  auto index_dtype = [](const Tensor& t) {
    return t.offset == 0 && (t.dtype == DType::F32 || t.dtype == DType::I32 || t.dtype == DType::I64);
  };
  auto ints = [](const Tensor& t) { return t.dtype == DType::I32 || t.dtype == DType::I64; };
  auto index_ints = [](const Tensor& t) { return t.offset == 0 && (t.dtype == DType::I32 || t.dtype == DType::I64); };
  for (int i = 0; i < n_in; ++i)  // an empty input: a graph-v2 op whose outputs are all empty too is a
    if (in[i].shape.numel() == 0 &&  // no-op here (execute records nothing); any other op is the cpu's
        !(op.kind == OpKind::ScatterNd && i > 0 && in[2].shape.numel() == 0))  // (no updates: a copy of data)
      return empty_outputs(op, in, n_in);
  switch (op.kind) {
    case OpKind::Embedding:
      return weight_ok(in[1]) && in[1].offset == 0;
    case OpKind::Matmul:
      if (in[1].shape.ndim == 0)  // asked without shapes (the fusion pass's matmul_bias): the capability
        return float_act(in[0]) && enc_fn(in[1].dtype) != nullptr && (n_in == 2 || plain(in[2]));
      return float_act(in[0]) && in[0].offset % 4 == 0 && weight_ok(in[1]) && in[1].offset == 0 &&
             (n_in == 2 || plain(in[2]));
    case OpKind::FusedSwiGlu:
      return float_act(in[0]) && in[0].offset % 4 == 0 && weight_ok(in[1]) && weight_ok(in[2]) &&
             in[1].offset == 0 && in[2].offset == 0;
    case OpKind::FusedMatmulGelu:  // the matmul with the GELU in its epilogue (epilogue.wgsl)
      return float_act(in[0]) && in[0].offset % 4 == 0 && weight_ok(in[1]) && in[1].offset == 0 &&
             (n_in == 2 || plain(in[2]));
    case OpKind::FusedMatmulAdd:  // the matmul with the residual added in its epilogue
      return float_act(in[0]) && in[0].offset % 4 == 0 && weight_ok(in[1]) && in[1].offset == 0 &&
             float_act(in[2]) && in[2].offset % 4 == 0 && (n_in == 3 || plain(in[3]));
    case OpKind::FusedQkv: {  // as three matmuls (one matvec dispatch for few tokens)
      bool ok = float_act(in[0]) && in[0].offset % 4 == 0;
      for (int i = 1; i < 4; ++i) ok = ok && weight_ok(in[i]) && in[i].offset == 0;
      for (int i = 4; i < n_in; ++i) ok = ok && plain(in[i]);
      return ok;
    }
    case OpKind::RmsNorm:
    case OpKind::FusedSkipNorm:
    case OpKind::LayerNorm:
    case OpKind::L2Normalize:
    case OpKind::Softmax:
    case OpKind::MaskedPool:
    case OpKind::Add:
    case OpKind::Mul:
    case OpKind::SwiGlu:
    case OpKind::GeGlu:
    case OpKind::Scale:
    case OpKind::Silu:
    case OpKind::Gelu:
    case OpKind::GeluTanh:
    case OpKind::Relu:
    case OpKind::Softcap:
      return all_plain();
    case OpKind::Rope: {  // one workgroup row per (token, head), 64 dims per workgroup
      const int64_t T = in[0].shape.numel() / (static_cast<int64_t>(op.a.n_heads) * op.a.head_dim);
      return in[0].dtype == DType::F32 && in[0].offset % 4 == 0 && T * op.a.n_heads <= 65535 &&
             op.a.head_dim <= 65535 * 64;
    }
    case OpKind::Attention:  // device caches; f16 caches are read as packed pairs
      return op.a.head_dim <= 256 && (in[1].dtype == DType::F32 || op.a.head_dim % 2 == 0) &&
             in[1].dtype == in[2].dtype && in[1].device == Device::Wgpu && in[2].device == Device::Wgpu &&
             op.a.n_heads <= 65535;
    case OpKind::EncoderAttention: {  // one workgroup per (head, query row); 64 lanes own <= 4 dims each
      const int64_t rows = in[0].shape.numel() / (static_cast<int64_t>(op.a.n_heads) * op.a.head_dim);
      return plain(in[0]) && plain(in[1]) && plain(in[2]) && in[3].offset == 0 && op.a.head_dim <= 256 &&
             op.a.n_heads <= 65535 && rows <= 65535 && op.a.window <= 0x7fffffff;
    }
    case OpKind::AttentionNd: {  // encoder_attention.wgsl ND: one workgroup a row, D and Dv <= 256
      if (!plain(in[0]) || !plain(in[1]) || !plain(in[2]) || (n_in > 3 && in[3].offset != 0)) return false;
      if (in[0].shape.ndim == 0) return true;  // asked without shapes (the fusion pass): the capability
      if (!array_op_fits(op, in, n_in) || in[0].shape.d[3] > 256 || in[2].shape.d[3] > 256) return false;
      return infer_output_shapes(op, in, n_in)[0].numel() / in[2].shape.d[3] <= int64_t{65535} * 65535;
    }
    case OpKind::KvWrite:  // an f16 cache is written as packed pairs: even head_dim; rows at any offset
      return in[0].dtype == DType::F32 && in[0].offset % 4 == 0 && op.a.head_dim % 2 == 0;
    case OpKind::FusedRopeKv:         // rope.wgsl KV: as rope and kv_write
    case OpKind::FusedRopeAttention:  // attention.wgsl DEC + ROPE for one token, else fused_rope_kv then attention
      return in[0].dtype == DType::F32 && in[1].dtype == DType::F32 && in[2].dtype == DType::F32 &&
             in[0].offset % 4 == 0 && in[1].offset % 4 == 0 && in[2].offset % 4 == 0 && op.a.head_dim % 2 == 0 &&
             (n_in < 5 || (in[3].dtype == DType::F32 && in[4].dtype == DType::F32));  // norm weights (the op's 4, 5)
    case OpKind::FusedNormMatmul:  // few tokens: matvec.wgsl NORM; else rms_norm into a frame, then the matmul
      return plain(in[0]) && plain(in[1]) && weight_ok(in[2]) && in[2].offset == 0 && (n_in == 3 || plain(in[3]));
    case OpKind::FusedNormSwiGlu:  // as fused_norm_matmul, with fused_swiglu's product
      return plain(in[0]) && plain(in[1]) && weight_ok(in[2]) && weight_ok(in[3]) && in[2].offset == 0 &&
             in[3].offset == 0;
    case OpKind::FusedNormQkv: {  // as fused_norm_matmul, with fused_qkv's products
      bool ok = plain(in[0]) && plain(in[1]);
      for (int i = 2; i < 5; ++i) ok = ok && weight_ok(in[i]) && in[i].offset == 0;
      for (int i = 5; i < n_in; ++i) ok = ok && plain(in[i]);
      return ok;
    }
    case OpKind::Copy:  // f32 / f16 / bf16 (the schema's float types) each way, whole words (copy.wgsl)
      return in[0].offset % 4 == 0 && in[0].shape.numel() <= int64_t{0xffffffff};
    case OpKind::Conv1d: {  // f32 or f16 weights; one workgroup row per output row (b, t)
      const Shape& xs = in[0].shape;
      const int64_t B = xs.ndim == 3 ? xs.d[0] : 1, L = op.a.channels_first ? xs.d[xs.ndim - 1] : xs.d[xs.ndim - 2];
      const int64_t L_out = (L + 2 * op.a.padding - in[1].shape.d[2]) / op.a.stride + 1;
      return plain(in[0]) && in[1].offset == 0 && (in[1].dtype == DType::F32 || in[1].dtype == DType::F16) &&
             (n_in < 3 || plain(in[2])) && B * L_out <= 65535;
    }
    // The f32 array ops of graph v2 (shaders/wgsl/array.wgsl, array_nn.wgsl): every data input
    // f32 (where: a bool condition), whole buffers, under 2^31 elements, none empty; integer
    // and bool results (comparisons, logic, not, cast, prod) stay on the cpu.
    case OpKind::Sigmoid:
    case OpKind::Tanh:
    case OpKind::Sqrt:
    case OpKind::Transpose:
    case OpKind::Slice:  // f32 (array.wgsl); i32 / i64 moved as words, bool as bytes (index.wgsl)
      if (op.kind == OpKind::Transpose && in[0].shape.ndim == 0 && op.a.n_ints > 0)
        return index_dtype(in[0]);  // asked without shapes (the fusion pass's attention_heads k): the capability
      return (index_dtype(in[0]) || (in[0].offset == 0 && in[0].dtype == DType::BOOL)) && array_op_fits(op, in, n_in);
    // The index ops on f32 / i32 / i64 values with i32 / i64 indices (shaders/wgsl/index.wgsl); the
    // shape inputs of slice_dyn, pad_dyn and expand are host values (their plans are made here).
    case OpKind::SliceDyn:
    case OpKind::Expand:
      return (index_dtype(in[0]) || (in[0].offset == 0 && in[0].dtype == DType::BOOL)) && array_op_fits(op, in, n_in);
    case OpKind::PadDyn:
      return plain(in[0]) && array_op_fits(op, in, n_in);
    case OpKind::Gather:  // bool data too (a word of four elements an invocation)
      return (index_dtype(in[0]) || (in[0].offset == 0 && in[0].dtype == DType::BOOL)) && index_ints(in[1]) &&
             array_op_fits(op, in, n_in);
    case OpKind::GatherElements:
    case OpKind::GatherNd:
      return index_dtype(in[0]) && index_ints(in[1]) && array_op_fits(op, in, n_in);
    case OpKind::ScatterNd:  // reduction add: f32; no updates: a copy of data
      if (in[2].shape.numel() == 0)
        return index_dtype(in[0]) && index_ints(in[1]) && in[0].shape.numel() < (int64_t{1} << 31);
      return index_dtype(in[0]) && index_ints(in[1]) && index_dtype(in[2]) && array_op_fits(op, in, n_in) &&
             (op.a.mode == kScatterNone || in[0].dtype == DType::F32);
    // (lavapipe stops a shader loop after 65535 iterations: the loops of these kernels stay under it)
    case OpKind::NonZero:  // nonzero.wgsl (the count: the shape rule's, from the host value of x); one
                           // workgroup of 256, a chunk of at most 65535 elements each
      return (index_dtype(in[0]) || (in[0].offset == 0 && in[0].dtype == DType::BOOL)) && in[0].shape.ndim > 0 &&
             in[0].shape.numel() <= int64_t{256} * 65535 && array_op_fits(op, in, n_in);
    case OpKind::Range: {  // typed.wgsl RANGE (start, limit, delta: host values); f32: one loop
      if (!index_dtype(in[0]) || !array_op_fits(op, in, n_in)) return false;
      return in[0].dtype != DType::F32 || infer_output_shapes(op, in, n_in)[0].numel() <= 65535;
    }
    case OpKind::RandomNormalLike:  // f32: the cpu generator's noise, copied in (wgpu_ops_array.cc)
      return in[0].dtype == DType::F32 && in[0].shape.numel() < (int64_t{1} << 31);
    case OpKind::CumSum:
      return plain(in[0]) && array_op_fits(op, in, n_in);
    case OpKind::SoftmaxAxis:
    case OpKind::InstanceNorm:
    case OpKind::MatmulNd:
    case OpKind::Concat:
    case OpKind::GroupNorm:
    case OpKind::Pool:
      return all_plain() && array_op_fits(op, in, n_in);
    case OpKind::ConvTranspose:  // weights f32 or f16 (the kernels' F16 variant reads pairs of halves)
      return conv_inputs() && array_op_fits(op, in, n_in);
    case OpKind::Conv:  // the WGSL kernel has no fused activation epilogue: such convs stay on the cpu
      return op.a.activation == kActNone && conv_inputs() && array_op_fits(op, in, n_in);
    case OpKind::Lstm:  // one workgroup a batch row, up to 1024 hidden units (lstm.wgsl MAXH)
      return all_plain() && array_op_fits(op, in, n_in) && in[1].shape.d[0] / 4 <= 1024 && in[0].shape.d[1] <= 65535;
    case OpKind::Resize:  // up to 8 dims: 2^8 corners at most; nearest and linear (cubic: the cpu)
      return all_plain() && array_op_fits(op, in, n_in) && in[0].shape.ndim <= 8 && op.a.mode != 2;
    case OpKind::Unary:  // f32: every fn with a float result, isnan / isinf (bools: typed.wgsl); not (bool),
                         // neg, abs (integers): typed.wgsl
      if (all_plain()) return array_op_fits(op, in, n_in) && op.a.fn != kUNot;
      return in[0].offset == 0 && array_op_fits(op, in, n_in) &&
             (in[0].dtype == DType::BOOL ? op.a.fn == kUNot
                                         : (ints(in[0]) && (op.a.fn == kUNeg || op.a.fn == kUAbs)));
    case OpKind::Binary: {  // f32: add sub mul div pow min max mod; typed.wgsl: f32 comparisons, integer
                            // add sub mul min max and comparisons, bool equal / and / or / xor
      if (!array_op_fits(op, in, n_in) || in[0].offset != 0 || in[1].offset != 0 || in[0].dtype != in[1].dtype)
        return false;
      const int f = op.a.fn;
      const bool cmp = f >= kBEqual && f <= kBGreaterEqual;
      if (in[0].dtype == DType::F32) return f <= kBMod || cmp;
      if (ints(in[0])) return f == kBAdd || f == kBSub || f == kBMul || f == kBMin || f == kBMax || cmp;
      return in[0].dtype == DType::BOOL && (f == kBEqual || f >= kBAnd);
    }
    case OpKind::Cast: {  // typed.wgsl: f32 / i32 / bool to f32 / i32 / i64 / bool; i64 to i32 / i64 / bool
      const DType to = cast_dtype(op.a.to), from = in[0].dtype;
      const bool to_ok = to == DType::F32 || to == DType::I32 || to == DType::I64 || to == DType::BOOL;
      const bool from_ok = from == DType::F32 || from == DType::I32 || from == DType::BOOL ||
                           (from == DType::I64 && to != DType::F32);
      return in[0].offset == 0 && to_ok && from_ok && array_op_fits(op, in, n_in);
    }
    case OpKind::Reduce:  // f32: sum mean max min; i32 / i64 (typed.wgsl): sum max min
      if (index_ints(in[0]))  // up to 65535 reduced elements an output (one loop)
        return array_op_fits(op, in, n_in) && (op.a.fn == kRSum || op.a.fn == kRMax || op.a.fn == kRMin) &&
               in[0].shape.numel() / std::max<int64_t>(1, infer_output_shapes(op, in, n_in)[0].numel()) <= 65535;
      return all_plain() && array_op_fits(op, in, n_in) && op.a.fn <= 3;
    case OpKind::Where:
      return in[0].dtype == DType::BOOL && plain(in[1]) && plain(in[2]) && array_op_fits(op, in, n_in);
    case OpKind::Pad: {  // pads >= 0 (a negative one crops: cpu)
      bool ok = all_plain() && array_op_fits(op, in, n_in);
      for (int i = 0; i < op.a.n_ints; ++i) ok = ok && op.a.ints[i] >= 0;
      return ok;
    }
    default:
      return false;
  }
}

void WgpuBackend::execute(const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out, ExecContext& ctx) {
  if (!supports(op, in, n_in))
    throw_unsupported_op(op_name(op.kind), "wgpu+rs", n_in > 0 ? dtype_name(in[0].dtype) : "-");
  bool none = n_out > 0;  // empty outputs (supports: a graph-v2 op on empty inputs): nothing to do
  for (int i = 0; i < n_out; ++i) none = none && out[i].shape.numel() == 0;
  if (none) return;
  State& st = state(ctx);
  int host_out = 0;
  for (int i = 0; i < n_out; ++i) host_out += out[i].device == Device::Host;
  if (host_out == 0) return encode(st, op, in, n_in, out, n_out);
  // Host outputs (the version-2 graph executor keeps its values in host memory): the op writes
  // frame buffers of this forward, read back into the host outputs before execute returns. Host
  // inputs are uploaded per use (act), and so are host "weights" (uncached_: a graph's value may
  // be freed and its address reused by another, which a cache keyed by address would mistake
  // for the old one).
  if (host_out != n_out || n_out > 4)
    throw_unsupported_op(std::string(op_name(op.kind)) + " (host and device outputs mixed)", "wgpu+rs", "-");
  const bool in_place = op.kind == OpKind::KvWrite || op.kind == OpKind::FusedRopeKv ||
                        op.kind == OpKind::FusedRopeAttention;  // outputs read too
  Tensor dout[4];
  for (int i = 0; i < n_out; ++i) {
    dout[i] = out[i];
    dout[i].device = Device::Wgpu;
    dout[i].offset = 0;
    DevBuf* d = st.alloc(out[i].nbytes());
    dout[i].data = d;
    if (in_place && out[i].nbytes()) write_bytes(dout[i], out[i].data);
  }
  uncached_ = &st;
  try {
    encode(st, op, in, n_in, dout, n_out);
  } catch (...) {
    uncached_ = nullptr;
    throw;
  }
  uncached_ = nullptr;
  for (int i = 0; i < n_out; ++i)
    if (out[i].nbytes()) read_bytes(dout[i], out[i].data);
}

void WgpuBackend::encode(State& st, const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out) {
  (void)n_out;
  switch (op.kind) {
    case OpKind::Matmul: return matmul(st, in[0], in[1], n_in > 2 ? &in[2] : nullptr, nullptr, out[0]);
    case OpKind::FusedSwiGlu: return matmul(st, in[0], in[1], nullptr, &in[2], out[0]);
    case OpKind::FusedNormMatmul: {
      const RowNorm rn{&op, &in[1]};
      return matmul(st, in[0], in[2], n_in > 3 ? &in[3] : nullptr, nullptr, out[0], nullptr, nullptr, &rn);
    }
    case OpKind::FusedNormSwiGlu: {
      const RowNorm rn{&op, &in[1]};
      return matmul(st, in[0], in[2], nullptr, &in[3], out[0], nullptr, nullptr, &rn);
    }
    case OpKind::FusedNormQkv: {
      const RowNorm rn{&op, &in[1]};
      Tensor rest[7];
      return qkv(st, rest, without_norm_weight(in, n_in, rest), out, &rn);
    }
    case OpKind::FusedMatmulGelu:
      return matmul(st, in[0], in[1], n_in > 2 ? &in[2] : nullptr, nullptr, out[0],
                    op.a.gelu_erf ? "GELU" : "GELU_TANH");
    case OpKind::FusedMatmulAdd:
      return matmul(st, in[0], in[1], n_in > 3 ? &in[3] : nullptr, nullptr, out[0], "ADD", &in[2]);
    case OpKind::FusedQkv: return qkv(st, in, n_in, out);
    case OpKind::Conv1d: return conv1d(st, op, in, n_in, out);
    case OpKind::Attention: return attention(st, op, in, out);
    case OpKind::EncoderAttention: return encoder_attention(st, op, in, out);
    case OpKind::AttentionNd: return attention_nd(st, op, in, n_in, out);
    case OpKind::KvWrite: return kv_write(st, op, in, out);
    case OpKind::Rope: return rope(st, op, in, out);
    case OpKind::FusedRopeKv: return fused_rope_kv(st, op, in, out);
    case OpKind::FusedRopeAttention: return fused_rope_attention(st, op, in, n_in, out);
    case OpKind::RmsNorm:
    case OpKind::L2Normalize:
    case OpKind::Softmax:
    case OpKind::FusedSkipNorm: return norm(st, op, in, out);
    case OpKind::LayerNorm: return layer_norm(st, op, in, n_in, out);
    case OpKind::Embedding: return embedding(st, op, in, out);
    case OpKind::Copy: return copy_tensor(st, in, out);
    case OpKind::MaskedPool: return masked_pool(st, op, in, out);
    case OpKind::Sigmoid:
    case OpKind::Tanh:
    case OpKind::Sqrt:
    case OpKind::Unary:
    case OpKind::Binary:
    case OpKind::Where:
    case OpKind::Transpose:
    case OpKind::Slice:
    case OpKind::Pad:
    case OpKind::Concat:
    case OpKind::Reduce:
    case OpKind::SoftmaxAxis:
    case OpKind::InstanceNorm:
    case OpKind::GroupNorm:
    case OpKind::Pool:
    case OpKind::Resize:
    case OpKind::Lstm:
    case OpKind::MatmulNd:
    case OpKind::Conv:
    case OpKind::ConvTranspose:
    case OpKind::PadDyn:
    case OpKind::SliceDyn:
    case OpKind::Expand:
    case OpKind::Gather:
    case OpKind::GatherElements:
    case OpKind::GatherNd:
    case OpKind::ScatterNd:
    case OpKind::CumSum:
    case OpKind::NonZero:
    case OpKind::Range:
    case OpKind::RandomNormalLike:
    case OpKind::Cast: return array_op(st, op, in, n_in, out);
    default: return eltwise(st, op, in, out);  // the element-wise ops (supports() declined the rest)
  }
}

}  // namespace wgpu

std::unique_ptr<Backend> make_wgpu_backend(bool allow_software, WgpuImpl impl) {
  wgpu::Gpu& g = wgpu::device_or_throw(allow_software, impl);
  return std::unique_ptr<Backend>(new wgpu::WgpuBackend(g));
}

}  // namespace cyb

#endif  // CYB_HAVE_WGPU
