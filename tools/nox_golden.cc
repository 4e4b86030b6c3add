// The nox golden run without Python: parses the graph section of the golden
// .model (tests/nox_golden.py write), runs it on the nox backend through the
// graph executor, prints the digests and logits in the format of
// tests/data/nox_golden.txt. Built by tools/nox_golden.sh with several
// compilers and optimization levels; every build must print the same bytes.
#include <cstdio>
#include <cstring>
#include <vector>

#include "backends/nox/nox_backend.h"
#include "core/errors.h"
#include "format/model_file.h"
#include "graph/executor.h"
#include "model/nox_tracer.h"

using namespace cyb;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: nox_golden GOLDEN.model\n");
    return 2;
  }
  try {
    auto f = ModelFile::open(argv[1]);
    graph::Graph g = graph::parse_graph_text(f->section_text("graph"), [&](const std::string& n, graph::WeightInfo* w) {
      const TensorEntry* e = f->find(n);
      if (!e) return false;
      w->dtype = e->dtype;
      w->shape = e->shape;
      return true;
    });
    std::vector<std::vector<float>> owned;
    owned.reserve(g.values.size());
    auto weight = [&](const graph::Value& v) {
      Tensor t = f->tensor(*f->find(v.tensor));
      if (v.nrows > 0) t = t.rows(v.row0, v.nrows);
      if (t.shape.ndim == 1) {  // as the runtime does: an f32 copy of 1-D weights
        owned.emplace_back(static_cast<size_t>(t.shape.d[0]));
        std::memcpy(owned.back().data(), t.data, owned.back().size() * 4);
        t.data = owned.back().data();
      }
      return t;
    };
    auto rope = [](const graph::RopeSpec& r, std::vector<float>& c, std::vector<float>& s) {
      nox_build_rope_table(r.rot_dims, r.max_pos, r.theta, r.scaling, c, s);
    };
    graph::FusionReport rep;
    rep.enabled = false;
    graph::Executor ex(std::move(g), rep, weight, rope);
    NoxBackend& nox = nox_backend();
    ThreadPool pool(1);
    ExecContext ctx(&pool, true);
    Dispatcher d({&nox});
    auto st = ex.new_state(nox, 16, DType::F32);
    NoxWeightDigests wd;
    NoxTracer tr(&wd);
    const int32_t prefill[5] = {3, 17, 5, 41, 8}, step[1] = {22};
    const int64_t V = ex.vocab();
    std::vector<float> a(static_cast<size_t>(5 * V)), b(static_cast<size_t>(V));
    ex.forward(*st, ctx, d, prefill, 5, 0, 16, true, a.data(), &tr);
    const std::string d1 = tr.hex();
    ex.forward(*st, ctx, d, step, 1, 5, 16, false, b.data(), &tr);
    const std::string d2 = tr.hex();
    Sha256 h;
    h.update(a.data(), a.size() * 4);
    h.update(b.data(), b.size() * 4);
    uint32_t bits[3];
    std::memcpy(&bits[0], &b[0], 4);
    std::memcpy(&bits[1], &b[1], 4);
    std::memcpy(&bits[2], &b[static_cast<size_t>(V - 1)], 4);
    std::printf("prefill_digest %s\nstep_digest %s\nlogits_sha256 %s\nlogit_bits %08x %08x %08x\n", d1.c_str(),
                d2.c_str(), Sha256::hex(h.finish()).c_str(), bits[0], bits[1], bits[2]);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
