// One environment's step: the stage functions composed. Without constraint rows (step):
// kinematics -> smooth forces -> articulated-body solve -> semi-implicit Euler; with contacts
// and joint limits (step_constrained): the same forces, then contacts, rows, the boxed LCP and
// the impulses added to the velocity before the position update. The `ctrl` of the functions
// below is what the actuators read: the controls of a model without activation state, else
// the inputs step_env makes from the controls and the activations (actuator_inputs).
#pragma once

#include "phalanx/aba.h"
#include "phalanx/constraint.h"
#include "phalanx/implicit.h"
#include "phalanx/integrate.h"
#include "phalanx/point_jacobian.h"
#include "phalanx/smooth.h"
#include "phalanx/xpbd_step.h"

namespace phx {

// true when all n entries are finite
template <class T>
PHX_HD bool all_finite(const T* x, int n) {
  for (int i = 0; i < n; ++i)
    if (!isfinite(x[i])) return false;
  return true;
}

// the status bits of a step's inputs: kStatusNanState for a non-finite state, kStatusNanCtrl
// for a non-finite control or added force
template <class T>
PHX_HD unsigned step_input_status(const ModelView<T>& m, const T* qpos, const T* qvel,
                                  const T* ctrl, const T* qfrc_applied) {
  unsigned status = 0;
  if (!all_finite(qpos, m.nq) || !all_finite(qvel, m.nv)) status |= kStatusNanState;
  if (!all_finite(ctrl, m.nu) || (qfrc_applied && !all_finite(qfrc_applied, m.nv)))
    status |= kStatusNanCtrl;
  return status;
}

// Mocap poses given per step of a rollout in place of the model's parameters mocap_pos and
// mocap_quat: pos (nenv x nstep x nmocap x 3) and quat (nenv x nstep x nmocap x 4), either null
// to keep its parameter. Their adjoints have the same layout (adjoint()).
template <class T>
struct MocapSteps {
  const T* pos = nullptr;
  const T* quat = nullptr;

  PHX_HD bool given() const { return pos || quat; }
  // m's poses <- those of environment e at step t of nstep
  PHX_HD void at(ModelView<T>& m, int e, int t, int nstep) const {
    const long k = (long(e) * nstep + t) * m.nmocap;
    if (pos) m.mocap_pos = pos + 3 * k;
    if (quat) m.mocap_quat = quat + 4 * k;
  }
  // am's pose adjoints <- step t's rows of one environment's blocks (nstep x nmocap x 3, x 4)
  // starting at env_pos and env_quat, for the poses given
  PHX_HD void adjoint(const ModelView<T>& m, int t, T* env_pos, T* env_quat,
                      ModelAdjoint<T>& am) const {
    const long k = long(t) * m.nmocap;
    if (pos) am.mocap_pos = env_pos ? env_pos + 3 * k : nullptr;
    if (quat) am.mocap_quat = env_quat ? env_quat + 4 * k : nullptr;
  }
};

// kStatusNanCtrl when a mocap pose m reads is not finite or a quaternion is zero, else 0
template <class T>
PHX_HD unsigned mocap_input_status(const ModelView<T>& m) {
  if (!all_finite(m.mocap_pos, 3 * m.nmocap) || !all_finite(m.mocap_quat, 4 * m.nmocap))
    return kStatusNanCtrl;
  for (int i = 0; i < m.nmocap; ++i) {
    const T* q = m.mocap_quat + 4 * i;
    if (q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3] == T(0)) return kStatusNanCtrl;
  }
  return 0;
}

// The generalized force a step adds for Cartesian forces and torques on the bodies (xfrc, nbody
// x 6, force then torque: MuJoCo's xfrc_applied) beside a generalized force (qfrc, may be null):
// out = qfrc + J(qpos)^T xfrc (xfrc_force), from the kinematics at qpos, computed into w. A kernel
// hands `out` to the step as its qfrc_applied.
template <class T>
PHX_HD PHX_DEVICE_NOINLINE void body_forces_to_qfrc(const ModelView<T>& m, const T* qpos,
                                                    const T* qfrc, const T* xfrc, Workspace<T>& w,
                                                    T* out) {
  kinematics(m, qpos, w);
  com_pos(m, w);
  for (int d = 0; d < m.nv; ++d) out[d] = qfrc ? qfrc[d] : T(0);
  xfrc_force(m, w, xfrc, out);
}

// Adjoint of body_forces_to_qfrc's xfrc part, given adj_out (the adjoint of qfrc too, which the
// caller has): to adj_xfrc (may be null) and the adjoints of qpos and body_ipos, accumulated;
// recomputes the kinematics in w and uses a, zeroed here.
template <class T>
PHX_HD PHX_DEVICE_NOINLINE void adj_body_forces_to_qfrc(const ModelView<T>& m, const T* qpos,
                                                        const T* xfrc, Workspace<T>& w,
                                                        AdjWorkspace<T>& a, const T* adj_out,
                                                        T* adj_qpos, T* adj_xfrc,
                                                        const ModelAdjoint<T>& adj_model) {
  kinematics(m, qpos, w);
  com_pos(m, w);
  a.zero();
  adj_xfrc_force(m, w, xfrc, adj_out, a, adj_xfrc, adj_model.body_ipos);
  adj_com_pos(m, w, a, adj_model);
  adj_kinematics(m, qpos, w, a, adj_qpos, adj_model.mocap_pos, adj_model.mocap_quat,
                 adj_model.body_pos);
}

