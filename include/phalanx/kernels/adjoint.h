// Reverse kernels: the vector-Jacobian product of one step and the backward pass of a taped
// rollout.
#pragma once

#include "phalanx/kernels/common.h"
#include "phalanx/tape.h"

namespace phx {

template <class T>
PHX_HD ScratchSize adjoint_scratch_size(const ModelView<T>& m) {
  return carved_size<AdjointScratch<T>, T>(m);
}

// vector-Jacobian product of one step: (adj_qpos_next, adj_qvel_next, adj_act_next) at (qpos,
// qvel, act, ctrl) -> adjoints of the inputs and, per environment, of the model parameters (null
// skips one).
// The step is replayed from the warm start in con (a cold start when it holds no rows), its
// constraint workspace's strided arrays laid out by the scratch's Layout, as the forward
// kernels lay theirs out. On CUDA the replay's narrowphase runs in stages of its own before it
// (kernels/common.h: staged launches).
template <class T>
struct StepAdjointKernel {
  using Scalar = T;
  ModelView<T> model;  // env_view gives each environment its parameters
  const T* qpos;           // (nenv x nq)
  const T* qvel;           // (nenv x nv)
  const T* ctrl;           // (nenv x nu)
  const T* adj_qpos_next;  // (nenv x nq)
  const T* adj_qvel_next;  // (nenv x nv)
  T* adj_qpos;             // (nenv x nq), overwritten
  T* adj_qvel;             // (nenv x nv), overwritten
  T* adj_ctrl;             // (nenv x nu), overwritten
  ModelAdjoint<T> adj_model;          // per-env arrays (nenv x field size), overwritten
  ContactModelAdjoint<T> adj_contact; // per-env arrays (nenv x field size), overwritten
  ContactData<T> con;                 // contact storage of the replay (with constraints)
  T* adj_qfrc_applied = nullptr;      // (nenv x nv), overwritten; may be null
  const T* qfrc_applied = nullptr;    // (nenv x nv) the steps' added forces, may be null
  // (nenv x nbody x 6) the steps' added forces and torques on the bodies, may be null; then
  // qfrc_total (nenv x nv) holds the generalized force of both and adj_qfrc_applied is required
  const T* xfrc_applied = nullptr;
  T* adj_xfrc_applied = nullptr;  // (nenv x nbody x 6), overwritten; may be null
  T* qfrc_total = nullptr;
  // with activation state (na > 0; else null): the activations before the step, the adjoint of
  // those after it (may be null: zero) and the adjoint of those before it, overwritten
  const T* act = nullptr;           // (nenv x na)
  const T* adj_act_next = nullptr;  // (nenv x na)
  T* adj_act = nullptr;             // (nenv x na)

  template <class Layout>
  PHX_HD void operator()(int e, Scratch<T, Layout> scratch) const {
    steps(e, scratch, 0, 1, DetectInStep{});
  }

  // its step's reverse pass, step [0, 1), the replay's contacts from detect
  template <class Layout, class Detect>
  PHX_HD void steps(int e, Scratch<T, Layout> scratch, int, int, const Detect& detect) const {
    const ModelView<T> m = env_view(model, e);
    Arena<T, Layout> arena(scratch);
    AdjointScratch<T, Layout> x;
    carve_into(&x, m, arena);
    StepEnvAdjoint<T> s{qpos + long(e) * m.nq,          qvel + long(e) * m.nv,
                        env_row(act, e, m.na),          ctrl + long(e) * m.nu,
                        adj_qpos_next + long(e) * m.nq, adj_qvel_next + long(e) * m.nv,
                        env_row(adj_act_next, e, m.na), adj_qpos + long(e) * m.nq,
                        adj_qvel + long(e) * m.nv,      env_row(adj_act, e, m.na),
                        adj_ctrl + long(e) * m.nu};
    for (int i = 0; i < m.nq; ++i) s.gq[i] = T(0);
    for (int i = 0; i < m.nv; ++i) s.gv[i] = T(0);
    for (int i = 0; i < m.nu; ++i) s.gc[i] = T(0);
    for (int i = 0; s.ga && i < m.na; ++i) s.ga[i] = T(0);
    ModelAdjoint<T> am;
    ContactModelAdjoint<T> ac;
    env_parameter_adjoints(m, e, adj_model, adj_contact, am, ac);
    s.am = &am;
    s.ac = &ac;
    ContactView<T> cv{};
    if (m.nefcmax > 0) cv = con.env(m, e);
    s.gf = env_row(adj_qfrc_applied, e, m.nv);
    for (int i = 0; s.gf && i < m.nv; ++i) s.gf[i] = T(0);
    const T* f = env_row(qfrc_applied, e, m.nv);
    const T* xf = env_row(xfrc_applied, e, 6 * m.nbody);
    T* total = env_row(qfrc_total, e, m.nv);
    if (xf) body_forces_to_qfrc(m, s.q, f, xf, x.w, total);
    s.qfrc_applied = xf ? total : f;
    const unsigned status = adj_step_env(m, x, cv, s, detect);
    if (!xf) return;
    T* gx = env_row(adj_xfrc_applied, e, 6 * m.nbody);
    for (int i = 0; gx && i < 6 * m.nbody; ++i) gx[i] = T(0);
    // the step accumulated nothing when it stopped (non-finite values)
    if (!(status & kStatusStopMask))
      adj_body_forces_to_qfrc(m, s.q, xf, x.w, x.a, s.gf, s.gq, gx, am);
  }
  // the narrowphase stages of its replay: the contacts at qpos, in the step's part of its scratch
  template <class Layout, class Found>
  PHX_HD void detect(int e, Scratch<T, Layout> scratch, int, const Found& found) const {
    const ModelView<T> m = env_view(model, e);
    Arena<T, Layout> arena(scratch);
    StepScratch<T, Layout> x = StepScratch<T, Layout>::carve(m, arena);
    detect_stage(m, qpos + long(e) * m.nq, x.w, x.c, found);
  }
  static constexpr bool kStaged = true;
  template <class Run>
  void staged(const StageMemory<T>& memory, Run&& run) const {
    stage_launches(*this, 1, memory, run);
  }
};

// RolloutAdjointKernel's scratch: a step adjoint's, then the state and adjoints the walk
// carries (TapeReverse) and nslot StepStore slots with room for ncon contacts and nrow rows each;
// the strided arrays of both laid out by Layout
template <class T, class Layout = Contiguous>
struct RolloutAdjointScratch {
  AdjointScratch<T, Layout> x;
  StepStore<T, Layout> store{};
  T *q, *v, *a, *gq, *gv, *ga, *hq, *hv, *ha;

