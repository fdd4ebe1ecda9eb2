// Closed-form pairs of collision/plane_convex.h: plane-mesh hull, plane-cylinder,
// plane-ellipsoid and sphere-cylinder. Analytic contacts with their reference equations;
// plane-mesh of a box-shaped hull against plane_box; contacts against MuJoCo 4.0's
// mj_collision on fixed poses; every adjoint in double at random configurations away from
// feature switches, against central differences (rtol 1e-6) and against dual numbers (<w, J v> =
// <J^T w, v> to 1e-10); float against double.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "phalanx/collision/box.h"
#include "phalanx/collision/plane_convex.h"
#include "phalanx/math/quat.h"

namespace phx {
namespace {

const Vec3<double> kX{1, 0, 0}, kY{0, 1, 0}, kZ{0, 0, 1};

template <class T = double>
GeomFrame<T> at(Vec3<double> pos, Quat<double> q = {}) {
  Mat3<double> R = to_mat(normalize(q));
  GeomFrame<T> g;
  g.pos = {T(pos.x), T(pos.y), T(pos.z)};
  for (int i = 0; i < 9; ++i) g.rot.m[i] = T(R.m[i]);
  return g;
}

Quat<double> rotation(Vec3<double> axis, double angle) {
  return axis_angle((1 / norm(axis)) * axis, angle);
}

void expect_vec(Vec3<double> a, Vec3<double> b, double tol = 1e-12) {
  EXPECT_NEAR(a.x, b.x, tol);
  EXPECT_NEAR(a.y, b.y, tol);
  EXPECT_NEAR(a.z, b.z, tol);
}

using Contacts = std::vector<ContactPoint<double>>;

// a contact of c matching k (pos, normal, dist within tol), or nullptr
const ContactPoint<double>* find(const Contacts& c, const ContactPoint<double>& k, double tol) {
  for (const auto& x : c)
    if (norm(x.pos - k.pos) < tol && norm(x.normal - k.normal) < tol &&
        std::abs(x.dist - k.dist) < tol)
      return &x;
  return nullptr;
}

// ---- hulls -------------------------------------------------------------------------------

// The convex hull of a right prism over a convex polygon (xy, counter-clockwise) between
// z = -hz and z = +hz, in the arrays ConvexHull points into: vertices 0 .. m-1 on the bottom,
// m .. 2m-1 above them; each vertex adjacent to its two ring neighbours and the vertex above or
// below it; faces: the bottom (clockwise seen from above, so counter-clockwise about -z), the
// top, then side i through vertices i, i+1, m+i+1, m+i.
template <class T>
struct PrismHull {
  std::vector<T> vert, polynormal;
  std::vector<int> adjadr, adjnum, adj, polyvertadr, polyvertnum, polyvert;

  PrismHull(const std::vector<std::array<double, 2>>& ring, double hz) {
    const int m = int(ring.size());
    for (double z : {-hz, hz})
      for (const auto& p : ring) vert.insert(vert.end(), {T(p[0]), T(p[1]), T(z)});
    for (int i = 0; i < 2 * m; ++i) {
      int base = i < m ? 0 : m, j = i - base;
      adjadr.push_back(int(adj.size()));
      adjnum.push_back(3);
      adj.insert(adj.end(), {base + (j + m - 1) % m, base + (j + 1) % m, i < m ? i + m : i - m});
    }
    auto face = [&](std::vector<int> ids, Vec3<double> n) {
      polyvertadr.push_back(int(polyvert.size()));
      polyvertnum.push_back(int(ids.size()));
      polyvert.insert(polyvert.end(), ids.begin(), ids.end());
      polynormal.insert(polynormal.end(), {T(n.x), T(n.y), T(n.z)});
    };
    std::vector<int> bottom, top;
    for (int i = 0; i < m; ++i) bottom.push_back(m - 1 - i), top.push_back(m + i);
    face(bottom, -kZ);
    face(top, kZ);
    for (int i = 0; i < m; ++i) {
      int k = (i + 1) % m;
      Vec3<double> edge{ring[k][0] - ring[i][0], ring[k][1] - ring[i][1], 0};
      face({i, k, m + k, m + i}, (1 / norm(edge)) * cross(edge, kZ));
    }
  }

