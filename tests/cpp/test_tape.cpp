// Checkpointed tapes (tape.h, rollout_backward): gradients of a whole rollout with contacts
// against central differences in double, identical for every checkpoint spacing, deterministic
// forwards, the memory a tape reports, and clear errors for a missing or too small tape.
//
// The scene keeps its contact mode for the whole rollout (T = 50, 0.1 s): a sphere sliding and
// spinning on the floor (friction at its bound, a push-out row) next to a motor-driven pendulum
// that touches nothing, so one model exercises the constrained adjoint for the state, the
// controls, the masses and the contact parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "host/api.h"
#include "host/pack_adjoint.h"
#include "phalanx/kernels.h"

namespace phx {
namespace {

constexpr int kEnvs = 3, kSteps = 50;

Model scene() {
  Model m = load_mjcf_string(
      "<mujoco><option timestep='0.002'/><worldbody>"
      "<geom name='floor' type='plane' size='10 10 .1' friction='0.6'/>"
      "<body pos='0 0 0.0995'><freejoint/><geom type='sphere' size='.1' mass='1.3' "
      "friction='0.5'/></body>"
      "<body pos='2 0 1'><joint name='hinge' type='hinge' axis='0 1 0' damping='0.05'/>"
      "<geom type='capsule' fromto='0 0 0 0.4 0 0' size='0.03' mass='0.7' contype='0' "
      "conaffinity='0'/></body></worldbody>"
      "<actuator><motor joint='hinge' gear='1.5'/></actuator></mujoco>");
  m.opt.lcp_solver = kLcpPgsStabilized;
  m.opt.lcp_tolerance = 1e-9;
  m.geom_restitution = {0.3, 0.2, 0.1};
  return m;
}

// the inputs of a rollout and the loss weights on every state
struct Problem {
  std::vector<double> qpos, qvel, ctrl, wq, wv;
};

Problem problem(const Model& m) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(-1, 1);
  Problem p;
  for (int e = 0; e < kEnvs; ++e) {
    std::vector<double> q = m.qpos0, v(m.nv);
    q[7] = 0.2 * u(rng);                                   // pendulum angle
    v = {1.0 + 0.2 * e, 0.3 * u(rng), -0.05, 0.5 * u(rng), -1.0, 0.2, 0.5 * u(rng)};
    p.qpos.insert(p.qpos.end(), q.begin(), q.end());
    p.qvel.insert(p.qvel.end(), v.begin(), v.end());
  }
  for (int i = 0; i < kEnvs * kSteps * m.nu; ++i) p.ctrl.push_back(0.5 * u(rng));
  for (int i = 0; i < kEnvs * kSteps * m.nq; ++i) p.wq.push_back(u(rng));
  for (int i = 0; i < kEnvs * kSteps * m.nv; ++i) p.wv.push_back(u(rng));
  return p;
}

struct Forward {
  std::vector<double> qpos, qvel;
  std::vector<unsigned> status;
};

Forward run(const DeviceModel<double>& dm, const Problem& p, Tape<double>* tape = nullptr) {
  const Model& m = dm.model();
  Data<double> data(dm, kEnvs);
  data.qpos.upload(p.qpos.data(), p.qpos.size());
  data.qvel.upload(p.qvel.data(), p.qvel.size());
  Buffer<double> ctrl(Device::kCpu, p.ctrl), qs(Device::kCpu, size_t(kEnvs) * kSteps * m.nq),
      vs(Device::kCpu, size_t(kEnvs) * kSteps * m.nv);
  rollout(dm, data, ctrl.data(), kSteps, qs.data(), vs.data(), nullptr, tape);
  return {qs.to_host(), vs.to_host(), data.status.to_host()};
}

double loss(const Forward& f, const Problem& p) {
  double l = 0;
  for (size_t i = 0; i < f.qpos.size(); ++i) l += p.wq[i] * f.qpos[i];
  for (size_t i = 0; i < f.qvel.size(); ++i) l += p.wv[i] * f.qvel[i];
  return l;
}

// gradients of the loss: initial qpos, qvel, controls, per-env body_mass, geom_friction
struct Grad {
  std::vector<double> qpos, qvel, ctrl, mass, friction, restitution;
};

Grad backward(const DeviceModel<double>& dm, Tape<double>& tape, const Problem& p,
              int contact_gradient = -1) {
  const Model& m = dm.model();
  Buffer<double> wq(Device::kCpu, p.wq), wv(Device::kCpu, p.wv);
  Buffer<double> gq(Device::kCpu, size_t(kEnvs) * m.nq), gv(Device::kCpu, size_t(kEnvs) * m.nv),
      gc(Device::kCpu, size_t(kEnvs) * kSteps * m.nu),
      gmass(Device::kCpu, size_t(kEnvs) * m.nbody),
      gfric(Device::kCpu, size_t(kEnvs) * 3 * m.ngeom),
      grest(Device::kCpu, size_t(kEnvs) * m.ngeom);
  ModelAdjoint<double> am{gmass.data()};
  ContactModelAdjoint<double> ac{gfric.data(), grest.data()};
  rollout_backward(dm, tape, wq.data(), wv.data(), gq.data(), gv.data(), gc.data(), am, ac,
                   contact_gradient);
  return {gq.to_host(),    gv.to_host(),   gc.to_host(),
          gmass.to_host(), gfric.to_host(), grest.to_host()};
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

TEST(Tape, ForwardIsDeterministicAndTapeDoesNotChangeIt) {
  Model m = scene();
  DeviceModel<double> dm(m, Device::kCpu);
  Problem p = problem(m);
  Tape<double> tape(7);
  Forward a = run(dm, p), b = run(dm, p), c = run(dm, p, &tape);
  EXPECT_TRUE(same_bits(a.qpos, b.qpos) && same_bits(a.qvel, b.qvel));
  EXPECT_TRUE(same_bits(a.qpos, c.qpos) && same_bits(a.qvel, c.qvel));
  for (unsigned s : a.status) EXPECT_EQ(s & kStatusStopMask, 0u);
}

TEST(Tape, GradientsAreBitIdenticalForEveryCheckpointSpacing) {
  Model m = scene();
  DeviceModel<double> dm(m, Device::kCpu);
  Problem p = problem(m);
  Tape<double> full(1);
  run(dm, p, &full);
  Grad ref = backward(dm, full, p);
  for (int every : {2, 7, 0, 50, 80}) {
    Tape<double> tape(every);
    run(dm, p, &tape);
    Grad g = backward(dm, tape, p);
    EXPECT_TRUE(same_bits(g.qpos, ref.qpos) && same_bits(g.qvel, ref.qvel) &&
                same_bits(g.ctrl, ref.ctrl) && same_bits(g.mass, ref.mass) &&
                same_bits(g.friction, ref.friction) && same_bits(g.restitution, ref.restitution))
        << "every " << every << " (" << tape.every() << ")";
  }
  // the memory reported: sqrt(T) spacing needs far less than a checkpoint per step
  Tape<double> sq;
  run(dm, p, &sq);
  EXPECT_EQ(sq.every(), 8);  // ceil(sqrt(50))
  EXPECT_EQ(sq.bytes(), Tape<double>::bytes_for(dm.view(), kEnvs, kSteps, 8));
  EXPECT_EQ(full.bytes(), Tape<double>::bytes_for(dm.view(), kEnvs, kSteps, 1));
  EXPECT_LT(2 * sq.bytes(), full.bytes());
  std::printf("  tape bytes: every step %zu, every 8 steps %zu\n", full.bytes(), sq.bytes());
}

// Contacts that come and go: a sphere and a tumbling box thrown at the floor (restitution, so
// they bounce) and a motor pushing a hinge into its limit. The backward pass keeps each
// recomputed step's workspace in slots sized by the rollout's peaks (StepStore) and replays
// every step without them; both give the same bits with every contact-gradient option.
TEST(Tape, StoredStepsEqualReplayedStepsAsContactsComeAndGo) {
  Model m = load_mjcf_string(
      "<mujoco><option timestep='0.005'/><worldbody>"
      "<geom type='plane' size='10 10 .1' friction='0.7'/>"
      "<body pos='0 0 0.25'><freejoint/><geom type='sphere' size='.1' mass='1'/></body>"
      "<body pos='1 0 0.3'><freejoint/><geom type='box' size='.1 .08 .06' mass='0.8'/></body>"
      "<body pos='3 0 1'><joint name='hinge' type='hinge' axis='0 1 0' limited='true' "
      "range='-10 10'/><geom type='capsule' fromto='0 0 0 0.4 0 0' size='0.03' mass='0.7' "
      "contype='0' conaffinity='0'/></body></worldbody>"
      "<actuator><motor joint='hinge' gear='2'/></actuator></mujoco>");
  m.opt.lcp_solver = kLcpPgsStabilized;
  m.geom_restitution = {0.5, 0.6, 0.4, 0.0};
  DeviceModel<double> dm(m, Device::kCpu);
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-1, 1);
  Problem p;
  for (int e = 0; e < kEnvs; ++e) {
    std::vector<double> q = m.qpos0, v(m.nv, 0.0);
    v[2] = -2.0 - 0.5 * e;                                  // sphere thrown down
    v[6 + 2] = -1.5;                                        // box thrown down, spinning
    v[6 + 3] = 0.5 * u(rng);
    v[6 + 4] = 0.5 * u(rng);
    p.qpos.insert(p.qpos.end(), q.begin(), q.end());
    p.qvel.insert(p.qvel.end(), v.begin(), v.end());
  }
  for (int i = 0; i < kEnvs * kSteps * m.nu; ++i) p.ctrl.push_back(1.0 + 0.5 * u(rng));
  for (int i = 0; i < kEnvs * kSteps * m.nq; ++i) p.wq.push_back(u(rng));
  for (int i = 0; i < kEnvs * kSteps * m.nv; ++i) p.wv.push_back(u(rng));

  // the tape's peaks are the most contacts and rows the rollout's counts show
  Tape<double> full(1);
  Data<double> data(dm, kEnvs);
  data.qpos.upload(p.qpos.data(), p.qpos.size());
  data.qvel.upload(p.qvel.data(), p.qvel.size());
  Buffer<double> ctrl(Device::kCpu, p.ctrl);
  Buffer<int> counts(Device::kCpu, size_t(kEnvs) * kSteps * kNumCounts);
  rollout(dm, data, ctrl.data(), kSteps, static_cast<double*>(nullptr),
          static_cast<double*>(nullptr), counts.data(), &full);
  std::vector<int> c = counts.to_host();
  std::array<int, 2> most{0, 0};
  std::vector<int> rows;
  for (size_t s = 0; s < c.size(); s += kNumCounts) {
    most[0] = std::max(most[0], c[s + kCountContacts]);
    most[1] = std::max(most[1], c[s + kCountRows]);
    rows.push_back(c[s + kCountRows]);
  }
  EXPECT_EQ(full.peak(), most);
  std::sort(rows.begin(), rows.end());
  EXPECT_GE(std::unique(rows.begin(), rows.end()) - rows.begin(), 4) << "row counts vary";
  std::printf("  peak: %d contacts, %d rows\n", most[0], most[1]);

  for (int option : {0, int(kGradComplementarityAware), int(kGradBounceCorrection),
                     int(kGradComplementarityAware | kGradBounceCorrection)}) {
    Grad ref = backward(dm, full, p, option);
    for (int every : {3, 0, 50}) {
      Tape<double> tape(every);
      run(dm, p, &tape);
      Grad g = backward(dm, tape, p, option);
      EXPECT_TRUE(same_bits(g.qpos, ref.qpos) && same_bits(g.qvel, ref.qvel) &&
                  same_bits(g.ctrl, ref.ctrl) && same_bits(g.mass, ref.mass) &&
                  same_bits(g.friction, ref.friction) && same_bits(g.restitution, ref.restitution))
          << "contact_gradient " << option << ", every " << tape.every();
    }
  }
}

// A step that does not fit its slot (which only a recomputation that differs from the forward
// could produce) is replayed from its record instead: slots one row and one contact short of
// the peak give the same bits as slots with room for every step.
TEST(Tape, StepsBeyondTheirSlotAreReplayed) {
  Model m = scene();
  DeviceModel<double> dm(m, Device::kCpu);
  Problem p = problem(m);
  Tape<double> tape(7);
  run(dm, p, &tape);
  std::array<int, 2> peak = tape.peak();
  ASSERT_GT(peak[1], 1);
  Grad ref = backward(dm, tape, p);
  const int nstep_nu = kSteps * m.nu;
  Buffer<double> wq(Device::kCpu, p.wq), wv(Device::kCpu, p.wv);
  Buffer<double> gq(Device::kCpu, size_t(kEnvs) * m.nq), gv(Device::kCpu, size_t(kEnvs) * m.nv),
      gc(Device::kCpu, size_t(kEnvs) * nstep_nu);
  Data<double> replay(dm, kEnvs);
  for (int short_by : {0, 1}) {
    RolloutAdjointKernel<double> k{dm.view(), tape.view(), tape.ctrl(),       wq.data(),
                                   wv.data(), gq.data(),   gv.data(),         gc.data(),
                                   {},        {},          replay.contacts()};
    k.nslot = tape.every();
    k.slot_ncon = peak[0] - short_by;
    k.slot_nrow = peak[1] - short_by;
    launch(Device::kCpu, kEnvs, k,
           rollout_adjoint_scratch_size(dm.view(), k.nslot, k.slot_ncon, k.slot_nrow));
    EXPECT_TRUE(same_bits(gq.to_host(), ref.qpos) && same_bits(gv.to_host(), ref.qvel) &&
                same_bits(gc.to_host(), ref.ctrl))
        << "slots short by " << short_by;
  }
}

// The backward kernel over scratch whose strided arrays are interleaved (the CUDA backend's
// layout: the replayed and recomputed steps' rows and the slots' rows, in tiles of a warp's
// environments) gives the bits of the CPU's: the three environments in lanes 0, 1 and 31 of
// one tile, with a checkpoint every step (each step replayed), every 7 steps (slots), and
// slots one row and contact short of the peaks (steps beyond them replayed).
TEST(Tape, InterleavedScratchWalksAsContiguous) {
  Model m = scene();
  DeviceModel<double> dm(m, Device::kCpu);
  Problem p = problem(m);
  constexpr int W = Interleaved::kStride;
  const int lanes[kEnvs] = {0, 1, W - 1};
  for (int every : {1, 7}) {
    Tape<double> tape(every);
    run(dm, p, &tape);
    const Grad ref = backward(dm, tape, p);
    const std::array<int, 2> peak = tape.peak();
    ASSERT_GT(peak[1], 1);
    for (int short_by : {0, 1}) {
      if (every == 1 && short_by == 1) continue;  // no slots
      Buffer<double> wq(Device::kCpu, p.wq), wv(Device::kCpu, p.wv);
      std::vector<double> gq(kEnvs * m.nq), gv(kEnvs * m.nv), gc(kEnvs * kSteps * m.nu),
          gmass(kEnvs * m.nbody), gfric(kEnvs * 3 * m.ngeom), grest(kEnvs * m.ngeom);
      Data<double> replay(dm, kEnvs);
      RolloutAdjointKernel<double> k{dm.view(),
                                     tape.view(),
                                     tape.ctrl(),
                                     wq.data(),
                                     wv.data(),
                                     gq.data(),
                                     gv.data(),
                                     gc.data(),
                                     ModelAdjoint<double>{gmass.data()},
                                     ContactModelAdjoint<double>{gfric.data(), grest.data()},
                                     replay.contacts()};
      k.slot_ncon = peak[0] - short_by;
      k.slot_nrow = peak[1] - short_by;
      if (every > 1) k.nslot = every;
      const ScratchSize n =
          rollout_adjoint_scratch_size(dm.view(), k.nslot, k.slot_ncon, k.slot_nrow);
      ASSERT_GT(n.rows, 0);
      // the slots lie wholly among the strided arrays: the rest is that of a walk without them
      const ScratchSize bare = rollout_adjoint_scratch_size(dm.view(), 0, 0, 0);
      EXPECT_EQ(n.reals - n.rows, bare.reals - bare.rows);
      EXPECT_EQ(n.ints - n.irows, bare.ints - bare.irows);
      std::vector<double> tile(W * n.rows, std::nan(""));
      std::vector<int> itile(W * n.irows, -7);
      for (int e = 0; e < kEnvs; ++e) {
        std::vector<double> reals(n.reals - n.rows, std::nan(""));
        std::vector<int> ints(n.ints - n.irows, -7);
        k(e, Scratch<double, Interleaved>{reals.data(), ints.data(), nullptr,
                                          tile.data() + lanes[e], itile.data() + lanes[e]});
      }
      EXPECT_TRUE(same_bits(gq, ref.qpos) && same_bits(gv, ref.qvel) && same_bits(gc, ref.ctrl) &&
                  same_bits(gmass, ref.mass) && same_bits(gfric, ref.friction) &&
                  same_bits(grest, ref.restitution))
          << "every " << every << ", slots short by " << short_by;
      // nothing reached the tile's other lanes
      for (long i = 0; i < long(tile.size()); ++i) {
        const long lane = i % W;
        if (lane != lanes[0] && lane != lanes[1] && lane != lanes[2]) {
          ASSERT_TRUE(std::isnan(tile[i])) << i;
        }
      }
      for (long i = 0; i < long(itile.size()); ++i) {
        const long lane = i % W;
        if (lane != lanes[0] && lane != lanes[1] && lane != lanes[2]) {
          ASSERT_EQ(itile[i], -7) << i;
        }
      }
    }
  }
}

// central differences of the rollout loss along random directions of each input
TEST(Tape, RolloutGradientMatchesCentralDifferences) {
  Model m = scene();
  DeviceModel<double> dm(m, Device::kCpu);
  Problem p = problem(m);
  Tape<double> tape;
  run(dm, p, &tape);
  Grad g = backward(dm, tape, p);
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(-1, 1);
  const double h = 1e-6;
  auto check = [&](const char* name, std::vector<double>& x, const std::vector<double>& grad,
                   const std::function<double()>& f, size_t first = 0) {
    std::vector<double> d(x.size(), 0.0);
    for (size_t i = first; i < d.size(); ++i) d[i] = u(rng);
    std::vector<double> x0 = x;
    for (size_t i = 0; i < x.size(); ++i) x[i] = x0[i] + h * d[i];
    double lp = f();
    for (size_t i = 0; i < x.size(); ++i) x[i] = x0[i] - h * d[i];
    double lm = f();
    x = x0;
    double fd = (lp - lm) / (2 * h), ad = 0;
    for (size_t i = 0; i < x.size(); ++i) ad += grad[i] * d[i];
    std::printf("  %-16s adjoint % .10e central difference % .10e\n", name, ad, fd);
    EXPECT_NEAR(ad, fd, 1e-6 * std::abs(fd) + 1e-9) << name;
  };
  auto rollout_loss = [&]() { return loss(run(dm, p), p); };
  check("qpos", p.qpos, g.qpos, rollout_loss);
  check("qvel", p.qvel, g.qvel, rollout_loss);
  check("ctrl", p.ctrl, g.ctrl, rollout_loss);
  // shared parameters: the per-environment gradients summed
  auto shared = [&](const std::vector<double>& per_env, size_t n) {
    std::vector<double> s(n, 0.0);
    for (int e = 0; e < kEnvs; ++e)
      for (size_t i = 0; i < n; ++i) s[i] += per_env[e * n + i];
    return s;
  };
  auto model_loss = [&](const Model& changed) {
    DeviceModel<double> dm2(changed, Device::kCpu);
    return loss(run(dm2, p), p);
  };
  Model m2 = m;
  check("body_mass", m2.body_mass, shared(g.mass, m.nbody), [&] { return model_loss(m2); }, 1);
  // the sliding coefficient only (the other columns carry no gradient)
  std::vector<double> mu = {m.geom_friction[0], m.geom_friction[3], m.geom_friction[6]};
  std::vector<double> gmu, gf = shared(g.friction, 3 * m.ngeom);
  for (int k = 0; k < 3; ++k) gmu.push_back(gf[3 * k]);
  check("geom_friction", mu, gmu, [&] {
    for (int k = 0; k < 3; ++k) m2.geom_friction[3 * k] = mu[k];
    return model_loss(m2);
  });
  check("geom_restitution", m2.geom_restitution, shared(g.restitution, m.ngeom),
        [&] { return model_loss(m2); });
}

TEST(Tape, BackwardWithoutARecordingOrWithAnotherModelIsAnError) {
  Model m = scene();
  DeviceModel<double> dm(m, Device::kCpu), other(m, Device::kCpu);
  Problem p = problem(m);
  Tape<double> tape;
  EXPECT_THROW(backward(dm, tape, p), std::logic_error);
  run(dm, p, &tape);
  EXPECT_THROW(backward(other, tape, p), std::logic_error);
}

TEST(Tape, MemoryBudgetChoosesTheSpacingOrFailsClearly) {
  Model m = scene();
  DeviceModel<double> dm(m, Device::kCpu);
  Problem p = problem(m);
  size_t every_step = Tape<double>::bytes_for(dm.view(), kEnvs, kSteps, 1);
  Tape<double> roomy(0, every_step);
  run(dm, p, &roomy);
  EXPECT_EQ(roomy.every(), 1);
  Tape<double> tight(0, every_step / 2);
  run(dm, p, &tight);
  EXPECT_GT(tight.every(), 1);
  EXPECT_LE(tight.bytes(), every_step / 2);
  // the solution log takes what the records leave of the budget
  EXPECT_EQ(tight.bytes(),
            Tape<double>::bytes_for(dm.view(), kEnvs, kSteps, tight.every(), every_step / 2));
  EXPECT_GT(tight.bytes(), Tape<double>::bytes_for(dm.view(), kEnvs, kSteps, tight.every(), 1));
  Tape<double> tiny(0, 1000);
  try {
    run(dm, p, &tiny);
    FAIL() << "a 1000-byte budget cannot hold a tape";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("needs at least"), std::string::npos) << e.what();
  }
}

