// Boxed LCP: solvers against closed forms and each other, Nimble's stabilisation and warm start,
// the LCP adjoint against central differences and dual numbers, and the minimum-norm solve.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "phalanx/lcp.h"
#include "phalanx/math/dense.h"
#include "phalanx/math/dual.h"

namespace phx {
namespace {

using D1 = Dual<double, 1>;

// an owning LCP; rows of a contact are [normal, tangent 1, tangent 2]
template <class T = double>
struct Problem {
  int n = 0;
  std::vector<T> A, b, lo, hi, mu;
  std::vector<int> findex;

  explicit Problem(int rows)
      : n(rows),
        A(rows * rows),
        b(rows),
        lo(rows),
        hi(rows, T(kLcpInf)),
        mu(rows),
        findex(rows, -1) {}
  LcpProblem<T> view() const {
    return {n, A.data(), b.data(), lo.data(), hi.data(), mu.data(), findex.data()};
  }
  // pgs's scratch
  T* pgs_scratch() const {
    step.resize(4 * size_t(n));
    return step.data();
  }
  mutable std::vector<T> step;
  template <class S>
  Problem<S> cast() const {
    Problem<S> q(n);
    for (int i = 0; i < n * n; ++i) q.A[i] = S(A[i]);
    for (int i = 0; i < n; ++i) {
      q.b[i] = S(b[i]);
      q.lo[i] = S(lo[i]);
      q.hi[i] = S(hi[i]);
      q.mu[i] = S(mu[i]);
      q.findex[i] = findex[i];
    }
    return q;
  }
};

// caller scratch of lcp.h
template <class T>
struct Work {
  std::vector<T> s;
  std::vector<int> is;
  explicit Work(int n) : s(lcp_storage(n).reals), is(lcp_storage(n).ints) {}
};

// storage for what carve(arena) takes, measured by running it over a counting Arena first;
// returns the carve over the storage
struct Storage {
  std::vector<double> reals;
  std::vector<int> ints;
  template <class Carve>
  auto carve(Carve carve) {
    Arena<double> counting;
    carve(counting);
    reals.assign(counting.nreal, 0.0);
    ints.assign(counting.nint, 0);
    Arena<double> arena(reals.data(), ints.data());
    return carve(arena);
  }
};

double uniform(std::mt19937& rng, double a, double b) {
  return std::uniform_real_distribution<double>(a, b)(rng);
}

// K = U V^T of random U, V (n x r): an n x n matrix of rank r, not symmetric
struct LowRank {
  std::vector<double> U, V, K;
};
LowRank low_rank(std::mt19937& rng, int n, int r) {
  LowRank m{std::vector<double>(n * r), std::vector<double>(n * r), std::vector<double>(n * n)};
  for (double& x : m.U) x = uniform(rng, -1, 1);
  for (double& x : m.V) x = uniform(rng, -1, 1);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < r; ++k) m.K[i * n + j] += m.U[i * r + k] * m.V[j * r + k];
  return m;
}

// Delassus matrix A = J M^-1 J^T + reg I of random J (rows x nv) and SPD M = B B^T + nv I
std::vector<double> delassus(std::mt19937& rng, int rows, int nv, double reg) {
  std::vector<double> B(nv * nv), M(nv * nv), J(rows * nv), MinvJt(nv * rows), A(rows * rows);
  for (double& x : B) x = uniform(rng, -1, 1);
  for (int i = 0; i < nv; ++i)
    for (int j = 0; j < nv; ++j) {
      double s = i == j ? nv : 0;
      for (int k = 0; k < nv; ++k) s += B[i * nv + k] * B[j * nv + k];
      M[i * nv + j] = s;
    }
  for (double& x : J) x = uniform(rng, -1, 1);
  cholesky(M.data(), nv);
  for (int r = 0; r < rows; ++r) {
    std::vector<double> col(J.begin() + r * nv, J.begin() + (r + 1) * nv);
    cholesky_solve(M.data(), nv, col.data());
    for (int k = 0; k < nv; ++k) MinvJt[k * rows + r] = col[k];
  }
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < rows; ++j) {
      double s = i == j ? reg : 0;
      for (int k = 0; k < nv; ++k) s += J[i * nv + k] * MinvJt[k * rows + j];
      A[i * rows + j] = s;
    }
  return A;
}

