// Scratch storage handed out in order: how every workspace and solver lays out its arrays.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>

#include "phalanx/config.h"

namespace phx {

// A pointer to every W-th element: the entries of one environment's array interleaved entry by
// entry with those of W - 1 others (Interleaved). It indexes and offsets as a pointer does, in
// the array's own entries.
template <class T, int W>
struct Strided {
  T* p = nullptr;

  Strided() = default;
  PHX_HD Strided(std::nullptr_t) {}
  PHX_HD explicit Strided(T* q) : p(q) {}
  template <class U>
  requires std::is_convertible_v<U*, T*> PHX_HD Strided(Strided<U, W> o) : p(o.p) {}

  PHX_HD T& operator[](long i) const { return p[i * W]; }
  PHX_HD T& operator*() const { return *p; }
  PHX_HD Strided operator+(long i) const { return Strided(p + i * W); }
  PHX_HD Strided operator-(long i) const { return Strided(p - i * W); }
  PHX_HD long operator-(Strided o) const { return long(p - o.p) / W; }
  PHX_HD explicit operator bool() const { return p != nullptr; }
};

// Where the capacity-sized arrays a workspace takes by Arena::take_rows (reals and integers)
// lie. Contiguous: in the environment's own block, as every other array (the CPU's layout).
// Interleaved: entry i of environment e at entry i * kStride + e % kStride of the tile of
// kStride environments that e belongs to, so that the threads of a CUDA warp, one environment
// each, reading the same entry read consecutive words: their loads coalesce.
struct Contiguous {
  static constexpr int kStride = 1;
  template <class K>
  using ptr = K*;
};
struct Interleaved {
  static constexpr int kStride = 32;  // a warp
  template <class K>
  using ptr = Strided<K, kStride>;
};
// what take_rows hands out under a layout: pointers to K
template <class Layout, class K>
using RowsPtr = typename Layout::template ptr<K>;

// a pointer type with the promise that what it reaches is reached through it alone: P itself
// for a class (Strided), P PHX_RESTRICT for a pointer
template <class P>
struct Restricted {
  using type = P;
};
template <class T>
struct Restricted<T*> {
  using type = T* PHX_RESTRICT;
};
// a restricted pointer to the entries K of an array take_rows laid out by Layout
template <class Layout, class K>
using RestrictedRows = typename Restricted<RowsPtr<Layout, K>>::type;

// How much private scratch one environment's kernel needs: scalars and integers. `fixed` of
// the reals and `ifixed` of the integers are those Arena::take_fixed hands out: sized by the
// model's counts alone (the workspace of the stages of fixed structure) or small and held for
// a whole launch (a rollout's state and contacts); a backend may place them apart (on CUDA, in
// the thread's local memory, which the hardware interleaves across a warp so that its loads
// coalesce).
struct ScratchSize {
  long reals = 0;  // all of them, `fixed` and `rows` included
  long ints = 0;   // all of them, `irows` and `ifixed` included
  long fixed = 0;
  long rows = 0;    // the reals taken by take_rows, which a backend may lay out apart (Interleaved)
  long irows = 0;   // and the integers taken by take_rows
  long ifixed = 0;  // the integers taken by take_fixed
};

// One environment's scratch blocks, handed to a kernel by the backend. With `fixed` set, the
// reals taken by take_fixed come from it (and its integers from `ifixed`, set with it when
// there are any), with `rows` and `irows` set the reals and integers
// taken by take_rows from them (laid out by Layout: for Interleaved, they point at the
// environment's first entry in its tile), and the others from `reals` and `ints` (a split
// scratch: ScratchSize's counts less the split parts there). An Interleaved scratch always has
// both rows blocks.
template <class T, class Layout = Contiguous>
struct Scratch {
  T* reals;
  int* ints;
  T* fixed = nullptr;
  T* rows = nullptr;
  int* irows = nullptr;
  int* ifixed = nullptr;
};

// Storage handed out in order: every workspace is laid out by one carve routine taking its
// arrays from an Arena. Over storage, the routine carves; over no storage (a counting Arena,
// whose takes return null) it measures, so a workspace's size is its carve run on a counting
// Arena (carved_size) and the two cannot disagree. Reals are of scalar T (a Lane of several,
// for the SIMD passes), integers int. An Interleaved arena that carves (not counts) always has
// its rows blocks.
template <class T, class Layout = Contiguous>
struct Arena {
  T* reals = nullptr;  // null: count only
  int* ints = nullptr;
  T* fixed = nullptr;          // the fixed reals' own block, for a split scratch; else null
  T* rows = nullptr;           // the rows' own blocks (reals, integers), for a split scratch;
  int* irows = nullptr;        // else null
  int* ifixed = nullptr;       // the fixed integers' own block, with `fixed`; else null
  long nreal = 0, nint = 0;    // taken so far; without the split ones
  long nfixed = 0;             // fixed reals taken so far
  long nifixed = 0;            // fixed integers taken so far
  long nrows = 0, nirows = 0;  // rows taken so far: reals, integers

