// Equality constraints (Model's eq_* arrays) as bilateral rows of the step's LCP: impulses
// unbounded, the rows' velocities after the step driven to a drift correction.
//   connect: the anchors p_i = xpos_i + R_i anchor_i of bodies 1 and 2 coincide, c = p1 - p2,
//     three rows along the world axes, J = dp1/dqvel - dp2/dqvel;
//   weld: the anchors coincide, and the frames F_i = R_i Q(relquat_i) align:
//     c = vee(F1 F2^T - F2 F1^T) / 2 (sin(angle) axis, world frame), three more rows
//     J = domega_1/dqvel - domega_2/dqvel, which is dc/dt at c = 0;
//   joint, tendon: c = x1 - P(x2), J = dx1/dqvel - P'(x2) dx2/dqvel, x_i the joint's coordinate
//     or the tendon's length less its value at qpos0, P the quartic of eq_polycoef (without a
//     second object, c = x1 - P(0)).
// A row asks J qvel' = -erp c / dt - dt/2 kappa, kappa the second derivative of c along qvel at
// qacc = 0 (for points J_dot qvel, for frames alpha_1 - alpha_2 - omega_1 x omega_2, for joints
// and fixed tendons, whose coordinates have no curvature of their own, -P''(x2) V2^2): under
// qpos' = qpos + dt qvel', c(qpos') = c + dt J qvel' + dt^2/2 kappa + O(dt^3), so each step
// removes the fraction erp of the residual and the rest stays O(dt^3) rather than O(dt^2) of the
// motion's curvature. A spatial tendon's own curvature (J_dot qvel of its path, wrapping
// included) is left out of kappa, as MuJoCo leaves J_dot qvel out of every constraint: its
// residual then stays within dt^2/2 |kappa_left_out| / erp. Rows are hard: MuJoCo's solref and
// solimp (soft constraints) are not read, and the model's erp sets the correction rate.
#pragma once

#include "phalanx/lcp.h"
#include "phalanx/point_jacobian.h"
#include "phalanx/smooth.h"

