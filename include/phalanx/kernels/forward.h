// Forward kernels: stepping, rollouts and the functional queries (mass matrix, bias forces,
// kinematics, forward and inverse dynamics).
#pragma once

#include "phalanx/cost.h"
#include "phalanx/kernels/common.h"
#include "phalanx/rangefinder.h"
#include "phalanx/report.h"
#include "phalanx/step.h"
#include "phalanx/tape.h"

namespace phx {

// The most bytes of contact arrays (ContactView) that a forward kernel holds in its own fixed
// storage (ForwardScratch); a model's larger ones are stepped in the batch's arrays. The
// humanoid's 80 contacts and their rows take about 8 KB in float and 14 KB in double.
constexpr long kHeldContactsMax = 16 * 1024;

// The scratch of one environment's forward kernels: a step's, and what a kernel that steps many
// times holds for all of its steps in fixed storage of its own: the state, and for a rollout
// (carved with hold_contacts) the contacts unless they take more than kHeldContactsMax bytes.
// Kernels that do not hold contacts are given no room for them. On CUDA that storage is the
// thread's local memory, which the hardware interleaves across a warp, so the steps' loads and
// stores of them coalesce while the batch's arrays stay env-major: the kernel reads an
// environment's rows into it once before its steps (hold_*) and writes them back once after
// (release_*).
template <class T, class Layout = Contiguous>
struct ForwardScratch : StepScratch<T, Layout> {
  T* qpos = nullptr;  // (nq)
  T* qvel = nullptr;  // (nv)
  T* act = nullptr;   // (na)
  // the held contacts' reals and integers (ContactView's carve from them), null when the model
  // has no constraint rows or its contacts do not fit
  T* contact_reals = nullptr;
  int* contact_ints = nullptr;

  template <class M>
  PHX_HD static ForwardScratch carve(const M& m, Arena<T, Layout>& arena,
                                     bool hold_contacts = false) {
    ForwardScratch x;
    x.StepScratch<T, Layout>::carve_in(m, arena);
    x.qpos = arena.take_fixed(m.nq);
    x.qvel = arena.take_fixed(m.nv);
    x.act = arena.take_fixed(m.na);
    const ScratchSize held = carved_size<ContactView<T>, T>(m);
    if (hold_contacts && m.nefcmax > 0 &&
        held.reals * long(sizeof(T)) + held.ints * long(sizeof(int)) <= kHeldContactsMax) {
      x.contact_reals = arena.take_fixed(held.reals);
      x.contact_ints = arena.template take_fixed<int>(held.ints);
    }
    return x;
  }
  // the held state from an environment's rows (act may be null when na = 0)
  PHX_HD void hold_state(const ModelView<T>& m, const T* q, const T* v, const T* a) const {
    copy_state(m, q, v, a, qpos, qvel, act);
  }
  // the held state back into an environment's rows
  PHX_HD void release_state(const ModelView<T>& m, T* q, T* v, T* a) const {
    copy_state(m, qpos, qvel, act, q, v, a);
  }
  // The contacts the steps are to use: the held ones, holding the contacts and rows of the
  // environment's `batch` view, when the model's fit; else `batch` itself.
  PHX_HD ContactView<T> hold_contacts(const ModelView<T>& m, const ContactView<T>& batch) const {
    if (!contact_reals) return batch;
    const ContactView<T> held = contacts(m);
    held.copy_held(m, batch);
    return held;
  }
  // the held contacts and rows back into the environment's `batch` view (nothing when the
  // steps used it)
  PHX_HD void release_contacts(const ModelView<T>& m, const ContactView<T>& batch) const {
    if (contact_reals) batch.copy_held(m, contacts(m));
  }
  // the held contacts' arrays (with contact_reals set)
  PHX_HD ContactView<T> contacts(const ModelView<T>& m) const {
    Arena<T> arena(contact_reals, contact_ints);
    return ContactView<T>::carve(m, arena);
  }
};

// scratch of one environment's forward kernels (ForwardScratch), but the rollouts'
template <class T>
PHX_HD ScratchSize scratch_size(const ModelView<T>& m) {
  return carved_size<ForwardScratch<T>, T>(m);
}
// and of the rollouts', which hold their contacts for the launch (RolloutKernel,
// PlannerRolloutKernel): the most of any forward kernel
template <class T>
PHX_HD ScratchSize rollout_scratch_size(const ModelView<T>& m) {
  return carved_size<ForwardScratch<T>, T>(m, true);
}

// ForwardScratch over one environment's scratch (of rollout_scratch_size with hold_contacts,
// else of scratch_size), for kernels that only step forward (no reverse pass or Jacobian reads
// their steps' constraint matrices)
template <class T, class Layout>
PHX_HD ForwardScratch<T, Layout> step_scratch(const ModelView<T>& m, Scratch<T, Layout> scratch,
                                              bool hold_contacts = false) {
  Arena<T, Layout> arena(scratch);
  ForwardScratch<T, Layout> x = ForwardScratch<T, Layout>::carve(m, arena, hold_contacts);
  x.c.forward_only = true;
  return x;
}

// A narrowphase stage of a staged forward kernel (kernels/common.h: staged launches) for one
// environment, of model m, at its qpos, over its step's scratch
template <class T, class Layout, class Found>
PHX_HD void detect_env(const ModelView<T>& m, Scratch<T, Layout> scratch, const T* qpos,
                       const Found& found) {
  ForwardScratch<T, Layout> x = step_scratch(m, scratch);
  detect_stage(m, qpos, x.w, x.c, found);
}

// nstep Euler steps of each environment, state updated in place; ctrl held constant
template <class T>
struct StepKernel {
  using Scalar = T;
  ModelView<T> model;  // env_view gives each environment its parameters
  T* qpos;           // (nenv x nq)
  T* qvel;           // (nenv x nv)
  T* act;            // (nenv x na), may be null when na = 0
  const T* ctrl;     // (nenv x nu)
  unsigned* status;  // (nenv) OR-ed with the step's status bits
  int nstep;
  ContactData<T> con;  // contacts and constraint impulses (unused without constraints)
  const T* qfrc_applied = nullptr;  // (nenv x nv) added generalized forces, may be null
  // (nenv x nbody x 6) added forces and torques on the bodies, may be null; then qfrc_total
  // (nenv x nv) holds each step's generalized force of both
  const T* xfrc_applied = nullptr;
  T* qfrc_total = nullptr;
  unsigned* carried = nullptr;  // staged launches: (nenv) the bits of this call's steps so far

