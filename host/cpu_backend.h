// The CPU backend: OpenMP threads over environments (phx::num_threads() of them), each
// thread reusing one workspace block that stays in its cache, across launches too.
#pragma once

#include <omp.h>

#include <memory>

#include "host/device.h"
#include "phalanx/workspace.h"

namespace phx::cpu {

// A thread's scratch block: grown on demand and kept for the thread's later launches, not
// zeroed (kernels write their scratch before reading it, as on CUDA, whose pool is reused too).
template <class T>
T* thread_block(size_t n) {
  thread_local std::unique_ptr<T[]> block;
  thread_local size_t size = 0;
  if (n > size) {
    block.reset(new T[n]);
    size = n;
  }
  return block.get();
}

template <class Kernel>
void launch(int nenv, const Kernel& kernel, ScratchSize scratch) {
  using T = typename Kernel::Scalar;
  const int threads = num_threads();
  if (nenv == 1 || threads == 1) {
    // on the calling thread, without starting a team (a wake-up costs as much as a small
    // model's step)
    Scratch<T> s{thread_block<T>(size_t(scratch.reals)), thread_block<int>(size_t(scratch.ints))};
    for (int e = 0; e < nenv; ++e) kernel(e, s);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    Scratch<T> s{thread_block<T>(size_t(scratch.reals)), thread_block<int>(size_t(scratch.ints))};
#pragma omp for schedule(static)
    for (int e = 0; e < nenv; ++e) kernel(e, s);
  }
}

}  // namespace phx::cpu
