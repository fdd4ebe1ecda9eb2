#include "host/api.h"

#include <stdexcept>
#include <string>

#include "host/view_builder.h"
#include "phalanx/kernels.h"

namespace phx {

template <class T>
DeviceModel<T>::DeviceModel(const Model& model, Device device) : model_(model), device_(device) {
  require_device(device);
  model_.validate();
  model_.check_collision_support();
  // copy one array to the device and return its pointer
  auto real = [&](const std::vector<double>& v) -> const T* {
    std::vector<T> cast(v.begin(), v.end());
    reals_.emplace_back(device_, cast);
    return reals_.back().data();
  };
  auto integer = [&](const std::vector<int>& v) -> const int* {
    ints_.emplace_back(device_, v);
    return ints_.back().data();
  };

  view_ = build_view<T>(model_, real, integer);
}

template <class T>
ScratchSize DeviceModel<T>::scratch_size() const {
  return phx::scratch_size(view_);
}

template <class T>
size_t DeviceModel<T>::bytes() const {
  size_t n = 0;
  for (const auto& b : reals_) n += b.bytes();
  for (const auto& b : ints_) n += b.bytes();
  return n;
}

template <class T>
Data<T>::Data(const DeviceModel<T>& model, int nenv)
    : time(nenv > 0 ? size_t(nenv) : 0, 0.0), nenv_(nenv), scratch_(model.scratch_size()) {
  if (nenv <= 0) {
    throw std::invalid_argument("phalanx: nenv must be positive, got " + std::to_string(nenv));
  }
  const Model& m = model.model();
  Device dev = model.device();
  qpos = Buffer<T>(dev, size_t(nenv) * m.nq);
  qvel = Buffer<T>(dev, size_t(nenv) * m.nv);
  ctrl = Buffer<T>(dev, size_t(nenv) * m.nu);
  status = Buffer<unsigned>(dev, size_t(nenv));
  const ModelView<T>& v = model.view();
  size_t con = size_t(nenv) * v.nconmax, rows = size_t(nenv) * v.nefcmax;
  ncon = Buffer<int>(dev, size_t(nenv));
  contact_overflow = Buffer<int>(dev, size_t(nenv));
  contact_pos = Buffer<T>(dev, 3 * con);
  contact_frame = Buffer<T>(dev, 9 * con);
  contact_dist = Buffer<T>(dev, con);
  contact_geom = Buffer<int>(dev, 2 * con);
  nefc = Buffer<int>(dev, size_t(nenv));
  nwarm = Buffer<int>(dev, size_t(nenv));
  set_hit = Buffer<int>(dev, size_t(nenv));
  efc_class = Buffer<int>(dev, rows);
  efc_force = Buffer<T>(dev, rows);
  efc_key = Buffer<int>(dev, rows);
  std::vector<T> q0(size_t(nenv) * m.nq);
  for (int e = 0; e < nenv; ++e)
    for (int i = 0; i < m.nq; ++i) q0[size_t(e) * m.nq + i] = T(m.qpos0[i]);
  qpos.upload(q0.data(), q0.size());
}

template <class T>
size_t Data<T>::bytes_per_env() const {
  size_t state = (qpos.size() + qvel.size() + ctrl.size()) * sizeof(T) + sizeof(unsigned) +
                 contact_pos.bytes() + contact_frame.bytes() + contact_dist.bytes() +
                 contact_geom.bytes() + efc_force.bytes() + efc_key.bytes() + ncon.bytes() +
                 contact_overflow.bytes() + nefc.bytes() + nwarm.bytes() + set_hit.bytes() +
                 efc_class.bytes();
  return state / size_t(nenv_) + size_t(scratch_.reals) * sizeof(T) +
         size_t(scratch_.ints) * sizeof(int);
}

namespace {
void check_nenv(int nenv) {
  if (nenv < 0) throw std::invalid_argument("phalanx: nenv must be >= 0");
}
}  // namespace

template <class T>
void step(const DeviceModel<T>& model, Data<T>& data, int nstep) {
  if (nstep < 0) throw std::invalid_argument("phalanx: nstep must be >= 0");
  StepKernel<T> k{model.view(), data.qpos.data(), data.qvel.data(), data.ctrl.data(),
                  data.status.data(), nstep, data.contacts()};
  launch(model.device(), data.nenv(), k, model.scratch_size());
  for (double& t : data.time) t += nstep * model.model().opt.timestep;
}

template <class T>
void rollout(const DeviceModel<T>& model, Data<T>& data, const T* d_ctrl, int nstep,
             T* d_qpos_out, T* d_qvel_out, int* d_counts_out) {
  if (nstep < 0) throw std::invalid_argument("phalanx: nstep must be >= 0");
  RolloutKernel<T> k{model.view(), data.qpos.data(), data.qvel.data(), d_ctrl, d_qpos_out,
                     d_qvel_out, data.status.data(), nstep, data.contacts(), d_counts_out};
  launch(model.device(), data.nenv(), k, model.scratch_size());
  for (double& t : data.time) t += nstep * model.model().opt.timestep;
}

template <class T>
void mass_matrix(const DeviceModel<T>& model, int nenv, const T* d_qpos, T* d_M) {
  check_nenv(nenv);
  launch(model.device(), nenv, MassMatrixKernel<T>{model.view(), d_qpos, d_M},
         model.scratch_size());
}

template <class T>
void bias_forces(const DeviceModel<T>& model, int nenv, const T* d_qpos, const T* d_qvel,
                 T* d_bias) {
  check_nenv(nenv);
  launch(model.device(), nenv, BiasKernel<T>{model.view(), d_qpos, d_qvel, d_bias},
         model.scratch_size());
}

template <class T>
void forward_dynamics(const DeviceModel<T>& model, int nenv, const T* d_qpos, const T* d_qvel,
                      const T* d_ctrl, T* d_qacc) {
  check_nenv(nenv);
  launch(model.device(), nenv,
         ForwardDynamicsKernel<T>{model.view(), d_qpos, d_qvel, d_ctrl, d_qacc},
         model.scratch_size());
}

template <class T>
void inverse_dynamics(const DeviceModel<T>& model, int nenv, const T* d_qpos, const T* d_qvel,
                      const T* d_qacc, T* d_tau) {
  check_nenv(nenv);
  launch(model.device(), nenv,
         InverseDynamicsKernel<T>{model.view(), d_qpos, d_qvel, d_qacc, d_tau},
         model.scratch_size());
}

template <class T>
void step_vjp(const DeviceModel<T>& model, int nenv, const T* d_qpos, const T* d_qvel,
              const T* d_ctrl, const T* d_adj_qpos_next, const T* d_adj_qvel_next, T* d_adj_qpos,
              T* d_adj_qvel, T* d_adj_ctrl, const ModelAdjoint<T>& d_adj_model,
              const ContactModelAdjoint<T>& d_adj_contact, int contact_gradient) {
  check_nenv(nenv);
  constexpr int kAllGradFlags = kGradComplementarityAware | kGradBounceCorrection;
  if (contact_gradient < -1 || (contact_gradient > 0 && (contact_gradient & ~kAllGradFlags)))
    throw std::invalid_argument("phalanx: contact_gradient has unknown flags: " +
                                std::to_string(contact_gradient));
  if (nenv == 0) return;
  Data<T> replay(model, nenv);  // cold-start contact storage of the replayed step
  ModelView<T> view = model.view();
  if (contact_gradient >= 0) view.contact_gradient = contact_gradient;
  StepAdjointKernel<T> k{view,     d_qpos,        d_qvel,          d_ctrl,
                         d_adj_qpos_next,  d_adj_qvel_next, d_adj_qpos,    d_adj_qvel,
                         d_adj_ctrl,       d_adj_model,   d_adj_contact,   replay.contacts()};
  launch(model.device(), nenv, k, adjoint_scratch_size(view));
}

#define PHX_INSTANTIATE_API(T)                                                            \
  template class DeviceModel<T>;                                                          \
  template class Data<T>;                                                                 \
  template void step<T>(const DeviceModel<T>&, Data<T>&, int);                            \
  template void rollout<T>(const DeviceModel<T>&, Data<T>&, const T*, int, T*, T*, int*);     \
  template void mass_matrix<T>(const DeviceModel<T>&, int, const T*, T*);                 \
  template void bias_forces<T>(const DeviceModel<T>&, int, const T*, const T*, T*);       \
  template void forward_dynamics<T>(const DeviceModel<T>&, int, const T*, const T*,       \
                                    const T*, T*);                                        \
  template void inverse_dynamics<T>(const DeviceModel<T>&, int, const T*, const T*,       \
                                    const T*, T*);                                        \
  template void step_vjp<T>(const DeviceModel<T>&, int, const T*, const T*, const T*,     \
                            const T*, const T*, T*, T*, T*, const ModelAdjoint<T>&,       \
                            const ContactModelAdjoint<T>&, int);
PHX_INSTANTIATE_API(float)
PHX_INSTANTIATE_API(double)
#undef PHX_INSTANTIATE_API

}  // namespace phx
