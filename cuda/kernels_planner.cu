// CUDA instantiations of PHX_PLANNER_KERNELS (trajectory costs and the sampling planners' stages), in a translation unit of their own so
// that the backend's slow ptxas runs proceed in parallel.
#include "cuda/launch.cuh"
#include "phalanx/kernels/planner.h"

PHX_PLANNER_KERNELS(PHX_CUDA_INSTANTIATE)
