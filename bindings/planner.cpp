// Python access to the sampling planners and costs: the per-problem functions of
// include/phalanx/planner.h on host arrays (what the tests compare with numpy), trajectory
// costs with their gradients (include/phalanx/cost.h), and PlannerBatch, the planner's stages as
// kernels on the model's device (host/api.h), which phalanx.control runs on.
#include "phalanx/planner.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "bindings/py_model.h"
#include "bindings/submodules.h"

namespace py = pybind11;

namespace phx::bindings {

namespace {

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

// ---- costs and the planner's stages on a device ---------------------------------------------

using CostInts = py::array_t<int, py::array::c_style | py::array::forcecast>;

template <class T>
phx::DeviceCost<T> device_cost(const phx::DeviceModel<T>& dm, const CostInts& ints,
                               const CArrayD& reals) {
  require(ints, "cost ints", {-1, phx::kCostTermInts});
  require(reals, "cost reals", {ints.shape(0), phx::kCostTermReals});
  return phx::DeviceCost<T>(dm, std::vector<int>(ints.data(), ints.data() + ints.size()),
                            std::vector<double>(reals.data(), reals.data() + reals.size()));
}

// the cost of E rollouts (E, T, n) -> value (E,), or (value, dq, dv, du) with grad
template <class T>
py::object trajectory_cost_py(PyModel& pm, const CostInts& ints, const CArrayD& reals,
                              const CArray<T>& qs, const CArray<T>& vs, const CArray<T>& us,
                              bool grad, const std::string& device_name) {
  phx::Device device = phx::parse_device(device_name);
  auto dm = pm.compiled<T>(device);
  const phx::Model& m = dm->model();
  require(qs, "qs", {-1, -1, m.nq});
  py::ssize_t E = qs.shape(0), H = qs.shape(1);
  require(vs, "vs", {E, H, m.nv});
  require(us, "ctrl", {E, H, m.nu});
  if (H < 1) throw std::invalid_argument("phalanx: a trajectory cost needs at least one step");
  phx::DeviceCost<T> cost = device_cost(*dm, ints, reals);
  CArray<T> value(E);
  CArray<T> dq, dv, du;
  if (grad) {
    dq = CArray<T>({E, H, py::ssize_t(m.nq)});
    dv = CArray<T>({E, H, py::ssize_t(m.nv)});
    du = CArray<T>({E, H, py::ssize_t(m.nu)});
  }
  {
    py::gil_scoped_release nogil;
    size_t n = size_t(E) * size_t(H);
    DeviceInput<T> d_qs(device, qs.data(), n * m.nq), d_vs(device, vs.data(), n * m.nv),
        d_us(device, us.data(), n * m.nu);
    DeviceOutput<T> d_value(device, value.mutable_data(), size_t(E));
    DeviceOutput<T> d_dq(device, grad ? dq.mutable_data() : nullptr, grad ? n * m.nq : 0),
        d_dv(device, grad ? dv.mutable_data() : nullptr, grad ? n * m.nv : 0),
        d_du(device, grad ? du.mutable_data() : nullptr, grad ? n * m.nu : 0);
    phx::trajectory_cost(*dm, cost, int(E), int(H), d_qs.get(), d_vs.get(), d_us.get(),
                         d_value.get(), d_dq.get(), d_dv.get(), d_du.get());
    d_value.finish();
    if (grad) {
      d_dq.finish();
      d_dv.finish();
      d_du.finish();
    }
  }
  if (!grad) return value;
  return py::make_tuple(value, dq, dv, du);
}

// a host array of a device buffer
template <class T>
CArray<T> download(const phx::Buffer<T>& b, std::vector<py::ssize_t> shape) {
  CArray<T> out(shape);
  if (b.size()) b.download(out.mutable_data(), b.size());
  return out;
}

// phx::PlannerBatch with numpy arrays: plans and noise scales live on the host and are
// copied to the device and back around each stage (a few kilobytes). A change of the model
// (parameters, options) recompiles it; the next rollouts() then rebuilds the batch on the new
// copy.
template <class T>
class PyPlannerBatch {
 public:
  PyPlannerBatch(PyModel& pm, int nproblem, int nsample, int horizon, int hold,
                 const std::string& device_name)
      : pm_(&pm),
        device_(phx::parse_device(device_name)),
        dm_(pm.compiled<T>(device_)),
        batch_(std::make_unique<phx::PlannerBatch<T>>(*dm_, nproblem, nsample, horizon, hold)) {}

