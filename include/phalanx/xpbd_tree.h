// The joints of a tree of XPBD bodies projected all at once: one Newton step on the
// linearised joint constraints per iteration, in place of a Gauss-Seidel pass over them.
//
// Why. A Gauss-Seidel pass (xpbd_step.h, xpbd_project_joints) corrects one joint at a time;
// along a chain of links whose lever arms and inertias differ, each correction disturbs the
// neighbouring joints, and the passes converge linearly and slowly (on a 7-link arm about 0.96
// per pass: 5e-5 m after 30 passes of a 10 ms step). Solved together, the linearised
// constraints leave only second-order errors, so a few iterations reach round-off.
//
// What. Each body b >= 1 has a displacement d_b = (dx_b, dphi_b) (world: its centre of mass and
// a rotation vector) and its joint to the parent p a few rows i with errors c_i and
// linearisation c_i + g1_i . d_p + g2_i . d_b (the rows' constructors below). XPBD's projection
// with compliance alpha~ = alpha / h^2 is
//   (G W G^T + alpha~) dlambda = -c - alpha~ lambda,   d = W G^T dlambda,
// W the bodies' inverse masses (1/m and the world inverse inertia). As Baraff ("Linear-Time
// Dynamics using Lagrange Multipliers", SIGGRAPH 1996) does for forces, the system is written
// over bodies and joints together,
//   [ M   G^T ] [ d  ]   [      0          ]
//   [ G  -at  ] [ mu ] = [ -c - at lambda  ],   mu = -dlambda,
// whose graph (body - joint - parent body) is the kinematic tree, and is eliminated from the
// leaves to the root and solved back in time linear in the number of bodies. A body's block is
// kept as its inverse, (1 + M^-1 K)^-1 M^-1 (K what its child joints add), so that a body
// without rotational inertia about an axis (an inverse moment of 0) needs no special case.
// A static body (the world, or inverse mass and inertia zero) is not a node: the joints of its
// children see only the children and are roots; a static body's own joint (to a moving parent)
// has no block to eliminate, and the solve reports it singular (the caller falls back to
// Gauss-Seidel).
#pragma once

#include <initializer_list>

#include "phalanx/math/dense.h"
#include "phalanx/xpbd.h"

namespace phx {

// The rows of one joint, at most six: errors c and their slopes g1 (on body 1, the parent) and
// g2 (on body 2, the child), each (linear, angular) in the world, and each row's own compliance
// alpha~ (added to the solve's; 0 for a rigid row).
template <class T>
struct XpbdRows {
  int n = 0;
  T c[6];
  T g1[6][6];
  T g2[6][6];
  T alpha[6];

