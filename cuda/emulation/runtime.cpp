// The emulated CUDA runtime's state and entry points (cuda_runtime.h): the registry of device
// allocations and the sticky error.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "cuda_runtime.h"

namespace phx_cuda_emulation {

thread_local Thread current;

namespace {

std::mutex g_mutex;
std::map<std::uintptr_t, size_t> g_allocations;  // start -> bytes, live device allocations
cudaError_t g_error = cudaSuccess;
std::atomic<size_t> g_stack_limit{1024};  // bytes per thread, a device's default

bool inside(const void* p, size_t bytes) {  // g_mutex held
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = g_allocations.upper_bound(a);
  if (it == g_allocations.begin()) return false;
  --it;
  return a >= it->first && a + bytes <= it->first + it->second;
}

// each side of a copy where its kind puts it: on the device inside an allocation, on the host
// outside every one
bool placed(const void* p, size_t bytes, bool device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return device ? inside(p, bytes) : !inside(p, 1);
}

cudaError_t result(cudaError_t status) {
  if (status != cudaSuccess) fail(status);
  return status;
}

}  // namespace

void fail(cudaError_t status) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_error == cudaSuccess) g_error = status;
}

bool is_device(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return inside(p, bytes);
}

bool valid_geometry(const dim3& grid, const dim3& block) {
  const unsigned long threads = (unsigned long)block.x * block.y * block.z;
  return threads >= 1 && threads <= 1024 && block.z <= 64 && grid.x >= 1 && grid.x <= 2147483647u &&
         grid.y >= 1 && grid.y <= 65535 && grid.z >= 1 && grid.z <= 65535;
}

void stack_check(size_t bytes) {
  if (bytes > g_stack_limit) fail(cudaErrorIllegalAddress);
}

}  // namespace phx_cuda_emulation

using namespace phx_cuda_emulation;

cudaError_t cudaMalloc(void** p, size_t bytes) {
  if (!p) return result(cudaErrorInvalidValue);
  *p = std::malloc(bytes ? bytes : 1);
  if (!*p) return result(cudaErrorMemoryAllocation);
  std::memset(*p, 0xff, bytes);  // not zeros: a device's fresh memory holds anything
  std::lock_guard<std::mutex> lock(g_mutex);
  g_allocations[reinterpret_cast<std::uintptr_t>(*p)] = bytes ? bytes : 1;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_allocations.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == g_allocations.end()) {
      if (g_error == cudaSuccess) g_error = cudaErrorInvalidDevicePointer;
      return cudaErrorInvalidDevicePointer;
    }
    g_allocations.erase(it);
  }
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToHost &&
      kind != cudaMemcpyDeviceToDevice)
    return result(cudaErrorInvalidMemcpyDirection);
  const bool dst_device = kind != cudaMemcpyDeviceToHost;
  const bool src_device = kind != cudaMemcpyHostToDevice;
  if (!dst || !src || !placed(dst, bytes, dst_device) || !placed(src, bytes, src_device))
    return result(cudaErrorInvalidValue);
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  if (!p || !is_device(p, bytes)) return result(cudaErrorInvalidValue);
  std::memset(p, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  std::lock_guard<std::mutex> lock(g_mutex);
  cudaError_t status = g_error;
  g_error = cudaSuccess;
  return status;
}

cudaError_t cudaDeviceSynchronize() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_error;
}

cudaError_t cudaGetDeviceCount(int* n) {
  if (!n) return result(cudaErrorInvalidValue);
  *n = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetLimit(size_t* value, cudaLimit limit) {
  if (!value || limit != cudaLimitStackSize) return result(cudaErrorInvalidValue);
  *value = g_stack_limit;
  return cudaSuccess;
}

cudaError_t cudaDeviceSetLimit(cudaLimit limit, size_t value) {
  if (limit != cudaLimitStackSize) return result(cudaErrorInvalidValue);
  g_stack_limit = value;
  return cudaSuccess;
}

const char* cudaGetErrorString(cudaError_t status) {
  switch (status) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
  }
  return "unrecognized error code";
}
