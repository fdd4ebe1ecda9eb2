// Spatial (6D) algebra in world-aligned coordinates about a reference point, in the
// [angular; linear] order of Featherstone and MuJoCo. A motion vector (w, v) holds an angular
// velocity and the linear velocity of the body-fixed point at the reference; a force vector
// (n, f) holds a moment about the reference and a force.
#pragma once

#include "phalanx/math/vec.h"

namespace phx {

template <class T>
struct Vec6 {
  T v[6] = {};

  // from any stored scalar P that converts to T (a Lane broadcasts a forward value)
  template <class P>
  PHX_HD static Vec6 load(const P* p) {
    Vec6 r;
    for (int i = 0; i < 6; ++i) r.v[i] = T(p[i]);
    return r;
  }
  PHX_HD static Vec6 make(const Vec3<T>& a, const Vec3<T>& b) {
    return Vec6{{a.x, a.y, a.z, b.x, b.y, b.z}};
  }
  PHX_HD void store(T* p) const {
    for (int i = 0; i < 6; ++i) p[i] = v[i];
  }
  PHX_HD Vec3<T> ang() const { return {v[0], v[1], v[2]}; }
  PHX_HD Vec3<T> lin() const { return {v[3], v[4], v[5]}; }
  PHX_HD T& operator[](int i) { return v[i]; }
  PHX_HD const T& operator[](int i) const { return v[i]; }
  PHX_HD Vec6& operator+=(const Vec6& b) {
    for (int i = 0; i < 6; ++i) v[i] += b.v[i];
    return *this;
  }
  PHX_HD Vec6& operator-=(const Vec6& b) {
    for (int i = 0; i < 6; ++i) v[i] -= b.v[i];
    return *this;
  }
};

template <class T> PHX_HD PHX_INLINE Vec6<T> operator+(Vec6<T> a, const Vec6<T>& b) { return a += b; }
template <class T> PHX_HD PHX_INLINE Vec6<T> operator-(Vec6<T> a, const Vec6<T>& b) { return a -= b; }
template <class T> PHX_HD PHX_INLINE Vec6<T> operator*(const T& s, Vec6<T> a) {
  for (int i = 0; i < 6; ++i) a.v[i] *= s;
  return a;
}
// summed as angular plus linear part, so that the two halves' products run in parallel
template <class T> PHX_HD PHX_INLINE T dot(const Vec6<T>& a, const Vec6<T>& b) {
  T s0 = a.v[0] * b.v[0] + a.v[1] * b.v[1] + a.v[2] * b.v[2];
  T s1 = a.v[3] * b.v[3] + a.v[4] * b.v[4] + a.v[5] * b.v[5];
  return s0 + s1;
}

// motion cross product m1 x m2 (rate of change of m2 moving with velocity m1)
template <class T> PHX_HD PHX_INLINE Vec6<T> cross_motion(const Vec6<T>& m1, const Vec6<T>& m2) {
  Vec3<T> w = m1.ang(), v = m1.lin(), a = m2.ang(), b = m2.lin();
  return Vec6<T>::make(cross(w, a), cross(w, b) + cross(v, a));
}
// adjoint of r = m1 x m2
template <class T>
PHX_HD PHX_INLINE void adj_cross_motion(const Vec6<T>& m1, const Vec6<T>& m2, Vec6<T>& adj_m1,
                             Vec6<T>& adj_m2, const Vec6<T>& adj_r) {
  Vec3<T> w = m1.ang(), v = m1.lin(), a = m2.ang(), b = m2.lin();
  Vec3<T> aw, av, aa, ab;
  adj_cross(w, a, aw, aa, adj_r.ang());
  adj_cross(w, b, aw, ab, adj_r.lin());
  adj_cross(v, a, av, aa, adj_r.lin());
  adj_m1 += Vec6<T>::make(aw, av);
  adj_m2 += Vec6<T>::make(aa, ab);
}

// force cross product m x* f (rate of change of force f moving with velocity m)
template <class T> PHX_HD PHX_INLINE Vec6<T> cross_force(const Vec6<T>& m, const Vec6<T>& f) {
  Vec3<T> w = m.ang(), v = m.lin(), n = f.ang(), g = f.lin();
  return Vec6<T>::make(cross(w, n) + cross(v, g), cross(w, g));
}
// adjoint of r = m x* f
template <class T>
PHX_HD PHX_INLINE void adj_cross_force(const Vec6<T>& m, const Vec6<T>& f, Vec6<T>& adj_m, Vec6<T>& adj_f,
                            const Vec6<T>& adj_r) {
  Vec3<T> w = m.ang(), v = m.lin(), n = f.ang(), g = f.lin();
  Vec3<T> aw, av, an, ag;
  adj_cross(w, n, aw, an, adj_r.ang());
  adj_cross(v, g, av, ag, adj_r.ang());
  adj_cross(w, g, aw, ag, adj_r.lin());
  adj_m += Vec6<T>::make(aw, av);
  adj_f += Vec6<T>::make(an, ag);
}

// Rigid-body spatial inertia about the reference point, 10 numbers as in MuJoCo's cinert:
// rotational inertia about the reference (xx, yy, zz, xy, xz, yz), first mass moment
// h = m c (c the centre of mass relative to the reference), and mass m.
template <class T>
struct Inertia {
  T I[6] = {};
  Vec3<T> h;
  T m = T(0);

