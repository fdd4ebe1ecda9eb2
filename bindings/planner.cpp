// Python access to the planners' per-problem functions of include/phalanx/planner.h on host
// arrays, one problem after another: the weights, elites and noise that phalanx.control builds
// on, and what the tests compare with numpy.
#include <pybind11/numpy.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "bindings/submodules.h"
#include "phalanx/planner.h"

namespace py = pybind11;

namespace phx::bindings {

namespace {

template <class T>
using CArray = py::array_t<T, py::array::c_style>;

// (N, K) costs
template <class T>
void check_costs(const CArray<T>& cost) {
  if (cost.ndim() != 2)
    throw std::invalid_argument("phalanx: costs must have shape (N, K) (problems, samples), "
                                "got " + std::to_string(cost.ndim()) + " dimensions");
}

// MPPI weights per problem -> (weights (N, K), ok (N,)); a problem with a NaN cost, no finite
// cost or a bad temperature gets ok = False and NaN weights
template <class T>
py::tuple mppi_weights_py(const CArray<T>& cost, double lambda) {
  check_costs(cost);
  py::ssize_t N = cost.shape(0), K = cost.shape(1);
  CArray<T> w({N, K});
  py::array_t<bool> ok(N);
  for (py::ssize_t p = 0; p < N; ++p) {
    T* wp = w.mutable_data(p);
    bool good = phx::mppi_weights(cost.data(p), int(K), T(lambda), wp);
    if (!good)
      for (py::ssize_t k = 0; k < K; ++k) wp[k] = T(NAN);
    ok.mutable_data()[p] = good;
  }
  return py::make_tuple(w, ok);
}

// indices of the n lowest costs per problem, ascending, ties by index -> (N, n) int32
template <class T>
CArray<std::int32_t> smallest_indices_py(const CArray<T>& cost, int n) {
  check_costs(cost);
  py::ssize_t N = cost.shape(0), K = cost.shape(1);
  if (n < 1 || n > K)
    throw std::invalid_argument("phalanx: the number of elites must be in [1, K] = [1, " +
                                std::to_string(K) + "], got " + std::to_string(n));
  CArray<std::int32_t> idx({N, py::ssize_t(n)});
  for (py::ssize_t p = 0; p < N; ++p)
    phx::smallest_indices(cost.data(p), int(K), n, idx.mutable_data(p));
  return idx;
}

// the noise of samples first .. first + count - 1 -> (count, H, nu)
template <class T>
CArray<T> planner_noise_py(std::uint64_t seed, std::uint32_t first, int count,
                           std::uint32_t stream, int H, const CArray<T>& sigma, double beta) {
  if (sigma.ndim() != 1) throw std::invalid_argument("phalanx: sigma must have shape (nu,)");
  if (count < 0 || H < 0) throw std::invalid_argument("phalanx: count and H must be >= 0");
  if (!(beta >= 0 && beta < 1)) throw std::invalid_argument("phalanx: beta must be in [0, 1)");
  int nu = int(sigma.shape(0));
  CArray<T> eps({py::ssize_t(count), py::ssize_t(H), py::ssize_t(nu)});
  for (int s = 0; s < count; ++s)
    phx::planner_noise(seed, first + std::uint32_t(s), stream, H, nu, sigma.data(), T(beta),
                       eps.mutable_data(s));
  return eps;
}

// shape check: a must be (dims...), -1 any
template <class A>
void require(const A& a, const char* name, std::initializer_list<py::ssize_t> dims) {
  bool ok = a.ndim() == py::ssize_t(dims.size());
  py::ssize_t k = 0;
  for (py::ssize_t d : dims) {
    ok = ok && (d < 0 || a.shape(k) == d);
    ++k;
  }
  if (!ok) throw std::invalid_argument(std::string("phalanx: ") + name + " has the wrong shape");
}

// MPPI's update of N plans in place: u (N, H, nu) += sum_k w (N, K) eps (N, K, H, nu), clamped
// to [lo, hi] (nu,) per actuator (lo >= hi: unlimited)
template <class T>
void mppi_update_py(CArray<T>& u, const CArray<T>& w, const CArray<T>& eps, const CArray<T>& lo,
                    const CArray<T>& hi) {
  require(u, "u", {-1, -1, -1});
  py::ssize_t N = u.shape(0), H = u.shape(1), nu = u.shape(2);
  require(w, "w", {N, -1});
  py::ssize_t K = w.shape(1);
  require(eps, "eps", {N, K, H, nu});
  require(lo, "lo", {nu});
  require(hi, "hi", {nu});
  for (py::ssize_t p = 0; p < N; ++p)
    phx::mppi_update(int(K), int(H), int(nu), w.data(p), eps.data(p), lo.data(), hi.data(),
                     u.mutable_data(p));
}

// CEM's refit of N plans in place on their elites (N, n) of the sample controls
// ctrl (N, K, H, nu): mean u and standard deviation sigma (N, H, nu)
template <class T>
void cem_refit_py(CArray<T>& u, CArray<T>& sigma, const CArray<T>& ctrl,
                  const CArray<std::int32_t>& elites, double alpha, double sigma_min) {
  require(u, "u", {-1, -1, -1});
  py::ssize_t N = u.shape(0), H = u.shape(1), nu = u.shape(2);
  require(sigma, "sigma", {N, H, nu});
  require(ctrl, "ctrl", {N, -1, H, nu});
  require(elites, "elites", {N, -1});
  py::ssize_t K = ctrl.shape(1), n = elites.shape(1);
  for (py::ssize_t i = 0; i < elites.size(); ++i)
    if (elites.data()[i] < 0 || elites.data()[i] >= K)
      throw std::invalid_argument("phalanx: an elite index is outside [0, K)");
  if (n < 1) throw std::invalid_argument("phalanx: at least one elite is needed");
  for (py::ssize_t p = 0; p < N; ++p)
    phx::cem_refit(int(H), int(nu), ctrl.data(p), elites.data(p), int(n), T(alpha),
                   T(sigma_min), u.mutable_data(p), sigma.mutable_data(p));
}

template <class T>
void define(py::module_& mod) {
  mod.def("mppi_update", &mppi_update_py<T>, py::arg("u").noconvert(), py::arg("w").noconvert(),
          py::arg("eps").noconvert(), py::arg("lo").noconvert(), py::arg("hi").noconvert(),
          "u (N, H, nu) += sum_k w eps, clamped, in place");
  mod.def("cem_refit", &cem_refit_py<T>, py::arg("u").noconvert(), py::arg("sigma").noconvert(),
          py::arg("ctrl").noconvert(), py::arg("elites").noconvert(), py::arg("alpha"),
          py::arg("sigma_min"), "CEM refit of mean u and sigma (N, H, nu) in place");
  mod.def("mppi_weights", &mppi_weights_py<T>, py::arg("costs").noconvert(), py::arg("lam"),
          "MPPI weights exp(-(c - min c) / lam), normalised per problem -> (w (N, K), ok (N,))");
  mod.def("smallest_indices", &smallest_indices_py<T>, py::arg("costs").noconvert(),
          py::arg("n"), "indices of the n lowest costs per problem (stable) -> (N, n) int32");
  mod.def("planner_noise", &planner_noise_py<T>, py::arg("seed"), py::arg("first"),
          py::arg("count"), py::arg("stream"), py::arg("H"), py::arg("sigma").noconvert(),
          py::arg("beta"), "Philox noise of samples first.. -> (count, H, nu)");
}

}  // namespace

void register_planner(py::module_& mod) {
  define<float>(mod);
  define<double>(mod);
}

}  // namespace phx::bindings
