// Small dense linear algebra on one environment's matrices, row-major, in place.
// Kept to a few functions so that their row loops can later be spread over the lanes of a
// warp without touching the stages.
#pragma once

#include "phalanx/arena.h"
#include "phalanx/math/scalar.h"

namespace phx {

// sum_k a[k] b[k] over n entries, as four interleaved partial sums: the additions of a single
// running sum form one chain of dependent latencies, which bounded the solves and PGS sweeps.
// The two arrays may hold different scalars (a forward value against a Lane of adjoints), and
// either may be a Strided pointer (Layout).
// (gcc 12 warns of the unrolled body's subscripts when it inlines a constant n < 4, for which
// the body never runs: the warning is silenced here alone.)
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
#endif
template <class PA, class PB>
PHX_HD PHX_INLINE auto dot_n(PA a, PB b, int n) {
  using T = decltype(a[0] * b[0]);
  T s0(0), s1(0), s2(0), s3(0);
  const int n4 = n & ~3;
  int k = 0;
  for (; k < n4; k += 4) {
    s0 += a[k] * b[k];
    s1 += a[k + 1] * b[k + 1];
    s2 += a[k + 2] * b[k + 2];
    s3 += a[k + 3] * b[k + 3];
  }
  for (; k < n; ++k) s0 += a[k] * b[k];
  return (s0 + s1) + (s2 + s3);
}
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC diagnostic pop
#endif

// A matrix read entry by entry, A(i, j), a row at a time, row(i)(j), or (square) as the sums
// of a row and a column, sym(i)(j) = A(i, j) + A(j, i): row-major storage with ncol columns,
// through a pointer P (plain, or Strided for a workspace's interleaved rows) ...
template <class T, class P = const T*>
struct DenseEntries {
  P a;
  int ncol;
  struct Row {
    P p;
    PHX_HD T operator()(int j) const { return p[j]; }
  };
  struct Sym {
    P row;
    P col;
    int ncol;
    PHX_HD T operator()(int j) const { return row[j] + col[long(j) * ncol]; }
  };
  PHX_HD T operator()(int i, int j) const { return a[long(i) * ncol + j]; }
  PHX_HD Row row(int i) const { return {a + long(i) * ncol}; }
  PHX_HD Sym sym(int i) const { return {a + long(i) * ncol, a + i, ncol}; }
};

// ... or a sum of at most K outer products, A = sum_k s_k u_k v_k^T, kept as its terms: a
// reader of few of its entries takes them from the terms (row weights s_k u_k[i] first when it
// reads along a row, and column weights s_k v_k[i] too for sym), or the whole matrix is written
// out (write, vectorised along rows). The row vectors u_k are reached through U (a plain
// pointer, or a Strided one for a workspace's interleaved rows), the column vectors v_k through
// plain pointers.
template <class T, int K, class U = const T*>
struct OuterSum {
  int n = 0;  // terms
  U u[K] = {};
  const T* v[K] = {};
  T s[K];

  PHX_HD void add(U uk, const T* vk, T sk) {
    u[n] = uk;
    v[n] = vk;
    s[n++] = sk;
  }
  PHX_HD T operator()(int i, int j) const {
    T r(0);
    for (int k = 0; k < n; ++k) r += s[k] * (u[k][i] * v[k][j]);
    return r;
  }
  struct Row {
    const OuterSum* sum;
    T w[K];  // s_k u_k[i]
    PHX_HD T operator()(int j) const {
      T r(0);
      for (int k = 0; k < sum->n; ++k) r += w[k] * sum->v[k][j];
      return r;
    }
  };
  PHX_HD Row row(int i) const {
    Row r{this, {}};
    for (int k = 0; k < n; ++k) r.w[k] = s[k] * u[k][i];
    return r;
  }
  // A(i, j) + A(j, i) = sum_k (s_k u_k[i]) v_k[j] + (s_k v_k[i]) u_k[j]
  struct Sym {
    const OuterSum* sum;
    T w[K];  // s_k u_k[i]
    T c[K];  // s_k v_k[i]
    PHX_HD T operator()(int j) const {
      T r(0);
      for (int k = 0; k < sum->n; ++k) r += w[k] * sum->v[k][j] + c[k] * sum->u[k][j];
      return r;
    }
  };
  PHX_HD Sym sym(int i) const {
    Sym r{this, {}, {}};
    for (int k = 0; k < n; ++k) {
      r.w[k] = s[k] * u[k][i];
      r.c[k] = s[k] * v[k][i];
    }
    return r;
  }
  // A (nrow x ncol) = the sum, each entry summed in a register over the terms in order (the
  // loop over the terms unrolled for their number) and stored once; A a plain pointer or a
  // Strided one
  template <class P>
  PHX_HD void write(P A, int nrow, int ncol) const {
    write_terms<0>(A, nrow, ncol);
  }

