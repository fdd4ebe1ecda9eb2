// SIMD passes over environments on the CPU (Pack, host/lane.h; host/pack_kernels.h): a mask's
// branch raises lanes_diverged() exactly when its lanes disagree, and the batched rollout and
// step of a contact-free model, which run whole packs of environments on lanes, give every
// environment the scalar core step's result bit for bit: with lanes that branch alike, with
// lanes that do not (the pass falls back to one environment at a time), with a non-finite
// control in one environment, and for the environments past the last whole pack; the LCP's
// sweeps on lanes (pgs_lanes) give each problem's own sweeps bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "host/api.h"
#include "host/lane.h"
#include "host/pack_kernels.h"

namespace phx {
namespace {

using P = Pack<double, 4>;

P iota(double start) {
  P x;
  for (int k = 0; k < 4; ++k) x.set(k, start + k);
  return x;
}

TEST(Pack, ComparisonsAreLaneByLaneAndSelectPicksPerLane) {
  const P a = iota(0), b(1.5);  // 0 1 2 3 against 1.5
  const P s = select(a < b, a, b * P(10));
  const P c = clamp(a, P(0.5), P(2.5));
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(s[k], k < 1.5 ? double(k) : 15.0);
    EXPECT_EQ(c[k], std::min(std::max(double(k), 0.5), 2.5));
  }
  const P nan(std::numeric_limits<double>::quiet_NaN());
  const P mixed = select(a < b, a, nan);
  lanes_diverged() = false;
  bool finite = isfinite(mixed);  // lanes 0, 1 finite, 2, 3 not
  EXPECT_TRUE(finite);            // lane 0's answer ...
  EXPECT_TRUE(lanes_diverged());  // ... and the disagreement raised
}

TEST(Pack, UniformBranchesLeaveTheFlagClearAndMixedOnesRaiseIt) {
  const P a = iota(0);
  lanes_diverged() = false;
  EXPECT_TRUE(a >= P(0) && a < P(4));    // every lane true
  EXPECT_FALSE(a > P(10) || !(a == a));  // every lane false
  EXPECT_FALSE(lanes_diverged());
  EXPECT_EQ(value(P(2.5)), 2.5);
  EXPECT_FALSE(lanes_diverged());

  EXPECT_FALSE(a > P(1.5) ? true : false);  // lane 0 is false, lanes 2 and 3 true
  EXPECT_TRUE(lanes_diverged());
  lanes_diverged() = false;
  EXPECT_EQ(value(a), 0.0);  // a value that differs between lanes is a divergence too
  EXPECT_TRUE(lanes_diverged());
}

TEST(Pack, RotationDifferenceTakesEachLanesShortestArcWithoutBranching) {
  // sub_quat and its dual-number adjoint on lanes whose relative rotations' quaternions differ
  // in sign (three of the four are past half a turn): each lane's result is the scalar one, bit
  // for bit, and no lane branched apart
  Quat<double> qa[4], qb{std::cos(0.2), 0.0, std::sin(0.2), 0.0};
  for (int k = 0; k < 4; ++k) {
    const double half = 0.4 + 1.3 * k, n = std::sqrt(3.0);  // half angles 0.4 to 4.3 about (1,1,1)
    qa[k] =
        Quat<double>{std::cos(half), std::sin(half) / n, std::sin(half) / n, std::sin(half) / n};
  }
  Quat<P> pa, pb{P(qb.w), P(qb.x), P(qb.y), P(qb.z)};
  for (int k = 0; k < 4; ++k) {
    pa.w.set(k, qa[k].w);
    pa.x.set(k, qa[k].x);
    pa.y.set(k, qa[k].y);
    pa.z.set(k, qa[k].z);
  }
  const Vec3<P> adj_r{P(0.3), P(-1.1), P(0.7)};
  lanes_diverged() = false;
  const Vec3<P> r = sub_quat(pa, pb);
  Quat<P> adj_qa = Quat<P>::zero();
  adj_sub_quat(pa, pb, adj_qa, adj_r);
  EXPECT_FALSE(lanes_diverged());
  int flipped = 0;
  for (int k = 0; k < 4; ++k) {
    flipped += (conjugate(qb) * qa[k]).w < 0;
    const Vec3<double> rk = sub_quat(qa[k], qb);
    EXPECT_EQ(r.x[k], rk.x);
    EXPECT_EQ(r.y[k], rk.y);
    EXPECT_EQ(r.z[k], rk.z);
    // the rotation vector is the shortest arc's: at most half a turn
    EXPECT_LE(std::sqrt(rk.x * rk.x + rk.y * rk.y + rk.z * rk.z), M_PI + 1e-12);
    Quat<double> adj_k = Quat<double>::zero();
    adj_sub_quat(qa[k], qb, adj_k, Vec3<double>{0.3, -1.1, 0.7});
    EXPECT_EQ(adj_qa.w[k], adj_k.w);
    EXPECT_EQ(adj_qa.x[k], adj_k.x);
    EXPECT_EQ(adj_qa.y[k], adj_k.y);
    EXPECT_EQ(adj_qa.z[k], adj_k.z);
  }
  EXPECT_EQ(flipped, 3);  // the lanes did take both branches of the shortest arc
}

// transpose_packs on W x W distinct entries: lane k of pack i lands at to[k][i]
template <class T, int W>
void expect_transposed() {
  Pack<T, W> from[W];
  for (int i = 0; i < W; ++i)
    for (int k = 0; k < W; ++k) from[i].set(k, T(100 * i + k));
  T out[W][W];
  T* to[W];
  for (int k = 0; k < W; ++k) to[k] = out[k];
  transpose_packs(from, to);
  for (int i = 0; i < W; ++i)
    for (int k = 0; k < W; ++k) EXPECT_EQ(out[k][i], T(100 * i + k)) << i << " " << k;
}

TEST(Pack, TransposeMovesLaneKOfPackIToRowKColumnI) {
  expect_transposed<float, 16>();
  expect_transposed<double, 8>();
  expect_transposed<float, 8>();
  expect_transposed<double, 4>();
  expect_transposed<double, 2>();
}

// packs_to_lanes and lanes_to_packs on n = 2 W + 3 distinct entries (whole blocks and a
// remainder): each the other's inverse, lane k of pack i at row k column i
template <class T, int W>
void expect_lanes_and_packs() {
  constexpr int n = 2 * W + 3;
  Pack<T, W> from[n], back[n];
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < W; ++k) from[i].set(k, T(100 * i + k));
  T out[W][n];
  T* to[W];
  const T* in[W];
  for (int k = 0; k < W; ++k) in[k] = to[k] = out[k];
  packs_to_lanes(from, n, to);
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < W; ++k) EXPECT_EQ(out[k][i], T(100 * i + k)) << i << " " << k;
  lanes_to_packs(in, n, back);
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < W; ++k) EXPECT_EQ(back[i][k], T(100 * i + k)) << i << " " << k;
}

