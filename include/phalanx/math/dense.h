// Small dense linear algebra on one environment's matrices, row-major, in place.
// Kept to a few functions so that their row loops can later be spread over the lanes of a
// warp without touching the stages (ARCHITECTURE.md section 6).
#pragma once

#include "phalanx/math/scalar.h"

namespace phx {

// In-place Cholesky factorisation A = L L^T of a symmetric positive definite n x n matrix;
// L overwrites the lower triangle (the upper triangle is left untouched). Returns false when
// a pivot is not positive.
template <class T>
PHX_HD bool cholesky(T* A, int n) {
  for (int j = 0; j < n; ++j) {
    T d = A[j * n + j];
    for (int k = 0; k < j; ++k) d -= A[j * n + k] * A[j * n + k];
    if (!(d > T(0))) return false;
    T ljj = sqrt(d);
    A[j * n + j] = ljj;
    T inv = T(1) / ljj;
    for (int i = j + 1; i < n; ++i) {
      T s = A[i * n + j];
      for (int k = 0; k < j; ++k) s -= A[i * n + k] * A[j * n + k];
      A[i * n + j] = s * inv;
    }
  }
  return true;
}

// Solve L L^T x = b in place (x overwrites b) with the factor from cholesky().
template <class T>
PHX_HD void cholesky_solve(const T* L, int n, T* b) {
  for (int i = 0; i < n; ++i) {
    T s = b[i];
    for (int k = 0; k < i; ++k) s -= L[i * n + k] * b[k];
    b[i] = s / L[i * n + i];
  }
  for (int i = n - 1; i >= 0; --i) {
    T s = b[i];
    for (int k = i + 1; k < n; ++k) s -= L[k * n + i] * b[k];
    b[i] = s / L[i * n + i];
  }
}

// Adjoint of x = A^-1 b for symmetric A given its factor (implicit differentiation, as in
// Giles, "Collected matrix derivative results", 2008): y = A^-1 adj_x, adj_b += y,
// adj_A -= y x^T. y is scratch of n scalars; adj_A may be null when A carries no gradient.
template <class T>
PHX_HD void adj_cholesky_solve(const T* L, int n, const T* x, const T* adj_x, T* y, T* adj_b,
                               T* adj_A) {
  for (int i = 0; i < n; ++i) y[i] = adj_x[i];
  cholesky_solve(L, n, y);
  for (int i = 0; i < n; ++i) adj_b[i] += y[i];
  if (adj_A) {
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) adj_A[i * n + j] -= y[i] * x[j];
  }
}

}  // namespace phx
