#include "host/device.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <list>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

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

namespace {

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define PHX_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(PHX_SANITIZED)
constexpr bool kSanitized = true;  // keep no blocks: a use after free stays a sanitizer's error
#else
constexpr bool kSanitized = false;
#endif

// PHX_HOST_CACHE_BYTES, else 2 GiB or an eighth of the machine's memory, whichever is less
// (several processes on one machine, as a Ray node runs, each keep their own)
size_t default_host_cache_limit() {
  if (kSanitized) return 0;
  if (const char* env = std::getenv("PHX_HOST_CACHE_BYTES")) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(env, &end, 10);
    if (end != env && *end == '\0') return size_t(n);
  }
  const size_t most = size_t(2) << 30;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? std::min(most, size_t(pages) * size_t(page) / 8) : most / 2;
}

// Host blocks of kMinBytes or more, once freed, wait (idle) for the next allocation of the same
// size, up to limit_ bytes in all, the least recently freed leaving first. The C library
// returns large blocks to the system when they are freed, and each 4 KiB page of a new one
// faults in, zeroed by the kernel, at its first write: a tape allocated again for each rollout of
// a loop (each iteration of an optimisation, each repeat of a benchmark) would pay that each
// time.
class HostBlocks {
 public:
  static constexpr size_t kMinBytes = size_t(1) << 20;

  void* allocate(size_t bytes) {
    bytes = (bytes + 63) / 64 * 64;
    if (bytes >= kMinBytes) {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = idle_.rbegin(); it != idle_.rend(); ++it) {
        if (it->first != bytes) continue;
        void* p = it->second;
        idle_bytes_ -= bytes;
        idle_.erase(std::next(it).base());
        return p;
      }
    }
    void* p = std::aligned_alloc(64, bytes);
    if (!p) {
      release();  // the idle blocks back to the system, and once more
      p = std::aligned_alloc(64, bytes);
    }
    if (!p) throw std::bad_alloc();
    if (bytes >= kMinBytes) {
      std::lock_guard<std::mutex> lock(mutex_);
      size_[p] = bytes;
    }
    return p;
  }

  void free(void* p) {
    if (!p) return;
    std::unique_lock<std::mutex> lock(mutex_);
    auto it = size_.find(p);
    if (it != size_.end() && it->second <= limit_) {
      idle_.emplace_back(it->second, p);
      idle_bytes_ += it->second;
      while (idle_bytes_ > limit_) drop_oldest();
      return;
    }
    if (it != size_.end()) size_.erase(it);  // over the limit on its own
    lock.unlock();
    std::free(p);
  }

  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    while (!idle_.empty()) drop_oldest();
  }

  size_t idle_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return idle_bytes_;
  }

  size_t set_limit(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t was = limit_;
    limit_ = bytes;
    while (idle_bytes_ > limit_) drop_oldest();
    return was;
  }

 private:
  // (with the lock held)
  void drop_oldest() {
    void* p = idle_.front().second;
    idle_bytes_ -= idle_.front().first;
    idle_.pop_front();
    size_.erase(p);
    std::free(p);
  }

  std::mutex mutex_;
  std::unordered_map<void*, size_t> size_;    // every block of kMinBytes or more, live or idle
  std::list<std::pair<size_t, void*>> idle_;  // (bytes, block), least recently freed first
  size_t idle_bytes_ = 0, limit_ = default_host_cache_limit();
};

HostBlocks& host_blocks() {
  static HostBlocks* blocks = new HostBlocks;  // never destroyed: Buffers may outlive statics
  return *blocks;
}

}  // namespace

void release_host_memory() {
  host_blocks().release();
}

size_t idle_host_bytes() {
  return host_blocks().idle_bytes();
}

size_t set_host_cache_limit(size_t bytes) {
  return host_blocks().set_limit(bytes);
}

namespace detail {

void* device_alloc(Device device, size_t bytes) {
  if (device == Device::kCuda) {
    require_device(device);
    return cuda::alloc(bytes);
  }
  return host_blocks().allocate(bytes);
}

void device_free(Device device, void* p) {
  if (device == Device::kCuda) {
    cuda::free(p);
  } else {
    host_blocks().free(p);
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
