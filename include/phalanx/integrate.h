// Position integration on the configuration manifold (MuJoCo's mj_integratePos): hinge and
// slide coordinates add, ball and free rotations compose with the local rotation vector.
#pragma once

#include "phalanx/math/quat.h"
#include "phalanx/model_view.h"
#include "phalanx/workspace.h"

namespace phx {

// qpos <- qpos (+) dt * qvel, in place
template <class T>
PHX_HD void integrate_pos(const ModelView<T>& m, T* qpos, const T* qvel, T dt) {
  for (int j = 0; j < m.njnt; ++j) {
    int qa = m.jnt_qposadr[j], da = m.jnt_dofadr[j];
    switch (m.jnt_type[j]) {
      case kJointFree:
        for (int i = 0; i < 3; ++i) qpos[qa + i] += dt * qvel[da + i];
        qa += 3;
        da += 3;
        [[fallthrough]];
      case kJointBall:
        integrate(Quat<T>::load(qpos + qa), Vec3<T>::load(qvel + da), dt).store(qpos + qa);
        break;
      default:
        qpos[qa] += dt * qvel[da];
    }
  }
}

// Adjoint of integrate_pos at (qpos, qvel) -> qpos_out: accumulates into adj_qpos (input
// configuration) and adj_qvel from adj_qpos_out; of the joints [j0, j1) only when given (j1 < 0:
// to the last), which read and write their own coordinates alone.
template <class T, class S>
PHX_HD void adj_integrate_pos(const ModelView<S>& m, const T* qpos, const T* qvel, T dt,
                              const T* adj_qpos_out, T* adj_qpos, T* adj_qvel, int j0 = 0,
                              int j1 = -1) {
  for (int j = j0; j < (j1 < 0 ? m.njnt : j1); ++j) {
    int qa = m.jnt_qposadr[j], da = m.jnt_dofadr[j];
    switch (m.jnt_type[j]) {
      case kJointFree:
        for (int i = 0; i < 3; ++i) {
          adj_qpos[qa + i] += adj_qpos_out[qa + i];
          adj_qvel[da + i] += dt * adj_qpos_out[qa + i];
        }
        qa += 3;
        da += 3;
        [[fallthrough]];
      case kJointBall: {
        Quat<T> adj_out = Quat<T>::load(adj_qpos_out + qa);
        if (adj_out.w == T(0) && adj_out.x == T(0) && adj_out.y == T(0) && adj_out.z == T(0))
          break;  // nothing to map (a Jacobian's rows of qvel'), and no sin and cos to take
        Quat<T> adj_q = Quat<T>::zero();
        Vec3<T> adj_v;
        adj_integrate(Quat<T>::load(qpos + qa), Vec3<T>::load(qvel + da), dt, adj_q, adj_v,
                      adj_out);
        adj_qpos[qa] += adj_q.w;
        adj_qpos[qa + 1] += adj_q.x;
        adj_qpos[qa + 2] += adj_q.y;
        adj_qpos[qa + 3] += adj_q.z;
        adj_v.add_to(adj_qvel + da);
        break;
      }
      default:
        adj_qpos[qa] += adj_qpos_out[qa];
        adj_qvel[da] += dt * adj_qpos_out[qa];
    }
  }
}

// Adjoint of the map from a change dq of qpos to its tangent displacement (hinge and slide
// coordinates as they are, a ball or free rotation's local rotation vector 2 Im(conj(q) dq),
// the inverse of integrate_pos to first order): from the tangent adjoint w (nv) into adj_qpos
// (nq), accumulated. For a unit quaternion q the rotation part gives adj_q += 2 q (0, w).
template <class T, class S>
PHX_HD void adj_tangent_to_qpos(const ModelView<S>& m, const T* qpos, const T* w, T* adj_qpos) {
  for (int j = 0; j < m.njnt; ++j) {
    int qa = m.jnt_qposadr[j], da = m.jnt_dofadr[j];
    switch (m.jnt_type[j]) {
      case kJointFree:
        for (int i = 0; i < 3; ++i) adj_qpos[qa + i] += w[da + i];
        qa += 3;
        da += 3;
        [[fallthrough]];
      case kJointBall: {
        Vec3<T> v = Vec3<T>::load(w + da);
        Quat<T> g = Quat<T>::load(qpos + qa) * Quat<T>{T(0), v.x, v.y, v.z};
        adj_qpos[qa] += T(2) * g.w;
        adj_qpos[qa + 1] += T(2) * g.x;
        adj_qpos[qa + 2] += T(2) * g.y;
        adj_qpos[qa + 3] += T(2) * g.z;
        break;
      }
      default:
        adj_qpos[qa] += w[da];
    }
  }
}

}  // namespace phx
