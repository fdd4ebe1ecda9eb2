// One-step Jacobians (step_jacobian, StepJacobianKernel): on the CPU the rows of qvel' run
// several per reverse pass (Lane, host/lane_adjoint.h). Each row must equal step_vjp of its unit seed,
// which runs the scalar pass: in double to 1e-12 of the row's largest entry, in float to 1e-3
// (float's rounding through rank-deficient contact sets; a lane mixed up is off by O(1)),
// parameter columns included, per environment with per-environment parameters, with rows
// between none and many, and with seeds that leave the last pass's lanes partly empty.
// (Against finite differences: tests/python/test_gradients.py.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "host/api.h"
#include "phalanx/kernels.h"

namespace phx {
namespace {

struct Batch {
  std::vector<double> qpos, qvel, ctrl;
};

// the worst |jac row - step_vjp of its unit seed| over the row's largest entry (or absolute
// when that is below 1: rows of rounding noise), every
// environment and row (state, control, qfrc and parameter columns), and the rows (summed over
// environments) of steps that had constraint rows
template <class T>
double worst_row_difference(const Model& model, const Batch& b, int nenv, int* rows_with_rows) {
  DeviceModel<T> dm(model, Device::kCpu);
  const ModelView<T>& m = dm.view();
  const int nq = m.nq, nv = m.nv, nu = m.nu, rows = nq + nv, cols = nq + 2 * nv + nu;
  const int np = jacobian_nparam(m);
  auto cast = [](const std::vector<double>& x) { return std::vector<T>(x.begin(), x.end()); };
  Buffer<T> q(Device::kCpu, cast(b.qpos)), v(Device::kCpu, cast(b.qvel)),
      u(Device::kCpu, cast(b.ctrl)), jac(Device::kCpu, size_t(nenv) * rows * cols),
      jp(Device::kCpu, size_t(nenv) * rows * np);
  step_jacobian(dm, nenv, q.data(), v.data(), u.data(), jac.data(), jp.data());
  std::vector<T> J = jac.to_host(), P = jp.to_host();

  // the constraint rows of each environment's step
  Data<T> data(dm, nenv);
  data.qpos.upload(q.to_host().data(), size_t(nenv) * nq);
  data.qvel.upload(v.to_host().data(), size_t(nenv) * nv);
  data.ctrl.upload(u.to_host().data(), size_t(nenv) * nu);
  step(dm, data, 1);
  std::vector<int> nefc = data.contact.nefc.to_host();
  *rows_with_rows = 0;
  for (int e = 0; e < nenv; ++e) *rows_with_rows += nefc[e] > 0 ? rows : 0;

  // per-environment parameter adjoints in Param order, one buffer each
  std::vector<Buffer<T>> pbuf;
  ModelAdjoint<T> am;
  ContactModelAdjoint<T> ac;
  for (int k = 0; k < kNumParams; ++k) {
    pbuf.emplace_back(Device::kCpu, size_t(nenv) * param_size(m, k));
    param_adjoint(am, ac, k) = pbuf.back().data();
  }
  double worst = 0;
  for (int r = nq; r < rows; ++r) {
    std::vector<T> sq(size_t(nenv) * nq, T(0)), sv(size_t(nenv) * nv, T(0));
    for (int e = 0; e < nenv; ++e) sv[size_t(e) * nv + r - nq] = T(1);
    Buffer<T> wq(Device::kCpu, sq), wv(Device::kCpu, sv), gq(Device::kCpu, size_t(nenv) * nq),
        gv(Device::kCpu, size_t(nenv) * nv), gc(Device::kCpu, size_t(nenv) * nu);
    step_vjp(dm, nenv, q.data(), v.data(), u.data(), wq.data(), wv.data(), gq.data(), gv.data(),
             gc.data(), am, ac);
    std::vector<T> hq = gq.to_host(), hv = gv.to_host(), hc = gc.to_host();
    for (int e = 0; e < nenv; ++e) {
      const T* row = J.data() + (size_t(e) * rows + r) * cols;
      const T* prow = P.data() + (size_t(e) * rows + r) * np;
      std::vector<double> ref;
      for (int i = 0; i < nq; ++i) ref.push_back(hq[size_t(e) * nq + i]);
      for (int i = 0; i < nv; ++i) ref.push_back(hv[size_t(e) * nv + i]);
      for (int i = 0; i < nu; ++i) ref.push_back(hc[size_t(e) * nu + i]);
      std::vector<double> got(row, row + nq + nv + nu);
      for (int k = 0; k < kNumParams; ++k) {
        std::vector<T> g = pbuf[k].to_host();
        long n = param_size(m, k);
        for (long i = 0; i < n; ++i) ref.push_back(g[e * n + i]);
      }
      got.insert(got.end(), prow, prow + np);
      double scale = 0, diff = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        scale = std::max(scale, std::fabs(ref[i]));
        diff = std::max(diff, std::fabs(got[i] - ref[i]));
      }
      worst = std::max(worst, diff / std::max(scale, 1.0));
    }
  }
  return worst;
}

// MuJoCo's humanoid dropped on its back, 0.25 s later (bench_jacobians.py's state): 10 contacts
// with friction, 32 rows whose clamping set is rank deficient, 27 seeds (the last pass of
// four lanes holds three)
Batch humanoid_state(const Model& model) {
  DeviceModel<double> dm(model, Device::kCpu);
  Data<double> d(dm, 1);
  std::vector<double> q = model.qpos0;
  q[2] = 0.3;
  q[3] = std::cos(M_PI / 4);
  q[4] = 0;
  q[5] = std::sin(M_PI / 4);
  q[6] = 0;
  d.qpos.upload(q.data(), q.size());
  const int n = int(0.25 / model.opt.timestep);
  std::vector<double> ctrl(size_t(n) * model.nu, 0.0);
  Buffer<double> c(Device::kCpu, ctrl);
  rollout(dm, d, c.data(), n, static_cast<double*>(nullptr), static_cast<double*>(nullptr));
  return {d.qpos.to_host(), d.qvel.to_host(), std::vector<double>(model.nu, 0.0)};
}

TEST(StepJacobian, HumanoidRowsEqualTheirVectorJacobianProducts) {
  Model model = load_model(std::string(PHX_MUJOCO_MODELS) + "/humanoid/humanoid.xml");
  model.opt.lcp_solver = kLcpPgsStabilized;
  Batch b = humanoid_state(model);
  int with_rows = 0;
  double worst = worst_row_difference<double>(model, b, 1, &with_rows);
  EXPECT_EQ(with_rows, model.nq + model.nv);
  EXPECT_LE(worst, 1e-12);
  EXPECT_LE(worst_row_difference<float>(model, b, 1, &with_rows), 1e-3);
}

// The planar half-cheetah of bench_jacobians standing on the floor (two contacts): nine rows of
// qvel', so that a row is left after the lane passes (of four or eight) and takes the scalar
// pass (double); float's sixteen lanes take all nine in one pass.
TEST(StepJacobian, RowLeftAfterTheLanePassesEqualsItsVectorJacobianProduct) {
  Model model =
      load_model(std::string(PHX_SOURCE_DIR) + "/examples/models/half_cheetah_planar.xml");
  model.opt.lcp_solver = kLcpPgsStabilized;
  ASSERT_EQ(model.nv % 4, 1);
  std::vector<double> v(model.nv);
  for (int d = 0; d < model.nv; ++d) v[d] = 0.05 * std::sin(d + 1.0);
  Batch b{model.qpos0, v, std::vector<double>(model.nu, 0.2)};
  int with_rows = 0;
  double worst = worst_row_difference<double>(model, b, 1, &with_rows);
  EXPECT_EQ(with_rows, model.nq + model.nv);
  EXPECT_LE(worst, 1e-12);
  EXPECT_LE(worst_row_difference<float>(model, b, 1, &with_rows), 1e-3);
}

// Four environments of a scene with contacts and a joint limit, each with its own masses,
// friction and damping: a sphere sliding on the floor, a box resting on it, a pendulum past its
// limit, and in the last environment everything lifted off the floor and inside the limit (no
// rows: the lanes of LaneDynamicsReplay).
TEST(StepJacobian, PerEnvironmentRowsEqualTheirVectorJacobianProducts) {
  Model model = load_mjcf_string(
      "<mujoco><compiler angle='radian'/><option timestep='0.002'/><worldbody>"
      "<geom name='floor' type='plane' size='10 10 .1' friction='0.6'/>"
      "<body pos='0 0 0.0995'><freejoint/><geom type='sphere' size='.1' mass='1.3' "
      "friction='0.5'/></body>"
      "<body pos='1 0 0.099'><freejoint/><geom type='box' size='.1 .1 .1' mass='2'/></body>"
      "<body pos='2 0 1'><joint name='hinge' type='hinge' axis='0 1 0' damping='0.05' "
      "limited='true' range='-0.5 0.5'/>"
      "<geom type='capsule' fromto='0 0 0 0.4 0 0' size='0.03' mass='0.7' contype='0' "
      "conaffinity='0'/></body></worldbody>"
      "<actuator><motor joint='hinge' gear='1.5'/></actuator></mujoco>");
  model.opt.lcp_solver = kLcpPgsStabilized;
  model.opt.lcp_tolerance = 1e-9;
  const int nenv = 4;
  model.set_parameter("body_mass", {0, 1.3, 2, 0.7, 0, 1.1, 2.5, 0.9, 0, 1.6, 1.8, 0.5});
  model.set_parameter("geom_friction", {0.6, 0, 0, 0.5, 0, 0, 0.9, 0, 0, 1, 0, 0,
                                        0.8, 0, 0, 0.4, 0, 0, 0.7, 0, 0, 1, 0, 0});
  std::vector<double> damping;
  for (int e = 0; e < nenv; ++e)
    for (int d = 0; d < model.nv; ++d) damping.push_back(0.01 * (e + 1) + 0.002 * d);
  model.set_parameter("dof_damping", damping);
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> un(-1, 1);
  Batch b;
  for (int e = 0; e < nenv; ++e) {
    std::vector<double> q = model.qpos0, v(model.nv);
    q[14] = 0.52 + 0.01 * e;  // hinge past its limit
    if (e == nenv - 1) {
      q[2] += 0.5;
      q[9] += 0.5;
      q[14] = 0.1;
    }
    for (double& x : v) x = 0.3 * un(rng);
    v[0] = 1.0;
    b.qpos.insert(b.qpos.end(), q.begin(), q.end());
    b.qvel.insert(b.qvel.end(), v.begin(), v.end());
    b.ctrl.push_back(un(rng));
  }
  int with_rows = 0;
  double worst = worst_row_difference<double>(model, b, nenv, &with_rows);
  EXPECT_EQ(with_rows, (nenv - 1) * (model.nq + model.nv));
  EXPECT_LE(worst, 1e-12);
  EXPECT_LE(worst_row_difference<float>(model, b, nenv, &with_rows), 1e-3);
}

// The half-cheetah with contacts and limits switched off: a model without constraint rows,
// whose rows reuse one forward_dynamics (LaneDynamicsReplay: eight rows in lanes, the ninth
// in the scalar adj_step_replayed) where step_vjp runs its own
TEST(StepJacobian, ContactFreeRowsEqualTheirVectorJacobianProducts) {
  Model model =
      load_model(std::string(PHX_SOURCE_DIR) + "/examples/models/half_cheetah_planar.xml");
  model.opt.contact = false;
  model.opt.limit = false;
  ASSERT_EQ(DeviceModel<double>(model, Device::kCpu).view().nefcmax, 0);
  const int nenv = 3;
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> un(-1, 1);
  Batch b;
  for (int e = 0; e < nenv; ++e) {
    for (int i = 0; i < model.nq; ++i) b.qpos.push_back(model.qpos0[i] + 0.2 * un(rng));
    for (int d = 0; d < model.nv; ++d) b.qvel.push_back(un(rng));
    for (int k = 0; k < model.nu; ++k) b.ctrl.push_back(un(rng));
  }
  int with_rows = 0;
  EXPECT_LE(worst_row_difference<double>(model, b, nenv, &with_rows), 1e-12);
  EXPECT_EQ(with_rows, 0);
  EXPECT_LE(worst_row_difference<float>(model, b, nenv, &with_rows), 1e-3);
}

}  // namespace
}  // namespace phx
