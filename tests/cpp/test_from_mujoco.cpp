// phx::from_mujoco against MuJoCo's compiled models and the MJCF loader: the same arrays as
// load_mjcf, meshes as valid convex hulls, height fields with their data, unsupported physics
// refused. Built only when cmake/mujoco.cmake finds MuJoCo.
#include <gtest/gtest.h>
#include <mujoco/mujoco.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "host/model.h"
#include "host/mujoco_model.h"

namespace {

using ModelPtr = std::unique_ptr<mjModel, void (*)(mjModel*)>;

ModelPtr compile_file(const std::string& path) {
  char error[1000] = "";
  mjModel* m = mj_loadXML(path.c_str(), nullptr, error, sizeof(error));
  EXPECT_NE(m, nullptr) << path << ": " << error;
  return ModelPtr(m, mj_deleteModel);
}

ModelPtr compile_string(const std::string& xml) {
  char error[1000] = "";
  mjSpec* spec = mj_parseXMLString(xml.c_str(), nullptr, error, sizeof(error));
  EXPECT_NE(spec, nullptr) << error;
  mjModel* m = spec ? mj_compile(spec, nullptr) : nullptr;
  EXPECT_NE(m, nullptr) << (spec ? mjs_getError(spec) : error);
  if (spec) mj_deleteSpec(spec);
  return ModelPtr(m, mj_deleteModel);
}

// every array of the table: ints equal, reals to 1e-12 relative (quaternions up to sign)
void expect_same_arrays(const phx::Model& a, const phx::Model& b, const std::string& what) {
#define PHX_EXPECT_COUNT(name, comment) EXPECT_EQ(a.name, b.name) << what << ": " #name;
  PHX_MODEL_COUNTS(PHX_EXPECT_COUNT)
#undef PHX_EXPECT_COUNT
  auto close = [&](const std::vector<double>& x, const std::vector<double>& y, int width,
                   const std::string& name) {
    ASSERT_EQ(x.size(), y.size()) << what << ": " << name;
    bool quat = name.size() >= 4 && name.compare(name.size() - 4, 4, "quat") == 0;
    for (size_t r = 0; r * width < x.size(); r++) {
      double scale = 0, plus = 0, minus = 0;
      for (int c = 0; c < width; c++) {
        size_t i = r * width + c;
        scale = std::max(scale, std::abs(y[i]));
        plus = std::max(plus, std::abs(x[i] - y[i]));
        minus = std::max(minus, std::abs(x[i] + y[i]));
      }
      double err = (quat ? std::min(plus, minus) : plus) / (scale > 0 ? scale : 1);
      EXPECT_LE(err, 1e-12) << what << ": " << name << " row " << r;
    }
  };
  auto equal = [&](const std::vector<int>& x, const std::vector<int>& y, const std::string& name) {
    EXPECT_EQ(x, y) << what << ": " << name;
  };
  auto same = [&](const auto& x, const auto& y, int width, const std::string& name) {
    if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::vector<double>>) {
      close(x, y, width, name);
    } else if (name == "exclude_bodies") {  // MuJoCo sorts the pairs
      std::multiset<std::pair<int, int>> px, py;
      for (size_t i = 0; i + 1 < x.size(); i += 2) px.insert(std::minmax(x[i], x[i + 1]));
      for (size_t i = 0; i + 1 < y.size(); i += 2) py.insert(std::minmax(y[i], y[i + 1]));
      EXPECT_EQ(px, py) << what << ": " << name;
    } else {
      equal(x, y, name);
    }
  };
#define PHX_EXPECT_ARRAY(kind, name, count, width, comment) same(a.name, b.name, width, #name);
  PHX_MODEL_ARRAYS(PHX_EXPECT_ARRAY)
#undef PHX_EXPECT_ARRAY
  EXPECT_EQ(a.body_names, b.body_names) << what;
  EXPECT_EQ(a.jnt_names, b.jnt_names) << what;
  EXPECT_EQ(a.geom_names, b.geom_names) << what;
  EXPECT_EQ(a.actuator_names, b.actuator_names) << what;
  EXPECT_EQ(a.opt.timestep, b.opt.timestep) << what;
  EXPECT_EQ(a.opt.gravity, b.opt.gravity) << what;
}

