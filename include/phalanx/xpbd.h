// XPBD rigid bodies, the per-body and per-constraint core: one substep's prediction and velocity
// update, and the projections of positional, angular and joint constraints, each function f
// followed by adj_f. References: Müller, Macklin, Chentanez, Jeschke, Kim, "Detailed Rigid Body
// Simulation with Extended Position Based Dynamics", SCA 2020 ("Müller" below), and Liu et al.,
// "Parameter Identification and Motion Control for Articulated Rigid Body Robots Using
// Differentiable Position-based Dynamics" ("Liu" below).
//
// A body in maximal coordinates:
//   x            centre of mass, world (m)                                  XpbdBody::x
//   q            orientation, world from the body's principal inertia frame XpbdBody::q
//                (unit quaternion w, x, y, z as math/quat.h)
//   inv_mass     1 / m (1/kg); 0 for a static (world) body                  XpbdBody::inv_mass
//   inv_inertia  1 / (principal moments), principal frame (1/(kg m^2));     XpbdBody::inv_inertia
//                zeros for a static body
//   v            linear velocity of the centre of mass, world (m/s)         passed beside it
//   omega        angular velocity, world (rad/s)                            passed beside it
// Local points and axes of a body are in its principal frame, relative to its centre of mass.
// The world inverse inertia is R diag(inv_inertia) R^T, R = to_mat(q).
//
// Sign convention, one for every projection. A constraint's correction vector dx points from
// what body 1 has to what body 2 has: dx = p2 - p1 for two points, and for orientations the
// world rotation vector that turns body 1 onto body 2. With c = |dx|, n = dx / c, lever arms r_i
// (world, centre of mass to the point), generalized inverse masses w_i and alpha~ = alpha / h^2:
//   dlambda = (-c - alpha~ lambda) / (w1 + w2 + alpha~),   lambda += dlambda,   p = dlambda n
//   x1 -= inv_m1 p,   dphi1 = -I1^-1 (r1 x p);   x2 += inv_m2 p,   dphi2 = +I2^-1 (r2 x p)
// so that a stretched constraint has dlambda < 0 and each body moves toward the other. Müller's
// eqs. 2-9 (sec. 3.3.1) give body 1 +p and body 2 -p: the same updates with his dx = ours
// negated (p1 - p2), and the same lambda. Liu's eqs. 9 and 16 print the rotational updates with
// the wrong sign; with alpha = 0 the form here is their corrected version, lambda = -c / w,
// dphi1 = -I1^-1 (r1 x n) lambda, dphi2 = +I2^-1 (r2 x n) lambda (positional), and
// dphi1 = -I1^-1 n lambda, dphi2 = +I2^-1 n lambda (angular).
//
// Adjoints. Every forward projection updates its bodies and lambda in place; adj_f takes the
// forward's inputs (the values before the update), accumulates (+=) into the adjoints of all of
// them and reads the adjoints of the outputs last (by value). Each output body carries its mass
// and inertia through unchanged, so its adjoint's inv_mass and inv_inertia flow back too. Branches
// (a static body, a zero correction, an inactive limit or slack cable, a quaternion sign) are
// differentiated as the forward took them; what happens on each boundary is stated there.
#pragma once

#include "phalanx/collision/primitives.h"  // collision_impl::adj_normalize
#include "phalanx/math/quat.h"

namespace phx {

template <class T>
struct XpbdBody {
  Vec3<T> x;            // centre of mass, world (m)
  Quat<T> q;            // world from principal frame, unit
  T inv_mass = T(0);    // 1/kg; 0: static
  Vec3<T> inv_inertia;  // inverse principal moments (1/(kg m^2)); zeros: static

