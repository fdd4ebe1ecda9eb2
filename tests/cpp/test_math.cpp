// Identities of the math layer: quaternions, spatial algebra, dense Cholesky, dual numbers.
#include <gtest/gtest.h>

#include <random>

#include "phalanx/math/dense.h"
#include "phalanx/math/dual.h"
#include "phalanx/math/quat.h"
#include "phalanx/math/spatial.h"
#include "phalanx/report.h"

namespace phx {
namespace {

std::mt19937 rng(7);
double uniform() { return std::uniform_real_distribution<double>(-1, 1)(rng); }
Vec3<double> rand3() { return {uniform(), uniform(), uniform()}; }
Vec6<double> rand6() { return Vec6<double>::make(rand3(), rand3()); }
Quat<double> rand_quat() { return normalize(Quat<double>{uniform(), uniform(), uniform(), uniform()}); }

TEST(Quat, MatrixIsOrthonormalAndComposes) {
  for (int t = 0; t < 100; ++t) {
    Quat<double> a = rand_quat(), b = rand_quat();
    Mat3<double> Ra = to_mat(a), Rb = to_mat(b), Rab = to_mat(a * b);
    Mat3<double> P = Ra * Rb;
    for (int i = 0; i < 9; ++i) EXPECT_NEAR(P.m[i], Rab.m[i], 1e-14);
    // R^T R = 1
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_NEAR(dot(Ra.col(i), Ra.col(j)), i == j ? 1.0 : 0.0, 1e-14);
  }
}

TEST(Quat, AxisAngleRotatesAboutItsAxis) {
  // rotating x by 90 degrees about z gives y
  Mat3<double> R = to_mat(axis_angle(Vec3<double>{0, 0, 1}, M_PI / 2));
  Vec3<double> y = R * Vec3<double>{1, 0, 0};
  EXPECT_NEAR(y.x, 0, 1e-15);
  EXPECT_NEAR(y.y, 1, 1e-15);
  EXPECT_NEAR(y.z, 0, 1e-15);
}

TEST(Quat, SubQuatInvertsIntegrate) {
  // integrate(q, v, h) followed by sub_quat recovers h v for rotations below pi
  for (int t = 0; t < 100; ++t) {
    Quat<double> q = rand_quat();
    Vec3<double> v = rand3();
    Quat<double> q2 = integrate(q, v, 0.7);
    Vec3<double> r = sub_quat(q2, q);
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(r[i], 0.7 * v[i], 1e-12);
  }
}

TEST(Quat, AngleAxisIsTheRotationAndItsAdjointMatchesDifferences) {
  for (int t = 0; t < 50; ++t) {
    // a rotation by angle about axis, scaled by 0.5 to 2 and of either sign, is read back
    Vec3<double> axis = rand3();
    axis = (1 / norm(axis)) * axis;
    const double angle = 0.1 + 3.0 * std::abs(uniform());
    const double scale = (t % 2 ? -1 : 1) * (1.25 + 0.75 * uniform());
    const Quat<double> r = axis_angle(axis, angle);
    const Quat<double> q{scale * r.w, scale * r.x, scale * r.y, scale * r.z};
    Vec3<double> u;
    const double theta = quat_angle_axis(q, u);
    EXPECT_NEAR(theta, angle, 1e-14);
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(u[i], axis[i], 1e-13);
    // <adj_theta, dtheta> + <adj_u, du> against central differences along a random direction
    const double adj_theta = uniform();
    const Vec3<double> adj_u = rand3();
    const Quat<double> d{uniform(), uniform(), uniform(), uniform()};
    auto loss = [&](double h) {
      Vec3<double> v;
      const double th = quat_angle_axis(
          Quat<double>{q.w + h * d.w, q.x + h * d.x, q.y + h * d.y, q.z + h * d.z}, v);
      return adj_theta * th + dot(adj_u, v);
    };
    Quat<double> adj_q = Quat<double>::zero();
    adj_quat_angle_axis(q, adj_theta, adj_u, adj_q);
    const double ad = adj_q.w * d.w + adj_q.x * d.x + adj_q.y * d.y + adj_q.z * d.z;
    const double fd = (loss(1e-6) - loss(-1e-6)) / 2e-6;
    EXPECT_NEAR(ad, fd, 1e-7 * (1 + std::abs(fd))) << t;
  }
}

// A spatial inertia about another point describes the same body: the momentum of the same
// motion, taken about the new point (L' = L - s x p), and back again.
TEST(Spatial, ShiftedInertiaKeepsTheMomentumOfTheSameMotion) {
  for (int t = 0; t < 100; ++t) {
    Inertia<double> J;
    Mat3<double> R = to_mat(rand_quat());
    Vec3<double> d{1 + uniform(), 1 + uniform(), 1 + uniform()}, c = rand3();
    J.m = 2 + uniform();
    // R diag(d) R^T + m (|c|^2 1 - c c^T) about o, the centre of mass at o + c
    const int rr[6] = {0, 1, 2, 0, 0, 1}, cl[6] = {0, 1, 2, 1, 2, 2};
    for (int k = 0; k < 6; ++k) {
      int a = rr[k], b = cl[k];
      J.I[k] = R(a, 0) * d.x * R(b, 0) + R(a, 1) * d.y * R(b, 1) + R(a, 2) * d.z * R(b, 2) +
               J.m * ((a == b ? dot(c, c) : 0.0) - c[a] * c[b]);
    }
    J.h = J.m * c;
    Vec3<double> s = rand3();
    Vec6<double> v = rand6();                                                     // about o
    Vec6<double> v_s = Vec6<double>::make(v.ang(), v.lin() + cross(v.ang(), s));  // about o + s
    Vec6<double> f = J * v, f_s = shift_inertia(J, s) * v_s;
    Vec3<double> L = f.ang() - cross(s, f.lin());
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(f_s.ang()[i], L[i], 1e-13);
      EXPECT_NEAR(f_s.lin()[i], f.lin()[i], 1e-13);
    }
    Inertia<double> back = shift_inertia(shift_inertia(J, s), -s);
    for (int k = 0; k < 6; ++k) EXPECT_NEAR(back.I[k], J.I[k], 1e-13);
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(back.h[i], J.h[i], 1e-14);
  }
}

TEST(Spatial, CrossProductsAreDual) {
  // (v x m) . f = -m . (v x* f): the force cross product is minus the transpose
  for (int t = 0; t < 100; ++t) {
    Vec6<double> v = rand6(), m = rand6(), f = rand6();
    EXPECT_NEAR(dot(cross_motion(v, m), f), -dot(m, cross_force(v, f)), 1e-13);
  }
}

TEST(Spatial, InertiaMatrixMatchesProduct) {
  // the 6x6 form of a spatial inertia applies the same map as the compact product
  Inertia<double> J;
  J.I[0] = 2; J.I[1] = 3; J.I[2] = 4; J.I[3] = 0.1; J.I[4] = -0.2; J.I[5] = 0.3;
  J.h = {0.5, -0.4, 0.3};
  J.m = 1.7;
  Mat6<double> A = Mat6<double>::from(J);
  for (int t = 0; t < 20; ++t) {
    Vec6<double> v = rand6();
    Vec6<double> a = J * v, b = A * v;
    for (int i = 0; i < 6; ++i) EXPECT_NEAR(a[i], b[i], 1e-14);
  }
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j) EXPECT_EQ(A.m[6 * i + j], A.m[6 * j + i]);
}