  // the samples' costs (N, K) and status words (N, K) of one iteration
  py::tuple rollouts(const CostInts& ints, const CArrayD& reals, const CArray<T>& qpos,
                     const CArray<T>& qvel, const CArray<T>& plan, const CArray<T>& sigma,
                     const CArray<T>& lo, const CArray<T>& hi, std::uint64_t seed,
                     std::uint32_t stream, double beta, bool include_nominal, bool record,
                     const std::optional<CArray<T>>& act, int first_sample, int total_samples) {
    if (auto dm = pm_->compiled<T>(device_); dm != dm_) {  // the model changed: recompiled
      dm_ = dm;
      batch_ = std::make_unique<phx::PlannerBatch<T>>(*dm_, batch_->nproblem(), batch_->nsample(),
                                                      batch_->horizon(), batch_->hold());
    }
    const phx::Model& m = dm_->model();
    py::ssize_t N = batch_->nproblem(), K = batch_->nsample(), H = batch_->horizon();
    require(qpos, "qpos", {N, m.nq});
    require(qvel, "qvel", {N, m.nv});
    require(plan, "plan", {N, H, m.nu});
    require(sigma, "sigma", {N, H, m.nu});
    require(lo, "lo", {m.nu});
    require(hi, "hi", {m.nu});
    if (act) require(*act, "act", {N, m.na});
    phx::DeviceCost<T> cost = device_cost(*dm_, ints, reals);
    phx::PlannerSpec spec{int(N), int(K),          int(H),         seed,         stream,
                          beta,   include_nominal, batch_->hold(), first_sample, total_samples};
    {
      py::gil_scoped_release nogil;
      phx::Device dev = dm_->device();
      DeviceInput<T> d_q(dev, qpos.data(), size_t(N) * m.nq), d_v(dev, qvel.data(), size_t(N) * m.nv),
          d_plan(dev, plan.data(), size_t(N * H) * m.nu), d_sigma(dev, sigma.data(), size_t(N * H) * m.nu),
          d_lo(dev, lo.data(), size_t(m.nu)), d_hi(dev, hi.data(), size_t(m.nu));
      DeviceInput<T> d_act(dev, act ? act->data() : nullptr, act ? size_t(N) * m.na : 0);
      batch_->rollouts(cost, spec, d_q.get(), d_v.get(), d_plan.get(), d_sigma.get(), d_lo.get(),
                       d_hi.get(), record, act ? d_act.get() : nullptr);
    }
    return py::make_tuple(download(batch_->value, {N, K}), download(batch_->status, {N, K}));
  }

  // MPPI's update of plan (N, H, nu) in place -> ok (N,) bool
  py::array_t<bool> update_mppi(CArray<T>& plan, double lambda, const CArray<T>& lo,
                                const CArray<T>& hi) {
    const phx::Model& m = dm_->model();
    py::ssize_t N = batch_->nproblem(), H = batch_->horizon();
    require(plan, "plan", {N, H, m.nu});
    require(lo, "lo", {m.nu});
    require(hi, "hi", {m.nu});
    {
      py::gil_scoped_release nogil;
      phx::Device dev = dm_->device();
      DeviceOutput<T> d_plan(dev, plan.mutable_data(), size_t(N * H) * m.nu, true);
      DeviceInput<T> d_lo(dev, lo.data(), size_t(m.nu)), d_hi(dev, hi.data(), size_t(m.nu));
      batch_->update_mppi(T(lambda), d_plan.get(), d_lo.get(), d_hi.get());
      d_plan.finish();
    }
    return ok();
  }

