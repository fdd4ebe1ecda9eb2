// Forward steps of kLanes<T> environments per SIMD pass on the CPU: the rollout, step and planner
// sampling kernels on Pack<T, kLanes<T>> (host/lane.h).
//
// Each thread takes packs of W = kLanes<T> consecutive environments (16 in float, 8 in double
// with AVX-512) and moves their state into lanes (lane k: environment e0 + k). A model without
// constraint rows steps on the lanes with the core's step(), against the model broadcast once
// (LaneModel::pack). A model with rows runs the stages of its step of fixed structure on the
// lanes (smooth_kinematics, applied_forces_and_armature, unconstrained_acceleration,
// free_velocity: kinematics, inertias, the articulated-body and composite-inertia algorithms,
// the mass matrix's factor; and the geom poses and the broadphase) and those whose work depends on
// the environment's contacts (contact_rows, constrained_update: collision, rows, the LCP) one lane
// at a time, in the scalar core, on the lane's share of the lanes' results (the workspace arrays
// those stages read, PackStepper::lane_array, the acceleration, the factor, the free velocity and
// the geom poses, transposed once per pass) and of the broadphase's verdicts; but for the
// Delassus stage between the rows and the LCP (b, Y = L^-1 J^T, A = Y Y^T), which runs on the
// lanes too, each lane's rows padded with zero rows to the most any lane has, when the lanes'
// rows reach the same dof trees (always for a model of one tree), and after it PGS's dense
// sweeps, on the same padded rows (pgs_lanes, for the lanes whose solve begins with them).
//
// A pass in which every branch on the lanes was taken alike in all of them (lanes_diverged()
// stays clear) is each environment's scalar step bit for bit (host code is built without
// contracted multiply-adds); otherwise, and for any environment a status bit has stopped, the
// pack's environments take that step one at a time with the scalar kernel's step_env from the
// state saved before the pass. Environments past the last whole pack, and launches the packs do
// not cover (XPBD, activations, per-environment parameters, mocap sequences, body forces), run
// the scalar kernel. A rollout recording a tape saves its checkpoints lane by lane. This is host
// code that moves data and calls the core's stages: no physics is written here.
#pragma once

#include <omp.h>

#include <cstring>
#include <limits>
#include <vector>

#include "host/api.h"
#include "host/cpu_backend.h"
#include "host/lane_adjoint.h"
#include "phalanx/kernels/forward.h"
#include "phalanx/kernels/planner.h"

namespace phx::cpu {

// One thread's packs: the state of W environments in lanes and the workspaces of one pass on
// them, the scalar workspace of the per-lane stages, and the scalar scratch of the
// environments that step one at a time.
template <class T>
class PackStepper {
 public:
  static constexpr int W = kLanes<T>;
  using P = Pack<T, W>;

  // whether the packs step launches on m (all environments' view): shared parameters, no
  // XPBD, no activations
  static bool applies(const ModelView<T>& m) {
    return m.solver != kSolverXpbd && m.na == 0 && LaneModel<T>::shared(m);
  }

  // con: the environments' contact storage (used when m has constraint rows)
  PackStepper(const ModelView<P>& lanes, const ModelView<T>& m, const ContactData<T>& con)
      : lm_(lanes), m_(m), con_(con) {
    const long nq = m.nq, nv = m.nv, nu = m.nu;
    const ScratchSize scalar = scratch_size(m);
    const long rows = m.nefcmax > 0 ? nv * nv + 3 * nv + 12L * m.ngeom : 0;
    P* block = thread_block<P>(size_t(Workspace<P>::size(m) + 2 * (nq + nv) + nu + nv + rows));
    Arena<P> arena(block, nullptr);
    w_ = Workspace<P>::carve(m, arena);
    q_ = arena.template take<P>(nq);
    v_ = arena.template take<P>(nv);
    q0_ = arena.template take<P>(nq);
    v0_ = arena.template take<P>(nv);
    u_ = arena.template take<P>(nu);
    f_ = arena.template take<P>(nv);
    if (m.nefcmax > 0) {  // what free_velocity writes
      c_.L = arena.template take<P>(nv * nv);
      c_.vfree = arena.template take<P>(nv);
      c_.bias = arena.template take<P>(nv);
      c_.tmp = arena.template take<P>(nv);
      c_.geom_xpos = arena.template take<P>(3L * m.ngeom);  // geom_poses' for the broadphase
      c_.geom_xmat = arena.template take<P>(9L * m.ngeom);
      apart_.resize(size_t(W) * m.npair);
      none_.assign(size_t(m.npair), 0);
    }
    // the scalar steps' scratch, each lane's scratch of the per-lane stages, and each lane's
    // qpos and qvel
    T* reals = thread_block<T>(size_t((1 + W) * scalar.reals + W * (nq + nv)));
    int* ints = thread_block<int>(size_t((1 + W) * scalar.ints));
    x_ = step_scratch(m, Scratch<T>{reals, ints});
    q1_ = reals + (1 + W) * scalar.reals;
    if (m.nefcmax > 0) {
      // NaN in every array the per-lane stages neither get from the lanes nor write, so that
      // a stage reading one would give NaN, which the tests' bit-for-bit comparisons catch
      T* lane_reals = reals + scalar.reals;
      std::fill(lane_reals, lane_reals + W * scalar.reals, std::numeric_limits<T>::quiet_NaN());
      bind_lane_arrays();
      for (int k = 0; k < W; ++k) {
        h_[k] = step_scratch(
            m, Scratch<T>{lane_reals + k * scalar.reals, ints + (1 + k) * scalar.ints});
        for (const LaneArray& a : arrays_)
          a.in(h_[k]) = lane_arrays_.data() + k * lane_stride_ + a.offset;
      }
      // the rows of the Delassus stage on the lanes
      const long nr = m.nefcmax;
      rows_.resize(size_t(2 * nr * nv + nr * nr + nr));
      span_.resize(size_t(4 * nr));
      sweep_.resize(size_t(PgsLanes<P, W>::kArrays * nr));
      normal_.resize(size_t(W * nr));
    }
  }

