// The one path from a call's arrays to the core. An ArgTable takes the arrays of one call,
// either numpy arrays (or what numpy.asarray takes) on the host or tensors through DLPack
// (https://dmlc.github.io/dlpack) on their own device, checks each against its expected shape
// and the call's scalar type, and hands the operation pointers on the device it runs on. Every
// shape and dtype message a caller of phalanx, phalanx.torch or phalanx.jax gets comes from here.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "bindings/dlpack.h"
#include "host/device.h"

namespace phx::bindings {

namespace py = pybind11;

// One dimension of an expected shape: its symbol and its size, -1 when unknown (it then matches
// no size and prints as its symbol)
struct Dim {
  const char* symbol;
  std::int64_t size;
};
using Dims = std::initializer_list<Dim>;

// "(E, nq) = (4, 28)"
std::string expected_string(const Dim* dims, size_t n);
inline std::string expected_string(Dims dims) { return expected_string(dims.begin(), dims.size()); }

// How a call receives its arrays
enum class Source {
  kNumpy,   // numpy arrays, or what numpy.asarray takes, on the host; absent outputs are allocated
  kDlpack,  // tensors with __dlpack__, read and written where they live; outputs are given
};

// An output: the pointer the kernels write on the call's device and the array holding it
template <class T>
struct Output {
  T* p = nullptr;
  py::object array;
};

class ArgTable {
 public:
  // the arrays of one call. Numpy arrays go to `device` (copied when it is not the host), DLPack
  // tensors are used on their own device, which must be the same for all.
  ArgTable(Source source, Device device) : source_(source), device_(device) {}

  // The call's scalar type: the explicit `dtype` (numpy only; not None converts every array to
  // it), else the dtype of `first`, which must be float32 or float64 (strict: the other arrays
  // must have it too). E, the number of environments, is the leading dimension of `first` when
  // it has as many dimensions as its expected shape `dims` (whose E is not known yet).
  void scalar_from(const char* name, py::handle first, py::handle dtype, Dims dims);
  // a fixed scalar type (32 or 64 bits) that `origin` ("the tape's dtype") names, E given; the
  // arrays must be on the table's device. Numpy arrays are converted to it, DLPack tensors must
  // have it.
  void scalar(int bits, const char* origin, std::int64_t batch);

  int bits() const { return bits_; }
  std::int64_t batch() const { return batch_; }
  Device device() const { return device_; }

  // the size of dimension `axis` of obj when it has `rank` dimensions, else -1
  static std::int64_t extent(py::handle obj, int rank, int axis);

  // f(float{}) or f(double{}) by the call's scalar type
  template <class F>
  decltype(auto) dispatch(F&& f) {
    return bits_ == 64 ? f(double{}) : f(float{});
  }

  // an input of the call's scalar type and this shape, on the call's device
  template <class T>
  const T* in(const char* name, py::handle obj, Dims dims);
  // the same, null for None
  template <class T>
  const T* optional(const char* name, py::handle obj, Dims dims) {
    return obj.is_none() ? nullptr : in<T>(name, obj, dims);
  }
  // an output of this shape: `given` (written in place) or, for None with numpy, a new array.
  // T is the call's scalar type or std::int32_t / std::uint32_t (counts, status).
  template <class T>
  Output<T> out(const char* name, py::handle given, Dims dims);

  // f() without the GIL, then the outputs staged on another device copied back
  template <class F>
  void run(F&& f) {
    py::gil_scoped_release nogil;
    f();
    finish();
  }

 private:
  struct Staged {
    std::shared_ptr<void> buffer;  // a phx::Buffer on the call's device
    void* host = nullptr;          // where an output goes back to, null for an input
    void* device = nullptr;
    size_t bytes = 0;
  };

  // obj as a checked numpy array of element type (kind, bits) and this shape, C-contiguous,
  // converted when the call has an explicit dtype; writeable for an output
  void* numpy_array(const char* name, py::handle obj, Dims dims, char kind, int bits, bool output,
                    py::object* keep);
  void* dlpack_tensor(const char* name, py::handle obj, Dims dims, char kind, int bits);
  void* stage(void* p, size_t bytes, bool output);
  void finish();
  [[noreturn]] void dtype_error(const char* name, Dims dims, char kind, int bits,
                                const std::string& got) const;

  Source source_;
  Device device_;
  bool located_ = false;  // DLPack: the device is that of the first tensor
  int bits_ = 0;
  bool strict_ = true;
  std::string origin_;  // what sets the scalar type, "the dtype of qpos"
  std::int64_t batch_ = -1;
  py::handle first_obj_;
  py::object first_array_;  // numpy: the first array as numpy.asarray made it
  TensorRef first_tensor_;  // DLPack: the first tensor, imported once
  std::vector<py::object> keep_;
  std::vector<TensorRef> tensors_;
  std::vector<Staged> staged_;
};

template <class T>
constexpr char kind_of() {
  return std::is_floating_point_v<T> ? 'f' : std::is_signed_v<T> ? 'i' : 'u';
}

template <class T>
const T* ArgTable::in(const char* name, py::handle obj, Dims dims) {
  size_t n = 1;
  for (const Dim& d : dims) n *= size_t(d.size < 0 ? 0 : d.size);
  void* p = source_ == Source::kNumpy
                ? numpy_array(name, obj, dims, kind_of<T>(), 8 * sizeof(T), false, nullptr)
                : dlpack_tensor(name, obj, dims, kind_of<T>(), 8 * sizeof(T));
  return static_cast<const T*>(stage(p, n * sizeof(T), false));
}

template <class T>
Output<T> ArgTable::out(const char* name, py::handle given, Dims dims) {
  size_t n = 1;
  for (const Dim& d : dims) n *= size_t(d.size < 0 ? 0 : d.size);
  Output<T> o;
  if (given.is_none() && source_ == Source::kNumpy) {
    std::vector<py::ssize_t> shape;
    for (const Dim& d : dims) shape.push_back(py::ssize_t(d.size));
    py::array_t<T, py::array::c_style> a(shape);
    o.p = a.mutable_data();
    o.array = std::move(a);
  } else if (source_ == Source::kNumpy) {
    o.p = static_cast<T*>(numpy_array(name, given, dims, kind_of<T>(), 8 * sizeof(T), true,
                                      &o.array));
  } else {
    o.p = static_cast<T*>(dlpack_tensor(name, given, dims, kind_of<T>(), 8 * sizeof(T)));
    o.array = py::reinterpret_borrow<py::object>(given);
  }
  o.p = static_cast<T*>(stage(o.p, n * sizeof(T), true));
  return o;
}

}  // namespace phx::bindings
