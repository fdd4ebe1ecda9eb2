// Convex narrowphase (collision/convex.h): support maps against brute force; GJK/EPA distances,
// depths and normals against the exact pair functions of collision/narrowphase.h and closed
// forms; face manifolds of mesh hulls against box_box; adjoints against central differences in
// double; float against double.
//
// Tolerances. Polytope cores (sphere, capsule, box, mesh) end in exact feature formulas, so
// their dist and normal agree with the analytic pairs to round-off: 1e-9 leaves room for the
// conditioning of the formulas at unit scale. Curved shapes are Newton-polished to round-off
// too, so the same 1e-9 holds. GJK/EPA alone (convex_distance) stops at ccd.tolerance = 1e-6 on
// curved shapes and is checked to 1e-5 there. Adjoints: directional derivatives against central
// differences with h = 1e-6, |ad - fd| <= 1e-6 (|fd|max + 1) (truncation h^2 ~ 1e-12 and
// round-off eps / h ~ 1e-10 of the unit-scale contacts).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "phalanx/collision/convex.h"
#include "phalanx/collision/narrowphase.h"
#include "phalanx/math/quat.h"
#include "tests/cpp/hull_builder.h"

namespace phx {
namespace {

using test_hulls::box_hull;
using test_hulls::HullData;
using test_hulls::icosahedron_hull;
using test_hulls::prism_hull;
using test_hulls::random_seeds;
using test_hulls::weigh;

// ---- helpers -----------------------------------------------------------------------------------

GeomFrame<double> at(Vec3<double> pos, Quat<double> q = {}) {
  return {pos, to_mat(q)};
}
Quat<double> rotation(Vec3<double> axis, double angle) {
  return axis_angle((1 / norm(axis)) * axis, angle);
}
Quat<double> random_rotation(std::mt19937& rng) {
  std::normal_distribution<double> n;
  return normalize(Quat<double>{n(rng), n(rng), n(rng), n(rng)});
}
Vec3<double> random_unit(std::mt19937& rng) {
  std::normal_distribution<double> n;
  Vec3<double> v{n(rng), n(rng), n(rng)};
  return (1 / norm(v)) * v;
}

GeomShape<double> shape(int type, const double* size, const ConvexHull<double>& hull = {}) {
  GeomShape<double> s;
  s.type = type;
  s.size = size;
  s.hull = hull;
  return s;
}

using Contacts = std::vector<ContactPoint<double>>;

Contacts convex(const GeomShape<double>& s1, const GeomFrame<double>& g1,
                const GeomShape<double>& s2, const GeomFrame<double>& g2, double margin = 0) {
  ContactPoint<double> out[kMaxConvexContacts];
  int n = convex_convex(s1, g1, s2, g2, margin, CcdSettings<double>{}, out);
  return Contacts(out, out + n);
}

Contacts analytic(int t1, const GeomFrame<double>& g1, const double* s1, int t2,
                  const GeomFrame<double>& g2, const double* s2, double margin = 0) {
  ContactPoint<double> out[kMaxPairContacts];
  int n = collide(t1, g1, s1, t2, g2, s2, margin, out);
  return Contacts(out, out + n);
}

double min_dist(const Contacts& c) {
  double d = 1e30;
  for (const ContactPoint<double>& k : c) d = std::min(d, k.dist);
  return d;
}
const ContactPoint<double>& deepest(const Contacts& c) {
  return *std::min_element(c.begin(), c.end(),
                           [](const auto& a, const auto& b) { return a.dist < b.dist; });
}

void expect_vec(Vec3<double> a, Vec3<double> b, double tol) {
  EXPECT_NEAR(a.x, b.x, tol);
  EXPECT_NEAR(a.y, b.y, tol);
  EXPECT_NEAR(a.z, b.z, tol);
}

// ---- support maps ------------------------------------------------------------------------------

TEST(ConvexSupport, MeshHillClimbingMatchesBruteForce) {
  // hulls of >= 10 vertices hill-climb; on a convex hull a local maximum of d . x over the
  // adjacency graph is the global one, so the support value equals the brute-force maximum
  std::mt19937 rng(1);
  for (const HullData<>& hd : {prism_hull(12, 0.5, 0.3), icosahedron_hull(0.6, {1.0, 0.7, 1.3})}) {
    ConvexHull<double> h = hd.hull();
    ASSERT_GE(h.nvert, 10);
    GeomShape<double> s = shape(kGeomMesh, nullptr, h);
    GeomFrame<double> g = at({0.3, -0.2, 0.1}, random_rotation(rng));
    int start = 0;
    for (int trial = 0; trial < 2000; ++trial) {
      Vec3<double> d = random_unit(rng);
      SupportPoint<double> sp = support(s, g, d, start);
      double best = -1e30;
      for (int i = 0; i < h.nvert; ++i)
        best = std::max(best, dot(d, g.rot * Vec3<double>::load(h.vert + 3 * i) + g.pos));
      EXPECT_NEAR(dot(d, sp.pos), best, 1e-14);
      ASSERT_GE(sp.vertex, 0);
      expect_vec(sp.pos, g.rot * Vec3<double>::load(h.vert + 3 * sp.vertex) + g.pos, 1e-15);
      start = sp.vertex;  // warm start, as GJK does
    }
  }
}

TEST(ConvexSupport, CurvedShapesMatchSurfaceSampling) {
  // the support value max_x d . x over a fine parametric sampling of the surface is below the
  // support map's value by at most the sampling error (~ R dtheta^2 / 2 with R the largest
  // radius of curvature) and never above it (beyond round-off); the support point is on the
  // surface
  std::mt19937 rng(2);
  const double ell[3] = {0.4, 0.25, 0.6}, cyl[3] = {0.3, 0.5, 0};
  const int m = 400;
  const double dth = 2 * M_PI / m;
  GeomFrame<double> g = at({0.1, 0.2, -0.3}, random_rotation(rng));
  for (int type : {kGeomEllipsoid, kGeomCylinder}) {
    GeomShape<double> s = shape(type, type == kGeomEllipsoid ? ell : cyl);
    for (int trial = 0; trial < 50; ++trial) {
      Vec3<double> d = random_unit(rng);
      SupportPoint<double> sp = support(s, g, d);
      Vec3<double> l = mul_transpose(g.rot, sp.pos - g.pos);
      double best = -1e30;
      if (type == kGeomEllipsoid) {
        EXPECT_NEAR(l.x * l.x / (ell[0] * ell[0]) + l.y * l.y / (ell[1] * ell[1]) +
                        l.z * l.z / (ell[2] * ell[2]),
                    1.0, 1e-12);
        for (int i = 0; i <= m / 2; ++i)
          for (int j = 0; j < m; ++j) {
            double th = i * dth, ph = j * dth;
            Vec3<double> x{ell[0] * std::sin(th) * std::cos(ph),
                           ell[1] * std::sin(th) * std::sin(ph), ell[2] * std::cos(th)};
            best = std::max(best, dot(d, g.rot * x + g.pos));
          }
      } else {
        EXPECT_NEAR(std::hypot(l.x, l.y), cyl[0], 1e-12);
        EXPECT_NEAR(std::abs(l.z), cyl[1], 1e-12);
        for (int j = 0; j < m; ++j)
          for (double z : {-cyl[1], cyl[1]}) {
            Vec3<double> x{cyl[0] * std::cos(j * dth), cyl[0] * std::sin(j * dth), z};
            best = std::max(best, dot(d, g.rot * x + g.pos));
          }
      }
      double val = dot(d, sp.pos);
      EXPECT_LE(best, val + 1e-13);
      EXPECT_GE(best, val - 0.6 * dth * dth);
    }
  }
}

// ---- GJK / EPA against the analytic pairs --------------------------------------------------

TEST(ConvexGjk, SphereSphereClosedForm) {
  // dist = |c2 - c1| - r1 - r2, normal (c2 - c1) / |c2 - c1|, separated and penetrating
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-0.6, 0.6);
  const double s1[3] = {0.3, 0, 0}, s2[3] = {0.2, 0, 0};
  for (int trial = 0; trial < 200; ++trial) {
    GeomFrame<double> g1 = at({u(rng), u(rng), u(rng)}, random_rotation(rng));
    GeomFrame<double> g2 = at({u(rng), u(rng), u(rng)}, random_rotation(rng));
    Contacts c = convex(shape(kGeomSphere, s1), g1, shape(kGeomSphere, s2), g2, 10);
    Contacts a = analytic(kGeomSphere, g1, s1, kGeomSphere, g2, s2, 10);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_NEAR(c[0].dist, a[0].dist, 1e-12);
    expect_vec(c[0].normal, a[0].normal, 1e-12);
    expect_vec(c[0].pos, a[0].pos, 1e-12);
  }
}

TEST(ConvexGjk, SphereBoxMatchesSphereBox) {
  // the sphere's centre against the box: outside (vertex-face/edge/vertex features) and inside
  // (EPA on the centre point, the nearest face)
  std::mt19937 rng(4);
  std::uniform_real_distribution<double> u(-0.7, 0.7);
  const double ss[3] = {0.25, 0, 0}, sb[3] = {0.3, 0.2, 0.4};
  int inside = 0;
  for (int trial = 0; trial < 300; ++trial) {
    GeomFrame<double> g1 = at({u(rng), u(rng), u(rng)}, random_rotation(rng));
    GeomFrame<double> g2 = at({0, 0, 0}, random_rotation(rng));
    Contacts c = convex(shape(kGeomSphere, ss), g1, shape(kGeomBox, sb), g2, 10);
    Contacts a = analytic(kGeomSphere, g1, ss, kGeomBox, g2, sb, 10);
    ASSERT_EQ(a.size(), 1u);
    ASSERT_EQ(c.size(), 1u);
    inside += a[0].dist < -ss[0];
    EXPECT_NEAR(c[0].dist, a[0].dist, 1e-9);
    expect_vec(c[0].normal, a[0].normal, 1e-9);
    expect_vec(c[0].pos, a[0].pos, 1e-9);
  }
  EXPECT_GT(inside, 5);  // both sides exercised
}

// The penetration depth of two boxes and its direction (from 1 to 2) by the separating-axis
// theorem: the smallest overlap r1 + r2 - |d . a| over the 15 candidate axes (the face normals of
// both, the cross products of their edges).
double sat_depth(const GeomFrame<double>& g1, const double* s1, const GeomFrame<double>& g2,
                 const double* s2, Vec3<double>& axis) {
  std::vector<Vec3<double>> axes;
  for (int i = 0; i < 3; ++i) axes.push_back(g1.rot.col(i)), axes.push_back(g2.rot.col(i));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      Vec3<double> a = cross(g1.rot.col(i), g2.rot.col(j));
      if (norm(a) > 1e-6) axes.push_back((1 / norm(a)) * a);
    }
  Vec3<double> d = g2.pos - g1.pos;
  double best = 1e30;
  for (const Vec3<double>& a : axes) {
    double r1 = 0, r2 = 0;
    for (int i = 0; i < 3; ++i)
      r1 += s1[i] * std::abs(dot(a, g1.rot.col(i))), r2 += s2[i] * std::abs(dot(a, g2.rot.col(i)));
    double overlap = r1 + r2 - std::abs(dot(d, a));
    if (overlap < best) best = overlap, axis = dot(d, a) >= 0 ? a : -a;
  }
  return best;
}

