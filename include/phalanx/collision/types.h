// Types shared by the narrowphase pair functions, the broadphase and the contact rows.
#pragma once

#include "phalanx/config.h"
#include "phalanx/math/vec.h"

namespace phx {

// most contacts one geom pair can produce (a box-box face manifold)
constexpr int kMaxPairContacts = 8;

// whether geoms of these types (in either order) have a collision function: every pair but
// plane-plane, plane-hfield and hfield-hfield (as in MuJoCo), which never collide
PHX_HD constexpr bool has_collision_function(int type1, int type2) {
  int a = type1 < type2 ? type1 : type2, b = type1 < type2 ? type2 : type1;
  if (a < kGeomPlane || b > kGeomMesh) return false;
  return !(a == kGeomPlane && b <= kGeomHField) && !(a == kGeomHField && b == kGeomHField);
}

// whether the narrowphase takes geoms of these types (in either order) to the convex
// narrowphase, GJK and EPA (collide's convex_convex and hfield_convex): the height-field pairs,
// and the pairs of the convex types without a function of their own (narrowphase.h's table). Of the
// types besides the plane and the height field, the pairs of spheres, capsules and boxes and the
// sphere-cylinder pair have one.
PHX_HD constexpr bool convex_pair(int type1, int type2) {
  int a = type1 < type2 ? type1 : type2, b = type1 < type2 ? type2 : type1;
  if (!has_collision_function(a, b) || a == kGeomPlane) return false;
  if (a == kGeomHField) return true;
  const bool own_a = a == kGeomSphere || a == kGeomCapsule || a == kGeomBox;
  const bool own_b = b == kGeomSphere || b == kGeomCapsule || b == kGeomBox;
  return !(own_a && own_b) && !(a == kGeomSphere && b == kGeomCylinder);
}

// most contacts a pair of these geom types can produce (MuJoCo's manifolds; a height field's
// prisms give one each, up to kMaxPairContacts)
PHX_HD constexpr int max_pair_contacts(int type1, int type2) {
  int a = type1 < type2 ? type1 : type2, b = type1 < type2 ? type2 : type1;
  bool polytope_a = a == kGeomBox || a == kGeomMesh, polytope_b = b == kGeomBox || b == kGeomMesh;
  if (!has_collision_function(a, b)) return 0;
  if (a == kGeomHField) return kMaxPairContacts;
  if (a == kGeomBox && b == kGeomBox) return 8;
  if (a == kGeomPlane)
    return b == kGeomSphere || b == kGeomEllipsoid ? 1 : b == kGeomCapsule ? 2 : 4;
  if (polytope_a && polytope_b) return 4;
  if (a == kGeomCapsule && (b == kGeomCapsule || b == kGeomBox)) return 2;
  return 1;
}

// world pose of a geom: position of its centre and rotation matrix (geom frame -> world)
template <class T>
struct GeomFrame {
  Vec3<T> pos;
  Mat3<T> rot;
};

// A mesh geom's convex hull in its geom frame (the Model's mesh_* arrays of one mesh, see
// phalanx/model_fields.h). Vertex and polygon indices stored in adj and polyvert are local to the
// mesh (0 .. nvert-1); adjadr and polyvertadr index the adj and polyvert arrays themselves.
template <class T>
struct ConvexHull {
  int nvert = 0;
  const T* vert = nullptr;      // (nvert, 3) hull vertices
  const int* adjadr = nullptr;  // (nvert) first neighbour of each vertex in adj
  const int* adjnum = nullptr;  // (nvert) number of neighbours (hull edges) of each vertex
  const int* adj = nullptr;     // neighbour vertex ids
  int npoly = 0;
  const T* polynormal = nullptr;     // (npoly, 3) outward unit normals of the hull's faces
  const int* polyvertadr = nullptr;  // (npoly) first vertex of each face in polyvert
  const int* polyvertnum = nullptr;  // (npoly) vertices of each face, counter-clockwise about it
  const int* polyvert = nullptr;     // face vertex ids
};

// A height field in its geom frame (MuJoCo's hfield): elevation data (nrow x ncol, row-major,
// rows along y, values in [0, 1]) scaled to a surface of half-extents size[0] (x), size[1] (y),
// height size[2] and a base of depth size[3] below z = 0.
template <class T>
struct HeightField {
  int nrow = 0, ncol = 0;
  const T* size = nullptr;  // (4)
  const T* data = nullptr;  // (nrow * ncol)
};

// What the narrowphase reads of one geom besides its frame: its type, geom_size and, for mesh
// and height-field geoms, the data they refer to.
template <class T>
struct GeomShape {
  int type = kGeomSphere;
  const T* size = nullptr;  // (3) geom_size
  ConvexHull<T> hull;       // mesh geoms
  HeightField<T> hfield;    // height-field geoms
};

// the largest ccd_iterations: the convex narrowphase's local arrays are sized for it
constexpr int kMaxCcdIterations = 64;

// The iteration budget of the convex narrowphase (the model's ccd_iterations and ccd_tolerance,
// MuJoCo's <option ccd_iterations ccd_tolerance>): fixed, so that a pair costs the same in every
// CUDA thread.
template <class T>
struct CcdSettings {
  int iterations = 35;
  T tolerance = T(1e-6);
  int* counts = nullptr;  // when set, GJK adds its iterations to counts[0] and EPA to counts[1]
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
