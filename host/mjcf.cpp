// MJCF loader: MuJoCo's XML model format into a phx::Model.
//
// The loader reproduces what MuJoCo's model compiler computes (src/xml/xml_native_reader.cc reads,
// src/user/user_objects.cc and user_model.cc compile) for the subset of MJCF that Phalanx
// simulates, so that the compiled arrays equal MuJoCo's to rounding; the arithmetic of orientation
// conversion, geom inertia and the inertial frame is MuJoCo's, step for step.
// It works in three passes:
//   1. read: parse the XML, <include> expanded, into specs: compiler settings, default classes, a
//      tree of bodies with their joints and geoms, tendons, actuators and contact exclusions;
//   2. compile: per body in tree order, resolve orientations, geom sizes and masses, the body's
//      inertial frame, joint axes, limits and angle units (mjCBody::Compile and what it calls);
//   3. assemble the flat arrays of phx::Model, then Model::finalize() and Model::validate().
// What has no meaning for Phalanx is recorded in Model::ignored; what changes the physics and is
// not supported throws std::runtime_error naming the file, the line and the element.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <pugixml.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "host/model.h"
#include "host/xml_source.h"
#include "phalanx/inertia.h"

namespace phx {
namespace {

namespace fs = std::filesystem;
using detail::normalize;

constexpr double kEps = 1e-14;     // MuJoCo's mjEPS
constexpr double kMinVal = 1e-15;  // MuJoCo's mjMINVAL
constexpr double kPi = detail::kPi;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool defined(double x) {
  return !std::isnan(x);
}

enum Limited : int { kLimitedFalse = 0, kLimitedTrue = 1, kLimitedAuto = 2 };

//------------------------------------------------------------------ frame arithmetic (user_util.cc)

void copy(double* dst, const double* src, int n) {
  for (int i = 0; i < n; i++) dst[i] = src[i];
}

bool all_zero(const double* v, int n) {
  for (int i = 0; i < n; i++) {
    if (v[i] != 0) return false;
  }
  return true;
}

void cross(double a[3], const double b[3], const double c[3]) {
  a[0] = b[1] * c[2] - b[2] * c[1];
  a[1] = b[2] * c[0] - b[0] * c[2];
  a[2] = b[0] * c[1] - b[1] * c[0];
}

// res = R(quat) vec, with mjuu_rotVecQuat's formula v + 2 q x (w v + q x v)
void rot_vec_quat(double res[3], const double vec[3], const double quat[4]) {
  if (all_zero(vec, 3)) {
    res[0] = res[1] = res[2] = 0;
  } else if (quat[0] == 1 && quat[1] == 0 && quat[2] == 0 && quat[3] == 0) {
    copy(res, vec, 3);
  } else {
    double t[3] = {quat[0] * vec[0] + quat[2] * vec[2] - quat[3] * vec[1],
                   quat[0] * vec[1] + quat[3] * vec[0] - quat[1] * vec[2],
                   quat[0] * vec[2] + quat[1] * vec[1] - quat[2] * vec[0]};
    res[0] = vec[0] + 2 * (quat[2] * t[2] - quat[3] * t[1]);
    res[1] = vec[1] + 2 * (quat[3] * t[0] - quat[1] * t[2]);
    res[2] = vec[2] + 2 * (quat[1] * t[1] - quat[2] * t[0]);
  }
}

// (pos, quat) <- (pos, quat) * (childpos, childquat)   (mjuu_frameaccum)
void frame_accum(double pos[3], double quat[4], const double childpos[3],
                 const double childquat[4]) {
  double mat[9];
  detail::quat_to_mat(mat, quat);
  for (int r = 0; r < 3; r++) {
    pos[r] +=
        mat[3 * r] * childpos[0] + mat[3 * r + 1] * childpos[1] + mat[3 * r + 2] * childpos[2];
  }
  detail::quat_mul(quat, quat, childquat);
}

// (childpos, childquat) <- (pos, quat) * (childpos, childquat)   (mjuu_frameaccumChild)
void frame_accum_child(const double pos[3], const double quat[4], double childpos[3],
                       double childquat[4]) {
  double p[3], q[4];
  copy(p, pos, 3);
  copy(q, quat, 4);
  frame_accum(p, q, childpos, childquat);
  copy(childpos, p, 3);
  copy(childquat, q, 4);
}

// minimal rotation taking +z onto the unit vector vec (mjuu_z2quat); a rotation by pi about x
// when vec is -z
void z_to_quat(double quat[4], const double vec[3]) {
  const double z[3] = {0, 0, 1};
  cross(quat + 1, z, vec);
  double s = normalize(quat + 1, 3);
  if (s < 1e-10) {
    quat[1] = 1;
    quat[2] = quat[3] = 0;
  }
  double ang = std::atan2(s, vec[2]);
  quat[0] = std::cos(ang / 2);
  for (int i = 1; i < 4; i++) quat[i] *= std::sin(ang / 2);
}

// quaternion of the rotation whose matrix has columns x, y, z (mjuu_frame2quat)
void frame_to_quat(double quat[4], const double* x, const double* y, const double* z) {
  const double* m[3] = {x, y, z};  // m[column][row]
  if (m[0][0] + m[1][1] + m[2][2] > 0) {
    quat[0] = 0.5 * std::sqrt(1 + m[0][0] + m[1][1] + m[2][2]);
    quat[1] = 0.25 * (m[1][2] - m[2][1]) / quat[0];
    quat[2] = 0.25 * (m[2][0] - m[0][2]) / quat[0];
    quat[3] = 0.25 * (m[0][1] - m[1][0]) / quat[0];
  } else if (m[0][0] > m[1][1] && m[0][0] > m[2][2]) {
    quat[1] = 0.5 * std::sqrt(1 + m[0][0] - m[1][1] - m[2][2]);
    quat[0] = 0.25 * (m[1][2] - m[2][1]) / quat[1];
    quat[2] = 0.25 * (m[1][0] + m[0][1]) / quat[1];
    quat[3] = 0.25 * (m[2][0] + m[0][2]) / quat[1];
  } else if (m[1][1] > m[2][2]) {
    quat[2] = 0.5 * std::sqrt(1 - m[0][0] + m[1][1] - m[2][2]);
    quat[0] = 0.25 * (m[2][0] - m[0][2]) / quat[2];
    quat[1] = 0.25 * (m[1][0] + m[0][1]) / quat[2];
    quat[3] = 0.25 * (m[2][1] + m[1][2]) / quat[2];
  } else {
    quat[3] = 0.5 * std::sqrt(1 - m[0][0] - m[1][1] + m[2][2]);
    quat[0] = 0.25 * (m[0][1] - m[1][0]) / quat[3];
    quat[1] = 0.25 * (m[2][0] + m[0][2]) / quat[3];
    quat[2] = 0.25 * (m[2][1] + m[1][2]) / quat[3];
  }
  normalize(quat, 4);
}

//------------------------------------------------------------------ specs

// an orientation given by one of the alternatives to quat (mjsOrientation)
struct AltOrientation {
  enum Kind { kNone, kAxisAngle, kXYAxes, kZAxis, kEuler } kind = kNone;
  double axisangle[4] = {0, 0, 0, 0};
  double xyaxes[6] = {0, 0, 0, 0, 0, 0};
  double zaxis[3] = {0, 0, 0};
  double euler[3] = {0, 0, 0};
};

// <compiler>
struct Compiler {
  bool degree = true;                  // angle="degree"
  char eulerseq[3] = {'x', 'y', 'z'};  // lowercase: rotating axes, uppercase: fixed axes
  int inertiafromgeom = kLimitedAuto;  // false / true / auto, as Limited
  int inertiagrouprange[2] = {0, 5};
  double settotalmass = -1;
  double boundmass = 0, boundinertia = 0;
  bool balanceinertia = false;
  bool autolimits = true;
};

// Sets quat from an alternative orientation (ResolveOrientation in user_objects.cc); returns an
// error text or nullptr.
const char* resolve_orientation(double quat[4], const Compiler& c, AltOrientation alt) {
  switch (alt.kind) {
    case AltOrientation::kNone:
      return nullptr;
    case AltOrientation::kAxisAngle: {
      double* aa = alt.axisangle;
      if (c.degree) aa[3] = aa[3] / 180.0 * kPi;
      if (normalize(aa, 3) < kEps) return "axisangle too small";
      double ang2 = aa[3] / 2;
      quat[0] = std::cos(ang2);
      for (int i = 0; i < 3; i++) quat[i + 1] = std::sin(ang2) * aa[i];
      return nullptr;
    }
    case AltOrientation::kXYAxes: {
      double* xy = alt.xyaxes;
      if (normalize(xy, 3) < kEps) return "xaxis too small";
      double d = xy[0] * xy[3] + xy[1] * xy[4] + xy[2] * xy[5];
      for (int i = 0; i < 3; i++) xy[3 + i] -= xy[i] * d;
      if (normalize(xy + 3, 3) < kEps) return "yaxis too small";
      double z[3];
      cross(z, xy, xy + 3);
      if (normalize(z, 3) < kEps) return "cross(xaxis, yaxis) too small";
      frame_to_quat(quat, xy, xy + 3, z);
      return nullptr;
    }
    case AltOrientation::kZAxis:
      if (normalize(alt.zaxis, 3) < kEps) return "zaxis too small";
      z_to_quat(quat, alt.zaxis);
      return nullptr;
    case AltOrientation::kEuler: {
      // accumulate the three rotations: post-multiplied about rotating axes (lowercase),
      // pre-multiplied about fixed axes (uppercase)
      double q[4] = {1, 0, 0, 0};
      for (int i = 0; i < 3; i++) {
        double e = c.degree ? alt.euler[i] / 180.0 * kPi : alt.euler[i];
        double rot[4] = {std::cos(e / 2), 0, 0, 0};
        char axis = c.eulerseq[i];
        rot[1 + (axis == 'x' || axis == 'X'   ? 0
                 : axis == 'y' || axis == 'Y' ? 1
                                              : 2)] = std::sin(e / 2);
        if (axis >= 'a') {
          detail::quat_mul(q, q, rot);
        } else {
          detail::quat_mul(q, rot, q);
        }
      }
      normalize(q, 4);
      copy(quat, q, 4);
      return nullptr;
    }
  }
  return nullptr;
}

// <joint> attributes after defaults (mjsJoint)
struct JointSpec {
  int type = kJointHinge;
  double pos[3] = {0, 0, 0};
  double axis[3] = {0, 0, 1};
  int limited = kLimitedAuto;
  double range[2] = {0, 0};
  double ref = 0, springref = 0;
  double stiffness[3] = {0, 0, 0};  // polynomial; only the linear term is supported
  double damping[3] = {0, 0, 0};    // polynomial; only the linear term is supported
  double armature = 0;
  double frictionloss = 0;
  double springdamper[2] = {0, 0};
  int actfrclimited = kLimitedAuto;
  double actfrcrange[2] = {0, 0};
  bool actgravcomp = false;
};

// <geom> attributes after defaults (mjsGeom)
struct GeomSpec {
  int type = kGeomSphere;
  int contype = 1, conaffinity = 1, condim = 3, group = 0;
  double size[3] = {0, 0, 0};
  double friction[3] = {1, 0.005, 0.0001};
  double mass = kNaN;
  double density = 1000;
  bool shellinertia = false;
  double fromto[6] = {kNaN, 0, 0, 0, 0, 0};
  double pos[3] = {0, 0, 0};
  double quat[4] = {1, 0, 0, 0};
  AltOrientation alt;
  std::string mesh, hfield;
  double surfacevel[6] = {0, 0, 0, 0, 0, 0};
  double adhesion = 0;
  bool fluid_ellipsoid = false;
};

// attributes shared by every actuator element, after defaults (mjsActuator)
struct ActuatorSpec {
  int ctrllimited = kLimitedAuto, forcelimited = kLimitedAuto;
  double ctrlrange[2] = {0, 0}, forcerange[2] = {0, 0};
  double gear[6] = {1, 0, 0, 0, 0, 0};
  double damping[3] = {0, 0, 0};
  double armature = 0;
  double delay = 0;
};

// <fixed> and <spatial> tendon attributes after defaults (mjsTendon)
struct TendonSpec {
  int limited = kLimitedAuto;
  double range[2] = {0, 0};
  int actfrclimited = kLimitedAuto;
  double actfrcrange[2] = {0, 0};
  double frictionloss = 0;
  double stiffness[3] = {0, 0, 0};
  double damping[3] = {0, 0, 0};
  double armature = 0;
};

// a default class: the attribute values its elements start from
struct DefaultClass {
  std::string name;
  JointSpec joint;
  GeomSpec geom;
  ActuatorSpec actuator;
  TendonSpec tendon;
};

// <frame>: a pose applied to the bodies, geoms and joints inside it
struct FrameRec {
  pugi::xml_node node;
  FrameRec* parent = nullptr;
  double pos[3] = {0, 0, 0};
  double quat[4] = {1, 0, 0, 0};
  AltOrientation alt;
  bool compiled = false;
};

struct JointRec {
  pugi::xml_node node;
  std::string name;
  JointSpec s;
  FrameRec* frame = nullptr;
};

struct GeomRec {
  pugi::xml_node node;
  std::string name;
  GeomSpec s;
  FrameRec* frame = nullptr;
  bool infer = false;             // does this geom give its body mass
  double mass = 0;                // compiled mass (mjCGeom::mass_)
  double inertia[3] = {0, 0, 0};  // principal moments in the geom frame
};

struct BodyRec {
  pugi::xml_node node;
  std::string name;
  int parent = 0;
  FrameRec* frame = nullptr;
  double pos[3] = {0, 0, 0};
  double quat[4] = {1, 0, 0, 0};
  AltOrientation alt;
  bool explicit_inertial = false;  // has an <inertial> element
  double ipos[3] = {kNaN, 0, 0};   // NaN until given or computed
  double iquat[4] = {1, 0, 0, 0};
  AltOrientation ialt;
  double mass = 0;
  double inertia[3] = {0, 0, 0};
  double fullinertia[6] = {kNaN, 0, 0, 0, 0, 0};
  std::vector<JointRec> joints;
  std::vector<GeomRec> geoms;
  std::vector<int> children;
};

struct TendonRec {
  pugi::xml_node node;
  std::string name;
  TendonSpec s;
  bool spatial = false;
  std::vector<std::pair<std::string, double>> joints;  // fixed tendon: (joint name, coef)
};

struct ActuatorRec {
  pugi::xml_node node;
  std::string name;
  ActuatorSpec s;
  std::string joint, tendon;  // transmission target
};

bool is_one_of(std::string_view s, std::initializer_list<std::string_view> list) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

template <size_t N>
bool is_one_of(std::string_view s, const std::string_view (&list)[N]) {
  return std::find(list, list + N, s) != list + N;
}

// attributes of each element that have no meaning for Phalanx
constexpr std::string_view kJointIgnored[] = {
    "group", "solreflimit", "solimplimit", "solreffriction", "solimpfriction", "margin", "user"};
constexpr std::string_view kGeomIgnored[] = {"priority", "material",  "rgba",   "solmix",
                                             "solref",   "solimp",    "margin", "gap",
                                             "fitscale", "fluidcoef", "user"};
constexpr std::string_view kActuatorIgnored[] = {"group", "nsample", "interp", "user",
                                                 "lengthrange"};
constexpr std::string_view kTendonIgnored[] = {
    "group",          "solreflimit",  "solimplimit", "solreffriction",
    "solimpfriction", "springlength", "width",       "material",
    "margin",         "rgba",         "user"};
// tags of the actuator elements, all of which may set actuator defaults
constexpr std::string_view kActuatorTags[] = {"general",     "motor",       "position", "velocity",
                                              "intvelocity", "orientation", "pid",      "damper",
                                              "cylinder",    "muscle",      "adhesion", "dcmotor"};
// top-level sections that only concern rendering, sensing or bookkeeping
constexpr std::string_view kIgnoredSections[] = {"size",   "visual", "statistic", "asset",
                                                 "custom", "sensor", "keyframe",  "extension"};

//------------------------------------------------------------------ reader

class MjcfReader {
 public:
  Model read_file(const std::string& path);
  Model read_string(const std::string& xml, const std::string& dir);