// ncontact contacts with pyramid friction: normals b in [-1, 0.5] (most clamp), tangents
// scaled by tangent_scale (large: sliding), mu in [0.3, 0.9]
Problem<> random_contacts(std::mt19937& rng, int ncontact, int nv, double tangent_scale) {
  Problem<> p(3 * ncontact);
  p.A = delassus(rng, p.n, nv, 1e-3);
  for (int c = 0; c < ncontact; ++c) {
    int r = 3 * c;
    p.b[r] = uniform(rng, -1, 0.5);
    for (int t = 1; t <= 2; ++t) {
      p.b[r + t] = tangent_scale * uniform(rng, -1, 1);
      p.findex[r + t] = r;
      p.mu[r + t] = uniform(rng, 0.3, 0.9);
    }
  }
  return p;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

// dantzig followed by stabilize: the forward map the adjoint differentiates
bool solve_stabilized(const Problem<>& p, std::vector<double>& f, std::vector<int>& cls,
                      double tol = 1e-9) {
  Work<double> w(p.n);
  f.assign(p.n, 0.0);
  cls.assign(p.n, 0);
  if (!dantzig(p.view(), f.data(), tol, 1e-10, 8, w.s.data(), w.is.data())) return false;
  return stabilize(p.view(), f.data(), cls.data(), tol, 1e-10, w.s.data(), w.is.data());
}

// lcp_storage holds every layout of the header, and the arrays a function keeps live across a
// call that reuses the block lie past that call's layout: dantzig's bounds and sets past the
// solve on a classification that follows each pass (the factored form), the explicit
// conversion's vector and the single-use adjoint's vectors past the factored form they read.
TEST(Lcp, StorageHoldsEveryLayoutAndKeepsLiveArraysApart) {
  for (int n : {1, 3, 12}) {
    const ScratchSize block = lcp_storage(n);
    std::vector<double> r(block.reals);
    std::vector<int> q(block.ints);
    long most_reals = 0, most_ints = 0;  // of the layouts
    auto fits = [&](const Arena<double>& a) {
      EXPECT_LE(a.nreal, block.reals) << n;
      EXPECT_LE(a.nint, block.ints) << n;
      most_reals = std::max(most_reals, a.nreal);
      most_ints = std::max(most_ints, a.nint);
    };
    Arena<double> factored(r.data(), q.data());
    lcp_adjoint_factor_carve(n, factored);
    const double* real_end = r.data() + factored.nreal;
    const int* int_end = q.data() + factored.nint;

    Arena<double> a(r.data(), q.data());
    auto d = detail::DantzigStorage<double>::carve(n, a);
    fits(a);
    for (const double* p : {d.lo, d.hi}) EXPECT_GE(p, real_end) << n;
    for (const int* p : {d.state, d.cls}) EXPECT_GE(p, int_end) << n;
    EXPECT_EQ(d.cls + n, q.data() + a.nint) << n;

    a = Arena<double>(r.data(), q.data());
    auto e = detail::ExplicitStorage<double>::carve(n, a);
    fits(a);
    EXPECT_GE(e.x, real_end) << n;

    a = Arena<double>(r.data(), q.data());
    auto s = detail::AdjLcpStorage<double>::carve(n, a);
    fits(a);
    for (const double* p : {s.work.g, s.work.y, s.work.q, s.work.t}) EXPECT_GE(p, real_end) << n;
    // and no larger than the largest of them
    EXPECT_EQ(most_reals, block.reals) << n;
    EXPECT_EQ(most_ints, block.ints) << n;
  }
}

TEST(Lcp, FrictionlessSingleRowMatchesClosedForm) {
  // one contact normal: f = max(0, -b / A)
  for (double a : {0.5, 2.0})
    for (double b : {-1.5, -0.1, 0.0, 0.3, 2.0}) {
      Problem<> p(1);
      p.A[0] = a;
      p.b[0] = b;
      double expect = std::max(0.0, -b / a);
      Work<double> w(1);
      std::vector<double> f1 = {0.7}, f2 = {0.0};
      EXPECT_LT(pgs(p.view(), f1.data(), 1, 1.0, p.pgs_scratch()), 1e-15);
      EXPECT_NEAR(f1[0], expect, 1e-15);
      ASSERT_TRUE(dantzig(p.view(), f2.data(), 1e-12, 1e-10, 2, w.s.data(), w.is.data()));
      EXPECT_NEAR(f2[0], expect, 1e-15);
      std::vector<int> cls(1);
      ASSERT_TRUE(
          stabilize(p.view(), f2.data(), cls.data(), 1e-12, 1e-10, w.s.data(), w.is.data()));
      EXPECT_NEAR(f2[0], expect, 1e-15);
      EXPECT_EQ(cls[0] & kLcpClassMask, b > 0 ? kLcpSeparating : kLcpClamping);
      EXPECT_EQ((cls[0] & kLcpTied) != 0, b == 0.0);
    }
}

TEST(Lcp, PointMassOnPlaneSticksOrSlides) {
  // a block that cannot rotate (a point mass m) on the plane z = 0, rows [n, t_x, t_y], J = I,
  // A = I / m, b = v - dt g e_z. Normal: f_n = m (g dt - v_z). Per pyramid direction:
  // sticking f_t = -m v_t when m |v_t| <= mu f_n, else sliding f_t = -sign(v_t) mu f_n.
  const double m = 2.0, dt = 0.01, g = 9.81, mu = 0.5;
  for (double vx : {0.01, -0.03, 0.2, -1.0})
    for (double vy : {0.0, 0.02, -0.5}) {
      Problem<> p(3);
      for (int i = 0; i < 3; ++i) p.A[i * 3 + i] = 1 / m;
      p.b = {-0.1 - dt * g, vx, vy};
      p.findex = {-1, 0, 0};
      p.mu = {0, mu, mu};
      double fn = m * (g * dt + 0.1);
      auto tangent = [&](double vt) {
        return std::abs(m * vt) <= mu * fn ? -m * vt : -std::copysign(mu * fn, vt);
      };
      std::vector<double> expect = {fn, tangent(vx), tangent(vy)};
      Work<double> w(3);
      std::vector<double> f_pgs(3, 0.0), f_dz(3, 0.0);
      EXPECT_LT(pgs(p.view(), f_pgs.data(), 5, 1.0, p.pgs_scratch()), 1e-14);
      ASSERT_TRUE(dantzig(p.view(), f_dz.data(), 1e-12, 1e-10, 3, w.s.data(), w.is.data()));
      for (int i = 0; i < 3; ++i) {
        EXPECT_NEAR(f_pgs[i], expect[i], 1e-14);
        EXPECT_NEAR(f_dz[i], expect[i], 1e-14);
      }
      std::vector<int> cls(3);
      ASSERT_TRUE(
          stabilize(p.view(), f_dz.data(), cls.data(), 1e-12, 1e-10, w.s.data(), w.is.data()));
      EXPECT_EQ(cls[0], kLcpClamping);
      for (int t = 1; t <= 2; ++t) {
        double vt = t == 1 ? vx : vy;
        int c =
            std::abs(m * vt) <= mu * fn ? kLcpClamping : (vt > 0 ? kLcpBoundedLo : kLcpBoundedHi);
        EXPECT_EQ(cls[t], c) << "vt " << vt;
        EXPECT_NEAR(f_dz[t], expect[t], 1e-14);
      }
    }
}

TEST(Lcp, PgsAndDantzigAgreeOnRandomFrictionProblems) {
  // A = J M^-1 J^T + 1e-3 I from random J (9 rows, 12 dofs), three contacts with friction
  std::mt19937 rng(11);
  double worst_res_dz = 0, worst_res_pgs = 0, worst_diff = 0, worst_float = 0;
  for (int trial = 0; trial < 30; ++trial) {
    Problem<> p = random_contacts(rng, 3, 12, trial % 2 ? 2.0 : 0.3);
    Work<double> w(p.n);
    std::vector<double> f_dz(p.n, 0.0), f_pgs(p.n, 0.0), f_sor(p.n, 0.0);
    ASSERT_TRUE(dantzig(p.view(), f_dz.data(), 1e-12, 1e-10, 6, w.s.data(), w.is.data()));
    double res_dz = lcp_residual(p.view(), f_dz.data());
    double res_pgs = pgs(p.view(), f_pgs.data(), 3000, 1.0, p.pgs_scratch());
    double res_sor = pgs(p.view(), f_sor.data(), 3000, 1.3, p.pgs_scratch());
    EXPECT_LT(res_dz, 1e-12);
    EXPECT_LT(res_pgs, 1e-10);
    EXPECT_LT(res_sor, 1e-10);
    EXPECT_LT(max_abs_diff(f_dz, f_pgs), 1e-10);
    EXPECT_LT(max_abs_diff(f_dz, f_sor), 1e-10);
    // warm started from a solution, one sweep keeps it
    std::vector<double> f_warm = f_dz;
    EXPECT_LT(pgs(p.view(), f_warm.data(), 1, 1.0, p.pgs_scratch()), 1e-12);
    EXPECT_LT(max_abs_diff(f_dz, f_warm), 1e-12);
    worst_res_dz = std::max(worst_res_dz, res_dz);
    worst_res_pgs = std::max(worst_res_pgs, res_pgs);
    worst_diff = std::max(worst_diff, max_abs_diff(f_dz, f_pgs));
    // float: both solvers within single-precision tolerance of the double solution
    Problem<float> pf = p.cast<float>();
    Work<float> wf(p.n);
    std::vector<float> g_dz(p.n, 0.f), g_pgs(p.n, 0.f);
    ASSERT_TRUE(dantzig(pf.view(), g_dz.data(), 1e-5f, 1e-5f, 6, wf.s.data(), wf.is.data()));
    pgs(pf.view(), g_pgs.data(), 3000, 1.0f, pf.pgs_scratch());
    for (int i = 0; i < p.n; ++i) {
      EXPECT_NEAR(g_dz[i], f_dz[i], 1e-4 * (1 + std::abs(f_dz[i])));
      EXPECT_NEAR(g_pgs[i], f_dz[i], 1e-4 * (1 + std::abs(f_dz[i])));
      worst_float = std::max(worst_float, std::abs(g_dz[i] - f_dz[i]));
    }
  }
  std::printf("dantzig residual %.1e, pgs residual %.1e, |f_dz - f_pgs| %.1e, float %.1e\n",
              worst_res_dz, worst_res_pgs, worst_diff, worst_float);
}

// A factored problem (A = Y Y^T) whose rows reach one or two of four blocks of 6 columns, as
// contacts between free bodies do, and one row reaching three blocks through its second range.
struct FactoredContacts {
  static constexpr int kCols = 24;
  Problem<> p;
  std::vector<double> Y;
  std::vector<int> span;

  FactoredContacts(std::mt19937& rng, int ncontact)
      : p(3 * ncontact), Y(3 * ncontact * kCols, 0.0), span(4 * 3 * ncontact) {
    for (int c = 0; c < ncontact; ++c) {
      int a = 6 * (c % 4), e = 6 * ((c + 1 + c / 4) % 4);
      int r[4] = {a, a + 6, e, e + 6};
      if (c % 3 == 0) r[2] = r[3] = r[1];  // one block
      if (r[2] < r[0]) std::swap(r[0], r[2]), std::swap(r[1], r[3]);
      if (c == 1) r[0] = 0, r[1] = 6, r[2] = 12, r[3] = 24;  // reaches blocks 0, 2 and 3
      for (int k = 0; k < 3; ++k) {
        int row = 3 * c + k;
        for (int h = 0; h < 4; ++h) span[4 * row + h] = r[h];
        for (int h = 0; h < 4; h += 2)
          for (int d = r[h]; d < r[h + 1]; ++d)
            Y[row * kCols + d] = c == 1 && d >= 12 && d < 18 ? 0.0 : uniform(rng, -1, 1);
      }
      p.b[3 * c] = uniform(rng, -1, 0.5);
      for (int t = 1; t <= 2; ++t) {
        p.b[3 * c + t] = uniform(rng, -1, 1);
        p.findex[3 * c + t] = 3 * c;
        p.mu[3 * c + t] = uniform(rng, 0.3, 0.9);
      }
    }
    LcpProblem<double> v = view();
    for (int i = 0; i < p.n; ++i)
      for (int j = 0; j < p.n; ++j) p.A[i * p.n + j] = lcp_factor_entry(v, i, j);
  }
  LcpProblem<double> view() const {
    LcpProblem<double> v = p.view();
    v.Y = Y.data();
    v.span = span.data();
    v.ncol = kCols;
    return v;
  }
};

// The sweeps in velocity form (with A, or from the factor alone) follow the dense sweeps.
TEST(Lcp, FactoredSweepsFollowTheDenseOnes) {
  std::mt19937 rng(5);
  const FactoredContacts fc(rng, 10);
  const Problem<>& p = fc.p;
  const int n = p.n, nc = FactoredContacts::kCols;
  // A's entries from the factor are Y Y^T, zero where two rows share no block
  int zeros = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int d = 0; d < nc; ++d) s += fc.Y[i * nc + d] * fc.Y[j * nc + d];
      EXPECT_NEAR(p.A[i * n + j], s, 1e-14 * (1 + std::abs(s)));
      zeros += p.A[i * n + j] == 0.0;
    }
  EXPECT_GT(zeros, n * n / 5);
  // every contact's three rows are one block of the velocity form's sweeps, whose scratch
  // (4 n) lcp_storage covers
  int blocks = 0;
  for (int i = 0; i < n; ++i) blocks += detail::lcp_contact_block(fc.view(), i);
  EXPECT_EQ(blocks, n / 3);
  EXPECT_GE(lcp_storage(n).reals, 4 * n);
  EXPECT_GE(lcp_storage(1).reals, 4);
  // the same sweeps from the same warm start, dense and in velocity form
  std::vector<double> warm(n);
  for (int i = 0; i < n; i += 3) warm[i] = uniform(rng, 0, 0.5);
  for (int sweeps : {1, 7, 60}) {
    std::vector<double> f_dense = warm, f_vel = warm, f_noA = warm, vel(nc, 0.0), step(4 * n);
    double r_dense = pgs(p.view(), f_dense.data(), sweeps, 1.0, step.data());
    // without A, from the factor alone (diagonal and residual included)
    LcpProblem<double> factor_only = fc.view();
    factor_only.A = nullptr;
    double r_noA = pgs(factor_only, f_noA.data(), sweeps, 1.0, step.data(), vel.data());
    double r_vel = pgs(fc.view(), f_vel.data(), sweeps, 1.0, step.data(), vel.data());
    EXPECT_LT(max_abs_diff(f_dense, f_vel), 1e-12) << sweeps;
    EXPECT_NEAR(r_dense, r_vel, 1e-12) << sweeps;
    EXPECT_EQ(f_noA, f_vel) << sweeps;
    EXPECT_NEAR(r_dense, r_noA, 1e-12) << sweeps;
    // the velocity form ran: vel holds Y^T f
    for (int d = 0; d < nc; ++d) {
      double s = 0;
      for (int i = 0; i < n; ++i) s += fc.Y[i * nc + d] * f_vel[i];
      EXPECT_NEAR(vel[d], s, 1e-12) << d;
    }
  }
}

