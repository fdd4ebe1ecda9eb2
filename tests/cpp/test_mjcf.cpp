// Tests of the MJCF loader (host/mjcf.cpp: MuJoCo's compiler, then from_mujoco) and of the
// derived arrays of host/model.cpp.
//
// Masses and inertias are checked against the textbook formulas of each solid; orientations
// against quaternions built here from axis and angle; a MuJoCo model against counts read off
// its file. tests/python/test_loader_mujoco.py compares whole models with MuJoCo itself.
// Tolerance: 1e-12 relative, MuJoCo's arithmetic being a few roundings deep in double. Errors are
// MuJoCo's messages (element and line) after the path, on one line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "host/model.h"

#ifndef PHX_HAVE_MUJOCO
// built without MuJoCo: MJCF cannot be loaded, and says why
TEST(MjcfWithoutMujoco, LoadingThrows) {
  const char* why = "phalanx was built without MuJoCo";
  try {
    phx::load_mjcf_string("<mujoco/>");
    FAIL() << "loaded MJCF without MuJoCo";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
  EXPECT_THROW(phx::load_model("model.xml"), std::runtime_error);
}
#else

namespace phx {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kTol = 1e-12;

using Quat = std::array<double, 4>;
using Mat3 = std::array<double, 9>;

Model load(const std::string& xml) {
  return load_mjcf_string(xml, ".");
}

// the message of the error that loading xml raises ("" if it loads)
std::string load_error(const std::string& xml) {
  try {
    load(xml);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

Quat quat_mul(const Quat& a, const Quat& b) {
  return {a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3],
          a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2],
          a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1],
          a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0]};
}

// rotation by angle (rad) about the axis (x, y, z), normalized here
Quat axis_angle(double x, double y, double z, double angle) {
  double n = std::sqrt(x * x + y * y + z * z), s = std::sin(angle / 2);
  return {std::cos(angle / 2), s * x / n, s * y / n, s * z / n};
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
  Mat3 R = quat_to_mat(&m.body_iquat[4 * b]), T{};
  for (int i = 0; i < 3; i++) {
    for (int j = 0; j < 3; j++) {
      for (int k = 0; k < 3; k++)
        T[3 * i + j] += R[3 * i + k] * m.body_inertia[3 * b + k] * R[3 * j + k];
    }
  }
  return T;
}

// expect a == b to kTol relative to the largest |b|
template <typename A, typename B>
void expect_near_all(const A& a, const B& b, int n, const char* what) {
  double scale = 0;
  for (int i = 0; i < n; i++) scale = std::max(scale, std::abs(b[i]));
  for (int i = 0; i < n; i++)
    EXPECT_NEAR(a[i], b[i], kTol * std::max(scale, 1.0)) << what << "[" << i << "]";
}

void expect_quat(const Model& m, const std::string& body, const Quat& q) {
  int b = m.body_id(body);
  ASSERT_GE(b, 0) << body;
  expect_near_all(&m.body_quat[4 * b], q, 4, body.c_str());
}

//------------------------------------------------------------------ masses and inertias

// one geom per body, hinged so that the body is not welded to the world
std::string single_geom(const std::string& geom) {
  return "<mujoco><worldbody><body name='b'><joint/>" + geom + "</body></worldbody></mujoco>";
}

TEST(MjcfInertia, Box) {
  // half-sizes (a, b, c): m = rho 8abc, Ixx = m (b^2 + c^2) / 3, ...; a single geom's frame is
  // the body's inertial frame and its moments are kept in geom axis order
  Model m = load(single_geom("<geom type='box' size='0.1 0.2 0.3' pos='0.1 0 0'/>"));
  double a = 0.1, b = 0.2, c = 0.3, mass = 1000 * 8 * a * b * c;
  EXPECT_NEAR(m.body_mass[1], mass, kTol * mass);
  double I[3] = {mass * (b * b + c * c) / 3, mass * (a * a + c * c) / 3,
                 mass * (a * a + b * b) / 3};
  expect_near_all(&m.body_inertia[3], I, 3, "box inertia");
  double ipos[3] = {0.1, 0, 0};
  expect_near_all(&m.body_ipos[3], ipos, 3, "box com");
}

