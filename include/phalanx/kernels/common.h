// What every kernel body shares: the batched arrays' rows of one environment. Kernel bodies are
// thin functors that index one environment, load, call the core's functions and store; the CPU
// backend runs them in an OpenMP loop (host/cpu_backend.h), the CUDA backend in a generic
// __global__ shell (cuda/launch.cuh). Every batched array is env-major: entry e of an
// (nenv, n) array starts at e * n. Each kernel has `using Scalar` (its real type) and
// operator()(e, Scratch<Scalar>), its private scratch of the size the host launches it with.
#pragma once

#include "phalanx/constraint_adjoint.h"

namespace phx {

// environment e's row of n entries of an (nenv x n) array, or null for a null array
template <class P>
PHX_HD P* env_row(P* p, int e, int n) {
  return p ? p + long(e) * n : nullptr;
}

// environment e's slices of per-environment parameter adjoint arrays, zeroed (null stays null)
template <class T>
PHX_HD void env_parameter_adjoints(const ModelView<T>& m, int e, const ModelAdjoint<T>& all,
                                   const ContactModelAdjoint<T>& all_contact, ModelAdjoint<T>& am,
                                   ContactModelAdjoint<T>& ac) {
  ModelAdjoint<T> all_model = all;
  ContactModelAdjoint<T> all_con = all_contact;
  for (int k = 0; k < kNumParams; ++k) {
    T* p = param_adjoint(all_model, all_con, k);
    long n = param_size(m, k);
    T*& r = param_adjoint(am, ac, k);
    r = p ? p + e * n : nullptr;
    for (long i = 0; r && i < n; ++i) r[i] = T(0);
  }
}

// ---- staged launches ----------------------------------------------------------------------
// A kernel that takes steps may run as launches of stages, one after the other, on a device
// that prefers it so (cuda/launch.cuh): per step the narrowphase of the convex pairs, for a model
// that has them (ConvexStage: GJK and EPA), that of the other pairs (DetectStage), and the step
// given the contacts of both (StepStage, DetectedBefore), so that no device kernel holds the
// convex narrowphase beside the rest of the narrowphase, nor the narrowphase beside the rest of a
// step. Such a kernel has kStaged, its steps [t0, t1) of an environment (steps(e, scratch, t0,
// t1, detect), which any sequence of ranges runs as one launch of all), the narrowphase stages
// of its step t (detect(e, scratch, t, out), for each environment whose step runs the
// narrowphase, by detect_stage into out, a StageContacts), and staged(memory, run), which
// passes its stages to run (stage_launches) given the memory they share.

// Whether the steps of m run a narrowphase (an LCP step with contacts)
template <class T>
PHX_HD bool detects_contacts(const ModelView<T>& m) {
  return m.contact && m.nconmax > 0 && m.nefcmax > 0 && m.solver != kSolverXpbd;
}

// What the stages of a staged kernel's launches pass on to each other, in memory of their own
// (cuda/launch.cuh): the contacts each detection finds for the step after it, for a model with
// convex pairs those of the convex pairs alone for the detection after them, and each
// environment's status bits of the launches' steps so far, for a kernel that adds its steps'
// bits to those of earlier calls (StepKernel), whose status array cannot tell whether a step of
// this call has stopped.
template <class T>
struct StageMemory {
  ContactData<T> found;   // nenv environments' ContactView arrays (ContactData::carve)
  ContactData<T> convex;  // the same, for a model with convex pairs; else empty
  unsigned* bits;         // (nenv)

