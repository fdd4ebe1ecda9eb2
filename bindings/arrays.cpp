#include "bindings/arrays.h"

#include <climits>
#include <stdexcept>

#include "host/api.h"

namespace phx::bindings {

namespace {

// "float64", "int32": numpy's name of an element type
std::string type_name(char kind, int bits) {
  return std::string(kind == 'f' ? "float" : kind == 'i' ? "int" : "uint") + std::to_string(bits);
}

// true when the shape (n numbers at s) is dims
template <class I>
bool same_shape(const I* s, int n, Dims dims) {
  if (n != int(dims.size())) return false;
  for (const Dim& d : dims)
    if (*s++ != d.size) return false;
  return true;
}

template <class I>
std::string shape_of(const I* s, int n) {
  return shape_string(std::vector<std::int64_t>(s, s + n));
}

[[noreturn]] void shape_error(const char* name, Dims dims, const std::string& got) {
  throw std::invalid_argument(std::string("phalanx: ") + name + " must have shape " +
                              expected_string(dims) + ", got " + got);
}

}  // namespace

std::string expected_string(const Dim* dims, size_t n) {
  std::string symbols, sizes;
  for (const Dim* d = dims; d != dims + n; ++d) {
    symbols += std::string(symbols.empty() ? "" : ", ") + d->symbol;
    sizes += (sizes.empty() ? "" : ", ") + (d->size < 0 ? d->symbol : std::to_string(d->size));
  }
  const char* comma = n == 1 ? ",)" : ")";
  return "(" + symbols + comma + " = (" + sizes + comma;
}

void ArgTable::scalar_from(const char* name, py::handle first, py::handle dtype, Dims dims) {
  const int rank = int(dims.size());
  first_obj_ = first;
  origin_ = std::string("the dtype of ") + name;
  if (source_ == Source::kDlpack) {
    first_tensor_ = import_tensor(first, name);
    device_ = first_tensor_.device;
    located_ = true;
    bits_ = first_tensor_.kind == 'f' ? first_tensor_.bits : 0;
    if (bits_ != 32 && bits_ != 64)
      throw std::invalid_argument(std::string("phalanx: ") + name + " must be float32 or float64");
    if (int(first_tensor_.shape.size()) == rank) batch_ = first_tensor_.shape[0];
    if (batch_ > INT_MAX) throw std::invalid_argument("phalanx: too many environments");
    return;
  }
  auto& api = py::detail::npy_api::get();
  first_array_ = api.PyArray_Check_(first.ptr())
                     ? py::reinterpret_borrow<py::object>(first)
                     : py::reinterpret_steal<py::object>(
                           api.PyArray_FromAny_(first.ptr(), nullptr, 0, 0, 0, nullptr));
  if (!first_array_) throw py::error_already_set();
  auto a = py::reinterpret_borrow<py::array>(first_array_);
  if (a.ndim() == rank) batch_ = a.shape(0);
  if (batch_ > INT_MAX) throw std::invalid_argument("phalanx: too many environments");
  if (dtype.is_none()) {
    py::dtype t = a.dtype();
    bits_ = t.kind() == 'f' ? int(8 * t.itemsize()) : 0;
    if (bits_ != 32 && bits_ != 64) {
      std::vector<Dim> expected(dims);
      expected[0].size = batch_;
      throw std::invalid_argument(std::string("phalanx: ") + name +
                                  " must be a float32 or float64 array of shape " +
                                  expected_string(expected.data(), expected.size()) +
                                  ", got dtype " + std::string(py::str(t)) +
                                  " (pass dtype= to convert)");
    }
  } else {
    py::dtype t = py::dtype::from_args(py::reinterpret_borrow<py::object>(dtype));
    bits_ = t.kind() == 'f' ? int(8 * t.itemsize()) : 0;
    if (bits_ != 32 && bits_ != 64)
      throw std::invalid_argument("phalanx: dtype must be float32 or float64, got " +
                                  std::string(py::str(t)));
    strict_ = false;
  }
}

void ArgTable::scalar(int bits, const char* origin, std::int64_t batch) {
  bits_ = bits;
  origin_ = origin;
  batch_ = batch;
  strict_ = source_ == Source::kDlpack;
  located_ = true;
}

std::int64_t ArgTable::extent(py::handle obj, int rank, int axis) {
  if (py::isinstance<py::array>(obj)) {
    auto a = py::reinterpret_borrow<py::array>(obj);
    return a.ndim() == rank ? std::int64_t(a.shape(axis)) : -1;
  }
  py::tuple shape = py::hasattr(obj, "shape") ? py::tuple(obj.attr("shape"))
                                              : py::tuple(py::array::ensure(obj).attr("shape"));
  return int(shape.size()) == rank ? shape[axis].cast<std::int64_t>() : -1;
}

void ArgTable::dtype_error(const char* name, Dims dims, char kind, int bits,
                           const std::string& got) const {
  if (kind == 'f')
    throw std::invalid_argument(std::string("phalanx: ") + name + " must have dtype " +
                                type_name(kind, bits) + " (" + origin_ + ") and shape " +
                                expected_string(dims) + ", got dtype " + got);
  throw std::invalid_argument(std::string("phalanx: ") + name + " must have dtype " +
                              type_name(kind, bits) + ", got " + got);
}

void* ArgTable::numpy_array(const char* name, py::handle obj, Dims dims, char kind, int bits,
                            bool output, py::object* keep) {
  auto& api = py::detail::npy_api::get();
  if (output) {
    // the caller's buffer, written in place: exactly right or an error
    bool ok = false;
    if (py::isinstance<py::array>(obj)) {
      auto a = py::reinterpret_borrow<py::array>(obj);
      py::dtype t = a.dtype();
      ok = t.kind() == kind && int(8 * t.itemsize()) == bits && t.byteorder() != '>' &&
           same_shape(a.shape(), int(a.ndim()), dims) &&
           (a.flags() & py::array::c_style) && a.writeable();
      if (ok) {
        *keep = a;
        return a.mutable_data();
      }
    }
    throw std::invalid_argument(std::string("phalanx: ") + name + " must be a writeable " +
                                "C-contiguous " + type_name(kind, bits) + " array of shape " +
                                expected_string(dims));
  }
  py::object x;
  if (obj.ptr() == first_obj_.ptr() && first_array_) {
    x = first_array_;
  } else if (api.PyArray_Check_(obj.ptr())) {
    x = py::reinterpret_borrow<py::object>(obj);
  } else {
    x = py::reinterpret_steal<py::object>(api.PyArray_FromAny_(obj.ptr(), nullptr, 0, 0, 0,
                                                               nullptr));
    if (!x) throw py::error_already_set();
  }
  auto a = py::reinterpret_borrow<py::array>(x);
  py::dtype t = a.dtype();
  bool right_type = t.kind() == kind && int(8 * t.itemsize()) == bits && t.byteorder() != '>';
  bool right_shape = same_shape(a.shape(), int(a.ndim()), dims);
  if (!(right_type && right_shape && (a.flags() & py::array::c_style))) {
    if (strict_ && !right_type) dtype_error(name, dims, kind, bits, std::string(py::str(t)));
    if (!right_shape) shape_error(name, dims, shape_of(a.shape(), int(a.ndim())));
    // a copy: C-contiguous, of the call's dtype
    x = py::reinterpret_steal<py::object>(api.PyArray_FromAny_(
        x.ptr(), py::dtype(kind == 'f' ? (bits == 64 ? "float64" : "float32") : "int32")
                     .release().ptr(),
        0, 0, py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_ | py::detail::npy_api::NPY_ARRAY_FORCECAST_,
        nullptr));
    if (!x) throw py::error_already_set();
  }
  void* p = const_cast<void*>(py::reinterpret_borrow<py::array>(x).data());
  keep_.push_back(std::move(x));
  return p;
}

void* ArgTable::dlpack_tensor(const char* name, py::handle obj, Dims dims, char kind, int bits) {
  const TensorRef* t = &first_tensor_;
  if (obj.ptr() != first_obj_.ptr() || !first_tensor_.owner) {
    tensors_.push_back(import_tensor(obj, name));
    t = &tensors_.back();
    if (!located_) {
      device_ = t->device;
      located_ = true;
    } else if (t->device != device_) {
      throw std::invalid_argument(std::string("phalanx: ") + name + " is on " +
                                  phx::device_name(t->device) + ", the other arguments on " +
                                  phx::device_name(device_));
    }
  }
  if (t->kind != kind || t->bits != bits) dtype_error(name, dims, kind, bits, type_name(t->kind, t->bits));
  if (!same_shape(t->shape.data(), int(t->shape.size()), dims))
    shape_error(name, dims, shape_string(t->shape));
  return t->data;
}

void* ArgTable::stage(void* p, size_t bytes, bool output) {
  if (source_ != Source::kNumpy || device_ == Device::kCpu || !p || bytes == 0) return p;
  auto buffer = std::make_shared<phx::Buffer<unsigned char>>(device_, bytes);
  if (!output) buffer->upload(static_cast<const unsigned char*>(p), bytes);
  staged_.push_back({buffer, output ? p : nullptr, buffer->data(), bytes});
  return buffer->data();
}

void ArgTable::finish() {
  for (const Staged& s : staged_)
    if (s.host) phx::detail::device_copy(Device::kCpu, s.host, device_, s.device, s.bytes);
}

}  // namespace phx::bindings
