// MJCF loader: MuJoCo's compiler (mj_loadXML, or mj_parseXMLString for a string) compiles the
// file, and from_mujoco (host/mujoco_model.cpp) converts the compiled mjModel as compiled.
//
// MuJoCo's messages name the element and the line; they are passed on as one line after the
// path, as are from_mujoco's refusals of physics Phalanx does not simulate. A warning MuJoCo's
// compiler reports (in the error buffer of a model it did compile, or through mju_user_warning
// while it compiles) is recorded in Model::ignored, not printed. Without MuJoCo (cmake/mujoco.cmake
// did not find its headers and library) loading MJCF throws.
#include <stdexcept>
#include <string>

#include "host/model.h"

#ifdef PHX_HAVE_MUJOCO
#include <mujoco/mujoco.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <vector>

#include "host/mujoco_model.h"
#endif

namespace phx {

#ifdef PHX_HAVE_MUJOCO
namespace {

namespace fs = std::filesystem;

// MuJoCo's message on one line: newlines joined with "; ", trailing whitespace dropped
std::string one_line(const std::string& text) {
  std::string out;
  bool pending = false;
  for (char c : text) {
    if (c == '\n' || c == '\r') {
      pending = !out.empty();
      continue;
    }
    if (pending) {
      out += "; ";
      pending = false;
    }
    out += c;
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == '\t')) out.pop_back();
  return out;
}

// mju_user_warning is process-wide: loads take turns, and the warnings of one load are collected
// here instead of MuJoCo's default (stderr and MUJOCO_LOG.TXT)
std::mutex g_load_mutex;
std::vector<std::string>* g_warnings = nullptr;

void collect_warning(const char* msg) {
  if (g_warnings) g_warnings->push_back(one_line(msg ? msg : ""));
}

struct WarningCapture {
  void (*saved)(const char*);
  explicit WarningCapture(std::vector<std::string>* sink) : saved(mju_user_warning) {
    g_warnings = sink;
    mju_user_warning = collect_warning;
  }
  ~WarningCapture() {
    mju_user_warning = saved;
    g_warnings = nullptr;
  }
  WarningCapture(const WarningCapture&) = delete;
  WarningCapture& operator=(const WarningCapture&) = delete;
};

using ModelPtr = std::unique_ptr<mjModel, void (*)(mjModel*)>;

// Compiles with `compile` (which fills the error buffer), converts, and names the model.
template <class Compile>
Model load(const std::string& where, Compile compile) {
  std::vector<std::string> warnings;
  char error[2048] = "";
  ModelPtr m(nullptr, mj_deleteModel);
  {
    std::lock_guard<std::mutex> lock(g_load_mutex);
    WarningCapture capture(&warnings);
    m.reset(compile(error, static_cast<int>(sizeof(error))));
  }
  if (!m) {
    std::string msg = one_line(error);
    throw std::runtime_error(where + ": " +
                             (msg.empty() ? "MuJoCo could not compile the model" : msg));
  }
  if (error[0]) warnings.insert(warnings.begin(), one_line(error));
  Model model;
  try {
    model = from_mujoco(m.get());
  } catch (const std::exception& e) {  // physics Phalanx does not simulate, named by from_mujoco
    throw std::runtime_error(where + ": " + e.what());
  }
  // a warning can arrive both through mju_user_warning and in the error buffer: once each
  for (size_t i = 0; i < warnings.size(); i++) {
    if (std::find(warnings.begin(), warnings.begin() + i, warnings[i]) != warnings.begin() + i)
      continue;
    model.ignored.push_back("MuJoCo compiler warning: " + warnings[i]);
  }
  return model;
}

}  // namespace

Model load_mjcf(const std::string& path) {
  if (!fs::exists(path)) throw std::runtime_error(path + ": cannot open MJCF file");
  Model model = load(
      path, [&](char* error, int size) { return mj_loadXML(path.c_str(), nullptr, error, size); });
  model.source = path;
  return model;
}

// The string is parsed as if it were the file <dir>/<name>, so that <include> files, meshdir,
// texturedir and asset files resolve against dir as they do for a file in dir: it is served from
// a virtual file system holding only it (everything else is read from disk).
Model load_mjcf_string(const std::string& xml, const std::string& dir) {
  fs::path base = dir.empty() ? fs::path(".") : fs::path(dir);
  std::string file = (base / "phalanx_load_mjcf_string.xml").string();
  return load("<string>", [&](char* error, int size) -> mjModel* {
    mjVFS vfs;
    mj_defaultVFS(&vfs);
    mjModel* m = nullptr;
    if (mj_addBufferVFS(&vfs, file.c_str(), xml.data(), static_cast<int>(xml.size())) != 0) {
      snprintf(error, size, "could not hold the string in MuJoCo's virtual file system");
    } else {
      m = mj_loadXML(file.c_str(), &vfs, error, size);
    }
    mj_deleteVFS(&vfs);
    return m;
  });
}

#else  // !PHX_HAVE_MUJOCO

namespace {
[[noreturn]] void no_mujoco() {
  throw std::runtime_error(
      "phalanx was built without MuJoCo (the mujoco Python package's headers and libmujoco): "
      "MJCF cannot be loaded");
}
}  // namespace

Model load_mjcf(const std::string&) {
  no_mujoco();
}

Model load_mjcf_string(const std::string&, const std::string&) {
  no_mujoco();
}

#endif

}  // namespace phx
