// Reverse passes of one replayed constrained step on kLanes<T> seeds at once (host only).
//
// The one-step Jacobians (phalanx/jacobian.h) run one reverse pass per row of qvel', each a
// vector-Jacobian product with a unit seed through the same replayed step. LaneReplay runs
// adj_step_constrained_replayed itself on W seeds per pass, lane k carrying seed k (lane.h),
// over the replay's own forward arrays: the stage adjoints take the step's scalar as a second
// template parameter (ModelView<S>, Workspace<S>, ConstraintWorkspace<S>, ContactView<S>) and
// read the model, workspaces and contacts in place, each value broadcast as it is loaded
// (Vec3<L>::load of a T*, dot_n of a T* and an L*, ...). Only what the pass keeps as arrays of
// lanes is copied once (qvel', the impulses and vfree of the outer-product terms, the LCP
// adjoint's shared factorisation and Z), which is cheaper than copying the whole step into
// lanes. A step without rows (LaneDynamicsReplay) computes its articulated-body arrays again in
// lanes, from the model and workspace in lane form. The results equal W scalar passes up to
// the rounding of fused multiply-adds. LaneRows, at the end, is the CPU backend's way of
// running a Jacobian kernel's rows of qvel' through these passes.
#pragma once

#if defined(__CUDACC__)
#error "host/lane_adjoint.h is for host code"
#endif

#include <vector>

#include "host/lane.h"
#include "phalanx/kernels/jacobian.h"
#include "phalanx/tape.h"

namespace phx {

// m with every real broadcast to the lanes of L (a Lane or a Pack), the arrays taken from arena
// (a counting Arena measures them: model_reals(m)); every parameter a single copy (m is one
// environment's view)
template <class T, class L>
ModelView<L> lane_model(const ModelView<T>& m, Arena<L>& arena) {
  ModelView<L> r = convert_view<L>(m, [&arena](const T* from, long n, auto) {
    L* to = arena.template take<L>(n);
    for (long i = 0; to && i < n; ++i) to[i] = L(from[i]);
    return static_cast<const L*>(to);
  });
  for (int k = 0; k < kNumBatched; ++k) r.param_nbatch[k] = 0;
  return r;
}

// A model's reals broadcast to kLanes<T> lanes once, for every call on it whose environments
// share its parameters (no per-environment copies): a compiled model on the host keeps one
// (DeviceModel), so that neither its Jacobians' lane passes of steps without rows
// (LaneDynamicsReplay, on `view`) nor its forward steps of several environments per pass
// (host/pack_kernels.h, on `pack`) broadcast it per call.
template <class T>
struct LaneModel {
  using L = Lane<T, kLanes<T>>;
  using P = Pack<T, kLanes<T>>;
  std::vector<L> reals;
  ModelView<L> view;
  std::vector<P> pack_reals;
  ModelView<P> pack;

  explicit LaneModel(const ModelView<T>& m) : reals(model_reals(m)), pack_reals(reals.size()) {
    Arena<L> arena(reals.data(), nullptr);
    view = lane_model(m, arena);
    Arena<P> pack_arena(pack_reals.data(), nullptr);
    pack = lane_model(m, pack_arena);
  }
  // whether the environments of m (a view of the model this was built from) all have its
  // parameters
  static bool shared(const ModelView<T>& m) {
    for (int k = 0; k < kNumBatched; ++k)
      if (m.param_nbatch[k] > 1) return false;
    return true;
  }
};

// What every reverse pass on W seeds needs: the model (its scalar view, read in place), the
// state the step started from, the seeds and one pass's adjoints. The derived replays take
// these and their own arrays from one Arena of lanes (carve) over storage aligned for the
// vector type, so that their size (storage_size) is that carve run on a counting Arena.
template <class T, int W>
struct LanePass {
  using L = Lane<T, W>;
  ModelView<T> m;
  L *qpos = nullptr, *qvel = nullptr, *ctrl = nullptr;  // the state the step started from
  L *seed_qpos = nullptr, *seed_qvel = nullptr;         // seeds (nq, nv)
  // adjoints of one pass, laid out as a row of StepJacobianKernel's jac and jac_param:
  // qpos (nq), qvel (nv), ctrl (nu), qfrc (nv), then the parameters (jacobian_nparam)
  L* out = nullptr;

  static int cols(const ModelView<T>& m) { return m.nq + 2 * m.nv + m.nu; }

