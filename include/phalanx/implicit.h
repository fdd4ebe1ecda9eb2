// Velocity-implicit integration (MuJoCo's "implicitfast" integrator): the step solves
//   H qacc = qfrc - c,   H = M - h D,   qvel' = qvel + h qacc,   qpos' = qpos (+) h qvel',
// with D the slope d qfrc / d qvel of the applied forces (joint damping, tendon damping, the
// velocity terms of the actuators' gains and biases, and the medium's drag), kept on the pairs of
// dofs the mass matrix couples (a dof, its ancestors and its descendants) so that H has M's
// sparsity and is symmetric. The Coriolis and centrifugal forces stay explicit, except for a
// standalone free body (a free joint, no child with mass), whose 6x6 block also takes the slope of
// its gyroscopic force and is solved on its own (it is unsymmetric). An actuator whose force range
// clamps its force adds no slope. Damping enters H instead of the force's explicit Euler update, so
// stiff dampers (cables, position servos with large kv) stay stable at time steps where the
// explicit update diverges.
//
// The reverse pass differentiates the residual r = RNEA(q, v, qacc) - h D qacc + h B qacc - qfrc
// = 0 implicitly (B the free bodies' gyroscopic slope): lambda = H^-T adj_qacc, and
// adj_x = -lambda^T dr/dx, where the slopes' own dependence on the configuration (the tendon
// rows, the actuators' moment arms, the free body's orientation, the drag's rows and slopes),
// on the velocity, the inputs and the parameters (damping, gear, gain and bias parameters,
// mass, inertia, centre of mass) is differentiated by adj_velocity_slope and
// adj_free_bias_slope.
#pragma once

#include "phalanx/math/dense.h"
#include "phalanx/math/dual.h"
#include "phalanx/smooth.h"
#include "phalanx/tendon.h"

