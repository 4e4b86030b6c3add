// RoPE math, defined once: the inverse frequencies of every rope scaling
// (default, linear, llama3, yarn with mscale / mscale_all_dim / truncate) and the
// cos/sin tables, computed at load exactly as HF transformers computes them (f32
// arithmetic, same order of operations).
//
// The algorithm is a template over a math policy (pow, log, floor, ceil, cos,
// sin): StdRopeMath (libm) for the cpu / wgpu+rs paths, and the nox backend
// instantiates it with its own deterministic functions (nox_math.h) in a file
// compiled with -ffp-contract=off. Every path therefore computes the same steps.
//
// The tables a model's ops read (RopeTable) live in one RopeCache per model: the
// curated decoder, the graph executor and the ModernBERT encoder all keep theirs there.
#pragma once
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/errors.h"

namespace cyb {

struct RopeScaling {
  std::string type = "default";  // default | linear | llama3 | yarn
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;  // llama3, yarn (0: use max_pos)
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double attention_factor = 0.0;  // 0: derived from factor (and mscale / mscale_all_dim)
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  bool truncate = true;
};

// libm.
struct StdRopeMath {
  static double pow(double b, double e) { return std::pow(b, e); }
  static double log(double x) { return std::log(x); }
  static double floor(double x) { return std::floor(x); }
  static double ceil(double x) { return std::ceil(x); }
  static double cos(double x) { return std::cos(x); }
  static double sin(double x) { return std::sin(x); }
};

// Inverse frequencies (rot_dims / 2 of them) and the factor the tables are multiplied by
// (yarn's attention_factor; 1 otherwise). Throws InvalidConfig for an unknown or
// unsupported scaling type or invalid parameters.
template <class M>
void rope_inv_freq_with(int rot_dims, double theta, const RopeScaling& sc, std::vector<float>& inv_freq,
                        float* attention_factor);

// cos[p * (rot_dims/2) + i] = cos(p * inv_freq[i]) * attention_factor, p < max_pos; sin likewise.
template <class M>
void build_rope_table_with(int rot_dims, int64_t max_pos, double theta, const RopeScaling& sc,
                           std::vector<float>& cos, std::vector<float>& sin);

// The libm instantiations (core/rope.cc).
void rope_inv_freq(int rot_dims, double theta, const RopeScaling& sc, std::vector<float>& inv_freq,
                   float* attention_factor);
void build_rope_table(int rot_dims, int64_t max_pos, double theta, const RopeScaling& sc,
                      std::vector<float>& cos, std::vector<float>& sin);

// Cos/sin tables of one rope: cos[p * (rot_dims/2) + i], sin likewise, p < max_pos (the `rope`
// attribute of the Rope / FusedRopeKv ops, dispatch/op.h).
struct RopeTable {
  const float* cos = nullptr;
  const float* sin = nullptr;
  int rot_dims = 0;   // rotated dims per head (partial rotary: < head_dim)
  int64_t max_pos = 0;
  bool neox = true;   // true: pairs (i, i + rot_dims/2); false: adjacent pairs (2i, 2i+1)
};

// The RoPE tables of a model, one per distinct rope (the curated decoder's plan ropes, the
// graph's rope specs, ModernBERT's global and local theta), shared by every path that needs
// them. Built for the most positions asked so far (ensure), never for all of
// max_position_embeddings up front (2**24 positions took 20 s and 4.4 GB at load) and never past
// max_pos; growth is geometric (a few rebuilds at most). Growing publishes new tables and keeps
// the old ones: a forward running meanwhile still reads valid ones (values at a position never
// change). ensure / growth_bytes / table may be called from any thread.
class RopeCache {
 public:
  struct Spec {
    int rot_dims = 0;
    double theta = 10000.0;
    RopeScaling scaling;
    bool neox = true;
  };
  // Fills the tables of spec `i` for `n` positions (cos and sin as build_rope_table writes them).
  using Builder = std::function<void(size_t i, int64_t n, std::vector<float>& cos, std::vector<float>& sin)>;

