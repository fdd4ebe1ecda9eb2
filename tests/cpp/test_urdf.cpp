// Tests of the URDF loader (host/urdf.cpp): the bundled arm7.urdf, inertia decomposition, fixed
// and floating joints, collision shapes, and errors on bad input.
// Tolerance: 1e-12 relative, the loader's arithmetic being a few roundings deep in double.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <stdexcept>
#include <string>

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
    <collision><geometry><mesh filename="part.stl"/></geometry></collision>
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
  EXPECT_EQ(m.geom_type, (std::vector<int>{kGeomCylinder}));  // the mesh is not loaded
  EXPECT_EQ(m.geom_size, (std::vector<double>{0.1, 0.2, 0}));
  EXPECT_NE(std::find(m.ignored.begin(), m.ignored.end(),
                      "collision mesh, not loaded (<string>:7), 1 time"),
            m.ignored.end());
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
                     "<limit lower='0' upper='1'/><mimic joint='k'/></joint>"),
               {"mimic joints are not supported"});
  expect_error(robot("<joint name='j' type='revolute'><parent link='a'/><child link='b'/>"
                     "<limit lower='0' upper='1'/><dynamics friction='0.5'/></joint>"),
               {"friction is not supported"});
  expect_error(robot("<joint name='j' type='revolute'><parent link='a'/><child link='b'/></joint>"),
               {"requires <limit>"});
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

}  // namespace
}  // namespace phx
