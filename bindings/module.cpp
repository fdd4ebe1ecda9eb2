// phalanx._phalanx: the pybind11 extension, a thin layer over host/api.h.
//
// It owns a loaded Model together with its compiled DeviceModels and moves numpy arrays to and
// from the device: on the CPU the kernels read the caller's C-contiguous arrays in place and
// write into freshly allocated numpy arrays; on CUDA both go through device buffers. The checks
// users see (expected shape and dtype, named) are in phalanx/__init__.py; the checks here only
// keep memory safe when _phalanx is called directly. C++ exceptions reach Python through
// pybind11's translation: std::invalid_argument -> ValueError, std::runtime_error ->
// RuntimeError.
#include <cctype>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <climits>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "bindings/dlpack.h"
#include "bindings/py_model.h"
#include "bindings/submodules.h"
#include "host/api.h"

namespace py = pybind11;

namespace {

using phx::Device;
using phx::bindings::shape_string;
using phx::bindings::TensorRef;

static_assert(sizeof(unsigned) == sizeof(std::uint32_t), "status words are returned as uint32");

using phx::bindings::batch_size;
using phx::bindings::CArray;
using phx::bindings::CArrayD;
using phx::bindings::DeviceInput;
using phx::bindings::DeviceOutput;
using phx::bindings::optional_rows;
using phx::bindings::PyModel;
using phx::bindings::require_shape;

// M(q) with armature -> (E, nv, nv)
template <class T>
CArray<T> mass_matrix(PyModel& pm, const CArray<T>& qpos, const std::string& device_name) {
  Device device = phx::parse_device(device_name);
  auto dm = pm.compiled<T>(device);
  const phx::Model& m = dm->model();
  int E = batch_size(qpos, m.nq);
  CArray<T> M({py::ssize_t(E), py::ssize_t(m.nv), py::ssize_t(m.nv)});
  const T* q = qpos.data();
  T* out = M.mutable_data();
  {
    py::gil_scoped_release nogil;
    DeviceInput<T> d_qpos(device, q, size_t(E) * m.nq);
    DeviceOutput<T> d_M(device, out, size_t(E) * m.nv * m.nv);
    phx::mass_matrix(*dm, E, d_qpos.get(), d_M.get());
    d_M.finish();
  }
  return M;
}

// c(q, qvel) -> (E, nv)
template <class T>
CArray<T> bias_forces(PyModel& pm, const CArray<T>& qpos, const CArray<T>& qvel,
                      const std::string& device_name) {
  Device device = phx::parse_device(device_name);
  auto dm = pm.compiled<T>(device);
  const phx::Model& m = dm->model();
  int E = batch_size(qpos, m.nq);
  require_shape(qvel, {E, m.nv}, "qvel");
  CArray<T> bias({py::ssize_t(E), py::ssize_t(m.nv)});
  const T* q = qpos.data();
  const T* v = qvel.data();
  T* out = bias.mutable_data();
  {
    py::gil_scoped_release nogil;
    DeviceInput<T> d_qpos(device, q, size_t(E) * m.nq);
    DeviceInput<T> d_qvel(device, v, size_t(E) * m.nv);
    DeviceOutput<T> d_bias(device, out, size_t(E) * m.nv);
    phx::bias_forces(*dm, E, d_qpos.get(), d_qvel.get(), d_bias.get());
    d_bias.finish();
  }
  return bias;
}

// body frames and the centre of mass -> (xpos (E, nbody, 3), xquat (E, nbody, 4), com (E, 3),
// com_vel (E, 3) or None without qvel)
template <class T>
py::tuple kinematics(PyModel& pm, const CArray<T>& qpos, const std::optional<CArray<T>>& qvel,
                     const std::string& device_name) {
  Device device = phx::parse_device(device_name);
  auto dm = pm.compiled<T>(device);
  const phx::Model& m = dm->model();
  int E = batch_size(qpos, m.nq);
  if (qvel) require_shape(*qvel, {E, m.nv}, "qvel");
  py::ssize_t nb = m.nbody;
  CArray<T> xpos({py::ssize_t(E), nb, py::ssize_t(3)}), xquat({py::ssize_t(E), nb, py::ssize_t(4)});
  CArray<T> com({py::ssize_t(E), py::ssize_t(3)}), com_vel({py::ssize_t(qvel ? E : 0), py::ssize_t(3)});
  const T* q = qpos.data();
  const T* v = qvel ? qvel->data() : nullptr;
  T *px = xpos.mutable_data(), *pq = xquat.mutable_data(), *pc = com.mutable_data(),
    *pv = qvel ? com_vel.mutable_data() : nullptr;
  {
    py::gil_scoped_release nogil;
    DeviceInput<T> d_qpos(device, q, size_t(E) * m.nq);
    DeviceInput<T> d_qvel(device, v, v ? size_t(E) * m.nv : 0);
    DeviceOutput<T> d_xpos(device, px, size_t(E) * nb * 3), d_xquat(device, pq, size_t(E) * nb * 4),
        d_com(device, pc, size_t(E) * 3), d_com_vel(device, pv, v ? size_t(E) * 3 : 0);
    phx::kinematics(*dm, E, d_qpos.get(), v ? d_qvel.get() : nullptr, d_xpos.get(), d_xquat.get(),
                    d_com.get(), v ? d_com_vel.get() : nullptr);
    d_xpos.finish();
    d_xquat.finish();
    d_com.finish();
    d_com_vel.finish();
  }
  return py::make_tuple(xpos, xquat, com, qvel ? py::object(com_vel) : py::object(py::none()));
}

// qacc without constraints -> (E, nv)
template <class T>
CArray<T> forward_dynamics(PyModel& pm, const CArray<T>& qpos, const CArray<T>& qvel,
                           const CArray<T>& ctrl, const std::string& device_name) {
  Device device = phx::parse_device(device_name);
  auto dm = pm.compiled<T>(device);
  const phx::Model& m = dm->model();
  int E = batch_size(qpos, m.nq);
  require_shape(qvel, {E, m.nv}, "qvel");
  require_shape(ctrl, {E, m.nu}, "ctrl");
  CArray<T> qacc({py::ssize_t(E), py::ssize_t(m.nv)});
  const T* q = qpos.data();
  const T* v = qvel.data();
  const T* u = ctrl.data();
  T* out = qacc.mutable_data();
  {
    py::gil_scoped_release nogil;
    DeviceInput<T> d_qpos(device, q, size_t(E) * m.nq);
    DeviceInput<T> d_qvel(device, v, size_t(E) * m.nv);
    DeviceInput<T> d_ctrl(device, u, size_t(E) * m.nu);
    DeviceOutput<T> d_qacc(device, out, size_t(E) * m.nv);
    phx::forward_dynamics(*dm, E, d_qpos.get(), d_qvel.get(), d_ctrl.get(), d_qacc.get());
    d_qacc.finish();
  }
  return qacc;
}

// the generalized force producing qacc (MuJoCo's qfrc_inverse) -> (E, nv)
template <class T>
CArray<T> inverse_dynamics(PyModel& pm, const CArray<T>& qpos, const CArray<T>& qvel,
                           const CArray<T>& qacc, const std::string& device_name) {
  Device device = phx::parse_device(device_name);
  auto dm = pm.compiled<T>(device);
  const phx::Model& m = dm->model();
  int E = batch_size(qpos, m.nq);
  require_shape(qvel, {E, m.nv}, "qvel");
  require_shape(qacc, {E, m.nv}, "qacc");
  CArray<T> tau({py::ssize_t(E), py::ssize_t(m.nv)});
  const T* q = qpos.data();
  const T* v = qvel.data();
  const T* a = qacc.data();
  T* out = tau.mutable_data();
  {
    py::gil_scoped_release nogil;
    DeviceInput<T> d_qpos(device, q, size_t(E) * m.nq);
    DeviceInput<T> d_qvel(device, v, size_t(E) * m.nv);
    DeviceInput<T> d_qacc(device, a, size_t(E) * m.nv);
    DeviceOutput<T> d_tau(device, out, size_t(E) * m.nv);
    phx::inverse_dynamics(*dm, E, d_qpos.get(), d_qvel.get(), d_qacc.get(), d_tau.get());
    d_tau.finish();
  }
  return tau;
}

// nstep steps with ctrl held -> (qpos, qvel, status), new arrays
template <class T>
py::tuple step(PyModel& pm, const CArray<T>& qpos, const CArray<T>& qvel, const CArray<T>& ctrl,
               int nstep, const std::optional<CArray<T>>& qfrc, const std::string& device_name) {
  Device device = phx::parse_device(device_name);
  auto dm = pm.compiled<T>(device);
  const phx::Model& m = dm->model();
  int E = batch_size(qpos, m.nq);
  require_shape(qvel, {E, m.nv}, "qvel");
  require_shape(ctrl, {E, m.nu}, "ctrl");
  const T* f = optional_rows(qfrc, E, m.nv, "qfrc");
  if (nstep < 0) throw std::invalid_argument("phalanx: nstep must be >= 0");
  CArray<T> qpos_out({py::ssize_t(E), py::ssize_t(m.nq)});
  CArray<T> qvel_out({py::ssize_t(E), py::ssize_t(m.nv)});
  py::array_t<std::uint32_t> status(py::ssize_t{E});
  const T* q = qpos.data();
  const T* v = qvel.data();
  const T* u = ctrl.data();
  T* q_out = qpos_out.mutable_data();
  T* v_out = qvel_out.mutable_data();
  unsigned* s_out = reinterpret_cast<unsigned*>(status.mutable_data());
  if (E > 0) {
    py::gil_scoped_release nogil;
    phx::Data<T> data(*dm, E);
    data.qpos.upload(q, size_t(E) * m.nq);
    data.qvel.upload(v, size_t(E) * m.nv);
    data.ctrl.upload(u, size_t(E) * m.nu);
    DeviceInput<T> d_f(device, f, size_t(E) * m.nv);
    phx::step(*dm, data, nstep, d_f.get());
    data.qpos.download(q_out, size_t(E) * m.nq);
    data.qvel.download(v_out, size_t(E) * m.nv);
    data.status.download(s_out, size_t(E));
  }
  return py::make_tuple(qpos_out, qvel_out, status);
}

// T steps driven by ctrl (E, T, nu) -> (qpos (E, T, nq), qvel (E, T, nv), status (E,))
// The per-environment parameter gradients of step_vjp and Tape.backward: the numpy arrays
// (E, ...) made with the GIL held, then bind() (GIL released) gives the device outputs the
// kernels fill and finish() copies them back.
template <class T>
class ParameterGrads {
 public:
  ParameterGrads(const phx::Model& m, int E) {
    for (int k = 0; k < phx::kNumParams; ++k) {
      py::ssize_t n = py::ssize_t(m.param_size(k)), w = phx::param_width(k);
      std::vector<py::ssize_t> dims = {py::ssize_t(E), n / w};
      if (w > 1) dims.push_back(w);
      arrays_.push_back({phx::kParamNames[k], CArray<T>(dims), size_t(E) * size_t(n)});
    }
  }
  void bind(Device device) {
    for (Entry& a : arrays_)
      out_.push_back(std::make_unique<DeviceOutput<T>>(device, a.array.mutable_data(), a.n));
  }
  phx::ModelAdjoint<T> model_adjoint() {
    adjoints();
    return model_;
  }
  phx::ContactModelAdjoint<T> contact_adjoint() {
    adjoints();
    return contact_;
  }
  void finish() {
    for (auto& o : out_) o->finish();
  }
  void into(py::dict& d) const {
    for (const Entry& a : arrays_) d[a.name] = a.array;
  }

