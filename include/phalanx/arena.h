// Scratch storage handed out in order, and the tables workspaces are declared in.
#pragma once

#include <type_traits>

#include "phalanx/config.h"
#include "phalanx/model_fields.h"

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
  PHX_HD ScratchSize used() const { return {nreal, nint}; }
  // the storage not taken yet
  PHX_HD Scratch<T> rest() const {
    return {reals ? reals + nreal : nullptr, ints ? ints + nint : nullptr};
  }
};

// The counts workspace sizes are expressions in: a model's (any struct with them), or those of
// a tape's step slot, which has room for fewer contacts and rows than the model allows.
struct Counts {
#define PHX_COUNTS_MEMBER(name, comment) int name;
  PHX_MODEL_COUNTS(PHX_COUNTS_MEMBER)
#undef PHX_COUNTS_MEMBER
  int nconmax, nefcmax;  // capacities: contacts and constraint rows
};
template <class M>
PHX_HD Counts counts_of(const M& m) {
  Counts c;
#define PHX_COUNTS_COPY(name, comment) c.name = m.name;
  PHX_MODEL_COUNTS(PHX_COUNTS_COPY)
#undef PHX_COUNTS_COPY
  c.nconmax = m.nconmax;
  c.nefcmax = m.nefcmax;
  return c;
}

// the storage W::carve(m, arena, args...) takes, reals in units of T
template <class W, class T, class M, class... Args>
PHX_HD ScratchSize carved_size(const M& m, Args... args) {
  Arena<T> a;
  W::carve(m, a, args...);
  return a.used();
}

}  // namespace phx

// Workspace tables: X(kind, name, size, comment), `size` an expression in the counts of a
// model `m` (ModelView of any scalar), kind `real` (the workspace's scalar) or `int`. Consumers
// expand them into members (PHX_WORKSPACE_MEMBER) and into the carve routine
// (PHX_WORKSPACE_TAKE, into a workspace `w` from an Arena `arena`).
#define PHX_WORKSPACE_MEMBER(kind, name, size, comment) kind* name;
#define PHX_WORKSPACE_TAKE(kind, name, size, comment) \
  w.name = arena.template take<kind>(long(size));