  // environments e0 .. e0 + W - 1's rows of qpos and qvel (nenv x nq, nenv x nv) into the lanes
  void load(const T* qpos, const T* qvel, int e0) {
    e0_ = e0;
    gather(q_, qpos + long(e0) * m_.nq, m_.nq, m_.nq);
    gather(v_, qvel + long(e0) * m_.nv, m_.nv, m_.nv);
  }
  // the model in lanes it steps on
  const ModelView<P>& lane_model() const { return lm_; }
  // the pack's environments: e0 .. e0 + W - 1 (whose contacts contacts() gives)
  void place(int e0) { e0_ = e0; }
  // lane k's state <- (qpos, qvel)
  void load_lane(int k, const T* qpos, const T* qvel) {
    lane_in(qpos, k, q_, m_.nq);
    lane_in(qvel, k, v_, m_.nv);
  }
  // the lanes back into those rows (qpos, qvel, or rows of W trajectories of stride `stride`)
  void store_qpos(T* qpos, long stride) const { scatter(q_, qpos, stride, m_.nq); }
  void store_qvel(T* qvel, long stride) const { scatter(v_, qvel, stride, m_.nv); }
  // room for one environment's state (nq + nv), which step() overwrites
  T* scalar_state() const { return q1_; }
  // lane k's state (nq, nv)
  void lane_state(int k, T* qpos, T* qvel) const {
    lane_out(q_, k, qpos, m_.nq);
    lane_out(v_, k, qvel, m_.nv);
  }
  // lane k's contacts and rows (the model's constraint rows), where its steps leave them
  ContactView<T> contacts(int k) const {
    return m_.nefcmax > 0 ? con_.env(m_, e0_ + k) : ContactView<T>{};
  }

  // What a step keeps for a reverse pass, lane by lane (a backward pass recomputing a segment
  // of its tape, TapeReverse::recompute): lane k's step goes to slot `slot` of store[k] as the
  // scalar step_constrained and StepStore::save would put it there, and takes known[k] as its
  // LCP solution when that is given (the replay of a recorded step).
  // With `lanes` (room for a Workspace<P> per slot) the lanes' workspace of slot k is computed
  // in place at workspace(m, k) and kept there, in lanes, for a reverse pass on them
  // (PackWalk); the environments' slots then keep all but their workspace. Without, each
  // environment's slot keeps its whole step. A model without rows has no slots (store[k]
  // empty): its steps are kept in `lanes` alone.
  // With `rows` too, each slot's factor, free velocity and rows stay in lanes as well
  // (LaneRows).
  struct LaneRows;
  struct Keep {
    StepStore<T> store[W];
    LcpSolution<T> known[W];
    P* lanes = nullptr;
    LaneRows* rows = nullptr;
    // per slot of `lanes`: whether its workspace holds its step's articulated-body factorisation
    // (aba_U, aba_invD), which Euler's acceleration without rows leaves there on the lanes and
    // a reverse pass then reads (adj_step_replayed's factored); step() sets it
    bool* factored = nullptr;
    int slot = 0;
    // slot k's workspace in `lanes`
    static Workspace<P> workspace(const ModelView<T>& m, P* lanes, int k) {
      Arena<P> arena(lanes + k * Workspace<P>::size(m), nullptr);
      return Workspace<P>::carve(m, arena);
    }
  };
  // What a recomputed segment keeps in lanes of its steps' rows, for a reverse pass of their
  // rows' stages on the lanes (PackWalk): each slot's factor L and free velocity, computed in
  // place, and, where the Delassus stage ran on the lanes (lane_delassus), its rows (each lane's
  // padded with zero rows to the most any lane has) and their J and Y = L^-1 J^T, also computed
  // in place. Slots are kept first to last; their rows follow one another in one block, which
  // grows to the most a segment needs (the thread's, kept from pack to pack).
  struct LaneRows {
    LaneRows(const ModelView<T>& m, int nslot)
        : nv(m.nv), n(size_t(nslot), -1), at(size_t(nslot), 0), rows(block()) {
      struct Tag {};
      factor = thread_block<P, Tag>(size_t(nslot) * (long(nv) * nv + nv));
    }
    P* L(int k) const { return factor + k * (long(nv) * nv + nv); }
    P* vfree(int k) const { return L(k) + long(nv) * nv; }
    // slot k's J (n[k] x nv), followed by its Y, once kept (n[k] >= 0)
    P* J(int k) const { return rows.data() + at[size_t(k)]; }
    P* Y(int k) const { return J(k) + long(n[size_t(k)]) * nv; }
    // whether slot k's factor and rows are kept here only (not in the environments' slots,
    // StepStore::save_rows<true>): where its rows are, for a pass that reads them in
    // lanes (not the complementarity-aware one, which walks its rows lane by lane)
    bool only_here(const ModelView<T>& m, int k) const {
      return n[size_t(k)] >= 0 && !(m.contact_gradient & kGradComplementarityAware);
    }
    // room for slot k's J and Y of nrow rows
    P* room(int k, int nrow) {
      at[size_t(k)] = k == 0 ? 0 : end;
      end = at[size_t(k)] + 2L * nrow * nv;
      if (rows.size() < size_t(end)) rows.resize(size_t(end));
      n[size_t(k)] = nrow;
      return J(k);
    }
    int nv;
    P* factor;
    std::vector<int> n;  // slot k's rows on the lanes, -1 where they were not kept in lanes
    std::vector<long> at;
    long end = 0;
    std::vector<P>& rows;

