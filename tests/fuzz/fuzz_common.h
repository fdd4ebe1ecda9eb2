// Shared parts of the model loaders' fuzz targets (tests/fuzz/fuzz_*.cpp): a private temporary
// directory for the files a target writes, and a few steps of each model that loaded.
//
// Each target defines phx::fuzz::run(data, size), which loads (and steps) one input and throws
// what the loader throws, and LLVMFuzzerTestOneInput, which catches std::exception (a clear
// refusal, the loaders' contract) and lets anything else escape. The replay driver
// (replay_main.cpp, built by the ordinary build) calls run() on the stored inputs.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "host/model.h"
#include "host/view_builder.h"
#include "phalanx/kernels/forward.h"

#ifdef PHX_HAVE_MUJOCO
#include <mujoco/mujoco.h>
#endif

namespace phx::fuzz {

void run(const uint8_t* data, size_t size);

// this process's temporary directory, removed at exit; MuJoCo's asset cache is switched off
// there too, as it keys files by name and modification time, which a target rewriting its file
// within a second would defeat. The path is never destroyed: the exit handler that removes the
// directory is registered before the path is made, so it runs after a static path's destructor
// would have, and would read a freed name.
inline const std::filesystem::path& temp_dir() {
  static const std::filesystem::path* const dir = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "phx_fuzz_XXXXXX").string();
    if (!mkdtemp(pattern.data())) std::abort();
#ifdef PHX_HAVE_MUJOCO
    mj_setCacheCapacity(mj_getCache(), 0);
#endif
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(temp_dir(), ec);
    });
    return new std::filesystem::path(pattern);
  }();
  return *dir;
}

// Mesh and height-field files in temp_dir() that a fuzzed model may name: cube.stl (ASCII, the
// unit cube), tet.obj and field.bin (MuJoCo's height-field format, 3 x 3)
inline void write_assets() {
  static const bool written = [] {
    std::ofstream stl(temp_dir() / "cube.stl"), obj(temp_dir() / "tet.obj");
    stl << "solid cube\n";
    const int quads[6][4] = {{0, 2, 3, 1}, {4, 5, 7, 6}, {0, 1, 5, 4},
                             {2, 6, 7, 3}, {0, 4, 6, 2}, {1, 3, 7, 5}};
    for (const auto& q : quads)
      for (int t = 0; t < 2; t++) {
        stl << "facet normal 0 0 0\nouter loop\n";
        for (int v : {q[0], q[t + 1], q[t + 2]})
          stl << "vertex " << (v & 1) << " " << (v >> 1 & 1) << " " << (v >> 2 & 1) << "\n";
        stl << "endloop\nendfacet\n";
      }
    stl << "endsolid cube\n";
    obj << "v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 3 2\nf 1 2 4\nf 1 4 3\nf 2 3 4\n";
    std::ofstream field(temp_dir() / "field.bin", std::ios::binary);
    const int32_t shape[2] = {3, 3};
    const float heights[9] = {0, 0.5f, 1, 0.25f, 0.5f, 0.75f, 1, 0.5f, 0};
    field.write(reinterpret_cast<const char*>(shape), sizeof shape);
    field.write(reinterpret_cast<const char*>(heights), sizeof heights);
    return true;
  }();
  (void)written;
}

// writes size bytes to temp_dir()/name; returns the path
inline std::string write_temp(const std::string& name, const void* data, size_t size) {
  std::string path = (temp_dir() / name).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) std::abort();
  return path;
}

// A few steps of one environment with every control at 0.5: a model the loader accepted must
// step, or refuse with an std::exception, or set status bits. The step is the core's (step_env,
// on host vectors, as the CPU backend's StepKernel runs it) so that the fuzz build needs no
// backend. Large models are skipped, to keep each input fast.
inline unsigned step_model(const Model& model, int nstep = 3) {
  if (model.nv > 64 || model.ngeom > 64 || model.npair > 256) return 0;
  model.validate();
  ModelView<double> m = build_view<double>(
      model, [](const std::vector<double>& v) { return v.data(); },
      [](const std::vector<int>& v) { return v.data(); });
  for (int k = 0; k < kNumParams; ++k) m.param_nbatch[k] = 1;
  ScratchSize nc = carved_size<ContactView<double>, double>(m), ns = scratch_size(m);
  std::vector<double> reals(size_t(nc.reals + ns.reals));
  std::vector<int> ints(size_t(nc.ints + ns.ints));
  Arena<double> arena(reals.data(), ints.data());
  ContactView<double> cv = ContactView<double>::carve(m, arena);
  StepScratch<double> x =
      step_scratch(m, Scratch<double>{reals.data() + nc.reals, ints.data() + nc.ints});
  std::vector<double> qpos = model.qpos0, qvel(m.nv), act(m.na), ctrl(m.nu, 0.5);
  unsigned bits = 0;
  for (int t = 0; t < nstep && !(bits & kStatusStopMask); ++t)
    bits |= step_env(m, qpos.data(), qvel.data(), act.data(), ctrl.data(), x, cv);
  return bits;
}

}  // namespace phx::fuzz

// The libFuzzer entry of a target, calling its phx::fuzz::run(data, size): a std::exception is a
// refusal, as the loaders promise; anything else escapes and is a finding
#define PHX_FUZZ_ENTRY                                                      \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { \
    try {                                                                   \
      phx::fuzz::run(data, size);                                           \
    } catch (const std::exception&) {                                       \
    }                                                                       \
    return 0;                                                               \
  }
