// CUDA instantiations of PHX_QUERY_KERNELS (the forward kernels that compute one quantity of a
// state), in a translation unit of their own so that the backend's slow ptxas runs proceed in
// parallel and the whole-step kernels are compiled without them.
#include "cuda/launch.cuh"
#include "phalanx/kernels/forward.h"

PHX_QUERY_KERNELS(PHX_CUDA_INSTANTIATE)
