// The XPBD core (xpbd.h): every adjoint against central differences in double; the projections
// against the closed-form corrected formulas, momentum conservation, compliance, a hinge chain's
// convergence, a cable and a path through several bodies; the substep prediction against free fall
// and Euler's equations; the velocity update against the prediction it follows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "phalanx/xpbd.h"
#include "phalanx/xpbd_composite.h"

namespace phx {
namespace {

using V3 = Vec3<double>;
using Q = Quat<double>;
using Body = XpbdBody<double>;

double uniform(std::mt19937& rng, double lo = -1, double hi = 1) {
  return std::uniform_real_distribution<double>(lo, hi)(rng);
}
V3 rand3(std::mt19937& rng, double s = 1) {
  return {s * uniform(rng), s * uniform(rng), s * uniform(rng)};
}
Q rand_quat(std::mt19937& rng) {
  return normalize(Q{uniform(rng), uniform(rng), uniform(rng), uniform(rng)});
}
// a free body with a well-conditioned, non-spherical inertia
Body rand_body(std::mt19937& rng) {
  Body b;
  b.x = rand3(rng);
  b.q = rand_quat(rng);
  b.inv_mass = uniform(rng, 0.5, 2);
  b.inv_inertia = {uniform(rng, 0.5, 2), uniform(rng, 0.5, 2), uniform(rng, 0.5, 2)};
  return b;
}
V3 unit(const V3& a) {
  return (1 / norm(a)) * a;
}
// body 2's local axis whose world image is `angle` from body 1's axis a1 (turned about a random
// direction across it)
V3 axis_apart(const Body& b1, const Body& b2, const V3& a1, double angle, std::mt19937& rng) {
  V3 a1w = to_mat(b1.q) * a1;
  return mul_transpose(to_mat(b2.q), to_mat(axis_angle(unit(cross(a1w, rand3(rng))), angle)) * a1w);
}
V3 vec(const Q& q) {
  return {q.x, q.y, q.z};
}
double qdist(const Q& a, const Q& b) {
  return std::max(
      {std::abs(a.w - b.w), std::abs(a.x - b.x), std::abs(a.y - b.y), std::abs(a.z - b.z)});
}
// R diag(d) R^T as a matrix
Mat3<double> world_matrix(const Q& q, const V3& d) {
  Mat3<double> R = to_mat(q), D;
  D.m[0] = d.x;
  D.m[4] = d.y;
  D.m[8] = d.z;
  return R * D * transpose(R);
}
// the world rotation vector taking q0 to q1 = normalize(q0 + 1/2 [0, phi] q0): exactly phi
V3 rotation_applied(const Q& q0, const Q& q1) {
  Q d = q1 * conjugate(q0);
  return (2 / d.w) * vec(d);
}

// ---- flattening for the gradient checks ------------------------------------------------------

struct Reader {
  const std::vector<double>& v;
  size_t i = 0;
  double s() { return v[i++]; }
  V3 v3() {
    V3 r{v[i], v[i + 1], v[i + 2]};
    i += 3;
    return r;
  }
  Q q() {
    Q r{v[i], v[i + 1], v[i + 2], v[i + 3]};
    i += 4;
    return r;
  }
  Body body() {
    Body b;
    b.x = v3();
    b.q = q();
    b.inv_mass = s();
    b.inv_inertia = v3();
    return b;
  }
  // a leaf of get
  void operator()(double& a) { a = s(); }
  void operator()(V3& a) { a = v3(); }
  void operator()(Q& a) { a = q(); }
  void operator()(Body& a) { a = body(); }
};
struct Writer {
  std::vector<double> v;
  void s(double a) { v.push_back(a); }
  void v3(const V3& a) {
    s(a.x);
    s(a.y);
    s(a.z);
  }
  void q(const Q& a) {
    s(a.w);
    v3(vec(a));
  }
  void body(const Body& b) {
    v3(b.x);
    q(b.q);
    s(b.inv_mass);
    v3(b.inv_inertia);
  }
  // a leaf of put
  void operator()(double a) { s(a); }
  void operator()(const V3& a) { v3(a); }
  void operator()(const Q& a) { q(a); }
  void operator()(const Body& a) { body(a); }
};

using Fn = std::function<std::vector<double>(const std::vector<double>&)>;
// (inputs, output adjoints, input adjoints before) -> input adjoints after
using AdjFn = std::function<std::vector<double>(
    const std::vector<double>&, const std::vector<double>&, const std::vector<double>&)>;

// Central differences (step eps max(0.1, |x_i|), eps 1e-6 unless told) of <w, f(x)> against the
// adjoint, w random, each entry within |ad - fd| <= atol + rtol |fd| (atol 1e-8, rtol 1e-6 unless
// told). The adjoint starts from random
// accumulators, which checks that it adds (+=). Returns the worst |ad - fd| / (atol + rtol |fd|).
double gradcheck(const std::string& name, const std::vector<double>& x0, const Fn& f,
                 const AdjFn& adj, std::mt19937& rng, double eps = 1e-6, double atol = 1e-8,
                 double rtol = 1e-6) {
  std::vector<double> y0 = f(x0);
  std::vector<double> w(y0.size()), pre(x0.size());
  for (double& z : w) z = uniform(rng);
  for (double& z : pre) z = uniform(rng);
  std::vector<double> ad = adj(x0, w, pre);
  EXPECT_EQ(ad.size(), x0.size()) << name;
  double worst = 0, worst_abs = 0;
  std::vector<double> x = x0;
  for (size_t i = 0; i < x0.size(); ++i) {
    // small inputs (a compliance of 1e-4) take a proportionally smaller step, down to eps / 10
    double step = eps * std::max(0.1, std::abs(x0[i]));
    x[i] = x0[i] + step;
    std::vector<double> yp = f(x);
    x[i] = x0[i] - step;
    std::vector<double> ym = f(x);
    x[i] = x0[i];
    double fd = 0;
    for (size_t k = 0; k < y0.size(); ++k) fd += w[k] * (yp[k] - ym[k]) / (2 * step);
    double a = ad[i] - pre[i];
    double err = std::abs(a - fd);
    EXPECT_LE(err, atol + rtol * std::abs(fd))
        << name << ": input " << i << " adjoint " << a << " central difference " << fd;
    worst = std::max(worst, err / (atol + rtol * std::abs(fd)));
    worst_abs = std::max(worst_abs, err);
  }
  std::printf("  %-22s %2zu inputs, worst |ad - fd| %.2e, worst ratio to tolerance %.3f\n",
              name.c_str(), x0.size(), worst_abs, worst);
  return worst;
}

// The inputs and outputs of a check: a double, V3, Q or Body, or a struct that lists its fields
// once, as `auto fields() { return std::tie(...); }` (which may again be such structs). put and
// get flatten them in that order; put takes a copy since the one list serves the reading too.
template <class T>
concept HasFields = requires(T t) {
  t.fields();
};
template <class T>
void put(Writer& w, T t) {
  if constexpr (HasFields<T>)
    std::apply([&](const auto&... x) { (put(w, x), ...); }, t.fields());
  else
    w(t);
}
template <class T>
void get(Reader& r, T& t) {
  if constexpr (HasFields<T>)
    std::apply([&](auto&... x) { (get(r, x), ...); }, t.fields());
  else
    r(t);
}

// gradcheck of out = f(in) against adj(in, adj_in, adj_out), which adds to the input adjoints
// adj_in, from the inputs x0 (In and Out as put and get take them)
template <class In, class F, class A>
double check(const std::string& name, const In& x0, F f, A adj, std::mt19937& rng,
             double eps = 1e-6, double atol = 1e-8, double rtol = 1e-6) {
  using Out = decltype(f(x0));
  Writer in;
  put(in, x0);
  Fn fn = [&](const std::vector<double>& x) {
    Reader r{x};
    In i;
    get(r, i);
    Writer o;
    put(o, f(i));
    return o.v;
  };
  AdjFn an = [&](const std::vector<double>& x, const std::vector<double>& w,
                 const std::vector<double>& pre) {
    Reader r{x}, rw{w}, rp{pre};
    In i, ai;
    Out ao;
    get(r, i);
    get(rp, ai);
    get(rw, ao);
    adj(i, ai, ao);
    Writer o;
    put(o, ai);
    return o.v;
  };
  return gradcheck(name, in.v, fn, an, rng, eps, atol, rtol);
}

// A two-body projection under test: the forward and adjoint calls on the unpacked values. Its
// extra inputs are a struct with fields(), flattened after the bodies and before lambda.
template <class Extra>
struct TwoBodyCase {
  std::function<void(Body&, Body&, const Extra&, double&)> forward;
  // (b1, b2, extra, lambda, adj_b1, adj_b2, adj_extra, adj_lambda, adj_b1_out, adj_b2_out,
  //  adj_lambda_out)
  std::function<void(const Body&, const Body&, const Extra&, double, Body&, Body&, Extra&, double&,
                     const Body&, const Body&, double)>
      adjoint;
};
template <class Extra>
struct TwoBodyIn {
  Body b1, b2;
  Extra e;
  double lambda;
  auto fields() { return std::tie(b1, b2, e, lambda); }
};
struct TwoBodyOut {
  Body b1, b2;
  double lambda;
  auto fields() { return std::tie(b1, b2, lambda); }
};

// inputs: b1, b2, extra, lambda; outputs: b1, b2, lambda
template <class Extra>
double check_two_body(const std::string& name, const TwoBodyCase<Extra>& tc, const Body& b1,
                      const Body& b2, const Extra& extra, double lambda, std::mt19937& rng,
                      double eps = 1e-6, double atol = 1e-8, double rtol = 1e-6) {
  using In = TwoBodyIn<Extra>;
  return check(
      name, In{b1, b2, extra, lambda},
      [&](In i) {
        tc.forward(i.b1, i.b2, i.e, i.lambda);
        return TwoBodyOut{i.b1, i.b2, i.lambda};
      },
      [&](const In& i, In& a, const TwoBodyOut& w) {
        tc.adjoint(i.b1, i.b2, i.e, i.lambda, a.b1, a.b2, a.e, a.lambda, w.b1, w.b2, w.lambda);
      },
      rng, eps, atol, rtol);
}

// alpha and h, the two scalars every projection takes
struct Step {
  double alpha = 1e-4, h = 0.02;  // alpha~ = 0.25, of the order of the inverse masses
};

// ---- gradient checks -------------------------------------------------------------------------

TEST(XpbdGradcheck, RotateInverseInertiaAndGeneralizedInverseMass) {
  struct RotateIn {
    Q q;
    V3 phi;
    auto fields() { return std::tie(q, phi); }
  };
  // a body, a lever arm r and a unit direction n; out: both generalized inverse masses
  struct MassIn {
    Body b;
    V3 r, n;
    auto fields() { return std::tie(b, r, n); }
  };
  struct MassOut {
    double w, w_angular;
    auto fields() { return std::tie(w, w_angular); }
  };
  for (int seed = 0; seed < 4; ++seed) {
    std::mt19937 rng(100 + seed);
    check(
        "xpbd_rotate", RotateIn{rand_quat(rng), rand3(rng, 0.3)},
        [](RotateIn i) { return xpbd_rotate(i.q, i.phi); },
        [](const RotateIn& i, RotateIn& a, const Q& w) {
          adj_xpbd_rotate(i.q, i.phi, a.q, a.phi, w);
        },
        rng);

    check(
        "generalized_inv_mass", MassIn{rand_body(rng), rand3(rng), unit(rand3(rng))},
        [](MassIn i) {
          return MassOut{xpbd_generalized_inverse_mass(i.b, i.r, i.n),
                         xpbd_generalized_inverse_mass_angular(i.b, i.n)};
        },
        [](const MassIn& i, MassIn& a, const MassOut& w) {
          adj_xpbd_generalized_inverse_mass(i.b, i.r, i.n, a.b, a.r, a.n, w.w);
          adj_xpbd_generalized_inverse_mass_angular(i.b, i.n, a.b, a.n, w.w_angular);
        },
        rng);
  }
}

TEST(XpbdGradcheck, Predict) {
  struct PredictIn {
    Body b;
    V3 v, omega, f, tau, g;
    double h;
    auto fields() { return std::tie(b, v, omega, f, tau, g, h); }
  };
  struct PredictOut {
    Body b;
    V3 v, omega;
    auto fields() { return std::tie(b, v, omega); }
  };
  for (int seed = 0; seed < 4; ++seed) {
    std::mt19937 rng(200 + seed);
    check(
        "xpbd_predict",
        PredictIn{rand_body(rng), rand3(rng), rand3(rng), rand3(rng), rand3(rng), rand3(rng), 0.05},
        [](PredictIn i) {
          xpbd_predict(i.b, i.v, i.omega, i.f, i.tau, i.g, i.h);
          return PredictOut{i.b, i.v, i.omega};
        },
        [](const PredictIn& i, PredictIn& a, const PredictOut& w) {
          adj_xpbd_predict(i.b, i.v, i.omega, i.f, i.tau, i.g, i.h, a.b, a.v, a.omega, a.f, a.tau,
                           a.g, a.h, w.b, w.v, w.omega);
        },
        rng);
  }
}

TEST(XpbdGradcheck, Velocities) {
  // positions and orientations now and before the step, the step h
  struct VelocitiesIn {
    V3 x;
    Q q;
    V3 x_prev;
    Q q_prev;
    double h;
    auto fields() { return std::tie(x, q, x_prev, q_prev, h); }
  };
  struct VelocitiesOut {
    V3 v, omega;
    auto fields() { return std::tie(v, omega); }
  };
  // both signs of dq.w: q_prev and -q_prev are the same rotation
  for (int seed = 0; seed < 4; ++seed) {
    std::mt19937 rng(300 + seed);
    Q q0 = rand_quat(rng);
    Q q1 = xpbd_rotate(q0, rand3(rng, 0.3));
    if (seed % 2) q0 = Q{-q0.w, -q0.x, -q0.y, -q0.z};
    check(
        seed % 2 ? "xpbd_velocities w<0" : "xpbd_velocities w>0",
        VelocitiesIn{rand3(rng), q1, rand3(rng), q0, 0.03},
        [](VelocitiesIn i) {
          VelocitiesOut o;
          xpbd_velocities(i.x, i.q, i.x_prev, i.q_prev, i.h, o.v, o.omega);
          return o;
        },
        [](const VelocitiesIn& i, VelocitiesIn& a, const VelocitiesOut& w) {
          adj_xpbd_velocities(i.x, i.q, i.x_prev, i.q_prev, i.h, a.x, a.q, a.x_prev, a.q_prev, a.h,
                              w.v, w.omega);
        },
        rng);
  }
}

// positional (general form): extra = r1, r2, dx, alpha, h
struct PosExtra {
  V3 r1, r2, dx;
  Step s;
  auto fields() { return std::tie(r1, r2, dx, s.alpha, s.h); }
};
TwoBodyCase<PosExtra> positional_case() {
  return {[](Body& b1, Body& b2, const PosExtra& e, double& lam) {
            xpbd_positional(b1, b2, e.r1, e.r2, e.dx, e.s.alpha, e.s.h, lam);
          },
          [](const Body& b1, const Body& b2, const PosExtra& e, double lam, Body& a1, Body& a2,
             PosExtra& ae, double& al, const Body& w1, const Body& w2, double wl) {
            adj_xpbd_positional(b1, b2, e.r1, e.r2, e.dx, e.s.alpha, e.s.h, lam, a1, a2, ae.r1,
                                ae.r2, ae.dx, ae.s.alpha, ae.s.h, al, w1, w2, wl);
          }};
}

// a joint with two local vectors (attach: points; hinge: axes; distance: points plus rest)
struct JointExtra {
  V3 a, b;
  double rest = 0;
  Step s;
  auto fields() { return std::tie(a, b, rest, s.alpha, s.h); }
};

TEST(XpbdGradcheck, PositionalAttachDistance) {
  for (int seed = 0; seed < 5; ++seed) {
    std::mt19937 rng(400 + seed);
    Body b1 = rand_body(rng), b2 = rand_body(rng);
    double lambda = uniform(rng, -0.3, 0);
    check_two_body("xpbd_positional", positional_case(), b1, b2,
                   PosExtra{rand3(rng), rand3(rng), rand3(rng, 0.3), Step{}}, lambda, rng);

    TwoBodyCase<JointExtra> attach{
        [](Body& b1, Body& b2, const JointExtra& e, double& lam) {
          xpbd_attach(b1, b2, e.a, e.b, e.s.alpha, e.s.h, lam);
        },
        [](const Body& b1, const Body& b2, const JointExtra& e, double lam, Body& a1, Body& a2,
           JointExtra& ae, double& al, const Body& w1, const Body& w2, double wl) {
          adj_xpbd_attach(b1, b2, e.a, e.b, e.s.alpha, e.s.h, lam, a1, a2, ae.a, ae.b, ae.s.alpha,
                          ae.s.h, al, w1, w2, wl);
        }};
    check_two_body("xpbd_attach", attach, b1, b2, JointExtra{rand3(rng), rand3(rng), 0, Step{}},
                   lambda, rng);

    // distance, rigid and cable, stretched (rest below the distance) and, rigid, compressed
    for (int kind = 0; kind < 3; ++kind) {
      bool cable = kind == 1;
      TwoBodyCase<JointExtra> dist{
          [cable](Body& b1, Body& b2, const JointExtra& e, double& lam) {
            xpbd_distance(b1, b2, e.a, e.b, e.rest, cable, e.s.alpha, e.s.h, lam);
          },
          [cable](const Body& b1, const Body& b2, const JointExtra& e, double lam, Body& a1,
                  Body& a2, JointExtra& ae, double& al, const Body& w1, const Body& w2, double wl) {
            adj_xpbd_distance(b1, b2, e.a, e.b, e.rest, cable, e.s.alpha, e.s.h, lam, a1, a2, ae.a,
                              ae.b, ae.rest, ae.s.alpha, ae.s.h, al, w1, w2, wl);
          }};
      JointExtra e{rand3(rng, 0.5), rand3(rng, 0.5), 0, Step{}};
      double len = norm((b2.x + to_mat(b2.q) * e.b) - (b1.x + to_mat(b1.q) * e.a));
      e.rest = kind == 2 ? 1.3 * len : 0.7 * len;
      check_two_body(kind == 0   ? "xpbd_distance"
                     : kind == 1 ? "xpbd_distance cable"
                                 : "xpbd_distance pushed",
                     dist, b1, b2, e, lambda, rng);
    }
  }
}

// a block projection's inputs (two bodies, two local vectors: points or axes, compliance, step,
// the multipliers per axis) and outputs
struct BlockIn {
  Body b1, b2;
  V3 u1, u2;
  double alpha, h;
  V3 lambda;
  auto fields() { return std::tie(b1, b2, u1, u2, alpha, h, lambda); }
};
struct BlockOut {
  Body b1, b2;
  V3 lambda;
  auto fields() { return std::tie(b1, b2, lambda); }
};

// the gradcheck of a block projection f with its adjoint adj
using BlockFn = V3 (*)(Body&, Body&, const V3&, const V3&, double, double, V3&);
using AdjBlockFn = void (*)(const Body&, const Body&, const V3&, const V3&, double, double,
                            const V3&, Body&, Body&, V3&, V3&, double&, double&, V3&, Body, Body,
                            V3);
void check_block(const char* name, const BlockIn& in, BlockFn f, AdjBlockFn adj,
                 std::mt19937& rng) {
  check(
      name, in,
      [f](BlockIn i) {
        f(i.b1, i.b2, i.u1, i.u2, i.alpha, i.h, i.lambda);
        return BlockOut{i.b1, i.b2, i.lambda};
      },
      [adj](const BlockIn& i, BlockIn& a, const BlockOut& w) {
        adj(i.b1, i.b2, i.u1, i.u2, i.alpha, i.h, i.lambda, a.b1, a.b2, a.u1, a.u2, a.alpha, a.h,
            a.lambda, w.b1, w.b2, w.lambda);
      },
      rng);
}

TEST(XpbdGradcheck, AttachBlock) {
  for (int seed = 0; seed < 5; ++seed) {
    std::mt19937 rng(450 + seed);
    // rigid (alpha 0) and compliant
    double alpha = seed % 2 ? 0.0 : uniform(rng, 1e-5, 1e-4);
    check_block("xpbd_attach_block",
                BlockIn{rand_body(rng), rand_body(rng), rand3(rng), rand3(rng), alpha, 0.01,
                        rand3(rng, 0.3)},
                xpbd_attach_block<double>, adj_xpbd_attach_block<double>, rng);
  }
}

TEST(XpbdGradcheck, HingeAlignBlock) {
  for (int seed = 0; seed < 6; ++seed) {
    std::mt19937 rng(470 + seed);
    Body b1 = rand_body(rng), b2 = rand_body(rng);
    // local axes whose world images are 0.3 rad apart (seed 5: 2.8 rad, the far side)
    V3 a1 = unit(rand3(rng));
    double angle = seed == 5 ? 2.8 : 0.3;
    V3 a2 = axis_apart(b1, b2, a1, angle, rng);
    double alpha = seed % 2 ? 0.0 : uniform(rng, 1e-5, 1e-4);
    check_block("xpbd_hinge_align_block", BlockIn{b1, b2, a1, a2, alpha, 0.01, rand3(rng, 0.3)},
                xpbd_hinge_align_block<double>, adj_xpbd_hinge_align_block<double>, rng);
  }
}

TEST(XpbdProjection, BlockAlignmentClosesInOnePass) {
  // axes 1e-3 rad apart: one block pass aligns them to O(angle^2) where the scalar pass leaves
  // more than 1e-3 of the angle; the impulse is across the axis
  for (int seed = 0; seed < 10; ++seed) {
    std::mt19937 rng(680 + seed);
    Body b1 = rand_body(rng), b2 = rand_body(rng);
    V3 a1 = unit(rand3(rng)), a1w = to_mat(b1.q) * a1;
    V3 a2 = axis_apart(b1, b2, a1, 1e-3, rng);
    auto misalign = [&](const Body& c1, const Body& c2) {
      return norm(cross(to_mat(c1.q) * a1, to_mat(c2.q) * a2));
    };
    Body s1 = b1, s2 = b2, c1 = b1, c2 = b2;
    double ls = 0;
    V3 lb{};
    xpbd_hinge_align(s1, s2, a1, a2, 0.0, 0.01, ls);
    V3 p = xpbd_hinge_align_block(c1, c2, a1, a2, 0.0, 0.01, lb);
    EXPECT_LT(misalign(c1, c2), 1e-6) << seed;
    EXPECT_GT(misalign(s1, s2), 1e-6) << seed;
    EXPECT_LT(std::fabs(dot(p, a1w)), 1e-12 * norm(p)) << seed;
  }
}

TEST(XpbdGradcheck, AngularHingeWeldLimit) {
  for (int seed = 0; seed < 5; ++seed) {
    std::mt19937 rng(500 + seed);
    Body b1 = rand_body(rng), b2 = rand_body(rng);
    double lambda = uniform(rng, -0.3, 0);

    TwoBodyCase<JointExtra> angular{
        [](Body& b1, Body& b2, const JointExtra& e, double& lam) {
          xpbd_angular(b1, b2, e.a, e.s.alpha, e.s.h, lam);
        },
        [](const Body& b1, const Body& b2, const JointExtra& e, double lam, Body& a1, Body& a2,
           JointExtra& ae, double& al, const Body& w1, const Body& w2, double wl) {
          adj_xpbd_angular(b1, b2, e.a, e.s.alpha, e.s.h, lam, a1, a2, ae.a, ae.s.alpha, ae.s.h, al,
                           w1, w2, wl);
        }};
    check_two_body("xpbd_angular", angular, b1, b2, JointExtra{rand3(rng, 0.3), V3{}, 0, Step{}},
                   lambda, rng);

    // hinge alignment: local axes chosen so that the world axes are 0.5 rad apart (near side),
    // 2.4 rad apart (far side) and opposite to rounding (the fallback axis)
    TwoBodyCase<JointExtra> hinge{
        [](Body& b1, Body& b2, const JointExtra& e, double& lam) {
          xpbd_hinge_align(b1, b2, e.a, e.b, e.s.alpha, e.s.h, lam);
        },
        [](const Body& b1, const Body& b2, const JointExtra& e, double lam, Body& a1, Body& a2,
           JointExtra& ae, double& al, const Body& w1, const Body& w2, double wl) {
          adj_xpbd_hinge_align(b1, b2, e.a, e.b, e.s.alpha, e.s.h, lam, a1, a2, ae.a, ae.b,
                               ae.s.alpha, ae.s.h, al, w1, w2, wl);
        }};
    V3 a1 = unit(rand3(rng)), a1w = to_mat(b1.q) * a1;
    V3 perp = unit(cross(a1w, rand3(rng)));
    const double angles[3] = {0.5, 2.4, M_PI};
    const char* names[3] = {"xpbd_hinge_align near", "xpbd_hinge_align far",
                            "xpbd_hinge_align opposite"};
    for (int k = 0; k < 3; ++k) {
      V3 a2w = to_mat(axis_angle(perp, angles[k])) * a1w;
      V3 a2 = mul_transpose(to_mat(b2.q), a2w);
      // opposite axes: a step of 1e-8 keeps |a1 x a2| below kXpbdOppositeTol (the fallback
      // branch); its round-off, 1e-16 / 1e-8, sets the tolerance
      if (k < 2)
        check_two_body(names[k], hinge, b1, b2, JointExtra{a1, a2, 0, Step{}}, lambda, rng);
      else
        check_two_body(names[k], hinge, b1, b2, JointExtra{a1, a2, 0, Step{}}, lambda, rng, 1e-8,
                       1e-6, 1e-5);
    }

    // weld: joint frames f1, f2 as the a (rotation vector) and b of the extra, mapped by
    // axis_angle so that the quaternions stay free inputs of the check
    struct WeldExtra {
      Q f1, f2;
      Step s;
      auto fields() { return std::tie(f1, f2, s.alpha, s.h); }
    };
    TwoBodyCase<WeldExtra> weld{
        [](Body& b1, Body& b2, const WeldExtra& e, double& lam) {
          xpbd_weld_orientation(b1, b2, e.f1, e.f2, e.s.alpha, e.s.h, lam);
        },
        [](const Body& b1, const Body& b2, const WeldExtra& e, double lam, Body& a1, Body& a2,
           WeldExtra& ae, double& al, const Body& w1, const Body& w2, double wl) {
          adj_xpbd_weld_orientation(b1, b2, e.f1, e.f2, e.s.alpha, e.s.h, lam, a1, a2, ae.f1, ae.f2,
                                    ae.s.alpha, ae.s.h, al, w1, w2, wl);
        }};
    // frames 0.4 rad apart, and with the relative quaternion's w negative
    Q f1 = rand_quat(rng);
    Q f2 = conjugate(b2.q) * xpbd_rotate(b1.q * f1, rand3(rng, 0.25));
    check_two_body("xpbd_weld_orientation", weld, b1, b2, WeldExtra{f1, f2, Step{}}, lambda, rng);
    check_two_body("xpbd_weld w<0", weld, b1, b2,
                   WeldExtra{f1, Q{-f2.w, -f2.x, -f2.y, -f2.z}, Step{}}, lambda, rng);

    // hinge limit: body 2 turned about body 1's hinge axis beyond hi, and below lo
    struct LimitExtra {
      V3 a1, n1, n2;
      double lo, hi;
      Step s;
      auto fields() { return std::tie(a1, n1, n2, lo, hi, s.alpha, s.h); }
    };
    TwoBodyCase<LimitExtra> limit{
        [](Body& b1, Body& b2, const LimitExtra& e, double& lam) {
          xpbd_hinge_limit(b1, b2, e.a1, e.n1, e.n2, e.lo, e.hi, e.s.alpha, e.s.h, lam);
        },
        [](const Body& b1, const Body& b2, const LimitExtra& e, double lam, Body& a1, Body& a2,
           LimitExtra& ae, double& al, const Body& w1, const Body& w2, double wl) {
          adj_xpbd_hinge_limit(b1, b2, e.a1, e.n1, e.n2, e.lo, e.hi, e.s.alpha, e.s.h, lam, a1, a2,
                               ae.a1, ae.n1, ae.n2, ae.lo, ae.hi, ae.s.alpha, ae.s.h, al, w1, w2,
                               wl);
        }};
    V3 n1 = unit(cross(a1, rand3(rng)));
    V3 n1w = to_mat(b1.q) * n1;
    for (double angle : {1.2, -1.4}) {
      // n2 at `angle` about the hinge axis, slightly off the plane (axes not quite aligned)
      V3 n2w = to_mat(axis_angle(a1w, angle)) * n1w + 0.05 * a1w;
      V3 n2 = mul_transpose(to_mat(b2.q), n2w);
      check_two_body(angle > 0 ? "xpbd_hinge_limit hi" : "xpbd_hinge_limit lo", limit, b1, b2,
                     LimitExtra{a1, n1, n2, -0.9, 0.8, Step{}}, lambda, rng);
    }

    // slide limit: the anchors' displacement along the axis 0.3 beyond hi, and below lo
    struct SlideExtra {
      V3 r1, r2, a1;
      double lo, hi;
      Step s;
      auto fields() { return std::tie(r1, r2, a1, lo, hi, s.alpha, s.h); }
    };
    TwoBodyCase<SlideExtra> slide{
        [](Body& b1, Body& b2, const SlideExtra& e, double& lam) {
          xpbd_slide_limit(b1, b2, e.r1, e.r2, e.a1, e.lo, e.hi, e.s.alpha, e.s.h, lam);
        },
        [](const Body& b1, const Body& b2, const SlideExtra& e, double lam, Body& a1, Body& a2,
           SlideExtra& ae, double& al, const Body& w1, const Body& w2, double wl) {
          adj_xpbd_slide_limit(b1, b2, e.r1, e.r2, e.a1, e.lo, e.hi, e.s.alpha, e.s.h, lam, a1, a2,
                               ae.r1, ae.r2, ae.a1, ae.lo, ae.hi, ae.s.alpha, ae.s.h, al, w1, w2,
                               wl);
        }};
    V3 r1 = rand3(rng), r2 = rand3(rng);
    const double along =
        dot((b2.x + to_mat(b2.q) * r2) - (b1.x + to_mat(b1.q) * r1), a1w);  // s of the slide
    check_two_body("xpbd_slide_limit hi", slide, b1, b2,
                   SlideExtra{r1, r2, a1, along - 1.3, along - 0.3, Step{}}, lambda, rng);
    check_two_body("xpbd_slide_limit lo", slide, b1, b2,
                   SlideExtra{r1, r2, a1, along + 0.3, along + 1.3, Step{}}, lambda, rng);

    // ball limit: the joint frames 1.1 rad apart beyond a cone of 0.7 rad, with the relative
    // quaternion's w of either sign
    struct BallExtra {
      Q f1, f2;
      double hi;
      Step s;
      auto fields() { return std::tie(f1, f2, hi, s.alpha, s.h); }
    };
    TwoBodyCase<BallExtra> ball{
        [](Body& b1, Body& b2, const BallExtra& e, double& lam) {
          xpbd_ball_limit(b1, b2, e.f1, e.f2, e.hi, e.s.alpha, e.s.h, lam);
        },
        [](const Body& b1, const Body& b2, const BallExtra& e, double lam, Body& a1, Body& a2,
           BallExtra& ae, double& al, const Body& w1, const Body& w2, double wl) {
          adj_xpbd_ball_limit(b1, b2, e.f1, e.f2, e.hi, e.s.alpha, e.s.h, lam, a1, a2, ae.f1, ae.f2,
                              ae.hi, ae.s.alpha, ae.s.h, al, w1, w2, wl);
        }};
    Q g1 = rand_quat(rng);
    Q g2 = conjugate(b2.q) * (axis_angle(unit(rand3(rng)), 1.1) * (b1.q * g1));
    check_two_body("xpbd_ball_limit", ball, b1, b2, BallExtra{g1, g2, 0.7, Step{}}, lambda, rng);
    check_two_body("xpbd_ball_limit w<0", ball, b1, b2,
                   BallExtra{g1, Q{-g2.w, -g2.x, -g2.y, -g2.z}, 0.7, Step{}}, lambda, rng);
  }
}

// ---- projections -----------------------------------------------------------------------------

// the corrected forms of Liu eqs. 9 and 16 (see xpbd.h), written out with matrices
struct Expected {
  V3 x1, x2;
  Q q1, q2;
};
Expected corrected_positional(const Body& b1, const Body& b2, const V3& r1, const V3& r2) {
  V3 rho = to_mat(b1.q) * r1, tau = to_mat(b2.q) * r2;
  V3 c = (b2.x + tau) - (b1.x + rho), n = unit(c);
  Mat3<double> I1 = world_matrix(b1.q, b1.inv_inertia), I2 = world_matrix(b2.q, b2.inv_inertia);
  V3 u1 = cross(rho, n), u2 = cross(tau, n);
  double w = b1.inv_mass + b2.inv_mass + dot(u1, I1 * u1) + dot(u2, I2 * u2);
  double lambda = -norm(c) / w;
  return {b1.x - (lambda * b1.inv_mass) * n, b2.x + (lambda * b2.inv_mass) * n,
          xpbd_rotate(b1.q, -lambda * (I1 * u1)), xpbd_rotate(b2.q, lambda * (I2 * u2))};
}
Expected corrected_angular(const Body& b1, const Body& b2, const V3& a1, const V3& a2) {
  V3 c = cross(to_mat(b1.q) * a1, to_mat(b2.q) * a2), n = unit(c);
  Mat3<double> I1 = world_matrix(b1.q, b1.inv_inertia), I2 = world_matrix(b2.q, b2.inv_inertia);
  double lambda = -norm(c) / (dot(n, I1 * n) + dot(n, I2 * n));
  return {b1.x, b2.x, xpbd_rotate(b1.q, -lambda * (I1 * n)), xpbd_rotate(b2.q, lambda * (I2 * n))};
}

TEST(XpbdProjection, RigidStepIsTheCorrectedFormula) {
  for (int seed = 0; seed < 10; ++seed) {
    std::mt19937 rng(600 + seed);
    Body b1 = rand_body(rng), b2 = rand_body(rng);
    V3 r1 = rand3(rng), r2 = rand3(rng);
    Expected e = corrected_positional(b1, b2, r1, r2);
    double lambda = 0;
    xpbd_attach(b1, b2, r1, r2, 0.0, 0.01, lambda);
    EXPECT_LT(norm(b1.x - e.x1), 1e-14);
    EXPECT_LT(norm(b2.x - e.x2), 1e-14);
    EXPECT_LT(qdist(b1.q, e.q1), 1e-14);
    EXPECT_LT(qdist(b2.q, e.q2), 1e-14);

    // axes 0.6 rad apart (the near side, where the correction is a1 x a2 itself)
    V3 a1 = unit(rand3(rng));
    V3 a2 = axis_apart(b1, b2, a1, 0.6, rng);
    Expected ea = corrected_angular(b1, b2, a1, a2);
    lambda = 0;
    Body c1 = b1, c2 = b2;
    xpbd_hinge_align(c1, c2, a1, a2, 0.0, 0.01, lambda);
    EXPECT_EQ(norm(c1.x - b1.x), 0.0);
    EXPECT_EQ(norm(c2.x - b2.x), 0.0);
    EXPECT_LT(qdist(c1.q, ea.q1), 1e-14);
    EXPECT_LT(qdist(c2.q, ea.q2), 1e-14);
  }
}

// One rigid step closes the gap along its direction n to first order: n . gap' = O(eps^2). The
// gap as a whole closes only where the point's impulse response K n (K = inv_m + [r]^T I^-1 [r]
// summed over the bodies) is parallel to n; otherwise a component of order eps across n is left
// for the next iterations (the chain test below). Attachments at the centres of mass (K n = w n)
// close exactly.
TEST(XpbdProjection, AttachmentClosesToFirstOrderAndConservesMomentum) {
  for (int seed = 0; seed < 10; ++seed) {
    std::mt19937 rng(700 + seed);
    Body b1 = rand_body(rng), b2 = rand_body(rng);
    V3 r1 = rand3(rng), r2 = rand3(rng), dir = unit(rand3(rng));
    auto gap = [&](const Body& c1, const Body& c2, const V3& s1, const V3& s2) {
      return (c2.x + to_mat(c2.q) * s2) - (c1.x + to_mat(c1.q) * s1);
    };
    for (int k = 0; k < 2; ++k) {
      // separation eps along dir
      double eps = k == 0 ? 1e-2 : 1e-3;
      Body c1 = b1, c2 = b2;
      c2.x = c2.x - gap(c1, c2, r1, r2) + eps * dir;
      Body p1 = c1, p2 = c2;
      double lambda = 0;
      xpbd_attach(c1, c2, r1, r2, 0.0, 0.01, lambda);
      V3 g = gap(c1, c2, r1, r2);
      EXPECT_LT(std::abs(dot(dir, g)), 20 * eps * eps) << "not closed along n to first order";
      EXPECT_LT(norm(g), eps);

      // linear momentum: sum m dx = 0
      V3 dx1 = c1.x - p1.x, dx2 = c2.x - p2.x;
      V3 dP = (1 / p1.inv_mass) * dx1 + (1 / p2.inv_mass) * dx2;
      EXPECT_LT(norm(dP), 1e-15 * (1 + norm(dx1) / p1.inv_mass));
      // angular momentum about the origin of the linearised update:
      // sum x_i x m_i dx_i + I_i dphi_i = (p2 - p1) x p = 0
      V3 inertia1{1 / p1.inv_inertia.x, 1 / p1.inv_inertia.y, 1 / p1.inv_inertia.z};
      V3 inertia2{1 / p2.inv_inertia.x, 1 / p2.inv_inertia.y, 1 / p2.inv_inertia.z};
      V3 dL = cross(p1.x, (1 / p1.inv_mass) * dx1) + cross(p2.x, (1 / p2.inv_mass) * dx2) +
              world_matrix(p1.q, inertia1) * rotation_applied(p1.q, c1.q) +
              world_matrix(p2.q, inertia2) * rotation_applied(p2.q, c2.q);
      EXPECT_LT(norm(dL), 1e-15 * (1 + norm(dx1) / p1.inv_mass)) << "dL " << norm(dL);

      // at the centres of mass the step is a pure translation that closes the gap
      c1 = b1;
      c2 = b2;
      c2.x = c1.x + eps * dir;
      lambda = 0;
      xpbd_attach(c1, c2, V3{}, V3{}, 0.0, 0.01, lambda);
      EXPECT_LT(norm(c2.x - c1.x), 1e-17);
    }

    // body 1 static: it does not move, and the gap closes along n to first order
    Body s1 = b1, c2 = b2;
    s1.inv_mass = 0;
    s1.inv_inertia = {};
    c2.x = c2.x - gap(s1, c2, r1, r2) + 1e-3 * dir;
    Body p1 = s1;
    double lambda = 0;
    xpbd_attach(s1, c2, r1, r2, 0.0, 0.01, lambda);
    EXPECT_EQ(norm(s1.x - p1.x), 0.0);
    EXPECT_LT(qdist(s1.q, p1.q), 1e-15);
    EXPECT_LT(std::abs(dot(dir, gap(s1, c2, r1, r2))), 20 * 1e-6);
  }
}

TEST(XpbdProjection, BlockAttachmentClosesInOnePass) {
  // the 3x3 solve closes the mismatch to second order in one pass (the scalar projection only
  // along the mismatch), conserves momentum like it, and with compliance reaches
  // c + alpha~ lambda = 0 to the same order; a static pair with alpha = 0 is left alone
  for (int seed = 0; seed < 10; ++seed) {
    std::mt19937 rng(650 + seed);
    Body b1 = rand_body(rng), b2 = rand_body(rng);
    V3 r1 = rand3(rng), r2 = rand3(rng);
    // place body 2 so that the points are 1e-3 apart
    V3 gap = 1e-3 * unit(rand3(rng));
    b2.x = b1.x + to_mat(b1.q) * r1 - to_mat(b2.q) * r2 + gap;
    auto mismatch = [&](const Body& c1, const Body& c2) {
      return (c2.x + to_mat(c2.q) * r2) - (c1.x + to_mat(c1.q) * r1);
    };
    Body s1 = b1, s2 = b2, c1 = b1, c2 = b2;
    double ls = 0;
    V3 lb{};
    xpbd_attach(s1, s2, r1, r2, 0.0, 0.01, ls);
    xpbd_attach_block(c1, c2, r1, r2, 0.0, 0.01, lb);
    EXPECT_LT(norm(mismatch(c1, c2)), dot(gap, gap)) << seed;  // O(gap^2): measured 0.02-0.06 gap^2
    EXPECT_GT(norm(mismatch(s1, s2)), 1e-3 * norm(gap)) << seed;  // the scalar one leaves more
    V3 p = (1 / c1.inv_mass) * (c1.x - b1.x) + (1 / c2.inv_mass) * (c2.x - b2.x);
    EXPECT_LT(norm(p), 1e-15) << seed;
    // compliant: one pass from lambda = 0
    double alpha = 1e-6, h = 0.01, at = alpha / (h * h);
    Body d1 = b1, d2 = b2;
    V3 lc{};
    xpbd_attach_block(d1, d2, r1, r2, alpha, h, lc);
    EXPECT_LT(norm(mismatch(d1, d2) + at * lc), dot(gap, gap)) << seed;
    EXPECT_GT(norm(mismatch(d1, d2)), 1e-3 * norm(gap)) << seed;  // compliance leaves a gap
  }
  Body w1, w2;
  w1.x = {0, 0, 0};
  w2.x = {1, 0, 0};
  V3 lw{};
  V3 dl = xpbd_attach_block(w1, w2, V3{}, V3{}, 0.0, 0.01, lw);
  EXPECT_EQ(norm(dl), 0.0);
  EXPECT_EQ(w2.x.x, 1.0);
}

TEST(XpbdProjection, ComplianceStepAndEquilibrium) {
  // bodies at rest orientation with isotropic inertia, lever arms perpendicular to n:
  // w_i = 1/m_i + |r_i|^2 / I_i, and dlambda = -c / (w1 + w2 + alpha / h^2)
  Body b1, b2;
  b1.inv_mass = 0.5;
  b1.inv_inertia = {2, 2, 2};
  b2.inv_mass = 1.5;
  b2.inv_inertia = {0.8, 0.8, 0.8};
  b2.x = {1, 0, 0};
  V3 r{0, 0.5, 0};  // p1 = (0, .5, 0), p2 = (1, .5, 0): c = 1 along x
  double alpha = 2e-3, h = 0.05, at = alpha / (h * h);
  double w1 = 0.5 + 2 * 0.25, w2 = 1.5 + 0.8 * 0.25;
  double lambda = 0;
  double dl = xpbd_attach(b1, b2, r, r, alpha, h, lambda);
  EXPECT_NEAR(dl, -1.0 / (w1 + w2 + at), 1e-15);
  EXPECT_EQ(lambda, dl);
  // the iteration's fixed point is XPBD's C + alpha~ lambda = 0 (c = |p2 - p1|, lambda < 0)
  for (int it = 0; it < 200; ++it) xpbd_attach(b1, b2, r, r, alpha, h, lambda);
  double c = norm((b2.x + to_mat(b2.q) * r) - (b1.x + to_mat(b1.q) * r));
  EXPECT_GT(c, 0.1);
  EXPECT_LT(std::abs(c + at * lambda), 1e-10) << "c " << c << " lambda " << lambda;
}

TEST(XpbdProjection, GeneralizedInverseMassIsTheImpulseResponse) {
  // a unit impulse n at lever arm r changes the point's velocity along n by w:
  // n . (inv_mass n + (I^-1 (r x n)) x r) = w
  std::mt19937 rng(800);
  for (int t = 0; t < 10; ++t) {
    Body b = rand_body(rng);
    V3 r = rand3(rng), n = unit(rand3(rng));
    Mat3<double> I = world_matrix(b.q, b.inv_inertia);
    V3 dv = b.inv_mass * n + cross(I * cross(r, n), r);
    EXPECT_NEAR(xpbd_generalized_inverse_mass(b, r, n), dot(n, dv), 1e-14);
    EXPECT_NEAR(xpbd_generalized_inverse_mass_angular(b, n), dot(n, I * n), 1e-14);
  }
}

// A chain of nlink links (1 kg, principal moments 1/8, 1/4, 1/4 kg m^2, 0.4 m between joints)
// hanging from a static base by hinges with alternating z and y axes, perturbed by 5 cm and
// 0.1 rad; Gauss-Seidel sweeps of the attachment and the axis alignment of every joint
// (alpha = 0). Plain sweeps converge linearly: 30 of them take the residuals down by two to four
// orders of magnitude here (not to the seed paper's 1e-7), 400 to 1e-9 and below.
TEST(XpbdProjection, HingeChainConverges) {
  const double l = 0.4;
  for (int nlink = 3; nlink <= 7; ++nlink) {
    std::mt19937 rng(900 + nlink);
    std::vector<Body> b(nlink + 1);
    b[0].inv_mass = 0;  // the base
    for (int j = 1; j <= nlink; ++j) {
      b[j].inv_mass = 1;
      b[j].inv_inertia = {8, 4, 4};
      b[j].x = V3{(j - 0.5) * l, 0, 0} + rand3(rng, 0.05);
      b[j].q = xpbd_rotate(Q{}, rand3(rng, 0.1));
    }
    auto parent_point = [&](int j) { return j == 1 ? V3{} : V3{l / 2, 0, 0}; };
    const V3 child_point{-l / 2, 0, 0};
    auto axis = [](int j) { return j % 2 ? V3{0, 0, 1} : V3{0, 1, 0}; };
    auto residuals = [&](double& pos, double& ang) {
      pos = ang = 0;
      for (int j = 1; j <= nlink; ++j) {
        V3 gap = (b[j].x + to_mat(b[j].q) * child_point) -
                 (b[j - 1].x + to_mat(b[j - 1].q) * parent_point(j));
        pos = std::max(pos, norm(gap));
        ang = std::max(ang, norm(cross(to_mat(b[j - 1].q) * axis(j), to_mat(b[j].q) * axis(j))));
      }
    };
    double pos0, ang0, pos30, ang30, pos, ang;
    residuals(pos0, ang0);
    std::vector<double> lam_pos(nlink + 1, 0.0), lam_ang(nlink + 1, 0.0);
    for (int it = 0; it < 400; ++it) {
      for (int j = 1; j <= nlink; ++j) {
        xpbd_attach(b[j - 1], b[j], parent_point(j), child_point, 0.0, 0.01, lam_pos[j]);
        xpbd_hinge_align(b[j - 1], b[j], axis(j), axis(j), 0.0, 0.01, lam_ang[j]);
      }
      if (it == 29) residuals(pos30, ang30);
    }
    residuals(pos, ang);
    std::printf(
        "  chain of %d: positional residual %.2e, after 30 sweeps %.2e, after 400 %.2e;"
        " axis %.2e, %.2e, %.2e\n",
        nlink, pos0, pos30, pos, ang0, ang30, ang);
    EXPECT_LT(pos30, 1e-2 * pos0);
    EXPECT_LT(ang30, 1e-2 * ang0);
    EXPECT_LT(pos, 1e-9);
    EXPECT_LT(ang, 1e-9);
  }
}

TEST(XpbdProjection, CableIsSlackOrRestoresItsLength) {
  std::mt19937 rng(1000);
  Body b1 = rand_body(rng), b2 = rand_body(rng);
  V3 r1 = rand3(rng, 0.3), r2 = rand3(rng, 0.3);
  auto length = [&](const Body& c1, const Body& c2) {
    return norm((c2.x + to_mat(c2.q) * r2) - (c1.x + to_mat(c1.q) * r1));
  };
  double len = length(b1, b2);
  // slack: nothing moves, lambda stays
  Body c1 = b1, c2 = b2;
  double lambda = -0.25;
  EXPECT_EQ(xpbd_distance(c1, c2, r1, r2, 1.2 * len, true, 0.0, 0.01, lambda), 0.0);
  EXPECT_EQ(lambda, -0.25);
  EXPECT_EQ(norm(c1.x - b1.x) + norm(c2.x - b2.x), 0.0);
  EXPECT_EQ(qdist(c1.q, b1.q) + qdist(c2.q, b2.q), 0.0);
  // stretched by 1e-3: one rigid step leaves O(1e-6), a few more the rest length to rounding
  double rest = len - 1e-3;
  lambda = 0;
  EXPECT_LT(xpbd_distance(c1, c2, r1, r2, rest, true, 0.0, 0.01, lambda), 0.0);
  EXPECT_LT(std::abs(length(c1, c2) - rest), 20 * 1e-6);
  // a step that lands slack by its second-order remainder leaves the cable alone after that
  for (int it = 0; it < 5; ++it) xpbd_distance(c1, c2, r1, r2, rest, true, 0.0, 0.01, lambda);
  EXPECT_LT(length(c1, c2) - rest, 1e-13);
  EXPECT_GT(length(c1, c2) - rest, -20 * 1e-6);
  // a rigid rod (not pull-only) also pushes a compressed pair apart
  c1 = b1;
  c2 = b2;
  lambda = 0;
  for (int it = 0; it < 6; ++it)
    xpbd_distance(c1, c2, r1, r2, len + 1e-3, false, 0.0, 0.01, lambda);
  EXPECT_LT(std::abs(length(c1, c2) - (len + 1e-3)), 1e-13);
}

// ---- paths (xpbd_path) -----------------------------------------------------------------------

// a path through points on three bodies, body 0 at both ends and body 1 twice (not adjacent)
constexpr int kPathN = 5;
constexpr int kPathBody[kPathN] = {0, 1, 2, 1, 0};
struct TestPath {
  const V3* r;
  int n = kPathN;
  int size() const { return n; }
  int body(int i) const { return kPathBody[i]; }
  V3 point(int i) const { return r[i]; }
};
struct PathIn {
  Body b[3];
  V3 r[kPathN];
  double lambda;
  auto fields() { return std::tie(b[0], b[1], b[2], r[0], r[1], r[2], r[3], r[4], lambda); }
};
struct PathOut {
  Body b[3];
  double lambda;
  auto fields() { return std::tie(b[0], b[1], b[2], lambda); }
};
double path_length(const Body* b, const TestPath& p) {
  double len = 0;
  for (int i = 0; i + 1 < p.size(); ++i)
    len += norm((b[p.body(i + 1)].x + to_mat(b[p.body(i + 1)].q) * p.point(i + 1)) -
                (b[p.body(i)].x + to_mat(b[p.body(i)].q) * p.point(i)));
  return len;
}

TEST(XpbdGradcheck, Path) {
  for (int seed = 0; seed < 4; ++seed) {
    std::mt19937 rng(450 + seed);
    PathIn x0{{rand_body(rng), rand_body(rng), rand_body(rng)}, {}, uniform(rng, -0.3, 0)};
    for (V3& r : x0.r) r = rand3(rng, 0.5);
    const double len = path_length(x0.b, TestPath{x0.r});
    // stretched beyond hi (it pulls) and, from seed 2, shorter than lo (it pushes)
    const double lo = seed < 2 ? 0.0 : 1.2 * len, hi = seed < 2 ? 0.8 * len : 2 * len;
    check(
        seed < 2 ? "xpbd_path pulls" : "xpbd_path pushes", x0,
        [&](PathIn i) {
          xpbd_path(i.b, TestPath{i.r}, lo, hi, i.lambda);
          return PathOut{{i.b[0], i.b[1], i.b[2]}, i.lambda};
        },
        [&](const PathIn& i, PathIn& a, const PathOut& w) {
          Body adj[3] = {w.b[0], w.b[1], w.b[2]};
          V3 adj_r[kPathN];
          adj_xpbd_path(i.b, TestPath{i.r}, lo, hi, w.lambda, adj, adj_r);
          for (int k = 0; k < 3; ++k) xpbd_impl::add_to(a.b[k], adj[k]);
          for (int k = 0; k < kPathN; ++k) a.r[k] += adj_r[k];
          a.lambda += w.lambda;
        },
        rng);
  }
}

TEST(XpbdProjection, PathOfTwoPointsIsTheDistance) {
  std::mt19937 rng(470);
  Body b[2] = {rand_body(rng), rand_body(rng)};
  V3 r[2] = {rand3(rng, 0.3), rand3(rng, 0.3)};
  struct Two {
    const V3* r;
    int size() const { return 2; }
    int body(int i) const { return i; }
    V3 point(int i) const { return r[i]; }
  };
  const double len = norm((b[1].x + to_mat(b[1].q) * r[1]) - (b[0].x + to_mat(b[0].q) * r[0]));
  for (double bound : {0.7 * len, 1.4 * len}) {  // pulled, then pushed
    Body p[2] = {b[0], b[1]}, d1 = b[0], d2 = b[1];
    double lp = 0.1, ld = 0.1;
    const double dl = bound < len ? xpbd_path(p, Two{r}, 0.0, bound, lp)
                                  : xpbd_path(p, Two{r}, bound, 10 * len, lp);
    // the same bodies; the multipliers' signs differ when pushed: the path's is that of the
    // length's excess, xpbd_distance's of the correction along its error
    const double sign = bound < len ? 1 : -1;
    EXPECT_NEAR(dl, sign * xpbd_distance(d1, d2, r[0], r[1], bound, false, 0.0, 0.01, ld), 1e-15);
    EXPECT_NEAR(lp - 0.1, sign * (ld - 0.1), 1e-15);
    EXPECT_LT(norm(p[0].x - d1.x) + norm(p[1].x - d2.x), 1e-15);
    EXPECT_LT(qdist(p[0].q, d1.q) + qdist(p[1].q, d2.q), 1e-15);
  }
}

TEST(XpbdProjection, PathClosesItsLengthAndKeepsMomentum) {
  std::mt19937 rng(480);
  Body b[3] = {rand_body(rng), rand_body(rng), rand_body(rng)};
  V3 r[kPathN];
  for (V3& p : r) p = rand3(rng, 0.5);
  const TestPath path{r};
  const double len = path_length(b, path), hi = len - 1e-3;
  Body c[3] = {b[0], b[1], b[2]};
  double lambda = 0;
  const double dl = xpbd_path(c, path, 0.0, hi, lambda);
  EXPECT_LT(dl, 0.0);                                         // stretched: dlambda < 0
  EXPECT_LT(std::abs(path_length(c, path) - hi), 20 * 1e-6);  // one Newton step: O(1e-6) left
  // the impulses sum to zero, and so do their moments about the origin: linear momentum
  // sum m dx and angular momentum sum x' x m dx + I dphi (dphi the turn, I its world inertia)
  V3 p, l;
  for (int k = 0; k < 3; ++k) {
    const V3 dx = c[k].x - b[k].x, phi = rotation_applied(b[k].q, c[k].q);
    const Mat3<double> I = world_matrix(
        b[k].q, {1 / b[k].inv_inertia.x, 1 / b[k].inv_inertia.y, 1 / b[k].inv_inertia.z});
    p += (1 / b[k].inv_mass) * dx;
    l += cross(b[k].x, (1 / b[k].inv_mass) * dx) + I * phi;
  }
  EXPECT_LT(norm(p), 1e-15);
  EXPECT_LT(norm(l), 1e-14);
  for (int it = 0; it < 4; ++it) xpbd_path(c, path, 0.0, hi, lambda);
  EXPECT_LT(std::abs(path_length(c, path) - hi), 1e-13);
  // within the bounds, or every point on one body: nothing moves
  Body d[3] = {b[0], b[1], b[2]};
  EXPECT_EQ(xpbd_path(d, path, 0.5 * len, 2 * len, lambda), 0.0);
  struct OneBody {
    const V3* r;
    int size() const { return kPathN; }
    int body(int) const { return 1; }
    V3 point(int i) const { return r[i]; }
  };
  EXPECT_EQ(xpbd_path(d, OneBody{r}, 0.0, 1e-3, lambda), 0.0);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(norm(d[k].x - b[k].x) + qdist(d[k].q, b[k].q), 0.0);
}

TEST(XpbdProjection, AxisAlignmentBeyondNinetyDegrees) {
  std::mt19937 rng(1100);
  V3 a = unit(rand3(rng)), p = unit(cross(a, rand3(rng)));
  auto at_angle = [&](double th) { return xpbd_axis_alignment(a, to_mat(axis_angle(p, th)) * a); };
  // continuous through 90 degrees, magnitude sin(theta) before and 2 - sin(theta) after, always
  // along p
  EXPECT_LT(norm(at_angle(M_PI / 2 - 1e-9) - at_angle(M_PI / 2 + 1e-9)), 1e-8);
  for (double th : {0.3, 1.2, 2.0, 2.9, M_PI - 1e-3}) {
    V3 c = at_angle(th);
    EXPECT_NEAR(norm(c), th < M_PI / 2 ? std::sin(th) : 2 - std::sin(th), 1e-12);
    EXPECT_NEAR(dot(c, p), norm(c), 1e-12);
  }
  // opposite axes: a half-turn's worth, perpendicular to a
  V3 c = xpbd_axis_alignment(a, -1.0 * a);
  EXPECT_NEAR(norm(c), 2, 1e-15);
  EXPECT_NEAR(dot(c, a), 0, 1e-15);
  // from opposite axes the hinge alignment converges (body 1 static)
  Body s, b = rand_body(rng);
  V3 a2 = mul_transpose(to_mat(b.q), -1.0 * a);
  double lambda = 0;
  for (int it = 0; it < 20; ++it) xpbd_hinge_align(s, b, a, a2, 0.0, 0.01, lambda);
  EXPECT_LT(norm(cross(a, to_mat(b.q) * a2)), 1e-12);
  EXPECT_GT(dot(a, to_mat(b.q) * a2), 0.0);
}

TEST(XpbdProjection, WeldAndHingeLimit) {
  std::mt19937 rng(1200);
  Body s;  // static, at the identity
  Body b = rand_body(rng);
  // weld: frames 0.2 rad apart; one step leaves O(0.2^2), a few the frames aligned
  Q f1 = rand_quat(rng);
  Q f2 = conjugate(b.q) * xpbd_rotate(f1, rand3(rng, 0.1));
  double e0 = norm(xpbd_orientation_difference(s.q * f1, b.q * f2)), lambda = 0;
  xpbd_weld_orientation(s, b, f1, f2, 0.0, 0.01, lambda);
  double e1 = norm(xpbd_orientation_difference(s.q * f1, b.q * f2));
  EXPECT_LT(e1, 2 * e0 * e0);
  for (int it = 0; it < 10; ++it) xpbd_weld_orientation(s, b, f1, f2, 0.0, 0.01, lambda);
  EXPECT_LT(norm(xpbd_orientation_difference(s.q * f1, b.q * f2)), 1e-13);

  // hinge limit about body 1's z, references x (body 1) and body 2's x, limits [-0.5, 0.7]
  V3 z{0, 0, 1}, x{1, 0, 0};
  Body c;
  c.inv_mass = 1;
  c.inv_inertia = {1.5, 0.7, 2.0};
  for (double angle : {0.3, 0.9, -0.8}) {
    c.q = axis_angle(z, angle);
    Body d = c;
    lambda = 0;
    double dl = xpbd_hinge_limit(s, d, z, x, x, -0.5, 0.7, 0.0, 0.01, lambda);
    double phi = xpbd_hinge_angle(z, x, to_mat(d.q) * x);
    if (angle > -0.5 && angle < 0.7) {
      // inside the range: nothing happens
      EXPECT_EQ(dl, 0.0);
      EXPECT_EQ(qdist(d.q, c.q), 0.0);
    } else {
      // one step turns the excess e about z by 2 atan(e / 2): the limit to O(e^3 / 12)
      double bound = angle > 0 ? 0.7 : -0.5, e = angle - bound;
      EXPECT_LT(std::abs(phi - bound), std::abs(e * e * e) / 12 * 1.01 + 1e-15);
      for (int it = 0; it < 5; ++it) xpbd_hinge_limit(s, d, z, x, x, -0.5, 0.7, 0.0, 0.01, lambda);
      EXPECT_NEAR(xpbd_hinge_angle(z, x, to_mat(d.q) * x), bound, 1e-14);
    }
  }
}

TEST(XpbdProjection, SlideAndBallLimit) {
  std::mt19937 rng(1210);
  Body s;  // static, at the identity
  Body c = rand_body(rng);
  // slide along the static body's z from its anchor 0 to the child's r2, limits [-0.4, 0.3]
  const V3 z{0, 0, 1}, r1{}, r2 = rand3(rng, 0.2);
  auto along = [&](const Body& d) { return dot(d.x + to_mat(d.q) * r2, z); };
  for (double target : {0.1, 0.5, -0.9}) {
    Body d = c;
    d.x += (target - along(c)) * z;
    double lambda = 0;
    const double dl = xpbd_slide_limit(s, d, r1, r2, z, -0.4, 0.3, 0.0, 0.01, lambda);
    if (target == 0.1) {  // inside: nothing happens
      EXPECT_EQ(dl, 0.0);
      EXPECT_EQ(norm(d.x - (c.x + (target - along(c)) * z)), 0.0);
      continue;
    }
    // the anchor goes back to the bound, up to the second-order part of the lever arm's turn,
    // which may leave it just inside (the limit then rests); the offset across the axis is not
    // the limit's to change
    const double bound = target > 0 ? 0.3 : -0.4, e = std::abs(target - bound);
    const V3 p0 = d.x + to_mat(d.q) * r2;
    for (int it = 0; it < 6; ++it) xpbd_slide_limit(s, d, r1, r2, z, -0.4, 0.3, 0.0, 0.01, lambda);
    EXPECT_GE(along(d), -0.4 - 1e-13) << target;
    EXPECT_LE(along(d), 0.3 + 1e-13) << target;
    EXPECT_LT(std::abs(along(d) - bound), 0.01 * e) << target;
    EXPECT_LT(lambda, 0.0) << target;
    const V3 p = d.x + to_mat(d.q) * r2;
    EXPECT_LT(std::abs(p.x - p0.x) + std::abs(p.y - p0.y), 0.2 * e);
  }

  // ball: the child's frame f2 turned from the static body's f1 by `angle` about a fixed axis u,
  // the cone's half angle 0.6
  const Q f1 = rand_quat(rng), f2 = rand_quat(rng);
  const V3 u = unit(rand3(rng));
  for (double angle : {0.4, 1.0, 2.9}) {
    Body d = c;
    d.q = axis_angle(u, angle) * f1 * conjugate(f2);  // d.q f2 = R(u, angle) f1
    const Q q0 = d.q;
    double lambda = 0;
    const double dl = xpbd_ball_limit(s, d, f1, f2, 0.6, 0.0, 0.01, lambda);
    if (angle < 0.6) {
      EXPECT_EQ(dl, 0.0);
      EXPECT_EQ(qdist(d.q, q0), 0.0);
      continue;
    }
    for (int it = 0; it < 8; ++it) xpbd_ball_limit(s, d, f1, f2, 0.6, 0.0, 0.01, lambda);
    // back on the cone: (d.q f2) conj(f1) turns by 0.6 (about an axis that the inverse inertia,
    // anisotropic, has moved off u)
    const Q dq = d.q * f2 * conjugate(f1);
    const double turn = 2 * std::atan2(norm(V3{dq.x, dq.y, dq.z}), std::abs(dq.w));
    EXPECT_NEAR(turn, 0.6, 1e-13) << angle;
    EXPECT_LT(lambda, 0.0) << angle;
  }
}

// ---- prediction and velocities ---------------------------------------------------------------

TEST(XpbdPredict, FreeFallIsTheSemiImplicitEulerSum) {
  // v_k = v0 + k h g, x_N = x0 + h sum_k v_k = x0 + v0 t + g t (t + h) / 2 with t = N h: the
  // continuous x0 + v0 t + g t^2 / 2 plus g t h / 2, first order in h
  std::mt19937 rng(1300);
  Body b = rand_body(rng);
  Q q0 = b.q;
  V3 x0 = b.x, v0 = rand3(rng), v = v0, omega, g{0, 0, -9.81};
  const double h = 0.01;
  const int N = 100;
  for (int k = 0; k < N; ++k) xpbd_predict(b, v, omega, V3{}, V3{}, g, h);
  double t = N * h;
  V3 discrete = x0 + t * v0 + (t * (t + h) / 2) * g;
  V3 continuous = x0 + t * v0 + (t * t / 2) * g;
  EXPECT_LT(norm(b.x - discrete), 1e-12);
  EXPECT_NEAR(norm(b.x - continuous), 9.81 * t * h / 2, 1e-12);
  EXPECT_LT(norm(v - (v0 + t * g)), 1e-12);
  EXPECT_EQ(norm(omega), 0.0);
  EXPECT_LT(qdist(b.q, q0), 1e-15);
  // a static body does not fall
  Body s = b;
  s.inv_mass = 0;
  V3 vs = v0, ws = rand3(rng);
  Body s0 = s;
  xpbd_predict(s, vs, ws, rand3(rng), rand3(rng), g, h);
  EXPECT_EQ(norm(s.x - s0.x) + qdist(s.q, s0.q) + norm(vs - v0), 0.0);
}

TEST(XpbdPredict, TorqueFreeBodyKeepsItsAngularMomentum) {
  // Explicit Euler on Euler's equations: L_b' = L_b - h w_b x L_b, so
  // |L'|^2 = |L|^2 + h^2 |w_b x L_b|^2 (the rotation about omega leaves R^T omega alone): |L|
  // grows, by at most a factor exp(h T w_max^2 / 2) over a time T, w_max <= |L| max(inv_inertia)
  std::mt19937 rng(1400);
  Body b0;
  b0.inv_mass = 1;
  b0.inv_inertia = {1.0, 0.5, 0.25};  // I = 1, 2, 4 kg m^2
  b0.q = rand_quat(rng);
  V3 omega0 = to_mat(b0.q) * V3{0.3, 1.0, 0.2};  // close to the middle axis: it tumbles
  auto momentum = [](const Body& b, const V3& omega) {
    V3 inertia{1 / b.inv_inertia.x, 1 / b.inv_inertia.y, 1 / b.inv_inertia.z};
    return world_matrix(b.q, inertia) * omega;
  };
  const double T = 4;
  double L0 = norm(momentum(b0, omega0)), drift[2];
  for (int k = 0; k < 2; ++k) {
    double h = k == 0 ? 1e-3 : 5e-4;
    Body b = b0;
    V3 v, omega = omega0;
    for (int i = 0; i < int(T / h + 0.5); ++i) xpbd_predict(b, v, omega, V3{}, V3{}, V3{}, h);
    drift[k] = norm(momentum(b, omega)) / L0 - 1;
    double wmax = 1.01 * L0 * 1.0;
    std::printf("  h %.0e: |L| relative drift %.3e over %.0f s, bound h T w_max^2 / 2 = %.3e\n", h,
                drift[k], T, h * T * wmax * wmax / 2);
    EXPECT_GT(drift[k], -1e-12);
    EXPECT_LT(drift[k], h * T * wmax * wmax / 2);
  }
  // first order: halving h halves the drift
  EXPECT_NEAR(drift[1] / drift[0], 0.5, 0.05);
}

TEST(XpbdVelocities, RecoverThePredictedVelocities) {
  // after a free step, v is recovered to rounding; omega to the known first-order factor:
  // dq = normalize((1, h omega / 2)), so 2 dq.xyz / h = omega / sqrt(1 + h^2 |omega|^2 / 4)
  for (int seed = 0; seed < 10; ++seed) {
    std::mt19937 rng(1500 + seed);
    Body b = rand_body(rng);
    V3 v = rand3(rng), omega = rand3(rng, 3);
    const double h = 0.01;
    Body prev = b;
    xpbd_predict(b, v, omega, rand3(rng), rand3(rng), V3{0, 0, -9.81}, h);
    V3 vr, wr;
    xpbd_velocities(b.x, b.q, prev.x, prev.q, h, vr, wr);
    EXPECT_LT(norm(vr - v), 1e-12);
    V3 expect = (1 / std::sqrt(1 + h * h * dot(omega, omega) / 4)) * omega;
    EXPECT_LT(norm(wr - expect), 1e-12);
    EXPECT_LT(norm(wr - omega), h * h * std::pow(norm(omega), 3) / 8 * 1.01);
    // the previous orientation's sign does not matter
    V3 vr2, wr2;
    xpbd_velocities(b.x, b.q, prev.x, Q{-prev.q.w, -prev.q.x, -prev.q.y, -prev.q.z}, h, vr2, wr2);
    EXPECT_LT(norm(wr2 - wr), 1e-14);
  }
}

// ---- composite joints (xpbd_composite.h) ---------------------------------------------------

// The humanoid's composite joints (MuJoCo's humanoid.xml): the hip's three hinges at one
// anchor, the shoulder's two at one anchor, the ankle's two at two anchors, and a skewed triple.
std::vector<XpbdComposite<double>> composites() {
  auto unit = [](Vec3<double> v) { return (1.0 / norm(v)) * v; };
  std::vector<XpbdComposite<double>> out(4);
  out[0].k = 3;
  out[0].axis[0] = {1, 0, 0}, out[0].axis[1] = {0, 0, 1}, out[0].axis[2] = {0, 1, 0};
  out[1].k = 2;
  out[1].axis[0] = unit({0.82, 0.41, 0.41}), out[1].axis[1] = unit({0, -0.71, 0.71});
  out[2].k = 2;
  out[2].axis[0] = {0, 1, 0}, out[2].axis[1] = unit({0.89, 0, 0.45});
  out[2].anchor[0] = {0, 0, 0.08}, out[2].anchor[1] = {0, 0, 0.04};
  out[3].k = 3;
  out[3].axis[0] = unit({1, 0.2, -0.1}), out[3].axis[1] = unit({0.3, 0.1, 1}),
  out[3].axis[2] = unit({-0.2, 1, 0.4});
  out[3].anchor[0] = {0.01, 0, 0}, out[3].anchor[1] = {0, 0.02, 0}, out[3].anchor[2] = {0, 0, 0.03};
  return out;
}

// MuJoCo's composition (mj_kinematics): each hinge turns the frame about its anchor, in order;
// the frame's pose, and p's place in the joint frame
Vec3<double> composed_point(const XpbdComposite<double>& C, const double* theta,
                            const Vec3<double>& p, Quat<double>& frame) {
  Vec3<double> pos;
  frame = Quat<double>{};
  for (int i = 0; i < C.k; ++i) {
    Vec3<double> anchor = pos + to_mat(frame) * C.anchor[i];
    frame = frame * axis_angle(C.axis[i], theta[i]);
    pos = anchor - to_mat(frame) * C.anchor[i];
  }
  return pos + to_mat(frame) * p;
}

// The angles of a composed rotation come back (the principal branch: |theta2| < pi / 2 for three
// hinges), the composed point matches MuJoCo's composition, and the torque does the hinges'
// work: t . omega = f . dtheta for the angular velocity omega of a change dtheta.
TEST(XpbdComposite, AnglesPointsAndTorquesAgreeWithTheComposition) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> angle(-1.4, 1.4), u(-1, 1);
  double worst_angle = 0, worst_point = 0, worst_work = 0, worst_rate = 0;
  for (const XpbdComposite<double>& C : composites()) {
    for (int trial = 0; trial < 50; ++trial) {
      double theta[3], back[3], f[3], dtheta[3];
      for (int i = 0; i < 3; ++i) theta[i] = angle(rng), f[i] = u(rng), dtheta[i] = u(rng);
      Quat<double> frame;
      const Vec3<double> p{u(rng), u(rng), u(rng)};
      const Vec3<double> y = composed_point(C, theta, p, frame);
      xpbd_composite_angles(C, xpbd_composite_rotation(C, theta, C.k), back);
      for (int i = 0; i < C.k; ++i) worst_angle = std::max(worst_angle, std::abs(back[i] - theta[i]));
      worst_point = std::max(worst_point, norm(xpbd_composite_point(C, theta, p) - y));
      // omega from the rotation's central difference along dtheta
      const double eps = 1e-6;
      double tp[3], tm[3];
      for (int i = 0; i < 3; ++i) tp[i] = theta[i] + eps * dtheta[i], tm[i] = theta[i] - eps * dtheta[i];
      Quat<double> dq = xpbd_composite_rotation(C, tp, C.k) *
                        conjugate(xpbd_composite_rotation(C, tm, C.k));
      const Vec3<double> omega = (1.0 / eps) * Vec3<double>{dq.x, dq.y, dq.z};
      double work = 0, rate[3];
      for (int i = 0; i < C.k; ++i) work += f[i] * dtheta[i];
      xpbd_composite_rates(C, theta, omega, rate);
      for (int i = 0; i < C.k; ++i)
        worst_rate = std::max(worst_rate, std::abs(rate[i] - dtheta[i]));
      worst_work = std::max(worst_work, std::abs(dot(xpbd_composite_torque(C, theta, f), omega) - work));
    }
  }
  std::printf("angles %.2e, points %.2e, work %.2e, rates %.2e\n", worst_angle, worst_point,
              worst_work, worst_rate);
  EXPECT_LT(worst_rate, 1e-8);
  EXPECT_LT(worst_angle, 1e-12);
  EXPECT_LT(worst_point, 1e-14);
  EXPECT_LT(worst_work, 1e-8);
}

}  // namespace
}  // namespace phx
