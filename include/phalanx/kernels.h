// Kernel bodies: thin functors that index one environment, load, call the stage functions and
// store. The CPU backend runs them in an OpenMP loop, the CUDA backend in a generic
// __global__ shell; neither contains physics. Every batched array is env-major: entry e of an
// (nenv, n) array starts at e * n.
#pragma once

#include "phalanx/constraint_adjoint.h"
#include "phalanx/cost.h"
#include "phalanx/planner.h"
#include "phalanx/step.h"
#include "phalanx/tape.h"
#if !defined(__CUDACC__)
#include "phalanx/lane_adjoint.h"
#endif

namespace phx {

// environment e's row of n entries of an (nenv x n) array, or null for a null array
template <class P>
PHX_HD P* env_row(P* p, int e, int n) {
  return p ? p + long(e) * n : nullptr;
}

// The scratch of a forward kernel: the workspace and, when the model has constraint rows, the
// constraint workspace after it.
template <class T>
struct StepScratch {
  Workspace<T> w;
  ConstraintWorkspace<T> c{};

  template <class M>
  PHX_HD static StepScratch carve(const M& m, Arena<T>& arena) {
    StepScratch x;
    x.w = Workspace<T>::carve(m, arena);
    if (m.nefcmax > 0) x.c = ConstraintWorkspace<T>::carve(m, arena);
    return x;
  }
  PHX_HD static StepScratch carve(const ModelView<T>& m, Scratch<T> scratch) {
    Arena<T> arena(scratch);
    return carve(m, arena);
  }
};

template <class T>
PHX_HD ScratchSize scratch_size(const ModelView<T>& m) {
  return carved_size<StepScratch<T>, T>(m);
}

// one step of environment e: with contacts and limits when the model has constraint rows
template <class T>
PHX_HD PHX_DEVICE_NOINLINE unsigned step_env(const ModelView<T>& m, int e, T* qpos, T* qvel,
                                             const T* ctrl, Workspace<T>& w,
                                             ConstraintWorkspace<T>& c, const ContactData<T>& con,
                                             const T* qfrc_applied = nullptr) {
  if (m.nefcmax == 0) return step(m, qpos, qvel, ctrl, w, qfrc_applied);
  ContactView<T> cv = con.env(m, e);
  return step_constrained(m, qpos, qvel, ctrl, w, c, cv, {}, qfrc_applied);
}

// nstep Euler steps of each environment, state updated in place; ctrl held constant
template <class T>
struct StepKernel {
  using Scalar = T;
  ModelView<T> model;  // env_view gives each environment its parameters
  T* qpos;           // (nenv x nq)
  T* qvel;           // (nenv x nv)
  const T* ctrl;     // (nenv x nu)
  unsigned* status;  // (nenv) OR-ed with the step's status bits
  int nstep;
  ContactData<T> con;  // contacts and constraint impulses (unused without constraints)
  const T* qfrc_applied = nullptr;  // (nenv x nv) added generalized forces, may be null

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    const ModelView<T> m = env_view(model, e);
    StepScratch<T> x = StepScratch<T>::carve(m, scratch);
    const T* f = env_row(qfrc_applied, e, m.nv);
    unsigned s = 0;
    for (int t = 0; t < nstep && !(s & kStatusStopMask); ++t) {
      s |= step_env(m, e, qpos + long(e) * m.nq, qvel + long(e) * m.nv, ctrl + long(e) * m.nu,
                    x.w, x.c, con, f);
    }
    status[e] |= s;
  }
};

