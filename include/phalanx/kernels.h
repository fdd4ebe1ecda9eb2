// Every kernel the backends launch, by how it executes: forward steps and queries
// (kernels/forward.h), reverse and tape (kernels/adjoint.h), one-step Jacobians
// (kernels/jacobian.h) and planners (kernels/planner.h), each for float and double, in the
// groups the CUDA backend compiles as separate translation units (cuda/kernels_*.cu).
#pragma once

#include "phalanx/kernels/adjoint.h"
#include "phalanx/kernels/forward.h"
#include "phalanx/kernels/jacobian.h"
#include "phalanx/kernels/planner.h"

#define PHX_FOR_EACH_KERNEL(X)   \
  PHX_FORWARD_KERNELS(X)         \
  PHX_QUERY_KERNELS(X)           \
  PHX_PLANNER_KERNELS(X)         \
  PHX_STEP_ADJOINT_KERNELS(X)    \
  PHX_ROLLOUT_ADJOINT_KERNELS(X) \
  PHX_STEP_JACOBIAN_KERNELS(X)
