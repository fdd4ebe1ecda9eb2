// The CPU emulation of the CUDA runtime and CUB (cuda/emulation), built with PHX_CUDA_EMULATION:
// what it checks (copies by kind, frees, launch geometry, a thread's stack against the stack
// limit, sticky errors, device arrays in CUB)
// and what it computes (every thread once with its indices, the reductions' identities, the
// stable sort's ties).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cub/device/device_segmented_reduce.cuh>
#include <cub/device/device_segmented_sort.cuh>
#include <limits>
#include <vector>

#include "cuda_runtime.h"

namespace {

template <class T>
T* device_array(size_t n) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
  return p;
}

TEST(CudaEmulation, FreshMemoryIsNotZeroAndCopiesGoByTheirKind) {
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  double* d = device_array<double>(4);
  double host[4] = {1, 2, 3, 4}, back[4] = {};
  ASSERT_EQ(cudaMemcpy(back, d, sizeof(back), cudaMemcpyDeviceToHost), cudaSuccess);
  for (double x : back) EXPECT_TRUE(std::isnan(x));  // all-ones bytes
  ASSERT_EQ(cudaMemcpy(d, host, sizeof(host), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back, d, sizeof(back), cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back[i], host[i]);
  // the wrong kind, a range past the allocation, a host pointer to cudaMemset or cudaFree
  EXPECT_EQ(cudaMemcpy(back, d, sizeof(back), cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);  // sticky until read
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(back, d + 1, sizeof(back), cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemset(host, 0, sizeof(host)), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(host), cudaErrorInvalidDevicePointer);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorInvalidValue);  // the first error stays
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaErrorInvalidDevicePointer);  // freed already
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevicePointer);
}

__global__ void write_index(int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] += i + 1;
  if (i == 0) out[n] = int(gridDim.x * blockDim.x);
}

TEST(CudaEmulation, LaunchRunsEveryThreadOnceAndChecksTheGeometry) {
  const int n = 1000, block = 128, grid = (n + block - 1) / block;
  int* d = device_array<int>(n + 1);
  ASSERT_EQ(cudaMemset(d, 0, (n + 1) * sizeof(int)), cudaSuccess);
  phx_cuda_emulation::launch(grid, block, write_index, d, n);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> out(n + 1);
  ASSERT_EQ(cudaMemcpy(out.data(), d, out.size() * sizeof(int), cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], i + 1) << i;
  EXPECT_EQ(out[n], grid * block);
  // more than 1024 threads in a block, or no blocks: refused, nothing runs
  phx_cuda_emulation::launch(1, 2048, write_index, d, n);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  phx_cuda_emulation::launch(0, block, write_index, d, n);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  ASSERT_EQ(cudaMemcpy(out.data(), d, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(out[0], 1);
  cudaFree(d);
}

// a thread's local array of `bytes`, as the backend's shell takes its fixed scratch
__global__ void local_array(int* out, size_t bytes) {
  ::phx_cuda_emulation::stack_check(bytes);
  out[threadIdx.x] = int(bytes);
}

TEST(CudaEmulation, ThreadStackIsHeldToTheStackLimit) {
  size_t limit = 0;
  ASSERT_EQ(cudaDeviceGetLimit(&limit, cudaLimitStackSize), cudaSuccess);
  EXPECT_EQ(limit, 1024u);  // a device's default
  int* d = device_array<int>(32);
  phx_cuda_emulation::launch(1, 32, local_array, d, size_t(1024));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  // past the limit: an illegal address, as a device's thread overflowing its stack
  phx_cuda_emulation::launch(1, 32, local_array, d, size_t(4096));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  ASSERT_EQ(cudaDeviceSetLimit(cudaLimitStackSize, 4096), cudaSuccess);
  phx_cuda_emulation::launch(1, 32, local_array, d, size_t(4096));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetLimit(&limit, cudaLimitStackSize), cudaSuccess);
  EXPECT_EQ(limit, 4096u);
  ASSERT_EQ(cudaDeviceSetLimit(cudaLimitStackSize, 1024), cudaSuccess);
  cudaFree(d);
}

TEST(CudaEmulation, SegmentedReduceAndStableSort) {
  // three segments: [0, 3), [3, 3) (empty), [3, 7)
  const std::vector<int> offsets{0, 3, 3, 7};
  const std::vector<float> keys{2, 1, 2, 5, 3, 5, 3};
  int* off = device_array<int>(4);
  float* in = device_array<float>(7);
  float* out = device_array<float>(3);
  cudaMemcpy(off, offsets.data(), 4 * sizeof(int), cudaMemcpyHostToDevice);
  cudaMemcpy(in, keys.data(), 7 * sizeof(float), cudaMemcpyHostToDevice);
  size_t bytes = 0;
  ASSERT_EQ(cub::DeviceSegmentedReduce::Sum(nullptr, bytes, in, out, 3, off, off + 1), cudaSuccess);
  void* temp = device_array<char>(bytes);
  std::vector<float> r(3);
  ASSERT_EQ(cub::DeviceSegmentedReduce::Sum(temp, bytes, in, out, 3, off, off + 1), cudaSuccess);
  cudaMemcpy(r.data(), out, 3 * sizeof(float), cudaMemcpyDeviceToHost);
  EXPECT_EQ(r, (std::vector<float>{5, 0, 16}));
  ASSERT_EQ(cub::DeviceSegmentedReduce::Min(temp, bytes, in, out, 3, off, off + 1), cudaSuccess);
  cudaMemcpy(r.data(), out, 3 * sizeof(float), cudaMemcpyDeviceToHost);
  EXPECT_EQ(r, (std::vector<float>{1, std::numeric_limits<float>::max(), 3}));
  // host arrays are refused
  EXPECT_EQ(cub::DeviceSegmentedReduce::Sum(temp, bytes, keys.data(), out, 3, off, off + 1),
            cudaErrorInvalidValue);
  // the sort: ascending keys, equal keys in their input order
  std::vector<int> index{0, 1, 2, 0, 1, 2, 3}, sorted(7);
  int* idx_in = device_array<int>(7);
  int* idx_out = device_array<int>(7);
  float* keys_out = device_array<float>(7);
  cudaMemcpy(idx_in, index.data(), 7 * sizeof(int), cudaMemcpyHostToDevice);
  ASSERT_EQ(cub::DeviceSegmentedSort::StableSortPairs(nullptr, bytes, in, keys_out, idx_in, idx_out,
                                                      7, 3, off, off + 1),
            cudaSuccess);
  ASSERT_EQ(cub::DeviceSegmentedSort::StableSortPairs(temp, bytes, in, keys_out, idx_in, idx_out, 7,
                                                      3, off, off + 1),
            cudaSuccess);
  cudaMemcpy(sorted.data(), idx_out, 7 * sizeof(int), cudaMemcpyDeviceToHost);
  EXPECT_EQ(sorted, (std::vector<int>{1, 0, 2, 1, 3, 0, 2}));
  for (void* p :
       {(void*)off, (void*)in, (void*)out, temp, (void*)idx_in, (void*)idx_out, (void*)keys_out})
    EXPECT_EQ(cudaFree(p), cudaSuccess);
}

}  // namespace
