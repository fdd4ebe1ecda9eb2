// What the extension's source files share: the Python-side Model (a loaded phx::Model with its
// compiled DeviceModels) and the staging of numpy arrays to and from a device.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <array>
#include <climits>
#include <cmath>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bindings/dlpack.h"
#include "host/api.h"

namespace phx::bindings {

namespace py = pybind11;

// a C-contiguous numpy array of T
template <class T>
using CArray = py::array_t<T, py::array::c_style>;
using CArrayD = py::array_t<double, py::array::c_style | py::array::forcecast>;

// A loaded model and its compiled copies, one per (scalar type, device), built on first use.
// The compiled copies bake in the options, so changing timestep or gravity drops them. Callers
// hold the GIL while they touch the cache and keep a shared_ptr to the copy they run on, so a
// change in another thread never frees a model under a running call.
class PyModel {
 public:
  explicit PyModel(phx::Model model) : model_(std::move(model)) {}

  const phx::Model& model() const { return model_; }

  void set_timestep(double dt) {
    if (!(std::isfinite(dt) && dt > 0)) {
      throw std::invalid_argument("phalanx: timestep must be positive and finite, got " +
                                  std::to_string(dt));
    }
    model_.opt.timestep = dt;
    invalidate();
  }

  // constraint switches and LCP settings (Options in host/model.h)
  template <class V>
  void set_option(V phx::Options::*field, V value) {
    model_.opt.*field = value;
    invalidate();
  }

  void set_nconmax(int n) {
    model_.nconmax = n;
    invalidate();
  }

  void set_eq_active(const std::vector<int>& active) {
    if (active.size() != model_.eq_active.size())
      throw std::invalid_argument("phalanx: eq_active needs " +
                                  std::to_string(model_.eq_active.size()) + " entries, got " +
                                  std::to_string(active.size()));
    for (int a : active)
      if (a != 0 && a != 1) throw std::invalid_argument("phalanx: eq_active entries are 0 or 1");
    model_.eq_active = active;
    invalidate();
  }

  // an option's 3-vector (gravity, wind), whose entries must be finite
  void set_vector(std::array<double, 3> phx::Options::*field, const char* name,
                  const std::array<double, 3>& v) {
    for (double x : v)
      if (!std::isfinite(x))
        throw std::invalid_argument(std::string("phalanx: ") + name + " must be finite");
    set_option(field, v);
  }

  // an option's nonnegative coefficient (density, viscosity)
  void set_nonnegative(double phx::Options::*field, const char* name, double v) {
    if (!(v >= 0 && std::isfinite(v)))
      throw std::invalid_argument(std::string("phalanx: ") + name + " must be finite and >= 0");
    set_option(field, v);
  }

  // replace a differentiable parameter (phx::Param): values of the field's shape (shared by
  // all environments) or with a leading batch dimension (one copy per environment)
  void set_parameter(const std::string& name, const CArrayD& values) {
    int k = phx::Model::param_index(name);
    std::vector<py::ssize_t> shape = param_shape(k);
    std::vector<py::ssize_t> got(values.shape(), values.shape() + values.ndim());
    bool shared = got == shape;
    bool batched = got.size() == shape.size() + 1 && got[0] >= 1 &&
                   std::equal(shape.begin(), shape.end(), got.begin() + 1);
    if (!shared && !batched) {
      std::string batch = "(nbatch";
      for (py::ssize_t n : shape) batch += ", " + std::to_string(n);
      throw std::invalid_argument("phalanx: " + name + " must have shape " + shape_string(shape) +
                                  " (shared) or " + batch + ") (per environment), got " +
                                  shape_string(got));
    }
    model_.set_parameter(name, std::vector<double>(values.data(), values.data() + values.size()));
    invalidate();
  }

  // the values of a parameter: the field's shape when shared, else (nbatch, *shape)
  py::array_t<double> parameter(const std::string& name) const {
    int k = phx::Model::param_index(name);
    std::vector<py::ssize_t> shape = param_shape(k);
    const std::vector<double>* v = &model_.param_field(k);
    if (int n = model_.param_nbatch(k); n > 1) {
      shape.insert(shape.begin(), n);
      v = &model_.param_batch[k];
    }
    py::array_t<double> a(shape);
    std::copy(v->begin(), v->end(), a.mutable_data());
    return a;
  }

  // the shape of one copy of parameter k: (count,) or (count, width)
  std::vector<py::ssize_t> param_shape(int k) const {
    py::ssize_t n = py::ssize_t(model_.param_size(k)), w = phx::param_width(k);
    if (w == 1) return {n};
    return {n / w, w};
  }

  template <class T>
  std::shared_ptr<const phx::DeviceModel<T>> compiled(Device device) {
    auto& slot = cache<T>()[device == Device::kCpu ? 0 : 1];
    if (!slot) slot = std::make_shared<const phx::DeviceModel<T>>(model_, device);
    return slot;
  }

 private:
  template <class T>
  auto& cache() {
    if constexpr (std::is_same_v<T, float>) {
      return f32_;
    } else {
      return f64_;
    }
  }
  void invalidate() {
    f32_ = {};
    f64_ = {};
  }

  phx::Model model_;
  // indexed by device: 0 cpu, 1 cuda
  std::array<std::shared_ptr<const phx::DeviceModel<float>>, 2> f32_;
  std::array<std::shared_ptr<const phx::DeviceModel<double>>, 2> f64_;
};

// An input array as the device sees it: the numpy buffer itself on the CPU, a copy on CUDA;
// null for a null host array (an optional input not given).
template <class T>
class DeviceInput {
 public:
  DeviceInput(Device device, const T* host, size_t n) : p_(host) {
    if (host && device != Device::kCpu) {
      buffer_ = phx::Buffer<T>(device, n);
      buffer_.upload(host, n);
      p_ = buffer_.data();
    }
  }
  const T* get() const { return p_; }

 private:
  phx::Buffer<T> buffer_;
  const T* p_;
};

// An output array: the numpy buffer itself on the CPU; on CUDA a device buffer that finish()
// copies back (and that starts with the array's values when it is also an input).
template <class T>
class DeviceOutput {
 public:
  // load: the array is also an input (updated in place), so its values go to the device
  DeviceOutput(Device device, T* host, size_t n, bool load = false) : host_(host), p_(host) {
    if (device != Device::kCpu) {
      buffer_ = phx::Buffer<T>(device, n);
      if (load) buffer_.upload(host, n);
      p_ = buffer_.data();
    }
  }
  T* get() { return p_; }
  void finish() {
    if (buffer_.size()) buffer_.download(host_, buffer_.size());
  }

 private:
  phx::Buffer<T> buffer_;
  T* host_;
  T* p_;
};

}  // namespace phx::bindings
