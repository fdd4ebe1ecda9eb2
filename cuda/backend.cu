// CUDA backend: memory, copies and one generic __global__ shell that runs a kernel functor of
// include/phalanx/kernels.h with one thread per environment. No physics here.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "host/cuda_backend.h"
#include "phalanx/kernels.h"

namespace phx::cuda {

namespace {

// throw with the CUDA error and where it came from
void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("phalanx: CUDA error in ") + what + ": " +
                             cudaGetErrorString(status));
  }
}

// a growing workspace block reused across launches
struct ScratchPool {
  void* d_block = nullptr;
  size_t bytes = 0;
  void* get(size_t need) {
    if (need > bytes) {
      if (d_block) cudaFree(d_block);
      d_block = nullptr;
      check(cudaMalloc(&d_block, need), "cudaMalloc(scratch)");
      bytes = need;
    }
    return d_block;
  }
};
ScratchPool g_reals, g_ints;

template <class Kernel, class T>
__global__ void env_kernel(Kernel kernel, int nenv, T* d_reals, int* d_ints, ScratchSize size) {
  int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e < nenv) kernel(e, Scratch<T>{d_reals + long(e) * size.reals, d_ints + long(e) * size.ints});
}

}  // namespace

int device_count(std::string* error) {
  int n = 0;
  cudaError_t status = cudaGetDeviceCount(&n);
  if (status != cudaSuccess) {
    if (error) *error = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status);
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  if (n == 0 && error) *error = "no CUDA device is visible";
  return n;
}

void* alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}

void free(void* p) { cudaFree(p); }

void copy(void* dst, const void* src, size_t bytes, CopyKind kind) {
  cudaMemcpyKind k = kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
                     : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                       : cudaMemcpyDeviceToDevice;
  check(cudaMemcpy(dst, src, bytes, k), "cudaMemcpy");
}

void zero(void* p, size_t bytes) { check(cudaMemset(p, 0, bytes), "cudaMemset"); }

template <class Kernel>
void launch(int nenv, const Kernel& kernel, ScratchSize scratch) {
  using T = typename Kernel::Scalar;
  T* d_reals = static_cast<T*>(g_reals.get(size_t(nenv) * size_t(scratch.reals) * sizeof(T)));
  int* d_ints = static_cast<int*>(g_ints.get(size_t(nenv) * size_t(scratch.ints) * sizeof(int)));
  constexpr int kBlock = 128;
  env_kernel<<<(nenv + kBlock - 1) / kBlock, kBlock>>>(kernel, nenv, d_reals, d_ints, scratch);
  check(cudaGetLastError(), "kernel launch");
  check(cudaDeviceSynchronize(), "kernel execution");
}

#define PHX_INSTANTIATE(K) template void launch<K>(int, const K&, ScratchSize);
PHX_FOR_EACH_KERNEL(PHX_INSTANTIATE)
#undef PHX_INSTANTIATE

}  // namespace phx::cuda