  template <class Layout>
  PHX_HD void operator()(int e, Scratch<T, Layout> scratch) const {
    steps(e, scratch, 0, nstep, DetectInStep{});
  }

  // Steps [t0, t1) of environment e, their contacts from detect (DetectInStep, or for a staged
  // launch DetectedBefore); the call's steps are every step, or any sequence of such ranges,
  // which pass the bits of the steps before t0 on in `carried`. An environment stops taking
  // steps once one of this call's stops it.
  template <class Layout, class Detect>
  PHX_HD void steps(int e, Scratch<T, Layout> scratch, int t0, int t1, const Detect& detect) const {
    const ModelView<T> m = env_view(model, e);
    ForwardScratch<T, Layout> x = step_scratch(m, scratch);
    const T* f = env_row(qfrc_applied, e, m.nv);
    const T* xf = env_row(xfrc_applied, e, 6 * m.nbody);
    T* total = env_row(qfrc_total, e, m.nv);
    ContactView<T> cv{};
    if (m.nefcmax > 0) cv = con.env(m, e);
    unsigned bits = t0 > 0 ? carried[e] : 0u;
    T* const q = qpos + long(e) * m.nq;
    T* const v = qvel + long(e) * m.nv;
    T* const a = env_row(act, e, m.na);
    x.hold_state(m, q, v, a);
    for (int t = t0; t < t1 && !(bits & kStatusStopMask); ++t) {
      if (xf) body_forces_to_qfrc(m, x.qpos, f, xf, x.w, total);
      bits |= step_env(m, x.qpos, x.qvel, a ? x.act : nullptr, ctrl + long(e) * m.nu, x, cv, {},
                       xf ? total : f, detect);
    }
    x.release_state(m, q, v, a);
    status[e] |= bits;
    if (carried) carried[e] = bits;
  }

