// Contacts of the XPBD step (Müller et al., "Detailed Rigid Body Simulation with Extended Position
// Based Dynamics", SCA 2020, secs. 3.5 and 3.6), each function f followed by adj_f.
//
// A step detects its contacts once, at its start (detect_contacts, with a look-ahead margin so
// that a contact that closes during the step is already known), and holds each one's geometry
// over its substeps: the points on the two bodies (principal frames, relative to the centres of
// mass) and the world normal n from geom 1 to geom 2. With p_i = x_i + R_i r_i:
//   gap        d = (p2 - p1) . n; the contact acts while d < 0
//   normal     in every iteration, a positional projection of d n (rigid): lambda_n
//   static     then the tangential part of the points' relative displacement since the
//   friction   substep's start, ((p2 - p2_start) - (p1 - p1_start))_t, projected away when its
//              multiplier stays within mu |lambda_n| (lambda_t), else left to dynamic friction
//   velocity   after the substep's velocities, once per contact that acted, two impulses on the
//   pass       relative velocity u = (v2 + w2 x r2) - (v1 + w1 x r1) of the points:
//              restitution, which sets u . n to max(-e vn0, 0) (vn0 is u . n at the substep's
//              start; e is 0 when |vn0| <= 2 |g| h: Müller's resting contacts do not bounce),
//              then dynamic friction against u's tangential part, within mu times the
//              substep's normal impulse; see xpbd_contact_velocity
// mu is the larger of the two geoms' sliding friction (static and dynamic alike), e the larger
// restitution, as the LCP step's rows take them. Multipliers follow xpbd.h's sign (lambda <= 0).
//
// Adjoints: Dual numbers in every input of one function (Dual<T, N> below), so that each
// adjoint is the forward run once on them. The branches (a contact acting or not, friction
// static or dynamic, a bounce or none) are differentiated as the forward took them; mu and e
// have no adjoint.
#pragma once

#include "phalanx/constraint.h"
#include "phalanx/math/dual.h"
#include "phalanx/xpbd.h"

