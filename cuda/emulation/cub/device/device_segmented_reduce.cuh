// CUB's segmented reductions as the backend calls them (cuda/planner.cu), emulated on the CPU
// (cuda_runtime.h): the same two-call protocol (the first, without temporary storage, asks its
// size), every array checked to be device memory, and each segment reduced in index order.
// An empty segment gives the operator's identity, as CUB's: 0 for Sum, the largest value for
// Min.
#pragma once

#include <cstddef>
#include <limits>

#include "cuda_runtime.h"

namespace cub {

struct DeviceSegmentedReduce {
  template <class T, class Op>
  static cudaError_t Reduce(void* temp, size_t& bytes, const T* in, T* out, int nseg,
                            const int* begin, const int* end, T identity, Op op) {
    using phx_cuda_emulation::is_device;
    if (!temp) {
      bytes = 1;
      return cudaSuccess;
    }
    if (nseg < 0 || !is_device(temp, bytes) || !is_device(begin, sizeof(int) * size_t(nseg)) ||
        !is_device(end, sizeof(int) * size_t(nseg)) || !is_device(out, sizeof(T) * size_t(nseg)))
      return cudaErrorInvalidValue;
    for (int s = 0; s < nseg; ++s) {
      if (end[s] > begin[s] && !is_device(in + begin[s], sizeof(T) * size_t(end[s] - begin[s])))
        return cudaErrorInvalidValue;
      T acc = identity;
      for (int i = begin[s]; i < end[s]; ++i) acc = op(acc, in[i]);
      out[s] = acc;
    }
    return cudaSuccess;
  }
  template <class T>
  static cudaError_t Sum(void* temp, size_t& bytes, const T* in, T* out, int nseg, const int* begin,
                         const int* end, cudaStream_t = nullptr) {
    return Reduce(temp, bytes, in, out, nseg, begin, end, T(0), [](T a, T b) { return a + b; });
  }
  template <class T>
  static cudaError_t Min(void* temp, size_t& bytes, const T* in, T* out, int nseg, const int* begin,
                         const int* end, cudaStream_t = nullptr) {
    return Reduce(temp, bytes, in, out, nseg, begin, end, std::numeric_limits<T>::max(),
                  [](T a, T b) { return b < a ? b : a; });
  }
};

}  // namespace cub
