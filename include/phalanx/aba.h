// Articulated-body algorithm (Featherstone, Rigid Body Dynamics Algorithms, section 7.3) in
// world-aligned coordinates about each tree's reference point, one dof at a time: a body with
// k dofs is treated as a chain of k - 1 massless links, which gives the exact solution of
//   (M + diag(armature)) qacc = tau - c(q, qvel).
// With implicit damping (MuJoCo's Euler integrator) the caller passes armature + dt * damping.
#pragma once

#include "phalanx/kinematics.h"

namespace phx {

// Solve for qacc. Needs kinematics, com_pos and, when with_bias, com_vel. When with_bias is
// false, velocity products and gravity are left out, so qacc = (M + diag(armature))^-1 tau:
// the O(n) linear solve used by adjoints. armature has nv entries. Writes aba_* and cacc.
template <class T>
PHX_HD void aba(const ModelView<T>& m, const T* qvel, const T* tau, const T* armature,
                bool with_bias, Workspace<T>& w, T* qacc) {
  // each rigid body's inertia and bias force; the children's contributions add to them
  for (int b = 1; b < m.nbody; ++b) {
    Inertia<T> J = Inertia<T>::load(w.cinert + 10 * b);
    Mat6<T>::from(J).store(w.aba_IA + 36 * b);
    Vec6<T> pA;
    if (with_bias) {
      Vec6<T> v = Vec6<T>::load(w.cvel + 6 * b);
      pA = cross_force(v, J * v);
    }
    pA.store(w.aba_pA + 6 * b);
  }

  // backward: project each dof out of the articulated inertia, children before parents
  for (int b = m.nbody - 1; b > 0; --b) {
    Mat6<T> IA = Mat6<T>::load(w.aba_IA + 36 * b);
    Vec6<T> pA = Vec6<T>::load(w.aba_pA + 6 * b);
    int d0 = m.body_dofadr[b], p = m.body_parentid[b];
    for (int d = d0 + m.body_dofnum[b] - 1; d >= d0; --d) {
      Vec6<T> S = Vec6<T>::load(w.cdof + 6 * d);
      // U = IA S and Y = IA c in one pass over IA (symmetric: row j is column j), with c the
      // velocity-product acceleration of this dof
      Vec6<T> c, U, Y;
      if (with_bias) c = qvel[d] * Vec6<T>::load(w.cdof_dot + 6 * d);
      for (int j = 0; j < 6; ++j) {
        for (int i = 0; i < 6; ++i) {
          U.v[i] += S.v[j] * IA.m[6 * j + i];
          Y.v[i] += c.v[j] * IA.m[6 * j + i];
        }
      }
      T invD = T(1) / (dot(S, U) + armature[d]);
      T u = tau[d] - dot(S, pA);
      U.store(w.aba_U + 6 * d);
      w.aba_invD[d] = invD;
      w.aba_u[d] = u;
      if (d == d0 && p == 0) break;  // nothing further up uses the projection
      // IA <- IA - U U^T / D; pA <- pA + IA c + U u / D, where the projected IA c is
      // Y - U (U . c) / D
      for (int r = 0; r < 6; ++r)
        for (int k = 0; k < 6; ++k) IA.m[6 * r + k] -= U.v[r] * U.v[k] * invD;
      pA += Y + ((u - dot(U, c)) * invD) * U;
    }
    if (p > 0) {
      (Mat6<T>::load(w.aba_IA + 36 * p) += IA).store(w.aba_IA + 36 * p);
      (Vec6<T>::load(w.aba_pA + 6 * p) + pA).store(w.aba_pA + 6 * p);
    }
  }

  // forward: accelerations, parents before children
  Vec6<T> a0;
  if (with_bias) a0 = Vec6<T>::make(Vec3<T>{}, -Vec3<T>::load(m.gravity));
  a0.store(w.cacc);
  for (int b = 1; b < m.nbody; ++b) {
    Vec6<T> a = Vec6<T>::load(w.cacc + 6 * m.body_parentid[b]);
    int d0 = m.body_dofadr[b];
    for (int d = d0; d < d0 + m.body_dofnum[b]; ++d) {
      if (with_bias) a += qvel[d] * Vec6<T>::load(w.cdof_dot + 6 * d);
      T qdd = (w.aba_u[d] - dot(Vec6<T>::load(w.aba_U + 6 * d), a)) * w.aba_invD[d];
      qacc[d] = qdd;
      a += qdd * Vec6<T>::load(w.cdof + 6 * d);
    }
    a.store(w.cacc + 6 * b);
  }
}

}  // namespace phx
