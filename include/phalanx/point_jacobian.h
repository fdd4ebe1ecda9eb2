// Motion of points and frames fixed to bodies, as rows over the dofs: the velocity of a point
// per unit qvel (contact and connect rows), a body's angular velocity per unit qvel (weld rows),
// and the acceleration they have when qacc = 0 (J_dot qvel, MuJoCo's mj_jacDot applied to qvel).
// A body moves with the dofs on its path to the root (dof_parentid); cdof, cvel and cdof_dot are
// com_vel's spatial vectors, about the origin of the body's tree (the xpos of its root body).
// Each function has its adjoint beside it, from the adjoints of its results to those of the
// kinematic quantities it read (AdjWorkspace), accumulated.
#pragma once

#include "phalanx/kinematics.h"

namespace phx {

// the last dof on the path from body b to the root, -1 if none
template <class T>
PHX_HD int last_dof(const ModelView<T>& m, int b) {
  while (b > 0 && m.body_dofnum[b] == 0) b = m.body_parentid[b];
  return b > 0 ? m.body_dofadr[b] + m.body_dofnum[b] - 1 : -1;
}

// world position of the point `local` (in body b's frame): xpos_b + R_b local
template <class T, class S>
PHX_HD PHX_INLINE Vec3<T> body_point(const Workspace<S>& w, int b, const Vec3<T>& local) {
  return Vec3<T>::load(w.xpos + 3 * b) + Mat3<T>::load(w.xmat + 9 * b) * local;
}

// adjoint of body_point: adj_xpos_b += adj_p, adj_R_b += adj_p local^T (nothing for the world,
// whose frame is constant)
template <class T>
PHX_HD PHX_INLINE void adj_body_point(int b, const Vec3<T>& local, const Vec3<T>& adj_p,
                                      AdjWorkspace<T>& a) {
  if (b == 0) return;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) a.xmat[9 * b + 3 * i + j] += adj_p[i] * local[j];
  adj_p.add_to(a.xpos + 3 * b);
}

// rows k < nr (row k at rows + k nv; a pointer to T or a Strided one) += sign * u[k] .
// (velocity of the point p fixed to body b per unit qvel): a contact's normal and tangent rows
// share the point and the walk to the root
template <class T, class P>
PHX_HD void add_point_jacobian(const ModelView<T>& m, const Workspace<T>& w, int b,
                               const Vec3<T>& p, const Vec3<T>* u, int nr, T sign, P rows) {
  Vec3<T> r = p - Vec3<T>::load(w.xpos + 3 * m.body_rootid[b]);
  for (int d = last_dof(m, b); d >= 0; d = m.dof_parentid[d]) {
    Vec6<T> s = Vec6<T>::load(w.cdof + 6 * d);
    Vec3<T> t = s.lin() + cross(s.ang(), r);
    for (int k = 0; k < nr; ++k) rows[long(k) * m.nv + d] += sign * dot(u[k], t);
  }
}

// Adjoint of add_point_jacobian: from the adjoints of its nr rows (rows row0.. of adj_J, read
// on the path's dofs only) to adj_p, adj_u[k] (accumulated) and to the adjoints of cdof and of
// the root body's xpos in a.
// Per dof d on the path: row_kd += sign u_k . t,  t = s_lin + s_ang x r,  r = p - xpos[root];
// the rows' adjoints combine into one adj_t = sum_k g_kd u_k before the cross products.
template <class T, class S, class AdjRows>
PHX_HD void adj_add_point_jacobian(const ModelView<S>& m, const Workspace<S>& w, int b,
                                   const Vec3<T>& p, const Vec3<T>* u, int nr, T sign,
                                   const AdjRows& adj_J, int row0, AdjWorkspace<T>& a,
                                   Vec3<T>& adj_p, Vec3<T>* adj_u) {
  if (last_dof(m, b) < 0) return;  // the world: no dofs
  int root = m.body_rootid[b];
  Vec3<T> r = p - Vec3<T>::load(w.xpos + 3 * root);
  Vec3<T> adj_r;
  typename AdjRows::Row rows[3];
  for (int k = 0; k < nr; ++k) rows[k] = adj_J.row(row0 + k);
  for (int d = last_dof(m, b); d >= 0; d = m.dof_parentid[d]) {
    Vec6<T> s = Vec6<T>::load(w.cdof + 6 * d);
    Vec3<T> t = s.lin() + cross(s.ang(), r), adj_t;
    for (int k = 0; k < nr; ++k) {
      T g = sign * rows[k](d);
      adj_u[k] += g * t;
      adj_t += g * u[k];
    }
    // u . (s_ang x r) = s_ang . (r x u) = r . (u x s_ang)
    Vec3<T> adj_ang = cross(r, adj_t);
    adj_r += cross(adj_t, s.ang());
    for (int i = 0; i < 3; ++i) {
      a.cdof[6 * d + i] += adj_ang[i];
      a.cdof[6 * d + 3 + i] += adj_t[i];
    }
  }
  adj_p += adj_r;
  (-adj_r).add_to(a.xpos + 3 * root);
}

