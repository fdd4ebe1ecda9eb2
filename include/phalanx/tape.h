// The tape of a rollout: what the backward pass needs to replay it step for step.
//
// A step is a function of the state (qpos, qvel, act), the control and the warm start it inherits
// from the previous step (the rows' keys, impulses and classes: PGS starts from the previous
// impulses, the stabilised solvers from the previous clamping set). A record holds the state
// and that warm start; replaying a step from its record takes the same contact and LCP
// decisions bit for bit, because every stage is deterministic (fixed iteration counts, fixed
// row order, no atomics).
//
// Checkpointing (Griewank's and Walther's recompute-by-segments): the forward rollout keeps a
// record every K steps. The backward pass takes the segments last to first; it recomputes the
// segment forward from its checkpoint, keeping each step's record in a segment buffer of K
// records and what its reverse pass reads in a StepStore slot, then walks the segment backward
// from the slots. Memory per environment is (ceil(T / K) + K) records, least near K = sqrt(T),
// plus K slots of backward scratch; with K = 1 every step is a checkpoint, the recomputation
// is skipped, and the walk replays each step from its record (adj_step_constrained). Gradients
// do not depend on K: a slot holds what the replay of the step's record would compute.
// With K > 1 the forward also logs each step's LCP solution, as far as its room allows
// (SolutionLog), and the recomputation replays those steps from it rather than solving again.
#pragma once

#include "phalanx/constraint_adjoint.h"

namespace phx {

// One environment's records: reals (nq + nv + na + nefcmax) and ints (1 + 2 nefcmax) each.
template <class T>
struct TapeRecords {
  T* reals;   // (n x record_reals)
  int* ints;  // (n x record_ints)

  PHX_HD static long state_reals(const ModelView<T>& m) { return m.nq + m.nv + m.na; }
  PHX_HD static long record_reals(const ModelView<T>& m) { return state_reals(m) + m.nefcmax; }
  PHX_HD static long record_ints(const ModelView<T>& m) { return 1 + 2L * m.nefcmax; }

  // record k <- state (act may be null when m.na = 0) and the warm start in cv
  PHX_HD void save(const ModelView<T>& m, int k, const T* qpos, const T* qvel, const T* act,
                   const ContactView<T>& cv) const {
    T* r = reals + k * record_reals(m);
    int* i = ints + k * record_ints(m);
    for (int j = 0; j < m.nq; ++j) r[j] = qpos[j];
    for (int j = 0; j < m.nv; ++j) r[m.nq + j] = qvel[j];
    for (int j = 0; j < m.na; ++j) r[m.nq + m.nv + j] = act[j];
    if (m.nefcmax == 0) return;
    int n = *cv.nefc;
    i[0] = n;
    for (int j = 0; j < n; ++j) {
      r[state_reals(m) + j] = cv.efc_force[j];
      i[1 + j] = cv.efc_key[j];
      i[1 + m.nefcmax + j] = cv.efc_class[j];
    }
  }

  // the warm start record k holds: the LCP solution of the step before it
  PHX_HD LcpSolution<T> solution(const ModelView<T>& m, int k) const {
    const T* r = reals + k * record_reals(m);
    const int* i = ints + k * record_ints(m);
    return {r + state_reals(m), i + 1 + m.nefcmax, i[0], i + 1};
  }
  // state <- record k
  PHX_HD void load_state(const ModelView<T>& m, int k, T* qpos, T* qvel, T* act) const {
    const T* r = reals + k * record_reals(m);
    for (int j = 0; j < m.nq; ++j) qpos[j] = r[j];
    for (int j = 0; j < m.nv; ++j) qvel[j] = r[m.nq + j];
    for (int j = 0; j < m.na; ++j) act[j] = r[m.nq + m.nv + j];
  }
  // state and warm start in cv <- record k
  PHX_HD void load(const ModelView<T>& m, int k, T* qpos, T* qvel, T* act,
                   ContactView<T>& cv) const {
    load_state(m, k, qpos, qvel, act);
    if (m.nefcmax == 0) return;
    const T* r = reals + k * record_reals(m);
    const int* i = ints + k * record_ints(m);
    int n = i[0];
    *cv.nefc = n;
    for (int j = 0; j < n; ++j) {
      cv.efc_force[j] = r[state_reals(m) + j];
      cv.efc_key[j] = i[1 + j];
      cv.efc_class[j] = i[1 + m.nefcmax + j];
    }
  }
};

// Each step's LCP solution (its rows' impulses, keys and classes), so that recomputing a segment
// skips the solver and the full contact search at every step, as the walk does: one pool of
// `room` rows per environment, filled step after step. A step whose rows no longer fit is not
// logged; its recomputation solves again, to the same bits (the solver is deterministic).
template <class T>
struct SolutionLog {
  T* force = nullptr;   // (nenv x room)
  int* ints = nullptr;  // (nenv x 2 room): the rows' keys, then their classes
  int* head = nullptr;  // (nenv x nstep x 2): where step t's rows start in the pool, how many
                        // (-1: not logged); null: no log
  int room = 0;

