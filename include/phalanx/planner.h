// The per-problem arithmetic of the sampling planners, MPPI (Williams et al., "Information
// theoretic MPC for model-based reinforcement learning", ICRA 2017) and the cross-entropy
// method (CEM): drawing the control samples of one planning problem from counter-based noise,
// turning their costs into weights or elites, and updating the plan. A planning problem has a
// nominal plan u (H x nu) and K samples; sample k is the plan u + eps_k clamped to the control
// range. Rollouts of the samples are ordinary environments (kernels.h); these functions run
// one thread per sample (sampling) or per problem (weights, elites, updates).
#pragma once

#include "phalanx/math/scalar.h"
#include "phalanx/random.h"

namespace phx {

// What a planning iteration's sampling stage needs to know: nproblem problems of nsample
// samples, plans of horizon rows, each row held for hold physics steps (a sample's rollout is
// horizon * hold steps long); the noise of sample s = p * nsample + k is keyed (seed, s,
// stream) (planner_noise), filtered by beta and scaled per entry by the problem's std.
// A batch may hold a slice of a larger sampling: its samples are then numbers first_sample ..
// first_sample + nsample - 1 of nsample_total per problem, keyed and treated as those (a
// planner whose samples are spread over several processes draws the same noise as one).
struct PlannerSpec {
  int nproblem = 1;
  int nsample = 1;
  int horizon = 1;
  uint64_t seed = 0;
  uint32_t stream = 0;
  double beta = 0;
  bool include_nominal = true;  // sample 0 of each problem is the plan itself
  int hold = 1;                 // physics steps per plan row (the control interval)
  int first_sample = 0;         // the number of this batch's first sample in its problem
  int nsample_total = 0;        // samples per problem in the whole sampling; 0: nsample

