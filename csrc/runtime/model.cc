#include "runtime/model.h"

#include <chrono>

#include "backends/cpu/cpu_backend.h"
#include "backends/nox/nox_backend.h"
#include "backends/wgpu/wgpu_backend.h"
#include "core/errors.h"
#include "families/families.h"
#include "graph/graph_model.h"
#include "runtime/backends.h"

namespace cyb {

std::vector<Backend*> select_backends(const LoadOptions& opts, std::vector<std::unique_ptr<Backend>>* owned) {
  const std::string& b = opts.backend;
  if (b == "cpu") return {&cpu_backend()};
  const bool asked = b == "wgpu+rs" || b == "wgpu";
  // The platform default takes wgpu+rs only on a hardware adapter; asking for it
  // by name also accepts a software adapter (lavapipe in CI).
  if (asked || (b.empty() && wgpu_hardware_available())) {
    owned->push_back(make_wgpu_backend(/*allow_software=*/asked));
    return {owned->back().get(), &cpu_backend()};
  }
  if (b.empty()) return {&cpu_backend()};
  if (b == "honeycrisp") throw_backend_init("honeycrisp", "honeycrisp runs only on macOS with Apple Silicon");
  if (b == "nox") return {&nox_backend()};  // graph-only (Model::load checks), no fallback
  throw_backend_init(b, "unknown backend (known: cpu, wgpu+rs, honeycrisp, nox)");
}

std::shared_ptr<Model> Model::load(const std::string& path, const LoadOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<Model> m = load(ModelFile::open(path), opts);
  m->load_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

std::shared_ptr<Model> Model::load(std::shared_ptr<ModelFile> file, const LoadOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  const toml::Value* mt = file->config().find("model_type");
  if (!mt || !mt->is_string()) throw_invalid_config("model_type", "required key is missing");
  const std::string& type = mt->as_string();
  if (!opts.path.empty() && opts.path != "curated" && opts.path != "graph")
    throw_invalid_config("path", "'" + opts.path + "' is not an execution path (curated, graph)");
  const bool nox = opts.backend == "nox";
  const bool has_graph = file->has_section("graph");
  if (nox && opts.path == "curated")
    throw_backend_init("nox", "nox is graph-only: it cannot run the curated path");
  if (nox && !has_graph)
    throw_backend_init("nox", "nox runs only models with a graph section, and '" + file->path() +
                                  "' has none (re-import it with `cyb-llm import SRC -o OUT --graph`)");
  FamilyFactory factory = find_family(type);
  const bool want_graph = nox || opts.path == "graph" || (!factory && opts.path != "curated");
  if (want_graph) {
    std::shared_ptr<Model> m;
    if (has_graph) {
      m = load_graph_model(file, opts, file->section_text("graph"), "section");
    } else if (factory) {
      const std::string text = emit_graph_for(*file);
      m = load_graph_model(file, opts, text, "emitted");
    } else {
      throw_invalid_config("model_type", "'" + type + "' has no curated family (known: " + curated_model_types() +
                                             ") and the file has no graph section");
    }
    m->load_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return m;
  }
  if (!factory)
    throw_invalid_config("model_type", "'" + type + "' has no curated family (known: " + curated_model_types() +
                                           "); path=curated cannot run it");
  std::shared_ptr<Model> m = factory(std::move(file), opts);
  m->load_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

}  // namespace cyb
