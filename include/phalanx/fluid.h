// Forces of the medium the bodies move through (MJCF <option density viscosity wind>), MuJoCo's
// inertia-box model: each body with mass moves as the box of uniform density that has its
// principal inertia. From the principal moments I and the mass m, the box's sides are
//   s_i = sqrt(6 max(I_j + I_k - I_i, 1e-15) / m)        ({i, j, k} the three axes),
// and in its frame (the principal-inertia frame ximat, at the centre of mass xipos), with w the
// body's angular velocity and v its centre of mass's velocity relative to the wind, the medium
// exerts per axis
//   torque_i = -(pi mu d^3 + rho s_i (s_j^4 + s_k^4) |w_i| / 64) w_i
//   force_i  = -(3 pi mu d + rho s_j s_k |v_i| / 2) v_i,          d = (s_0 + s_1 + s_2) / 3:
// Stokes drag on the sphere of the box's mean side in the viscosity mu, and quadratic drag on
// the box's faces in the density rho, at the centre of mass. The implicit integrator takes the
// drag's velocity slope (implicit.h's add_fluid_slope, adj_fluid_slope here). Each function has
// its adjoint beside it.
#pragma once

#include "phalanx/point_jacobian.h"

namespace phx {

constexpr double kFluidPi = 3.14159265358979323846;
// MuJoCo's mjMINVAL: a body lighter than this feels no fluid, a box side squared is at least it
constexpr double kFluidMinVal = 1e-15;

// whether the medium exerts any force: a density or a viscosity
template <class S>
PHX_HD PHX_INLINE bool fluid_enabled(const ModelView<S>& m) {
  return value(m.density) != 0 || value(m.viscosity) != 0;
}

// The drag coefficients of body b's box: per unit velocity (viscous) and per unit velocity
// squared (quadratic), angular and linear
template <class T>
struct FluidDrag {
  T angular = T(0), linear = T(0);
  Vec3<T> angular_quadratic, linear_quadratic;
};

// the sides of the box with the body's mass and principal moments
template <class T>
PHX_HD PHX_INLINE Vec3<T> fluid_box(T mass, const Vec3<T>& inertia) {
  Vec3<T> s;
  for (int i = 0; i < 3; ++i) {
    T excess = inertia[(i + 1) % 3] + inertia[(i + 2) % 3] - inertia[i];
    excess = select(excess > T(kFluidMinVal), excess, T(kFluidMinVal));
    s[i] = sqrt(T(6) * excess / mass);
  }
  return s;
}

// the drag coefficients of the box of sides s in the medium
template <class T>
PHX_HD PHX_INLINE FluidDrag<T> fluid_drag(T density, T viscosity, const Vec3<T>& s) {
  FluidDrag<T> c;
  const T d = (s[0] + s[1] + s[2]) / T(3), pi = T(kFluidPi);
  c.angular = pi * viscosity * d * d * d;
  c.linear = T(3) * pi * viscosity * d;
  for (int i = 0; i < 3; ++i) {
    const T sj = s[(i + 1) % 3], sk = s[(i + 2) % 3];
    c.angular_quadratic[i] = density * s[i] * (sj * sj * sj * sj + sk * sk * sk * sk) / T(64);
    c.linear_quadratic[i] = density * sj * sk / T(2);
  }
  return c;
}

// adjoint of fluid_drag and fluid_box: from the coefficients' adjoint to those of the body's
// mass and principal moments, accumulated
template <class T>
PHX_HD void adj_fluid_drag(T density, T viscosity, T mass, const Vec3<T>& inertia,
                           const FluidDrag<T>& adj, T& adj_mass, Vec3<T>& adj_inertia) {
  const Vec3<T> s = fluid_box(mass, inertia);
  const T d = (s[0] + s[1] + s[2]) / T(3), pi = T(kFluidPi);
  const T adj_d = T(3) * pi * viscosity * (d * d * adj.angular + adj.linear);
  Vec3<T> adj_s{adj_d / T(3), adj_d / T(3), adj_d / T(3)};
  for (int i = 0; i < 3; ++i) {
    const int j = (i + 1) % 3, k = (i + 2) % 3;
    const T sj = s[j], sk = s[k], ga = density * adj.angular_quadratic[i] / T(64);
    adj_s[i] += ga * (sj * sj * sj * sj + sk * sk * sk * sk);
    adj_s[j] += ga * s[i] * T(4) * sj * sj * sj + density * sk * adj.linear_quadratic[i] / T(2);
    adj_s[k] += ga * s[i] * T(4) * sk * sk * sk + density * sj * adj.linear_quadratic[i] / T(2);
  }
  // s_i^2 = 6 e_i / m: ds_i = 3 de_i / (m s_i) - s_i dm / (2 m), e_i clamped from below
  for (int i = 0; i < 3; ++i) {
    adj_mass -= s[i] * adj_s[i] / (T(2) * mass);
    T excess = inertia[(i + 1) % 3] + inertia[(i + 2) % 3] - inertia[i];
    if (!(excess > T(kFluidMinVal))) continue;
    const T adj_e = T(3) * adj_s[i] / (mass * s[i]);
    adj_inertia[(i + 1) % 3] += adj_e;
    adj_inertia[(i + 2) % 3] += adj_e;
    adj_inertia[i] -= adj_e;
  }
}

// the drag -(c + q_i |x_i|) x_i on each axis
template <class T>
PHX_HD PHX_INLINE Vec3<T> drag(T c, const Vec3<T>& q, const Vec3<T>& x) {
  Vec3<T> f;
  for (int i = 0; i < 3; ++i) f[i] = -(c + q[i] * abs(x[i])) * x[i];
  return f;
}

// adjoint of drag: to adj_x, adj_c and adj_q, accumulated
template <class T>
PHX_HD PHX_INLINE void adj_drag(T c, const Vec3<T>& q, const Vec3<T>& x, const Vec3<T>& adj_f,
                                Vec3<T>& adj_x, T& adj_c, Vec3<T>& adj_q) {
  for (int i = 0; i < 3; ++i) {
    const T ax = abs(x[i]);
    adj_x[i] -= (c + T(2) * q[i] * ax) * adj_f[i];
    adj_c -= x[i] * adj_f[i];
    adj_q[i] -= ax * x[i] * adj_f[i];
  }
}

// the drag's slope on each axis, d f_i / d x_i = -(c + 2 q_i |x_i|)
template <class T>
PHX_HD PHX_INLINE Vec3<T> drag_slope(T c, const Vec3<T>& q, const Vec3<T>& x) {
  Vec3<T> s;
  for (int i = 0; i < 3; ++i) s[i] = -(c + T(2) * q[i] * abs(x[i]));
  return s;
}

// adjoint of drag_slope: to adj_x (|x|'s derivative taken as 0 at 0), adj_c and adj_q,
// accumulated
template <class T>
PHX_HD PHX_INLINE void adj_drag_slope(const Vec3<T>& q, const Vec3<T>& x, const Vec3<T>& adj_s,
                                      Vec3<T>& adj_x, T& adj_c, Vec3<T>& adj_q) {
  for (int i = 0; i < 3; ++i) {
    const T sign = select(x[i] > T(0), T(1), select(x[i] < T(0), T(-1), T(0)));
    adj_x[i] -= T(2) * q[i] * sign * adj_s[i];
    adj_c -= adj_s[i];
    adj_q[i] -= T(2) * abs(x[i]) * adj_s[i];
  }
}

// Body b's motion through the medium: its centre of mass relative to its tree's origin, the
// box's frame, and the angular and linear velocities in it (the latter less the wind), from
// com_pos's and com_vel's arrays
template <class T>
struct FluidMotion {
  Vec3<T> r;
  Mat3<T> R;
  Vec3<T> angular, linear;  // world
  Vec3<T> local_angular, local_linear;
};

template <class T, class S>
PHX_HD PHX_INLINE FluidMotion<T> fluid_motion(const ModelView<S>& m, const Workspace<S>& w, int b) {
  FluidMotion<T> f;
  f.r = com_offset<T>(m, w, b);
  f.R = Mat3<T>::load(w.ximat + 9 * b);
  Vec6<T> v = Vec6<T>::load(w.cvel + 6 * b);
  f.angular = v.ang();
  f.linear = v.lin() + cross(f.angular, f.r) - Vec3<T>::load(m.wind);
  f.local_angular = mul_transpose(f.R, f.angular);
  f.local_linear = mul_transpose(f.R, f.linear);
  return f;
}

// adjoint of fluid_motion: the local velocities' adjoints, with those of the box's frame (adj_R)
// and of the centre of mass's offset (adj_r) the caller has gathered, to the adjoints of cvel,
// xmat and xpos in a and of body_ipos (adj_ipos, may be null), accumulated
template <class T, class S>
PHX_HD void adj_fluid_motion(const ModelView<S>& m, const Workspace<S>& w, int b,
                             const FluidMotion<T>& f, const Vec3<T>& adj_local_angular,
                             const Vec3<T>& adj_local_linear, Mat3<T>& adj_R, Vec3<T>& adj_r,
                             AdjWorkspace<T>& a, T* adj_ipos) {
  Vec3<T> adj_angular, adj_linear;
  adj_mul_transpose(f.R, f.angular, adj_R, adj_angular, adj_local_angular);
  adj_mul_transpose(f.R, f.linear, adj_R, adj_linear, adj_local_linear);
  // linear = cvel_lin + angular x r - wind
  adj_cross(f.angular, f.r, adj_angular, adj_r, adj_linear);
  adj_angular.add_to(a.cvel + 6 * b);
  adj_linear.add_to(a.cvel + 6 * b + 3);
  adj_com_offset(m, w, b, adj_r, a, adj_ipos);
  // ximat = xmat Q (Q the principal frame in the body's): adj_xmat += adj_R Q^T
  const Mat3<T> adj_xmat = adj_R * transpose(to_mat(Quat<T>::load(m.body_iquat + 4 * b)));
  for (int k = 0; k < 9; ++k) a.xmat[9 * b + k] += adj_xmat.m[k];
}

// body b's drag coefficients from the model
template <class T, class S>
PHX_HD PHX_INLINE FluidDrag<T> body_fluid_drag(const ModelView<S>& m, int b) {
  return fluid_drag(T(m.density), T(m.viscosity),
                    fluid_box(T(m.body_mass[b]), Vec3<T>::load(m.body_inertia + 3 * b)));
}

// adjoint of body_fluid_drag: to body b's mass and inertia in adj_model, accumulated
template <class T, class S>
PHX_HD void adj_body_fluid_drag(const ModelView<S>& m, int b, const FluidDrag<T>& adj_c,
                                const ModelAdjoint<T>& adj_model) {
  if (!adj_model.body_mass && !adj_model.body_inertia) return;
  T adj_mass = T(0);
  Vec3<T> adj_inertia;
  adj_fluid_drag(T(m.density), T(m.viscosity), T(m.body_mass[b]),
                 Vec3<T>::load(m.body_inertia + 3 * b), adj_c, adj_mass, adj_inertia);
  if (adj_model.body_mass) adj_model.body_mass[b] += adj_mass;
  if (adj_model.body_inertia) adj_inertia.add_to(adj_model.body_inertia + 3 * b);
}

// whether body b feels the medium: it has mass and dofs to move
template <class S>
PHX_HD PHX_INLINE bool feels_fluid(const ModelView<S>& m, int b) {
  if (last_dof(m, b) < 0) return false;
  if (m.body_mass[b] < S(kFluidMinVal)) return false;
  return true;
}

// The fluid's generalized force added to qfrc (MuJoCo's qfrc_fluid). Needs com_pos and com_vel.
template <class T>
PHX_HD PHX_DEVICE_NOINLINE void fluid_force(const ModelView<T>& m, const Workspace<T>& w, T* qfrc) {
  for (int b = 1; b < m.nbody; ++b) {
    if (!feels_fluid(m, b)) continue;
    const FluidDrag<T> c = body_fluid_drag<T>(m, b);
    const FluidMotion<T> f = fluid_motion<T>(m, w, b);
    Vec3<T> torque = f.R * drag(c.angular, c.angular_quadratic, f.local_angular);
    Vec3<T> force = f.R * drag(c.linear, c.linear_quadratic, f.local_linear);
    add_body_wrench(m, w, b, f.r, force, torque, qfrc);
  }
}

// Adjoint of fluid_force: from adj_qfrc to the adjoints of cvel, cdof, xpos and xmat in a, and
// of body_ipos, body_mass and body_inertia in adj_model, accumulated.
template <class T, class S>
PHX_HD PHX_DEVICE_NOINLINE void adj_fluid_force(const ModelView<S>& m, const Workspace<S>& w,
                                                const T* adj_qfrc, AdjWorkspace<T>& a,
                                                const ModelAdjoint<T>& adj_model) {
  for (int b = 1; b < m.nbody; ++b) {
    if (!feels_fluid(m, b)) continue;
    const FluidDrag<T> c = body_fluid_drag<T>(m, b);
    const FluidMotion<T> f = fluid_motion<T>(m, w, b);
    const Vec3<T> torque_local = drag(c.angular, c.angular_quadratic, f.local_angular);
    const Vec3<T> force_local = drag(c.linear, c.linear_quadratic, f.local_linear);
    Vec3<T> adj_r, adj_force, adj_torque;
    adj_body_wrench(m, w, b, f.r, f.R * force_local, f.R * torque_local, adj_qfrc, a, adj_r,
                    adj_force, adj_torque);
    // torque = R drag(local_angular), local_angular = R^T angular; likewise the force
    Mat3<T> adj_R;
    Vec3<T> adj_torque_local, adj_force_local, adj_local_angular, adj_local_linear;
    adj_mul(f.R, torque_local, adj_R, adj_torque_local, adj_torque);
    adj_mul(f.R, force_local, adj_R, adj_force_local, adj_force);
    FluidDrag<T> adj_c;
    adj_drag(c.angular, c.angular_quadratic, f.local_angular, adj_torque_local, adj_local_angular,
             adj_c.angular, adj_c.angular_quadratic);
    adj_drag(c.linear, c.linear_quadratic, f.local_linear, adj_force_local, adj_local_linear,
             adj_c.linear, adj_c.linear_quadratic);
    adj_fluid_motion(m, w, b, f, adj_local_angular, adj_local_linear, adj_R, adj_r, a,
                     adj_model.body_ipos);
    adj_body_fluid_drag(m, b, adj_c, adj_model);
  }
}

// ---- the velocity slope, for the implicit integrator -----------------------------------------

// The velocity of body b per unit qvel u (world): the angular velocity and the linear velocity
// of the point r (from the tree's origin), sum over the path of u_d (cdof_ang, cdof_lin +
// cdof_ang x r)
template <class T>
struct BodyVelocity {
  Vec3<T> angular, linear;
};

template <class T, class S>
PHX_HD PHX_INLINE BodyVelocity<T> body_velocity(const ModelView<S>& m, const Workspace<S>& w, int b,
                                                const Vec3<T>& r, const T* u) {
  BodyVelocity<T> out;
  for (int d = last_dof(m, b); d >= 0; d = m.dof_parentid[d]) {
    const Vec6<T> s = Vec6<T>::load(w.cdof + 6 * d);
    out.angular += u[d] * s.ang();
    out.linear += u[d] * s.lin();
  }
  out.linear += cross(out.angular, r);
  return out;
}

// adjoint of body_velocity: to the adjoints of cdof in a and of r, accumulated
template <class T, class S>
PHX_HD PHX_INLINE void adj_body_velocity(const ModelView<S>& m, int b, const Vec3<T>& r, const T* u,
                                         const BodyVelocity<T>& vel, const BodyVelocity<T>& adj,
                                         AdjWorkspace<T>& a, Vec3<T>& adj_r) {
  Vec3<T> adj_angular = adj.angular;
  adj_cross(vel.angular, r, adj_angular, adj_r, adj.linear);
  for (int d = last_dof(m, b); d >= 0; d = m.dof_parentid[d]) {
    (u[d] * adj_angular).add_to(a.cdof + 6 * d);
    (u[d] * adj.linear).add_to(a.cdof + 6 * d + 3);
  }
}

// the row (nv) of qvel's share in x_k, body b's velocity along its box's axis k (angular for
// k < 3, of the centre of mass for k >= 3), for fluid slopes
template <class T>
PHX_HD void fluid_velocity_row(const ModelView<T>& m, const Workspace<T>& w, int b,
                               const FluidMotion<T>& f, int k, T* row) {
  const Vec3<T> axis = f.R.col(k % 3);
  for (int d = 0; d < m.nv; ++d) row[d] = T(0);
  for (int d = last_dof(m, b); d >= 0; d = m.dof_parentid[d]) {
    const Vec6<T> s = Vec6<T>::load(w.cdof + 6 * d);
    row[d] = k < 3 ? dot(axis, s.ang()) : dot(axis, s.lin() + cross(s.ang(), f.r));
  }
}

// The gradient of scale u^T D v (D the fluid's velocity slope, implicit.h's add_fluid_slope; u
// and v fixed vectors) in the kinematics (a),
// the velocity (through cvel in a) and body_ipos, body_mass and body_inertia, accumulated:
// u^T D v = sum over bodies and axes of slope_k (R^T U)_k (R^T V)_k, U and V the body's
// velocities (body_velocity) for u and v.
template <class T>
PHX_HD PHX_DEVICE_NOINLINE void adj_fluid_slope(const ModelView<T>& m, const Workspace<T>& w,
                                                AdjWorkspace<T>& a, T scale, const T* u, const T* v,
                                                const ModelAdjoint<T>& adj_model) {
  for (int b = 1; b < m.nbody; ++b) {
    if (!feels_fluid(m, b)) continue;
    const FluidDrag<T> c = body_fluid_drag<T>(m, b);
    const FluidMotion<T> f = fluid_motion<T>(m, w, b);
    const BodyVelocity<T> U = body_velocity(m, w, b, f.r, u), V = body_velocity(m, w, b, f.r, v);
    const Vec3<T> pa = mul_transpose(f.R, U.angular), qa = mul_transpose(f.R, V.angular);
    const Vec3<T> pl = mul_transpose(f.R, U.linear), ql = mul_transpose(f.R, V.linear);
    const Vec3<T> sa = drag_slope(c.angular, c.angular_quadratic, f.local_angular);
    const Vec3<T> sl = drag_slope(c.linear, c.linear_quadratic, f.local_linear);
    Vec3<T> adj_sa, adj_sl, adj_pa, adj_qa, adj_pl, adj_ql;
    for (int k = 0; k < 3; ++k) {
      adj_sa[k] = scale * pa[k] * qa[k];
      adj_sl[k] = scale * pl[k] * ql[k];
      adj_pa[k] = scale * sa[k] * qa[k];
      adj_qa[k] = scale * sa[k] * pa[k];
      adj_pl[k] = scale * sl[k] * ql[k];
      adj_ql[k] = scale * sl[k] * pl[k];
    }
    FluidDrag<T> adj_c;
    Vec3<T> adj_local_angular, adj_local_linear, adj_r;
    adj_drag_slope(c.angular_quadratic, f.local_angular, adj_sa, adj_local_angular, adj_c.angular,
                   adj_c.angular_quadratic);
    adj_drag_slope(c.linear_quadratic, f.local_linear, adj_sl, adj_local_linear, adj_c.linear,
                   adj_c.linear_quadratic);
    Mat3<T> adj_R;
    BodyVelocity<T> adj_U, adj_V;
    adj_mul_transpose(f.R, U.angular, adj_R, adj_U.angular, adj_pa);
    adj_mul_transpose(f.R, V.angular, adj_R, adj_V.angular, adj_qa);
    adj_mul_transpose(f.R, U.linear, adj_R, adj_U.linear, adj_pl);
    adj_mul_transpose(f.R, V.linear, adj_R, adj_V.linear, adj_ql);
    adj_body_velocity(m, b, f.r, u, U, adj_U, a, adj_r);
    adj_body_velocity(m, b, f.r, v, V, adj_V, a, adj_r);
    adj_fluid_motion(m, w, b, f, adj_local_angular, adj_local_linear, adj_R, adj_r, a,
                     adj_model.body_ipos);
    adj_body_fluid_drag(m, b, adj_c, adj_model);
  }
}

}  // namespace phx
