// CUDA instantiations of PHX_PLANNER_KERNELS (include/phalanx/kernels.h): trajectory costs and
// the sampling planners' stages, in their own translation unit.
#include "cuda/launch.cuh"

PHX_PLANNER_KERNELS(PHX_CUDA_INSTANTIATE)