   private:
    static std::vector<P>& block() {
      thread_local std::vector<P> b;
      return b;
    }
  };

  // One step of the pack: ctrl and qfrc (may be null) hold lane k's rows at ctrl + k ctrl_stride
  // and qfrc + k qfrc_stride; bits[k] is lane k's status, OR-ed with the step's. An environment
  // whose bits hold a stopping bit is not stepped (the rollout kernel's rule). keep: what the
  // step keeps for a reverse pass (may be null).
  void step(const T* ctrl, long ctrl_stride, const T* qfrc, long qfrc_stride, unsigned* bits,
            const Keep* keep = nullptr) {
    const ModelView<T>& m = m_;
    gather(u_, ctrl, ctrl_stride, m.nu);
    if (qfrc) gather(f_, qfrc, qfrc_stride, m.nv);
    const P* f = qfrc ? f_ : nullptr;
    // a step kept in lanes computes its workspace in its slot, for the length of the step
    struct Bound {
      Workspace<P>& w;
      const Workspace<P> own;
      ConstraintWorkspace<P>& c;
      P* const L;
      P* const vfree;
      ~Bound() {
        w = own;
        c.L = L;
        c.vfree = vfree;
      }
    } bound{w_, w_, c_, c_.L, c_.vfree};
    if (keep && keep->rows) {
      // and its factor and free velocity in the slot's, its rows kept where lane_delassus runs
      keep->rows->n[size_t(keep->slot)] = -1;
      c_.L = keep->rows->L(keep->slot);
      c_.vfree = keep->rows->vfree(keep->slot);
    }
    if (keep && keep->lanes) {
      Workspace<P> slot = Keep::workspace(m, keep->lanes, keep->slot);
      // but for the articulated-body arrays a reverse pass does not read: those stay the
      // stepper's own, in cache (the factorisation, which it reads, stays in the slot)
      slot.aba_IA = w_.aba_IA;
      slot.aba_pA = w_.aba_pA;
      slot.aba_u = w_.aba_u;
      w_ = slot;
      if (keep->factored) keep->factored[keep->slot] = false;
    }
    bool stopped = false;
    for (int k = 0; k < W; ++k) stopped = stopped || (bits[k] & kStatusStopMask);
    if (!stopped) {
      copy(q_, q0_, m.nq);
      copy(v_, v0_, m.nv);
      lanes_diverged() = false;
      ++passes;
      if (m.nefcmax == 0) {
        const unsigned st = phx::step(lm_, q_, v_, u_, w_, f);
        if (!lanes_diverged()) {
          for (int k = 0; k < W; ++k) bits[k] |= st;
          if (st == 0 && m.integrator != kIntegratorImplicitFast) factored_in_slot(keep);
          return;
        }
      } else {
        // the stages of fixed structure on the lanes: both ends of the step, the acceleration
        // without rows and the free velocity with them, each lane taking the one it needs.
        // Euler's acceleration without rows (the articulated-body algorithm, which neither
        // branches nor fails) waits until the lanes' rows are known and runs when one has none.
        const bool later = m.integrator != kIntegratorImplicitFast;
        bool ok = !step_input_status(lm_, q_, v_, u_, f);
        bool factored = false;
        if (ok) {
          smooth_kinematics(lm_, q_, v_, w_);
          applied_forces_and_armature(lm_, q_, v_, u_, f, w_);
          if (!later) ok = unconstrained_acceleration(lm_, q_, v_, u_, w_);
          factored = free_velocity(lm_, q_, v_, u_, w_, c_);
          broadphase(keep);
        }
        if (ok && !lanes_diverged()) {
          if (keep && !keep->lanes)
            transpose_to_slots(*keep);
          else
            transpose_lane_arrays();
          int nrow[W];
          bool rowless = false;  // whether a lane's step has no rows
          for (int k = 0; k < W; ++k) {
            nrow[k] = lane_rows(k, factored, bits[k], keep);
            rowless = rowless || nrow[k] == 0;
          }
          if (later && rowless) {
            free_acceleration(keep);
            factored_in_slot(keep);
          }
          const bool built = lane_delassus(nrow, keep);
          bool swept[W] = {};
          if (built) lane_sweeps(nrow, keep, swept);
          for (int k = 0; k < W; ++k)
            if (nrow[k] >= 0) lane_update(k, nrow[k], built, swept[k], bits[k], keep);
          return;
        }
      }
      copy(q0_, q_, m.nq);
      copy(v0_, v_, m.nv);
    }
    // one at a time, from the state before the pass
    ++fallbacks;
    T* q = q1_;
    T* v = q1_ + m.nq;
    for (int k = 0; k < W; ++k) {
      if (bits[k] & kStatusStopMask) continue;
      lane_out(q_, k, q, m.nq);
      lane_out(v_, k, v, m.nv);
      ContactView<T> cv = contacts(k);
      // a step kept for a reverse pass builds what that pass reads (the Delassus matrix)
      x_.c.forward_only = !keep;
      bits[k] |= step_env(m, q, v, static_cast<T*>(nullptr), ctrl + k * ctrl_stride, x_, cv,
                          keep ? keep->known[k] : LcpSolution<T>{},
                          qfrc ? qfrc + k * qfrc_stride : nullptr);
      if (keep && keep->store[k].reals) keep->store[k].save(m, keep->slot, x_.w, x_.c, cv, q, v);
      if (keep && keep->lanes)
        StepStore<T>::kept_ranges(
            x_.w, m.nv, [&](long at, long n) { lane_in(x_.w.xpos + at, k, w_.xpos + at, int(n)); });
      lane_in(q, k, q_, m.nq);
      lane_in(v, k, v_, m.nv);
    }
  }

