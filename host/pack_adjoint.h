// The backward pass of taped rollouts on kLanes<T> environments per SIMD pass on the CPU: the
// rollout adjoint kernel on Pack<T, kLanes<T>> (host/lane.h).
//
// A pack of W environments takes the segments of its tapes last to first. It recomputes a
// segment on the lanes (PackStepper::step with a Keep: each step into its environment's
// StepStore slot, as TapeReverse::recompute would, but for the workspace, which stays in lanes,
// computed in place in a slot of its own), then walks it back step by step. At each step the
// lanes whose step has rows in a kept slot take one pass, and those whose step has none another
// (rowless_step: the whole reverse pass on the lanes, on the workspace the recomputation kept
// there), each group where it fills enough of the lanes, carrying the other group's lanes as
// copies of its own lanes, whose results are dropped. The lanes of a smaller group, of a step
// not kept or of a pack with a stopped environment walk alone, first, with the scalar kernel's
// step.
// The pass of the lanes with rows has two parts (adj_step_rows and adj_constrained_rest): the
// part that depends on the rows (the impulses, the LCP, the Delassus matrix, the rows'
// Jacobians) one lane at a time in the scalar core, on its lane's share of the workspace arrays
// the rows read (transposed), the rest (mass matrix, bias and applied forces, kinematics: fixed
// structure) on the lanes, on their workspace as it was kept and the first part's adjoints
// transposed into packs. Where the recomputation ran the Delassus stage on the lanes, it keeps
// the step's rows there too (PackStepper::LaneRows: the factor, the free velocity, J and Y,
// each lane's rows padded with zero rows), and the first part's stages of fixed structure run
// on the lanes as well (rows_on_lanes: the impulses' velocity, the Delassus matrix's
// projections, the free velocity, the rows' Jacobians' adjoint but for the bounces' term), the
// LCP's adjoint and the rows' corrections and Jacobians staying lane by lane.
// The parameters' adjoints stay in packs while the walk runs on lanes and go back to the
// environments before a lane walks alone. A pass on the lanes that branched apart
// (lanes_diverged()) runs again lane by lane (with rows, its second part). Either way each
// environment's gradients are those of its tape walked alone, bit for bit: both run the same
// stages in the same order. Host code that moves data and calls the core's stages.
#pragma once

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <vector>

#include "host/pack_kernels.h"
#include "phalanx/kernels/adjoint.h"

namespace phx::cpu {

// One thread's reverse walks of packs: the lanes' arrays of one step's second part.
template <class T>
class PackWalk {
 public:
  static constexpr int W = kLanes<T>;
  // the fewest lanes for which a pass runs on the lanes (walk): a pass costs about as much as
  // walking an eighth of them alone (16 lanes: 2), and never less than one
  static constexpr int kMinLanes = W / 8 > 1 ? W / 8 : 1;
  using P = Pack<T, W>;
  using Env = typename RolloutAdjointKernel<T>::Env;

  // whether the steps of m (the kernel's view) can take their reverse pass on the lanes: those
  // without rows whole (rowless_step); those with rows their second part, but with the bounce
  // correction (whose pass runs the rows' part twice)
  static bool applies(const ModelView<T>& m) {
    return m.nefcmax == 0 || !(m.contact_gradient & kGradBounceCorrection);
  }

