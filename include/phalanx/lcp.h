// Boxed LCP of one environment: projected Gauss-Seidel and Dantzig pivoting solvers, Nimble's
// row classification, stabilisation and warm start, and the adjoint of the solution map.
//
// Problem (n rows; A n x n row-major, symmetric PSD; b n): find f with v = A f + b and, per row,
//   lo_i <= f_i <= hi_i  and  (f_i = lo_i, v_i >= 0) or (f_i = hi_i, v_i <= 0) or v_i = 0.
// Friction rows use ODE's convention: findex[i] >= 0 names the normal row of row i, whose bounds
// are -mu_i f_findex[i] <= f_i <= mu_i f_findex[i] (lo_i, hi_i ignored); findex[i] = -1 keeps
// the fixed bounds lo_i, hi_i (contact normals and joint limits [0, kLcpInf)). A normal row
// must have fixed bounds.
//
// "Nimble" is Werling et al., Fast and Feature-Complete Differentiable Physics for Articulated
// Rigid Bodies with Contact, RSS 2021. Its printed
// formulas are corrected where cited: eq. 20 has the wrong sign on its second term, eq. 22 is
// malformed, and appendix B drops the minus sign of f_C = -A_CC^-1 b_C.
//
// Every function is pure: no allocation, no exceptions, no recursion. Scratch comes from the
// caller as one block (reals of the problem's scalar and ints) that each function lays out with
// an Arena; lcp_storage(n), the largest of those layouts, serves every function here.
#pragma once

#include "phalanx/arena.h"
#include "phalanx/math/dense.h"

