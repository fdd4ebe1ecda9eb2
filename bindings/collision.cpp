// Python access to the narrowphase pair functions of include/phalanx/collision/, in float64, for
// tests and tools: _phalanx.collide_pairs runs one geom pair type over N poses.
#include <pybind11/numpy.h>

#include <string>

#include "bindings/submodules.h"
#include "host/model.h"
#include "phalanx/collision/narrowphase.h"

namespace py = pybind11;

namespace phx::bindings {

namespace {

using CArrayD = py::array_t<double, py::array::c_style | py::array::forcecast>;

// "(N, 3, 3)" from a list of dimensions, -1 printed as N
std::string shape_str(std::initializer_list<long> dims) {
  std::string s = "(";
  for (long d : dims)
    s += (s.size() > 1 ? ", " : "") + (d < 0 ? std::string("N") : std::to_string(d));
  return s + ")";
}

// check that a has the given shape (-1: any, taken as N when first seen)
void check_shape(const CArrayD& a, const char* name, std::initializer_list<long> dims, long& n) {
  bool ok = a.ndim() == long(dims.size());
  long k = 0;
  for (long d : dims) {
    if (!ok) break;
    long want = d < 0 ? n : d;
    if (want < 0) n = want = a.shape(k);
    ok = a.shape(k) == want;
    ++k;
  }
  if (!ok) {
    std::string got = "(";
    for (long i = 0; i < a.ndim(); ++i) got += (i ? ", " : "") + std::to_string(a.shape(i));
    throw std::invalid_argument(std::string("collide_pairs: ") + name + " must have shape " +
                                shape_str(dims) + (n >= 0 ? " with N = " + std::to_string(n) : "") +
                                ", got " + got + ")");
  }
}

py::tuple collide_pairs(int type1, const CArrayD& size1, const CArrayD& pos1, const CArrayD& rot1,
                        int type2, const CArrayD& size2, const CArrayD& pos2, const CArrayD& rot2,
                        double margin) {
  if (!phx::collision_implemented(type1) || !phx::collision_implemented(type2)) {
    throw std::invalid_argument("collide_pairs: geom types must be " +
                                phx::collidable_geom_types(true, " or ") + ", got " +
                                std::to_string(type1) + " and " + std::to_string(type2));
  }
  if (type1 > type2) {
    throw std::invalid_argument("collide_pairs: type1 must be <= type2 (swap the geoms), got " +
                                std::to_string(type1) + " > " + std::to_string(type2));
  }
  if (type1 == kGeomPlane && type2 == kGeomPlane) {
    throw std::invalid_argument("collide_pairs: plane-plane has no collision function");
  }
  long n = -1;
  check_shape(size1, "size1", {3}, n);
  check_shape(size2, "size2", {3}, n);
  n = -1;
  check_shape(pos1, "pos1", {-1, 3}, n);
  check_shape(rot1, "rot1", {-1, 3, 3}, n);
  check_shape(pos2, "pos2", {-1, 3}, n);
  check_shape(rot2, "rot2", {-1, 3, 3}, n);

  constexpr long K = kMaxPairContacts;
  py::array_t<int> count(n);
  CArrayD pos({n, K, 3L}), normal({n, K, 3L}), dist({n, K});
  int* count_out = count.mutable_data();
  double* pos_out = pos.mutable_data();
  double* normal_out = normal.mutable_data();
  double* dist_out = dist.mutable_data();
  const double *s1 = size1.data(), *s2 = size2.data();
  const double *p1 = pos1.data(), *r1 = rot1.data(), *p2 = pos2.data(), *r2 = rot2.data();
  {
    py::gil_scoped_release release;
    for (long e = 0; e < n; ++e) {
      GeomFrame<double> g1{Vec3<double>::load(p1 + 3 * e), Mat3<double>::load(r1 + 9 * e)};
      GeomFrame<double> g2{Vec3<double>::load(p2 + 3 * e), Mat3<double>::load(r2 + 9 * e)};
      ContactPoint<double> con[K];
      int c = collide(type1, g1, s1, type2, g2, s2, margin, con);
      count_out[e] = c;
      for (long k = 0; k < K; ++k) {
        ContactPoint<double> out = k < c ? con[k] : ContactPoint<double>{};
        out.pos.store(pos_out + 3 * (K * e + k));
        out.normal.store(normal_out + 3 * (K * e + k));
        dist_out[K * e + k] = out.dist;
      }
    }
  }
  return py::make_tuple(count, pos, normal, dist);
}

}  // namespace

void register_collision(pybind11::module_& mod) {
  mod.def("collide_pairs", &collide_pairs, py::arg("type1"), py::arg("size1"), py::arg("pos1"),
          py::arg("rot1"), py::arg("type2"), py::arg("size2"), py::arg("pos2"), py::arg("rot2"),
          py::arg("margin") = 0.0,
          "Narrowphase of N poses of one geom pair in float64 (MuJoCo's conventions): sizes as "
          "geom_size (3,), positions (N, 3), rotation matrices (N, 3, 3); type1 <= type2. Returns "
          "(count (N,) int32, pos (N, 8, 3), normal (N, 8, 3), dist (N, 8)); entries past count "
          "are zero.");
}

}  // namespace phx::bindings