// The sweeps stop after one that changes no row's velocity by more than the tolerance: what
// they return is then the first `sweeps` sweeps' result exactly, its residual and its distance
// to the exact solution (Dantzig) of the tolerance's order, in the dense and the velocity form;
// a tolerance of 0 stops only where a sweep changes nothing, which every later sweep repeats.
TEST(Lcp, SweepsStopOnceTheyChangeNoVelocityByMoreThanTheTolerance) {
  std::mt19937 rng(23);
  const FactoredContacts fc(rng, 6);
  const int n = fc.p.n, nc = FactoredContacts::kCols;
  Work<double> w(n);
  std::vector<double> exact(n, 0.0);
  ASSERT_TRUE(dantzig(fc.p.view(), exact.data(), 1e-12, 1e-10, 6, w.s.data(), w.is.data()));
  for (bool velocity_form : {false, true}) {
    for (double tol : {1e-4, 1e-6, 1e-9}) {
      std::vector<double> f(n, 0.0), g(n, 0.0), vel(nc, 0.0), step(4 * n);
      double* v = velocity_form ? vel.data() : nullptr;
      int sweeps = 0, all = 0;
      double r = pgs(fc.view(), f.data(), 5000, 1.0, step.data(), v, tol, &sweeps);
      EXPECT_LT(sweeps, 5000) << tol;
      EXPECT_GT(sweeps, 1) << tol;
      // the first `sweeps` sweeps without a tolerance give the same impulses
      pgs(fc.view(), g.data(), sweeps, 1.0, step.data(), v, 0.0, &all);
      EXPECT_EQ(all, sweeps);
      EXPECT_EQ(f, g) << tol;
      EXPECT_LT(r, 10 * tol) << tol;
      EXPECT_LT(max_abs_diff(f, exact), 1e3 * tol) << tol;
    }
  }
  // one unconstrained row: exact after one sweep, so tolerance 0 stops after the second
  Problem<> p(1);
  p.A[0] = 2.0;
  p.b[0] = -3.0;
  std::vector<double> f = {0.0};
  int sweeps = 0;
  EXPECT_EQ(pgs(p.view(), f.data(), 100, 1.0, p.pgs_scratch(), static_cast<double*>(nullptr), 0.0,
                &sweeps),
            0.0);
  EXPECT_EQ(sweeps, 2);
  EXPECT_EQ(f[0], 1.5);
}

// A problem of MuJoCo's humanoid from its upper triangle, row by row: contacts' rows are
// [normal, tangent 1, tangent 2] with mu = 1, the other rows joint limits (lo = 0).
Problem<> humanoid_rows(int n, const std::vector<double>& upper, const std::vector<double>& b,
                        const std::vector<int>& findex) {
  Problem<> p(n);
  for (int i = 0, k = 0; i < n; ++i)
    for (int j = i; j < n; ++j, ++k) p.A[i * n + j] = p.A[j * n + i] = upper[k];
  p.b = b;
  p.findex = findex;
  for (int i = 0; i < n; ++i) {
    p.mu[i] = findex[i] >= 0 ? 1.0 : 0.0;
    p.lo[i] = findex[i] >= 0 ? -kLcpInf : 0.0;
  }
  return p;
}

// A step of a random humanoid fall: a capsule's contact whose friction lifts its own normal
// (A_01 = 0.54 above A_00 = 0.44) and a joint limit. Plain Gauss-Seidel cycles on it, two
// sweeps apart, at a residual of 0.15 m/s; the exact re-solve on its answer's clamping set is
// infeasible; the damped sweeps solve_lcp follows with converge to the solution, where the
// contact slides (f_1 = mu f_0) and the limit holds.
TEST(Lcp, DampedSweepsSolveWhatPlainSweepsCycleOn) {
  const Problem<> p =
      humanoid_rows(4,
                    {0.437887399, 0.542514767, 0.127277562, 0.0110986235, 1.0818993, 0.0231042927,
                     -0.049800613, 1.64267132, 0.00254346592, 16.4014026},
                    {-0.300474365, -0.684983439, -0.459571732, -0.632933144}, {-1, 0, 0, -1});
  Work<double> w(p.n);
  std::vector<double> f(p.n, 0.0);
  const double r1000 = pgs(p.view(), f.data(), 1000, 1.0, p.pgs_scratch());
  const std::vector<double> f1000 = f;
  const double r1001 = pgs(p.view(), f.data(), 1, 1.0, p.pgs_scratch());
  const double r1002 = pgs(p.view(), f.data(), 1, 1.0, p.pgs_scratch());
  EXPECT_GT(r1000, 0.1);
  EXPECT_GT(r1001, 0.1);
  EXPECT_GT(r1002, 0.1);
  EXPECT_LT(max_abs_diff(f, f1000), 1e-9);  // a 2-cycle
  EXPECT_GT(max_abs_diff(f, std::vector<double>(f1000.size(), 0.0)), 0.1);
  std::vector<int> cls(p.n);
  std::vector<double> g = f;
  EXPECT_FALSE(stabilize(p.view(), g.data(), cls.data(), 1e-3, lcp_rank_tol<double>(), w.s.data(),
                         w.is.data()));
  const double r = pgs(p.view(), f.data(), 100, kLcpStallOmega, p.pgs_scratch());
  EXPECT_LT(r, 1e-12);
  EXPECT_NEAR(f[1], f[0], 1e-12);   // sliding along tangent 1
  EXPECT_LT(std::abs(f[2]), f[0]);  // sticking along tangent 2
  EXPECT_GT(f[3], 0.0);
}

