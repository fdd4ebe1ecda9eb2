// Narrowphase of the pairs among planes, spheres and capsules, each followed by its adjoint.
//
// Conventions are MuJoCo's (engine_collision_primitive.c), so contacts compare one by one:
// sizes as geom_size (sphere: radius; capsule: radius, half-length along local z; plane: unused,
// infinite, normal +z of its frame); geom1 has the smaller type number; the normal points from
// geom1 to geom2; dist < 0 when penetrating; pos lies midway between the two surfaces along the
// normal. A contact is kept when dist <= margin, MuJoCo's test (a tie at dist == margin counts).
//
// Every pair function reads (g1, size1, g2, size2, margin), writes its contacts to out and
// returns how many. Its adjoint adj_<pair> takes the same inputs, the count n the forward
// returned and the adjoints of the n contacts (pos, normal, dist), and accumulates (+=) into the
// adjoints of both frames (position and the nine rotation-matrix entries, each taken as an
// independent input) and of the sizes. Adjoints differentiate the branch the forward took: they
// re-run its discrete choices (which end, which candidate) and apply the chain rule to the
// smooth formulas of that branch. Normals of spheres and capsules are the unit vector between
// the two nearest points, so they turn with both bodies (Nimble's contact-geometry rule).
#pragma once

#include "phalanx/collision/types.h"
#include "phalanx/math/dual.h"