TEST(MjcfInertia, SphereEllipsoidCylinder) {
  // sphere: m = rho 4/3 pi r^3, I = 2/5 m r^2
  Model s = load(single_geom("<geom type='sphere' size='0.1' density='500'/>"));
  double r = 0.1, ms = 500 * 4.0 / 3 * kPi * r * r * r;
  EXPECT_NEAR(s.body_mass[1], ms, kTol * ms);
  double Is[3] = {0.4 * ms * r * r, 0.4 * ms * r * r, 0.4 * ms * r * r};
  expect_near_all(&s.body_inertia[3], Is, 3, "sphere inertia");

  // ellipsoid: m = rho 4/3 pi abc, Ixx = m (b^2 + c^2) / 5
  Model e = load(single_geom("<geom type='ellipsoid' size='0.1 0.2 0.3'/>"));
  double me = 1000 * 4.0 / 3 * kPi * 0.1 * 0.2 * 0.3;
  EXPECT_NEAR(e.body_mass[1], me, kTol * me);
  double Ie[3] = {me * (0.04 + 0.09) / 5, me * (0.01 + 0.09) / 5, me * (0.01 + 0.04) / 5};
  expect_near_all(&e.body_inertia[3], Ie, 3, "ellipsoid inertia");

  // cylinder of radius r, length h: m = rho pi r^2 h, Ixx = m (3 r^2 + h^2) / 12, Izz = m r^2 / 2
  Model c = load(single_geom("<geom type='cylinder' size='0.05 0.2'/>"));
  double h = 0.4, rc = 0.05, mc = 1000 * kPi * rc * rc * h;
  EXPECT_NEAR(c.body_mass[1], mc, kTol * mc);
  double Ic[3] = {mc * (3 * rc * rc + h * h) / 12, mc * (3 * rc * rc + h * h) / 12,
                  mc * rc * rc / 2};
  expect_near_all(&c.body_inertia[3], Ic, 3, "cylinder inertia");
}

TEST(MjcfInertia, Capsule) {
  // a cylinder (radius r, length h) and two hemispheres: m = rho pi (r^2 h + 4/3 r^3).
  // The hemispheres together have 2/5 m_s r^2 about their common base centre; each one's centre
  // of mass lies 3r/8 from its base, so moving them from there to h/2 + 3r/8 from the capsule's
  // centre adds m_s ((h/2 + 3r/8)^2 - (3r/8)^2) = m_s (h^2/4 + 3 r h / 8) (parallel axes).
  Model m = load(single_geom("<geom type='capsule' fromto='0 0 0 0 0 0.4' size='0.05'/>"));
  double r = 0.05, h = 0.4;
  double mcyl = 1000 * kPi * r * r * h, msph = 1000 * 4.0 / 3 * kPi * r * r * r;
  double mass = mcyl + msph;
  EXPECT_NEAR(m.body_mass[1], mass, kTol * mass);
  double Ixx =
      mcyl * (3 * r * r + h * h) / 12 + 0.4 * msph * r * r + msph * (h * h / 4 + 3 * r * h / 8);
  double Izz = mcyl * r * r / 2 + 0.4 * msph * r * r;
  double I[3] = {Ixx, Ixx, Izz};
  expect_near_all(&m.body_inertia[3], I, 3, "capsule inertia");

  // fromto: centred between the points, z along from - to (here -z: a half turn about x)
  double pos[3] = {0, 0, 0.2}, size[3] = {0.05, 0.2, 0};
  expect_near_all(&m.geom_pos[0], pos, 3, "capsule pos");
  expect_near_all(&m.geom_size[0], size, 3, "capsule size");
  Quat flip = {std::cos(kPi / 2), 1, 0, 0};
  expect_near_all(&m.geom_quat[0], flip, 4, "capsule quat");
}

TEST(MjcfInertia, TwoGeomsByParallelAxes) {
  // a box turned a quarter turn about z (its x and y moments swap) and an offset sphere:
  // com = sum m_i p_i / M; T = sum R_i diag(I_i) R_i^T + m_i (|d_i|^2 1 - d_i d_i^T), d_i = p_i -
  // com
  Model m =
      load(single_geom("<geom type='box' size='0.1 0.2 0.05' axisangle='0 0 1 90'/>"
                       "<geom type='sphere' size='0.05' pos='0.3 0.1 0.2' density='3000'/>"));
  double a = 0.1, b = 0.2, c = 0.05, mb = 1000 * 8 * a * b * c;
  double r = 0.05, ms = 3000 * 4.0 / 3 * kPi * r * r * r, M = mb + ms;
  double p[2][3] = {{0, 0, 0}, {0.3, 0.1, 0.2}};
  double com[3];
  for (int i = 0; i < 3; i++) com[i] = (mb * p[0][i] + ms * p[1][i]) / M;
  Mat3 T{};
  T[0] = mb * (a * a + c * c) / 3;  // box's y moment, now about body x
  T[4] = mb * (b * b + c * c) / 3;
  T[8] = mb * (a * a + b * b) / 3;
  for (int i = 0; i < 3; i++) T[4 * i] += 0.4 * ms * r * r;
  double mass[2] = {mb, ms};
  for (int g = 0; g < 2; g++) {
    double d[3] = {p[g][0] - com[0], p[g][1] - com[1], p[g][2] - com[2]};
    double dd = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
    for (int i = 0; i < 3; i++) {
      for (int j = 0; j < 3; j++) T[3 * i + j] += mass[g] * ((i == j ? dd : 0) - d[i] * d[j]);
    }
  }
  EXPECT_NEAR(m.body_mass[1], M, kTol * M);
  expect_near_all(&m.body_ipos[3], com, 3, "com");
  expect_near_all(body_tensor(m, 1), T, 9, "inertia tensor");
  // principal moments come sorted, largest first, on a unit quaternion
  EXPECT_GE(m.body_inertia[3], m.body_inertia[4]);
  EXPECT_GE(m.body_inertia[4], m.body_inertia[5]);
  const double* q = &m.body_iquat[4];
  EXPECT_NEAR(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3], 1, kTol);
}

