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

  // dofs
  const int* dof_bodyid;    // (nv)
  const int* dof_jntid;     // (nv)
  const int* dof_parentid;  // (nv)
  const T* dof_armature;    // (nv)
  const T* dof_damping;     // (nv)

  // actuators
  const int* actuator_trnid;        // (nu)
  const int* actuator_ctrllimited;  // (nu)
  const T* actuator_gear;           // (nu)
  const T* actuator_ctrlrange;      // (nu x 2)
};

}  // namespace phx
