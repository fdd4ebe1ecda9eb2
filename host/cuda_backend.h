// The CUDA backend's entry points (cuda/backend.cu), called only by host/device.cpp.
// In a build without nvcc, host/cuda_stub.cpp defines them to throw.
#pragma once

#include <cstddef>
#include <string>

#include "phalanx/workspace.h"

namespace phx::cuda {

// number of visible GPUs; 0 with *error set when none or the driver is missing
int device_count(std::string* error);
// whether this backend runs on the CPU (PHX_CUDA_EMULATION: cuda/emulation)
bool emulated();

void* alloc(size_t bytes);
void free(void* p);
enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };
void copy(void* dst, const void* src, size_t bytes, CopyKind kind);
void zero(void* p, size_t bytes);

// one thread per environment, each with its slice of global-memory scratch
template <class Kernel>
void launch(int nenv, const Kernel& kernel, ScratchSize scratch);

// CUB's segmented reductions and sort over nseg segments of len entries each, d_offsets
// (nseg + 1) their starts (cuda/planner.cu): out[p] = min or sum of segment p; and the
// indices within its segment of each segment's entries in ascending order of key, ties by
// index (a stable sort of pairs; d_index_in holds k for entry p * len + k, d_keys_out is
// scratch)
template <class T>
void segmented_reduce(const T* d_in, T* d_out, int nseg, const int* d_offsets, bool take_min);
template <class T>
void segmented_argsort(const T* d_keys, int nseg, int len, const int* d_offsets,
                       const int* d_index_in, T* d_keys_out, int* d_index_out);
#define PHX_INSTANTIATE_SEGMENTED(T)                                                        \
  template void segmented_reduce<T>(const T*, T*, int, const int*, bool);                   \
  template void segmented_argsort<T>(const T*, int, int, const int*, const int*, T*, int*);

}  // namespace phx::cuda
