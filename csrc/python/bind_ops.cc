// Test entry points of the op layer: run one op on the CPU backend at a chosen
// level with numpy inputs, and select the CPU level.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/quant.h"
#include "core/rope.h"
#include "backends/nox/nox_backend.h"
#include "backends/wgpu/wgpu_backend.h"
#include "dispatch/dispatcher.h"
#include "dispatch/op_schema.h"
#include "core/errors.h"
#include "core/exec_context.h"
#include "core/thread_pool.h"

namespace py = pybind11;
using namespace cyb;

namespace {

Shape to_shape(const std::vector<int64_t>& v) {
  if (v.size() > static_cast<size_t>(Shape::kMaxDims))
    throw_shape_mismatch("run_op", {Shape::kMaxDims}, {static_cast<int64_t>(v.size())});
  Shape s;
  for (int64_t d : v) s.d[s.ndim++] = d;
  return s;
}

std::vector<int64_t> array_shape(const py::array& a) {
  std::vector<int64_t> v;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) v.push_back(a.shape(i));
  return v;
}

DType parse_dtype(const std::string& s) {
  DType d;
  if (!parse_encoding(s, &d)) throw_invalid_config("encoding", "unknown encoding '" + s + "'");
  return d;
}

// A numpy array or (raw uint8 bytes, encoding, shape) -> a host tensor whose bytes live in `keep`.
// `exact`: integer and bool arrays keep their type (the array ops of graph v2); otherwise int64
// arrays become i32 (token ids, positions) as the token-stream ops take them.
Tensor to_tensor(const py::handle& h, std::vector<std::vector<uint8_t>>& keep, bool exact = false) {
  Tensor t;
  if (py::isinstance<py::tuple>(h)) {
    py::tuple tup = h.cast<py::tuple>();
    if (tup.size() != 3) throw_invalid_config("inputs", "quantized input must be (bytes, encoding, shape)");
    py::array raw = py::array::ensure(tup[0]);
    t.dtype = parse_dtype(tup[1].cast<std::string>());
    t.shape = to_shape(tup[2].cast<std::vector<int64_t>>());
    const size_t need = t.nbytes();
    if (static_cast<size_t>(raw.nbytes()) != need || t.shape.cols() % block_size(t.dtype) != 0)
      throw_weight_format("input", dtype_name(t.dtype), static_cast<uint64_t>(raw.nbytes()),
                          "expected " + std::to_string(need) + " bytes for shape " +
                              shape_str(t.shape.vec()));
    py::array c = py::array::ensure(raw, py::array::c_style);
    keep.emplace_back(need + 64);
    std::memcpy(keep.back().data(), c.data(), need);
  } else {
    py::array a = py::array::ensure(h, py::array::c_style);
    if (!a) throw_invalid_config("inputs", "input is not an array");
    const char kind = a.dtype().kind();
    const auto isz = a.itemsize();
    if (kind == 'f' && isz == 4) t.dtype = DType::F32;
    else if (kind == 'f' && isz == 2) t.dtype = DType::F16;
    else if (kind == 'i' && isz == 4) t.dtype = DType::I32;
    else if (exact && kind == 'i' && isz == 8) t.dtype = DType::I64;
    else if (exact && kind == 'i' && isz == 1) t.dtype = DType::I8;
    else if (exact && kind == 'u' && isz == 1) t.dtype = DType::U8;
    else if (exact && kind == 'b') t.dtype = DType::BOOL;
    else if (kind == 'f' && isz == 8) {
      a = py::array_t<float, py::array::c_style | py::array::forcecast>(a);
      t.dtype = DType::F32;
    } else if (kind == 'i' && isz == 8) {
      a = py::array_t<int32_t, py::array::c_style | py::array::forcecast>(a);
      t.dtype = DType::I32;
    } else {
      throw_invalid_config("inputs", std::string("unsupported numpy dtype kind '") + kind + "'");
    }
    t.shape = to_shape(array_shape(a));
    keep.emplace_back(static_cast<size_t>(a.nbytes()) + 64);
    std::memcpy(keep.back().data(), a.data(), static_cast<size_t>(a.nbytes()));
  }
  t.data = keep.back().data();
  return t;
}

