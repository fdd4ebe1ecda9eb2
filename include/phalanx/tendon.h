// Tendon kinematics and transmissions. A tendon has a length L(q) and its row J = dL/dq over
// the dofs (velocity V = J qvel), computed once per step into the workspace (ten_length, ten_J)
// and read by every stage a tendon takes part in: passive spring-dampers, actuators, limit and
// friction-loss rows and equality rows.
//   fixed:   L = sum of coef q over its joints (hinges and slides), J their coefficients;
//   spatial: a path through sites, L = sum over its spans of the span's length / D, D the
//            divisor of the last pulley before the span (1 before any). A span joins two
//            consecutive sites, straight or wrapped over the sphere or cylinder between them
//            (wrap.h): site, tangent point, arc, tangent point, site. Each straight part
//            between points of two bodies adds (Jp_b - Jp_a)^T u / D to J, u its unit direction
//            and Jp the velocity of a point per unit qvel, the tangent points moving with the
//            geom's body (MuJoCo's mj_tendon).
// A transmission (an actuator's, a limit's, an equality's object) is a joint, a tendon or an
// actuator's slider-crank: its length, velocity and row come from the joint's coordinate, the
// tendon's arrays or the slider-crank's geometry (computed where it is read, slider_crank).
// The adjoints collect what the consumers' adjoints give to L and J (AdjWorkspace ten_length,
// ten_J), and adj_tendon_kinematics takes them to qpos and to the kinematic quantities before
// adj_com_vel, adj_com_pos and adj_kinematics run.
#pragma once

#include "phalanx/math/dense.h"
#include "phalanx/point_jacobian.h"
#include "phalanx/wrap.h"

