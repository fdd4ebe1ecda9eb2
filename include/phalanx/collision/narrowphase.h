// Narrowphase dispatch: one pair function per (type1, type2), MuJoCo's mjCOLLISIONFUNC table
// (engine_collision_driver.c) over the geom types Phalanx has, with its adjoint, and the tangent
// frame of a contact normal.
//
//   pair                      forward           contacts  file            adjoint
//   plane : sphere            plane_sphere      0..1      primitives.h    hand-written
//   plane : capsule           plane_capsule     0..2      primitives.h    hand-written
//   plane : ellipsoid         plane_ellipsoid   0..1      plane_convex.h  hand-written
//   plane : cylinder          plane_cylinder    0..4      plane_convex.h  hand-written
//   plane : box               plane_box         0..4      box.h           hand-written
//   plane : mesh              plane_convex      0..4      plane_convex.h  hand-written
//   hfield : any but plane    hfield_convex     0..8      hfield.h        per prism, convex's
//   sphere : sphere           sphere_sphere     0..1      primitives.h    hand-written
//   sphere : capsule          sphere_capsule    0..1      primitives.h    hand-written
//   sphere : cylinder         sphere_cylinder   0..1      plane_convex.h  hand-written
//   sphere : box              sphere_box        0..1      box.h           hand-written
//   capsule : capsule         capsule_capsule   0..2      primitives.h    hand-written, Dual<T, 5>
//   capsule : box             capsule_box       0..2      box.h           hand-written, Dual<T, 10>
//   box : box                 box_box           0..8      box.h           Dual<T, 6>, five passes
//   other convex pairs        convex_convex     0..4      convex.h        from the witness
//     (ellipsoid, cylinder,                                               features
//      mesh; sphere-ellipsoid,
//      capsule-cylinder, ...)
// Plane-plane, plane-hfield and hfield-hfield have no function (as in MuJoCo): such pairs never
// collide (Model::compute_pairs leaves them out).
#pragma once

#include "phalanx/collision/box.h"
#include "phalanx/collision/convex.h"
#include "phalanx/collision/hfield.h"
#include "phalanx/collision/plane_convex.h"
#include "phalanx/collision/primitives.h"

