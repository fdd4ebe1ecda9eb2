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

}  // namespace phx::cuda
