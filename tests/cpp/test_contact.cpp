// Contact physics through the batched API: each test states its reference equation and takes
// its tolerance from the step size (semi-implicit Euler is first order: O(dt) errors).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <string>

#include "host/api.h"
#include "host/cpu_backend.h"
#include "phalanx/kernels.h"
#include "phalanx/math/quat.h"

namespace phx {
namespace {

// a world with a floor plane and the given bodies
Model scene(const std::string& bodies, double timestep) {
  return load_mjcf_string("<mujoco><option timestep='" + std::to_string(timestep) +
                          "'/><worldbody><geom name='floor' type='plane' size='10 10 .1'/>" +
                          bodies + "</worldbody></mujoco>");
}

// one environment stepped on the CPU in double
struct Sim {
  DeviceModel<double> model;
  Data<double> data;
  explicit Sim(const Model& m, int nenv = 1) : model(m, Device::kCpu), data(model, nenv) {}

  std::vector<double> qpos() const { return data.qpos.to_host(); }
  std::vector<double> qvel() const { return data.qvel.to_host(); }
  void set_qvel(const std::vector<double>& v) { data.qvel.upload(v.data(), v.size()); }
  void set_qpos(const std::vector<double>& q) { data.qpos.upload(q.data(), q.size()); }
  void step(int n = 1) { phx::step(model, data, n); }
  unsigned status() const { return data.status.to_host()[0]; }
  // sum of the normal impulses of the contacts of environment 0
  double normal_impulse() const {
    int nefc = data.contact.nefc.to_host()[0];
    std::vector<double> f = data.contact.efc_force.to_host();
    std::vector<int> key = data.contact.efc_key.to_host();
    double s = 0;
    for (int r = 0; r < nefc; ++r)
      if (key[r] >= 0 && key[r] % 3 == 0) s += f[r];
    return s;
  }
};

constexpr double g = 9.81;

// The dof ranges build_rows records for a contact from its two bodies' trees (contact_span)
// are those its rows' Jacobian reaches (row_span reads them off J), for every pair of bodies of
// a scene with a static body, a hinged two-link arm, a free body and a free body carrying a
// welded child; and the row solves over those ranges give the full solves' results.
TEST(Contact, RowsRecordTheTreesTheyReach) {
  Model model = scene(
      "<body pos='2 0 1'><geom type='box' size='.1 .1 .1'/></body>"
      "<body pos='0 0 1'><joint type='hinge' axis='0 1 0'/><geom type='capsule' "
      "fromto='0 0 0 .5 0 0' size='.05'/><body pos='.5 0 0'><joint type='hinge' axis='1 0 0'/>"
      "<geom type='box' size='.1 .1 .1'/></body></body>"
      "<body pos='1 1 1'><freejoint/><geom type='sphere' size='.1'/></body>"
      "<body pos='-1 1 1'><freejoint/><geom type='box' size='.1 .1 .1'/>"
      "<body pos='.3 0 0'><geom type='sphere' size='.1'/></body></body>",
      0.002);
  DeviceModel<double> dm(model, Device::kCpu);
  const ModelView<double>& m = dm.view();
  ASSERT_EQ(m.nbody, 7);
  std::vector<double> store(carved_size<Workspace<double>, double>(m).reals);
  Arena<double> arena(store.data(), nullptr);
  Workspace<double> w = Workspace<double>::carve(m, arena);
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> qpos(model.qpos0);
  for (int i = 0; i < m.nq; ++i) qpos[i] += 0.3 * u(rng);
  kinematics(m, qpos.data(), w);
  com_pos(m, w);  // the dofs' motion axes (cdof)
  const int nv = m.nv;
  int pairs = 0;
  for (int b1 = 0; b1 < m.nbody; ++b1)
    for (int b2 = b1 + 1; b2 < m.nbody; ++b2) {
      Vec3<double> p{u(rng), u(rng), u(rng)}, dir[3];
      for (auto& d : dir) d = Vec3<double>{u(rng), u(rng), u(rng)};
      std::vector<double> J(3 * nv, 0.0);
      add_point_jacobian(m, w, b2, p, dir, 3, 1.0, J.data());
      add_point_jacobian(m, w, b1, p, dir, 3, -1.0, J.data());
      int expect[4], got[4];
      contact_span(m, b1, b2, got);
      for (int k = 0; k < 3; ++k) {
        row_span(J.data() + k * nv, nv, m.dof_treeadr, expect);
        // (a body and its welded child move as one: their rows are zero, the ranges its tree)
        if (b1 == 5 && b2 == 6)
          EXPECT_EQ(expect[1], 0);
        else
          for (int h = 0; h < 4; ++h) EXPECT_EQ(got[h], expect[h]) << b1 << " " << b2 << " " << h;
      }
      pairs += got[1] > got[0];
      // L y = J^T over the ranges, against the solve over every dof: L block-diagonal by trees
      std::vector<double> L(nv * nv, 0.0);
      for (int i = 0; i < nv; ++i) {
        for (int k = m.dof_treeadr[i]; k < i; ++k) L[i * nv + k] = u(rng);
        L[i * nv + i] = 1.5 + u(rng);
      }
      std::vector<double> Y = J, full = J;
      std::vector<int> ranges(12);
      for (int k = 0; k < 3; ++k) std::copy(got, got + 4, ranges.begin() + 4 * k);
      cholesky_solve_lower_rows(L.data(), nv, Y.data(), 3, m.dof_treeadr, ranges.data());
      for (int k = 0; k < 3; ++k) cholesky_solve_lower(L.data(), nv, full.data() + k * nv);
      for (int d = 0; d < 3 * nv; ++d) EXPECT_NEAR(Y[d], full[d], 1e-12 * (1 + std::abs(full[d])));
    }
  EXPECT_EQ(pairs, 20);  // the 21 pairs but static body and world
}

// A box resting on the floor: no drift over 10 s, and in steady state the normal impulses
// carry its weight, sum f_n = m g dt.
TEST(Contact, BoxRestsWithoutDrift) {
  const double dt = 0.002, m = 2.0, seconds = 10;
  // projected Gauss-Seidel leaves friction impulses of the four corners inexact, which lets the
  // box creep: by a few micrometres in 10 s after every sweep (~1e-9 N s), and at less than
  // twice the speed lcp_sweep_tolerance allows when the sweeps stop at it
  for (double sweep_tolerance : {0.0, 1e-6}) {
    Model model = scene(
        "<body pos='0 0 0.1'><freejoint/><geom type='box' size='.1 .1 .1' "
        "mass='2'/></body>",
        dt);
    model.opt.lcp_sweep_tolerance = sweep_tolerance;
    Sim sim(model);
    sim.step(int(seconds / dt));
    ASSERT_EQ(sim.status(), 0u);
    std::vector<double> q = sim.qpos(), v = sim.qvel();
    const bool every = sweep_tolerance == 0;
    const double creep = every ? 1e-5 : 2 * sweep_tolerance * seconds;
    EXPECT_NEAR(q[0], 0, creep) << sweep_tolerance;
    EXPECT_NEAR(q[1], 0, creep) << sweep_tolerance;
    // penetration bounded by the slop (1 mm) plus one step of fall
    EXPECT_NEAR(q[2], 0.1, 2e-3) << sweep_tolerance;
    EXPECT_NEAR(std::abs(q[3]), 1, every ? 1e-9 : 1e-8) << sweep_tolerance;  // unturned
    for (double x : v) EXPECT_NEAR(x, 0, 1e-6) << sweep_tolerance;
    EXPECT_EQ(sim.data.contact.ncon.to_host()[0], 4);
    EXPECT_NEAR(sim.normal_impulse(), m * g * dt, 1e-6 * m * g * dt) << sweep_tolerance;
  }
}

// A box sliding on the floor with friction mu decelerates at mu g until it stops (at
// t* = v0 / (mu g), after x* = v0^2 / (2 mu g)), then stays.
// a 1 kg box of 0.2 m on the floor with friction mu, steps of 1 ms
Model box_on_floor(double mu) {
  // MuJoCo's rule: a contact uses the larger friction of its two geoms; the floor's default
  // is 1, so set both
  Model model = scene(
      "<body pos='0 0 0.0999'><freejoint/>"
      "<geom type='box' size='.1 .1 .1' mass='1' friction='0.5'/></body>",
      0.001);
  model.geom_friction[0] = model.geom_friction[3] = mu;
  return model;
}

// a 1 kg ball of radius 0.1 m with restitution e, 1 m above the floor, steps of 0.5 ms
Model ball_above_floor(double e) {
  Model model = scene(
      "<body pos='0 0 1.1'><freejoint/><geom type='sphere' size='.1' "
      "mass='1'/></body>",
      0.0005);
  model.geom_restitution[1] = e;
  return model;
}

TEST(Contact, SlidingBoxDeceleratesAtMuG) {
  const double dt = 0.001, mu = 0.5, v0 = 2.0;
  Sim sim(box_on_floor(mu));
  sim.step(10);  // settle onto the floor
  std::vector<double> v = sim.qvel();
  std::vector<double> frame = sim.data.contact.frame.to_host();
  // slide along the first tangent of the contact frame, one of the pyramid's directions
  double t1[3] = {frame[3], frame[4], frame[5]};
  for (int i = 0; i < 3; ++i) v[i] = v0 * t1[i];
  sim.set_qvel(v);
  std::vector<double> x0 = sim.qpos();
  const int n = 200;  // 0.2 s: v = v0 - mu g t
  sim.step(n);
  v = sim.qvel();
  double speed = v[0] * t1[0] + v[1] * t1[1] + v[2] * t1[2];
  EXPECT_NEAR(speed, v0 - mu * g * n * dt, 2 * mu * g * dt);
  sim.step(800);  // past the stop at 0.41 s
  std::vector<double> q = sim.qpos();
  v = sim.qvel();
  double travelled = (q[0] - x0[0]) * t1[0] + (q[1] - x0[1]) * t1[1] + (q[2] - x0[2]) * t1[2];
  EXPECT_NEAR(travelled, v0 * v0 / (2 * mu * g), 0.01);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(v[i], 0, 1e-6);
  EXPECT_EQ(sim.status(), 0u);
}

// A ball of radius r dropped from 1 m above the floor (sim): its first two apex heights over the
// drop and over the first
std::array<double, 2> apex_ratios(Sim& sim, double r) {
  double apex[2] = {0, 0};
  int found = 0;
  double prev_vz = 0;
  for (int t = 0; t < 8000 && found < 2; ++t) {
    sim.step();
    double vz = sim.qvel()[2];
    if (prev_vz > 0 && vz <= 0) apex[found++] = sim.qpos()[2] - r;  // top of a flight
    prev_vz = vz;
  }
  EXPECT_EQ(found, 2);
  return {apex[0] / 1.0, apex[1] / apex[0]};
}

// three unit-mass boxes of 0.2 m stacked on the floor
Model box_stack(double dt) {
  std::string bodies;
  for (int i = 0; i < 3; ++i) {
    bodies += "<body pos='0 0 " + std::to_string(0.1 + 0.2 * i) +
              "'><freejoint/><geom type='box' size='.1 .1 .1' mass='1'/></body>";
  }
  return scene(bodies, dt);
}

// A ball dropped with restitution e bounces to successive apex heights in ratio e^2
// (Newton's impact law; the O(dt) error of detecting the impact one step late is 1-2%).
TEST(Contact, BallApexHeightsFollowRestitution) {
  const double e = 0.8;
  Sim sim(ball_above_floor(e));
  for (double ratio : apex_ratios(sim, 0.1)) EXPECT_NEAR(ratio, e * e, 0.02);
}

// A stack of three boxes stays standing for 5 s: the top box moves less than 5 mm.
TEST(Contact, StackOfThreeBoxesStands) {
  Sim sim(box_stack(0.002));
  std::vector<double> q0 = sim.qpos();
  sim.step(2500);
  std::vector<double> q = sim.qpos();
  for (int b = 0; b < 3; ++b) {
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(q[7 * b + i], q0[7 * b + i], 5e-3) << "box " << b;
    EXPECT_NEAR(std::abs(q[7 * b + 3]), 1, 1e-4) << "box " << b << " tipped";
  }
  EXPECT_EQ(sim.status() & ~unsigned(kStatusLcpNotConverged), 0u);
}

// ---- the same physics with the XPBD solver (xpbd_contact.h) ----------------------------------
// Its contacts are positional and Gauss-Seidel, one pass per substep h: a body resting on
// several points keeps a velocity of order g h (gravity's one substep, which the pass removes
// point by point) and creeps at that order; each test states the bound and shows it halve with h.

// m with the XPBD solver at `substeps` substeps of one iteration each
Model xpbd(Model m, int substeps) {
  m.opt.solver = kSolverXpbd;
  m.opt.xpbd_substeps = substeps;
  m.opt.xpbd_iterations = 1;
  return m;
}

// the largest entry of |v|
double largest(const std::vector<double>& v) {
  double x = 0;
  for (double a : v) x = std::max(x, std::abs(a));
  return x;
}

// A box resting on the floor for 10 s: it stays where it is (within 0.1 mm), its four corners
// in contact, its velocity below g h, and that velocity halves when h does.
TEST(ContactXpbd, BoxRestsWithoutDrift) {
  const double dt = 0.002;
  Model box = scene(
      "<body pos='0 0 0.1'><freejoint/><geom type='box' size='.1 .1 .1' mass='2'/>"
      "</body>",
      dt);
  double speed[2];
  for (int k = 0; k < 2; ++k) {
    const int substeps = 20 << k;
    Sim sim(xpbd(box, substeps));
    sim.step(5000);
    ASSERT_EQ(sim.status(), 0u);
    std::vector<double> q = sim.qpos();
    EXPECT_NEAR(q[0], 0, 1e-4);
    EXPECT_NEAR(q[1], 0, 1e-4);
    EXPECT_NEAR(q[2], 0.1, 1e-4);  // positional contacts leave no slop
    EXPECT_NEAR(std::abs(q[3]), 1, 1e-8);
    EXPECT_EQ(sim.data.contact.ncon.to_host()[0], 4);
    speed[k] = largest(sim.qvel());
    EXPECT_LT(speed[k], g * dt / substeps) << substeps << " substeps";
  }
  EXPECT_LT(speed[1], 0.6 * speed[0]);
}

// A box sliding with friction mu decelerates at mu g and stops after v0^2 / (2 mu g): XPBD's
// dynamic friction bounds each contact's friction impulse by mu times its normal impulse.
TEST(ContactXpbd, SlidingBoxDeceleratesAtMuG) {
  const double dt = 0.001, mu = 0.5, v0 = 2.0;
  const int substeps = 20;
  Sim sim(xpbd(box_on_floor(mu), substeps));
  // touching, not 0.1 mm into the floor: XPBD pushes a penetration out within one substep,
  // a kick that friction turns into a loss of speed
  std::vector<double> q = sim.qpos();
  q[2] = 0.1;
  sim.set_qpos(q);
  std::vector<double> v(6, 0.0);
  v[0] = v0;
  sim.set_qvel(v);
  const int n = 200;  // 0.2 s: v = v0 - mu g t
  sim.step(n);
  EXPECT_NEAR(sim.qvel()[0], v0 - mu * g * n * dt, 2 * mu * g * dt);
  sim.step(800);  // past the stop at 0.41 s
  EXPECT_NEAR(sim.qpos()[0], v0 * v0 / (2 * mu * g), 2e-3);
  EXPECT_LT(largest(sim.qvel()), g * dt / substeps);
  EXPECT_EQ(sim.status(), 0u);
}

// A ball dropped with restitution e bounces to apex heights in ratio e^2 (XPBD's velocity pass
// sets the normal velocity to -e times the approach).
TEST(ContactXpbd, BallApexHeightsFollowRestitution) {
  const double e = 0.8;
  Sim sim(xpbd(ball_above_floor(e), 4));
  for (double ratio : apex_ratios(sim, 0.1)) EXPECT_NEAR(ratio, e * e, 0.01);
}

// A stack of three boxes stays standing for 5 s: the top box moves less than 5 mm, no box tips,
// and the creep halves with the substep.
TEST(ContactXpbd, StackOfThreeBoxesStands) {
  const Model stack = box_stack(0.002);
  double creep[2];
  for (int k = 0; k < 2; ++k) {
    Sim sim(xpbd(stack, 20 << k));
    std::vector<double> q0 = sim.qpos();
    sim.step(2500);
    std::vector<double> q = sim.qpos();
    creep[k] = 0;
    for (int b = 0; b < 3; ++b) {
      for (int i = 0; i < 3; ++i)
        creep[k] = std::max(creep[k], std::abs(q[7 * b + i] - q0[7 * b + i]));
      EXPECT_NEAR(std::abs(q[7 * b + 3]), 1, 1e-4) << "box " << b << " tipped";
    }
    EXPECT_LT(creep[k], 5e-3);
    EXPECT_EQ(sim.status(), 0u);
  }
  EXPECT_LT(creep[1], 0.7 * creep[0]);
}

// A pendulum whose hinge is limited to [-0.5, 0.5] rad comes to rest at the limit under
// gravity, within the slop.
TEST(Contact, JointLimitHoldsUnderGravity) {
  const double dt = 0.002;
  Model model = load_mjcf_string(
      "<mujoco><compiler angle='radian'/><option timestep='0.002'/><worldbody><body>"
      "<joint type='hinge' axis='0 1 0' range='-0.5 0.5' limited='true' damping='0.1'/>"
      "<geom type='capsule' fromto='0 0 0 0.5 0 0' size='0.05' mass='1' contype='0' "
      "conaffinity='0'/></body></worldbody></mujoco>");
  Sim sim(model);
  sim.step(int(3.0 / dt));
  // the pendulum starts horizontal along +x; gravity turns it about +y towards +0.5 rad
  double q = sim.qpos()[0];
  EXPECT_NEAR(q, 0.5, 2e-3);
  EXPECT_NEAR(sim.qvel()[0], 0, 1e-6);
  EXPECT_EQ(sim.data.contact.nefc.to_host()[0], 1);
}

// MuJoCo's humanoid dropped onto the floor lying on its back or front, from 0.5 to 1.2 m and
// with different headings, lies still within 3 s in every environment: root slower than
// 5 cm/s, joints slower than 0.1 rad/s, penetration under 1 cm, no NaN.
// (Dropped standing, it topples and, like MuJoCo's own simulation of the same drop, keeps
// rolling slowly for several seconds.)
TEST(Contact, HumanoidComesToRestOnTheFloor) {
  Model model = load_mjcf(PHX_MUJOCO_MODELS "/humanoid/humanoid.xml");
  const int nenv = 8;
  Sim sim(model, nenv);
  std::vector<double> q = sim.qpos();
  for (int e = 0; e < nenv; ++e) {
    Quat<double> yaw = axis_angle(Vec3<double>{0, 0, 1}, 0.8 * e);
    Quat<double> pitch = axis_angle(Vec3<double>{0, 1, 0}, (e % 2 ? 1 : -1) * M_PI / 2);
    (yaw * pitch).store(&q[e * model.nq + 3]);
    q[e * model.nq + 2] = 0.5 + 0.1 * e;
  }
  sim.set_qpos(q);
  sim.step(int(3.0 / model.opt.timestep));
  std::vector<unsigned> status = sim.data.status.to_host();
  std::vector<double> v = sim.qvel();
  std::vector<double> dist = sim.data.contact.dist.to_host();
  std::vector<int> ncon = sim.data.contact.ncon.to_host();
  for (int e = 0; e < nenv; ++e) {
    const double* ve = &v[e * model.nv];
    EXPECT_EQ(status[e] & kStatusStopMask, 0u) << "env " << e;
    EXPECT_LT(std::sqrt(ve[0] * ve[0] + ve[1] * ve[1] + ve[2] * ve[2]), 0.05) << "env " << e;
    double vmax = 0;
    for (int i = 6; i < model.nv; ++i) vmax = std::max(vmax, std::abs(ve[i]));
    EXPECT_LT(vmax, 0.1) << "env " << e;
    double deepest = 0;
    for (int c = 0; c < ncon[e]; ++c) deepest = std::min(deepest, dist[e * model.nconmax + c]);
    EXPECT_GT(deepest, -0.01) << "env " << e << " penetrates";
    EXPECT_GT(ncon[e], 2);
  }
}

// Kernel k run on the CPU as the stages a device launches (kernels/common.h: staged launches):
// the number of launches
template <class Kernel>
int launch_staged(const ModelView<double>& m, int nenv, const Kernel& k,
                  const ScratchSize& scratch) {
  const ScratchSize size = StageMemory<double>::size(m, nenv);
  Buffer<double> reals(Device::kCpu, size_t(size.reals));
  Buffer<int> ints(Device::kCpu, size_t(size.ints));
  int launches = 0;
  k.staged(StageMemory<double>::carve(m, nenv, reals.data(), ints.data()), [&](const auto& stage) {
    cpu::launch(nenv, stage, scratch);
    ++launches;
  });
  return launches;
}

// The live contacts and rows two runs left in their data (the entries past their counts are
// not read) are the same, as are their states and status bits
void expect_same_data(const Data<double>& a, const Data<double>& b, const ModelView<double>& m) {
  EXPECT_EQ(a.qpos.to_host(), b.qpos.to_host());
  EXPECT_EQ(a.qvel.to_host(), b.qvel.to_host());
  EXPECT_EQ(a.status.to_host(), b.status.to_host());
  const ContactBuffers<double>& x = a.contact;
  const ContactBuffers<double>& y = b.contact;
  const std::vector<int> ncon = y.ncon.to_host(), nefc = y.nefc.to_host();
  EXPECT_EQ(x.ncon.to_host(), ncon);
  EXPECT_EQ(x.nefc.to_host(), nefc);
  auto live = [&](const auto& buffer, const std::vector<int>& count, int capacity, int width) {
    auto all = buffer.to_host();
    decltype(all) kept;
    for (int e = 0; e < a.nenv(); ++e)
      kept.insert(kept.end(), all.begin() + long(e) * capacity * width,
                  all.begin() + (long(e) * capacity + count[e]) * width);
    return kept;
  };
  EXPECT_EQ(live(x.pos, ncon, m.nconmax, 3), live(y.pos, ncon, m.nconmax, 3));
  EXPECT_EQ(live(x.geom, ncon, m.nconmax, 2), live(y.geom, ncon, m.nconmax, 2));
  EXPECT_EQ(live(x.efc_force, nefc, m.nefcmax, 1), live(y.efc_force, nefc, m.nefcmax, 1));
  EXPECT_EQ(live(x.efc_key, nefc, m.nefcmax, 1), live(y.efc_key, nefc, m.nefcmax, 1));
}

// MuJoCo's humanoid, which falls onto the floor, and a scene of every primitive pair type (the
// convex narrowphase among them), as it is and with room for 5 contacts, fewer than its pairs
// find: the detection of the other pairs merges the convex pairs' contacts in pair order, and
// the contacts past the room are those of the whole detection
std::vector<Model> staged_models() {
  std::vector<Model> models;
  models.push_back(load_mjcf(PHX_MUJOCO_MODELS "/humanoid/humanoid.xml"));
  models.push_back(
      scene("<body pos='0 0 .3'><freejoint/><geom type='box' size='.1 .15 .1'/></body>"
            "<body pos='.05 0 .6' euler='20 30 0'><freejoint/><geom type='cylinder' size='.08 .1'/>"
            "</body><body pos='0 .05 .9' euler='0 40 10'><freejoint/>"
            "<geom type='ellipsoid' size='.1 .07 .05'/></body>"
            "<body pos='-.05 0 1.2' euler='80 0 0'><freejoint/><geom type='capsule' size='.05 .1'/>"
            "</body><body pos='0 -.02 1.5'><freejoint/><geom type='sphere' size='.08'/></body>",
            0.005));
  models.push_back(models.back());
  models.back().nconmax = 5;
  return models;
}

// the launches of a staged kernel's step: the narrowphase of the convex pairs (when the model
// has them), that of the others, the step
int stage_launches_per_step(const ModelView<double>& m) {
  return m.npair_convex > 0 ? 3 : 2;
}

// nenv environments of m at qpos0 with random velocities
Data<double> staged_data(const DeviceModel<double>& dm, int nenv) {
  const ModelView<double>& m = dm.view();
  Data<double> d(dm, nenv);
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v0(size_t(nenv) * m.nv);
  for (double& v : v0) v = 0.5 * u(rng);
  d.qvel.upload(v0.data(), v0.size());
  return d;
}

// A rollout run as the stages a device launches (RolloutKernel::staged: per step the
// narrowphase of the convex pairs, that of the others, then the step given their contacts) is the
// rollout run whole, bit for bit: the states, the counts of every step (GJK's and EPA's
// iterations and the contacts beyond the room among them), the status bits and the contacts and
// impulses it leaves, with one environment stopped part-way by a NaN control.
TEST(Contact, StagedRolloutIsTheRolloutBitForBit) {
  for (const Model& model : staged_models()) {
    const int nenv = 4, nstep = 150;
    DeviceModel<double> dm(model, Device::kCpu);
    const ModelView<double>& m = dm.view();
    std::mt19937 rng(11);
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<double> ctrl(size_t(nenv) * nstep * m.nu);
    for (double& c : ctrl) c = 0.5 * u(rng);
    if (m.nu > 0) ctrl[(size_t(2) * nstep + 60) * m.nu] = std::nan("");
    Buffer<double> d_ctrl(Device::kCpu, ctrl);
    // the rollout of each way: its data and outputs
    struct Run {
      Data<double> data;
      Buffer<double> qout, vout;
      Buffer<int> counts;
    };
    auto run = [&](bool staged) {
      Run r{staged_data(dm, nenv), Buffer<double>(Device::kCpu, size_t(nenv) * nstep * m.nq),
            Buffer<double>(Device::kCpu, size_t(nenv) * nstep * m.nv),
            Buffer<int>(Device::kCpu, size_t(nenv) * nstep * kNumCounts)};
      RolloutKernel<double> k{m,
                              r.data.qpos.data(),
                              r.data.qvel.data(),
                              nullptr,
                              d_ctrl.data(),
                              r.qout.data(),
                              r.vout.data(),
                              nullptr,
                              r.data.status.data(),
                              nstep,
                              r.data.contacts(),
                              r.counts.data(),
                              {}};
      const ScratchSize scratch = dm.rollout_scratch_size();
      if (staged)
        EXPECT_EQ(launch_staged(m, nenv, k, scratch), stage_launches_per_step(m) * nstep);
      else
        cpu::launch(nenv, k, scratch);
      return r;
    };
    Run whole = run(false), staged = run(true);
    EXPECT_EQ(staged.qout.to_host(), whole.qout.to_host());
    EXPECT_EQ(staged.vout.to_host(), whole.vout.to_host());
    EXPECT_EQ(staged.counts.to_host(), whole.counts.to_host());
    expect_same_data(staged.data, whole.data, m);
    // the rollouts had contacts to detect, and environment 2 stopped where its control did
    const std::vector<int> counts = whole.counts.to_host();
    int most = 0;
    int gjk = 0, overflow = 0;
    for (int i = 0; i < nenv * nstep; ++i) {
      most = std::max(most, counts[i * kNumCounts]);
      gjk = std::max(gjk, counts[i * kNumCounts + kCountGjkIterations]);
      overflow = std::max(overflow, counts[i * kNumCounts + kCountOverflow]);
    }
    EXPECT_GE(most, std::min(4, m.nconmax));
    // the scene's convex pairs ran GJK (the humanoid has none), and with little room overflowed
    EXPECT_EQ(gjk > 0, m.npair_convex > 0);
    EXPECT_EQ(overflow > 0, m.nconmax == 5);
    if (m.nu > 0) {
      EXPECT_NE(whole.data.status.to_host()[2] & kStatusNanCtrl, 0u);
    }
  }
}

// Steps run as stages are the steps run whole, bit for bit: StepKernel's calls of several steps
// each (the stages carry the bits of a call's steps between launches, apart from the status
// bits of earlier calls: environment 1 starts with a stop bit set and steps all the same) and
// ConstraintForceKernel's single steps, with their constraint forces.
TEST(Contact, StagedStepsAreTheStepsBitForBit) {
  for (const Model& model : staged_models()) {
    const int nenv = 4, ncall = 30, nstep = 4;
    DeviceModel<double> dm(model, Device::kCpu);
    const ModelView<double>& m = dm.view();
    std::mt19937 rng(5);
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<double> ctrl(size_t(nenv) * m.nu);
    for (double& c : ctrl) c = 0.5 * u(rng);
    if (m.nu > 0) ctrl[size_t(2) * m.nu] = std::nan("");
    Buffer<double> d_ctrl(Device::kCpu, ctrl);
    const ScratchSize scratch = dm.scratch_size();
    auto start = [&] {
      Data<double> d = staged_data(dm, nenv);
      std::vector<unsigned> status(nenv, 0u);
      status[1] = kStatusNanResult;
      d.status.upload(status.data(), status.size());
      return d;
    };
    Data<double> whole = start(), staged = start();
    for (int call = 0; call < ncall; ++call)
      for (Data<double>* d : {&whole, &staged}) {
        StepKernel<double> k{m,       d->qpos.data(), d->qvel.data(),
                             nullptr, d_ctrl.data(),  d->status.data(),
                             nstep,   d->contacts()};
        if (d == &staged)
          EXPECT_EQ(launch_staged(m, nenv, k, scratch), stage_launches_per_step(m) * nstep);
        else
          cpu::launch(nenv, k, scratch);
      }
    expect_same_data(staged, whole, m);
    // environment 1 fell onto the floor (its contacts have rows) though it started stopped
    EXPECT_GT(whole.contact.nefc.to_host()[1], 0);
    if (m.nu > 0) {
      EXPECT_NE(whole.status.to_host()[2] & kStatusNanCtrl, 0u);
    }

    Buffer<double> f_whole(Device::kCpu, size_t(nenv) * m.nv);
    Buffer<double> f_staged(Device::kCpu, size_t(nenv) * m.nv);
    for (int call = 0; call < ncall; ++call)
      for (Data<double>* d : {&whole, &staged}) {
        Buffer<double>& f = d == &whole ? f_whole : f_staged;
        ConstraintForceKernel<double> k{m,
                                        d->qpos.data(),
                                        d->qvel.data(),
                                        nullptr,
                                        d_ctrl.data(),
                                        d->status.data(),
                                        d->contacts(),
                                        nullptr,
                                        f.data()};
        if (d == &staged)
          EXPECT_EQ(launch_staged(m, nenv, k, scratch), stage_launches_per_step(m));
        else
          cpu::launch(nenv, k, scratch);
      }
    expect_same_data(staged, whole, m);
    EXPECT_EQ(f_staged.to_host(), f_whole.to_host());
    double most = 0;
    for (double f : f_whole.to_host()) most = std::max(most, std::abs(f));
    EXPECT_GT(most, 1.0);  // the contacts pushed
  }
}

// A step's reverse passes whose replay's narrowphase runs in stages of its own (as on CUDA) are
// those run whole, bit for bit: StepAdjointKernel's adjoints of the state, the controls and every
// parameter (the geom sizes' through the contacts' geometry among them) and StepJacobianKernel's
// Jacobians, at states where the bodies lie on the floor and on each other.
TEST(Contact, StagedStepReversePassesAreTheWholeBitForBit) {
  for (const Model& model : staged_models()) {
    const int nenv = 4;
    DeviceModel<double> dm(model, Device::kCpu);
    const ModelView<double>& m = dm.view();
    Data<double> d = staged_data(dm, nenv);
    Buffer<double> ctrl(Device::kCpu, std::vector<double>(size_t(nenv) * m.nu, 0.1));
    StepKernel<double> fall{m,           d.qpos.data(),   d.qvel.data(), nullptr,
                            ctrl.data(), d.status.data(), 120,           d.contacts()};
    cpu::launch(nenv, fall, dm.scratch_size());
    std::mt19937 rng(3);
    std::uniform_real_distribution<double> u(-1, 1);
    auto random = [&](size_t n) {
      std::vector<double> x(n);
      for (double& v : x) v = u(rng);
      return Buffer<double>(Device::kCpu, x);
    };
    Buffer<double> seed_q = random(size_t(nenv) * m.nq), seed_v = random(size_t(nenv) * m.nv);
    // the step's adjoint, each way: its outputs, one array of all its parameters' adjoints
    struct Adjoint {
      Buffer<double> q, v, u, params;
      Data<double> replay;
      int launches = 0;
    };
    long nparam = 0;
    for (int k = 0; k < kNumParams; ++k) nparam += param_size(m, k);
    auto adjoint = [&](bool staged) {
      Adjoint r{Buffer<double>(Device::kCpu, size_t(nenv) * m.nq),
                Buffer<double>(Device::kCpu, size_t(nenv) * m.nv),
                Buffer<double>(Device::kCpu, size_t(nenv) * m.nu),
                Buffer<double>(Device::kCpu, size_t(nenv * nparam)), Data<double>(dm, nenv)};
      ModelAdjoint<double> am;
      ContactModelAdjoint<double> ac;
      double* p = r.params.data();
      for (int k = 0; k < kNumParams; p += nenv * param_size(m, k), ++k)
        param_adjoint(am, ac, k) = p;
      StepAdjointKernel<double> k{m,
                                  d.qpos.data(),
                                  d.qvel.data(),
                                  ctrl.data(),
                                  seed_q.data(),
                                  seed_v.data(),
                                  r.q.data(),
                                  r.v.data(),
                                  r.u.data(),
                                  am,
                                  ac,
                                  r.replay.contacts()};
      const ScratchSize scratch = adjoint_scratch_size(m);
      if (staged)
        r.launches = launch_staged(m, nenv, k, scratch);
      else
        cpu::launch(nenv, k, scratch);
      return r;
    };
    Adjoint whole = adjoint(false), staged = adjoint(true);
    EXPECT_EQ(staged.launches, stage_launches_per_step(m));
    EXPECT_EQ(staged.q.to_host(), whole.q.to_host());
    EXPECT_EQ(staged.v.to_host(), whole.v.to_host());
    EXPECT_EQ(staged.u.to_host(), whole.u.to_host());
    EXPECT_EQ(staged.params.to_host(), whole.params.to_host());
    // the replays had contacts, and their geometry's adjoint reached the geom sizes
    std::vector<int> ncon = whole.replay.contact.ncon.to_host();
    EXPECT_GT(*std::max_element(ncon.begin(), ncon.end()), 0);
    EXPECT_EQ(staged.replay.contact.ncon.to_host(), ncon);
    long size_at = 0;
    for (int k = 0; k < kParamGeomSize; ++k) size_at += nenv * param_size(m, k);
    const std::vector<double> params = whole.params.to_host();
    double most = 0;
    for (long i = size_at; i < size_at + nenv * param_size(m, kParamGeomSize); ++i)
      most = std::max(most, std::abs(params[size_t(i)]));
    EXPECT_GT(most, 0.0);

    // the Jacobians, each way
    const int nrow = m.nq + m.nv;
    auto jacobian = [&](bool staged) {
      std::array<Buffer<double>, 2> J{
          Buffer<double>(Device::kCpu, size_t(nenv) * nrow * jacobian_cols(m)),
          Buffer<double>(Device::kCpu, size_t(nenv) * nrow * jacobian_nparam(m))};
      StepJacobianKernel<double> k{m,           d.qpos.data(), d.qvel.data(),
                                   ctrl.data(), J[0].data(),   J[1].data()};
      const ScratchSize scratch = jacobian_scratch_size(m);
      if (staged)
        EXPECT_EQ(launch_staged(m, nenv, k, scratch), stage_launches_per_step(m));
      else
        cpu::launch(nenv, k, scratch);
      return J;
    };
    std::array<Buffer<double>, 2> J_whole = jacobian(false), J_staged = jacobian(true);
    EXPECT_EQ(J_staged[0].to_host(), J_whole[0].to_host());
    EXPECT_EQ(J_staged[1].to_host(), J_whole[1].to_host());
  }
}

}  // namespace
}  // namespace phx
