// Tendon wrapping over spheres and cylinders, as MuJoCo wraps a spatial tendon's span from one
// site over a geom to the next site (its mju_wrap). In the geom's frame the two sites p0 and p1
// are projected onto a plane (a cylinder's xy plane; for a sphere the plane through its centre
// and both sites), where the path leaves p0 along the tangent to the circle of the geom's
// radius, follows the arc and reaches p1 along the other tangent. Without a side site the span
// wraps where the straight segment would cut the circle, the shorter way round. A side site
// (outside the geom) keeps the path off the ray from the centre away from it: a segment that
// misses the circle stays straight unless it meets that ray, and of the two ways round the one
// that keeps off it is taken (the rule MuJoCo 4 applies). A side site inside the
// geom asks for the inside wrap: the path touches the circle once, at the
// point where the two straight parts make equal angles with its normal (a Newton solve). On a
// cylinder the tangent points are then lifted along its axis in proportion to the path's
// length, and the arc becomes a helix.
//
// wrap_local works in the geom's frame on one scalar type R, so the adjoint (tendon.h) runs it
// on Dual numbers seeded along its local inputs (p0, p1, the side site), one site a pass. It and
// the two planar wraps are device functions of their own (PHX_DEVICE_NOINLINE), compiled once per
// scalar.
#pragma once

#include "phalanx/math/spatial.h"

