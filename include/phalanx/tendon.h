// Tendon kinematics and transmissions. A tendon has a length L(q) and its row J = dL/dq over
// the dofs (velocity V = J qvel), computed once per step into the workspace (ten_length, ten_J)
// and read by every stage a tendon takes part in: passive spring-dampers, actuators, limit and
// friction-loss rows and equality rows.
//   fixed:   L = sum of coef q over its joints (hinges and slides), J their coefficients;
//   spatial: a path through sites, L = sum over its segments (consecutive sites) of
//            |p_b - p_a| / D, D the divisor of the last pulley before the segment (1 before
//            any); with u the segment's unit direction, J = sum (Jp_b - Jp_a)^T u / D, Jp the
//            velocity of a site per unit qvel (MuJoCo's mj_tendon without geom wrapping).
// A transmission (an actuator's, a limit's, an equality's object) is a joint or a tendon: its
// length, velocity and row come from the joint's coordinate or the tendon's arrays.
// The adjoints collect what the consumers' adjoints give to L and J (AdjWorkspace ten_length,
// ten_J), and adj_tendon_kinematics takes them to qpos and to the kinematic quantities before
// adj_com_vel, adj_com_pos and adj_kinematics run.
#pragma once

#include "phalanx/math/dense.h"
#include "phalanx/point_jacobian.h"

