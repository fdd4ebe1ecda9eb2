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
// A limited spatial tendon through sites is a cable (xpbd_cable): a constraint on the length of
// the path through its sites that keeps it within tendon_range, projected after the joints in
// every iteration.
// Contacts (xpbd_contact.h) are detected once per step (xpbd_detect), projected after the cables
// in every iteration and corrected on the velocities after each substep.
// Velocities: XPBD's are chords, (pose - pose at the substep's start) / h, so qvel is reported
// as the same chord in coordinates, (qpos (-) qpos at the last substep's start) / h: semi-implicit
// Euler's relation between qvel and qpos. xpbd_load inverts it, stepping the coordinates back by
// h qvel, so a state passes from one XPBD step to the next without loss; handing the bodies the
// instantaneous velocities instead leaves an error of order h per step (measured: a ball
// pendulum's error after 0.5 s did not fall with the step at one substep).
// Joints are rigid (compliance 0). Each of a substep's `iterations` projects them either
//   - all at once (kXpbdTree, the default): one Newton step on every joint's linearised rows,
//     solved over the kinematic tree in linear time (xpbd_tree.h), then the joint limits one by
//     one; the residual falls quadratically (round-off in three iterations on a 7-link arm), or
//   - one after the other (kXpbdGaussSeidel, the seed papers' order): body by body in the
//     Model's order, parents first, attachments and hinge axes as 3x3 blocks (xpbd_attach_block,
//     xpbd_hinge_align_block), the other constraints along their error; the residual falls
//     linearly, slowly along a chain.
// Each constraint's multiplier starts at 0 in every substep.
#pragma once

#include "phalanx/arena.h"
#include "phalanx/integrate.h"
#include "phalanx/kinematics.h"
#include "phalanx/math/dual.h"
#include "phalanx/smooth.h"
#include "phalanx/xpbd.h"
#include "phalanx/xpbd_composite.h"
#include "phalanx/xpbd_contact.h"
#include "phalanx/xpbd_tree.h"

namespace phx {

// the arrays an XPBD step works in, nbody entries each (lambda: kXpbdLambdas per body); body 0
// is the world, static at the origin
// a body's joint multipliers: the tree solve's rows in 0-5 (the attachment's three, the
// alignment's two or the orientation's, the armature's); the Gauss-Seidel projections' in their
// slots (xpbd_projections); a hinge's limit in 6, a composite joint's hinges' limits and the
// Gauss-Seidel armature in 7-9
constexpr int kXpbdLambdas = 10;

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
  T* lambda_cable;  // (ntendon) the cables' multipliers (xpbd_cable)
  T* qpos_prev;  // (nq) the coordinates at the start of the last substep
  T* target;     // (nv) a hinge's angle predicted from the substep's start (its armature)
  XpbdTreeNode<T>* node;  // the joints solved at once (xpbd_solve_joints)
  // contacts (xpbd_contact.h), when the model has them (m.contact, nconmax > 0):
  ContactView<T> cv;         // where the step detects them (the caller's; Data's contacts)
  ConstraintWorkspace<T> c;  // the geom frames the detection reads (the caller's)
  XpbdContact<T>* contact;   // (nconmax) each one's geometry, held over the step
  T* lambda_contact;         // (2 nconmax) multipliers: normal, friction
  T* vn0;                    // (nconmax) normal velocity at the substep's start
  T* touched;                // (nbody) 1 where a substep's velocity pass acted on a body
  T* margin;                 // (1) the detection's look-ahead (xpbd_detect)

  template <class M, class Layout>
  PHX_HD static XpbdArrays carve(const M& m, Arena<T, Layout>& arena);
};

namespace xpbd_impl {

// n objects of S (a struct of scalars T and ints) from an arena of scalars T, each rounded up to
// whole scalars
template <class S, class T, class Layout>
PHX_HD S* take_objects(Arena<T, Layout>& arena, long n) {
  constexpr long words = long((sizeof(S) + sizeof(T) - 1) / sizeof(T));
  static_assert(alignof(S) <= alignof(T), "a struct of scalars and ints");
  return reinterpret_cast<S*>(arena.template take<T>(n * words));
}

}  // namespace xpbd_impl

template <class T>
template <class M, class Layout>
PHX_HD XpbdArrays<T> XpbdArrays<T>::carve(const M& m, Arena<T, Layout>& arena) {
  using xpbd_impl::take_objects;
  const long nb = m.nbody;
  XpbdArrays s;
  s.body = take_objects<XpbdBody<T>>(arena, nb);
  s.v = take_objects<Vec3<T>>(arena, nb);
  s.omega = take_objects<Vec3<T>>(arena, nb);
  s.x_prev = take_objects<Vec3<T>>(arena, nb);
  s.q_prev = take_objects<Quat<T>>(arena, nb);
  s.f = take_objects<Vec3<T>>(arena, nb);
  s.tau = take_objects<Vec3<T>>(arena, nb);
  s.lambda = arena.template take<T>(kXpbdLambdas * nb);
  s.lambda_cable = arena.template take<T>(m.ntendon);
  s.qpos_prev = arena.template take<T>(m.nq);
  s.target = arena.template take<T>(m.nv);
  s.node = take_objects<XpbdTreeNode<T>>(arena, nb);
  s.cv = ContactView<T>{};
  s.c = ConstraintWorkspace<T>{};
  s.contact = take_objects<XpbdContact<T>>(arena, m.nconmax);
  s.lambda_contact = arena.template take<T>(2L * m.nconmax);
  s.vn0 = arena.template take<T>(m.nconmax);
  s.touched = arena.template take<T>(nb);
  s.margin = arena.template take<T>(1);
  return s;
}

// whether body b's joints are a composite joint: two or three hinges (xpbd_composite.h)
template <class T>
PHX_HD bool xpbd_composite_body(const ModelView<T>& m, int b) {
  if (m.body_jntnum[b] < 2 || m.body_jntnum[b] > 3) return false;
  for (int i = 0; i < m.body_jntnum[b]; ++i)
    if (m.jnt_type[m.body_jntadr[b] + i] != kJointHinge) return false;
  return true;
}

// the dofs and coordinates of body b's joints
template <class T>
PHX_HD int xpbd_body_nv(const ModelView<T>& m, int b) {
  int n = 0;
  for (int i = 0; i < m.body_jntnum[b]; ++i) n += joint_nv(m.jnt_type[m.body_jntadr[b] + i]);
  return n;
}
template <class T>
PHX_HD int xpbd_body_nq(const ModelView<T>& m, int b) {
  int n = 0;
  for (int i = 0; i < m.body_jntnum[b]; ++i) n += joint_nq(m.jnt_type[m.body_jntadr[b] + i]);
  return n;
}

// whether every body has one joint or a composite joint and free joints hang from the world
template <class T>
PHX_HD bool xpbd_supports(const ModelView<T>& m) {
  for (int b = 1; b < m.nbody; ++b) {
    if (m.body_jntnum[b] > 1 && !xpbd_composite_body(m, b)) return false;
    if (m.body_jntnum[b] == 1 && m.jnt_type[m.body_jntadr[b]] == kJointFree &&
        m.body_parentid[b] != 0)
      return false;
  }
  return true;
}

// Where body b's joint sits in its parent (body 1) and in b (body 2), in their principal frames
// relative to their centres of mass. The parent's side is the child's frame at zero joint
// displacement, (body_pos, body_quat) in the parent's body frame.
// XpbdJointFrame::type of a composite joint (xpbd_composite_body)
constexpr int kXpbdComposite = 16;