namespace phx {

// Calls f(a, g, b, D) for each span of spatial tendon t: the entries (wrap indices) of its two
// sites, of the sphere or cylinder between them (-1: a straight span), and the divisor of its
// branch. A pulley ends a branch: the sites on either side of it are not joined.
template <class S, class F>
PHX_HD PHX_INLINE void for_each_span(const ModelView<S>& m, int t, F&& f) {
  S divisor = S(1);
  const int end = m.tendon_adr[t] + m.tendon_num[t];
  for (int k = m.tendon_adr[t]; k + 1 < end; ++k) {
    const int next = m.wrap_type[k + 1];
    if (m.wrap_type[k] == kWrapPulley) {
      divisor = m.wrap_prm[k];
    } else if (m.wrap_type[k] == kWrapSite) {  // a geom's span began at the site before it
      if (next == kWrapSite) f(k, -1, k + 1, divisor);
      if (next == kWrapSphere || next == kWrapCylinder) f(k, k + 1, k + 2, divisor);
    }
  }
}

// world position of the site of entry k
template <class S>
PHX_HD PHX_INLINE Vec3<S> wrap_site_point(const ModelView<S>& m, const Workspace<S>& w, int k) {
  const int s = m.wrap_objid[k];
  return body_point(w, m.site_bodyid[s], Vec3<S>::load(m.site_pos + 3 * s));
}

// the side site of the wrapping geom of entry g (its wrap_prm), -1 for none
template <class S>
PHX_HD PHX_INLINE int wrap_side_site(const ModelView<S>& m, int g) {
  const double side = static_cast<double>(value(m.wrap_prm[g]));
  return static_cast<int>(side < 0 ? side - 0.5 : side + 0.5);
}

// A span's path: its points (site a; where it wraps the two tangent points, fixed to the geom's
// body; site b), their bodies, and its length (the straight parts and the arc's wrap length).
// For a wrapped span, the geom's frame (c, G), the side site's body (-1: none) and point, and the
// sites and tangent points in the geom's frame, which the adjoint reads.
template <class S>
struct Span {
  Vec3<S> p[4];
  int body[4];
  int n = 2;  // points on the path: 2 straight, 4 wrapped
  S length, wrap_length;
  Vec3<S> c, side, local[3];  // local: site a, site b, side site in the geom's frame
  Mat3<S> G;
  int side_body = -1;
  LocalWrap<S> wrap;
};

// a straight part of a span: unit direction (zero where its points coincide: no force acts
// along it) and length
template <class S>
PHX_HD PHX_INLINE Vec3<S> unit_direction(const Vec3<S>& d, S& length) {
  length = norm(d);
  return length > S(0) ? (S(1) / length) * d : Vec3<S>{};
}

template <class S>
PHX_HD PHX_DEVICE_NOINLINE Span<S> span(const ModelView<S>& m, const Workspace<S>& w, int a, int g,
                                        int b) {
  Span<S> sp;
  sp.p[0] = wrap_site_point(m, w, a);
  sp.body[0] = m.site_bodyid[m.wrap_objid[a]];
  const Vec3<S> pb = wrap_site_point(m, w, b);
  const int bb = m.site_bodyid[m.wrap_objid[b]];
  sp.wrap_length = S(0);
  if (g >= 0) {
    const int geom = m.wrap_objid[g], gb = m.geom_bodyid[geom];
    sp.c = body_point(w, gb, Vec3<S>::load(m.geom_pos + 3 * geom));
    sp.G = Mat3<S>::load(w.xmat + 9 * gb) * to_mat(Quat<S>::load(m.geom_quat + 4 * geom));
    const int side = wrap_side_site(m, g);
    if (side >= 0) {
      sp.side_body = m.site_bodyid[side];
      sp.side = body_point(w, sp.side_body, Vec3<S>::load(m.site_pos + 3 * side));
    }
    sp.local[0] = mul_transpose(sp.G, sp.p[0] - sp.c);
    sp.local[1] = mul_transpose(sp.G, pb - sp.c);
    sp.local[2] = side >= 0 ? mul_transpose(sp.G, sp.side - sp.c) : Vec3<S>{};
    sp.wrap = wrap_local(sp.local[0], sp.local[1], sp.local[2], side >= 0, m.geom_size[3 * geom],
                         m.wrap_type[g] == kWrapCylinder);
    if (sp.wrap.length >= S(0)) {
      sp.n = 4;
      sp.p[1] = sp.G * sp.wrap.t0 + sp.c;
      sp.p[2] = sp.G * sp.wrap.t1 + sp.c;
      sp.body[1] = sp.body[2] = gb;
      sp.wrap_length = sp.wrap.length;
    }
  }
  sp.p[sp.n - 1] = pb;
  sp.body[sp.n - 1] = bb;
  sp.length = sp.wrap_length;
  for (int i = 0; i + 1 < sp.n; i += 2) sp.length += norm(sp.p[i + 1] - sp.p[i]);
  return sp;
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
      for_each_span(m, t, [&](int a, int g, int b, T divisor) {
        const Span<T> sp = span(m, w, a, g, b);
        const T s = T(1) / divisor;
        length += s * sp.length;
        for (int i = 0; i + 1 < sp.n; i += 2) {  // the straight parts
          if (sp.body[i] == sp.body[i + 1]) continue;
          T len;
          const Vec3<T> u = unit_direction(sp.p[i + 1] - sp.p[i], len);
          add_point_jacobian(m, w, sp.body[i + 1], sp.p[i + 1], &u, 1, s, J);
          add_point_jacobian(m, w, sp.body[i], sp.p[i], &u, 1, -s, J);
        }
      });
    }
    w.ten_length[t] = length;
  }
}

