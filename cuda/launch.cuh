// The generic launch of the CUDA backend: one __global__ shell that runs a kernel functor
// (include/phalanx/kernels/) with one thread per environment. Each cuda/kernels_*.cu includes
// this and its kernel group's header and instantiates the group, so the backend compiles as
// several translation units in parallel. No physics here.
#pragma once

#include <cuda_runtime.h>
#ifdef PHX_CUDA_EMULATION
#include <alloca.h>
#endif

#include "host/cuda_backend.h"
#include "phalanx/arena.h"
#include "phalanx/kernels/common.h"

namespace phx::cuda {

// throw with the CUDA error and where it came from (cuda/backend.cu)
void check(cudaError_t status, const char* what);

// growing device blocks reused across launches (cuda/backend.cu)
void* scratch_reals(size_t bytes);
void* scratch_ints(size_t bytes);
void* scratch_temp(size_t bytes);  // temporary storage of CUB's algorithms
// and what the stages of a staged kernel pass on to each other (launch)
void* stage_reals(size_t bytes);
void* stage_ints(size_t bytes);

// The scratch a thread holds in its local memory at most. The driver reserves a thread's
// stack for every thread the GPU can hold at once (an A100: 108 SMs x 2048 threads), so 48 KiB
// a thread reserves up to 10.6 GB there, the global scratch of about 9000 humanoids.
constexpr size_t kLocalScratchMax = 48 * 1024;

// Where a thread's scratch lies (but for the interleaved rows of a kernel that lays them out,
// env_kernel): all of it in its local memory when it fits kLocalScratchMax
// (a small model's), else its fixed reals and integers there when they fit (fixed_bytes) and
// the rest in global memory, else all of it in global memory.
enum class Placement { kLocal, kFixedLocal, kGlobal };

template <class T>
PHX_HD size_t fixed_bytes(const ScratchSize& s) {
  return size_t(s.fixed) * sizeof(T) + size_t(s.ifixed) * sizeof(int);
}
template <class T>
Placement placement(const ScratchSize& s) {
  if (size_t(s.reals) * sizeof(T) + size_t(s.ints) * sizeof(int) <= kLocalScratchMax)
    return Placement::kLocal;
  if (s.fixed > 0 && fixed_bytes<T>(s) <= kLocalScratchMax) return Placement::kFixedLocal;
  return Placement::kGlobal;
}

// raise the device's stack limit, if need be, to `bytes` per thread (cuda/backend.cu)
void reserve_stack(size_t bytes);

// A thread's local memory: on the device, alloca's stack; emulated, the same with the stack
// limit checked as the device would need it.
#ifdef PHX_CUDA_EMULATION
#define PHX_LOCAL_ALLOC(bytes) (::phx_cuda_emulation::stack_check(bytes), alloca(bytes))
#else
#define PHX_LOCAL_ALLOC(bytes) alloca(bytes)
#endif

// One environment per thread, its scratch placed by `where`. Local memory is interleaved word
// by word across the threads of a warp by the hardware: element i of an array at the same
// place in 32 threads' local memory is 32 consecutive words, so a warp's load of it coalesces
// (the layout with the environment index fastest, in tiles of a warp, with no change to the
// kernels' indexing). The arrays of the stages of fixed structure and what a rollout holds for
// its launch (the fixed reals and integers) are at the same place in every thread. A kernel that
// takes any Layout (kLaysOutRows) has its strided arrays (the constraint rows J and Y, the LCP's
// arrays and the exact solvers' storage, a tape's slots, their integers) in global memory laid out
// the same way, Interleaved, from d_rows and d_irows: size.rows reals and size.irows integers per
// environment, not counted in size.reals and size.ints (split_rows). The other capacity-sized
// arrays (the reverse stages' own vectors, the contacts of a replay), whose entries each
// environment reaches by its own counts, are the thread's own blocks of global memory.
template <class Kernel, class T>
__global__ void env_kernel(Kernel kernel, int nenv, T* d_reals, int* d_ints, T* d_rows,
                           int* d_irows, ScratchSize size, Placement where) {
  int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= nenv) return;
  Scratch<T> s{d_reals + long(e) * size.reals, d_ints + long(e) * size.ints};
  if (where == Placement::kLocal) {
    s.reals = static_cast<T*>(
        PHX_LOCAL_ALLOC(size_t(size.reals) * sizeof(T) + size_t(size.ints) * sizeof(int)));
    s.ints = reinterpret_cast<int*>(s.reals + size.reals);
  } else if (where == Placement::kFixedLocal) {
    s.reals = d_reals + long(e) * (size.reals - size.fixed);
    s.ints = d_ints + long(e) * (size.ints - size.ifixed);
    s.fixed = static_cast<T*>(PHX_LOCAL_ALLOC(fixed_bytes<T>(size)));
    if (size.ifixed > 0) s.ifixed = reinterpret_cast<int*>(s.fixed + size.fixed);
  }
  // one call of the kernel, which is inlined here (two would double its code)
  if constexpr (kLaysOutRows<Kernel>) {
    constexpr int W = Interleaved::kStride;
    const long tile = e / W, lane = e % W;
    kernel(e,
           Scratch<T, Interleaved>{s.reals, s.ints, s.fixed, d_rows + tile * W * size.rows + lane,
                                   d_irows + tile * W * size.irows + lane, s.ifixed});
  } else {
    kernel(e, s);
  }
}