 private:
  // sources, locations and errors
  XmlSource& parse_source(const std::string& path, const std::string& dir, const std::string& text,
                          pugi::xml_node included_from);
  const XmlSource& source_of(pugi::xml_node node) const;
  std::string where(pugi::xml_node node, bool basename = false) const;
  [[noreturn]] void fail(pugi::xml_node node, const std::string& message) const;
  std::string describe(pugi::xml_node node) const;
  void expand_includes(pugi::xml_node node, const std::string& dir);
  std::vector<pugi::xml_node> children(pugi::xml_node node) const;
  void ignore(pugi::xml_node node, const std::string& what);

  // attribute values
  int read_numbers(pugi::xml_node node, pugi::xml_attribute a, double* dst, int maxlen, int minlen);
  int read_int(pugi::xml_node node, pugi::xml_attribute a);
  int read_keyword(pugi::xml_node node, pugi::xml_attribute a,
                   std::initializer_list<std::string_view> keys, const char* kind = nullptr);
  bool read_bool(pugi::xml_node node, pugi::xml_attribute a);
  bool read_orientation(pugi::xml_node node, pugi::xml_attribute a, double quat[4],
                        AltOrientation& alt);
  void check_one_orientation(pugi::xml_node node);
  const DefaultClass& find_class(pugi::xml_node node, const char* attr,
                                 const DefaultClass& fallback);
  bool resolve_limited(pugi::xml_node node, int limited, const double range[2], const char* attr);

  // element attributes: each returns false when the attribute is not one of the element's
  bool joint_attr(pugi::xml_node node, pugi::xml_attribute a, JointSpec& s);
  bool geom_attr(pugi::xml_node node, pugi::xml_attribute a, GeomSpec& s);
  bool actuator_attr(pugi::xml_node node, pugi::xml_attribute a, ActuatorSpec& s);
  bool tendon_attr(pugi::xml_node node, pugi::xml_attribute a, TendonSpec& s);

  // sections
  void read_root(pugi::xml_node root);
  void read_compiler(pugi::xml_node node);
  void read_option(pugi::xml_node node);
  void read_default(pugi::xml_node node, const DefaultClass* parent);
  void read_body_children(pugi::xml_node node, int body, FrameRec* frame, const DefaultClass& def);
  JointRec read_joint(pugi::xml_node node, FrameRec* frame, const DefaultClass& def);
  JointRec read_freejoint(pugi::xml_node node, FrameRec* frame);
  GeomRec read_geom(pugi::xml_node node, FrameRec* frame, const DefaultClass& def);
  void read_frame(pugi::xml_node node, int body, FrameRec* frame, const DefaultClass& def);
  void read_body(pugi::xml_node node, int parent, FrameRec* frame, const DefaultClass& def);
  [[noreturn]] void unknown_attribute(pugi::xml_node node, pugi::xml_attribute a) const;
  void read_inertial(pugi::xml_node node, BodyRec& b);
  void read_tendons(pugi::xml_node node);
  void read_actuators(pugi::xml_node node);
  void read_contact(pugi::xml_node node);
  void ignore_section(pugi::xml_node node);

  // compilation
  void compile_frame(FrameRec& f);
  void compile_body(int id);
  void compile_geom(GeomRec& g, bool static_body);
  int compile_joint(JointRec& j);
  void inertia_from_geoms(BodyRec& b);
  bool has_mass_and_inertia(int id) const;
  void compile();

  // assembly
  struct NameIndex {
    std::unordered_map<std::string, int> body, joint, tendon;
  };
  NameIndex index_names() const;
  void assemble_tree();
  void assemble_joint(const JointRec& j, int body);
  void assemble_excludes(const NameIndex& names);
  void assemble_actuators(const NameIndex& names);
  std::pair<int, double> actuated_joint(const ActuatorRec& act, const NameIndex& names) const;
  void apply_total_mass();
  Model assemble();

  std::vector<std::unique_ptr<XmlSource>> sources_;
  std::unordered_map<const void*, const XmlSource*> includes_;  // <include> node -> its file
  std::string model_dir_;
  IgnoredList ignored_;