  // The stage cost of each lane's state after its last step (stage_cost with run weight 1 and
  // terminal weight term) into out (W): on the lanes against lane_cost (c's reals broadcast),
  // or, when the lanes branch apart, lane by lane against c; ctrl as step() took it.
  void stage_costs(const CostView<P>& lane_cost, const CostView<T>& c, T term, const T* ctrl,
                   long ctrl_stride, T* out) {
    lanes_diverged() = false;
    const P total = stage_cost(lm_, lane_cost, q_, v_, u_, P(1), P(term), w_);
    if (!lanes_diverged()) {
      for (int k = 0; k < W; ++k) out[k] = total[k];
      return;
    }
    T* q = q1_;
    T* v = q1_ + m_.nq;
    for (int k = 0; k < W; ++k) {
      lane_out(q_, k, q, m_.nq);
      lane_out(v_, k, v, m_.nv);
      out[k] = stage_cost(m_, c, q, v, ctrl + k * ctrl_stride, T(1), term, x_.w);
    }
  }

  long passes = 0, fallbacks = 0, sweeps = 0;  // this stepper's, for pack_stats()

  // the arrays of Workspace that contact_rows and constrained_update read on m besides qacc
  // (and so the only ones whose adjoints the rows' reverse pass, adj_step_rows, writes): body
  // frames, motion subspaces, tendons, and for the equality rows' bias accelerations the
  // subspaces' rates and the body velocities
  static bool lane_array(const ModelView<T>& m, const char* name) {
    for (const char* a : {"xpos", "xmat", "cdof", "ten_length", "ten_J"})
      if (std::strcmp(a, name) == 0) return true;
    for (const char* a : {"cdof_dot", "cvel"})
      if (m.neq > 0 && std::strcmp(a, name) == 0) return true;
    return false;
  }

 private:
  // an array the per-lane stages read: the lanes' (a member of the workspace, w, or of the
  // constraint workspace, c), transposed into each lane's share of lane_arrays_ at `offset`,
  // where that lane's scratch's pointer (in) is bound
  struct LaneArray {
    P* Workspace<P>::*w;
    P* ConstraintWorkspace<P>::*c;
    T*& (*in)(StepScratch<T>&);
    long n;
    long offset;
    const P* from(const Workspace<P>& ws, const ConstraintWorkspace<P>& cs) const {
      return w ? ws.*w : cs.*c;
    }
  };

