// Convex-convex narrowphase: GJK distance, EPA penetration, contact features and their manifold
// (face clipping for polytopes), and the adjoint. Conventions and the adjoint contract are those
// of collision/primitives.h (normal from geom1 to geom2, dist < 0 penetrating, pos midway).
//
// Shapes. GJK and EPA run on the shapes' cores: a sphere is its centre and a capsule its segment,
// each with its radius added afterwards (MuJoCo's nativeccd treats them the same way through
// geom margins). Cores of spheres, capsules, boxes and meshes are polytopes (1, 2, 8 or nvert
// vertices), on which GJK terminates exactly (the support repeats), penetration deeper than the
// radius is needed before EPA runs, and every contact is a smooth formula of a few features.
// Ellipsoids and cylinders are curved and enter with their full support maps.
//
// Pipeline of one pair (all in fixed-size local arrays, bounded loops, no recursion):
//  1. gjk: the distance between the cores and the direction u from core 1 to core 2, stopping
//     early when the cores are farther apart than margin plus the radii; on overlap epa gives
//     the penetration depth and u. Both stop at ccd.tolerance (GJK is exact on polytope cores);
//     step 3 then makes the contact exact from the features.
//  2. the feature of each core supporting the contact (core 1 in direction u, core 2 in -u): a
//     face (a box face or hull polygon whose normal is within kFeatureAngle of the direction, a
//     cylinder cap), an edge (a hull edge or segment within kFeatureAngle of perpendicular, a
//     cylinder's side line), a vertex, or a curved point (ellipsoid, cylinder rim).
//  3a. face branch (some core supports with a face): that face is the reference; the other core's
//     incident polygon (box/hull face most opposed to it), segment, vertex or curved support point
//     is clipped to the reference face's side planes (Sutherland-Hodgman); each clipped point
//     is a contact with normal = the reference face's normal (turning with its body only,
//     Nimble's rule), dist = its height over the face minus the radii, at most 4 kept (the
//     deepest, then the points spreading them most, as MuJoCo's multiccd).
//  3b. otherwise one contact: u and the features' points solve the optimality conditions of the
//     separating direction, (I - u u^T) (p2 - p1) = 0 with p1 on feature 1 supporting u and p2
//     on feature 2 supporting -u, plus u . e = 0 for each edge e, by Newton's method started at
//     the GJK/EPA direction (this polishes curved shapes to round-off, and on polytopes gives
//     vertex-vertex, vertex-edge and edge-edge contacts: the normal of two edges is their cross
//     product and the point the midpoint of their closest points). dist = u . (p2 - p1) minus
//     the radii, pos midway between the surfaces. When the solution leaves its features (an
//     edge parameter outside [0, 1]) the features are re-classified at the new direction.
//
// A cylinder's cap is a disk face: it clips a single incident point (the other core's deepest
// vertex or support point); a capsule's segment on a face is clipped to it (up to 2 contacts).
// Validity: the gap along any direction u, u . (support2(-u) - support1(u)), bounds the distance
// from below (overlapping: no direction overlaps less than the penetration depth). A feature
// solution is kept only when its features classify so at its direction or their points realise
// the gap along it, and when its dist is not below the gap along GJK/EPA's direction by more
// than round-off (Newton reached another stationary point); otherwise the contact is the gap
// along GJK/EPA's direction (the fallback, within ccd.tolerance of the distance; no adjoint).
// Faces within kFeatureAngle are kept as before (snapped onto by design).
// EPA keeps its polytope convex on the flat patches of a cylinder's cap and side (Minkowski
// points coplanar with faces): faces the new point is within round-off of are not seen, and an
// update whose horizon is not one loop or whose new faces come nearer the origin is not made.
//
// Adjoints re-run steps 1-2 from the same inputs (same discrete choices) and differentiate the
// smooth formulas of 3a/3b: the face branch by running it on Dual numbers (passes over the 30
// inputs, as adj_box_box), the Newton branch by implicit differentiation of its optimality
// conditions F(z, theta) = 0 (dz/dtheta = -F_z^-1 F_theta, both from Dual numbers). Both are exact
// for every generic configuration of every pair. Not differentiated: mesh vertices (data), and
// the fallback contact made when a branch degenerates (coincident cores, a failed Newton solve),
// which gets no adjoint.
#pragma once

#include "phalanx/collision/box.h"
#include "phalanx/collision/types.h"
#include "phalanx/math/dual.h"

namespace phx {

// most contacts of one convex pair (a clipped face manifold reduced to 4 points)
constexpr int kMaxConvexContacts = 4;

// A support point of a shape: the world point and, for boxes and meshes, the vertex id (box
// corner: bit k set means +size_k), -1 otherwise.
template <class T>
struct SupportPoint {
  Vec3<T> pos;
  int vertex = -1;
};

// The distance of two shapes from GJK (separated) or EPA (overlapping) alone, before the
// contact features polish it: dist > 0 is the gap, dist < 0 minus the penetration depth;
// normal the unit direction from shape 1 to shape 2; witness1 and witness2 the nearest (or,
// overlapping, deepest) points; far true when GJK stopped because the shapes are farther apart
// than the cutoff it was given (dist is then only a lower bound).
template <class T>
struct ConvexDistance {
  T dist = T(0);
  Vec3<T> normal{T(1), T(0), T(0)};
  Vec3<T> witness1, witness2;
  bool far = false;
};

namespace collision_impl {

// bounds of the local arrays: EPA polytope vertices and faces for kMaxCcdIterations (a closed
// triangulated polytope of V vertices has 2 V - 4 faces), the vertices of a clipped polygon, and
// the Newton iterations of the feature solve
constexpr int kEpaMaxVerts = 4 + kMaxCcdIterations;
constexpr int kEpaMaxFaces = 2 * kEpaMaxVerts;
constexpr int kClipCap = 64;
constexpr int kNewtonIterations = 8;
// hull vertex count from which the support map hill-climbs over the adjacency (MuJoCo's rule)
constexpr int kHillClimbMin = 10;
// angle (radians) within which a face normal counts as the contact direction and an edge as
// perpendicular to it: far above the round-off of polytope directions, below the angles that
// distinguish features in practice
constexpr double kFeatureAngle = 1e-3;

template <class T>
PHX_HD PHX_INLINE T tiny() {
  return T(kSinglePrecision<T> ? 1e-30 : 1e-200);
}

PHX_HD PHX_INLINE bool is_polytope_core(int type) {
  return type == kGeomSphere || type == kGeomCapsule || type == kGeomBox || type == kGeomMesh;
}

// a shape on scalar S (T or a Dual of it), its mesh data on the stored scalar T
template <class S, class T>
struct ConvexBody {
  int type = kGeomSphere;
  GeomFrame<S> frame;
  S size[3];
  const ConvexHull<T>* hull = nullptr;