  ConvexHull<T> view() const {
    ConvexHull<T> h;
    h.nvert = int(vert.size() / 3);
    h.vert = vert.data();
    h.adjadr = adjadr.data();
    h.adjnum = adjnum.data();
    h.adj = adj.data();
    h.npoly = int(polyvertnum.size());
    h.polynormal = polynormal.data();
    h.polyvertadr = polyvertadr.data();
    h.polyvertnum = polyvertnum.data();
    h.polyvert = polyvert.data();
    return h;
  }
};

std::vector<std::array<double, 2>> rectangle(double sx, double sy) {
  return {{-sx, -sy}, {sx, -sy}, {sx, sy}, {-sx, sy}};
}

std::vector<std::array<double, 2>> regular_polygon(int m, double r) {
  std::vector<std::array<double, 2>> ring;
  for (int i = 0; i < m; ++i)
    ring.push_back({r * std::cos(2 * M_PI * i / m), r * std::sin(2 * M_PI * i / m)});
  return ring;
}

template <class T>
Contacts plane_convex_contacts(const GeomFrame<T>& plane, const ConvexHull<T>& hull,
                               const GeomFrame<T>& g2, T margin = T(0)) {
  const T size[3] = {T(0), T(0), T(1)};
  ContactPoint<T> out[4];
  int n = plane_convex(plane, size, hull, g2, margin, out);
  Contacts c;
  for (int k = 0; k < n; ++k)
    c.push_back({{double(out[k].pos.x), double(out[k].pos.y), double(out[k].pos.z)},
                 {double(out[k].normal.x), double(out[k].normal.y), double(out[k].normal.z)},
                 double(out[k].dist)});
  return c;
}

using PairFn = int (*)(const GeomFrame<double>&, const double*, const GeomFrame<double>&,
                       const double*, double, ContactPoint<double>*);

Contacts pair_contacts(PairFn f, const GeomFrame<double>& g1, std::array<double, 3> s1,
                       const GeomFrame<double>& g2, std::array<double, 3> s2, double margin = 0) {
  ContactPoint<double> out[kMaxPairContacts];
  int n = f(g1, s1.data(), g2, s2.data(), margin, out);
  return Contacts(out, out + n);
}

// MuJoCo 4.0.0's mj_collision (mujoco from PyPI) on a plane z = 0 and a free body at pos with
// quaternion quat (w, x, y, z), margin 0: the contacts in MuJoCo's order (pos, frame normal,
// dist). Mesh vertices are stored as float in MuJoCo, hence the 1e-6 tolerance.
struct MuJoCoCase {
  const char* what;
  Vec3<double> pos;
  Quat<double> quat;
  Contacts contacts;
};

void expect_mujoco(const Contacts& c, const MuJoCoCase& ref) {
  ASSERT_EQ(c.size(), ref.contacts.size()) << ref.what;
  for (size_t k = 0; k < c.size(); ++k) {
    expect_vec(c[k].pos, ref.contacts[k].pos, 1e-6);
    expect_vec(c[k].normal, ref.contacts[k].normal, 1e-6);
    EXPECT_NEAR(c[k].dist, ref.contacts[k].dist, 1e-6) << ref.what << ", contact " << k;
  }
}

// ---- plane : mesh ------------------------------------------------------------------------

TEST(PlaneConvex, RestingBoxHullGivesItsFourLowerCorners) {
  // box hull of half-sizes (0.3, 0.2, 0.1) at height 0.1 - p: the four bottom corners,
  // dist = -p, pos = corner raised by p / 2, normal +z; turned about z, the corners turn with it
  PrismHull<double> box(rectangle(0.3, 0.2), 0.1);
  const double p = 0.004;
  Quat<double> q = rotation(kZ, 0.3);
  Contacts c = plane_convex_contacts(at({}), box.view(), at({0.5, -0.2, 0.1 - p}, q));
  ASSERT_EQ(c.size(), 4u);
  Mat3<double> R = to_mat(q);
  for (const auto& v : rectangle(0.3, 0.2)) {
    Vec3<double> corner = Vec3<double>{0.5, -0.2, 0} + R * Vec3<double>{v[0], v[1], 0};
    const ContactPoint<double>* k = find(c, {{corner.x, corner.y, -p / 2}, kZ, -p}, 1e-12);
    EXPECT_NE(k, nullptr) << "corner " << v[0] << ", " << v[1];
  }
  // raised by 2p: nothing at margin 0, all four (dist = p) within a margin of 2p
  GeomFrame<double> up = at({0.5, -0.2, 0.1 + p}, q);
  EXPECT_TRUE(plane_convex_contacts(at({}), box.view(), up).empty());
  c = plane_convex_contacts(at({}), box.view(), up, 2 * p);
  ASSERT_EQ(c.size(), 4u);
  for (const auto& k : c) EXPECT_NEAR(k.dist, p, 1e-15);
}

TEST(PlaneConvex, BoxHullMatchesPlaneBox) {
  // near rest every box corner under the plane is on the bottom face and every top corner above
  // the box centre (tilt below atan(0.1 / 0.36) = 0.27 rad), so plane_convex of the box's hull and
  // plane_box (which takes the corners below the centre) give the same contacts, as sets
  const std::array<double, 3> s{0.3, 0.2, 0.1};
  PrismHull<double> box(rectangle(s[0], s[1]), s[2]);
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  int compared = 0;
  for (int trial = 0; trial < 200; ++trial) {
    Quat<double> qp = rotation({u(rng), u(rng), u(rng)}, 0.5 * u(rng));
    Quat<double> tilt = rotation({u(rng), u(rng), 0}, 0.25 * u(rng));
    GeomFrame<double> plane = at({u(rng), u(rng), u(rng)}, qp);
    Vec3<double> n = plane.rot.col(2);
    GeomFrame<double> g2 = at(plane.pos + (0.1 + 0.08 * u(rng)) * n, qp * tilt);
    const double size1[3] = {0, 0, 1};
    ContactPoint<double> out[4];
    int nb = plane_box(plane, size1, g2, s.data(), 0.0, out);
    Contacts ref(out, out + nb);
    Contacts c = plane_convex_contacts(plane, box.view(), g2);
    ASSERT_EQ(c.size(), ref.size()) << "trial " << trial;
    for (const auto& k : ref) EXPECT_NE(find(c, k, 1e-12), nullptr) << "trial " << trial;
    compared += nb;
  }
  EXPECT_GT(compared, 200);
}

TEST(PlaneConvex, HexagonFaceIsPrunedToTheLargestQuadrilateral) {
  // an irregular hexagonal prism (12 vertices: hill-climbing) on its bottom face, slightly
  // tilted so that bottom vertex j is the deepest: four contacts, the deepest first, then three
  // more of the bottom face in its counter-clockwise order about -z (decreasing index), each
  // with dist = its vertex's height and pos = vertex - (dist / 2) z. Which three is MuJoCo's
  // rotating largest-area search (a heuristic: for j = 0 it keeps 0, 5, 4, 2, of area 0.094,
  // where 0, 5, 3, 2 has 0.0967); the contacts are MuJoCo 4.0's (float mesh: 1e-6).
  const std::vector<std::array<double, 2>> ring = {{0.25, 0},     {0.12, 0.2},   {-0.1, 0.18},
                                                   {-0.22, 0.02}, {-0.15, -0.2}, {0.1, -0.19}};
  const Contacts mujoco[6] = {
      {{{0.24898751128243576, -2.4421080045342047e-10, -0.0037474799052571173},
        kZ,
        -0.0074949598105142345},
       {{0.098995018834306447, -0.18999999900868081, -0.0029974924432677325},
        kZ,
        -0.0059949848865354649},
       {{-0.15099249319108979, -0.20000000599150342, -0.0017475132168887561},
        kZ,
        -0.0034950264337775122},
       {{-0.10099498770537339, 0.1800000121430182, -0.001997509077568245},
        kZ,
        -0.0039950181551364899}},
      {{{0.11947951571954285, 0.19913252392555833, -0.0036636717264387914},
        kZ,
        -0.0073273434528775827},
       {{0.24948219854222761, -0.00086299355102035505, -0.0031406097264029334},
        kZ,
        -0.0062812194528058668},
       {{-0.15050809996319256, -0.20084682296222189, -0.0012541566953648553},
        kZ,
        -0.0025083133907297106},
       {{-0.22051201203749712, 0.019146643053313893, -0.0020173127599986962},
        kZ,
        -0.0040346255199973924}},
      {{{-0.099509369512556164, 0.1791168694975302, -0.0035270466842078629},
        kZ,
        -0.0070540933684157259},
       {{0.12048846786736364, 0.19912076547225591, -0.0030802625743996323},
        kZ,
        -0.0061605251487992646},
       {{0.25048268128213946, -0.00086883640469780608, -0.0018904572316151419},
        kZ,
        -0.0037809144632302838},
       {{-0.14951685133082415, -0.20086969120139059, -0.0019875841843877348},
        kZ,
        -0.0039751683687754696}},
      {{{-0.21899311888549072, 0.01990846985771497, -0.0036020184377588416},
        kZ,
        -0.0072040368755176831},
       {{0.12099083034263161, 0.19990992726350265, -0.0019905090248734589},
        kZ,
        -0.0039810180497469178},
       {{0.25098347371208285, -8.940744291711716e-05, -0.001252655032586078},
        kZ,
        -0.002505310065172156},
       {{-0.14899759632636111, -0.20009113448735799, -0.0031538740309711918},
        kZ,
        -0.0063077480619423837}},
      {{{-0.14939251983395088, -0.19919001939575595, -0.0037474799859324864},
        kZ,
        -0.0074949599718649729},
       {{-0.2193965254369758, 0.020804630727579442, -0.0030774910691354351},
        kZ,
        -0.0061549821382708703},
       {{0.12059303292472252, 0.2007907092452314, -0.0013375200805601367},
        kZ,
        -0.0026750401611202734},
       {{0.25059548457290814, 0.00079398648458229746, -0.0017475132831893669},
        kZ,
        -0.0034950265663787339}},
      {{{0.099529263505357374, -0.18910559560083712, -0.0035710284017972244},
        kZ,
        -0.0071420568035944487},
       {{-0.15046824301436823, -0.19911036284765057, -0.0030331002405828908},
        kZ,
        -0.0060662004811657816},
       {{-0.22046293585279891, 0.020879590916257632, -0.0018966978735846241},
        kZ,
        -0.0037933957471692481},
       {{0.11953708411360921, 0.20087954810343736, -0.0018920404899347848},
        kZ,
        -0.0037840809798695696}},
  };
  PrismHull<double> hex(ring, 0.1);
  ASSERT_GE(hex.view().nvert, collision_impl::kHillClimbMinVert);
  auto corner = [&](int i) { return Vec3<double>{ring[i][0], ring[i][1], -0.1}; };
  for (int j = 0; j < 6; ++j) {
    double angle = std::atan2(ring[j][1], ring[j][0]);
    // tilt down towards vertex j by 0.01 rad about the horizontal axis perpendicular to it
    Quat<double> q = rotation({-std::sin(angle), std::cos(angle), 0}, 0.01);
    GeomFrame<double> g2 = at({0, 0, 0.095}, q);
    Contacts c = plane_convex_contacts(at({}), hex.view(), g2);
    ASSERT_EQ(c.size(), 4u);
    // the bottom vertex of each contact, its position after j in the face's order
    int step[4];
    for (int k = 0; k < 4; ++k) {
      step[k] = -1;
      for (int i = 0; i < 6; ++i) {
        Vec3<double> w = g2.pos + g2.rot * corner(i);
        if (norm(w - (0.5 * w.z) * kZ - c[k].pos) < 1e-12 && std::abs(c[k].dist - w.z) < 1e-15)
          step[k] = (j - i + 6) % 6;
      }
      ASSERT_GE(step[k], 0) << "deepest " << j << ", contact " << k << " is no bottom vertex";
    }
    EXPECT_EQ(step[0], 0);
    EXPECT_TRUE(step[1] < step[2] && step[2] < step[3]);
    expect_mujoco(c, {"irregular hexagon", {}, {}, mujoco[j]});
  }
}

TEST(PlaneConvex, HillClimbFindsTheScannedSupport) {
  // the support vertex of a 16-vertex hull (octagonal prism) by hill-climbing equals the argmax
  // of a scan over all vertices, for random directions (ties have probability zero)
  PrismHull<double> oct(regular_polygon(8, 0.3), 0.15);
  ConvexHull<double> h = oct.view();
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int t = 0; t < 500; ++t) {
    Vec3<double> dir{u(rng), u(rng), u(rng)};
    int scan = 0;
    for (int i = 1; i < h.nvert; ++i)
      if (dot(dir, Vec3<double>::load(h.vert + 3 * i)) >
          dot(dir, Vec3<double>::load(h.vert + 3 * scan)))
        scan = i;
    EXPECT_EQ(collision_impl::hull_support(h, dir), scan);
  }
}

// ---- against MuJoCo 4.0 ------------------------------------------------------------------

TEST(MuJoCo, PlaneMesh) {
  // <mesh vertex=...>: the hexagonal prism (r 0.2, hz 0.1) and the box (0.3, 0.2, 0.1)
  PrismHull<double> hex(regular_polygon(6, 0.2), 0.1), box(rectangle(0.3, 0.2), 0.1);
  const MuJoCoCase hex_cases[] = {
      {"hex, four contacts",
       {0.1, -0.2, 0.09},
       {1, 0.02, -0.03, 0.4},
       {{{-0.040790495510497127, -0.33205890147700212, -0.011432447237189169},
         kZ,
         -0.022864894474378339},
        {{-0.087997855332038299, -0.13791538218518584, -0.0069670716427607526},
         kZ,
         -0.013934143285521505},
        {{0.056581497549995113, -0.00034541544049454531, -0.00042268163737985143},
         kZ,
         -0.00084536327475970285},
        {{0.29557557007511093, -0.25106248727943581, -0.0028090428208557838},
         kZ,
         -0.0056180856417115677}}},
      {"hex, two contacts",
       {0.1, -0.2, 0.1},
       {1, 0.15, 0.05, 0.2},
       {{{0.23960934846613927, -0.28761762624755172, -0.025551937286143231},
         kZ,
         -0.051103874572286462},
        {{0.055571787038319428, -0.36555189970933261, -0.021796068685575487},
         kZ,
         -0.043592137371150974}}},
  };
  for (const auto& ref : hex_cases)
    expect_mujoco(plane_convex_contacts(at({}), hex.view(), at(ref.pos, ref.quat)), ref);
  const MuJoCoCase box_case{"box, one contact",
                            {0.0, 0.1, 0.15},
                            {1, 0.3, -0.2, 0.1},
                            {{{-0.18771930783987117, -0.029824563860893799, -0.073245617747307437},
                              kZ,
                              -0.14649123549461487}}};
  expect_mujoco(plane_convex_contacts(at({}), box.view(), at(box_case.pos, box_case.quat)),
                box_case);
}

TEST(MuJoCo, PlaneCylinderAndEllipsoid) {
  const std::array<double, 3> plane{0, 0, 1}, cyl{0.2, 0.3, 0}, ell{0.2, 0.3, 0.1};
  const MuJoCoCase cyl_cases[] = {
      {"cylinder, one contact",
       {0.1, 0.2, 0.3},
       {1, 0.3, -0.2, 0.1},
       {{{0.11704270195678255, 0.23208038015394364, -0.029360248884187506},
         kZ,
         -0.058720497768375013}}},
      {"cylinder, rim point and triangle",
       {0.1, 0.2, 0.05},
       {1, 0.02, 0.01, 0.1},
       {{{0.19956772386069618, 0.042351103887231033, -0.12929929837788096},
         kZ,
         -0.25859859675576191},
        {{0.18597133347062306, 0.38823706293865623, -0.12262768876256869},
         kZ,
         -0.24525537752513737},
        {{-0.10691461398644048, 0.20325646454472138, -0.12262768876256869},
         kZ,
         -0.24525537752513737}}},
  };
  for (const auto& ref : cyl_cases)
    expect_mujoco(pair_contacts(plane_cylinder<double>, at({}), plane, at(ref.pos, ref.quat), cyl),
                  ref);
  const MuJoCoCase ell_case{"ellipsoid",
                            {0.1, 0.2, 0.1},
                            {1, 0.3, -0.2, 0.1},
                            {{{0.099933416411115056, 0.020157726421844491, -0.04245131316670453},
                              kZ,
                              -0.084902626333409059}}};
  expect_mujoco(
      pair_contacts(plane_ellipsoid<double>, at({}), plane, at(ell_case.pos, ell_case.quat), ell),
      ell_case);
}

TEST(MuJoCo, SphereCylinder) {
  // sphere of radius 0.25 at the origin (geom1) against the cylinder (r 0.2, h 0.3)
  const std::array<double, 3> sphere{0.25, 0, 0}, cyl{0.2, 0.3, 0};
  const MuJoCoCase cases[] = {
      {"side",
       {0.3, 0.1, 0.2},
       {1, 0.3, -0.2, 0.1},
       {{{0.1715330482419696, 0.059474792662416023, 0.10952852693888171},
         {0.80899813774280371, 0.28049986285244283, 0.51656736256604163},
         -0.075937099878706282}}},
      {"cap",
       {0.05, 0.1, -0.45},
       {1, 0.1, -0.05, 0.1},
       {{{0.016173982699768653, 0.042456704586892713, -0.2016693467877404},
         {0.07823960880195599, 0.20537897310513448, -0.97555012224938875},
         -0.086552567237163813}}},
      {"rim",
       {0.35, 0.1, -0.35},
       {1, 0.02, -0.05, 0.1},
       {{{0.17043613868662233, 0.046848704211913027, -0.095868093987599795},
         {0.84759521200303112, 0.2329830849522789, -0.47676119673863582},
         -0.097836004090091966}}},
  };
  for (const auto& ref : cases)
    expect_mujoco(
        pair_contacts(sphere_cylinder<double>, at({}), sphere, at(ref.pos, ref.quat), cyl), ref);
}

// ---- plane : cylinder --------------------------------------------------------------------

TEST(PlaneCylinder, TiltedCylinderRimPointsAndDepths) {
  // cylinder (r, h) at height z0 tilted by theta about y: its lower end's lowest rim point has
  // dist = z0 - h cos(theta) - r sin(theta); the upper end's, z0 + h cos(theta) - r sin(theta);
  // the other two corners of the triangle inscribed in the lower rim,
  // z0 - h cos(theta) + r sin(theta) / 2
  const double r = 0.2, h = 0.3, theta = 0.3, z0 = 0.25;
  const std::array<double, 3> plane{0, 0, 1}, cyl{r, h, 0};
  GeomFrame<double> g2 = at({0.1, -0.1, z0}, rotation(kY, theta));
  double c = std::cos(theta), s = std::sin(theta);
  Contacts k = pair_contacts(plane_cylinder<double>, at({}), plane, g2, cyl);
  ASSERT_EQ(k.size(), 3u);  // the upper end is above the plane
  EXPECT_NEAR(k[0].dist, z0 - h * c - r * s, 1e-15);
  // the lowest rim point: centre - h a + r (the rim direction pointing down), a = (s, 0, c)
  Vec3<double> low = g2.pos - h * Vec3<double>{s, 0, c} + r * Vec3<double>{c, 0, -s};
  expect_vec(k[0].pos, low - (0.5 * k[0].dist) * kZ);
  expect_vec(k[0].normal, kZ);
  for (int i = 1; i < 3; ++i) EXPECT_NEAR(k[i].dist, z0 - h * c + r * s / 2, 1e-15);
  // the triangle corners are r sqrt(3) / 2 either side of the tilt plane (y = -0.1)
  EXPECT_NEAR(k[1].pos.y + 0.1, r * std::sqrt(3.0) / 2, 1e-15);
  EXPECT_NEAR(k[2].pos.y + 0.1, -r * std::sqrt(3.0) / 2, 1e-15);
  // lowered by 2 h cos(theta): the upper end's rim point joins as the second contact
  g2.pos.z -= 2 * h * c;
  k = pair_contacts(plane_cylinder<double>, at({}), plane, g2, cyl);
  ASSERT_EQ(k.size(), 4u);
  EXPECT_NEAR(k[1].dist, z0 - 2 * h * c + h * c - r * s, 1e-15);
}

TEST(PlaneCylinder, UprightAndLyingCylinders) {
  // upright at height z0 (disk parallel to the plane: the rim direction is the cylinder's x):
  // the first point (r, 0, -h) and the triangle (-r/2, +-r sqrt(3)/2, -h), all dist = z0 - h
  const double r = 0.2, h = 0.3;
  const std::array<double, 3> plane{0, 0, 1}, cyl{r, h, 0};
  Contacts k = pair_contacts(plane_cylinder<double>, at({}), plane, at({0, 0, h - 0.01}), cyl);
  ASSERT_EQ(k.size(), 3u);
  expect_vec(k[0].pos, {r, 0, -0.005});
  for (int i = 1; i < 3; ++i) {
    EXPECT_NEAR(k[i].dist, -0.01, 1e-15);
    EXPECT_NEAR(k[i].pos.x, -r / 2, 1e-15);
    EXPECT_NEAR(std::abs(k[i].pos.y), r * std::sqrt(3.0) / 2, 1e-15);
  }
  // lying along x at height z0: the two ends of the lowest line, (+-h, 0, z0 - r), dist z0 - r
  k = pair_contacts(plane_cylinder<double>, at({}), plane,
                    at({0, 0, r - 0.02}, rotation(kY, M_PI / 2)), cyl);
  ASSERT_EQ(k.size(), 2u);
  for (const auto& x : k) EXPECT_NEAR(x.dist, -0.02, 1e-15);
  EXPECT_NEAR(std::abs(k[0].pos.x), h, 1e-15);
  EXPECT_NEAR(k[0].pos.x, -k[1].pos.x, 1e-15);
  // above the margin: nothing
  EXPECT_TRUE(
      pair_contacts(plane_cylinder<double>, at({}), plane, at({0, 0, h + 0.01}), cyl).empty());
}

// ---- plane : ellipsoid -------------------------------------------------------------------

TEST(PlaneEllipsoid, LowestPointIsTheSupportPoint) {
  // for plane normal n in the ellipsoid frame, n_l = R2^T n, the lowest point is
  // x = -S^2 n_l / |S n_l| (S = diag(semi-axes)); dist = n . (p2 + R2 x - p1)
  const std::array<double, 3> plane{0, 0, 1}, ell{0.3, 0.2, 0.1};
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int t = 0; t < 20; ++t) {
    GeomFrame<double> g1 = at({u(rng), u(rng), u(rng)}, rotation({u(rng), u(rng), u(rng)}, u(rng)));
    Quat<double> q2 = rotation({u(rng), u(rng), u(rng)}, 3 * u(rng));
    Vec3<double> n = g1.rot.col(2);
    GeomFrame<double> g2 = at(g1.pos + 0.1 * n + Vec3<double>{0.2 * u(rng), 0.2 * u(rng), 0}, q2);
    Vec3<double> nl = mul_transpose(g2.rot, n);
    Vec3<double> sn{ell[0] * nl.x, ell[1] * nl.y, ell[2] * nl.z};
    Vec3<double> x = (-1 / norm(sn)) * Vec3<double>{ell[0] * sn.x, ell[1] * sn.y, ell[2] * sn.z};
    Vec3<double> w = g2.pos + g2.rot * x;
    double dist = dot(n, w - g1.pos);
    Contacts k = pair_contacts(plane_ellipsoid<double>, g1, plane, g2, ell, 1.0);
    ASSERT_EQ(k.size(), 1u);
    EXPECT_NEAR(k[0].dist, dist, 1e-14);
    expect_vec(k[0].pos, w - (dist / 2) * n, 1e-14);
    expect_vec(k[0].normal, n, 1e-15);
    // the support point lies on the ellipsoid and its outward normal S^-2 x is along -n_l
    EXPECT_NEAR(x.x * x.x / 0.09 + x.y * x.y / 0.04 + x.z * x.z / 0.01, 1, 1e-14);
    Vec3<double> g{x.x / 0.09, x.y / 0.04, x.z / 0.01};
    EXPECT_NEAR(dot(g, nl) / norm(g), -1, 1e-14);
  }
  // axis-aligned: an ellipsoid with its z semi-axis 0.1 at height 0.08 has dist -0.02
  Contacts k = pair_contacts(plane_ellipsoid<double>, at({}), plane, at({0.4, 0.5, 0.08}), ell);
  ASSERT_EQ(k.size(), 1u);
  EXPECT_NEAR(k[0].dist, -0.02, 1e-15);
  expect_vec(k[0].pos, {0.4, 0.5, -0.01});
  EXPECT_TRUE(pair_contacts(plane_ellipsoid<double>, at({}), plane, at({0, 0, 0.11}), ell).empty());
}

