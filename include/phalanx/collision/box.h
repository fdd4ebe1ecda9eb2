// Narrowphase of the pairs involving boxes (plane, sphere, capsule and box against a box), each
// followed by its adjoint. Conventions, signatures and the adjoint contract are those of
// collision/primitives.h; the algorithms are MuJoCo's (engine_collision_primitive.c:
// mjc_PlaneBox; engine_collision_box.c: mjraw_SphereBox, mjraw_CapsuleBox, and the
// separating-axis mjc_BoxBox of MuJoCo 3.12 and 4.0), so the manifolds agree contact by contact.
//
// A box's face normal is a column of its rotation matrix: it depends on the box's rotation only,
// not on where on the face the contact lies (Nimble's rule for polygonal faces). Edge and corner
// contacts of a sphere or capsule take the unit vector between the nearest points, and a
// box-box edge-edge contact the normalised cross product of the two edges.
//
// Adjoints: plane-box and sphere-box are hand-written. Capsule-box is hand-written except the
// segment parameters of its one or two contact points, whose local Jacobian comes from running
// the selection code on Dual numbers. Box-box, a separating-axis search followed by polygon
// clipping, is differentiated by running box_box itself on Dual numbers, a few of its 30 inputs
// (both frames and both sizes) at a time, as quat.h's adj_integrate does.
#pragma once

#include "phalanx/collision/primitives.h"

