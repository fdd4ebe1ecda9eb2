// MuJoCo's own compile of a model file or string, for the tests that compare with MuJoCo.
#pragma once

#include <gtest/gtest.h>
#include <mujoco/mujoco.h>

#include <memory>
#include <string>

namespace phx::test {

using ModelPtr = std::unique_ptr<mjModel, void (*)(mjModel*)>;

inline ModelPtr compile_file(const std::string& path) {
  char error[1000] = "";
  mjModel* m = mj_loadXML(path.c_str(), nullptr, error, sizeof(error));
  EXPECT_NE(m, nullptr) << path << ": " << error;
  return ModelPtr(m, mj_deleteModel);
}

inline ModelPtr compile_string(const std::string& xml) {
  char error[1000] = "";
  mjSpec* spec = mj_parseXMLString(xml.c_str(), nullptr, error, sizeof(error));
  EXPECT_NE(spec, nullptr) << error;
  mjModel* m = spec ? mj_compile(spec, nullptr) : nullptr;
  EXPECT_NE(m, nullptr) << (spec ? mjs_getError(spec) : error);
  if (spec) mj_deleteSpec(spec);
  return ModelPtr(m, mj_deleteModel);
}

}  // namespace phx::test
