// The CPU backend: OpenMP threads over environments (phx::num_threads() of them), each
// thread reusing one workspace block that stays in its cache.
#pragma once

#include <omp.h>

#include <vector>

#include "host/device.h"
#include "phalanx/workspace.h"

namespace phx::cpu {

template <class Kernel>
void launch(int nenv, const Kernel& kernel, ScratchSize scratch) {
  using T = typename Kernel::Scalar;
#pragma omp parallel if (nenv > 1) num_threads(num_threads())
  {
    std::vector<T> reals(static_cast<size_t>(scratch.reals));
    std::vector<int> ints(static_cast<size_t>(scratch.ints));
#pragma omp for schedule(static)
    for (int e = 0; e < nenv; ++e) kernel(e, Scratch<T>{reals.data(), ints.data()});
  }
}

}  // namespace phx::cpu