TEST(Spatial, AdjointsMatchDualNumbers) {
  // <adj_r, d r> computed by dual numbers equals <adj_inputs, d inputs>
  using D = Dual<double, 1>;
  for (int t = 0; t < 20; ++t) {
    Vec6<double> m1 = rand6(), m2 = rand6(), dm1 = rand6(), dm2 = rand6(), ar = rand6();
    Vec6<D> x1, x2;
    for (int i = 0; i < 6; ++i) {
      x1[i] = m1[i];
      x1[i].d[0] = dm1[i];
      x2[i] = m2[i];
      x2[i].d[0] = dm2[i];
    }
    Vec6<D> rm = cross_motion(x1, x2), rf = cross_force(x1, x2);
    Vec6<double> a1, a2, b1, b2;
    adj_cross_motion(m1, m2, a1, a2, ar);
    adj_cross_force(m1, m2, b1, b2, ar);
    double jvp_m = 0, jvp_f = 0;
    for (int i = 0; i < 6; ++i) {
      jvp_m += ar[i] * rm[i].d[0];
      jvp_f += ar[i] * rf[i].d[0];
    }
    EXPECT_NEAR(jvp_m, dot(a1, dm1) + dot(a2, dm2), 1e-13);
    EXPECT_NEAR(jvp_f, dot(b1, dm1) + dot(b2, dm2), 1e-13);
  }
}

