// The nox golden run of a version-2 graph without Python: parses the graph section of a .model
// (an ONNX import, e.g. the Silero VAD), feeds every declared input the fixed values below (each
// symbolic dim = 3), runs the graph on the nox backend (model/array_graph_run.h) and prints the
// digest chain of version 2 and the SHA-256 of each output's bytes. Built by tools/nox_golden.sh
// with several compilers and optimization levels; every build must print the same bytes
// (tests/data/nox_golden_silero.txt; tests/test_nox_graph2.py feeds the Python module the same
// inputs and compares).
//
// Input k, element i (row-major), f32: h = ((i * 2654435761 + k * 40503 + 17) mod 2^32) >> 8,
// value = ((h mod 4096) - 2048) / 8192 (exact in f32); i64 inputs: (h mod 7) - 3; bool: h & 1.
#include <cstdio>
#include <cstring>
#include <vector>

#include "backends/nox/nox_backend.h"
#include "core/errors.h"
#include "core/exec_context.h"
#include "core/thread_pool.h"
#include "dispatch/dispatcher.h"
#include "dispatch/op_schema.h"
#include "format/model_file.h"
#include "graph/array_graph.h"
#include "model/array_graph_run.h"

using namespace cyb;

namespace {

uint32_t input_hash(uint64_t k, uint64_t i) {
  return static_cast<uint32_t>((i * 2654435761ull + k * 40503ull + 17ull) & 0xFFFFFFFFull) >> 8;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: nox_golden2 GRAPH_V2.model\n");
    return 2;
  }
  try {
    auto f = ModelFile::open(argv[1]);
    graph2::Graph g = graph2::parse(f->section_toml("graph"), [&](const std::string& n) { return f->find(n) != nullptr; });
    NamedArrays inputs;
    for (size_t k = 0; k < g.inputs.size(); ++k) {
      const graph2::IoSpec& s = g.inputs[k];
      HostArray a;
      a.dtype = s.dtype;
      int64_t n = 1;
      for (const graph2::Dim& d : s.shape) {
        a.shape.push_back(d.known() ? d.size : 3);
        n *= a.shape.back();
      }
      a.data.resize(static_cast<size_t>(n) * elem_bytes(s.dtype));
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t h = input_hash(k, static_cast<uint64_t>(i));
        if (s.dtype == DType::F32) {
          const float v = static_cast<float>(static_cast<int32_t>(h % 4096u) - 2048) / 8192.0f;
          std::memcpy(a.data.data() + i * 4, &v, 4);
        } else if (s.dtype == DType::I64) {
          const int64_t v = static_cast<int64_t>(h % 7u) - 3;
          std::memcpy(a.data.data() + i * 8, &v, 8);
        } else if (s.dtype == DType::BOOL) {
          a.data[static_cast<size_t>(i)] = static_cast<uint8_t>(h & 1u);
        } else {
          std::fprintf(stderr, "error: input '%s' has dtype %s (this tool feeds f32, i64, bool)\n", s.name.c_str(),
                       dtype_name(s.dtype));
          return 1;
        }
      }
      inputs.emplace_back(s.name, std::move(a));
    }
    ArrayGraphRun run(std::move(g), *f, true);
    NoxBackend& nox = nox_backend();
    run.fuse(nox);  // as a model loads it (fuse=True): the same graph, the same digest
    ThreadPool pool(1);
    ExecContext ctx(&pool, true);
    Dispatcher d({&nox});
    std::string digest;
    const NamedArrays out = run.run(inputs, RunOptions{}, d, ctx, &digest);
    std::printf("digest %s\n", digest.c_str());
    for (const auto& [name, a] : out) {
      Sha256 h;
      h.update(a.data.data(), a.data.size());
      std::printf("output %s sha256 %s\n", name.c_str(), Sha256::hex(h.finish()).c_str());
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