// ---- sphere : cylinder -------------------------------------------------------------------

TEST(SphereCylinder, SideCapRimAndInside) {
  // cylinder (r 0.2, h 0.3) upright at the origin, sphere of radius 0.1 (geom1)
  const std::array<double, 3> sphere{0.1, 0, 0}, cyl{0.2, 0.3, 0};
  GeomFrame<double> g2 = at({});
  // side: centre (0.28, 0, 0.1): dist = 0.28 - 0.2 - 0.1, normal -x (sphere to cylinder)
  Contacts k = pair_contacts(sphere_cylinder<double>, at({0.28, 0, 0.1}), sphere, g2, cyl);
  ASSERT_EQ(k.size(), 1u);
  EXPECT_NEAR(k[0].dist, -0.02, 1e-15);
  expect_vec(k[0].normal, -kX);
  expect_vec(k[0].pos, {0.19, 0, 0.1});
  // cap: centre (0.05, 0.05, 0.38): dist = 0.38 - 0.3 - 0.1, normal -z
  k = pair_contacts(sphere_cylinder<double>, at({0.05, 0.05, 0.38}), sphere, g2, cyl);
  ASSERT_EQ(k.size(), 1u);
  EXPECT_NEAR(k[0].dist, -0.02, 1e-15);
  expect_vec(k[0].normal, -kZ);
  expect_vec(k[0].pos, {0.05, 0.05, 0.29});
  // bottom cap: centre below, normal +z
  k = pair_contacts(sphere_cylinder<double>, at({0, 0.1, -0.35}), sphere, g2, cyl);
  ASSERT_EQ(k.size(), 1u);
  EXPECT_NEAR(k[0].dist, -0.05, 1e-15);
  expect_vec(k[0].normal, kZ);
  // rim: centre (0.2 + 0.06, 0, 0.3 + 0.08): the rim point (0.2, 0, 0.3) at distance 0.1
  k = pair_contacts(sphere_cylinder<double>, at({0.26, 0, 0.38}), sphere, g2, cyl);
  ASSERT_EQ(k.size(), 1u);
  EXPECT_NEAR(k[0].dist, 0.1 - 0.1, 1e-15);
  expect_vec(k[0].normal, {-0.6, 0, -0.8}, 1e-15);
  // inside, nearer the side (0.05 from it) than the cap (0.2): the side, dist = -0.05 - 0.1
  k = pair_contacts(sphere_cylinder<double>, at({0.15, 0, 0.1}), sphere, g2, cyl);
  ASSERT_EQ(k.size(), 1u);
  EXPECT_NEAR(k[0].dist, -0.15, 1e-15);
  expect_vec(k[0].normal, -kX);
  // inside, nearer the cap (0.02) than the side (0.1): the cap, dist = -0.02 - 0.1
  k = pair_contacts(sphere_cylinder<double>, at({0.1, 0, 0.28}), sphere, g2, cyl);
  ASSERT_EQ(k.size(), 1u);
  EXPECT_NEAR(k[0].dist, -0.12, 1e-15);
  expect_vec(k[0].normal, -kZ);
  // apart: nothing
  EXPECT_TRUE(pair_contacts(sphere_cylinder<double>, at({0.5, 0, 0}), sphere, g2, cyl).empty());
}

