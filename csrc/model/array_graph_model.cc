#include "model/array_graph_model.h"

#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>

#include "core/array_elems.h"
#include "core/errors.h"
#include "dispatch/op_schema.h"
#include "graph/array_graph.h"
#include "model/model_base.h"

namespace cyb {

bool is_array_graph_model_type(const std::string& model_type) { return model_type == kOnnxGraphModelType; }

namespace {

// A value of a run: a typed, shaped host buffer (owned, or a view of the file / an input / another value).
struct Val {
  DType dtype = DType::F32;
  Shape shape;
  const void* data = nullptr;
  std::shared_ptr<std::vector<uint8_t>> own;
};

Shape to_shape(const std::vector<int64_t>& v, const std::string& what) {
  if (v.size() > static_cast<size_t>(Shape::kMaxDims)) throw_shape_mismatch(what + " (at most 8 dims)", {-1}, v);
  Shape s;
  for (int64_t d : v) s.d[s.ndim++] = d;
  return s;
}

std::string dims_text(const std::vector<graph2::Dim>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i)
    s += (i ? ", " : "") + (dims[i].known() ? std::to_string(dims[i].size) : dims[i].sym);
  return s + "]";
}

class ArrayGraphModel : public Model {
 public:
  const std::string& family() const override { return family_; }
  int64_t vocab_size() const override { return 0; }
  int64_t max_position() const override { return 1; }
  std::string execution_path() const override { return "graph"; }
  std::string graph_origin() const override { return "section (version 2)"; }

  void init(std::shared_ptr<ModelFile> file, const LoadOptions& opts) {
    file_ = std::move(file);
    opts_ = opts;
    if (opts_.backend.empty()) opts_.backend = "cpu";  // the host path unless a device backend is asked for by name
    const bool device = opts_.backend == "wgpu+rs" || opts_.backend == "wgpu" || opts_.backend == "webgpu:dawn";
    if (opts_.backend != "cpu" && opts_.backend != "nox" && !device)
      throw_backend_init(opts_.backend, "version-2 graphs (named arrays) run on cpu, nox and wgpu+rs (webgpu:dawn); "
                                        "not on this backend (load with backend='cpu')");
    if (opts_.exec_path == "curated")
      throw_invalid_config("exec_path", "a version-2 graph model has only the graph path");
    family_ = file_->config().find("model_type")->as_string();
    const bool nox = opts_.backend == "nox";
    init_model_runtime(opts_, nox ? 1 : opts_.threads, &pool_, &dispatcher_);
    ctx_ = std::make_unique<ExecContext>(pool_.get(), true);
    if (!file_->has_section("graph"))
      throw_invalid_config("model_type", "'" + family_ + "' models run their graph section, and the file has none");
    const toml::Value doc = file_->section_toml("graph");
    g_ = graph2::parse(doc, [this](const std::string& n) { return file_->find(n) != nullptr; });
    for (const graph2::Initializer& in : g_.initializers) {
      const Tensor t = file_->tensor(*file_->find(in.tensor));
      Val v;
      v.dtype = t.dtype;
      v.shape = t.shape;
      v.data = t.data;
      fixed_[in.name] = v;
    }
    for (const graph2::Constant& c : g_.constants) {
      Val v;
      v.dtype = c.dtype;
      v.shape = to_shape(c.shape, "constant '" + c.name + "'");
      const int64_t n = v.shape.numel();
      v.own = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(n) * elem_bytes(c.dtype) + 8);
      Tensor t;
      t.dtype = c.dtype;
      t.data = v.own->data();
      for (int64_t i = 0; i < n; ++i) {
        if (is_int_dtype(c.dtype)) put_i(t, i, c.ivalues[static_cast<size_t>(i)]);
        else put_f(t, i, c.values[static_cast<size_t>(i)]);
      }
      v.data = v.own->data();
      fixed_[c.name] = v;
    }
    for (graph2::Node& n : g_.nodes) n.op.label = n.name.c_str();
    // The last reader of each value (values no later node reads are dropped right after their node).
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      for (const std::string& in : g_.nodes[i].inputs) last_use_[in] = i;
    for (const graph2::IoSpec& o : g_.outputs) last_use_[o.name] = g_.nodes.size();
    if (nox) {
      // nox never falls back: a node it has no kernel for makes the load fail, naming the node.
      Backend* b = dispatcher_->chain().front();
      for (const graph2::Node& n : g_.nodes) {
        if (op_schema(n.kind).rule == ShapeRule::View) continue;
        std::vector<Tensor> dummy(n.inputs.size());
        if (!b->supports(n.op, dummy.data(), static_cast<int>(dummy.size())))
          throw_backend_init("nox", "node '" + n.name + "' (op " + op_name(n.kind) +
                                        ") has no nox kernel; this graph runs on cpu (backend='cpu')");
      }
    }
  }

