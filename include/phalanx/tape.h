// The tape of a rollout: what the backward pass needs to replay it step for step.
//
// A step is a function of the state (qpos, qvel), the control and the warm start it inherits
// from the previous step (the rows' keys, impulses and classes: PGS starts from the previous
// impulses, the stabilised solvers from the previous clamping set). A record holds the state
// and that warm start; replaying a step from its record takes the same contact and LCP
// decisions bit for bit, because every stage is deterministic (fixed iteration counts, fixed
// row order, no atomics).
//
// Checkpointing (Griewank's and Walther's recompute-by-segments): the forward rollout keeps a
// record every K steps. The backward pass takes the segments last to first; it recomputes the
// segment forward from its checkpoint, keeping each step's record in a segment buffer of K
// records, then walks the segment backward with adj_step_constrained. Memory per environment is
// (ceil(T / K) + K) records, least near K = sqrt(T); with K = 1 every step is a checkpoint and
// the recomputation is skipped. Gradients do not depend on K: each step's adjoint starts from
// the same record.
#pragma once

#include "phalanx/constraint.h"

namespace phx {

// One environment's records: reals (nq + nv + nefcmax) and ints (1 + 2 nefcmax) each.
template <class T>
struct TapeRecords {
  T* reals;   // (n x record_reals)
  int* ints;  // (n x record_ints)

  PHX_HD static long record_reals(const ModelView<T>& m) { return m.nq + m.nv + m.nefcmax; }
  PHX_HD static long record_ints(const ModelView<T>& m) { return 1 + 2L * m.nefcmax; }

  // record k <- state and the warm start in cv
  PHX_HD void save(const ModelView<T>& m, int k, const T* qpos, const T* qvel,
                   const ContactView<T>& cv) const {
    T* r = reals + k * record_reals(m);
    int* i = ints + k * record_ints(m);
    for (int j = 0; j < m.nq; ++j) r[j] = qpos[j];
    for (int j = 0; j < m.nv; ++j) r[m.nq + j] = qvel[j];
    if (m.nefcmax == 0) return;
    int n = *cv.nefc;
    i[0] = n;
    for (int j = 0; j < n; ++j) {
      r[m.nq + m.nv + j] = cv.efc_force[j];
      i[1 + j] = cv.efc_key[j];
      i[1 + m.nefcmax + j] = cv.efc_class[j];
    }
  }

  // the warm start record k holds: the LCP solution of the step before it
  PHX_HD LcpSolution<T> solution(const ModelView<T>& m, int k) const {
    const T* r = reals + k * record_reals(m);
    const int* i = ints + k * record_ints(m);
    return {r + m.nq + m.nv, i + 1 + m.nefcmax, i[0], i + 1};
  }
  // state and warm start in cv <- record k
  PHX_HD void load(const ModelView<T>& m, int k, T* qpos, T* qvel, ContactView<T>& cv) const {
    const T* r = reals + k * record_reals(m);
    const int* i = ints + k * record_ints(m);
    for (int j = 0; j < m.nq; ++j) qpos[j] = r[j];
    for (int j = 0; j < m.nv; ++j) qvel[j] = r[m.nq + j];
    if (m.nefcmax == 0) return;
    int n = i[0];
    *cv.nefc = n;
    for (int j = 0; j < n; ++j) {
      cv.efc_force[j] = r[m.nq + m.nv + j];
      cv.efc_key[j] = i[1 + j];
      cv.efc_class[j] = i[1 + m.nefcmax + j];
    }
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
};

}  // namespace phx