// ---- adjoints ----------------------------------------------------------------------------

// The 30 inputs of a pair: pos1 (3), rot1 (9), size1 (3), pos2 (3), rot2 (9), size2 (3).
using Inputs = std::array<double, 30>;

template <class T>
struct Pair {
  GeomFrame<T> g1, g2;
  T s1[3] = {}, s2[3] = {};
  T& operator[](int k) {
    if (k < 3) return g1.pos[k];
    if (k < 12) return g1.rot.m[k - 3];
    if (k < 15) return s1[k - 12];
    if (k < 18) return g2.pos[k - 15];
    if (k < 27) return g2.rot.m[k - 18];
    return s2[k - 27];
  }
};

// one of the pairs, as forward and adjoint on a Pair (the hull, when there is one, is fixed)
struct PairUnderTest {
  std::string name;
  std::array<double, 3> size1, size2;
  std::function<int(Pair<double>&, ContactPoint<double>*)> fwd;
  std::function<int(Pair<Dual<double, 1>>&, ContactPoint<Dual<double, 1>>*)> fwd_dual;  // or null
  std::function<void(Pair<double>&, int, const ContactPoint<double>*, Pair<double>&)> adj;
  double spread;  // geom2's offset from geom1 along the plane normal (or per coordinate)
  int min_contacts;
};