TEST(Pack, LanesAndPacksTransposeEachOtherWithRemainders) {
  expect_lanes_and_packs<float, 16>();
  expect_lanes_and_packs<double, 8>();
  expect_lanes_and_packs<double, 4>();
}

// pgs_lanes on W random boxed LCPs, one per lane, against pgs on each alone: impulses bit for
// bit and the same number of sweeps. The lanes have different numbers of rows (one none, one
// the most), their contacts' friction rows follow normals at different rows, one lane has a
// row pgs leaves alone (A_ii = 0), and one is not loaded (it must not sweep).
template <class T, int W>
void expect_pgs_lanes(int iterations, T tolerance, unsigned seed) {
  using L = Pack<T, W>;
  const int n = 11;
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<L> A(size_t(n) * n, L(T(0))), packs(size_t(PgsLanes<L, W>::kArrays) * n);
  std::vector<int> normals(size_t(n) * W);
  PgsLanes<L, W> s(n, A.data(), packs.data(), normals.data());
  struct Lane {
    int nk = 0;
    std::vector<T> A, b, lo, hi, mu, f;
    std::vector<int> findex;
  };
  std::vector<Lane> lane(W);
  for (int k = 0; k < W; ++k) {
    Lane& l = lane[size_t(k)];
    l.nk = k == 0 ? n : k == 1 ? 0 : int(gen() % unsigned(n + 1));
    const int nk = l.nk;
    l.A.assign(size_t(nk) * nk, T(0));
    l.b.resize(size_t(nk));
    l.lo.resize(size_t(nk));
    l.hi.resize(size_t(nk));
    l.mu.assign(size_t(nk), T(0));
    l.f.resize(size_t(nk));
    l.findex.assign(size_t(nk), -1);
    // rows: contacts (a normal and two friction rows) while three fit, where a coin says so,
    // else limits (impulse >= 0) and boxes (impulse in [-0.4, 0.6])
    for (int i = 0; i < nk;) {
      if (i + 3 <= nk && gen() % 2) {
        l.lo[size_t(i)] = T(0);
        l.hi[size_t(i)] = T(kLcpInf);
        for (int r = i + 1; r < i + 3; ++r) {
          l.findex[size_t(r)] = i;
          l.mu[size_t(r)] = T(0.5 + 0.4 * u(gen));
        }
        i += 3;
      } else {
        const bool box = gen() % 2;
        l.lo[size_t(i)] = T(box ? -0.4 : 0.0);
        l.hi[size_t(i)] = T(box ? 0.6 : kLcpInf);
        ++i;
      }
    }
    // A = G G^T + I / 10 (symmetric positive definite), its last row and column zero in lane 2
    const int ng = nk + 2;
    std::vector<double> G(size_t(nk) * ng);
    for (double& g : G) g = u(gen);
    for (int i = 0; i < nk; ++i)
      for (int j = 0; j < nk; ++j) {
        double a = i == j ? 0.1 : 0.0;
        for (int c = 0; c < ng; ++c) a += G[size_t(i * ng + c)] * G[size_t(j * ng + c)];
        if (k == 2 && (i == nk - 1 || j == nk - 1)) a = 0.0;
        l.A[size_t(i * nk + j)] = T(a);
        A[size_t(i * n + j)].set(k, T(a));
      }
    for (int i = 0; i < nk; ++i) {
      l.b[size_t(i)] = T(u(gen));
      l.f[size_t(i)] = l.findex[size_t(i)] < 0 ? T(0.25 + 0.25 * u(gen)) : T(0);
    }
    if (k == 3) continue;  // not loaded
    const LcpProblem<T> p{nk,          l.A.data(),  l.b.data(),     l.lo.data(),
                          l.hi.data(), l.mu.data(), l.findex.data()};
    pgs_lanes_in(p, l.f.data(), T(1), k, s);
  }
  // the same sweeps on a copy, without their counts (sweeps is optional)
  std::vector<L> packs2(packs.size());
  std::vector<int> normals2(normals.size());
  PgsLanes<L, W> s2(n, A.data(), packs2.data(), normals2.data());
  std::copy(packs.begin(), packs.end(), packs2.begin());
  std::copy(normals.begin(), normals.end(), normals2.begin());
  std::copy(s.sweep, s.sweep + W, s2.sweep);
  pgs_lanes(s2, iterations, tolerance);
  int sweeps[W];
  pgs_lanes(s, iterations, tolerance, sweeps);
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < W; ++k) {
      const T counted = s.f[i][k], uncounted = s2.f[i][k];
      EXPECT_EQ(std::memcmp(&counted, &uncounted, sizeof(T)), 0) << "lane " << k << " row " << i;
    }
  std::vector<T> scratch(size_t(4 * n));
  int fewest = iterations, most = 0;
  for (int k = 0; k < W; ++k) {
    Lane& l = lane[size_t(k)];
    if (k == 3) {
      EXPECT_EQ(sweeps[k], 0);
      continue;
    }
    const LcpProblem<T> p{l.nk,        l.A.data(),  l.b.data(),     l.lo.data(),
                          l.hi.data(), l.mu.data(), l.findex.data()};
    int alone = -1;
    pgs(p, l.f.data(), iterations, T(1), scratch.data(), static_cast<T*>(nullptr), tolerance,
        &alone);
    EXPECT_EQ(sweeps[k], alone) << "lane " << k;
    for (int i = 0; i < l.nk; ++i) {
      const T mine = s.f[i][k];
      EXPECT_EQ(std::memcmp(&mine, &l.f[size_t(i)], sizeof(T)), 0)
          << "lane " << k << " row " << i << ": " << mine << " against " << l.f[size_t(i)];
    }
    fewest = alone < fewest ? alone : fewest;
    most = alone > most ? alone : most;
  }
  EXPECT_LT(fewest, most);  // the lanes stopped at different sweeps
}

