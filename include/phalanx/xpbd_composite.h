// A body's several hinges as one XPBD joint (a composite joint): the hinge angles of a relative
// rotation, where the last hinge's anchor lies for given angles, and the torque that carries the
// hinges' generalized forces. MuJoCo composes a body's joints in order, each rotating the body
// frame about its anchor, axes and anchors in the body frame (mj_kinematics):
//   R(theta) = R(a1, theta1) R(a2, theta2) ... R(ak, thetak),
//   a point p of the body at y = p1 + R(a1, theta1) (p2 + R(a2, theta2) (... - p2) - p1)
// in the frame the body has at zero angles (the joint frame). Every function is generic in the
// scalar, so that its adjoint is the same code on Dual numbers.
//
// The angles of a rotation R (Davenport's generalisation of Euler angles, Shuster and Markley,
// "Generalization of the Euler Angles", J. Astronaut. Sci. 2003):
//   k = 1  the angle of R about a1;
//   k = 2  theta1 turns a2 onto R a2 about a1 (R a2 = R(a1, theta1) a2), theta2 the rest;
//   k = 3  a1 . R a3 = a1 . R(a2, theta2) a3 gives theta2, of the two roots the one nearer zero
//          (the principal branch), then theta1 as for k = 2 with R(a2, theta2) a3 for a2, and
//          theta3 the rest.
// Two hinges need non-parallel axes and three independent ones (the loader checks).
#pragma once

#include "phalanx/xpbd.h"