  RopeCache() = default;
  RopeCache(const RopeCache&) = delete;
  RopeCache& operator=(const RopeCache&) = delete;
  // The ropes, the most positions and how tables are built (empty: build_rope_table of the spec,
  // libm). Called once, before any other member.
  void init(std::vector<Spec> specs, int64_t max_pos, Builder build = {});
  // Every table covers at least min(positions, max_pos) positions afterwards: grown to
  // min(max_pos, max(positions, 2 * built())) when shorter.
  void ensure(int64_t positions);
  // Bytes ensure(positions) would allocate (0 when the tables suffice).
  int64_t growth_bytes(int64_t positions) const;
  // Positions the current tables cover (0 before the first ensure).
  int64_t built() const { return built_.load(); }
  // The current table of rope i (null before the first ensure).
  const RopeTable* table(size_t i) const { return cur_[i].load(std::memory_order_acquire); }

 private:
  struct Gen {
    std::vector<float> cos, sin;
    RopeTable table;
  };
  int64_t grown_size(int64_t positions) const;
  std::vector<Spec> specs_;
  int64_t max_pos_ = 0;
  Builder build_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Gen>> gens_;
  std::unique_ptr<std::atomic<const RopeTable*>[]> cur_;  // one per spec
  std::atomic<int64_t> built_{0};
};

// ------------------------------------------------------------------ definitions

namespace rope_detail {

constexpr double kPi = 3.14159265358979323846;

// inv_freq[i] = 1 / theta ** (float(2i) / dim), each step rounded to f32 as torch does.
template <class M>
std::vector<float> default_inv_freq(int dim, double theta, std::vector<float>* pos_freqs = nullptr) {
  const int half = dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  if (pos_freqs) pos_freqs->resize(static_cast<size_t>(half));
  const float base = static_cast<float>(theta);
  for (int i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    const float p = static_cast<float>(M::pow(static_cast<double>(base), static_cast<double>(e)));
    inv[static_cast<size_t>(i)] = 1.0f / p;
    if (pos_freqs) (*pos_freqs)[static_cast<size_t>(i)] = p;
  }
  return inv;
}

template <class M>
double yarn_mscale(double scale, double m) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * m * M::log(scale) + 1.0;
}

}  // namespace rope_detail

