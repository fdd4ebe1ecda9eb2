// Reverse passes of one replayed constrained step on kLanes<T> seeds at once (host only).
//
// The one-step Jacobians (StepJacobianKernel) run one reverse pass per row of qvel', each a
// vector-Jacobian product with a unit seed through the same replayed step. LaneReplay runs
// adj_step_constrained_replayed itself on W seeds per pass, lane k carrying seed k (lane.h),
// over the replay's own forward arrays: the stage adjoints take the step's scalar as a second
// template parameter (ModelView<S>, Workspace<S>, ConstraintWorkspace<S>, ContactView<S>) and
// read the model, workspaces and contacts in place, each value broadcast as it is loaded
// (Vec3<L>::load of a T*, dot_n of a T* and an L*, ...). Only what the pass keeps as arrays of
// lanes is copied once (qvel', the impulses and vfree of the outer-product terms, the LCP
// adjoint's shared factorisation and Z). Copying the whole step into lanes
// instead cost the half-cheetah's Jacobian 10 % (the workspace 5 %, the constraint part 4-5 %,
// the model 0-2 %, and 4 % with per-environment parameters, whose model was broadcast per
// call). A step without rows (LaneDynamicsReplay) computes its articulated-body arrays again in
// lanes, from the model and workspace in lane form. The results equal W scalar passes up to
// the rounding of fused multiply-adds.
#pragma once

#if defined(__CUDACC__)
#error "phalanx/lane_adjoint.h is for host code"
#endif

#include <vector>

#include "phalanx/constraint_adjoint.h"
#include "phalanx/math/lane.h"
#include "phalanx/tape.h"

namespace phx {

// the real-valued arrays of a ModelView, counted
template <class T>
PHX_HD long model_reals(const ModelView<T>& m) {
  return 2L * m.nq + 19L * m.nbody + 9L * m.njnt + 2L * m.nv + 15L * m.ngeom + 3L * m.nu;
}

// r <- m's counts, options and integer arrays (r's real arrays are left as they are)
template <class T, int W>
void lane_model_scalars(const ModelView<T>& m, ModelView<Lane<T, W>>& r) {
  r.nq = m.nq, r.nv = m.nv, r.nu = m.nu, r.nbody = m.nbody, r.njnt = m.njnt, r.ngeom = m.ngeom;
  r.timestep = m.timestep;
  for (int i = 0; i < 3; ++i) r.gravity[i] = m.gravity[i];
  r.contact = m.contact, r.limit = m.limit, r.lcp_solver = m.lcp_solver;
  r.lcp_iterations = m.lcp_iterations;
  r.lcp_tolerance = m.lcp_tolerance, r.lcp_residual_limit = m.lcp_residual_limit;
  r.contact_gradient = m.contact_gradient;
  r.erp = m.erp, r.slop = m.slop;
  r.npair = m.npair, r.nconmax = m.nconmax, r.nefcmax = m.nefcmax;
  r.body_parentid = m.body_parentid, r.body_rootid = m.body_rootid;
  r.body_jntnum = m.body_jntnum, r.body_jntadr = m.body_jntadr;
  r.body_dofnum = m.body_dofnum, r.body_dofadr = m.body_dofadr;
  r.jnt_type = m.jnt_type, r.jnt_bodyid = m.jnt_bodyid;
  r.jnt_qposadr = m.jnt_qposadr, r.jnt_dofadr = m.jnt_dofadr;
  r.jnt_limited = m.jnt_limited;
  r.dof_bodyid = m.dof_bodyid, r.dof_jntid = m.dof_jntid, r.dof_parentid = m.dof_parentid;
  r.geom_type = m.geom_type, r.geom_bodyid = m.geom_bodyid, r.geom_condim = m.geom_condim;
  r.pair_geom = m.pair_geom;
  for (int k = 0; k < kNumParams; ++k) r.param_nbatch[k] = 0;
  r.actuator_trnid = m.actuator_trnid, r.actuator_ctrllimited = m.actuator_ctrllimited;
}

// m with every real broadcast to W lanes (arrays into storage p, advanced past them); every
// parameter a single copy (m is one environment's view)
template <class T, int W>
ModelView<Lane<T, W>> lane_model(const ModelView<T>& m, Lane<T, W>*& p) {
  using L = Lane<T, W>;
  ModelView<L> r;
  auto put = [&p](const T* from, long n) {
    L* to = p;
    for (long i = 0; i < n; ++i) to[i] = L(from[i]);
    p += n;
    return static_cast<const L*>(to);
  };
  lane_model_scalars(m, r);
  r.qpos0 = put(m.qpos0, m.nq);
  r.qpos_spring = put(m.qpos_spring, m.nq);
  r.body_pos = put(m.body_pos, 3L * m.nbody);
  r.body_quat = put(m.body_quat, 4L * m.nbody);
  r.body_ipos = put(m.body_ipos, 3L * m.nbody);
  r.body_iquat = put(m.body_iquat, 4L * m.nbody);
  r.body_mass = put(m.body_mass, m.nbody);
  r.body_inertia = put(m.body_inertia, 3L * m.nbody);
  r.jnt_pos = put(m.jnt_pos, 3L * m.njnt);
  r.jnt_axis = put(m.jnt_axis, 3L * m.njnt);
  r.jnt_stiffness = put(m.jnt_stiffness, m.njnt);
  r.jnt_range = put(m.jnt_range, 2L * m.njnt);
  r.dof_armature = put(m.dof_armature, m.nv);
  r.dof_damping = put(m.dof_damping, m.nv);
  r.geom_size = put(m.geom_size, 3L * m.ngeom);
  r.geom_pos = put(m.geom_pos, 3L * m.ngeom);
  r.geom_quat = put(m.geom_quat, 4L * m.ngeom);
  r.geom_friction = put(m.geom_friction, 3L * m.ngeom);
  r.geom_rbound = put(m.geom_rbound, m.ngeom);
  r.geom_restitution = put(m.geom_restitution, m.ngeom);
  r.actuator_gear = put(m.actuator_gear, m.nu);
  r.actuator_ctrlrange = put(m.actuator_ctrlrange, 2L * m.nu);
  return r;
}

// A model's reals broadcast to kLanes<T> lanes once, for the lane passes of steps without rows
// (LaneDynamicsReplay) of every call on it whose environments share its parameters (no
// per-environment copies): a compiled model on the host keeps one (DeviceModel), and its
// Jacobians skip the broadcast (lane_model) per call.
template <class T>
struct LaneModel {
  using L = Lane<T, kLanes<T>>;
  std::vector<L> reals;
  ModelView<L> view;