TEST(MjcfInertia, ExplicitInertialAndFullInertia) {
  // an <inertial> replaces the geoms (inertiafromgeom="auto"); fullinertia is diagonalized
  Model m = load(
      "<mujoco><worldbody><body><joint/>"
      "<inertial pos='0.1 0.2 0.3' mass='2' fullinertia='0.02 0.025 0.03 0.001 -0.002 0.003'/>"
      "<geom type='sphere' size='1'/>"
      "</body></worldbody></mujoco>");
  EXPECT_EQ(m.body_mass[1], 2);
  double ipos[3] = {0.1, 0.2, 0.3};
  expect_near_all(&m.body_ipos[3], ipos, 3, "ipos");
  Mat3 full = {0.02, 0.001, -0.002, 0.001, 0.025, 0.003, -0.002, 0.003, 0.03};
  expect_near_all(body_tensor(m, 1), full, 9, "fullinertia");
}

TEST(MjcfInertia, SetTotalMassScalesMassesAndInertias) {
  std::string body =
      "<body><joint/><geom type='box' size='0.1 0.1 0.1'/>"
      "<body pos='1 0 0'><joint/><geom type='sphere' size='0.1'/></body></body>";
  Model ref = load("<mujoco><worldbody>" + body + "</worldbody></mujoco>");
  Model m =
      load("<mujoco><compiler settotalmass='10'/><worldbody>" + body + "</worldbody></mujoco>");
  double scale = 10 / (ref.body_mass[1] + ref.body_mass[2]);
  for (int b = 1; b < 3; b++) {
    EXPECT_NEAR(m.body_mass[b], scale * ref.body_mass[b], kTol * m.body_mass[b]);
    for (int k = 0; k < 3; k++) {
      EXPECT_NEAR(m.body_inertia[3 * b + k], scale * ref.body_inertia[3 * b + k],
                  kTol * m.body_inertia[3 * b + k]);
    }
  }
  EXPECT_NEAR(m.body_mass[1] + m.body_mass[2], 10, kTol * 10);
}

TEST(MjcfGeom, BoundingRadii) {
  Model m = load(
      "<mujoco><worldbody><geom type='plane' size='1 1 0.1'/>"
      "<geom type='sphere' size='0.3'/><geom type='capsule' size='0.1 0.4'/>"
      "<geom type='box' size='0.1 0.2 0.2'/><geom type='cylinder' size='0.3 0.4'/>"
      "<geom type='ellipsoid' size='0.1 0.5 0.2'/></worldbody></mujoco>");
  double expected[6] = {0, 0.3, 0.5, 0.3, 0.5, 0.5};  // plane: infinite, box: |size|
  expect_near_all(m.geom_rbound, expected, 6, "rbound");
  EXPECT_EQ(m.body_mass[0], 0);  // world geoms carry no mass
}

//------------------------------------------------------------------ orientations

TEST(MjcfOrientation, EveryFormGivesTheSameQuaternion) {
  // a quarter turn about x: y goes to z, z goes to -y
  Model m = load(
      "<mujoco><worldbody>"
      "<body name='quat' quat='0.7071067811865476 0.7071067811865476 0 0'/>"
      "<body name='axisangle' axisangle='1 0 0 90'/>"
      "<body name='euler' euler='90 0 0'/>"
      "<body name='xyaxes' xyaxes='1 0 0 0 0 1'/>"
      "<body name='zaxis' zaxis='0 -1 0'/>"
      "</worldbody></mujoco>");
  Quat q = axis_angle(1, 0, 0, kPi / 2);
  for (const char* b : {"quat", "axisangle", "euler", "xyaxes", "zaxis"}) expect_quat(m, b, q);
}

TEST(MjcfOrientation, GeneralRotation) {
  // 50 degrees about (1, 2, 3); xyaxes from the first two columns of its matrix
  Quat q = axis_angle(1, 2, 3, 50 * kPi / 180);
  Mat3 R = quat_to_mat(q.data());
  char xy[256];
  std::snprintf(xy, sizeof(xy), "%.17g %.17g %.17g %.17g %.17g %.17g", R[0], R[3], R[6], R[1], R[4],
                R[7]);
  Model m = load(std::string("<mujoco><worldbody>") +
                 "<body name='axisangle' axisangle='1 2 3 50'/>" + "<body name='xyaxes' xyaxes='" +
                 xy + "'/>" + "<body name='quat' quat='2 0 0 0'/>" +  // normalized
                 "<body name='zaxis' zaxis='1 1 1'/>" + "</worldbody></mujoco>");
  expect_quat(m, "axisangle", q);
  expect_quat(m, "xyaxes", q);
  expect_quat(m, "quat", {1, 0, 0, 0});
  // zaxis: the smallest rotation taking z to (1, 1, 1): about z x v by acos(1/sqrt 3)
  expect_quat(m, "zaxis", axis_angle(-1, 1, 0, std::acos(1 / std::sqrt(3.0))));
}

