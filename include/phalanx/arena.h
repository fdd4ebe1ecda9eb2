// Scratch storage handed out in order: how every workspace and solver lays out its arrays.
#pragma once

#include <type_traits>

#include "phalanx/config.h"

namespace phx {

// How much private scratch one environment's kernel needs: scalars and integers. `fixed` of
// the reals are sized by the model's counts alone (the workspace of the stages of fixed
// structure, Arena::take_fixed); a backend may place them apart (on CUDA, in the thread's local
// memory, which the hardware interleaves across a warp so that its loads coalesce).
struct ScratchSize {
  long reals = 0;  // all of them, `fixed` included
  long ints = 0;
  long fixed = 0;
};

// One environment's scratch blocks, handed to a kernel by the backend. With `fixed` set, the
// reals taken by take_fixed come from it and the others from `reals` (a split scratch:
// ScratchSize::reals - fixed of them there); without, all come from `reals`.
template <class T>
struct Scratch {
  T* reals;
  int* ints;
  T* fixed = nullptr;
};

// Storage handed out in order: every workspace is laid out by one carve routine taking its
// arrays from an Arena. Over storage, the routine carves; over no storage (a counting Arena,
// whose takes return null) it measures, so a workspace's size is its carve run on a counting
// Arena (carved_size) and the two cannot disagree. Reals are of scalar T (a Lane of several,
// for the SIMD passes), integers int.
template <class T>
struct Arena {
  T* reals = nullptr;  // null: count only
  int* ints = nullptr;
  T* fixed = nullptr;        // the fixed reals' own block, for a split scratch; else null
  long nreal = 0, nint = 0;  // taken so far; nreal without the fixed ones when split
  long nfixed = 0;           // fixed reals taken so far

  Arena() = default;
  PHX_HD explicit Arena(Scratch<T> s) : reals(s.reals), ints(s.ints), fixed(s.fixed) {}
  PHX_HD Arena(T* r, int* i) : reals(r), ints(i) {}

  // the next n reals (K = T) or integers (K = int)
  template <class K>
  PHX_HD K* take(long n) {
    if constexpr (std::is_same_v<K, int>) {
      int* p = ints ? ints + nint : nullptr;
      nint += n;
      return p;
    } else {
      T* p = reals ? reals + nreal : nullptr;
      nreal += n;
      return p;
    }
  }
  // the next n reals sized by the model's counts alone: from the fixed block of a split
  // scratch, else as take<T>
  PHX_HD T* take_fixed(long n) {
    nfixed += n;
    if (!fixed) return take<T>(n);
    return fixed + (nfixed - n);
  }
  // Storage shared by alternatives that are never live together: each is carved from a copy
  // of this arena made at the same point, this one included; afterwards the arena stands past
  // the largest. cover(other) moves it past what the copy `other` took.
  PHX_HD void cover(const Arena& other) {
    if (other.nreal > nreal) nreal = other.nreal;
    if (other.nint > nint) nint = other.nint;
    if (other.nfixed > nfixed) nfixed = other.nfixed;
  }
  // what a counting Arena measured (reals counts the fixed ones too)
  PHX_HD ScratchSize used() const { return {nreal, nint, nfixed}; }
  // the storage not taken yet
  PHX_HD Scratch<T> rest() const {
    return {reals ? reals + nreal : nullptr, ints ? ints + nint : nullptr,
            fixed ? fixed + nfixed : nullptr};
  }
};

// the storage W::carve(m, arena, args...) takes, reals in units of T
template <class W, class T, class M, class... Args>
PHX_HD ScratchSize carved_size(const M& m, Args... args) {
  Arena<T> a;
  W::carve(m, a, args...);
  return a.used();
}

}  // namespace phx
