// The velocity-implicit step (implicit.h) against MuJoCo's implicitfast integrator, one step at
// a time from MuJoCo's own states, on a branched chain with damped tendons and velocity-
// dependent actuators (a muscle among them), free bodies spinning fast, and the six-bar
// tensegrity, and the chain and free bodies in a dense, viscous medium; its adjoint against
// central differences in double. Built only when
// cmake/mujoco.cmake finds MuJoCo.
#include <gtest/gtest.h>
#include <mujoco/mujoco.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "host/model.h"
#include "host/mujoco_model.h"
#include "model_builder.h"
#include "mujoco_compile.h"
#include "phalanx/step.h"
#include "step_gradcheck.h"

namespace phx {
namespace {

using DataPtr = std::unique_ptr<mjData, void (*)(mjData*)>;
using test::Carved;
using test::HostModel;
using test::ModelPtr;

// the branched chain with tendons, servos, a muscle and a free body on a cable
const std::string kChain = std::string(PHX_SOURCE_DIR) + "/tests/models/implicit_chain.xml";

// A standalone free body (inertia frame tilted, centre of mass off the body origin) with a
// damped servo on a tendon to the world; a free body with a hinged child (not standalone); a
// damped tendon between the two (across trees: MuJoCo drops its cross terms).
const char* kFree = R"(
<mujoco>
  <option timestep="0.002" integrator="implicitfast" gravity="0 0 -9.81">
    <flag contact="disable"/>
  </option>
  <worldbody>
    <site name="anchor" pos="0 0 2"/>
    <body pos="0 0 1">
      <freejoint/>
      <geom type="box" size="0.3 0.1 0.05" pos="0.05 0.02 -0.01" euler="10 20 30" mass="2"/>
      <geom type="sphere" size="0.05" pos="-0.2 0 0.1" mass="0.5"/>
      <site name="a" pos="0.1 0 0.05"/>
    </body>
    <body pos="1 0 1">
      <freejoint/>
      <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.03"/>
      <site name="b" pos="0.1 0 0"/>
      <body pos="0.2 0 0">
        <joint type="hinge" axis="0 0 1" damping="0.1"/>
        <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.03"/>
      </body>
    </body>
  </worldbody>
  <tendon>
    <spatial name="t0"><site site="anchor"/><site site="a"/></spatial>
    <spatial name="t1" damping="3"><site site="a"/><site site="b"/></spatial>
  </tendon>
  <actuator>
    <position tendon="t0" kp="40" kv="8"/>
  </actuator>
</mujoco>)";

// one environment's state before a MuJoCo step and MuJoCo's state after it
struct Record {
  std::vector<double> qpos, qvel, act, ctrl, qpos_next, qvel_next;
};

// n steps of MuJoCo from its initial state (qvel scaled random), random controls in the
// control range, recorded
std::vector<Record> mujoco_records(const mjModel* m, int n, double speed, unsigned seed) {
  DataPtr d(mj_makeData(m), mj_deleteData);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int i = 0; i < m->nv; ++i) d->qvel[i] = speed * u(rng);
  std::vector<Record> out;
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < m->nu; ++i) {
      double lo = m->actuator_ctrlrange[2 * i], hi = m->actuator_ctrlrange[2 * i + 1];
      d->ctrl[i] = m->actuator_ctrllimited[i] ? lo + (hi - lo) * (0.5 + 0.5 * u(rng)) : u(rng);
    }
    Record r;
    r.qpos.assign(d->qpos, d->qpos + m->nq);
    r.qvel.assign(d->qvel, d->qvel + m->nv);
    r.act.assign(d->act, d->act + m->na);
    r.ctrl.assign(d->ctrl, d->ctrl + m->nu);
    mj_step(m, d.get());
    r.qpos_next.assign(d->qpos, d->qpos + m->nq);
    r.qvel_next.assign(d->qvel, d->qvel + m->nv);
    out.push_back(std::move(r));
  }
  return out;
}