TEST(ConvexGjk, BoxBoxDepthAndNormalMatchSeparatingAxes) {
  // penetrating boxes: EPA's depth and normal are the separating-axis minimum (to EPA's
  // tolerance, 1e-6, as it may stop one support short on a polytope); the contacts' deepest
  // point and normal are exact: the normal is that axis to round-off, and where box_box picks
  // the same axis (its heuristics prefer faces on near-ties) the deepest dist agrees with it
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(-0.5, 0.5);
  const double s1[3] = {0.3, 0.2, 0.4}, s2[3] = {0.25, 0.35, 0.15};
  GeomShape<double> b1 = shape(kGeomBox, s1), b2 = shape(kGeomBox, s2);
  int tested = 0, same_axis = 0, exact = 0;
  for (int trial = 0; trial < 300; ++trial) {
    GeomFrame<double> g1 = at({0, 0, 0}, random_rotation(rng));
    GeomFrame<double> g2 = at({u(rng), u(rng), u(rng)}, random_rotation(rng));
    Vec3<double> axis;
    double depth = sat_depth(g1, s1, g2, s2, axis);
    if (depth < 0.01) continue;
    ++tested;
    ConvexDistance<double> d = convex_distance(b1, g1, b2, g2, CcdSettings<double>{});
    EXPECT_NEAR(d.dist, -depth, 1e-6);
    expect_vec(d.normal, axis, 1e-5);
    Contacts c = convex(b1, g1, b2, g2);
    ASSERT_FALSE(c.empty());
    // exact but for near-parallel faces (within the feature angle, 1e-3), where the reference
    // face may be the other box's
    double off = norm(deepest(c).normal - axis);
    EXPECT_LT(off, 1e-3);
    exact += off < 1e-9;
    Contacts a = analytic(kGeomBox, g1, s1, kGeomBox, g2, s2);
    if (norm(deepest(a).normal - axis) < 1e-9) {
      ++same_axis;
      EXPECT_NEAR(min_dist(c), min_dist(a), 1e-9);
    }
  }
  EXPECT_GT(tested, 100);
  EXPECT_GT(same_axis, tested / 2);
  EXPECT_GE(exact, tested * 95 / 100);
}