// T steps with a control sequence, recording the states after each step. An environment
// whose status gets a stopping bit (non-finite values) stops and repeats its last state.
template <class T>
struct RolloutKernel {
  using Scalar = T;
  ModelView<T> model;  // env_view gives each environment its parameters
  T* qpos;           // (nenv x nq) initial state in, final state out
  T* qvel;           // (nenv x nv)
  const T* ctrl;     // (nenv x nstep x nu)
  T* qpos_out;       // (nenv x nstep x nq), may be null
  T* qvel_out;       // (nenv x nstep x nv), may be null
  unsigned* status;  // (nenv)
  int nstep;
  ContactData<T> con;  // contacts and constraint impulses (unused without constraints)
  int* counts_out;     // (nenv x nstep x kNumCounts) counts of each step, may be null
  TapeView<T> tape;    // checkpoints every tape.every steps; tape.every = 0: none

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    const ModelView<T> m = env_view(model, e);
    StepScratch<T> x = StepScratch<T>::carve(m, scratch);
    T* q = qpos + long(e) * m.nq;
    T* v = qvel + long(e) * m.nv;
    unsigned s = status[e];
    ContactView<T> cv{};
    if (m.nefcmax > 0) cv = con.env(m, e);
    int peak_con = 0, peak_row = 0;
    for (int t = 0; t < nstep; ++t) {
      if (tape.every > 0 && t % tape.every == 0)
        tape.checkpoints(m, e).save(m, t / tape.every, q, v, cv);
      if (!(s & kStatusStopMask)) {
        s |= step_env(m, e, q, v, ctrl + (long(e) * nstep + t) * m.nu, x.w, x.c, con);
        if (m.nefcmax > 0) {
          peak_con = *cv.ncon > peak_con ? *cv.ncon : peak_con;
          peak_row = *cv.nefc > peak_row ? *cv.nefc : peak_row;
        }
      }
      if (qpos_out) {
        for (int i = 0; i < m.nq; ++i) qpos_out[(long(e) * nstep + t) * m.nq + i] = q[i];
      }
      if (qvel_out) {
        for (int i = 0; i < m.nv; ++i) qvel_out[(long(e) * nstep + t) * m.nv + i] = v[i];
      }
      if (counts_out) {
        int* c = counts_out + kNumCounts * (long(e) * nstep + t);
        bool on = m.nefcmax > 0;
        c[kCountContacts] = on ? con.ncon[e] : 0;
        c[kCountRows] = on ? con.nefc[e] : 0;
        c[kCountWarmRows] = on ? con.nwarm[e] : 0;
        c[kCountSetHit] = on ? con.set_hit[e] : 0;
        c[kCountOverflow] = on ? con.overflow[e] : 0;
      }
    }
    status[e] = s;
    if (tape.every > 0) {
      tape.status[e] = s;
      tape.peak[2 * e] = peak_con;
      tape.peak[2 * e + 1] = peak_row;
    }
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
    Workspace<T> w = StepScratch<T>::carve(m, scratch).w;
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
    Workspace<T> w = StepScratch<T>::carve(m, scratch).w;
    kinematics(m, qpos + long(e) * m.nq, w);
    com_pos(m, w);
    com_vel(m, qvel + long(e) * m.nv, w);
    rnea(m, qvel + long(e) * m.nv, static_cast<const T*>(nullptr), w, bias + long(e) * m.nv);
  }
};

// body frames and the centre of mass: xpos (nenv x nbody x 3), xquat (nenv x nbody x 4), com
// (nenv x 3) and, when qvel is non-null, its velocity com_vel (nenv x 3) (cost.h)
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

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    const ModelView<T> m = env_view(model, e);
    Workspace<T> w = StepScratch<T>::carve(m, scratch).w;
    cost_kinematics(m, kCostNeedsKinematics | kCostNeedsComPos | (qvel ? kCostNeedsComVel : 0),
                    qpos + long(e) * m.nq, env_row(qvel, e, m.nv), w);
    for (int i = 0; i < 3 * m.nbody; ++i) xpos[long(e) * 3 * m.nbody + i] = w.xpos[i];
    for (int i = 0; i < 4 * m.nbody; ++i) xquat[long(e) * 4 * m.nbody + i] = w.xquat[i];
    com_position(m, w).store(com + 3L * e);
    if (qvel) com_velocity(m, w).store(com_vel + 3L * e);
  }
};

// qacc = (M + diag(armature))^-1 (passive + actuation - bias), MuJoCo's qacc without
// constraints
template <class T>
struct ForwardDynamicsKernel {
  using Scalar = T;
  ModelView<T> model;  // env_view gives each environment its parameters
  const T* qpos;  // (nenv x nq)
  const T* qvel;  // (nenv x nv)
  const T* ctrl;  // (nenv x nu)
  T* qacc;        // (nenv x nv)

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    const ModelView<T> m = env_view(model, e);
    Workspace<T> w = StepScratch<T>::carve(m, scratch).w;
    forward_dynamics(m, qpos + long(e) * m.nq, qvel + long(e) * m.nv, ctrl + long(e) * m.nu, T(0),
                     w, qacc + long(e) * m.nv);
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
    Workspace<T> w = StepScratch<T>::carve(m, scratch).w;
    const T* q = qpos + long(e) * m.nq;
    const T* v = qvel + long(e) * m.nv;
    const T* a = qacc + long(e) * m.nv;
    T* f = tau + long(e) * m.nv;
    kinematics(m, q, w);
    com_pos(m, w);
    com_vel(m, v, w);
    rnea(m, v, a, w, f);
    passive(m, q, v, w.qfrc);
    for (int d = 0; d < m.nv; ++d) f[d] += m.dof_armature[d] * a[d] - w.qfrc[d];
  }
};

// One environment's scratch for a step adjoint: the forward scratch (workspace, constraint
// workspace), then the adjoint workspace and, with constraint rows, its constraint part.
template <class T>
struct AdjointScratch {
  Workspace<T> w;
  ConstraintWorkspace<T> c{};
  AdjWorkspace<T> a;
  AdjConstraintWorkspace<T> s{};