 protected:
  // the arrays above from arena
  void carve(const ModelView<T>& m0, Arena<L>& arena) {
    qpos = arena.template take<L>(m0.nq);
    qvel = arena.template take<L>(m0.nv);
    ctrl = arena.template take<L>(m0.nu);
    seed_qpos = arena.template take<L>(m0.nq);
    seed_qvel = arena.template take<L>(m0.nv);
    out = arena.template take<L>(cols(m0) + jacobian_nparam(m0));
  }
  // an Arena of lanes over storage (units of T), its start aligned for L
  static Arena<L> aligned(Scratch<T> storage) {
    auto addr = reinterpret_cast<unsigned long>(storage.reals);
    return {reinterpret_cast<L*>((addr + alignof(L) - 1) / alignof(L) * alignof(L)),
            storage.ints};
  }
  // storage (reals in units of T, one lane more for the alignment) of what a carve took
  static ScratchSize storage_size(const Arena<L>& counted) {
    return {W * (counted.nreal + 1), counted.nint};
  }
  // the model and the step's start
  void bind(const ModelView<T>& m0, const T* qpos0, const T* qvel0, const T* ctrl0) {
    m = m0;
    broadcast(qpos0, m0.nq, qpos);
    broadcast(qvel0, m0.nv, qvel);
    broadcast(ctrl0, m0.nu, ctrl);
  }
  static void broadcast(const T* from, long n, L* to) {
    for (long i = 0; i < n; ++i) to[i] = L(from[i]);
  }
  // One reverse pass, of seeds adj_qvel' = e_(d0 + k) in lane k < n (the other lanes zero)
  // and adj_qpos' = 0, into out (zeroed first; the parameters' adjoints too when params):
  // pass(am, ac, adj_qpos, adj_qvel, adj_ctrl, adj_qfrc) runs it on the seeds
  template <class Pass>
  void run_pass(int d0, int n, bool params, Pass pass) {
    const int nq = m.nq, nv = m.nv, nu = m.nu, ncol = nq + 2 * nv + nu;
    for (int i = 0; i < nq; ++i) seed_qpos[i] = L(0);
    for (int d = 0; d < nv; ++d) seed_qvel[d] = L(0);
    for (int k = 0; k < n; ++k) seed_qvel[d0 + k].set(k, T(1));
    const int np = params ? jacobian_nparam(m) : 0;
    for (int i = 0; i < ncol + np; ++i) out[i] = L(0);
    ModelAdjoint<L> am{};
    ContactModelAdjoint<L> ac{};
    L* p = out + ncol;
    for (int k = 0; params && k < kNumParams; p += param_size(m, k), ++k)
      param_adjoint(am, ac, k) = p;
    pass(am, ac, out, out + nq, out + nq + nv, out + nq + nv + nu);
  }
};

// A replayed constrained step and its reverse pass on W seeds of qvel' at once: the model, the
// workspaces and the contacts are the replay's, read in place; what the pass keeps in lane form
// is copied (qvel', the impulses and vfree for the outer-product terms, the LCP adjoint's shared
// factorisation and Z).
template <class T, int W = kLanes<T>>
struct LaneReplay : LanePass<T, W> {
  using Base = LanePass<T, W>;
  using L = Lane<T, W>;
  using Base::m;
  Workspace<T> w{};
  ConstraintWorkspace<T> c{};
  ContactView<T> cv{};
  AdjWorkspace<L> a{};
  AdjConstraintWorkspace<L> s{};
  L* efc_force = nullptr;  // the step's impulses, broadcast (nefc)
  L* vfree = nullptr;      // its unconstrained velocity, broadcast (nv)

  // storage for a model of m's capacities: reals in units of T, ints
  static ScratchSize size(const ModelView<T>& m) {
    LaneReplay counted;
    Arena<L> counting;
    counted.carve(m, counting);
    return Base::storage_size(counting);
  }

