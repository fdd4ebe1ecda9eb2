// CUDA backend: memory, copies and the scratch pools. The kernels are instantiated in
// cuda/kernels_*.cu through cuda/launch.cuh. No physics here.

#include <stdexcept>
#include <string>

#include "cuda/launch.cuh"

namespace phx::cuda {

namespace {

// A growing workspace block reused across launches. A launch may be queued while the one
// before it runs (the stages of a staged kernel): a block is replaced only once the device is
// idle.
struct ScratchPool {
  void* d_block = nullptr;
  size_t bytes = 0;
  void* get(size_t need) {
    if (need > bytes) {
      check(cudaDeviceSynchronize(), "kernel execution");
      if (d_block) cudaFree(d_block);
      d_block = nullptr;
      check(cudaMalloc(&d_block, need), "cudaMalloc(scratch)");
      bytes = need;
    }
    return d_block;
  }
};
ScratchPool g_reals, g_ints, g_temp, g_stage_reals, g_stage_ints;

}  // namespace

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("phalanx: CUDA error in ") + what + ": " +
                             cudaGetErrorString(status));
  }
}

void* scratch_reals(size_t bytes) { return g_reals.get(bytes); }
void* scratch_ints(size_t bytes) { return g_ints.get(bytes); }
void* scratch_temp(size_t bytes) { return g_temp.get(bytes); }
void* stage_reals(size_t bytes) {
  return g_stage_reals.get(bytes);
}
void* stage_ints(size_t bytes) {
  return g_stage_ints.get(bytes);
}

void reserve_stack(size_t bytes) {
  size_t limit = 0;
  check(cudaDeviceGetLimit(&limit, cudaLimitStackSize), "reading the stack limit");
  if (bytes > limit) {
    check(cudaDeviceSynchronize(), "kernel execution");  // as for a pool's block
    check(cudaDeviceSetLimit(cudaLimitStackSize, bytes), "raising the stack limit");
  }
}

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

bool emulated() {
#ifdef PHX_CUDA_EMULATION
  return true;
#else
  return false;
#endif
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

}  // namespace phx::cuda