namespace phx {

// ---- the dof pairs the mass matrix couples ------------------------------------------------

// out_k = sum of x_j over the dofs j coupled to k: k, its ancestors and its descendants
template <class T, class S>
PHX_HD void coupled_sum(const ModelView<S>& m, const T* x, T* out) {
  for (int k = 0; k < m.nv; ++k) out[k] = x[k];
  for (int i = 0; i < m.nv; ++i)
    for (int j = m.dof_parentid[i]; j >= 0; j = m.dof_parentid[j]) {
      out[i] += x[j];
      out[j] += x[i];
    }
}

// H += s r r^T on the coupled pairs (r a row of nv)
template <class T>
PHX_HD void add_coupled_outer(const ModelView<T>& m, T s, const T* r, T* H) {
  const int nv = m.nv;
  for (int i = 0; i < nv; ++i) {
    if (r[i] == T(0)) continue;
    const T si = s * r[i];
    H[i * nv + i] += si * r[i];
    for (int j = m.dof_parentid[i]; j >= 0; j = m.dof_parentid[j]) {
      const T v = si * r[j];
      H[i * nv + j] += v;
      H[j * nv + i] += v;
    }
  }
}

// rho = u^T (r r^T on the coupled pairs) v = sum_k u_k r_k P(r v)_k, P the coupled_sum, and
// into y its gradient in r: y_k = u_k P(r v)_k + v_k P(r u)_k. su is scratch of nv.
template <class T, class S>
PHX_HD T coupled_form(const ModelView<S>& m, const T* r, const T* u, const T* v, T* su, T* y) {
  const int nv = m.nv;
  for (int k = 0; k < nv; ++k) su[k] = r[k] * v[k];
  coupled_sum(m, su, y);
  T rho(0);
  for (int k = 0; k < nv; ++k) rho += u[k] * r[k] * y[k];
  // y_k = u_k P(r v)_k + v_k (r u)_k, then the coupled pairs' share of v_k P(r u)_k
  for (int k = 0; k < nv; ++k) {
    su[k] = r[k] * u[k];
    y[k] = u[k] * y[k] + v[k] * su[k];
  }
  for (int i = 0; i < nv; ++i)
    for (int j = m.dof_parentid[i]; j >= 0; j = m.dof_parentid[j]) {
      y[i] += v[i] * su[j];
      y[j] += v[j] * su[i];
    }
  return rho;
}

// ---- the slopes of the applied forces -----------------------------------------------------

// Whether actuator u's force depends on the velocity V, whatever its parameters: through an
// affine or a muscle's gain, or an affine bias (a motor's force and a muscle's bias do not)
template <class S>
PHX_HD bool actuator_has_slope(const ModelView<S>& m, int u) {
  return m.actuator_gaintype[u] != kGainFixed || m.actuator_biastype[u] == kBiasAffine;
}

// Actuator u's slope d force / d V (the gain's slope in V times the input, plus the bias's), 0
// where forcerange clamps the force (at a bound or beyond, MuJoCo's mjd_actuator_vel). The
// input is the one the force reads: the ctrl after its clamp, or the activation.
template <class T, class S>
PHX_HD T actuator_velocity_slope(const ModelView<S>& m, int u, const ActuatorForce<T>& a) {
  if (m.actuator_forcelimited[u] &&
      (a.force <= m.actuator_forcerange[2 * u] || a.force >= m.actuator_forcerange[2 * u + 1]))
    return T(0);
  using D1 = Dual<T, 1>;
  D1 L(a.length), V(a.velocity), g[9], b[9];
  V.d[0] = T(1);
  load_actuator_params(m.actuator_gainprm, u, g);
  load_actuator_params(m.actuator_biasprm, u, b);
  D1 f = actuator_gain(m, u, L, V, g) * D1(a.ctrl) + actuator_bias(m, u, L, V, b);
  return f.d[0];
}

// H -= h D_fluid, the medium's slope d qfrc_fluid / d qvel (fluid.h): per body and axis k of
// its box, the drag's slope on x_k (drag_slope) times the outer product of x_k's row per unit
// qvel. A body's rows lie on its path, whose pairs are all coupled: D_fluid is kept whole.
template <class T>
PHX_HD PHX_DEVICE_NOINLINE void add_fluid_slope(const ModelView<T>& m, const Workspace<T>& w, T h,
                                                T* H, T* row) {
  for (int b = 1; b < m.nbody; ++b) {
    if (!feels_fluid(m, b)) continue;
    const FluidDrag<T> c = body_fluid_drag<T>(m, b);
    const FluidMotion<T> f = fluid_motion<T>(m, w, b);
    const Vec3<T> slope[2] = {drag_slope(c.angular, c.angular_quadratic, f.local_angular),
                              drag_slope(c.linear, c.linear_quadratic, f.local_linear)};
    for (int k = 0; k < 6; ++k) {
      fluid_velocity_row(m, w, b, f, k, row);
      add_coupled_outer(m, -h * slope[k / 3][k % 3], row, H);
    }
  }
}

// H <- M - h D on the coupled pairs (M with armature, from crba: needs the kinematics, com_pos,
// com_vel and tendon_kinematics in w); row is scratch of nv.
template <class T>
PHX_HD void implicit_metric(const ModelView<T>& m, const T* qpos, const T* qvel, const T* input,
                            Workspace<T>& w, T* H, T* row) {
  const int nv = m.nv;
  const T h = m.timestep;
  crba(m, w, H);
  for (int d = 0; d < nv; ++d) H[d * nv + d] += h * m.dof_damping[d];
  for (int t = 0; t < m.ntendon; ++t) {
    if (m.tendon_damping[t] == T(0)) continue;
    for (int d = 0; d < nv; ++d) row[d] = T(0);
    add_transmission_row(m, w, kTrnTendon, t, T(1), row);
    add_coupled_outer(m, h * m.tendon_damping[t], row, H);
  }
  for (int u = 0; u < m.nu; ++u) {
    const T gear = m.actuator_gear[u];
    const T g = actuator_velocity_slope(m, u, actuator_force(m, w, u, qpos, qvel, input));
    if (g == T(0)) continue;
    for (int d = 0; d < nv; ++d) row[d] = T(0);
    add_transmission_row(m, w, m.actuator_trntype[u], actuator_trn(m, u), T(1), row);
    add_coupled_outer(m, -h * gear * gear * g, row, H);
  }
  if (fluid_enabled(m)) add_fluid_slope(m, w, h, H, row);
}

// H = M - h D into w.implicit_H and its Cholesky factor over the dof trees; false when H is not
// positive definite (a device function of its own, as is implicit_solve: the forward and the
// reverse step both call them)
template <class T>
PHX_HD PHX_DEVICE_NOINLINE bool implicit_factor(const ModelView<T>& m, const T* qpos, const T* qvel,
                                                const T* input, Workspace<T>& w) {
  implicit_metric(m, qpos, qvel, input, w, w.implicit_H, w.implicit_row);
  return cholesky(w.implicit_H, m.nv, m.dof_treeadr);
}

// ---- standalone free bodies ---------------------------------------------------------------

// whether joint j is the free joint of a standalone free body (its body's only joint, and no
// body below it has mass or dofs: MuJoCo's mj_isFreeBody). Bodies are in depth-first order.
template <class S>
PHX_HD bool standalone_free_joint(const ModelView<S>& m, int j) {
  const int b = m.jnt_bodyid[j];
  if (m.jnt_type[j] != kJointFree || m.body_jntnum[b] != 1) return false;
  for (int c = b + 1; c < m.nbody; ++c) {
    int p = m.body_parentid[c];
    while (p > b) p = m.body_parentid[p];
    if (p != b) break;
    if (m.body_dofnum[c] > 0 || m.body_mass[c] != S(0)) return false;
  }
  return true;
}

// The slope of a free body's gyroscopic force along a rotational velocity x, in the body
// frame: with w the body-frame angular velocity, s the centre of mass and I the inertia about
// it (body frame), u = w x (w x s) and g = w x I w,
//   lin = mass du[x]  (the linear rows' slope is R lin, R the body's rotation),
//   rot = dg[x] + mass s x du[x],
//   du[x] = x (w . s) + w (x . s) - 2 s (w . x),  dg[x] = x x I w + w x I x.
template <class R>
struct FreeBiasSlope {
  Vec3<R> lin, rot;
};
template <class R>
PHX_HD FreeBiasSlope<R> free_bias_slope(const Vec3<R>& w, const Vec3<R>& s, const R& mass,
                                        const Mat3<R>& I, const Vec3<R>& x) {
  Vec3<R> du = dot(w, s) * x + dot(x, s) * w - (R(2) * dot(w, x)) * s;
  Vec3<R> dg = cross(x, I * w) + cross(w, I * x);
  return {mass * du, dg + mass * cross(s, du)};
}

// the body-frame inertia about the centre of mass, Q diag(inertia) Q^T (Q: body_iquat)
template <class R, class S>
PHX_HD Mat3<R> body_frame_inertia(const ModelView<S>& m, int b, const Vec3<R>& diag) {
  const Mat3<S> Q = to_mat(Quat<S>::load(m.body_iquat + 4 * b));
  Mat3<R> I;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k) I(i, j) += R(Q(i, k) * Q(j, k)) * diag[k];
  return I;
}

