// Narrowphase of the closed-form pairs of planes against convex shapes (mesh hulls, cylinders,
// ellipsoids) and of spheres against cylinders, each followed by its adjoint. Conventions,
// signatures and the adjoint contract are those of collision/primitives.h: normal from geom1 to
// geom2, dist < 0 when penetrating, pos midway between the surfaces, a contact kept when
// dist <= margin; adjoints accumulate (+=) into both frames (position and the nine rotation
// entries as independent inputs) and the sizes, re-running the forward's discrete choices.
//
// The rules are MuJoCo's, so that contacts compare one by one with mj_collision:
//   plane : mesh       mjc_PlaneConvex of MuJoCo 4.0 (established from its output, see below)
//   plane : cylinder   mjc_PlaneCylinder (engine_collision_primitive.c)
//   plane : ellipsoid  mjc_PlaneConvex with mjc_ellipsoidSupport (engine_collision_convex.c)
//   sphere : cylinder  mjc_SphereCylinder (engine_collision_primitive.c)
// Sphere-ellipsoid, capsule-cylinder and the other pairs of ellipsoids and cylinders go through
// MuJoCo's general convex collider (mjc_Convex, GJK/EPA), not a closed form, so they are not here.
//
// Every contact of these pairs has the plane's normal (or a cylinder cap's, or the unit vector
// between two nearest points), and its point is a fixed point of the geom (a hull vertex, a rim
// point of the cylinder) or a smooth function of the frames and sizes, so the adjoints are exact
// on each branch.
#pragma once

#include "phalanx/collision/primitives.h"

