// The batched API: environments are independent, rollout equals repeated steps, status bits
// stay with their environment, float follows double, and CUDA without a GPU is a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "host/api.h"
#include "model_builder.h"

namespace phx {
namespace {

constexpr int kEnvs = 7;

// random states for kEnvs environments
struct Batch {
  std::vector<double> qpos, qvel, ctrl;
};
Batch random_batch(const Model& m, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  Batch b;
  for (int e = 0; e < kEnvs; ++e) {
    std::vector<double> q = m.qpos0;
    for (int j = 0; j < m.njnt; ++j) {
      int a = m.jnt_qposadr[j];
      if (m.jnt_type[j] == kJointFree) a += 3;
      if (m.jnt_type[j] == kJointFree || m.jnt_type[j] == kJointBall) {
        normalize(Quat<double>{u(rng), u(rng), u(rng), u(rng)}).store(&q[a]);
      } else {
        q[a] += 0.5 * u(rng);
      }
    }
    b.qpos.insert(b.qpos.end(), q.begin(), q.end());
    for (int i = 0; i < m.nv; ++i) b.qvel.push_back(u(rng));
    for (int i = 0; i < m.nu; ++i) b.ctrl.push_back(0.8 * u(rng));
  }
  return b;
}

template <class T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

TEST(Batch, StepMatchesSingleEnvironmentCore) {
  Model model = test::random_mechanism(4);
  DeviceModel<double> dm(model, Device::kCpu);
  Data<double> data(dm, kEnvs);
  Batch b = random_batch(model, 1);
  data.qpos.upload(b.qpos.data(), b.qpos.size());
  data.qvel.upload(b.qvel.data(), b.qvel.size());
  data.ctrl.upload(b.ctrl.data(), b.ctrl.size());
  step(dm, data, 3);
  std::vector<double> q = data.qpos.to_host(), v = data.qvel.to_host();

  test::HostModel<double> hm(model);
  for (int e = 0; e < kEnvs; ++e) {
    double* qe = &b.qpos[e * model.nq];
    double* ve = &b.qvel[e * model.nv];
    for (int t = 0; t < 3; ++t) phx::step(hm.view, qe, ve, &b.ctrl[e * model.nu], hm.w);
  }
  EXPECT_EQ(q, b.qpos);  // bit-identical: the same code on the same inputs
  EXPECT_EQ(v, b.qvel);
  for (double t : data.time) EXPECT_DOUBLE_EQ(t, 3 * model.opt.timestep);
}

TEST(Batch, RolloutRecordsRepeatedSteps) {
  Model model = test::random_mechanism(5);
  DeviceModel<double> dm(model, Device::kCpu);
  const int T = 4;
  Batch b = random_batch(model, 2);
  // a control sequence (nenv x T x nu) and the same controls applied step by step
  std::vector<double> ctrl_seq(kEnvs * T * model.nu);
  std::mt19937 rng(3);
  for (double& c : ctrl_seq) c = std::uniform_real_distribution<double>(-1, 1)(rng);

  Data<double> roll(dm, kEnvs);
  roll.qpos.upload(b.qpos.data(), b.qpos.size());
  roll.qvel.upload(b.qvel.data(), b.qvel.size());
  Buffer<double> d_ctrl(Device::kCpu, ctrl_seq), qout(Device::kCpu, kEnvs * T * model.nq),
      vout(Device::kCpu, kEnvs * T * model.nv);
  rollout(dm, roll, d_ctrl.data(), T, qout.data(), vout.data());
  std::vector<double> qtraj = qout.to_host();

  Data<double> stepped(dm, kEnvs);
  stepped.qpos.upload(b.qpos.data(), b.qpos.size());
  stepped.qvel.upload(b.qvel.data(), b.qvel.size());
  for (int t = 0; t < T; ++t) {
    std::vector<double> c(kEnvs * model.nu);
    for (int e = 0; e < kEnvs; ++e)
      for (int i = 0; i < model.nu; ++i) c[e * model.nu + i] = ctrl_seq[(e * T + t) * model.nu + i];
    stepped.ctrl.upload(c.data(), c.size());
    step(dm, stepped, 1);
    std::vector<double> q = stepped.qpos.to_host();
    for (int e = 0; e < kEnvs; ++e)
      for (int i = 0; i < model.nq; ++i)
        ASSERT_EQ(qtraj[(e * T + t) * model.nq + i], q[e * model.nq + i]) << "t=" << t;
  }
  EXPECT_EQ(roll.qvel.to_host(), stepped.qvel.to_host());
}

TEST(Batch, NanControlFlagsOnlyItsEnvironment) {
  Model model = test::random_mechanism(6);
  DeviceModel<double> dm(model, Device::kCpu);
  Batch b = random_batch(model, 3);
  Batch bad = b;
  bad.ctrl[2 * model.nu + 1] = NAN;  // environment 2
  Data<double> good_data(dm, kEnvs), bad_data(dm, kEnvs);
  for (auto* d : {&good_data, &bad_data}) {
    d->qpos.upload(b.qpos.data(), b.qpos.size());
    d->qvel.upload(b.qvel.data(), b.qvel.size());
  }
  good_data.ctrl.upload(b.ctrl.data(), b.ctrl.size());
  bad_data.ctrl.upload(bad.ctrl.data(), bad.ctrl.size());
  step(dm, good_data, 5);
  step(dm, bad_data, 5);
  std::vector<unsigned> status = bad_data.status.to_host();
  std::vector<double> qg = good_data.qpos.to_host(), qb = bad_data.qpos.to_host();
  for (int e = 0; e < kEnvs; ++e) {
    EXPECT_EQ(status[e], e == 2 ? unsigned(kStatusNanCtrl) : 0u) << "env " << e;
    for (int i = 0; i < model.nq; ++i) {
      if (e == 2) {
        EXPECT_EQ(qb[e * model.nq + i], b.qpos[e * model.nq + i]);  // state left untouched
      } else {
        EXPECT_EQ(qb[e * model.nq + i], qg[e * model.nq + i]);
      }
    }
  }
}

TEST(Batch, FloatFollowsDouble) {
  // 100 steps of 2 ms: float32 round-off stays below 1e-3 of the state's scale
  Model model = test::random_mechanism(7);
  Batch b = random_batch(model, 4);
  DeviceModel<double> dd(model, Device::kCpu);
  DeviceModel<float> df(model, Device::kCpu);
  Data<double> d(dd, kEnvs);
  Data<float> f(df, kEnvs);
  d.qpos.upload(b.qpos.data(), b.qpos.size());
  d.qvel.upload(b.qvel.data(), b.qvel.size());
  d.ctrl.upload(b.ctrl.data(), b.ctrl.size());
  auto qf = cast<float>(b.qpos), vf = cast<float>(b.qvel), cf = cast<float>(b.ctrl);
  f.qpos.upload(qf.data(), qf.size());
  f.qvel.upload(vf.data(), vf.size());
  f.ctrl.upload(cf.data(), cf.size());
  step(dd, d, 100);
  step(df, f, 100);
  std::vector<double> qd = d.qpos.to_host();
  std::vector<float> qff = f.qpos.to_host();
  for (size_t i = 0; i < qd.size(); ++i) EXPECT_NEAR(qff[i], qd[i], 1e-3 * (1 + std::abs(qd[i])));
}

TEST(Batch, StepVjpMatchesSingleEnvironmentAdjoint) {
  Model model = test::random_mechanism(8);
  DeviceModel<double> dm(model, Device::kCpu);
  Batch b = random_batch(model, 5);
  std::vector<double> gq(kEnvs * model.nq, 0.3), gv(kEnvs * model.nv, -0.2);
  std::vector<double> aq(kEnvs * model.nq), av(kEnvs * model.nv), ac(kEnvs * model.nu),
      amass(kEnvs * model.nbody);
  ModelAdjoint<double> am;
  am.body_mass = amass.data();
  step_vjp(dm, kEnvs, b.qpos.data(), b.qvel.data(), b.ctrl.data(), gq.data(), gv.data(), aq.data(),
           av.data(), ac.data(), am);

  test::HostModel<double> hm(model);
  test::Carved<AdjWorkspace<double>, double> ablock(model);
  AdjWorkspace<double>& a = ablock.w;
  for (int e = 0; e < kEnvs; ++e) {
    std::vector<double> q(model.nq), v(model.nv), c(model.nu), mass(model.nbody);
    ModelAdjoint<double> one;
    one.body_mass = mass.data();
    adj_step(hm.view, &b.qpos[e * model.nq], &b.qvel[e * model.nv], &b.ctrl[e * model.nu], hm.w, a,
             &gq[e * model.nq], &gv[e * model.nv], q.data(), v.data(), c.data(), one);
    for (int i = 0; i < model.nq; ++i) EXPECT_EQ(aq[e * model.nq + i], q[i]);
    for (int i = 0; i < model.nu; ++i) EXPECT_EQ(ac[e * model.nu + i], c[i]);
    for (int i = 0; i < model.nbody; ++i) EXPECT_EQ(amass[e * model.nbody + i], mass[i]);
  }
}

// per-environment parameters: environment e steps with copy e % nbatch of each batched
// parameter, exactly as a model holding that copy alone, and its step adjoint matches too
TEST(Batch, PerEnvironmentParametersMatchSeparateModels) {
  Model model = test::random_mechanism(6);
  const int nbatch = 3;
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.6, 1.4);
  // nbatch copies of each of five parameters, scaled or shifted per copy
  std::vector<std::pair<const char*, std::vector<double>>> batches;
  for (const char* name : {"body_mass", "body_inertia", "dof_damping", "actuator_gear"}) {
    std::vector<double> base = model.param_field(Model::param_index(name)), all;
    for (int c = 0; c < nbatch; ++c)
      for (double x : base) all.push_back(x * u(rng));
    batches.push_back({name, all});
  }
  std::vector<double> ipos;
  for (int c = 0; c < nbatch; ++c)
    for (double x : model.body_ipos) ipos.push_back(x + 0.05 * (u(rng) - 1));
  batches.push_back({"body_ipos", ipos});

