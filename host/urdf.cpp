// URDF loader: a ROS robot description into a phx::Model.
//
// Each link becomes a body, attached to the world by a weld (a fixed base): the root link is
// body 1, the others follow depth first from it, children in the order of their joints in the
// file. A link's body frame is its parent joint's frame, so the joint sits at the body origin
// with its axis in body coordinates. Joints map to MuJoCo's types: revolute (limited) and
// continuous (unlimited) to hinges, prismatic to slides, floating to a free joint (only below
// the root), fixed to no joint at all. Masses come from <inertial> only; collision boxes,
// spheres, cylinders and meshes become geoms without mass, a mesh as its convex hull (host/mesh.h;
// a file used twice with one scale is loaded once). URDF angles are radians.
// Mesh filenames are paths (absolute, or relative to the URDF's directory; to the working
// directory for a URDF given as a string), file:// URIs, or package://NAME/PATH resolved to the
// first existing file of: each ROS_PACKAGE_PATH entry that is named NAME or holds NAME (not
// searched recursively), each AMENT_PREFIX_PATH entry's share/NAME, then the URDF's directory
// and each one above it that is named NAME or holds NAME (example-robot-data's URDFs name their
// own installed folder, share/example-robot-data, so they resolve without any setting).
// Elements without meaning for Phalanx are recorded in Model::ignored; what changes the physics
// and is not supported throws std::runtime_error naming the file, the line and the element.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <pugixml.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "host/mesh.h"
#include "host/model.h"
#include "host/view_builder.h"
#include "host/xml_source.h"
#include "phalanx/constraint.h"
#include "phalanx/inertia.h"
#include "phalanx/math/quat.h"

namespace phx {
namespace {

// a pose (URDF <origin>): position and (w, x, y, z) quaternion
struct Pose {
  double pos[3] = {0, 0, 0};
  double quat[4] = {1, 0, 0, 0};
};

struct Geom {
  int type = kGeomBox;
  std::string name;
  double size[3] = {0, 0, 0};
  int mesh = -1;  // a mesh geom's hull, in UrdfReader::hulls_ and then in the model's meshes
  Pose pose;
};

struct Link {
  pugi::xml_node node;
  std::string name;
  bool has_inertial = false;
  Pose inertial;  // centre of mass frame, in which the tensor below is expressed
  double mass = 0;
  double full[6] = {0, 0, 0, 0, 0, 0};  // (ixx, iyy, izz, ixy, ixz, iyz)
  std::vector<Geom> geoms;
  int parent_joint = -1;  // index into joints, -1 for the root
  std::vector<int> child_joints;
};

struct Joint {
  pugi::xml_node node;
  std::string name;
  std::string type;             // URDF type
  int parent = -1, child = -1;  // link indices
  Pose origin;
  double axis[3] = {1, 0, 0};
  bool has_limit = false;
  double lower = 0, upper = 0;
  double damping = 0, friction = 0;
  std::string mimic;  // the joint this one follows (<mimic>), "" if none
  double multiplier = 1, offset = 0;
};

class UrdfReader {
 public:
  Model read(const std::string& text, const std::string& path);

 private:
  std::string where(pugi::xml_node node) const;
  [[noreturn]] void fail(pugi::xml_node node, const std::string& message) const;
  void ignore(pugi::xml_node node, const std::string& what);
  double number(pugi::xml_node node, const char* attr, double fallback, bool required = false);
  void numbers(pugi::xml_node node, const char* attr, double* dst, int n);
  Pose origin(pugi::xml_node parent);
  void read_link(pugi::xml_node node);
  void read_joint(pugi::xml_node node);
  void add_mimics(Model& m);
  void check_attributes(pugi::xml_node node, std::initializer_list<std::string_view> known);
  int load_mesh(pugi::xml_node shape);
  std::string mesh_path(pugi::xml_node shape, const std::string& filename) const;
  std::string package_path(pugi::xml_node shape, const std::string& uri) const;
  pugi::xml_node parse(const std::string& text, const std::string& path);
  int link_tree();
  void add_body(Model& m, int link, int parent_body);
  void add_inertial(Model& m, const Link& l);
  void add_joint(Model& m, const Joint& j, int body, int parent_body);
  void add_geoms(Model& m, const Link& l, int body);
  void check_masses(const Model& m) const;