  template <class M>
  PHX_HD static AdjointScratch carve(const M& m, Arena<T>& arena) {
    AdjointScratch x;
    StepScratch<T> forward = StepScratch<T>::carve(m, arena);
    x.w = forward.w;
    x.c = forward.c;
    x.a = AdjWorkspace<T>::carve(m, arena);
    if (m.nefcmax > 0) x.s = AdjConstraintWorkspace<T>::carve(m, arena);
    return x;
  }
};

template <class T>
PHX_HD ScratchSize adjoint_scratch_size(const ModelView<T>& m) {
  return carved_size<AdjointScratch<T>, T>(m);
}

// StepJacobianKernel's scratch: a step adjoint's, then (with rows) the LCP adjoint's
// factorisation its rows share (bound into x.s) and the replay's contact arrays, then the
// seeds of a reverse pass (nq + nv)
template <class T>
struct JacobianScratch {
  AdjointScratch<T> x;
  ContactView<T> cv{};
  T* seed;

  template <class M>
  PHX_HD static JacobianScratch carve(const M& m, Arena<T>& arena) {
    JacobianScratch j;
    j.x = AdjointScratch<T>::carve(m, arena);
    if (m.nefcmax > 0) {
      j.x.s.bind_factor(m, arena);
      j.cv = ContactView<T>::carve(m, arena);
    }
    j.seed = arena.template take<T>(m.nq + m.nv);
    return j;
  }
};

template <class T>
PHX_HD ScratchSize jacobian_scratch_size(const ModelView<T>& m) {
  return carved_size<JacobianScratch<T>, T>(m);
}

// environment e's slices of per-environment parameter adjoint arrays, zeroed (null stays null)
template <class T>
PHX_HD void env_parameter_adjoints(const ModelView<T>& m, int e, const ModelAdjoint<T>& all,
                                   const ContactModelAdjoint<T>& all_contact, ModelAdjoint<T>& am,
                                   ContactModelAdjoint<T>& ac) {
  ModelAdjoint<T> all_model = all;
  ContactModelAdjoint<T> all_con = all_contact;
  for (int k = 0; k < kNumParams; ++k) {
    T* p = param_adjoint(all_model, all_con, k);
    long n = param_size(m, k);
    T*& r = param_adjoint(am, ac, k);
    r = p ? p + e * n : nullptr;
    for (long i = 0; r && i < n; ++i) r[i] = T(0);
  }
}

// the adjoint of one step of an environment (step_env's), accumulated into gq, gv, gc, am, ac
// and gf (the adjoint of qfrc_applied, the step's added generalized force; either may be null);
// cv holds the warm start the step inherited (unused without constraint rows)
template <class T>
PHX_HD PHX_DEVICE_NOINLINE unsigned adj_step_env(const ModelView<T>& m, const T* q, const T* v,
                                                 const T* u, AdjointScratch<T>& x,
                                                 ContactView<T>& cv, const T* gq_next,
                                                 const T* gv_next, T* gq, T* gv, T* gc,
                                                 const ModelAdjoint<T>& am,
                                                 const ContactModelAdjoint<T>& ac,
                                                 T* gf = nullptr, LcpSolution<T> known = {},
                                                 const T* qfrc_applied = nullptr) {
  if (m.nefcmax == 0) {
    adj_step(m, q, v, u, x.w, x.a, gq_next, gv_next, gq, gv, gc, am, gf, qfrc_applied);
    return 0;
  }
  return adj_step_constrained(m, q, v, u, x.w, x.c, cv, x.a, x.s, gq_next, gv_next, gq, gv, gc,
                              am, ac, gf, known, qfrc_applied);
}