  Model batched = model;
  for (auto& [name, values] : batches) batched.set_parameter(name, values);
  batched.validate();
  DeviceModel<double> dm(batched, Device::kCpu);
  for (auto& [name, values] : batches)
    EXPECT_EQ(dm.view().param_nbatch[Model::param_index(name)], nbatch) << name;

  Batch b = random_batch(model, 9);
  Data<double> data(dm, kEnvs);
  data.qpos.upload(b.qpos.data(), b.qpos.size());
  data.qvel.upload(b.qvel.data(), b.qvel.size());
  data.ctrl.upload(b.ctrl.data(), b.ctrl.size());
  step(dm, data, 3);
  std::vector<double> q = data.qpos.to_host(), v = data.qvel.to_host();
  std::vector<double> gq(kEnvs * model.nq, 0.3), gv(kEnvs * model.nv, -0.2);
  std::vector<double> aq(kEnvs * model.nq), av(kEnvs * model.nv), ac(kEnvs * model.nu),
      amass(kEnvs * model.nbody), aipos(kEnvs * 3 * model.nbody);
  ModelAdjoint<double> am;
  am.body_mass = amass.data();
  am.body_ipos = aipos.data();
  step_vjp(dm, kEnvs, b.qpos.data(), b.qvel.data(), b.ctrl.data(), gq.data(), gv.data(), aq.data(),
           av.data(), ac.data(), am);

