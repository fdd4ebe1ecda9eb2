// ModelView: the read-only model as kernels see it, raw pointers into device (or host)
// arrays of one scalar type. Built by the host from a DeviceModel (host/device_model.h) and
// passed to kernels by value. Field meanings and shapes are those of phx::Model (host/model.h).
#pragma once

#include "phalanx/config.h"

namespace phx {

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
  const int* actuator_trnid;        // (nu)
  const int* actuator_ctrllimited;  // (nu)
  const T* actuator_gear;           // (nu)
  const T* actuator_ctrlrange;      // (nu x 2)
};

}  // namespace phx