  explicit LaneModel(const ModelView<T>& m) : reals(model_reals(m)) {
    L* p = reals.data();
    view = lane_model(m, p);
  }
  // whether the environments of m (a view of the model this was built from) all have its
  // parameters
  static bool shared(const ModelView<T>& m) {
    for (int k = 0; k < kNumParams; ++k)
      if (m.param_nbatch[k] > 1) return false;
    return true;
  }
};

// What every reverse pass on W seeds needs: the model (its scalar view, read in place), the
// state the step started from, the seeds and one pass's adjoints, carved from storage aligned
// for the vector type (the derived replays take their own arrays from the same storage, past
// these).
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
  // reals of the arrays above in units of L, and one more for the alignment
  static long lanes(const ModelView<T>& m) {
    return 2L * (m.nq + m.nv) + m.nu + cols(m) + jacobian_nparam(m) + 1;
  }

 protected:
  L* p_ = nullptr;  // the storage not taken yet

  L* take(long n) {
    L* r = p_;
    p_ += n;
    return r;
  }
  L* put(const T* from, long n) {
    L* to = take(n);
    for (long i = 0; i < n; ++i) to[i] = L(from[i]);
    return to;
  }
  // the arrays above over storage (units of T), from the model m0 and the step's start
  void bind(const ModelView<T>& m0, T* storage, const T* qpos0, const T* qvel0,
            const T* ctrl0) {
    auto addr = reinterpret_cast<unsigned long>(storage);
    p_ = reinterpret_cast<L*>((addr + alignof(L) - 1) / alignof(L) * alignof(L));
    m = m0;
    qpos = put(qpos0, m0.nq);
    qvel = put(qvel0, m0.nv);
    ctrl = put(ctrl0, m0.nu);
    seed_qpos = take(m0.nq);
    seed_qvel = take(m0.nv);
    out = take(cols(m0) + jacobian_nparam(m0));
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

  // storage for a model of m's capacities: reals in units of T, ints
  static ScratchSize size(const ModelView<T>& m) {
    const long nv = m.nv, ne = m.nefcmax;
    ScratchSize adj = AdjConstraintWorkspace<T>::size(m);
    ScratchSize factor = AdjConstraintWorkspace<T>::factor_size(m);
    long lanes = Base::lanes(m) + 2 * nv + 5 * ne +
                 AdjWorkspace<T>::size(m.nbody, m.njnt, m.nv) + adj.reals + factor.reals;
    return {W * lanes, adj.ints + factor.ints};
  }

  // Binds over storage (size(m0)) the step replayed from (qpos0, qvel0, ctrl0) on the model m0
  // as it left w0, c0, cv0 and, shared by reverse passes, s0 (adj_constrained_prepare); they
  // outlive this, and the passes leave them unchanged.
  LaneReplay(const ModelView<T>& m0, Scratch<T> storage, const T* qpos0, const T* qvel0,
             const T* ctrl0, const Workspace<T>& w0, const ConstraintWorkspace<T>& c0,
             const ContactView<T>& cv0, const AdjConstraintWorkspace<T>& s0) {
    const int nc = *cv0.ncon, nr = *cv0.nefc, nv = m0.nv;
    this->bind(m0, storage.reals, qpos0, qvel0, ctrl0);
    int* q = storage.ints;
    m.nconmax = nc;
    m.nefcmax = nr;
    w = w0;
    c = c0;
    cv = cv0;

    a = AdjWorkspace<L>::carve(this->take(AdjWorkspace<L>::size(m.nbody, m.njnt, nv)), m.nbody,
                               m.njnt, nv);
    ScratchSize adj = AdjConstraintWorkspace<L>::size(m);
    s = AdjConstraintWorkspace<L>::carve(m, this->take(adj.reals), q);
    q += adj.ints;
    s.qpos_next = nullptr;  // the replayed pass does not read qpos'
    s.qvel_next = this->put(s0.qvel_next, nv);
    s.efc_force = this->put(cv0.efc_force, nr);
    s.vfree = this->put(c0.vfree, nv);
    s.lcp = this->take(4L * nr);
    ScratchSize factor = AdjConstraintWorkspace<L>::factor_size(m);
    s.bind_factor(m, this->take(factor.reals), q);
    const LcpAdjointFactor<T>& F0 = s0.base;
    LcpAdjointFactor<L>& F = s.base;
    F.m = F0.m;
    F.nnull = F0.nnull;
    F.cls = s.base_cls;
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

  static ScratchSize size(const ModelView<T>& m) {
    return {W * (Base::lanes(m) + model_reals(m) + Workspace<T>::size(m.nbody, m.njnt, m.nv) +
                 AdjWorkspace<T>::size(m.nbody, m.njnt, m.nv)),
            0};
  }

  // over storage (size(m0)); the model's reals are those of `shared` when non-null (a
  // LaneModel's view of m0's model), else broadcast here
  LaneDynamicsReplay(const ModelView<T>& m0, const ModelView<L>* shared, Scratch<T> storage,
                     const T* qpos0, const T* qvel0, const T* ctrl0, const Workspace<T>& w0) {
    this->bind(m0, storage.reals, qpos0, qvel0, ctrl0);
    if (shared) {
      lm = *shared;
      lane_model_scalars(m0, lm);
    } else {
      lm = lane_model(m0, this->p_);
    }
    const int nb = m0.nbody, nj = m0.njnt, nv = m0.nv;
    w = Workspace<L>::carve(this->take(Workspace<L>::size(nb, nj, nv)), nb, nj, nv);
    StepStore<L>::save_workspace(w0, w, nv);
    a = AdjWorkspace<L>::carve(this->take(AdjWorkspace<L>::size(nb, nj, nv)), nb, nj, nv);
  }

  // as LaneReplay::run (a pass without rows has no contact parameters' adjoints)
  void run(int d0, int n, bool params) {
    this->run_pass(d0, n, params, [this](auto& am, auto&, L* gq, L* gv, L* gc, L* gf) {
      adj_step_replayed(lm, this->qpos, this->qvel, this->ctrl, w, a, this->seed_qpos,
                        this->seed_qvel, gq, gv, gc, am, gf);
    });
  }
};

}  // namespace phx