// On the CPU the default spacing is also bounded by the steps a pack's recomputed segment keeps
// in its share of the cache (pack_segment_room), but not below 4 steps; the GPU keeps the
// spacing of least memory, ceil(sqrt(T)).
TEST(Tape, DefaultSpacingOnTheCpuKeepsAPackSegmentInCache) {
  EXPECT_EQ(detail::cpu_list_size("0-1"), 2);
  EXPECT_EQ(detail::cpu_list_size("0-7,64-71"), 16);
  EXPECT_EQ(detail::cpu_list_size("5"), 1);
  EXPECT_EQ(detail::cpu_list_size("0,2,4-5"), 4);
  Model m = load_mjcf(std::string(PHX_MUJOCO_MODELS) + "/humanoid/humanoid.xml");
  DeviceModel<float> dm(m, Device::kCpu);
  const ModelView<float>& view = dm.view();
  const int nenv = cpu::PackStepper<float>::W;
  const int room = cpu::pack_segment_room(dm.lane_model(), view, nenv);
  ASSERT_GT(room, 0);  // packs run the humanoid's backward
  EXPECT_EQ(cpu::pack_segment_room(dm.lane_model(), view, nenv - 1), 0);  // too few for a pack
  // a pack's kept steps: its lanes' workspace and its environments' row-free slots
  const size_t step =
      size_t(cpu::PackStepper<float>::W) * sizeof(float) *
      (Workspace<float>::size(view) + StepStore<float>::slot_size(view, 0, 0).reals);
  EXPECT_LE(size_t(room) * step, cache_per_thread() / 4);
  EXPECT_GT(size_t(room + 1) * step, cache_per_thread() / 4);
  Data<float> data(dm, nenv);
  for (int nstep : {3, 30, 400}) {
    const int sqrt_rule = int(std::ceil(std::sqrt(double(nstep))));
    std::vector<float> ctrl(size_t(nenv) * nstep * m.nu, 0.1f);
    Buffer<float> c(Device::kCpu, ctrl), qs(Device::kCpu, size_t(nenv) * nstep * m.nq),
        vs(Device::kCpu, size_t(nenv) * nstep * m.nv);
    Tape<float> tape;
    rollout(dm, data, c.data(), nstep, qs.data(), vs.data(), nullptr, &tape);
    EXPECT_EQ(tape.every(), std::min(sqrt_rule, std::max(room, std::min(sqrt_rule, 4))))
        << nstep << " steps";
  }
}

}  // namespace
}  // namespace phx