// rows k < 3 (row k at rows + k nv; a pointer to T or a Strided one) += sign * (world angular
// velocity of body b per unit qvel)_k
template <class T, class P>
PHX_HD void add_angular_jacobian(const ModelView<T>& m, const Workspace<T>& w, int b, T sign,
                                 P rows) {
  for (int d = last_dof(m, b); d >= 0; d = m.dof_parentid[d])
    for (int k = 0; k < 3; ++k) rows[long(k) * m.nv + d] += sign * w.cdof[6 * d + k];
}

// adjoint of add_angular_jacobian: rows row0.. of adj_J to the adjoints of cdof
template <class T, class S, class AdjRows>
PHX_HD void adj_add_angular_jacobian(const ModelView<S>& m, int b, T sign, const AdjRows& adj_J,
                                     int row0, AdjWorkspace<T>& a) {
  for (int d = last_dof(m, b); d >= 0; d = m.dof_parentid[d])
    for (int k = 0; k < 3; ++k) a.cdof[6 * d + k] += sign * adj_J(row0 + k, d);
}

// What a body and a point p fixed to it accelerate at when qacc = 0: with the spatial
// acceleration (alpha, a0) = sum over the path of cdof_dot qvel and the velocity
// (omega, v0) = cvel_b, both about the tree's origin o,
//   point = a0 + alpha x r + omega x (v0 + omega x r),  r = p - o,   angular = alpha,
// the classical acceleration of the material point (the spatial one plus omega x its velocity).
// Zero for a body without dofs.
template <class T>
struct BiasAcceleration {
  Vec3<T> point, angular;
};

template <class T, class S>
PHX_HD BiasAcceleration<T> bias_acceleration(const ModelView<S>& m, const Workspace<S>& w, int b,
                                             const Vec3<T>& p, const T* qvel) {
  BiasAcceleration<T> acc;
  if (last_dof(m, b) < 0) return acc;
  Vec6<T> sa;
  for (int d = last_dof(m, b); d >= 0; d = m.dof_parentid[d])
    sa += qvel[d] * Vec6<T>::load(w.cdof_dot + 6 * d);
  Vec6<T> v = Vec6<T>::load(w.cvel + 6 * b);
  Vec3<T> r = p - Vec3<T>::load(w.xpos + 3 * m.body_rootid[b]);
  acc.angular = sa.ang();
  acc.point = sa.lin() + cross(sa.ang(), r) + cross(v.ang(), v.lin() + cross(v.ang(), r));
  return acc;
}

// adjoint of bias_acceleration: from adj (of point and angular) to the adjoints of cdof_dot,
// cvel and the root's xpos in a, of qvel, and of p (adj_p), accumulated
template <class T, class S>
PHX_HD void adj_bias_acceleration(const ModelView<S>& m, const Workspace<S>& w, int b,
                                  const Vec3<T>& p, const T* qvel, const BiasAcceleration<T>& adj,
                                  AdjWorkspace<T>& a, T* adj_qvel, Vec3<T>& adj_p) {
  if (last_dof(m, b) < 0) return;
  Vec6<T> sa;
  for (int d = last_dof(m, b); d >= 0; d = m.dof_parentid[d])
    sa += qvel[d] * Vec6<T>::load(w.cdof_dot + 6 * d);
  Vec6<T> v = Vec6<T>::load(w.cvel + 6 * b);
  int root = m.body_rootid[b];
  Vec3<T> r = p - Vec3<T>::load(w.xpos + 3 * root);
  const Vec3<T>& g = adj.point;
  Vec3<T> omega = v.ang(), vp = v.lin() + cross(omega, r);
  // point = a0 + alpha x r + omega x vp,  vp = v0 + omega x r
  Vec3<T> adj_alpha = adj.angular + cross(r, g), adj_r = cross(g, sa.ang());
  Vec3<T> adj_vp = cross(g, omega);
  Vec3<T> adj_omega = cross(vp, g) + cross(r, adj_vp);
  adj_r += cross(adj_vp, omega);
  Vec6<T> adj_sa = Vec6<T>::make(adj_alpha, g);
  for (int d = last_dof(m, b); d >= 0; d = m.dof_parentid[d]) {
    Vec6<T> cd = Vec6<T>::load(w.cdof_dot + 6 * d);
    T q = qvel[d];
    for (int i = 0; i < 6; ++i) {
      a.cdof_dot[6 * d + i] += q * adj_sa[i];
      adj_qvel[d] += cd[i] * adj_sa[i];
    }
  }
  for (int i = 0; i < 3; ++i) {
    a.cvel[6 * b + i] += adj_omega[i];
    a.cvel[6 * b + 3 + i] += adj_vp[i];
  }
  adj_p += adj_r;
  (-adj_r).add_to(a.xpos + 3 * root);
}

// Body b's centre of mass relative to its tree's origin (the point where its xfrc_applied and
// its fluid forces act): xpos_b + R_b body_ipos - xpos_root, read from xpos and xmat so that
// the adjoint reaches them and body_ipos
template <class T, class S>
PHX_HD PHX_INLINE Vec3<T> com_offset(const ModelView<S>& m, const Workspace<S>& w, int b) {
  return body_point(w, b, Vec3<T>::load(m.body_ipos + 3 * b)) -
         Vec3<T>::load(w.xpos + 3 * m.body_rootid[b]);
}