  // arrays_: those of the workspace (lane_array), the acceleration, the factor and the free
  // velocity, and the geom poses with contacts; lane_arrays_ their room for every lane
  void bind_lane_arrays() {
    const ModelView<T>& m = m_;
    using CW = ConstraintWorkspace<P>;
    auto add = [this](P* Workspace<P>::*w, P* CW::*c, T*& (*in)(StepScratch<T>&), long n) {
      arrays_.push_back({w, c, in, n, lane_stride_});
      lane_stride_ += n;
    };
#define PHX_PACK_IN(member) [](StepScratch<T>& h) -> T*& { return h.member; }
#define PHX_PACK_LANE_ARRAY(kind, name, size, comment) \
  if (lane_array(m, #name)) add(&Workspace<P>::name, nullptr, PHX_PACK_IN(w.name), long(size));
    PHX_WORKSPACE_ARRAYS(PHX_PACK_LANE_ARRAY)
#undef PHX_PACK_LANE_ARRAY
    qacc_at_ = lane_stride_;
    add(&Workspace<P>::qacc, nullptr, PHX_PACK_IN(w.qacc), m.nv);
    add(nullptr, &CW::L, PHX_PACK_IN(c.L), long(m.nv) * m.nv);
    add(nullptr, &CW::vfree, PHX_PACK_IN(c.vfree), m.nv);
    if (m.contact && m.nconmax > 0) {
      add(nullptr, &CW::geom_xpos, PHX_PACK_IN(c.geom_xpos), 3L * m.ngeom);
      add(nullptr, &CW::geom_xmat, PHX_PACK_IN(c.geom_xmat), 9L * m.ngeom);
    }
#undef PHX_PACK_IN
    lane_arrays_.resize(size_t(W) * lane_stride_);
    cacc_.resize(6 * size_t(m.nbody));
  }

  // every LaneArray into every lane's share of lane_arrays_
  void transpose_lane_arrays() {
    for (const LaneArray& a : arrays_) {
      T* to[W];
      for (int k = 0; k < W; ++k) to[k] = lane_arrays_.data() + k * lane_stride_ + a.offset;
      packs_to_lanes(a.from(w_, c_), a.n, to);
    }
  }

  // a step kept in lanes has left its articulated-body factorisation in its slot
  static void factored_in_slot(const Keep* keep) {
    if (keep && keep->lanes && keep->factored) keep->factored[keep->slot] = true;
  }

  // The acceleration without rows on the lanes (Euler's: the articulated-body algorithm) once
  // the lanes' rows are known, into each lane's share of the arrays the per-lane stages read (or
  // its slot, as transpose_to_slots). Its body accelerations go to scratch: the workspace's stay
  // those of free_velocity's bias forces, which the reverse pass of a step with rows reads.
  void free_acceleration(const Keep* keep) {
    const ModelView<T>& m = m_;
    Workspace<P> w = w_;
    w.cacc = cacc_.data();
    unconstrained_acceleration(lm_, q_, v_, u_, w);
    T* to[W];
    for (int k = 0; k < W; ++k)
      to[k] = keep && !keep->lanes ? keep->store[k].slot(m, keep->slot).w.qacc
                                   : lane_arrays_.data() + k * lane_stride_ + qacc_at_;
    packs_to_lanes(w_.qacc, m.nv, to);
  }

  // A kept step's lanes into their slots, for the per-lane stages to read there: the ranges of
  // the workspace a slot keeps (StepStore::kept_ranges: the lane arrays' among them), the
  // factor, the free velocity and the geom poses
  void transpose_to_slots(const Keep& keep) {
    const ModelView<T>& m = m_;
    typename StepStore<T>::Slot s[W];
    for (int k = 0; k < W; ++k) s[k] = keep.store[k].slot(m, keep.slot);
    T* to[W];
    StepStore<T>::kept_ranges(w_, m.nv, [&](long at, long n) {
      for (int k = 0; k < W; ++k) to[k] = s[k].w.xpos + at;
      packs_to_lanes(w_.xpos + at, n, to);
    });
    auto kept = [&](const P* from, long n, T* ConstraintWorkspace<T>::*member) {
      for (int k = 0; k < W; ++k) to[k] = s[k].c.*member;
      packs_to_lanes(from, n, to);
    };
    kept(c_.L, long(m.nv) * m.nv, &ConstraintWorkspace<T>::L);
    kept(c_.vfree, m.nv, &ConstraintWorkspace<T>::vfree);
    if (m.contact && m.nconmax > 0) {
      kept(c_.geom_xpos, 3L * m.ngeom, &ConstraintWorkspace<T>::geom_xpos);
      kept(c_.geom_xmat, 9L * m.ngeom, &ConstraintWorkspace<T>::geom_xmat);
    }
  }

  // The geom poses and the broadphase's verdicts on the lanes (apart_, lane by lane), which
  // contact_rows takes in place of its own. A kept step whose lanes all know their rows (a
  // replay, its LCP solution known) tests only the pairs the rows name, none of which is apart
  // (their contacts overlapped): keyed_, and no verdicts.
  void broadphase(const Keep* keep) {
    const ModelView<T>& m = m_;
    if (!m.contact || m.nconmax == 0) return;
    geom_poses(lm_, w_, c_);
    keyed_ = keep != nullptr;
    for (int k = 0; keyed_ && k < W; ++k) keyed_ = keep->known[k].force != nullptr;
    if (keyed_) return;
    for (int k = 0; k < m.npair; ++k) {
      int g1, g2;
      pair_geoms(m, k, g1, g2);
      const auto apart = pair_apart(lm_, c_, g1, g2, P(0));
      for (int i = 0; i < W; ++i) apart_[size_t(i) * m.npair + k] = apart.m[i] != 0;
    }
  }

  // Lane k's contacts and rows in the scalar core, on its share of the lanes' stages (arrays_,
  // transposed: the workspace arrays, the acceleration, the factor, the free velocity and the
  // geom poses; or, for a step kept lane by lane, its slot, which transpose_to_slots filled) and
  // of the broadphase: their number, or -1 when the step ends here (rows without a factor:
  // factored, whether free_velocity succeeded, was false). lane_update takes the step on.
  int lane_rows(int k, bool factored, unsigned& bits, const Keep* keep) {
    const ModelView<T>& m = m_;
    T* q = q1_ + k * (m.nq + m.nv);
    T* v = q + m.nq;
    lane_out(q_, k, q, m.nq);
    lane_out(v_, k, v, m.nv);
    StepScratch<T>& h = h_[k];
    if (keep) {
      own_[k] = h;
      if (!keep->lanes) {
        const typename StepStore<T>::Slot s = keep->store[k].slot(m, keep->slot);
        h.w = s.w;
        h.c.L = s.c.L;
        h.c.vfree = s.c.vfree;
        h.c.geom_xpos = s.c.geom_xpos;
        h.c.geom_xmat = s.c.geom_xmat;
      }
      h.c.forward_only = false;  // the reverse pass reads the Delassus matrix
    }
    ConstraintWorkspace<T>& c = h.c;
    ContactView<T> cv = contacts(k);
    c.factored_rank = -1;
    nprev_[k] = keep_previous_rows(c, cv);
    const unsigned char* apart = nullptr;
    if (m.contact && m.nconmax > 0) apart = keyed_ ? none_.data() : apart_.data() + k * m.npair;
    const int nrow =
        contact_rows(m, q, v, h.w, c, cv, keep ? keep->known[k] : LcpSolution<T>{}, apart);
    bits |= *cv.overflow ? unsigned(kStatusContactOverflow) : 0u;
    if (nrow > 0 && !factored) {
      bits |= kStatusNanResult;  // the scalar step's return before its update
      if (keep) h = own_[k];
      return -1;
    }
    return nrow;
  }

  // The Delassus stage (delassus: b, Y = L^-1 J^T and A) of the lanes' nrow rows on the lanes,
  // each lane's rows padded with zero rows to the most any lane has, and its results
  // transposed back into each lane's constraint workspace; false (nothing done: each lane runs
  // its own) when the lanes' rows reach different dof trees (their spans differ). A step kept
  // with LaneRows computes J and Y in the room they give it.
  bool lane_delassus(const int* nrow, const Keep* keep) {
    const ModelView<T>& m = m_;
    const int nv = m.nv;
    int n = 0, first = -1;
    for (int k = 0; k < W; ++k) {
      if (nrow[k] > n) n = nrow[k];
      if (first < 0 && nrow[k] > 0) first = k;
    }
    if (n == 0) return false;
    const int* span = h_[first].c.span;
    for (int k = 0; k < W; ++k)
      for (int r = 0; r < nrow[k]; ++r)
        for (int i = 0; i < 4; ++i)
          if (h_[k].c.span[4 * r + i] != span[i]) return false;
    ConstraintWorkspace<P> c{};
    c.J = keep && keep->rows ? keep->rows->room(keep->slot, n) : rows_.data();
    c.Y = c.J + long(n) * nv;
    c.A = rows_.data() + 2L * n * nv;
    c.b = c.A + long(n) * n;
    c.L = c_.L;
    c.vfree = c_.vfree;
    c.span = span_.data();
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < 4; ++i) span_[4 * r + i] = span[i];
    // J and b in, zero where a lane has fewer rows
    for (int r = 0; r < n; ++r) {
      const T* from[W];
      for (int k = 0; k < W; ++k) from[k] = r < nrow[k] ? h_[k].c.J + long(r) * nv : zeros(nv);
      lanes_to_packs(from, nv, c.J + long(r) * nv);
      for (int k = 0; k < W; ++k) c.b[r].set(k, r < nrow[k] ? h_[k].c.b[r] : T(0));
    }
    delassus_factor(lm_, n, c);
    delassus_matrix(lm_, n, c);
    // b, Y and (where the lane's step keeps it) A out
    for (int k = 0; k < W; ++k) {
      if (nrow[k] <= 0) continue;
      ConstraintWorkspace<T>& ck = h_[k].c;
      const int nk = nrow[k];
      for (int r = 0; r < nk; ++r) ck.b[r] = c.b[r][k];
      ck.has_matrix = delassus_keeps_matrix(m, nk, ck);
      if (!ck.has_matrix) continue;
      for (int r = 0; r < nk; ++r)
        for (int q = 0; q < nk; ++q) ck.A[r * nk + q] = c.A[r * n + q][k];
    }
    for (int r = 0; r < n; ++r) {
      T* to[W];
      for (int k = 0; k < W; ++k) to[k] = r < nrow[k] ? h_[k].c.Y + long(r) * nv : sink(nv);
      packs_to_lanes(c.Y + long(r) * nv, nv, to);
    }
    return true;
  }

  // PGS's sweeps on the lanes (pgs_lanes) after the Delassus stage ran there, for each lane
  // whose solve begins with pgs's dense sweeps (the solver PGS, its Delassus matrix kept, the
  // sweeps not on its factor, no known solution): its warm start (lcp_warm_start) and the
  // sweeps' first velocities and steps, as pgs computes them, lane by lane into packs over the
  // most rows any lane has (A is lane_delassus's, padded with zeros), and the sweeps' impulses
  // back into its rows' (swept[k]). The rest of such a lane's solve is solve_lcp_swept.
  void lane_sweeps(const int* nrow, const Keep* keep, bool* swept) {
    const ModelView<T>& m = m_;
    if (m.lcp_solver != kLcpPgs) return;
    const int nv = m.nv;
    int n = 0, nswept = 0;
    for (int k = 0; k < W; ++k) n = nrow[k] > n ? nrow[k] : n;
    PgsLanes<P, W> s(n, rows_.data() + 2L * n * nv, sweep_.data(), normal_.data());
    for (int k = 0; k < W; ++k) {
      const int nk = nrow[k];
      if (nk <= 0) continue;
      const ConstraintWorkspace<T>& c = h_[k].c;
      const LcpSolution<T> known = keep ? keep->known[k] : LcpSolution<T>{};
      if (!c.has_matrix || (known.force && known.n == nk)) continue;
      const LcpProblem<T> p = lcp_problem(nk, c, nv);
      if (pgs_on_factor(p, c.gs_vel)) continue;
      ContactView<T> cv = contacts(k);
      lcp_warm_start(nk, nprev_[k], c, cv);
      pgs_lanes_in(p, cv.efc_force, T(1), k, s);
      ++nswept;
    }
    if (nswept == 0) return;
    sweeps += nswept;
    pgs_lanes(s, m.lcp_iterations, T(m.lcp_sweep_tolerance));
    for (int k = 0; k < W; ++k) {
      swept[k] = s.sweep[k];
      if (swept[k]) lane_out(s.f, k, contacts(k).efc_force, nrow[k]);
    }
  }

  // Lane k's step from its nrow rows on (constrained_update; built: whether lane_delassus ran
  // the Delassus stage, swept: and lane_sweeps PGS's sweeps), into the lanes' state, and for a
  // kept step into its slot
  void lane_update(int k, int nrow, bool built, bool swept, unsigned& bits, const Keep* keep) {
    const ModelView<T>& m = m_;
    T* q = q1_ + k * (m.nq + m.nv);
    T* v = q + m.nq;
    StepScratch<T>& h = h_[k];
    ContactView<T> cv = contacts(k);
    const LcpSolution<T> known = keep ? keep->known[k] : LcpSolution<T>{};
    bits |= swept ? constrained_update<true>(m, q, v, nrow, nprev_[k], h.w, h.c, cv, known, true)
                  : constrained_update(m, q, v, nrow, nprev_[k], h.w, h.c, cv, known,
                                       built && nrow > 0);
    lane_in(q, k, q_, m.nq);
    lane_in(v, k, v_, m.nv);
    if (keep) {
      const StepStore<T>& store = keep->store[k];
      if (keep->rows && keep->rows->only_here(m, keep->slot))
        store.template save_rows<true>(m, keep->slot, h.c, cv, q, v);
      else
        store.save_rows(m, keep->slot, h.c, cv, q, v);
      h = own_[k];
    }
  }

  // n zeros to read, and room for n values nobody reads
  const T* zeros(long n) {
    if (long(zeros_.size()) < n) zeros_.assign(size_t(n), T(0));
    return zeros_.data();
  }
  T* sink(long n) {
    if (long(sink_.size()) < n) sink_.resize(size_t(n));
    return sink_.data();
  }

  // to[i] lane k = from[k stride + i]
  static void gather(P* to, const T* from, long stride, int n) {
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < W; ++k) to[i].set(k, from[k * stride + i]);
  }
  static void scatter(const P* from, T* to, long stride, int n) {
    for (int k = 0; k < W; ++k)
      for (int i = 0; i < n; ++i) to[k * stride + i] = from[i][k];
  }
  static void copy(const P* from, P* to, int n) {
    for (int i = 0; i < n; ++i) to[i] = from[i];
  }
  static void lane_out(const P* from, int k, T* to, long n) {
    for (long i = 0; i < n; ++i) to[i] = from[i][k];
  }
  static void lane_in(const T* from, int k, P* to, int n) {
    for (int i = 0; i < n; ++i) to[i].set(k, from[i]);
  }