 private:
  template <int N, class P>
  PHX_HD void write_terms(P A, int nrow, int ncol) const {
    if constexpr (N < K) {
      if (n != N) return write_terms<N + 1>(A, nrow, ncol);
    }
    for (int i = 0; i < nrow; ++i) {
      const typename Restricted<P>::type a = A + long(i) * ncol;
      if constexpr (N == 0) {
        for (int j = 0; j < ncol; ++j) a[j] = T(0);
      } else {
        T w[N];
        const T* vk[N];
        for (int k = 0; k < N; ++k) {
          w[k] = s[k] * u[k][i];
          vk[k] = v[k];
        }
        for (int j = 0; j < ncol; ++j) {
          T r = w[0] * vk[0][j];
          for (int k = 1; k < N; ++k) r += w[k] * vk[k][j];
          a[j] = r;
        }
      }
    }
  }
};

// Block structure of a matrix for the factorisation and solves below: start[i] is the first
// row of row i's diagonal block (blocks of consecutive rows, no entry between two blocks), as
// the mass matrix's dof trees (dof_treeadr); null: one block. The block-aware loops skip only
// products with exact zeros, so one block gives the dense arithmetic bit for bit.
PHX_HD PHX_INLINE int block_start(const int* start, int i) { return start ? start[i] : 0; }

// In-place Cholesky factorisation A = L L^T of a symmetric positive definite n x n matrix;
// L overwrites the strictly lower triangle and the diagonal holds 1 / L_jj, so that the solves
// multiply instead of divide (the upper triangle is left untouched, and so are the zero entries
// between blocks). Returns false when a pivot is not positive. A is a pointer to T or a Strided
// one, as are the factor and the right-hand sides of the solves below.
template <class P>
PHX_HD bool cholesky(P A, int n, const int* start = nullptr) {
  using T = std::remove_cvref_t<decltype(A[0])>;
  for (int j = 0; j < n; ++j) {
    const int s = block_start(start, j);
    T d = A[j * n + j] - dot_n(A + j * n + s, A + j * n + s, j - s);
    if (!(d > T(0))) return false;
    T inv = T(1) / sqrt(d);
    A[j * n + j] = inv;
    for (int i = j + 1; i < n && block_start(start, i) == s; ++i)
      A[i * n + j] = (A[i * n + j] - dot_n(A + i * n + s, A + j * n + s, j - s)) * inv;
  }
  return true;
}

// Solve L y = b in place (forward substitution) with the factor from cholesky(). The solves
// take the factor in its own scalar S (a Lane b reads it in place).
template <class LP, class BP>
PHX_HD void cholesky_solve_lower(LP L, int n, BP b, const int* start = nullptr) {
  for (int i = 0; i < n; ++i) {
    const int s = block_start(start, i);
    const LP row = L + i * n;
    b[i] = (b[i] - dot_n(row + s, b + s, i - s)) * row[i];
  }
}

// Forward substitution for G right-hand sides at once (rows b + g n), over dofs [lo, hi) only:
// the G independent sums share each row of L.
template <int G, class T, class P>
PHX_HD PHX_INLINE void cholesky_solve_lower_group(const T* PHX_RESTRICT L, int n, P rows, int lo,
                                                  int hi, const int* start) {
  const typename Restricted<P>::type b = rows;
  for (int i = lo; i < hi; ++i) {
    const T* PHX_RESTRICT row = L + i * n;
    T s[G];
    for (int g = 0; g < G; ++g) s[g] = b[long(g) * n + i];
    for (int k = block_start(start, i); k < i; ++k) {
      const T l = row[k];
      for (int g = 0; g < G; ++g) s[g] -= l * b[long(g) * n + k];
    }
    for (int g = 0; g < G; ++g) b[long(g) * n + i] = s[g] * row[i];
  }
}

// Solve L y_r = b_r in place (forward substitution) for the nrow right-hand sides stored as the
// rows of B (stride n), L's blocks starting at `start`. With `ranges` (4 per row: two dof ranges
// [r0, r1) and [r2, r3), each a union of whole blocks, outside which b_r is zero), row r is
// solved over its ranges alone: its solution is zero on the other blocks, which it leaves
// untouched. Up to four consecutive rows with the same ranges (a contact's rows) share each row
// of L and run independent sums.
template <class T, class P, class R = const int*>
PHX_HD void cholesky_solve_lower_rows(const T* L, int n, P B, int nrow, const int* start = nullptr,
                                      R ranges = nullptr) {
  // row q's ranges, the whole of L without `ranges`
  auto range = [&](int q, int h) { return ranges ? ranges[4 * q + h] : h == 0 ? 0 : n; };
  for (int r = 0; r < nrow;) {
    const int span[4] = {range(r, 0), range(r, 1), range(r, 2), range(r, 3)};
    int g = 1;
    for (; g < 4 && r + g < nrow; ++g) {
      if (range(r + g, 0) != span[0] || range(r + g, 1) != span[1] || range(r + g, 2) != span[2] ||
          range(r + g, 3) != span[3])
        break;
    }
    const P b = B + long(r) * n;
    for (int h = 0; h < 4; h += 2) {
      if (g == 4)
        cholesky_solve_lower_group<4>(L, n, b, span[h], span[h + 1], start);
      else if (g == 3)
        cholesky_solve_lower_group<3>(L, n, b, span[h], span[h + 1], start);
      else if (g == 2)
        cholesky_solve_lower_group<2>(L, n, b, span[h], span[h + 1], start);
      else
        cholesky_solve_lower_group<1>(L, n, b, span[h], span[h + 1], start);
    }
    r += g;
  }
}

// Solve L^T x = y in place (back substitution) with the factor from cholesky(): by columns of
// L^T, which are rows of L, so that the inner loop runs along memory.
template <class LP, class BP>
PHX_HD void cholesky_solve_upper(LP L, int n, BP b, const int* start = nullptr) {
  using T = std::remove_cvref_t<decltype(b[0])>;
  for (int i = n - 1; i >= 0; --i) {
    const typename Restricted<LP>::type row = L + i * n;
    const T x = b[i] * row[i];
    b[i] = x;
    const typename Restricted<BP>::type out = b;
    for (int k = block_start(start, i); k < i; ++k) out[k] -= row[k] * x;
  }
}

// cholesky_solve_upper for G right-hand sides at once (b[0..G)): each takes the same operations
// as alone, so the results are the same bit for bit, and the G back substitutions, independent,
// overlap where one alone waits on its previous row
template <int G, class S, class T>
PHX_HD void cholesky_solve_upper_group(const S* L, int n, T* const* b, const int* start = nullptr) {
  for (int i = n - 1; i >= 0; --i) {
    const S* PHX_RESTRICT row = L + i * n;
    const int s = block_start(start, i);
    for (int g = 0; g < G; ++g) {
      T* PHX_RESTRICT out = b[g];
      const T x = out[i] * row[i];
      out[i] = x;
      for (int k = s; k < i; ++k) out[k] -= row[k] * x;
    }
  }
}

// Solve L L^T x = b in place (x overwrites b) with the factor from cholesky().
template <class LP, class BP>
PHX_HD void cholesky_solve(LP L, int n, BP b, const int* start = nullptr) {
  cholesky_solve_lower(L, n, b, start);
  cholesky_solve_upper(L, n, b, start);
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

// Householder reflector H = I - tau v v^T with v[0] = 1 that maps x (len entries, stride apart)
// to beta e_0 (LAPACK's dlarfg): beta overwrites x[0], v[1..] overwrite x[1..]. Returns tau,
// zero when x[1..] is already zero (H = I). x is a pointer to T or a Strided one, as are the
// arrays of the routines below.
template <class T, class P>
PHX_HD T householder(P x, int len, int stride) {
  T xnorm2(0);
  for (int i = 1; i < len; ++i) xnorm2 += x[i * stride] * x[i * stride];
  if (!(xnorm2 > T(0))) return T(0);
  T alpha = x[0];
  T norm = sqrt(alpha * alpha + xnorm2);
  T beta = alpha > T(0) ? -norm : norm;
  T scale = T(1) / (alpha - beta);
  for (int i = 1; i < len; ++i) x[i * stride] *= scale;
  x[0] = beta;
  return (beta - alpha) / beta;
}

// y <- H y for the reflector (v, tau) of householder(): v[0] = 1 is implied, v[1..] are read
// from v (stride vstride), y has len entries stride ystride.
template <class T, class V, class Y>
PHX_HD void apply_householder(V v, int vstride, T tau, Y y, int len, int ystride) {
  T w = y[0];
  for (int i = 1; i < len; ++i) w += v[i * vstride] * y[i * ystride];
  w *= tau;
  y[0] -= w;
  for (int i = 1; i < len; ++i) y[i * ystride] -= w * v[i * vstride];
}

// X <- H X for the reflector (v, tau) of householder() on the len rows of X (row-major, ncols
// columns): every column at once, along the rows; w is ncols scalars of scratch
template <class T, class V, class X, class W>
PHX_HD void apply_householder_rows(V v, int vstride, T tau, X x, int len, int ncols, W w_) {
  const typename Restricted<X>::type rows = x;
  const typename Restricted<W>::type w = w_;
  for (int c = 0; c < ncols; ++c) w[c] = rows[c];
  for (int i = 1; i < len; ++i) {
    const T vi = v[i * vstride];
    const typename Restricted<X>::type row = rows + i * ncols;
    for (int c = 0; c < ncols; ++c) w[c] += vi * row[c];
  }
  for (int c = 0; c < ncols; ++c) {
    w[c] *= tau;
    rows[c] -= w[c];
  }
  for (int i = 1; i < len; ++i) {
    const T vi = v[i * vstride];
    const typename Restricted<X>::type row = rows + i * ncols;
    for (int c = 0; c < ncols; ++c) row[c] -= vi * w[c];
  }
}

// Complete orthogonal decomposition of a square n x n matrix K, for minimum-norm least-squares
// solves of rank-deficient systems (LAPACK's xGELSY; Golub & Van Loan, Matrix Computations,
// 4th ed., section 5.5.2):
//   K P = Q [R1; 0]        Householder QR with column pivoting, stopped at the numerical rank r
//                          (the first step whose largest remaining column norm is at most
//                          rank_tol times |R_00|); R1 is r x n
//   R1^T = W [U; 0]        Householder QR of R1^T (n x r), U r x r upper triangular
// so K = Q [U^T 0; 0 0] W^T P^T and K^+ = P W [U^-T 0; 0 0] Q^T.
// Its arrays are laid out by Layout (Arena::take_rows); the matrices and vectors the routines
// take are pointers of any kind.
template <class T, class Layout = Contiguous>
struct Cod {
  using Reals = RowsPtr<Layout, T>;
  int n = 0;     // matrix size
  int rank = 0;  // numerical rank r
  Reals qr;      // n x n: R1 on and above the diagonal (rows < r), Householder vectors of Q below
  Reals w;       // n x n, first r columns used: U on and above the diagonal, vectors of W below
  Reals tau_q;   // n: Householder coefficients of Q
  Reals tau_w;   // n: Householder coefficients of W
  Reals work;    // n: permutation buffer
  RowsPtr<Layout, int> perm;  // n: column k of K P is column perm[k] of K
};

// a Cod of size n over storage from arena (a counting Arena measures it)
template <class T, class Layout>
PHX_HD Cod<T, Layout> cod_carve(int n, Arena<T, Layout>& arena) {
  Cod<T, Layout> c;
  c.n = n;
  c.qr = arena.template take_rows<T>(long(n) * n);
  c.w = arena.template take_rows<T>(long(n) * n);
  c.tau_q = arena.template take_rows<T>(n);
  c.tau_w = arena.template take_rows<T>(n);
  c.work = arena.template take_rows<T>(n);
  c.perm = arena.template take_rows<int>(n);
  return c;
}

// Factor K (n x n row-major, read only) into c; returns the numerical rank.
template <class T, class Layout, class K>
PHX_HD int cod_factor(Cod<T, Layout>& c, K k_in, T rank_tol) {
  const int n = c.n;
  const typename Cod<T, Layout>::Reals qr = c.qr;
  for (int i = 0; i < n * n; ++i) qr[i] = k_in[i];
  for (int j = 0; j < n; ++j) c.perm[j] = j;
  // pivoted qr: bring the largest remaining column forward, reflect it onto the diagonal
  c.rank = 0;
  T r00(0);
  for (int k = 0; k < n; ++k) {
    int jmax = k;
    T cmax(-1);
    for (int j = k; j < n; ++j) {
      T s(0);
      for (int i = k; i < n; ++i) s += qr[i * n + j] * qr[i * n + j];
      if (s > cmax) {
        cmax = s;
        jmax = j;
      }
    }
    if (!(cmax > T(0))) break;
    T cnorm = sqrt(cmax);
    if (k == 0) {
      r00 = cnorm;
    } else if (cnorm <= rank_tol * r00) {
      break;
    }
    if (jmax != k) {
      for (int i = 0; i < n; ++i) {
        T t = qr[i * n + k];
        qr[i * n + k] = qr[i * n + jmax];
        qr[i * n + jmax] = t;
      }
      int t = c.perm[k];
      c.perm[k] = c.perm[jmax];
      c.perm[jmax] = t;
    }
    const auto col = qr + k * n + k;
    c.tau_q[k] = householder<T>(col, n - k, n);
    for (int j = k + 1; j < n; ++j)
      apply_householder(col, n, T(c.tau_q[k]), col + (j - k), n - k, n);
    c.rank = k + 1;
  }
  // qr of R1^T (n x r) into the first r columns of w
  const int r = c.rank;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < r; ++j) c.w[i * n + j] = i >= j ? T(qr[j * n + i]) : T(0);
  for (int k = 0; k < r; ++k) {
    const auto col = c.w + k * n + k;
    c.tau_w[k] = householder<T>(col, n - k, n);
    for (int j = k + 1; j < r; ++j)
      apply_householder(col, n, T(c.tau_w[k]), col + (j - k), n - k, n);
  }
  return r;
}

// x <- P W x: from the coordinates of W's columns to K's columns
template <class T, class Layout, class X>
PHX_HD void cod_apply_pw(const Cod<T, Layout>& c, X x) {
  const int n = c.n;
  for (int k = c.rank - 1; k >= 0; --k)
    apply_householder(c.w + k * n + k, n, T(c.tau_w[k]), x + k, n - k, 1);
  for (int i = 0; i < n; ++i) c.work[i] = x[i];
  for (int i = 0; i < n; ++i) x[c.perm[i]] = c.work[i];
}

// V (n x (n - rank), row-major), an orthonormal basis of K's null space: K^+ K =
// P W [I_r 0; 0 0] W^T P^T, so I - K^+ K = V V^T with V = P W [0; I]; x is n scalars of scratch
template <class T, class Layout, class P, class X>
PHX_HD void cod_null_basis(const Cod<T, Layout>& c, P V, X x) {
  // W's reflectors on the rows of [0; I] in V, every column at once, then P on its rows
  const int n = c.n, r = c.rank, k = n - r;
  if (k == 0) return;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < k; ++j) V[i * k + j] = T(i == r + j);
  for (int q = r - 1; q >= 0; --q)
    apply_householder_rows(c.w + q * n + q, n, T(c.tau_w[q]), V + q * k, n - q, k, x);
  for (int j = 0; j < k; ++j) {
    for (int i = 0; i < n; ++i) x[i] = V[i * k + j];
    for (int i = 0; i < n; ++i) V[c.perm[i] * k + j] = x[i];
  }
}