// the largest difference of one Phalanx step (the model's implicitfast or, to show the test
// tells them apart, Euler) from MuJoCo's over the records, relative to max(1, |qvel|)
double worst_step_error(const Model& model, const std::vector<Record>& records, bool implicit) {
  Model euler = model;
  euler.opt.integrator = kIntegratorEuler;
  HostModel<double> hm(implicit ? model : euler);
  const ModelView<double>& m = hm.view;
  std::vector<double> input(m.nu);
  double worst = 0;
  for (const Record& r : records) {
    std::vector<double> qpos = r.qpos, qvel = r.qvel;
    if (m.na > 0)
      actuator_inputs(m, r.ctrl.data(), r.act.data(), input.data());
    else
      input = r.ctrl;
    unsigned status = step(m, qpos.data(), qvel.data(), input.data(), hm.w);
    EXPECT_EQ(status, 0u);
    double scale = 1;
    for (double v : r.qvel_next) scale = std::max(scale, std::abs(v));
    for (int i = 0; i < m.nq; ++i)
      worst = std::max(worst, std::abs(qpos[i] - r.qpos_next[i]) / scale);
    for (int i = 0; i < m.nv; ++i)
      worst = std::max(worst, std::abs(qvel[i] - r.qvel_next[i]) / scale);
  }
  return worst;
}

TEST(Implicit, BranchedChainMatchesMujocosImplicitfast) {
  ModelPtr mj = test::compile_file(kChain);
  ASSERT_TRUE(mj);
  Model model = from_mujoco(mj.get());
  EXPECT_EQ(model.opt.integrator, kIntegratorImplicitFast);
  std::vector<Record> records = mujoco_records(mj.get(), 300, 3.0, 1);
  EXPECT_LT(worst_step_error(model, records, true), 1e-12);
  // the semi-implicit Euler step is not what MuJoCo ran
  EXPECT_GT(worst_step_error(model, records, false), 1e-5);
}

TEST(Implicit, FreeBodiesMatchMujocosImplicitfast) {
  // fast spins exercise the standalone body's gyroscopic slope
  ModelPtr mj = test::compile_string(kFree);
  ASSERT_TRUE(mj);
  Model model = from_mujoco(mj.get());
  std::vector<Record> records = mujoco_records(mj.get(), 300, 20.0, 2);
  EXPECT_LT(worst_step_error(model, records, true), 1e-12);
  EXPECT_GT(worst_step_error(model, records, false), 1e-5);
}

TEST(Implicit, TensegrityMatchesMujocosImplicitfast) {
  // the six rods are standalone free bodies; the cables' dampers live in their actuators'
  // biases, clamped off while a cable is slack
  ModelPtr mj = test::compile_file(std::string(PHX_SOURCE_DIR) + "/examples/models/tensegrity.xml");
  ASSERT_TRUE(mj);
  mj->opt.integrator = mjINT_IMPLICITFAST;
  mj->opt.disableflags |= mjDSBL_CONTACT;
  Model model = from_mujoco(mj.get());
  std::vector<Record> records = mujoco_records(mj.get(), 400, 0.5, 3);
  EXPECT_LT(worst_step_error(model, records, true), 1e-12);
}

// a medium (fluid.h) added to MuJoCo's compiled model: dense and viscous enough that the drag's
// slope in the implicit matrix shows at the step's precision, with a wind
void add_medium(mjModel* m) {
  m->opt.density = 600;
  m->opt.viscosity = 0.3;
  m->opt.wind[0] = 0.4, m->opt.wind[1] = -0.2, m->opt.wind[2] = 0.1;
}

TEST(Implicit, FluidMatchesMujocosImplicitfast) {
  // the chain (bodies below bodies: the rows of D_fluid over whole paths) and the free bodies
  // (the standalone one's block takes the drag's slope with its gyroscopic one)
  for (bool free : {false, true}) {
    ModelPtr mj = free ? test::compile_string(kFree) : test::compile_file(kChain);
    ASSERT_TRUE(mj);
    add_medium(mj.get());
    Model model = from_mujoco(mj.get());
    EXPECT_EQ(model.opt.density, 600);
    std::vector<Record> records = mujoco_records(mj.get(), 300, free ? 10.0 : 3.0, 6);
    EXPECT_LT(worst_step_error(model, records, true), 1e-12) << (free ? "free" : "chain");
    // without the medium the steps are not MuJoCo's
    Model still = model;
    still.opt.density = still.opt.viscosity = 0;
    EXPECT_GT(worst_step_error(still, records, true), 1e-5) << (free ? "free" : "chain");
  }
}

// ---- the adjoint against central differences ------------------------------------------------

