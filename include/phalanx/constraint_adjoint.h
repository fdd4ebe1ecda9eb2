// Adjoint (vector-Jacobian product) of one constrained step, step_constrained in step.h:
// contacts and joint limits through the velocity-level boxed LCP (constraint.h, lcp.h).
//
// Forward (M = M(q) + diag(armature + dt damping), the matrix factored in c.L):
//   vfree = qvel + dt M^-1 (qfrc - c),  A = J M^-1 J^T,  b = J vfree + corr,
//   f = LCP(A, b, bounds, mu),  qvel' = vfree + M^-1 J^T f,  qpos' = qpos (+) dt qvel'.
// Reverse, with g the adjoint of qvel' (after the adjoint of the position integration),
// lam = M^-1 g, Z = M^-1 J^T and G = adj_A:
//   adj_f = J lam,  adj_J += f lam^T,  adj_M -= lam (qvel' - vfree)^T,  adj_vfree += g;
//   adj_lcp: adj_f -> adj_A, adj_b, adj_mu (Nimble's gradient on the solution's classification);
//   A, b: adj_J += (G + G^T) Z^T + adj_b vfree^T,  adj_M -= Z G Z^T,  adj_vfree += J^T adj_b;
//   corr (the branch build_rows took): bounce rows  corr = e J_r qvel,
//          push rows corr = erp (dist + slop) / dt,  limit rows dist = +-(q - bound) (a ball's
//          bound - theta(q), its row -u(q) turning with q too);
//   vfree: adj_qvel += adj_vfree, mu2 = M^-1 adj_vfree, adj_qfrc = dt mu2, adj_c = -dt mu2,
//          adj_M -= mu2 (vfree - qvel)^T;
//   adj_M -> adj_crba (+ armature, + dt damping), adj_c -> adj_rnea, adj_qfrc -> adj_passive,
//   adj_actuation; adj_J -> adj_add_point_jacobian -> contact point, normal and tangents
//   (adj_contact_frame) -> adj_collide -> geom frames -> adj_geom_pose -> body frames;
//   then adj_com_vel, adj_com_pos, adj_kinematics, as adj_forward_dynamics.
//
// Exactness. The LCP's gradient is that of the solution map on the classification of the rows,
// which is exact when f solves the LCP exactly on that classification: use lcp_solver =
// kLcpPgsStabilized or kLcpDantzig (both end in the exact re-solve on the clamping set, and
// leave the classification in efc_class). With kLcpPgs the rows are classified here
// (lcp_classify, tied rows clamping) and the gradient is that of the stabilised solution on the
// classification of the PGS answer, evaluated at the PGS impulses: close to, not equal to, the
// derivative of what PGS returned. Contact appearance and disappearance, class changes and the
// narrowphase's feature choices are not differentiated (derivatives are those of the branch
// taken); contacts lost to nconmax overflow get no gradient. Two options of Nimble change that
// choice where it stalls optimisation: the complementarity-aware classification and the
// elastic-bounce correction (m.contact_gradient, see adj_step_constrained).
#pragma once

#include <type_traits>

#include "phalanx/step.h"

namespace phx {

// ---- adjoints of the constraint.h helpers ------------------------------------------------

// Z = M^-1 J^T by rows (Z_r = L^-T Y_r with Y_r = L^-1 J_r, M factored in c.L), which the
// adjoint of delassus needs: a function of the forward step alone, computed once per replay
// (adj_constrained_prepare) for every reverse pass that follows.
template <class T, class L>
PHX_HD void delassus_rows(const ModelView<T>& m, int nrow, const ConstraintWorkspace<T, L>& c,
                          T* Z) {
  const int nv = m.nv;
  for (int r = 0; r < nrow; ++r) {
    T* z = Z + long(r) * nv;
    for (int d = 0; d < nv; ++d) z[d] = c.Y[long(r) * nv + d];
    cholesky_solve_upper(c.L, nv, z);
  }
}

// Adjoint of delassus for the rows' A = J M^-1 J^T and b = J vfree + corrections, with M the
// matrix factored in c.L: from adj_A (the LCP's, of rank two: G = z beta^T - y alpha^T) and
// adj_b (nrow) to adj_J (nrow x nv), adj_vfree (nv) and adj_M (nv x nv), all accumulated, adj_J
// and adj_M as terms of their outer-product sums (which read G, adj_b and proj). With
// Z = M^-1 J^T by rows (delassus_rows):
//   adj_J_r += sum_q (G_rq + G_qr) Z_q + adj_b_r vfree,  adj_M -= Z^T G Z,  adj_vfree += J^T adj_b,
// evaluated through the factors: with Zy = Z^T y, Za = Z^T alpha, Zz = Z^T z, Zb = Z^T beta,
//   sum_q G_rq Z_q = z_r Zb - y_r Za,  sum_q G_qr Z_q = beta_r Zz - alpha_r Zy,
//   Z^T G Z = Zz Zb^T - Zy Za^T,
// O(nrow nv + nv^2) in place of O(nrow^2 nv + nrow nv^2). The projections come from Z when a
// Jacobian's many reverse passes share it (Z non-null), else from the rows of Y = L^-1 J^T that
// delassus left in c.Y: Z^T y = L^-T (Y^T y), four back substitutions, which the caller runs
// (beside another of its own: adj_constrained_rows). proj (4 nv) holds the projections, which
// adj_M's terms read.
// The step's arrays are c's (of its scalar S); vfree is c.vfree in T (the outer-product terms
// hold arrays of T); a pass of another scalar than the step's has Z.
// The first half: the projections into proj and adj_vfree's term; returns whether the
// projections still lack their back substitutions (taken from Y).
template <class T, class S, class L, class GL, class B>
PHX_HD bool adj_delassus(const ModelView<S>& m, int nrow, const ConstraintWorkspace<S, L>& c,
                         const T* Z, const LcpAdjointA<T, GL>& G, B adj_b, T* proj, T* adj_vfree) {
  const int nv = m.nv;
  T* PHX_RESTRICT Zy = proj;
  T* PHX_RESTRICT Za = proj + nv;
  T* PHX_RESTRICT Zz = proj + 2 * nv;
  T* PHX_RESTRICT Zb = proj + 3 * nv;
  for (int d = 0; d < 4 * nv; ++d) proj[d] = T(0);
  auto project = [&](auto rows) {
    for (int r = 0; r < nrow; ++r) {
      const typename Restricted<decltype(rows)>::type z = rows + long(r) * nv;
      const T y = G.y[r], alpha = G.alpha[r], zr = G.z[r], beta = G.beta[r];
      for (int d = 0; d < nv; ++d) {
        Zy[d] += y * z[d];
        Za[d] += alpha * z[d];
        Zz[d] += zr * z[d];
        Zb[d] += beta * z[d];
      }
    }
  };
  bool back = false;
  if (Z) {
    project(Z);
  } else if constexpr (std::is_same_v<S, T>) {
    project(c.Y);
    back = true;
  }
  T* PHX_RESTRICT av = adj_vfree;
  for (int r = 0; r < nrow; ++r) {
    const RestrictedRows<L, const S> J = c.J + long(r) * nv;
    const T ab = adj_b[r];
    for (int d = 0; d < nv; ++d) av[d] += ab * J[d];
  }
  return back;
}

// The second half, once the projections are whole: adj_J's and adj_M's terms
template <class T, int KJ, int KM, class GL, class B, class U>
PHX_HD void adj_delassus_terms(int nv, const T* vfree, const LcpAdjointA<T, GL>& G, B adj_b,
                               const T* proj, OuterSum<T, KJ, U>& adj_J, OuterSum<T, KM>& adj_M) {
  const T* Zy = proj;
  const T* Za = proj + nv;
  const T* Zz = proj + 2 * nv;
  const T* Zb = proj + 3 * nv;
  adj_J.add(G.z, Zb, T(1));
  adj_J.add(G.y, Za, T(-1));
  adj_J.add(G.beta, Zz, T(1));
  adj_J.add(G.alpha, Zy, T(-1));
  adj_J.add(adj_b, vfree, T(1));
  adj_M.add(Zz, Zb, T(-1));
  adj_M.add(Zy, Za, T(1));
}

// Number of differentiable parameters (the columns of a parameter Jacobian): every Param,
// one copy each, in Param order.
template <class T>
PHX_HD int jacobian_nparam(const ModelView<T>& m) {
  long n = 0;
  for (int k = 0; k < kNumParams; ++k) n += param_size(m, k);
  return int(n);
}

// Scratch of adj_step_constrained, carved like ConstraintWorkspace (sizes from the model's nq,
// nv, ngeom, nconmax and nefcmax): the arrays sized by the model's counts alone
// (Arena::take_fixed), then the capacity-sized ones, laid out by the workspace's Layout
// (Arena::take_rows) as the forward's rows are
#define PHX_ADJ_CONSTRAINT_WORKSPACE_FIXED(X)                                      \
  X(real, qpos_next, m.nq, "replayed qpos' (nq)")                                  \
  X(real, qvel_next, m.nv, "replayed qvel' (nv)")                                  \
  X(real, g, m.nv, "adjoint of qvel' (nv)")                                        \
  X(real, lam, m.nv, "M^-1 g (nv)")                                                \
  X(real, dv, m.nv, "qvel' - vfree (nv)")                                          \
  X(real, mu2, m.nv, "M^-1 adj_vfree (nv)")                                        \
  X(real, adj_vfree, m.nv, "(nv)")                                                 \
  X(real, adj_qfrc, m.nv, "(nv)")                                                  \
  X(real, adj_bias, m.nv, "adjoint of c(q, qvel) (nv)")                            \
  X(real, tmp, m.nv, "(nv)")                                                       \
  X(real, proj, 4L * m.nv, "adj_delassus's projections onto Z (4 nv)")             \
  X(real, adj_M, long(m.nv) * m.nv, "adj_M written out, one seed (nv x nv)")       \
  X(real, u, m.nv, "adjoint of qvel' through qpos' alone, bounce correction (nv)") \
  X(real, hold_qpos, m.nq, "adjoints the bounce correction replaces (nq)")         \
  X(real, hold_qvel, m.nv, "(nv)")                                                 \
  X(real, score, 2, "||adj_vfree||^2 + dt ||M^-1 adj_vfree||^2 per classification (2)")
#define PHX_ADJ_CONSTRAINT_WORKSPACE_ROWS(X)                                                 \
  X(real, bounce, m.nefcmax, "e adj_b on bouncing normal rows, else 0 (nefcmax)")            \
  X(real, adj_b, m.nefcmax, "(nefcmax)")                                                     \
  X(real, adj_f, m.nefcmax, "(nefcmax)")                                                     \
  X(real, adj_mu, m.nefcmax, "(nefcmax)")                                                    \
  X(real, adj_pos, 3L * m.nconmax, "adjoint of each contact point (nconmax x 3)")            \
  X(real, adj_frame, 9L * m.nconmax, "adjoint of each contact frame, n t1 t2 (nconmax x 9)") \
  X(real, adj_dist, m.nconmax, "(nconmax)")                                                  \
  X(real, dl_dv, m.nefcmax, "loss gradient per row, J g, complementarity-aware (nefcmax)")   \
  X(int, cls, m.nefcmax, "row classes used by adj_lcp (nefcmax)")                            \
  X(int, cls_loss, m.nefcmax, "loss-driven classes (nefcmax)")                               \
  X(real, f_rows, m.nefcmax, "the step's impulses in this layout, for adj_J (nefcmax)")      \
  X(real, adj_J, long(m.nefcmax) * m.nv, "adj_J written out, one seed (nefcmax x nv)")

template <class T, class Layout = Contiguous>
struct AdjConstraintWorkspace {
  using real = T;
  PHX_ADJ_CONSTRAINT_WORKSPACE_FIXED(PHX_WORKSPACE_MEMBER)
  PHX_ADJ_CONSTRAINT_WORKSPACE_ROWS(PHX_WORKSPACE_ROWS_MEMBER)
  LcpAdjointA<T, Layout> adj_A;  // adj_lcp's rank-two factors (4 x nefcmax)
  // What the reverse passes of one replay share when there are many (a Jacobian's rows), bound
  // over storage by bind_factor and computed once by adj_constrained_prepare: the LCP
  // adjoint's factorisation of the replay's own classification and Z = M^-1 J^T. Unbound
  // (shared() false), each pass factors in c.lcp and solves for its projections.
  LcpAdjointFactor<T> base{};
  int* base_cls = nullptr;  // its classification                          (nefcmax)
  T* Z = nullptr;           // M^-1 J^T by rows                              (nefcmax x nv)
  // A pass in another scalar than the step's (LaneReplay's lanes, which read the step's
  // constraint workspace and contacts in place) takes from here what it cannot read there: the
  // step's impulses and vfree in its own scalar, for the outer-product terms, and adj_lcp's
  // vectors; LaneReplay binds them, null otherwise (c.lcp holds the vectors).
  const T* efc_force = nullptr;
  const T* vfree = nullptr;
  LcpAdjointScratch<T> lcp{};

