// Tendon kinematics and transmissions. A tendon has a length L(q) and its row J = dL/dq over
// the dofs (velocity V = J qvel), computed once per step into the workspace (ten_length, ten_J)
// and read by every stage a tendon takes part in: passive spring-dampers, actuators, limit and
// friction-loss rows and equality rows.
//   fixed:   L = sum of coef q over its joints (hinges and slides), J their coefficients;
//   spatial: a path through sites, L = sum over its segments (consecutive sites) of
//            |p_b - p_a| / D, D the divisor of the last pulley before the segment (1 before
//            any); with u the segment's unit direction, J = sum (Jp_b - Jp_a)^T u / D, Jp the
//            velocity of a site per unit qvel (MuJoCo's mj_tendon without geom wrapping).
// A transmission (an actuator's, a limit's, an equality's object) is a joint, a tendon or an
// actuator's slider-crank: its length, velocity and row come from the joint's coordinate, the
// tendon's arrays or the slider-crank's geometry (computed where it is read, slider_crank).
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

// ---- slider-crank ---------------------------------------------------------------------------

// a row r (r(d) for d < nv) times k
template <class T, class Row>
struct ScaledRow {
  const Row* r = nullptr;
  T k{};
  PHX_HD T operator()(int d) const { return k * (*r)(d); }
};
// one row as the rows, by index, that adj_add_point_jacobian reads (every index gives it)
template <class F>
struct OneRow {
  using Row = F;
  F f;
  PHX_HD F row(int) const { return f; }
};

// Actuator u's slider-crank (MuJoCo's mjTRN_SLIDERCRANK): the rod of length r joins the crank
// site c to a point of the slider's axis a (the slider site's z axis) through the slider site s;
// with v = c - s, the slider's extension is L = a.v - sqrt(det), det = (a.v)^2 + r^2 - v.v, or
// L = a.v where det <= 0 (the rod too short: the crank is "broken"). Its row over the dofs is
// dL/dv . (Jc - Js) + dL/da . (omega_s x a), the latter a row of the slider body's angular
// velocity along a x dL/da.
// the slider site's axis in its body's frame: the z axis of the site's frame
template <class S>
PHX_HD PHX_INLINE Vec3<S> slider_axis(const ModelView<S>& m, int site) {
  return to_mat(Quat<S>::load(m.site_quat + 4 * site)) * Vec3<S>{S(0), S(0), S(1)};
}

template <class T>
struct SliderCrank {
  Vec3<T> c, s, a, v;  // crank and slider points, slider axis, v = c - s
  T length, sdet;      // sdet = sqrt(det), 0 when broken
  Vec3<T> dldv, dlda;
  int bc, bs;  // the sites' bodies
};

template <class S>
PHX_HD PHX_INLINE SliderCrank<S> slider_crank(const ModelView<S>& m, const Workspace<S>& w, int u) {
  SliderCrank<S> k;
  const int sc = m.actuator_trnid[u], ss = m.actuator_slidersite[u];
  k.bc = m.site_bodyid[sc];
  k.bs = m.site_bodyid[ss];
  k.c = body_point(w, k.bc, Vec3<S>::load(m.site_pos + 3 * sc));
  k.s = body_point(w, k.bs, Vec3<S>::load(m.site_pos + 3 * ss));
  k.a = Mat3<S>::load(w.xmat + 9 * k.bs) * slider_axis(m, ss);
  k.v = k.c - k.s;
  const S r = m.actuator_cranklength[u], av = dot(k.a, k.v);
  const S det = av * av + r * r - dot(k.v, k.v);
  if (det > S(0)) {
    k.sdet = sqrt(det);
    k.length = av - k.sdet;
    const S c1 = S(1) - av / k.sdet;
    k.dldv = c1 * k.a + (S(1) / k.sdet) * k.v;
    k.dlda = c1 * k.v;
  } else {
    k.sdet = S(0);
    k.length = av;
    k.dldv = k.a;
    k.dlda = k.v;
  }
  return k;
}

// Calls f(d, J_d) for the entries of the slider-crank's row on the dofs of the crank's and then
// the slider's paths to the root (a dof on both gets two calls, whose values add).
template <class S, class F>
PHX_HD PHX_INLINE void for_each_slider_crank_entry(const ModelView<S>& m, const Workspace<S>& w,
                                                   const SliderCrank<S>& k, F&& f) {
  const Vec3<S> g = cross(k.a, k.dlda);
  const Vec3<S> rc = k.c - Vec3<S>::load(w.xpos + 3 * m.body_rootid[k.bc]);
  const Vec3<S> rs = k.s - Vec3<S>::load(w.xpos + 3 * m.body_rootid[k.bs]);
  for (int d = last_dof(m, k.bc); d >= 0; d = m.dof_parentid[d]) {
    const Vec6<S> c = Vec6<S>::load(w.cdof + 6 * d);
    f(d, dot(k.dldv, c.lin() + cross(c.ang(), rc)));
  }
  for (int d = last_dof(m, k.bs); d >= 0; d = m.dof_parentid[d]) {
    const Vec6<S> c = Vec6<S>::load(w.cdof + 6 * d);
    f(d, dot(c.ang(), g) - dot(k.dldv, c.lin() + cross(c.ang(), rs)));
  }
}