// A step of a humanoid's hand on the floor with its elbow at the limit (the limit rows' A_ii of
// 52 against the contacts' 1: condition 5e3). In float, 100 sweeps leave 3e-3 m/s. The exact
// re-solve on their clamping set is right, but lcp_rank_tol (1e-2 in float) counts it rank
// deficient and the re-solve fails; at lcp_stall_rank_tol it succeeds to float's precision.
// In double both tolerances are one.
TEST(Lcp, TheStallRankToleranceFinishesIllConditionedSetsInFloat) {
  const Problem<> p = humanoid_rows(
      10, {1.14035324,     0.183479409,    0.539803274,    -9.71114356e-05, -0.00481010259,
           -0.00133566461, -0.116622731,   -0.00351091196, -4.42183403,     0.00580443632,
           1.10680989,     -0.113680667,   0.00475848372,  0.0211556133,    -0.00134549858,
           -0.00798518337, 0.00688058497,  -1.02008441,    0.00428996924,   0.504902176,
           -0.00178660944, -0.00836677461, 0.00595088252,  0.10539963,      0.00592351396,
           -3.04176113,    -0.0160803778,  1.16533716,     -0.0539817813,   0.451612544,
           0.000296894611, -0.0814221237,  -0.00189311246, -4.11816794,     1.02374146,
           -0.0379260779,  -0.0115736301,  0.0700367344,   -0.0157166904,   1.32185858,
           0.362673791,    0.0137021231,   0.115477451,    -0.0187597837,   -2.4776225,
           0.552369305,    0.0227302205,   -3.66578287,    -0.0438366645,   0.566353643,
           -0.0298621016,  -3.96085695,    51.6075198,     0.070857467,     51.639505},
      {0.305830452, 0.0687779637, -0.0367969506, 0.323781549, 0.107508331, -0.0419162119,
       -0.169265814, -0.125045513, -1.22045269, -1.16369534},
      {-1, 0, 0, -1, 3, 3, -1, -1, -1, -1});
  EXPECT_EQ(lcp_stall_rank_tol<double>(), lcp_rank_tol<double>());
  EXPECT_EQ(lcp_stall_rank_tol<float>(), 1e-5f);
  const Problem<float> q = p.cast<float>();
  Work<float> w(q.n);
  std::vector<float> f(q.n, 0.0f);
  const float r = pgs(q.view(), f.data(), 100, 1.0f, q.pgs_scratch());
  EXPECT_GT(r, 1e-3f);
  std::vector<int> cls(q.n);
  std::vector<float> coarse = f, fine = f;
  EXPECT_FALSE(stabilize(q.view(), coarse.data(), cls.data(), 1e-2f, lcp_rank_tol<float>(),
                         w.s.data(), w.is.data()));
  ASSERT_TRUE(stabilize(q.view(), fine.data(), cls.data(), 1e-2f, lcp_stall_rank_tol<float>(),
                        w.s.data(), w.is.data()));
  EXPECT_LT(lcp_residual(q.view(), fine.data()), 1e-4f);
  // the same impulses as double's exact solution on that set
  std::vector<double> exact(f.begin(), f.end());
  Work<double> wd(p.n);
  ASSERT_TRUE(stabilize(p.view(), exact.data(), cls.data(), 1e-2, lcp_rank_tol<double>(),
                        wd.s.data(), wd.is.data()));
  EXPECT_LT(lcp_residual(p.view(), exact.data()), 1e-12);
  for (int i = 0; i < p.n; ++i) EXPECT_NEAR(fine[i], exact[i], 1e-4 * (1 + std::abs(exact[i])));
}

TEST(Lcp, StabilizeSplitsRankDeficientContactsEvenly) {
  // Nimble appendix B: a 2D box (mass m) that cannot rotate rests on two contacts with the same
  // normal, so both columns of A are equal and A_CC = [1 1; 1 1] / m has rank 1. Any split of
  // f_1 + f_2 = m g dt solves the LCP; stabilisation picks the minimum norm, f_1 = f_2.
  const double m = 1.5, g = 9.81, dt = 0.01;
  Problem<> p(2);
  p.A = {1 / m, 1 / m, 1 / m, 1 / m};
  p.b = {-g * dt, -g * dt};
  Work<double> w(2);
  std::vector<double> f_pgs(2, 0.0), f_dz(2, 0.0);
  pgs(p.view(), f_pgs.data(), 10, 1.0, p.pgs_scratch());
  ASSERT_TRUE(dantzig(p.view(), f_dz.data(), 1e-12, 1e-10, 2, w.s.data(), w.is.data()));
  EXPECT_NEAR(f_pgs[0] + f_pgs[1], m * g * dt, 1e-14);
  for (auto* f : {&f_pgs, &f_dz}) {
    std::vector<int> cls(2);
    ASSERT_TRUE(stabilize(p.view(), f->data(), cls.data(), 1e-12, 1e-10, w.s.data(), w.is.data()));
    EXPECT_NEAR((*f)[0], m * g * dt / 2, 1e-14);
    EXPECT_NEAR((*f)[1], m * g * dt / 2, 1e-14);
    EXPECT_EQ(cls[0] & kLcpClassMask, kLcpClamping);
    EXPECT_EQ(cls[1] & kLcpClassMask, kLcpClamping);
  }

  // with friction, rows [n1, t1, n2, t2], the box sliding slowly (sticks): A has rank 2 of 4 and
  // the minimum-norm solution splits both the normal and the friction impulse evenly
  const double vx = 0.01, mu = 0.8;
  Problem<> q(4);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) q.A[i * 4 + j] = (i % 2 == j % 2) ? 1 / m : 0.0;
  q.b = {-g * dt, vx, -g * dt, vx};
  q.findex = {-1, 0, -1, 2};
  q.mu = {0, mu, 0, mu};
  std::vector<double> f(4, 0.0);
  std::vector<int> cls(4);
  Work<double> w4(4);
  pgs(q.view(), f.data(), 20, 1.0, q.pgs_scratch());
  ASSERT_TRUE(stabilize(q.view(), f.data(), cls.data(), 1e-12, 1e-10, w4.s.data(), w4.is.data()));
  EXPECT_NEAR(f[0], m * g * dt / 2, 1e-14);
  EXPECT_NEAR(f[2], m * g * dt / 2, 1e-14);
  EXPECT_NEAR(f[1], -m * vx / 2, 1e-14);
  EXPECT_NEAR(f[3], -m * vx / 2, 1e-14);
  for (int c : cls) EXPECT_EQ(c & kLcpClassMask, kLcpClamping);
}

// A box (mass m, half extents a, a, c) on the plane z = 0 with its four bottom corners in
// contact, rows [n, t_x, t_y] per corner, dofs (linear, angular velocity) in the world frame at
// the centre: row d . (v + w x r), A = J M^-1 J^T + reg I (rank 6 of 12 without reg),
// b = J u, u = (vx, 0, -g dt, 0, 0, wz).
Problem<> box_on_four_contacts(double vx, double wz, double mu, double reg) {
  const double m = 2, a = 0.3, c = 0.1, g = 9.81, dt = 0.01;
  const double minv[6] = {1 / m,
                          1 / m,
                          1 / m,
                          3 / (m * (a * a + c * c)),
                          3 / (m * (a * a + c * c)),
                          3 / (2 * m * a * a)};
  const double u[6] = {vx, 0, -g * dt, 0, 0, wz};
  const double corners[4][2] = {{a, a}, {-a, a}, {-a, -a}, {a, -a}};
  const double dirs[3][3] = {{0, 0, 1}, {1, 0, 0}, {0, 1, 0}};
  Problem<> p(12);
  std::vector<double> J(12 * 6);
  for (int k = 0; k < 4; ++k)
    for (int t = 0; t < 3; ++t) {
      const double r[3] = {corners[k][0], corners[k][1], -c}, *d = dirs[t];
      double* row = &J[(3 * k + t) * 6];
      for (int i = 0; i < 3; ++i) row[i] = d[i];
      row[3] = r[1] * d[2] - r[2] * d[1];  // r x d
      row[4] = r[2] * d[0] - r[0] * d[2];
      row[5] = r[0] * d[1] - r[1] * d[0];
      p.findex[3 * k + t] = t == 0 ? -1 : 3 * k;
      p.mu[3 * k + t] = t == 0 ? 0 : mu;
    }
  for (int i = 0; i < 12; ++i) {
    for (int j = 0; j < 12; ++j) {
      double s = i == j ? reg : 0;
      for (int k = 0; k < 6; ++k) s += J[i * 6 + k] * minv[k] * J[j * 6 + k];
      p.A[i * 12 + j] = s;
    }
    p.b[i] = 0;
    for (int k = 0; k < 6; ++k) p.b[i] += J[i * 6 + k] * u[k];
  }
  return p;
}