namespace phx {

namespace collision_impl {

// the float or double underneath a scalar that may be a Dual
template <class T>
struct RealOf {
  using type = T;
};
template <class T, int N>
struct RealOf<Dual<T, N>> {
  using type = typename RealOf<T>::type;
};
template <class T>
constexpr bool kSinglePrecision = sizeof(typename RealOf<T>::type) == sizeof(float);

// a corner (+-s0, +-s1, +-s2) of a box: bit k of `corner` set means +s_k
template <class T>
PHX_HD PHX_INLINE Vec3<T> box_corner(int corner, const T* s) {
  return {corner & 1 ? s[0] : -s[0], corner & 2 ? s[1] : -s[1], corner & 4 ? s[2] : -s[2]};
}

}  // namespace collision_impl

// ---- plane : box ---------------------------------------------------------------------------

namespace collision_impl {

// The box corners below the plane's margin band, at most four, in corner order (bit k of the
// index: +s_k); corners on the upper side of the box centre (n . (R v) > 0) are skipped.
// corner[k] receives the corner of contact k.
template <class T>
PHX_HD int plane_box_impl(const GeomFrame<T>& g1, const GeomFrame<T>& g2, const T* size2, T margin,
                          ContactPoint<T>* out, int* corner) {
  Vec3<T> n = g1.rot.col(2);
  T dist0 = dot(n, g2.pos - g1.pos);
  int cnt = 0;
  for (int i = 0; i < 8 && cnt < 4; ++i) {
    Vec3<T> c = g2.rot * box_corner(i, size2);  // corner relative to the box centre
    T ldist = dot(n, c);
    if (dist0 + ldist > margin || ldist > T(0)) continue;
    ContactPoint<T>& con = out[cnt];
    con.dist = dist0 + ldist;
    con.normal = n;
    con.pos = g2.pos + c - (T(0.5) * con.dist) * n;
    corner[cnt++] = i;
  }
  return cnt;
}

}  // namespace collision_impl

// corner k: dist = n.(p2 - p1) + n.(R2 v_k), pos = p2 + R2 v_k - (dist / 2) n, normal n
template <class T>
PHX_HD int plane_box(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2, const T* size2,
                     T margin, ContactPoint<T>* out) {
  (void)size1;
  int corner[4];
  return collision_impl::plane_box_impl(g1, g2, size2, margin, out, corner);
}

template <class T>
PHX_HD void adj_plane_box(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2,
                          const T* size2, T margin, int n, const ContactPoint<T>* adj,
                          GeomFrame<T>& adj_g1, T* adj_size1, GeomFrame<T>& adj_g2, T* adj_size2) {
  (void)size1, (void)adj_size1;
  ContactPoint<T> fwd[4];
  int corner[4];
  if (collision_impl::plane_box_impl(g1, g2, size2, margin, fwd, corner) != n) return;
  Vec3<T> nrm = g1.rot.col(2);
  Vec3<T> adj_nrm;
  for (int k = 0; k < n; ++k) {
    Vec3<T> v = collision_impl::box_corner(corner[k], size2);
    Vec3<T> c = g2.rot * v;
    T dist = fwd[k].dist;
    // pos = p2 + c - (dist / 2) n, normal = n
    adj_g2.pos += adj[k].pos;
    Vec3<T> adj_c = adj[k].pos;
    adj_nrm += adj[k].normal - (T(0.5) * dist) * adj[k].pos;
    T adj_dist = adj[k].dist - T(0.5) * dot(nrm, adj[k].pos);
    // dist = n . (p2 - p1 + c)
    adj_nrm += adj_dist * (g2.pos - g1.pos + c);
    adj_g2.pos += adj_dist * nrm;
    adj_g1.pos -= adj_dist * nrm;
    adj_c += adj_dist * nrm;
    // c = R2 v, v_i = +-s_i
    Vec3<T> adj_v;
    adj_mul(g2.rot, v, adj_g2.rot, adj_v, adj_c);
    for (int i = 0; i < 3; ++i) adj_size2[i] += (corner[k] >> i & 1) ? adj_v[i] : -adj_v[i];
  }
  collision_impl::add_to_col(adj_g1.rot, 2, adj_nrm);
}

// ---- sphere : box --------------------------------------------------------------------------

namespace collision_impl {

// The sphere centre c in the box frame (center) and the box point nearest it, clamped (the
// centre clamped to the box; a half-size of zero leaves its coordinate unclamped, as MuJoCo's
// mju_clampVec); u = the unit vector from center to clamped. Returns |clamped - center|.
template <class T>
PHX_HD T sphere_box_local(const Vec3<T>& c, const GeomFrame<T>& box, const T* s, Vec3<T>& center,
                          Vec3<T>& clamped, Vec3<T>& u) {
  center = mul_transpose(box.rot, c - box.pos);
  clamped = center;
  for (int i = 0; i < 3; ++i)
    if (s[i] > T(0)) clamped[i] = clamp(center[i], -s[i], s[i]);
  u = clamped - center;
  return normalize_in_place(u);
}

// For a centre inside the box: the nearest of its six faces (face 2i + 1 at +s_i, face 2i at
// -s_i, the first on ties) and the distance to it
template <class T>
PHX_HD int nearest_box_face(const Vec3<T>& center, const T* s, T& closest) {
  closest = T(2) * (s[0] + s[1] + s[2]);
  int face = 0;
  for (int k = 0; k < 6; ++k) {
    T gap = abs((k % 2 ? s[k / 2] : -s[k / 2]) - center[k / 2]);
    if (closest > gap) {
      closest = gap;
      face = k;
    }
  }
  return face;
}

}  // namespace collision_impl

// Sphere (centre c, radius r) against a box, in the box frame. Outside the box, n = R u with u
// the unit vector from the centre to the nearest box point, dist = (their distance) - r, pos
// midway between that point and the deepest sphere point. With the centre inside (distance
// below kCollisionMinVal) the nearest face decides: n = R (-+e_i) pointing into that face,
// dist = -(distance to the face) - r.
template <class T>
PHX_HD int sphere_box_raw(const Vec3<T>& c, T r, const GeomFrame<T>& box, const T* s, T margin,
                          ContactPoint<T>* out) {
  Vec3<T> center, clamped, u;
  T len = collision_impl::sphere_box_local(c, box, s, center, clamped, u);
  if (len - r > margin) return 0;
  Vec3<T> pos_local;
  if (len <= T(kCollisionMinVal)) {
    T closest;
    int face = collision_impl::nearest_box_face(center, s, closest);
    Vec3<T> nearest;  // -+e_i: into the face
    nearest[face / 2] = face % 2 ? T(-1) : T(1);
    pos_local = center + (T(0.5) * (r - closest)) * nearest;
    out->normal = box.rot * nearest;
    out->dist = -closest - r;
  } else {
    // midway between the box point and the deepest sphere point, centre + r u
    pos_local = T(0.5) * (clamped + center) + (T(0.5) * r) * u;
    out->normal = box.rot * u;
    out->dist = len - r;
  }
  out->pos = box.rot * pos_local + box.pos;
  return 1;
}

template <class T>
PHX_HD void adj_sphere_box_raw(const Vec3<T>& c, T r, const GeomFrame<T>& box, const T* s,
                               const ContactPoint<T>& adj, Vec3<T>& adj_c, T& adj_r,
                               GeomFrame<T>& adj_box, T* adj_s) {
  Vec3<T> center, clamped, u;
  T len = collision_impl::sphere_box_local(c, box, s, center, clamped, u);
  Vec3<T> adj_center, adj_clamped;
  if (len <= T(kCollisionMinVal)) {
    T closest;
    int face = collision_impl::nearest_box_face(center, s, closest);
    Vec3<T> nearest;
    nearest[face / 2] = face % 2 ? T(-1) : T(1);
    Vec3<T> pos_local = center + (T(0.5) * (r - closest)) * nearest;
    // pos = R pos_local + p, normal = R nearest, dist = -closest - r
    Vec3<T> adj_pos_local, adj_nearest;  // nearest is constant: adj_nearest is dropped
    adj_mul(box.rot, pos_local, adj_box.rot, adj_pos_local, adj.pos);
    adj_box.pos += adj.pos;
    adj_mul(box.rot, nearest, adj_box.rot, adj_nearest, adj.normal);
    T adj_closest = -adj.dist;
    adj_r -= adj.dist;
    // pos_local = center + (r - closest) / 2 nearest
    adj_center += adj_pos_local;
    T adj_k = T(0.5) * dot(nearest, adj_pos_local);
    adj_r += adj_k;
    adj_closest -= adj_k;
    // closest = |face_value - center_i|, face_value = +-s_i
    int i = face / 2;
    T face_value = face % 2 ? s[i] : -s[i];
    T sign = face_value - center[i] >= T(0) ? T(1) : T(-1);
    adj_s[i] += face % 2 ? sign * adj_closest : -sign * adj_closest;
    adj_center[i] -= sign * adj_closest;
  } else {
    Vec3<T> pos_local = T(0.5) * (clamped + center) + (T(0.5) * r) * u;
    Vec3<T> adj_pos_local, adj_u;
    adj_mul(box.rot, pos_local, adj_box.rot, adj_pos_local, adj.pos);
    adj_box.pos += adj.pos;
    adj_mul(box.rot, u, adj_box.rot, adj_u, adj.normal);
    // dist = len - r
    T adj_len = adj.dist;
    adj_r -= adj.dist;
    // pos_local = (clamped + center) / 2 + (r / 2) u
    adj_clamped += T(0.5) * adj_pos_local;
    adj_center += T(0.5) * adj_pos_local;
    adj_r += T(0.5) * dot(u, adj_pos_local);
    adj_u += (T(0.5) * r) * adj_pos_local;
    // u = t / len, len = |t|, t = clamped - center
    Vec3<T> adj_t = adj_len * u;
    collision_impl::adj_normalize(u, len, adj_t, adj_u);
    adj_clamped += adj_t;
    adj_center -= adj_t;
    // clamped_i = +-s_i at a clamp, else center_i
    for (int i = 0; i < 3; ++i) {
      if (s[i] > T(0) && center[i] > s[i]) {
        adj_s[i] += adj_clamped[i];
      } else if (s[i] > T(0) && center[i] < -s[i]) {
        adj_s[i] -= adj_clamped[i];
      } else {
        adj_center[i] += adj_clamped[i];
      }
    }
  }
  // center = R^T (c - p)
  Vec3<T> adj_d;
  adj_mul_transpose(box.rot, c - box.pos, adj_box.rot, adj_d, adj_center);
  adj_c += adj_d;
  adj_box.pos -= adj_d;
}

template <class T>
PHX_HD int sphere_box(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2,
                      const T* size2, T margin, ContactPoint<T>* out) {
  return sphere_box_raw(g1.pos, size1[0], g2, size2, margin, out);
}

template <class T>
PHX_HD void adj_sphere_box(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2,
                           const T* size2, T margin, int n, const ContactPoint<T>* adj,
                           GeomFrame<T>& adj_g1, T* adj_size1, GeomFrame<T>& adj_g2, T* adj_size2) {
  (void)margin;
  if (n < 1) return;
  adj_sphere_box_raw(g1.pos, size1[0], g2, size2, adj[0], adj_g1.pos, adj_size1[0], adj_g2,
                     adj_size2);
}

// ---- capsule : box -------------------------------------------------------------------------

namespace collision_impl {

// r = num / |den| lowers `best` when smaller; a zero denominator (infinite ratio) never does
template <class S>
PHX_HD PHX_INLINE void lower_to_ratio(S& best, S num, S den) {
  S a = abs(den);
  if (a > S(0) && num / a < best) best = num / a;
}

// The box feature nearest a capsule's segment, compared by squared distance (capsule_box_params,
// step 1). kind -3 / -1: the segment end t = -1 / +1 over a face (face = the clamped axis, -1
// when the end is inside); kind 0..8: an edge, 3 e + f with e, f in {0, 1, 2} = clamped at the
// lower end, free, clamped at the upper end, of the edge (e) and of the segment (f); -4: none
// nearer than the initial bound.
template <class S>
struct CapsuleBoxFeature {
  S best;         // squared distance (initially the search bound)
  S seg{0};       // segment parameter of the nearest point
  S edge_pos{0};  // its parameter along the edge, edge kinds
  int kind = -4, face = -1;
  int corner = 0, edge = 0;  // edge kinds: the edge's end nearer the contact, the edge's axis
};

// 1a. the ends of the segment (centre p, half-axis ha) over a face of the box or inside it
template <class S>
PHX_HD PHX_INLINE void capsule_box_ends(const Vec3<S>& p, const Vec3<S>& ha, const S* s,
                                        CapsuleBoxFeature<S>& f) {
  for (int end = -1; end <= 1; end += 2) {
    Vec3<S> q = p + S(end) * ha;
    Vec3<S> qc = q;
    int nclamp = 0, clamped_axis = -1;
    for (int j = 0; j < 3; ++j) {
      if (q[j] < -s[j] || q[j] > s[j]) {
        qc[j] = q[j] < -s[j] ? -s[j] : s[j];
        ++nclamp;
        clamped_axis = j;
      }
    }
    if (nclamp > 1) continue;
    Vec3<S> gap = qc - q;
    S d2 = dot(gap, gap);
    if (d2 < f.best) {
      f.best = d2;
      f.seg = S(end);
      f.kind = end - 2;
      f.face = clamped_axis;
    }
  }
}

// 1b. the segment against each edge: edge j through the edge centre e (corner i with
// coordinate j zeroed), points e + x1 s_j e_j; segment points p + x2 ha
template <class S>
PHX_HD PHX_INLINE void capsule_box_edges(const Vec3<S>& p, const Vec3<S>& ha, const S* s,
                                         CapsuleBoxFeature<S>& f) {
  const S one(1), tiny(kCollisionMinVal);
  for (int j = 0; j < 3; ++j) {
    for (int i = 0; i < 8; ++i) {
      if (i & (1 << j)) continue;
      Vec3<S> e = box_corner(i, s);
      e[j] = S(0);
      Vec3<S> dif = e - p;
      S ma = s[j] * s[j], mb = -s[j] * ha[j], mc = dot(ha, ha);
      S u = -s[j] * dif[j], v = dot(ha, dif);
      S det = ma * mc - mb * mb;
      if (abs(det) < tiny) continue;
      S x1 = (mc * u - mb * v) / det, x2 = (ma * v - mb * u) / det;
      int c1 = 1, c2 = 1;  // 0, 1, 2: clamped low, free, clamped high
      if (x1 > one) {
        x1 = one, c1 = 2, x2 = (v - mb) / mc;
      } else if (x1 < -one) {
        x1 = -one, c1 = 0, x2 = (v + mb) / mc;
      }
      if (x2 > one || x2 < -one) {
        S sign = x2 > one ? one : -one;
        x2 = sign, c2 = x2 > S(0) ? 2 : 0;
        x1 = (u - sign * mb) / ma;
        if (x1 > one) {
          x1 = one, c1 = 2;
        } else if (x1 < -one) {
          x1 = -one, c1 = 0;
        }
      }
      Vec3<S> gap = dif - x2 * ha;
      gap[j] += s[j] * x1;
      S d2 = dot(gap, gap);
      if (d2 < f.best - tiny) {  // the slack keeps segments parallel to a face on the face test
        f.best = d2;
        f.seg = x2;
        f.edge_pos = x1;
        f.corner = i + (c1 == 2 ? 1 << j : 0);  // the edge end nearer the contact
        f.edge = j;
        f.kind = 3 * c1 + c2;
      }
    }
  }
}

// 2, from a corner of the box (f an edge feature clamped at an end of the edge): the octant of
// the axis relative to the corner decides; false when the axis points at or away from it
template <class S>
PHX_HD PHX_INLINE bool capsule_box_second_at_corner(const CapsuleBoxFeature<S>& f, const Vec3<S>& a,
                                                    const Vec3<S>& ha, const S* s, int axis_octant,
                                                    S& second) {
  const S one(1), two(2);
  int rel = axis_octant ^ f.corner;
  if (rel == 0 || rel == 7) return false;
  S mul, to_end, to_start;
  if (rel == 1 || rel == 2 || rel == 4) {
    mul = one, to_end = one - f.seg, to_start = one + f.seg;
  } else {
    mul = -one, rel = 7 - rel, to_start = one - f.seg, to_end = one + f.seg;
  }
  int ax = rel == 1 ? 0 : (rel == 2 ? 1 : 2), ax1 = (ax + 1) % 3, ax2 = (ax + 2) % 3;
  if (a[ax] * a[ax] > S(0.5)) {  // along the edge through the corner
    second = to_end;
    lower_to_ratio(second, two * s[ax], ha[ax]);
    second = mul * second;
  } else {  // across a face
    second = to_start;
    lower_to_ratio(second, two * s[ax1], ha[ax1]);
    lower_to_ratio(second, two * s[ax2], ha[ax2]);
    second = -mul * second;
  }
  return true;
}

// 2, from the middle of an edge: only when the segment crosses the edge at a low angle over one
// of its two faces (not in a T)
template <class S>
PHX_HD PHX_INLINE bool capsule_box_second_on_edge(const CapsuleBoxFeature<S>& f, const Vec3<S>& a,
                                                  const Vec3<S>& ha, const S* s, int axis_octant,
                                                  S& second) {
  const S one(1), two(2);
  int rel = (axis_octant ^ f.corner) & (7 - (1 << f.edge));
  if (rel != 1 && rel != 2 && rel != 4) return false;
  int ax = f.edge, ax1 = (ax + 1) % 3, ax2 = (ax + 2) % 3;
  if (abs(a[ax1]) > abs(a[ax2])) ax1 = ax2;
  ax2 = 3 - ax - ax1;
  S mul = (rel & (1 << ax2)) ? one : -one;
  second = one - mul * f.seg;
  lower_to_ratio(second, two * s[ax2], ha[ax2]);
  bool same = ((axis_octant >> ax) & 1) == ((rel >> ax2) & 1);
  lower_to_ratio(second, s[ax] * (same ? one - f.edge_pos : one + f.edge_pos), ha[ax]);
  second = mul * second;
  return true;
}

// 2, from an end over a face: towards the other end, stopping where the segment leaves the box
template <class S>
PHX_HD PHX_INLINE void capsule_box_second_from_face(const CapsuleBoxFeature<S>& f, const Vec3<S>& p,
                                                    const Vec3<S>& ha, const S* s, S& second) {
  S mul = f.kind == -3 ? S(1) : S(-1);
  Vec3<S> q = p - mul * ha;
  second = S(2);
  for (int i = 0; i < 3; ++i) {
    if (i == f.face || !(abs(ha[i]) > S(0))) continue;
    S e1 = (s[i] - q[i]) / ha[i] * mul;
    if (e1 > S(0) && e1 < second) second = e1;
    S e2 = (-s[i] - q[i]) / ha[i] * mul;
    if (e2 > S(0) && e2 < second) second = e2;
  }
  second = mul * second;
}

// Where the contacts of a capsule with a box lie along the capsule's segment (the algorithm of
// MuJoCo's mjraw_CapsuleBox, by S. Kolev). Inputs in the box frame: capsule centre p, unit axis
// a, half-length h, box half-sizes s; radius and margin only scale the initial search bound.
// Writes segment parameters t (the points p + t h a, t in [-1, 1]) and returns their number:
//  1. the first point is the segment point nearest the box, the better of
//     - an end of the segment whose nearest box point is on a face (at most one coordinate
//       clamped) or inside, and
//     - the nearest points of the segment and each of the 12 edges (a clamped 2x2 solve);
//  2. a second point is added when the segment runs at a low angle over the box: from the
//     nearest feature (a corner, the middle of an edge, or a face under an end) it moves along
//     the segment towards where it still lies over the box, stopping at the segment's end or
//     where it leaves the box.
// S may be a Dual: capsule-box's adjoint runs this on Dual numbers for dt / d(p, a, h, s).
template <class S>
PHX_HD int capsule_box_params(const Vec3<S>& p, const Vec3<S>& a, S h, const S* s, S radius,
                              S margin, S* t) {
  Vec3<S> ha = h * a;  // the half-axis
  int axis_octant = (ha.x > S(0) ? 1 : 0) | (ha.y > S(0) ? 2 : 0) | (ha.z > S(0) ? 4 : 0);
  CapsuleBoxFeature<S> f;
  f.best = margin + S(2) * (radius + h + s[0] + s[1] + s[2]);
  capsule_box_ends(p, ha, s, f);
  capsule_box_edges(p, ha, s, f);
  if (f.kind == -4) return 0;
  t[0] = f.seg;

  S second(0);
  bool has_second = false;
  if (f.kind >= 0 && f.kind / 3 != 1) {
    has_second = capsule_box_second_at_corner(f, a, ha, s, axis_octant, second);
  } else if (f.kind >= 0) {
    has_second = capsule_box_second_on_edge(f, a, ha, s, axis_octant, second);
  } else if (f.face != -1) {
    capsule_box_second_from_face(f, p, ha, s, second);
    has_second = true;
  }
  if (!has_second) return 1;
  t[1] = f.seg + second;
  return 2;
}

// the capsule's points as spheres against the box; which[k] is the point of contact k
template <class T>
PHX_HD int capsule_box_impl(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2,
                            const T* size2, T margin, ContactPoint<T>* out, int* which, T* t) {
  Vec3<T> axis = g1.rot.col(2);
  Vec3<T> p_local = mul_transpose(g2.rot, g1.pos - g2.pos);
  Vec3<T> a_local = mul_transpose(g2.rot, axis);
  int npoint = capsule_box_params(p_local, a_local, size1[1], size2, size1[0], margin, t);
  int cnt = 0;
  for (int k = 0; k < npoint; ++k) {
    Vec3<T> c = g1.pos + (t[k] * size1[1]) * axis;
    if (sphere_box_raw(c, size1[0], g2, size2, margin, out + cnt)) which[cnt++] = k;
  }
  return cnt;
}

}  // namespace collision_impl

// up to two contacts: spheres of the capsule's radius at one or two points of its segment
template <class T>
PHX_HD int capsule_box(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2,
                       const T* size2, T margin, ContactPoint<T>* out) {
  int which[2];
  T t[2];
  return collision_impl::capsule_box_impl(g1, size1, g2, size2, margin, out, which, t);
}

// The chain: contact k <- sphere-box at c = p1 + t h a1 (hand-written) <- t from the box-frame
// centre, axis, half-length and box sizes (capsule_box_params on Dual numbers, passes of
// kDualDirections over these 10 inputs, all of them in one on the CPU) <- the frames
// (hand-written).
template <class T>
PHX_HD PHX_DEVICE_NOINLINE void adj_capsule_box(const GeomFrame<T>& g1, const T* size1,
                                                const GeomFrame<T>& g2, const T* size2, T margin,
                                                int n, const ContactPoint<T>* adj,
                                                GeomFrame<T>& adj_g1, T* adj_size1,
                                                GeomFrame<T>& adj_g2, T* adj_size2) {
  constexpr int kInputs = 10, N = kDualDirections<T, kInputs>;
  using D = Dual<T, N>;
  if (n < 1) return;
  ContactPoint<T> fwd[2];
  int which[2];
  T t[2];
  if (collision_impl::capsule_box_impl(g1, size1, g2, size2, margin, fwd, which, t) != n) return;
  Vec3<T> axis = g1.rot.col(2), dif = g1.pos - g2.pos;
  Vec3<T> p_local = mul_transpose(g2.rot, dif), a_local = mul_transpose(g2.rot, axis);
  T h = size1[1];

  // the hand-written links, contact k's adjoint of its segment parameter into adj_t[k]
  Vec3<T> adj_axis;
  T adj_t[2];
  for (int k = 0; k < n; ++k) {
    int j = which[k];
    Vec3<T> c = g1.pos + (t[j] * h) * axis;
    Vec3<T> adj_c;
    adj_sphere_box_raw(c, size1[0], g2, size2, adj[k], adj_c, adj_size1[0], adj_g2, adj_size2);
    // c = p1 + t h axis
    adj_g1.pos += adj_c;
    adj_axis += (t[j] * h) * adj_c;
    T adj_ca = dot(axis, adj_c);
    adj_size1[1] += t[j] * adj_ca;
    adj_t[k] = h * adj_ca;
  }

  // the segment parameters' slopes along (p_local, a_local, h, size2), N of them a pass
  const T in[kInputs] = {p_local.x, p_local.y, p_local.z, a_local.x, a_local.y,
                         a_local.z, h,         size2[0],  size2[1],  size2[2]};
  T g[kInputs] = {};  // adjoint of the inputs through the parameters
  for (int first = 0; first < kInputs; first += N) {
    D x[kInputs], td[2];
    for (int i = 0; i < kInputs; ++i) {
      x[i] = D(in[i]);
      if (i >= first && i < first + N) x[i].d[i - first] = T(1);
    }
    collision_impl::capsule_box_params(Vec3<D>{x[0], x[1], x[2]}, Vec3<D>{x[3], x[4], x[5]}, x[6],
                                       x + 7, D(size1[0]), D(margin), td);
    for (int i = 0; i < N && first + i < kInputs; ++i)
      for (int k = 0; k < n; ++k) g[first + i] += adj_t[k] * td[which[k]].d[i];
  }
  adj_size1[1] += g[6];
  for (int i = 0; i < 3; ++i) adj_size2[i] += g[7 + i];
  // p_local = R2^T (p1 - p2), a_local = R2^T axis
  Vec3<T> adj_dif;
  adj_mul_transpose(g2.rot, dif, adj_g2.rot, adj_dif, Vec3<T>{g[0], g[1], g[2]});
  adj_mul_transpose(g2.rot, axis, adj_g2.rot, adj_axis, Vec3<T>{g[3], g[4], g[5]});
  adj_g1.pos += adj_dif;
  adj_g2.pos -= adj_dif;
  collision_impl::add_to_col(adj_g1.rot, 2, adj_axis);
}

// ---- box : box -----------------------------------------------------------------------------

namespace collision_impl {

// rounding scales of the box-box tests (MuJoCo's mjBOXBOX_*), per precision
template <class T>
struct BoxBoxTol {
  static constexpr bool single = kSinglePrecision<T>;
  static constexpr double sep = single ? 1e-6 : 1e-13;   // separation slack per unit box size
  static constexpr double par = single ? 1e-7 : 1e-16;   // sin^2 below which edges are parallel
  static constexpr double sgn = single ? 1e-5 : 1e-9;    // support-corner sign ambiguity
  static constexpr double dup = single ? 1e-10 : 1e-14;  // squared relative duplicate radius
  static constexpr double edge_bias = 1e-6;  // relative handicap of edge axes on near-ties
};

// the axis edge_i(box1) x edge_j(box2) in box1's frame, component i zero; rot = R1^T R2
template <class T>
PHX_HD PHX_INLINE Vec3<T> edge_cross_axis(const Mat3<T>& rot, int i, int j) {
  Vec3<T> axis;
  axis[(i + 1) % 3] = -rot((i + 2) % 3, j);
  axis[(i + 2) % 3] = rot((i + 1) % 3, j);
  return axis;
}

// Stage 1, the separating-axis test over the 15 candidate axes: the 3 face normals of each box
// and the 9 cross products of their edges. Returns the axis of largest separation as a code
// (0..2 face of box1, 3..5 face of box2, 6 + 3 i + j edge i of box1 x edge j of box2) or -1
// when some axis separates the boxes by more than tol. Face axes win near-ties (an edge must
// beat the best face by a relative edge_bias), and an edge axis within ~8 degrees of the best
// face axis and under 5% deeper is replaced by that face, whose manifold has several points.
template <class T>
PHX_HD int box_box_axis(const Mat3<T>& rot, const Vec3<T>& p21, const Vec3<T>& p12, const T* s1,
                        const T* s2, T tol) {
  using Tol = BoxBoxTol<T>;
  T best(-1e10);  // MuJoCo's -mjMAXVAL
  int code = -1;
  for (int i = 0; i < 3; ++i) {  // faces of box1
    T r2 = abs(rot(i, 0)) * s2[0] + abs(rot(i, 1)) * s2[1] + abs(rot(i, 2)) * s2[2];
    T sep = abs(p21[i]) - s1[i] - r2;
    if (sep > tol) return -1;
    if (sep > best) {
      best = sep;
      code = i;
    }
  }
  for (int j = 0; j < 3; ++j) {  // faces of box2
    T r1 = abs(rot(0, j)) * s1[0] + abs(rot(1, j)) * s1[1] + abs(rot(2, j)) * s1[2];
    T sep = abs(p12[j]) - s2[j] - r1;
    if (sep > tol) return -1;
    if (sep > best) {
      best = sep;
      code = 3 + j;
    }
  }
  const T best_face = best;
  const int code_face = code;
  for (int i = 0; i < 3; ++i) {  // edge pairs
    for (int j = 0; j < 3; ++j) {
      int i1 = (i + 1) % 3, i2 = (i + 2) % 3, j1 = (j + 1) % 3, j2 = (j + 2) % 3;
      Vec3<T> axis = edge_cross_axis(rot, i, j);
      T norm2 = axis[i1] * axis[i1] + axis[i2] * axis[i2];
      if (norm2 < T(Tol::par)) continue;  // nearly parallel edges: covered by the faces
      axis = (T(1) / sqrt(norm2)) * axis;
      T r1 = s1[i1] * abs(axis[i1]) + s1[i2] * abs(axis[i2]);
      // the axis in box2's frame has component j zero
      T b1 = axis[i1] * rot(i1, j1) + axis[i2] * rot(i2, j1);
      T b2 = axis[i1] * rot(i1, j2) + axis[i2] * rot(i2, j2);
      T r2 = s2[j1] * abs(b1) + s2[j2] * abs(b2);
      T sep = abs(axis[i1] * p21[i1] + axis[i2] * p21[i2]) - r1 - r2;
      if (sep > tol) return -1;
      if (sep - T(Tol::edge_bias) * abs(sep) > best && sep > best_face) {
        best = sep;
        code = 6 + 3 * i + j;
      }
    }
  }
  if (code >= 6) {
    int i = (code - 6) / 3, j = (code - 6) % 3;
    Vec3<T> axis = edge_cross_axis(rot, i, j);
    normalize_in_place(axis);
    T face_dot = code_face < 3 ? abs(axis[code_face]) : abs(dot(axis, rot.col(code_face - 3)));
    if (face_dot > T(0.99) && best < best_face + T(0.05) * abs(best_face) + T(kCollisionMinVal))
      code = code_face;
  }
  return code;
}

// Stage 2a, edge-edge: one contact at the midpoint of the nearest points of the two supporting
// edges, dist = their gap along the axis (oriented from box1 to box2), normal = that axis. A
// support edge whose selecting axis component is within sgn of zero is ambiguous; both
// candidates are tried and the nearer pair kept.
template <class T>
PHX_HD int box_box_edge(const GeomFrame<T>& g1, const Mat3<T>& rot, const Vec3<T>& p21, const T* s1,
                        const T* s2, T tol, int code, ContactPoint<T>* out) {
  using Tol = BoxBoxTol<T>;
  int i = (code - 6) / 3, j = (code - 6) % 3;
  int i1 = (i + 1) % 3, i2 = (i + 2) % 3, j1 = (j + 1) % 3, j2 = (j + 2) % 3;
  Vec3<T> axis = edge_cross_axis(rot, i, j);
  normalize_in_place(axis);
  if (dot(axis, p21) < T(0)) axis = -axis;
  Vec3<T> axis2 = mul_transpose(rot, axis);  // in box2's frame
  int amb1 = abs(axis[i1]) < T(Tol::sgn) ? i1 : (abs(axis[i2]) < T(Tol::sgn) ? i2 : -1);
  int amb2 = abs(axis2[j1]) < T(Tol::sgn) ? j1 : (abs(axis2[j2]) < T(Tol::sgn) ? j2 : -1);

  Vec3<T> d2 = rot.col(j);  // edge direction of box2; box1's is e_i
  T b = d2[i];
  T denom = T(1) - b * b;
  Vec3<T> w1, w2;
  T best_gap2(1e10);
  for (int v1 = 0; v1 < (amb1 >= 0 ? 2 : 1); ++v1) {
    for (int v2 = 0; v2 < (amb2 >= 0 ? 2 : 1); ++v2) {
      // edge centres: box1's supports +axis, box2's supports -axis
      Vec3<T> c1, cc;
      c1[i1] = axis[i1] >= T(0) ? s1[i1] : -s1[i1];
      c1[i2] = axis[i2] >= T(0) ? s1[i2] : -s1[i2];
      if (v1) c1[amb1] = -c1[amb1];
      cc[j1] = axis2[j1] >= T(0) ? -s2[j1] : s2[j1];
      cc[j2] = axis2[j2] >= T(0) ? -s2[j2] : s2[j2];
      if (v2) cc[amb2] = -cc[amb2];
      Vec3<T> c2 = rot * cc + p21;
      // nearest points c1 + x e_i, c2 + y d2, each clamp re-solving the other parameter
      Vec3<T> e = c2 - c1;
      T d1e = e[i], d2e = dot(d2, e);
      T x = denom < T(kCollisionMinVal) ? T(0) : (d1e - b * d2e) / denom;
      x = clamp(x, -s1[i], s1[i]);
      T y = clamp(b * x - d2e, -s2[j], s2[j]);
      x = clamp(d1e + b * y, -s1[i], s1[i]);
      Vec3<T> q1 = c1, q2 = c2 + y * d2;
      q1[i] += x;
      Vec3<T> gap = q2 - q1;
      T gap2 = dot(gap, gap);
      if (gap2 < best_gap2) {
        best_gap2 = gap2;
        w1 = q1;
        w2 = q2;
      }
    }
  }
  T dist = dot(w2 - w1, axis);
  if (dist > tol) return 0;
  out->dist = dist;
  out->pos = g1.rot * (T(0.5) * (w1 + w2)) + g1.pos;
  out->normal = g1.rot * axis;
  return 1;
}

// clip a polygon (x, y, z rows; z carried along as an attribute) to sign * x[coord] <= limit,
// from buffer `from` into the other one, Sutherland-Hodgman; returns the vertex count and flips
// `from` when something was clipped (an untouched polygon stays where it is)
template <class T, int kCap>
PHX_HD int clip_polygon(T (*poly)[kCap][3], int& from, int n, int coord, T sign, T limit) {
  T d[kCap];
  bool inside = true;
  for (int k = 0; k < n; ++k) {
    d[k] = sign * poly[from][k][coord] - limit;
    inside = inside && d[k] <= T(0);
  }
  if (inside) return n;
  const T(*in)[3] = poly[from];
  T(*out)[3] = poly[1 - from];
  int m = 0;
  for (int k = 0; k < n; ++k) {
    int k1 = k + 1 == n ? 0 : k + 1;
    if (d[k] <= T(0) && m < kCap) {
      for (int c = 0; c < 3; ++c) out[m][c] = in[k][c];
      ++m;
    }
    bool crosses = (d[k] < T(0) && d[k1] > T(0)) || (d[k] > T(0) && d[k1] < T(0));
    if (crosses && m < kCap) {
      T f = d[k] / (d[k] - d[k1]);
      for (int c = 0; c < 3; ++c) out[m][c] = in[k][c] + f * (in[k1][c] - in[k][c]);
      ++m;
    }
  }
  from = 1 - from;
  return m;
}

// Stage 2b, face contact: the face of the other (incident) box most opposed to the winning
// (reference) face is clipped to the reference face's four side planes; each clipped vertex at
// most `margin` above the reference face is a contact with dist = its height, pos midway
// between the reference face and the vertex, normal = the reference face normal (from box1 to
// box2). Clipping a 4-gon by 4 half-planes leaves at most 8 vertices.
template <class T>
PHX_HD int box_box_face(const GeomFrame<T>& g1, const GeomFrame<T>& g2, const Mat3<T>& rot,
                        const Vec3<T>& p21, const Vec3<T>& p12, const T* s1, const T* s2, T margin,
                        int code, ContactPoint<T>* out) {
  using Tol = BoxBoxTol<T>;
  constexpr int kCap = 12;
  bool ref1 = code < 3;  // box1 owns the reference face
  int a = ref1 ? code : code - 3;
  const T* sref = ref1 ? s1 : s2;
  const T* sinc = ref1 ? s2 : s1;
  const GeomFrame<T>& ref = ref1 ? g1 : g2;
  const Vec3<T>& pinc = ref1 ? p21 : p12;  // incident centre in the reference frame
  // incident axes in the reference frame (columns)
  Mat3<T> rinc;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) rinc(r, c) = ref1 ? rot(r, c) : rot(c, r);

