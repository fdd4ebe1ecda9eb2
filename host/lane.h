// Lane<T, W>: W scalars in one SIMD register. The core is templated on its scalar (scalar.h), so
// its stages run on lanes unchanged, one vector instruction doing the work of W scalar ones.
// Two uses, which differ only in what a comparison of lanes means when the code branches on it:
//
// Seeds (Lane<T, W>, LaneBranch::kEvery): the reverse pass of one step on W seeds at once. A
// vector-Jacobian product is linear in its seed, so every adjoint becomes a Lane whose lanes
// are the W seeds' adjoints, and every forward value (the replayed step's, the model's) a Lane
// holding the same value in every lane, broadcast from its scalar as it is loaded (or stored so,
// a few arrays). A comparison is true when it holds in every lane: on forward values (equal
// lanes) that is the scalar comparison; on adjoints the reverse pass only asks whether one is
// zero, to skip work, which then is skipped when it is zero for every seed.
//
// Environments (Pack<T, W>, LaneBranch::kUniform): the forward step of W environments at once,
// lane k holding environment k's value and the model broadcast. A comparison gives a LaneMask.
// Arithmetic on masks and select() are lane by lane; where the code branches on one (if, ?:,
// && and || of the core's scalar code), the branch is taken as lane 0 takes it, and when the
// lanes disagree the thread's lanes_diverged() flag is raised: the lanes then did not all follow
// their own scalar path, and the caller discards the pass and steps those environments one by
// one (host/pack_kernels.h). A pass that raises no flag followed, in every lane, exactly the
// branches the scalar code takes for that environment, so each lane's result is the scalar
// step's up to the rounding of fused multiply-adds.
//
// Nonlinear functions are evaluated lane by lane with the scalar library's (sin, cos, exp, log,
// atan2; once for equal lanes), sqrt in one vector instruction.
//
// Host only: GCC/Clang vector extensions. CUDA runs one environment or seed per thread.
#pragma once

#if defined(__CUDACC__)
#error "host/lane.h is for host code"
#endif

#include <bit>
#include <type_traits>
#include <utility>

#include "phalanx/math/scalar.h"

namespace phx {

enum class LaneBranch { kEvery, kUniform };

// raised by a branch on a LaneMask whose lanes disagree; cleared by the caller before a pass
inline bool& lanes_diverged() {
  thread_local bool diverged = false;
  return diverged;
}

// A comparison of the W lanes of T of a Pack: -1 (true) or 0 (false) per lane, in integers of
// T's width.
template <class T, int W>
struct LaneMask {
  typedef T V __attribute__((vector_size(W * sizeof(T))));
  using M = decltype(V{} < V{});
  M m;

  LaneMask() = default;
  LaneMask(const M& x) : m(x) {}  // NOLINT: a vector comparison's result
  explicit LaneMask(bool b) : m(M{} - (b ? 1 : 0)) {}

  friend LaneMask operator&&(const LaneMask& a, const LaneMask& b) { return {a.m & b.m}; }
  friend LaneMask operator||(const LaneMask& a, const LaneMask& b) { return {a.m | b.m}; }
  friend LaneMask operator!(const LaneMask& a) { return {~a.m}; }
  // lane 0's truth for a branch, raising lanes_diverged() when another lane's differs
  operator bool() const {  // NOLINT: implicit, so that the core's bools take masks

    bool all = true, any = false;
    for (int i = 0; i < W; ++i) {
      all = all && m[i] != 0;
      any = any || m[i] != 0;
    }
    if (any && !all) lanes_diverged() = true;
    return m[0] != 0;
  }
};

template <class T, int W, LaneBranch B = LaneBranch::kEvery>
struct Lane {
  typedef T V __attribute__((vector_size(W * sizeof(T))));
  using Mask = LaneMask<T, W>;
  // what a comparison gives: a bool true in every lane (seeds), or the mask (environments)
  using Cmp = std::conditional_t<B == LaneBranch::kEvery, bool, Mask>;
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

  // a lane-by-lane comparison as a Cmp
  static Cmp compare(const typename Mask::M& m) {
    if constexpr (B == LaneBranch::kEvery) {
      for (int i = 0; i < W; ++i)
        if (m[i] == 0) return false;
      return true;
    } else {
      return Mask(m);
    }
  }
  friend Cmp operator<(const Lane& a, const Lane& b) { return compare(a.v < b.v); }
  friend Cmp operator>(const Lane& a, const Lane& b) { return compare(a.v > b.v); }
  friend Cmp operator<=(const Lane& a, const Lane& b) { return compare(a.v <= b.v); }
  friend Cmp operator>=(const Lane& a, const Lane& b) { return compare(a.v >= b.v); }
  friend Cmp operator==(const Lane& a, const Lane& b) { return compare(a.v == b.v); }
  // seeds: the negation of == (some lane differs); environments: lane by lane
  friend Cmp operator!=(const Lane& a, const Lane& b) {
    if constexpr (B == LaneBranch::kEvery)
      return !(a == b);
    else
      return compare(a.v != b.v);
  }

