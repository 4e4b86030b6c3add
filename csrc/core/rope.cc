#include "core/rope.h"

#include <algorithm>

namespace cyb {

void rope_inv_freq(int rot_dims, double theta, const RopeScaling& sc, std::vector<float>& inv_freq,
                   float* attention_factor) {
  rope_inv_freq_with<StdRopeMath>(rot_dims, theta, sc, inv_freq, attention_factor);
}

void build_rope_table(int rot_dims, int64_t max_pos, double theta, const RopeScaling& sc,
                      std::vector<float>& cos, std::vector<float>& sin) {
  build_rope_table_with<StdRopeMath>(rot_dims, max_pos, theta, sc, cos, sin);
}

void RopeCache::init(std::vector<Spec> specs, int64_t max_pos, Builder build) {
  specs_ = std::move(specs);
  max_pos_ = max_pos;
  build_ = std::move(build);
  cur_.reset(new std::atomic<const RopeTable*>[specs_.size()]);
  for (size_t i = 0; i < specs_.size(); ++i) cur_[i].store(nullptr);
}

int64_t RopeCache::grown_size(int64_t positions) const {
  return std::min(max_pos_, std::max(positions, 2 * built_.load()));
}

void RopeCache::ensure(int64_t positions) {
  std::lock_guard<std::mutex> lk(mu_);
  if (positions <= built_.load()) return;
  const int64_t n = grown_size(positions);
  for (size_t i = 0; i < specs_.size(); ++i) {
    const Spec& r = specs_[i];
    auto g = std::make_unique<Gen>();
    if (build_) build_(i, n, g->cos, g->sin);
    else build_rope_table(r.rot_dims, n, r.theta, r.scaling, g->cos, g->sin);
    g->table = RopeTable{g->cos.data(), g->sin.data(), r.rot_dims, n, r.neox};
    cur_[i].store(&g->table, std::memory_order_release);
    gens_.push_back(std::move(g));
  }
  built_.store(n);
}

int64_t RopeCache::growth_bytes(int64_t positions) const {
  if (positions <= built_.load()) return 0;
  const int64_t n = grown_size(positions);
  int64_t bytes = 0;
  for (const Spec& r : specs_) bytes += 2 * n * (r.rot_dims / 2) * static_cast<int64_t>(sizeof(float));
  return bytes;
}

}  // namespace cyb