TEST(MjcfOrientation, EulerSequences) {
  // default "xyz": rotating axes, q = qx qy qz. Lowercase "zyx" (rotating) equals uppercase
  // "XYZ" (fixed) with the angles reversed: both are qz(a) qy(b) qx(c)
  Quat qx = axis_angle(1, 0, 0, 10 * kPi / 180), qy = axis_angle(0, 1, 0, 20 * kPi / 180);
  Quat qz = axis_angle(0, 0, 1, 30 * kPi / 180);
  std::string body = "<worldbody><body name='b' euler='%'/></worldbody></mujoco>";
  auto model = [&](const std::string& compiler, const std::string& euler) {
    std::string xml = "<mujoco>" + compiler + body;
    return load(xml.replace(xml.find('%'), 1, euler));
  };
  expect_quat(model("", "10 20 30"), "b", quat_mul(quat_mul(qx, qy), qz));
  expect_quat(model("<compiler eulerseq='zyx'/>", "30 20 10"), "b", quat_mul(quat_mul(qz, qy), qx));
  expect_quat(model("<compiler eulerseq='XYZ'/>", "10 20 30"), "b", quat_mul(quat_mul(qz, qy), qx));
  expect_quat(model("<compiler eulerseq='ZYX'/>", "30 20 10"), "b", quat_mul(quat_mul(qx, qy), qz));
}

TEST(MjcfOrientation, RadianAndDegree) {
  // angle="degree" (the default) converts euler, axisangle, hinge ranges and refs; slide ranges
  // stay in metres
  std::string rest =
      "<worldbody><body name='b' euler='0 0 %'><joint name='h' range='-% %' ref='%'/>"
      "<joint name='s' type='slide' range='-2 2'/><geom size='0.1'/></body></worldbody></mujoco>";
  auto model = [&](const std::string& angle, const std::string& value) {
    std::string xml = "<mujoco><compiler angle='" + angle + "'/>" + rest;
    for (size_t p; (p = xml.find('%')) != std::string::npos;) xml.replace(p, 1, value);
    return load(xml);
  };
  Model deg = model("degree", "30"), rad = model("radian", "0.5235987755982988");
  for (const Model* m : {&deg, &rad}) {
    expect_quat(*m, "b", axis_angle(0, 0, 1, kPi / 6));
    EXPECT_NEAR(m->jnt_range[0], -kPi / 6, kTol);
    EXPECT_NEAR(m->jnt_range[1], kPi / 6, kTol);
    EXPECT_NEAR(m->qpos0[0], kPi / 6, kTol);
    EXPECT_EQ(m->jnt_range[2], -2);
    EXPECT_EQ(m->jnt_range[3], 2);
  }
}

//------------------------------------------------------------------ defaults and structure

TEST(MjcfDefaults, InheritanceAndChildclass) {
  Model m = load(R"(
<mujoco>
  <default>
    <joint damping="1" armature="0.1"/>
    <geom type="capsule" size="0.1 0.2" friction="0.5"/>
    <default class="a">
      <joint damping="2"/>
      <geom size="0.3" density="2000"/>
      <default class="b">
        <joint stiffness="5"/>
        <geom type="box" size="0.4 0.5 0.6"/>
      </default>
    </default>
  </default>
  <worldbody>
    <body name="p">
      <joint name="j0"/>
      <geom name="g0"/>
      <body name="q" childclass="a">
        <joint name="j1"/>
        <geom name="g1"/>
        <geom name="g2" class="b"/>
        <body name="r">
          <joint name="j2" class="b"/>
          <geom name="g3" class="main"/>
        </body>
      </body>
    </body>
    <body name="f" childclass="a">
      <freejoint name="free"/>
      <geom name="g4" type="sphere"/>
    </body>
  </worldbody>
</mujoco>)");
  auto geom = [&](const char* name) { return m.geom_id(name); };
  // main: capsule (0.1, 0.2); class a replaces only the first size
  double s0[3] = {0.1, 0.2, 0}, s1[3] = {0.3, 0.2, 0}, s2[3] = {0.4, 0.5, 0.6};
  expect_near_all(&m.geom_size[3 * geom("g0")], s0, 3, "g0");
  expect_near_all(&m.geom_size[3 * geom("g1")], s1, 3, "g1");
  expect_near_all(&m.geom_size[3 * geom("g2")], s2, 3, "g2 (class b)");
  expect_near_all(&m.geom_size[3 * geom("g3")], s0, 3, "g3 (class main in childclass a)");
  EXPECT_EQ(m.geom_type[geom("g2")], kGeomBox);
  EXPECT_EQ(m.geom_type[geom("g3")], kGeomCapsule);
  EXPECT_EQ(m.geom_friction[3 * geom("g2")], 0.5);  // inherited from main through a and b

  // densities: g1 (class a, 2000) against g0 (main, 1000), same shape but the radius
  double r = 0.3, h = 0.4, m1 = 2000 * kPi * (r * r * h + 4.0 / 3 * r * r * r);
  double mq = m1 + 2000 * 8 * 0.4 * 0.5 * 0.6;  // body q: g1 and the box g2
  EXPECT_NEAR(m.body_mass[m.body_id("q")], mq, kTol * mq);

  // joints: j1 from a, j2 from b (childclass a of r overridden), free joint takes no defaults
  int j1 = m.joint_id("j1"), j2 = m.joint_id("j2"), jf = m.joint_id("free");
  EXPECT_EQ(m.dof_damping[m.jnt_dofadr[m.joint_id("j0")]], 1);
  EXPECT_EQ(m.dof_damping[m.jnt_dofadr[j1]], 2);
  EXPECT_EQ(m.dof_armature[m.jnt_dofadr[j1]], 0.1);
  EXPECT_EQ(m.jnt_stiffness[j1], 0);
  EXPECT_EQ(m.dof_damping[m.jnt_dofadr[j2]], 2);
  EXPECT_EQ(m.jnt_stiffness[j2], 5);
  for (int d = 0; d < 6; d++) {
    EXPECT_EQ(m.dof_damping[m.jnt_dofadr[jf] + d], 0);
    EXPECT_EQ(m.dof_armature[m.jnt_dofadr[jf] + d], 0);
  }
}