// Positions and velocities: body frames, centres of mass, spatial inertias and velocities, tendon
// lengths (what every step computes before its forces and rows)
template <class T>
PHX_HD PHX_INLINE void smooth_kinematics(const ModelView<T>& m, const T* qpos, const T* qvel,
                                         Workspace<T>& w) {
  kinematics(m, qpos, w);
  com_pos(m, w);
  com_vel(m, qvel, w);
  tendon_kinematics(m, qpos, w);
}

// Forward dynamics of the smooth system:
//   (M + diag(armature + implicit_dt * damping)) qacc = passive + actuation + qfrc_applied - c.
// implicit_dt = 0 gives MuJoCo's qacc; implicit_dt = timestep gives the acceleration its Euler
// integrator applies (damping treated implicitly). Leaves the kinematics in the workspace.
template <class T>
PHX_HD void forward_dynamics(const ModelView<T>& m, const T* qpos, const T* qvel, const T* ctrl,
                             T implicit_dt, Workspace<T>& w, T* qacc,
                             const T* qfrc_applied = nullptr) {
  smooth_kinematics(m, qpos, qvel, w);
  applied_forces(m, qpos, qvel, ctrl, qfrc_applied, w);
  for (int d = 0; d < m.nv; ++d) w.armature[d] = m.dof_armature[d] + implicit_dt * m.dof_damping[d];
  aba(m, qvel, w.qfrc, w.armature, w, qacc);
}

// The implicitfast acceleration qacc = H^-1 (qfrc - c) (implicit.h) after the kinematics,
// tendon_kinematics and applied_forces in w, H factored into w.implicit_H. False when H is not
// positive definite (a negative velocity slope that outweighs the mass).
template <class T>
PHX_HD bool implicit_acceleration(const ModelView<T>& m, const T* qpos, const T* qvel,
                                  const T* ctrl, Workspace<T>& w, T* qacc) {
  rnea(m, qvel, static_cast<const T*>(nullptr), w, qacc);
  for (int d = 0; d < m.nv; ++d) qacc[d] = w.qfrc[d] - qacc[d];
  if (!implicit_factor(m, qpos, qvel, ctrl, w)) return false;
  implicit_solve(m, w, qvel, w.implicit_H, qacc, w.implicit_row);
  return true;
}

// The acceleration a step integrates, by the model's integrator: forward_dynamics with the
// joint damping implicit (Euler), or implicit_acceleration (implicitfast). Leaves the
// kinematics and the applied forces in w; false when the implicit matrix is not positive
// definite.
template <class T>
PHX_HD bool step_dynamics(const ModelView<T>& m, const T* qpos, const T* qvel, const T* ctrl,
                          Workspace<T>& w, T* qacc, const T* qfrc_applied = nullptr) {
  if (m.integrator != kIntegratorImplicitFast) {
    forward_dynamics(m, qpos, qvel, ctrl, m.timestep, w, qacc, qfrc_applied);
    return true;
  }
  smooth_kinematics(m, qpos, qvel, w);
  applied_forces(m, qpos, qvel, ctrl, qfrc_applied, w);
  return implicit_acceleration(m, qpos, qvel, ctrl, w, qacc);
}

// One step without constraint rows, semi-implicit in the velocity:
//   qvel' = qvel + dt qacc,  qpos' = qpos (+) dt qvel',
// qacc that of step_dynamics: joint damping implicit (MuJoCo's Euler), or every velocity slope
// of the applied forces implicit (implicitfast).
// Updates qpos and qvel in place and returns status bits. Non-finite inputs leave the state
// untouched and set a bit; a non-finite result sets kStatusNanResult. qfrc_applied (nv, may be
// null) is a generalized force added to the applied ones; a non-finite one counts as a
// non-finite control. On the GPU a device function of its own, as the constrained step is, so
// that step_env, which a kernel inlines into its loop over steps, holds neither.
template <class T>
PHX_HD PHX_DEVICE_NOINLINE unsigned step(const ModelView<T>& m, T* qpos, T* qvel, const T* ctrl,
                                         Workspace<T>& w, const T* qfrc_applied = nullptr) {
  unsigned status = step_input_status(m, qpos, qvel, ctrl, qfrc_applied);
  if (status) return status;

  T dt = m.timestep;
  if (!step_dynamics(m, qpos, qvel, ctrl, w, w.qacc, qfrc_applied)) return kStatusNanResult;
  for (int d = 0; d < m.nv; ++d) qvel[d] += dt * w.qacc[d];
  integrate_pos(m, qpos, qvel, dt);

  if (!all_finite(qpos, m.nq) || !all_finite(qvel, m.nv)) status |= kStatusNanResult;
  return status;
}