namespace phx {

// one contact held over a step
template <class T>
struct XpbdContact {
  int b1, b2;      // the bodies of geom 1 and geom 2
  Vec3<T> r1, r2;  // the contact points, principal frames relative to the centres of mass
  Vec3<T> n;       // world normal, geom 1 to geom 2
  T mu, e;         // friction and restitution
};

namespace xpbd_impl {

// Dual numbers seeded one direction per scalar, in the order they are taken
template <class T, int N>
struct DualSeeds {
  using D = Dual<T, N>;
  int o = 0;
  PHX_HD D operator()(T x) {
    D r(x);
    r.d[o++] = T(1);
    return r;
  }
  PHX_HD Vec3<D> vec(const Vec3<T>& v) {
    Vec3<D> r;
    for (int i = 0; i < 3; ++i) r[i] = (*this)(v[i]);
    return r;
  }
  PHX_HD Quat<D> quat(const Quat<T>& q) {
    D w = (*this)(q.w), x = (*this)(q.x), y = (*this)(q.y), z = (*this)(q.z);
    return Quat<D>{w, x, y, z};
  }
  // a body's pose, and with `masses` its inverse mass and inertia (else constants)
  PHX_HD XpbdBody<D> body(const XpbdBody<T>& b, bool masses) {
    XpbdBody<D> r;
    r.x = vec(b.x);
    r.q = quat(b.q);
    r.inv_mass = masses ? (*this)(b.inv_mass) : D(b.inv_mass);
    r.inv_inertia = masses ? vec(b.inv_inertia) : Vec3<D>::from(b.inv_inertia);
    return r;
  }
};

// the slopes of phi, taken in the order DualSeeds seeded them and added to the adjoints
template <class T, int N>
struct DualSlopes {
  const Dual<T, N>& phi;
  int o = 0;
  PHX_HD void operator()(T& a) { a += phi.d[o++]; }
  PHX_HD void vec(Vec3<T>& a) {
    for (int i = 0; i < 3; ++i) (*this)(a[i]);
  }
  PHX_HD void quat(Quat<T>& a) { (*this)(a.w), (*this)(a.x), (*this)(a.y), (*this)(a.z); }
  PHX_HD void body(XpbdBody<T>& a, bool masses) {
    vec(a.x);
    quat(a.q);
    if (masses) {
      (*this)(a.inv_mass);
      vec(a.inv_inertia);
    }
  }
};

// sum of adj . out over a body (pose, inverse mass and inertia), a vector, a quaternion
template <class T, class D>
PHX_HD D pair(const Vec3<T>& adj, const Vec3<D>& out) {
  return adj.x * out.x + adj.y * out.y + adj.z * out.z;
}
template <class T, class D>
PHX_HD D pair(const Quat<T>& adj, const Quat<D>& out) {
  return adj.w * out.w + adj.x * out.x + adj.y * out.y + adj.z * out.z;
}
template <class T, class D>
PHX_HD D pair(const XpbdBody<T>& adj, const XpbdBody<D>& out) {
  return pair(adj.x, out.x) + pair(adj.q, out.q) + adj.inv_mass * out.inv_mass +
         pair(adj.inv_inertia, out.inv_inertia);
}

// a contact's geometry in Dual numbers seeded at r1, r2, n
template <class T, int N>
PHX_HD XpbdContact<Dual<T, N>> seeded_contact(const XpbdContact<T>& c, DualSeeds<T, N>& seed) {
  XpbdContact<Dual<T, N>> r;
  r.b1 = c.b1;
  r.b2 = c.b2;
  r.r1 = seed.vec(c.r1);
  r.r2 = seed.vec(c.r2);
  r.n = seed.vec(c.n);
  r.mu = c.mu;
  r.e = c.e;
  return r;
}

}  // namespace xpbd_impl

// The points a detected contact holds (r1 on body 1, r2 on body 2), from its midpoint pos,
// normal n and distance dist (ContactView's) and the bodies' poses: the surface points
// pos -+ dist / 2 n in the principal frames. Any scalar R.
template <class R>
PHX_HD void xpbd_contact_points(const Vec3<R>& pos, const Vec3<R>& n, R dist, const XpbdBody<R>& B1,
                                const XpbdBody<R>& B2, Vec3<R>& r1, Vec3<R>& r2) {
  const Vec3<R> half = (R(0.5) * dist) * n;
  r1 = xpbd_impl::rotate(conjugate(B1.q), (pos - half) - B1.x);
  r2 = xpbd_impl::rotate(conjugate(B2.q), (pos + half) - B2.x);
}
// its adjoint: from adj_r1, adj_r2 to the contact's point, normal and distance and to the two
// poses (accumulated; the world's pose gets nothing)
template <class T>
PHX_HD void adj_xpbd_contact_points(const Vec3<T>& pos, const Vec3<T>& n, T dist,
                                    const XpbdBody<T>& B1, const XpbdBody<T>& B2,
                                    const Vec3<T>& adj_r1, const Vec3<T>& adj_r2, Vec3<T>& adj_pos,
                                    Vec3<T>& adj_n, T& adj_dist, XpbdBody<T>& adj_b1,
                                    XpbdBody<T>& adj_b2) {
  using D = Dual<T, 21>;
  xpbd_impl::DualSeeds<T, 21> seed;
  const Vec3<D> p = seed.vec(pos), nd = seed.vec(n);
  const D dd = seed(dist);
  const XpbdBody<D> b1 = seed.body(B1, false), b2 = seed.body(B2, false);
  Vec3<D> r1, r2;
  xpbd_contact_points(p, nd, dd, b1, b2, r1, r2);
  const D phi = xpbd_impl::pair(adj_r1, r1) + xpbd_impl::pair(adj_r2, r2);
  xpbd_impl::DualSlopes<T, 21> slope{phi};
  slope.vec(adj_pos);
  slope.vec(adj_n);
  slope(adj_dist);
  XpbdBody<T> g1 = XpbdBody<T>::zero(), g2 = XpbdBody<T>::zero();
  slope.body(g1, false);
  slope.body(g2, false);
  if (B1.inv_mass > T(0)) xpbd_impl::add_to(adj_b1, g1);
  if (B2.inv_mass > T(0)) xpbd_impl::add_to(adj_b2, g2);
}

// The relative velocity of the contact's points, body 2's less body 1's, at poses B1, B2 and
// velocities (v1, w1), (v2, w2); r1w, r2w receive the world lever arms. Any scalar R.
template <class R>
PHX_HD Vec3<R> xpbd_contact_velocity_of(const XpbdContact<R>& c, const XpbdBody<R>& B1,
                                        const XpbdBody<R>& B2, const Vec3<R>& v1, const Vec3<R>& w1,
                                        const Vec3<R>& v2, const Vec3<R>& w2, Vec3<R>& r1w,
                                        Vec3<R>& r2w) {
  r1w = xpbd_impl::rotate(B1.q, c.r1);
  r2w = xpbd_impl::rotate(B2.q, c.r2);
  return (v2 + cross(w2, r2w)) - (v1 + cross(w1, r1w));
}

// The normal relative velocity vn0 that restitution reads, at a substep's start. Any scalar R.
template <class R>
PHX_HD R xpbd_contact_normal_velocity(const XpbdContact<R>& c, const XpbdBody<R>& B1,
                                      const XpbdBody<R>& B2, const Vec3<R>& v1, const Vec3<R>& w1,
                                      const Vec3<R>& v2, const Vec3<R>& w2) {
  Vec3<R> r1w, r2w;
  return dot(c.n, xpbd_contact_velocity_of(c, B1, B2, v1, w1, v2, w2, r1w, r2w));
}
// its adjoint (adj_vn0 the output's): to the orientations and velocities of both bodies and the
// contact's points and normal (adj_c: r1, r2, n), accumulated
template <class T>
PHX_HD void adj_xpbd_contact_normal_velocity(const XpbdContact<T>& c, const XpbdBody<T>& B1,
                                             const XpbdBody<T>& B2, const Vec3<T>* v, T adj_vn0,
                                             XpbdBody<T>& adj_b1, XpbdBody<T>& adj_b2,
                                             Vec3<T>* adj_v, XpbdContact<T>& adj_c) {
  // v, adj_v: v1, w1, v2, w2
  using D = Dual<T, 35>;
  xpbd_impl::DualSeeds<T, 35> seed;
  const XpbdBody<D> b1 = seed.body(B1, false), b2 = seed.body(B2, false);
  Vec3<D> vd[4];
  for (int i = 0; i < 4; ++i) vd[i] = seed.vec(v[i]);
  const XpbdContact<D> cd = xpbd_impl::seeded_contact(c, seed);
  const D phi = adj_vn0 * xpbd_contact_normal_velocity(cd, b1, b2, vd[0], vd[1], vd[2], vd[3]);
  xpbd_impl::DualSlopes<T, 35> slope{phi};
  slope.body(adj_b1, false);
  slope.body(adj_b2, false);
  for (int i = 0; i < 4; ++i) slope.vec(adj_v[i]);
  slope.vec(adj_c.r1);
  slope.vec(adj_c.r2);
  slope.vec(adj_c.n);
}

// The contact's projections in one iteration, in place on the bodies B1, B2 and its multipliers
// lambda (normal, friction): the normal one while the gap is negative, then static friction
// against the poses P1, P2 of the substep's start. Any scalar R.
template <class R>
PHX_HD void xpbd_contact_project(const XpbdContact<R>& c, XpbdBody<R>& B1, XpbdBody<R>& B2,
                                 const XpbdBody<R>& P1, const XpbdBody<R>& P2, R h, R* lambda) {
  using xpbd_impl::rotate;
  Vec3<R> r1w = rotate(B1.q, c.r1), r2w = rotate(B2.q, c.r2);
  const R d = dot((B2.x + r2w) - (B1.x + r1w), c.n);
  if (!(d < R(0))) return;
  xpbd_positional(B1, B2, r1w, r2w, d * c.n, R(0), h, lambda[0]);
  r1w = rotate(B1.q, c.r1);
  r2w = rotate(B2.q, c.r2);
  const Vec3<R> dp =
      ((B2.x + r2w) - (P2.x + rotate(P2.q, c.r2))) - ((B1.x + r1w) - (P1.x + rotate(P1.q, c.r1)));
  const Vec3<R> dt = dp - dot(dp, c.n) * c.n;
  const R len = norm(dt);
  if (!(len > R(0))) return;
  const Vec3<R> t = (R(1) / len) * dt;
  const R w = xpbd_generalized_inverse_mass(B1, r1w, t) + xpbd_generalized_inverse_mass(B2, r2w, t);
  // static while |lambda_t| stays within mu |lambda_n| (both <= 0)
  if (!(w > R(0)) || !(lambda[1] - len / w > c.mu * lambda[0])) return;
  xpbd_positional(B1, B2, r1w, r2w, dt, R(0), h, lambda[1]);
}
// Its adjoint at the inputs it was given: adj_b1, adj_b2 and adj_lambda hold the outputs'
// adjoints and receive the inputs' (poses, inverse masses and inertias; multipliers); the
// start poses' go to adj_p1, adj_p2 and the geometry's to adj_c (r1, r2, n), accumulated.
template <class T>
PHX_HD void adj_xpbd_contact_project(const XpbdContact<T>& c, const XpbdBody<T>& B1,
                                     const XpbdBody<T>& B2, const XpbdBody<T>& P1,
                                     const XpbdBody<T>& P2, T h, const T* lambda,
                                     XpbdBody<T>& adj_b1, XpbdBody<T>& adj_b2, XpbdBody<T>& adj_p1,
                                     XpbdBody<T>& adj_p2, T* adj_lambda, XpbdContact<T>& adj_c) {
  constexpr int N = 47;  // B1, B2 (with masses), P1, P2, lambda, r1, r2, n
  using D = Dual<T, N>;
  xpbd_impl::DualSeeds<T, N> seed;
  XpbdBody<D> b1 = seed.body(B1, true), b2 = seed.body(B2, true);
  const XpbdBody<D> p1 = seed.body(P1, false), p2 = seed.body(P2, false);
  D l[2] = {seed(lambda[0]), seed(lambda[1])};
  const XpbdContact<D> cd = xpbd_impl::seeded_contact(c, seed);
  xpbd_contact_project(cd, b1, b2, p1, p2, D(h), l);
  const D phi = xpbd_impl::pair(adj_b1, b1) + xpbd_impl::pair(adj_b2, b2) + adj_lambda[0] * l[0] +
                adj_lambda[1] * l[1];
  adj_b1 = adj_b2 = XpbdBody<T>::zero();
  adj_lambda[0] = adj_lambda[1] = T(0);
  xpbd_impl::DualSlopes<T, N> slope{phi};
  slope.body(adj_b1, true);
  slope.body(adj_b2, true);
  slope.body(adj_p1, false);
  slope.body(adj_p2, false);
  slope(adj_lambda[0]);
  slope(adj_lambda[1]);
  slope.vec(adj_c.r1);
  slope.vec(adj_c.r2);
  slope.vec(adj_c.n);
}

// An impulse P at the contact's points (world lever arms r1w, r2w): +P on body 2, -P on body 1,
// in place on the velocities v (v1, w1, v2, w2). Any scalar R.
template <class R>
PHX_HD void xpbd_contact_impulse(const XpbdBody<R>& B1, const XpbdBody<R>& B2, const Vec3<R>& r1w,
                                 const Vec3<R>& r2w, const Vec3<R>& P, Vec3<R>* v) {
  v[0] -= B1.inv_mass * P;
  v[1] -= xpbd_inv_inertia_world(B1.q, B1.inv_inertia, cross(r1w, P));
  v[2] += B2.inv_mass * P;
  v[3] += xpbd_inv_inertia_world(B2.q, B2.inv_inertia, cross(r2w, P));
}

// The velocity pass of a contact that acted in the substep (Müller sec. 3.6), in place on the
// velocities v (v1, w1, v2, w2), at the substep's end poses B1, B2, its normal multiplier
// lambda_n, the normal velocity vn0 at the substep's start and gravity's magnitude g; returns
// whether it changed them. Two impulses at the points, each from the relative velocity u as the
// one before left it:
//   restitution  p_n = (max(-e vn0, 0) - u . n) / w_n along n, e = 0 when |vn0| <= 2 g h
//   friction     along -u_t, of magnitude min(|u_t| / w_t, mu (p_n + |lambda_n| / h)): what
//                stops the sliding, within mu times the substep's normal impulse, the
//                positional one |lambda_n| / h and the restitution's together (on a sliding
//                box, the positional one alone gave 87% of the friction, the two the analytic
//                deceleration; Müller's eq. bounds the velocity change by h mu f_n, without the
//                generalized inverse mass w_t: a third of it)
// with w_n, w_t the generalized inverse masses of the two points along each. Any scalar R.
template <class R>
PHX_HD bool xpbd_contact_velocity(const XpbdContact<R>& c, const XpbdBody<R>& B1,
                                  const XpbdBody<R>& B2, Vec3<R>* v, R lambda_n, R vn0, R h, R g) {
  Vec3<R> r1w, r2w;
  Vec3<R> u = xpbd_contact_velocity_of(c, B1, B2, v[0], v[1], v[2], v[3], r1w, r2w);
  bool changed = false;
  // restitution
  const R bounce = vn0 < -R(2) * g * h ? -c.e * vn0 : R(0);
  const R dvn = bounce - dot(c.n, u);
  const R wn =
      xpbd_generalized_inverse_mass(B1, r1w, c.n) + xpbd_generalized_inverse_mass(B2, r2w, c.n);
  R pn = R(0);
  if (dvn != R(0) && wn > R(0)) {
    pn = dvn / wn;
    xpbd_contact_impulse(B1, B2, r1w, r2w, pn * c.n, v);
    u = xpbd_contact_velocity_of(c, B1, B2, v[0], v[1], v[2], v[3], r1w, r2w);
    changed = true;
  }
  // dynamic friction, within mu times the substep's normal impulse
  const Vec3<R> ut = u - dot(c.n, u) * c.n;
  const R vt = norm(ut);
  const R limit = c.mu * (pn - lambda_n / h);
  if (vt > R(0) && limit > R(0)) {
    const Vec3<R> t = (R(1) / vt) * ut;
    const R w =
        xpbd_generalized_inverse_mass(B1, r1w, t) + xpbd_generalized_inverse_mass(B2, r2w, t);
    if (w > R(0)) {
      const R stop = vt / w;
      xpbd_contact_impulse(B1, B2, r1w, r2w, -(stop < limit ? stop : limit) * t, v);
      changed = true;
    }
  }
  return changed;
}

// Its adjoint at the inputs it was given: adj_v holds the adjoints of the velocities after it
// and receives those before; the poses' (orientations, inverse masses and inertias) go to
// adj_b1, adj_b2, the multiplier's to adj_lambda_n, vn0's to adj_vn0 and the geometry's to
// adj_c, accumulated.
template <class T>
PHX_HD void adj_xpbd_contact_velocity(const XpbdContact<T>& c, const XpbdBody<T>& B1,
                                      const XpbdBody<T>& B2, const Vec3<T>* v, T lambda_n, T vn0,
                                      T h, T g, Vec3<T>* adj_v, XpbdBody<T>& adj_b1,
                                      XpbdBody<T>& adj_b2, T& adj_lambda_n, T& adj_vn0,
                                      XpbdContact<T>& adj_c) {
  constexpr int N = 45;  // B1, B2 (with masses), v1, w1, v2, w2, lambda_n, vn0, r1, r2, n
  using D = Dual<T, N>;
  xpbd_impl::DualSeeds<T, N> seed;
  const XpbdBody<D> b1 = seed.body(B1, true), b2 = seed.body(B2, true);
  Vec3<D> vd[4];
  for (int i = 0; i < 4; ++i) vd[i] = seed.vec(v[i]);
  const D ln = seed(lambda_n), v0 = seed(vn0);
  const XpbdContact<D> cd = xpbd_impl::seeded_contact(c, seed);
  xpbd_contact_velocity(cd, b1, b2, vd, ln, v0, D(h), D(g));
  D phi(T(0));
  for (int i = 0; i < 4; ++i) {
    phi += xpbd_impl::pair(adj_v[i], vd[i]);
    adj_v[i] = Vec3<T>{};
  }
  xpbd_impl::DualSlopes<T, N> slope{phi};
  slope.body(adj_b1, true);
  slope.body(adj_b2, true);
  for (int i = 0; i < 4; ++i) slope.vec(adj_v[i]);
  slope(adj_lambda_n);
  slope(adj_vn0);
  slope.vec(adj_c.r1);
  slope.vec(adj_c.r2);
  slope.vec(adj_c.n);
}

// The start pose whose chord over h (xpbd_velocities) is the velocity (v, w) at the pose (x, q):
// x - h v, and conj(dq) q with dq = (sqrt(1 - |a|^2), a), a = h w / 2 (|a| < 1; a half turn or
// more in one substep takes a = a / |a|). The velocity pass changes velocities without moving
// the poses; this start pose keeps the changed velocity in the chord the step reports.
// Any scalar R.
template <class R>
PHX_HD void xpbd_chord_start(const Vec3<R>& x, const Quat<R>& q, const Vec3<R>& v, const Vec3<R>& w,
                             R h, Vec3<R>& x_prev, Quat<R>& q_prev) {
  x_prev = x - h * v;
  Vec3<R> a = (R(0.5) * h) * w;
  R s = R(1) - dot(a, a);
  if (!(s > R(0))) {
    a = (R(1) / norm(a)) * a;
    s = R(0);
  }
  const Quat<R> dq{s > R(0) ? sqrt(s) : R(0), a.x, a.y, a.z};
  q_prev = conjugate(dq) * q;
}
// its adjoint: from adj_x_prev, adj_q_prev to the pose and velocity, accumulated
template <class T>
PHX_HD void adj_xpbd_chord_start(const Vec3<T>& x, const Quat<T>& q, const Vec3<T>& v,
                                 const Vec3<T>& w, T h, const Vec3<T>& adj_x_prev,
                                 const Quat<T>& adj_q_prev, Vec3<T>& adj_x, Quat<T>& adj_q,
                                 Vec3<T>& adj_v, Vec3<T>& adj_w) {
  using D = Dual<T, 13>;
  xpbd_impl::DualSeeds<T, 13> seed;
  const Vec3<D> xd = seed.vec(x);
  const Quat<D> qd = seed.quat(q);
  const Vec3<D> vd = seed.vec(v), wd = seed.vec(w);
  Vec3<D> xp;
  Quat<D> qp;
  xpbd_chord_start(xd, qd, vd, wd, D(h), xp, qp);
  const D phi = xpbd_impl::pair(adj_x_prev, xp) + xpbd_impl::pair(adj_q_prev, qp);
  xpbd_impl::DualSlopes<T, 13> slope{phi};
  slope.vec(adj_x);
  slope.quat(adj_q);
  slope.vec(adj_v);
  slope.vec(adj_w);
}

}  // namespace phx
