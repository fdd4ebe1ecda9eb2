// One list of the Model fields that kernels see: builds a ModelView<T> from a Model, given
// how to place a real array and an int array (on a device, or in host vectors of any scalar
// such as a Dual number for tests).
#pragma once

#include "host/model.h"
#include "phalanx/model_view.h"

namespace phx {

// real(const std::vector<double>&) -> const T*, integer(const std::vector<int>&) -> const int*
template <class T, class Real, class Integer>
ModelView<T> build_view(const Model& m, Real&& real, Integer&& integer) {
  ModelView<T> w{};
  w.nq = m.nq;
  w.nv = m.nv;
  w.nu = m.nu;
  w.nbody = m.nbody;
  w.njnt = m.njnt;
  w.ngeom = m.ngeom;
  w.timestep = T(m.opt.timestep);
  for (int i = 0; i < 3; ++i) w.gravity[i] = T(m.opt.gravity[i]);
  w.contact = m.opt.contact ? 1 : 0;
  w.limit = m.opt.limit ? 1 : 0;
  w.lcp_solver = m.opt.lcp_solver;
  w.lcp_iterations = m.opt.lcp_iterations;
  w.lcp_tolerance = T(m.opt.lcp_tolerance);
  w.lcp_residual_limit = T(m.opt.lcp_residual_limit);
  w.contact_gradient = m.opt.contact_gradient;
  w.erp = T(m.opt.erp);
  w.slop = T(m.opt.slop);
  w.npair = m.npair;
  w.nconmax = m.opt.contact ? m.nconmax : 0;
  int nlimit = 0;
  for (int j = 0; j < m.njnt; ++j) {
    bool scalar = m.jnt_type[j] == kJointHinge || m.jnt_type[j] == kJointSlide;
    nlimit += m.opt.limit && scalar && m.jnt_limited[j];
  }
  w.nefcmax = 3 * w.nconmax + nlimit;
  w.qpos0 = real(m.qpos0);
  w.qpos_spring = real(m.qpos_spring);
  w.body_parentid = integer(m.body_parentid);
  w.body_rootid = integer(m.body_rootid);
  w.body_jntnum = integer(m.body_jntnum);
  w.body_jntadr = integer(m.body_jntadr);
  w.body_dofnum = integer(m.body_dofnum);
  w.body_dofadr = integer(m.body_dofadr);
  w.body_pos = real(m.body_pos);
  w.body_quat = real(m.body_quat);
  w.body_ipos = real(m.body_ipos);
  w.body_iquat = real(m.body_iquat);
  w.body_mass = real(m.body_mass);
  w.body_inertia = real(m.body_inertia);
  w.jnt_type = integer(m.jnt_type);
  w.jnt_bodyid = integer(m.jnt_bodyid);
  w.jnt_qposadr = integer(m.jnt_qposadr);
  w.jnt_dofadr = integer(m.jnt_dofadr);
  w.jnt_pos = real(m.jnt_pos);
  w.jnt_axis = real(m.jnt_axis);
  w.jnt_stiffness = real(m.jnt_stiffness);
  w.jnt_limited = integer(m.jnt_limited);
  w.jnt_range = real(m.jnt_range);
  w.geom_type = integer(m.geom_type);
  w.geom_bodyid = integer(m.geom_bodyid);
  w.geom_condim = integer(m.geom_condim);
  w.geom_size = real(m.geom_size);
  w.geom_pos = real(m.geom_pos);
  w.geom_quat = real(m.geom_quat);
  w.geom_friction = real(m.geom_friction);
  w.geom_rbound = real(m.geom_rbound);
  w.geom_restitution = real(m.geom_restitution);
  w.pair_geom = integer(m.pair_geom);
  w.dof_bodyid = integer(m.dof_bodyid);
  w.dof_jntid = integer(m.dof_jntid);
  w.dof_parentid = integer(m.dof_parentid);
  w.dof_armature = real(m.dof_armature);
  w.dof_damping = real(m.dof_damping);
  w.actuator_trnid = integer(m.actuator_trnid);
  w.actuator_ctrllimited = integer(m.actuator_ctrllimited);
  w.actuator_gear = real(m.actuator_gear);
  w.actuator_ctrlrange = real(m.actuator_ctrlrange);
  return w;
}

}  // namespace phx