TEST(ConvexGjk, CountsItsIterationsWithinTheBound) {
  // two point cores (spheres) apart: GJK's second support repeats the first, one iteration and
  // no EPA; overlapping boxes need both, within ccd.iterations (EPA may try one more to stop;
  // two GJK iterations may not reach the overlap, and then EPA does not run); the counts add up
  // over calls
  const double r[3] = {0.2, 0, 0}, s[3] = {0.3, 0.2, 0.4};  // geom_size: 3 per geom
  GeomShape<double> ball = shape(kGeomSphere, r), box = shape(kGeomBox, s);
  int counts[2] = {0, 0};
  CcdSettings<double> ccd;
  ccd.counts = counts;
  convex_distance(ball, at({0, 0, 0}), ball, at({1, 0.3, 0}), ccd);
  EXPECT_EQ(counts[0], 1);
  EXPECT_EQ(counts[1], 0);
  std::mt19937 rng(9);
  for (int bound : {2, 35}) {
    ccd.iterations = bound;
    for (int trial = 0; trial < 20; ++trial) {
      counts[0] = counts[1] = 0;
      GeomFrame<double> g1 = at({0, 0, 0}, random_rotation(rng));
      GeomFrame<double> g2 = at({0.1, -0.05, 0.08}, random_rotation(rng));
      convex_distance(box, g1, box, g2, ccd);
      EXPECT_GE(counts[0], 1);
      EXPECT_LE(counts[0], bound);
      EXPECT_GE(counts[1], bound > 2 ? 1 : 0) << counts[0];
      EXPECT_LE(counts[1], bound + 1);
      int once[2] = {counts[0], counts[1]};
      convex_distance(box, g1, box, g2, ccd);
      EXPECT_EQ(counts[0], 2 * once[0]);
      EXPECT_EQ(counts[1], 2 * once[1]);
    }
  }
}

TEST(ConvexGjk, SeparatedPolytopesHaveASeparatingPlaneAtTheirDistance) {
  // optimality certificate of a separated pair: with u the normal, the gap between the
  // supporting planes, min_{x in 2} u.x - max_{x in 1} u.x, equals dist (and |w2 - w1| of the
  // witnesses); any other direction gives a smaller gap
  std::mt19937 rng(6);
  std::uniform_real_distribution<double> u(-1, 1);
  HullData<> ico = icosahedron_hull(0.5, {1.2, 0.8, 1.0});
  ConvexHull<double> h = ico.hull();
  const double sb[3] = {0.3, 0.2, 0.4};
  int tested = 0;
  for (int trial = 0; trial < 200; ++trial) {
    GeomFrame<double> g1 = at({0, 0, 0}, random_rotation(rng));
    GeomFrame<double> g2 = at({u(rng), u(rng), u(rng)}, random_rotation(rng));
    GeomShape<double> a = shape(kGeomMesh, nullptr, h), b = shape(kGeomBox, sb);
    ConvexDistance<double> d = convex_distance(a, g1, b, g2, CcdSettings<double>{});
    if (d.dist <= 0.01) continue;
    ++tested;
    double gap = -dot(d.normal, support(a, g1, d.normal).pos) -
                 dot(-d.normal, support(b, g2, -d.normal).pos);
    EXPECT_NEAR(gap, d.dist, 1e-10);
    EXPECT_NEAR(norm(d.witness2 - d.witness1), d.dist, 1e-10);
    for (int k = 0; k < 20; ++k) {
      Vec3<double> e = random_unit(rng);
      EXPECT_LE(-dot(e, support(a, g1, e).pos) - dot(-e, support(b, g2, -e).pos), d.dist + 1e-12);
    }
    Contacts c = convex(a, g1, b, g2, 10);
    ASSERT_FALSE(c.empty());
    EXPECT_NEAR(min_dist(c), d.dist, 1e-9);
  }
  EXPECT_GT(tested, 50);
}

TEST(ConvexManifold, BoxHullRestingOnBoxGivesBoxBoxsFourCorners) {
  // a box given as an 8-vertex hull, resting (penetration p) on a wider box, level or turned
  // about the vertical: box_box's face manifold, its 4 lower corners at dist -p, normal +z;
  // the hull as geom1 (reference face on geom2) and as geom2
  const double big[3] = {0.6, 0.5, 0.1}, sb[3] = {0.2, 0.15, 0.1};
  HullData<> hd = box_hull({sb[0], sb[1], sb[2]});
  ConvexHull<double> h = hd.hull();
  GeomShape<double> mesh = shape(kGeomMesh, nullptr, h), base = shape(kGeomBox, big);
  const double p = 0.01;
  for (double yaw : {0.0, 0.3, -1.1}) {
    GeomFrame<double> gb = at({0.05, -0.02, 0});
    GeomFrame<double> gm = at({0.1, 0.05, big[2] + sb[2] - p}, rotation({0, 0, 1}, yaw));
    Contacts a = analytic(kGeomBox, gb, big, kGeomBox, gm, sb);
    ASSERT_EQ(a.size(), 4u);
    for (int order = 0; order < 2; ++order) {
      Contacts c = order == 0 ? convex(base, gb, mesh, gm) : convex(mesh, gm, base, gb);
      ASSERT_EQ(c.size(), 4u) << "yaw " << yaw;
      for (const ContactPoint<double>& k : a) {
        // the convex contact at the same place
        auto it = std::min_element(c.begin(), c.end(), [&](const auto& x, const auto& y) {
          return norm(x.pos - k.pos) < norm(y.pos - k.pos);
        });
        expect_vec(it->pos, k.pos, 1e-9);
        EXPECT_NEAR(it->dist, -p, 1e-9);
        expect_vec(it->normal, order == 0 ? k.normal : -k.normal, 1e-9);
      }
    }
  }
}