  PHX_HD void add(T ci, const Vec3<T>& lin1, const Vec3<T>& ang1, const Vec3<T>& lin2,
                  const Vec3<T>& ang2, T compliance = T(0)) {
    c[n] = ci;
    alpha[n] = compliance;
    for (int k = 0; k < 3; ++k) {
      g1[n][k] = lin1[k];
      g1[n][3 + k] = ang1[k];
      g2[n][k] = lin2[k];
      g2[n][3 + k] = ang2[k];
    }
    ++n;
  }
};

// Attachment, three rows: the anchors r1, r2 (local, principal frames) coincide,
// c = (x2 + R2 r2) - (x1 + R1 r1); d c = dx2 + dphi2 x r2w - dx1 - dphi1 x r1w.
template <class T>
PHX_HD void xpbd_rows_attach(XpbdRows<T>& rows, const XpbdBody<T>& b1, const XpbdBody<T>& b2,
                             const Vec3<T>& r1, const Vec3<T>& r2) {
  Vec3<T> r1w = xpbd_impl::rotate(b1.q, r1), r2w = xpbd_impl::rotate(b2.q, r2);
  Vec3<T> c = (b2.x + r2w) - (b1.x + r1w);
  for (int k = 0; k < 3; ++k) {
    Vec3<T> e;
    e[k] = T(1);
    rows.add(c[k], -e, -cross(r1w, e), e, cross(r2w, e));
  }
}

// Attachment across an axis, two rows (a slide): t . c = 0 for the two unit vectors t across the
// axis a1 of body 1 (t1 = R1 n1, t2 = R1 a1 x t1), which turn with body 1:
// d (t . c) = t . dc + dphi1 . (t x c).
template <class T>
PHX_HD void xpbd_rows_attach_across(XpbdRows<T>& rows, const XpbdBody<T>& b1, const XpbdBody<T>& b2,
                                    const Vec3<T>& r1, const Vec3<T>& r2, const Vec3<T>& a1,
                                    const Vec3<T>& n1) {
  Vec3<T> r1w = xpbd_impl::rotate(b1.q, r1), r2w = xpbd_impl::rotate(b2.q, r2);
  Vec3<T> c = (b2.x + r2w) - (b1.x + r1w);
  Vec3<T> t1 = xpbd_impl::rotate(b1.q, n1);
  Vec3<T> t2 = cross(xpbd_impl::rotate(b1.q, a1), t1);
  for (const Vec3<T>& t : {t1, t2})
    rows.add(dot(t, c), -t, cross(t, c) - cross(r1w, t), t, cross(r2w, t));
}

// Axis alignment, two rows (a hinge): the axes a = R1 a1 and b = R2 a2 agree across a,
// t . e = 0 for e = xpbd_axis_alignment(a, b) (a x b near alignment) and t = t1, t2 across a as
// in xpbd_rows_attach_across; the slopes are those of t . (a x b):
// d = dphi1 . (a x (b x t) + t x e) + dphi2 . (b x (t x a)).
template <class T>
PHX_HD void xpbd_rows_align(XpbdRows<T>& rows, const XpbdBody<T>& b1, const XpbdBody<T>& b2,
                            const Vec3<T>& a1, const Vec3<T>& a2, const Vec3<T>& n1) {
  Vec3<T> a = xpbd_impl::rotate(b1.q, a1), b = xpbd_impl::rotate(b2.q, a2);
  Vec3<T> e = xpbd_axis_alignment(a, b);
  Vec3<T> t1 = xpbd_impl::rotate(b1.q, n1);
  Vec3<T> t2 = cross(a, t1);
  for (const Vec3<T>& t : {t1, t2})
    rows.add(dot(t, e), Vec3<T>{}, cross(a, cross(b, t)) + cross(t, e), Vec3<T>{},
             cross(b, cross(t, a)));
}

// Orientation, three rows (a weld, a slide): the frames q1 f1 and q2 f2 agree,
// e = xpbd_orientation_difference(q1 f1, q2 f2), d e = dphi2 - dphi1 to first order in e.
template <class T>
PHX_HD void xpbd_rows_orientation(XpbdRows<T>& rows, const XpbdBody<T>& b1, const XpbdBody<T>& b2,
                                  const Quat<T>& f1, const Quat<T>& f2) {
  Vec3<T> e = xpbd_orientation_difference(b1.q * f1, b2.q * f2);
  for (int k = 0; k < 3; ++k) {
    Vec3<T> u;
    u[k] = T(1);
    rows.add(e[k], Vec3<T>{}, -u, Vec3<T>{}, u);
  }
}

// One body of the tree and the joint to its parent: the rows, the eliminated blocks and the
// right-hand sides, then the solution (d, mu)
template <class T>
struct XpbdTreeNode {
  XpbdRows<T> rows;
  T W[36];  // the body's block, inverted: (M + K)^-1
  T S[36];  // the joint's block, negated and factored: alpha~ + G2 W G2^T (Cholesky)
  T K[36];  // what the child joints add to the body's block, sum of G1^T S^-1 G1
  T rb[6], rj[6];
  T d[6], mu[6];
  T fd[6], fdl[6], au[6];  // the adjoint's: the forward's d and dlambda, W0 adj_d
};

namespace xpbd_impl {

template <class T>
PHX_HD PHX_INLINE bool is_static(const XpbdBody<T>& b) {
  return b.inv_mass == T(0) && b.inv_inertia.x == T(0) && b.inv_inertia.y == T(0) &&
         b.inv_inertia.z == T(0);
}

// y = M^-1 x for a 6-vector (linear, angular)
template <class T>
PHX_HD PHX_INLINE void inverse_mass(const XpbdBody<T>& b, const T* x, T* y) {
  for (int k = 0; k < 3; ++k) y[k] = b.inv_mass * x[k];
  xpbd_inv_inertia_world(b.q, b.inv_inertia, Vec3<T>{x[3], x[4], x[5]}).store(y + 3);
}

// y = G^T x (G n x 6 rows, x of n) and y = G x
template <class T>
PHX_HD PHX_INLINE void rows_transpose(const T (*g)[6], int n, const T* x, T* y) {
  for (int k = 0; k < 6; ++k) {
    y[k] = T(0);
    for (int i = 0; i < n; ++i) y[k] += g[i][k] * x[i];
  }
}
template <class T>
PHX_HD PHX_INLINE void rows_times(const T (*g)[6], int n, const T* x, T* y) {
  for (int i = 0; i < n; ++i) y[i] = dot_n(g[i], x, 6);
}

// y = A x for a 6x6 row-major A
template <class T>
PHX_HD PHX_INLINE void mul6(const T* A, const T* x, T* y) {
  for (int i = 0; i < 6; ++i) y[i] = dot_n(A + 6 * i, x, 6);
}

}  // namespace xpbd_impl

// The factorisation over the bodies 1..nbody-1 (parent[b] < b; body 0 the world) of the
// system of the rows in node[b].rows, at = alpha~ for every row: each body's W and each joint's
// S. Returns false when a block is singular.
template <class T>
PHX_HD bool xpbd_tree_factor(int nbody, const int* parent, const XpbdBody<T>* body,
                             XpbdTreeNode<T>* node, T at) {
  using namespace xpbd_impl;
  for (int b = 1; b < nbody; ++b)
    for (int k = 0; k < 36; ++k) node[b].K[k] = T(0);
  // leaves to root: the body's block, then its joint's
  for (int b = nbody - 1; b >= 1; --b) {
    XpbdTreeNode<T>& N = node[b];
    const int n = N.rows.n;
    const int p = parent[b];
    const bool moving = !is_static(body[b]);
    if (moving) {
      // W = (1 + M^-1 K)^-1 M^-1
      T A[36], Minv[36], y[6];
      int piv[6];
      for (int j = 0; j < 6; ++j) {
        T e[6] = {}, col[6];
        e[j] = T(1);
        inverse_mass(body[b], e, col);
        for (int i = 0; i < 6; ++i) Minv[6 * i + j] = col[i];
      }
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 6; ++j) {
          T s = i == j ? T(1) : T(0);
          for (int k = 0; k < 6; ++k) s += Minv[6 * i + k] * N.K[6 * k + j];
          A[6 * i + j] = s;
        }
      if (!lu_factor(A, 6, piv)) return false;
      for (int j = 0; j < 6; ++j) {
        T col[6];
        for (int i = 0; i < 6; ++i) col[i] = Minv[6 * i + j];
        lu_solve(A, 6, piv, col, y);
        for (int i = 0; i < 6; ++i) N.W[6 * i + j] = col[i];
      }
    }
    if (n == 0) continue;
    // S = at + G2 W G2^T (the body's share only when it moves), factored
    for (int i = 0; i < n; ++i) {
      T wg[6];
      if (moving) mul6(N.W, N.rows.g2[i], wg);
      for (int j = 0; j <= i; ++j) {
        T s = moving ? dot_n(N.rows.g2[j], wg, 6) : T(0);
        if (i == j) s += at + N.rows.alpha[i];
        N.S[n * i + j] = N.S[n * j + i] = s;
      }
    }
    if (!cholesky(N.S, n)) return false;
    // the parent's block gains G1^T S^-1 G1
    if (p > 0 && !is_static(body[p])) {
      T X[6][6];  // S^-1 G1, column by column
      for (int k = 0; k < 6; ++k) {
        T col[6];
        for (int i = 0; i < n; ++i) col[i] = N.rows.g1[i][k];
        cholesky_solve(N.S, n, col);
        for (int i = 0; i < n; ++i) X[i][k] = col[i];
      }
      T* Kp = node[p].K;
      for (int r = 0; r < 6; ++r)
        for (int k = 0; k < 6; ++k) {
          T s = T(0);
          for (int i = 0; i < n; ++i) s += N.rows.g1[i][r] * X[i][k];
          Kp[6 * r + k] += s;
        }
    }
  }
  return true;
}

