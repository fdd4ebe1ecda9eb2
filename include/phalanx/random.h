// Counter-based random numbers: Philox4x32-10 and samplers addressed by (seed, env, step, dim),
// so the CPU and CUDA backends draw the same samples in any order, with no generator state.
//
// Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3",
// SC'11; also C++26's std::philox4x32) is a keyed bijection of a 128-bit counter: 10 rounds,
// each two 32x32->64 multiplies of counter words by fixed multipliers, their halves xored with
// the other words and the round key, and the words permuted; the 64-bit key is bumped by Weyl
// constants between rounds. It is the variant of Random123 and cuRAND (Philox4_32_10), and the
// paper reports that it passes TestU01's BigCrush.
//
// Addressing of a sample: key = seed (key[0] its low 32 bits, key[1] its high 32 bits),
// counter = (env, step, dim / 4, stream); word dim % 4 of the output block is dimension dim.
// `stream` separates purposes that share an (env, step, dim) (noise of two planners, a
// uniform and a normal draw): samples of different streams are independent.
#pragma once

#include <math.h>
#include <stdint.h>

#include "phalanx/math/scalar.h"

namespace phx {

struct Philox4x32 {
  struct Block {
    uint32_t w[4];
  };
  // round multipliers and Weyl key increments (the paper's constants)
  static constexpr uint32_t kMul0 = 0xD2511F53u;
  static constexpr uint32_t kMul1 = 0xCD9E8D57u;
  static constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio, 2^32 (sqrt(5) - 1) / 2
  static constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // 2^32 (sqrt(3) - 1)
  static constexpr int kRounds = 10;
};

// Philox4x32-10 of a counter (4 words) under a key (2 words)
PHX_HD PHX_INLINE Philox4x32::Block philox4x32(const uint32_t counter[4], const uint32_t key[2]) {
  uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int r = 0; r < Philox4x32::kRounds; ++r) {
    // the key schedule: round r uses key + r (kWeyl0, kWeyl1)
    if (r > 0) {
      k0 += Philox4x32::kWeyl0;
      k1 += Philox4x32::kWeyl1;
    }
    // two 64-bit products (nvcc emits mul.hi/mul.lo), xors with the round key, word permutation
    uint64_t p0 = uint64_t(Philox4x32::kMul0) * c0;
    uint64_t p1 = uint64_t(Philox4x32::kMul1) * c2;
    uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  return {{c0, c1, c2, c3}};
}

// Uniform in (0, 1), never 0 or 1 (so log(u) and log(1 - u) are finite), on a grid of cell
// midpoints, each exactly representable, symmetric about 1/2 (u and 1 - u both occur):
//   float  = (floor(hi / 2^9) + 1/2) 2^-23        from the top 23 bits of one word,
//            in [2^-24, 1 - 2^-24];
//   double = (hi 2^20 + floor(lo / 2^12) + 1/2) 2^-52   from 32 + 20 bits of two words,
//            in [2^-53, 1 - 2^-53].
// 23 and 52 bits, not 24 and 53, because the half-step offset needs one more significand bit:
// (x + 1/2) 2^-32 of a full 32-bit word, evaluated in float, is 1.0f for the largest words.
// The double's top 23 bits are the float's, so a float and a double run of the same seed see
// the same noise to 2^-24.
PHX_HD PHX_INLINE float uniform01_from_bits(uint32_t hi) {
  return (float(hi >> 9) + 0.5f) * 0x1p-23f;
}
PHX_HD PHX_INLINE double uniform01_from_bits(uint32_t hi, uint32_t lo) {
  return (double((uint64_t(hi) << 20) | (lo >> 12)) + 0.5) * 0x1p-52;
}

namespace detail {

PHX_HD PHX_INLINE uint32_t block_word(const Philox4x32::Block& b, uint32_t i) {
  // selects rather than b.w[i], so that a runtime i keeps the block in registers on the device
  return i == 0 ? b.w[0] : (i == 1 ? b.w[1] : (i == 2 ? b.w[2] : b.w[3]));
}

// the block of dims 4 block .. 4 block + 3 (block < 2^30, as dim is 32-bit)
PHX_HD PHX_INLINE Philox4x32::Block sample_block(uint64_t seed, uint32_t env, uint32_t step,
                                                 uint32_t block, uint32_t stream) {
  const uint32_t counter[4] = {env, step, block, stream};
  const uint32_t key[2] = {uint32_t(seed), uint32_t(seed >> 32)};
  return philox4x32(counter, key);
}

// a double's low bits come from the block whose index has bit 31 set (unused by dims)
constexpr uint32_t kLowBitsBlock = 0x80000000u;

// the uniforms of dims 4 block .. 4 block + 3: one block of words in float, a block of high
// and one of low words in double
PHX_HD PHX_INLINE void uniform01_block(uint64_t seed, uint32_t env, uint32_t step, uint32_t block,
                                       uint32_t stream, float u[4]) {
  Philox4x32::Block b = sample_block(seed, env, step, block, stream);
  for (int k = 0; k < 4; ++k) u[k] = uniform01_from_bits(b.w[k]);
}
PHX_HD PHX_INLINE void uniform01_block(uint64_t seed, uint32_t env, uint32_t step, uint32_t block,
                                       uint32_t stream, double u[4]) {
  Philox4x32::Block hi = sample_block(seed, env, step, block, stream);
  Philox4x32::Block lo = sample_block(seed, env, step, block | kLowBitsBlock, stream);
  for (int k = 0; k < 4; ++k) u[k] = uniform01_from_bits(hi.w[k], lo.w[k]);
}

// the uniforms of the Box-Muller pair that holds dim: dims dim & ~1 and dim | 1
template <class T>
PHX_HD PHX_INLINE void uniform01_pair(uint64_t seed, uint32_t env, uint32_t step, uint32_t dim,
                                      uint32_t stream, T& u0, T& u1) {
  T u[4];
  uniform01_block(seed, env, step, dim >> 2, stream, u);
  bool upper = dim & 2u;
  u0 = upper ? u[2] : u[0];
  u1 = upper ? u[3] : u[1];
}

// Box-Muller's radius and angle of a pair of uniforms
template <class T>
PHX_HD PHX_INLINE T box_muller_radius(T u0) {
  return sqrt(T(-2) * log(u0));
}
template <class T>
PHX_HD PHX_INLINE T box_muller_angle(T u1) {
  return T(6.283185307179586) * u1;
}

}  // namespace detail

// the raw 32-bit word of dimension dim (the float uniform's source)
PHX_HD PHX_INLINE uint32_t random_bits(uint64_t seed, uint32_t env, uint32_t step, uint32_t dim,
                                       uint32_t stream = 0) {
  return detail::block_word(detail::sample_block(seed, env, step, dim >> 2, stream), dim & 3u);
}

// uniform in (0, 1) of dimension dim, T = float or double; bit-identical on every device
template <class T>
PHX_HD PHX_INLINE T uniform01(uint64_t seed, uint32_t env, uint32_t step, uint32_t dim,
                              uint32_t stream = 0) {
  T u0, u1;
  detail::uniform01_pair(seed, env, step, dim, stream, u0, u1);
  return (dim & 1u) ? u1 : u0;
}

// standard normal of dimension dim by Box-Muller (Box and Muller 1958) on the uniforms of the
// same (seed, env, step, stream) and dims 2j, 2j + 1 (j = dim / 2):
//   r = sqrt(-2 log u(2j)),  theta = 2 pi u(2j + 1),
//   normal(2j) = r cos(theta),  normal(2j + 1) = r sin(theta),
// an exactly independent pair. |normal| <= sqrt(-2 log 2^-24) = 5.77 in float, 8.57 in double.
// It reuses the uniforms' words, so draw uniforms and normals of one (env, step) from different
// streams. Agreement across devices is that of their log, sqrt, cos and sin (a few ulp).
template <class T>
PHX_HD PHX_INLINE T standard_normal(uint64_t seed, uint32_t env, uint32_t step, uint32_t dim,
                                    uint32_t stream = 0) {
  T u0, u1;
  detail::uniform01_pair(seed, env, step, dim, stream, u0, u1);
  T r = detail::box_muller_radius(u0), theta = detail::box_muller_angle(u1);
  return (dim & 1u) ? r * sin(theta) : r * cos(theta);
}

// the normals of dims 4 block .. 4 block + 3 into n, each equal to standard_normal's, for a
// quarter of the generator's work per normal (one Philox block per four words, one log per
// pair)
template <class T>
PHX_HD PHX_INLINE void standard_normal4(uint64_t seed, uint32_t env, uint32_t step,
                                        uint32_t block, uint32_t stream, T n[4]) {
  T u[4];
  detail::uniform01_block(seed, env, step, block, stream, u);
  for (int k = 0; k < 4; k += 2) {
    T r = detail::box_muller_radius(u[k]), theta = detail::box_muller_angle(u[k + 1]);
    n[k] = r * cos(theta);
    n[k + 1] = r * sin(theta);
  }
}

}  // namespace phx