TEST(MjcfModel, AddressesAndReferenceConfiguration) {
  // world - a (free) - b (hinge, ball) - c (slide)
  //                  \ d (no joint)    - e (hinge)
  Model m = load(R"(
<mujoco>
  <worldbody>
    <body name="a" pos="1 2 3" quat="0 1 0 0">
      <freejoint/>
      <geom size="0.1"/>
      <body name="b">
        <joint name="bh" type="hinge" ref="90" springref="45"/>
        <joint type="ball"/>
        <geom size="0.1"/>
        <body name="c">
          <joint name="cs" type="slide" ref="0.2" springref="0.3"/><geom size="0.1"/>
        </body>
      </body>
      <body name="d">
        <geom size="0.1"/>
        <body name="e"><joint name="eh"/><geom size="0.1"/></body>
      </body>
    </body>
  </worldbody>
</mujoco>)");
  EXPECT_EQ(m.nbody, 6);
  EXPECT_EQ(m.njnt, 5);
  EXPECT_EQ(m.nq, 7 + 4 + 1 + 1 + 1);
  EXPECT_EQ(m.nv, 6 + 3 + 1 + 1 + 1);
  EXPECT_EQ(m.body_parentid, (std::vector<int>{0, 0, 1, 2, 1, 4}));
  EXPECT_EQ(m.body_rootid, (std::vector<int>{0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(m.jnt_qposadr, (std::vector<int>{0, 7, 8, 12, 13}));
  EXPECT_EQ(m.jnt_dofadr, (std::vector<int>{0, 6, 7, 10, 11}));
  EXPECT_EQ(m.body_dofadr, (std::vector<int>{-1, 0, 6, 10, -1, 11}));
  // dof parents: the previous dof in the body, else the last dof of the nearest ancestor with dofs
  EXPECT_EQ(m.dof_parentid, (std::vector<int>{-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 5}));
  EXPECT_EQ(m.dof_jntid, (std::vector<int>{0, 0, 0, 0, 0, 0, 1, 2, 2, 2, 3, 4}));
  // qpos0: free = body pose, hinge = ref in radians, ball = identity, slide = ref
  std::vector<double> qpos0 = {1, 2, 3, 0, 1, 0, 0, kPi / 2, 1, 0, 0, 0, 0.2, 0};
  std::vector<double> spring = {1, 2, 3, 0, 1, 0, 0, kPi / 4, 1, 0, 0, 0, 0.3, 0};
  expect_near_all(m.qpos0, qpos0, m.nq, "qpos0");
  expect_near_all(m.qpos_spring, spring, m.nq, "qpos_spring");
  EXPECT_EQ(m.body_geomadr, (std::vector<int>{-1, 0, 1, 2, 3, 4}));
}

TEST(MjcfModel, OptionsFlagsActuatorsAndExclusions) {
  Model m = load(R"(
<mujoco>
  <option timestep="0.004" gravity="0 0 -3" integrator="RK4">
    <flag contact="disable"/>
  </option>
  <default><motor ctrlrange="-2 2" gear="7 1 1"/></default>
  <worldbody>
    <light/><light/>
    <body name="a"><joint name="j"/><geom size="0.1" rgba="1 0 0 1"/>
      <body name="b"><joint name="k" type="slide"/><geom size="0.1"/></body>
    </body>
  </worldbody>
  <contact><exclude body1="a" body2="b"/></contact>
  <actuator>
    <motor name="m1" joint="k"/>
    <motor name="m2" joint="j" gear="3" ctrllimited="false"/>
  </actuator>
</mujoco>)");
  EXPECT_EQ(m.opt.timestep, 0.004);
  EXPECT_EQ(m.opt.gravity[2], -3);
  EXPECT_EQ(m.geom_contype, (std::vector<int>{0, 0}));  // contact disabled: nothing collides
  EXPECT_EQ(m.exclude_bodies, (std::vector<int>{1, 2}));
  EXPECT_EQ(m.actuator_trnid, (std::vector<int>{1, 0}));
  EXPECT_EQ(m.actuator_gear, (std::vector<double>{7, 3}));
  EXPECT_EQ(m.actuator_ctrllimited, (std::vector<int>{1, 0}));  // autolimits: range given
  EXPECT_EQ(m.actuator_ctrlrange, (std::vector<double>{-2, 2, -2, 2}));
  EXPECT_EQ(m.actuator_id("m2"), 1);
  // ignored (from_mujoco's list): one entry per kind, first element and count
  auto has = [&](const std::string& part) {
    for (const std::string& s : m.ignored)
      if (s.find(part) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(has("light (first: light 0), 2 times"));
  EXPECT_TRUE(has("integrator=\"RK4\", substituted by semi-implicit Euler"));
}

TEST(MjcfModel, FrameMovesChildren) {
  // a frame turned a quarter turn about z and shifted by x: its body, geom and joint follow
  Model m = load(R"(
<mujoco>
  <worldbody>
    <body name="a"><joint/><geom size="0.1"/>
      <frame pos="1 0 0" euler="0 0 90">
        <body name="b" pos="1 0 0">
          <joint name="h" axis="1 0 0" pos="0 0 0"/><geom size="0.1"/>
        </body>
        <geom name="g" type="box" size="0.1 0.1 0.1" pos="0 1 0"/>
        <joint name="k" axis="1 0 0" pos="1 0 0"/>
      </frame>
    </body>
  </worldbody>
</mujoco>)");
  double bpos[3] = {1, 1, 0}, gpos[3] = {0, 0, 0}, kpos[3] = {1, 1, 0}, kaxis[3] = {0, 1, 0};
  expect_near_all(&m.body_pos[3 * m.body_id("b")], bpos, 3, "body in frame");
  expect_quat(m, "b", axis_angle(0, 0, 1, kPi / 2));
  expect_near_all(&m.geom_pos[3 * m.geom_id("g")], gpos, 3, "geom in frame");
  expect_near_all(&m.jnt_pos[3 * m.joint_id("k")], kpos, 3, "joint anchor in frame");
  expect_near_all(&m.jnt_axis[3 * m.joint_id("k")], kaxis, 3, "joint axis in frame");
}

//------------------------------------------------------------------ files and includes

class MjcfFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("phx_test_mjcf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_ / "parts");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  std::filesystem::path dir_;
};

TEST_F(MjcfFiles, IncludeIsRelativeToTheIncludingFile) {
  std::string main =
      write("main.xml",
            "<mujoco model='main'>\n"
            "  <include file='parts/arm.xml'/>\n"
            "  <worldbody><body name='base'><joint/><geom class='arm'/></body></worldbody>\n"
            "</mujoco>\n");
  write(
      "parts/arm.xml",
      "<mujoco>\n"
      "  <default><default class='arm'><geom type='box' size='0.1 0.2 0.3'/></default></default>\n"
      "  <include file='link.xml'/>\n"
      "</mujoco>\n");
  write("parts/link.xml",
        "<mujoco><worldbody><body name='link'><joint/><geom "
        "size='0.1'/></body></worldbody></mujoco>");
  Model m = load_mjcf(main);
  EXPECT_EQ(m.name, "main");
  EXPECT_EQ(m.source, main);
  // the included worldbody comes first in document order
  EXPECT_EQ(m.body_names, (std::vector<std::string>{"world", "link", "base"}));
  EXPECT_EQ(m.geom_type[1], kGeomBox);   // class defined in the included file
  EXPECT_EQ(load_model(main).nbody, 3);  // dispatch by extension
}

TEST_F(MjcfFiles, MissingIncludeNamesTheFileAndTheLine) {
  std::string main =
      write("main.xml", "<mujoco>\n  <worldbody/>\n  <include file='missing.xml'/>\n</mujoco>\n");
  try {
    load_mjcf(main);
    FAIL() << "loaded a model with a missing include";
  } catch (const std::runtime_error& e) {
    // "<path>: XML Error: Error opening file 'missing.xml'; Element 'include', line 3"
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind(main + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find("missing.xml"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'include', line 3"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;  // one line
  }
}

TEST_F(MjcfFiles, MalformedXmlNamesTheFileAndTheLine) {
  std::string path =
      write("bad.xml", "<mujoco>\n  <worldbody>\n    <body>\n  </worldbody>\n</mujoco>\n");
  try {
    load_mjcf(path);
    FAIL() << "loaded malformed XML";
  } catch (const std::runtime_error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find("XML parse error"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Line number=3"), std::string::npos) << msg;  // the unclosed <body>
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST_F(MjcfFiles, MissingFileIsNamed) {
  std::string path = (dir_ / "absent.xml").string();
  try {
    load_model(path);
    FAIL() << "loaded a file that does not exist";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
  }
}

// a unit cube (half-size 0.5) as a Wavefront OBJ file
constexpr const char* kCubeObj =
    "v -0.5 -0.5 -0.5\nv 0.5 -0.5 -0.5\nv 0.5 0.5 -0.5\nv -0.5 0.5 -0.5\n"
    "v -0.5 -0.5 0.5\nv 0.5 -0.5 0.5\nv 0.5 0.5 0.5\nv -0.5 0.5 0.5\n"
    "f 1 3 2\nf 1 4 3\nf 5 6 7\nf 5 7 8\nf 1 2 6\nf 1 6 5\n"
    "f 2 3 7\nf 2 7 6\nf 3 4 8\nf 3 8 7\nf 4 1 5\nf 4 5 8\n";

// a body with a mesh geom (mesh file relative to meshdir) and a box on the floor
constexpr const char* kMeshXml =
    "<mujoco model='cube'>\n"
    "  <compiler meshdir='meshes'/>\n"
    "  <asset><mesh name='cube' file='cube.obj' scale='0.2 0.2 0.2'/></asset>\n"
    "  <worldbody>\n"
    "    <geom name='floor' type='plane' size='1 1 0.1'/>\n"
    "    <body name='b' pos='0 0 1'><freejoint/><geom name='m' type='mesh' mesh='cube'/></body>\n"
    "  </worldbody>\n"
    "</mujoco>\n";

void expect_cube_mesh(const Model& m) {
  ASSERT_EQ(m.nmesh, 1);
  int g = m.geom_id("m");
  ASSERT_GE(g, 0);
  EXPECT_EQ(m.geom_type[g], kGeomMesh);
  EXPECT_EQ(m.geom_dataid[g], 0);
  // the hull of a cube: its 8 corners, 0.1 sqrt(3) from the centroid after scaling (MuJoCo
  // may turn the mesh to principal axes, which a cube's isotropic inertia leaves arbitrary)
  EXPECT_EQ(m.mesh_vertnum[0], 8);
  for (int v = 0; v < 8; v++) {
    const double* p = &m.mesh_vert[3 * (m.mesh_vertadr[0] + v)];
    // MuJoCo keeps mesh vertices in single precision
    EXPECT_NEAR(std::sqrt(p[0] * p[0] + p[1] * p[1] + p[2] * p[2]), 0.1 * std::sqrt(3.0), 1e-7);
  }
  // a solid cube of side 0.2 with density 1000: 8 kg, I = m s^2 / 6
  int b = m.body_id("b");
  EXPECT_NEAR(m.body_mass[b], 8, 1e-6);
  for (int k = 0; k < 3; k++) EXPECT_NEAR(m.body_inertia[3 * b + k], 8 * 0.04 / 6, 1e-7);
}

TEST_F(MjcfFiles, MeshGeomLoadsWithItsHullFromMeshdir) {
  std::filesystem::create_directories(dir_ / "meshes");
  write("meshes/cube.obj", kCubeObj);
  std::string path = write("cube.xml", kMeshXml);
  Model m = load_model(path);
  EXPECT_EQ(m.name, "cube");
  expect_cube_mesh(m);
}

TEST_F(MjcfFiles, StringResolvesAssetsAndIncludesAgainstDir) {
  std::filesystem::create_directories(dir_ / "meshes");
  write("meshes/cube.obj", kCubeObj);
  write("parts/floor.xml",
        "<mujoco><worldbody><geom name='extra' type='box' size='1 1 1'/></worldbody></mujoco>");
  std::string xml = kMeshXml;
  xml.insert(xml.find("  <worldbody>"), "  <include file='parts/floor.xml'/>\n");
  Model m = load_mjcf_string(xml, dir_.string());
  expect_cube_mesh(m);
  EXPECT_GE(m.geom_id("extra"), 0);
  EXPECT_TRUE(m.source.empty());
  // relative to the current directory, the mesh is not found
  try {
    load_mjcf_string(xml, ".");
    FAIL() << "found the mesh without the directory";
  } catch (const std::runtime_error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("<string>: ", 0), 0u) << msg;
  }
}

TEST(MjcfModel, MugMeshAndItsHull) {
  // MuJoCo's mug: an OBJ mesh (meshdir, texture) on a visual geom; MuJoCo computes no hull for
  // it, so its bounding box stands in (and is listed in ignored)
  Model m = load_model(std::string(PHX_MUJOCO_MODELS) + "/mug/mug.xml");
  EXPECT_GE(m.nmesh, 1);
  EXPECT_GT(m.mesh_vertnum[0], 3);
  bool has_mesh_geom = false;
  for (int g = 0; g < m.ngeom; g++) has_mesh_geom |= m.geom_type[g] == kGeomMesh;
  EXPECT_TRUE(has_mesh_geom);
  bool listed = false;
  for (const std::string& s : m.ignored) listed |= s.find("bounding box stands in") != s.npos;
  EXPECT_TRUE(listed);
}

TEST(MjcfModel, HumanoidStructure) {
  // humanoid.xml: the torso with a free joint and 15 more bodies (head, lower waist, pelvis,
  // 2 x (thigh, shin, foot), 2 x (upper arm, lower arm, hand)); 21 hinges (abdomen 3, each leg
  // 6, each arm 3); 19 body geoms and the floor; one motor per hinge
  Model m = load_mjcf(std::string(PHX_MUJOCO_MODELS) + "/humanoid/humanoid.xml");
  EXPECT_EQ(m.name, "Humanoid");
  EXPECT_EQ(m.nbody, 17);
  EXPECT_EQ(m.njnt, 22);
  EXPECT_EQ(m.nq, 7 + 21);
  EXPECT_EQ(m.nv, 6 + 21);
  EXPECT_EQ(m.ngeom, 20);
  EXPECT_EQ(m.nu, 21);
  EXPECT_EQ(m.opt.timestep, 0.005);
  EXPECT_EQ(m.jnt_type[0], kJointFree);
  // depth first: torso, head, lower_waist, pelvis, right leg, left leg, right arm, left arm
  EXPECT_EQ(m.body_id("head"), 2);
  EXPECT_EQ(m.body_id("right_foot"), 7);
  EXPECT_EQ(m.body_id("right_upper_arm"), 11);
  EXPECT_EQ(m.body_parentid[m.body_id("right_upper_arm")], m.body_id("torso"));
  // abdomen_z is the first hinge: after the free joint's 7 coordinates and 6 dofs, and its dof
  // hangs off the free joint's last dof; right_shoulder1's parent dof is also the torso's last
  int abdomen = m.joint_id("abdomen_z"), shoulder = m.joint_id("right_shoulder1");
  EXPECT_EQ(m.jnt_qposadr[abdomen], 7);
  EXPECT_EQ(m.jnt_dofadr[abdomen], 6);
  EXPECT_EQ(m.dof_parentid[6], 5);
  EXPECT_EQ(m.dof_parentid[m.jnt_dofadr[shoulder]], 5);
  // qpos0 of the free joint: the torso at 1.5 m
  EXPECT_EQ(m.qpos0[2], 1.5);
  EXPECT_EQ(m.qpos0[3], 1);
  // class big_stiff_joint (stiffness 20, damping 5), knee range -160..2 degrees
  EXPECT_EQ(m.jnt_stiffness[abdomen], 20);
  EXPECT_EQ(m.dof_damping[6], 5);
  int knee = m.joint_id("right_knee");
  EXPECT_NEAR(m.jnt_range[2 * knee], -160 * kPi / 180, kTol);
  EXPECT_EQ(m.actuator_gear[m.actuator_id("right_hip_y")], 120);
  EXPECT_EQ(m.actuator_trnid[m.actuator_id("right_hip_y")], m.joint_id("right_hip_y"));
}

//------------------------------------------------------------------ errors

void expect_error(const std::string& xml, std::initializer_list<const char*> parts) {
  std::string msg = load_error(xml);
  ASSERT_FALSE(msg.empty()) << "loaded:\n" << xml;
  EXPECT_EQ(msg.rfind("<string>: ", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  for (const char* p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

TEST(MjcfErrors, MujocosMessageNamesTheElementAndTheLine) {
  expect_error(
      "<mujoco>\n<worldbody>\n<body><joint name='j' type='twist'/></body>\n</worldbody>\n</mujoco>",
      {"invalid keyword: 'twist'", "Element 'joint', line 3"});
  expect_error(
      "<mujoco>\n<worldbody>\n<geom name='g' type='cone' size='1'/>\n</worldbody>\n</mujoco>",
      {"'cone'", "Element 'geom', line 3"});
  expect_error("<mujoco><worldbody>\n<geom size='1' colour='red'/></worldbody></mujoco>",
               {"unrecognized attribute: 'colour'", "Element 'geom', line 2"});
  expect_error("<mujoco><worldbody><geom size='1' class='nope'/></worldbody></mujoco>", {"nope"});
  expect_error("<mujoco><worldbody><body><joint/></body></worldbody></mujoco>",
               {"mass and inertia of moving bodies"});
  expect_error("<mujoco><worldbody><body name='a'/><body name='a'/></worldbody></mujoco>",
               {"repeated name"});
}

TEST(MjcfErrors, UnsupportedPhysicsIsRefusedByName) {
  // from_mujoco's refusals, naming the element
  expect_error(
      "<mujoco>\n<worldbody><body><joint name='j'/><geom size='1'/></body></worldbody>\n"
      "<tendon>\n  <fixed name='t' armature='1'><joint joint='j' "
      "coef='1'/></fixed>\n</tendon>\n"
      "</mujoco>",
      {"tendon 't'"});
  expect_error(
      "<mujoco><worldbody><body><joint name='j'/><geom size='1'/></body></worldbody>"
      "<actuator><general name='p' joint='j' dyntype='user'/></actuator></mujoco>",
      {"actuator 'p'", "dyntype user"});
}

}  // namespace
}  // namespace phx

#endif  // PHX_HAVE_MUJOCO