TEST(Lcp, BoxOnFourContactsRestsAndSlides) {
  // with all four normals clamping the box stops vertically and does not tip, so the normal
  // impulses sum to m g dt; resting, the minimum-norm split is m g dt / 4 per corner with no
  // friction; sliding fast along x, every corner slides: sum f_x = -mu m g dt, f_y = 0. PGS +
  // stabilize on the singular A and Dantzig on A + 1e-10 I agree after stabilisation.
  const double m = 2, g = 9.81, dt = 0.01, mu = 0.5;
  for (double vx : {0.0, 0.01, 1.0}) {
    Problem<> p = box_on_four_contacts(vx, 0.0, mu, 0.0);
    Work<double> w(12);
    std::vector<double> f(12, 0.0), f_dz(12, 0.0);
    std::vector<int> cls(12), cls_dz(12);
    pgs(p.view(), f.data(), 500, 1.0, p.pgs_scratch());
    ASSERT_TRUE(stabilize(p.view(), f.data(), cls.data(), 1e-9, 1e-9, w.s.data(), w.is.data()));
    EXPECT_LT(lcp_residual(p.view(), f.data()), 1e-14);
    double fn = 0, fx = 0;
    for (int k = 0; k < 4; ++k) {
      fn += f[3 * k];
      fx += f[3 * k + 1];
      EXPECT_NEAR(f[3 * k + 2], 0.0, 1e-14);
      if (vx == 0.0) {
        EXPECT_NEAR(f[3 * k], m * g * dt / 4, 1e-14);
        EXPECT_NEAR(f[3 * k + 1], 0.0, 1e-14);
      }
      if (vx == 1.0) {
        EXPECT_EQ(cls[3 * k + 1], kLcpBoundedLo);
      }
    }
    EXPECT_NEAR(fn, m * g * dt, 1e-14);
    // sticking, friction stops the box; sliding, it is at the cone
    EXPECT_NEAR(fx, vx == 1.0 ? -mu * m * g * dt : -m * vx, 1e-14);
    Problem<> q = box_on_four_contacts(vx, 0.0, mu, 1e-10);
    ASSERT_TRUE(dantzig(q.view(), f_dz.data(), 1e-12, 1e-10, 4, w.s.data(), w.is.data()));
    ASSERT_TRUE(
        stabilize(q.view(), f_dz.data(), cls_dz.data(), 1e-9, 1e-9, w.s.data(), w.is.data()));
    EXPECT_LT(max_abs_diff(f, f_dz), 1e-9);
  }
}

TEST(Lcp, StabilizeRepairsAMinimumNormThatLeavesTheBounds) {
  // 2 dofs, M = I, contacts J = [1 0; 0 1; 1 1], b = J u, u = (-1, -0.1): every f >= 0 with
  // J^T f = (1, 0.1) solves the LCP. From f = (1, 0.1, 0) the third row is tied (f = 0, v = 0)
  // and goes to C; the minimum-norm split J (J^T J)^-1 (1, 0.1) = (0.633, -0.267, 0.367) pulls
  // on row 1, so the repair moves row 1 to its bound (S, tied) and the set's solution is the
  // vertex (0.9, 0, 0.1). Dantzig finds that vertex itself, where row 1 is tied; its minimum-norm
  // re-solve is repaired the same way. Both starts end on one solution and one classification.
  const double J[3][2] = {{1, 0}, {0, 1}, {1, 1}}, u[2] = {-1, -0.1};
  Problem<> p(3);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) p.A[i * 3 + j] = J[i][0] * J[j][0] + J[i][1] * J[j][1];
    p.b[i] = J[i][0] * u[0] + J[i][1] * u[1];
  }
  Work<double> w(3);
  std::vector<int> cls(3), cls_dz(3);
  std::vector<double> f = {1.0, 0.1, 0.0};
  ASSERT_TRUE(stabilize(p.view(), f.data(), cls.data(), 1e-12, 1e-10, w.s.data(), w.is.data()));
  EXPECT_NEAR(f[0], 0.9, 1e-15);
  EXPECT_EQ(f[1], 0.0);
  EXPECT_NEAR(f[2], 0.1, 1e-15);
  EXPECT_EQ(cls, (std::vector<int>{kLcpClamping, kLcpSeparating | kLcpTied,
                                   kLcpClamping | kLcpTied}));

  std::vector<double> g(3, 0.0);
  ASSERT_TRUE(dantzig(p.view(), g.data(), 1e-12, 1e-10, 2, w.s.data(), w.is.data()));
  ASSERT_TRUE(stabilize(p.view(), g.data(), cls_dz.data(), 1e-12, 1e-10, w.s.data(), w.is.data()));
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(g[i], f[i], 1e-15);
    EXPECT_EQ(cls_dz[i] & kLcpClassMask, cls[i] & kLcpClassMask);
  }
}

// <adj, d inputs> of adj_lcp for perturbations dA, db, dmu, with the factored form of the
// factorisation (the single-use adj_lcp) or its explicit form (K^+T and I - K^+ K)
double adjoint_dot(const Problem<>& p, const std::vector<double>& f, const std::vector<int>& cls,
                   const std::vector<double>& adj_f, const std::vector<double>& dA,
                   const std::vector<double>& db, const std::vector<double>& dmu,
                   bool explicit_form) {
  Work<double> w(p.n);
  std::vector<double> factors(4 * p.n), ab(p.n, 0.0), amu(p.n, 0.0);
  double* x = factors.data();
  LcpAdjointA<double> aA{x, x + p.n, x + 2 * p.n, x + 3 * p.n};
  if (explicit_form) {
    Storage store, tmp;
    LcpAdjointFactor<double> E =
        store.carve([&](Arena<double>& a) { return lcp_adjoint_explicit_carve(p.n, a); });
    lcp_adjoint_factor_explicit(p.view(), f.data(), cls.data(), 1e-10, E, w.s.data(), w.is.data());
    auto work =
        tmp.carve([&](Arena<double>& a) { return LcpAdjointScratch<double>::carve(p.n, a); });
    adj_lcp(p.view(), f.data(), E, cls.data(), adj_f.data(), aA, ab.data(), amu.data(), work);
  } else {
    adj_lcp(p.view(), f.data(), cls.data(), adj_f.data(), aA, ab.data(), amu.data(), 1e-10,
            w.s.data(), w.is.data());
  }
  double s = 0;
  for (int i = 0; i < p.n; ++i)
    for (int j = 0; j < p.n; ++j) s += aA(i, j) * dA[i * p.n + j];
  for (int i = 0; i < p.n; ++i) s += ab[i] * db[i] + amu[i] * dmu[i];
  return s;
}

// adjoint_dot of the factored form, checked against the explicit form to rounding
double adjoint_dot(const Problem<>& p, const std::vector<double>& f, const std::vector<int>& cls,
                   const std::vector<double>& adj_f, const std::vector<double>& dA,
                   const std::vector<double>& db, const std::vector<double>& dmu) {
  double factored = adjoint_dot(p, f, cls, adj_f, dA, db, dmu, false);
  double explicit_form = adjoint_dot(p, f, cls, adj_f, dA, db, dmu, true);
  EXPECT_NEAR(explicit_form, factored, 1e-11 * (1 + std::abs(factored)));
  return factored;
}

Problem<> perturbed(const Problem<>& p, double h, const std::vector<double>& dA,
                    const std::vector<double>& db, const std::vector<double>& dmu) {
  Problem<> q = p;
  for (int i = 0; i < p.n * p.n; ++i) q.A[i] += h * dA[i];
  for (int i = 0; i < p.n; ++i) {
    q.b[i] += h * db[i];
    q.mu[i] += h * dmu[i];
  }
  return q;
}

