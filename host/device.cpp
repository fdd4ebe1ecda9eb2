#include "host/device.h"

#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "host/cpu_backend.h"
#include "host/cuda_backend.h"
#include "phalanx/kernels.h"

namespace phx {

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  throw std::invalid_argument("phalanx: unknown device '" + name + "' (expected 'cpu' or 'cuda')");
}

const char* device_name(Device device) { return device == Device::kCpu ? "cpu" : "cuda"; }

bool cuda_available(std::string* why) {
  std::string error;
  int n = cuda::device_count(&error);
  if (n > 0) return true;
  if (why) *why = error.empty() ? "no CUDA device is visible" : error;
  return false;
}

bool cuda_emulated() {
  return cuda::emulated();
}

void require_device(Device device) {
  std::string why;
  if (device == Device::kCuda && !cuda_available(&why)) {
    throw std::runtime_error("phalanx: device 'cuda' is not available: " + why);
  }
}

namespace {
std::atomic<int> g_num_threads{omp_get_max_threads()};
}  // namespace

int num_threads() { return g_num_threads.load(std::memory_order_relaxed); }

void set_num_threads(int n) {
  if (n < 1) {
    throw std::invalid_argument("phalanx: the number of threads must be >= 1, got " +
                                std::to_string(n));
  }
  g_num_threads.store(n, std::memory_order_relaxed);
}

namespace detail {

void* device_alloc(Device device, size_t bytes) {
  if (device == Device::kCuda) {
    require_device(device);
    return cuda::alloc(bytes);
  }
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  return p;
}

void device_free(Device device, void* p) {
  if (device == Device::kCuda) {
    cuda::free(p);
  } else {
    std::free(p);
  }
}

void device_copy(Device dst_device, void* dst, Device src_device, const void* src, size_t bytes) {
  if (!bytes) return;
  if (dst_device == Device::kCpu && src_device == Device::kCpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
  cuda::CopyKind kind = dst_device == Device::kCpu   ? cuda::CopyKind::kDeviceToHost
                        : src_device == Device::kCpu ? cuda::CopyKind::kHostToDevice
                                                     : cuda::CopyKind::kDeviceToDevice;
  cuda::copy(dst, src, bytes, kind);
}

void device_zero(Device device, void* p, size_t bytes) {
  if (device == Device::kCuda) {
    cuda::zero(p, bytes);
  } else {
    std::memset(p, 0, bytes);
  }
}

}  // namespace detail

template <class Kernel>
void launch(Device device, int nenv, const Kernel& kernel, ScratchSize scratch) {
  if (nenv <= 0) return;
  if (device == Device::kCuda) {
    require_device(device);
    cuda::launch(nenv, kernel, scratch);
  } else {
    cpu::launch(nenv, kernel, scratch);
  }
}

#define PHX_INSTANTIATE(K) template void launch<K>(Device, int, const K&, ScratchSize);
PHX_FOR_EACH_KERNEL(PHX_INSTANTIATE)
#undef PHX_INSTANTIATE

}  // namespace phx