namespace phx {

namespace collision_impl {

// MuJoCo's mjMESH_HILLCLIMB_MIN: hulls with at least this many vertices find their support
// vertex by hill-climbing over the hull's edges, smaller ones by a scan of all vertices
constexpr int kHillClimbMinVert = 10;

template <class T>
PHX_HD PHX_INLINE Vec3<T> hull_vertex(const ConvexHull<T>& hull, int i) {
  return Vec3<T>::load(hull.vert + 3 * i);
}

// The hull vertex with the largest dir . v, the first one on ties. Small hulls scan all vertices
// (mjc_meshSupport); hulls of kHillClimbMinVert or more vertices climb from vertex 0 to the best
// neighbour until none is better (mjc_hillclimbSupport). On a convex hull a vertex no neighbour
// improves on is a global maximum, so both give the same vertex unless several tie exactly
// (MuJoCo seeds its climb from a 27-direction table, which the hull does not carry). Every step
// strictly raises dir . v, so the climb ends within nvert steps.
template <class T>
PHX_HD int hull_support(const ConvexHull<T>& hull, const Vec3<T>& dir) {
  int best = 0;
  T best_dot = dot(dir, hull_vertex(hull, 0));
  if (hull.nvert < kHillClimbMinVert || hull.adjnum == nullptr) {
    for (int i = 1; i < hull.nvert; ++i) {
      T d = dot(dir, hull_vertex(hull, i));
      if (d > best_dot) {
        best_dot = d;
        best = i;
      }
    }
    return best;
  }
  for (int step = 0; step < hull.nvert; ++step) {
    int from = best;
    for (int e = 0; e < hull.adjnum[from]; ++e) {
      int j = hull.adj[hull.adjadr[from] + e];
      T d = dot(dir, hull_vertex(hull, j));
      if (d > best_dot) {
        best_dot = d;
        best = j;
      }
    }
    if (best == from) break;
  }
  return best;
}

// 0.5 |(c - a) x (d - b)|: the area of the planar quadrilateral a b c d
template <class T>
PHX_HD PHX_INLINE T quad_area(const Vec3<T>& a, const Vec3<T>& b, const Vec3<T>& c,
                              const Vec3<T>& d) {
  return T(0.5) * norm(cross(c - a, d - b));
}

// The four corners (positions 0 .. m-1 along the polygon p) of a largest-area quadrilateral of a
// convex polygon of m > 4 vertices, by MuJoCo's rotating search (polygonQuad of
// engine_collision_gjk.c, with the quadrilateral's true area): for each first corner a, advance
// the last corner d while the area grows, and after each advance the third corner c and then the
// second b. Every advance strictly grows the area, so each search ends within m steps.
// vertex i of face `face` counted from its vertex at position start (m vertices, first at adr)
template <class T>
PHX_HD PHX_INLINE Vec3<T> face_vertex(const ConvexHull<T>& hull, int adr, int m, int start, int i) {
  return hull_vertex(hull, hull.polyvert[adr + (start + i) % m]);
}

template <class T>
PHX_HD PHX_INLINE T face_quad_area(const ConvexHull<T>& hull, int adr, int m, int start, int a,
                                   int b, int c, int d) {
  return quad_area(face_vertex(hull, adr, m, start, a), face_vertex(hull, adr, m, start, b),
                   face_vertex(hull, adr, m, start, c), face_vertex(hull, adr, m, start, d));
}

PHX_HD PHX_INLINE int next_in_polygon(int i, int m) {
  return i + 1 == m ? 0 : i + 1;
}

template <class T>
PHX_HD void polygon_quad(const ConvexHull<T>& hull, int adr, int m, int start, int* quad) {
  int b = 1, c = 2, d = 3;
  quad[0] = 0, quad[1] = 1, quad[2] = 2, quad[3] = 3;
  T area = face_quad_area(hull, adr, m, start, 0, 1, 2, 3);
  for (int a = 0; a < m; ++a) {
    for (int kd = 0; kd < m; ++kd) {
      T grown = face_quad_area(hull, adr, m, start, a, b, c, next_in_polygon(d, m));
      if (!(grown > area)) break;
      area = grown;
      d = next_in_polygon(d, m);
      quad[0] = a, quad[1] = b, quad[2] = c, quad[3] = d;
      for (int kc = 0; kc < m; ++kc) {
        grown = face_quad_area(hull, adr, m, start, a, b, next_in_polygon(c, m), d);
        if (!(grown > area)) break;
        area = grown;
        c = next_in_polygon(c, m);
        quad[0] = a, quad[1] = b, quad[2] = c, quad[3] = d;
      }
      for (int kb = 0; kb < m; ++kb) {
        grown = face_quad_area(hull, adr, m, start, a, next_in_polygon(b, m), c, d);
        if (!(grown > area)) break;
        area = grown;
        b = next_in_polygon(b, m);
        quad[0] = a, quad[1] = b, quad[2] = c, quad[3] = d;
      }
    }
    // keep b, c, d ahead of the next first corner
    if (b == a) {
      b = next_in_polygon(b, m);
      if (c == b) {
        c = next_in_polygon(c, m);
        if (d == c) d = next_in_polygon(d, m);
      }
    }
  }
}

// The contacts of plane_convex and, per contact, the hull vertex it sits on.
template <class T>
PHX_HD int plane_convex_impl(const GeomFrame<T>& g1, const ConvexHull<T>& hull,
                             const GeomFrame<T>& g2, T margin, ContactPoint<T>* out, int* vertex) {
  if (hull.nvert < 1) return 0;
  Vec3<T> n = g1.rot.col(2);
  Vec3<T> down = mul_transpose(g2.rot, -n);  // -normal in the mesh frame
  int deepest = hull_support(hull, down);

  // the face through the deepest vertex whose outward normal is closest to -normal, and the
  // position of that vertex in it
  int face = -1, start = 0;
  T best = T(0);
  for (int p = 0; p < hull.npoly; ++p) {
    int adr = hull.polyvertadr[p];
    for (int j = 0; j < hull.polyvertnum[p]; ++j) {
      if (hull.polyvert[adr + j] != deepest) continue;
      T align = dot(Vec3<T>::load(hull.polynormal + 3 * p), down);
      if (face < 0 || align > best) {
        best = align;
        face = p;
        start = j;
      }
      break;
    }
  }

  // candidate vertices: that face from the deepest vertex on, pruned to 4 by largest area
  int cand[4] = {deepest, -1, -1, -1}, ncand = 1;
  if (face >= 0) {
    int adr = hull.polyvertadr[face], m = hull.polyvertnum[face];
    int quad[4] = {0, 1, 2, 3};
    if (m > 4) polygon_quad(hull, adr, m, start, quad);
    ncand = m < 4 ? m : 4;
    for (int k = 0; k < ncand; ++k) cand[k] = hull.polyvert[adr + (start + quad[k]) % m];
  }

  // dist = n . (p2 + R2 v - p1), pos = p2 + R2 v - (dist / 2) n
  int cnt = 0;
  for (int k = 0; k < ncand; ++k) {
    Vec3<T> w = g2.pos + g2.rot * hull_vertex(hull, cand[k]);
    T dist = dot(n, w - g1.pos);
    if (dist > margin) continue;
    out[cnt].dist = dist;
    out[cnt].normal = n;
    out[cnt].pos = w - (T(0.5) * dist) * n;
    vertex[cnt++] = cand[k];
  }
  return cnt;
}

}  // namespace collision_impl

// ---- plane : mesh --------------------------------------------------------------------------

// Plane against a mesh's convex hull (in the mesh geom's frame g2), up to 4 contacts, each on a
// hull vertex, as MuJoCo 4.0's mjc_PlaneConvex makes them: the deepest vertex a (the support
// vertex in -normal); the hull face through a whose outward normal is closest to -normal; that
// face's vertices in its counter-clockwise order starting at a, pruned to the largest-area
// quadrilateral when it has more than 4 (polygon_quad); of those, the ones with dist <= margin,
// in that order.
//
// MuJoCo 3.12's source (mjc_PlaneConvex, addplanemesh) instead adds up to two graph neighbours of
// the deepest vertex farther than 0.3 rbound from it; MuJoCo 4.0's rule above was established
// from its output (mujoco 4.0.0 from PyPI): contact for contact (vertex, order, dist) on
// 1800 random poses of a box, hexagonal, heptagonal and octagonal prisms, an icosahedron and a
// 30-point random hull at margin 0. With margin > 0, MuJoCo 4.0 sums the two geom margins and
// drops some of the face's vertices with 0 < dist <= margin by a rule not identified; here every
// face vertex with dist <= margin is kept.
template <class T>
PHX_HD int plane_convex(const GeomFrame<T>& g1, const T* size1, const ConvexHull<T>& hull,
                        const GeomFrame<T>& g2, T margin, ContactPoint<T>* out) {
  (void)size1;
  int vertex[4];
  return collision_impl::plane_convex_impl(g1, hull, g2, margin, out, vertex);
}

// A contact's point is a hull vertex v, fixed in the mesh frame, and its normal the plane's:
// pos = p2 + R2 v - (dist / 2) n, dist = n . (p2 + R2 v - p1). The hull has no size to
// differentiate.
template <class T>
PHX_HD void adj_plane_convex(const GeomFrame<T>& g1, const T* size1, const ConvexHull<T>& hull,
                             const GeomFrame<T>& g2, T margin, int n, const ContactPoint<T>* adj,
                             GeomFrame<T>& adj_g1, T* adj_size1, GeomFrame<T>& adj_g2) {
  (void)size1, (void)adj_size1;
  ContactPoint<T> fwd[4];
  int vertex[4];
  if (collision_impl::plane_convex_impl(g1, hull, g2, margin, fwd, vertex) != n) return;
  Vec3<T> nrm = g1.rot.col(2), adj_nrm;
  for (int k = 0; k < n; ++k) {
    Vec3<T> v = collision_impl::hull_vertex(hull, vertex[k]);
    Vec3<T> w = g2.pos + g2.rot * v;
    // pos = w - (dist / 2) n, normal = n
    Vec3<T> adj_w = adj[k].pos;
    adj_nrm += adj[k].normal - (T(0.5) * fwd[k].dist) * adj[k].pos;
    T adj_dist = adj[k].dist - T(0.5) * dot(nrm, adj[k].pos);
    // dist = n . (w - p1)
    adj_nrm += adj_dist * (w - g1.pos);
    adj_w += adj_dist * nrm;
    adj_g1.pos -= adj_dist * nrm;
    // w = p2 + R2 v
    adj_g2.pos += adj_w;
    Vec3<T> adj_v;  // v is fixed: dropped
    adj_mul(g2.rot, v, adj_g2.rot, adj_v, adj_w);
  }
  collision_impl::add_to_col(adj_g1.rot, 2, adj_nrm);
}

// ---- plane : cylinder ----------------------------------------------------------------------

namespace collision_impl {

// The shared quantities of plane_cylinder (MuJoCo's mjc_PlaneCylinder): with a the cylinder axis
// turned towards the plane (sign s, a = s z2, pa = n . a <= 0), the rim vector
// v = r u / |u|, u = pa a - n (the radial direction pointing most against n; when the disk is
// parallel to the plane, |u| < kCollisionMinVal, v = r x2 instead), pv = n . v,
// A = h a, PA = h pa, dist0 = n . (p2 - p1).
template <class T>
struct PlaneCylinderGeometry {
  Vec3<T> n, a, u, v, A;
  T s, pa, len, pv, PA, dist0;
  bool flat;  // the disk parallel to the plane
};

template <class T>
PHX_HD PlaneCylinderGeometry<T> plane_cylinder_geometry(const GeomFrame<T>& g1,
                                                        const GeomFrame<T>& g2, const T* size2) {
  PlaneCylinderGeometry<T> q;
  q.n = g1.rot.col(2);
  Vec3<T> z = g2.rot.col(2);
  T nz = dot(q.n, z);
  q.s = nz > T(0) ? T(-1) : T(1);
  q.a = q.s * z;
  q.pa = q.s * nz;
  q.dist0 = dot(q.n, g2.pos - g1.pos);
  q.u = q.pa * q.a - q.n;
  T len2 = dot(q.u, q.u);
  q.flat = !(len2 >= T(kCollisionMinVal) * T(kCollisionMinVal));
  q.len = q.flat ? T(0) : sqrt(len2);
  q.v = q.flat ? size2[0] * g2.rot.col(0) : (size2[0] / q.len) * q.u;
  q.pv = dot(q.v, q.n);
  q.A = size2[1] * q.a;
  q.PA = size2[1] * q.pa;
  return q;
}

// contact k of plane_cylinder: pos = p2 + alpha v + beta A + gamma w - (dist / 2) n,
// dist = dist0 + beta PA + alpha pv, w = r sqrt(3) / 2 (v x A) / |v x A|: the rim points
// v + A, v - A and the two other corners of the triangle inscribed in the nearer rim, A - v / 2 +-
// w
template <class T>
PHX_HD PHX_INLINE void plane_cylinder_point(int k, T& alpha, T& beta, T& gamma) {
  alpha = k < 2 ? T(1) : T(-0.5);
  beta = k == 1 ? T(-1) : T(1);
  gamma = k < 2 ? T(0) : (k == 2 ? T(1) : T(-1));
}

// sqrt(3) / 2: the half-width of the triangle inscribed in a unit circle
constexpr double kHalfSqrt3 = 0.86602540378443864676;

}  // namespace collision_impl

// Plane against a cylinder (r = size2[0], half-height h = size2[1] along its z), MuJoCo's
// mjc_PlaneCylinder, up to 4 contacts, all with the plane's normal: the rim point of the end
// nearer the plane that reaches deepest, p2 + v + A (none at all when it is above the margin);
// the same rim point of the other end, p2 + v - A; and, when they are within the margin, the two
// other corners of the equilateral triangle inscribed in the nearer rim with the first point,
// p2 + A - v / 2 +- w. These four are MuJoCo's points, not the cylinder's deepest when it lies on
// its side (then the first two are the ends of the lowest line of the side).
template <class T>
PHX_HD int plane_cylinder(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2,
                          const T* size2, T margin, ContactPoint<T>* out) {
  (void)size1;
  auto q = collision_impl::plane_cylinder_geometry(g1, g2, size2);
  int cnt = 0;
  for (int k = 0; k < 4; ++k) {
    T alpha, beta, gamma;
    collision_impl::plane_cylinder_point(k, alpha, beta, gamma);
    T dist = q.dist0 + beta * q.PA + alpha * q.pv;
    if (dist > margin) {
      if (k == 0) return 0;  // the deepest point is above the margin
      if (k == 1) continue;
      break;  // the triangle points come as a pair
    }
    Vec3<T> pos = g2.pos + alpha * q.v + beta * q.A;
    if (k >= 2) {
      Vec3<T> w = cross(q.v, q.A);
      collision_impl::normalize_in_place(w);
      pos += (gamma * size2[0] * T(collision_impl::kHalfSqrt3)) * w;
    }
    out[cnt].dist = dist;
    out[cnt].normal = q.n;
    out[cnt].pos = pos - (T(0.5) * dist) * q.n;
    ++cnt;
  }
  return cnt;
}

template <class T>
PHX_HD void adj_plane_cylinder(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2,
                               const T* size2, T margin, int n, const ContactPoint<T>* adj,
                               GeomFrame<T>& adj_g1, T* adj_size1, GeomFrame<T>& adj_g2,
                               T* adj_size2) {
  (void)size1, (void)adj_size1;
  ContactPoint<T> fwd[4];
  if (plane_cylinder(g1, size1, g2, size2, margin, fwd) != n || n < 1) return;
  auto q = collision_impl::plane_cylinder_geometry(g1, g2, size2);
  // which of the four points the contacts are: 0 always; 1 when within the margin; the pair
  T d1 = q.dist0 - q.PA + q.pv;
  bool second = !(d1 > margin);
  Vec3<T> adj_n, adj_v, adj_A, adj_w;
  T adj_PA = T(0), adj_pv = T(0), adj_dist0 = T(0);
  int k = 0;
  for (int point = 0; point < 4 && k < n; ++point) {
    if (point == 1 && !second) continue;
    T alpha, beta, gamma;
    collision_impl::plane_cylinder_point(point, alpha, beta, gamma);
    const ContactPoint<T>& g = adj[k];
    // pos = p2 + alpha v + beta A + gamma w - (dist / 2) n, normal = n
    adj_g2.pos += g.pos;
    adj_v += alpha * g.pos;
    adj_A += beta * g.pos;
    adj_w += gamma * g.pos;
    adj_n += g.normal - (T(0.5) * fwd[k].dist) * g.pos;
    T adj_dist = g.dist - T(0.5) * dot(q.n, g.pos);
    // dist = dist0 + beta PA + alpha pv
    adj_dist0 += adj_dist;
    adj_PA += beta * adj_dist;
    adj_pv += alpha * adj_dist;
    ++k;
  }
  // w = c z / |z|, z = v x A, c = r sqrt(3) / 2
  if (n > 2 || (n == 2 && !second)) {
    const T c = size2[0] * T(collision_impl::kHalfSqrt3);
    Vec3<T> z = cross(q.v, q.A);
    Vec3<T> zhat = z;
    T zlen = collision_impl::normalize_in_place(zhat);
    adj_size2[0] += T(collision_impl::kHalfSqrt3) * dot(zhat, adj_w);
    Vec3<T> adj_z;
    collision_impl::adj_normalize(zhat, zlen, adj_z, c * adj_w);
    adj_cross(q.v, q.A, adj_v, adj_A, adj_z);
  }
  // pv = v . n, PA = h pa, A = h a
  adj_v += adj_pv * q.n;
  adj_n += adj_pv * q.v;
  T adj_pa = size2[1] * adj_PA;
  adj_size2[1] += q.pa * adj_PA + dot(q.a, adj_A);
  Vec3<T> adj_a = size2[1] * adj_A;
  // dist0 = n . (p2 - p1)
  adj_n += adj_dist0 * (g2.pos - g1.pos);
  adj_g2.pos += adj_dist0 * q.n;
  adj_g1.pos -= adj_dist0 * q.n;
  if (q.flat) {  // v = r x2
    Vec3<T> x = g2.rot.col(0);
    adj_size2[0] += dot(x, adj_v);
    collision_impl::add_to_col(adj_g2.rot, 0, size2[0] * adj_v);
  } else {  // v = r u / |u|, u = pa a - n
    Vec3<T> uhat = (T(1) / q.len) * q.u;
    adj_size2[0] += dot(uhat, adj_v);
    Vec3<T> adj_u;
    collision_impl::adj_normalize(uhat, q.len, adj_u, size2[0] * adj_v);
    adj_pa += dot(q.a, adj_u);
    adj_a += q.pa * adj_u;
    adj_n -= adj_u;
  }
  // pa = n . a, a = s z2
  adj_n += adj_pa * q.a;
  adj_a += adj_pa * q.n;
  collision_impl::add_to_col(adj_g2.rot, 2, q.s * adj_a);
  collision_impl::add_to_col(adj_g1.rot, 2, adj_n);
}

// ---- plane : ellipsoid ---------------------------------------------------------------------

namespace collision_impl {

// The ellipsoid's support point in direction -n, in its frame: with S = diag(semi-axes) and
// d = R2^T (-n), q = S d, the point S q / |q| = -S^2 n_local / |S n_local| (mjc_ellipsoidSupport).
// When |q| < kCollisionMinVal (degenerate semi-axes) MuJoCo takes (s0, 0, 0).
template <class T>
PHX_HD bool ellipsoid_support(const Mat3<T>& rot, const Vec3<T>& n, const T* s, Vec3<T>& d,
                              Vec3<T>& qhat, T& len, Vec3<T>& local) {
  d = mul_transpose(rot, -n);
  qhat = Vec3<T>{s[0] * d.x, s[1] * d.y, s[2] * d.z};
  T len2 = dot(qhat, qhat);
  if (len2 < T(kCollisionMinVal) * T(kCollisionMinVal)) {
    len = T(0);
    local = Vec3<T>{s[0], T(0), T(0)};
    return false;
  }
  len = sqrt(len2);
  qhat = (T(1) / len) * qhat;
  local = Vec3<T>{s[0] * qhat.x, s[1] * qhat.y, s[2] * qhat.z};
  return true;
}

}  // namespace collision_impl

// Plane against an ellipsoid (semi-axes size2[0..2] along its x, y, z), one contact at the
// ellipsoid's point lowest along the plane normal, w = p2 + R2 (-S^2 n_l / |S n_l|),
// n_l = R2^T n: dist = n . (w - p1), pos = w - (dist / 2) n, normal n (MuJoCo's
// mjc_PlaneConvex with the ellipsoid support function).
template <class T>
PHX_HD int plane_ellipsoid(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2,
                           const T* size2, T margin, ContactPoint<T>* out) {
  (void)size1;
  Vec3<T> n = g1.rot.col(2), d, qhat, local;
  T len;
  collision_impl::ellipsoid_support(g2.rot, n, size2, d, qhat, len, local);
  Vec3<T> w = g2.pos + g2.rot * local;
  T dist = dot(n, w - g1.pos);
  if (dist > margin) return 0;
  out->dist = dist;
  out->normal = n;
  out->pos = w - (T(0.5) * dist) * n;
  return 1;
}

template <class T>
PHX_HD void adj_plane_ellipsoid(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2,
                                const T* size2, T margin, int n, const ContactPoint<T>* adj,
                                GeomFrame<T>& adj_g1, T* adj_size1, GeomFrame<T>& adj_g2,
                                T* adj_size2) {
  (void)size1, (void)margin, (void)adj_size1;
  if (n < 1) return;
  Vec3<T> nrm = g1.rot.col(2), d, qhat, local;
  T len;
  bool smooth = collision_impl::ellipsoid_support(g2.rot, nrm, size2, d, qhat, len, local);
  Vec3<T> w = g2.pos + g2.rot * local;
  T dist = dot(nrm, w - g1.pos);
  // pos = w - (dist / 2) n, normal = n
  Vec3<T> adj_w = adj[0].pos;
  Vec3<T> adj_nrm = adj[0].normal - (T(0.5) * dist) * adj[0].pos;
  T adj_dist = adj[0].dist - T(0.5) * dot(nrm, adj[0].pos);
  // dist = n . (w - p1)
  adj_nrm += adj_dist * (w - g1.pos);
  adj_w += adj_dist * nrm;
  adj_g1.pos -= adj_dist * nrm;
  // w = p2 + R2 local
  adj_g2.pos += adj_w;
  Vec3<T> adj_local;
  adj_mul(g2.rot, local, adj_g2.rot, adj_local, adj_w);
  if (!smooth) {  // local = (s0, 0, 0)
    adj_size2[0] += adj_local.x;
  } else {
    // local_i = s_i qhat_i, qhat = q / |q|, q_i = s_i d_i
    Vec3<T> adj_qhat;
    for (int i = 0; i < 3; ++i) {
      adj_size2[i] += qhat[i] * adj_local[i];
      adj_qhat[i] = size2[i] * adj_local[i];
    }
    Vec3<T> adj_q, adj_d;
    collision_impl::adj_normalize(qhat, len, adj_q, adj_qhat);
    for (int i = 0; i < 3; ++i) {
      adj_size2[i] += d[i] * adj_q[i];
      adj_d[i] = size2[i] * adj_q[i];
    }
    // d = R2^T (-n)
    Vec3<T> adj_minus_n;
    adj_mul_transpose(g2.rot, -nrm, adj_g2.rot, adj_minus_n, adj_d);
    adj_nrm -= adj_minus_n;
  }
  collision_impl::add_to_col(adj_g1.rot, 2, adj_nrm);
}

// ---- sphere : cylinder ---------------------------------------------------------------------

namespace collision_impl {

// Which feature of the cylinder the sphere centre faces (MuJoCo's mjc_SphereCylinder), from
// x = z2 . (c1 - p2), the centre's height along the axis, and the squared distance rho2 from the
// axis: the side when |x| < h and rho2 >= r^2, the cap when rho2 < r^2 and |x| >= h, the nearer
// of the two when the centre is inside, the rim circle otherwise.
enum SphereCylinderFeature { kCylSide = 0, kCylCap = 1, kCylRim = 2 };

template <class T>
PHX_HD int sphere_cylinder_feature(T x, T rho2, T r, T h) {
  bool side = abs(x) < h, cap = rho2 < r * r;
  if (side && cap) {
    if (h - abs(x) < r - sqrt(rho2)) return kCylCap;
    return kCylSide;
  }
  if (side) return kCylSide;
  if (cap) return kCylCap;
  return kCylRim;
}

}  // namespace collision_impl

// Sphere (geom1: radius size1[0]) against a cylinder (geom2: radius r = size2[0], half-height
// h = size2[1] along its z), one contact, MuJoCo's mjc_SphereCylinder:
//   side: the sphere against a sphere of radius r at the centre's foot on the axis,
//         p2 + x z2 (the normal the unit vector between them);
//   cap:  the sphere against the plane of the nearer cap, point p2 + sign(x) h z2, outward
//         normal sign(x) z2; the contact normal (sphere to cylinder) is -sign(x) z2;
//   rim:  the sphere against the nearest rim point, p2 + sign(x) h z2 + r rho_hat (a sphere of
//         radius 0).
template <class T>
PHX_HD int sphere_cylinder(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2,
                           const T* size2, T margin, ContactPoint<T>* out) {
  T r = size2[0], h = size2[1];
  Vec3<T> axis = g2.rot.col(2), vec = g1.pos - g2.pos;
  T x = dot(axis, vec);
  Vec3<T> radial = vec - x * axis;
  T rho2 = dot(radial, radial);
  int feature = collision_impl::sphere_cylinder_feature(x, rho2, r, h);
  if (feature == collision_impl::kCylSide) {
    return sphere_sphere_raw(g1.pos, size1[0], g2.pos + x * axis, r, g1.rot.col(2), axis, margin,
                             out);
  }
  T side = x > T(0) ? T(1) : T(-1);
  Vec3<T> cap = g2.pos + (side * h) * axis;
  if (feature == collision_impl::kCylCap) {
    if (!plane_sphere_raw(cap, side * axis, g1.pos, size1[0], margin, out)) return 0;
    out->normal = -out->normal;  // from the sphere (geom1) to the cylinder
    return 1;
  }
  Vec3<T> rim = cap + (r / sqrt(rho2)) * radial;
  return sphere_sphere_raw(g1.pos, size1[0], rim, T(0), g1.rot.col(2), axis, margin, out);
}

template <class T>
PHX_HD void adj_sphere_cylinder(const GeomFrame<T>& g1, const T* size1, const GeomFrame<T>& g2,
                                const T* size2, T margin, int n, const ContactPoint<T>* adj,
                                GeomFrame<T>& adj_g1, T* adj_size1, GeomFrame<T>& adj_g2,
                                T* adj_size2) {
  (void)margin;
  if (n < 1) return;
  T r = size2[0], h = size2[1];
  Vec3<T> axis = g2.rot.col(2), vec = g1.pos - g2.pos;
  T x = dot(axis, vec);
  Vec3<T> radial = vec - x * axis;
  T rho2 = dot(radial, radial);
  int feature = collision_impl::sphere_cylinder_feature(x, rho2, r, h);
  Vec3<T> adj_axis, adj_vec;
  T adj_x = T(0);
  if (feature == collision_impl::kCylSide) {
    // c = p2 + x axis
    Vec3<T> adj_c;
    adj_sphere_sphere_raw(g1.pos, size1[0], g2.pos + x * axis, r, adj[0], adj_g1.pos, adj_size1[0],
                          adj_c, adj_size2[0]);
    adj_g2.pos += adj_c;
    adj_axis += x * adj_c;
    adj_x += dot(axis, adj_c);
  } else {
    T side = x > T(0) ? T(1) : T(-1);
    Vec3<T> cap = g2.pos + (side * h) * axis;
    Vec3<T> adj_cap;
    if (feature == collision_impl::kCylCap) {
      // the raw plane contact's normal is the negated contact normal
      ContactPoint<T> adj_raw = adj[0];
      adj_raw.normal = -adj[0].normal;
      Vec3<T> adj_nc;
      adj_plane_sphere_raw(cap, side * axis, g1.pos, size1[0], adj_raw, adj_cap, adj_nc, adj_g1.pos,
                           adj_size1[0]);
      adj_axis += side * adj_nc;
    } else {
      // rim = cap + r radial / |radial|
      T rho = sqrt(rho2);
      Vec3<T> rhat = (T(1) / rho) * radial;
      Vec3<T> rim = cap + r * rhat;
      Vec3<T> adj_rim;
      T adj_zero = T(0);
      adj_sphere_sphere_raw(g1.pos, size1[0], rim, T(0), adj[0], adj_g1.pos, adj_size1[0], adj_rim,
                            adj_zero);
      adj_cap += adj_rim;
      adj_size2[0] += dot(rhat, adj_rim);
      Vec3<T> adj_radial;
      collision_impl::adj_normalize(rhat, rho, adj_radial, r * adj_rim);
      // radial = vec - x axis
      adj_vec += adj_radial;
      adj_x -= dot(axis, adj_radial);
      adj_axis -= x * adj_radial;
    }
    // cap = p2 + side h axis
    adj_g2.pos += adj_cap;
    adj_axis += (side * h) * adj_cap;
    adj_size2[1] += side * dot(axis, adj_cap);
  }
  // x = axis . vec, vec = p1 - p2
  adj_axis += adj_x * vec;
  adj_vec += adj_x * axis;
  adj_g1.pos += adj_vec;
  adj_g2.pos -= adj_vec;
  collision_impl::add_to_col(adj_g2.rot, 2, adj_axis);
}

}  // namespace phx
