// Narrowphase dispatch: one pair function per (type1, type2) among plane, sphere, capsule and
// box (MuJoCo's mjCOLLISIONFUNC table restricted to those), its adjoint, and the tangent frame
// of a contact normal.
//
//   pair               forward                  contacts   adjoint
//   plane   : sphere   plane_sphere             0..1       hand-written
//   plane   : capsule  plane_capsule            0..2       hand-written
//   plane   : box      plane_box                0..4       hand-written
//   sphere  : sphere   sphere_sphere            0..1       hand-written
//   sphere  : capsule  sphere_capsule           0..1       hand-written
//   sphere  : box      sphere_box               0..1       hand-written
//   capsule : capsule  capsule_capsule          0..2       hand-written, 2x2 solve by Dual<T, 5>
//   capsule : box      capsule_box              0..2       hand-written, segment points by
//                                                           Dual<T, 10>
//   box     : box      box_box                  0..8       Dual<T, 6>, five passes
#pragma once

#include "phalanx/collision/box.h"
#include "phalanx/collision/primitives.h"

namespace phx {

// Contacts of geom1 (type1, frame g1, geom_size size1) with geom2, written to out (room for
// kMaxPairContacts); returns their number, 0 for unsupported pairs (plane-plane, and any type
// other than plane, sphere, capsule, box). The caller orders the pair: type1 <= type2 (MuJoCo's
// order), so the normals point from the geom of the smaller type number to the other; a pair
// given the other way round returns 0. margin: contacts are kept up to dist <= margin.
template <class T>
PHX_HD int collide(int type1, const GeomFrame<T>& g1, const T* size1, int type2,
                   const GeomFrame<T>& g2, const T* size2, T margin, ContactPoint<T>* out) {
  if (type1 < 0 || type2 < 0 || type1 >= 8 || type2 >= 8) return 0;
  switch (type1 * 8 + type2) {
    case kGeomPlane * 8 + kGeomSphere:
      return plane_sphere(g1, size1, g2, size2, margin, out);
    case kGeomPlane * 8 + kGeomCapsule:
      return plane_capsule(g1, size1, g2, size2, margin, out);
    case kGeomPlane * 8 + kGeomBox:
      return plane_box(g1, size1, g2, size2, margin, out);
    case kGeomSphere * 8 + kGeomSphere:
      return sphere_sphere(g1, size1, g2, size2, margin, out);
    case kGeomSphere * 8 + kGeomCapsule:
      return sphere_capsule(g1, size1, g2, size2, margin, out);
    case kGeomSphere * 8 + kGeomBox:
      return sphere_box(g1, size1, g2, size2, margin, out);
    case kGeomCapsule * 8 + kGeomCapsule:
      return capsule_capsule(g1, size1, g2, size2, margin, out);
    case kGeomCapsule * 8 + kGeomBox:
      return capsule_box(g1, size1, g2, size2, margin, out);
    case kGeomBox * 8 + kGeomBox:
      return box_box(g1, size1, g2, size2, margin, out);
    default:
      return 0;
  }
}

// Adjoint of collide: given the n contacts it returned and their adjoints adj_contacts (pos,
// normal, dist), accumulates (+=) into the adjoints of both frames (position and the nine
// rotation-matrix entries, as independent inputs) and both sizes (3 entries each; entries a
// geom type does not read get nothing). The derivatives are those of the branch the forward
// took (which contact features): each pair re-runs its discrete choices from the same inputs
// in the same arithmetic. Should that ever select a different number of contacts than n (a
// knife-edge tie decided differently, e.g. under a different floating-point contraction), the
// pair adds nothing rather than misattribute contacts. `contacts` (the forward's output) is part
// of the contract but not read: each pair recomputes what it needs from the inputs.
template <class T>
PHX_HD void adj_collide(int type1, const GeomFrame<T>& g1, const T* size1, int type2,
                        const GeomFrame<T>& g2, const T* size2, T margin,
                        const ContactPoint<T>* contacts, int n, const ContactPoint<T>* adj_contacts,
                        GeomFrame<T>& adj_g1, T* adj_size1, GeomFrame<T>& adj_g2, T* adj_size2) {
  (void)contacts;
  if (n < 1 || type1 < 0 || type2 < 0 || type1 >= 8 || type2 >= 8) return;
  const ContactPoint<T>* a = adj_contacts;
#define PHX_ADJ_PAIR(f) f(g1, size1, g2, size2, margin, n, a, adj_g1, adj_size1, adj_g2, adj_size2)
  switch (type1 * 8 + type2) {
    case kGeomPlane * 8 + kGeomSphere:
      PHX_ADJ_PAIR(adj_plane_sphere);
      break;
    case kGeomPlane * 8 + kGeomCapsule:
      PHX_ADJ_PAIR(adj_plane_capsule);
      break;
    case kGeomPlane * 8 + kGeomBox:
      PHX_ADJ_PAIR(adj_plane_box);
      break;
    case kGeomSphere * 8 + kGeomSphere:
      PHX_ADJ_PAIR(adj_sphere_sphere);
      break;
    case kGeomSphere * 8 + kGeomCapsule:
      PHX_ADJ_PAIR(adj_sphere_capsule);
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
      break;
  }
#undef PHX_ADJ_PAIR
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
