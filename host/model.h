// Model: the static description of a mechanism, as flat MuJoCo-style arrays in double.
//
// A Model is produced on the host by a loader (MJCF or URDF) and is read-only afterwards.
// `compile_model` (host/device_model.h) converts it to the scalar type and device of a run.
// Field names and conventions follow MuJoCo's mjModel so that states and models can be moved
// between the two libraries: bodies are stored parents first (body 0 is the world), quaternions
// are (w, x, y, z), and a free joint's qvel is (linear velocity in world, angular velocity in
// the body frame).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "phalanx/config.h"
#include "phalanx/model_view.h"

namespace phx {

// Simulation options (MJCF <option>).
struct Options {
  double timestep = 0.002;                     // integration step (s)
  std::array<double, 3> gravity{0, 0, -9.81};  // gravitational acceleration (m/s^2)

  // constraints
  bool contact = true;           // detect and resolve contacts
  bool limit = true;             // enforce joint limits
  int lcp_solver = 0;            // LcpSolver: 0 PGS, 1 PGS then Nimble's stabilisation on the
                                 // clamping set, 2 Dantzig pivoting then stabilisation
  int lcp_iterations = 30;       // projected Gauss-Seidel sweeps per step
  double lcp_tolerance = 1e-6;   // velocity tolerance (m/s) of row classification and of
                                 // accepting an exact re-solve (stabilised solvers)
  double lcp_residual_limit = 1e-3;  // LCP residual (m/s) above which a step sets
                                     // kStatusLcpNotConverged
  int contact_gradient = 0;      // ContactGradient flags of step_vjp: complementarity-aware
                                 // classification, elastic-bounce correction
  double erp = 0.2;              // fraction of a penetration removed per step (Baumgarte)
  double slop = 1e-3;            // penetration (m or rad) left uncorrected, avoids jitter
};

struct Model {
  std::string name;    // model name (MJCF <mujoco model=...>, URDF <robot name=...>)
  std::string source;  // path the model was loaded from

  // counts
  int nq = 0;     // number of generalized coordinates
  int nv = 0;     // number of degrees of freedom
  int nu = 0;     // number of actuators
  int nbody = 0;  // number of bodies, including the world body 0
  int njnt = 0;   // number of joints
  int ngeom = 0;  // number of geoms

  Options opt;

  // default configuration and spring reference
  std::vector<double> qpos0;        // qpos at the reference configuration          (nq)
  std::vector<double> qpos_spring;  // reference qpos of joint springs              (nq)

  // bodies (parents before children; body 0 is the world with no joints or mass)
  std::vector<int> body_parentid;   // id of parent body                           (nbody)
  std::vector<int> body_rootid;     // id of the root of this body's tree          (nbody)
  std::vector<int> body_jntnum;     // number of joints of this body               (nbody)
  std::vector<int> body_jntadr;     // first joint id, -1 if none                  (nbody)
  std::vector<int> body_dofnum;     // number of dofs of this body                 (nbody)
  std::vector<int> body_dofadr;     // first dof id, -1 if none                    (nbody)
  std::vector<int> body_geomnum;    // number of geoms of this body                (nbody)
  std::vector<int> body_geomadr;    // first geom id, -1 if none                   (nbody)
  std::vector<double> body_pos;     // position offset rel. to parent body          (nbody x 3)
  std::vector<double> body_quat;    // orientation offset rel. to parent body       (nbody x 4)
  std::vector<double> body_ipos;    // centre of mass position in body frame        (nbody x 3)
  std::vector<double> body_iquat;   // principal inertia frame in body frame        (nbody x 4)
  std::vector<double> body_mass;    // mass (kg)                                    (nbody)
  std::vector<double> body_inertia; // principal moments of inertia about the com   (nbody x 3)

  // joints (ordered by body, then by appearance within the body)
  std::vector<int> jnt_type;         // JointType                                   (njnt)
  std::vector<int> jnt_bodyid;       // id of the joint's body                      (njnt)
  std::vector<int> jnt_qposadr;      // start address in qpos                       (njnt)
  std::vector<int> jnt_dofadr;       // start address in qvel                       (njnt)
  std::vector<int> jnt_limited;      // does the joint have limits (0 or 1)         (njnt)
  std::vector<double> jnt_pos;       // anchor position in body frame               (njnt x 3)
  std::vector<double> jnt_axis;      // unit axis in body frame (hinge, slide)      (njnt x 3)
  std::vector<double> jnt_range;     // joint limits (rad or m)                     (njnt x 2)
  std::vector<double> jnt_stiffness; // spring stiffness about qpos_spring          (njnt)

  // degrees of freedom
  std::vector<int> dof_bodyid;       // id of the dof's body                        (nv)
  std::vector<int> dof_jntid;        // id of the dof's joint                       (nv)
  std::vector<int> dof_parentid;     // previous dof on the path to the root, -1    (nv)
  std::vector<double> dof_armature;  // armature inertia added to M's diagonal      (nv)
  std::vector<double> dof_damping;   // viscous damping coefficient                 (nv)