  // Binds over storage (size(m0)) the step replayed from (qpos0, qvel0, ctrl0) on the model m0
  // as it left w0, c0, cv0 and, shared by reverse passes, s0 (adj_constrained_prepare); they
  // outlive this, and the passes leave them unchanged.
  LaneReplay(const ModelView<T>& m0, Scratch<T> storage, const T* qpos0, const T* qvel0,
             const T* ctrl0, const Workspace<T>& w0, const ConstraintWorkspace<T>& c0,
             const ContactView<T>& cv0, const AdjConstraintWorkspace<T>& s0) {
    const int nr = *cv0.nefc, nv = m0.nv;
    // the step's own counts of contacts and rows
    ModelView<T> step = m0;
    step.nconmax = *cv0.ncon;
    step.nefcmax = nr;
    Arena<L> arena = Base::aligned(storage);
    carve(step, arena);
    this->bind(step, qpos0, qvel0, ctrl0);
    w = w0;
    c = c0;
    cv = cv0;
    s.qpos_next = nullptr;  // the replayed pass does not read qpos'
    Base::broadcast(s0.qvel_next, nv, s.qvel_next);
    Base::broadcast(cv0.efc_force, nr, efc_force);
    Base::broadcast(c0.vfree, nv, vfree);
    s.efc_force = efc_force;
    s.vfree = vfree;
    const LcpAdjointFactor<T>& F0 = s0.base;
    LcpAdjointFactor<L>& F = s.base;
    F.m = F0.m;
    F.nnull = F0.nnull;
    for (int j = 0; j < nr; ++j) {
      F.pos[j] = F0.pos[j];
      s.base_cls[j] = s0.base_cls[j];
    }
    for (int i = 0; i < F0.m; ++i) {
      F.cidx[i] = F0.cidx[i];
      F.z[i] = L(F0.z[i]);
    }
    for (long i = 0; i < long(F0.m) * F0.m; ++i) F.pinv_t[i] = L(F0.pinv_t[i]);
    for (long i = 0; i < long(F0.m) * F0.nnull; ++i) F.null_basis[i] = L(F0.null_basis[i]);
    for (long i = 0; i < long(nr) * nv; ++i) s.Z[i] = L(s0.Z[i]);
  }

  // The reverse pass of seeds adj_qvel' = e_(d0 + k) in lane k < n (the other lanes zero),
  // adj_qpos' = 0, into out; the parameters' adjoints when params.
  void run(int d0, int n, bool params) {
    this->run_pass(d0, n, params, [this](auto& am, auto& ac, L* gq, L* gv, L* gc, L* gf) {
      adj_step_constrained_replayed(m, this->qpos, this->qvel, this->ctrl, w, c, cv, a, s,
                                    this->seed_qpos, this->seed_qvel, gq, gv, gc, am, ac, gf);
    });
  }

 private:
  LaneReplay() = default;
  // the lane arrays for a step of m1's counts of contacts and rows: the pass's, the adjoint
  // workspaces, the broadcast impulses and vfree, adj_lcp's vectors and the shared
  // factorisation
  void carve(const ModelView<T>& m1, Arena<L>& arena) {
    Base::carve(m1, arena);
    a = AdjWorkspace<L>::carve(m1, arena);
    s = AdjConstraintWorkspace<L>::carve(m1, arena);
    efc_force = arena.template take<L>(m1.nefcmax);
    vfree = arena.template take<L>(m1.nv);
    s.lcp = LcpAdjointScratch<L>::carve(m1.nefcmax, arena);
    s.bind_factor(m1, arena);
  }
};

// A step without constraint rows (step(), or a step_constrained that had none) in lane form:
// the workspace forward_dynamics left, and its reverse pass (adj_step_replayed) on W seeds of
// qvel' at once. The articulated-body arrays are not copied: the pass computes them again, in
// lanes, from the model in lane form (lm).
template <class T, int W = kLanes<T>>
struct LaneDynamicsReplay : LanePass<T, W> {
  using Base = LanePass<T, W>;
  using L = Lane<T, W>;
  ModelView<L> lm;  // the model, its reals broadcast
  Workspace<L> w{};
  AdjWorkspace<L> a{};

  // storage for a model of m's sizes, with room for its reals broadcast
  static ScratchSize size(const ModelView<T>& m) {
    LaneDynamicsReplay counted;
    Arena<L> counting;
    counted.carve(m, nullptr, counting);
    return Base::storage_size(counting);
  }

  // over storage (size(m0)); the model's reals are those of `shared` when non-null (a
  // LaneModel's view of m0's model), else broadcast here
  LaneDynamicsReplay(const ModelView<T>& m0, const ModelView<L>* shared, Scratch<T> storage,
                     const T* qpos0, const T* qvel0, const T* ctrl0, const Workspace<T>& w0) {
    Arena<L> arena = Base::aligned(storage);
    carve(m0, shared, arena);
    this->bind(m0, qpos0, qvel0, ctrl0);
    StepStore<L>::save_workspace(w0, w, m0.nv);
  }

