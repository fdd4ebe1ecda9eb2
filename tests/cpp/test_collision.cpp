// Narrowphase (collision/primitives.h, box.h, narrowphase.h): analytic contacts of every pair,
// each with its reference equation; finite results in degenerate configurations; and every
// pair's adjoint checked in double at random configurations away from feature switches, two
// ways: against forward-mode dual numbers running the same templated code
// (<w, J v> = <J^T w, v> to 1e-10) and against central differences (rtol 1e-6).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "phalanx/collision/narrowphase.h"
#include "phalanx/math/quat.h"

namespace phx {
namespace {

using Contacts = std::vector<ContactPoint<double>>;

struct Geom {
  int type;
  GeomFrame<double> frame;
  std::array<double, 3> size;
};

GeomFrame<double> at(Vec3<double> pos, Quat<double> q = {}) {
  return {pos, to_mat(q)};
}

Quat<double> rotation(Vec3<double> axis, double angle) {
  return axis_angle((1 / norm(axis)) * axis, angle);
}

Contacts collide_geoms(const Geom& a, const Geom& b, double margin = 0) {
  ContactPoint<double> out[kMaxPairContacts];
  int n = collide(a.type, a.frame, a.size.data(), b.type, b.frame, b.size.data(), margin, out);
  return Contacts(out, out + n);
}

// the contact nearest a point (manifold order is an implementation detail)
const ContactPoint<double>& nearest(const Contacts& c, Vec3<double> p) {
  size_t best = 0;
  for (size_t k = 1; k < c.size(); ++k)
    if (norm(c[k].pos - p) < norm(c[best].pos - p)) best = k;
  return c[best];
}

void expect_vec(Vec3<double> a, Vec3<double> b, double tol = 1e-12) {
  EXPECT_NEAR(a.x, b.x, tol);
  EXPECT_NEAR(a.y, b.y, tol);
  EXPECT_NEAR(a.z, b.z, tol);
}

const Vec3<double> kX{1, 0, 0}, kY{0, 1, 0}, kZ{0, 0, 1};

// ---- the narrowphase's pair sets -----------------------------------------------------------

// The stages of a staged detection split the pairs between them (PairSet): each pair of the
// primitive types, overlapping, gets its contacts from a function of its own or from the convex
// narrowphase as convex_pair says, the stage of its set gives them bit for bit as the whole
// narrowphase does, and the other stage none. The convex pairs are those of the ellipsoid and
// the cylinder but sphere-cylinder, which have no function of their own in MuJoCo either.
TEST(Narrowphase, StagesSplitThePairsAsConvexPairSays) {
  const int types[] = {kGeomPlane,     kGeomSphere,   kGeomCapsule,
                       kGeomEllipsoid, kGeomCylinder, kGeomBox};
  const double size[3] = {0.1, 0.08, 0.12};
  const GeomFrame<double> f1 = at({0, 0, 0}, rotation({0.2, -1, 0.4}, 0.2));
  const GeomFrame<double> f2 = at({0.02, 0.01, 0.05}, rotation({1, 2, 3}, 0.3));
  int convex = 0;
  for (int t1 : types) {
    for (int t2 : types) {
      if (t1 > t2 || !has_collision_function(t1, t2)) continue;
      SCOPED_TRACE(std::string(kGeomTypeNames[t1]) + "-" + kGeomTypeNames[t2]);
      GeomShape<double> s1, s2;
      s1.type = t1, s1.size = size, s2.type = t2, s2.size = size;
      ContactPoint<double> all[kMaxPairContacts], own[kMaxPairContacts], cvx[kMaxPairContacts];
      const CcdSettings<double> ccd{};
      const int n = collide<double, PairSet::kAll>(s1, f1, s2, f2, 0.0, ccd, all);
      const int n_own = collide<double, PairSet::kOwn>(s1, f1, s2, f2, 0.0, ccd, own);
      const int n_cvx = collide<double, PairSet::kConvex>(s1, f1, s2, f2, 0.0, ccd, cvx);
      const bool is_convex = convex_pair(t1, t2);
      EXPECT_GT(n, 0);
      EXPECT_EQ(n_own, is_convex ? 0 : n);
      EXPECT_EQ(n_cvx, is_convex ? n : 0);
      const ContactPoint<double>* staged = is_convex ? cvx : own;
      for (int i = 0; i < std::min(n, is_convex ? n_cvx : n_own); ++i) {
        for (int k = 0; k < 3; ++k) {
          EXPECT_EQ(staged[i].pos[k], all[i].pos[k]);
          EXPECT_EQ(staged[i].normal[k], all[i].normal[k]);
        }
        EXPECT_EQ(staged[i].dist, all[i].dist);
      }
      convex += is_convex;
    }
  }
  // sphere-ellipsoid, capsule-ellipsoid, capsule-cylinder, ellipsoid-ellipsoid,
  // ellipsoid-cylinder, ellipsoid-box, cylinder-cylinder, cylinder-box
  EXPECT_EQ(convex, 8);
}

// ---- analytic cases ----------------------------------------------------------------------

TEST(PlaneSphere, DistIsHeightMinusRadius) {
  // plane z = 0; sphere of radius r at height z: dist = z - r, normal +z, pos at height
  // (z - r) / 2, midway between the plane and the sphere's lowest point
  Geom plane{kGeomPlane, at({0, 0, 0}), {0, 0, 1}};
  Geom sphere{kGeomSphere, at({0.3, -0.2, 0.25}), {0.3, 0, 0}};
  Contacts c = collide_geoms(plane, sphere);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NEAR(c[0].dist, 0.25 - 0.3, 1e-15);
  expect_vec(c[0].normal, kZ);
  expect_vec(c[0].pos, {0.3, -0.2, (0.25 - 0.3) / 2});
  // tilted plane through (1, 0, 0) with normal n: dist = n . (c - p) - r
  Quat<double> q = rotation({1, 1, 0}, 0.4);
  plane.frame = at({1, 0, 0}, q);
  Vec3<double> n = to_mat(q).col(2);
  sphere.frame.pos =
      Vec3<double>{1, 0, 0} + 0.2 * n + Vec3<double>{0.1, -0.1, 0} - dot(n, {0.1, -0.1, 0}) * n;
  c = collide_geoms(plane, sphere);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NEAR(c[0].dist, -0.1, 1e-14);
  expect_vec(c[0].normal, n);
  // above the margin: nothing; inside a margin of 0.2: a contact with dist 0.1
  sphere.frame.pos = 0.4 * n + Vec3<double>{1, 0, 0};
  EXPECT_TRUE(collide_geoms(plane, sphere).empty());
  c = collide_geoms(plane, sphere, 0.2);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NEAR(c[0].dist, 0.1, 1e-14);
}

TEST(PlaneCapsule, LyingCapsuleTouchesAtBothEnds) {
  // capsule (radius r, half-length h) along x at height z: ends (+-h, 0, z), each
  // dist = z - r, pos (+-h, 0, (z - r) / 2); the +axis end first
  Geom plane{kGeomPlane, at({0, 0, 0}), {0, 0, 1}};
  Geom capsule{kGeomCapsule, at({0, 0, 0.15}, rotation(kY, M_PI / 2)), {0.2, 0.5, 0}};
  Contacts c = collide_geoms(plane, capsule);
  ASSERT_EQ(c.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    double x = k == 0 ? 0.5 : -0.5;  // capsule +z maps to world +x
    EXPECT_NEAR(c[k].dist, -0.05, 1e-15);
    expect_vec(c[k].normal, kZ);
    expect_vec(c[k].pos, {x, 0, -0.025});
  }
  // standing upright: only the lower end, dist = z - h - r
  capsule.frame = at({0, 0, 0.6}, Quat<double>{});
  c = collide_geoms(plane, capsule);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NEAR(c[0].dist, 0.6 - 0.5 - 0.2, 1e-15);
}

TEST(PlaneBox, RestingBoxGivesItsFourLowerCorners) {
  // box of half-sizes s at height s_z - p: the four lower corners, dist = -p, pos raised by p/2
  Geom plane{kGeomPlane, at({0, 0, 0}), {0, 0, 1}};
  const double p = 0.01;
  Geom box{kGeomBox, at({0.1, 0.2, 0.3 - p}), {0.5, 0.4, 0.3}};
  Contacts c = collide_geoms(plane, box);
  ASSERT_EQ(c.size(), 4u);
  for (double sx : {-1, 1})
    for (double sy : {-1, 1}) {
      const ContactPoint<double>& k = nearest(c, {0.1 + 0.5 * sx, 0.2 + 0.4 * sy, 0});
      EXPECT_NEAR(k.dist, -p, 1e-15);
      expect_vec(k.normal, kZ);
      expect_vec(k.pos, {0.1 + 0.5 * sx, 0.2 + 0.4 * sy, -p / 2});
    }
  // on one corner (diagonal vertical): a single contact, dist = z - |corner|
  Vec3<double> diag{1, 1, 1};
  Quat<double> q = rotation(cross(diag, kZ), std::acos(1 / std::sqrt(3.0)));  // diag -> +z
  box = Geom{kGeomBox, at({0, 0, 0.5}, q), {0.3, 0.3, 0.3}};
  c = collide_geoms(plane, box);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NEAR(c[0].dist, 0.5 - 0.3 * std::sqrt(3.0), 1e-14);
}

TEST(SphereSphere, NormalAlongCentresAndMidwayPoint) {
  // n = (c2 - c1) / L, dist = L - r1 - r2, pos = c1 + (r1 + dist / 2) n
  Vec3<double> c1{0.1, 0.2, 0.3}, dir{2, -1, 2};  // |dir| = 3
  Geom s1{kGeomSphere, at(c1), {0.4, 0, 0}}, s2{kGeomSphere, at(c1 + 0.2 * dir), {0.3, 0, 0}};
  Contacts c = collide_geoms(s1, s2);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NEAR(c[0].dist, 0.6 - 0.7, 1e-15);
  expect_vec(c[0].normal, (1.0 / 3) * dir);
  expect_vec(c[0].pos, c1 + (0.4 - 0.05) * ((1.0 / 3) * dir));
  s2.frame.pos = c1 + 0.3 * dir;  // L = 0.9 > 0.7
  EXPECT_TRUE(collide_geoms(s1, s2).empty());
}

TEST(SphereCapsule, SideAndEnd) {
  // capsule along z (radius 0.1, half-length 0.5); a sphere (radius 0.2) beside its middle at
  // distance 0.25 from the axis: dist = 0.25 - 0.3, normal from the sphere towards the axis
  Geom sphere{kGeomSphere, at({0.25, 0, 0.3}), {0.2, 0, 0}};
  Geom capsule{kGeomCapsule, at({0, 0, 0}), {0.1, 0.5, 0}};
  Contacts c = collide_geoms(sphere, capsule);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NEAR(c[0].dist, -0.05, 1e-15);
  expect_vec(c[0].normal, -1.0 * kX);
  expect_vec(c[0].pos, {0.25 - 0.2 + 0.025, 0, 0.3});
  // beyond the end (0, 0, 0.5): the distance to that end point
  sphere.frame.pos = {0.1, 0, 0.7};
  c = collide_geoms(sphere, capsule);
  ASSERT_EQ(c.size(), 1u);
  double L = std::hypot(0.1, 0.2);
  EXPECT_NEAR(c[0].dist, L - 0.3, 1e-15);
  expect_vec(c[0].normal, (1 / L) * Vec3<double>{-0.1, 0, -0.2});
}

TEST(SphereBox, FaceEdgeCornerAndInside) {
  Geom box{kGeomBox, at({0, 0, 0}), {0.5, 0.4, 0.3}};
  Geom sphere{kGeomSphere, at({0.1, 0.1, 0.45}), {0.2, 0, 0}};
  // over the +z face: dist = z - s_z - r, normal -z (sphere to box), pos midway
  Contacts c = collide_geoms(sphere, box);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NEAR(c[0].dist, 0.45 - 0.3 - 0.2, 1e-15);
  expect_vec(c[0].normal, -1.0 * kZ);
  expect_vec(c[0].pos, {0.1, 0.1, 0.3 - 0.025});
  // beyond the corner (s_x, s_y, s_z): distance to the corner
  Vec3<double> corner{0.5, 0.4, 0.3}, off{0.1, 0.05, 0.1};
  sphere.frame.pos = corner + off;
  c = collide_geoms(sphere, box);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NEAR(c[0].dist, norm(off) - 0.2, 1e-15);
  expect_vec(c[0].normal, (-1 / norm(off)) * off);
  // centre inside, nearest face +x at 0.05: dist = -0.05 - r, normal -x, pos midway between
  // the face and the sphere's deepest point along +x
  sphere.frame.pos = {0.45, 0, 0};
  c = collide_geoms(sphere, box);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NEAR(c[0].dist, -0.05 - 0.2, 1e-15);
  expect_vec(c[0].normal, -1.0 * kX);
  expect_vec(c[0].pos, {0.45 - (0.2 - 0.05) / 2, 0, 0});
  // a rotated box rotates the face normal
  Quat<double> q = rotation({1, 2, 3}, 0.7);
  box.frame = at({0.3, 0, 0}, q);
  sphere.frame.pos = Vec3<double>{0.3, 0, 0} + to_mat(q) * Vec3<double>{0, 0, 0.45};
  c = collide_geoms(sphere, box);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NEAR(c[0].dist, -0.05, 1e-14);
  expect_vec(c[0].normal, -1.0 * to_mat(q).col(2));
}

TEST(CapsuleCapsule, CrossingAndParallel) {
  // capsule 1 along x at the origin, capsule 2 along y at height z: nearest points are the two
  // centres, dist = z - r1 - r2, normal +z
  Geom c1{kGeomCapsule, at({0, 0, 0}, rotation(kY, M_PI / 2)), {0.1, 0.5, 0}};
  Geom c2{kGeomCapsule, at({0.2, 0.1, 0.25}, rotation(kX, M_PI / 2)), {0.2, 0.4, 0}};
  Contacts c = collide_geoms(c1, c2);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NEAR(c[0].dist, 0.25 - 0.3, 1e-15);
  expect_vec(c[0].normal, kZ);
  expect_vec(c[0].pos, {0.2, 0, 0.1 - 0.025});
  // parallel, side by side with an axial offset of 0.4: two contacts, at the ends that overlap,
  // each dist = d - r1 - r2 with d = 0.25 the axis separation
  c2.frame = at({0.4, 0, 0.25}, rotation(kY, M_PI / 2));
  c = collide_geoms(c1, c2);
  ASSERT_EQ(c.size(), 2u);
  for (double x : {0.5, 0.0}) {  // capsule 1's +x end over capsule 2, capsule 2's -x end
    const ContactPoint<double>& k = nearest(c, {x, 0, 0.075});
    EXPECT_NEAR(k.dist, -0.05, 1e-15);
    expect_vec(k.normal, kZ);
    expect_vec(k.pos, {x, 0, 0.1 - 0.025});
  }
  // parallel without overlap, end to end along x with a gap g between the segments: the
  // nearest ends, dist = g - r1 - r2, reported twice (MuJoCo 4.0 tests both overlap ends,
  // which coincide)
  c2.frame = at({0.5 + 0.25 + 0.4, 0, 0}, rotation(kY, M_PI / 2));
  c = collide_geoms(c1, c2);
  ASSERT_EQ(c.size(), 2u);
  for (const ContactPoint<double>& k : c) {
    EXPECT_NEAR(k.dist, 0.25 - 0.3, 1e-15);
    expect_vec(k.normal, kX);
    expect_vec(k.pos, {0.5 + 0.1 - 0.025, 0, 0});
  }
}

TEST(CapsuleBox, LyingOnTopGivesBothEnds) {
  // capsule along x (radius r, half-length h) resting over the box top at height z, within the
  // face: contacts under both ends, dist = z - s_z - r, normal -z, pos (+-h, y, s_z + dist / 2)
  Geom capsule{kGeomCapsule, at({0.05, 0.1, 0.38}, rotation(kY, M_PI / 2)), {0.1, 0.3, 0}};
  Geom box{kGeomBox, at({0, 0, 0}), {0.5, 0.4, 0.3}};
  Contacts c = collide_geoms(capsule, box);
  ASSERT_EQ(c.size(), 2u);
  for (double x : {0.35, -0.25}) {
    const ContactPoint<double>& k = nearest(c, {x, 0.1, 0.3});
    EXPECT_NEAR(k.dist, 0.38 - 0.3 - 0.1, 1e-15);
    expect_vec(k.normal, -1.0 * kZ);
    expect_vec(k.pos, {x, 0.1, 0.3 - 0.01});
  }
  // standing on the face: one contact under the lower end, dist = z - h - s_z - r
  capsule.frame = at({0.05, 0.1, 0.65}, Quat<double>{});
  c = collide_geoms(capsule, box);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NEAR(c[0].dist, 0.65 - 0.3 - 0.3 - 0.1, 1e-15);
}

TEST(BoxBox, FaceManifolds) {
  // a smaller box resting on a larger one, penetration p: the 4 lower corners of the top box,
  // dist = -p, normal +z (box1 to box2), pos midway: at height s1_z - p / 2
  const double p = 0.02;
  Geom b1{kGeomBox, at({0, 0, 0}), {1.0, 1.0, 0.5}};
  Geom b2{kGeomBox, at({0.1, 0.2, 0.5 + 0.3 - p}), {0.4, 0.3, 0.3}};
  Contacts c = collide_geoms(b1, b2);
  ASSERT_EQ(c.size(), 4u);
  for (double sx : {-1, 1})
    for (double sy : {-1, 1}) {
      const ContactPoint<double>& k = nearest(c, {0.1 + 0.4 * sx, 0.2 + 0.3 * sy, 0.5});
      EXPECT_NEAR(k.dist, -p, 1e-14);
      expect_vec(k.normal, kZ);
      expect_vec(k.pos, {0.1 + 0.4 * sx, 0.2 + 0.3 * sy, 0.5 - p / 2}, 1e-14);
    }
  // equal cubes, the top one turned 45 degrees about z: the overlap is a regular octagon,
  // vertices at (+-a, +-b) and (+-b, +-a) with a = s, b = s (sqrt 2 - 1)
  b1 = Geom{kGeomBox, at({0, 0, 0}), {0.5, 0.5, 0.5}};
  b2 = Geom{kGeomBox, at({0, 0, 1 - p}, rotation(kZ, M_PI / 4)), {0.5, 0.5, 0.5}};
  c = collide_geoms(b1, b2);
  ASSERT_EQ(c.size(), 8u);
  double a = 0.5, b = 0.5 * (std::sqrt(2.0) - 1);
  for (double sa : {-1, 1})
    for (double sb : {-1, 1})
      for (int swap = 0; swap < 2; ++swap) {
        Vec3<double> v = swap ? Vec3<double>{sb * b, sa * a, 0.5 - p / 2}
                              : Vec3<double>{sa * a, sb * b, 0.5 - p / 2};
        const ContactPoint<double>& k = nearest(c, v);
        EXPECT_NEAR(k.dist, -p, 1e-14);
        expect_vec(k.pos, v, 1e-14);
        expect_vec(k.normal, kZ);
      }
}

TEST(BoxBox, CrossedEdgesGiveOneEdgeContact) {
  // cube 1 turned 45 degrees about x has a top edge along x at height s sqrt 2; cube 2 turned
  // 45 degrees about y, centred at (x, y, z), has a bottom edge along y through x at height
  // z - s sqrt 2. The edges cross at (x, 0): one contact at the midpoint of their nearest
  // points, normal +z (e_x x e_y), dist = z - 2 s sqrt 2
  const double s = 0.5, z = 2 * s * std::sqrt(2.0) - 0.03;
  Geom b1{kGeomBox, at({0, 0, 0}, rotation(kX, M_PI / 4)), {s, s, s}};
  Geom b2{kGeomBox, at({0.05, -0.1, z}, rotation(kY, M_PI / 4)), {s, s, s}};
  Contacts c = collide_geoms(b1, b2);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NEAR(c[0].dist, -0.03, 1e-14);
  expect_vec(c[0].normal, kZ, 1e-14);
  expect_vec(c[0].pos, {0.05, 0, s * std::sqrt(2.0) - 0.015}, 1e-14);
}

TEST(Narrowphase, UnsupportedAndMisorderedPairsGiveNothing) {
  Geom plane{kGeomPlane, at({0, 0, 0}), {0, 0, 1}};
  Geom sphere{kGeomSphere, at({0, 0, 0}), {0.5, 0, 0}};
  Geom mesh{kGeomMesh, at({0, 0, 0}), {0.5, 0.5, 0.5}};
  EXPECT_TRUE(collide_geoms(plane, plane).empty());
  EXPECT_TRUE(collide_geoms(sphere, plane).empty());  // type1 > type2
  EXPECT_TRUE(collide_geoms(sphere, mesh).empty());
  EXPECT_EQ(collide_geoms(plane, sphere).size(), 1u);
}

TEST(Narrowphase, FloatAgreesWithDouble) {
  // the same pairs in float against double on the same (float-rounded) inputs. dist is well
  // conditioned (float round-off ~1e-7 on unit-scale geometry; tolerance 1e-5). Normals and
  // positions are not everywhere: the unit vector between nearly touching features amplifies
  // rounding by 1 / (their distance), and capsule-box's second point by 1 / (the capsule axis
  // component it divides by); observed up to 5e-4 over 40000 poses, tolerance 2e-3.
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  const int types[4] = {kGeomPlane, kGeomSphere, kGeomCapsule, kGeomBox};
  const double size[3] = {0.3, 0.4, 0.25};
  int compared = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    int t1 = types[trial % 4], t2 = types[(trial / 4) % 4];
    if (t1 > t2 || (t1 == kGeomPlane && t2 == kGeomPlane)) continue;
    Mat3<double> R1 = to_mat(normalize(Quat<double>{u(rng), u(rng), u(rng), u(rng)}));
    Mat3<double> R2 = to_mat(normalize(Quat<double>{u(rng), u(rng), u(rng), u(rng)}));
    Vec3<double> p1{0.1 * u(rng), 0.1 * u(rng), 0.1 * u(rng)};
    Vec3<double> p2 = p1 + Vec3<double>{0.5 * u(rng), 0.5 * u(rng), 0.5 * u(rng)};
    ContactPoint<double> cd[kMaxPairContacts];
    ContactPoint<float> cf[kMaxPairContacts];
    GeomFrame<float> f1, f2;
    float sf[3];
    for (int i = 0; i < 3; ++i) {
      f1.pos[i] = float(p1[i]);
      f2.pos[i] = float(p2[i]);
      sf[i] = float(size[i]);
    }
    for (int i = 0; i < 9; ++i) f1.rot.m[i] = float(R1.m[i]), f2.rot.m[i] = float(R2.m[i]);
    // the double reference sees exactly the float-rounded inputs
    GeomFrame<double> d1, d2;
    double sd[3];
    for (int i = 0; i < 3; ++i) d1.pos[i] = f1.pos[i], d2.pos[i] = f2.pos[i], sd[i] = sf[i];
    for (int i = 0; i < 9; ++i) d1.rot.m[i] = f1.rot.m[i], d2.rot.m[i] = f2.rot.m[i];
    int nd = collide(t1, d1, sd, t2, d2, sd, 0.0, cd);
    int nf = collide(t1, f1, sf, t2, f2, sf, 0.0f, cf);
    if (nd != nf) continue;  // a near-tie decided differently by float rounding
    for (int k = 0; k < nd; ++k) {
      EXPECT_NEAR(cf[k].dist, cd[k].dist, 1e-5);
      for (int i = 0; i < 3; ++i) {
        EXPECT_NEAR(cf[k].pos[i], cd[k].pos[i], 2e-3);
        EXPECT_NEAR(cf[k].normal[i], cd[k].normal[i], 2e-3);
      }
      ++compared;
    }
  }
  EXPECT_GT(compared, 500);
}

// ---- degenerate configurations: finite results -------------------------------------------

bool finite(const ContactPoint<double>& c) {
  bool ok = std::isfinite(c.dist);
  for (int i = 0; i < 3; ++i) ok = ok && std::isfinite(c.pos[i]) && std::isfinite(c.normal[i]);
  return ok;
}

TEST(Narrowphase, DegenerateConfigurationsStayFinite) {
  // coincident centres, parallel and coincident axes, zero sizes, identical boxes; the forward
  // and the adjoint give finite numbers, and contacts with unit normals
  struct Case {
    const char* name;
    Geom a, b;
    bool touches = true;  // whether the pair reports a contact
  };
  Quat<double> tilt = rotation({1, 2, 3}, 0.3);
  const Case cases[] = {
      {"concentric spheres",
       {kGeomSphere, at({0, 0, 0}), {0.3, 0, 0}},
       {kGeomSphere, at({0, 0, 0}), {0.2, 0, 0}}},
      {"concentric spheres, tilted",
       {kGeomSphere, at({0, 0, 0}, tilt), {0.3, 0, 0}},
       {kGeomSphere, at({0, 0, 0}), {0.2, 0, 0}}},
      {"sphere on capsule axis",
       {kGeomSphere, at({0, 0, 0.1}), {0.3, 0, 0}},
       {kGeomCapsule, at({0, 0, 0}), {0.2, 0.5, 0}}},
      {"zero-radius sphere",
       {kGeomSphere, at({0, 0, 0.1}), {0, 0, 0}},
       {kGeomSphere, at({0, 0, 0}), {0.2, 0, 0}}},
      {"coaxial capsules",
       {kGeomCapsule, at({0, 0, 0}), {0.1, 0.5, 0}},
       {kGeomCapsule, at({0, 0, 0.2}), {0.1, 0.5, 0}}},
      {"point capsules",
       {kGeomCapsule, at({0, 0, 0}), {0.1, 0, 0}},
       {kGeomCapsule, at({0, 0, 0.1}), {0.1, 0, 0}}},
      {"capsule inside box",
       {kGeomCapsule, at({0, 0, 0}), {0.1, 0.2, 0}},
       {kGeomBox, at({0, 0, 0}), {0.3, 0.3, 0.3}}},
      // MuJoCo's capsule-box looks for the first point at the segment's ends (over a face) and
      // on lines through the box edges only: a capsule through the middle of two opposite faces,
      // both ends out of the box and parallel to four edges, is missed (MuJoCo 4.0 reports no
      // contact either)
      {"capsule through box centre",
       {kGeomCapsule, at({0, 0, 0}), {0.1, 0.5, 0}},
       {kGeomBox, at({0, 0, 0}), {0.3, 0.3, 0.3}},
       false},
      {"point capsule on box",
       {kGeomCapsule, at({0, 0, 0.35}), {0.1, 0, 0}},
       {kGeomBox, at({0, 0, 0}), {0.3, 0.3, 0.3}}},
      {"capsule on flat box",
       {kGeomCapsule, at({0, 0, 0.05}, rotation(kY, M_PI / 2)), {0.1, 0.5, 0}},
       {kGeomBox, at({0, 0, 0}), {0.3, 0.3, 0}}},
      {"sphere at box centre",
       {kGeomSphere, at({0, 0, 0}), {0.1, 0, 0}},
       {kGeomBox, at({0, 0, 0}), {0.3, 0.3, 0.3}}},
      {"sphere in flat box",
       {kGeomSphere, at({0, 0, 0}), {0.1, 0, 0}},
       {kGeomBox, at({0, 0, 0}), {0.3, 0.3, 0}}},
      {"identical boxes",
       {kGeomBox, at({0, 0, 0}, tilt), {0.3, 0.2, 0.1}},
       {kGeomBox, at({0, 0, 0}, tilt), {0.3, 0.2, 0.1}}},
      {"flat boxes",
       {kGeomBox, at({0, 0, 0}), {0.3, 0.2, 0}},
       {kGeomBox, at({0.1, 0, 0}), {0.3, 0.2, 0}}},
      {"point box on plane",
       {kGeomPlane, at({0, 0, 0}), {0, 0, 1}},
       {kGeomBox, at({0, 0, 0}), {0, 0, 0}}},
      {"point capsule on plane",
       {kGeomPlane, at({0, 0, 0}), {0, 0, 1}},
       {kGeomCapsule, at({0, 0, 0}), {0, 0, 0}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Contacts con = collide_geoms(c.a, c.b);
    ASSERT_EQ(con.empty(), !c.touches);
    for (const ContactPoint<double>& k : con) {
      EXPECT_TRUE(finite(k));
      EXPECT_NEAR(norm(k.normal), 1.0, 1e-12);
    }
    GeomFrame<double> adj_a{}, adj_b{};
    double adj_sa[3] = {}, adj_sb[3] = {};
    adj_collide(c.a.type, c.a.frame, c.a.size.data(), c.b.type, c.b.frame, c.b.size.data(), 0.0,
                con.data(), int(con.size()), con.data(), adj_a, adj_sa, adj_b, adj_sb);
    bool ok = true;
    for (int i = 0; i < 3; ++i)
      ok = ok && std::isfinite(adj_a.pos[i] + adj_b.pos[i] + adj_sa[i] + adj_sb[i]);
    for (int i = 0; i < 9; ++i) ok = ok && std::isfinite(adj_a.rot.m[i] + adj_b.rot.m[i]);
    EXPECT_TRUE(ok);
  }
}

// ---- contact frame -----------------------------------------------------------------------

TEST(ContactFrame, OrthonormalRightHandedAndMuJoCosChoice) {
  // n = +z: t1 = +y (the reference axis, already orthogonal), t2 = n x t1 = -x
  Vec3<double> t1, t2;
  contact_frame(kZ, t1, t2);
  expect_vec(t1, kY);
  expect_vec(t2, -1.0 * kX);
  // n = +y uses +z instead
  contact_frame(kY, t1, t2);
  expect_vec(t1, kZ);
  std::mt19937 rng(3);
  std::normal_distribution<double> g;
  for (int k = 0; k < 100; ++k) {
    Vec3<double> n{g(rng), g(rng), g(rng)};
    n = (1 / norm(n)) * n;
    contact_frame(n, t1, t2);
    EXPECT_NEAR(norm(t1), 1, 1e-14);
    EXPECT_NEAR(norm(t2), 1, 1e-14);
    EXPECT_NEAR(dot(n, t1), 0, 1e-14);
    EXPECT_NEAR(dot(n, t2), 0, 1e-14);
    EXPECT_NEAR(dot(cross(n, t1), t2), 1, 1e-14);
  }
}

TEST(ContactFrame, AdjointMatchesDualNumbersAndFiniteDifferences) {
  using D = Dual<double, 1>;
  std::mt19937 rng(4);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int trial = 0; trial < 20; ++trial) {
    Vec3<double> n{u(rng), u(rng), u(rng)}, v{u(rng), u(rng), u(rng)};
    n = (1 / norm(n)) * n;
    if (std::abs(std::abs(n.y) - 0.5) < 1e-3) continue;  // the reference-axis switch
    Vec3<double> w1{u(rng), u(rng), u(rng)}, w2{u(rng), u(rng), u(rng)};
    Vec3<D> nd;
    for (int i = 0; i < 3; ++i) nd[i] = D(n[i]), nd[i].d[0] = v[i];
    Vec3<D> t1d, t2d;
    contact_frame(nd, t1d, t2d);
    double jvp = 0;
    for (int i = 0; i < 3; ++i) jvp += w1[i] * t1d[i].d[0] + w2[i] * t2d[i].d[0];
    auto f = [&](double s) {
      Vec3<double> t1, t2;
      contact_frame(n + s * v, t1, t2);
      return dot(w1, t1) + dot(w2, t2);
    };
    double fd = (f(1e-6) - f(-1e-6)) / 2e-6;
    Vec3<double> adj_n;
    adj_contact_frame(n, adj_n, w1, w2);
    EXPECT_NEAR(dot(adj_n, v), jvp, 1e-10 * (1 + std::abs(jvp)));
    EXPECT_NEAR(fd, jvp, 1e-6 * (1 + std::abs(jvp)));
  }
}

// ---- adjoints ----------------------------------------------------------------------------

// the 30 inputs of a pair in collision_impl::pair_input's order: pos1, rot1, size1, pos2, rot2,
// size2
using Inputs = std::array<double, 30>;

template <class T>
struct Pair {
  GeomFrame<T> g1, g2;
  T s1[3], s2[3];
  T& operator[](int k) { return collision_impl::pair_input(k, g1, s1, g2, s2); }
};

// contacts of x + s v, flattened (pos, normal, dist per contact), in T
template <class T>
std::vector<T> contacts_at(int t1, int t2, const Inputs& x, const Inputs& v, double s, int* count) {
  Pair<T> p;
  for (int k = 0; k < 30; ++k) p[k] = T(x[k] + s * v[k]);
  ContactPoint<T> out[kMaxPairContacts];
  int n = collide(t1, p.g1, p.s1, t2, p.g2, p.s2, T(0), out);
  *count = n;
  std::vector<T> y;
  for (int c = 0; c < n; ++c) {
    for (int i = 0; i < 3; ++i) y.push_back(out[c].pos[i]);
    for (int i = 0; i < 3; ++i) y.push_back(out[c].normal[i]);
    y.push_back(out[c].dist);
  }
  return y;
}

// J v by dual numbers: the inputs carry v as their derivative
std::vector<double> jvp(int t1, int t2, const Inputs& x, const Inputs& v, int* count) {
  using D = Dual<double, 1>;
  Pair<D> p;
  for (int k = 0; k < 30; ++k) p[k] = D(x[k]), p[k].d[0] = v[k];
  ContactPoint<D> out[kMaxPairContacts];
  int n = collide(t1, p.g1, p.s1, t2, p.g2, p.s2, D(0.0), out);
  *count = n;
  std::vector<double> y;
  for (int c = 0; c < n; ++c) {
    for (int i = 0; i < 3; ++i) y.push_back(out[c].pos[i].d[0]);
    for (int i = 0; i < 3; ++i) y.push_back(out[c].normal[i].d[0]);
    y.push_back(out[c].dist.d[0]);
  }
  return y;
}

// J^T w by adj_collide
Inputs vjp(int t1, int t2, const Inputs& x, const std::vector<double>& w) {
  Pair<double> p, g{};
  for (int k = 0; k < 30; ++k) p[k] = x[k], g[k] = 0;
  ContactPoint<double> out[kMaxPairContacts], adj[kMaxPairContacts];
  int n = collide(t1, p.g1, p.s1, t2, p.g2, p.s2, 0.0, out);
  for (int c = 0; c < n; ++c) {
    adj[c].pos = {w[7 * c], w[7 * c + 1], w[7 * c + 2]};
    adj[c].normal = {w[7 * c + 3], w[7 * c + 4], w[7 * c + 5]};
    adj[c].dist = w[7 * c + 6];
  }
  adj_collide(t1, p.g1, p.s1, t2, p.g2, p.s2, 0.0, out, n, adj, g.g1, g.s1, g.g2, g.s2);
  Inputs r;
  for (int k = 0; k < 30; ++k) r[k] = g[k];
  return r;
}

// A configuration and direction of a pair, and which contacts it should produce.
struct AdjointCase {
  std::string name;
  int type1, type2;
  std::array<double, 3> size1, size2;
  double spread;  // centre offset of geom2 from geom1, per coordinate, in (-spread, spread)
  int orient;     // 0: random rotations; 1: geom2 rotated slightly from geom1's rotation;
                  // 2: each near the identity or a quarter turn about y (z axis up or
                  // lying along x), slightly tilted; 3: equal rotations (parallel axes);
                  // 4: geom2 turned half a turn about x from geom1 (antiparallel axes)
  // whether the contacts (flattened, count) of a configuration are of the wanted kind
  std::function<bool(const Pair<double>&, const std::vector<double>&, int)> want;
};

// random rotation near identity by a small random angle
Quat<double> small_rotation(std::mt19937& rng, double angle) {
  std::uniform_real_distribution<double> u(-1, 1);
  Vec3<double> axis{u(rng), u(rng), u(rng)};
  return rotation(axis, angle * u(rng));
}

void check_adjoint(const AdjointCase& c, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  const int t1 = c.type1, t2 = c.type2;
  for (int attempt = 0; attempt < 20000; ++attempt) {
    // a configuration
    Quat<double> q1 = normalize(Quat<double>{u(rng), u(rng), u(rng), u(rng)}), q2;
    switch (c.orient) {
      case 0:
        q2 = normalize(Quat<double>{u(rng), u(rng), u(rng), u(rng)});
        break;
      case 1:
        q2 = q1 * small_rotation(rng, 0.2);
        break;
      case 2:
        q1 = small_rotation(rng, 0.1) * rotation(kY, u(rng) > 0 ? M_PI / 2 : 0);
        q2 = small_rotation(rng, 0.1) * rotation(kY, u(rng) > 0 ? M_PI / 2 : 0);
        break;
      case 3:
        q2 = q1;
        break;
      default:
        q2 = q1 * Quat<double>{0, 1, 0, 0};
        break;
    }
    Pair<double> p;
    p.g1 = at({0.1 * u(rng), 0.1 * u(rng), 0.1 * u(rng)}, q1);
    p.g2 = at(p.g1.pos + c.spread * Vec3<double>{u(rng), u(rng), u(rng)}, q2);
    for (int i = 0; i < 3; ++i) p.s1[i] = c.size1[i], p.s2[i] = c.size2[i];
    Inputs x, v;
    for (int k = 0; k < 30; ++k) x[k] = p[k], v[k] = u(rng);
    // keep the axes (anti)parallel along the direction too: dR2 = dR1 diag(1, +-1, +-1)
    if (c.orient >= 3)
      for (int k = 3; k < 12; ++k) v[15 + k] = (c.orient == 4 && (k - 3) % 3 != 0) ? -v[k] : v[k];

    // a contact of the wanted kind, the same number of contacts nearby (no feature switch)
    int n, n_plus, n_minus;
    std::vector<double> y = contacts_at<double>(t1, t2, x, v, 0, &n);
    if (n == 0 || !c.want(p, y, n)) continue;
    const double h = 1e-6;
    std::vector<double> yp = contacts_at<double>(t1, t2, x, v, h, &n_plus);
    std::vector<double> ym = contacts_at<double>(t1, t2, x, v, -h, &n_minus);
    int n_far_plus, n_far_minus;
    contacts_at<double>(t1, t2, x, v, 1e-4, &n_far_plus);
    contacts_at<double>(t1, t2, x, v, -1e-4, &n_far_minus);
    if (n_plus != n || n_minus != n || n_far_plus != n || n_far_minus != n) continue;

    // forward mode against central differences
    int n_dual;
    std::vector<double> jv = jvp(t1, t2, x, v, &n_dual);
    ASSERT_EQ(n_dual, n);
    double scale = 0;
    for (double z : jv) scale = std::max(scale, std::abs(z));
    for (size_t i = 0; i < jv.size(); ++i)
      EXPECT_NEAR(jv[i], (yp[i] - ym[i]) / (2 * h), 1e-6 * (scale + 1)) << "output " << i;

    // reverse mode: <w, J v> = <J^T w, v>
    std::vector<double> w(jv.size());
    for (double& z : w) z = u(rng);
    Inputs g = vjp(t1, t2, x, w);
    double lhs = 0, rhs = 0;
    for (size_t i = 0; i < jv.size(); ++i) lhs += w[i] * jv[i];
    for (int k = 0; k < 30; ++k) rhs += g[k] * v[k];
    EXPECT_NEAR(lhs, rhs, 1e-10 * (std::abs(lhs) + 1)) << "dot-product test, " << n << " contacts";
    return;
  }
  FAIL() << "no configuration of the wanted kind found";
}

// predicates on the contacts
bool any(const Pair<double>&, const std::vector<double>&, int) {
  return true;
}
auto count_is(int k) {
  return [k](const Pair<double>&, const std::vector<double>&, int n) { return n == k; };
}
auto count_at_least(int k) {
  return [k](const Pair<double>&, const std::vector<double>&, int n) { return n >= k; };
}
// first contact deeper than d
auto deeper_than(double d) {
  return [d](const Pair<double>&, const std::vector<double>& y, int) { return y[6] < -d; };
}
// box-box: one contact whose normal is no face normal (an edge-edge contact)
bool edge_edge(const Pair<double>& p, const std::vector<double>& y, int n) {
  if (n != 1) return false;
  Vec3<double> normal{y[3], y[4], y[5]};
  double align = 0;
  for (int c = 0; c < 3; ++c)
    align = std::max(
        {align, std::abs(dot(normal, p.g1.rot.col(c))), std::abs(dot(normal, p.g2.rot.col(c)))});
  return align < 0.999;
}

// sphere-capsule: the sphere beyond an end of the segment (the normal leaves the axis'
// perpendicular plane)
bool beyond_capsule_end(const Pair<double>& p, const std::vector<double>& y, int) {
  return std::abs(dot(Vec3<double>{y[3], y[4], y[5]}, p.g2.rot.col(2))) > 0.1;
}
// capsule-box: two contacts, the first at a box point with k coordinates at the box's bounds
// (3: a corner, 2: an edge, 1: a face), which tells the feature the second point starts from
auto capsule_box_two_from(int k) {
  return [k](const Pair<double>& p, const std::vector<double>& y, int n) {
    if (n != 2) return false;
    Vec3<double> surface =
        Vec3<double>{y[0], y[1], y[2]} + (0.5 * y[6]) * Vec3<double>{y[3], y[4], y[5]};
    Vec3<double> local = mul_transpose(p.g2.rot, surface - p.g2.pos);
    int at_bound = 0;
    for (int i = 0; i < 3; ++i) at_bound += std::abs(std::abs(local[i]) - p.s2[i]) < 1e-9;
    return at_bound == k;
  };
}

class CollisionAdjoint : public ::testing::TestWithParam<std::tuple<AdjointCase, unsigned>> {};

TEST_P(CollisionAdjoint, MatchesDualNumbersAndFiniteDifferences) {
  auto [c, seed] = GetParam();
  check_adjoint(c, seed);
}

const std::array<double, 3> kPlaneSize{0, 0, 1}, kSphere{0.3, 0, 0}, kCapsule{0.2, 0.4, 0},
    kCapsule2{0.15, 0.3, 0}, kBox{0.3, 0.2, 0.4}, kBox2{0.25, 0.35, 0.15}, kFlatBox{0.6, 0.5, 0.1};

const AdjointCase kCases[] = {
    {"plane_sphere", kGeomPlane, kGeomSphere, kPlaneSize, kSphere, 0.4, 0, any},
    {"plane_capsule_one", kGeomPlane, kGeomCapsule, kPlaneSize, kCapsule, 0.6, 0, count_is(1)},
    {"plane_capsule_two", kGeomPlane, kGeomCapsule, kPlaneSize, kCapsule, 0.3, 2, count_is(2)},
    {"plane_box_one", kGeomPlane, kGeomBox, kPlaneSize, kBox, 0.6, 0, count_is(1)},
    {"plane_box_four", kGeomPlane, kGeomBox, kPlaneSize, kBox, 0.45, 2, count_is(4)},
    {"sphere_sphere", kGeomSphere, kGeomSphere, kSphere, {0.2, 0, 0}, 0.4, 0, any},
    {"sphere_capsule", kGeomSphere, kGeomCapsule, kSphere, kCapsule, 0.6, 0, any},
    {"sphere_capsule_end", kGeomSphere, kGeomCapsule, kSphere, kCapsule, 0.6, 0,
     beyond_capsule_end},
    {"sphere_box", kGeomSphere, kGeomBox, kSphere, kBox, 0.6, 0, any},
    {"sphere_box_inside",
     kGeomSphere,
     kGeomBox,
     {0.1, 0, 0},
     kBox,
     0.15,
     0,
     deeper_than(0.1)},  // dist < -r: the centre is inside the box
    {"capsule_capsule", kGeomCapsule, kGeomCapsule, kCapsule, kCapsule2, 0.6, 0, any},
    {"capsule_capsule_parallel", kGeomCapsule, kGeomCapsule, kCapsule, kCapsule2, 0.4, 3,
     count_is(2)},
    {"capsule_capsule_antiparallel", kGeomCapsule, kGeomCapsule, kCapsule, kCapsule2, 0.4, 4,
     count_is(2)},
    {"capsule_box_one", kGeomCapsule, kGeomBox, kCapsule, kBox, 0.7, 0, count_is(1)},
    {"capsule_box_two", kGeomCapsule, kGeomBox, kCapsule, kFlatBox, 0.35, 2, count_is(2)},
    {"capsule_box_two_tilted", kGeomCapsule, kGeomBox, kCapsule, kBox, 0.6, 0, count_is(2)},
    {"capsule_box_two_corner", kGeomCapsule, kGeomBox, kCapsule, kBox, 0.6, 0,
     capsule_box_two_from(3)},
    {"capsule_box_two_edge", kGeomCapsule, kGeomBox, kCapsule, kBox, 0.6, 0,
     capsule_box_two_from(2)},
    {"capsule_box_two_face", kGeomCapsule, kGeomBox, kCapsule, kBox, 0.6, 0,
     capsule_box_two_from(1)},
    {"box_box_edge", kGeomBox, kGeomBox, kBox, kBox2, 0.6, 0, edge_edge},
    {"box_box_few", kGeomBox, kGeomBox, kBox, kBox2, 0.6, 0, count_at_least(2)},
    {"box_box_face", kGeomBox, kGeomBox, kFlatBox, kBox2, 0.3, 2, count_at_least(4)},
    {"box_box_octagon", kGeomBox, kGeomBox, kBox, kBox2, 0.5, 1, count_at_least(6)},
};

INSTANTIATE_TEST_SUITE_P(Pairs, CollisionAdjoint,
                         ::testing::Combine(::testing::ValuesIn(kCases),
                                            ::testing::Values(1u, 2u, 3u, 4u, 5u)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace phx
