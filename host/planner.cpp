// Costs of stored rollouts and the stages of the sampling planners on a device: checks, buffers
// and launches around the kernels of include/phalanx/kernels/planner.h.
#include <cmath>
#include <stdexcept>
#include <string>

#include "host/api.h"
#include "host/cuda_backend.h"
#include "host/pack_kernels.h"
#include "phalanx/kernels.h"

namespace phx {

namespace {

// throws std::invalid_argument unless term i's kind, index and axis fit the model
void check_term(const Model& m, int i, const int* t) {
  auto fail = [i](const std::string& why) {
    throw std::invalid_argument("phalanx: cost term " + std::to_string(i) + ": " + why);
  };
  int kind = t[kCostTermKind], index = t[kCostTermIndex], axis = t[kCostTermAxis];
  if (kind < 0 || kind >= kNumCostKinds) fail("unknown kind " + std::to_string(kind));
  int limit = 0;
  switch (kind) {
    case kCostQpos: case kCostAngle: limit = m.nq; break;
    case kCostQvel: limit = m.nv; break;
    case kCostCtrl: limit = m.nu; break;
    case kCostBodyPos: case kCostBodyUp: limit = m.nbody; break;
    default: limit = 1; break;  // centre of mass: index unused
  }
  if (index < 0 || index >= limit)
    fail(std::string(kCostKindNames[kind]) + " index " + std::to_string(index) +
         " out of range [0, " + std::to_string(limit) + ")");
  if (kind >= kCostBodyPos && (axis < 0 || axis > 2))
    fail(std::string(kCostKindNames[kind]) + " axis " + std::to_string(axis) +
         " out of range [0, 3)");
  if (kind >= kCostComPos) {
    double total = 0;
    for (int b = 1; b < m.nbody; ++b) total += m.body_mass[b];
    if (!(total > 0)) fail("a centre-of-mass term needs a model with mass");
  }
}

}  // namespace

template <class T>
DeviceCost<T>::DeviceCost(const DeviceModel<T>& model, const std::vector<int>& ints,
                          const std::vector<double>& reals) {
  if (ints.size() % kCostTermInts || reals.size() != ints.size() / kCostTermInts * kCostTermReals)
    throw std::invalid_argument("phalanx: cost terms need " + std::to_string(kCostTermInts) +
                                " integers and " + std::to_string(kCostTermReals) +
                                " reals each");
  nterm_ = int(ints.size() / kCostTermInts);
  for (int i = 0; i < nterm_; ++i) {
    check_term(model.model(), i, ints.data() + i * kCostTermInts);
    for (int k = 0; k < kCostTermReals; ++k)
      if (!std::isfinite(reals[size_t(i) * kCostTermReals + k]))
        throw std::invalid_argument("phalanx: cost term " + std::to_string(i) +
                                    ": target and weights must be finite");
  }
  ints_ = Buffer<int>(model.device(), ints);
  reals_ = Buffer<T>(model.device(), std::vector<T>(reals.begin(), reals.end()));
}

template <class T>
void trajectory_cost(const DeviceModel<T>& model, const DeviceCost<T>& cost, int nenv, int nstep,
                     const T* d_qs, const T* d_vs, const T* d_us, T* d_value, T* d_adj_qs,
                     T* d_adj_vs, T* d_adj_us) {
  if (nenv < 0 || nstep < 1)
    throw std::invalid_argument("phalanx: a trajectory cost needs nenv >= 0 and nstep >= 1");
  if ((d_adj_qs == nullptr) != (d_adj_vs == nullptr) ||
      (d_adj_qs == nullptr) != (d_adj_us == nullptr))
    throw std::invalid_argument("phalanx: the cost gradients come as all three arrays or none");
  TrajectoryCostKernel<T> k{model.view(), cost.view(), nstep,    d_qs,    d_vs,
                            d_us,         d_value,     d_adj_qs, d_adj_vs, d_adj_us};
  launch(model.device(), nenv, k, cost_scratch_size(model.view()));
}

template <class T>
PlannerBatch<T>::PlannerBatch(const DeviceModel<T>& model, int nproblem, int nsample, int horizon,
                              int hold)
    : model_(&model),
      nproblem_(nproblem),
      nsample_(nsample),
      horizon_(horizon),
      hold_(hold),
      samples_(model, nproblem > 0 && nsample > 0 ? nproblem * nsample : 0) {
  if (nproblem < 1 || nsample < 1 || horizon < 1 || hold < 1)
    throw std::invalid_argument(
        "phalanx: a planner needs at least one problem, sample, plan row and step per row");
  if (long(horizon) * hold > (1L << 31) - 1)
    throw std::invalid_argument("phalanx: the planner's horizon * hold is too long");
  if (long(nproblem) * nsample > (1L << 31) - 1)
    throw std::invalid_argument("phalanx: too many planner samples");
  Device dev = model.device();
  size_t M = size_t(nproblem) * nsample, n = M * size_t(horizon) * model.view().nu;
  eps = Buffer<T>(dev, n);
  ctrl = Buffer<T>(dev, n);
  value = Buffer<T>(dev, M);
  status = Buffer<unsigned>(dev, M);
  weight = Buffer<T>(dev, M);
  elite = Buffer<int>(dev, M);
  ok = Buffer<int>(dev, size_t(nproblem));
  cmin_ = Buffer<T>(dev, size_t(nproblem));
  wsum_ = Buffer<T>(dev, size_t(nproblem));
  if (dev == Device::kCuda) {
    std::vector<int> offsets(size_t(nproblem) + 1), index(M);
    for (int p = 0; p <= nproblem; ++p) offsets[size_t(p)] = p * nsample;
    for (size_t s = 0; s < M; ++s) index[s] = int(s % size_t(nsample));
    offsets_ = Buffer<int>(dev, offsets);
    index_ = Buffer<int>(dev, index);
    sorted_ = Buffer<T>(dev, M);
  }
}

template <class T>
void PlannerBatch<T>::reduce(const T* d_in, T* d_out, bool take_min) {
  if (model_->device() == Device::kCuda) {
    cuda::segmented_reduce(d_in, d_out, nproblem_, offsets_.data(), take_min);
  } else {
    launch(Device::kCpu, nproblem_, SegmentReduceKernel<T>{d_in, d_out, nsample_, take_min},
           ScratchSize{});
  }
}

template <class T>
void PlannerBatch<T>::smallest(int n) {
  if (model_->device() == Device::kCuda) {
    cuda::segmented_argsort(value.data(), nproblem_, nsample_, offsets_.data(), index_.data(),
                            sorted_.data(), elite.data());
  } else {
    launch(Device::kCpu, nproblem_, SegmentSmallestKernel<T>{value.data(), nsample_, n,
                                                             elite.data()},
           ScratchSize{});
  }
}

template <class T>
void PlannerBatch<T>::rollouts(const DeviceCost<T>& cost, const PlannerSpec& spec, const T* d_qpos0,
                               const T* d_qvel0, const T* d_plan, const T* d_sigma, const T* d_lo,
                               const T* d_hi, bool record, const T* d_act0) {
  if (spec.nproblem != nproblem_ || spec.nsample != nsample_ || spec.horizon != horizon_ ||
      spec.hold != hold_)
    throw std::invalid_argument("phalanx: the planner spec's sizes differ from the batch's");
  if (!(spec.beta >= 0 && spec.beta < 1))
    throw std::invalid_argument("phalanx: the noise smoothing must be in [0, 1)");
  const long total = spec.nsample_total > 0 ? spec.nsample_total : spec.nsample;
  if (spec.nsample_total < 0 || spec.first_sample < 0 || spec.first_sample + spec.nsample > total)
    throw std::invalid_argument(
        "phalanx: the batch's samples " + std::to_string(spec.first_sample) + ".." +
        std::to_string(spec.first_sample + spec.nsample - 1) + " are not within the " +
        std::to_string(total) + " samples of each problem");
  if (total * spec.nproblem > (1L << 32))
    throw std::invalid_argument("phalanx: more than 2^32 samples in one planning iteration");
  const ModelView<T>& m = model_->view();
  if (m.na > 0 && !d_act0)
    throw std::invalid_argument("phalanx: the model has actuator activations (na = " +
                                std::to_string(m.na) + "); the planner needs the problems' act");
  size_t steps = size_t(nproblem_) * nsample_ * horizon_ * hold_;
  if (record && qs.size() != steps * m.nq) {
    qs = Buffer<T>::uninitialized(model_->device(), steps * m.nq);
    vs = Buffer<T>::uninitialized(model_->device(), steps * m.nv);
  }
  PlannerRolloutKernel<T> k{m,
                            cost.view(),
                            spec,
                            d_qpos0,
                            d_qvel0,
                            d_plan,
                            d_sigma,
                            d_lo,
                            d_hi,
                            samples_.qpos.data(),
                            samples_.qvel.data(),
                            eps.data(),
                            ctrl.data(),
                            value.data(),
                            status.data(),
                            samples_.contacts(),
                            record ? qs.data() : nullptr,
                            record ? vs.data() : nullptr,
                            d_act0,
                            samples_.act.data()};
  const ScratchSize scratch = model_->rollout_scratch_size();
  if (!cpu::planner_packs(model_->lane_model(), nproblem_ * nsample_, k, scratch))
    launch(model_->device(), nproblem_ * nsample_, k, scratch);
}

template <class T>
void PlannerBatch<T>::update_mppi(T lambda, T* d_plan, const T* d_lo, const T* d_hi) {
  if (!(lambda > T(0)) || !std::isfinite(double(lambda)))
    throw std::invalid_argument("phalanx: MPPI's temperature must be positive and finite");
  Device dev = model_->device();
  int M = nproblem_ * nsample_, nu = model_->view().nu;
  reduce(value.data(), cmin_.data(), true);
  launch(dev, M, MppiWeightKernel<T>{value.data(), cmin_.data(), lambda, nsample_, weight.data()},
         ScratchSize{});
  reduce(weight.data(), wsum_.data(), false);
  launch(dev, M,
         MppiNormalizeKernel<T>{cmin_.data(), wsum_.data(), lambda, nsample_, weight.data(),
                                ok.data()},
         ScratchSize{});
  launch(dev, nproblem_ * horizon_ * nu,
         MppiUpdateEntryKernel<T>{nsample_, horizon_, nu, weight.data(), eps.data(), ok.data(),
                                  d_lo, d_hi, d_plan},
         ScratchSize{});
}

template <class T>
void PlannerBatch<T>::update_cem(int nelite, T alpha, T sigma_min, T* d_plan, T* d_sigma) {
  if (nelite < 1 || nelite > nsample_)
    throw std::invalid_argument("phalanx: the number of elites must be in [1, " +
                                std::to_string(nsample_) + "]");
  if (!(alpha >= T(0) && alpha < T(1)) || !(sigma_min >= T(0)))
    throw std::invalid_argument("phalanx: CEM needs smoothing in [0, 1) and sigma_min >= 0");
  smallest(nelite);
  int nu = model_->view().nu;
  launch(model_->device(), nproblem_ * horizon_ * nu,
         CemRefitEntryKernel<T>{nsample_, horizon_, nu, ctrl.data(), elite.data(), nelite, alpha,
                                sigma_min, d_plan, d_sigma},
         ScratchSize{});
}

#define PHX_INSTANTIATE_PLANNER(T)                                                           \
  template class DeviceCost<T>;                                                              \
  template class PlannerBatch<T>;                                                            \
  template void trajectory_cost<T>(const DeviceModel<T>&, const DeviceCost<T>&, int, int,    \
                                   const T*, const T*, const T*, T*, T*, T*, T*);
PHX_INSTANTIATE_PLANNER(float)
PHX_INSTANTIATE_PLANNER(double)
#undef PHX_INSTANTIATE_PLANNER

}  // namespace phx