namespace phx {

// bounds at or beyond this magnitude are infinite (finite, so it is exact in float and double)
constexpr double kLcpInf = 1e30;

// One environment's problem; pointers into caller memory, shapes in rows. Layout lays out its
// arrays (as the constraint workspace it comes from lays them out).
template <class T, class Layout = Contiguous>
struct LcpProblem {
  using Reals = RowsPtr<Layout, const T>;
  using Ints = RowsPtr<Layout, const int>;
  int n = 0;              // number of rows
  Reals A = nullptr;      // n x n row-major, symmetric positive semidefinite
  Reals b = nullptr;      // n
  Reals lo = nullptr;     // n, lower bounds of rows with findex < 0 (-kLcpInf allowed)
  Reals hi = nullptr;     // n, upper bounds of rows with findex < 0 (kLcpInf allowed)
  Reals mu = nullptr;     // n, friction coefficients of rows with findex >= 0; may be null
  Ints findex = nullptr;  // n, normal row of each friction row, -1 otherwise; null: all -1
  // Optional factor A = Y Y^T: Y n x ncol row-major, row i zero outside its two column ranges
  // [span[4i], span[4i+1]) and [span[4i+2], span[4i+3]) (disjoint, in order; either may be
  // empty). With it, pgs may sweep in velocity form (see there), and pgs and lcp_residual
  // accept A = null.
  Reals Y = nullptr;
  Ints span = nullptr;
  int ncol = 0;
};

// Classification of a row of a solution (Nimble section IV and appendix A).
enum LcpClass : int {
  kLcpClamping = 0,      // C: v = 0, f free between its bounds
  kLcpSeparating = 1,    // S: f held at lo (v >= 0); also "held constant" in loss-driven classes
  kLcpSeparatingHi = 2,  // S at the upper fixed bound: f = hi, v <= 0
  kLcpBoundedHi = 3,     // B: friction row at +mu f_n (v <= 0)
  kLcpBoundedLo = 4,     // B: friction row at -mu f_n (v >= 0)
  kLcpClassMask = 7,     // the class without its flags
  kLcpTied = 8,          // flag on C, S or B: f at a bound and v = 0 within tolerance (T)
};

namespace detail {

PHX_HD PHX_INLINE float lcp_eps(float) {
  return 1e-6f;
}
PHX_HD PHX_INLINE double lcp_eps(double) {
  return 1e-13;
}

template <class T>
PHX_HD PHX_INLINE bool lcp_finite_bound(T x) {
  return abs(x) < T(0.5 * kLcpInf);
}

template <class T, class Layout>
PHX_HD PHX_INLINE int lcp_findex(const LcpProblem<T, Layout>& p, int i) {
  return p.findex ? p.findex[i] : -1;
}

// v_i = (A f + b)_i; f, as the impulses of every function below, a pointer or a Strided one
template <class T, class Layout, class F>
PHX_HD PHX_INLINE T lcp_row_velocity(const LcpProblem<T, Layout>& p, F f, int i) {
  return p.b[i] + dot_n(p.A + i * p.n, f, p.n);
}

}  // namespace detail

template <class T, class Layout>
PHX_HD T lcp_factor_entry(const LcpProblem<T, Layout>& p, int i, int j);

namespace detail {

// A_ii, from the factor when A is not given
template <class T, class Layout>
PHX_HD PHX_INLINE T lcp_entry_ii(const LcpProblem<T, Layout>& p, int i) {
  return p.A ? p.A[i * p.n + i] : lcp_factor_entry(p, i, i);
}

// diagonal used to turn velocities into impulses (1 for a zero row)
template <class T, class Layout>
PHX_HD PHX_INLINE T lcp_diag(const LcpProblem<T, Layout>& p, int i) {
  T d = lcp_entry_ii(p, i);
  return d > T(0) ? d : T(1);
}

// Y_i . x over row i's column ranges (LcpProblem's factor)
template <class T, class Layout>
PHX_HD PHX_INLINE T lcp_factor_dot(const LcpProblem<T, Layout>& p, int i, const T* x) {
  const auto y = p.Y + long(i) * p.ncol;
  const auto s = p.span + 4 * i;
  return dot_n(y + s[0], x + s[0], s[1] - s[0]) + dot_n(y + s[2], x + s[2], s[3] - s[2]);
}

// x += a Y_i over row i's column ranges
template <class T, class Layout>
PHX_HD PHX_INLINE void lcp_factor_axpy(const LcpProblem<T, Layout>& p, int i, T a, T* x) {
  const auto y = p.Y + long(i) * p.ncol;
  const auto s = p.span + 4 * i;
  for (int h = 0; h < 4; h += 2)
    for (int k = s[h]; k < s[h + 1]; ++k) x[k] += a * y[k];
}

// whether rows i, i + 1, i + 2 are one contact's normal and its two friction rows on the same
// column ranges of the factor (build_rows lays contacts out so)
template <class T, class Layout>
PHX_HD PHX_INLINE bool lcp_contact_block(const LcpProblem<T, Layout>& p, int i) {
  if (i + 2 >= p.n || lcp_findex(p, i) >= 0 || lcp_findex(p, i + 1) != i ||
      lcp_findex(p, i + 2) != i)
    return false;
  const auto s = p.span + 4 * i;
  for (int k = 0; k < 4; ++k)
    if (s[4 + k] != s[k] || s[8 + k] != s[k]) return false;
  return true;
}

// the factor's rows i, i + 1, i + 2 of a contact block and their column ranges (s)
template <class T, class Layout>
struct FactorBlock {
  RowsPtr<Layout, const T> y0, y1, y2;
  RowsPtr<Layout, const int> s;
  PHX_HD FactorBlock(const LcpProblem<T, Layout>& p, int i)
      : y0(p.Y + long(i) * p.ncol), y1(y0 + p.ncol), y2(y1 + p.ncol), s(p.span + 4 * i) {}
};

// Y_r . x for the three rows r = i, i + 1, i + 2 of a contact block over their
// column ranges, in one pass over them (a sum per row and range: six independent chains)
template <class T, class Layout>
PHX_HD PHX_INLINE void lcp_factor_dot3(const LcpProblem<T, Layout>& p, int i, const T* x, T* out) {
  const FactorBlock<T, Layout> y(p, i);
  T a[2] = {T(0), T(0)}, b[2] = {T(0), T(0)}, c[2] = {T(0), T(0)};
  for (int h = 0; h < 2; ++h)
    for (int k = y.s[2 * h]; k < y.s[2 * h + 1]; ++k) {
      a[h] += y.y0[k] * x[k];
      b[h] += y.y1[k] * x[k];
      c[h] += y.y2[k] * x[k];
    }
  out[0] = a[0] + a[1];
  out[1] = b[0] + b[1];
  out[2] = c[0] + c[1];
}

// A's entries among a contact block's rows i, i + 1, i + 2, in one pass over their column
// ranges: g = (A_ii, A_{i+1,i+1}, A_{i+2,i+2}, A_{i+1,i}, A_{i+2,i}, A_{i+2,i+1})
template <class T, class Layout>
PHX_HD PHX_INLINE void lcp_factor_gram3(const LcpProblem<T, Layout>& p, int i, T* g) {
  const FactorBlock<T, Layout> y(p, i);
  for (int k = 0; k < 6; ++k) g[k] = T(0);
  for (int h = 0; h < 4; h += 2)
    for (int k = y.s[h]; k < y.s[h + 1]; ++k) {
      const T a = y.y0[k], b = y.y1[k], c = y.y2[k];
      g[0] += a * a;
      g[1] += b * b;
      g[2] += c * c;
      g[3] += b * a;
      g[4] += c * a;
      g[5] += c * b;
    }
}

// x += d_0 Y_i + d_1 Y_{i+1} + d_2 Y_{i+2} over a contact block's column ranges
template <class T, class Layout>
PHX_HD PHX_INLINE void lcp_factor_axpy3(const LcpProblem<T, Layout>& p, int i, const T* d, T* x) {
  const FactorBlock<T, Layout> y(p, i);
  for (int h = 0; h < 4; h += 2)
    for (int k = y.s[h]; k < y.s[h + 1]; ++k)
      x[k] += d[0] * y.y0[k] + d[1] * y.y1[k] + d[2] * y.y2[k];
}

}  // namespace detail

// Entry (i, j) of A = Y Y^T from the factor: Y_i . Y_j over the column ranges the two rows share.
template <class T, class Layout>
PHX_HD T lcp_factor_entry(const LcpProblem<T, Layout>& p, int i, int j) {
  const auto yi = p.Y + long(i) * p.ncol;
  const auto yj = p.Y + long(j) * p.ncol;
  const auto si = p.span + 4 * i;
  const auto sj = p.span + 4 * j;
  T s(0);
  for (int u = 0; u < 4; u += 2)
    for (int v = 0; v < 4; v += 2) {
      int a = si[u] > sj[v] ? si[u] : sj[v];
      int e = si[u + 1] < sj[v + 1] ? si[u + 1] : sj[v + 1];
      if (e > a) s += dot_n(yi + a, yj + a, e - a);
    }
  return s;
}

// vel = Y^T f (ncol) from the factor
template <class T, class Layout, class F>
PHX_HD void lcp_factor_velocity(const LcpProblem<T, Layout>& p, F f, T* vel) {
  for (int k = 0; k < p.ncol; ++k) vel[k] = T(0);
  for (int i = 0; i < p.n; ++i)
    if (f[i] != T(0)) detail::lcp_factor_axpy(p, i, f[i], vel);
}

// Whether PGS sweeps p in velocity form (on the factor, Y's nonzeros per row) rather than on A
// (n per row): the cheaper of the two, decided from the factor's column ranges alone, so that a
// step that builds A and one that does not (delassus' forward_only) sweep alike, to the bit.
template <class T, class Layout>
PHX_HD PHX_INLINE bool lcp_sweeps_on_factor(const LcpProblem<T, Layout>& p) {
  long cost = 0;
  for (int i = 0; i < p.n; ++i)
    cost += 2 * (p.span[4 * i + 1] - p.span[4 * i] + p.span[4 * i + 3] - p.span[4 * i + 2]);
  return cost < long(p.n) * p.n;
}

// Whether pgs, given its velocity scratch vel (null: none), sweeps p in velocity form: on the
// factor, where A is not given or the factor's sweeps are the cheaper (lcp_sweeps_on_factor);
// else on A (the dense sweeps, which pgs_lanes runs on packs)
template <class T, class Layout>
PHX_HD PHX_INLINE bool pgs_on_factor(const LcpProblem<T, Layout>& p, const T* vel) {
  return vel && p.Y && (!p.A || lcp_sweeps_on_factor(p));
}

// bounds of row i given the current solution f (friction rows follow their normal)
template <class T, class Layout, class F>
PHX_HD PHX_INLINE void lcp_bounds(const LcpProblem<T, Layout>& p, F f, int i, T& lo, T& hi) {
  int k = detail::lcp_findex(p, i);
  if (k >= 0) {
    T h = p.mu[i] * (f[k] > T(0) ? f[k] : T(0));
    lo = -h;
    hi = h;
  } else {
    lo = p.lo[i];
    hi = p.hi[i];
  }
}

// relative pivot below which the clamping-set system counts as rank deficient
template <class T>
PHX_HD T lcp_rank_tol() {
  return T(1e4) * T(detail::lcp_eps(value(T(0))));
}

// The rank tolerance of the exact finish after stalled sweeps (solve_lcp): lcp_rank_tol, but
// no coarser than a relative pivot of 1e-5. In float lcp_rank_tol is 1e-2, which counts the
// sets of a hand's contact and the elbow's limit (condition about 5e3) as rank deficient, so
// that their exact solution is never found.
template <class T>
PHX_HD T lcp_stall_rank_tol() {
  const T t = lcp_rank_tol<T>();
  return t < T(1e-5) ? t : T(1e-5);
}

// Under-relaxation of the sweeps that follow a stalled PGS (solve_lcp): plain Gauss-Seidel can
// cycle where a contact's friction lifts its own normal (A's normal-tangent entry above the
// normal's diagonal, as for a capsule on its side); damped sweeps do not.
constexpr double kLcpStallOmega = 0.7;

// Natural-map residual in velocity units: max_i A_ii |f_i - clamp(f_i - v_i / A_ii, lo_i, hi_i)|.
// Zero exactly at a solution; it is the correction the next Gauss-Seidel step would make, so it
// measures bound violation, complementarity and v = 0 on interior rows in one number. Without
// A, or with diag (A's diagonal, from PGS's sweeps on the factor), v comes from the factor
// through vel (p.ncol scalars of scratch, overwritten with Y^T f): the same bits whether A was
// built or not.
template <class T, class Layout, class F, class D = T*>
PHX_HD T lcp_residual(const LcpProblem<T, Layout>& p, F f, T* vel = nullptr, D diag = nullptr) {
  const bool by_factor = !p.A || diag;
  if (by_factor) lcp_factor_velocity(p, f, vel);
  T r(0);
  for (int i = 0; i < p.n; ++i) {
    T lo, hi;
    lcp_bounds(p, f, i, lo, hi);
    T d = diag ? (diag[i] > T(0) ? diag[i] : T(1)) : detail::lcp_diag(p, i);
    T v =
        by_factor ? p.b[i] + detail::lcp_factor_dot(p, i, vel) : detail::lcp_row_velocity(p, f, i);
    T e = d * abs(f[i] - clamp(f[i] - v / d, lo, hi));
    if (e > r) r = e;
  }
  return r;
}

namespace detail {
// max(m, |d| a): the running largest change of a row's velocity, a = A_ii >= 0
template <class T>
PHX_HD PHX_INLINE T max_abs_scaled(T m, T d, T a) {
  const T x = abs(d) * a;
  return x > m ? x : m;
}
}  // namespace detail

// Projected Gauss-Seidel: `iterations` sweeps over the rows in index order, starting from the f
// passed in (warm start), f_i <- clamp(f_i - omega v_i / A_ii, lo_i, hi_i) with friction bounds
// from the current normal impulse; omega in (0, 2) is the over-relaxation (1: plain
// Gauss-Seidel). Rows with A_ii <= 0 are left alone. f and scratch are pointers to T or Strided
// ones. scratch (2 n scalars; 4 n in velocity form, within lcp_storage(n)) keeps omega / A_ii,
// so that the sweeps multiply (a division per row and sweep lay on the sweep's critical path),
// and the rows' velocities v = b + A f, which a changed impulse updates by its column of A (a
// row's dot product is a chain of dependent adds; the column update is independent per entry
// and runs on vector lanes). Given p's factor and `vel` (p.ncol scalars), the sweeps run in
// velocity form where that is cheaper or A is not given: they carry vel = Y^T f and read
// v_i = b_i + Y_i . vel over the row's column ranges, so that a row costs its nonzeros rather
// than n (rows of different kinematic trees do not couple: 20 free bodies in a pile, 100 rows
// of 12 nonzeros each); a contact's three rows (lcp_contact_block) read and update vel in one
// pass, the later rows' velocities following the earlier rows' changes through the block's
// entries of A. Same iterates as the dense sweeps up to rounding. scratch then holds 4 n
// scalars.
// The sweeps stop early after one that changed no row's velocity (A_ii times its impulse's
// change) by more than `tolerance`; with tolerance 0, after one that changed nothing (every
// later sweep would repeat it), so that the result is that of all `iterations` sweeps. The
// sweeps run go to *sweeps when given.
// Returns lcp_residual(p, f), which the caller compares with its tolerance to set
// kStatusLcpNotConverged.
template <class T, class Layout, class F, class P>
PHX_HD T pgs(const LcpProblem<T, Layout>& p, F f, int iterations, T omega, P scratch,
             T* vel = nullptr, T tolerance = T(0), int* sweeps = nullptr) {
  const int n = p.n;
  const P step = scratch;
  if (pgs_on_factor(p, vel)) {
    // A's diagonal at diag; a contact block's A_{i+1,i}, A_{i+2,i}, A_{i+2,i+1} at
    // coupling[i..i+2], and block[i] nonzero at its first row
    const P coupling = scratch + n;
    const P block = scratch + 2 * n;
    const P diag = scratch + 3 * n;
    for (int i = 0; i < n; ++i) {
      block[i] = T(0);
      if (!detail::lcp_contact_block(p, i)) {
        diag[i] = detail::lcp_entry_ii(p, i);
        continue;
      }
      T g[6];
      detail::lcp_factor_gram3(p, i, g);
      for (int k = 0; k < 3; ++k) {
        block[i + k] = T(k == 0);
        diag[i + k] = g[k];
        coupling[i + k] = g[3 + k];
      }
      i += 2;
    }
    for (int i = 0; i < n; ++i) step[i] = diag[i] > T(0) ? omega / diag[i] : T(0);
    lcp_factor_velocity(p, f, vel);
    int it = 0;
    while (it < iterations) {
      ++it;
      T change(0);  // the sweep's largest change of a row's velocity
      for (int i = 0; i < n; ++i) {
        if (block[i] != T(0)) {
          T v[3], d[3] = {T(0), T(0), T(0)};
          detail::lcp_factor_dot3(p, i, vel, v);
          for (int k = 0; k < 3; ++k) {
            const int r = i + k;
            if (!(step[r] > T(0))) continue;
            T lo, hi;
            lcp_bounds(p, f, r, lo, hi);
            T fr = clamp(f[r] - step[r] * (p.b[r] + v[k]), lo, hi);
            d[k] = fr - f[r];
            f[r] = fr;
            change = detail::max_abs_scaled(change, d[k], diag[r]);
            if (k == 0) {
              v[1] += coupling[i] * d[0];
              v[2] += coupling[i + 1] * d[0];
            } else if (k == 1) {
              v[2] += coupling[i + 2] * d[1];
            }
          }
          if (d[0] != T(0) || d[1] != T(0) || d[2] != T(0)) detail::lcp_factor_axpy3(p, i, d, vel);
          i += 2;
          continue;
        }
        if (!(step[i] > T(0))) continue;
        T lo, hi;
        lcp_bounds(p, f, i, lo, hi);
        T v = p.b[i] + detail::lcp_factor_dot(p, i, vel);
        T fi = clamp(f[i] - step[i] * v, lo, hi);
        if (fi != f[i]) detail::lcp_factor_axpy(p, i, fi - f[i], vel);
        change = detail::max_abs_scaled(change, fi - f[i], diag[i]);
        f[i] = fi;
      }
      if (!(change > tolerance)) break;
    }
    if (sweeps) *sweeps = it;
    return lcp_residual(p, f, vel, diag);
  }
  const P v = scratch + n;
  for (int i = 0; i < n; ++i) {
    T aii = detail::lcp_entry_ii(p, i);
    step[i] = aii > T(0) ? omega / aii : T(0);
    v[i] = detail::lcp_row_velocity(p, f, i);
  }
  int it = 0;
  while (it < iterations) {
    ++it;
    T change(0);
    for (int i = 0; i < n; ++i) {
      if (!(step[i] > T(0))) continue;
      T lo, hi;
      lcp_bounds(p, f, i, lo, hi);
      const T fi = clamp(f[i] - step[i] * v[i], lo, hi);
      const T d = fi - f[i];
      change = detail::max_abs_scaled(change, d, detail::lcp_entry_ii(p, i));
      f[i] = fi;
      if (d != T(0)) {
        const typename Restricted<typename LcpProblem<T, Layout>::Reals>::type a =
            p.A + long(i) * n;  // column i, A being symmetric
        const typename Restricted<P>::type out = v;
        for (int j = 0; j < n; ++j) out[j] += a[j] * d;
      }
    }
    if (!(change > tolerance)) break;
  }
  if (sweeps) *sweeps = it;
  return lcp_residual(p, f);
}

// pgs's dense sweeps (those it runs without a factor) on W problems at once, one per lane of a
// host SIMD pack P of environments (host/lane.h), each lane's impulses and sweeps those of pgs on
// its own problem bit for bit: PgsLanes holds the problems in packs over n rows, the most any
// lane has, laid out so that the sweeps need no lane's own row count. Host code only.
template <class P, int W>
struct PgsLanes {
  static constexpr int kArrays = 8;  // packs of n: step, diag, v, f, lo, hi, mu, coupled
  int n = 0;
  const P* A = nullptr;  // n x n, row-major; a lane's rows and columns past its own count zero
  P* step = nullptr;     // omega / A_ii; 0 for a row pgs leaves alone and past a lane's rows
  P* diag = nullptr;     // A_ii
  P* v = nullptr;        // A f + b, from the warm start on, as pgs computes it
  P* f = nullptr;        // the impulses: the warm start, then the sweeps'
  P* lo = nullptr;       // bounds of the rows without a normal
  P* hi = nullptr;
  P* mu = nullptr;        // friction coefficient of a friction row
  P* coupled = nullptr;   // 1 in the lanes where the row is a friction row, else 0
  int* normal = nullptr;  // (n x W) lane k's row i: its normal's row, normal[i W + k] (-1: none)
  bool sweep[W] = {};     // whether lane k sweeps (pgs_lanes_in loaded it)

