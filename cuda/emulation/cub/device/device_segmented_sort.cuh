// CUB's segmented stable sort of pairs as the backend calls it (cuda/planner.cu), emulated on
// the CPU (cuda_runtime.h): the two-call protocol, every array checked to be device memory, and
// each segment's pairs in ascending order of key, equal keys in their input order.
#pragma once

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <vector>

#include "cuda_runtime.h"

namespace cub {

struct DeviceSegmentedSort {
  template <class K, class V>
  static cudaError_t StableSortPairs(void* temp, size_t& bytes, const K* keys_in, K* keys_out,
                                     const V* values_in, V* values_out, int n, int nseg,
                                     const int* begin, const int* end, cudaStream_t = nullptr) {
    using phx_cuda_emulation::is_device;
    if (!temp) {
      bytes = 1;
      return cudaSuccess;
    }
    const size_t count = size_t(n);
    if (n < 0 || nseg < 0 || !is_device(temp, bytes) ||
        !is_device(begin, sizeof(int) * size_t(nseg)) ||
        !is_device(end, sizeof(int) * size_t(nseg)) ||
        (n > 0 &&
         (!is_device(keys_in, sizeof(K) * count) || !is_device(keys_out, sizeof(K) * count) ||
          !is_device(values_in, sizeof(V) * count) || !is_device(values_out, sizeof(V) * count))))
      return cudaErrorInvalidValue;
    std::vector<int> order;
    for (int s = 0; s < nseg; ++s) {
      if (begin[s] < 0 || end[s] > n || end[s] < begin[s]) return cudaErrorInvalidValue;
      order.resize(size_t(end[s] - begin[s]));
      std::iota(order.begin(), order.end(), begin[s]);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return keys_in[a] < keys_in[b]; });
      for (size_t k = 0; k < order.size(); ++k) {
        keys_out[begin[s] + long(k)] = keys_in[order[k]];
        values_out[begin[s] + long(k)] = values_in[order[k]];
      }
    }
    return cudaSuccess;
  }
};

}  // namespace cub
