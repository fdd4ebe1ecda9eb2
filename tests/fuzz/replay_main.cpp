// Replays stored inputs of a fuzz target (tests/fuzz/fuzz_*.cpp) in the ordinary build, one
// ctest test per target (tests/cpp/CMakeLists.txt): every file of the directories given, except
// the .expect files, goes through the target's run(), and its outcome is checked against the
// file's <name>.expect, whose lines are "loads" (the input loads and steps) or "error: TEXT"
// (run throws an std::exception whose message holds TEXT; several such lines: all of them).
// Anything else that escapes, a crash or a missing .expect fails the test.
//
//     replay_fuzz_urdf tests/fuzz/regressions/urdf tests/fuzz/seeds/urdf
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_common.h"

namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// "" when the input behaves as its .expect says, else what differs
std::string check(const fs::path& input) {
  fs::path expect_path = input.string() + ".expect";
  if (!fs::exists(expect_path)) return "no " + expect_path.filename().string();
  std::vector<std::string> errors;
  bool loads = false;
  std::istringstream lines(read(expect_path));
  for (std::string line; std::getline(lines, line);) {
    if (line == "loads") {
      loads = true;
    } else if (line.rfind("error: ", 0) == 0) {
      errors.push_back(line.substr(7));
    } else if (!line.empty()) {
      return "bad line in " + expect_path.filename().string() + ": '" + line + "'";
    }
  }
  if (loads == !errors.empty()) return expect_path.filename().string() + ": loads or error:";
  std::string data = read(input);
  try {
    phx::fuzz::run(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (loads) return "expected to load, threw: " + what;
    for (const std::string& part : errors)
      if (what.find(part) == std::string::npos) return "'" + part + "' not in: " + what;
    return "";
  }
  return loads ? "" : "expected an error, loaded";
}

}  // namespace

int main(int argc, char** argv) {
  int passed = 0, failed = 0;
  for (int a = 1; a < argc; a++) {
    std::vector<fs::path> inputs;
    for (const fs::directory_entry& e : fs::directory_iterator(argv[a]))
      if (e.is_regular_file() && e.path().extension() != ".expect") inputs.push_back(e.path());
    std::sort(inputs.begin(), inputs.end());
    for (const fs::path& input : inputs) {
      std::string why = check(input);
      std::printf("%s %s%s%s\n", why.empty() ? "ok  " : "FAIL", input.string().c_str(),
                  why.empty() ? "" : ": ", why.c_str());
      (why.empty() ? passed : failed)++;
    }
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed || passed == 0 ? 1 : 0;
}