// out += scale * the slider-crank's row (nv)
template <class T, class S>
PHX_HD PHX_INLINE void add_slider_crank_row(const ModelView<S>& m, const Workspace<S>& w,
                                            const SliderCrank<S>& k, T scale, T* out) {
  for_each_slider_crank_entry(m, w, k, [&](int d, S j) { out[d] += scale * j; });
}

// Adjoint of the slider-crank's length (adj_len) and of its row scaled by `scale` (adj_row, a
// row of nv adjoints; adj(d)) to the adjoints of cdof, xpos and xmat in a, accumulated.
template <class T, class S, class Row>
PHX_HD void adj_slider_crank(const ModelView<S>& m, const Workspace<S>& w, int u, T adj_len,
                             T scale, const Row& adj_row, AdjWorkspace<T>& a) {
  const SliderCrank<S> k = slider_crank(m, w, u);
  const Vec3<T> c = Vec3<T>::from(k.c), s = Vec3<T>::from(k.s), ax = Vec3<T>::from(k.a);
  const Vec3<T> v = Vec3<T>::from(k.v), dldv = Vec3<T>::from(k.dldv);
  const Vec3<T> dlda = Vec3<T>::from(k.dlda);
  // the row: point Jacobians along dldv at c (+) and s (-), the slider body's angular row along
  // g = a x dlda
  Vec3<T> adj_c, adj_s, adj_dldv, adj_g;
  const OneRow<ScaledRow<T, Row>> rows{{&adj_row, scale}};
  adj_add_point_jacobian(m, w, k.bc, c, &dldv, 1, T(1), rows, 0, a, adj_c, &adj_dldv);
  adj_add_point_jacobian(m, w, k.bs, s, &dldv, 1, T(-1), rows, 0, a, adj_s, &adj_dldv);
  const Vec3<T> g = cross(ax, dlda);
  for (int d = last_dof(m, k.bs); d >= 0; d = m.dof_parentid[d]) {
    const T gd = scale * adj_row(d);
    adj_g += gd * Vec6<T>::load(w.cdof + 6 * d).ang();
    for (int i = 0; i < 3; ++i) a.cdof[6 * d + i] += gd * g[i];
  }
  // g = a x dlda
  Vec3<T> adj_a = cross(dlda, adj_g), adj_dlda = cross(adj_g, ax), adj_v;
  // length, dldv and dlda from a and v
  if (k.sdet > S(0)) {
    const T invs = T(1) / T(k.sdet), av = dot(ax, v), c1 = T(1) - av * invs;
    // dldv = a c1 + v invs, dlda = v c1, length = av - sdet
    adj_a += c1 * adj_dldv;
    T adj_c1 = dot(ax, adj_dldv) + dot(v, adj_dlda);
    adj_v += invs * adj_dldv + c1 * adj_dlda;
    T adj_invs = dot(v, adj_dldv) - av * adj_c1;
    T adj_av = adj_len - invs * adj_c1;
    T adj_sdet = -adj_len - invs * invs * adj_invs;
    T adj_det = adj_sdet * (T(0.5) * invs);
    // det = av^2 + r^2 - v.v
    adj_av += T(2) * av * adj_det;
    adj_v -= (T(2) * adj_det) * v;
    adj_a += adj_av * v;
    adj_v += adj_av * ax;
  } else {
    // length = a.v, dldv = a, dlda = v
    adj_a += adj_dldv + adj_len * v;
    adj_v += adj_dlda + adj_len * ax;
  }
  adj_c += adj_v;
  adj_s -= adj_v;
  const int sc = m.actuator_trnid[u], ss = m.actuator_slidersite[u];
  adj_body_point(k.bc, Vec3<T>::load(m.site_pos + 3 * sc), adj_c, a);
  adj_body_point(k.bs, Vec3<T>::load(m.site_pos + 3 * ss), adj_s, a);
  // a = R_s axis_local: adj_R += adj_a axis_local^T
  if (k.bs > 0) {
    const Vec3<T> local = Vec3<T>::from(slider_axis(m, ss));
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) a.xmat[9 * k.bs + 3 * i + j] += adj_a[i] * local[j];
  }
}