namespace phx {

// The rows of equality i (eq_rows of its type) have keys eq_key(m, i, k), k < 6; they follow
// the keys of joint limits, dof friction losses, tendon limits and tendon friction losses
// (constraint.h).
template <class T>
PHX_HD PHX_INLINE int eq_key(const ModelView<T>& m, int i, int k) {
  return -1 - 2 * m.njnt - m.nv - 3 * m.ntendon - 6 * i - k;
}
// the equality a key names, -1 when it names no equality row
template <class T>
PHX_HD PHX_INLINE int eq_of_key(const ModelView<T>& m, int key) {
  int k = -1 - key - 2 * m.njnt - m.nv - 3 * m.ntendon;
  return k >= 0 ? k / 6 : -1;
}

// P(x) = sum_k coef_k x^k (k <= 4) and its first three derivatives
template <class T>
struct Quartic {
  T p, d1, d2, d3;
};

template <class T, class S>
PHX_HD PHX_INLINE Quartic<T> quartic(const S* coef, T x) {
  const T c0 = coef[0], c1 = coef[1], c2 = coef[2], c3 = coef[3], c4 = coef[4];
  Quartic<T> q;
  q.p = c0 + x * (c1 + x * (c2 + x * (c3 + x * c4)));
  q.d1 = c1 + x * (T(2) * c2 + x * (T(3) * c3 + x * T(4) * c4));
  q.d2 = T(2) * c2 + x * (T(6) * c3 + x * T(12) * c4);
  q.d3 = T(6) * c3 + x * T(24) * c4;
  return q;
}

// the transmission of a joint or tendon equality's object
PHX_HD PHX_INLINE int eq_transmission(int type) {
  return type == kEqJoint ? kTrnJoint : kTrnTendon;
}

// x and its rate for an object of a joint or tendon equality: the coordinate or length less its
// value at qpos0
template <class T, class S>
PHX_HD PHX_INLINE void eq_scalar_state(const ModelView<S>& m, const Workspace<S>& w, int type,
                                       int id, const T* qpos, const T* qvel, T& x, T& v) {
  const int trn = eq_transmission(type);
  transmission_state(m, w, trn, id, qpos, qvel, x, v);
  x -= trn == kTrnTendon ? m.tendon_length0[id] : m.qpos0[m.jnt_qposadr[id]];
}

// The frames a weld aligns, F_i = R_i Q(relquat_i), and its rotation residual from them.
template <class T, class S>
PHX_HD PHX_INLINE Mat3<T> weld_frame(const ModelView<S>& m, const Workspace<S>& w, int i, int k) {
  int b = k == 0 ? m.eq_obj1id[i] : m.eq_obj2id[i];
  return Mat3<T>::load(w.xmat + 9 * b) * to_mat(Quat<T>::load(m.eq_relquat + 8 * i + 4 * k));
}
template <class T>
PHX_HD PHX_INLINE Vec3<T> weld_residual(const Mat3<T>& F1, const Mat3<T>& F2) {
  Mat3<T> E = F1 * transpose(F2);
  return T(0.5) * Vec3<T>{E.m[7] - E.m[5], E.m[2] - E.m[6], E.m[3] - E.m[1]};
}

// Rows of the active equalities from row nrow on: J, bounds, links, b without J vfree, keys.
// Returns the new number of rows. c is the ConstraintWorkspace (constraint.h).
template <class T, class C>
PHX_HD int equality_rows(const ModelView<T>& m, const T* qpos, const T* qvel, const Workspace<T>& w,
                         C& c, int* keys, int nrow) {
  const int nv = m.nv;
  const T rate = m.erp / m.timestep, half_dt = T(0.5) * m.timestep;
  const Vec3<T> axes[3] = {{T(1), T(0), T(0)}, {T(0), T(1), T(0)}, {T(0), T(0), T(1)}};
  for (int i = 0; i < m.neq; ++i) {
    if (!m.eq_active[i]) continue;
    const int type = m.eq_type[i], nr = eq_rows(type);
    const auto J = c.J + long(nrow) * nv;
    for (long d = 0; d < long(nr) * nv; ++d) J[d] = T(0);
    const auto b = c.b + nrow;
    if (type == kEqConnect || type == kEqWeld) {
      const int b1 = m.eq_obj1id[i], b2 = m.eq_obj2id[i];
      const Vec3<T> p1 = body_point(w, b1, Vec3<T>::load(m.eq_anchor + 6 * i));
      const Vec3<T> p2 = body_point(w, b2, Vec3<T>::load(m.eq_anchor + 6 * i + 3));
      add_point_jacobian(m, w, b1, p1, axes, 3, T(1), J);
      add_point_jacobian(m, w, b2, p2, axes, 3, T(-1), J);
      BiasAcceleration<T> k1 = bias_acceleration(m, w, b1, p1, qvel);
      BiasAcceleration<T> k2 = bias_acceleration(m, w, b2, p2, qvel);
      Vec3<T> pos = rate * (p1 - p2) + half_dt * (k1.point - k2.point);
      for (int k = 0; k < 3; ++k) b[k] = pos[k];
      if (type == kEqWeld) {
        add_angular_jacobian(m, w, b1, T(1), J + 3L * nv);
        add_angular_jacobian(m, w, b2, T(-1), J + 3L * nv);
        Vec3<T> e = weld_residual(weld_frame<T>(m, w, i, 0), weld_frame<T>(m, w, i, 1));
        Vec3<T> w1 = Vec6<T>::load(w.cvel + 6 * b1).ang(),
                w2 = Vec6<T>::load(w.cvel + 6 * b2).ang();
        Vec3<T> rot = rate * e + half_dt * (k1.angular - k2.angular - cross(w1, w2));
        for (int k = 0; k < 3; ++k) b[3 + k] = rot[k];
      }
    } else {
      const int trn = eq_transmission(type), o1 = m.eq_obj1id[i], o2 = m.eq_obj2id[i];
      T x1, v1, x2 = T(0), v2 = T(0);
      eq_scalar_state(m, w, type, o1, qpos, qvel, x1, v1);
      if (o2 >= 0) eq_scalar_state(m, w, type, o2, qpos, qvel, x2, v2);
      Quartic<T> P = quartic(m.eq_polycoef + 5 * i, x2);
      add_transmission_row(m, w, trn, o1, T(1), J);
      if (o2 >= 0) add_transmission_row(m, w, trn, o2, -P.d1, J);
      T kappa = o2 >= 0 ? -P.d2 * v2 * v2 : T(0);
      b[0] = rate * (x1 - P.p) + half_dt * kappa;
    }
    for (int k = 0; k < nr; ++k) {
      c.lo[nrow + k] = -T(kLcpInf);
      c.hi[nrow + k] = T(kLcpInf);
      c.findex[nrow + k] = -1;
      c.mu[nrow + k] = T(0);
      keys[nrow + k] = eq_key(m, i, k);
    }
    nrow += nr;
  }
  return nrow;
}

// Adjoint of equality_rows for the rows of the step's keys (the equalities' rows among nrow
// rows): from the adjoints of their J (adj_J, rows by index) and b (adj_b, a pointer of any
// kind) to the adjoints of the kinematic quantities in a and of qpos and qvel, accumulated. The
// forward's arrays are of its scalar S.
template <class T, class S, class AdjRows, class B>
PHX_HD void adj_equality_rows(const ModelView<S>& m, const T* qpos, const T* qvel,
                              const Workspace<S>& w, const int* keys, int nrow,
                              const AdjRows& adj_J, B adj_b, AdjWorkspace<T>& a, T* adj_qpos,
                              T* adj_qvel) {
  const T rate = m.erp / m.timestep, half_dt = T(0.5) * m.timestep;
  const Vec3<T> axes[3] = {{T(1), T(0), T(0)}, {T(0), T(1), T(0)}, {T(0), T(0), T(1)}};
  for (int r = 0; r < nrow; ++r) {
    const int i = keys[r] < 0 ? eq_of_key(m, keys[r]) : -1;
    if (i < 0 || keys[r] != eq_key(m, i, 0)) continue;
    const int type = m.eq_type[i];
    const auto g = adj_b + r;
    if (type == kEqConnect || type == kEqWeld) {
      const int b1 = m.eq_obj1id[i], b2 = m.eq_obj2id[i];
      const Vec3<T> l1 = Vec3<T>::load(m.eq_anchor + 6 * i);
      const Vec3<T> l2 = Vec3<T>::load(m.eq_anchor + 6 * i + 3);
      const Vec3<T> p1 = body_point(w, b1, l1), p2 = body_point(w, b2, l2);
      Vec3<T> adj_p1, adj_p2, adj_u[3];
      adj_add_point_jacobian(m, w, b1, p1, axes, 3, T(1), adj_J, r, a, adj_p1, adj_u);
      adj_add_point_jacobian(m, w, b2, p2, axes, 3, T(-1), adj_J, r, a, adj_p2, adj_u);
      // b = rate (p1 - p2) + dt/2 (kappa_1 - kappa_2) (+ the rotation rows)
      Vec3<T> gp{g[0], g[1], g[2]};
      adj_p1 += rate * gp;
      adj_p2 -= rate * gp;
      BiasAcceleration<T> k1{half_dt * gp, Vec3<T>{}}, k2{-half_dt * gp, Vec3<T>{}};
      if (type == kEqWeld) {
        adj_add_angular_jacobian(m, b1, T(1), adj_J, r + 3, a);
        adj_add_angular_jacobian(m, b2, T(-1), adj_J, r + 3, a);
        Vec3<T> gr{g[3], g[4], g[5]};
        // e = vee(E - E^T) / 2, E = F1 F2^T: adj_E = (skew(adj_e) - skew(adj_e)^T) / 2 as
        // a matrix with adj_E[2][1] = adj_e_0 / 2 and so on; adj_F1 = adj_E F2,
        // adj_F2 = adj_E^T F1; F_k = R_k Q_k: adj_R_k = adj_F_k Q_k^T
        Vec3<T> ge = rate * gr;
        Mat3<T> adj_E;
        adj_E.m[7] = T(0.5) * ge[0];
        adj_E.m[5] = -T(0.5) * ge[0];
        adj_E.m[2] = T(0.5) * ge[1];
        adj_E.m[6] = -T(0.5) * ge[1];
        adj_E.m[3] = T(0.5) * ge[2];
        adj_E.m[1] = -T(0.5) * ge[2];
        Mat3<T> F1 = weld_frame<T>(m, w, i, 0), F2 = weld_frame<T>(m, w, i, 1);
        Mat3<T> Q1 = to_mat(Quat<T>::load(m.eq_relquat + 8 * i));
        Mat3<T> Q2 = to_mat(Quat<T>::load(m.eq_relquat + 8 * i + 4));
        Mat3<T> adj_R1 = adj_E * F2 * transpose(Q1);
        Mat3<T> adj_R2 = transpose(adj_E) * F1 * transpose(Q2);
        if (b1 > 0)
          for (int k = 0; k < 9; ++k) a.xmat[9 * b1 + k] += adj_R1.m[k];
        if (b2 > 0)
          for (int k = 0; k < 9; ++k) a.xmat[9 * b2 + k] += adj_R2.m[k];
        // dt/2 (alpha_1 - alpha_2 - omega_1 x omega_2)
        Vec3<T> gk = half_dt * gr;
        k1.angular = gk;
        k2.angular = -gk;
        Vec3<T> w1 = Vec6<T>::load(w.cvel + 6 * b1).ang(),
                w2 = Vec6<T>::load(w.cvel + 6 * b2).ang();
        Vec3<T> adj_w1 = -cross(w2, gk), adj_w2 = -cross(gk, w1);
        if (b1 > 0) adj_w1.add_to(a.cvel + 6 * b1);
        if (b2 > 0) adj_w2.add_to(a.cvel + 6 * b2);
      }
      adj_bias_acceleration(m, w, b1, p1, qvel, k1, a, adj_qvel, adj_p1);
      adj_bias_acceleration(m, w, b2, p2, qvel, k2, a, adj_qvel, adj_p2);
      adj_body_point(b1, l1, adj_p1, a);
      adj_body_point(b2, l2, adj_p2, a);
    } else {
      const int trn = eq_transmission(type), o1 = m.eq_obj1id[i], o2 = m.eq_obj2id[i];
      // b = rate (x1 - P(x2)) - dt/2 P''(x2) v2^2;  J = dx1 - P'(x2) dx2, whose rows of
      // spatial tendons move with the configuration (adj_transmission_row)
      adj_transmission_state(m, w, trn, o1, qvel, rate * g[0], T(0), a, adj_qpos, adj_qvel);
      adj_transmission_row(m, w, trn, o1, T(1), adj_J.row(r), a);
      if (o2 < 0) continue;
      T x2, v2;
      eq_scalar_state(m, w, type, o2, qpos, qvel, x2, v2);
      Quartic<T> P = quartic(m.eq_polycoef + 5 * i, x2);
      adj_transmission_row(m, w, trn, o2, -P.d1, adj_J.row(r), a);
      T adj_d1 = -transmission_dot<T>(m, w, trn, o2, adj_J.row(r));
      T adj_x2 = -rate * P.d1 * g[0] - half_dt * P.d3 * v2 * v2 * g[0] + P.d2 * adj_d1;
      T adj_v2 = -T(2) * half_dt * P.d2 * v2 * g[0];
      adj_transmission_state(m, w, trn, o2, qvel, adj_x2, adj_v2, a, adj_qpos, adj_qvel);
    }
  }
}

}  // namespace phx
