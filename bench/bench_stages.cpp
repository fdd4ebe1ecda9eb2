// Per-stage cost of one environment's step on MuJoCo's humanoid (contact-free), in float and
// double, and the batched step on both CPU cores. Complements bench/bench_humanoid.py, which
// compares whole rollouts against MuJoCo in one run.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <vector>

#include "host/api.h"
#include "phalanx/kernels.h"

namespace {

const phx::Model& humanoid() {
  static phx::Model m = phx::load_mjcf(PHX_MUJOCO_MODELS "/humanoid/humanoid.xml");
  return m;
}

// one environment's state, workspace and adjoint workspace on the host
template <class T>
struct Env {
  phx::DeviceModel<T> model{humanoid(), phx::Device::kCpu};
  const phx::ModelView<T>& m = model.view();
  std::vector<T> qpos, qvel, ctrl, qacc, scratch, adj_block, adj_q, adj_v, adj_c;
  phx::Workspace<T> w;
  phx::AdjWorkspace<T> a;

  Env() {
    const phx::Model& h = humanoid();
    qpos.assign(h.qpos0.begin(), h.qpos0.end());
    qvel.assign(h.nv, T(0.1));
    ctrl.assign(h.nu, T(0.2));
    qacc.assign(h.nv, T(0));
    adj_q.assign(h.nq, T(0));
    adj_v.assign(h.nv, T(0));
    adj_c.assign(h.nu, T(0));
    scratch.resize(phx::Workspace<T>::size(m));
    phx::Arena<T> arena(scratch.data(), nullptr);
    w = phx::Workspace<T>::carve(m, arena);
    adj_block.resize(phx::AdjWorkspace<T>::size(m));
    phx::Arena<T> adj_arena(adj_block.data(), nullptr);
    a = phx::AdjWorkspace<T>::carve(m, adj_arena);
  }
};

template <class T>
void BM_Kinematics(benchmark::State& state) {
  Env<T> e;
  for (auto _ : state) {
    phx::kinematics(e.m, e.qpos.data(), e.w);
    phx::com_pos(e.m, e.w);
    phx::com_vel(e.m, e.qvel.data(), e.w);
    benchmark::DoNotOptimize(e.w.cvel[6]);
  }
}

template <class T>
void BM_ForwardDynamics(benchmark::State& state) {
  Env<T> e;
  for (auto _ : state) {
    phx::forward_dynamics(e.m, e.qpos.data(), e.qvel.data(), e.ctrl.data(), T(0), e.w,
                          e.qacc.data());
    benchmark::DoNotOptimize(e.qacc[0]);
  }
}

template <class T>
void BM_MassMatrix(benchmark::State& state) {
  Env<T> e;
  std::vector<T> M(e.m.nv * e.m.nv);
  phx::kinematics(e.m, e.qpos.data(), e.w);
  phx::com_pos(e.m, e.w);
  for (auto _ : state) {
    phx::crba(e.m, e.w, M.data());
    benchmark::DoNotOptimize(M[0]);
  }
}

// one step from the same state each time (a free-falling humanoid stepped for minutes of
// simulated time would leave the regime of interest)
template <class T>
void BM_Step(benchmark::State& state) {
  Env<T> e;
  std::vector<T> q0 = e.qpos, v0 = e.qvel;
  for (auto _ : state) {
    std::copy(q0.begin(), q0.end(), e.qpos.begin());
    std::copy(v0.begin(), v0.end(), e.qvel.begin());
    phx::step(e.m, e.qpos.data(), e.qvel.data(), e.ctrl.data(), e.w);
    benchmark::DoNotOptimize(e.qpos[0]);
  }
}

template <class T>
void BM_StepAdjoint(benchmark::State& state) {
  Env<T> e;
  std::vector<T> gq(e.m.nq, T(1)), gv(e.m.nv, T(1));
  for (auto _ : state) {
    phx::adj_step(e.m, e.qpos.data(), e.qvel.data(), e.ctrl.data(), e.w, e.a, gq.data(), gv.data(),
                  e.adj_q.data(), e.adj_v.data(), e.adj_c.data(), phx::ModelAdjoint<T>{});
    benchmark::DoNotOptimize(e.adj_q[0]);
  }
}

// batched steps of 4096 environments on all OpenMP threads; items = env-steps
template <class T>
void BM_BatchedStep(benchmark::State& state) {
  const int nenv = 4096;
  phx::DeviceModel<T> model(humanoid(), phx::Device::kCpu);
  phx::Data<T> data(model, nenv);
  for (auto _ : state) phx::step(model, data, 10);
  state.SetItemsProcessed(state.iterations() * nenv * 10);
}

BENCHMARK(BM_Kinematics<float>);
BENCHMARK(BM_Kinematics<double>);
BENCHMARK(BM_MassMatrix<float>);
BENCHMARK(BM_MassMatrix<double>);
BENCHMARK(BM_ForwardDynamics<float>);
BENCHMARK(BM_ForwardDynamics<double>);
BENCHMARK(BM_Step<float>);
BENCHMARK(BM_Step<double>);
BENCHMARK(BM_StepAdjoint<float>);
BENCHMARK(BM_StepAdjoint<double>);
BENCHMARK(BM_BatchedStep<float>)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_BatchedStep<double>)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
