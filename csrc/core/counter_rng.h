// The counter-based normal generator of random_normal_like (op.h RandomNormalLike, docs/graph.md):
// element i of a draw with seed s is a pure function of (s, i), so every backend (and numpy:
// tests/test_ops_index.py) reproduces the same numbers in any order or split.
//   mix(z)   = splitmix64's finalizer of z + 0x9E3779B97F4A7C15 (wrapping uint64)
//   key      = mix(uint64(s))
//   a, b     = mix(key ^ 2i), mix(key ^ (2i + 1))
//   u1       = ((a >> 11) + 1) / 2^53   in (0, 1]
//   u2       = (b >> 11) / 2^53         in [0, 1)
//   normal   = sqrt(-2 ln u1) * cos(2 pi u2)   (Box-Muller in double, the cosine half only)
#pragma once
#include <cstdint>

#include "core/math_policy.h"

namespace cyb {

inline uint64_t splitmix64_mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The seed of the k-th random node of a graph when the caller gives one seed for a run
// (RunOptions::seed): mix(seed ^ mix(k)), so nodes draw independent streams.
inline uint64_t seed_for_node(uint64_t seed, int64_t k) {
  return splitmix64_mix(seed ^ splitmix64_mix(static_cast<uint64_t>(k)));
}

// M: the math policy (core/math_policy.h) of ln, cos and sqrt (the cpu backend: StdMath; nox: NoxMath).
template <class M>
double normal_of_with(int64_t seed, int64_t i) {
  const uint64_t key = splitmix64_mix(static_cast<uint64_t>(seed));
  const uint64_t c = static_cast<uint64_t>(i) * 2u;
  const uint64_t a = splitmix64_mix(key ^ c), b = splitmix64_mix(key ^ (c + 1u));
  const double u1 = static_cast<double>((a >> 11) + 1u) * (1.0 / 9007199254740992.0);
  const double u2 = static_cast<double>(b >> 11) * (1.0 / 9007199254740992.0);
  return M::sqrt(-2.0 * M::log(u1)) * M::cos(6.283185307179586 * u2);
}

inline double normal_of(int64_t seed, int64_t i) { return normal_of_with<StdMath>(seed, i); }

}  // namespace cyb
