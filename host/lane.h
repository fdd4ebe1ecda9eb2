// Lane<T, W>: W scalars in one SIMD register, for running a reverse pass on W seeds at once.
//
// A vector-Jacobian product is linear in its seed, so the reverse pass of one step can carry W
// seeds side by side: every adjoint becomes a Lane whose lanes are the W seeds' adjoints, and
// every forward value (the replayed step's, the model's) a Lane holding the same value in
// every lane, broadcast from its scalar as it is loaded (or stored so, a few arrays). The core
// is templated on its scalar (scalar.h), so the stage adjoints run on Lane unchanged, one
// vector instruction doing the work of W scalar ones.
//
// Comparisons are true when they hold in every lane: on forward values (equal lanes) that is
// the scalar comparison; on adjoints the reverse pass only asks whether one is zero, to skip
// work, which then is skipped when it is zero for every seed. Nonlinear functions only ever
// meet forward values in a reverse pass (it is linear in the seed); the library calls (sin,
// cos, exp, log, atan2) are evaluated once when every lane holds the same argument, else lane
// by lane.
//
// Host only: GCC/Clang vector extensions. CUDA runs one seed per pass (W = 1, the scalar).
#pragma once

#if defined(__CUDACC__)
#error "host/lane.h is for host code"
#endif

#include <type_traits>

#include "phalanx/math/scalar.h"

namespace phx {

template <class T, int W>
struct Lane {
  typedef T V __attribute__((vector_size(W * sizeof(T))));
  V v = {};

  Lane() = default;
  template <class U, class = std::enable_if_t<std::is_arithmetic_v<U>>>
  Lane(U x) : v(V{} + T(x)) {}  // NOLINT: implicit broadcast of a constant, as T(x)
  static Lane of(V x) {
    Lane r;
    r.v = x;
    return r;
  }

  T operator[](int i) const { return v[i]; }
  void set(int i, T x) { v[i] = x; }

  Lane& operator+=(const Lane& b) { v += b.v; return *this; }
  Lane& operator-=(const Lane& b) { v -= b.v; return *this; }
  Lane& operator*=(const Lane& b) { v *= b.v; return *this; }
  Lane& operator/=(const Lane& b) { v /= b.v; return *this; }

  friend Lane operator+(const Lane& a, const Lane& b) { return of(a.v + b.v); }
  friend Lane operator-(const Lane& a, const Lane& b) { return of(a.v - b.v); }
  friend Lane operator*(const Lane& a, const Lane& b) { return of(a.v * b.v); }
  friend Lane operator/(const Lane& a, const Lane& b) { return of(a.v / b.v); }
  friend Lane operator-(const Lane& a) { return of(-a.v); }

  // true when it holds in every lane (see the header comment); != is the negation of ==
  template <class Cmp>
  static bool every(const Lane& a, const Lane& b, Cmp c) {
    for (int i = 0; i < W; ++i)
      if (!c(a.v[i], b.v[i])) return false;
    return true;
  }
  friend bool operator<(const Lane& a, const Lane& b) { return every(a, b, [](T x, T y) { return x < y; }); }
  friend bool operator>(const Lane& a, const Lane& b) { return every(a, b, [](T x, T y) { return x > y; }); }
  friend bool operator<=(const Lane& a, const Lane& b) { return every(a, b, [](T x, T y) { return x <= y; }); }
  friend bool operator>=(const Lane& a, const Lane& b) { return every(a, b, [](T x, T y) { return x >= y; }); }
  friend bool operator==(const Lane& a, const Lane& b) { return every(a, b, [](T x, T y) { return x == y; }); }
  friend bool operator!=(const Lane& a, const Lane& b) { return !(a == b); }

  // whether every lane holds lane 0's value
  bool uniform() const {
    for (int i = 1; i < W; ++i)
      if (v[i] != v[0]) return false;
    return true;
  }
  // f lane by lane, or once for equal lanes
  template <class F>
  friend Lane map(const Lane& a, F f) {
    if (a.uniform()) return Lane(f(a.v[0]));
    Lane r;
    for (int i = 0; i < W; ++i) r.v[i] = f(a.v[i]);
    return r;
  }
  friend Lane sqrt(const Lane& a) {  // one vector instruction
    Lane r;
    for (int i = 0; i < W; ++i) r.v[i] = phx::sqrt(a.v[i]);
    return r;
  }
  friend Lane sin(const Lane& a) { return map(a, [](T x) { return phx::sin(x); }); }
  friend Lane cos(const Lane& a) { return map(a, [](T x) { return phx::cos(x); }); }
  friend Lane exp(const Lane& a) { return map(a, [](T x) { return phx::exp(x); }); }
  friend Lane log(const Lane& a) { return map(a, [](T x) { return phx::log(x); }); }
  friend Lane abs(const Lane& a) { return map(a, [](T x) { return phx::abs(x); }); }
  friend Lane atan2(const Lane& y, const Lane& x) {
    if (y.uniform() && x.uniform()) return Lane(phx::atan2(y.v[0], x.v[0]));
    Lane r;
    for (int i = 0; i < W; ++i) r.v[i] = phx::atan2(y.v[i], x.v[i]);
    return r;
  }
  friend bool isfinite(const Lane& a) {
    for (int i = 0; i < W; ++i)
      if (!phx::isfinite(a.v[i])) return false;
    return true;
  }
  friend T value(const Lane& a) { return a.v[0]; }
};

// the lanes per register of T on this host: 512-bit registers with AVX-512, else 256-bit ones
// (AVX2, which every x86-64 host Phalanx tunes for has); one register per Lane (two per Lane
// run at half the speed, the passes being bound by their loads).
#if defined(__AVX512F__)
inline constexpr int kLaneBytes = 64;
#else
inline constexpr int kLaneBytes = 32;
#endif
template <class T>
inline constexpr int kLanes = int(kLaneBytes / sizeof(T));

}  // namespace phx