  for (int e = 0; e < kEnvs; ++e) {
    // a model holding environment e's copy of every batched parameter
    Model one = model;
    for (auto& [name, values] : batches) {
      size_t n = one.param_size(Model::param_index(name));
      auto first = values.begin() + long((e % nbatch) * n);
      one.set_parameter(name, std::vector<double>(first, first + long(n)));
    }
    DeviceModel<double> dm1(one, Device::kCpu);
    EXPECT_EQ(dm1.view().param_nbatch[kParamBodyMass], 1);
    Data<double> d1(dm1, 1);
    d1.qpos.upload(&b.qpos[e * model.nq], model.nq);
    d1.qvel.upload(&b.qvel[e * model.nv], model.nv);
    d1.ctrl.upload(&b.ctrl[e * model.nu], model.nu);
    step(dm1, d1, 3);
    std::vector<double> q1 = d1.qpos.to_host(), v1 = d1.qvel.to_host();
    for (int i = 0; i < model.nq; ++i) ASSERT_EQ(q[e * model.nq + i], q1[i]) << "env " << e;
    for (int i = 0; i < model.nv; ++i) ASSERT_EQ(v[e * model.nv + i], v1[i]) << "env " << e;

    std::vector<double> aq1(model.nq), av1(model.nv), ac1(model.nu), amass1(model.nbody),
        aipos1(3 * model.nbody);
    ModelAdjoint<double> am1;
    am1.body_mass = amass1.data();
    am1.body_ipos = aipos1.data();
    step_vjp(dm1, 1, &b.qpos[e * model.nq], &b.qvel[e * model.nv], &b.ctrl[e * model.nu],
             &gq[e * model.nq], &gv[e * model.nv], aq1.data(), av1.data(), ac1.data(), am1);
    for (int i = 0; i < model.nv; ++i) EXPECT_EQ(av[e * model.nv + i], av1[i]) << "env " << e;
    for (int i = 0; i < model.nbody; ++i) EXPECT_EQ(amass[e * model.nbody + i], amass1[i]);
    for (int i = 0; i < 3 * model.nbody; ++i) EXPECT_EQ(aipos[e * 3 * model.nbody + i], aipos1[i]);
  }
}

TEST(Batch, PerEnvironmentParametersAreChecked) {
  Model model = test::random_mechanism(3);
  const std::vector<double> mass = model.body_mass;
  size_t n = mass.size();
  // not a whole number of copies
  std::vector<double> bad(2 * n + 1, 1.0);
  EXPECT_THROW(model.set_parameter("body_mass", bad), std::invalid_argument);
  // a negative mass in the second copy: named, and the model is unchanged
  std::vector<double> two = mass;
  two.insert(two.end(), mass.begin(), mass.end());
  two[n + 1] = -1;
  try {
    model.set_parameter("body_mass", two);
    FAIL() << "a negative mass was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("entry 1 of copy 1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(model.body_mass, mass);
  EXPECT_TRUE(model.param_batch[kParamBodyMass].empty());
  EXPECT_THROW(model.set_parameter("body_color", mass), std::invalid_argument);
  // one copy clears a batch
  two[n + 1] = 2.0;
  model.set_parameter("body_mass", two);
  EXPECT_EQ(model.param_nbatch(kParamBodyMass), 2);
  model.set_parameter("body_mass", mass);
  EXPECT_EQ(model.param_nbatch(kParamBodyMass), 1);
}

TEST(Batch, PerEnvironmentGeomSizesWidenTheBoundingSpheres) {
  Model model = load_mjcf_string(
      "<mujoco><worldbody><body><freejoint/><geom type='sphere' size='0.1'/></body>"
      "<body pos='1 0 0'><freejoint/><geom type='box' size='0.1 0.2 0.3'/></body>"
      "</worldbody></mujoco>");
  std::vector<double> sizes = model.geom_size;
  std::vector<double> batch = sizes;
  for (double x : sizes) batch.push_back(2 * x);
  model.set_parameter("geom_size", batch);
  EXPECT_DOUBLE_EQ(model.geom_rbound[0], 0.2);
  EXPECT_DOUBLE_EQ(model.geom_rbound[1], 2 * std::sqrt(0.01 + 0.04 + 0.09));
  batch[3 * 1 + 1] = 0;  // a box half-size of 0 in copy 0
  EXPECT_THROW(model.set_parameter("geom_size", batch), std::invalid_argument);
}

// without a GPU, choosing CUDA is a clear error; with one (or the CPU emulation of one,
// PHX_CUDA_EMULATION), CUDA matches the CPU bit for bit
TEST(Batch, CudaIsAClearErrorWithoutGpuAndMatchesCpuWithOne) {
  Model model = test::random_mechanism(9);
  EXPECT_THROW(parse_device("tpu"), std::invalid_argument);
  if (!cuda_available()) {
    try {
      DeviceModel<float> dm(model, Device::kCuda);
      FAIL() << "expected std::runtime_error";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("device 'cuda' is not available"), std::string::npos)
          << e.what();
    }
    return;
  }
  DeviceModel<double> gpu(model, Device::kCuda), cpu(model, Device::kCpu);
  Data<double> dg(gpu, kEnvs), dc(cpu, kEnvs);
  step(gpu, dg, 10);
  step(cpu, dc, 10);
  std::vector<double> qg = dg.qpos.to_host(), qc = dc.qpos.to_host();
  ASSERT_EQ(qg.size(), qc.size());
  for (size_t i = 0; i < qg.size(); ++i) EXPECT_EQ(qg[i], qc[i]) << i;
}

// A host block of 1 MiB or more, once freed, comes back to the next allocation of its size (a
// Buffer of it still starts zeroed); the idle blocks keep within the limit, the least recently
// freed leaving first; smaller blocks and blocks over the limit are not kept
TEST(Batch, HostBlocksComeBackForTheirSize) {
  constexpr size_t kMiB = size_t(1) << 20, n = kMiB;  // 4 MiB of floats
  const size_t limit = set_host_cache_limit(64 * kMiB);
  release_host_memory();
  ASSERT_EQ(idle_host_bytes(), 0u);
  const float* first;
  {
    Buffer<float> a(Device::kCpu, n);
    for (size_t i = 0; i < n; ++i) a.data()[i] = 1.0f;
    first = a.data();
  }
  EXPECT_EQ(idle_host_bytes(), 4 * kMiB);
  {
    Buffer<float> b(Device::kCpu, n);
    EXPECT_EQ(b.data(), first);
    EXPECT_EQ(idle_host_bytes(), 0u);
    std::vector<float> h = b.to_host();
    for (size_t i = 0; i < n; i += 4099) ASSERT_EQ(h[i], 0.0f) << i;
    Buffer<float> other(Device::kCpu, n + 16);  // another size: a block of its own
    EXPECT_NE(other.data(), first);
  }
  EXPECT_EQ(idle_host_bytes(), 8 * kMiB + 64);  // other's block, then b's
  // within 6 MiB, the later freed stays
  set_host_cache_limit(6 * kMiB);
  EXPECT_EQ(idle_host_bytes(), 4 * kMiB);
  {
    Buffer<float> again(Device::kCpu, n);
    EXPECT_EQ(again.data(), first);
  }
  release_host_memory();
  const float* later;
  {  // of two 4 MiB blocks freed, the later stays
    Buffer<float> c(Device::kCpu, n), d(Device::kCpu, n);
    later = c.data();  // d is destroyed first, then c
  }
  EXPECT_EQ(idle_host_bytes(), 4 * kMiB);
  {
    Buffer<float> e = Buffer<float>::uninitialized(Device::kCpu, n);
    EXPECT_EQ(e.data(), later);
    Buffer<float> big(Device::kCpu, 2 * n), small(Device::kCpu, kMiB / 8);
  }
  EXPECT_EQ(idle_host_bytes(), 4 * kMiB);  // e's block again; neither big's nor small's
  release_host_memory();
  EXPECT_EQ(idle_host_bytes(), 0u);
  set_host_cache_limit(limit);
}

}  // namespace
}  // namespace phx