  // geoms (ordered by body)
  std::vector<int> geom_type;         // GeomType                                   (ngeom)
  std::vector<int> geom_bodyid;       // id of the geom's body                      (ngeom)
  std::vector<int> geom_contype;      // contact type bit mask                      (ngeom)
  std::vector<int> geom_conaffinity;  // contact affinity bit mask                  (ngeom)
  std::vector<int> geom_condim;       // contact dimensionality (1, 3, 4, 6)        (ngeom)
  std::vector<double> geom_size;      // type-specific sizes, MuJoCo's meaning      (ngeom x 3)
  std::vector<double> geom_pos;       // position offset in body frame              (ngeom x 3)
  std::vector<double> geom_quat;      // orientation offset in body frame           (ngeom x 4)
  std::vector<double> geom_friction;  // sliding, torsional, rolling friction       (ngeom x 3)
  std::vector<double> geom_rbound;    // radius of a bounding sphere at geom_pos; 0 = infinite
                                      //                                           (ngeom)
  std::vector<double> geom_restitution;  // coefficient of restitution; a pair uses the larger
                                         // (default 0: plastic impacts)            (ngeom)

  // geom pairs that may collide, after contype/conaffinity, same-body, parent-child and
  // explicit exclusions (MuJoCo's rules), in deterministic order (g1 < g2)   (npair x 2)
  std::vector<int> pair_geom;
  int npair = 0;
  // contacts each environment can hold; more sets kStatusContactOverflow (default from the
  // pairs' manifold sizes, capped; 0 before finalize)
  int nconmax = 0;

  // explicit contact exclusions (MJCF <contact><exclude>), pairs of body ids (nexclude x 2)
  std::vector<int> exclude_bodies;

  // actuators (motors acting on one joint: force = gear * clamp(ctrl, ctrlrange))
  std::vector<int> actuator_trnid;        // id of the transmission joint          (nu)
  std::vector<int> actuator_ctrllimited;  // is ctrl clamped to ctrlrange (0 or 1) (nu)
  std::vector<double> actuator_gear;      // scalar gear ratio                     (nu)
  std::vector<double> actuator_ctrlrange; // ctrl limits                           (nu x 2)

  // names ("" where the model gave none)
  std::vector<std::string> body_names;      // (nbody)
  std::vector<std::string> jnt_names;       // (njnt)
  std::vector<std::string> geom_names;      // (ngeom)
  std::vector<std::string> actuator_names;  // (nu)

  // What the loader accepted but did not use, one entry per element or attribute kind, each
  // naming it and where it first appeared ("light (humanoid.xml:53), 2 times").
  std::vector<std::string> ignored;

  // Per-environment values of the differentiable parameters (ARCHITECTURE.md section 3), in
  // Param order (include/phalanx/model_view.h): param_batch[k] is empty, and the field above is
  // shared by all environments, or holds nbatch >= 2 copies of that field one after the other,
  // of which environment e reads copy e % nbatch. The field above keeps copy 0. Set with
  // set_parameter.
  std::array<std::vector<double>, kNumParams> param_batch;

  // Replace parameter `name` (kParamNames) with `values`: one copy of the field (shared by all
  // environments; clears a per-environment batch) or nbatch >= 2 copies one after the other
  // (per environment). Values are checked as validate() checks the field (finite, masses,
  // inertias and friction >= 0, restitution in [0, 1], used sizes > 0); on error, an
  // std::invalid_argument naming the parameter, the entry and the copy, and the model is
  // unchanged. Updates geom_rbound after a change of geom_size (the largest over copies).
  void set_parameter(const std::string& name, const std::vector<double>& values);
  // Param index of a parameter name; std::invalid_argument listing the names otherwise
  static int param_index(const std::string& name);
  // the field of parameter k and the numbers in one copy of it
  const std::vector<double>& param_field(int k) const;
  size_t param_size(int k) const;
  // copies of parameter k: 1 when shared
  int param_nbatch(int k) const;
  // throw std::invalid_argument naming the first value of parameter k that validate() rejects
  // (ncopy: copies in values, for the message)
  void check_param_values(int k, const std::vector<double>& values, int ncopy) const;

  // Check every count against the array sizes and every index against its range.
  // Throws std::invalid_argument naming the first inconsistent field.
  void validate() const;
  // With opt.contact, throws std::invalid_argument naming the first candidate pair (pair_geom)
  // whose geom type has no collision function yet (height field, ellipsoid, cylinder, mesh):
  // such a pair is never silently skipped. Called when the model is compiled for a device.
  void check_collision_support() const;

  // Fill the derived arrays (rootid, adr/num fields, dof arrays, qposadr/dofadr, counts) from
  // body_parentid, jnt_bodyid, jnt_type and geom_bodyid. Loaders call this last.
  void finalize();

  // Recompute pair_geom, npair and (when 0) nconmax from the geoms; finalize calls it, and
  // callers that change contype, conaffinity or exclusions call it again.
  void compute_pairs();
  // geom_rbound from geom_type and geom_size (the largest over per-environment copies)
  void update_rbound();

  // Lookup by name; -1 when absent.
  int body_id(const std::string& name) const;
  int joint_id(const std::string& name) const;
  int geom_id(const std::string& name) const;
  int actuator_id(const std::string& name) const;
};

// Loaders. Each throws std::runtime_error naming the file, the line and the element on
// malformed or unsupported input.
Model load_mjcf(const std::string& path);
Model load_mjcf_string(const std::string& xml, const std::string& dir = ".");
Model load_urdf(const std::string& path);
Model load_urdf_string(const std::string& xml);
// Chooses the loader by extension: .xml / .mjcf for MJCF, .urdf for URDF.
Model load_model(const std::string& path);

}  // namespace phx