namespace phx {

// MuJoCo's smallest length and denominator
constexpr double kWrapMin = 1e-15;
constexpr double kWrapPi = 3.14159265358979323846;

// asin(x), |x| <= 1, through atan2 (which the Dual numbers have)
template <class R>
PHX_HD PHX_INLINE R wrap_asin(const R& x) {
  return atan2(x, sqrt(R(1) - x * x));
}

// normalises the 2-vector v in place; (1, 0) when it is shorter than kWrapMin
template <class R>
PHX_HD PHX_INLINE void wrap_normalize2(R* v) {
  R n = sqrt(v[0] * v[0] + v[1] * v[1]);
  if (n < R(kWrapMin)) {
    v[0] = R(1);
    v[1] = R(0);
  } else {
    v[0] = v[0] / n;
    v[1] = v[1] / n;
  }
}

// do the 2-D segments a0-a1 and b0-b1 cross (parallel ones never do)
template <class R>
PHX_HD PHX_INLINE bool segments_cross(const R* a0, const R* a1, const R* b0, const R* b1) {
  const R det = (b1[1] - b0[1]) * (a1[0] - a0[0]) - (b1[0] - b0[0]) * (a1[1] - a0[1]);
  if (abs(det) < R(kWrapMin)) return false;
  const R s = ((b1[0] - b0[0]) * (a0[1] - b0[1]) - (b1[1] - b0[1]) * (a0[0] - b0[0])) / det;
  const R t = ((a1[0] - a0[0]) * (a0[1] - b0[1]) - (a1[1] - a0[1]) * (a0[0] - b0[0])) / det;
  return s >= R(0) && s <= R(1) && t >= R(0) && t <= R(1);
}

// The length of the arc of radius r from t0 to t1 turning clockwise (or counterclockwise)
template <class R>
PHX_HD PHX_INLINE R arc_length(const R* t0, const R* t1, bool clockwise, const R& r) {
  const R c = t0[1] * t1[0] - t0[0] * t1[1];               // > 0: t1 is clockwise from t0
  R angle = atan2(abs(c), t0[0] * t1[0] + t0[1] * t1[1]);  // in [0, pi]
  if ((c > R(0) && !clockwise) || (c < R(0) && clockwise)) angle = R(2 * kWrapPi) - angle;
  return r * angle;
}

// does the segment p-q meet the ray {t v, t > 0} from the origin (parallel ones never do)
template <class R>
PHX_HD PHX_INLINE bool segment_meets_ray(const R* p, const R* q, const R* v) {
  const R dif[2] = {q[0] - p[0], q[1] - p[1]};
  const R det = dif[1] * v[0] - dif[0] * v[1];  // v x dif
  if (abs(det) < R(kWrapMin)) return false;
  const R s = (p[0] * v[1] - p[1] * v[0]) / det;      // along the segment
  const R t = (p[0] * dif[1] - p[1] * dif[0]) / det;  // along the ray
  return s >= R(0) && s <= R(1) && t > R(0);
}

// does the arc of angle `angle` from t0, turning clockwise or not, pass the direction v
template <class R>
PHX_HD PHX_INLINE bool arc_meets_direction(const R* t0, const R& angle, bool clockwise,
                                           const R* v) {
  const R c = t0[0] * v[1] - t0[1] * v[0], d = t0[0] * v[0] + t0[1] * v[1];
  R from = atan2(clockwise ? -c : c, d);  // the turn from t0 to v, in [0, 2 pi)
  if (from < R(0)) from = from + R(2 * kWrapPi);
  return from <= angle;
}

// The wrap of the 2-D span e = (e0, e1) around the circle of radius r at the origin, on the
// side of side (already scaled onto the circle) when it is given: the tangent points into t
// (t0, t1) and the arc's length, or -1 where the span does not wrap.
template <class R>
PHX_HD PHX_DEVICE_NOINLINE R wrap_circle(const R* e, const R* side, const R& r, R* t) {
  const R sq0 = e[0] * e[0] + e[1] * e[1], sq1 = e[2] * e[2] + e[3] * e[3], sqr = r * r;
  if (sq0 < sqr || sq1 < sqr || r < R(kWrapMin)) return R(-1);  // an end inside the circle
  const R dif[2] = {e[2] - e[0], e[3] - e[1]};
  const R dd = dif[0] * dif[0] + dif[1] * dif[1];
  if (dd < R(kWrapMin)) return R(-1);
  // a path may not pass the geom on the side opposite its side site: it may not meet the ray
  // from the centre away from the side site (MuJoCo 4's rule). A segment that misses the circle
  // stays straight unless no side site is given or it meets that ray.
  const R away[2] = {side ? -side[0] : R(0), side ? -side[1] : R(0)};
  const R a = clamp(-(dif[0] * e[0] + dif[1] * e[1]) / dd, R(0), R(1));
  const R near[2] = {e[0] + a * dif[0], e[1] + a * dif[1]};
  if (near[0] * near[0] + near[1] * near[1] > sqr && (!side || !segment_meets_ray(e, e + 2, away)))
    return R(-1);
  // the two candidate paths: 0 turning clockwise, 1 counterclockwise
  const R h0 = sqrt(sq0 - sqr), h1 = sqrt(sq1 - sqr);
  R cand[2][4], score[2], arc[2];
  for (int i = 0; i < 2; ++i) {
    const R sgn = i == 0 ? R(1) : R(-1);
    R* c = cand[i];
    c[0] = (e[0] * sqr + sgn * r * e[1] * h0) / sq0;
    c[1] = (e[1] * sqr - sgn * r * e[0] * h0) / sq0;
    c[2] = (e[2] * sqr - sgn * r * e[3] * h1) / sq1;
    c[3] = (e[3] * sqr + sgn * r * e[2] * h1) / sq1;
    arc[i] = arc_length(c, c + 2, i == 0, r);
    if (side) {  // the one that keeps off the ray away from the side site
      const bool meets = segment_meets_ray(e, c, away) || segment_meets_ray(c + 2, e + 2, away) ||
                         arc_meets_direction(c, arc[i] / r, i == 0, away);
      score[i] = meets ? R(-1) : R(1);
    } else {  // the shorter chord
      score[i] = -((c[0] - c[2]) * (c[0] - c[2]) + (c[1] - c[3]) * (c[1] - c[3]));
    }
    if (segments_cross(e, c, e + 2, c + 2)) score[i] = R(-10000);
  }
  const int i = score[0] > score[1] ? 0 : 1;
  for (int k = 0; k < 4; ++k) t[k] = cand[i][k];
  if (segments_cross(e, t, e + 2, t + 2)) return R(-1);
  return arc[i];
}

// The inside wrap of the 2-D span e around the circle of radius r: the one point where the path
// touches the circle into t (both tangent points) and 0, or -1 where the span does not wrap
// (an end inside the circle, or the segment cutting it). Solves asin(A z) + asin(B z) -
// 2 asin(z) + G = 0 for z (A, B the radius over the ends' distances, G their angle) by Newton's
// method from just below 1, as MuJoCo does; where that fails the point midway is kept.
template <class R>
PHX_HD PHX_DEVICE_NOINLINE R wrap_inside(const R* e, const R& r, R* t) {
  const R len0 = sqrt(e[0] * e[0] + e[1] * e[1]), len1 = sqrt(e[2] * e[2] + e[3] * e[3]);
  const R dif[2] = {e[2] - e[0], e[3] - e[1]};
  const R dd = dif[0] * dif[0] + dif[1] * dif[1];
  if (len0 <= r || len1 <= r || r < R(kWrapMin) || len0 < R(kWrapMin) || len1 < R(kWrapMin))
    return R(-1);
  if (dd > R(kWrapMin)) {
    const R a = -(dif[0] * e[0] + dif[1] * e[1]) / dd;
    if (a > R(0) && a < R(1)) {
      const R n0 = e[0] + a * dif[0], n1 = e[1] + a * dif[1];
      if (sqrt(n0 * n0 + n1 * n1) <= r) return R(-1);
    }
  }
  // the fallback: the circle's point towards the ends' midpoint
  R mid[2] = {R(0.5) * (e[0] + e[2]), R(0.5) * (e[1] + e[3])};
  wrap_normalize2(mid);
  t[0] = t[2] = r * mid[0];
  t[1] = t[3] = r * mid[1];
  const R A = r / len0, B = r / len1;
  const R cosG = (len0 * len0 + len1 * len1 - dd) / (R(2) * len0 * len1);
  if (cosG < R(-1 + kWrapMin)) return R(-1);
  if (cosG > R(1 - kWrapMin)) return R(0);
  const R G = atan2(sqrt(R(1) - cosG * cosG), cosG);
  auto f = [&](const R& z) {
    return wrap_asin(A * z) + wrap_asin(B * z) - R(2) * wrap_asin(z) + G;
  };
  auto guard = [](const R& x) { return x < R(kWrapMin) ? R(kWrapMin) : x; };
  R z = R(1 - 1e-7), fz = f(z);
  if (fz > R(0)) return R(0);
  int iter = 0;
  for (; iter < 20 && abs(fz) > R(1e-6); ++iter) {
    const R df = A / guard(sqrt(R(1) - z * z * A * A)) + B / guard(sqrt(R(1) - z * z * B * B)) -
                 R(2) / guard(sqrt(R(1) - z * z));
    if (df > R(-kWrapMin)) return R(0);
    const R z1 = z - fz / df;
    if (z1 > z) return R(0);
    z = z1;
    fz = f(z);
    if (fz > R(1e-6)) return R(0);
  }
  if (iter >= 20) return R(0);
  // rotate the direction of the end on the clockwise side by the solved angle
  const bool from0 = e[0] * e[3] - e[1] * e[2] > R(0);
  R v[2] = {from0 ? e[0] : e[2], from0 ? e[1] : e[3]};
  wrap_normalize2(v);
  const R ang = wrap_asin(z) - wrap_asin((from0 ? A : B) * z);
  const R c = cos(ang), s = sin(ang);
  t[0] = t[2] = r * (c * v[0] - s * v[1]);
  t[1] = t[3] = r * (s * v[0] + c * v[1]);
  return R(0);
}

// A span's wrap in the geom's frame: the tangent points and the length of the path between
// them (the arc, or the helix on a cylinder), or length -1 where it does not wrap.
template <class R>
struct LocalWrap {
  Vec3<R> t0, t1;
  R length;
};

// The wrap of the span from p0 to p1 (in the geom's frame) around a sphere or a cylinder (along
// z) of radius r, with the side site s when has_side.
template <class R>
PHX_HD PHX_DEVICE_NOINLINE LocalWrap<R> wrap_local(const Vec3<R>& p0, const Vec3<R>& p1,
                                                   const Vec3<R>& s, bool has_side, const R& r,
                                                   bool cylinder) {
  LocalWrap<R> out;
  out.length = R(-1);
  if (norm(p0) < R(kWrapMin) || norm(p1) < R(kWrapMin)) return out;
  // the plane's axes
  Vec3<R> ax0{R(1), R(0), R(0)}, ax1{R(0), R(1), R(0)};
  if (!cylinder) {  // the plane through the centre and both sites: ax0 towards p0
    ax0 = (R(1) / norm(p0)) * p0;
    Vec3<R> n = cross(p0, p1);
    R nn = norm(n);
    if (nn < R(kWrapMin)) {  // the sites in line with the centre: any plane through them
      int i = 0;
      if (abs(ax0[1]) > abs(ax0[0]) && abs(ax0[1]) > abs(ax0[2])) i = 1;
      if (abs(ax0[2]) > abs(ax0[0]) && abs(ax0[2]) > abs(ax0[1])) i = 2;
      Vec3<R> other{R(1), R(1), R(1)};
      other[i] = R(0);
      n = cross(ax0, other);
      nn = norm(n);
    }
    n = (R(1) / nn) * n;
    ax1 = cross(n, ax0);
    ax1 = (R(1) / norm(ax1)) * ax1;
  }
  const R e[4] = {dot(p0, ax0), dot(p0, ax1), dot(p1, ax0), dot(p1, ax1)};
  R t[4];
  if (has_side && norm(s) < r) {
    out.length = wrap_inside(e, r, t);
  } else {
    R sd[2] = {dot(s, ax0), dot(s, ax1)};
    wrap_normalize2(sd);
    sd[0] = r * sd[0];
    sd[1] = r * sd[1];
    out.length = wrap_circle(e, has_side ? sd : nullptr, r, t);
  }
  if (out.length < R(0)) return out;
  out.t0 = t[0] * ax0 + t[1] * ax1;
  out.t1 = t[2] * ax0 + t[3] * ax1;
  if (cylinder) {  // lift the tangent points along the axis; the arc becomes a helix
    const R d0x = p0[0] - out.t0[0], d0y = p0[1] - out.t0[1];
    const R d1x = p1[0] - out.t1[0], d1y = p1[1] - out.t1[1];
    const R l0 = sqrt(d0x * d0x + d0y * d0y), l1 = sqrt(d1x * d1x + d1y * d1y);
    const R total = l0 + out.length + l1;
    out.t0[2] = p0[2] + (p1[2] - p0[2]) * l0 / total;
    out.t1[2] = p0[2] + (p1[2] - p0[2]) * (l0 + out.length) / total;
    const R height = out.t1[2] - out.t0[2];
    out.length = sqrt(out.length * out.length + height * height);
  }
  return out;
}

}  // namespace phx
