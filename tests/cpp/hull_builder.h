// What the narrowphase tests share: convex hulls built in the test (the arrays a ConvexHull
// points to, from vertices and counter-clockwise polygons; a box, a prism, an icosahedron) and
// the scalar through which adjoints are checked against central differences.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "phalanx/collision/types.h"

namespace phx::test_hulls {

// A convex hull given by its vertices and counter-clockwise polygons; normals (Newell's method)
// and adjacency (the polygons' edges) are derived. Holds the arrays a ConvexHull points to.
template <class T = double>
struct HullData {
  std::vector<T> vert, polynormal;
  std::vector<int> adjadr, adjnum, adj, polyvertadr, polyvertnum, polyvert;

  HullData(const std::vector<Vec3<double>>& v, const std::vector<std::vector<int>>& polys) {
    int nv = static_cast<int>(v.size());
    for (const Vec3<double>& p : v)
      for (int i = 0; i < 3; ++i) vert.push_back(T(p[i]));
    std::vector<std::vector<int>> nb(nv);
    for (const std::vector<int>& f : polys) {
      polyvertadr.push_back(static_cast<int>(polyvert.size()));
      polyvertnum.push_back(static_cast<int>(f.size()));
      Vec3<double> n;
      for (size_t k = 0; k < f.size(); ++k) {
        int a = f[k], b = f[(k + 1) % f.size()];
        polyvert.push_back(a);
        n += cross(v[a], v[b]);
        if (std::find(nb[a].begin(), nb[a].end(), b) == nb[a].end()) nb[a].push_back(b);
        if (std::find(nb[b].begin(), nb[b].end(), a) == nb[b].end()) nb[b].push_back(a);
      }
      n = (1 / norm(n)) * n;
      for (int i = 0; i < 3; ++i) polynormal.push_back(T(n[i]));
    }
    for (int i = 0; i < nv; ++i) {
      adjadr.push_back(static_cast<int>(adj.size()));
      adjnum.push_back(static_cast<int>(nb[i].size()));
      for (int j : nb[i]) adj.push_back(j);
    }
  }
  ConvexHull<T> hull() const {
    ConvexHull<T> h;
    h.nvert = static_cast<int>(vert.size() / 3);
    h.vert = vert.data();
    h.adjadr = adjadr.data();
    h.adjnum = adjnum.data();
    h.adj = adj.data();
    h.npoly = static_cast<int>(polyvertnum.size());
    h.polynormal = polynormal.data();
    h.polyvertadr = polyvertadr.data();
    h.polyvertnum = polyvertnum.data();
    h.polyvert = polyvert.data();
    return h;
  }
};

// a box of half-sizes s as a hull: 8 corners (bit k: +s_k), 6 quads
HullData<> box_hull(Vec3<double> s) {
  std::vector<Vec3<double>> v;
  for (int c = 0; c < 8; ++c)
    v.push_back({c & 1 ? s.x : -s.x, c & 2 ? s.y : -s.y, c & 4 ? s.z : -s.z});
  std::vector<std::vector<int>> f = {{0, 4, 6, 2}, {1, 3, 7, 5}, {0, 1, 5, 4},
                                     {2, 6, 7, 3}, {0, 2, 3, 1}, {4, 5, 7, 6}};
  return HullData<>(v, f);
}

// a prism of n sides (circumradius r, half-height h): 2 n vertices, two n-gons and n quads
HullData<> prism_hull(int n, double r, double h) {
  std::vector<Vec3<double>> v;
  for (int z = 0; z < 2; ++z)
    for (int k = 0; k < n; ++k)
      v.push_back({r * std::cos(2 * M_PI * k / n), r * std::sin(2 * M_PI * k / n), z ? h : -h});
  std::vector<std::vector<int>> f;
  std::vector<int> top, bottom;
  for (int k = 0; k < n; ++k) top.push_back(n + k), bottom.push_back(n - 1 - k);
  f.push_back(top);
  f.push_back(bottom);
  for (int k = 0; k < n; ++k) f.push_back({k, (k + 1) % n, n + (k + 1) % n, n + k});
  return HullData<>(v, f);
}

// an icosahedron of circumradius r, stretched by (sx, sy, sz): 12 vertices, 20 triangles found
// as the vertex triples with every other vertex behind their plane
HullData<> icosahedron_hull(double r, Vec3<double> stretch) {
  const double g = (1 + std::sqrt(5.0)) / 2, k = r / std::sqrt(1 + g * g);
  std::vector<Vec3<double>> v;
  for (int s1 : {-1, 1})
    for (int s2 : {-1, 1}) {
      v.push_back({0, s1 * k, s2 * g * k});
      v.push_back({s1 * k, s2 * g * k, 0});
      v.push_back({s2 * g * k, 0, s1 * k});
    }
  for (Vec3<double>& p : v) p = Vec3<double>{p.x * stretch.x, p.y * stretch.y, p.z * stretch.z};
  std::vector<std::vector<int>> f;
  for (int a = 0; a < 12; ++a)
    for (int b = a + 1; b < 12; ++b)
      for (int c = b + 1; c < 12; ++c) {
        Vec3<double> n = cross(v[b] - v[a], v[c] - v[a]);
        int above = 0, below = 0;
        for (int d = 0; d < 12; ++d) {
          double s = dot(n, v[d] - v[a]);
          above += s > 1e-9, below += s < -1e-9;
        }
        if (above == 0) f.push_back({a, b, c});
        if (below == 0) f.push_back({a, c, b});
      }
  return HullData<>(v, f);
}

// <w, c>: contacts c weighed by adjoint seeds w (pos, normal and dist of each), the scalar whose
// derivative an adjoint gives for the seeds w
inline double weigh(const std::vector<ContactPoint<double>>& c,
                    const std::vector<ContactPoint<double>>& w) {
  double s = 0;
  for (size_t k = 0; k < c.size(); ++k)
    s += dot(w[k].pos, c[k].pos) + dot(w[k].normal, c[k].normal) + w[k].dist * c[k].dist;
  return s;
}

// n adjoint seeds for contacts: each one's pos, normal and dist uniform in [-1, 1)
template <class Rng>
std::vector<ContactPoint<double>> random_seeds(size_t n, Rng& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<ContactPoint<double>> w(n);
  for (ContactPoint<double>& k : w) {
    k.pos = {u(rng), u(rng), u(rng)};
    k.normal = {u(rng), u(rng), u(rng)};
    k.dist = u(rng);
  }
  return w;
}

}  // namespace phx::test_hulls
