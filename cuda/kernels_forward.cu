// CUDA instantiations of PHX_FORWARD_KERNELS (the forward kernels), in a translation unit of their own so
// that the backend's slow ptxas runs proceed in parallel.
#include "cuda/launch.cuh"
#include "phalanx/kernels/forward.h"

PHX_FORWARD_KERNELS(PHX_CUDA_INSTANTIATE)