  PHX_HD static RolloutAdjointScratch carve(const ModelView<T>& m, Arena<T, Layout>& arena,
                                            int nslot, int ncon, int nrow) {
    return carved_in_place<RolloutAdjointScratch>(m, arena, nslot, ncon, nrow);
  }
  PHX_HD void carve_in(const ModelView<T>& m, Arena<T, Layout>& arena, int nslot, int ncon,
                       int nrow) {
    carve_part(&x, m, arena);
    T** state[3][3] = {{&q, &v, &a}, {&gq, &gv, &ga}, {&hq, &hv, &ha}};
    for (auto& s : state) {
      *s[0] = arena.take_fixed(m.nq);
      *s[1] = arena.take_fixed(m.nv);
      *s[2] = arena.take_fixed(m.na);
    }
    if (nslot > 0) carve_part(&store, m, arena, nslot, ncon, nrow);
  }
};

template <class T>
PHX_HD ScratchSize rollout_adjoint_scratch_size(const ModelView<T>& m, int nslot, int ncon,
                                                int nrow) {
  return carved_size<RolloutAdjointScratch<T>, T>(m, nslot, ncon, nrow);
}

// The backward pass of a rollout recorded on a tape (tape.h): from the loss gradients with
// respect to every step's state to those of the initial state, of every step's control and,
// per environment, of the model parameters, segment by segment (TapeReverse). With slots
// (nslot = K, a model with rows and K > 1) the recomputation of a segment keeps what each step's
// reverse pass reads. An environment whose rollout stopped (a stopping status bit) gets zero
// gradients. The recomputed steps' constraint rows, the slots' and the replays' are laid out by
// the scratch's Layout.
template <class T>
struct RolloutAdjointKernel {
  using Scalar = T;
  ModelView<T> model;  // env_view gives each environment its parameters
  TapeView<T> tape;
  const T* ctrl;          // (nenv x nstep x nu) the rollout's controls
  const T* adj_qpos_out;  // (nenv x nstep x nq) dL / d(qpos after each step), may be null
  const T* adj_qvel_out;  // (nenv x nstep x nv), may be null
  T* adj_qpos;            // (nenv x nq) dL / d(initial qpos), overwritten
  T* adj_qvel;            // (nenv x nv)
  T* adj_ctrl;            // (nenv x nstep x nu), overwritten
  ModelAdjoint<T> adj_model;          // per-env arrays (nenv x field size), overwritten; with
                                      // tape.mocap, its poses' (nenv x nstep x nmocap x 3, x 4)
  ContactModelAdjoint<T> adj_contact; // per-env arrays (nenv x field size), overwritten
  ContactData<T> con;                 // contact storage of the replay
  int nslot = 0;                      // StepStore slots past the adjoint scratch: 0 or K
  int slot_ncon = 0, slot_nrow = 0;   // their room (the tape's peaks)
  const T* adj_act_out = nullptr;     // (nenv x nstep x na), may be null
  T* adj_act = nullptr;               // (nenv x na) dL / d(initial act), overwritten; may be null

  // One environment's backward pass, in the kernel's steps: begin() carves its scratch, zeroes
  // its outputs and binds its parameters' adjoints; reverse() is its walk (TapeReverse), bound
  // to them, whose run() recomputes and walks every segment; finish() writes the adjoints of the
  // initial state. The CPU's packs (host/pack_kernels.h) recompute a segment of several
  // environments at once on SIMD lanes and walk each from its records (Env: over Contiguous
  // scratch).
  template <class Layout>
  struct EnvOf {
    ModelView<T> m;
    RolloutAdjointScratch<T, Layout> r;
    ModelAdjoint<T> am;
    ContactModelAdjoint<T> ac;
    T* gc;     // the adjoints of its controls (nstep x nu)
    T* gm[2];  // of its mocap poses per step, when the tape has them
  };
  using Env = EnvOf<Contiguous>;