TEST(FromMujoco, SameArraysAsTheMjcfLoader) {
  for (std::string path : {std::string(PHX_SOURCE_DIR) + "/examples/models/cartpole.xml",
                           std::string(PHX_SOURCE_DIR) + "/examples/models/double_pendulum.xml",
                           std::string(PHX_SOURCE_DIR) + "/examples/models/half_cheetah_planar.xml",
                           std::string(PHX_SOURCE_DIR) + "/examples/models/sysid_scene.xml",
                           std::string(PHX_MUJOCO_MODELS) + "/humanoid/humanoid.xml"}) {
    ModelPtr m = compile_file(path);
    ASSERT_TRUE(m);
    expect_same_arrays(phx::from_mujoco(m.get()), phx::load_mjcf(path), path);
  }
}

constexpr const char* kMeshXml = R"(
<mujoco>
  <asset>
    <mesh name="box" vertex="-1 -1 -1  1 -1 -1  -1 1 -1  1 1 -1  -1 -1 1  1 -1 1  -1 1 1  1 1 1
                             0 0 0  0.5 0.2 0.1" scale="0.1 0.2 0.3"/>
    <mesh name="tet" vertex="0 0 0  1 0 0  0 1 0  0 0 1  0.2 0.2 0.2"/>
  </asset>
  <worldbody>
    <body pos="0 0 1">
      <freejoint/>
      <geom type="mesh" mesh="box"/>
      <geom type="mesh" mesh="tet" pos="0.3 0 0"/>
    </body>
  </worldbody>
</mujoco>)";

// hull k: counts as MuJoCo's graph, symmetric adjacency, faces planar, counter-clockwise about
// their outward normals, and no vertex outside a face's plane
void expect_valid_hull(const phx::Model& o, const mjModel* m, int k) {
  int adr = o.mesh_vertadr[k], n = o.mesh_vertnum[k];
  EXPECT_EQ(n, m->mesh_graph[m->mesh_graphadr[k]]);
  auto vert = [&](int v) { return &o.mesh_vert[3 * size_t(adr + v)]; };
  for (int v = 0; v < n; v++) {
    int a = o.mesh_vertadjadr[adr + v], num = o.mesh_vertadjnum[adr + v];
    EXPECT_GE(num, 3);
    for (int e = a; e < a + num; e++) {
      int u = o.mesh_vertadj[e];
      ASSERT_TRUE(u >= 0 && u < n);
      const int* first = &o.mesh_vertadj[o.mesh_vertadjadr[adr + u]];
      const int* last = first + o.mesh_vertadjnum[adr + u];
      EXPECT_NE(std::find(first, last, v), last) << "edge " << v << "-" << u << " one-sided";
    }
  }
  for (int p = o.mesh_polyadr[k]; p < o.mesh_polyadr[k] + o.mesh_polynum[k]; p++) {
    const double* nrm = &o.mesh_polynormal[3 * size_t(p)];
    int a = o.mesh_polyvertadr[p], num = o.mesh_polyvertnum[p];
    ASSERT_GE(num, 3);
    double offset = 0, area[3] = {0, 0, 0};
    for (int i = 0; i < num; i++) {
      const double* x = vert(o.mesh_polyvert[a + i]);
      const double* y = vert(o.mesh_polyvert[a + (i + 1) % num]);
      area[0] += x[1] * y[2] - x[2] * y[1];
      area[1] += x[2] * y[0] - x[0] * y[2];
      area[2] += x[0] * y[1] - x[1] * y[0];
      offset = x[0] * nrm[0] + x[1] * nrm[1] + x[2] * nrm[2];
    }
    EXPECT_GT(area[0] * nrm[0] + area[1] * nrm[1] + area[2] * nrm[2], 0) << "face " << p;
    for (int i = 0; i < num; i++) {
      const double* x = vert(o.mesh_polyvert[a + i]);
      EXPECT_NEAR(x[0] * nrm[0] + x[1] * nrm[1] + x[2] * nrm[2], offset, 1e-6);
    }
    for (int v = 0; v < n; v++) {
      const double* x = vert(v);
      EXPECT_LE(x[0] * nrm[0] + x[1] * nrm[1] + x[2] * nrm[2], offset + 1e-6);
    }
  }
}

