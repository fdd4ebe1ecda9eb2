// CUDA instantiations of PHX_ROLLOUT_ADJOINT_KERNELS (include/phalanx/kernels.h): one translation unit
// per group so that the backend's slow ptxas runs proceed in parallel.
#include "cuda/launch.cuh"

PHX_ROLLOUT_ADJOINT_KERNELS(PHX_CUDA_INSTANTIATE)
