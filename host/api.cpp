#include "host/api.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "host/cpu_backend.h"
#include "host/lane_adjoint.h"
#include "host/pack_adjoint.h"
#include "host/view_builder.h"
#include "phalanx/kernels.h"

namespace phx {

template <class T>
DeviceModel<T>::DeviceModel(const Model& model, Device device) : model_(model), device_(device) {
  require_device(device);
  model_.validate();
  if (device == Device::kCuda && model_.opt.solver == kSolverXpbd && !kCudaXpbd)
    throw std::invalid_argument(
        "Model.solver: the XPBD solver runs on the CPU backend; this build's CUDA kernels do not "
        "carry it (build with -DPHX_CUDA_XPBD=ON), use device=\"cpu\" or the default solver");
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
  // per-environment fields: the copies replace the shared field
  for (int k = 0; k < kNumBatched; ++k) {
    view_.param_nbatch[k] = model_.param_nbatch(k);
    if (view_.param_nbatch[k] > 1) param_field(view_, k) = real(model_.param_batch[k]);
  }
  if (device == Device::kCpu) lane_model_ = std::make_shared<const LaneModel<T>>(view_);
}

template <class T>
ScratchSize DeviceModel<T>::scratch_size() const {
  return phx::scratch_size(view_);
}

template <class T>
ScratchSize DeviceModel<T>::rollout_scratch_size() const {
  return phx::rollout_scratch_size(view_);
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
    : time(nenv > 0 ? size_t(nenv) : 0, 0.0), nenv_(nenv), scratch_(model.rollout_scratch_size()) {
  if (nenv <= 0) {
    throw std::invalid_argument("phalanx: nenv must be positive, got " + std::to_string(nenv));
  }
  const ModelView<T>& m = model.view();
  Device dev = model.device();
#define PHX_ALLOCATE(kind, name, size, comment) name = Buffer<kind>(dev, size_t(nenv) * (size));
  PHX_STATE_ARRAYS(PHX_ALLOCATE)
  ContactBuffers<T>& c = contact;
#define PHX_ALLOCATE_CONTACT(kind, name, size, comment) \
  c.name = Buffer<kind>(dev, size_t(nenv) * (size));
  PHX_CONTACT_ARRAYS(PHX_ALLOCATE_CONTACT)
#undef PHX_ALLOCATE_CONTACT
#undef PHX_ALLOCATE
  const std::vector<double>& qpos0 = model.model().qpos0;  // the view's is on the device
  std::vector<T> q0(size_t(nenv) * m.nq);
  for (int e = 0; e < nenv; ++e)
    for (int i = 0; i < m.nq; ++i) q0[size_t(e) * m.nq + i] = T(qpos0[i]);
  qpos.upload(q0.data(), q0.size());
}

template <class T>
ContactData<T> Data<T>::contacts() {
  ContactData<T> d;
#define PHX_CONTACT_POINTER(kind, name, size, comment) d.name = contact.name.data();
  PHX_CONTACT_ARRAYS(PHX_CONTACT_POINTER)
#undef PHX_CONTACT_POINTER
  return d;
}

template <class T>
size_t Data<T>::bytes_per_env() const {
  size_t bytes = 0;
#define PHX_BYTES(kind, name, size, comment) bytes += name.bytes();
  PHX_STATE_ARRAYS(PHX_BYTES)
  const ContactBuffers<T>& c = contact;
#define PHX_CONTACT_BYTES(kind, name, size, comment) bytes += c.name.bytes();
  PHX_CONTACT_ARRAYS(PHX_CONTACT_BYTES)
#undef PHX_CONTACT_BYTES
#undef PHX_BYTES
  return bytes / size_t(nenv_) + size_t(scratch_.reals) * sizeof(T) +
         size_t(scratch_.ints) * sizeof(int);
}

namespace {
void check_nenv(int nenv) {
  if (nenv < 0) throw std::invalid_argument("phalanx: nenv must be >= 0");
}
// a call on the state of a model with activation state must be given the activations
template <class T>
void check_act(const DeviceModel<T>& model, const T* d_act, const char* call) {
  if (model.view().na > 0 && !d_act)
    throw std::invalid_argument(std::string("phalanx: ") + call +
                                ": the model has actuator activations (na = " +
                                std::to_string(model.view().na) + "); pass them");
}
}  // namespace

template <class T>
void step(const DeviceModel<T>& model, Data<T>& data, int nstep, const T* d_qfrc_applied,
          const T* d_xfrc_applied) {
  if (nstep < 0) throw std::invalid_argument("phalanx: nstep must be >= 0");
  // each step's generalized force of qfrc and xfrc together
  Buffer<T> total(model.device(), d_xfrc_applied ? size_t(data.nenv()) * model.model().nv : 0);
  StepKernel<T> k{model.view(),    data.qpos.data(), data.qvel.data(),
                  data.act.data(), data.ctrl.data(), data.status.data(),
                  nstep,           data.contacts(),  d_qfrc_applied,
                  d_xfrc_applied,  total.data()};
  if (!cpu::step_packs(model.lane_model(), data.nenv(), k, model.scratch_size()))
    launch(model.device(), data.nenv(), k, model.scratch_size());
  for (double& t : data.time) t += nstep * model.model().opt.timestep;
}

template <class T>
void constraint_step(const DeviceModel<T>& model, Data<T>& data, T* d_qfrc_constraint,
                     const T* d_qfrc_applied) {
  if (model.view().solver == kSolverXpbd)
    throw std::invalid_argument(
        "phalanx: the constraint force of a step is that of the LCP's rows; an XPBD model has "
        "none");
  launch(model.device(), data.nenv(),
         ConstraintForceKernel<T>{model.view(), data.qpos.data(), data.qvel.data(), data.act.data(),
                                  data.ctrl.data(), data.status.data(), data.contacts(),
                                  d_qfrc_applied, d_qfrc_constraint},
         model.scratch_size());
  for (double& t : data.time) t += model.model().opt.timestep;
}

template <class T>
Tape<T>::Tape(int every, size_t budget_bytes) : every_request_(every), budget_(budget_bytes) {
  if (every < 0) throw std::invalid_argument("phalanx: a tape's checkpoint spacing must be >= 0");
}

namespace {

// the bytes of a tape's records, controls, status bits and peaks: all but its solution log
template <class T>
size_t record_bytes(const ModelView<T>& m, int nenv, int nstep, int every) {
  size_t record = TapeRecords<T>::record_reals(m) * sizeof(T) +
                  TapeRecords<T>::record_ints(m) * sizeof(int);
  size_t nseg = (size_t(nstep) + every - 1) / every, nseg_buf = every > 1 ? size_t(every) : 0;
  return size_t(nenv) * ((nseg + nseg_buf) * record + size_t(nstep) * m.nu * sizeof(T) +
                         sizeof(unsigned) + 2 * sizeof(int));
}

// the rows each environment's solution log has room for: none when no segment is recomputed
// (every = 1) or no step has rows; else a quarter of the most rows a step may have, at most 64,
// per step (steps use far fewer than the model's room, and the log stays below a quarter of a
// checkpoint per step's rows), or what a budget (> 0) leaves of itself after the records
template <class T>
size_t log_room(const ModelView<T>& m, int nenv, int nstep, int every, size_t budget) {
  if (every <= 1 || m.nefcmax == 0 || nenv == 0) return 0;
  size_t room = size_t(nstep) * size_t(std::min(64, (m.nefcmax + 3) / 4));
  if (budget > 0) {
    const size_t used = record_bytes(m, nenv, nstep, every), heads = 2 * sizeof(int) * nstep;
    const size_t spare = budget > used ? (budget - used) / nenv : 0;
    room = std::min(room, spare > heads ? (spare - heads) / (sizeof(T) + 2 * sizeof(int)) : 0);
  }
  return std::min(room, size_t(std::numeric_limits<int>::max()));
}

}  // namespace

template <class T>
size_t Tape<T>::bytes_for(const ModelView<T>& m, int nenv, int nstep, int every, size_t budget) {
  const size_t room = log_room(m, nenv, nstep, every, budget);
  const size_t log =
      room ? size_t(nenv) * (room * (sizeof(T) + 2 * sizeof(int)) + 2 * sizeof(int) * size_t(nstep))
           : 0;
  return record_bytes(m, nenv, nstep, every) + log;
}

template <class T>
size_t Tape<T>::bytes() const {
  return check_reals_.bytes() + check_ints_.bytes() + seg_reals_.bytes() + seg_ints_.bytes() +
         ctrl_.bytes() + mocap_pos_.bytes() + mocap_quat_.bytes() + status_.bytes() +
         peak_.bytes() + log_force_.bytes() + log_ints_.bytes() + log_head_.bytes();
}

template <class T>
void Tape<T>::allocate(const DeviceModel<T>& model, int nenv, int nstep, const T* d_ctrl,
                       const MocapSteps<T>& mocap) {
  const ModelView<T>& m = model.view();
  int every = every_request_;
  if (every == 0 && budget_ > 0) {
    // every step if it fits, else the spacing of least memory (near sqrt(nstep))
    every = 1;
    if (record_bytes(m, nenv, nstep, 1) > budget_) {
      int best = 1;
      for (int k = 2; k <= nstep; ++k)
        if (record_bytes(m, nenv, nstep, k) < record_bytes(m, nenv, nstep, best)) best = k;
      size_t need = record_bytes(m, nenv, nstep, best);
      if (need > budget_) {
        throw std::invalid_argument(
            "phalanx: a tape of " + std::to_string(nenv) + " environments x " +
            std::to_string(nstep) + " steps needs at least " + std::to_string(need) +
            " bytes (a checkpoint every " + std::to_string(best) + " steps); the budget is " +
            std::to_string(budget_) + " bytes");
      }
      every = best;
    }
  } else if (every == 0) {
    // the spacing of least memory (near sqrt(nstep)); on the CPU at most the steps whose
    // recomputation a pack keeps in cache (but not below 4, where the checkpoints' memory grows
    // faster than the time saved)
    every = int(std::ceil(std::sqrt(double(nstep))));
    const int room =
        model.device() == Device::kCpu ? cpu::pack_segment_room(model.lane_model(), m, nenv) : 0;
    if (room > 0 && room < every) every = std::max(room, std::min(every, 4));
  }
  every = std::max(1, std::min(every, nstep));
  size_t nseg = (size_t(nstep) + every - 1) / every, seg = every > 1 ? size_t(every) : 0;
  size_t rr = TapeRecords<T>::record_reals(m), ri = TapeRecords<T>::record_ints(m);
  Device dev = model.device();
  // records are written before they are read, and only their used rows: not zeroed
  check_reals_ = Buffer<T>::uninitialized(dev, size_t(nenv) * nseg * rr);
  check_ints_ = Buffer<int>::uninitialized(dev, size_t(nenv) * nseg * ri);
  seg_reals_ = Buffer<T>::uninitialized(dev, size_t(nenv) * seg * rr);
  seg_ints_ = Buffer<int>::uninitialized(dev, size_t(nenv) * seg * ri);
  ctrl_ = Buffer<T>(dev, size_t(nenv) * nstep * m.nu);
  if (ctrl_.size()) detail::device_copy(dev, ctrl_.data(), dev, d_ctrl, ctrl_.bytes());
  // mocap poses per step, when given, as the controls
  const size_t poses = size_t(nenv) * nstep * m.nmocap;
  mocap_pos_ = Buffer<T>(dev, mocap.pos ? 3 * poses : 0);
  mocap_quat_ = Buffer<T>(dev, mocap.quat ? 4 * poses : 0);
  if (mocap_pos_.size())
    detail::device_copy(dev, mocap_pos_.data(), dev, mocap.pos, mocap_pos_.bytes());
  if (mocap_quat_.size())
    detail::device_copy(dev, mocap_quat_.data(), dev, mocap.quat, mocap_quat_.bytes());
  status_ = Buffer<unsigned>(dev, size_t(nenv));
  peak_ = Buffer<int>(dev, size_t(nenv) * 2);
  // each step's LCP solution, in what is left of the budget, when segments are recomputed
  const size_t room = log_room(m, nenv, nstep, every, budget_);
  log_room_ = int(room);
  log_force_ = Buffer<T>::uninitialized(dev, size_t(nenv) * room);
  log_ints_ = Buffer<int>::uninitialized(dev, size_t(nenv) * 2 * room);
  log_head_ = Buffer<int>::uninitialized(dev, room ? size_t(nenv) * nstep * 2 : 0);
  every_ = every;
  nstep_ = nstep;
  nenv_ = nenv;
  model_ = &model;
}

template <class T>
std::array<int, 2> Tape<T>::peak() const {
  std::vector<int> p = peak_.to_host();
  std::array<int, 2> most{0, 0};
  for (size_t i = 0; i < p.size(); ++i) most[i % 2] = std::max(most[i % 2], p[i]);
  return most;
}

template <class T>
MocapSteps<T> Tape<T>::mocap() const {
  return {mocap_pos_.size() ? mocap_pos_.data() : nullptr,
          mocap_quat_.size() ? mocap_quat_.data() : nullptr};
}

template <class T>
TapeView<T> Tape<T>::view() {
  return {every_,
          nstep_,
          check_reals_.data(),
          check_ints_.data(),
          seg_reals_.data(),
          seg_ints_.data(),
          status_.data(),
          peak_.data(),
          mocap(),
          {log_force_.data(), log_ints_.data(), log_head_.size() ? log_head_.data() : nullptr,
           log_room_}};
}

template <class T>
void rollout(const DeviceModel<T>& model, Data<T>& data, const T* d_ctrl, int nstep, T* d_qpos_out,
             T* d_qvel_out, int* d_counts_out, Tape<T>* tape, T* d_act_out,
             const MocapSteps<T>& mocap) {
  if (nstep < 0) throw std::invalid_argument("phalanx: nstep must be >= 0");
  TapeView<T> tv{};
  if (tape && nstep > 0) {
    tape->allocate(model, data.nenv(), nstep, d_ctrl, mocap);
    tv = tape->view();
  }
  RolloutKernel<T> k{model.view(),
                     data.qpos.data(),
                     data.qvel.data(),
                     data.act.data(),
                     d_ctrl,
                     d_qpos_out,
                     d_qvel_out,
                     d_act_out,
                     data.status.data(),
                     nstep,
                     data.contacts(),
                     d_counts_out,
                     tv,
                     mocap};
  if (!cpu::rollout_packs(model.lane_model(), data.nenv(), k, model.rollout_scratch_size()))
    launch(model.device(), data.nenv(), k, model.rollout_scratch_size());
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
void kinematics(const DeviceModel<T>& model, int nenv, const T* d_qpos, const T* d_qvel, T* d_xpos,
                T* d_xquat, T* d_com, T* d_com_vel, T* d_site_xpos, T* d_site_xmat, T* d_ten_length,
                T* d_xmat) {
  check_nenv(nenv);
  launch(model.device(), nenv,
         KinematicsKernel<T>{model.view(), d_qpos, d_qvel, d_xpos, d_xquat, d_com, d_com_vel,
                             d_site_xpos, d_site_xmat, d_ten_length, d_xmat},
         model.scratch_size());
}

template <class T>
void kinematics_vjp(const DeviceModel<T>& model, int nenv, const T* d_qpos, const T* d_qvel,
                    const T* d_adj_xpos, const T* d_adj_xmat, const T* d_adj_site_xpos,
                    const T* d_adj_site_xmat, const T* d_adj_com, const T* d_adj_com_vel,
                    T* d_adj_qpos, T* d_adj_qvel) {
  check_nenv(nenv);
  if (d_qvel && !d_adj_qvel)
    throw std::invalid_argument("phalanx: kinematics_vjp: with qvel, adj_qvel is required");
  launch(
      model.device(), nenv,
      KinematicsVjpKernel<T>{model.view(), d_qpos, d_qvel, d_adj_xpos, d_adj_xmat, d_adj_site_xpos,
                             d_adj_site_xmat, d_adj_com, d_qvel ? d_adj_com_vel : nullptr,
                             d_adj_qpos, d_qvel ? d_adj_qvel : nullptr},
      adjoint_scratch_size(model.view()));
}

template <class T>
void body_report(const DeviceModel<T>& model, int nenv, const T* d_qpos, const T* d_qvel,
                 const int* d_ncon, const T* d_con_pos, const T* d_con_frame, const T* d_con_force,
                 const int* d_con_geom, T* d_subtree_com, T* d_cinert, T* d_cvel, T* d_cfrc_ext,
                 const T* d_qacc, T* d_cacc, T* d_cfrc_int) {
  check_nenv(nenv);
  if (d_ncon && model.device() == Device::kCpu) {
    const ModelView<T>& m = model.view();
    for (int e = 0; e < nenv; ++e) {
      if (d_ncon[e] < 0 || d_ncon[e] > m.nconmax)
        throw std::invalid_argument(
            "phalanx: body_report: environment " + std::to_string(e) + " has " +
            std::to_string(d_ncon[e]) +
            " contacts, outside [0, nconmax = " + std::to_string(m.nconmax) + "]");
      for (long i = 0; i < 2L * d_ncon[e]; ++i) {
        int g = d_con_geom[2L * e * m.nconmax + i];
        if (g < 0 || g >= m.ngeom)
          throw std::invalid_argument("phalanx: body_report: environment " + std::to_string(e) +
                                      " names geom " + std::to_string(g) + ", outside [0, " +
                                      std::to_string(m.ngeom) + ")");
      }
    }
  }
  launch(model.device(), nenv,
         BodyReportKernel<T>{model.view(), d_qpos, d_qvel, d_ncon, d_con_pos, d_con_frame,
                             d_con_force, d_con_geom, d_subtree_com, d_cinert, d_cvel, d_cfrc_ext,
                             d_qvel ? d_qacc : nullptr, d_cacc, d_cfrc_int},
         model.scratch_size());
}

template <class T>
void detect(const DeviceModel<T>& model, int nenv, const T* d_qpos, int* d_count, int* d_overflow,
            T* d_pos, T* d_frame, T* d_dist, int* d_geom) {
  check_nenv(nenv);
  launch(model.device(), nenv,
         DetectKernel<T>{model.view(), d_qpos, d_count, d_overflow, d_pos, d_frame, d_dist, d_geom},
         carved_size<DetectScratch<T>, T>(model.view()));
}

template <class T>
void rangefinders(const DeviceModel<T>& model, int nenv, const T* d_qpos, int nsite,
                  const int* d_site, T* d_dist, int* d_geom) {
  check_nenv(nenv);
  if (nsite < 0) throw std::invalid_argument("phalanx: rangefinders: nsite is negative");
  if (model.device() == Device::kCpu)
    for (int i = 0; i < nsite; ++i)
      if (d_site[i] < 0 || d_site[i] >= model.view().nsite)
        throw std::invalid_argument(
            "phalanx: rangefinders: site " + std::to_string(d_site[i]) +
            " is outside [0, nsite = " + std::to_string(model.view().nsite) + ")");
  launch(model.device(), nenv,
         RangefinderKernel<T>{model.view(), d_qpos, nsite, d_site, d_dist, d_geom},
         model.scratch_size());
}

template <class T>
void actuator_forces(const DeviceModel<T>& model, int nenv, const T* d_qpos, const T* d_qvel,
                     const T* d_ctrl, T* d_qfrc, const T* d_act) {
  check_nenv(nenv);
  check_act(model, d_act, "actuator_forces");
  launch(model.device(), nenv,
         ActuatorForceKernel<T>{model.view(), d_qpos, d_qvel, d_ctrl, d_qfrc, d_act},
         model.scratch_size());
}

template <class T>
void forward_dynamics(const DeviceModel<T>& model, int nenv, const T* d_qpos, const T* d_qvel,
                      const T* d_ctrl, T* d_qacc, const T* d_act, const T* d_qfrc) {
  check_nenv(nenv);
  check_act(model, d_act, "forward_dynamics");
  launch(model.device(), nenv,
         ForwardDynamicsKernel<T>{model.view(), d_qpos, d_qvel, d_ctrl, d_qacc, d_act, d_qfrc},
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

namespace {
// the model's view with the ContactGradient flags of one call (-1: the model's own)
template <class T>
ModelView<T> gradient_view(const DeviceModel<T>& model, int contact_gradient) {
  constexpr int kAllGradFlags = kGradComplementarityAware | kGradBounceCorrection;
  if (contact_gradient < -1 || (contact_gradient > 0 && (contact_gradient & ~kAllGradFlags)))
    throw std::invalid_argument("phalanx: contact_gradient has unknown flags: " +
                                std::to_string(contact_gradient));
  ModelView<T> view = model.view();
  if (contact_gradient >= 0) view.contact_gradient = contact_gradient;
  return view;
}
}  // namespace

template <class T>
void step_vjp(const DeviceModel<T>& model, int nenv, const T* d_qpos, const T* d_qvel,
              const T* d_ctrl, const T* d_adj_qpos_next, const T* d_adj_qvel_next, T* d_adj_qpos,
              T* d_adj_qvel, T* d_adj_ctrl, const ModelAdjoint<T>& d_adj_model,
              const ContactModelAdjoint<T>& d_adj_contact, int contact_gradient,
              const T* d_qfrc_applied, T* d_adj_qfrc_applied, const T* d_xfrc_applied,
              T* d_adj_xfrc_applied, const T* d_act, const T* d_adj_act_next, T* d_adj_act) {
  check_nenv(nenv);
  check_act(model, d_act, "step_vjp");
  ModelView<T> view = gradient_view(model, contact_gradient);
  if (nenv == 0) return;
  Data<T> replay(model, nenv);  // cold-start contact storage of the replayed step
  // with body forces: the step's generalized force of both, and its adjoint when not asked for
  const size_t nforce = d_xfrc_applied ? size_t(nenv) * model.model().nv : 0;
  Buffer<T> total(model.device(), nforce);
  Buffer<T> adj_total(model.device(), d_adj_qfrc_applied ? 0 : nforce);
  StepAdjointKernel<T> k{view,
                         d_qpos,
                         d_qvel,
                         d_ctrl,
                         d_adj_qpos_next,
                         d_adj_qvel_next,
                         d_adj_qpos,
                         d_adj_qvel,
                         d_adj_ctrl,
                         d_adj_model,
                         d_adj_contact,
                         replay.contacts(),
                         d_adj_qfrc_applied ? d_adj_qfrc_applied : adj_total.data(),
                         d_qfrc_applied,
                         d_xfrc_applied,
                         d_adj_xfrc_applied,
                         total.data(),
                         d_act,
                         d_adj_act_next,
                         d_adj_act};
  launch(model.device(), nenv, k, adjoint_scratch_size(view));
}

template <class T>
void step_jacobian(const DeviceModel<T>& model, int nenv, const T* d_qpos, const T* d_qvel,
                   const T* d_ctrl, T* d_jac, T* d_jac_param, int contact_gradient,
                   const T* d_qfrc_applied) {
  check_nenv(nenv);
  ModelView<T> view = gradient_view(model, contact_gradient);
  if (view.na > 0)
    throw std::invalid_argument(
        "phalanx: step_jacobian does not cover actuator activations yet; this model has " +
        std::to_string(view.na) + " (use step_vjp or a taped rollout)");
  if (nenv == 0) return;
  ScratchSize scratch = jacobian_scratch_size(view);
  if (model.device() == Device::kCpu) {
    // the rows of qvel' several per reverse pass, in SIMD lanes
    StepJacobianKernel<T, LaneRows<T>> k{view,        d_qpos,         d_qvel,
                                         d_ctrl,      d_jac,          d_jac_param,
                                         d_qfrc_applied, {model.lane_model()}};
    ScratchSize lanes = LaneRows<T>::scratch_size(view);
    cpu::launch(nenv, k, {scratch.reals + lanes.reals, scratch.ints + lanes.ints});
    return;
  }
  StepJacobianKernel<T> k{view, d_qpos, d_qvel, d_ctrl, d_jac, d_jac_param, d_qfrc_applied};
  launch(model.device(), nenv, k, scratch);
}

template <class T>
void rollout_backward(const DeviceModel<T>& model, Tape<T>& tape, const T* d_adj_qpos_out,
                      const T* d_adj_qvel_out, T* d_adj_qpos, T* d_adj_qvel, T* d_adj_ctrl,
                      const ModelAdjoint<T>& d_adj_model,
                      const ContactModelAdjoint<T>& d_adj_contact, int contact_gradient,
                      const T* d_adj_act_out, T* d_adj_act) {
  if (!tape.recorded())
    throw std::logic_error("phalanx: the tape holds no rollout; pass it to rollout() first");
  if (tape.model() != &model)
    throw std::logic_error("phalanx: the tape was recorded with another model");
  ModelView<T> view = gradient_view(model, contact_gradient);
  int nenv = tape.nenv();
  Data<T> replay(model, nenv);  // contact storage of the replayed steps
  RolloutAdjointKernel<T> k{view,        tape.view(), tape.ctrl(),   d_adj_qpos_out,
                            d_adj_qvel_out, d_adj_qpos, d_adj_qvel, d_adj_ctrl,
                            d_adj_model, d_adj_contact, replay.contacts()};
  k.adj_act_out = d_adj_act_out;
  k.adj_act = d_adj_act;
  // with segments to recompute, each step's slot (StepStore) sized by the rollout's peaks (the
  // CPU's packs give an every-step tape's backward a slot of that size too)
  std::array<int, 2> peak = tape.peak();
  k.slot_ncon = peak[0];
  k.slot_nrow = peak[1];
  if (tape.every() > 1 && peak[1] > 0) k.nslot = tape.every();
  const ScratchSize scratch = rollout_adjoint_scratch_size(view, k.nslot, k.slot_ncon, k.slot_nrow);
  if (!cpu::rollout_adjoint_packs(model.lane_model(), nenv, k, scratch))
    launch(model.device(), nenv, k, scratch);
}

#define PHX_INSTANTIATE_API(T)                                                                     \
  template class DeviceModel<T>;                                                                   \
  template class Data<T>;                                                                          \
  template void step<T>(const DeviceModel<T>&, Data<T>&, int, const T*, const T*);                 \
  template void constraint_step<T>(const DeviceModel<T>&, Data<T>&, T*, const T*);                 \
  template class Tape<T>;                                                                          \
  template void rollout<T>(const DeviceModel<T>&, Data<T>&, const T*, int, T*, T*, int*, Tape<T>*, \
                           T*, const MocapSteps<T>&);                                              \
  template void step_jacobian<T>(const DeviceModel<T>&, int, const T*, const T*, const T*, T*, T*, \
                                 int, const T*);                                                   \
  template void rollout_backward<T>(const DeviceModel<T>&, Tape<T>&, const T*, const T*, T*, T*,   \
                                    T*, const ModelAdjoint<T>&, const ContactModelAdjoint<T>&,     \
                                    int, const T*, T*);                                            \
  template void mass_matrix<T>(const DeviceModel<T>&, int, const T*, T*);                          \
  template void bias_forces<T>(const DeviceModel<T>&, int, const T*, const T*, T*);                \
  template void kinematics<T>(const DeviceModel<T>&, int, const T*, const T*, T*, T*, T*, T*, T*,  \
                              T*, T*, T*);                                                         \
  template void kinematics_vjp<T>(const DeviceModel<T>&, int, const T*, const T*, const T*,        \
                                  const T*, const T*, const T*, const T*, const T*, T*, T*);       \
  template void body_report<T>(const DeviceModel<T>&, int, const T*, const T*, const int*,         \
                               const T*, const T*, const T*, const int*, T*, T*, T*, T*, const T*, \
                               T*, T*);                                                            \
  template void rangefinders<T>(const DeviceModel<T>&, int, const T*, int, const int*, T*, int*);  \
  template void detect<T>(const DeviceModel<T>&, int, const T*, int*, int*, T*, T*, T*, int*);     \
  template void forward_dynamics<T>(const DeviceModel<T>&, int, const T*, const T*, const T*, T*,  \
                                    const T*, const T*);                                           \
  template void actuator_forces<T>(const DeviceModel<T>&, int, const T*, const T*, const T*, T*,   \
                                   const T*);                                                      \
  template void inverse_dynamics<T>(const DeviceModel<T>&, int, const T*, const T*, const T*, T*); \
  template void step_vjp<T>(const DeviceModel<T>&, int, const T*, const T*, const T*, const T*,    \
                            const T*, T*, T*, T*, const ModelAdjoint<T>&,                          \
                            const ContactModelAdjoint<T>&, int, const T*, T*, const T*, T*,        \
                            const T*, const T*, T*);
PHX_INSTANTIATE_API(float)
PHX_INSTANTIATE_API(double)
#undef PHX_INSTANTIATE_API

}  // namespace phx
