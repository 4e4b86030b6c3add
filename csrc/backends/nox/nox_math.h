// Deterministic elementary functions of the nox backend (no libm): each is a
// fixed sequence of IEEE-754 double additions, multiplications and divisions
// (compiled with -ffp-contract=off, so no FMA contraction), hence the same
// bits on every compiler, optimization level and machine with IEEE doubles.
// Accuracy: a few ulp of double over the ranges the runtime uses (|x| < 1.6e6
// for sin/cos), far below the f32 rounding applied to every nox output.
#pragma once

namespace cyb {
namespace nox {

double exp(double x);
double expm1(double x);
double log(double x);
double pow(double base, double e);  // base > 0
double sin(double x);
double cos(double x);
double tanh(double x);
double erf(double x);
double sqrt(double x);  // IEEE-754 correctly rounded (a basic operation, same bits everywhere)

}  // namespace nox
}  // namespace cyb