  Arena() = default;
  PHX_HD explicit Arena(Scratch<T, Layout> s)
      : reals(s.reals),
        ints(s.ints),
        fixed(s.fixed),
        rows(s.rows),
        irows(s.irows),
        ifixed(s.ifixed) {}
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
  // the next n reals (K = T) or integers (K = int) sized by the model's counts alone or held
  // for a launch: from the fixed blocks of a split scratch, else as take<K>
  template <class K = T>
  PHX_HD K* take_fixed(long n) {
    if constexpr (std::is_same_v<K, int>) {
      nifixed += n;
      if (!fixed) return take<int>(n);
      return ifixed + (nifixed - n);
    } else {
      nfixed += n;
      if (!fixed) return take<T>(n);
      return fixed + (nfixed - n);
    }
  }
  // the next n reals (K = T) or integers (K = int) of a capacity-sized array: from the rows
  // block of a split scratch, laid out by Layout, else as take<K>
  template <class K = T>
  PHX_HD RowsPtr<Layout, K> take_rows(long n) {
    K* block;
    long* taken;
    if constexpr (std::is_same_v<K, int>) {
      block = irows;
      taken = &nirows;
    } else {
      block = rows;
      taken = &nrows;
    }
    *taken += n;
    if (!block) return RowsPtr<Layout, K>(take<K>(n));
    return RowsPtr<Layout, K>(block + (*taken - n) * Layout::kStride);
  }
  // Storage shared by alternatives that are never live together: each is carved from a copy
  // of this arena made at the same point, this one included; afterwards the arena stands past
  // the largest. cover(other) moves it past what the copy `other` took.
  PHX_HD void cover(const Arena& other) {
    if (other.nreal > nreal) nreal = other.nreal;
    if (other.nint > nint) nint = other.nint;
    if (other.nfixed > nfixed) nfixed = other.nfixed;
    if (other.nrows > nrows) nrows = other.nrows;
    if (other.nirows > nirows) nirows = other.nirows;
    if (other.nifixed > nifixed) nifixed = other.nifixed;
  }
  // what a counting Arena measured (reals counts the fixed ones and the rows too, ints the
  // integer rows and the fixed integers)
  PHX_HD ScratchSize used() const { return {nreal, nint, nfixed, nrows, nirows, nifixed}; }
  // the storage not taken yet
  PHX_HD Scratch<T, Layout> rest() const {
    return {reals ? reals + nreal : nullptr,
            ints ? ints + nint : nullptr,
            fixed ? fixed + nfixed : nullptr,
            rows ? rows + nrows * Layout::kStride : nullptr,
            irows ? irows + nirows * Layout::kStride : nullptr,
            ifixed ? ifixed + nifixed : nullptr};
  }
};

// Whether a kernel (include/phalanx/kernels/) takes its scratch in any Layout: its operator()
// a template on it. The CUDA backend then lays its strided arrays out Interleaved; the others
// take a Scratch<T>, Contiguous.
template <class Kernel>
constexpr bool kLaysOutRows =
    std::is_invocable_v<const Kernel&, int, Scratch<typename Kernel::Scalar, Interleaved>>;

// How a backend splits a kernel's scratch of size s: for a kernel that lays out its strided
// arrays (kLaysOutRows), those in blocks of their own (`rows` reals, `irows` integers) and the
// others in `reals` and `ints`; for any other kernel, all of them in `reals` and `ints` (rows
// and irows zero). `fixed` is left to the backend.
template <class Kernel>
constexpr ScratchSize split_rows(ScratchSize s) {
  if constexpr (kLaysOutRows<Kernel>) {
    s.reals -= s.rows;
    s.ints -= s.irows;
  } else {
    s.rows = s.irows = 0;
  }
  return s;
}

// where the entries a pointer take_rows handed out reach begin: its first entry's address
template <class K>
PHX_HD K* rows_base(K* p) {
  return p;
}
template <class K, int W>
PHX_HD K* rows_base(Strided<K, W> p) {
  return p.p;
}

// the Layout of the arrays a pointer P reaches: Interleaved for a Strided pointer of its stride
template <class P>
struct LayoutOf {
  using type = Contiguous;
};
template <class K>
struct LayoutOf<Strided<K, Interleaved::kStride>> {
  using type = Interleaved;
};

// An Arena over a block of a workspace's rows, r reals and i integers (of its take_rows, laid
// out alike), for storage that is itself taken by take_rows: a solver's scratch within the
// rows. Under Contiguous every take reads the block; under Interleaved only take_rows may.
template <class T, class RP, class IP>
PHX_HD Arena<T, typename LayoutOf<RP>::type> rows_arena(RP r, IP i) {
  using Layout = typename LayoutOf<RP>::type;
  static_assert(std::is_same_v<Layout, typename LayoutOf<IP>::type>, "one layout for both");
  if constexpr (std::is_same_v<Layout, Contiguous>) {
    return Arena<T>(r, i);
  } else {
    Arena<T, Layout> a;
    a.rows = r.p;
    a.irows = i.p;
    return a;
  }
}

// the storage W::carve(m, arena, args...) takes, reals in units of T
template <class W, class T, class M, class... Args>
PHX_HD ScratchSize carved_size(const M& m, Args... args) {
  Arena<T> a;
  W::carve(m, a, args...);
  return a.used();
}

// W's arrays carved from arena (W::carve(m, arena, args...)) into *w, in place: a scratch made
// of others carves itself (w->carve_in, into a default-constructed *w), each of its parts by
// carve_part.
template <class W, class M, class A, class... Args>
PHX_HD void carve_part(W* w, const M& m, A& arena, Args... args) {
  if constexpr (requires { w->carve_in(m, arena, args...); })
    w->carve_in(m, arena, args...);
  else
    ::new (static_cast<void*>(w)) W(W::carve(m, arena, args...));
}

// the carve of a scratch made of others (W::carve), by value from its carve_in
template <class W, class M, class A, class... Args>
PHX_HD W carved_in_place(const M& m, A& arena, Args... args) {
  W w;
  w.carve_in(m, arena, args...);
  return w;
}

// carve_part as a function of its own on the GPU, which stores each pointer as it carves it:
// a reverse pass's scratch, some 200 pointers, carved by value is held in registers whole, and
// spills. (A forward kernel's, carved by value inline, keeps only the pointers it reads.)
template <class W, class M, class A, class... Args>
PHX_HD PHX_DEVICE_NOINLINE void carve_into(W* w, const M& m, A& arena, Args... args) {
  carve_part(w, m, arena, args...);
}

}  // namespace phx
