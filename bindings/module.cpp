// phalanx._phalanx: the pybind11 extension, a thin layer over host/api.h.
//
// It owns a loaded Model together with its compiled DeviceModels. Each operation (the functional
// queries, step, rollout, step_vjp, the Jacobians, Tape.backward) has one implementation over an
// ArgTable (bindings/arrays.h), which both numpy callers (phalanx) and DLPack callers (the _into
// functions of phalanx.torch, phalanx.jax and phalanx.Simulator) fill; the table checks shapes
// and dtypes and gives the messages users see. On the CPU the kernels read and write the
// callers' arrays in place; numpy arrays on CUDA go through device buffers. C++ exceptions reach
// Python through pybind11's translation: std::invalid_argument -> ValueError,
// std::runtime_error and std::logic_error -> RuntimeError.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <cctype>
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

#include "bindings/arrays.h"
#include "bindings/py_model.h"
#include "bindings/submodules.h"
#include "host/api.h"
#include "host/cpu_backend.h"
#include "host/lane.h"
#include "phalanx/lcp.h"

namespace py = pybind11;

#if PHX_HAVE_MUJOCO
namespace phx::bindings {
// phalanx.from_mujoco (bindings/mujoco.cpp, built when cmake/mujoco.cmake finds MuJoCo)
void register_mujoco(py::module_& mod);
}  // namespace phx::bindings
#endif

