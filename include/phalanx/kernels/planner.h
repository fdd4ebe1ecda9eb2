// Planner kernels: trajectory costs and their gradients, the samples of a planning iteration
// (noise, controls, rollout, cost in one thread per sample), and the update stage's reductions,
// weights and refits (cost.h, planner.h).
#pragma once

#include "phalanx/cost.h"
#include "phalanx/kernels/forward.h"
#include "phalanx/planner.h"

namespace phx {

// The cost of each of nenv stored rollouts (trajectory_cost) and, when adj_qs is non-null, its
// gradients with respect to every state and control (adj_trajectory_cost). Scratch: a
// workspace, then an adjoint workspace (CostScratch).
template <class T>
struct CostScratch {
  Workspace<T> w;
  AdjWorkspace<T> a;

  template <class M, class Layout>
  PHX_HD static CostScratch carve(const M& m, Arena<T, Layout>& arena) {
    CostScratch x;
    x.w = Workspace<T>::carve(m, arena);
    x.a = AdjWorkspace<T>::carve(m, arena);
    return x;
  }
};

template <class T>
PHX_HD ScratchSize cost_scratch_size(const ModelView<T>& m) {
  return carved_size<CostScratch<T>, T>(m);
}

template <class T>
struct TrajectoryCostKernel {
  using Scalar = T;
  ModelView<T> model;
  CostView<T> cost;
  int nstep;
  const T* qs;    // (nenv x nstep x nq)
  const T* vs;    // (nenv x nstep x nv)
  const T* us;    // (nenv x nstep x nu)
  T* value;       // (nenv)
  T* adj_qs;      // (nenv x nstep x nq), may be null: no gradients
  T* adj_vs;      // (nenv x nstep x nv)
  T* adj_us;      // (nenv x nstep x nu)

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    const ModelView<T> m = env_view(model, e);
    Arena<T> arena(scratch);
    CostScratch<T> x = CostScratch<T>::carve(m, arena);
    long q0 = long(e) * nstep * m.nq, v0 = long(e) * nstep * m.nv, u0 = long(e) * nstep * m.nu;
    value[e] = trajectory_cost(m, cost, nstep, qs + q0, vs + v0, us + u0, x.w);
    if (!adj_qs) return;
    adj_trajectory_cost(m, cost, nstep, qs + q0, vs + v0, us + u0, x.w, x.a, adj_qs + q0,
                        adj_vs + v0, adj_us + u0);
  }
};

// One planning iteration's samples, one thread per sample: its noise, its controls clamp(u +
// eps), its rollout from the problem's state (contacts start cold) with each control row held
// for spec.hold steps, and its cost, accumulated step by step (running terms on the state
// after each step, terminal terms on the last), and optionally its trajectory (for costs
// evaluated elsewhere). A sample whose physics stops costs
// +inf and repeats its last state. Its scratch: rollout_scratch_size.
template <class T>
struct PlannerRolloutKernel {
  using Scalar = T;
  ModelView<T> model;
  CostView<T> cost;
  PlannerSpec spec;
  const T* qpos0;    // (nproblem x nq)
  const T* qvel0;    // (nproblem x nv)
  const T* plan;     // (nproblem x horizon x nu)
  const T* sigma;    // (nproblem x horizon x nu) noise scale per entry
  const T* lo;       // (nu) control range (lo >= hi: unlimited)
  const T* hi;       // (nu)
  T* qpos;           // (nsamples x nq) scratch state
  T* qvel;           // (nsamples x nv)
  T* eps;            // (nsamples x horizon x nu) perturbation applied
  T* ctrl;           // (nsamples x horizon x nu)
  T* value;          // (nsamples) cost
  unsigned* status;  // (nsamples)
  ContactData<T> con;
  T* qs_out;                // (nsamples x horizon * hold x nq) state after each step, may be null
  T* vs_out;                // (nsamples x horizon * hold x nv), may be null
  const T* act0 = nullptr;  // (nproblem x na) the problems' activations (null when na = 0)
  T* act = nullptr;         // (nsamples x na) scratch activations

  template <class Layout>
  PHX_HD void operator()(int sample, Scratch<T, Layout> scratch) const {
    steps(sample, scratch, 0, nstep(), DetectInStep{});
  }

