// Philox4x32-10 against published answers, the keyed samplers' conversions, and their moments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "phalanx/random.h"

namespace phx {
namespace {

// Known answers: Random123's kat_vectors for philox4x32_10 (counter words, key words, output
// words, all little-endian word order as in that file). The expected outputs were recomputed
// with an independent implementation, randomgen 2.5.1 from PyPI:
//   Philox(counter=c - 1, key=k, number=4, width=32).random_raw(4)
// where c = sum ctr[i] 2^(32 i) and k = key[0] + key[1] 2^32 (randomgen increments its counter
// before each block, hence c - 1), and they agree with Random123's file word for word.
struct Kat {
  uint32_t counter[4];
  uint32_t key[2];
  uint32_t out[4];
};
constexpr Kat kKats[] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    // not in Random123's file, from randomgen only: small distinct words in every slot
    {{1, 2, 3, 4}, {5, 6}, {0xc0c839bc, 0x889c87c5, 0x61986739, 0x2d4623d0}},
};

TEST(Philox, KnownAnswers) {
  for (const Kat& k : kKats) {
    Philox4x32::Block b = philox4x32(k.counter, k.key);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(b.w[i], k.out[i]) << "word " << i;
  }
}

// the pi vector addressed through the sampler: seed = key[1] 2^32 + key[0], env = ctr[0],
// step = ctr[1], dim = 4 ctr[2] + i, stream = ctr[3]
constexpr uint64_t kPiSeed = 0x299f31d0a4093822ull;
constexpr uint32_t kPiEnv = 0x243f6a88, kPiStep = 0x85a308d3, kPiStream = 0x03707344;
constexpr uint32_t kPiDim = 4 * 0x13198a2eu;

TEST(Philox, SamplerAddressesCounterAndKey) {
  const uint32_t* out = kKats[2].out;
  for (uint32_t i = 0; i < 4; ++i)
    EXPECT_EQ(random_bits(kPiSeed, kPiEnv, kPiStep, kPiDim + i, kPiStream), out[i]);
  // the all-zero vector is seed 0, env 0, step 0, dims 0..3, stream 0 (the default)
  for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(random_bits(0, 0, 0, i), kKats[0].out[i]);
}

TEST(Uniform, ConversionOfKnownWords) {
  // float: (floor(x / 2^9) + 1/2) 2^-23, exact
  EXPECT_EQ(uniform01_from_bits(0u), 0x1p-24f);
  EXPECT_EQ(uniform01_from_bits(0xffffffffu), 1.0f - 0x1p-24f);
  EXPECT_EQ(uniform01_from_bits(0x80000000u), 0.5f + 0x1p-24f);
  // double: (x 2^20 + floor(y / 2^12) + 1/2) 2^-52, exact
  EXPECT_EQ(uniform01_from_bits(0u, 0u), 0x1p-53);
  EXPECT_EQ(uniform01_from_bits(0xffffffffu, 0xffffffffu), 1.0 - 0x1p-53);
  EXPECT_LT(uniform01_from_bits(0xffffffffu, 0xffffffffu), 1.0);
  EXPECT_LT(uniform01_from_bits(0xffffffffu), 1.0f);

  // the pi vector's words through the samplers; the double's low words are the block at
  // ctr[2] | 2^31 (c65275ad 46db2c95 5187d0a1 25e531f5), values computed in Python from
  // randomgen's words with exact rational checks
  const float f[4] = {0x1.a2d9fep-1f, 0x1.29fb9ap-1f, 0x1.400794p-2f, 0x1.209378p-3f};
  const double d[4] = {0x1.a2d9fc138ca4fp-1, 0x1.29fb99d68db65p-1, 0x1.40079081461f6p-2,
                       0x1.209375092f29cp-3};
  for (uint32_t i = 0; i < 4; ++i) {
    uint32_t dim = kPiDim + i;
    float uf = uniform01<float>(kPiSeed, kPiEnv, kPiStep, dim, kPiStream);
    double ud = uniform01<double>(kPiSeed, kPiEnv, kPiStep, dim, kPiStream);
    EXPECT_EQ(uf, f[i]) << i;
    EXPECT_EQ(uf, uniform01_from_bits(kKats[2].out[i]));
    EXPECT_EQ(ud, d[i]) << i;
    // the double refines the float: same top 23 bits, so within half a float cell
    EXPECT_LE(std::fabs(double(uf) - ud), 0x1p-24);
  }
}

TEST(Uniform, KeyedAndRepeatable) {
  const uint64_t seed = 12345;
  const uint32_t env = 7, step = 3, dim = 5;
  double base = uniform01<double>(seed, env, step, dim);
  // the same address gives the same value, whatever was drawn in between
  for (uint32_t e = 0; e < 10; ++e) (void)uniform01<double>(seed, e, step, dim);
  EXPECT_EQ(uniform01<double>(seed, env, step, dim), base);
  EXPECT_EQ(uniform01<float>(seed, env, step, dim), uniform01<float>(seed, env, step, dim));
  // changing any part of the address changes the value (including the seed's high word)
  EXPECT_NE(uniform01<double>(seed + 1, env, step, dim), base);
  EXPECT_NE(uniform01<double>(seed + (1ull << 32), env, step, dim), base);
  EXPECT_NE(uniform01<double>(seed, env + 1, step, dim), base);
  EXPECT_NE(uniform01<double>(seed, env, step + 1, dim), base);
  EXPECT_NE(uniform01<double>(seed, env, step, dim + 1), base);
  EXPECT_NE(uniform01<double>(seed, env, step, dim + 4), base);  // next block, same word
  EXPECT_NE(uniform01<double>(seed, env, step, dim, 1), base);
  // swapped env and step are different samples
  EXPECT_NE(uniform01<double>(seed, step, env, dim), uniform01<double>(seed, env, step, dim));
  // float and double of one address agree to half a float cell for many addresses
  for (uint32_t k = 0; k < 1000; ++k)
    EXPECT_LE(std::fabs(double(uniform01<float>(seed, k, k / 7, k % 13)) -
                        uniform01<double>(seed, k, k / 7, k % 13)),
              0x1p-24);
}

TEST(Normal, BoxMullerPairsOfWords) {
  // normal(2j) = sqrt(-2 log u(2j)) cos(2 pi u(2j + 1)), normal(2j + 1) the same with sin
  const uint64_t seed = 99;
  for (uint32_t j = 0; j < 8; ++j) {
    double u0 = uniform01<double>(seed, 1, 2, 2 * j), u1 = uniform01<double>(seed, 1, 2, 2 * j + 1);
    double r = std::sqrt(-2 * std::log(u0)), theta = 6.283185307179586 * u1;
    EXPECT_EQ(standard_normal<double>(seed, 1, 2, 2 * j), r * std::cos(theta));
    EXPECT_EQ(standard_normal<double>(seed, 1, 2, 2 * j + 1), r * std::sin(theta));
  }
}

template <class T>
void check_normal4() {
  // four at once are the four single draws, bit for bit
  for (uint32_t b = 0; b < 50; ++b) {
    T n[4];
    standard_normal4<T>(31, b, 3 * b, b % 7, 2, n);
    for (uint32_t k = 0; k < 4; ++k) EXPECT_EQ(n[k], standard_normal<T>(31, b, 3 * b, 4 * (b % 7) + k, 2));
  }
}
TEST(Normal, FourAtOnceEqualSingleDraws) {
  check_normal4<float>();
  check_normal4<double>();
}

// moments over 100 envs x 100 steps x 100 dims = 1e6 samples, asserted within 5 standard errors
// (a false failure has probability about 6e-7 per check)
constexpr uint32_t kN = 100;
constexpr double kCount = double(kN) * kN * kN;

template <class Draw>
void moments(Draw draw, double m[5], double& lo, double& hi) {
  for (int p = 0; p < 5; ++p) m[p] = 0;
  lo = 1e300, hi = -1e300;
  for (uint32_t e = 0; e < kN; ++e)
    for (uint32_t s = 0; s < kN; ++s)
      for (uint32_t d = 0; d < kN; ++d) {
        double x = double(draw(e, s, d));
        double xp = 1;
        for (int p = 1; p < 5; ++p) m[p] += (xp *= x);
        lo = x < lo ? x : lo;
        hi = x > hi ? x : hi;
      }
  for (int p = 1; p < 5; ++p) m[p] /= kCount;
}

template <class T>
void check_uniform_moments() {
  double m[5], lo, hi;
  moments([](uint32_t e, uint32_t s, uint32_t d) { return uniform01<T>(2024, e, s, d); }, m, lo,
          hi);
  // U(0, 1): mean 1/2 (sd 1/sqrt 12), variance 1/12 (sd of (u - 1/2)^2: sqrt(1/80 - 1/144))
  double mean = m[1], var = m[2] - m[1] * m[1];
  double se_mean = std::sqrt(1.0 / 12 / kCount),
         se_var = std::sqrt((1.0 / 80 - 1.0 / 144) / kCount);
  EXPECT_NEAR(mean, 0.5, 5 * se_mean);
  EXPECT_NEAR(var, 1.0 / 12, 5 * se_var);
  EXPECT_GT(lo, 0.0);
  EXPECT_LT(hi, 1.0);
  // the extremes of 1e6 uniforms are within about 1e-5 of 0 and 1
  EXPECT_LT(lo, 1e-4);
  EXPECT_GT(hi, 1 - 1e-4);
  std::printf(
      "uniform<%s>: mean %.6f (se %.1e) var %.6f (1/12 = %.6f, se %.1e) min %.3g max 1-%.3g\n",
      sizeof(T) == 4 ? "float" : "double", mean, se_mean, var, 1.0 / 12, se_var, lo, 1 - hi);
}

TEST(Uniform, MomentsFloat) {
  check_uniform_moments<float>();
}
TEST(Uniform, MomentsDouble) {
  check_uniform_moments<double>();
}

template <class T>
void check_normal_moments() {
  double m[5], lo, hi;
  moments([](uint32_t e, uint32_t s, uint32_t d) { return standard_normal<T>(77, e, s, d); }, m, lo,
          hi);
  // N(0, 1) raw moments 0, 1, 0, 3 with variances 1, 2, 15, 96 (E z^(2p) - (E z^p)^2)
  double se[5] = {0, std::sqrt(1 / kCount), std::sqrt(2 / kCount), std::sqrt(15 / kCount),
                  std::sqrt(96 / kCount)};
  EXPECT_NEAR(m[1], 0.0, 5 * se[1]);
  EXPECT_NEAR(m[2], 1.0, 5 * se[2]);
  EXPECT_NEAR(m[3], 0.0, 5 * se[3]);
  EXPECT_NEAR(m[4], 3.0, 5 * se[4]);
  // Box-Muller's radius is bounded by the smallest uniform: sqrt(-2 log 2^-24) in float
  double bound = sizeof(T) == 4 ? 5.7682 : 8.5717;
  EXPECT_LE(hi, bound);
  EXPECT_GE(lo, -bound);
  // the largest |z| of 1e6 normals is about 4.9; all below 4 has probability about 1e-14
  EXPECT_GT(hi, 4.0);
  EXPECT_LT(lo, -4.0);
  std::printf(
      "normal<%s>: mean %.5f var %.5f third %.5f fourth %.4f (se %.1e %.1e %.1e %.1e) "
      "min %.3f max %.3f\n",
      sizeof(T) == 4 ? "float" : "double", m[1], m[2] - m[1] * m[1], m[3], m[4], se[1], se[2],
      se[3], se[4], lo, hi);
}

TEST(Normal, MomentsFloat) {
  check_normal_moments<float>();
}
TEST(Normal, MomentsDouble) {
  check_normal_moments<double>();
}

// Neighbouring addresses are uncorrelated: the sample correlation of two independent variables
// over n pairs has standard error 1 / sqrt(n).
TEST(Normal, NeighboursUncorrelated) {
  const uint32_t n = 200000;
  // (dim, dim + 1) pairs are a Box-Muller cos/sin pair or straddle two pairs or blocks;
  // env and step neighbours differ in one counter word
  double c_dim = 0, c_env = 0, c_step = 0, c_stream = 0;
  for (uint32_t k = 0; k < n; ++k) {
    uint32_t e = k / 100, d = k % 100;
    double z = standard_normal<double>(5, e, 0, d);
    c_dim += z * standard_normal<double>(5, e, 0, d + 1);
    c_env += z * standard_normal<double>(5, e + 1, 0, d);
    c_step += z * standard_normal<double>(5, e, 1, d);
    c_stream += z * standard_normal<double>(5, e, 0, d, 1);
  }
  double bound = 5 / std::sqrt(double(n));
  EXPECT_NEAR(c_dim / n, 0.0, bound);
  EXPECT_NEAR(c_env / n, 0.0, bound);
  EXPECT_NEAR(c_step / n, 0.0, bound);
  EXPECT_NEAR(c_stream / n, 0.0, bound);
  std::printf("correlations (bound %.1e): dim %.1e env %.1e step %.1e stream %.1e\n", bound,
              c_dim / n, c_env / n, c_step / n, c_stream / n);
}

}  // namespace
}  // namespace phx