std::vector<double> flatten(const ContactPoint<double>* c, int n) {
  std::vector<double> y;
  for (int k = 0; k < n; ++k) {
    for (int i = 0; i < 3; ++i) y.push_back(c[k].pos[i]);
    for (int i = 0; i < 3; ++i) y.push_back(c[k].normal[i]);
    y.push_back(c[k].dist);
  }
  return y;
}

std::vector<double> contacts_at(const PairUnderTest& t, const Inputs& x, const Inputs& v, double s,
                                int* n) {
  Pair<double> p;
  for (int k = 0; k < 30; ++k) p[k] = x[k] + s * v[k];
  ContactPoint<double> out[kMaxPairContacts];
  *n = t.fwd(p, out);
  return flatten(out, *n);
}

void check_adjoint(const PairUnderTest& t, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int attempt = 0; attempt < 20000; ++attempt) {
    Pair<double> p;
    p.g1 = at({0.1 * u(rng), 0.1 * u(rng), 0.1 * u(rng)},
              Quat<double>{u(rng), u(rng), u(rng), u(rng)});
    Vec3<double> offset = t.spread * Vec3<double>{u(rng), u(rng), u(rng)};
    p.g2 = at(p.g1.pos + offset, Quat<double>{u(rng), u(rng), u(rng), u(rng)});
    for (int i = 0; i < 3; ++i) p.s1[i] = t.size1[i], p.s2[i] = t.size2[i];
    Inputs x, v;
    for (int k = 0; k < 30; ++k) x[k] = p[k], v[k] = u(rng);

    // the wanted number of contacts, the same nearby (no feature switch)
    int n, n_plus, n_minus, n_far_plus, n_far_minus;
    const double h = 1e-6;
    std::vector<double> y = contacts_at(t, x, v, 0, &n);
    if (n < t.min_contacts) continue;
    std::vector<double> yp = contacts_at(t, x, v, h, &n_plus);
    std::vector<double> ym = contacts_at(t, x, v, -h, &n_minus);
    contacts_at(t, x, v, 1e-4, &n_far_plus);
    contacts_at(t, x, v, -1e-4, &n_far_minus);
    if (n_plus != n || n_minus != n || n_far_plus != n || n_far_minus != n) continue;
    std::vector<double> fd(y.size());
    double scale = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      fd[i] = (yp[i] - ym[i]) / (2 * h);
      scale = std::max(scale, std::abs(fd[i]));
    }
    if (scale > 1e3) continue;  // a contact jumped: a switch between +-h

    // reverse mode: <w, J v> = <J^T w, v>, J v by central differences
    std::vector<double> w(y.size());
    for (double& z : w) z = u(rng);
    Pair<double> at_x, g;
    for (int k = 0; k < 30; ++k) at_x[k] = x[k], g[k] = 0;
    ContactPoint<double> adj[kMaxPairContacts];
    for (int c = 0; c < n; ++c) {
      adj[c].pos = {w[7 * c], w[7 * c + 1], w[7 * c + 2]};
      adj[c].normal = {w[7 * c + 3], w[7 * c + 4], w[7 * c + 5]};
      adj[c].dist = w[7 * c + 6];
    }
    t.adj(at_x, n, adj, g);
    double jv_fd = 0, vjp = 0, wnorm = 0;
    for (size_t i = 0; i < y.size(); ++i) jv_fd += w[i] * fd[i], wnorm += std::abs(w[i]);
    for (int k = 0; k < 30; ++k) vjp += g[k] * v[k];
    EXPECT_NEAR(vjp, jv_fd, 1e-6 * (std::abs(jv_fd) + wnorm * scale + 1))
        << t.name << ": " << n << " contacts";

    // forward mode on dual numbers, same code: <w, J v> to 1e-10
    if (t.fwd_dual) {
      using D = Dual<double, 1>;
      Pair<D> pd;
      for (int k = 0; k < 30; ++k) pd[k] = D(x[k]), pd[k].d[0] = v[k];
      ContactPoint<D> out[kMaxPairContacts];
      ASSERT_EQ(t.fwd_dual(pd, out), n);
      double jv = 0;
      for (int c = 0; c < n; ++c) {
        for (int i = 0; i < 3; ++i)
          jv += w[7 * c + i] * out[c].pos[i].d[0] + w[7 * c + 3 + i] * out[c].normal[i].d[0];
        jv += w[7 * c + 6] * out[c].dist.d[0];
      }
      EXPECT_NEAR(vjp, jv, 1e-10 * (std::abs(jv) + 1)) << t.name << ": dual numbers";
    }
    return;
  }
  FAIL() << t.name << ": no configuration with " << t.min_contacts << " contacts found";
}