// vector-Jacobian product of one step: (adj_qpos_next, adj_qvel_next) at (qpos, qvel, ctrl)
// -> adjoints of the inputs and, per environment, of the model parameters (null skips one).
// The step is replayed from the warm start in con (a cold start when it holds no rows).
template <class T>
struct StepAdjointKernel {
  using Scalar = T;
  ModelView<T> model;  // env_view gives each environment its parameters
  const T* qpos;           // (nenv x nq)
  const T* qvel;           // (nenv x nv)
  const T* ctrl;           // (nenv x nu)
  const T* adj_qpos_next;  // (nenv x nq)
  const T* adj_qvel_next;  // (nenv x nv)
  T* adj_qpos;             // (nenv x nq), overwritten
  T* adj_qvel;             // (nenv x nv), overwritten
  T* adj_ctrl;             // (nenv x nu), overwritten
  ModelAdjoint<T> adj_model;          // per-env arrays (nenv x field size), overwritten
  ContactModelAdjoint<T> adj_contact; // per-env arrays (nenv x field size), overwritten
  ContactData<T> con;                 // contact storage of the replay (with constraints)
  T* adj_qfrc_applied = nullptr;      // (nenv x nv), overwritten; may be null
  const T* qfrc_applied = nullptr;    // (nenv x nv) the steps' added forces, may be null

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    const ModelView<T> m = env_view(model, e);
    Arena<T> arena(scratch);
    AdjointScratch<T> x = AdjointScratch<T>::carve(m, arena);
    T* gq = adj_qpos + long(e) * m.nq;
    T* gv = adj_qvel + long(e) * m.nv;
    T* gc = adj_ctrl + long(e) * m.nu;
    for (int i = 0; i < m.nq; ++i) gq[i] = T(0);
    for (int i = 0; i < m.nv; ++i) gv[i] = T(0);
    for (int i = 0; i < m.nu; ++i) gc[i] = T(0);
    ModelAdjoint<T> am;
    ContactModelAdjoint<T> ac;
    env_parameter_adjoints(m, e, adj_model, adj_contact, am, ac);
    ContactView<T> cv{};
    if (m.nefcmax > 0) cv = con.env(m, e);
    T* gf = env_row(adj_qfrc_applied, e, m.nv);
    for (int i = 0; gf && i < m.nv; ++i) gf[i] = T(0);
    adj_step_env(m, qpos + long(e) * m.nq, qvel + long(e) * m.nv, ctrl + long(e) * m.nu, x, cv,
                 adj_qpos_next + long(e) * m.nq, adj_qvel_next + long(e) * m.nv, gq, gv, gc, am,
                 ac, gf, {}, env_row(qfrc_applied, e, m.nv));
  }
};

// One-step Jacobians from the adjoints: the step is replayed once from a cold start, then one
// reverse pass per row of qvel' with a unit seed reuses it (adj_step_constrained_replayed).
// The rows of qpos' = integrate(qpos, qvel') follow from them by the chain rule,
//   d qpos'_r / dx = (d qpos'_r / d qpos)|direct + (d qpos'_r / d qvel') d qvel' / dx,
// both factors from adj_integrate_pos with seed e_r, when the step's adjoint is linear in its
// seed; with either contact-gradient option it is not (the classification or the bounce
// correction depends on the seed), and each row of qpos' gets its own reverse pass too.
// Row r of jac (nenv x (nq + nv) x (nq + nv + nu + nv)) holds
// d out_r / d(qpos, qvel, ctrl, qfrc), qfrc the generalized force added to the step's applied
// forces (qfrc_applied, zero when null); row r of jac_param (nenv x (nq + nv) x
// jacobian_nparam, may be null) holds d out_r / d(parameters) in Param order.
template <class T>
struct StepJacobianKernel {
  using Scalar = T;
  ModelView<T> model;  // env_view gives each environment its parameters
  const T* qpos;  // (nenv x nq)
  const T* qvel;  // (nenv x nv)
  const T* ctrl;  // (nenv x nu)
  T* jac;         // (nenv x (nq + nv) x (nq + 2 nv + nu)), overwritten
  T* jac_param;   // (nenv x (nq + nv) x jacobian_nparam), overwritten; may be null
  const T* qfrc_applied = nullptr;  // (nenv x nv) the step's added forces, may be null
  // host: the rows of qvel' kLanes<T> at a time (lane_adjoint.h), in lane_scratch_size's
  // storage past jacobian_scratch_size's (CUDA: one row per pass)
  bool lanes = false;
  // host, may be null: the LaneModel<T> of model, which the lane passes of a step without rows
  // (LaneDynamicsReplay) of environments without per-environment parameters take instead of
  // broadcasting the model per call
  const void* lane_model = nullptr;

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    const ModelView<T> m = env_view(model, e);
    const int rows = m.nq + m.nv, cols = m.nq + 2 * m.nv + m.nu, np = jacobian_nparam(m);
    const T* f = env_row(qfrc_applied, e, m.nv);
    Arena<T> arena(scratch);
    JacobianScratch<T> js = JacobianScratch<T>::carve(m, arena);
    AdjointScratch<T>& x = js.x;
    ContactView<T>& cv = js.cv;
    T* w = js.seed;
    const T* q = qpos + long(e) * m.nq;
    const T* v = qvel + long(e) * m.nv;
    const T* u = ctrl + long(e) * m.nu;
    bool stopped = false;
    if (m.nefcmax == 0) {
      // the forward every row's reverse pass reuses (adj_step_replayed), and qvel' for the
      // rows of qpos' (qpos_rows; the lane passes leave x.a alone)
      forward_dynamics(m, q, v, u, m.timestep, x.w, x.w.qacc, f);
      for (int d = 0; d < m.nv; ++d) x.a.qvel_next[d] = v[d] + m.timestep * x.w.qacc[d];
    } else {
      // the replay every row reuses: cold start, as step() from Python
      *cv.nefc = 0;
      for (int i = 0; i < m.nq; ++i) x.s.qpos_next[i] = q[i];
      for (int i = 0; i < m.nv; ++i) x.s.qvel_next[i] = v[i];
      stopped = step_constrained(m, x.s.qpos_next, x.s.qvel_next, u, x.w, x.c, cv, {}, f) &
                kStatusStopMask;
      if (!stopped) adj_constrained_prepare(m, x.c, cv, x.s);
    }
    const bool linear = !(m.contact_gradient & (kGradComplementarityAware | kGradBounceCorrection));
    int first = linear ? m.nq : 0;  // rows computed by single passes: [first, rows)
#if !defined(__CUDACC__)
    if (lanes && linear && !stopped) {
      // a last row alone takes the scalar pass below (a third of a lane pass's time)
      const int nl = m.nv % kLanes<T> == 1 ? m.nv - 1 : m.nv;
      const Scratch<T> rest = arena.rest();  // lane_scratch_size(m)
      const auto* shared = lane_model && LaneModel<T>::shared(model)
                               ? &static_cast<const LaneModel<T>*>(lane_model)->view
                               : nullptr;
      if (nl > 0 && m.nefcmax > 0 && *cv.nefc > 0) {
        lane_rows(m, e, LaneReplay<T>(m, rest, q, v, u, x.w, x.c, cv, x.s), nl);
      } else if (nl > 0) {
        // no rows: the step was forward_dynamics' (step_constrained leaves the same)
        lane_rows(m, e, LaneDynamicsReplay<T>(m, shared, rest, q, v, u, x.w), nl);
      }
      first = m.nq + nl;
    }
#endif
    for (int r = first; r < rows; ++r) {
      for (int i = 0; i < rows; ++i) w[i] = T(i == r);
      T* row = jac + (long(e) * rows + r) * cols;
      for (int i = 0; i < cols; ++i) row[i] = T(0);
      ModelAdjoint<T> am{};
      ContactModelAdjoint<T> ac{};
      if (jac_param) {
        T* p = jac_param + (long(e) * rows + r) * np;
        for (int i = 0; i < np; ++i) p[i] = T(0);
        for (int k = 0; k < kNumParams; p += param_size(m, k), ++k) param_adjoint(am, ac, k) = p;
      }
      if (stopped) continue;  // zero rows, as step_vjp gives
      if (m.nefcmax == 0) {
        adj_step_replayed(m, q, v, u, x.w, x.a, w, w + m.nq, row, row + m.nq, row + m.nq + m.nv,
                          am, row + m.nq + m.nv + m.nu);
      } else {
        adj_step_constrained_replayed(m, q, v, u, x.w, x.c, cv, x.a, x.s, w, w + m.nq, row,
                                      row + m.nq, row + m.nq + m.nv, am, ac,
                                      row + m.nq + m.nv + m.nu);
      }
    }
    if (linear) qpos_rows(m, e, q, m.nefcmax > 0 ? x.s.qvel_next : x.a.qvel_next, stopped, w);
  }

