// The CUDA backend's entry points (cuda/backend.cu), called only by host/device.cpp.
// In a build without nvcc, host/cuda_stub.cpp defines them to throw.
#pragma once

#include <cstddef>
#include <string>

#include "phalanx/workspace.h"

namespace phx::cuda {

// number of visible GPUs; 0 with *error set when none or the driver is missing
int device_count(std::string* error);

void* alloc(size_t bytes);
void free(void* p);
enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };
void copy(void* dst, const void* src, size_t bytes, CopyKind kind);
void zero(void* p, size_t bytes);

// one thread per environment, each with its slice of global-memory scratch
template <class Kernel>
void launch(int nenv, const Kernel& kernel, ScratchSize scratch);

}  // namespace phx::cuda