  T side = pinc[a] >= T(0) ? T(1) : T(-1);  // the reference face faces the incident box
  int b = 0;                                // incident face axis: most aligned with axis a
  for (int k = 1; k < 3; ++k)
    if (abs(rinc(a, k)) > abs(rinc(a, b))) b = k;
  T binc = side * rinc(a, b) > T(0) ? T(-1) : T(1);  // its side facing the reference face

  // incident face corners in (x, y) = reference axes (a + 1, a + 2), z = height above the face
  int ax = (a + 1) % 3, ay = (a + 2) % 3, bu = (b + 1) % 3, bv = (b + 2) % 3;
  T center[3], du[3], dv[3];
  const int coord[3] = {ax, ay, a};
  for (int r = 0; r < 3; ++r) {
    int c = coord[r];
    center[r] = pinc[c] + binc * sinc[b] * rinc(c, b);
    du[r] = sinc[bu] * rinc(c, bu);
    dv[r] = sinc[bv] * rinc(c, bv);
  }
  center[2] = side * center[2] - sref[a];
  du[2] = side * du[2];
  dv[2] = side * dv[2];
  T poly[2][kCap][3];
  const T su[4] = {T(1), T(-1), T(-1), T(1)}, sv[4] = {T(1), T(1), T(-1), T(-1)};
  for (int k = 0; k < 4; ++k)
    for (int r = 0; r < 3; ++r) poly[0][k][r] = center[r] + su[k] * du[r] + sv[k] * dv[r];