namespace phx {

// collide for the pairs with a function of their own (not convex_pair)
template <class T>
PHX_HD int collide_own(const GeomShape<T>& s1, const GeomFrame<T>& g1, const GeomShape<T>& s2,
                       const GeomFrame<T>& g2, T margin, ContactPoint<T>* out) {
  const int type1 = s1.type, type2 = s2.type;
  const T *size1 = s1.size, *size2 = s2.size;
  switch (type1 * 8 + type2) {
    case kGeomPlane * 8 + kGeomSphere:
      return plane_sphere(g1, size1, g2, size2, margin, out);
    case kGeomPlane * 8 + kGeomCapsule:
      return plane_capsule(g1, size1, g2, size2, margin, out);
    case kGeomPlane * 8 + kGeomEllipsoid:
      return plane_ellipsoid(g1, size1, g2, size2, margin, out);
    case kGeomPlane * 8 + kGeomCylinder:
      return plane_cylinder(g1, size1, g2, size2, margin, out);
    case kGeomPlane * 8 + kGeomBox:
      return plane_box(g1, size1, g2, size2, margin, out);
    case kGeomPlane * 8 + kGeomMesh:
      return plane_convex(g1, size1, s2.hull, g2, margin, out);
    case kGeomSphere * 8 + kGeomSphere:
      return sphere_sphere(g1, size1, g2, size2, margin, out);
    case kGeomSphere * 8 + kGeomCapsule:
      return sphere_capsule(g1, size1, g2, size2, margin, out);
    case kGeomSphere * 8 + kGeomCylinder:
      return sphere_cylinder(g1, size1, g2, size2, margin, out);
    case kGeomSphere * 8 + kGeomBox:
      return sphere_box(g1, size1, g2, size2, margin, out);
    case kGeomCapsule * 8 + kGeomCapsule:
      return capsule_capsule(g1, size1, g2, size2, margin, out);
    case kGeomCapsule * 8 + kGeomBox:
      return capsule_box(g1, size1, g2, size2, margin, out);
    case kGeomBox * 8 + kGeomBox:
      return box_box(g1, size1, g2, size2, margin, out);
    default:  // none: convex_pair names the others
      return 0;
  }
}

// Which pairs a narrowphase call tests: every pair, or those of one of a detection's stages
// (kernels/common.h: staged launches), the pairs with a function of their own or the convex
// pairs (convex_pair), whose GJK and EPA need nearly all of a GPU thread's registers.
enum class PairSet { kAll, kOwn, kConvex };

// Contacts of geom1 (shape s1 at frame g1) with geom2, written to out (room for
// kMaxPairContacts); returns their number, 0 for pairs without a function or outside `Set`. The
// caller orders the pair: s1.type <= s2.type (MuJoCo's order), so the normals point from the
// geom of the smaller type number to the other; a pair given the other way round returns 0.
// margin: contacts are kept up to dist <= margin. Height-field pairs add the contacts beyond
// kMaxPairContacts to *dropped (when given).
template <class T, PairSet Set = PairSet::kAll>
PHX_HD int collide(const GeomShape<T>& s1, const GeomFrame<T>& g1, const GeomShape<T>& s2,
                   const GeomFrame<T>& g2, T margin, const CcdSettings<T>& ccd,
                   ContactPoint<T>* out, int* dropped = nullptr) {
  int type1 = s1.type, type2 = s2.type;
  if (type1 > type2 || !has_collision_function(type1, type2)) return 0;
  // (the functions outside Set not even instantiated, so that a kernel of one stage holds no
  // code of the other's)
  if (convex_pair(type1, type2)) {
    if constexpr (Set == PairSet::kOwn) {
      return 0;
    } else {
      if (type1 == kGeomHField) return hfield_convex(s1, g1, s2, g2, margin, ccd, out, dropped);
      return convex_convex(s1, g1, s2, g2, margin, ccd, out);
    }
  }
  if constexpr (Set == PairSet::kConvex) {
    return 0;
  } else {
    return collide_own(s1, g1, s2, g2, margin, out);
  }
}

// collide for the primitive types (plane, sphere, capsule, ellipsoid, cylinder, box), which need
// nothing but their sizes, with the default convex iteration budget
template <class T>
PHX_HD int collide(int type1, const GeomFrame<T>& g1, const T* size1, int type2,
                   const GeomFrame<T>& g2, const T* size2, T margin, ContactPoint<T>* out) {
  if (type1 == kGeomMesh || type1 == kGeomHField || type2 == kGeomMesh || type2 == kGeomHField)
    return 0;
  GeomShape<T> s1, s2;
  s1.type = type1, s1.size = size1, s2.type = type2, s2.size = size2;
  return collide(s1, g1, s2, g2, margin, CcdSettings<T>{}, out);
}

// Adjoint of collide: given the n contacts it returned and their adjoints adj_contacts (pos,
// normal, dist), accumulates (+=) into the adjoints of both frames (position and the nine
// rotation-matrix entries, as independent inputs) and both sizes (3 entries each; entries a
// geom type does not read get nothing; meshes and height fields have no size parameter). The
// derivatives are those of the branch the forward took (which contact features): each pair
// re-runs its discrete choices from the same inputs in the same arithmetic. Should that ever
// select a different number of contacts than n (a knife-edge tie decided differently, e.g.
// under a different floating-point contraction), the pair adds nothing rather than misattribute
// contacts.
template <class T>
PHX_HD void adj_collide(const GeomShape<T>& s1, const GeomFrame<T>& g1, const GeomShape<T>& s2,
                        const GeomFrame<T>& g2, T margin, const CcdSettings<T>& ccd, int n,
                        const ContactPoint<T>* adj_contacts, GeomFrame<T>& adj_g1, T* adj_size1,
                        GeomFrame<T>& adj_g2, T* adj_size2) {
  int type1 = s1.type, type2 = s2.type;
  if (n < 1 || type1 > type2 || !has_collision_function(type1, type2)) return;
  const T *size1 = s1.size, *size2 = s2.size;
  const ContactPoint<T>* a = adj_contacts;
#define PHX_ADJ_PAIR(f) f(g1, size1, g2, size2, margin, n, a, adj_g1, adj_size1, adj_g2, adj_size2)
  switch (type1 * 8 + type2) {
    case kGeomPlane * 8 + kGeomSphere:
      PHX_ADJ_PAIR(adj_plane_sphere);
      break;
    case kGeomPlane * 8 + kGeomCapsule:
      PHX_ADJ_PAIR(adj_plane_capsule);
      break;
    case kGeomPlane * 8 + kGeomEllipsoid:
      PHX_ADJ_PAIR(adj_plane_ellipsoid);
      break;
    case kGeomPlane * 8 + kGeomCylinder:
      PHX_ADJ_PAIR(adj_plane_cylinder);
      break;
    case kGeomPlane * 8 + kGeomBox:
      PHX_ADJ_PAIR(adj_plane_box);
      break;
    case kGeomPlane * 8 + kGeomMesh:
      adj_plane_convex(g1, size1, s2.hull, g2, margin, n, a, adj_g1, adj_size1, adj_g2);
      break;
    case kGeomSphere * 8 + kGeomSphere:
      PHX_ADJ_PAIR(adj_sphere_sphere);
      break;
    case kGeomSphere * 8 + kGeomCapsule:
      PHX_ADJ_PAIR(adj_sphere_capsule);
      break;
    case kGeomSphere * 8 + kGeomCylinder:
      PHX_ADJ_PAIR(adj_sphere_cylinder);
      break;
    case kGeomSphere * 8 + kGeomBox:
      PHX_ADJ_PAIR(adj_sphere_box);
      break;
    case kGeomCapsule * 8 + kGeomCapsule:
      PHX_ADJ_PAIR(adj_capsule_capsule);
      break;
    case kGeomCapsule * 8 + kGeomBox:
      PHX_ADJ_PAIR(adj_capsule_box);
      break;
    case kGeomBox * 8 + kGeomBox:
      PHX_ADJ_PAIR(adj_box_box);
      break;
    default:
      if (type1 == kGeomHField)
        adj_hfield_convex(s1, g1, s2, g2, margin, ccd, n, a, adj_g1, adj_size1, adj_g2, adj_size2);
      else
        adj_convex_convex(s1, g1, s2, g2, margin, ccd, n, a, adj_g1, adj_size1, adj_g2, adj_size2);
      break;
  }
#undef PHX_ADJ_PAIR
}

// adj_collide for the primitive types (the counterpart of the primitive collide)
template <class T>
PHX_HD void adj_collide(int type1, const GeomFrame<T>& g1, const T* size1, int type2,
                        const GeomFrame<T>& g2, const T* size2, T margin,
                        const ContactPoint<T>* contacts, int n, const ContactPoint<T>* adj_contacts,
                        GeomFrame<T>& adj_g1, T* adj_size1, GeomFrame<T>& adj_g2, T* adj_size2) {
  (void)contacts;
  if (type1 == kGeomMesh || type1 == kGeomHField || type2 == kGeomMesh || type2 == kGeomHField)
    return;
  GeomShape<T> s1, s2;
  s1.type = type1, s1.size = size1, s2.type = type2, s2.size = size2;
  adj_collide(s1, g1, s2, g2, margin, CcdSettings<T>{}, n, adj_contacts, adj_g1, adj_size1, adj_g2,
              adj_size2);
}
// A deterministic orthonormal tangent pair (t1, t2) of a unit normal n, MuJoCo's mju_makeFrame
// without a preferred tangent: t1 = normalize(e - n (n . e)) with e = +y when |n_y| < 0.5 and +z
// otherwise, t2 = n x t1, so (n, t1, t2) is right-handed. Smooth in n away from |n_y| = 0.5,
// where the reference axis switches (there e stays at least 60 degrees from n, so t1 is
// well-defined everywhere).
template <class T>
PHX_HD void contact_frame(const Vec3<T>& normal, Vec3<T>& t1, Vec3<T>& t2) {
  Vec3<T> e = abs(normal.y) < T(0.5) ? Vec3<T>{T(0), T(1), T(0)} : Vec3<T>{T(0), T(0), T(1)};
  Vec3<T> w = e - dot(normal, e) * normal;
  t1 = (T(1) / norm(w)) * w;
  t2 = cross(normal, t1);
}

// adjoint of contact_frame: adj_normal += d(t1, t2)/dn^T (adj_t1, adj_t2)
template <class T>
PHX_HD void adj_contact_frame(const Vec3<T>& normal, Vec3<T>& adj_normal, const Vec3<T>& adj_t1,
                              const Vec3<T>& adj_t2) {
  Vec3<T> e = abs(normal.y) < T(0.5) ? Vec3<T>{T(0), T(1), T(0)} : Vec3<T>{T(0), T(0), T(1)};
  T ne = dot(normal, e);
  Vec3<T> w = e - ne * normal;
  T len = norm(w);
  Vec3<T> t1 = (T(1) / len) * w;
  // t2 = n x t1
  Vec3<T> adj_t1_total = adj_t1;
  adj_cross(normal, t1, adj_normal, adj_t1_total, adj_t2);
  // t1 = w / |w|
  Vec3<T> adj_w;
  collision_impl::adj_normalize(t1, len, adj_w, adj_t1_total);
  // w = e - (n . e) n
  adj_normal -= ne * adj_w + dot(normal, adj_w) * e;
}

}  // namespace phx
