// Stand-ins for the CUDA backend in a build without nvcc: every entry point reports that
// the backend was not built.
#include <stdexcept>

#include "host/cuda_backend.h"
#include "phalanx/kernels.h"

namespace phx::cuda {

namespace {
[[noreturn]] void not_built() {
  throw std::runtime_error("phalanx: this build has no CUDA backend (nvcc was not found)");
}
}  // namespace

int device_count(std::string* error) {
  if (error) *error = "this build has no CUDA backend (nvcc was not found at build time)";
  return 0;
}
bool emulated() {
  return false;
}
void* alloc(size_t) { not_built(); }
void free(void*) {}
void copy(void*, const void*, size_t, CopyKind) { not_built(); }
void zero(void*, size_t) { not_built(); }

template <class Kernel>
void launch(int, const Kernel&, ScratchSize) {
  not_built();
}

#define PHX_INSTANTIATE(K) template void launch<K>(int, const K&, ScratchSize);
PHX_FOR_EACH_KERNEL(PHX_INSTANTIATE)
#undef PHX_INSTANTIATE

template <class T>
void segmented_reduce(const T*, T*, int, const int*, bool) {
  not_built();
}
template <class T>
void segmented_argsort(const T*, int, int, const int*, const int*, T*, int*) {
  not_built();
}
PHX_INSTANTIATE_SEGMENTED(float)
PHX_INSTANTIATE_SEGMENTED(double)

}  // namespace phx::cuda
