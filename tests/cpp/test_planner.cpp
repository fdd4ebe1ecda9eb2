// The planners' update arithmetic (planner.h): MPPI's weighted update, the applied perturbation
// after clamping, CEM's refit and the warm-start shift, against direct computations.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "phalanx/planner.h"

namespace phx {
namespace {

TEST(Planner, NoiseAddressesFourStepsPerGeneratorBlock) {
  // white unit noise is the float normal at step floor(t / 4), dim 4 i + t mod 4; sigma
  // scales it
  const int H = 10, nu = 3;
  std::vector<double> eps(H * nu), scaled(H * nu);
  const double sigma[nu] = {0.5, 2.0, 3.0};
  planner_noise<double>(17, 5, 1, H, nu, nullptr, 0.0, eps.data());
  planner_noise<double>(17, 5, 1, H, nu, sigma, 0.0, scaled.data());
  for (int t = 0; t < H; ++t)
    for (int i = 0; i < nu; ++i) {
      double n = standard_normal<float>(17, 5, uint32_t(t / 4), uint32_t(4 * i + t % 4), 1);
      EXPECT_EQ(eps[t * nu + i], n);
      EXPECT_EQ(scaled[t * nu + i], sigma[i] * n);
    }
  // a float planner draws the same noise
  std::vector<float> eps32(H * nu);
  planner_noise<float>(17, 5, 1, H, nu, nullptr, 0.0f, eps32.data());
  for (int j = 0; j < H * nu; ++j) EXPECT_EQ(double(eps32[j]), eps[j]);
}

TEST(Planner, ControlsClampAndKeepTheAppliedPerturbation) {
  const int H = 3, nu = 2;
  std::vector<double> u = {0.5, 0.0, 0.9, 0.2, -0.9, 5.0};
  std::vector<double> eps = {0.2, 1.0, 0.3, -0.1, -0.3, 7.0};
  const double lo[2] = {-1.0, 0.0}, hi[2] = {1.0, 0.0};  // actuator 1 unlimited (lo >= hi)
  std::vector<double> ctrl(H * nu);
  planner_controls(H, nu, u.data(), lo, hi, eps.data(), ctrl.data());
  std::vector<double> expect = {0.7, 1.0, 1.0, 0.1, -1.0, 12.0};
  for (int j = 0; j < H * nu; ++j) {
    EXPECT_DOUBLE_EQ(ctrl[j], expect[j]) << j;
    EXPECT_DOUBLE_EQ(eps[j], ctrl[j] - u[j]) << j;  // what the update averages
  }
}

TEST(Planner, MppiUpdateIsTheWeightedMeanOfThePerturbations) {
  const int K = 5, H = 4, nu = 2;
  std::mt19937 rng(3);
  std::normal_distribution<double> n;
  std::vector<double> eps(K * H * nu), cost(K), w(K), u(H * nu);
  for (double& x : eps) x = n(rng);
  for (double& x : u) x = 0.1 * n(rng);
  for (int k = 0; k < K; ++k) cost[k] = 10 + k * 0.7;
  ASSERT_TRUE(mppi_weights(cost.data(), K, 0.5, w.data()));
  EXPECT_NEAR(std::accumulate(w.begin(), w.end(), 0.0), 1.0, 1e-15);
  for (int k = 1; k < K; ++k) EXPECT_NEAR(w[k] / w[k - 1], std::exp(-0.7 / 0.5), 1e-14);
  std::vector<double> u1 = u;
  const double lo[2] = {0, 0}, hi[2] = {0, 0};  // unlimited
  mppi_update(K, H, nu, w.data(), eps.data(), lo, hi, u1.data());
  for (int j = 0; j < H * nu; ++j) {
    double du = 0;
    for (int k = 0; k < K; ++k) du += w[k] * eps[k * H * nu + j];
    EXPECT_NEAR(u1[j], u[j] + du, 1e-15);
  }
  // one-hot weights move the plan onto that sample
  std::vector<double> hot(K, 0.0);
  hot[2] = 1;
  std::vector<double> u2 = u;
  mppi_update(K, H, nu, hot.data(), eps.data(), lo, hi, u2.data());
  for (int j = 0; j < H * nu; ++j) EXPECT_DOUBLE_EQ(u2[j], u[j] + eps[2 * H * nu + j]);
}

TEST(Planner, CemRefitBlendsEliteMomentsWithAFloor) {
  const int H = 2, nu = 1, K = 4;
  // sample controls per entry: elites 1 and 3
  std::vector<double> ctrl = {9, 9, 1.0, 2.0, 9, 9, 3.0, 6.0};
  const int elite[2] = {1, 3};
  std::vector<double> u = {0.0, 0.0}, sigma = {1.0, 1e-9};
  cem_refit(H, nu, ctrl.data(), elite, 2, 0.25, 0.01, u.data(), sigma.data());
  // entry 0: mean 2, std 1; entry 1: mean 4, std 2
  EXPECT_DOUBLE_EQ(u[0], 0.75 * 2.0);
  EXPECT_DOUBLE_EQ(u[1], 0.75 * 4.0);
  EXPECT_DOUBLE_EQ(sigma[0], 0.25 * 1.0 + 0.75 * 1.0);
  EXPECT_DOUBLE_EQ(sigma[1], 0.25 * 1e-9 + 0.75 * 2.0);
  // identical elites: the spread collapses to the floor
  std::vector<double> same = {5, 5, 5, 5, 5, 5, 5, 5}, s2 = {1e-4, 1e-4}, u3 = {5, 5};
  cem_refit(H, nu, same.data(), elite, 2, 0.0, 0.01, u3.data(), s2.data());
  EXPECT_DOUBLE_EQ(s2[0], 0.01);
  EXPECT_DOUBLE_EQ(u3[1], 5.0);
  (void)K;
}

TEST(Planner, ShiftMovesThePlanOneStepEarlier) {
  std::vector<double> u = {1, 2, 3, 4, 5, 6};  // H = 3, nu = 2
  plan_shift(3, 2, u.data());
  EXPECT_EQ(u, (std::vector<double>{3, 4, 5, 6, 5, 6}));
}

}  // namespace
}  // namespace phx