  // (the model of any scalar: a pass of several seeds reads its forward model in place)
  template <class M>
  PHX_HD static AdjConstraintWorkspace carve(const M& m, Arena<T, Layout>& arena) {
    AdjConstraintWorkspace w;
    PHX_ADJ_CONSTRAINT_WORKSPACE_FIXED(PHX_WORKSPACE_TAKE_FIXED)
    PHX_ADJ_CONSTRAINT_WORKSPACE_ROWS(PHX_WORKSPACE_TAKE_ROWS)
    const long ne = m.nefcmax;
    w.adj_A = {arena.template take_rows<T>(ne), arena.template take_rows<T>(ne),
               arena.template take_rows<T>(ne), arena.template take_rows<T>(ne)};
    return w;
  }

  // the shared factorisation and Z over storage from arena (a counting Arena measures it)
  template <class M>
  PHX_HD void bind_factor(const M& m, Arena<T>& arena) {
    const int ne = m.nefcmax;
    base = lcp_adjoint_explicit_carve(ne, arena);
    base_cls = arena.template take<int>(ne);
    Z = arena.template take<T>(long(ne) * m.nv);
  }
  template <class M>
  PHX_HD static ScratchSize factor_size(const M& m) {
    Arena<T> counting;
    AdjConstraintWorkspace().bind_factor(m, counting);
    return counting.used();
  }