// The solve with the factor of xpbd_tree_factor for the right-hand sides in node[b].rb (the
// bodies', 6) and node[b].rj (the joints', rows.n), overwritten: the solution d (bodies) and mu
// (joints) of [M G^T; G -at] [d; mu] = [rb; rj].
template <class T>
PHX_HD void xpbd_tree_substitute(int nbody, const int* parent, const XpbdBody<T>* body,
                                 XpbdTreeNode<T>* node) {
  using namespace xpbd_impl;
  // from the leaves: rj -= G2 W rb, then rb_p -= G1^T D^-1 rj = + G1^T S^-1 rj
  for (int b = nbody - 1; b >= 1; --b) {
    XpbdTreeNode<T>& N = node[b];
    const int n = N.rows.n, p = parent[b];
    if (n == 0) continue;
    if (!is_static(body[b])) {
      T wr[6], gwr[6];
      mul6(N.W, N.rb, wr);
      rows_times(N.rows.g2, n, wr, gwr);
      for (int i = 0; i < n; ++i) N.rj[i] -= gwr[i];
    }
    if (p > 0 && !is_static(body[p])) {
      T y[6], g[6];
      for (int i = 0; i < n; ++i) y[i] = N.rj[i];
      cholesky_solve(N.S, n, y);
      rows_transpose(N.rows.g1, n, y, g);
      for (int k = 0; k < 6; ++k) node[p].rb[k] += g[k];
    }
  }
  // from the root: mu = -S^-1 (rj - G1 d_p), d = W (rb - G2^T mu)
  for (int b = 1; b < nbody; ++b) {
    XpbdTreeNode<T>& N = node[b];
    const int n = N.rows.n, p = parent[b];
    if (n > 0) {
      T r[6], gd[6];
      for (int i = 0; i < n; ++i) r[i] = N.rj[i];
      if (p > 0 && !is_static(body[p])) {
        rows_times(N.rows.g1, n, node[p].d, gd);
        for (int i = 0; i < n; ++i) r[i] -= gd[i];
      }
      cholesky_solve(N.S, n, r);
      for (int i = 0; i < n; ++i) N.mu[i] = -r[i];
    }
    if (is_static(body[b])) {
      for (int k = 0; k < 6; ++k) N.d[k] = T(0);
      continue;
    }
    T r[6], g[6];
    rows_transpose(N.rows.g2, n, N.mu, g);
    for (int k = 0; k < 6; ++k) r[k] = N.rb[k] - g[k];
    mul6(N.W, r, N.d);
  }
}

