// The CPU backend: OpenMP threads over environments, each thread reusing one workspace
// block that stays in its cache.
#pragma once

#include <omp.h>

#include <vector>

namespace phx::cpu {

template <class Kernel>
void launch(int nenv, const Kernel& kernel, long scratch) {
  using T = typename Kernel::Scalar;
#pragma omp parallel
  {
    std::vector<T> block(static_cast<size_t>(scratch));
#pragma omp for schedule(static)
    for (int e = 0; e < nenv; ++e) kernel(e, block.data());
  }
}

}  // namespace phx::cpu
