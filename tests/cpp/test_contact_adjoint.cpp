// adj_step_constrained (constraint_adjoint.h) checked in double against central differences of
// step_constrained: for each scene, the gradient of L = <wq, qpos'> + <wv, qvel'> with respect to
// every entry of qpos, qvel, ctrl, body_mass, body_inertia, dof_damping, dof_armature,
// actuator_gear, the sliding friction and the restitution of every geom. The states are chosen
// so that within +-h no contact appears or disappears and no LCP row changes class (the
// adjoint is that of the branch taken), and every forward starts without warm start.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "host/model.h"
#include "model_builder.h"
#include "phalanx/constraint_adjoint.h"

namespace phx {
namespace {

using test::HostModel;

// contacts and rows of one environment, with their storage
struct ContactStore {
  std::vector<int> ncon{0}, overflow{0}, ccd_iterations{0, 0}, geom, nefc{0}, nwarm{0}, set_hit{0},
      efc_class, efc_key;
  std::vector<double> pos, frame, dist, efc_force;
  ContactView<double> view;

  explicit ContactStore(const ModelView<double>& m) {
    long nc = std::max(m.nconmax, 1), ne = std::max(m.nefcmax, 1);
    geom.resize(2 * nc);
    efc_class.resize(ne);
    efc_key.resize(ne);
    pos.resize(3 * nc);
    frame.resize(9 * nc);
    dist.resize(nc);
    efc_force.resize(ne);
    view = {ncon.data(),      overflow.data(),  ccd_iterations.data(), pos.data(),   frame.data(),
            dist.data(),      geom.data(),      nefc.data(),           nwarm.data(), set_hit.data(),
            efc_class.data(), efc_force.data(), efc_key.data()};
  }
};

// one environment with the forward and adjoint scratch of a constrained step
struct Env {
  HostModel<double> hm;
  test::Carved<ConstraintWorkspace<double>, double> cstore;
  test::Carved<AdjWorkspace<double>, double> astore;
  test::Carved<AdjConstraintWorkspace<double>, double> sstore;
  ConstraintWorkspace<double>& c = cstore.w;
  AdjWorkspace<double>& a = astore.w;
  AdjConstraintWorkspace<double>& s = sstore.w;
  ContactStore cs;

  explicit Env(const Model& model)
      : hm(model), cstore(hm.view), astore(hm.view), sstore(hm.view), cs(hm.view) {}
};

// the state of a step
struct State {
  std::vector<double> qpos, qvel, ctrl;
};

// the differentiated inputs: the state and parameter vectors of the Model
struct Inputs {
  State x;
  Model model;

