// Forward and inverse dynamics against analytic solutions and identities.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model_builder.h"
#include "phalanx/math/dense.h"
#include "phalanx/step.h"

namespace phx {
namespace {

using test::HostModel;
using test::ModelBuilder;

// a random state: qpos near qpos0 with unit quaternions, random qvel
struct State {
  std::vector<double> qpos, qvel, ctrl;
};
State random_state(const Model& m, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  State s{m.qpos0, std::vector<double>(m.nv), std::vector<double>(m.nu)};
  for (int j = 0; j < m.njnt; ++j) {
    int a = m.jnt_qposadr[j];
    int type = m.jnt_type[j];
    if (type == kJointFree) {
      for (int i = 0; i < 3; ++i) s.qpos[a + i] += 0.3 * u(rng);
      a += 3;
    }
    if (type == kJointFree || type == kJointBall) {
      Quat<double> q = normalize(Quat<double>{u(rng), u(rng), u(rng), u(rng)});
      q.store(&s.qpos[a]);
    } else {
      s.qpos[a] += 0.8 * u(rng);
    }
  }
  for (double& v : s.qvel) v = 2 * u(rng);
  for (double& c : s.ctrl) c = 1.5 * u(rng);
  return s;
}

// pendulum: a point-like mass m at distance l below a hinge about y, gravity -z:
//   (I_yy + m l^2) qacc = -m g l sin(q)
TEST(Dynamics, PendulumMatchesAnalytic) {
  const double m = 1.3, l = 0.7, Iyy = 0.01, g = 9.81;
  ModelBuilder b;
  b.body(0, {0, 0, 0}, {}, m, {Iyy, Iyy, Iyy}, {0, 0, -l});
  b.joint(kJointHinge, {0, 0, 0}, {0, 1, 0});
  Model model = b.build();
  HostModel<double> hm(model);
  for (double q : {0.0, 0.4, -1.2, 2.5}) {
    double qvel = 0.3, ctrl = 0, qacc, M;
    forward_dynamics(hm.view, &q, &qvel, &ctrl, 0.0, hm.w, &qacc);
    // hinge about +y rotates -z towards -x: the torque of gravity is -m g l sin(q)
    EXPECT_NEAR(qacc, -m * g * l * std::sin(q) / (Iyy + m * l * l), 1e-12) << "q = " << q;
    com_pos(hm.view, hm.w);
    crba(hm.view, hm.w, &M);
    EXPECT_NEAR(M, Iyy + m * l * l, 1e-14);
  }
}

// a free body: the centre of mass falls with gravity and the rotation obeys Euler's
// equations in the body frame, I dw/dt = -w x (I w), when the com is at the body origin
TEST(Dynamics, FreeBodyFollowsNewtonEuler) {
  const Vec3<double> I{0.1, 0.2, 0.3};
  ModelBuilder b;
  b.body(0, {0, 0, 1}, {}, 2.0, I);
  b.joint(kJointFree);
  Model model = b.build();
  HostModel<double> hm(model);
  State s = random_state(model, 3);
  std::vector<double> qacc(6);
  forward_dynamics(hm.view, s.qpos.data(), s.qvel.data(), s.ctrl.data(), 0.0, hm.w, qacc.data());
  EXPECT_NEAR(qacc[0], 0, 1e-12);
  EXPECT_NEAR(qacc[1], 0, 1e-12);
  EXPECT_NEAR(qacc[2], -9.81, 1e-12);
  Vec3<double> w = Vec3<double>::load(&s.qvel[3]);
  Vec3<double> Iw{I.x * w.x, I.y * w.y, I.z * w.z};
  Vec3<double> rhs = -cross(w, Iw);
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(qacc[3 + k], rhs[k] / I[k], 1e-12);
}

class MechanismTest : public ::testing::TestWithParam<unsigned> {};

// M is symmetric positive definite; ABA agrees with CRBA + RNEA + Cholesky; inverse dynamics
// inverts forward dynamics; kinetic energy from body velocities equals v^T M v / 2
TEST_P(MechanismTest, DynamicsIdentities) {
  Model model = test::random_mechanism(GetParam());
  HostModel<double> hm(model);
  const ModelView<double>& m = hm.view;
  Workspace<double>& w = hm.w;
  const int nv = m.nv;
  State s = random_state(model, GetParam() + 100);

  // forward dynamics by ABA
  std::vector<double> qacc(nv);
  forward_dynamics(m, s.qpos.data(), s.qvel.data(), s.ctrl.data(), 0.0, w, qacc.data());
  std::vector<double> qfrc(w.qfrc, w.qfrc + nv);

  // the same from M and c
  std::vector<double> M(nv * nv), c(nv), L;
  crba(m, w, M.data());
  rnea(m, s.qvel.data(), static_cast<const double*>(nullptr), w, c.data());
  for (int i = 0; i < nv; ++i)
    for (int j = 0; j < nv; ++j) EXPECT_DOUBLE_EQ(M[i * nv + j], M[j * nv + i]);
  L = M;
  ASSERT_TRUE(cholesky(L.data(), nv)) << "M is not positive definite";
  std::vector<double> x(nv);
  for (int i = 0; i < nv; ++i) x[i] = qfrc[i] - c[i];
  cholesky_solve(L.data(), nv, x.data());
  for (int i = 0; i < nv; ++i) EXPECT_NEAR(qacc[i], x[i], 1e-10 * (1 + std::abs(x[i])));

  // inverse dynamics: M qacc + c = qfrc
  std::vector<double> tau(nv);
  rnea(m, s.qvel.data(), qacc.data(), w, tau.data());
  for (int i = 0; i < nv; ++i) {
    EXPECT_NEAR(tau[i] + m.dof_armature[i] * qacc[i], qfrc[i], 1e-10 * (1 + std::abs(qfrc[i])));
  }

  // kinetic energy two ways
  double ke_bodies = 0, ke_joint = 0;
  com_vel(m, s.qvel.data(), w);
  for (int bdy = 1; bdy < m.nbody; ++bdy) {
    Vec6<double> v = Vec6<double>::load(w.cvel + 6 * bdy);
    ke_bodies += 0.5 * dot(v, Inertia<double>::load(w.cinert + 10 * bdy) * v);
  }
  for (int i = 0; i < nv; ++i)
    for (int j = 0; j < nv; ++j)
      ke_joint += 0.5 * s.qvel[i] * (M[i * nv + j] - (i == j ? m.dof_armature[i] : 0)) * s.qvel[j];
  EXPECT_NEAR(ke_bodies, ke_joint, 1e-12 * (1 + ke_joint));
}

// implicit damping: (M + dt D) qacc = f, checked through the dense solve; and the adjoints'
// solve without bias (aba_solve) of the same system, on the factorisation the forward left
// (which a reverse pass reads there) and on aba_factor's: the same bits
TEST_P(MechanismTest, ImplicitDampingSolvesShiftedSystem) {
  Model model = test::random_mechanism(GetParam());
  HostModel<double> hm(model);
  const ModelView<double>& m = hm.view;
  const int nv = m.nv;
  const double dt = 0.01;
  State s = random_state(model, GetParam() + 200);
  std::vector<double> qacc(nv), M(nv * nv), c(nv), tau(nv), x(nv), y(nv);
  forward_dynamics(m, s.qpos.data(), s.qvel.data(), s.ctrl.data(), dt, hm.w, qacc.data());
  std::vector<double> f(hm.w.qfrc, hm.w.qfrc + nv);
  std::mt19937 rng(GetParam() + 201);
  std::uniform_real_distribution<double> u(-1, 1);
  for (double& t : tau) t = u(rng);
  aba_solve(m, tau.data(), hm.w, x.data());
  for (int d = 0; d < nv; ++d) hm.w.aba_invD[d] = hm.w.aba_U[6 * d] = std::nan("");
  aba_factor(m, hm.w.armature, hm.w);
  aba_solve(m, tau.data(), hm.w, y.data());
  for (int i = 0; i < nv; ++i) EXPECT_EQ(x[i], y[i]) << "dof " << i;
  crba(m, hm.w, M.data());
  rnea(m, s.qvel.data(), static_cast<const double*>(nullptr), hm.w, c.data());
  for (int i = 0; i < nv; ++i) M[i * nv + i] += dt * m.dof_damping[i];
  ASSERT_TRUE(cholesky(M.data(), nv));
  for (int i = 0; i < nv; ++i) f[i] -= c[i];
  cholesky_solve(M.data(), nv, f.data());
  for (int i = 0; i < nv; ++i) EXPECT_NEAR(qacc[i], f[i], 1e-10 * (1 + std::abs(f[i])));
  cholesky_solve(M.data(), nv, tau.data());
  for (int i = 0; i < nv; ++i) EXPECT_NEAR(x[i], tau[i], 1e-10 * (1 + std::abs(tau[i])));
}

// without damping or actuation, semi-implicit Euler keeps the energy of a conservative
// system bounded: over 1 s at dt = 1e-4 the drift is O(dt)
TEST_P(MechanismTest, EnergyIsConservedWithoutDamping) {
  Model model = test::random_mechanism(GetParam());
  for (double& d : model.dof_damping) d = 0;
  for (double& k : model.jnt_stiffness) k = 0;
  for (double& g : model.actuator_gear) g = 0;
  model.opt.timestep = 1e-4;
  HostModel<double> hm(model);
  const ModelView<double>& m = hm.view;
  State s = random_state(model, GetParam() + 300);
  for (double& v : s.qvel) v *= 0.5;
  auto energy = [&] {
    kinematics(m, s.qpos.data(), hm.w);
    com_pos(m, hm.w);
    com_vel(m, s.qvel.data(), hm.w);
    double e = 0;
    for (int b = 1; b < m.nbody; ++b) {
      Vec6<double> v = Vec6<double>::load(hm.w.cvel + 6 * b);
      Inertia<double> J = Inertia<double>::load(hm.w.cinert + 10 * b);
      e += 0.5 * dot(v, J * v);
      // potential: -m g . com, with com = ref + h / m
      Vec3<double> com = Vec3<double>::load(hm.w.xpos + 3 * m.body_rootid[b]) + (1 / J.m) * J.h;
      e -= J.m * dot(Vec3<double>::load(m.gravity), com);
    }
    // armature adds kinetic energy of the rotors
    for (int d = 0; d < m.nv; ++d) e += 0.5 * m.dof_armature[d] * s.qvel[d] * s.qvel[d];
    return e;
  };
  double e0 = energy();
  for (int t = 0; t < 10000; ++t) {
    ASSERT_EQ(step(m, s.qpos.data(), s.qvel.data(), s.ctrl.data(), hm.w), 0u);
  }
  EXPECT_NEAR(energy(), e0, 2e-3 * (1 + std::abs(e0)));
}

INSTANTIATE_TEST_SUITE_P(Random, MechanismTest, ::testing::Values(1u, 2u, 3u));

// a non-finite ctrl sets the status bit and leaves the state untouched
TEST(Dynamics, NonFiniteInputSetsStatus) {
  Model model = test::random_mechanism(5);
  HostModel<double> hm(model);
  State s = random_state(model, 6);
  State s0 = s;
  s.ctrl[1] = NAN;
  EXPECT_EQ(step(hm.view, s.qpos.data(), s.qvel.data(), s.ctrl.data(), hm.w), unsigned(kStatusNanCtrl));
  EXPECT_EQ(s.qpos, s0.qpos);
  s.ctrl = s0.ctrl;
  s.qvel[0] = INFINITY;
  EXPECT_EQ(step(hm.view, s.qpos.data(), s.qvel.data(), s.ctrl.data(), hm.w), unsigned(kStatusNanState));
}

}  // namespace
}  // namespace phx