// XPBD's projection of all the rows at once: factor, then solve for rb = 0 and
// rj = -c - at lambda (lambda: the rows' multipliers, lambda_stride per body): each node's
// displacement d and multiplier change dlambda = -mu. Returns false when a block is singular
// (then nothing is written but scratch).
template <class T>
PHX_HD bool xpbd_tree_solve(int nbody, const int* parent, const XpbdBody<T>* body,
                            XpbdTreeNode<T>* node, T at, const T* lambda, int lambda_stride) {
  if (!xpbd_tree_factor(nbody, parent, body, node, at)) return false;
  for (int b = 1; b < nbody; ++b) {
    XpbdTreeNode<T>& N = node[b];
    for (int k = 0; k < 6; ++k) N.rb[k] = T(0);
    for (int i = 0; i < N.rows.n; ++i)
      N.rj[i] = -N.rows.c[i] - (at + N.rows.alpha[i]) * lambda[lambda_stride * b + i];
  }
  xpbd_tree_substitute(nbody, parent, body, node);
  return true;
}

// The adjoint of xpbd_tree_solve, right after it (the factor, d and mu still in the nodes):
// from the adjoints of the displacements adj_d (6 per body, world (linear, angular)) and of the
// multiplier changes adj_dlambda (lambda_stride per body), accumulates those of the rows
// (adj_rows[b]: of c, g1 and g2, zeroed here), of the bodies' orientations, inverse masses and
// inverse inertias (through M^-1), of lambda and of at and the rows' alpha (adj_rows). With
// dlambda = S^-1 rhs, S = G W0 G^T + at + alpha, d = W0 G^T dlambda (W0 = M^-1) and
// y = S^-1 (adj_dlambda + G W0 adj_d) (one more substitution):
//   adj_c = -y,   adj_lambda = -(at + alpha) y,   adj_at = adj_alpha = -y . (lambda + dlambda),
//   adj_G = dlambda (W0 adj_d - W0 G^T y)^T - y d^T,   adj_W0 = (adj_d - G^T y) (G^T dlambda)^T.
template <class T>
PHX_HD void adj_xpbd_tree_solve(int nbody, const int* parent, const XpbdBody<T>* body,
                                XpbdTreeNode<T>* node, T at, const T* lambda, int lambda_stride,
                                const T* adj_d, const T* adj_dlambda, XpbdRows<T>* adj_rows,
                                XpbdBody<T>* adj_body, T* adj_lambda, T& adj_at) {
  using namespace xpbd_impl;
  auto moving = [&](int b) { return b > 0 && !is_static(body[b]); };
  // keep the forward's solution; W0 adj_d; the adjoint right-hand sides
  for (int b = 1; b < nbody; ++b) {
    XpbdTreeNode<T>& N = node[b];
    for (int k = 0; k < 6; ++k) {
      N.fd[k] = N.d[k];
      N.au[k] = T(0);
    }
    for (int i = 0; i < N.rows.n; ++i) N.fdl[i] = -N.mu[i];
    if (moving(b)) inverse_mass(body[b], adj_d + 6 * b, N.au);
  }
  for (int b = 1; b < nbody; ++b) {
    XpbdTreeNode<T>& N = node[b];
    const int n = N.rows.n, p = parent[b];
    T g[6];
    for (int k = 0; k < 6; ++k) N.rb[k] = T(0);
    rows_times(N.rows.g2, n, N.au, N.rj);
    if (moving(p)) {
      rows_times(N.rows.g1, n, node[p].au, g);
      for (int i = 0; i < n; ++i) N.rj[i] += g[i];
    }
    for (int i = 0; i < n; ++i) N.rj[i] += adj_dlambda[lambda_stride * b + i];
  }
  xpbd_tree_substitute(nbody, parent, body, node);  // y = -mu, v = W0 G^T y = d
  // G^T y and G^T dlambda per body (in K's first columns: the factor is spent)
  for (int b = 1; b < nbody; ++b)
    for (int k = 0; k < 12; ++k) node[b].K[k] = T(0);
  for (int b = 1; b < nbody; ++b) {
    XpbdTreeNode<T>& N = node[b];
    const int n = N.rows.n, p = parent[b];
    T y[6], gy[6], gl[6];
    for (int i = 0; i < n; ++i) y[i] = -N.mu[i];
    rows_transpose(N.rows.g2, n, y, gy);
    rows_transpose(N.rows.g2, n, N.fdl, gl);
    for (int k = 0; k < 6; ++k) {
      N.K[k] += gy[k];
      N.K[6 + k] += gl[k];
    }
    if (moving(p)) {
      rows_transpose(N.rows.g1, n, y, gy);
      rows_transpose(N.rows.g1, n, N.fdl, gl);
      for (int k = 0; k < 6; ++k) {
        node[p].K[k] += gy[k];
        node[p].K[6 + k] += gl[k];
      }
    }
  }
  for (int b = 1; b < nbody; ++b) {
    XpbdTreeNode<T>& N = node[b];
    const int n = N.rows.n, p = parent[b];
    XpbdRows<T>& A = adj_rows[b];
    A.n = n;
    for (int i = 0; i < n; ++i) {
      const T y = -N.mu[i], dl = N.fdl[i];
      A.c[i] = -y;
      adj_lambda[lambda_stride * b + i] -= (at + N.rows.alpha[i]) * y;
      A.alpha[i] = -y * (lambda[lambda_stride * b + i] + dl);
      adj_at += A.alpha[i];
      for (int k = 0; k < 6; ++k) {
        A.g2[i][k] = moving(b) ? dl * (N.au[k] - N.d[k]) - y * N.fd[k] : T(0);
        A.g1[i][k] = moving(p) ? dl * (node[p].au[k] - node[p].d[k]) - y * node[p].fd[k] : T(0);
      }
    }
    if (!moving(b)) continue;
    // (adj_d - G^T y)^T W0 (G^T dlambda): W0 = diag(inv_mass, R diag(inv_inertia) R^T)
    const T* ad = adj_d + 6 * b;
    Vec3<T> a_lin{ad[0] - N.K[0], ad[1] - N.K[1], ad[2] - N.K[2]};
    Vec3<T> a_ang{ad[3] - N.K[3], ad[4] - N.K[4], ad[5] - N.K[5]};
    Vec3<T> u_lin{N.K[6], N.K[7], N.K[8]}, u_ang{N.K[9], N.K[10], N.K[11]}, adj_u;
    adj_body[b].inv_mass += dot(a_lin, u_lin);
    adj_xpbd_inv_inertia_world(body[b].q, body[b].inv_inertia, u_ang, adj_body[b].q,
                               adj_body[b].inv_inertia, adj_u, a_ang);
  }
}

}  // namespace phx