 private:
  struct Entry {
    const char* name;
    CArray<T> array;
    size_t n;
  };
  std::vector<Entry> arrays_;
  std::vector<std::unique_ptr<DeviceOutput<T>>> out_;
  phx::ModelAdjoint<T> model_;
  phx::ContactModelAdjoint<T> contact_;
  // the device arrays of the bound outputs, in Param order
  void adjoints() {
    for (int k = 0; k < phx::kNumParams; ++k)
      phx::param_adjoint(model_, contact_, k) = out_[size_t(k)]->get();
  }
};

// phalanx.Tape: records a rollout (phalanx.rollout(..., tape=)) for its backward pass. Holds the
// compiled model it was recorded with, so later option changes do not affect the replay.
class PyTape {
 public:
  PyTape(int every, std::int64_t budget) : every_(every), budget_(budget) {
    if (every < 0) throw std::invalid_argument("phalanx: checkpoint_every must be >= 0");
    if (budget < 0) throw std::invalid_argument("phalanx: memory_budget must be >= 0");
  }

  template <class T>
  struct Recording {
    std::shared_ptr<const phx::DeviceModel<T>> model;
    std::unique_ptr<phx::Tape<T>> tape;
  };

  // a fresh tape for a rollout of nenv x nstep on dm (drops what was recorded before); an empty
  // rollout is an error that leaves the recording as it was
  template <class T>
  phx::Tape<T>* start(std::shared_ptr<const phx::DeviceModel<T>> dm, Device device,
                      std::int64_t nenv, std::int64_t nstep) {
    if (nenv <= 0 || nstep <= 0)
      throw std::invalid_argument("phalanx: a tape records at least one environment and one "
                                  "step; this rollout has " + std::to_string(nenv) + " x " +
                                  std::to_string(nstep) + " (the tape keeps what it held)");
    f32_ = {};
    f64_ = {};
    device_ = device;
    Recording<T>& r = recording<T>();
    r.model = std::move(dm);
    r.tape = std::make_unique<phx::Tape<T>>(every_, size_t(budget_));
    return r.tape.get();
  }

  template <class T>
  Recording<T>& recording() {
    if constexpr (std::is_same_v<T, float>) {
      return f32_;
    } else {
      return f64_;
    }
  }

  bool recorded() const {
    return (f32_.tape && f32_.tape->recorded()) || (f64_.tape && f64_.tape->recorded());
  }
  template <class F>
  auto visit(F f) const {
    return f64_.tape ? f(*f64_.tape) : f(*f32_.tape);
  }
  int every() const { return recorded() ? visit([](auto& t) { return t.every(); }) : every_; }
  int nstep() const { return recorded() ? visit([](auto& t) { return t.nstep(); }) : 0; }
  int nenv() const { return recorded() ? visit([](auto& t) { return t.nenv(); }) : 0; }
  size_t nbytes() const { return recorded() ? visit([](auto& t) { return t.bytes(); }) : 0; }
  py::tuple peak() const {
    std::array<int, 2> p{0, 0};
    if (recorded()) p = visit([](auto& t) { return t.peak(); });
    return py::make_tuple(p[0], p[1]);
  }
  py::object dtype() const {
    if (!recorded()) return py::none();
    return py::module_::import("numpy").attr(f64_.tape ? "float64" : "float32");
  }
  Device device() const { return device_; }

