// Position and velocity kinematics: qpos -> body frames, joint anchors and axes, spatial
// inertias and motion subspaces about each tree's reference point; qvel -> body velocities.
// Follows MuJoCo's mj_kinematics / mj_comPos / mj_comVel so that states transfer unchanged.
#pragma once

#include "phalanx/math/quat.h"
#include "phalanx/math/spatial.h"
#include "phalanx/model_view.h"
#include "phalanx/workspace.h"

namespace phx {

// Body b's offset from its parent: body_pos and body_quat, or for a mocap body its pose in world
// (mocap_pos and the normalised mocap_quat; MuJoCo's mj_kinematics).
template <class T, class S>
PHX_HD PHX_INLINE void body_offset(const ModelView<S>& m, int b, Vec3<T>& pos, Quat<T>& quat) {
  const int id = m.body_mocapid[b];
  if (id < 0) {
    pos = Vec3<T>::load(m.body_pos + 3 * b);
    quat = Quat<T>::load(m.body_quat + 4 * b);
  } else {
    pos = Vec3<T>::load(m.mocap_pos + 3 * id);
    quat = normalize(Quat<T>::load(m.mocap_quat + 4 * id));
  }
}

// body frames, joint anchors and axes in world from qpos
template <class T>
PHX_HD void kinematics(const ModelView<T>& m, const T* qpos, Workspace<T>& w) {
  // world body
  Vec3<T>{}.store(w.xpos);
  Quat<T>{}.store(w.xquat);
  w.xquat_scale[0] = T(1);
  Mat3<T>::identity().store(w.xmat);

  for (int b = 1; b < m.nbody; ++b) {
    int p = m.body_parentid[b];
    int jnt0 = m.body_jntadr[b], njnt = m.body_jntnum[b];
    Vec3<T> pos;
    Quat<T> quat;

    if (njnt > 0 && m.jnt_type[jnt0] == kJointFree) {
      // free joint: the body frame is qpos itself
      int a = m.jnt_qposadr[jnt0];
      pos = Vec3<T>::load(qpos + a);
      quat = normalize(Quat<T>::load(qpos + a + 3));
      pos.store(w.xanchor + 3 * jnt0);
      Vec3<T>{T(0), T(0), T(1)}.store(w.xaxis + 3 * jnt0);
    } else {
      // offset from the parent
      Mat3<T> Rp = Mat3<T>::load(w.xmat + 9 * p);
      Vec3<T> bpos;
      Quat<T> bquat;
      body_offset(m, b, bpos, bquat);
      pos = Vec3<T>::load(w.xpos + 3 * p) + Rp * bpos;
      quat = Quat<T>::load(w.xquat + 4 * p) * bquat;

      // joints in order, each about its anchor in the current body frame; R tracks quat
      Mat3<T> R = to_mat(quat);
      for (int j = jnt0; j < jnt0 + njnt; ++j) {
        int a = m.jnt_qposadr[j];
        Vec3<T> jpos = Vec3<T>::load(m.jnt_pos + 3 * j);
        Vec3<T> jaxis = Vec3<T>::load(m.jnt_axis + 3 * j);
        Vec3<T> anchor = R * jpos + pos;
        Vec3<T> axis = R * jaxis;
        anchor.store(w.xanchor + 3 * j);
        axis.store(w.xaxis + 3 * j);
        quat.store(w.jnt_quat_in + 4 * j);

        switch (m.jnt_type[j]) {
          case kJointSlide:
            pos += (qpos[a] - m.qpos0[a]) * axis;
            break;
          case kJointBall:
          case kJointHinge: {
            Quat<T> qloc = m.jnt_type[j] == kJointBall ? normalize(Quat<T>::load(qpos + a))
                                                        : axis_angle(jaxis, qpos[a] - m.qpos0[a]);
            qloc.store(w.jnt_qloc + 4 * j);
            quat = quat * qloc;
            R = to_mat(quat);
            pos = anchor - R * jpos;  // keep the anchor fixed
            break;
          }
          default:  // a free joint elsewhere is rejected by Model::validate
            break;
        }
        quat.store(w.jnt_quat_out + 4 * j);
      }
    }

    quat = normalize(quat, w.xquat_scale[b]);
    pos.store(w.xpos + 3 * b);
    quat.store(w.xquat + 4 * b);
    to_mat(quat).store(w.xmat + 9 * b);
  }
}

// spatial inertias and motion subspaces about each tree's reference point
template <class T>
PHX_HD void com_pos(const ModelView<T>& m, Workspace<T>& w) {
  // body inertias: rotate the principal inertia into world and shift it to the reference
  for (int b = 0; b < m.nbody; ++b) {
    Inertia<T> J;
    if (b > 0) {
      Vec3<T> ref = Vec3<T>::load(w.xpos + 3 * m.body_rootid[b]);
      Mat3<T> R = Mat3<T>::load(w.xmat + 9 * b);
      Mat3<T> Ri = R * to_mat(Quat<T>::load(m.body_iquat + 4 * b));
      Vec3<T> xipos = Vec3<T>::load(w.xpos + 3 * b) + R * Vec3<T>::load(m.body_ipos + 3 * b);
      xipos.store(w.xipos + 3 * b);
      Ri.store(w.ximat + 9 * b);
      Vec3<T> c = xipos - ref;
      T mass = m.body_mass[b];
      const T* d = m.body_inertia + 3 * b;
      // Ri diag(d) Ri^T + mass (|c|^2 1 - c c^T)
      T cc = dot(c, c);
      const int rr[6] = {0, 1, 2, 0, 0, 1}, cl[6] = {0, 1, 2, 1, 2, 2};
      for (int k = 0; k < 6; ++k) {
        int r = rr[k], s = cl[k];
        T v = Ri(r, 0) * d[0] * Ri(s, 0) + Ri(r, 1) * d[1] * Ri(s, 1) + Ri(r, 2) * d[2] * Ri(s, 2);
        J.I[k] = v + mass * ((r == s ? cc : T(0)) - c[r] * c[s]);
      }
      J.h = mass * c;
      J.m = mass;
    } else {  // the world: its frame
      Vec3<T>::load(w.xpos).store(w.xipos);
      Mat3<T>::load(w.xmat).store(w.ximat);
    }
    J.store(w.cinert + 10 * b);
  }

  // motion subspaces of the dofs
  for (int j = 0; j < m.njnt; ++j) {
    int b = m.jnt_bodyid[j], da = m.jnt_dofadr[j];
    Vec3<T> ref = Vec3<T>::load(w.xpos + 3 * m.body_rootid[b]);
    Vec3<T> r = Vec3<T>::load(w.xanchor + 3 * j) - ref;  // anchor about the reference
    Mat3<T> R = Mat3<T>::load(w.xmat + 9 * b);
    switch (m.jnt_type[j]) {
      case kJointFree:
        // translations along the world axes, then rotations like a ball joint
        for (int k = 0; k < 3; ++k) {
          Vec3<T> e;
          e[k] = T(1);
          Vec6<T>::make(Vec3<T>{}, e).store(w.cdof + 6 * (da + k));
        }
        da += 3;
        [[fallthrough]];
      case kJointBall:
        // rotations about the body frame axes through the anchor
        for (int k = 0; k < 3; ++k) {
          Vec3<T> a = R.col(k);
          Vec6<T>::make(a, cross(r, a)).store(w.cdof + 6 * (da + k));
        }
        break;
      case kJointSlide:
        Vec6<T>::make(Vec3<T>{}, Vec3<T>::load(w.xaxis + 3 * j)).store(w.cdof + 6 * da);
        break;
      case kJointHinge: {
        Vec3<T> a = Vec3<T>::load(w.xaxis + 3 * j);
        Vec6<T>::make(a, cross(r, a)).store(w.cdof + 6 * da);
        break;
      }
    }
  }
}

// world frame of a frame fixed to body b at position p and orientation q in it: position
// xpos + R p to pos, rotation R Q(q) to mat
template <class T, class S>
PHX_HD void body_fixed_frame(const Workspace<T>& w, int b, const S* p, const S* q, T* pos, T* mat) {
  Mat3<T> R = Mat3<T>::load(w.xmat + 9 * b);
  (Vec3<T>::load(w.xpos + 3 * b) + R * Vec3<T>::load(p)).store(pos);
  (R * to_mat(Quat<T>::load(q))).store(mat);
}

// world frame of site s (MuJoCo's site_xpos and site_xmat)
template <class T>
PHX_HD void site_frame(const ModelView<T>& m, const Workspace<T>& w, int s, T* pos, T* mat) {
  body_fixed_frame(w, m.site_bodyid[s], m.site_pos + 3 * s, m.site_quat + 4 * s, pos, mat);
}

// body velocities and cdof_dot from qvel (MuJoCo's mj_comVel)
template <class T>
PHX_HD void com_vel(const ModelView<T>& m, const T* qvel, Workspace<T>& w) {
  Vec6<T>{}.store(w.cvel);
  for (int b = 1; b < m.nbody; ++b) {
    Vec6<T> v = Vec6<T>::load(w.cvel + 6 * m.body_parentid[b]);
    int jnt0 = m.body_jntadr[b];
    for (int j = jnt0; j < jnt0 + m.body_jntnum[b]; ++j) {
      int da = m.jnt_dofadr[j];
      int type = m.jnt_type[j];
      if (type == kJointFree) {
        // fixed world axes: zero derivative; the translation moves the rotation axes' anchor
        for (int k = 0; k < 3; ++k) {
          Vec6<T>{}.store(w.cdof_dot + 6 * (da + k));
          v += qvel[da + k] * Vec6<T>::load(w.cdof + 6 * (da + k));
        }
        da += 3;
      }
      // all dofs of a ball (or free rotation) use the velocity before the joint
      int n = (type == kJointFree || type == kJointBall) ? 3 : 1;
      for (int k = 0; k < n; ++k) {
        cross_motion(v, Vec6<T>::load(w.cdof + 6 * (da + k))).store(w.cdof_dot + 6 * (da + k));
      }
      for (int k = 0; k < n; ++k) v += qvel[da + k] * Vec6<T>::load(w.cdof + 6 * (da + k));
    }
    v.store(w.cvel + 6 * b);
  }
}

// ---- adjoints ----------------------------------------------------------------------------

// adj_R += a b^T
template <class T>
PHX_HD void add_outer(Mat3<T>& adj_R, const Vec3<T>& a, const Vec3<T>& b) {
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) adj_R.m[3 * i + j] += a[i] * b[j];
}

