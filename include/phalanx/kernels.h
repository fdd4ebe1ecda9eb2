// Kernel bodies: thin functors that index one environment, load, call the stage functions and
// store. The CPU backend runs them in an OpenMP loop, the CUDA backend in a generic
// __global__ shell; neither contains physics. Every batched array is env-major: entry e of an
// (nenv, n) array starts at e * n.
#pragma once

#include "phalanx/constraint_adjoint.h"
#include "phalanx/step.h"

namespace phx {

// scratch one environment's forward kernels need: the workspace and, when the model has
// constraint rows, the constraint workspace after it
template <class T>
PHX_HD ScratchSize scratch_size(const ModelView<T>& m) {
  ScratchSize s{Workspace<T>::size(m.nbody, m.njnt, m.nv), 0};
  if (m.nefcmax > 0) {
    ScratchSize c = ConstraintWorkspace<T>::size(m);
    s.reals += c.reals;
    s.ints += c.ints;
  }
  return s;
}

// one step of environment e: with contacts and limits when the model has constraint rows
template <class T>
PHX_HD unsigned step_env(const ModelView<T>& m, int e, T* qpos, T* qvel, const T* ctrl,
                         Workspace<T>& w, Scratch<T> scratch, const ContactData<T>& con) {
  if (m.nefcmax == 0) return step(m, qpos, qvel, ctrl, w);
  ConstraintWorkspace<T> c = ConstraintWorkspace<T>::carve(
      m, scratch.reals + Workspace<T>::size(m.nbody, m.njnt, m.nv), scratch.ints);
  ContactView<T> cv = con.env(m, e);
  return step_constrained(m, qpos, qvel, ctrl, w, c, cv);
}

template <class T>
PHX_HD Workspace<T> make_workspace(const ModelView<T>& m, T* scratch) {
  return Workspace<T>::carve(scratch, m.nbody, m.njnt, m.nv);
}

// nstep Euler steps of each environment, state updated in place; ctrl held constant
template <class T>
struct StepKernel {
  using Scalar = T;
  ModelView<T> m;
  T* qpos;           // (nenv x nq)
  T* qvel;           // (nenv x nv)
  const T* ctrl;     // (nenv x nu)
  unsigned* status;  // (nenv) OR-ed with the step's status bits
  int nstep;
  ContactData<T> con;  // contacts and constraint impulses (unused without constraints)

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    Workspace<T> w = make_workspace(m, scratch.reals);
    unsigned s = 0;
    for (int t = 0; t < nstep && !(s & kStatusStopMask); ++t) {
      s |= step_env(m, e, qpos + long(e) * m.nq, qvel + long(e) * m.nv, ctrl + long(e) * m.nu, w,
                    scratch, con);
    }
    status[e] |= s;
  }
};

// T steps with a control sequence, recording the states after each step. An environment
// whose status gets a stopping bit (non-finite values) stops and repeats its last state.
template <class T>
struct RolloutKernel {
  using Scalar = T;
  ModelView<T> m;
  T* qpos;           // (nenv x nq) initial state in, final state out
  T* qvel;           // (nenv x nv)
  const T* ctrl;     // (nenv x nstep x nu)
  T* qpos_out;       // (nenv x nstep x nq), may be null
  T* qvel_out;       // (nenv x nstep x nv), may be null
  unsigned* status;  // (nenv)
  int nstep;
  ContactData<T> con;  // contacts and constraint impulses (unused without constraints)
  int* counts_out;     // (nenv x nstep x kNumCounts) counts of each step, may be null

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    Workspace<T> w = make_workspace(m, scratch.reals);
    T* q = qpos + long(e) * m.nq;
    T* v = qvel + long(e) * m.nv;
    unsigned s = status[e];
    for (int t = 0; t < nstep; ++t) {
      if (!(s & kStatusStopMask)) s |= step_env(m, e, q, v, ctrl + (long(e) * nstep + t) * m.nu, w, scratch, con);
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
  }
};

// joint-space inertia M (with armature) at qpos
template <class T>
struct MassMatrixKernel {
  using Scalar = T;
  ModelView<T> m;
  const T* qpos;  // (nenv x nq)
  T* M;           // (nenv x nv x nv)

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    Workspace<T> w = make_workspace(m, scratch.reals);
    kinematics(m, qpos + long(e) * m.nq, w);
    com_pos(m, w);
    crba(m, w, M + long(e) * m.nv * m.nv);
  }
};

// bias forces c(q, qvel): Coriolis, centrifugal and gravity (MuJoCo's qfrc_bias)
template <class T>
struct BiasKernel {
  using Scalar = T;
  ModelView<T> m;
  const T* qpos;  // (nenv x nq)
  const T* qvel;  // (nenv x nv)
  T* bias;        // (nenv x nv)

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    Workspace<T> w = make_workspace(m, scratch.reals);
    kinematics(m, qpos + long(e) * m.nq, w);
    com_pos(m, w);
    com_vel(m, qvel + long(e) * m.nv, w);
    rnea(m, qvel + long(e) * m.nv, static_cast<const T*>(nullptr), w, bias + long(e) * m.nv);
  }
};

// qacc = (M + diag(armature))^-1 (passive + actuation - bias), MuJoCo's qacc without
// constraints
template <class T>
struct ForwardDynamicsKernel {
  using Scalar = T;
  ModelView<T> m;
  const T* qpos;  // (nenv x nq)
  const T* qvel;  // (nenv x nv)
  const T* ctrl;  // (nenv x nu)
  T* qacc;        // (nenv x nv)

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    Workspace<T> w = make_workspace(m, scratch.reals);
    forward_dynamics(m, qpos + long(e) * m.nq, qvel + long(e) * m.nv, ctrl + long(e) * m.nu, T(0),
                     w, qacc + long(e) * m.nv);
  }
};

