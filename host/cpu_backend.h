// The CPU backend: OpenMP threads over environments (phx::num_threads() of them), each
// thread reusing one workspace block that stays in its cache, across launches too.
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>

#include "host/device.h"
#include "phalanx/workspace.h"

namespace phx::cpu {

// A thread's scratch block: grown on demand and kept for the thread's later launches, not
// zeroed (kernels write their scratch before reading it, as on CUDA, whose pool is reused too).
// Each Tag names a block of its own.
template <class T, class Tag = void>
T* thread_block(size_t n) {
  thread_local std::unique_ptr<T[]> block;
  thread_local size_t size = 0;
  if (n > size) {
    block.reset(new T[n]);
    size = n;
  }
  return block.get();
}

// The scratch a kernel writes, for the GPU memory report (bench/gpu_memory.py): while `on`,
// launch runs the environments one by one on the calling thread over scratch filled with a byte
// pattern and split as the CUDA backend splits it (its fixed reals and integers, and the
// strided arrays of a kernel that lays them out, split_rows, blocks of their own), and keeps,
// of each of those parts, the most scratch entries an environment wrote (those that differ
// from the pattern after it ran: a value written equal to the pattern, -4.6e-15 in float, is
// missed) and the most scratch an environment was given, over the launches since the trace
// was reset. `fixed` and `ifixed` count the fixed reals and integers, `rows` and `irows` the
// strided ones, `reals` and `ints` all of them (written: the sum of the parts' most).
struct ScratchTrace {
  bool on = false;
  ScratchSize given, written;
  long own_reals = 0, own_ints = 0;  // the most written of the environment's own blocks
};
inline ScratchTrace& scratch_trace() {
  static ScratchTrace trace;
  return trace;
}

// Counts over the launches on packs of environments (host/pack_kernels.h, host/pack_adjoint.h)
// since the last reset: passes run on lanes, and pack steps that fell back to one environment
// at a time (lanes that branched apart, or a stopped one); of the passes' lanes with rows, those
// whose LCP sweeps ran on the lanes (PackStepper::lane_sweeps).
struct PackStats {
  std::atomic<long> passes{0}, fallbacks{0}, lane_sweeps{0};
  // a tape's backward on packs: its passes on the lanes (a step's lanes without rows take the
  // whole pass, those with rows its part of fixed structure), and those whose lanes branched
  // apart there; of both, those whose rows' stages of fixed structure ran on the lanes too; and
  // the environment-steps walked alone
  std::atomic<long> reverse_passes{0}, reverse_fallbacks{0}, reverse_row_passes{0};
  std::atomic<long> reverse_alone{0};
  void reset() {
    passes = 0;
    fallbacks = 0;
    lane_sweeps = 0;
    reverse_passes = 0;
    reverse_fallbacks = 0;
    reverse_row_passes = 0;
    reverse_alone = 0;
  }
};
inline PackStats& pack_stats() {
  static PackStats stats;
  return stats;
}
// A test's switch: every pass of a tape's backward on the lanes runs again lane by lane, as one
// whose lanes branched apart does (host/pack_adjoint.h)
inline std::atomic<bool>& force_reverse_fallbacks() {
  static std::atomic<bool> on{false};
  return on;
}

constexpr unsigned char kScratchPattern = 0xA7;

// entries of a (n) that differ from kScratchPattern
template <class V>
long written_entries(const V* a, long n) {
  V pattern;
  std::memset(&pattern, kScratchPattern, sizeof(V));
  long count = 0;
  for (long i = 0; i < n; ++i) count += std::memcmp(a + i, &pattern, sizeof(V)) != 0;
  return count;
}

template <class Kernel>
void traced_launch(int nenv, const Kernel& kernel, ScratchSize scratch) {
  using T = typename Kernel::Scalar;
  ScratchTrace& trace = scratch_trace();
  // the strided arrays apart for a kernel that lays them out (CUDA interleaves them)
  const ScratchSize split = split_rows<Kernel>(scratch);
  const long global = split.reals - split.fixed;
  std::unique_ptr<T[]> reals = std::make_unique<T[]>(size_t(global));
  std::unique_ptr<T[]> fixed = std::make_unique<T[]>(size_t(split.fixed));
  std::unique_ptr<T[]> rows = std::make_unique<T[]>(size_t(split.rows));
  const long iglobal = split.ints - split.ifixed;
  std::unique_ptr<int[]> ints = std::make_unique<int[]>(size_t(iglobal));
  std::unique_ptr<int[]> ifixed = std::make_unique<int[]>(size_t(split.ifixed));
  std::unique_ptr<int[]> irows = std::make_unique<int[]>(size_t(split.irows));
  ScratchSize& given = trace.given;
  given.reals = std::max(given.reals, scratch.reals);
  given.ints = std::max(given.ints, scratch.ints);
  given.fixed = std::max(given.fixed, split.fixed);
  given.ifixed = std::max(given.ifixed, split.ifixed);
  given.rows = std::max(given.rows, split.rows);
  given.irows = std::max(given.irows, split.irows);
  for (int e = 0; e < nenv; ++e) {
    std::memset(reals.get(), kScratchPattern, size_t(global) * sizeof(T));
    std::memset(fixed.get(), kScratchPattern, size_t(split.fixed) * sizeof(T));
    std::memset(rows.get(), kScratchPattern, size_t(split.rows) * sizeof(T));
    std::memset(ints.get(), kScratchPattern, size_t(iglobal) * sizeof(int));
    std::memset(ifixed.get(), kScratchPattern, size_t(split.ifixed) * sizeof(int));
    std::memset(irows.get(), kScratchPattern, size_t(split.irows) * sizeof(int));
    const bool apart = split.fixed > 0 || split.ifixed > 0;  // the fixed blocks, both or none
    kernel(e, Scratch<T>{reals.get(), ints.get(), apart ? fixed.get() : nullptr,
                         split.rows > 0 ? rows.get() : nullptr,
                         split.irows > 0 ? irows.get() : nullptr, apart ? ifixed.get() : nullptr});
    ScratchSize& written = trace.written;
    const long wf = written_entries(fixed.get(), split.fixed);
    const long wr = written_entries(rows.get(), split.rows);
    const long wi = written_entries(irows.get(), split.irows);
    const long wif = written_entries(ifixed.get(), split.ifixed);
    written.fixed = std::max(written.fixed, wf);
    written.rows = std::max(written.rows, wr);
    written.irows = std::max(written.irows, wi);
    written.ifixed = std::max(written.ifixed, wif);
    trace.own_reals = std::max(trace.own_reals, written_entries(reals.get(), global));
    trace.own_ints = std::max(trace.own_ints, written_entries(ints.get(), iglobal));
    // the totals of the parts' most, so that the parts never add up to more than the total
    written.reals = written.fixed + written.rows + trace.own_reals;
    written.ints = written.ifixed + written.irows + trace.own_ints;
  }
}

template <class Kernel>
void launch(int nenv, const Kernel& kernel, ScratchSize scratch) {
  using T = typename Kernel::Scalar;
  if (scratch_trace().on) {
    traced_launch(nenv, kernel, scratch);
    return;
  }
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
