// Trajectory costs built from terms, for the sampling planners and for rollout losses: the value
// of a rollout's states and controls, and its adjoint (the gradients with respect to every
// state and control), evaluated in the kernels without a host round trip.
//
// A rollout of T steps has states x_t = (q_t, v_t) after step t and controls u_t applied in
// step t, t = 0 .. T-1. Its cost is
//
//   C = sum_t sum_i weight_i phi_i(x_t, u_t) + sum_i terminal_i phi_i(x_{T-1})
//
// over the terms i, each a scalar function phi of one state and control:
//
//   kCostQpos      (q_j - target)^2                  j = index
//   kCostAngle     2 (1 - cos(q_j - target))          a hinge angle: periodic, bounded by 4
//   kCostQvel      (v_j - target)^2
//   kCostCtrl      (u_j - target)^2                  running only (no terminal control)
//   kCostBodyPos   (xpos_b[axis] - target)^2         b = index; axis 2: the body's height
//   kCostBodyUp    1 - R_b[2][axis]                  0 when the body's axis points up (+z)
//   kCostComPos    (c[axis] - target)^2              c the centre of mass of all bodies
//   kCostComVel    (cdot[axis] - target)^2           cdot its velocity
//
// Terms on bodies and the centre of mass run the kinematics (kinematics.h) of the state; their
// adjoints walk it back with adj_com_vel, adj_com_pos and adj_kinematics. Nothing here depends
// on the model's parameters being differentiated: masses enter as constants.
#pragma once

#include "phalanx/kinematics.h"
#include "phalanx/workspace.h"

namespace phx {

enum CostKind : int {
  kCostQpos = 0,
  kCostAngle,
  kCostQvel,
  kCostCtrl,
  kCostBodyPos,
  kCostBodyUp,
  kCostComPos,
  kCostComVel,
  kNumCostKinds
};

// the kinds' names, as phalanx.costs spells them
inline constexpr const char* kCostKindNames[kNumCostKinds] = {
    "qpos", "angle", "qvel", "ctrl", "body_pos", "body_up", "com_pos", "com_vel"};

// layout of one term in the arrays of a CostView
enum CostTermInt : int { kCostTermKind = 0, kCostTermIndex, kCostTermAxis, kCostTermInts };
enum CostTermReal : int { kCostTermTarget = 0, kCostTermWeight, kCostTermTerminal, kCostTermReals };

enum CostNeeds : int { kCostNeedsKinematics = 1, kCostNeedsComPos = 2, kCostNeedsComVel = 4 };

// the terms of one cost, as device arrays: ints (nterm x kCostTermInts), reals (nterm x
// kCostTermReals)
template <class T>
struct CostView {
  int nterm = 0;
  const int* ints = nullptr;
  const T* reals = nullptr;