  // over n rows in packs (kArrays n of them) and normals (n W), every lane empty
  PgsLanes(int rows, const P* a, P* packs, int* normals)
      : n(rows),
        A(a),
        step(packs),
        diag(packs + rows),
        v(packs + 2 * rows),
        f(packs + 3 * rows),
        lo(packs + 4 * rows),
        hi(packs + 5 * rows),
        mu(packs + 6 * rows),
        coupled(packs + 7 * rows),
        normal(normals) {
    for (int i = 0; i < kArrays * n; ++i) packs[i] = P(0);
    for (int i = 0; i < n * W; ++i) normal[i] = -1;
  }
};

// Lane k of s from problem p (p.n <= s.n, A given: its entries s.A's lane k) and its warm start
// f, as pgs starts from them with over-relaxation omega
template <class P, int W, class T, class Layout, class F>
void pgs_lanes_in(const LcpProblem<T, Layout>& p, F f, T omega, int k, PgsLanes<P, W>& s) {
  for (int i = 0; i < p.n; ++i) {
    const T aii = detail::lcp_entry_ii(p, i);
    s.step[i].set(k, aii > T(0) ? omega / aii : T(0));
    s.diag[i].set(k, aii);
    s.v[i].set(k, detail::lcp_row_velocity(p, f, i));
    s.f[i].set(k, f[i]);
    const int r = detail::lcp_findex(p, i);
    s.normal[i * W + k] = r;
    if (r >= 0) {
      s.mu[i].set(k, p.mu[i]);
      s.coupled[i].set(k, T(1));
    } else {
      s.lo[i].set(k, p.lo[i]);
      s.hi[i].set(k, p.hi[i]);
    }
  }
  s.sweep[k] = true;
}

// pgs's sweeps on s's lanes: up to `iterations`, a lane stopping after the sweep that stops pgs
// for it (tolerance), whose number goes to sweeps[k] when sweeps is given. A lane's padded rows
// keep step 0, so that they never change, and the column updates of its own rows reach its
// padded rows' velocities alone, which it never reads.
template <class P, int W, class T>
void pgs_lanes(PgsLanes<P, W>& s, int iterations, T tolerance, int* sweeps = nullptr) {
  using M = Truth<P>;
  const int n = s.n;
  P* const f = s.f;
  P* const v = s.v;
  P on(T(0));  // 1 in the lanes still sweeping
  for (int k = 0; k < W; ++k) {
    on.set(k, s.sweep[k] ? T(1) : T(0));
    if (sweeps) sweeps[k] = 0;
  }
  int it = 0;
  while (it < iterations) {
    ++it;
    const M sweeping = on > P(T(0));
    P change(T(0));
    for (int i = 0; i < n; ++i) {
      const M active = sweeping && s.step[i] > P(T(0));
      P lo = s.lo[i], hi = s.hi[i];
      const M fr = s.coupled[i] > P(T(0));
      bool friction = false;
      for (int k = 0; k < W; ++k) friction = friction || fr.m[k] != 0;
      if (friction) {
        // lcp_bounds, lane by lane: +-mu f_n at the normal's current impulse
        P fn(T(0));
        for (int k = 0; k < W; ++k) {
          const int r = s.normal[i * W + k];
          if (r >= 0) fn.set(k, f[r][k]);
        }
        const P h = s.mu[i] * select(fn > P(T(0)), fn, P(T(0)));
        lo = select(fr, -h, lo);
        hi = select(fr, h, hi);
      }
      const P fi = clamp(f[i] - s.step[i] * v[i], lo, hi);
      const P d = fi - f[i];
      // detail::max_abs_scaled (|d| but for the sign of a zero, which no comparison sees)
      const P scaled = select(d < P(T(0)), -d, d) * s.diag[i];
      change = select(active && scaled > change, scaled, change);
      f[i] = select(active, fi, f[i]);
      const M moved = active && d != P(T(0));
      bool any = false;
      for (int k = 0; k < W; ++k) any = any || moved.m[k] != 0;
      if (!any) continue;
      const P* a = s.A + long(i) * n;  // column i, A being symmetric
      for (int j = 0; j < n; ++j) v[j] = select(moved, v[j] + a[j] * d, v[j]);
    }
    bool any = false;
    for (int k = 0; k < W; ++k) {
      if (on[k] == T(0)) continue;
      if (sweeps) sweeps[k] = it;
      if (!(change[k] > tolerance)) on.set(k, T(0));
      any = any || on[k] != T(0);
    }
    if (!any) break;
  }
}

namespace detail {

enum DantzigState : int { kRowUnprocessed = 0, kRowClamped, kRowAtLo, kRowAtHi };

// How row d enters a pass: +1 or -1, the direction its impulse is driven in, or 0 when it is
// already complementary at its current impulse and joins a set directly (written to state[d]).
template <class T, class V, class I>
PHX_HD PHX_INLINE T dantzig_entry(int d, const T* f, V v, V lo, V hi, I state) {
  if (v[d] > T(0)) {
    if (!(f[d] <= lo[d])) return T(-1);
    state[d] = kRowAtLo;
  } else if (v[d] < T(0)) {
    if (!(f[d] >= hi[d])) return T(1);
    state[d] = kRowAtHi;
  } else {
    state[d] = f[d] <= lo[d] ? kRowAtLo : f[d] >= hi[d] ? kRowAtHi : kRowClamped;
  }
  return T(0);
}

// The direction of driving row d by sigma: df_d = sigma, df_C = -A_CC^-1 A_Cd sigma over the
// clamped rows C (cidx; L holds A_CC's Cholesky factor), other rows 0; dv = A df. False when
// A_CC is singular.
template <class T, class Layout, class V, class I>
PHX_HD PHX_INLINE bool dantzig_direction(const LcpProblem<T, Layout>& p, int d, T sigma, I state,
                                         V L, V rhs, I cidx, V df, V dv) {
  const int n = p.n;
  const auto A = p.A;
  int m = 0;
  for (int i = 0; i < n; ++i)
    if (state[i] == kRowClamped) cidx[m++] = i;
  for (int a = 0; a < m; ++a)
    for (int c = 0; c < m; ++c) L[a * m + c] = A[cidx[a] * n + cidx[c]];
  if (m > 0 && !cholesky(L, m)) return false;
  for (int a = 0; a < m; ++a) rhs[a] = -sigma * A[cidx[a] * n + d];
  if (m > 0) cholesky_solve(L, m, rhs);
  for (int i = 0; i < n; ++i) df[i] = T(0);
  df[d] = sigma;
  for (int a = 0; a < m; ++a) df[cidx[a]] = rhs[a];
  for (int i = 0; i < n; ++i) {
    T s(0);
    for (int a = 0; a < m; ++a) s += A[i * n + cidx[a]] * df[cidx[a]];
    dv[i] = s + A[i * n + d] * sigma;
  }
  return true;
}

// The largest step along (df, dv) before some row changes set: the blocking row (block, -1 when
// nothing blocks: A_CC singular along the direction) and the set it moves to. Ties go to the
// driven row d, then to the lowest index.
template <class T, class Layout, class V, class I>
PHX_HD PHX_INLINE T dantzig_step(const LcpProblem<T, Layout>& p, int d, T sigma, const T* f, V v,
                                 V df, V dv, V lo, V hi, I state, int& block, int& to) {
  const int n = p.n;
  const T eps = T(lcp_eps(value(T(0))));
  T step = T(kLcpInf);
  block = -1;
  to = kRowUnprocessed;
  T tiny = eps * lcp_diag(p, d);
  if (sigma * dv[d] > tiny) {
    step = -v[d] / dv[d];
    block = d;
    to = kRowClamped;
  }
  T bound = sigma > T(0) ? hi[d] : lo[d];
  if (lcp_finite_bound(bound) && sigma * (bound - f[d]) < step) {
    step = sigma * (bound - f[d]);
    block = d;
    to = sigma > T(0) ? kRowAtHi : kRowAtLo;
  }
  for (int i = 0; i < n; ++i) {
    if (i == d) continue;
    T s = T(kLcpInf);
    int dest = kRowUnprocessed;
    T tiny_i = eps * lcp_diag(p, i);
    if (state[i] == kRowClamped) {
      if (df[i] > T(0) && lcp_finite_bound(hi[i])) {
        s = (hi[i] - f[i]) / df[i];
        dest = kRowAtHi;
      } else if (df[i] < T(0) && lcp_finite_bound(lo[i])) {
        s = (lo[i] - f[i]) / df[i];
        dest = kRowAtLo;
      }
    } else if (state[i] == kRowAtLo && dv[i] < -tiny_i) {
      s = -v[i] / dv[i];
      dest = kRowClamped;
    } else if (state[i] == kRowAtHi && dv[i] > tiny_i) {
      s = -v[i] / dv[i];
      dest = kRowClamped;
    }
    if (dest != kRowUnprocessed && s < step) {
      step = s;
      block = i;
      to = dest;
    }
  }
  return step;
}

// One pass of the boxed Dantzig pivoting method with fixed bounds lo, hi (Baraff, Fast contact
// force computation for nonpenetrating rigid bodies, SIGGRAPH 1994, section 6; the method of
// ODE's dLCP). Rows are brought in one at a time in index order; row d is driven (its impulse
// moved, the clamped rows adjusting to keep v = 0) until v_d = 0 or f_d reaches a bound, each
// blocking row changing set on the way. With ode_bounds, a friction row's bounds are set from
// its normal's impulse when the row is brought in (ODE's rule); otherwise lo, hi are used as
// given. Needs A_CC positive definite along the way (a small diagonal regulariser on A assures
// it); returns false on a singular pivot or when the pivot budget runs out. Its arrays besides f
// are pointers V to T and I to int of any kind (dantzig's storage).
template <class T, class Layout, class V, class I>
PHX_HD bool dantzig_pass(const LcpProblem<T, Layout>& p, T* f, V lo, V hi, bool ode_bounds, V L,
                         V v, V df, V dv, V rhs, I state, I cidx) {
  const int n = p.n;
  int budget = 4 * n * n + 16;
  // start from f = 0 projected on the bounds; unprocessed rows keep their impulse
  for (int i = 0; i < n; ++i) {
    state[i] = kRowUnprocessed;
    f[i] = lcp_findex(p, i) >= 0 ? T(0) : clamp(T(0), lo[i], hi[i]);
  }
  for (int i = 0; i < n; ++i) v[i] = lcp_row_velocity(p, f, i);

  for (int d = 0; d < n; ++d) {
    int k = lcp_findex(p, d);
    if (ode_bounds && k >= 0) {
      T h = p.mu[d] * (f[k] > T(0) ? f[k] : T(0));
      lo[d] = -h;
      hi[d] = h;
    }
    const T sigma = dantzig_entry(d, f, v, lo, hi, state);
    if (sigma == T(0)) continue;
    for (;;) {
      if (--budget < 0) return false;
      if (!dantzig_direction(p, d, sigma, state, L, rhs, cidx, df, dv)) return false;
      int block, to;
      T step = dantzig_step(p, d, sigma, f, v, df, dv, lo, hi, state, block, to);
      if (block < 0) return false;  // unbounded: A_CC singular along the direction
      if (step < T(0)) step = T(0);
      // move, then snap the blocking row exactly onto its new set
      for (int i = 0; i < n; ++i) {
        f[i] += step * df[i];
        v[i] += step * dv[i];
      }
      state[block] = to;
      if (to == kRowAtHi) f[block] = hi[block];
      if (to == kRowAtLo) f[block] = lo[block];
      if (to == kRowClamped) v[block] = T(0);
      if (block == d) break;
    }
    // refresh v against drift
    for (int i = 0; i < n; ++i) v[i] = lcp_row_velocity(p, f, i);
  }
  return true;
}

}  // namespace detail

// Nimble's classification of the rows of a solution f (section IV-A, appendix A), with tol in
// velocity units (impulse tolerance tol / A_ii):
//   fixed rows:    S    f at lo and v > tol;   S-hi  f at hi and v < -tol;   else C
//   friction rows: B    normal not C: held at +-mu f_n, side by the sign of v (f = 0 when f_n = 0)
//                  B+   f at +mu f_n and v < -tol;   B-  f at -mu f_n and v > tol;   else C
// A row at a bound with |v| <= tol is tied (T): it goes to C when tied_clamping (so that
// stabilisation spreads load over redundant contacts by the minimum-norm rule, independent of
// which solver found f), else to the bound's S or B class; either is a valid subgradient
// (section IV-B). The kLcpTied flag is set on it. Normals are classified before their friction
// rows. Returns the number of tied rows. cls is a pointer of any kind (plain or Strided).
template <class T, class Layout, class C>
PHX_HD int lcp_classify(const LcpProblem<T, Layout>& p, const T* f, T tol, bool tied_clamping,
                        C cls) {
  const int n = p.n;
  int ntied = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < n; ++i) {
      int k = detail::lcp_findex(p, i);
      if ((pass == 0) != (k < 0)) continue;
      T v = detail::lcp_row_velocity(p, f, i);
      if (k >= 0 && (cls[k] & kLcpClassMask) != kLcpClamping) {
        cls[i] = v < T(0) ? kLcpBoundedHi : kLcpBoundedLo;
        continue;
      }
      T lo, hi;
      lcp_bounds(p, f, i, lo, hi);
      T tf = tol / detail::lcp_diag(p, i);
      bool at_lo = f[i] - lo <= tf, at_hi = hi - f[i] <= tf;
      int lo_class = k >= 0 ? kLcpBoundedLo : kLcpSeparating;
      int hi_class = k >= 0 ? kLcpBoundedHi : kLcpSeparatingHi;
      if (at_lo && v > tol) {
        cls[i] = lo_class;
      } else if (at_hi && v < -tol) {
        cls[i] = hi_class;
      } else if (at_lo || at_hi) {
        // tied; the nearer bound names the side when not clamping
        bool lower = f[i] - lo <= hi - f[i];
        cls[i] = (tied_clamping ? kLcpClamping : (lower ? lo_class : hi_class)) | kLcpTied;
        ++ntied;
      } else {
        cls[i] = kLcpClamping;
      }
    }
  }
  return ntied;
}