// the generalized force that produces qacc: M qacc + bias - passive, with armature in M
// (MuJoCo's qfrc_inverse); inverse of ForwardDynamicsKernel for the actuation force
template <class T>
struct InverseDynamicsKernel {
  using Scalar = T;
  ModelView<T> m;
  const T* qpos;  // (nenv x nq)
  const T* qvel;  // (nenv x nv)
  const T* qacc;  // (nenv x nv)
  T* tau;         // (nenv x nv)

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    Workspace<T> w = make_workspace(m, scratch.reals);
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

// scratch of one environment's reverse pass: the forward scratch (workspace, constraint
// workspace) followed by the adjoint workspace and, with constraints, its constraint part
template <class T>
PHX_HD ScratchSize adjoint_scratch_size(const ModelView<T>& m) {
  ScratchSize s = scratch_size(m);
  s.reals += AdjWorkspace<T>::size(m.nbody, m.njnt, m.nv);
  if (m.nefcmax > 0) {
    ScratchSize c = AdjConstraintWorkspace<T>::size(m);
    s.reals += c.reals;
    s.ints += c.ints;
  }
  return s;
}

// vector-Jacobian product of one step: (adj_qpos_next, adj_qvel_next) at (qpos, qvel, ctrl)
// -> adjoints of the inputs and, per environment, of the model parameters (null skips one).
// With contacts or limits the step is replayed from a cold start (no warm-start rows in con,
// which must be zeroed) and differentiated by adj_step_constrained.
template <class T>
struct StepAdjointKernel {
  using Scalar = T;
  ModelView<T> m;
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

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    long forward = Workspace<T>::size(m.nbody, m.njnt, m.nv);
    long adjoint = AdjWorkspace<T>::size(m.nbody, m.njnt, m.nv);
    Workspace<T> w = make_workspace(m, scratch.reals);
    T* gq = adj_qpos + long(e) * m.nq;
    T* gv = adj_qvel + long(e) * m.nv;
    T* gc = adj_ctrl + long(e) * m.nu;
    for (int i = 0; i < m.nq; ++i) gq[i] = T(0);
    for (int i = 0; i < m.nv; ++i) gv[i] = T(0);
    for (int i = 0; i < m.nu; ++i) gc[i] = T(0);
    // this environment's slice of each parameter adjoint, zeroed
    auto slice = [e](T* p, int n) {
      if (!p) return static_cast<T*>(nullptr);
      T* r = p + long(e) * n;
      for (int i = 0; i < n; ++i) r[i] = T(0);
      return r;
    };
    ModelAdjoint<T> am{slice(adj_model.body_mass, m.nbody),
                       slice(adj_model.body_inertia, 3 * m.nbody),
                       slice(adj_model.dof_damping, m.nv),
                       slice(adj_model.dof_armature, m.nv),
                       slice(adj_model.jnt_stiffness, m.njnt),
                       slice(adj_model.actuator_gear, m.nu)};
    ContactModelAdjoint<T> ac{slice(adj_contact.geom_friction, 3 * m.ngeom),
                              slice(adj_contact.geom_restitution, m.ngeom)};
    const T* q = qpos + long(e) * m.nq;
    const T* v = qvel + long(e) * m.nv;
    const T* u = ctrl + long(e) * m.nu;
    const T* gq_next = adj_qpos_next + long(e) * m.nq;
    const T* gv_next = adj_qvel_next + long(e) * m.nv;
    if (m.nefcmax == 0) {
      AdjWorkspace<T> a = AdjWorkspace<T>::carve(scratch.reals + forward, m.nbody, m.njnt, m.nv);
      adj_step(m, q, v, u, w, a, gq_next, gv_next, gq, gv, gc, am);
      return;
    }
    // reals: workspace, constraint workspace, adjoint workspace, adjoint constraint workspace;
    // ints: constraint workspace, adjoint constraint workspace
    ScratchSize cs = ConstraintWorkspace<T>::size(m);
    ConstraintWorkspace<T> c =
        ConstraintWorkspace<T>::carve(m, scratch.reals + forward, scratch.ints);
    AdjWorkspace<T> a =
        AdjWorkspace<T>::carve(scratch.reals + forward + cs.reals, m.nbody, m.njnt, m.nv);
    AdjConstraintWorkspace<T> s = AdjConstraintWorkspace<T>::carve(
        m, scratch.reals + forward + cs.reals + adjoint, scratch.ints + cs.ints);
    ContactView<T> cv = con.env(m, e);
    adj_step_constrained(m, q, v, u, w, c, cv, a, s, gq_next, gv_next, gq, gv, gc, am, ac);
  }
};

// every kernel instantiated by the backends, for each scalar type
#define PHX_FOR_EACH_KERNEL(X)                                          \
  X(StepKernel<float>) X(StepKernel<double>)                            \
  X(RolloutKernel<float>) X(RolloutKernel<double>)                      \
  X(MassMatrixKernel<float>) X(MassMatrixKernel<double>)                \
  X(BiasKernel<float>) X(BiasKernel<double>)                            \
  X(ForwardDynamicsKernel<float>) X(ForwardDynamicsKernel<double>)      \
  X(InverseDynamicsKernel<float>) X(InverseDynamicsKernel<double>)      \
  X(StepAdjointKernel<float>) X(StepAdjointKernel<double>)

}  // namespace phx
