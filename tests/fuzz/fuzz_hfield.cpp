// Fuzz target of height fields (host/mujoco_model.cpp Converter::hfields, Model's checks, and
// the height-field collisions of a few steps). The input is [mode: 1 byte][size: 4 float32]
// [z: float32][payload]: an MJCF model holds a height field of that size (MuJoCo's radius_x,
// radius_y, elevation_z, base_z) in the world and a free body at height z above it. Mode bits
// 0-1 choose the field's data: 0 the payload as MuJoCo's binary file (int32 nrow, int32 ncol,
// float32 data) named field.bin, 1 the elevation attribute (payload: nrow and ncol, a byte each
// modulo 32, then float32 values, missing ones 0), 2 the payload as field.png, 3 nrow and ncol
// without elevation (a flat field); bits 2-4 the body's geom: sphere, capsule, ellipsoid,
// cylinder, box, or a mesh (a box's corners; also for 5 to 7).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "host/model.h"
#include "tests/fuzz/fuzz_common.h"

namespace phx::fuzz {

namespace {

constexpr size_t kHeader = 1 + 4 * 4 + 4;

float read_float(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, sizeof f);
  return f;
}

std::string number(double x) {
  char s[32];
  std::snprintf(s, sizeof s, "%.9g", x);
  return s;
}

}  // namespace

void run(const uint8_t* data, size_t size) {
  if (size < kHeader) return;
  const uint8_t mode = data[0];
  std::string field_size;
  for (int c = 0; c < 4; c++) {
    if (c) field_size += ' ';
    field_size += number(read_float(data + 1 + 4 * c));
  }
  const double z = read_float(data + 17);
  const uint8_t* payload = data + kHeader;
  const size_t npayload = size - kHeader;

  std::string hfield = "<hfield name='h' size='" + field_size + "'";
  switch (mode & 3) {
    case 0:
      write_temp("field.bin", payload, npayload);
      hfield += " file='field.bin'/>";
      break;
    case 2:
      write_temp("field.png", payload, npayload);
      hfield += " file='field.png'/>";
      break;
    default: {
      const int nrow = npayload > 0 ? payload[0] % 32 : 0,
                ncol = npayload > 1 ? payload[1] % 32 : 0;
      hfield += " nrow='" + std::to_string(nrow) + "' ncol='" + std::to_string(ncol) + "'";
      if ((mode & 3) == 1) {
        hfield += " elevation='";
        for (int i = 0; i < nrow * ncol; i++) {
          size_t at = 2 + 4 * size_t(i);
          if (i) hfield += ' ';
          hfield += number(at + 4 <= npayload ? read_float(payload + at) : 0.0f);
        }
        hfield += "'";
      }
      hfield += "/>";
    }
  }
  const char* geoms[] = {"type='sphere' size='0.1'", "type='capsule' size='0.1 0.1'",
                         "type='ellipsoid' size='0.1 0.2 0.1'", "type='cylinder' size='0.1 0.1'",
                         "type='box' size='0.1 0.1 0.1'"};
  const int kind = (mode >> 2) & 7;
  std::string geom = kind < 5 ? geoms[kind] : "type='mesh' mesh='m'";
  std::string xml =
      "<mujoco><asset>" + hfield +
      "<mesh name='m' vertex='-.1 -.1 -.1 .1 -.1 -.1 -.1 .1 -.1 .1 .1 -.1 -.1 -.1 .1 .1 -.1 .1 "
      "-.1 .1 .1 .1 .1 .1'/></asset><worldbody><geom type='hfield' hfield='h'/>"
      "<body pos='0 0 " +
      number(z) + "'><freejoint/><geom " + geom + "/></body></worldbody></mujoco>";
  step_model(load_mjcf_string(xml, temp_dir().string()));
}

}  // namespace phx::fuzz

PHX_FUZZ_ENTRY