// Complementarity-aware classification (Nimble section IV-D), from the plain one and the loss
// gradient with respect to the constraint velocities, dl_dv = J dl/dqd' (n; the caller forms it
// from the gradient of the next velocity, as Nimble does):
//   one-sided fixed rows (lo finite, hi infinite: contact normals, joint limits):
//     dl/dv_i < 0 (the loss wants the contact to separate) -> S, held at its current impulse;
//     dl/dv_i > 0 (the loss wants them closer)             -> C;  = 0 -> plain class
//   other fixed rows keep their plain class;
//   friction rows follow their normal: S when the normal went to S, else their plain class.
// The caller runs adj_lcp with both classifications and keeps the one with the larger
// ||dl/dqd||^2 + ||dl/dtau||^2 / dt (Nimble, section IV-D). The arrays are pointers of any kind.
template <class T, class Layout, class C, class D, class CL>
PHX_HD void lcp_classify_loss(const LcpProblem<T, Layout>& p, C cls, D dl_dv, CL cls_loss) {
  const int n = p.n;
  for (int i = 0; i < n; ++i) {
    cls_loss[i] = cls[i] & kLcpClassMask;
    if (detail::lcp_findex(p, i) >= 0) continue;
    bool one_sided = detail::lcp_finite_bound(p.lo[i]) && !detail::lcp_finite_bound(p.hi[i]);
    if (!one_sided) continue;
    if (dl_dv[i] < T(0)) cls_loss[i] = kLcpSeparating;
    if (dl_dv[i] > T(0)) cls_loss[i] = kLcpClamping;
  }
  for (int i = 0; i < n; ++i) {
    int k = detail::lcp_findex(p, i);
    if (k >= 0 && cls_loss[k] == kLcpSeparating) cls_loss[i] = kLcpSeparating;
  }
}

