// Fuzz target of the MJCF loader (host/mjcf.cpp: MuJoCo's compiler, then from_mujoco in
// host/mujoco_model.cpp): the input is an MJCF document, loaded from a string or, for inputs of
// odd size, from a .xml file through load_model; a model that loads takes a few steps. Assets
// resolve against the temporary directory, which holds the files of write_assets (cube.stl,
// tet.obj, field.bin).
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
  Model m = size % 2 ? load_model(write_temp("model.xml", data, size))
                     : load_mjcf_string(xml, temp_dir().string());
  step_model(m);
}

}  // namespace phx::fuzz

PHX_FUZZ_ENTRY