// whether the rows built (nrow, keys) are those of a known solution
template <class T>
PHX_HD bool same_keys(int nrow, const int* keys, const LcpSolution<T>& known) {
  if (nrow != known.n) return false;
  for (int r = 0; r < nrow; ++r)
    if (keys[r] != known.key[r]) return false;
  return true;
}

// The stages of step_constrained (below), in the order they run.

// the previous step's rows, impulses and classes, kept in c for warm starting; their number
template <class T, class Layout>
PHX_HD PHX_INLINE int keep_previous_rows(ConstraintWorkspace<T, Layout>& c,
                                         const ContactView<T>& cv) {
  int nprev = *cv.nefc;
  for (int r = 0; r < nprev; ++r) {
    c.key_prev[r] = cv.efc_key[r];
    c.f_prev[r] = cv.efc_force[r];
    c.class_prev[r] = cv.efc_class[r];
  }
  return nprev;
}

// Where a step's contacts come from. DetectInStep: the step runs the narrowphase itself (the
// default). DetectedBefore: a detection stage ran it over the same state before the step
// (detect_stage) and left the contacts in `found`, so that the step's code holds no narrowphase:
// a CUDA kernel of the step is then compiled without the narrowphase's registers and buffers
// (cuda/launch.cuh). Both give the same contacts bit for bit.
struct DetectInStep {};
template <class T>
struct DetectedBefore {
  ContactView<T> found;
  bool frames = false;  // whether the step computes the geom frames all the same (for_reverse)
};

// The policy of a step replayed for its reverse pass, whose contacts' adjoint reads the geom
// frames (adj_detect_contacts): a step whose contacts were DetectedBefore computes them too.
template <class Detect>
PHX_HD Detect for_reverse(Detect detect) {
  if constexpr (!std::is_same_v<Detect, DetectInStep>) detect.frames = true;
  return detect;
}

// What a narrowphase stage of the pairs Set finds (detect_stage): into `found`, the contacts of
// the convex pairs alone (kConvex), for a model that has them, or those of every pair (kOwn),
// the convex pairs' taken from the stage before, `convex` (unread when the model has none).
template <class T, PairSet Set>
struct StageContacts {
  ContactView<T> found;
  ContactView<T> convex;
};

// A narrowphase stage of a step at (qpos) whose contacts are to be DetectedBefore, for a model
// with contacts: the body and geom frames (into w and c) and the contacts `out` names (above).
// Nothing at a non-finite qpos, where the step stops before it reads them.
template <class T, class Layout, PairSet Set>
PHX_HD void detect_stage(const ModelView<T>& m, const T* qpos, Workspace<T>& w,
                         ConstraintWorkspace<T, Layout>& c, const StageContacts<T, Set>& out) {
  if (!all_finite(qpos, m.nq)) return;
  kinematics(m, qpos, w);
  geom_poses(m, w, c);
  ContactView<T> found = out.found;
  detect_contacts<T, Layout, Set>(m, c, found, nullptr, 0, T(0), nullptr, out.convex);
}

// The narrowphase of a step that runs it itself (DetectInStep, below): detect_contacts, on the
// GPU a device function of its own, which a rollout's backward pass calls in its recomputation.
// Inlined, the narrowphase's registers (the pair functions', in double) were allocated beside
// the step's and spilled them around it.
template <class T, class Layout>
PHX_HD PHX_DEVICE_NOINLINE void detect_in_step(const ModelView<T>& m,
                                               const ConstraintWorkspace<T, Layout>& c,
                                               ContactView<T>& cv, const int* keys, int nkeys,
                                               const unsigned char* apart) {
  detect_contacts(m, c, cv, keys, nkeys, T(0), apart);
}

// The contacts and the constraint rows after smooth_kinematics; their number. A replay with
// the step's row keys (known) tests only the pairs they name; should the rows differ (they
// cannot for a deterministic step), it detects again over every pair. apart: the broadphase's
// verdicts per candidate pair (detect_contacts) from a caller that ran geom_poses into c and the
// broadphase already (a pack of environments), or null. Contacts DetectedBefore are those of a
// full detection: known keys and apart are then not read.
template <class T, class Layout, class Detect = DetectInStep>
PHX_HD PHX_INLINE int contact_rows(const ModelView<T>& m, const T* qpos, const T* qvel,
                                   const Workspace<T>& w, ConstraintWorkspace<T, Layout>& c,
                                   ContactView<T>& cv, const LcpSolution<T>& known,
                                   const unsigned char* apart = nullptr,
                                   const Detect& detect = {}) {
  *cv.ncon = 0;
  *cv.overflow = 0;
  *cv.nwarm = 0;
  *cv.set_hit = 0;
  const bool detects = m.contact && m.nconmax > 0;
  if constexpr (std::is_same_v<Detect, DetectInStep>) {
    const int* keys = known.force ? known.key : nullptr;
    if (detects) {
      if (!apart) geom_poses(m, w, c);
      detect_in_step(m, c, cv, keys, known.n, apart);
    }
    int nrow = build_rows(m, qpos, qvel, w, c, cv);
    if (keys && detects && !same_keys(nrow, cv.efc_key, known)) {
      detect_in_step(m, c, cv, nullptr, 0, nullptr);
      nrow = build_rows(m, qpos, qvel, w, c, cv);
    }
    return nrow;
  } else {
    // (the geom frames stay with the narrowphase stages but for a replay of a reverse pass:
    // only a detection and the contacts' adjoint read them)
    if (detects) {
      if (detect.frames) geom_poses(m, w, c);
      cv.copy_detected(detect.found);
    }
    return build_rows(m, qpos, qvel, w, c, cv);
  }
}