// Adjoint of a wrapped span's geometry: from the adjoints of its tangent points (adj_p1, adj_p2,
// world) and of its wrap length to those of its sites (adj_pa, adj_pb, accumulated), and of the
// side site's and the geom's body frames in a. wrap_local's slopes in its nine inputs come from
// running it on Dual numbers.
template <class T, class S>
PHX_HD PHX_DEVICE_NOINLINE void adj_span_wrap(const ModelView<S>& m, const Span<S>& sp, int g,
                                              const Vec3<T>& adj_p1, const Vec3<T>& adj_p2,
                                              T adj_wrap_length, Vec3<T>& adj_pa, Vec3<T>& adj_pb,
                                              AdjWorkspace<T>& a) {
  const int geom = m.wrap_objid[g], gb = m.geom_bodyid[geom];
  const Mat3<T> G = Mat3<T>::load(sp.G.m);
  Mat3<T> adj_G{};
  Vec3<T> adj_c = adj_p1 + adj_p2;
  // p1 = G t0 + c, p2 = G t1 + c
  Vec3<T> adj_t0{}, adj_t1{};
  adj_mul(G, Vec3<T>::from(sp.wrap.t0), adj_G, adj_t0, adj_p1);
  adj_mul(G, Vec3<T>::from(sp.wrap.t1), adj_G, adj_t1, adj_p2);
  // the wrap in the geom's frame, on Dual numbers seeded along the sites' local coordinates (the
  // side site's only when there is one): all of them in one pass on the CPU, two a pass in
  // float on the GPU and one in double, where more duals would not fit a thread's registers
  // (kDualDirections)
  constexpr int N = kDualDirections<T, 9, 2>;
  using D = Dual<T, N>;
  Vec3<T> adj_local[3];
  const int nin = sp.side_body >= 0 ? 9 : 6;
  for (int first = 0; first < nin; first += N) {
    Vec3<D> in[3];
    for (int k = 0; k < 3; ++k)
      for (int j = 0; j < 3; ++j) in[k][j] = D(T(sp.local[k][j]));
    for (int i = 0; i < N && first + i < nin; ++i) in[(first + i) / 3][(first + i) % 3].d[i] = T(1);
    const LocalWrap<D> lw =
        wrap_local(in[0], in[1], in[2], sp.side_body >= 0, D(T(m.geom_size[3 * geom])),
                   m.wrap_type[g] == kWrapCylinder);
    for (int i = 0; i < N && first + i < nin; ++i) {
      T& adj = adj_local[(first + i) / 3][(first + i) % 3];
      adj = adj_wrap_length * lw.length.d[i];
      for (int r = 0; r < 3; ++r) adj += adj_t0[r] * lw.t0[r].d[i] + adj_t1[r] * lw.t1[r].d[i];
    }
  }
  // local = G^T (x - c): adj_x += G adj_local, adj_c -= G adj_local, adj_G += (x - c) adj_local^T
  const Vec3<S> xs[3] = {sp.p[0], sp.p[sp.n - 1], sp.side};
  Vec3<T> adj_x[3];
  for (int i = 0; i < 3; ++i) {
    if (i == 2 && sp.side_body < 0) break;
    adj_x[i] = G * adj_local[i];
    adj_c -= adj_x[i];
    const Vec3<T> r = Vec3<T>::from(xs[i] - sp.c);
    for (int p = 0; p < 3; ++p)
      for (int q = 0; q < 3; ++q) adj_G.m[3 * p + q] += r[p] * adj_local[i][q];
  }
  adj_pa += adj_x[0];
  adj_pb += adj_x[1];
  if (sp.side_body >= 0) {
    const int side = wrap_side_site(m, g);
    adj_body_point(sp.side_body, Vec3<T>::load(m.site_pos + 3 * side), adj_x[2], a);
  }
  // c = xpos_b + R_b geom_pos, G = R_b Q: adj_R_b += adj_G Q^T
  adj_body_point(gb, Vec3<T>::load(m.geom_pos + 3 * geom), adj_c, a);
  if (gb != 0) {
    const Mat3<T> Q = to_mat(Quat<T>::load(m.geom_quat + 4 * geom));
    const Mat3<T> adj_R = adj_G * transpose(Q);
    for (int i = 0; i < 9; ++i) a.xmat[9 * gb + i] += adj_R.m[i];
  }
}