TEST(Spatial, InertiaProductAdjointMatchesDualNumbers) {
  using D = Dual<double, 1>;
  Inertia<double> J, dJ;
  for (int i = 0; i < 6; ++i) {
    J.I[i] = uniform();
    dJ.I[i] = uniform();
  }
  J.h = rand3();
  dJ.h = rand3();
  J.m = 2.0;
  dJ.m = 0.3;
  Vec6<double> v = rand6(), dv = rand6(), af = rand6();
  Inertia<D> Jd;
  for (int i = 0; i < 6; ++i) {
    Jd.I[i] = J.I[i];
    Jd.I[i].d[0] = dJ.I[i];
  }
  for (int i = 0; i < 3; ++i) {
    Jd.h[i] = J.h[i];
    Jd.h[i].d[0] = dJ.h[i];
  }
  Jd.m = J.m;
  Jd.m.d[0] = dJ.m;
  Vec6<D> vd;
  for (int i = 0; i < 6; ++i) {
    vd[i] = v[i];
    vd[i].d[0] = dv[i];
  }
  Vec6<D> f = Jd * vd;
  double jvp = 0;
  for (int i = 0; i < 6; ++i) jvp += af[i] * f[i].d[0];
  Inertia<double> aJ;
  Vec6<double> av;
  adj_inertia_mul(J, v, aJ, av, af);
  double vjp = dot(av, dv) + dot(aJ.h, dJ.h) + aJ.m * dJ.m;
  for (int i = 0; i < 6; ++i) vjp += aJ.I[i] * dJ.I[i];
  EXPECT_NEAR(jvp, vjp, 1e-13);
}

TEST(Dense, CholeskySolvesSpdSystem) {
  const int n = 5;
  double B[n * n], A[n * n], x[n], b[n];
  for (double& v : B) v = uniform();
  // A = B B^T + n I is symmetric positive definite
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double s = i == j ? n : 0;
      for (int k = 0; k < n; ++k) s += B[i * n + k] * B[j * n + k];
      A[i * n + j] = s;
    }
  for (int i = 0; i < n; ++i) x[i] = uniform();
  for (int i = 0; i < n; ++i) {
    b[i] = 0;
    for (int j = 0; j < n; ++j) b[i] += A[i * n + j] * x[j];
  }
  double L[n * n];
  for (int i = 0; i < n * n; ++i) L[i] = A[i];
  ASSERT_TRUE(cholesky(L, n));
  cholesky_solve(L, n, b);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(b[i], x[i], 1e-12);
  // not positive definite
  double C[4] = {1, 2, 2, 1};
  EXPECT_FALSE(cholesky(C, 2));
}

// back substitution of several right-hand sides at once: each vector the same, bit for bit, as
// solved alone, on a matrix of two blocks (dof trees) too, and A x = b solved
TEST(Dense, GroupedBackSubstitutionIsEachVectorsAlone) {
  const int n = 9;
  const int start[n] = {0, 0, 0, 0, 4, 4, 4, 4, 4};  // blocks [0, 4) and [4, 9)
  for (const int* blocks : {static_cast<const int*>(nullptr), start}) {
    double A[n * n], L[n * n];
    for (int i = 0; i < n; ++i)
      for (int j = 0; j <= i; ++j) {
        const bool coupled = !blocks || blocks[i] == blocks[j];
        A[i * n + j] = A[j * n + i] = i == j ? n + uniform() : coupled ? 0.5 * uniform() : 0.0;
      }
    for (int i = 0; i < n * n; ++i) L[i] = A[i];
    ASSERT_TRUE(cholesky(L, n, blocks));
    double x[3][n], b[3][n], alone[3][n];
    for (int g = 0; g < 3; ++g) {
      for (int i = 0; i < n; ++i) x[g][i] = uniform();
      for (int i = 0; i < n; ++i) {
        b[g][i] = 0;
        for (int j = 0; j < n; ++j) b[g][i] += A[i * n + j] * x[g][j];
        alone[g][i] = b[g][i];
      }
      cholesky_solve(L, n, alone[g], blocks);
      cholesky_solve_lower(L, n, b[g], blocks);
    }
    double* const group[3] = {b[0], b[1], b[2]};
    cholesky_solve_upper_group<3>(L, n, group, blocks);
    for (int g = 0; g < 3; ++g)
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(b[g][i], alone[g][i]);
        EXPECT_NEAR(b[g][i], x[g][i], 1e-12);
      }
  }
}

