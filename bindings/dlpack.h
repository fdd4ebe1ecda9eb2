// Arrays of other frameworks through DLPack (https://dmlc.github.io/dlpack): torch, jax and
// cupy tensors and numpy arrays, on the host or on a CUDA device, read and written where they
// live. The _into functions of the extension take their arguments this way (bindings/arrays.h
// checks them).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "host/device.h"

namespace phx::bindings {

// One array argument: its data, where it lives, its element type and shape. Keeps the
// producer's tensor alive (and releases it when the last copy goes).
struct TensorRef {
  void* data = nullptr;
  Device device = Device::kCpu;
  char kind = 'f';  // 'f' float, 'i' signed integer, 'u' unsigned integer
  int bits = 0;
  std::vector<std::int64_t> shape;
  std::shared_ptr<void> owner;
};

// obj.__dlpack__() as a TensorRef. std::invalid_argument naming `name` unless obj provides
// DLPack, is C-contiguous and lives on the host or a CUDA device.
TensorRef import_tensor(pybind11::handle obj, const char* name);

// "(4, 28)"
std::string shape_string(const std::vector<std::int64_t>& shape);

}  // namespace phx::bindings