TEST(ConvexManifold, TiltedHullKeepsPointsWithinMargin) {
  // a hull box tilted about x by a small angle on a box: the incident face's corners below the
  // margin are kept, with dist = their height over the reference face; at most 4 points even
  // for an 8-gon prism face whose clipped polygon has more vertices
  const double big[3] = {0.6, 0.5, 0.1};
  HullData<> prism = prism_hull(8, 0.2, 0.1);
  ConvexHull<double> h = prism.hull();
  GeomShape<double> mesh = shape(kGeomMesh, nullptr, h), base = shape(kGeomBox, big);
  GeomFrame<double> gb = at({0, 0, 0});
  GeomFrame<double> gm = at({0, 0, big[2] + 0.1 - 0.005});
  Contacts c = convex(base, gb, mesh, gm);
  ASSERT_EQ(c.size(), 4u);
  for (const ContactPoint<double>& k : c) {
    EXPECT_NEAR(k.dist, -0.005, 1e-12);
    expect_vec(k.normal, {0, 0, 1}, 1e-12);
    EXPECT_NEAR(std::hypot(k.pos.x, k.pos.y), 0.2, 1e-12);  // octagon corners
  }
  // the 4 kept are spread: their pairwise distances include the octagon's diameter
  double far = 0;
  for (const auto& a : c)
    for (const auto& b : c) far = std::max(far, norm(a.pos - b.pos));
  EXPECT_NEAR(far, 0.4, 1e-12);
  // tilted by t about x: corners at height z_c - 0.1 cos t -+ y sin t; margin decides
  const double t = 0.02;
  gm = at({0, 0, big[2] + 0.1 - 0.001}, rotation({1, 0, 0}, t));
  Contacts all = convex(base, gb, mesh, gm, 0.05);
  Contacts touching = convex(base, gb, mesh, gm, 0);
  EXPECT_EQ(all.size(), 4u);
  ASSERT_GE(touching.size(), 1u);
  for (const ContactPoint<double>& k : all) {
    Vec3<double> vertex = k.pos + 0.5 * k.dist * k.normal;  // the prism's vertex
    EXPECT_NEAR(k.dist, vertex.z - big[2], 1e-12);
    double nearest = 1e30;  // it is one of the prism's lower vertices
    for (int i = 0; i < 8; ++i)
      nearest =
          std::min(nearest, norm(vertex - (gm.rot * Vec3<double>::load(h.vert + 3 * i) + gm.pos)));
    EXPECT_NEAR(nearest, 0, 1e-12);
  }
}

TEST(ConvexSmooth, EqualAxesEllipsoidIsASphere) {
  // an ellipsoid of axes (r, r, r) against a sphere, a box and a capsule: the sphere's closed
  // forms (dist, normal, pos) from the analytic pairs
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-0.6, 0.6);
  const double se[3] = {0.3, 0.3, 0.3}, ss[3] = {0.3, 0, 0}, s2[3] = {0.2, 0.25, 0.15};
  for (int type : {kGeomSphere, kGeomCapsule, kGeomBox}) {
    for (int trial = 0; trial < 50; ++trial) {
      GeomFrame<double> g1 = at({u(rng), u(rng), u(rng)}, random_rotation(rng));
      GeomFrame<double> g2 = at({0, 0, 0}, random_rotation(rng));
      Contacts a = analytic(kGeomSphere, g1, ss, type, g2, s2, 10);
      if (a.size() != 1u || a[0].dist < -0.2) continue;  // capsule pairs of 2; deep ones
      Contacts c = convex(shape(kGeomEllipsoid, se), g1, shape(type, s2), g2, 10);
      ASSERT_EQ(c.size(), 1u);
      EXPECT_NEAR(c[0].dist, a[0].dist, 1e-9) << kGeomTypeNames[type];
      expect_vec(c[0].normal, a[0].normal, 1e-9);
      expect_vec(c[0].pos, a[0].pos, 1e-9);
    }
  }
}

TEST(ConvexSmooth, TiltedCylinderOnBox) {
  // a cylinder (r, h) tilted by t about x over a box top z = b: its lowest point is a rim point,
  // at height z_c - h cos t - r sin t, so dist = z_c - h cos t - r sin t - b, normal +z
  const double sb[3] = {0.6, 0.5, 0.1}, sc[3] = {0.2, 0.3, 0};
  for (double t : {0.1, 0.7, 1.3}) {
    for (double zc : {0.45, 0.3}) {
      GeomFrame<double> gb = at({0, 0, 0}), gc = at({0.05, 0.02, zc}, rotation({1, 0, 0}, t));
      Contacts c = convex(shape(kGeomBox, sb), gb, shape(kGeomCylinder, sc), gc, 1);
      ASSERT_EQ(c.size(), 1u);
      double dist = zc - sc[1] * std::cos(t) - sc[0] * std::sin(t) - sb[2];
      EXPECT_NEAR(c[0].dist, dist, 1e-12);
      expect_vec(c[0].normal, {0, 0, 1}, 1e-12);
      EXPECT_NEAR(c[0].pos.z, sb[2] + dist / 2, 1e-12);
    }
  }
}

TEST(ConvexSmooth, EllipsoidsAgreeWithGjkAndAreOptimal) {
  // curved pairs: the polished contact agrees with GJK/EPA alone (converged to ccd.tolerance)
  // and satisfies the optimality conditions exactly: the surface points' normals are parallel
  // to the contact normal, and their difference is dist along it
  std::mt19937 rng(8);
  std::uniform_real_distribution<double> u(-0.6, 0.6);
  const double e1[3] = {0.4, 0.25, 0.3}, e2[3] = {0.2, 0.35, 0.25};
  CcdSettings<double> ccd;
  ccd.iterations = 64;
  int pen = 0;
  for (int trial = 0; trial < 100; ++trial) {
    GeomFrame<double> g1 = at({0, 0, 0}, random_rotation(rng));
    GeomFrame<double> g2 = at({u(rng), u(rng), u(rng)}, random_rotation(rng));
    GeomShape<double> a = shape(kGeomEllipsoid, e1), b = shape(kGeomEllipsoid, e2);
    Contacts c = convex(a, g1, b, g2, 10);
    ASSERT_EQ(c.size(), 1u);
    ConvexDistance<double> d = convex_distance(a, g1, b, g2, ccd);
    pen += c[0].dist < 0;
    EXPECT_NEAR(c[0].dist, d.dist, 1e-5);
    Vec3<double> n = c[0].normal;
    Vec3<double> p1 = support(a, g1, n).pos, p2 = support(b, g2, -n).pos;
    EXPECT_NEAR(dot(n, p2 - p1), c[0].dist, 1e-12);
    EXPECT_NEAR(norm((p2 - p1) - dot(n, p2 - p1) * n), 0, 1e-12);
    expect_vec(c[0].pos, 0.5 * (p1 + p2), 1e-12);
  }
  EXPECT_GT(pen, 10);
}

