// The batched C++ API: compile a Model onto a device, allocate state for E environments,
// step and roll out, and the functional dynamics queries. Batched arrays are env-major
// ((nenv, ...) row-major) and live on the model's device.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "host/device.h"
#include "host/model.h"
#include "phalanx/model_view.h"
#include "phalanx/constraint_adjoint.h"
#include "phalanx/cost.h"
#include "phalanx/planner.h"
#include "phalanx/tape.h"
#include "phalanx/workspace.h"

namespace phx {

template <class T>
struct LaneModel;  // host/lane_adjoint.h

// A Model converted to scalar T and copied onto a device.
template <class T>
class DeviceModel {
 public:
  DeviceModel(const Model& model, Device device);

  const Model& model() const { return model_; }
  Device device() const { return device_; }
  const ModelView<T>& view() const { return view_; }
  // scratch one environment's step needs (the forward kernels but the rollouts)
  ScratchSize scratch_size() const;
  // and one environment's rollout, which holds its contacts for the launch
  ScratchSize rollout_scratch_size() const;
  // bytes of device memory the model occupies
  size_t bytes() const;
  // on the CPU, the view's reals broadcast to SIMD lanes once (a LaneModel<T>,
  // lane_adjoint.h), which the one-step Jacobians' lane passes of steps without rows read;
  // null on CUDA
  const LaneModel<T>* lane_model() const { return lane_model_.get(); }

 private:
  Model model_;
  Device device_;
  std::vector<Buffer<T>> reals_;
  std::vector<Buffer<int>> ints_;
  ModelView<T> view_{};
  std::shared_ptr<const LaneModel<T>> lane_model_;
};

// The state of one environment in Data: X(kind, name, size, comment), sizes in the counts of a
// model `m`, as the workspace tables (phalanx/workspace.h).
#define PHX_STATE_ARRAYS(X)                                                                      \
  X(real, qpos, m.nq, "generalized coordinates (nq)")                                            \
  X(real, qvel, m.nv, "generalized velocities (nv)")                                             \
  X(real, act, m.na, "actuator activations (na)")                                                \
  X(real, ctrl, m.nu, "controls (nu)")                                                           \
  X(unsigned, status, 1, "StatusBit flags, sticky until cleared (1)")

#define PHX_DATA_BUFFER(kind, name, size, comment) Buffer<kind> name;

// The contacts and constraint rows of the last step of every environment (PHX_CONTACT_ARRAYS,
// phalanx/constraint.h), each nenv times its size, on the model's device.
template <class T>
struct ContactBuffers {
  using real = T;
  PHX_CONTACT_ARRAYS(PHX_DATA_BUFFER)
};

// Batched state of nenv environments on the model's device: each array of PHX_STATE_ARRAYS and
// of PHX_CONTACT_ARRAYS nenv times, env-major.
template <class T>
class Data {
 public:
  using real = T;
  // qpos = qpos0, qvel = 0, act = 0, ctrl = 0, status = 0
  Data(const DeviceModel<T>& model, int nenv);

  int nenv() const { return nenv_; }
  PHX_STATE_ARRAYS(PHX_DATA_BUFFER)
  std::vector<double> time;  // (nenv) simulated time, kept on the host
  ContactBuffers<T> contact;

  // the contact buffers as the kernels take them
  ContactData<T> contacts();

  // bytes of device memory per environment: state plus the workspace a step uses
  size_t bytes_per_env() const;
  // clear status bits of all environments
  void clear_status() { status.zero(); }

