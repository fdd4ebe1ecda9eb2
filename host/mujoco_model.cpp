// from_mujoco: a compiled mjModel into a phx::Model (see host/mujoco_model.h).
//
// The arrays are copied as MuJoCo compiled them; what Phalanx does not simulate is refused with
// the messages of the MJCF loader (host/mjcf.cpp), and what it drops harmlessly is listed in
// Model::ignored. Meshes become their convex hulls from mesh_graph (qhull's hull, hull-local
// vertex ids) and the mesh polygons (whose vertex ids MuJoCo stores local to the mesh's vertex
// array: mapped here onto hull ids, and ordered counter-clockwise about the outward normal).
#include "host/mujoco_model.h"

#include <mujoco/mujoco.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "host/ignored_list.h"
#include "phalanx/collision/types.h"

namespace phx {

const int kMujocoHeaderVersion = mjVERSION_HEADER;

namespace {

// MuJoCo's defaults of the solver parameters (mj_defaultSolRefImp)
constexpr double kSolref[mjNREF] = {0.02, 1};
constexpr double kSolimp[mjNIMP] = {0.9, 0.95, 0.001, 0.5, 2};

bool all_zero(const double* v, int n) {
  for (int i = 0; i < n; i++)
    if (v[i] != 0) return false;
  return true;
}

bool equal(const double* a, const double* b, int n) {
  for (int i = 0; i < n; i++)
    if (a[i] != b[i]) return false;
  return true;
}

class Converter {
 public:
  explicit Converter(const mjModel* m) : m_(m) {}
  Model convert();

 private:
  const mjModel* m_;
  Model out_;
  IgnoredList ignored_;
  bool contact_disabled_ = false, limit_disabled_ = false, spring_disabled_ = false;
  bool damper_disabled_ = false, gravity_disabled_ = false, clampctrl_disabled_ = false;
  bool frictionloss_disabled_ = false, equality_disabled_ = false;
  std::vector<bool> hull_missing_;  // meshes MuJoCo computed no convex hull for

  // a name from mjModel's names buffer, "" when none
  std::string name(const int* adr, long id) const {
    if (!adr || adr[id] < 0 || adr[id] >= m_->nnames) return "";
    return std::string(m_->names + adr[id]);
  }
  // "joint 'hip' (id 3)", or "joint 3" without a name
  std::string describe(const char* kind, const int* adr, long id) const {
    std::string n = name(adr, id), s = kind, number = std::to_string(id);
    if (n.empty()) {
      s.append(" ").append(number);
    } else {
      s.append(" '").append(n).append("' (id ").append(number).append(")");
    }
    return s;
  }
  [[noreturn]] void fail(const std::string& what, const std::string& message) const {
    throw std::runtime_error("from_mujoco: " + what + ": " + message);
  }
  // count of a kind that is ignored as a whole, recorded with its first element
  void ignore_all(const char* kind, const int* adr, long count) {
    if (count > 0) ignored_.add(kind, "first: " + describe(kind, adr, 0), count);
  }