// x <- K^+ x, the minimum-norm least-squares solution of K y = x:
// y = P W [U^-T (Q^T x)_r; 0]
template <class T, class Layout, class X>
PHX_HD void cod_solve(const Cod<T, Layout>& c, X x) {
  const int n = c.n, r = c.rank;
  // Q^T x (only the first r reflectors touch the first r entries)
  for (int k = 0; k < r; ++k)
    apply_householder(c.qr + k * n + k, n, T(c.tau_q[k]), x + k, n - k, 1);
  // U^T u = (Q^T x)_r, forward substitution (U^T is lower triangular)
  for (int i = 0; i < r; ++i) {
    T s = x[i];
    for (int j = 0; j < i; ++j) s -= c.w[j * n + i] * x[j];
    x[i] = s / c.w[i * n + i];
  }
  for (int i = r; i < n; ++i) x[i] = T(0);
  cod_apply_pw(c, x);  // W [u; 0], then undo the column permutation
}

// X <- K^+T (n x n, row-major): cod_solve_transpose's steps on the columns of the identity, all
// at once (each reflector and the back substitution run along rows); w is n scalars of scratch
template <class T, class Layout, class P, class W>
PHX_HD void cod_pinv_transpose(const Cod<T, Layout>& c, P x_out, W w) {
  const int n = c.n, r = c.rank;
  const typename Restricted<P>::type X = x_out;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) X[i * n + j] = T(c.perm[i] == j);  // P^T
  for (int k = 0; k < r; ++k)
    apply_householder_rows(c.w + k * n + k, n, T(c.tau_w[k]), X + k * n, n - k, n, w);
  // U rows: X_i = (X_i - sum_{i < j < r} U_ij X_j) / U_ii, last row first
  for (int i = r - 1; i >= 0; --i) {
    const typename Restricted<P>::type xi = X + i * n;
    for (int j = i + 1; j < r; ++j) {
      const T u = c.w[i * n + j];
      const typename Restricted<P>::type xj = X + j * n;
      for (int k = 0; k < n; ++k) xi[k] -= u * xj[k];
    }
    const T d = c.w[i * n + i];
    for (int k = 0; k < n; ++k) xi[k] /= d;
  }
  for (int i = r * n; i < n * n; ++i) X[i] = T(0);
  for (int k = r - 1; k >= 0; --k)
    apply_householder_rows(c.qr + k * n + k, n, T(c.tau_q[k]), X + k * n, n - k, n, w);
}