namespace detail {

PHX_HD PHX_INLINE bool lcp_is_bounded(int c) {
  c &= kLcpClassMask;
  return c == kLcpBoundedHi || c == kLcpBoundedLo;
}
template <class T>
PHX_HD PHX_INLINE T lcp_side(int c) {
  return (c & kLcpClassMask) == kLcpBoundedHi ? T(1) : T(-1);
}

// clamping rows in index order: cidx[a] = row of the a-th, pos[i] = a or -1; returns their count.
// Here and below, the arrays are pointers of any kind (C and I to int, R to T).
template <class T, class Layout, class C, class I>
PHX_HD int lcp_gather(const LcpProblem<T, Layout>& p, C cls, I cidx, I pos) {
  int m = 0;
  for (int i = 0; i < p.n; ++i) {
    pos[i] = -1;
    if ((cls[i] & kLcpClassMask) == kLcpClamping) {
      pos[i] = m;
      cidx[m++] = i;
    }
  }
  return m;
}

// a B row whose normal clamps follows it through E: f_j = s_j mu_j f_n(j)
template <class T, class Layout, class C, class I>
PHX_HD PHX_INLINE int lcp_coupled_normal(const LcpProblem<T, Layout>& p, C cls, I pos, int j) {
  int k = lcp_findex(p, j);
  return (k >= 0 && lcp_is_bounded(cls[j]) && pos[k] >= 0) ? k : -1;
}

// The linear system of a classification (Nimble eq. 13 with the friction coupling of
// appendix A): K f_C = r with
//   K = A_CC + A_CB E                       (m x m; not symmetric when friction couples)
//   r = -(b_C + A_CN c_N)                   (m)
// where B rows whose normal clamps are coupled through E (one entry s_j mu_j per row, in the
// column of its normal), and every other non-clamping row j holds the constant c_j: fixed[j]
// for S rows, s_j mu_j fixed[n(j)] for B rows whose normal does not clamp.
template <class T, class Layout, class C, class F, class I, class R>
PHX_HD void lcp_set_system(const LcpProblem<T, Layout>& p, C cls, F fixed, I cidx, I pos, int m,
                           R K, R r) {
  const int n = p.n;
  for (int a = 0; a < m; ++a) {
    int i = cidx[a];
    for (int c = 0; c < m; ++c) K[a * m + c] = p.A[i * n + cidx[c]];
    r[a] = -p.b[i];
  }
  for (int j = 0; j < n; ++j) {
    if (pos[j] >= 0) continue;
    int k = lcp_coupled_normal(p, cls, pos, j);
    if (k >= 0) {
      T e = lcp_side<T>(cls[j]) * p.mu[j];
      for (int a = 0; a < m; ++a) K[a * m + pos[k]] += p.A[cidx[a] * n + j] * e;
    } else {
      int kn = lcp_findex(p, j);
      T c =
          lcp_is_bounded(cls[j]) && kn >= 0 ? lcp_side<T>(cls[j]) * p.mu[j] * fixed[kn] : fixed[j];
      for (int a = 0; a < m; ++a) r[a] -= p.A[cidx[a] * n + j] * c;
    }
  }
}

}  // namespace detail

// The adjoint of A that adj_lcp gives, of rank two: adj_A[i][j] = z_i beta_j - y_i alpha_j, with
// y and z zero off the clamping rows. Four arrays of n, laid out by Layout (Arena::take_rows).
template <class T, class Layout = Contiguous>
struct LcpAdjointA {
  using Reals = RowsPtr<Layout, T>;
  Reals y;
  Reals alpha;
  Reals z;
  Reals beta;

  PHX_HD T operator()(int i, int j) const { return z[i] * beta[j] - y[i] * alpha[j]; }
};

// What the adjoint of the LCP solution map (adj_lcp, below) needs of a classification cls at a
// solution f, independently of the adjoint it maps: the clamping set (cidx, pos), and with K the
// system of lcp_set_system, z = K^+T f_C and the means to apply K^+T and I - K^+ K. Two forms:
// - factored (lcp_adjoint_factor): K and its complete orthogonal decomposition, solved per use;
// - explicit (lcp_adjoint_factor_explicit): the matrix K^+T itself and an orthonormal basis V
//   of K's null space (I - K^+ K = V V^T), matrix-vector products per use; built from the
//   decomposition once (cod_pinv_transpose, m - rank reflections), worth it when many reverse
//   passes share one solution (a one-step Jacobian's rows).
// The classification itself is not kept: its users pass it beside the factors (adj_lcp), so
// that it may lie in another layout than they do.
// Its arrays are laid out by Layout (Arena::take_rows), as is every storage of this header: a
// solver's scratch in a workspace's rows is interleaved across environments where they are.
template <class T, class Layout = Contiguous>
struct LcpAdjointFactor {
  using Reals = RowsPtr<Layout, T>;
  using Ints = RowsPtr<Layout, int>;
  int m = 0;      // clamping rows
  Ints cidx;      // clamping row of each column of K (m of n)
  Ints pos;       // column of row j in K, -1 off the clamping set (n)
  Reals z;        // K^+T f_C (m)
  int nnull = 0;  // m - rank: K's null space (0: K invertible, K^+ K = I)
  // factored form
  Reals K = nullptr;   // m x m
  Cod<T, Layout> cod;  // of K
  Reals r;             // the system's right-hand side (m), written by the factorisation
  // explicit form (null in the factored one)
  Reals pinv_t = nullptr;  // K^+T (m x m)
  Reals null_basis;        // V (m x nnull), orthonormal columns: I - K^+ K = V V^T
};