// a closed-form pair (no hull) as a PairUnderTest
#define PHX_PAIR(f, adj_f)                                                                        \
  [](Pair<double>& p, ContactPoint<double>* out) { return f(p.g1, p.s1, p.g2, p.s2, 0.0, out); }, \
      [](Pair<Dual<double, 1>>& p, ContactPoint<Dual<double, 1>>* out) {                          \
        return f(p.g1, p.s1, p.g2, p.s2, Dual<double, 1>(0.0), out);                              \
      },                                                                                          \
      [](Pair<double>& p, int n, const ContactPoint<double>* a, Pair<double>& g) {                \
        adj_f(p.g1, p.s1, p.g2, p.s2, 0.0, n, a, g.g1, g.s1, g.g2, g.s2);                         \
      }

std::vector<PairUnderTest> pairs_under_test() {
  using D = Dual<double, 1>;
  static PrismHull<double> box(rectangle(0.3, 0.2), 0.1), hex(regular_polygon(6, 0.25), 0.1);
  static PrismHull<D> box_d(rectangle(0.3, 0.2), 0.1), hex_d(regular_polygon(6, 0.25), 0.1);
  struct HullPair {
    std::function<int(Pair<double>&, ContactPoint<double>*)> fwd;
    std::function<int(Pair<D>&, ContactPoint<D>*)> fwd_dual;
    std::function<void(Pair<double>&, int, const ContactPoint<double>*, Pair<double>&)> adj;
  };
  auto hull_pair = [](const PrismHull<double>* hull, const PrismHull<D>* hull_d) {
    return HullPair{[hull](Pair<double>& p, ContactPoint<double>* out) {
                      return plane_convex(p.g1, p.s1, hull->view(), p.g2, 0.0, out);
                    },
                    [hull_d](Pair<D>& p, ContactPoint<D>* out) {
                      return plane_convex(p.g1, p.s1, hull_d->view(), p.g2, D(0.0), out);
                    },
                    [hull](Pair<double>& p, int n, const ContactPoint<double>* a, Pair<double>& g) {
                      adj_plane_convex(p.g1, p.s1, hull->view(), p.g2, 0.0, n, a, g.g1, g.s1, g.g2);
                    }};
  };
  HullPair b = hull_pair(&box, &box_d), x = hull_pair(&hex, &hex_d);
  const std::array<double, 3> plane{0, 0, 1}, cyl{0.2, 0.3, 0}, ell{0.3, 0.2, 0.1},
      sphere{0.15, 0, 0};
  return {
      {"plane_mesh_box", plane, {}, b.fwd, b.fwd_dual, b.adj, 0.3, 1},
      {"plane_mesh_box_three", plane, {}, b.fwd, b.fwd_dual, b.adj, 0.3, 3},
      {"plane_mesh_hex", plane, {}, x.fwd, x.fwd_dual, x.adj, 0.3, 1},
      {"plane_mesh_hex_three", plane, {}, x.fwd, x.fwd_dual, x.adj, 0.3, 3},
      {"plane_cylinder", plane, cyl, PHX_PAIR(plane_cylinder, adj_plane_cylinder), 0.4, 1},
      {"plane_cylinder_two", plane, cyl, PHX_PAIR(plane_cylinder, adj_plane_cylinder), 0.3, 2},
      {"plane_cylinder_four", plane, cyl, PHX_PAIR(plane_cylinder, adj_plane_cylinder), 0.2, 4},
      {"plane_ellipsoid", plane, ell, PHX_PAIR(plane_ellipsoid, adj_plane_ellipsoid), 0.3, 1},
      {"sphere_cylinder", sphere, cyl, PHX_PAIR(sphere_cylinder, adj_sphere_cylinder), 0.5, 1},
  };
}
#undef PHX_PAIR