  // clip to the side planes |x| <= sref[ax], |y| <= sref[ay]
  int from = 0, n = 4;
  n = clip_polygon<T, kCap>(poly, from, n, 0, T(1), sref[ax]);
  n = clip_polygon<T, kCap>(poly, from, n, 0, T(-1), sref[ax]);
  n = clip_polygon<T, kCap>(poly, from, n, 1, T(1), sref[ay]);
  n = clip_polygon<T, kCap>(poly, from, n, 1, T(-1), sref[ay]);

  // vertices in the margin band, near-duplicates (from clipping at corners) dropped
  Vec3<T> normal = (ref1 ? side : -side) * ref.rot.col(a);
  T dup2 = T(Tol::dup) * (sref[ax] * sref[ax] + sref[ay] * sref[ay]);
  T kept[kMaxPairContacts][2];  // (x, y) of the accepted vertices
  int cnt = 0;
  for (int k = 0; k < n && cnt < kMaxPairContacts; ++k) {
    const T* v = poly[from][k];
    if (v[2] > margin) continue;
    bool dup = false;
    for (int q = 0; q < cnt && !dup; ++q) {
      T dx = kept[q][0] - v[0], dy = kept[q][1] - v[1];
      dup = dx * dx + dy * dy < dup2;
    }
    if (dup) continue;
    kept[cnt][0] = v[0];
    kept[cnt][1] = v[1];
    Vec3<T> pl;  // midway between the reference face and the vertex, in the reference frame
    pl[ax] = v[0];
    pl[ay] = v[1];
    pl[a] = side * (sref[a] + T(0.5) * v[2]);
    out[cnt].dist = v[2];
    out[cnt].pos = ref.rot * pl + ref.pos;
    out[cnt].normal = normal;
    ++cnt;
  }
  return cnt;
}

}  // namespace collision_impl