// The factored form over storage from arena (a counting Arena measures it), for up to n rows.
// The solve on a classification (detail::lcp_set_solution) uses the same layout, so that the
// factorisation a solver leaves in its scratch is this form's (lcp_adjoint_factor's known_rank).
template <class T, class Layout>
PHX_HD LcpAdjointFactor<T, Layout> lcp_adjoint_factor_carve(int n, Arena<T, Layout>& arena) {
  LcpAdjointFactor<T, Layout> F;
  F.K = arena.template take_rows<T>(long(n) * n);
  F.cod = cod_carve(n, arena);
  F.z = arena.template take_rows<T>(n);
  F.r = arena.template take_rows<T>(n);
  F.cidx = arena.template take_rows<int>(n);
  F.pos = arena.template take_rows<int>(n);
  return F;
}

namespace detail {

// The solution on a classification (Nimble appendix B), written to fnew: f_C from K f_C = r
// (lcp_set_system; minimum-norm least squares through a complete orthogonal decomposition when K
// is rank deficient, rank_tol relative to its largest pivot), S rows at their bound (a friction
// row marked S keeps its impulse in f), B rows at s mu f_n. The system, its decomposition and
// the clamping set go to F's factored form (lcp_adjoint_factor_carve, for at least n rows), fnew
// to F.z. Returns the decomposition's rank (0 without clamping rows).
template <class T, class Layout, class C, class FL>
PHX_HD int lcp_set_solution(const LcpProblem<T, Layout>& p, C cls, const T* f, T rank_tol,
                            LcpAdjointFactor<T, FL>& F) {
  const int n = p.n;
  const auto fnew = F.z;
  int m = lcp_gather(p, cls, F.cidx, F.pos);
  // constants of the non-clamping rows
  for (int j = 0; j < n; ++j) {
    int c = cls[j] & kLcpClassMask;
    bool fixed_row = lcp_findex(p, j) < 0;
    fnew[j] = f[j];
    if (fixed_row && c == kLcpSeparating) fnew[j] = p.lo[j];
    if (fixed_row && c == kLcpSeparatingHi) fnew[j] = p.hi[j];
  }
  // clamping impulses, minimum norm (the stabilised solution)
  if (m > 0) {
    lcp_set_system(p, cls, fnew, F.cidx, F.pos, m, F.K, F.r);
    F.cod.n = m;
    cod_factor(F.cod, F.K, rank_tol);
    cod_solve(F.cod, F.r);
    for (int a = 0; a < m; ++a) fnew[F.cidx[a]] = F.r[a];
  }
  // friction at its bound follows its normal
  for (int j = 0; j < n; ++j) {
    int k = lcp_findex(p, j);
    if (k >= 0 && lcp_is_bounded(cls[j])) fnew[j] = lcp_side<T>(cls[j]) * p.mu[j] * fnew[k];
  }
  return m > 0 ? F.cod.rank : 0;
}

}  // namespace detail

// Solve the LCP on a given classification (detail::lcp_set_solution) and accept the result when
// feasible: when lcp_residual <= tol it overwrites f and true is returned, otherwise f is left as
// it was. Used as the warm start: with the previous step's classification, an accepted solve
// replaces the full solver (Nimble reports > 95% hits). The storage is the caller's (scratch
// reals and iscratch integers within lcp_storage(p.n), as for every function here): plain
// pointers, or Strided ones into a workspace's interleaved rows (rows_arena).
template <class T, class Layout, class C, class RP, class IP>
PHX_HD bool lcp_solve_on_set(const LcpProblem<T, Layout>& p, C cls, T* f, T tol, T rank_tol,
                             RP scratch, IP iscratch) {
  auto arena = rows_arena<T>(scratch, iscratch);
  auto F = lcp_adjoint_factor_carve(p.n, arena);
  detail::lcp_set_solution(p, cls, f, rank_tol, F);
  const auto fnew = F.z;
  if (!(lcp_residual(p, fnew) <= tol)) return false;
  for (int j = 0; j < p.n; ++j) f[j] = fnew[j];
  return true;
}

// lcp_solve_on_set with a repair of the classification for degenerate problems. When A_CC is
// rank deficient the clamping rows have a family of solutions, and the minimum-norm one may
// leave the bounds that another member respects: a capsule lying on a plane has two equal
// friction rows along its axis, and the even split exceeds mu f_n at the lighter-loaded end.
// Then the clamping row with the largest bound violation (in velocity units, A_ii times the
// excess, above tol) is moved to the bound it crossed (S for fixed rows, B for friction rows,
// flagged kLcpTied: its velocity is zero) and the set re-solved, at most n times. The final
// classification is written to cls whether or not the result is accepted; f as in
// lcp_solve_on_set. When the result is accepted and factored_rank is given, the scratch holds
// the factorisation of cls's system (lcp_adjoint_factor's, which may reuse it) and
// *factored_rank its rank (-1 when cls was repaired after the last factorisation).
template <class T, class Layout, class RP, class IP>
PHX_HD bool lcp_solve_on_set_repaired(const LcpProblem<T, Layout>& p, int* cls, T* f, T tol,
                                      T rank_tol, RP scratch, IP iscratch,
                                      int* factored_rank = nullptr) {
  const int n = p.n;
  auto arena = rows_arena<T>(scratch, iscratch);
  auto F = lcp_adjoint_factor_carve(n, arena);
  const auto fnew = F.z;
  int rank = -1;
  for (int step = 0; step <= n; ++step) {
    int r = detail::lcp_set_solution(p, cls, f, rank_tol, F);
    int worst = -1, worst_class = 0;
    T worst_excess = tol;
    for (int i = 0; i < n; ++i) {
      if ((cls[i] & kLcpClassMask) != kLcpClamping) continue;
      T lo, hi;
      lcp_bounds(p, fnew, i, lo, hi);
      T d = detail::lcp_diag(p, i);
      bool friction = detail::lcp_findex(p, i) >= 0;
      if (d * (lo - fnew[i]) > worst_excess) {
        worst = i;
        worst_excess = d * (lo - fnew[i]);
        worst_class = friction ? kLcpBoundedLo : kLcpSeparating;
      }
      if (d * (fnew[i] - hi) > worst_excess) {
        worst = i;
        worst_excess = d * (fnew[i] - hi);
        worst_class = friction ? kLcpBoundedHi : kLcpSeparatingHi;
      }
    }
    if (worst < 0) {
      rank = r;
      break;
    }
    cls[worst] = worst_class | kLcpTied;
  }
  if (!(lcp_residual(p, fnew) <= tol)) return false;
  for (int j = 0; j < n; ++j) f[j] = fnew[j];
  if (factored_rank) *factored_rank = rank;
  return true;
}

namespace detail {

// dantzig's storage for up to n rows: the pivoting arrays (dantzig_pass) share theirs with the
// solve on a classification that follows each pass (lcp_solve_on_set); the bounds and the sets
// live past both
template <class T, class Layout = Contiguous>
struct DantzigStorage {
  using Reals = RowsPtr<Layout, T>;
  using Ints = RowsPtr<Layout, int>;
  Reals L, v, df, dv, rhs;  // pivoting: the clamped block's factor (n x n) and four vectors
  Ints cidx;                // pivoting: the clamped rows
  Reals lo, hi;             // the bounds of the pass (friction bounds frozen)
  Ints state, cls;          // each row's pivoting set, and the classification read off them

  PHX_HD static DantzigStorage carve(int n, Arena<T, Layout>& arena) {
    DantzigStorage d;
    Arena<T, Layout> pivoting = arena;
    d.L = pivoting.template take_rows<T>(long(n) * n);
    d.v = pivoting.template take_rows<T>(n);
    d.df = pivoting.template take_rows<T>(n);
    d.dv = pivoting.template take_rows<T>(n);
    d.rhs = pivoting.template take_rows<T>(n);
    d.cidx = pivoting.template take_rows<int>(n);
    lcp_adjoint_factor_carve(n, arena);
    arena.cover(pivoting);
    d.lo = arena.template take_rows<T>(n);
    d.hi = arena.template take_rows<T>(n);
    d.state = arena.template take_rows<int>(n);
    d.cls = arena.template take_rows<int>(n);
    return d;
  }
};

}  // namespace detail