TEST(FromMujoco, MeshesBecomeTheirConvexHulls) {
  ModelPtr m = compile_string(kMeshXml);
  ASSERT_TRUE(m);
  phx::Model o = phx::from_mujoco(m.get());
  ASSERT_EQ(o.nmesh, 2);
  EXPECT_EQ(o.mesh_vertnum[0], 8);  // the box's corners, interior points dropped
  EXPECT_EQ(o.mesh_vertnum[1], 4);
  EXPECT_EQ(o.mesh_polynum[0], 6);  // MuJoCo merges the box's triangles into quads
  // the adjacency is that of qhull's triangulated hull (MuJoCo's graph): the box's 12 edges and
  // a diagonal per face, the tetrahedron's 6 edges, each listed from both ends
  EXPECT_EQ(o.nmeshadj, 2 * (12 + 6 + 6));
  for (int k = 0; k < 2; k++) expect_valid_hull(o, m.get(), k);
  EXPECT_EQ(o.geom_dataid, (std::vector<int>{0, 1}));
  EXPECT_EQ(o.body_mass[1], m->body_mass[1]);
  EXPECT_EQ(o.body_inertia[3], m->body_inertia[3]);
  EXPECT_EQ(o.geom_quat[4], m->geom_quat[4]);
}

TEST(FromMujoco, MugHullAndCollidingGeomOnAMeshWithoutHull) {
  std::string mug = std::string(PHX_MUJOCO_MODELS) + "/mug/mug.xml";
  ModelPtr m = compile_file(mug);
  ASSERT_TRUE(m);
  // the mug's mesh is visual (contype 0): MuJoCo computes no hull, its bounding box stands in
  ASSERT_EQ(m->mesh_graphadr[0], -1);
  phx::Model o = phx::from_mujoco(m.get());
  EXPECT_EQ(o.mesh_vertnum[0], 8);
  EXPECT_EQ(o.ngeom, m->ngeom);
  // made colliding, that geom is refused
  int g = 1;
  ASSERT_EQ(m->geom_type[g], mjGEOM_MESH);
  m->geom_contype[g] = 1;
  try {
    phx::from_mujoco(m.get());
    FAIL() << "expected a refusal";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("geom 1: its mesh 'mug' (id 0) has no convex hull"),
              std::string::npos)
        << e.what();
  }
  // the mug's mesh on a colliding geom: MuJoCo's hull
  ModelPtr c = compile_string(R"(<mujoco><asset><mesh file=")" + std::string(PHX_MUJOCO_MODELS) +
                              R"(/mug/mug.obj" scale=".01 .01 .01"/></asset><worldbody><body>
                              <freejoint/><geom type="mesh" mesh="mug"/></body></worldbody>
                              </mujoco>)");
  ASSERT_TRUE(c);
  phx::Model hull = phx::from_mujoco(c.get());
  EXPECT_GT(hull.mesh_vertnum[0], 100);
  EXPECT_LT(hull.mesh_vertnum[0], c->mesh_vertnum[0]);
  // adjacency and orientation; MuJoCo's merged polygons are planar to ~2e-5 on this mesh
  int n = hull.mesh_vertnum[0];
  for (int v = 0; v < n; v++) EXPECT_GE(hull.mesh_vertadjnum[v], 3);
  for (int p = 0; p < hull.nmeshpoly; p++) {
    const double* nrm = &hull.mesh_polynormal[3 * size_t(p)];
    int a = hull.mesh_polyvertadr[p], num = hull.mesh_polyvertnum[p];
    double area[3] = {0, 0, 0};
    for (int i = 0; i < num; i++) {
      const double* x = &hull.mesh_vert[3 * size_t(hull.mesh_polyvert[a + i])];
      const double* y = &hull.mesh_vert[3 * size_t(hull.mesh_polyvert[a + (i + 1) % num])];
      area[0] += x[1] * y[2] - x[2] * y[1];
      area[1] += x[2] * y[0] - x[0] * y[2];
      area[2] += x[0] * y[1] - x[1] * y[0];
    }
    EXPECT_GT(area[0] * nrm[0] + area[1] * nrm[1] + area[2] * nrm[2], 0) << "face " << p;
  }
}

