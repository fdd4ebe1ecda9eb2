// Unit quaternions (w, x, y, z), MuJoCo's convention: q rotates body-frame vectors into the
// parent frame, and q1 * q2 applies q2 first in the frame of q1.
#pragma once

#include "phalanx/math/dual.h"
#include "phalanx/math/vec.h"

namespace phx {

template <class T>
struct Quat {
  T w = T(1), x = T(0), y = T(0), z = T(0);

  // from any stored scalar P that converts to T (a Lane broadcasts a forward value)
  template <class P>
  PHX_HD static Quat load(const P* p) { return {T(p[0]), T(p[1]), T(p[2]), T(p[3])}; }
  // all four components zero: the start of an adjoint accumulator (the default is identity)
  PHX_HD static Quat zero() { return {T(0), T(0), T(0), T(0)}; }
  PHX_HD void store(T* p) const { p[0] = w; p[1] = x; p[2] = y; p[3] = z; }
};

template <class T> PHX_HD PHX_INLINE Quat<T> operator*(const Quat<T>& a, const Quat<T>& b) {
  return {a.w * b.w - a.x * b.x - a.y * b.y - a.z * b.z,
          a.w * b.x + a.x * b.w + a.y * b.z - a.z * b.y,
          a.w * b.y - a.x * b.z + a.y * b.w + a.z * b.x,
          a.w * b.z + a.x * b.y - a.y * b.x + a.z * b.w};
}

template <class T> PHX_HD PHX_INLINE Quat<T> conjugate(const Quat<T>& q) { return {q.w, -q.x, -q.y, -q.z}; }

// q / |q|, with s = 1 / |q| (zero, and the identity returned, when |q| is zero, as MuJoCo)
template <class T> PHX_HD PHX_INLINE Quat<T> normalize(const Quat<T>& q, T& s) {
  T n2 = q.w * q.w + q.x * q.x + q.y * q.y + q.z * q.z;
  if (!(n2 > T(0))) {
    s = T(0);
    return Quat<T>{};
  }
  s = T(1) / sqrt(n2);
  return {s * q.w, s * q.x, s * q.y, s * q.z};
}
template <class T> PHX_HD PHX_INLINE Quat<T> normalize(const Quat<T>& q) {
  T s;
  return normalize(q, s);
}

// rotation by angle about a unit axis
template <class T> PHX_HD PHX_INLINE Quat<T> axis_angle(const Vec3<T>& axis, T angle) {
  T s = sin(T(0.5) * angle);
  return {cos(T(0.5) * angle), s * axis.x, s * axis.y, s * axis.z};
}

// rotation matrix of a unit quaternion
template <class T> PHX_HD PHX_INLINE Mat3<T> to_mat(const Quat<T>& q) {
  T ww = q.w * q.w, xx = q.x * q.x, yy = q.y * q.y, zz = q.z * q.z;
  T wx = q.w * q.x, wy = q.w * q.y, wz = q.w * q.z;
  T xy = q.x * q.y, xz = q.x * q.z, yz = q.y * q.z;
  Mat3<T> R;
  R.m[0] = ww + xx - yy - zz; R.m[1] = T(2) * (xy - wz);    R.m[2] = T(2) * (xz + wy);
  R.m[3] = T(2) * (xy + wz);  R.m[4] = ww - xx + yy - zz;   R.m[5] = T(2) * (yz - wx);
  R.m[6] = T(2) * (xz - wy);  R.m[7] = T(2) * (yz + wx);    R.m[8] = ww - xx - yy + zz;
  return R;
}

// the quaternion q rotated by the local rotation vector v * scale: q * exp(v scale / 2),
// normalised (MuJoCo's mju_quatIntegrate). Near zero rotation a Taylor series keeps the
// result smooth in v, so derivatives at rest are exact.
template <class T> PHX_HD PHX_INLINE Quat<T> integrate(const Quat<T>& q, const Vec3<T>& v, T scale) {
  T th2 = scale * scale * dot(v, v);  // squared rotation angle
  T c, s_over_n;                      // cos(th / 2) and sin(th / 2) / |v|
  if (th2 < T(1e-8)) {
    c = T(1) - th2 / T(8);
    s_over_n = T(0.5) * scale * (T(1) - th2 / T(24));
  } else {
    T n = sqrt(dot(v, v));
    c = cos(T(0.5) * scale * n);
    s_over_n = sin(T(0.5) * scale * n) / n;
  }
  return normalize(q * Quat<T>{c, s_over_n * v.x, s_over_n * v.y, s_over_n * v.z});
}

// rotation vector r with qb * exp(r) = qa, in the frame of qb (MuJoCo's mju_subQuat);
// smooth through r = 0 by a Taylor series of atan2(s, w) / s
template <class T> PHX_HD PHX_INLINE Vec3<T> sub_quat(const Quat<T>& qa, const Quat<T>& qb) {
  Quat<T> d = conjugate(qb) * qa;
  // the shortest arc (a select: lanes of packs of environments need not branch apart)
  const auto flip = d.w < T(0);
  d = {select(flip, -d.w, d.w), select(flip, -d.x, d.x), select(flip, -d.y, d.y),
       select(flip, -d.z, d.z)};
  Vec3<T> v{d.x, d.y, d.z};
  T s2 = dot(v, v);
  T k;  // angle / sin(angle / 2)
  if (s2 < T(1e-8) * d.w * d.w) {
    k = T(2) / d.w * (T(1) - s2 / (T(3) * d.w * d.w));
  } else {
    T s = sqrt(s2);
    k = T(2) * atan2(s, d.w) / s;
  }
  return k * v;
}

// The rotation of q (any positive scale) as an angle theta in [0, pi] about the unit axis u, the
// shorter way round: theta = 2 atan2(|v|, |w|), u = sign(w) v / |v| for q = (w, v) (MuJoCo's
// mju_quat2Vel split into its angle and axis); theta = 0 and u = 0 at no rotation
template <class T>
PHX_HD PHX_INLINE T quat_angle_axis(const Quat<T>& q, Vec3<T>& u) {
  const T sign = q.w < T(0) ? T(-1) : T(1);
  const Vec3<T> v{q.x, q.y, q.z};
  const T s = sqrt(dot(v, v));
  u = s > T(0) ? (sign / s) * v : Vec3<T>{};
  return T(2) * atan2(s, sign * q.w);
}

// ---- adjoints ----------------------------------------------------------------------------
// Each adj_f accumulates (+=) into the adjoints of f's inputs, given the adjoint of its result.

template <class T> PHX_HD PHX_INLINE void add_to(Quat<T>& a, const Quat<T>& b) {
  a.w += b.w; a.x += b.x; a.y += b.y; a.z += b.z;
}

// r = a * b is bilinear: adj_a += adj_r * conj(b), adj_b += conj(a) * adj_r
template <class T>
PHX_HD PHX_INLINE void adj_mul(const Quat<T>& a, const Quat<T>& b, Quat<T>& adj_a, Quat<T>& adj_b,
                    const Quat<T>& adj_r) {
  add_to(adj_a, adj_r * conjugate(b));
  add_to(adj_b, conjugate(a) * adj_r);
}

// r = q / |q| given r and s = 1 / |q| (zero for a q of zero norm, which normalize maps to the
// identity): adj_q += s (adj_r - r (r . adj_r))
template <class T>
PHX_HD PHX_INLINE void adj_normalize_unit(const Quat<T>& r, T s, Quat<T>& adj_q,
                                          const Quat<T>& adj_r) {
  T rd = r.w * adj_r.w + r.x * adj_r.x + r.y * adj_r.y + r.z * adj_r.z;
  add_to(adj_q, Quat<T>{s * (adj_r.w - rd * r.w), s * (adj_r.x - rd * r.x),
                        s * (adj_r.y - rd * r.y), s * (adj_r.z - rd * r.z)});
}

// r = q / |q| from q alone
template <class T>
PHX_HD PHX_INLINE void adj_normalize(const Quat<T>& q, Quat<T>& adj_q, const Quat<T>& adj_r) {
  T s;
  Quat<T> r = normalize(q, s);
  if (!(s > T(0))) return;  // the identity, a constant
  adj_normalize_unit(r, s, adj_q, adj_r);
}

// R = to_mat(q), quadratic in q: adj_q_k += sum_ij adj_R_ij dR_ij/dq_k
template <class T>
PHX_HD PHX_INLINE void adj_to_mat(const Quat<T>& q, Quat<T>& adj_q, const Mat3<T>& G) {
  const T* g = G.m;
  T w = q.w, x = q.x, y = q.y, z = q.z;
  T two = T(2);
  add_to(adj_q, Quat<T>{
      two * (w * (g[0] + g[4] + g[8]) + x * (g[7] - g[5]) + y * (g[2] - g[6]) + z * (g[3] - g[1])),
      two * (x * (g[0] - g[4] - g[8]) + y * (g[1] + g[3]) + z * (g[2] + g[6]) + w * (g[7] - g[5])),
      two * (y * (-g[0] + g[4] - g[8]) + x * (g[1] + g[3]) + z * (g[5] + g[7]) + w * (g[2] - g[6])),
      two * (z * (-g[0] - g[4] + g[8]) + x * (g[2] + g[6]) + y * (g[5] + g[7]) + w * (g[3] - g[1]))});
}

// theta = quat_angle_axis(q, u): from adj_theta and adj_u to adj_q. With s = |v|, w' = |w|:
// theta's slopes are 2 w' / (s^2 + w'^2) in s and -2 s / (s^2 + w'^2) in w', u's in v
// sign(w) (1 - n n^T) / s with n = v / s. Nothing at no rotation (s = 0), where the axis has no
// direction.
template <class T>
PHX_HD PHX_INLINE void adj_quat_angle_axis(const Quat<T>& q, T adj_theta, const Vec3<T>& adj_u,
                                           Quat<T>& adj_q) {
  const T sign = q.w < T(0) ? T(-1) : T(1), w = sign * q.w;
  const Vec3<T> v{q.x, q.y, q.z};
  const T s = sqrt(dot(v, v));
  if (!(s > T(0))) return;
  const T r2 = s * s + w * w;
  const Vec3<T> n = (T(1) / s) * v;
  const Vec3<T> adj_v = (sign / s) * (adj_u - dot(n, adj_u) * n) + (T(2) * w / r2 * adj_theta) * n;
  add_to(adj_q, Quat<T>{-sign * T(2) * s / r2 * adj_theta, adj_v.x, adj_v.y, adj_v.z});
}

// r = axis_angle(axis, angle) with a constant axis: adj_angle, from r itself (no trigonometry:
// r = (c, s axis) with c, s the cosine and sine of angle / 2, so s = axis . r_xyz / |axis|^2)
template <class T>
PHX_HD PHX_INLINE T adj_axis_angle(const Vec3<T>& axis, const Quat<T>& r, const Quat<T>& adj_r) {
  T s = dot(axis, Vec3<T>{r.x, r.y, r.z}) / dot(axis, axis);
  return T(0.5) * (-s * adj_r.w + r.w * dot(axis, Vec3<T>{adj_r.x, adj_r.y, adj_r.z}));
}

// r = integrate(q, v, scale): the local 4 x 7 Jacobian by forward-mode dual numbers running
// integrate() itself, then transposed onto adj_r
template <class T>
PHX_HD void adj_integrate(const Quat<T>& q, const Vec3<T>& v, T scale, Quat<T>& adj_q,
                          Vec3<T>& adj_v, const Quat<T>& adj_r) {
  using D = Dual<T, 7>;
  Quat<D> qd{q.w, q.x, q.y, q.z};
  Vec3<D> vd{v.x, v.y, v.z};
  qd.w.d[0] = qd.x.d[1] = qd.y.d[2] = qd.z.d[3] = T(1);
  vd.x.d[4] = vd.y.d[5] = vd.z.d[6] = T(1);
  Quat<D> r = integrate(qd, vd, D(scale));
  T g[7];
  for (int i = 0; i < 7; ++i)
    g[i] = adj_r.w * r.w.d[i] + adj_r.x * r.x.d[i] + adj_r.y * r.y.d[i] + adj_r.z * r.z.d[i];
  add_to(adj_q, Quat<T>{g[0], g[1], g[2], g[3]});
  adj_v += Vec3<T>{g[4], g[5], g[6]};
}

// r = sub_quat(qa, qb) with qb constant: adj_qa by forward-mode dual numbers
template <class T>
PHX_HD void adj_sub_quat(const Quat<T>& qa, const Quat<T>& qb, Quat<T>& adj_qa,
                         const Vec3<T>& adj_r) {
  using D = Dual<T, 4>;
  Quat<D> ad{qa.w, qa.x, qa.y, qa.z};
  ad.w.d[0] = ad.x.d[1] = ad.y.d[2] = ad.z.d[3] = T(1);
  Vec3<D> r = sub_quat(ad, Quat<D>{qb.w, qb.x, qb.y, qb.z});
  T g[4];
  for (int i = 0; i < 4; ++i) g[i] = adj_r.x * r.x.d[i] + adj_r.y * r.y.d[i] + adj_r.z * r.z.d[i];
  add_to(adj_qa, Quat<T>{g[0], g[1], g[2], g[3]});
}

}  // namespace phx
