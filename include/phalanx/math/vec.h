// 3-vectors and 3x3 matrices (row-major) on any scalar, with the adjoints of the products
// that the stages differentiate through.
#pragma once

#include "phalanx/math/scalar.h"

namespace phx {

template <class T>
struct Vec3 {
  T x = T(0), y = T(0), z = T(0);

  // from any stored scalar that converts to T (a Lane broadcasts a forward value), through a
  // pointer of any kind (plain, or Strided for a workspace's interleaved rows)
  template <class P>
  PHX_HD PHX_INLINE static Vec3 load(P p) {
    return {T(p[0]), T(p[1]), T(p[2])};
  }
  // from a vector of another scalar that converts to T
  template <class U>
  PHX_HD PHX_INLINE static Vec3 from(const Vec3<U>& v) { return {T(v.x), T(v.y), T(v.z)}; }
  PHX_HD void store(T* p) const { p[0] = x; p[1] = y; p[2] = z; }
  template <class P>
  PHX_HD void add_to(P p) const {
    p[0] += x;
    p[1] += y;
    p[2] += z;
  }
  PHX_HD T& operator[](int i) { return i == 0 ? x : (i == 1 ? y : z); }
  PHX_HD const T& operator[](int i) const { return i == 0 ? x : (i == 1 ? y : z); }
  PHX_HD Vec3& operator+=(const Vec3& b) { x += b.x; y += b.y; z += b.z; return *this; }
  PHX_HD Vec3& operator-=(const Vec3& b) { x -= b.x; y -= b.y; z -= b.z; return *this; }
};

template <class T> PHX_HD PHX_INLINE Vec3<T> operator+(const Vec3<T>& a, const Vec3<T>& b) {
  return {a.x + b.x, a.y + b.y, a.z + b.z};
}
template <class T> PHX_HD PHX_INLINE Vec3<T> operator-(const Vec3<T>& a, const Vec3<T>& b) {
  return {a.x - b.x, a.y - b.y, a.z - b.z};
}
template <class T> PHX_HD PHX_INLINE Vec3<T> operator-(const Vec3<T>& a) { return {-a.x, -a.y, -a.z}; }
template <class T> PHX_HD PHX_INLINE Vec3<T> operator*(const T& s, const Vec3<T>& a) {
  return {s * a.x, s * a.y, s * a.z};
}
template <class T> PHX_HD PHX_INLINE T dot(const Vec3<T>& a, const Vec3<T>& b) {
  return a.x * b.x + a.y * b.y + a.z * b.z;
}
template <class T> PHX_HD PHX_INLINE Vec3<T> cross(const Vec3<T>& a, const Vec3<T>& b) {
  return {a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x};
}
template <class T> PHX_HD PHX_INLINE T norm(const Vec3<T>& a) { return sqrt(dot(a, a)); }

// adjoint of c = a x b: adj_a += b x adj_c, adj_b += adj_c x a
template <class T>
PHX_HD PHX_INLINE void adj_cross(const Vec3<T>& a, const Vec3<T>& b, Vec3<T>& adj_a, Vec3<T>& adj_b,
                      const Vec3<T>& adj_c) {
  adj_a += cross(b, adj_c);
  adj_b += cross(adj_c, a);
}

// 3x3 matrix, row-major: m[3 * row + col]
template <class T>
struct Mat3 {
  T m[9] = {};

  template <class P>
  PHX_HD static Mat3 load(const P* p) {
    Mat3 r;
    for (int i = 0; i < 9; ++i) r.m[i] = T(p[i]);
    return r;
  }
  PHX_HD void store(T* p) const {
    for (int i = 0; i < 9; ++i) p[i] = m[i];
  }
  PHX_HD static Mat3 identity() {
    Mat3 r;
    r.m[0] = r.m[4] = r.m[8] = T(1);
    return r;
  }
  PHX_HD T& operator()(int r, int c) { return m[3 * r + c]; }
  PHX_HD const T& operator()(int r, int c) const { return m[3 * r + c]; }
  PHX_HD Vec3<T> col(int c) const { return {m[c], m[3 + c], m[6 + c]}; }
};

// M a; a may be on another scalar S that M's converts to (a Dual of it: a constant rotation
// applied to a vector that carries derivatives)
template <class T, class S>
PHX_HD PHX_INLINE Vec3<S> operator*(const Mat3<T>& M, const Vec3<S>& a) {
  return {M.m[0] * a.x + M.m[1] * a.y + M.m[2] * a.z, M.m[3] * a.x + M.m[4] * a.y + M.m[5] * a.z,
          M.m[6] * a.x + M.m[7] * a.y + M.m[8] * a.z};
}
// M^T a (a on S as for M a)
template <class T, class S>
PHX_HD PHX_INLINE Vec3<S> mul_transpose(const Mat3<T>& M, const Vec3<S>& a) {
  return {M.m[0] * a.x + M.m[3] * a.y + M.m[6] * a.z, M.m[1] * a.x + M.m[4] * a.y + M.m[7] * a.z,
          M.m[2] * a.x + M.m[5] * a.y + M.m[8] * a.z};
}
// A B
template <class T> PHX_HD PHX_INLINE Mat3<T> operator*(const Mat3<T>& A, const Mat3<T>& B) {
  Mat3<T> C;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      C.m[3 * i + j] = A.m[3 * i] * B.m[j] + A.m[3 * i + 1] * B.m[3 + j] + A.m[3 * i + 2] * B.m[6 + j];
  return C;
}

// M^T
template <class T>
PHX_HD PHX_INLINE Mat3<T> transpose(const Mat3<T>& M) {
  Mat3<T> R;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) R.m[3 * i + j] = M.m[3 * j + i];
  return R;
}

// adjoint of y = M a: adj_M += adj_y a^T, adj_a += M^T adj_y
template <class T>
PHX_HD PHX_INLINE void adj_mul(const Mat3<T>& M, const Vec3<T>& a, Mat3<T>& adj_M, Vec3<T>& adj_a,
                    const Vec3<T>& adj_y) {
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) adj_M.m[3 * i + j] += adj_y[i] * a[j];
  adj_a += mul_transpose(M, adj_y);
}

// adjoint of y = M^T a: adj_M += a adj_y^T, adj_a += M adj_y
template <class T>
PHX_HD PHX_INLINE void adj_mul_transpose(const Mat3<T>& M, const Vec3<T>& a, Mat3<T>& adj_M,
                                         Vec3<T>& adj_a, const Vec3<T>& adj_y) {
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) adj_M.m[3 * i + j] += a[i] * adj_y[j];
  adj_a += M * adj_y;
}

}  // namespace phx
