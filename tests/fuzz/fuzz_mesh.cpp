// Fuzz target of the mesh reader and the convex hull (host/mesh.cpp: assimp, then qhull). The
// first byte chooses the file's extension (bits 0-1: .stl, .obj, .dae, .stl), the scale (bits
// 2-3) and maxhullvert (bits 4-5); the other bytes are the mesh file. Its hull goes through
// add_mesh, then, when bit 6 is set, the file is a URDF link's collision mesh, floating above a
// box, and the robot takes a few steps.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "host/mesh.h"
#include "host/model.h"
#include "tests/fuzz/fuzz_common.h"

namespace phx::fuzz {

void run(const uint8_t* data, size_t size) {
  if (size < 1) return;
  const uint8_t mode = data[0];
  const char* extensions[] = {".stl", ".obj", ".dae", ".stl"};
  const Point3 scales[] = {{1, 1, 1}, {2, 0.5, 1}, {-1, 1, 1}, {1e-3, 1e-3, 1e-3}};
  const int maxhullvert[] = {-1, -1, 4, 8};
  std::string path = write_temp(std::string("mesh") + extensions[mode & 3], data + 1, size - 1);
  Point3 scale = scales[(mode >> 2) & 3];
  Hull hull = convex_hull(read_mesh_vertices(path, scale), maxhullvert[(mode >> 4) & 3], path);
  Model m;
  add_mesh(m, hull);
  if (!(mode & 64)) return;
  auto number = [](double x) { return std::to_string(x); };
  std::string inertial =
      "<inertial><mass value='1'/><inertia ixx='0.1' iyy='0.1' izz='0.1' ixy='0' ixz='0' "
      "iyz='0'/></inertial>";
  step_model(load_urdf_string(
      "<robot name='r'><link name='ground'><collision><origin xyz='0 0 -0.55'/><geometry><box "
      "size='10 10 1'/></geometry></collision></link><link name='m'>" +
      inertial + "<collision><geometry><mesh filename='" + path + "' scale='" + number(scale[0]) +
      " " + number(scale[1]) + " " + number(scale[2]) +
      "'/></geometry></collision></link><joint name='j' type='floating'><parent link='ground'/>"
      "<child link='m'/></joint></robot>"));
}

}  // namespace phx::fuzz

PHX_FUZZ_ENTRY