// the unconstrained velocity vfree through the factor L of the step's mass matrix, both into
// c: M + diag(armature + dt damping) (Euler), or H = M - dt D of implicit.h without the free
// bodies' gyroscopic slope, so that it stays symmetric (implicitfast); false when the
// factorisation fails
template <class T, class Layout>
PHX_HD PHX_INLINE bool free_velocity(const ModelView<T>& m, const T* qpos, const T* qvel,
                                     const T* ctrl, Workspace<T>& w,
                                     ConstraintWorkspace<T, Layout>& c) {
  const T dt = m.timestep;
  const int nv = m.nv;
  if (m.integrator == kIntegratorImplicitFast) {
    implicit_metric(m, qpos, qvel, ctrl, w, c.L, c.tmp);
  } else {
    crba(m, w, c.L);
    for (int d = 0; d < nv; ++d) c.L[d * nv + d] += dt * m.dof_damping[d];
  }
  if (!cholesky(c.L, nv, m.dof_treeadr)) return false;
  rnea(m, qvel, static_cast<const T*>(nullptr), w, c.bias);
  for (int d = 0; d < nv; ++d) c.tmp[d] = w.qfrc[d] - c.bias[d];
  cholesky_solve(c.L, nv, c.tmp, m.dof_treeadr);
  for (int d = 0; d < nv; ++d) c.vfree[d] = qvel[d] + dt * c.tmp[d];
  return true;
}

// The applied forces into w.qfrc and the armature the step's solves add (dt damping: Euler's
// implicit damping), after smooth_kinematics
template <class T>
PHX_HD PHX_INLINE void applied_forces_and_armature(const ModelView<T>& m, const T* qpos,
                                                   const T* qvel, const T* ctrl,
                                                   const T* qfrc_applied, Workspace<T>& w) {
  applied_forces(m, qpos, qvel, ctrl, qfrc_applied, w);
  for (int d = 0; d < m.nv; ++d) w.armature[d] = m.dof_armature[d] + m.timestep * m.dof_damping[d];
}

// The acceleration of a step without rows into w.qacc, after applied_forces_and_armature:
// implicitfast's, or the articulated-body algorithm's; false when the implicit matrix is not
// positive definite
template <class T>
PHX_HD PHX_INLINE bool unconstrained_acceleration(const ModelView<T>& m, const T* qpos,
                                                  const T* qvel, const T* ctrl, Workspace<T>& w) {
  if (m.integrator == kIntegratorImplicitFast)
    return implicit_acceleration(m, qpos, qvel, ctrl, w, w.qacc);
  aba(m, qvel, w.qfrc, w.armature, w, w.qacc);
  return true;
}

// The LCP's warm start: into cv.efc_force, the impulse of each row that persists from the nprev
// previous ones (the same key), 0 for a new row; their number to cv.nwarm
template <class T, class Layout>
PHX_HD PHX_INLINE void lcp_warm_start(int nrow, int nprev, const ConstraintWorkspace<T, Layout>& c,
                                      ContactView<T>& cv) {
  T* f = cv.efc_force;
  int nwarm = 0;
  for (int r = 0; r < nrow; ++r) {
    f[r] = T(0);
    for (int k = 0; k < nprev; ++k) {
      if (c.key_prev[k] == cv.efc_key[r]) {
        f[r] = c.f_prev[k];
        ++nwarm;
        break;
      }
    }
  }
  *cv.nwarm = nwarm;
}

// The LCP's impulses into cv.efc_force: warm started from the rows that persist from the
// nprev previous ones (lcp_warm_start), or, replaying, its known solution; Swept: PGS's sweeps
// ran elsewhere from that warm start and left their impulses there (solve_lcp_swept; host code
// alone). kStatusLcpNotConverged or 0.
template <bool Swept = false, class T, class Layout>
PHX_HD PHX_INLINE unsigned lcp_impulses(const ModelView<T>& m, int nrow, int nprev,
                                        ConstraintWorkspace<T, Layout>& c, ContactView<T>& cv,
                                        const LcpSolution<T>& known) {
  T* f = cv.efc_force;
  if (known.force && known.n == nrow) {
    for (int r = 0; r < nrow; ++r) {
      f[r] = known.force[r];
      cv.efc_class[r] = known.cls[r];
    }
    return 0;
  }
  T residual;
  if constexpr (Swept) {
    residual = solve_lcp_swept(m, nrow, c, f, cv.efc_class, cv.set_hit);
  } else {
    lcp_warm_start(nrow, nprev, c, cv);
    residual = solve_lcp(m, nrow, nprev, c, cv.efc_key, f, cv.efc_class, cv.set_hit);
  }
  return residual <= m.lcp_residual_limit ? 0u : unsigned(kStatusLcpNotConverged);
}