  // the narrowphase stages of step t (kernels/common.h: staged launches)
  template <class Layout, class Found>
  PHX_HD void detect(int e, Scratch<T, Layout> scratch, int t, const Found& found) const {
    if (t > 0 && (carried[e] & kStatusStopMask)) return;
    const ModelView<T> m = env_view(model, e);
    detect_env(m, scratch, qpos + long(e) * m.nq, found);
  }
  static constexpr bool kStaged = true;
  template <class Run>
  void staged(const StageMemory<T>& memory, Run&& run) const {
    StepKernel k = *this;
    k.carried = memory.bits;
    stage_launches(k, nstep, memory, run);
  }
};

// One step of each environment, as StepKernel's, that also reports its constraint force
// (constraint_force: J^T f / dt of its rows; zero for a step that stopped or had none). A kernel
// of its own so that the step kernel's registers stay as they are.
template <class T>
struct ConstraintForceKernel {
  using Scalar = T;
  ModelView<T> model;     // env_view gives each environment its parameters
  T* qpos;                // (nenv x nq), stepped in place
  T* qvel;                // (nenv x nv)
  T* act;                 // (nenv x na), may be null when na = 0
  const T* ctrl;          // (nenv x nu)
  unsigned* status;       // (nenv) OR-ed with the step's status bits
  ContactData<T> con;     // contacts and constraint impulses
  const T* qfrc_applied;  // (nenv x nv) added generalized force, may be null
  T* qfrc_constraint;     // (nenv x nv)

  template <class Layout>
  PHX_HD void operator()(int e, Scratch<T, Layout> scratch) const {
    steps(e, scratch, 0, 1, DetectInStep{});
  }

  // its step, which is step [0, 1) (t0 = 0, t1 = 1), its contacts from detect (as StepKernel's)
  template <class Layout, class Detect>
  PHX_HD void steps(int e, Scratch<T, Layout> scratch, int, int, const Detect& detect) const {
    const ModelView<T> m = env_view(model, e);
    StepScratch<T, Layout> x = step_scratch(m, scratch);
    ContactView<T> cv{};
    if (m.nefcmax > 0) cv = con.env(m, e);
    const unsigned bits =
        step_env(m, qpos + long(e) * m.nq, qvel + long(e) * m.nv, env_row(act, e, m.na),
                 ctrl + long(e) * m.nu, x, cv, {}, env_row(qfrc_applied, e, m.nv), detect);
    status[e] |= bits;
    const bool rows = m.nefcmax > 0 && m.solver != kSolverXpbd && !(bits & kStatusStopMask);
    constraint_force(m, rows ? *cv.nefc : 0, x.c, cv.efc_force, qfrc_constraint + long(e) * m.nv);
  }
  // the narrowphase stages of its step (t = 0)
  template <class Layout, class Found>
  PHX_HD void detect(int e, Scratch<T, Layout> scratch, int, const Found& found) const {
    const ModelView<T> m = env_view(model, e);
    detect_env(m, scratch, qpos + long(e) * m.nq, found);
  }
  static constexpr bool kStaged = true;
  template <class Run>
  void staged(const StageMemory<T>& memory, Run&& run) const {
    stage_launches(*this, 1, memory, run);
  }
};

// the counts of an environment's last step, whose contacts are cv (kNumCounts, Count order),
// into c: zero without constraint rows
template <class T>
PHX_HD PHX_INLINE void step_counts(const ModelView<T>& m, const ContactView<T>& cv, int* c) {
  const bool on = m.nefcmax > 0;
  c[kCountContacts] = on ? *cv.ncon : 0;
  c[kCountRows] = on ? *cv.nefc : 0;
  c[kCountWarmRows] = on ? *cv.nwarm : 0;
  c[kCountSetHit] = on ? *cv.set_hit : 0;
  c[kCountOverflow] = on ? *cv.overflow : 0;
  c[kCountGjkIterations] = on ? cv.ccd_iterations[0] : 0;
  c[kCountEpaIterations] = on ? cv.ccd_iterations[1] : 0;
}
// and of environment e of the batch's contacts
template <class T>
PHX_HD PHX_INLINE void step_counts(const ModelView<T>& m, const ContactData<T>& con, int e,
                                   int* c) {
  step_counts(m, m.nefcmax > 0 ? con.env(m, e) : ContactView<T>{}, c);
}

// T steps with a control sequence, recording the states after each step. An environment
// whose status gets a stopping bit (non-finite values) stops and repeats its last state. Its
// scratch: rollout_scratch_size.
template <class T>
struct RolloutKernel {
  using Scalar = T;
  ModelView<T> model;  // env_view gives each environment its parameters
  T* qpos;           // (nenv x nq) initial state in, final state out
  T* qvel;           // (nenv x nv)
  T* act;            // (nenv x na), may be null when na = 0
  const T* ctrl;     // (nenv x nstep x nu)
  T* qpos_out;       // (nenv x nstep x nq), may be null
  T* qvel_out;       // (nenv x nstep x nv), may be null
  T* act_out;        // (nenv x nstep x na), may be null
  unsigned* status;  // (nenv)
  int nstep;
  ContactData<T> con;  // contacts and constraint impulses (unused without constraints)
  int* counts_out;     // (nenv x nstep x kNumCounts) counts of each step, may be null
  TapeView<T> tape;    // checkpoints every tape.every steps; tape.every = 0: none
  MocapSteps<T> mocap{};  // mocap poses per step in place of the model's, when given

