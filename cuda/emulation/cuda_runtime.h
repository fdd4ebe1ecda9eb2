// The CUDA runtime as the backend (cuda/) uses it, emulated on the CPU, so that the backend's
// own sources (memory, copies, the launch geometry, the __global__ shell, the CUB calls) run
// and are tested on a machine without a GPU: the build option PHX_CUDA_EMULATION compiles
// cuda/*.cu as C++ with this directory first on the include path.
//
// What it checks that a plain host build would not:
//   - device memory is a registry of allocations (cudaMalloc); copies and sets must fall inside
//     them on their device side and outside them on their host side, by their cudaMemcpyKind,
//     and cudaFree takes only a live allocation (else the runtime's error codes);
//   - fresh device memory holds all-ones bytes (NaN in floating point), not zeros, so a kernel
//     that reads what it never wrote shows it;
//   - a launch's geometry is checked against the hardware's limits (at most 1024 threads per
//     block, 2^31 - 1 blocks), and each thread sees its own blockIdx and threadIdx;
//   - a thread's stack (its local memory) is held to the device's stack limit (1 KiB until
//     cudaDeviceSetLimit raises it): an allocation past it is an illegal address, as a device
//     would fault on it, so a launch that forgets to raise the limit fails here too.
// Errors are sticky until cudaGetLastError, as on a device. Built with AddressSanitizer
// (scripts/test_cuda_emulation.sh), out-of-bounds accesses in kernels and copies are caught too.
#pragma once

#include <cstddef>
#include <utility>

#define __global__
#define __host__
#define __device__
#define __forceinline__ inline

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}  // NOLINT
};
struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorIllegalAddress = 700,
};
enum cudaLimit {
  cudaLimitStackSize = 0,
};
// the attributes the backend reads of a kernel: its static local memory per thread (none
// emulated: a host function's frame is the host's)
struct cudaFuncAttributes {
  size_t localSizeBytes = 0;
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
};
using cudaStream_t = struct CUstream_st*;

cudaError_t cudaMalloc(void** p, size_t bytes);
template <class T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
cudaError_t cudaFree(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaGetLastError();
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaDeviceGetLimit(size_t* value, cudaLimit limit);
cudaError_t cudaDeviceSetLimit(cudaLimit limit, size_t value);
template <class... P>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, void (*)(P...)) {
  *attributes = cudaFuncAttributes{};
  return cudaSuccess;
}
const char* cudaGetErrorString(cudaError_t status);

namespace phx_cuda_emulation {

// the launch as the running thread sees it
struct Thread {
  dim3 grid, block;
  uint3 block_idx, thread_idx;
};
extern thread_local Thread current;

// records status as the sticky error (the first one stays until cudaGetLastError)
void fail(cudaError_t status);
// whether [p, p + bytes) lies within one live device allocation
bool is_device(const void* p, size_t bytes);
// whether a launch of this geometry is one the hardware accepts
bool valid_geometry(const dim3& grid, const dim3& block);
// a thread's allocation of `bytes` on its stack: an illegal address past the stack limit
void stack_check(size_t bytes);

// kernel<<<grid, block>>>(args...): every thread of the grid, the blocks spread over the host's
// threads (OpenMP), each block's threads one after another; the arguments passed by value, as
// to a __global__ function
template <class... P, class... A>
void launch(dim3 grid, dim3 block, void (*kernel)(P...), A&&... args) {
  if (!valid_geometry(grid, block)) return fail(cudaErrorInvalidConfiguration);
  const long nblock = long(grid.x) * grid.y * grid.z;
#pragma omp parallel for schedule(dynamic)
  for (long b = 0; b < nblock; ++b) {
    current.grid = grid;
    current.block = block;
    current.block_idx = {unsigned(b % grid.x), unsigned(b / grid.x % grid.y),
                         unsigned(b / (long(grid.x) * grid.y))};
    for (unsigned z = 0; z < block.z; ++z)
      for (unsigned y = 0; y < block.y; ++y)
        for (unsigned x = 0; x < block.x; ++x) {
          current.thread_idx = {x, y, z};
          kernel(P(args)...);
        }
  }
}

}  // namespace phx_cuda_emulation

#define threadIdx (::phx_cuda_emulation::current.thread_idx)
#define blockIdx (::phx_cuda_emulation::current.block_idx)
#define blockDim (::phx_cuda_emulation::current.block)
#define gridDim (::phx_cuda_emulation::current.grid)
