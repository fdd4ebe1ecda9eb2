// Bounding radii of primitive geoms, and the principal axes of an inertia tensor (the URDF
// loader's).
//
// The formulas and the arithmetic follow MuJoCo's model compiler (src/user/user_objects.cc,
// mjCGeom::GetRBound, and src/user/user_util.cc, mjuu_eig3) so that a model loaded here matches
// MuJoCo's compiled model to rounding. Sizes use MuJoCo's meaning: sphere (r), capsule and
// cylinder (r, half-length), ellipsoid and box (three half-sizes). A symmetric tensor is stored as
// its six distinct entries (xx, yy, zz, xy, xz, yz). Quaternions are (w, x, y, z).
//
// All functions are templates on the scalar type, allocate nothing and throw nothing.
#pragma once

#include <cmath>
#include <limits>

#include "phalanx/config.h"

namespace phx {

namespace detail {

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
