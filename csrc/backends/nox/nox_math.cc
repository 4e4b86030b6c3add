#include "backends/nox/nox_math.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/errors.h"

namespace cyb {
namespace nox {

namespace {

constexpr double kLn2Hi = 6.93147180369123816490e-01;  // high bits of ln 2 (k * kLn2Hi exact)
constexpr double kLn2Lo = 1.90821492927058770002e-10;
constexpr double kInvLn2 = 1.44269504088896338700e+00;
constexpr double kPio2_1 = 1.57079632673412561417e+00;  // pi/2 in three parts (33 + 33 + 53 bits)
constexpr double kPio2_2 = 6.07710050630396597660e-11;
constexpr double kPio2_3 = 2.02226624871116645580e-21;
constexpr double kTwoOverPi = 6.36619772367581382433e-01;

double bits_to_double(uint64_t b) {
  double d;
  std::memcpy(&d, &b, 8);
  return d;
}
uint64_t double_to_bits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}

// Nearest integer (ties away from zero) of |x| < 2^62, as an exact conversion.
int64_t round_int(double x) { return static_cast<int64_t>(x >= 0 ? x + 0.5 : x - 0.5); }

// 2^k for -1074 <= k <= 1023, exactly.
double pow2(int64_t k) {
  if (k > 1023) return bits_to_double(0x7ff0000000000000ull);
  if (k >= -1022) return bits_to_double(static_cast<uint64_t>(k + 1023) << 52);
  if (k < -1074) return 0.0;
  return bits_to_double(uint64_t(1) << (k + 1074));
}

// sum_{n=0}^{14} r^n / n! as 1 + r (1 + r/2 (1 + r/3 (...))), |r| <= 0.35.
double exp_poly(double r) {
  double acc = 1.0;
  for (int n = 14; n >= 1; --n) acc = 1.0 + r * acc / static_cast<double>(n);
  return acc;
}

}  // namespace

double sqrt(double x) {
  // The IEEE square root is a basic operation with one correctly rounded result.
  return std::sqrt(x);
}

double exp(double x) {
  if (x != x) return x;
  if (x > 709.782712893384) return bits_to_double(0x7ff0000000000000ull);
  if (x < -745.2) return 0.0;
  const int64_t k = round_int(x * kInvLn2);
  const double kd = static_cast<double>(k);
  const double r = (x - kd * kLn2Hi) - kd * kLn2Lo;
  const double p = exp_poly(r);
  if (k < -1020) return (p * pow2(k + 60)) * pow2(-60);
  return p * pow2(k);
}

double expm1(double x) {
  if (x > -0.35 && x < 0.35) {
    // x (1 + x/2 (1 + x/3 (...)))
    double acc = 1.0;
    for (int n = 16; n >= 2; --n) acc = 1.0 + x * acc / static_cast<double>(n);
    return x * acc;
  }
  return exp(x) - 1.0;
}

double log(double x) {
  if (x != x || x < 0.0) return bits_to_double(0x7ff8000000000000ull);
  if (x == 0.0) return -bits_to_double(0x7ff0000000000000ull);
  if (x == bits_to_double(0x7ff0000000000000ull)) return x;
  int64_t e = 0;
  if (x < 2.2250738585072014e-308) {  // subnormal: scale up by 2^54
    x *= 18014398509481984.0;
    e -= 54;
  }
  uint64_t b = double_to_bits(x);
  e += static_cast<int64_t>((b >> 52) & 0x7ff) - 1023;
  double m = bits_to_double((b & 0x000fffffffffffffull) | 0x3ff0000000000000ull);  // [1, 2)
  if (m > 1.4142135623730951) {
    m *= 0.5;
    e += 1;
  }
  // log m = 2 atanh(f), f = (m - 1) / (m + 1), |f| <= 0.1716
  const double f = (m - 1.0) / (m + 1.0);
  const double f2 = f * f;
  double s = 0.0;
  for (int n = 25; n >= 3; n -= 2) s = f2 * (1.0 / static_cast<double>(n) + s);
  const double lm = 2.0 * f + 2.0 * f * s;
  const double ed = static_cast<double>(e);
  return ed * kLn2Hi + (ed * kLn2Lo + lm);
}

double log1p(double x) {
  if (x != x || x < -1.0) return bits_to_double(0x7ff8000000000000ull);
  const double u = 1.0 + x;
  if (u == 1.0) return x;  // |x| below half an ulp of 1: log1p x = x to double precision
  if (u == bits_to_double(0x7ff0000000000000ull)) return log(x);
  // log(u) * x / (u - 1): the rounding error of 1 + x cancels (Goldberg's formula)
  return log(u) * (x / (u - 1.0));
}

double pow(double base, double e) {
  if (e == 0.0) return 1.0;
  return exp(e * log(base));
}

namespace {

const double kInf = bits_to_double(0x7ff0000000000000ull);

// 0: e is not an integer; 1: an odd integer; 2: an even integer (|e| >= 2^53 is always even).
int int_kind(double e) {
  const double a = e < 0 ? -e : e;
  if (a >= 9007199254740992.0) return 2;
  const int64_t i = static_cast<int64_t>(a);
  if (static_cast<double>(i) != a) return 0;
  return (i & 1) ? 1 : 2;
}

}  // namespace

double pow_any(double b, double e) {
  if (e == 0.0 || b == 1.0) return 1.0;
  if (b != b || e != e) return bits_to_double(0x7ff8000000000000ull);
  const int ik = int_kind(e);
  const bool neg = b < 0 || (b == 0.0 && (double_to_bits(b) >> 63));  // -0 counts as negative
  const double ab = neg ? -b : b;
  if (e == kInf || e == -kInf) {
    if (ab == 1.0) return 1.0;
    return (ab < 1.0) == (e < 0) ? kInf : 0.0;
  }
  if (ab == 0.0 || ab == kInf) {  // the result is 0 or inf, signed by an odd exponent of a negative base
    const double mag = (ab == 0.0) == (e < 0) ? kInf : 0.0;
    return neg && ik == 1 ? -mag : mag;
  }
  if (neg && ik == 0) return bits_to_double(0x7ff8000000000000ull);  // negative base, fractional exponent
  double r;
  const double ae = e < 0 ? -e : e;
  if (ik != 0 && ae <= 64.0) {  // small integer exponents by repeated squaring: x^2 is x * x
    int64_t n = static_cast<int64_t>(ae);
    double p = ab;
    r = 1.0;
    while (n > 0) {
      if (n & 1) r *= p;
      p *= p;
      n >>= 1;
    }
    if (e < 0) r = 1.0 / r;
  } else {
    r = exp(e * log(ab));
  }
  return neg && ik == 1 ? -r : r;
}

namespace {

double sin_poly(double r) {  // |r| <= pi/4
  const double r2 = r * r;
  double acc = 1.0;
  for (int n = 19; n >= 3; n -= 2) acc = 1.0 - r2 * acc / (static_cast<double>(n) * static_cast<double>(n - 1));
  return r * acc;
}
double cos_poly(double r) {
  const double r2 = r * r;
  double acc = 1.0;
  for (int n = 20; n >= 2; n -= 2) acc = 1.0 - r2 * acc / (static_cast<double>(n) * static_cast<double>(n - 1));
  return acc;
}

// x = k pi/2 + r, |r| <= pi/4 (|x| < 1.6e6: k * kPio2_1 is exact); beyond that (or infinite)
// the reduction would lose the result: InvalidConfig instead of a wrong value.
double reduce(double x, int64_t* k, const char* fn) {
  if (!(x < 1.6e6 && x > -1.6e6))
    throw_invalid_config(std::string("nox ") + fn, "argument " + std::to_string(x) +
                                                     " is outside |x| < 1.6e6, the range of nox's argument "
                                                     "reduction (run this graph on cpu)");
  *k = round_int(x * kTwoOverPi);
  const double kd = static_cast<double>(*k);
  return ((x - kd * kPio2_1) - kd * kPio2_2) - kd * kPio2_3;
}

}  // namespace

double sin(double x) {
  if (x != x) return x;
  int64_t k;
  const double r = reduce(x, &k, "sin");
  switch (k & 3) {
    case 0: return sin_poly(r);
    case 1: return cos_poly(r);
    case 2: return -sin_poly(r);
    default: return -cos_poly(r);
  }
}

double cos(double x) {
  if (x != x) return x;
  int64_t k;
  const double r = reduce(x, &k, "cos");
  switch (k & 3) {
    case 0: return cos_poly(r);
    case 1: return -sin_poly(r);
    case 2: return -cos_poly(r);
    default: return sin_poly(r);
  }
}

double tanh(double x) {
  if (x != x) return x;
  const double a = x < 0 ? -x : x;
  double t;
  if (a > 22.0) t = 1.0;
  else {
    const double em1 = expm1(2.0 * a);  // tanh a = em1 / (em1 + 2)
    t = em1 / (em1 + 2.0);
  }
  return x < 0 ? -t : t;
}

double erf(double x) {
  if (x != x) return x;
  const double a = x < 0 ? -x : x;
  double r;
  if (a < 2.5) {
    // 2/sqrt(pi) sum_n (-1)^n a^(2n+1) / (n! (2n+1)), 60 terms
    const double a2 = a * a;
    double term = a, s = a;
    for (int n = 1; n < 60; ++n) {
      term = -term * a2 / static_cast<double>(n);
      s += term / static_cast<double>(2 * n + 1);
    }
    r = 1.1283791670955126 * s;
  } else if (a > 6.0) {
    r = 1.0;
  } else {
    // erfc a = exp(-a^2) / sqrt(pi) / (a + (1/2)/(a + 1/(a + (3/2)/(a + ...)))), 60 levels
    double t = a;
    for (int n = 60; n >= 1; --n) t = a + (0.5 * static_cast<double>(n)) / t;
    r = 1.0 - exp(-a * a) * 0.5641895835477563 / t;
  }
  return x < 0 ? -r : r;
}

}  // namespace nox
}  // namespace cyb
