// One-step Jacobians from the adjoints (Nimble's Jacobians, Werling et al. 2021, by reverse
// mode). The step is replayed once from a cold start; every row of qvel' is then one reverse
// pass of that replay with a unit seed (adj_step_replayed without rows,
// adj_step_constrained_replayed with), sharing the replay's factorisations. The rows of
// qpos' = integrate(qpos, qvel') follow by the chain rule,
//   d qpos'_r / dx = (d qpos'_r / d qpos)|direct + (d qpos'_r / d qvel') d qvel' / dx,
// both factors from adj_integrate_pos with seed e_r, when the step's adjoint is linear in its
// seed; with either contact-gradient option it is not (the classification or the bounce
// correction depends on the seed), and each row of qpos' gets its own reverse pass too.
//
// A row of one environment's Jacobian holds d out_r / d(qpos, qvel, ctrl, qfrc) (jacobian_cols
// of them), qfrc the generalized force added to the step's applied forces, and its parameter
// row d out_r / d(parameters) in Param order (jacobian_nparam).
#pragma once

#include "phalanx/constraint_adjoint.h"

namespace phx {

// columns of a Jacobian row: qpos, qvel, ctrl, qfrc
template <class T>
PHX_HD int jacobian_cols(const ModelView<T>& m) {
  return m.nq + 2 * m.nv + m.nu;
}

// One environment's scratch for its Jacobians: a step adjoint's, then (with rows) the LCP
// adjoint's factorisation the rows share (bound into x.s) and the replay's contact arrays, then
// the seeds of a reverse pass (nq + nv).
template <class T>
struct JacobianScratch {
  AdjointScratch<T> x;
  ContactView<T> cv{};
  T* seed;
  const T* added = nullptr;  // the replay's added force (XPBD's row passes replay it again)

  template <class M>
  PHX_HD static JacobianScratch carve(const M& m, Arena<T>& arena) {
    return carved_in_place<JacobianScratch>(m, arena);
  }
  template <class M>
  PHX_HD void carve_in(const M& m, Arena<T>& arena) {
    carve_part(&x, m, arena);
    if (m.nefcmax > 0) {
      x.s.bind_factor(m, arena);
      carve_part(&cv, m, arena);
    }
    seed = arena.template take<T>(m.nq + m.nv);
  }

  // whether every row's reverse pass is linear in its seed (no contact-gradient option) and
  // qpos' = integrate(qpos, qvel') (not XPBD's), so that the rows of qpos' follow from those of
  // qvel' (qpos_rows)
  PHX_HD static bool linear(const ModelView<T>& m) {
    return m.solver != kSolverXpbd &&
           !(m.contact_gradient & (kGradComplementarityAware | kGradBounceCorrection));
  }

  // The replay every row's pass reuses, from (q, v, u) and the added force f (may be null):
  // step_dynamics without rows (and qvel' into x.a.qvel_next), else a cold-started
  // step_constrained (qpos', qvel' into x.s, its contacts from detect) and its shared
  // factorisations. Returns whether
  // the step stopped (non-finite values): its rows are zero then, as step_vjp gives. A device
  // function of its own, as row_pass: ptxas allocates registers for each apart, rather than
  // for one kernel that inlines a forward step and a reverse pass in a loop (whose optimised
  // compile did not finish in 70 CPU-minutes).
  template <class Detect = DetectInStep>
  PHX_HD PHX_DEVICE_NOINLINE bool replay(const ModelView<T>& m, const T* q, const T* v, const T* u,
                                         const T* f, const Detect& detect = {}) {
    if constexpr (std::is_floating_point_v<T> && kXpbdCompiled) {
      if (m.solver == kSolverXpbd) {  // each row's pass (adj_xpbd_step) replays the step again
        added = f;
        T *qn = x.xpbd_adj.qpos_a, *vn = x.xpbd_adj.qvel;
        for (int i = 0; i < m.nq; ++i) qn[i] = q[i];
        for (int i = 0; i < m.nv; ++i) vn[i] = v[i];
        return step_xpbd(m, qn, vn, u, x, cv, f) & kStatusStopMask;
      }
    }
    if (m.nefcmax == 0) {
      if (!step_dynamics(m, q, v, u, x.w, x.w.qacc, f)) return true;
      for (int d = 0; d < m.nv; ++d) x.a.qvel_next[d] = v[d] + m.timestep * x.w.qacc[d];
      return false;
    }
    *cv.nefc = 0;  // cold start, as step() from Python
    for (int i = 0; i < m.nq; ++i) x.s.qpos_next[i] = q[i];
    for (int i = 0; i < m.nv; ++i) x.s.qvel_next[i] = v[i];
    bool stopped = step_constrained(m, x.s.qpos_next, x.s.qvel_next, u, x.w, x.c, cv, {}, f,
                                    for_reverse(detect)) &
                   kStatusStopMask;
    if (!stopped) adj_constrained_prepare(m, x.c, cv, x.s);
    return stopped;
  }