template <class M>
void rope_inv_freq_with(int rot_dims, double theta, const RopeScaling& sc, std::vector<float>& inv_freq,
                        float* attention_factor) {
  using namespace rope_detail;
  if (rot_dims <= 0 || rot_dims % 2 != 0)
    throw_invalid_config("rope.rot_dims", "must be a positive even number, got " + std::to_string(rot_dims));
  if (!(theta > 0.0)) throw_invalid_config("rope_theta", "must be positive");
  *attention_factor = 1.0f;
  const std::string& t = sc.type;
  if (t == "default" || t.empty() || t == "none") {
    inv_freq = default_inv_freq<M>(rot_dims, theta);
  } else if (t == "linear") {
    if (!(sc.factor > 0.0)) throw_invalid_config("rope_scaling.factor", "must be positive");
    inv_freq = default_inv_freq<M>(rot_dims, theta);
    const float f = static_cast<float>(sc.factor);
    for (float& v : inv_freq) v = v / f;
  } else if (t == "llama3") {
    if (sc.original_max_position_embeddings <= 0)
      throw_invalid_config("rope_scaling.original_max_position_embeddings", "required for llama3 scaling");
    inv_freq = default_inv_freq<M>(rot_dims, theta);
    const float factor = static_cast<float>(sc.factor);
    const float lff = static_cast<float>(sc.low_freq_factor), hff = static_cast<float>(sc.high_freq_factor);
    const double old_ctx = static_cast<double>(sc.original_max_position_embeddings);
    const float low_freq_wavelen = static_cast<float>(old_ctx / sc.low_freq_factor);
    const float high_freq_wavelen = static_cast<float>(old_ctx / sc.high_freq_factor);
    const float two_pi = static_cast<float>(2 * kPi);
    for (float& v : inv_freq) {
      // torch evaluates `scalar / tensor` as reciprocal(tensor) * scalar: two f32 roundings.
      const float wavelen = (1.0f / v) * two_pi;
      const float llama = wavelen > low_freq_wavelen ? v / factor : v;
      const float smooth = ((1.0f / wavelen) * static_cast<float>(old_ctx) - lff) / (hff - lff);
      const float a = (1.0f - smooth) * llama;
      const float b = a / factor;
      const float c = smooth * llama;
      const float smoothed = b + c;
      const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      v = medium ? smoothed : llama;
    }
  } else if (t == "yarn") {
    if (!(sc.factor > 0.0)) throw_invalid_config("rope_scaling.factor", "must be positive");
    const int dim = rot_dims;
    std::vector<float> pos_freqs;
    std::vector<float> extra = default_inv_freq<M>(dim, theta, &pos_freqs);
    double af = sc.attention_factor;
    if (af == 0.0) {
      if (sc.mscale != 0.0 && sc.mscale_all_dim != 0.0)
        af = yarn_mscale<M>(sc.factor, sc.mscale) / yarn_mscale<M>(sc.factor, sc.mscale_all_dim);
      else
        af = yarn_mscale<M>(sc.factor, 1.0);
    }
    const double omax = static_cast<double>(sc.original_max_position_embeddings);
    if (!(omax > 0)) throw_invalid_config("rope_scaling.original_max_position_embeddings", "required for yarn");
    auto corr_dim = [&](double rot) { return (dim * M::log(omax / (rot * 2 * kPi))) / (2 * M::log(theta)); };
    double low = corr_dim(sc.beta_fast), high = corr_dim(sc.beta_slow);
    if (sc.truncate) {
      low = M::floor(low);
      high = M::ceil(high);
    }
    if (low < 0.0) low = 0.0;
    if (high > static_cast<double>(dim - 1)) high = static_cast<double>(dim - 1);
    if (low == high) high += 0.001;
    const float flow = static_cast<float>(low), fhigh = static_cast<float>(high);
    const float ffac = static_cast<float>(sc.factor);
    inv_freq.resize(extra.size());
    for (size_t i = 0; i < extra.size(); ++i) {
      float ramp = (static_cast<float>(i) - flow) / (fhigh - flow);
      ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
      const float ext_factor = 1.0f - ramp;
      const float interp = 1.0f / (ffac * pos_freqs[i]);
      const float a = interp * (1.0f - ext_factor);
      const float b = extra[i] * ext_factor;
      inv_freq[i] = a + b;
    }
    *attention_factor = static_cast<float>(af);
  } else {
    throw_invalid_config("rope_scaling.type",
                         "unsupported rope scaling '" + t + "' (supported: default, linear, llama3, yarn)");
  }
}

template <class M>
void build_rope_table_with(int rot_dims, int64_t max_pos, double theta, const RopeScaling& sc,
                           std::vector<float>& cos, std::vector<float>& sin) {
  std::vector<float> inv;
  float af = 1.0f;
  rope_inv_freq_with<M>(rot_dims, theta, sc, inv, &af);
  if (max_pos <= 0) throw_invalid_config("max_position_embeddings", "must be positive");
  const size_t half = inv.size();
  cos.resize(static_cast<size_t>(max_pos) * half);
  sin.resize(static_cast<size_t>(max_pos) * half);
  for (int64_t p = 0; p < max_pos; ++p) {
    for (size_t i = 0; i < half; ++i) {
      // torch: freqs = float(p) * inv_freq in f32, then cos/sin of that f32 angle.
      const float ang = static_cast<float>(p) * inv[i];
      float c = static_cast<float>(M::cos(static_cast<double>(ang)));
      float s = static_cast<float>(M::sin(static_cast<double>(ang)));
      if (af != 1.0f) {
        c *= af;
        s *= af;
      }
      cos[static_cast<size_t>(p) * half + i] = c;
      sin[static_cast<size_t>(p) * half + i] = s;
    }
  }
}

}  // namespace cyb