  template <class Layout>
  PHX_HD void begin(int e, Scratch<T, Layout> scratch, EnvOf<Layout>& v) const {
    v.m = model;
    env_view_in(v.m, e);
    const ModelView<T>& m = v.m;
    const int nstep = tape.nstep;
    Arena<T, Layout> arena(scratch);
    RolloutAdjointScratch<T, Layout>& r = v.r;
    carve_into(&r, m, arena, nslot, slot_ncon, slot_nrow);
    for (int i = 0; i < m.nq; ++i) r.gq[i] = T(0);
    for (int i = 0; i < m.nv; ++i) r.gv[i] = T(0);
    for (int i = 0; i < m.na; ++i) r.ga[i] = T(0);
    v.gc = adj_ctrl + long(e) * nstep * m.nu;
    for (long i = 0; i < long(nstep) * m.nu; ++i) v.gc[i] = T(0);
    // mocap poses given per step have their adjoints per step (nenv x nstep x nmocap x 3, x 4)
    // in place of the parameters'
    ModelAdjoint<T> all = adj_model;
    const long nm = long(nstep) * m.nmocap;
    v.gm[0] = tape.mocap.pos && all.mocap_pos ? all.mocap_pos + 3 * e * nm : nullptr;
    v.gm[1] = tape.mocap.quat && all.mocap_quat ? all.mocap_quat + 4 * e * nm : nullptr;
    if (tape.mocap.pos) all.mocap_pos = nullptr;
    if (tape.mocap.quat) all.mocap_quat = nullptr;
    for (long i = 0; v.gm[0] && i < 3 * nm; ++i) v.gm[0][i] = T(0);
    for (long i = 0; v.gm[1] && i < 4 * nm; ++i) v.gm[1][i] = T(0);
    env_parameter_adjoints(m, e, all, adj_contact, v.am, v.ac);
  }

  // whether environment e's rollout ran to its end (a stopped one gets zero gradients)
  PHX_HD bool live(int e) const { return !(tape.status[e] & kStatusStopMask); }

  // environment e's walk over v (begin's), which holds on to v
  template <class Layout>
  PHX_HD TapeReverse<T, Layout> reverse(int e, EnvOf<Layout>& v) const {
    RolloutAdjointScratch<T, Layout>& r = v.r;
    TapeReverse<T, Layout> walk{v.m,     tape,    e,    ctrl + long(e) * tape.nstep * v.m.nu,
                                r.x,     r.store, {},   r.q,
                                r.v,     r.a,     r.gq, r.gv,
                                r.ga,    r.hq,    r.hv, r.ha,
                                v.gm[0], v.gm[1]};
    if (v.m.nefcmax > 0) walk.cv = con.env(v.m, e);
    T* first[3];
    initial(e, v.m, first);
    walk.bind(loss(adj_qpos_out, e, v.m.nq), loss(adj_qvel_out, e, v.m.nv),
              loss(adj_act_out, e, v.m.na), v.gc, v.am, v.ac, first);
    return walk;
  }

  // environment e's rows of the initial state's adjoints: adj_qpos, adj_qvel, adj_act (or null)
  PHX_HD void initial(int e, const ModelView<T>& m, T* out[3]) const {
    out[0] = adj_qpos + long(e) * m.nq;
    out[1] = adj_qvel + long(e) * m.nv;
    out[2] = adj_act ? adj_act + long(e) * m.na : nullptr;
  }

  // environment e's rows of out, loss gradients of the state after each step (nstep x n), or
  // null
  PHX_HD const T* loss(const T* out, int e, int n) const {
    return out ? out + long(e) * tape.nstep * n : nullptr;
  }

  template <class Layout>
  PHX_HD void finish(int e, const EnvOf<Layout>& v) const {
    T* out[3];
    initial(e, v.m, out);
    copy_state(v.m, v.r.gq, v.r.gv, v.r.ga, out[0], out[1], out[2]);
  }

  // The walk's run() writes what finish() would as its last act, so that on CUDA the kernel ends
  // with the walk (tape.h: run). An environment whose rollout stopped gets begin's zeros.
  template <class Layout>
  PHX_HD void operator()(int e, Scratch<T, Layout> scratch) const {
    EnvOf<Layout> v;
    begin(e, scratch, v);
    if (!live(e)) return finish(e, v);
    reverse(e, v).run();
  }
};

#define PHX_STEP_ADJOINT_KERNELS(X) X(StepAdjointKernel<float>) X(StepAdjointKernel<double>)
#define PHX_ROLLOUT_ADJOINT_KERNELS(X) \
  X(RolloutAdjointKernel<float>) X(RolloutAdjointKernel<double>)

}  // namespace phx
