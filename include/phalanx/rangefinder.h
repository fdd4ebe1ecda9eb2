// Rays cast at the model's geoms, as MuJoCo's mj_ray casts them, and its rangefinder sensor: the
// distance from a site along its z axis to the nearest surface. A ray sees every geom that is
// drawn (geom_visible: its colour's or its material's alpha above 0), colliding or not, world
// geoms included, except those of one body (the sensor's own). Each geom is tested by
// collision/ray.h after a bounding-sphere test (geom_rbound) that only skips geoms the ray
// cannot meet. Observations only: there is no adjoint, as MuJoCo's rangefinder has no
// derivative.
#pragma once

#include "phalanx/collision/ray.h"
#include "phalanx/constraint.h"

namespace phx {

// whether the ray pnt + x vec (x >= 0) can meet the sphere of radius r about c
template <class T>
PHX_HD bool ray_reaches_sphere(const Vec3<T>& pnt, const Vec3<T>& vec, const Vec3<T>& c, T r) {
  const Vec3<T> d = c - pnt;
  const T dd = dot(d, d);
  if (dd <= r * r) return true;  // starts inside
  const T along = dot(d, vec);
  if (along <= T(0)) return false;  // points away from a sphere it starts outside of
  const T vv = dot(vec, vec);
  return dd * vv - along * along <= r * r * vv;  // the line's distance to c at most r
}

// MuJoCo's mj_ray over all geom groups with the static geoms: the least x >= 0 at which
// pnt + x vec meets a visible geom not of body `exclude` (body frames in w), that geom in
// *geom; x = -1 and *geom = -1 when there is none
template <class T>
PHX_HD T ray_model(const ModelView<T>& m, const Workspace<T>& w, const Vec3<T>& pnt,
                   const Vec3<T>& vec, int exclude, int* geom) {
  T best = T(-1);
  *geom = -1;
  for (int g = 0; g < m.ngeom; ++g) {
    if (!m.geom_visible[g] || m.geom_bodyid[g] == exclude) continue;
    GeomFrame<T> f;
    T pos[3], mat[9];
    body_fixed_frame(w, m.geom_bodyid[g], m.geom_pos + 3 * g, m.geom_quat + 4 * g, pos, mat);
    f.pos = Vec3<T>::load(pos);
    f.rot = Mat3<T>::load(mat);
    const T rbound = m.geom_rbound[g];
    if (rbound > T(0) && !ray_reaches_sphere(pnt, vec, f.pos, rbound)) continue;
    const T x = ray_geom(geom_shape(m, g, m.geom_size + 3 * g), f, pnt, vec);
    if (x >= T(0) && (best < T(0) || x < best)) best = x, *geom = g;
  }
  return best;
}

// MuJoCo's rangefinder sensor on site s: the distance along the site's z axis to the nearest
// visible geom not of the site's body, -1 when there is none; the geom in *geom (-1: none)
template <class T>
PHX_HD T rangefinder(const ModelView<T>& m, const Workspace<T>& w, int s, int* geom) {
  T pos[3], mat[9];
  site_frame(m, w, s, pos, mat);
  return ray_model(m, w, Vec3<T>::load(pos), Vec3<T>{mat[2], mat[5], mat[8]}, m.site_bodyid[s],
                   geom);
}

}  // namespace phx
