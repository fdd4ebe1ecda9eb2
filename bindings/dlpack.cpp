#include "bindings/dlpack.h"

#include <stdexcept>

namespace py = pybind11;

namespace phx::bindings {

namespace {

// The DLPack ABI (dlpack.h, version 0.x and 1.x without versioning): the structs a producer
// hands over in a PyCapsule named "dltensor".
struct DLDevice {
  std::int32_t device_type;  // 1 CPU, 2 CUDA, 3 CUDA host (pinned)
  std::int32_t device_id;
};
struct DLDataType {
  std::uint8_t code;  // 0 int, 1 uint, 2 float
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  // in elements; null means C-contiguous
  std::uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

constexpr std::int32_t kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3;

}  // namespace

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

TensorRef import_tensor(py::handle obj, const char* name) {
  std::string what = std::string("phalanx: ") + name;
  if (!py::hasattr(obj, "__dlpack__"))
    throw std::invalid_argument(what + " must be an array with DLPack (__dlpack__), got " +
                                std::string(py::str(py::type::handle_of(obj))));
  py::object capsule = obj.attr("__dlpack__")();
  PyObject* c = capsule.ptr();
  if (!PyCapsule_IsValid(c, "dltensor"))
    throw std::invalid_argument(what + ": __dlpack__ did not return a DLPack tensor capsule");
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
  // consumed: the capsule no longer frees it, the TensorRef's owner does
  PyCapsule_SetName(c, "used_dltensor");
  TensorRef t;
  t.owner = std::shared_ptr<void>(managed, [](void* p) {
    auto* m = static_cast<DLManagedTensor*>(p);
    if (m->deleter) m->deleter(m);
  });
  const DLTensor& d = managed->dl_tensor;
  if (d.device.device_type == kDLCPU || d.device.device_type == kDLCUDAHost) {
    t.device = Device::kCpu;
  } else if (d.device.device_type == kDLCUDA) {
    t.device = Device::kCuda;
  } else {
    throw std::invalid_argument(what + " lives on DLPack device type " +
                                std::to_string(d.device.device_type) +
                                "; phalanx reads host and CUDA memory");
  }
  if (d.dtype.lanes != 1 || d.dtype.code > 2)
    throw std::invalid_argument(what + " has an element type phalanx does not read");
  t.kind = "iuf"[d.dtype.code];
  t.bits = d.dtype.bits;
  t.shape.assign(d.shape, d.shape + d.ndim);
  bool empty = false;
  for (int i = 0; i < d.ndim; ++i) empty = empty || d.shape[i] == 0;
  if (d.strides && !empty) {
    std::int64_t expect = 1;
    for (int i = d.ndim - 1; i >= 0; --i) {
      if (d.shape[i] != 1 && d.strides[i] != expect)
        throw std::invalid_argument(what + " must be C-contiguous");
      expect *= d.shape[i];
    }
  }
  t.data = static_cast<char*>(d.data) + d.byte_offset;
  return t;
}

}  // namespace phx::bindings