#if !defined(__CUDACC__)
  // storage of the lane replays, past jacobian_scratch_size's
  static ScratchSize lane_scratch_size(const ModelView<T>& m) {
    ScratchSize a = LaneReplay<T>::size(m), b = LaneDynamicsReplay<T>::size(m);
    return {a.reals > b.reals ? a.reals : b.reals, a.ints > b.ints ? a.ints : b.ints};
  }

  // the first nl rows of qvel' of jac and jac_param, kLanes<T> per reverse pass of the replay
  // lr (a LaneReplay or LaneDynamicsReplay)
  template <class Replay>
  void lane_rows(const ModelView<T>& m, int e, Replay&& lr, int nl) const {
    const int rows = m.nq + m.nv, cols = m.nq + 2 * m.nv + m.nu;
    const int np = jac_param ? jacobian_nparam(m) : 0;
    constexpr int W = kLanes<T>;
    for (int d0 = 0; d0 < nl; d0 += W) {
      const int n = nl - d0 < W ? nl - d0 : W;
      lr.run(d0, n, np > 0);
      for (int k = 0; k < n; ++k) {
        const long r = long(e) * rows + m.nq + d0 + k;
        T* row = jac + r * cols;
        for (int i = 0; i < cols; ++i) row[i] = lr.out[i][k];
        T* prow = np ? jac_param + r * np : nullptr;
        for (int i = 0; i < np; ++i) prow[i] = lr.out[cols + i][k];
      }
    }
  }