  // the reals and integers of nenv environments' (host code)
  static ScratchSize size(const ModelView<T>& m, long nenv) {
    const ScratchSize each = carved_size<ContactView<T>, T>(m);
    const long lists = m.npair_convex > 0 ? 2 : 1;
    return {lists * nenv * each.reals, lists * nenv * each.ints + nenv};
  }
  // nenv environments' over the blocks reals and ints of size()
  static StageMemory carve(const ModelView<T>& m, long nenv, T* reals, int* ints) {
    const ScratchSize each = carved_size<ContactView<T>, T>(m);
    StageMemory s{ContactData<T>::carve(m, nenv, reals, ints), {}, nullptr};
    reals += nenv * each.reals;
    ints += nenv * each.ints;
    if (m.npair_convex > 0) {
      s.convex = ContactData<T>::carve(m, nenv, reals, ints);
      reals += nenv * each.reals;
      ints += nenv * each.ints;
    }
    s.bits = reinterpret_cast<unsigned*>(ints);
    return s;
  }
  // environment e's contacts of the convex pairs (none without convex pairs)
  PHX_HD ContactView<T> convex_env(const ModelView<T>& m, int e) const {
    return m.npair_convex > 0 ? convex.env(m, e) : ContactView<T>{};
  }
};

// Whether a kernel takes scratch of Layout: its stages take the layouts it takes
template <class Kernel, class Layout>
concept TakesLayout =
    std::is_invocable_v<const Kernel&, int, Scratch<typename Kernel::Scalar, Layout>>;

// A narrowphase stage of the pairs Set of step t of a staged kernel's launches (stage_launches),
// which ConvexStage and DetectStage name
template <class Kernel, PairSet Set>
struct NarrowphaseStage {
  using Scalar = typename Kernel::Scalar;
  Kernel k;
  StageMemory<Scalar> memory;
  int t;

  template <class Layout>
  requires TakesLayout<Kernel, Layout> PHX_HD void operator()(
      int e, Scratch<Scalar, Layout> scratch) const {
    const ModelView<Scalar>& m = k.model;
    if constexpr (Set == PairSet::kConvex)
      k.detect(e, scratch, t, StageContacts<Scalar, Set>{memory.convex_env(m, e), {}});
    else
      k.detect(e, scratch, t,
               StageContacts<Scalar, Set>{memory.found.env(m, e), memory.convex_env(m, e)});
  }
};
// the stage of the convex pairs, for a model that has them
template <class Kernel>
struct ConvexStage : NarrowphaseStage<Kernel, PairSet::kConvex> {};
// the stage of every pair's contacts, the convex pairs' from the ConvexStage before it
template <class Kernel>
struct DetectStage : NarrowphaseStage<Kernel, PairSet::kOwn> {};

// Steps [t0, t1) of a staged kernel's launches (stage_launches), each with the contacts of the
// narrowphase stages before it.
template <class Kernel>
struct StepStage {
  using Scalar = typename Kernel::Scalar;
  Kernel k;
  ContactData<Scalar> found;
  int t0, t1;

  template <class Layout>
  requires TakesLayout<Kernel, Layout> PHX_HD void operator()(
      int e, Scratch<Scalar, Layout> scratch) const {
    const ModelView<Scalar>& m = k.model;
    k.steps(e, scratch, t0, t1,
            DetectedBefore<Scalar>{detects_contacts(m) ? found.env(m, e) : ContactView<Scalar>{}});
  }
};

// The stages of nstep steps of kernel k, each passed to run (a launch over every environment):
// per step the narrowphase stages and the step, or for a model that detects no contacts every
// step in one launch, given the memory they share (StageMemory). Host code.
template <class Kernel, class Run>
void stage_launches(const Kernel& k, int nstep, const StageMemory<typename Kernel::Scalar>& memory,
                    Run&& run) {
  if (!detects_contacts(k.model) || nstep == 0) {
    run(StepStage<Kernel>{k, memory.found, 0, nstep});
    return;
  }
  for (int t = 0; t < nstep; ++t) {
    if (k.model.npair_convex > 0) run(ConvexStage<Kernel>{{k, memory, t}});
    run(DetectStage<Kernel>{{k, memory, t}});
    run(StepStage<Kernel>{k, memory.found, t, t + 1});
  }
}

}  // namespace phx