  // CEM's refit of plan and sigma (N, H, nu) in place on the nelite best samples
  void update_cem(CArray<T>& plan, CArray<T>& sigma, int nelite, double alpha,
                  double sigma_min) {
    const phx::Model& m = dm_->model();
    py::ssize_t N = batch_->nproblem(), H = batch_->horizon();
    require(plan, "plan", {N, H, m.nu});
    require(sigma, "sigma", {N, H, m.nu});
    {
      py::gil_scoped_release nogil;
      phx::Device dev = dm_->device();
      size_t n = size_t(N * H) * m.nu;
      DeviceOutput<T> d_plan(dev, plan.mutable_data(), n, true),
          d_sigma(dev, sigma.mutable_data(), n, true);
      batch_->update_cem(nelite, T(alpha), T(sigma_min), d_plan.get(), d_sigma.get());
      nelite_ = nelite;
      d_plan.finish();
      d_sigma.finish();
    }
  }

  // replace the samples' costs (N, K), e.g. by a cost computed from the trajectories
  void set_costs(const CArray<T>& costs) {
    require(costs, "costs", {batch_->nproblem(), batch_->nsample()});
    batch_->value.upload(costs.data(), size_t(costs.size()));
  }

  // Replace the samples of the last iteration, eps and ctrl (N, K, H, nu) and their costs
  // (N, K), by those drawn and rolled out elsewhere (the slices of a planner whose samples are
  // spread over processes), before an update.
  void set_samples(const CArray<T>& eps, const CArray<T>& ctrl, const CArray<T>& costs) {
    const py::ssize_t N = batch_->nproblem(), K = batch_->nsample(), H = batch_->horizon();
    require(eps, "eps", {N, K, H, dm_->model().nu});
    require(ctrl, "ctrl", {N, K, H, dm_->model().nu});
    require(costs, "costs", {N, K});
    batch_->eps.upload(eps.data(), size_t(eps.size()));
    batch_->ctrl.upload(ctrl.data(), size_t(ctrl.size()));
    batch_->value.upload(costs.data(), size_t(costs.size()));
  }

  // the recorded trajectories (N * K, H * hold, nq) and (N * K, H * hold, nv)
  py::tuple trajectories() const {
    py::ssize_t M = py::ssize_t(batch_->nproblem()) * batch_->nsample(),
                H = py::ssize_t(batch_->horizon()) * batch_->hold();
    const phx::Model& m = dm_->model();
    if (batch_->qs.size() != size_t(M * H) * m.nq)
      throw std::logic_error("phalanx: no trajectories recorded (rollouts(record=True))");
    return py::make_tuple(download(batch_->qs, {M, H, m.nq}), download(batch_->vs, {M, H, m.nv}));
  }

  int nproblem() const { return batch_->nproblem(); }
  int nsample() const { return batch_->nsample(); }
  int horizon() const { return batch_->horizon(); }
  int hold() const { return batch_->hold(); }

  py::array_t<bool> ok() const {
    CArray<int> o = download(batch_->ok, {py::ssize_t(batch_->nproblem())});
    py::array_t<bool> out(o.size());
    for (py::ssize_t i = 0; i < o.size(); ++i) out.mutable_data()[i] = o.data()[i] != 0;
    return out;
  }
  CArray<T> eps() const { return download(batch_->eps, shape4()); }
  CArray<T> ctrl() const { return download(batch_->ctrl, shape4()); }
  CArray<T> weights() const {
    return download(batch_->weight, {batch_->nproblem(), batch_->nsample()});
  }
  // the last CEM update's elites (N, nelite), best first
  CArray<int> elites() const {
    py::ssize_t N = batch_->nproblem(), K = batch_->nsample();
    CArray<int> all = download(batch_->elite, {N, K});
    CArray<int> out({N, py::ssize_t(nelite_)});
    for (py::ssize_t p = 0; p < N; ++p)
      std::copy(all.data(p), all.data(p) + nelite_, out.mutable_data(p));
    return out;
  }