// ---- cylinders: the contact is the largest support gap -----------------------------------------

// the support gap of full shapes along unit direction n: n . (s2(-n) - s1(n)); every direction
// bounds the distance from below, the distance is the largest
double support_gap(const GeomShape<double>& a, const GeomFrame<double>& ga,
                   const GeomShape<double>& b, const GeomFrame<double>& gb, Vec3<double> n) {
  n = (1 / norm(n)) * n;
  return dot(n, support(b, gb, -n).pos - support(a, ga, n).pos);
}

// a brute-force maximum of the support gap: 2000 random directions and n, then a random local
// search with shrinking steps (down to 1e-10 rad)
double largest_gap(const GeomShape<double>& a, const GeomFrame<double>& ga,
                   const GeomShape<double>& b, const GeomFrame<double>& gb, Vec3<double> n,
                   std::mt19937& rng) {
  double best = support_gap(a, ga, b, gb, n);
  Vec3<double> bn = (1 / norm(n)) * n;
  for (int i = 0; i < 2000; ++i) {
    Vec3<double> d = random_unit(rng);
    double s = support_gap(a, ga, b, gb, d);
    if (s > best) best = s, bn = d;
  }
  for (double step = 0.1; step > 1e-10;) {
    bool better = false;
    for (int k = 0; k < 40; ++k) {
      Vec3<double> d = bn + step * random_unit(rng);
      double s = support_gap(a, ga, b, gb, d);
      if (s > best + 1e-15) best = s, bn = (1 / norm(d)) * d, better = true;
    }
    if (!better) step *= 0.5;
  }
  return best;
}

Contacts convex_ccd(const GeomShape<double>& s1, const GeomFrame<double>& g1,
                    const GeomShape<double>& s2, const GeomFrame<double>& g2, double margin,
                    const CcdSettings<double>& ccd) {
  ContactPoint<double> out[kMaxConvexContacts];
  int n = convex_convex(s1, g1, s2, g2, margin, ccd, out);
  return Contacts(out, out + n);
}

// A valid contact: the deepest dist is the largest support gap (no direction overlaps less),
// and a single contact's dist is the support gap along its own normal
void expect_largest_gap(const GeomShape<double>& a, const GeomFrame<double>& ga,
                        const GeomShape<double>& b, const GeomFrame<double>& gb, const Contacts& c,
                        std::mt19937& rng, double tol, const std::string& what) {
  ASSERT_FALSE(c.empty()) << what;
  const ContactPoint<double>& d = deepest(c);
  EXPECT_NEAR(d.dist, largest_gap(a, ga, b, gb, d.normal, rng), tol) << what;
  if (c.size() == 1u) {
    EXPECT_NEAR(d.dist, support_gap(a, ga, b, gb, d.normal), tol) << what;
  }
}

const CcdSettings<double> kConverged{64, 1e-12};

TEST(ConvexCylinder, PosesOnceWrongMatchConvergedMujoco) {
  // world frames (pos1, pos2, rot1, rot2 row-major) where EPA's horizon once split on the
  // cylinder's flat patches (a point coplanar with polytope faces), folding the polytope inside
  // out: depths off by up to 0.16, contacts missed. dist: MuJoCo's converged mj_geomDistance
  struct Pose {
    int t1, t2;
    double x[24];
    double dist;
  };
  const Pose poses[] = {
      {kGeomCylinder,
       kGeomBox,
       {0.15333094670254493, 0.02120557778793128,   0.13092442758915301, 0.3868055495992958,
        0.38468778773649037, 0.4891292736547376,    0.4816589552910817,  0.8476081678258369,
        0.22263208354330138, -0.019418963148660817, 0.26430258788179684, -0.9642442874651713,
        -0.8761435696608946, 0.46011361191983097,   0.14376338013538945, -0.15788928616461467,
        -0.5923886132635512, 0.7900295590609985,    0.2448912364702665,  0.7515797881596227,
        0.6124998810857039,  -0.9566082038193551,   0.29017848456704043, 0.026404383724742464},
       -0.016688},
      {kGeomCylinder,
       kGeomBox,
       {0.01138606023760932, -0.19625562644618355, 0.12436221732773473, -0.4099245073810388,
        0.1504508058530289,  0.21398799604889895,  0.918533731815216,   0.39356622649897843,
        -0.0374353960439516, 0.2596150678454926,   -0.5290631220022131, 0.8078936993719235,
        0.29815398716970565, -0.7517964074778665,  -0.5881380464127286, 0.01878374779805353,
        0.6386734755929542,  0.7692485699646605,   0.9201730852318875,  -0.3119721703230273,
        0.23654779254681202, 0.39106094669947383,  0.7033985758572135,  -0.5935501490595005},
       -0.011620},
      {kGeomCylinder,
       kGeomCylinder,
       {-0.11373007884453729, 0.12904467005088482,  -0.16037233035634704, -0.2769172475060905,
        0.627348579652867,    0.1274182908875923,   -0.10889173565922655, -0.8629355200496358,
        -0.4934418690603645,  -0.6060435275376361,  0.4511006635030423,   -0.6551484061774505,
        0.7879427851277399,   0.22770700389706913,  -0.5720976208142807,  -0.3968845707260622,
        -0.9106929297048381,  0.11454704407014632,  0.8415983023286255,   -0.3112535075701798,
        0.4413995373160639,   -0.36632626856009726, 0.271587263712566,    0.8899693383212459},
       -0.012741},
      {kGeomEllipsoid,
       kGeomCylinder,
       {0.0886786297510932,  0.060423061577849824, 0.06054377334389338, 0.5759708065177653,
        0.07289615471423587, 0.22732611137407555,  -0.4413435247305135, -0.024596654622841163,
        -0.8970010578365064, -0.4435527900433285,  -0.8629859127168105, 0.2419012957739433,
        -0.7800492392299514, 0.50462889238895,     0.369963329727523,   0.35928409949334944,
        0.7528194816636216,  0.551523130864852,    0.412382792319848,   0.40208234791325836,
        -0.8174779618405907, -0.8371710508908785,  0.5211454821105881,  -0.1659880056690382},
       -0.006424},
  };
  const double cyl[3] = {0.2, 0.3, 0}, box[3] = {0.3, 0.2, 0.15}, ell[3] = {0.3, 0.2, 0.15};
  auto size = [&](int t) { return t == kGeomCylinder ? cyl : t == kGeomBox ? box : ell; };
  std::mt19937 rng(11);
  for (const Pose& p : poses) {
    GeomFrame<double> g1, g2;
    for (int i = 0; i < 3; ++i) g1.pos[i] = p.x[i], g2.pos[i] = p.x[3 + i];
    for (int i = 0; i < 9; ++i) g1.rot.m[i] = p.x[6 + i], g2.rot.m[i] = p.x[15 + i];
    GeomShape<double> a = shape(p.t1, size(p.t1)), b = shape(p.t2, size(p.t2));
    for (const CcdSettings<double>& ccd : {kConverged, CcdSettings<double>{}}) {
      for (double margin : {0.0, 0.05}) {
        std::string what = std::string(kGeomTypeNames[p.t1]) + "-" + kGeomTypeNames[p.t2] +
                           " tolerance " + std::to_string(ccd.tolerance);
        Contacts c = convex_ccd(a, g1, b, g2, margin, ccd);
        ASSERT_EQ(c.size(), 1u) << what;
        EXPECT_NEAR(c[0].dist, p.dist, 1e-6) << what;  // the reference has 6 digits
        expect_largest_gap(a, g1, b, g2, c, rng, 1e-9, what);
      }
    }
  }
}