TEST(Lcp, AdjointMatchesFiniteDifferencesAndDualNumbers) {
  // at non-degenerate points (no tied rows, classification unchanged by the perturbation):
  // <adj_A, dA> + <adj_b, db> + <adj_mu, dmu> = <adj_f, df> with df from central differences
  // of dantzig + stabilize (h = 1e-6, rtol 1e-6) and from dual numbers through the solve on
  // the set (rtol 1e-10)
  std::mt19937 rng(5);
  const double h = 1e-6;
  int checked = 0, coupled = 0, held = 0, clamped_friction = 0;
  double worst_fd = 0, worst_dual = 0;
  for (int trial = 0; trial < 200 && checked < 25; ++trial) {
    Problem<> p = random_contacts(rng, 3, 10, trial % 3 == 0 ? 0.3 : 1.5);
    std::vector<double> f, fp, fm;
    std::vector<int> cls, clsp, clsm;
    if (!solve_stabilized(p, f, cls)) continue;
    if (std::any_of(cls.begin(), cls.end(), [](int c) { return c & kLcpTied; })) continue;
    std::vector<double> dA(p.n * p.n), db(p.n), dmu(p.n, 0.0), adj_f(p.n);
    for (int i = 0; i < p.n; ++i) {
      for (int j = 0; j <= i; ++j) dA[i * p.n + j] = dA[j * p.n + i] = uniform(rng, -1, 1) * 0.1;
      db[i] = uniform(rng, -1, 1);
      if (p.findex[i] >= 0) dmu[i] = uniform(rng, -1, 1);
      adj_f[i] = uniform(rng, -1, 1);
    }
    if (!solve_stabilized(perturbed(p, h, dA, db, dmu), fp, clsp)) continue;
    if (!solve_stabilized(perturbed(p, -h, dA, db, dmu), fm, clsm)) continue;
    if (clsp != cls || clsm != cls) continue;
    // central differences of the stabilised solution
    double fd = 0;
    for (int i = 0; i < p.n; ++i) fd += adj_f[i] * (fp[i] - fm[i]) / (2 * h);
    // forward mode through the solve on the set
    Problem<D1> pd = p.cast<D1>();
    for (int i = 0; i < p.n * p.n; ++i) pd.A[i].d[0] = dA[i];
    for (int i = 0; i < p.n; ++i) {
      pd.b[i].d[0] = db[i];
      pd.mu[i].d[0] = dmu[i];
    }
    std::vector<D1> fd1(p.n, D1(0.0));
    Work<D1> wd(p.n);
    ASSERT_TRUE(lcp_solve_on_set(pd.view(), cls.data(), fd1.data(), D1(1e-9), D1(1e-10),
                                 wd.s.data(), wd.is.data()));
    double jvp = 0;
    for (int i = 0; i < p.n; ++i) {
      EXPECT_NEAR(fd1[i].v, f[i], 1e-13);
      jvp += adj_f[i] * fd1[i].d[0];
    }
    double vjp = adjoint_dot(p, f, cls, adj_f, dA, db, dmu);
    EXPECT_NEAR(vjp, fd, 1e-9 + 1e-6 * std::abs(fd));
    EXPECT_NEAR(vjp, jvp, 1e-10 * (1 + std::abs(jvp)));
    worst_fd = std::max(worst_fd, std::abs(vjp - fd) / (1e-9 + std::abs(fd)));
    worst_dual = std::max(worst_dual, std::abs(vjp - jvp) / (1 + std::abs(jvp)));
    // which kinds of rows were exercised
    for (int i = 0; i < p.n; ++i) {
      int k = p.findex[i];
      if (k < 0) continue;
      bool bounded = cls[i] == kLcpBoundedHi || cls[i] == kLcpBoundedLo;
      if (bounded && cls[k] == kLcpClamping) ++coupled;
      if (bounded && cls[k] != kLcpClamping) ++held;
      if (cls[i] == kLcpClamping) ++clamped_friction;
    }
    ++checked;
  }
  EXPECT_GE(checked, 25);
  EXPECT_GT(coupled, 5);
  EXPECT_GT(held, 5);
  EXPECT_GT(clamped_friction, 5);
  std::printf("%d points: fd rel err %.1e, dual rel err %.1e; B rows coupled %d, held %d\n",
              checked, worst_fd, worst_dual, coupled, held);
}

// A 2D box that cannot rotate, dofs (x, z) with masses (m1, m2), two contacts with the same
// frame (normal n = (sin a, cos a), tangent t = (cos a, -sin a)): rows [n, t, n, t], A =
// J M^-1 J^T of rank 2 (A_nt != 0 when m1 != m2), b = J u. theta = (m1, m2, ux, uz, mu, a).
Problem<> twin_contacts(const std::vector<double>& th) {
  double m1 = th[0], m2 = th[1], ux = th[2], uz = th[3], mu = th[4], a = th[5];
  double J[4][2] = {{std::sin(a), std::cos(a)}, {std::cos(a), -std::sin(a)}, {0, 0}, {0, 0}};
  for (int k = 0; k < 2; ++k) {
    J[2][k] = J[0][k];
    J[3][k] = J[1][k];
  }
  Problem<> p(4);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) p.A[i * 4 + j] = J[i][0] * J[j][0] / m1 + J[i][1] * J[j][1] / m2;
    p.b[i] = J[i][0] * ux + J[i][1] * uz;
  }
  p.findex = {-1, 0, -1, 2};
  p.mu = {0, mu, 0, mu};
  return p;
}

TEST(Lcp, ExplicitAdjointMatchesFactoredOnASingularClampingSet) {
  // the box on four corners: resting or sliding, K has a null space (rank 6 of 12 at rest), and
  // a random dA has a component along it, so the (I - K^+ K) term of the adjoint matters; the
  // explicit form (K^+T and a basis of the null space) gives the factored form's adjoint
  std::mt19937 rng(8);
  std::normal_distribution<double> n01;
  for (double vx : {0.0, 1.0}) {
    Problem<> p = box_on_four_contacts(vx, 0.0, 0.5, 0.0);
    Work<double> w(12);
    std::vector<double> f(12, 0.0);
    std::vector<int> cls(12);
    pgs(p.view(), f.data(), 500, 1.0, p.pgs_scratch());
    ASSERT_TRUE(stabilize(p.view(), f.data(), cls.data(), 1e-9, 1e-9, w.s.data(), w.is.data()));
    Arena<double> arena(w.s.data(), w.is.data());
    LcpAdjointFactor<double> F = lcp_adjoint_factor_carve(12, arena);
    lcp_adjoint_factor(p.view(), f.data(), cls.data(), 1e-10, F);
    EXPECT_GT(F.nnull, 0) << "vx " << vx;
    std::vector<double> adj_f(12), dA(144), db(12), dmu(12);
    for (double& x : adj_f) x = n01(rng);
    for (double& x : dA) x = n01(rng);
    for (double& x : db) x = n01(rng);
    for (double& x : dmu) x = n01(rng);
    adjoint_dot(p, f, cls, adj_f, dA, db, dmu);  // asserts the forms agree
  }
}

TEST(Lcp, RankDeficientAdjointMatchesMinimumNormFiniteDifferences) {
  // two identical contacts keep A_CC rank deficient under every perturbation of theta; the
  // adjoint (pseudo-inverse derivative) matches central differences of the minimum-norm
  // solution. Sticking: C = all four rows, K = A (rank 2). Sliding: C = the normals, B = the
  // tangents coupled through E, K = A_CC + A_CB E (2 x 2, rank 1, not symmetric).
  const double h = 1e-6;
  struct Case {
    std::vector<double> theta;
    int tangent_class;
  };
  std::vector<Case> cases = {{{1.3, 0.7, 0.02, -0.3, 0.8, 0.2}, kLcpClamping},
                             {{1.3, 0.7, 0.9, -0.3, 0.4, 0.2}, kLcpBoundedLo},
                             {{1.1, 2.0, -0.8, -0.5, 0.3, -0.1}, kLcpBoundedHi}};
  std::mt19937 rng(3);
  double worst = 0;
  auto solve = [](const Problem<>& p, std::vector<double>& f, std::vector<int>& cls) {
    Work<double> w(p.n);
    f.assign(p.n, 0.0);
    cls.assign(p.n, 0);
    pgs(p.view(), f.data(), 200, 1.0, p.pgs_scratch());
    return stabilize(p.view(), f.data(), cls.data(), 1e-9, 1e-9, w.s.data(), w.is.data());
  };
  for (const Case& c : cases) {
    Problem<> p = twin_contacts(c.theta);
    std::vector<double> f;
    std::vector<int> cls;
    ASSERT_TRUE(solve(p, f, cls));
    EXPECT_EQ(cls[1] & kLcpClassMask, c.tangent_class);
    EXPECT_EQ(cls[3] & kLcpClassMask, c.tangent_class);
    EXPECT_NEAR(f[0], f[2], 1e-12);  // minimum norm: even split
    EXPECT_NEAR(f[1], f[3], 1e-12);
    for (int dir = 0; dir < 8; ++dir) {
      std::vector<double> dth(6), adj_f(4);
      for (double& x : dth) x = uniform(rng, -1, 1);
      for (double& x : adj_f) x = uniform(rng, -1, 1);
      auto at = [&](double s) {
        std::vector<double> th = c.theta;
        for (int k = 0; k < 6; ++k) th[k] += s * dth[k];
        return twin_contacts(th);
      };
      Problem<> pp = at(h), pm = at(-h);
      std::vector<double> fp, fm, dA(16), db(4), dmu(4);
      std::vector<int> clsp, clsm;
      ASSERT_TRUE(solve(pp, fp, clsp));
      ASSERT_TRUE(solve(pm, fm, clsm));
      ASSERT_EQ(clsp, cls);
      ASSERT_EQ(clsm, cls);
      for (int i = 0; i < 16; ++i) dA[i] = (pp.A[i] - pm.A[i]) / (2 * h);
      for (int i = 0; i < 4; ++i) {
        db[i] = (pp.b[i] - pm.b[i]) / (2 * h);
        dmu[i] = (pp.mu[i] - pm.mu[i]) / (2 * h);
      }
      double fd = 0;
      for (int i = 0; i < 4; ++i) fd += adj_f[i] * (fp[i] - fm[i]) / (2 * h);
      double vjp = adjoint_dot(p, f, cls, adj_f, dA, db, dmu);
      EXPECT_NEAR(vjp, fd, 1e-9 + 1e-6 * std::abs(fd)) << "tangent class " << c.tangent_class;
      worst = std::max(worst, std::abs(vjp - fd) / (1e-9 + std::abs(fd)));
    }
  }
  std::printf("rank-deficient adjoint vs central differences: rel err %.1e\n", worst);
}