// x <- K^+T x = (K^T)^+ x, the minimum-norm least-squares solution of K^T y = x:
// y = Q [U^-1 (W^T P^T x)_r; 0]
template <class T, class Layout, class X>
PHX_HD void cod_solve_transpose(const Cod<T, Layout>& c, X x) {
  const int n = c.n, r = c.rank;
  for (int i = 0; i < n; ++i) c.work[i] = x[i];
  for (int i = 0; i < n; ++i) x[i] = c.work[c.perm[i]];
  for (int k = 0; k < r; ++k) apply_householder(c.w + k * n + k, n, T(c.tau_w[k]), x + k, n - k, 1);
  // U u = (W^T P^T x)_r, back substitution
  for (int i = r - 1; i >= 0; --i) {
    T s = x[i];
    for (int j = i + 1; j < r; ++j) s -= c.w[i * n + j] * x[j];
    x[i] = s / c.w[i * n + i];
  }
  for (int i = r; i < n; ++i) x[i] = T(0);
  for (int k = r - 1; k >= 0; --k)
    apply_householder(c.qr + k * n + k, n, T(c.tau_q[k]), x + k, n - k, 1);
}

// In-place LU factorisation P A = L U of a small n x n matrix with partial pivoting (row i of
// P A is row piv[i] of A): L's strictly lower triangle (unit diagonal) and U overwrite A.
// Returns false for a zero pivot.
template <class T>
PHX_HD bool lu_factor(T* A, int n, int* piv) {
  for (int i = 0; i < n; ++i) piv[i] = i;
  for (int j = 0; j < n; ++j) {
    int p = j;
    for (int i = j + 1; i < n; ++i)
      if (abs(A[i * n + j]) > abs(A[p * n + j])) p = i;
    if (A[p * n + j] == T(0)) return false;
    if (p != j) {
      for (int k = 0; k < n; ++k) {
        T t = A[j * n + k];
        A[j * n + k] = A[p * n + k];
        A[p * n + k] = t;
      }
      int t = piv[j];
      piv[j] = piv[p];
      piv[p] = t;
    }
    for (int i = j + 1; i < n; ++i) {
      T l = A[i * n + j] / A[j * n + j];
      A[i * n + j] = l;
      for (int k = j + 1; k < n; ++k) A[i * n + k] -= l * A[j * n + k];
    }
  }
  return true;
}