  template <class Layout>
  PHX_HD void operator()(int e, Scratch<T, Layout> scratch) const {
    steps(e, scratch, 0, nstep, DetectInStep{});
  }

  // Steps [t0, t1) of environment e, their contacts from detect (DetectInStep, or for a staged
  // launch DetectedBefore); the rollout is every step, or any sequence of such ranges.
  template <class Layout, class Detect>
  PHX_HD void steps(int e, Scratch<T, Layout> scratch, int t0, int t1, const Detect& detect) const {
    ModelView<T> m = env_view(model, e);
    ForwardScratch<T, Layout> x = step_scratch(m, scratch, true);
    T* const a_rows = env_row(act, e, m.na);
    x.hold_state(m, qpos + long(e) * m.nq, qvel + long(e) * m.nv, a_rows);
    T* q = x.qpos;
    T* v = x.qvel;
    T* a = a_rows ? x.act : nullptr;
    unsigned bits = status[e];
    ContactView<T> cv{};
    if (m.nefcmax > 0) cv = x.hold_contacts(m, con.env(m, e));
    // the largest counts of the steps before t0
    const bool later = t0 > 0 && tape.every > 0;
    int peak_con = later ? tape.peak[2 * e] : 0, peak_row = later ? tape.peak[2 * e + 1] : 0;
    for (int t = t0; t < t1; ++t) {
      if (tape.every > 0 && t % tape.every == 0)
        tape.checkpoints(m, e).save(m, t / tape.every, q, v, a, cv);
      if (mocap.given() && !(bits & kStatusStopMask)) {
        mocap.at(m, e, t, nstep);
        bits |= mocap_input_status(m);
      }
      if (!(bits & kStatusStopMask)) {
        bits |= step_env(m, q, v, a, ctrl + (long(e) * nstep + t) * m.nu, x, cv, {},
                         static_cast<const T*>(nullptr), detect);
        if (m.nefcmax > 0) {
          peak_con = *cv.ncon > peak_con ? *cv.ncon : peak_con;
          peak_row = *cv.nefc > peak_row ? *cv.nefc : peak_row;
        }
      }
      if (tape.log.head)
        tape.log.save(e, nstep, t, *cv.nefc, cv.efc_force, cv.efc_key, cv.efc_class);
      if (qpos_out) {
        for (int i = 0; i < m.nq; ++i) qpos_out[(long(e) * nstep + t) * m.nq + i] = q[i];
      }
      if (qvel_out) {
        for (int i = 0; i < m.nv; ++i) qvel_out[(long(e) * nstep + t) * m.nv + i] = v[i];
      }
      if (act_out) {
        for (int i = 0; i < m.na; ++i) act_out[(long(e) * nstep + t) * m.na + i] = a[i];
      }
      if (counts_out) step_counts(m, cv, counts_out + kNumCounts * (long(e) * nstep + t));
    }
    x.release_state(m, qpos + long(e) * m.nq, qvel + long(e) * m.nv, a_rows);
    if (m.nefcmax > 0) x.release_contacts(m, con.env(m, e));
    status[e] = bits;
    if (tape.every > 0) {
      tape.status[e] = bits;
      tape.peak[2 * e] = peak_con;
      tape.peak[2 * e + 1] = peak_row;
    }
  }

