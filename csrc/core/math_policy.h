// The math policy of the shared reference kernels (dispatch/ref/*.h) and of the counter-based
// normal generator: a kernel template takes its inexact elementary functions from a policy M, so
// that one definition of each kernel serves the cpu backend (StdMath: the C library) and the nox
// backend (NoxMath, backends/nox/nox_math.h: nox's own functions, compiled without FMA
// contraction). Exact operations (floor, ceil, trunc, nearbyint, round, fmod, fabs, the IEEE
// square root) have one correct result everywhere and are not part of the policy.
// Every kernel and helper that does floating-point arithmetic lives inside a class template over
// M, so that nox's instances (compiled with -ffp-contract=off) are distinct symbols; the non-template
// inline helpers the kernels call (core/array_elems.h, dispatch geometry) do no float arithmetic
// beyond conversions (the linker keeps a single copy of an inline function).
#pragma once
#include <cmath>

namespace cyb {

struct StdMath {
  static double exp(double x) { return std::exp(x); }
  static double log(double x) { return std::log(x); }
  static double log1p(double x) { return std::log1p(x); }
  static double erf(double x) { return std::erf(x); }
  static double sin(double x) { return std::sin(x); }
  static double cos(double x) { return std::cos(x); }
  static double tanh(double x) { return std::tanh(x); }
  static double pow(double b, double e) { return std::pow(b, e); }
  static double sqrt(double x) { return std::sqrt(x); }
};

}  // namespace cyb
