// CUDA instantiations of PHX_STEP_JACOBIAN_KERNELS (the one-step Jacobians), in a translation unit of their own so
// that the backend's slow ptxas runs proceed in parallel.
#include "cuda/launch.cuh"
#include "phalanx/kernels/jacobian.h"

PHX_STEP_JACOBIAN_KERNELS(PHX_CUDA_INSTANTIATE)
