// Tests of the URDF loader (host/urdf.cpp): the bundled arm7.urdf, inertia decomposition, fixed
// and floating joints, collision shapes and meshes (paths, file:// and package:// resolution,
// each file and scale loaded once), example-robot-data's robots, and errors on bad input.
// Tolerance: 1e-12 relative, the loader's arithmetic being a few roundings deep in double.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

#include "host/mesh.h"
#include "host/model.h"

namespace phx {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kTol = 1e-12;

using Mat3 = std::array<double, 9>;

const std::string kArm7 = std::string(PHX_SOURCE_DIR) + "/examples/models/arm7.urdf";

Mat3 mul(const Mat3& A, const Mat3& B) {
  Mat3 C{};
  for (int i = 0; i < 3; i++) {
    for (int j = 0; j < 3; j++) {
      for (int k = 0; k < 3; k++) C[3 * i + j] += A[3 * i + k] * B[3 * k + j];
    }
  }
  return C;
}

Mat3 transpose(const Mat3& A) {
  return {A[0], A[3], A[6], A[1], A[4], A[7], A[2], A[5], A[8]};
}

// URDF rpy: fixed-axis rotations about x, then y, then z: R = Rz(yaw) Ry(pitch) Rx(roll)
Mat3 rpy_to_mat(double r, double p, double y) {
  Mat3 Rx = {1, 0, 0, 0, std::cos(r), -std::sin(r), 0, std::sin(r), std::cos(r)};
  Mat3 Ry = {std::cos(p), 0, std::sin(p), 0, 1, 0, -std::sin(p), 0, std::cos(p)};
  Mat3 Rz = {std::cos(y), -std::sin(y), 0, std::sin(y), std::cos(y), 0, 0, 0, 1};
  return mul(Rz, mul(Ry, Rx));
}

Mat3 quat_to_mat(const double* q) {
  double w = q[0], x = q[1], y = q[2], z = q[3];
  return {
      w * w + x * x - y * y - z * z, 2 * (x * y - w * z),           2 * (x * z + w * y),
      2 * (x * y + w * z),           w * w - x * x + y * y - z * z, 2 * (y * z - w * x),
      2 * (x * z - w * y),           2 * (y * z + w * x),           w * w - x * x - y * y + z * z};
}

// inertia tensor of body b about its centre of mass in the body frame: R diag(I) R^T
Mat3 body_tensor(const Model& m, int b) {
  Mat3 R = quat_to_mat(&m.body_iquat[4 * b]);
  Mat3 D = {m.body_inertia[3 * b],    0, 0, 0, m.body_inertia[3 * b + 1], 0, 0, 0,
            m.body_inertia[3 * b + 2]};
  return mul(R, mul(D, transpose(R)));
}

template <typename A, typename B>
void expect_near_all(const A& a, const B& b, int n, const std::string& what) {
  double scale = 0;
  for (int i = 0; i < n; i++) scale = std::max(scale, std::abs(b[i]));
  for (int i = 0; i < n; i++)
    EXPECT_NEAR(a[i], b[i], kTol * std::max(scale, 1.0)) << what << "[" << i << "]";
}

std::string load_error(const std::string& xml) {
  try {
    load_urdf_string(xml);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

void expect_error(const std::string& xml, std::initializer_list<const char*> parts) {
  std::string msg = load_error(xml);
  ASSERT_FALSE(msg.empty()) << "loaded:\n" << xml;
  for (const char* p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

//------------------------------------------------------------------ arm7.urdf

TEST(UrdfArm7, CountsTreeAndLimits) {
  Model m = load_urdf(kArm7);
  EXPECT_EQ(m.name, "arm7");
  // world, base_link, link1..link7, tool; the tool is welded by a fixed joint
  EXPECT_EQ(m.nbody, 10);
  EXPECT_EQ(m.njnt, 7);
  EXPECT_EQ(m.nq, 7);
  EXPECT_EQ(m.nv, 7);
  EXPECT_EQ(m.nu, 0);
  EXPECT_EQ(m.ngeom, 12);  // 10 boxes and spheres over the links, 2 on the tool
  EXPECT_EQ(m.body_parentid, (std::vector<int>{0, 0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(m.body_jntnum, (std::vector<int>{0, 0, 1, 1, 1, 1, 1, 1, 1, 0}));
  EXPECT_EQ(m.jnt_names,
            (std::vector<std::string>{"shoulder_pan", "shoulder_lift", "upper_arm_roll", "elbow",
                                      "forearm_roll", "wrist_pitch", "wrist_roll"}));
  EXPECT_EQ(m.body_names[9], "tool");
  EXPECT_EQ(m.dof_parentid, (std::vector<int>{-1, 0, 1, 2, 3, 4, 5}));
  for (int j = 0; j < 7; j++) {
    EXPECT_EQ(m.jnt_type[j], kJointHinge);
    EXPECT_EQ(m.jnt_limited[j], 1);
  }
  EXPECT_EQ(m.jnt_range,
            (std::vector<double>{-3, 3, -2, 2, -3, 3, -2.6, 0.1, -3, 3, -2, 2, -3, 3}));
  EXPECT_EQ(m.dof_damping, (std::vector<double>{0.8, 0.8, 0.5, 0.5, 0.2, 0.2, 0.1}));
  double mass = 0;
  for (double b : m.body_mass) mass += b;
  EXPECT_NEAR(mass, 17.9, kTol * 17.9);
  EXPECT_EQ(m.opt.timestep, 0.002);
  EXPECT_EQ(m.opt.gravity[2], -9.81);
}

TEST(UrdfArm7, InertiaDecompositionReproducesTheTensor) {
  // link2: <origin rpy="0 0.08 0"/>, tensor (ixx iyy izz ixy ixz iyz) in that frame; in the body
  // frame it is R(rpy) I R(rpy)^T, and ipos is the origin's xyz
  Model m = load_urdf(kArm7);
  int b = m.body_id("link2");
  Mat3 I = {0.0316324,   0.00128359, 0.00877428,  0.00128359, 0.0323013,
            -0.00368163, 0.00877428, -0.00368163, 0.00781391};
  Mat3 R = rpy_to_mat(0, 0.08, 0);
  expect_near_all(body_tensor(m, b), mul(R, mul(I, transpose(R))), 9, "link2 tensor");
  double ipos[3] = {0, 0, 0.18};
  expect_near_all(&m.body_ipos[3 * b], ipos, 3, "link2 com");
  EXPECT_EQ(m.body_mass[b], 2.9);

  // link1 with a roll and a yaw: rpy="0.05 0 0.1"
  b = m.body_id("link1");
  Mat3 I1 = {0.0117661,   -5.89392e-05, -0.000743972, -5.89392e-05, 0.0112966,
             4.90443e-05, -0.000743972, 4.90443e-05,  0.00585247};
  R = rpy_to_mat(0.05, 0, 0.1);
  expect_near_all(body_tensor(m, b), mul(R, mul(I1, transpose(R))), 9, "link1 tensor");

  // every body: moments sorted, largest first, on a unit quaternion
  for (int k = 1; k < m.nbody; k++) {
    const double* q = &m.body_iquat[4 * k];
    EXPECT_NEAR(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3], 1, kTol);
    EXPECT_GE(m.body_inertia[3 * k], m.body_inertia[3 * k + 1]);
    EXPECT_GE(m.body_inertia[3 * k + 1], m.body_inertia[3 * k + 2]);
  }
}

TEST(UrdfArm7, JointOriginsAndFixedJoints) {
  Model m = load_urdf(kArm7);
  // wrist_pitch: xyz="0 0.04 0.1" rpy="0 0 pi/2": a quarter turn about z
  int b = m.body_id("link6");
  double pos[3] = {0, 0.04, 0.1}, quat[4] = {std::cos(kPi / 4), 0, 0, std::sin(kPi / 4)};
  expect_near_all(&m.body_pos[3 * b], pos, 3, "link6 pos");
  expect_near_all(&m.body_quat[4 * b], quat, 4, "link6 quat");
  double axis[3] = {0, 1, 0}, zero[3] = {0, 0, 0};
  int j = m.joint_id("wrist_pitch");
  expect_near_all(&m.jnt_axis[3 * j], axis, 3, "axis in the body frame");
  expect_near_all(&m.jnt_pos[3 * j], zero, 3, "anchor at the body origin");

  // the tool: welded to link7, 6 cm out and turned 45 degrees, no joint and no dof
  b = m.body_id("tool");
  double tpos[3] = {0, 0, 0.06}, tquat[4] = {std::cos(kPi / 8), 0, 0, std::sin(kPi / 8)};
  expect_near_all(&m.body_pos[3 * b], tpos, 3, "tool pos");
  expect_near_all(&m.body_quat[4 * b], tquat, 4, "tool quat");
  EXPECT_EQ(m.body_parentid[b], m.body_id("link7"));
  EXPECT_EQ(m.body_dofnum[b], 0);
  EXPECT_EQ(m.body_dofadr[b], -1);

  // the root link is welded to the world at the origin
  EXPECT_EQ(m.body_id("base_link"), 1);
  EXPECT_EQ(m.body_jntnum[1], 0);
  EXPECT_EQ(m.body_parentid[1], 0);
}

TEST(UrdfArm7, CollisionGeomsAndIgnoredElements) {
  Model m = load_urdf(kArm7);
  // box sizes are full lengths in URDF, half-sizes in the model
  int g = m.geom_id("link2_box");
  double half[3] = {0.055, 0.055, 0.18}, pos[3] = {0, 0, 0.18};
  EXPECT_EQ(m.geom_type[g], kGeomBox);
  expect_near_all(&m.geom_size[3 * g], half, 3, "box half-sizes");
  expect_near_all(&m.geom_pos[3 * g], pos, 3, "box pos");
  EXPECT_EQ(m.geom_bodyid[g], m.body_id("link2"));
  g = m.geom_id("tool_tip");
  EXPECT_EQ(m.geom_type[g], kGeomSphere);
  EXPECT_EQ(m.geom_size[3 * g], 0.015);
  EXPECT_EQ(m.geom_rbound[g], 0.015);
  EXPECT_EQ(m.geom_contype[g], 1);
  EXPECT_EQ(m.geom_condim[g], 3);
  auto has = [&](const std::string& prefix) {
    for (const std::string& s : m.ignored) {
      if (s.rfind(prefix, 0) == 0) return true;
    }
    return false;
  };
  EXPECT_TRUE(has("visual (arm7.urdf:20), 2 times"));
  EXPECT_TRUE(has("transmission (arm7.urdf:"));
  EXPECT_TRUE(has("gazebo (arm7.urdf:"));
  EXPECT_TRUE(has("material (arm7.urdf:9), 1 time"));
}

//------------------------------------------------------------------ joint kinds

TEST(UrdfJoints, ContinuousPrismaticFloatingAndCylinder) {
  Model m = load_urdf_string(R"(
<robot name="kinds">
  <link name="root"/>
  <link name="free">
    <inertial><mass value="2"/><inertia ixx="1" iyy="1" izz="1" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><geometry><cylinder radius="0.1" length="0.4"/></geometry></collision>
  </link>
  <link name="wheel">
    <inertial>
      <mass value="1"/><inertia ixx="0.1" iyy="0.1" izz="0.1" ixy="0" ixz="0" iyz="0"/>
    </inertial>
  </link>
  <link name="slider">
    <inertial>
      <mass value="1"/><inertia ixx="0.1" iyy="0.1" izz="0.1" ixy="0" ixz="0" iyz="0"/>
    </inertial>
  </link>
  <joint name="float" type="floating">
    <parent link="root"/><child link="free"/><origin xyz="1 2 3"/>
  </joint>
  <joint name="spin" type="continuous">
    <parent link="free"/><child link="wheel"/><axis xyz="0 0 2"/><limit lower="-1" upper="1"/>
  </joint>
  <joint name="slide" type="prismatic">
    <parent link="free"/><child link="slider"/><axis xyz="1 0 0"/>
    <limit lower="-0.5" upper="0.5" effort="10" velocity="1"/><dynamics damping="3"/>
  </joint>
</robot>)");
  EXPECT_EQ(m.jnt_type, (std::vector<int>{kJointFree, kJointHinge, kJointSlide}));
  EXPECT_EQ(m.jnt_limited, (std::vector<int>{0, 0, 1}));  // continuous: unlimited
  EXPECT_EQ(m.nq, 9);
  EXPECT_EQ(m.nv, 8);
  std::vector<double> qpos0 = {1, 2, 3, 1, 0, 0, 0, 0, 0};  // free: the origin
  EXPECT_EQ(m.qpos0, qpos0);
  double axis[3] = {0, 0, 1};
  expect_near_all(&m.jnt_axis[3], axis, 3, "normalized axis");
  EXPECT_EQ(m.jnt_range[4], -0.5);
  EXPECT_EQ(m.dof_damping[7], 3);
  EXPECT_EQ(m.geom_type, (std::vector<int>{kGeomCylinder}));
  EXPECT_EQ(m.geom_size, (std::vector<double>{0.1, 0.2, 0}));  // radius, half-length
  EXPECT_EQ(m.geom_dataid, (std::vector<int>{-1}));
}

//------------------------------------------------------------------ meshes

namespace fs = std::filesystem;

// a folder of this process's own under the system's temporary folder, removed at exit
fs::path temp_root() {
  return fs::temp_directory_path() / ("phx_test_urdf_" + std::to_string(getpid()));
}
struct RemoveTempRoot : ::testing::Environment {
  void TearDown() override { fs::remove_all(temp_root()); }
};
const ::testing::Environment* const kRemoveTempRoot =
    ::testing::AddGlobalTestEnvironment(new RemoveTempRoot);

// writes text to root/relative (creating folders), returns the file's path
std::string write(const fs::path& root, const std::string& relative, const std::string& text) {
  fs::path p = root / relative;
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
  return p.string();
}

// the box [-0.5, 0.5]^3 as an OBJ file of 6 quads
const char* kBoxObj =
    "v -0.5 -0.5 -0.5\nv 0.5 -0.5 -0.5\nv -0.5 0.5 -0.5\nv 0.5 0.5 -0.5\n"
    "v -0.5 -0.5 0.5\nv 0.5 -0.5 0.5\nv -0.5 0.5 0.5\nv 0.5 0.5 0.5\n"
    "f 1 3 4 2\nf 5 6 8 7\nf 1 2 6 5\nf 3 7 8 4\nf 1 5 7 3\nf 2 4 8 6\n";

// a robot of one link holding `collisions` (the URDF's lines 3 onwards)
std::string one_link(const std::string& collisions) {
  return "<robot name='r'>\n<link name='base'>\n" + collisions + "\n</link>\n</robot>\n";
}

// sets an environment variable for a scope, then restores it
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::string load_file_error(const std::string& path) {
  try {
    load_urdf(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// The root link (welded to the world) carries a box that the first arm link's box overlaps at
// rest, and the second arm link's box is 0.2 m clear of both: the overlapping pair is excluded
// (and listed as ignored), the clear ones stay candidate pairs.
TEST(UrdfJoints, LinksOverlappingAtRestDoNotCollide) {
  const char* inertial =
      R"(<inertial><mass value="1"/><inertia ixx="0.1" iyy="0.1" izz="0.1" ixy="0" ixz="0" iyz="0"/></inertial>)";
  std::string xml = std::string(R"(
<robot name="overlap">
  <link name="base"><collision><geometry><box size="0.4 0.4 0.2"/></geometry></collision></link>
  <link name="upper">)") + inertial + R"(
    <collision><origin xyz="0 0 0.2"/><geometry><box size="0.1 0.1 0.4"/></geometry></collision>
  </link>
  <link name="lower">)" + inertial + R"(
    <collision><origin xyz="0.6 0 0.1"/><geometry><box size="0.1 0.1 0.1"/></geometry></collision>
  </link>
  <joint name="shoulder" type="revolute">
    <parent link="base"/><child link="upper"/><axis xyz="0 1 0"/>
    <limit lower="-1" upper="1" effort="1" velocity="1"/>
  </joint>
  <joint name="elbow" type="revolute">
    <parent link="upper"/><child link="lower"/><origin xyz="0 0 0.4"/><axis xyz="0 1 0"/>
    <limit lower="-1" upper="1" effort="1" velocity="1"/>
  </joint>
</robot>)";
  Model m = load_urdf_string(xml);
  // geoms: base's (welded to the world), upper's, lower's; upper-lower are parent and child
  ASSERT_EQ(m.ngeom, 3);
  ASSERT_EQ(m.nexclude, 1);
  EXPECT_EQ(m.exclude_bodies, (std::vector<int>{m.body_id("base"), m.body_id("upper")}));
  ASSERT_EQ(m.npair, 1);
  EXPECT_EQ(m.pair_geom, (std::vector<int>{0, 2}));
  int listed = 0;
  for (const std::string& entry : m.ignored)
    listed += entry.find("links 'base' and 'upper'") != std::string::npos;
  EXPECT_EQ(listed, 1);
}

TEST(UrdfMeshes, MeshAndCylinderGeoms) {
  // a box mesh three times: relative path and scale, the same again (loaded once), and by a
  // file:// URI without scale (a second mesh); a cylinder; a visual mesh (not loaded)
  fs::path dir = temp_root() / "mesh_and_cylinder";
  std::string box = write(dir, "meshes/box.obj", kBoxObj);
  std::string collisions =
      "<collision name='c'><geometry><cylinder radius='0.05' length='0.4'/></geometry>"
      "</collision>\n"
      "<collision name='m1'><origin xyz='0 0 1'/>"
      "<geometry><mesh filename='meshes/box.obj' scale='0.1 0.2 0.3'/></geometry></collision>\n"
      "<collision name='m2'><geometry><mesh filename='./meshes/box.obj' scale='0.1 0.2 0.3'/>"
      "</geometry></collision>\n"
      "<collision name='m3'><geometry><mesh filename='file://BOX'/></geometry></collision>\n"
      "<visual><geometry><mesh filename='missing.dae'/></geometry></visual>";
  collisions.replace(collisions.find("BOX"), 3, box);
  std::string urdf = write(dir, "robot.urdf", one_link(collisions));
  Model m = load_urdf(urdf);
  EXPECT_EQ(m.geom_type, (std::vector<int>{kGeomCylinder, kGeomMesh, kGeomMesh, kGeomMesh}));
  EXPECT_EQ(m.geom_dataid, (std::vector<int>{-1, 0, 0, 1}));
  EXPECT_EQ(m.nmesh, 2);
  EXPECT_EQ(m.geom_size[0], 0.05);  // cylinder: radius, half-length
  EXPECT_EQ(m.geom_size[1], 0.2);
  EXPECT_EQ(m.geom_pos[3 * 1 + 2], 1);
  // mesh 0: the box scaled to half-sizes (0.05, 0.1, 0.15), 6 faces, 12 edges
  ASSERT_EQ(m.mesh_vertnum, (std::vector<int>{8, 8}));
  EXPECT_EQ(m.mesh_polynum, (std::vector<int>{6, 6}));
  EXPECT_EQ(m.nmeshadj, 2 * 24);
  double half[3] = {0.05, 0.1, 0.15};
  for (int v = 0; v < 8; v++) {
    for (int k = 0; k < 3; k++) {
      EXPECT_NEAR(std::abs(m.mesh_vert[3 * v + k]), half[k], 1e-9);
      EXPECT_NEAR(std::abs(m.mesh_vert[3 * (8 + v) + k]), 0.5, 1e-9);
    }
  }
  double r = std::sqrt(0.05 * 0.05 + 0.1 * 0.1 + 0.15 * 0.15);
  EXPECT_NEAR(m.geom_rbound[1], r, 1e-9);  // the farthest hull vertex
  EXPECT_NEAR(m.geom_rbound[3], std::sqrt(0.75), 1e-9);
  EXPECT_NEAR(m.geom_rbound[0], std::sqrt(0.05 * 0.05 + 0.2 * 0.2), 1e-12);
  EXPECT_EQ(m.ignored.front().rfind("visual (robot.urdf:7), 1 time", 0), 0u) << m.ignored.front();
}

TEST(UrdfMeshes, PackageUris) {
  // ws/src/my_pkg/{meshes/box.obj, urdf/robot.urdf}: found walking up from the URDF to the
  // folder named my_pkg; from elsewhere only through ROS_PACKAGE_PATH (the folder holding the
  // package, or the package itself); otherwise an error listing where it looked
  ScopedEnv no_ros("ROS_PACKAGE_PATH", "");
  ScopedEnv no_ament("AMENT_PREFIX_PATH", "");
  fs::path root = temp_root() / "packages";
  write(root, "ws/src/my_pkg/meshes/box.obj", kBoxObj);
  std::string robot = one_link(
      "<collision><geometry><mesh filename='package://my_pkg/meshes/box.obj'/></geometry>"
      "</collision>");
  Model m = load_urdf(write(root, "ws/src/my_pkg/urdf/robot.urdf", robot));
  EXPECT_EQ(m.nmesh, 1);
  EXPECT_EQ(m.mesh_vertnum[0], 8);

  std::string elsewhere = write(root, "other/robot.urdf", robot);
  std::string e = load_file_error(elsewhere);
  for (std::string part :
       {elsewhere + ":3: mesh 'package://my_pkg/meshes/box.obj': package "
                    "'my_pkg' not found; looked for ",
        (root / "other/my_pkg/meshes/box.obj").string(), (root / "my_pkg/meshes/box.obj").string(),
        std::string("ROS_PACKAGE_PATH")})
    EXPECT_NE(e.find(part), std::string::npos) << "'" << part << "' not in: " << e;
  for (std::string path : {(root / "ws/src").string() + "/", (root / "ws/src/my_pkg").string()}) {
    ScopedEnv ros("ROS_PACKAGE_PATH", "/nonexistent:" + path);
    EXPECT_EQ(load_urdf(elsewhere).nmesh, 1) << path;
  }
  // malformed or unsupported URIs
  for (auto [uri, message] : std::map<std::string, std::string>{
           {"package://my_pkg", "expected package://NAME/PATH"},
           {"http://host/box.obj", "unsupported URI scheme 'http'"}}) {
    std::string file = write(
        root, "bad.urdf",
        one_link("<collision><geometry><mesh filename='" + uri + "'/></geometry></collision>"));
    e = load_file_error(file);
    EXPECT_NE(e.find(file + ":3: mesh '" + uri + "': " + message), std::string::npos) << e;
  }
}

TEST(UrdfMeshes, ErrorsNameTheUrdfLineAndTheMesh) {
  fs::path root = temp_root() / "mesh_errors";
  // a missing file, a flat mesh (coplanar vertices), a mesh of 3 points
  write(root, "flat.obj", "v 0 0 0\nv 1 0 0\nv 1 1 0\nv 0 1 0\nf 1 2 3 4\n");
  write(root, "tri.obj", "v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n");
  for (auto [file, message] : std::map<std::string, std::string>{
           {"missing.stl", "mesh file '" + (root / "missing.stl").string() + "' not found"},
           {"flat.obj", "no convex hull: the points are coplanar or collinear"},
           {"tri.obj", "a convex hull needs at least 4 points, got 3"}}) {
    std::string urdf = write(
        root, "robot.urdf",
        one_link("<collision><geometry><mesh filename='" + file + "'/></geometry></collision>"));
    std::string e = load_file_error(urdf);
    std::string where = urdf + ":3: mesh '" + file + "' (" + (root / file).string() + "): ";
    EXPECT_NE(e.find(where), std::string::npos) << e;
    EXPECT_NE(e.find(message), std::string::npos) << e;
  }
}

//------------------------------------------------------------------ example-robot-data

// example-robot-data's robots/ folder: $PHX_EXAMPLE_ROBOT_DATA, else the one pip installed in
// the project's venv (.venv, scripts/setup.sh); empty when neither exists
fs::path example_robot_data() {
  if (const char* dir = std::getenv("PHX_EXAMPLE_ROBOT_DATA")) return dir;
  std::error_code ec;
  fs::path lib = fs::path(PHX_SOURCE_DIR) / ".venv" / "lib";
  for (const auto& python : fs::directory_iterator(lib, ec)) {
    fs::path robots = python.path() / "site-packages/cmeel.prefix/share/example-robot-data/robots";
    if (fs::is_directory(robots / "panda_description", ec)) return robots;
  }
  return {};
}

// every mesh's hull: at least 4 vertices, each face a unit normal with all of the mesh's
// vertices below its plane, and Euler's formula
void expect_valid_meshes(const Model& m) {
  for (int k = 0; k < m.nmesh; k++) {
    int v0 = m.mesh_vertadr[k], nv = m.mesh_vertnum[k], nf = m.mesh_polynum[k];
    int nadj = 0;
    for (int v = v0; v < v0 + nv; v++) nadj += m.mesh_vertadjnum[v];
    EXPECT_EQ(nv - nadj / 2 + nf, 2) << "mesh " << k;
    for (int f = m.mesh_polyadr[k]; f < m.mesh_polyadr[k] + nf; f++) {
      const double* n = &m.mesh_polynormal[3 * f];
      EXPECT_NEAR(n[0] * n[0] + n[1] * n[1] + n[2] * n[2], 1, 1e-12);
      const double* a = &m.mesh_vert[3 * (v0 + m.mesh_polyvert[m.mesh_polyvertadr[f]])];
      for (int v = v0; v < v0 + nv; v++) {
        const double* p = &m.mesh_vert[3 * v];
        EXPECT_LE(n[0] * (p[0] - a[0]) + n[1] * (p[1] - a[1]) + n[2] * (p[2] - a[2]), 1e-9);
      }
    }
  }
}

TEST(ExampleRobotData, PandaCollisionMeshes) {
  // panda.urdf's collision meshes (package://example-robot-data/robots/panda_description/...):
  // 9 STL files, 9 hulls; its boxes on the fingers. The URDF is loaded from a copy without its
  // <mimic>, so the package is found through ROS_PACKAGE_PATH
  fs::path robots = example_robot_data();
  if (robots.empty()) {
    GTEST_SKIP() << "example-robot-data is not installed";
  }
  std::ifstream in(robots / "panda_description/urdf/panda.urdf");
  std::stringstream text;
  text << in.rdbuf();
  std::string urdf = text.str();
  size_t mimic = urdf.find("<mimic");
  ASSERT_NE(mimic, std::string::npos);
  urdf.erase(mimic, urdf.find("/>", mimic) + 2 - mimic);
  ScopedEnv ros("ROS_PACKAGE_PATH", (robots / "../..").lexically_normal().string());
  Model m = load_urdf(write(temp_root() / "panda", "panda.urdf", urdf));
  int nmeshgeom = 0, nbox = 0;
  for (int t : m.geom_type) (t == kGeomMesh ? nmeshgeom : nbox) += 1;
  EXPECT_EQ(nmeshgeom, 9);
  EXPECT_EQ(nbox, 8);
  EXPECT_EQ(m.nmesh, 9);
  EXPECT_EQ(m.nmeshvert, 1168);  // link0, link6, link7, hand: 102 each; link1-5: 152 each
  EXPECT_EQ(m.nmeshpoly, 2300);  // all triangles: 2 V - 4 per mesh
  expect_valid_meshes(m);
  // link0's hull (the base): metres, about 0.1 m around its origin
  int g = m.body_geomadr[m.body_id("panda_link0")];
  EXPECT_EQ(m.geom_type[g], kGeomMesh);
  EXPECT_GT(m.geom_rbound[g], 0.1);
  EXPECT_LT(m.geom_rbound[g], 0.3);
}

TEST(ExampleRobotData, MeshRobotsLoadInPlace) {
  // URDFs whose package:// URIs resolve from their own folder (share/example-robot-data/robots/
  // ...), with shared files loaded once: (mesh geoms, meshes)
  fs::path robots = example_robot_data();
  if (robots.empty()) {
    GTEST_SKIP() << "example-robot-data is not installed";
  }
  ScopedEnv no_ros("ROS_PACKAGE_PATH", "");
  for (auto [file, counts] : std::map<std::string, std::pair<int, int>>{
           {"ur_description/urdf/ur5_robot.urdf", {7, 7}},
           {"solo_description/robots/solo12.urdf", {17, 10}},
           {"double_pendulum_description/urdf/double_pendulum.urdf", {3, 3}}}) {
    Model m = load_urdf((robots / file).string());
    int nmeshgeom = 0;
    for (int t : m.geom_type) nmeshgeom += t == kGeomMesh;
    EXPECT_EQ(nmeshgeom, counts.first) << file;
    EXPECT_EQ(m.nmesh, counts.second) << file;
    expect_valid_meshes(m);
    for (int g = 0; g < m.ngeom; g++) {
      if (m.geom_type[g] != kGeomMesh) continue;
      EXPECT_LT(m.geom_rbound[g], 1.0) << file << " geom " << g;
    }
  }
}

//------------------------------------------------------------------ errors

// a link of 1 kg with unit inertia, on one line of the document
std::string link(const std::string& name) {
  return "<link name='" + name + "'><inertial><mass value='1'/>" +
         "<inertia ixx='1' iyy='1' izz='1' ixy='0' ixz='0' iyz='0'/></inertial></link>";
}

// links a, b, c on lines 2 to 4, the joints from line 5
std::string robot(const std::string& joints) {
  return "<robot name='r'>\n" + link("a") + "\n" + link("b") + "\n" + link("c") + "\n" + joints +
         "\n</robot>";
}

TEST(UrdfErrors, MalformedXml) {
  expect_error("<robot name='r'>\n<link name='a'>\n</robot>", {"<string>:3:", "malformed XML"});
}

TEST(UrdfErrors, UnknownJointType) {
  expect_error(robot("<joint name='j' type='screw'><parent link='a'/><child link='b'/></joint>"),
               {"<string>:5:", "joint 'j'", "unknown joint type 'screw'"});
}

TEST(UrdfErrors, UnsupportedJoints) {
  expect_error(robot("<joint name='j' type='planar'><parent link='a'/><child link='b'/></joint>"),
               {"planar joints are not supported"});
  // floating only between the root link and its child
  expect_error(robot("<joint name='j' type='fixed'><parent link='a'/><child link='b'/></joint>"
                     "<joint name='f' type='floating'><parent link='b'/><child link='c'/></joint>"),
               {"joint 'f'", "floating joint must connect the root link"});
  expect_error(robot("<joint name='j' type='revolute'><parent link='a'/><child link='b'/>"
                     "<limit lower='0' upper='1'/><dynamics friction='-0.5'/></joint>"),
               {"joint 'j'", "friction must be >= 0"});
  expect_error(robot("<joint name='j' type='revolute'><parent link='a'/><child link='b'/></joint>"),
               {"requires <limit>"});
}

// <dynamics friction> is the dof's friction loss; a mimic joint follows its leader through a
// joint equality q_k = multiplier q_j + offset
TEST(Urdf, DynamicsFrictionAndMimic) {
  Model m = load_urdf_string(
      robot("<joint name='j' type='revolute'><parent link='a'/><child link='b'/>"
            "<limit lower='0' upper='1'/><dynamics damping='0.2' friction='0.5'/></joint>"
            "<joint name='k' type='prismatic'><parent link='b'/><child link='c'/>"
            "<limit lower='0' upper='1'/><mimic joint='j' multiplier='2' offset='0.1'/>"
            "</joint>"));
  ASSERT_EQ(m.nv, 2);
  EXPECT_EQ(m.dof_frictionloss, (std::vector<double>{0.5, 0}));
  EXPECT_EQ(m.dof_damping[0], 0.2);
  ASSERT_EQ(m.neq, 1);
  EXPECT_EQ(m.eq_type[0], kEqJoint);
  EXPECT_EQ(m.eq_obj1id[0], m.joint_id("k"));
  EXPECT_EQ(m.eq_obj2id[0], m.joint_id("j"));
  EXPECT_EQ(m.eq_polycoef, (std::vector<double>{0.1, 2, 0, 0, 0}));
  expect_error(robot("<joint name='j' type='revolute'><parent link='a'/><child link='b'/>"
                     "<limit lower='0' upper='1'/><mimic joint='nope'/></joint>"
                     "<joint name='k' type='fixed'><parent link='b'/><child link='c'/></joint>"),
               {"joint 'j'", "mimics 'nope'"});
}

TEST(UrdfErrors, BrokenTrees) {
  expect_error(robot("<joint name='j' type='fixed'><parent link='a'/><child link='x'/></joint>"),
               {"joint 'j'", "unknown child link 'x'"});
  expect_error(robot("<joint name='j' type='fixed'><parent link='a'/><child link='b'/></joint>"),
               {"link 'c' is a second root"});
  expect_error(robot("<joint name='j' type='fixed'><parent link='a'/><child link='b'/></joint>"
                     "<joint name='k' type='fixed'><parent link='c'/><child link='b'/></joint>"),
               {"joint 'k'", "already has a parent joint"});
  expect_error(
      "<robot name='r'><link name='a'/><link name='b'/>"
      "<joint name='j' type='continuous'><parent link='a'/><child link='b'/></joint></robot>",
      {"link 'b' moves but has no mass or inertia"});
}

// strtod accepts "nan" and "inf"; the loader refuses them in every numeric attribute
TEST(UrdfErrors, NonFiniteNumbers) {
  expect_error(robot("<joint name='j' type='fixed'><parent link='a'/><child link='b'/>"
                     "<origin xyz='0 nan 0'/></joint>"),
               {"origin", "'xyz' must hold finite numbers, not '0 nan 0'"});
  expect_error(robot("<joint name='j' type='revolute'><parent link='a'/><child link='b'/>"
                     "<axis xyz='0 0 1'/><limit lower='-inf' upper='1'/></joint>"),
               {"limit", "'lower' must hold finite numbers"});
  expect_error(robot("<joint name='j' type='revolute'><parent link='a'/><child link='b'/>"
                     "<origin rpy='0 0 INF'/><limit lower='0' upper='1'/></joint>"),
               {"'rpy' must hold finite numbers"});
}

}  // namespace
}  // namespace phx