  // step t's n rows (impulses, keys, classes), after the step
  PHX_HD void save(int e, int nstep, int t, int n, const T* f, const int* key,
                   const int* cls) const {
    int* h = head + 2 * (long(e) * nstep + t);
    const int at = t == 0 ? 0 : h[-2] + (h[-1] > 0 ? h[-1] : 0);
    const bool fits = n >= 0 && at + n <= room;
    h[0] = at;
    h[1] = fits ? n : -1;
    if (!fits) return;
    T* to_f = force + long(e) * room + at;
    int* to_key = ints + 2L * e * room + at;
    for (int r = 0; r < n; ++r) {
      to_f[r] = f[r];
      to_key[r] = key[r];
      to_key[room + r] = cls[r];
    }
  }
  // step t's solution, or none when it was not logged
  PHX_HD LcpSolution<T> solution(int e, int nstep, int t) const {
    if (!head) return {};
    const int* h = head + 2 * (long(e) * nstep + t);
    if (h[1] < 0) return {};
    const int* key = ints + 2L * e * room + h[0];
    return {force + long(e) * room + h[0], key + room, h[1], key};
  }
};

// The tape of a batch on the device: checkpoints and the backward pass's segment buffers.
template <class T>
struct TapeView {
  int every = 0;      // K, steps per segment
  int nstep = 0;      // T, steps recorded
  T* check_reals;     // (nenv x ceil(T / K) x record_reals)
  int* check_ints;    // (nenv x ceil(T / K) x record_ints)
  T* seg_reals;       // (nenv x K x record_reals), backward only; null when K = 1
  int* seg_ints;      // (nenv x K x record_ints)
  unsigned* status;   // (nenv) the rollout's status bits
  int* peak;          // (nenv x 2) most contacts and most rows of any step (StepStore's sizes)
  MocapSteps<T> mocap{};  // the rollout's mocap poses per step, when it was given them
  SolutionLog<T> log{};   // each step's LCP solution, as far as it fits (K > 1 only)

  PHX_HD int nseg() const { return (nstep + every - 1) / every; }
  PHX_HD TapeRecords<T> checkpoints(const ModelView<T>& m, int e) const {
    long n = nseg();
    return {check_reals + e * n * TapeRecords<T>::record_reals(m),
            check_ints + e * n * TapeRecords<T>::record_ints(m)};
  }
  PHX_HD TapeRecords<T> segment(const ModelView<T>& m, int e) const {
    return {seg_reals + long(e) * every * TapeRecords<T>::record_reals(m),
            seg_ints + long(e) * every * TapeRecords<T>::record_ints(m)};
  }
  // the records segment seg's steps are walked from, and in *base the index of its first step
  // in them: the segment buffer, which the recomputation fills, or with a checkpoint every step
  // (no buffer) the checkpoints themselves
  PHX_HD TapeRecords<T> walked(const ModelView<T>& m, int e, int seg, int* base) const {
    *base = every > 1 ? 0 : seg;
    return every > 1 ? segment(m, e) : checkpoints(m, e);
  }
  // step t's LCP solution, when the tape holds it without the segment buffer: logged, or the warm
  // start of the checkpoint after it; none (the step solves) otherwise
  PHX_HD LcpSolution<T> known(const ModelView<T>& m, int e, int t) const {
    if (m.nefcmax == 0) return {};
    LcpSolution<T> s = log.solution(e, nstep, t);
    if (!s.force && (t + 1) % every == 0 && t + 1 < nstep)
      s = checkpoints(m, e).solution(m, (t + 1) / every);
    return s;
  }
};

namespace detail {
// a StepStore's slot_size(), which carve keeps in place (the CPU's layout, whose packs find a
// slot's place for each lane of each step); under Interleaved a base of no size, and each place()
// computes it
template <bool kInPlace>
struct SlotSizeKept {
  ScratchSize size{};
};
template <>
struct SlotSizeKept<false> {};
}  // namespace detail

// What the reverse pass of a constrained step reads from its forward, kept for each step of a
// segment while the backward pass recomputes it, so that walking the segment backward needs no
// replay (adj_step_constrained_replayed straight from the slot). A slot holds the state after
// the step, the workspace, and the constraint workspace's and contacts' arrays at the step's
// own counts, within room for `ncon` contacts and `nrow` rows: the most of any step of the
// rollout (TapeView::peak), so that a slot is a few times the state's size rather than the
// nconmax and nefcmax a model allows. Slots are env-private scratch of the backward pass, all
// of it taken by Arena::take_rows and so laid out by Layout: the constraint workspace's
// strided arrays of every slot in one block (slot k's rows after slot k - 1's), as the rows of
// the workspace the step ran in, and the slots' other arrays in another, each slot's after a
// head of two integers (the step's rows, -1 when the slot does not hold it; its contacts).
// Under Contiguous (the CPU's layout) a slot is read in place, its other arrays laid out as
// carve_slot carves them. Under Interleaved (CUDA's) they hold an image of what is kept
// (image_arrays, in its order), which read() copies into the reverse pass's own workspaces;
// only the rows are read in place.
template <class T, class Layout = Contiguous>
struct StepStore : detail::SlotSizeKept<std::is_same_v<Layout, Contiguous>> {
  using real = T;
  static constexpr bool kInPlace = std::is_same_v<Layout, Contiguous>;
  static constexpr int kHead = 2;  // integers before each slot's own
  RowsPtr<Layout, T> reals{};      // (nslot x (slot_size().reals - slot_size().rows))
  RowsPtr<Layout, int> ints{};     // (nslot x (kHead + slot_size().ints - slot_size().irows))
  T* rows = nullptr;               // (nslot x slot_size().rows), their block's first entry
  int* irows = nullptr;            // (nslot x slot_size().irows)
  int ncon = 0, nrow = 0;

