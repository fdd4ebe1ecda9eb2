// Model: the static description of a mechanism, as flat MuJoCo-style arrays in double.
//
// A Model is produced on the host by a loader (MJCF or URDF) and is read-only afterwards.
// DeviceModel (host/api.h) converts it to the scalar type and device of a run.
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

// Simulation options (MJCF <option>): the table PHX_MODEL_OPTIONS (phalanx/model_fields.h).
struct Options {
  using real = double;
  using flag = bool;
#define PHX_HOST_OPTION(kind, name, value, comment) kind name = value;
  PHX_MODEL_OPTIONS(PHX_HOST_OPTION)
#undef PHX_HOST_OPTION
  std::array<double, 3> gravity{0, 0, -9.81};  // gravitational acceleration (m/s^2)
  std::array<double, 3> wind{0, 0, 0};         // velocity of the medium (m/s), fluid forces
};

struct Model {
  using real = double;

  std::string name;    // model name (MJCF <mujoco model=...>, URDF <robot name=...>)
  std::string source;  // path the model was loaded from

  // counts (PHX_MODEL_COUNTS; npair, npair_convex and nexclude from compute_pairs)
#define PHX_HOST_COUNT(name, comment) int name = 0;
  PHX_MODEL_COUNTS(PHX_HOST_COUNT)
#undef PHX_HOST_COUNT
  // contacts each environment can hold; more sets kStatusContactOverflow (default from the
  // pairs' manifold sizes, capped; 0 before finalize)
  int nconmax = 0;

  Options opt;

  // the arrays of PHX_MODEL_ARRAYS (phalanx/model_fields.h), each of count x width numbers
#define PHX_HOST_ARRAY(kind, name, count, width, comment) std::vector<kind> name;
  PHX_MODEL_ARRAYS(PHX_HOST_ARRAY)
#undef PHX_HOST_ARRAY

  // names ("" where the model gave none)
  std::vector<std::string> body_names;      // (nbody)
  std::vector<std::string> jnt_names;       // (njnt)
  std::vector<std::string> geom_names;      // (ngeom)
  std::vector<std::string> actuator_names;  // (nu)
  std::vector<std::string> site_names;      // (nsite)

  // What the loader accepted but did not use, one entry per element or attribute kind, each
  // naming it and where it first appeared ("light (humanoid.xml:53), 2 times").
  std::vector<std::string> ignored;

  // Per-environment values of the differentiable parameters and of the other per-environment
  // fields (a height field's terrain), in Param order (phalanx/model_fields.h): param_batch[k]
  // is empty, and the field above is shared by all environments, or holds nbatch >= 2 copies of
  // that field one after the other, of which environment e reads copy e % nbatch. The field
  // above keeps copy 0. Set with set_parameter.
  std::array<std::vector<double>, kNumBatched> param_batch;

  // Replace parameter (or per-environment field) `name` (kParamNames) with `values`: one copy of
  // the field (shared by all environments; clears a per-environment batch) or nbatch >= 2 copies
  // one after the other (per environment). Values are checked as validate() checks the field
  // (finite, masses, inertias and friction >= 0, restitution in [0, 1], used sizes > 0); on error,
  // an std::invalid_argument naming the parameter, the entry and the copy, and the model is
  // unchanged. Updates geom_rbound after a change of geom_size (the largest over copies).
  void set_parameter(const std::string& name, const std::vector<double>& values);
  // Param index of a parameter's or per-environment field's name; std::invalid_argument listing
  // the names otherwise
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
  // the part of validate for geom_dataid, the meshes' hull arrays and the height fields
  void validate_geom_data() const;
  void validate_equality() const;
  void validate_tendons() const;
  void validate_xpbd() const;
  void validate_xpbd_composite(int b) const;
  void validate_mocap() const;
  void validate_activation() const;

  // Fill the derived arrays (rootid, adr/num fields, dof arrays, qposadr/dofadr, counts) from
  // body_parentid, jnt_bodyid, jnt_type and geom_bodyid. Loaders call this last.
  void finalize();
  // tendon_length0 from qpos0 for fixed tendons when it was left empty (finalize)
  void fill_default_tendon_length0();
  void fill_default_mocap();

  // Recompute pair_geom, npair, npair_convex, nexclude and (when 0) nconmax from the geoms and
  // exclude_bodies; finalize calls it, and callers that change contype, conaffinity or
  // exclusions call it again.
  void compute_pairs();
  // geom_rbound from geom_type and geom_size (the largest over per-environment copies)
  void update_rbound();

  // Lookup by name; -1 when absent.
  int body_id(const std::string& name) const;
  int joint_id(const std::string& name) const;
  int geom_id(const std::string& name) const;
  int actuator_id(const std::string& name) const;
  int site_id(const std::string& name) const;
};

// MJCF: MuJoCo's compiler (mj_loadXML) then from_mujoco (host/mujoco_model.h), name and source
// set. Errors: std::runtime_error "<path>: <MuJoCo's message on one line>" (it names the element
// and the line; "<string>" for load_mjcf_string), or from_mujoco's refusal of physics Phalanx
// does not simulate. MuJoCo's compiler warnings are recorded in Model::ignored. Built without
// MuJoCo, both throw std::runtime_error. load_mjcf_string reads xml as if it were a file in
// `dir`: includes, meshdir and asset files resolve against dir.
Model load_mjcf(const std::string& path);
Model load_mjcf_string(const std::string& xml, const std::string& dir = ".");
// URDF (host/urdf.cpp). Throws std::runtime_error naming the file, the line and the element on
// malformed or unsupported input.
Model load_urdf(const std::string& path);
Model load_urdf_string(const std::string& xml);
// Chooses the loader by extension: .xml / .mjcf for MJCF, .urdf for URDF.
Model load_model(const std::string& path);

}  // namespace phx