  // the number k of local sample `sample` in its problem, and its noise key p * total + k
  PHX_HD int number(int sample) const { return first_sample + sample % nsample; }
  PHX_HD uint32_t key(int sample) const {
    int total = nsample_total > 0 ? nsample_total : nsample;
    return uint32_t(sample / nsample) * uint32_t(total) + uint32_t(number(sample));
  }
};

// Noise of one sample, eps (H x nu): per actuator sigma_i, time-correlated by a first-order
// filter that keeps the marginal variance sigma_i^2,
//   eps_0 = sigma n_0,   eps_t = beta eps_{t-1} + sqrt(1 - beta^2) sigma n_t,
// with n standard normals (random.h) addressed by env = sample and, four steps sharing one
// generator block, step = floor(t / 4) and dim = 4 i + t mod 4 (stream as given): the same on
// every device and for every launch order. beta = 0 is white noise; sigma null is unit noise.
// The normals are drawn in float for either T: sampling needs no more precision, a float draw
// costs half a double's, and float and double planners see the same noise.
template <class T>
PHX_HD void planner_noise(uint64_t seed, uint32_t sample, uint32_t stream, int H, int nu,
                          const T* sigma, T beta, T* eps) {
  T gain = sqrt(T(1) - beta * beta);
  for (int t0 = 0; t0 < H; t0 += 4)
    for (int i = 0; i < nu; ++i) {
      float n[4];
      standard_normal4(seed, sample, uint32_t(t0 / 4), uint32_t(i), stream, n);
      T s = sigma ? sigma[i] : T(1);
      for (int k = 0; k < 4 && t0 + k < H; ++k) {
        int t = t0 + k;
        T sn = s * T(n[k]);
        eps[t * nu + i] = t == 0 ? sn : beta * eps[(t - 1) * nu + i] + gain * sn;
      }
    }
}

// the controls of a sample, clamp(u + eps) per actuator range (lo, hi; lo >= hi: unlimited);
// eps is overwritten with the perturbation actually applied (ctrl - u), which the update uses
template <class T>
PHX_HD void planner_controls(int H, int nu, const T* u, const T* lo, const T* hi, T* eps,
                             T* ctrl) {
  for (int t = 0; t < H; ++t)
    for (int i = 0; i < nu; ++i) {
      int j = t * nu + i;
      T c = u[j] + eps[j];
      if (lo[i] < hi[i]) c = clamp(c, lo[i], hi[i]);
      ctrl[j] = c;
      eps[j] = c - u[j];
    }
}

// MPPI's unnormalised weight of a sample of cost c in a problem whose lowest cost is cmin:
// exp(-(c - cmin) / lambda), 0 for an infinite cost
template <class T>
PHX_HD T mppi_weight(T c, T cmin, T lambda) {
  return isfinite(c) ? exp(-(c - cmin) / lambda) : T(0);
}

// whether a problem's weights exist: lambda positive and finite, some finite cost (cmin)
template <class T>
PHX_HD bool mppi_weights_ok(T cmin, T lambda) {
  return lambda > T(0) && isfinite(lambda) && isfinite(cmin);
}

// MPPI's weights of K costs: w_k = exp(-(c_k - c_min) / lambda) / sum_j exp(-(c_j - c_min) /
// lambda). Subtracting the minimum keeps every exponent <= 0 and the best sample's term 1, so
// no cost range overflows or leaves the sum 0; +inf costs get weight 0. Returns false, with w
// untouched, when a cost is NaN, no cost is finite or lambda is not positive and finite.
template <class T>
PHX_HD bool mppi_weights(const T* cost, int K, T lambda, T* w) {
  if (K <= 0) return false;
  T cmin = cost[0];
  for (int k = 0; k < K; ++k) {
    if (cost[k] != cost[k]) return false;  // NaN
    if (cost[k] < cmin) cmin = cost[k];
  }
  if (!mppi_weights_ok(cmin, lambda)) return false;
  T sum(0);
  for (int k = 0; k < K; ++k) {
    w[k] = mppi_weight(cost[k], cmin, lambda);
    sum += w[k];
  }
  for (int k = 0; k < K; ++k) w[k] /= sum;
  return true;
}

// entry j of MPPI's update of a plan: u_j + sum_k w_k eps_kj (eps_j: the samples' entry j, K
// of them stride apart), clamped to [lo, hi] (lo >= hi: unlimited)
template <class T>
PHX_HD T mppi_update_entry(int K, long stride, const T* w, const T* eps_j, T u, T lo, T hi) {
  T du(0);
  for (int k = 0; k < K; ++k) du += w[k] * eps_j[long(k) * stride];
  u += du;
  return lo < hi ? clamp(u, lo, hi) : u;
}

// MPPI's update of the plan: u += sum_k w_k eps_k (eps: K x (H x nu)), then clamped
template <class T>
PHX_HD void mppi_update(int K, int H, int nu, const T* w, const T* eps, const T* lo, const T* hi,
                        T* u) {
  for (int j = 0; j < H * nu; ++j)
    u[j] = mppi_update_entry(K, long(H) * nu, w, eps + j, u[j], lo[j % nu], hi[j % nu]);
}

// The indices of the n lowest of K costs in increasing order of cost, ties by index (so the
// result equals a stable argsort's first n); NaN costs rank last. Insertion into a sorted
// prefix, O(K n): deterministic and without scratch beyond idx (n entries).
template <class T>
PHX_HD void smallest_indices(const T* cost, int K, int n, int* idx) {
  auto less = [cost](int a, int b) {
    T ca = cost[a], cb = cost[b];
    bool na = ca != ca, nb = cb != cb;
    if (na || nb) return !na && nb ? true : (na == nb && a < b);
    return ca < cb || (ca == cb && a < b);
  };
  int m = 0;
  for (int k = 0; k < K; ++k) {
    if (m == n && !less(k, idx[n - 1])) continue;
    int p = m < n ? m++ : n - 1;
    while (p > 0 && less(k, idx[p - 1])) {
      idx[p] = idx[p - 1];
      --p;
    }
    idx[p] = k;
  }
}

// CEM's refit on the elites (indices of the n best samples, controls ctrl: K x (H x nu)):
// mean and standard deviation of the elite controls per entry, blended with the previous ones,
//   u = alpha u + (1 - alpha) mean,   sigma = alpha sigma + (1 - alpha) std,
// sigma floored at sigma_min so that sampling never collapses entirely. cem_refit_entry does
// entry j (ctrl_j: the samples' entry j, stride apart).
template <class T>
PHX_HD void cem_refit_entry(long stride, const T* ctrl_j, const int* elite, int n, T alpha,
                            T sigma_min, T& u, T& sigma) {
  T mean(0), var(0);
  for (int e = 0; e < n; ++e) mean += ctrl_j[long(elite[e]) * stride];
  mean /= T(n);
  for (int e = 0; e < n; ++e) {
    T d = ctrl_j[long(elite[e]) * stride] - mean;
    var += d * d;
  }
  T sd = sqrt(var / T(n));
  u = alpha * u + (T(1) - alpha) * mean;
  T s = alpha * sigma + (T(1) - alpha) * sd;
  sigma = s > sigma_min ? s : sigma_min;
}

template <class T>
PHX_HD void cem_refit(int H, int nu, const T* ctrl, const int* elite, int n, T alpha, T sigma_min,
                      T* u, T* sigma) {
  for (int j = 0; j < H * nu; ++j)
    cem_refit_entry(long(H) * nu, ctrl + j, elite, n, alpha, sigma_min, u[j], sigma[j]);
}

// the warm start of the next planning step: the plan shifted one step earlier, its last step
// repeated
template <class T>
PHX_HD void plan_shift(int H, int nu, T* u) {
  for (int t = 0; t + 1 < H; ++t)
    for (int i = 0; i < nu; ++i) u[t * nu + i] = u[(t + 1) * nu + i];
}

}  // namespace phx