// a sum of outer products written out is the sum of its terms, for every number of terms
TEST(Dense, OuterSumWritesTheSumOfItsTerms) {
  const int nrow = 5, ncol = 11;
  double u[7][nrow], v[7][ncol], A[nrow * ncol];
  for (int k = 0; k < 7; ++k) {
    for (double& e : u[k]) e = uniform();
    for (double& e : v[k]) e = uniform();
  }
  for (int n = 0; n <= 7; ++n) {
    OuterSum<double, 7> sum;
    for (int k = 0; k < n; ++k) sum.add(u[k], v[k], k % 2 ? -1.5 : 0.5);
    sum.write(A, nrow, ncol);
    for (int i = 0; i < nrow; ++i)
      for (int j = 0; j < ncol; ++j) {
        double expect = 0;
        for (int k = 0; k < n; ++k) expect += (k % 2 ? -1.5 : 0.5) * u[k][i] * v[k][j];
        EXPECT_NEAR(A[i * ncol + j], expect, 1e-14) << n << " terms";
      }
  }
}

// adjoint of x = A^-1 b: <adj_x, dx> = <adj_b, db> + <adj_A, dA> with dx from dual numbers
// running cholesky + cholesky_solve, and from central differences
TEST(Dense, CholeskySolveAdjointMatchesDualNumbersAndFiniteDifferences) {
  using D = Dual<double, 1>;
  const int n = 4;
  double B[n * n], A[n * n], b[n], dA[n * n], db[n], adj_x[n];
  for (double& v : B) v = uniform();
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double s = i == j ? 2.0 : 0.0;
      for (int k = 0; k < n; ++k) s += B[i * n + k] * B[j * n + k];
      A[i * n + j] = s;
    }
  for (int i = 0; i < n; ++i) {
    b[i] = uniform();
    db[i] = uniform();
    adj_x[i] = uniform();
    for (int j = 0; j <= i; ++j) dA[i * n + j] = dA[j * n + i] = uniform();  // symmetric
  }
  // forward mode through the factorisation
  D Ad[n * n], xd[n];
  for (int i = 0; i < n * n; ++i) {
    Ad[i] = A[i];
    Ad[i].d[0] = dA[i];
  }
  for (int i = 0; i < n; ++i) {
    xd[i] = b[i];
    xd[i].d[0] = db[i];
  }
  ASSERT_TRUE(cholesky(Ad, n));
  cholesky_solve(Ad, n, xd);
  // central differences
  auto solve = [&](double s, double* x) {
    double As[n * n];
    for (int i = 0; i < n * n; ++i) As[i] = A[i] + s * dA[i];
    for (int i = 0; i < n; ++i) x[i] = b[i] + s * db[i];
    cholesky(As, n);
    cholesky_solve(As, n, x);
  };
  double xp[n], xm[n], x[n];
  solve(1e-6, xp);
  solve(-1e-6, xm);
  solve(0.0, x);
  double jvp = 0, fd = 0;
  for (int i = 0; i < n; ++i) {
    jvp += adj_x[i] * xd[i].d[0];
    fd += adj_x[i] * (xp[i] - xm[i]) / 2e-6;
  }
  // reverse mode
  double L[n * n], y[n], adj_b[n] = {}, adj_A[n * n] = {};
  for (int i = 0; i < n * n; ++i) L[i] = A[i];
  cholesky(L, n);
  adj_cholesky_solve(L, n, x, adj_x, y, adj_b, adj_A);
  double vjp = 0;
  for (int i = 0; i < n; ++i) vjp += adj_b[i] * db[i];
  for (int i = 0; i < n * n; ++i) vjp += adj_A[i] * dA[i];
  EXPECT_NEAR(vjp, jvp, 1e-12 * (1 + std::abs(jvp)));
  EXPECT_NEAR(fd, jvp, 1e-6 * (1 + std::abs(jvp)));
}

TEST(Dual, DerivativesOfElementaryFunctions) {
  using D = Dual<double, 1>;
  D x(0.3);
  x.d[0] = 1;
  EXPECT_NEAR(sin(x).d[0], std::cos(0.3), 1e-15);
  EXPECT_NEAR(cos(x).d[0], -std::sin(0.3), 1e-15);
  EXPECT_NEAR(sqrt(x).d[0], 0.5 / std::sqrt(0.3), 1e-15);
  EXPECT_NEAR((x * x / (x + 1.0)).d[0], (2 * 0.3 * 1.3 - 0.09) / (1.3 * 1.3), 1e-15);
  D y(0.7);
  EXPECT_NEAR(atan2(x, y).d[0], 0.7 / (0.09 + 0.49), 1e-15);
}

}  // namespace
}  // namespace phx