template <class T>
struct XpbdJointFrame {
  int type;    // kJoint*, kXpbdComposite, or -1: none (a weld)
  Vec3<T> r1;  // anchor on the parent
  Vec3<T> r2;  // anchor on the child
  Vec3<T> a1;  // joint axis on the parent (hinge, slide)
  Vec3<T> a2;  // joint axis on the child
  Vec3<T> n1;  // a unit vector across the axis on the parent, and the same on the child:
  Vec3<T> n2;  //   the hinge angle is the angle from n1 to n2 about the axis
  Quat<T> f1;  // the joint frame (the child's body frame at zero displacement) on the parent
  Quat<T> f2;  // the child's body frame, in its principal frame
  // a composite joint's hinges (axes and anchors in the child's body frame); r1, r2 are its
  // last anchor's, r1 at zero angles
  XpbdComposite<T> comp;
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
  if (xpbd_composite_body(m, b)) {
    J.type = kXpbdComposite;
    J.comp.k = m.body_jntnum[b];
    for (int i = 0; i < J.comp.k; ++i) {
      const int j = m.body_jntadr[b] + i;
      J.comp.axis[i] = Vec3<T>::load(m.jnt_axis + 3 * j);
      J.comp.anchor[i] = Vec3<T>::load(m.jnt_pos + 3 * j);
    }
    jpos = J.comp.anchor[J.comp.k - 1];
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

// a joint frame in another scalar (constants for the adjoints' Dual numbers)
template <class R, class T>
PHX_HD XpbdJointFrame<R> xpbd_frame_cast(const XpbdJointFrame<T>& J) {
  auto quat = [](const Quat<T>& q) { return Quat<R>{R(q.w), R(q.x), R(q.y), R(q.z)}; };
  XpbdJointFrame<R> out;
  out.type = J.type;
  out.r1 = Vec3<R>::from(J.r1);
  out.r2 = Vec3<R>::from(J.r2);
  out.a1 = Vec3<R>::from(J.a1);
  out.a2 = Vec3<R>::from(J.a2);
  out.n1 = Vec3<R>::from(J.n1);
  out.n2 = Vec3<R>::from(J.n2);
  out.f1 = quat(J.f1);
  out.f2 = quat(J.f2);
  out.comp.k = J.comp.k;
  for (int i = 0; i < 3; ++i) {
    out.comp.axis[i] = Vec3<R>::from(J.comp.axis[i]);
    out.comp.anchor[i] = Vec3<R>::from(J.comp.anchor[i]);
  }
  return out;
}

// A composite joint's hinge angles at the parent's and child's orientations q1, q2 (the
// rotation of the child's body frame relative to the joint frame), its last anchor on the parent
// at those angles (principal frame, relative to the centre of mass; J.r1 is it at zero angles)
// and hinge i's axis in the world. Any scalar R.
template <class R>
PHX_HD void xpbd_composite_state(const XpbdJointFrame<R>& J, const Quat<R>& q1, const Quat<R>& q2,
                                 R* theta) {
  xpbd_composite_angles(J.comp, conjugate(q1 * J.f1) * (q2 * J.f2), theta);
}
template <class R>
PHX_HD Vec3<R> xpbd_composite_anchor(const XpbdJointFrame<R>& J, const R* theta) {
  const Vec3<R>& last = J.comp.anchor[J.comp.k - 1];
  return J.r1 + xpbd_impl::rotate(J.f1, xpbd_composite_point(J.comp, theta, last) - last);
}
template <class R>
PHX_HD Vec3<R> xpbd_composite_axis(const XpbdJointFrame<R>& J, const Quat<R>& q1, const R* theta,
                                   int i) {
  return xpbd_impl::rotate(q1 * J.f1 * xpbd_composite_rotation(J.comp, theta, i), J.comp.axis[i]);
}

namespace xpbd_impl {

// a body in Dual numbers whose position and orientation are the directions o..o+6
template <class D, class T>
PHX_HD XpbdBody<D> seeded(const XpbdBody<T>& src, int o) {
  XpbdBody<D> B;
  B.x = Vec3<D>::from(src.x);
  B.q = Quat<D>{D(src.q.w), D(src.q.x), D(src.q.y), D(src.q.z)};
  B.inv_mass = D(src.inv_mass);
  B.inv_inertia = Vec3<D>::from(src.inv_inertia);
  for (int i = 0; i < 3; ++i) B.x[i].d[o + i] = T(1);
  B.q.w.d[o + 3] = B.q.x.d[o + 4] = B.q.y.d[o + 5] = B.q.z.d[o + 6] = T(1);
  return B;
}

// adds the slopes of phi in the directions o..o+6 (a position, then an orientation) to adj
template <class D, class T>
PHX_HD void add_pose_slopes(const D& phi, int o, XpbdBody<T>& adj) {
  for (int i = 0; i < 3; ++i) adj.x[i] += phi.d[o + i];
  adj.q.w += phi.d[o + 3];
  adj.q.x += phi.d[o + 4];
  adj.q.y += phi.d[o + 5];
  adj.q.z += phi.d[o + 6];
}

// a joint frame in Dual numbers whose anchors r1 and r2 are the directions o..o+5
template <class D, class T>
PHX_HD XpbdJointFrame<D> seeded_frame(const XpbdJointFrame<T>& J, int o) {
  XpbdJointFrame<D> F = xpbd_frame_cast<D>(J);
  for (int i = 0; i < 3; ++i) {
    F.r1[i].d[o + i] = T(1);
    F.r2[i].d[o + 3 + i] = T(1);
  }
  return F;
}

// adds the slopes of phi in the directions o..o+5 (the anchors r1, r2 of body b's joint) to
// adj_frame (two per body)
template <class D, class T>
PHX_HD void add_frame_slopes(const D& phi, int o, int b, Vec3<T>* adj_frame) {
  if (!adj_frame) return;
  for (int i = 0; i < 3; ++i) {
    adj_frame[2 * b][i] += phi.d[o + i];
    adj_frame[2 * b + 1][i] += phi.d[o + 3 + i];
  }
}

}  // namespace xpbd_impl

// The adjoint of the joint frames' anchors (xpbd_joint_frame; adj_frame: r1 and r2 per body) in
// the parameters they are made of, accumulated: r1 = R(iquat_p)^T (body_pos + R(body_quat)
// jnt_pos - ipos_p), r2 = R(iquat_b)^T (jnt_pos - ipos_b), so body_pos and body_ipos of the
// parent and of the body (the world's principal frame is its body frame).
template <class T>
PHX_HD void adj_xpbd_joint_frames(const ModelView<T>& m, const Vec3<T>* adj_frame,
                                  const ModelAdjoint<T>& adj_model) {
  for (int b = 1; b < m.nbody; ++b) {
    const int p = m.body_parentid[b];
    const Vec3<T> g1 =
        p > 0 ? xpbd_impl::rotate(Quat<T>::load(m.body_iquat + 4 * p), adj_frame[2 * b])
              : adj_frame[2 * b];
    const Vec3<T> g2 = xpbd_impl::rotate(Quat<T>::load(m.body_iquat + 4 * b), adj_frame[2 * b + 1]);
    for (int i = 0; i < 3; ++i) {
      if (adj_model.body_pos) adj_model.body_pos[3 * b + i] += g1[i];
      if (adj_model.body_ipos && p > 0) adj_model.body_ipos[3 * p + i] -= g1[i];
      if (adj_model.body_ipos) adj_model.body_ipos[3 * b + i] -= g2[i];
    }
  }
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

// The adjoint of xpbd_poses, after the kinematics of the same qpos in w: from the poses'
// adjoints adj_pose (positions, orientations, inverse masses and inertias) to those of xpos,
// xmat and xquat in a (adj_kinematics, which the caller runs, takes them to qpos) and of
// body_ipos, body_mass and body_inertia, accumulated. x = xpos + xmat ipos, q = xquat iquat.
template <class T>
PHX_HD void adj_xpbd_poses(const ModelView<T>& m, const Workspace<T>& w,
                           const XpbdBody<T>* adj_pose, AdjWorkspace<T>& a,
                           const ModelAdjoint<T>& adj_model) {
  for (int b = 1; b < m.nbody; ++b) {
    const XpbdBody<T>& A = adj_pose[b];
    const Mat3<T> R = Mat3<T>::load(w.xmat + 9 * b);
    const Vec3<T> ipos = Vec3<T>::load(m.body_ipos + 3 * b);
    A.x.add_to(a.xpos + 3 * b);
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 3; ++k) a.xmat[9 * b + 3 * i + k] += A.x[i] * ipos[k];
    if (adj_model.body_ipos) mul_transpose(R, A.x).add_to(adj_model.body_ipos + 3 * b);
    Quat<T> adj_xquat = Quat<T>::zero(), adj_iquat = Quat<T>::zero();
    adj_mul(Quat<T>::load(w.xquat + 4 * b), Quat<T>::load(m.body_iquat + 4 * b), adj_xquat,
            adj_iquat, A.q);
    a.xquat[4 * b] += adj_xquat.w;
    a.xquat[4 * b + 1] += adj_xquat.x;
    a.xquat[4 * b + 2] += adj_xquat.y;
    a.xquat[4 * b + 3] += adj_xquat.z;
    // inv = 1 / p for p > 0
    const T mass = m.body_mass[b];
    if (adj_model.body_mass && mass > T(0)) adj_model.body_mass[b] -= A.inv_mass / (mass * mass);
    for (int i = 0; i < 3; ++i) {
      const T I = m.body_inertia[3 * b + i];
      if (adj_model.body_inertia && I > T(0))
        adj_model.body_inertia[3 * b + i] -= A.inv_inertia[i] / (I * I);
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

// A joint's generalized force (its dofs' entries of qfrc, from `f`) as the force F at the child's
// anchor and the torque t on the child (world; minus both on the parent at its anchor), and
// the world lever arms r1, r2 from the centres of mass to where F acts: the anchors, or for a
// free joint the body origin. q1, q2 the parent's and child's orientations. Any scalar R: the
// adjoint runs it on Dual numbers.
template <class R>
PHX_HD void xpbd_joint_wrench(const XpbdJointFrame<R>& J, const Quat<R>& q1, const Quat<R>& q2,
                              const R* f, const Vec3<R>& ipos, Vec3<R>& F, Vec3<R>& t, Vec3<R>& r1,
                              Vec3<R>& r2) {
  using xpbd_impl::rotate;
  Quat<R> frame = q2 * J.f2;  // the child's body frame in world
  r2 = rotate(q2, J.r2);
  r1 = rotate(q1, J.r1);
  F = t = Vec3<R>{};
  switch (J.type) {
    case kJointHinge:
      t = f[0] * rotate(q2, J.a2);
      break;
    case kJointSlide:
      F = f[0] * rotate(q2, J.a2);
      break;
    case kJointBall:
      t = rotate(frame, Vec3<R>{f[0], f[1], f[2]});
      break;
    case kJointFree:
      F = Vec3<R>{f[0], f[1], f[2]};
      t = rotate(frame, Vec3<R>{f[3], f[4], f[5]});
      r2 = -rotate(frame, ipos);  // the body origin
      break;
    case kXpbdComposite: {
      R theta[3];
      xpbd_composite_state(J, q1, q2, theta);
      t = rotate(q1 * J.f1, xpbd_composite_torque(J.comp, theta, f));
      break;
    }
  }
}

// The generalized forces qfrc (nv) as forces and torques on the bodies (f, tau; zeroed first):
// a joint's force acts on the child and its reaction on the parent, at the anchor; a free
// joint's translational force acts at the body origin and its torque is in the body frame.
template <class T>
PHX_HD void xpbd_joint_forces(const ModelView<T>& m, const T* qfrc, XpbdArrays<T> s) {
  for (int b = 0; b < m.nbody; ++b) s.f[b] = s.tau[b] = Vec3<T>{};
  for (int b = 1; b < m.nbody; ++b) {
    if (!m.body_jntnum[b] || !qfrc) continue;
    const int p = m.body_parentid[b], d = m.jnt_dofadr[m.body_jntadr[b]];
    Vec3<T> F, t, r1, r2;
    xpbd_joint_wrench(xpbd_joint_frame(m, b), s.body[p].q, s.body[b].q, qfrc + d,
                      Vec3<T>::load(m.body_ipos + 3 * b), F, t, r1, r2);
    s.f[b] += F;
    s.tau[b] += t + cross(r2, F);
    s.f[p] -= F;
    s.tau[p] -= t + cross(r1, F);
  }
}

// The adjoint of xpbd_joint_forces: from the adjoints of the bodies' forces and torques
// (adj_f, adj_tau) to those of qfrc (adj_qfrc, nv), of the orientations (adj_body[b].q), of the
// joint frames' anchors (adj_frame, may be null) and of body_ipos (a free body's origin),
// accumulated, by Dual numbers in the two orientations, the joint's dofs, the anchors and the
// centre of mass.
template <class T>
PHX_HD void adj_xpbd_joint_forces(const ModelView<T>& m, const T* qfrc, const XpbdArrays<T>& s,
                                  const Vec3<T>* adj_f, const Vec3<T>* adj_tau, T* adj_qfrc,
                                  XpbdBody<T>* adj_body, Vec3<T>* adj_frame,
                                  const ModelAdjoint<T>& adj_model) {
  using D = Dual<T, 23>;  // q1, q2, the dofs, r1, r2, ipos
  if (!qfrc) return;
  for (int b = 1; b < m.nbody; ++b) {
    if (!m.body_jntnum[b]) continue;
    const int p = m.body_parentid[b], j = m.body_jntadr[b], d = m.jnt_dofadr[j];
    const int ndof = xpbd_body_nv(m, b);
    const XpbdJointFrame<D> JD = xpbd_impl::seeded_frame<D>(xpbd_joint_frame(m, b), 14);
    Quat<D> q[2];
    const Quat<T> src[2] = {s.body[p].q, s.body[b].q};
    for (int k = 0; k < 2; ++k) {
      q[k] = Quat<D>{D(src[k].w), D(src[k].x), D(src[k].y), D(src[k].z)};
      q[k].w.d[4 * k] = q[k].x.d[4 * k + 1] = q[k].y.d[4 * k + 2] = q[k].z.d[4 * k + 3] = T(1);
    }
    D f[6];
    for (int i = 0; i < ndof; ++i) {
      f[i] = D(qfrc[d + i]);
      f[i].d[8 + i] = T(1);
    }
    Vec3<D> ipos = Vec3<D>::load(m.body_ipos + 3 * b);
    for (int i = 0; i < 3; ++i) ipos[i].d[20 + i] = T(1);
    Vec3<D> F, t, r1, r2;
    xpbd_joint_wrench(JD, q[0], q[1], f, ipos, F, t, r1, r2);
    const D phi = dot(Vec3<D>::from(adj_f[b] - adj_f[p]), F) +
                  dot(Vec3<D>::from(adj_tau[b]), t + cross(r2, F)) -
                  dot(Vec3<D>::from(adj_tau[p]), t + cross(r1, F));
    for (int i = 0; i < ndof; ++i) adj_qfrc[d + i] += phi.d[8 + i];
    const int id[2] = {p, b};
    for (int k = 0; k < 2; ++k) {
      if (id[k] == 0) continue;
      Quat<T>& A = adj_body[id[k]].q;
      A.w += phi.d[4 * k];
      A.x += phi.d[4 * k + 1];
      A.y += phi.d[4 * k + 2];
      A.z += phi.d[4 * k + 3];
    }
    xpbd_impl::add_frame_slopes(phi, 14, b, adj_frame);
    if (adj_model.body_ipos)
      for (int i = 0; i < 3; ++i) adj_model.body_ipos[3 * b + i] += phi.d[20 + i];
  }
}

// The projections of a Gauss-Seidel pass, each on a joint's two bodies and its own multipliers
// (slots of the body's kXpbdLambdas): an attachment (slots 0-2), a hinge axis (3-5), a hinge's,
// slide's or ball's limit (6), an orientation (3), a slide's attachment across its axis (0); a
// composite joint's
// hinge i's limit is kXpbdCompositeLimit + i (slot 7 + i), and hinge i's armature
// kXpbdArmature + i (slot 7 + i; Gauss-Seidel passes only, whose bodies have one joint)
enum XpbdProjection : int {
  kXpbdAttach,
  kXpbdAlign,
  kXpbdLimit,
  kXpbdOrient,
  kXpbdAcross,
  kXpbdCompositeLimit,
  kXpbdArmature = kXpbdCompositeLimit + 3
};

// the most projections of one body
constexpr int kXpbdMaxProjections = 6;

// whether hinge i of body b's joint has armature
template <class T>
PHX_HD PHX_INLINE bool xpbd_has_armature(const ModelView<T>& m, int b, int i) {
  const int j = m.body_jntadr[b] + i;
  return m.jnt_type[j] == kJointHinge && m.dof_armature[m.jnt_dofadr[j]] > T(0);
}

template <class T>
PHX_HD int xpbd_constraint_projections(const ModelView<T>& m, int b, bool limits_only, int* ops);

// body b's projections in their order (at most kXpbdMaxProjections) into ops, or its limits
// alone (limits_only: what follows the tree solve), then its hinges' armature; returns their
// number
template <class T>
PHX_HD int xpbd_projections(const ModelView<T>& m, int b, bool limits_only, int* ops) {
  int n = xpbd_constraint_projections(m, b, limits_only, ops);
  for (int i = 0; i < m.body_jntnum[b] && !limits_only; ++i)  // the tree solve has their rows
    if (xpbd_has_armature(m, b, i)) ops[n++] = kXpbdArmature + i;
  return n;
}

// the joint's constraints' projections (or its limits alone)
template <class T>
PHX_HD int xpbd_constraint_projections(const ModelView<T>& m, int b, bool limits_only, int* ops) {
  if (!m.body_jntnum[b]) {
    if (limits_only) return 0;
    ops[0] = kXpbdAttach, ops[1] = kXpbdOrient;  // a weld
    return 2;
  }
  const int j = m.body_jntadr[b];
  if (xpbd_composite_body(m, b)) {  // its limits (the tree solve projects the rest)
    int n = 0;
    for (int i = 0; i < m.body_jntnum[b]; ++i)
      if (m.limit && m.jnt_limited[j + i]) ops[n++] = kXpbdCompositeLimit + i;
    return n;
  }
  const bool limit = m.limit && m.jnt_type[j] != kJointFree && m.jnt_limited[j];
  if (limits_only) {
    ops[0] = kXpbdLimit;
    return limit ? 1 : 0;
  }
  switch (m.jnt_type[j]) {
    case kJointBall:
      ops[0] = kXpbdAttach, ops[1] = kXpbdLimit;
      return limit ? 2 : 1;
    case kJointHinge:
      ops[0] = kXpbdAttach, ops[1] = kXpbdAlign, ops[2] = kXpbdLimit;
      return limit ? 3 : 2;
    case kJointSlide:
      ops[0] = kXpbdOrient, ops[1] = kXpbdAcross, ops[2] = kXpbdLimit;
      return limit ? 3 : 2;
    default:  // free
      return 0;
  }
}

// the limits of body b's joint: a hinge's or slide's relative to its coordinate's zero (the
// joint frame at qpos0), a ball's largest angle (hi; MuJoCo takes the larger of its range's two)
template <class T>
PHX_HD void xpbd_joint_range(const ModelView<T>& m, int b, T& lo, T& hi) {
  const int j = m.body_jntadr[b];
  if (m.jnt_type[j] == kJointBall) {
    lo = T(0);
    hi = fmax(m.jnt_range[2 * j], m.jnt_range[2 * j + 1]);
    return;
  }
  const T q0 = m.qpos0[m.jnt_qposadr[j]];
  lo = m.jnt_range[2 * j] - q0;
  hi = m.jnt_range[2 * j + 1] - q0;
}

// the slide's attachment across its axis: the anchors' offset d without its part along the
// parent's axis, and the world lever arms. Any scalar R.
template <class R>
PHX_HD void xpbd_across(const XpbdJointFrame<R>& J, const XpbdBody<R>& B1, const XpbdBody<R>& B2,
                        Vec3<R>& r1, Vec3<R>& r2, Vec3<R>& dx) {
  using xpbd_impl::rotate;
  r1 = rotate(B1.q, J.r1);
  r2 = rotate(B2.q, J.r2);
  Vec3<R> a = rotate(B1.q, J.a1), d = (B2.x + r2) - (B1.x + r1);
  dx = d - dot(d, a) * a;
}

// A composite joint's hinge i's limit: when its angle has left jnt_range (relative to qpos0), a
// rotation of the child about the hinge's world axis by the excess, projected (xpbd_angular):
// turning the child about that axis changes hinge i's angle alone. Any scalar R.
template <class R, class T>
PHX_HD void xpbd_composite_limit(const ModelView<T>& m, int b, const XpbdJointFrame<R>& J, int i,
                                 XpbdBody<R>& B1, XpbdBody<R>& B2, R& lambda, R h) {
  const int j = m.body_jntadr[b] + i;
  const T q0 = m.qpos0[m.jnt_qposadr[j]];
  const R lo = R(m.jnt_range[2 * j] - q0), hi = R(m.jnt_range[2 * j + 1] - q0);
  R theta[3];
  xpbd_composite_state(J, B1.q, B2.q, theta);
  R excess;
  if (theta[i] > hi)
    excess = theta[i] - hi;
  else if (theta[i] < lo)
    excess = theta[i] - lo;
  else
    return;
  xpbd_angular(B1, B2, excess * xpbd_composite_axis(J, B1.q, theta, i), R(0), h, lambda);
}

// Hinge i of a joint of frame J (a hinge, i = 0, or a composite joint's) at the orientations q1
// (parent) and q2: its angle from the joint's zero and its world axis, and its rate for the
// angular velocities w1, w2 (world). Any scalar R.
template <class R>
PHX_HD void xpbd_hinge_of(const XpbdJointFrame<R>& J, const Quat<R>& q1, const Quat<R>& q2, int i,
                          R& theta, Vec3<R>& axis) {
  if (J.type == kXpbdComposite) {
    R th[3];
    xpbd_composite_state(J, q1, q2, th);
    theta = th[i];
    axis = xpbd_composite_axis(J, q1, th, i);
    return;
  }
  axis = xpbd_impl::rotate(q1, J.a1);
  theta = xpbd_hinge_angle(axis, xpbd_impl::rotate(q1, J.n1), xpbd_impl::rotate(q2, J.n2));
}
template <class R>
PHX_HD R xpbd_hinge_rate(const XpbdJointFrame<R>& J, const Quat<R>& q1, const Quat<R>& q2, int i,
                         const Vec3<R>& w1, const Vec3<R>& w2) {
  if (J.type == kXpbdComposite) {
    R th[3], rate[3];
    xpbd_composite_state(J, q1, q2, th);
    xpbd_composite_rates(J.comp, th, xpbd_impl::rotate(conjugate(q1 * J.f1), w2 - w1), rate);
    return rate[i];
  }
  return dot(xpbd_impl::rotate(q1, J.a1), w2 - w1);
}

// Armature a on hinge i of body b's joint, the rotor inertia a (dtheta/dt)^2 / 2 that the
// bodies do not carry: implicit Euler, which XPBD is, adds a (theta - target)^2 / (2 h^2) to
// what a substep minimises, target = theta + h dtheta/dt at the substep's start (the rotor's
// inertial prediction). That is a compliant constraint theta = target of compliance h^2 / a,
// projected about the hinge's world axis (xpbd_angular; alpha~ = 1 / a). Any scalar R.
template <class R>
PHX_HD void xpbd_armature(const XpbdJointFrame<R>& J, int i, R a, XpbdBody<R>& B1, XpbdBody<R>& B2,
                          R target, R& lambda, R h) {
  R theta;
  Vec3<R> axis;
  xpbd_hinge_of(J, B1.q, B2.q, i, theta, axis);
  xpbd_angular(B1, B2, xpbd_impl::wrapped(theta - target) * axis, h * h / a, h, lambda);
}

// The armature's targets (per dof) at a substep's start: each hinge's angle there plus its
// change over the substep before, target = 2 theta(start) - theta(before), with `body` the
// poses at the start and `before` those at the previous substep's start. The chord of the angle
// itself, not the body velocities' rate: where the angles curve in the relative rotation (three
// hinges), a rate through the start pose's slopes leaves an error of order h^2 v^2 in the
// target, a force of order a v^2 that does not fall with h (measured: the hip's velocity off by
// 0.12 rad/s after 0.1 s).
template <class R>
PHX_HD R xpbd_armature_target(const XpbdJointFrame<R>& J, int i, const Quat<R>& q1,
                              const Quat<R>& q2, const Quat<R>& p1, const Quat<R>& p2) {
  R now, before;
  Vec3<R> axis;
  xpbd_hinge_of(J, q1, q2, i, now, axis);
  xpbd_hinge_of(J, p1, p2, i, before, axis);
  return now + xpbd_impl::wrapped(now - before);
}
template <class T>
PHX_HD void xpbd_armature_targets(const ModelView<T>& m, const XpbdBody<T>* body,
                                  const Quat<T>* before, T* target) {
  for (int b = 1; b < m.nbody; ++b) {
    const int p = m.body_parentid[b];
    for (int i = 0; i < m.body_jntnum[b]; ++i) {
      if (!xpbd_has_armature(m, b, i)) continue;
      target[m.jnt_dofadr[m.body_jntadr[b] + i]] = xpbd_armature_target(
          xpbd_joint_frame(m, b), i, body[p].q, body[b].q, before[p], before[b]);
    }
  }
}
// Its adjoint from adj_target (per dof) to the orientations at the start (adj_body) and before
// (adj_before), accumulated, on Dual numbers in the four
template <class T>
PHX_HD void adj_xpbd_armature_targets(const ModelView<T>& m, const XpbdBody<T>* body,
                                      const Quat<T>* before, const T* adj_target,
                                      XpbdBody<T>* adj_body, Quat<T>* adj_before) {
  constexpr int N = 16;
  using D = Dual<T, N>;
  for (int b = 1; b < m.nbody; ++b) {
    const int p = m.body_parentid[b];
    for (int i = 0; i < m.body_jntnum[b]; ++i) {
      if (!xpbd_has_armature(m, b, i)) continue;
      const T g = adj_target[m.jnt_dofadr[m.body_jntadr[b] + i]];
      if (g == T(0)) continue;
      xpbd_impl::DualSeeds<T, N> seed;
      const Quat<D> q1 = seed.quat(body[p].q), q2 = seed.quat(body[b].q);
      const Quat<D> p1 = seed.quat(before[p]), p2 = seed.quat(before[b]);
      const D phi =
          g * xpbd_armature_target(xpbd_frame_cast<D>(xpbd_joint_frame(m, b)), i, q1, q2, p1, p2);
      xpbd_impl::DualSlopes<T, N> slope{phi};
      slope.quat(adj_body[p].q);
      slope.quat(adj_body[b].q);
      slope.quat(adj_before[p]);
      slope.quat(adj_before[b]);
    }
  }
}

// one projection `op` of body b's joint (frame J) on its parent B1 and B2, lambda the body's
// multipliers (in/out), substep h, rigid (compliance 0) but for armature (its targets: target,
// per dof)
template <class T>
PHX_HD void xpbd_project(const ModelView<T>& m, int b, const XpbdJointFrame<T>& J, int op,
                         XpbdBody<T>& B1, XpbdBody<T>& B2, T* lambda, T h, const T* target) {
  switch (op) {
    case kXpbdAttach: {
      Vec3<T> l = Vec3<T>::load(lambda);
      xpbd_attach_block(B1, B2, J.r1, J.r2, T(0), h, l);
      l.store(lambda);
      break;
    }
    case kXpbdAlign: {
      Vec3<T> l = Vec3<T>::load(lambda + 3);
      xpbd_hinge_align_block(B1, B2, J.a1, J.a2, T(0), h, l);
      l.store(lambda + 3);
      break;
    }
    case kXpbdLimit: {
      T lo, hi;
      xpbd_joint_range(m, b, lo, hi);
      if (J.type == kJointHinge)
        xpbd_hinge_limit(B1, B2, J.a1, J.n1, J.n2, lo, hi, T(0), h, lambda[6]);
      else if (J.type == kJointSlide)
        xpbd_slide_limit(B1, B2, J.r1, J.r2, J.a1, lo, hi, T(0), h, lambda[6]);
      else
        xpbd_ball_limit(B1, B2, J.f1, J.f2, hi, T(0), h, lambda[6]);
      break;
    }
    case kXpbdOrient:
      xpbd_weld_orientation(B1, B2, J.f1, J.f2, T(0), h, lambda[3]);
      break;
    case kXpbdAcross: {
      Vec3<T> r1, r2, dx;
      xpbd_across(J, B1, B2, r1, r2, dx);
      xpbd_positional(B1, B2, r1, r2, dx, T(0), h, lambda[0]);
      break;
    }
    default: {
      if (op >= kXpbdArmature) {
        const int i = op - kXpbdArmature, d = m.jnt_dofadr[m.body_jntadr[b] + i];
        xpbd_armature(J, i, m.dof_armature[d], B1, B2, target[d], lambda[7 + i], h);
        break;
      }
      const int i = op - kXpbdCompositeLimit;
      xpbd_composite_limit(m, b, J, i, B1, B2, lambda[7 + i], h);
      break;
    }
  }
}

// The adjoint of xpbd_project at the bodies and multipliers it was given (B1, B2, lambda):
// adj_b1, adj_b2 and adj_lambda (the body's kXpbdLambdas) hold the adjoints of its outputs and
// receive those of its inputs; the anchors' adjoints go to adj_frame (two per body, may be null;
// the axes and frames are the model's orientations, not parameters), the armature targets' to
// adj_target (per dof).
template <class T>
PHX_HD void adj_xpbd_project(const ModelView<T>& m, int b, const XpbdJointFrame<T>& J, int op,
                             const XpbdBody<T>& B1, const XpbdBody<T>& B2, const T* lambda, T h,
                             const T* target, XpbdBody<T>& adj_b1, XpbdBody<T>& adj_b2,
                             T* adj_lambda, Vec3<T>* adj_frame, T* adj_target,
                             T* adj_armature = nullptr) {
  const XpbdBody<T> out1 = adj_b1, out2 = adj_b2;
  adj_b1 = adj_b2 = XpbdBody<T>::zero();
  T adj_alpha = T(0), adj_h = T(0);
  Vec3<T> adj_r1, adj_r2, adj_a1, adj_a2, adj_n1, adj_n2;
  auto take = [&](int i0, int n, T* out) {  // the outputs' multiplier adjoints, then cleared
    for (int i = 0; i < n; ++i) {
      out[i] = adj_lambda[i0 + i];
      adj_lambda[i0 + i] = T(0);
    }
  };
  switch (op) {
    case kXpbdAttach: {
      T o[3];
      take(0, 3, o);
      Vec3<T> adj_l;
      adj_xpbd_attach_block(B1, B2, J.r1, J.r2, T(0), h, Vec3<T>::load(lambda), adj_b1, adj_b2,
                            adj_r1, adj_r2, adj_alpha, adj_h, adj_l, out1, out2, Vec3<T>::load(o));
      adj_l.add_to(adj_lambda);
      break;
    }
    case kXpbdAlign: {
      T o[3];
      take(3, 3, o);
      Vec3<T> adj_l;
      adj_xpbd_hinge_align_block(B1, B2, J.a1, J.a2, T(0), h, Vec3<T>::load(lambda + 3), adj_b1,
                                 adj_b2, adj_a1, adj_a2, adj_alpha, adj_h, adj_l, out1, out2,
                                 Vec3<T>::load(o));
      adj_l.add_to(adj_lambda + 3);
      break;
    }
    case kXpbdLimit: {  // the range is not a parameter, nor the frames' orientations
      T o, lo, hi, adj_lo = T(0), adj_hi = T(0);
      take(6, 1, &o);
      xpbd_joint_range(m, b, lo, hi);
      if (J.type == kJointHinge) {
        adj_xpbd_hinge_limit(B1, B2, J.a1, J.n1, J.n2, lo, hi, T(0), h, lambda[6], adj_b1, adj_b2,
                             adj_a1, adj_n1, adj_n2, adj_lo, adj_hi, adj_alpha, adj_h,
                             adj_lambda[6], out1, out2, o);
      } else if (J.type == kJointSlide) {
        adj_xpbd_slide_limit(B1, B2, J.r1, J.r2, J.a1, lo, hi, T(0), h, lambda[6], adj_b1, adj_b2,
                             adj_r1, adj_r2, adj_a1, adj_lo, adj_hi, adj_alpha, adj_h,
                             adj_lambda[6], out1, out2, o);
      } else {
        Quat<T> adj_f1 = Quat<T>::zero(), adj_f2 = Quat<T>::zero();
        adj_xpbd_ball_limit(B1, B2, J.f1, J.f2, hi, T(0), h, lambda[6], adj_b1, adj_b2, adj_f1,
                            adj_f2, adj_hi, adj_alpha, adj_h, adj_lambda[6], out1, out2, o);
      }
      break;
    }
    case kXpbdOrient: {
      T o;
      take(3, 1, &o);
      Quat<T> adj_f1 = Quat<T>::zero(), adj_f2 = Quat<T>::zero();
      adj_xpbd_weld_orientation(B1, B2, J.f1, J.f2, T(0), h, lambda[3], adj_b1, adj_b2, adj_f1,
                                adj_f2, adj_alpha, adj_h, adj_lambda[3], out1, out2, o);
      break;
    }
    case kXpbdAcross: {
      T o;
      take(0, 1, &o);
      Vec3<T> r1, r2, dx, adj_r1w, adj_r2w, adj_dx;
      xpbd_across(J, B1, B2, r1, r2, dx);
      adj_xpbd_positional(B1, B2, r1, r2, dx, T(0), h, lambda[0], adj_b1, adj_b2, adj_r1w, adj_r2w,
                          adj_dx, adj_alpha, adj_h, adj_lambda[0], out1, out2, o);
      // r1, r2 and dx of the poses and anchors, on Dual numbers
      using D = Dual<T, 20>;
      const XpbdBody<D> D1 = xpbd_impl::seeded<D>(B1, 0), D2 = xpbd_impl::seeded<D>(B2, 7);
      Vec3<D> r1d, r2d, dxd;
      xpbd_across(xpbd_impl::seeded_frame<D>(J, 14), D1, D2, r1d, r2d, dxd);
      const D phi = dot(Vec3<D>::from(adj_r1w), r1d) + dot(Vec3<D>::from(adj_r2w), r2d) +
                    dot(Vec3<D>::from(adj_dx), dxd);
      xpbd_impl::add_pose_slopes(phi, 0, adj_b1);
      xpbd_impl::add_pose_slopes(phi, 7, adj_b2);
      for (int i = 0; i < 3; ++i) {
        adj_r1[i] = phi.d[14 + i];
        adj_r2[i] = phi.d[17 + i];
      }
      break;
    }
    default: {  // a composite joint's limit or armature, on Dual numbers in both bodies, the
                // multiplier and the target
      const bool armature = op >= kXpbdArmature;
      const int i = op - (armature ? kXpbdArmature : kXpbdCompositeLimit);
      const int slot = 7 + i, d = m.jnt_dofadr[m.body_jntadr[b] + i];
      constexpr int N = 25;
      using D = Dual<T, N>;
      xpbd_impl::DualSeeds<T, N> seed;
      XpbdBody<D> D1 = seed.body(B1, true), D2 = seed.body(B2, true);
      D l = seed(lambda[slot]);
      const D goal = seed(armature ? target[d] : T(0)), a = seed(m.dof_armature[d]);
      if (armature)
        xpbd_armature(xpbd_frame_cast<D>(J), i, a, D1, D2, goal, l, D(h));
      else
        xpbd_composite_limit(m, b, xpbd_frame_cast<D>(J), i, D1, D2, l, D(h));
      const D phi = xpbd_impl::pair(out1, D1) + xpbd_impl::pair(out2, D2) + adj_lambda[slot] * l;
      adj_lambda[slot] = T(0);
      xpbd_impl::DualSlopes<T, N> slope{phi};
      slope.body(adj_b1, true);
      slope.body(adj_b2, true);
      slope(adj_lambda[slot]);
      T adj_goal = T(0), adj_a = T(0);
      slope(adj_goal);
      slope(adj_a);
      if (armature) adj_target[d] += adj_goal;
      if (armature && adj_armature) adj_armature[d] += adj_a;
      break;
    }
  }
  if (adj_frame) {
    adj_frame[2 * b] += adj_r1;
    adj_frame[2 * b + 1] += adj_r2;
  }
}

// one Gauss-Seidel pass over the joints, substep h, or over their limits alone
template <class T>
PHX_HD void xpbd_project_joints(const ModelView<T>& m, XpbdArrays<T> s, T h,
                                bool limits_only = false) {
  for (int b = 1; b < m.nbody; ++b) {
    int ops[kXpbdMaxProjections];
    const int n = xpbd_projections(m, b, limits_only, ops);
    if (n == 0) continue;
    const XpbdJointFrame<T> J = xpbd_joint_frame(m, b);
    for (int k = 0; k < n; ++k)
      xpbd_project(m, b, J, ops[k], s.body[m.body_parentid[b]], s.body[b],
                   s.lambda + kXpbdLambdas * b, h, s.target);
  }
}

// The adjoint of xpbd_project_joints from the bodies `start` and the multipliers `lambda` it was
// given: adj_body and adj_lambda hold the adjoints of its outputs and receive those of its
// inputs; the anchors' go to adj_frame (may be null), the armature targets' (target, per dof)
// to adj_target. Replays the pass keeping each projection's two bodies (work:
// (1 + 2 kXpbdMaxProjections) nbody bodies), then reverses it.
template <class T>
PHX_HD void adj_xpbd_project_joints(const ModelView<T>& m, const XpbdBody<T>* start,
                                    const T* lambda, T h, bool limits_only, const T* target,
                                    XpbdBody<T>* adj_body, T* adj_lambda, XpbdBody<T>* work,
                                    Vec3<T>* adj_frame, T* adj_target, T* adj_armature = nullptr) {
  const int nb = m.nbody, np = 2 * kXpbdMaxProjections;
  XpbdBody<T>* cur = work;
  XpbdBody<T>* pre = work + nb;  // kXpbdMaxProjections projections x 2 bodies per body
  for (int b = 0; b < nb; ++b) cur[b] = start[b];
  for (int b = 1; b < nb; ++b) {
    int ops[kXpbdMaxProjections];
    const int n = xpbd_projections(m, b, limits_only, ops);
    if (n == 0) continue;
    const int p = m.body_parentid[b];
    const XpbdJointFrame<T> J = xpbd_joint_frame(m, b);
    T l[kXpbdLambdas];
    for (int i = 0; i < kXpbdLambdas; ++i) l[i] = lambda[kXpbdLambdas * b + i];
    for (int k = 0; k < n; ++k) {
      pre[np * b + 2 * k] = cur[p];
      pre[np * b + 2 * k + 1] = cur[b];
      xpbd_project(m, b, J, ops[k], cur[p], cur[b], l, h, target);
    }
  }
  for (int b = nb - 1; b >= 1; --b) {
    int ops[kXpbdMaxProjections];
    const int n = xpbd_projections(m, b, limits_only, ops);
    if (n == 0) continue;
    const int p = m.body_parentid[b];
    const XpbdJointFrame<T> J = xpbd_joint_frame(m, b);
    for (int k = n - 1; k >= 0; --k)
      adj_xpbd_project(m, b, J, ops[k], pre[np * b + 2 * k], pre[np * b + 2 * k + 1],
                       lambda + kXpbdLambdas * b, h, target, adj_body[p], adj_body[b],
                       adj_lambda + kXpbdLambdas * b, adj_frame, adj_target, adj_armature);
  }
}

// a site's point in its body's principal frame
template <class T>
PHX_HD Vec3<T> xpbd_site_point(const ModelView<T>& m, int site) {
  const int b = m.site_bodyid[site];
  const Vec3<T> p = Vec3<T>::load(m.site_pos + 3 * site);
  if (b == 0) return p;
  return xpbd_impl::rotate(conjugate(Quat<T>::load(m.body_iquat + 4 * b)),
                           p - Vec3<T>::load(m.body_ipos + 3 * b));
}
// the adjoint of xpbd_site_point in body_ipos (accumulated; the site's position is not a
// parameter)
template <class T>
PHX_HD void adj_xpbd_site_point(const ModelView<T>& m, int site, const Vec3<T>& adj_r,
                                T* adj_body_ipos) {
  const int b = m.site_bodyid[site];
  if (b == 0 || !adj_body_ipos) return;
  Vec3<T> adj_p = xpbd_impl::rotate(Quat<T>::load(m.body_iquat + 4 * b), adj_r);
  for (int k = 0; k < 3; ++k) adj_body_ipos[3 * b + k] -= adj_p[k];
}

// A cable: tendon t when it is a limited spatial tendon of sites only (two to kXpbdPathPoints,
// Model::validate_xpbd): the path through its sites (xpbd_path), whose length is kept within
// tendon_range: at most hi (it pulls), at least lo (it pushes). On one body it is constant, and
// the path does nothing.
template <class T>
struct XpbdCable {
  const ModelView<T>* m;
  int adr, n;  // the tendon's first wrap entry, its number of sites
  T lo, hi;
  PHX_HD int size() const { return n; }
  PHX_HD int site(int i) const { return m->wrap_objid[adr + i]; }
  PHX_HD int body(int i) const { return m->site_bodyid[site(i)]; }
  PHX_HD Vec3<T> point(int i) const { return xpbd_site_point(*m, site(i)); }
};

// whether tendon t is a cable (limits on, sites only), and if so its path
template <class T>
PHX_HD bool xpbd_cable(const ModelView<T>& m, int t, XpbdCable<T>& c) {
  if (!m.limit || !m.tendon_limited[t]) return false;
  c = XpbdCable<T>{&m, m.tendon_adr[t], m.tendon_num[t], m.tendon_range[2 * t],
                   m.tendon_range[2 * t + 1]};
  if (c.n < 2 || c.n > kXpbdPathPoints) return false;
  for (int i = 0; i < c.n; ++i)
    if (m.wrap_type[c.adr + i] != kWrapSite) return false;
  return true;
}

// One pass over the cables, in tendon order
template <class T>
PHX_HD void xpbd_project_cables(const ModelView<T>& m, XpbdArrays<T> s) {
  XpbdCable<T> c;
  for (int t = 0; t < m.ntendon; ++t)
    if (xpbd_cable(m, t, c)) xpbd_path(s.body, c, c.lo, c.hi, s.lambda_cable[t]);
}

// Its adjoint from the bodies `start` it was given (the multipliers are not read, so their
// adjoints pass through): adj_body holds its outputs' adjoints and receives its inputs';
// body_ipos's go to adj_body_ipos (may be null). Replays the pass keeping each cable's bodies
// before it (work: nbody + nwrap bodies), then reverses it, restoring them cable by cable.
template <class T>
PHX_HD void adj_xpbd_project_cables(const ModelView<T>& m, const XpbdBody<T>* start,
                                    XpbdBody<T>* adj_body, XpbdBody<T>* work, T* adj_body_ipos) {
  XpbdBody<T>* cur = work;
  XpbdBody<T>* pre = work + m.nbody;
  for (int b = 0; b < m.nbody; ++b) cur[b] = start[b];
  XpbdCable<T> c;
  for (int t = 0; t < m.ntendon; ++t) {
    if (!xpbd_cable(m, t, c)) continue;
    for (int i = 0; i < c.n; ++i) pre[c.adr + i] = cur[c.body(i)];
    T lambda = T(0);  // not read by the step
    xpbd_path(cur, c, c.lo, c.hi, lambda);
  }
  for (int t = m.ntendon - 1; t >= 0; --t) {
    if (!xpbd_cable(m, t, c)) continue;
    for (int i = 0; i < c.n; ++i) cur[c.body(i)] = pre[c.adr + i];
    Vec3<T> adj_r[kXpbdPathPoints];
    adj_xpbd_path(cur, c, c.lo, c.hi, T(0), adj_body, adj_r);
    for (int i = 0; i < c.n; ++i) adj_xpbd_site_point(m, c.site(i), adj_r[i], adj_body_ipos);
  }
}

// A composite joint's attachment rows (rows first..first+2, world axes) with hinges at different
// anchors: the last anchor's place on the parent, y(theta), moves with the angles, which move
// with the relative rotation, so the rows' angular slopes take
//   d c_e = -e . R1 F dy = -(R1 F t) . (dphi2 - dphi1),  t = U (U^T U)^-1 g,  g_i = e' . dy/dtheta_i
// (dtheta = (U^T U)^-1 U^T omega for the relative angular velocity omega in the joint frame F,
// U the hinges' axes there, e' = (R1 F)^T e; t is xpbd_composite_torque of g), with
// dy/dtheta_i = u_i x (y - P_i), P_i hinge i's anchor turned by the hinges before it. Nothing
// when the anchors coincide (y does not move). Any scalar R.
template <class R>
PHX_HD void xpbd_composite_anchor_slopes(const XpbdJointFrame<R>& J, const Quat<R>& q1,
                                         const R* theta, XpbdRows<R>& rows, int first) {
  const XpbdComposite<R>& C = J.comp;
  const Vec3<R>& last = C.anchor[C.k - 1];
  bool offset = false;
  for (int i = 0; i + 1 < C.k; ++i)
    offset = offset || !(C.anchor[i].x == last.x && C.anchor[i].y == last.y &&
                         C.anchor[i].z == last.z);
  if (!offset) return;
  const Vec3<R> y = xpbd_composite_point(C, theta, last);
  Vec3<R> dy[3];
  for (int i = 0; i < C.k; ++i)
    dy[i] = cross(xpbd_impl::rotate(xpbd_composite_rotation(C, theta, i), C.axis[i]),
                  y - xpbd_composite_point(C, theta, C.anchor[i], i));
  const Quat<R> frame = q1 * J.f1;
  for (int r = 0; r < 3; ++r) {
    Vec3<R> e;
    e[r] = R(1);
    const Vec3<R> ej = xpbd_impl::rotate(conjugate(frame), e);
    R g[3];
    for (int i = 0; i < C.k; ++i) g[i] = dot(ej, dy[i]);
    const Vec3<R> w = xpbd_impl::rotate(frame, xpbd_composite_torque(C, theta, g));
    for (int k = 0; k < 3; ++k) {
      rows.g1[first + r][3 + k] += w[k];
      rows.g2[first + r][3 + k] -= w[k];
    }
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
    case kXpbdComposite: {
      // the last anchor at the hinges' angles; with two hinges also the angle between the first
      // hinge's axis (on the parent) and the second's (on the child), a1 . R(theta) a2 = a1 . a2
      R theta[3];
      xpbd_composite_state(J, B1.q, B2.q, theta);
      const int first = rows.n;
      xpbd_rows_attach(rows, B1, B2, xpbd_composite_anchor(J, theta), J.r2);
      xpbd_composite_anchor_slopes(J, B1.q, theta, rows, first);
      if (J.comp.k == 2) {
        const Vec3<R> a = xpbd_impl::rotate(B1.q * J.f1, J.comp.axis[0]);
        const Vec3<R> c = xpbd_impl::rotate(B2.q * J.f2, J.comp.axis[1]);
        rows.add(dot(a, c) - dot(J.comp.axis[0], J.comp.axis[1]), Vec3<R>{}, cross(a, c),
                 Vec3<R>{}, cross(c, a));
      }
      break;
    }
    default:  // none: a weld
      xpbd_rows_attach(rows, B1, B2, J.r1, J.r2);
      xpbd_rows_orientation(rows, B1, B2, J.f1, J.f2);
  }
}

// The armature rows of body b's hinges (xpbd_armature): c = theta_i - target_i (wrapped), the
// slopes of theta_i, -r_i on the parent's rotation and r_i on the child's (theta_i' =
// r_i . (w2 - w1)), compliance 1 / a; target: the hinges' targets (per hinge of the body).
// Any scalar R.
template <class R, class T>
PHX_HD void xpbd_rows_armature(const ModelView<T>& m, int b, const XpbdJointFrame<R>& J,
                               const XpbdBody<R>& B1, const XpbdBody<R>& B2, const R* target,
                               XpbdRows<R>& rows) {
  for (int i = 0; i < m.body_jntnum[b]; ++i) {
    if (!xpbd_has_armature(m, b, i)) continue;
    R theta;
    Vec3<R> axis, r;
    xpbd_hinge_of(J, B1.q, B2.q, i, theta, axis);
    for (int k = 0; k < 3; ++k) {
      Vec3<R> e;
      e[k] = R(1);
      r[k] = xpbd_hinge_rate(J, B1.q, B2.q, i, Vec3<R>{}, e);
    }
    const T a = m.dof_armature[m.jnt_dofadr[m.body_jntadr[b] + i]];
    rows.add(xpbd_impl::wrapped(theta - target[i]), Vec3<R>{}, -r, Vec3<R>{}, r, R(T(1) / a));
  }
}

// the rows of body b's joint at the current poses, its hinges' armature last
template <class T>
PHX_HD void xpbd_joint_rows(const ModelView<T>& m, const XpbdArrays<T>& s, int b,
                            XpbdRows<T>& rows) {
  const XpbdJointFrame<T> J = xpbd_joint_frame(m, b);
  const XpbdBody<T>&B1 = s.body[m.body_parentid[b]], &B2 = s.body[b];
  xpbd_rows_of(J, B1, B2, rows);
  if (m.body_jntnum[b])
    xpbd_rows_armature(m, b, J, B1, B2, s.target + m.jnt_dofadr[m.body_jntadr[b]], rows);
}

// The adjoint of xpbd_joint_rows in the two bodies' positions and orientations, the joint
// frame's anchors and the armature's targets: the gradient of
// sum_i adj.c_i c_i + adj.g1_i . g1_i + adj.g2_i . g2_i, by Dual numbers in
// (x1, q1, x2, q2, r1, r2, targets), accumulated into adj_body (the world's is left alone),
// adj_frame and adj_target (per dof; may be null); and the armature's through the rows'
// compliance 1 / a into adj_armature (per dof; may be null).
template <class T>
PHX_HD void adj_xpbd_joint_rows(const ModelView<T>& m, const XpbdArrays<T>& s, int b,
                                const XpbdRows<T>& adj, XpbdBody<T>* adj_body, Vec3<T>* adj_frame,
                                T* adj_target = nullptr, T* adj_armature = nullptr) {
  using D = Dual<T, 23>;
  const int p = m.body_parentid[b];
  const XpbdJointFrame<D> JD = xpbd_impl::seeded_frame<D>(xpbd_joint_frame(m, b), 14);
  XpbdBody<D> B[2];
  const int id[2] = {p, b};
  for (int k = 0; k < 2; ++k) B[k] = xpbd_impl::seeded<D>(s.body[id[k]], 7 * k);
  XpbdRows<D> rows;
  xpbd_rows_of(JD, B[0], B[1], rows);
  const int base = rows.n, d0 = m.body_jntnum[b] ? m.jnt_dofadr[m.body_jntadr[b]] : 0;
  if (m.body_jntnum[b]) {
    D target[3];
    for (int i = 0; i < m.body_jntnum[b] && i < 3; ++i) {
      target[i] = D(s.target[d0 + i]);
      target[i].d[20 + i] = T(1);
    }
    xpbd_rows_armature(m, b, JD, B[0], B[1], target, rows);
  }
  D phi(T(0));
  for (int i = 0; i < rows.n; ++i) {
    phi += adj.c[i] * rows.c[i];
    for (int k = 0; k < 6; ++k) phi += adj.g1[i][k] * rows.g1[i][k] + adj.g2[i][k] * rows.g2[i][k];
  }
  for (int k = 0; k < 2; ++k)
    if (id[k] > 0) xpbd_impl::add_pose_slopes(phi, 7 * k, adj_body[id[k]]);
  xpbd_impl::add_frame_slopes(phi, 14, b, adj_frame);
  // the armature rows, in their order: targets and compliances
  for (int i = 0, row = base; i < m.body_jntnum[b]; ++i) {
    if (!xpbd_has_armature(m, b, i)) continue;
    if (adj_target) adj_target[d0 + i] += phi.d[20 + i];
    const T a = m.dof_armature[d0 + i];
    if (adj_armature) adj_armature[d0 + i] -= adj.alpha[row] / (a * a);
    ++row;
  }
}

// One iteration over the joints, substep h, all at once: a Newton step on every joint's rows
// (xpbd_tree_solve; the rows' multipliers in lambda[0..n), rigid joints), then the joint limits
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
  xpbd_project_joints(m, s, h, true);  // the limits
}

// The adjoint of xpbd_solve_joints at the bodies and multipliers it started from (s.body and
// s.lambda, read only): adj_body (nbody) and adj_lambda (kXpbdLambdas per body) hold the
// adjoints of its outputs and receive those of its inputs (positions, orientations, inverse
// masses and inertias; multipliers). Replays the iteration: the tree solve, then the limits
// and armature (adj_xpbd_project_joints; work: kXpbdSolveWork nbody bodies), reversed. Scratch:
// adj_rows (nbody), adj_d (6 nbody), adj_dl (kXpbdLambdas nbody). The joint frames' anchors
// take their adjoints in adj_frame (two per body; may be null), the armature targets' in
// adj_target (per dof; may be null without armature). Where the forward fell back to a
// Gauss-Seidel pass (a singular block), so does the adjoint.
constexpr int kXpbdSolveWork = 2 + 2 * kXpbdMaxProjections;
template <class T>
PHX_HD void adj_xpbd_solve_joints(const ModelView<T>& m, XpbdArrays<T> s, T h,
                                  XpbdBody<T>* adj_body, T* adj_lambda, XpbdBody<T>* work,
                                  XpbdRows<T>* adj_rows, T* adj_d, T* adj_dl,
                                  Vec3<T>* adj_frame = nullptr, T* adj_target = nullptr,
                                  T* adj_armature = nullptr) {
  const int nb = m.nbody;
  for (int b = 1; b < nb; ++b) xpbd_joint_rows(m, s, b, s.node[b].rows);
  if (!xpbd_tree_solve(nb, m.body_parentid, s.body, s.node, T(0), s.lambda, kXpbdLambdas)) {
    // the forward's fallback, a Gauss-Seidel pass
    adj_xpbd_project_joints(m, s.body, s.lambda, h, false, s.target, adj_body, adj_lambda, work,
                            adj_frame, adj_target, adj_armature);
    return;
  }
  // the forward after the solve (the limits' start), then the limits reversed
  XpbdBody<T>* cur = work;
  for (int b = 0; b < nb; ++b) cur[b] = s.body[b];
  for (int b = 1; b < nb; ++b) {
    const XpbdTreeNode<T>& N = s.node[b];
    cur[b].x += Vec3<T>{N.d[0], N.d[1], N.d[2]};
    cur[b].q = xpbd_rotate(cur[b].q, Vec3<T>{N.d[3], N.d[4], N.d[5]});
  }
  adj_xpbd_project_joints(m, cur, s.lambda, h, true, s.target, adj_body, adj_lambda, work + nb,
                          adj_frame, adj_target);
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
  for (int b = 1; b < nb; ++b)
    adj_xpbd_joint_rows(m, s, b, adj_rows[b], adj_body, adj_frame, adj_target, adj_armature);
}

namespace xpbd_impl {

// the value of a scalar or of a Dual number
template <class R>
PHX_HD PHX_INLINE auto value_of(const R& x) {
  if constexpr (std::is_arithmetic_v<R>)
    return x;
  else
    return value(x);
}

// q or -q, whichever is nearer the stored quaternion `old`
template <class R, class T>
PHX_HD PHX_INLINE Quat<R> keep_sign(const Quat<R>& q, const T* old) {
  T c = value_of(q.w) * old[0] + value_of(q.x) * old[1] + value_of(q.y) * old[2] +
        value_of(q.z) * old[3];
  return c < T(0) ? Quat<R>{-q.w, -q.x, -q.y, -q.z} : q;
}

}  // namespace xpbd_impl

// Joint j's coordinates (its qpos entries, into out) from the poses of its body's parent B1 and
// of the body B2 (frame J, centre of mass ipos in the body frame); `old` (its current coordinates)
// picks the branch of the hinge angle and of quaternion signs, so that coordinates move
// continuously. Any scalar R: the adjoint runs it on Dual numbers.
template <class R, class T>
PHX_HD void xpbd_joint_coordinates(const ModelView<T>& m, int j, const XpbdJointFrame<R>& J,
                                   const XpbdBody<R>& B1, const XpbdBody<R>& B2,
                                   const Vec3<R>& ipos, const T* old, R* out) {
  using xpbd_impl::keep_sign;
  using xpbd_impl::rotate;
  const T pi = T(3.14159265358979323846);
  const int a = m.jnt_qposadr[j];
  Quat<R> frame = B2.q * J.f2;                   // the child's body frame
  Quat<R> rel = conjugate(B1.q * J.f1) * frame;  // the joint's rotation
  switch (J.type) {
    case kJointHinge: {
      Vec3<R> axis = Vec3<R>::load(m.jnt_axis + 3 * j);
      R theta = R(2) * atan2(dot(Vec3<R>{rel.x, rel.y, rel.z}, axis), rel.w);
      // the turn nearest the old angle
      T k = floor((xpbd_impl::value_of(theta) - (old[0] - m.qpos0[a]) + pi) / (T(2) * pi));
      out[0] = R(m.qpos0[a]) + theta - R(T(2) * pi * k);
      break;
    }
    case kJointSlide: {
      Vec3<R> r1 = rotate(B1.q, J.r1), r2 = rotate(B2.q, J.r2), ax = rotate(B1.q, J.a1);
      out[0] = R(m.qpos0[a]) + dot((B2.x + r2) - (B1.x + r1), ax);
      break;
    }
    case kJointBall: {
      Quat<R> q = keep_sign(normalize(rel), old);
      out[0] = q.w, out[1] = q.x, out[2] = q.y, out[3] = q.z;
      break;
    }
    case kXpbdComposite: {
      R theta[3];
      xpbd_composite_state(J, B1.q, B2.q, theta);
      for (int i = 0; i < J.comp.k; ++i) {  // each angle's turn nearest the old one
        T k = floor((xpbd_impl::value_of(theta[i]) - (old[i] - m.qpos0[a + i]) + pi) / (T(2) * pi));
        out[i] = R(m.qpos0[a + i]) + theta[i] - R(T(2) * pi * k);
      }
      break;
    }
    case kJointFree: {
      Vec3<R> x = B2.x - rotate(frame, ipos);
      Quat<R> q = keep_sign(normalize(frame), old + 3);
      out[0] = x.x, out[1] = x.y, out[2] = x.z;
      out[3] = q.w, out[4] = q.x, out[5] = q.y, out[6] = q.z;
      break;
    }
  }
}

// The bodies' poses -> qpos (in place: the qpos given picks the branches, see
// xpbd_joint_coordinates): the current poses, or with `start` those at the start of the last
// substep (x_prev, q_prev; a static body's are its pose)
template <class T>
PHX_HD XpbdBody<T> xpbd_pose(const XpbdArrays<T>& s, bool start, int b) {
  XpbdBody<T> B = s.body[b];
  if (start && B.inv_mass > T(0)) {
    B.x = s.x_prev[b];
    B.q = s.q_prev[b];
  }
  return B;
}
template <class T>
PHX_HD void xpbd_coordinates(const ModelView<T>& m, const XpbdArrays<T>& s, bool start, T* qpos) {
  for (int b = 1; b < m.nbody; ++b) {
    if (!m.body_jntnum[b]) continue;
    const int j = m.body_jntadr[b], a = m.jnt_qposadr[j];
    T out[7];
    xpbd_joint_coordinates(m, j, xpbd_joint_frame(m, b), xpbd_pose(s, start, m.body_parentid[b]),
                           xpbd_pose(s, start, b), Vec3<T>::load(m.body_ipos + 3 * b), qpos + a,
                           out);
    for (int i = 0; i < xpbd_body_nq(m, b); ++i) qpos[a + i] = out[i];
  }
}
// The adjoint: from adj_qpos to the poses xpbd_coordinates read (of s with `start`), accumulated
// into adj_pose (positions and orientations), to the joint frames' anchors (adj_frame, may be
// null) and to body_ipos, by Dual numbers in the two bodies' poses, the anchors and the centre
// of mass; old the coordinates the forward was given.
template <class T>
PHX_HD void adj_xpbd_coordinates(const ModelView<T>& m, const XpbdArrays<T>& s, bool start,
                                 const T* old, const T* adj_qpos, XpbdBody<T>* adj_pose,
                                 Vec3<T>* adj_frame, const ModelAdjoint<T>& adj_model) {
  using D = Dual<T, 23>;  // x1, q1, x2, q2, r1, r2, ipos
  for (int b = 1; b < m.nbody; ++b) {
    if (!m.body_jntnum[b]) continue;
    const int j = m.body_jntadr[b], a = m.jnt_qposadr[j], p = m.body_parentid[b];
    const int id[2] = {p, b};
    XpbdBody<D> B[2];
    for (int k = 0; k < 2; ++k) B[k] = xpbd_impl::seeded<D>(xpbd_pose(s, start, id[k]), 7 * k);
    Vec3<D> ipos = Vec3<D>::load(m.body_ipos + 3 * b);
    for (int i = 0; i < 3; ++i) ipos[i].d[20 + i] = T(1);
    D out[7];
    xpbd_joint_coordinates(m, j, xpbd_impl::seeded_frame<D>(xpbd_joint_frame(m, b), 14), B[0], B[1],
                           ipos, old + a, out);
    D phi(T(0));
    for (int i = 0; i < xpbd_body_nq(m, b); ++i) phi += adj_qpos[a + i] * out[i];
    for (int k = 0; k < 2; ++k)
      if (id[k] > 0) xpbd_impl::add_pose_slopes(phi, 7 * k, adj_pose[id[k]]);
    xpbd_impl::add_frame_slopes(phi, 14, b, adj_frame);
    if (adj_model.body_ipos)
      for (int i = 0; i < 3; ++i) adj_model.body_ipos[3 * b + i] += phi.d[20 + i];
  }
}

// Joint j's share of v = (qpos_a (-) qpos_b) / h, the inverse of integrate_pos(qpos_b, v, h):
// differences of hinge and slide coordinates and free positions, local rotation vectors of ball
// and free rotations (sub_quat). Any scalar R.
template <class R>
PHX_HD void xpbd_joint_difference(int type, const R* qa, const R* qb, R h, R* v) {
  int o = 0;
  switch (type) {
    case kJointFree:
      for (int i = 0; i < 3; ++i) v[i] = (qa[i] - qb[i]) / h;
      o = 3;
      [[fallthrough]];
    case kJointBall: {
      Vec3<R> r = sub_quat(Quat<R>{qa[o], qa[o + 1], qa[o + 2], qa[o + 3]},
                           Quat<R>{qb[o], qb[o + 1], qb[o + 2], qb[o + 3]});
      for (int i = 0; i < 3; ++i) v[o + i] = r[i] / h;
      break;
    }
    default:
      v[0] = (qa[0] - qb[0]) / h;
  }
}
template <class T>
PHX_HD void xpbd_difference(const ModelView<T>& m, const T* qpos_a, const T* qpos_b, T h, T* v) {
  for (int j = 0; j < m.njnt; ++j)
    xpbd_joint_difference(m.jnt_type[j], qpos_a + m.jnt_qposadr[j], qpos_b + m.jnt_qposadr[j], h,
                          v + m.jnt_dofadr[j]);
}
// The adjoint: from adj_v to adj_qpos_a and adj_qpos_b (accumulated), by Dual numbers in the
// joint's coordinates of both
template <class T>
PHX_HD void adj_xpbd_difference(const ModelView<T>& m, const T* qpos_a, const T* qpos_b, T h,
                                const T* adj_v, T* adj_qpos_a, T* adj_qpos_b) {
  using D = Dual<T, 14>;
  for (int j = 0; j < m.njnt; ++j) {
    const int type = m.jnt_type[j], qa = m.jnt_qposadr[j], da = m.jnt_dofadr[j];
    const int nq = joint_nq(type), nv = joint_nv(type);
    D a[7], b[7], v[6];
    for (int i = 0; i < nq; ++i) {
      a[i] = D(qpos_a[qa + i]);
      a[i].d[i] = T(1);
      b[i] = D(qpos_b[qa + i]);
      b[i].d[7 + i] = T(1);
    }
    xpbd_joint_difference(type, a, b, D(h), v);
    D phi(T(0));
    for (int i = 0; i < nv; ++i) phi += adj_v[da + i] * v[i];
    for (int i = 0; i < nq; ++i) {
      adj_qpos_a[qa + i] += phi.d[i];
      adj_qpos_b[qa + i] += phi.d[7 + i];
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

// ---- contacts (xpbd_contact.h) --------------------------------------------------------------

// the number of contacts the step holds (none when the caller bound no contact arrays)
template <class T>
PHX_HD PHX_INLINE int xpbd_ncon(const XpbdArrays<T>& s) {
  return s.cv.ncon ? *s.cv.ncon : 0;
}

// The step's contacts, at its start, after xpbd_load (the bodies at qpos and their chord
// velocities; w the kinematics at qpos): the geom frames, then detect_contacts with the
// look-ahead margin 2 dt max (|v_b| + |w_b| (|geom centre - x_b| + rbound)) over the geoms of
// moving bodies (how far a surface travels in two steps at the current speeds; the margin only
// selects contacts and is not differentiated), then each contact's points, normal, friction
// (the larger sliding friction of its geoms, 0 when both have condim 1) and restitution.
template <class T>
PHX_HD void xpbd_detect(const ModelView<T>& m, const Workspace<T>& w, XpbdArrays<T> s) {
  if (!s.cv.ncon) return;
  ContactView<T>& cv = s.cv;
  *cv.ncon = *cv.overflow = *cv.nwarm = *cv.set_hit = *cv.nefc = 0;
  *s.margin = T(0);
  if (!m.contact || m.nconmax == 0) return;
  geom_poses(m, w, s.c);
  T speed = T(0);
  for (int g = 0; g < m.ngeom; ++g) {
    const int b = m.geom_bodyid[g];
    if (!(s.body[b].inv_mass > T(0))) continue;
    const T reach = norm(Vec3<T>::load(s.c.geom_xpos + 3 * g) - s.body[b].x) + m.geom_rbound[g];
    const T sp = norm(s.v[b]) + norm(s.omega[b]) * reach;
    if (sp > speed) speed = sp;
  }
  *s.margin = T(2) * m.timestep * speed;
  detect_contacts(m, s.c, cv, nullptr, 0, *s.margin);
  for (int i = 0; i < *cv.ncon; ++i) {
    const int g1 = cv.geom[2 * i], g2 = cv.geom[2 * i + 1];
    XpbdContact<T>& c = s.contact[i];
    c.b1 = m.geom_bodyid[g1];
    c.b2 = m.geom_bodyid[g2];
    c.n = Vec3<T>::load(cv.frame + 9 * i);
    xpbd_contact_points(Vec3<T>::load(cv.pos + 3 * i), c.n, cv.dist[i], s.body[c.b1], s.body[c.b2],
                        c.r1, c.r2);
    const T mu1 = m.geom_friction[3 * g1], mu2 = m.geom_friction[3 * g2];
    c.mu = (m.geom_condim[g1] > 1 || m.geom_condim[g2] > 1) ? (mu1 > mu2 ? mu1 : mu2) : T(0);
    const T e1 = m.geom_restitution[g1], e2 = m.geom_restitution[g2];
    c.e = e1 > e2 ? e1 : e2;
  }
}

// a substep's start for the contacts: their normal velocities (restitution's vn0) from the
// bodies and velocities before the prediction, and their multipliers zeroed
template <class T>
PHX_HD void xpbd_contacts_start(XpbdArrays<T> s) {
  for (int i = 0; i < xpbd_ncon(s); ++i) {
    const XpbdContact<T>& c = s.contact[i];
    s.vn0[i] = xpbd_contact_normal_velocity(c, s.body[c.b1], s.body[c.b2], s.v[c.b1], s.omega[c.b1],
                                            s.v[c.b2], s.omega[c.b2]);
    s.lambda_contact[2 * i] = s.lambda_contact[2 * i + 1] = T(0);
  }
}

// The order of pass `pass` over n contacts: forward on even passes, backward on odd ones (the
// symmetric Gauss-Seidel order, so that the order's bias on a body resting on several points
// alternates instead of adding up over the substeps); k-th contact of the pass
PHX_HD PHX_INLINE int xpbd_contact_order(int pass, int n, int k) {
  return pass % 2 == 0 ? k : n - 1 - k;
}

// pass `pass` over the contacts' projections (xpbd_contact_project), in xpbd_contact_order
template <class T>
PHX_HD void xpbd_project_contacts(XpbdArrays<T> s, T h, int pass) {
  const int ncon = xpbd_ncon(s);
  for (int k = 0; k < ncon; ++k) {
    const int i = xpbd_contact_order(pass, ncon, k);
    const XpbdContact<T>& c = s.contact[i];
    xpbd_contact_project(c, s.body[c.b1], s.body[c.b2], xpbd_pose(s, true, c.b1),
                         xpbd_pose(s, true, c.b2), h, s.lambda_contact + 2 * i);
  }
}

// Its adjoint from the bodies `start` and multipliers `lambda` (2 ncon) it was given, with the
// substep's start poses `begin` (nbody): adj_body and adj_lambda hold its outputs' adjoints and
// receive its inputs'; the start poses' go to adj_begin, the geometry's to adj_contact. Replays
// the pass keeping each contact's two bodies (work: nbody + 2 ncon bodies), then reverses it.
template <class T>
PHX_HD void adj_xpbd_project_contacts(const XpbdArrays<T>& s, const XpbdBody<T>* start,
                                      const XpbdBody<T>* begin, const T* lambda, T h,
                                      XpbdBody<T>* adj_body, XpbdBody<T>* adj_begin, T* adj_lambda,
                                      XpbdContact<T>* adj_contact, XpbdBody<T>* work, int nbody,
                                      int pass) {
  const int ncon = xpbd_ncon(s);
  XpbdBody<T>* cur = work;
  XpbdBody<T>* pre = work + nbody;
  for (int b = 0; b < nbody; ++b) cur[b] = start[b];
  for (int k = 0; k < ncon; ++k) {
    const int i = xpbd_contact_order(pass, ncon, k);
    const XpbdContact<T>& c = s.contact[i];
    pre[2 * i] = cur[c.b1];
    pre[2 * i + 1] = cur[c.b2];
    T l[2] = {lambda[2 * i], lambda[2 * i + 1]};
    xpbd_contact_project(c, cur[c.b1], cur[c.b2], begin[c.b1], begin[c.b2], h, l);
  }
  for (int k = ncon - 1; k >= 0; --k) {
    const int i = xpbd_contact_order(pass, ncon, k);
    const XpbdContact<T>& c = s.contact[i];
    adj_xpbd_contact_project(c, pre[2 * i], pre[2 * i + 1], begin[c.b1], begin[c.b2], h,
                             lambda + 2 * i, adj_body[c.b1], adj_body[c.b2], adj_begin[c.b1],
                             adj_begin[c.b2], adj_lambda + 2 * i, adj_contact[i]);
  }
}

// The velocity pass after a substep's velocities (xpbd_contact_velocity), in contact order over
// the contacts whose normal projection acted (lambda_n < 0); s.touched marks the bodies it
// changed. g: gravity's magnitude.
template <class T>
PHX_HD void xpbd_contact_velocities(const ModelView<T>& m, XpbdArrays<T> s, T h, int pass) {
  const int ncon = xpbd_ncon(s);
  if (ncon == 0) return;
  for (int b = 0; b < m.nbody; ++b) s.touched[b] = T(0);
  const T g = norm(Vec3<T>::load(m.gravity));
  for (int k = 0; k < ncon; ++k) {
    const int i = xpbd_contact_order(pass, ncon, k);
    const XpbdContact<T>& c = s.contact[i];
    if (!(s.lambda_contact[2 * i] < T(0))) continue;
    s.touched[c.b1] = s.touched[c.b2] = T(1);
    Vec3<T> v[4] = {s.v[c.b1], s.omega[c.b1], s.v[c.b2], s.omega[c.b2]};
    if (!xpbd_contact_velocity(c, s.body[c.b1], s.body[c.b2], v, s.lambda_contact[2 * i], s.vn0[i],
                               h, g))
      continue;
    s.v[c.b1] = v[0], s.omega[c.b1] = v[1], s.v[c.b2] = v[2], s.omega[c.b2] = v[3];
  }
}

// the bodies of the contacts that acted in a substep (lambda: its multipliers after its
// iterations), 1 in touched (nbody), as xpbd_contact_velocities marks them
template <class T>
PHX_HD void xpbd_contacts_acted(const XpbdArrays<T>& s, const T* lambda, int nbody, T* touched) {
  for (int b = 0; b < nbody; ++b) touched[b] = T(0);
  for (int i = 0; i < xpbd_ncon(s); ++i)
    if (lambda[2 * i] < T(0)) touched[s.contact[i].b1] = touched[s.contact[i].b2] = T(1);
}

// The adjoint of xpbd_contact_velocities at the end poses `end` and the velocities it was given
// (v, omega: nbody each, overwritten by its replay), the multipliers `lambda` (2 ncon) after the
// substep's iterations and the normal velocities vn0: adj_v, adj_omega hold the adjoints of the
// velocities after it and receive those before; the end poses' go to adj_end, the multipliers'
// to adj_lambda, vn0's to adj_vn0 and the geometry's to adj_contact, accumulated. Replays the
// pass keeping each contact's four velocities (pre: 4 ncon), then reverses it.
template <class T>
PHX_HD void adj_xpbd_contact_velocities(const ModelView<T>& m, const XpbdArrays<T>& s,
                                        const XpbdBody<T>* end, Vec3<T>* v, Vec3<T>* omega,
                                        const T* lambda, const T* vn0, T h, Vec3<T>* adj_v,
                                        Vec3<T>* adj_omega, XpbdBody<T>* adj_end, T* adj_lambda,
                                        T* adj_vn0, XpbdContact<T>* adj_contact, Vec3<T>* pre,
                                        int pass) {
  const int ncon = xpbd_ncon(s);
  const T g = norm(Vec3<T>::load(m.gravity));
  for (int k = 0; k < ncon; ++k) {
    const int i = xpbd_contact_order(pass, ncon, k);
    const XpbdContact<T>& c = s.contact[i];
    Vec3<T>* u = pre + 4 * i;
    u[0] = v[c.b1], u[1] = omega[c.b1], u[2] = v[c.b2], u[3] = omega[c.b2];
    if (!(lambda[2 * i] < T(0))) continue;
    Vec3<T> out[4] = {u[0], u[1], u[2], u[3]};
    if (!xpbd_contact_velocity(c, end[c.b1], end[c.b2], out, lambda[2 * i], vn0[i], h, g)) continue;
    v[c.b1] = out[0], omega[c.b1] = out[1], v[c.b2] = out[2], omega[c.b2] = out[3];
  }
  for (int k = ncon - 1; k >= 0; --k) {
    const int i = xpbd_contact_order(pass, ncon, k);
    const XpbdContact<T>& c = s.contact[i];
    if (!(lambda[2 * i] < T(0))) continue;
    Vec3<T> a[4] = {adj_v[c.b1], adj_omega[c.b1], adj_v[c.b2], adj_omega[c.b2]};
    adj_xpbd_contact_velocity(c, end[c.b1], end[c.b2], pre + 4 * i, lambda[2 * i], vn0[i], h, g, a,
                              adj_end[c.b1], adj_end[c.b2], adj_lambda[2 * i], adj_vn0[i],
                              adj_contact[i]);
    adj_v[c.b1] = a[0], adj_omega[c.b1] = a[1], adj_v[c.b2] = a[2], adj_omega[c.b2] = a[3];
  }
}

// After each substep: the start poses of the bodies the velocity pass acted on, moved so that
// their chords carry the changed velocities (xpbd_chord_start): into the qvel the step reports
// after the last, and into the next substep's armature targets (the angles' chords)
template <class T>
PHX_HD void xpbd_contact_chords(const ModelView<T>& m, XpbdArrays<T> s, T h) {
  if (xpbd_ncon(s) == 0) return;
  for (int b = 1; b < m.nbody; ++b)
    if (s.touched[b] > T(0) && s.body[b].inv_mass > T(0))
      xpbd_chord_start(s.body[b].x, s.body[b].q, s.v[b], s.omega[b], h, s.x_prev[b], s.q_prev[b]);
}

// What the reverse pass of an XPBD step replays its forward into (xpbd_step with a record):
// per substep k, the bodies and their velocities before its prediction, and the bodies and
// multipliers at the start of each of its iterations
template <class T>
struct XpbdRecord {
  XpbdBody<T>* body;  // (substeps (iterations + 1)) x nbody: row k (iterations + 1) before
                      // substep k's prediction, row k (iterations + 1) + 1 + i before iteration i
  Vec3<T>* v;         // (substeps x nbody) before the prediction
  Vec3<T>* omega;
  T* lambda;          // (substeps iterations) x kXpbdLambdas nbody, before each iteration
  T* lambda_contact;  // (substeps (iterations + 1)) x 2 nconmax, before each iteration and
                      // after the last
  Quat<T>* before;    // (nbody) the orientations at qpos (-) h qvel (the load's start poses)

  // sized for m's substeps and iterations (xpbd_substeps, xpbd_iterations)
  template <class M, class Layout>
  PHX_HD static XpbdRecord carve(const M& m, Arena<T, Layout>& arena) {
    using xpbd_impl::take_objects;
    const long nb = m.nbody, k = m.xpbd_substeps, n = m.xpbd_iterations;
    XpbdRecord r;
    r.body = take_objects<XpbdBody<T>>(arena, k * (n + 1) * nb);
    r.v = take_objects<Vec3<T>>(arena, k * nb);
    r.omega = take_objects<Vec3<T>>(arena, k * nb);
    r.lambda = arena.template take<T>(k * n * kXpbdLambdas * nb);
    r.lambda_contact = arena.template take<T>(k * (n + 1) * 2 * m.nconmax);
    r.before = take_objects<Quat<T>>(arena, nb);
    return r;
  }
};

// The orientations before substep k of a recorded step (what its armature targets read): those
// at substep k - 1's start, where its contacts acted moved by their chords
// (xpbd_contact_chords), or for k = 0 the load's (rec.before); into q (nbody)
template <class T>
PHX_HD void xpbd_armature_before(const ModelView<T>& m, const XpbdArrays<T>& s,
                                 const XpbdRecord<T>& rec, int k, int iterations, T h, Quat<T>* q) {
  const int nb = m.nbody, nc = 2 * xpbd_ncon(s);
  if (k == 0) {
    for (int b = 0; b < nb; ++b) q[b] = rec.before[b];
    return;
  }
  const XpbdBody<T>* prev = rec.body + (k - 1) * (iterations + 1) * nb;
  const XpbdBody<T>* end = rec.body + k * (iterations + 1) * nb;
  for (int b = 0; b < nb; ++b) q[b] = prev[b].q;
  if (nc == 0) return;
  xpbd_contacts_acted(s, rec.lambda_contact + ((k - 1) * (iterations + 1) + iterations) * nc, nb,
                      s.touched);
  for (int b = 1; b < nb; ++b) {
    if (!(s.touched[b] > T(0) && end[b].inv_mass > T(0))) continue;
    Vec3<T> x;
    xpbd_chord_start(end[b].x, end[b].q, rec.v[k * nb + b], rec.omega[k * nb + b], h, x, q[b]);
  }
}

// One step of m.timestep in `substeps` substeps of `iterations` joint iterations each, in place
// on qpos and qvel, under gravity and the applied generalized forces of step.h's
// applied_forces: passive (joint and tendon springs and dampers, the medium's drag), actuation
// from ctrl (the actuators' inputs) and qfrc_applied (nv, may be null), evaluated at the step's
// start and held over its substeps (explicit, where the Featherstone step treats joint damping
// implicitly).
// With a record (its arrays not null) it keeps what adj_xpbd_step replays.
template <class T>
PHX_HD PHX_DEVICE_NOINLINE void xpbd_step(const ModelView<T>& m, T* qpos, T* qvel, const T* ctrl,
                                          Workspace<T>& w, XpbdArrays<T> s, int substeps,
                                          int iterations, const T* qfrc_applied = nullptr,
                                          XpbdJointSolver solver = kXpbdTree,
                                          XpbdRecord<T> rec = {}) {
  const int nb = m.nbody, nl = kXpbdLambdas * nb;
  kinematics(m, qpos, w);
  com_pos(m, w);
  com_vel(m, qvel, w);
  tendon_kinematics(m, qpos, w);
  applied_forces(m, qpos, qvel, ctrl, qfrc_applied, w);  // into w.qfrc, which load keeps
  T h = m.timestep / T(substeps);
  xpbd_load(m, qpos, qvel, h, w, s);
  if (rec.body)
    for (int b = 0; b < nb; ++b) rec.before[b] = s.q_prev[b];
  xpbd_detect(m, w, s);
  const int nc = 2 * xpbd_ncon(s);
  Vec3<T> g{m.gravity[0], m.gravity[1], m.gravity[2]};
  for (int k = 0; k < substeps; ++k) {
    xpbd_joint_forces(m, w.qfrc, s);
    if (rec.body)
      for (int b = 0; b < nb; ++b) {
        rec.body[k * (iterations + 1) * nb + b] = s.body[b];
        rec.v[k * nb + b] = s.v[b];
        rec.omega[k * nb + b] = s.omega[b];
      }
    xpbd_contacts_start(s);
    xpbd_armature_targets(m, s.body, s.q_prev, s.target);
    for (int b = 1; b < nb; ++b) {
      s.x_prev[b] = s.body[b].x;
      s.q_prev[b] = s.body[b].q;
      xpbd_predict(s.body[b], s.v[b], s.omega[b], s.f[b], s.tau[b], g, h);
    }
    for (int i = 0; i < nl; ++i) s.lambda[i] = T(0);
    for (int t = 0; t < m.ntendon; ++t) s.lambda_cable[t] = T(0);
    for (int it = 0; it < iterations; ++it) {
      if (rec.body) {
        for (int b = 0; b < nb; ++b) rec.body[(k * (iterations + 1) + 1 + it) * nb + b] = s.body[b];
        for (int i = 0; i < nl; ++i) rec.lambda[(k * iterations + it) * nl + i] = s.lambda[i];
        for (int i = 0; i < nc; ++i)
          rec.lambda_contact[(k * (iterations + 1) + it) * nc + i] = s.lambda_contact[i];
      }
      xpbd_iterate(m, s, h, solver, k * iterations + it);
    }
    if (rec.body)
      for (int i = 0; i < nc; ++i)
        rec.lambda_contact[(k * (iterations + 1) + iterations) * nc + i] = s.lambda_contact[i];
    for (int b = 1; b < nb; ++b)
      if (s.body[b].inv_mass > T(0))
        xpbd_velocities(s.body[b].x, s.body[b].q, s.x_prev[b], s.q_prev[b], h, s.v[b], s.omega[b]);
    xpbd_contact_velocities(m, s, h, k);
    xpbd_contact_chords(m, s, h);
  }
  xpbd_store(m, s, h, qpos, qvel);
}

// One iteration: the joints (by `solver`), then the cables, then the contacts
template <class T>
PHX_HD void xpbd_iterate(const ModelView<T>& m, XpbdArrays<T> s, T h, XpbdJointSolver solver,
                         int pass) {
  if (solver == kXpbdTree)
    xpbd_solve_joints(m, s, h);
  else
    xpbd_project_joints(m, s, h);
  xpbd_project_cables(m, s);
  xpbd_project_contacts(s, h, pass);
}

// The scratch of adj_xpbd_step: the adjoints of the bodies, their velocities, forces and
// torques and the multipliers (nbody or kXpbdLambdas nbody each), and room for
// adj_xpbd_solve_joints and for the coordinates (nq, nv)
template <class T>
struct XpbdAdjArrays {
  XpbdBody<T>* body;  // nbody: of the bodies' current poses (and masses)
  XpbdBody<T>* prev;  // nbody: of the poses at the substep's start
  Vec3<T>* v;         // nbody each: of velocities, forces and torques
  Vec3<T>* omega;
  Vec3<T>* f;
  Vec3<T>* tau;
  T* lambda;          // kXpbdLambdas nbody
  XpbdBody<T>* work;  // kXpbdSolveWork nbody
  XpbdRows<T>* rows;  // nbody
  T* d;               // 6 nbody
  T* dl;              // kXpbdLambdas nbody
  T* qfrc;            // nv: of the applied forces
  T* qpos_a;          // nq each: coordinates, then their adjoints
  T* qpos_b;
  T* adj_qpos_a;
  T* adj_qpos_b;
  T* qvel;         // nv
  T* target;       // nv: of the armature's targets
  Quat<T>* before_q;      // nbody: the orientations before a substep (the armature's targets),
  Quat<T>* adj_before_q;  //   and their adjoints, carried to the substep before
  Vec3<T>* frame;         // 2 nbody: of the joint frames' anchors r1, r2
  XpbdBody<T>* cable_start;  // nbody, and kXpbdLambdas nbody: the joints' replay, which the
  T* cable_lambda;           //   cables start from
  XpbdBody<T>* cable_work;   // nbody + nwrap
  // contacts: the adjoints of their geometry and multipliers; the bodies and cable multipliers
  // the contact pass starts from (replayed); the velocities before each contact's velocity pass
  // (replayed, 4 per contact) and the velocities it runs on (2 nbody); the adjoints of vn0 and
  // of the points, normals and distances detect_contacts gave
  XpbdContact<T>* contact;     // nconmax
  T* lambda_contact;           // 2 nconmax
  XpbdBody<T>* contact_start;  // nbody
  T* contact_cable_lambda;     // ntendon: the cables' multipliers in that replay (not read)
  XpbdBody<T>* contact_work;   // nbody + 2 nconmax
  Vec3<T>* contact_vel;        // 4 nconmax
  Vec3<T>* vel;                // 2 nbody: v, omega
  T* vn0;                      // nconmax
  T* pos;                      // 3 nconmax
  T* normal;                   // 3 nconmax
  T* dist;                     // nconmax

  template <class M, class Layout>
  PHX_HD static XpbdAdjArrays carve(const M& m, Arena<T, Layout>& arena) {
    using xpbd_impl::take_objects;
    const long nb = m.nbody;
    XpbdAdjArrays r;
    r.body = take_objects<XpbdBody<T>>(arena, nb);
    r.prev = take_objects<XpbdBody<T>>(arena, nb);
    r.v = take_objects<Vec3<T>>(arena, nb);
    r.omega = take_objects<Vec3<T>>(arena, nb);
    r.f = take_objects<Vec3<T>>(arena, nb);
    r.tau = take_objects<Vec3<T>>(arena, nb);
    r.lambda = arena.template take<T>(kXpbdLambdas * nb);
    r.work = take_objects<XpbdBody<T>>(arena, kXpbdSolveWork * nb);
    r.rows = take_objects<XpbdRows<T>>(arena, nb);
    r.d = arena.template take<T>(6 * nb);
    r.dl = arena.template take<T>(kXpbdLambdas * nb);
    r.qfrc = arena.template take<T>(m.nv);
    r.qpos_a = arena.template take<T>(m.nq);
    r.qpos_b = arena.template take<T>(m.nq);
    r.adj_qpos_a = arena.template take<T>(m.nq);
    r.adj_qpos_b = arena.template take<T>(m.nq);
    r.qvel = arena.template take<T>(m.nv);
    r.target = arena.template take<T>(m.nv);
    r.before_q = take_objects<Quat<T>>(arena, nb);
    r.adj_before_q = take_objects<Quat<T>>(arena, nb);
    r.frame = take_objects<Vec3<T>>(arena, 2 * nb);
    r.cable_start = take_objects<XpbdBody<T>>(arena, nb);
    r.cable_lambda = arena.template take<T>(kXpbdLambdas * nb);
    r.cable_work = take_objects<XpbdBody<T>>(arena, nb + long(m.nwrap));
    const long nc = m.nconmax;
    r.contact = take_objects<XpbdContact<T>>(arena, nc);
    r.lambda_contact = arena.template take<T>(2 * nc);
    r.contact_start = take_objects<XpbdBody<T>>(arena, nb);
    r.contact_cable_lambda = arena.template take<T>(m.ntendon);
    r.contact_work = take_objects<XpbdBody<T>>(arena, nb + 2 * nc);
    r.contact_vel = take_objects<Vec3<T>>(arena, 4 * nc);
    r.vel = take_objects<Vec3<T>>(arena, 2 * nb);
    r.vn0 = arena.template take<T>(nc);
    r.pos = arena.template take<T>(3 * nc);
    r.normal = arena.template take<T>(3 * nc);
    r.dist = arena.template take<T>(nc);
    return r;
  }
};

// The adjoint of xpbd_step (either joint solver) at (qpos, qvel, ctrl, qfrc_applied): replays the
// forward with a record (rec, sized for substeps and iterations), then maps (adj_qpos_next,
// adj_qvel_next) to adj_qpos, adj_qvel, adj_ctrl, adj_qfrc_applied (may be null) and the
// parameters body_mass, body_inertia, body_ipos, body_pos and those of the applied forces (damping,
// stiffness, actuators), accumulated. Backward through: the coordinates of the end and start
// poses of the last substep and their difference; per substep, last first, the velocities,
// each iteration (adj_xpbd_solve_joints), the prediction and the joint forces; the load (the
// poses at qpos and at qpos (-) h qvel, their chord velocities), the applied forces and the
// joint frames (body_pos and body_ipos move the anchors).
template <class T>
PHX_HD PHX_DEVICE_NOINLINE void adj_xpbd_step(
    const ModelView<T>& m, const T* qpos, const T* qvel, const T* ctrl, Workspace<T>& w,
    AdjWorkspace<T>& a, XpbdArrays<T> s, XpbdAdjArrays<T> r, XpbdRecord<T> rec, int substeps,
    int iterations, const T* qfrc_applied, const T* adj_qpos_next, const T* adj_qvel_next,
    T* adj_qpos, T* adj_qvel, T* adj_ctrl, const ModelAdjoint<T>& adj_model,
    T* adj_qfrc_applied = nullptr, XpbdJointSolver solver = kXpbdTree) {
  const int nb = m.nbody, nl = kXpbdLambdas * nb, nq = m.nq, nv = m.nv;
  const T h = m.timestep / T(substeps);
  const Vec3<T> g{m.gravity[0], m.gravity[1], m.gravity[2]};
  // the forward, recorded: qpos_a the end coordinates, s.qpos_prev the start ones
  for (int i = 0; i < nq; ++i) r.qpos_a[i] = qpos[i];
  for (int d = 0; d < nv; ++d) r.qvel[d] = qvel[d];
  xpbd_step(m, r.qpos_a, r.qvel, ctrl, w, s, substeps, iterations, qfrc_applied, solver, rec);
  for (int b = 0; b < nb; ++b) {
    r.body[b] = r.prev[b] = XpbdBody<T>::zero();
    r.v[b] = r.omega[b] = Vec3<T>{};
  }
  for (int d = 0; d < nv; ++d) r.qfrc[d] = T(0);
  for (int i = 0; i < 2 * nb; ++i) r.frame[i] = Vec3<T>{};
  const int ncon = xpbd_ncon(s), nc = 2 * ncon;
  for (int i = 0; i < ncon; ++i) r.contact[i].r1 = r.contact[i].r2 = r.contact[i].n = Vec3<T>{};
  for (int b = 0; b < nb; ++b) r.adj_before_q[b] = Quat<T>::zero();
  // qpos' = coordinates(end), qvel' = difference(qpos', coordinates(start)) / h
  for (int i = 0; i < nq; ++i) {
    r.adj_qpos_a[i] = adj_qpos_next[i];
    r.adj_qpos_b[i] = T(0);
  }
  adj_xpbd_difference(m, r.qpos_a, s.qpos_prev, h, adj_qvel_next, r.adj_qpos_a, r.adj_qpos_b);
  adj_xpbd_coordinates(m, s, false, s.qpos_prev, r.adj_qpos_a, r.body, r.frame, adj_model);
  adj_xpbd_coordinates(m, s, true, qpos, r.adj_qpos_b, r.prev, r.frame, adj_model);
  // the substeps, last first; r.body: the adjoint of the substep's end poses
  for (int k = substeps - 1; k >= 0; --k) {
    const XpbdBody<T>* start = rec.body + k * (iterations + 1) * nb;
    const XpbdBody<T>* end =
        k == substeps - 1 ? s.body : rec.body + (k + 1) * (iterations + 1) * nb;
    const T* lambda_end = rec.lambda_contact + (k * (iterations + 1) + iterations) * nc;
    // the start poses the contacts' chords moved at the substep's end (xpbd_contact_chords):
    // read by the store after the last substep (their adjoint in r.prev) and by the next
    // substep's armature targets (r.adj_before_q); where no contact acted, they are the
    // substep's start poses
    const bool last = k == substeps - 1;
    if (ncon > 0) xpbd_contacts_acted(s, lambda_end, nb, s.touched);
    const Vec3<T>* v_end = last ? s.v : rec.v + (k + 1) * nb;
    const Vec3<T>* w_end = last ? s.omega : rec.omega + (k + 1) * nb;
    for (int b = 1; b < nb; ++b) {
      XpbdBody<T> B = XpbdBody<T>::zero();
      if (last)
        B = r.prev[b];
      else
        B.q = r.adj_before_q[b];
      r.adj_before_q[b] = Quat<T>::zero();
      if (ncon > 0 && s.touched[b] > T(0) && start[b].inv_mass > T(0)) {
        adj_xpbd_chord_start(end[b].x, end[b].q, v_end[b], w_end[b], h, B.x, B.q, r.body[b].x,
                             r.body[b].q, r.v[b], r.omega[b]);
        if (last) r.prev[b] = XpbdBody<T>::zero();
      } else if (!last) {
        add_to(r.prev[b].q, B.q);
      }
    }
    // the contacts' velocity pass, from the chord velocities and vn0 it read (s.vn0 is scratch
    // after the replay)
    for (int i = 0; i < nc; ++i) r.lambda_contact[i] = T(0);
    if (ncon > 0) {
      Vec3<T>*vel = r.vel, *omega = r.vel + nb;
      for (int b = 0; b < nb; ++b) {
        vel[b] = omega[b] = Vec3<T>{};
        if (b > 0 && start[b].inv_mass > T(0))
          xpbd_velocities(end[b].x, end[b].q, start[b].x, start[b].q, h, vel[b], omega[b]);
      }
      for (int i = 0; i < ncon; ++i) {
        const XpbdContact<T>& c = s.contact[i];
        const Vec3<T>*v0 = rec.v + k * nb, *w0 = rec.omega + k * nb;
        s.vn0[i] = xpbd_contact_normal_velocity(c, start[c.b1], start[c.b2], v0[c.b1], w0[c.b1],
                                                v0[c.b2], w0[c.b2]);
        r.vn0[i] = T(0);
      }
      adj_xpbd_contact_velocities(m, s, end, vel, omega, lambda_end, s.vn0, h, r.v, r.omega, r.body,
                                  r.lambda_contact, r.vn0, r.contact, r.contact_vel, k);
    }
    // the velocities (of the end poses against the start poses), which the next substep read
    for (int b = 1; b < nb; ++b) {
      if (!(start[b].inv_mass > T(0))) continue;
      T adj_h = T(0);
      adj_xpbd_velocities(end[b].x, end[b].q, start[b].x, start[b].q, h, r.body[b].x, r.body[b].q,
                          r.prev[b].x, r.prev[b].q, adj_h, r.v[b], r.omega[b]);
      r.v[b] = r.omega[b] = Vec3<T>{};
    }
    // the iterations, last first, with the substep's armature targets
    for (int i = 0; i < nl; ++i) r.lambda[i] = T(0);
    for (int d = 0; d < nv; ++d) r.target[d] = T(0);
    // the orientations before substep k: substep k - 1's start poses, moved by its contacts'
    // chords, or the load's for k = 0
    xpbd_armature_before(m, s, rec, k, iterations, h, r.before_q);
    xpbd_armature_targets(m, start, r.before_q, s.target);
    for (int it = iterations - 1; it >= 0; --it) {
      for (int b = 0; b < nb; ++b) s.body[b] = rec.body[(k * (iterations + 1) + 1 + it) * nb + b];
      for (int i = 0; i < nl; ++i) s.lambda[i] = rec.lambda[(k * iterations + it) * nl + i];
      if (m.ntendon > 0 || ncon > 0) {  // the joints' output, replayed on a copy
        XpbdArrays<T> c = s;
        c.body = r.cable_start;
        c.lambda = r.cable_lambda;
        for (int b = 0; b < nb; ++b) c.body[b] = s.body[b];
        for (int i = 0; i < nl; ++i) c.lambda[i] = s.lambda[i];
        if (solver == kXpbdTree)
          xpbd_solve_joints(m, c, h);
        else
          xpbd_project_joints(m, c, h);
        if (ncon > 0) {  // the contacts, from the cables' output (replayed on a second copy)
          XpbdArrays<T> d = c;
          d.body = r.contact_start;
          d.lambda_cable = r.contact_cable_lambda;
          for (int b = 0; b < nb; ++b) d.body[b] = c.body[b];
          xpbd_project_cables(m, d);
          adj_xpbd_project_contacts(
              s, d.body, start, rec.lambda_contact + (k * (iterations + 1) + it) * nc, h, r.body,
              r.prev, r.lambda_contact, r.contact, r.contact_work, nb, k * iterations + it);
        }
        if (m.ntendon > 0)
          adj_xpbd_project_cables(m, c.body, r.body, r.cable_work, adj_model.body_ipos);
      }
      if (solver == kXpbdTree)
        adj_xpbd_solve_joints(m, s, h, r.body, r.lambda, r.work, r.rows, r.d, r.dl, r.frame,
                              r.target, adj_model.dof_armature);
      else
        adj_xpbd_project_joints(m, s.body, s.lambda, h, false, s.target, r.body, r.lambda, r.work,
                                r.frame, r.target, adj_model.dof_armature);
    }
    // the armature's targets and vn0, read at the substep's start from its poses and velocities
    adj_xpbd_armature_targets(m, start, r.before_q, r.target, r.prev, r.adj_before_q);
    for (int i = 0; i < ncon; ++i) {
      const XpbdContact<T>& c = s.contact[i];
      if (r.vn0[i] == T(0)) continue;
      const int o = k * nb;
      const Vec3<T> v[4] = {rec.v[o + c.b1], rec.omega[o + c.b1], rec.v[o + c.b2],
                            rec.omega[o + c.b2]};
      Vec3<T> a[4];
      adj_xpbd_contact_normal_velocity(c, start[c.b1], start[c.b2], v, r.vn0[i], r.prev[c.b1],
                                       r.prev[c.b2], a, r.contact[i]);
      r.v[c.b1] += a[0], r.omega[c.b1] += a[1], r.v[c.b2] += a[2], r.omega[c.b2] += a[3];
    }
    // the prediction from the start poses and velocities under the joint forces there
    for (int b = 0; b < nb; ++b) {
      s.body[b] = start[b];
      r.f[b] = r.tau[b] = Vec3<T>{};
    }
    xpbd_joint_forces(m, w.qfrc, s);
    for (int b = 1; b < nb; ++b) {
      XpbdBody<T> out = r.body[b];
      r.body[b] = r.prev[b];  // the start poses are x_prev, q_prev too
      r.prev[b] = XpbdBody<T>::zero();
      Vec3<T> adj_g;
      T adj_h = T(0);
      adj_xpbd_predict(start[b], rec.v[k * nb + b], rec.omega[k * nb + b], s.f[b], s.tau[b], g, h,
                       r.body[b], r.v[b], r.omega[b], r.f[b], r.tau[b], adj_g, adj_h, out,
                       Vec3<T>{}, Vec3<T>{});
    }
    adj_xpbd_joint_forces(m, w.qfrc, s, r.f, r.tau, r.qfrc, r.body, r.frame, adj_model);
  }
  // the load: poses at qpos (r.body) and at qpos (-) h qvel (r.prev, which the first substep's
  // armature targets read too), differenced
  for (int b = 1; b < nb; ++b) {
    add_to(r.prev[b].q, r.adj_before_q[b]);
    r.adj_before_q[b] = Quat<T>::zero();
  }
  xpbd_load(m, qpos, qvel, h, w, s);
  for (int b = 1; b < nb; ++b) {
    T adj_h = T(0);
    adj_xpbd_velocities(s.body[b].x, s.body[b].q, s.x_prev[b], s.q_prev[b], h, r.body[b].x,
                        r.body[b].q, r.prev[b].x, r.prev[b].q, adj_h, r.v[b], r.omega[b]);
  }
  // the contacts' points from the detected ones and the poses at qpos (xpbd_detect)
  for (int i = 0; i < ncon; ++i) {
    const XpbdContact<T>& c = s.contact[i];
    Vec3<T> adj_pos, adj_n = r.contact[i].n;
    T adj_dist = T(0);
    adj_xpbd_contact_points(Vec3<T>::load(s.cv.pos + 3 * i), c.n, s.cv.dist[i], s.body[c.b1],
                            s.body[c.b2], r.contact[i].r1, r.contact[i].r2, adj_pos, adj_n,
                            adj_dist, r.body[c.b1], r.body[c.b2]);
    adj_pos.store(r.pos + 3 * i);
    adj_n.store(r.normal + 3 * i);
    r.dist[i] = adj_dist;
  }
  // the poses and the applied forces at qpos, with the kinematics they share
  kinematics(m, qpos, w);
  com_pos(m, w);
  com_vel(m, qvel, w);
  tendon_kinematics(m, qpos, w);
  a.zero();
  adj_xpbd_poses(m, w, r.body, a, adj_model);
  if (ncon > 0)  // the detection, from the geom frames at qpos (xpbd_detect's)
    adj_detect_contacts(m, s.c, s.cv, r.pos, r.normal, 3, r.dist, a, static_cast<T*>(nullptr),
                        *s.margin);
  adj_passive(m, qpos, qvel, w, a, r.qfrc, adj_qpos, adj_qvel, adj_model);
  adj_actuation(m, qpos, qvel, ctrl, w, a, r.qfrc, adj_qpos, adj_qvel, adj_ctrl, adj_model);
  adj_tendon_kinematics(m, w, a, adj_qpos);
  adj_com_vel(m, qvel, w, a, adj_qvel);
  adj_com_pos(m, w, a, adj_model);
  adj_kinematics(m, qpos, w, a, adj_qpos, adj_model.mocap_pos, adj_model.mocap_quat,
                 adj_model.body_pos);
  if (adj_qfrc_applied)
    for (int d = 0; d < nv; ++d) adj_qfrc_applied[d] += r.qfrc[d];
  // the poses at qpos (-) h qvel
  for (int i = 0; i < nq; ++i) {
    r.qpos_b[i] = qpos[i];
    r.adj_qpos_b[i] = T(0);
  }
  integrate_pos(m, r.qpos_b, qvel, -h);
  kinematics(m, r.qpos_b, w);
  a.zero();
  adj_xpbd_poses(m, w, r.prev, a, adj_model);
  adj_kinematics(m, r.qpos_b, w, a, r.adj_qpos_b, adj_model.mocap_pos, adj_model.mocap_quat,
                 adj_model.body_pos);
  adj_integrate_pos(m, qpos, qvel, -h, r.adj_qpos_b, adj_qpos, adj_qvel);
  adj_xpbd_joint_frames(m, r.frame, adj_model);
}

}  // namespace phx
