// An XPBD step over a Model: the articulated bodies of qpos and qvel taken to maximal
// coordinates, moved by substeps of prediction, Gauss-Seidel joint projections and velocity
// recovery (Müller et al., "Detailed Rigid Body Simulation with Extended Position Based
// Dynamics", SCA 2020, Alg. 2), and read back into MuJoCo's generalized coordinates, so that a
// state and its qpos / qvel layout are the same for both solvers. The per-body and
// per-constraint math is xpbd.h; this file maps a Model's bodies and joints onto it.
//
// What a body's joint becomes (one joint per body; xpbd_supports says whether a model fits):
//   none   a weld to the parent: the body origins coincide, the frames agree
//   hinge  the anchors coincide, the axes align, the angle stays within jnt_range if limited
//   slide  the anchors agree across the axis, the frames agree
//   ball   the anchors coincide
//   free   nothing (its parent is the world)
// Velocities: XPBD's are chords, (pose - pose at the substep's start) / h, so qvel is reported
// as the same chord in coordinates, (qpos (-) qpos at the last substep's start) / h: semi-implicit
// Euler's relation between qvel and qpos. xpbd_load inverts it, stepping the coordinates back by
// h qvel, so a state passes from one XPBD step to the next without loss; handing the bodies the
// instantaneous velocities instead leaves an error of order h per step (measured: a ball
// pendulum's error after 0.5 s did not fall with the step at one substep).
// Joints are rigid (compliance 0). Each of a substep's `iterations` projects them either
//   - all at once (kXpbdTree, the default): one Newton step on every joint's linearised rows,
//     solved over the kinematic tree in linear time (xpbd_tree.h), then the hinge limits one by
//     one; the residual falls quadratically (round-off in three iterations on a 7-link arm), or
//   - one after the other (kXpbdGaussSeidel, the seed papers' order): body by body in the
//     Model's order, parents first, attachments and hinge axes as 3x3 blocks (xpbd_attach_block,
//     xpbd_hinge_align_block), the other constraints along their error; the residual falls
//     linearly, slowly along a chain.
// Each constraint's multiplier starts at 0 in every substep.
#pragma once

#include "phalanx/integrate.h"
#include "phalanx/kinematics.h"
#include "phalanx/math/dual.h"
#include "phalanx/step.h"
#include "phalanx/xpbd.h"
#include "phalanx/xpbd_tree.h"

