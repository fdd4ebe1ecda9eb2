// Every adjoint of the core checked in double two ways: against forward-mode dual numbers
// running the same templated code (<w, J v> = <J^T w, v> to round-off) and against central
// differences (rtol 1e-6).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "model_builder.h"
#include "phalanx/math/dual.h"
#include "phalanx/step.h"

namespace phx {
namespace {

using D = Dual<double, 1>;
using test::HostModel;

// Everything a stage may be differentiated with respect to.
template <class T>
struct Inputs {
  std::vector<T> qpos, qvel, qacc, ctrl;
  std::vector<T> body_mass, body_inertia, dof_damping, dof_armature, jnt_stiffness, actuator_gear,
      actuator_gainprm, actuator_biasprm;

  std::vector<std::vector<T>*> all() {
    return {&qpos,
            &qvel,
            &qacc,
            &ctrl,
            &body_mass,
            &body_inertia,
            &dof_damping,
            &dof_armature,
            &jnt_stiffness,
            &actuator_gear,
            &actuator_gainprm,
            &actuator_biasprm};
  }
};

// the stages under test
enum class Stage { kComPos, kComVel, kRnea, kCrba, kPassive, kActuation, kIntegrate, kForward, kStep };

// place the parameter inputs into a model view's arrays
template <class T>
void set_params(HostModel<T>& hm, Inputs<T>& in) {
  auto put = [](const T* dst, const std::vector<T>& src) {
    std::copy(src.begin(), src.end(), const_cast<T*>(dst));
  };
  put(hm.view.body_mass, in.body_mass);
  put(hm.view.body_inertia, in.body_inertia);
  put(hm.view.dof_damping, in.dof_damping);
  put(hm.view.dof_armature, in.dof_armature);
  put(hm.view.jnt_stiffness, in.jnt_stiffness);
  put(hm.view.actuator_gear, in.actuator_gear);
  put(hm.view.actuator_gainprm, in.actuator_gainprm);
  put(hm.view.actuator_biasprm, in.actuator_biasprm);
}

// forward evaluation of a stage; the output flattened
template <class T>
std::vector<T> evaluate(Stage stage, const Model& model, Inputs<T> in) {
  HostModel<T> hm(model);
  set_params(hm, in);
  const ModelView<T>& m = hm.view;
  Workspace<T>& w = hm.w;
  std::vector<T> out;
  auto append = [&out](const T* p, long n) { out.insert(out.end(), p, p + n); };
  switch (stage) {
    case Stage::kComPos:
      kinematics(m, in.qpos.data(), w);
      com_pos(m, w);
      append(w.cinert + 10, 10L * (m.nbody - 1));
      append(w.cdof, 6L * m.nv);
      break;
    case Stage::kComVel:
      kinematics(m, in.qpos.data(), w);
      com_pos(m, w);
      com_vel(m, in.qvel.data(), w);
      append(w.cvel + 6, 6L * (m.nbody - 1));
      append(w.cdof_dot, 6L * m.nv);
      break;
    case Stage::kRnea:
      out.resize(m.nv);
      kinematics(m, in.qpos.data(), w);
      com_pos(m, w);
      com_vel(m, in.qvel.data(), w);
      rnea(m, in.qvel.data(), in.qacc.data(), w, out.data());
      break;
    case Stage::kCrba:
      out.resize(m.nv * m.nv);
      kinematics(m, in.qpos.data(), w);
      com_pos(m, w);
      crba(m, w, out.data());
      break;
    case Stage::kPassive:
      out.resize(m.nv);
      kinematics(m, in.qpos.data(), w);
      com_pos(m, w);
      com_vel(m, in.qvel.data(), w);
      tendon_kinematics(m, in.qpos.data(), w);
      passive(m, in.qpos.data(), in.qvel.data(), w, out.data());
      break;
    case Stage::kActuation:
      out.assign(m.nv, T(0));
      kinematics(m, in.qpos.data(), w);
      com_pos(m, w);
      tendon_kinematics(m, in.qpos.data(), w);
      actuation(m, in.qpos.data(), in.qvel.data(), in.ctrl.data(), w, out.data());
      break;
    case Stage::kIntegrate:
      out = in.qpos;
      integrate_pos(m, out.data(), in.qvel.data(), T(0.05));
      break;
    case Stage::kForward:
      out.resize(m.nv);
      forward_dynamics(m, in.qpos.data(), in.qvel.data(), in.ctrl.data(), T(0.01), w, out.data());
      break;
    case Stage::kStep:
      step(m, in.qpos.data(), in.qvel.data(), in.ctrl.data(), w);
      out = in.qpos;
      out.insert(out.end(), in.qvel.begin(), in.qvel.end());
      break;
  }
  return out;
}

// the adjoint of a stage: gradients of <adj_out, out> with respect to every input
Inputs<double> adjoint(Stage stage, const Model& model, Inputs<double> in,
                       const std::vector<double>& adj_out) {
  HostModel<double> hm(model);
  set_params(hm, in);
  const ModelView<double>& m = hm.view;
  Workspace<double>& w = hm.w;
  test::Carved<AdjWorkspace<double>, double> ablock(m);
  AdjWorkspace<double>& a = ablock.w;
  a.zero();
  Inputs<double> g = in;
  for (auto* v : g.all()) std::fill(v->begin(), v->end(), 0.0);
  ModelAdjoint<double> am;
  am.body_mass = g.body_mass.data();
  am.body_inertia = g.body_inertia.data();
  am.dof_damping = g.dof_damping.data();
  am.dof_armature = g.dof_armature.data();
  am.jnt_stiffness = g.jnt_stiffness.data();
  am.actuator_gear = g.actuator_gear.data();
  am.actuator_gainprm = g.actuator_gainprm.data();
  am.actuator_biasprm = g.actuator_biasprm.data();
  auto load = [&](double* dst, long offset, long n) {
    for (long i = 0; i < n; ++i) dst[i] += adj_out[offset + i];
  };
  switch (stage) {
    case Stage::kComPos:
      kinematics(m, in.qpos.data(), w);
      com_pos(m, w);
      load(a.cinert + 10, 0, 10L * (m.nbody - 1));
      load(a.cdof, 10L * (m.nbody - 1), 6L * m.nv);
      adj_com_pos(m, w, a, am);
      adj_kinematics(m, in.qpos.data(), w, a, g.qpos.data());
      break;
    case Stage::kComVel:
      kinematics(m, in.qpos.data(), w);
      com_pos(m, w);
      com_vel(m, in.qvel.data(), w);
      load(a.cvel + 6, 0, 6L * (m.nbody - 1));
      load(a.cdof_dot, 6L * (m.nbody - 1), 6L * m.nv);
      adj_com_vel(m, in.qvel.data(), w, a, g.qvel.data());
      adj_com_pos(m, w, a, am);
      adj_kinematics(m, in.qpos.data(), w, a, g.qpos.data());
      break;
    case Stage::kRnea: {
      std::vector<double> tau(m.nv);
      kinematics(m, in.qpos.data(), w);
      com_pos(m, w);
      com_vel(m, in.qvel.data(), w);
      rnea(m, in.qvel.data(), in.qacc.data(), w, tau.data());
      adj_rnea(m, in.qvel.data(), in.qacc.data(), w, a, adj_out.data(), g.qvel.data(),
               g.qacc.data());
      adj_com_vel(m, in.qvel.data(), w, a, g.qvel.data());
      adj_com_pos(m, w, a, am);
      adj_kinematics(m, in.qpos.data(), w, a, g.qpos.data());
      break;
    }
    case Stage::kCrba: {
      std::vector<double> M(m.nv * m.nv);
      kinematics(m, in.qpos.data(), w);
      com_pos(m, w);
      crba(m, w, M.data());
      adj_crba(m, w, a, adj_out.data(), am);
      adj_com_pos(m, w, a, am);
      adj_kinematics(m, in.qpos.data(), w, a, g.qpos.data());
      break;
    }
    case Stage::kPassive:
    case Stage::kActuation:
      kinematics(m, in.qpos.data(), w);
      com_pos(m, w);
      com_vel(m, in.qvel.data(), w);
      tendon_kinematics(m, in.qpos.data(), w);
      if (stage == Stage::kPassive)
        adj_passive(m, in.qpos.data(), in.qvel.data(), w, a, adj_out.data(), g.qpos.data(),
                    g.qvel.data(), am);
      else
        adj_actuation(m, in.qpos.data(), in.qvel.data(), in.ctrl.data(), w, a, adj_out.data(),
                      g.qpos.data(), g.qvel.data(), g.ctrl.data(), am);
      adj_tendon_kinematics(m, w, a, g.qpos.data());
      adj_com_vel(m, in.qvel.data(), w, a, g.qvel.data());
      adj_com_pos(m, w, a, am);
      adj_kinematics(m, in.qpos.data(), w, a, g.qpos.data());
      break;
    case Stage::kIntegrate:
      adj_integrate_pos(m, in.qpos.data(), in.qvel.data(), 0.05, adj_out.data(), g.qpos.data(),
                        g.qvel.data());
      break;
    case Stage::kForward: {
      std::vector<double> qacc(m.nv);
      forward_dynamics(m, in.qpos.data(), in.qvel.data(), in.ctrl.data(), 0.01, w, qacc.data());
      adj_forward_dynamics(m, in.qpos.data(), in.qvel.data(), in.ctrl.data(), 0.01, qacc.data(), w,
                           a, adj_out.data(), g.qpos.data(), g.qvel.data(), g.ctrl.data(), am);
      break;
    }
    case Stage::kStep:
      adj_step(m, in.qpos.data(), in.qvel.data(), in.ctrl.data(), w, a, adj_out.data(),
               adj_out.data() + m.nq, g.qpos.data(), g.qvel.data(), g.ctrl.data(), am);
      break;
  }
  return g;
}

// a random point and direction of every input
Inputs<double> random_inputs(const Model& model, std::mt19937& rng, bool direction) {
  std::uniform_real_distribution<double> u(-1, 1);
  Inputs<double> in;
  in.qpos = model.qpos0;
  for (int j = 0; j < model.njnt; ++j) {
    int a = model.jnt_qposadr[j], type = model.jnt_type[j];
    if (type == kJointFree) a += 3;
    if (type == kJointFree || type == kJointBall) {
      Quat<double> q = normalize(Quat<double>{u(rng), u(rng), u(rng), u(rng)});
      if (direction) q = Quat<double>{u(rng), u(rng), u(rng), u(rng)};
      q.store(&in.qpos[a]);
    }
  }
  for (double& q : in.qpos) q += 0.5 * u(rng);
  if (!direction) {  // re-normalise the quaternions of the point
    for (int j = 0; j < model.njnt; ++j) {
      int a = model.jnt_qposadr[j], type = model.jnt_type[j];
      if (type == kJointFree) a += 3;
      if (type == kJointFree || type == kJointBall) normalize(Quat<double>::load(&in.qpos[a])).store(&in.qpos[a]);
    }
  }
  auto fill = [&](std::vector<double>& v, size_t n, double lo, double hi) {
    v.resize(n);
    for (double& x : v) x = direction ? u(rng) : lo + (hi - lo) * 0.5 * (u(rng) + 1);
  };
  fill(in.qvel, model.nv, -2, 2);
  fill(in.qacc, model.nv, -3, 3);
  fill(in.ctrl, model.nu, -0.9, 0.9);  // inside ctrlrange: the clamp is inactive
  fill(in.body_mass, model.nbody, 0.5, 2);
  fill(in.body_inertia, 3 * model.nbody, 0.02, 0.1);
  fill(in.dof_damping, model.nv, 0.1, 1);
  fill(in.dof_armature, model.nv, 0.01, 0.05);
  fill(in.jnt_stiffness, model.njnt, 0.5, 5);
  fill(in.actuator_gear, model.nu, 1, 10);
  in.actuator_gainprm = model.actuator_gainprm;  // the mechanism's servo and affine actuator
  in.actuator_biasprm = model.actuator_biasprm;
  if (direction) {
    fill(in.actuator_gainprm, 9 * model.nu, 0, 0);
    fill(in.actuator_biasprm, 9 * model.nu, 0, 0);
  }
  if (!direction) {
    in.body_mass[0] = 0;
    for (int k = 0; k < 3; ++k) in.body_inertia[k] = 0;
  }
  return in;
}

double dot_inputs(Inputs<double>& a, Inputs<double>& b) {
  double s = 0;
  auto va = a.all(), vb = b.all();
  for (size_t i = 0; i < va.size(); ++i)
    for (size_t k = 0; k < va[i]->size(); ++k) s += (*va[i])[k] * (*vb[i])[k];
  return s;
}

// check one stage at one point along one direction
void check_stage(Stage stage, const Model& model, unsigned seed) {
  std::mt19937 rng(seed);
  Inputs<double> x = random_inputs(model, rng, false);
  Inputs<double> v = random_inputs(model, rng, true);

  // forward mode: J v by dual numbers
  Inputs<D> xd;
  {
    auto dst = xd.all();
    auto src = x.all(), dir = v.all();
    for (size_t i = 0; i < dst.size(); ++i) {
      dst[i]->resize(src[i]->size());
      for (size_t k = 0; k < src[i]->size(); ++k) {
        (*dst[i])[k] = D((*src[i])[k]);
        (*dst[i])[k].d[0] = (*dir[i])[k];
      }
    }
  }
  std::vector<D> yd = evaluate<D>(stage, model, xd);
  std::vector<double> jv(yd.size());
  for (size_t i = 0; i < yd.size(); ++i) jv[i] = yd[i].d[0];

  // central differences: (f(x + h v) - f(x - h v)) / 2h
  const double h = 1e-6;
  auto shifted = [&](double s) {
    Inputs<double> xs = x;
    auto dst = xs.all(), dir = v.all();
    for (size_t i = 0; i < dst.size(); ++i)
      for (size_t k = 0; k < dst[i]->size(); ++k) (*dst[i])[k] += s * (*dir[i])[k];
    return evaluate<double>(stage, model, xs);
  };
  std::vector<double> yp = shifted(h), ym = shifted(-h);
  double scale = 0;
  for (double z : jv) scale = std::max(scale, std::abs(z));
  for (size_t i = 0; i < jv.size(); ++i) {
    double fd = (yp[i] - ym[i]) / (2 * h);
    EXPECT_NEAR(jv[i], fd, 1e-6 * (scale + 1)) << "output " << i;
  }

  // reverse mode: <w, J v> = <J^T w, v>
  std::vector<double> wout(jv.size());
  std::uniform_real_distribution<double> u(-1, 1);
  for (double& z : wout) z = u(rng);
  Inputs<double> g = adjoint(stage, model, x, wout);
  double lhs = 0;
  for (size_t i = 0; i < jv.size(); ++i) lhs += wout[i] * jv[i];
  double rhs = dot_inputs(g, v);
  EXPECT_NEAR(lhs, rhs, 1e-10 * (std::abs(lhs) + 1)) << "dot-product test";
}

struct Case {
  Stage stage;
  const char* name;
};

class AdjointTest : public ::testing::TestWithParam<std::tuple<Case, unsigned>> {};

TEST_P(AdjointTest, MatchesDualNumbersAndFiniteDifferences) {
  auto [c, seed] = GetParam();
  Model model = test::random_mechanism(seed);
  check_stage(c.stage, model, seed + 10);
}

const Case kCases[] = {
    {Stage::kComPos, "com_pos"},       {Stage::kComVel, "com_vel"},
    {Stage::kRnea, "rnea"},            {Stage::kCrba, "crba"},
    {Stage::kPassive, "passive"},      {Stage::kActuation, "actuation"},
    {Stage::kIntegrate, "integrate"},  {Stage::kForward, "forward_dynamics"},
    {Stage::kStep, "step"},
};

INSTANTIATE_TEST_SUITE_P(
    Stages, AdjointTest, ::testing::Combine(::testing::ValuesIn(kCases), ::testing::Values(1u, 2u)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param).name) + "_" +
             std::to_string(std::get<1>(info.param));
    });

// A medium's drag (fluid.h: density, viscosity and wind) through passive, the dynamics and the
// step, with respect to the state and the bodies' masses and inertias
class FluidAdjointTest : public ::testing::TestWithParam<std::tuple<Case, unsigned>> {};

TEST_P(FluidAdjointTest, MatchesDualNumbersAndFiniteDifferences) {
  auto [c, seed] = GetParam();
  Model model = test::random_mechanism(seed);
  model.opt.density = 300;
  model.opt.viscosity = 0.2;
  model.opt.wind = {0.3, -0.4, 0.2};
  check_stage(c.stage, model, seed + 20);
}

const Case kFluidCases[] = {
    {Stage::kPassive, "passive"}, {Stage::kForward, "forward_dynamics"}, {Stage::kStep, "step"}};

INSTANTIATE_TEST_SUITE_P(Fluid, FluidAdjointTest,
                         ::testing::Combine(::testing::ValuesIn(kFluidCases),
                                            ::testing::Values(1u, 2u, 3u)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) + "_" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace phx