TEST(Lcp, WarmStartAcceptsUnchangedSetAndRejectsChangedSet) {
  std::mt19937 rng(17);
  int accepted = 0, rejected = 0;
  for (int trial = 0; trial < 20; ++trial) {
    Problem<> p = random_contacts(rng, 3, 12, 1.0);
    std::vector<double> f, f_new;
    std::vector<int> cls, cls_new;
    ASSERT_TRUE(solve_stabilized(p, f, cls));
    Work<double> w(p.n);
    // a small change of b keeps the set: the warm start reproduces the full solve
    Problem<> q = p;
    for (double& x : q.b) x += 1e-7 * uniform(rng, -1, 1);
    ASSERT_TRUE(solve_stabilized(q, f_new, cls_new));
    std::vector<double> g = f;
    if (cls_new == cls) {
      EXPECT_TRUE(
          lcp_solve_on_set(q.view(), cls.data(), g.data(), 1e-9, 1e-10, w.s.data(), w.is.data()));
      EXPECT_LT(max_abs_diff(g, f_new), 1e-12);
      ++accepted;
    }
    // pull a clamped normal away (its contact now separates): the old set is infeasible
    int r = -1;
    for (int i = 0; i < p.n; i += 3)
      if (cls[i] == kLcpClamping && f[i] > 1e-3) r = i;
    if (r < 0) continue;
    Problem<> s = p;
    s.b[r] += 10.0;
    g = f;
    EXPECT_FALSE(
        lcp_solve_on_set(s.view(), cls.data(), g.data(), 1e-9, 1e-10, w.s.data(), w.is.data()));
    EXPECT_EQ(g, f);  // left untouched on rejection
    ++rejected;
  }
  EXPECT_GE(accepted, 15);
  EXPECT_GE(rejected, 15);
}

TEST(Lcp, ComplementarityAwareClassificationFreesRestingContact) {
  // Nimble section IV-D, circle on a vertical actuator resting on the ground: one normal row,
  // A = 1/m, b = v + dt (tau - m g) / m, v' = A f + b, loss l = (v' - v_target)^2. Resting,
  // the contact clamps v' = 0 whatever tau, so the plain gradient dl/dtau is 0; the
  // loss-driven class (dl/dv' = -2 v_target < 0: separate) gives dl/dtau = dl/dv' dt / m.
  const double m = 2.0, dt = 0.01, g = 9.81, tau = 5.0, v_target = 1.0;
  Problem<> p(1);
  p.A[0] = 1 / m;
  p.b[0] = dt * (tau - m * g) / m;
  std::vector<double> f;
  std::vector<int> cls;
  ASSERT_TRUE(solve_stabilized(p, f, cls));
  ASSERT_EQ(cls[0], kLcpClamping);
  double v_next = p.A[0] * f[0] + p.b[0];
  double dl_dv = 2 * (v_next - v_target);
  // dl/dtau = (dl/dv' + adj_b) db/dtau with adj_f = dl/dv' A (v' = A f + b)
  auto dl_dtau = [&](const std::vector<int>& c) {
    Work<double> w(1);
    double adj_f = dl_dv * p.A[0], factors[4], adj_b = 0;
    LcpAdjointA<double> adj_A{factors, factors + 1, factors + 2, factors + 3};
    adj_lcp(p.view(), f.data(), c.data(), &adj_f, adj_A, &adj_b, static_cast<double*>(nullptr),
            1e-10, w.s.data(), w.is.data());
    return (dl_dv + adj_b) * dt / m;
  };
  std::vector<int> cls_loss(1);
  lcp_classify_loss(p.view(), cls.data(), &dl_dv, cls_loss.data());
  EXPECT_EQ(cls_loss[0], kLcpSeparating);
  EXPECT_NEAR(dl_dtau(cls), 0.0, 1e-15);
  EXPECT_NEAR(dl_dtau(cls_loss), -2 * v_target * dt / m, 1e-15);
  // a loss pushing down keeps the contact clamping
  double push = 1.0;
  lcp_classify_loss(p.view(), cls.data(), &push, cls_loss.data());
  EXPECT_EQ(cls_loss[0], kLcpClamping);

  // friction rows follow their normal: held (S) when it separates, plain class otherwise
  Problem<> q(3);
  for (int i = 0; i < 3; ++i) q.A[i * 3 + i] = 1 / m;
  q.b = {p.b[0], 0.01, 1.0};
  q.findex = {-1, 0, 0};
  q.mu = {0, 0.5, 0.5};
  std::vector<double> fq;
  std::vector<int> cq, cq_loss(3);
  ASSERT_TRUE(solve_stabilized(q, fq, cq));
  EXPECT_EQ(cq, (std::vector<int>{kLcpClamping, kLcpClamping, kLcpBoundedLo}));
  std::vector<double> up = {-1, 0.3, 0.3}, down = {1, 0.3, 0.3};
  lcp_classify_loss(q.view(), cq.data(), up.data(), cq_loss.data());
  EXPECT_EQ(cq_loss, (std::vector<int>{kLcpSeparating, kLcpSeparating, kLcpSeparating}));
  lcp_classify_loss(q.view(), cq.data(), down.data(), cq_loss.data());
  EXPECT_EQ(cq_loss, cq);
}

// Nothing outside lane `lane` of tiles of Interleaved rows (reals NaN, integers -7 until
// written) was written.
void expect_lane_only(const std::vector<double>& reals, const std::vector<int>& ints, int lane) {
  constexpr int W = Interleaved::kStride;
  for (long i = 0; i < long(reals.size()); ++i) {
    if (i % W == lane) continue;
    ASSERT_TRUE(std::isnan(reals[i])) << i;
  }
  for (long i = 0; i < long(ints.size()); ++i) {
    if (i % W == lane) continue;
    ASSERT_EQ(ints[i], -7) << i;
  }
}

// A decomposition whose arrays are interleaved (lane 5 of a tile of Interleaved rows, as the
// CUDA backend lays them out), solving vectors of that tile too, gives the bits of one over
// contiguous arrays: factor, both solves, K^+T and the null-space basis, at full and lower rank.
TEST(Dense, CodOverInterleavedRowsAsContiguous) {
  std::mt19937 rng(29);
  const int n = 7;
  constexpr int W = Interleaved::kStride;
  for (int r : {7, 5, 2}) {
    const auto [U, V, K] = low_rank(rng, n, r);
    Storage store;
    Cod<double> plain = store.carve([&](Arena<double>& a) { return cod_carve(n, a); });
    // the tiled decomposition, then K, a vector, K^+T and the null basis in the same tile
    Arena<double> counting;
    cod_carve(n, counting);
    const ScratchSize size = counting.used();
    const long nrows = size.rows + n * n + n + 2 * n * n + n;
    std::vector<double> tile(W * nrows, std::nan(""));
    std::vector<int> itile(W * size.irows, -7);
    Arena<double, Interleaved> arena(
        Scratch<double, Interleaved>{nullptr, nullptr, nullptr, tile.data() + 5, itile.data() + 5});
    Cod<double, Interleaved> tiled = cod_carve(n, arena);
    const auto Kt = arena.take_rows(n * n), x = arena.take_rows(n), P = arena.take_rows(n * n),
               Vn = arena.take_rows(n * n), w = arena.take_rows(n);
    for (int i = 0; i < n * n; ++i) Kt[i] = K[i];
    EXPECT_EQ(cod_factor(plain, K.data(), 1e-10), r);
    EXPECT_EQ(cod_factor(tiled, Kt, 1e-10), r);
    std::vector<double> c(n), Pp(n * n), Vp(n * n), wp(n);
    for (int transpose = 0; transpose < 2; ++transpose) {
      for (int i = 0; i < n; ++i) x[i] = c[i] = uniform(rng, -1, 1);
      if (transpose) {
        cod_solve_transpose(plain, c.data());
        cod_solve_transpose(tiled, x);
      } else {
        cod_solve(plain, c.data());
        cod_solve(tiled, x);
      }
      for (int i = 0; i < n; ++i) EXPECT_EQ(x[i], c[i]) << "rank " << r;
    }
    cod_pinv_transpose(plain, Pp.data(), wp.data());
    cod_pinv_transpose(tiled, P, w);
    for (int i = 0; i < n * n; ++i) EXPECT_EQ(P[i], Pp[i]) << "rank " << r;
    cod_null_basis(plain, Vp.data(), wp.data());
    cod_null_basis(tiled, Vn, w);
    for (int i = 0; i < n * (n - r); ++i) EXPECT_EQ(Vn[i], Vp[i]) << "rank " << r;
    expect_lane_only(tile, itile, 5);
  }
}