  std::vector<std::pair<const char*, std::vector<double>*>> all() {
    return {{"qpos", &x.qpos},
            {"qvel", &x.qvel},
            {"ctrl", &x.ctrl},
            {"body_mass", &model.body_mass},
            {"body_inertia", &model.body_inertia},
            {"dof_damping", &model.dof_damping},
            {"dof_armature", &model.dof_armature},
            {"actuator_gear", &model.actuator_gear},
            {"geom_friction", &model.geom_friction},
            {"geom_restitution", &model.geom_restitution},
            {"body_ipos", &model.body_ipos},
            {"geom_size", &model.geom_size}};
  }
};

struct Result {
  std::vector<double> qpos, qvel;
  unsigned status;
  int ncon, nefc;
  std::vector<int> cls;
};

Result forward(Inputs in) {
  Env env(in.model);
  Result r;
  r.qpos = in.x.qpos;
  r.qvel = in.x.qvel;
  r.status = step_constrained(env.hm.view, r.qpos.data(), r.qvel.data(), in.x.ctrl.data(),
                              env.hm.w, env.c, env.cs.view);
  r.ncon = env.cs.ncon[0];
  r.nefc = env.cs.nefc[0];
  r.cls.assign(env.cs.efc_class.begin(), env.cs.efc_class.begin() + r.nefc);
  for (int& k : r.cls) k &= kLcpClassMask;
  return r;
}

// gradients of <wq, qpos'> + <wv, qvel'> in the layout of Inputs::all()
std::vector<std::vector<double>> adjoint(Inputs in, const std::vector<double>& wq,
                                         const std::vector<double>& wv) {
  Env env(in.model);
  const ModelView<double>& m = env.hm.view;
  Inputs g = in;
  auto vg = g.all();
  for (auto& [name, v] : vg) std::fill(v->begin(), v->end(), 0.0);
  ModelAdjoint<double> am{g.model.body_mass.data(),    g.model.body_inertia.data(),
                          g.model.dof_damping.data(),  g.model.dof_armature.data(),
                          g.model.jnt_stiffness.data(), g.model.actuator_gear.data(),
                          g.model.body_ipos.data()};
  ContactModelAdjoint<double> ac{g.model.geom_friction.data(), g.model.geom_restitution.data(),
                                 g.model.geom_size.data()};
  StepEnvAdjoint<double> p{};
  p.q = in.x.qpos.data(), p.v = in.x.qvel.data();
  p.gq_next = wq.data(), p.gv_next = wv.data();
  p.gq = g.x.qpos.data(), p.gv = g.x.qvel.data();
  p.am = &am, p.ac = &ac;
  unsigned st = adj_step_constrained(m, env.hm.w, env.c, env.cs.view, env.a, env.s, p,
                                     in.x.ctrl.data(), g.x.ctrl.data());
  EXPECT_EQ(st & kStatusStopMask, 0u);
  std::vector<std::vector<double>> out;
  for (auto& [name, v] : vg) out.push_back(*v);
  return out;
}

// Central differences of every input entry against the adjoint. The check per entry is
// |ad - fd| <= rtol (|fd| + 1e-3 gmax), gmax the largest |fd| of the scene (entries far below
// the scale are limited by the difference's round-off). Returns the worst relative error.
double gradcheck(const std::string& name, const Inputs& in0, double h, double rtol = 1e-6) {
  Result y0 = forward(in0);
  EXPECT_EQ(y0.status & kStatusStopMask, 0u) << name;
  EXPECT_GT(y0.nefc, 0) << name << ": no constraint rows";
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> wq(in0.x.qpos.size()), wv(in0.x.qvel.size());
  for (double& z : wq) z = u(rng);
  for (double& z : wv) z = u(rng);
  auto loss = [&](const Result& r) {
    double l = 0;
    for (size_t i = 0; i < wq.size(); ++i) l += wq[i] * r.qpos[i];
    for (size_t i = 0; i < wv.size(); ++i) l += wv[i] * r.qvel[i];
    return l;
  };
  std::vector<std::vector<double>> ad = adjoint(in0, wq, wv);

  // finite differences, checking that the contact set and the classes stay put
  Inputs in = in0;
  auto vin = in.all();
  std::vector<std::vector<double>> fd(vin.size());
  double gmax = 0;
  int nchange = 0;
  for (size_t k = 0; k < vin.size(); ++k) {
    std::vector<double>& v = *vin[k].second;
    fd[k].resize(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      double x = v[i];
      v[i] = x + h;
      Result yp = forward(in);
      v[i] = x - h;
      Result ym = forward(in);
      v[i] = x;
      EXPECT_TRUE(yp.ncon == y0.ncon && ym.ncon == y0.ncon) << name << ": the contacts change";
      // degenerate rows (rank-deficient A_CC, ties) may be classified differently at x +- h
      // while the stabilised impulses are the same; counted, the gradient check decides
      nchange += yp.cls != y0.cls || ym.cls != y0.cls;
      fd[k][i] = (loss(yp) - loss(ym)) / (2 * h);
      gmax = std::max(gmax, std::abs(fd[k][i]));
    }
  }
  double worst = 0;
  for (size_t k = 0; k < vin.size(); ++k) {
    double worst_k = 0;
    for (size_t i = 0; i < fd[k].size(); ++i) {
      double err = std::abs(ad[k][i] - fd[k][i]) / (std::abs(fd[k][i]) + 1e-3 * gmax);
      worst_k = std::max(worst_k, err);
      EXPECT_LE(err, rtol) << name << ": " << vin[k].first << "[" << i << "] adjoint "
                           << ad[k][i] << " central difference " << fd[k][i];
    }
    worst = std::max(worst, worst_k);
    if (!fd[k].empty())
      std::printf("  %-14s %-16s worst rel. error %.2e\n", name.c_str(), vin[k].first, worst_k);
  }
  std::printf("  %-14s ncon %d nefc %d status %u, |grad|max %.3g, worst %.2e, %d inputs with "
              "classes changing at +-h\n",
              name.c_str(), y0.ncon, y0.nefc, y0.status, gmax, worst, nchange);
  return worst;
}

Model scene(const std::string& bodies, const std::string& extra = "") {
  return load_mjcf_string(
      "<mujoco><compiler angle='radian'/><option timestep='0.002'/><worldbody>"
      "<geom name='floor' type='plane' size='10 10 .1'/>" +
      bodies + "</worldbody>" + extra + "</mujoco>");
}

Inputs at_rest(const Model& model, int solver) {
  Inputs in;
  in.model = model;
  in.model.opt.lcp_solver = solver;
  in.model.opt.lcp_tolerance = 1e-6;  // classification and acceptance tight: the adjoint is exact
  in.x.qpos = model.qpos0;
  in.x.qvel.assign(model.nv, 0.0);
  in.x.ctrl.assign(model.nu, 0.0);
  return in;
}

class ContactAdjoint : public ::testing::TestWithParam<int> {};

// A box resting on the floor, pressed 1.5 mm in (the push-out term is active), moving slowly
// enough that friction sticks at all four corners: 12 rows, A_CC rank deficient (minimum-norm
// impulses).
TEST_P(ContactAdjoint, BoxRestingSticks) {
  Inputs in = at_rest(scene("<body pos='0 0 0.0985'><freejoint/>"
                            "<geom type='box' size='.1 .1 .1' mass='2'/></body>"),
                      GetParam());
  in.x.qvel = {0.01, -0.005, -0.02, 0.01, 0.02, -0.01};
  in.model.dof_damping = {0.1, 0.2, 0.3, 0.1, 0.2, 0.3};
  EXPECT_LE(gradcheck("box_rest", in, 1e-6), 1e-6);
}

// A sphere sliding and spinning on the floor: friction at its bound mu f_n (class B).
TEST_P(ContactAdjoint, SphereSlides) {
  Inputs in = at_rest(scene("<body pos='0 0 0.0985'><freejoint/>"
                            "<geom type='sphere' size='.1' mass='1' friction='0.3'/></body>"),
                      GetParam());
  in.model.geom_friction[0] = 0.2;  // the pair uses the sphere's 0.3
  in.x.qvel = {1.0, 0.3, -0.05, 0.2, -0.1, 0.3};
  EXPECT_LE(gradcheck("sphere_slide", in, 1e-6), 1e-6);
}

// A sphere hitting the floor at 2 m/s with restitution 0.5: the bounce term e J qvel wins over
// the push-out, friction sticks.
TEST_P(ContactAdjoint, SphereBounces) {
  Inputs in = at_rest(scene("<body pos='0 0 0.0999'><freejoint/>"
                            "<geom type='sphere' size='.1' mass='1'/></body>"),
                      GetParam());
  in.model.geom_restitution[1] = 0.5;
  in.model.geom_restitution[0] = 0.2;
  in.x.qvel = {0.2, -0.1, -2.0, 0.1, 0.2, 0.0};
  EXPECT_LE(gradcheck("sphere_bounce", in, 1e-6), 1e-6);
}

// A motor-driven pendulum pressed 1.5 mrad beyond its upper joint limit, moving into it.
TEST_P(ContactAdjoint, PendulumOnJointLimit) {
  Inputs in = at_rest(
      load_mjcf_string("<mujoco><compiler angle='radian'/><worldbody><body pos='0 0 1'>"
                       "<joint name='j' type='hinge' axis='0 1 0' range='-0.5 0.5' "
                       "limited='true' damping='0.1' armature='0.01'/>"
                       "<geom type='capsule' fromto='0 0 0 0.5 0 0' size='0.05' mass='1' "
                       "contype='0' conaffinity='0'/></body></worldbody>"
                       "<actuator><motor joint='j' gear='2' ctrlrange='-1 1'/></actuator>"
                       "</mujoco>"),
      GetParam());
  in.x.qpos = {0.5015};
  in.x.qvel = {0.3};
  in.x.ctrl = {0.3};
  EXPECT_LE(gradcheck("limit", in, 1e-6), 1e-6);
}

// A capsule lying on the floor, tilted so that one end is pushed out and the other not, rolling.
// The two friction rows along the axis are nearly parallel (A_CC ill-conditioned): PGS's
// classification gives no exact solution here, and solve_lcp falls back to Dantzig pivoting.
TEST_P(ContactAdjoint, CapsuleOnPlane) {
  Inputs in = at_rest(scene("<body pos='0 0 0.0492'><freejoint/>"
                            "<geom type='capsule' fromto='-.2 0 0 .2 0 0' size='.05' "
                            "mass='1'/></body>"),
                      GetParam());
  in.model.geom_restitution[1] = 0.1;  // bounce at the shallow end, push-out at the deep one
  double a = 0.002;  // tilt about y
  in.x.qpos[3] = std::cos(a / 2);
  in.x.qpos[5] = std::sin(a / 2);
  in.x.qvel = {0.05, 0.02, -0.1, 0.3, 0.05, 0.1};
  EXPECT_LE(gradcheck("capsule", in, 1e-6), 1e-6);
}

// A two-link horizontal arm at height z whose tip sphere pushes a box (centre 1.5 mm lower,
// turned by box_quat), driven by two motors, with distinct friction and restitution
// coefficients away from the kinks of the pair maximum and of e = 0.
Inputs arm_pushes_box(double z, const std::string& box_quat, int solver,
                      const std::string& actuators =
                          "<motor joint='j1' gear='3'/>"
                          "<motor joint='j2' gear='1'/>") {
  auto num = [](double v) { return std::to_string(v); };
  Inputs in = at_rest(
      scene("<body pos='0 0 " + num(z) +
                "'>"
                "<joint name='j1' type='hinge' axis='0 0 1' damping='0.2'/>"
                "<geom type='capsule' fromto='0 0 0 0.3 0 0' size='0.02' mass='1'/>"
                "<body pos='0.3 0 0'><joint name='j2' type='hinge' axis='0 0 1' damping='0.1'/>"
                "<geom type='capsule' fromto='0 0 0 0.3 0 0' size='0.02' mass='0.5'/>"
                "<geom type='sphere' pos='0.3 0 0' size='0.05' mass='0.2'/></body></body>"
                "<body pos='0.6 0.1495 " +
                num(z - 0.0015) + "' quat='" + box_quat +
                "'>"
                "<freejoint/><geom type='box' size='.1 .1 .1' mass='1'/></body>",
            "<actuator>" + actuators + "</actuator>"),
      solver);
  in.model.geom_friction = {0.8, 0, 0, 0.9, 0, 0, 0.9, 0, 0, 0.6, 0, 0, 0.7, 0, 0};
  in.model.geom_restitution = {0.1, 0.0, 0.0, 0.3, 0.2};
  in.x.qvel = {0.5, 0.1, 0.0, 0.0, -0.01, 0.0, 0.0, 0.0};
  in.x.ctrl = {0.5, -0.2};
  return in;
}

// The box in the air (no floor contacts, so the LCP is not degenerate) and turned: covers a
// contact normal that turns with q (the sphere-box face normal follows the box's yaw).
TEST_P(ContactAdjoint, ArmPushesFloatingBox) {
  Inputs in = arm_pushes_box(1.1, "0.999 0 0 0.0447", GetParam());
  EXPECT_LE(gradcheck("arm_floating_box", in, 1e-6), 1e-6);
}

// The same with position servos (damping kv in their biases) and the implicitfast integrator:
// the step's matrix is M - dt D (implicit.h), whose slopes in the configuration, the velocity
// and the controls the adjoint carries.
TEST_P(ContactAdjoint, ImplicitServoArmPushesFloatingBox) {
  Inputs in = arm_pushes_box(1.1, "0.999 0 0 0.0447", GetParam(),
                             "<position joint='j1' kp='20' kv='3' gear='2'/>"
                             "<position joint='j2' kp='10' kv='1.5'/>");
  in.model.opt.integrator = kIntegratorImplicitFast;
  EXPECT_LE(gradcheck("arm_implicit", in, 1e-6), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Solvers, ContactAdjoint,
                         ::testing::Values(int(kLcpDantzig), int(kLcpPgsStabilized)),
                         [](const auto& info) {
                           return info.param == kLcpDantzig ? "dantzig" : "pgs_stabilized";
                         });

// The box resting on the floor and pushed: four coplanar floor contacts (A_CC rank deficient,
// a family of impulses for one motion) with friction sliding at some corners and sticking at
// others. PGS + stabilisation: the minimum-norm impulses on PGS's classification leave the
// friction bounds, and the repair of lcp_solve_on_set_repaired moves the offending rows to
// their bounds; the result is one smooth branch. Dantzig is not checked here: at x +- h its
// pivoting lands on different vertices of the solution set (27 inputs change class), so its
// central differences mix branches.
TEST(ContactAdjointDegenerate, ArmPushesBoxOnFloor) {
  Inputs in = arm_pushes_box(0.1, "1 0 0 0", kLcpPgsStabilized);
  EXPECT_EQ(forward(in).nefc, 15);
  EXPECT_LE(gradcheck("arm_box", in, 1e-6), 1e-6);
}

// A replay that knows the step's rows (a tape's next record) tests only the geom pairs their
// keys name, and must build the same contacts and rows and take the same step bit for bit:
// a sphere and a box on the floor, a sphere on the box, a sphere above the floor (a pair tested
// without contact), a joint past its limit; also with nconmax cutting the box's four floor
// contacts to two, and with keys that do not match (detection over every pair again).
TEST(ContactReplay, KnownRowsNameTheirPairs) {
  Model base = scene(
      "<body pos='0 0 0.098'><freejoint/><geom type='sphere' size='.1'/></body>"
      "<body pos='1 0 0.099'><freejoint/><geom type='box' size='.1 .1 .1'/></body>"
      "<body pos='1 0 0.295'><freejoint/><geom type='sphere' size='.1'/></body>"
      "<body pos='2 0 0.12'><freejoint/><geom type='sphere' size='.1'/></body>"
      "<body pos='0 0 1'><joint type='hinge' axis='0 1 0' range='-0.1 0.1' limited='true'/>"
      "<geom type='capsule' fromto='0 0 0 0.3 0 0' size='.02' contype='0' conaffinity='0'/>"
      "</body>");
  for (int nconmax : {0, 3}) {
    Model model = base;
    if (nconmax) model.nconmax = nconmax;
    Inputs in = at_rest(model, kLcpPgsStabilized);
    in.x.qpos.back() = 0.12;  // past the limit
    Env env(in.model);
    const ModelView<double>& m = env.hm.view;
    std::vector<double> q = in.x.qpos, v = in.x.qvel;
    step_constrained(m, q.data(), v.data(), in.x.ctrl.data(), env.hm.w, env.c, env.cs.view);
    ContactStore first = env.cs;
    int ncon = first.ncon[0], nefc = first.nefc[0];
    EXPECT_EQ(ncon, nconmax ? nconmax : 6);
    EXPECT_EQ(first.overflow[0], nconmax ? 3 : 0);
    ASSERT_LT(first.efc_key[nefc - 1], 0);  // the limit row
    // the filtered detection itself (the replay below would fall back on a mismatch)
    ContactStore filtered(m);
    detect_contacts(m, env.c, filtered.view, first.efc_key.data(), nefc);
    ASSERT_EQ(filtered.ncon[0], ncon);
    for (int i = 0, row = 0; i < ncon; row += contact_rows(m, first.geom.data(), i), ++i)
      EXPECT_EQ(filtered.efc_key[i], first.efc_key[row]);
    for (int i = 0; i < 3 * ncon; ++i) EXPECT_EQ(filtered.pos[i], first.pos[i]);
    for (bool matching : {true, false}) {
      std::vector<int> key(first.efc_key.begin(), first.efc_key.begin() + nefc);
      if (!matching) key[0] += 3 * kMaxPairContacts;  // names the next pair
      LcpSolution<double> known{first.efc_force.data(), first.efc_class.data(), nefc, key.data()};
      Env replay(in.model);
      std::vector<double> qr = in.x.qpos, vr = in.x.qvel;
      step_constrained(m, qr.data(), vr.data(), in.x.ctrl.data(), replay.hm.w, replay.c,
                       replay.cs.view, known);
      EXPECT_EQ(replay.cs.ncon[0], ncon);
      EXPECT_EQ(replay.cs.nefc[0], nefc);
      for (int i = 0; i < 2 * ncon; ++i) EXPECT_EQ(replay.cs.geom[i], first.geom[i]);
      for (int i = 0; i < 3 * ncon; ++i) EXPECT_EQ(replay.cs.pos[i], first.pos[i]);
      for (int i = 0; i < 9 * ncon; ++i) EXPECT_EQ(replay.cs.frame[i], first.frame[i]);
      for (int r = 0; r < nefc; ++r) EXPECT_EQ(replay.cs.efc_key[r], first.efc_key[r]);
      for (size_t i = 0; i < q.size(); ++i) EXPECT_EQ(qr[i], q[i]) << "qpos " << i;
      for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(vr[i], v[i]) << "qvel " << i;
    }
  }
}

// Nimble's one-dof bounce: a ball on a vertical slide hits the floor with restitution e. At the
// bounce step qvel' = -e qvel (the row clamps: J qvel' = -e J qvel), so in discrete time
//   dqvel'/dqvel = -e,  dqpos'/dqvel = -e dt,  dqpos'/dqpos = 1
// (the position passes through). With kGradBounceCorrection dqpos'/dqpos is continuous time's
// -e and dqpos'/dqvel = dt X = -e dt; the velocity Jacobians are unchanged (Werling et al. 2021).
TEST(ContactAdjointBounce, OneDof) {
  const double e = 0.8, dt = 0.002;
  Model model = load_mjcf_string(
      "<mujoco><option timestep='0.002' gravity='0 0 0'/><worldbody>"
      "<geom type='plane' size='10 10 .1' condim='1'/><body><joint type='slide' axis='0 0 1'/>"
      "<geom type='sphere' size='.1' mass='1' pos='0 0 0.1' condim='1'/></body></worldbody></mujoco>");
  model.geom_restitution[1] = e;
  model.opt.lcp_solver = kLcpDantzig;
  Inputs in = at_rest(model, kLcpDantzig);
  in.x.qpos = {-0.0002};
  in.x.qvel = {-2.0};
  Result y = forward(in);
  ASSERT_EQ(y.nefc, 1);
  EXPECT_NEAR(y.qvel[0], 2.0 * e, 1e-12);
  for (int flags : {0, int(kGradBounceCorrection)}) {
    in.model.opt.contact_gradient = flags;
    auto g = adjoint(in, {1.0}, {0.0});   // d qpos' / d(qpos, qvel)
    auto gv = adjoint(in, {0.0}, {1.0});  // d qvel' / d(qpos, qvel)
    std::printf("  one-dof bounce, flags %d: dq'/dq = %.6g, dq'/dqd = %.6g, dqd'/dq = %.6g, "
                "dqd'/dqd = %.6g\n", flags, g[0][0], g[1][0], gv[0][0], gv[1][0]);
    double x = flags ? -e : 1.0;
    EXPECT_NEAR(g[0][0], x, 1e-12);
    EXPECT_NEAR(g[1][0], -e * dt, 1e-12);
    EXPECT_NEAR(gv[0][0], 0.0, 1e-12);
    EXPECT_NEAR(gv[1][0], -e, 1e-12);
  }
  in.model.opt.contact_gradient = 0;
  EXPECT_LE(gradcheck("bounce_1dof", in, 1e-6), 1e-6);
}

// A free sphere bouncing with spin and sliding: the normal row is J = e_z (the contact point is
// straight below the centre, so no angular part), hence X = I - (1 + e) e_z e_z^T. Through
// qpos' alone (wq = e_z or e_x, wv = 0): adj_qpos = X^T wq on the position, 0 on the quaternion,
// adj_qvel = dt X^T wq; the control and parameter gradients are those of the plain adjoint.
TEST(ContactAdjointBounce, FreeSphereCorrection) {
  const double e = 0.5, dt = 0.002;
  Inputs in = at_rest(scene("<body pos='0 0 0.0999'><freejoint/>"
                            "<geom type='sphere' size='.1' mass='1'/></body>"),
                      kLcpPgsStabilized);
  in.model.geom_restitution[1] = e;
  in.x.qvel = {0.2, -0.1, -2.0, 0.1, 0.2, 0.0};
  for (int axis : {0, 2}) {
    std::vector<double> wq(7, 0.0), wv(6, 0.0);
    wq[axis] = 1.0;
    in.model.opt.contact_gradient = 0;
    auto plain = adjoint(in, wq, wv);
    in.model.opt.contact_gradient = kGradBounceCorrection;
    auto corr = adjoint(in, wq, wv);
    double x = axis == 2 ? -e : 1.0;
    for (int i = 0; i < 7; ++i) EXPECT_NEAR(corr[0][i], i == axis ? x : 0.0, 1e-12) << i;
    for (int i = 0; i < 6; ++i) EXPECT_NEAR(corr[1][i], i == axis ? x * dt : 0.0, 1e-12) << i;
    for (size_t k = 2; k < plain.size(); ++k)
      for (size_t i = 0; i < plain[k].size(); ++i)
        EXPECT_NEAR(corr[k][i], plain[k][i], 1e-12 * (1 + std::abs(plain[k][i]))) << k << " " << i;
    if (axis == 2) {
      EXPECT_GT(std::abs(plain[0][2] - x), 0.5);  // the plain value is near +1
    }
  }
}

// Nimble's circle on a linear actuator: a ball on a vertical slide rests on the floor (inside
// the slop, so no push-out), its motor pushing up with less than its weight; loss = -qpos' (the
// loss wants it higher). The contact absorbs a small change of the motor force, so the plain
// gradient d loss / d ctrl is 0. The complementarity-aware classification holds the contact's
// impulse (dl/dv = J dl/dqvel' = -dt < 0: the loss wants it to separate), giving
//   d qpos' / d ctrl = dt^2 gear / m,  d loss / d ctrl = -dt^2 gear / m.
TEST(ContactAdjointComplementarityAware, RestingBallOnActuator) {
  const double dt = 0.002, gear = 2.0, m = 1.5;
  Inputs in = at_rest(
      load_mjcf_string("<mujoco><option timestep='0.002'/><worldbody>"
                       "<geom type='plane' size='10 10 .1' condim='1'/><body>"
                       "<joint name='z' type='slide' axis='0 0 1'/>"
                       "<geom type='sphere' size='.1' mass='1.5' pos='0 0 0.1' condim='1'/>"
                       "</body></worldbody><actuator><motor joint='z' gear='2'/></actuator>"
                       "</mujoco>"),
      kLcpDantzig);
  in.x.qpos = {-0.0005};
  in.x.ctrl = {0.3};  // 0.6 N up against 14.7 N of weight
  Result y = forward(in);
  ASSERT_EQ(y.nefc, 1);
  EXPECT_NEAR(y.qvel[0], 0.0, 1e-12);  // resting: the contact clamps
  in.model.opt.contact_gradient = 0;
  auto plain = adjoint(in, {-1.0}, {0.0});
  in.model.opt.contact_gradient = kGradComplementarityAware;
  auto aware = adjoint(in, {-1.0}, {0.0});
  std::printf("  resting ball: plain dl/dctrl %.3g, complementarity-aware %.6g (analytic %.6g)\n",
              plain[2][0], aware[2][0], -dt * dt * gear / m);
  EXPECT_NEAR(plain[2][0], 0.0, 1e-15);
  EXPECT_NEAR(aware[2][0], -dt * dt * gear / m, 1e-15);
  // the loss wanting the ball lower (loss = +qpos') agrees with the contact: plain kept
  auto down = adjoint(in, {1.0}, {0.0});
  EXPECT_NEAR(down[2][0], 0.0, 1e-15);
}

}  // namespace
}  // namespace phx