// adjoint of com_offset: adj_r to the adjoints of xpos and xmat in a and of body_ipos
// (adj_ipos, may be null), accumulated
template <class T, class S>
PHX_HD PHX_INLINE void adj_com_offset(const ModelView<S>& m, const Workspace<S>& w, int b,
                                      const Vec3<T>& adj_r, AdjWorkspace<T>& a, T* adj_ipos) {
  adj_body_point(b, Vec3<T>::load(m.body_ipos + 3 * b), adj_r, a);
  (-adj_r).add_to(a.xpos + 3 * m.body_rootid[b]);
  if (adj_ipos) mul_transpose(Mat3<T>::load(w.xmat + 9 * b), adj_r).add_to(adj_ipos + 3 * b);
}

// The generalized force of a force acting at the point r (relative to body b's tree origin) of
// body b and a torque, both in world, added to qfrc: for each dof d on the body's path
//   qfrc_d += s_ang . (torque + r x force) + s_lin . force
// (MuJoCo's mj_applyFT). Reads cdof (com_pos).
template <class T>
PHX_HD PHX_INLINE void add_body_wrench(const ModelView<T>& m, const Workspace<T>& w, int b,
                                       const Vec3<T>& r, const Vec3<T>& force,
                                       const Vec3<T>& torque, T* qfrc) {
  const Vec3<T> moment = torque + cross(r, force);
  for (int d = last_dof(m, b); d >= 0; d = m.dof_parentid[d]) {
    Vec6<T> s = Vec6<T>::load(w.cdof + 6 * d);
    qfrc[d] += dot(s.ang(), moment) + dot(s.lin(), force);
  }
}

// adjoint of add_body_wrench: from adj_qfrc to the adjoints of cdof in a and to adj_r,
// adj_force and adj_torque, accumulated
template <class T, class S>
PHX_HD PHX_INLINE void adj_body_wrench(const ModelView<S>& m, const Workspace<S>& w, int b,
                                       const Vec3<T>& r, const Vec3<T>& force,
                                       const Vec3<T>& torque, const T* adj_qfrc, AdjWorkspace<T>& a,
                                       Vec3<T>& adj_r, Vec3<T>& adj_force, Vec3<T>& adj_torque) {
  const Vec3<T> moment = torque + cross(r, force);
  Vec3<T> adj_moment;
  for (int d = last_dof(m, b); d >= 0; d = m.dof_parentid[d]) {
    Vec6<T> s = Vec6<T>::load(w.cdof + 6 * d);
    T g = adj_qfrc[d];
    adj_moment += g * s.ang();
    adj_force += g * s.lin();
    for (int i = 0; i < 3; ++i) {
      a.cdof[6 * d + i] += g * moment[i];
      a.cdof[6 * d + 3 + i] += g * force[i];
    }
  }
  adj_cross(r, force, adj_r, adj_force, adj_moment);
  adj_torque += adj_moment;
}

// The generalized force of Cartesian forces and torques on the bodies (MuJoCo's xfrc_applied,
// nbody x 6: force, then torque, in world; the force acts at the body's centre of mass),
// added to qfrc (MuJoCo's mj_xfrcAccumulate). Reads xpos, xmat and cdof (kinematics, com_pos).
template <class T>
PHX_HD void xfrc_force(const ModelView<T>& m, const Workspace<T>& w, const T* xfrc, T* qfrc) {
  for (int b = 1; b < m.nbody; ++b) {
    if (last_dof(m, b) < 0) continue;
    add_body_wrench(m, w, b, com_offset<T>(m, w, b), Vec3<T>::load(xfrc + 6 * b),
                    Vec3<T>::load(xfrc + 6 * b + 3), qfrc);
  }
}

// adjoint of xfrc_force: from adj_qfrc to adj_xfrc and to the adjoints of cdof, xpos and xmat in
// a and of body_ipos (adj_ipos, may be null), accumulated
template <class T>
PHX_HD void adj_xfrc_force(const ModelView<T>& m, const Workspace<T>& w, const T* xfrc,
                           const T* adj_qfrc, AdjWorkspace<T>& a, T* adj_xfrc, T* adj_ipos) {
  for (int b = 1; b < m.nbody; ++b) {
    if (last_dof(m, b) < 0) continue;
    Vec3<T> adj_r, adj_force, adj_torque;
    adj_body_wrench(m, w, b, com_offset<T>(m, w, b), Vec3<T>::load(xfrc + 6 * b),
                    Vec3<T>::load(xfrc + 6 * b + 3), adj_qfrc, a, adj_r, adj_force, adj_torque);
    if (adj_xfrc) {
      adj_force.add_to(adj_xfrc + 6 * b);
      adj_torque.add_to(adj_xfrc + 6 * b + 3);
    }
    adj_com_offset(m, w, b, adj_r, a, adj_ipos);
  }
}

}  // namespace phx