class PlaneConvexAdjoint : public ::testing::TestWithParam<std::tuple<int, unsigned>> {};

TEST_P(PlaneConvexAdjoint, MatchesFiniteDifferencesAndDualNumbers) {
  auto [i, seed] = GetParam();
  check_adjoint(pairs_under_test()[i], seed);
}

INSTANTIATE_TEST_SUITE_P(Pairs, PlaneConvexAdjoint,
                         ::testing::Combine(::testing::Range(0, 9),
                                            ::testing::Values(1u, 2u, 3u, 4u, 5u)),
                         [](const auto& info) {
                           return pairs_under_test()[std::get<0>(info.param)].name + "_" +
                                  std::to_string(std::get<1>(info.param));
                         });

// the three feature branches of sphere_cylinder, each at its own configuration
TEST(SphereCylinderAdjoint, EachFeature) {
  // sphere radius 0.1 around a cylinder (r 0.2, h 0.3) at the identity; centres near the side,
  // the cap and the rim, perturbed along random directions
  const std::array<double, 3> sphere{0.1, 0, 0}, cyl{0.2, 0.3, 0};
  const Vec3<double> centres[] = {{0.27, 0.03, 0.1}, {0.05, 0.08, 0.37}, {0.24, 0.04, -0.36}};
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(-1, 1);
  for (const auto& c : centres) {
    PairUnderTest t{"sphere_cylinder_feature", sphere, cyl, nullptr, nullptr, nullptr, 0, 1};
    Pair<double> p;
    p.g1 = at(c);
    p.g2 = at({}, rotation({u(rng), u(rng), u(rng)}, 0.05));
    for (int i = 0; i < 3; ++i) p.s1[i] = sphere[i], p.s2[i] = cyl[i];
    Inputs x, v;
    for (int k = 0; k < 30; ++k) x[k] = p[k], v[k] = u(rng);
    auto y = [&](double s) {
      Pair<double> q;
      for (int k = 0; k < 30; ++k) q[k] = x[k] + s * v[k];
      ContactPoint<double> out[1];
      int n = sphere_cylinder(q.g1, q.s1, q.g2, q.s2, 0.0, out);
      EXPECT_EQ(n, 1);
      return flatten(out, n);
    };
    std::vector<double> yp = y(1e-6), ym = y(-1e-6), w(7);
    for (double& z : w) z = u(rng);
    double jv = 0;
    for (int i = 0; i < 7; ++i) jv += w[i] * (yp[i] - ym[i]) / 2e-6;
    Pair<double> g;
    for (int k = 0; k < 30; ++k) g[k] = 0;
    ContactPoint<double> a;
    a.pos = {w[0], w[1], w[2]};
    a.normal = {w[3], w[4], w[5]};
    a.dist = w[6];
    adj_sphere_cylinder(p.g1, p.s1, p.g2, p.s2, 0.0, 1, &a, g.g1, g.s1, g.g2, g.s2);
    double vjp = 0;
    for (int k = 0; k < 30; ++k) vjp += g[k] * v[k];
    EXPECT_NEAR(vjp, jv, 1e-6 * (std::abs(jv) + 1))
        << "centre " << c.x << ", " << c.y << ", " << c.z;
  }
}

// ---- float ---------------------------------------------------------------------------------

