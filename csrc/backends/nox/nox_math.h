// Deterministic elementary functions of the nox backend (no libm): each is a
// fixed sequence of IEEE-754 double additions, multiplications and divisions
// (compiled with -ffp-contract=off, so no FMA contraction), hence the same
// bits on every compiler, optimization level and machine with IEEE doubles.
// Accuracy: a few ulp of double over the ranges the runtime uses, far below the
// f32 rounding applied to every nox output. sin / cos reduce |x| < 1.6e6 only:
// a larger or infinite argument is InvalidConfig (never a silently wrong value).
#pragma once

namespace cyb {
namespace nox {

double exp(double x);
double expm1(double x);
double log(double x);
double log1p(double x);
double pow(double base, double e);  // base > 0
double pow_any(double base, double e);  // every base and exponent, the special cases of C's pow
double sin(double x);
double cos(double x);
double tanh(double x);
double erf(double x);
double sqrt(double x);  // IEEE-754 correctly rounded (a basic operation, same bits everywhere)

}  // namespace nox

// nox's math policy of the shared reference kernels (core/math_policy.h, dispatch/ref/).
struct NoxMath {
  static double exp(double x) { return nox::exp(x); }
  static double log(double x) { return nox::log(x); }
  static double log1p(double x) { return nox::log1p(x); }
  static double erf(double x) { return nox::erf(x); }
  static double sin(double x) { return nox::sin(x); }
  static double cos(double x) { return nox::cos(x); }
  static double tanh(double x) { return nox::tanh(x); }
  static double pow(double b, double e) { return nox::pow_any(b, e); }
  static double sqrt(double x) { return nox::sqrt(x); }
};

}  // namespace cyb