  // every field zero: the start of an adjoint accumulator (q's default is the identity)
  PHX_HD static XpbdBody zero() { return {Vec3<T>{}, Quat<T>::zero(), T(0), Vec3<T>{}}; }
};

namespace xpbd_impl {

// component-wise product
template <class T>
PHX_HD PHX_INLINE Vec3<T> cmul(const Vec3<T>& a, const Vec3<T>& b) {
  return {a.x * b.x, a.y * b.y, a.z * b.z};
}

template <class T>
PHX_HD PHX_INLINE void add_to(XpbdBody<T>& a, const XpbdBody<T>& b) {
  a.x += b.x;
  phx::add_to(a.q, b.q);
  a.inv_mass += b.inv_mass;
  a.inv_inertia += b.inv_inertia;
}

// y = R(q) r, a local vector to world, and its adjoint
template <class T>
PHX_HD PHX_INLINE Vec3<T> rotate(const Quat<T>& q, const Vec3<T>& r) {
  return to_mat(q) * r;
}
template <class T>
PHX_HD PHX_INLINE void adj_rotate(const Quat<T>& q, const Vec3<T>& r, Quat<T>& adj_q,
                                  Vec3<T>& adj_r, const Vec3<T>& adj_y) {
  Mat3<T> adj_R;
  adj_mul(to_mat(q), r, adj_R, adj_r, adj_y);
  adj_to_mat(q, adj_q, adj_R);
}

}  // namespace xpbd_impl

// ---- rotation and inverse inertia ---------------------------------------------------------

// q turned by the world rotation vector phi to first order, then normalised:
// normalize(q + 1/2 [0, phi] q) (the quaternion update of Müller sec. 3.3.1; Alg. 2 with phi = h
// omega). The result is exactly a rotation by 2 atan(|phi| / 2) about phi.
template <class T>
PHX_HD PHX_INLINE Quat<T> xpbd_rotate(const Quat<T>& q, const Vec3<T>& phi) {
  Quat<T> p = Quat<T>{T(0), phi.x, phi.y, phi.z} * q;
  return normalize(
      Quat<T>{q.w + T(0.5) * p.w, q.x + T(0.5) * p.x, q.y + T(0.5) * p.y, q.z + T(0.5) * p.z});
}
template <class T>
PHX_HD PHX_INLINE void adj_xpbd_rotate(const Quat<T>& q, const Vec3<T>& phi, Quat<T>& adj_q,
                                       Vec3<T>& adj_phi, const Quat<T>& adj_r) {
  Quat<T> P{T(0), phi.x, phi.y, phi.z};
  Quat<T> p = P * q;
  Quat<T> qt{q.w + T(0.5) * p.w, q.x + T(0.5) * p.x, q.y + T(0.5) * p.y, q.z + T(0.5) * p.z};
  Quat<T> adj_qt = Quat<T>::zero();
  adj_normalize(qt, adj_qt, adj_r);
  add_to(adj_q, adj_qt);
  Quat<T> adj_P = Quat<T>::zero();
  adj_mul(P, q, adj_P, adj_q,
          Quat<T>{T(0.5) * adj_qt.w, T(0.5) * adj_qt.x, T(0.5) * adj_qt.y, T(0.5) * adj_qt.z});
  adj_phi += Vec3<T>{adj_P.x, adj_P.y, adj_P.z};
}

// I_world^-1 u = R diag(inv_inertia) R^T u, R = to_mat(q)
template <class T>
PHX_HD PHX_INLINE Vec3<T> xpbd_inv_inertia_world(const Quat<T>& q, const Vec3<T>& inv_inertia,
                                                 const Vec3<T>& u) {
  Mat3<T> R = to_mat(q);
  return R * xpbd_impl::cmul(inv_inertia, mul_transpose(R, u));
}
template <class T>
PHX_HD PHX_INLINE void adj_xpbd_inv_inertia_world(const Quat<T>& q, const Vec3<T>& inv_inertia,
                                                  const Vec3<T>& u, Quat<T>& adj_q,
                                                  Vec3<T>& adj_inv_inertia, Vec3<T>& adj_u,
                                                  const Vec3<T>& adj_k) {
  Mat3<T> R = to_mat(q), adj_R;
  Vec3<T> ub = mul_transpose(R, u);  // u in the principal frame
  Vec3<T> adj_s;
  adj_mul(R, xpbd_impl::cmul(inv_inertia, ub), adj_R, adj_s, adj_k);
  adj_inv_inertia += xpbd_impl::cmul(ub, adj_s);
  adj_mul_transpose(R, u, adj_R, adj_u, xpbd_impl::cmul(inv_inertia, adj_s));
  adj_to_mat(q, adj_q, adj_R);
}

// ---- generalized inverse masses (Müller sec. 3.3.1 eqs. 2-3, sec. 3.3.2) --------------------

// w = inv_mass + (r x n)^T I_world^-1 (r x n): the inverse of the mass a unit impulse along n at
// the world lever arm r meets
template <class T>
PHX_HD PHX_INLINE T xpbd_generalized_inverse_mass(const XpbdBody<T>& b, const Vec3<T>& r,
                                                  const Vec3<T>& n) {
  Vec3<T> u = cross(r, n);
  return b.inv_mass + dot(u, xpbd_inv_inertia_world(b.q, b.inv_inertia, u));
}
template <class T>
PHX_HD PHX_INLINE void adj_xpbd_generalized_inverse_mass(const XpbdBody<T>& b, const Vec3<T>& r,
                                                         const Vec3<T>& n, XpbdBody<T>& adj_b,
                                                         Vec3<T>& adj_r, Vec3<T>& adj_n, T adj_w) {
  Vec3<T> u = cross(r, n);
  Vec3<T> k = xpbd_inv_inertia_world(b.q, b.inv_inertia, u);
  adj_b.inv_mass += adj_w;
  Vec3<T> adj_u = adj_w * k;
  adj_xpbd_inv_inertia_world(b.q, b.inv_inertia, u, adj_b.q, adj_b.inv_inertia, adj_u, adj_w * u);
  adj_cross(r, n, adj_r, adj_n, adj_u);
}

// w = n^T I_world^-1 n, the pure rotation form
template <class T>
PHX_HD PHX_INLINE T xpbd_generalized_inverse_mass_angular(const XpbdBody<T>& b, const Vec3<T>& n) {
  return dot(n, xpbd_inv_inertia_world(b.q, b.inv_inertia, n));
}
template <class T>
PHX_HD PHX_INLINE void adj_xpbd_generalized_inverse_mass_angular(const XpbdBody<T>& b,
                                                                 const Vec3<T>& n,
                                                                 XpbdBody<T>& adj_b, Vec3<T>& adj_n,
                                                                 T adj_w) {
  adj_n += adj_w * xpbd_inv_inertia_world(b.q, b.inv_inertia, n);
  adj_xpbd_inv_inertia_world(b.q, b.inv_inertia, n, adj_b.q, adj_b.inv_inertia, adj_n, adj_w * n);
}

// ---- substep prediction and velocities (Müller Alg. 2) --------------------------------------

// One substep's unconstrained update, semi-implicit Euler, in place (Müller Alg. 2):
//   v     += h (inv_mass f + g)
//   omega += h R I^-1 (R^T tau - w x (I w)),  w = R^T omega   (body frame, Euler's equations)
//   x     += h v,   q = normalize(q + h/2 [0, omega] q)  (with the new v and omega)
// f is the force at the centre of mass and tau the torque (world, N and N m), g the gravity
// acceleration (world, m/s^2). Liu's Alg. 1 line 10 prints + w x (I w); the gyroscopic torque
// enters with a minus. An axis with zero inverse moment has no angular acceleration and no
// gyroscopic contribution (a particle does not spin up). A static body (inv_mass 0) is returned
// unchanged; its adjoint is the identity, so the derivative with respect to inv_mass at 0 is
// that of the static branch (zero).
template <class T>
PHX_HD void xpbd_predict(XpbdBody<T>& b, Vec3<T>& v, Vec3<T>& omega, const Vec3<T>& f,
                         const Vec3<T>& tau, const Vec3<T>& g, T h) {
  if (!(b.inv_mass > T(0))) return;
  v += h * (b.inv_mass * f + g);
  Mat3<T> R = to_mat(b.q);
  Vec3<T> wb = mul_transpose(R, omega);
  Vec3<T> Lb;  // angular momentum, principal frame
  for (int i = 0; i < 3; ++i) Lb[i] = b.inv_inertia[i] > T(0) ? wb[i] / b.inv_inertia[i] : T(0);
  Vec3<T> e = mul_transpose(R, tau) - cross(wb, Lb);
  omega += h * (R * xpbd_impl::cmul(b.inv_inertia, e));
  b.x += h * v;
  b.q = xpbd_rotate(b.q, h * omega);
}
template <class T>
PHX_HD void adj_xpbd_predict(const XpbdBody<T>& b, const Vec3<T>& v, const Vec3<T>& omega,
                             const Vec3<T>& f, const Vec3<T>& tau, const Vec3<T>& g, T h,
                             XpbdBody<T>& adj_b, Vec3<T>& adj_v, Vec3<T>& adj_omega, Vec3<T>& adj_f,
                             Vec3<T>& adj_tau, Vec3<T>& adj_g, T& adj_h, XpbdBody<T> adj_b_out,
                             Vec3<T> adj_v_out, Vec3<T> adj_omega_out) {
  if (!(b.inv_mass > T(0))) {
    xpbd_impl::add_to(adj_b, adj_b_out);
    adj_v += adj_v_out;
    adj_omega += adj_omega_out;
    return;
  }
  // the forward's intermediates
  Vec3<T> acc = b.inv_mass * f + g;
  Vec3<T> v1 = v + h * acc;
  Mat3<T> R = to_mat(b.q);
  Vec3<T> wb = mul_transpose(R, omega);
  Vec3<T> Lb;
  for (int i = 0; i < 3; ++i) Lb[i] = b.inv_inertia[i] > T(0) ? wb[i] / b.inv_inertia[i] : T(0);
  Vec3<T> e = mul_transpose(R, tau) - cross(wb, Lb);
  Vec3<T> ab = xpbd_impl::cmul(b.inv_inertia, e);
  Vec3<T> dw = R * ab;
  Vec3<T> w1 = omega + h * dw;

  // q' = rotate(q, h w1), x' = x + h v1
  Vec3<T> adj_phi;
  adj_xpbd_rotate(b.q, h * w1, adj_b.q, adj_phi, adj_b_out.q);
  Vec3<T> adj_w1 = adj_omega_out + h * adj_phi;
  adj_h += dot(w1, adj_phi) + dot(v1, adj_b_out.x);
  adj_b.x += adj_b_out.x;
  Vec3<T> adj_v1 = adj_v_out + h * adj_b_out.x;
  // w1 = omega + h R ab
  adj_omega += adj_w1;
  adj_h += dot(dw, adj_w1);
  Mat3<T> adj_R;
  Vec3<T> adj_ab;
  adj_mul(R, ab, adj_R, adj_ab, h * adj_w1);
  // ab = inv_inertia * e, e = R^T tau - wb x Lb, Lb = wb / inv_inertia
  adj_b.inv_inertia += xpbd_impl::cmul(e, adj_ab) + adj_b_out.inv_inertia;
  Vec3<T> adj_e = xpbd_impl::cmul(b.inv_inertia, adj_ab);
  Vec3<T> adj_wb, adj_Lb;
  adj_cross(wb, Lb, adj_wb, adj_Lb, -adj_e);
  for (int i = 0; i < 3; ++i) {
    if (!(b.inv_inertia[i] > T(0))) continue;
    adj_wb[i] += adj_Lb[i] / b.inv_inertia[i];
    adj_b.inv_inertia[i] -= Lb[i] * adj_Lb[i] / b.inv_inertia[i];
  }
  adj_mul_transpose(R, omega, adj_R, adj_omega, adj_wb);
  adj_mul_transpose(R, tau, adj_R, adj_tau, adj_e);
  adj_to_mat(b.q, adj_b.q, adj_R);
  // v1 = v + h (inv_mass f + g)
  adj_v += adj_v1;
  adj_h += dot(acc, adj_v1);
  adj_b.inv_mass += h * dot(f, adj_v1) + adj_b_out.inv_mass;
  adj_f += (h * b.inv_mass) * adj_v1;
  adj_g += h * adj_v1;
}

// Velocities after the projections (Müller Alg. 2): v = (x - x_prev) / h, dq = q conj(q_prev),
// omega = 2 dq.xyz / h, negated when dq.w < 0 (the shorter way round). This is first order:
// after a free predict step it returns omega / sqrt(1 + h^2 |omega|^2 / 4), not omega itself.
// At dq.w = 0 (a half turn in one substep) the positive branch is taken.
template <class T>
PHX_HD PHX_INLINE void xpbd_velocities(const Vec3<T>& x, const Quat<T>& q, const Vec3<T>& x_prev,
                                       const Quat<T>& q_prev, T h, Vec3<T>& v, Vec3<T>& omega) {
  v = (T(1) / h) * (x - x_prev);
  Quat<T> dq = q * conjugate(q_prev);
  omega = ((dq.w < T(0) ? T(-2) : T(2)) / h) * Vec3<T>{dq.x, dq.y, dq.z};
}
template <class T>
PHX_HD PHX_INLINE void adj_xpbd_velocities(const Vec3<T>& x, const Quat<T>& q,
                                           const Vec3<T>& x_prev, const Quat<T>& q_prev, T h,
                                           Vec3<T>& adj_x, Quat<T>& adj_q, Vec3<T>& adj_x_prev,
                                           Quat<T>& adj_q_prev, T& adj_h, const Vec3<T>& adj_v,
                                           const Vec3<T>& adj_omega) {
  Vec3<T> v, omega;
  xpbd_velocities(x, q, x_prev, q_prev, h, v, omega);
  adj_x += (T(1) / h) * adj_v;
  adj_x_prev -= (T(1) / h) * adj_v;
  adj_h -= (dot(v, adj_v) + dot(omega, adj_omega)) / h;
  Quat<T> qp = conjugate(q_prev);
  T s = ((q * qp).w < T(0) ? T(-2) : T(2)) / h;
  Quat<T> adj_qp = Quat<T>::zero();
  adj_mul(q, qp, adj_q, adj_qp, Quat<T>{T(0), s * adj_omega.x, s * adj_omega.y, s * adj_omega.z});
  add_to(adj_q_prev, conjugate(adj_qp));
}

// ---- the projection (Müller sec. 3.3.1 eqs. 2-9, sec. 3.3.2) --------------------------------

namespace xpbd_impl {

// the adjoint of what a projection carries through or adds to: positions, masses, inertias and
// the multiplier (scalar or per axis); the orientations are the caller's
template <class T, class L>
PHX_HD PHX_INLINE void carry(XpbdBody<T>& adj_b1, XpbdBody<T>& adj_b2, L& adj_lambda,
                             const XpbdBody<T>& adj_b1_out, const XpbdBody<T>& adj_b2_out,
                             const L& adj_lambda_out) {
  adj_b1.x += adj_b1_out.x;
  adj_b2.x += adj_b2_out.x;
  adj_b1.inv_mass += adj_b1_out.inv_mass;
  adj_b2.inv_mass += adj_b2_out.inv_mass;
  adj_b1.inv_inertia += adj_b1_out.inv_inertia;
  adj_b2.inv_inertia += adj_b2_out.inv_inertia;
  adj_lambda += adj_lambda_out;
}

// The step shared by the positional and angular projections, given the direction n, the error
// c > 0 and each body's rotation direction u_i (r_i x n for a point, n for an orientation);
// linear: whether the centres move (positional). Returns dlambda; no update when no body can
// move and alpha = 0 (w1 + w2 + alpha~ = 0).
template <class T>
PHX_HD T project(XpbdBody<T>& b1, XpbdBody<T>& b2, const Vec3<T>& u1, const Vec3<T>& u2,
                 const Vec3<T>& n, T c, bool linear, T alpha, T h, T& lambda) {
  // generalized inverse masses (eqs. 2-3; sec. 3.3.2 without the mass term)
  Vec3<T> k1 = xpbd_inv_inertia_world(b1.q, b1.inv_inertia, u1);
  Vec3<T> k2 = xpbd_inv_inertia_world(b2.q, b2.inv_inertia, u2);
  T at = alpha / (h * h);
  T wsum = (linear ? b1.inv_mass + b2.inv_mass : T(0)) + dot(u1, k1) + dot(u2, k2) + at;
  if (!(wsum > T(0))) return T(0);
  // multiplier step (eqs. 4-5)
  T dl = (-c - at * lambda) / wsum;
  lambda += dl;
  // impulse p = dl n: body 1 takes -p, body 2 +p (eqs. 6-9 with our sign, see the top)
  if (linear) {
    b1.x -= (b1.inv_mass * dl) * n;
    b2.x += (b2.inv_mass * dl) * n;
  }
  b1.q = xpbd_rotate(b1.q, -dl * k1);
  b2.q = xpbd_rotate(b2.q, dl * k2);
  return dl;
}
template <class T>
PHX_HD void adj_project(const XpbdBody<T>& b1, const XpbdBody<T>& b2, const Vec3<T>& u1,
                        const Vec3<T>& u2, const Vec3<T>& n, T c, bool linear, T alpha, T h,
                        T lambda, XpbdBody<T>& adj_b1, XpbdBody<T>& adj_b2, Vec3<T>& adj_u1,
                        Vec3<T>& adj_u2, Vec3<T>& adj_n, T& adj_c, T& adj_alpha, T& adj_h,
                        T& adj_lambda, const XpbdBody<T>& adj_b1_out, const XpbdBody<T>& adj_b2_out,
                        T adj_lambda_out) {
  // what passes through: positions (plus their updates), masses, inertias, lambda
  carry(adj_b1, adj_b2, adj_lambda, adj_b1_out, adj_b2_out, adj_lambda_out);
  Vec3<T> k1 = xpbd_inv_inertia_world(b1.q, b1.inv_inertia, u1);
  Vec3<T> k2 = xpbd_inv_inertia_world(b2.q, b2.inv_inertia, u2);
  T at = alpha / (h * h);
  T wsum = (linear ? b1.inv_mass + b2.inv_mass : T(0)) + dot(u1, k1) + dot(u2, k2) + at;
  if (!(wsum > T(0))) {
    add_to(adj_b1.q, adj_b1_out.q);
    add_to(adj_b2.q, adj_b2_out.q);
    return;
  }
  T dl = (-c - at * lambda) / wsum;

  // rotations dphi1 = -dl k1, dphi2 = dl k2
  Vec3<T> adj_phi1, adj_phi2;
  adj_xpbd_rotate(b1.q, -dl * k1, adj_b1.q, adj_phi1, adj_b1_out.q);
  adj_xpbd_rotate(b2.q, dl * k2, adj_b2.q, adj_phi2, adj_b2_out.q);
  T adj_dl = adj_lambda_out - dot(k1, adj_phi1) + dot(k2, adj_phi2);
  Vec3<T> adj_k1 = -dl * adj_phi1, adj_k2 = dl * adj_phi2;
  // translations x1 -= inv_m1 dl n, x2 += inv_m2 dl n
  if (linear) {
    T g1 = dot(n, adj_b1_out.x), g2 = dot(n, adj_b2_out.x);
    adj_b1.inv_mass -= dl * g1;
    adj_b2.inv_mass += dl * g2;
    adj_dl += b2.inv_mass * g2 - b1.inv_mass * g1;
    adj_n += (b2.inv_mass * dl) * adj_b2_out.x - (b1.inv_mass * dl) * adj_b1_out.x;
  }
  // dl = (-c - at lambda) / wsum, at = alpha / h^2
  adj_c -= adj_dl / wsum;
  adj_lambda -= at * adj_dl / wsum;
  T adj_wsum = -dl * adj_dl / wsum;
  T adj_at = adj_wsum - lambda * adj_dl / wsum;
  adj_alpha += adj_at / (h * h);
  adj_h -= T(2) * at * adj_at / h;
  // wsum = [linear] (inv_m1 + inv_m2) + u1 . k1 + u2 . k2, k_i = I_i^-1 u_i
  if (linear) {
    adj_b1.inv_mass += adj_wsum;
    adj_b2.inv_mass += adj_wsum;
  }
  adj_u1 += adj_wsum * k1;
  adj_u2 += adj_wsum * k2;
  adj_xpbd_inv_inertia_world(b1.q, b1.inv_inertia, u1, adj_b1.q, adj_b1.inv_inertia, adj_u1,
                             adj_k1 + adj_wsum * u1);
  adj_xpbd_inv_inertia_world(b2.q, b2.inv_inertia, u2, adj_b2.q, adj_b2.inv_inertia, adj_u2,
                             adj_k2 + adj_wsum * u2);
}

// the adjoint of a projection that did nothing
template <class T>
PHX_HD PHX_INLINE void adj_pass(XpbdBody<T>& adj_b1, XpbdBody<T>& adj_b2, T& adj_lambda,
                                const XpbdBody<T>& adj_b1_out, const XpbdBody<T>& adj_b2_out,
                                T adj_lambda_out) {
  add_to(adj_b1, adj_b1_out);
  add_to(adj_b2, adj_b2_out);
  adj_lambda += adj_lambda_out;
}

}  // namespace xpbd_impl

// Positional projection (Müller sec. 3.3.1, eqs. 2-9): the correction dx (world) applied at the
// world lever arms r1, r2 (centre of mass to the point), compliance alpha (m/N), substep h (s),
// lambda the constraint's multiplier accumulated over the substep's iterations (in/out).
// Returns dlambda. dx = 0 (already satisfied) changes nothing, and its adjoint is the identity:
// the direction n is undefined there, and the update is continuous through it with alpha = 0.
template <class T>
PHX_HD T xpbd_positional(XpbdBody<T>& b1, XpbdBody<T>& b2, const Vec3<T>& r1, const Vec3<T>& r2,
                         const Vec3<T>& dx, T alpha, T h, T& lambda) {
  T c = norm(dx);
  if (!(c > T(0))) return T(0);
  Vec3<T> n = (T(1) / c) * dx;
  return xpbd_impl::project(b1, b2, cross(r1, n), cross(r2, n), n, c, true, alpha, h, lambda);
}
template <class T>
PHX_HD void adj_xpbd_positional(const XpbdBody<T>& b1, const XpbdBody<T>& b2, const Vec3<T>& r1,
                                const Vec3<T>& r2, const Vec3<T>& dx, T alpha, T h, T lambda,
                                XpbdBody<T>& adj_b1, XpbdBody<T>& adj_b2, Vec3<T>& adj_r1,
                                Vec3<T>& adj_r2, Vec3<T>& adj_dx, T& adj_alpha, T& adj_h,
                                T& adj_lambda, XpbdBody<T> adj_b1_out, XpbdBody<T> adj_b2_out,
                                T adj_lambda_out) {
  T c = norm(dx);
  if (!(c > T(0))) {
    xpbd_impl::adj_pass(adj_b1, adj_b2, adj_lambda, adj_b1_out, adj_b2_out, adj_lambda_out);
    return;
  }
  Vec3<T> n = (T(1) / c) * dx;
  Vec3<T> adj_u1, adj_u2, adj_n;
  T adj_c = T(0);
  xpbd_impl::adj_project(b1, b2, cross(r1, n), cross(r2, n), n, c, true, alpha, h, lambda, adj_b1,
                         adj_b2, adj_u1, adj_u2, adj_n, adj_c, adj_alpha, adj_h, adj_lambda,
                         adj_b1_out, adj_b2_out, adj_lambda_out);
  adj_cross(r1, n, adj_r1, adj_n, adj_u1);
  adj_cross(r2, n, adj_r2, adj_n, adj_u2);
  collision_impl::adj_normalize(n, c, adj_dx, adj_n);
  adj_dx += adj_c * n;
}

// Angular projection (Müller sec. 3.3.2): the world rotation vector dphi that turns body 1 onto
// body 2, w_i = n^T I_i^-1 n, compliance alpha (rad/(N m)); otherwise as xpbd_positional.
template <class T>
PHX_HD T xpbd_angular(XpbdBody<T>& b1, XpbdBody<T>& b2, const Vec3<T>& dphi, T alpha, T h,
                      T& lambda) {
  T c = norm(dphi);
  if (!(c > T(0))) return T(0);
  Vec3<T> n = (T(1) / c) * dphi;
  return xpbd_impl::project(b1, b2, n, n, n, c, false, alpha, h, lambda);
}
template <class T>
PHX_HD void adj_xpbd_angular(const XpbdBody<T>& b1, const XpbdBody<T>& b2, const Vec3<T>& dphi,
                             T alpha, T h, T lambda, XpbdBody<T>& adj_b1, XpbdBody<T>& adj_b2,
                             Vec3<T>& adj_dphi, T& adj_alpha, T& adj_h, T& adj_lambda,
                             XpbdBody<T> adj_b1_out, XpbdBody<T> adj_b2_out, T adj_lambda_out) {
  T c = norm(dphi);
  if (!(c > T(0))) {
    xpbd_impl::adj_pass(adj_b1, adj_b2, adj_lambda, adj_b1_out, adj_b2_out, adj_lambda_out);
    return;
  }
  Vec3<T> n = (T(1) / c) * dphi;
  Vec3<T> adj_n;
  T adj_c = T(0);
  xpbd_impl::adj_project(b1, b2, n, n, n, c, false, alpha, h, lambda, adj_b1, adj_b2, adj_n, adj_n,
                         adj_n, adj_c, adj_alpha, adj_h, adj_lambda, adj_b1_out, adj_b2_out,
                         adj_lambda_out);
  collision_impl::adj_normalize(n, c, adj_dphi, adj_n);
  adj_dphi += adj_c * n;
}

// ---- joints (Müller sec. 3.4) ---------------------------------------------------------------

// Attachment: body 1's local point r1 and body 2's local point r2 coincide (a ball joint, the
// positional part of a hinge): dx = (x2 + R2 r2) - (x1 + R1 r1), lever arms R_i r_i.
template <class T>
PHX_HD T xpbd_attach(XpbdBody<T>& b1, XpbdBody<T>& b2, const Vec3<T>& r1, const Vec3<T>& r2,
                     T alpha, T h, T& lambda) {
  Vec3<T> r1w = xpbd_impl::rotate(b1.q, r1), r2w = xpbd_impl::rotate(b2.q, r2);
  return xpbd_positional(b1, b2, r1w, r2w, (b2.x + r2w) - (b1.x + r1w), alpha, h, lambda);
}
template <class T>
PHX_HD void adj_xpbd_attach(const XpbdBody<T>& b1, const XpbdBody<T>& b2, const Vec3<T>& r1,
                            const Vec3<T>& r2, T alpha, T h, T lambda, XpbdBody<T>& adj_b1,
                            XpbdBody<T>& adj_b2, Vec3<T>& adj_r1, Vec3<T>& adj_r2, T& adj_alpha,
                            T& adj_h, T& adj_lambda, XpbdBody<T> adj_b1_out, XpbdBody<T> adj_b2_out,
                            T adj_lambda_out) {
  Vec3<T> r1w = xpbd_impl::rotate(b1.q, r1), r2w = xpbd_impl::rotate(b2.q, r2);
  Vec3<T> adj_r1w, adj_r2w, adj_dx;
  adj_xpbd_positional(b1, b2, r1w, r2w, (b2.x + r2w) - (b1.x + r1w), alpha, h, lambda, adj_b1,
                      adj_b2, adj_r1w, adj_r2w, adj_dx, adj_alpha, adj_h, adj_lambda, adj_b1_out,
                      adj_b2_out, adj_lambda_out);
  adj_b2.x += adj_dx;
  adj_b1.x -= adj_dx;
  xpbd_impl::adj_rotate(b1.q, r1, adj_b1.q, adj_r1, adj_r1w - adj_dx);
  xpbd_impl::adj_rotate(b2.q, r2, adj_b2.q, adj_r2, adj_r2w + adj_dx);
}

// Attachment as one 3x3 solve: the block form of the projection for a point constraint, with a
// multiplier per world axis. The point pair's mismatch c = (x2 + R2 r2) - (x1 + R1 r1) responds
// to an impulse p (body 2 +p, body 1 -p, as above) by K p, with
//   K = (inv_m1 + inv_m2) 1 - [r1]x I1^-1 [r1]x - [r2]x I2^-1 [r2]x   (world lever arms r_i),
// so dlambda = -(K + alpha~ 1)^-1 (c + alpha~ lambda) closes c to first order in one pass, where
// the scalar projection along c / |c| (xpbd_attach) leaves the part across c to later passes:
// with anisotropic inertia those converge slowly (a thin rod's pendulum keeps 3 % of its
// acceleration's error after 20 passes). Returns dlambda; no update when K + alpha~ 1 is
// singular (both bodies static and alpha = 0).
namespace xpbd_impl {

// the matrix whose column j is column(e_j), for a linear map given as a function
template <class T, class F>
PHX_HD PHX_INLINE Mat3<T> by_columns(const F& column) {
  Mat3<T> A;
  for (int j = 0; j < 3; ++j) {
    Vec3<T> e;
    e[j] = T(1);
    Vec3<T> c = column(e);
    for (int i = 0; i < 3; ++i) A.m[3 * i + j] = c[i];
  }
  return A;
}

// the turns of a block projection: body 1 by -I1^-1 u1, body 2 by +I2^-1 u2 (world), and the
// adjoint (orientations and inverse inertias of the bodies, u1 and u2)
template <class T>
PHX_HD PHX_INLINE void turn(XpbdBody<T>& b1, XpbdBody<T>& b2, const Vec3<T>& u1,
                            const Vec3<T>& u2) {
  Vec3<T> k1 = xpbd_inv_inertia_world(b1.q, b1.inv_inertia, u1);
  Vec3<T> k2 = xpbd_inv_inertia_world(b2.q, b2.inv_inertia, u2);
  b1.q = xpbd_rotate(b1.q, -k1);
  b2.q = xpbd_rotate(b2.q, k2);
}
template <class T>
PHX_HD PHX_INLINE void adj_turn(const XpbdBody<T>& b1, const XpbdBody<T>& b2, const Vec3<T>& u1,
                                const Vec3<T>& u2, XpbdBody<T>& adj_b1, XpbdBody<T>& adj_b2,
                                Vec3<T>& adj_u1, Vec3<T>& adj_u2, const Quat<T>& adj_q1_out,
                                const Quat<T>& adj_q2_out) {
  Vec3<T> k1 = xpbd_inv_inertia_world(b1.q, b1.inv_inertia, u1);
  Vec3<T> k2 = xpbd_inv_inertia_world(b2.q, b2.inv_inertia, u2);
  Vec3<T> adj_phi1, adj_phi2;
  adj_xpbd_rotate(b1.q, -k1, adj_b1.q, adj_phi1, adj_q1_out);
  adj_xpbd_rotate(b2.q, k2, adj_b2.q, adj_phi2, adj_q2_out);
  adj_xpbd_inv_inertia_world(b1.q, b1.inv_inertia, u1, adj_b1.q, adj_b1.inv_inertia, adj_u1,
                             -adj_phi1);
  adj_xpbd_inv_inertia_world(b2.q, b2.inv_inertia, u2, adj_b2.q, adj_b2.inv_inertia, adj_u2,
                             adj_phi2);
}

// K y for the block above (without alpha~): body i's term inv_m_i y - r_i x (I_i^-1 (r_i x y))
template <class T>
PHX_HD PHX_INLINE Vec3<T> point_response(const XpbdBody<T>& b, const Vec3<T>& r, const Vec3<T>& y) {
  return b.inv_mass * y - cross(r, xpbd_inv_inertia_world(b.q, b.inv_inertia, cross(r, y)));
}

// x = K^-1 b for a symmetric 3x3 K by its adjugate; false when det K <= 0 (K is positive
// semidefinite here, so that means singular)
template <class T>
PHX_HD PHX_INLINE bool solve3(const Mat3<T>& K, const Vec3<T>& b, Vec3<T>& x) {
  const T* k = K.m;
  T c00 = k[4] * k[8] - k[5] * k[7], c01 = k[5] * k[6] - k[3] * k[8],
    c02 = k[3] * k[7] - k[4] * k[6];
  T c11 = k[0] * k[8] - k[2] * k[6], c12 = k[2] * k[3] - k[0] * k[5],
    c22 = k[0] * k[4] - k[1] * k[3];
  T det = k[0] * c00 + k[1] * c01 + k[2] * c02;
  if (!(det > T(0))) return false;
  T inv = T(1) / det;
  x = Vec3<T>{inv * (c00 * b.x + c01 * b.y + c02 * b.z), inv * (c01 * b.x + c11 * b.y + c12 * b.z),
              inv * (c02 * b.x + c12 * b.y + c22 * b.z)};
  return true;
}

// K + alpha~ 1 for the lever arms r1, r2 (world), by its columns
template <class T>
PHX_HD PHX_INLINE Mat3<T> point_matrix(const XpbdBody<T>& b1, const XpbdBody<T>& b2,
                                       const Vec3<T>& r1, const Vec3<T>& r2, T at) {
  return by_columns<T>([&](const Vec3<T>& e) {
    return point_response(b1, r1, e) + point_response(b2, r2, e) + at * e;
  });
}

}  // namespace xpbd_impl

template <class T>
PHX_HD Vec3<T> xpbd_attach_block(XpbdBody<T>& b1, XpbdBody<T>& b2, const Vec3<T>& r1,
                                 const Vec3<T>& r2, T alpha, T h, Vec3<T>& lambda) {
  Vec3<T> r1w = xpbd_impl::rotate(b1.q, r1), r2w = xpbd_impl::rotate(b2.q, r2);
  Vec3<T> c = (b2.x + r2w) - (b1.x + r1w);
  T at = alpha / (h * h);
  Vec3<T> y;
  if (!xpbd_impl::solve3(xpbd_impl::point_matrix(b1, b2, r1w, r2w, at), c + at * lambda, y))
    return Vec3<T>{};
  Vec3<T> dl = -y;
  lambda += dl;
  xpbd_impl::turn(b1, b2, cross(r1w, dl), cross(r2w, dl));
  b1.x -= b1.inv_mass * dl;
  b2.x += b2.inv_mass * dl;
  return dl;
}
// The adjoint: through the update, then through the solve dl = -K^-1 b (g = K^-1 adj_dl:
// adj_b = -g, and K's entries contribute -g^T dK dl, i.e. minus the derivative of
// g^T K dl = s g . dl + sum_i (r_i x g)^T I_i^-1 (r_i x dl), s = inv_m1 + inv_m2 + alpha~, with
// g and dl held), then through c and the lever arms. A singular K passes the adjoints through.
template <class T>
PHX_HD void adj_xpbd_attach_block(const XpbdBody<T>& b1, const XpbdBody<T>& b2, const Vec3<T>& r1,
                                  const Vec3<T>& r2, T alpha, T h, const Vec3<T>& lambda,
                                  XpbdBody<T>& adj_b1, XpbdBody<T>& adj_b2, Vec3<T>& adj_r1,
                                  Vec3<T>& adj_r2, T& adj_alpha, T& adj_h, Vec3<T>& adj_lambda,
                                  XpbdBody<T> adj_b1_out, XpbdBody<T> adj_b2_out,
                                  Vec3<T> adj_lambda_out) {
  using xpbd_impl::rotate;
  Vec3<T> r1w = rotate(b1.q, r1), r2w = rotate(b2.q, r2);
  Vec3<T> c = (b2.x + r2w) - (b1.x + r1w);
  T at = alpha / (h * h);
  Mat3<T> K = xpbd_impl::point_matrix(b1, b2, r1w, r2w, at);
  Vec3<T> y;
  if (!xpbd_impl::solve3(K, c + at * lambda, y)) {
    xpbd_impl::add_to(adj_b1, adj_b1_out);
    xpbd_impl::add_to(adj_b2, adj_b2_out);
    adj_lambda += adj_lambda_out;
    return;
  }
  Vec3<T> dl = -y;
  Vec3<T> u1 = cross(r1w, dl), u2 = cross(r2w, dl);
  // what passes through: positions, masses, inertias, lambda
  xpbd_impl::carry(adj_b1, adj_b2, adj_lambda, adj_b1_out, adj_b2_out, adj_lambda_out);
  // x1 -= inv_m1 dl, x2 += inv_m2 dl; q1 turned by -k1, q2 by k2
  Vec3<T> adj_dl = adj_lambda_out - b1.inv_mass * adj_b1_out.x + b2.inv_mass * adj_b2_out.x;
  adj_b1.inv_mass -= dot(dl, adj_b1_out.x);
  adj_b2.inv_mass += dot(dl, adj_b2_out.x);
  Vec3<T> adj_u1, adj_u2, adj_r1w, adj_r2w;
  xpbd_impl::adj_turn(b1, b2, u1, u2, adj_b1, adj_b2, adj_u1, adj_u2, adj_b1_out.q, adj_b2_out.q);
  adj_cross(r1w, dl, adj_r1w, adj_dl, adj_u1);
  adj_cross(r2w, dl, adj_r2w, adj_dl, adj_u2);
  // dl = -K^-1 (c + at lambda)
  Vec3<T> g;
  xpbd_impl::solve3(K, adj_dl, g);
  Vec3<T> adj_c = -g;
  T adj_at = -dot(g, lambda) - dot(g, dl);
  adj_lambda -= at * g;
  adj_b1.inv_mass -= dot(g, dl);
  adj_b2.inv_mass -= dot(g, dl);
  // minus the derivative of (r_i x g)^T I_i^-1 (r_i x dl) in q_i, the inverse inertia and r_i
  const XpbdBody<T>* bodies[2] = {&b1, &b2};
  XpbdBody<T>* adjs[2] = {&adj_b1, &adj_b2};
  Vec3<T> rw[2] = {r1w, r2w};
  Vec3<T>* adj_rw[2] = {&adj_r1w, &adj_r2w};
  for (int i = 0; i < 2; ++i) {
    const XpbdBody<T>& b = *bodies[i];
    Vec3<T> a = cross(rw[i], g), u = cross(rw[i], dl), adj_a, adj_u, unused;
    adj_a = -xpbd_inv_inertia_world(b.q, b.inv_inertia, u);
    adj_xpbd_inv_inertia_world(b.q, b.inv_inertia, u, adjs[i]->q, adjs[i]->inv_inertia, adj_u, -a);
    adj_cross(rw[i], g, *adj_rw[i], unused, adj_a);
    adj_cross(rw[i], dl, *adj_rw[i], unused, adj_u);
  }
  // at = alpha / h^2
  adj_alpha += adj_at / (h * h);
  adj_h -= T(2) * at * adj_at / h;
  // c = (x2 + r2w) - (x1 + r1w), r_iw = R_i r_i
  adj_b2.x += adj_c;
  adj_b1.x -= adj_c;
  adj_r2w += adj_c;
  adj_r1w -= adj_c;
  xpbd_impl::adj_rotate(b1.q, r1, adj_b1.q, adj_r1, adj_r1w);
  xpbd_impl::adj_rotate(b2.q, r2, adj_b2.q, adj_r2, adj_r2w);
}

// Distance: the local points r1, r2 at distance rest (m), dx = (d - rest) d / |d| with
// d = p2 - p1; the compliance alpha = 1 / stiffness (m/N; 0: rigid). pull_only makes it a
// cable, active only while |d| > rest. Inactive (slack, or coincident points, where the direction
// is undefined): no update, and the adjoint is the identity.
template <class T>
PHX_HD T xpbd_distance(XpbdBody<T>& b1, XpbdBody<T>& b2, const Vec3<T>& r1, const Vec3<T>& r2,
                       T rest, bool pull_only, T alpha, T h, T& lambda) {
  Vec3<T> r1w = xpbd_impl::rotate(b1.q, r1), r2w = xpbd_impl::rotate(b2.q, r2);
  Vec3<T> d = (b2.x + r2w) - (b1.x + r1w);
  T len = norm(d);
  if (!(len > T(0)) || (pull_only && !(len > rest))) return T(0);
  return xpbd_positional(b1, b2, r1w, r2w, ((len - rest) / len) * d, alpha, h, lambda);
}
template <class T>
PHX_HD void adj_xpbd_distance(const XpbdBody<T>& b1, const XpbdBody<T>& b2, const Vec3<T>& r1,
                              const Vec3<T>& r2, T rest, bool pull_only, T alpha, T h, T lambda,
                              XpbdBody<T>& adj_b1, XpbdBody<T>& adj_b2, Vec3<T>& adj_r1,
                              Vec3<T>& adj_r2, T& adj_rest, T& adj_alpha, T& adj_h, T& adj_lambda,
                              XpbdBody<T> adj_b1_out, XpbdBody<T> adj_b2_out, T adj_lambda_out) {
  Vec3<T> r1w = xpbd_impl::rotate(b1.q, r1), r2w = xpbd_impl::rotate(b2.q, r2);
  Vec3<T> d = (b2.x + r2w) - (b1.x + r1w);
  T len = norm(d);
  if (!(len > T(0)) || (pull_only && !(len > rest))) {
    xpbd_impl::adj_pass(adj_b1, adj_b2, adj_lambda, adj_b1_out, adj_b2_out, adj_lambda_out);
    return;
  }
  T s = (len - rest) / len;
  Vec3<T> adj_r1w, adj_r2w, adj_dx;
  adj_xpbd_positional(b1, b2, r1w, r2w, s * d, alpha, h, lambda, adj_b1, adj_b2, adj_r1w, adj_r2w,
                      adj_dx, adj_alpha, adj_h, adj_lambda, adj_b1_out, adj_b2_out, adj_lambda_out);
  // dx = s d, s = 1 - rest / len, len = |d|
  T adj_s = dot(d, adj_dx);
  adj_rest -= adj_s / len;
  Vec3<T> adj_d = s * adj_dx + (adj_s * rest / (len * len * len)) * d;
  adj_b2.x += adj_d;
  adj_b1.x -= adj_d;
  xpbd_impl::adj_rotate(b1.q, r1, adj_b1.q, adj_r1, adj_r1w - adj_d);
  xpbd_impl::adj_rotate(b2.q, r2, adj_b2.q, adj_r2, adj_r2w + adj_d);
}

// ---- paths: a cable through several points ---------------------------------------------------

// Path length: a cable through the points of `path` in order (Path: size() >= 2 points, point i
// at the local point point(i) of body body[body(i)]; at most kXpbdPathPoints), of length
// L = sum_i |p_{i+1} - p_i|, kept within [lo, hi]: above hi it is projected back to hi, below lo
// to lo, else nothing. Rigid (compliance 0), one Newton step on L:
//   dlambda = -(L - bound) / w,   w = sum_b inv_m_b |G_b|^2 + A_b^T I_b^-1 A_b,
//   G_b = sum_{i on b} g_i,   A_b = sum_{i on b} r_i x g_i,   g_i = dL/dp_i = u_{i-1} - u_i,
// u_i the unit direction of segment i (zero for a segment of zero length) and r_i point i's world
// lever arm; body b moves by inv_m_b G_b dlambda and turns by I_b^-1 A_b dlambda (Müller's
// generalized inverse masses, eqs. 2-3, summed over every body the path moves). With two points
// on two bodies this is xpbd_distance's update. Linear momentum is kept (the g_i sum to zero).
// lambda is the multiplier of L - bound (dlambda < 0 when stretched, > 0 when compressed).
// Returns dlambda; no update when every point is on one body (L is constant) or no body can move.
namespace xpbd_impl {

template <class T, class Path>
PHX_HD PHX_INLINE Vec3<T> path_point(const XpbdBody<T>* body, const Path& path, int i) {
  const XpbdBody<T>& b = body[path.body(i)];
  return b.x + rotate(b.q, path.point(i));
}
// whether point i is the first of its body's points in the path
template <class Path>
PHX_HD PHX_INLINE bool first_on_body(const Path& path, int i) {
  for (int j = 0; j < i; ++j)
    if (path.body(j) == path.body(i)) return false;
  return true;
}
// the path's length, and g (size()) its gradients in the points
template <class T, class Path>
PHX_HD T path_length(const XpbdBody<T>* body, const Path& path, Vec3<T>* g) {
  const int n = path.size();
  for (int i = 0; i < n; ++i) g[i] = Vec3<T>{};
  T len = T(0);
  Vec3<T> p = path_point(body, path, 0);
  for (int i = 0; i + 1 < n; ++i) {
    const Vec3<T> next = path_point(body, path, i + 1);
    const T l = norm(next - p);
    len += l;
    if (l > T(0)) {
      const Vec3<T> u = (T(1) / l) * (next - p);
      g[i] -= u;
      g[i + 1] += u;
    }
    p = next;
  }
  return len;
}
// its adjoint, from the adjoints of g and the length, into the bodies' positions and orientations
// and the local points (adj_r, may be null)
template <class T, class Path>
PHX_HD void adj_path_length(const XpbdBody<T>* body, const Path& path, const Vec3<T>* adj_g,
                            T adj_len, XpbdBody<T>* adj_body, Vec3<T>* adj_r) {
  const int n = path.size();
  auto to_point = [&](int i, const Vec3<T>& adj_p) {
    const int b = path.body(i);
    adj_body[b].x += adj_p;
    Vec3<T> ar;
    adj_rotate(body[b].q, path.point(i), adj_body[b].q, ar, adj_p);
    if (adj_r) adj_r[i] += ar;
  };
  for (int i = 0; i + 1 < n; ++i) {
    const Vec3<T> d = path_point(body, path, i + 1) - path_point(body, path, i);
    const T l = norm(d);
    if (!(l > T(0))) continue;
    const Vec3<T> u = (T(1) / l) * d;
    // u_i enters g_i with -1 and g_{i+1} with +1; l_i enters the length
    const Vec3<T> adj_u = adj_g[i + 1] - adj_g[i];
    const Vec3<T> adj_d = (T(1) / l) * (adj_u - dot(u, adj_u) * u) + adj_len * u;
    to_point(i + 1, adj_d);
    to_point(i, -adj_d);
  }
}
// G_b and A_b of the body of point i, summed from i on (i its body's first point)
template <class T, class Path>
PHX_HD void path_body_sums(const XpbdBody<T>* body, const Path& path, const Vec3<T>* g, int i,
                           Vec3<T>& G, Vec3<T>& A) {
  const int b = path.body(i);
  G = A = Vec3<T>{};
  for (int j = i; j < path.size(); ++j)
    if (path.body(j) == b) {
      G += g[j];
      A += cross(rotate(body[b].q, path.point(j)), g[j]);
    }
}
// the length the path is projected to: hi when longer, lo when shorter; false within [lo, hi]
template <class T>
PHX_HD PHX_INLINE bool path_bound(T len, T lo, T hi, T& bound) {
  bound = len > hi ? hi : lo;
  return len > hi || len < lo;
}
// the path's generalized inverse mass w, from its gradients g
template <class T, class Path>
PHX_HD T path_inverse_mass(const XpbdBody<T>* body, const Path& path, const Vec3<T>* g) {
  T w = T(0);
  for (int i = 0; i < path.size(); ++i) {
    if (!first_on_body(path, i)) continue;
    const XpbdBody<T>& B = body[path.body(i)];
    Vec3<T> G, A;
    path_body_sums(body, path, g, i, G, A);
    w += B.inv_mass * dot(G, G) + dot(A, xpbd_inv_inertia_world(B.q, B.inv_inertia, A));
  }
  return w;
}

// Whether the path of length len is projected: outside [lo, hi], on two bodies or more, and
// some body can move (w > 0); if so the bound it goes to and w
template <class T, class Path>
PHX_HD bool path_active(const XpbdBody<T>* body, const Path& path, const Vec3<T>* g, T len, T lo,
                        T hi, T& bound, T& w) {
  bool bodies = false;
  for (int i = 1; i < path.size(); ++i) bodies = bodies || path.body(i) != path.body(0);
  if (!bodies || !path_bound(len, lo, hi, bound)) return false;
  w = path_inverse_mass(body, path, g);
  return w > T(0);
}

}  // namespace xpbd_impl

template <class T, class Path>
PHX_HD T xpbd_path(XpbdBody<T>* body, const Path& path, T lo, T hi, T& lambda) {
  using namespace xpbd_impl;
  Vec3<T> g[kXpbdPathPoints];
  T bound, w;
  const T len = path_length(body, path, g);
  if (!path_active(body, path, g, len, lo, hi, bound, w)) return T(0);
  const T dl = -(len - bound) / w;
  lambda += dl;
  // each body's G and A from the gradients before any body moved and its own orientation before
  // it turns
  for (int i = 0; i < path.size(); ++i) {
    if (!first_on_body(path, i)) continue;
    XpbdBody<T>& B = body[path.body(i)];
    Vec3<T> G, A;
    path_body_sums(body, path, g, i, G, A);
    B.x += (B.inv_mass * dl) * G;
    B.q = xpbd_rotate(B.q, dl * xpbd_inv_inertia_world(B.q, B.inv_inertia, A));
  }
  return dl;
}
// Its adjoint at the bodies `body` it was given: adj_body holds the adjoints of the bodies after
// the projection and receives those before it (the path's bodies; masses and inertias carried
// through), adj_r (size(), may be null) receives the local points' (added), and adj_lambda is
// the adjoint of the multiplier after it (the one before, which the step does not read, has the
// same). Inactive (within the bounds, or no body moves): the identity.
template <class T, class Path>
PHX_HD void adj_xpbd_path(const XpbdBody<T>* body, const Path& path, T lo, T hi, T adj_lambda,
                          XpbdBody<T>* adj_body, Vec3<T>* adj_r) {
  using namespace xpbd_impl;
  Vec3<T> g[kXpbdPathPoints], adj_g[kXpbdPathPoints];
  T bound, w;
  const T len = path_length(body, path, g);
  if (!path_active(body, path, g, len, lo, hi, bound, w)) return;
  const T dl = -(len - bound) / w;
  const int n = path.size();
  // dlambda's adjoint from lambda's and every moved body's outputs, before they are overwritten
  T adj_dl = adj_lambda;
  for (int i = 0; i < n; ++i) {
    if (!first_on_body(path, i)) continue;
    const XpbdBody<T>& B = body[path.body(i)];
    const XpbdBody<T>& out = adj_body[path.body(i)];
    Vec3<T> G, A, adj_phi;
    path_body_sums(body, path, g, i, G, A);
    const Vec3<T> k = xpbd_inv_inertia_world(B.q, B.inv_inertia, A);
    Quat<T> unused = Quat<T>::zero();
    adj_xpbd_rotate(B.q, dl * k, unused, adj_phi, out.q);
    adj_dl += B.inv_mass * dot(G, out.x) + dot(k, adj_phi);
  }
  // dl = -(len - bound) / w
  const T adj_len = -adj_dl / w, adj_w = -dl * adj_dl / w;
  for (int i = 0; i < n; ++i) adj_g[i] = Vec3<T>{};
  for (int i = 0; i < n; ++i) {
    if (!first_on_body(path, i)) continue;
    const int b = path.body(i);
    const XpbdBody<T>& B = body[b];
    const XpbdBody<T> out = adj_body[b];
    Vec3<T> G, A, adj_phi;
    path_body_sums(body, path, g, i, G, A);
    const Vec3<T> k = xpbd_inv_inertia_world(B.q, B.inv_inertia, A);
    // q' = xpbd_rotate(q, dl k), k = I^-1 A; x' = x + inv_m dl G (x, inv_mass, inv_inertia
    // carried); w's term inv_m |G|^2 + A . I^-1 A
    adj_body[b].q = Quat<T>::zero();
    adj_xpbd_rotate(B.q, dl * k, adj_body[b].q, adj_phi, out.q);
    adj_body[b].inv_mass += dl * dot(G, out.x) + adj_w * dot(G, G);
    const Vec3<T> adj_G = (B.inv_mass * dl) * out.x + (T(2) * B.inv_mass * adj_w) * G;
    Vec3<T> adj_A = adj_w * k;
    adj_xpbd_inv_inertia_world(B.q, B.inv_inertia, A, adj_body[b].q, adj_body[b].inv_inertia, adj_A,
                               dl * adj_phi + adj_w * A);
    // G = sum g_j, A = sum r_j x g_j over the body's points, r_j = R r_local_j
    for (int j = i; j < n; ++j) {
      if (path.body(j) != b) continue;
      const Vec3<T> r = rotate(B.q, path.point(j));
      adj_g[j] += adj_G + cross(adj_A, r);
      Vec3<T> ar;
      adj_rotate(B.q, path.point(j), adj_body[b].q, ar, cross(g[j], adj_A));
      if (adj_r) adj_r[j] += ar;
    }
  }
  adj_path_length(body, path, adj_g, adj_len, adj_body, adj_r);
}

// below this |a x b| two opposite unit axes count as exactly opposite
constexpr double kXpbdOppositeTol = 1e-6;

// The rotation vector turning the unit axis a onto the unit axis b (Müller sec. 3.4.1,
// dq = a x b, Liu eq. 11). |a x b| = sin(theta) falls back to zero as the axes turn opposite, so
// on the far side (a . b < 0) the direction a x b is kept and the magnitude taken as
// 2 - sin(theta): continuous, with a continuous derivative in theta at 90 degrees, growing to 2
// at opposite axes. Within kXpbdOppositeTol of opposite, where a x b has no reliable direction,
// the axis is a x e (e the coordinate axis least aligned with a), normalised, magnitude 2; its
// adjoint is that of this formula (the choice of e held).
template <class T>
PHX_HD PHX_INLINE Vec3<T> xpbd_axis_alignment(const Vec3<T>& a, const Vec3<T>& b) {
  Vec3<T> c = cross(a, b);
  if (!(dot(a, b) < T(0))) return c;
  T s = norm(c);
  if (s > T(kXpbdOppositeTol)) return ((T(2) - s) / s) * c;
  int i = abs(a.x) <= abs(a.y) && abs(a.x) <= abs(a.z) ? 0 : (abs(a.y) <= abs(a.z) ? 1 : 2);
  Vec3<T> e;
  e[i] = T(1);
  Vec3<T> u = cross(a, e);
  return (T(2) / norm(u)) * u;
}
template <class T>
PHX_HD PHX_INLINE void adj_xpbd_axis_alignment(const Vec3<T>& a, const Vec3<T>& b, Vec3<T>& adj_a,
                                               Vec3<T>& adj_b, const Vec3<T>& adj_r) {
  Vec3<T> c = cross(a, b);
  if (!(dot(a, b) < T(0))) {
    adj_cross(a, b, adj_a, adj_b, adj_r);
    return;
  }
  T s = norm(c);
  if (s > T(kXpbdOppositeTol)) {
    // r = (2 / s - 1) c: adj_c = (2 / s - 1) adj_r - 2 / s^3 (c . adj_r) c
    adj_cross(a, b, adj_a, adj_b,
              (T(2) / s - T(1)) * adj_r - (T(2) * dot(c, adj_r) / (s * s * s)) * c);
    return;
  }
  int i = abs(a.x) <= abs(a.y) && abs(a.x) <= abs(a.z) ? 0 : (abs(a.y) <= abs(a.z) ? 1 : 2);
  Vec3<T> e, adj_u, adj_e;
  e[i] = T(1);
  Vec3<T> u = cross(a, e);
  T len = norm(u);
  collision_impl::adj_normalize((T(1) / len) * u, len, adj_u, T(2) * adj_r);
  adj_cross(a, e, adj_a, adj_e, adj_u);
}

// Hinge axis alignment: body 1's local axis a1 and body 2's local axis a2 (unit) coincide in the
// world, dphi = xpbd_axis_alignment(R1 a1, R2 a2).
template <class T>
PHX_HD T xpbd_hinge_align(XpbdBody<T>& b1, XpbdBody<T>& b2, const Vec3<T>& a1, const Vec3<T>& a2,
                          T alpha, T h, T& lambda) {
  Vec3<T> dphi = xpbd_axis_alignment(xpbd_impl::rotate(b1.q, a1), xpbd_impl::rotate(b2.q, a2));
  return xpbd_angular(b1, b2, dphi, alpha, h, lambda);
}
template <class T>
PHX_HD void adj_xpbd_hinge_align(const XpbdBody<T>& b1, const XpbdBody<T>& b2, const Vec3<T>& a1,
                                 const Vec3<T>& a2, T alpha, T h, T lambda, XpbdBody<T>& adj_b1,
                                 XpbdBody<T>& adj_b2, Vec3<T>& adj_a1, Vec3<T>& adj_a2,
                                 T& adj_alpha, T& adj_h, T& adj_lambda, XpbdBody<T> adj_b1_out,
                                 XpbdBody<T> adj_b2_out, T adj_lambda_out) {
  Vec3<T> a1w = xpbd_impl::rotate(b1.q, a1), a2w = xpbd_impl::rotate(b2.q, a2);
  Vec3<T> adj_dphi, adj_a1w, adj_a2w;
  adj_xpbd_angular(b1, b2, xpbd_axis_alignment(a1w, a2w), alpha, h, lambda, adj_b1, adj_b2,
                   adj_dphi, adj_alpha, adj_h, adj_lambda, adj_b1_out, adj_b2_out, adj_lambda_out);
  adj_xpbd_axis_alignment(a1w, a2w, adj_a1w, adj_a2w, adj_dphi);
  xpbd_impl::adj_rotate(b1.q, a1, adj_b1.q, adj_a1, adj_a1w);
  xpbd_impl::adj_rotate(b2.q, a2, adj_b2.q, adj_a2, adj_a2w);
}

// Hinge axis alignment as one solve over the plane across the axis: the block form of
// xpbd_hinge_align, for the same reason as xpbd_attach_block (the scalar projection along the
// error converges slowly, or not at all, on a chain of small anisotropic inertias such as a
// robot arm's wrist). With n = R1 a1 / |R1 a1|, P = 1 - n n^T and the error e = R1 a1 x R2 a2 (as
// xpbd_axis_alignment, across n), the angular impulse p across n solves
//   (P K P + alpha~ P + n n^T) p = -(e + alpha~ lambda),   K = I1^-1 + I2^-1 (world),
// (the n n^T term makes the matrix invertible and p . n = 0); body 1 turns by -I1^-1 p, body 2 by
// +I2^-1 p, lambda += p. Returns p; no update when the matrix is singular or the axis is zero.
namespace xpbd_impl {

template <class T>
PHX_HD PHX_INLINE Vec3<T> across(const Vec3<T>& n, const Vec3<T>& v) {
  return v - dot(n, v) * n;
}

// (P K P + at P + n n^T) by its columns
template <class T>
PHX_HD PHX_INLINE Mat3<T> align_matrix(const XpbdBody<T>& b1, const XpbdBody<T>& b2,
                                       const Vec3<T>& n, T at) {
  return by_columns<T>([&](const Vec3<T>& e) {
    Vec3<T> pe = across(n, e);
    Vec3<T> k = xpbd_inv_inertia_world(b1.q, b1.inv_inertia, pe) +
                xpbd_inv_inertia_world(b2.q, b2.inv_inertia, pe);
    return across(n, k) + at * pe + dot(n, e) * n;
  });
}

}  // namespace xpbd_impl

template <class T>
PHX_HD Vec3<T> xpbd_hinge_align_block(XpbdBody<T>& b1, XpbdBody<T>& b2, const Vec3<T>& a1,
                                      const Vec3<T>& a2, T alpha, T h, Vec3<T>& lambda) {
  Vec3<T> a1w = xpbd_impl::rotate(b1.q, a1), a2w = xpbd_impl::rotate(b2.q, a2);
  T len = norm(a1w);
  if (!(len > T(0))) return Vec3<T>{};
  Vec3<T> n = (T(1) / len) * a1w;
  T at = alpha / (h * h);
  Vec3<T> y;
  if (!xpbd_impl::solve3(xpbd_impl::align_matrix(b1, b2, n, at),
                         xpbd_axis_alignment(a1w, a2w) + at * lambda, y))
    return Vec3<T>{};
  Vec3<T> p = -y;
  lambda += p;
  xpbd_impl::turn(b1, b2, p, p);
  return p;
}
// The adjoint: through the update, the solve (g = M^-1 adj_p, adj_rhs = -g, and M's entries
// contribute minus the derivative of g^T M p with g and p held), n's normalisation, the error
// and the world axes. A singular matrix or a zero axis passes the adjoints through.
template <class T>
PHX_HD void adj_xpbd_hinge_align_block(const XpbdBody<T>& b1, const XpbdBody<T>& b2,
                                       const Vec3<T>& a1, const Vec3<T>& a2, T alpha, T h,
                                       const Vec3<T>& lambda, XpbdBody<T>& adj_b1,
                                       XpbdBody<T>& adj_b2, Vec3<T>& adj_a1, Vec3<T>& adj_a2,
                                       T& adj_alpha, T& adj_h, Vec3<T>& adj_lambda,
                                       XpbdBody<T> adj_b1_out, XpbdBody<T> adj_b2_out,
                                       Vec3<T> adj_lambda_out) {
  using xpbd_impl::across;
  Vec3<T> a1w = xpbd_impl::rotate(b1.q, a1), a2w = xpbd_impl::rotate(b2.q, a2);
  T len = norm(a1w);
  T at = alpha / (h * h);
  Vec3<T> n, y;
  Mat3<T> M;
  bool ok = len > T(0);
  if (ok) {
    n = (T(1) / len) * a1w;
    M = xpbd_impl::align_matrix(b1, b2, n, at);
    ok = xpbd_impl::solve3(M, xpbd_axis_alignment(a1w, a2w) + at * lambda, y);
  }
  if (!ok) {
    xpbd_impl::add_to(adj_b1, adj_b1_out);
    xpbd_impl::add_to(adj_b2, adj_b2_out);
    adj_lambda += adj_lambda_out;
    return;
  }
  Vec3<T> p = -y;
  xpbd_impl::carry(adj_b1, adj_b2, adj_lambda, adj_b1_out, adj_b2_out, adj_lambda_out);
  // q1 turned by -I1^-1 p, q2 by I2^-1 p; lambda += p
  Vec3<T> adj_p = adj_lambda_out;
  xpbd_impl::adj_turn(b1, b2, p, p, adj_b1, adj_b2, adj_p, adj_p, adj_b1_out.q, adj_b2_out.q);
  // p = -M^-1 (e + at lambda)
  Vec3<T> g;
  xpbd_impl::solve3(M, adj_p, g);
  Vec3<T> adj_e = -g;
  adj_lambda -= at * g;
  Vec3<T> Pg = across(n, g), Pp = across(n, p);
  T adj_at = -dot(g, lambda) - dot(g, Pp);
  // minus the derivative of F = (Pg)^T K (Pp) + at g^T P p + (g . n)(n . p): in K ...
  Vec3<T> unused;
  adj_xpbd_inv_inertia_world(b1.q, b1.inv_inertia, Pp, adj_b1.q, adj_b1.inv_inertia, unused, -Pg);
  adj_xpbd_inv_inertia_world(b2.q, b2.inv_inertia, Pp, adj_b2.q, adj_b2.inv_inertia, unused, -Pg);
  // ... and in n (P = 1 - n n^T)
  Vec3<T> KPp = xpbd_inv_inertia_world(b1.q, b1.inv_inertia, Pp) +
                xpbd_inv_inertia_world(b2.q, b2.inv_inertia, Pp);
  Vec3<T> KPg = xpbd_inv_inertia_world(b1.q, b1.inv_inertia, Pg) +
                xpbd_inv_inertia_world(b2.q, b2.inv_inertia, Pg);
  T ng = dot(n, g), np = dot(n, p);
  Vec3<T> dF_dn = -ng * KPp - dot(n, KPp) * g - np * KPg - dot(n, KPg) * p -
                  at * (np * g + ng * p) + (np * g + ng * p);
  Vec3<T> adj_n = -dF_dn;
  // at = alpha / h^2
  adj_alpha += adj_at / (h * h);
  adj_h -= T(2) * at * adj_at / h;
  // e = axis_alignment(a1w, a2w), n = a1w / |a1w|, a_iw = R_i a_i
  Vec3<T> adj_a1w, adj_a2w;
  adj_xpbd_axis_alignment(a1w, a2w, adj_a1w, adj_a2w, adj_e);
  collision_impl::adj_normalize(n, len, adj_a1w, adj_n);
  xpbd_impl::adj_rotate(b1.q, a1, adj_b1.q, adj_a1, adj_a1w);
  xpbd_impl::adj_rotate(b2.q, a2, adj_b2.q, adj_a2, adj_a2w);
}

// The rotation vector turning the frame p1 onto the frame p2 (world), to first order:
// 2 vec(p2 conj(p1)), the sign of the quaternion taken so that its w >= 0 (the shorter way;
// Müller sec. 3.4.1 writes 2 vec(q1 conj(q2)) for his opposite sign). At w = 0 (a half turn) the
// + branch is taken.
template <class T>
PHX_HD PHX_INLINE Vec3<T> xpbd_orientation_difference(const Quat<T>& p1, const Quat<T>& p2) {
  Quat<T> d = p2 * conjugate(p1);
  return (d.w < T(0) ? T(-2) : T(2)) * Vec3<T>{d.x, d.y, d.z};
}
template <class T>
PHX_HD PHX_INLINE void adj_xpbd_orientation_difference(const Quat<T>& p1, const Quat<T>& p2,
                                                       Quat<T>& adj_p1, Quat<T>& adj_p2,
                                                       const Vec3<T>& adj_r) {
  Quat<T> cp1 = conjugate(p1);
  T s = (p2 * cp1).w < T(0) ? T(-2) : T(2);
  Quat<T> adj_cp1 = Quat<T>::zero();
  adj_mul(p2, cp1, adj_p2, adj_cp1, Quat<T>{T(0), s * adj_r.x, s * adj_r.y, s * adj_r.z});
  add_to(adj_p1, conjugate(adj_cp1));
}

// Weld (fixed joint) orientation: the joint frames q1 f1 and q2 f2 coincide (f_i the joint frame
// in body i, a unit quaternion); the positional part is xpbd_attach.
template <class T>
PHX_HD T xpbd_weld_orientation(XpbdBody<T>& b1, XpbdBody<T>& b2, const Quat<T>& f1,
                               const Quat<T>& f2, T alpha, T h, T& lambda) {
  return xpbd_angular(b1, b2, xpbd_orientation_difference(b1.q * f1, b2.q * f2), alpha, h, lambda);
}
template <class T>
PHX_HD void adj_xpbd_weld_orientation(const XpbdBody<T>& b1, const XpbdBody<T>& b2,
                                      const Quat<T>& f1, const Quat<T>& f2, T alpha, T h, T lambda,
                                      XpbdBody<T>& adj_b1, XpbdBody<T>& adj_b2, Quat<T>& adj_f1,
                                      Quat<T>& adj_f2, T& adj_alpha, T& adj_h, T& adj_lambda,
                                      XpbdBody<T> adj_b1_out, XpbdBody<T> adj_b2_out,
                                      T adj_lambda_out) {
  Quat<T> p1 = b1.q * f1, p2 = b2.q * f2;
  Vec3<T> adj_dphi;
  adj_xpbd_angular(b1, b2, xpbd_orientation_difference(p1, p2), alpha, h, lambda, adj_b1, adj_b2,
                   adj_dphi, adj_alpha, adj_h, adj_lambda, adj_b1_out, adj_b2_out, adj_lambda_out);
  Quat<T> adj_p1 = Quat<T>::zero(), adj_p2 = Quat<T>::zero();
  adj_xpbd_orientation_difference(p1, p2, adj_p1, adj_p2, adj_dphi);
  adj_mul(b1.q, f1, adj_b1.q, adj_f1, adj_p1);
  adj_mul(b2.q, f2, adj_b2.q, adj_f2, adj_p2);
}

// The signed angle (rad, in [-pi, pi]) about the unit axis a from n1 to n2, both perpendicular
// to a: atan2(a . (n1 x n2), n1 . n2), the angle of Müller's Alg. 3 (limitAngle) without its
// asin quadrant fix-ups. The angle of (0, 0) is 0, with a zero adjoint.
template <class T>
PHX_HD PHX_INLINE T xpbd_hinge_angle(const Vec3<T>& a, const Vec3<T>& n1, const Vec3<T>& n2) {
  return atan2(dot(a, cross(n1, n2)), dot(n1, n2));
}
template <class T>
PHX_HD PHX_INLINE void adj_xpbd_hinge_angle(const Vec3<T>& a, const Vec3<T>& n1, const Vec3<T>& n2,
                                            Vec3<T>& adj_a, Vec3<T>& adj_n1, Vec3<T>& adj_n2,
                                            T adj_phi) {
  Vec3<T> c = cross(n1, n2);
  T y = dot(a, c), x = dot(n1, n2), r2 = x * x + y * y;
  if (!(r2 > T(0))) return;
  T adj_y = x * adj_phi / r2, adj_x = -y * adj_phi / r2;
  adj_a += adj_y * c;
  adj_cross(n1, n2, adj_n1, adj_n2, adj_y * a);
  adj_n1 += adj_x * n2;
  adj_n2 += adj_x * n1;
}

namespace xpbd_impl {
// how far v lies beyond [lo, hi] (negative below lo), zero within
template <class T>
PHX_HD PHX_INLINE T excess(T v, T lo, T hi) {
  return v < lo ? v - lo : (v > hi ? v - hi : T(0));
}
}  // namespace xpbd_impl

// Hinge angle limit (Müller sec. 3.4.1, Alg. 3): a1 body 1's local hinge axis (unit), n1 and n2
// local unit vectors perpendicular to the hinge axis in bodies 1 and 2, lo <= hi (rad). Active
// only when the angle phi from R1 n1 to R2 n2 about R1 a1 leaves [lo, hi]; then
// dphi = (phi - clamp(phi, lo, hi)) R1 a1, the excess about the hinge axis itself (Alg. 3 takes
// n1' x n2 with n1' the limit direction, equal to first order, and leaves the axes' alignment
// to the alignment constraint). At phi = lo or hi the correction is zero, so the update is
// continuous there; the adjoint is that of the side taken.
template <class T>
PHX_HD T xpbd_hinge_limit(XpbdBody<T>& b1, XpbdBody<T>& b2, const Vec3<T>& a1, const Vec3<T>& n1,
                          const Vec3<T>& n2, T lo, T hi, T alpha, T h, T& lambda) {
  Vec3<T> aw = xpbd_impl::rotate(b1.q, a1);
  T phi = xpbd_hinge_angle(aw, xpbd_impl::rotate(b1.q, n1), xpbd_impl::rotate(b2.q, n2));
  T excess = xpbd_impl::excess(phi, lo, hi);
  if (excess == T(0)) return T(0);
  return xpbd_angular(b1, b2, excess * aw, alpha, h, lambda);
}
template <class T>
PHX_HD void adj_xpbd_hinge_limit(const XpbdBody<T>& b1, const XpbdBody<T>& b2, const Vec3<T>& a1,
                                 const Vec3<T>& n1, const Vec3<T>& n2, T lo, T hi, T alpha, T h,
                                 T lambda, XpbdBody<T>& adj_b1, XpbdBody<T>& adj_b2,
                                 Vec3<T>& adj_a1, Vec3<T>& adj_n1, Vec3<T>& adj_n2, T& adj_lo,
                                 T& adj_hi, T& adj_alpha, T& adj_h, T& adj_lambda,
                                 XpbdBody<T> adj_b1_out, XpbdBody<T> adj_b2_out, T adj_lambda_out) {
  Vec3<T> aw = xpbd_impl::rotate(b1.q, a1), n1w = xpbd_impl::rotate(b1.q, n1),
          n2w = xpbd_impl::rotate(b2.q, n2);
  T phi = xpbd_hinge_angle(aw, n1w, n2w);
  T excess = xpbd_impl::excess(phi, lo, hi);
  if (excess == T(0)) {
    xpbd_impl::adj_pass(adj_b1, adj_b2, adj_lambda, adj_b1_out, adj_b2_out, adj_lambda_out);
    return;
  }
  Vec3<T> adj_dphi, adj_aw, adj_n1w, adj_n2w;
  adj_xpbd_angular(b1, b2, excess * aw, alpha, h, lambda, adj_b1, adj_b2, adj_dphi, adj_alpha,
                   adj_h, adj_lambda, adj_b1_out, adj_b2_out, adj_lambda_out);
  // dphi = excess aw, excess = phi - lo or phi - hi
  T adj_excess = dot(aw, adj_dphi);
  adj_aw += excess * adj_dphi;
  (phi < lo ? adj_lo : adj_hi) -= adj_excess;
  adj_xpbd_hinge_angle(aw, n1w, n2w, adj_aw, adj_n1w, adj_n2w, adj_excess);
  xpbd_impl::adj_rotate(b1.q, a1, adj_b1.q, adj_a1, adj_aw);
  xpbd_impl::adj_rotate(b1.q, n1, adj_b1.q, adj_n1, adj_n1w);
  xpbd_impl::adj_rotate(b2.q, n2, adj_b2.q, adj_n2, adj_n2w);
}

// Slide limit: the displacement s = (p2 - p1) . R1 a1 of body 2's anchor p2 = x2 + R2 r2 from
// body 1's p1 = x1 + R1 r1 along body 1's local slide axis a1 (unit; s = 0 at the joint's zero),
// kept within [lo, hi] (m). Outside, the excess dx = (s - clamp(s, lo, hi)) R1 a1 is projected
// at the anchors (xpbd_positional); the anchors' offset across the axis is the slide's
// attachment's to close. Continuous at lo and hi as the hinge limit; the adjoint is that of the
// side taken.
template <class T>
PHX_HD T xpbd_slide_limit(XpbdBody<T>& b1, XpbdBody<T>& b2, const Vec3<T>& r1, const Vec3<T>& r2,
                          const Vec3<T>& a1, T lo, T hi, T alpha, T h, T& lambda) {
  using xpbd_impl::rotate;
  const Vec3<T> rw1 = rotate(b1.q, r1), rw2 = rotate(b2.q, r2), aw = rotate(b1.q, a1);
  const T excess = xpbd_impl::excess(dot((b2.x + rw2) - (b1.x + rw1), aw), lo, hi);
  if (excess == T(0)) return T(0);
  return xpbd_positional(b1, b2, rw1, rw2, excess * aw, alpha, h, lambda);
}
template <class T>
PHX_HD void adj_xpbd_slide_limit(const XpbdBody<T>& b1, const XpbdBody<T>& b2, const Vec3<T>& r1,
                                 const Vec3<T>& r2, const Vec3<T>& a1, T lo, T hi, T alpha, T h,
                                 T lambda, XpbdBody<T>& adj_b1, XpbdBody<T>& adj_b2,
                                 Vec3<T>& adj_r1, Vec3<T>& adj_r2, Vec3<T>& adj_a1, T& adj_lo,
                                 T& adj_hi, T& adj_alpha, T& adj_h, T& adj_lambda,
                                 XpbdBody<T> adj_b1_out, XpbdBody<T> adj_b2_out, T adj_lambda_out) {
  using xpbd_impl::rotate;
  const Vec3<T> rw1 = rotate(b1.q, r1), rw2 = rotate(b2.q, r2), aw = rotate(b1.q, a1);
  const Vec3<T> d = (b2.x + rw2) - (b1.x + rw1);
  const T s = dot(d, aw), excess = xpbd_impl::excess(s, lo, hi);
  if (excess == T(0)) {
    xpbd_impl::adj_pass(adj_b1, adj_b2, adj_lambda, adj_b1_out, adj_b2_out, adj_lambda_out);
    return;
  }
  Vec3<T> adj_rw1, adj_rw2, adj_dx;
  adj_xpbd_positional(b1, b2, rw1, rw2, excess * aw, alpha, h, lambda, adj_b1, adj_b2, adj_rw1,
                      adj_rw2, adj_dx, adj_alpha, adj_h, adj_lambda, adj_b1_out, adj_b2_out,
                      adj_lambda_out);
  // dx = excess aw, excess = s - lo or s - hi, s = d . aw
  const T adj_s = dot(aw, adj_dx);
  (s < lo ? adj_lo : adj_hi) -= adj_s;
  const Vec3<T> adj_aw = excess * adj_dx + adj_s * d, adj_d = adj_s * aw;
  adj_b2.x += adj_d;
  adj_b1.x -= adj_d;
  adj_rw2 += adj_d;
  adj_rw1 -= adj_d;
  xpbd_impl::adj_rotate(b1.q, r1, adj_b1.q, adj_r1, adj_rw1);
  xpbd_impl::adj_rotate(b2.q, r2, adj_b2.q, adj_r2, adj_rw2);
  xpbd_impl::adj_rotate(b1.q, a1, adj_b1.q, adj_a1, adj_aw);
}

// Ball joint (cone) limit: the rotation from body 1's joint frame q1 f1 to body 2's q2 f2 (f_i
// the joint frame in body i, as the weld's), dq = (q2 f2) conj(q1 f1), turns by theta about the
// world axis u (quat_angle_axis: the shorter way round); theta is kept at most hi (rad, hi >= 0:
// MuJoCo's ball range, on the angle of the joint's quaternion). Beyond, the excess turn
// dphi = (theta - hi) u is projected (xpbd_angular). Continuous at hi; the adjoint is that of the
// side taken (and of the sign of dq).
template <class T>
PHX_HD T xpbd_ball_limit(XpbdBody<T>& b1, XpbdBody<T>& b2, const Quat<T>& f1, const Quat<T>& f2,
                         T hi, T alpha, T h, T& lambda) {
  Vec3<T> u;
  const T theta = quat_angle_axis((b2.q * f2) * conjugate(b1.q * f1), u);
  if (!(theta > hi)) return T(0);
  return xpbd_angular(b1, b2, (theta - hi) * u, alpha, h, lambda);
}
template <class T>
PHX_HD void adj_xpbd_ball_limit(const XpbdBody<T>& b1, const XpbdBody<T>& b2, const Quat<T>& f1,
                                const Quat<T>& f2, T hi, T alpha, T h, T lambda,
                                XpbdBody<T>& adj_b1, XpbdBody<T>& adj_b2, Quat<T>& adj_f1,
                                Quat<T>& adj_f2, T& adj_hi, T& adj_alpha, T& adj_h, T& adj_lambda,
                                XpbdBody<T> adj_b1_out, XpbdBody<T> adj_b2_out, T adj_lambda_out) {
  const Quat<T> p1 = b1.q * f1, p2 = b2.q * f2, cp1 = conjugate(p1), d = p2 * cp1;
  Vec3<T> u;
  const T theta = quat_angle_axis(d, u);
  if (!(theta > hi)) {
    xpbd_impl::adj_pass(adj_b1, adj_b2, adj_lambda, adj_b1_out, adj_b2_out, adj_lambda_out);
    return;
  }
  Vec3<T> adj_dphi;
  adj_xpbd_angular(b1, b2, (theta - hi) * u, alpha, h, lambda, adj_b1, adj_b2, adj_dphi, adj_alpha,
                   adj_h, adj_lambda, adj_b1_out, adj_b2_out, adj_lambda_out);
  // dphi = (theta - hi) u
  const T adj_theta = dot(u, adj_dphi);
  adj_hi -= adj_theta;
  Quat<T> adj_d = Quat<T>::zero(), adj_p1 = Quat<T>::zero(), adj_p2 = Quat<T>::zero(),
          adj_cp1 = Quat<T>::zero();
  adj_quat_angle_axis(d, adj_theta, (theta - hi) * adj_dphi, adj_d);
  adj_mul(p2, cp1, adj_p2, adj_cp1, adj_d);
  add_to(adj_p1, conjugate(adj_cp1));
  adj_mul(b1.q, f1, adj_b1.q, adj_f1, adj_p1);
  adj_mul(b2.q, f2, adj_b2.q, adj_f2, adj_p2);
}

}  // namespace phx