namespace phx {

// MuJoCo's mjMINVAL: lengths, determinants and normalisers below it count as zero
constexpr double kCollisionMinVal = 1e-15;

namespace collision_impl {

// the adjoint of column c of a matrix: adj_M(:, c) += g
template <class T>
PHX_HD PHX_INLINE void add_to_col(Mat3<T>& adj_M, int c, const Vec3<T>& g) {
  adj_M.m[c] += g.x;
  adj_M.m[3 + c] += g.y;
  adj_M.m[6 + c] += g.z;
}

// v / |v| in place, returning |v|; below kCollisionMinVal v becomes +x (MuJoCo's mju_normalize3)
template <class T>
PHX_HD PHX_INLINE T normalize_in_place(Vec3<T>& v) {
  T len = sqrt(dot(v, v));
  if (len < T(kCollisionMinVal)) {
    v = Vec3<T>{T(1), T(0), T(0)};
  } else {
    T inv = T(1) / len;
    v = inv * v;
  }
  return len;
}

// adjoint of u = v / |v| (|v| = len, not degenerate): adj_v += (adj_u - u (u . adj_u)) / len
template <class T>
PHX_HD PHX_INLINE void adj_normalize(const Vec3<T>& u, T len, Vec3<T>& adj_v,
                                     const Vec3<T>& adj_u) {
  adj_v += (T(1) / len) * (adj_u - dot(u, adj_u) * u);
}

}  // namespace collision_impl

// ---- raw pair tests on plain values --------------------------------------------------------

// Sphere (c1, r1) against sphere (c2, r2): n = (c2 - c1) / |c2 - c1|, dist = |c2 - c1| - r1 - r2,
// pos = c1 + (r1 + dist / 2) n. Coincident centres take n from z1 x z2, the z axes of the two
// geoms (the normal of two crossing capsule axes), and +x when those are parallel too.
// Nimble (Werling et al. 2021) uses p = (r2 c1 + r1 c2) / (r1 + r2), which divides the centre line
// in the ratio of the radii; it agrees with MuJoCo's midway point at dist = 0, and in general
// p_mujoco - p_nimble = dist (r2 - r1) / (2 (r1 + r2)) n. Phalanx keeps MuJoCo's point, so that
// contacts compare with MuJoCo's one by one.
template <class T>
PHX_HD int sphere_sphere_raw(const Vec3<T>& c1, T r1, const Vec3<T>& c2, T r2, const Vec3<T>& z1,
                             const Vec3<T>& z2, T margin, ContactPoint<T>* out) {
  Vec3<T> d = c2 - c1;
  T len2 = dot(d, d);
  T reach = margin + r1 + r2;
  if (len2 > reach * reach) return 0;
  T len = sqrt(len2);
  out->dist = len - r1 - r2;
  out->normal = d;
  if (collision_impl::normalize_in_place(out->normal) < T(kCollisionMinVal)) {
    out->normal = cross(z1, z2);
    collision_impl::normalize_in_place(out->normal);
  }
  out->pos = c1 + (r1 + T(0.5) * out->dist) * out->normal;
  return 1;
}

// Adjoint of one contact of sphere_sphere_raw. At coincident centres (where the forward falls
// back to the z axes) the normal is held fixed and only the radii are differentiated.
template <class T>
PHX_HD void adj_sphere_sphere_raw(const Vec3<T>& c1, T r1, const Vec3<T>& c2, T r2,
                                  const ContactPoint<T>& adj, Vec3<T>& adj_c1, T& adj_r1,
                                  Vec3<T>& adj_c2, T& adj_r2) {
  Vec3<T> d = c2 - c1;
  T len = sqrt(dot(d, d));
  bool degenerate = len < T(kCollisionMinVal);
  Vec3<T> n = degenerate ? Vec3<T>{} : (T(1) / len) * d;  // n itself is unused when degenerate
  T dist = len - r1 - r2;
  // pos = c1 + k n, k = r1 + dist / 2
  T k = r1 + T(0.5) * dist;
  adj_c1 += adj.pos;
  Vec3<T> adj_n = adj.normal + k * adj.pos;
  T adj_k = dot(n, adj.pos);
  adj_r1 += adj_k;
  T adj_dist = adj.dist + T(0.5) * adj_k;
  // dist = len - r1 - r2
  adj_r1 -= adj_dist;
  adj_r2 -= adj_dist;
  if (degenerate) return;
  // n = d / len, len = |d|
  Vec3<T> adj_d = adj_dist * n;
  collision_impl::adj_normalize(n, len, adj_d, adj_n);
  adj_c2 += adj_d;
  adj_c1 -= adj_d;
}

// Plane (point p, unit normal n) against sphere (c, r): dist = n.(c - p) - r, normal n,
// pos = c - (r + dist / 2) n.
template <class T>
PHX_HD int plane_sphere_raw(const Vec3<T>& p, const Vec3<T>& n, const Vec3<T>& c, T r, T margin,
                            ContactPoint<T>* out) {
  T cdist = dot(n, c - p);
  if (cdist > margin + r) return 0;
  out->dist = cdist - r;
  out->normal = n;
  out->pos = c - (r + T(0.5) * out->dist) * n;
  return 1;
}

template <class T>
PHX_HD void adj_plane_sphere_raw(const Vec3<T>& p, const Vec3<T>& n, const Vec3<T>& c, T r,
                                 const ContactPoint<T>& adj, Vec3<T>& adj_p, Vec3<T>& adj_n,
                                 Vec3<T>& adj_c, T& adj_r) {
  T cdist = dot(n, c - p);
  T k = r + T(0.5) * (cdist - r);
  // pos = c - k n, normal = n
  adj_c += adj.pos;
  adj_n += adj.normal - k * adj.pos;
  T adj_k = -dot(n, adj.pos);
  // k = r + dist / 2, dist = cdist - r
  T adj_dist = adj.dist + T(0.5) * adj_k;
  adj_r += adj_k - adj_dist;
  // cdist = n . (c - p)
  adj_n += adj_dist * (c - p);
  adj_c += adj_dist * n;
  adj_p -= adj_dist * n;
}

// ---- plane : sphere ------------------------------------------------------------------------

template <class T>
PHX_HD int plane_sphere(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2,
                        const T* size2, T margin, ContactPoint<T>* out) {
  (void)size1;
  return plane_sphere_raw(g1.pos, g1.rot.col(2), g2.pos, size2[0], margin, out);
}

template <class T>
PHX_HD void adj_plane_sphere(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2,
                             const T* size2, T margin, int n, const ContactPoint<T>* adj,
                             GeomFrame<T>& adj_g1, T* adj_size1, GeomFrame<T>& adj_g2,
                             T* adj_size2) {
  (void)size1, (void)margin, (void)adj_size1;
  if (n < 1) return;
  Vec3<T> adj_n;
  adj_plane_sphere_raw(g1.pos, g1.rot.col(2), g2.pos, size2[0], adj[0], adj_g1.pos, adj_n,
                       adj_g2.pos, adj_size2[0]);
  collision_impl::add_to_col(adj_g1.rot, 2, adj_n);
}

// ---- plane : capsule -----------------------------------------------------------------------

// the two ends of the capsule, c +- h a, tested as spheres in that order; contacts are packed
template <class T>
PHX_HD int plane_capsule(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2,
                         const T* size2, T margin, ContactPoint<T>* out) {
  (void)size1;
  Vec3<T> n = g1.rot.col(2), seg = size2[1] * g2.rot.col(2);
  int cnt = plane_sphere_raw(g1.pos, n, g2.pos + seg, size2[0], margin, out);
  cnt += plane_sphere_raw(g1.pos, n, g2.pos - seg, size2[0], margin, out + cnt);
  return cnt;
}

template <class T>
PHX_HD void adj_plane_capsule(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2,
                              const T* size2, T margin, int n, const ContactPoint<T>* adj,
                              GeomFrame<T>& adj_g1, T* adj_size1, GeomFrame<T>& adj_g2,
                              T* adj_size2) {
  (void)size1, (void)adj_size1;
  Vec3<T> nrm = g1.rot.col(2), axis = g2.rot.col(2);
  Vec3<T> adj_nrm, adj_axis;
  int k = 0;  // contact index
  for (int end = 0; end < 2 && k < n; ++end) {
    T side = end == 0 ? T(1) : T(-1);
    Vec3<T> c = g2.pos + (side * size2[1]) * axis;
    ContactPoint<T> tmp;
    if (!plane_sphere_raw(g1.pos, nrm, c, size2[0], margin, &tmp)) continue;
    // c = pos2 + side h axis
    Vec3<T> adj_c;
    adj_plane_sphere_raw(g1.pos, nrm, c, size2[0], adj[k], adj_g1.pos, adj_nrm, adj_c,
                         adj_size2[0]);
    adj_g2.pos += adj_c;
    adj_axis += (side * size2[1]) * adj_c;
    adj_size2[1] += side * dot(axis, adj_c);
    ++k;
  }
  collision_impl::add_to_col(adj_g1.rot, 2, adj_nrm);
  collision_impl::add_to_col(adj_g2.rot, 2, adj_axis);
}

// ---- sphere : sphere -----------------------------------------------------------------------

template <class T>
PHX_HD int sphere_sphere(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2,
                         const T* size2, T margin, ContactPoint<T>* out) {
  return sphere_sphere_raw(g1.pos, size1[0], g2.pos, size2[0], g1.rot.col(2), g2.rot.col(2), margin,
                           out);
}

template <class T>
PHX_HD void adj_sphere_sphere(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2,
                              const T* size2, T margin, int n, const ContactPoint<T>* adj,
                              GeomFrame<T>& adj_g1, T* adj_size1, GeomFrame<T>& adj_g2,
                              T* adj_size2) {
  (void)margin;
  if (n < 1) return;
  adj_sphere_sphere_raw(g1.pos, size1[0], g2.pos, size2[0], adj[0], adj_g1.pos, adj_size1[0],
                        adj_g2.pos, adj_size2[0]);
}

// ---- sphere : capsule ----------------------------------------------------------------------

// the sphere against the point of the capsule's segment nearest its centre:
// q = c2 + x a2, x = clamp(a2 . (c1 - c2), -h, h)
template <class T>
PHX_HD int sphere_capsule(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2,
                          const T* size2, T margin, ContactPoint<T>* out) {
  Vec3<T> axis = g2.rot.col(2);
  T x = clamp(dot(axis, g1.pos - g2.pos), -size2[1], size2[1]);
  return sphere_sphere_raw(g1.pos, size1[0], g2.pos + x * axis, size2[0], g1.rot.col(2), axis,
                           margin, out);
}

template <class T>
PHX_HD void adj_sphere_capsule(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2,
                               const T* size2, T margin, int n, const ContactPoint<T>* adj,
                               GeomFrame<T>& adj_g1, T* adj_size1, GeomFrame<T>& adj_g2,
                               T* adj_size2) {
  (void)margin;
  if (n < 1) return;
  Vec3<T> axis = g2.rot.col(2), dif = g1.pos - g2.pos;
  T proj = dot(axis, dif);
  T x = clamp(proj, -size2[1], size2[1]);
  Vec3<T> q = g2.pos + x * axis;
  Vec3<T> adj_q;
  adj_sphere_sphere_raw(g1.pos, size1[0], q, size2[0], adj[0], adj_g1.pos, adj_size1[0], adj_q,
                        adj_size2[0]);
  // q = pos2 + x axis
  adj_g2.pos += adj_q;
  Vec3<T> adj_axis = x * adj_q;
  T adj_x = dot(axis, adj_q);
  if (proj > size2[1]) {
    adj_size2[1] += adj_x;
  } else if (proj < -size2[1]) {
    adj_size2[1] -= adj_x;
  } else {  // x = axis . (pos1 - pos2)
    adj_axis += adj_x * dif;
    adj_g1.pos += adj_x * axis;
    adj_g2.pos -= adj_x * axis;
  }
  collision_impl::add_to_col(adj_g2.rot, 2, adj_axis);
}

// ---- capsule : capsule ---------------------------------------------------------------------

namespace collision_impl {

// Parameters (x1, x2) in [-1, 1] of the nearest points p1 + x1 a1 and p2 + x2 a2 of two
// segments with half-axes a1, a2, from the normal equations of |p1 + x1 a1 - p2 - x2 a2|^2:
//   [ma mb; mb mc] [x1; x2] = [u; v],  ma = a1.a1, mb = -a1.a2, mc = a2.a2,
//   u = -a1.(p1 - p2), v = a2.(p1 - p2), det = ma mc - mb^2.
// candidate -1 is the general case, with MuJoCo's order of clamps: x1 first, re-solving x2,
// then x2, re-solving and clamping x1. Candidates 0 and 1 are for parallel axes: the end
// x2 = -1 or x2 = +1 of segment 2, projected on segment 1 (x1 = (u - x2 mb) / ma); when that
// projection falls outside segment 1 it is clamped to segment 1's end and x2 re-solved and
// clamped. A zero-length segment (ma or mc below kCollisionMinVal) keeps its parameter at 0.
// S may be a Dual: the adjoint runs this on Dual<T, 5> for the Jacobian with respect to
// (ma, mb, mc, u, v).
template <class S>
PHX_HD void segment_params(S ma, S mb, S mc, S u, S v, int candidate, S& x1, S& x2) {
  const S one(1), tiny(kCollisionMinVal);
  if (candidate >= 0) {
    S end = candidate == 0 ? -one : one;
    S proj = ma < tiny ? S(0) : (u - end * mb) / ma;
    if (!(ma < tiny) && proj >= -one && proj <= one) {
      x1 = proj;
      x2 = end;
    } else {
      x1 = clamp(proj, -one, one);
      x2 = mc < tiny ? S(0) : clamp((v - mb * x1) / mc, -one, one);
    }
    return;
  }
  S det = ma * mc - mb * mb;
  x1 = (mc * u - mb * v) / det;
  x2 = (ma * v - mb * u) / det;
  if (x1 > one) {
    x1 = one;
    x2 = (v - mb) / mc;
  } else if (x1 < -one) {
    x1 = -one;
    x2 = (v + mb) / mc;
  }
  if (x2 > one) {
    x2 = one;
    x1 = clamp((u - mb) / ma, -one, one);
  } else if (x2 < -one) {
    x2 = -one;
    x1 = clamp((u + mb) / ma, -one, one);
  }
}

// The contacts of a capsule pair as MuJoCo 4.0 makes them. Axes count as parallel when
// sin^2 of their angle, det / (ma mc), is below 1e-8 (or det below kCollisionMinVal, a
// zero-length segment): then the two ends of the overlap of the segments along the axis are
// tested, in increasing x1 (with no overlap both are the same pair of segment ends, and both
// are reported, as MuJoCo does); else the single nearest pair. Writes the contacts and, per
// contact, the candidate of segment_params that produced it.
//
// MuJoCo 3.12's source (mjraw_CapsuleCapsule) instead probes x1 = +-1 then x2 = +-1 when
// |det| < mjMINVAL; MuJoCo 4.0's behaviour, threshold and order above were established from
// its output and match it to round-off (tests/python/test_collision_mujoco.py).
template <class T>
PHX_HD int capsule_capsule_impl(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2,
                                const T* size2, T margin, ContactPoint<T>* out, int* candidate) {
  Vec3<T> z1 = g1.rot.col(2), z2 = g2.rot.col(2);
  Vec3<T> a1 = size1[1] * z1, a2 = size2[1] * z2, dif = g1.pos - g2.pos;
  T ma = dot(a1, a1), mb = -dot(a1, a2), mc = dot(a2, a2), u = -dot(a1, dif), v = dot(a2, dif);
  T det = ma * mc - mb * mb;
  bool parallel = !(det >= T(1e-8) * ma * mc) || !(det >= T(kCollisionMinVal));
  int order[2] = {-1, -1}, nprobe = 1;
  if (parallel) {
    // the end of segment 2 with the smaller projection on segment 1 first: (u - x2 mb) / ma is
    // smaller at x2 = +1 when mb > 0 (the axes point opposite ways)
    nprobe = 2;
    bool minus_first = !(mb > T(0));
    order[0] = minus_first ? 0 : 1;
    order[1] = minus_first ? 1 : 0;
  }
  int cnt = 0;
  for (int k = 0; k < nprobe; ++k) {
    T x1, x2;
    segment_params(ma, mb, mc, u, v, order[k], x1, x2);
    if (sphere_sphere_raw(g1.pos + x1 * a1, size1[0], g2.pos + x2 * a2, size2[0], z1, z2, margin,
                          out + cnt)) {
      candidate[cnt++] = order[k];
    }
  }
  return cnt;
}

}  // namespace collision_impl

// the segments' nearest points as spheres; parallel axes give up to two contacts
template <class T>
PHX_HD int capsule_capsule(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2,
                           const T* size2, T margin, ContactPoint<T>* out) {
  int candidate[2];
  return collision_impl::capsule_capsule_impl(g1, size1, g2, size2, margin, out, candidate);
}

// The chain: contact <- sphere pair at p1 + x1 a1, p2 + x2 a2 (hand-written) <- (x1, x2) from
// (ma, mb, mc, u, v), a clamped 2x2 solve whose local Jacobian comes from running
// segment_params on Dual<T, 5> <- (a1, a2, p1 - p2) (hand-written).
template <class T>
PHX_HD void adj_capsule_capsule(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2,
                                const T* size2, T margin, int n, const ContactPoint<T>* adj,
                                GeomFrame<T>& adj_g1, T* adj_size1, GeomFrame<T>& adj_g2,
                                T* adj_size2) {
  using D = Dual<T, 5>;
  ContactPoint<T> fwd[2];
  int candidate[2];
  int cnt = collision_impl::capsule_capsule_impl(g1, size1, g2, size2, margin, fwd, candidate);
  if (cnt != n) return;  // the forward's branch is not reproduced (see adj_collide)
  Vec3<T> z1 = g1.rot.col(2), z2 = g2.rot.col(2);
  Vec3<T> a1 = size1[1] * z1, a2 = size2[1] * z2, dif = g1.pos - g2.pos;
  D q[5] = {D(dot(a1, a1)), D(-dot(a1, a2)), D(dot(a2, a2)), D(-dot(a1, dif)), D(dot(a2, dif))};
  for (int i = 0; i < 5; ++i) q[i].d[i] = T(1);
  Vec3<T> adj_a1, adj_a2, adj_dif;
  for (int k = 0; k < n; ++k) {
    D x1, x2;
    collision_impl::segment_params(q[0], q[1], q[2], q[3], q[4], candidate[k], x1, x2);
    Vec3<T> c1 = g1.pos + x1.v * a1, c2 = g2.pos + x2.v * a2;
    Vec3<T> adj_c1, adj_c2;
    adj_sphere_sphere_raw(c1, size1[0], c2, size2[0], adj[k], adj_c1, adj_size1[0], adj_c2,
                          adj_size2[0]);
    // c1 = p1 + x1 a1, c2 = p2 + x2 a2
    adj_g1.pos += adj_c1;
    adj_g2.pos += adj_c2;
    adj_a1 += x1.v * adj_c1;
    adj_a2 += x2.v * adj_c2;
    T adj_x1 = dot(a1, adj_c1), adj_x2 = dot(a2, adj_c2);
    // (x1, x2) <- (ma, mb, mc, u, v)
    T g[5];
    for (int i = 0; i < 5; ++i) g[i] = adj_x1 * x1.d[i] + adj_x2 * x2.d[i];
    // ma = a1.a1, mb = -a1.a2, mc = a2.a2, u = -a1.dif, v = a2.dif
    adj_a1 += (T(2) * g[0]) * a1 - g[1] * a2 - g[3] * dif;
    adj_a2 += (T(2) * g[2]) * a2 - g[1] * a1 + g[4] * dif;
    adj_dif += g[4] * a2 - g[3] * a1;
  }
  // a = h z, dif = p1 - p2
  collision_impl::add_to_col(adj_g1.rot, 2, size1[1] * adj_a1);
  collision_impl::add_to_col(adj_g2.rot, 2, size2[1] * adj_a2);
  adj_size1[1] += dot(z1, adj_a1);
  adj_size2[1] += dot(z2, adj_a2);
  adj_g1.pos += adj_dif;
  adj_g2.pos -= adj_dif;
}

}  // namespace phx