// Solve A x = b (transpose: A^T x = b) in place with the factor from lu_factor; y is scratch
// of n scalars.
template <class T>
PHX_HD void lu_solve(const T* LU, int n, const int* piv, T* b, T* y, bool transpose = false) {
  if (!transpose) {
    // L U x = P b
    for (int i = 0; i < n; ++i) {
      T s = b[piv[i]];
      for (int k = 0; k < i; ++k) s -= LU[i * n + k] * y[k];
      y[i] = s;
    }
    for (int i = n - 1; i >= 0; --i) {
      T s = y[i];
      for (int k = i + 1; k < n; ++k) s -= LU[i * n + k] * b[k];
      b[i] = s / LU[i * n + i];
    }
    return;
  }
  // U^T L^T P x = b: U^T z = b, L^T w = z, x = P^T w
  for (int i = 0; i < n; ++i) {
    T s = b[i];
    for (int k = 0; k < i; ++k) s -= LU[k * n + i] * y[k];
    y[i] = s / LU[i * n + i];
  }
  for (int i = n - 1; i >= 0; --i)
    for (int k = 0; k < i; ++k) y[k] -= LU[i * n + k] * y[i];
  for (int i = 0; i < n; ++i) b[piv[i]] = y[i];
}

}  // namespace phx