  // a where the mask is set, else b (environments); seeds compare to a bool
  friend Lane select(const Mask& m, const Lane& a, const Lane& b) { return of(m.m ? a.v : b.v); }
  friend Lane select(bool c, const Lane& a, const Lane& b) { return c ? a : b; }
  // clamp without a branch (environments; seeds take the scalar template's, which branches)
  template <LaneBranch C = B, class = std::enable_if_t<C == LaneBranch::kUniform>>
  friend Lane clamp(const Lane& x, const Lane& lo, const Lane& hi) {
    return of(x.v < lo.v ? lo.v : (x.v > hi.v ? hi.v : x.v));
  }

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
  // x - x is zero exactly where x is finite
  friend Cmp isfinite(const Lane& a) { return compare(a.v - a.v == V{}); }
  // lane 0's value: the model's constants, equal in every lane (environments: a lane that
  // differs raises lanes_diverged(), as a branch does)
  friend T value(const Lane& a) {
    if (B == LaneBranch::kUniform && !a.uniform()) lanes_diverged() = true;
    return a.v[0];
  }
};

// W environments' values of one scalar (see the header comment)
template <class T, int W>
using Pack = Lane<T, W, LaneBranch::kUniform>;

// One round of transpose_packs: pack pairs (i, i + D) swap bit D of the lane index with bit D
// of the pack index. Lanes with bit D set take the partner pack's lane k - D, the others keep
// their own; the indices are constants (K...), so that each shuffle compiles to one or two
// fixed shuffle instructions.
template <int D, class V, int W, int... K>
inline void transpose_round(V* r, std::integer_sequence<int, K...>) {
  for (int i = 0; i < W; ++i) {
    if (i & D) continue;
    const V a = r[i], b = r[i + D];
    r[i] = __builtin_shufflevector(a, b, ((K & D) ? W + K - D : K)...);
    r[i + D] = __builtin_shufflevector(a, b, ((K & D) ? W + K : K + D)...);
  }
}

// W packs transposed: to[k][i] = from[i][k] for lanes k and packs i < W (each to[k] W scalars),
// in log2(W) rounds of two-register shuffles (W a power of two)
template <class T, int W>
inline void transpose_packs(const Pack<T, W>* from, T* const* to) {
  static_assert(std::has_single_bit(unsigned(W)), "a pack's lanes are a power of two");
  using V = typename Pack<T, W>::V;
  V r[W];
  for (int i = 0; i < W; ++i) r[i] = from[i].v;
  [&]<int... D>(std::integer_sequence<int, D...>) {
    (transpose_round<1 << D, V, W>(r, std::make_integer_sequence<int, W>{}), ...);
  }
  (std::make_integer_sequence<int, std::countr_zero(unsigned(W))>{});
  for (int k = 0; k < W; ++k) __builtin_memcpy(to[k], &r[k], sizeof(V));
}

// n packs into W arrays, one per lane: to[k][i] = from[i][k] (transpose_packs, W packs at a time)
template <class T, int W>
inline void packs_to_lanes(const Pack<T, W>* from, long n, T* const* to) {
  T* at[W];
  long i = 0;
  for (; i + W <= n; i += W) {
    for (int k = 0; k < W; ++k) at[k] = to[k] + i;
    transpose_packs(from + i, at);
  }
  for (; i < n; ++i)
    for (int k = 0; k < W; ++k) to[k][i] = from[i][k];
}

// W arrays, one per lane, into n packs: to[i][k] = from[k][i] (the same transpose, its W packs
// read from the lanes' arrays)
template <class T, int W>
inline void lanes_to_packs(const T* const* from, long n, Pack<T, W>* to) {
  long i = 0;
  for (; i + W <= n; i += W) {
    Pack<T, W> block[W];
    T* at[W];
    for (int k = 0; k < W; ++k) {
      __builtin_memcpy(&block[k].v, from[k] + i, sizeof(block[k].v));
      at[k] = reinterpret_cast<T*>(to + i + k);
    }
    transpose_packs(block, at);
  }
  for (; i < n; ++i)
    for (int k = 0; k < W; ++k) to[i].set(k, from[k][i]);
}

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
