// Forward steps of kLanes<T> environments per SIMD pass on the CPU: the rollout and step kernels
// of models without constraint rows, on Pack<T, kLanes<T>> (host/lane.h).
//
// Each thread takes packs of W = kLanes<T> consecutive environments (16 in float, 8 in double
// with AVX-512), moves their state into lanes (lane k: environment e0 + k) and runs the core's
// step() on the lanes, against the model broadcast once (LaneModel::pack). A pass in which every
// branch of the step was taken alike in all lanes (lanes_diverged() stays clear) is each
// environment's scalar step, up to the rounding of fused multiply-adds; otherwise, and for any
// environment a status bit has stopped, the pack's environments take that step one by one with
// the scalar kernel's step_env from the state saved before the pass. Environments past the last
// whole pack, and launches the packs do not cover (constraint rows, XPBD, activations,
// per-environment parameters, mocap sequences, tapes, body forces), run the scalar kernel.
// This is host code that moves data and calls the core's step: no physics is written here.
#pragma once

#include <omp.h>

#include "host/api.h"
#include "host/cpu_backend.h"
#include "host/lane_adjoint.h"
#include "phalanx/kernels/forward.h"

namespace phx::cpu {

// One thread's packs: the state of W environments in lanes and the workspaces of one pass,
// with the scalar scratch of the environments that step one by one.
template <class T>
class PackStepper {
 public:
  static constexpr int W = kLanes<T>;
  using P = Pack<T, W>;

  // whether the packs step launches on m (all environments' view): shared parameters, no
  // constraint rows, XPBD or activations
  static bool applies(const ModelView<T>& m) {
    return m.nefcmax == 0 && m.solver != kSolverXpbd && m.na == 0 && LaneModel<T>::shared(m);
  }

  PackStepper(const ModelView<P>& lanes, const ModelView<T>& m, ScratchSize scalar)
      : lm_(lanes), m_(m) {
    const long nq = m.nq, nv = m.nv, nu = m.nu;
    P* block = thread_block<P>(size_t(Workspace<P>::size(m) + 3 * (nq + nv) + nu + nv));
    Arena<P> arena(block, nullptr);
    w_ = Workspace<P>::carve(m, arena);
    q_ = arena.template take<P>(nq);
    v_ = arena.template take<P>(nv);
    q0_ = arena.template take<P>(nq);
    v0_ = arena.template take<P>(nv);
    u_ = arena.template take<P>(nu);
    f_ = arena.template take<P>(nv);
    // the scalar steps' scratch, then one environment's qpos and qvel
    T* reals = thread_block<T>(size_t(scalar.reals + nq + nv));
    x_ = step_scratch(m, Scratch<T>{reals, thread_block<int>(size_t(scalar.ints))});
    q1_ = reals + scalar.reals;
  }

  // environments e0 .. e0 + W - 1's rows of qpos and qvel (nenv x nq, nenv x nv) into the lanes
  void load(const T* qpos, const T* qvel, int e0) {
    gather(q_, qpos + long(e0) * m_.nq, m_.nq, m_.nq);
    gather(v_, qvel + long(e0) * m_.nv, m_.nv, m_.nv);
  }
  // the lanes back into those rows (qpos, qvel, or rows of W trajectories of stride `stride`)
  void store_qpos(T* qpos, long stride) const { scatter(q_, qpos, stride, m_.nq); }
  void store_qvel(T* qvel, long stride) const { scatter(v_, qvel, stride, m_.nv); }

  // One step of the pack: ctrl and qfrc (may be null) hold lane k's rows at ctrl + k ctrl_stride
  // and qfrc + k qfrc_stride; bits[k] is lane k's status, OR-ed with the step's. An environment
  // whose bits hold a stopping bit is not stepped (the rollout kernel's rule).
  void step(const T* ctrl, long ctrl_stride, const T* qfrc, long qfrc_stride, unsigned* bits) {
    const ModelView<T>& m = m_;
    gather(u_, ctrl, ctrl_stride, m.nu);
    if (qfrc) gather(f_, qfrc, qfrc_stride, m.nv);
    bool stopped = false;
    for (int k = 0; k < W; ++k) stopped = stopped || (bits[k] & kStatusStopMask);
    if (!stopped) {
      copy(q_, q0_, m.nq);
      copy(v_, v0_, m.nv);
      lanes_diverged() = false;
      const unsigned st = phx::step(lm_, q_, v_, u_, w_, qfrc ? f_ : nullptr);
      ++passes;
      if (!lanes_diverged()) {
        for (int k = 0; k < W; ++k) bits[k] |= st;
        return;
      }
      copy(q0_, q_, m.nq);
      copy(v0_, v_, m.nv);
    }
    // one by one, from the state before the pass
    ++fallbacks;
    T* q = q1_;
    T* v = q1_ + m.nq;
    for (int k = 0; k < W; ++k) {
      if (bits[k] & kStatusStopMask) continue;
      lane_out(q_, k, q, m.nq);
      lane_out(v_, k, v, m.nv);
      ContactView<T> cv{};
      bits[k] |= step_env(m, q, v, static_cast<T*>(nullptr), ctrl + k * ctrl_stride, x_, cv, {},
                          qfrc ? qfrc + k * qfrc_stride : nullptr);
      lane_in(q, k, q_, m.nq);
      lane_in(v, k, v_, m.nv);
    }
  }