namespace phx {

// the arrays an XPBD step works in, nbody entries each (lambda: kXpbdLambdas per body); body 0
// is the world, static at the origin
// a body's joint multipliers: the attachment's three, the alignment's three (or the
// orientation's one), the limit's
constexpr int kXpbdLambdas = 7;

template <class T>
struct XpbdArrays {
  XpbdBody<T>* body;  // poses, inverse masses and inertias
  Vec3<T>* v;         // linear velocity of the centre of mass, world (m/s)
  Vec3<T>* omega;     // angular velocity, world (rad/s)
  Vec3<T>* x_prev;    // pose at the start of the substep
  Quat<T>* q_prev;
  Vec3<T>* f;    // force at the centre of mass, world (N), without gravity
  Vec3<T>* tau;  // torque, world (N m)
  T* lambda;     // (nbody x kXpbdLambdas) the joint constraints' multipliers
  T* qpos_prev;  // (nq) the coordinates at the start of the last substep
  XpbdTreeNode<T>* node;  // the joints solved at once (xpbd_solve_joints)
};

// How an iteration projects the joints: all at once by a Newton step on their linearisation
// (xpbd_tree.h; the default), or one after the other (a Gauss-Seidel pass, as Müller's and
// Liu's solvers do)
enum XpbdJointSolver : int { kXpbdTree = 0, kXpbdGaussSeidel = 1 };

// whether every body has at most one joint and free joints hang from the world
template <class T>
PHX_HD bool xpbd_supports(const ModelView<T>& m) {
  for (int b = 1; b < m.nbody; ++b) {
    if (m.body_jntnum[b] > 1) return false;
    if (m.body_jntnum[b] == 1 && m.jnt_type[m.body_jntadr[b]] == kJointFree &&
        m.body_parentid[b] != 0)
      return false;
  }
  return true;
}

// Where body b's joint sits in its parent (body 1) and in b (body 2), in their principal frames
// relative to their centres of mass. The parent's side is the child's frame at zero joint
// displacement, (body_pos, body_quat) in the parent's body frame.
template <class T>
struct XpbdJointFrame {
  int type;    // kJoint*, or -1: none (a weld)
  Vec3<T> r1;  // anchor on the parent
  Vec3<T> r2;  // anchor on the child
  Vec3<T> a1;  // joint axis on the parent (hinge, slide)
  Vec3<T> a2;  // joint axis on the child
  Vec3<T> n1;  // a unit vector across the axis on the parent, and the same on the child:
  Vec3<T> n2;  //   the hinge angle is the angle from n1 to n2 about the axis
  Quat<T> f1;  // the joint frame (the child's body frame at zero displacement) on the parent
  Quat<T> f2;  // the child's body frame, in its principal frame
};

template <class T>
PHX_HD XpbdJointFrame<T> xpbd_joint_frame(const ModelView<T>& m, int b) {
  using xpbd_impl::rotate;
  int p = m.body_parentid[b];
  XpbdJointFrame<T> J;
  J.type = m.body_jntnum[b] ? m.jnt_type[m.body_jntadr[b]] : -1;
  Vec3<T> jpos, jaxis{T(0), T(0), T(1)};
  if (J.type >= 0) {
    int j = m.body_jntadr[b];
    jpos = Vec3<T>::load(m.jnt_pos + 3 * j);
    jaxis = Vec3<T>::load(m.jnt_axis + 3 * j);
  }
  Vec3<T> bpos = Vec3<T>::load(m.body_pos + 3 * b);
  Quat<T> bquat = Quat<T>::load(m.body_quat + 4 * b);
  Quat<T> ci1 = conjugate(Quat<T>::load(m.body_iquat + 4 * p));
  Quat<T> ci2 = conjugate(Quat<T>::load(m.body_iquat + 4 * b));
  Vec3<T> ipos1 = Vec3<T>::load(m.body_ipos + 3 * p), ipos2 = Vec3<T>::load(m.body_ipos + 3 * b);
  if (p == 0) {  // the world's principal frame is its body frame
    ci1 = Quat<T>{};
    ipos1 = Vec3<T>{};
  }
  J.f1 = ci1 * bquat;
  J.f2 = ci2;
  J.r1 = rotate(ci1, bpos + rotate(bquat, jpos) - ipos1);
  J.r2 = rotate(ci2, jpos - ipos2);
  J.a1 = rotate(J.f1, jaxis);
  J.a2 = rotate(ci2, jaxis);
  // any unit vector across the axis, in the joint frame
  Vec3<T> e = fabs(jaxis.x) < T(0.6) ? Vec3<T>{T(1), T(0), T(0)} : Vec3<T>{T(0), T(1), T(0)};
  Vec3<T> n = cross(jaxis, e);
  n = (T(1) / norm(n)) * n;
  J.n1 = rotate(J.f1, n);
  J.n2 = rotate(ci2, n);
  return J;
}

// the bodies' poses from qpos (runs kinematics and com_pos); body 0 is the world
template <class T>
PHX_HD void xpbd_poses(const ModelView<T>& m, const T* qpos, Workspace<T>& w, XpbdBody<T>* body) {
  kinematics(m, qpos, w);
  com_pos(m, w);
  body[0] = XpbdBody<T>{Vec3<T>{}, Quat<T>{}, T(0), Vec3<T>{}};
  for (int b = 1; b < m.nbody; ++b) {
    XpbdBody<T>& B = body[b];
    B.x = Vec3<T>::load(w.xipos + 3 * b);
    B.q = Quat<T>::load(w.xquat + 4 * b) * Quat<T>::load(m.body_iquat + 4 * b);
    T mass = m.body_mass[b];
    B.inv_mass = mass > T(0) ? T(1) / mass : T(0);
    for (int i = 0; i < 3; ++i) {
      T I = m.body_inertia[3 * b + i];
      B.inv_inertia[i] = I > T(0) ? T(1) / I : T(0);
    }
  }
}

// qpos and qvel -> the bodies' poses and chord velocities over a substep h: the poses at
// qpos (-) h qvel (in x_prev, q_prev) and at qpos, differenced (xpbd_velocities)
template <class T>
PHX_HD void xpbd_load(const ModelView<T>& m, const T* qpos, const T* qvel, T h, Workspace<T>& w,
                      XpbdArrays<T> s) {
  for (int i = 0; i < m.nq; ++i) s.qpos_prev[i] = qpos[i];
  integrate_pos(m, s.qpos_prev, qvel, -h);
  xpbd_poses(m, s.qpos_prev, w, s.body);
  for (int b = 0; b < m.nbody; ++b) {
    s.x_prev[b] = s.body[b].x;
    s.q_prev[b] = s.body[b].q;
  }
  xpbd_poses(m, qpos, w, s.body);
  s.v[0] = s.omega[0] = Vec3<T>{};
  for (int b = 1; b < m.nbody; ++b)
    xpbd_velocities(s.body[b].x, s.body[b].q, s.x_prev[b], s.q_prev[b], h, s.v[b], s.omega[b]);
}

// The generalized forces qfrc (nv) as forces and torques on the bodies (f, tau; zeroed first):
// a joint's force acts on the child and its reaction on the parent, at the anchor; a free
// joint's translational force acts at the body origin and its torque is in the body frame.
template <class T>
PHX_HD void xpbd_joint_forces(const ModelView<T>& m, const T* qfrc, XpbdArrays<T> s) {
  using xpbd_impl::rotate;
  for (int b = 0; b < m.nbody; ++b) s.f[b] = s.tau[b] = Vec3<T>{};
  for (int b = 1; b < m.nbody; ++b) {
    if (!m.body_jntnum[b] || !qfrc) continue;
    int p = m.body_parentid[b], d = m.jnt_dofadr[m.body_jntadr[b]];
    XpbdJointFrame<T> J = xpbd_joint_frame(m, b);
    const XpbdBody<T>& B = s.body[b];
    Quat<T> frame = B.q * J.f2;  // the child's body frame in world
    Vec3<T> r2 = rotate(B.q, J.r2), r1 = rotate(s.body[p].q, J.r1);
    Vec3<T> f, t;  // on the child at its anchor; minus them on the parent
    switch (J.type) {
      case kJointHinge:
        t = qfrc[d] * rotate(B.q, J.a2);
        break;
      case kJointSlide:
        f = qfrc[d] * rotate(B.q, J.a2);
        break;
      case kJointBall:
        t = rotate(frame, Vec3<T>{qfrc[d], qfrc[d + 1], qfrc[d + 2]});
        break;
      case kJointFree:
        f = Vec3<T>{qfrc[d], qfrc[d + 1], qfrc[d + 2]};
        t = rotate(frame, Vec3<T>{qfrc[d + 3], qfrc[d + 4], qfrc[d + 5]});
        r2 = -rotate(frame, Vec3<T>::load(m.body_ipos + 3 * b));  // the body origin
        break;
    }
    s.f[b] += f;
    s.tau[b] += t + cross(r2, f);
    s.f[p] -= f;
    s.tau[p] -= t + cross(r1, f);
  }
}

// one Gauss-Seidel pass over the joints, substep h
template <class T>
PHX_HD void xpbd_project_joints(const ModelView<T>& m, XpbdArrays<T> s, T h) {
  for (int b = 1; b < m.nbody; ++b) {
    XpbdJointFrame<T> J = xpbd_joint_frame(m, b);
    XpbdBody<T>& B1 = s.body[m.body_parentid[b]];
    XpbdBody<T>& B2 = s.body[b];
    T* lambda = s.lambda + kXpbdLambdas * b;
    Vec3<T> attach = Vec3<T>::load(lambda);
    switch (J.type) {
      case kJointFree:
        break;
      case kJointBall:
        xpbd_attach_block(B1, B2, J.r1, J.r2, T(0), h, attach);
        break;
      case kJointHinge: {
        xpbd_attach_block(B1, B2, J.r1, J.r2, T(0), h, attach);
        Vec3<T> align = Vec3<T>::load(lambda + 3);
        xpbd_hinge_align_block(B1, B2, J.a1, J.a2, T(0), h, align);
        align.store(lambda + 3);
        int j = m.body_jntadr[b];
        if (m.jnt_limited[j]) {
          T q0 = m.qpos0[m.jnt_qposadr[j]];
          xpbd_hinge_limit(B1, B2, J.a1, J.n1, J.n2, m.jnt_range[2 * j] - q0,
                           m.jnt_range[2 * j + 1] - q0, T(0), h, lambda[6]);
        }
        break;
      }
      case kJointSlide: {
        xpbd_weld_orientation(B1, B2, J.f1, J.f2, T(0), h, lambda[3]);
        using xpbd_impl::rotate;
        Vec3<T> r1 = rotate(B1.q, J.r1), r2 = rotate(B2.q, J.r2), a = rotate(B1.q, J.a1);
        Vec3<T> d = (B2.x + r2) - (B1.x + r1);
        xpbd_positional(B1, B2, r1, r2, d - dot(d, a) * a, T(0), h, lambda[0]);
        break;
      }
      default:  // none: a weld
        xpbd_attach_block(B1, B2, J.r1, J.r2, T(0), h, attach);
        xpbd_weld_orientation(B1, B2, J.f1, J.f2, T(0), h, lambda[3]);
    }
    attach.store(lambda);
  }
}

// the rows of a joint (xpbd_tree.h) of frame J between the bodies B1 (parent) and B2: the
// constraints xpbd_project_joints projects, as rows (the hinge limit aside). Any scalar R: the
// adjoint runs it on Dual numbers.
template <class R>
PHX_HD void xpbd_rows_of(const XpbdJointFrame<R>& J, const XpbdBody<R>& B1, const XpbdBody<R>& B2,
                         XpbdRows<R>& rows) {
  rows.n = 0;
  switch (J.type) {
    case kJointFree:
      break;
    case kJointBall:
      xpbd_rows_attach(rows, B1, B2, J.r1, J.r2);
      break;
    case kJointHinge:
      xpbd_rows_attach(rows, B1, B2, J.r1, J.r2);
      xpbd_rows_align(rows, B1, B2, J.a1, J.a2, J.n1);
      break;
    case kJointSlide:
      xpbd_rows_attach_across(rows, B1, B2, J.r1, J.r2, J.a1, J.n1);
      xpbd_rows_orientation(rows, B1, B2, J.f1, J.f2);
      break;
    default:  // none: a weld
      xpbd_rows_attach(rows, B1, B2, J.r1, J.r2);
      xpbd_rows_orientation(rows, B1, B2, J.f1, J.f2);
  }
}

// the rows of body b's joint at the current poses
template <class T>
PHX_HD void xpbd_joint_rows(const ModelView<T>& m, const XpbdArrays<T>& s, int b,
                            XpbdRows<T>& rows) {
  xpbd_rows_of(xpbd_joint_frame(m, b), s.body[m.body_parentid[b]], s.body[b], rows);
}

// The adjoint of xpbd_joint_rows in the two bodies' positions and orientations: the gradient of
// sum_i adj.c_i c_i + adj.g1_i . g1_i + adj.g2_i . g2_i, by Dual numbers in (x1, q1, x2, q2),
// accumulated into adj_body (the world's is left alone).
template <class T>
PHX_HD void adj_xpbd_joint_rows(const ModelView<T>& m, const XpbdArrays<T>& s, int b,
                                const XpbdRows<T>& adj, XpbdBody<T>* adj_body) {
  using D = Dual<T, 14>;
  const int p = m.body_parentid[b];
  const XpbdJointFrame<T> J = xpbd_joint_frame(m, b);
  XpbdJointFrame<D> JD;
  JD.type = J.type;
  JD.r1 = Vec3<D>::from(J.r1);
  JD.r2 = Vec3<D>::from(J.r2);
  JD.a1 = Vec3<D>::from(J.a1);
  JD.a2 = Vec3<D>::from(J.a2);
  JD.n1 = Vec3<D>::from(J.n1);
  JD.n2 = Vec3<D>::from(J.n2);
  JD.f1 = Quat<D>{D(J.f1.w), D(J.f1.x), D(J.f1.y), D(J.f1.z)};
  JD.f2 = Quat<D>{D(J.f2.w), D(J.f2.x), D(J.f2.y), D(J.f2.z)};
  XpbdBody<D> B[2];
  const int id[2] = {p, b};
  for (int k = 0; k < 2; ++k) {
    const XpbdBody<T>& src = s.body[id[k]];
    const int o = 7 * k;
    B[k].x = Vec3<D>::from(src.x);
    B[k].q = Quat<D>{D(src.q.w), D(src.q.x), D(src.q.y), D(src.q.z)};
    B[k].inv_mass = D(src.inv_mass);
    B[k].inv_inertia = Vec3<D>::from(src.inv_inertia);
    for (int i = 0; i < 3; ++i) B[k].x[i].d[o + i] = T(1);
    B[k].q.w.d[o + 3] = B[k].q.x.d[o + 4] = B[k].q.y.d[o + 5] = B[k].q.z.d[o + 6] = T(1);
  }
  XpbdRows<D> rows;
  xpbd_rows_of(JD, B[0], B[1], rows);
  D phi(T(0));
  for (int i = 0; i < rows.n; ++i) {
    phi += adj.c[i] * rows.c[i];
    for (int k = 0; k < 6; ++k) phi += adj.g1[i][k] * rows.g1[i][k] + adj.g2[i][k] * rows.g2[i][k];
  }
  for (int k = 0; k < 2; ++k) {
    if (id[k] == 0) continue;
    XpbdBody<T>& A = adj_body[id[k]];
    const int o = 7 * k;
    for (int i = 0; i < 3; ++i) A.x[i] += phi.d[o + i];
    A.q.w += phi.d[o + 3];
    A.q.x += phi.d[o + 4];
    A.q.y += phi.d[o + 5];
    A.q.z += phi.d[o + 6];
  }
}

// One iteration over the joints, substep h, all at once: a Newton step on every joint's rows
// (xpbd_tree_solve; the rows' multipliers in lambda[0..n), rigid joints), then the hinge limits
// projected one by one. A singular block (a static body below a moving one) falls back to a
// Gauss-Seidel pass.
template <class T>
PHX_HD void xpbd_solve_joints(const ModelView<T>& m, XpbdArrays<T> s, T h) {
  for (int b = 1; b < m.nbody; ++b) xpbd_joint_rows(m, s, b, s.node[b].rows);
  if (!xpbd_tree_solve(m.nbody, m.body_parentid, s.body, s.node, T(0), s.lambda, kXpbdLambdas)) {
    xpbd_project_joints(m, s, h);
    return;
  }
  for (int b = 1; b < m.nbody; ++b) {
    const XpbdTreeNode<T>& N = s.node[b];
    XpbdBody<T>& B = s.body[b];
    B.x += Vec3<T>{N.d[0], N.d[1], N.d[2]};
    B.q = xpbd_rotate(B.q, Vec3<T>{N.d[3], N.d[4], N.d[5]});
    for (int i = 0; i < N.rows.n; ++i) s.lambda[kXpbdLambdas * b + i] -= N.mu[i];
  }
  for (int b = 1; b < m.nbody; ++b) {
    if (!m.body_jntnum[b]) continue;
    const int j = m.body_jntadr[b];
    if (m.jnt_type[j] != kJointHinge || !m.jnt_limited[j]) continue;
    XpbdJointFrame<T> J = xpbd_joint_frame(m, b);
    T q0 = m.qpos0[m.jnt_qposadr[j]];
    xpbd_hinge_limit(s.body[m.body_parentid[b]], s.body[b], J.a1, J.n1, J.n2,
                     m.jnt_range[2 * j] - q0, m.jnt_range[2 * j + 1] - q0, T(0), h,
                     s.lambda[kXpbdLambdas * b + 6]);
  }
}

// The adjoint of xpbd_solve_joints at the bodies and multipliers it started from (s.body and
// s.lambda, read only): adj_body (nbody) and adj_lambda (kXpbdLambdas per body) hold the
// adjoints of its outputs and receive those of its inputs (positions, orientations, inverse
// masses and inertias; multipliers). Replays the iteration: the tree solve, then the hinge
// limits with each one's two bodies kept before it (in work, 3 nbody bodies), reversed. Scratch:
// adj_rows (nbody), adj_d (6 nbody), adj_dl (kXpbdLambdas nbody). Returns false, with nothing
// accumulated, where the forward fell back to Gauss-Seidel (a singular block).
template <class T>
PHX_HD bool adj_xpbd_solve_joints(const ModelView<T>& m, XpbdArrays<T> s, T h,
                                  XpbdBody<T>* adj_body, T* adj_lambda, XpbdBody<T>* work,
                                  XpbdRows<T>* adj_rows, T* adj_d, T* adj_dl) {
  const int nb = m.nbody;
  for (int b = 1; b < nb; ++b) xpbd_joint_rows(m, s, b, s.node[b].rows);
  if (!xpbd_tree_solve(nb, m.body_parentid, s.body, s.node, T(0), s.lambda, kXpbdLambdas))
    return false;
  // the forward after the solve, and each limit's bodies before it
  XpbdBody<T>* cur = work;
  XpbdBody<T>* pre = work + nb;
  for (int b = 0; b < nb; ++b) cur[b] = s.body[b];
  for (int b = 1; b < nb; ++b) {
    const XpbdTreeNode<T>& N = s.node[b];
    cur[b].x += Vec3<T>{N.d[0], N.d[1], N.d[2]};
    cur[b].q = xpbd_rotate(cur[b].q, Vec3<T>{N.d[3], N.d[4], N.d[5]});
  }
  auto limited = [&](int b) {
    if (!m.body_jntnum[b]) return false;
    const int j = m.body_jntadr[b];
    return m.jnt_type[j] == kJointHinge && m.jnt_limited[j] != 0;
  };
  auto range = [&](int b, T& lo, T& hi) {
    const int j = m.body_jntadr[b];
    const T q0 = m.qpos0[m.jnt_qposadr[j]];
    lo = m.jnt_range[2 * j] - q0;
    hi = m.jnt_range[2 * j + 1] - q0;
  };
  for (int b = 1; b < nb; ++b) {
    if (!limited(b)) continue;
    const int p = m.body_parentid[b];
    pre[2 * b] = cur[p];
    pre[2 * b + 1] = cur[b];
    XpbdJointFrame<T> J = xpbd_joint_frame(m, b);
    T lo, hi, lambda = s.lambda[kXpbdLambdas * b + 6];
    range(b, lo, hi);
    xpbd_hinge_limit(cur[p], cur[b], J.a1, J.n1, J.n2, lo, hi, T(0), h, lambda);
  }
  // the limits, last first
  for (int b = nb - 1; b >= 1; --b) {
    if (!limited(b)) continue;
    const int p = m.body_parentid[b];
    XpbdJointFrame<T> J = xpbd_joint_frame(m, b);
    T lo, hi;
    range(b, lo, hi);
    XpbdBody<T> out1 = adj_body[p], out2 = adj_body[b];
    T& adj_l = adj_lambda[kXpbdLambdas * b + 6];
    const T out_l = adj_l;
    adj_body[p] = adj_body[b] = XpbdBody<T>::zero();
    adj_l = T(0);
    Vec3<T> adj_a1, adj_n1, adj_n2;
    T adj_lo = T(0), adj_hi = T(0), adj_alpha = T(0), adj_h = T(0);
    adj_xpbd_hinge_limit(pre[2 * b], pre[2 * b + 1], J.a1, J.n1, J.n2, lo, hi, T(0), h,
                         s.lambda[kXpbdLambdas * b + 6], adj_body[p], adj_body[b], adj_a1, adj_n1,
                         adj_n2, adj_lo, adj_hi, adj_alpha, adj_h, adj_l, out1, out2, out_l);
  }
  // x' = x + d, q' = rotate(q, d_ang), lambda' = lambda + dlambda
  for (int b = 0; b < nb; ++b) {
    for (int k = 0; k < 6; ++k) adj_d[6 * b + k] = T(0);
    for (int i = 0; i < kXpbdLambdas; ++i)
      adj_dl[kXpbdLambdas * b + i] = adj_lambda[kXpbdLambdas * b + i];
  }
  for (int b = 1; b < nb; ++b) {
    const XpbdTreeNode<T>& N = s.node[b];
    adj_body[b].x.store(adj_d + 6 * b);
    Quat<T> adj_q = Quat<T>::zero();
    Vec3<T> adj_phi;
    adj_xpbd_rotate(s.body[b].q, Vec3<T>{N.d[3], N.d[4], N.d[5]}, adj_q, adj_phi, adj_body[b].q);
    adj_body[b].q = adj_q;
    adj_phi.store(adj_d + 6 * b + 3);
  }
  T adj_at = T(0);
  adj_xpbd_tree_solve(nb, m.body_parentid, s.body, s.node, T(0), s.lambda, kXpbdLambdas, adj_d,
                      adj_dl, adj_rows, adj_body, adj_lambda, adj_at);
  for (int b = 1; b < nb; ++b) adj_xpbd_joint_rows(m, s, b, adj_rows[b], adj_body);
  return true;
}

// the bodies' poses -> qpos (in place; the qpos given picks the branch of hinge angles and of
// quaternion signs, so that coordinates move continuously): the current poses, or with `start`
// those at the start of the last substep (x_prev, q_prev; a static body's are its pose)
template <class T>
PHX_HD void xpbd_coordinates(const ModelView<T>& m, const XpbdArrays<T>& s, bool start, T* qpos) {
  using xpbd_impl::rotate;
  const T pi = T(3.14159265358979323846);
  auto pose = [&](int b) {
    XpbdBody<T> B = s.body[b];
    if (start && B.inv_mass > T(0)) {
      B.x = s.x_prev[b];
      B.q = s.q_prev[b];
    }
    return B;
  };
  for (int b = 1; b < m.nbody; ++b) {
    if (!m.body_jntnum[b]) continue;
    int j = m.body_jntadr[b], a = m.jnt_qposadr[j];
    XpbdJointFrame<T> J = xpbd_joint_frame(m, b);
    const XpbdBody<T> B1 = pose(m.body_parentid[b]);
    const XpbdBody<T> B2 = pose(b);
    Quat<T> frame = B2.q * J.f2;                   // the child's body frame
    Quat<T> rel = conjugate(B1.q * J.f1) * frame;  // the joint's rotation
    auto keep_sign = [](Quat<T> q, const T* old) {
      T c = q.w * old[0] + q.x * old[1] + q.y * old[2] + q.z * old[3];
      return c < T(0) ? Quat<T>{-q.w, -q.x, -q.y, -q.z} : q;
    };
    switch (J.type) {
      case kJointHinge: {
        Vec3<T> axis = Vec3<T>::load(m.jnt_axis + 3 * j);
        T theta = T(2) * atan2(dot(Vec3<T>{rel.x, rel.y, rel.z}, axis), rel.w);
        T old = qpos[a] - m.qpos0[a];
        T step = theta - old;
        step -= T(2) * pi * floor((step + pi) / (T(2) * pi));  // to [-pi, pi)
        qpos[a] = m.qpos0[a] + old + step;
        break;
      }
      case kJointSlide: {
        Vec3<T> r1 = rotate(B1.q, J.r1), r2 = rotate(B2.q, J.r2), ax = rotate(B1.q, J.a1);
        qpos[a] = m.qpos0[a] + dot((B2.x + r2) - (B1.x + r1), ax);
        break;
      }
      case kJointBall:
        keep_sign(normalize(rel), qpos + a).store(qpos + a);
        break;
      case kJointFree:
        (B2.x - rotate(frame, Vec3<T>::load(m.body_ipos + 3 * b))).store(qpos + a);
        keep_sign(normalize(frame), qpos + a + 3).store(qpos + a + 3);
        break;
    }
  }
}

// v = (qpos_a (-) qpos_b) / h, the inverse of integrate_pos(qpos_b, v, h): differences of
// hinge and slide coordinates and free positions, local rotation vectors of ball and free
// rotations (sub_quat)
template <class T>
PHX_HD void xpbd_difference(const ModelView<T>& m, const T* qpos_a, const T* qpos_b, T h, T* v) {
  for (int j = 0; j < m.njnt; ++j) {
    int qa = m.jnt_qposadr[j], da = m.jnt_dofadr[j];
    switch (m.jnt_type[j]) {
      case kJointFree:
        for (int i = 0; i < 3; ++i) v[da + i] = (qpos_a[qa + i] - qpos_b[qa + i]) / h;
        qa += 3;
        da += 3;
        [[fallthrough]];
      case kJointBall:
        ((T(1) / h) * sub_quat(Quat<T>::load(qpos_a + qa), Quat<T>::load(qpos_b + qa)))
            .store(v + da);
        break;
      default:
        v[da] = (qpos_a[qa] - qpos_b[qa]) / h;
    }
  }
}

// the bodies -> qpos, and qvel as the chord over the last substep h, (qpos (-) qpos at its
// start) / h
template <class T>
PHX_HD void xpbd_store(const ModelView<T>& m, XpbdArrays<T> s, T h, T* qpos, T* qvel) {
  for (int i = 0; i < m.nq; ++i) s.qpos_prev[i] = qpos[i];
  xpbd_coordinates(m, s, true, s.qpos_prev);
  for (int i = 0; i < m.nq; ++i) qpos[i] = s.qpos_prev[i];  // near the end: continuity
  xpbd_coordinates(m, s, false, qpos);
  xpbd_difference(m, qpos, s.qpos_prev, h, qvel);
}

// One step of m.timestep in `substeps` substeps of `iterations` joint passes each, in place on
// qpos and qvel, under gravity and the applied generalized forces of step.h's applied_forces:
// passive (joint and tendon springs and dampers), actuation from ctrl (the actuators' inputs)
// and qfrc_applied (nv, may be null), evaluated at the step's start and held over its substeps
// (explicit, where the Featherstone step treats joint damping implicitly).
template <class T>
PHX_HD void xpbd_step(const ModelView<T>& m, T* qpos, T* qvel, const T* ctrl, Workspace<T>& w,
                      XpbdArrays<T> s, int substeps, int iterations,
                      const T* qfrc_applied = nullptr, XpbdJointSolver solver = kXpbdTree) {
  kinematics(m, qpos, w);
  com_pos(m, w);
  com_vel(m, qvel, w);
  tendon_kinematics(m, qpos, w);
  applied_forces(m, qpos, qvel, ctrl, qfrc_applied, w);  // into w.qfrc, which load keeps
  T h = m.timestep / T(substeps);
  xpbd_load(m, qpos, qvel, h, w, s);
  Vec3<T> g{m.gravity[0], m.gravity[1], m.gravity[2]};
  for (int k = 0; k < substeps; ++k) {
    xpbd_joint_forces(m, w.qfrc, s);
    for (int b = 1; b < m.nbody; ++b) {
      s.x_prev[b] = s.body[b].x;
      s.q_prev[b] = s.body[b].q;
      xpbd_predict(s.body[b], s.v[b], s.omega[b], s.f[b], s.tau[b], g, h);
    }
    for (int i = 0; i < kXpbdLambdas * m.nbody; ++i) s.lambda[i] = T(0);
    for (int it = 0; it < iterations; ++it) {
      if (solver == kXpbdTree)
        xpbd_solve_joints(m, s, h);
      else
        xpbd_project_joints(m, s, h);
    }
    for (int b = 1; b < m.nbody; ++b)
      if (s.body[b].inv_mass > T(0))
        xpbd_velocities(s.body[b].x, s.body[b].q, s.x_prev[b], s.q_prev[b], h, s.v[b], s.omega[b]);
  }
  xpbd_store(m, s, h, qpos, qvel);
}

}  // namespace phx
