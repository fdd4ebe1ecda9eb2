// CUDA instantiations of PHX_ROLLOUT_ADJOINT_KERNELS (the backward pass of a taped rollout), in a translation unit of their own so
// that the backend's slow ptxas runs proceed in parallel.
#include "cuda/launch.cuh"
#include "phalanx/kernels/adjoint.h"

PHX_ROLLOUT_ADJOINT_KERNELS(PHX_CUDA_INSTANTIATE)
