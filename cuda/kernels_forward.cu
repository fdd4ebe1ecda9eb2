// CUDA instantiations of PHX_FORWARD_KERNELS (the kernels that run whole forward steps), in a
// translation unit of their own so that the backend's slow ptxas runs proceed in parallel.
#include "cuda/launch.cuh"
#include "phalanx/kernels/forward.h"

PHX_FORWARD_KERNELS(PHX_CUDA_INSTANTIATE)