template <class T>
PHX_HD void add_to(T* p, const Mat3<T>& A) {
  for (int i = 0; i < 9; ++i) p[i] += A.m[i];
}

// Adjoint of kinematics: from the adjoints of xpos, xquat, xmat, xanchor and xaxis in `a`
// to adj_qpos and, when given, to adj_mocap_pos, adj_mocap_quat and adj_body_pos (the bodies'
// offsets from their parents; accumulated). Walks each
// body's joint chain backward, children before parents, from the orientations and joint
// rotations the forward kinematics left in the workspace.
template <class T, class S>
PHX_HD void adj_kinematics(const ModelView<S>& m, const T* qpos, const Workspace<S>& w,
                           AdjWorkspace<T>& a, T* adj_qpos, T* adj_mocap_pos = nullptr,
                           T* adj_mocap_quat = nullptr, T* adj_body_pos = nullptr) {
  for (int b = m.nbody - 1; b > 0; --b) {
    int p = m.body_parentid[b];
    int jnt0 = m.body_jntadr[b], njnt = m.body_jntnum[b];

    // the final orientation: xmat = to_mat(xquat)
    Quat<T> quat = Quat<T>::load(w.xquat + 4 * b);
    Quat<T> adj_quat = Quat<T>::load(a.xquat + 4 * b);
    adj_to_mat(quat, adj_quat, Mat3<T>::load(a.xmat + 9 * b));
    Vec3<T> adj_pos = Vec3<T>::load(a.xpos + 3 * b);

    if (njnt > 0 && m.jnt_type[jnt0] == kJointFree) {
      // pos = qpos[0:3]; quat = normalize(normalize(qpos[3:7]))
      int qa = m.jnt_qposadr[jnt0];
      Quat<T> raw = Quat<T>::load(qpos + qa + 3), unit = normalize(raw);
      Quat<T> adj_unit = Quat<T>::zero(), adj_raw = Quat<T>::zero();
      adj_normalize(unit, adj_unit, adj_quat);
      adj_normalize(raw, adj_raw, adj_unit);
      adj_pos += Vec3<T>::load(a.xanchor + 3 * jnt0);
      for (int i = 0; i < 3; ++i) adj_qpos[qa + i] += adj_pos[i];
      adj_qpos[qa + 3] += adj_raw.w;
      adj_qpos[qa + 4] += adj_raw.x;
      adj_qpos[qa + 5] += adj_raw.y;
      adj_qpos[qa + 6] += adj_raw.z;
      continue;
    }

    // quat = normalize(q), q the orientation after the last joint
    Vec3<T> bpos;
    Quat<T> bquat;
    body_offset(m, b, bpos, bquat);
    Quat<T> adj_q = Quat<T>::zero();
    adj_normalize_unit(quat, T(w.xquat_scale[b]), adj_q, adj_quat);

    // joints backward
    for (int j = jnt0 + njnt - 1; j >= jnt0; --j) {
      int qa = m.jnt_qposadr[j];
      Quat<T> q_in = Quat<T>::load(w.jnt_quat_in + 4 * j);
      Vec3<T> jpos = Vec3<T>::load(m.jnt_pos + 3 * j);
      Vec3<T> jaxis = Vec3<T>::load(m.jnt_axis + 3 * j);
      Vec3<T> adj_anchor = Vec3<T>::load(a.xanchor + 3 * j);
      Vec3<T> adj_axis = Vec3<T>::load(a.xaxis + 3 * j);
      Vec3<T> adj_pos_in;
      Quat<T> adj_q_in = Quat<T>::zero();

      if (m.jnt_type[j] == kJointSlide) {
        // pos_out = pos_in + (qpos - qpos0) axis, orientation unchanged
        Vec3<T> axis = Vec3<T>::load(w.xaxis + 3 * j);
        adj_pos_in += adj_pos;
        adj_axis += (qpos[qa] - m.qpos0[qa]) * adj_pos;
        adj_qpos[qa] += dot(axis, adj_pos);
        adj_q_in = adj_q;
      } else {
        // q_out = q_in * qloc; pos_out = anchor - to_mat(q_out) jpos
        bool ball = m.jnt_type[j] == kJointBall;
        Quat<T> qloc = Quat<T>::load(w.jnt_qloc + 4 * j);
        Quat<T> q_out = Quat<T>::load(w.jnt_quat_out + 4 * j);  // q_in qloc
        adj_anchor += adj_pos;
        Mat3<T> adj_Rout;
        add_outer(adj_Rout, -adj_pos, jpos);
        Quat<T> adj_q_out = adj_q;
        adj_to_mat(q_out, adj_q_out, adj_Rout);
        Quat<T> adj_qloc = Quat<T>::zero();
        adj_mul(q_in, qloc, adj_q_in, adj_qloc, adj_q_out);
        if (ball) {  // a hinge's qpos is one number: only a ball's holds a quaternion
          Quat<T> adj_raw = Quat<T>::zero();
          adj_normalize(Quat<T>::load(qpos + qa), adj_raw, adj_qloc);
          adj_qpos[qa] += adj_raw.w;
          adj_qpos[qa + 1] += adj_raw.x;
          adj_qpos[qa + 2] += adj_raw.y;
          adj_qpos[qa + 3] += adj_raw.z;
        } else {
          adj_qpos[qa] += adj_axis_angle(jaxis, qloc, adj_qloc);
        }
      }
      // anchor = R jpos + pos_in; axis = R jaxis, with R = to_mat(q_in)
      Mat3<T> adj_R;
      add_outer(adj_R, adj_anchor, jpos);
      add_outer(adj_R, adj_axis, jaxis);
      adj_pos_in += adj_anchor;
      adj_to_mat(q_in, adj_q_in, adj_R);
      adj_pos = adj_pos_in;
      adj_q = adj_q_in;
    }

    // pos0 = xpos_p + Rp bpos; q0 = xquat_p * bquat
    adj_pos.add_to(a.xpos + 3 * p);
    Mat3<T> adj_Rp;
    add_outer(adj_Rp, adj_pos, bpos);
    add_to(a.xmat + 9 * p, adj_Rp);
    Quat<T> adj_qp = Quat<T>::load(a.xquat + 4 * p), adj_bquat = Quat<T>::zero();
    adj_mul(Quat<T>::load(w.xquat + 4 * p), bquat, adj_qp, adj_bquat, adj_q);
    adj_qp.store(a.xquat + 4 * p);
    // a mocap body's offset: bpos = mocap_pos, bquat = normalize(mocap_quat)
    const int id = m.body_mocapid[b];
    if (id >= 0 && adj_mocap_pos)
      mul_transpose(Mat3<T>::load(w.xmat + 9 * p), adj_pos).add_to(adj_mocap_pos + 3 * id);
    if (id < 0 && adj_body_pos)
      mul_transpose(Mat3<T>::load(w.xmat + 9 * p), adj_pos).add_to(adj_body_pos + 3 * b);
    if (id >= 0 && adj_mocap_quat) {
      Quat<T> adj_raw = Quat<T>::zero();
      adj_normalize(Quat<T>::load(m.mocap_quat + 4 * id), adj_raw, adj_bquat);
      adj_mocap_quat[4 * id] += adj_raw.w;
      adj_mocap_quat[4 * id + 1] += adj_raw.x;
      adj_mocap_quat[4 * id + 2] += adj_raw.y;
      adj_mocap_quat[4 * id + 3] += adj_raw.z;
    }
  }
}