 private:
  int every_;
  std::int64_t budget_;
  Device device_ = Device::kCpu;
  Recording<float> f32_;
  Recording<double> f64_;
};

// a view (dims, strides in bytes) of base's data at p, keeping base alive; numpy's own
// constructor, without py::array's shape and stride containers (a one-step Jacobian of a small
// model returns eight of them per call, which cost as much as the reverse pass of one row)
template <class T>
py::object array_view(const py::array& base, const T* p, int nd, const Py_intptr_t* dims,
                      const Py_intptr_t* strides) {
  auto& api = py::detail::npy_api::get();
  PyObject* descr = api.PyArray_DescrFromType_(py::detail::npy_format_descriptor<T>::value);
  if (!descr) throw py::error_already_set();
  // NewFromDescr takes descr's reference, also when it fails
  PyObject* view =
      api.PyArray_NewFromDescr_(api.PyArray_Type_, descr, nd, const_cast<Py_intptr_t*>(dims),
                                const_cast<Py_intptr_t*>(strides), const_cast<T*>(p),
                                py::detail::npy_api::NPY_ARRAY_WRITEABLE_, nullptr);
  if (!view) throw py::error_already_set();
  auto r = py::reinterpret_steal<py::object>(view);
  if (api.PyArray_SetBaseObject_(view, base.inc_ref().ptr()) != 0) throw py::error_already_set();
  return r;
}

// the blocks d{qpos,qvel}_d{qpos,qvel,ctrl,qfrc} of jac (E, nq + nv, nq + 2 nv + nu) as views
template <class T>
py::dict jacobian_blocks(const CArray<T>& jac, int nq, int nv, int nu) {
  static const char* const kNames[2][4] = {
      {"dqpos_dqpos", "dqpos_dqvel", "dqpos_dctrl", "dqpos_dqfrc"},
      {"dqvel_dqpos", "dqvel_dqvel", "dqvel_dctrl", "dqvel_dqfrc"}};
  // interned once, never freed (the module lives as long as the interpreter)
  static PyObject* keys[2][4] = {};
  if (!keys[0][0]) {
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 4; ++c) keys[r][c] = PyUnicode_InternFromString(kNames[r][c]);
  }
  const int row0[2] = {0, nq}, nrow[2] = {nq, nv};
  const int col0[4] = {0, nq, nq + nv, nq + nv + nu}, ncol[4] = {nq, nv, nu, nv};
  const Py_intptr_t cols = nq + 2 * nv + nu;
  const Py_intptr_t strides[3] = {jac.strides(0), jac.strides(1), jac.strides(2)};
  py::dict out;
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 4; ++c) {
      const T* p = jac.data() + Py_intptr_t(row0[r]) * cols + col0[c];
      const Py_intptr_t dims[3] = {jac.shape(0), nrow[r], ncol[c]};
      if (PyDict_SetItem(out.ptr(), keys[r][c], array_view(jac, p, 3, dims, strides).ptr()) != 0)
        throw py::error_already_set();
    }
  }
  return out;
}

// one-step Jacobians -> (the blocks of jac (E, nq + nv, nq + 2 nv + nu) by name, jac_param
// (E, nq + nv, nparam) or None)
template <class T>
py::tuple step_jacobian(PyModel& pm, const CArray<T>& qpos, const CArray<T>& qvel,
                        const CArray<T>& ctrl, bool parameters, int contact_gradient,
                        const std::optional<CArray<T>>& qfrc, const std::string& device_name) {
  Device device = phx::parse_device(device_name);
  auto dm = pm.compiled<T>(device);
  const phx::Model& m = dm->model();
  int E = batch_size(qpos, m.nq);
  require_shape(qvel, {E, m.nv}, "qvel");
  require_shape(ctrl, {E, m.nu}, "ctrl");
  const T* f = optional_rows(qfrc, E, m.nv, "qfrc");
  py::ssize_t rows = m.nq + m.nv, cols = m.nq + 2 * m.nv + m.nu,
              np = phx::jacobian_nparam(dm->view());
  CArray<T> jac({py::ssize_t(E), rows, cols});
  std::optional<CArray<T>> jac_param;
  if (parameters) jac_param = CArray<T>({py::ssize_t(E), rows, np});
  T* pj = jac.mutable_data();
  T* pp = parameters ? jac_param->mutable_data() : nullptr;
  if (E > 0) {
    py::gil_scoped_release nogil;
    DeviceInput<T> d_q(device, qpos.data(), size_t(E) * m.nq);
    DeviceInput<T> d_v(device, qvel.data(), size_t(E) * m.nv);
    DeviceInput<T> d_u(device, ctrl.data(), size_t(E) * m.nu);
    DeviceOutput<T> d_jac(device, pj, size_t(E) * rows * cols);
    DeviceOutput<T> d_par(device, pp, pp ? size_t(E) * rows * np : 0);
    DeviceInput<T> d_f(device, f, size_t(E) * m.nv);
    phx::step_jacobian(*dm, E, d_q.get(), d_v.get(), d_u.get(), d_jac.get(),
                       pp ? d_par.get() : nullptr, contact_gradient, d_f.get());
    d_jac.finish();
    if (pp) d_par.finish();
  }
  return py::make_tuple(jacobian_blocks(jac, m.nq, m.nv, m.nu),
                        jac_param ? py::object(*jac_param) : py::none());
}

// Tape.backward for the tape's scalar type -> dict of gradients: qpos (E, nq), qvel (E, nv),
// ctrl (E, T, nu) and ParameterGrads
template <class T>
py::dict tape_backward(PyTape& pt, std::optional<CArray<T>> adj_qpos_out,
                       std::optional<CArray<T>> adj_qvel_out, int contact_gradient) {
  PyTape::Recording<T>& r = pt.recording<T>();
  if (!r.tape || !r.tape->recorded())
    throw std::logic_error("phalanx: this tape holds no rollout of this dtype; pass tape= to "
                           "phalanx.rollout first");
  const phx::Model& m = r.model->model();
  int E = r.tape->nenv(), nstep = r.tape->nstep();
  if (adj_qpos_out) require_shape(*adj_qpos_out, {E, nstep, m.nq}, "adj_qpos");
  if (adj_qvel_out) require_shape(*adj_qvel_out, {E, nstep, m.nv}, "adj_qvel");
  CArray<T> gq({py::ssize_t(E), py::ssize_t(m.nq)}), gv({py::ssize_t(E), py::ssize_t(m.nv)}),
      gc({py::ssize_t(E), py::ssize_t(nstep), py::ssize_t(m.nu)});
  ParameterGrads<T> params(m, E);
  Device device = pt.device();
  const T* aq = adj_qpos_out ? adj_qpos_out->data() : nullptr;
  const T* av = adj_qvel_out ? adj_qvel_out->data() : nullptr;
  T* pq = gq.mutable_data();
  T* pv = gv.mutable_data();
  T* pc = gc.mutable_data();
  {
    py::gil_scoped_release nogil;
    DeviceInput<T> d_aq(device, aq, aq ? size_t(E) * nstep * m.nq : 0);
    DeviceInput<T> d_av(device, av, av ? size_t(E) * nstep * m.nv : 0);
    DeviceOutput<T> d_gq(device, pq, size_t(E) * m.nq), d_gv(device, pv, size_t(E) * m.nv),
        d_gc(device, pc, size_t(E) * nstep * m.nu);
    params.bind(device);
    phx::rollout_backward(*r.model, *r.tape, aq ? d_aq.get() : nullptr, av ? d_av.get() : nullptr,
                          d_gq.get(), d_gv.get(), d_gc.get(), params.model_adjoint(),
                          params.contact_adjoint(), contact_gradient);
    d_gq.finish();
    d_gv.finish();
    d_gc.finish();
    params.finish();
  }
  py::dict result;
  result["qpos"] = gq;
  result["qvel"] = gv;
  result["ctrl"] = gc;
  params.into(result);
  return result;
}