TEST(ConvexCylinder, ShallowPosesAreTheLargestSupportGap) {
  // random orientations, geom2 moved along a random direction to where GJK finds them touching
  // and 0 .. 0.02 further (resting contact): the deepest contact against a brute-force maximum
  // of the support gap, at the converged and the default ccd settings
  const double cyl[3] = {0.2, 0.3, 0}, cyl2[3] = {0.15, 0.25, 0}, box[3] = {0.3, 0.2, 0.15},
               ell[3] = {0.3, 0.2, 0.15};
  HullData<> ico = icosahedron_hull(0.3, {1.2, 1.0, 0.8});
  HullData<> prism = prism_hull(7, 0.3, 0.2);
  const std::pair<GeomShape<double>, GeomShape<double>> pairs[] = {
      {shape(kGeomCylinder, cyl), shape(kGeomBox, box)},
      {shape(kGeomCylinder, cyl), shape(kGeomCylinder, cyl2)},
      {shape(kGeomCylinder, cyl), shape(kGeomMesh, nullptr, ico.hull())},
      {shape(kGeomCylinder, cyl2), shape(kGeomMesh, nullptr, prism.hull())},
      {shape(kGeomEllipsoid, ell), shape(kGeomCylinder, cyl)},
  };
  std::mt19937 rng(12);
  std::uniform_real_distribution<double> u(0, 1);
  for (const auto& [a, b] : pairs) {
    std::string what = std::string(kGeomTypeNames[a.type]) + "-" + kGeomTypeNames[b.type];
    int touching = 0;
    for (int trial = 0; trial < 300; ++trial) {
      GeomFrame<double> g1 = at({0.1 * u(rng), 0.1 * u(rng), 0.1 * u(rng)}, random_rotation(rng));
      GeomFrame<double> g2 = at({0, 0, 0}, random_rotation(rng));
      Vec3<double> dir = random_unit(rng);
      double s = 1.5;
      for (int it = 0; it < 200; ++it) {
        g2.pos = g1.pos + s * dir;
        double gap = convex_distance(a, g1, b, g2, kConverged).dist;
        if (gap < 1e-10) break;
        s -= gap;
      }
      g2.pos = g1.pos + (s - 0.02 * u(rng)) * dir;
      for (const CcdSettings<double>& ccd : {kConverged, CcdSettings<double>{}}) {
        Contacts c = convex_ccd(a, g1, b, g2, 0.0, ccd);
        touching += !c.empty();
        // exact where the features are solved; within ccd.tolerance where GJK/EPA's own
        // direction is the contact (the fallback)
        expect_largest_gap(a, g1, b, g2, c, rng, std::max(1e-9, ccd.tolerance),
                           what + " trial " + std::to_string(trial) + " tolerance " +
                               std::to_string(ccd.tolerance));
      }
      if (::testing::Test::HasFailure()) return;
    }
    EXPECT_EQ(touching, 600) << what;
  }
}

// ---- adjoints ----------------------------------------------------------------------------------

using Inputs = std::array<double, 30>;

// a pair: shapes (with their sizes and hulls) and the 30 inputs in pair_input's order
struct PairCase {
  std::string name;
  int type1, type2;
  std::array<double, 3> size1, size2;
  const HullData<>* hull1;
  const HullData<>* hull2;
  double spread;  // centre offset of geom2, per coordinate, in (-spread, spread)
  int orient;     // 0: random rotations; 1: geom2 near geom1's rotation; 2: both near identity
  // whether the contacts (count) are of the wanted kind
  std::function<bool(const Contacts&)> want;
};

Contacts contacts_at(const PairCase& c, const Inputs& x) {
  GeomFrame<double> g1, g2;
  double s1[3], s2[3];
  for (int k = 0; k < 30; ++k) collision_impl::pair_input(k, g1, s1, g2, s2) = x[k];
  ConvexHull<double> h1 = c.hull1 ? c.hull1->hull() : ConvexHull<double>{};
  ConvexHull<double> h2 = c.hull2 ? c.hull2->hull() : ConvexHull<double>{};
  return convex(shape(c.type1, s1, h1), g1, shape(c.type2, s2, h2), g2);
}

Inputs vjp(const PairCase& c, const Inputs& x, const Contacts& adj) {
  GeomFrame<double> g1, g2, a1{}, a2{};
  double s1[3], s2[3], as1[3] = {}, as2[3] = {};
  a1.rot = a2.rot = Mat3<double>{};
  for (int k = 0; k < 30; ++k) collision_impl::pair_input(k, g1, s1, g2, s2) = x[k];
  ConvexHull<double> h1 = c.hull1 ? c.hull1->hull() : ConvexHull<double>{};
  ConvexHull<double> h2 = c.hull2 ? c.hull2->hull() : ConvexHull<double>{};
  adj_convex_convex(shape(c.type1, s1, h1), g1, shape(c.type2, s2, h2), g2, 0.0,
                    CcdSettings<double>{}, static_cast<int>(adj.size()), adj.data(), a1, as1, a2,
                    as2);
  Inputs r;
  for (int k = 0; k < 30; ++k) r[k] = collision_impl::pair_input(k, a1, as1, a2, as2);
  return r;
}