 private:
  std::vector<py::ssize_t> shape4() const {
    return {batch_->nproblem(), batch_->nsample(), batch_->horizon(), dm_->model().nu};
  }
  PyModel* pm_;  // kept alive by the Python object
  phx::Device device_;
  std::shared_ptr<const phx::DeviceModel<T>> dm_;
  std::unique_ptr<phx::PlannerBatch<T>> batch_;
  int nelite_ = 0;
};

template <class T>
void define_batch(py::module_& mod, const char* name) {
  py::class_<PyPlannerBatch<T>>(mod, name,
                                "N problems x K samples of a sampling planner on a device")
      .def(py::init<PyModel&, int, int, int, int, const std::string&>(), py::arg("model"),
           py::arg("num_problems"), py::arg("num_samples"), py::arg("horizon"), py::arg("hold") = 1,
           py::arg("device") = "cpu", py::keep_alive<1, 2>())
      .def("rollouts", &PyPlannerBatch<T>::rollouts, py::arg("cost_ints"), py::arg("cost_reals"),
           py::arg("qpos").noconvert(), py::arg("qvel").noconvert(), py::arg("plan").noconvert(),
           py::arg("sigma").noconvert(), py::arg("lo").noconvert(), py::arg("hi").noconvert(),
           py::arg("seed"), py::arg("stream"), py::arg("beta"), py::arg("include_nominal"),
           py::arg("record") = false, py::arg("act").noconvert() = py::none(),
           py::arg("first_sample") = 0, py::arg("total_samples") = 0,
           "noise, controls, rollouts and costs of all samples -> (costs (N, K), status (N, K)); "
           "act (N, na): the problems' activations, with activation state; the K samples are "
           "numbers first_sample.. of total_samples per problem (0: K), drawn as those")
      .def("set_samples", &PyPlannerBatch<T>::set_samples, py::arg("eps").noconvert(),
           py::arg("ctrl").noconvert(), py::arg("costs").noconvert(),
           "replace the samples eps, ctrl (N, K, H, nu) and costs (N, K) before an update")
      .def("set_costs", &PyPlannerBatch<T>::set_costs, py::arg("costs").noconvert(),
           "replace the samples' costs (N, K) before an update")
      .def("trajectories", &PyPlannerBatch<T>::trajectories,
           "the recorded states (N * K, H * hold, nq), (N * K, H * hold, nv)")
      .def("update_mppi", &PyPlannerBatch<T>::update_mppi, py::arg("plan").noconvert(),
           py::arg("lam"), py::arg("lo").noconvert(), py::arg("hi").noconvert(),
           "MPPI's update of the plans in place -> ok (N,)")
      .def("update_cem", &PyPlannerBatch<T>::update_cem, py::arg("plan").noconvert(),
           py::arg("sigma").noconvert(), py::arg("num_elites"), py::arg("alpha"),
           py::arg("sigma_min"), "CEM's refit of the plans and sigma in place")
      .def_property_readonly("num_problems", &PyPlannerBatch<T>::nproblem)
      .def_property_readonly("num_samples", &PyPlannerBatch<T>::nsample)
      .def_property_readonly("horizon", &PyPlannerBatch<T>::horizon)
      .def_property_readonly("hold", &PyPlannerBatch<T>::hold)
      .def_property_readonly("eps", &PyPlannerBatch<T>::eps)
      .def_property_readonly("ctrl", &PyPlannerBatch<T>::ctrl)
      .def_property_readonly("weights", &PyPlannerBatch<T>::weights)
      .def_property_readonly("elites", &PyPlannerBatch<T>::elites);
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
  define_batch<float>(mod, "PlannerBatch32");
  define_batch<double>(mod, "PlannerBatch64");
  const char* doc = "cost of E rollouts -> (E,), or (value, dq, dv, du) with grad";
  mod.def("trajectory_cost", &trajectory_cost_py<float>, py::arg("model"), py::arg("cost_ints"),
          py::arg("cost_reals"), py::arg("qs").noconvert(), py::arg("vs").noconvert(),
          py::arg("ctrl").noconvert(), py::arg("grad") = false, py::arg("device") = "cpu", doc);
  mod.def("trajectory_cost", &trajectory_cost_py<double>, py::arg("model"), py::arg("cost_ints"),
          py::arg("cost_reals"), py::arg("qs").noconvert(), py::arg("vs").noconvert(),
          py::arg("ctrl").noconvert(), py::arg("grad") = false, py::arg("device") = "cpu", doc);
  py::dict kinds;
  for (int k = 0; k < phx::kNumCostKinds; ++k) kinds[phx::kCostKindNames[k]] = k;
  mod.attr("COST_KINDS") = kinds;
}

}  // namespace phx::bindings