 private:
  int nenv_;
  ScratchSize scratch_;
};

// The tape of a rollout (include/phalanx/tape.h): a checkpoint of each environment's state and
// warm start every `every()` steps, a copy of the controls, and the backward pass's segment
// buffers. Pass it to rollout() to record, then call rollout_backward().
template <class T>
class Tape {
 public:
  // every > 0: a checkpoint every that many steps (1: every step, no recomputation);
  // every = 0: chosen when recording, from budget_bytes when it is > 0 (every step if that
  // fits, else about sqrt(nstep) steps per segment; std::invalid_argument when even the
  // smallest tape does not fit), else ceil(sqrt(nstep)), on the CPU at most
  // cpu::pack_segment_room steps (a pack's recomputed segment in cache) but not below 4.
  // With every > 1 the tape also logs each step's LCP solution (SolutionLog), with room for a
  // quarter of the rows a step may have, at most 64 a step, or what the budget leaves.
  explicit Tape(int every = 0, size_t budget_bytes = 0);

  bool recorded() const { return nstep_ > 0; }
  int every() const { return every_; }
  int nstep() const { return nstep_; }
  int nenv() const { return nenv_; }
  // bytes of device memory the tape holds (checkpoints, segment buffers, controls, solution log)
  size_t bytes() const;
  // bytes a tape of nenv x nstep with a checkpoint every `every` steps would hold within
  // budget_bytes (0: none)
  static size_t bytes_for(const ModelView<T>& m, int nenv, int nstep, int every,
                          size_t budget_bytes = 0);

  // used by rollout() and rollout_backward()
  void allocate(const DeviceModel<T>& model, int nenv, int nstep, const T* d_ctrl,
                const MocapSteps<T>& mocap = {});
  TapeView<T> view();
  // the most contacts and rows of any step of any environment of the recorded rollout
  std::array<int, 2> peak() const;
  const T* ctrl() const { return ctrl_.data(); }
  // the mocap poses per step the rollout was given (null ones: the model's)
  MocapSteps<T> mocap() const;
  const DeviceModel<T>* model() const { return model_; }

