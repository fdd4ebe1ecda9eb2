// CUDA instantiations of PHX_STEP_ADJOINT_KERNELS (the vector-Jacobian product of a step), in a translation unit of their own so
// that the backend's slow ptxas runs proceed in parallel.
#include "cuda/launch.cuh"
#include "phalanx/kernels/adjoint.h"

PHX_STEP_ADJOINT_KERNELS(PHX_CUDA_INSTANTIATE)
