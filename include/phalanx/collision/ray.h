// Ray casting against one geom: the distance along a ray pnt + x vec (world frame, vec of any
// nonzero length, x in units of |vec|) at which it first meets the geom's surface, or -1.
//
// The algorithms, tolerances and tie rules are MuJoCo 4.0's (engine_ray.c: mju_rayGeom with
// ray_plane, ray_sphere, ray_capsule, ray_ellipsoid, ray_cylinder and ray_box, ray_quad for the
// quadrics; mj_rayHfield with ray_triangle; mj_rayMesh), so distances agree with MuJoCo's to
// round-off. As there, the ray is mapped into the geom's frame (ray_map) except for spheres; a
// ray that starts inside a closed geom meets its surface on the way out; only x >= 0 counts; a
// plane is seen only from its front (+z) side and, when size[0] or size[1] > 0, only within that
// half-extent along its x or y; capsules, cylinders and boxes are first tested against their
// bounding spheres (here in the geom's frame, in MuJoCo's in the world's: the same up to
// round-off). Sizes are geom_size's.
//
// Height fields (mj_rayHfield): the nearest of the base box (z in [-size[3], 0]), the triangles
// of the grid cells under the part of the ray inside the top box (z in [0, size[2]]), padded by
// one cell, and the four sides of the top box below the field's edge profile. Each cell's
// triangles, (c, r) (c+1, r) (c+1, r+1) and (c, r) (c+1, r+1) (c, r+1), are hit from either
// side; they share the diagonal (c, r) - (c+1, r+1) with the prisms of collision/hfield.h, so a
// ray sees the surface the narrowphase collides with.
//
// Meshes: Phalanx keeps a mesh as its convex hull, so the ray is clipped by the hull's face
// half-spaces (n . p <= n . v for a vertex v of each face): the ray enters at the largest
// parameter of the faces it crosses inwards and leaves at the smallest of those it crosses
// outwards. A ray from outside gets the entry; one from inside gets the exit, which is what
// mj_rayMesh's triangle test returns for a convex mesh (the far side is the only face ahead).
// MuJoCo casts against the mesh's own triangles (after a BVH and a geom_size box test, which
// only skip what misses), so for a non-convex mesh the two differ. For a convex one they agree
// to round-off except for rays that pass exactly through an edge or a vertex: one that only
// touches the hull there may count as a hit in one and a miss in the other, and one that enters
// there may slip between MuJoCo's triangles, which then reports the exit.
#pragma once

#include "phalanx/collision/primitives.h"