 private:
  int every_request_, every_ = 0, nstep_ = 0, nenv_ = 0, log_room_ = 0;
  size_t budget_;
  const DeviceModel<T>* model_ = nullptr;
  Buffer<T> check_reals_, seg_reals_, ctrl_, mocap_pos_, mocap_quat_, log_force_;
  Buffer<int> check_ints_, seg_ints_, log_ints_, log_head_;
  Buffer<unsigned> status_;
  Buffer<int> peak_;
};

// nstep steps of every environment with ctrl held; status bits accumulate. d_qfrc_applied
// (nenv x nv on the device, may be null) is a generalized force added to the applied ones at
// every step (MuJoCo's qfrc_applied), d_xfrc_applied (nenv x nbody x 6, may be null) forces and
// torques in world on the bodies, the forces at their centres of mass (MuJoCo's xfrc_applied);
// non-finite ones set kStatusNanCtrl.
template <class T>
void step(const DeviceModel<T>& model, Data<T>& data, int nstep = 1,
          const T* d_qfrc_applied = nullptr, const T* d_xfrc_applied = nullptr);

// One step, as step(), that also writes its constraint force J^T f / dt (constraint_force in
// step.h; MuJoCo's qfrc_constraint) to d_qfrc_constraint (nenv x nv on the device). A model
// stepped by XPBD has no such rows: std::invalid_argument.
template <class T>
void constraint_step(const DeviceModel<T>& model, Data<T>& data, T* d_qfrc_constraint,
                     const T* d_qfrc_applied = nullptr);

// nstep steps driven by d_ctrl (nenv x nstep x nu, on the device). Writes the state after each
// step to d_qpos_out (nenv x nstep x nq), d_qvel_out (nenv x nstep x nv) and d_act_out (nenv x
// nstep x na), and per step the counts kCountContacts.. to d_counts_out (nenv x nstep x
// kNumCounts), each when non-null; data holds the final state. mocap's poses per step (on the
// device, nenv x nstep x nmocap x 3 and x 4, either null) replace the model's mocap_pos and
// mocap_quat; a non-finite pose or a zero quaternion sets kStatusNanCtrl.
// With a tape, records it (replacing what it held) for rollout_backward.
template <class T>
void rollout(const DeviceModel<T>& model, Data<T>& data, const T* d_ctrl, int nstep, T* d_qpos_out,
             T* d_qvel_out, int* d_counts_out = nullptr, Tape<T>* tape = nullptr,
             T* d_act_out = nullptr, const MocapSteps<T>& mocap = {});

// One-step Jacobians of nenv environments at (qpos, qvel, ctrl), from the adjoints (one replay
// of the step from a cold start, as step_vjp, then a reverse pass per output row reusing it):
// d_jac (nenv x (nq + nv) x (nq + 2 nv + nu)): rows qpos', qvel'; columns qpos, qvel, ctrl and
// qfrc, a generalized force added to the applied ones (Nimble's dqd'/dtau). d_jac_param (nenv x
// (nq + nv) x jacobian_nparam(view), may be null): columns the parameters in Param order
// (model_view.h), each flattened. contact_gradient as in step_vjp. d_qfrc_applied (nenv x nv,
// may be null: zero) is the step's added generalized force, as step() takes it; the qfrc columns
// are the derivatives with respect to it.
template <class T>
void step_jacobian(const DeviceModel<T>& model, int nenv, const T* d_qpos, const T* d_qvel,
                   const T* d_ctrl, T* d_jac, T* d_jac_param = nullptr, int contact_gradient = -1,
                   const T* d_qfrc_applied = nullptr);

// The backward pass of a taped rollout: from d_adj_qpos_out (nenv x nstep x nq) and
// d_adj_qvel_out (nenv x nstep x nv), the loss gradients with respect to the state after each
// step (either may be null: zero), to the gradients of the initial state (d_adj_qpos nenv x nq,
// d_adj_qvel nenv x nv), of every control (d_adj_ctrl nenv x nstep x nu) and, per environment,
// of the parameters in adj_model and adj_contact (null pointers are skipped); outputs are
// overwritten. Gradients are bit-identical for every checkpoint spacing. Environments whose
// rollout stopped get zeros. std::logic_error when the tape recorded nothing or for another
// model. contact_gradient: ContactGradient flags (-1: the model's). With activation state,
// d_adj_act_out (nenv x nstep x na, may be null: zero) is the loss gradient with respect to the
// activations after each step and d_adj_act (nenv x na, may be null) receives that of the
// initial ones. When the rollout was given mocap poses per step, adj_model's mocap_pos and
// mocap_quat for those receive their gradients per step (nenv x nstep x nmocap x 3, x 4).
template <class T>
void rollout_backward(const DeviceModel<T>& model, Tape<T>& tape, const T* d_adj_qpos_out,
                      const T* d_adj_qvel_out, T* d_adj_qpos, T* d_adj_qvel, T* d_adj_ctrl,
                      const ModelAdjoint<T>& d_adj_model,
                      const ContactModelAdjoint<T>& d_adj_contact = {}, int contact_gradient = -1,
                      const T* d_adj_act_out = nullptr, T* d_adj_act = nullptr);

// Functional queries on device arrays of nenv environments.
// M(q) with armature                                    -> d_M    (nenv x nv x nv)
template <class T>
void mass_matrix(const DeviceModel<T>& model, int nenv, const T* d_qpos, T* d_M);
// c(q, qvel), Coriolis, centrifugal and gravity          -> d_bias (nenv x nv)
template <class T>
void bias_forces(const DeviceModel<T>& model, int nenv, const T* d_qpos, const T* d_qvel,
                 T* d_bias);
// body frames and the centre of mass -> d_xpos (nenv x nbody x 3), d_xquat (nenv x nbody x 4),
// d_com (nenv x 3), with d_qvel non-null its velocity d_com_vel (nenv x 3), with d_site_xpos
// non-null the site frames d_site_xpos (nenv x nsite x 3) and d_site_xmat (nenv x nsite x 9),
// with d_ten_length non-null the tendons' lengths (nenv x ntendon), and with d_xmat non-null the
// body rotation matrices (nenv x nbody x 9, row-major)
template <class T>
void kinematics(const DeviceModel<T>& model, int nenv, const T* d_qpos, const T* d_qvel, T* d_xpos,
                T* d_xquat, T* d_com, T* d_com_vel, T* d_site_xpos = nullptr,
                T* d_site_xmat = nullptr, T* d_ten_length = nullptr, T* d_xmat = nullptr);
// vector-Jacobian product of kinematics(): the adjoints of the body frames d_adj_xpos (nenv x
// nbody x 3) and d_adj_xmat (nenv x nbody x 9), the site frames d_adj_site_xpos (nenv x nsite x
// 3) and d_adj_site_xmat (nenv x nsite x 9), the centre of mass d_adj_com (nenv x 3) and, with
// d_qvel non-null, its velocity d_adj_com_vel (nenv x 3), each null for zero, -> d_adj_qpos
// (nenv x nq) and, with d_qvel, d_adj_qvel (nenv x nv) (adj_kinematics_query in report.h)
template <class T>
void kinematics_vjp(const DeviceModel<T>& model, int nenv, const T* d_qpos, const T* d_qvel,
                    const T* d_adj_xpos, const T* d_adj_xmat, const T* d_adj_site_xpos,
                    const T* d_adj_site_xmat, const T* d_adj_com, const T* d_adj_com_vel,
                    T* d_adj_qpos, T* d_adj_qvel);
// Per-body quantities in MuJoCo's convention (include/phalanx/report.h): d_subtree_com (nenv x
// nbody x 3), d_cinert (nenv x nbody x 10), with d_qvel non-null d_cvel (nenv x nbody x 6), and
// with d_ncon non-null d_cfrc_ext (nenv x nbody x 6), the wrenches of each environment's d_ncon
// contacts (d_con_pos nconmax x 3, d_con_frame nconmax x 9, d_con_force nconmax x 3 in the
// contact frame, d_con_geom nconmax x 2 per environment). A contact count outside [0, nconmax]
// or a geom out of range is an std::invalid_argument (host arrays: checked before the launch).
// With d_qvel and d_qacc (nenv x nv, the acceleration with the constraint forces) non-null,
// d_cacc and d_cfrc_int (nenv x nbody x 6 each) after the constraint solve (post_constraint).
template <class T>
void body_report(const DeviceModel<T>& model, int nenv, const T* d_qpos, const T* d_qvel,
                 const int* d_ncon, const T* d_con_pos, const T* d_con_frame, const T* d_con_force,
                 const int* d_con_geom, T* d_subtree_com, T* d_cinert, T* d_cvel, T* d_cfrc_ext,
                 const T* d_qacc = nullptr, T* d_cacc = nullptr, T* d_cfrc_int = nullptr);
// The contacts at nenv states without a step (the narrowphase alone, MuJoCo's mj_collision):
// d_count (nenv), d_overflow (nenv, contacts found beyond nconmax) and, each when non-null,
// d_pos (nenv x nconmax x 3), d_frame (nenv x nconmax x 9), d_dist (nenv x nconmax) and d_geom
// (nenv x nconmax x 2), zero past the count.
template <class T>
void detect(const DeviceModel<T>& model, int nenv, const T* d_qpos, int* d_count, int* d_overflow,
            T* d_pos = nullptr, T* d_frame = nullptr, T* d_dist = nullptr, int* d_geom = nullptr);
// MuJoCo's rangefinder sensors on the nsite sites d_site (nsite ids): the distance along each
// site's z axis to the nearest visible geom not of the site's body -> d_dist (nenv x nsite, -1
// when there is none) and that geom's id -> d_geom (nenv x nsite, -1). A site id out of range
// is an std::invalid_argument (host arrays: checked before the launch).
template <class T>
void rangefinders(const DeviceModel<T>& model, int nenv, const T* d_qpos, int nsite,
                  const int* d_site, T* d_dist, int* d_geom);
// qacc = M^-1 (passive + actuation + qfrc - c)           -> d_qacc (nenv x nv)
// (with activation state, d_act (nenv x na) the activations the actuators read; required;
// d_qfrc (nenv x nv) a generalized force added, MuJoCo's qfrc_applied, may be null)
template <class T>
void forward_dynamics(const DeviceModel<T>& model, int nenv, const T* d_qpos, const T* d_qvel,
                      const T* d_ctrl, T* d_qacc, const T* d_act = nullptr,
                      const T* d_qfrc = nullptr);
// the actuators' generalized force (MuJoCo's qfrc_actuator) -> d_qfrc (nenv x nv)
// (with activation state, d_act (nenv x na) the activations the actuators read; required)
template <class T>
void actuator_forces(const DeviceModel<T>& model, int nenv, const T* d_qpos, const T* d_qvel,
                     const T* d_ctrl, T* d_qfrc, const T* d_act = nullptr);
// tau = M qacc + c - passive (MuJoCo's qfrc_inverse)     -> d_tau  (nenv x nv)
template <class T>
void inverse_dynamics(const DeviceModel<T>& model, int nenv, const T* d_qpos, const T* d_qvel,
                      const T* d_qacc, T* d_tau);

// Vector-Jacobian product of one step of nenv environments: given the adjoints
// of the next state, the adjoints of qpos, qvel, ctrl and, per environment, of the model
// parameters in adj_model (nenv x field size each; null pointers are skipped). All device
// arrays; outputs are overwritten.
// With contacts or limits the step is replayed from a cold start (no warm start) and the
// adjoint is exact for the stabilised LCP solvers; d_adj_contact receives geom friction,
// restitution and size adjoints (nenv x ngeom x 3, nenv x ngeom, nenv x ngeom x 3; null
// pointers are skipped).
// contact_gradient: ContactGradient flags for this call (-1: the model's
// opt.contact_gradient); other bits are an std::invalid_argument.
// d_qfrc_applied (nenv x nv, may be null: zero) and d_xfrc_applied (nenv x nbody x 6, may be
// null) are the step's added forces, as step() takes them; d_adj_qfrc_applied (nenv x nv) and
// d_adj_xfrc_applied (nenv x nbody x 6), each may be null, receive their adjoints.
// With activation state (na > 0), d_act (nenv x na, required) holds the activations before the
// step, d_adj_act_next (nenv x na, may be null: zero) the adjoint of those after it, and
// d_adj_act (nenv x na, may be null) receives the adjoint of d_act.
template <class T>
void step_vjp(const DeviceModel<T>& model, int nenv, const T* d_qpos, const T* d_qvel,
              const T* d_ctrl, const T* d_adj_qpos_next, const T* d_adj_qvel_next, T* d_adj_qpos,
              T* d_adj_qvel, T* d_adj_ctrl, const ModelAdjoint<T>& d_adj_model,
              const ContactModelAdjoint<T>& d_adj_contact = {}, int contact_gradient = -1,
              const T* d_qfrc_applied = nullptr, T* d_adj_qfrc_applied = nullptr,
              const T* d_xfrc_applied = nullptr, T* d_adj_xfrc_applied = nullptr,
              const T* d_act = nullptr, const T* d_adj_act_next = nullptr, T* d_adj_act = nullptr);

// ---- costs and sampling planners (host/planner.cpp) -----------------------------------------

// The terms of a cost (include/phalanx/cost.h) checked against a model and copied onto its
// device: ints (nterm x kCostTermInts: kind, index, axis), reals (nterm x kCostTermReals:
// target, weight, terminal weight). std::invalid_argument names the first bad term (unknown
// kind, index or axis out of range, a non-finite number, a centre-of-mass term on a massless
// model).
template <class T>
class DeviceCost {
 public:
  DeviceCost(const DeviceModel<T>& model, const std::vector<int>& ints,
             const std::vector<double>& reals);
  CostView<T> view() const { return {nterm_, ints_.data(), reals_.data()}; }
  int nterm() const { return nterm_; }