// Dantzig (Baraff) pivoting for an exact small solve, with friction rows handled as in ODE and
// then made exact. Each pass solves the boxed LCP with the friction bounds frozen (first pass:
// set from the normal's impulse when the row is brought in, ODE's rule; later passes: mu_i f_n
// from the previous pass), then reads the classification off the pivoting sets (friction rows
// at a bound become B) and solves on it with the friction coupling f_B = s mu f_n exact
// (lcp_solve_on_set); the first feasible result (lcp_residual <= tol) is returned. A plain fixed
// point on the bounds converges only linearly in the normal-tangent coupling; this step lands on
// the exact solution as soon as the sets are right, usually in the first or second pass. A pass
// whose friction bounds are already consistent with its normals (to tol / A_ii) is accepted as
// it is. f is output only. Needs A_CC positive definite along the pivoting path (regularise A,
// or use pgs + stabilize). Returns false when no pass succeeded within max_passes.
template <class T, class Layout, class RP, class IP>
PHX_HD bool dantzig(const LcpProblem<T, Layout>& p, T* f, T tol, T rank_tol, int max_passes,
                    RP scratch, IP iscratch) {
  const int n = p.n;
  auto arena = rows_arena<T>(scratch, iscratch);
  using Storage = detail::DantzigStorage<T, typename LayoutOf<RP>::type>;
  const Storage d = Storage::carve(n, arena);
  const typename Storage::Reals lo = d.lo, hi = d.hi, v = d.v;
  const typename Storage::Ints state = d.state, cls = d.cls;
  for (int i = 0; i < n; ++i) {
    lo[i] = detail::lcp_findex(p, i) >= 0 ? T(0) : p.lo[i];
    hi[i] = detail::lcp_findex(p, i) >= 0 ? T(0) : p.hi[i];
  }
  for (int pass = 0; pass < max_passes; ++pass) {
    if (!detail::dantzig_pass(p, f, lo, hi, pass == 0, d.L, v, d.df, d.dv, d.rhs, state, d.cidx))
      return false;
    // consistency of the frozen friction bounds with the final normal impulses
    bool consistent = true;
    for (int i = 0; i < n; ++i) {
      int k = detail::lcp_findex(p, i);
      if (k < 0) continue;
      T h = p.mu[i] * (f[k] > T(0) ? f[k] : T(0));
      T tf = tol / detail::lcp_diag(p, i);
      bool at_bound = state[i] == detail::kRowAtLo || state[i] == detail::kRowAtHi;
      if ((at_bound && abs(h - hi[i]) > tf) || abs(f[i]) > h + tf) consistent = false;
      lo[i] = -h;
      hi[i] = h;
    }
    if (consistent) return true;
    // classification from the pivoting sets, then the exact coupled solve on it
    for (int i = 0; i < n; ++i) {
      int k = detail::lcp_findex(p, i);
      int s = state[i];
      if (k < 0) {
        cls[i] = s == detail::kRowAtLo   ? kLcpSeparating
                 : s == detail::kRowAtHi ? kLcpSeparatingHi
                                         : kLcpClamping;
      } else if (s == detail::kRowAtLo || s == detail::kRowAtHi ||
                 state[k] != detail::kRowClamped) {
        bool upper = s == detail::kRowAtHi || (s == detail::kRowClamped && v[i] < T(0));
        cls[i] = upper ? kLcpBoundedHi : kLcpBoundedLo;
      } else {
        cls[i] = kLcpClamping;
      }
    }
    if (lcp_solve_on_set(p, cls, f, tol, rank_tol, scratch, iscratch)) return true;
  }
  return false;
}

// Nimble's stabilisation (appendix B): classify a solver's f (tied rows clamping), re-solve on
// that set for the exact, minimum-norm solution (with lcp_solve_on_set_repaired's repair of
// degenerate sets); if that is infeasible and some rows were tied, classify them to their
// bound's side and try once more. On success f holds the stabilised
// solution and cls its classification, for adj_lcp; on failure f is unchanged and cls is the
// plain classification of f (tied rows clamping). Returns whether f was replaced.
template <class T, class Layout, class RP, class IP>
PHX_HD bool stabilize(const LcpProblem<T, Layout>& p, T* f, int* cls, T tol, T rank_tol, RP scratch,
                      IP iscratch, int* factored_rank = nullptr) {
  int ntied = lcp_classify(p, f, tol, true, cls);
  if (lcp_solve_on_set_repaired(p, cls, f, tol, rank_tol, scratch, iscratch, factored_rank))
    return true;
  if (ntied == 0) {
    lcp_classify(p, f, tol, true, cls);
    return false;
  }
  lcp_classify(p, f, tol, false, cls);
  if (lcp_solve_on_set_repaired(p, cls, f, tol, rank_tol, scratch, iscratch, factored_rank))
    return true;
  lcp_classify(p, f, tol, true, cls);
  return false;
}

// the explicit form for up to n rows over storage from arena (a counting Arena measures it)
template <class T, class Layout>
PHX_HD LcpAdjointFactor<T, Layout> lcp_adjoint_explicit_carve(int n, Arena<T, Layout>& arena) {
  LcpAdjointFactor<T, Layout> F;
  F.pinv_t = arena.template take_rows<T>(long(n) * n);
  F.null_basis = arena.template take_rows<T>(long(n) * n);
  F.z = arena.template take_rows<T>(n);
  F.cidx = arena.template take_rows<int>(n);
  F.pos = arena.template take_rows<int>(n);
  return F;
}

// Factor classification cls (a pointer of any kind) of the solution f into F (factored form,
// carved for at least p.n rows). The system's right-hand side is written to F.r and not used.
// known_rank >= 0 says that F's storage already holds the
// factorisation of cls's system, of that rank (the solver's last, lcp_solve_on_set_repaired),
// which is then kept.
template <class T, class Layout, class C, class FL>
PHX_HD void lcp_adjoint_factor(const LcpProblem<T, Layout>& p, const T* f, C cls, T rank_tol,
                               LcpAdjointFactor<T, FL>& F, int known_rank = -1) {
  F.m = detail::lcp_gather(p, cls, F.cidx, F.pos);
  F.nnull = 0;
  if (F.m == 0) return;
  F.cod.n = F.m;
  if (known_rank >= 0) {
    F.cod.rank = known_rank;
  } else {
    detail::lcp_set_system(p, cls, f, F.cidx, F.pos, F.m, F.K, F.r);
    cod_factor(F.cod, F.K, rank_tol);
  }
  F.nnull = F.m - F.cod.rank;
  for (int a = 0; a < F.m; ++a) F.z[a] = f[F.cidx[a]];
  cod_solve_transpose(F.cod, F.z);
}

namespace detail {

// lcp_adjoint_factor_explicit's storage: the factored form it converts, and a vector
template <class T, class Layout = Contiguous>
struct ExplicitStorage {
  LcpAdjointFactor<T, Layout> factored;
  RowsPtr<Layout, T> x;  // n

  PHX_HD static ExplicitStorage carve(int n, Arena<T, Layout>& arena) {
    ExplicitStorage e;
    e.factored = lcp_adjoint_factor_carve(n, arena);
    e.x = arena.template take_rows<T>(n);
    return e;
  }
};

}  // namespace detail

// The explicit form of classification cls into E (carved by lcp_adjoint_explicit_carve for at
// least p.n rows), through the factored form over caller scratch (detail::ExplicitStorage, as
// every function here within lcp_storage(p.n)). known_rank as in lcp_adjoint_factor, for the
// factorisation in scratch.
template <class T, class Layout, class C, class EL, class RP, class IP>
PHX_HD void lcp_adjoint_factor_explicit(const LcpProblem<T, Layout>& p, const T* f, C cls,
                                        T rank_tol, LcpAdjointFactor<T, EL>& E, RP scratch,
                                        IP iscratch, int known_rank = -1) {
  const int n = p.n;
  auto arena = rows_arena<T>(scratch, iscratch);
  const auto w = detail::ExplicitStorage<T, typename LayoutOf<RP>::type>::carve(n, arena);
  auto F = w.factored;
  lcp_adjoint_factor(p, f, cls, rank_tol, F, known_rank);
  const int m = F.m;
  E.m = m;
  E.nnull = F.nnull;
  for (int j = 0; j < n; ++j) E.pos[j] = F.pos[j];
  for (int a = 0; a < m; ++a) {
    E.cidx[a] = F.cidx[a];
    E.z[a] = F.z[a];
  }
  cod_pinv_transpose(F.cod, E.pinv_t, w.x);
  cod_null_basis(F.cod, E.null_basis, w.x);
}

// adj_lcp's vectors for up to n rows
template <class T, class Layout = Contiguous>
struct LcpAdjointScratch {
  using Reals = RowsPtr<Layout, T>;
  Reals g, y, q, t;  // n each