// the separating axis with the largest separation decides: a face gives the clipped face
// manifold (up to 8 points), an edge pair a single edge-edge contact
template <class T>
PHX_HD int box_box(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2, const T* size2,
                   T margin, ContactPoint<T>* out) {
  using Tol = collision_impl::BoxBoxTol<T>;
  // relative pose: rot = R1^T R2 (box2's axes in box1's frame), p21 = box2's centre in box1's
  // frame, p12 = box1's centre in box2's frame
  Mat3<T> rot;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      rot(i, j) =
          g1.rot(0, i) * g2.rot(0, j) + g1.rot(1, i) * g2.rot(1, j) + g1.rot(2, i) * g2.rot(2, j);
  Vec3<T> p21 = mul_transpose(g1.rot, g2.pos - g1.pos);
  Vec3<T> p12 = mul_transpose(g2.rot, g1.pos - g2.pos);
  // separation tests get rounding slack proportional to the boxes' size
  T tol = margin + T(Tol::sep) * (size1[0] + size1[1] + size1[2] + size2[0] + size2[1] + size2[2]);
  int code = collision_impl::box_box_axis(rot, p21, p12, size1, size2, tol);
  if (code < 0) return 0;
  if (code >= 6) return collision_impl::box_box_edge(g1, rot, p21, size1, size2, tol, code, out);
  return collision_impl::box_box_face(g1, g2, rot, p21, p12, size1, size2, margin, code, out);
}