  // nslot: the steps of a segment, whose workspaces the lanes keep in slots()
  PackWalk(const ModelView<P>& lanes, const ModelView<T>& m, int nslot)
      : lm_(lanes), m_(m), kept_(m, nslot) {
    const long nq = m.nq, nv = m.nv, nu = m.nu, ne = m.nefcmax;
    long nparam = 0;
    for (int k = 0; k < kNumParams; ++k) nparam += param_size(m, k);
    struct Tag {};
    P* block = thread_block<P, Tag>(size_t(AdjWorkspace<P>::size(m) + 3 * nq + 6 * nv + 2 * nu +
                                           nv * nv + 2 * nparam + 22 * nv + 8 * ne + ne * nv));
    Arena<P> arena(block, nullptr);
    a_ = AdjWorkspace<P>::carve(m, arena);
    q_ = arena.template take<P>(nq);
    v_ = arena.template take<P>(nv);
    u_ = arena.template take<P>(nu);
    hq_ = arena.template take<P>(nq);
    hv_ = arena.template take<P>(nv);
    gq_ = arena.template take<P>(nq);
    gv_ = arena.template take<P>(nv);
    gc_ = arena.template take<P>(nu);
    adj_M_ = arena.template take<P>(nv * nv);
    bias_ = arena.template take<P>(nv);
    qfrc_ = arena.template take<P>(nv);
    params_ = arena.template take<P>(nparam);
    saved_ = arena.template take<P>(nparam);
    // the arrays of the rows' stages on the lanes (rows_on_lanes)
    for (P** a : {&s_.g, &s_.lam, &s_.dv, &s_.qvel_next, &s_.mu2, &s_.adj_vfree, &s_.tmp,
                  &s_.adj_qfrc, &s_.adj_bias, &sink_})
      *a = arena.template take<P>(nv);
    s_.proj = arena.template take<P>(4 * nv);
    for (P** a :
         {&s_.adj_f, &s_.adj_b, &s_.adj_A.y, &s_.adj_A.alpha, &s_.adj_A.z, &s_.adj_A.beta, &f_})
      *a = arena.template take<P>(ne);
    adj_J_ = arena.template take<P>(ne * nv);
    terms_uv_ = arena.template take<P>(8 * nv);
    term_lanes_.resize(size_t(W * 8 * nv));
    implicit_ = m.integrator == kIntegratorImplicitFast;
    vn_lanes_ = arena.template take<P>(ne);
    for (std::vector<T>& vn : vn_) vn.resize(size_t(ne));
    for (int g = 0; g < m.ngeom; ++g) bounces_ = bounces_ || m.geom_restitution[g] > T(0);
    struct Slots {};
    slots_ = thread_block<P, Slots>(size_t(nslot * Workspace<P>::size(m)));
    factored_.reset(new bool[size_t(nslot)]());
    // each lane's workspace for the rows' part: the arrays it reads (PackStepper::lane_array),
    // NaN in the others, so that reading one would give NaN, which the tests' bit-for-bit
    // comparisons catch
    struct Rows {};
    const long size = Workspace<T>::size(m);
    T* rows = thread_block<T, Rows>(size_t(W * size));
    std::fill(rows, rows + W * size, std::numeric_limits<T>::quiet_NaN());
    for (int i = 0; i < W; ++i) {
      Arena<T> lane(rows + i * size, nullptr);
      rows_w_[i] = Workspace<T>::carve(m, lane);
    }
    // and their offsets in the workspace and in its adjoint's (the same arrays' adjoints)
    const Workspace<T>& w0 = rows_w_[0];
#define PHX_PACK_ROWS_ARRAY(kind, name, size, comment)          \
  if (PackStepper<T>::lane_array(m, #name) && long(size) > 0) { \
    ranges_[nrange_][0] = long(w0.name - w0.xpos);              \
    ranges_[nrange_][1] = arange_[nrange_][1] = long(size);     \
    arange_[nrange_++][0] = adjoint_offset(#name);              \
  }
    PHX_WORKSPACE_ARRAYS(PHX_PACK_ROWS_ARRAY)
#undef PHX_PACK_ROWS_ARRAY
    // and the stage adjoints outside those (zero_adjoints)
    std::vector<bool> read(size_t(a_.qvel_next - a_.xpos), false);
    for (int j = 0; j < nrange_; ++j)
      std::fill_n(read.begin() + arange_[j][0], arange_[j][1], true);
    for (long at = 0, n = long(read.size()); at < n;) {
      long end = at;
      while (end < n && !read[size_t(end)]) ++end;
      if (end > at) {
        gaps_[ngap_][0] = at;
        gaps_[ngap_++][1] = end - at;
      }
      for (at = end; at < n && read[size_t(at)];) ++at;
    }
  }

  // the parameters' adjoints back to the environments once their walks are done (they stay in
  // packs from segment to segment while the walk is on the lanes)
  void finish(Env* env) {
    to_envs(env);
  }

  // the lanes' workspaces of a segment's steps, as PackStepper::Keep::lanes, and their rows, as
  // Keep::rows
  P* slots() const {
    return slots_;
  }
  typename PackStepper<T>::LaneRows* kept() {
    return &kept_;
  }
  // per slot, whether its workspace holds the step's articulated-body factorisation, as
  // Keep::factored
  bool* factored() {
    return factored_.get();
  }

  // Segment seg of the W environments e0.. backward (their TapeReverse walks and Env states),
  // once recomputed into their slots; live[i]: whether environment i's rollout ran to its end
  void walk(const RolloutAdjointKernel<T>& k, int e0, int seg, Env* env, TapeReverse<T>* walks,
            const bool* live) {
    const ModelView<T>& m = m_;
    const int K = k.tape.every, nstep = k.tape.nstep;
    const int t0 = seg * K, t1 = t0 + K < nstep ? t0 + K : nstep;
    bind_params(env[0].am);
    bool all = true;
    for (int i = 0; i < W; ++i) all = all && live[i];
    for (int t = t1 - 1; t >= t0; --t) {
      if (t > 0) prefetch_loss(k, e0, t - 1);
      // the lanes whose step has rows, from a kept slot (rows), and those whose step has none
      // (flat): each group takes its pass on the lanes, carrying the other's lanes, where it
      // fills enough of them, or else its lanes walk alone; a lane not kept, and every lane of
      // a pack with a stopped environment, walks alone
      bool rows[W] = {}, flat[W] = {};
      int nrows = 0, nflat = 0;
      for (int i = 0; i < W && all; ++i) {
        const int held = m.nefcmax > 0 ? walks[i].store.rows_held(m, t - t0) : 0;
        if (held < 0) continue;
        rows[i] = held > 0;
        flat[i] = !rows[i];
        nrows += rows[i];
        nflat += flat[i];
      }
      // (the lanes that walk alone first, on the workspace as the recomputation left it)
      const bool on_rows = nrows >= kMinLanes, on_flat = nflat >= kMinLanes;
      for (int i = 0; i < W; ++i)
        if (live[i] && !(rows[i] && on_rows) && !(flat[i] && on_flat)) {
          to_envs(env);
          alone(k, e0, i, seg, t, walks[i]);
          ++alone_;
        }
      if (on_rows) lane_step(k, e0, seg, t, env, walks, rows);
      if (on_flat) rowless_step(k, e0, seg, t, env, walks, flat);
    }
    pack_stats().reverse_passes += passes_;
    pack_stats().reverse_fallbacks += fallbacks_;
    pack_stats().reverse_row_passes += row_passes_;
    pack_stats().reverse_alone += alone_;
    passes_ = fallbacks_ = row_passes_ = alone_ = 0;
  }

 private:
  // Step t backward for the lanes with rows (rows[i]), its second part on the lanes (or, when
  // they branch apart, lane by lane). Any other lane carries a copy of a lane with rows through
  // the pass, whose results for it are dropped: its walk is left as it was.
  void lane_step(const RolloutAdjointKernel<T>& k, int e0, int seg, int t, Env* env,
                 TapeReverse<T>* walks, const bool* rows) {
    const ModelView<T>& m = m_;
    const int nq = m.nq, nv = m.nv, nu = m.nu, slot = t - seg * k.tape.every;
    typename StepStore<T>::Slot f[W];
    OuterSum<T, 4> terms[W];
    int donor[W];
    donors(rows, donor);
    const T* from[W];
    auto gather = [&](P* to, long n, auto array) {
      for (int i = 0; i < W; ++i) from[i] = array(donor[i]);
      lanes_to_packs(from, n, to);
    };
    // the first part, from each walk's arrays (begin_step and from_slot load them) and the
    // lanes' workspace (its arrays the part reads, transposed): its stages of fixed structure on
    // the lanes where the recomputation kept the step's rows there (rows_on_lanes), else all of
    // it lane by lane
    Workspace<P> w = workspace(slot);
    for (int j = 0; j < nrange_; ++j) {
      T* to[W];
      for (int i = 0; i < W; ++i) to[i] = rows_w_[i].xpos + ranges_[j][0];
      packs_to_lanes(w.xpos + ranges_[j][0], ranges_[j][1], to);
    }
    bool packed = kept_.n[size_t(slot)] >= 0 && !(m.contact_gradient & kGradComplementarityAware);
    for (int i = 0; i < W; ++i) {
      if (!rows[i]) continue;
      const int e = e0 + i;
      TapeReverse<T>& r = walks[i];
      r.begin_step(t, k.loss(k.adj_qpos_out, e, nq), k.loss(k.adj_qvel_out, e, nv), nullptr);
      int base;
      const TapeRecords<T> rec = k.tape.walked(m, e, seg, &base);
      f[i] = r.from_slot(slot, rec, base);
      packed = packed && *f[i].cv.nefc <= kept_.n[size_t(slot)];
    }
    gather(q_, nq, [&](int i) { return walks[i].q; });
    gather(v_, nv, [&](int i) { return walks[i].v; });
    gather(u_, nu, [&](int i) { return control(k, e0 + i, t); });
    if (packed) {
      ++row_passes_;
      rows_on_lanes(slot, rows, donor, f, walks, env);
    } else {
      const bool lanes_only = kept_.only_here(m, slot);
      for (int i = 0; i < W; ++i) {
        TapeReverse<T>& r = walks[i];
        if (rows[i] && lanes_only) rows_to_slot(i, slot, f[i], true);
        if (rows[i])
          adj_step_rows(m, r.q, r.v, rows_w_[i], f[i].c, f[i].cv, r.x.a, r.x.s, r.gq, r.gv, r.hq,
                        r.hv, env[i].ac, static_cast<T*>(nullptr), terms[i]);
      }
      gather(adj_M_, long(nv) * nv, [&](int i) { return walks[i].x.s.adj_M; });
      gather(bias_, nv, [&](int i) { return walks[i].x.s.adj_bias; });
      gather(qfrc_, nv, [&](int i) { return walks[i].x.s.adj_qfrc; });
      if (implicit_) terms_in(terms, donor);
    }
    // into the lanes: of the stage adjoints, those of the arrays the first part reads (the only
    // ones it writes)
    zero_adjoints(a_, true);
    for (int j = 0; j < nrange_; ++j)
      gather(a_.xpos + arange_[j][0], arange_[j][1],
             [&](int i) { return walks[i].x.a.xpos + arange_[j][0]; });
    gather(a_.qvel_next, AdjWorkspace<T>::size(m) - (a_.qvel_next - a_.xpos),
           [&](int i) { return walks[i].x.a.qvel_next; });
    gather(hq_, nq, [&](int i) { return walks[i].hq; });
    gather(hv_, nv, [&](int i) { return walks[i].hv; });
    for (int d = 0; d < nu; ++d) gc_[d] = P(0);
    to_lanes(env);
    for (long i = 0; i < nparam_; ++i) saved_[i] = params_[i];
    // the second part on the lanes (lane by lane, as if branched apart, where the lanes' steps
    // have different numbers of terms of the mass matrix's adjoint, which implicitfast's reads)
    lanes_diverged() = terms_.n < 0;
    if (!lanes_diverged())
      detail::adj_constrained_dynamics(lm_, q_, v_, u_, w, a_, DenseEntries<P>{adj_M_, nv}, terms_,
                                       bias_, qfrc_, hq_, hv_, gc_, am_);
    if (lanes_diverged() || force_reverse_fallbacks()) {
      ++fallbacks_;
      // lane by lane from the first part's results, which the lanes only read
      for (long i = 0; i < nparam_; ++i) params_[i] = saved_[i];
      to_envs(env);
      if (packed) {  // the mass matrix's adjoint, which the lanes computed, into each lane's
        T* to[W];
        for (int i = 0; i < W; ++i) to[i] = walks[i].x.s.adj_M;
        packs_to_lanes(adj_M_, long(nv) * nv, to);
        if (implicit_)
          for (int i = 0; i < W; ++i) terms_out(i, terms[i]);
      }
      for (int i = 0; i < W; ++i) {
        if (!rows[i]) continue;
        TapeReverse<T>& r = walks[i];
        to_slot(i, slot, f[i].w);
        if (packed) zero_adjoints(r.x.a, true);  // (rows_on_lanes zeroed only the rows' part's)
        detail::adj_constrained_rest(m, r.q, r.v, control(k, e0 + i, t), f[i].w, r.x.a, r.x.s,
                                     terms[i], r.hq, r.hv, env[i].gc + long(t) * nu, env[i].am);
        r.end_step();
      }
      return;
    }
    ++passes_;
    lanes_done(t, rows, env, walks);
  }

  // The end of a pass of step t on the lanes for the lanes `on`: their adjoints of the state
  // before the step (hq_, hv_) into their walks' and of its controls (gc_) added to their
  // environments', their steps done; the lanes the pass carried get back their parameters'
  // adjoints from before it (saved_).
  void lanes_done(int t, const bool* on, Env* env, TapeReverse<T>* walks) {
    const int nq = m_.nq, nv = m_.nv, nu = m_.nu;
    T* to[W];
    for (int i = 0; i < W; ++i) to[i] = on[i] ? walks[i].hq : sink_lane(nq > nv ? nq : nv);
    packs_to_lanes(hq_, nq, to);
    for (int i = 0; i < W; ++i)
      if (on[i]) to[i] = walks[i].hv;
    packs_to_lanes(hv_, nv, to);
    typename P::Mask::M kept{};
    bool carried = false;
    for (int i = 0; i < W; ++i) {
      kept[i] = on[i] ? -1 : 0;
      carried = carried || !on[i];
    }
    if (carried)
      for (long j = 0; j < nparam_; ++j) params_[j] = select(kept, params_[j], saved_[j]);
    for (int i = 0; i < W; ++i) {
      if (!on[i]) continue;
      T* gc = env[i].gc + long(t) * nu;
      for (int d = 0; d < nu; ++d) gc[d] += gc_[d][i];
      walks[i].end_step();
    }
  }

  // Step t backward on the lanes for the lanes whose step has no rows (on[i]): the scalar
  // walk's adj_step (a replay of the step, then adj_step_replayed) with the replay the
  // recomputation ran on the lanes, in its slot (PackStepper::Keep::lanes: the workspace that
  // step() left, but for the articulated-body arrays other than the factorisation, which the
  // pass reads where the slot holds it, Keep::factored). Any other lane carries a copy of one of
  // them, as in lane_step. When the lanes branch apart, each lane takes the pass alone on its
  // share of that workspace, which factors again (the same bits).
  void rowless_step(const RolloutAdjointKernel<T>& k, int e0, int seg, int t, Env* env,
                    TapeReverse<T>* walks, const bool* on) {
    const ModelView<T>& m = m_;
    const int nq = m.nq, nv = m.nv, nu = m.nu, slot = t - seg * k.tape.every;
    const T* from[W];
    int donor[W];
    donors(on, donor);
    auto gather = [&](P* to, long n, auto array) {
      for (int i = 0; i < W; ++i) from[i] = array(donor[i]);
      lanes_to_packs(from, n, to);
    };
    for (int i = 0; i < W; ++i) {
      if (!on[i]) continue;
      const int e = e0 + i;
      TapeReverse<T>& r = walks[i];
      r.begin_step(t, k.loss(k.adj_qpos_out, e, nq), k.loss(k.adj_qvel_out, e, nv), nullptr);
      int base;
      k.tape.walked(m, e, seg, &base).load_state(m, base + slot, r.q, r.v, r.a);
    }
    gather(q_, nq, [&](int i) { return walks[i].q; });
    gather(v_, nv, [&](int i) { return walks[i].v; });
    gather(u_, nu, [&](int i) { return control(k, e0 + i, t); });
    gather(gq_, nq, [&](int i) { return walks[i].gq; });
    gather(gv_, nv, [&](int i) { return walks[i].gv; });
    for (int i = 0; i < nq; ++i) hq_[i] = P(0);
    for (int d = 0; d < nv; ++d) hv_[d] = P(0);
    for (int d = 0; d < nu; ++d) gc_[d] = P(0);
    to_lanes(env);
    for (long i = 0; i < nparam_; ++i) saved_[i] = params_[i];
    Workspace<P> w = workspace(slot);
    lanes_diverged() = false;
    adj_step_replayed(lm_, q_, v_, u_, w, a_, gq_, gv_, hq_, hv_, gc_, am_,
                      static_cast<P*>(nullptr), factored_[size_t(slot)]);
    if (lanes_diverged() || force_reverse_fallbacks()) {
      ++fallbacks_;
      for (long i = 0; i < nparam_; ++i) params_[i] = saved_[i];
      to_envs(env);
      for (int i = 0; i < W; ++i) {
        if (!on[i]) continue;
        TapeReverse<T>& r = walks[i];
        to_slot(i, slot, r.x.w);
        adj_step_replayed(m, r.q, r.v, control(k, e0 + i, t), r.x.w, r.x.a, r.gq, r.gv, r.hq, r.hv,
                          env[i].gc + long(t) * nu, env[i].am);
        r.end_step();
      }
      return;
    }
    ++passes_;
    lanes_done(t, on, env, walks);
  }

  // The first part of step t's reverse pass (adj_step_rows) for the lanes with rows, the
  // recomputation having kept the step's rows in lanes (slot `slot` of kept_). Its stages of
  // fixed structure run on the lanes on those rows: the impulses' velocity (adj_impulse_velocity)
  // and, after the LCP's adjoint, the Delassus matrix's projections with their back
  // substitutions and the free velocity's; the LCP's adjoint and the rows' corrections and
  // Jacobians run lane by lane, on the vectors the lanes computed. Each stage takes its
  // operations in adj_constrained_rows's order, so that each lane's results are its own pass's
  // bit for bit (a lane's padded rows, zero, add +0 to sums that start at +0). The mass matrix's
  // adjoint and the bias and applied forces' go to adj_M_, bias_ and qfrc_ in packs; the rows'
  // Jacobians' adjoint stays in adj_J_, whose lane each lane's pass reads in place, and of the
  // vectors only those the lanes' own stages read go out to them. f: the lanes' slots; a lane
  // without rows takes its donor's seeds, and its results are dropped.
  void rows_on_lanes(int slot, const bool* rows, const int* donor, typename StepStore<T>::Slot* f,
                     TapeReverse<T>* walks, Env* env) {
    const ModelView<T>& m = m_;
    const int nv = m.nv, n = kept_.n[size_t(slot)];
    int nrow[W];
    for (int i = 0; i < W; ++i) nrow[i] = rows[i] ? *f[i].cv.nefc : 0;
    for (int i = 0; i < W; ++i) {
      if (!rows[i]) continue;
      TapeReverse<T>& r = walks[i];
      detail::adj_position_update(m, r.q, r.x.s, r.gq, r.hq);
      for (int d = 0; d < nv; ++d) r.x.s.g[d] = r.gv[d] + r.x.s.u[d];
      zero_adjoints(r.x.a, false);
    }
    // lane i's first nrow[i] entries of array(i) into n packs, zero beyond; and back out
    auto rows_in = [&](P* to, auto array) {
      for (int r = 0; r < n; ++r) to[r] = P(0);
      for (int i = 0; i < W; ++i) {
        const T* a = array(i);
        for (int r = 0; r < nrow[i]; ++r) to[r].set(i, a[r]);
      }
    };
    auto rows_out = [&](const P* from, auto array) {
      for (int i = 0; i < W; ++i) {
        T* a = array(i);
        for (int r = 0; r < nrow[i]; ++r) a[r] = from[r][i];
      }
    };
    auto lanes_out = [&](const P* from, long len, auto array) {
      T* to[W];
      for (int i = 0; i < W; ++i) to[i] = rows[i] ? array(i) : sink_lane(len);
      packs_to_lanes(from, len, to);
    };
    const T* seed[W];
    auto seeds_in = [&](P* to, auto array) {
      for (int i = 0; i < W; ++i) seed[i] = array(donor[i]);
      lanes_to_packs(seed, nv, to);
    };
    ConstraintWorkspace<P> c{};
    c.L = kept_.L(slot);
    c.vfree = kept_.vfree(slot);
    c.J = kept_.J(slot);
    c.Y = kept_.Y(slot);
    AdjConstraintWorkspace<P>& s = s_;
    OuterSum<P, 7> lanes_J;  // all of adj_J's terms but the rows' bounces (lane by lane)
    OuterSum<P, 4> adj_M;
    // qvel' = vfree + M^-1 J^T f
    seeds_in(s.g, [&](int i) { return walks[i].x.s.g; });
    seeds_in(s.qvel_next, [&](int i) { return walks[i].x.s.qvel_next; });
    rows_in(f_, [&](int i) { return f[i].cv.efc_force; });
    detail::adj_impulse_velocity(lm_, n, c, f_, false, s, lanes_J, adj_M);
    rows_out(s.adj_f, [&](int i) { return walks[i].x.s.adj_f; });
    // the LCP
    for (int i = 0; i < W; ++i) {
      if (!rows[i]) continue;
      const LcpProblem<T> p = lcp_problem(nrow[i], f[i].c);
      detail::adj_lcp_stage(m, p, f[i].cv.efc_force, f[i].c, f[i].cv, false, walks[i].x.s);
    }
    rows_in(s.adj_A.y, [&](int i) { return walks[i].x.s.adj_A.y; });
    rows_in(s.adj_A.alpha, [&](int i) { return walks[i].x.s.adj_A.alpha; });
    rows_in(s.adj_A.z, [&](int i) { return walks[i].x.s.adj_A.z; });
    rows_in(s.adj_A.beta, [&](int i) { return walks[i].x.s.adj_A.beta; });
    rows_in(s.adj_b, [&](int i) { return walks[i].x.s.adj_b; });
    // A = J M^-1 J^T, b = J vfree + corr, and mu2 = M^-1 adj_vfree, as adj_constrained_rows
    for (int d = 0; d < nv; ++d) s.adj_vfree[d] = s.g[d];
    adj_delassus(lm_, n, c, static_cast<const P*>(nullptr), s.adj_A, s.adj_b, s.proj, s.adj_vfree);
    for (int d = 0; d < nv; ++d) s.mu2[d] = s.adj_vfree[d];
    cholesky_solve_lower(c.L, nv, s.mu2);
    P* const back[5] = {s.proj, s.proj + nv, s.proj + 2 * nv, s.proj + 3 * nv, s.mu2};
    cholesky_solve_upper_group<5>(c.L, nv, back);
    adj_delassus_terms(nv, c.vfree, s.adj_A, s.adj_b, s.proj, lanes_J, adj_M);
    detail::adj_free_velocity(lm_, v_, c, s, sink_, static_cast<P*>(nullptr), adj_M);
    adj_M.write(adj_M_, nv, nv);
    if (implicit_) terms_ = adj_M;
    for (int d = 0; d < nv; ++d) {
      bias_[d] = s.adj_bias[d];
      qfrc_[d] = s.adj_qfrc[d];
    }
    lanes_out(s.mu2, nv, [&](int i) { return walks[i].x.s.mu2; });
    lanes_out(s.adj_vfree, nv, [&](int i) { return walks[i].x.s.adj_vfree; });
    lanes_J.write(adj_J_, n, nv);
    // each row's J qvel (adj_row_corrections reads its contacts' normal rows'), every row's sum
    // in adj_row_corrections' order, the rows' sums interleaved
    P* vn = vn_lanes_;
    for (int r = 0; r < n; ++r) vn[r] = P(0);
    for (int d = 0; d < nv; ++d)
      for (int r = 0; r < n; ++r) vn[r] += c.J[long(r) * nv + d] * v_[d];
    rows_out(vn, [&](int i) { return vn_[i].data(); });
    // the rows' corrections, the free velocity's adjoints of the lane and its rows' Jacobians
    for (int i = 0; i < W; ++i) {
      if (!rows[i]) continue;
      TapeReverse<T>& r = walks[i];
      AdjConstraintWorkspace<T>& si = r.x.s;
      const ConstraintWorkspace<T>& ci = f[i].c;
      const ContactView<T>& cv = f[i].cv;
      if (bounces_) rows_to_slot(i, slot, f[i], false);  // (a bounce's correction reads J)
      OuterSum<T, 7> bounce;  // adj_J's last term, the rows' bounces (if any)
      OuterSum<T, 4> lane_M;  // (the lanes' adj_M above)
      detail::adj_row_corrections(m, r.q, r.v, nrow[i], rows_w_[i], ci, cv, si, r.x.a, r.hq, r.hv,
                                  env[i].ac, bounce, vn_[i].data());
      detail::adj_free_velocity(m, r.v, ci, si, r.hv, static_cast<T*>(nullptr), lane_M);
      // added to each entry of the lane's adj_J after the lanes' terms, as OuterSum::write sums
      // them in order; the pass reads that lane of the packs in place
      const Strided<T, W> lane_J(reinterpret_cast<T*>(adj_J_) + i);
      for (int k = 0; k < bounce.n; ++k)
        for (int q = 0; q < nrow[i]; ++q) {
          const T w = bounce.s[k] * bounce.u[k][q];
          const Strided<T, W> a = lane_J + long(q) * nv;
          for (int d = 0; d < nv; ++d) a[d] += w * bounce.v[k][d];
        }
      const DenseEntries<T, Strided<const T, W>> rows_J{lane_J, nv};
      detail::adj_row_jacobians(m, r.q, r.v, rows_w_[i], ci, cv, nrow[i], rows_J, si, r.x.a, r.hq,
                                r.hv, env[i].ac);
    }
  }
  // The terms of the mass matrix's adjoint, which implicitfast's second part reads, from each
  // lane's (from the first part lane by lane; lane i takes donor[i]'s) into the lanes' (terms_,
  // their vectors in terms_uv_); terms_.n = -1 where the lanes have different numbers of them
  void terms_in(const OuterSum<T, 4>* terms, const int* donor) {
    const int n = terms[donor[0]].n, nv = m_.nv;
    terms_.n = n;
    for (int i = 0; i < W; ++i)
      if (terms[donor[i]].n != n) terms_.n = -1;
    const T* from[W];
    for (int k = 0; k < n && terms_.n >= 0; ++k) {
      P* u = terms_uv_ + 2L * k * nv;
      for (int i = 0; i < W; ++i) from[i] = terms[donor[i]].u[k];
      lanes_to_packs(from, nv, u);
      for (int i = 0; i < W; ++i) from[i] = terms[donor[i]].v[k];
      lanes_to_packs(from, nv, u + nv);
      for (int i = 0; i < W; ++i) terms_.s[k].set(i, terms[donor[i]].s[k]);
      terms_.u[k] = u;
      terms_.v[k] = u + nv;
    }
  }
  // and lane i of the lanes' terms into its own (terms, over its share of term_lanes_)
  void terms_out(int i, OuterSum<T, 4>& terms) {
    const int nv = m_.nv;
    T* at = term_lanes_.data() + 8L * nv * i;
    terms.n = 0;
    for (int k = 0; k < terms_.n; ++k, at += 2 * nv) {
      for (int d = 0; d < nv; ++d) {
        at[d] = terms_.u[k][d][i];
        at[nv + d] = terms_.v[k][d][i];
      }
      terms.add(at, at + nv, terms_.s[k][i]);
    }
  }
  // the lane whose arrays lane i takes into a pass for the lanes `on`: itself when on[i], else
  // the first of them
  static void donors(const bool* on, int* donor) {
    int first = 0;
    while (!on[first]) ++first;
    for (int i = 0; i < W; ++i) donor[i] = on[i] ? i : first;
  }
  // room for n values nobody reads
  T* sink_lane(long n) {
    if (long(sink_lanes_.size()) < n) sink_lanes_.resize(size_t(n));
    return sink_lanes_.data();
  }

  // step t of lane i's environment (e0 + i) backward alone, in the scalar core, its workspace
  // (and its factor and rows, where only the lanes kept them) first into its slot; without slots
  // (a model without rows) it replays the step from its record
  void alone(const RolloutAdjointKernel<T>& k, int e0, int i, int seg, int t,
             TapeReverse<T>& walk) const {
    const ModelView<T>& m = m_;
    const int e = e0 + i, slot = t - seg * k.tape.every;
    if (walk.store.reals) {
      const typename StepStore<T>::Slot f = walk.store.slot(m, slot);
      to_slot(i, slot, f.w);
      if (kept_.only_here(m, slot)) rows_to_slot(i, slot, f, true);
    }
    typename TapeReverse<T>::Walk& w = walk.at;
    w.rec = k.tape.walked(m, e, seg, &w.base);
    w.t = t;
    w.t0 = seg * k.tape.every;
    walk.step_back(w);
  }
  // the offset of the stage adjoint of workspace array `name` in an AdjWorkspace
  long adjoint_offset(const char* name) const {
#define PHX_PACK_ADJ_OFFSET(kind, array, size, comment) \
  if (std::strcmp(#array, name) == 0) return long(a_.array - a_.xpos);
    PHX_ADJ_WORKSPACE_ZEROED(PHX_PACK_ADJ_OFFSET)
#undef PHX_PACK_ADJ_OFFSET
    throw std::logic_error("phalanx: a workspace array the rows read has no stage adjoint");
  }
  // Zero a's stage adjoints (those AdjWorkspace::zero zeroes) of the arrays the rows' part reads
  // (arange_), the only ones it writes, or (outside) all the others: the two zero them all
  template <class U>
  void zero_adjoints(const AdjWorkspace<U>& a, bool outside) const {
    const long(*at)[2] = outside ? gaps_ : arange_;
    for (int j = 0, n = outside ? ngap_ : nrange_; j < n; ++j)
      std::fill_n(a.xpos + at[j][0], at[j][1], U(0));
  }
  // lane i of the rows the lanes kept of a segment's step (slot) into its slot f: J (the rows'
  // Jacobians, as many as the step has), and with `all` also the factor L and Y = L^-1 J^T
  void rows_to_slot(int i, int slot, const typename StepStore<T>::Slot& f, bool all) const {
    const long nv = m_.nv, n = long(*f.cv.nefc) * nv;
    auto out = [&](const P* from, long len, T* to) {
      for (long j = 0; j < len; ++j) to[j] = from[j][i];
    };
    out(kept_.J(slot), n, f.c.J);
    if (!all) return;
    out(kept_.Y(slot), n, f.c.Y);
    out(kept_.L(slot), nv * nv, f.c.L);
  }
  // the lanes' workspace of a segment's step (its slot)
  Workspace<P> workspace(int slot) const {
    return PackStepper<T>::Keep::workspace(m_, slots_, slot);
  }
  // lane i of that workspace into to (what a step's slot keeps of it: StepStore::kept_ranges)
  void to_slot(int i, int slot, const Workspace<T>& to) const {
    const Workspace<P> w = workspace(slot);
    StepStore<T>::kept_ranges(w, m_.nv, [&](long at, long n) {
      for (long j = 0; j < n; ++j) to.xpos[at + j] = w.xpos[at + j][i];
    });
  }
  // the loss gradients of the W environments' step t (which the walk adds at that step) on
  // their way to the cache: each environment's rows are far apart, too many streams for the
  // hardware to follow
  void prefetch_loss(const RolloutAdjointKernel<T>& k, int e0, int t) const {
    auto rows = [&](const T* out, int n) {
      if (!out) return;
      for (int i = 0; i < W; ++i) {
        const char* row = reinterpret_cast<const char*>(k.loss(out, e0 + i, n) + long(t) * n);
        for (long b = 0; b < long(n * sizeof(T)); b += 64) __builtin_prefetch(row + b);
      }
    };
    rows(k.adj_qpos_out, m_.nq);
    rows(k.adj_qvel_out, m_.nv);
  }
  // environment e's controls of step t
  const T* control(const RolloutAdjointKernel<T>& k, int e, int t) const {
    return k.ctrl + (long(e) * k.tape.nstep + t) * m_.nu;
  }

  // am_'s arrays over params_ for the parameters am0 (any environment's) asks for
  void bind_params(const ModelAdjoint<T>& am0) {
    long at = 0;
#define PHX_PACK_PARAM(Name, field_, check)         \
  am_.field_ = am0.field_ ? params_ + at : nullptr; \
  if (am0.field_) at += param_size(m_, kParam##Name);
    PHX_DYNAMICS_PARAMS(PHX_PACK_PARAM)
#undef PHX_PACK_PARAM
    nparam_ = at;
  }
  // lane i of the parameters' adjoints in packs (params_ or saved_, laid out as am_'s arrays)
  // into an environment's, or the reverse
  void lane_params(int i, const P* from, const ModelAdjoint<T>& to) const {
    const P* p = from;
#define PHX_PACK_PARAM(Name, field_, check) \
  if (am_.field_)                           \
    for (long j = 0, n = param_size(m_, kParam##Name); j < n; ++j, ++p) to.field_[j] = (*p)[i];
    PHX_DYNAMICS_PARAMS(PHX_PACK_PARAM)
#undef PHX_PACK_PARAM
  }
  void lane_params(int i, const ModelAdjoint<T>& from, P* to) const {
    P* p = to;
#define PHX_PACK_PARAM(Name, field_, check) \
  if (am_.field_)                           \
    for (long j = 0, n = param_size(m_, kParam##Name); j < n; ++j, ++p) p->set(i, from.field_[j]);
    PHX_DYNAMICS_PARAMS(PHX_PACK_PARAM)
#undef PHX_PACK_PARAM
  }
  // the environments' parameter adjoints into the lanes (once, while the walk stays on them)
  void to_lanes(const Env* env) {
    if (in_lanes_) return;
    in_lanes_ = true;
#define PHX_PACK_PARAM(Name, field_, check)                 \
  if (am_.field_)                                           \
    for (long j = 0; j < param_size(m_, kParam##Name); ++j) \
      for (int i = 0; i < W; ++i) am_.field_[j].set(i, env[i].am.field_[j]);
    PHX_DYNAMICS_PARAMS(PHX_PACK_PARAM)
#undef PHX_PACK_PARAM
  }
  // and back, before a step the environments take alone and at the end of a segment
  void to_envs(Env* env) {
    if (!in_lanes_) return;
    in_lanes_ = false;
#define PHX_PACK_PARAM(Name, field_, check)                 \
  if (am_.field_)                                           \
    for (long j = 0; j < param_size(m_, kParam##Name); ++j) \
      for (int i = 0; i < W; ++i) env[i].am.field_[j] = am_.field_[j][i];
    PHX_DYNAMICS_PARAMS(PHX_PACK_PARAM)
#undef PHX_PACK_PARAM
  }

  const ModelView<P>& lm_;
  const ModelView<T>& m_;
  AdjWorkspace<P> a_{};
  P* slots_;                // the lanes' workspaces of a segment's steps (workspace())
  Workspace<T> rows_w_[W];  // each lane's arrays of its step's rows' part
  long ranges_[8][2];       // those arrays: offset from xpos and size
  long arange_[8][2];       // their adjoints': offset from AdjWorkspace's xpos and size
  int nrange_ = 0;
  long gaps_[9][2];  // the stage adjoints between those: offset and size
  int ngap_ = 0;
  P *q_, *v_, *u_, *hq_, *hv_, *gq_, *gv_, *gc_, *adj_M_, *bias_, *qfrc_;
  P *params_, *saved_;  // the parameters' adjoints (am_'s arrays) and their copy before a step
  typename PackStepper<T>::LaneRows kept_;  // the rows of a segment's steps, in lanes
  AdjConstraintWorkspace<P> s_{};           // the arrays of rows_on_lanes' stages on the lanes
  P *f_, *sink_;                            // the impulses (nefcmax), room for nv values
  P *adj_J_, *vn_lanes_;                    // adj_J (nefcmax x nv) and J qvel on the lanes
  std::vector<T> sink_lanes_;
  // implicitfast's: the lanes' terms of the mass matrix's adjoint (terms_in), their vectors, and
  // each lane's share of them (terms_out)
  bool implicit_ = false;
  OuterSum<P, 4> terms_{};
  P* terms_uv_;
  std::vector<T> term_lanes_;
  std::vector<T> vn_[W];  // each lane's rows' J qvel (nefcmax)
  bool bounces_ = false;  // whether any contact may bounce (restitution)
  std::unique_ptr<bool[]> factored_;  // (nslot) Keep::factored of slots_
  ModelAdjoint<P> am_{};
  long nparam_ = 0;
  bool in_lanes_ = false;            // whether am_ holds the environments' parameter adjoints
  // for pack_stats(): lane_step's and rowless_step's passes, those that branched apart and those
  // whose rows' stages ran on the lanes; the environment-steps walked alone
  long passes_ = 0, fallbacks_ = 0, row_passes_ = 0, alone_ = 0;
};

// The most steps a pack's recomputed segment keeps (PackWalk's slots, factors and rows in lanes,
// and its environments' StepStore slots) within a quarter of its thread's share of the
// last-level cache (the rest is the passes' own workspaces'), where the walk back through the
// segment reads them again: past that the slots are read back from memory. Estimated before the
// rollout, when its rows are not known, as a lanes' workspace and W row-free slots per step. 0
// where packs do not run the backward of nenv environments (no bound from them).
template <class T>
int pack_segment_room(const LaneModel<T>* lanes, const ModelView<T>& m, int nenv) {
  if (!lanes || nenv < PackStepper<T>::W || !PackStepper<T>::applies(m) || !PackWalk<T>::applies(m))
    return 0;
  constexpr size_t W = PackStepper<T>::W;
  const size_t step =
      W * sizeof(T) * (Workspace<T>::size(m) + StepStore<T>::slot_size(m, 0, 0).reals);
  return int(std::max<size_t>(1, cache_per_thread() / 4 / step));
}

// RolloutAdjointKernel on packs where they apply; false where they do not. Each pack recomputes a
// segment of its W environments on the lanes, keeping every step in the environment's slot as
// TapeReverse::recompute does (a model without rows has no slots: the lanes keep its steps'
// workspaces alone), then walks back through it (PackWalk, or each environment alone in the
// scalar core where PackWalk does not apply).
template <class T>
bool rollout_adjoint_packs(const LaneModel<T>* lanes, int nenv, const RolloutAdjointKernel<T>& k,
                           ScratchSize scratch) {
  // With a checkpoint every step the scalar kernel replays each step from its record as it walks
  // (no slots); a pack recomputes it on its lanes from the record (its LCP solution known from
  // the next record) into a slot of its own and walks it from there, as it does a segment.
  RolloutAdjointKernel<T> kp = k;
  ScratchSize packed = scratch;
  if (k.tape.every == 1 && k.slot_nrow > 0) {
    kp.nslot = 1;
    packed = rollout_adjoint_scratch_size(k.model, 1, k.slot_ncon, k.slot_nrow);
  }
  // (a model with rows needs its slots; one without keeps its steps in the lanes alone)
  if (!lanes || scratch_trace().on || !PackStepper<T>::applies(k.model) || k.tape.mocap.given() ||
      (kp.nslot == 0 && k.model.nefcmax > 0) || nenv < PackStepper<T>::W)
    return false;
  static constexpr int W = PackStepper<T>::W;  // static: lambdas read it uncaptured (clang)
  using Env = typename RolloutAdjointKernel<T>::Env;
  launch_packs(*lanes, nenv, k, scratch, [&k = kp, scratch = packed](PackStepper<T>& s, int e0) {
    const ModelView<T>& m = k.model;
    const TapeView<T>& tape = k.tape;
    const int K = tape.every, nstep = tape.nstep;
    // the W environments' scratch, apart from the stepper's and the scalar kernel's
    struct Envs {};
    T* reals = thread_block<T, Envs>(size_t(W) * scratch.reals);
    int* ints = thread_block<int, Envs>(size_t(W) * scratch.ints);
    Env env[W];
    std::vector<TapeReverse<T>> walks;
    walks.reserve(W);
    typename PackStepper<T>::Keep keep;
    unsigned bits[W];
    bool any = false, live[W];
    for (int i = 0; i < W; ++i) {
      k.begin(e0 + i, {reals + i * scratch.reals, ints + i * scratch.ints}, env[i]);
      walks.push_back(k.reverse(e0 + i, env[i]));
      keep.store[i] = env[i].r.store;
      live[i] = k.live(e0 + i);
      bits[i] = live[i] ? 0u : kStatusStopMask;
      any = any || live[i];
    }
    const bool lanes = PackWalk<T>::applies(m);
    PackWalk<T> back(s.lane_model(), m, K);
    if (lanes) {
      keep.lanes = back.slots();
      keep.factored = back.factored();
      if (m.nefcmax > 0) keep.rows = back.kept();
    }
    s.place(e0);
    for (int seg = tape.nseg() - 1; any && seg >= 0; --seg) {
      const int t0 = seg * K, t1 = t0 + K < nstep ? t0 + K : nstep;
      for (int i = 0; i < W; ++i) {
        T* q = s.scalar_state();
        ContactView<T> cv = s.contacts(i);
        tape.checkpoints(m, e0 + i).load(m, seg, q, q + m.nq, nullptr, cv);
        s.load_lane(i, q, q + m.nq);
      }
      for (int t = t0; t < t1; ++t) {
        for (int i = 0; i < W; ++i) {
          T* q = s.scalar_state();
          s.lane_state(i, q, q + m.nq);
          if (K > 1) tape.segment(m, e0 + i).save(m, t - t0, q, q + m.nq, nullptr, s.contacts(i));
          // from its LCP solution where the tape holds it, as TapeReverse::recompute
          keep.known[i] = tape.known(m, e0 + i, t);
        }
        keep.slot = t - t0;
        unsigned step_bits[W];
        for (int i = 0; i < W; ++i) step_bits[i] = bits[i];
        s.step(k.ctrl + (long(e0) * nstep + t) * m.nu, long(nstep) * m.nu, nullptr, 0, step_bits,
               &keep);
      }
      if (lanes) {
        back.walk(k, e0, seg, env, walks.data(), live);
      } else {
        for (int i = 0; i < W; ++i)
          if (live[i]) walks[i].walk(seg);
      }
    }
    back.finish(env);
    for (int i = 0; i < W; ++i) k.finish(e0 + i, env[i]);
  });
  return true;
}

}  // namespace phx::cpu