#endif

  // rows 0..nq of jac and jac_param from the rows of qvel' (the replayed qvel_next), w scratch:
  // a row of qpos' moves with its joint's coordinates and dofs alone, so each row's pass runs
  // on its joint
  PHX_HD void qpos_rows(const ModelView<T>& m, int e, const T* q, const T* qvel_next,
                        bool stopped, T* w) const {
    const int rows = m.nq + m.nv, cols = m.nq + 2 * m.nv + m.nu, np = jacobian_nparam(m);
    T* u = w + m.nq;  // d qpos'_r / d qvel'
    for (int i = 0; i < m.nq; ++i) w[i] = T(0);
    for (int d = 0; d < m.nv; ++d) u[d] = T(0);
    for (int j = 0; j < m.njnt; ++j) {
      const int qa = m.jnt_qposadr[j], da = m.jnt_dofadr[j], type = m.jnt_type[j];
      for (int r = qa; r < qa + joint_nq(type); ++r) {
        T* row = jac + (long(e) * rows + r) * cols;
        T* prow = jac_param ? jac_param + (long(e) * rows + r) * np : nullptr;
        for (int i = 0; i < cols; ++i) row[i] = T(0);
        for (int i = 0; prow && i < np; ++i) prow[i] = T(0);
        if (stopped) continue;
        w[r] = T(1);
        adj_integrate_pos(m, q, qvel_next, m.timestep, w, row, u, j, j + 1);
        w[r] = T(0);
        for (int d = da; d < da + joint_nv(type); ++d) {
          const T* vrow = jac + (long(e) * rows + m.nq + d) * cols;
          for (int i = 0; i < cols; ++i) row[i] += u[d] * vrow[i];
          if (prow) {
            const T* vprow = jac_param + (long(e) * rows + m.nq + d) * np;
            for (int i = 0; i < np; ++i) prow[i] += u[d] * vprow[i];
          }
          u[d] = T(0);
        }
      }
    }
  }
};

// RolloutAdjointKernel's scratch: a step adjoint's, then nslot StepStore slots with room for
// ncon contacts and nrow rows each
template <class T>
struct RolloutAdjointScratch {
  AdjointScratch<T> x;
  StepStore<T> store{};

  PHX_HD static RolloutAdjointScratch carve(const ModelView<T>& m, Arena<T>& arena, int nslot,
                                            int ncon, int nrow) {
    RolloutAdjointScratch r;
    r.x = AdjointScratch<T>::carve(m, arena);
    if (nslot > 0) {
      ScratchSize slot = StepStore<T>::slot_size(m, ncon, nrow);
      r.store = {arena.template take<T>(nslot * slot.reals),
                 arena.template take<int>(nslot * slot.ints), ncon, nrow};
    }
    return r;
  }
};

template <class T>
PHX_HD ScratchSize rollout_adjoint_scratch_size(const ModelView<T>& m, int nslot, int ncon,
                                                int nrow) {
  return carved_size<RolloutAdjointScratch<T>, T>(m, nslot, ncon, nrow);
}

