// Forward-mode dual numbers: Dual<T, N> carries a value and N directional derivatives.
// The core is templated on the scalar, so running it on Dual<double, N> gives exact
// Jacobian-vector products of the same code; tests compare them with the adjoints.
#pragma once

#include <type_traits>

#include "phalanx/math/scalar.h"

namespace phx {

// The directions of one dual-number pass over a function's inputs (a pair's frames and sizes,
// an actuator's parameters): on the CPU `cpu`, the caller's own width; on the GPU `gpu_float`
// (three unless the function asks fewer) in float and one in double, so that the duals fit a
// thread's registers. A direction's slopes are the same whichever pass computes them.
template <class T, int cpu, int gpu_float = 3>
#ifdef __CUDA_ARCH__
inline constexpr int kDualDirections = sizeof(T) > sizeof(float) ? 1 : gpu_float;
#else
inline constexpr int kDualDirections = cpu;
#endif

template <class T, int N>
struct Dual {
  T v = T(0);      // value
  T d[N] = {};     // derivatives along N directions

  PHX_HD Dual() = default;
  PHX_HD Dual(T x) : v(x) {}  // NOLINT: implicit from a constant
  // from a plain number when T is not one (a Dual of Duals, a Dual of SIMD lanes)
  template <class U, std::enable_if_t<std::is_arithmetic_v<U> && !std::is_same_v<U, T>, int> = 0>
  PHX_HD explicit Dual(U x) : v(T(x)) {}

  PHX_HD Dual& operator+=(const Dual& b) { return *this = *this + b; }
  PHX_HD Dual& operator-=(const Dual& b) { return *this = *this - b; }
  PHX_HD Dual& operator*=(const Dual& b) { return *this = *this * b; }
  PHX_HD Dual& operator/=(const Dual& b) { return *this = *this / b; }

  // helpers building a Dual from a value and one gradient rule: y = f(x), dy = s * dx
  PHX_HD static Dual chain(const Dual& x, T fx, T s) {
    Dual r(fx);
    for (int i = 0; i < N; ++i) r.d[i] = s * x.d[i];
    return r;
  }
};

#define PHX_DUAL_BINARY(op, expr_v, expr_d)                                  \
  template <class T, int N>                                                 \
  PHX_HD Dual<T, N> operator op(const Dual<T, N>& a, const Dual<T, N>& b) { \
    Dual<T, N> r(expr_v);                                                   \
    for (int i = 0; i < N; ++i) r.d[i] = expr_d;                            \
    return r;                                                               \
  }
PHX_DUAL_BINARY(+, a.v + b.v, a.d[i] + b.d[i])
PHX_DUAL_BINARY(-, a.v - b.v, a.d[i] - b.d[i])
PHX_DUAL_BINARY(*, a.v * b.v, a.d[i] * b.v + a.v * b.d[i])
PHX_DUAL_BINARY(/, a.v / b.v, (a.d[i] * b.v - a.v * b.d[i]) / (b.v * b.v))
#undef PHX_DUAL_BINARY

// mixed operations with plain scalars promote the scalar
#define PHX_DUAL_MIXED(op)                                                              \
  template <class T, int N>                                                            \
  PHX_HD Dual<T, N> operator op(const Dual<T, N>& a, T b) { return a op Dual<T, N>(b); } \
  template <class T, int N>                                                            \
  PHX_HD Dual<T, N> operator op(T a, const Dual<T, N>& b) { return Dual<T, N>(a) op b; }
PHX_DUAL_MIXED(+)
PHX_DUAL_MIXED(-)
PHX_DUAL_MIXED(*)
PHX_DUAL_MIXED(/)
#undef PHX_DUAL_MIXED

template <class T, int N>
PHX_HD Dual<T, N> operator-(const Dual<T, N>& a) {
  return Dual<T, N>::chain(a, -a.v, T(-1));
}

// (comparisons give what comparing their values gives: a bool, or a mask of a pack's lanes)
#define PHX_DUAL_COMPARE(op)                                          \
  template <class T, int N>                                           \
  PHX_HD auto operator op(const Dual<T, N>& a, const Dual<T, N>& b) { \
    return a.v op b.v;                                                \
  }                                                                   \
  template <class T, int N>                                           \
  PHX_HD auto operator op(const Dual<T, N>& a, T b) {                 \
    return a.v op b;                                                  \
  }                                                                   \
  template <class T, int N>                                           \
  PHX_HD auto operator op(T a, const Dual<T, N>& b) {                 \
    return a op b.v;                                                  \
  }
PHX_DUAL_COMPARE(<)
PHX_DUAL_COMPARE(>)
PHX_DUAL_COMPARE(<=)
PHX_DUAL_COMPARE(>=)
PHX_DUAL_COMPARE(==)
PHX_DUAL_COMPARE(!=)
#undef PHX_DUAL_COMPARE

// a if c else b, value and derivatives (c: what comparing two T gives)
template <class C, class T, int N>
PHX_HD Dual<T, N> select(const C& c, const Dual<T, N>& a, const Dual<T, N>& b) {
  Dual<T, N> r;
  r.v = select(c, a.v, b.v);
  for (int i = 0; i < N; ++i) r.d[i] = select(c, a.d[i], b.d[i]);
  return r;
}

template <class T, int N>
PHX_HD Dual<T, N> sqrt(const Dual<T, N>& a) {
  T s = sqrt(a.v);
  return Dual<T, N>::chain(a, s, T(0.5) / s);
}
template <class T, int N>
PHX_HD Dual<T, N> sin(const Dual<T, N>& a) {
  return Dual<T, N>::chain(a, sin(a.v), cos(a.v));
}
template <class T, int N>
PHX_HD Dual<T, N> cos(const Dual<T, N>& a) {
  return Dual<T, N>::chain(a, cos(a.v), -sin(a.v));
}
template <class T, int N>
PHX_HD Dual<T, N> abs(const Dual<T, N>& a) {
  return a.v < T(0) ? -a : a;
}
template <class T, int N>
PHX_HD Dual<T, N> atan2(const Dual<T, N>& y, const Dual<T, N>& x) {
  // d atan2(y, x) = (x dy - y dx) / (x^2 + y^2)
  T r2 = x.v * x.v + y.v * y.v;
  Dual<T, N> r(atan2(y.v, x.v));
  for (int i = 0; i < N; ++i) r.d[i] = (x.v * y.d[i] - y.v * x.d[i]) / r2;
  return r;
}
template <class T, int N>
PHX_HD bool isfinite(const Dual<T, N>& a) {
  return isfinite(a.v);
}
template <class T, int N>
PHX_HD T value(const Dual<T, N>& a) {
  return a.v;
}

}  // namespace phx
