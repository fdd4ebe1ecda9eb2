// phalanx.from_mujoco: a mujoco.MjModel into a phalanx.Model (phx::from_mujoco,
// host/mujoco_model.h). Built when cmake/mujoco.cmake finds MuJoCo's headers.
//
// The MjModel's mjModel* is its `_address`. The conversion reads the struct with the layout of
// the headers Phalanx was compiled against, so the imported mujoco must be that version: checked
// with mujoco.mj_version() before the pointer is read.
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "bindings/py_model.h"
#include "host/mujoco_model.h"

namespace phx::bindings {

namespace {

std::string version_string(int v) {
  return std::to_string(v / 1000000) + "." + std::to_string(v / 1000 % 1000) + "." +
         std::to_string(v % 1000);
}

PyModel from_mujoco_object(const py::object& mj_model) {
  py::module_ mujoco;
  try {
    mujoco = py::module_::import("mujoco");
  } catch (py::error_already_set&) {
    throw py::type_error("phalanx.from_mujoco: the mujoco package cannot be imported");
  }
  if (!py::isinstance(mj_model, mujoco.attr("MjModel"))) {
    throw py::type_error("phalanx.from_mujoco: expected a mujoco.MjModel, got " +
                         py::str(py::type::of(mj_model)).cast<std::string>());
  }
  int version = mujoco.attr("mj_version")().cast<int>();
  if (version != kMujocoHeaderVersion) {
    throw std::runtime_error(
        "phalanx.from_mujoco: phalanx was built against MuJoCo " +
        version_string(kMujocoHeaderVersion) + " but the imported mujoco is " +
        version_string(version) + "; their mjModel layouts may differ. Install mujoco==" +
        version_string(kMujocoHeaderVersion) + " or rebuild phalanx against this mujoco");
  }
  auto address = mj_model.attr("_address").cast<std::uintptr_t>();
  const auto* m = reinterpret_cast<const mjModel*>(address);
  phx::Model model;
  {
    // the MjModel stays alive (held by the caller's reference) while the GIL is released
    py::gil_scoped_release release;
    model = phx::from_mujoco(m);
  }
  return PyModel(std::move(model));
}

}  // namespace

void register_mujoco(py::module_& mod) {
  mod.def("from_mujoco", &from_mujoco_object, py::arg("mj_model"),
          "Convert a compiled mujoco.MjModel into a Model (MuJoCo's compiled frames, inertias, "
          "meshes' convex hulls and height fields taken as they are).");
  mod.attr("MUJOCO_HEADER_VERSION") = kMujocoHeaderVersion;
}

}  // namespace phx::bindings