// one launch of env_kernel over nenv environments, queued after the launches before it
template <class Kernel>
void launch_once(int nenv, const Kernel& kernel, ScratchSize scratch) {
  using T = typename Kernel::Scalar;
  // the interleaved rows apart, in tiles of whole warps
  constexpr int W = Interleaved::kStride;
  scratch = split_rows<Kernel>(scratch);
  const size_t tiled = size_t((nenv + W - 1) / W) * W;
  const size_t rows = tiled * size_t(scratch.rows), irows = tiled * size_t(scratch.irows);
  const Placement where = placement<T>(scratch);
  size_t global = size_t(scratch.reals), ints = size_t(scratch.ints), local = 0;
  if (where == Placement::kLocal) {
    local = global * sizeof(T) + ints * sizeof(int);
    global = ints = 0;
  } else if (where == Placement::kFixedLocal) {
    local = fixed_bytes<T>(scratch);
    global -= size_t(scratch.fixed);
    ints -= size_t(scratch.ifixed);
  }
  if (local > 0) {
    // the shell's own frame, a property of its compiled code: read at its first launch (a
    // staged kernel's stages are launched at every step)
    static const size_t frame = [] {
      cudaFuncAttributes attributes;
      check(cudaFuncGetAttributes(&attributes, env_kernel<Kernel, T>), "kernel attributes");
      return size_t(attributes.localSizeBytes);
    }();
    // the frame, the array and alloca's alignment
    reserve_stack(frame + local + 64);
  }
  T* d_reals = static_cast<T*>(scratch_reals((size_t(nenv) * global + rows) * sizeof(T)));
  T* d_rows = d_reals + size_t(nenv) * global;
  int* d_ints = static_cast<int*>(scratch_ints((size_t(nenv) * ints + irows) * sizeof(int)));
  int* d_irows = d_ints + size_t(nenv) * ints;
  constexpr int kBlock = 128;
  const int nblock = (nenv + kBlock - 1) / kBlock;
#ifdef PHX_CUDA_EMULATION  // on the CPU (cuda/emulation/cuda_runtime.h): the same launch
  phx_cuda_emulation::launch(nblock, kBlock, env_kernel<Kernel, T>, kernel, nenv, d_reals, d_ints,
                             d_rows, d_irows, scratch, where);
#else
  // the launch chevrons, which clang-format would split as C++ shifts:
  // clang-format off
  env_kernel<Kernel, T><<<nblock, kBlock>>>(kernel, nenv, d_reals, d_ints, d_rows, d_irows,
                                            scratch, where);
  // clang-format on
#endif
  check(cudaGetLastError(), "kernel launch");
}

// A kernel's launch, returning when it has run. A kernel with stages (Kernel::kStaged and
// Kernel::staged: the step, rollout and planner kernels, and the one-step reverse kernels) runs
// as their launches, one after the other, so that no device kernel holds the narrowphase beside
// the rest of a step: at the 255-register limit its registers and buffers would set the whole
// step's. The stages pass the contacts on in global memory of their own (StageMemory over
// stage_reals and stage_ints). Any other kernel is launched once.
template <class Kernel>
void launch(int nenv, const Kernel& kernel, ScratchSize scratch) {
  using T = typename Kernel::Scalar;
  if constexpr (requires { Kernel::kStaged; }) {
    const ScratchSize size = StageMemory<T>::size(kernel.model, nenv);
    T* reals = static_cast<T*>(stage_reals(size_t(size.reals) * sizeof(T)));
    int* ints = static_cast<int*>(stage_ints(size_t(size.ints) * sizeof(int)));
    kernel.staged(StageMemory<T>::carve(kernel.model, nenv, reals, ints),
                  [&](const auto& stage) { launch_once(nenv, stage, scratch); });
  } else {
    launch_once(nenv, kernel, scratch);
  }
  check(cudaDeviceSynchronize(), "kernel execution");
}

}  // namespace phx::cuda

#define PHX_CUDA_INSTANTIATE(K) \
  template void phx::cuda::launch<phx::K>(int, const phx::K&, phx::ScratchSize);