  Model model_;
  Compiler compiler_;
  bool contact_disabled_ = false, limit_disabled_ = false;
  bool spring_disabled_ = false, damper_disabled_ = false;
  bool clampctrl_disabled_ = false, gravity_disabled_ = false;
  std::map<std::string, DefaultClass> classes_;
  std::deque<FrameRec> frames_;
  std::vector<BodyRec> bodies_;
  std::vector<bool> static_;  // body welded to the world (no joint on the path to it)
  std::vector<TendonRec> tendons_;
  std::vector<ActuatorRec> actuators_;
  std::vector<std::pair<pugi::xml_node, std::pair<std::string, std::string>>> excludes_;
};

//------------------------------------------------------------------ sources and errors

XmlSource& MjcfReader::parse_source(const std::string& path, const std::string& dir,
                                    const std::string& text, pugi::xml_node included_from) {
  auto src = std::make_unique<XmlSource>();
  src->path = path;
  src->dir = dir;
  src->parse(text, included_from ? " (included from " + where(included_from) + ")" : "");
  sources_.push_back(std::move(src));
  return *sources_.back();
}

const XmlSource& MjcfReader::source_of(pugi::xml_node node) const {
  pugi::xml_node root = node.root();
  for (const auto& src : sources_) {
    if (src->doc == root) return *src;
  }
  return *sources_.front();
}

// "path:line" of a node; the file's base name only when `basename` is set
std::string MjcfReader::where(pugi::xml_node node, bool basename) const {
  return source_of(node).where(node, basename);
}

void MjcfReader::fail(pugi::xml_node node, const std::string& message) const {
  throw std::runtime_error(where(node) + ": " + message);
}

// "joint 'knee'" or "joint"
std::string MjcfReader::describe(pugi::xml_node node) const {
  std::string s = node.name();
  if (const char* name = node.attribute("name").value(); *name) s += " '" + std::string(name) + "'";
  return s;
}

void MjcfReader::ignore(pugi::xml_node node, const std::string& what) {
  ignored_.add(what, where(node, true));
}

// Replaces nothing in the trees: records, for each <include>, the parsed file whose root's
// children stand in its place (as MuJoCo's IncludeXML and its include-transparent traversal).
// A relative file name starts from the including file's directory, then from the model's.
void MjcfReader::expand_includes(pugi::xml_node node, const std::string& dir) {
  for (pugi::xml_node c = node.first_child(); c; c = c.next_sibling()) {
    if (c.type() != pugi::node_element) continue;
    if (std::string_view(c.name()) != "include") {
      expand_includes(c, dir);
      continue;
    }
    if (c.first_child()) fail(c, "include element cannot have children");
    std::string file = c.attribute("file").value();
    if (file.empty()) fail(c, "include element is missing its 'file' attribute");
    fs::path path = fs::path(file).is_absolute() ? fs::path(file) : fs::path(dir) / file;
    if (!fs::exists(path) && !fs::path(file).is_absolute()) {
      fs::path legacy = fs::path(model_dir_) / file;
      if (fs::exists(legacy)) path = legacy;
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(c, "include file '" + file + "' not found (looked for " + path.string() + ")");
    std::string canonical = fs::weakly_canonical(path).string();
    for (const auto& src : sources_) {
      if (fs::weakly_canonical(src->path).string() == canonical) {
        fail(c, "file '" + file + "' is already included");
      }
    }
    std::stringstream text;
    text << in.rdbuf();
    XmlSource& src = parse_source(path.string(), path.parent_path().string(), text.str(), c);
    pugi::xml_node root = src.doc.document_element();
    if (!root) fail(c, "include file '" + file + "' has no root element");
    includes_[c.internal_object()] = &src;
    expand_includes(root, src.dir);
  }
}

// element children of node, each <include> replaced by the children of its file's root
std::vector<pugi::xml_node> MjcfReader::children(pugi::xml_node node) const {
  std::vector<pugi::xml_node> out;
  for (pugi::xml_node c = node.first_child(); c; c = c.next_sibling()) {
    if (c.type() != pugi::node_element) continue;
    if (std::string_view(c.name()) == "include") {
      auto included = children(includes_.at(c.internal_object())->doc.document_element());
      out.insert(out.end(), included.begin(), included.end());
    } else {
      out.push_back(c);
    }
  }
  return out;
}

//------------------------------------------------------------------ attribute values

// Parses the whitespace-separated numbers of attribute a into dst: at most maxlen, at least
// minlen values; components beyond those given keep their value (MuJoCo's partial vectors).
int MjcfReader::read_numbers(pugi::xml_node node, pugi::xml_attribute a, double* dst, int maxlen,
                             int minlen) {
  std::vector<double> values;
  const char* s = a.value();
  while (true) {
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
    if (!*s) break;
    char* end = nullptr;
    double v = std::strtod(s, &end);
    if (end == s || (*end && *end != ' ' && *end != '\t' && *end != '\n' && *end != '\r')) {
      fail(node, describe(node) + ": attribute '" + a.name() + "' has an invalid number in '" +
                     a.value() + "'");
    }
    values.push_back(v);
    s = end;
  }
  int n = static_cast<int>(values.size());
  if (n > maxlen) {
    fail(node, describe(node) + ": attribute '" + a.name() + "' has too much data (" +
                   std::to_string(n) + " values, at most " + std::to_string(maxlen) + ")");
  }
  if (n < minlen) {
    fail(node, describe(node) + ": attribute '" + a.name() + "' does not have enough data (" +
                   std::to_string(n) + " values, expected " + std::to_string(minlen) + ")");
  }
  std::copy(values.begin(), values.end(), dst);
  return n;
}

int MjcfReader::read_int(pugi::xml_node node, pugi::xml_attribute a) {
  const char* s = a.value();
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  while (*end == ' ') end++;
  if (end == s || *end) {
    fail(node,
         describe(node) + ": attribute '" + a.name() + "' must be an integer, not '" + s + "'");
  }
  return static_cast<int>(v);
}

// index of the attribute's value in keys
// index of the attribute's value in keys; an unknown value is reported as an unknown `kind`
// ("unknown joint type 'twist'") when kind is given
int MjcfReader::read_keyword(pugi::xml_node node, pugi::xml_attribute a,
                             std::initializer_list<std::string_view> keys, const char* kind) {
  int i = 0;
  for (std::string_view k : keys) {
    if (k == a.value()) return i;
    i++;
  }
  if (kind) fail(node, describe(node) + ": unknown " + kind + " '" + a.value() + "'");
  std::string list;
  for (std::string_view k : keys) list += (list.empty() ? "" : ", ") + std::string(k);
  fail(node, describe(node) + ": invalid value '" + a.value() + "' of attribute '" + a.name() +
                 "' (expected one of " + list + ")");
}

bool MjcfReader::read_bool(pugi::xml_node node, pugi::xml_attribute a) {
  return read_keyword(node, a, {"false", "true"}) == 1;
}

// quat or one of its alternatives; false when a is none of them
bool MjcfReader::read_orientation(pugi::xml_node node, pugi::xml_attribute a, double quat[4],
                                  AltOrientation& alt) {
  std::string_view k = a.name();
  if (k == "quat") {
    read_numbers(node, a, quat, 4, 4);
    if (all_zero(quat, 4)) fail(node, describe(node) + ": zero quaternion is not allowed");
  } else if (k == "axisangle") {
    read_numbers(node, a, alt.axisangle, 4, 4);
    alt.kind = AltOrientation::kAxisAngle;
  } else if (k == "xyaxes") {
    read_numbers(node, a, alt.xyaxes, 6, 6);
    alt.kind = AltOrientation::kXYAxes;
  } else if (k == "zaxis") {
    read_numbers(node, a, alt.zaxis, 3, 3);
    alt.kind = AltOrientation::kZAxis;
  } else if (k == "euler") {
    read_numbers(node, a, alt.euler, 3, 3);
    alt.kind = AltOrientation::kEuler;
  } else {
    return false;
  }
  return true;
}

void MjcfReader::check_one_orientation(pugi::xml_node node) {
  int n = 0;
  for (const char* k : {"quat", "axisangle", "xyaxes", "zaxis", "euler"}) {
    n += node.attribute(k) ? 1 : 0;
  }
  if (n > 1) fail(node, describe(node) + ": multiple orientation specifiers are not allowed");
}

// the default class named by attribute attr ("class" or "childclass"), else fallback
const DefaultClass& MjcfReader::find_class(pugi::xml_node node, const char* attr,
                                           const DefaultClass& fallback) {
  pugi::xml_attribute a = node.attribute(attr);
  if (!a) return fallback;
  auto it = classes_.find(a.value());
  if (it == classes_.end()) {
    fail(node, describe(node) + ": unknown default class '" + a.value() + "'");
  }
  return it->second;
}

// Whether limits apply (islimited and checklimited in user_objects.cc): "auto" means limited
// when range[0] < range[1]; without autolimits a range needs an explicit "limited" attribute.
// attr is the attribute prefix: "" (joint range), "ctrl", "force", "actuatorfrc".
bool MjcfReader::resolve_limited(pugi::xml_node node, int limited, const double range[2],
                                 const char* attr) {
  bool hasrange = !(range[0] == 0 && range[1] == 0);
  if (!compiler_.autolimits && limited == kLimitedAuto && hasrange) {
    std::string a = attr;
    fail(node, describe(node) + ": has " + a + "range but not " + a +
                   "limited; set autolimits=\"true\" or give " + a + "limited");
  }
  return limited == kLimitedTrue || (limited == kLimitedAuto && range[0] < range[1]);
}

//------------------------------------------------------------------ element attributes

bool MjcfReader::joint_attr(pugi::xml_node node, pugi::xml_attribute a, JointSpec& s) {
  std::string_view k = a.name();
  if (k == "type") {
    // kJointFree .. kJointHinge follow the order of the keywords
    s.type = read_keyword(node, a, {"free", "ball", "slide", "hinge"}, "joint type");
  } else if (k == "pos") {
    read_numbers(node, a, s.pos, 3, 3);
  } else if (k == "axis") {
    read_numbers(node, a, s.axis, 3, 3);
  } else if (k == "limited") {
    s.limited = read_keyword(node, a, {"false", "true", "auto"});
  } else if (k == "range") {
    read_numbers(node, a, s.range, 2, 2);
  } else if (k == "ref") {
    read_numbers(node, a, &s.ref, 1, 1);
  } else if (k == "springref") {
    read_numbers(node, a, &s.springref, 1, 1);
  } else if (k == "stiffness") {
    read_numbers(node, a, s.stiffness, 3, 1);
  } else if (k == "damping") {
    read_numbers(node, a, s.damping, 3, 1);
  } else if (k == "armature") {
    read_numbers(node, a, &s.armature, 1, 1);
  } else if (k == "frictionloss") {
    read_numbers(node, a, &s.frictionloss, 1, 1);
  } else if (k == "springdamper") {
    read_numbers(node, a, s.springdamper, 2, 2);
  } else if (k == "actuatorfrclimited") {
    s.actfrclimited = read_keyword(node, a, {"false", "true", "auto"});
  } else if (k == "actuatorfrcrange") {
    read_numbers(node, a, s.actfrcrange, 2, 2);
  } else if (k == "actuatorgravcomp") {
    s.actgravcomp = read_bool(node, a);
  } else if (is_one_of(k, kJointIgnored)) {
    ignore(node, "joint@" + std::string(k));
  } else {
    return false;
  }
  return true;
}

bool MjcfReader::geom_attr(pugi::xml_node node, pugi::xml_attribute a, GeomSpec& s) {
  std::string_view k = a.name();
  if (k == "type") {
    std::string_view t = a.value();
    if (is_one_of(t, {"mesh", "hfield", "sdf"})) {
      fail(node, describe(node) + ": geom type '" + a.value() +
                     "' is not supported (supported: plane, sphere, capsule, ellipsoid, "
                     "cylinder, box)");
    }
    // kGeomPlane .. kGeomBox follow the order of the keywords
    s.type = read_keyword(node, a,
                          {"plane", "hfield", "sphere", "capsule", "ellipsoid", "cylinder", "box"},
                          "geom type");
  } else if (k == "contype") {
    s.contype = read_int(node, a);
  } else if (k == "conaffinity") {
    s.conaffinity = read_int(node, a);
  } else if (k == "condim") {
    s.condim = read_int(node, a);
  } else if (k == "group") {
    s.group = read_int(node, a);  // also selects the geoms that give their body mass
  } else if (k == "size") {
    read_numbers(node, a, s.size, 3, 1);
  } else if (k == "friction") {
    read_numbers(node, a, s.friction, 3, 1);
  } else if (k == "mass") {
    read_numbers(node, a, &s.mass, 1, 1);
  } else if (k == "density") {
    read_numbers(node, a, &s.density, 1, 1);
  } else if (k == "shellinertia") {
    s.shellinertia = read_bool(node, a);
  } else if (k == "fromto") {
    read_numbers(node, a, s.fromto, 6, 6);
  } else if (k == "pos") {
    read_numbers(node, a, s.pos, 3, 3);
  } else if (read_orientation(node, a, s.quat, s.alt)) {
  } else if (k == "mesh") {
    s.mesh = a.value();
  } else if (k == "hfield") {
    s.hfield = a.value();
  } else if (k == "surfacevel") {
    read_numbers(node, a, s.surfacevel, 6, 1);
  } else if (k == "adhesion") {
    read_numbers(node, a, &s.adhesion, 1, 1);
  } else if (k == "fluidshape") {
    s.fluid_ellipsoid = read_keyword(node, a, {"none", "ellipsoid"}) == 1;
  } else if (is_one_of(k, kGeomIgnored)) {
    ignore(node, "geom@" + std::string(k));
  } else {
    return false;
  }
  return true;
}

bool MjcfReader::actuator_attr(pugi::xml_node node, pugi::xml_attribute a, ActuatorSpec& s) {
  std::string_view k = a.name();
  if (k == "ctrllimited") {
    s.ctrllimited = read_keyword(node, a, {"false", "true", "auto"});
  } else if (k == "forcelimited") {
    s.forcelimited = read_keyword(node, a, {"false", "true", "auto"});
  } else if (k == "ctrlrange") {
    read_numbers(node, a, s.ctrlrange, 2, 2);
  } else if (k == "forcerange") {
    read_numbers(node, a, s.forcerange, 2, 2);
  } else if (k == "gear") {
    read_numbers(node, a, s.gear, 6, 1);
  } else if (k == "damping") {
    read_numbers(node, a, s.damping, 3, 1);
  } else if (k == "armature") {
    read_numbers(node, a, &s.armature, 1, 1);
  } else if (k == "delay") {
    read_numbers(node, a, &s.delay, 1, 1);
  } else if (is_one_of(k, kActuatorIgnored)) {
    ignore(node, std::string(node.name()) + "@" + std::string(k));
  } else {
    return false;
  }
  return true;
}

bool MjcfReader::tendon_attr(pugi::xml_node node, pugi::xml_attribute a, TendonSpec& s) {
  std::string_view k = a.name();
  if (k == "limited") {
    s.limited = read_keyword(node, a, {"false", "true", "auto"});
  } else if (k == "range") {
    read_numbers(node, a, s.range, 2, 2);
  } else if (k == "actuatorfrclimited") {
    s.actfrclimited = read_keyword(node, a, {"false", "true", "auto"});
  } else if (k == "actuatorfrcrange") {
    read_numbers(node, a, s.actfrcrange, 2, 2);
  } else if (k == "frictionloss") {
    read_numbers(node, a, &s.frictionloss, 1, 1);
  } else if (k == "stiffness") {
    read_numbers(node, a, s.stiffness, 3, 1);
  } else if (k == "damping") {
    read_numbers(node, a, s.damping, 3, 1);
  } else if (k == "armature") {
    read_numbers(node, a, &s.armature, 1, 1);
  } else if (is_one_of(k, kTendonIgnored)) {
    ignore(node, "tendon@" + std::string(k));
  } else {
    return false;
  }
  return true;
}

//------------------------------------------------------------------ sections

Model MjcfReader::read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open MJCF file '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  model_dir_ = fs::path(path).parent_path().string();
  if (model_dir_.empty()) model_dir_ = ".";
  XmlSource& src = parse_source(path, model_dir_, text.str(), pugi::xml_node());
  model_.source = path;
  read_root(src.doc.document_element());
  compile();
  return assemble();
}

Model MjcfReader::read_string(const std::string& xml, const std::string& dir) {
  model_dir_ = dir.empty() ? "." : dir;
  XmlSource& src = parse_source("<string>", model_dir_, xml, pugi::xml_node());
  read_root(src.doc.document_element());
  compile();
  return assemble();
}

void MjcfReader::read_root(pugi::xml_node root) {
  if (!root || std::string_view(root.name()) != "mujoco") {
    throw std::runtime_error(sources_.front()->path + ": the root element must be <mujoco>");
  }
  for (pugi::xml_attribute a : root.attributes()) {
    if (std::string_view(a.name()) != "model") {
      fail(root, std::string("mujoco: unknown attribute '") + a.name() + "'");
    }
    model_.name = a.value();
  }
  expand_includes(root, sources_.front()->dir);

  // sections in MuJoCo's order (mjXReader::Parse), whatever their order in the file
  std::vector<pugi::xml_node> sections = children(root);
  auto each = [&](std::string_view tag, auto&& f) {
    for (pugi::xml_node s : sections) {
      if (tag == s.name()) f(s);
    }
  };
  const std::initializer_list<std::string_view> known = {
      "compiler",  "option",   "size",   "visual",   "statistic",  "default",
      "extension", "custom",   "asset",  "contact",  "deformable", "equality",
      "tendon",    "actuator", "sensor", "keyframe", "worldbody"};
  for (pugi::xml_node s : sections) {
    if (!is_one_of(s.name(), known)) fail(s, std::string("unknown element <") + s.name() + ">");
  }
  each("compiler", [&](pugi::xml_node s) { read_compiler(s); });
  each("option", [&](pugi::xml_node s) { read_option(s); });
  classes_["main"].name = "main";
  each("default", [&](pugi::xml_node s) { read_default(s, nullptr); });
  for (std::string_view tag : kIgnoredSections) {
    each(tag, [&](pugi::xml_node s) { ignore_section(s); });
  }
  each("deformable", [&](pugi::xml_node s) {
    if (!children(s).empty()) fail(s, "deformable objects (flex, skin) are not supported");
  });
  each("equality", [&](pugi::xml_node s) {
    std::vector<pugi::xml_node> eq = children(s);
    if (!eq.empty()) {
      fail(eq.front(),
           "equality " + describe(eq.front()) + ": equality constraints are not supported");
    }
  });

  // the world body, then its tree depth first
  BodyRec world;
  world.node = root;
  world.name = "world";
  bodies_.push_back(world);
  each("worldbody", [&](pugi::xml_node s) {
    if (s.first_attribute()) fail(s, "worldbody cannot have attributes");
    read_body_children(s, 0, nullptr, classes_.at("main"));
  });
  each("tendon", [&](pugi::xml_node s) { read_tendons(s); });
  each("actuator", [&](pugi::xml_node s) { read_actuators(s); });
  each("contact", [&](pugi::xml_node s) { read_contact(s); });
}

void MjcfReader::read_compiler(pugi::xml_node node) {
  for (pugi::xml_attribute a : node.attributes()) {
    std::string_view k = a.name();
    if (k == "angle") {
      compiler_.degree = read_keyword(node, a, {"radian", "degree"}) == 1;
    } else if (k == "eulerseq") {
      std::string seq = a.value();
      if (seq.size() != 3 || seq.find_first_not_of("xyzXYZ") != std::string::npos) {
        fail(node, "compiler: eulerseq must be three characters of xyzXYZ, not '" + seq + "'");
      }
      std::copy(seq.begin(), seq.end(), compiler_.eulerseq);
    } else if (k == "inertiafromgeom") {
      compiler_.inertiafromgeom = read_keyword(node, a, {"false", "true", "auto"});
    } else if (k == "inertiagrouprange") {
      double r[2];
      read_numbers(node, a, r, 2, 2);
      compiler_.inertiagrouprange[0] = static_cast<int>(r[0]);
      compiler_.inertiagrouprange[1] = static_cast<int>(r[1]);
    } else if (k == "settotalmass") {
      read_numbers(node, a, &compiler_.settotalmass, 1, 1);
    } else if (k == "boundmass") {
      read_numbers(node, a, &compiler_.boundmass, 1, 1);
    } else if (k == "boundinertia") {
      read_numbers(node, a, &compiler_.boundinertia, 1, 1);
    } else if (k == "balanceinertia") {
      compiler_.balanceinertia = read_bool(node, a);
    } else if (k == "autolimits") {
      compiler_.autolimits = read_bool(node, a);
    } else if (k == "coordinate") {
      if (read_keyword(node, a, {"local", "global"}) == 1) {
        fail(node, "compiler: global coordinates are not supported (MuJoCo dropped them too)");
      }
    } else if (is_one_of(k, {"fusestatic", "discardvisual", "alignfree"})) {
      // each changes the compiled bodies or geoms (and alignfree their frames)
      if (read_bool(node, a))
        fail(node, "compiler: " + std::string(k) + "=\"true\" is not supported");
    } else if (is_one_of(k, {"meshdir", "texturedir", "assetdir", "strippath", "usethread",
                             "saveinertial", "fitaabb", "conflict"})) {
      ignore(node, "compiler@" + std::string(k));
    } else {
      fail(node, "compiler: unknown attribute '" + std::string(k) + "'");
    }
  }
  for (pugi::xml_node c : children(node)) {
    if (std::string_view(c.name()) != "lengthrange") {
      fail(c, std::string("compiler: unknown element <") + c.name() + ">");
    }
    ignore(c, "lengthrange");
  }
}

void MjcfReader::read_option(pugi::xml_node node) {
  for (pugi::xml_attribute a : node.attributes()) {
    std::string_view k = a.name();
    if (k == "timestep") {
      read_numbers(node, a, &model_.opt.timestep, 1, 1);
    } else if (k == "gravity") {
      read_numbers(node, a, model_.opt.gravity.data(), 3, 3);
    } else if (k == "integrator") {
      int i = read_keyword(node, a, {"Euler", "RK4", "implicit", "implicitfast"});
      if (i != 0) {
        ignore(node, "option@integrator=\"" + std::string(a.value()) +
                         "\", substituted by semi-implicit Euler");
      }
    } else if (k == "density" || k == "viscosity") {
      double v = 0;
      read_numbers(node, a, &v, 1, 1);
      if (v != 0) ignore(node, "option@" + std::string(k) + ", fluid forces are not simulated");
    } else if (is_one_of(k, {"impratio",       "tolerance",
                             "ls_tolerance",   "noslip_tolerance",
                             "ccd_tolerance",  "sleep_tolerance",
                             "wind",           "magnetic",
                             "o_margin",       "o_solref",
                             "o_solimp",       "o_friction",
                             "cone",           "jacobian",
                             "solver",         "iterations",
                             "ls_iterations",  "noslip_iterations",
                             "ccd_iterations", "sdf_iterations",
                             "sdf_initpoints", "actuatorgroupdisable"})) {
      ignore(node, "option@" + std::string(k));
    } else {
      fail(node, "option: unknown attribute '" + std::string(k) + "'");
    }
  }

  // <flag>: disabling a feature Phalanx has is applied to the model; features Phalanx lacks, or
  // that only concern the solver, are recorded as ignored
  for (pugi::xml_node c : children(node)) {
    if (std::string_view(c.name()) != "flag") {
      fail(c, std::string("option: unknown element <") + c.name() + ">");
    }
    for (pugi::xml_attribute a : c.attributes()) {
      std::string_view k = a.name();
      bool enabled = read_keyword(c, a, {"disable", "enable"}) == 1;
      bool disabled = !enabled;
      if (k == "contact") {
        contact_disabled_ |= disabled;
      } else if (k == "limit") {
        limit_disabled_ |= disabled;
      } else if (k == "constraint") {
        contact_disabled_ |= disabled;
        limit_disabled_ |= disabled;
      } else if (k == "spring") {
        spring_disabled_ |= disabled;
      } else if (k == "damper") {
        damper_disabled_ |= disabled;
      } else if (k == "gravity") {
        gravity_disabled_ |= disabled;
      } else if (k == "clampctrl") {
        clampctrl_disabled_ |= disabled;
      } else if (k == "actuation" || k == "filterparent") {
        if (disabled) fail(c, "flag: " + std::string(k) + "=\"disable\" is not supported");
      } else if (is_one_of(
                     k, {"equality", "frictionloss", "warmstart", "refsafe", "sensor", "midphase",
                         "eulerdamp", "autoreset", "nativeccd", "island", "multiccd", "override",
                         "energy", "fwdinv", "invdiscrete", "sleep", "diagexact"})) {
        ignore(c, "flag@" + std::string(k));
      } else {
        fail(c, "flag: unknown attribute '" + std::string(k) + "'");
      }
    }
  }
}

void MjcfReader::read_default(pugi::xml_node node, const DefaultClass* parent) {
  std::string name = node.attribute("class").value();
  DefaultClass* def;
  if (!parent) {
    if (!name.empty() && name != "main") {
      fail(node, "the top-level default class is 'main' and cannot be renamed '" + name + "'");
    }
    def = &classes_.at("main");
  } else {
    if (name.empty()) fail(node, "default: nested default class without a name");
    if (classes_.count(name)) fail(node, "default: repeated default class name '" + name + "'");
    def = &(classes_[name] = *parent);
    def->name = name;
  }
  for (pugi::xml_attribute a : node.attributes()) {
    if (std::string_view(a.name()) != "class") {
      fail(node, std::string("default: unknown attribute '") + a.name() + "'");
    }
  }

  // elements other than nested defaults first, as MuJoCo reads them
  std::vector<pugi::xml_node> elems = children(node);
  for (pugi::xml_node c : elems) {
    std::string_view tag = c.name();
    auto unknown = [&](pugi::xml_attribute a) {
      fail(c, "default " + std::string(tag) + ": unknown attribute '" + a.name() + "'");
    };
    if (tag == "joint") {
      for (pugi::xml_attribute a : c.attributes()) {
        if (!joint_attr(c, a, def->joint)) unknown(a);
      }
    } else if (tag == "geom") {
      check_one_orientation(c);
      for (pugi::xml_attribute a : c.attributes()) {
        if (!geom_attr(c, a, def->geom)) unknown(a);
      }
    } else if (is_one_of(tag, kActuatorTags)) {
      // the actuator default is shared by all actuator types; attributes that only matter to
      // types other than motor (gains, dynamics, ...) are ignored here
      for (pugi::xml_attribute a : c.attributes()) {
        if (!actuator_attr(c, a, def->actuator)) ignore(c, std::string(tag) + "@" + a.name());
      }
    } else if (tag == "tendon") {
      for (pugi::xml_attribute a : c.attributes()) {
        if (!tendon_attr(c, a, def->tendon)) unknown(a);
      }
    } else if (is_one_of(tag,
                         {"site", "camera", "light", "material", "mesh", "pair", "equality"})) {
      ignore(c, "default " + std::string(tag));
    } else if (tag != "default") {
      fail(c, "default: unknown element <" + std::string(tag) + ">");
    }
  }
  for (pugi::xml_node c : elems) {
    if (std::string_view(c.name()) == "default") read_default(c, def);
  }
}

void MjcfReader::ignore_section(pugi::xml_node node) {
  ignore(node, node.name());
  for (pugi::xml_node c : children(node)) ignore(c, std::string(node.name()) + "/" + c.name());
}

void MjcfReader::read_inertial(pugi::xml_node node, BodyRec& b) {
  b.explicit_inertial = true;
  check_one_orientation(node);
  if (!node.attribute("pos") || !node.attribute("mass")) {
    fail(node, "inertial: attributes 'pos' and 'mass' are required");
  }
  if (node.attribute("fullinertia") && node.attribute("diaginertia")) {
    fail(node, "inertial: fullinertia and diaginertia cannot both be given");
  }
  for (pugi::xml_attribute a : node.attributes()) {
    std::string_view k = a.name();
    if (k == "pos") {
      read_numbers(node, a, b.ipos, 3, 3);
    } else if (k == "mass") {
      read_numbers(node, a, &b.mass, 1, 1);
    } else if (k == "diaginertia") {
      read_numbers(node, a, b.inertia, 3, 3);
    } else if (k == "fullinertia") {
      read_numbers(node, a, b.fullinertia, 6, 6);
    } else if (!read_orientation(node, a, b.iquat, b.ialt)) {
      fail(node, "inertial: unknown attribute '" + std::string(k) + "'");
    }
  }
}

// Reads the children of a body (or of a frame inside it) into bodies_[body]; def is the default
// class of the enclosing body or frame (its childclass, else inherited).
// the children of a body (or of a frame in it), each element read by its own routine
void MjcfReader::read_body_children(pugi::xml_node node, int body, FrameRec* frame,
                                    const DefaultClass& def) {
  for (pugi::xml_node c : children(node)) {
    std::string_view tag = c.name();
    if (tag == "inertial") {
      if (body == 0) fail(c, "the world body cannot have an inertial");
      read_inertial(c, bodies_[body]);
    } else if (tag == "joint" || tag == "freejoint") {
      if (body == 0) fail(c, "the world body cannot have joints");
      bodies_[body].joints.push_back(tag == "joint" ? read_joint(c, frame, def)
                                                    : read_freejoint(c, frame));
    } else if (tag == "geom") {
      bodies_[body].geoms.push_back(read_geom(c, frame, def));
    } else if (is_one_of(tag, {"site", "camera", "light"})) {
      ignore(c, std::string(tag));
    } else if (tag == "frame") {
      read_frame(c, body, frame, def);
    } else if (tag == "body") {
      read_body(c, body, frame, def);
    } else if (is_one_of(tag, {"replicate", "attach", "plugin", "composite", "flexcomp"})) {
      fail(c, "<" + std::string(tag) + "> is not supported");
    } else {
      fail(c, "unknown element <" + std::string(tag) + "> in " + describe(node));
    }
  }
}

void MjcfReader::unknown_attribute(pugi::xml_node node, pugi::xml_attribute a) const {
  fail(node, describe(node) + ": unknown attribute '" + a.name() + "'");
}

JointRec MjcfReader::read_joint(pugi::xml_node c, FrameRec* frame, const DefaultClass& def) {
  JointRec j;
  j.node = c;
  j.s = find_class(c, "class", def).joint;
  j.frame = frame;
  for (pugi::xml_attribute a : c.attributes()) {
    std::string_view k = a.name();
    if (k == "name") {
      j.name = a.value();
    } else if (k != "class" && !joint_attr(c, a, j.s)) {
      unknown_attribute(c, a);
    }
  }
  return j;
}

// a free joint takes no default class attributes (mjs_addFreeJoint)
JointRec MjcfReader::read_freejoint(pugi::xml_node c, FrameRec* frame) {
  JointRec j;
  j.node = c;
  j.s.type = kJointFree;
  j.frame = frame;
  for (pugi::xml_attribute a : c.attributes()) {
    std::string_view k = a.name();
    if (k == "name") {
      j.name = a.value();
    } else if (k == "group") {
      ignore(c, "freejoint@group");
    } else if (k == "align") {
      if (read_keyword(c, a, {"false", "true", "auto"}) == 1) {
        fail(c, describe(c) + ": align=\"true\" is not supported");
      }
    } else {
      unknown_attribute(c, a);
    }
  }
  return j;
}

GeomRec MjcfReader::read_geom(pugi::xml_node c, FrameRec* frame, const DefaultClass& def) {
  GeomRec g;
  g.node = c;
  g.s = find_class(c, "class", def).geom;
  g.frame = frame;
  check_one_orientation(c);
  for (pugi::xml_attribute a : c.attributes()) {
    std::string_view k = a.name();
    if (k == "name") {
      g.name = a.value();
    } else if (k != "class" && !geom_attr(c, a, g.s)) {
      unknown_attribute(c, a);
    }
  }
  for (pugi::xml_node p : children(c)) fail(p, describe(c) + ": plugins are not supported");
  return g;
}

// a frame: its pose, then its children as the body's, placed in it
void MjcfReader::read_frame(pugi::xml_node c, int body, FrameRec* frame, const DefaultClass& def) {
  FrameRec& f = frames_.emplace_back();
  f.node = c;
  f.parent = frame;
  const DefaultClass& fdef = find_class(c, "childclass", def);
  check_one_orientation(c);
  for (pugi::xml_attribute a : c.attributes()) {
    std::string_view k = a.name();
    if (k == "pos") {
      read_numbers(c, a, f.pos, 3, 3);
    } else if (k != "name" && k != "childclass" && !read_orientation(c, a, f.quat, f.alt)) {
      unknown_attribute(c, a);
    }
  }
  read_body_children(c, body, &f, fdef);
}

// a child body of `parent`, then its own children, depth first
void MjcfReader::read_body(pugi::xml_node c, int parent, FrameRec* frame, const DefaultClass& def) {
  int id = static_cast<int>(bodies_.size());
  BodyRec& b = bodies_.emplace_back();
  b.node = c;
  b.parent = parent;
  b.frame = frame;
  const DefaultClass& bdef = find_class(c, "childclass", def);
  check_one_orientation(c);
  for (pugi::xml_attribute a : c.attributes()) {
    std::string_view k = a.name();
    if (k == "name") {
      b.name = a.value();
    } else if (k == "pos") {
      read_numbers(c, a, b.pos, 3, 3);
    } else if (k == "mocap") {
      if (read_bool(c, a)) fail(c, describe(c) + ": mocap bodies are not supported");
    } else if (k == "gravcomp") {
      double g = 0;
      read_numbers(c, a, &g, 1, 1);
      if (g != 0) fail(c, describe(c) + ": gravity compensation is not supported");
    } else if (is_one_of(k, {"sleep", "simple", "user"})) {
      ignore(c, "body@" + std::string(k));
    } else if (k != "childclass" && !read_orientation(c, a, b.quat, b.alt)) {
      unknown_attribute(c, a);
    }
  }
  bodies_[parent].children.push_back(id);
  read_body_children(c, id, nullptr, bdef);
}

void MjcfReader::read_tendons(pugi::xml_node node) {
  for (pugi::xml_node c : children(node)) {
    std::string_view tag = c.name();
    if (tag != "fixed" && tag != "spatial") {
      fail(c, "tendon: unknown element <" + std::string(tag) + ">");
    }
    TendonRec t;
    t.node = c;
    t.spatial = tag == "spatial";
    t.s = find_class(c, "class", classes_.at("main")).tendon;
    for (pugi::xml_attribute a : c.attributes()) {
      std::string_view k = a.name();
      if (k == "name") {
        t.name = a.value();
      } else if (k != "class" && !tendon_attr(c, a, t.s)) {
        unknown_attribute(c, a);
      }
    }
    for (pugi::xml_node p : children(c)) {
      if (!t.spatial && std::string_view(p.name()) == "joint") {
        double coef = 0;
        if (pugi::xml_attribute a = p.attribute("coef")) read_numbers(p, a, &coef, 1, 1);
        t.joints.emplace_back(p.attribute("joint").value(), coef);
      }
    }

    // a tendon that adds no force (no limit, spring, damper, friction or armature) is only
    // bookkeeping; one that does is not supported
    const TendonSpec& s = t.s;
    const char* why = nullptr;
    if (s.limited == kLimitedTrue || (s.limited == kLimitedAuto && s.range[0] < s.range[1])) {
      why = "limits";
    } else if (s.actfrclimited == kLimitedTrue ||
               (s.actfrclimited == kLimitedAuto && s.actfrcrange[0] < s.actfrcrange[1])) {
      why = "actuator force limits";
    } else if (!all_zero(s.stiffness, 3)) {
      why = "stiffness";
    } else if (!all_zero(s.damping, 3)) {
      why = "damping";
    } else if (s.frictionloss != 0) {
      why = "frictionloss";
    } else if (s.armature != 0) {
      why = "armature";
    }
    if (why) {
      fail(c, "tendon " + describe(c) + " is not supported: it has " + why +
                  ", which change the dynamics");
    }
    ignore(c, "tendon " + std::string(tag) + " without forces");
    tendons_.push_back(t);
  }
}

void MjcfReader::read_actuators(pugi::xml_node node) {
  for (pugi::xml_node c : children(node)) {
    std::string_view tag = c.name();
    if (tag != "motor") {
      fail(c, "actuator " + describe(c) + " is not supported (only <motor> is)");
    }
    ActuatorRec act;
    act.node = c;
    act.s = find_class(c, "class", classes_.at("main")).actuator;
    for (pugi::xml_attribute a : c.attributes()) {
      std::string_view k = a.name();
      if (k == "name") {
        act.name = a.value();
      } else if (k == "joint") {
        act.joint = a.value();
      } else if (k == "tendon") {
        act.tendon = a.value();
      } else if (is_one_of(k, {"jointinparent", "site", "refsite", "body", "cranksite",
                               "slidersite", "cranklength"})) {
        fail(c, describe(c) + ": transmission '" + std::string(k) + "' is not supported");
      } else if (k != "class" && !actuator_attr(c, a, act.s)) {
        unknown_attribute(c, a);
      }
    }
    actuators_.push_back(act);
  }
}

void MjcfReader::read_contact(pugi::xml_node node) {
  for (pugi::xml_node c : children(node)) {
    std::string_view tag = c.name();
    if (tag == "pair") fail(c, "explicit contact pairs (<pair>) are not supported");
    if (tag != "exclude") fail(c, "contact: unknown element <" + std::string(tag) + ">");
    std::string b1, b2;
    for (pugi::xml_attribute a : c.attributes()) {
      std::string_view k = a.name();
      if (k == "body1") {
        b1 = a.value();
      } else if (k == "body2") {
        b2 = a.value();
      } else if (k != "name") {
        fail(c, "exclude: unknown attribute '" + std::string(k) + "'");
      }
    }
    if (b1.empty() || b2.empty()) fail(c, "exclude: attributes 'body1' and 'body2' are required");
    excludes_.push_back({c, {b1, b2}});
  }
}

//------------------------------------------------------------------ compilation

void MjcfReader::compile_frame(FrameRec& f) {
  if (f.compiled) return;
  if (const char* err = resolve_orientation(f.quat, compiler_, f.alt)) {
    fail(f.node, std::string("frame: orientation error '") + err + "'");
  }
  if (f.parent) {
    compile_frame(*f.parent);
    frame_accum_child(f.parent->pos, f.parent->quat, f.pos, f.quat);
  }
  normalize(f.quat, 4);
  f.compiled = true;
}

// mjCGeom::Compile: pose, size, then mass and inertia when the geom gives its body mass
void MjcfReader::compile_geom(GeomRec& g, bool static_body) {
  GeomSpec& s = g.s;
  std::string what = describe(g.node);
  if (!s.mesh.empty() || !s.hfield.empty()) {
    fail(g.node, what + ": mesh and hfield geoms are not supported");
  }
  if (s.type == kGeomHField) fail(g.node, what + ": hfield geoms are not supported");
  if (s.condim != 1 && s.condim != 3 && s.condim != 4 && s.condim != 6) {
    fail(g.node, what + ": invalid condim " + std::to_string(s.condim) + " (1, 3, 4 or 6)");
  }
  if (s.type == kGeomPlane && !static_body) {
    fail(g.node, what + ": planes are only allowed in static bodies");
  }
  if (s.shellinertia) fail(g.node, what + ": shellinertia is not supported");
  if (!all_zero(s.surfacevel, 6)) fail(g.node, what + ": surfacevel is not supported");
  if (s.adhesion != 0) fail(g.node, what + ": adhesion is not supported");
  if (s.fluid_ellipsoid) fail(g.node, what + ": fluidshape (fluid forces) is not supported");

  normalize(s.quat, 4);
  if (defined(s.fromto[0])) {
    // pos at the midpoint, z along from - to, size[1] half the length
    if (s.type != kGeomCapsule && s.type != kGeomCylinder && s.type != kGeomEllipsoid &&
        s.type != kGeomBox) {
      fail(g.node, what + ": fromto requires a capsule, cylinder, box or ellipsoid");
    }
    if (!all_zero(s.pos, 3)) fail(g.node, what + ": both pos and fromto are given");
    double vec[3] = {s.fromto[0] - s.fromto[3], s.fromto[1] - s.fromto[4],
                     s.fromto[2] - s.fromto[5]};
    s.size[1] = normalize(vec, 3) / 2;
    if (s.size[1] < kEps) fail(g.node, what + ": fromto points are too close");
    if (s.type == kGeomEllipsoid || s.type == kGeomBox) {
      s.size[2] = s.size[1];
      s.size[1] = s.size[0];
    }
    for (int i = 0; i < 3; i++) s.pos[i] = (s.fromto[i] + s.fromto[i + 3]) / 2;
    z_to_quat(s.quat, vec);
  } else if (const char* err = resolve_orientation(s.quat, compiler_, s.alt)) {
    fail(g.node, what + ": orientation error '" + err + "'");
  }

  // sizes used by the type must be positive (a plane's third size is its rendering spacing)
  static const int kNumSizes[] = {3, 0, 1, 2, 3, 2, 3, 0};
  if (s.type == kGeomPlane) {
    if (s.size[2] <= 0) fail(g.node, what + ": plane size[2] must be positive");
  } else {
    for (int i = 0; i < kNumSizes[s.type]; i++) {
      if (!(s.size[i] > 0)) {
        fail(g.node, what + ": size[" + std::to_string(i) + "] must be positive");
      }
    }
  }

  // mass from mass= (density follows) or from density x volume
  if (g.infer) {
    double volume = geom_volume(s.type, s.size);
    if (defined(s.mass)) {
      if (s.mass == 0) {
        g.mass = 0;
      } else if (volume > kEps) {
        g.mass = s.mass;
        geom_inertia(s.type, s.size, g.mass, g.inertia);
      }
    } else if (s.density != 0) {
      g.mass = s.density * volume;
      geom_inertia(s.type, s.size, g.mass, g.inertia);
    }
    if (g.mass < 0 || g.inertia[0] < 0 || g.inertia[1] < 0 || g.inertia[2] < 0 || s.density < 0) {
      fail(g.node, what + ": mass, inertia or density are negative");
    }
  }

  if (g.frame) {
    compile_frame(*g.frame);
    frame_accum_child(g.frame->pos, g.frame->quat, s.pos, s.quat);
  }
}

// mjCBody::InertiaFromGeom: the body's mass, centre of mass and principal frame from its geoms
void MjcfReader::inertia_from_geoms(BodyRec& b) {
  std::vector<const GeomRec*> sel;
  for (const GeomRec& g : b.geoms) {
    if (g.s.group >= compiler_.inertiagrouprange[0] &&
        g.s.group <= compiler_.inertiagrouprange[1] && g.mass > kEps) {
      sel.push_back(&g);
    }
  }
  if (sel.size() == 1) {
    copy(b.ipos, sel[0]->s.pos, 3);
    copy(b.iquat, sel[0]->s.quat, 4);
    b.mass = sel[0]->mass;
    copy(b.inertia, sel[0]->inertia, 3);
  } else if (sel.size() > 1) {
    // total mass and centre of mass
    double com[3] = {0, 0, 0};
    b.mass = 0;
    for (const GeomRec* g : sel) {
      b.mass += g->mass;
      for (int i = 0; i < 3; i++) com[i] += g->mass * g->s.pos[i];
    }
    if (b.mass < kEps) fail(b.node, describe(b.node) + ": body mass is too small");
    for (int i = 0; i < 3; i++) b.ipos[i] = com[i] / b.mass;

    // each geom's tensor rotated into the body frame and moved to the com (parallel axes)
    double total[6] = {0, 0, 0, 0, 0, 0};
    for (const GeomRec* g : sel) {
      double rotated[6], shift[6];
      double d[3] = {g->s.pos[0] - b.ipos[0], g->s.pos[1] - b.ipos[1], g->s.pos[2] - b.ipos[2]};
      inertia_rotate(rotated, g->inertia, g->s.quat);
      inertia_offcenter(shift, g->mass, d);
      for (int j = 0; j < 6; j++) total[j] = total[j] + rotated[j] + shift[j];
    }
    inertia_principal(b.iquat, b.inertia, total);
    if (b.inertia[2] < kEps) {
      fail(b.node, describe(b.node) + ": inertia from geoms must have positive eigenvalues");
    }
  }
}

// mjCJoint::Compile; returns the joint's number of dofs
int MjcfReader::compile_joint(JointRec& j) {
  JointSpec& s = j.s;
  std::string what = describe(j.node);
  if (s.frictionloss != 0) {
    fail(j.node, what + ": frictionloss is not supported (no dry friction)");
  }
  if (s.springdamper[0] != 0 || s.springdamper[1] != 0) {
    fail(j.node, what + ": springdamper is not supported");
  }
  if (s.stiffness[1] != 0 || s.stiffness[2] != 0 || s.damping[1] != 0 || s.damping[2] != 0) {
    fail(j.node, what + ": polynomial stiffness or damping is not supported");
  }
  if (s.actgravcomp) fail(j.node, what + ": actuatorgravcomp is not supported");

  // limits: a free joint has none
  bool limited = s.type != kJointFree && resolve_limited(j.node, s.limited, s.range, "");
  s.limited = limited ? kLimitedTrue : kLimitedFalse;
  if (limited) {
    if (s.range[0] >= s.range[1] && s.type != kJointBall) {
      fail(j.node, what + ": range[0] must be smaller than range[1]");
    }
    if (s.type == kJointBall) {
      // the cone limit of a ball joint has no constraint row yet; refuse rather than ignore
      fail(j.node, what + ": limits of ball joints are not supported");
    }
    if (compiler_.degree && (s.type == kJointHinge || s.type == kJointBall)) {
      if (s.range[0] != 0) s.range[0] *= kPi / 180.0;
      if (s.range[1] != 0) s.range[1] *= kPi / 180.0;
    }
  }
  if ((s.type == kJointHinge || s.type == kJointSlide) &&
      resolve_limited(j.node, s.actfrclimited, s.actfrcrange, "actuatorfrc")) {
    fail(j.node, what + ": actuator force limits are not supported");
  }

  // axis (rotated by an enclosing frame) and anchor
  if (s.type == kJointFree || s.type == kJointBall) {
    s.axis[0] = s.axis[1] = 0;
    s.axis[2] = 1;
  } else if (j.frame) {
    compile_frame(*j.frame);
    double axis[3] = {s.axis[0], s.axis[1], s.axis[2]};
    rot_vec_quat(s.axis, axis, j.frame->quat);
  }
  if (normalize(s.axis, 3) < kEps) fail(j.node, what + ": axis is too small");
  if (s.type == kJointFree) {
    s.pos[0] = s.pos[1] = s.pos[2] = 0;
  } else if (j.frame) {
    double qunit[4] = {1, 0, 0, 0};
    frame_accum_child(j.frame->pos, j.frame->quat, s.pos, qunit);
  }

  // reference angles in radians
  if (s.type == kJointHinge && compiler_.degree) {
    s.ref *= kPi / 180.0;
    s.springref *= kPi / 180.0;
  }
  return joint_nv(s.type);
}

// mjCBody::Compile
void MjcfReader::compile_body(int id) {
  BodyRec& b = bodies_[id];
  std::string what = describe(b.node);
  static_[id] = id == 0 || (static_[b.parent] && b.joints.empty());

  // body and inertial orientations
  normalize(b.quat, 4);
  normalize(b.iquat, 4);
  if (const char* err = resolve_orientation(b.quat, compiler_, b.alt)) {
    fail(b.node, what + ": orientation error '" + err + "'");
  }
  if (defined(b.fullinertia[0])) {
    inertia_principal(b.iquat, b.inertia, b.fullinertia);
    if (b.inertia[2] < kEps) fail(b.node, what + ": fullinertia must be positive definite");
  }
  if (const char* err = resolve_orientation(b.iquat, compiler_, b.ialt)) {
    fail(b.node, what + ": inertial orientation error '" + err + "'");
  }

  // geoms, then the inertial frame from them unless given (inertiafromgeom="auto") or always
  for (GeomRec& g : b.geoms) {
    g.infer = id > 0 && (!b.explicit_inertial || compiler_.inertiafromgeom == kLimitedTrue) &&
              g.s.group >= compiler_.inertiagrouprange[0] &&
              g.s.group <= compiler_.inertiagrouprange[1];
    compile_geom(g, static_[id]);
  }
  if (id > 0 && (compiler_.inertiafromgeom == kLimitedTrue ||
                 (!defined(b.ipos[0]) && compiler_.inertiafromgeom == kLimitedAuto))) {
    inertia_from_geoms(b);
  }

  // no inertial frame: MuJoCo copies the body's own pose into it
  if (!defined(b.ipos[0])) {
    copy(b.ipos, b.pos, 3);
    copy(b.iquat, b.quat, 4);
  }

  // bounds and physical validity of mass and inertia
  if (id > 0) {
    b.mass = std::max(b.mass, compiler_.boundmass);
    for (double& i : b.inertia) i = std::max(i, compiler_.boundinertia);
    if (b.mass < 0 || b.inertia[0] < 0 || b.inertia[1] < 0 || b.inertia[2] < 0) {
      fail(b.node, what + ": mass and inertia cannot be negative");
    }
    const double* I = b.inertia;
    if (I[0] + I[1] < I[2] || I[0] + I[2] < I[1] || I[1] + I[2] < I[0]) {
      if (!compiler_.balanceinertia) {
        fail(b.node, what + ": inertia must satisfy A + B >= C; use balanceinertia to fix");
      }
      b.inertia[0] = b.inertia[1] = b.inertia[2] = (I[0] + I[1] + I[2]) / 3.0;
    }
  }
  if (b.frame) {
    compile_frame(*b.frame);
    frame_accum_child(b.frame->pos, b.frame->quat, b.pos, b.quat);
  }

  // joints
  int dofs = 0, nfree = 0;
  bool ball = false;
  for (JointRec& j : b.joints) {
    dofs += compile_joint(j);
    nfree += j.s.type == kJointFree;
    if ((j.s.type == kJointBall || j.s.type == kJointHinge) && ball) {
      fail(j.node, what + ": a ball joint cannot be followed by a rotation");
    }
    ball |= j.s.type == kJointBall;
  }
  if (dofs > 6) fail(b.node, what + ": more than 6 dofs");
  if (nfree > 0 && b.joints.size() > 1) {
    fail(b.joints.front().node, what + ": a free joint can only appear by itself");
  }
  if (nfree > 0 && b.parent != 0) {
    fail(b.joints.front().node,
         what + ": a free joint is only allowed in a body that is a child of the world");
  }
}

// mjCModel::CheckBodyMassInertia: a moving body needs mass and inertia, its own or that of a
// child welded to it
bool MjcfReader::has_mass_and_inertia(int id) const {
  const BodyRec& b = bodies_[id];
  if (b.mass >= kMinVal && b.inertia[0] >= kMinVal && b.inertia[1] >= kMinVal &&
      b.inertia[2] >= kMinVal) {
    return true;
  }
  for (int c : b.children) {
    if (bodies_[c].joints.empty() && has_mass_and_inertia(c)) return true;
  }
  return false;
}

template <typename T>
void append(std::vector<T>& dst, const T* src, int n) {
  dst.insert(dst.end(), src, src + n);
}

// Pass 2: every body in tree order (parents first), then the check that moving bodies have mass
void MjcfReader::compile() {
  static_.assign(bodies_.size(), false);
  for (int i = 0; i < static_cast<int>(bodies_.size()); i++) compile_body(i);
  for (int i = 1; i < static_cast<int>(bodies_.size()); i++) {
    if (!bodies_[i].joints.empty() && !has_mass_and_inertia(i)) {
      fail(bodies_[i].node, describe(bodies_[i].node) +
                                ": mass and inertia of moving bodies must be larger than 1e-15");
    }
  }
}

// the index of each named element, names unique per kind; tendons name known joints
MjcfReader::NameIndex MjcfReader::index_names() const {
  std::vector<const BodyRec*> body_recs;
  std::vector<const JointRec*> joint_recs;
  std::vector<const GeomRec*> geom_recs;
  for (const BodyRec& b : bodies_) {
    body_recs.push_back(&b);
    for (const JointRec& j : b.joints) joint_recs.push_back(&j);
    for (const GeomRec& g : b.geoms) geom_recs.push_back(&g);
  }
  std::vector<const ActuatorRec*> actuator_recs;
  for (const ActuatorRec& a : actuators_) actuator_recs.push_back(&a);
  std::vector<const TendonRec*> tendon_recs;
  for (const TendonRec& t : tendons_) tendon_recs.push_back(&t);
  auto name_index = [&](const auto& recs) {
    std::unordered_map<std::string, int> index;
    for (size_t i = 0; i < recs.size(); i++) {
      if (recs[i]->name.empty()) continue;
      if (!index.emplace(recs[i]->name, static_cast<int>(i)).second) {
        fail(recs[i]->node, describe(recs[i]->node) + ": repeated name");
      }
    }
    return index;
  };
  NameIndex names;
  names.body = name_index(body_recs);
  names.joint = name_index(joint_recs);
  name_index(geom_recs);
  name_index(actuator_recs);
  names.tendon = name_index(tendon_recs);
  for (const TendonRec& t : tendons_) {
    for (const auto& [name, coef] : t.joints) {
      if (!names.joint.count(name))
        fail(t.node, describe(t.node) + ": unknown joint '" + name + "'");
    }
  }
  return names;
}

// bodies, their joints and dofs, their geoms
void MjcfReader::assemble_tree() {
  Model& m = model_;
  for (int i = 0; i < static_cast<int>(bodies_.size()); i++) {
    const BodyRec& b = bodies_[i];
    m.body_parentid.push_back(i == 0 ? 0 : b.parent);
    append(m.body_pos, b.pos, 3);
    append(m.body_quat, b.quat, 4);
    append(m.body_ipos, b.ipos, 3);
    append(m.body_iquat, b.iquat, 4);
    m.body_mass.push_back(b.mass);
    append(m.body_inertia, b.inertia, 3);
    m.body_names.push_back(b.name);
    for (const JointRec& j : b.joints) assemble_joint(j, i);
    for (const GeomRec& g : b.geoms) {
      const GeomSpec& s = g.s;
      m.geom_type.push_back(s.type);
      m.geom_bodyid.push_back(i);
      m.geom_contype.push_back(contact_disabled_ ? 0 : s.contype);
      m.geom_conaffinity.push_back(contact_disabled_ ? 0 : s.conaffinity);
      m.geom_condim.push_back(s.condim);
      append(m.geom_size, s.size, 3);
      append(m.geom_pos, s.pos, 3);
      append(m.geom_quat, s.quat, 4);
      append(m.geom_friction, s.friction, 3);
      m.geom_names.push_back(g.name);
    }
  }
}

// a joint of body `body`, its coordinates' reference and spring poses and its dofs
void MjcfReader::assemble_joint(const JointRec& j, int body) {
  Model& m = model_;
  const JointSpec& s = j.s;
  m.jnt_type.push_back(s.type);
  m.jnt_bodyid.push_back(body);
  m.jnt_limited.push_back(limit_disabled_ ? 0 : s.limited);
  append(m.jnt_pos, s.pos, 3);
  append(m.jnt_axis, s.axis, 3);
  append(m.jnt_range, s.range, 2);
  m.jnt_stiffness.push_back(spring_disabled_ ? 0 : s.stiffness[0]);
  m.jnt_names.push_back(j.name);
  if (s.type == kJointFree) {
    // the body's pose; the spring reference is the same
    const BodyRec& b = bodies_[body];
    for (auto* q : {&m.qpos0, &m.qpos_spring}) {
      append(*q, b.pos, 3);
      append(*q, b.quat, 4);
    }
  } else if (s.type == kJointBall) {
    for (auto* q : {&m.qpos0, &m.qpos_spring}) q->insert(q->end(), {1.0, 0.0, 0.0, 0.0});
  } else {
    m.qpos0.push_back(s.ref);
    m.qpos_spring.push_back(s.springref);
  }
  for (int d = 0; d < joint_nv(s.type); d++) {
    m.dof_damping.push_back(damper_disabled_ ? 0 : s.damping[0]);
    m.dof_armature.push_back(s.armature);
  }
}

// contact exclusions, by body name
void MjcfReader::assemble_excludes(const NameIndex& names) {
  for (const auto& [node, pair] : excludes_) {
    for (const std::string& name : {pair.first, pair.second}) {
      if (!names.body.count(name)) fail(node, "exclude: unknown body '" + name + "'");
    }
    model_.exclude_bodies.push_back(names.body.at(pair.first));
    model_.exclude_bodies.push_back(names.body.at(pair.second));
  }
}

// Actuators: motors on a joint, or on a fixed tendon that moves a single joint (then the
// tendon's coefficient multiplies the gear). Control limits; force limits, actuator damping,
// armature and delay are not supported.
void MjcfReader::assemble_actuators(const NameIndex& names) {
  Model& m = model_;
  for (const ActuatorRec& act : actuators_) {
    const ActuatorSpec& s = act.s;
    std::string what = describe(act.node);
    auto [joint, coef] = actuated_joint(act, names);
    if (m.jnt_type[joint] == kJointFree || m.jnt_type[joint] == kJointBall) {
      fail(act.node, what + ": motors on free or ball joints are not supported");
    }
    if (resolve_limited(act.node, s.forcelimited, s.forcerange, "force")) {
      fail(act.node, what + ": force limits (forcerange) are not supported");
    }
    bool ctrllimited = resolve_limited(act.node, s.ctrllimited, s.ctrlrange, "ctrl");
    if (ctrllimited && s.ctrlrange[0] >= s.ctrlrange[1]) {
      fail(act.node, what + ": invalid control range");
    }
    if (!all_zero(s.damping, 3) || s.armature != 0 || s.delay != 0) {
      fail(act.node, what + ": actuator damping, armature and delay are not supported");
    }
    m.actuator_trnid.push_back(joint);
    m.actuator_ctrllimited.push_back(ctrllimited && !clampctrl_disabled_ ? 1 : 0);
    m.actuator_gear.push_back(s.gear[0] * coef);
    append(m.actuator_ctrlrange, s.ctrlrange, 2);
    m.actuator_names.push_back(act.name);
  }
}

// the joint an actuator moves and the coefficient of its transmission
std::pair<int, double> MjcfReader::actuated_joint(const ActuatorRec& act,
                                                  const NameIndex& names) const {
  std::string what = describe(act.node);
  if (!act.joint.empty()) {
    auto it = names.joint.find(act.joint);
    if (it == names.joint.end()) fail(act.node, what + ": unknown joint '" + act.joint + "'");
    return {it->second, 1.0};
  }
  if (act.tendon.empty()) fail(act.node, what + ": missing transmission target (joint or tendon)");
  auto it = names.tendon.find(act.tendon);
  if (it == names.tendon.end()) fail(act.node, what + ": unknown tendon '" + act.tendon + "'");
  const TendonRec& t = tendons_[it->second];
  int nonzero = 0, joint = -1;
  double coef = 1;
  for (const auto& [name, c] : t.joints) {
    if (c == 0) continue;
    nonzero++;
    joint = names.joint.at(name);  // checked by index_names
    coef = c;
  }
  if (t.spatial || nonzero != 1) {
    fail(act.node, what + ": actuation through tendon '" + act.tendon +
                       "' is not supported (only a fixed tendon moving a single joint)");
  }
  return {joint, coef};
}

// settotalmass rescales every body's mass and inertia (mj_setTotalmass)
void MjcfReader::apply_total_mass() {
  if (!(compiler_.settotalmass > 0)) return;
  Model& m = model_;
  double total = 0;
  for (size_t i = 1; i < m.body_mass.size(); i++) total += m.body_mass[i];
  double scale = std::max(kMinVal, compiler_.settotalmass / std::max(kMinVal, total));
  for (size_t i = 1; i < m.body_mass.size(); i++) {
    m.body_mass[i] *= scale;
    for (int k = 0; k < 3; k++) m.body_inertia[3 * i + k] *= scale;
  }
}

// Pass 3: the flat arrays of the Model from the compiled records, then its derived arrays and
// checks
Model MjcfReader::assemble() {
  NameIndex names = index_names();
  Model& m = model_;
  m.opt.gravity = gravity_disabled_ ? std::array<double, 3>{0, 0, 0} : m.opt.gravity;
  assemble_tree();
  assemble_excludes(names);
  assemble_actuators(names);
  apply_total_mass();
  m.ignored = ignored_.list();
  m.finalize();
  m.validate();
  return std::move(m);
}

}  // namespace

Model load_mjcf(const std::string& path) {
  return MjcfReader().read_file(path);
}

Model load_mjcf_string(const std::string& xml, const std::string& dir) {
  return MjcfReader().read_string(xml, dir);
}

}  // namespace phx