  // qvel' of the replay
  PHX_HD const T* qvel_next(const ModelView<T>& m) const {
    return m.nefcmax > 0 ? x.s.qvel_next : x.a.qvel_next;
  }

  // What the passes of one environment share: one struct in memory, which the kernel reads
  // back after each pass (on CUDA a call that needs nearly every register) instead of saving
  // its values around the call
  struct RowPasses {
    const ModelView<T>* m;
    const T *q, *v, *u;
    T *jac, *jac_param;  // the environment's rows (jacobian_cols and jacobian_nparam each)
    int r, end;          // the next row passed and the end of the rows passed
    bool stopped;        // whether the replay stopped
  };

  // Row p.r of (qpos', qvel') by its own reverse pass of the replay into its row of p.jac
  // (zeroed first) and, when p.jac_param is non-null, its row of that (zeroed first); left zero
  // when the step stopped.
  PHX_HD PHX_DEVICE_NOINLINE void row_pass(const RowPasses& p) {
    const ModelView<T>& m = *p.m;
    const T *q = p.q, *v = p.v, *u = p.u;
    const int rows = m.nq + m.nv, cols = jacobian_cols(m), np = jacobian_nparam(m), r = p.r;
    T* row = p.jac + long(r) * cols;
    for (int i = 0; i < rows; ++i) seed[i] = T(i == r);
    for (int i = 0; i < cols; ++i) row[i] = T(0);
    ModelAdjoint<T> am{};
    ContactModelAdjoint<T> ac{};
    if (p.jac_param) {
      T* prow = p.jac_param + long(r) * np;
      for (int i = 0; i < np; ++i) prow[i] = T(0);
      for (int k = 0; k < kNumParams; prow += param_size(m, k), ++k)
        param_adjoint(am, ac, k) = prow;
    }
    if (p.stopped) return;
    T *gq = row, *gv = row + m.nq, *gc = gv + m.nv, *gf = gc + m.nu;
    if constexpr (std::is_floating_point_v<T> && kXpbdCompiled) {
      if (m.solver == kSolverXpbd) {
        adj_xpbd_step(m, q, v, u, x.w, x.a, xpbd_arrays(m, x, cv), x.xpbd_adj, x.xpbd_record,
                      m.xpbd_substeps, m.xpbd_iterations, added, seed, seed + m.nq, gq, gv, gc, am,
                      gf, XpbdJointSolver(m.xpbd_joint_solver));
        return;
      }
    }
    if (m.nefcmax == 0) {
      adj_step_replayed(m, q, v, u, x.w, x.a, seed, seed + m.nq, gq, gv, gc, am, gf);
    } else {
      adj_step_constrained_replayed(m, q, v, u, x.w, x.c, cv, x.a, x.s, seed, seed + m.nq, gq,
                                    gv, gc, am, ac, gf);
    }
  }

  // Rows 0..nq of one environment's p.jac ((nq + nv) x jacobian_cols) and p.jac_param ((nq + nv)
  // x jacobian_nparam, may be null) from its rows of qvel' (linear passes, by the chain rule): a
  // row of qpos' moves with its joint's coordinates and dofs alone, so each row's pass of
  // adj_integrate_pos runs on its joint. Zero rows when the step stopped.
  PHX_HD PHX_DEVICE_NOINLINE void qpos_rows(const RowPasses& p) {
    const ModelView<T>& m = *p.m;
    const T* q = p.q;
    const bool stopped = p.stopped;
    T *jac = p.jac, *jac_param = p.jac_param;
    const int cols = jacobian_cols(m), np = jacobian_nparam(m);
    const T* vnext = qvel_next(m);
    T* w = seed;
    T* du = seed + m.nq;  // d qpos'_r / d qvel'
    for (int i = 0; i < m.nq; ++i) w[i] = T(0);
    for (int d = 0; d < m.nv; ++d) du[d] = T(0);
    for (int j = 0; j < m.njnt; ++j) {
      const int qa = m.jnt_qposadr[j], da = m.jnt_dofadr[j], type = m.jnt_type[j];
      for (int r = qa; r < qa + joint_nq(type); ++r) {
        T* row = jac + long(r) * cols;
        T* prow = jac_param ? jac_param + long(r) * np : nullptr;
        for (int i = 0; i < cols; ++i) row[i] = T(0);
        for (int i = 0; prow && i < np; ++i) prow[i] = T(0);
        if (stopped) continue;
        w[r] = T(1);
        adj_integrate_pos(m, q, vnext, m.timestep, w, row, du, j, j + 1);
        w[r] = T(0);
        for (int d = da; d < da + joint_nv(type); ++d) {
          const T* vrow = jac + long(m.nq + d) * cols;
          for (int i = 0; i < cols; ++i) row[i] += du[d] * vrow[i];
          if (prow) {
            const T* vprow = jac_param + long(m.nq + d) * np;
            for (int i = 0; i < np; ++i) prow[i] += du[d] * vprow[i];
          }
          du[d] = T(0);
        }
      }
    }
  }
};

}  // namespace phx