  // the narrowphase stages of step t (kernels/common.h: staged launches)
  template <class Layout, class Found>
  PHX_HD void detect(int e, Scratch<T, Layout> scratch, int t, const Found& found) const {
    if (status[e] & kStatusStopMask) return;
    ModelView<T> m = env_view(model, e);
    if (mocap.given()) {
      mocap.at(m, e, t, nstep);
      if (mocap_input_status(m)) return;  // the step stops there
    }
    detect_env(m, scratch, qpos + long(e) * m.nq, found);
  }
  static constexpr bool kStaged = true;
  template <class Run>
  void staged(const StageMemory<T>& memory, Run&& run) const {
    stage_launches(*this, nstep, memory, run);
  }
};

// joint-space inertia M (with armature) at qpos
template <class T>
struct MassMatrixKernel {
  using Scalar = T;
  ModelView<T> model;  // env_view gives each environment its parameters
  const T* qpos;  // (nenv x nq)
  T* M;           // (nenv x nv x nv)

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    const ModelView<T> m = env_view(model, e);
    Workspace<T> w = step_scratch(m, scratch).w;
    kinematics(m, qpos + long(e) * m.nq, w);
    com_pos(m, w);
    crba(m, w, M + long(e) * m.nv * m.nv);
  }
};

// bias forces c(q, qvel): Coriolis, centrifugal and gravity (MuJoCo's qfrc_bias)
template <class T>
struct BiasKernel {
  using Scalar = T;
  ModelView<T> model;  // env_view gives each environment its parameters
  const T* qpos;  // (nenv x nq)
  const T* qvel;  // (nenv x nv)
  T* bias;        // (nenv x nv)

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    const ModelView<T> m = env_view(model, e);
    Workspace<T> w = step_scratch(m, scratch).w;
    kinematics(m, qpos + long(e) * m.nq, w);
    com_pos(m, w);
    com_vel(m, qvel + long(e) * m.nv, w);
    rnea(m, qvel + long(e) * m.nv, static_cast<const T*>(nullptr), w, bias + long(e) * m.nv);
  }
};

// body frames and the centre of mass: xpos (nenv x nbody x 3), xquat (nenv x nbody x 4), com
// (nenv x 3), when qvel is non-null its velocity com_vel (nenv x 3) (cost.h), when site_xpos
// is non-null the site frames site_xpos (nenv x nsite x 3) and site_xmat (nenv x nsite x 9),
// when ten_length is non-null the tendons' lengths (nenv x ntendon), and when xmat is non-null
// the body rotation matrices (nenv x nbody x 9, row-major as MuJoCo's xmat)
template <class T>
struct KinematicsKernel {
  using Scalar = T;
  ModelView<T> model;  // env_view gives each environment its parameters
  const T* qpos;       // (nenv x nq)
  const T* qvel;       // (nenv x nv), may be null
  T* xpos;
  T* xquat;
  T* com;
  T* com_vel;          // may be null
  T* site_xpos = nullptr;  // may be null
  T* site_xmat = nullptr;
  T* ten_length = nullptr;  // may be null
  T* xmat = nullptr;        // may be null

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    const ModelView<T> m = env_view(model, e);
    Workspace<T> w = step_scratch(m, scratch).w;
    cost_kinematics(m, kCostNeedsKinematics | kCostNeedsComPos | (qvel ? kCostNeedsComVel : 0),
                    qpos + long(e) * m.nq, env_row(qvel, e, m.nv), w);
    for (int i = 0; i < 3 * m.nbody; ++i) xpos[long(e) * 3 * m.nbody + i] = w.xpos[i];
    for (int i = 0; i < 4 * m.nbody; ++i) xquat[long(e) * 4 * m.nbody + i] = w.xquat[i];
    if (xmat)
      for (int i = 0; i < 9 * m.nbody; ++i) xmat[long(e) * 9 * m.nbody + i] = w.xmat[i];
    com_position(m, w).store(com + 3L * e);
    if (qvel) com_velocity(m, w).store(com_vel + 3L * e);
    if (site_xpos)
      for (int s = 0; s < m.nsite; ++s)
        site_frame(m, w, s, site_xpos + (long(e) * m.nsite + s) * 3,
                   site_xmat + (long(e) * m.nsite + s) * 9);
    if (ten_length) {
      tendon_kinematics(m, qpos + long(e) * m.nq, w);
      for (int t = 0; t < m.ntendon; ++t) ten_length[long(e) * m.ntendon + t] = w.ten_length[t];
    }
  }
};

// What DetectKernel carves: a step's scratch and one environment's contact arrays
template <class T>
struct DetectScratch {
  StepScratch<T> x;
  ContactView<T> cv;