 private:
  int nterm_ = 0;
  Buffer<int> ints_;
  Buffer<T> reals_;
};

// The cost of nenv stored rollouts of nstep steps, d_qs (nenv x nstep x nq), d_vs (nenv x nstep
// x nv), d_us (nenv x nstep x nu) -> d_value (nenv); with d_adj_qs non-null also its gradients
// with respect to every state and control (same shapes; all three or none).
template <class T>
void trajectory_cost(const DeviceModel<T>& model, const DeviceCost<T>& cost, int nenv, int nstep,
                     const T* d_qs, const T* d_vs, const T* d_us, T* d_value,
                     T* d_adj_qs = nullptr, T* d_adj_vs = nullptr, T* d_adj_us = nullptr);

// The device arrays of nproblem x nsample planner samples and the two stages of a planning
// iteration: rollouts() (noise, controls, rollouts and costs of all samples in one launch) and
// an update: per-problem reductions or sorts of the costs (one thread per problem on the CPU,
// CUB's segmented reductions and sort on CUDA), then kernels per sample and per plan entry.
// The sample arrays stay valid until the next rollouts().
template <class T>
class PlannerBatch {
 public:
  // plans of horizon rows, each held for hold physics steps
  PlannerBatch(const DeviceModel<T>& model, int nproblem, int nsample, int horizon, int hold = 1);

