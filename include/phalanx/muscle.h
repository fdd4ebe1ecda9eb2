// Muscles as MuJoCo models them: the active force-length and force-velocity curves (the gain),
// the passive force-length curve (the bias) and the activation dynamics whose time constant
// depends on the activation and on whether it rises or falls (Millard et al., "Flexing
// computational muscle: modeling and simulation of musculotendon dynamics", J. Biomech. Eng.
// 2013). Each curve is piecewise polynomial in its arguments; one scalar type R runs them, so
// the adjoints evaluate them on Dual numbers for exact slopes (smooth.h). The three entry points
// are device functions of their own (PHX_DEVICE_NOINLINE): ptxas compiles each once per scalar
// rather than at every call site.
//
// A muscle's nine parameters (Model::actuator_gainprm, and the same in actuator_biasprm):
// range[0], range[1]: the normalised lengths at the ends of lengthrange; force: the peak active
// force, or scale / acc0 where it is negative; scale; lmin, lmax: the normalised lengths where
// the active force vanishes; vmax: the shortening velocity (in optimal lengths per second) where
// it vanishes; fpmax: the passive force at lmax; fvmax: the active force's limit when
// lengthening, relative to the isometric force.
#pragma once

#include "phalanx/math/scalar.h"

namespace phx {

// The smallest denominator (MuJoCo's mjMINVAL): the muscles' divisions are guarded by it.
template <class R>
PHX_HD PHX_INLINE R muscle_guard(const R& x) {
  return x < R(1e-15) ? R(1e-15) : x;
}

// The peak active force: prm[2], or prm[3] (scale) / acc0 where prm[2] is negative.
template <class R>
PHX_HD PHX_INLINE R muscle_peak_force(const R* prm, const R& acc0) {
  return prm[2] < R(0) ? prm[3] / muscle_guard(acc0) : prm[2];
}

// The optimal length L0 (lengthrange over the normalised range) and the normalised length
// range[0] + (len - lengthrange[0]) / L0.
template <class R>
struct MuscleLength {
  R optimal, normalised;
};

template <class R>
PHX_HD PHX_INLINE MuscleLength<R> muscle_length(const R& len, const R* lengthrange, const R* prm) {
  MuscleLength<R> r;
  r.optimal = (lengthrange[1] - lengthrange[0]) / muscle_guard(prm[1] - prm[0]);
  r.normalised = prm[0] + (len - lengthrange[0]) / muscle_guard(r.optimal);
  return r;
}

// The active force-length curve of the normalised length L: zero outside [lmin, lmax], one at
// 1, and two half-parabolas on each side meeting at the midpoints.
template <class R>
PHX_HD PHX_INLINE R muscle_force_length(const R& L, const R& lmin, const R& lmax) {
  if (!(lmin <= L && L <= lmax)) return R(0);
  const R a = R(0.5) * (lmin + R(1)), b = R(0.5) * (R(1) + lmax);
  if (L <= a) {
    R x = (L - lmin) / muscle_guard(a - lmin);
    return R(0.5) * x * x;
  }
  if (L <= R(1)) {
    R x = (R(1) - L) / muscle_guard(R(1) - a);
    return R(1) - R(0.5) * x * x;
  }
  if (L <= b) {
    R x = (L - R(1)) / muscle_guard(b - R(1));
    return R(1) - R(0.5) * x * x;
  }
  R x = (lmax - L) / muscle_guard(lmax - b);
  return R(0.5) * x * x;
}

// The force-velocity curve of the normalised velocity V (negative when shortening): zero at
// V <= -1, (V + 1)^2 up to 0, rising to fvmax at V = fvmax - 1 and constant beyond.
template <class R>
PHX_HD PHX_INLINE R muscle_force_velocity(const R& V, const R& fvmax) {
  const R y = fvmax - R(1);
  if (V <= R(-1)) return R(0);
  if (V <= R(0)) return (V + R(1)) * (V + R(1));
  if (V <= y) return fvmax - (y - V) * (y - V) / muscle_guard(y);
  return fvmax;
}

// The gain (negative: a muscle pulls): -force FL(L) FV(V) at the actuator's length and velocity
// (MuJoCo's mju_muscleGain).
template <class R>
PHX_HD PHX_DEVICE_NOINLINE R muscle_gain(const R& len, const R& vel, const R* lengthrange,
                                         const R& acc0, const R* prm) {
  MuscleLength<R> l = muscle_length(len, lengthrange, prm);
  R V = vel / muscle_guard(l.optimal * prm[6]);
  return -muscle_peak_force(prm, acc0) * muscle_force_length(l.normalised, prm[4], prm[5]) *
         muscle_force_velocity(V, prm[8]);
}

// The passive force (the bias, MuJoCo's mju_muscleBias): zero up to the optimal length, a
// half-parabola to b = (1 + lmax) / 2 and linear beyond, reaching -force fpmax at lmax.
template <class R>
PHX_HD PHX_DEVICE_NOINLINE R muscle_bias(const R& len, const R* lengthrange, const R& acc0,
                                         const R* prm) {
  const R L = muscle_length(len, lengthrange, prm).normalised;
  const R b = R(0.5) * (R(1) + prm[5]);
  if (L <= R(1)) return R(0);
  const R f = muscle_peak_force(prm, acc0) * prm[7];
  if (L <= b) {
    R x = (L - R(1)) / muscle_guard(b - R(1));
    return -f * R(0.5) * x * x;
  }
  R x = (L - b) / muscle_guard(b - R(1));
  return -f * (R(0.5) + x);
}

// MuJoCo's quintic smoothstep: 0 below 0, 1 above 1, 6x^5 - 15x^4 + 10x^3 between.
template <class R>
PHX_HD PHX_INLINE R smoothstep5(const R& x) {
  if (x <= R(0)) return R(0);
  if (x >= R(1)) return R(1);
  return x * x * x * (R(3) * x * (R(2) * x - R(5)) + R(10));
}

// The activation's rate (MuJoCo's mju_muscleDynamics): (c - act) / tau with c the control
// clamped to [0, 1]; tau = tau_act (0.5 + 1.5 a) when activating and tau_deact / (0.5 + 1.5 a)
// when deactivating, a the activation clamped to [0, 1], switched by the sign of c - act, or
// blended by the smoothstep of (c - act) / width + 1/2 where the smoothing width is positive (the
// actuator's dynprm[0..2]). It takes its arguments by value: on the GPU, a reference would keep
// its temporary's address in a register of the caller across the caller's other calls.
template <class R>
PHX_HD PHX_DEVICE_NOINLINE R muscle_activation_rate(R ctrl, R act, R tau_act, R tau_deact,
                                                    R width) {
  const R c = clamp(ctrl, R(0), R(1)), a = clamp(act, R(0), R(1));
  const R tau_on = tau_act * (R(0.5) + R(1.5) * a);
  const R tau_off = tau_deact / (R(0.5) + R(1.5) * a);
  const R excess = c - act;
  R tau;
  if (width < R(1e-15)) {
    tau = excess > R(0) ? tau_on : tau_off;
  } else {
    tau = tau_off + (tau_on - tau_off) * smoothstep5(excess / width + R(0.5));
  }
  return excess / muscle_guard(tau);
}

}  // namespace phx