  template <class M>
  PHX_HD static DetectScratch carve(const M& m, Arena<T>& arena) {
    DetectScratch s;
    s.x = StepScratch<T>::carve(m, arena);
    s.cv = ContactView<T>::carve(m, arena);
    return s;
  }
};

// The contacts at each state without a step (MuJoCo's mj_collision after mj_kinematics): the
// narrowphase as a step runs it, no constraint solve. count (nenv) and overflow (nenv: found
// beyond nconmax), and, each when non-null, every contact's pos (nenv x nconmax x 3), frame
// (nenv x nconmax x 9), dist (nenv x nconmax) and geoms (nenv x nconmax x 2), zero past count.
template <class T>
struct DetectKernel {
  using Scalar = T;
  ModelView<T> model;  // env_view gives each environment its parameters and height fields
  const T* qpos;       // (nenv x nq)
  int* count;
  int* overflow;
  T* pos;
  T* frame;
  T* dist;
  int* geom;

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    const ModelView<T> m = env_view(model, e);
    Arena<T> arena(scratch);
    DetectScratch<T> s = DetectScratch<T>::carve(m, arena);
    int n = 0;
    overflow[e] = 0;
    if (m.contact && m.nconmax > 0 && m.nefcmax > 0) {
      kinematics(m, qpos + long(e) * m.nq, s.x.w);
      geom_poses(m, s.x.w, s.x.c);
      detect_contacts(m, s.x.c, s.cv);
      n = *s.cv.ncon;
      overflow[e] = *s.cv.overflow;
    }
    count[e] = n;
    const long c0 = long(e) * m.nconmax;
    for (long i = 0; i < m.nconmax; ++i) {
      const bool live = i < n;
      for (int k = 0; pos && k < 3; ++k) pos[3 * (c0 + i) + k] = live ? s.cv.pos[3 * i + k] : T(0);
      for (int k = 0; frame && k < 9; ++k)
        frame[9 * (c0 + i) + k] = live ? s.cv.frame[9 * i + k] : T(0);
      if (dist) dist[c0 + i] = live ? s.cv.dist[i] : T(0);
      for (int k = 0; geom && k < 2; ++k) geom[2 * (c0 + i) + k] = live ? s.cv.geom[2 * i + k] : 0;
    }
  }
};

// MuJoCo's rangefinder sensors on nsite sites (rangefinder.h): the distance along each site's z
// axis to the nearest visible geom not of the site's body, -1 when there is none, and that geom
template <class T>
struct RangefinderKernel {
  using Scalar = T;
  ModelView<T> model;  // env_view gives each environment its parameters and height fields
  const T* qpos;       // (nenv x nq)
  int nsite;
  const int* site;  // (nsite) site ids
  T* dist;          // (nenv x nsite)
  int* geom;        // (nenv x nsite)

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    const ModelView<T> m = env_view(model, e);
    Workspace<T> w = step_scratch(m, scratch).w;
    kinematics(m, qpos + long(e) * m.nq, w);
    for (int i = 0; i < nsite; ++i)
      dist[long(e) * nsite + i] = rangefinder(m, w, site[i], geom + long(e) * nsite + i);
  }
};