template <class T>
py::tuple rollout(PyModel& pm, const CArray<T>& qpos, const CArray<T>& qvel, const CArray<T>& ctrl,
                  std::optional<CArray<T>> qpos_out_arg, std::optional<CArray<T>> qvel_out_arg,
                  std::optional<py::array_t<int, py::array::c_style>> counts_arg,
                  PyTape* py_tape, const std::string& device_name) {
  Device device = phx::parse_device(device_name);
  auto dm = pm.compiled<T>(device);
  const phx::Model& m = dm->model();
  int E = batch_size(qpos, m.nq);
  require_shape(qvel, {E, m.nv}, "qvel");
  py::ssize_t nstep = ctrl.ndim() == 3 ? ctrl.shape(1) : 0;
  require_shape(ctrl, {E, nstep, m.nu}, "ctrl");
  if (nstep > INT_MAX) throw std::invalid_argument("phalanx: too many steps");
  phx::Tape<T>* tape = py_tape ? py_tape->start<T>(dm, device, E, nstep) : nullptr;
  // outputs: the caller's arrays when given (reused across calls), else new ones
  CArray<T> qpos_out = qpos_out_arg ? *qpos_out_arg
                                    : CArray<T>({py::ssize_t(E), nstep, py::ssize_t(m.nq)});
  CArray<T> qvel_out = qvel_out_arg ? *qvel_out_arg
                                    : CArray<T>({py::ssize_t(E), nstep, py::ssize_t(m.nv)});
  require_shape(qpos_out, {E, nstep, m.nq}, "qpos_out");
  require_shape(qvel_out, {E, nstep, m.nv}, "qvel_out");
  if (counts_arg) require_shape(*counts_arg, {E, nstep, phx::kNumCounts}, "counts");
  int* counts_ptr = counts_arg ? counts_arg->mutable_data() : nullptr;
  py::array_t<std::uint32_t> status(py::ssize_t{E});
  const T* q = qpos.data();
  const T* v = qvel.data();
  const T* u = ctrl.data();
  T* q_out = qpos_out.mutable_data();
  T* v_out = qvel_out.mutable_data();
  unsigned* s_out = reinterpret_cast<unsigned*>(status.mutable_data());
  if (E > 0) {
    py::gil_scoped_release nogil;
    phx::Data<T> data(*dm, E);
    data.qpos.upload(q, size_t(E) * m.nq);
    data.qvel.upload(v, size_t(E) * m.nv);
    DeviceInput<T> d_ctrl(device, u, size_t(E) * nstep * m.nu);
    DeviceOutput<T> d_qpos_out(device, q_out, size_t(E) * nstep * m.nq);
    DeviceOutput<T> d_qvel_out(device, v_out, size_t(E) * nstep * m.nv);
    DeviceOutput<int> d_counts(device, counts_ptr,
                               counts_ptr ? size_t(E) * nstep * phx::kNumCounts : 0);
    phx::rollout(*dm, data, d_ctrl.get(), int(nstep), d_qpos_out.get(), d_qvel_out.get(),
                 counts_ptr ? d_counts.get() : nullptr, tape);
    d_qpos_out.finish();
    d_qvel_out.finish();
    if (counts_ptr) d_counts.finish();
    data.status.download(s_out, size_t(E));
  }
  return py::make_tuple(qpos_out, qvel_out, status);
}

// vector-Jacobian product of one step -> dict of adjoints: qpos (E, nq), qvel (E, nv),
// ctrl (E, nu) and per-environment parameter adjoints body_mass (E, nbody),
// body_inertia (E, nbody, 3), dof_damping (E, nv), dof_armature (E, nv), jnt_stiffness
// (E, njnt), actuator_gear (E, nu)
template <class T>
py::dict step_vjp(PyModel& pm, const CArray<T>& qpos, const CArray<T>& qvel, const CArray<T>& ctrl,
                  const CArray<T>& adj_qpos_next, const CArray<T>& adj_qvel_next,
                  int contact_gradient, const std::optional<CArray<T>>& qfrc,
                  const std::string& device_name) {
  Device device = phx::parse_device(device_name);
  auto dm = pm.compiled<T>(device);
  const phx::Model& m = dm->model();
  int E = batch_size(qpos, m.nq);
  require_shape(qvel, {E, m.nv}, "qvel");
  require_shape(ctrl, {E, m.nu}, "ctrl");
  const T* f = optional_rows(qfrc, E, m.nv, "qfrc");
  require_shape(adj_qpos_next, {E, m.nq}, "adj_qpos_next");
  require_shape(adj_qvel_next, {E, m.nv}, "adj_qvel_next");
  auto out = [E](std::vector<py::ssize_t> dims) {
    dims.insert(dims.begin(), py::ssize_t(E));
    return CArray<T>(dims);
  };
  py::dict result;
  CArray<T> gq = out({m.nq}), gv = out({m.nv}), gc = out({m.nu}), gf = out({m.nv});
  ParameterGrads<T> params(m, E);
  // device copies of the inputs and outputs, then one launch
  const T* in[5] = {qpos.data(), qvel.data(), ctrl.data(), adj_qpos_next.data(),
                    adj_qvel_next.data()};
  size_t in_n[5] = {size_t(m.nq), size_t(m.nv), size_t(m.nu), size_t(m.nq), size_t(m.nv)};
  T* pq = gq.mutable_data();
  T* pv = gv.mutable_data();
  T* pc = gc.mutable_data();
  T* pf = gf.mutable_data();
  if (E > 0) {
    py::gil_scoped_release nogil;
    std::vector<std::unique_ptr<DeviceInput<T>>> d_in;
    for (int i = 0; i < 5; ++i)
      d_in.push_back(std::make_unique<DeviceInput<T>>(device, in[i], size_t(E) * in_n[i]));
    DeviceInput<T> d_f(device, f, size_t(E) * m.nv);
    DeviceOutput<T> d_gq(device, pq, size_t(E) * m.nq), d_gv(device, pv, size_t(E) * m.nv),
        d_gc(device, pc, size_t(E) * m.nu), d_gf(device, pf, size_t(E) * m.nv);
    params.bind(device);
    phx::step_vjp(*dm, E, d_in[0]->get(), d_in[1]->get(), d_in[2]->get(), d_in[3]->get(),
                  d_in[4]->get(), d_gq.get(), d_gv.get(), d_gc.get(), params.model_adjoint(),
                  params.contact_adjoint(), contact_gradient, d_f.get(),
                  d_gf.get());
    d_gq.finish();
    d_gv.finish();
    d_gc.finish();
    d_gf.finish();
    params.finish();
  }
  result["qpos"] = gq;
  result["qvel"] = gv;
  result["ctrl"] = gc;
  result["qfrc"] = gf;
  params.into(result);
  return result;
}

// ---- the same calls on tensors the caller allocated (torch, jax, cupy or numpy through
// DLPack), run on the device the tensors live on, inputs read and outputs written in place ----

// the tensors of one call (None: an empty TensorRef): all on one device, of one float type,
// those of the first given
struct TensorArgs {
  std::vector<TensorRef> refs;
  Device device = Device::kCpu;
  int bits = 0;
  explicit TensorArgs(std::initializer_list<std::pair<py::handle, const char*>> args) {
    for (const auto& [obj, name] : args) {
      if (obj.is_none()) {
        refs.emplace_back();
        continue;
      }
      refs.push_back(phx::bindings::import_tensor(obj, name));
      const TensorRef& t = refs.back();
      if (bits == 0) {
        device = t.device;
        bits = t.kind == 'f' ? t.bits : 0;
        if (bits != 32 && bits != 64)
          throw std::invalid_argument(std::string("phalanx: ") + name +
                                      " must be float32 or float64");
      } else if (t.device != device) {
        throw std::invalid_argument(std::string("phalanx: ") + name + " is on " +
                                    phx::device_name(t.device) + ", the other arguments on " +
                                    phx::device_name(device));
      }
    }
  }
  const TensorRef& operator[](size_t i) const { return refs[i]; }
};

// copy a state between a tensor and Data on the tensors' device
template <class T>
void copy_to(Device d, T* dst, const T* src, size_t n) {
  phx::detail::device_copy(d, dst, d, src, n * sizeof(T));
}

// the compiled model and the one-step inputs (qpos, qvel, ctrl) of a call's first tensors
template <class T>
struct StepArgs {
  std::shared_ptr<const phx::DeviceModel<T>> dm;
  std::int64_t E;
  const T *q, *v, *u;
  StepArgs(PyModel& pm, const TensorArgs& a) : dm(pm.compiled<T>(a.device)) {
    const phx::Model& m = dm->model();
    E = a[0].shape.empty() ? 0 : a[0].shape[0];
    q = a[0].as<T>("qpos", {E, m.nq});
    v = a[1].as<T>("qvel", {E, m.nv});
    u = a[2].as<T>("ctrl", {E, m.nu});
  }
};

// The contact storage of a batch of environments (the previous step's rows and impulses, the
// warm start of the next) kept across step_into / rollout_into calls, as phx::Data keeps it in
// C++: phalanx.Simulator holds one, so T calls of one step equal one T-step rollout. Rebuilt
// (a cold start) when the batch size, scalar type, device or contact capacity changes.
class PyWarmStart {
 public:
  template <class T>
  phx::Data<T>& data(const phx::DeviceModel<T>& dm, int nenv) {
    const phx::ModelView<T>& v = dm.view();
    auto& slot = this->slot<T>();
    if (!slot || slot->nenv() != nenv || device_ != dm.device() || nconmax_ != v.nconmax ||
        nefcmax_ != v.nefcmax) {
      f32_.reset();
      f64_.reset();
      slot = std::make_unique<phx::Data<T>>(dm, nenv);
      device_ = dm.device();
      nconmax_ = v.nconmax;
      nefcmax_ = v.nefcmax;
    }
    slot->clear_status();  // a call reports its own status bits
    return *slot;
  }

