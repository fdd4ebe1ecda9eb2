// Devices, device memory and kernel launch. Two backends run the same kernel functors of
// include/phalanx/kernels.h: the CPU (OpenMP over environments) and CUDA (one thread per
// environment). Choosing CUDA where it was not built or no GPU is present is a clear error.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "phalanx/workspace.h"

namespace phx {

enum class Device { kCpu, kCuda };

// "cpu" or "cuda"; anything else throws std::invalid_argument
Device parse_device(const std::string& name);
const char* device_name(Device device);

// true when the CUDA backend was compiled and a GPU is visible; otherwise *why says which
bool cuda_available(std::string* why = nullptr);
// true when the CUDA backend runs on the CPU (a PHX_CUDA_EMULATION build, cuda/emulation)
bool cuda_emulated();
// throws std::runtime_error when the device cannot be used
void require_device(Device device);

// Threads of the CPU backend's launches. Phalanx keeps its own count and passes it to every
// parallel region, so a library sharing the process's OpenMP runtime (torch calls
// omp_set_num_threads) cannot change it. It starts at OpenMP's default when the library loads
// (OMP_NUM_THREADS, else the cores); set_num_threads(n < 1) throws std::invalid_argument.
int num_threads();
void set_num_threads(int n);

// Bytes of the CPU's last-level cache each of the CPU backend's threads has to itself: the
// cache's size over the threads that share it (at most num_threads()). Read from Linux's sysfs
// (which, unlike sysconf in a virtual machine, reports the slice the cores actually share),
// else 32 MiB shared by all threads.
size_t cache_per_thread();

// The CPU backend keeps large host blocks (1 MiB or more) when they are freed and hands them
// out again for an allocation of the same size, so that a tape allocated anew for each rollout
// of a loop finds its pages mapped instead of faulting each in again. It keeps at most
// PHX_HOST_CACHE_BYTES bytes (read when the library loads; default 2 GiB or an eighth of the
// machine's memory, whichever is less; 0 keeps none, as do the sanitizer builds), the least
// recently freed leaving first.
// release_host_memory() gives every idle block back to the system; idle_host_bytes() is what
// they hold; set_host_cache_limit(bytes) sets the limit and returns the one before.
void release_host_memory();
size_t idle_host_bytes();
size_t set_host_cache_limit(size_t bytes);

// raw device memory operations (host memory on the CPU)
namespace detail {
// the CPUs in a Linux CPU list such as "0-7,64-71" (sysfs' shared_cpu_list)
int cpu_list_size(const std::string& list);
void* device_alloc(Device device, size_t bytes);
void device_free(Device device, void* p);
void device_copy(Device dst_device, void* dst, Device src_device, const void* src, size_t bytes);
void device_zero(Device device, void* p, size_t bytes);
}  // namespace detail

// An owning, move-only array of n elements on a device.
template <class T>
class Buffer {
 public:
  using value_type = T;
  Buffer() = default;
  Buffer(Device device, size_t n) : device_(device), n_(n) {
    if (n_) p_ = static_cast<T*>(detail::device_alloc(device_, n_ * sizeof(T)));
    zero();
  }
  // n elements left uninitialised: for storage the kernels write before they read (a tape's
  // records, whose unused row slots are never touched, so their pages are never faulted in)
  static Buffer uninitialized(Device device, size_t n) {
    Buffer b;
    b.device_ = device;
    b.n_ = n;
    if (n) b.p_ = static_cast<T*>(detail::device_alloc(device, n * sizeof(T)));
    return b;
  }
  Buffer(Device device, const std::vector<T>& host) : Buffer(device, host.size()) {
    upload(host.data(), host.size());
  }
  ~Buffer() { reset(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      device_ = o.device_;
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }

  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  Device device() const { return device_; }

  // copy n elements from host memory to elements [offset, offset + n)
  void upload(const T* host, size_t n, size_t offset = 0) {
    check(n, offset);
    detail::device_copy(device_, p_ + offset, Device::kCpu, host, n * sizeof(T));
  }
  // copy elements [offset, offset + n) to host memory
  void download(T* host, size_t n, size_t offset = 0) const {
    check(n, offset);
    detail::device_copy(Device::kCpu, host, device_, p_ + offset, n * sizeof(T));
  }
  std::vector<T> to_host() const {
    std::vector<T> h(n_);
    if (n_) download(h.data(), n_);
    return h;
  }
  void zero() {
    if (n_) detail::device_zero(device_, p_, n_ * sizeof(T));
  }

 private:
  void check(size_t n, size_t offset) const;
  void reset() {
    if (p_) detail::device_free(device_, p_);
    p_ = nullptr;
    n_ = 0;
  }

  Device device_ = Device::kCpu;
  T* p_ = nullptr;
  size_t n_ = 0;
};

template <class T>
void Buffer<T>::check(size_t n, size_t offset) const {
  if (offset + n > n_) {
    throw std::out_of_range("phalanx: buffer access [" + std::to_string(offset) + ", " +
                            std::to_string(offset + n) + ") outside its " + std::to_string(n_) +
                            " elements");
  }
}

// Run kernel(e, scratch) for e in [0, nenv) on a device, with private scratch of the given size
// per environment. Defined for every kernel in PHX_FOR_EACH_KERNEL.
template <class Kernel>
void launch(Device device, int nenv, const Kernel& kernel, ScratchSize scratch);

}  // namespace phx
