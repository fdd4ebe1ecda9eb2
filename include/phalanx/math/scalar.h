// Scalar functions overloaded for float and double; math/dual.h adds Dual numbers.
// Core code calls these unqualified inside namespace phx, so one source serves every scalar.
#pragma once

#include <math.h>

#include "phalanx/config.h"

namespace phx {

PHX_HD PHX_INLINE float sqrt(float x) { return ::sqrtf(x); }
PHX_HD PHX_INLINE double sqrt(double x) { return ::sqrt(x); }
PHX_HD PHX_INLINE float sin(float x) { return ::sinf(x); }
PHX_HD PHX_INLINE double sin(double x) { return ::sin(x); }
PHX_HD PHX_INLINE float cos(float x) { return ::cosf(x); }
PHX_HD PHX_INLINE double cos(double x) { return ::cos(x); }
PHX_HD PHX_INLINE float exp(float x) { return ::expf(x); }
PHX_HD PHX_INLINE double exp(double x) { return ::exp(x); }
PHX_HD PHX_INLINE float log(float x) { return ::logf(x); }
PHX_HD PHX_INLINE double log(double x) { return ::log(x); }
PHX_HD PHX_INLINE float atan2(float y, float x) { return ::atan2f(y, x); }
PHX_HD PHX_INLINE double atan2(double y, double x) { return ::atan2(y, x); }
PHX_HD PHX_INLINE float abs(float x) { return ::fabsf(x); }
PHX_HD PHX_INLINE double abs(double x) { return ::fabs(x); }
PHX_HD PHX_INLINE bool isfinite(float x) { return ::isfinite(x); }
PHX_HD PHX_INLINE bool isfinite(double x) { return ::isfinite(x); }

// a if c else b, without a branch where T is a SIMD pack of environments (host/lane.h: c a mask
// of its lanes, which then need not branch apart) or a Dual of one (math/dual.h)
PHX_HD PHX_INLINE float select(bool c, float a, float b) {
  return c ? a : b;
}
PHX_HD PHX_INLINE double select(bool c, double a, double b) {
  return c ? a : b;
}

// the real part of a scalar (identity for float and double; the value of a Dual)
PHX_HD PHX_INLINE float value(float x) { return x; }
PHX_HD PHX_INLINE double value(double x) { return x; }

// what comparing two T gives: bool for the scalars, a mask of lanes for host SIMD packs
// (host/lane.h), constructible from a bool
template <class T>
using Truth = decltype(T() < T());

template <class T>
PHX_HD PHX_INLINE T clamp(T x, T lo, T hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

}  // namespace phx
