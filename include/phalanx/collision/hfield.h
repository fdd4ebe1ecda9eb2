// Height field against a convex geom (sphere, capsule, ellipsoid, cylinder, box, mesh), and its
// adjoint.
//
// The field is cut into triangular prisms as MuJoCo's mjc_ConvexHField cuts it, so that contacts
// compare one by one: the grid point (row r, column c) lies at x = c dx - size[0],
// y = r dy - size[1] (dx = 2 size[0] / (ncol - 1), dy = 2 size[1] / (nrow - 1)) and height
// data[r ncol + c] size[2]; each row strip r is a triangle strip through (c, r + 1), (c, r),
// (c + 1, r + 1), (c + 1, r), ...; each triangle is extruded down to the base, z = -size[3]. The
// cells under the geom's bounding box in the field's frame are visited in strip order, and each
// prism that reaches the geom's lowest point is collided with the geom by the convex narrowphase
// (convex_convex), its deepest point giving at most one contact per prism. A pair keeps the
// first kMaxPairContacts contacts in that order; further ones are counted in *dropped, which the
// caller reports as a contact overflow: none is lost silently.
//
// The adjoint visits the same prisms and applies the convex adjoint to each prism that gave a
// kept contact: the prism's vertices are fixed in the field's frame, so the gradient reaches the
// field's pose and the geom's pose and size.
#pragma once

#include "phalanx/collision/convex.h"

namespace phx {

namespace collision_impl {

// One prism of a height field as a convex hull in the field's frame: bottom vertices 0, 1, 2 at
// z = -base, top vertices 3, 4, 5 above them, the triangle counter-clockwise seen from +z.
template <class T>
struct HFieldPrism {
  T vert[18];
  T polynormal[15];
  // vertex adjacency; faces: top, bottom, then the side above each edge (i, j) of the triangle
  // as i, j, j + 3, i + 3
  int adjadr[6] = {0, 3, 6, 9, 12, 15};
  int adjnum[6] = {3, 3, 3, 3, 3, 3};
  int adj[18] = {1, 2, 3, 0, 2, 4, 0, 1, 5, 4, 5, 0, 3, 5, 1, 3, 4, 2};
  int polyvertadr[5] = {0, 3, 6, 10, 14};
  int polyvertnum[5] = {3, 3, 4, 4, 4};
  int polyvert[18] = {3, 4, 5, 2, 1, 0, 0, 1, 4, 3, 1, 2, 5, 4, 2, 0, 3, 5};

  HFieldPrism() = default;
  HFieldPrism(const HFieldPrism&) = delete;  // hull() points into the prism

  PHX_HD ConvexHull<T> hull() const {
    ConvexHull<T> h;
    h.nvert = 6;
    h.vert = vert;
    h.adjadr = adjadr;
    h.adjnum = adjnum;
    h.adj = adj;
    h.npoly = 5;
    h.polynormal = polynormal;
    h.polyvertadr = polyvertadr;
    h.polyvertnum = polyvertnum;
    h.polyvert = polyvert;
    return h;
  }