// The end of a constrained step once its nrow rows are built: without rows
// qvel' = qvel + dt w.qacc (unconstrained_acceleration); with rows the LCP's impulses f from the
// free velocity in c (free_velocity) and qvel' = vfree + M^-1 J^T f; then qpos'. Status bits:
// kStatusLcpNotConverged, kStatusNanResult for a non-finite result. built: whether the caller
// ran delassus on the rows already (the CPU's packs, on their lanes); Swept: and PGS's sweeps
// (lcp_impulses).
template <bool Swept = false, class T, class Layout>
PHX_HD PHX_INLINE unsigned constrained_update(const ModelView<T>& m, T* qpos, T* qvel, int nrow,
                                              int nprev, const Workspace<T>& w,
                                              ConstraintWorkspace<T, Layout>& c, ContactView<T>& cv,
                                              const LcpSolution<T>& known, bool built = false) {
  const T dt = m.timestep;
  const int nv = m.nv;
  unsigned status = 0;
  if (nrow == 0) {
    for (int d = 0; d < nv; ++d) qvel[d] += dt * w.qacc[d];
  } else {
    if (!built) delassus(m, nrow, c);
    status |= lcp_impulses<Swept>(m, nrow, nprev, c, cv, known);
    // qvel' = vfree + L^-T (Y^T f), with Y = L^-1 J^T
    lcp_factor_velocity(lcp_problem(nrow, c, nv), cv.efc_force, c.tmp);
    cholesky_solve_upper(c.L, nv, c.tmp, m.dof_treeadr);
    for (int d = 0; d < nv; ++d) qvel[d] = c.vfree[d] + c.tmp[d];
  }
  integrate_pos(m, qpos, qvel, dt);
  if (!all_finite(qpos, m.nq) || !all_finite(qvel, m.nv)) status |= kStatusNanResult;
  return status;
}

// The generalized force of a constrained step's rows, J^T f / dt (MuJoCo's qfrc_constraint: the
// contacts', joint and tendon limits' and equality constraints' forces in joint space), from
// what step_constrained leaves in c and cv: the factor Y = L^-1 J^T of its nrow rows and L of
// its metric, so that J^T f = L (Y^T f). Zero for a step without rows. Uses c.tmp.
template <class T, class Layout>
PHX_HD void constraint_force(const ModelView<T>& m, int nrow, ConstraintWorkspace<T, Layout>& c,
                             const T* f, T* out) {
  const int nv = m.nv;
  for (int d = 0; d < nv; ++d) out[d] = T(0);
  if (nrow == 0) return;
  lcp_factor_velocity(lcp_problem(nrow, c, nv), f, c.tmp);
  // out = L tmp over each tree's block of L; cholesky() keeps 1 / L_dd on the diagonal
  for (int i = 0; i < nv; ++i) {
    const T* row = c.L + long(i) * nv;
    T sum = c.tmp[i] / row[i];
    for (int k = block_start(m.dof_treeadr, i); k < i; ++k) sum += row[k] * c.tmp[k];
    out[i] = sum / m.timestep;
  }
}

// A step with contacts and joint limits (constraint.h): the same Euler step with the
// constraint impulses f of the boxed LCP added to the velocity,
//   qvel' = vfree + M^-1 J^T f,  vfree = qvel + dt M^-1 (qfrc - c),  qpos' = qpos (+) dt qvel',
// M with armature and dt * damping (implicit damping as in step()). Without active rows this
// is step() itself. Contacts and impulses are left in cv for the host and the next step's
// warm start.
// A replay of a recorded step may pass `known`, the impulses and classes the step found (the
// next record's warm start): the LCP is then not solved again, and the step is the recorded
// one bit for bit at a fraction of the cost. A known solution whose row count differs from the
// rows built is ignored (the LCP is solved).
template <class T, class Layout, class Detect = DetectInStep>
PHX_HD PHX_DEVICE_NOINLINE unsigned step_constrained(const ModelView<T>& m, T* qpos, T* qvel,
                                                     const T* ctrl, Workspace<T>& w,
                                                     ConstraintWorkspace<T, Layout>& c,
                                                     ContactView<T>& cv, LcpSolution<T> known = {},
                                                     const T* qfrc_applied = nullptr,
                                                     const Detect& detect = {}) {
  unsigned status = step_input_status(m, qpos, qvel, ctrl, qfrc_applied);
  if (status) return status;
  c.factored_rank = -1;  // solve_lcp sets it
  const int nprev = keep_previous_rows(c, cv);
  smooth_kinematics(m, qpos, qvel, w);
  const int nrow = contact_rows(m, qpos, qvel, w, c, cv, known, nullptr, detect);
  if (*cv.overflow) status |= kStatusContactOverflow;
  applied_forces_and_armature(m, qpos, qvel, ctrl, qfrc_applied, w);
  const bool solved = nrow == 0 ? unconstrained_acceleration(m, qpos, qvel, ctrl, w)
                                : free_velocity(m, qpos, qvel, ctrl, w, c);
  if (!solved) return status | kStatusNanResult;
  return status | constrained_update(m, qpos, qvel, nrow, nprev, w, c, cv, known);
}