// The backward pass of a rollout recorded on a tape (tape.h): from the loss gradients with
// respect to every step's state to those of the initial state, of every step's control and,
// per environment, of the model parameters. Segments are taken last to first: recomputed
// forward from their checkpoint into the segment buffer (skipped when every step is a
// checkpoint), then walked backward from each step's record. With slots (nslot = K, a model
// with rows and K > 1) the recomputation keeps what each step's reverse pass reads
// (StepStore), and the walk runs adj_step_constrained_replayed on it; without, adj_step_env
// replays each step. Both give the same bits. An environment whose rollout stopped (a
// stopping status bit) gets zero gradients.
template <class T>
struct RolloutAdjointKernel {
  using Scalar = T;
  ModelView<T> model;  // env_view gives each environment its parameters
  TapeView<T> tape;
  const T* ctrl;          // (nenv x nstep x nu) the rollout's controls
  const T* adj_qpos_out;  // (nenv x nstep x nq) dL / d(qpos after each step), may be null
  const T* adj_qvel_out;  // (nenv x nstep x nv), may be null
  T* adj_qpos;            // (nenv x nq) dL / d(initial qpos), overwritten
  T* adj_qvel;            // (nenv x nv)
  T* adj_ctrl;            // (nenv x nstep x nu), overwritten
  ModelAdjoint<T> adj_model;          // per-env arrays (nenv x field size), overwritten
  ContactModelAdjoint<T> adj_contact; // per-env arrays (nenv x field size), overwritten
  ContactData<T> con;                 // contact storage of the replay
  T* buf;                             // (nenv x 3 (nq + nv)) state and adjoint scratch
  int nslot = 0;                      // StepStore slots past the adjoint scratch: 0 or K
  int slot_ncon = 0, slot_nrow = 0;   // their room (the tape's peaks)

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    const ModelView<T> m = env_view(model, e);
    const int nq = m.nq, nv = m.nv, nu = m.nu, T_ = tape.nstep, K = tape.every;
    Arena<T> arena(scratch);
    RolloutAdjointScratch<T> r =
        RolloutAdjointScratch<T>::carve(m, arena, nslot, slot_ncon, slot_nrow);
    AdjointScratch<T>& x = r.x;
    const StepStore<T>& store = r.store;
    T* q = buf + long(e) * 3 * (nq + nv);
    T* v = q + nq;
    T* gq = v + nv;  // adjoint of the state after the current step
    T* gv = gq + nq;
    T* hq = gv + nv;  // adjoint of the state before it
    T* hv = hq + nq;
    for (int i = 0; i < nq; ++i) gq[i] = T(0);
    for (int i = 0; i < nv; ++i) gv[i] = T(0);
    for (long i = 0; i < long(T_) * nu; ++i) adj_ctrl[long(e) * T_ * nu + i] = T(0);
    ModelAdjoint<T> am;
    ContactModelAdjoint<T> ac;
    env_parameter_adjoints(m, e, adj_model, adj_contact, am, ac);
    if (!(tape.status[e] & kStatusStopMask)) {
      ContactView<T> cv{};
      if (m.nefcmax > 0) cv = con.env(m, e);
      TapeRecords<T> check = tape.checkpoints(m, e);
      for (int seg = tape.nseg() - 1; seg >= 0; --seg) {
        int t0 = seg * K, t1 = t0 + K < T_ ? t0 + K : T_;
        // the records of this segment's steps: the checkpoints themselves when K = 1
        TapeRecords<T> rec = check;
        int base = seg;
        if (K > 1) {
          rec = tape.segment(m, e);
          base = 0;
          check.load(m, seg, q, v, cv);
          for (int t = t0; t < t1; ++t) {
            const T* u = ctrl + (long(e) * T_ + t) * nu;
            rec.save(m, t - t0, q, v, cv);
            if (store.reals) {
              // every step into its slot, the last from the next checkpoint's warm start (its
              // LCP solution), as the replay would
              LcpSolution<T> known{};
              if (t + 1 == t1 && t1 < T_) known = check.solution(m, seg + 1);
              step_constrained(m, q, v, u, x.w, x.c, cv, known);
              store.save(m, t - t0, x.w, x.c, cv, q, v);
            } else if (t + 1 < t1) {
              step_env(m, e, q, v, u, x.w, x.c, con);
            }
          }
        }
        for (int t = t1 - 1; t >= t0; --t) {
          long st = long(e) * T_ + t;
          if (adj_qpos_out)
            for (int i = 0; i < nq; ++i) gq[i] += adj_qpos_out[st * nq + i];
          if (adj_qvel_out)
            for (int i = 0; i < nv; ++i) gv[i] += adj_qvel_out[st * nv + i];
          for (int i = 0; i < nq; ++i) hq[i] = T(0);
          for (int i = 0; i < nv; ++i) hv[i] = T(0);
          if (store.reals && store.holds(m, t - t0)) {
            rec.load_state(m, base + t - t0, q, v);
            typename StepStore<T>::Slot f = store.slot(m, t - t0, x.c);
            for (int i = 0; i < nq; ++i) x.s.qpos_next[i] = f.qpos_next[i];
            for (int i = 0; i < nv; ++i) x.s.qvel_next[i] = f.qvel_next[i];
            adj_step_constrained_replayed(m, q, v, ctrl + st * nu, f.w, f.c, f.cv, x.a, x.s, gq,
                                          gv, hq, hv, adj_ctrl + st * nu, am, ac,
                                          static_cast<T*>(nullptr));
          } else {
            rec.load(m, base + t - t0, q, v, cv);
            // the step's own LCP solution is the next record's warm start: the replay skips
            // the solver (the last step of the rollout has no next record and solves)
            LcpSolution<T> known{};
            if (m.nefcmax > 0 && t + 1 < t1) known = rec.solution(m, base + t + 1 - t0);
            if (m.nefcmax > 0 && t + 1 == t1 && t1 < T_) known = check.solution(m, seg + 1);
            adj_step_env(m, q, v, ctrl + st * nu, x, cv, gq, gv, hq, hv, adj_ctrl + st * nu, am,
                         ac, static_cast<T*>(nullptr), known);
          }
          for (int i = 0; i < nq; ++i) gq[i] = hq[i];
          for (int i = 0; i < nv; ++i) gv[i] = hv[i];
        }
      }
    }
    for (int i = 0; i < nq; ++i) adj_qpos[long(e) * nq + i] = gq[i];
    for (int i = 0; i < nv; ++i) adj_qvel[long(e) * nv + i] = gv[i];
  }
};

// ---- costs and sampling planners (cost.h, planner.h) ----------------------------------------

// The cost of each of nenv stored rollouts (trajectory_cost) and, when adj_qs is non-null, its
// gradients with respect to every state and control (adj_trajectory_cost). Scratch: a
// workspace, then an adjoint workspace (CostScratch).
template <class T>
struct CostScratch {
  Workspace<T> w;
  AdjWorkspace<T> a;