  const ModelView<P>& lm_;
  const ModelView<T>& m_;
  const ContactData<T>& con_;
  int e0_ = 0;
  Workspace<P> w_{};
  ConstraintWorkspace<P> c_{};
  P *q_, *v_, *q0_, *v0_, *u_, *f_;
  StepScratch<T> x_, h_[W]{}, own_[W]{};  // the scalar steps', each lane's, kept lanes' own
  int nprev_[W] = {};                     // each lane's rows kept from its previous step
  std::vector<LaneArray> arrays_;
  std::vector<unsigned char> apart_;  // (W x npair) the broadphase's verdicts, lane by lane
  std::vector<T> lane_arrays_;        // (W x lane_stride_) arrays_ transposed, lane by lane
  std::vector<P> rows_;               // the lanes' Delassus stage: J, Y (nefcmax x nv), A, b
  std::vector<P> sweep_;              // (PgsLanes::kArrays x nefcmax) lane_sweeps' packs
  std::vector<int> normal_;  // (nefcmax x W) lane_sweeps' normal row of each row in each lane
  std::vector<int> span_;             // its rows' spans (nefcmax x 4)
  std::vector<T> zeros_, sink_;
  long lane_stride_ = 0;
  bool keyed_ = false;  // whether broadphase left the verdicts to the lanes' known rows
  std::vector<unsigned char> none_;  // (npair) no pair apart
  long qacc_at_ = 0;     // the acceleration's offset in a lane's share of lane_arrays_
  std::vector<P> cacc_;  // the body accelerations of free_acceleration (nbody x 6)
  T* q1_;
};

// kernel(e, scratch) for the environments past the last whole pack and pack(stepper, e0) for
// the packs before, over the CPU backend's threads. Packs go to the threads one at a time as
// they finish: a pack's cost follows its contacts, and a core shared with other work falls
// behind; a pack's results do not depend on which thread runs it.
template <class T, class Kernel, class PackBody>
void launch_packs(const LaneModel<T>& lanes, int nenv, const Kernel& kernel, ScratchSize scratch,
                  const PackBody& pack) {
  static constexpr int W = PackStepper<T>::W;  // static: lambdas read it uncaptured (clang)
  const int npack = nenv / W, threads = num_threads();
  const ModelView<T>& m = kernel.model;
#pragma omp parallel num_threads(threads) if (threads > 1 && npack > 1)
  {
    PackStepper<T> stepper(lanes.pack, m, kernel.con);
#pragma omp for schedule(dynamic, 1)
    for (int p = 0; p < npack; ++p) pack(stepper, p * W);
    Scratch<T> s{thread_block<T>(size_t(scratch.reals)), thread_block<int>(size_t(scratch.ints))};
#pragma omp for schedule(static)
    for (int e = npack * W; e < nenv; ++e) kernel(e, s);
    pack_stats().passes += stepper.passes;
    pack_stats().fallbacks += stepper.fallbacks;
    pack_stats().lane_sweeps += stepper.sweeps;
  }
}

// RolloutKernel on packs where they apply; false (nothing run) where they do not
template <class T>
bool rollout_packs(const LaneModel<T>* lanes, int nenv, const RolloutKernel<T>& k,
                   ScratchSize scratch) {
  if (!lanes || scratch_trace().on || !PackStepper<T>::applies(k.model) || k.mocap.given() ||
      nenv < PackStepper<T>::W)
    return false;
  static constexpr int W = PackStepper<T>::W;  // static: lambdas read it uncaptured (clang)
  launch_packs(*lanes, nenv, k, scratch, [&k](PackStepper<T>& s, int e0) {
    const ModelView<T>& m = k.model;
    const long n = k.nstep;
    const int every = k.tape.every;
    unsigned bits[W];
    int peak[W][2] = {};  // a tape's most contacts and rows of any step
    for (int i = 0; i < W; ++i) bits[i] = k.status[e0 + i];
    s.load(k.qpos, k.qvel, e0);
    for (long t = 0; t < n; ++t) {
      if (every > 0 && t % every == 0) {
        for (int i = 0; i < W; ++i) {
          T* q = s.scalar_state();
          s.lane_state(i, q, q + m.nq);
          k.tape.checkpoints(m, e0 + i).save(m, int(t / every), q, q + m.nq, nullptr,
                                             s.contacts(i));
        }
      }
      bool stepped[W];
      for (int i = 0; i < W; ++i) stepped[i] = !(bits[i] & kStatusStopMask);
      s.step(k.ctrl + (e0 * n + t) * m.nu, n * m.nu, nullptr, 0, bits);
      if (every > 0 && m.nefcmax > 0) {
        for (int i = 0; i < W; ++i) {
          const ContactView<T> cv = s.contacts(i);
          if (k.tape.log.head)
            k.tape.log.save(e0 + i, int(n), int(t), *cv.nefc, cv.efc_force, cv.efc_key,
                            cv.efc_class);
          if (!stepped[i]) continue;
          peak[i][0] = *cv.ncon > peak[i][0] ? *cv.ncon : peak[i][0];
          peak[i][1] = *cv.nefc > peak[i][1] ? *cv.nefc : peak[i][1];
        }
      }
      if (k.qpos_out) s.store_qpos(k.qpos_out + (e0 * n + t) * m.nq, n * m.nq);
      if (k.qvel_out) s.store_qvel(k.qvel_out + (e0 * n + t) * m.nv, n * m.nv);
      if (k.counts_out)
        for (int i = 0; i < W; ++i)
          step_counts(m, k.con, e0 + i, k.counts_out + ((e0 + i) * n + t) * kNumCounts);
    }
    s.store_qpos(k.qpos + long(e0) * m.nq, m.nq);
    s.store_qvel(k.qvel + long(e0) * m.nv, m.nv);
    for (int i = 0; i < W; ++i) {
      k.status[e0 + i] = bits[i];
      if (every > 0) {
        k.tape.status[e0 + i] = bits[i];
        k.tape.peak[2 * (e0 + i)] = peak[i][0];
        k.tape.peak[2 * (e0 + i) + 1] = peak[i][1];
      }
    }
  });
  return true;
}

// StepKernel on packs where they apply (no body forces); false where they do not
template <class T>
bool step_packs(const LaneModel<T>* lanes, int nenv, const StepKernel<T>& k, ScratchSize scratch) {
  if (!lanes || scratch_trace().on || !PackStepper<T>::applies(k.model) || k.xfrc_applied ||
      nenv < PackStepper<T>::W)
    return false;
  static constexpr int W = PackStepper<T>::W;  // static: lambdas read it uncaptured (clang)
  launch_packs(*lanes, nenv, k, scratch, [&k](PackStepper<T>& s, int e0) {
    const ModelView<T>& m = k.model;
    unsigned bits[W] = {};
    s.load(k.qpos, k.qvel, e0);
    const T* f = k.qfrc_applied ? k.qfrc_applied + long(e0) * m.nv : nullptr;
    for (int t = 0; t < k.nstep; ++t) s.step(k.ctrl + long(e0) * m.nu, m.nu, f, m.nv, bits);
    s.store_qpos(k.qpos + long(e0) * m.nq, m.nq);
    s.store_qvel(k.qvel + long(e0) * m.nv, m.nv);
    for (int i = 0; i < W; ++i) k.status[e0 + i] |= bits[i];
  });
  return true;
}

// PlannerRolloutKernel on packs of samples where they apply; false where they do not. Each
// sample is prepared (noise, controls, initial state) as the kernel does, then its pack steps
// and sums its costs on the lanes.
template <class T>
bool planner_packs(const LaneModel<T>* lanes, int nsample, const PlannerRolloutKernel<T>& k,
                   ScratchSize scratch) {
  if (!lanes || scratch_trace().on || !PackStepper<T>::applies(k.model) ||
      nsample < PackStepper<T>::W)
    return false;
  using P = typename PackStepper<T>::P;
  static constexpr int W = PackStepper<T>::W;  // static: lambdas read it uncaptured (clang)
  // the cost's reals broadcast to the lanes
  std::vector<P> reals(size_t(k.cost.nterm) * kCostTermReals);
  for (size_t i = 0; i < reals.size(); ++i) reals[i] = P(k.cost.reals[i]);
  const CostView<P> lane_cost{k.cost.nterm, k.cost.ints, reals.data()};
  launch_packs(*lanes, nsample, k, scratch, [&k, &lane_cost](PackStepper<T>& s, int e0) {
    const ModelView<T>& m = k.model;
    for (int i = 0; i < W; ++i) k.prepare(m, e0 + i);
    s.load(k.qpos, k.qvel, e0);
    const int steps = k.nstep();
    const long stride = long(k.spec.horizon) * m.nu;  // between samples' controls
    unsigned bits[W] = {};
    T total[W] = {}, cost[W];
    for (int t = 0; t < steps; ++t) {
      const T* u = k.controls(m, e0, t);
      bool stepped[W];
      for (int i = 0; i < W; ++i) stepped[i] = !(bits[i] & kStatusStopMask);
      s.step(u, stride, nullptr, 0, bits);
      if (k.cost.nterm) {
        s.stage_costs(lane_cost, k.cost, t == steps - 1 ? T(1) : T(0), u, stride, cost);
        for (int i = 0; i < W; ++i)
          if (stepped[i]) total[i] += cost[i];
      }
      if (k.qs_out) s.store_qpos(k.qs_out + (long(e0) * steps + t) * m.nq, long(steps) * m.nq);
      if (k.vs_out) s.store_qvel(k.vs_out + (long(e0) * steps + t) * m.nv, long(steps) * m.nv);
    }
    s.store_qpos(k.qpos + long(e0) * m.nq, m.nq);
    s.store_qvel(k.qvel + long(e0) * m.nv, m.nv);
    for (int i = 0; i < W; ++i) k.finish(e0 + i, bits[i], total[i]);
  });
  return true;
}

}  // namespace phx::cpu