  // slot k's arrays as the workspaces, contacts and next state of its step (below)
  struct Slot {
    T* qpos_next;
    T* qvel_next;
    Workspace<T> w;
    ConstraintWorkspace<T, Layout> c;
    ContactView<T> cv;
  };

  // nslot slots of room for ncon contacts and nrow rows each, from arena
  PHX_HD static StepStore carve(const ModelView<T>& m, Arena<T, Layout>& arena, int nslot, int ncon,
                                int nrow) {
    const ScratchSize slot = slot_size(m, ncon, nrow);
    StepStore s;
    s.reals = arena.template take_rows<T>(nslot * (slot.reals - slot.rows));
    s.ints = arena.template take_rows<int>(nslot * (kHead + slot.ints - slot.irows));
    s.rows = rows_base(arena.template take_rows<T>(nslot * slot.rows));
    s.irows = rows_base(arena.template take_rows<int>(nslot * slot.irows));
    s.ncon = ncon;
    s.nrow = nrow;
    if constexpr (kInPlace) s.size = slot;
    return s;
  }

  // a slot laid out over arena for the counts `room` (a model's with the slot's room for
  // contacts and rows): the state after the step, the workspace, the constraint workspace's
  // kept arrays and the contacts; the constraint workspace's scratch is that of `scratch`
  template <class M>
  PHX_HD static Slot carve_slot(const M& room, Arena<T, Layout>& arena,
                                const ConstraintWorkspace<T, Layout>& scratch = {}) {
    Slot s;
    s.qpos_next = arena.template take<T>(room.nq);
    s.qvel_next = arena.template take<T>(room.nv);
    s.w = Workspace<T>::carve(room, arena);
    s.c = scratch;
    take_kept(room, arena, s.c);
    s.cv = ContactView<T>::carve(room, arena);
    return s;
  }

  // the counts of a slot with room for ncon contacts and nrow rows
  PHX_HD static Counts slot_counts(const ModelView<T>& m, int ncon, int nrow) {
    Counts r = counts_of(m);
    r.nconmax = ncon;
    r.nefcmax = nrow;
    return r;
  }
  PHX_HD static ScratchSize slot_size(const ModelView<T>& m, int ncon, int nrow) {
    Arena<T, Layout> counting;
    carve_slot(slot_counts(m, ncon, nrow), counting);
    return counting.used();
  }