// ---- adjoints ----------------------------------------------------------------------------

// The share of the forward dynamics' residual r = RNEA(q, qvel, qacc) + ... - qfrc(q, qvel, ctrl)
// that both integrators have, given lambda in a.lambda: adj_x -= lambda^T dr/dx through the
// applied forces (adj_qfrc = lambda) and RNEA at the solution, then the tendons, com and
// kinematics. Accumulates; a holds the stage adjoints gathered so far.
template <class T>
PHX_HD void adj_dynamics_residual(const ModelView<T>& m, const T* qpos, const T* qvel,
                                  const T* ctrl, const T* qacc, Workspace<T>& w, AdjWorkspace<T>& a,
                                  T* adj_qpos, T* adj_qvel, T* adj_ctrl,
                                  const ModelAdjoint<T>& adj_model) {
  adj_passive(m, qpos, qvel, w, a, a.lambda, adj_qpos, adj_qvel, adj_model);
  adj_actuation(m, qpos, qvel, ctrl, w, a, a.lambda, adj_qpos, adj_qvel, adj_ctrl, adj_model);
  rnea(m, qvel, qacc, w, a.tmp);
  for (int d = 0; d < m.nv; ++d) a.tmp[d] = -a.lambda[d];
  adj_rnea(m, qvel, qacc, w, a, a.tmp, adj_qvel, static_cast<T*>(nullptr));
  adj_tendon_kinematics(m, w, a, adj_qpos);
  adj_com_vel(m, qvel, w, a, adj_qvel);
  adj_com_pos(m, w, a, adj_model);
  adj_kinematics(m, qpos, w, a, adj_qpos, adj_model.mocap_pos, adj_model.mocap_quat,
                 adj_model.body_pos);
}

// Adjoint of forward_dynamics at (qpos, qvel, ctrl) with result qacc, by implicit
// differentiation of the residual r = RNEA(q, qvel, qacc) + armature' qacc - qfrc(q, qvel, ctrl)
// = 0 with armature' = armature + implicit_dt * damping:
//   lambda = (M + diag(armature'))^-1 adj_qacc   (one articulated-body solve, no bias)
//   adj_x  = -lambda^T dr/dx  for x = qpos, qvel, ctrl and the parameters.
// Needs the workspace of the forward_dynamics call; accumulates into the adjoint outputs.
// factored: w still holds that call's factorisation of M + diag(armature') (aba_U, aba_invD),
// which the solve then reads; else it factors again (the same bits).
template <class T>
PHX_HD void adj_forward_dynamics(const ModelView<T>& m, const T* qpos, const T* qvel, const T* ctrl,
                                 T implicit_dt, const T* qacc, Workspace<T>& w, AdjWorkspace<T>& a,
                                 const T* adj_qacc, T* adj_qpos, T* adj_qvel, T* adj_ctrl,
                                 const ModelAdjoint<T>& adj_model, bool factored = false) {
  a.zero();
  if (!factored) aba_factor(m, w.armature, w);
  aba_solve(m, adj_qacc, w, a.lambda);

  // the shifted diagonal: r contains (armature + implicit_dt damping) qacc
  for (int d = 0; d < m.nv; ++d) {
    T g = -a.lambda[d] * qacc[d];
    if (adj_model.dof_armature) adj_model.dof_armature[d] += g;
    if (adj_model.dof_damping) adj_model.dof_damping[d] += implicit_dt * g;
  }

  adj_dynamics_residual(m, qpos, qvel, ctrl, qacc, w, a, adj_qpos, adj_qvel, adj_ctrl, adj_model);
}