py::array from_tensor(const Tensor& t) {
  std::vector<py::ssize_t> shape(t.shape.d, t.shape.d + t.shape.ndim);
  if (t.dtype == DType::F32) {
    py::array_t<float> a(shape);
    std::memcpy(a.mutable_data(), t.data, t.nbytes());
    return a;
  }
  if (t.dtype == DType::F16) {
    py::array a(py::dtype("float16"), shape);
    std::memcpy(a.mutable_data(), t.data, t.nbytes());
    return a;
  }
  if (t.dtype == DType::BF16) {  // returned as the raw uint16 bit patterns
    py::array_t<uint16_t> a(shape);
    std::memcpy(a.mutable_data(), t.data, t.nbytes());
    return a;
  }
  const char* np = t.dtype == DType::I32 ? "int32" : t.dtype == DType::I64 ? "int64" : t.dtype == DType::I8 ? "int8"
                   : t.dtype == DType::U8 ? "uint8" : t.dtype == DType::BOOL ? "bool" : nullptr;
  if (np) {
    py::array a(py::dtype(np), shape);
    if (t.nbytes()) std::memcpy(a.mutable_data(), t.data, t.nbytes());
    return a;
  }
  py::array_t<uint8_t> a(static_cast<py::ssize_t>(t.nbytes()));
  std::memcpy(a.mutable_data(), t.data, t.nbytes());
  return a;
}

ThreadPool& test_pool() {
  static ThreadPool pool(0);
  return pool;
}

std::string g_last_backend;

WgpuImpl parse_wgpu_impl(const std::string& impl) {
  if (impl == "wgpu-native") return WgpuImpl::Native;
  if (impl == "dawn") return WgpuImpl::Dawn;
  throw_invalid_config("impl", "'" + impl + "' is neither 'wgpu-native' nor 'dawn'");
}

}  // namespace

// webgpu:dawn: Dawn's procedures come from the wgpudawn Python package, handed over by
// cyb_llm.webgpu_dawn.attach() (which raises BackendInit naming the extra to install when the
// package is missing) before the backend starts. GIL held. Also used by bind_model.cc (load).
void attach_webgpu_dawn() {
  if (wgpu_dawn_handed()) return;
  py::module_::import("cyb_llm.webgpu_dawn").attr("attach")();
}