  // slot k <- the step that has just run: its workspaces w, c, contacts and rows cv, and the
  // state after it (qpos', qvel'). A step beyond the slot's room (which a deterministic
  // recomputation cannot take) is not kept: holds(k) is false and the caller replays it.
  // The step's scalar U converts to the slot's T (a Lane broadcasts it: host/lane_adjoint.h).
  template <class U>
  PHX_HD void save(const ModelView<T>& m, int k, const Workspace<U>& w,
                   const ConstraintWorkspace<U, Layout>& c, const ContactView<U>& cv,
                   const U* qpos_next, const U* qvel_next) const {
    if constexpr (kInPlace) {
      if (save_rows(m, k, c, cv, qpos_next, qvel_next)) save_workspace(w, slot(m, k).w, m.nv);
    } else {
      const Place at = place(m, k);
      if (!admit(at, cv)) return;
      const Counts used = slot_counts(m, *cv.ncon, *cv.nefc);
      copy_rows<false>(used, c, carve_at(m, at).c);
      Image image{at.reals, at.head + kHead};
      image_arrays(slot_counts(m, ncon, nrow), used, qpos_next, qvel_next, w, c, cv,
                   [&](auto p, long n, long room) { copy(p, n, image.take(p, room)); });
    }
  }

  // save() but for the workspace, which the caller puts in slot(m, k).w itself; false when
  // the step is not kept. RowsElsewhere: nor the factor L and the rows' J and Y, which the
  // caller keeps too (host/pack_kernels.h) and puts in the slot before a pass reads them there.
  // (A template parameter: the device kernels' copy stays the plain one.) In place only.
  template <bool RowsElsewhere = false, class U>
  PHX_HD bool save_rows(const ModelView<T>& m, int k, const ConstraintWorkspace<U, Layout>& c,
                        const ContactView<U>& cv, const U* qpos_next, const U* qvel_next) const {
    static_assert(kInPlace, "a slot laid out apart is saved whole (save)");
    const Place at = place(m, k);
    if (!admit(at, cv)) return false;
    Slot s = carve_at(m, at);
    copy(qpos_next, m.nq, s.qpos_next);
    copy(qvel_next, m.nv, s.qvel_next);
    // the step's own counts
    const Counts used = slot_counts(m, *cv.ncon, *cv.nefc);
#define PHX_COPY_FROM_C(kind, name, size, comment) \
  if (!RowsElsewhere || !rows_array(c, c.name)) copy(c.name, long(size), s.c.name);
#define PHX_COPY_FROM_CV(kind, name, size, comment) copy(cv.name, long(size), s.cv.name);
    {
      const Counts& m = used;
      PHX_CONSTRAINT_WORKSPACE_KEPT_FIXED(PHX_COPY_FROM_C)
      PHX_CONTACT_ARRAYS(PHX_COPY_FROM_CV)
    }
#undef PHX_COPY_FROM_C
#undef PHX_COPY_FROM_CV
    copy_rows<RowsElsewhere>(used, c, s.c);
    return true;
  }

  // the rows of the step slot k holds, or -1 when it holds none
  PHX_HD int rows_held(const ModelView<T>& m, int k) const {
    return place(m, k).head[0];
  }
  PHX_HD bool holds(const ModelView<T>& m, int k) const {
    return rows_held(m, k) >= 0;
  }

  // Slot k, in place; under Interleaved only its rows are, its other pointers null. The
  // constraint workspace's scratch (tmp, lcp, ilcp) and its arrays the reverse pass does not
  // read (bias, f_prev, key_prev, class_prev) are those of `scratch`, whose contents are not
  // kept.
  PHX_HD Slot slot(const ModelView<T>& m, int k,
                   const ConstraintWorkspace<T, Layout>& scratch = {}) const {
    return carve_at(m, place(m, k), scratch);
  }

  // Slot k (which holds its step) for its reverse pass, the state after the step copied into
  // into.qpos_next and into.qvel_next: in place (Contiguous), or with the arrays of `into` (its
  // workspace, its constraint workspace's kept arrays but the rows, its contacts) holding the
  // slot's copies. The constraint workspace's scratch is into.c's.
  PHX_HD Slot read(const ModelView<T>& m, int k, const Slot& into) const {
    const Place at = place(m, k);
    Slot s = carve_at(m, at, into.c);
    if constexpr (kInPlace) {
      copy(s.qpos_next, m.nq, into.qpos_next);
      copy(s.qvel_next, m.nv, into.qvel_next);
      return s;
    } else {
      Slot to = into;
      to.c = s.c;
#define PHX_INTO(kind, name, size, comment) to.c.name = into.c.name;
      PHX_CONSTRAINT_WORKSPACE_KEPT_FIXED(PHX_INTO)
#undef PHX_INTO
      Image image{at.reals, at.head + kHead};
      image_arrays(slot_counts(m, ncon, nrow), slot_counts(m, at.head[1], at.head[0]), to.qpos_next,
                   to.qvel_next, to.w, to.c, to.cv,
                   [&](auto p, long n, long room) { copy(image.take(p, room), n, p); });
      return to;
    }
  }