  void options();
  void global_refusals();
  void bodies();
  void joints();
  void geoms();
  void meshes();
  void hfields();
  void sites();
  void tendons();
  void equalities();
  void actuators();
  void excludes();
  void ignored_elements();
};

int to_int(mjtSize n, const char* what) {
  if (n < 0 || n > std::numeric_limits<int>::max())
    throw std::invalid_argument(std::string("from_mujoco: ") + what + " out of range");
  return static_cast<int>(n);
}

void Converter::options() {
  const mjOption& o = m_->opt;
  int dis = o.disableflags;
  bool constraint = dis & mjDSBL_CONSTRAINT;
  contact_disabled_ = constraint || (dis & mjDSBL_CONTACT);
  limit_disabled_ = constraint || (dis & mjDSBL_LIMIT);
  frictionloss_disabled_ = constraint || (dis & mjDSBL_FRICTIONLOSS);
  equality_disabled_ = constraint || (dis & mjDSBL_EQUALITY);
  spring_disabled_ = dis & mjDSBL_SPRING;
  damper_disabled_ = dis & mjDSBL_DAMPER;
  gravity_disabled_ = dis & mjDSBL_GRAVITY;
  clampctrl_disabled_ = dis & mjDSBL_CLAMPCTRL;
  if (dis & mjDSBL_ACTUATION) fail("option", "flag actuation=\"disable\" is not supported");
  if (dis & mjDSBL_FILTERPARENT) fail("option", "flag filterparent=\"disable\" is not supported");
  const std::pair<int, const char*> ignored_flags[] = {
      {mjDSBL_EQUALITY, "equality"},   {mjDSBL_FRICTIONLOSS, "frictionloss"},
      {mjDSBL_WARMSTART, "warmstart"}, {mjDSBL_REFSAFE, "refsafe"},
      {mjDSBL_SENSOR, "sensor"},       {mjDSBL_MIDPHASE, "midphase"},
      {mjDSBL_EULERDAMP, "eulerdamp"}, {mjDSBL_AUTORESET, "autoreset"},
      {mjDSBL_NATIVECCD, "nativeccd"}, {mjDSBL_ISLAND, "island"},
      {mjDSBL_MULTICCD, "multiccd"}};
  for (auto [bit, flag] : ignored_flags)
    if (dis & bit) ignored_.add(std::string("flag@") + flag + "=\"disable\"", "option");
  if (o.enableflags) ignored_.add("option enableflags " + std::to_string(o.enableflags), "option");
  if (o.disableactuator) ignored_.add("option@actuatorgroupdisable", "option");

  out_.opt.timestep = o.timestep;
  for (int i = 0; i < 3; i++) out_.opt.gravity[i] = gravity_disabled_ ? 0.0 : o.gravity[i];
  out_.opt.contact = !contact_disabled_;
  out_.opt.limit = !limit_disabled_;
  out_.opt.ccd_iterations = std::clamp(o.ccd_iterations, 1, kMaxCcdIterations);
  if (o.ccd_iterations != out_.opt.ccd_iterations)
    ignored_.add("option@ccd_iterations=\"" + std::to_string(o.ccd_iterations) + "\", taken as " +
                     std::to_string(out_.opt.ccd_iterations),
                 "option");
  out_.opt.ccd_tolerance = o.ccd_tolerance;
  // Euler and implicitfast are Phalanx's integrators; implicit differs from implicitfast by the
  // Coriolis forces' velocity slope, RK4 is not implemented
  out_.opt.integrator = kIntegratorEuler;
  if (o.integrator == mjINT_IMPLICITFAST || o.integrator == mjINT_IMPLICIT)
    out_.opt.integrator = kIntegratorImplicitFast;
  if (o.integrator == mjINT_IMPLICIT)
    ignored_.add(
        "option@integrator=\"implicit\", substituted by implicitfast (the Coriolis "
        "forces stay explicit)",
        "option");
  if (o.integrator == mjINT_RK4)
    ignored_.add("option@integrator=\"RK4\", substituted by semi-implicit Euler", "option");
  // the medium (fluid.h): MuJoCo applies no fluid force with springs and dampers disabled, nor
  // a negative density or viscosity
  bool passive = !(spring_disabled_ && damper_disabled_);
  out_.opt.density = passive ? std::max(o.density, 0.0) : 0.0;
  out_.opt.viscosity = passive ? std::max(o.viscosity, 0.0) : 0.0;
  for (int i = 0; i < 3; i++) out_.opt.wind[i] = o.wind[i];
}

void Converter::global_refusals() {
  const mjModel* m = m_;
  if (m->npair > 0)
    fail(describe("contact pair", m->name_pairadr, 0),
         "explicit contact pairs (<pair>) are not supported");
  if (m->nflex > 0) fail("flex 0", "deformable objects (flex) are not supported");
  if (m->nplugin > 0) fail("plugin 0", "plugins are not supported");
  if (m->nu != m->nactuator)
    fail("actuator", "actuators with several controls (nu = " + std::to_string(m->nu) +
                         ", nactuator = " + std::to_string(m->nactuator) + ") are not supported");
}

void Converter::bodies() {
  const mjModel* m = m_;
  Model& o = out_;
  for (long b = 0; b < m->nbody; b++) {
    std::string what = describe("body", m->name_bodyadr, b);
    if (m->body_gravcomp[b] != 0) fail(what, "gravity compensation is not supported");
    if (m->body_plugin[b] >= 0) fail(what, "plugins are not supported");
    o.body_parentid.push_back(m->body_parentid[b]);
    o.body_pos.insert(o.body_pos.end(), m->body_pos + 3 * b, m->body_pos + 3 * b + 3);
    o.body_quat.insert(o.body_quat.end(), m->body_quat + 4 * b, m->body_quat + 4 * b + 4);
    o.body_ipos.insert(o.body_ipos.end(), m->body_ipos + 3 * b, m->body_ipos + 3 * b + 3);
    o.body_iquat.insert(o.body_iquat.end(), m->body_iquat + 4 * b, m->body_iquat + 4 * b + 4);
    o.body_mass.push_back(m->body_mass[b]);
    o.body_inertia.insert(o.body_inertia.end(), m->body_inertia + 3 * b,
                          m->body_inertia + 3 * b + 3);
    o.body_names.push_back(name(m->name_bodyadr, b));
    o.body_mocapid.push_back(m->body_mocapid[b]);
  }
  // a mocap body's pose starts where MuJoCo's mj_resetData puts it: its offset from the world
  o.mocap_pos.resize(3 * static_cast<size_t>(m->nmocap));
  o.mocap_quat.resize(4 * static_cast<size_t>(m->nmocap));
  for (long b = 0; b < m->nbody; b++) {
    if (const int id = m->body_mocapid[b]; id >= 0) {
      std::copy_n(m->body_pos + 3 * b, 3, &o.mocap_pos[3 * id]);
      std::copy_n(m->body_quat + 4 * b, 4, &o.mocap_quat[4 * id]);
    }
  }
}

void Converter::joints() {
  const mjModel* m = m_;
  Model& o = out_;
  for (long j = 0; j < m->njnt; j++) {
    std::string what = describe("joint", m->name_jntadr, j);
    int type = m->jnt_type[j];
    int nq = joint_nq(type), nv = joint_nv(type);
    int qadr = m->jnt_qposadr[j], dadr = m->jnt_dofadr[j];
    if (type < mjJNT_FREE || type > mjJNT_HINGE) fail(what, "unknown joint type");
    // what changes the dynamics and Phalanx lacks (the MJCF loader's refusals)
    for (int d = dadr; d < dadr + nv; d++) {
      if (!all_zero(m->dof_dampingpoly + mjNPOLY * d, mjNPOLY))
        fail(what, "polynomial stiffness or damping is not supported");
    }
    if (!all_zero(m->jnt_stiffnesspoly + mjNPOLY * j, mjNPOLY))
      fail(what, "polynomial stiffness or damping is not supported");
    if (m->jnt_plasticadr[j] >= 0 || m->jnt_springyield[j] != 0)
      fail(what, "plasticity (springyield) is not supported");
    if (m->jnt_actgravcomp[j]) fail(what, "actuatorgravcomp is not supported");
    if (m->jnt_actfrclimited[j]) fail(what, "actuator force limits are not supported");
    // what the MJCF loader ignores
    if (m->jnt_margin[j] != 0) ignored_.add("joint@margin", "first: " + what);
    if (m->jnt_limited[j] && (!equal(m->jnt_solref + mjNREF * j, kSolref, mjNREF) ||
                              !equal(m->jnt_solimp + mjNIMP * j, kSolimp, mjNIMP)))
      ignored_.add("joint@solreflimit/solimplimit", "first: " + what);

    o.jnt_type.push_back(type);
    o.jnt_bodyid.push_back(m->jnt_bodyid[j]);
    o.jnt_limited.push_back(limit_disabled_ || type == mjJNT_FREE ? 0 : m->jnt_limited[j] ? 1 : 0);
    o.jnt_pos.insert(o.jnt_pos.end(), m->jnt_pos + 3 * j, m->jnt_pos + 3 * j + 3);
    o.jnt_axis.insert(o.jnt_axis.end(), m->jnt_axis + 3 * j, m->jnt_axis + 3 * j + 3);
    o.jnt_range.insert(o.jnt_range.end(), m->jnt_range + 2 * j, m->jnt_range + 2 * j + 2);
    o.jnt_stiffness.push_back(spring_disabled_ ? 0.0 : m->jnt_stiffness[j]);
    o.jnt_names.push_back(name(m->name_jntadr, j));
    // MuJoCo orders qpos and dofs by joint: Model::finalize recomputes the same addresses
    o.qpos0.insert(o.qpos0.end(), m->qpos0 + qadr, m->qpos0 + qadr + nq);
    o.qpos_spring.insert(o.qpos_spring.end(), m->qpos_spring + qadr, m->qpos_spring + qadr + nq);
    for (int d = dadr; d < dadr + nv; d++) {
      o.dof_armature.push_back(m->dof_armature[d]);
      o.dof_damping.push_back(damper_disabled_ ? 0.0 : m->dof_damping[d]);
      o.dof_frictionloss.push_back(frictionloss_disabled_ ? 0.0 : m->dof_frictionloss[d]);
    }
  }
}

void Converter::geoms() {
  const mjModel* m = m_;
  Model& o = out_;
  for (long g = 0; g < m->ngeom; g++) {
    std::string what = describe("geom", m->name_geomadr, g);
    int type = m->geom_type[g];
    if (type == mjGEOM_SDF) fail(what, "geom type 'sdf' is not supported");
    if (type < mjGEOM_PLANE || type > mjGEOM_MESH)
      fail(what, "geom type " + std::to_string(type) + " is not supported");
    if (m->geom_plugin[g] >= 0) fail(what, "plugins are not supported");
    if (!all_zero(m->geom_surfacevel + 6 * g, 6)) fail(what, "surfacevel is not supported");
    if (m->geom_adhesion[g] != 0) fail(what, "adhesion is not supported");
    if (m->geom_fluid[mjNFLUID * g] != 0) fail(what, "fluidshape (fluid forces) is not supported");
    // contact parameters the MJCF loader ignores, when not MuJoCo's defaults
    if (m->geom_priority[g] != 0) ignored_.add("geom@priority", "first: " + what);
    if (m->geom_solmix[g] != 1) ignored_.add("geom@solmix", "first: " + what);
    if (!equal(m->geom_solref + mjNREF * g, kSolref, mjNREF))
      ignored_.add("geom@solref", "first: " + what);
    if (!equal(m->geom_solimp + mjNIMP * g, kSolimp, mjNIMP))
      ignored_.add("geom@solimp", "first: " + what);
    if (m->geom_margin[g] != 0) ignored_.add("geom@margin", "first: " + what);
    if (m->geom_gap[g] != 0) ignored_.add("geom@gap", "first: " + what);

    int dataid = -1;
    if (type == mjGEOM_MESH) {
      int k = m->geom_dataid[g];
      if (k < 0 || k >= m->nmesh) fail(what, "mesh geom without a mesh");
      dataid = k;
      if (hull_missing_[k] && !contact_disabled_ &&
          (m->geom_contype[g] != 0 || m->geom_conaffinity[g] != 0))
        fail(what, "its " + describe("mesh", m->name_meshadr, k) +
                       " has no convex hull (MuJoCo's compiler computed none)");
    } else if (type == mjGEOM_HFIELD) {
      dataid = m->geom_dataid[g];
      if (dataid < 0 || dataid >= m->nhfield) fail(what, "hfield geom without a height field");
    }
    o.geom_type.push_back(type);
    o.geom_bodyid.push_back(m->geom_bodyid[g]);
    o.geom_contype.push_back(contact_disabled_ ? 0 : m->geom_contype[g]);
    o.geom_conaffinity.push_back(contact_disabled_ ? 0 : m->geom_conaffinity[g]);
    o.geom_condim.push_back(m->geom_condim[g]);
    o.geom_size.insert(o.geom_size.end(), m->geom_size + 3 * g, m->geom_size + 3 * g + 3);
    o.geom_pos.insert(o.geom_pos.end(), m->geom_pos + 3 * g, m->geom_pos + 3 * g + 3);
    o.geom_quat.insert(o.geom_quat.end(), m->geom_quat + 4 * g, m->geom_quat + 4 * g + 4);
    o.geom_friction.insert(o.geom_friction.end(), m->geom_friction + 3 * g,
                           m->geom_friction + 3 * g + 3);
    o.geom_dataid.push_back(dataid);
    // drawn, and so seen by rays (MuJoCo's ray_eliminate): its material's alpha, else its own
    int mat = m->geom_matid[g];
    o.geom_visible.push_back((mat >= 0 ? m->mat_rgba[4 * mat + 3] : m->geom_rgba[4 * g + 3]) != 0);
    o.geom_names.push_back(name(m->name_geomadr, g));
  }
}

// Append one convex hull: vertices, each vertex's neighbours, and faces (outward normal and
// vertex ids), the faces reordered counter-clockwise about their normals where listed clockwise.
void append_hull(Model& o, const std::vector<double>& vert,
                 const std::vector<std::vector<int>>& adj,
                 const std::vector<std::array<double, 3>>& normals,
                 std::vector<std::vector<int>> faces) {
  int base = static_cast<int>(o.mesh_vert.size() / 3);
  o.mesh_vertadr.push_back(base);
  o.mesh_vertnum.push_back(static_cast<int>(vert.size() / 3));
  o.mesh_vert.insert(o.mesh_vert.end(), vert.begin(), vert.end());
  for (const std::vector<int>& a : adj) {
    o.mesh_vertadjadr.push_back(static_cast<int>(o.mesh_vertadj.size()));
    o.mesh_vertadjnum.push_back(static_cast<int>(a.size()));
    o.mesh_vertadj.insert(o.mesh_vertadj.end(), a.begin(), a.end());
  }
  o.mesh_polyadr.push_back(static_cast<int>(o.mesh_polyvertadr.size()));
  o.mesh_polynum.push_back(static_cast<int>(faces.size()));
  for (size_t f = 0; f < faces.size(); f++) {
    std::vector<int>& ids = faces[f];
    const double* n = normals[f].data();
    // Newell's normal of the face as listed, against the outward normal
    double nw[3] = {0, 0, 0};
    for (size_t i = 0; i < ids.size(); i++) {
      const double* a = &vert[3 * size_t(ids[i])];
      const double* b = &vert[3 * size_t(ids[(i + 1) % ids.size()])];
      nw[0] += (a[1] - b[1]) * (a[2] + b[2]);
      nw[1] += (a[2] - b[2]) * (a[0] + b[0]);
      nw[2] += (a[0] - b[0]) * (a[1] + b[1]);
    }
    if (nw[0] * n[0] + nw[1] * n[1] + nw[2] * n[2] < 0) std::reverse(ids.begin(), ids.end());
    o.mesh_polynormal.insert(o.mesh_polynormal.end(), n, n + 3);
    o.mesh_polyvertadr.push_back(static_cast<int>(o.mesh_polyvert.size()));
    o.mesh_polyvertnum.push_back(static_cast<int>(ids.size()));
    o.mesh_polyvert.insert(o.mesh_polyvert.end(), ids.begin(), ids.end());
  }
}

// Each mesh's convex hull. mesh_graph at mesh_graphadr holds [numvert, numface,
// vert_edgeadr[numvert], vert_globalid[numvert], edge_localid[...] (-1 terminated neighbour lists,
// hull ids), face_globalid[3 numface]]; vert_globalid maps hull ids to the mesh's vertices. The
// polygons (mesh_poly*) are the hull's faces merged into planar polygons, their vertex ids
// local to the mesh's vertex array. MuJoCo computes no hull for a mesh that only non-colliding
// geoms use: its bounding box stands in (geoms() refuses a colliding geom on such a mesh), so
// that mesh and geom ids stay MuJoCo's.
void Converter::meshes() {
  const mjModel* m = m_;
  Model& o = out_;
  hull_missing_.assign(m->nmesh, false);
  for (long k = 0; k < m->nmesh; k++) {
    std::string what = describe("mesh", m->name_meshadr, k);
    int vertadr = m->mesh_vertadr[k], vertnum = m->mesh_vertnum[k];
    const float* mv = m->mesh_vert + 3 * static_cast<size_t>(vertadr);
    int graphadr = m->mesh_graphadr[k];
    std::vector<double> vert;
    std::vector<std::vector<int>> adj, faces;
    std::vector<std::array<double, 3>> normals;
    if (graphadr < 0) {
      hull_missing_[k] = true;
      ignored_.add(
          "convex hull of a mesh only non-colliding geoms use (MuJoCo computed none; its "
          "bounding box stands in)",
          "first: " + what);
      double lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};
      for (int v = 0; v < vertnum; v++)
        for (int c = 0; c < 3; c++) {
          lo[c] = v == 0 ? mv[3 * v + c] : std::min<double>(lo[c], mv[3 * v + c]);
          hi[c] = v == 0 ? mv[3 * v + c] : std::max<double>(hi[c], mv[3 * v + c]);
        }
      // corner i + 2j + 4k at (x_i, y_j, z_k); its neighbours differ in one bit
      for (int v = 0; v < 8; v++) {
        for (int c = 0; c < 3; c++) vert.push_back((v >> c) & 1 ? hi[c] : lo[c]);
        adj.push_back({v ^ 1, v ^ 2, v ^ 4});
      }
      for (int c = 0; c < 3; c++)
        for (int side = 0; side < 2; side++) {
          int p = 1 << ((c + 1) % 3), q = 1 << ((c + 2) % 3), b = side << c;
          faces.push_back({b, b | p, b | p | q, b | q});
          std::array<double, 3> n{0, 0, 0};
          n[c] = side ? 1 : -1;
          normals.push_back(n);
        }
      append_hull(o, vert, adj, normals, faces);
      continue;
    }
    const int* graph = m->mesh_graph + graphadr;
    int numvert = graph[0];
    const int* edgeadr = graph + 2;
    const int* globalid = graph + 2 + numvert;
    const int* edges = graph + 2 + 2 * numvert;
    if (numvert < 4) fail(what, "its convex hull has " + std::to_string(numvert) + " vertices");
    // hull vertices in hull order, and the mesh vertex -> hull vertex map
    std::vector<int> hull_of(vertnum, -1);
    for (int i = 0; i < numvert; i++) {
      int v = globalid[i];
      if (v < 0 || v >= vertnum)
        throw std::invalid_argument("from_mujoco: " + what + ": hull vertex " + std::to_string(i) +
                                    " refers to vertex " + std::to_string(v) + " of " +
                                    std::to_string(vertnum));
      hull_of[v] = i;
      for (int c = 0; c < 3; c++) vert.push_back(static_cast<double>(mv[3 * v + c]));
      adj.emplace_back();
      for (const int* e = edges + edgeadr[i]; *e >= 0; e++) adj.back().push_back(*e);
    }
    for (int p = m->mesh_polyadr[k]; p < m->mesh_polyadr[k] + m->mesh_polynum[k]; p++) {
      const double* n = m->mesh_polynormal + 3 * p;
      normals.push_back({n[0], n[1], n[2]});
      faces.emplace_back();
      for (int a = m->mesh_polyvertadr[p]; a < m->mesh_polyvertadr[p] + m->mesh_polyvertnum[p];
           a++) {
        int v = m->mesh_polyvert[a];
        int h = v >= 0 && v < vertnum ? hull_of[v] : -1;
        if (h < 0)
          throw std::invalid_argument("from_mujoco: " + what + ": polygon " +
                                      std::to_string(p - m->mesh_polyadr[k]) + " has vertex " +
                                      std::to_string(v) + ", not a vertex of the convex hull");
        faces.back().push_back(h);
      }
    }
    append_hull(o, vert, adj, normals, faces);
  }
}

void Converter::hfields() {
  const mjModel* m = m_;
  Model& o = out_;
  for (long h = 0; h < m->nhfield; h++) {
    std::string what = describe("hfield", m->name_hfieldadr, h);
    const double* size = m->hfield_size + 4 * h;
    for (int c = 0; c < 4; c++)
      if (!(size[c] > 0))
        fail(what, "size[" + std::to_string(c) + "] is " + std::to_string(size[c]) +
                       ", Phalanx needs all four sizes (including the base depth) > 0");
    int nrow = m->hfield_nrow[h], ncol = m->hfield_ncol[h], adr = m->hfield_adr[h];
    o.hfield_size.insert(o.hfield_size.end(), size, size + 4);
    o.hfield_nrow.push_back(nrow);
    o.hfield_ncol.push_back(ncol);
    o.hfield_adr.push_back(static_cast<int>(o.hfield_data.size()));
    for (long i = 0; i < long(nrow) * ncol; i++)
      o.hfield_data.push_back(static_cast<double>(m->hfield_data[adr + i]));
  }
}

// Fixed tendons over hinges and slides and spatial tendons through sites and pulleys, wrapping
// over spheres and cylinders, convert with their springs, dampers, limits and friction loss.
void Converter::tendons() {
  static_assert(int(kWrapSite) == int(mjWRAP_SITE) && int(kWrapPulley) == int(mjWRAP_PULLEY) &&
                    int(kWrapSphere) == int(mjWRAP_SPHERE) &&
                    int(kWrapCylinder) == int(mjWRAP_CYLINDER),
                "Phalanx numbers wrap types as MuJoCo");
  const mjModel* m = m_;
  Model& o = out_;
  for (long t = 0; t < m->ntendon; t++) {
    std::string what = describe("tendon", m->name_tendonadr, t);
    const char* why = nullptr;
    bool limited = m->tendon_limited[t] && !limit_disabled_;
    bool spring = m->tendon_stiffness[t] != 0 && !spring_disabled_;
    bool damper = m->tendon_damping[t] != 0 && !damper_disabled_;
    bool friction = m->tendon_frictionloss[t] != 0 && !frictionloss_disabled_;
    if (m->tendon_actfrclimited[t]) {
      why = "actuator force limits";
    } else if (!all_zero(m->tendon_stiffnesspoly + mjNPOLY * t, mjNPOLY) ||
               !all_zero(m->tendon_dampingpoly + mjNPOLY * t, mjNPOLY)) {
      why = "polynomial stiffness or damping";
    } else if (m->tendon_armature[t] != 0) {
      why = "armature";
    }
    if (why) fail(what, std::string("tendons with ") + why + " are not supported");
    const int adr = m->tendon_adr[t], num = m->tendon_num[t];
    const bool spatial = m->tendon_type[t] != mjTENDON_FIXED;
    const int first = static_cast<int>(o.wrap_objid.size());
    for (int w = adr; w < adr + num; w++) {
      const int id = m->wrap_objid[w];
      if (spatial) {  // Phalanx's WrapType numbers as MuJoCo's mjtWrap
        o.wrap_type.push_back(m->wrap_type[w]);
        o.wrap_objid.push_back(m->wrap_type[w] == mjWRAP_PULLEY ? -1 : id);
      } else {
        if (m->wrap_type[w] != mjWRAP_JOINT ||
            (m->jnt_type[id] != mjJNT_HINGE && m->jnt_type[id] != mjJNT_SLIDE))
          fail(what, "fixed tendons combine hinge and slide joints only");
        o.wrap_type.push_back(kWrapJoint);
        o.wrap_objid.push_back(id);
      }
      o.wrap_prm.push_back(m->wrap_prm[w]);
    }
    o.tendon_type.push_back(spatial ? kTendonSpatial : kTendonFixed);
    o.tendon_adr.push_back(first);
    o.tendon_num.push_back(static_cast<int>(o.wrap_objid.size()) - first);
    o.tendon_limited.push_back(limited ? 1 : 0);
    o.tendon_range.insert(o.tendon_range.end(), m->tendon_range + 2 * t,
                          m->tendon_range + 2 * t + 2);
    o.tendon_length0.push_back(m->tendon_length0[t]);
    o.tendon_stiffness.push_back(spring ? m->tendon_stiffness[t] : 0.0);
    o.tendon_damping.push_back(damper ? m->tendon_damping[t] : 0.0);
    o.tendon_frictionloss.push_back(friction ? m->tendon_frictionloss[t] : 0.0);
    o.tendon_lengthspring.insert(o.tendon_lengthspring.end(), m->tendon_lengthspring + 2 * t,
                                 m->tendon_lengthspring + 2 * t + 2);
  }
}

void Converter::actuators() {
  static_assert(
      int(kGainAffine) == int(mjGAIN_AFFINE) && int(kGainMuscle) == int(mjGAIN_MUSCLE) &&
          int(kBiasAffine) == int(mjBIAS_AFFINE) && int(kBiasMuscle) == int(mjBIAS_MUSCLE) &&
          int(kDynFilterExact) == int(mjDYN_FILTEREXACT) && int(kDynMuscle) == int(mjDYN_MUSCLE),
      "Phalanx numbers gains, biases and dynamics as MuJoCo");
  const mjModel* m = m_;
  Model& o = out_;
  for (long i = 0; i < m->nactuator; i++) {
    std::string what = describe("actuator", m->name_actuatoradr, i);
    if (m->actuator_plugin[i] >= 0) fail(what, "plugins are not supported");
    int dyn = m->actuator_dyntype[i], gaintype = m->actuator_gaintype[i];
    int bias = m->actuator_biastype[i];
    const bool dyn_ok = dyn == mjDYN_NONE || dyn == mjDYN_INTEGRATOR || dyn == mjDYN_FILTER ||
                        dyn == mjDYN_FILTEREXACT || dyn == mjDYN_MUSCLE;
    const bool gain_ok =
        gaintype == mjGAIN_FIXED || gaintype == mjGAIN_AFFINE || gaintype == mjGAIN_MUSCLE;
    const bool bias_ok = bias == mjBIAS_NONE || bias == mjBIAS_AFFINE || bias == mjBIAS_MUSCLE;
    if (!dyn_ok || !gain_ok || !bias_ok) {
      const char* dyns[] = {"none",   "integrator", "filter", "filterexact",
                            "muscle", "dcmotor",    "pid",    "user"};
      const char* gains[] = {"fixed", "affine", "muscle", "dcmotor", "so3", "pid", "user"};
      const char* biases[] = {"none", "affine", "muscle", "dcmotor", "so3", "user"};
      auto str = [](int v, const char* const* names, int n) {
        return v >= 0 && v < n ? std::string(names[v]) : std::to_string(v);
      };
      fail(what,
           "has dyntype " + str(dyn, dyns, 8) + ", gaintype " + str(gaintype, gains, 7) +
               ", biastype " + str(bias, biases, 6) +
               "; supported are dyntype none, integrator, filter, filterexact or muscle with "
               "fixed, affine or muscle gains and no, affine or muscle biases (motor, position, "
               "velocity, intvelocity, damper, muscle, general)");
    }
    if (m->actuator_ctrlnum[i] != 1)
      fail(what, "actuators with several controls are not supported");
    if (dyn != mjDYN_NONE && m->actuator_actnum[i] != 1)
      fail(what, "actuators with " + std::to_string(m->actuator_actnum[i]) +
                     " activations are not supported (one per actuator with dynamics)");
    if (m->actuator_damping[i] != 0 || !all_zero(m->actuator_dampingpoly + mjNPOLY * i, mjNPOLY) ||
        m->actuator_armature[i] != 0 || m->actuator_delay[i] != 0)
      fail(what, "actuator damping, armature and delay are not supported");

    // the joint or tendon moved
    int trntype = kTrnJoint, joint = -1, slider = -1;
    int trn = m->actuator_trntype[i], id = m->actuator_trnid[2 * i];
    if (trn == mjTRN_JOINT || trn == mjTRN_JOINTINPARENT) {
      joint = id;
    } else if (trn == mjTRN_SLIDERCRANK) {
      trntype = kTrnSliderCrank;
      slider = m->actuator_trnid[2 * i + 1];
    } else if (trn == mjTRN_TENDON) {
      trntype = kTrnTendon;
    } else {
      const char* names[] = {"joint", "jointinparent", "slidercrank", "tendon", "site", "body"};
      fail(what, std::string("transmission '") + (trn >= 0 && trn < 6 ? names[trn] : "?") +
                     "' is not supported");
    }
    if (joint >= 0 && (m->jnt_type[joint] == mjJNT_FREE || m->jnt_type[joint] == mjJNT_BALL))
      fail(what, "actuators on free or ball joints are not supported");
    // the parameters the gain and bias types read (MuJoCo ignores the others): affine three,
    // muscle nine
    const double* gain = m->actuator_gainprm + mjNGAIN * i;
    const double* biasprm = m->actuator_biasprm + mjNBIAS * i;
    if (gaintype == mjGAIN_AFFINE && !all_zero(gain + 3, mjNGAIN - 3))
      fail(what, "affine gain parameters beyond gainprm[2] are not supported");
    if (bias == mjBIAS_AFFINE && !all_zero(biasprm + 3, mjNBIAS - 3))
      fail(what, "affine bias parameters beyond biasprm[2] are not supported");
    const int ngain = gaintype == mjGAIN_MUSCLE ? 9 : gaintype == mjGAIN_AFFINE ? 3 : 1;
    const int nbias = bias == mjBIAS_MUSCLE ? 9 : bias == mjBIAS_AFFINE ? 3 : 0;
    int c = m->actuator_ctrladr[i];
    o.actuator_trntype.push_back(trntype);
    o.actuator_trnid.push_back(trntype == kTrnJoint ? joint : id);
    o.actuator_slidersite.push_back(slider);
    o.actuator_cranklength.push_back(trntype == kTrnSliderCrank ? m->actuator_cranklength[i] : 0.0);
    o.actuator_ctrllimited.push_back(m->actuator_ctrllimited[c] && !clampctrl_disabled_ ? 1 : 0);
    o.actuator_gear.push_back(m->actuator_gear[6 * i]);
    o.actuator_ctrlrange.push_back(m->actuator_ctrlrange[2 * c]);
    o.actuator_ctrlrange.push_back(m->actuator_ctrlrange[2 * c + 1]);
    o.actuator_gaintype.push_back(gaintype);  // ActuatorGain and ActuatorBias number as MuJoCo
    o.actuator_biastype.push_back(bias);
    for (int k = 0; k < 9; k++) {
      o.actuator_gainprm.push_back(k < ngain ? gain[k] : 0.0);
      o.actuator_biasprm.push_back(k < nbias ? biasprm[k] : 0.0);
    }
    o.actuator_lengthrange.insert(o.actuator_lengthrange.end(), m->actuator_lengthrange + 2 * i,
                                  m->actuator_lengthrange + 2 * i + 2);
    o.actuator_acc0.push_back(m->actuator_acc0[i]);
    o.actuator_forcelimited.push_back(m->actuator_forcelimited[i] ? 1 : 0);
    o.actuator_forcerange.push_back(m->actuator_forcerange[2 * i]);
    o.actuator_forcerange.push_back(m->actuator_forcerange[2 * i + 1]);
    o.actuator_dyntype.push_back(dyn);
    // a filter's time constant; a muscle's two and its smoothing width
    o.actuator_dynprm.insert(o.actuator_dynprm.end(), m->actuator_dynprm + mjNDYN * i,
                             m->actuator_dynprm + mjNDYN * i + 3);
    o.actuator_actlimited.push_back(m->actuator_actlimited[i] ? 1 : 0);
    o.actuator_actrange.push_back(m->actuator_actrange[2 * i]);
    o.actuator_actrange.push_back(m->actuator_actrange[2 * i + 1]);
    o.actuator_actearly.push_back(m->actuator_actearly[i] ? 1 : 0);
    o.actuator_names.push_back(name(m->name_actuatoradr, i));
  }
}

// exclude_signature = body1 << 16 + body2
void Converter::excludes() {
  for (long e = 0; e < m_->nexclude; e++) {
    int s = m_->exclude_signature[e];
    out_.exclude_bodies.push_back(s >> 16);
    out_.exclude_bodies.push_back(s & 0xFFFF);
  }
}

void Converter::ignored_elements() {
  const mjModel* m = m_;
  ignore_all("camera", m->name_camadr, m->ncam);
  ignore_all("light", m->name_lightadr, m->nlight);
  ignore_all("sensor", m->name_sensoradr, m->nsensor);
  ignore_all("keyframe", m->name_keyadr, m->nkey);
  ignore_all("texture", m->name_texadr, m->ntex);
  ignore_all("material", m->name_matadr, m->nmat);
  ignore_all("skin", m->name_skinadr, m->nskin);
  ignore_all("numeric", m->name_numericadr, m->nnumeric);
  ignore_all("text", m->name_textadr, m->ntext);
  ignore_all("tuple", m->name_tupleadr, m->ntuple);
}

void Converter::sites() {
  const mjModel* m = m_;
  Model& o = out_;
  for (long i = 0; i < m->nsite; i++) {
    o.site_bodyid.push_back(m->site_bodyid[i]);
    o.site_pos.insert(o.site_pos.end(), m->site_pos + 3 * i, m->site_pos + 3 * i + 3);
    o.site_quat.insert(o.site_quat.end(), m->site_quat + 4 * i, m->site_quat + 4 * i + 4);
    o.site_names.push_back(name(m->name_siteadr, i));
  }
}

// Equality constraints become Phalanx's hard bilateral rows. Connect and weld are taken with body
// semantics: anchors and frames in the bodies' frames (a site's position and orientation for
// site semantics). MuJoCo's solref and solimp (soft constraints) have no counterpart, nor has a
// weld's torquescale, which scales rows that a hard constraint holds at zero anyway; a weld with
// torquescale 0 leaves the orientation free and becomes a connect at its anchor.
void Converter::equalities() {
  const mjModel* m = m_;
  Model& o = out_;
  if (m->neq == 0) return;
  if (equality_disabled_) {
    ignore_all("equality (disabled)", m->name_eqadr, m->neq);
    return;
  }
  ignored_.add("equality@solref, solimp: the rows are hard",
               "first: " + describe("equality", m->name_eqadr, 0), m->neq);
  for (long i = 0; i < m->neq; i++) {
    std::string what = describe("equality", m->name_eqadr, i);
    const mjtNum* data = m->eq_data + mjNEQDATA * i;
    int type = m->eq_type[i], o1 = m->eq_obj1id[i], o2 = m->eq_obj2id[i];
    double anchor[6] = {}, relquat[8] = {1, 0, 0, 0, 1, 0, 0, 0}, poly[5] = {};
    if (type == mjEQ_CONNECT || type == mjEQ_WELD) {
      if (type == mjEQ_WELD && data[10] == 0) type = mjEQ_CONNECT;
      bool weld = m->eq_type[i] == mjEQ_WELD;
      if (m->eq_objtype[i] == mjOBJ_SITE) {
        for (int k = 0; k < 3; k++) {
          anchor[k] = m->site_pos[3 * o1 + k];
          anchor[3 + k] = m->site_pos[3 * o2 + k];
        }
        for (int k = 0; k < 4; k++) {
          relquat[k] = m->site_quat[4 * o1 + k];
          relquat[4 + k] = m->site_quat[4 * o2 + k];
        }
        o1 = m->site_bodyid[o1];
        o2 = m->site_bodyid[o2];
      } else {
        // a weld keeps its anchor on body 2 first (MuJoCo's eq_data layout)
        for (int k = 0; k < 3; k++) {
          anchor[k] = data[(weld ? 3 : 0) + k];
          anchor[3 + k] = data[(weld ? 0 : 3) + k];
        }
        if (weld)
          for (int k = 0; k < 4; k++) relquat[k] = data[6 + k];
      }
    } else if (type == mjEQ_JOINT || type == mjEQ_TENDON) {
      for (int k = 0; k < 5; k++) poly[k] = data[k];
    } else {
      fail(what, "flex equality constraints are not supported");
    }
    o.eq_type.push_back(type);
    o.eq_obj1id.push_back(o1);
    o.eq_obj2id.push_back(o2);
    o.eq_active.push_back(m->eq_active0[i] ? 1 : 0);
    o.eq_anchor.insert(o.eq_anchor.end(), anchor, anchor + 6);
    o.eq_relquat.insert(o.eq_relquat.end(), relquat, relquat + 8);
    o.eq_polycoef.insert(o.eq_polycoef.end(), poly, poly + 5);
  }
}

Model Converter::convert() {
  const mjModel* m = m_;
  out_.name = m->nnames > 0 ? std::string(m->names) : "";
  to_int(m->nbody, "nbody");
  to_int(m->ngeom, "ngeom");
  to_int(m->nmeshgraph, "nmeshgraph");
  options();
  global_refusals();
  bodies();
  joints();
  meshes();
  geoms();
  hfields();
  sites();
  tendons();
  equalities();
  actuators();
  excludes();
  ignored_elements();
  out_.ignored = ignored_.list();
  out_.finalize();
  // MuJoCo's addresses and tree, reproduced by finalize (a check of the conversion)
  if (out_.nq != m->nq || out_.nv != m->nv)
    throw std::invalid_argument("from_mujoco: nq/nv differ after conversion");
  for (long j = 0; j < m->njnt; j++)
    if (out_.jnt_qposadr[j] != m->jnt_qposadr[j] || out_.jnt_dofadr[j] != m->jnt_dofadr[j])
      throw std::invalid_argument("from_mujoco: joint addresses differ from MuJoCo's");
  out_.validate();
  return std::move(out_);
}

}  // namespace

Model from_mujoco(const mjModel* m) {
  if (!m) throw std::invalid_argument("from_mujoco: the mjModel pointer is null");
  return Converter(m).convert();
}

}  // namespace phx