  // Steps [t0, t1) of a sample's rollout, their contacts from detect (kernels/common.h: staged
  // launches). Between launches a sample's status and cost so far are in status and value.
  template <class Layout, class Detect>
  PHX_HD void steps(int sample, Scratch<T, Layout> scratch, int t0, int t1,
                    const Detect& detect) const {
    const ModelView<T> m = env_view(model, sample);
    ForwardScratch<T, Layout> x = step_scratch(m, scratch, true);
    if (t0 == 0) prepare(m, sample);
    T* const a_rows = env_row(act, sample, m.na);
    x.hold_state(m, qpos + long(sample) * m.nq, qvel + long(sample) * m.nv, a_rows);
    T* q = x.qpos;
    T* v = x.qvel;
    T* a = a_rows ? x.act : nullptr;
    ContactView<T> cv{};
    if (m.nefcmax > 0) cv = x.hold_contacts(m, con.env(m, sample));
    unsigned bits = t0 == 0 ? 0u : status[sample];
    T total = t0 == 0 ? T(0) : value[sample];
    const int steps = nstep();
    for (int t = t0; t < t1; ++t) {
      const T* u = controls(m, sample, t);
      if (!(bits & kStatusStopMask)) {
        bits |= step_env(m, q, v, a, u, x, cv, {}, static_cast<const T*>(nullptr), detect);
        if (cost.nterm)
          total += stage_cost(m, cost, q, v, u, T(1), t == steps - 1 ? T(1) : T(0), x.w);
      }
      if (qs_out)
        for (int i = 0; i < m.nq; ++i) qs_out[(long(sample) * steps + t) * m.nq + i] = q[i];
      if (vs_out)
        for (int i = 0; i < m.nv; ++i) vs_out[(long(sample) * steps + t) * m.nv + i] = v[i];
    }
    x.release_state(m, qpos + long(sample) * m.nq, qvel + long(sample) * m.nv, a_rows);
    if (m.nefcmax > 0) x.release_contacts(m, con.env(m, sample));
    if (t1 == steps) {
      finish(sample, bits, total);
    } else {
      status[sample] = bits;
      value[sample] = total;
    }
  }
  // the narrowphase stages of a sample's step t: at its problem's initial state for t = 0, which
  // the step's launch copies in (prepare)
  template <class Layout, class Found>
  PHX_HD void detect(int sample, Scratch<T, Layout> scratch, int t, const Found& found) const {
    if (t > 0 && (status[sample] & kStatusStopMask)) return;
    const ModelView<T> m = env_view(model, sample);
    const T* q = t == 0 ? qpos0 + long(sample / spec.nsample) * m.nq : qpos + long(sample) * m.nq;
    detect_env(m, scratch, q, found);
  }
  static constexpr bool kStaged = true;
  template <class Run>
  void staged(const StageMemory<T>& memory, Run&& run) const {
    stage_launches(*this, nstep(), memory, run);
  }

  // the steps of a sample's rollout
  PHX_HD int nstep() const { return spec.horizon * spec.hold; }
  // the controls of a sample's step t
  PHX_HD const T* controls(const ModelView<T>& m, int sample, int t) const {
    return ctrl + (long(sample) * spec.horizon + t / spec.hold) * m.nu;
  }
  // Before the steps: the sample's noise and controls, its initial state (qpos, qvel and act
  // rows) from its problem's, and a cold start of its contacts.
  PHX_HD void prepare(const ModelView<T>& m, int sample) const {
    int p = sample / spec.nsample, k = spec.number(sample), H = spec.horizon, nu = m.nu;
    long u0 = long(sample) * H * nu;
    const T* up = plan + long(p) * H * nu;
    const T* sd = sigma + long(p) * H * nu;
    planner_noise(spec.seed, spec.key(sample), spec.stream, H, nu, static_cast<const T*>(nullptr),
                  T(spec.beta), eps + u0);
    for (int j = 0; j < H * nu; ++j)
      eps[u0 + j] = spec.include_nominal && k == 0 ? T(0) : sd[j] * eps[u0 + j];
    planner_controls(H, nu, up, lo, hi, eps + u0, ctrl + u0);
    T* q = qpos + long(sample) * m.nq;
    T* v = qvel + long(sample) * m.nv;
    for (int i = 0; i < m.nq; ++i) q[i] = qpos0[long(p) * m.nq + i];
    for (int i = 0; i < m.nv; ++i) v[i] = qvel0[long(p) * m.nv + i];
    T* a = env_row(act, sample, m.na);
    for (int i = 0; i < m.na; ++i) a[i] = act0[long(p) * m.na + i];
    if (m.nefcmax > 0) *con.env(m, sample).nefc = 0;  // cold start
  }
  // After the steps: the sample's status bits and cost, +inf for a stopped sample
  PHX_HD void finish(int sample, unsigned bits, T total) const {
    status[sample] = bits;
    value[sample] = (bits & kStatusStopMask) || total != total ? T(INFINITY) : total;
  }
};

// The update stage of a planning iteration, over arrays of nproblem segments of nsample samples
// (host/planner.cpp sequences them): per-segment reductions and the K smallest costs (here one
// thread per segment, for the CPU; CUB's segmented reductions and sorts on CUDA), then
// per-sample weights and per-entry plan updates on the core's functions (planner.h).

