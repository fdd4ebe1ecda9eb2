#include "host/device.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <stdexcept>
#include <string>

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

int detail::cpu_list_size(const std::string& list) {
  int n = 0;
  size_t at = 0;
  while (at < list.size()) {
    size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    const std::string range = list.substr(at, end - at);
    const size_t dash = range.find('-');
    n += dash == std::string::npos ? 1 : std::stoi(range.substr(dash + 1)) - std::stoi(range) + 1;
    at = end + 1;
  }
  return n;
}

namespace {

// The last-level cache's size in bytes and how many CPUs share it (cpu0's, from sysfs), or
// {0, 0} where sysfs does not say
struct LastLevelCache {
  size_t bytes = 0;
  int sharers = 0;
};

LastLevelCache read_last_level_cache() {
  LastLevelCache best;
  int best_level = 0;
  for (int index = 0; index < 16; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
    std::ifstream level_file(dir + "/level"), size_file(dir + "/size"),
        shared_file(dir + "/shared_cpu_list");
    int level = 0;
    std::string size, shared;
    if (!(level_file >> level) || !(size_file >> size) || !(shared_file >> shared)) break;
    if (level <= best_level || size.empty()) continue;
    try {
      size_t bytes = std::stoul(size);
      const char unit = size.back();
      if (unit == 'K') bytes <<= 10;
      if (unit == 'M') bytes <<= 20;
      best = {bytes, detail::cpu_list_size(shared)};
      best_level = level;
    } catch (const std::exception&) {
      break;
    }
  }
  return best;
}

}  // namespace

size_t cache_per_thread() {
  static const LastLevelCache cache = read_last_level_cache();
  const bool known = cache.bytes > 0 && cache.sharers > 0;
  const size_t bytes = known ? cache.bytes : size_t(32) << 20;
  const int sharers = known ? std::min(cache.sharers, num_threads()) : num_threads();
  return bytes / size_t(std::max(1, sharers));
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
