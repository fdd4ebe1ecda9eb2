// Gradchecks of one step's adjoint in double: every input of a step (state, controls and the
// dynamics parameters), a random state, and the adjoint's directional derivatives against
// central differences, for any step function and its adjoint.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "host/model.h"
#include "model_builder.h"
#include "phalanx/math/quat.h"
#include "phalanx/model_view.h"

namespace phx::test {

// The dynamics parameters (PHX_DYNAMICS_PARAMS), owned, pointed to by a view and by an adjoint
struct Params {
#define PHX_TEST_PARAM(Name, field, check) std::vector<double> field;
  PHX_DYNAMICS_PARAMS(PHX_TEST_PARAM)
#undef PHX_TEST_PARAM
  explicit Params(const Model& m) {
#define PHX_TEST_PARAM(Name, field, check) field = m.field;
    PHX_DYNAMICS_PARAMS(PHX_TEST_PARAM)
#undef PHX_TEST_PARAM
  }
  std::vector<std::pair<const char*, std::vector<double>*>> all() {
    return {
#define PHX_TEST_PARAM(Name, field, check) {#field, &field},
        PHX_DYNAMICS_PARAMS(PHX_TEST_PARAM)
#undef PHX_TEST_PARAM
    };
  }
  void point(ModelView<double>& v) {
#define PHX_TEST_PARAM(Name, field, check) v.field = field.data();
    PHX_DYNAMICS_PARAMS(PHX_TEST_PARAM)
#undef PHX_TEST_PARAM
  }
  ModelAdjoint<double> adjoint() {
    ModelAdjoint<double> a;
#define PHX_TEST_PARAM(Name, field, check) a.field = field.data();
    PHX_DYNAMICS_PARAMS(PHX_TEST_PARAM)
#undef PHX_TEST_PARAM
    return a;
  }
};

// every input of a step: state, controls and parameters
struct StepInputs {
  std::vector<double> qpos, qvel, ctrl;
  Params p;
  explicit StepInputs(const Model& m) : qpos(m.qpos0), qvel(m.nv), ctrl(m.nu), p(m) {}
  std::vector<std::pair<const char*, std::vector<double>*>> all() {
    std::vector<std::pair<const char*, std::vector<double>*>> v = {
        {"qpos", &qpos}, {"qvel", &qvel}, {"ctrl", &ctrl}};
    for (auto& q : p.all()) v.push_back(q);
    return v;
  }
};

// <weights, (qpos', qvel')> of one step (Step: void(HostModel<double>&, StepInputs&), the
// state advanced in place)
template <class Step>
double step_objective(const Model& model, StepInputs in, const std::vector<double>& weights,
                      const Step& step) {
  HostModel<double> hm(model);
  in.p.point(hm.view);
  step(hm, in);
  double f = 0;
  for (int i = 0; i < model.nq; ++i) f += weights[i] * in.qpos[i];
  for (int i = 0; i < model.nv; ++i) f += weights[model.nq + i] * in.qvel[i];
  return f;
}

// The adjoint's directional derivative along random directions of each input against central
// differences (Adjoint: void(HostModel<double>&, const StepInputs& at, const double*
// adj_qpos_next, const double* adj_qvel_next, StepInputs& gradients), accumulating), within
// `tol` relative.
template <class Step, class Adjoint>
void check_step_adjoint(const Model& model, StepInputs in, unsigned seed, const Step& step,
                        const Adjoint& adjoint, double tol = 1e-7) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> weights(model.nq + model.nv);
  for (double& v : weights) v = u(rng);

  HostModel<double> hm(model);
  in.p.point(hm.view);
  StepInputs g = in;
  for (auto& [name, v] : g.all()) std::fill(v->begin(), v->end(), 0.0);
  adjoint(hm, in, weights.data(), weights.data() + model.nq, g);

  auto ins = in.all(), grads = g.all();
  for (size_t k = 0; k < ins.size(); ++k) {
    // parameters move relative to their size (the ball's inertia is 1e-5 kg m^2)
    std::vector<double> dir(ins[k].second->size());
    for (size_t i = 0; i < dir.size(); ++i)
      dir[i] = u(rng) * (k < 3 ? 1.0 : std::max(std::abs((*ins[k].second)[i]), 1e-3));
    double analytic = 0;
    for (size_t i = 0; i < dir.size(); ++i) analytic += dir[i] * (*grads[k].second)[i];
    // central differences with one Richardson extrapolation: the light capsule's spin makes
    // the step strongly curved in its inertia
    auto difference = [&](double eps) {
      StepInputs plus = in, minus = in;
      for (size_t i = 0; i < dir.size(); ++i) {
        (*plus.all()[k].second)[i] += eps * dir[i];
        (*minus.all()[k].second)[i] -= eps * dir[i];
      }
      return (step_objective(model, plus, weights, step) -
              step_objective(model, minus, weights, step)) /
             (2 * eps);
    };
    const double numeric = (4 * difference(1e-5) - difference(2e-5)) / 3;
    EXPECT_NEAR(analytic, numeric, tol * std::max(1.0, std::abs(numeric))) << ins[k].first;
  }
}

// a state away from the model's rest: random velocities, rotated balls and free bodies
StepInputs random_state(const Model& model, double speed, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  StepInputs in(model);
  for (int j = 0; j < model.njnt; ++j) {
    int a = model.jnt_qposadr[j];
    if (model.jnt_type[j] == kJointFree) a += 3;
    if (model.jnt_type[j] == kJointFree || model.jnt_type[j] == kJointBall)
      normalize(Quat<double>{1 + u(rng), u(rng), u(rng), u(rng)}).store(&in.qpos[a]);
    else
      in.qpos[a] += 0.3 * u(rng);
  }
  for (double& v : in.qvel) v = speed * u(rng);
  for (int i = 0; i < model.nu; ++i) {
    double lo = model.actuator_ctrlrange[2 * i], hi = model.actuator_ctrlrange[2 * i + 1];
    in.ctrl[i] = model.actuator_ctrllimited[i] ? lo + (hi - lo) * (0.5 + 0.4 * u(rng)) : u(rng);
  }
  return in;
}

}  // namespace phx::test