namespace collision_impl {

// Input k of a pair's 30 inputs, in the order pos1 (0..2), rot1 (3..11, row-major), size1
// (12..14), pos2 (15..17), rot2 (18..26), size2 (27..29).
template <class T>
PHX_HD T& pair_input(int k, GeomFrame<T>& g1, T* size1, GeomFrame<T>& g2, T* size2) {
  GeomFrame<T>& g = k < 15 ? g1 : g2;
  T* size = k < 15 ? size1 : size2;
  k %= 15;
  return k < 3 ? g.pos[k] : (k < 12 ? g.rot.m[k - 3] : size[k - 12]);
}

// One pass of box-box's adjoint: box_box run on Dual<T, N> seeded along inputs
// [first, first + N) gives those columns of the Jacobian; their products with the contacts'
// adjoints are accumulated. A pass whose contact count differs from n (a branch the value
// arithmetic did not reproduce) contributes nothing.
template <class T, int N>
PHX_HD void adj_box_box_pass(int first, const GeomFrame<T>& g1, const T* size1,
                             const GeomFrame<T>& g2, const T* size2, T margin, int n,
                             const ContactPoint<T>* adj, GeomFrame<T>& adj_g1, T* adj_size1,
                             GeomFrame<T>& adj_g2, T* adj_size2) {
  using D = Dual<T, N>;
  GeomFrame<T> v1 = g1, v2 = g2;
  T vs1[3] = {size1[0], size1[1], size1[2]}, vs2[3] = {size2[0], size2[1], size2[2]};
  GeomFrame<D> d1, d2;
  D ds1[3], ds2[3];
  for (int k = 0; k < 30; ++k) {
    D& x = pair_input(k, d1, ds1, d2, ds2);
    x = D(pair_input(k, v1, vs1, v2, vs2));
    if (k >= first && k < first + N) x.d[k - first] = T(1);
  }
  ContactPoint<D> con[kMaxPairContacts];
  if (box_box(d1, ds1, d2, ds2, D(margin), con) != n) return;
  for (int i = 0; i < N && first + i < 30; ++i) {
    T g(0);
    for (int c = 0; c < n; ++c) {
      for (int r = 0; r < 3; ++r)
        g += adj[c].pos[r] * con[c].pos[r].d[i] + adj[c].normal[r] * con[c].normal[r].d[i];
      g += adj[c].dist * con[c].dist.d[i];
    }
    pair_input(first + i, adj_g1, adj_size1, adj_g2, adj_size2) += g;
  }
}

}  // namespace collision_impl

// the Jacobian of the whole box-box manifold by dual-number passes (kDualDirections: six on the
// CPU, one on the GPU: in float, two took so many registers that the stages of the reverse
// kernels above it, which keep their values across its call in the registers it leaves, spilled)
template <class T>
PHX_HD PHX_DEVICE_NOINLINE void adj_box_box(const GeomFrame<T>& g1, const T* size1,
                                            const GeomFrame<T>& g2, const T* size2, T margin, int n,
                                            const ContactPoint<T>* adj, GeomFrame<T>& adj_g1,
                                            T* adj_size1, GeomFrame<T>& adj_g2, T* adj_size2) {
  constexpr int kDirections = kDualDirections<T, 6, 1>;
  if (n < 1) return;
  for (int first = 0; first < 30; first += kDirections)
    collision_impl::adj_box_box_pass<T, kDirections>(first, g1, size1, g2, size2, margin, n, adj,
                                                     adj_g1, adj_size1, adj_g2, adj_size2);
}

}  // namespace phx