namespace phx {

namespace collision_impl {

// The roots of a x^2 + 2 b x + c = 0, x[0] <= x[1] (both -1 when not real or a is below
// kCollisionMinVal); returns the smaller root that is >= 0, or -1 (MuJoCo's ray_quad).
template <class T>
PHX_HD PHX_INLINE T ray_quad(T a, T b, T c, T x[2]) {
  T det = b * b - a * c;
  if (det < T(0) || a < T(kCollisionMinVal)) {
    x[0] = x[1] = T(-1);
    return T(-1);
  }
  det = sqrt(det);
  x[0] = (-b - det) / a;
  x[1] = (-b + det) / a;
  return x[0] >= T(0) ? x[0] : (x[1] >= T(0) ? x[1] : T(-1));
}

// sphere of squared radius r2 about the origin, ray p + x v
template <class T>
PHX_HD PHX_INLINE T ray_sphere(const Vec3<T>& p, const Vec3<T>& v, T r2) {
  T x[2];
  return ray_quad(dot(v, v), dot(v, p), dot(p, p) - r2, x);
}

// the smaller root >= 0 of the infinite cylinder of radius r about z, if within |z| <= h
template <class T>
PHX_HD PHX_INLINE T ray_round_side(const Vec3<T>& p, const Vec3<T>& v, T r, T h) {
  T x[2];
  T sol = ray_quad(v.x * v.x + v.y * v.y, v.x * p.x + v.y * p.y, p.x * p.x + p.y * p.y - r * r, x);
  return sol >= T(0) && abs(p.z + sol * v.z) <= h ? sol : T(-1);
}

// the smaller of two candidates, either -1 for none
template <class T>
PHX_HD PHX_INLINE T ray_nearest(T x, T sol) {
  return sol >= T(0) && (x < T(0) || sol < x) ? sol : x;
}

// capsule, radius size[0], half-length size[1] along z
template <class T>
PHX_HD T ray_capsule(const Vec3<T>& p, const Vec3<T>& v, const T* size) {
  T r = size[0], h = size[1];
  if (ray_sphere(p, v, (r + h) * (r + h)) < T(0)) return T(-1);
  T x = ray_round_side(p, v, r, h);
  // the caps: either root of each sphere, on its outer half
  T vv = dot(v, v);
  for (int side = -1; side <= 1; side += 2) {
    Vec3<T> d{p.x, p.y, p.z - T(side) * h};
    T xx[2];
    ray_quad(vv, dot(v, d), dot(d, d) - r * r, xx);
    for (int i = 0; i < 2; ++i) {
      T z = p.z + xx[i] * v.z;
      if (side > 0 ? z >= h : z <= -h) x = ray_nearest(x, xx[i]);
    }
  }
  return x;
}

// ellipsoid of semi-axes size[0..2]
template <class T>
PHX_HD T ray_ellipsoid(const Vec3<T>& p, const Vec3<T>& v, const T* size) {
  T s[3] = {T(1) / (size[0] * size[0]), T(1) / (size[1] * size[1]), T(1) / (size[2] * size[2])};
  T a = s[0] * v.x * v.x + s[1] * v.y * v.y + s[2] * v.z * v.z;
  T b = s[0] * v.x * p.x + s[1] * v.y * p.y + s[2] * v.z * p.z;
  T c = s[0] * p.x * p.x + s[1] * p.y * p.y + s[2] * p.z * p.z - T(1);
  T x[2];
  return ray_quad(a, b, c, x);
}

// cylinder, radius size[0], half-height size[1] along z
template <class T>
PHX_HD T ray_cylinder(const Vec3<T>& p, const Vec3<T>& v, const T* size) {
  T r = size[0], h = size[1];
  if (ray_sphere(p, v, r * r + h * h) < T(0)) return T(-1);
  T x = T(-1);
  if (abs(v.z) > T(kCollisionMinVal)) {
    for (int side = -1; side <= 1; side += 2) {
      T sol = (T(side) * h - p.z) / v.z;
      if (sol < T(0)) continue;
      T q0 = p.x + sol * v.x, q1 = p.y + sol * v.y;
      if (q0 * q0 + q1 * q1 <= r * r) x = ray_nearest(x, sol);
    }
  }
  return ray_nearest(x, ray_round_side(p, v, r, h));
}

// Box of half-extents size[0..2]. When all is given, all[2 i + (side + 1) / 2] receives the
// parameter >= 0 at which the ray crosses face side * size[i] of axis i within the face, else
// -1 (MuJoCo's ray_box).
template <class T>
PHX_HD T ray_box(const Vec3<T>& p, const Vec3<T>& v, const T* size, T* all) {
  if (all)
    for (int i = 0; i < 6; ++i) all[i] = T(-1);
  if (ray_sphere(p, v, size[0] * size[0] + size[1] * size[1] + size[2] * size[2]) < T(0))
    return T(-1);
  T x = T(-1);
  for (int i = 0; i < 3; ++i) {
    if (!(abs(v[i]) > T(kCollisionMinVal))) continue;
    int j = i == 0 ? 1 : 0, k = i == 2 ? 1 : 2;
    for (int side = -1; side <= 1; side += 2) {
      T sol = (T(side) * size[i] - p[i]) / v[i];
      if (!(sol >= T(0)) || abs(p[j] + sol * v[j]) > size[j] || abs(p[k] + sol * v[k]) > size[k])
        continue;
      x = ray_nearest(x, sol);
      if (all) all[2 * i + (side + 1) / 2] = sol;
    }
  }
  return x;
}

// The ray's parameter (of either sign) at triangle t[0..2], hit from either side, or -1 when it
// passes by (MuJoCo's ray_triangle): the corners are projected on the plane normal to the ray,
// spanned by b0 and b1, and the origin must lie in the projected triangle.
template <class T>
PHX_HD T ray_triangle(const Vec3<T> t[3], const Vec3<T>& p, const Vec3<T>& v, const Vec3<T>& b0,
                      const Vec3<T>& b1) {
  T u[3], w[3];
  for (int i = 0; i < 3; ++i) {
    Vec3<T> d = t[i] - p;
    u[i] = dot(b0, d);
    w[i] = dot(b1, d);
  }
  if ((u[0] > T(0) && u[1] > T(0) && u[2] > T(0)) || (u[0] < T(0) && u[1] < T(0) && u[2] < T(0)) ||
      (w[0] > T(0) && w[1] > T(0) && w[2] > T(0)) || (w[0] < T(0) && w[1] < T(0) && w[2] < T(0)))
    return T(-1);
  // barycentric coordinates of the origin: (u0 - u2, u1 - u2; w0 - w2, w1 - w2) s = -(u2, w2)
  T a00 = u[0] - u[2], a01 = u[1] - u[2], a10 = w[0] - w[2], a11 = w[1] - w[2];
  T det = a00 * a11 - a01 * a10;
  if (abs(det) < T(kCollisionMinVal)) return T(-1);
  T s0 = (a11 * -u[2] - a01 * -w[2]) / det, s1 = (-a10 * -u[2] + a00 * -w[2]) / det;
  if (s0 < T(0) || s1 < T(0) || s0 + s1 > T(1)) return T(-1);
  Vec3<T> n = cross(t[0] - t[2], t[1] - t[2]);
  T denom = dot(v, n);
  if (abs(denom) < T(kCollisionMinVal)) return T(-1);
  return -dot(p - t[2], n) / denom;
}

// Height field in its frame (MuJoCo's mj_rayHfield); pb and pt are the ray's origin relative to
// the centres of the base and the top box, mapped from the world frame as MuJoCo maps them.
template <class T>
PHX_HD T ray_hfield(const HeightField<T>& hf, const Vec3<T>& p, const Vec3<T>& v, const Vec3<T>& pb,
                    const Vec3<T>& pt) {
  const T* size = hf.size;
  const T* data = hf.data;
  int nrow = hf.nrow, ncol = hf.ncol;
  // the base box below z = 0 and the top box of the surface's range above it
  T base_size[3] = {size[0], size[1], size[3] * T(0.5)};
  T top_size[3] = {size[0], size[1], size[2] * T(0.5)};
  T x = ray_box(pb, v, base_size, (T*)nullptr);
  T all[6];
  T top = ray_box(pt, v, top_size, all);
  if (top < T(0)) return x;

  // a basis b0, b1 of the plane normal to v
  Vec3<T> b0{T(1), T(1), T(1)};
  T ax = abs(v.x), ay = abs(v.y), az = abs(v.z);
  b0[ax >= ay && ax >= az ? 0 : (ay >= az ? 1 : 2)] = T(0);
  Vec3<T> b1 = b0 + (-dot(v, b0) / dot(v, v)) * v;
  normalize_in_place(b1);
  b0 = cross(b1, v);
  normalize_in_place(b0);

  // the part [seg0, seg1] of the ray inside the top box, its cells padded by one
  T seg0 = T(0), seg1 = top;
  for (int i = 0; i < 6; ++i)
    if (all[i] > seg1) {
      seg0 = top;
      seg1 = all[i];
    }
  T dx = T(2) * size[0] / T(ncol - 1), dy = T(2) * size[1] / T(nrow - 1);
  T sx0 = (p.x + seg0 * v.x + size[0]) / dx, sx1 = (p.x + seg1 * v.x + size[0]) / dx;
  T sy0 = (p.y + seg0 * v.y + size[1]) / dy, sy1 = (p.y + seg1 * v.y + size[1]) / dy;
  int cmin = int(::floor(double(sx0 < sx1 ? sx0 : sx1))) - 1;
  int cmax = int(::ceil(double(sx0 < sx1 ? sx1 : sx0))) + 1;
  int rmin = int(::floor(double(sy0 < sy1 ? sy0 : sy1))) - 1;
  int rmax = int(::ceil(double(sy0 < sy1 ? sy1 : sy0))) + 1;
  cmin = cmin > 0 ? cmin : 0;
  rmin = rmin > 0 ? rmin : 0;
  cmax = cmax < ncol - 1 ? cmax : ncol - 1;
  rmax = rmax < nrow - 1 ? rmax : nrow - 1;
  auto grid = [&](int r, int c) {
    return Vec3<T>{dx * T(c) - size[0], dy * T(r) - size[1], data[r * ncol + c] * size[2]};
  };
  for (int r = rmin; r < rmax; ++r)
    for (int c = cmin; c < cmax; ++c) {
      Vec3<T> t0 = grid(r, c), t2 = grid(r + 1, c + 1);
      Vec3<T> ta[3] = {t0, grid(r, c + 1), t2}, tb[3] = {t0, t2, grid(r + 1, c)};
      x = ray_nearest(x, ray_triangle(ta, p, v, b0, b1));
      x = ray_nearest(x, ray_triangle(tb, p, v, b0, b1));
    }

  // the sides x = -+size[0] (i = 0, 1) and y = -+size[1] (i = 2, 3) of the top box, below the
  // edge profile of the field (heights in units of size[2])
  for (int i = 0; i < 4; ++i) {
    if (!(all[i] >= T(0)) || !(all[i] < x || x < T(0))) continue;
    T z = (p.z + all[i] * v.z) / size[2];
    T y, z0, z1;
    int y0;
    if (i < 2) {
      y = (p.y + all[i] * v.y + size[1]) / dy;
      y0 = clamp(int(::floor(double(y))), 0, nrow - 2);
      z0 = data[y0 * ncol + (i == 1 ? ncol - 1 : 0)];
      z1 = data[(y0 + 1) * ncol + (i == 1 ? ncol - 1 : 0)];
    } else {
      y = (p.x + all[i] * v.x + size[0]) / dx;
      y0 = clamp(int(::floor(double(y))), 0, ncol - 2);
      z0 = data[y0 + (i == 3 ? (nrow - 1) * ncol : 0)];
      z1 = data[y0 + 1 + (i == 3 ? (nrow - 1) * ncol : 0)];
    }
    if (z < z0 * (T(y0) + T(1) - y) + z1 * (y - T(y0))) x = all[i];
  }
  return x;
}

// convex hull in its frame: entry from outside, exit from inside (see the header comment)
template <class T>
PHX_HD T ray_hull(const ConvexHull<T>& h, const Vec3<T>& p, const Vec3<T>& v) {
  T lo = T(0), hi = T(0);
  bool has_lo = false, has_hi = false;
  for (int f = 0; f < h.npoly; ++f) {
    // the plane through the face's first three corners, outward: the triangles MuJoCo casts
    // at, where the stored normal is the compiler's (to float round-off); the stored one when
    // those corners are in line
    const int* corner = h.polyvert + h.polyvertadr[f];
    const Vec3<T> a = Vec3<T>::load(h.vert + 3 * corner[0]);
    const Vec3<T> stored = Vec3<T>::load(h.polynormal + 3 * f);
    Vec3<T> n =
        cross(Vec3<T>::load(h.vert + 3 * corner[1]) - a, Vec3<T>::load(h.vert + 3 * corner[2]) - a);
    if (dot(n, n) > T(kCollisionMinVal)) {
      if (dot(n, stored) < T(0)) n = -n;
      normalize_in_place(n);
    } else {
      n = stored;
    }
    T depth = dot(n, a - p);
    T rate = dot(n, v);
    if (abs(rate) < T(kCollisionMinVal)) {
      if (depth < T(0)) return T(-1);  // parallel to the face, outside it
      continue;
    }
    T t = depth / rate;
    if (rate < T(0)) {
      lo = has_lo && lo > t ? lo : t;
      has_lo = true;
    } else {
      hi = has_hi && hi < t ? hi : t;
      has_hi = true;
    }
  }
  if (!has_hi || (has_lo && lo > hi)) return T(-1);
  if (has_lo && lo >= T(0)) return lo;
  return hi >= T(0) ? hi : T(-1);
}

}  // namespace collision_impl

// x >= 0 at which the ray pnt + x vec (world frame; vec need not be unit) first meets the
// surface of the geom of shape s posed at f, or -1 when it does not
template <class T>
PHX_HD T ray_geom(const GeomShape<T>& s, const GeomFrame<T>& f, const Vec3<T>& pnt,
                  const Vec3<T>& vec) {
  using namespace collision_impl;
  Vec3<T> d = pnt - f.pos;
  if (s.type == kGeomSphere) return ray_sphere(d, vec, s.size[0] * s.size[0]);
  // the ray in the geom's frame
  Vec3<T> p = mul_transpose(f.rot, d), v = mul_transpose(f.rot, vec);
  switch (s.type) {
    case kGeomPlane: {
      if (v.z > T(-kCollisionMinVal)) return T(-1);  // not heading into the front face
      T x = -p.z / v.z;
      if (x < T(0)) return T(-1);
      bool in_x = s.size[0] <= T(0) || abs(p.x + x * v.x) <= s.size[0];
      bool in_y = s.size[1] <= T(0) || abs(p.y + x * v.y) <= s.size[1];
      return in_x && in_y ? x : T(-1);
    }
    case kGeomHField: {
      const T* hs = s.hfield.size;
      Vec3<T> z = f.rot.col(2);
      Vec3<T> pb = mul_transpose(f.rot, pnt - (f.pos - (hs[3] * T(0.5)) * z));
      Vec3<T> pt = mul_transpose(f.rot, pnt - (f.pos + (hs[2] * T(0.5)) * z));
      return ray_hfield(s.hfield, p, v, pb, pt);
    }
    case kGeomCapsule:
      return ray_capsule(p, v, s.size);
    case kGeomEllipsoid:
      return ray_ellipsoid(p, v, s.size);
    case kGeomCylinder:
      return ray_cylinder(p, v, s.size);
    case kGeomBox:
      return ray_box(p, v, s.size, (T*)nullptr);
    case kGeomMesh:
      return ray_hull(s.hull, p, v);
    default:
      return T(-1);
  }
}

}  // namespace phx
