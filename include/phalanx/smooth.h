// Smooth dynamics in generalized coordinates: RNEA (inverse dynamics and bias forces), CRBA
// (joint-space inertia M with armature), passive joint forces and actuation. All take the
// kinematics of kinematics.h as computed in the workspace.
#pragma once

#include "phalanx/fluid.h"
#include "phalanx/kinematics.h"
#include "phalanx/math/dense.h"
#include "phalanx/muscle.h"
#include "phalanx/tendon.h"

namespace phx {

// Recursive Newton-Euler: tau = M qacc + c(q, qvel) where c includes gravity.
// qacc may be null (bias forces only). Needs kinematics, com_pos and com_vel; writes cacc,
// cfrc (each body's, summed over its subtree) and cmom. Armature is not included (it is a
// dof-space term: tau += armature * qacc).
template <class T>
PHX_HD void rnea(const ModelView<T>& m, const T* qvel, const T* qacc, Workspace<T>& w, T* tau) {
  // forward: accelerations; world accelerates against gravity (and has no momentum or force)
  Vec6<T>::make(Vec3<T>{}, -Vec3<T>::load(m.gravity)).store(w.cacc);
  Vec6<T>{}.store(w.cmom);
  Vec6<T>{}.store(w.cfrc);
  for (int b = 1; b < m.nbody; ++b) {
    Vec6<T> a = Vec6<T>::load(w.cacc + 6 * m.body_parentid[b]);
    int d0 = m.body_dofadr[b];
    for (int d = d0; d < d0 + m.body_dofnum[b]; ++d) {
      a += qvel[d] * Vec6<T>::load(w.cdof_dot + 6 * d);
      if (qacc) a += qacc[d] * Vec6<T>::load(w.cdof + 6 * d);
    }
    a.store(w.cacc + 6 * b);
    // body force: rate of change of momentum
    Inertia<T> J = Inertia<T>::load(w.cinert + 10 * b);
    Vec6<T> v = Vec6<T>::load(w.cvel + 6 * b), h = J * v;
    h.store(w.cmom + 6 * b);
    (J * a + cross_force(v, h)).store(w.cfrc + 6 * b);
  }
  // backward: accumulate forces to parents and project onto the dofs
  for (int b = m.nbody - 1; b > 0; --b) {
    Vec6<T> f = Vec6<T>::load(w.cfrc + 6 * b);
    int d0 = m.body_dofadr[b];
    for (int d = d0; d < d0 + m.body_dofnum[b]; ++d) tau[d] = dot(Vec6<T>::load(w.cdof + 6 * d), f);
    int p = m.body_parentid[b];
    if (p > 0) (Vec6<T>::load(w.cfrc + 6 * p) + f).store(w.cfrc + 6 * p);
  }
}

// Composite inertias: crb[b] = the spatial inertias of b and its subtree, about the tree's
// reference point (the world's entry stays its own). Needs com_pos.
template <class T>
PHX_HD void composite_inertias(const ModelView<T>& m, Workspace<T>& w) {
  T* crb = w.crb;
  for (int i = 0; i < 10 * m.nbody; ++i) crb[i] = w.cinert[i];
  for (int b = m.nbody - 1; b > 0; --b) {
    int p = m.body_parentid[b];
    if (p > 0) {
      for (int i = 0; i < 10; ++i) crb[10 * p + i] += crb[10 * b + i];
    }
  }
}

// Composite rigid body algorithm: the dense joint-space inertia M (nv x nv, row-major, both
// triangles) plus armature on the diagonal. Needs kinematics and com_pos; writes crb.
template <class T>
PHX_HD void crba(const ModelView<T>& m, Workspace<T>& w, T* M) {
  composite_inertias(m, w);
  const T* crb = w.crb;
  for (int i = 0; i < m.nv * m.nv; ++i) M[i] = T(0);
  // M[i][j] = cdof_j . (crb_body(i) cdof_i) for j on the path from i to the root
  for (int i = 0; i < m.nv; ++i) {
    Vec6<T> f = Inertia<T>::load(crb + 10 * m.dof_bodyid[i]) * Vec6<T>::load(w.cdof + 6 * i);
    M[i * m.nv + i] = dot(f, Vec6<T>::load(w.cdof + 6 * i)) + m.dof_armature[i];
    for (int j = m.dof_parentid[i]; j >= 0; j = m.dof_parentid[j]) {
      T v = dot(f, Vec6<T>::load(w.cdof + 6 * j));
      M[i * m.nv + j] = v;
      M[j * m.nv + i] = v;
    }
  }
}

// A tendon's spring-damper force along its length: -stiffness (L - clamp(L, lengthspring))
// - damping V (MuJoCo's dead band: no spring force between the two lengths); *outside, when
// given, says which end of the band the length is beyond (-1 below, +1 above, 0 within).
template <class T, class S>
PHX_HD PHX_INLINE T tendon_passive_force(const ModelView<S>& m, int t, T length, T velocity,
                                         int* outside = nullptr) {
  const S lo = m.tendon_lengthspring[2 * t], hi = m.tendon_lengthspring[2 * t + 1];
  if (outside) *outside = length > hi ? 1 : (length < lo ? -1 : 0);
  const T stretch = length - clamp(length, T(lo), T(hi));
  return -m.tendon_stiffness[t] * stretch - m.tendon_damping[t] * velocity;
}

// Passive forces: joints' viscous damping and springs about qpos_spring, tendons'
// spring-dampers along their rows, the tendons' from tendon_kinematics in w, and the fluid's
// forces (fluid.h), from com_pos and com_vel in w when the model has a medium (MuJoCo's
// mj_passive for joints, tendons and the inertia-box fluid). qfrc is overwritten.
template <class T>
PHX_HD void passive(const ModelView<T>& m, const T* qpos, const T* qvel, const Workspace<T>& w,
                    T* qfrc) {
  for (int d = 0; d < m.nv; ++d) qfrc[d] = -m.dof_damping[d] * qvel[d];
  for (int j = 0; j < m.njnt; ++j) {
    T k = m.jnt_stiffness[j];
    if (k == T(0)) continue;
    int qa = m.jnt_qposadr[j], da = m.jnt_dofadr[j];
    switch (m.jnt_type[j]) {
      case kJointFree:
        // translational spring, then rotational like a ball joint
        for (int i = 0; i < 3; ++i) qfrc[da + i] -= k * (qpos[qa + i] - m.qpos_spring[qa + i]);
        qa += 3;
        da += 3;
        [[fallthrough]];
      case kJointBall: {
        Vec3<T> r = sub_quat(normalize(Quat<T>::load(qpos + qa)), Quat<T>::load(m.qpos_spring + qa));
        for (int i = 0; i < 3; ++i) qfrc[da + i] -= k * r[i];
        break;
      }
      default:
        qfrc[da] -= k * (qpos[qa] - m.qpos_spring[qa]);
    }
  }
  for (int t = 0; t < m.ntendon; ++t) {
    T length, velocity;
    transmission_state(m, w, kTrnTendon, t, qpos, qvel, length, velocity);
    add_transmission_row(m, w, kTrnTendon, t, tendon_passive_force(m, t, length, velocity), qfrc);
  }
  if (fluid_enabled(m)) fluid_force(m, w, qfrc);
}

// An actuator's nine gain or bias parameters (actuator_gainprm or actuator_biasprm of actuator
// u) in the scalar R its gain and bias run on
template <class R, class S>
PHX_HD PHX_INLINE void load_actuator_params(const S* prm, int u, R* out) {
  for (int k = 0; k < 9; ++k) out[k] = R(prm[9 * u + k]);
}

// The gain and the bias of actuator u at its length L and velocity V from its parameters g or b
// (load_actuator_params; MuJoCo's mj_fwdActuation): gain g[0] (fixed), g[0] + g[1] L + g[2] V
// (affine) or the muscle's active force per unit activation; bias 0, b[0] + b[1] L + b[2] V
// (affine) or the muscle's passive force (muscle.h). R is the state's scalar, or a Dual of it
// for the adjoints' slopes in (L, V) or in the parameters; S the model's.
template <class R, class S>
PHX_HD PHX_INLINE R actuator_gain(const ModelView<S>& m, int u, const R& L, const R& V,
                                  const R* g) {
  switch (m.actuator_gaintype[u]) {
    case kGainAffine:
      return g[0] + g[1] * L + g[2] * V;
    case kGainMuscle: {
      const R range[2] = {R(m.actuator_lengthrange[2 * u]), R(m.actuator_lengthrange[2 * u + 1])};
      return muscle_gain(L, V, range, R(m.actuator_acc0[u]), g);
    }
    default:
      return g[0];
  }
}

template <class R, class S>
PHX_HD PHX_INLINE R actuator_bias(const ModelView<S>& m, int u, const R& L, const R& V,
                                  const R* b) {
  switch (m.actuator_biastype[u]) {
    case kBiasAffine:
      return b[0] + b[1] * L + b[2] * V;
    case kBiasMuscle: {
      const R range[2] = {R(m.actuator_lengthrange[2 * u]), R(m.actuator_lengthrange[2 * u + 1])};
      return muscle_bias(L, range, R(m.actuator_acc0[u]), b);
    }
    default:
      return R(0);
  }
}

// One actuator's force and what it was made of (MuJoCo's mj_fwdActuation): the transmission's
// length L = gear times the joint's coordinate or the tendon's length, velocity V likewise, the
// input x (input[u]: the ctrl of an actuator without dynamics, clamped to ctrlrange where
// limited, or the activation of one with dynamics, actuator_inputs), force = gain x + bias
// (actuator_gain, actuator_bias) clamped to forcerange where limited. The `inside` flags say a
// clamp was not active.
template <class T>
struct ActuatorForce {
  T ctrl, length, velocity, gain, force;  // ctrl: the input x after the clamp
  T trn_length, trn_velocity;  // the transmission's, before the gear
  Truth<T> ctrl_inside = Truth<T>(true), force_inside = Truth<T>(true);
};

template <class T, class S>
PHX_HD PHX_INLINE ActuatorForce<T> actuator_force(const ModelView<S>& m, const Workspace<S>& w,
                                                  int u, const T* qpos, const T* qvel,
                                                  const T* input) {
  ActuatorForce<T> a;
  const S gear = m.actuator_gear[u];
  a.ctrl = input[u];
  if (m.actuator_ctrllimited[u] && m.actuator_actadr[u] < 0) {
    S lo = m.actuator_ctrlrange[2 * u], hi = m.actuator_ctrlrange[2 * u + 1];
    a.ctrl_inside = a.ctrl >= lo && a.ctrl <= hi;
    a.ctrl = clamp(a.ctrl, T(lo), T(hi));
  }
  transmission_state(m, w, m.actuator_trntype[u], actuator_trn(m, u), qpos, qvel, a.trn_length,
                     a.trn_velocity);
  a.length = gear * a.trn_length;
  a.velocity = gear * a.trn_velocity;
  T g[9], b[9];
  load_actuator_params(m.actuator_gainprm, u, g);
  load_actuator_params(m.actuator_biasprm, u, b);
  a.gain = actuator_gain(m, u, a.length, a.velocity, g);
  a.force = a.gain * a.ctrl + actuator_bias(m, u, a.length, a.velocity, b);
  if (m.actuator_forcelimited[u]) {
    S lo = m.actuator_forcerange[2 * u], hi = m.actuator_forcerange[2 * u + 1];
    a.force_inside = a.force >= lo && a.force <= hi;
    a.force = clamp(a.force, T(lo), T(hi));
  }
  return a;
}

// Actuation: qfrc += gear * force of each actuator (actuator_force) along its transmission,
// from the actuators' inputs (nu: ctrl, or act for actuators with dynamics).
template <class T>
PHX_HD void actuation(const ModelView<T>& m, const T* qpos, const T* qvel, const T* input,
                      const Workspace<T>& w, T* qfrc) {
  for (int u = 0; u < m.nu; ++u) {
    ActuatorForce<T> a = actuator_force(m, w, u, qpos, qvel, input);
    add_transmission_row(m, w, m.actuator_trntype[u], actuator_trn(m, u),
                         m.actuator_gear[u] * a.force, qfrc);
  }
}

// ---- activation dynamics ----------------------------------------------------------------

// The next activation of actuator u, which has dynamics (MuJoCo's mj_nextActivation for its
// Euler step), from ctrl (nu, clamped to ctrlrange where limited, as MuJoCo clamps it before the
// rate) and act (na): integrator act + dt ctrl, filter act + dt (ctrl - act) / tau, filterexact
// act + (ctrl - act) (1 - exp(-dt / tau)), muscle act + dt muscle_activation_rate, then clamped
// to actrange where limited. d_act and d_ctrl are its slopes (zero where a clamp acts): constant
// for the linear dynamics, the muscle's from its rate evaluated on Dual numbers.
template <class T>
struct NextActivation {
  T act;
  T d_act, d_ctrl;
};

template <class T, class S>
PHX_HD PHX_INLINE NextActivation<T> next_activation(const ModelView<S>& m, int u, const T* ctrl,
                                                    const T* act) {
  const S dt = m.timestep;
  const S* prm = m.actuator_dynprm + 3 * u;
  T c = ctrl[u];
  Truth<T> ctrl_inside(true);
  if (m.actuator_ctrllimited[u]) {
    S lo = m.actuator_ctrlrange[2 * u], hi = m.actuator_ctrlrange[2 * u + 1];
    ctrl_inside = c >= lo && c <= hi;
    c = clamp(c, T(lo), T(hi));
  }
  const T a = act[m.actuator_actadr[u]];
  NextActivation<T> r;
  switch (m.actuator_dyntype[u]) {
    case kDynIntegrator:
      r.act = a + dt * c;
      r.d_act = T(1);
      r.d_ctrl = T(dt);
      break;
    case kDynMuscle: {
      using D = Dual<T, 2>;
      D dc(c), da(a);
      dc.d[0] = T(1);
      da.d[1] = T(1);
      D rate = muscle_activation_rate(dc, da, D(T(prm[0])), D(T(prm[1])), D(T(prm[2])));
      r.act = a + dt * rate.v;
      r.d_ctrl = dt * rate.d[0];
      r.d_act = T(1) + dt * rate.d[1];
      break;
    }
    default: {  // the filters: the weight k of the rate ctrl - act
      const S tau = prm[0] > S(1e-15) ? prm[0] : S(1e-15);
      const S k = m.actuator_dyntype[u] == kDynFilterExact ? S(1) - exp(-dt / tau) : dt / tau;
      r.act = a + k * (c - a);
      r.d_act = T(S(1) - k);
      r.d_ctrl = T(k);
    }
  }
  r.d_ctrl = select(ctrl_inside, r.d_ctrl, T(0));
  if (m.actuator_actlimited[u]) {
    S lo = m.actuator_actrange[2 * u], hi = m.actuator_actrange[2 * u + 1];
    const Truth<T> inside = r.act >= lo && r.act <= hi;
    r.act = clamp(r.act, T(lo), T(hi));
    r.d_act = select(inside, r.d_act, T(0));
    r.d_ctrl = select(inside, r.d_ctrl, T(0));
  }
  return r;
}

// The actuators' inputs of a step (nu), as actuation reads them: ctrl for an actuator without
// dynamics, its activation for one with (the next one, next_activation, with actearly).
template <class T, class S>
PHX_HD void actuator_inputs(const ModelView<S>& m, const T* ctrl, const T* act, T* input) {
  for (int u = 0; u < m.nu; ++u) {
    const int adr = m.actuator_actadr[u];
    input[u] = adr < 0                  ? ctrl[u]
               : m.actuator_actearly[u] ? next_activation(m, u, ctrl, act).act
                                        : act[adr];
  }
}

// act <- the activations after a step from ctrl (nu) and act (na), in place
template <class T, class S>
PHX_HD void activation_step(const ModelView<S>& m, const T* ctrl, T* act) {
  for (int u = 0; u < m.nu; ++u)
    if (m.actuator_actadr[u] >= 0) act[m.actuator_actadr[u]] = next_activation(m, u, ctrl, act).act;
}

// Adjoint of actuator_inputs followed by activation_step at (ctrl, act): from the inputs'
// adjoint adj_input (nu, may be null) and the next activations' adj_act_next (na, may be null)
// to adj_ctrl (nu) and adj_act (na), accumulated.
template <class T, class S>
PHX_HD void adj_activation(const ModelView<S>& m, const T* ctrl, const T* act, const T* adj_input,
                           const T* adj_act_next, T* adj_ctrl, T* adj_act) {
  for (int u = 0; u < m.nu; ++u) {
    const int adr = m.actuator_actadr[u];
    const T gx = adj_input ? adj_input[u] : T(0);
    if (adr < 0) {
      adj_ctrl[u] += gx;
      continue;
    }
    NextActivation<T> n = next_activation(m, u, ctrl, act);
    T g_next = adj_act_next ? adj_act_next[adr] : T(0);
    if (m.actuator_actearly[u]) {
      g_next += gx;
    } else {
      adj_act[adr] += gx;
    }
    adj_act[adr] += n.d_act * g_next;
    adj_ctrl[u] += n.d_ctrl * g_next;
  }
}

// The applied generalized forces into w.qfrc: passive, actuation and qfrc_applied, a
// generalized force the caller adds (MuJoCo's qfrc_applied; may be null). Needs the kinematics
// and tendon_kinematics in w.
template <class T>
PHX_HD void applied_forces(const ModelView<T>& m, const T* qpos, const T* qvel, const T* ctrl,
                           const T* qfrc_applied, Workspace<T>& w) {
  T* qfrc = w.qfrc;
  passive(m, qpos, qvel, w, qfrc);
  actuation(m, qpos, qvel, ctrl, w, qfrc);
  if (qfrc_applied)
    for (int d = 0; d < m.nv; ++d) qfrc[d] += qfrc_applied[d];
}

// ---- adjoints ----------------------------------------------------------------------------

// Adjoint of rnea at (qvel, qacc): from adj_tau to the adjoints of cinert, cvel, cdof,
// cdof_dot (in `a`), qvel and, when non-null, qacc. Needs the workspace of the forward rnea
// call at the same arguments (cacc, the accumulated cfrc and cmom).
template <class T, class S>
PHX_HD void adj_rnea(const ModelView<S>& m, const T* qvel, const T* qacc, const Workspace<S>& w,
                     AdjWorkspace<T>& a, const T* adj_tau, T* adj_qvel, T* adj_qacc) {
  // tau_d = cdof_d . F_b, F_b = f_b + sum of the children's F: parents first
  for (int b = 1; b < m.nbody; ++b) {
    int p = m.body_parentid[b];
    Vec6<T> adj_F = p > 0 ? Vec6<T>::load(a.cfrc + 6 * p) : Vec6<T>{};
    Vec6<T> F = Vec6<T>::load(w.cfrc + 6 * b);
    int d0 = m.body_dofadr[b];
    for (int d = d0; d < d0 + m.body_dofnum[b]; ++d) {
      adj_F += adj_tau[d] * Vec6<T>::load(w.cdof + 6 * d);
      (Vec6<T>::load(a.cdof + 6 * d) + adj_tau[d] * F).store(a.cdof + 6 * d);
    }
    adj_F.store(a.cfrc + 6 * b);
  }
  // f_b = J a_b + v x* (J v); a_b = a_p + sum (qvel cdof_dot + qacc cdof): children first
  for (int b = m.nbody - 1; b > 0; --b) {
    Inertia<T> J = Inertia<T>::load(w.cinert + 10 * b), adj_J;
    Vec6<T> acc = Vec6<T>::load(w.cacc + 6 * b), v = Vec6<T>::load(w.cvel + 6 * b);
    Vec6<T> adj_f = Vec6<T>::load(a.cfrc + 6 * b);
    Vec6<T> adj_a = Vec6<T>::load(a.cacc + 6 * b), adj_v, adj_h;
    adj_inertia_mul(J, acc, adj_J, adj_a, adj_f);
    adj_cross_force(v, Vec6<T>::load(w.cmom + 6 * b), adj_v, adj_h, adj_f);
    adj_inertia_mul(J, v, adj_J, adj_v, adj_h);
    int d0 = m.body_dofadr[b];
    for (int d = d0; d < d0 + m.body_dofnum[b]; ++d) {
      (Vec6<T>::load(a.cdof_dot + 6 * d) + qvel[d] * adj_a).store(a.cdof_dot + 6 * d);
      adj_qvel[d] += dot(Vec6<T>::load(w.cdof_dot + 6 * d), adj_a);
      if (qacc) {
        (Vec6<T>::load(a.cdof + 6 * d) + qacc[d] * adj_a).store(a.cdof + 6 * d);
        if (adj_qacc) adj_qacc[d] += dot(Vec6<T>::load(w.cdof + 6 * d), adj_a);
      }
    }
    int p = m.body_parentid[b];
    if (p > 0) (Vec6<T>::load(a.cacc + 6 * p) + adj_a).store(a.cacc + 6 * p);
    Inertia<T> acc_J = Inertia<T>::load(a.cinert + 10 * b);
    acc_J += adj_J;
    acc_J.store(a.cinert + 10 * b);
    (Vec6<T>::load(a.cvel + 6 * b) + adj_v).store(a.cvel + 6 * b);
  }
}

// Adjoint of crba: from adj_M (nv x nv, the gradient of a loss with respect to every entry,
// read by entry and by sums of a row and a column: adj_M(i, j), adj_M.sym(i)(j), see
// DenseEntries and OuterSum in dense.h; only the pairs of a dof and its ancestors are read) to
// the adjoints of cinert and cdof, and of dof_armature. Uses the
// identity that column k of M without armature is the RNEA of a unit acceleration e_k with no
// velocity and no gravity: M e_k = sum_b S_b^T (crb_b S e_k), so dM_ik = cdof_i . (crb cdof_k)
// differentiated per pair. Reads the composite inertias crba left in w.crb (the workspace of
// crba at the same state, as a replayed step keeps it).
// a.cinert must hold no other adjoint on entry (it is used to accumulate composite adjoints).
template <class T, class S, class AdjM>
PHX_HD void adj_crba(const ModelView<S>& m, const Workspace<S>& w, AdjWorkspace<T>& a,
                     const AdjM& adj_M, const ModelAdjoint<T>& adj_model) {
  const S* crb = w.crb;  // the composite inertias crba left
  // adjoint of each composite inertia, then pushed down to the bodies it sums
  T* adj_crb = a.cinert;  // accumulate composite adjoints in place, then distribute
  for (int i = 0; i < m.nv; ++i) {
    int bi = m.dof_bodyid[i];
    Vec6<T> si = Vec6<T>::load(w.cdof + 6 * i);
    Inertia<T> J = Inertia<T>::load(crb + 10 * bi), adj_J = Inertia<T>::load(adj_crb + 10 * bi);
    Vec6<T> f = J * si, adj_f, adj_si;
    // pairs (i, j) with j = i and j an ancestor dof; M_ij = M_ji = sj . f
    const typename AdjM::Sym pair = adj_M.sym(i);
    const T gii = adj_M(i, i);
    for (int j = i; j >= 0; j = m.dof_parentid[j]) {
      T g = j == i ? gii : pair(j);
      Vec6<T> sj = Vec6<T>::load(w.cdof + 6 * j);
      adj_f += g * sj;
      (Vec6<T>::load(a.cdof + 6 * j) + g * f).store(a.cdof + 6 * j);
    }
    adj_inertia_mul(J, si, adj_J, adj_si, adj_f);
    (Vec6<T>::load(a.cdof + 6 * i) + adj_si).store(a.cdof + 6 * i);
    adj_J.store(adj_crb + 10 * bi);
    if (adj_model.dof_armature) adj_model.dof_armature[i] += gii;
  }
  // crb_b = cinert_b + sum of children's crb: the adjoint flows from parents to children
  for (int b = 1; b < m.nbody; ++b) {
    int p = m.body_parentid[b];
    if (p > 0)
      for (int i = 0; i < 10; ++i) adj_crb[10 * b + i] += adj_crb[10 * p + i];
  }
}

// adj_crba of a dense adj_M (nv x nv, row-major)
template <class T, class S>
PHX_HD void adj_crba(const ModelView<S>& m, const Workspace<S>& w, AdjWorkspace<T>& a,
                     const T* adj_M, const ModelAdjoint<T>& adj_model) {
  adj_crba(m, w, a, DenseEntries<T>{adj_M, m.nv}, adj_model);
}

// Adjoint of passive: from adj_qfrc to adj_qpos, adj_qvel, damping and stiffness, to the
// tendons' lengths and rows in a (adj_tendon_kinematics takes them on) and, with a medium, to
// the kinematics' and velocities' adjoints in a and the bodies' inertial parameters.
template <class T, class S>
PHX_HD void adj_passive(const ModelView<S>& m, const T* qpos, const T* qvel, const Workspace<S>& w,
                        AdjWorkspace<T>& a, const T* adj_qfrc, T* adj_qpos, T* adj_qvel,
                        const ModelAdjoint<T>& adj_model) {
  for (int d = 0; d < m.nv; ++d) {
    adj_qvel[d] -= m.dof_damping[d] * adj_qfrc[d];
    if (adj_model.dof_damping) adj_model.dof_damping[d] -= qvel[d] * adj_qfrc[d];
  }
  for (int j = 0; j < m.njnt; ++j) {
    T k = m.jnt_stiffness[j];
    // a joint without a spring adds nothing but its stiffness's gradient (passive skips it too;
    // on the lanes a free or ball joint's rotation would branch on its quaternion's sign)
    if (k == T(0) && !adj_model.jnt_stiffness) continue;
    int qa = m.jnt_qposadr[j], da = m.jnt_dofadr[j];
    T adj_k = T(0);
    switch (m.jnt_type[j]) {
      case kJointFree:
        for (int i = 0; i < 3; ++i) {
          adj_qpos[qa + i] -= k * adj_qfrc[da + i];
          adj_k -= (qpos[qa + i] - m.qpos_spring[qa + i]) * adj_qfrc[da + i];
        }
        qa += 3;
        da += 3;
        [[fallthrough]];
      case kJointBall: {
        // f -= k sub_quat(normalize(q), q_spring)
        Quat<T> raw = Quat<T>::load(qpos + qa), unit = normalize(raw);
        Quat<T> spring = Quat<T>::load(m.qpos_spring + qa);
        Vec3<T> g = Vec3<T>::load(adj_qfrc + da);
        adj_k -= dot(sub_quat(unit, spring), g);
        Quat<T> adj_unit = Quat<T>::zero(), adj_raw = Quat<T>::zero();
        adj_sub_quat(unit, spring, adj_unit, -k * g);
        adj_normalize(raw, adj_raw, adj_unit);
        adj_qpos[qa] += adj_raw.w;
        adj_qpos[qa + 1] += adj_raw.x;
        adj_qpos[qa + 2] += adj_raw.y;
        adj_qpos[qa + 3] += adj_raw.z;
        break;
      }
      default:
        adj_qpos[qa] -= k * adj_qfrc[da];
        adj_k -= (qpos[qa] - m.qpos_spring[qa]) * adj_qfrc[da];
    }
    if (adj_model.jnt_stiffness) adj_model.jnt_stiffness[j] += adj_k;
  }
  // tendons: qfrc += f J, f = -k (L - end) - b V outside the dead band, -b V within
  for (int t = 0; t < m.ntendon; ++t) {
    T length, velocity;
    int outside;
    transmission_state(m, w, kTrnTendon, t, qpos, qvel, length, velocity);
    T f = tendon_passive_force(m, t, length, velocity, &outside);
    T adj_f = transmission_dot<T>(m, w, kTrnTendon, t, PointerRow<T>{adj_qfrc});
    adj_transmission_row(m, w, kTrnTendon, t, f, PointerRow<T>{adj_qfrc}, a);
    const S k = m.tendon_stiffness[t];
    T adj_len = outside ? -k * adj_f : T(0);
    T adj_vel = -m.tendon_damping[t] * adj_f;
    adj_transmission_state(m, w, kTrnTendon, t, qvel, adj_len, adj_vel, a, adj_qpos, adj_qvel);
    if (outside) {
      S end = m.tendon_lengthspring[2 * t + (outside > 0 ? 1 : 0)];
      if (adj_model.tendon_stiffness) adj_model.tendon_stiffness[t] -= (length - end) * adj_f;
      if (adj_model.tendon_lengthspring)
        adj_model.tendon_lengthspring[2 * t + (outside > 0 ? 1 : 0)] += k * adj_f;
    }
    if (adj_model.tendon_damping) adj_model.tendon_damping[t] -= velocity * adj_f;
  }
  if (fluid_enabled(m)) adj_fluid_force(m, w, adj_qfrc, a, adj_model);
}

// The gain and bias parameters' share of actuator u's adjoint: force = gain(L, V; g) x +
// bias(L, V; b), each of the nine parameters one Dual direction (a device function of its own).
template <class T, class S>
PHX_HD PHX_DEVICE_NOINLINE void adj_actuator_params(const ModelView<S>& m, int u,
                                                    const ActuatorForce<T>& a, T adj_force,
                                                    const ModelAdjoint<T>& adj_model) {
  using D9 = Dual<T, 9>;
  T* adj_prm[2] = {adj_model.actuator_gainprm, adj_model.actuator_biasprm};
  for (int which = 0; which < 2; ++which) {
    if (!adj_prm[which]) continue;
    // a fixed gain's one slope is x, in its first parameter; no bias has none
    if (which == 0 && m.actuator_gaintype[u] == kGainFixed) {
      adj_prm[0][9 * u] += a.ctrl * adj_force;
      continue;
    }
    if (which == 1 && m.actuator_biastype[u] == kBiasNone) continue;
    D9 p[9], L9(a.length), V9(a.velocity);
    load_actuator_params(which == 0 ? m.actuator_gainprm : m.actuator_biasprm, u, p);
    for (int k = 0; k < 9; ++k) p[k].d[k] = T(1);
    D9 y =
        which == 0 ? actuator_gain(m, u, L9, V9, p) * D9(a.ctrl) : actuator_bias(m, u, L9, V9, p);
    for (int k = 0; k < 9; ++k) adj_prm[which][9 * u + k] += y.d[k] * adj_force;
  }
}

// Adjoint of actuation: from adj_qfrc to the inputs' adjoint adj_input (zero where the ctrl
// clamp is active), to qpos and qvel through gains and biases that depend on the length or the
// velocity (the tendons' lengths and rows in a), to gear and the gain and bias parameters;
// nothing passes a force clamp that is active. The slopes of the gain and the bias come from
// evaluating them on Dual numbers: in (L, V) always, in the nine parameters when their
// gradients are asked for.
template <class T, class S>
PHX_HD void adj_actuation(const ModelView<S>& m, const T* qpos, const T* qvel, const T* input,
                          const Workspace<S>& w, AdjWorkspace<T>& aw, const T* adj_qfrc,
                          T* adj_qpos, T* adj_qvel, T* adj_input,
                          const ModelAdjoint<T>& adj_model) {
  using D2 = Dual<T, 2>;
  for (int u = 0; u < m.nu; ++u) {
    const int type = m.actuator_trntype[u], id = actuator_trn(m, u);
    const S gear = m.actuator_gear[u];
    ActuatorForce<T> a = actuator_force(m, w, u, qpos, qvel, input);
    // qfrc += gear force row
    T adj_out = transmission_dot<T>(m, w, type, id, PointerRow<T>{adj_qfrc});
    adj_transmission_row(m, w, type, id, gear * a.force, PointerRow<T>{adj_qfrc}, aw);
    T adj_gear = a.force * adj_out;
    // selects: environments on SIMD lanes need not agree on which clamps act
    T adj_force = select(a.force_inside, T(gear * adj_out), T(0));
    adj_input[u] = select(a.ctrl_inside, adj_input[u] + a.gain * adj_force, adj_input[u]);
    // force = gain(L, V) x + bias(L, V): its slopes in L and V, none for a fixed gain and no
    // bias
    T adj_len = T(0), adj_vel = T(0);
    if (m.actuator_gaintype[u] != kGainFixed || m.actuator_biastype[u] != kBiasNone) {
      D2 L(a.length), V(a.velocity), g2[9], b2[9];
      L.d[0] = V.d[1] = T(1);
      load_actuator_params(m.actuator_gainprm, u, g2);
      load_actuator_params(m.actuator_biasprm, u, b2);
      D2 f = actuator_gain(m, u, L, V, g2) * D2(a.ctrl) + actuator_bias(m, u, L, V, b2);
      adj_len = f.d[0] * adj_force;
      adj_vel = f.d[1] * adj_force;
    }
    // L = gear length, V = gear velocity
    if (adj_len != T(0) || adj_vel != T(0)) {
      adj_transmission_state(m, w, type, id, qvel, gear * adj_len, gear * adj_vel, aw, adj_qpos,
                             adj_qvel);
      adj_gear += a.trn_length * adj_len + a.trn_velocity * adj_vel;
    }
    if (adj_model.actuator_gear) adj_model.actuator_gear[u] += adj_gear;
    if (adj_model.actuator_gainprm || adj_model.actuator_biasprm)
      adj_actuator_params(m, u, a, adj_force, adj_model);
  }
}

}  // namespace phx