// The 6x6 block of the free joint j's dofs (adr the first): H's block from its Cholesky factor
// L (cholesky()'s layout) plus h times the gyroscopic slope B (rotational columns only).
template <class T>
PHX_HD void free_body_block(const ModelView<T>& m, const Workspace<T>& w, int j, const T* qvel,
                            const T* L, T* A6) {
  const int nv = m.nv, adr = m.jnt_dofadr[j], b = m.jnt_bodyid[j];
  const T h = m.timestep;
  auto l = [&](int r, int c) {  // the factor's entry, block-local indices, c <= r
    const T v = L[(adr + r) * nv + adr + c];
    return r == c ? T(1) / v : v;
  };
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c <= r; ++c) {
      T s(0);
      for (int k = 0; k <= c; ++k) s += l(r, k) * l(c, k);
      A6[6 * r + c] = A6[6 * c + r] = s;
    }
  const Vec3<T> omega = Vec3<T>::load(qvel + adr + 3), s = Vec3<T>::load(m.body_ipos + 3 * b);
  const Mat3<T> I = body_frame_inertia(m, b, Vec3<T>::load(m.body_inertia + 3 * b));
  const Mat3<T> Rot = Mat3<T>::load(w.xmat + 9 * b);
  for (int k = 0; k < 3; ++k) {
    Vec3<T> x;
    x[k] = T(1);
    FreeBiasSlope<T> d = free_bias_slope(omega, s, m.body_mass[b], I, x);
    const Vec3<T> lin = Rot * d.lin;
    for (int r = 0; r < 3; ++r) {
      A6[6 * r + 3 + k] += h * lin[r];
      A6[6 * (3 + r) + 3 + k] += h * d.rot[r];
    }
  }
}

