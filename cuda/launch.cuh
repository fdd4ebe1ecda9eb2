// The generic launch of the CUDA backend: one __global__ shell that runs a kernel functor
// (include/phalanx/kernels/) with one thread per environment. Each cuda/kernels_*.cu includes
// this and its kernel group's header and instantiates the group, so the backend compiles as
// several translation units in parallel. No physics here.
#pragma once

#include <cuda_runtime.h>

#include "host/cuda_backend.h"
#include "phalanx/arena.h"

namespace phx::cuda {

// throw with the CUDA error and where it came from (cuda/backend.cu)
void check(cudaError_t status, const char* what);

// growing device blocks reused across launches (cuda/backend.cu)
void* scratch_reals(size_t bytes);
void* scratch_ints(size_t bytes);
void* scratch_temp(size_t bytes);  // temporary storage of CUB's algorithms

template <class Kernel, class T>
__global__ void env_kernel(Kernel kernel, int nenv, T* d_reals, int* d_ints, ScratchSize size) {
  int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e < nenv) kernel(e, Scratch<T>{d_reals + long(e) * size.reals, d_ints + long(e) * size.ints});
}

template <class Kernel>
void launch(int nenv, const Kernel& kernel, ScratchSize scratch) {
  using T = typename Kernel::Scalar;
  T* d_reals = static_cast<T*>(scratch_reals(size_t(nenv) * size_t(scratch.reals) * sizeof(T)));
  int* d_ints = static_cast<int*>(scratch_ints(size_t(nenv) * size_t(scratch.ints) * sizeof(int)));
  constexpr int kBlock = 128;
  const int nblock = (nenv + kBlock - 1) / kBlock;
#ifdef PHX_CUDA_EMULATION  // on the CPU (cuda/emulation/cuda_runtime.h): the same launch
  phx_cuda_emulation::launch(nblock, kBlock, env_kernel<Kernel, T>, kernel, nenv, d_reals, d_ints,
                             scratch);
#else
  // the launch chevrons, which clang-format would split as C++ shifts:
  // clang-format off
  env_kernel<<<nblock, kBlock>>>(kernel, nenv, d_reals, d_ints, scratch);
  // clang-format on
#endif
  check(cudaGetLastError(), "kernel launch");
  check(cudaDeviceSynchronize(), "kernel execution");
}

}  // namespace phx::cuda

#define PHX_CUDA_INSTANTIATE(K) \
  template void phx::cuda::launch<phx::K>(int, const phx::K&, phx::ScratchSize);