// Adjoint of implicit_dynamics at (qpos, qvel, ctrl) with result qacc, by implicit
// differentiation of r = RNEA(q, v, qacc) - h D qacc + h B qacc - qfrc = 0:
//   lambda = H^-T adj_qacc (into a.lambda),  adj_x = -lambda^T dr/dx.
// Needs the kinematics, tendons and applied forces of the forward step in w, from which it
// factors H again (w.implicit_H: a replay from a tape's slot has not kept it); accumulates
// into the adjoint outputs.
template <class T>
PHX_HD void adj_implicit_dynamics(const ModelView<T>& m, const T* qpos, const T* qvel,
                                  const T* ctrl, const T* qacc, Workspace<T>& w, AdjWorkspace<T>& a,
                                  const T* adj_qacc, T* adj_qpos, T* adj_qvel, T* adj_ctrl,
                                  const ModelAdjoint<T>& adj_model) {
  const T h = m.timestep;
  a.zero();
  for (int d = 0; d < m.nv; ++d) a.lambda[d] = adj_qacc[d];
  implicit_factor(m, qpos, qvel, ctrl, w);
  implicit_solve(m, w, qvel, w.implicit_H, a.lambda, w.implicit_row, true);
  if (adj_model.dof_armature)
    for (int d = 0; d < m.nv; ++d) adj_model.dof_armature[d] -= a.lambda[d] * qacc[d];

  // -h D qacc and +h B qacc
  adj_velocity_slope(m, qpos, qvel, ctrl, w, a, h, a.lambda, qacc, w.implicit_row, w.implicit_u,
                     w.implicit_v, adj_qpos, adj_qvel, adj_ctrl, adj_model);
  adj_free_bias_slope(m, qvel, w, a, -h, a.lambda, qacc, adj_qvel, adj_model);
  adj_dynamics_residual(m, qpos, qvel, ctrl, qacc, w, a, adj_qpos, adj_qvel, adj_ctrl, adj_model);
}

// The reverse part of adj_step (below), after step_dynamics at (qpos, qvel, ctrl) has left
// its results in w (step_constrained without rows leaves the same): accumulates as adj_step
// does. It rewrites only arrays of w it computes again before reading them (the
// articulated-body and RNEA arrays; with implicitfast crb and the implicit arrays), so it may
// run again with other seeds: one forward serves every row of a Jacobian. factored: w holds
// the step's articulated-body factorisation too (aba_U, aba_invD: a workspace kept whole, not
// one restored from StepStore::kept_ranges), which Euler's reverse pass then reads rather than
// computes again.
template <class T>
PHX_HD PHX_DEVICE_NOINLINE void adj_step_replayed(const ModelView<T>& m, const T* qpos,
                                                  const T* qvel, const T* ctrl, Workspace<T>& w,
                                                  AdjWorkspace<T>& a, const T* adj_qpos_next,
                                                  const T* adj_qvel_next, T* adj_qpos, T* adj_qvel,
                                                  T* adj_ctrl, const ModelAdjoint<T>& adj_model,
                                                  T* adj_qfrc = nullptr, bool factored = false) {
  T dt = m.timestep;
  for (int d = 0; d < m.nv; ++d) a.qvel_next[d] = qvel[d] + dt * w.qacc[d];

  // qpos' = integrate(qpos, qvel'), qvel' = qvel + dt qacc
  for (int d = 0; d < m.nv; ++d) a.qvel[d] = adj_qvel_next[d];
  adj_integrate_pos(m, qpos, a.qvel_next, dt, adj_qpos_next, adj_qpos, a.qvel);
  for (int d = 0; d < m.nv; ++d) {
    adj_qvel[d] += a.qvel[d];
    a.qacc[d] = dt * a.qvel[d];
  }
  if (m.integrator == kIntegratorImplicitFast)
    adj_implicit_dynamics(m, qpos, qvel, ctrl, w.qacc, w, a, a.qacc, adj_qpos, adj_qvel, adj_ctrl,
                          adj_model);
  else
    adj_forward_dynamics(m, qpos, qvel, ctrl, dt, w.qacc, w, a, a.qacc, adj_qpos, adj_qvel,
                         adj_ctrl, adj_model, factored);
  if (adj_qfrc)
    for (int d = 0; d < m.nv; ++d) adj_qfrc[d] += a.lambda[d];
}

// Adjoint (vector-Jacobian product) of one step: replays the forward from (qpos, qvel, ctrl)
// and maps (adj_qpos_next, adj_qvel_next) to adj_qpos, adj_qvel, adj_ctrl and the parameter
// adjoints, all accumulated; adj_qfrc (may be null) receives the adjoint of qfrc_applied, the
// generalized force the step added (may be null). Inputs are not modified.
template <class T>
PHX_HD void adj_step(const ModelView<T>& m, const T* qpos, const T* qvel, const T* ctrl,
                     Workspace<T>& w, AdjWorkspace<T>& a, const T* adj_qpos_next,
                     const T* adj_qvel_next, T* adj_qpos, T* adj_qvel, T* adj_ctrl,
                     const ModelAdjoint<T>& adj_model, T* adj_qfrc = nullptr,
                     const T* qfrc_applied = nullptr) {
  step_dynamics(m, qpos, qvel, ctrl, w, w.qacc, qfrc_applied);
  adj_step_replayed(m, qpos, qvel, ctrl, w, a, adj_qpos_next, adj_qvel_next, adj_qpos, adj_qvel,
                    adj_ctrl, adj_model, adj_qfrc, true);
}

