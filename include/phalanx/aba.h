// Articulated-body algorithm (Featherstone, Rigid Body Dynamics Algorithms, section 7.3) in
// world-aligned coordinates about each tree's reference point, one dof at a time: a body with
// k dofs is treated as a chain of k - 1 massless links, which gives the exact solution of
//   (M + diag(armature)) qacc = tau - c(q, qvel).
// With implicit damping (MuJoCo's Euler integrator) the caller passes armature + dt * damping.
#pragma once

#include "phalanx/kinematics.h"

namespace phx {

namespace detail {

// The articulated inertias' pass, children before parents: each dof projected out of its body's
// articulated inertia, U = IA S and 1 / D = 1 / (S^T U + armature) into w.aba_U and w.aba_invD.
// With kBias, the bias forces' pass in the same sweep (pA, and u = tau - S^T pA into w.aba_u),
// with c the velocity-product acceleration of each dof. Needs kinematics and com_pos (and
// com_vel with kBias). U and 1 / D take the same operations with or without kBias.
template <bool kBias, class T>
PHX_HD void aba_inertias(const ModelView<T>& m, const T* qvel, const T* tau, const T* armature,
                         Workspace<T>& w) {
  // each rigid body's inertia and bias force; the children's contributions add to them
  for (int b = 1; b < m.nbody; ++b) {
    Inertia<T> J = Inertia<T>::load(w.cinert + 10 * b);
    Mat6<T>::from(J).store(w.aba_IA + 36 * b);
    if constexpr (kBias) {
      Vec6<T> v = Vec6<T>::load(w.cvel + 6 * b);
      cross_force(v, J * v).store(w.aba_pA + 6 * b);
    }
  }

  for (int b = m.nbody - 1; b > 0; --b) {
    Mat6<T> IA = Mat6<T>::load(w.aba_IA + 36 * b);
    Vec6<T> pA;
    if constexpr (kBias) pA = Vec6<T>::load(w.aba_pA + 6 * b);
    int d0 = m.body_dofadr[b], p = m.body_parentid[b];
    for (int d = d0 + m.body_dofnum[b] - 1; d >= d0; --d) {
      Vec6<T> S = Vec6<T>::load(w.cdof + 6 * d);
      // U = IA S and Y = IA c in one pass over IA (symmetric: row j is column j)
      Vec6<T> c, U, Y;
      if constexpr (kBias) c = qvel[d] * Vec6<T>::load(w.cdof_dot + 6 * d);
      for (int j = 0; j < 6; ++j) {
        for (int i = 0; i < 6; ++i) {
          U.v[i] += S.v[j] * IA.m[6 * j + i];
          if constexpr (kBias) Y.v[i] += c.v[j] * IA.m[6 * j + i];
        }
      }
      T invD = T(1) / (dot(S, U) + armature[d]);
      U.store(w.aba_U + 6 * d);
      w.aba_invD[d] = invD;
      if constexpr (kBias) w.aba_u[d] = tau[d] - dot(S, pA);
      if (d == d0 && p == 0) break;  // nothing further up uses the projection
      // IA <- IA - U U^T / D; pA <- pA + IA c + U u / D, where the projected IA c is
      // Y - U (U . c) / D
      for (int r = 0; r < 6; ++r)
        for (int k = 0; k < 6; ++k) IA.m[6 * r + k] -= U.v[r] * U.v[k] * invD;
      if constexpr (kBias) pA += Y + ((w.aba_u[d] - dot(U, c)) * invD) * U;
    }
    if (p > 0) {
      (Mat6<T>::load(w.aba_IA + 36 * p) += IA).store(w.aba_IA + 36 * p);
      if constexpr (kBias) (Vec6<T>::load(w.aba_pA + 6 * p) + pA).store(w.aba_pA + 6 * p);
    }
  }
}

// The accelerations' pass, parents before children, from aba_U, aba_invD and aba_u: qacc, and
// the bodies' accelerations into w.cacc (with kBias, with gravity and the velocity products)
template <bool kBias, class T>
PHX_HD void aba_accelerations(const ModelView<T>& m, const T* qvel, Workspace<T>& w, T* qacc) {
  Vec6<T> a0;
  if constexpr (kBias) a0 = Vec6<T>::make(Vec3<T>{}, -Vec3<T>::load(m.gravity));
  a0.store(w.cacc);
  for (int b = 1; b < m.nbody; ++b) {
    Vec6<T> a = Vec6<T>::load(w.cacc + 6 * m.body_parentid[b]);
    int d0 = m.body_dofadr[b];
    for (int d = d0; d < d0 + m.body_dofnum[b]; ++d) {
      if constexpr (kBias) a += qvel[d] * Vec6<T>::load(w.cdof_dot + 6 * d);
      T qdd = (w.aba_u[d] - dot(Vec6<T>::load(w.aba_U + 6 * d), a)) * w.aba_invD[d];
      qacc[d] = qdd;
      a += qdd * Vec6<T>::load(w.cdof + 6 * d);
    }
    a.store(w.cacc + 6 * b);
  }
}

}  // namespace detail

// Solve for qacc, velocity products and gravity included. Needs kinematics, com_pos and
// com_vel. Writes aba_* and cacc.
template <class T>
PHX_HD void aba(const ModelView<T>& m, const T* qvel, const T* tau, const T* armature,
                Workspace<T>& w, T* qacc) {
  detail::aba_inertias<true>(m, qvel, tau, armature, w);
  detail::aba_accelerations<true>(m, qvel, w, qacc);
}

// The factorisation of M + diag(armature) that aba_solve reads (aba_U, aba_invD; aba() leaves
// the same bits there). Needs kinematics and com_pos.
template <class T>
PHX_HD void aba_factor(const ModelView<T>& m, const T* armature, Workspace<T>& w) {
  detail::aba_inertias<false>(m, static_cast<const T*>(nullptr), static_cast<const T*>(nullptr),
                              armature, w);
}

// x = (M + diag(armature))^-1 tau, without velocity products or gravity: the O(n) linear solve
// of the adjoints, on the factorisation aba_factor (or aba) left in w. Writes aba_pA, aba_u
// and cacc (the bodies' accelerations of x).
template <class T>
PHX_HD void aba_solve(const ModelView<T>& m, const T* tau, Workspace<T>& w, T* x) {
  for (int b = 1; b < m.nbody; ++b) Vec6<T>().store(w.aba_pA + 6 * b);
  for (int b = m.nbody - 1; b > 0; --b) {
    Vec6<T> pA = Vec6<T>::load(w.aba_pA + 6 * b);
    int d0 = m.body_dofadr[b], p = m.body_parentid[b];
    for (int d = d0 + m.body_dofnum[b] - 1; d >= d0; --d) {
      T u = tau[d] - dot(Vec6<T>::load(w.cdof + 6 * d), pA);
      w.aba_u[d] = u;
      if (d == d0 && p == 0) break;
      pA += (u * w.aba_invD[d]) * Vec6<T>::load(w.aba_U + 6 * d);
    }
    if (p > 0) (Vec6<T>::load(w.aba_pA + 6 * p) + pA).store(w.aba_pA + 6 * p);
  }
  detail::aba_accelerations<false>(m, static_cast<const T*>(nullptr), w, x);
}

}  // namespace phx
