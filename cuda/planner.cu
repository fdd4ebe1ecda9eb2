// CUB's segmented reductions and sort for the planners' update stage (host/planner.cpp): the
// per-problem minimum and sum of the samples' costs and weights, and the samples of each
// problem in ascending order of cost (CEM's elites). Launches only; the arithmetic around them
// is the kernels' of include/phalanx/kernels/planner.h.
#include <cub/device/device_segmented_reduce.cuh>
#include <cub/device/device_segmented_sort.cuh>

#include "cuda/launch.cuh"

namespace phx::cuda {

template <class T>
void segmented_reduce(const T* d_in, T* d_out, int nseg, const int* d_offsets, bool take_min) {
  size_t bytes = 0;
  auto run = [&](void* temp) {
    return take_min ? cub::DeviceSegmentedReduce::Min(temp, bytes, d_in, d_out, nseg, d_offsets,
                                                      d_offsets + 1)
                    : cub::DeviceSegmentedReduce::Sum(temp, bytes, d_in, d_out, nseg, d_offsets,
                                                      d_offsets + 1);
  };
  check(run(nullptr), "cub::DeviceSegmentedReduce (size)");
  check(run(scratch_temp(bytes)), "cub::DeviceSegmentedReduce");
  check(cudaDeviceSynchronize(), "segmented reduction");
}

template <class T>
void segmented_argsort(const T* d_keys, int nseg, int len, const int* d_offsets,
                       const int* d_index_in, T* d_keys_out, int* d_index_out) {
  size_t bytes = 0;
  int n = nseg * len;
  auto run = [&](void* temp) {
    return cub::DeviceSegmentedSort::StableSortPairs(temp, bytes, d_keys, d_keys_out, d_index_in,
                                                     d_index_out, n, nseg, d_offsets,
                                                     d_offsets + 1);
  };
  check(run(nullptr), "cub::DeviceSegmentedSort (size)");
  check(run(scratch_temp(bytes)), "cub::DeviceSegmentedSort");
  check(cudaDeviceSynchronize(), "segmented sort");
}

PHX_INSTANTIATE_SEGMENTED(float)
PHX_INSTANTIATE_SEGMENTED(double)

}  // namespace phx::cuda
