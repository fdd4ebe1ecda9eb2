// Tests of mesh files and convex hulls (host/mesh.cpp): the hull's structure (coplanar triangles
// merged into faces, outward normals, counter-clockwise faces, edges without face diagonals,
// Euler's formula), its geometry against a brute-force hull, maxhullvert, errors, the mesh
// arrays add_mesh appends, and STL, OBJ and DAE files read with their transforms and scale.
// Tolerances: 1e-12 for hull geometry in double (a few roundings of numbers of order 1); 1e-6
// for vertices read from files, which assimp holds in float.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "host/mesh.h"

namespace phx {
namespace {

namespace fs = std::filesystem;
constexpr double kTol = 1e-12;
constexpr double kFileTol = 1e-6;

Point3 sub(const Point3& a, const Point3& b) {
  return {a[0] - b[0], a[1] - b[1], a[2] - b[2]};
}
Point3 cross(const Point3& a, const Point3& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
double dot(const Point3& a, const Point3& b) {
  return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}

const Point3& face_vertex(const Hull& h, int f, int i) {
  return h.vertices[h.polyvert[h.polyadr[f] + i % h.polynum[f]]];
}

// The invariants of a hull of closed convex faces: unit outward normals, face vertices on the
// face's plane and counter-clockwise about its normal (each turn's cross product along it), every
// vertex below every face plane, each directed face edge once and its reverse once (two faces
// per edge), the adjacency exactly the faces' edges (so no diagonal of a merged face) and
// symmetric, and Euler's formula V - E + F = 2. tol: distances, relative to the hull's size.
void expect_valid_hull(const Hull& h, double tol = kTol) {
  int nv = h.nvert(), nf = h.npoly();
  ASSERT_EQ(h.point_ids.size(), size_t(nv));
  ASSERT_EQ(h.adjadr.size(), size_t(nv));
  ASSERT_EQ(h.adjnum.size(), size_t(nv));
  ASSERT_EQ(h.polyadr.size(), size_t(nf));
  ASSERT_EQ(h.polynum.size(), size_t(nf));
  double size = 0;
  for (const Point3& p : h.vertices) size = std::max(size, std::sqrt(dot(p, p)));
  std::set<std::pair<int, int>> directed;
  for (int f = 0; f < nf; f++) {
    const Point3& n = h.normals[f];
    EXPECT_NEAR(dot(n, n), 1, kTol) << "face " << f;
    ASSERT_GE(h.polynum[f], 3) << "face " << f;
    double offset = dot(n, face_vertex(h, f, 0));
    for (int i = 0; i < h.polynum[f]; i++) {
      const Point3 &a = face_vertex(h, f, i), &b = face_vertex(h, f, i + 1),
                   &c = face_vertex(h, f, i + 2);
      EXPECT_NEAR(dot(n, a), offset, tol * size) << "face " << f << " vertex " << i;
      EXPECT_GT(dot(cross(sub(b, a), sub(c, b)), n), 0) << "face " << f << " turn " << i;
      int ia = h.polyvert[h.polyadr[f] + i], ib = h.polyvert[h.polyadr[f] + (i + 1) % h.polynum[f]];
      EXPECT_TRUE(directed.insert({ia, ib}).second) << "edge " << ia << "-" << ib << " twice";
    }
    for (int v = 0; v < nv; v++) EXPECT_LE(dot(n, h.vertices[v]) - offset, tol * size);
  }
  std::set<std::pair<int, int>> edges;
  for (auto [a, b] : directed) {
    EXPECT_TRUE(directed.count({b, a})) << "edge " << a << "-" << b << " in one face only";
    edges.insert({std::min(a, b), std::max(a, b)});
  }
  std::set<std::pair<int, int>> adjacency;
  for (int v = 0; v < nv; v++) {
    for (int k = h.adjadr[v]; k < h.adjadr[v] + h.adjnum[v]; k++) {
      int w = h.adj[k];
      ASSERT_TRUE(w >= 0 && w < nv && w != v);
      adjacency.insert({v, w});
    }
  }
  for (auto [a, b] : adjacency) EXPECT_TRUE(adjacency.count({b, a})) << a << "-" << b;
  EXPECT_EQ(adjacency.size(), 2 * edges.size());
  for (auto [a, b] : edges) EXPECT_TRUE(adjacency.count({a, b})) << a << "-" << b;
  EXPECT_EQ(nv - h.nedge() + nf, 2) << "Euler's formula";
}

// the hull's volume: tetrahedra from a point inside to each face's fan of triangles
double hull_volume(const Hull& h) {
  Point3 c = {0, 0, 0};
  for (const Point3& p : h.vertices)
    for (int k = 0; k < 3; k++) c[k] += p[k] / h.nvert();
  double volume = 0;
  for (int f = 0; f < h.npoly(); f++) {
    const Point3& a = face_vertex(h, f, 0);
    for (int i = 1; i + 1 < h.polynum[f]; i++)
      volume +=
          dot(sub(a, c), cross(sub(face_vertex(h, f, i), c), sub(face_vertex(h, f, i + 1), c))) / 6;
  }
  return volume;
}

// points uniformly distributed on the unit sphere
std::vector<Point3> sphere_points(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<Point3> points(n);
  for (Point3& p : points) {
    for (double& x : p) x = normal(rng);
    double r = std::sqrt(dot(p, p));
    for (double& x : p) x /= r;
  }
  return points;
}

// a box's 8 corners (x fastest), half-sizes h
std::vector<Point3> box_corners(const Point3& h) {
  std::vector<Point3> corners;
  for (int i = 0; i < 8; i++)
    corners.push_back({(i & 1 ? 1 : -1) * h[0], (i & 2 ? 1 : -1) * h[1], (i & 4 ? 1 : -1) * h[2]});
  return corners;
}

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

//------------------------------------------------------------------ hulls

TEST(ConvexHull, BoxWithInteriorAndBoundaryPoints) {
  // the box's corners, then points inside it, at its face centres and its edge midpoints: the
  // hull is the box, 8 vertices (the corners), 6 rectangles, 12 edges
  Point3 half = {1, 2, 3};
  std::vector<Point3> points = box_corners(half);
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> unit(-0.9, 0.9);
  for (int i = 0; i < 50; i++) points.push_back({unit(rng) * 1, unit(rng) * 2, unit(rng) * 3});
  for (int k = 0; k < 3; k++) {
    for (double s : {-1.0, 1.0}) {
      Point3 centre = {0, 0, 0};
      centre[k] = s * half[k];
      points.push_back(centre);
      Point3 mid = {half[0], half[1], half[2]};
      mid[k] = 0;
      mid[(k + 1) % 3] *= s;
      points.push_back(mid);
    }
  }
  Hull h = convex_hull(points);
  expect_valid_hull(h);
  ASSERT_EQ(h.nvert(), 8);
  EXPECT_EQ(h.point_ids, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  for (int v = 0; v < 8; v++) EXPECT_EQ(h.vertices[v], points[v]);
  EXPECT_EQ(h.npoly(), 6);
  EXPECT_EQ(h.nedge(), 12);
  // each face a rectangle with normal +-e_k and its four corners at coordinate k = +-half[k]
  std::set<std::pair<int, int>> normals;  // (axis, sign)
  for (int f = 0; f < h.npoly(); f++) {
    EXPECT_EQ(h.polynum[f], 4);
    const Point3& n = h.normals[f];
    int k = std::abs(n[0]) > 0.5 ? 0 : std::abs(n[1]) > 0.5 ? 1 : 2;
    double s = n[k] > 0 ? 1 : -1;
    for (int j = 0; j < 3; j++) EXPECT_NEAR(n[j], j == k ? s : 0, kTol) << "face " << f;
    for (int i = 0; i < 4; i++) EXPECT_NEAR(face_vertex(h, f, i)[k], s * half[k], kTol);
    normals.insert({k, int(s)});
  }
  EXPECT_EQ(normals.size(), 6u);
  // degree 3, each neighbour along a box edge: differs in exactly one coordinate
  for (int v = 0; v < 8; v++) {
    EXPECT_EQ(h.adjnum[v], 3);
    for (int k = h.adjadr[v]; k < h.adjadr[v] + h.adjnum[v]; k++) {
      Point3 d = sub(h.vertices[h.adj[k]], h.vertices[v]);
      EXPECT_EQ((d[0] != 0) + (d[1] != 0) + (d[2] != 0), 1) << v << "-" << h.adj[k];
    }
  }
  EXPECT_NEAR(hull_volume(h), 8 * half[0] * half[1] * half[2], kTol * 48);
}

// the hull's volume by brute force: the triangles (i, j, k) with every point on one side of
// their plane are its faces (points in general position), each the base of a tetrahedron from
// the points' centroid, which is inside
double brute_force_volume(const std::vector<Point3>& p) {
  int n = static_cast<int>(p.size());
  Point3 c = {0, 0, 0};
  for (const Point3& q : p)
    for (int k = 0; k < 3; k++) c[k] += q[k] / n;
  double volume = 0;
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      for (int k = j + 1; k < n; k++) {
        Point3 normal = cross(sub(p[j], p[i]), sub(p[k], p[i]));
        bool above = false, below = false;
        for (int l = 0; l < n && !(above && below); l++) {
          double d = dot(normal, sub(p[l], p[i]));
          above |= d > 1e-14;
          below |= d < -1e-14;
        }
        if (!(above && below)) volume += std::abs(dot(normal, sub(p[i], c))) / 6;
      }
  return volume;
}

TEST(ConvexHull, SpherePointsAgainstBruteForce) {
  // every point on a sphere is extreme; every point lies inside or on every face plane; the
  // volume is the brute-force hull's (both exact up to roundoff, so far tighter than 1 %)
  std::vector<Point3> points = sphere_points(60, 7);
  Hull h = convex_hull(points);
  expect_valid_hull(h);
  EXPECT_EQ(h.nvert(), 60);
  for (int f = 0; f < h.npoly(); f++) {
    double offset = dot(h.normals[f], face_vertex(h, f, 0));
    for (const Point3& p : points) EXPECT_LE(dot(h.normals[f], p) - offset, kTol);
  }
  double reference = brute_force_volume(points);
  EXPECT_NEAR(hull_volume(h), reference, 1e-10 * reference);
  // the sphere's volume bounds it from above
  EXPECT_LT(reference, 4 * M_PI / 3);
  EXPECT_GT(reference, 0.8 * 4 * M_PI / 3);
}

TEST(ConvexHull, MaxHullVert) {
  std::vector<Point3> points = sphere_points(200, 11);
  EXPECT_EQ(convex_hull(points).nvert(), 200);
  for (int limit : {4, 10, 25}) {
    Hull h = convex_hull(points, limit);
    expect_valid_hull(h);
    EXPECT_EQ(h.nvert(), limit);  // qhull's 'TA': its initial simplex plus limit - 4 points
    for (int v = 0; v < h.nvert(); v++) EXPECT_EQ(h.vertices[v], points[h.point_ids[v]]);
  }
  Hull tetrahedron = convex_hull(points, 4);
  EXPECT_EQ(tetrahedron.npoly(), 4);
  EXPECT_EQ(tetrahedron.nedge(), 6);
  for (int limit : {-2, 0, 3}) {
    EXPECT_THROW(convex_hull(points, limit), std::invalid_argument) << limit;
  }
}

TEST(ConvexHull, DegenerateInputNamesTheMesh) {
  std::vector<Point3> three = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}};
  std::string e = error_of([&] { convex_hull(three, -1, "mesh 'tri'"); });
  EXPECT_NE(e.find("mesh 'tri'"), std::string::npos) << e;
  EXPECT_NE(e.find("at least 4 points, got 3"), std::string::npos) << e;
  std::vector<Point3> flat, line;
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 5; j++) flat.push_back({double(i), double(j), 2.0});
  for (int i = 0; i < 6; i++) line.push_back({double(i), 2.0 * i, -1.0 * i});
  for (const auto& points : {flat, line}) {
    EXPECT_THROW(convex_hull(points, -1, "mesh 'flat'"), std::runtime_error);
    e = error_of([&] { convex_hull(points, -1, "mesh 'flat'"); });
    EXPECT_NE(e.find("mesh 'flat': no convex hull: the points are coplanar or collinear"),
              std::string::npos)
        << e;
  }
  std::vector<Point3> nan = box_corners({1, 1, 1});
  nan[3][1] = std::nan("");
  EXPECT_THROW(convex_hull(nan), std::invalid_argument);
}

TEST(ConvexHull, AddMeshAppendsWithAddresses) {
  // a box (8 vertices, 24 adjacency entries, 6 faces of 4) then a tetrahedron: the second's
  // addresses follow the first's, its ids stay local
  Model m;
  Hull box = convex_hull(box_corners({1, 1, 1}));
  Hull tet = convex_hull({{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {0, 0, 1}});
  EXPECT_EQ(add_mesh(m, box), 0);
  EXPECT_EQ(add_mesh(m, tet), 1);
  EXPECT_EQ(m.nmesh, 2);
  EXPECT_EQ(m.nmeshvert, 12);
  EXPECT_EQ(m.nmeshadj, 24 + 12);
  EXPECT_EQ(m.nmeshpoly, 10);
  EXPECT_EQ(m.nmeshpolyvert, 24 + 12);
  EXPECT_EQ(m.mesh_vertadr, (std::vector<int>{0, 8}));
  EXPECT_EQ(m.mesh_vertnum, (std::vector<int>{8, 4}));
  EXPECT_EQ(m.mesh_polyadr, (std::vector<int>{0, 6}));
  EXPECT_EQ(m.mesh_polynum, (std::vector<int>{6, 4}));
  EXPECT_EQ(m.mesh_vertadjadr[8], 24);
  EXPECT_EQ(m.mesh_polyvertadr[6], 24);
  EXPECT_EQ(m.mesh_vert.size(), 36u);
  EXPECT_EQ(m.mesh_vert[3 * 9], 1);  // the tetrahedron's vertex (1, 0, 0)
  for (int a = 24; a < 36; a++) EXPECT_LT(m.mesh_vertadj[a], 4);
  EXPECT_NO_THROW(m.validate_geom_data());
}

//------------------------------------------------------------------ files

// a folder of this process's own under the system's temporary folder, removed at exit
fs::path temp_root() {
  return fs::temp_directory_path() / ("phx_mesh_io_" + std::to_string(getpid()));
}
struct RemoveTempRoot : ::testing::Environment {
  void TearDown() override { fs::remove_all(temp_root()); }
};
const ::testing::Environment* const kRemoveTempRoot =
    ::testing::AddGlobalTestEnvironment(new RemoveTempRoot);

fs::path temp_dir(const std::string& name) {
  fs::path dir = temp_root() / name;
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

// the unit cube [0, 1]^3: corners (x fastest) and its 12 triangles, outward
const int kCubeTriangles[12][3] = {{0, 2, 3}, {0, 3, 1}, {4, 5, 7}, {4, 7, 6},
                                   {0, 1, 5}, {0, 5, 4}, {2, 6, 7}, {2, 7, 3},
                                   {0, 4, 6}, {0, 6, 2}, {1, 3, 7}, {1, 7, 5}};

Point3 cube_corner(int i) {
  return {double(i & 1), double((i >> 1) & 1), double((i >> 2) & 1)};
}

std::string cube_stl() {
  std::string s = "solid cube\n";
  for (const auto& t : kCubeTriangles) {
    s += "facet normal 0 0 0\n outer loop\n";
    for (int i : t) {
      Point3 p = cube_corner(i);
      s += "  vertex " + std::to_string(p[0]) + " " + std::to_string(p[1]) + " " +
           std::to_string(p[2]) + "\n";
    }
    s += " endloop\nendfacet\n";
  }
  return s + "endsolid cube\n";
}

std::string cube_obj() {
  std::string s = "# the unit cube, quads\n";
  for (int i = 0; i < 8; i++) {
    Point3 p = cube_corner(i);
    s += "v " + std::to_string(p[0]) + " " + std::to_string(p[1]) + " " + std::to_string(p[2]) +
         "\n";
  }
  // OBJ counts from 1
  return s + "f 1 3 4 2\nf 5 6 8 7\nf 1 2 6 5\nf 3 7 8 4\nf 1 5 7 3\nf 2 4 8 6\n";
}

std::vector<Point3> sorted(std::vector<Point3> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(MeshFiles, StlAndObjCubesGiveTheSameScaledHull) {
  fs::path dir = temp_dir("cubes");
  write(dir / "cube.stl", cube_stl());
  write(dir / "cube.obj", cube_obj());
  Point3 scale = {2, 3, 4};
  std::vector<Point3> expected;
  for (int i = 0; i < 8; i++) {
    Point3 p = cube_corner(i);
    expected.push_back({p[0] * scale[0], p[1] * scale[1], p[2] * scale[2]});
  }
  std::vector<Hull> hulls;
  for (const char* file : {"cube.stl", "cube.obj"}) {
    std::vector<Point3> vertices = read_mesh_vertices((dir / file).string(), scale);
    EXPECT_GE(vertices.size(), 8u) << file;
    for (const Point3& p : vertices) {
      bool corner = false;
      for (const Point3& q : expected) corner |= p == q;  // exact: small integers
      EXPECT_TRUE(corner) << file << ": " << p[0] << " " << p[1] << " " << p[2];
    }
    hulls.push_back(convex_hull(vertices, -1, file));
    expect_valid_hull(hulls.back());
    EXPECT_EQ(sorted(hulls.back().vertices), sorted(expected)) << file;
    EXPECT_EQ(hulls.back().npoly(), 6) << file;
    EXPECT_NEAR(hull_volume(hulls.back()), 24, kTol * 24) << file;
  }
  EXPECT_EQ(sorted(hulls[0].normals), sorted(hulls[1].normals));
}

TEST(MeshFiles, ColladaNodeTransformsAndUnitButNotUpAxis) {
  // a tetrahedron in node b (turned 90 degrees about z) inside node a (moved 10 along x), in
  // centimetres, Z_UP: vertices are 0.01 (T_a R_b p), then scaled; Z_UP is not turned to
  // assimp's Y_UP (as Pinocchio/hpp-fcl and rviz read URDF meshes)
  fs::path dir = temp_dir("dae");
  write(dir / "tet.dae", R"(<?xml version="1.0" encoding="utf-8"?>
<COLLADA xmlns="http://www.collada.org/2005/11/COLLADASchema" version="1.4.1">
  <asset><unit name="centimeter" meter="0.01"/><up_axis>Z_UP</up_axis></asset>
  <library_geometries>
    <geometry id="tet" name="tet"><mesh>
      <source id="pos"><float_array id="pos-array" count="12">1 0 0 0 2 0 0 0 3 0 0 0</float_array>
        <technique_common><accessor source="#pos-array" count="4" stride="3">
          <param name="X" type="float"/><param name="Y" type="float"/><param name="Z" type="float"/>
        </accessor></technique_common></source>
      <vertices id="verts"><input semantic="POSITION" source="#pos"/></vertices>
      <triangles count="4"><input semantic="VERTEX" source="#verts" offset="0"/>
        <p>0 1 2 0 3 1 0 2 3 1 3 2</p></triangles>
    </mesh></geometry>
  </library_geometries>
  <library_visual_scenes><visual_scene id="Scene" name="Scene">
    <node id="a" name="a"><translate>10 0 0</translate>
      <node id="b" name="b"><rotate>0 0 1 90</rotate><instance_geometry url="#tet"/></node>
    </node>
  </visual_scene></library_visual_scenes>
  <scene><instance_visual_scene url="#Scene"/></scene>
</COLLADA>
)");
  std::vector<Point3> vertices = read_mesh_vertices((dir / "tet.dae").string(), {1, 1, 2});
  // R_b (1,0,0) = (0,1,0), (0,2,0) -> (-2,0,0), (0,0,3) -> (0,0,3); then + (10,0,0), x 0.01
  std::vector<Point3> expected = {{0.10, 0.01, 0}, {0.08, 0, 0}, {0.10, 0, 0.06}, {0.10, 0, 0}};
  Hull h = convex_hull(vertices);
  ASSERT_EQ(h.nvert(), 4);
  for (const Point3& q : expected) {
    double nearest = 1e300;
    for (const Point3& p : h.vertices)
      nearest = std::min(nearest, std::sqrt(dot(sub(p, q), sub(p, q))));
    EXPECT_LT(nearest, kFileTol * 0.1) << q[0] << " " << q[1] << " " << q[2];
  }
}

TEST(MeshFiles, ErrorsNameTheFile) {
  fs::path dir = temp_dir("bad");
  std::string missing = (dir / "missing.stl").string();
  std::string e = error_of([&] { read_mesh_vertices(missing); });
  EXPECT_NE(e.find("mesh file '" + missing + "' not found"), std::string::npos) << e;
  write(dir / "garbage.stl", "this is not a mesh\n");
  write(dir / "empty.obj", "# nothing\n");
  for (const char* file : {"garbage.stl", "empty.obj"}) {
    std::string path = (dir / file).string();
    EXPECT_THROW(read_mesh_vertices(path), std::runtime_error) << file;
    e = error_of([&] { read_mesh_vertices(path); });
    EXPECT_NE(e.find("'" + path + "'"), std::string::npos) << e;
  }
}

// COLLADA files that assimp 5.2 would read without bound on memory are refused first, naming
// the element and its line: an index list with a token that is not an integer (assimp loops on
// it or on a <p> that ends inside a vertex), counts beyond the file's size (assimp reserves
// them), triangles without <p>, arrays without count and accessors beyond their array (assimp
// crashes) and malformed XML (fuzz_mesh's findings, tests/fuzz/regressions/mesh)
TEST(MeshFiles, ColladaIndexListsCountsAndPrimitivesAreCheckedBeforeAssimp) {
  fs::path dir = temp_dir("collada");
  auto dae = [](const std::string& array_count, const std::string& triangles_count,
                const std::string& p) {
    return "<?xml version=\"1.0\"?>\n"
           "<COLLADA xmlns=\"http://www.collada.org/2005/11/COLLADASchema\" version=\"1.4.1\">\n"
           "<library_geometries><geometry id=\"tet\"><mesh>\n"
           "<source id=\"pos\"><float_array id=\"a\" count=\"" +
           array_count +
           "\">1 0 0 0 1 0 0 0 1 0 0 0</float_array>\n"
           "<technique_common><accessor source=\"#a\" count=\"4\" stride=\"3\"><param "
           "name=\"X\" type=\"float\"/><param name=\"Y\" type=\"float\"/><param name=\"Z\" "
           "type=\"float\"/></accessor></technique_common></source>\n"
           "<vertices id=\"v\"><input semantic=\"POSITION\" source=\"#pos\"/></vertices>\n"
           "<triangles count=\"" +
           triangles_count + "\"><input semantic=\"VERTEX\" source=\"#v\" offset=\"0\"/>\n<p>" + p +
           "</p></triangles>\n"
           "</mesh></geometry></library_geometries>\n"
           "<library_visual_scenes><visual_scene id=\"s\"><node><instance_geometry "
           "url=\"#tet\"/></node></visual_scene></library_visual_scenes>\n"
           "<scene><instance_visual_scene url=\"#s\"/></scene></COLLADA>\n";
  };
  const std::string p = "0 1 2 0 3 1 0 2 3 1 3 2";
  write(dir / "tet.dae", dae("12", "4", p));
  EXPECT_EQ(convex_hull(read_mesh_vertices((dir / "tet.dae").string())).nvert(), 4);
  std::string no_p = dae("12", "4", ""), malformed = dae("12", "4", p);
  no_p.erase(no_p.find("<p></p>"), 7);
  malformed.erase(malformed.find("</p>"), 4);
  std::string no_count = dae("12", "4", p), beyond = dae("12", "4", p);
  no_count.replace(no_count.find("count=\"12\""), 10, "");
  beyond.replace(beyond.find("count=\"4\" stride"), 9, "count=\"5\"");
  // two inputs: two indices per vertex, of which the last vertex lacks one
  std::string two = dae("12", "4", p + " 0 1 2 0 3 1 0 2 3 1 3");
  two.insert(two.find("<p>"), "<input semantic=\"NORMAL\" source=\"#pos\" offset=\"1\"/>");
  const std::pair<std::string, std::string> bad[] = {
      {dae("12", "4", "0 1 2 0 3 1 0 2 3 1 3 x"), "<p> (line 8) holds 'x', not an index"},
      {dae("12", "4", "0 1 2 inf 3 1 0 2 3 1 3 2"), "<p> (line 8) holds 'inf', not an index"},
      {dae("1200000000", "4", p),
       "<float_array> (line 4) has count 1200000000, more than its file"},
      {dae("12", "400000000", p), "<triangles> (line 7) has count 400000000, more than its file"},
      {no_p, "<triangles> (line 7) has count 4 but no <p>"},
      {two, "<p> (line 8) holds 23 indices, not a multiple of the 2 per vertex"},
      {malformed, "line 8: malformed XML"},
      {no_count, "<float_array> (line 4) has no count"},
      {beyond, "<accessor> (line 5) reads 5 x 3 values from 0 on, beyond the 12 of its array"}};
  for (const auto& [text, message] : bad) {
    std::string path = (dir / "bad.dae").string();
    write(path, text);
    std::string e = error_of([&] { read_mesh_vertices(path); });
    EXPECT_NE(e.find("cannot read mesh file '" + path + "': " + message), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace phx