TEST(PackLcp, SweepsOnLanesEqualEachProblemSweptAlone) {
  for (unsigned seed : {1u, 2u, 3u}) {
    expect_pgs_lanes<float, 16>(40, 1e-4f, seed);
    expect_pgs_lanes<float, 8>(40, 0.0f, seed);
    expect_pgs_lanes<double, 8>(60, 1e-8, seed);
    expect_pgs_lanes<double, 4>(200, 0.0, seed);
  }
}

// MuJoCo's humanoid without contacts and limits: the model the packs run
Model humanoid() {
  Model m = load_mjcf(PHX_MUJOCO_MODELS "/humanoid/humanoid.xml");
  m.opt.contact = false;
  m.opt.limit = false;
  return m;
}

// nenv random states near the standing pose and random controls for nstep steps
struct Batch {
  std::vector<double> qpos, qvel, ctrl;
};
Batch random_batch(const Model& m, int nenv, int nstep, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  Batch b;
  for (int e = 0; e < nenv; ++e) {
    std::vector<double> q = m.qpos0;
    for (int i = 7; i < m.nq; ++i) q[i] += 0.3 * u(rng);
    b.qpos.insert(b.qpos.end(), q.begin(), q.end());
    for (int i = 0; i < m.nv; ++i) b.qvel.push_back(u(rng));
  }
  for (long i = 0; i < long(nenv) * nstep * m.nu; ++i) b.ctrl.push_back(u(rng));
  return b;
}