// The scratch of a step: the workspace, the actuators' inputs and, when the model has
// constraint rows, the constraint workspace after them; with the XPBD solver, its bodies.
// Layout lays out the constraint workspace's strided arrays.
template <class T, class Layout = Contiguous>
struct StepScratch {
  Workspace<T> w;
  T* input = nullptr;  // (nu) the actuators' inputs of a model with activation state
  ConstraintWorkspace<T, Layout> c{};
  XpbdArrays<T> xpbd{};

  template <class M>
  PHX_HD static StepScratch carve(const M& m, Arena<T, Layout>& arena) {
    return carved_in_place<StepScratch>(m, arena);
  }
  template <class M>
  PHX_HD void carve_in(const M& m, Arena<T, Layout>& arena) {
    carve_part(&w, m, arena);
    input = arena.take_fixed(m.na > 0 ? m.nu : 0);
    if (m.nefcmax > 0) carve_part(&c, m, arena);
    if constexpr (std::is_floating_point_v<T>)
      if (m.solver == kSolverXpbd) carve_part(&xpbd, m, arena);
  }
};

// The XPBD arrays of a step's scratch, with its contacts bound when the model has them: they
// are detected into cv, from the geom frames of x's constraint workspace
template <class T, class Layout>
PHX_HD XpbdArrays<T> xpbd_arrays(const ModelView<T>& m, const StepScratch<T, Layout>& x,
                                 const ContactView<T>& cv) {
  XpbdArrays<T> s = x.xpbd;
  if (m.nconmax > 0 && m.nefcmax > 0) {
    // the geom frames: the detection's only arrays of the workspace
    s.c.geom_xpos = x.c.geom_xpos;
    s.c.geom_xmat = x.c.geom_xmat;
    s.cv = cv;
  }
  return s;
}

// One XPBD step (xpbd_step, the model's substeps, iterations and joint solver; its contacts into
// cv) with the status bits of step(): its inputs checked first, contacts beyond nconmax and a
// non-finite result flagged
template <class T, class Layout>
PHX_HD unsigned step_xpbd(const ModelView<T>& m, T* qpos, T* qvel, const T* ctrl,
                          StepScratch<T, Layout>& x, const ContactView<T>& cv,
                          const T* qfrc_applied) {
  unsigned status = step_input_status(m, qpos, qvel, ctrl, qfrc_applied);
  if (status) return status;
  const XpbdArrays<T> s = xpbd_arrays(m, x, cv);
  xpbd_step(m, qpos, qvel, ctrl, x.w, s, m.xpbd_substeps, m.xpbd_iterations, qfrc_applied,
            XpbdJointSolver(m.xpbd_joint_solver));
  if (s.cv.overflow && *s.cv.overflow) status |= kStatusContactOverflow;
  if (!all_finite(qpos, m.nq) || !all_finite(qvel, m.nv)) status |= kStatusNanResult;
  return status;
}

// The status bits of a step's activation inputs: kStatusNanCtrl for a non-finite ctrl (an
// actuator with dynamics reads it through its activation only), kStatusNanState for a
// non-finite act.
template <class T>
PHX_HD unsigned activation_input_status(const ModelView<T>& m, const T* ctrl, const T* act) {
  if (!all_finite(ctrl, m.nu)) return kStatusNanCtrl;
  return all_finite(act, m.na) ? 0u : unsigned(kStatusNanState);
}

// One step: with the XPBD solver step_xpbd; else with contacts and limits (their rows and
// impulses in cv, which holds the warm start from the step before) when the model has
// constraint rows, else step(). With activation state
// (m.na > 0), act (na) holds the activations: the actuators read their inputs from ctrl and act
// (actuator_inputs) and act advances after the step (activation_step); act may be null when
// m.na = 0. The LCP step's contacts come from `detect` (DetectInStep or DetectedBefore); the
// XPBD step detects its own, at its look-ahead margin.
template <class T, class Layout, class Detect = DetectInStep>
PHX_HD unsigned step_env(const ModelView<T>& m, T* qpos, T* qvel, T* act, const T* ctrl,
                         StepScratch<T, Layout>& x, ContactView<T>& cv, LcpSolution<T> known = {},
                         const T* qfrc_applied = nullptr, const Detect& detect = {}) {
  const T* input = ctrl;
  if (m.na > 0) {
    if (unsigned bits = activation_input_status(m, ctrl, act)) return bits;
    actuator_inputs(m, ctrl, act, x.input);
    input = x.input;
  }
  unsigned status;
  if (m.solver == kSolverXpbd) {
    if constexpr (kXpbdCompiled)
      status = step_xpbd(m, qpos, qvel, input, x, cv, qfrc_applied);
    else
      status = kStatusStopMask;  // not reached: the host refuses such a model (kXpbdCompiled)
  } else if (m.nefcmax == 0)
    status = step(m, qpos, qvel, input, x.w, qfrc_applied);
  else
    status = step_constrained(m, qpos, qvel, input, x.w, x.c, cv, known, qfrc_applied, detect);
  if (m.na > 0 && !(status & kStatusStopMask)) activation_step(m, ctrl, act);
  return status;
}

}  // namespace phx