namespace detail {

// adj_tendon_kinematics' pass (below)
template <class T, class S>
PHX_HD void adj_tendons(const ModelView<S>& m, const Workspace<S>& w, AdjWorkspace<T>& a,
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
    for_each_span(m, t, [&](int ka, int kg, int kb, S divisor) {
      const Span<S> sp = span(m, w, ka, kg, kb);
      const T s = T(S(1) / divisor);
      Vec3<T> adj_p[4];
      for (int i = 0; i + 1 < sp.n; i += 2) {  // the straight parts
        S len;
        const Vec3<S> us = unit_direction(sp.p[i + 1] - sp.p[i], len);
        if (!(len > S(0))) continue;
        const Vec3<T> u = Vec3<T>::from(us);
        Vec3<T> adj_u{};
        if (sp.body[i] != sp.body[i + 1]) {
          const Vec3<T> p0 = Vec3<T>::from(sp.p[i]), p1 = Vec3<T>::from(sp.p[i + 1]);
          adj_add_point_jacobian(m, w, sp.body[i + 1], p1, &u, 1, s, adj_J, 0, a, adj_p[i + 1],
                                 &adj_u);
          adj_add_point_jacobian(m, w, sp.body[i], p0, &u, 1, -s, adj_J, 0, a, adj_p[i], &adj_u);
        }
        // length += |d| / D, u = d / |d|, d = p_{i+1} - p_i
        Vec3<T> adj_d = (s * adj_len) * u + (T(1) / T(len)) * (adj_u - dot(u, adj_u) * u);
        adj_p[i + 1] += adj_d;
        adj_p[i] -= adj_d;
      }
      if (sp.n == 4)
        adj_span_wrap(m, sp, kg, adj_p[1], adj_p[2], s * adj_len, adj_p[0], adj_p[3], a);
      const int sa = m.wrap_objid[ka], sb = m.wrap_objid[kb];
      adj_body_point(sp.body[0], Vec3<T>::load(m.site_pos + 3 * sa), adj_p[0], a);
      adj_body_point(sp.body[sp.n - 1], Vec3<T>::load(m.site_pos + 3 * sb), adj_p[sp.n - 1], a);
    });
  }
}

// the same, a device function of its own
template <class T, class S>
PHX_HD PHX_DEVICE_NOINLINE void adj_tendons_apart(const ModelView<S>& m, const Workspace<S>& w,
                                                  AdjWorkspace<T>& a, T* adj_qpos) {
  adj_tendons(m, w, a, adj_qpos);
}

}  // namespace detail

// Adjoint of tendon_kinematics: from a.ten_length and a.ten_J (the adjoints the consumers
// accumulated) to adj_qpos (fixed tendons) and to the adjoints of cdof, xpos and xmat in a
// (spatial tendons). A fixed tendon's row is constant: its adjoint is not read. On the GPU in
// double precision it is a device function of its own: inlined into each reverse stage that
// calls it, its spans' values spill there; in float they fit, and the registers saved around a
// call would cost more.
template <class T, class S>
PHX_HD void adj_tendon_kinematics(const ModelView<S>& m, const Workspace<S>& w, AdjWorkspace<T>& a,
                                  T* adj_qpos) {
  if constexpr (sizeof(T) > sizeof(float))
    detail::adj_tendons_apart(m, w, a, adj_qpos);
  else
    detail::adj_tendons(m, w, a, adj_qpos);
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

// out += scale * the slider-crank's row (nv; out a pointer to T or a Strided one)
template <class T, class S, class P>
PHX_HD PHX_INLINE void add_slider_crank_row(const ModelView<S>& m, const Workspace<S>& w,
                                            const SliderCrank<S>& k, T scale, P out) {
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

// the transmission's row dL/dqvel times s added to out (nv; a pointer to T or a Strided one)
template <class T, class S, class P>
PHX_HD PHX_INLINE void add_transmission_row(const ModelView<S>& m, const Workspace<S>& w, int type,
                                            int id, T s, P out) {
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