  PHX_HD bool shared() const { return base.pinv_t != nullptr; }
};

// rows of contact i (3 with friction, 1 without), as build_rows lays them out
template <class T>
PHX_HD PHX_INLINE int contact_rows(const ModelView<T>& m, const int* geom, int i) {
  return (m.geom_condim[geom[2 * i]] > 1 || m.geom_condim[geom[2 * i + 1]] > 1) ? 3 : 1;
}

// the geom whose coefficient a pair uses (the larger; the second on a tie, as build_rows)
template <class T>
PHX_HD PHX_INLINE int pair_max_geom(const T* coef, int stride, int g1, int g2) {
  return coef[stride * g1] > coef[stride * g2] ? g1 : g2;
}

// Adjoint of the contact rows' Jacobians: from adj_J (rows x nv), through add_point_jacobian and
// contact_frame, to the adjoints of cdof and of the body frames in a and of the contacts' points
// and normals in s.adj_pos and s.adj_frame (overwritten). Uses the contacts in cv as the forward
// left them.
template <class T, class S, class L, class AdjRows>
PHX_HD void adj_contact_rows(const ModelView<S>& m, const Workspace<S>& w, const ContactView<S>& cv,
                             const AdjRows& adj_J, AdjConstraintWorkspace<T, L>& s,
                             AdjWorkspace<T>& a) {
  int ncon = *cv.ncon;
  for (int i = 0; i < 3 * ncon; ++i) s.adj_pos[i] = T(0);
  for (int i = 0; i < 9 * ncon; ++i) s.adj_frame[i] = T(0);

  // J_r = u . (velocity of p on body 2 - on body 1), u the normal or a tangent
  for (int i = 0, row = 0; i < ncon; ++i) {
    int nr = contact_rows(m, cv.geom, i);
    int b1 = m.geom_bodyid[cv.geom[2 * i]], b2 = m.geom_bodyid[cv.geom[2 * i + 1]];
    Vec3<T> p = Vec3<T>::load(cv.pos + 3 * i), adj_p, u[3], adj_u[3];
    for (int k = 0; k < nr; ++k) u[k] = Vec3<T>::load(cv.frame + 9 * i + 3 * k);
    adj_add_point_jacobian(m, w, b2, p, u, nr, T(1), adj_J, row, a, adj_p, adj_u);
    adj_add_point_jacobian(m, w, b1, p, u, nr, T(-1), adj_J, row, a, adj_p, adj_u);
    for (int k = 0; k < nr; ++k) adj_u[k].add_to(s.adj_frame + 9 * i + 3 * k);
    row += nr;
    adj_p.add_to(s.adj_pos + 3 * i);
    // tangents from the normal
    if (nr == 3) {
      Vec3<T> adj_n;
      adj_contact_frame(Vec3<T>::load(cv.frame + 9 * i), adj_n,
                        Vec3<T>::load(s.adj_frame + 9 * i + 3),
                        Vec3<T>::load(s.adj_frame + 9 * i + 6));
      adj_n.add_to(s.adj_frame + 9 * i);
    }
  }
}

namespace detail {

// The classification the LCP adjoint uses by default: the solver's (efc_class), or after plain
// PGS the stabilised classification of its answer (lcp_classify, tied rows clamping).
template <class T, class S, class L, class C>
PHX_HD void replay_classification(const ModelView<S>& m, const LcpProblem<T, L>& p, const T* f,
                                  const ContactView<T>& cv, C cls) {
  if (m.lcp_solver == kLcpPgs) {
    lcp_classify(p, f, T(m.lcp_tolerance), true, cls);
  } else {
    for (int r = 0; r < p.n; ++r) cls[r] = cv.efc_class[r];
  }
}

// adj_lcp of s.adj_f on the classification cls, whose factors F holds, into s.adj_A, s.adj_b,
// s.adj_mu (zeroed first), with adj_lcp's vectors in work
template <class T, class S, class L, class FL, class C, class WL>
PHX_HD void adj_lcp_rows(const LcpProblem<S, L>& p, const S* f, const LcpAdjointFactor<T, FL>& F,
                         C cls, const LcpAdjointScratch<T, WL>& work,
                         AdjConstraintWorkspace<T, L>& s) {
  for (int r = 0; r < p.n; ++r) s.adj_b[r] = s.adj_mu[r] = T(0);
  adj_lcp(p, f, F, cls, s.adj_f, s.adj_A, s.adj_b, s.adj_mu, work);
}

// Nimble's score of the classification adj_lcp_rows just used: ||dl/dqd||^2 + ||dl/dtau||^2 / dt
// with dl/dqd ~ adj_vfree = g + J^T adj_b (the part of adj_delassus that reaches vfree) and
// dl/dtau = dt M^-1 adj_vfree.
template <class T, class S, class L>
PHX_HD T adj_lcp_score(const ModelView<S>& m, int nrow, const ConstraintWorkspace<T, L>& c,
                       AdjConstraintWorkspace<T, L>& s) {
  const int nv = m.nv;
  for (int d = 0; d < nv; ++d) s.tmp[d] = s.g[d];
  for (int r = 0; r < nrow; ++r)
    for (int d = 0; d < nv; ++d) s.tmp[d] += c.J[long(r) * nv + d] * s.adj_b[r];
  T score(0);
  for (int d = 0; d < nv; ++d) score += s.tmp[d] * s.tmp[d];
  cholesky_solve(c.L, nv, s.tmp);
  for (int d = 0; d < nv; ++d) score += m.timestep * s.tmp[d] * s.tmp[d];
  return score;
}

// The stages of adj_constrained_velocity (below), in the order they run. adj_J and adj_M
// gather the adjoints of J and M as sums of outer products of vectors kept in s, c and cv
// (written out or read term by term at the end, by the number of seeds).

// qvel' = vfree + M^-1 J^T f: lam = M^-1 g, adj_M = -lam (qvel' - vfree)^T, adj_J = f lam^T,
// adj_f = J lam; with the complementarity-aware option also dl/dv = J g per row
template <class T, class S, class L, class F, class U>
PHX_HD PHX_INLINE void adj_impulse_velocity(const ModelView<S>& m, int nrow,
                                            const ConstraintWorkspace<S, L>& c, F f_t, bool aware,
                                            AdjConstraintWorkspace<T, L>& s,
                                            OuterSum<T, 7, U>& adj_J, OuterSum<T, 4>& adj_M) {
  const int nv = m.nv;
  for (int d = 0; d < nv; ++d) s.lam[d] = s.g[d];
  cholesky_solve(c.L, nv, s.lam);
  const T* PHX_RESTRICT lam = s.lam;
  const T* PHX_RESTRICT g = s.g;
  T* PHX_RESTRICT dv = s.dv;
  for (int k = 0; k < nv; ++k) dv[k] = s.qvel_next[k] - c.vfree[k];
  adj_M.add(lam, dv, T(-1));
  adj_J.add(f_t, lam, T(1));
  for (int r = 0; r < nrow; ++r) {
    const RestrictedRows<L, const S> J = c.J + long(r) * nv;
    T v = T(0), gv = T(0);
    for (int d = 0; d < nv; ++d) v += J[d] * lam[d];
    s.adj_f[r] = v;
    if (!aware) continue;
    for (int d = 0; d < nv; ++d) gv += J[d] * g[d];
    s.dl_dv[r] = gv;
  }
}

// The LCP on its classification (factored once per replay when s.base is bound, else here in
// c.lcp); with the complementarity-aware option also on the loss-driven one, keeping the
// larger score. Several seeds (S other than T) take the replay's shared factorisation.
template <class T, class S, class L>
PHX_HD PHX_INLINE void adj_lcp_stage(const ModelView<S>& m, const LcpProblem<S, L>& p, const S* f,
                                     ConstraintWorkspace<S, L>& c, const ContactView<S>& cv,
                                     bool aware, AdjConstraintWorkspace<T, L>& s) {
  const int nrow = p.n;
  const bool cached = s.shared();
  if constexpr (std::is_same_v<S, T>) {
    if (!cached) replay_classification(m, p, f, cv, s.cls);
    // in c.lcp, laid out as the rows: the factors of a classification when the pass computes
    // them (without a shared factorisation, or for the loss-driven one), then adj_lcp's vectors
    auto arena = rows_arena<T>(c.lcp, c.ilcp);
    LcpAdjointFactor<T, L> own;
    if (!cached || aware) own = lcp_adjoint_factor_carve(nrow, arena);
    const auto work = LcpAdjointScratch<T, L>::carve(nrow, arena);
    // the plain classification, cls, and its factors, F: the shared ones or its own
    auto adjoint = [&](auto& F, auto cls) {
      if (!cached) lcp_adjoint_factor(p, f, cls, lcp_rank_tol<T>(), F);
      if (aware) {
        lcp_classify_loss(p, cls, s.dl_dv, s.cls_loss);
        adj_lcp_rows(p, f, F, cls, work, s);
        s.score[0] = adj_lcp_score(m, nrow, c, s);
        // the loss-driven classification's factors, in own (F itself without a shared
        // factorisation, factored again below when the plain one wins), kept when it wins
        lcp_adjoint_factor(p, f, s.cls_loss, lcp_rank_tol<T>(), own);
        adj_lcp_rows(p, f, own, s.cls_loss, work, s);
        s.score[1] = adj_lcp_score(m, nrow, c, s);
        if (s.score[1] > s.score[0]) return;  // its adjoint is the one in s
        if (!cached) lcp_adjoint_factor(p, f, cls, lcp_rank_tol<T>(), F);
      }
      adj_lcp_rows(p, f, F, cls, work, s);
    };
    // one call where both are of one type (Contiguous scratch: the Jacobian kernels', which
    // share a factorisation), so that the pass is inlined once. The factors go by reference:
    // a copy chosen at run time held all their pointers in registers through the pass, which
    // spilled 1 KB of the float Jacobian kernel on the GPU.
    if constexpr (std::is_same_v<decltype(s.base), decltype(own)>)
      adjoint(cached ? s.base : own, cached ? s.base_cls : s.cls);
    else if (cached)
      adjoint(s.base, s.base_cls);
    else
      adjoint(own, s.cls);
  } else {
    adj_lcp_rows(p, f, s.base, s.base_cls, s.lcp, s);
  }
}

// theta and u of ball joint j's limit (ball_limit_distance) from adj_theta and adj_u to its
// quaternion's four numbers in adj_qpos
template <class T, class S>
PHX_HD PHX_INLINE void adj_ball_angle(const ModelView<S>& m, int j, const T* qpos, T adj_theta,
                                      const Vec3<T>& adj_u, T* adj_qpos) {
  const int a = m.jnt_qposadr[j];
  Quat<T> adj_q = Quat<T>::zero();
  adj_quat_angle_axis(Quat<T>{qpos[a], qpos[a + 1], qpos[a + 2], qpos[a + 3]}, adj_theta, adj_u,
                      adj_q);
  adj_qpos[a] += adj_q.w;
  adj_qpos[a + 1] += adj_q.x;
  adj_qpos[a + 2] += adj_q.y;
  adj_qpos[a + 3] += adj_q.z;
}

// The corrections in b of the contact rows (the branch build_rows took) and the friction
// coefficients, then the joint limits' (J constant, corr = erp (dist + slop) / dt with
// dist = +-(q - bound), q the joint's coordinate or the tendon's length; friction-loss rows have
// none): to adj_qvel, adj_qpos (a.ten_length for tendons), the restitution and friction
// adjoints, s.adj_dist, and adj_J's bounce term. vn: each row's J qvel, where the caller has
// them (else the contacts' normal rows' are computed here, in the same order)
template <class T, class S, class L, class U>
PHX_HD PHX_INLINE void adj_row_corrections(
    const ModelView<S>& m, const T* qpos, const T* qvel, int nrow, const Workspace<S>& w,
    const ConstraintWorkspace<S, L>& c, const ContactView<S>& cv, AdjConstraintWorkspace<T, L>& s,
    AdjWorkspace<T>& a, T* adj_qpos, T* adj_qvel, const ContactModelAdjoint<T>& adj_contact,
    OuterSum<T, 7, U>& adj_J, const T* vn_rows = nullptr) {
  const int nv = m.nv;
  const T dt = m.timestep;
  int ncon = *cv.ncon, row = 0, nbounce = 0;
  for (int r = 0; r < nrow; ++r) s.bounce[r] = T(0);
  for (int i = 0; i < ncon; ++i) {
    int nr = contact_rows(m, cv.geom, i);
    int g1 = cv.geom[2 * i], g2 = cv.geom[2 * i + 1];
    const RowsPtr<L, const S> J = c.J + long(row) * nv;
    T ab = s.adj_b[row];
    int ge = pair_max_geom(m.geom_restitution, 1, g1, g2);
    T e = m.geom_restitution[ge];
    T vn = T(0);
    if (vn_rows)
      vn = vn_rows[row];
    else
      for (int d = 0; d < nv; ++d) vn += J[d] * qvel[d];
    NormalCorrection<T> corr = normal_correction(m, vn, e, T(cv.dist[i]));
    s.adj_dist[i] = T(0);
    if (corr.bounces()) {
      // corr = e J_r qvel: adj_J_r += e adj_b_r qvel (a term of adj_J below)
      s.bounce[row] = e * ab;
      ++nbounce;
      for (int d = 0; d < nv; ++d) adj_qvel[d] += e * ab * J[d];
      if (adj_contact.geom_restitution) adj_contact.geom_restitution[ge] += vn * ab;
    } else if (corr.push < T(0)) {
      // corr = erp (dist + slop) / dt
      s.adj_dist[i] = m.erp / dt * ab;
    }
    if (adj_contact.geom_friction) {
      int gf = pair_max_geom(m.geom_friction, 3, g1, g2);
      for (int k = 1; k < nr; ++k) adj_contact.geom_friction[3 * gf] += s.adj_mu[row + k];
    }
    row += nr;
  }
  if (nbounce > 0) adj_J.add(s.bounce, qvel, T(1));
  for (int r = row; r < nrow; ++r) {
    int key = -1 - cv.efc_key[r];
    if (key >= 2 * m.njnt && key < 2 * m.njnt + nv) continue;  // friction loss: J, b constant
    // tendon friction losses (J, b constant) and equalities (adj_equality_rows)
    if (key >= 2 * m.njnt + nv + 2 * m.ntendon) continue;
    bool tendon = key >= 2 * m.njnt + nv;
    if (tendon) key -= 2 * m.njnt + nv;
    int id = key / 2;
    if (!tendon && m.jnt_type[id] == kJointBall) {
      // b = erp (dist + slop) / dt, dist = bound - theta
      Vec3<T> u;
      if (!(ball_limit_distance(m, id, qpos, u) + m.slop < T(0))) continue;
      adj_ball_angle(m, id, qpos, -m.erp / dt * s.adj_b[r], Vec3<T>{}, adj_qpos);
      continue;
    }
    T sign = key % 2 ? T(-1) : T(1);
    const S* range = tendon ? m.tendon_range + 2 * id : m.jnt_range + 2 * id;
    const int type = tendon ? kTrnTendon : kTrnJoint;
    T length, velocity;
    transmission_state(m, w, type, id, qpos, qvel, length, velocity);
    T dist = sign > T(0) ? length - range[0] : range[1] - length;
    if (!(dist + m.slop < T(0))) continue;
    // b = erp (dist + slop) / dt, dist = sign (length - bound)
    adj_transmission_state(m, w, type, id, qvel, sign * m.erp / dt * s.adj_b[r], T(0), a, adj_qpos,
                           adj_qvel);
  }
}

// The rows of ball joints' limits (-u on the joint's dofs) turn with its quaternion: their
// adjoints (adj_J, rows by index) to adj_qpos
template <class T, class S, class AdjRows>
PHX_HD void adj_ball_limit_rows(const ModelView<S>& m, const T* qpos, const int* keys, int nrow,
                                const AdjRows& adj_J, T* adj_qpos) {
  for (int r = 0; r < nrow; ++r) {
    const int j = (-1 - keys[r]) / 2;
    if (keys[r] >= 0 || j >= m.njnt || m.jnt_type[j] != kJointBall) continue;
    const auto row = adj_J.row(r);
    const int d = m.jnt_dofadr[j];
    adj_ball_angle(m, j, qpos, T(0), Vec3<T>{-row(d), -row(d + 1), -row(d + 2)}, adj_qpos);
  }
}

// The rows of spatial tendons' limits (sign times the tendon's row) and friction losses (the
// tendon's row) depend on the configuration: their adjoints (adj_J, rows by index) go to
// a.ten_J. The rows of joints and fixed tendons are constant.
template <class T, class S, class AdjRows>
PHX_HD void adj_tendon_rows(const ModelView<S>& m, const Workspace<S>& w, const int* keys, int nrow,
                            const AdjRows& adj_J, AdjWorkspace<T>& a) {
  const int first = 2 * m.njnt + m.nv;  // -1 - key of tendon 0's lower limit row
  for (int r = 0; r < nrow; ++r) {
    const int k = -1 - keys[r] - first;
    if (keys[r] >= 0 || k < 0 || k >= 3 * m.ntendon) continue;
    const bool limit = k < 2 * m.ntendon;
    const int t = limit ? k / 2 : k - 2 * m.ntendon;
    const T sign = limit && k % 2 ? T(-1) : T(1);
    adj_transmission_row(m, w, kTrnTendon, t, sign, adj_J.row(r), a);
  }
}

// The adjoints of the rows' Jacobians (adj_J, rows by index: written out, or the outer-product
// terms read entry by entry) to the stages that built them: contacts, tendons, ball joints'
// limits, equalities; then those of the contacts' points, normals and distances (s.adj_dist:
// adj_row_corrections') through collide and the geom poses to the body frames in a and the geom
// sizes in adj_contact. Uses the geom frames in c as the forward left them. The pair functions'
// adjoints come last, where the reverse pass holds least beside them: on the GPU they are a
// device function of their own, whose call would otherwise save the pass's registers.
template <class T, class S, class L, class AdjRows>
PHX_HD void adj_row_jacobians(const ModelView<S>& m, const T* qpos, const T* qvel,
                              const Workspace<S>& w, const ConstraintWorkspace<S, L>& c,
                              const ContactView<S>& cv, int nrow, const AdjRows& adj_J,
                              AdjConstraintWorkspace<T, L>& s, AdjWorkspace<T>& a, T* adj_qpos,
                              T* adj_qvel, const ContactModelAdjoint<T>& adj_contact) {
  adj_contact_rows(m, w, cv, adj_J, s, a);
  adj_tendon_rows(m, w, cv.efc_key, nrow, adj_J, a);
  adj_ball_limit_rows(m, qpos, cv.efc_key, nrow, adj_J, adj_qpos);
  if (m.neq > 0)
    adj_equality_rows(m, qpos, qvel, w, cv.efc_key, nrow, adj_J, s.adj_b, a, adj_qpos, adj_qvel);
  adj_detect_contacts(m, c, cv, s.adj_pos, s.adj_frame, 9, s.adj_dist, a, adj_contact.geom_size);
}

// vfree = qvel + dt M^-1 (qfrc - c), with mu2 = M^-1 adj_vfree in s.mu2: to adj_qvel,
// s.adj_qfrc and s.adj_bias (the adjoints of the applied forces and of c), adj_qfrc (may be
// null) and adj_M
template <class T, class S, class L>
PHX_HD PHX_INLINE void adj_free_velocity(const ModelView<S>& m, const T* qvel,
                                         const ConstraintWorkspace<S, L>& c,
                                         AdjConstraintWorkspace<T, L>& s, T* adj_qvel, T* adj_qfrc,
                                         OuterSum<T, 4>& adj_M) {
  const int nv = m.nv;
  const T dt = m.timestep;
  for (int d = 0; d < nv; ++d) adj_qvel[d] += s.adj_vfree[d];
  for (int d = 0; d < nv; ++d) {
    s.adj_qfrc[d] = dt * s.mu2[d];
    s.adj_bias[d] = -dt * s.mu2[d];
  }
  if (adj_qfrc)
    for (int d = 0; d < nv; ++d) adj_qfrc[d] += s.adj_qfrc[d];
  for (int k = 0; k < nv; ++k) s.tmp[k] = c.vfree[k] - qvel[k];
  adj_M.add(s.mu2, s.tmp, T(-1));
}

// qpos' = qpos (+) dt qvel': u = dt P^T adj_qpos' into s.u, the direct term into adj_qpos
template <class T, class S, class L>
PHX_HD PHX_INLINE void adj_position_update(const ModelView<S>& m, const T* qpos,
                                           AdjConstraintWorkspace<T, L>& s, const T* adj_qpos_next,
                                           T* adj_qpos) {
  for (int d = 0; d < m.nv; ++d) s.u[d] = T(0);
  adj_integrate_pos(m, qpos, s.qvel_next, T(m.timestep), adj_qpos_next, adj_qpos, s.u);
}

// The stages of the adjoint of qvel' = vfree + M^-1 J^T f (with g = adjoint of qvel' in s.g)
// that depend on the step's rows: the impulses, the LCP, the Delassus matrix, the rows'
// corrections, the free velocity, and the rows' Jacobians (contacts, tendons, ball limits,
// equalities): to adj_qpos, adj_qvel, the contact parameters, adj_qfrc (a generalized force
// added to the applied ones; may be null), the stage adjoints in a (zeroed here), s.adj_bias and
// s.adj_qfrc, and adj_M, the adjoint of the mass matrix as its outer-product terms (one seed, a
// floating-point T, also writes it out in s.adj_M). The forward step's results are in w, c and
// cv. With S other than T (seeds in lanes) the pass is the plain one of a shared factorisation
// (s.base, s.efc_force, s.vfree and s.lcp bound by LaneReplay).
template <class T, class S, class L>
PHX_HD PHX_DEVICE_NOINLINE void adj_constrained_rows(
    const ModelView<S>& m, const T* qpos, const T* qvel, Workspace<S>& w,
    ConstraintWorkspace<S, L>& c, const ContactView<S>& cv, AdjWorkspace<T>& a,
    AdjConstraintWorkspace<T, L>& s, T* adj_qpos, T* adj_qvel,
    const ContactModelAdjoint<T>& adj_contact, T* adj_qfrc, OuterSum<T, 4>& adj_M) {
  constexpr bool own = std::is_same_v<S, T>;
  const int nrow = *cv.nefc;
  const S* f = cv.efc_force;
  // the step's impulses (in the rows' layout) and vfree as arrays of T, for the outer-product
  // terms
  RowsPtr<L, const T> f_t = nullptr;
  const T* vfree_t = nullptr;
  if constexpr (!own) {
    f_t = s.efc_force;
    vfree_t = s.vfree;
  } else if constexpr (std::is_same_v<L, Contiguous>) {
    f_t = f;
    vfree_t = c.vfree;
  } else {
    // (a copy: in any other layout than Contiguous, which reads them in place)
    for (int r = 0; r < nrow; ++r) s.f_rows[r] = f[r];
    f_t = s.f_rows;
    vfree_t = c.vfree;
  }
  const bool aware = own && (m.contact_gradient & kGradComplementarityAware);
  a.zero();
  // adj_J's terms: its row vectors in the rows' layout, its column vectors fixed reals
  OuterSum<T, 7, RowsPtr<L, const T>> adj_J;
  adj_impulse_velocity(m, nrow, c, f_t, aware, s, adj_J, adj_M);
  const LcpProblem<S, L> p = lcp_problem(nrow, c);
  adj_lcp_stage(m, p, f, c, cv, aware, s);
  const int nv = m.nv;
  for (int d = 0; d < nv; ++d) s.adj_vfree[d] = s.g[d];
  // A = J M^-1 J^T, b = J vfree + corr
  const bool back = adj_delassus(m, nrow, c, s.shared() ? s.Z : static_cast<const T*>(nullptr),
                                 s.adj_A, s.adj_b, s.proj, s.adj_vfree);
  // mu2 = M^-1 adj_vfree (adj_free_velocity), its back substitution beside the projections'
  for (int d = 0; d < nv; ++d) s.mu2[d] = s.adj_vfree[d];
  cholesky_solve_lower(c.L, nv, s.mu2);
  if (back) {
    T* const b[5] = {s.proj, s.proj + nv, s.proj + 2 * nv, s.proj + 3 * nv, s.mu2};
    cholesky_solve_upper_group<5>(c.L, nv, b);
  } else {
    cholesky_solve_upper(c.L, nv, s.mu2);
  }
  adj_delassus_terms(nv, vfree_t, s.adj_A, s.adj_b, s.proj, adj_J, adj_M);
  adj_row_corrections(m, qpos, qvel, nrow, w, c, cv, s, a, adj_qpos, adj_qvel, adj_contact, adj_J);
  adj_free_velocity(m, qvel, c, s, adj_qvel, adj_qfrc, adj_M);
  // the rows' Jacobians: one seed (a float or double T) writes adj_J (and adj_M) out, in loops
  // vectorised along their rows; several seeds at once (a Lane) are vectorised across the seeds
  // and read the terms, on the entries needed only
  if constexpr (std::is_floating_point_v<T>) {
    adj_M.write(s.adj_M, nv, nv);
    adj_J.write(s.adj_J, nrow, nv);
    const DenseEntries<T, RowsPtr<L, const T>> rows{s.adj_J, nv};
    adj_row_jacobians(m, qpos, qvel, w, c, cv, nrow, rows, s, a, adj_qpos, adj_qvel, adj_contact);
  } else {
    adj_row_jacobians(m, qpos, qvel, w, c, cv, nrow, adj_J, s, a, adj_qpos, adj_qvel, adj_contact);
  }
}

// The rest of that adjoint, of fixed structure, after adj_constrained_rows: the mass matrix
// (its adjoint as entries, adj_M: s.adj_M written out or the terms themselves; the terms in
// terms, which the implicitfast step reads), the bias forces (adj_bias), the applied forces
// (adj_qfrc), then the kinematic chain: to adj_qpos, adj_qvel, adj_ctrl and the model
// parameters, accumulated. adj_crba runs first, while a.cinert is clean.
template <class T, class S, class AdjM>
PHX_HD void adj_constrained_dynamics(const ModelView<S>& m, const T* qpos, const T* qvel,
                                     const T* ctrl, Workspace<S>& w, AdjWorkspace<T>& a,
                                     const AdjM& adj_M, const OuterSum<T, 4>& terms,
                                     const T* adj_bias, const T* adj_qfrc, T* adj_qpos, T* adj_qvel,
                                     T* adj_ctrl, const ModelAdjoint<T>& adj_model) {
  const int nv = m.nv;
  const T dt = m.timestep;
  adj_crba(m, w, a, adj_M, adj_model);
  if (m.integrator == kIntegratorImplicitFast) {
    // M is implicit.h's H = crba - dt D: each term s u v^T of adj_M adds -dt s u^T D v's
    // gradient (a step's seeds in lanes, LaneReplay, do not take implicitfast steps)
    if constexpr (std::is_same_v<S, T>)
      for (int k = 0; k < terms.n; ++k)
        adj_velocity_slope(m, qpos, qvel, ctrl, w, a, -dt * terms.s[k], terms.u[k], terms.v[k],
                           w.implicit_row, w.implicit_u, w.implicit_v, adj_qpos, adj_qvel, adj_ctrl,
                           adj_model);
  } else if (adj_model.dof_damping) {
    for (int d = 0; d < nv; ++d) adj_model.dof_damping[d] += dt * adj_M(d, d);
  }
  adj_rnea(m, qvel, static_cast<const T*>(nullptr), w, a, adj_bias, adj_qvel,
           static_cast<T*>(nullptr));
  adj_passive(m, qpos, qvel, w, a, adj_qfrc, adj_qpos, adj_qvel, adj_model);
  adj_actuation(m, qpos, qvel, ctrl, w, a, adj_qfrc, adj_qpos, adj_qvel, adj_ctrl, adj_model);
  adj_tendon_kinematics(m, w, a, adj_qpos);
  adj_com_vel(m, qvel, w, a, adj_qvel);
  adj_com_pos(m, w, a, adj_model);
  adj_kinematics(m, qpos, w, a, adj_qpos, adj_model.mocap_pos, adj_model.mocap_quat,
                 adj_model.body_pos);
}

// adj_constrained_dynamics after adj_constrained_rows, on the adjoint of the mass matrix the
// latter left (adj_M's terms, written out in s.adj_M for one seed)
template <class T, class S, class L>
PHX_HD PHX_DEVICE_NOINLINE void adj_constrained_rest(
    const ModelView<S>& m, const T* qpos, const T* qvel, const T* ctrl, Workspace<S>& w,
    AdjWorkspace<T>& a, const AdjConstraintWorkspace<T, L>& s, const OuterSum<T, 4>& adj_M,
    T* adj_qpos, T* adj_qvel, T* adj_ctrl, const ModelAdjoint<T>& adj_model) {
  if constexpr (std::is_floating_point_v<T>)
    adj_constrained_dynamics(m, qpos, qvel, ctrl, w, a, DenseEntries<T>{s.adj_M, m.nv}, adj_M,
                             s.adj_bias, s.adj_qfrc, adj_qpos, adj_qvel, adj_ctrl, adj_model);
  else
    adj_constrained_dynamics(m, qpos, qvel, ctrl, w, a, adj_M, adj_M, s.adj_bias, s.adj_qfrc,
                             adj_qpos, adj_qvel, adj_ctrl, adj_model);
}

// The reverse pass of a replayed constrained step as its stages see it: the step's inputs, the
// replay's workspaces (w, c, cv), the adjoint's (a, s) and what the stages accumulate into. The
// stages that call others in sequence take it by reference: on the GPU it stays in memory across
// their calls, where their fifteen arguments would be saved to spill slots around each call.
template <class T, class S, class L>
struct ReplayedPass {
  const ModelView<S>& m;
  const T* qpos;
  const T* qvel;
  const T* ctrl;
  Workspace<S>& w;
  ConstraintWorkspace<S, L>& c;
  const ContactView<S>& cv;
  AdjWorkspace<T>& a;
  AdjConstraintWorkspace<T, L>& s;
  T* adj_qpos;
  T* adj_qvel;
  T* adj_ctrl;
  const ModelAdjoint<T>& adj_model;
  const ContactModelAdjoint<T>& adj_contact;
  T* adj_qfrc;
};

// The adjoint of qvel' = vfree + M^-1 J^T f onward, with g = adjoint of qvel' in s.g: its
// stages that depend on the rows, then the rest (above)
template <class T, class S, class L>
PHX_HD PHX_DEVICE_NOINLINE void adj_constrained_velocity(const ReplayedPass<T, S, L>& p) {
  OuterSum<T, 4> adj_M;
  adj_constrained_rows(p.m, p.qpos, p.qvel, p.w, p.c, p.cv, p.a, p.s, p.adj_qpos, p.adj_qvel,
                       p.adj_contact, p.adj_qfrc, adj_M);
  adj_constrained_rest(p.m, p.qpos, p.qvel, p.ctrl, p.w, p.a, p.s, adj_M, p.adj_qpos, p.adj_qvel,
                       p.adj_ctrl, p.adj_model);
}

// The contacts that bounced in the forward step: the bounce branch of build_rows (e J qvel below
// the push-out) with the normal row clamping. Their rows go to rows (normal row indices) and
// their restitution to e (pointers of any kind); returns their count.
template <class T, class S, class L, class C, class I, class R>
PHX_HD int bouncing_contacts(const ModelView<S>& m, const T* qvel,
                             const ConstraintWorkspace<T, L>& c, const ContactView<T>& cv, C cls,
                             I rows, R e) {
  int n = 0, row = 0;
  for (int i = 0; i < *cv.ncon; ++i) {
    int g1 = cv.geom[2 * i], g2 = cv.geom[2 * i + 1];
    T ei = m.geom_restitution[pair_max_geom(m.geom_restitution, 1, g1, g2)];
    T vn = T(0);
    for (int d = 0; d < m.nv; ++d) vn += c.J[long(row) * m.nv + d] * qvel[d];
    if (normal_correction(m, vn, ei, cv.dist[i]).bounces() &&
        (cls[row] & kLcpClassMask) == kLcpClamping) {
      rows[n] = row;
      e[n++] = ei;
    }
    row += contact_rows(m, cv.geom, i);
  }
  return n;
}

// The bounce correction's own term, once the step's adjoint has run on u with its state
// adjoints held apart. The contacts that bounced are found again (the LCP adjoint used c.lcp);
// lam solves G lam = rhs, G_ik = (J_i . J_k)^2, rhs_i = -(1 + e_i) |J_i|^2 (minimum norm: equal
// rows make G singular); then (X - I)^T u = sum_k lam_k J_k (J_k . u) gives X^T u into
// adj_qvel and, / dt, the tangent of qpos. c.lcp holds the restitutions, G, its decomposition
// and rhs, no more than the LCP's factored form of nb <= nefc rows (lcp_storage).
template <class T, class L>
PHX_HD PHX_DEVICE_NOINLINE void adj_bounce_velocity(const ModelView<T>& m, const T* qpos,
                                                    const T* qvel, ConstraintWorkspace<T, L>& c,
                                                    const ContactView<T>& cv,
                                                    AdjConstraintWorkspace<T, L>& s, T* adj_qpos,
                                                    T* adj_qvel) {
  const int nv = m.nv;
  const RowsPtr<L, int> brow = c.ilcp;
  const RowsPtr<L, T> be = c.lcp;
  const int nb = bouncing_contacts(m, qvel, c, cv, s.cls, brow, be);
  auto arena = rows_arena<T>(be + nb, brow + nb);
  const RowsPtr<L, T> G = arena.template take_rows<T>(long(nb) * nb);
  Cod<T, L> cod = cod_carve(nb, arena);
  const RowsPtr<L, T> lam = arena.template take_rows<T>(nb);
  for (int i = 0; i < nb; ++i) {
    const RowsPtr<L, const T> Ji = c.J + long(brow[i]) * nv;
    for (int k = 0; k < nb; ++k) {
      const RowsPtr<L, const T> Jk = c.J + long(brow[k]) * nv;
      T dot(0);
      for (int d = 0; d < nv; ++d) dot += Ji[d] * Jk[d];
      G[i * nb + k] = dot * dot;
      if (i == k) lam[i] = -(T(1) + be[i]) * dot;
    }
  }
  cod_factor(cod, G, lcp_rank_tol<T>());
  cod_solve(cod, lam);
  for (int d = 0; d < nv; ++d) s.tmp[d] = T(0);
  for (int k = 0; k < nb; ++k) {
    const RowsPtr<L, const T> Jk = c.J + long(brow[k]) * nv;
    T ju(0);
    for (int d = 0; d < nv; ++d) ju += Jk[d] * s.u[d];
    for (int d = 0; d < nv; ++d) s.tmp[d] += lam[k] * ju * Jk[d];
  }
  for (int d = 0; d < nv; ++d) adj_qvel[d] += s.u[d] + s.tmp[d];
  for (int d = 0; d < nv; ++d) s.tmp[d] /= m.timestep;
  adj_tangent_to_qpos(m, qpos, s.tmp, adj_qpos);
}

// The velocity adjoints of a step whose contacts bounced (adj_step_constrained_replayed's
// bounce correction, after its position update into s.u): the step's adjoint of adj_qvel'
// alone, then of u with its state adjoints held apart and replaced by X's
template <class T, class L>
PHX_HD PHX_DEVICE_NOINLINE void adj_bounced_step(const ReplayedPass<T, T, L>& p,
                                                 const T* adj_qvel_next) {
  const ModelView<T>& m = p.m;
  AdjConstraintWorkspace<T, L>& s = p.s;
  for (int d = 0; d < m.nv; ++d) s.g[d] = adj_qvel_next[d];
  adj_constrained_velocity(p);
  for (int i = 0; i < m.nq; ++i) s.hold_qpos[i] = T(0);
  for (int d = 0; d < m.nv; ++d) {
    s.hold_qvel[d] = T(0);
    s.g[d] = s.u[d];
  }
  ReplayedPass<T, T, L> held = p;
  held.adj_qpos = s.hold_qpos;
  held.adj_qvel = s.hold_qvel;
  adj_constrained_velocity(held);
  adj_bounce_velocity(m, p.qpos, p.qvel, p.c, p.cv, s, p.adj_qpos, p.adj_qvel);
}

}  // namespace detail

// The share of adj_step_constrained_replayed (below) of a step with rows, without the bounce
// correction, that depends on the rows: from the adjoints of the state after the step through
// qpos' (u = dt P^T adj_qpos' into s.u) and adj_constrained_rows. What remains,
// adj_constrained_rest, reads a, s and adj_M, and is of fixed structure: the CPU's packs of
// environments run this lane by lane and that on SIMD lanes (host/pack_kernels.h).
template <class T, class S, class L>
PHX_HD void adj_step_rows(const ModelView<S>& m, const T* qpos, const T* qvel, Workspace<S>& w,
                          ConstraintWorkspace<S, L>& c, const ContactView<S>& cv,
                          AdjWorkspace<T>& a, AdjConstraintWorkspace<T, L>& s,
                          const T* adj_qpos_next, const T* adj_qvel_next, T* adj_qpos, T* adj_qvel,
                          const ContactModelAdjoint<T>& adj_contact, T* adj_qfrc,
                          OuterSum<T, 4>& adj_M) {
  detail::adj_position_update(m, qpos, s, adj_qpos_next, adj_qpos);
  for (int d = 0; d < m.nv; ++d) s.g[d] = adj_qvel_next[d] + s.u[d];
  detail::adj_constrained_rows(m, qpos, qvel, w, c, cv, a, s, adj_qpos, adj_qvel, adj_contact,
                               adj_qfrc, adj_M);
}

// What the many reverse passes of a replayed constrained step share (a Jacobian's rows, s.base
// bound), computed once after the replay (step_constrained): Z = M^-1 J^T of its rows, into
// s.Z, and the LCP adjoint's factorisation of the replay's classification (the one the solver
// left in c.lcp when it is that classification's: the stabilised solvers'). Nothing for a single
// pass (s.base unbound), which is cheaper without them. Runs right after step_constrained.
template <class T, class L>
PHX_HD PHX_DEVICE_NOINLINE void adj_constrained_prepare(const ModelView<T>& m,
                                                        ConstraintWorkspace<T, L>& c,
                                                        const ContactView<T>& cv,
                                                        AdjConstraintWorkspace<T, L>& s) {
  if (!s.shared() || *cv.nefc == 0) return;
  delassus_rows(m, *cv.nefc, c, s.Z);
  const LcpProblem<T, L> p = lcp_problem(*cv.nefc, c);
  detail::replay_classification(m, p, cv.efc_force, cv, s.base_cls);
  int known_rank = m.lcp_solver == kLcpPgs ? -1 : c.factored_rank;
  lcp_adjoint_factor_explicit(p, cv.efc_force, s.base_cls, lcp_rank_tol<T>(), s.base, c.lcp,
                              c.ilcp, known_rank);
}

// The reverse part of adj_step_constrained (below, with the options it implements), after
// step_constrained has run from (qpos, qvel, ctrl) into s.qpos_next, s.qvel_next, w, c and cv
// (and did not stop) and adj_constrained_prepare after it. It leaves those unchanged, so it
// may run again with other seeds: one replay serves every row of a Jacobian.
// The step's scalar S (of the model, workspaces and contacts) is T, or (several seeds in
// lanes, LaneReplay) the replay's own, its forward values read in place: then the step had
// rows (a step without recomputes articulated-body arrays in w, which needs S = T) and the
// pass is the plain one of the replay's shared factorisation (neither contact-gradient option,
// whose passes depend on their seed).
template <class T, class S, class L>
PHX_HD PHX_DEVICE_NOINLINE void adj_step_constrained_replayed(
    const ModelView<S>& m, const T* qpos, const T* qvel, const T* ctrl, Workspace<S>& w,
    ConstraintWorkspace<S, L>& c, const ContactView<S>& cv, AdjWorkspace<T>& a,
    AdjConstraintWorkspace<T, L>& s, const T* adj_qpos_next, const T* adj_qvel_next, T* adj_qpos,
    T* adj_qvel, T* adj_ctrl, const ModelAdjoint<T>& adj_model,
    const ContactModelAdjoint<T>& adj_contact, T* adj_qfrc) {
  // qpos' = qpos (+) dt qvel': u = dt P^T adj_qpos', the direct term into adj_qpos; then one
  // adj_constrained_velocity per path (on the GPU, adj_step_rows and adj_constrained_rest
  // inlined apart hold more in registers across the split)
  if constexpr (!std::is_same_v<S, T>) {
    detail::adj_position_update(m, qpos, s, adj_qpos_next, adj_qpos);
    for (int d = 0; d < m.nv; ++d) s.g[d] = adj_qvel_next[d] + s.u[d];
    detail::adj_constrained_velocity(
        detail::ReplayedPass<T, S, L>{m, qpos, qvel, ctrl, w, c, cv, a, s, adj_qpos, adj_qvel,
                                      adj_ctrl, adj_model, adj_contact, adj_qfrc});
  } else {
    const int nv = m.nv, nrow = *cv.nefc;
    if (nrow == 0) {
      // no rows: the step was step() itself, and left forward_dynamics' results in w
      adj_step_replayed(m, qpos, qvel, ctrl, w, a, adj_qpos_next, adj_qvel_next, adj_qpos,
                        adj_qvel, adj_ctrl, adj_model, adj_qfrc);
      return;
    }
    // bouncing contacts, counted in c.lcp (free until the LCP adjoint)
    int nb = 0;
    if (m.contact_gradient & kGradBounceCorrection) {
      detail::replay_classification(m, lcp_problem(nrow, c), cv.efc_force, cv, s.cls);
      nb = detail::bouncing_contacts(m, qvel, c, cv, s.cls, c.ilcp, c.lcp);
    }
    detail::adj_position_update(m, qpos, s, adj_qpos_next, adj_qpos);
    const detail::ReplayedPass<T, S, L> pass{m,        qpos,     qvel,      ctrl,        w,
                                             c,        cv,       a,         s,           adj_qpos,
                                             adj_qvel, adj_ctrl, adj_model, adj_contact, adj_qfrc};
    if (nb == 0) {
      for (int d = 0; d < nv; ++d) s.g[d] = adj_qvel_next[d] + s.u[d];
      detail::adj_constrained_velocity(pass);
      return;
    }
    detail::adj_bounced_step(pass, adj_qvel_next);
  }
}

// One environment's step for its reverse pass (adj_step_env, adj_step_constrained): the state
// before it (q, v and, with activation state, act: na, may be null when m.na = 0) and its
// controls u; the adjoints of the state after it (gq_next, gv_next, ga_next); where the adjoints
// of its inputs (gq, gv, ga, gc) and of the parameters (am, ac) accumulate; gf, the adjoint of
// qfrc_applied (the step's added generalized force; either may be null); and `known`, the
// replay's LCP solution when the caller has it. Its callers keep it in memory: on the GPU the
// reverse pass reads it back after each of its large calls instead of saving every pointer
// around them.
template <class T>
struct StepEnvAdjoint {
  const T *q, *v, *act, *u;
  const T *gq_next, *gv_next, *ga_next;
  T *gq, *gv, *ga, *gc;
  const ModelAdjoint<T>* am = nullptr;
  const ContactModelAdjoint<T>* ac = nullptr;
  T* gf = nullptr;
  LcpSolution<T> known{};
  const T* qfrc_applied = nullptr;
};

// Adjoint of one step_constrained, the step p describes with the actuators' inputs `input` for
// its controls (p.u itself without activation state; p.u, p.gc, p.act, p.ga_next and p.ga are
// not read): replays the forward from (p.q, p.v, input) and the previous step's rows in cv
// (efc_key, efc_force, efc_class and nefc as they were before the forward step, for the same
// warm start), then maps (p.gq_next, p.gv_next) to p.gq, p.gv, g_input (the inputs' adjoint),
// the model parameters of *p.am (body_mass, body_inertia, dof_damping, dof_armature,
// jnt_stiffness, actuator_gear, body_ipos) and the contact parameters of *p.ac (sliding
// friction and restitution of each geom, through the pair's maximum, and geom sizes through
// the contact geometry) and p.gf (the adjoint of p.qfrc_applied, a generalized force the step
// added to the applied ones; either may be null), all accumulated. Inputs are not modified; w,
// c and cv are left as the forward step leaves them (cv holds this step's contacts and rows).
// Returns the status bits of the replayed step; when it stops (NaN state or result, singular
// mass matrix) nothing is accumulated. p.known is the step's LCP solution when the caller has
// it (a tape's next record), see step_constrained; `detect` where the replay's contacts come
// from (step_constrained's). p stays in the caller's memory: on the GPU, the pass reads its
// pointers back after the replay, where as arguments of their own they would go beyond the
// registers that carry a call's arguments, through the stack.
//
// m.contact_gradient selects Nimble's options (Werling et al. 2021, section IV):
// - kGradComplementarityAware: the LCP adjoint also runs on the loss-driven classification
//   (lcp_classify_loss with dl/dv = J adj_qvel'), and the classification with the larger
//   ||adj_vfree||^2 + dt ||M^-1 adj_vfree||^2 is kept (Nimble's ||dl/dqd||^2 + ||dl/dtau||^2 / dt,
//   evaluated at vfree, where the classification enters).
// - kGradBounceCorrection: when contacts bounced (bouncing_contacts), the Jacobian of qpos' with
//   respect to the state is replaced, in tangent coordinates, by X = I + sum_k lam_k J_k^T J_k,
//   the matrix nearest the identity (Frobenius) with J_i X J_i^T / |J_i|^2 = -e_i for each
//   bouncing normal row J_i: sum_k lam_k (J_i . J_k)^2 = -(1 + e_i) |J_i|^2. Then dq'/dq = X and
//   dq'/dqd = dt X; the velocity Jacobians and all parameter and control gradients are those of
//   the step. In reverse: with u = dt (dq'/dqd')^T adj_qpos' (adj_integrate_pos), adj_qvel gets
//   X^T u and adj_qpos its direct term plus (X - I)^T u / dt mapped to qpos (a quaternion's
//   tangent adjoint w gives 2 q (0, w)), in place of the step's (dqd'/d(q, qd))^T u.
template <class T, class L, class Detect = DetectInStep>
PHX_HD PHX_DEVICE_NOINLINE unsigned adj_step_constrained(const ModelView<T>& m, Workspace<T>& w,
                                                         ConstraintWorkspace<T, L>& c,
                                                         ContactView<T>& cv, AdjWorkspace<T>& a,
                                                         AdjConstraintWorkspace<T, L>& s,
                                                         const StepEnvAdjoint<T>& p, const T* input,
                                                         T* g_input, const Detect& detect = {}) {
  // replay the forward step (without solving its LCP again when the solution is known)
  for (int i = 0; i < m.nq; ++i) s.qpos_next[i] = p.q[i];
  for (int d = 0; d < m.nv; ++d) s.qvel_next[d] = p.v[d];
  unsigned status = step_constrained(m, s.qpos_next, s.qvel_next, input, w, c, cv, p.known,
                                     p.qfrc_applied, for_reverse(detect));
  if (status & kStatusStopMask) return status;
  adj_constrained_prepare(m, c, cv, s);
  adj_step_constrained_replayed(m, p.q, p.v, input, w, c, cv, a, s, p.gq_next, p.gv_next, p.gq,
                                p.gv, g_input, *p.am, *p.ac, p.gf);
  return status;
}

// The scratch of a step's adjoint: the step's (StepScratch), then the adjoint workspace, the
// adjoint of the actuators' inputs and, with constraint rows, its constraint part, whose rows
// are laid out by Layout as the step's are.
template <class T, class Layout = Contiguous>
struct AdjointScratch : StepScratch<T, Layout> {
  AdjWorkspace<T> a;
  T* adj_input = nullptr;  // (nu) with activation state
  AdjConstraintWorkspace<T, Layout> s{};
  XpbdAdjArrays<T> xpbd_adj{};  // with the XPBD solver: its adjoints and its record
  XpbdRecord<T> xpbd_record{};