// ---- transmissions: a joint's coordinate, a tendon's length or a slider-crank's extension ----
// (type, id): kTrnJoint and a joint, kTrnTendon and a tendon, kTrnSliderCrank and the actuator

// the transmission id of actuator u (transmission functions take the actuator itself for a
// slider-crank)
template <class S>
PHX_HD PHX_INLINE int actuator_trn(const ModelView<S>& m, int u) {
  return m.actuator_trntype[u] == kTrnSliderCrank ? u : m.actuator_trnid[u];
}

// a pointer as a row of nv entries, x(d) (as DenseEntries and OuterSum give their rows)
template <class T>
struct PointerRow {
  const T* p;
  PHX_HD T operator()(int d) const { return p[d]; }
};

// the transmission's row dL/dqvel times s added to out (nv)
template <class T, class S>
PHX_HD PHX_INLINE void add_transmission_row(const ModelView<S>& m, const Workspace<S>& w, int type,
                                            int id, T s, T* out) {
  if (type == kTrnTendon) {
    const S* J = w.ten_J + long(id) * m.nv;
    for (int d = 0; d < m.nv; ++d) out[d] += s * J[d];
  } else if (type == kTrnSliderCrank) {
    add_slider_crank_row(m, w, slider_crank(m, w, id), s, out);
  } else {
    out[m.jnt_dofadr[id]] += s;
  }
}

// the transmission's row dotted with x (a row: x(d) for d < nv): its velocity for x = qvel,
// its force for x = an adjoint of qfrc
template <class T, class S, class Row>
PHX_HD PHX_INLINE T transmission_dot(const ModelView<S>& m, const Workspace<S>& w, int type, int id,
                                     const Row& x) {
  if (type == kTrnJoint) return x(m.jnt_dofadr[id]);
  if (type == kTrnSliderCrank) {
    T v(0);
    for_each_slider_crank_entry(m, w, slider_crank(m, w, id), [&](int d, S j) { v += j * x(d); });
    return v;
  }
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
  length = type == kTrnTendon        ? T(w.ten_length[id])
           : type == kTrnSliderCrank ? T(slider_crank(m, w, id).length)
                                     : qpos[m.jnt_qposadr[id]];
  velocity = transmission_dot<T>(m, w, type, id, PointerRow<T>{qvel});
}

// Adjoint of transmission_state: adj_len and adj_vel to adj_qpos (joints), a.ten_length
// (tendons) or the slider-crank's geometry, to adj_qvel along the row, and to the row's adjoint
// (spatial tendons: a.ten_J += adj_vel qvel; slider-cranks: adj_slider_crank), accumulated.
template <class T, class S>
PHX_HD PHX_INLINE void adj_transmission_state(const ModelView<S>& m, const Workspace<S>& w,
                                              int type, int id, const T* qvel, T adj_len, T adj_vel,
                                              AdjWorkspace<T>& a, T* adj_qpos, T* adj_qvel) {
  if (type == kTrnJoint) {
    adj_qpos[m.jnt_qposadr[id]] += adj_len;
    adj_qvel[m.jnt_dofadr[id]] += adj_vel;
    return;
  }
  add_transmission_row(m, w, type, id, adj_vel, adj_qvel);
  if (type == kTrnSliderCrank) {
    adj_slider_crank(m, w, id, adj_len, adj_vel, PointerRow<T>{qvel}, a);
    return;
  }
  a.ten_length[id] += adj_len;
  if (m.tendon_type[id] == kTendonSpatial) {
    T* g = a.ten_J + long(id) * m.nv;
    for (int d = 0; d < m.nv; ++d) g[d] += adj_vel * qvel[d];
  }
}

// Adjoint of add_transmission_row with respect to the row (constant for joints and fixed
// tendons): a.ten_J[id] += s adj_out for a spatial tendon, adj_slider_crank for a slider-crank;
// adj_out a row (PointerRow, a DenseEntries or OuterSum row).
template <class T, class S, class Row>
PHX_HD PHX_INLINE void adj_transmission_row(const ModelView<S>& m, const Workspace<S>& w, int type,
                                            int id, T s, const Row& adj_out, AdjWorkspace<T>& a) {
  if (type == kTrnSliderCrank) {
    adj_slider_crank(m, w, id, T(0), s, adj_out, a);
    return;
  }
  if (type != kTrnTendon || m.tendon_type[id] != kTendonSpatial) return;
  T* g = a.ten_J + long(id) * m.nv;
  for (int d = 0; d < m.nv; ++d) g[d] += s * adj_out(d);
}

}  // namespace phx