  PHX_HD int kind(int i) const { return ints[i * kCostTermInts + kCostTermKind]; }
  PHX_HD int index(int i) const { return ints[i * kCostTermInts + kCostTermIndex]; }
  PHX_HD int axis(int i) const { return ints[i * kCostTermInts + kCostTermAxis]; }
  PHX_HD T target(int i) const { return reals[i * kCostTermReals + kCostTermTarget]; }
  // the weight of term i in a stage that counts run times as running and term times as
  // terminal (the last state of a rollout is both)
  PHX_HD T weight(int i, T run, T term) const {
    T w = run * reals[i * kCostTermReals + kCostTermWeight];
    if (kind(i) != kCostCtrl) w += term * reals[i * kCostTermReals + kCostTermTerminal];
    return w;
  }
  // which kinematic quantities the terms need: a CostNeeds mask
  PHX_HD int needs() const {
    int n = 0;
    for (int i = 0; i < nterm; ++i) {
      int k = kind(i);
      if (k >= kCostBodyPos) n |= kCostNeedsKinematics;
      if (k >= kCostComPos) n |= kCostNeedsComPos;
      if (k == kCostComVel) n |= kCostNeedsComVel;
    }
    return n;
  }
};

// the centre of mass c and its velocity cdot (the total linear momentum over the total mass)
// from the body inertias about their trees' reference points: body b contributes m_b (o + h_b /
// m_b) and m_b v_b + w_b x h_b, with (w_b, v_b) its spatial velocity at its tree's reference o
template <class T>
PHX_HD T total_mass(const ModelView<T>& m) {
  T total(0);
  for (int b = 1; b < m.nbody; ++b) total += m.body_mass[b];
  return total;
}

template <class T>
PHX_HD Vec3<T> com_position(const ModelView<T>& m, const Workspace<T>& w) {
  Vec3<T> c;
  for (int b = 1; b < m.nbody; ++b)
    c += m.body_mass[b] * Vec3<T>::load(w.xpos + 3 * m.body_rootid[b]) +
         Inertia<T>::load(w.cinert + 10 * b).h;
  return (T(1) / total_mass(m)) * c;
}

template <class T>
PHX_HD Vec3<T> com_velocity(const ModelView<T>& m, const Workspace<T>& w) {
  Vec3<T> p;
  for (int b = 1; b < m.nbody; ++b) {
    Vec6<T> v = Vec6<T>::load(w.cvel + 6 * b);
    p += m.body_mass[b] * v.lin() + cross(v.ang(), Inertia<T>::load(w.cinert + 10 * b).h);
  }
  return (T(1) / total_mass(m)) * p;
}

// Adjoint of com_position and com_velocity: from adj_com and adj_comdot to the adjoints of the
// body inertias (their h), reference points and spatial velocities in a
template <class T>
PHX_HD void adj_com_terms(const ModelView<T>& m, const Workspace<T>& w, AdjWorkspace<T>& a,
                          Vec3<T> adj_com, Vec3<T> adj_comdot) {
  T inv_mass = T(1) / total_mass(m);
  adj_com = inv_mass * adj_com;
  adj_comdot = inv_mass * adj_comdot;
  for (int b = 1; b < m.nbody; ++b) {
    Vec6<T> vb = Vec6<T>::load(w.cvel + 6 * b);
    Vec3<T> h = Inertia<T>::load(w.cinert + 10 * b).h;
    // c: m_b o + h_b;  cdot: m_b v_b + w_b x h_b
    (Vec3<T>::load(a.cinert + 10 * b + 6) + adj_com + cross(adj_comdot, vb.ang()))
        .store(a.cinert + 10 * b + 6);
    (Vec3<T>::load(a.xpos + 3 * m.body_rootid[b]) + m.body_mass[b] * adj_com)
        .store(a.xpos + 3 * m.body_rootid[b]);
    Vec6<T> adj_vb = Vec6<T>::make(cross(h, adj_comdot), m.body_mass[b] * adj_comdot);
    (Vec6<T>::load(a.cvel + 6 * b) + adj_vb).store(a.cvel + 6 * b);
  }
}

// the kinematics the terms need (needs: CostView::needs()) of state (q, v), into w
template <class T>
PHX_HD void cost_kinematics(const ModelView<T>& m, int needs, const T* q, const T* v,
                            Workspace<T>& w) {
  if (needs & kCostNeedsKinematics) kinematics(m, q, w);
  if (needs & kCostNeedsComPos) com_pos(m, w);
  if (needs & kCostNeedsComVel) com_vel(m, v, w);
}

// sum_i weight(i, run, term) phi_i(q, v, u) (u may be null when run = 0)
template <class T>
PHX_HD T stage_cost(const ModelView<T>& m, const CostView<T>& c, const T* q, const T* v,
                    const T* u, T run, T term, Workspace<T>& w) {
  int needs = c.needs();
  cost_kinematics(m, needs, q, v, w);
  Vec3<T> com, comdot;
  if (needs & kCostNeedsComPos) com = com_position(m, w);
  if (needs & kCostNeedsComVel) comdot = com_velocity(m, w);
  T total(0);
  for (int i = 0; i < c.nterm; ++i) {
    T wt = c.weight(i, run, term);
    if (wt == T(0)) continue;
    int j = c.index(i), ax = c.axis(i);
    T e(0), phi(0);
    switch (c.kind(i)) {
      case kCostQpos: e = q[j] - c.target(i); phi = e * e; break;
      case kCostAngle: phi = T(2) * (T(1) - cos(q[j] - c.target(i))); break;
      case kCostQvel: e = v[j] - c.target(i); phi = e * e; break;
      case kCostCtrl: e = u[j] - c.target(i); phi = e * e; break;
      case kCostBodyPos: e = w.xpos[3 * j + ax] - c.target(i); phi = e * e; break;
      case kCostBodyUp: phi = T(1) - w.xmat[9 * j + 6 + ax]; break;
      case kCostComPos: e = com[ax] - c.target(i); phi = e * e; break;
      case kCostComVel: e = comdot[ax] - c.target(i); phi = e * e; break;
      default: break;
    }
    total += wt * phi;
  }
  return total;
}

// Adjoint of stage_cost scaled by s: adds s d/dq, s d/dv and s d/du of the stage's cost to
// adj_q, adj_v and adj_u (adj_u may be null when run = 0). Replays the kinematics into w; a is
// scratch.
template <class T>
PHX_HD void adj_stage_cost(const ModelView<T>& m, const CostView<T>& c, const T* q, const T* v,
                           const T* u, T run, T term, T s, Workspace<T>& w, AdjWorkspace<T>& a,
                           T* adj_q, T* adj_v, T* adj_u) {
  int needs = c.needs();
  cost_kinematics(m, needs, q, v, w);
  if (needs) a.zero();
  Vec3<T> com, comdot;
  if (needs & kCostNeedsComPos) com = com_position(m, w);
  if (needs & kCostNeedsComVel) comdot = com_velocity(m, w);
  Vec3<T> adj_com, adj_comdot;  // d cost / d c and d cost / d cdot
  for (int i = 0; i < c.nterm; ++i) {
    T wt = s * c.weight(i, run, term);
    if (wt == T(0)) continue;
    int j = c.index(i), ax = c.axis(i);
    T tgt = c.target(i);
    switch (c.kind(i)) {
      case kCostQpos: adj_q[j] += T(2) * wt * (q[j] - tgt); break;
      case kCostAngle: adj_q[j] += T(2) * wt * sin(q[j] - tgt); break;
      case kCostQvel: adj_v[j] += T(2) * wt * (v[j] - tgt); break;
      case kCostCtrl: adj_u[j] += T(2) * wt * (u[j] - tgt); break;
      case kCostBodyPos: a.xpos[3 * j + ax] += T(2) * wt * (w.xpos[3 * j + ax] - tgt); break;
      case kCostBodyUp: a.xmat[9 * j + 6 + ax] -= wt; break;
      case kCostComPos: adj_com[ax] += T(2) * wt * (com[ax] - tgt); break;
      case kCostComVel: adj_comdot[ax] += T(2) * wt * (comdot[ax] - tgt); break;
      default: break;
    }
  }
  if (!needs) return;
  if (needs & kCostNeedsComPos) adj_com_terms(m, w, a, adj_com, adj_comdot);
  if (needs & kCostNeedsComVel) adj_com_vel(m, v, w, a, adj_v);
  if (needs & kCostNeedsComPos) adj_com_pos(m, w, a, ModelAdjoint<T>{});
  adj_kinematics(m, q, w, a, adj_q);
}

// The cost of one rollout, qs (nstep x nq), vs (nstep x nv), us (nstep x nu): running terms on
// every state and control, terminal terms on the last state.
template <class T>
PHX_HD T trajectory_cost(const ModelView<T>& m, const CostView<T>& c, int nstep, const T* qs,
                         const T* vs, const T* us, Workspace<T>& w) {
  T total(0);
  for (int t = 0; t < nstep; ++t)
    total += stage_cost(m, c, qs + long(t) * m.nq, vs + long(t) * m.nv, us + long(t) * m.nu,
                        T(1), t == nstep - 1 ? T(1) : T(0), w);
  return total;
}

// Adjoint of trajectory_cost: the gradients with respect to every state and control, written
// (not accumulated) to adj_qs (nstep x nq), adj_vs (nstep x nv) and adj_us (nstep x nu)
template <class T>
PHX_HD void adj_trajectory_cost(const ModelView<T>& m, const CostView<T>& c, int nstep,
                                const T* qs, const T* vs, const T* us, Workspace<T>& w,
                                AdjWorkspace<T>& a, T* adj_qs, T* adj_vs, T* adj_us) {
  for (long i = 0; i < long(nstep) * m.nq; ++i) adj_qs[i] = T(0);
  for (long i = 0; i < long(nstep) * m.nv; ++i) adj_vs[i] = T(0);
  for (long i = 0; i < long(nstep) * m.nu; ++i) adj_us[i] = T(0);
  for (int t = 0; t < nstep; ++t)
    adj_stage_cost(m, c, qs + long(t) * m.nq, vs + long(t) * m.nv, us + long(t) * m.nu, T(1),
                   t == nstep - 1 ? T(1) : T(0), T(1), w, a, adj_qs + long(t) * m.nq,
                   adj_vs + long(t) * m.nv, adj_us + long(t) * m.nu);
}

}  // namespace phx