  PHX_HD static LcpAdjointScratch carve(int n, Arena<T, Layout>& arena) {
    LcpAdjointScratch s;
    s.g = arena.template take_rows<T>(n);
    s.y = arena.template take_rows<T>(n);
    s.q = arena.template take_rows<T>(n);
    s.t = arena.template take_rows<T>(n);
    return s;
  }
};

// Adjoint of the LCP solution map f*(A, b, mu) at a solution f on the classification cls, whose
// factors F holds (either form) (plain from stabilize, or loss-driven from lcp_classify_loss). With
// K, r of lcp_set_system, the non-clamping rows held at their values in f:
//   f_C = K^+ r,  f_B = s mu f_n (B rows),  f_S constant,
// and Nimble eq. 20 corrected (the printed second term has the wrong sign) and extended to the
// rank-deficient case in place of the malformed eq. 22, from the derivative of the
// pseudo-inverse (Golub & Pereyra, SIAM J. Numer. Anal. 10, 1973) at a consistent system
// (K f_C = r exactly):
//   df_C = -K^+ (dK f_C - dr) + (I - K^+ K) dK^T K^+T f_C
// (for invertible K the last term vanishes: df_C = -K^-1 (dK f_C + db_C + ...)). Reverse mode,
// with g = adj_f_C + E^T adj_f_B, y = K^+T g, z = K^+T f_C, q = (I - K^+ K) g:
//   adj_K = -y f_C^T + z q^T,  adj_r = y,
// then adj_K and adj_r are spread onto the entries of A, b and mu that built them. S rows pass
// no gradient. A loss-driven classification need not make K f_C = r consistent (a row moved to
// C may have v != 0); the same formula is used then, which is Nimble's.
// adj_A (entries as read: not symmetrised) has rank two, every entry being -y_a alpha_j +
// z_a beta_j on a clamping row a: it is written (overwritten) as its factors, LcpAdjointA.
// Accumulates into adj_b (n) and adj_mu (n, nonzero on friction rows; may be null when p.mu is).
// The problem and solution may be of another scalar S than the adjoints (a Lane of seeds reads
// the forward problem in place). cls, adj_f, adj_b and adj_mu are pointers of any kind.
template <class T, class S, class Layout, class FL, class C, class AF, class AL, class R, class WL>
PHX_HD void adj_lcp(const LcpProblem<S, Layout>& p, const S* f, const LcpAdjointFactor<T, FL>& F,
                    C cls, AF adj_f, const LcpAdjointA<T, AL>& adj_A, R adj_b, R adj_mu,
                    const LcpAdjointScratch<T, WL>& work) {
  const int n = p.n, m = F.m;
  const auto cidx = F.cidx, pos = F.pos;
  const auto z = F.z;
  const auto g = work.g, y = work.y, q = work.q;
  for (int j = 0; j < n; ++j) adj_A.y[j] = adj_A.alpha[j] = adj_A.z[j] = adj_A.beta[j] = T(0);

  // B rows: f_j = s_j mu_j f_n(j), with f_n clamping (through E) or held
  for (int a = 0; a < m; ++a) g[a] = adj_f[cidx[a]];
  for (int j = 0; j < n; ++j) {
    int k = detail::lcp_findex(p, j);
    if (k < 0 || !detail::lcp_is_bounded(cls[j])) continue;
    T s = detail::lcp_side<T>(cls[j]);
    if (adj_mu) adj_mu[j] += s * f[k] * adj_f[j];
    if (pos[k] >= 0) g[pos[k]] += s * p.mu[j] * adj_f[j];
  }
  if (m == 0) return;

  // y = K^+T g, q = g - K^+ K g (zero for an invertible K)
  for (int a = 0; a < m; ++a) q[a] = T(0);
  if (F.pinv_t) {
    for (int a = 0; a < m; ++a) y[a] = dot_n(F.pinv_t + a * m, g, m);
    // q = V (V^T g)
    const int k = F.nnull;
    if (k > 0) {
      const auto t = work.t;
      for (int j = 0; j < k; ++j) t[j] = T(0);
      for (int a = 0; a < m; ++a)
        for (int j = 0; j < k; ++j) t[j] += F.null_basis[a * k + j] * g[a];
      for (int a = 0; a < m; ++a) q[a] = dot_n(F.null_basis + a * k, t, k);
    }
  } else {
    for (int a = 0; a < m; ++a) y[a] = g[a];
    cod_solve_transpose(F.cod, y);
    if (F.nnull > 0) {
      for (int a = 0; a < m; ++a) q[a] = dot_n(F.K + a * m, g, m);
      cod_solve(F.cod, q);
      for (int a = 0; a < m; ++a) q[a] = g[a] - q[a];
    }
  }

  // adj_K[a][c] = -y_a f_C,c + z_a q_c onto K = A_CC + A_CB E
  for (int a = 0; a < m; ++a) {
    int i = cidx[a];
    adj_A.y[i] = y[a];
    adj_A.z[i] = z[a];
    adj_A.alpha[i] = f[i];
    adj_A.beta[i] = q[a];
  }
  for (int j = 0; j < n; ++j) {
    if (pos[j] >= 0) continue;
    int k = detail::lcp_coupled_normal(p, cls, pos, j);
    T s = detail::lcp_side<T>(cls[j]);
    if (k >= 0) {
      // coupled B row: K[:, pos[k]] += A[C, j] s mu_j
      int c = pos[k];
      T e = s * p.mu[j];
      adj_A.alpha[j] = f[k] * e;
      adj_A.beta[j] = q[c] * e;
      T dmu(0);
      for (int a = 0; a < m; ++a) dmu += (-y[a] * f[k] + z[a] * q[c]) * p.A[cidx[a] * n + j];
      if (adj_mu) adj_mu[j] += s * dmu;
    } else {
      // held row: r -= A[C, j] c_j, c_j = f_j (S) or s mu_j f_n(j) (B)
      int kn = detail::lcp_findex(p, j);
      bool held_b = detail::lcp_is_bounded(cls[j]) && kn >= 0;
      T cj = held_b ? s * p.mu[j] * f[kn] : f[j];
      adj_A.alpha[j] = cj;
      T dc(0);
      for (int a = 0; a < m; ++a) dc -= y[a] * p.A[cidx[a] * n + j];
      if (held_b && adj_mu) adj_mu[j] += s * f[kn] * dc;
    }
  }
  // r = -b_C - ...
  for (int a = 0; a < m; ++a) adj_b[cidx[a]] -= y[a];
}

namespace detail {

// the single-use adj_lcp's storage: the factored form and adj_lcp's vectors
template <class T, class Layout = Contiguous>
struct AdjLcpStorage {
  LcpAdjointFactor<T, Layout> factored;
  LcpAdjointScratch<T, Layout> work;

  PHX_HD static AdjLcpStorage carve(int n, Arena<T, Layout>& arena) {
    AdjLcpStorage a;
    a.factored = lcp_adjoint_factor_carve(n, arena);
    a.work = LcpAdjointScratch<T, Layout>::carve(n, arena);
    return a;
  }
};

}  // namespace detail

// adj_lcp for a single use: factors cls into the caller's scratch first (within lcp_storage(n),
// as every function of this header).
template <class T, class Layout, class C, class AF, class AL, class R, class RP, class IP>
PHX_HD void adj_lcp(const LcpProblem<T, Layout>& p, const T* f, C cls, AF adj_f,
                    const LcpAdjointA<T, AL>& adj_A, R adj_b, R adj_mu, T rank_tol, RP scratch,
                    IP iscratch) {
  auto arena = rows_arena<T>(scratch, iscratch);
  auto s = detail::AdjLcpStorage<T, typename LayoutOf<RP>::type>::carve(p.n, arena);
  lcp_adjoint_factor(p, f, cls, rank_tol, s.factored);
  adj_lcp(p, f, s.factored, cls, adj_f, adj_A, adj_b, adj_mu, s.work);
}

// The caller's block for every function of this header on up to n rows: the largest of their
// layouts, each measured over a counting Arena; reals in units of the problem's scalar. Every
// array in it is taken by take_rows, so that it may lie in a workspace's rows, interleaved
// (rows_arena). pgs's n scalars lie within any of them; the solve on a classification
// (lcp_solve_on_set, its repair, stabilize) lays out the factored form, which the others contain.
PHX_HD inline ScratchSize lcp_storage(int n) {
  Arena<double> block, alternative;
  detail::DantzigStorage<double>::carve(n, block);
  detail::AdjLcpStorage<double>::carve(n, alternative);
  block.cover(alternative);
  alternative = Arena<double>();
  detail::ExplicitStorage<double>::carve(n, alternative);
  block.cover(alternative);
  return block.used();
}

}  // namespace phx