 protected:
  void forward_chunk(Conversation&, const int32_t*, int64_t, bool, float*) override { no_tokens(); }
  std::unique_ptr<Conversation> make_conversation(int64_t) override { no_tokens(); }

  NamedArrays run_arrays(const NamedArrays& inputs) override {
    std::lock_guard<std::mutex> lk(mu_);
    // A device backend (wgpu+rs) runs each node it has a kernel for on host values: its
    // inputs uploaded, its outputs read back (values stay in host memory between nodes; the
    // nodes it declines run on the cpu, recorded as fallbacks). One forward a run (Model::run
    // holds the device lock).
    Backend* front = dispatcher_->chain().front();
    front->begin_forward(*ctx_);
    struct EndForward {  // on an error path only (the normal end calls end_forward itself)
      Backend* b;
      ExecContext& ctx;
      bool done = false;
      ~EndForward() {
        if (done) return;
        try {
          b->end_forward(ctx);
        } catch (...) {  // the error in flight is the one to report
        }
      }
    } ender{front, *ctx_};
    std::unordered_map<std::string, Val> vals;
    std::map<std::string, int64_t> syms;
    for (const auto& [name, h] : inputs) {
      bool known = false;
      for (const graph2::IoSpec& s : g_.inputs) known = known || s.name == name;
      if (!known) throw_invalid_config("inputs['" + name + "']", "the graph has no input '" + name + "' (its inputs: " +
                                                                     input_names() + ")");
    }
    for (const graph2::IoSpec& s : g_.inputs) {
      const HostArray* h = nullptr;
      for (const auto& [name, a] : inputs) h = name == s.name ? &a : h;
      if (!h) throw_invalid_config("inputs['" + s.name + "']", "missing (the graph's inputs: " + input_names() + ")");
      const std::string f = "inputs['" + s.name + "']";
      if (h->dtype != s.dtype)
        throw_invalid_config(f, std::string("dtype ") + dtype_name(h->dtype) + ", the graph declares " +
                                    dtype_name(s.dtype));
      std::vector<int64_t> want;
      bool ok = h->shape.size() == s.shape.size();
      for (size_t i = 0; i < s.shape.size(); ++i) {
        const graph2::Dim& d = s.shape[i];
        int64_t w = d.size;
        if (!d.known()) {
          auto it = syms.find(d.sym);
          w = it == syms.end() ? -1 : it->second;
          if (ok && w < 0) syms[d.sym] = w = h->shape[i];
        }
        want.push_back(w);
        ok = ok && h->shape[i] == w;
      }
      if (!ok) throw_shape_mismatch("input '" + s.name + "' " + dims_text(s.shape), want, h->shape);
      Val v;
      v.dtype = h->dtype;
      v.shape = to_shape(h->shape, "input '" + s.name + "'");
      v.data = h->data.data();
      vals[s.name] = v;
    }
    auto get = [&](const std::string& name) -> const Val& {
      auto it = vals.find(name);
      if (it != vals.end()) return it->second;
      return fixed_.at(name);
    };
    for (size_t ni = 0; ni < g_.nodes.size(); ++ni) {
      const graph2::Node& n = g_.nodes[ni];
      std::vector<Tensor> in;
      for (const std::string& name : n.inputs) {
        const Val& v = get(name);
        Tensor t;
        t.dtype = v.dtype;
        t.shape = v.shape;
        t.data = const_cast<void*>(v.data);
        t.name = name.c_str();
        in.push_back(t);
      }
      if (n.kind == OpKind::Reshape) {
        Val v = get(n.inputs[0]);
        v.shape = reshaped(n, v.shape);
        vals[n.outputs[0]] = v;
      } else if (op_schema(n.kind).rule == ShapeRule::View) {
        Val v = get(n.inputs[0]);
        v.shape = view_shape(n.op, v.shape, in.size() > 1 ? &in[1] : nullptr);
        vals[n.outputs[0]] = v;
      } else {
        std::vector<Shape> shapes = output_shapes(n, in);
        std::vector<Tensor> out(shapes.size());
        std::vector<Val> outv(shapes.size());
        for (size_t i = 0; i < shapes.size(); ++i) {
          const DType dt = output_dtype(n.op, in.data(), static_cast<int>(in.size()), static_cast<int>(i));
          outv[i].dtype = dt;
          outv[i].shape = shapes[i];
          outv[i].own = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(shapes[i].numel()) * elem_bytes(dt) + 64);
          outv[i].data = outv[i].own->data();
          out[i].dtype = dt;
          out[i].shape = shapes[i];
          out[i].data = outv[i].own->data();
        }
        dispatcher_->run(n.op, in.data(), static_cast<int>(in.size()), out.data(), static_cast<int>(out.size()), *ctx_);
        for (size_t i = 0; i < shapes.size(); ++i) vals[n.outputs[i]] = outv[i];
      }
      for (const std::string& name : n.inputs) {
        auto it = last_use_.find(name);
        if (it != last_use_.end() && it->second == ni) vals.erase(name);
      }
    }
    ender.done = true;
    front->end_forward(*ctx_);
    NamedArrays out;
    for (const graph2::IoSpec& s : g_.outputs) {
      const Val& v = get(s.name);
      if (v.dtype != s.dtype)
        throw_format("graph", "outputs." + s.name + ".dtype", std::string("declared ") + dtype_name(s.dtype) +
                                                              ", the graph computes " + dtype_name(v.dtype));
      HostArray h;
      h.dtype = v.dtype;
      h.shape = v.shape.vec();
      if (h.shape.size() != s.shape.size())
        throw_shape_mismatch("output '" + s.name + "' " + dims_text(s.shape), std::vector<int64_t>(s.shape.size(), -1),
                             h.shape);
      const size_t nb = row_bytes(v.dtype, v.shape.numel());
      h.data.resize(nb);
      if (nb) std::memcpy(h.data.data(), v.data, nb);
      out.emplace_back(s.name, std::move(h));
    }
    return out;
  }

 private:
  [[noreturn]] void no_tokens() const {
    throw_invalid_config("architecture.model_type", "'" + family_ + "' is a named-array graph: it has no token "
                                                    "stream and no conversations (use run({name: array}))");
  }
  std::string input_names() const {
    std::string s;
    for (const graph2::IoSpec& i : g_.inputs) s += (s.empty() ? "" : ", ") + i.name;
    return s;
  }
  Shape reshaped(const graph2::Node& n, const Shape& x) const {
    std::vector<int64_t> d = n.reshape;
    int64_t known = 1;
    int minus = -1;
    for (size_t i = 0; i < d.size(); ++i) {
      if (d[i] == 0) {
        if (static_cast<int>(i) >= x.ndim)
          throw_shape_mismatch(n.name + " (reshape: 0 past the input's dims)", d, x.vec());
        d[i] = x.d[i];
      }
      if (d[i] == -1) minus = static_cast<int>(i);
      else known *= d[i];
    }
    if (minus >= 0) {
      if (known == 0 || x.numel() % known != 0) throw_shape_mismatch(n.name + " (reshape)", d, x.vec());
      d[static_cast<size_t>(minus)] = x.numel() / known;
    }
    if (to_shape(d, n.name).numel() != x.numel()) throw_shape_mismatch(n.name + " (reshape)", d, x.vec());
    return to_shape(d, n.name);
  }
  std::vector<Shape> output_shapes(const graph2::Node& n, const std::vector<Tensor>& in) const {
    if (n.kind == OpKind::Conv1d) {
      // [B?, C, L] (channels_first) or [B?, L, C] -> [B?, L_out, C_out]; the dispatcher checks the rest
      const Shape& xs = in[0].shape;
      if ((xs.ndim != 2 && xs.ndim != 3) || in.size() < 2 || in[1].shape.ndim != 3)
        throw_shape_mismatch(n.name + " (conv1d x [B, C, L], weight [O, C, k])", {-1, -1, -1}, xs.vec());
      const int64_t L = n.op.a.channels_first ? xs.d[xs.ndim - 1] : xs.d[xs.ndim - 2];
      const int64_t k = in[1].shape.d[2], span = L + 2 * static_cast<int64_t>(n.op.a.padding) - k;
      const int64_t L_out = span < 0 || n.op.a.stride < 1 ? 0 : span / n.op.a.stride + 1;
      if (xs.ndim == 3) return {Shape{xs.d[0], L_out, in[1].shape.d[0]}};
      return {Shape{L_out, in[1].shape.d[0]}};
    }
    return infer_output_shapes(n.op, in.data(), static_cast<int>(in.size()));
  }

  std::string family_;
  graph2::Graph g_;
  std::unordered_map<std::string, Val> fixed_;
  std::unordered_map<std::string, size_t> last_use_;
  std::unique_ptr<ExecContext> ctx_;
  std::mutex mu_;
};

}  // namespace

std::shared_ptr<Model> load_array_graph_model(std::shared_ptr<ModelFile> file, const LoadOptions& opts) {
  auto m = std::make_shared<ArrayGraphModel>();
  m->init(std::move(file), opts);
  return m;
}

}  // namespace cyb
