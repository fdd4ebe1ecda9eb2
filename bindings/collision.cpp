// Python access to the narrowphase pair functions of include/phalanx/collision/, in float64, for
// tests and tools: _phalanx.collide_pairs runs one pair of primitive geom types over N poses,
// _phalanx.collide_geoms two geoms of a model (meshes and height fields included).
#include <pybind11/numpy.h>

#include <string>

#include "bindings/py_model.h"
#include "bindings/submodules.h"
#include "host/model.h"
#include "host/view_builder.h"
#include "phalanx/constraint.h"

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

// the contacts of shapes s1 and s2 at N pairs of frames, as (count, pos, normal, dist, dropped)
py::tuple collide_frames(const GeomShape<double>& s1, const GeomShape<double>& s2,
                         const CcdSettings<double>& ccd, const CArrayD& pos1, const CArrayD& rot1,
                         const CArrayD& pos2, const CArrayD& rot2, double margin) {
  long n = -1;
  check_shape(pos1, "pos1", {-1, 3}, n);
  check_shape(rot1, "rot1", {-1, 3, 3}, n);
  check_shape(pos2, "pos2", {-1, 3}, n);
  check_shape(rot2, "rot2", {-1, 3, 3}, n);

  constexpr long K = kMaxPairContacts;
  py::array_t<int> count(n), dropped(n);
  CArrayD pos({n, K, 3L}), normal({n, K, 3L}), dist({n, K});
  int* count_out = count.mutable_data();
  int* dropped_out = dropped.mutable_data();
  double* pos_out = pos.mutable_data();
  double* normal_out = normal.mutable_data();
  double* dist_out = dist.mutable_data();
  const double *p1 = pos1.data(), *r1 = rot1.data(), *p2 = pos2.data(), *r2 = rot2.data();
  {
    py::gil_scoped_release release;
    for (long e = 0; e < n; ++e) {
      GeomFrame<double> g1{Vec3<double>::load(p1 + 3 * e), Mat3<double>::load(r1 + 9 * e)};
      GeomFrame<double> g2{Vec3<double>::load(p2 + 3 * e), Mat3<double>::load(r2 + 9 * e)};
      ContactPoint<double> con[K];
      dropped_out[e] = 0;
      int c = collide(s1, g1, s2, g2, margin, ccd, con, dropped_out + e);
      count_out[e] = c;
      for (long k = 0; k < K; ++k) {
        ContactPoint<double> out = k < c ? con[k] : ContactPoint<double>{};
        out.pos.store(pos_out + 3 * (K * e + k));
        out.normal.store(normal_out + 3 * (K * e + k));
        dist_out[K * e + k] = out.dist;
      }
    }
  }
  return py::make_tuple(count, pos, normal, dist, dropped);
}

void check_order(int type1, int type2) {
  if (type1 > type2) {
    throw std::invalid_argument("collide: type1 must be <= type2 (swap the geoms), got " +
                                std::to_string(type1) + " > " + std::to_string(type2));
  }
  if (!has_collision_function(type1, type2)) {
    throw std::invalid_argument("collide: geom types " + std::to_string(type1) + " and " +
                                std::to_string(type2) + " have no collision function");
  }
}

py::tuple collide_pairs(int type1, const CArrayD& size1, const CArrayD& pos1, const CArrayD& rot1,
                        int type2, const CArrayD& size2, const CArrayD& pos2, const CArrayD& rot2,
                        double margin) {
  for (int t : {type1, type2})
    if (t < kGeomPlane || t > kGeomMesh || t == kGeomMesh || t == kGeomHField)
      throw std::invalid_argument(
          "collide_pairs: geom types must be primitives (plane, sphere, "
          "capsule, ellipsoid, cylinder, box; meshes and height fields "
          "need a model: collide_geoms), got " +
          std::to_string(t));
  check_order(type1, type2);
  long n = -1;
  check_shape(size1, "size1", {3}, n);
  check_shape(size2, "size2", {3}, n);
  GeomShape<double> s1, s2;
  s1.type = type1, s1.size = size1.data(), s2.type = type2, s2.size = size2.data();
  return collide_frames(s1, s2, CcdSettings<double>{}, pos1, rot1, pos2, rot2, margin);
}

py::tuple collide_geoms(const PyModel& pm, int g1, int g2, const CArrayD& pos1, const CArrayD& rot1,
                        const CArrayD& pos2, const CArrayD& rot2, double margin) {
  const Model& model = pm.model();
  for (int g : {g1, g2})
    if (g < 0 || g >= model.ngeom)
      throw std::invalid_argument("collide_geoms: geom " + std::to_string(g) + " is not in [0, " +
                                  std::to_string(model.ngeom) + ")");
  check_order(model.geom_type[g1], model.geom_type[g2]);
  ModelView<double> m = build_view<double>(
      model, [](const std::vector<double>& v) { return v.data(); },
      [](const std::vector<int>& v) { return v.data(); });
  return collide_frames(geom_shape(m, g1, m.geom_size + 3 * g1),
                        geom_shape(m, g2, m.geom_size + 3 * g2), ccd_settings(m), pos1, rot1, pos2,
                        rot2, margin);
}

}  // namespace

void register_collision(pybind11::module_& mod) {
  mod.def("collide_pairs", &collide_pairs, py::arg("type1"), py::arg("size1"), py::arg("pos1"),
          py::arg("rot1"), py::arg("type2"), py::arg("size2"), py::arg("pos2"), py::arg("rot2"),
          py::arg("margin") = 0.0,
          "Narrowphase of N poses of one pair of primitive geom types in float64 (MuJoCo's "
          "conventions): sizes as geom_size (3,), positions (N, 3), rotation matrices (N, 3, 3); "
          "type1 <= type2. Returns (count (N,) int32, pos (N, 8, 3), normal (N, 8, 3), dist "
          "(N, 8), dropped (N,) int32); entries past count are zero.");
  mod.def("collide_geoms", &collide_geoms, py::arg("model"), py::arg("geom1"), py::arg("geom2"),
          py::arg("pos1"), py::arg("rot1"), py::arg("pos2"), py::arg("rot2"),
          py::arg("margin") = 0.0,
          "Narrowphase of geoms geom1 and geom2 of a model (any types, meshes and height fields "
          "with the model's data and ccd options) at N pairs of world frames, as collide_pairs; "
          "type of geom1 <= type of geom2.");
}

}  // namespace phx::bindings