// Per-body quantities in MuJoCo's convention (report.h): subtree_com (nenv x nbody x 3), cinert
// (nenv x nbody x 10), with qvel cvel (nenv x nbody x 6), and with contacts cfrc_ext (nenv x
// nbody x 6) from each environment's ncon contacts (con_*: nconmax per environment, as
// phalanx.contacts gives them)
template <class T>
struct BodyReportKernel {
  using Scalar = T;
  ModelView<T> model;   // env_view gives each environment its parameters
  const T* qpos;        // (nenv x nq)
  const T* qvel;        // (nenv x nv), may be null
  const int* ncon;      // (nenv), may be null: no cfrc_ext
  const T* con_pos;     // (nenv x nconmax x 3)
  const T* con_frame;   // (nenv x nconmax x 9)
  const T* con_force;   // (nenv x nconmax x 3)
  const int* con_geom;  // (nenv x nconmax x 2)
  T* subtree_com;
  T* cinert;
  T* cvel;      // may be null
  T* cfrc_ext;  // may be null
  const T* qacc = nullptr;  // (nenv x nv), may be null: no cacc, cfrc_int; needs qvel
  T* cacc = nullptr;
  T* cfrc_int = nullptr;

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    const ModelView<T> m = env_view(model, e);
    Workspace<T> w = step_scratch(m, scratch).w;
    cost_kinematics(m, kCostNeedsKinematics | kCostNeedsComPos | (qvel ? kCostNeedsComVel : 0),
                    qpos + long(e) * m.nq, env_row(qvel, e, m.nv), w);
    T* com = subtree_com + 3L * e * m.nbody;
    subtree_coms(m, w, com);
    com_based(m, w, com, cinert + 10L * e * m.nbody, qvel ? cvel + 6L * e * m.nbody : nullptr);
    if (ncon) {
      long c = long(e) * m.nconmax;
      int n = ncon[e] < 0 ? 0 : (ncon[e] > m.nconmax ? m.nconmax : ncon[e]);  // host checks it
      contact_wrenches(m, com, n, con_pos + 3 * c, con_frame + 9 * c, con_force + 3 * c,
                       con_geom + 2 * c, cfrc_ext + 6L * e * m.nbody);
    }
    if (qacc && qvel)
      post_constraint(m, qvel + long(e) * m.nv, qacc + long(e) * m.nv, w, com,
                      ncon ? cfrc_ext + 6L * e * m.nbody : nullptr, cacc + 6L * e * m.nbody,
                      cfrc_int + 6L * e * m.nbody);
  }
};

// environment e's actuator inputs: its row of ctrl (nenv x nu) or, with activation state, the
// inputs its row of act (nenv x na) gives them (in x.input)
template <class T>
PHX_HD PHX_INLINE const T* env_actuator_input(const ModelView<T>& m, const T* ctrl, const T* act,
                                              int e, StepScratch<T>& x) {
  const T* input = ctrl + long(e) * m.nu;
  if (m.na == 0) return input;
  actuator_inputs(m, input, act + long(e) * m.na, x.input);
  return x.input;
}

// qacc = (M + diag(armature))^-1 (passive + actuation + qfrc - bias), MuJoCo's qacc without
// constraints (or with them, given their force as qfrc); with activation state the actuators
// read act (nenv x na)
template <class T>
struct ForwardDynamicsKernel {
  using Scalar = T;
  ModelView<T> model;  // env_view gives each environment its parameters
  const T* qpos;  // (nenv x nq)
  const T* qvel;  // (nenv x nv)
  const T* ctrl;  // (nenv x nu)
  T* qacc;        // (nenv x nv)
  const T* act = nullptr;   // (nenv x na), may be null when na = 0
  const T* qfrc = nullptr;  // (nenv x nv), may be null: MuJoCo's qfrc_applied

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    const ModelView<T> m = env_view(model, e);
    StepScratch<T> x = step_scratch(m, scratch);
    const T* input = env_actuator_input(m, ctrl, act, e, x);
    forward_dynamics(m, qpos + long(e) * m.nq, qvel + long(e) * m.nv, input, T(0), x.w,
                     qacc + long(e) * m.nv, env_row(qfrc, e, m.nv));
  }
};

// vector-Jacobian product of KinematicsKernel: the adjoints of xpos, xmat, site_xpos, site_xmat,
// com and com_vel (each (nenv x its size), may be null: zero) -> adj_qpos and, with qvel,
// adj_qvel (overwritten)
template <class T>
struct KinematicsVjpKernel {
  using Scalar = T;
  ModelView<T> model;      // env_view gives each environment its parameters
  const T* qpos;           // (nenv x nq)
  const T* qvel;           // (nenv x nv), may be null
  const T* adj_xpos;       // (nenv x nbody x 3)
  const T* adj_xmat;       // (nenv x nbody x 9)
  const T* adj_site_xpos;  // (nenv x nsite x 3)
  const T* adj_site_xmat;  // (nenv x nsite x 9)
  const T* adj_com;        // (nenv x 3)
  const T* adj_com_vel;    // (nenv x 3)
  T* adj_qpos;             // (nenv x nq)
  T* adj_qvel;             // (nenv x nv), null without qvel

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    const ModelView<T> m = env_view(model, e);
    Arena<T> arena(scratch);
    AdjointScratch<T> x = AdjointScratch<T>::carve(m, arena);
    T* gq = adj_qpos + long(e) * m.nq;
    T* gv = env_row(adj_qvel, e, m.nv);
    for (int i = 0; i < m.nq; ++i) gq[i] = T(0);
    for (int i = 0; gv && i < m.nv; ++i) gv[i] = T(0);
    adj_kinematics_query(m, qpos + long(e) * m.nq, env_row(qvel, e, m.nv), x.w, x.a,
                         env_row(adj_xpos, e, 3 * m.nbody), env_row(adj_xmat, e, 9 * m.nbody),
                         env_row(adj_site_xpos, e, 3 * m.nsite),
                         env_row(adj_site_xmat, e, 9 * m.nsite), env_row(adj_com, e, 3),
                         env_row(adj_com_vel, e, 3), gq, gv);
  }
};

