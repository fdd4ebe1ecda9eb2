// Height-field narrowphase (collision/hfield.h): contacts on a flat field against the analytic
// depth, the cap of kMaxPairContacts with the overflow count, and the adjoint against central
// differences in double for a sphere, a box and a box-shaped mesh on a bumpy field.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "phalanx/collision/narrowphase.h"
#include "phalanx/math/quat.h"
#include "tests/cpp/hull_builder.h"

namespace phx {
namespace {

using test_hulls::box_hull;
using test_hulls::HullData;
using test_hulls::random_seeds;
using test_hulls::weigh;

using Contacts = std::vector<ContactPoint<double>>;

// a height field's data and its GeomShape
struct Field {
  int nrow, ncol;
  std::array<double, 4> size;
  std::vector<double> data;
  GeomShape<double> shape() const {
    GeomShape<double> s;
    s.type = kGeomHField;
    s.size = size.data();
    s.hfield = {nrow, ncol, size.data(), data.data()};
    return s;
  }
};

Field flat(int nrow, int ncol, double level) {
  return {nrow, ncol, {1.0, 0.8, 0.3, 0.1}, std::vector<double>(size_t(nrow) * ncol, level)};
}

// smooth bumps: no two neighbouring prisms share a top plane
Field bumpy() {
  Field f = flat(6, 7, 0);
  for (int r = 0; r < f.nrow; ++r)
    for (int c = 0; c < f.ncol; ++c)
      f.data[r * f.ncol + c] = 0.5 + 0.3 * std::sin(1.3 * c + 0.4) * std::cos(0.9 * r - 0.2);
  return f;
}

Contacts collide_field(const Field& f, const GeomFrame<double>& g1, const GeomShape<double>& s2,
                       const GeomFrame<double>& g2, int* dropped = nullptr) {
  ContactPoint<double> out[kMaxPairContacts];
  int n = collide(f.shape(), g1, s2, g2, 0.0, CcdSettings<double>{}, out, dropped);
  return Contacts(out, out + n);
}

GeomFrame<double> at(Vec3<double> pos, Quat<double> q = {}) {
  return {pos, to_mat(q)};
}

TEST(HField, SphereOnAFlatFieldTouchesAtTheAnalyticDepth) {
  // the field at height 0.5 * 0.3 = 0.15 in its frame, which is turned and moved
  Field f = flat(5, 5, 0.5);
  Quat<double> q = axis_angle((1 / std::sqrt(5.25)) * Vec3<double>{1, 2, 0.5}, 0.7);
  GeomFrame<double> g1 = at({0.3, -0.2, 1.0}, q);
  double radius = 0.12, height = 0.25;  // centre above the field's base plane z = 0
  const double size[3] = {radius, 0, 0};  // geom_size: 3 per geom
  GeomShape<double> sphere;
  sphere.type = kGeomSphere;
  sphere.size = size;
  GeomFrame<double> g2 = at(g1.pos + g1.rot * Vec3<double>{0.13, 0.07, height});
  int dropped = 0;
  Contacts c = collide_field(f, g1, sphere, g2, &dropped);
  ASSERT_GE(c.size(), 1u);
  EXPECT_EQ(dropped, 0);
  // the prisms under the centre give the top face's normal and the analytic depth; a prism the
  // sphere only grazes from the side may give its shallower side contact (MuJoCo's prisms do
  // the same), never a deeper one
  int top = 0;
  for (const ContactPoint<double>& k : c) {
    EXPECT_GE(k.dist, height - 0.15 - radius - 1e-9);
    if (norm(k.normal - g1.rot.col(2)) < 1e-9) {
      EXPECT_NEAR(k.dist, height - 0.15 - radius, 1e-9);
      ++top;
    }
  }
  EXPECT_GE(top, 1);
  // lifted clear: nothing
  GeomFrame<double> high = at(g1.pos + g1.rot * Vec3<double>{0.13, 0.07, 0.15 + radius + 1e-3});
  EXPECT_TRUE(collide_field(f, g1, sphere, high).empty());
  // outside the field's extent: nothing
  GeomFrame<double> aside = at(g1.pos + g1.rot * Vec3<double>{1.3, 0.0, height});
  EXPECT_TRUE(collide_field(f, g1, sphere, aside).empty());
}

TEST(HField, ContactsBeyondThePairCapAreCounted) {
  // a wide box sunk into a fine flat field touches far more prisms than a pair keeps
  Field f = flat(21, 21, 0.5);
  double half[3] = {0.4, 0.3, 0.1};
  GeomShape<double> box;
  box.type = kGeomBox;
  box.size = half;
  GeomFrame<double> g1 = at({0, 0, 0});
  GeomFrame<double> g2 = at({0.01, -0.02, 0.15 + 0.1 - 0.004});
  int dropped = 0;
  Contacts c = collide_field(f, g1, box, g2, &dropped);
  ASSERT_EQ(c.size(), size_t(kMaxPairContacts));
  // the footprint covers about 0.8 x 0.6 of cells 0.1 x 0.08, two prisms each
  EXPECT_GT(dropped, 100);
  for (const ContactPoint<double>& k : c) {
    EXPECT_NEAR(k.dist, -0.004, 1e-9);
    EXPECT_NEAR(k.normal.z, 1.0, 1e-9);
  }
}

// ---- adjoint -------------------------------------------------------------------------------

using Inputs = std::array<double, 30>;

struct Case {
  int type;
  std::array<double, 3> size;
  const HullData<>* hull;
};

Contacts contacts_at(const Field& f, const Case& c, const Inputs& x) {
  GeomFrame<double> g1, g2;
  double s1[3], s2[3];
  for (int k = 0; k < 30; ++k) collision_impl::pair_input(k, g1, s1, g2, s2) = x[k];
  GeomShape<double> s;
  s.type = c.type;
  s.size = s2;
  if (c.hull) s.hull = c.hull->hull();
  return collide_field(f, g1, s, g2);
}

Inputs vjp(const Field& f, const Case& c, const Inputs& x, const Contacts& adj) {
  GeomFrame<double> g1, g2, a1{}, a2{};
  double s1[3], s2[3], as1[3] = {}, as2[3] = {};
  for (int k = 0; k < 30; ++k) collision_impl::pair_input(k, g1, s1, g2, s2) = x[k];
  GeomShape<double> s;
  s.type = c.type;
  s.size = s2;
  if (c.hull) s.hull = c.hull->hull();
  adj_collide(f.shape(), g1, s, g2, 0.0, CcdSettings<double>{}, int(adj.size()), adj.data(), a1,
              as1, a2, as2);
  Inputs r;
  for (int k = 0; k < 30; ++k) r[k] = collision_impl::pair_input(k, a1, as1, a2, as2);
  return r;
}

// random poses of the geom just into the bumpy field, away from changes of the contact count
void check_adjoint(const Case& c, unsigned seed) {
  Field f = bumpy();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  int checked = 0;
  for (int attempt = 0; attempt < 5000 && checked < 3; ++attempt) {
    Quat<double> q1 = axis_angle((1 / std::sqrt(1.13)) * Vec3<double>{0.3, -0.2, 1}, 0.4);
    Vec3<double> axis{u(rng), u(rng), u(rng)};
    Quat<double> q2 = axis_angle((1 / norm(axis)) * axis, 3.0 * u(rng));
    GeomFrame<double> g1 = at({0.1, 0.2, -0.1}, q1);
    double x = 0.6 * u(rng), y = 0.5 * u(rng);
    GeomFrame<double> g2 = at(g1.pos + g1.rot * Vec3<double>{x, y, 0.2 + 0.08 * u(rng)}, q2);
    double s1[3] = {0, 0, 0}, s2[3];
    for (int i = 0; i < 3; ++i) s2[i] = c.size[i];
    Inputs in;
    for (int k = 0; k < 30; ++k) in[k] = collision_impl::pair_input(k, g1, s1, g2, s2);
    Contacts y0 = contacts_at(f, c, in);
    if (y0.empty()) continue;
    Inputs d;
    for (double& z : d) z = u(rng);
    bool stable = true;
    for (double s : {1e-6, -1e-6, 1e-4, -1e-4}) {
      Inputs xs;
      for (int k = 0; k < 30; ++k) xs[k] = in[k] + s * d[k];
      stable = stable && contacts_at(f, c, xs).size() == y0.size();
    }
    if (!stable) continue;
    Contacts w = random_seeds(y0.size(), rng);
    Inputs g = vjp(f, c, in, w);
    const double h = 1e-6;
    Inputs xp, xm;
    for (int k = 0; k < 30; ++k) xp[k] = in[k] + h * d[k], xm[k] = in[k] - h * d[k];
    double fd = (weigh(contacts_at(f, c, xp), w) - weigh(contacts_at(f, c, xm), w)) / (2 * h);
    double ad = 0;
    for (int k = 0; k < 30; ++k) ad += g[k] * d[k];
    EXPECT_NEAR(ad, fd, 1e-6 * (std::abs(fd) + 1)) << y0.size() << " contacts";
    // the field's own entries (its size is data, not a parameter) get nothing
    for (int k = 12; k < 15; ++k) EXPECT_EQ(g[k], 0.0);
    ++checked;
  }
  EXPECT_EQ(checked, 3) << "too few configurations without a switch nearby";
}

TEST(HFieldAdjoint, SphereMatchesCentralDifferences) {
  for (unsigned seed : {1u, 2u, 3u}) check_adjoint({kGeomSphere, {0.15, 0, 0}, nullptr}, seed);
}

TEST(HFieldAdjoint, BoxMatchesCentralDifferences) {
  for (unsigned seed : {1u, 2u, 3u}) check_adjoint({kGeomBox, {0.12, 0.1, 0.08}, nullptr}, seed);
}

TEST(HFieldAdjoint, MeshMatchesCentralDifferences) {
  HullData<> hull = box_hull({0.12, 0.1, 0.08});
  for (unsigned seed : {1u, 2u, 3u}) check_adjoint({kGeomMesh, {0, 0, 0}, &hull}, seed);
}

}  // namespace
}  // namespace phx