  // to <- what a reverse pass reads of the workspace from, as carved, contiguously, but for the
  // articulated-body arrays (aba_IA to aba_u), which the forward solve reads and a pass
  // without rows computes again (adj_step_replayed): kinematics to crb, then armature, qfrc
  // and qacc. U converts to T (a Lane broadcasts it).
  template <class U>
  PHX_HD static void save_workspace(const Workspace<U>& from, const Workspace<T>& to, int nv) {
    kept_ranges(from, nv, [&](long at, long n) { copy(from.xpos + at, n, to.xpos + at); });
  }
  // f(at, n) for each range of the workspace w that save_workspace keeps: n entries from
  // w.xpos + at (a workspace of any real type, carved as w is)
  template <class U, class F>
  PHX_HD static void kept_ranges(const Workspace<U>& w, int nv, F f) {
    f(0L, long(w.aba_IA - w.xpos));
    f(long(w.armature - w.xpos), long(w.qacc + nv - w.armature));
  }

 private:
  // where slot k lies: its reals and its integers from its head on, but the rows; its rows
  struct Place {
    RowsPtr<Layout, T> reals;
    RowsPtr<Layout, int> head;
    T* rows;
    int* irows;
  };
  PHX_HD Place place(const ModelView<T>& m, int k) const {
    ScratchSize at;
    if constexpr (kInPlace)
      at = this->size;
    else
      at = slot_size(m, ncon, nrow);
    constexpr int W = Layout::kStride;
    return {reals + k * (at.reals - at.rows), ints + long(k) * (kHead + at.ints - at.irows),
            rows + k * at.rows * W, irows + k * at.irows * W};
  }
  // the slot at `at`, carved (slot())
  PHX_HD Slot carve_at(const ModelView<T>& m, const Place& at,
                       const ConstraintWorkspace<T, Layout>& scratch = {}) const {
    Arena<T, Layout> arena(Scratch<T, Layout>{nullptr, nullptr, nullptr, at.rows, at.irows});
    if constexpr (kInPlace) {
      arena.reals = at.reals;
      arena.ints = at.head + kHead;
    }
    return carve_slot(slot_counts(m, ncon, nrow), arena, scratch);
  }
  // the head of the slot at `at` for the step of contacts and rows cv: whether it fits the
  // slot's room
  template <class U>
  PHX_HD bool admit(const Place& at, const ContactView<U>& cv) const {
    const RowsPtr<Layout, int> h = at.head;
    const bool fits = *cv.ncon <= ncon && *cv.nefc <= nrow;
    h[0] = fits ? *cv.nefc : -1;
    h[1] = *cv.ncon;
    return fits;
  }

  // The image of a slot under Interleaved, handed out array by array: each array's entries
  // next, reals or integers as the array's
  struct Image {
    RowsPtr<Layout, T> reals;
    RowsPtr<Layout, int> ints;
    // where an array p of `room` entries goes (its kind's next entries)
    template <class P>
    PHX_HD auto take(P, long room) {
      if constexpr (std::is_same_v<std::remove_cv_t<std::remove_pointer_t<P>>, int>) {
        const RowsPtr<Layout, int> at = ints;
        ints = ints + room;
        return at;
      } else {
        const RowsPtr<Layout, T> at = reals;
        reals = reals + room;
        return at;
      }
    }
  };
  // f(p, n, room) for each array a slot's image keeps, in its order: p the array among the
  // state after a step (qpos_next, qvel_next), its workspace w (kept_ranges), its constraint
  // workspace's kept arrays but the rows, and its contacts cv, at the step's counts `used`; n
  // its entries at those counts; room those the image gives it at the slot's counts `room`
  template <class Q, class U, class F>
  PHX_HD static void image_arrays(const Counts& room, const Counts& used, Q qpos_next, Q qvel_next,
                                  const Workspace<U>& w, const ConstraintWorkspace<U, Layout>& c,
                                  const ContactView<U>& cv, F f) {
    f(qpos_next, long(used.nq), long(room.nq));
    f(qvel_next, long(used.nv), long(room.nv));
    kept_ranges(w, used.nv, [&](long at, long n) { f(w.xpos + at, n, n); });
#define PHX_IMAGE_ARRAY(of, name, size)                                           \
  f(                                                                              \
      of.name, []([[maybe_unused]] const Counts& m) { return long(size); }(used), \
      []([[maybe_unused]] const Counts& m) { return long(size); }(room));
#define PHX_IMAGE_C(kind, name, size, comment) PHX_IMAGE_ARRAY(c, name, size)
#define PHX_IMAGE_CV(kind, name, size, comment) PHX_IMAGE_ARRAY(cv, name, size)
    PHX_CONSTRAINT_WORKSPACE_KEPT_FIXED(PHX_IMAGE_C)
    PHX_CONTACT_ARRAYS(PHX_IMAGE_CV)
#undef PHX_IMAGE_CV
#undef PHX_IMAGE_C
#undef PHX_IMAGE_ARRAY
  }