// one implicit step of `in` against adj_step, through test::check_step_adjoint
void check_step_adjoint(const Model& model, const test::StepInputs& in, unsigned seed) {
  test::check_step_adjoint(
      model, in, seed,
      [](HostModel<double>& hm, test::StepInputs& x) {
        EXPECT_EQ(step(hm.view, x.qpos.data(), x.qvel.data(), x.ctrl.data(), hm.w), 0u);
      },
      [](HostModel<double>& hm, const test::StepInputs& x, const double* adj_qpos_next,
         const double* adj_qvel_next, test::StepInputs& g) {
        Carved<AdjWorkspace<double>, double> a(hm.view);
        adj_step(hm.view, x.qpos.data(), x.qvel.data(), x.ctrl.data(), hm.w, a.w, adj_qpos_next,
                 adj_qvel_next, g.qpos.data(), g.qvel.data(), g.ctrl.data(), g.p.adjoint());
      });
}

TEST(Implicit, StepAdjointMatchesCentralDifferencesOnTheChain) {
  ModelPtr mj = test::compile_file(kChain);
  ASSERT_TRUE(mj);
  Model model = from_mujoco(mj.get());
  for (unsigned seed : {1u, 2u, 3u})
    check_step_adjoint(model, test::random_state(model, 2.0, seed), seed);
}

TEST(Implicit, StepAdjointMatchesCentralDifferencesOnFreeBodies) {
  ModelPtr mj = test::compile_string(kFree);
  ASSERT_TRUE(mj);
  Model model = from_mujoco(mj.get());
  for (unsigned seed : {4u, 5u})
    check_step_adjoint(model, test::random_state(model, 15.0, seed), seed);
}

TEST(Implicit, StepAdjointMatchesCentralDifferencesInAMedium) {
  // the drag's slope in H: its rows' and slopes' dependence on the configuration, the velocity
  // and the bodies' masses, inertias and centres of mass
  for (bool free : {false, true}) {
    ModelPtr mj = free ? test::compile_string(kFree) : test::compile_file(kChain);
    ASSERT_TRUE(mj);
    add_medium(mj.get());
    Model model = from_mujoco(mj.get());
    for (unsigned seed : {7u, 8u})
      check_step_adjoint(model, test::random_state(model, free ? 8.0 : 2.0, seed), seed);
  }
}

// adj_free_bias_slope's Dual passes take N of its ten inputs each (kDualDirections: all ten on
// the CPU, a few on the GPU): a direction's slopes are computed on their own, so every width
// gives the same bits
TEST(Implicit, FreeBiasSlopeAdjointIsTheSameInPassesOfAnyWidth) {
  ModelPtr mj = test::compile_string(kFree);
  ASSERT_TRUE(mj);
  Model model = from_mujoco(mj.get());
  HostModel<double> hm(model);
  test::StepInputs x = test::random_state(model, 15.0, 9u);
  x.p.point(hm.view);
  std::vector<double> qpos = x.qpos, qvel = x.qvel;
  EXPECT_EQ(step(hm.view, qpos.data(), qvel.data(), x.ctrl.data(), hm.w), 0u);
  std::mt19937 rng(9u);
  std::uniform_real_distribution<double> r(-1, 1);
  std::vector<double> u(model.nv), v(model.nv);
  for (int d = 0; d < model.nv; ++d) u[d] = r(rng), v[d] = r(rng);
  // the gradients in passes of N: of qvel, the parameters and the bodies' rotations
  auto gradients = [&](auto width) {
    std::vector<double> gq(model.nv, 0.0);
    test::Params g(model);
    for (auto& field : g.all()) std::fill(field.second->begin(), field.second->end(), 0.0);
    Carved<AdjWorkspace<double>, double> a(hm.view);
    adj_free_bias_slope<double, decltype(width)::value>(hm.view, x.qvel.data(), hm.w, a.w, 0.7,
                                                        u.data(), v.data(), gq.data(), g.adjoint());
    for (auto& field : g.all()) gq.insert(gq.end(), field.second->begin(), field.second->end());
    gq.insert(gq.end(), a.w.xmat, a.w.xmat + 9 * model.nbody);
    return gq;
  };
  const std::vector<double> all = gradients(std::integral_constant<int, 10>{});
  double norm = 0;
  for (double z : all) norm += z * z;
  EXPECT_GT(norm, 1e-6);  // the standalone body's slope is there to compare
  EXPECT_EQ(gradients(std::integral_constant<int, 1>{}), all);
  EXPECT_EQ(gradients(std::integral_constant<int, 3>{}), all);
}

}  // namespace
}  // namespace phx