template <class T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// every environment's trajectory from rollout() against the scalar core's steps, compared bit
// for bit; the status bits of the batch into status
template <class T>
void expect_rollout_equals_scalar_steps(const Model& model, const Batch& b, int nenv, int nstep,
                                        std::vector<unsigned>& status) {
  DeviceModel<T> dm(model, Device::kCpu);
  const ModelView<T>& m = dm.view();
  Data<T> data(dm, nenv);
  data.qpos.upload(cast<T>(b.qpos).data(), b.qpos.size());
  data.qvel.upload(cast<T>(b.qvel).data(), b.qvel.size());
  Buffer<T> ctrl(Device::kCpu, cast<T>(b.ctrl)), qout(Device::kCpu, size_t(nenv) * nstep * m.nq),
      vout(Device::kCpu, size_t(nenv) * nstep * m.nv);
  rollout(dm, data, ctrl.data(), nstep, qout.data(), vout.data());
  const std::vector<T> qt = qout.to_host(), vt = vout.to_host();
  status = data.status.to_host();

  std::vector<T> scratch(scratch_size(m).reals);
  std::vector<int> iscratch(scratch_size(m).ints);
  StepScratch<T> x = step_scratch(m, Scratch<T>{scratch.data(), iscratch.data()});
  const std::vector<T> c = cast<T>(b.ctrl);
  for (int e = 0; e < nenv; ++e) {
    std::vector<T> q(b.qpos.begin() + long(e) * m.nq, b.qpos.begin() + long(e + 1) * m.nq);
    std::vector<T> v(b.qvel.begin() + long(e) * m.nv, b.qvel.begin() + long(e + 1) * m.nv);
    unsigned bits = 0;
    for (int t = 0; t < nstep; ++t) {
      if (!(bits & kStatusStopMask))
        bits |= phx::step(m, q.data(), v.data(), &c[(long(e) * nstep + t) * m.nu], x.w);
      for (int i = 0; i < m.nq; ++i)
        ASSERT_EQ(qt[(long(e) * nstep + t) * m.nq + i], q[i]) << "env " << e << " step " << t;
      for (int i = 0; i < m.nv; ++i)
        ASSERT_EQ(vt[(long(e) * nstep + t) * m.nv + i], v[i]) << "env " << e << " step " << t;
    }
    EXPECT_EQ(status[e], bits) << "env " << e;
  }
}