  // the constraint workspace's kept arrays (PHX_CONSTRAINT_WORKSPACE_KEPT) into w
  template <class M>
  PHX_HD static void take_kept(const M& m, Arena<T, Layout>& arena,
                               ConstraintWorkspace<T, Layout>& w) {
    PHX_CONSTRAINT_WORKSPACE_KEPT_FIXED(PHX_WORKSPACE_TAKE)
    PHX_CONSTRAINT_WORKSPACE_KEPT_STRIDED(PHX_WORKSPACE_TAKE_ROWS)
  }
  // the kept rows at the counts m (but J and Y with RowsElsewhere)
  template <bool RowsElsewhere, class U>
  PHX_HD static void copy_rows(const Counts& m, const ConstraintWorkspace<U, Layout>& c,
                               const ConstraintWorkspace<T, Layout>& to) {
#define PHX_COPY_ROWS(kind, name, size, comment) \
  if (!RowsElsewhere || !rows_array(c, c.name)) copy(c.name, long(size), to.name);
    PHX_CONSTRAINT_WORKSPACE_KEPT_STRIDED(PHX_COPY_ROWS)
#undef PHX_COPY_ROWS
  }
  // (RowsElsewhere is the CPU's packs', over Contiguous storage)
  template <class U, class P>
  PHX_HD static bool rows_array(const ConstraintWorkspace<U, Layout>& c, P a) {
    if constexpr (std::is_same_v<Layout, Contiguous>) {
      const void* p = a;
      return p == c.L || p == c.J || p == c.Y;
    } else {
      return false;
    }
  }
  template <class P, class Q>
  PHX_HD static void copy(P from, long n, Q to) {
    for (long i = 0; i < n; ++i) to[i] = std::remove_cvref_t<decltype(to[i])>(from[i]);
  }
};

// The backward pass of one environment's taped rollout (run()), segment by segment, last to
// first: recompute() runs a segment forward from its checkpoint into the segment records
// (nothing to do when every step is a checkpoint, K = 1) and, with slots, keeps what each step's
// reverse pass reads (StepStore); walk() then takes its steps backward, a step with a slot by
// adj_step_constrained_replayed on it, one without by adj_step_env replaying its record. Both
// give the same bits. With mocap poses per step (tape.mocap), each step points m at its poses
// and the walk their adjoints at its rows of adj_mocap_pos and adj_mocap_quat. The scratch's
// and the slots' strided arrays are laid out by Layout.
template <class T, class Layout = Contiguous>
struct TapeReverse {
  ModelView<T>& m;
  const TapeView<T>& tape;
  int e;                      // the environment
  const T* ctrl;              // its controls (nstep x nu)
  AdjointScratch<T, Layout>& x;
  const StepStore<T, Layout>& store;  // K slots, or none (store.reals null)
  ContactView<T> cv;          // the replay's contacts and rows (with constraint rows)
  T *q, *v, *a;               // the state of the step replayed (nq, nv, na)
  T *gq, *gv, *ga;            // adjoint of the state after the current step (nq, nv, na)
  T *hq, *hv, *ha;            // adjoint of the state before it (nq, nv, na)
  T* adj_mocap_pos = nullptr;   // the environment's pose adjoints per step (nstep x nmocap x 3)
  T* adj_mocap_quat = nullptr;  // (nstep x nmocap x 4); both only with tape.mocap

