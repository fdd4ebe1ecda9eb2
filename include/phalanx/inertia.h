// Mass and inertia of primitive geoms, and the principal axes of an inertia tensor.
//
// The formulas and the arithmetic follow MuJoCo's model compiler (src/user/user_objects.cc,
// mjCGeom::GetVolume / SetInertia / GetRBound, and src/user/user_util.cc, mjuu_globalinertia,
// mjuu_offcenter, mjuu_eig3) so that a model loaded here matches MuJoCo's compiled model to
// rounding. Sizes use MuJoCo's meaning: sphere (r), capsule and cylinder (r, half-length),
// ellipsoid and box (three half-sizes). A symmetric tensor is stored as its six distinct entries
// (xx, yy, zz, xy, xz, yz). Quaternions are (w, x, y, z).
//
// All functions are templates on the scalar type, allocate nothing and throw nothing.
#pragma once

#include <cmath>
#include <limits>

#include "phalanx/config.h"

namespace phx {

namespace detail {

// pi as MuJoCo's mjPI
inline constexpr double kPi = 3.14159265358979323846;

// normalize v (length n) in place and return its old length; like mjuu_normvec it leaves v
// unchanged when the norm is below 1e-14 (and returns 0) or already within 1e-14 of 1
template <typename T>
PHX_HD T normalize(T* v, int n) {
  using std::abs;
  using std::sqrt;
  T nrm = 0;
  for (int i = 0; i < n; i++) nrm += v[i] * v[i];
  if (nrm < T(1e-14)) return T(0);
  nrm = sqrt(nrm);
  if (abs(nrm - T(1)) > T(1e-14)) {
    for (int i = 0; i < n; i++) v[i] /= nrm;
  }
  return nrm;
}

// res = qa * qb, normalized (res may alias qa or qb)
template <typename T>
PHX_HD void quat_mul(T res[4], const T qa[4], const T qb[4]) {
  T tmp[4] = {qa[0] * qb[0] - qa[1] * qb[1] - qa[2] * qb[2] - qa[3] * qb[3],
              qa[0] * qb[1] + qa[1] * qb[0] + qa[2] * qb[3] - qa[3] * qb[2],
              qa[0] * qb[2] - qa[1] * qb[3] + qa[2] * qb[0] + qa[3] * qb[1],
              qa[0] * qb[3] + qa[1] * qb[2] - qa[2] * qb[1] + qa[3] * qb[0]};
  normalize(tmp, 4);
  for (int i = 0; i < 4; i++) res[i] = tmp[i];
}

// row-major rotation matrix of a unit quaternion
template <typename T>
PHX_HD void quat_to_mat(T mat[9], const T q[4]) {
  if (q[0] == T(1) && q[1] == T(0) && q[2] == T(0) && q[3] == T(0)) {
    for (int i = 0; i < 9; i++) mat[i] = (i % 4 == 0) ? T(1) : T(0);
    return;
  }
  T q00 = q[0] * q[0], q01 = q[0] * q[1], q02 = q[0] * q[2], q03 = q[0] * q[3];
  T q11 = q[1] * q[1], q12 = q[1] * q[2], q13 = q[1] * q[3];
  T q22 = q[2] * q[2], q23 = q[2] * q[3], q33 = q[3] * q[3];
  mat[0] = q00 + q11 - q22 - q33;
  mat[4] = q00 - q11 + q22 - q33;
  mat[8] = q00 - q11 - q22 + q33;
  mat[1] = 2 * (q12 - q03);
  mat[2] = 2 * (q13 + q02);
  mat[3] = 2 * (q12 + q03);
  mat[5] = 2 * (q23 - q01);
  mat[6] = 2 * (q13 - q02);
  mat[7] = 2 * (q23 + q01);
}

// res = A * B for row-major 3x3 matrices (res may alias A or B)
template <typename T>
PHX_HD void mat_mul3(T res[9], const T A[9], const T B[9]) {
  T tmp[9];
  for (int r = 0; r < 3; r++) {
    for (int c = 0; c < 3; c++) {
      tmp[3 * r + c] = A[3 * r] * B[c] + A[3 * r + 1] * B[3 + c] + A[3 * r + 2] * B[6 + c];
    }
  }
  for (int i = 0; i < 9; i++) res[i] = tmp[i];
}

}  // namespace detail

// volume of a solid geom; 0 for planes and for types without a primitive volume
template <typename T>
PHX_HD T geom_volume(int type, const T size[3]) {
  const T pi = T(detail::kPi);
  switch (type) {
    case kGeomSphere:
      return 4 * pi * size[0] * size[0] * size[0] / 3;
    case kGeomCapsule:  // cylinder of height 2 size[1] plus a sphere
      return pi * (size[0] * size[0] * (2 * size[1]) + 4 * size[0] * size[0] * size[0] / 3);
    case kGeomCylinder:
      return pi * size[0] * size[0] * (2 * size[1]);
    case kGeomEllipsoid:
      return 4 * pi * size[0] * size[1] * size[2] / 3;
    case kGeomBox:
      return size[0] * size[1] * size[2] * 8;
    default:
      return T(0);
  }
}

// principal moments of inertia of a solid geom of the given mass, about its centre, in the geom
// frame (the geom's symmetry axis is z); zero for types without a primitive volume
template <typename T>
PHX_HD void geom_inertia(int type, const T size[3], T mass, T inertia[3]) {
  switch (type) {
    case kGeomSphere:  // I = 2/5 m r^2
      inertia[0] = inertia[1] = inertia[2] = 2 * mass * size[0] * size[0] / 5;
      return;
    case kGeomCapsule: {
      // cylinder of height h plus two hemispheres whose centres of mass sit 3r/8 beyond the
      // cylinder's ends. The pair has 2/5 m_s r^2 about its own base centre; moving each half
      // to its centre of mass and then to the capsule's centre (parallel axes) adds
      // m_s ((h/2 + 3r/8)^2 - (3r/8)^2) = m_s h (3r + 2h) / 8, exactly
      T r = size[0], h = 2 * size[1];
      T sphere_mass = mass * 4 * r / (4 * r + 3 * h);  // mass * sphere volume / total volume
      T cylinder_mass = mass - sphere_mass;
      inertia[0] = inertia[1] = cylinder_mass * (3 * r * r + h * h) / 12;
      inertia[2] = cylinder_mass * r * r / 2;
      T sphere_inertia = 2 * sphere_mass * r * r / 5;
      inertia[0] += sphere_inertia + sphere_mass * h * (3 * r + 2 * h) / 8;
      inertia[1] += sphere_inertia + sphere_mass * h * (3 * r + 2 * h) / 8;
      inertia[2] += sphere_inertia;
      return;
    }
    case kGeomCylinder: {  // Ixx = m (3 r^2 + h^2) / 12, Izz = m r^2 / 2
      T r = size[0], h = 2 * size[1];
      inertia[0] = inertia[1] = mass * (3 * r * r + h * h) / 12;
      inertia[2] = mass * r * r / 2;
      return;
    }
    case kGeomEllipsoid: {  // Ixx = m (b^2 + c^2) / 5
      T s00 = size[0] * size[0], s11 = size[1] * size[1], s22 = size[2] * size[2];
      inertia[0] = mass * (s11 + s22) / 5;
      inertia[1] = mass * (s00 + s22) / 5;
      inertia[2] = mass * (s00 + s11) / 5;
      return;
    }
    case kGeomBox: {  // Ixx = m (b^2 + c^2) / 3 with half-sizes (a, b, c)
      T s00 = size[0] * size[0], s11 = size[1] * size[1], s22 = size[2] * size[2];
      inertia[0] = mass * (s11 + s22) / 3;
      inertia[1] = mass * (s00 + s22) / 3;
      inertia[2] = mass * (s00 + s11) / 3;
      return;
    }
    default:
      inertia[0] = inertia[1] = inertia[2] = T(0);
      return;
  }
}

// radius of the bounding sphere centred at the geom's position; 0 (infinite) for planes
template <typename T>
PHX_HD T geom_rbound(int type, const T size[3]) {
  using std::sqrt;
  switch (type) {
    case kGeomSphere:
      return size[0];
    case kGeomCapsule:
      return size[0] + size[1];
    case kGeomCylinder:
      return sqrt(size[0] * size[0] + size[1] * size[1]);
    case kGeomEllipsoid: {
      T m = size[0] > size[1] ? size[0] : size[1];
      return m > size[2] ? m : size[2];
    }
    case kGeomBox:
      return sqrt(size[0] * size[0] + size[1] * size[1] + size[2] * size[2]);
    default:
      return T(0);
  }
}

// full tensor (xx, yy, zz, xy, xz, yz) of principal moments `diag` whose axes are rotated by
// quat: R diag R^T (mjuu_globalinertia)
template <typename T>
PHX_HD void inertia_rotate(T full[6], const T diag[3], const T quat[4]) {
  T mat[9];
  detail::quat_to_mat(mat, quat);
  T tmp[9] = {mat[0] * diag[0], mat[3] * diag[0], mat[6] * diag[0],
              mat[1] * diag[1], mat[4] * diag[1], mat[7] * diag[1],
              mat[2] * diag[2], mat[5] * diag[2], mat[8] * diag[2]};
  full[0] = mat[0] * tmp[0] + mat[1] * tmp[3] + mat[2] * tmp[6];
  full[1] = mat[3] * tmp[1] + mat[4] * tmp[4] + mat[5] * tmp[7];
  full[2] = mat[6] * tmp[2] + mat[7] * tmp[5] + mat[8] * tmp[8];
  full[3] = mat[0] * tmp[1] + mat[1] * tmp[4] + mat[2] * tmp[7];
  full[4] = mat[0] * tmp[2] + mat[1] * tmp[5] + mat[2] * tmp[8];
  full[5] = mat[3] * tmp[2] + mat[4] * tmp[5] + mat[5] * tmp[8];
}

// parallel-axis term of a point mass at offset d: m (|d|^2 I - d d^T) (mjuu_offcenter)
template <typename T>
PHX_HD void inertia_offcenter(T full[6], T mass, const T d[3]) {
  full[0] = mass * (d[1] * d[1] + d[2] * d[2]);
  full[1] = mass * (d[0] * d[0] + d[2] * d[2]);
  full[2] = mass * (d[0] * d[0] + d[1] * d[1]);
  full[3] = -mass * d[0] * d[1];
  full[4] = -mass * d[0] * d[2];
  full[5] = -mass * d[1] * d[2];
}

// Principal axes of a symmetric tensor: full = R(quat) diag(moments) R(quat)^T with the moments
// in decreasing order. This is MuJoCo's compiler algorithm (mjuu_eig3): cyclic-by-largest Jacobi
// rotations, each accumulated into quat, then a bubble sort of the moments that turns the frame by
// 90 degrees at each swap. As in MuJoCo 4, the iteration runs until the largest off-diagonal entry
// is within 8 ulp of the tensor's largest entry, and the rotation's half angle is computed without
// the cancellation of sqrt((1 - c) / 2). (Older MuJoCo stopped at an absolute 1e-12 or when the
// rotation's cosine reached 1 - 1e-12, which left residuals up to 1e-7 relative; its body_iquat
// and body_inertia then differ from these by that much.) Returns the number of iterations.
template <typename T>
PHX_HD int inertia_principal(T quat[4], T moments[3], const T full[6]) {
  using std::abs;
  using std::sqrt;
  const T mat[9] = {full[0], full[3], full[4], full[3], full[1],
                    full[5], full[4], full[5], full[2]};
  T scale = 0;
  for (int i = 0; i < 9; i++) scale = abs(mat[i]) > scale ? abs(mat[i]) : scale;
  const T tol = 8 * std::numeric_limits<T>::epsilon() * scale;
  T D[9], V[9], Vt[9], tmp[9];
  quat[0] = 1;
  quat[1] = quat[2] = quat[3] = 0;

  int iter;
  for (iter = 0; iter < 500; iter++) {
    // D = V^T mat V with V the rotation of quat
    detail::quat_to_mat(V, quat);
    for (int r = 0; r < 3; r++) {
      for (int c = 0; c < 3; c++) Vt[3 * r + c] = V[3 * c + r];
    }
    detail::mat_mul3(tmp, Vt, mat);
    detail::mat_mul3(D, tmp, V);
    moments[0] = D[0];
    moments[1] = D[4];
    moments[2] = D[8];

    // largest off-diagonal entry (rk, ck) and the axis rotk of the rotation that zeroes it
    int rk, ck, rotk;
    if (abs(D[1]) > abs(D[2]) && abs(D[1]) > abs(D[5])) {
      rk = 0, ck = 1, rotk = 2;
    } else if (abs(D[2]) > abs(D[5])) {
      rk = 0, ck = 2, rotk = 1;
    } else {
      rk = 1, ck = 2, rotk = 0;
    }
    if (abs(D[3 * rk + ck]) <= tol) break;

    // 2x2 symmetric Schur decomposition (Golub and Van Loan, Algorithm 8.4.1): t = tan(theta)
    T tau = (D[4 * ck] - D[4 * rk]) / (2 * D[3 * rk + ck]);
    T t = tau >= 0 ? T(1) / (tau + sqrt(1 + tau * tau)) : T(-1) / (-tau + sqrt(1 + tau * tau));
    T c = T(1) / sqrt(1 + t * t);

    // the rotation by theta about axis rotk as a quaternion: cos(theta/2) from c, and
    // sin(theta/2) = sin(theta) / (2 cos(theta/2)), exact for small angles
    T q[4] = {sqrt(T(0.5) + T(0.5) * c), 0, 0, 0};
    T half = T(0.5) * abs(t * c) / q[0];
    q[rotk + 1] = tau >= 0 ? -half : half;
    if (rotk == 1) q[rotk + 1] = -q[rotk + 1];
    detail::normalize(q, 4);
    detail::quat_mul(quat, quat, q);
    detail::normalize(quat, 4);
  }

  // sort the moments in decreasing order (bubble sort over pairs 0, 1, 0), rotating the frame by
  // 90 degrees about the third axis at each swap
  for (int j = 0; j < 3; j++) {
    int j1 = j % 2;
    if (moments[j1] + T(1e-12) < moments[j1 + 1]) {
      T s = moments[j1];
      moments[j1] = moments[j1 + 1];
      moments[j1 + 1] = s;
      T q[4] = {T(0.707106781186548), 0, 0, 0};
      q[(j1 + 2) % 3 + 1] = q[0];
      detail::quat_mul(quat, quat, q);
      detail::normalize(quat, 4);
    }
  }
  return iter;
}

}  // namespace phx