namespace phx {

// a body's hinges, at most three: axes (unit) and anchors in its body frame
template <class R>
struct XpbdComposite {
  int k = 0;
  Vec3<R> axis[3];
  Vec3<R> anchor[3];
};

namespace xpbd_impl {

// the rotation by angle about a unit axis, as a quaternion (any scalar)
template <class R>
PHX_HD PHX_INLINE Quat<R> hinge_rotation(const Vec3<R>& a, R angle) {
  const R s = sin(R(0.5) * angle);
  return Quat<R>{cos(R(0.5) * angle), s * a.x, s * a.y, s * a.z};
}

// the angle about the unit axis a that turns u onto v (their parts across a)
template <class R>
PHX_HD PHX_INLINE R angle_about(const Vec3<R>& a, const Vec3<R>& u, const Vec3<R>& v) {
  const Vec3<R> uc = u - dot(a, u) * a, vc = v - dot(a, v) * a;
  return atan2(dot(a, cross(uc, vc)), dot(uc, vc));
}

// the angle of a rotation q about a (q taken as a rotation about a)
template <class R>
PHX_HD PHX_INLINE R twist_angle(const Quat<R>& q, const Vec3<R>& a) {
  return R(2) * atan2(dot(Vec3<R>{q.x, q.y, q.z}, a), q.w);
}

// x wrapped to (-pi, pi]
template <class R>
PHX_HD PHX_INLINE R wrapped(R x) {
  const double pi = 3.14159265358979323846;
  while (x > R(pi)) x -= R(2 * pi);
  while (x <= R(-pi)) x += R(2 * pi);
  return x;
}

}  // namespace xpbd_impl

// The hinge angles (theta, k of them) of the relative rotation rel (unit), see the top
template <class R>
PHX_HD void xpbd_composite_angles(const XpbdComposite<R>& C, const Quat<R>& rel, R* theta) {
  using namespace xpbd_impl;
  const Vec3<R>* a = C.axis;
  if (C.k == 1) {
    theta[0] = twist_angle(rel, a[0]);
    return;
  }
  if (C.k == 2) {
    theta[0] = angle_about(a[0], a[1], rotate(rel, a[1]));
    theta[1] = twist_angle(conjugate(hinge_rotation(a[0], theta[0])) * rel, a[1]);
    return;
  }
  // a1 . R a3 = A cos(theta2) + B sin(theta2) + D
  const R A = dot(a[0], a[2]) - dot(a[0], a[1]) * dot(a[1], a[2]);
  const R B = dot(a[0], cross(a[1], a[2]));
  const R D = dot(a[0], a[1]) * dot(a[1], a[2]);
  const R c = dot(a[0], rotate(rel, a[2])) - D;
  const R r2 = A * A + B * B - c * c;
  const R phi = atan2(B, A);
  const R psi = atan2(r2 > R(0) ? sqrt(r2) : R(0), c);
  const R t1 = wrapped(phi + psi), t2 = wrapped(phi - psi);
  theta[1] = (t1 < R(0) ? -t1 : t1) <= (t2 < R(0) ? -t2 : t2) ? t1 : t2;
  const Quat<R> q2 = hinge_rotation(a[1], theta[1]);
  theta[0] = angle_about(a[0], rotate(q2, a[2]), rotate(rel, a[2]));
  theta[2] = twist_angle(conjugate(hinge_rotation(a[0], theta[0]) * q2) * rel, a[2]);
}

// the rotation of the first n hinges at angles theta, R(a1, theta1) ... R(an, thetan)
template <class R>
PHX_HD Quat<R> xpbd_composite_rotation(const XpbdComposite<R>& C, const R* theta, int n) {
  Quat<R> q;
  for (int i = 0; i < n; ++i) q = q * xpbd_impl::hinge_rotation(C.axis[i], theta[i]);
  return q;
}

// where the point p of the body lies in the joint frame at angles theta: each of the first n
// hinges (all by default), last first, turns it about its anchor
template <class R>
PHX_HD Vec3<R> xpbd_composite_point(const XpbdComposite<R>& C, const R* theta, const Vec3<R>& p,
                                    int n = -1) {
  Vec3<R> y = p;
  for (int i = (n < 0 ? C.k : n) - 1; i >= 0; --i)
    y = C.anchor[i] +
        xpbd_impl::rotate(xpbd_impl::hinge_rotation(C.axis[i], theta[i]), y - C.anchor[i]);
  return y;
}

// The torque (joint frame) that does the work of the hinges' generalized forces f at angles
// theta: with the hinges' axes u_i = R(a1, theta1) ... R(a_{i-1}, theta_{i-1}) a_i, the body's
// angular velocity is sum u_i dtheta_i, so a torque t does the work f . dtheta when u_i . t = f_i:
// t = U (U^T U)^-1 f over the axes' span (what is across it the joint holds).
template <class R>
PHX_HD Vec3<R> xpbd_composite_torque(const XpbdComposite<R>& C, const R* theta, const R* f) {
  Vec3<R> u[3];
  for (int i = 0; i < C.k; ++i)
    u[i] = xpbd_impl::rotate(xpbd_composite_rotation(C, theta, i), C.axis[i]);
  // G = U^T U (k x k), solved by Cramer's rule
  R G[3][3], y[3];
  for (int i = 0; i < C.k; ++i)
    for (int j = 0; j < C.k; ++j) G[i][j] = dot(u[i], u[j]);
  if (C.k == 1) {
    y[0] = f[0] / G[0][0];
  } else if (C.k == 2) {
    const R det = G[0][0] * G[1][1] - G[0][1] * G[1][0];
    y[0] = (G[1][1] * f[0] - G[0][1] * f[1]) / det;
    y[1] = (G[0][0] * f[1] - G[1][0] * f[0]) / det;
  } else {
    // the axes are independent: t = U^-T f, t . u_i = f_i, by the reciprocal basis
    const Vec3<R> w0 = cross(u[1], u[2]), w1 = cross(u[2], u[0]), w2 = cross(u[0], u[1]);
    const R det = dot(u[0], w0);
    return (f[0] / det) * w0 + (f[1] / det) * w1 + (f[2] / det) * w2;
  }
  Vec3<R> t;
  for (int i = 0; i < C.k; ++i) t += y[i] * u[i];
  return t;
}

// The hinges' rates (rate, k of them) of the body's angular velocity omega relative to the
// joint frame (in it), at angles theta: omega = sum u_i rate_i over the axes' span,
// rate = (U^T U)^-1 U^T omega (xpbd_composite_torque's transpose)
template <class R>
PHX_HD void xpbd_composite_rates(const XpbdComposite<R>& C, const R* theta, const Vec3<R>& omega,
                                 R* rate) {
  Vec3<R> u[3];
  for (int i = 0; i < C.k; ++i)
    u[i] = xpbd_impl::rotate(xpbd_composite_rotation(C, theta, i), C.axis[i]);
  if (C.k == 1) {
    rate[0] = dot(u[0], omega) / dot(u[0], u[0]);
  } else if (C.k == 2) {
    const R g00 = dot(u[0], u[0]), g01 = dot(u[0], u[1]), g11 = dot(u[1], u[1]);
    const R b0 = dot(u[0], omega), b1 = dot(u[1], omega), det = g00 * g11 - g01 * g01;
    rate[0] = (g11 * b0 - g01 * b1) / det;
    rate[1] = (g00 * b1 - g01 * b0) / det;
  } else {  // the reciprocal basis: w_i . u_j = det delta_ij
    const Vec3<R> w[3] = {cross(u[1], u[2]), cross(u[2], u[0]), cross(u[0], u[1])};
    const R det = dot(u[0], w[0]);
    for (int i = 0; i < 3; ++i) rate[i] = dot(w[i], omega) / det;
  }
}

}  // namespace phx
