// ModelView: the read-only model as kernels see it, raw pointers into device (or host)
// arrays of one scalar type. Built by the host from a DeviceModel (host/device_model.h) and
// passed to kernels by value. Field meanings and shapes are those of phx::Model (host/model.h).
#pragma once

#include "phalanx/config.h"

namespace phx {

// The differentiable model parameters, in the order of every parameter list: gradients,
// parameter-Jacobian columns and per-environment values.
enum Param : int {
  kParamBodyMass,         // body_mass         (nbody)
  kParamBodyInertia,      // body_inertia      (nbody x 3)
  kParamDofDamping,       // dof_damping       (nv)
  kParamDofArmature,      // dof_armature      (nv)
  kParamJntStiffness,     // jnt_stiffness     (njnt)
  kParamActuatorGear,     // actuator_gear     (nu)
  kParamBodyIpos,         // body_ipos         (nbody x 3)
  kParamGeomFriction,     // geom_friction     (ngeom x 3)
  kParamGeomRestitution,  // geom_restitution  (ngeom)
  kParamGeomSize,         // geom_size         (ngeom x 3)
  kNumParams
};
inline constexpr const char* kParamNames[kNumParams] = {
    "body_mass",     "body_inertia", "dof_damping",   "dof_armature",     "jnt_stiffness",
    "actuator_gear", "body_ipos",    "geom_friction", "geom_restitution", "geom_size"};
// numbers per entity (body, dof, joint, actuator or geom) of parameter k
PHX_HD constexpr int param_width(int k) {
  return k == kParamBodyInertia || k == kParamBodyIpos || k == kParamGeomFriction ||
                 k == kParamGeomSize
             ? 3
             : 1;
}

template <class T>
struct ModelView {
  // counts
  int nq, nv, nu, nbody, njnt, ngeom;

  // options
  T timestep;
  T gravity[3];
  int contact;         // detect and resolve contacts (0 or 1)
  int limit;           // enforce joint limits (0 or 1)
  int lcp_solver;      // LcpSolver
  int lcp_iterations;  // projected Gauss-Seidel sweeps
  T lcp_tolerance;     // velocity tolerance of classification and exact re-solves
  T lcp_residual_limit;  // residual above which kStatusLcpNotConverged is set
  int contact_gradient;  // ContactGradient flags of the step adjoint
  T erp;               // fraction of penetration removed per step
  T slop;              // penetration left uncorrected

  // capacities of one environment
  int npair;    // candidate geom pairs
  int nconmax;  // contacts
  int nefcmax;  // constraint rows: 3 per contact plus one per limited hinge or slide joint

  // configuration
  const T* qpos0;        // (nq)
  const T* qpos_spring;  // (nq)

  // bodies
  const int* body_parentid;  // (nbody)
  const int* body_rootid;    // (nbody)
  const int* body_jntnum;    // (nbody)
  const int* body_jntadr;    // (nbody)
  const int* body_dofnum;    // (nbody)
  const int* body_dofadr;    // (nbody)
  const T* body_pos;         // (nbody x 3)
  const T* body_quat;        // (nbody x 4)
  const T* body_ipos;        // (nbody x 3)
  const T* body_iquat;       // (nbody x 4)
  const T* body_mass;        // (nbody)
  const T* body_inertia;     // (nbody x 3)

  // joints
  const int* jnt_type;     // (njnt)
  const int* jnt_bodyid;   // (njnt)
  const int* jnt_qposadr;  // (njnt)
  const int* jnt_dofadr;   // (njnt)
  const T* jnt_pos;        // (njnt x 3)
  const T* jnt_axis;       // (njnt x 3)
  const T* jnt_stiffness;  // (njnt)
  const int* jnt_limited;  // (njnt)
  const T* jnt_range;      // (njnt x 2)

  // dofs
  const int* dof_bodyid;    // (nv)
  const int* dof_jntid;     // (nv)
  const int* dof_parentid;  // (nv)
  const T* dof_armature;    // (nv)
  const T* dof_damping;     // (nv)

  // geoms
  const int* geom_type;        // (ngeom)
  const int* geom_bodyid;      // (ngeom)
  const int* geom_condim;      // (ngeom)
  const T* geom_size;          // (ngeom x 3)
  const T* geom_pos;           // (ngeom x 3)
  const T* geom_quat;          // (ngeom x 4)
  const T* geom_friction;      // (ngeom x 3)
  const T* geom_rbound;        // (ngeom)
  const T* geom_restitution;   // (ngeom)
  const int* pair_geom;        // (npair x 2)

  // actuators
  // per-environment parameters (ARCHITECTURE.md section 3): parameter k holds
  // param_nbatch[k] copies one after the other and environment e reads copy
  // e % param_nbatch[k] (see env_view); 0 or 1: one copy shared by all environments
  int param_nbatch[kNumParams];

  const int* actuator_trnid;        // (nu)
  const int* actuator_ctrllimited;  // (nu)
  const T* actuator_gear;           // (nu)
  const T* actuator_ctrlrange;      // (nu x 2)
};

// the entities parameter k has one entry (of param_width(k) numbers) for, in any struct with
// the counts (ModelView, the host's Model)
template <class M>
PHX_HD int param_count(const M& m, int k) {
  switch (k) {
    case kParamBodyMass:
    case kParamBodyInertia:
    case kParamBodyIpos:
      return m.nbody;
    case kParamDofDamping:
    case kParamDofArmature:
      return m.nv;
    case kParamJntStiffness:
      return m.njnt;
    case kParamActuatorGear:
      return m.nu;
    default:
      return m.ngeom;
  }
}

// numbers in one copy of parameter k
template <class T>
PHX_HD long param_size(const ModelView<T>& m, int k) {
  return long(param_count(m, k)) * param_width(k);
}

// the field of parameter k
template <class T>
PHX_HD const T*& param_field(ModelView<T>& m, int k) {
  switch (k) {
    case kParamBodyMass: return m.body_mass;
    case kParamBodyInertia: return m.body_inertia;
    case kParamDofDamping: return m.dof_damping;
    case kParamDofArmature: return m.dof_armature;
    case kParamJntStiffness: return m.jnt_stiffness;
    case kParamActuatorGear: return m.actuator_gear;
    case kParamBodyIpos: return m.body_ipos;
    case kParamGeomFriction: return m.geom_friction;
    case kParamGeomRestitution: return m.geom_restitution;
    default: return m.geom_size;
  }
}

// the model as environment e sees it: each per-environment parameter points at copy
// e % param_nbatch[k]. Kernels call this first and hand the result to the stage functions.
template <class T>
PHX_HD ModelView<T> env_view(const ModelView<T>& m, int e) {
  ModelView<T> r = m;
  for (int k = 0; k < kNumParams; ++k)
    if (m.param_nbatch[k] > 1) param_field(r, k) += (e % m.param_nbatch[k]) * param_size(m, k);
  return r;
}

}  // namespace phx