void check_adjoint(const PairCase& c, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int attempt = 0; attempt < 20000; ++attempt) {
    Quat<double> q1 = random_rotation(rng), q2 = random_rotation(rng);
    if (c.orient == 1) q2 = q1 * rotation({u(rng), u(rng), u(rng)}, 0.2 * u(rng));
    if (c.orient == 2) {
      q1 = rotation({u(rng), u(rng), u(rng)}, 0.1 * u(rng));
      q2 = rotation({u(rng), u(rng), u(rng)}, 0.1 * u(rng));
    }
    GeomFrame<double> g1 = at({0.1 * u(rng), 0.1 * u(rng), 0.1 * u(rng)}, q1);
    GeomFrame<double> g2 = at(g1.pos + c.spread * Vec3<double>{u(rng), u(rng), u(rng)}, q2);
    if (c.orient == 2) g2.pos.z = g1.pos.z + std::abs(g2.pos.z - g1.pos.z);  // 2 above 1
    double s1[3], s2[3];
    for (int i = 0; i < 3; ++i) s1[i] = c.size1[i], s2[i] = c.size2[i];
    Inputs x;
    for (int k = 0; k < 30; ++k) x[k] = collision_impl::pair_input(k, g1, s1, g2, s2);
    Contacts y = contacts_at(c, x);
    if (y.empty() || !c.want(y)) continue;
    // the same count nearby in the directions tried (no feature switch)
    Inputs v[2];
    bool stable = true;
    for (Inputs& d : v) {
      for (double& z : d) z = u(rng);
      for (double s : {1e-6, -1e-6, 1e-4, -1e-4}) {
        Inputs xs;
        for (int k = 0; k < 30; ++k) xs[k] = x[k] + s * d[k];
        stable = stable && contacts_at(c, xs).size() == y.size();
      }
    }
    if (!stable) continue;
    Contacts w = random_seeds(y.size(), rng);
    Inputs g = vjp(c, x, w);
    for (const Inputs& d : v) {
      const double h = 1e-6;
      Inputs xp, xm;
      for (int k = 0; k < 30; ++k) xp[k] = x[k] + h * d[k], xm[k] = x[k] - h * d[k];
      double fd = (weigh(contacts_at(c, xp), w) - weigh(contacts_at(c, xm), w)) / (2 * h);
      double ad = 0;
      for (int k = 0; k < 30; ++k) ad += g[k] * d[k];
      EXPECT_NEAR(ad, fd, 1e-6 * (std::abs(fd) + 1)) << y.size() << " contacts";
    }
    // entries a type does not read get nothing
    for (int k = 0; k < 30; ++k) {
      int type = k < 15 ? c.type1 : c.type2, i = k % 15 - 12;
      int nsize = type == kGeomMesh                                 ? 0
                  : type == kGeomSphere                             ? 1
                  : (type == kGeomCapsule || type == kGeomCylinder) ? 2
                                                                    : 3;
      if (i >= nsize) {
        EXPECT_EQ(g[k], 0.0) << "size entry " << k;
      }
    }
    return;
  }
  FAIL() << "no configuration of the wanted kind found";
}

auto count_is(size_t k) {
  return [k](const Contacts& c) { return c.size() == k; };
}
auto count_at_least(size_t k) {
  return [k](const Contacts& c) { return c.size() >= k; };
}
bool any(const Contacts&) {
  return true;
}
// a single contact whose normal is no face normal of the two (standard-oriented) boxes: edge-edge
// or vertex contacts, told apart by the caller's shapes
bool penetrating(const Contacts& c) {
  return c.size() == 1 && c[0].dist < 0;
}

class ConvexAdjoint : public ::testing::TestWithParam<std::tuple<PairCase, unsigned>> {};

TEST_P(ConvexAdjoint, MatchesCentralDifferences) {
  auto [c, seed] = GetParam();
  check_adjoint(c, seed);
}

const HullData<> kBoxHull = box_hull({0.3, 0.2, 0.25});
const HullData<> kPrism = prism_hull(7, 0.3, 0.2);
const HullData<> kIco = icosahedron_hull(0.35, {1.0, 0.8, 1.2});
const std::array<double, 3> kNone{0, 0, 0}, kSphere{0.2, 0, 0}, kCapsule{0.15, 0.3, 0},
    kBox{0.3, 0.2, 0.4}, kFlatBox{0.6, 0.5, 0.1}, kEllipsoid{0.3, 0.2, 0.25},
    kCylinder{0.2, 0.25, 0};

const PairCase kCases[] = {
    {"mesh_mesh_face", kGeomMesh, kGeomMesh, kNone, kNone, &kPrism, &kBoxHull, 0.25, 2,
     count_at_least(3)},
    {"mesh_mesh_one", kGeomMesh, kGeomMesh, kNone, kNone, &kIco, &kPrism, 0.6, 0, count_is(1)},
    {"mesh_mesh_deep", kGeomMesh, kGeomMesh, kNone, kNone, &kIco, &kPrism, 0.4, 0, penetrating},
    {"mesh_box_face", kGeomBox, kGeomMesh, kFlatBox, kNone, nullptr, &kIco, 0.3, 2,
     count_at_least(2)},
    {"mesh_box", kGeomBox, kGeomMesh, kBox, kNone, nullptr, &kPrism, 0.6, 0, any},
    {"box_box_one", kGeomBox, kGeomBox, kBox, kFlatBox, nullptr, nullptr, 0.6, 0, count_is(1)},
    {"sphere_mesh", kGeomSphere, kGeomMesh, kSphere, kNone, nullptr, &kIco, 0.55, 0, any},
    {"sphere_mesh_deep", kGeomSphere, kGeomMesh, {0.1, 0, 0}, kNone, nullptr, &kIco, 0.2, 0, any},
    {"capsule_mesh", kGeomCapsule, kGeomMesh, kCapsule, kNone, nullptr, &kPrism, 0.7, 0,
     count_is(1)},
    {"capsule_mesh_two", kGeomCapsule, kGeomMesh, kCapsule, kNone, nullptr, &kPrism, 0.3, 2,
     count_is(2)},
    {"ellipsoid_box", kGeomEllipsoid, kGeomBox, kEllipsoid, kBox, nullptr, nullptr, 0.6, 0, any},
    {"ellipsoid_mesh", kGeomEllipsoid, kGeomMesh, kEllipsoid, kNone, nullptr, &kIco, 0.6, 0, any},
    {"ellipsoid_ellipsoid",
     kGeomEllipsoid,
     kGeomEllipsoid,
     kEllipsoid,
     {0.2, 0.3, 0.15},
     nullptr,
     nullptr,
     0.6,
     0,
     any},
    {"sphere_ellipsoid", kGeomSphere, kGeomEllipsoid, kSphere, kEllipsoid, nullptr, nullptr, 0.6, 0,
     any},
    {"capsule_ellipsoid", kGeomCapsule, kGeomEllipsoid, kCapsule, kEllipsoid, nullptr, nullptr, 0.6,
     0, any},
    {"cylinder_box", kGeomCylinder, kGeomBox, kCylinder, kBox, nullptr, nullptr, 0.6, 0, any},
    {"cylinder_mesh", kGeomCylinder, kGeomMesh, kCylinder, kNone, nullptr, &kIco, 0.6, 0, any},
    {"sphere_cylinder", kGeomSphere, kGeomCylinder, kSphere, kCylinder, nullptr, nullptr, 0.55, 0,
     any},
    {"cylinder_ellipsoid", kGeomCylinder, kGeomEllipsoid, kCylinder, kEllipsoid, nullptr, nullptr,
     0.6, 0, any},
};

