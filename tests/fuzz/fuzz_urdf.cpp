// Fuzz target of the URDF loader (host/urdf.cpp): the input is a URDF document, loaded from a
// string or, for inputs of odd size, from a .urdf file through load_model; a model that loads
// takes a few steps. Relative mesh filenames resolve against the temporary directory (from a
// file) or the working directory (from a string); the temporary directory holds the files of
// write_assets (cube.stl, tet.obj).
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

#include "host/model.h"
#include "tests/fuzz/fuzz_common.h"

namespace phx::fuzz {

void run(const uint8_t* data, size_t size) {
  write_assets();
  std::string xml(reinterpret_cast<const char*>(data), size);
  Model m = size % 2 ? load_model(write_temp("robot.urdf", data, size)) : load_urdf_string(xml);
  step_model(m);
}

}  // namespace phx::fuzz

PHX_FUZZ_ENTRY