namespace {

using phx::Device;
using phx::bindings::ArgTable;
using phx::bindings::CArray;
using phx::bindings::Dims;
using phx::bindings::Output;
using phx::bindings::PyModel;
using phx::bindings::Source;

static_assert(sizeof(unsigned) == sizeof(std::uint32_t), "status words are returned as uint32");

// "STATUS_nan_state" -> "STATUS_NAN_STATE"
std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// "'a', 'b' or 'c'"
template <size_t N>
std::string quoted_list(const char* const (&names)[N]) {
  std::string s;
  for (size_t i = 0; i < N; ++i)
    s += (i == 0 ? "'" : i + 1 == N ? " or '" : ", '") + std::string(names[i]) + "'";
  return s;
}

// the index of `name` in names, or invalid_argument naming the option and the choices
template <size_t N>
int named_choice(const char* const (&names)[N], const std::string& name, const char* option) {
  auto it = std::find(std::begin(names), std::end(names), name);
  if (it == std::end(names))
    throw std::invalid_argument(std::string("phalanx: ") + option + " must be " +
                                quoted_list(names) + ", got '" + name + "'");
  return int(it - std::begin(names));
}

// the names of a core enum, by number
template <size_t N>
py::tuple enum_names(const char* const (&names)[N]) {
  return py::cast(std::vector<std::string>(std::begin(names), std::end(names)));
}

// the count (one of PHX_MODEL_COUNTS) of the entities of the model array `field`
const char* array_count(std::string_view field) {
#define PHX_ARRAY_COUNT(kind, name, count, width, comment) \
  if (field == #name) return #count;
  PHX_MODEL_ARRAYS(PHX_ARRAY_COUNT)
#undef PHX_ARRAY_COUNT
  throw std::logic_error("phalanx: no model array " + std::string(field));
}

// the count of the entities of parameter k ("nbody"), from the array table once
const char* param_count(int k) {
  static const auto counts = [] {
    std::array<const char*, phx::kNumBatched> c{};
    for (int i = 0; i < phx::kNumBatched; ++i) c[size_t(i)] = array_count(phx::kParamNames[i]);
    return c;
  }();
  return counts[size_t(k)];
}

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
  int bits() const { return f64_.tape ? 64 : 32; }

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
py::dict jacobian_blocks(const py::array& jac, int nq, int nv, int nu) {
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
      const T* p = static_cast<const T*>(jac.data()) + Py_intptr_t(row0[r]) * cols + col0[c];
      const Py_intptr_t dims[3] = {jac.shape(0), nrow[r], ncol[c]};
      if (PyDict_SetItem(out.ptr(), keys[r][c], array_view(jac, p, 3, dims, strides).ptr()) != 0)
        throw py::error_already_set();
    }
  }
  return out;
}

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

  // The contact rows and impulses of every environment as a checkpoint: name ->
  // (nenv, size) array per PHX_CONTACT_ARRAYS entry, in the scalar type of the last call;
  // empty before the first call. restore() puts it back bit for bit.
  py::dict state() const {
    py::dict out;
    cvisit([&](const auto& d) {
      for_each_array(d.contact, [&](const char* name, const auto& b) {
        using K = typename std::decay_t<decltype(b)>::value_type;
        py::array_t<K> a({py::ssize_t(d.nenv()), py::ssize_t(b.size() / size_t(d.nenv()))});
        if (b.size()) b.download(a.mutable_data(), b.size());
        out[name] = a;
      });
    });
    return out;
  }

  // Put back a state() of the same model (compiled for `device`), batch size and scalar type:
  // the next call warm-starts from it as from the call that state() followed.
  void restore(PyModel& pm, const py::dict& state, const std::string& device) {
    if (state.empty()) {  // a checkpoint taken before any call: nothing held yet
      f32_.reset();
      f64_.reset();
      return;
    }
    py::array force = state["efc_force"];
    if (force.dtype().is(py::dtype::of<float>())) {
      restore_t<float>(pm, state, device);
    } else {
      restore_t<double>(pm, state, device);
    }
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

  // f(name, buffer) for every contact array
  template <class B, class F>
  static void for_each_array(B& contact, F f) {
#define PHX_CONTACT_VISIT(kind, name, size, comment) f(#name, contact.name);
    PHX_CONTACT_ARRAYS(PHX_CONTACT_VISIT)
#undef PHX_CONTACT_VISIT
  }

  template <class T>
  void restore_t(PyModel& pm, const py::dict& state, const std::string& device) {
    auto dm = pm.compiled<T>(phx::parse_device(device));
    py::array nefc = state["nefc"];
    phx::Data<T>& d = data(*dm, int(nefc.shape(0)));
    for_each_array(d.contact, [&](const char* name, auto& b) {
      using K = typename std::decay_t<decltype(b)>::value_type;
      if (!state.contains(name))
        throw std::invalid_argument(std::string("phalanx: WarmStart.restore: no '") + name + "'");
      auto a = py::array_t<K, py::array::c_style>::ensure(state[name]);
      if (!a || size_t(a.size()) != b.size() || a.ndim() != 2 || a.shape(0) != d.nenv())
        throw std::invalid_argument(std::string("phalanx: WarmStart.restore: '") + name +
                                    "' does not fit this model and batch (" +
                                    std::to_string(b.size()) + " entries expected)");
      if (b.size()) b.upload(a.data(), b.size());
    });
  }

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

// ---- the operations, one implementation each: an ArgTable holds the call's arrays, numpy
// arrays (phalanx) or DLPack tensors (phalanx.torch, phalanx.jax, phalanx.Simulator) ----

// copy n numbers on the call's device
template <class T>
void copy_on(Device d, T* dst, const T* src, size_t n) {
  phx::detail::device_copy(d, dst, d, src, n * sizeof(T));
}

// a call's table with its scalar type and E from qpos (E, nq): numpy arrays on `device`
// (dtype None: that of qpos; else converted to dtype) or DLPack tensors on their own device
ArgTable call_table(const PyModel& pm, Source source, py::handle qpos, py::handle dtype,
                    const std::string& device) {
  ArgTable a(source, source == Source::kNumpy ? phx::parse_device(device) : Device::kCpu);
  a.scalar_from("qpos", qpos, dtype, {{"E", -1}, {"nq", pm.model().nq}});
  return a;
}

// M(q) with armature -> (E, nv, nv)
template <class T>
py::object mass_matrix_t(PyModel& pm, ArgTable& a, py::handle qpos) {
  auto dm = pm.compiled<T>(a.device());
  const phx::Model& m = dm->model();
  const std::int64_t E = a.batch();
  const T* q = a.in<T>("qpos", qpos, {{"E", E}, {"nq", m.nq}});
  Output<T> M = a.out<T>("M", py::none(), {{"E", E}, {"nv", m.nv}, {"nv", m.nv}});
  a.run([&] { phx::mass_matrix(*dm, int(E), q, M.p); });
  return M.array;
}

// The queries of (qpos, qvel, x) -> (E, nv): c(q, qvel) (x absent), qacc without constraints
// and the actuators' generalized force (x = ctrl (E, nu)), and the generalized force producing
// qacc (x = qacc (E, nv), MuJoCo's qfrc_inverse)
enum class Query { kBiasForces, kForwardDynamics, kActuatorForces, kInverseDynamics };

template <class T>
py::object query_t(PyModel& pm, ArgTable& a, Query query, py::handle qpos, py::handle qvel,
                   py::handle x, py::handle act = py::none(), py::handle qfrc = py::none()) {
  auto dm = pm.compiled<T>(a.device());
  const phx::Model& m = dm->model();
  const std::int64_t E = a.batch();
  const T* q = a.in<T>("qpos", qpos, {{"E", E}, {"nq", m.nq}});
  const T* v = a.in<T>("qvel", qvel, {{"E", E}, {"nv", m.nv}});
  const bool takes_ctrl = query == Query::kForwardDynamics || query == Query::kActuatorForces;
  const T* third = takes_ctrl                         ? a.in<T>("ctrl", x, {{"E", E}, {"nu", m.nu}})
                   : query == Query::kInverseDynamics ? a.in<T>("qacc", x, {{"E", E}, {"nv", m.nv}})
                                                      : nullptr;
  const T* ac = a.optional<T>("act", act, {{"E", E}, {"na", m.na}});
  const T* applied = a.optional<T>("qfrc", qfrc, {{"E", E}, {"nv", m.nv}});
  Output<T> out = a.out<T>("out", py::none(), {{"E", E}, {"nv", m.nv}});
  a.run([&] {
    if (query == Query::kBiasForces) phx::bias_forces(*dm, int(E), q, v, out.p);
    if (query == Query::kForwardDynamics)
      phx::forward_dynamics(*dm, int(E), q, v, third, out.p, ac, applied);
    if (query == Query::kActuatorForces) phx::actuator_forces(*dm, int(E), q, v, third, out.p, ac);
    if (query == Query::kInverseDynamics) phx::inverse_dynamics(*dm, int(E), q, v, third, out.p);
  });
  return out.array;
}

// body frames and the centre of mass -> (xpos (E, nbody, 3), xquat (E, nbody, 4), com (E, 3),
// com_vel (E, 3) or None without qvel, site_xpos (E, nsite, 3), site_xmat (E, nsite, 3, 3),
// ten_length (E, ntendon), xmat (E, nbody, 3, 3))
template <class T>
py::tuple kinematics_t(PyModel& pm, ArgTable& a, py::handle qpos, py::handle qvel) {
  auto dm = pm.compiled<T>(a.device());
  const phx::Model& m = dm->model();
  const std::int64_t E = a.batch(), nb = m.nbody;
  const T* q = a.in<T>("qpos", qpos, {{"E", E}, {"nq", m.nq}});
  const T* v = a.optional<T>("qvel", qvel, {{"E", E}, {"nv", m.nv}});
  Output<T> xpos = a.out<T>("xpos", py::none(), {{"E", E}, {"nbody", nb}, {"3", 3}});
  Output<T> xquat = a.out<T>("xquat", py::none(), {{"E", E}, {"nbody", nb}, {"4", 4}});
  Output<T> xmat = a.out<T>("xmat", py::none(), {{"E", E}, {"nbody", nb}, {"3", 3}, {"3", 3}});
  Output<T> com = a.out<T>("com", py::none(), {{"E", E}, {"3", 3}});
  Output<T> com_vel = a.out<T>("com_vel", py::none(), {{"E", v ? E : 0}, {"3", 3}});
  const std::int64_t ns = m.nsite;
  Output<T> site_xpos = a.out<T>("site_xpos", py::none(), {{"E", E}, {"nsite", ns}, {"3", 3}});
  Output<T> site_xmat =
      a.out<T>("site_xmat", py::none(), {{"E", E}, {"nsite", ns}, {"3", 3}, {"3", 3}});
  const std::int64_t nt = m.ntendon;
  Output<T> ten_length = a.out<T>("ten_length", py::none(), {{"E", E}, {"ntendon", nt}});
  a.run([&] {
    phx::kinematics(*dm, int(E), q, v, xpos.p, xquat.p, com.p, v ? com_vel.p : nullptr,
                    ns > 0 ? site_xpos.p : nullptr, ns > 0 ? site_xmat.p : nullptr,
                    nt > 0 ? ten_length.p : nullptr, xmat.p);
  });
  return py::make_tuple(xpos.array, xquat.array, com.array, v ? com_vel.array : py::none(),
                        site_xpos.array, site_xmat.array, ten_length.array, xmat.array);
}

// vector-Jacobian product of kinematics_t: the adjoints of xpos (E, nbody, 3), xmat (E, nbody, 3,
// 3), site_xpos (E, nsite, 3), site_xmat (E, nsite, 3, 3), com (E, 3) and com_vel (E, 3), each
// None for zero -> (adj_qpos (E, nq), adj_qvel (E, nv) or None without qvel)
template <class T>
py::tuple kinematics_vjp_t(PyModel& pm, ArgTable& a, py::handle qpos, py::handle qvel,
                           py::handle xpos, py::handle xmat, py::handle site_xpos,
                           py::handle site_xmat, py::handle com, py::handle com_vel) {
  auto dm = pm.compiled<T>(a.device());
  const phx::Model& m = dm->model();
  const std::int64_t E = a.batch(), nb = m.nbody, ns = m.nsite;
  const T* q = a.in<T>("qpos", qpos, {{"E", E}, {"nq", m.nq}});
  const T* v = a.optional<T>("qvel", qvel, {{"E", E}, {"nv", m.nv}});
  const T* gx = a.optional<T>("xpos", xpos, {{"E", E}, {"nbody", nb}, {"3", 3}});
  const T* gr = a.optional<T>("xmat", xmat, {{"E", E}, {"nbody", nb}, {"3", 3}, {"3", 3}});
  const T* gs = a.optional<T>("site_xpos", site_xpos, {{"E", E}, {"nsite", ns}, {"3", 3}});
  const T* gsr =
      a.optional<T>("site_xmat", site_xmat, {{"E", E}, {"nsite", ns}, {"3", 3}, {"3", 3}});
  const T* gc = a.optional<T>("com", com, {{"E", E}, {"3", 3}});
  const T* gcv = a.optional<T>("com_vel", com_vel, {{"E", E}, {"3", 3}});
  if (gcv && !v)
    throw std::invalid_argument("phalanx: kinematics_vjp: a com_vel adjoint needs qvel");
  Output<T> adj_q = a.out<T>("adj_qpos", py::none(), {{"E", E}, {"nq", m.nq}});
  Output<T> adj_v = a.out<T>("adj_qvel", py::none(), {{"E", v ? E : 0}, {"nv", m.nv}});
  if (E > 0)
    a.run([&] {
      phx::kinematics_vjp(*dm, int(E), q, v, gx, gr, gs, gsr, gc, gcv, adj_q.p,
                          v ? adj_v.p : nullptr);
    });
  return py::make_tuple(adj_q.array, v ? adj_v.array : py::none());
}

// per-body quantities in MuJoCo's convention -> (subtree_com (E, nbody, 3), cinert (E, nbody,
// 10), cvel (E, nbody, 6) or None without qvel, cfrc_ext (E, nbody, 6) or None without contacts,
// cacc and cfrc_int (E, nbody, 6 each) or None without qvel and qacc)
template <class T>
py::tuple body_report_t(PyModel& pm, ArgTable& a, py::handle qpos, py::handle qvel, py::handle ncon,
                        py::handle con_pos, py::handle con_frame, py::handle con_force,
                        py::handle con_geom, py::handle qacc) {
  auto dm = pm.compiled<T>(a.device());
  const phx::Model& m = dm->model();
  const std::int64_t E = a.batch(), nb = m.nbody, nc = m.nconmax;
  const T* q = a.in<T>("qpos", qpos, {{"E", E}, {"nq", m.nq}});
  const T* v = a.optional<T>("qvel", qvel, {{"E", E}, {"nv", m.nv}});
  const bool contacts = !ncon.is_none();
  const int* n = a.optional<std::int32_t>("count", ncon, {{"E", E}});
  const T* cp = contacts ? a.in<T>("pos", con_pos, {{"E", E}, {"nconmax", nc}, {"3", 3}}) : nullptr;
  const T* cf = contacts
                    ? a.in<T>("frame", con_frame, {{"E", E}, {"nconmax", nc}, {"3", 3}, {"3", 3}})
                    : nullptr;
  const T* cF =
      contacts ? a.in<T>("force", con_force, {{"E", E}, {"nconmax", nc}, {"3", 3}}) : nullptr;
  const int* cg = contacts
                      ? a.in<std::int32_t>("geom", con_geom, {{"E", E}, {"nconmax", nc}, {"2", 2}})
                      : nullptr;
  Output<T> com = a.out<T>("subtree_com", py::none(), {{"E", E}, {"nbody", nb}, {"3", 3}});
  Output<T> cinert = a.out<T>("cinert", py::none(), {{"E", E}, {"nbody", nb}, {"10", 10}});
  Output<T> cvel = a.out<T>("cvel", py::none(), {{"E", v ? E : 0}, {"nbody", nb}, {"6", 6}});
  Output<T> cfrc =
      a.out<T>("cfrc_ext", py::none(), {{"E", contacts ? E : 0}, {"nbody", nb}, {"6", 6}});
  if (!qacc.is_none() && !v) throw std::invalid_argument("phalanx: body_report: qacc needs qvel");
  const T* acc = a.optional<T>("qacc", qacc, {{"E", E}, {"nv", m.nv}});
  Output<T> cacc = a.out<T>("cacc", py::none(), {{"E", acc ? E : 0}, {"nbody", nb}, {"6", 6}});
  Output<T> cfrc_int =
      a.out<T>("cfrc_int", py::none(), {{"E", acc ? E : 0}, {"nbody", nb}, {"6", 6}});
  a.run([&] {
    phx::body_report(*dm, int(E), q, v, n, cp, cf, cF, cg, com.p, cinert.p, v ? cvel.p : nullptr,
                     contacts ? cfrc.p : nullptr, acc, acc ? cacc.p : nullptr,
                     acc ? cfrc_int.p : nullptr);
  });
  return py::make_tuple(com.array, cinert.array, v ? cvel.array : py::none(),
                        contacts ? cfrc.array : py::none(), acc ? cacc.array : py::none(),
                        acc ? cfrc_int.array : py::none());
}

// the contacts at the states without a step -> (count (E,), overflow (E,), pos (E, nconmax, 3),
// frame (E, nconmax, 3, 3), dist (E, nconmax), geom (E, nconmax, 2))
template <class T>
py::tuple detect_t(PyModel& pm, ArgTable& a, py::handle qpos) {
  auto dm = pm.compiled<T>(a.device());
  const phx::Model& m = dm->model();
  const std::int64_t E = a.batch(), nc = m.nconmax;
  const T* q = a.in<T>("qpos", qpos, {{"E", E}, {"nq", m.nq}});
  Output<std::int32_t> count = a.out<std::int32_t>("count", py::none(), {{"E", E}});
  Output<std::int32_t> overflow = a.out<std::int32_t>("overflow", py::none(), {{"E", E}});
  Output<T> pos = a.out<T>("pos", py::none(), {{"E", E}, {"nconmax", nc}, {"3", 3}});
  Output<T> frame = a.out<T>("frame", py::none(), {{"E", E}, {"nconmax", nc}, {"3", 3}, {"3", 3}});
  Output<T> dist = a.out<T>("dist", py::none(), {{"E", E}, {"nconmax", nc}});
  Output<std::int32_t> geom =
      a.out<std::int32_t>("geom", py::none(), {{"E", E}, {"nconmax", nc}, {"2", 2}});
  a.run([&] { phx::detect(*dm, int(E), q, count.p, overflow.p, pos.p, frame.p, dist.p, geom.p); });
  return py::make_tuple(count.array, overflow.array, pos.array, frame.array, dist.array,
                        geom.array);
}

// MuJoCo's rangefinder sensors on the sites `sites` -> (dist (E, nsite), -1 where a ray meets
// nothing; geom (E, nsite) int32, the geom it meets, -1 where none)
template <class T>
py::tuple rangefinders_t(PyModel& pm, ArgTable& a, py::handle qpos, const std::vector<int>& sites) {
  auto dm = pm.compiled<T>(a.device());
  const phx::Model& m = dm->model();
  for (int s : sites)
    if (s < 0 || s >= m.nsite)
      throw std::invalid_argument("phalanx: rangefinders: site " + std::to_string(s) +
                                  " is outside [0, nsite = " + std::to_string(m.nsite) + ")");
  const std::int64_t E = a.batch(), n = std::int64_t(sites.size());
  const T* q = a.in<T>("qpos", qpos, {{"E", E}, {"nq", m.nq}});
  py::array_t<std::int32_t> ids(n, sites.data());
  const int* site = a.in<std::int32_t>("sites", ids, {{"nsite", n}});
  Output<T> dist = a.out<T>("dist", py::none(), {{"E", E}, {"nsite", n}});
  Output<std::int32_t> geom = a.out<std::int32_t>("geom", py::none(), {{"E", E}, {"nsite", n}});
  a.run([&] { phx::rangefinders(*dm, int(E), q, int(n), site, dist.p, geom.p); });
  return py::make_tuple(dist.array, geom.array);
}

// the status words (E,): new uint32 (numpy) or the caller's int32
Output<unsigned> status_output(ArgTable& a, py::handle given, std::int64_t E) {
  if (given.is_none()) return a.out<std::uint32_t>("status_out", given, {{"E", E}});
  Output<std::int32_t> s = a.out<std::int32_t>("status_out", given, {{"E", E}});
  return {reinterpret_cast<unsigned*>(s.p), s.array};
}

// The arrays of step and rollout besides the state: outputs (None: new numpy arrays) and what
// carries over between calls
struct StepIO {
  py::handle qpos_out = py::none(), qvel_out = py::none(), status_out = py::none();
  PyWarmStart* warm_start = nullptr;
  // the activations after a step (E, na), or after each step of a rollout (E, T, na); and, for
  // a rollout, the final ones (E, na), which the DLPack entry points write back into act
  py::handle act_out = py::none(), act_final = py::none();
  // a step's: also return the last step's constraint force (E, nv)
  bool constraint_force = false;
};

// the compiled model of a call and its state inputs on its device: qpos (E, nq), qvel (E, nv),
// ctrl (E, nu) for one step or (E, T, nu) for a rollout (T its second dimension), and the added
// generalized force qfrc (E, nv), null when not given
template <class T>
struct StepInputs {
  std::shared_ptr<const phx::DeviceModel<T>> dm;
  const phx::Model& m;
  const std::int64_t E;
  const T *q, *v, *u, *f, *act;
  StepInputs(PyModel& pm, ArgTable& a, py::handle qpos, py::handle qvel, py::handle ctrl,
             py::handle qfrc, bool rollout = false, py::handle act = py::none())
      : dm(pm.compiled<T>(a.device())),
        m(dm->model()),
        E(a.batch()),
        q(a.in<T>("qpos", qpos, {{"E", E}, {"nq", m.nq}})),
        v(a.in<T>("qvel", qvel, {{"E", E}, {"nv", m.nv}})),
        u(rollout
              ? a.in<T>("ctrl", ctrl, {{"E", E}, {"T", ArgTable::extent(ctrl, 3, 1)}, {"nu", m.nu}})
              : a.in<T>("ctrl", ctrl, {{"E", E}, {"nu", m.nu}})),
        f(a.optional<T>("qfrc", qfrc, {{"E", E}, {"nv", m.nv}})),
        act(a.optional<T>("act", act, {{"E", E}, {"na", m.na}})) {}

  // a step, rollout or step_vjp of a model with activation state must be given act
  void require_act() const {
    if (m.na > 0 && !act)
      throw std::invalid_argument(
          "phalanx: this model has actuator activations (na = " + std::to_string(m.na) +
          "): pass act= (E, na) (zeros start at rest); step and rollout then return them after "
          "qvel");
  }
};

// the state inputs' shapes and dtypes checked as step (rollout: as rollout) checks them, without
// running: phalanx.jax checks its arrays when it traces
void check_state(PyModel& pm, py::handle qpos, py::handle qvel, py::handle ctrl, bool rollout) {
  ArgTable a = call_table(pm, Source::kNumpy, qpos, py::none(), "cpu");
  a.dispatch([&](auto x) { StepInputs<decltype(x)>(pm, a, qpos, qvel, ctrl, py::none(), rollout); });
}

// the added forces and torques on the bodies (E, nbody, 6), or null for None
template <class T>
const T* body_forces(ArgTable& a, py::handle xfrc, const phx::Model& m, std::int64_t E) {
  return a.optional<T>("xfrc", xfrc, {{"E", E}, {"nbody", m.nbody}, {"6", 6}});
}

// nstep steps with ctrl held and the added forces qfrc and xfrc -> (qpos, qvel, status)
template <class T>
py::tuple step_t(PyModel& pm, ArgTable& a, py::handle qpos, py::handle qvel, py::handle ctrl,
                 py::handle qfrc, py::handle xfrc, int nstep, const StepIO& io,
                 py::handle act = py::none()) {
  const StepInputs<T> in(pm, a, qpos, qvel, ctrl, qfrc, false, act);
  in.require_act();
  const auto& [dm, m, E, q, v, u, f, act0] = in;
  Output<T> act1;
  if (act0) act1 = a.out<T>("act_out", io.act_out, {{"E", E}, {"na", m.na}});
  const T* x = body_forces<T>(a, xfrc, m, E);
  Output<T> q1 = a.out<T>("qpos_out", io.qpos_out, {{"E", E}, {"nq", m.nq}});
  Output<T> v1 = a.out<T>("qvel_out", io.qvel_out, {{"E", E}, {"nv", m.nv}});
  Output<unsigned> status = status_output(a, io.status_out, E);
  Output<T> qfrc_c;
  if (io.constraint_force) {
    if (nstep != 1 || x)
      throw std::invalid_argument(
          "phalanx: constraint_force=True reports one step (nstep = 1) without xfrc");
    qfrc_c = a.out<T>("qfrc_constraint", py::none(), {{"E", E}, {"nv", m.nv}});
  }
  if (E > 0) {
    a.run([&] {
      CallData<T> call(*dm, int(E), io.warm_start);
      phx::Data<T>& data = *call.data;
      Device d = a.device();
      copy_on(d, data.qpos.data(), q, size_t(E) * m.nq);
      copy_on(d, data.qvel.data(), v, size_t(E) * m.nv);
      copy_on(d, data.ctrl.data(), u, size_t(E) * m.nu);
      if (act0) copy_on(d, data.act.data(), act0, size_t(E) * m.na);
      if (io.constraint_force)
        phx::constraint_step(*dm, data, qfrc_c.p, f);
      else
        phx::step(*dm, data, nstep, f, x);
      copy_on(d, q1.p, data.qpos.data(), size_t(E) * m.nq);
      copy_on(d, v1.p, data.qvel.data(), size_t(E) * m.nv);
      if (act0) copy_on(d, act1.p, data.act.data(), size_t(E) * m.na);
      copy_on(d, status.p, data.status.data(), size_t(E));
    });
  }
  py::list out;
  for (py::handle h : {q1.array, v1.array, act0 ? act1.array : py::object(), status.array})
    if (h) out.append(h);
  if (io.constraint_force) out.append(qfrc_c.array);
  return py::tuple(out);
}

// T steps driven by ctrl (E, T, nu) -> (qpos (E, T, nq), qvel (E, T, nv), status (E,)); counts
// (E, T, NUM_COUNTS) int32 when given; recorded on tape when given; the mocap poses of each
// step (E, T, nmocap, 3) and (E, T, nmocap, 4) in place of the model's, each when given
template <class T>
py::tuple rollout_t(PyModel& pm, ArgTable& a, py::handle qpos, py::handle qvel, py::handle ctrl,
                    py::handle counts, PyTape* py_tape, const StepIO& io,
                    py::handle act = py::none(), py::handle mocap_pos = py::none(),
                    py::handle mocap_quat = py::none()) {
  const StepInputs<T> in(pm, a, qpos, qvel, ctrl, py::none(), true, act);
  in.require_act();
  const auto& [dm, m, E, q, v, u, f, act0] = in;
  const std::int64_t nstep = ArgTable::extent(ctrl, 3, 1);
  if (nstep > INT_MAX) throw std::invalid_argument("phalanx: too many steps");
  Output<T> qs = a.out<T>("qpos_out", io.qpos_out, {{"E", E}, {"T", nstep}, {"nq", m.nq}});
  Output<T> vs = a.out<T>("qvel_out", io.qvel_out, {{"E", E}, {"T", nstep}, {"nv", m.nv}});
  Output<T> as, act1;
  if (act0) as = a.out<T>("act_out", io.act_out, {{"E", E}, {"T", nstep}, {"na", m.na}});
  if (act0 && !io.act_final.is_none())
    act1 = a.out<T>("act", io.act_final, {{"E", E}, {"na", m.na}});
  const phx::MocapSteps<T> mocap{
      a.optional<T>("mocap_pos", mocap_pos,
                    {{"E", E}, {"T", nstep}, {"nmocap", m.nmocap}, {"3", 3}}),
      a.optional<T>("mocap_quat", mocap_quat,
                    {{"E", E}, {"T", nstep}, {"nmocap", m.nmocap}, {"4", 4}})};
  Output<unsigned> status = status_output(a, io.status_out, E);
  Output<std::int32_t> count;
  if (!counts.is_none())
    count = a.out<std::int32_t>("counts", counts,
                                {{"E", E}, {"T", nstep}, {"NUM_COUNTS", phx::kNumCounts}});
  phx::Tape<T>* tape = py_tape ? py_tape->start<T>(dm, a.device(), E, nstep) : nullptr;
  if (E > 0) {
    a.run([&] {
      CallData<T> call(*dm, int(E), io.warm_start);
      phx::Data<T>& data = *call.data;
      copy_on(a.device(), data.qpos.data(), q, size_t(E) * m.nq);
      copy_on(a.device(), data.qvel.data(), v, size_t(E) * m.nv);
      if (act0) copy_on(a.device(), data.act.data(), act0, size_t(E) * m.na);
      phx::rollout(*dm, data, u, int(nstep), qs.p, vs.p, count.p, tape, act0 ? as.p : nullptr,
                   mocap);
      if (act1.p) copy_on(a.device(), act1.p, data.act.data(), size_t(E) * m.na);
      copy_on(a.device(), status.p, data.status.data(), size_t(E));
    });
  }
  if (act0) return py::make_tuple(qs.array, vs.array, as.array, status.array);
  return py::make_tuple(qs.array, vs.array, status.array);
}

// The gradient outputs of step_vjp and Tape.backward. `grads` maps names (qpos, qvel, ctrl, qfrc
// of a step, the parameters) to arrays (E, ...) to overwrite, or (numpy) to None for a new
// array, and absent names are not computed; None (numpy) asks for all of them in new arrays.
// dict() holds them by name.
template <class T>
class Gradients {
 public:
  T* state[4] = {};  // qpos, qvel, ctrl, qfrc
  T* xfrc = nullptr;
  T* act = nullptr;  // the (initial) activations', with activation state
  phx::ModelAdjoint<T> model;
  phx::ContactModelAdjoint<T> contact;

  // nstep < 0: of one step (ctrl (E, nu), qfrc and, with body_forces, xfrc); else of a rollout
  // (ctrl (E, T, nu)), whose mocap poses given per step (mocap) have gradients per step
  Gradients(ArgTable& a, py::handle grads, const phx::Model& m, std::int64_t E, std::int64_t nstep,
            bool body_forces = false, const phx::MocapSteps<T>& mocap = {})
      : all_(grads.is_none()),
        E_(E),
        nq_(m.nq),
        nv_(m.nv),
        nctrl_(m.nu * std::max<std::int64_t>(nstep, 1)) {
    if (!all_) given_ = py::reinterpret_borrow<py::dict>(grads);
    for (const auto& item : given_) {
      std::string key = py::str(item.first);
      bool known = key == "qpos" || key == "qvel" || key == "ctrl" ||
                   (nstep < 0 && key == "qfrc") || (body_forces && key == "xfrc") ||
                   (m.na > 0 && key == "act");
      for (int k = 0; k < phx::kNumParams; ++k) known = known || key == phx::kParamNames[k];
      if (!known) throw std::invalid_argument("phalanx: unknown gradient '" + key + "'");
    }
    state[0] = take(a, "qpos", {{"E", E}, {"nq", m.nq}});
    state[1] = take(a, "qvel", {{"E", E}, {"nv", m.nv}});
    state[2] = nstep < 0 ? take(a, "ctrl", {{"E", E}, {"nu", m.nu}})
                         : take(a, "ctrl", {{"E", E}, {"T", nstep}, {"nu", m.nu}});
    if (nstep < 0) state[3] = take(a, "qfrc", {{"E", E}, {"nv", m.nv}});
    if (body_forces) xfrc = take(a, "xfrc", {{"E", E}, {"nbody", m.nbody}, {"6", 6}});
    if (m.na > 0) act = take(a, "act", {{"E", E}, {"na", m.na}});
    for (int k = 0; k < phx::kNumParams; ++k) {
      if ((mocap.pos && k == phx::kParamMocapPos) || (mocap.quat && k == phx::kParamMocapQuat))
        continue;  // per step, below
      const char* name = phx::kParamNames[k];
      std::int64_t w = phx::param_width(k), n = std::int64_t(m.param_size(k)) / w;
      std::string width = std::to_string(w);
      phx::param_adjoint(model, contact, k) =
          w > 1 ? take(a, name, {{"E", E}, {param_count(k), n}, {width.c_str(), w}})
                : take(a, name, {{"E", E}, {param_count(k), n}});
    }
    if (mocap.pos)
      model.mocap_pos =
          take(a, "mocap_pos", {{"E", E}, {"T", nstep}, {"nmocap", m.nmocap}, {"3", 3}});
    if (mocap.quat)
      model.mocap_quat =
          take(a, "mocap_quat", {{"E", E}, {"T", nstep}, {"nmocap", m.nmocap}, {"4", 4}});
  }

  // scratch on the device for the state gradients not asked for, which the kernels write
  // (none when all are asked for)
  void spare(Device device) {
    const size_t n[3] = {size_t(E_) * nq_, size_t(E_) * nv_, size_t(E_) * nctrl_};
    size_t total = 0;
    for (int i = 0; i < 3; ++i) total += state[i] ? 0 : n[i];
    if (total == 0) return;
    spare_ = phx::Buffer<T>(device, total);
    T* p = spare_.data();
    for (int i = 0; i < 3; ++i) {
      if (state[i]) continue;
      state[i] = p;
      p += n[i];
    }
  }
  const py::dict& dict() const { return out_; }

 private:
  T* take(ArgTable& a, const char* name, Dims dims) {
    if (!all_ && !given_.contains(name)) return nullptr;
    py::object given = all_ ? py::object(py::none()) : py::object(given_[name]);
    Output<T> o = a.out<T>(name, given, dims);
    out_[name] = o.array;
    return o.p;
  }
  bool all_;
  std::int64_t E_, nq_, nv_, nctrl_;
  py::dict given_, out_;
  phx::Buffer<T> spare_;
};

// vector-Jacobian product of one step at (qpos, qvel, ctrl, qfrc) -> Gradients::dict
template <class T>
py::dict step_vjp_t(PyModel& pm, ArgTable& a, py::handle qpos, py::handle qvel, py::handle ctrl,
                    py::handle adj_qpos_next, py::handle adj_qvel_next, py::handle qfrc,
                    py::handle xfrc, py::handle grads, int contact_gradient,
                    py::handle act = py::none(), py::handle adj_act_next = py::none()) {
  const StepInputs<T> in(pm, a, qpos, qvel, ctrl, qfrc, false, act);
  in.require_act();
  const auto& [dm, m, E, q, v, u, f, act0] = in;
  const T* aa = a.optional<T>("adj_act_next", adj_act_next, {{"E", E}, {"na", m.na}});
  const T* x = body_forces<T>(a, xfrc, m, E);
  const T* aq = a.in<T>("adj_qpos_next", adj_qpos_next, {{"E", E}, {"nq", m.nq}});
  const T* av = a.in<T>("adj_qvel_next", adj_qvel_next, {{"E", E}, {"nv", m.nv}});
  Gradients<T> g(a, grads, m, E, -1, x != nullptr);
  if (E > 0) {
    a.run([&] {
      g.spare(a.device());
      phx::step_vjp(*dm, int(E), q, v, u, aq, av, g.state[0], g.state[1], g.state[2], g.model,
                    g.contact, contact_gradient, f, g.state[3], x, g.xfrc, act0, aa, g.act);
    });
  }
  return g.dict();
}

// Tape.backward from dL/d(state after each step) (None: zero) -> Gradients::dict
template <class T>
py::dict tape_backward_t(PyTape& pt, ArgTable& a, py::handle adj_qpos, py::handle adj_qvel,
                         py::handle grads, int contact_gradient, py::handle adj_act = py::none()) {
  PyTape::Recording<T>& r = pt.recording<T>();
  const phx::Model& m = r.model->model();
  const std::int64_t E = r.tape->nenv(), nstep = r.tape->nstep();
  const T* aq = a.optional<T>("adj_qpos", adj_qpos, {{"E", E}, {"T", nstep}, {"nq", m.nq}});
  const T* av = a.optional<T>("adj_qvel", adj_qvel, {{"E", E}, {"T", nstep}, {"nv", m.nv}});
  const T* aa = a.optional<T>("adj_act", adj_act, {{"E", E}, {"T", nstep}, {"na", m.na}});
  Gradients<T> g(a, grads, m, E, nstep, false, r.tape->mocap());
  a.run([&] {
    g.spare(a.device());
    phx::rollout_backward(*r.model, *r.tape, aq, av, g.state[0], g.state[1], g.state[2], g.model,
                          g.contact, contact_gradient, aa, g.act);
  });
  return g.dict();
}

// one-step Jacobians -> (the blocks of jac (E, nq + nv, nq + 2 nv + nu) by name, jac_param
// (E, nq + nv, nparam) or None)
template <class T>
py::tuple step_jacobian_t(PyModel& pm, ArgTable& a, py::handle qpos, py::handle qvel,
                          py::handle ctrl, py::handle qfrc, bool parameters,
                          int contact_gradient) {
  const StepInputs<T> in(pm, a, qpos, qvel, ctrl, qfrc);
  [[maybe_unused]] const auto& [dm, m, E, q, v, u, f, act] = in;
  const std::int64_t rows = m.nq + m.nv, cols = m.nq + 2 * m.nv + m.nu,
                     np = phx::jacobian_nparam(dm->view());
  Output<T> jac = a.out<T>("jac", py::none(), {{"E", E}, {"rows", rows}, {"cols", cols}});
  Output<T> jac_param;
  if (parameters)
    jac_param = a.out<T>("jac_param", py::none(), {{"E", E}, {"rows", rows}, {"np", np}});
  if (E > 0) {
    a.run([&] {
      phx::step_jacobian(*dm, int(E), q, v, u, jac.p, jac_param.p, contact_gradient, f);
    });
  }
  return py::make_tuple(jacobian_blocks<T>(jac.array, m.nq, m.nv, m.nu),
                        parameters ? jac_param.array : py::none());
}

// ---- entry points: numpy (phalanx) and DLPack (the _into functions) reach the same
// operations above ----

py::object mass_matrix(PyModel& pm, py::handle qpos, py::handle dtype,
                       const std::string& device) {
  ArgTable a = call_table(pm, Source::kNumpy, qpos, dtype, device);
  return a.dispatch([&](auto x) { return mass_matrix_t<decltype(x)>(pm, a, qpos); });
}

py::object query(PyModel& pm, Query query, py::handle qpos, py::handle qvel, py::handle x,
                 py::handle dtype, const std::string& device, py::handle act = py::none(),
                 py::handle qfrc = py::none()) {
  ArgTable a = call_table(pm, Source::kNumpy, qpos, dtype, device);
  return a.dispatch(
      [&](auto t) { return query_t<decltype(t)>(pm, a, query, qpos, qvel, x, act, qfrc); });
}

template <Query Q>
py::object query_of(PyModel& pm, py::handle qpos, py::handle qvel, py::handle x, py::handle dtype,
                    const std::string& device) {
  return query(pm, Q, qpos, qvel, x, dtype, device);
}

py::tuple kinematics(PyModel& pm, py::handle qpos, py::handle qvel, py::handle dtype,
                     const std::string& device) {
  ArgTable a = call_table(pm, Source::kNumpy, qpos, dtype, device);
  return a.dispatch([&](auto x) { return kinematics_t<decltype(x)>(pm, a, qpos, qvel); });
}

py::tuple kinematics_vjp(PyModel& pm, py::handle qpos, py::handle qvel, py::handle xpos,
                         py::handle xmat, py::handle site_xpos, py::handle site_xmat,
                         py::handle com, py::handle com_vel, py::handle dtype,
                         const std::string& device) {
  ArgTable a = call_table(pm, Source::kNumpy, qpos, dtype, device);
  return a.dispatch([&](auto x) {
    return kinematics_vjp_t<decltype(x)>(pm, a, qpos, qvel, xpos, xmat, site_xpos, site_xmat, com,
                                         com_vel);
  });
}

py::tuple detect(PyModel& pm, py::handle qpos, py::handle dtype, const std::string& device) {
  ArgTable a = call_table(pm, Source::kNumpy, qpos, dtype, device);
  return a.dispatch([&](auto x) { return detect_t<decltype(x)>(pm, a, qpos); });
}

py::tuple rangefinders(PyModel& pm, py::handle qpos, const std::vector<int>& sites,
                       py::handle dtype, const std::string& device) {
  ArgTable a = call_table(pm, Source::kNumpy, qpos, dtype, device);
  return a.dispatch([&](auto x) { return rangefinders_t<decltype(x)>(pm, a, qpos, sites); });
}

py::tuple body_report(PyModel& pm, py::handle qpos, py::handle qvel, py::handle ncon,
                      py::handle con_pos, py::handle con_frame, py::handle con_force,
                      py::handle con_geom, py::handle qacc, py::handle dtype,
                      const std::string& device) {
  ArgTable a = call_table(pm, Source::kNumpy, qpos, dtype, device);
  return a.dispatch([&](auto x) {
    return body_report_t<decltype(x)>(pm, a, qpos, qvel, ncon, con_pos, con_frame, con_force,
                                      con_geom, qacc);
  });
}

py::tuple step(PyModel& pm, Source source, py::handle qpos, py::handle qvel, py::handle ctrl,
               py::handle qfrc, py::handle xfrc, int nstep, const StepIO& io, py::handle dtype,
               const std::string& device, py::handle act = py::none()) {
  if (nstep < 0) throw std::invalid_argument("phalanx: nstep must be >= 0");
  ArgTable a = call_table(pm, source, qpos, dtype, device);
  return a.dispatch([&](auto x) {
    return step_t<decltype(x)>(pm, a, qpos, qvel, ctrl, qfrc, xfrc, nstep, io, act);
  });
}

py::tuple rollout(PyModel& pm, Source source, py::handle qpos, py::handle qvel, py::handle ctrl,
                  py::handle counts, PyTape* tape, const StepIO& io, py::handle dtype,
                  const std::string& device, py::handle act = py::none(),
                  py::handle mocap_pos = py::none(), py::handle mocap_quat = py::none()) {
  ArgTable a = call_table(pm, source, qpos, dtype, device);
  return a.dispatch([&](auto x) {
    return rollout_t<decltype(x)>(pm, a, qpos, qvel, ctrl, counts, tape, io, act, mocap_pos,
                                  mocap_quat);
  });
}

py::dict step_vjp(PyModel& pm, Source source, py::handle qpos, py::handle qvel, py::handle ctrl,
                  py::handle adj_qpos_next, py::handle adj_qvel_next, py::handle qfrc,
                  py::handle xfrc, py::handle grads, int contact_gradient, py::handle dtype,
                  const std::string& device, py::handle act = py::none(),
                  py::handle adj_act_next = py::none()) {
  ArgTable a = call_table(pm, source, qpos, dtype, device);
  return a.dispatch([&](auto x) {
    return step_vjp_t<decltype(x)>(pm, a, qpos, qvel, ctrl, adj_qpos_next, adj_qvel_next, qfrc,
                                   xfrc, grads, contact_gradient, act, adj_act_next);
  });
}

py::tuple step_jacobian(PyModel& pm, py::handle qpos, py::handle qvel, py::handle ctrl,
                        bool parameters, int contact_gradient, py::handle qfrc, py::handle dtype,
                        const std::string& device) {
  ArgTable a = call_table(pm, Source::kNumpy, qpos, dtype, device);
  return a.dispatch([&](auto x) {
    return step_jacobian_t<decltype(x)>(pm, a, qpos, qvel, ctrl, qfrc, parameters,
                                        contact_gradient);
  });
}

// numpy arrays are converted to the tape's dtype, DLPack tensors must have it
py::dict tape_backward(PyTape& pt, Source source, py::handle adj_qpos, py::handle adj_qvel,
                       py::handle grads, int contact_gradient, py::handle adj_act = py::none()) {
  if (!pt.recorded())
    throw std::logic_error("phalanx: this tape holds no rollout; record one with "
                           "phalanx.rollout(..., tape=tape) first");
  ArgTable a(source, pt.device());
  a.scalar(pt.bits(), "the tape's dtype", pt.nenv());
  return a.dispatch([&](auto x) {
    return tape_backward_t<decltype(x)>(pt, a, adj_qpos, adj_qvel, grads, contact_gradient,
                                        adj_act);
  });
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

// ---- registration, one function per area ----

// status bits (PHX_STATUS_BITS): STATUS_<NAME>, STATUS_STOP_MASK, and STATUS_BITS, the (name,
// bit) pairs in the order they are reported; joint and geom type names by number; the flags of
// the contact gradient, the per-step counts and the parameter table
void register_constants(py::module_& mod) {
  py::list status_bits;
#define PHX_EXPORT_STATUS(Name, name, bit, stops)                        \
  mod.attr(upper("STATUS_" #name).c_str()) = unsigned(phx::kStatus##Name); \
  status_bits.append(py::make_tuple(#name, unsigned(phx::kStatus##Name)));
  PHX_STATUS_BITS(PHX_EXPORT_STATUS)
#undef PHX_EXPORT_STATUS
  mod.attr("STATUS_BITS") = py::tuple(status_bits);
  mod.attr("STATUS_STOP_MASK") = phx::kStatusStopMask;
  mod.attr("JOINT_TYPES") = enum_names(phx::kJointTypeNames);
  mod.attr("GEOM_TYPES") = enum_names(phx::kGeomTypeNames);
  mod.attr("LCP_SOLVERS") = enum_names(phx::kLcpSolverNames);
  mod.attr("GRAD_COMPLEMENTARITY_AWARE") = int(phx::kGradComplementarityAware);
  mod.attr("GRAD_BOUNCE_CORRECTION") = int(phx::kGradBounceCorrection);
  mod.attr("COUNT_CONTACTS") = int(phx::kCountContacts);
  mod.attr("COUNT_ROWS") = int(phx::kCountRows);
  mod.attr("COUNT_WARM_ROWS") = int(phx::kCountWarmRows);
  mod.attr("COUNT_SET_HIT") = int(phx::kCountSetHit);
  mod.attr("COUNT_OVERFLOW") = int(phx::kCountOverflow);
  mod.attr("COUNT_GJK_ITERATIONS") = int(phx::kCountGjkIterations);
  mod.attr("COUNT_EPA_ITERATIONS") = int(phx::kCountEpaIterations);
  mod.attr("NUM_COUNTS") = int(phx::kNumCounts);
  py::list params;
  for (int k = 0; k < phx::kNumParams; ++k)
    params.append(py::make_tuple(phx::kParamNames[k], param_count(k),
                                 phx::param_width(k)));
  // (name, the count of its entities, numbers per entity) in Param order
  mod.attr("PARAMETERS") = params;
  py::list env_fields;
  for (int k = phx::kNumParams; k < phx::kNumBatched; ++k)
    env_fields.append(py::make_tuple(phx::kParamNames[k], param_count(k), phx::param_width(k)));
  // the same of the other per-environment fields (no gradients), after the parameters
  mod.attr("ENV_FIELDS") = env_fields;
}

// the threads of the CPU backend, the CUDA backend's presence and memory per environment
void register_runtime(py::module_& mod) {
  mod.def("set_num_threads", &phx::set_num_threads, py::arg("n"),
          "Threads of the CPU backend's later calls (n >= 1). Phalanx keeps this count itself, "
          "so torch or another library changing OpenMP's thread count does not change it; "
          "OMP_NUM_THREADS sets the initial value.");
  mod.def("num_threads", &phx::num_threads, "Threads the CPU backend's next call uses.");
  mod.def("release_host_memory", &phx::release_host_memory,
          "Give back to the system the large host blocks (a tape's, a trajectory's) the CPU "
          "backend keeps after they are freed, for the next allocation of the same size. It "
          "keeps at most PHX_HOST_CACHE_BYTES bytes (read when phalanx loads; default 2 GiB or an "
          "eighth of the machine's memory, whichever is less; 0 keeps none).");
  mod.def("idle_host_bytes", &phx::idle_host_bytes,
          "Bytes of the freed host blocks the CPU backend keeps for reuse "
          "(release_host_memory gives them back).");
  mod.def(
      "cuda_available", [] { return phx::cuda_available(); },
      "True when the CUDA backend was built and a GPU is visible (or, in a build with "
      "PHX_CUDA_EMULATION, the emulated device that runs it on the CPU).");
  mod.def(
      "cuda_emulated", [] { return phx::cuda_emulated(); },
      "True when the CUDA backend of this build runs on the CPU (PHX_CUDA_EMULATION, for tests): "
      "results as a GPU's, timings not.");
  mod.def(
      "scratch_trace",
      [](bool on) {
        phx::cpu::ScratchTrace& t = phx::cpu::scratch_trace();
        py::dict out;
        out["given_reals"] = t.given.reals;
        out["given_ints"] = t.given.ints;
        out["written_reals"] = t.written.reals;
        out["written_ints"] = t.written.ints;
        out["given_fixed"] = t.given.fixed;
        out["written_fixed"] = t.written.fixed;
        out["given_ifixed"] = t.given.ifixed;
        out["written_ifixed"] = t.written.ifixed;
        out["given_rows"] = t.given.rows;
        out["written_rows"] = t.written.rows;
        out["given_irows"] = t.given.irows;
        out["written_irows"] = t.written.irows;
        t = phx::cpu::ScratchTrace{};
        t.on = on;
        return out;
      },
      py::arg("on"),
      "The CPU backend's scratch trace (bench/gpu_memory.py): returns the most scratch entries "
      "(reals, ints, and of the reals the fixed ones, which the CUDA backend keeps in a thread's "
      "local memory, and the rows it interleaves across environments) one environment was given "
      "and wrote in the CPU launches since the last "
      "call, then starts over, traced when `on` (over scratch split as CUDA splits it). While "
      "tracing, launches run serially and "
      "slowly; not thread-safe.");
  mod.def(
      "lcp_storage",
      [](int n) {
        if (n < 0) throw py::value_error("lcp_storage: n must be >= 0");
        const phx::ScratchSize s = phx::lcp_storage(n);
        return py::make_tuple(s.reals, s.ints);
      },
      py::arg("n"),
      "(reals, ints): the storage of the exact LCP solvers and of the LCP adjoint for n rows, "
      "which a step's constraint workspace holds among its rows (interleaved on CUDA).");
  mod.def(
      "_force_reverse_fallbacks", [](bool on) { phx::cpu::force_reverse_fallbacks() = on; },
      py::arg("on"),
      "Testing only: with on, every pass of a tape's backward on the CPU's SIMD lanes runs again "
      "lane by lane, as one whose lanes branched apart does.");
  mod.def(
      "pack_stats",
      []() {
        phx::cpu::PackStats& s = phx::cpu::pack_stats();
        py::dict out;
        out["passes"] = long(s.passes);
        out["fallbacks"] = long(s.fallbacks);
        out["lane_sweeps"] = long(s.lane_sweeps);
        out["reverse_passes"] = long(s.reverse_passes);
        out["reverse_fallbacks"] = long(s.reverse_fallbacks);
        out["reverse_row_passes"] = long(s.reverse_row_passes);
        out["reverse_alone"] = long(s.reverse_alone);
        s.reset();
        return out;
      },
      "The CPU backend's SIMD passes over environments since the last call, then starts over: "
      "'passes', steps of a pack of environments run on vector lanes, and 'fallbacks', pack steps "
      "whose environments stepped one at a time (their lanes took different branches, or one "
      "had stopped on a status bit); 'lane_sweeps', of the passes' environment-steps with "
      "constraint rows, those whose LCP's projected Gauss-Seidel sweeps ran on the lanes; "
      "'reverse_passes' and 'reverse_fallbacks' likewise for the passes of a tape's backward "
      "on packs (per step, one for the lanes without constraint "
      "rows, the whole reverse pass, and one for those with, its part of fixed structure); "
      "'reverse_row_passes', those of them whose rows' stages of fixed structure (the Delassus "
      "matrix's adjoint, the free velocity's) ran on the lanes too; 'reverse_alone', the "
      "environment-steps of a backward on packs walked back one environment at a time (too few "
      "lanes of their kind in the step, or a stopped environment in the pack).");
  // the environments one SIMD pass steps at once, as this build's host has its registers
  // (AVX-512: 16 float, 8 double; AVX2: 8, 4)
  py::dict lanes;
  lanes["float32"] = phx::kLanes<float>;
  lanes["float64"] = phx::kLanes<double>;
  mod.attr("SIMD_LANES") = lanes;
  mod.def("bytes_per_env_float32", &bytes_per_env<float>, py::arg("model"),
          py::arg("device") = "cpu");
  mod.def("bytes_per_env_float64", &bytes_per_env<double>, py::arg("model"),
          py::arg("device") = "cpu");
}

// a read-only copy of an option's 3-vector
py::array_t<double> option_vector(const std::array<double, 3>& v) {
  py::array_t<double> a(3, v.data());
  a.attr("setflags")(py::arg("write") = false);
  return a;
}

// phalanx.Model's names and options (the options drop the compiled copies)
void register_model_options(py::class_<PyModel>& cls) {
  cls.def_property_readonly("name", [](const PyModel& pm) { return pm.model().name; })
      .def_property_readonly("source", [](const PyModel& pm) { return pm.model().source; })
      .def_property(
          "timestep", [](const PyModel& pm) { return pm.model().opt.timestep; },
          &PyModel::set_timestep, "integration step (s)")
      .def_property(
          "gravity", [](const PyModel& pm) { return option_vector(pm.model().opt.gravity); },
          [](PyModel& pm, const std::array<double, 3>& g) {
            pm.set_vector(&phx::Options::gravity, "gravity", g);
          },
          "gravitational acceleration (m/s^2), a copy; assign to change")
      .def_property(
          "density", [](const PyModel& pm) { return pm.model().opt.density; },
          [](PyModel& pm, double v) { pm.set_nonnegative(&phx::Options::density, "density", v); },
          "density of the medium (kg/m^3): quadratic drag on each body's equivalent box "
          "(MuJoCo's inertia-box fluid model); 0: none")
      .def_property(
          "viscosity", [](const PyModel& pm) { return pm.model().opt.viscosity; },
          [](PyModel& pm, double v) {
            pm.set_nonnegative(&phx::Options::viscosity, "viscosity", v);
          },
          "viscosity of the medium (Pa s): viscous drag on each body's equivalent sphere; 0: none")
      .def_property(
          "wind", [](const PyModel& pm) { return option_vector(pm.model().opt.wind); },
          [](PyModel& pm, const std::array<double, 3>& v) {
            pm.set_vector(&phx::Options::wind, "wind", v);
          },
          "velocity of the medium (m/s), a copy; assign to change")
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
            return std::string(phx::kLcpSolverNames[pm.model().opt.lcp_solver]);
          },
          [](PyModel& pm, const std::string& name) {
            pm.set_option(&phx::Options::lcp_solver,
                          named_choice(phx::kLcpSolverNames, name, "lcp_solver"));
          },
          "LCP solver: 'pgs' (projected Gauss-Seidel), 'pgs_stabilized' (then Nimble's exact "
          "re-solve on the clamping set, warm-started from the previous set) or 'dantzig'")
      .def_property(
          "integrator",
          [](const PyModel& pm) {
            return std::string(phx::kIntegratorNames[pm.model().opt.integrator]);
          },
          [](PyModel& pm, const std::string& name) {
            pm.set_option(&phx::Options::integrator,
                          named_choice(phx::kIntegratorNames, name, "integrator"));
          },
          "velocity integration: 'euler' (semi-implicit, joint damping implicit: MuJoCo's "
          "Euler) or 'implicitfast' (the velocity slopes of damping, tendon damping and "
          "actuators implicit: MuJoCo's implicitfast); from the model file's option")
      .def_property(
          "solver",
          [](const PyModel& pm) { return std::string(phx::kSolverNames[pm.model().opt.solver]); },
          [](PyModel& pm, const std::string& name) {
            pm.set_option(&phx::Options::solver, named_choice(phx::kSolverNames, name, "solver"));
          },
          "what a step solves: 'featherstone' (articulated-body dynamics in generalized "
          "coordinates, contacts and limits as an LCP; the default) or 'xpbd' (position-based "
          "dynamics of the bodies in maximal coordinates, reported in the same qpos and qvel; "
          "joints, their limits, tendons as cables, springs, dampers and actuators as forces, and "
          "contacts)")
      .def_property(
          "xpbd_substeps", [](const PyModel& pm) { return pm.model().opt.xpbd_substeps; },
          [](PyModel& pm, int n) {
            if (n < 1) throw std::invalid_argument("phalanx: xpbd_substeps must be >= 1");
            pm.set_option(&phx::Options::xpbd_substeps, n);
          },
          "XPBD substeps per step (each of timestep / xpbd_substeps)")
      .def_property(
          "xpbd_iterations", [](const PyModel& pm) { return pm.model().opt.xpbd_iterations; },
          [](PyModel& pm, int n) {
            if (n < 1) throw std::invalid_argument("phalanx: xpbd_iterations must be >= 1");
            pm.set_option(&phx::Options::xpbd_iterations, n);
          },
          "XPBD joint iterations per substep")
      .def_property(
          "xpbd_joint_solver",
          [](const PyModel& pm) {
            return std::string(phx::kXpbdJointSolverNames[pm.model().opt.xpbd_joint_solver]);
          },
          [](PyModel& pm, const std::string& name) {
            pm.set_option(&phx::Options::xpbd_joint_solver,
                          named_choice(phx::kXpbdJointSolverNames, name, "xpbd_joint_solver"));
          },
          "how an XPBD iteration projects the joints: 'tree' (all at once, a Newton step over "
          "the kinematic tree; the default) or 'gauss_seidel' (one after the other, the seed "
          "papers' order)")
      .def_property(
          "lcp_tolerance", [](const PyModel& pm) { return pm.model().opt.lcp_tolerance; },
          [](PyModel& pm, double tol) {
            if (!(tol > 0)) throw std::invalid_argument("phalanx: lcp_tolerance must be > 0");
            pm.set_option(&phx::Options::lcp_tolerance, tol);
          },
          "velocity tolerance (m/s) of row classification and of accepting exact re-solves")
      .def_property(
          "lcp_sweep_tolerance",
          [](const PyModel& pm) { return pm.model().opt.lcp_sweep_tolerance; },
          [](PyModel& pm, double tol) {
            if (!(tol >= 0) || !std::isfinite(tol))
              throw std::invalid_argument("phalanx: lcp_sweep_tolerance must be finite and >= 0");
            pm.set_option(&phx::Options::lcp_sweep_tolerance, tol);
          },
          "projected Gauss-Seidel stops after a sweep that changes no row's velocity by more "
          "than this (m/s); 0, the default, runs every one of lcp_iterations. Positive: faster "
          "steps, but the step then changes by up to about the tolerance where a small change "
          "of the state changes the number of sweeps, which finite differences see")
      .def_property(
          "lcp_residual_limit", [](const PyModel& pm) { return pm.model().opt.lcp_residual_limit; },
          [](PyModel& pm, double tol) {
            if (!(tol > 0)) throw std::invalid_argument("phalanx: lcp_residual_limit must be > 0");
            pm.set_option(&phx::Options::lcp_residual_limit, tol);
          },
          "largest velocity (m/s at contacts, rad/s at angular limits) a step may leave a "
          "contact or limit violating: sinking into a surface, slipping where it should stick, "
          "pulling. Projected Gauss-Seidel works on past lcp_iterations while the residual is "
          "above it (see lcp_max_iterations), and a step left above it sets "
          "STATUS_LCP_NOT_CONVERGED")
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
          "projected Gauss-Seidel sweeps per step (fewer with lcp_sweep_tolerance)")
      .def_property(
          "lcp_max_iterations", [](const PyModel& pm) { return pm.model().opt.lcp_max_iterations; },
          [](PyModel& pm, int n) {
            if (n < 0) throw std::invalid_argument("phalanx: lcp_max_iterations must be >= 0");
            pm.set_option(&phx::Options::lcp_max_iterations, n);
          },
          "sweeps a step may take in all when lcp_iterations leave the residual above "
          "lcp_residual_limit: after the exact re-solve on the sweeps' clamping set, damped "
          "sweeps in rounds of lcp_iterations; none when it is at most lcp_iterations")
      .def_property(
          "ccd_iterations", [](const PyModel& pm) { return pm.model().opt.ccd_iterations; },
          [](PyModel& pm, int n) {
            if (n < 1 || n > phx::kMaxCcdIterations)
              throw std::invalid_argument("phalanx: ccd_iterations must be in [1, " +
                                          std::to_string(phx::kMaxCcdIterations) + "], got " +
                                          std::to_string(n));
            pm.set_option(&phx::Options::ccd_iterations, n);
          },
          "iteration bound of the convex narrowphase (GJK, EPA): MuJoCo's ccd_iterations")
      .def_property(
          "ccd_tolerance", [](const PyModel& pm) { return pm.model().opt.ccd_tolerance; },
          [](PyModel& pm, double tol) {
            if (!(tol > 0)) throw std::invalid_argument("phalanx: ccd_tolerance must be > 0");
            pm.set_option(&phx::Options::ccd_tolerance, tol);
          },
          "distance tolerance (m) ending the convex narrowphase: MuJoCo's ccd_tolerance");
}

// phalanx.Model and load_model: counts, options, parameters, names, ids and the arrays
void register_model(py::module_& mod) {
  py::class_<PyModel> cls(mod, "Model",
                          "A mechanism loaded from MJCF or URDF: MuJoCo-style flat arrays (read "
                          "only) and its options (read and write).");

  mod.def(
      "load_model",
      [](const std::string& path) {
        phx::Model model = phx::load_model(path);
        model.validate();
        return PyModel(std::move(model));
      },
      py::arg("path"),
      "Load an MJCF (.xml, .mjcf: MuJoCo's compiler, then from_mujoco) or URDF (.urdf) file.");

  // counts (PHX_MODEL_COUNTS)
#define PHX_DEF_COUNT(name, comment) \
  cls.def_property_readonly(         \
      #name, [](const PyModel& pm) { return pm.model().name; }, comment);
  PHX_MODEL_COUNTS(PHX_DEF_COUNT)
#undef PHX_DEF_COUNT
  register_model_options(cls);
  cls.def("set_parameter", &PyModel::set_parameter, py::arg("name"), py::arg("values"),
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
      .def_property_readonly("site_names", [](const PyModel& pm) { return pm.model().site_names; })
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
      .def(
          "site_id", [](const PyModel& pm, const std::string& n) { return pm.model().site_id(n); },
          py::arg("name"), "id of the named site, -1 when absent")
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
  // the one array a user switches between runs: which equality constraints hold
  cls.def_property(
      "eq_active",
      [](const py::object& self) {
        return field_view(self, self.cast<const PyModel&>().model().eq_active, 0);
      },
      &PyModel::set_eq_active,
      "is each equality constraint enforced (neq,): a copy; assign 0/1 or booleans to change");
}


// the functional queries on numpy arrays: (model, arrays..., dtype, device)
void register_queries(py::module_& mod) {
  auto dtype = py::arg("dtype") = py::none();
  auto device = py::arg("device") = "cpu";
  mod.def("mass_matrix", &mass_matrix, py::arg("model"), py::arg("qpos"), dtype, device,
          "M(q) with armature -> (E, nv, nv)");
  mod.def(
      "bias_forces",
      [](PyModel& pm, py::handle q, py::handle v, py::handle dt, const std::string& dev) {
        return query(pm, Query::kBiasForces, q, v, py::none(), dt, dev);
      },
      py::arg("model"), py::arg("qpos"), py::arg("qvel"), dtype, device, "c(q, qvel) -> (E, nv)");
  mod.def(
      "forward_dynamics",
      [](PyModel& pm, py::handle q, py::handle v, py::handle u, py::handle dt,
         const std::string& dev, py::handle act, py::handle qfrc) {
        return query(pm, Query::kForwardDynamics, q, v, u, dt, dev, act, qfrc);
      },
      py::arg("model"), py::arg("qpos"), py::arg("qvel"), py::arg("ctrl"), dtype, device,
      py::arg("act") = py::none(), py::arg("qfrc") = py::none(), "qacc -> (E, nv)");
  mod.def(
      "actuator_forces",
      [](PyModel& pm, py::handle q, py::handle v, py::handle u, py::handle dt,
         const std::string& dev,
         py::handle act) { return query(pm, Query::kActuatorForces, q, v, u, dt, dev, act); },
      py::arg("model"), py::arg("qpos"), py::arg("qvel"), py::arg("ctrl"), dtype, device,
      py::arg("act") = py::none(), "qfrc_actuator -> (E, nv)");
  mod.def("inverse_dynamics", &query_of<Query::kInverseDynamics>, py::arg("model"),
          py::arg("qpos"), py::arg("qvel"), py::arg("qacc"), dtype, device,
          "qfrc_inverse -> (E, nv)");
  mod.def("check_state", &check_state, py::arg("model"), py::arg("qpos"), py::arg("qvel"),
          py::arg("ctrl"), py::arg("rollout"),
          "check the state arrays as step (rollout=True: rollout) checks them, without running");
  mod.def("kinematics", &kinematics, py::arg("model"), py::arg("qpos"),
          py::arg("qvel") = py::none(), dtype, device,
          "-> (xpos (E, nbody, 3), xquat (E, nbody, 4), com (E, 3), com_vel (E, 3) or None, "
          "site_xpos (E, nsite, 3), site_xmat (E, nsite, 3, 3), ten_length (E, ntendon), "
          "xmat (E, nbody, 3, 3))");
  mod.def("kinematics_vjp", &kinematics_vjp, py::arg("model"), py::arg("qpos"),
          py::arg("qvel") = py::none(), py::arg("xpos") = py::none(), py::arg("xmat") = py::none(),
          py::arg("site_xpos") = py::none(), py::arg("site_xmat") = py::none(),
          py::arg("com") = py::none(), py::arg("com_vel") = py::none(), dtype, device,
          "the adjoints of kinematics' xpos, xmat, site_xpos, site_xmat, com and com_vel (each "
          "None: zero) -> (adj_qpos (E, nq), adj_qvel (E, nv) or None without qvel)");
  mod.def("detect", &detect, py::arg("model"), py::arg("qpos"), dtype, device,
          "the contacts at the states without a step (the narrowphase alone) -> (count (E,), "
          "overflow (E,), pos (E, nconmax, 3), frame (E, nconmax, 3, 3), dist (E, nconmax), "
          "geom (E, nconmax, 2)), zero past count");
  mod.def("rangefinders", &rangefinders, py::arg("model"), py::arg("qpos"), py::arg("sites"), dtype,
          device,
          "MuJoCo's rangefinder sensors on the site ids `sites` -> (dist (E, nsite), -1 where the "
          "ray meets nothing; geom (E, nsite), the geom met or -1)");
  mod.def("body_report", &body_report, py::arg("model"), py::arg("qpos"), py::arg("qvel"),
          py::arg("count"), py::arg("pos"), py::arg("frame"), py::arg("force"), py::arg("geom"),
          py::arg("qacc") = py::none(), dtype, device,
          "-> (subtree_com (E, nbody, 3), cinert (E, nbody, 10), cvel (E, nbody, 6) or None, "
          "cfrc_ext (E, nbody, 6) or None, cacc (E, nbody, 6) or None, cfrc_int (E, nbody, 6) or "
          "None): MuJoCo's convention; count None: no contacts; qacc None: no cacc, cfrc_int");
}

// step and rollout: on numpy arrays into new ones (or rollout's out=), and on DLPack tensors
// into the caller's (step_into, rollout_into), optionally warm-started across calls
void register_stepping(py::module_& mod) {
  mod.def(
      "step",
      [](PyModel& pm, py::handle q, py::handle v, py::handle u, int nstep, py::handle qfrc,
         py::handle dtype, const std::string& device, py::handle xfrc, py::handle act,
         PyWarmStart* ws, bool constraint_force) {
        StepIO io{py::none(), py::none(), py::none(), ws};
        io.constraint_force = constraint_force;
        return step(pm, Source::kNumpy, q, v, u, qfrc, xfrc, nstep, io, dtype, device, act);
      },
      py::arg("model"), py::arg("qpos"), py::arg("qvel"), py::arg("ctrl"), py::arg("nstep") = 1,
      py::arg("qfrc") = py::none(), py::arg("dtype") = py::none(), py::arg("device") = "cpu",
      py::arg("xfrc") = py::none(), py::arg("act") = py::none(), py::arg("warm_start") = nullptr,
      py::arg("constraint_force") = false,
      "-> (qpos, qvel, status), or (qpos, qvel, act, status) with act; with a WarmStart the "
      "contact rows persist across calls (phalanx.Simulator on CUDA); constraint_force=True "
      "appends the last step's constraint force J^T f / dt (E, nv), MuJoCo's qfrc_constraint");
  mod.def(
      "rollout",
      [](PyModel& pm, py::handle q, py::handle v, py::handle u, py::handle qpos_out,
         py::handle qvel_out, py::handle counts, PyTape* tape, py::handle dtype,
         const std::string& device, py::handle act, py::handle mocap_pos, py::handle mocap_quat,
         PyWarmStart* ws) {
        return rollout(pm, Source::kNumpy, q, v, u, counts, tape,
                       {qpos_out, qvel_out, py::none(), ws}, dtype, device, act, mocap_pos,
                       mocap_quat);
      },
      py::arg("model"), py::arg("qpos"), py::arg("qvel"), py::arg("ctrl"),
      py::arg("qpos_out") = py::none(), py::arg("qvel_out") = py::none(),
      py::arg("counts") = py::none(), py::arg("tape") = nullptr, py::arg("dtype") = py::none(),
      py::arg("device") = "cpu", py::arg("act") = py::none(), py::arg("mocap_pos") = py::none(),
      py::arg("mocap_quat") = py::none(), py::arg("warm_start") = nullptr,
      "-> (qpos (E, T, nq), qvel (E, T, nv), status (E,)), with act (qpos, qvel, act (E, T, na), "
      "status); with a WarmStart the contact rows persist across calls");
  mod.def(
      "step_into",
      [](PyModel& pm, py::handle q, py::handle v, py::handle u, py::handle qpos_out,
         py::handle qvel_out, py::handle status_out, int nstep, PyWarmStart* ws, py::handle act,
         py::handle qfrc, py::handle xfrc) {
        step(pm, Source::kDlpack, q, v, u, qfrc, xfrc, nstep,
             {qpos_out, qvel_out, status_out, ws, act}, py::none(), "cpu", act);
      },
      py::arg("model"), py::arg("qpos"), py::arg("qvel"), py::arg("ctrl"), py::arg("qpos_out"),
      py::arg("qvel_out"), py::arg("status_out"), py::arg("nstep") = 1,
      py::arg("warm_start") = nullptr, py::arg("act") = py::none(), py::arg("qfrc") = py::none(),
      py::arg("xfrc") = py::none(),
      "step on DLPack tensors (float32/64; status_out int32), outputs overwritten; with a "
      "WarmStart the contact rows persist across calls; act (E, na), the activations, advances "
      "in place; qfrc (E, nv) and xfrc (E, nbody, 6) are forces added as phalanx.step adds "
      "them");
  mod.def(
      "rollout_into",
      [](PyModel& pm, py::handle q, py::handle v, py::handle u, py::handle qpos_out,
         py::handle qvel_out, py::handle status_out, PyTape* tape, PyWarmStart* ws, py::handle act,
         py::handle act_out, py::handle mocap_pos, py::handle mocap_quat) {
        rollout(pm, Source::kDlpack, q, v, u, py::none(), tape,
                {qpos_out, qvel_out, status_out, ws, act_out, act}, py::none(), "cpu", act,
                mocap_pos, mocap_quat);
      },
      py::arg("model"), py::arg("qpos"), py::arg("qvel"), py::arg("ctrl"), py::arg("qpos_out"),
      py::arg("qvel_out"), py::arg("status_out"), py::arg("tape") = nullptr,
      py::arg("warm_start") = nullptr, py::arg("act") = py::none(), py::arg("act_out") = py::none(),
      py::arg("mocap_pos") = py::none(), py::arg("mocap_quat") = py::none(),
      "rollout on DLPack tensors, outputs overwritten; act (E, na) becomes the final "
      "activations, act_out (E, T, na) receives them after each step; mocap_pos "
      "(E, T, nmocap, 3) and mocap_quat (E, T, nmocap, 4), the mocap poses of each step");
  py::class_<PyWarmStart>(mod, "WarmStart",
                          "contact rows kept across step_into / rollout_into calls of one batch")
      .def(py::init<>())
      .def("cold_start", &PyWarmStart::cold_start, py::arg("env_ids"),
           "forget the rows of these environments (their next step starts cold)")
      .def("rows", &PyWarmStart::rows, "constraint rows each environment holds (nefc)")
      .def("state", &PyWarmStart::state,
           "the contact rows and impulses of every environment, name -> (E, size) arrays")
      .def("restore", &PyWarmStart::restore, py::arg("model"), py::arg("state"),
           py::arg("device") = "cpu",
           "put back a state() taken with this model, batch size and dtype");
}

// the numpy callers' choice of gradients, a sequence of names (None: all of them), as
// Gradients takes it: each name to None, a new array
py::object selection(py::handle names) {
  if (names.is_none()) return py::none();
  if (py::isinstance<py::str>(names) || !py::isinstance<py::sequence>(names))
    throw py::type_error("phalanx: grads must be a sequence of gradient names, or None for all");
  py::dict chosen;
  for (py::handle name : names) {
    if (!py::isinstance<py::str>(name))
      throw py::type_error("phalanx: grads must be a sequence of gradient names, got " +
                           std::string(py::str(py::type::of(name))) + " among them");
    chosen[name] = py::none();
  }
  return std::move(chosen);
}

// one step's vector-Jacobian product (numpy: the gradients named, in new arrays; DLPack: those
// of grads, name -> tensor) and its Jacobians
void register_gradients(py::module_& mod) {
  mod.def(
      "step_vjp",
      [](PyModel& pm, py::handle q, py::handle v, py::handle u, py::handle aq, py::handle av,
         int contact_gradient, py::handle qfrc, py::handle dtype, const std::string& device,
         py::handle xfrc, py::handle act, py::handle adj_act_next, py::handle names) {
        return step_vjp(pm, Source::kNumpy, q, v, u, aq, av, qfrc, xfrc, selection(names),
                        contact_gradient, dtype, device, act, adj_act_next);
      },
      py::arg("model"), py::arg("qpos"), py::arg("qvel"), py::arg("ctrl"), py::arg("adj_qpos_next"),
      py::arg("adj_qvel_next"), py::arg("contact_gradient"), py::arg("qfrc") = py::none(),
      py::arg("dtype") = py::none(), py::arg("device") = "cpu", py::arg("xfrc") = py::none(),
      py::arg("act") = py::none(), py::arg("adj_act_next") = py::none(),
      py::arg("grads") = py::none(),
      "vector-Jacobian product of one step -> dict of adjoints (those named in grads, a "
      "sequence of names; None: all)");
  mod.def(
      "step_vjp_into",
      [](PyModel& pm, py::handle q, py::handle v, py::handle u, py::handle aq, py::handle av,
         const py::dict& grads, int contact_gradient, py::handle act, py::handle adj_act_next) {
        step_vjp(pm, Source::kDlpack, q, v, u, aq, av, py::none(), py::none(), grads,
                 contact_gradient, py::none(), "cpu", act, adj_act_next);
      },
      py::arg("model"), py::arg("qpos"), py::arg("qvel"), py::arg("ctrl"), py::arg("adj_qpos_next"),
      py::arg("adj_qvel_next"), py::arg("grads"), py::arg("contact_gradient"),
      py::arg("act") = py::none(), py::arg("adj_act_next") = py::none(),
      "step_vjp on DLPack tensors into the gradient tensors of grads (name -> tensor)");
  mod.def("step_jacobian", &step_jacobian, py::arg("model"), py::arg("qpos"), py::arg("qvel"),
          py::arg("ctrl"), py::arg("parameters"), py::arg("contact_gradient"),
          py::arg("qfrc") = py::none(), py::arg("dtype") = py::none(), py::arg("device") = "cpu",
          "-> (jac (E, nq + nv, nq + 2 nv + nu), jac_param (E, nq + nv, nparam) or None)");
  mod.def(
      "jacobian_blocks",
      [](const CArray<double>& jac, int nq, int nv, int nu) {
        return jacobian_blocks<double>(jac, nq, nv, nu);
      },
      py::arg("jac").noconvert(), py::arg("nq"), py::arg("nv"), py::arg("nu"),
      "the named blocks of a one-step Jacobian (E, nq + nv, nq + 2 nv + nu), as views");
}

// phalanx.Tape and its backward pass (numpy: converted to the tape's dtype, every gradient in
// new arrays; DLPack: the tape's dtype, into the tensors of grads)
void register_tape(py::module_& mod) {
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
      .def(
          "_backward",
          [](PyTape& pt, py::handle aq, py::handle av, int contact_gradient, py::handle aa,
             py::handle names) {
            return tape_backward(pt, Source::kNumpy, aq, av, selection(names), contact_gradient,
                                 aa);
          },
          py::arg("adj_qpos"), py::arg("adj_qvel"), py::arg("contact_gradient"),
          py::arg("adj_act") = py::none(), py::arg("grads") = py::none());
  mod.def(
      "tape_backward_into",
      [](PyTape& pt, py::handle aq, py::handle av, const py::dict& grads, int contact_gradient,
         py::handle aa) {
        tape_backward(pt, Source::kDlpack, aq, av, grads, contact_gradient, aa);
      },
      py::arg("tape"), py::arg("adj_qpos"), py::arg("adj_qvel"), py::arg("grads"),
      py::arg("contact_gradient"), py::arg("adj_act") = py::none(),
      "Tape.backward on DLPack tensors into the gradient tensors of grads");
}

}  // namespace

PYBIND11_MODULE(_phalanx, mod) {
  mod.doc() = "Phalanx C++ core; use the phalanx package.";
  register_constants(mod);
  register_runtime(mod);
  register_model(mod);
  register_queries(mod);
  register_stepping(mod);
  register_gradients(mod);
  register_tape(mod);
  phx::bindings::register_collision(mod);
  phx::bindings::register_planner(mod);
#if PHX_HAVE_MUJOCO
  phx::bindings::register_mujoco(mod);
#endif
}