  // the radius added to the core (spheres and capsules)
  PHX_HD S radius() const { return (type == kGeomSphere || type == kGeomCapsule) ? size[0] : S(0); }
  PHX_HD int nvert() const {
    return type == kGeomSphere ? 1 : type == kGeomCapsule ? 2 : type == kGeomBox ? 8 : hull->nvert;
  }
  // core vertex i in the geom frame (capsule: 0 at -h, 1 at +h)
  PHX_HD Vec3<S> vert_local(int i) const {
    switch (type) {
      case kGeomCapsule:
        return {S(0), S(0), i ? size[1] : -size[1]};
      case kGeomBox:
        return box_corner(i, size);
      case kGeomMesh:
        return Vec3<S>::load(hull->vert + 3 * i);
      default:
        return {};
    }
  }
  PHX_HD Vec3<S> vert(int i) const { return frame.rot * vert_local(i) + frame.pos; }
  // a point x of the geom frame in world, x on S or on a Dual of S
  template <class U>
  PHX_HD Vec3<U> to_world(const Vec3<U>& x) const {
    Vec3<U> r = frame.rot * x;
    return {r.x + frame.pos.x, r.y + frame.pos.y, r.z + frame.pos.z};
  }
  // hull edges of vertex i
  PHX_HD int nneighbor(int i) const {
    return type == kGeomCapsule ? 1
           : type == kGeomBox   ? 3
           : type == kGeomMesh  ? hull->adjnum[i]
                                : 0;
  }
  PHX_HD int neighbor(int i, int k) const {
    return type == kGeomCapsule ? 1 - i
           : type == kGeomBox   ? (i ^ (1 << k))
                                : hull->adj[hull->adjadr[i] + k];
  }
  // polygonal faces (box: face 2 k + 1 at +size_k, 2 k at -size_k)
  PHX_HD int nface() const { return type == kGeomBox ? 6 : type == kGeomMesh ? hull->npoly : 0; }
  PHX_HD int face_nvert(int f) const { return type == kGeomBox ? 4 : hull->polyvertnum[f]; }
  // vertex k of face f, counter-clockwise about its outward normal
  PHX_HD int face_vert(int f, int k) const {
    if (type == kGeomMesh) return hull->polyvert[hull->polyvertadr[f] + k];
    int a = f / 2, b = (a + 1) % 3, c = (a + 2) % 3;
    bool up = f % 2;
    int j = up ? k : 3 - k;  // (-,-), (+,-), (+,+), (-,+) in (b, c), reversed on the - face
    bool pb = j == 1 || j == 2, pc = j >= 2;
    return (up ? 1 << a : 0) | (pb ? 1 << b : 0) | (pc ? 1 << c : 0);
  }
  PHX_HD Vec3<S> face_normal(int f) const {
    Vec3<S> n;
    if (type == kGeomMesh) {
      n = Vec3<S>::load(hull->polynormal + 3 * f);
    } else {
      n[f / 2] = f % 2 ? S(1) : S(-1);
    }
    return frame.rot * n;
  }
};

template <class S, class T>
PHX_HD ConvexBody<S, T> make_body(const GeomShape<T>& shape, const GeomFrame<S>& frame,
                                  const S* size) {
  ConvexBody<S, T> b;
  b.type = shape.type;
  b.frame = frame;
  for (int i = 0; i < 3; ++i) b.size[i] = size ? size[i] : S(0);
  b.hull = &shape.hull;
  return b;
}

// the support vertex of a polytope core in world direction d; meshes of kHillClimbMin or more
// vertices hill-climb from `start` over the adjacency, others scan
template <class S, class T>
PHX_HD int support_vertex(const ConvexBody<S, T>& b, const Vec3<S>& d, int start = 0) {
  Vec3<S> dl = mul_transpose(b.frame.rot, d);
  switch (b.type) {
    case kGeomSphere:
      return 0;
    case kGeomCapsule:
      return dl.z >= S(0) ? 1 : 0;
    case kGeomBox:
      return (dl.x >= S(0) ? 1 : 0) | (dl.y >= S(0) ? 2 : 0) | (dl.z >= S(0) ? 4 : 0);
    default:
      break;
  }
  const ConvexHull<T>& h = *b.hull;
  auto proj = [&](int i) { return dot(dl, Vec3<S>::load(h.vert + 3 * i)); };
  if (h.nvert < kHillClimbMin) {
    int best = 0;
    S bestp = proj(0);
    for (int i = 1; i < h.nvert; ++i) {
      S p = proj(i);
      if (p > bestp) bestp = p, best = i;
    }
    return best;
  }
  int cur = (start >= 0 && start < h.nvert) ? start : 0;
  S curp = proj(cur);
  for (int step = 0; step < h.nvert; ++step) {  // each step strictly increases the projection
    int next = cur;
    S nextp = curp;
    for (int k = 0; k < h.adjnum[cur]; ++k) {
      int j = h.adj[h.adjadr[cur] + k];
      S p = proj(j);
      if (p > nextp) nextp = p, next = j;
    }
    if (next == cur) break;
    cur = next, curp = nextp;
  }
  return cur;
}

// the support point of a curved shape (ellipsoid; cylinder: the rim point, the cap's centre in
// the axis direction) in world direction d; the body on B, d on S (B, or a Dual of it)
template <class B, class S, class T>
PHX_HD Vec3<S> curved_support(const ConvexBody<B, T>& b, const Vec3<S>& d) {
  Vec3<S> dl = mul_transpose(b.frame.rot, d), x;
  if (b.type == kGeomEllipsoid) {
    // x = A^2 d / |A d|, A = diag(size): the point whose normal A^-2 x is parallel to d
    Vec3<S> ad{b.size[0] * dl.x, b.size[1] * dl.y, b.size[2] * dl.z};
    S len = sqrt(dot(ad, ad));
    if (len > tiny<S>()) {
      S inv = S(1) / len;
      x = Vec3<S>{b.size[0] * ad.x * inv, b.size[1] * ad.y * inv, b.size[2] * ad.z * inv};
    }
  } else {  // cylinder
    S rho2 = dl.x * dl.x + dl.y * dl.y;
    if (rho2 > tiny<S>()) {
      S k = b.size[0] / sqrt(rho2);
      x.x = k * dl.x;
      x.y = k * dl.y;
    }
    x.z = dl.z >= S(0) ? b.size[1] : -b.size[1];
  }
  return b.to_world(x);
}

// the end `end` (0: -h, 1: +h) of a cylinder's side line supporting world direction d (the
// body on B, d on S as curved_support)
template <class B, class S, class T>
PHX_HD Vec3<S> cylinder_side_end(const ConvexBody<B, T>& b, const Vec3<S>& d, int end) {
  Vec3<S> dl = mul_transpose(b.frame.rot, d), x;
  S k = b.size[0] / sqrt(dl.x * dl.x + dl.y * dl.y);
  x.x = k * dl.x;
  x.y = k * dl.y;
  x.z = end ? b.size[1] : -b.size[1];
  return b.to_world(x);
}

// the core's support point in world direction d (vertex id in *vertex for polytope cores)
template <class T>
PHX_HD Vec3<T> core_support(const ConvexBody<T, T>& b, const Vec3<T>& d, int* vertex) {
  if (is_polytope_core(b.type)) {
    *vertex = support_vertex(b, d, *vertex);
    return b.vert(*vertex);
  }
  *vertex = -1;
  return curved_support(b, d);
}

}  // namespace collision_impl

// The support point of a shape (sphere, capsule, ellipsoid, cylinder, box, mesh) in world
// direction dir: the point of the shape maximising dir . x. Meshes of 10 or more vertices
// hill-climb over the hull adjacency from vertex `start` (e.g. the previous support vertex).
template <class T>
PHX_HD SupportPoint<T> support(const GeomShape<T>& shape, const GeomFrame<T>& frame,
                               const Vec3<T>& dir, int start = 0) {
  collision_impl::ConvexBody<T, T> b = collision_impl::make_body(shape, frame, shape.size);
  SupportPoint<T> s;
  s.vertex = start;
  s.pos = collision_impl::core_support(b, dir, &s.vertex);
  if (b.type == kGeomSphere || b.type == kGeomCapsule) {
    T len = norm(dir);
    if (len > collision_impl::tiny<T>()) s.pos += (b.size[0] / len) * dir;
    s.vertex = -1;
  }
  return s;
}

namespace collision_impl {

// ---- GJK -----------------------------------------------------------------------------------

// a point of the Minkowski difference core1 - core2 with its two support points
template <class T>
struct MinkowskiPoint {
  Vec3<T> w, a, b;
  int ia = -1, ib = -1;
};

template <class T>
PHX_HD MinkowskiPoint<T> minkowski_support(const ConvexBody<T, T>& b1, const ConvexBody<T, T>& b2,
                                           const Vec3<T>& d, int start1, int start2) {
  MinkowskiPoint<T> m;
  m.ia = start1;
  m.ib = start2;
  m.a = core_support(b1, d, &m.ia);
  m.b = core_support(b2, -d, &m.ib);
  m.w = m.a - m.b;
  return m;
}

// solve the n x n system A x = b (n <= 4) by Gaussian elimination with partial pivoting; false
// when singular (a pivot below rel times the largest entry). Each size is its own unrolled
// instance (solve_small below dispatches), the same arithmetic as a loop over n.
template <int n, class T>
PHX_HD PHX_INLINE bool solve_small_n(T (*A)[4], T* b, T rel) {
  T scale(0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) scale = abs(A[i][j]) > scale ? abs(A[i][j]) : scale;
  if (!(scale > T(0))) return false;
  for (int c = 0; c < n; ++c) {
    int p = c;
    for (int r = c + 1; r < n; ++r)
      if (abs(A[r][c]) > abs(A[p][c])) p = r;
    if (!(abs(A[p][c]) > rel * scale)) return false;
    if (p != c) {
      for (int j = 0; j < n; ++j) {
        T t = A[c][j];
        A[c][j] = A[p][j];
        A[p][j] = t;
      }
      T t = b[c];
      b[c] = b[p];
      b[p] = t;
    }
    for (int r = c + 1; r < n; ++r) {
      T f = A[r][c] / A[c][c];
      for (int j = c; j < n; ++j) A[r][j] -= f * A[c][j];
      b[r] -= f * b[c];
    }
  }
  for (int c = n - 1; c >= 0; --c) {
    for (int j = c + 1; j < n; ++j) b[c] -= A[c][j] * b[j];
    b[c] /= A[c][c];
  }
  return true;
}

template <class T>
PHX_HD bool solve_small(T (*A)[4], T* b, int n, T rel) {
  switch (n) {
    case 0:
      return false;
    case 1:
      return solve_small_n<1>(A, b, rel);
    case 2:
      return solve_small_n<2>(A, b, rel);
    case 3:
      return solve_small_n<3>(A, b, rel);
    default:
      return solve_small_n<4>(A, b, rel);
  }
}

// The point of the simplex w[0..n) nearest the origin, by trying the faces (subsets) of it: the
// nearest point is the projection onto the affine hull of the face containing it in its
// interior, and every such projection with positive barycentric weights lies in the simplex, so
// the nearest among those is the answer. Only faces with the newest point w[n-1] are tried (8
// subsets at most): GJK adds a support point only when it lies beyond the plane through the
// previous nearest point v normal to v (v . w < v . v), so the new simplex has points nearer
// than v and the nearest face must contain w. Keeps only the vertices of that face (in order)
// and writes their weights; returns the nearest point.
template <class T>
PHX_HD Vec3<T> simplex_nearest(MinkowskiPoint<T>* s, int& n, T* lambda) {
  T best_d2(-1);
  const int newest = 1 << (n - 1);
  int best_mask = newest;
  T best_l[4] = {T(1), T(0), T(0), T(0)};
  Vec3<T> best_v = s[n - 1].w;
  for (int mask = newest; mask < (1 << n); ++mask) {
    int idx[4], k = 0;
    for (int i = 0; i < n; ++i)
      if (mask >> i & 1) idx[k++] = i;
    // minimise |p0 + sum_j mu_j e_j|, e_j = p_j - p0: Gram system G mu = -E^T p0
    Vec3<T> p0 = s[idx[0]].w;
    T l[4] = {T(1), T(0), T(0), T(0)};
    if (k > 1) {
      T G[4][4], rhs[4];
      Vec3<T> e[3];
      for (int j = 0; j < k - 1; ++j) e[j] = s[idx[j + 1]].w - p0;
      for (int i = 0; i < k - 1; ++i) {
        for (int j = 0; j < k - 1; ++j) G[i][j] = dot(e[i], e[j]);
        rhs[i] = -dot(e[i], p0);
      }
      if (!solve_small(G, rhs, k - 1, T(kSinglePrecision<T> ? 1e-7 : 1e-14))) continue;
      l[0] = T(1);
      bool inside = true;
      for (int j = 0; j < k - 1; ++j) {
        l[j + 1] = rhs[j];
        l[0] -= rhs[j];
        inside = inside && rhs[j] > T(0);
      }
      if (!inside || !(l[0] > T(0))) continue;
    }
    Vec3<T> v;
    for (int j = 0; j < k; ++j) v += l[j] * s[idx[j]].w;
    T d2 = dot(v, v);
    if (best_d2 < T(0) || d2 < best_d2) {
      best_d2 = d2;
      best_mask = mask;
      best_v = v;
      for (int j = 0; j < 4; ++j) best_l[j] = l[j];
    }
  }
  int k = 0;
  for (int i = 0; i < n; ++i)
    if (best_mask >> i & 1) s[k++] = s[i];
  n = k;
  for (int j = 0; j < 4; ++j) lambda[j] = best_l[j];
  return best_v;
}

// GJK result with its final simplex (for EPA) and the support vertex ids to start from
template <class T>
struct GjkState {
  MinkowskiPoint<T> simplex[4];
  int n = 0;
  Vec3<T> v;  // nearest point of core1 - core2 to the origin
  T lambda[4] = {};
  bool overlap = false, far = false;
  int iterations = 0;  // support points taken after the first
};

// GJK distance between the cores (Gilbert, Johnson, Keerthi 1988, with the face-enumeration
// subalgorithm above). Stops when the support point repeats (exact on polytope cores), when the
// gap |v|^2 - v.w falls below tolerance^2 |v|^2, when the origin is reached (overlap), or when
// a separating plane puts the cores farther apart than cutoff (far).
template <class T>
PHX_HD GjkState<T> gjk(const ConvexBody<T, T>& b1, const ConvexBody<T, T>& b2,
                       const CcdSettings<T>& ccd, T cutoff) {
  GjkState<T> g;
  int iters = ccd.iterations < kMaxCcdIterations ? ccd.iterations : kMaxCcdIterations;
  Vec3<T> d = b2.frame.pos - b1.frame.pos;
  if (dot(d, d) < tiny<T>()) d = Vec3<T>{T(1), T(0), T(0)};
  g.simplex[0] = minkowski_support(b1, b2, d, 0, 0);
  g.n = 1;
  g.lambda[0] = T(1);
  g.v = g.simplex[0].w;
  T eps2 = ccd.tolerance * ccd.tolerance;
  for (int it = 0; it < iters; ++it) {
    g.iterations = it + 1;
    T vv = dot(g.v, g.v);
    if (vv <= tiny<T>() * T(1e10)) {
      g.overlap = true;
      return g;
    }
    const MinkowskiPoint<T>& last = g.simplex[g.n - 1];
    MinkowskiPoint<T> m = minkowski_support(b1, b2, -g.v, last.ia, last.ib);
    T vw = dot(g.v, m.w);
    // the plane through w normal to v separates the origin from core1 - core2 by vw / |v|
    if (vw > T(0) && vw * vw > cutoff * cutoff * vv && cutoff >= T(0)) {
      g.far = true;
      return g;
    }
    if (vv - vw <= eps2 * vv) return g;
    bool repeat = false;
    for (int i = 0; i < g.n; ++i)
      repeat =
          repeat || (m.ia >= 0 && m.ib >= 0 && m.ia == g.simplex[i].ia && m.ib == g.simplex[i].ib);
    if (repeat) return g;
    g.simplex[g.n++] = m;
    g.v = simplex_nearest(g.simplex, g.n, g.lambda);
    if (g.n == 4) {  // the origin is inside the tetrahedron
      g.overlap = true;
      return g;
    }
  }
  g.overlap = dot(g.v, g.v) <= tiny<T>() * T(1e10);
  return g;
}

// ---- EPA -----------------------------------------------------------------------------------

template <class T>
struct EpaFace {
  Vec3<T> n;           // outward unit normal
  T dist;              // n . (any vertex): distance of the face's plane from the origin
  unsigned char v[3];  // its vertices (of at most kEpaMaxVerts; bytes keep EPA's stack small)
  bool alive;
};
static_assert(kEpaMaxVerts <= 256, "EpaFace holds vertex indices in bytes");

template <class T>
PHX_HD bool epa_make_face(const MinkowskiPoint<T>* p, int a, int b, int c, EpaFace<T>& f) {
  Vec3<T> n = cross(p[b].w - p[a].w, p[c].w - p[a].w);
  T len = norm(n);
  if (!(len > tiny<T>())) return false;
  f.v[0] = static_cast<unsigned char>(a), f.v[1] = static_cast<unsigned char>(b);
  f.v[2] = static_cast<unsigned char>(c);
  f.n = (T(1) / len) * n;
  f.dist = dot(f.n, p[a].w);
  f.alive = true;
  return true;
}

// EPA result: the direction u from core1 to core2 (the outward normal of core1 - core2 at its
// boundary point nearest the origin), the depth, and the witnesses
template <class T>
struct EpaResult {
  bool ok = false;
  Vec3<T> u;
  T depth = T(0);
  Vec3<T> a, b;
  int iterations = 0;  // expansions tried
};

// Expanding polytope algorithm (van den Bergen 2001) from GJK's final simplex, blown up to a
// tetrahedron. At most kEpaMaxVerts vertices and kEpaMaxFaces faces; each iteration adds the
// support point in the nearest face's normal and re-triangulates the horizon of the faces it
// sees, until that support gains less than ccd.tolerance over the face.
template <class T>
PHX_HD EpaResult<T> epa(const ConvexBody<T, T>& b1, const ConvexBody<T, T>& b2,
                        const GjkState<T>& g, const CcdSettings<T>& ccd) {
  EpaResult<T> r;
  MinkowskiPoint<T> p[kEpaMaxVerts];
  int np = g.n;
  for (int i = 0; i < g.n; ++i) p[i] = g.simplex[i];
  // blow the simplex up to a tetrahedron containing the origin (GJK left it on the simplex)
  const Vec3<T> axes[3] = {{T(1), T(0), T(0)}, {T(0), T(1), T(0)}, {T(0), T(0), T(1)}};
  T scale(0);
  for (int i = 0; i < 3; ++i) {
    Vec3<T> e =
        minkowski_support(b1, b2, axes[i], 0, 0).w - minkowski_support(b1, b2, -axes[i], 0, 0).w;
    scale = e[i] > scale ? e[i] : scale;
  }
  T flat = T(kSinglePrecision<T> ? 1e-5 : 1e-10) * scale;
  T vis = T(kSinglePrecision<T> ? 1e-6 : 1e-12) * scale;
  if (np == 1) {
    for (int i = 0; i < 6 && np == 1; ++i) {
      Vec3<T> d = i % 2 ? -axes[i / 2] : axes[i / 2];
      MinkowskiPoint<T> m = minkowski_support(b1, b2, d, 0, 0);
      if (norm(m.w - p[0].w) > flat) p[np++] = m;
    }
  }
  if (np == 2) {
    Vec3<T> e = p[1].w - p[0].w;
    int k = abs(e.x) < abs(e.y) ? (abs(e.x) < abs(e.z) ? 0 : 2) : (abs(e.y) < abs(e.z) ? 1 : 2);
    Vec3<T> d1 = cross(e, axes[k]), d2 = cross(e, d1);
    Vec3<T> dirs[4] = {d1, -d1, d2, -d2};
    for (int i = 0; i < 4 && np == 2; ++i) {
      MinkowskiPoint<T> m = minkowski_support(b1, b2, dirs[i], 0, 0);
      if (norm(cross(m.w - p[0].w, e)) > flat * norm(e)) p[np++] = m;
    }
  }
  if (np == 3) {
    Vec3<T> n = cross(p[1].w - p[0].w, p[2].w - p[0].w);
    T ln = norm(n);
    for (int i = 0; i < 2 && np == 3 && ln > tiny<T>(); ++i) {
      MinkowskiPoint<T> m = minkowski_support(b1, b2, i ? -n : n, 0, 0);
      if (abs(dot(n, m.w - p[0].w)) > flat * ln) p[np++] = m;
    }
  }
  if (np < 4) return r;  // core1 - core2 is flat (coincident points or crossing segments)
  EpaFace<T> f[kEpaMaxFaces];
  int nf = 0;
  const int tet[4][3] = {{0, 1, 2}, {0, 3, 1}, {0, 2, 3}, {1, 3, 2}};
  bool flip = dot(cross(p[1].w - p[0].w, p[2].w - p[0].w), p[3].w - p[0].w) > T(0);
  for (int i = 0; i < 4; ++i) {
    int a = tet[i][0], b = flip ? tet[i][2] : tet[i][1], c = flip ? tet[i][1] : tet[i][2];
    if (!epa_make_face(p, a, b, c, f[nf])) return r;
    ++nf;
  }
  int iters = ccd.iterations < kMaxCcdIterations ? ccd.iterations : kMaxCcdIterations;
  int best = 0;
  for (int it = 0; it <= iters; ++it) {
    r.iterations = it + 1;
    best = -1;
    for (int i = 0; i < nf; ++i)
      if (f[i].alive && (best < 0 || f[i].dist < f[best].dist)) best = i;
    if (best < 0) return r;
    if (it == iters || np == kEpaMaxVerts) break;
    MinkowskiPoint<T> m =
        minkowski_support(b1, b2, f[best].n, p[f[best].v[0]].ia, p[f[best].v[0]].ib);
    if (dot(f[best].n, m.w) - f[best].dist <= ccd.tolerance) break;
    // the faces the new point sees; their edges not shared with another seen face form the
    // horizon, each joined to the new point (orientation kept). The polytope is only changed
    // when no new face is degenerate (zero area), else EPA stops here.
    p[np] = m;
    bool seen[kEpaMaxFaces];
    unsigned char edges[3 * kEpaMaxFaces][2];
    int ne = 0;
    for (int i = 0; i < nf; ++i) {
      // faces the new point is nearly coplanar with (round-off of thin faces) are not seen,
      // the nearest face always is: a point coplanar with a face (a flat patch of a cylinder's
      // cap or side, a repeated support point) otherwise splits the horizon
      seen[i] = f[i].alive && (i == best || dot(f[i].n, m.w) - f[i].dist > vis);
      if (!seen[i]) continue;
      for (int k = 0; k < 3; ++k) {
        int a = f[i].v[k], b = f[i].v[(k + 1) % 3];
        int shared = -1;
        for (int e = 0; e < ne && shared < 0; ++e)
          if (edges[e][0] == b && edges[e][1] == a) shared = e;
        if (shared >= 0) {
          edges[shared][0] = edges[ne - 1][0];
          edges[shared][1] = edges[ne - 1][1];
          --ne;
        } else {
          edges[ne][0] = static_cast<unsigned char>(a);
          edges[ne][1] = static_cast<unsigned char>(b);
          ++ne;
        }
      }
    }
    bool sound = ne >= 3 && ne <= kEpaMaxFaces;
    // the horizon must be one closed loop (each vertex once as a start and once as an end), and
    // the new faces must keep the origin at least the nearest face's distance inside (the grown
    // polytope contains the old one): else the update would break convexity
    for (int e = 0; e < ne && sound; ++e) {
      int starts = 0, ends = 0;
      for (int e2 = 0; e2 < ne; ++e2) {
        starts += edges[e2][0] == edges[e][0];
        ends += edges[e2][1] == edges[e][0];
      }
      sound = starts == 1 && ends == 1;
    }
    for (int e = 0; e < ne && sound; ++e) {  // the faces are made again below, once sound
      EpaFace<T> face;
      sound =
          epa_make_face(p, edges[e][0], edges[e][1], np, face) && face.dist >= f[best].dist - vis;
    }
    int nseen = 0;
    for (int i = 0; i < nf; ++i) nseen += seen[i];
    if (!sound || nf - nseen + ne > kEpaMaxFaces) break;
    for (int i = 0; i < nf; ++i)
      if (seen[i]) f[i].alive = false;
    for (int e = 0; e < ne; ++e) {
      int slot = -1;
      for (int i = 0; i < nf && slot < 0; ++i)
        if (!f[i].alive) slot = i;
      if (slot < 0) slot = nf++;
      epa_make_face(p, edges[e][0], edges[e][1], np, f[slot]);
    }
    ++np;
  }
  if (best < 0) return r;
  const EpaFace<T>& fb = f[best];
  r.ok = true;
  r.u = fb.n;
  r.depth = fb.dist;
  // barycentric weights of the origin's projection on the face give the witnesses
  Vec3<T> q = fb.dist * fb.n;
  const Vec3<T>&A = p[fb.v[0]].w, &B = p[fb.v[1]].w, &C = p[fb.v[2]].w;
  T area = dot(cross(B - A, C - A), fb.n);
  T la = dot(cross(B - q, C - q), fb.n) / area, lb = dot(cross(C - q, A - q), fb.n) / area;
  T lc = T(1) - la - lb;
  r.a = la * p[fb.v[0]].a + lb * p[fb.v[1]].a + lc * p[fb.v[2]].a;
  r.b = la * p[fb.v[0]].b + lb * p[fb.v[1]].b + lc * p[fb.v[2]].b;
  return r;
}

// GJK, then EPA on overlap, on the cores; cutoff < 0 disables the early exit
template <class T>
PHX_HD ConvexDistance<T> core_distance(const ConvexBody<T, T>& b1, const ConvexBody<T, T>& b2,
                                       const CcdSettings<T>& ccd, T cutoff, bool* ok) {
  ConvexDistance<T> d;
  *ok = true;
  GjkState<T> g = gjk(b1, b2, ccd, cutoff);
  if (ccd.counts) ccd.counts[0] += g.iterations;
  if (!g.overlap) {
    T len = norm(g.v);
    d.far = g.far;
    d.dist = len;
    d.normal = (T(-1) / len) * g.v;
    for (int i = 0; i < g.n; ++i) {
      d.witness1 += g.lambda[i] * g.simplex[i].a;
      d.witness2 += g.lambda[i] * g.simplex[i].b;
    }
    return d;
  }
  EpaResult<T> e = epa(b1, b2, g, ccd);
  if (ccd.counts) ccd.counts[1] += e.iterations;
  if (!e.ok) {  // flat difference: coincident centres or crossing segments
    *ok = false;
    d.dist = T(0);
    d.witness1 = d.witness2 = g.simplex[0].a;
    return d;
  }
  d.dist = -e.depth;
  d.normal = e.u;
  d.witness1 = e.a;
  d.witness2 = e.b;
  return d;
}

}  // namespace collision_impl

// GJK/EPA distance of two shapes (full shapes: radii included), see ConvexDistance
template <class T>
PHX_HD ConvexDistance<T> convex_distance(const GeomShape<T>& s1, const GeomFrame<T>& g1,
                                         const GeomShape<T>& s2, const GeomFrame<T>& g2,
                                         const CcdSettings<T>& ccd) {
  using namespace collision_impl;
  ConvexBody<T, T> b1 = make_body(s1, g1, s1.size), b2 = make_body(s2, g2, s2.size);
  bool ok;
  ConvexDistance<T> d = core_distance(b1, b2, ccd, T(-1), &ok);
  T r1 = b1.radius(), r2 = b2.radius();
  d.dist -= r1 + r2;
  d.witness1 += r1 * d.normal;
  d.witness2 -= r2 * d.normal;
  return d;
}

namespace collision_impl {

// ---- contact features ----------------------------------------------------------------------

enum FeatureKind : int { kFeatureVertex, kFeatureEdge, kFeatureFace, kFeatureCurved };

// a core's feature: vertex id a; edge (a, b) (a cylinder's side line: -1, -1); face a (a
// cylinder's cap: 0 at -h, 1 at +h); curved point
struct Feature {
  int kind = kFeatureVertex;
  int a = -1, b = -1;
  PHX_HD bool operator==(const Feature& o) const { return kind == o.kind && a == o.a && b == o.b; }
};

// the feature of a core supporting unit direction d (allow_face false: edges and vertices only)
template <class T>
PHX_HD Feature classify(const ConvexBody<T, T>& b, const Vec3<T>& d, bool allow_face) {
  const T cos_face = T(1) - T(0.5 * kFeatureAngle * kFeatureAngle), sin_edge = T(kFeatureAngle);
  Feature f;
  if (!is_polytope_core(b.type)) {
    Vec3<T> axis = b.frame.rot.col(2);
    T dz = dot(axis, d) / norm(axis);
    if (b.type == kGeomCylinder && allow_face && abs(dz) >= cos_face) {
      f.kind = kFeatureFace;
      f.a = dz > T(0) ? 1 : 0;
    } else if (b.type == kGeomCylinder && abs(dz) <= sin_edge) {
      f.kind = kFeatureEdge;
    } else {
      f.kind = kFeatureCurved;
    }
    return f;
  }
  int v = support_vertex(b, d);
  if (allow_face) {
    int best = -1;
    T best_dot = cos_face;
    for (int k = 0; k < b.nface(); ++k) {
      // normalised: the rotation's entries are independent inputs and need not stay orthonormal
      Vec3<T> n = b.face_normal(k);
      T c = dot(n, d) / norm(n);
      if (c >= best_dot) best_dot = c, best = k;
    }
    if (best >= 0) {
      f.kind = kFeatureFace;
      f.a = best;
      return f;
    }
  }
  f.a = v;
  Vec3<T> pv = b.vert(v);
  T best_sin = sin_edge;
  for (int k = 0; k < b.nneighbor(v); ++k) {
    int w = b.neighbor(v, k);
    Vec3<T> e = b.vert(w) - pv;
    T len = norm(e);
    if (!(len > tiny<T>())) continue;
    T s = abs(dot(e, d)) / len;
    if (s <= best_sin) {
      best_sin = s;
      f.kind = kFeatureEdge;
      f.a = v < w ? v : w;
      f.b = v < w ? w : v;
    }
  }
  return f;
}

// A point of a feature: vertex, edge point e0 + t (e1 - e0), curved support in direction d
// (the body on B, d and t on S as curved_support)
template <class B, class S, class T>
PHX_HD Vec3<S> feature_point(const ConvexBody<B, T>& b, const Feature& f, const Vec3<S>& d, S t,
                             Vec3<S>* edge) {
  if (f.kind == kFeatureVertex) return Vec3<S>::from(b.vert(f.a));
  if (f.kind == kFeatureCurved) return curved_support(b, d);
  Vec3<S> e0 = f.a >= 0 ? Vec3<S>::from(b.vert(f.a)) : cylinder_side_end(b, d, 0);
  Vec3<S> e1 = f.a >= 0 ? Vec3<S>::from(b.vert(f.b)) : cylinder_side_end(b, d, 1);
  *edge = e1 - e0;
  return e0 + t * *edge;
}

// a deterministic tangent basis of a unit vector
template <class T>
PHX_HD void tangent_basis(const Vec3<T>& n, Vec3<T>& t1, Vec3<T>& t2) {
  Vec3<T> e = abs(n.x) < T(0.6) ? Vec3<T>{T(1), T(0), T(0)} : Vec3<T>{T(0), T(1), T(0)};
  t1 = e - dot(n, e) * n;
  t1 = (T(1) / norm(t1)) * t1;
  t2 = cross(n, t1);
}

// The optimality conditions of the one-contact branch, F(z) with unknowns z = (alpha, beta, t1,
// t2): u = normalize(u0 + alpha e1 + beta e2) (e1, e2 a tangent basis of u0), p1 on feature 1
// (supporting u; edge parameter t1), p2 on feature 2 (supporting -u; t2); w = p2 - p1;
//   F0 = e1 . (I - u u^T) w, F1 = e2 . (I - u u^T) w   (w parallel to u),
//   F2 = u . edge1 (or t1 when feature 1 has no edge), F3 = u . edge2 (or t2).
// Also writes the contact: normal u, dist = u . w - r1 - r2, pos = (p1 + p2 + (r1 - r2) u) / 2.
// The bodies are on B: S itself (the adjoint, whose bodies carry derivatives), or T (Newton's
// method, which differentiates in z alone and so keeps the bodies' 30 numbers plain).
template <class B, class S, class T>
PHX_HD void feature_system(const ConvexBody<B, T>& b1, const Feature& f1,
                           const ConvexBody<B, T>& b2, const Feature& f2, const Vec3<T>& u0,
                           const S* z, S* F, ContactPoint<S>& out) {
  Vec3<T> e1, e2;
  tangent_basis(u0, e1, e2);
  Vec3<S> u = Vec3<S>{S(u0.x), S(u0.y), S(u0.z)} + z[0] * Vec3<S>{S(e1.x), S(e1.y), S(e1.z)} +
              z[1] * Vec3<S>{S(e2.x), S(e2.y), S(e2.z)};
  u = (S(1) / sqrt(dot(u, u))) * u;
  Vec3<S> edge1, edge2;
  Vec3<S> p1 = feature_point(b1, f1, u, z[2], &edge1);
  Vec3<S> p2 = feature_point(b2, f2, -u, z[3], &edge2);
  Vec3<S> w = p2 - p1;
  S uw = dot(u, w);
  Vec3<S> r = w - uw * u;
  F[0] = dot(Vec3<S>{S(e1.x), S(e1.y), S(e1.z)}, r);
  F[1] = dot(Vec3<S>{S(e2.x), S(e2.y), S(e2.z)}, r);
  F[2] = f1.kind == kFeatureEdge ? dot(u, edge1) : z[2];
  F[3] = f2.kind == kFeatureEdge ? dot(u, edge2) : z[3];
  S r1 = b1.radius(), r2 = b2.radius();
  out.normal = u;
  out.dist = uw - r1 - r2;
  out.pos = S(0.5) * (p1 + p2 + (r1 - r2) * u);
}

template <class S, class T>
PHX_HD void lift_body(const ConvexBody<T, T>& b, ConvexBody<S, T>& d) {
  d.type = b.type;
  d.hull = b.hull;
  for (int i = 0; i < 3; ++i) d.frame.pos[i] = S(b.frame.pos[i]), d.size[i] = S(b.size[i]);
  for (int i = 0; i < 9; ++i) d.frame.rot.m[i] = S(b.frame.rot.m[i]);
}

// Newton's method on feature_system from direction u (edge parameters start mid-edge), at most
// kNewtonIterations steps; on success u is the solution's direction and t its edge parameters.
// False when the Jacobian turns singular or the result is not finite. On the GPU a device
// function of its own: its dual numbers are not allocated beside what convex_plan holds.
template <class T>
PHX_HD PHX_DEVICE_NOINLINE bool solve_features(const ConvexBody<T, T>& b1, const Feature& f1,
                                               const ConvexBody<T, T>& b2, const Feature& f2,
                                               Vec3<T>& u, T* t) {
  using D = Dual<T, 4>;
  t[0] = f1.kind == kFeatureEdge ? T(0.5) : T(0);
  t[1] = f2.kind == kFeatureEdge ? T(0.5) : T(0);
  for (int it = 0; it < kNewtonIterations; ++it) {
    D z[4] = {D(T(0)), D(T(0)), D(t[0]), D(t[1])}, F[4];
    for (int i = 0; i < 4; ++i) z[i].d[i] = T(1);
    ContactPoint<D> c;
    feature_system(b1, f1, b2, f2, u, z, F, c);
    T J[4][4], step[4];
    for (int i = 0; i < 4; ++i) {
      step[i] = -F[i].v;
      for (int j = 0; j < 4; ++j) J[i][j] = F[i].d[j];
    }
    if (!solve_small(J, step, 4, T(kSinglePrecision<T> ? 1e-7 : 1e-14))) return false;
    Vec3<T> e1, e2;
    tangent_basis(u, e1, e2);
    u = u + step[0] * e1 + step[1] * e2;
    u = (T(1) / norm(u)) * u;
    t[0] += step[2];
    t[1] += step[3];
    if (!(isfinite(u.x) && isfinite(u.y) && isfinite(u.z) && isfinite(t[0]) && isfinite(t[1])))
      return false;
    // converged: a step this small leaves an error of its square, below the scalar's rounding
    T size(0);
    for (int i = 0; i < 4; ++i) size = abs(step[i]) > size ? abs(step[i]) : size;
    if (size <= T(kSinglePrecision<T> ? 1e-6 : 1e-12)) break;
  }
  return true;
}

// ---- face manifold -------------------------------------------------------------------------

// Contacts of reference face `face` of core `ref` (0: geom1, 1: geom2) against the other core,
// on scalar S (the adjoint runs this on Dual numbers): see the header comment, 3a. The
// incident geometry: a box/mesh's face most opposed to the reference normal, a capsule's
// segment, a sphere's centre, a curved shape's support point. At most kMaxConvexContacts kept,
// those with dist <= margin, the deepest first, then the farthest from it, the farthest from
// their line, and the farthest from the nearest of the three.
template <class S, class T>
PHX_HD int face_contacts(const ConvexBody<S, T>* body, int ref, int face, S margin,
                         ContactPoint<S>* out) {
  const ConvexBody<S, T>& rb = body[ref];
  const ConvexBody<S, T>& ib = body[1 - ref];
  // the reference face: outward normal n, a point on it, and (for polygons) its vertices
  Vec3<S> n, center;
  bool disk = rb.type == kGeomCylinder;
  if (disk) {
    Vec3<S> z = rb.frame.rot.col(2);
    n = face ? z : -z;
    center = rb.frame.pos + (face ? rb.size[1] : -rb.size[1]) * z;
  } else {
    n = rb.face_normal(face);
    center = rb.vert(rb.face_vert(face, 0));
  }
  // the incident polygon (or segment, or point)
  Vec3<S> poly[2][kClipCap];
  int from = 0, np = 0;
  bool segment = false;
  if (disk && is_polytope_core(ib.type)) {
    // a disk clips single points: the incident core's deepest vertex
    poly[0][np++] = ib.vert(support_vertex(ib, -n));
  } else if (ib.type == kGeomBox || ib.type == kGeomMesh) {
    int inc = 0;
    S best(2);
    for (int k = 0; k < ib.nface(); ++k) {
      S c = dot(ib.face_normal(k), n);
      if (c < best) best = c, inc = k;
    }
    int nv = ib.face_nvert(inc);
    int nref = disk ? 0 : rb.face_nvert(face);
    if (nv + nref <= kClipCap) {
      for (int k = 0; k < nv; ++k) poly[0][np++] = ib.vert(ib.face_vert(inc, k));
    } else {  // too large to clip in place: the incident support vertex only
      poly[0][np++] = ib.vert(support_vertex(ib, -n));
    }
  } else if (ib.type == kGeomCapsule) {
    poly[0][np++] = ib.vert(0);
    poly[0][np++] = ib.vert(1);
    segment = true;
  } else if (ib.type == kGeomSphere) {
    poly[0][np++] = ib.frame.pos;
  } else {
    poly[0][np++] = curved_support(ib, -n);
  }
  // clip to the side planes
  if (disk) {
    Vec3<S> q = poly[0][0] - center;
    q = q - dot(q, n) * n;
    if (dot(q, q) > rb.size[0] * rb.size[0]) np = 0;
  } else {
    int nref = rb.face_nvert(face);
    for (int k = 0; k < nref && np > 0; ++k) {
      Vec3<S> a = rb.vert(rb.face_vert(face, k));
      Vec3<S> b = rb.vert(rb.face_vert(face, (k + 1) % nref));
      Vec3<S> m = cross(b - a, n);  // outward normal of the side plane through a, b
      S dd[kClipCap];
      bool inside = true;
      for (int i = 0; i < np; ++i) {
        dd[i] = dot(m, poly[from][i] - a);
        inside = inside && dd[i] <= S(0);
      }
      if (inside) continue;
      int m2 = 0;
      Vec3<S>* dst = poly[1 - from];
      const Vec3<S>* src = poly[from];
      if (segment) {  // a 2-gon: clip the segment, not the closed polygon
        if (dd[0] > S(0) && dd[1] > S(0)) {
          np = 0;
          break;
        }
        for (int i = 0; i < 2; ++i)
          dst[m2++] = dd[i] <= S(0)
                          ? src[i]
                          : src[i] + (dd[i] / (dd[i] - dd[1 - i])) * (src[1 - i] - src[i]);
      } else {
        for (int i = 0; i < np; ++i) {
          int i1 = i + 1 == np ? 0 : i + 1;
          if (dd[i] <= S(0) && m2 < kClipCap) dst[m2++] = src[i];
          bool crosses = (dd[i] < S(0) && dd[i1] > S(0)) || (dd[i] > S(0) && dd[i1] < S(0));
          if (crosses && m2 < kClipCap)
            dst[m2++] = src[i] + (dd[i] / (dd[i] - dd[i1])) * (src[i1] - src[i]);
        }
      }
      np = m2;
      from = 1 - from;
    }
  }
  // heights over the reference face, kept within the margin
  S r_ref = rb.radius(), r_inc = ib.radius();
  S dist[kClipCap];
  int keep[kClipCap], nk = 0;
  for (int i = 0; i < np; ++i) {
    dist[i] = dot(n, poly[from][i] - center) - r_ref - r_inc;
    if (dist[i] <= margin) keep[nk++] = i;
  }
  // reduce to kMaxConvexContacts: deepest, then spread
  int pick[kMaxConvexContacts], npick = 0;
  if (nk <= kMaxConvexContacts) {
    for (int i = 0; i < nk; ++i) pick[npick++] = keep[i];
  } else {
    const Vec3<S>* P = poly[from];
    int best = keep[0];
    for (int i = 1; i < nk; ++i)
      if (dist[keep[i]] < dist[best]) best = keep[i];
    pick[npick++] = best;
    for (int round = 1; round < kMaxConvexContacts; ++round) {
      int arg = -1;
      S score(-1);
      for (int i = 0; i < nk; ++i) {
        int c = keep[i];
        bool used = false;
        for (int j = 0; j < npick; ++j) used = used || pick[j] == c;
        if (used) continue;
        S s;
        if (round == 1) {
          Vec3<S> e = P[c] - P[pick[0]];
          s = dot(e, e);
        } else if (round == 2) {
          Vec3<S> e = cross(P[c] - P[pick[0]], P[pick[1]] - P[pick[0]]);
          s = dot(e, e);
        } else {
          s = S(-1);
          for (int j = 0; j < npick; ++j) {
            Vec3<S> e = P[c] - P[pick[j]];
            S e2 = dot(e, e);
            if (s < S(0) || e2 < s) s = e2;
          }
        }
        if (s > score) score = s, arg = c;
      }
      if (arg < 0) break;
      pick[npick++] = arg;
    }
  }
  // contacts: normal from geom1 to geom2, pos midway between the surfaces
  Vec3<S> normal = ref == 0 ? n : -n;
  for (int k = 0; k < npick; ++k) {
    const Vec3<S>& p = poly[from][pick[k]];
    out[k].dist = dist[pick[k]];
    out[k].normal = normal;
    // the incident surface point is p - r_inc n; the reference surface lies dist below it
    out[k].pos = p - (r_inc + S(0.5) * out[k].dist) * n;
  }
  return npick;
}

// ---- the pair ------------------------------------------------------------------------------

// The separation of the cores along unit direction u (the support gap): u . (p2 - p1), p1 the
// support point of core 1 in u, p2 of core 2 in -u. No direction separates the cores more than
// their distance (overlapping: every direction overlaps at least by the penetration depth), so
// the gap along any direction bounds the true distance from below.
template <class T>
PHX_HD T core_gap(const ConvexBody<T, T>* body, const Vec3<T>& u, Vec3<T>* p1, Vec3<T>* p2) {
  int v1 = 0, v2 = 0;
  *p1 = core_support(body[0], u, &v1);
  *p2 = core_support(body[1], -u, &v2);
  return dot(u, *p2 - *p1);
}

// which branch makes a pair's contacts, decided on values: the adjoint re-runs this
enum ConvexBranch : int { kBranchNone, kBranchFace, kBranchFeatures, kBranchFallback };

template <class T>
struct ConvexPlan {
  int branch = kBranchNone;
  int ref = 0, face = 0;  // face branch: reference core and face
  Feature f[2];           // feature branch: the features
  Vec3<T> u;              // feature branch: the solved direction
  T t[2] = {T(0), T(0)};  // feature branch: the edge parameters
  ContactPoint<T> fallback;
};

// the contacts of a plan on scalar S
template <class S, class T>
PHX_HD PHX_DEVICE_NOINLINE int plan_contacts(const ConvexPlan<T>& plan,
                                             const ConvexBody<S, T>* body, S margin,
                                             ContactPoint<S>* out) {
  if (plan.branch == kBranchFace) return face_contacts(body, plan.ref, plan.face, margin, out);
  if (plan.branch == kBranchFeatures) {
    S z[4] = {S(0), S(0), S(plan.t[0]), S(plan.t[1])}, F[4];
    feature_system(body[0], plan.f[0], body[1], plan.f[1], plan.u, z, F, out[0]);
    return out[0].dist <= margin ? 1 : 0;
  }
  return 0;
}

// Steps 1-2 and the choice between 3a and 3b (see the header comment), on values.
template <class T>
PHX_HD ConvexPlan<T> convex_plan(const ConvexBody<T, T>* body, T margin,
                                 const CcdSettings<T>& ccd) {
  ConvexPlan<T> plan;
  T radii = body[0].radius() + body[1].radius();
  bool ok;
  ConvexDistance<T> cd = core_distance(body[0], body[1], ccd, margin + radii, &ok);
  if (cd.far || cd.dist - radii > margin) return plan;
  if (!ok) {  // degenerate: a contact along the first frame's x axis, no adjoint
    plan.branch = kBranchFallback;
    plan.fallback.normal = body[0].frame.rot.col(0);
    plan.fallback.dist = -radii;
    plan.fallback.pos =
        cd.witness1 + (T(0.5) * (body[0].radius() - body[1].radius())) * plan.fallback.normal;
    return plan;
  }
  // The gap along GJK/EPA's direction: a lower bound of the distance (GJK and EPA stop at
  // ccd.tolerance; EPA's own depth bounds it from the other side). A feature solution deeper
  // than it (by more than round-off) reached another stationary point of the separation.
  T gap, eps;
  {
    Vec3<T> s1, s2;
    gap = core_gap(body, cd.normal, &s1, &s2) - radii;
    eps = T(kSinglePrecision<T> ? 1e-5 : 1e-10) *
          (T(1) + norm(s1 - body[0].frame.pos) + norm(s2 - body[1].frame.pos));
  }
  Vec3<T> u = cd.normal;
  bool allow_face = true;
  for (int round = 0; round < 4; ++round) {
    Feature f1 = classify(body[0], u, allow_face), f2 = classify(body[1], -u, allow_face);
    if (f1.kind == kFeatureFace || f2.kind == kFeatureFace) {
      // the reference face: the one better aligned with u (geom1's on ties)
      int ref = 0;
      if (f1.kind != kFeatureFace) {
        ref = 1;
      } else if (f2.kind == kFeatureFace) {
        T c1 = body[0].type == kGeomCylinder ? T(1) : dot(body[0].face_normal(f1.a), u);
        T c2 = body[1].type == kGeomCylinder ? T(1) : -dot(body[1].face_normal(f2.a), u);
        if (body[0].type == kGeomCylinder && body[1].type != kGeomCylinder) c1 = T(-2);
        if (body[1].type == kGeomCylinder && body[0].type != kGeomCylinder) c2 = T(-2);
        ref = c2 > c1 ? 1 : 0;
      }
      plan.branch = kBranchFace;
      plan.ref = ref;
      plan.face = ref == 0 ? f1.a : f2.a;
      ContactPoint<T> tmp[kMaxConvexContacts];
      // a face whose side planes exclude the whole incident geometry did not support the
      // contact (an edge or vertex of it does): features without faces. (A face within
      // kFeatureAngle of u is snapped onto by design, even where its depth is a little deeper
      // than the gap along u.)
      if (face_contacts(body, plan.ref, plan.face, T(1e30), tmp) > 0) return plan;
      allow_face = false;
      continue;
    }
    plan.branch = kBranchFeatures;
    plan.f[0] = f1;
    plan.f[1] = f2;
    plan.u = u;
    bool solved = solve_features(body[0], f1, body[1], f2, plan.u, plan.t);
    if (solved) {
      // the solution must stay on its features and keep them at its direction
      T slack = T(kSinglePrecision<T> ? 1e-4 : 1e-9);
      bool on = plan.t[0] >= -slack && plan.t[0] <= T(1) + slack && plan.t[1] >= -slack &&
                plan.t[1] <= T(1) + slack;
      // (and not flip to the other root of (I - u u^T) w = 0, u antiparallel to w)
      bool same_side = dot(plan.u, cd.normal) > T(0.5);
      // the features support the solution: they classify so at its direction, or (a vertex at
      // the end of an edge within kFeatureAngle of perpendicular) their points realise the
      // support gap along it; and it is not deeper than the gap along GJK/EPA's direction
      ContactPoint<T> c;
      T z[4] = {T(0), T(0), plan.t[0], plan.t[1]}, F[4];
      feature_system(body[0], f1, body[1], f2, plan.u, z, F, c);
      Vec3<T> q1, q2;
      bool supported =
          (classify(body[0], plan.u, false) == f1 && classify(body[1], -plan.u, false) == f2) ||
          abs(c.dist + radii - core_gap(body, c.normal, &q1, &q2)) <= eps;
      if (on && same_side && supported && c.dist >= gap - eps) return plan;
      if (!same_side) break;
      u = plan.u;
      continue;
    }
    break;
  }
  // no consistent features: the gap along GJK/EPA's direction (a valid separation, within
  // ccd.tolerance of the distance), no adjoint; its support points taken again rather than held
  // through the rounds above
  Vec3<T> s1, s2;
  core_gap(body, cd.normal, &s1, &s2);
  plan.branch = kBranchFallback;
  plan.fallback.normal = cd.normal;
  plan.fallback.dist = gap;
  plan.fallback.pos =
      T(0.5) * (s1 + s2) + (T(0.5) * (body[0].radius() - body[1].radius())) * cd.normal;
  return plan;
}

}  // namespace collision_impl

// Contacts of two convex shapes (sphere, capsule, ellipsoid, cylinder, box, mesh), written to
// out (room for kMaxConvexContacts); returns their number. Kept when dist <= margin. Polytope
// pairs give a clipped face manifold of up to 4 points when a face supports the contact, other
// pairs one contact (a capsule lying on a face: up to 2). On the GPU a device function of its
// own, so that a loop over pairs or over a height field's prisms is not allocated beside it.
template <class T>
PHX_HD PHX_DEVICE_NOINLINE int convex_convex(const GeomShape<T>& s1, const GeomFrame<T>& g1,
                                             const GeomShape<T>& s2, const GeomFrame<T>& g2,
                                             T margin, const CcdSettings<T>& ccd,
                                             ContactPoint<T>* out) {
  using namespace collision_impl;
  ConvexBody<T, T> body[2] = {make_body(s1, g1, s1.size), make_body(s2, g2, s2.size)};
  ConvexPlan<T> plan = convex_plan(body, margin, ccd);
  if (plan.branch == kBranchFallback) {
    if (plan.fallback.dist > margin) return 0;
    out[0] = plan.fallback;
    return 1;
  }
  return plan_contacts(plan, body, margin, out);
}

namespace collision_impl {

// both bodies on Dual<T, N>, the pair inputs [first, first + N) (pair_input's order) seeded in
// derivative slots 0, 1, ...
template <class T, int N>
PHX_HD void seed_bodies(const ConvexBody<T, T>* body, int first, ConvexBody<Dual<T, N>, T>* d) {
  lift_body(body[0], d[0]);
  lift_body(body[1], d[1]);
  for (int k = first; k < 30 && k - first < N; ++k)
    pair_input(k, d[0].frame, d[0].size, d[1].frame, d[1].size).d[k - first] = T(1);
}

// adj . d(contacts)/d(slot i) of contacts on Dual numbers
template <class T, int N>
PHX_HD T contact_grad(const ContactPoint<Dual<T, N>>* con, const ContactPoint<T>* adj, int n,
                      int i) {
  T g(0);
  for (int c = 0; c < n; ++c) {
    for (int r = 0; r < 3; ++r)
      g += adj[c].pos[r] * con[c].pos[r].d[i] + adj[c].normal[r] * con[c].normal[r].d[i];
    g += adj[c].dist * con[c].dist.d[i];
  }
  return g;
}

}  // namespace collision_impl

// Adjoint of convex_convex: given the n contacts it returned and their adjoints, accumulates
// (+=) into the adjoints of both frames (position and the nine rotation entries as independent
// inputs) and sizes (the entries a type reads; meshes' vertices are data and get nothing).
// Re-runs the forward's discrete choices; adds nothing when they give a count other than n or
// the degenerate fallback contact. The face branch is differentiated by running it on Dual
// numbers (passes of kDualDirections over the 30 inputs), the feature branch implicitly:
//   d(adj . c)/dtheta = adj . dc/dtheta - lambda . dF/dtheta,  F_z^T lambda = (dc/dz)^T adj,
// where F(z, theta) = 0 are its optimality conditions (feature_system), from Dual numbers: one
// pass with four slots for z, then passes of kDualDirections for the inputs at fixed z.
template <class T>
PHX_HD PHX_DEVICE_NOINLINE void adj_convex_convex(const GeomShape<T>& s1, const GeomFrame<T>& g1,
                                                  const GeomShape<T>& s2, const GeomFrame<T>& g2,
                                                  T margin, const CcdSettings<T>& ccd, int n,
                                                  const ContactPoint<T>* adj_contacts,
                                                  GeomFrame<T>& adj_g1, T* adj_size1,
                                                  GeomFrame<T>& adj_g2, T* adj_size2) {
  using namespace collision_impl;
  if (n < 1) return;
  ConvexBody<T, T> body[2] = {make_body(s1, g1, s1.size), make_body(s2, g2, s2.size)};
  ConvexPlan<T> plan = convex_plan(body, margin, ccd);
  if (plan.branch != kBranchFace && plan.branch != kBranchFeatures) return;
  ContactPoint<T> fwd[kMaxConvexContacts];
  if (plan_contacts(plan, body, margin, fwd) != n) return;
  // the adjoints of the 30 inputs, written back to the entries each type reads
  T grad[30] = {};
  constexpr int N = kDualDirections<T, 6>;
  using D = Dual<T, N>;
  if (plan.branch == kBranchFace) {
    for (int first = 0; first < 30; first += N) {
      ConvexBody<D, T> d[2];
      seed_bodies<T, N>(body, first, d);
      ContactPoint<D> con[kMaxConvexContacts];
      if (face_contacts(d, plan.ref, plan.face, D(margin), con) != n) return;
      for (int i = 0; i < N && first + i < 30; ++i)
        grad[first + i] = contact_grad(con, adj_contacts, n, i);
    }
  } else {
    // F_z^T lambda = (dc/dz)^T adj, from a pass seeded along z alone
    constexpr int kZ = 4;
    T lambda[kZ];
    {
      using Z = Dual<T, kZ>;
      ConvexBody<Z, T> d[2];
      lift_body(body[0], d[0]);
      lift_body(body[1], d[1]);
      Z z[kZ] = {Z(T(0)), Z(T(0)), Z(plan.t[0]), Z(plan.t[1])}, F[kZ];
      for (int i = 0; i < kZ; ++i) z[i].d[i] = T(1);
      ContactPoint<Z> con;
      feature_system(d[0], plan.f[0], d[1], plan.f[1], plan.u, z, F, con);
      T Jt[kZ][kZ];
      for (int i = 0; i < kZ; ++i) {
        lambda[i] = contact_grad(&con, adj_contacts, 1, i);
        for (int j = 0; j < kZ; ++j) Jt[i][j] = F[j].d[i];
      }
      if (!solve_small(Jt, lambda, kZ, T(kSinglePrecision<T> ? 1e-7 : 1e-14))) return;
    }
    // then the inputs' slopes at fixed z, N a pass
    for (int first = 0; first < 30; first += N) {
      ConvexBody<D, T> d[2];
      seed_bodies<T, N>(body, first, d);
      D z[kZ] = {D(T(0)), D(T(0)), D(plan.t[0]), D(plan.t[1])}, F[kZ];
      ContactPoint<D> con;
      feature_system(d[0], plan.f[0], d[1], plan.f[1], plan.u, z, F, con);
      for (int i = 0; i < N && first + i < 30; ++i) {
        T g = contact_grad(&con, adj_contacts, 1, i);
        for (int j = 0; j < kZ; ++j) g -= lambda[j] * F[j].d[i];
        grad[first + i] = g;
      }
    }
  }
  T unused1[3], unused2[3];
  T* a1 = adj_size1 ? adj_size1 : unused1;
  T* a2 = adj_size2 ? adj_size2 : unused2;
  for (int k = 0; k < 30; ++k) {
    bool is_size = k % 15 >= 12;
    const GeomShape<T>& s = k < 15 ? s1 : s2;
    if (is_size && (s.type == kGeomMesh ||
                    (k % 15 - 12) >= (s.type == kGeomSphere                               ? 1
                                      : s.type == kGeomCapsule || s.type == kGeomCylinder ? 2
                                                                                          : 3)))
      continue;
    pair_input(k, adj_g1, a1, adj_g2, a2) += grad[k];
  }
}

}  // namespace phx