// the actuators' generalized force, gear times each actuator's force along its transmission
// (MuJoCo's qfrc_actuator); with activation state the actuators read act (nenv x na)
template <class T>
struct ActuatorForceKernel {
  using Scalar = T;
  ModelView<T> model;      // env_view gives each environment its parameters
  const T* qpos;           // (nenv x nq)
  const T* qvel;           // (nenv x nv)
  const T* ctrl;           // (nenv x nu)
  T* qfrc;                 // (nenv x nv)
  const T* act = nullptr;  // (nenv x na), may be null when na = 0

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    const ModelView<T> m = env_view(model, e);
    StepScratch<T> x = step_scratch(m, scratch);
    const T* q = qpos + long(e) * m.nq;
    const T* v = qvel + long(e) * m.nv;
    const T* input = env_actuator_input(m, ctrl, act, e, x);
    smooth_kinematics(m, q, v, x.w);
    T* out = qfrc + long(e) * m.nv;
    for (int d = 0; d < m.nv; ++d) out[d] = T(0);
    actuation(m, q, v, input, x.w, out);
  }
};

// the generalized force that produces qacc: M qacc + bias - passive, with armature in M
// (MuJoCo's qfrc_inverse); inverse of ForwardDynamicsKernel for the actuation force
template <class T>
struct InverseDynamicsKernel {
  using Scalar = T;
  ModelView<T> model;  // env_view gives each environment its parameters
  const T* qpos;  // (nenv x nq)
  const T* qvel;  // (nenv x nv)
  const T* qacc;  // (nenv x nv)
  T* tau;         // (nenv x nv)

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    const ModelView<T> m = env_view(model, e);
    Workspace<T> w = step_scratch(m, scratch).w;
    const T* q = qpos + long(e) * m.nq;
    const T* v = qvel + long(e) * m.nv;
    const T* a = qacc + long(e) * m.nv;
    T* f = tau + long(e) * m.nv;
    kinematics(m, q, w);
    com_pos(m, w);
    com_vel(m, v, w);
    rnea(m, v, a, w, f);
    tendon_kinematics(m, q, w);
    passive(m, q, v, w, w.qfrc);
    for (int d = 0; d < m.nv; ++d) f[d] += m.dof_armature[d] * a[d] - w.qfrc[d];
  }
};

// the kernels that run whole steps, and those that compute one quantity of a state (queries):
// two groups, two translation units on CUDA, compiled in parallel
#define PHX_FORWARD_KERNELS(X)                                                           \
  X(StepKernel<float>)                                                                   \
  X(StepKernel<double>) X(ConstraintForceKernel<float>) X(ConstraintForceKernel<double>) \
      X(RolloutKernel<float>) X(RolloutKernel<double>)
#define PHX_QUERY_KERNELS(X)                                                                    \
  X(MassMatrixKernel<float>)                                                                    \
  X(MassMatrixKernel<double>) X(BiasKernel<float>) X(BiasKernel<double>)                        \
      X(KinematicsKernel<float>) X(KinematicsKernel<double>) X(KinematicsVjpKernel<float>)      \
          X(KinematicsVjpKernel<double>) X(BodyReportKernel<float>) X(BodyReportKernel<double>) \
              X(RangefinderKernel<float>) X(RangefinderKernel<double>) X(DetectKernel<float>)   \
                  X(DetectKernel<double>) X(ActuatorForceKernel<float>)                         \
                      X(ActuatorForceKernel<double>) X(ForwardDynamicsKernel<float>)            \
                          X(ForwardDynamicsKernel<double>) X(InverseDynamicsKernel<float>)      \
                              X(InverseDynamicsKernel<double>)

}  // namespace phx