// out[p] = the minimum (NaN if any entry is NaN) or the sum of in[p * len .. p * len + len)
template <class T>
struct SegmentReduceKernel {
  using Scalar = T;
  const T* in;
  T* out;
  int len;
  bool take_min;

  PHX_HD void operator()(int p, Scratch<T>) const {
    const T* x = in + long(p) * len;
    T r = x[0];
    if (take_min) {
      for (int k = 1; k < len && r == r; ++k) r = x[k] != x[k] ? x[k] : (x[k] < r ? x[k] : r);
    } else {
      for (int k = 1; k < len; ++k) r += x[k];
    }
    out[p] = r;
  }
};

// the indices of the n smallest of each segment's len costs, ascending, ties by index
// (smallest_indices), into the first n entries of row p of idx (rows of len)
template <class T>
struct SegmentSmallestKernel {
  using Scalar = T;
  const T* value;
  int len, n;
  int* idx;

  PHX_HD void operator()(int p, Scratch<T>) const {
    smallest_indices(value + long(p) * len, len, n, idx + long(p) * len);
  }
};

// MPPI: the unnormalised weight of each sample (one thread per sample)
template <class T>
struct MppiWeightKernel {
  using Scalar = T;
  const T* value;  // (nproblem x nsample)
  const T* cmin;   // (nproblem)
  T lambda;
  int nsample;
  T* weight;       // (nproblem x nsample)

  PHX_HD void operator()(int s, Scratch<T>) const {
    weight[s] = mppi_weight(value[s], cmin[s / nsample], lambda);
  }
};

// MPPI: weights divided by their problem's sum; ok[p] from the thread of sample 0
template <class T>
struct MppiNormalizeKernel {
  using Scalar = T;
  const T* cmin;  // (nproblem)
  const T* wsum;  // (nproblem)
  T lambda;
  int nsample;
  T* weight;      // (nproblem x nsample)
  int* ok;        // (nproblem)

  PHX_HD void operator()(int s, Scratch<T>) const {
    int p = s / nsample;
    bool good = mppi_weights_ok(cmin[p], lambda);
    if (good) weight[s] /= wsum[p];
    if (s % nsample == 0) ok[p] = good;
  }
};

// MPPI: entry j of problem p's plan (one thread per entry), where the problem has weights
template <class T>
struct MppiUpdateEntryKernel {
  using Scalar = T;
  int nsample, horizon, nu;
  const T* weight;  // (nproblem x nsample)
  const T* eps;     // (nproblem x nsample x horizon x nu)
  const int* ok;    // (nproblem)
  const T* lo;      // (nu)
  const T* hi;      // (nu)
  T* plan;          // (nproblem x horizon x nu)

  PHX_HD void operator()(int i, Scratch<T>) const {
    long n = long(horizon) * nu;
    int p = int(i / n), j = int(i % n);
    if (!ok[p]) return;
    plan[i] = mppi_update_entry(nsample, n, weight + long(p) * nsample,
                                eps + long(p) * nsample * n + j, plan[i], lo[j % nu], hi[j % nu]);
  }
};

// CEM: entry j of problem p's mean and std refit on its elites (one thread per entry)
template <class T>
struct CemRefitEntryKernel {
  using Scalar = T;
  int nsample, horizon, nu;
  const T* ctrl;     // (nproblem x nsample x horizon x nu)
  const int* elite;  // (nproblem x nsample): the first nelite of each row
  int nelite;
  T alpha, sigma_min;
  T* plan;           // (nproblem x horizon x nu)
  T* sigma;          // (nproblem x horizon x nu)

  PHX_HD void operator()(int i, Scratch<T>) const {
    long n = long(horizon) * nu;
    int p = int(i / n), j = int(i % n);
    cem_refit_entry(n, ctrl + long(p) * nsample * n + j, elite + long(p) * nsample, nelite, alpha,
                    sigma_min, plan[i], sigma[i]);
  }
};

#define PHX_PLANNER_KERNELS(X)                                          \
  X(TrajectoryCostKernel<float>) X(TrajectoryCostKernel<double>)        \
  X(PlannerRolloutKernel<float>) X(PlannerRolloutKernel<double>)        \
  X(SegmentReduceKernel<float>) X(SegmentReduceKernel<double>)          \
  X(SegmentSmallestKernel<float>) X(SegmentSmallestKernel<double>)      \
  X(MppiWeightKernel<float>) X(MppiWeightKernel<double>)                \
  X(MppiNormalizeKernel<float>) X(MppiNormalizeKernel<double>)          \
  X(MppiUpdateEntryKernel<float>) X(MppiUpdateEntryKernel<double>)      \
  X(CemRefitEntryKernel<float>) X(CemRefitEntryKernel<double>)

}  // namespace phx