namespace phx {

// Calls f(a, b, D) for each segment of spatial tendon t: the entries (wrap indices) of its two
// sites and the divisor of its branch. A pulley ends a branch: the sites on either side of it
// are not joined.
template <class S, class F>
PHX_HD PHX_INLINE void for_each_segment(const ModelView<S>& m, int t, F&& f) {
  S divisor = S(1);
  const int end = m.tendon_adr[t] + m.tendon_num[t];
  for (int k = m.tendon_adr[t]; k + 1 < end; ++k) {
    if (m.wrap_type[k] == kWrapPulley) {
      divisor = m.wrap_prm[k];
      continue;
    }
    if (m.wrap_type[k + 1] == kWrapSite) f(k, k + 1, divisor);
  }
}

// world position of the site of entry k
template <class S>
PHX_HD PHX_INLINE Vec3<S> wrap_site_point(const ModelView<S>& m, const Workspace<S>& w, int k) {
  const int s = m.wrap_objid[k];
  return body_point(w, m.site_bodyid[s], Vec3<S>::load(m.site_pos + 3 * s));
}

// A segment's length and unit direction from a to b (zero for coincident sites: no force acts
// along a segment without a direction).
template <class S>
struct Segment {
  Vec3<S> pa, pb, u;
  S length;
};

template <class S>
PHX_HD PHX_INLINE Segment<S> segment(const ModelView<S>& m, const Workspace<S>& w, int a, int b) {
  Segment<S> g;
  g.pa = wrap_site_point(m, w, a);
  g.pb = wrap_site_point(m, w, b);
  Vec3<S> d = g.pb - g.pa;
  g.length = norm(d);
  g.u = g.length > S(0) ? (S(1) / g.length) * d : Vec3<S>{};
  return g;
}

// Lengths and rows of all tendons at the kinematics in w (kinematics and com_pos) into
// w.ten_length and w.ten_J.
template <class T>
PHX_HD void tendon_kinematics(const ModelView<T>& m, const T* qpos, Workspace<T>& w) {
  const int nv = m.nv;
  for (int t = 0; t < m.ntendon; ++t) {
    T* J = w.ten_J + long(t) * nv;
    for (int d = 0; d < nv; ++d) J[d] = T(0);
    T length(0);
    if (m.tendon_type[t] == kTendonFixed) {
      for (int k = m.tendon_adr[t]; k < m.tendon_adr[t] + m.tendon_num[t]; ++k) {
        const int j = m.wrap_objid[k];
        length += m.wrap_prm[k] * qpos[m.jnt_qposadr[j]];
        J[m.jnt_dofadr[j]] += m.wrap_prm[k];
      }
    } else {
      for_each_segment(m, t, [&](int a, int b, T divisor) {
        Segment<T> g = segment(m, w, a, b);
        const T s = T(1) / divisor;
        length += s * g.length;
        add_point_jacobian(m, w, m.site_bodyid[m.wrap_objid[b]], g.pb, &g.u, 1, s, J);
        add_point_jacobian(m, w, m.site_bodyid[m.wrap_objid[a]], g.pa, &g.u, 1, -s, J);
      });
    }
    w.ten_length[t] = length;
  }
}

// Adjoint of tendon_kinematics: from a.ten_length and a.ten_J (the adjoints the consumers
// accumulated) to adj_qpos (fixed tendons) and to the adjoints of cdof, xpos and xmat in a
// (spatial tendons). A fixed tendon's row is constant: its adjoint is not read.
template <class T, class S>
PHX_HD void adj_tendon_kinematics(const ModelView<S>& m, const Workspace<S>& w, AdjWorkspace<T>& a,
                                  T* adj_qpos) {
  const int nv = m.nv;
  for (int t = 0; t < m.ntendon; ++t) {
    const T adj_len = a.ten_length[t];
    if (m.tendon_type[t] == kTendonFixed) {
      for (int k = m.tendon_adr[t]; k < m.tendon_adr[t] + m.tendon_num[t]; ++k)
        adj_qpos[m.jnt_qposadr[m.wrap_objid[k]]] += m.wrap_prm[k] * adj_len;
      continue;
    }
    const DenseEntries<T> adj_J{a.ten_J + long(t) * nv, nv};
    for_each_segment(m, t, [&](int ka, int kb, S divisor) {
      const Segment<S> g = segment(m, w, ka, kb);
      if (!(g.length > S(0))) return;
      const S s = S(1) / divisor;
      const int sa = m.wrap_objid[ka], sb = m.wrap_objid[kb];
      const int ba = m.site_bodyid[sa], bb = m.site_bodyid[sb];
      const Vec3<T> pa = Vec3<T>::from(g.pa), pb = Vec3<T>::from(g.pb), u = Vec3<T>::from(g.u);
      Vec3<T> adj_pa, adj_pb, adj_u;
      adj_add_point_jacobian(m, w, bb, pb, &u, 1, T(s), adj_J, 0, a, adj_pb, &adj_u);
      adj_add_point_jacobian(m, w, ba, pa, &u, 1, T(-s), adj_J, 0, a, adj_pa, &adj_u);
      // length = |d| / D, u = d / |d|, d = pb - pa
      Vec3<T> adj_d = (T(s) * adj_len) * u + (T(1) / T(g.length)) * (adj_u - dot(u, adj_u) * u);
      adj_pb += adj_d;
      adj_pa -= adj_d;
      adj_body_point(bb, Vec3<T>::load(m.site_pos + 3 * sb), adj_pb, a);
      adj_body_point(ba, Vec3<T>::load(m.site_pos + 3 * sa), adj_pa, a);
    });
  }
}

// ---- transmissions: a joint's coordinate or a tendon's length ----------------------------

// the transmission's row dL/dqvel times s added to out (nv)
template <class T, class S>
PHX_HD PHX_INLINE void add_transmission_row(const ModelView<S>& m, const Workspace<S>& w, int type,
                                            int id, T s, T* out) {
  if (type == kTrnTendon) {
    const S* J = w.ten_J + long(id) * m.nv;
    for (int d = 0; d < m.nv; ++d) out[d] += s * J[d];
  } else {
    out[m.jnt_dofadr[id]] += s;
  }
}

// a pointer as a row of nv entries, x(d) (as DenseEntries and OuterSum give their rows)
template <class T>
struct PointerRow {
  const T* p;
  PHX_HD T operator()(int d) const { return p[d]; }
};

// the transmission's row dotted with x (a row: x(d) for d < nv): its velocity for x = qvel,
// its force for x = an adjoint of qfrc
template <class T, class S, class Row>
PHX_HD PHX_INLINE T transmission_dot(const ModelView<S>& m, const Workspace<S>& w, int type, int id,
                                     const Row& x) {
  if (type != kTrnTendon) return x(m.jnt_dofadr[id]);
  const S* J = w.ten_J + long(id) * m.nv;
  T v(0);
  for (int d = 0; d < m.nv; ++d) v += J[d] * x(d);
  return v;
}

// length and velocity of a transmission (after tendon_kinematics)
template <class T, class S>
PHX_HD PHX_INLINE void transmission_state(const ModelView<S>& m, const Workspace<S>& w, int type,
                                          int id, const T* qpos, const T* qvel, T& length,
                                          T& velocity) {
  length = type == kTrnTendon ? T(w.ten_length[id]) : qpos[m.jnt_qposadr[id]];
  velocity = transmission_dot<T>(m, w, type, id, PointerRow<T>{qvel});
}

// Adjoint of transmission_state: adj_len and adj_vel to adj_qpos (joints) or a.ten_length
// (tendons), to adj_qvel along the row, and to the row's adjoint (tendons: a.ten_J += adj_vel
// qvel), accumulated.
template <class T, class S>
PHX_HD PHX_INLINE void adj_transmission_state(const ModelView<S>& m, const Workspace<S>& w,
                                              int type, int id, const T* qvel, T adj_len, T adj_vel,
                                              AdjWorkspace<T>& a, T* adj_qpos, T* adj_qvel) {
  if (type != kTrnTendon) {
    adj_qpos[m.jnt_qposadr[id]] += adj_len;
    adj_qvel[m.jnt_dofadr[id]] += adj_vel;
    return;
  }
  a.ten_length[id] += adj_len;
  add_transmission_row(m, w, type, id, adj_vel, adj_qvel);
  if (m.tendon_type[id] == kTendonSpatial) {
    T* g = a.ten_J + long(id) * m.nv;
    for (int d = 0; d < m.nv; ++d) g[d] += adj_vel * qvel[d];
  }
}

// Adjoint of add_transmission_row with respect to the row (constant for joints and fixed
// tendons): a.ten_J[id] += s adj_out, adj_out a row (PointerRow, a DenseEntries or OuterSum
// row).
template <class T, class S, class Row>
PHX_HD PHX_INLINE void adj_transmission_row(const ModelView<S>& m, int type, int id, T s,
                                            const Row& adj_out, AdjWorkspace<T>& a) {
  if (type != kTrnTendon || m.tendon_type[id] != kTendonSpatial) return;
  T* g = a.ten_J + long(id) * m.nv;
  for (int d = 0; d < m.nv; ++d) g[d] += s * adj_out(d);
}

}  // namespace phx