  template <class M>
  PHX_HD static AdjointScratch carve(const M& m, Arena<T, Layout>& arena) {
    return carved_in_place<AdjointScratch>(m, arena);
  }
  template <class M>
  PHX_HD void carve_in(const M& m, Arena<T, Layout>& arena) {
    StepScratch<T, Layout>::carve_in(m, arena);
    carve_part(&a, m, arena);
    adj_input = arena.take_fixed(m.na > 0 ? m.nu : 0);
    if (m.nefcmax > 0) carve_part(&s, m, arena);
    if constexpr (std::is_floating_point_v<T>) {
      if (m.solver == kSolverXpbd) {
        carve_part(&xpbd_adj, m, arena);
        carve_part(&xpbd_record, m, arena);
      }
    }
  }
};

// The adjoint of one step (step_env's) as s describes it; cv holds the warm start the step
// inherited (unused without constraint rows). The replay's contacts come from `detect`, as
// step_env's. Returns the replayed step's status.
template <class T, class Layout, class Detect = DetectInStep>
PHX_HD PHX_DEVICE_NOINLINE unsigned adj_step_env(const ModelView<T>& m,
                                                 AdjointScratch<T, Layout>& x, ContactView<T>& cv,
                                                 const StepEnvAdjoint<T>& s,
                                                 const Detect& detect = {}) {
  const T* input = s.u;
  T* g_input = s.gc;
  if (m.na > 0) {
    if (unsigned bits = activation_input_status(m, s.u, s.act)) return bits;
    actuator_inputs(m, s.u, s.act, x.input);
    for (int i = 0; i < m.nu; ++i) x.adj_input[i] = T(0);
    input = x.input;
    g_input = x.adj_input;
  }
  unsigned status = 0;
  if (m.solver == kSolverXpbd) {
    status = step_input_status(m, s.q, s.v, input, s.qfrc_applied);
    if (status) return status;
    if constexpr (kXpbdCompiled)
      adj_xpbd_step(m, s.q, s.v, input, x.w, x.a, xpbd_arrays(m, x, cv), x.xpbd_adj, x.xpbd_record,
                    m.xpbd_substeps, m.xpbd_iterations, s.qfrc_applied, s.gq_next, s.gv_next, s.gq,
                    s.gv, g_input, *s.am, s.gf, XpbdJointSolver(m.xpbd_joint_solver));
    else
      return kStatusStopMask;  // not reached: the host refuses such a model (kXpbdCompiled)
  } else if (m.nefcmax == 0) {
    adj_step(m, s.q, s.v, input, x.w, x.a, s.gq_next, s.gv_next, s.gq, s.gv, g_input, *s.am, s.gf,
             s.qfrc_applied);
  } else {
    status = adj_step_constrained(m, x.w, x.c, cv, x.a, x.s, s, input, g_input, detect);
  }
  if (m.na > 0 && !(status & kStatusStopMask))
    adj_activation(m, s.u, s.act, x.adj_input, s.ga_next, s.gc, s.ga);
  return status;
}

}  // namespace phx