  // segment seg's records and, in *base, the index of its first step in them: the checkpoints
  // themselves when K = 1, else the segment buffer, recomputed here
  PHX_HD TapeRecords<T> recompute(int seg, int* base) {
    const int K = tape.every, nstep = tape.nstep, t0 = seg * K;
    const int t1 = t0 + K < nstep ? t0 + K : nstep;
    TapeRecords<T> rec = tape.walked(m, e, seg, base);
    if (K == 1) return rec;
    tape.checkpoints(m, e).load(m, seg, q, v, a, cv);
    for (int t = t0; t < t1; ++t) {
      const T* u = ctrl + long(t) * m.nu;
      if (tape.mocap.given()) tape.mocap.at(m, e, t, nstep);
      rec.save(m, t - t0, q, v, a, cv);
      if (store.reals) {
        // every step into its slot, from its LCP solution where the tape holds it
        step_constrained(m, q, v, inputs(u), x.w, x.c, cv, tape.known(m, e, t));
        store.save(m, t - t0, x.w, x.c, cv, q, v);
        if (m.na > 0) activation_step(m, u, a);
      } else if (t + 1 < t1) {
        step_env(m, q, v, a, u, x, cv);
      }
    }
    return rec;
  }

  // What the steps of the walk share: the segment's records and where it stands in them, the
  // loss gradients, the control adjoints, the parameters' adjoints, and the arguments of a step's
  // reverse pass (its slot, or its StepEnvAdjoint), built in place. One struct, a member, so that
  // it stays in memory beside the walk's references: on CUDA each step's reverse pass is a call
  // that needs nearly every register, and the walk keeps across it little but its own address
  // (a temporary of its own would keep one more), reading the rest back afterwards.
  struct Walk {
    ModelAdjoint<T> am;
    TapeRecords<T> rec;  // the segment's records (recompute's)
    const T* out[3];     // adj_qpos_out, adj_qvel_out, adj_act_out
    T* first[3];         // where run() writes the initial state's adjoints (nq, nv, na or null)
    T* adj_ctrl;
    const ContactModelAdjoint<T>* ac;
    int seg, base, t, t0;  // the segment, its first step's index in rec, the step, its first step
    StepEnvAdjoint<T> s;   // a step without a slot (adj_step_env's)
    typename StepStore<T, Layout>::Slot slot;  // a step's slot (from_slot's)
  };
  Walk at{};

  // what the walk adds and accumulates (before run or walk): the loss gradients adj_qpos_out,
  // adj_qvel_out, adj_act_out of the state after each step (nstep x nq, nstep x nv, nstep x na,
  // may be null) are added as the walk reaches them; adj_ctrl (nstep x nu) receives each step's
  // control adjoint, am and ac accumulate the parameters' (but for mocap poses given per step,
  // whose adjoints go to the step's rows); first (run's only) receives the initial state's
  PHX_HD void bind(const T* adj_qpos_out, const T* adj_qvel_out, const T* adj_act_out, T* adj_ctrl,
                   const ModelAdjoint<T>& am, const ContactModelAdjoint<T>& ac, T* const first[3]) {
    at.am = am;
    at.out[0] = adj_qpos_out;
    at.out[1] = adj_qvel_out;
    at.out[2] = adj_act_out;
    for (int k = 0; k < 3; ++k) at.first[k] = first[k];
    at.adj_ctrl = adj_ctrl;
    at.ac = &ac;
  }

  // The whole backward pass: every step, last to first, each segment recomputed as the walk
  // enters it, and past the first step the initial state's adjoints written to at.first. On CUDA
  // a branch or loop whose threads may part and meet again holds a convergence barrier across
  // the calls inside it, in a register that the callee leaves alone or else in memory, and a
  // step's reverse pass leaves few: step_back's choice between a slot and a replay takes one.
  // So the walk is inlined into its kernel, and it is one loop whose only way out writes the
  // result and returns, so that the kernel ends with it and no thread waits for another.
  PHX_HD void run() {
    at.t0 = tape.nstep;
    at.t = tape.nstep - 1;
    for (;;) {
      enter(at);
      if (at.t < 0) return;
      step_back(at);
      --at.t;
    }
  }

  // run()'s step w.t: when it is before w's segment, its own segment's records recomputed; past
  // the first step, the initial state's adjoints written
  PHX_HD void enter(Walk& w) {
    if (w.t < 0) return copy_state(m, gq, gv, ga, w.first[0], w.first[1], w.first[2]);
    if (w.t >= w.t0) return;
    w.seg = w.t / tape.every;
    w.t0 = w.seg * tape.every;
    w.rec = recompute(w.seg, &w.base);
  }