INSTANTIATE_TEST_SUITE_P(Pairs, ConvexAdjoint,
                         ::testing::Combine(::testing::ValuesIn(kCases),
                                            ::testing::Values(1u, 2u, 3u, 4u, 5u)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" +
                                  std::to_string(std::get<1>(info.param));
                         });

// ---- float -------------------------------------------------------------------------------------

TEST(ConvexFloat, AgreesWithDouble) {
  // the same pairs in float: dist and normal within float precision of the double result
  // (1e-4 covers the EPA/Newton round-off of float at unit scale), and the adjoint too
  HullData<> hd = prism_hull(7, 0.3, 0.2);
  HullData<float> hf(
      [&] {
        std::vector<Vec3<double>> v;
        for (size_t i = 0; i < hd.vert.size(); i += 3)
          v.push_back({hd.vert[i], hd.vert[i + 1], hd.vert[i + 2]});
        return v;
      }(),
      [&] {
        std::vector<std::vector<int>> f;
        for (size_t p = 0; p < hd.polyvertnum.size(); ++p)
          f.emplace_back(hd.polyvert.begin() + hd.polyvertadr[p],
                         hd.polyvert.begin() + hd.polyvertadr[p] + hd.polyvertnum[p]);
        return f;
      }());
  std::mt19937 rng(9);
  std::uniform_real_distribution<double> u(-0.5, 0.5);
  const double sd[4][3] = {{0.3, 0.2, 0.4}, {0.2, 0, 0}, {0.3, 0.2, 0.25}, {0.2, 0.25, 0}};
  const int types[4] = {kGeomBox, kGeomSphere, kGeomEllipsoid, kGeomCylinder};
  int compared = 0;
  for (int trial = 0; trial < 40; ++trial) {
    int t = trial % 4;
    GeomFrame<double> g1 = at({u(rng), u(rng), u(rng)}, random_rotation(rng));
    GeomFrame<double> g2 = at({0, 0, 0}, random_rotation(rng));
    Contacts cd = convex(shape(types[t], sd[t]), g1, shape(kGeomMesh, nullptr, hd.hull()), g2, 1);
    GeomFrame<float> f1, f2;
    float sf[3];
    for (int i = 0; i < 3; ++i) f1.pos[i] = float(g1.pos[i]), f2.pos[i] = float(g2.pos[i]);
    for (int i = 0; i < 9; ++i) f1.rot.m[i] = float(g1.rot.m[i]), f2.rot.m[i] = float(g2.rot.m[i]);
    for (int i = 0; i < 3; ++i) sf[i] = float(sd[t][i]);
    GeomShape<float> s1, s2;
    s1.type = types[t];
    s1.size = sf;
    s2.type = kGeomMesh;
    s2.hull = hf.hull();
    ContactPoint<float> out[kMaxConvexContacts];
    int n = convex_convex(s1, f1, s2, f2, 1.0f, CcdSettings<float>{}, out);
    if (n != static_cast<int>(cd.size()) || n == 0) continue;  // a feature decided differently
    // the same manifold: each float point within 1e-3 of a double one (clipping may break a
    // tie between features differently at the same count, as clang's build does once here)
    bool same = true;
    for (int k = 0; k < n; ++k) {
      double nearest = 1e30;
      for (const auto& c : cd) {
        Vec3<double> d{out[k].pos.x - c.pos.x, out[k].pos.y - c.pos.y, out[k].pos.z - c.pos.z};
        nearest = std::min(nearest, std::sqrt(d.x * d.x + d.y * d.y + d.z * d.z));
      }
      same = same && nearest < 1e-3;
    }
    if (!same) continue;
    ++compared;
    double dd = min_dist(cd), df = 1e30;
    for (int k = 0; k < n; ++k) df = std::min(df, double(out[k].dist));
    EXPECT_NEAR(df, dd, 1e-4) << kGeomTypeNames[types[t]];
    // a face manifold shares one normal; a single contact has the deepest's
    expect_vec({out[0].normal.x, out[0].normal.y, out[0].normal.z}, deepest(cd).normal, 1e-3);
    // the adjoint of the dists in float: d(sum dist)/d(pos1) against double's, to 1e-2 (the
    // float contact's round-off, 1e-6, over the conditioning of its features)
    ContactPoint<float> wf[kMaxConvexContacts];
    ContactPoint<double> wd[kMaxConvexContacts];
    for (int k = 0; k < n; ++k) wf[k].dist = 1.0f, wd[k].dist = 1.0;
    GeomFrame<float> af1{}, af2{};
    GeomFrame<double> ad1{}, ad2{};
    float asf1[3] = {}, asf2[3] = {};
    double asd1[3] = {}, asd2[3] = {};
    adj_convex_convex(s1, f1, s2, f2, 1.0f, CcdSettings<float>{}, n, wf, af1, asf1, af2, asf2);
    GeomShape<double> d1 = shape(types[t], sd[t]), d2 = shape(kGeomMesh, nullptr, hd.hull());
    adj_convex_convex(d1, g1, d2, g2, 1.0, CcdSettings<double>{}, n, wd, ad1, asd1, ad2, asd2);
    expect_vec({af1.pos.x, af1.pos.y, af1.pos.z}, ad1.pos, 1e-2 * n);
  }
  EXPECT_GE(compared, 30);
}

}  // namespace
}  // namespace phx