  // as LaneReplay::run (a pass without rows has no contact parameters' adjoints)
  void run(int d0, int n, bool params) {
    this->run_pass(d0, n, params, [this](auto& am, auto&, L* gq, L* gv, L* gc, L* gf) {
      adj_step_replayed(lm, this->qpos, this->qvel, this->ctrl, w, a, this->seed_qpos,
                        this->seed_qvel, gq, gv, gc, am, gf);
    });
  }

 private:
  LaneDynamicsReplay() = default;
  // the pass's arrays, the model in lanes (shared's reals, else broadcast into arena), the
  // workspace and the adjoint workspace
  void carve(const ModelView<T>& m0, const ModelView<L>* shared, Arena<L>& arena) {
    Base::carve(m0, arena);
    if (shared) {
      lm = convert_view<L>(m0, [shared](const T*, long, auto member) { return shared->*member; });
      for (int k = 0; k < kNumBatched; ++k) lm.param_nbatch[k] = 0;
    } else {
      lm = lane_model(m0, arena);
    }
    w = Workspace<L>::carve(m0, arena);
    a = AdjWorkspace<L>::carve(m0, arena);
  }
};

// The CPU backend's rows of a Jacobian kernel (StepJacobianKernel<T, LaneRows<T>>): the rows
// of qvel' kLanes<T> per reverse pass, by LaneReplay after a step with rows and
// LaneDynamicsReplay after one without; a last row alone is left to the kernel's single pass
// (a third of a lane pass's time).
template <class T>
struct LaneRows {
  // the model's reals in lanes, which the passes of steps without rows take when the
  // environments share the model's parameters (may be null: broadcast per call)
  const LaneModel<T>* lane_model = nullptr;

  // storage past JacobianScratch's
  static ScratchSize scratch_size(const ModelView<T>& m) {
    ScratchSize a = LaneReplay<T>::size(m), b = LaneDynamicsReplay<T>::size(m);
    return {a.reals > b.reals ? a.reals : b.reals, a.ints > b.ints ? a.ints : b.ints};
  }

  // The first rows of qvel' of one environment's J and Jp (may be null) after the replay js of
  // the step from (q, v, u) on its model m (model: all environments'), over storage rest.
  // Returns how many.
  int operator()(const ModelView<T>& model, const ModelView<T>& m, const T* q, const T* v,
                 const T* u, JacobianScratch<T>& js, Scratch<T> rest, T* J, T* Jp) const {
    const int nl = m.nv % kLanes<T> == 1 ? m.nv - 1 : m.nv;
    if (nl == 0) return 0;
    // the lane passes' contact adjoint reads geom sizes only: meshes and height fields take the
    // kernel's single passes
    if (m.nmesh + m.nhfield > 0 && m.nefcmax > 0 && *js.cv.ncon > 0) return 0;
    // the implicitfast step's reverse pass differentiates velocity slopes on nested Dual
    // numbers, which the lanes do not carry: its rows take the single passes
    if (m.integrator == kIntegratorImplicitFast) return 0;
    if (m.solver == kSolverXpbd) return 0;  // XPBD's reverse pass runs on Dual numbers too
    if (m.nefcmax > 0 && *js.cv.nefc > 0) {
      fill(m, LaneReplay<T>(m, rest, q, v, u, js.x.w, js.x.c, js.cv, js.x.s), nl, J, Jp);
    } else {
      // no rows: the step was forward_dynamics' (step_constrained leaves the same)
      const ModelView<Lane<T, kLanes<T>>>* shared =
          lane_model && LaneModel<T>::shared(model) ? &lane_model->view : nullptr;
      fill(m, LaneDynamicsReplay<T>(m, shared, rest, q, v, u, js.x.w), nl, J, Jp);
    }
    return nl;
  }

 private:
  // rows nq .. nq + nl of J and Jp, kLanes<T> per reverse pass of the replay lr
  template <class Replay>
  static void fill(const ModelView<T>& m, Replay&& lr, int nl, T* J, T* Jp) {
    const int cols = jacobian_cols(m), np = Jp ? jacobian_nparam(m) : 0;
    constexpr int W = kLanes<T>;
    for (int d0 = 0; d0 < nl; d0 += W) {
      const int n = nl - d0 < W ? nl - d0 : W;
      lr.run(d0, n, np > 0);
      for (int k = 0; k < n; ++k) {
        const long r = m.nq + d0 + k;
        T* row = J + r * cols;
        for (int i = 0; i < cols; ++i) row[i] = lr.out[i][k];
        T* prow = np ? Jp + r * np : nullptr;
        for (int i = 0; i < np; ++i) prow[i] = lr.out[cols + i][k];
      }
    }
  }
};

}  // namespace phx