  // segment seg's steps backward from the tape's records of it, for a caller that recomputed
  // the segment itself
  PHX_HD void walk(int seg) {
    const int K = tape.every, t1 = (seg + 1) * K < tape.nstep ? (seg + 1) * K : tape.nstep;
    at.rec = tape.walked(m, e, seg, &at.base);
    at.seg = seg;
    at.t0 = seg * K;
    for (at.t = t1 - 1; at.t >= at.t0; --at.t) step_back(at);
  }

  // step w.t of w's segment backward (run's and walk's)
  PHX_HD void step_back(Walk& w) {
    const int t = w.t, t0 = w.t0, na = m.na, nu = m.nu, K = tape.every, nstep = tape.nstep;
    const int t1 = t0 + K < nstep ? t0 + K : nstep;
    begin_step(t, w.out[0], w.out[1], w.out[2]);
    const T* u = ctrl + long(t) * nu;
    T* gc = w.adj_ctrl + long(t) * nu;
    if (tape.mocap.given()) {
      tape.mocap.at(m, e, t, nstep);
      tape.mocap.adjoint(m, t, adj_mocap_pos, adj_mocap_quat, w.am);
    }
    if (store.reals && store.holds(m, t - t0)) {
      w.slot = from_slot(t - t0, w.rec, w.base);
      T* g_input = gc;
      if (na > 0) {
        for (int i = 0; i < nu; ++i) x.adj_input[i] = T(0);
        g_input = x.adj_input;
      }
      adj_step_constrained_replayed(m, q, v, inputs(u), w.slot.w, w.slot.c, w.slot.cv, x.a, x.s, gq,
                                    gv, hq, hv, g_input, w.am, *w.ac, static_cast<T*>(nullptr));
      if (na > 0) adj_activation(m, u, a, x.adj_input, ga, gc, ha);
    } else {
      w.rec.load(m, w.base + t - t0, q, v, a, cv);
      // the step's own LCP solution, the next record's warm start (or the tape's, at the
      // segment's end): the replay skips the solver
      LcpSolution<T> known{};
      if (m.nefcmax > 0)
        known = t + 1 < t1 ? w.rec.solution(m, w.base + t + 1 - t0) : tape.known(m, e, t);
      w.s = {q, v, a, u, gq, gv, ga, hq, hv, ha, gc, &w.am, w.ac, nullptr, known};
      adj_step_env(m, x, cv, w.s);
    }
    end_step();
  }

  // A step's walk in parts, for a caller that runs its reverse pass itself (the CPU's packs of
  // environments): begin_step(t) adds the loss gradients of the state after step t to the
  // adjoints (gq, gv, ga) and zeroes those of the state before it (hq, hv, ha); from_slot(i)
  // loads the state before the segment's step i (q, v, a) and its state after (x.s) and gives
  // its slot (StepStore::read: in place, or copied into x.w, x.c and cv); end_step() makes the
  // state before the step the one after the next step back.
  PHX_HD void begin_step(int t, const T* adj_qpos_out, const T* adj_qvel_out,
                         const T* adj_act_out) {
    add_row(gq, adj_qpos_out, t, m.nq);
    add_row(gv, adj_qvel_out, t, m.nv);
    add_row(ga, adj_act_out, t, m.na);
    for (int i = 0; i < m.nq; ++i) hq[i] = T(0);
    for (int i = 0; i < m.nv; ++i) hv[i] = T(0);
    for (int i = 0; i < m.na; ++i) ha[i] = T(0);
  }
  PHX_HD typename StepStore<T, Layout>::Slot from_slot(int i, const TapeRecords<T>& rec, int base) {
    rec.load_state(m, base + i, q, v, a);
    return store.read(m, i, {x.s.qpos_next, x.s.qvel_next, x.w, x.c, cv});
  }
  PHX_HD void end_step() {
    for (int i = 0; i < m.nq; ++i) gq[i] = hq[i];
    for (int i = 0; i < m.nv; ++i) gv[i] = hv[i];
    for (int i = 0; i < m.na; ++i) ga[i] = ha[i];
  }

 private:
  // the actuators' inputs of a step with controls u at the activations a (u itself without
  // activation state)
  PHX_HD const T* inputs(const T* u) const {
    if (m.na == 0) return u;
    actuator_inputs(m, u, a, x.input);
    return x.input;
  }
  // g += row t of out (n wide), when out is given
  PHX_HD static void add_row(T* g, const T* out, int t, int n) {
    if (out)
      for (int i = 0; i < n; ++i) g[i] += out[long(t) * n + i];
  }
};

}  // namespace phx