  XmlSource src_;
  std::vector<Link> links_;
  std::vector<Joint> joints_;
  std::unordered_map<std::string, int> link_index_;
  IgnoredList ignored_;
  void exclude_links_overlapping_at_rest(Model& m);
  std::vector<Hull> hulls_;                                   // collision meshes, in order of use
  std::map<std::pair<std::string, Point3>, int> mesh_index_;  // (path, scale) -> hull
};

//------------------------------------------------------------------ locations and values

std::string UrdfReader::where(pugi::xml_node node) const {
  return src_.where(node);
}

void UrdfReader::fail(pugi::xml_node node, const std::string& message) const {
  throw std::runtime_error(where(node) + ": " + message);
}

void UrdfReader::ignore(pugi::xml_node node, const std::string& what) {
  ignored_.add(what, src_.where(node, true));
}

// a single number attribute; fallback when absent unless required
double UrdfReader::number(pugi::xml_node node, const char* attr, double fallback, bool required) {
  pugi::xml_attribute a = node.attribute(attr);
  if (!a) {
    if (required) fail(node, std::string(node.name()) + ": attribute '" + attr + "' is required");
    return fallback;
  }
  double v;
  numbers(node, attr, &v, 1);
  return v;
}

// exactly n whitespace-separated numbers
void UrdfReader::numbers(pugi::xml_node node, const char* attr, double* dst, int n) {
  const char* text = node.attribute(attr).value();
  auto refuse = [&](const std::string& what) {
    fail(node, std::string(node.name()) + ": attribute '" + attr + "' must hold " + what +
                   ", not '" + text + "'");
  };
  const char* s = text;
  int count = 0;
  while (true) {
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
    if (!*s) break;
    char* end = nullptr;
    double v = std::strtod(s, &end);
    if (end == s || (*end && *end != ' ' && *end != '\t' && *end != '\n' && *end != '\r') ||
        count == n) {
      refuse(std::to_string(n) + " numbers");
    }
    // strtod reads "nan" and "inf": no pose, axis, size, mass, inertia or limit means that
    if (!std::isfinite(v)) refuse("finite numbers");
    dst[count++] = v;
    s = end;
  }
  if (count != n) refuse(std::to_string(n) + " numbers");
}

// records attributes other than `known` as ignored (tools add their own, e.g. dont_collapse)
void UrdfReader::check_attributes(pugi::xml_node node,
                                  std::initializer_list<std::string_view> known) {
  for (pugi::xml_attribute a : node.attributes()) {
    if (std::find(known.begin(), known.end(), a.name()) == known.end()) {
      ignore(node, std::string(node.name()) + "@" + a.name());
    }
  }
}

// <origin xyz rpy> of parent, identity when absent; rpy are fixed-axis rotations about x, then
// y, then z: R = Rz(yaw) Ry(pitch) Rx(roll), so q = qz qy qx
Pose UrdfReader::origin(pugi::xml_node parent) {
  Pose p;
  pugi::xml_node o = parent.child("origin");
  if (!o) return p;
  check_attributes(o, {"xyz", "rpy"});
  if (o.attribute("xyz")) numbers(o, "xyz", p.pos, 3);
  if (o.attribute("rpy")) {
    double rpy[3];
    numbers(o, "rpy", rpy, 3);
    double cr = std::cos(rpy[0] / 2), sr = std::sin(rpy[0] / 2);
    double cp = std::cos(rpy[1] / 2), sp = std::sin(rpy[1] / 2);
    double cy = std::cos(rpy[2] / 2), sy = std::sin(rpy[2] / 2);
    p.quat[0] = cr * cp * cy + sr * sp * sy;
    p.quat[1] = sr * cp * cy - cr * sp * sy;
    p.quat[2] = cr * sp * cy + sr * cp * sy;
    p.quat[3] = cr * cp * sy - sr * sp * cy;
    detail::normalize(p.quat, 4);
  }
  return p;
}

//------------------------------------------------------------------ elements

void UrdfReader::read_link(pugi::xml_node node) {
  check_attributes(node, {"name"});
  Link link;
  link.node = node;
  link.name = node.attribute("name").value();
  if (link.name.empty()) fail(node, "link: attribute 'name' is required");
  if (!link_index_.emplace(link.name, static_cast<int>(links_.size())).second) {
    fail(node, "link '" + link.name + "': repeated name");
  }

  for (pugi::xml_node c : node.children()) {
    if (c.type() != pugi::node_element) continue;
    std::string_view tag = c.name();
    if (tag == "inertial") {
      if (link.has_inertial) fail(c, "link '" + link.name + "': more than one <inertial>");
      link.has_inertial = true;
      link.inertial = origin(c);
      pugi::xml_node mass = c.child("mass");
      pugi::xml_node inertia = c.child("inertia");
      if (!mass || !inertia) fail(c, "inertial: <mass> and <inertia> are required");
      link.mass = number(mass, "value", 0, true);
      const char* keys[6] = {"ixx", "iyy", "izz", "ixy", "ixz", "iyz"};
      for (int i = 0; i < 6; i++) link.full[i] = number(inertia, keys[i], 0, true);
      if (link.mass < 0) fail(mass, "link '" + link.name + "': negative mass");
      for (pugi::xml_node e : c.children()) {
        std::string_view t = e.name();
        if (e.type() == pugi::node_element && t != "origin" && t != "mass" && t != "inertia") {
          fail(e, "inertial: unknown element <" + std::string(t) + ">");
        }
      }

    } else if (tag == "collision") {
      Geom g;
      g.name = c.attribute("name").value();
      g.pose = origin(c);
      pugi::xml_node geometry = c.child("geometry");
      pugi::xml_node shape = geometry ? geometry.first_child() : pugi::xml_node();
      while (shape && shape.type() != pugi::node_element) shape = shape.next_sibling();
      if (!shape) fail(c, "collision: <geometry> with a shape is required");
      std::string_view kind = shape.name();
      if (kind == "box") {
        double size[3];
        numbers(shape, "size", size, 3);
        for (int i = 0; i < 3; i++) g.size[i] = size[i] / 2;  // full lengths to half-sizes
        g.type = kGeomBox;
      } else if (kind == "sphere") {
        g.size[0] = number(shape, "radius", 0, true);
        g.type = kGeomSphere;
      } else if (kind == "cylinder") {
        g.size[0] = number(shape, "radius", 0, true);
        g.size[1] = number(shape, "length", 0, true) / 2;
        g.type = kGeomCylinder;
      } else if (kind == "mesh") {
        g.mesh = load_mesh(shape);
        g.type = kGeomMesh;
      } else {
        fail(shape, "collision: unknown geometry <" + std::string(kind) + ">");
      }
      int nsize = g.type == kGeomSphere     ? 1
                  : g.type == kGeomCylinder ? 2
                  : g.type == kGeomBox      ? 3
                                            : 0;
      for (int i = 0; i < nsize; i++) {
        if (!(g.size[i] > 0))
          fail(shape, "collision " + std::string(kind) + ": sizes must be positive");
      }
      link.geoms.push_back(g);

    } else if (tag == "visual") {
      ignore(c, "visual");
    } else {
      ignore(c, "link/" + std::string(tag));  // a tool's extension (<contact>, <self_filter>, ...)
    }
  }
  links_.push_back(link);
}

void UrdfReader::read_joint(pugi::xml_node node) {
  check_attributes(node, {"name", "type"});
  Joint j;
  j.node = node;
  j.name = node.attribute("name").value();
  j.type = node.attribute("type").value();
  if (j.name.empty()) fail(node, "joint: attribute 'name' is required");
  std::string what = "joint '" + j.name + "'";
  if (j.type == "planar") fail(node, what + ": planar joints are not supported");
  if (j.type != "revolute" && j.type != "continuous" && j.type != "prismatic" &&
      j.type != "fixed" && j.type != "floating") {
    fail(node, what + ": unknown joint type '" + j.type + "'");
  }
  j.origin = origin(node);

  std::string parent, child;
  for (pugi::xml_node c : node.children()) {
    if (c.type() != pugi::node_element) continue;
    std::string_view tag = c.name();
    if (tag == "parent" || tag == "child") {
      (tag == "parent" ? parent : child) = c.attribute("link").value();
    } else if (tag == "axis") {
      numbers(c, "xyz", j.axis, 3);
      bool moving = j.type != "fixed" && j.type != "floating";
      if (detail::normalize(j.axis, 3) < 1e-14 && moving) fail(c, what + ": axis is too small");
    } else if (tag == "limit") {
      j.has_limit = true;
      j.lower = number(c, "lower", 0);
      j.upper = number(c, "upper", 0);
      for (const char* k : {"effort", "velocity"}) {
        if (c.attribute(k)) ignore(c, std::string("limit@") + k);
      }
    } else if (tag == "dynamics") {
      j.damping = number(c, "damping", 0);
      j.friction = number(c, "friction", 0);
      if (!(j.friction >= 0)) fail(c, what + ": dynamics friction must be >= 0");
    } else if (tag == "mimic") {
      j.mimic = c.attribute("joint").value();
      if (j.mimic.empty()) fail(c, what + ": mimic needs attribute 'joint'");
      j.multiplier = number(c, "multiplier", 1);
      j.offset = number(c, "offset", 0);
    } else if (tag == "safety_controller" || tag == "calibration") {
      ignore(c, std::string(tag));
    } else if (tag != "origin") {
      ignore(c, "joint/" + std::string(tag));  // a tool's extension
    }
  }
  for (const auto& [role, name] : {std::pair{"parent", parent}, std::pair{"child", child}}) {
    auto it = link_index_.find(name);
    if (it == link_index_.end()) fail(node, what + ": unknown " + role + " link '" + name + "'");
    (std::string_view(role) == "parent" ? j.parent : j.child) = it->second;
  }
  if ((j.type == "revolute" || j.type == "prismatic") && !node.child("limit")) {
    fail(node, what + ": a " + j.type + " joint requires <limit>");
  }
  if (j.has_limit && (j.type == "revolute" || j.type == "prismatic")) {
    if (j.lower > j.upper) fail(node, what + ": limit lower must not exceed upper");
    if (j.lower == j.upper) {
      j.has_limit = false;  // exporters write lower = upper = 0 for "no limit", as MuJoCo reads it
      ignore(node, "limit with lower = upper, joint left unlimited");
    }
  }
  joints_.push_back(j);
}

//------------------------------------------------------------------ meshes

// the hull of a collision <mesh filename scale>, loaded once per file and scale
int UrdfReader::load_mesh(pugi::xml_node shape) {
  check_attributes(shape, {"filename", "scale"});
  std::string filename = shape.attribute("filename").value();
  if (filename.empty()) fail(shape, "mesh: attribute 'filename' is required");
  Point3 scale = {1, 1, 1};
  if (shape.attribute("scale")) numbers(shape, "scale", scale.data(), 3);
  std::string path = mesh_path(shape, filename);
  auto [it, inserted] = mesh_index_.try_emplace({path, scale}, static_cast<int>(hulls_.size()));
  if (!inserted) return it->second;
  std::string name = "mesh '" + filename + "'" + (path != filename ? " (" + path + ")" : "");
  try {
    hulls_.push_back(convex_hull(read_mesh_vertices(path, scale), -1, name));
  } catch (const std::exception& e) {
    std::string what = e.what();
    fail(shape, what.rfind(name, 0) == 0 ? what : name + ": " + what);
  }
  return it->second;
}

// the file a mesh filename names: a path (relative to the URDF's directory), file:// or
// package://
std::string UrdfReader::mesh_path(pugi::xml_node shape, const std::string& filename) const {
  namespace fs = std::filesystem;
  std::string name = filename;
  if (filename.rfind("package://", 0) == 0) return package_path(shape, filename);
  if (filename.rfind("file://", 0) == 0) {
    name = filename.substr(7);
  } else if (size_t colon = filename.find("://"); colon != std::string::npos) {
    fail(shape, "mesh '" + filename + "': unsupported URI scheme '" + filename.substr(0, colon) +
                    "' (expected a path, file:// or package://)");
  }
  fs::path p(name);
  if (p.is_relative() && !src_.dir.empty()) p = fs::path(src_.dir) / p;
  return p.lexically_normal().string();
}

// package://NAME/PATH: the first existing NAME/PATH under ROS_PACKAGE_PATH, AMENT_PREFIX_PATH's
// share/ folders, the URDF's directory and those above it (the file's header comment)
std::string UrdfReader::package_path(pugi::xml_node shape, const std::string& uri) const {
  namespace fs = std::filesystem;
  // a slash after the scheme is tolerated (talos_data writes package:///example-robot-data/...,
  // which Pinocchio reads as package://example-robot-data/...)
  size_t start = uri.find_first_not_of('/', 10);
  std::string rest = start == std::string::npos ? "" : uri.substr(start);
  size_t slash = rest.find('/');
  if (slash == 0 || slash == std::string::npos || slash + 1 == rest.size()) {
    fail(shape, "mesh '" + uri + "': expected package://NAME/PATH");
  }
  std::string package = rest.substr(0, slash), file = rest.substr(slash + 1);
  std::vector<std::string> tried;
  std::error_code ec;
  // root: a folder that may be the package, or hold it
  auto found = [&](const fs::path& root, bool holds) {
    fs::path p = (holds ? root / package : root) / file;
    tried.push_back(p.lexically_normal().string());
    return fs::is_regular_file(p, ec);
  };
  auto entries = [](const char* var) {
    std::vector<fs::path> out;
    std::stringstream list(std::getenv(var) ? std::getenv(var) : "");
    for (std::string e; std::getline(list, e, ':');) {
      while (e.size() > 1 && e.back() == '/') e.pop_back();
      if (!e.empty()) out.push_back(e);
    }
    return out;
  };
  for (const fs::path& e : entries("ROS_PACKAGE_PATH")) {
    if (e.filename() == package && found(e, false)) return tried.back();
    if (found(e, true)) return tried.back();
  }
  for (const fs::path& e : entries("AMENT_PREFIX_PATH")) {
    if (found(e / "share", true)) return tried.back();
  }
  fs::path dir = fs::absolute(src_.dir.empty() ? fs::path(".") : fs::path(src_.dir), ec);
  for (fs::path d = dir.lexically_normal(); !d.empty(); d = d.parent_path()) {
    if (d.filename() == package && found(d, false)) return tried.back();
    if (found(d, true)) return tried.back();
    if (d == d.parent_path()) break;
  }
  std::string list;
  for (const std::string& t : tried) list += (list.empty() ? "" : ", ") + t;
  fail(shape, "mesh '" + uri + "': package '" + package + "' not found; looked for " + list +
                  " (set ROS_PACKAGE_PATH to the folder holding '" + package +
                  "', or to the package itself)");
}

//------------------------------------------------------------------ model

// appends the body of `link` and, depth first, those of its children
void UrdfReader::add_body(Model& m, int link, int parent_body) {
  const Link& l = links_[link];
  int id = static_cast<int>(m.body_parentid.size());
  m.body_parentid.push_back(parent_body);
  m.body_names.push_back(l.name);
  // the body frame is the parent joint's frame
  Pose frame = l.parent_joint >= 0 ? joints_[l.parent_joint].origin : Pose();
  m.body_pos.insert(m.body_pos.end(), frame.pos, frame.pos + 3);
  m.body_quat.insert(m.body_quat.end(), frame.quat, frame.quat + 4);
  add_inertial(m, l);
  // the parent joint, at the body origin
  if (l.parent_joint >= 0 && joints_[l.parent_joint].type != "fixed") {
    add_joint(m, joints_[l.parent_joint], id, parent_body);
  }
  add_geoms(m, l, id);
  for (int j : l.child_joints) add_body(m, joints_[j].child, id);
}

// mass and inertia; the principal frame is the tensor's principal axes in the inertial frame,
// turned by its origin
void UrdfReader::add_inertial(Model& m, const Link& l) {
  double principal[4] = {1, 0, 0, 0}, moments[3] = {0, 0, 0}, iquat[4] = {1, 0, 0, 0};
  if (l.has_inertial) {
    inertia_principal(principal, moments, l.full);
    if (moments[2] < -1e-12 * moments[0]) {
      fail(l.node, "link '" + l.name + "': inertia is not positive semidefinite");
    }
    // the sum of two moments is at least the third; rounding in the file's values is forgiven
    const double* I = moments;
    double tol = 1e-12 * I[0];
    if (I[1] + I[2] < I[0] - tol) {
      fail(l.node, "link '" + l.name + "': inertia must satisfy A + B >= C (triangle inequality)");
    }
    detail::quat_mul(iquat, l.inertial.quat, principal);
  }
  m.body_ipos.insert(m.body_ipos.end(), l.inertial.pos, l.inertial.pos + 3);
  m.body_iquat.insert(m.body_iquat.end(), iquat, iquat + 4);
  m.body_mass.push_back(l.mass);
  m.body_inertia.insert(m.body_inertia.end(), moments, moments + 3);
}

// <mimic joint="k" multiplier="a" offset="b">: q = a q_k + b, a joint equality (URDF's joints are
// at 0 in qpos0, so the coupling's polynomial is b + a x)
void UrdfReader::add_mimics(Model& m) {
  for (const Joint& j : joints_) {
    if (j.mimic.empty()) continue;
    std::string what = "joint '" + j.name + "'";
    int self = m.joint_id(j.name), leader = m.joint_id(j.mimic);
    if (self < 0 || m.jnt_type[self] == kJointFree)
      fail(j.node, what + ": only revolute, continuous and prismatic joints can mimic");
    if (leader < 0 || m.jnt_type[leader] == kJointFree)
      fail(j.node, what + ": mimics '" + j.mimic +
                       "', which is not a revolute, continuous or prismatic joint of the robot");
    m.eq_type.push_back(kEqJoint);
    m.eq_obj1id.push_back(self);
    m.eq_obj2id.push_back(leader);
    m.eq_active.push_back(1);
    m.eq_polycoef.insert(m.eq_polycoef.end(), {j.offset, j.multiplier, 0.0, 0.0, 0.0});
  }
}

// a moving joint j of `body`, at its origin, in MuJoCo's joint types
void UrdfReader::add_joint(Model& m, const Joint& j, int body, int parent_body) {
  int type = j.type == "floating" ? kJointFree : j.type == "prismatic" ? kJointSlide : kJointHinge;
  if (type == kJointFree && parent_body != 1) {
    fail(j.node, "joint '" + j.name + "': a floating joint must connect the root link to a child");
  }
  bool limited = (j.type == "revolute" || j.type == "prismatic") && j.has_limit;
  m.jnt_type.push_back(type);
  m.jnt_bodyid.push_back(body);
  m.jnt_limited.push_back(limited ? 1 : 0);
  m.jnt_pos.insert(m.jnt_pos.end(), {0.0, 0.0, 0.0});
  if (type == kJointFree) {
    m.jnt_axis.insert(m.jnt_axis.end(), {0.0, 0.0, 1.0});
  } else {
    m.jnt_axis.insert(m.jnt_axis.end(), j.axis, j.axis + 3);
  }
  m.jnt_range.push_back(limited ? j.lower : 0);
  m.jnt_range.push_back(limited ? j.upper : 0);
  m.jnt_stiffness.push_back(0);
  m.jnt_names.push_back(j.name);
  if (type == kJointFree) {
    // the body's pose, which is the joint's frame
    for (auto* q : {&m.qpos0, &m.qpos_spring}) {
      q->insert(q->end(), j.origin.pos, j.origin.pos + 3);
      q->insert(q->end(), j.origin.quat, j.origin.quat + 4);
    }
  } else {
    m.qpos0.push_back(0);
    m.qpos_spring.push_back(0);
  }
  for (int d = 0; d < joint_nv(type); d++) {
    m.dof_damping.push_back(j.damping);
    m.dof_frictionloss.push_back(j.friction);
    m.dof_armature.push_back(0);
  }
}

// collision geoms: no mass, MuJoCo's default contact parameters
void UrdfReader::add_geoms(Model& m, const Link& l, int body) {
  for (const Geom& g : l.geoms) {
    m.geom_type.push_back(g.type);
    m.geom_bodyid.push_back(body);
    m.geom_contype.push_back(1);
    m.geom_conaffinity.push_back(1);
    m.geom_condim.push_back(3);
    m.geom_size.insert(m.geom_size.end(), g.size, g.size + 3);
    m.geom_pos.insert(m.geom_pos.end(), g.pose.pos, g.pose.pos + 3);
    m.geom_quat.insert(m.geom_quat.end(), g.pose.quat, g.pose.quat + 4);
    m.geom_friction.insert(m.geom_friction.end(), {1.0, 0.005, 0.0001});
    m.geom_dataid.push_back(g.mesh);  // hulls_ are added to the model in their order
    m.geom_names.push_back(g.name);
  }
}

// the document's <robot> element
pugi::xml_node UrdfReader::parse(const std::string& text, const std::string& path) {
  src_.path = path;
  src_.parse(text);
  pugi::xml_node robot = src_.doc.document_element();
  if (!robot || std::string_view(robot.name()) != "robot") {
    throw std::runtime_error(path + ": the root element must be <robot>");
  }
  return robot;
}

// the tree of links: one parent joint per link, a single root, which is returned
int UrdfReader::link_tree() {
  for (int j = 0; j < static_cast<int>(joints_.size()); j++) {
    Link& child = links_[joints_[j].child];
    if (child.parent_joint >= 0) {
      fail(joints_[j].node,
           "joint '" + joints_[j].name + "': link '" + child.name + "' already has a parent joint");
    }
    child.parent_joint = j;
    links_[joints_[j].parent].child_joints.push_back(j);
  }
  int root = -1;
  for (int l = 0; l < static_cast<int>(links_.size()); l++) {
    if (links_[l].parent_joint >= 0) continue;
    if (root >= 0) {
      fail(links_[l].node, "link '" + links_[l].name + "' is a second root (after '" +
                               links_[root].name + "'); links must form one tree");
    }
    root = l;
  }
  if (root < 0) throw std::runtime_error(src_.path + ": the joints form a cycle; no root link");
  return root;
}

// a moving body needs mass and inertia, its own or that of a body welded to it
void UrdfReader::check_masses(const Model& m) const {
  std::vector<bool> massive(m.nbody, false);
  for (int b = m.nbody - 1; b >= 1; b--) {
    const double* I = &m.body_inertia[3 * b];
    massive[b] =
        massive[b] || (m.body_mass[b] >= 1e-15 && I[0] >= 1e-15 && I[1] >= 1e-15 && I[2] >= 1e-15);
    if (m.body_jntnum[b] == 0 && massive[b]) massive[m.body_parentid[b]] = true;  // welded
  }
  for (int b = 1; b < m.nbody; b++) {
    if (m.body_jntnum[b] > 0 && !massive[b]) {
      fail(links_[link_index_.at(m.body_names[b])].node,
           "link '" + m.body_names[b] + "' moves but has no mass or inertia");
    }
  }
}

Model UrdfReader::read(const std::string& text, const std::string& path) {
  pugi::xml_node robot = parse(text, path);
  // links first, then joints that refer to them
  Model m;
  m.name = robot.attribute("name").value();
  m.source = path == "<string>" ? "" : path;
  src_.dir = m.source.empty() ? "" : std::filesystem::path(path).parent_path().string();
  for (pugi::xml_node c : robot.children("link")) read_link(c);
  for (pugi::xml_node c : robot.children("joint")) read_joint(c);
  for (pugi::xml_node c : robot.children()) {
    std::string_view tag = c.name();
    if (c.type() == pugi::node_element && tag != "link" && tag != "joint") ignore(c, c.name());
  }
  if (links_.empty()) throw std::runtime_error(path + ": the robot has no links");
  int root = link_tree();

  // world, then the tree depth first from the root
  m.body_parentid.push_back(0);
  m.body_names.push_back("world");
  m.body_pos.insert(m.body_pos.end(), {0.0, 0.0, 0.0});
  m.body_quat.insert(m.body_quat.end(), {1.0, 0.0, 0.0, 0.0});
  m.body_ipos.insert(m.body_ipos.end(), {0.0, 0.0, 0.0});
  m.body_iquat.insert(m.body_iquat.end(), {1.0, 0.0, 0.0, 0.0});
  m.body_mass.push_back(0);
  m.body_inertia.insert(m.body_inertia.end(), {0.0, 0.0, 0.0});
  add_body(m, root, 0);
  if (m.body_parentid.size() != links_.size() + 1) {
    throw std::runtime_error(path + ": the joints form a cycle; not every link is reachable");
  }
  for (const Hull& h : hulls_) add_mesh(m, h);
  add_mimics(m);
  m.finalize();
  exclude_links_overlapping_at_rest(m);
  check_masses(m);
  m.ignored = ignored_.list();
  m.validate();
  return m;
}

}  // namespace

// URDF collision meshes of neighbouring links often overlap around their joint: they are drawn
// to cover the link, not as disjoint solids, and an unresolvable overlap makes the contact
// solver push against the joints. Pairs of links whose collision geoms penetrate at the
// reference configuration are therefore excluded, as MoveIt's setup assistant disables the pairs
// "in collision by default" (which an SRDF would list); each exclusion is listed in
// Model::ignored.
void UrdfReader::exclude_links_overlapping_at_rest(Model& m) {
  // world frames at qpos0 (every URDF joint at 0: the bodies' fixed offsets)
  std::vector<Vec3<double>> xpos(m.nbody);
  std::vector<Mat3<double>> xmat(m.nbody, Mat3<double>::identity());
  for (int b = 1; b < m.nbody; ++b) {
    int p = m.body_parentid[b];
    xpos[b] = xpos[p] + xmat[p] * Vec3<double>::load(&m.body_pos[3 * b]);
    xmat[b] = xmat[p] * to_mat(Quat<double>::load(&m.body_quat[4 * b]));
  }
  ModelView<double> view = build_view<double>(
      m, [](const std::vector<double>& v) { return v.data(); },
      [](const std::vector<int>& v) { return v.data(); });
  auto frame = [&](int g) {
    int b = m.geom_bodyid[g];
    return GeomFrame<double>{xpos[b] + xmat[b] * Vec3<double>::load(&m.geom_pos[3 * g]),
                             xmat[b] * to_mat(Quat<double>::load(&m.geom_quat[4 * g]))};
  };
  bool changed = false;
  for (int k = 0; k < m.npair; ++k) {
    int g1, g2;
    pair_geoms(view, k, g1, g2);
    ContactPoint<double> pts[kMaxPairContacts];
    int n = collide(geom_shape(view, g1, view.geom_size + 3 * g1), frame(g1),
                    geom_shape(view, g2, view.geom_size + 3 * g2), frame(g2), 0.0,
                    ccd_settings(view), pts);
    bool overlap = false;
    for (int i = 0; i < n; ++i) overlap |= pts[i].dist < 0;
    if (!overlap) continue;
    int b1 = m.geom_bodyid[g1], b2 = m.geom_bodyid[g2];
    m.exclude_bodies.insert(m.exclude_bodies.end(), {b1, b2});
    ignored_.add("contacts between links '" + m.body_names[b1] + "' and '" + m.body_names[b2] +
                     "', whose collision geoms overlap at the reference configuration",
                 std::filesystem::path(src_.path).filename().string());
    changed = true;
  }
  if (changed) m.compute_pairs();
}

Model load_urdf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open URDF file '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return UrdfReader().read(text.str(), path);
}

Model load_urdf_string(const std::string& xml) {
  return UrdfReader().read(xml, "<string>");
}

}  // namespace phx