TEST(PlaneConvexFloat, AgreesWithDouble) {
  // the same poses in float: contacts to float precision (1e-5 of the geometry's size)
  // an irregular hexagon: a regular one's largest quadrilaterals tie, and rounding picks one
  const std::vector<std::array<double, 2>> ring = {{0.25, 0},     {0.12, 0.2},   {-0.1, 0.18},
                                                   {-0.22, 0.02}, {-0.15, -0.2}, {0.1, -0.19}};
  PrismHull<double> hex_d(ring, 0.1);
  PrismHull<float> hex_f(ring, 0.1);
  const std::array<double, 3> cyl{0.2, 0.3, 0}, ell{0.3, 0.2, 0.1}, plane{0, 0, 1},
      sphere{0.25, 0, 0};
  const float cyl_f[3] = {0.2f, 0.3f, 0}, ell_f[3] = {0.3f, 0.2f, 0.1f}, plane_f[3] = {0, 0, 1},
              sphere_f[3] = {0.25f, 0, 0};
  std::mt19937 rng(13);
  std::uniform_real_distribution<double> u(-1, 1);
  int compared = 0;
  for (int t = 0; t < 50; ++t) {
    Vec3<double> pos{0.2 * u(rng), 0.2 * u(rng), 0.1 + 0.2 * u(rng)};
    Quat<double> q = rotation({u(rng), u(rng), u(rng)}, 2 * u(rng));
    auto compare = [&](const Contacts& d, const ContactPoint<float>* f, int nf) {
      ASSERT_EQ(int(d.size()), nf);
      for (int k = 0; k < nf; ++k) {
        expect_vec(d[k].pos, {f[k].pos.x, f[k].pos.y, f[k].pos.z}, 1e-5);
        expect_vec(d[k].normal, {f[k].normal.x, f[k].normal.y, f[k].normal.z}, 1e-6);
        EXPECT_NEAR(d[k].dist, f[k].dist, 1e-5);
      }
      compared += nf;
    };
    // near-ties of depth (feature switches) can differ between precisions: skip those poses
    ContactPoint<float> out[4];
    Contacts d = plane_convex_contacts(at({}), hex_d.view(), at(pos, q));
    Contacts f = plane_convex_contacts(at<float>({}), hex_f.view(), at<float>(pos, q));
    if (d.size() == f.size()) {
      std::vector<ContactPoint<float>> fc;
      for (const auto& c : f)
        fc.push_back({{float(c.pos.x), float(c.pos.y), float(c.pos.z)},
                      {float(c.normal.x), float(c.normal.y), float(c.normal.z)},
                      float(c.dist)});
      compare(d, fc.data(), int(fc.size()));
    }
    SCOPED_TRACE("pose " + std::to_string(t));
    int nf = plane_cylinder(at<float>({}), plane_f, at<float>(pos, q), cyl_f, 0.0f, out);
    compare(pair_contacts(plane_cylinder<double>, at({}), plane, at(pos, q), cyl), out, nf);
    nf = plane_ellipsoid(at<float>({}), plane_f, at<float>(pos, q), ell_f, 1.0f, out);
    compare(pair_contacts(plane_ellipsoid<double>, at({}), plane, at(pos, q), ell, 1.0), out, nf);
    nf = sphere_cylinder(at<float>({}), sphere_f, at<float>(pos, q), cyl_f, 1.0f, out);
    compare(pair_contacts(sphere_cylinder<double>, at({}), sphere, at(pos, q), cyl, 1.0), out, nf);
  }
  EXPECT_GT(compared, 100);
}

TEST(PlaneConvexFloat, AdjointsAgreeWithDouble) {
  // the adjoints of one penetrating pose of each pair in float and double, to 1e-4 of the
  // gradient's size (float rounding of O(1) inputs, through a few dozen operations)
  PrismHull<double> box_d(rectangle(0.3, 0.2), 0.1);
  PrismHull<float> box_f(rectangle(0.3, 0.2), 0.1);
  const Vec3<double> pos{0.05, -0.02, 0.08};
  const Quat<double> q = rotation({0.3, -0.5, 0.2}, 0.35);
  const double s2[4][3] = {{0, 0, 0}, {0.2, 0.3, 0}, {0.3, 0.2, 0.1}, {0.2, 0.3, 0}};
  for (int pair = 0; pair < 4; ++pair) {
    SCOPED_TRACE("pair " + std::to_string(pair));
    auto run = [&](auto zero, auto& grads, auto& hull) {
      using T = decltype(zero);
      GeomFrame<T> g1 = at<T>({}), g2 = at<T>(pos, q), a1{}, a2{};
      if (pair == 3) g1 = at<T>({0.15, 0, 0.2});  // a sphere of radius 0.1 by the cylinder
      T size1[3] = {T(pair == 3 ? 0.1 : 0), T(0), T(1)}, size2[3], as1[3] = {}, as2[3] = {};
      for (int i = 0; i < 3; ++i) size2[i] = T(s2[pair][i]);
      ContactPoint<T> out[4], adj[4];
      int n = pair == 0   ? plane_convex(g1, size1, hull.view(), g2, T(0), out)
              : pair == 1 ? plane_cylinder(g1, size1, g2, size2, T(0), out)
              : pair == 2 ? plane_ellipsoid(g1, size1, g2, size2, T(0), out)
                          : sphere_cylinder(g1, size1, g2, size2, T(0), out);
      for (int k = 0; k < n; ++k) {
        adj[k].pos = {T(0.3), T(-0.2 * k), T(0.5)};
        adj[k].normal = {T(0.1), T(0.7), T(-0.4)};
        adj[k].dist = T(1 + k);
      }
      if (pair == 0) adj_plane_convex(g1, size1, hull.view(), g2, T(0), n, adj, a1, as1, a2);
      if (pair == 1) adj_plane_cylinder(g1, size1, g2, size2, T(0), n, adj, a1, as1, a2, as2);
      if (pair == 2) adj_plane_ellipsoid(g1, size1, g2, size2, T(0), n, adj, a1, as1, a2, as2);
      if (pair == 3) adj_sphere_cylinder(g1, size1, g2, size2, T(0), n, adj, a1, as1, a2, as2);
      grads.clear();
      for (int i = 0; i < 3; ++i) grads.insert(grads.end(), {a1.pos[i], a2.pos[i], as1[i], as2[i]});
      for (int i = 0; i < 9; ++i) grads.insert(grads.end(), {a1.rot.m[i], a2.rot.m[i]});
      return n;
    };
    std::vector<double> gd;
    std::vector<float> gf;
    int nd = run(0.0, gd, box_d), nf = run(0.0f, gf, box_f);
    ASSERT_EQ(nd, nf);
    ASSERT_GT(nd, 0);
    double scale = 0;
    for (double g : gd) scale = std::max(scale, std::abs(g));
    for (size_t i = 0; i < gd.size(); ++i) EXPECT_NEAR(gf[i], gd[i], 1e-4 * scale) << i;
  }
}

}  // namespace
}  // namespace phx