// Adjoint of com_pos: from the adjoints of cinert and cdof to those of xpos, xmat, xanchor,
// xaxis and of the body masses and principal inertias.
template <class T, class S>
PHX_HD void adj_com_pos(const ModelView<S>& m, const Workspace<S>& w, AdjWorkspace<T>& a,
                        const ModelAdjoint<T>& adj_model) {
  // motion subspaces: cdof = [axis; r x axis] with r = anchor - reference
  for (int j = 0; j < m.njnt; ++j) {
    int b = m.jnt_bodyid[j], da = m.jnt_dofadr[j];
    T* adj_ref = a.xpos + 3 * m.body_rootid[b];
    Vec3<T> r = Vec3<T>::load(w.xanchor + 3 * j) - Vec3<T>::load(w.xpos + 3 * m.body_rootid[b]);
    Vec3<T> adj_r;
    int type = m.jnt_type[j];
    if (type == kJointSlide) {
      Vec6<T>::load(a.cdof + 6 * da).lin().add_to(a.xaxis + 3 * j);
      continue;
    }
    if (type == kJointFree) da += 3;  // translations have constant subspaces
    int n = (type == kJointFree || type == kJointBall) ? 3 : 1;
    Mat3<T> R = Mat3<T>::load(w.xmat + 9 * m.jnt_bodyid[j]);
    for (int k = 0; k < n; ++k) {
      Vec6<T> g = Vec6<T>::load(a.cdof + 6 * (da + k));
      Vec3<T> axis = n == 3 ? R.col(k) : Vec3<T>::load(w.xaxis + 3 * j);
      Vec3<T> adj_axis = g.ang();
      adj_cross(r, axis, adj_r, adj_axis, g.lin());
      if (n == 3) {
        for (int i = 0; i < 3; ++i) a.xmat[9 * b + 3 * i + k] += adj_axis[i];
      } else {
        adj_axis.add_to(a.xaxis + 3 * j);
      }
    }
    adj_r.add_to(a.xanchor + 3 * j);
    (-adj_r).add_to(adj_ref);
  }

  // body inertias: I = Ri diag(d) Ri^T + mass (|c|^2 1 - c c^T), h = mass c, with
  // Ri = R to_mat(iquat) and c = xpos + R ipos - reference
  for (int b = 1; b < m.nbody; ++b) {
    Inertia<T> g = Inertia<T>::load(a.cinert + 10 * b);
    Mat3<T> R = Mat3<T>::load(w.xmat + 9 * b);
    Mat3<T> Q = to_mat(Quat<T>::load(m.body_iquat + 4 * b));
    Mat3<T> Ri = Mat3<T>::load(w.ximat + 9 * b);  // R Q
    Vec3<T> ipos = Vec3<T>::load(m.body_ipos + 3 * b);
    Vec3<T> c = Vec3<T>::load(w.xipos + 3 * b) - Vec3<T>::load(w.xpos + 3 * m.body_rootid[b]);
    T mass = m.body_mass[b];
    const S* d = m.body_inertia + 3 * b;
    // symmetric adjoint G of the full rotational inertia (off-diagonal entries stored once)
    Mat3<T> G;
    G.m[0] = g.I[0];
    G.m[4] = g.I[1];
    G.m[8] = g.I[2];
    G.m[1] = G.m[3] = T(0.5) * g.I[3];
    G.m[2] = G.m[6] = T(0.5) * g.I[4];
    G.m[5] = G.m[7] = T(0.5) * g.I[5];
    T trG = G.m[0] + G.m[4] + G.m[8];
    Vec3<T> Gc = G * c;
    // adj_Ri = 2 G Ri diag(d); adj_R = adj_Ri Q^T
    Mat3<T> GRi = G * Ri, adj_R;
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 3; ++k) {
        T s = T(0);
        for (int l = 0; l < 3; ++l) s += T(2) * GRi(i, l) * d[l] * Q(k, l);
        adj_R(i, k) = s;
      }
    Vec3<T> adj_c = mass * (T(2) * trG * c - T(2) * Gc) + mass * g.h;
    // c = xpos + R ipos - reference
    if (adj_model.body_ipos) mul_transpose(R, adj_c).add_to(adj_model.body_ipos + 3 * b);
    add_outer(adj_R, adj_c, ipos);
    add_to(a.xmat + 9 * b, adj_R);
    adj_c.add_to(a.xpos + 3 * b);
    (-adj_c).add_to(a.xpos + 3 * m.body_rootid[b]);
    if (adj_model.body_mass) {
      adj_model.body_mass[b] += trG * dot(c, c) - dot(c, Gc) + dot(g.h, c) + g.m;
    }
    if (adj_model.body_inertia) {
      for (int k = 0; k < 3; ++k) adj_model.body_inertia[3 * b + k] += dot(Ri.col(k), G * Ri.col(k));
    }
  }
}