// x <- H^-1 x (transpose: H^-T x) with L the Cholesky factor of H (cholesky() with the tree
// blocks): the symmetric solve, then each standalone free body's rows solved again with its
// own block (free_body_block, LU). keep is scratch of nv.
template <class T>
PHX_HD PHX_DEVICE_NOINLINE void implicit_solve(const ModelView<T>& m, const Workspace<T>& w,
                                               const T* qvel, const T* L, T* x, T* keep,
                                               bool transpose = false) {
  for (int d = 0; d < m.nv; ++d) keep[d] = x[d];
  cholesky_solve(L, m.nv, x, m.dof_treeadr);
  for (int j = 0; j < m.njnt; ++j) {
    if (!standalone_free_joint(m, j)) continue;
    T A6[36], y[6];
    int piv[6];
    free_body_block(m, w, j, qvel, L, A6);
    const int adr = m.jnt_dofadr[j];
    if (!lu_factor(A6, 6, piv)) continue;  // singular: the symmetric solve stands
    for (int r = 0; r < 6; ++r) x[adr + r] = keep[adr + r];
    lu_solve(A6, 6, piv, x + adr, y, transpose);
  }
}

// ---- adjoints -----------------------------------------------------------------------------

// The nine gain or bias parameters' share of actuator k's slope term: c d g / d prm, g = d force
// / dV, each parameter one inner Dual direction, kDualDirections of them a pass (a device
// function of its own: the nested Dual numbers are the largest code of the implicit adjoint).
template <class T>
PHX_HD PHX_DEVICE_NOINLINE void adj_slope_params(const ModelView<T>& m, int k,
                                                 const ActuatorForce<T>& f, T c,
                                                 const ModelAdjoint<T>& adj_model) {
  constexpr int N = kDualDirections<T, 9>;  // parameters a pass
  using P = Dual<Dual<T, N>, 1>;
  T* adj_prm[2] = {adj_model.actuator_gainprm, adj_model.actuator_biasprm};
  for (int which = 0; which < 2; ++which) {
    if (!adj_prm[which]) continue;
    for (int first = 0; first < 9; first += N) {
      P p[9], LP(f.length), VP(f.velocity);
      VP.d[0] = Dual<T, N>(T(1));
      load_actuator_params(which == 0 ? m.actuator_gainprm : m.actuator_biasprm, k, p);
      for (int i = 0; i < N && first + i < 9; ++i) p[first + i].v.d[i] = T(1);
      const Dual<T, N> gk = which == 0 ? (actuator_gain(m, k, LP, VP, p) * P(f.ctrl)).d[0]
                                       : actuator_bias(m, k, LP, VP, p).d[0];
      for (int i = 0; i < N && first + i < 9; ++i) adj_prm[which][9 * k + first + i] += c * gk.d[i];
    }
  }
}

