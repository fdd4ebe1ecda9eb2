// Scratch storage handed out in order: how every workspace and solver lays out its arrays.
#pragma once

#include <type_traits>

#include "phalanx/config.h"

namespace phx {

// how much private scratch one environment's kernel needs: scalars and integers
struct ScratchSize {
  long reals = 0;
  long ints = 0;
};

// one environment's scratch blocks, handed to a kernel by the backend
template <class T>
struct Scratch {
  T* reals;
  int* ints;
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
  long nreal = 0, nint = 0;  // taken so far

  Arena() = default;
  PHX_HD explicit Arena(Scratch<T> s) : reals(s.reals), ints(s.ints) {}
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
  // Storage shared by alternatives that are never live together: each is carved from a copy
  // of this arena made at the same point, this one included; afterwards the arena stands past
  // the largest. cover(other) moves it past what the copy `other` took.
  PHX_HD void cover(const Arena& other) {
    if (other.nreal > nreal) nreal = other.nreal;
    if (other.nint > nint) nint = other.nint;
  }
  PHX_HD ScratchSize used() const { return {nreal, nint}; }
  // the storage not taken yet
  PHX_HD Scratch<T> rest() const {
    return {reals ? reals + nreal : nullptr, ints ? ints + nint : nullptr};
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