  template <class P>
  PHX_HD static Inertia load(const P* p) {
    Inertia r;
    for (int i = 0; i < 6; ++i) r.I[i] = T(p[i]);
    r.h = Vec3<T>::load(p + 6);
    r.m = T(p[9]);
    return r;
  }
  PHX_HD void store(T* p) const {
    for (int i = 0; i < 6; ++i) p[i] = I[i];
    h.store(p + 6);
    p[9] = m;
  }
  PHX_HD Inertia& operator+=(const Inertia& b) {
    for (int i = 0; i < 6; ++i) I[i] += b.I[i];
    h += b.h;
    m += b.m;
    return *this;
  }
  // rotational inertia about the reference as a 3x3 product
  PHX_HD Vec3<T> rot_mul(const Vec3<T>& w) const {
    return {I[0] * w.x + I[3] * w.y + I[4] * w.z, I[3] * w.x + I[1] * w.y + I[5] * w.z,
            I[4] * w.x + I[5] * w.y + I[2] * w.z};
  }
};

// momentum of a body with spatial inertia J moving with velocity mv:
// (I w + h x v, m v - h x w)
template <class T> PHX_HD PHX_INLINE Vec6<T> operator*(const Inertia<T>& J, const Vec6<T>& mv) {
  Vec3<T> w = mv.ang(), v = mv.lin();
  return Vec6<T>::make(J.rot_mul(w) + cross(J.h, v), J.m * v - cross(J.h, w));
}
// adjoint of f = J mv with respect to J and mv
template <class T>
PHX_HD PHX_INLINE void adj_inertia_mul(const Inertia<T>& J, const Vec6<T>& mv, Inertia<T>& adj_J,
                            Vec6<T>& adj_mv, const Vec6<T>& adj_f) {
  Vec3<T> w = mv.ang(), v = mv.lin(), fa = adj_f.ang(), fl = adj_f.lin();
  // f_ang = I w + h x v
  adj_J.I[0] += fa.x * w.x;
  adj_J.I[1] += fa.y * w.y;
  adj_J.I[2] += fa.z * w.z;
  adj_J.I[3] += fa.x * w.y + fa.y * w.x;
  adj_J.I[4] += fa.x * w.z + fa.z * w.x;
  adj_J.I[5] += fa.y * w.z + fa.z * w.y;
  Vec3<T> aw = J.rot_mul(fa), av;
  adj_cross(J.h, v, adj_J.h, av, fa);
  // f_lin = m v - h x w
  adj_J.m += dot(fl, v);
  av += J.m * fl;
  Vec3<T> nfl = -fl;
  adj_cross(J.h, w, adj_J.h, aw, nfl);
  adj_mv += Vec6<T>::make(aw, av);
}

// Dense symmetric 6x6 matrix (articulated-body inertia), row-major.
template <class T>
struct Mat6 {
  T m[36] = {};

  PHX_HD static Mat6 from(const Inertia<T>& J) {
    Mat6 A;
    const T* I = J.I;
    A.m[0] = I[0];  A.m[1] = I[3];  A.m[2] = I[4];
    A.m[6] = I[3];  A.m[7] = I[1];  A.m[8] = I[5];
    A.m[12] = I[4]; A.m[13] = I[5]; A.m[14] = I[2];
    // upper right [h]x, lower left [h]x^T
    const Vec3<T>& h = J.h;
    A.m[4] = -h.z;  A.m[5] = h.y;
    A.m[9] = h.z;   A.m[11] = -h.x;
    A.m[15] = -h.y; A.m[16] = h.x;
    A.m[19] = h.z;  A.m[20] = -h.y;
    A.m[24] = -h.z; A.m[26] = h.x;
    A.m[30] = h.y;  A.m[31] = -h.x;
    A.m[21] = A.m[28] = A.m[35] = J.m;
    return A;
  }
  PHX_HD static Mat6 load(const T* p) {
    Mat6 A;
    for (int i = 0; i < 36; ++i) A.m[i] = p[i];
    return A;
  }
  PHX_HD void store(T* p) const {
    for (int i = 0; i < 36; ++i) p[i] = m[i];
  }
  PHX_HD Mat6& operator+=(const Mat6& b) {
    for (int i = 0; i < 36; ++i) m[i] += b.m[i];
    return *this;
  }
};

// A x for a symmetric A, as a sum of rows scaled by x (row j equals column j), which keeps the
// inner loop contiguous
template <class T> PHX_HD PHX_INLINE Vec6<T> operator*(const Mat6<T>& A, const Vec6<T>& x) {
  Vec6<T> y;
  for (int j = 0; j < 6; ++j)
    for (int i = 0; i < 6; ++i) y.v[i] += x.v[j] * A.m[6 * j + i];
  return y;
}

}  // namespace phx
