// Types shared by the narrowphase pair functions, the broadphase and the contact rows.
#pragma once

#include "phalanx/config.h"
#include "phalanx/math/vec.h"

namespace phx {

// most contacts one geom pair can produce (a box-box face manifold)
constexpr int kMaxPairContacts = 8;

// whether the narrowphase collides geoms of this type: collide has a function for every pair of
// these types except plane-plane (Model::check_collision_support refuses models whose geoms of
// other types may touch)
PHX_HD constexpr bool collision_implemented(int type) {
  return type == kGeomPlane || type == kGeomSphere || type == kGeomCapsule || type == kGeomBox;
}

// most contacts a pair of these geom types can produce (MuJoCo's manifolds)
PHX_HD constexpr int max_pair_contacts(int type1, int type2) {
  int a = type1 < type2 ? type1 : type2, b = type1 < type2 ? type2 : type1;
  if (b == kGeomBox) return a == kGeomBox ? 8 : a == kGeomPlane ? 4 : a == kGeomCapsule ? 2 : 1;
  if (b == kGeomCapsule) return (a == kGeomCapsule || a == kGeomPlane) ? 2 : 1;
  return 1;
}

// world pose of a geom: position of its centre and rotation matrix (geom frame -> world)
template <class T>
struct GeomFrame {
  Vec3<T> pos;
  Mat3<T> rot;
};

// One contact point of a geom pair, in MuJoCo's convention: the normal points from geom1 to
// geom2, dist is the signed distance between the surfaces (negative when they penetrate), and
// pos lies midway between the two surfaces along the normal.
template <class T>
struct ContactPoint {
  Vec3<T> pos;
  Vec3<T> normal;
  T dist = T(0);
};

}  // namespace phx