  long passes = 0, fallbacks = 0;  // this stepper's, for pack_stats()

 private:
  // to[i] lane k = from[k stride + i]
  static void gather(P* to, const T* from, long stride, int n) {
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < W; ++k) to[i].set(k, from[k * stride + i]);
  }
  static void scatter(const P* from, T* to, long stride, int n) {
    for (int k = 0; k < W; ++k)
      for (int i = 0; i < n; ++i) to[k * stride + i] = from[i][k];
  }
  static void copy(const P* from, P* to, int n) {
    for (int i = 0; i < n; ++i) to[i] = from[i];
  }
  static void lane_out(const P* from, int k, T* to, int n) {
    for (int i = 0; i < n; ++i) to[i] = from[i][k];
  }
  static void lane_in(const T* from, int k, P* to, int n) {
    for (int i = 0; i < n; ++i) to[i].set(k, from[i]);
  }

  const ModelView<P>& lm_;
  const ModelView<T>& m_;
  Workspace<P> w_{};
  P *q_, *v_, *q0_, *v0_, *u_, *f_;
  StepScratch<T> x_;
  T* q1_;
};

// kernel(e, scratch) for the environments past the last whole pack and pack(stepper, e0) for
// the packs before, over the CPU backend's threads
template <class T, class Kernel, class PackBody>
void launch_packs(const LaneModel<T>& lanes, int nenv, const Kernel& kernel, ScratchSize scratch,
                  const PackBody& pack) {
  constexpr int W = PackStepper<T>::W;
  const int npack = nenv / W, threads = num_threads();
  const ModelView<T>& m = kernel.model;
#pragma omp parallel num_threads(threads) if (threads > 1 && npack > 1)
  {
    PackStepper<T> stepper(lanes.pack, m, scratch);
#pragma omp for schedule(static)
    for (int p = 0; p < npack; ++p) pack(stepper, p * W);
    Scratch<T> s{thread_block<T>(size_t(scratch.reals)), thread_block<int>(size_t(scratch.ints))};
#pragma omp for schedule(static)
    for (int e = npack * W; e < nenv; ++e) kernel(e, s);
    pack_stats().passes += stepper.passes;
    pack_stats().fallbacks += stepper.fallbacks;
  }
}

// RolloutKernel on packs where they apply; false (nothing run) where they do not
template <class T>
bool rollout_packs(const LaneModel<T>* lanes, int nenv, const RolloutKernel<T>& k,
                   ScratchSize scratch) {
  if (!lanes || scratch_trace().on || !PackStepper<T>::applies(k.model) || k.tape.every > 0 ||
      k.mocap.given() || nenv < PackStepper<T>::W)
    return false;
  constexpr int W = PackStepper<T>::W;
  launch_packs(*lanes, nenv, k, scratch, [&k](PackStepper<T>& s, int e0) {
    const ModelView<T>& m = k.model;
    const long n = k.nstep;
    unsigned bits[W];
    for (int i = 0; i < W; ++i) bits[i] = k.status[e0 + i];
    s.load(k.qpos, k.qvel, e0);
    for (long t = 0; t < n; ++t) {
      s.step(k.ctrl + (e0 * n + t) * m.nu, n * m.nu, nullptr, 0, bits);
      if (k.qpos_out) s.store_qpos(k.qpos_out + (e0 * n + t) * m.nq, n * m.nq);
      if (k.qvel_out) s.store_qvel(k.qvel_out + (e0 * n + t) * m.nv, n * m.nv);
      if (k.counts_out)  // no constraint rows: every count is zero
        for (int i = 0; i < W; ++i)
          for (int c = 0; c < kNumCounts; ++c)
            k.counts_out[((e0 + i) * n + t) * kNumCounts + c] = 0;
    }
    s.store_qpos(k.qpos + long(e0) * m.nq, m.nq);
    s.store_qvel(k.qvel + long(e0) * m.nv, m.nv);
    for (int i = 0; i < W; ++i) k.status[e0 + i] = bits[i];
  });
  return true;
}

// StepKernel on packs where they apply (no body forces); false where they do not
template <class T>
bool step_packs(const LaneModel<T>* lanes, int nenv, const StepKernel<T>& k, ScratchSize scratch) {
  if (!lanes || scratch_trace().on || !PackStepper<T>::applies(k.model) || k.xfrc_applied ||
      nenv < PackStepper<T>::W)
    return false;
  constexpr int W = PackStepper<T>::W;
  launch_packs(*lanes, nenv, k, scratch, [&k](PackStepper<T>& s, int e0) {
    const ModelView<T>& m = k.model;
    unsigned bits[W] = {};
    s.load(k.qpos, k.qvel, e0);
    const T* f = k.qfrc_applied ? k.qfrc_applied + long(e0) * m.nv : nullptr;
    for (int t = 0; t < k.nstep; ++t) s.step(k.ctrl + long(e0) * m.nu, m.nu, f, m.nv, bits);
    s.store_qpos(k.qpos + long(e0) * m.nq, m.nq);
    s.store_qvel(k.qvel + long(e0) * m.nv, m.nv);
    for (int i = 0; i < W; ++i) k.status[e0 + i] |= bits[i];
  });
  return true;
}

}  // namespace phx::cpu
