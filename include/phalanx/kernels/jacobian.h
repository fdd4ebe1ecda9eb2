// The one-step Jacobian kernel (jacobian.h has the method).
#pragma once

#include "phalanx/jacobian.h"
#include "phalanx/kernels/common.h"

namespace phx {

template <class T>
PHX_HD ScratchSize jacobian_scratch_size(const ModelView<T>& m) {
  return carved_size<JacobianScratch<T>, T>(m);
}

// Rows of qvel' a Jacobian kernel computes before its single passes: none, every row has a
// pass of its own (CUDA). The CPU backend's LaneRows (host/lane_adjoint.h) computes several per
// pass in SIMD lanes.
struct SingleRows {
  template <class... Args>
  PHX_HD int operator()(const Args&...) const {
    return 0;
  }
};

// The one-step Jacobians of each environment at (qpos, qvel, ctrl) and the added generalized
// force qfrc_applied (zero when null). Row r of jac (nenv x (nq + nv) x jacobian_cols) holds
// d out_r / d(qpos, qvel, ctrl, qfrc), out = (qpos', qvel'); row r of jac_param (nenv x
// (nq + nv) x jacobian_nparam, may be null) holds d out_r / d(parameters) in Param order.
// With linear passes, `rows` first computes some rows of qvel' (the first n it returns) over
// the scratch past JacobianScratch's; the rest get a pass each, then the rows of qpos' follow
// by the chain rule. Otherwise every row gets a pass of its own. On CUDA the replay's
// narrowphase runs in stages of its own before it (kernels/common.h: staged launches).
template <class T, class Rows = SingleRows>
struct StepJacobianKernel {
  using Scalar = T;
  ModelView<T> model;  // env_view gives each environment its parameters
  const T* qpos;  // (nenv x nq)
  const T* qvel;  // (nenv x nv)
  const T* ctrl;  // (nenv x nu)
  T* jac;         // (nenv x (nq + nv) x jacobian_cols), overwritten
  T* jac_param;   // (nenv x (nq + nv) x jacobian_nparam), overwritten; may be null
  const T* qfrc_applied = nullptr;  // (nenv x nv) the step's added forces, may be null
  Rows rows{};

  PHX_HD void operator()(int e, Scratch<T> scratch) const {
    steps(e, scratch, 0, 1, DetectInStep{});
  }

  // its Jacobians, of step [0, 1), the replay's contacts from detect
  template <class Detect>
  PHX_HD void steps(int e, Scratch<T> scratch, int, int, const Detect& detect) const {
    const ModelView<T> m = env_view(model, e);
    const int nrow = m.nq + m.nv, np = jacobian_nparam(m);
    Arena<T> arena(scratch);
    JacobianScratch<T> js;
    carve_into(&js, m, arena);
    // kept in memory and read back after each pass, as the passes themselves do (RowPasses)
    typename JacobianScratch<T>::RowPasses p{&m,
                                             qpos + long(e) * m.nq,
                                             qvel + long(e) * m.nv,
                                             ctrl + long(e) * m.nu,
                                             jac + long(e) * nrow * jacobian_cols(m),
                                             jac_param ? jac_param + long(e) * nrow * np : nullptr,
                                             0,
                                             nrow,
                                             false};
    p.stopped = js.replay(m, p.q, p.v, p.u, env_row(qfrc_applied, e, m.nv), detect);
    const bool linear = JacobianScratch<T>::linear(m);
    // rows computed by single passes: [p.r, nrow)
    p.r = linear ? m.nq : 0;
    if (linear && !p.stopped)
      p.r += rows(model, m, p.q, p.v, p.u, js, arena.rest(), p.jac, p.jac_param);
    for (; p.r < p.end; ++p.r) js.row_pass(p);
    // linear asked of the model again, so that the flag is not held across the passes
    if (JacobianScratch<T>::linear(*p.m)) js.qpos_rows(p);
  }
  // the narrowphase stages of its replay: the contacts at qpos
  template <class Found>
  PHX_HD void detect(int e, Scratch<T> scratch, int, const Found& found) const {
    const ModelView<T> m = env_view(model, e);
    Arena<T> arena(scratch);
    StepScratch<T> x = StepScratch<T>::carve(m, arena);  // the step's part of its scratch
    detect_stage(m, qpos + long(e) * m.nq, x.w, x.c, found);
  }
  static constexpr bool kStaged = true;
  template <class Run>
  void staged(const StageMemory<T>& memory, Run&& run) const {
    stage_launches(*this, 1, memory, run);
  }
};

#define PHX_STEP_JACOBIAN_KERNELS(X) X(StepJacobianKernel<float>) X(StepJacobianKernel<double>)

}  // namespace phx