  int nproblem() const { return nproblem_; }
  int nsample() const { return nsample_; }
  int horizon() const { return horizon_; }
  int hold() const { return hold_; }

  // The samples of one iteration from the problems' states d_qpos0 (nproblem x nq), d_qvel0
  // (nproblem x nv) and, with activation state, d_act0 (nproblem x na), plans d_plan and noise
  // scales d_sigma (nproblem x horizon x nu) and the control range d_lo, d_hi (nu); spec's
  // sizes must match the batch's.
  // With record, the samples' trajectories go to qs and vs, e.g. for a cost evaluated
  // elsewhere that then overwrites value.
  void rollouts(const DeviceCost<T>& cost, const PlannerSpec& spec, const T* d_qpos0,
                const T* d_qvel0, const T* d_plan, const T* d_sigma, const T* d_lo, const T* d_hi,
                bool record = false, const T* d_act0 = nullptr);
  // MPPI's update of the plans in place (planner.h); ok[p] = 0 where a problem had no weights
  void update_mppi(T lambda, T* d_plan, const T* d_lo, const T* d_hi);
  // CEM's refit of the plans and their noise scales in place on the nelite best samples
  void update_cem(int nelite, T alpha, T sigma_min, T* d_plan, T* d_sigma);

  Buffer<T> eps, ctrl, value;  // (nproblem x nsample x horizon x nu) twice, (nproblem x nsample)
  Buffer<unsigned> status;     // (nproblem x nsample)
  Buffer<T> weight;            // (nproblem x nsample) MPPI's last weights
  Buffer<int> elite;           // (nproblem x nsample) CEM's last elites: the first nelite of
                               // each row, best first
  Buffer<int> ok;              // (nproblem)
  Buffer<T> qs, vs;            // (nproblem x nsample x horizon * hold x nq / nv) when recorded

 private:
  // per-problem minimum or sum of an (nproblem x nsample) array into out (nproblem)
  void reduce(const T* d_in, T* d_out, bool take_min);
  // each problem's samples by ascending cost (the first n of each row of elite)
  void smallest(int n);

  const DeviceModel<T>* model_;
  int nproblem_, nsample_, horizon_, hold_;
  Data<T> samples_;            // the samples' states and contacts
  Buffer<T> cmin_, wsum_;      // (nproblem) MPPI's lowest cost and weight sum
  Buffer<int> offsets_;        // (nproblem + 1) segment starts, for CUB
  Buffer<int> index_;          // (nproblem x nsample) k of each sample, for CUB's sort
  Buffer<T> sorted_;           // (nproblem x nsample) scratch of CUB's sort
};

}  // namespace phx
