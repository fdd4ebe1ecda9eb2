// CUDA instantiations of PHX_FORWARD_KERNELS (include/phalanx/kernels.h): one translation unit
// per group so that the backend's slow ptxas runs proceed in parallel.
#include "cuda/launch.cuh"

PHX_FORWARD_KERNELS(PHX_CUDA_INSTANTIATE)