// Actuator k's share of adj_velocity_slope (below; a device function of its own): its slope
// g = gear^2 d force / dV, whose own slopes in the length, velocity and input come from
// nested Dual numbers.
template <class T>
PHX_HD PHX_DEVICE_NOINLINE void adj_actuator_slope(const ModelView<T>& m, int k, const T* qpos,
                                                   const T* qvel, const T* input,
                                                   const Workspace<T>& w, AdjWorkspace<T>& a,
                                                   T scale, const T* u, const T* v, T* row, T* su,
                                                   T* y, T* adj_qpos, T* adj_qvel, T* adj_input,
                                                   const ModelAdjoint<T>& adj_model) {
  if (!actuator_has_slope(m, k)) return;  // nor slopes of it in the state or the parameters
  const ActuatorForce<T> f = actuator_force(m, w, k, qpos, qvel, input);
  if (m.actuator_forcelimited[k] &&
      (f.force <= m.actuator_forcerange[2 * k] || f.force >= m.actuator_forcerange[2 * k + 1]))
    return;               // a clamped force has no slope
  using In = Dual<T, 3>;  // slopes in (L, V, input)
  using D = Dual<In, 1>;  // the slope in V
  In Li(f.length), Vi(f.velocity), Xi(f.ctrl);
  Li.d[0] = Vi.d[1] = Xi.d[2] = T(1);
  D L(Li), V(Vi), gp[9], bp[9];
  V.d[0] = In(T(1));
  load_actuator_params(m.actuator_gainprm, k, gp);
  load_actuator_params(m.actuator_biasprm, k, bp);
  const In g = (actuator_gain(m, k, L, V, gp) * D(Xi) + actuator_bias(m, k, L, V, bp)).d[0];
  const bool prm = adj_model.actuator_gainprm || adj_model.actuator_biasprm;
  if (g.v == T(0) && g.d[0] == T(0) && g.d[1] == T(0) && g.d[2] == T(0) && !prm) return;
  const int type = m.actuator_trntype[k], id = actuator_trn(m, k);
  const T gear = m.actuator_gear[k];
  for (int d = 0; d < m.nv; ++d) row[d] = T(0);
  add_transmission_row(m, w, type, id, T(1), row);
  const T rho = coupled_form(m, row, u, v, su, y);
  const T c = scale * rho * gear * gear;  // the weight of g
  adj_transmission_row(m, w, type, id, scale * gear * gear * g.v, PointerRow<T>{y}, a);
  if (g.d[0] != T(0) || g.d[1] != T(0))
    adj_transmission_state(m, w, type, id, qvel, gear * c * g.d[0], gear * c * g.d[1], a, adj_qpos,
                           adj_qvel);
  if (adj_input) adj_input[k] = select(f.ctrl_inside, adj_input[k] + c * g.d[2], adj_input[k]);
  if (adj_model.actuator_gear)
    adj_model.actuator_gear[k] +=
        scale * rho * T(2) * gear * g.v + c * (g.d[0] * f.trn_length + g.d[1] * f.trn_velocity);
  if (prm) adj_slope_params(m, k, f, c, adj_model);
}

// Accumulates the gradient of scale u^T D v (D the slope implicit_metric subtracts, u and v
// fixed vectors) in the configuration (through the tendon rows and moment arms, into a and
// adj_qpos), the velocity and inputs (actuators whose gain or bias depends on them), and the
// parameters dof_damping, tendon_damping, actuator_gear, actuator_gainprm and
// actuator_biasprm. row, su and y are scratch of nv. A device function of its own: both the
// unconstrained and the constrained adjoint call it.
template <class T>
PHX_HD PHX_DEVICE_NOINLINE void adj_velocity_slope(const ModelView<T>& m, const T* qpos,
                                                   const T* qvel, const T* input,
                                                   const Workspace<T>& w, AdjWorkspace<T>& a,
                                                   T scale, const T* u, const T* v, T* row, T* su,
                                                   T* y, T* adj_qpos, T* adj_qvel, T* adj_input,
                                                   const ModelAdjoint<T>& adj_model) {
  const int nv = m.nv;
  if (adj_model.dof_damping)
    for (int d = 0; d < nv; ++d) adj_model.dof_damping[d] -= scale * u[d] * v[d];
  for (int t = 0; t < m.ntendon; ++t) {
    const T b = m.tendon_damping[t];
    if (b == T(0) && !adj_model.tendon_damping) continue;
    for (int d = 0; d < nv; ++d) row[d] = T(0);
    add_transmission_row(m, w, kTrnTendon, t, T(1), row);
    const T rho = coupled_form(m, row, u, v, su, y);
    if (adj_model.tendon_damping) adj_model.tendon_damping[t] -= scale * rho;
    adj_transmission_row(m, w, kTrnTendon, t, -scale * b, PointerRow<T>{y}, a);
  }
  for (int k = 0; k < m.nu; ++k)
    adj_actuator_slope(m, k, qpos, qvel, input, w, a, scale, u, v, row, su, y, adj_qpos, adj_qvel,
                       adj_input, adj_model);
  if (fluid_enabled(m)) adj_fluid_slope(m, w, a, scale, u, v, adj_model);
}