  // forget the rows of these environments: their next step starts cold (after a reset)
  void cold_start(const py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>& ids) {
    visit([&](auto& d) {
      for (py::ssize_t i = 0; i < ids.size(); ++i) {
        std::int64_t e = ids.data()[i];
        if (e < 0 || e >= d.nenv())
          throw std::invalid_argument("phalanx: environment " + std::to_string(e) +
                                      " out of range [0, " + std::to_string(d.nenv()) + ")");
        phx::detail::device_zero(device_, d.contact.nefc.data() + e, sizeof(int));
      }
    });
  }

  // rows each environment holds now (nefc), for tests and tools; empty before the first call
  py::array_t<int> rows() const {
    py::array_t<int> out{py::ssize_t{nenv()}};
    cvisit([&](const auto& d) { d.contact.nefc.download(out.mutable_data(), size_t(d.nenv())); });
    return out;
  }

 private:
  template <class T>
  std::unique_ptr<phx::Data<T>>& slot() {
    if constexpr (std::is_same_v<T, float>) {
      return f32_;
    } else {
      return f64_;
    }
  }
  template <class F>
  void visit(F f) {
    if (f32_) f(*f32_);
    if (f64_) f(*f64_);
  }
  template <class F>
  void cvisit(F f) const {
    if (f32_) f(*f32_);
    if (f64_) f(*f64_);
  }
  int nenv() const { return f32_ ? f32_->nenv() : f64_ ? f64_->nenv() : 0; }

  std::unique_ptr<phx::Data<float>> f32_;
  std::unique_ptr<phx::Data<double>> f64_;
  Device device_ = Device::kCpu;
  int nconmax_ = -1, nefcmax_ = -1;
};

// the Data of one call: the warm start's when given (contacts persist), else a fresh one
template <class T>
struct CallData {
  std::optional<phx::Data<T>> own;
  phx::Data<T>* data;
  CallData(const phx::DeviceModel<T>& dm, int nenv, PyWarmStart* ws) {
    if (ws) {
      data = &ws->data(dm, nenv);
    } else {
      own.emplace(dm, nenv);
      data = &*own;
    }
  }
};

template <class T>
void step_into_t(PyModel& pm, const TensorArgs& a, int nstep, PyWarmStart* ws) {
  StepArgs<T> in(pm, a);
  const phx::Model& m = in.dm->model();
  auto [dm, E, q, v, u] = in;
  T* q1 = a[3].as<T>("qpos_out", {E, m.nq});
  T* v1 = a[4].as<T>("qvel_out", {E, m.nv});
  auto* status = reinterpret_cast<unsigned*>(a[5].as<std::int32_t>("status_out", {E}));
  if (E == 0) return;
  py::gil_scoped_release nogil;
  CallData<T> call(*dm, int(E), ws);
  phx::Data<T>& data = *call.data;
  copy_to(a.device, data.qpos.data(), q, size_t(E) * m.nq);
  copy_to(a.device, data.qvel.data(), v, size_t(E) * m.nv);
  copy_to(a.device, data.ctrl.data(), u, size_t(E) * m.nu);
  phx::step(*dm, data, nstep);
  copy_to(a.device, q1, data.qpos.data(), size_t(E) * m.nq);
  copy_to(a.device, v1, data.qvel.data(), size_t(E) * m.nv);
  copy_to(a.device, status, data.status.data(), size_t(E));
}

void step_into(PyModel& pm, py::handle qpos, py::handle qvel, py::handle ctrl, py::handle qpos_out,
               py::handle qvel_out, py::handle status_out, int nstep, PyWarmStart* ws) {
  if (nstep < 0) throw std::invalid_argument("phalanx: nstep must be >= 0");
  TensorArgs a({{qpos, "qpos"}, {qvel, "qvel"}, {ctrl, "ctrl"}, {qpos_out, "qpos_out"},
                {qvel_out, "qvel_out"}, {status_out, "status_out"}});
  a.bits == 32 ? step_into_t<float>(pm, a, nstep, ws) : step_into_t<double>(pm, a, nstep, ws);
}

template <class T>
void rollout_into_t(PyModel& pm, const TensorArgs& a, PyTape* py_tape, PyWarmStart* ws) {
  auto dm = pm.compiled<T>(a.device);
  const phx::Model& m = dm->model();
  std::int64_t E = a[0].shape.empty() ? 0 : a[0].shape[0];
  std::int64_t nstep = a[2].shape.size() == 3 ? a[2].shape[1] : 0;
  if (nstep > INT_MAX) throw std::invalid_argument("phalanx: too many steps");
  const T* q = a[0].as<T>("qpos", {E, m.nq});
  const T* v = a[1].as<T>("qvel", {E, m.nv});
  const T* u = a[2].as<T>("ctrl", {E, nstep, m.nu});
  T* qs = a[3].as<T>("qpos_out", {E, nstep, m.nq});
  T* vs = a[4].as<T>("qvel_out", {E, nstep, m.nv});
  auto* status = reinterpret_cast<unsigned*>(a[5].as<std::int32_t>("status_out", {E}));
  phx::Tape<T>* tape = py_tape ? py_tape->start<T>(dm, a.device, E, nstep) : nullptr;
  if (E == 0) return;
  py::gil_scoped_release nogil;
  CallData<T> call(*dm, int(E), ws);
  phx::Data<T>& data = *call.data;
  copy_to(a.device, data.qpos.data(), q, size_t(E) * m.nq);
  copy_to(a.device, data.qvel.data(), v, size_t(E) * m.nv);
  phx::rollout(*dm, data, u, int(nstep), qs, vs, nullptr, tape);
  copy_to(a.device, status, data.status.data(), size_t(E));
}

void rollout_into(PyModel& pm, py::handle qpos, py::handle qvel, py::handle ctrl,
                  py::handle qpos_out, py::handle qvel_out, py::handle status_out, PyTape* tape,
                  PyWarmStart* ws) {
  TensorArgs a({{qpos, "qpos"}, {qvel, "qvel"}, {ctrl, "ctrl"}, {qpos_out, "qpos_out"},
                {qvel_out, "qvel_out"}, {status_out, "status_out"}});
  a.bits == 32 ? rollout_into_t<float>(pm, a, tape, ws) : rollout_into_t<double>(pm, a, tape, ws);
}

// gradient outputs: grads maps "qpos", "qvel", "ctrl" and parameter names to tensors (E, ...)
// to overwrite; absent names are not computed
template <class T>
struct GradTensors {
  T* state[3] = {};
  phx::ModelAdjoint<T> model;
  phx::ContactModelAdjoint<T> contact;
  std::vector<TensorRef> keep;

  GradTensors(const py::dict& grads, const phx::Model& m, Device device, std::int64_t E,
              std::int64_t nstep) {
    auto take = [&](const char* name, std::vector<std::int64_t> shape) -> T* {
      if (!grads.contains(name)) return nullptr;
      keep.push_back(phx::bindings::import_tensor(grads[name], name));
      if (keep.back().device != device)
        throw std::invalid_argument(std::string("phalanx: gradient ") + name +
                                    " is on another device than the inputs");
      return keep.back().as<T>(name, shape);
    };
    state[0] = take("qpos", {E, m.nq});
    state[1] = take("qvel", {E, m.nv});
    state[2] = nstep < 0 ? take("ctrl", {E, m.nu}) : take("ctrl", {E, nstep, m.nu});
    for (int k = 0; k < phx::kNumParams; ++k) {
      std::int64_t n = std::int64_t(m.param_size(k)), w = phx::param_width(k);
      std::vector<std::int64_t> shape = {E, n / w};
      if (w > 1) shape.push_back(w);
      phx::param_adjoint(model, contact, k) = take(phx::kParamNames[k], shape);
    }
    for (const auto& item : grads) {
      std::string key = py::str(item.first);
      bool known = key == "qpos" || key == "qvel" || key == "ctrl";
      for (int k = 0; k < phx::kNumParams; ++k) known = known || key == phx::kParamNames[k];
      if (!known) throw std::invalid_argument("phalanx: unknown gradient '" + key + "'");
    }
  }
};