// Adjoint of com_vel: from the adjoints of cvel and cdof_dot to those of cdof and qvel.
template <class T, class S>
PHX_HD void adj_com_vel(const ModelView<S>& m, const T* qvel, const Workspace<S>& w,
                        AdjWorkspace<T>& a, T* adj_qvel) {
  for (int b = m.nbody - 1; b > 0; --b) {
    int p = m.body_parentid[b];
    Vec6<T> adj_v = Vec6<T>::load(a.cvel + 6 * b);
    int d0 = m.body_dofadr[b], jnt0 = m.body_jntadr[b];
    for (int j = jnt0 + m.body_jntnum[b] - 1; j >= jnt0; --j) {
      int type = m.jnt_type[j], da = m.jnt_dofadr[j];
      // dof groups of the joint, last first: (start, count, has cdof_dot = v x cdof)
      int ngroup = type == kJointFree ? 2 : 1;
      for (int gi = ngroup - 1; gi >= 0; --gi) {
        int start = da + 3 * gi;
        int n = (type == kJointFree || type == kJointBall) ? 3 : 1;
        bool rotates = !(type == kJointFree && gi == 0);
        // v += sum qvel_k cdof_k
        for (int k = start; k < start + n; ++k) {
          Vec6<T> s = Vec6<T>::load(w.cdof + 6 * k);
          adj_qvel[k] += dot(s, adj_v);
          (qvel[k] * adj_v + Vec6<T>::load(a.cdof + 6 * k)).store(a.cdof + 6 * k);
        }
        if (!rotates) continue;
        // cdof_dot_k = v_before x cdof_k, v_before replayed from the parent
        Vec6<T> vb = Vec6<T>::load(w.cvel + 6 * p);
        for (int k = d0; k < start; ++k) vb += qvel[k] * Vec6<T>::load(w.cdof + 6 * k);
        for (int k = start; k < start + n; ++k) {
          Vec6<T> adj_s = Vec6<T>::load(a.cdof + 6 * k);
          adj_cross_motion(vb, Vec6<T>::load(w.cdof + 6 * k), adj_v, adj_s,
                           Vec6<T>::load(a.cdof_dot + 6 * k));
          adj_s.store(a.cdof + 6 * k);
        }
      }
    }
    (Vec6<T>::load(a.cvel + 6 * p) + adj_v).store(a.cvel + 6 * p);
  }
}

}  // namespace phx