TEST(FromMujoco, HeightField) {
  ModelPtr m = compile_string(R"(
<mujoco>
  <asset><hfield name="h" nrow="2" ncol="3" size="1 2 0.5 0.1" elevation="0 1 2 3 4 5"/></asset>
  <worldbody><geom type="hfield" hfield="h"/></worldbody>
</mujoco>)");
  ASSERT_TRUE(m);
  phx::Model o = phx::from_mujoco(m.get());
  ASSERT_EQ(o.nhfield, 1);
  EXPECT_EQ(o.hfield_nrow[0], 2);
  EXPECT_EQ(o.hfield_ncol[0], 3);
  EXPECT_EQ(o.hfield_size, (std::vector<double>{1, 2, 0.5, 0.1}));
  ASSERT_EQ(o.nhfielddata, 6);
  for (int i = 0; i < 6; i++) EXPECT_EQ(o.hfield_data[i], double(m->hfield_data[i]));
  EXPECT_EQ(o.geom_dataid[0], 0);
}

void expect_refused(const std::string& xml, const std::string& message) {
  ModelPtr m = compile_string(xml);
  ASSERT_TRUE(m);
  try {
    phx::from_mujoco(m.get());
    FAIL() << "expected: " << message;
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("from_mujoco: " + message, 0), 0u) << e.what();
  }
}

TEST(FromMujoco, UnsupportedPhysicsIsRefused) {
  const std::string body = R"(<worldbody><body name="b"><joint name="j" type="hinge" {J}/>
    <geom size="0.1"/><body name="c" pos="0 0 -0.3"><joint name="k" type="hinge"/>
    <geom size="0.1"/></body></body></worldbody>)";
  auto model = [&](const std::string& joint, const std::string& rest) {
    std::string b = body;
    b.replace(b.find("{J}"), 3, joint);
    return "<mujoco>" + b + rest + "</mujoco>";
  };
  expect_refused(model("", R"(<equality><joint name="e" joint1="j" joint2="k"/></equality>)"),
                 "equality 'e' (id 0): equality constraints are not supported");
  expect_refused(model("frictionloss=\"1\"", ""),
                 "joint 'j' (id 0): frictionloss is not supported");
  expect_refused(model("", R"(<actuator><velocity name="v" joint="j"/></actuator>)"),
                 "actuator 'v' (id 0): is not a motor");
  expect_refused(model("", R"(<actuator><motor name="m" joint="j" forcerange="-1 1"/></actuator>)"),
                 "actuator 'm' (id 0): force limits (forcerange) are not supported");
  expect_refused(model("", R"(<tendon><fixed name="t" damping="1"><joint joint="j" coef="1"/>
                 </fixed></tendon>)"),
                 "tendon 't' (id 0): tendons are not supported: it has damping");
  EXPECT_THROW(phx::from_mujoco(nullptr), std::invalid_argument);
}

TEST(FromMujoco, MotorThroughASingleJointTendon) {
  ModelPtr m = compile_string(R"(
<mujoco>
  <worldbody><body><joint name="j" type="slide" axis="1 0 0"/><geom size="0.1"/></body></worldbody>
  <tendon><fixed name="t"><joint joint="j" coef="-2"/></fixed></tendon>
  <actuator><general name="g" tendon="t" gear="3" gainprm="5" ctrlrange="-1 1"/></actuator>
</mujoco>)");
  ASSERT_TRUE(m);
  phx::Model o = phx::from_mujoco(m.get());
  ASSERT_EQ(o.nu, 1);
  EXPECT_EQ(o.actuator_trnid[0], 0);
  EXPECT_EQ(o.actuator_gear[0], 3.0 * 5.0 * -2.0);
  EXPECT_EQ(o.actuator_ctrllimited[0], 1);
  EXPECT_NE(std::find(o.ignored.begin(), o.ignored.end(),
                      "tendon fixed without forces (first: tendon 't' (id 0)), 1 time"),
            o.ignored.end());
}

}  // namespace