template <class T>
void step_vjp_into_t(PyModel& pm, const TensorArgs& a, const py::dict& grads,
                     int contact_gradient) {
  StepArgs<T> in(pm, a);
  const phx::Model& m = in.dm->model();
  auto [dm, E, q, v, u] = in;
  const T* aq = a[3].as<T>("adj_qpos_next", {E, m.nq});
  const T* av = a[4].as<T>("adj_qvel_next", {E, m.nv});
  GradTensors<T> g(grads, m, a.device, E, -1);
  if (E == 0) return;
  py::gil_scoped_release nogil;
  // the kernel writes every state gradient: scratch for those not asked for
  phx::Buffer<T> spare(a.device, size_t(E) * (m.nq + m.nv + m.nu));
  T* gq = g.state[0] ? g.state[0] : spare.data();
  T* gv = g.state[1] ? g.state[1] : spare.data() + size_t(E) * m.nq;
  T* gc = g.state[2] ? g.state[2] : spare.data() + size_t(E) * (m.nq + m.nv);
  phx::step_vjp(*dm, int(E), q, v, u, aq, av, gq, gv, gc, g.model, g.contact, contact_gradient);
}

void step_vjp_into(PyModel& pm, py::handle qpos, py::handle qvel, py::handle ctrl,
                   py::handle adj_qpos_next, py::handle adj_qvel_next, const py::dict& grads,
                   int contact_gradient) {
  TensorArgs a({{qpos, "qpos"}, {qvel, "qvel"}, {ctrl, "ctrl"}, {adj_qpos_next, "adj_qpos_next"},
                {adj_qvel_next, "adj_qvel_next"}});
  a.bits == 32 ? step_vjp_into_t<float>(pm, a, grads, contact_gradient)
               : step_vjp_into_t<double>(pm, a, grads, contact_gradient);
}

template <class T>
void tape_backward_into_t(PyTape& pt, const TensorArgs& a, const py::dict& grads,
                          int contact_gradient) {
  PyTape::Recording<T>& r = pt.recording<T>();
  if (!r.tape || !r.tape->recorded())
    throw std::logic_error("phalanx: this tape holds no rollout of this dtype; pass tape= to "
                           "phalanx.rollout first");
  const phx::Model& m = r.model->model();
  std::int64_t E = r.tape->nenv(), nstep = r.tape->nstep();
  if (a.device != pt.device())
    throw std::invalid_argument("phalanx: the loss gradients are on another device than the "
                                "tape's rollout");
  const T* aq = a[0].data ? a[0].as<T>("adj_qpos", {E, nstep, m.nq}) : nullptr;
  const T* av = a[1].data ? a[1].as<T>("adj_qvel", {E, nstep, m.nv}) : nullptr;
  GradTensors<T> g(grads, m, pt.device(), E, nstep);
  py::gil_scoped_release nogil;
  phx::Buffer<T> spare(pt.device(), size_t(E) * (m.nq + m.nv + nstep * m.nu));
  T* gq = g.state[0] ? g.state[0] : spare.data();
  T* gv = g.state[1] ? g.state[1] : spare.data() + size_t(E) * m.nq;
  T* gc = g.state[2] ? g.state[2] : spare.data() + size_t(E) * (m.nq + m.nv);
  phx::rollout_backward(*r.model, *r.tape, aq, av, gq, gv, gc, g.model, g.contact,
                        contact_gradient);
}

void tape_backward_into(PyTape& pt, py::handle adj_qpos, py::handle adj_qvel,
                        const py::dict& grads, int contact_gradient) {
  if (adj_qpos.is_none() && adj_qvel.is_none())
    throw std::invalid_argument("phalanx: give adj_qpos, adj_qvel or both");
  if (!pt.recorded())
    throw std::logic_error("phalanx: this tape holds no rollout; pass tape= to phalanx.rollout "
                           "first");
  TensorArgs a({{adj_qpos, "adj_qpos"}, {adj_qvel, "adj_qvel"}});
  // the float type is the tape's
  bool f64 = pt.dtype().is(py::module_::import("numpy").attr("float64"));
  if ((a.bits == 64) != f64)
    throw std::invalid_argument("phalanx: the loss gradients must have the tape's dtype");
  f64 ? tape_backward_into_t<double>(pt, a, grads, contact_gradient)
      : tape_backward_into_t<float>(pt, a, grads, contact_gradient);
}

// bytes of device memory one environment uses: state plus the workspace of a step
template <class T>
size_t bytes_per_env(PyModel& pm, const std::string& device_name) {
  auto dm = pm.compiled<T>(phx::parse_device(device_name));
  return phx::Data<T>(*dm, 1).bytes_per_env();
}

// A read-only numpy view of one array field of the model, kept alive by the Python Model.
// cols = 0 gives a 1-D array.
template <class V>
py::array field_view(const py::object& owner, const std::vector<V>& v, py::ssize_t cols) {
  py::ssize_t n = py::ssize_t(v.size());
  std::vector<py::ssize_t> shape =
      cols ? std::vector<py::ssize_t>{n / cols, cols} : std::vector<py::ssize_t>{n};
  py::array a(py::dtype::of<V>(), shape, v.data(), owner);
  a.attr("setflags")(py::arg("write") = false);
  return a;
}

// Model.<name>: the field as a read-only numpy array of shape (count,) or (count, width)
template <class V>
void def_array(py::class_<PyModel>& cls, const char* name, std::vector<V> phx::Model::*field,
               int width, const char* comment, const char* count) {
  py::ssize_t cols = width > 1 ? width : 0;
  std::string doc = std::string(comment) + " (" + count +
                    (width > 1 ? ", " + std::to_string(width) + ")" : ",)");
  cls.def_property_readonly(
      name,
      [field, cols](const py::object& self) {
        return field_view(self, self.cast<const PyModel&>().model().*field, cols);
      },
      doc.c_str());
}

// bind the float and double overloads of one query; numpy arrays are matched without
// conversion, so the dtype chooses the overload and no copy is made. pybind11 tries them in
// the order bound: the derivatives, mostly taken in double, bind it first (Double::kFirst),
// which saves a failed match per call (0.2 us)
enum class Double { kSecond, kFirst };
template <Double order = Double::kSecond, class F32, class F64, class... Args>
void def_query(py::module_& m, const char* name, F32 f32, F64 f64, const char* doc, Args... args) {
  auto def = [&](auto f) {
    m.def(name, f, py::arg("model"), args..., py::arg("device") = "cpu", doc);
  };
  if (order == Double::kFirst) def(f64);
  def(f32);
  if (order == Double::kSecond) def(f64);
}

