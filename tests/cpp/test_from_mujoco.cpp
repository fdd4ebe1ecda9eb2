// phx::from_mujoco against MuJoCo's compiled models: load_mjcf keeps MuJoCo's compiled arrays,
// meshes as valid convex hulls, height fields with their data, unsupported physics
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
#include "mujoco_compile.h"

namespace {

using phx::test::compile_file;
using phx::test::compile_string;
using phx::test::ModelPtr;

// an array of the conversion equals MuJoCo's field of the same meaning, to 1e-12 relative
template <typename T>
void expect_field(const std::vector<T>& ours, const T* theirs, long n, const std::string& what) {
  ASSERT_EQ(static_cast<long>(ours.size()), n) << what;
  double scale = 1;
  for (long i = 0; i < n; i++) scale = std::max(scale, std::abs(static_cast<double>(theirs[i])));
  for (long i = 0; i < n; i++)
    EXPECT_NEAR(static_cast<double>(ours[i]), static_cast<double>(theirs[i]), 1e-12 * scale)
        << what << "[" << i << "]";
}

// load_mjcf (MuJoCo's compiler, then from_mujoco) keeps MuJoCo's compiled arrays, names the model
// and its file; a field-by-field check against the mjModel MuJoCo compiles from the same file
TEST(FromMujoco, LoadMjcfKeepsMujocosCompiledArrays) {
  for (std::string path : {std::string(PHX_SOURCE_DIR) + "/examples/models/cartpole.xml",
                           std::string(PHX_SOURCE_DIR) + "/examples/models/double_pendulum.xml",
                           std::string(PHX_SOURCE_DIR) + "/examples/models/half_cheetah_planar.xml",
                           std::string(PHX_SOURCE_DIR) + "/examples/models/sysid_scene.xml",
                           std::string(PHX_MUJOCO_MODELS) + "/humanoid/humanoid.xml"}) {
    ModelPtr m = compile_file(path);
    ASSERT_TRUE(m);
    phx::Model o = phx::load_mjcf(path);
    EXPECT_EQ(o.source, path);
    EXPECT_EQ(o.name, std::string(m->names));
    ASSERT_EQ(o.nbody, m->nbody) << path;
    ASSERT_EQ(o.njnt, m->njnt) << path;
    ASSERT_EQ(o.ngeom, m->ngeom) << path;
    ASSERT_EQ(o.nq, m->nq) << path;
    ASSERT_EQ(o.nv, m->nv) << path;
    ASSERT_EQ(o.nu, m->nu) << path;
    expect_field(o.body_parentid, m->body_parentid, m->nbody, path + " body_parentid");
    expect_field(o.body_mass, m->body_mass, m->nbody, path + " body_mass");
    expect_field(o.body_inertia, m->body_inertia, 3 * m->nbody, path + " body_inertia");
    expect_field(o.body_pos, m->body_pos, 3 * m->nbody, path + " body_pos");
    expect_field(o.body_ipos, m->body_ipos, 3 * m->nbody, path + " body_ipos");
    expect_field(o.jnt_type, m->jnt_type, m->njnt, path + " jnt_type");
    expect_field(o.jnt_axis, m->jnt_axis, 3 * m->njnt, path + " jnt_axis");
    expect_field(o.jnt_range, m->jnt_range, 2 * m->njnt, path + " jnt_range");
    expect_field(o.qpos0, m->qpos0, m->nq, path + " qpos0");
    expect_field(o.dof_damping, m->dof_damping, m->nv, path + " dof_damping");
    expect_field(o.dof_armature, m->dof_armature, m->nv, path + " dof_armature");
    expect_field(o.geom_type, m->geom_type, m->ngeom, path + " geom_type");
    expect_field(o.geom_size, m->geom_size, 3 * m->ngeom, path + " geom_size");
    expect_field(o.geom_pos, m->geom_pos, 3 * m->ngeom, path + " geom_pos");
    expect_field(o.geom_friction, m->geom_friction, 3 * m->ngeom, path + " geom_friction");
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
  expect_refused(model("", R"(<actuator><general name="v" joint="j" gaintype="user"/>
                 </actuator>)"),
                 "actuator 'v' (id 0): has dyntype none, gaintype user");
  expect_refused(model("", R"(<tendon><fixed name="t" armature="1"><joint joint="j" coef="1"/>
                 </fixed></tendon>)"),
                 "tendon 't' (id 0): tendons with armature are not supported");
  EXPECT_THROW(phx::from_mujoco(nullptr), std::invalid_argument);
}

TEST(FromMujoco, EqualitiesKeepTheirBodiesAnchorsAndCoefficients) {
  // a weld stores its anchor on body 2 first (MuJoCo's eq_data); Phalanx keeps body 1's first,
  // and a weld with torquescale 0 becomes a connect
  ModelPtr m = compile_string(R"(<mujoco><worldbody>
      <body name="a" pos="0 0 1"><freejoint/><geom size="0.1"/></body>
      <body name="b" pos="1 0 1"><joint name="j" type="hinge"/><geom size="0.1"/></body>
      <body name="c" pos="2 0 1"><joint name="k" type="slide"/><geom size="0.1"/></body>
    </worldbody><equality>
      <connect body1="a" body2="b" anchor="0.1 0.2 0.3"/>
      <weld body1="a" body2="b" anchor="0.4 0.5 0.6" relpose="1 2 3 0 1 0 0"/>
      <weld body1="b" body2="c" torquescale="0" active="false"/>
      <joint joint1="k" joint2="j" polycoef="0.1 0.2 0.3 0.4 0.5"/>
    </equality></mujoco>)");
  phx::Model p = phx::from_mujoco(m.get());
  ASSERT_EQ(p.neq, 4);
  EXPECT_EQ(p.eq_type,
            (std::vector<int>{phx::kEqConnect, phx::kEqWeld, phx::kEqConnect, phx::kEqJoint}));
  EXPECT_EQ(p.eq_obj1id, (std::vector<int>{1, 1, 2, 2}));
  EXPECT_EQ(p.eq_obj2id, (std::vector<int>{2, 2, 3, 1}));
  EXPECT_EQ(p.eq_active, (std::vector<int>{1, 1, 0, 1}));
  const double* d = m->eq_data;
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(p.eq_anchor[k], d[k]);  // connect: as MuJoCo's
    EXPECT_EQ(p.eq_anchor[3 + k], d[3 + k]);
    EXPECT_EQ(p.eq_anchor[6 + k], d[mjNEQDATA + 3 + k]);  // weld: body 1's anchor first
    EXPECT_EQ(p.eq_anchor[9 + k], d[mjNEQDATA + k]);
  }
  for (int k = 0; k < 4; ++k) EXPECT_EQ(p.eq_relquat[8 + k], d[mjNEQDATA + 6 + k]);
  EXPECT_EQ(p.eq_relquat[12], 1.0);
  for (int k = 0; k < 5; ++k) EXPECT_EQ(p.eq_polycoef[15 + k], d[3 * mjNEQDATA + k]);
}

TEST(FromMujoco, ASpatialTendonEqualityKeepsMujocosReferenceLength) {
  ModelPtr m = compile_string(R"(<mujoco><worldbody><site name="s1"/>
      <body pos="0 0 -0.5"><freejoint/><geom size="0.1"/><site name="s2" pos="0.1 0 0"/></body>
    </worldbody><tendon><spatial name="sp"><site site="s1"/><site site="s2"/></spatial></tendon>
    <equality><tendon name="e" tendon1="sp"/></equality></mujoco>)");
  ASSERT_TRUE(m);
  phx::Model p = phx::from_mujoco(m.get());
  ASSERT_EQ(p.neq, 1);
  EXPECT_EQ(p.eq_type[0], phx::kEqTendon);
  EXPECT_EQ(p.tendon_length0[0], m->tendon_length0[0]);
  EXPECT_NEAR(p.tendon_length0[0], std::hypot(0.1, 0.5), 1e-15);
  // a model built without it cannot derive it (that needs the kinematics): refused by name
  p.tendon_length0.clear();
  p.fill_default_tendon_length0();
  try {
    p.validate();
    ADD_FAILURE() << "validated";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("tendon_length0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("couples spatial tendon 0"), std::string::npos)
        << e.what();
  }
}

TEST(FromMujoco, FixedTendonAndAnActuatorOnIt) {
  ModelPtr m = compile_string(R"(
<mujoco>
  <worldbody><body><joint name="j" type="slide" axis="1 0 0"/><geom size="0.1"/>
    <body><joint name="k" type="hinge"/><geom size="0.1"/></body></body></worldbody>
  <tendon><fixed name="t" stiffness="4" damping="0.5" springlength="0.1 0.3" limited="true"
    range="-1 2"><joint joint="j" coef="-2"/><joint joint="k" coef="0.5"/></fixed></tendon>
  <actuator><general name="g" tendon="t" gear="3" gainprm="5" ctrlrange="-1 1"/></actuator>
</mujoco>)");
  ASSERT_TRUE(m);
  phx::Model o = phx::from_mujoco(m.get());
  ASSERT_EQ(o.ntendon, 1);
  EXPECT_EQ(o.wrap_objid, (std::vector<int>{0, 1}));
  EXPECT_EQ(o.wrap_prm, (std::vector<double>{-2, 0.5}));
  EXPECT_EQ(o.tendon_stiffness[0], 4);
  EXPECT_EQ(o.tendon_damping[0], 0.5);
  EXPECT_EQ(o.tendon_lengthspring, (std::vector<double>{0.1, 0.3}));
  EXPECT_EQ(o.tendon_limited[0], 1);
  EXPECT_EQ(o.tendon_range, (std::vector<double>{-1, 2}));
  ASSERT_EQ(o.nu, 1);
  EXPECT_EQ(o.actuator_trntype[0], phx::kTrnTendon);
  EXPECT_EQ(o.actuator_trnid[0], 0);
  EXPECT_EQ(o.actuator_gear[0], 3.0);
  EXPECT_EQ(o.actuator_gainprm[0], 5.0);
  EXPECT_EQ(o.actuator_ctrllimited[0], 1);
}

}  // namespace
