// Registration functions of the parts of the extension that live in their own files.
#pragma once

#include <pybind11/pybind11.h>

namespace phx::bindings {

// collision pair functions exposed for tests and tools (bindings/collision.cpp)
void register_collision(pybind11::module_& mod);

// the planners' per-problem functions on host arrays (bindings/planner.cpp)
void register_planner(pybind11::module_& mod);

}  // namespace phx::bindings