// the count (one of PHX_MODEL_COUNTS) of the entities of the model array `field`
const char* array_count(std::string_view field) {
#define PHX_ARRAY_COUNT(kind, name, count, width, comment) \
  if (field == #name) return #count;
  PHX_MODEL_ARRAYS(PHX_ARRAY_COUNT)
#undef PHX_ARRAY_COUNT
  throw std::logic_error("phalanx: no model array " + std::string(field));
}

// "STATUS_nan_state" -> "STATUS_NAN_STATE"
std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

PYBIND11_MODULE(_phalanx, mod) {
  mod.doc() = "Phalanx C++ core; use the phalanx package, which checks arguments.";
  phx::bindings::register_collision(mod);
  phx::bindings::register_planner(mod);

  // status bits (PHX_STATUS_BITS): STATUS_<NAME>, STATUS_STOP_MASK, and STATUS_BITS, the
  // (name, bit) pairs in the order they are reported; joint and geom type names by number
  py::list status_bits;
#define PHX_EXPORT_STATUS(Name, name, bit, stops)                        \
  mod.attr(upper("STATUS_" #name).c_str()) = unsigned(phx::kStatus##Name); \
  status_bits.append(py::make_tuple(#name, unsigned(phx::kStatus##Name)));
  PHX_STATUS_BITS(PHX_EXPORT_STATUS)
#undef PHX_EXPORT_STATUS
  mod.attr("STATUS_BITS") = py::tuple(status_bits);
  mod.attr("STATUS_STOP_MASK") = phx::kStatusStopMask;
  mod.attr("JOINT_TYPES") = py::cast(std::vector<std::string>(std::begin(phx::kJointTypeNames),
                                                              std::end(phx::kJointTypeNames)));
  mod.attr("GEOM_TYPES") = py::cast(std::vector<std::string>(std::begin(phx::kGeomTypeNames),
                                                             std::end(phx::kGeomTypeNames)));
  mod.attr("GRAD_COMPLEMENTARITY_AWARE") = int(phx::kGradComplementarityAware);
  mod.attr("GRAD_BOUNCE_CORRECTION") = int(phx::kGradBounceCorrection);
  mod.attr("COUNT_CONTACTS") = int(phx::kCountContacts);
  mod.attr("COUNT_ROWS") = int(phx::kCountRows);
  mod.attr("COUNT_WARM_ROWS") = int(phx::kCountWarmRows);
  mod.attr("COUNT_SET_HIT") = int(phx::kCountSetHit);
  mod.attr("COUNT_OVERFLOW") = int(phx::kCountOverflow);
  mod.attr("NUM_COUNTS") = int(phx::kNumCounts);
  py::list params;
  for (int k = 0; k < phx::kNumParams; ++k)
    params.append(py::make_tuple(phx::kParamNames[k], array_count(phx::kParamNames[k]),
                                 phx::param_width(k)));
  // (name, the count of its entities, numbers per entity) in Param order
  mod.attr("PARAMETERS") = params;

  mod.def("set_num_threads", &phx::set_num_threads, py::arg("n"),
          "Threads of the CPU backend's later calls (n >= 1). Phalanx keeps this count itself, "
          "so torch or another library changing OpenMP's thread count does not change it; "
          "OMP_NUM_THREADS sets the initial value.");
  mod.def("num_threads", &phx::num_threads, "Threads the CPU backend's next call uses.");
  mod.def(
      "cuda_available", [] { return phx::cuda_available(); },
      "True when the CUDA backend was built and a GPU is visible.");

  py::class_<PyModel> cls(mod, "Model",
                          "A mechanism loaded from MJCF or URDF: MuJoCo-style flat arrays (read "
                          "only) and the options timestep and gravity (read and write).");

  mod.def(
      "load_model",
      [](const std::string& path) {
        phx::Model model = phx::load_model(path);
        model.validate();
        return PyModel(std::move(model));
      },
      py::arg("path"), "Load an MJCF (.xml, .mjcf) or URDF (.urdf) file.");

  // counts (PHX_MODEL_COUNTS)
#define PHX_DEF_COUNT(name, comment) \
  cls.def_property_readonly(         \
      #name, [](const PyModel& pm) { return pm.model().name; }, comment);
  PHX_MODEL_COUNTS(PHX_DEF_COUNT)
#undef PHX_DEF_COUNT

  // names and options
  cls.def_property_readonly("name", [](const PyModel& pm) { return pm.model().name; })
      .def_property_readonly("source", [](const PyModel& pm) { return pm.model().source; })
      .def_property(
          "timestep", [](const PyModel& pm) { return pm.model().opt.timestep; },
          &PyModel::set_timestep, "integration step (s)")
      .def_property(
          "gravity",
          [](const PyModel& pm) {
            const auto& g = pm.model().opt.gravity;
            py::array_t<double> a(3, g.data());
            a.attr("setflags")(py::arg("write") = false);
            return a;
          },
          &PyModel::set_gravity, "gravitational acceleration (m/s^2), a copy; assign to change")
      .def_property(
          "contact", [](const PyModel& pm) { return pm.model().opt.contact; },
          [](PyModel& pm, bool on) { pm.set_option(&phx::Options::contact, on); },
          "detect and resolve contacts (MuJoCo's mjDSBL_CONTACT when False)")
      .def_property(
          "limit", [](const PyModel& pm) { return pm.model().opt.limit; },
          [](PyModel& pm, bool on) { pm.set_option(&phx::Options::limit, on); },
          "enforce joint limits (MuJoCo's mjDSBL_LIMIT when False)")
      .def_property(
          "lcp_solver",
          [](const PyModel& pm) {
            static const char* names[] = {"pgs", "pgs_stabilized", "dantzig"};
            return std::string(names[pm.model().opt.lcp_solver]);
          },
          [](PyModel& pm, const std::string& name) {
            int k = name == "pgs" ? 0 : name == "pgs_stabilized" ? 1 : name == "dantzig" ? 2 : -1;
            if (k < 0) {
              throw std::invalid_argument("phalanx: lcp_solver must be 'pgs', 'pgs_stabilized' "
                                          "or 'dantzig', got '" + name + "'");
            }
            pm.set_option(&phx::Options::lcp_solver, k);
          },
          "LCP solver: 'pgs' (projected Gauss-Seidel), 'pgs_stabilized' (then Nimble's exact "
          "re-solve on the clamping set, warm-started from the previous set) or 'dantzig'")
      .def_property(
          "lcp_tolerance", [](const PyModel& pm) { return pm.model().opt.lcp_tolerance; },
          [](PyModel& pm, double tol) {
            if (!(tol > 0)) throw std::invalid_argument("phalanx: lcp_tolerance must be > 0");
            pm.set_option(&phx::Options::lcp_tolerance, tol);
          },
          "velocity tolerance (m/s) of row classification and of accepting exact re-solves")
      .def_property(
          "lcp_residual_limit",
          [](const PyModel& pm) { return pm.model().opt.lcp_residual_limit; },
          [](PyModel& pm, double tol) {
            if (!(tol > 0)) throw std::invalid_argument("phalanx: lcp_residual_limit must be > 0");
            pm.set_option(&phx::Options::lcp_residual_limit, tol);
          },
          "LCP residual (m/s) above which a step sets STATUS_LCP_NOT_CONVERGED")
      .def_property(
          "nconmax", [](const PyModel& pm) { return pm.model().nconmax; },
          [](PyModel& pm, int n) {
            if (n < 0) throw std::invalid_argument("phalanx: nconmax must be >= 0");
            pm.set_nconmax(n);
          },
          "contacts each environment can hold; more set STATUS_CONTACT_OVERFLOW")
      .def_property(
          "lcp_iterations", [](const PyModel& pm) { return pm.model().opt.lcp_iterations; },
          [](PyModel& pm, int n) {
            if (n < 1) throw std::invalid_argument("phalanx: lcp_iterations must be >= 1");
            pm.set_option(&phx::Options::lcp_iterations, n);
          },
          "projected Gauss-Seidel sweeps per step")
      .def("set_parameter", &PyModel::set_parameter, py::arg("name"), py::arg("values"),
           "Replace a model parameter (one of phalanx.PARAMETERS). values of the field's shape "
           "are shared by all "
           "environments; with a leading dimension nbatch they are per environment: "
           "environment e uses values[e % nbatch]. Checked like a loaded model (finite; masses, "
           "inertias and friction >= 0; restitution in [0, 1]; used sizes > 0); compiled "
           "copies are rebuilt on next use.")
      .def("parameter", &PyModel::parameter, py::arg("name"),
           "A copy of a model parameter: the field's shape when shared by all environments, "
           "(nbatch, *shape) when set per environment.")
      .def_property_readonly("body_names", [](const PyModel& pm) { return pm.model().body_names; })
      .def_property_readonly("joint_names", [](const PyModel& pm) { return pm.model().jnt_names; })
      .def_property_readonly("geom_names", [](const PyModel& pm) { return pm.model().geom_names; })
      .def_property_readonly("actuator_names",
                             [](const PyModel& pm) { return pm.model().actuator_names; })
      .def_property_readonly(
          "ignored", [](const PyModel& pm) { return pm.model().ignored; },
          "what the loader accepted but did not use, one entry per kind")
      .def(
          "body_id", [](const PyModel& pm, const std::string& n) { return pm.model().body_id(n); },
          py::arg("name"), "id of the named body, -1 when absent")
      .def(
          "joint_id",
          [](const PyModel& pm, const std::string& n) { return pm.model().joint_id(n); },
          py::arg("name"), "id of the named joint, -1 when absent")
      .def(
          "geom_id", [](const PyModel& pm, const std::string& n) { return pm.model().geom_id(n); },
          py::arg("name"), "id of the named geom, -1 when absent")
      .def(
          "actuator_id",
          [](const PyModel& pm, const std::string& n) { return pm.model().actuator_id(n); },
          py::arg("name"), "id of the named actuator, -1 when absent")
      .def("__repr__", [](const PyModel& pm) {
        const phx::Model& m = pm.model();
        std::ostringstream s;
        s << "<phalanx.Model '" << m.name << "' nq=" << m.nq << " nv=" << m.nv << " nu=" << m.nu
          << " nbody=" << m.nbody << " njnt=" << m.njnt << " ngeom=" << m.ngeom << ">";
        return s.str();
      });

  // arrays, with the shapes of host/model.h
  using M = phx::Model;
#define PHX_DEF_ARRAY(kind, name, count, width, comment) \
  def_array(cls, #name, &M::name, width, comment, #count);
  PHX_MODEL_ARRAYS(PHX_DEF_ARRAY)
#undef PHX_DEF_ARRAY

  // functional queries and stepping, one overload per scalar type
  def_query(mod, "mass_matrix", &mass_matrix<float>, &mass_matrix<double>,
            "M(q) with armature -> (E, nv, nv)", py::arg("qpos").noconvert());
  def_query(mod, "bias_forces", &bias_forces<float>, &bias_forces<double>, "c(q, qvel) -> (E, nv)",
            py::arg("qpos").noconvert(), py::arg("qvel").noconvert());
  def_query(mod, "kinematics", &kinematics<float>, &kinematics<double>,
            "-> (xpos (E, nbody, 3), xquat (E, nbody, 4), com (E, 3), com_vel (E, 3) or None)",
            py::arg("qpos").noconvert(), py::arg("qvel").noconvert() = py::none());
  def_query(mod, "forward_dynamics", &forward_dynamics<float>, &forward_dynamics<double>,
            "qacc -> (E, nv)", py::arg("qpos").noconvert(), py::arg("qvel").noconvert(),
            py::arg("ctrl").noconvert());
  def_query(mod, "inverse_dynamics", &inverse_dynamics<float>, &inverse_dynamics<double>,
            "qfrc_inverse -> (E, nv)", py::arg("qpos").noconvert(), py::arg("qvel").noconvert(),
            py::arg("qacc").noconvert());
  def_query(mod, "step", &step<float>, &step<double>, "-> (qpos, qvel, status)",
            py::arg("qpos").noconvert(), py::arg("qvel").noconvert(), py::arg("ctrl").noconvert(),
            py::arg("nstep") = 1, py::arg("qfrc").noconvert() = py::none());
  def_query(mod, "rollout", &rollout<float>, &rollout<double>,
            "-> (qpos (E, T, nq), qvel (E, T, nv), status (E,))", py::arg("qpos").noconvert(),
            py::arg("qvel").noconvert(), py::arg("ctrl").noconvert(),
            py::arg("qpos_out").noconvert() = py::none(),
            py::arg("qvel_out").noconvert() = py::none(),
            py::arg("counts").noconvert() = py::none(), py::arg("tape") = nullptr);
  py::class_<PyTape>(mod, "Tape", "a rollout's checkpoints for its backward pass")
      .def(py::init<int, std::int64_t>(), py::arg("checkpoint_every") = 0,
           py::arg("memory_budget") = 0)
      .def_property_readonly("recorded", &PyTape::recorded)
      .def_property_readonly("checkpoint_every", &PyTape::every)
      .def_property_readonly("nstep", &PyTape::nstep)
      .def_property_readonly("nenv", &PyTape::nenv)
      .def_property_readonly("nbytes", &PyTape::nbytes)
      .def_property_readonly("peak", &PyTape::peak,
                             "(contacts, rows): the most of any step of the recorded rollout, "
                             "the room of each step the backward pass keeps while it recomputes "
                             "a segment")
      .def_property_readonly("dtype", &PyTape::dtype)
      .def("_backward_float32", &tape_backward<float>, py::arg("adj_qpos").noconvert(),
           py::arg("adj_qvel").noconvert(), py::arg("contact_gradient"))
      .def("_backward_float64", &tape_backward<double>, py::arg("adj_qpos").noconvert(),
           py::arg("adj_qvel").noconvert(), py::arg("contact_gradient"));
  def_query<Double::kFirst>(
      mod, "step_jacobian", &step_jacobian<float>, &step_jacobian<double>,
      "-> (jac (E, nq + nv, nq + 2 nv + nu), jac_param (E, nq + nv, nparam) or None)",
      py::arg("qpos").noconvert(), py::arg("qvel").noconvert(), py::arg("ctrl").noconvert(),
      py::arg("parameters"), py::arg("contact_gradient"), py::arg("qfrc").noconvert() = py::none());
  mod.def("jacobian_blocks", &jacobian_blocks<double>, py::arg("jac").noconvert(), py::arg("nq"),
          py::arg("nv"), py::arg("nu"),
          "the named blocks of a one-step Jacobian (E, nq + nv, nq + 2 nv + nu), as views");
  def_query<Double::kFirst>(
      mod, "step_vjp", &step_vjp<float>, &step_vjp<double>,
      "vector-Jacobian product of one step -> dict of adjoints", py::arg("qpos").noconvert(),
      py::arg("qvel").noconvert(), py::arg("ctrl").noconvert(),
      py::arg("adj_qpos_next").noconvert(), py::arg("adj_qvel_next").noconvert(),
      py::arg("contact_gradient"), py::arg("qfrc").noconvert() = py::none());
  // tensors through DLPack, on their own device, no host round trip (phalanx.torch uses these)
  mod.def("step_into", &step_into, py::arg("model"), py::arg("qpos"), py::arg("qvel"),
          py::arg("ctrl"), py::arg("qpos_out"), py::arg("qvel_out"), py::arg("status_out"),
          py::arg("nstep") = 1, py::arg("warm_start") = nullptr,
          "step on DLPack tensors (float32/64; status_out int32), outputs overwritten; with a "
          "WarmStart the contact rows persist across calls");
  mod.def("rollout_into", &rollout_into, py::arg("model"), py::arg("qpos"), py::arg("qvel"),
          py::arg("ctrl"), py::arg("qpos_out"), py::arg("qvel_out"), py::arg("status_out"),
          py::arg("tape") = nullptr, py::arg("warm_start") = nullptr,
          "rollout on DLPack tensors, outputs overwritten");
  py::class_<PyWarmStart>(mod, "WarmStart",
                          "contact rows kept across step_into / rollout_into calls of one batch")
      .def(py::init<>())
      .def("cold_start", &PyWarmStart::cold_start, py::arg("env_ids"),
           "forget the rows of these environments (their next step starts cold)")
      .def("rows", &PyWarmStart::rows, "constraint rows each environment holds (nefc)");
  mod.def("step_vjp_into", &step_vjp_into, py::arg("model"), py::arg("qpos"), py::arg("qvel"),
          py::arg("ctrl"), py::arg("adj_qpos_next"), py::arg("adj_qvel_next"), py::arg("grads"),
          py::arg("contact_gradient"),
          "step_vjp on DLPack tensors into the gradient tensors of grads (name -> tensor)");
  mod.def("tape_backward_into", &tape_backward_into, py::arg("tape"), py::arg("adj_qpos"),
          py::arg("adj_qvel"), py::arg("grads"), py::arg("contact_gradient"),
          "Tape.backward on DLPack tensors into the gradient tensors of grads");
  mod.def("bytes_per_env_float32", &bytes_per_env<float>, py::arg("model"),
          py::arg("device") = "cpu");
  mod.def("bytes_per_env_float64", &bytes_per_env<double>, py::arg("model"),
          py::arg("device") = "cpu");
}