// Accumulates the gradient of scale u^T B v over the standalone free bodies (B the slope of
// the gyroscopic force, free_bias_slope; v's rotational part the direction) in the body's
// rotation (a.xmat), its angular velocity (adj_qvel), and body_ipos, body_mass and
// body_inertia, by Dual numbers in the ten of those: input k is the angular velocity's k
// (0..2), body_ipos' k - 3 (3..5), body_mass (6) or body_inertia's k - 7 (7..9), and a pass
// takes N of them (kDualDirections: all ten on the CPU; each direction's slopes are computed on
// their own, so N does not change the result). A device function of its own.
template <class T, int N = kDualDirections<T, 10>>
PHX_HD PHX_DEVICE_NOINLINE void adj_free_bias_slope(const ModelView<T>& m, const T* qvel,
                                                    const Workspace<T>& w, AdjWorkspace<T>& a,
                                                    T scale, const T* u, const T* v, T* adj_qvel,
                                                    const ModelAdjoint<T>& adj_model) {
  constexpr int kInputs = 10;
  using D = Dual<T, N>;
  for (int j = 0; j < m.njnt; ++j) {
    if (!standalone_free_joint(m, j)) continue;
    const int adr = m.jnt_dofadr[j], b = m.jnt_bodyid[j];
    const Mat3<T> Rot = Mat3<T>::load(w.xmat + 9 * b);
    const Vec3<T> ulin = mul_transpose(Rot, Vec3<T>::load(u + adr));
    for (int first = 0; first < kInputs; first += N) {
      // input k at value x, seeded when this pass takes it
      const auto input = [first](T x, int k) {
        D d(x);
        if (k >= first && k < first + N) d.d[k - first] = T(1);
        return d;
      };
      Vec3<D> om, s, diag, x, ul, ur;
      for (int i = 0; i < 3; ++i) {
        om[i] = input(qvel[adr + 3 + i], i);
        s[i] = input(m.body_ipos[3 * b + i], 3 + i);
        diag[i] = input(m.body_inertia[3 * b + i], 7 + i);
        x[i] = D(v[adr + 3 + i]);
        ul[i] = D(ulin[i]);
        ur[i] = D(u[adr + 3 + i]);
      }
      const D mass = input(m.body_mass[b], 6);
      const FreeBiasSlope<D> d = free_bias_slope(om, s, mass, body_frame_inertia(m, b, diag), x);
      const D phi = dot(ul, d.lin) + dot(ur, d.rot);
      for (int i = 0; i < N && first + i < kInputs; ++i) {
        const int k = first + i;
        const T g = scale * phi.d[i];
        if (k < 3)
          adj_qvel[adr + 3 + k] += g;
        else if (k < 6 && adj_model.body_ipos)
          adj_model.body_ipos[3 * b + k - 3] += g;
        else if (k == 6 && adj_model.body_mass)
          adj_model.body_mass[b] += g;
        else if (k > 6 && adj_model.body_inertia)
          adj_model.body_inertia[3 * b + k - 7] += g;
      }
      if (first > 0) continue;
      // the linear rows are R lin: d/dR_ij of u_lin . R lin = u_lin_i lin_j
      for (int i = 0; i < 3; ++i)
        for (int k = 0; k < 3; ++k) a.xmat[9 * b + 3 * i + k] += scale * u[adr + i] * d.lin[k].v;
    }
  }
}

}  // namespace phx
