// Model: derived arrays, consistency checks, name lookups and the loader dispatch.
#include "host/model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <string>

#include "phalanx/collision/types.h"
#include "phalanx/inertia.h"

namespace phx {

namespace {

// index of name in names, -1 when absent (the first of duplicates)
int find_name(const std::vector<std::string>& names, const std::string& name) {
  if (name.empty()) return -1;
  auto it = std::find(names.begin(), names.end(), name);
  return it == names.end() ? -1 : static_cast<int>(it - names.begin());
}

[[noreturn]] void invalid(const std::string& field, const std::string& message) {
  throw std::invalid_argument("Model." + field + ": " + message);
}

template <typename T>
void check_size(const std::vector<T>& v, const std::string& field, size_t expected) {
  if (v.size() != expected) {
    invalid(field,
            "has " + std::to_string(v.size()) + " entries, expected " + std::to_string(expected));
  }
}

// every entry of v in [lo, hi)
void check_range(const std::vector<int>& v, const std::string& field, int lo, int hi) {
  for (size_t i = 0; i < v.size(); i++) {
    if (v[i] < lo || v[i] >= hi) {
      invalid(field, "entry " + std::to_string(i) + " is " + std::to_string(v[i]) +
                         ", expected a value in [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + ")");
    }
  }
}

// v = n copies of value when v is empty (a field its builder left to the default)
template <class V>
void fill_default(V& v, int n, std::initializer_list<typename V::value_type> value) {
  if (!v.empty()) return;
  for (int i = 0; i < n; i++) v.insert(v.end(), value);
}

// v sorted in non-decreasing order (joints and geoms are grouped by body)
void check_sorted(const std::vector<int>& v, const std::string& field) {
  for (size_t i = 1; i < v.size(); i++) {
    if (v[i] < v[i - 1]) {
      invalid(field, "entry " + std::to_string(i) + " (" + std::to_string(v[i]) +
                         ") is smaller than the previous one; entries must be grouped by body");
    }
  }
}

}  // namespace

void Model::finalize() {
  nbody = static_cast<int>(body_parentid.size());
  njnt = static_cast<int>(jnt_type.size());
  ngeom = static_cast<int>(geom_type.size());
  nu = static_cast<int>(actuator_trnid.size());
  check_size(jnt_bodyid, "jnt_bodyid", njnt);
  check_size(geom_bodyid, "geom_bodyid", ngeom);
  check_range(body_parentid, "body_parentid", 0, std::max(nbody, 1));
  check_range(jnt_bodyid, "jnt_bodyid", 1, nbody);
  check_range(geom_bodyid, "geom_bodyid", 0, nbody);
  check_sorted(jnt_bodyid, "jnt_bodyid");
  check_sorted(geom_bodyid, "geom_bodyid");

  // root of each body's tree: itself for the world and its children
  body_rootid.assign(nbody, 0);
  for (int i = 1; i < nbody; i++) {
    int p = body_parentid[i];
    if (p >= i) invalid("body_parentid", "body " + std::to_string(i) + " comes before its parent");
    body_rootid[i] = p == 0 ? i : body_rootid[p];
  }

  // joints per body, and their qpos and dof addresses in order of appearance
  body_jntnum.assign(nbody, 0);
  body_jntadr.assign(nbody, -1);
  body_dofnum.assign(nbody, 0);
  body_dofadr.assign(nbody, -1);
  jnt_qposadr.assign(njnt, 0);
  jnt_dofadr.assign(njnt, 0);
  nq = nv = 0;
  for (int j = 0; j < njnt; j++) {
    int b = jnt_bodyid[j];
    if (body_jntadr[b] < 0) body_jntadr[b] = j;
    if (body_dofadr[b] < 0) body_dofadr[b] = nv;
    body_jntnum[b]++;
    body_dofnum[b] += joint_nv(jnt_type[j]);
    jnt_qposadr[j] = nq;
    jnt_dofadr[j] = nv;
    nq += joint_nq(jnt_type[j]);
    nv += joint_nv(jnt_type[j]);
  }

  // dofs: body, joint, and the previous dof on the path to the root (MuJoCo's dof_parentid:
  // the previous dof of the same body, else the last dof of the nearest ancestor with dofs)
  dof_bodyid.assign(nv, 0);
  dof_jntid.assign(nv, 0);
  dof_parentid.assign(nv, -1);
  std::vector<int> last_dof(nbody, -1);  // last dof of the body or of its nearest ancestor
  for (int b = 1; b < nbody; b++) last_dof[b] = last_dof[body_parentid[b]];
  for (int j = 0; j < njnt; j++) {
    int b = jnt_bodyid[j];
    for (int d = jnt_dofadr[j]; d < jnt_dofadr[j] + joint_nv(jnt_type[j]); d++) {
      dof_bodyid[d] = b;
      dof_jntid[d] = j;
    }
  }
  for (int b = 1; b < nbody; b++) {
    int last = last_dof[body_parentid[b]];
    for (int d = std::max(body_dofadr[b], 0); d < body_dofadr[b] + body_dofnum[b]; d++) {
      dof_parentid[d] = last;
      last = d;
    }
    last_dof[b] = last;
  }
  // dof trees: each dof's topmost ancestor dof. The factorisations work on the trees as blocks,
  // which needs each tree's dofs consecutive (bodies in depth-first order, as MuJoCo and the
  // loaders store them); otherwise all dofs form one block.
  dof_treeadr.assign(nv, 0);
  bool consecutive = true;
  for (int d = 0; d < nv; d++) {
    dof_treeadr[d] = dof_parentid[d] < 0 ? d : dof_treeadr[dof_parentid[d]];
    consecutive &= d == 0 || dof_treeadr[d] == dof_treeadr[d - 1] || dof_treeadr[d] == d;
  }
  if (!consecutive) dof_treeadr.assign(nv, 0);

  // geoms per body
  body_geomnum.assign(nbody, 0);
  body_geomadr.assign(nbody, -1);
  for (int g = 0; g < ngeom; g++) {
    int b = geom_bodyid[g];
    if (body_geomadr[b] < 0) body_geomadr[b] = g;
    body_geomnum[b]++;
  }

  if (geom_dataid.size() != static_cast<size_t>(ngeom)) geom_dataid.assign(ngeom, -1);
  fill_default(geom_visible, ngeom, {1});
  // meshes and height fields: counts from their arrays
  nmesh = static_cast<int>(mesh_vertadr.size());
  nmeshvert = static_cast<int>(mesh_vert.size() / 3);
  nmeshadj = static_cast<int>(mesh_vertadj.size());
  nmeshpoly = static_cast<int>(mesh_polyvertadr.size());
  nmeshpolyvert = static_cast<int>(mesh_polyvert.size());
  nhfield = static_cast<int>(hfield_adr.size());
  nhfielddata = static_cast<int>(hfield_data.size());
  // bounding sphere radii from type and size
  check_size(geom_size, "geom_size", 3 * static_cast<size_t>(ngeom));
  update_rbound();
  if (geom_restitution.size() != static_cast<size_t>(ngeom)) geom_restitution.assign(ngeom, 0);
  fill_default(dof_frictionloss, nv, {0.0});
  fill_default(tendon_frictionloss, static_cast<int>(tendon_adr.size()), {0.0});
  ntendon = static_cast<int>(tendon_adr.size());
  nwrap = static_cast<int>(wrap_objid.size());
  fill_default(tendon_type, ntendon, {kTendonFixed});
  fill_default(wrap_type, nwrap, {kWrapJoint});
  fill_default_tendon_length0();
  nsite = static_cast<int>(site_bodyid.size());
  fill_default_mocap();
  fill_default(site_pos, nsite, {0.0, 0.0, 0.0});
  fill_default(site_quat, nsite, {1.0, 0.0, 0.0, 0.0});
  if (site_names.empty()) site_names.resize(nsite);
  neq = static_cast<int>(eq_type.size());
  fill_default(eq_obj2id, neq, {-1});
  fill_default(eq_active, neq, {1});
  fill_default(eq_anchor, neq, {0.0, 0.0, 0.0, 0.0, 0.0, 0.0});
  fill_default(eq_relquat, neq, {1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0});
  fill_default(eq_polycoef, neq, {0.0, 1.0, 0.0, 0.0, 0.0});
  fill_default(actuator_trntype, nu, {kTrnJoint});
  fill_default(actuator_slidersite, nu, {-1});
  fill_default(actuator_cranklength, nu, {0.0});
  // actuators given without a gain and bias are motors: fixed gain 1, no bias, no force limit
  fill_default(actuator_gaintype, nu, {kGainFixed});
  fill_default(actuator_biastype, nu, {kBiasNone});
  fill_default(actuator_gainprm, nu, {1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0});
  fill_default(actuator_biasprm, nu, {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0});
  fill_default(actuator_forcelimited, nu, {0});
  fill_default(actuator_forcerange, nu, {0.0, 0.0});
  fill_default(actuator_dyntype, nu, {kDynNone});
  fill_default(actuator_dynprm, nu, {1.0, 0.0, 0.0});
  fill_default(actuator_lengthrange, nu, {0.0, 0.0});
  fill_default(actuator_acc0, nu, {0.0});
  fill_default(actuator_actlimited, nu, {0});
  fill_default(actuator_actrange, nu, {0.0, 0.0});
  fill_default(actuator_actearly, nu, {0});
  // one activation per actuator with dynamics, in actuator order (MuJoCo's actadr)
  if (actuator_actadr.empty() && actuator_dyntype.size() == static_cast<size_t>(nu)) {
    for (int u = 0, a = 0; u < nu; u++)
      actuator_actadr.push_back(actuator_dyntype[u] != kDynNone ? a++ : -1);
  }
  na = 0;
  for (int adr : actuator_actadr) na += adr >= 0;

  // candidate collision pairs and the contact capacity
  compute_pairs();
}

// The geom pairs that may touch, by MuJoCo's rules: geoms of one rigid body (bodies welded
// together without joints) never collide; a body does not collide with its parent unless the
// parent is the world; contype/conaffinity must match; explicit <exclude> pairs are dropped.
void Model::compute_pairs() {
  // weld body: the nearest ancestor (or self) with joints, or the world
  std::vector<int> weld(nbody, 0);
  for (int b = 1; b < nbody; b++) weld[b] = body_jntnum[b] > 0 ? b : weld[body_parentid[b]];
  auto excluded = [&](int b1, int b2) {
    for (size_t k = 0; k + 1 < exclude_bodies.size(); k += 2) {
      int e1 = exclude_bodies[k], e2 = exclude_bodies[k + 1];
      if ((e1 == b1 && e2 == b2) || (e1 == b2 && e2 == b1)) return true;
    }
    return false;
  };
  if (exclude_bodies.size() % 2 != 0) invalid("exclude_bodies", "must hold pairs of body ids");
  nexclude = static_cast<int>(exclude_bodies.size() / 2);
  pair_geom.clear();
  npair_convex = 0;
  long capacity = 0;
  for (int g1 = 0; g1 < ngeom; g1++) {
    for (int g2 = g1 + 1; g2 < ngeom; g2++) {
      int b1 = geom_bodyid[g1], b2 = geom_bodyid[g2];
      int w1 = weld[b1], w2 = weld[b2];
      if (w1 == w2) continue;
      if (w1 != 0 && w2 != 0 &&
          (weld[body_parentid[w1]] == w2 || weld[body_parentid[w2]] == w1)) {
        continue;
      }
      if (!(geom_contype[g1] & geom_conaffinity[g2]) && !(geom_contype[g2] & geom_conaffinity[g1])) {
        continue;
      }
      if (!has_collision_function(geom_type[g1], geom_type[g2])) continue;
      if (excluded(b1, b2)) continue;
      pair_geom.push_back(g1);
      pair_geom.push_back(g2);
      capacity += max_pair_contacts(geom_type[g1], geom_type[g2]);
      npair_convex += convex_pair(geom_type[g1], geom_type[g2]);
    }
  }
  npair = static_cast<int>(pair_geom.size() / 2);
  if (nconmax <= 0) nconmax = static_cast<int>(std::min<long>(capacity, std::max(32, 4 * ngeom)));
}

static void check_blocks(const std::vector<int>& adr, const std::vector<int>& num,
                         const std::string& field, int total);

void Model::validate() const {
  // counts
  check_size(body_parentid, "body_parentid", nbody);
  check_size(jnt_type, "jnt_type", njnt);
  check_size(geom_type, "geom_type", ngeom);
  check_size(actuator_trnid, "actuator_trnid", nu);
  if (nbody < 1) invalid("nbody", "is " + std::to_string(nbody) + ", expected at least 1 (world)");
  int expected_nq = 0, expected_nv = 0;
  for (int t : jnt_type) {
    if (t < kJointFree || t > kJointHinge)
      invalid("jnt_type", "has unknown type " + std::to_string(t));
    expected_nq += joint_nq(t);
    expected_nv += joint_nv(t);
  }
  if (nq != expected_nq)
    invalid("nq", "is " + std::to_string(nq) + ", expected " + std::to_string(expected_nq));
  if (nv != expected_nv)
    invalid("nv", "is " + std::to_string(nv) + ", expected " + std::to_string(expected_nv));

  // array sizes
#define PHX_CHECK_SIZE(kind, name, count, width, comment) \
  check_size(name, #name, size_t(count) * width);
  PHX_MODEL_ARRAYS(PHX_CHECK_SIZE)
#undef PHX_CHECK_SIZE
  check_range(pair_geom, "pair_geom", 0, std::max(ngeom, 1));
  if (nconmax < 0) invalid("nconmax", "must be >= 0");
  size_t nb = nbody, nj = njnt, ng = ngeom, na = nu;
  check_size(body_names, "body_names", nb);
  check_size(jnt_names, "jnt_names", nj);
  check_size(geom_names, "geom_names", ng);
  check_size(actuator_names, "actuator_names", na);
  check_size(site_names, "site_names", size_t(nsite));
  check_range(site_bodyid, "site_bodyid", 0, nbody);

  // indices
  if (body_parentid[0] != 0) invalid("body_parentid", "entry 0 (world) must be 0");
  for (int i = 1; i < nbody; i++) {
    if (body_parentid[i] < 0 || body_parentid[i] >= i) {
      invalid("body_parentid", "entry " + std::to_string(i) + " is " +
                                   std::to_string(body_parentid[i]) +
                                   ", expected a parent listed before it");
    }
  }
  check_range(body_rootid, "body_rootid", 0, nbody);
  check_range(body_jntadr, "body_jntadr", -1, njnt);
  check_range(body_dofadr, "body_dofadr", -1, nv);
  check_range(body_geomadr, "body_geomadr", -1, ngeom);
  check_range(jnt_bodyid, "jnt_bodyid", 1, nbody);
  check_range(jnt_qposadr, "jnt_qposadr", 0, nq);
  check_range(jnt_dofadr, "jnt_dofadr", 0, nv);
  check_range(jnt_limited, "jnt_limited", 0, 2);
  check_range(dof_bodyid, "dof_bodyid", 1, nbody);
  check_range(dof_jntid, "dof_jntid", 0, njnt);
  check_range(dof_parentid, "dof_parentid", -1, nv);
  for (int d = 0; d < nv; d++) {
    if (dof_treeadr[d] < 0 || dof_treeadr[d] > d || dof_parentid[d] >= d ||
        (dof_parentid[d] >= 0 && dof_parentid[d] < dof_treeadr[d]) ||
        (d > 0 && dof_treeadr[d] != d && dof_treeadr[d] != dof_treeadr[d - 1]))
      invalid("dof_treeadr", "entry " + std::to_string(d) + " is " +
                                 std::to_string(dof_treeadr[d]) +
                                 ", expected the first dof of a block of consecutive dofs "
                                 "holding the dof's ancestors");
  }
  for (int d = 0; d < nv; d++) {
    if (dof_parentid[d] >= d) {
      invalid("dof_parentid", "entry " + std::to_string(d) + " is not a previous dof");
    }
  }
  check_range(geom_bodyid, "geom_bodyid", 0, nbody);
  for (int t : geom_type) {
    if (t < kGeomPlane || t > kGeomMesh)
      invalid("geom_type", "has unknown type " + std::to_string(t));
  }
  check_range(exclude_bodies, "exclude_bodies", 0, nbody);
  if (opt.ccd_iterations < 1 || opt.ccd_iterations > kMaxCcdIterations)
    invalid("opt.ccd_iterations", "is " + std::to_string(opt.ccd_iterations) +
                                      ", expected a value in [1, " +
                                      std::to_string(kMaxCcdIterations) + "]");
  if (!(opt.ccd_tolerance > 0)) invalid("opt.ccd_tolerance", "must be > 0");
  if (opt.lcp_iterations < 1) invalid("opt.lcp_iterations", "must be >= 1");
  if (!(opt.density >= 0 && std::isfinite(opt.density)))
    invalid("opt.density", "must be finite and >= 0");
  if (!(opt.viscosity >= 0 && std::isfinite(opt.viscosity)))
    invalid("opt.viscosity", "must be finite and >= 0");
  for (double v : opt.wind)
    if (!std::isfinite(v)) invalid("opt.wind", "must be finite");
  if (opt.lcp_max_iterations < 0) invalid("opt.lcp_max_iterations", "must be >= 0");
  if (!(opt.lcp_residual_limit > 0)) invalid("opt.lcp_residual_limit", "must be > 0");
  validate_geom_data();
  validate_equality();
  check_range(actuator_ctrllimited, "actuator_ctrllimited", 0, 2);
  for (int d = 0; d < nv; d++)
    if (!(dof_frictionloss[d] >= 0) || !std::isfinite(dof_frictionloss[d]))
      invalid("dof_frictionloss", "entry " + std::to_string(d) + " must be finite and >= 0");
  for (int t = 0; t < ntendon; t++)
    if (!(tendon_frictionloss[t] >= 0) || !std::isfinite(tendon_frictionloss[t]))
      invalid("tendon_frictionloss", "entry " + std::to_string(t) + " must be finite and >= 0");
  check_range(actuator_gaintype, "actuator_gaintype", kGainFixed, kGainMuscle + 1);
  check_range(actuator_biastype, "actuator_biastype", kBiasNone, kBiasMuscle + 1);
  check_range(actuator_forcelimited, "actuator_forcelimited", 0, 2);
  validate_activation();
  validate_tendons();
  validate_mocap();
  validate_xpbd();
  check_range(actuator_trntype, "actuator_trntype", kTrnJoint, kTrnSliderCrank + 1);
  for (int u = 0; u < nu; u++) {
    if (actuator_trntype[u] == kTrnSliderCrank) {
      const std::string what = "actuator " + std::to_string(u);
      for (auto [site, field] : {std::pair{actuator_trnid[u], "actuator_trnid"},
                                 std::pair{actuator_slidersite[u], "actuator_slidersite"}})
        if (site < 0 || site >= nsite)
          invalid(field, what + " names site " + std::to_string(site) + " of " +
                             std::to_string(nsite) + " (a slider-crank joins two sites)");
      if (!(actuator_cranklength[u] > 0) || !std::isfinite(actuator_cranklength[u]))
        invalid("actuator_cranklength", what + ": a slider-crank's rod must be finite and > 0");
      continue;
    }
    if (actuator_trntype[u] == kTrnTendon) {
      if (actuator_trnid[u] < 0 || actuator_trnid[u] >= ntendon)
        invalid("actuator_trnid", "actuator " + std::to_string(u) + " names tendon " +
                                      std::to_string(actuator_trnid[u]) + " of " +
                                      std::to_string(ntendon));
      continue;
    }
    if (actuator_trnid[u] < 0 || actuator_trnid[u] >= njnt)
      invalid("actuator_trnid", "actuator " + std::to_string(u) + " names joint " +
                                    std::to_string(actuator_trnid[u]) + " of " +
                                    std::to_string(njnt));
    int t = jnt_type[actuator_trnid[u]];
    if (t != kJointHinge && t != kJointSlide)
      invalid("actuator_trnid", "actuator " + std::to_string(u) + " moves a " + kJointTypeNames[t] +
                                    " joint; actuators move hinge or slide joints");
    if (actuator_forcelimited[u] && !(actuator_forcerange[2 * u] <= actuator_forcerange[2 * u + 1]))
      invalid("actuator_forcerange", "actuator " + std::to_string(u) + " has lower > upper limit");
  }
  for (int k = 0; k < kNumBatched; ++k) {
    check_param_values(k, param_field(k), 1);
    const std::vector<double>& batch = param_batch[k];
    if (batch.empty()) continue;
    size_t n = param_size(k);
    if (n == 0 || batch.size() % n != 0 || batch.size() / n < 2)
      invalid(std::string("param_batch[") + kParamNames[k] + "]",
              "holds " + std::to_string(batch.size()) + " values, expected nbatch >= 2 copies of " +
                  std::to_string(n));
    check_param_values(k, batch, int(batch.size() / n));
  }
}

// The solver options, and with the XPBD solver what it simulates: one joint per body (or two or
// three hinges, validate_xpbd_composite), free
// joints at the world, masses and inertias on the bodies that move, limits on joints and on
// spatial tendons through sites (cables) only, armature on hinges only, and no friction loss or
// equality constraints yet.
// A body with several joints under XPBD: two or three hinges (a composite joint), their axes
// independent, solved by the tree solver (its rows; the Gauss-Seidel passes have none for it).
void Model::validate_xpbd_composite(int b) const {
  const std::string body = "body " + std::to_string(b), why = " (model.solver = \"xpbd\")";
  const int n = body_jntnum[b], j0 = body_jntadr[b];
  bool hinges = n <= 3;
  for (int i = 0; i < n; ++i) hinges = hinges && jnt_type[j0 + i] == kJointHinge;
  if (!hinges)
    invalid("body_jntnum", body + " has " + std::to_string(n) +
                               " joints; XPBD takes one joint per body, or two or three hinges" +
                               why);
  auto axis = [&](int i) {
    const double* a = &jnt_axis[3 * (j0 + i)];
    return Vec3<double>{a[0], a[1], a[2]};
  };
  const double independence = n == 2 ? norm(cross(axis(0), axis(1)))
                                     : std::abs(dot(axis(0), cross(axis(1), axis(2))));
  if (independence < 1e-6)
    invalid("jnt_axis", body + "'s hinge axes are dependent; XPBD composes independent ones" +
                            why);
  if (opt.xpbd_joint_solver != kXpbdTree)
    invalid("opt.xpbd_joint_solver", body + " has " + std::to_string(n) +
                                         " hinges; XPBD solves such a body with the tree "
                                         "solver only (xpbd_joint_solver = \"tree\")" +
                                         why);
}

void Model::validate_xpbd() const {
  auto choice = [](int v, int n, const char* field) {
    if (v < 0 || v >= n)
      invalid(field, "is " + std::to_string(v) + ", expected 0 to " + std::to_string(n - 1));
  };
  choice(opt.solver, 2, "opt.solver");
  choice(opt.xpbd_joint_solver, 2, "opt.xpbd_joint_solver");
  if (opt.xpbd_substeps < 1) invalid("opt.xpbd_substeps", "must be >= 1");
  if (opt.xpbd_iterations < 1) invalid("opt.xpbd_iterations", "must be >= 1");
  if (opt.solver != kSolverXpbd) return;
  const std::string why = " (model.solver = \"xpbd\")";
  std::vector<char> moves(nbody, 0);  // whether a body or an ancestor has a joint
  for (int b = 1; b < nbody; ++b) {
    const std::string body = "body " + std::to_string(b);
    moves[b] = moves[body_parentid[b]] || body_jntnum[b] > 0;
    if (body_jntnum[b] > 1) validate_xpbd_composite(b);
    if (body_jntnum[b] == 1 && jnt_type[body_jntadr[b]] == kJointFree && body_parentid[b] != 0)
      invalid("jnt_type", body + " has a free joint below another body" + why);
    const bool massive = body_mass[b] > 0 && body_inertia[3 * b] > 0 &&
                         body_inertia[3 * b + 1] > 0 && body_inertia[3 * b + 2] > 0;
    if (moves[b] && !massive)
      invalid("body_mass", body +
                               " moves but has no mass or a zero principal inertia; XPBD "
                               "moves bodies of positive mass and inertia" +
                               why);
  }
  for (int j = 0; j < njnt; ++j)
    if (opt.limit && jnt_limited[j] && jnt_type[j] == kJointFree)
      invalid("jnt_limited", "joint " + std::to_string(j) +
                                 " is a limited free joint; XPBD limits hinges, slides and balls" +
                                 why);
  for (int t = 0; t < ntendon; ++t) {
    if (!opt.limit || !tendon_limited[t]) continue;
    bool sites = tendon_num[t] >= 2 && tendon_num[t] <= kXpbdPathPoints;
    for (int i = 0; i < tendon_num[t]; ++i)
      sites = sites && wrap_type[tendon_adr[t] + i] == kWrapSite;
    if (!sites)
      invalid("tendon_limited", "tendon " + std::to_string(t) +
                                    " is limited but is not a spatial tendon through 2 to " +
                                    std::to_string(kXpbdPathPoints) +
                                    " sites (no joints, pulleys or wrapping geoms); XPBD limits "
                                    "those (cables) only" +
                                    why);
  }
  for (int d = 0; d < nv; ++d)
    if (dof_frictionloss[d] > 0)
      invalid("dof_frictionloss", "dof " + std::to_string(d) +
                                      " has friction loss; XPBD has none "
                                      "yet" +
                                      why);
  for (int t = 0; t < ntendon; ++t)
    if (tendon_frictionloss[t] > 0)
      invalid("tendon_frictionloss", "tendon " + std::to_string(t) +
                                         " has friction loss; XPBD "
                                         "has none yet" +
                                         why);
  for (int d = 0; d < nv; ++d)
    if (dof_armature[d] != 0 && jnt_type[dof_jntid[d]] != kJointHinge)
      invalid("dof_armature", "dof " + std::to_string(d) +
                                  " has armature on a " +
                                  kJointTypeNames[jnt_type[dof_jntid[d]]] +
                                  " joint; XPBD has rotor inertia on hinges only" + why);
  for (int i = 0; i < neq; ++i)
    if (eq_active[i])
      invalid("eq_active", "equality " + std::to_string(i) +
                               " is active; XPBD has no equality "
                               "constraints yet" +
                               why);
}

// [adr, adr + num) of each entity within an array of `total` entries
static void check_blocks(const std::vector<int>& adr, const std::vector<int>& num,
                         const std::string& field, int total) {
  for (size_t i = 0; i < adr.size(); i++) {
    if (adr[i] < 0 || num[i] < 0 || long(adr[i]) + num[i] > total) {
      invalid(field, "entry " + std::to_string(i) + " covers [" + std::to_string(adr[i]) + ", " +
                         std::to_string(long(adr[i]) + num[i]) + "), outside the " +
                         std::to_string(total) + " entries");
    }
  }
}

// Actuators with dynamics hold one activation each, numbered in actuator order; filters and
// muscles need time constants, limited activations a range, and muscles a length range.
void Model::validate_activation() const {
  check_range(actuator_dyntype, "actuator_dyntype", kDynNone, kDynMuscle + 1);
  check_range(actuator_actlimited, "actuator_actlimited", 0, 2);
  check_range(actuator_actearly, "actuator_actearly", 0, 2);
  for (int u = 0, a = 0; u < nu; u++) {
    const std::string what = "actuator " + std::to_string(u);
    const bool dyn = actuator_dyntype[u] != kDynNone;
    if (actuator_actadr[u] != (dyn ? a : -1))
      invalid("actuator_actadr", what + ": expected " + std::to_string(dyn ? a : -1) +
                                     " (one activation per actuator with dynamics, in order)");
    a += dyn;
    const double* dynprm = &actuator_dynprm[3 * u];
    const int ntime = actuator_dyntype[u] == kDynMuscle ? 3 : 1;
    for (int k = 0; k < ntime; k++)
      if (!(dynprm[k] >= 0) || !std::isfinite(dynprm[k]))
        invalid("actuator_dynprm", what + ": time constants and widths must be finite and >= 0");
    const double lo = actuator_actrange[2 * u], hi = actuator_actrange[2 * u + 1];
    if (actuator_actlimited[u] && !(lo <= hi && std::isfinite(lo) && std::isfinite(hi)))
      invalid("actuator_actrange", what + ": a limited activation needs finite lo <= hi");
    const bool muscle = actuator_gaintype[u] == kGainMuscle || actuator_biastype[u] == kBiasMuscle;
    if (muscle && !(actuator_lengthrange[2 * u] < actuator_lengthrange[2 * u + 1]))
      invalid("actuator_lengthrange",
              what + ": a muscle needs lengthrange lo < hi (MuJoCo's compiler computes it)");
  }
}

// mocap bodies: none when body_mocapid was left empty; their poses default to the bodies'
// offsets from the world (body_pos, body_quat), as MuJoCo's mj_resetData sets them
void Model::fill_default_mocap() {
  fill_default(body_mocapid, nbody, {-1});
  nmocap = 0;
  for (int id : body_mocapid) nmocap += id >= 0;
  if (!mocap_pos.empty() || !mocap_quat.empty() ||
      body_mocapid.size() != static_cast<size_t>(nbody) ||
      body_pos.size() != 3 * static_cast<size_t>(nbody) ||
      body_quat.size() != 4 * static_cast<size_t>(nbody))
    return;
  mocap_pos.assign(3 * static_cast<size_t>(nmocap), 0.0);
  mocap_quat.assign(4 * static_cast<size_t>(nmocap), 0.0);
  for (int b = 0; b < nbody; b++) {
    const int id = body_mocapid[b];
    if (id < 0 || id >= nmocap) continue;  // validate_mocap names the inconsistency
    std::copy_n(&body_pos[3 * b], 3, &mocap_pos[3 * id]);
    std::copy_n(&body_quat[4 * b], 4, &mocap_quat[4 * id]);
  }
}

// Mocap bodies are children of the world without joints, numbered in body order.
void Model::validate_mocap() const {
  for (int b = 0, id = 0; b < nbody; b++) {
    if (body_mocapid[b] < 0) continue;
    const std::string what = "body " + std::to_string(b);
    if (body_mocapid[b] != id++)
      invalid("body_mocapid", what + " has mocap id " + std::to_string(body_mocapid[b]) +
                                  ", expected " + std::to_string(id - 1) + " (in body order)");
    if (b == 0 || body_parentid[b] != 0 || body_jntnum[b] != 0)
      invalid("body_mocapid", what + ": a mocap body is a child of the world without joints");
  }
  for (int i = 0; i < nmocap; i++)
    if (!(std::abs(mocap_quat[4 * i]) + std::abs(mocap_quat[4 * i + 1]) +
              std::abs(mocap_quat[4 * i + 2]) + std::abs(mocap_quat[4 * i + 3]) >
          0))
      invalid("mocap_quat", "entry " + std::to_string(i) + " is zero, expected a quaternion");
}

// the lengths of fixed tendons at qpos0 when tendon_length0 was left empty (a spatial tendon's,
// which needs the kinematics, is 0 then: only tendon equalities read it, and validate_equality
// refuses one that couples a spatial tendon of length 0)
void Model::fill_default_tendon_length0() {
  if (!tendon_length0.empty()) return;
  tendon_length0.assign(ntendon, 0.0);
  for (int t = 0; t < ntendon; t++) {
    if (tendon_type[t] != kTendonFixed) continue;
    for (int k = tendon_adr[t]; k < tendon_adr[t] + tendon_num[t] && k < nwrap; k++) {
      int j = wrap_objid[k];
      if (j >= 0 && j < njnt && jnt_qposadr[j] < static_cast<int>(qpos0.size()))
        tendon_length0[t] += wrap_prm[k] * qpos0[jnt_qposadr[j]];
    }
  }
}

// Fixed tendons combine hinges and slides; spatial tendons are paths of sites, with pulleys
// between branches (a branch starts and ends at a site, and has a span) and spheres or
// cylinders to wrap over between consecutive sites.
void Model::validate_tendons() const {
  check_blocks(tendon_adr, tendon_num, "tendon_adr", nwrap);
  check_range(tendon_limited, "tendon_limited", 0, 2);
  check_range(tendon_type, "tendon_type", kTendonFixed, kTendonSpatial + 1);
  for (int t = 0; t < ntendon; t++) {
    const std::string what = "tendon " + std::to_string(t);
    const int adr = tendon_adr[t], num = tendon_num[t];
    if (tendon_type[t] == kTendonFixed) {
      for (int k = adr; k < adr + num; k++) {
        int j = wrap_objid[k];
        if (wrap_type[k] != kWrapJoint)
          invalid("wrap_type", "entry " + std::to_string(k) + " of fixed " + what +
                                   " is not a joint; fixed tendons combine joints");
        if (j < 0 || j >= njnt)
          invalid("wrap_objid", "entry " + std::to_string(k) + " names joint " + std::to_string(j) +
                                    " of " + std::to_string(njnt));
        if (jnt_type[j] != kJointHinge && jnt_type[j] != kJointSlide)
          invalid("wrap_objid", "entry " + std::to_string(k) + " is a " +
                                    kJointTypeNames[jnt_type[j]] +
                                    " joint; tendons combine hinge and slide joints");
      }
      continue;
    }
    // spatial: site ((geom)? site | pulley site (geom)? site)*, every branch at least one span;
    // a geom (sphere or cylinder) lies between two sites, its wrap_prm a side site or -1
    int run = 0;  // sites since the branch began
    for (int k = adr; k < adr + num; k++) {
      const std::string entry = "entry " + std::to_string(k) + " of spatial " + what;
      if (wrap_type[k] == kWrapPulley) {
        if (run < 2)
          invalid("wrap_type", entry + ": a pulley follows a branch of at least two sites");
        if (!(wrap_prm[k] > 0) || !std::isfinite(wrap_prm[k]))
          invalid("wrap_prm", "entry " + std::to_string(k) + ": a pulley's divisor must be > 0");
        run = 0;
        continue;
      }
      if (wrap_type[k] == kWrapSphere || wrap_type[k] == kWrapCylinder) {
        const int g = wrap_objid[k];
        const int want = wrap_type[k] == kWrapSphere ? kGeomSphere : kGeomCylinder;
        if (g < 0 || g >= ngeom || geom_type[g] != want)
          invalid("wrap_objid", entry + " names geom " + std::to_string(g) + ", not a " +
                                    kGeomTypeNames[want] + " of the " + std::to_string(ngeom));
        if (run == 0 || k + 1 >= adr + num || wrap_type[k + 1] != kWrapSite)
          invalid("wrap_type", entry + ": a wrapping geom lies between two sites");
        const double side = wrap_prm[k];
        if (!(side == std::round(side) && side >= -1 && side < nsite))
          invalid("wrap_prm", entry + ": the side site must be a site id or -1");
        continue;
      }
      if (wrap_type[k] != kWrapSite)
        invalid("wrap_type", entry + " is neither a site, a pulley, a sphere nor a cylinder");
      if (wrap_objid[k] < 0 || wrap_objid[k] >= nsite)
        invalid("wrap_objid", "entry " + std::to_string(k) + " names site " +
                                  std::to_string(wrap_objid[k]) + " of " + std::to_string(nsite));
      ++run;
    }
    if (run < 2)
      invalid("tendon_num", "spatial " + what + " must end with a branch of at least two sites");
  }
  for (double x : tendon_length0)
    if (!std::isfinite(x)) invalid("tendon_length0", "must hold finite values");
}

void Model::validate_equality() const {
  check_range(eq_type, "eq_type", kEqConnect, kEqTendon + 1);
  check_range(eq_active, "eq_active", 0, 2);
  for (int i = 0; i < neq; i++) {
    int type = eq_type[i], o1 = eq_obj1id[i], o2 = eq_obj2id[i];
    std::string what = "equality " + std::to_string(i);
    auto object = [&](int id, int n, bool optional, const char* field, const char* kind) {
      if (id < (optional ? -1 : 0) || id >= n)
        invalid(field,
                what + " names " + kind + " " + std::to_string(id) + " of " + std::to_string(n));
    };
    if (type == kEqConnect || type == kEqWeld) {
      object(o1, nbody, false, "eq_obj1id", "body");
      object(o2, nbody, false, "eq_obj2id", "body");
      if (o1 == o2) invalid("eq_obj2id", what + " joins body " + std::to_string(o1) + " to itself");
    } else if (type == kEqJoint) {
      object(o1, njnt, false, "eq_obj1id", "joint");
      object(o2, njnt, true, "eq_obj2id", "joint");
      for (int j : {o1, o2}) {
        if (j >= 0 && jnt_type[j] != kJointHinge && jnt_type[j] != kJointSlide)
          invalid("eq_obj1id", what + " couples a " + std::string(kJointTypeNames[jnt_type[j]]) +
                                   " joint; joint equalities couple hinge and slide joints");
      }
    } else {
      object(o1, ntendon, false, "eq_obj1id", "tendon");
      object(o2, ntendon, true, "eq_obj2id", "tendon");
      // the reference length of a spatial tendon is not derived here (fill_default_tendon_length0)
      for (int t : {o1, o2})
        if (t >= 0 && tendon_type[t] != kTendonFixed && tendon_length0[t] == 0)
          invalid("tendon_length0", what + " couples spatial tendon " + std::to_string(t) +
                                        ", whose length at qpos0 (tendon_length0) is not given; "
                                        "the MJCF loader and from_mujoco take it from MuJoCo");
    }
  }
  std::pair<const std::vector<double>*, const char*> data[] = {
      {&eq_anchor, "eq_anchor"}, {&eq_relquat, "eq_relquat"}, {&eq_polycoef, "eq_polycoef"}};
  for (const auto& [v, name] : data)
    for (double x : *v)
      if (!std::isfinite(x)) invalid(name, "must hold finite values");
}

void Model::validate_geom_data() const {
  for (int g = 0; g < ngeom; g++) {
    int t = geom_type[g], id = geom_dataid[g];
    int n = t == kGeomMesh ? nmesh : t == kGeomHField ? nhfield : 0;
    bool ok = n > 0 ? id >= 0 && id < n : id == -1;
    if (!ok) {
      invalid("geom_dataid", "entry " + std::to_string(g) + " (" + kGeomTypeNames[t] + ") is " +
                                 std::to_string(id) + ", expected " +
                                 (n > 0 ? "a value in [0, " + std::to_string(n) + ")" : "-1"));
    }
  }
  for (int g = 0; g < ngeom; g++)
    if (geom_visible[g] != 0 && geom_visible[g] != 1)
      invalid("geom_visible", "entry " + std::to_string(g) + " is " +
                                  std::to_string(geom_visible[g]) + ", expected 0 or 1");
  check_blocks(mesh_vertadr, mesh_vertnum, "mesh_vertadr", nmeshvert);
  check_blocks(mesh_polyadr, mesh_polynum, "mesh_polyadr", nmeshpoly);
  check_blocks(mesh_vertadjadr, mesh_vertadjnum, "mesh_vertadjadr", nmeshadj);
  check_blocks(mesh_polyvertadr, mesh_polyvertnum, "mesh_polyvertadr", nmeshpolyvert);
  // local vertex ids within their mesh
  for (int k = 0; k < nmesh; k++) {
    int nvert = mesh_vertnum[k];
    if (nvert < 4)
      invalid("mesh_vertnum", "entry " + std::to_string(k) + " is " + std::to_string(nvert) +
                                  ", a convex hull needs at least 4 vertices");
    for (int v = mesh_vertadr[k]; v < mesh_vertadr[k] + nvert; v++)
      for (int a = mesh_vertadjadr[v]; a < mesh_vertadjadr[v] + mesh_vertadjnum[v]; a++)
        if (mesh_vertadj[a] < 0 || mesh_vertadj[a] >= nvert)
          invalid("mesh_vertadj", "entry " + std::to_string(a) + " is " +
                                      std::to_string(mesh_vertadj[a]) + ", outside mesh " +
                                      std::to_string(k) + "'s " + std::to_string(nvert) +
                                      " vertices");
    for (int f = mesh_polyadr[k]; f < mesh_polyadr[k] + mesh_polynum[k]; f++)
      for (int a = mesh_polyvertadr[f]; a < mesh_polyvertadr[f] + mesh_polyvertnum[f]; a++)
        if (mesh_polyvert[a] < 0 || mesh_polyvert[a] >= nvert)
          invalid("mesh_polyvert", "entry " + std::to_string(a) + " is " +
                                       std::to_string(mesh_polyvert[a]) + ", outside mesh " +
                                       std::to_string(k) + "'s " + std::to_string(nvert) +
                                       " vertices");
  }
  for (int h = 0; h < nhfield; h++) {
    if (hfield_nrow[h] < 2 || hfield_ncol[h] < 2)
      invalid("hfield_nrow", "height field " + std::to_string(h) + " is " +
                                 std::to_string(hfield_nrow[h]) + " x " +
                                 std::to_string(hfield_ncol[h]) + ", expected at least 2 x 2");
    for (int c = 0; c < 4; c++)
      if (!(hfield_size[4 * h + c] > 0))
        invalid("hfield_size", "entry " + std::to_string(4 * h + c) + " must be > 0");
  }
  std::vector<int> hfield_num(nhfield);
  for (int h = 0; h < nhfield; h++) hfield_num[h] = hfield_nrow[h] * hfield_ncol[h];
  check_blocks(hfield_adr, hfield_num, "hfield_adr", nhfielddata);
}

int Model::param_index(const std::string& name) {
  std::string names;
  for (int k = 0; k < kNumBatched; ++k) {
    if (name == kParamNames[k]) return k;
    names += (k ? ", " : "") + std::string(kParamNames[k]);
  }
  throw std::invalid_argument("phalanx: '" + name + "' is not a model parameter (" + names + ")");
}

const std::vector<double>& Model::param_field(int k) const {
  switch (k) {
#define PHX_PARAM_FIELD(Name, field_, check) \
  case kParam##Name:                         \
    return field_;
    PHX_BATCHED_FIELDS(PHX_PARAM_FIELD)
#undef PHX_PARAM_FIELD
    default:
      throw std::invalid_argument("phalanx: no parameter " + std::to_string(k));
  }
}

size_t Model::param_size(int k) const {
  return size_t(param_count(*this, k)) * param_width(k);
}

int Model::param_nbatch(int k) const {
  return param_batch[k].empty() ? 1 : int(param_batch[k].size() / param_size(k));
}

void Model::check_param_values(int k, const std::vector<double>& values, int ncopy) const {
  const std::string field = kParamNames[k];
  size_t n = param_size(k);
  for (size_t i = 0; i < values.size(); ++i) {
    double x = values[i];
    size_t entry = n ? i % n : 0;
    // what the message names: built only for a value that fails
    auto where = [&] {
      std::ostringstream value;
      value << x;
      return "entry " + std::to_string(entry) +
             (ncopy > 1 ? " of copy " + std::to_string(i / n) : "") + " is " + value.str();
    };
    if (!std::isfinite(x)) invalid(field, where() + ", expected a finite number");
    // values that leave the step ill-posed (ParamCheck)
    ParamCheck check = kParamChecks[k];
    if (check == kCheckNonNegative && x < 0) invalid(field, where() + ", expected >= 0");
    if (check == kCheckUnitInterval && !(x >= 0 && x <= 1))
      invalid(field, where() + ", expected a value in [0, 1]");
    if (check == kCheckGeomSize) {
      // the sizes a geom type uses must be positive (plane, mesh, height field: none; sphere:
      // radius; capsule and cylinder: radius and half-length; box and ellipsoid: three)
      int g = int(entry / 3), c = int(entry % 3), t = geom_type[g];
      int used = t == kGeomSphere                          ? 1
                 : t == kGeomCapsule || t == kGeomCylinder ? 2
                 : t == kGeomBox || t == kGeomEllipsoid    ? 3
                                                           : 0;
      if (c < used && !(x > 0)) invalid(field, where() + ", expected > 0");
    }
    if (check == kCheckQuaternion && entry % 4 == 3 && values[i] == 0 && values[i - 1] == 0 &&
        values[i - 2] == 0 && values[i - 3] == 0)
      invalid(field, "entries " + std::to_string(entry - 3) + " to " + std::to_string(entry) +
                         (ncopy > 1 ? " of copy " + std::to_string(i / n) : "") +
                         " are zero, expected a quaternion");
  }
}

void Model::set_parameter(const std::string& name, const std::vector<double>& values) {
  int k = param_index(name);
  size_t n = param_size(k);
  if (n == 0 && values.empty()) {  // a parameter of no entities (a model without tendons)
    param_batch[k].clear();
    return;
  }
  if (values.empty() || (n ? values.size() % n != 0 : true)) {
    throw std::invalid_argument("phalanx: " + name + " must hold " + std::to_string(n) +
                                " values (one copy, shared) or a multiple of that (one copy per "
                                "environment), got " + std::to_string(values.size()));
  }
  int ncopy = int(values.size() / n);
  check_param_values(k, values, ncopy);
  std::vector<double>& field = const_cast<std::vector<double>&>(param_field(k));
  field.assign(values.begin(), values.begin() + long(n));
  if (ncopy > 1) {
    param_batch[k] = values;
  } else {
    param_batch[k].clear();
  }
  if (k == kParamGeomSize) update_rbound();
}

void Model::update_rbound() {
  geom_rbound.assign(ngeom, 0);
  int ncopy = param_nbatch(kParamGeomSize);
  for (int c = 0; c < ncopy; ++c) {
    const double* size = ncopy > 1 ? &param_batch[kParamGeomSize][size_t(c) * 3 * ngeom]
                                   : geom_size.data();
    for (int g = 0; g < ngeom; g++)
      geom_rbound[g] = std::max(geom_rbound[g], phx::geom_rbound(geom_type[g], size + 3 * g));
  }
  // a mesh's bound is its farthest hull vertex (its geom_size plays no part in collisions)
  for (int g = 0; g < ngeom; g++) {
    if (geom_type[g] != kGeomMesh || geom_dataid[g] < 0 || geom_dataid[g] >= nmesh) continue;
    int k = geom_dataid[g];
    for (int v = mesh_vertadr[k]; v < mesh_vertadr[k] + mesh_vertnum[k]; v++) {
      const double* p = &mesh_vert[3 * size_t(v)];
      geom_rbound[g] = std::max(geom_rbound[g], std::sqrt(p[0] * p[0] + p[1] * p[1] + p[2] * p[2]));
    }
  }
}

int Model::body_id(const std::string& name) const {
  return find_name(body_names, name);
}
int Model::joint_id(const std::string& name) const {
  return find_name(jnt_names, name);
}
int Model::geom_id(const std::string& name) const {
  return find_name(geom_names, name);
}
int Model::actuator_id(const std::string& name) const {
  return find_name(actuator_names, name);
}
int Model::site_id(const std::string& name) const {
  return find_name(site_names, name);
}

Model load_model(const std::string& path) {
  std::string ext;
  if (size_t dot = path.find_last_of('.'); dot != std::string::npos) ext = path.substr(dot);
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext == ".xml" || ext == ".mjcf") return load_mjcf(path);
  if (ext == ".urdf") return load_urdf(path);
  throw std::invalid_argument("load_model: cannot tell the format of '" + path +
                              "' from its extension (expected .xml, .mjcf or .urdf)");
}

}  // namespace phx