  template <class M>
  PHX_HD static CostScratch carve(const M& m, Arena<T>& arena) {
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
// eps), its rollout from the problem's state (contacts start cold) and its cost, accumulated
// step by step (running terms on the state after each step, terminal terms on the last), and
// optionally its trajectory (for costs evaluated elsewhere). A sample whose physics stops costs
// +inf and repeats its last state.
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
  T* qs_out;         // (nsamples x horizon x nq) state after each step, may be null
  T* vs_out;         // (nsamples x horizon x nv), may be null

  PHX_HD void operator()(int s, Scratch<T> scratch) const {
    const ModelView<T> m = env_view(model, s);
    StepScratch<T> x = StepScratch<T>::carve(m, scratch);
    int p = s / spec.nsample, k = s % spec.nsample, H = spec.horizon, nu = m.nu;
    long u0 = long(s) * H * nu;
    const T* up = plan + long(p) * H * nu;
    const T* sd = sigma + long(p) * H * nu;
    planner_noise(spec.seed, uint32_t(s), spec.stream, H, nu, static_cast<const T*>(nullptr),
                  T(spec.beta), eps + u0);
    for (int j = 0; j < H * nu; ++j)
      eps[u0 + j] = spec.include_nominal && k == 0 ? T(0) : sd[j] * eps[u0 + j];
    planner_controls(H, nu, up, lo, hi, eps + u0, ctrl + u0);
    T* q = qpos + long(s) * m.nq;
    T* v = qvel + long(s) * m.nv;
    for (int i = 0; i < m.nq; ++i) q[i] = qpos0[long(p) * m.nq + i];
    for (int i = 0; i < m.nv; ++i) v[i] = qvel0[long(p) * m.nv + i];
    if (m.nefcmax > 0) con.nefc[s] = 0;  // cold start
    unsigned st = 0;
    T c(0);
    for (int t = 0; t < H; ++t) {
      const T* u = ctrl + u0 + long(t) * nu;
      if (!(st & kStatusStopMask)) {
        st |= step_env(m, s, q, v, u, x.w, x.c, con);
        if (cost.nterm) c += stage_cost(m, cost, q, v, u, T(1), t == H - 1 ? T(1) : T(0), x.w);
      }
      if (qs_out)
        for (int i = 0; i < m.nq; ++i) qs_out[(long(s) * H + t) * m.nq + i] = q[i];
      if (vs_out)
        for (int i = 0; i < m.nv; ++i) vs_out[(long(s) * H + t) * m.nv + i] = v[i];
    }
    status[s] = st;
    value[s] = (st & kStatusStopMask) || c != c ? T(INFINITY) : c;
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

// every kernel instantiated by the backends, for each scalar type, in the groups the CUDA
// backend compiles as separate translation units (cuda/kernels_*.cu)
#define PHX_FORWARD_KERNELS(X)                                          \
  X(StepKernel<float>) X(StepKernel<double>)                            \
  X(RolloutKernel<float>) X(RolloutKernel<double>)                      \
  X(MassMatrixKernel<float>) X(MassMatrixKernel<double>)                \
  X(BiasKernel<float>) X(BiasKernel<double>)                            \
  X(KinematicsKernel<float>) X(KinematicsKernel<double>)                \
  X(ForwardDynamicsKernel<float>) X(ForwardDynamicsKernel<double>)      \
  X(InverseDynamicsKernel<float>) X(InverseDynamicsKernel<double>)
#define PHX_STEP_ADJOINT_KERNELS(X) X(StepAdjointKernel<float>) X(StepAdjointKernel<double>)
#define PHX_ROLLOUT_ADJOINT_KERNELS(X) \
  X(RolloutAdjointKernel<float>) X(RolloutAdjointKernel<double>)
#define PHX_STEP_JACOBIAN_KERNELS(X) X(StepJacobianKernel<float>) X(StepJacobianKernel<double>)
#define PHX_PLANNER_KERNELS(X)                                          \
  X(TrajectoryCostKernel<float>) X(TrajectoryCostKernel<double>)        \
  X(PlannerRolloutKernel<float>) X(PlannerRolloutKernel<double>)        \
  X(SegmentReduceKernel<float>) X(SegmentReduceKernel<double>)          \
  X(SegmentSmallestKernel<float>) X(SegmentSmallestKernel<double>)      \
  X(MppiWeightKernel<float>) X(MppiWeightKernel<double>)                \
  X(MppiNormalizeKernel<float>) X(MppiNormalizeKernel<double>)          \
  X(MppiUpdateEntryKernel<float>) X(MppiUpdateEntryKernel<double>)      \
  X(CemRefitEntryKernel<float>) X(CemRefitEntryKernel<double>)
#define PHX_FOR_EACH_KERNEL(X)  \
  PHX_FORWARD_KERNELS(X)        \
  PHX_PLANNER_KERNELS(X)        \
  PHX_STEP_ADJOINT_KERNELS(X)   \
  PHX_ROLLOUT_ADJOINT_KERNELS(X) \
  PHX_STEP_JACOBIAN_KERNELS(X)

}  // namespace phx