// lcp.h's storage as a lane of a tile of Interleaved rows (a workspace's rows on CUDA): reals
// NaN and integers -7 until written, so that a read of an unwritten entry or a write outside
// the lane shows
struct LcpTile {
  static constexpr int W = Interleaved::kStride;
  std::vector<double> reals;
  std::vector<int> ints;
  int lane;
  LcpTile(int n, int l)
      : reals(W * lcp_storage(n).reals, std::nan("")), ints(W * lcp_storage(n).ints, -7), lane(l) {}
  Strided<double, W> s() { return Strided<double, W>(reals.data() + lane); }
  Strided<int, W> is() { return Strided<int, W>(ints.data() + lane); }
  // nothing outside the lane was written
  void expect_lane_only() const { phx::expect_lane_only(reals, ints, lane); }
};

// The solvers and the adjoint over storage interleaved as the CUDA backend lays out a
// workspace's rows give the bits they give over contiguous storage: Dantzig pivoting, the
// stabilisation of PGS's answer (the repair of degenerate sets and the factorisation's rank
// it leaves), the explicit form of its classification from that factorisation, and the
// single-use adjoint; on random friction problems (sticking and sliding) and a box on four
// contacts (a rank-deficient clamping set), in the first, a middle and the last lane.
TEST(Lcp, SolversOverInterleavedRowsAsContiguous) {
  std::mt19937 rng(31);
  std::vector<Problem<>> problems;
  for (int t = 0; t < 4; ++t) problems.push_back(random_contacts(rng, 3, 10, t % 2 ? 2.0 : 0.3));
  problems.push_back(box_on_four_contacts(0.2, 0.0, 0.5, 0.0));
  int deficient = 0;
  for (const Problem<>& p : problems) {
    const LcpProblem<double> v = p.view();
    const int n = p.n;
    for (int lane : {0, 13, 31}) {
      Work<double> w(n);
      LcpTile tile(n, lane);
      std::vector<double> f(n, 0.0), g(n, 0.0);
      EXPECT_EQ(dantzig(v, f.data(), 1e-9, 1e-10, 8, w.s.data(), w.is.data()),
                dantzig(v, g.data(), 1e-9, 1e-10, 8, tile.s(), tile.is()));
      EXPECT_EQ(f, g);
      // 30 sweeps leave sets to repair; the stabilised answer and its factorisation's rank
      pgs(v, f.data(), 30, 1.0, p.pgs_scratch());
      g = f;
      std::vector<int> cf(n, 0), cg(n, 0);
      int rank_f = -2, rank_g = -2;
      const bool ok =
          stabilize(v, f.data(), cf.data(), 1e-9, 1e-10, w.s.data(), w.is.data(), &rank_f);
      EXPECT_EQ(ok, stabilize(v, g.data(), cg.data(), 1e-9, 1e-10, tile.s(), tile.is(), &rank_g));
      EXPECT_EQ(f, g);
      EXPECT_EQ(cf, cg);
      EXPECT_EQ(rank_f, rank_g);
      if (!ok) continue;
      // the explicit form, from the factorisation each storage holds
      Storage store_f, store_g;
      auto carve = [&](Arena<double>& a) { return lcp_adjoint_explicit_carve(n, a); };
      LcpAdjointFactor<double> Ef = store_f.carve(carve), Eg = store_g.carve(carve);
      lcp_adjoint_factor_explicit(v, f.data(), cf.data(), 1e-10, Ef, w.s.data(), w.is.data(),
                                  rank_f);
      lcp_adjoint_factor_explicit(v, g.data(), cg.data(), 1e-10, Eg, tile.s(), tile.is(), rank_g);
      EXPECT_EQ(store_f.reals, store_g.reals);
      EXPECT_EQ(store_f.ints, store_g.ints);
      deficient += Ef.nnull > 0;
      // the single-use adjoint
      std::vector<double> adj_f(n), af(6 * n, 0.0), ag(6 * n, 0.0);
      for (double& x : adj_f) x = uniform(rng, -1, 1);
      for (std::vector<double>* a : {&af, &ag}) {
        double* x = a->data();
        LcpAdjointA<double> aA{x, x + n, x + 2 * n, x + 3 * n};
        if (a == &af)
          adj_lcp(v, f.data(), cf.data(), adj_f.data(), aA, x + 4 * n, x + 5 * n, 1e-10, w.s.data(),
                  w.is.data());
        else
          adj_lcp(v, g.data(), cg.data(), adj_f.data(), aA, x + 4 * n, x + 5 * n, 1e-10, tile.s(),
                  tile.is());
      }
      EXPECT_EQ(af, ag);
      tile.expect_lane_only();
    }
  }
  EXPECT_GT(deficient, 0);  // the box's four contacts
}

TEST(Dense, CodGivesMinimumNormLeastSquares) {
  // K = U V^T (n x n, rank r, not symmetric): x = K^+ c satisfies the normal equations
  // K^T (K x - c) = 0 and lies in the row space span(V), which together define the minimum-norm
  // least-squares solution; the same for K^T. Full rank: K x = c exactly. cod_pinv_transpose
  // gives K^+T column by column as cod_solve_transpose; cod_null_basis an orthonormal basis of
  // K's null space.
  std::mt19937 rng(23);
  const int n = 6;
  for (int r : {6, 4, 1}) {
    const auto [U, V, K] = low_rank(rng, n, r);
    Storage store;
    Cod<double> cod = store.carve([&](Arena<double>& a) { return cod_carve(n, a); });
    EXPECT_EQ(cod_factor(cod, K.data(), 1e-10), r);
    for (int transpose = 0; transpose < 2; ++transpose) {
      // Kt is the matrix being inverted, W spans its row space
      std::vector<double> Kt(n * n);
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) Kt[i * n + j] = transpose ? K[j * n + i] : K[i * n + j];
      const std::vector<double>& W = transpose ? U : V;
      std::vector<double> c(n), x(n);
      for (double& v : c) v = uniform(rng, -1, 1);
      x = c;
      transpose ? cod_solve_transpose(cod, x.data()) : cod_solve(cod, x.data());
      std::vector<double> res(n, 0.0);
      for (int i = 0; i < n; ++i) {
        res[i] = -c[i];
        for (int j = 0; j < n; ++j) res[i] += Kt[i * n + j] * x[j];
      }
      for (int j = 0; j < n; ++j) {
        double s2 = 0;
        for (int i = 0; i < n; ++i) s2 += Kt[i * n + j] * res[i];
        EXPECT_NEAR(s2, 0.0, 1e-12);
        if (r == n) {
          EXPECT_NEAR(res[j], 0.0, 1e-12);
        }
      }
      // x - W (W^T W)^-1 W^T x = 0
      std::vector<double> G(r * r, 0.0), y(r, 0.0);
      for (int a = 0; a < r; ++a) {
        for (int i = 0; i < n; ++i) y[a] += W[i * r + a] * x[i];
        for (int b = 0; b < r; ++b)
          for (int i = 0; i < n; ++i) G[a * r + b] += W[i * r + a] * W[i * r + b];
      }
      ASSERT_TRUE(cholesky(G.data(), r));
      cholesky_solve(G.data(), r, y.data());
      for (int i = 0; i < n; ++i) {
        double proj = 0;
        for (int a = 0; a < r; ++a) proj += W[i * r + a] * y[a];
        EXPECT_NEAR(x[i], proj, 1e-12);
      }
    }
    // the explicit K^+T, all columns at once, is the solve of each unit vector
    std::vector<double> P(n * n), w(n), e(n);
    cod_pinv_transpose(cod, P.data(), w.data());
    for (int col = 0; col < n; ++col) {
      for (int i = 0; i < n; ++i) e[i] = i == col;
      cod_solve_transpose(cod, e.data());
      for (int i = 0; i < n; ++i) EXPECT_NEAR(P[i * n + col], e[i], 1e-13) << "rank " << r;
    }
    // the null-space basis: K V = 0, V^T V = I, n - r columns
    const int k = n - r;
    std::vector<double> Vn(n * k);
    cod_null_basis(cod, Vn.data(), w.data());
    for (int j = 0; j < k; ++j) {
      for (int i = 0; i < n; ++i) {
        double kv = 0;
        for (int l = 0; l < n; ++l) kv += K[i * n + l] * Vn[l * k + j];
        EXPECT_NEAR(kv, 0.0, 1e-12) << "rank " << r;
      }
      for (int j2 = 0; j2 < k; ++j2) {
        double vv = 0;
        for (int l = 0; l < n; ++l) vv += Vn[l * k + j] * Vn[l * k + j2];
        EXPECT_NEAR(vv, j == j2 ? 1.0 : 0.0, 1e-12) << "rank " << r;
      }
    }
  }
}

}  // namespace
}  // namespace phx