  // the prism under the triangle of grid points p[0..2] (x, y, z each), base at z = -base
  PHX_HD void set(const Vec3<T> p[3], T base) {
    // counter-clockwise about +z
    T turn = (p[1].x - p[0].x) * (p[2].y - p[0].y) - (p[1].y - p[0].y) * (p[2].x - p[0].x);
    int order[3] = {0, turn > T(0) ? 1 : 2, turn > T(0) ? 2 : 1};
    for (int i = 0; i < 3; ++i) {
      const Vec3<T>& q = p[order[i]];
      Vec3<T>{q.x, q.y, -base}.store(vert + 3 * i);
      q.store(vert + 3 * (i + 3));
    }
    Vec3<T> top = cross(Vec3<T>::load(vert + 12) - Vec3<T>::load(vert + 9),
                        Vec3<T>::load(vert + 15) - Vec3<T>::load(vert + 9));
    normalize_in_place(top);
    top.store(polynormal);
    Vec3<T>{T(0), T(0), T(-1)}.store(polynormal + 3);
    // outward side normals: the edge direction crossed with +z
    for (int i = 0; i < 3; ++i) {
      Vec3<T> d = Vec3<T>::load(vert + 3 * ((i + 1) % 3)) - Vec3<T>::load(vert + 3 * i);
      Vec3<T> n{d.y, -d.x, T(0)};
      normalize_in_place(n);
      n.store(polynormal + 6 + 3 * i);
    }
  }
};

// The walk's place beside the prism it visits: one object in memory (the prism's hull is handed
// to each visit's pair functions), so that on the GPU the walk reads its place back after each
// visit instead of saving it around the visit's calls
template <class T>
struct HFieldWalk {
  HFieldPrism<T> prism;
  GeomShape<T> shape;
  const T* data;               // the heights (nrow x ncol)
  int ncol, cmin, ntri, rmax;  // the first column and the triangles of a strip; the end row
  int r, k;                    // the strip and its triangle
  T dx, dy, floor;             // the grid's spacing; the lowest top a visited prism has
};

// The walk over the prisms under geom 2 shared by the forward and the adjoint: calls
// visit(prism, hull shape) for each prism whose top reaches the geom's lowest point, in strip
// order, until visit returns false.
template <class T, class Visit>
PHX_HD void for_each_hfield_prism(const GeomShape<T>& hf, const GeomFrame<T>& g1,
                                  const GeomShape<T>& s2, const GeomFrame<T>& g2, T margin,
                                  Visit&& visit) {
  const HeightField<T>& h = hf.hfield;
  const T* size = h.size;
  // geom 2 in the field's frame: its bounding box from its support points
  GeomFrame<T> local{mul_transpose(g1.rot, g2.pos - g1.pos), {}};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      local.rot(i, j) =
          g1.rot(0, i) * g2.rot(0, j) + g1.rot(1, i) * g2.rot(1, j) + g1.rot(2, i) * g2.rot(2, j);
  T lo[3], hi[3];
  for (int k = 0; k < 3; ++k) {
    Vec3<T> e{T(k == 0), T(k == 1), T(k == 2)};
    hi[k] = support(s2, local, e).pos[k];
    lo[k] = support(s2, local, -e).pos[k];
  }
  if (lo[0] - margin > size[0] || hi[0] + margin < -size[0] || lo[1] - margin > size[1] ||
      hi[1] + margin < -size[1] || lo[2] - margin > size[2] || hi[2] + margin < -size[3])
    return;
  int nrow = h.nrow, ncol = h.ncol;
  T fc0 = (lo[0] + size[0]) / (T(2) * size[0]) * T(ncol - 1);
  T fc1 = (hi[0] + size[0]) / (T(2) * size[0]) * T(ncol - 1);
  T fr0 = (lo[1] + size[1]) / (T(2) * size[1]) * T(nrow - 1);
  T fr1 = (hi[1] + size[1]) / (T(2) * size[1]) * T(nrow - 1);
  HFieldWalk<T> w;
  w.shape.type = kGeomMesh;
  w.shape.size = size;
  w.shape.hull = w.prism.hull();
  w.data = h.data;
  w.ncol = ncol;
  // cell ranges (compared before the conversion to int, which could overflow far outside)
  w.cmin = fc0 > T(0) ? int(::floor(double(value(fc0)))) : 0;
  const int cmax = fc1 < T(ncol - 1) ? int(::ceil(double(value(fc1)))) : ncol - 1;
  const int rmin = fr0 > T(0) ? int(::floor(double(value(fr0)))) : 0;
  w.rmax = fr1 < T(nrow - 1) ? int(::ceil(double(value(fr1)))) : nrow - 1;
  w.dx = T(2) * size[0] / T(ncol - 1);
  w.dy = T(2) * size[1] / T(nrow - 1);
  w.floor = lo[2] - margin;
  // row strip r's points in order, point q at (cmin + q / 2, r + 1 - q % 2): triangle k is
  // points k, k + 1, k + 2 (each taken from the grid again, so that no window of points is
  // carried across the visits)
  w.ntri = 2 * (cmax - w.cmin + 1) - 2;
  for (w.r = rmin; w.r < w.rmax; ++w.r) {
    for (w.k = 0; w.k < w.ntri; ++w.k) {
      Vec3<T> tri[3];
      for (int j = 0; j < 3; ++j) {
        // grid point (c, row) in the field's frame
        const int c = w.cmin + (w.k + j) / 2, row = w.r + 1 - (w.k + j) % 2;
        const T* sz = w.shape.size;
        tri[j] = {w.dx * T(c) - sz[0], w.dy * T(row) - sz[1], w.data[row * w.ncol + c] * sz[2]};
      }
      // the prism's top must reach the geom's lowest point
      if (tri[0].z < w.floor && tri[1].z < w.floor && tri[2].z < w.floor) continue;
      w.prism.set(tri, w.shape.size[3]);
      if (!visit(w.prism, w.shape)) return;
    }
  }
}

// the deepest of n contacts
template <class T>
PHX_HD PHX_INLINE int deepest_contact(const ContactPoint<T>* c, int n) {
  int best = 0;
  for (int k = 1; k < n; ++k)
    if (c[k].dist < c[best].dist) best = k;
  return best;
}

}  // namespace collision_impl

// Height field (geom 1, hf.hfield set) against convex geom 2: at most kMaxPairContacts contacts,
// one per prism; *dropped += the number of further prism contacts.
template <class T>
PHX_HD int hfield_convex(const GeomShape<T>& hf, const GeomFrame<T>& g1, const GeomShape<T>& s2,
                         const GeomFrame<T>& g2, T margin, const CcdSettings<T>& ccd,
                         ContactPoint<T>* out, int* dropped) {
  int n = 0;
  collision_impl::for_each_hfield_prism(
      hf, g1, s2, g2, margin, [&](const auto& prism, const GeomShape<T>& shape) {
        (void)prism;
        ContactPoint<T> pts[kMaxConvexContacts];
        int k = convex_convex(shape, g1, s2, g2, margin, ccd, pts);
        if (k == 0) return true;
        if (n == kMaxPairContacts) {
          if (dropped) ++*dropped;
          return true;
        }
        out[n++] = pts[collision_impl::deepest_contact(pts, k)];
        return true;
      });
  return n;
}

namespace collision_impl {

// adj_hfield_convex's arguments and the next contact's index, which each prism's part reads:
// one struct in memory, so that on the GPU the walk does not save them around each prism's call
template <class T>
struct HFieldAdjoint {
  const GeomFrame<T>& g1;
  const GeomShape<T>& s2;
  const GeomFrame<T>& g2;
  T margin;
  const CcdSettings<T>& ccd;
  int n;
  const ContactPoint<T>* adj_contacts;
  GeomFrame<T>& adj_g1;
  GeomFrame<T>& adj_g2;
  T* adj_size2;
  int i;
};

// adj_hfield_convex's part for one prism (its hull shape): the convex adjoint when the prism
// gave the next kept contact; false once all n have had theirs. On the GPU a device function of
// its own: the walk holds nothing beside it.
template <class T>
PHX_HD PHX_DEVICE_NOINLINE bool adj_hfield_prism(HFieldAdjoint<T>& a, const GeomShape<T>& shape) {
  if (a.i == a.n) return false;
  ContactPoint<T> pts[kMaxConvexContacts], adj[kMaxConvexContacts];
  int k = convex_convex(shape, a.g1, a.s2, a.g2, a.margin, a.ccd, pts);
  if (k == 0) return true;
  adj[deepest_contact(pts, k)] = a.adj_contacts[a.i++];
  T adj_prism_size[3] = {};
  adj_convex_convex(shape, a.g1, a.s2, a.g2, a.margin, a.ccd, k, adj, a.adj_g1, adj_prism_size,
                    a.adj_g2, a.adj_size2);
  return true;
}

}  // namespace collision_impl

// Adjoint of hfield_convex (the contract of collide's adjoint); the height data is not a
// parameter, so adj_size1 receives nothing.
template <class T>
PHX_HD PHX_DEVICE_NOINLINE void adj_hfield_convex(const GeomShape<T>& hf, const GeomFrame<T>& g1,
                                                  const GeomShape<T>& s2, const GeomFrame<T>& g2,
                                                  T margin, const CcdSettings<T>& ccd, int n,
                                                  const ContactPoint<T>* adj_contacts,
                                                  GeomFrame<T>& adj_g1, T* adj_size1,
                                                  GeomFrame<T>& adj_g2, T* adj_size2) {
  (void)adj_size1;
  collision_impl::HFieldAdjoint<T> a{g1,           s2,     g2,     margin,    ccd, n,
                                     adj_contacts, adj_g1, adj_g2, adj_size2, 0};
  collision_impl::for_each_hfield_prism(hf, g1, s2, g2, margin,
                                        [&](const auto&, const GeomShape<T>& shape) {
                                          return collision_impl::adj_hfield_prism(a, shape);
                                        });
}

}  // namespace phx
