// Per-body quantities in MuJoCo's convention, for observations and rewards that read them
// (Gymnasium's MuJoCo tasks read cinert, cvel and cfrc_ext): the centre of mass of each subtree
// (mj_comPos's subtree_com), and the spatial inertia, velocity and external contact wrench of
// each body about the centre of mass of its tree (cinert, cvel: mj_comPos and mj_comVel;
// cfrc_ext: mj_rnePostConstraint). Phalanx's own kinematics keeps these about the tree root's
// origin (kinematics.h); the report moves them to MuJoCo's reference point. Also the adjoint of
// the kinematics query (KinematicsKernel's frames and centre of mass), for rewards that read
// them. After a constraint solve, the bodies' accelerations and the joints' internal wrenches
// (cacc, cfrc_int), which MuJoCo's accelerometer, force and torque sensors read.
#pragma once

#include "phalanx/cost.h"
#include "phalanx/kinematics.h"
#include "phalanx/smooth.h"

namespace phx {

// below this a subtree counts as massless (MuJoCo's mjMINVAL)
constexpr double kReportMinMass = 1e-15;

// The inertia J (about o, world axes) about the point o + s
template <class T>
PHX_HD Inertia<T> shift_inertia(const Inertia<T>& J, const Vec3<T>& s) {
  // with d = the centre of mass - o and h = m d: I' = I + m (|d - s|^2 - |d|^2) 1
  //   - m ((d - s)(d - s)^T - d d^T) = I + (m |s|^2 - 2 h.s) 1 + h s^T + s h^T - m s s^T
  Inertia<T> r = J;
  T diag = J.m * dot(s, s) - T(2) * dot(J.h, s);
  const int rr[6] = {0, 1, 2, 0, 0, 1}, cl[6] = {0, 1, 2, 1, 2, 2};
  for (int k = 0; k < 6; ++k) {
    int a = rr[k], b = cl[k];
    r.I[k] += (a == b ? diag : T(0)) + J.h[a] * s[b] + s[a] * J.h[b] - J.m * s[a] * s[b];
  }
  r.h = J.h - J.m * s;
  return r;
}

// subtree_com (nbody x 3): the centre of mass of each body and its descendants; the world's is
// that of every body, and a massless subtree's is its body's centre of mass (MuJoCo's rule).
// Needs kinematics and com_pos; writes w.crb (composite_inertias).
template <class T>
PHX_HD void subtree_coms(const ModelView<T>& m, Workspace<T>& w, T* subtree_com) {
  composite_inertias(m, w);
  Vec3<T> total;
  T mass(0);
  for (int b = 1; b < m.nbody; ++b) {
    Inertia<T> J = Inertia<T>::load(w.crb + 10 * b);
    Vec3<T> origin = Vec3<T>::load(w.xpos + 3 * m.body_rootid[b]);
    Vec3<T> c =
        J.m > T(kReportMinMass) ? origin + (T(1) / J.m) * J.h : Vec3<T>::load(w.xipos + 3 * b);
    c.store(subtree_com + 3 * b);
    if (m.body_parentid[b] == 0) {  // a tree: its mass and first moment
      total += J.m * origin + J.h;
      mass += J.m;
    }
  }
  (mass > T(kReportMinMass) ? (T(1) / mass) * total : Vec3<T>{}).store(subtree_com);
}

// cinert (nbody x 10) and, with velocities (com_vel done), cvel (nbody x 6, angular then
// linear) about the centre of mass of each body's tree, subtree_com[body_rootid]; the world's
// entries are zero. cvel may be null.
template <class T>
PHX_HD void com_based(const ModelView<T>& m, const Workspace<T>& w, const T* subtree_com, T* cinert,
                      T* cvel) {
  for (int i = 0; i < 10; ++i) cinert[i] = T(0);
  if (cvel) Vec6<T>{}.store(cvel);
  for (int b = 1; b < m.nbody; ++b) {
    int root = m.body_rootid[b];
    Vec3<T> s = Vec3<T>::load(subtree_com + 3 * root) - Vec3<T>::load(w.xpos + 3 * root);
    shift_inertia(Inertia<T>::load(w.cinert + 10 * b), s).store(cinert + 10 * b);
    if (cvel) {
      Vec6<T> v = Vec6<T>::load(w.cvel + 6 * b);
      Vec6<T>::make(v.ang(), v.lin() + cross(v.ang(), s)).store(cvel + 6 * b);
    }
  }
}

// cfrc_ext (nbody x 6, torque then force, in world axes): the wrench of the contact forces on
// each body about the centre of mass of its tree. Contact i at pos (3) with frame (9: the
// normal from geom 1 to geom 2, then the tangents) carries force (3, in that frame) on geom 2's
// body and its opposite on geom 1's; geom (2) names the geoms. The world's entry is zero.
template <class T>
PHX_HD void contact_wrenches(const ModelView<T>& m, const T* subtree_com, int ncon, const T* pos,
                             const T* frame, const T* force, const int* geom, T* cfrc_ext) {
  for (int i = 0; i < 6 * m.nbody; ++i) cfrc_ext[i] = T(0);
  for (int i = 0; i < ncon; ++i) {
    Vec3<T> f;  // in world: frame^T force
    for (int k = 0; k < 3; ++k) f += force[3 * i + k] * Vec3<T>::load(frame + 9 * i + 3 * k);
    Vec3<T> p = Vec3<T>::load(pos + 3 * i);
    for (int side = 0; side < 2; ++side) {
      int g = geom[2 * i + side];
      int b = g >= 0 && g < m.ngeom ? m.geom_bodyid[g] : 0;  // out of range: checked by the host
      if (b == 0) continue;
      Vec3<T> r = p - Vec3<T>::load(subtree_com + 3 * m.body_rootid[b]);
      Vec6<T> wrench = Vec6<T>::make(cross(r, f), f);
      Vec6<T> sum = Vec6<T>::load(cfrc_ext + 6 * b);
      (side == 0 ? sum - wrench : sum + wrench).store(cfrc_ext + 6 * b);
    }
  }
}

// After the constraint solve (MuJoCo's mj_rnePostConstraint), from qacc (nv: the acceleration
// the constraint forces included) and cfrc_ext (nbody x 6, contact_wrenches; null: none), about
// the centre of mass of each body's tree in world axes: cacc (nbody x 6, angular then linear),
// each body's acceleration with the world's against gravity, and cfrc_int (nbody x 6, torque
// then force), the wrench its parent exerts on it through its joints, which with the external
// wrenches moves its subtree. The world's cfrc_int is the sum of its children's, each about its
// own tree's centre of mass, as MuJoCo sums them. Needs the kinematics with com_pos and
// com_vel in w (overwrites w.qfrc); rnea leaves the accelerations and subtree forces about each
// tree's root origin.
template <class T>
PHX_HD void post_constraint(const ModelView<T>& m, const T* qvel, const T* qacc, Workspace<T>& w,
                            const T* subtree_com, const T* cfrc_ext, T* cacc, T* cfrc_int) {
  rnea(m, qvel, qacc, w, w.qfrc);  // its joint forces are not needed: w.qfrc holds them
  Vec6<T>::load(w.cacc).store(cacc);
  Vec6<T>{}.store(cfrc_int);
  for (int b = 1; b < m.nbody; ++b) {  // minus the external wrenches on each subtree
    (cfrc_ext ? Vec6<T>{} - Vec6<T>::load(cfrc_ext + 6 * b) : Vec6<T>{}).store(cfrc_int + 6 * b);
  }
  for (int b = m.nbody - 1; b > 0; --b) {
    int p = m.body_parentid[b];
    if (p > 0)
      (Vec6<T>::load(cfrc_int + 6 * p) + Vec6<T>::load(cfrc_int + 6 * b)).store(cfrc_int + 6 * p);
  }
  for (int b = 1; b < m.nbody; ++b) {  // moved from the root's origin by s
    int root = m.body_rootid[b];
    Vec3<T> s = Vec3<T>::load(subtree_com + 3 * root) - Vec3<T>::load(w.xpos + 3 * root);
    Vec6<T> a = Vec6<T>::load(w.cacc + 6 * b), f = Vec6<T>::load(w.cfrc + 6 * b);
    Vec6<T>::make(a.ang(), a.lin() + cross(a.ang(), s)).store(cacc + 6 * b);
    Vec6<T> fi =
        Vec6<T>::make(f.ang() - cross(s, f.lin()), f.lin()) + Vec6<T>::load(cfrc_int + 6 * b);
    fi.store(cfrc_int + 6 * b);
    if (m.body_parentid[b] == 0) (Vec6<T>::load(cfrc_int) + fi).store(cfrc_int);
  }
}

// Adjoint of the kinematics query: from the adjoints of the bodies' frames xpos (nbody x 3) and
// xmat (nbody x 9), the sites' site_xpos (nsite x 3) and site_xmat (nsite x 9), the centre of
// mass (adj_centre, 3) and, with qvel, its velocity (adj_centre_vel, 3) (each null: zero) to
// adj_qpos (nq) and, with qvel, adj_qvel (nv), accumulated. Replays the kinematics into w; a is
// scratch. A site's frame is its body's moved by the site's pose in it: site_xpos = xpos + R p,
// site_xmat = R S.
template <class T>
PHX_HD void adj_kinematics_query(const ModelView<T>& m, const T* qpos, const T* qvel,
                                 Workspace<T>& w, AdjWorkspace<T>& a, const T* adj_xpos,
                                 const T* adj_xmat, const T* adj_site_xpos, const T* adj_site_xmat,
                                 const T* adj_centre, const T* adj_centre_vel, T* adj_qpos,
                                 T* adj_qvel) {
  const int needs = kCostNeedsKinematics | kCostNeedsComPos | (qvel ? kCostNeedsComVel : 0);
  cost_kinematics(m, needs, qpos, qvel, w);
  a.zero();
  for (int i = 0; adj_xpos && i < 3 * m.nbody; ++i) a.xpos[i] += adj_xpos[i];
  for (int i = 0; adj_xmat && i < 9 * m.nbody; ++i) a.xmat[i] += adj_xmat[i];
  for (int s = 0; s < m.nsite; ++s) {
    const int b = m.site_bodyid[s];
    Mat3<T> adj_R = Mat3<T>::load(a.xmat + 9 * b);
    if (adj_site_xpos) {  // xpos + R p
      const Vec3<T> g = Vec3<T>::load(adj_site_xpos + 3 * s), p = Vec3<T>::load(m.site_pos + 3 * s);
      (Vec3<T>::load(a.xpos + 3 * b) + g).store(a.xpos + 3 * b);
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) adj_R(i, j) += g[i] * p[j];
    }
    if (adj_site_xmat) {  // R S: adj_R += G S^T
      const Mat3<T> S = to_mat(Quat<T>::load(m.site_quat + 4 * s));
      const Mat3<T> G = Mat3<T>::load(adj_site_xmat + 9 * s) * transpose(S);
      for (int i = 0; i < 9; ++i) adj_R.m[i] += G.m[i];
    }
    adj_R.store(a.xmat + 9 * b);
  }
  const Vec3<T> adj_c = adj_centre ? Vec3<T>::load(adj_centre) : Vec3<T>{};
  const Vec3<T> adj_cdot = adj_centre_vel && qvel ? Vec3<T>::load(adj_centre_vel) : Vec3<T>{};
  adj_com_terms(m, w, a, adj_c, adj_cdot);
  if (qvel) adj_com_vel(m, qvel, w, a, adj_qvel);
  adj_com_pos(m, w, a, ModelAdjoint<T>{});
  adj_kinematics(m, qpos, w, a, adj_qpos);
}

}  // namespace phx