namespace {

// Runs the op through a dispatcher [backend] (cpu) or [backend, cpu] (others), as
// a model does: the op is validated once (validate_op, from the op schema), the
// first backend whose supports() says yes runs it, and an op the backend lacks
// falls back to the cpu (with transfers for a device backend); last_run_op_backend
// says which ran it. Device backends get their inputs uploaded and outputs read back.
py::list run_on(const std::string& backend_name, const std::string& level, const Op& op, std::vector<Tensor>& in,
                std::vector<Tensor>& out, bool precise, int threads) {
  std::unique_ptr<ThreadPool> own_pool;
  ThreadPool* pool = &test_pool();
  if (threads > 0) {
    own_pool.reset(new ThreadPool(threads));
    pool = own_pool.get();
  }
  ExecContext ctx(pool, precise);
  CpuBackend cpu(level == "auto" ? cpu_backend().level() : parse_cpu_level(level));
  std::unique_ptr<Backend> owned;
  Backend* be = &cpu;
  if (backend_name == "wgpu+rs" || backend_name == "wgpu") {
    owned = make_wgpu_backend(true);
    be = owned.get();
  } else if (backend_name == "webgpu:dawn") {
    attach_webgpu_dawn();
    owned = make_wgpu_backend(true, WgpuImpl::Dawn);
    be = owned.get();
  } else if (backend_name == "nox") {
    be = &nox_backend();
  } else if (!backend_name.empty() && backend_name != "cpu") {
    throw_backend_init(backend_name, "run_op knows the backends cpu, wgpu+rs and nox (and webgpu:dawn: wgpu+rs on Dawn)");
  }
  std::vector<Backend*> chain = {be};
  if (be != &cpu) chain.push_back(&cpu);
  Dispatcher disp(chain);
  {
    py::gil_scoped_release nogil;
    be->begin_forward(ctx);
    if (be->host_memory()) {
      disp.run(op, in.data(), static_cast<int>(in.size()), out.data(), static_cast<int>(out.size()), ctx);
    } else {
      std::vector<Tensor> din, dout;
      for (const Tensor& t : in) din.push_back(be->upload(t.data, t.shape, t.dtype));
      for (const Tensor& t : out) dout.push_back(be->upload(t.data, t.shape, t.dtype));  // initial contents
      disp.run(op, din.data(), static_cast<int>(din.size()), dout.data(), static_cast<int>(dout.size()), ctx);
      for (size_t i = 0; i < out.size(); ++i) be->read_bytes(dout[i], out[i].data);
      be->end_forward(ctx);
      for (Tensor& t : din) be->release(t);
      for (Tensor& t : dout) be->release(t);
    }
    g_last_backend.clear();
    for (const DispatchRecord& r : disp.records()) g_last_backend = r.backend + (r.fallback ? " (fallback)" : "");
  }
  py::list res;
  for (const Tensor& t : out) res.append(from_tensor(t));
  return res;
}

RopeScaling parse_scaling(const py::dict& s) {
  RopeScaling sc;
  for (auto it : s) {
    const std::string sk = it.first.cast<std::string>();
    if (sk == "type" || sk == "rope_type") sc.type = it.second.cast<std::string>();
    else if (sk == "factor") sc.factor = it.second.cast<double>();
    else if (sk == "low_freq_factor") sc.low_freq_factor = it.second.cast<double>();
    else if (sk == "high_freq_factor") sc.high_freq_factor = it.second.cast<double>();
    else if (sk == "original_max_position_embeddings")
      sc.original_max_position_embeddings = it.second.cast<int64_t>();
    else if (sk == "beta_fast") sc.beta_fast = it.second.cast<double>();
    else if (sk == "beta_slow") sc.beta_slow = it.second.cast<double>();
    else if (sk == "attention_factor") sc.attention_factor = it.second.cast<double>();
    else if (sk == "mscale") sc.mscale = it.second.cast<double>();
    else if (sk == "mscale_all_dim") sc.mscale_all_dim = it.second.cast<double>();
    else if (sk == "truncate") sc.truncate = it.second.cast<bool>();
  }
  return sc;
}

py::list run_op(const std::string& op_s, const py::list& inputs, const py::dict& attrs,
                const py::object& outputs, const std::string& level, const std::string& backend_name) {
  Op op{};
  if (!parse_op_name(op_s.c_str(), &op.kind)) throw_unsupported_op(op_s, "cpu", "-");
  const OpSchema& schema = op_schema(op.kind);
  std::vector<float> rope_cos, rope_sin;
  RopeTable rope;
  bool precise = false;
  int threads = 0;
  for (auto item : attrs) {
    const std::string k = item.first.cast<std::string>();
    py::handle v = item.second;
    // Run-time keys: the graph gives these through its positions input and rope attributes.
    if (k == "precise") precise = v.cast<bool>();
    else if (k == "threads") threads = v.cast<int>();
    else if (k == "pos0" && schema.positions) op.a.pos0 = v.cast<int64_t>();
    else if (k == "rope" && (op.kind == OpKind::Rope || op.kind == OpKind::FusedRopeKv ||
                              op.kind == OpKind::FusedRopeAttention)) {
      py::dict r = v.cast<py::dict>();
      rope.rot_dims = r["rot_dims"].cast<int>();
      rope.neox = r.contains("neox") ? r["neox"].cast<bool>() : true;
      if (r.contains("cos")) {
        rope_cos = r["cos"].cast<std::vector<float>>();
        rope_sin = r["sin"].cast<std::vector<float>>();
      } else {
        const RopeScaling sc = r.contains("scaling") ? parse_scaling(r["scaling"].cast<py::dict>()) : RopeScaling{};
        build_rope_table(rope.rot_dims, r["max_pos"].cast<int64_t>(), r["theta"].cast<double>(), sc,
                         rope_cos, rope_sin);
      }
      rope.max_pos = static_cast<int64_t>(rope_cos.size()) / std::max(1, rope.rot_dims / 2);
      if (rope_sin.size() != rope_cos.size())
        throw_invalid_config("rope", "cos and sin tables differ in size");
      rope.cos = rope_cos.data();
      rope.sin = rope_sin.data();
      op.a.rope = &rope;
    } else {
      // Everything else from the schema: the op's attributes and their types.
      const AttrSpec* a = schema.attr(k == "norm_plus_one" ? "plus_one" : k.c_str());
      if (!a || a->field == AttrSpec::Field::None)
        throw_invalid_config("attrs." + k, "op '" + op_s + "' has no attribute '" + k + "'");
      switch (a->type) {
        case AttrType::Float: set_attr(op.a, *a, v.cast<double>(), 0, false); break;
        case AttrType::Bool: set_attr(op.a, *a, 0.0, 0, v.cast<bool>()); break;
        case AttrType::Int: set_attr(op.a, *a, 0.0, v.cast<int64_t>(), false); break;
        case AttrType::Enum: {
          const int c = attr_choice(*a, v.cast<std::string>().c_str());
          if (c < 0) throw_invalid_config("attrs." + k, std::string("must be one of ") + a->choices);
          set_attr(op.a, *a, 0.0, c, false);
          break;
        }
        case AttrType::IntArray: set_attr_ints(op.a, *a, v.cast<std::vector<int64_t>>(), "attrs." + k); break;
        default: throw_invalid_config("attrs." + k, "not settable from run_op");
      }
    }
  }

  std::vector<std::vector<uint8_t>> keep;
  keep.reserve(inputs.size() + 8);
  std::vector<Tensor> in;
  const bool exact = schema.out_dtype != OutDType::F32;  // an array op: integer / bool inputs as they are
  for (auto h : inputs) in.push_back(to_tensor(h, keep, exact));

  std::vector<Tensor> out;
  if (outputs.is_none()) {
    int oi = 0;
    for (const Shape& s : infer_output_shapes(op, in.data(), static_cast<int>(in.size()))) {
      Tensor t;
      t.shape = s;
      t.dtype = output_dtype(op, in.data(), static_cast<int>(in.size()), oi++);
      keep.emplace_back(t.nbytes() + 64, 0);
      t.data = keep.back().data();
      out.push_back(t);
    }
  } else {
    for (auto h : outputs.cast<py::list>()) {
      if (py::isinstance<py::array>(h) || (py::isinstance<py::tuple>(h) && py::len(h) == 3 &&
                                           py::isinstance<py::str>(h.cast<py::tuple>()[1]))) {
        out.push_back(to_tensor(h, keep));  // initial contents given (e.g. a KV cache)
      } else {
        Tensor t;
        t.shape = to_shape(h.cast<std::vector<int64_t>>());
        keep.emplace_back(t.nbytes() + 64, 0);
        t.data = keep.back().data();
        out.push_back(t);
      }
    }
  }

  return run_on(backend_name, level, op, in, out, precise, threads);
}

// Times a matmul y[T, N] = x[T, K] @ W^T with random weights of `enc` (valid blocks:
// random bytes, f16 scale fields set to small finite values). Returns seconds per call.
double bench_matmul(const std::string& enc, int64_t N, int64_t K, int64_t T, int iters,
                    const std::string& level, int threads, bool precise, bool cache_weights) {
  const DType dt = parse_dtype(enc);
  if (K % block_size(dt) != 0) throw_invalid_config("K", "not a multiple of the block size");
  const size_t wb = row_bytes(dt, K) * static_cast<size_t>(N);
  std::vector<uint8_t> w(wb + 64);
  uint64_t st = 0x9e3779b97f4a7c15ull;
  auto rnd = [&] {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    return st;
  };
  for (auto& b : w) b = static_cast<uint8_t>(rnd());
  const size_t bb = block_bytes(dt);
  std::vector<size_t> f16_fields;
  switch (dt) {
    case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K: f16_fields = {0, 2}; break;
    case DType::Q2_K: f16_fields = {80, 82}; break;
    case DType::Q3_K: f16_fields = {108}; break;
    case DType::Q6_K: f16_fields = {208}; break;
    case DType::F16: case DType::BF16: case DType::F32: break;
    default: f16_fields = {0}; break;
  }
  if (dt == DType::F16 || dt == DType::BF16) {
    for (size_t i = 0; i + 1 < wb; i += 2) {
      const uint16_t h = dt == DType::F16 ? f32_to_fp16(static_cast<float>(rnd() % 1000) / 1000.f)
                                          : f32_to_bf16(static_cast<float>(rnd() % 1000) / 1000.f);
      std::memcpy(&w[i], &h, 2);
    }
  } else if (dt == DType::F32) {
    for (size_t i = 0; i + 3 < wb; i += 4) {
      const float f = static_cast<float>(rnd() % 1000) / 1000.f;
      std::memcpy(&w[i], &f, 4);
    }
  } else {
    const uint16_t h = f32_to_fp16(0.01f);
    for (size_t b = 0; b + bb <= wb; b += bb)
      for (size_t off : f16_fields) std::memcpy(&w[b + off], &h, 2);
  }
  std::vector<float> x(static_cast<size_t>(T * K)), y(static_cast<size_t>(T * N));
  for (auto& v : x) v = static_cast<float>(static_cast<int>(rnd() % 2001) - 1000) / 1000.f;
  Tensor tw, tx, ty;
  tw.dtype = dt;
  tw.shape = Shape{N, K};
  tw.data = w.data();
  tx.shape = Shape{T, K};
  tx.data = x.data();
  ty.shape = Shape{T, N};
  ty.data = y.data();
  CpuBackend backend(level == "auto" ? cpu_backend().level() : parse_cpu_level(level));
  ThreadPool pool(threads);
  ExecContext ctx(&pool, precise);
  WeightCache cache;
  if (cache_weights) ctx.set_weight_cache(&cache);
  Op op{};
  op.kind = OpKind::Matmul;
  Tensor in[2] = {tx, tw};
  py::gil_scoped_release nogil;
  backend.execute(op, in, 2, &ty, 1, ctx);  // warm-up
  double best = 1e30;
  for (int it = 0; it < iters; ++it) {
    auto t0 = std::chrono::steady_clock::now();
    backend.execute(op, in, 2, &ty, 1, ctx);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

void bind_ops(py::module_& m) {
  m.def("run_op", &run_op, py::arg("op"), py::arg("inputs"), py::arg("attrs") = py::dict(),
        py::arg("outputs") = py::none(), py::arg("level") = "auto", py::arg("backend") = "cpu",
        "Runs one op through a dispatcher: backend='cpu' (at `level`), or 'wgpu+rs' / 'nox' through [backend, cpu] "
        "(an op the backend does not support falls back to the cpu; last_run_op_backend says so). Inputs: numpy arrays (f32, f16, i32) or "
        "(raw uint8 bytes, encoding, shape) for quantized / bf16 tensors. Outputs: a list of "
        "shapes (f32), arrays / (bytes, encoding, shape) giving initial contents (KV caches), "
        "or None to infer. Returns the outputs as numpy arrays.");
  m.def("op_names", [] {
    py::dict d;
    for (const OpSchema* s : op_schemas()) d[py::str(s->name)] = static_cast<int>(s->kind);
    return d;
  }, "Every op of the schema: {name: stable numeric tag}.");
  m.def("op_schema", [](const std::string& name) {
    OpKind k;
    if (!parse_op_name(name.c_str(), &k)) throw_unsupported_op(name, "dispatch", "-");
    const OpSchema& s = op_schema(k);
    py::dict d;
    d["name"] = s.name;
    d["tag"] = static_cast<int>(s.kind);
    d["min_inputs"] = s.min_in;
    d["max_inputs"] = s.max_in;
    d["outputs"] = s.n_out;
    d["positions"] = s.positions;
    py::list ins;
    for (const InputSpec& i : s.inputs) ins.append(i.name);
    d["inputs"] = ins;
    py::dict at;
    for (const AttrSpec& a : s.attrs) {
      py::dict e;
      e["type"] = attr_type_word(a.type);
      e["required"] = a.required;
      if (a.choices) e["choices"] = a.choices;
      at[py::str(a.key)] = e;
    }
    d["attrs"] = at;
    d["graph_only"] = s.rule == ShapeRule::View;
    return d;
  }, py::arg("name"), "The schema row of one op (arity, run-time inputs, attributes).");
  m.def("last_run_op_backend", [] { return g_last_backend; },
        "Which backend ran the last run_op ('wgpu+rs', 'cpu (fallback)', 'cpu').");
  m.def("wgpu_compiled", &wgpu_compiled, "True when the wgpu+rs backend is compiled in.");
  m.def("wgpu_info", [](bool allow_software) {
    WgpuInfo i = wgpu_info(allow_software);
    py::dict d;
    d["adapter"] = i.adapter;
    d["vendor"] = i.vendor;
    d["architecture"] = i.architecture;
    d["description"] = i.description;
    d["backend_type"] = i.backend_type;
    d["adapter_type"] = i.adapter_type;
    d["software"] = i.software;
    d["shader_f16"] = i.shader_f16;
    d["subgroups"] = i.subgroups;
    d["subgroup_min"] = i.subgroup_min;
    d["subgroup_max"] = i.subgroup_max;
    d["max_storage_binding"] = i.max_storage_binding;
    d["max_buffer"] = i.max_buffer;
    d["max_workgroup_storage"] = i.max_workgroup_storage;
    d["library"] = i.library;
    d["impl"] = i.impl;
    d["subgroup_matrix"] = i.subgroup_matrix;
    d["subgroup_matrix_configs"] = i.subgroup_matrix_configs;
    return d;
  }, py::arg("allow_software") = true,
     "Initializes the wgpu+rs device and describes the adapter (BackendInit when there is none).");
  m.def("wgpu_use_dawn", [](uint64_t address) { wgpu_use_dawn(static_cast<uintptr_t>(address)); },
        py::arg("get_proc_address"),
        "Hands Dawn's WebGPU procedures over (the address of its wgpuGetProcAddress): the process's device then "
        "runs on Dawn (webgpu:dawn). cyb_llm.webgpu_dawn.attach() calls it; BackendInit once the process runs "
        "on wgpu-native.");
  m.def("wgpu_dawn_handed", &wgpu_dawn_handed, "True once Dawn's procedures were handed over (wgpu_use_dawn).");
  m.def("wgpu_process_impl", &wgpu_process_impl,
        "The WebGPU implementation the process's device runs on: 'wgpu-native', 'dawn', '' before the first probe.");
  m.def("wgpu_proc_names", [](const std::string& impl) { return wgpu_proc_names(parse_wgpu_impl(impl)); },
        py::arg("impl"), "The WebGPU procedures the backend takes from 'wgpu-native' or 'dawn', in table order.");
  m.def("wgpu_fill_check", [](const std::string& impl, const std::vector<std::string>& absent) {
          return wgpu_fill_check(parse_wgpu_impl(impl), absent);
        }, py::arg("impl"), py::arg("absent"),
        "Tests: fills a scratch procedure table for 'wgpu-native' or 'dawn' from a resolver that lacks the names "
        "in `absent`; returns the procedures the fill reports missing.");
  m.def("wgpu_abi", [] {
          py::dict d;
          for (const auto& kv : wgpu_abi()) d[py::str(kv.first)] = kv.second;
          return d;
        }, "The struct sizes, field offsets and enum values the wgpu backend passes across its procedure table "
           "({'sizeof S' | 'offsetof S.F' | constant: value}; empty without the backend).");
  m.def("wgpu_take_host_times", &wgpu_take_host_times,
        "Host time of wgpu+rs forwards since the last call, then cleared: {forwards, record_ms, "
        "submit_ms, wait_ms, submits} (recording the ops, submitting, waiting for read-backs; command "
        "buffers submitted).");
  m.def("wgpu_report", &wgpu_report, "wgpu-native's own live-object report (wgpuGenerateReport).");
  m.def("wgpu_memory", &wgpu_memory, py::arg("reset_peak") = false,
        "Device buffer bytes held now and at most since the last reset: {'live_bytes', 'peak_bytes'} "
        "(empty without the backend); reset_peak sets the peak to the live bytes after reading.");
  m.def("wgpu_set_gpu_profiling", &wgpu_set_gpu_profiling, py::arg("on"),
        "GPU time per shader from timestamp queries around each dispatch (slows every submit); "
        "returns False when the adapter has no timestamp queries.");
  m.def("wgpu_take_gpu_profile", [] {
    uint64_t untimed = 0;
    py::list rows;
    for (const WgpuShaderTime& t : wgpu_take_gpu_profile(&untimed)) {
      py::dict d;
      d["shader"] = t.shader;
      d["dispatches"] = t.dispatches;
      d["gpu_ms"] = t.gpu_ms;
      rows.append(d);
    }
    py::dict r;
    r["rows"] = rows;
    r["untimed"] = untimed;
    return r;
  }, "The GPU profile since the last call ({rows: [{shader, dispatches, gpu_ms}], untimed}), then cleared.");
  m.def("cpu_levels", [] {
    std::vector<std::string> v;
    for (CpuLevel l : cpu_levels_available()) v.push_back(cpu_level_name(l));
    return v;
  }, "CPU kernel levels available on this machine, scalar (the reference) first.");
  m.def("cpu_levels_compiled", [] {
    std::vector<std::string> v;
    for (CpuLevel l : cpu_levels_compiled()) v.push_back(cpu_level_name(l));
    return v;
  }, "CPU kernel levels compiled into this build, whether or not this CPU can run them.");
  m.def("set_cpu_level", [](const std::string& name) { set_cpu_level(name); }, py::arg("name"),
        "Selects the CPU kernel level of the process-wide CPU backend (scalar|avx2|avx512|neon|auto).");
  m.def("cpu_level", [] { return std::string(cpu_level_name(cpu_backend().level())); },
        "The current CPU kernel level.");
  m.def("physical_cores", &ThreadPool::physical_cores);
  m.def("bench_matmul", &bench_matmul, py::arg("encoding"), py::arg("n"), py::arg("k"), py::arg("t") = 1,
        py::arg("iters") = 10, py::arg("level") = "auto", py::arg("threads") = 0, py::arg("precise") = false,
        py::arg("cache_weights") = false,
        "Best seconds per call of a matmul with random valid weights (benchmarks); cache_weights: "
        "with a weight cache, as the encoder family runs (kernels keep repacked weights there).");
  m.def("quantizes_activations", [](const std::string& level, const std::string& enc) {
    return cpu_level_quantizes_activations(parse_cpu_level(level), parse_dtype(enc));
  }, py::arg("level"), py::arg("encoding"),
     "True when a fast-mode (precise=False) matmul at this level quantizes its activations to "
     "16 bits for weights of this encoding.");
  m.def("activation_block", [](const std::string& level, const std::string& enc) {
    return cpu_level_activation_block(parse_cpu_level(level), parse_dtype(enc));
  }, py::arg("level"), py::arg("encoding"),
     "Values per int16 activation scale of a fast-mode matmul at this level for weights of this "
     "encoding (32 or 256), 0 when the activations stay f32.");
  m.def("bf16_split_matmul", [](const std::string& level, const std::string& enc, int64_t tokens) {
    return cpu_level_bf16_split(parse_cpu_level(level), parse_dtype(enc), tokens);
  }, py::arg("level"), py::arg("encoding"), py::arg("tokens"),
     "True when a fast-mode matmul of this many tokens at this level on weights of this encoding "
     "splits each f32 value into two bfloat16 numbers (hi + lo) and sums xh.wh + xl.wh + xh.wl "
     "on AMX-BF16 tiles.");
  m.def("rope_table", [](int rot_dims, int64_t max_pos, double theta, const py::dict& scaling) {
    const RopeScaling sc = parse_scaling(scaling);
    std::vector<float> c, s;
    build_rope_table(rot_dims, max_pos, theta, sc, c, s);
    const py::ssize_t half = rot_dims / 2;
    py::array_t<float> ca({static_cast<py::ssize_t>(max_pos), half}), sa({static_cast<py::ssize_t>(max_pos), half});
    std::memcpy(ca.mutable_data(), c.data(), c.size() * 4);
    std::memcpy(sa.mutable_data(), s.data(), s.size() * 4);
    return py::make_tuple(ca, sa);
  }, py::arg("rot_dims"), py::arg("max_pos"), py::arg("theta"), py::arg("scaling") = py::dict(),
     "(cos, sin) tables [max_pos, rot_dims/2] as the runtime computes them.");
}