template <class T>
void rollout_equals_scalar_steps() {
  const Model model = humanoid();
  constexpr int W = kLanes<T>, nenv = 2 * W + 3, nstep = 40;
  Batch b = random_batch(model, nenv, nstep, 7);
  // lanes that branch apart: a zero quaternion on environment 1's free joint, which the step
  // normalises to the identity (as MuJoCo) where the other lanes divide by their norm; the
  // quaternion it writes back is a unit one, so only the first step falls back
  for (int i = 3; i < 7; ++i) b.qpos[1 * model.nq + i] = 0;
  cpu::pack_stats().reset();
  std::vector<unsigned> status;
  expect_rollout_equals_scalar_steps<T>(model, b, nenv, nstep, status);
  for (unsigned s : status) EXPECT_EQ(s, 0u);
  // both ways were taken: passes on lanes, and the first pack's first step one by one
  EXPECT_EQ(cpu::pack_stats().passes, 2 * nstep);
  EXPECT_EQ(cpu::pack_stats().fallbacks, 1);
}

TEST(PackRollout, EqualsTheScalarStepsBitForBitInDouble) {
  rollout_equals_scalar_steps<double>();
}
TEST(PackRollout, EqualsTheScalarStepsBitForBitInFloat) {
  rollout_equals_scalar_steps<float>();
}

TEST(PackRollout, NonFiniteControlStopsItsEnvironmentAlone) {
  const Model model = humanoid();
  constexpr int W = kLanes<double>, nenv = W, nstep = 12;
  Batch b = random_batch(model, nenv, nstep, 11);
  b.ctrl[(3L * nstep + 5) * model.nu + 2] = std::numeric_limits<double>::quiet_NaN();
  std::vector<unsigned> status;
  expect_rollout_equals_scalar_steps<double>(model, b, nenv, nstep, status);
  for (int e = 0; e < nenv; ++e) EXPECT_EQ(status[e], e == 3 ? unsigned(kStatusNanCtrl) : 0u);
}

// step() with a constant control and an added generalized force, packs against the core
TEST(PackStep, EqualsTheScalarStepsWithAppliedForces) {
  const Model model = humanoid();
  constexpr int W = kLanes<double>, nenv = W + 2, nstep = 5;
  DeviceModel<double> dm(model, Device::kCpu);
  const ModelView<double>& m = dm.view();
  Batch b = random_batch(model, nenv, 1, 13);
  std::vector<double> f(size_t(nenv) * m.nv);
  std::mt19937 rng(17);
  for (double& x : f) x = std::uniform_real_distribution<double>(-5, 5)(rng);
  Data<double> data(dm, nenv);
  data.qpos.upload(b.qpos.data(), b.qpos.size());
  data.qvel.upload(b.qvel.data(), b.qvel.size());
  data.ctrl.upload(b.ctrl.data(), b.ctrl.size());
  Buffer<double> d_f(Device::kCpu, f);
  step(dm, data, nstep, d_f.data());
  const std::vector<double> q = data.qpos.to_host(), v = data.qvel.to_host();

  std::vector<double> scratch(scratch_size(m).reals);
  std::vector<int> iscratch(scratch_size(m).ints);
  StepScratch<double> x = step_scratch(m, Scratch<double>{scratch.data(), iscratch.data()});
  for (int e = 0; e < nenv; ++e) {
    double* qe = &b.qpos[long(e) * m.nq];
    double* ve = &b.qvel[long(e) * m.nv];
    for (int t = 0; t < nstep; ++t)
      EXPECT_EQ(phx::step(m, qe, ve, &b.ctrl[long(e) * m.nu], x.w, &f[long(e) * m.nv]), 0u);
    for (int i = 0; i < m.nq; ++i) ASSERT_EQ(q[long(e) * m.nq + i], qe[i]) << "env " << e;
    for (int i = 0; i < m.nv; ++i) ASSERT_EQ(v[long(e) * m.nv + i], ve[i]) << "env " << e;
  }
}

}  // namespace
}  // namespace phx
